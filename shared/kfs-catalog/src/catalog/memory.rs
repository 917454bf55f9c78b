//! An Iceberg catalog held in memory, with its pointer swap: namespaces and each
//! table's current metadata location in a map, the metadata and data files written
//! through a FileIO under a warehouse location (a local folder, S3, or `memory://`).
//! Every change to a table is a compare-and-swap of its location under one lock, as a
//! real catalog's commit is. Nothing of the catalog itself outlives the process: for
//! tests, embedding, and runs whose tables are thrown away.

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;
use std::sync::{Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use iceberg::io::FileIO;
use iceberg::spec::{TableMetadata, TableMetadataBuilder};
use iceberg::table::Table;
use iceberg::{
    Catalog, Error, ErrorKind, MetadataLocation, Namespace, NamespaceIdent, Result, Runtime,
    TableCommit, TableCreation, TableIdent,
};

use super::swap::{MetadataPointer, lost_race, publish, read_table, table_handle};

#[derive(Debug, Default)]
struct State {
    namespaces: BTreeMap<NamespaceIdent, HashMap<String, String>>,
    /// Table → its current metadata location.
    tables: BTreeMap<TableIdent, String>,
}

/// The in-memory catalog (see the module's docs).
#[derive(Debug)]
pub struct MemoryTables {
    file_io: FileIO,
    warehouse: String,
    runtime: Runtime,
    state: Mutex<State>,
}

fn no_namespace(namespace: &NamespaceIdent) -> Error {
    Error::new(
        ErrorKind::NamespaceNotFound,
        format!("no namespace {namespace:?}"),
    )
}

fn no_table(table: &TableIdent) -> Error {
    Error::new(ErrorKind::TableNotFound, format!("no table {table}"))
}

impl MemoryTables {
    /// An empty catalog whose tables live under `warehouse` (written through
    /// `file_io`).
    pub fn new(file_io: FileIO, warehouse: &str) -> Result<Self> {
        Ok(Self {
            file_io,
            warehouse: warehouse.trim_end_matches('/').to_owned(),
            runtime: Runtime::try_current()?,
            state: Mutex::default(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn location(&self, table: &TableIdent) -> Result<String> {
        self.state()
            .tables
            .get(table)
            .cloned()
            .ok_or_else(|| no_table(table))
    }

    async fn read(&self, table: &TableIdent, location: String) -> Result<Table> {
        read_table(&self.file_io, self.runtime.clone(), table.clone(), location).await
    }
}

#[async_trait]
impl MetadataPointer for MemoryTables {
    /// The location the table must still be at.
    type Version = String;

    async fn current(&self, table: &TableIdent) -> Result<(String, String)> {
        let location = self.location(table)?;
        Ok((location.clone(), location))
    }

    async fn swap(
        &self,
        table: &TableIdent,
        expected: String,
        _current_location: &str,
        _staged: &TableMetadata,
        staged_location: &str,
    ) -> Result<()> {
        let mut state = self.state();
        let current = state.tables.get_mut(table).ok_or_else(|| no_table(table))?;
        if *current != expected {
            return Err(lost_race(table, "it changed since it was loaded"));
        }
        staged_location.clone_into(current);
        Ok(())
    }
}

#[async_trait]
impl Catalog for MemoryTables {
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> Result<Vec<NamespaceIdent>> {
        // One level of namespaces.
        Ok(match parent {
            Some(_) => Vec::new(),
            None => self.state().namespaces.keys().cloned().collect(),
        })
    }

    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<Namespace> {
        let mut state = self.state();
        if state.namespaces.contains_key(namespace) {
            return Err(Error::new(
                ErrorKind::NamespaceAlreadyExists,
                format!("namespace {namespace:?} exists"),
            ));
        }
        state
            .namespaces
            .insert(namespace.clone(), properties.clone());
        Ok(Namespace::with_properties(namespace.clone(), properties))
    }

    async fn get_namespace(&self, namespace: &NamespaceIdent) -> Result<Namespace> {
        let state = self.state();
        let properties = state
            .namespaces
            .get(namespace)
            .ok_or_else(|| no_namespace(namespace))?;
        Ok(Namespace::with_properties(
            namespace.clone(),
            properties.clone(),
        ))
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        Ok(self.state().namespaces.contains_key(namespace))
    }

    async fn update_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<()> {
        let mut state = self.state();
        let current = state
            .namespaces
            .get_mut(namespace)
            .ok_or_else(|| no_namespace(namespace))?;
        *current = properties;
        Ok(())
    }

    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        let mut state = self.state();
        if state.tables.keys().any(|t| t.namespace() == namespace) {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!("namespace {namespace:?} is not empty"),
            ));
        }
        state
            .namespaces
            .remove(namespace)
            .map(|_| ())
            .ok_or_else(|| no_namespace(namespace))
    }

    async fn list_tables(&self, namespace: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        let state = self.state();
        if !state.namespaces.contains_key(namespace) {
            return Err(no_namespace(namespace));
        }
        Ok(state
            .tables
            .keys()
            .filter(|t| t.namespace() == namespace)
            .cloned()
            .collect())
    }

    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        mut creation: TableCreation,
    ) -> Result<Table> {
        let ident = TableIdent::new(namespace.clone(), creation.name.clone());
        if !self.namespace_exists(namespace).await? {
            return Err(no_namespace(namespace));
        }
        let table_location = creation.location.clone().unwrap_or_else(|| {
            format!(
                "{}/{}/{}",
                self.warehouse,
                namespace.to_url_string(),
                creation.name
            )
        });
        creation.location = Some(table_location.clone());
        let metadata = TableMetadataBuilder::from_table_creation(creation)?
            .build()?
            .metadata;
        let location = MetadataLocation::new_with_metadata(table_location, &metadata);
        metadata.write_to(&self.file_io, &location).await?;
        let location = location.to_string();
        {
            let mut state = self.state();
            if state.tables.contains_key(&ident) {
                return Err(Error::new(
                    ErrorKind::TableAlreadyExists,
                    format!("table {ident} exists"),
                ));
            }
            state.tables.insert(ident.clone(), location.clone());
        }
        table_handle(
            &self.file_io,
            self.runtime.clone(),
            ident,
            location,
            metadata,
        )
    }

    async fn load_table(&self, table: &TableIdent) -> Result<Table> {
        let location = self.location(table)?;
        self.read(table, location).await
    }

    async fn drop_table(&self, table: &TableIdent) -> Result<()> {
        self.state()
            .tables
            .remove(table)
            .map(|_| ())
            .ok_or_else(|| no_table(table))
    }

    async fn purge_table(&self, table: &TableIdent) -> Result<()> {
        self.drop_table(table).await
    }

    async fn table_exists(&self, table: &TableIdent) -> Result<bool> {
        Ok(self.state().tables.contains_key(table))
    }

    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> Result<()> {
        let mut state = self.state();
        if state.tables.contains_key(dest) {
            return Err(Error::new(
                ErrorKind::TableAlreadyExists,
                format!("table {dest} exists"),
            ));
        }
        let location = state.tables.remove(src).ok_or_else(|| no_table(src))?;
        state.tables.insert(dest.clone(), location);
        Ok(())
    }

    async fn register_table(&self, table: &TableIdent, metadata_location: String) -> Result<Table> {
        {
            let mut state = self.state();
            if state.tables.contains_key(table) {
                return Err(Error::new(
                    ErrorKind::TableAlreadyExists,
                    format!("table {table} exists"),
                ));
            }
            state
                .tables
                .insert(table.clone(), metadata_location.clone());
        }
        self.read(table, metadata_location).await
    }

    async fn update_table(&self, commit: TableCommit) -> Result<Table> {
        let ident = commit.identifier().clone();
        let current = self.load_table(&ident).await?;
        let expected = current.metadata_location_result()?.to_owned();
        let staged = commit.apply(current)?;
        let location = MetadataLocation::from_str(staged.metadata_location_result()?)?;
        publish(
            self,
            &self.file_io,
            &ident,
            expected.clone(),
            &expected,
            staged.metadata().clone(),
            location,
        )
        .await
    }
}

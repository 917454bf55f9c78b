//! Committing a table change given as data (requirements plus updates), with the
//! catalog's own compare-and-swap. iceberg-rust 0.10.1 builds such commits only inside
//! its transactions (the `TableCommit` builder is crate-private), and has no action for
//! replace snapshots: compaction and manifest rewrites stage their updates here and
//! swap the metadata pointer per catalog: the row of the SQL catalog, Glue's
//! `UpdateTable` with `VersionId` (in [`crate::glue`]), the REST commit endpoint.

use std::collections::HashMap;
use std::str::FromStr;

use async_trait::async_trait;
use iceberg::Runtime;
use iceberg::spec::TableMetadata;
use iceberg::table::Table;
use iceberg::{
    Catalog, Error, ErrorKind, MetadataLocation, Namespace, NamespaceIdent, Result, TableCommit,
    TableCreation, TableIdent, TableRequirement, TableUpdate,
};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};

/// Checks the requirements against `current` and applies the updates: the metadata
/// the commit would publish, and the location of its next version. No I/O.
pub fn stage_updates(
    current: &TableMetadata,
    current_location: &str,
    requirements: &[TableRequirement],
    updates: Vec<TableUpdate>,
) -> Result<(TableMetadata, MetadataLocation)> {
    for requirement in requirements {
        requirement.check(Some(current))?;
    }
    let mut builder = current
        .clone()
        .into_builder(Some(current_location.to_owned()));
    for update in updates {
        builder = update.apply(builder)?;
    }
    let staged = builder.build()?.metadata;
    let location = MetadataLocation::from_str(current_location)?
        .with_next_version()
        .with_new_metadata(&staged);
    Ok((staged, location))
}

/// A table handle: metadata read from (or written to) `location`, with the FileIO and
/// runtime it is used with.
pub fn table_handle(
    file_io: &iceberg::io::FileIO,
    runtime: Runtime,
    ident: TableIdent,
    location: String,
    metadata: TableMetadata,
) -> Result<Table> {
    Table::builder()
        .file_io(file_io.clone())
        .runtime(runtime)
        .metadata_location(location)
        .metadata(metadata)
        .identifier(ident)
        .build()
}

/// Swaps a table's metadata pointer to the result of requirements plus updates, or
/// fails with `CatalogCommitConflicts` (retryable) when the table moved.
#[async_trait]
pub trait TableSwap: Send + Sync {
    /// Commits against `table` (as loaded); returns the table as committed.
    async fn commit(
        &self,
        table: &Table,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> Result<Table>;
}

/// The pointer swap of the Iceberg SQL catalog on SQLite: the same conditional
/// `UPDATE` of the `iceberg_tables` row that iceberg-rust's SQL catalog runs.
#[derive(Debug, Clone)]
pub struct SqlTableSwap {
    pool: SqlPool,
    catalog_name: String,
}

/// The database of a SQL catalog.
#[derive(Debug, Clone)]
enum SqlPool {
    Sqlite(SqlitePool),
    Postgres(sqlx::PgPool),
}

/// The pointer swap: the new location where the row still holds the old one.
const SWAP_SQLITE: &str = "UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ? \
     WHERE catalog_name = ? AND table_name = ? AND table_namespace = ? \
     AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL) AND metadata_location = ?";
/// [`SWAP_SQLITE`] with PostgreSQL's placeholders.
const SWAP_POSTGRES: &str = "UPDATE iceberg_tables SET metadata_location = $1, previous_metadata_location = $2 \
     WHERE catalog_name = $3 AND table_name = $4 AND table_namespace = $5 \
     AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL) AND metadata_location = $6";

fn opening(database: &str, e: sqlx::Error) -> Error {
    Error::new(
        ErrorKind::Unexpected,
        format!("opening catalog {database}: {e}"),
    )
    .with_retryable(true)
}

impl SqlTableSwap {
    /// Opens the catalog's SQLite file (which must exist).
    pub async fn open(database: &std::path::Path, catalog_name: &str) -> Result<Self> {
        let options = SqliteConnectOptions::new()
            .filename(database)
            .busy_timeout(std::time::Duration::from_secs(30));
        // No pool maintenance task (launchbadge/sqlx#3645; see `open_sql_catalog`).
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(options)
            .await
            .map_err(|e| opening(&database.display().to_string(), e))?;
        Ok(Self {
            pool: SqlPool::Sqlite(pool),
            catalog_name: catalog_name.to_owned(),
        })
    }

    /// Opens the catalog's PostgreSQL database at `url`.
    pub async fn open_postgres(url: &str, catalog_name: &str) -> Result<Self> {
        // The URL may hold a password: errors name the host, never the URL.
        let host = url
            .rsplit_once('@')
            .map_or("the PostgreSQL catalog", |(_, host)| host);
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect(url)
            .await
            .map_err(|e| opening(host, e))?;
        Ok(Self {
            pool: SqlPool::Postgres(pool),
            catalog_name: catalog_name.to_owned(),
        })
    }
}

#[async_trait]
impl TableSwap for SqlTableSwap {
    async fn commit(
        &self,
        table: &Table,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> Result<Table> {
        let current_location = table.metadata_location_result()?.to_owned();
        let (staged, location) =
            stage_updates(table.metadata(), &current_location, &requirements, updates)?;
        staged.write_to(table.file_io(), &location).await?;
        let ident: &TableIdent = table.identifier();
        let values = [
            location.to_string(),
            current_location.clone(),
            self.catalog_name.clone(),
            ident.name().to_owned(),
            ident.namespace().join("."),
            current_location.clone(),
        ];
        let swapped = match &self.pool {
            SqlPool::Sqlite(pool) => {
                let mut query = sqlx::query(SWAP_SQLITE);
                for value in &values {
                    query = query.bind(value);
                }
                query.execute(pool).await.map(|r| r.rows_affected())
            }
            SqlPool::Postgres(pool) => {
                let mut query = sqlx::query(SWAP_POSTGRES);
                for value in &values {
                    query = query.bind(value);
                }
                query.execute(pool).await.map(|r| r.rows_affected())
            }
        }
        .map_err(|e| {
            Error::new(ErrorKind::Unexpected, format!("commit to {ident}: {e}"))
                .with_retryable(true)
        })?;
        if swapped != 1 {
            let _ = crate::failpoint::delete_file(table.file_io(), &location.to_string()).await;
            return Err(Error::new(
                ErrorKind::CatalogCommitConflicts,
                format!("commit to {ident} lost a race: the table moved"),
            )
            .with_retryable(true));
        }
        table_handle(
            table.file_io(),
            Runtime::try_current()?,
            ident.clone(),
            location.to_string(),
            staged,
        )
    }
}

/// A catalog view that pins one table at the version a plan was made on.
///
/// iceberg-rust's `Transaction::commit` re-reads the table and, when it moved, re-applies
/// its actions on the new version: an append planned against one snapshot would be
/// committed on top of whatever landed meanwhile (the same segments from a racing
/// committer included). Committing through this view makes the re-read return the
/// planned version, so the commit carries `assert-ref-snapshot-id` for the snapshot the
/// plan saw, and the catalog's own compare-and-swap rejects it if the table moved.
pub struct PinnedCatalog<'a> {
    inner: &'a dyn Catalog,
    pinned: Table,
}

impl<'a> PinnedCatalog<'a> {
    /// `inner`, with `pinned` returned for its table.
    pub fn new(inner: &'a dyn Catalog, pinned: Table) -> Self {
        Self { inner, pinned }
    }
}

impl std::fmt::Debug for PinnedCatalog<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PinnedCatalog({})", self.pinned.identifier())
    }
}

#[async_trait]
impl Catalog for PinnedCatalog<'_> {
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> Result<Vec<NamespaceIdent>> {
        self.inner.list_namespaces(parent).await
    }

    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<Namespace> {
        self.inner.create_namespace(namespace, properties).await
    }

    async fn get_namespace(&self, namespace: &NamespaceIdent) -> Result<Namespace> {
        self.inner.get_namespace(namespace).await
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        self.inner.namespace_exists(namespace).await
    }

    async fn update_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<()> {
        self.inner.update_namespace(namespace, properties).await
    }

    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        self.inner.drop_namespace(namespace).await
    }

    async fn list_tables(&self, namespace: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        self.inner.list_tables(namespace).await
    }

    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> Result<Table> {
        self.inner.create_table(namespace, creation).await
    }

    async fn load_table(&self, table: &TableIdent) -> Result<Table> {
        if table == self.pinned.identifier() {
            return Ok(self.pinned.clone());
        }
        self.inner.load_table(table).await
    }

    async fn drop_table(&self, table: &TableIdent) -> Result<()> {
        self.inner.drop_table(table).await
    }

    async fn purge_table(&self, table: &TableIdent) -> Result<()> {
        self.inner.purge_table(table).await
    }

    async fn table_exists(&self, table: &TableIdent) -> Result<bool> {
        self.inner.table_exists(table).await
    }

    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> Result<()> {
        self.inner.rename_table(src, dest).await
    }

    async fn register_table(&self, table: &TableIdent, metadata_location: String) -> Result<Table> {
        self.inner.register_table(table, metadata_location).await
    }

    async fn update_table(&self, commit: TableCommit) -> Result<Table> {
        self.inner.update_table(commit).await
    }
}

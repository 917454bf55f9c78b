//! A catalog that answers some calls itself and hands every other one to an inner
//! catalog: written once for the Glue catalog (its own creation, loading and commits)
//! and the pinned append (its own loading).

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use iceberg::table::Table;
use iceberg::{Catalog, Namespace, NamespaceIdent, Result, TableCommit, TableCreation, TableIdent};

/// The calls a wrapping catalog may answer itself; each defaults to [`Self::inner`].
/// [`Overridden`] turns an implementation into an [`iceberg::Catalog`].
#[async_trait]
pub trait CatalogOverrides: std::fmt::Debug + Send + Sync {
    /// The catalog every call not answered here goes to.
    fn inner(&self) -> &dyn Catalog;

    /// Creates a table.
    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> Result<Table> {
        self.inner().create_table(namespace, creation).await
    }

    /// Loads a table.
    async fn load_table(&self, table: &TableIdent) -> Result<Table> {
        self.inner().load_table(table).await
    }

    /// Commits a change built by an iceberg-rust transaction.
    async fn update_table(&self, commit: TableCommit) -> Result<Table> {
        self.inner().update_table(commit).await
    }
}

#[async_trait]
impl<O: CatalogOverrides + ?Sized> CatalogOverrides for Arc<O> {
    fn inner(&self) -> &dyn Catalog {
        self.as_ref().inner()
    }

    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> Result<Table> {
        self.as_ref().create_table(namespace, creation).await
    }

    async fn load_table(&self, table: &TableIdent) -> Result<Table> {
        self.as_ref().load_table(table).await
    }

    async fn update_table(&self, commit: TableCommit) -> Result<Table> {
        self.as_ref().update_table(commit).await
    }
}

/// A [`CatalogOverrides`] as a catalog: its own answers where it has them, the inner
/// catalog's everywhere else.
#[derive(Debug)]
pub struct Overridden<O>(pub O);

#[async_trait]
impl<O: CatalogOverrides> Catalog for Overridden<O> {
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> Result<Vec<NamespaceIdent>> {
        self.0.inner().list_namespaces(parent).await
    }

    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<Namespace> {
        self.0.inner().create_namespace(namespace, properties).await
    }

    async fn get_namespace(&self, namespace: &NamespaceIdent) -> Result<Namespace> {
        self.0.inner().get_namespace(namespace).await
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        self.0.inner().namespace_exists(namespace).await
    }

    async fn update_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<()> {
        self.0.inner().update_namespace(namespace, properties).await
    }

    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        self.0.inner().drop_namespace(namespace).await
    }

    async fn list_tables(&self, namespace: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        self.0.inner().list_tables(namespace).await
    }

    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> Result<Table> {
        self.0.create_table(namespace, creation).await
    }

    async fn load_table(&self, table: &TableIdent) -> Result<Table> {
        self.0.load_table(table).await
    }

    async fn drop_table(&self, table: &TableIdent) -> Result<()> {
        self.0.inner().drop_table(table).await
    }

    async fn purge_table(&self, table: &TableIdent) -> Result<()> {
        self.0.inner().purge_table(table).await
    }

    async fn table_exists(&self, table: &TableIdent) -> Result<bool> {
        self.0.inner().table_exists(table).await
    }

    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> Result<()> {
        self.0.inner().rename_table(src, dest).await
    }

    async fn register_table(&self, table: &TableIdent, metadata_location: String) -> Result<Table> {
        self.0
            .inner()
            .register_table(table, metadata_location)
            .await
    }

    async fn update_table(&self, commit: TableCommit) -> Result<Table> {
        self.0.update_table(commit).await
    }
}

//! A catalog that serves one table as loaded (the pinned append: iceberg-rust's
//! transaction commits against exactly the table the plan was made on).

use async_trait::async_trait;
use iceberg::table::Table;
use iceberg::{Catalog, Namespace, NamespaceIdent, Result, TableCommit, TableCreation, TableIdent};
use std::collections::HashMap;

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

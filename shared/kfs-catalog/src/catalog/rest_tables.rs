//! The Iceberg REST catalog with OAuth2 tokens that are renewed: iceberg-rust 0.10.1's
//! REST client fetches a client-credentials token once and keeps it for the life of the
//! process, so a Lambda container outliving the token (Polaris issues one-hour tokens)
//! would fail every request until it is recycled. [`RestTables`] fetches a new token
//! when the current one is older than [`TOKEN_REFRESH_AFTER`], and when the server
//! answers 401: a read is retried once with the new token; a commit or a table creation
//! (which cannot be replayed: the client consumes it) fails retryably, and the caller
//! redoes it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use iceberg::table::Table;
use iceberg::{Catalog, Namespace, NamespaceIdent, Result, TableCommit, TableCreation, TableIdent};
use iceberg_catalog_rest::RestCatalog;

/// Age after which a token is renewed before the next request (tokens commonly live an
/// hour).
pub const TOKEN_REFRESH_AFTER: Duration = Duration::from_secs(30 * 60);

/// A REST catalog whose client-credentials token is renewed.
#[derive(Debug)]
pub struct RestTables {
    inner: RestCatalog,
    fetched: Mutex<Instant>,
}

/// True when the answer may be a refused token: an unexpected answer with no cause
/// attached, which is how iceberg-rust 0.10 reports an HTTP status it does not handle
/// (401 among them; it keeps the status only in the text of its message, which is
/// not read here). Renewing the token and asking once more costs one token request
/// when the cause was another status.
fn unauthorized(error: &iceberg::Error) -> bool {
    error.kind() == iceberg::ErrorKind::Unexpected
        && !error.retryable()
        && std::error::Error::source(error).is_none()
}

impl RestTables {
    /// Wraps `inner`, whose token is taken as fetched now.
    pub fn new(inner: RestCatalog) -> Self {
        Self {
            inner,
            fetched: Mutex::new(Instant::now()),
        }
    }

    async fn renew(&self) -> Result<()> {
        self.inner.regenerate_token().await?;
        *self
            .fetched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Instant::now();
        Ok(())
    }

    /// Renews the token if it is old.
    async fn fresh(&self) -> Result<()> {
        let age = self
            .fetched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .elapsed();
        if age >= TOKEN_REFRESH_AFTER {
            self.renew().await?;
        }
        Ok(())
    }

    /// Runs a request that cannot be repeated (its input is consumed): after a 401 the
    /// token is renewed and the error is retryable, for the caller to redo it.
    async fn once<T>(&self, request: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        self.fresh().await?;
        match request.await {
            Err(e) if unauthorized(&e) => {
                self.renew().await?;
                Err(e.with_retryable(true))
            }
            answer => answer,
        }
    }

    /// Runs a request that can be repeated, with a renewed token after a 401.
    async fn call<T, F>(&self, request: impl Fn() -> F) -> Result<T>
    where
        F: std::future::Future<Output = Result<T>>,
    {
        self.fresh().await?;
        match request().await {
            Err(e) if unauthorized(&e) => {
                self.renew().await?;
                request().await
            }
            answer => answer,
        }
    }
}

#[async_trait]
impl Catalog for RestTables {
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> Result<Vec<NamespaceIdent>> {
        self.call(|| self.inner.list_namespaces(parent)).await
    }
    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<Namespace> {
        self.call(|| self.inner.create_namespace(namespace, properties.clone()))
            .await
    }
    async fn get_namespace(&self, namespace: &NamespaceIdent) -> Result<Namespace> {
        self.call(|| self.inner.get_namespace(namespace)).await
    }
    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        self.call(|| self.inner.namespace_exists(namespace)).await
    }
    async fn update_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<()> {
        self.call(|| self.inner.update_namespace(namespace, properties.clone()))
            .await
    }
    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        self.call(|| self.inner.drop_namespace(namespace)).await
    }
    async fn list_tables(&self, namespace: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        self.call(|| self.inner.list_tables(namespace)).await
    }
    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> Result<Table> {
        self.once(self.inner.create_table(namespace, creation))
            .await
    }
    async fn load_table(&self, table: &TableIdent) -> Result<Table> {
        self.call(|| self.inner.load_table(table)).await
    }
    async fn drop_table(&self, table: &TableIdent) -> Result<()> {
        self.call(|| self.inner.drop_table(table)).await
    }
    async fn purge_table(&self, table: &TableIdent) -> Result<()> {
        self.call(|| self.inner.purge_table(table)).await
    }
    async fn table_exists(&self, table: &TableIdent) -> Result<bool> {
        self.call(|| self.inner.table_exists(table)).await
    }
    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> Result<()> {
        self.call(|| self.inner.rename_table(src, dest)).await
    }
    async fn register_table(&self, table: &TableIdent, metadata_location: String) -> Result<Table> {
        self.call(|| self.inner.register_table(table, metadata_location.clone()))
            .await
    }
    async fn update_table(&self, commit: TableCommit) -> Result<Table> {
        self.once(self.inner.update_table(commit)).await
    }
}

//! The faulty wrappers of the pipeline's side effects: the schema registry, the
//! source, the ledger, the catalog and the pointer swap, each failing as its
//! [`Faults`] say, before or after the effect.

use super::*;

/// A schema registry under one process's faults: a failed read is a registry that
/// cannot answer (transient), as the HTTP client reports one.
#[derive(Debug)]
pub struct FaultyRegistry {
    pub inner: Arc<kfs_core::MemoryRegistry>,
    pub faults: Arc<Faults>,
}

#[async_trait]
impl kfs_core::SchemaRegistry for FaultyRegistry {
    async fn schema(
        &self,
        id: kfs_core::SchemaId,
    ) -> Result<Option<kfs_core::RegisteredSchema>, kfs_core::RegistryError> {
        faulty(
            &self.faults,
            Step::RegistryRead,
            |message| kfs_core::RegistryError {
                location: "memory".into(),
                message,
                kind: kfs_core::ErrorKind::Transient,
            },
            self.inner.schema(id),
        )
        .await
    }
}

pub struct FaultySource<'a> {
    pub inner: &'a MemorySource,
    pub faults: Arc<Faults>,
}

pub fn source_error(message: String) -> SourceError {
    SourceError {
        location: "memory".into(),
        message,
        kind: kfs_core::ErrorKind::Transient,
    }
}

impl SegmentSource for FaultySource<'_> {
    async fn list(&self) -> Result<Vec<SourceObject>, SourceError> {
        self.inner.list().await
    }
    async fn list_dirs(&self, dir: &str) -> Result<Vec<String>, SourceError> {
        self.inner.list_dirs(dir).await
    }
    async fn list_files(
        &self,
        dir: &str,
        start_after: Option<&str>,
    ) -> Result<kfs_core::ObjectStream, SourceError> {
        self.inner.list_files(dir, start_after).await
    }
    async fn read(&self, key: &str) -> Result<Vec<u8>, SourceError> {
        faulty(
            &self.faults,
            Step::SegmentRead,
            source_error,
            self.inner.read(key),
        )
        .await
    }
    async fn read_range(
        &self,
        key: &str,
        range: std::ops::Range<u64>,
    ) -> Result<Vec<u8>, SourceError> {
        self.inner.read_range(key, range).await
    }
    async fn open(&self, key: &str, etag: Option<&str>) -> Result<SegmentStream, SourceError> {
        faulty(
            &self.faults,
            Step::SegmentRead,
            source_error,
            self.inner.open(key, etag),
        )
        .await
    }
    async fn stat(&self, key: &str) -> Result<Option<SourceObject>, SourceError> {
        self.inner.stat(key).await
    }
    fn describe(&self, key: &str) -> String {
        self.inner.describe(key)
    }
}

/// One process's faults on its ledger calls; with `retried_inserts`, every insert is
/// sent twice, as a client retries after a lost response whose first attempt landed.
pub struct LedgerFaults {
    pub faults: Arc<Faults>,
    pub retried_inserts: bool,
}

/// The ledger under one process's faults.
pub type FaultyLedger<'a> = Probed<'a, SqliteLedger, LedgerFaults>;

/// `inner` under `faults`, each insert sent twice with `retried_inserts`.
pub fn faulty_ledger(
    inner: &SqliteLedger,
    faults: Arc<Faults>,
    retried_inserts: bool,
) -> FaultyLedger<'_> {
    Probed {
        inner,
        probe: LedgerFaults {
            faults,
            retried_inserts,
        },
    }
}

pub fn ledger_error(message: String) -> LedgerError {
    LedgerError::Store {
        message,
        kind: kfs_core::ErrorKind::Transient,
    }
}

impl Probe<SqliteLedger> for LedgerFaults {
    async fn insert(
        &self,
        inner: &SqliteLedger,
        entry: &LedgerEntry,
    ) -> Result<InsertOutcome, LedgerError> {
        let first = faulty(
            &self.faults,
            Step::LedgerInsert,
            ledger_error,
            inner.insert(entry),
        )
        .await?;
        if self.retried_inserts {
            return inner.insert(entry).await;
        }
        Ok(first)
    }
    async fn end_attempt(&self, inner: &SqliteLedger, segment: &str) -> Result<(), LedgerError> {
        // A process that crashed never ends what it began: its attempt stays open,
        // as it does when a function dies out of memory or at its timeout.
        if self.faults.crashed() {
            return Err(ledger_error("injected: the process has crashed".into()));
        }
        inner.end_attempt(segment).await
    }
    async fn mark_committed(
        &self,
        inner: &SqliteLedger,
        entries: &[&LedgerEntry],
        snapshot_id: i64,
        now_ms: i64,
    ) -> Result<usize, LedgerError> {
        faulty(
            &self.faults,
            Step::MarkCommitted,
            ledger_error,
            inner.mark_committed(entries, snapshot_id, now_ms),
        )
        .await
    }
}

pub struct FaultyCatalog {
    pub inner: Arc<dyn Catalog>,
    pub faults: Arc<Faults>,
}

impl std::fmt::Debug for FaultyCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FaultyCatalog({:?})", self.faults)
    }
}

#[async_trait]
impl Catalog for FaultyCatalog {
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> iceberg::Result<Vec<NamespaceIdent>> {
        self.inner.list_namespaces(parent).await
    }
    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> iceberg::Result<Namespace> {
        self.inner.create_namespace(namespace, properties).await
    }
    async fn get_namespace(&self, namespace: &NamespaceIdent) -> iceberg::Result<Namespace> {
        self.inner.get_namespace(namespace).await
    }
    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> iceberg::Result<bool> {
        self.inner.namespace_exists(namespace).await
    }
    async fn update_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> iceberg::Result<()> {
        self.inner.update_namespace(namespace, properties).await
    }
    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> iceberg::Result<()> {
        self.inner.drop_namespace(namespace).await
    }
    async fn list_tables(&self, namespace: &NamespaceIdent) -> iceberg::Result<Vec<TableIdent>> {
        self.inner.list_tables(namespace).await
    }
    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> iceberg::Result<Table> {
        let faults = &self.faults;
        faulty(
            faults,
            Step::TableCreate,
            |what| faults.iceberg_error(what),
            self.inner.create_table(namespace, creation),
        )
        .await
    }
    async fn load_table(&self, table: &TableIdent) -> iceberg::Result<Table> {
        if self.faults.crashed.load(Ordering::SeqCst) {
            return Err(self.faults.iceberg_error("the process has crashed".into()));
        }
        self.inner.load_table(table).await
    }
    async fn drop_table(&self, table: &TableIdent) -> iceberg::Result<()> {
        self.inner.drop_table(table).await
    }
    async fn purge_table(&self, table: &TableIdent) -> iceberg::Result<()> {
        self.inner.purge_table(table).await
    }
    async fn table_exists(&self, table: &TableIdent) -> iceberg::Result<bool> {
        self.inner.table_exists(table).await
    }
    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> iceberg::Result<()> {
        self.inner.rename_table(src, dest).await
    }
    async fn register_table(
        &self,
        table: &TableIdent,
        metadata_location: String,
    ) -> iceberg::Result<Table> {
        self.inner.register_table(table, metadata_location).await
    }
    async fn update_table(&self, commit: TableCommit) -> iceberg::Result<Table> {
        let faults = &self.faults;
        faults.outside_first().await;
        faulty(
            faults,
            Step::CatalogCommit,
            |what| faults.iceberg_error(what),
            self.inner.update_table(commit),
        )
        .await
    }
}

/// The pointer swap of replace snapshots (compaction, manifest rewrites), faulty.
pub struct FaultySwap {
    pub inner: SqlTableSwap,
    pub faults: Arc<Faults>,
}

#[async_trait]
impl TableSwap for FaultySwap {
    async fn commit(
        &self,
        table: &Table,
        requirements: Vec<iceberg::TableRequirement>,
        updates: Vec<iceberg::TableUpdate>,
    ) -> iceberg::Result<Table> {
        let faults = &self.faults;
        faults.outside_first().await;
        faulty(
            faults,
            Step::CompactionCommit,
            |what| faults.iceberg_error(what),
            self.inner.commit(table, requirements, updates),
        )
        .await
    }
}

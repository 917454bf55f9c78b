//! Fault injection around the pipeline's side effects, shared by the crash matrix and
//! the seeded simulation: wrappers of the source, the ledger and the catalog that crash,
//! fail or time out before or after the effect, the workload, and the invariant check.

#![allow(dead_code, missing_docs)] // each test uses part of it

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use async_trait::async_trait;
use iceberg::table::Table;
use iceberg::{
    Catalog, Error, ErrorKind, Namespace, NamespaceIdent, TableCommit, TableCreation, TableIdent,
};
use kfs_core::catalog::table_ident;
use kfs_core::committer::table_watermarks;
use kfs_core::convert::SegmentStream;
use kfs_core::ledger::{EntryState, InsertOutcome, Ledger, LedgerEntry, LedgerError, SqliteLedger};
use kfs_core::source::{MemorySource, SegmentSource, SourceError, SourceObject};
use kfs_plan::keys::{SegmentFile, SegmentKey};
use kfs_plan::naming::TableNaming;
use kfs_segment::{BatchSpec, Compression, OwnedRecord, encode_segment};

pub const PARTITIONS: i32 = 2;
pub const SEGMENTS: i64 = 3;
pub const RECORDS: i64 = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    SegmentRead,
    TableCreate,
    LedgerInsert,
    CatalogCommit,
    MarkCommitted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    CrashBefore,
    CrashAfter,
    ErrorBefore,
    ErrorAfter,
    TimeoutAfter,
}

/// One fault: `mode` at the `occurrence`-th call of `step`; shared by the wrappers of
/// one process.
#[derive(Debug)]
pub struct Faults {
    step: Step,
    mode: Mode,
    occurrence: usize,
    calls: AtomicUsize,
    crashed: AtomicBool,
    /// Whether the fault happened.
    pub fired: AtomicBool,
}

/// What a wrapped call does.
pub enum Plan {
    /// Call through and return what it returns.
    Pass,
    /// Fail without calling through.
    FailBefore(String),
    /// Call through, then fail.
    FailAfter(String),
}

impl Faults {
    /// `mode` at the `occurrence`-th call of `step` (0: never).
    pub fn new(step: Step, mode: Mode, occurrence: usize) -> Arc<Self> {
        Arc::new(Self {
            step,
            mode,
            occurrence,
            calls: AtomicUsize::new(0),
            crashed: AtomicBool::new(false),
            fired: AtomicBool::new(false),
        })
    }

    fn plan(&self, step: Step) -> Plan {
        if self.crashed.load(Ordering::SeqCst) {
            return Plan::FailBefore("injected: the process has crashed".into());
        }
        if step != self.step || self.calls.fetch_add(1, Ordering::SeqCst) + 1 != self.occurrence {
            return Plan::Pass;
        }
        self.fired.store(true, Ordering::SeqCst);
        let what = format!("injected {:?} at {step:?}", self.mode);
        match self.mode {
            Mode::CrashBefore => {
                self.crashed.store(true, Ordering::SeqCst);
                Plan::FailBefore(what)
            }
            Mode::ErrorBefore => Plan::FailBefore(what),
            Mode::CrashAfter => {
                self.crashed.store(true, Ordering::SeqCst);
                Plan::FailAfter(what)
            }
            Mode::ErrorAfter | Mode::TimeoutAfter => Plan::FailAfter(what),
        }
    }

    fn iceberg_error(&self, what: String) -> Error {
        let kind = match self.mode {
            Mode::TimeoutAfter => "timed out",
            _ => "failed",
        };
        Error::new(ErrorKind::Unexpected, format!("{what}: {kind}")).with_retryable(true)
    }
}

/// Runs `call` under the fault plan of `step`, turning injected failures into `fail`.
pub async fn faulty<T, E>(
    faults: &Faults,
    step: Step,
    fail: impl Fn(String) -> E,
    call: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, E> {
    match faults.plan(step) {
        Plan::Pass => call.await,
        Plan::FailBefore(what) => Err(fail(what)),
        Plan::FailAfter(what) => {
            call.await?;
            Err(fail(what))
        }
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
        retryable: true,
    }
}

impl SegmentSource for FaultySource<'_> {
    async fn list(&self) -> Result<Vec<SourceObject>, SourceError> {
        self.inner.list().await
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

pub struct FaultyLedger<'a> {
    pub inner: &'a SqliteLedger,
    pub faults: Arc<Faults>,
}

pub fn ledger_error(message: String) -> LedgerError {
    LedgerError::Store {
        message,
        retryable: true,
    }
}

impl Ledger for FaultyLedger<'_> {
    async fn get(&self, segment: &str) -> Result<Option<LedgerEntry>, LedgerError> {
        self.inner.get(segment).await
    }
    async fn insert(&self, entry: &LedgerEntry) -> Result<InsertOutcome, LedgerError> {
        faulty(
            &self.faults,
            Step::LedgerInsert,
            ledger_error,
            self.inner.insert(entry),
        )
        .await
    }
    async fn list(
        &self,
        state: Option<&str>,
        table: Option<&str>,
    ) -> Result<Vec<LedgerEntry>, LedgerError> {
        self.inner.list(state, table).await
    }
    async fn mark_committed(
        &self,
        segments: &[String],
        snapshot_id: i64,
        now_ms: i64,
    ) -> Result<usize, LedgerError> {
        faulty(
            &self.faults,
            Step::MarkCommitted,
            ledger_error,
            self.inner.mark_committed(segments, snapshot_id, now_ms),
        )
        .await
    }
    async fn release_quarantined(&self, segment: &str) -> Result<bool, LedgerError> {
        self.inner.release_quarantined(segment).await
    }
    async fn skip_quarantined(&self, segment: &str, now_ms: i64) -> Result<bool, LedgerError> {
        self.inner.skip_quarantined(segment, now_ms).await
    }
}

pub struct FaultyCatalog<'a> {
    pub inner: &'a dyn Catalog,
    pub faults: Arc<Faults>,
}

impl std::fmt::Debug for FaultyCatalog<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FaultyCatalog({:?})", self.faults)
    }
}

#[async_trait]
impl Catalog for FaultyCatalog<'_> {
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
        faulty(
            faults,
            Step::CatalogCommit,
            |what| faults.iceberg_error(what),
            self.inner.update_table(commit),
        )
        .await
    }
}

pub fn segment(base: i64) -> Result<Vec<u8>, kfs_segment::EncodeError> {
    let records = (base..base + RECORDS)
        .map(|offset| OwnedRecord {
            offset,
            timestamp_ms: 1_700_000_000_000 + offset,
            key: Some(format!("k{offset}").into_bytes()),
            value: Some(format!("v{offset}").into_bytes()),
            headers: vec![],
        })
        .collect();
    Ok(encode_segment(&[BatchSpec::new(records, Compression::Snappy)], 1)?.kfs)
}

/// Uploads segment `index` of `partition` (its `.kfs` and `.index`), as the broker does.
pub fn put_segment(
    source: &MemorySource,
    partition: i32,
    index: i64,
) -> Result<(), kfs_segment::EncodeError> {
    let key = SegmentKey {
        namespace: "ns".into(),
        topic: "orders".into(),
        partition,
        base_offset: index * RECORDS,
    };
    source.put(
        &key.object_key(SegmentFile::Data),
        segment(index * RECORDS)?,
    );
    source.put(&key.object_key(SegmentFile::Index), Vec::new());
    Ok(())
}

/// Every segment of the workload.
pub fn source() -> Result<MemorySource, kfs_segment::EncodeError> {
    let source = MemorySource::default();
    for partition in 0..PARTITIONS {
        for index in 0..SEGMENTS {
            put_segment(&source, partition, index)?;
        }
    }
    Ok(source)
}

/// The table's watermarks, if the table exists yet.
pub async fn watermarks(catalog: &dyn Catalog) -> Result<kfs_plan::offsets::OffsetMap, String> {
    let ident = table_ident(&TableNaming::default().table_for("orders"));
    match catalog.load_table(&ident).await {
        Ok(table) => table_watermarks(&table).map_err(|e| e.to_string()),
        Err(e) if e.kind() == ErrorKind::TableNotFound => Ok(Default::default()),
        Err(e) => Err(e.to_string()),
    }
}

/// Checks the invariants; returns a description of the first violation.
pub async fn check(catalog: &dyn Catalog, ledger: &SqliteLedger) -> Result<(), String> {
    let fail = |e: &dyn std::fmt::Display| e.to_string();
    let ident = table_ident(&TableNaming::default().table_for("orders"));
    let table = catalog.load_table(&ident).await.map_err(|e| fail(&e))?;
    let watermarks = table_watermarks(&table).map_err(|e| fail(&e))?;
    for partition in 0..PARTITIONS {
        if watermarks.get(&partition) != Some(&(SEGMENTS * RECORDS)) {
            return Err(format!("watermarks {watermarks:?}"));
        }
    }
    let snapshot = table
        .metadata()
        .current_snapshot()
        .ok_or("no snapshot")?
        .clone();
    let list = table
        .manifest_list_reader(&snapshot)
        .load()
        .await
        .map_err(|e| fail(&e))?;
    let (mut records, mut paths) = (0, BTreeSet::new());
    for manifest in list.entries() {
        let manifest = manifest
            .load_manifest(table.file_io())
            .await
            .map_err(|e| fail(&e))?;
        for entry in manifest.entries().iter().filter(|e| e.is_alive()) {
            let path = entry.data_file().file_path().to_owned();
            if !table.file_io().exists(&path).await.map_err(|e| fail(&e))? {
                return Err(format!("{path} is referenced but missing"));
            }
            records += entry.data_file().record_count();
            if !paths.insert(path.clone()) {
                return Err(format!("{path} registered twice"));
            }
        }
    }
    let expected = (PARTITIONS as i64 * SEGMENTS * RECORDS) as u64;
    if records != expected {
        return Err(format!("{records} records, expected {expected}"));
    }
    for entry in ledger.list(None, None).await.map_err(|e| fail(&e))? {
        match entry.state {
            EntryState::Committed { snapshot_id }
                if table.metadata().snapshot_by_id(snapshot_id).is_some() => {}
            other => return Err(format!("{}: ledger says {other:?}", entry.segment)),
        }
    }
    Ok(())
}

//! The crash matrix: a fault at every side-effecting step of a pipeline pass, in every
//! mode, then recovery by plain reruns; after each case the exactly-once invariants
//! are checked on the real SQL catalog (SQLite) and ledger.
//!
//! Steps: reading a segment, creating the table, the ledger insert, the catalog
//! commit, marking entries committed. Modes: crash before the effect, crash after it
//! (the caller never learns), error before, error after, timeout after. A crash stops
//! the process: every later call fails, the pass ends, and recovery starts a fresh
//! process on the same catalog and ledger. Steps a pass takes once per segment are hit
//! at their first and at a middle occurrence; the others (once per table) at their
//! first.
//!
//! Invariants after recovery: every record of every segment is in the table exactly
//! once (record count, no data file registered twice, the watermarks at the end of
//! every partition); every file the table references exists; every ledger entry is
//! committed in a snapshot the table has.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use async_trait::async_trait;
use iceberg::table::Table;
use iceberg::{
    Catalog, Error, ErrorKind, Namespace, NamespaceIdent, TableCommit, TableCreation, TableIdent,
};
use kfs_core::catalog::{S3Settings, Warehouse, open_sql_catalog, table_ident};
use kfs_core::committer::table_watermarks;
use kfs_core::convert::SegmentStream;
use kfs_core::ledger::{EntryState, InsertOutcome, Ledger, LedgerEntry, LedgerError, SqliteLedger};
use kfs_core::pipeline::{PipelineConfig, run_once};
use kfs_core::source::{MemorySource, SegmentSource, SourceError, SourceObject};
use kfs_plan::keys::{SegmentFile, SegmentKey};
use kfs_plan::naming::TableNaming;
use kfs_segment::{BatchSpec, Compression, OwnedRecord, encode_segment};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const PARTITIONS: i32 = 2;
const SEGMENTS: i64 = 3;
const RECORDS: i64 = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    SegmentRead,
    TableCreate,
    LedgerInsert,
    CatalogCommit,
    MarkCommitted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    CrashBefore,
    CrashAfter,
    ErrorBefore,
    ErrorAfter,
    TimeoutAfter,
}

/// One fault: `mode` at the `occurrence`-th call of `step`; shared by the wrappers of
/// one process.
#[derive(Debug)]
struct Faults {
    step: Step,
    mode: Mode,
    occurrence: usize,
    calls: AtomicUsize,
    crashed: AtomicBool,
    fired: AtomicBool,
}

/// What a wrapped call does.
enum Plan {
    /// Call through and return what it returns.
    Pass,
    /// Fail without calling through.
    FailBefore(String),
    /// Call through, then fail.
    FailAfter(String),
}

impl Faults {
    fn new(step: Step, mode: Mode, occurrence: usize) -> Arc<Self> {
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
async fn faulty<T, E>(
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

struct FaultySource<'a> {
    inner: &'a MemorySource,
    faults: Arc<Faults>,
}

fn source_error(message: String) -> SourceError {
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

struct FaultyLedger<'a> {
    inner: &'a SqliteLedger,
    faults: Arc<Faults>,
}

fn ledger_error(message: String) -> LedgerError {
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

struct FaultyCatalog<'a> {
    inner: &'a dyn Catalog,
    faults: Arc<Faults>,
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

fn segment(base: i64) -> Result<Vec<u8>, kfs_segment::EncodeError> {
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

fn source() -> Result<MemorySource, kfs_segment::EncodeError> {
    let source = MemorySource::default();
    for partition in 0..PARTITIONS {
        for i in 0..SEGMENTS {
            let key = SegmentKey {
                namespace: "ns".into(),
                topic: "orders".into(),
                partition,
                base_offset: i * RECORDS,
            };
            source.put(&key.object_key(SegmentFile::Data), segment(i * RECORDS)?);
            source.put(&key.object_key(SegmentFile::Index), Vec::new());
        }
    }
    Ok(source)
}

/// Checks the invariants; returns a description of the first violation.
async fn check(catalog: &dyn Catalog, ledger: &SqliteLedger) -> Result<(), String> {
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

/// One case: a faulty pass, then up to three plain passes; returns whether the fault
/// fired, or the violated invariant.
async fn case(step: Step, mode: Mode, occurrence: usize) -> Result<bool, String> {
    let text = |e: &dyn std::fmt::Display| e.to_string();
    let dir = tempfile::tempdir().map_err(|e| text(&e))?;
    let warehouse = Warehouse::Local(dir.path().join("wh"));
    let database = dir.path().join("catalog.db");
    let catalog = open_sql_catalog(&database, &warehouse, &S3Settings::default())
        .await
        .map_err(|e| text(&e))?;
    let ledger = SqliteLedger::open(&dir.path().join("ledger.db"))
        .await
        .map_err(|e| text(&e))?;
    let source = source().map_err(|e| text(&e))?;
    let config = PipelineConfig::default();
    let faults = Faults::new(step, mode, occurrence);
    let faulty_source = FaultySource {
        inner: &source,
        faults: faults.clone(),
    };
    let faulty_ledger = FaultyLedger {
        inner: &ledger,
        faults: faults.clone(),
    };
    let faulty_catalog = FaultyCatalog {
        inner: &catalog,
        faults: faults.clone(),
    };
    // The faulty pass may fail; what it leaves behind is what recovery works from.
    let _ = run_once(
        &faulty_source,
        &faulty_catalog,
        &faulty_ledger,
        &config,
        &|_| {},
    )
    .await;
    // Recovery: a fresh process (new connections), plain reruns.
    let catalog = open_sql_catalog(&database, &warehouse, &S3Settings::default())
        .await
        .map_err(|e| text(&e))?;
    let ledger = SqliteLedger::open(&dir.path().join("ledger.db"))
        .await
        .map_err(|e| text(&e))?;
    for _ in 0..3 {
        run_once(&source, &catalog, &ledger, &config, &|_| {})
            .await
            .map_err(|e| format!("recovery pass: {e}"))?;
    }
    check(&catalog, &ledger).await?;
    Ok(faults.fired.load(Ordering::SeqCst))
}

#[tokio::test]
async fn every_fault_at_every_step_recovers_to_exactly_once() -> TestResult {
    let steps = [
        Step::SegmentRead,
        Step::TableCreate,
        Step::LedgerInsert,
        Step::CatalogCommit,
        Step::MarkCommitted,
    ];
    let modes = [
        Mode::CrashBefore,
        Mode::CrashAfter,
        Mode::ErrorBefore,
        Mode::ErrorAfter,
        Mode::TimeoutAfter,
    ];
    let (mut cases, mut fired, mut failures) = (0, 0, Vec::new());
    for step in steps {
        let occurrences: &[usize] = match step {
            Step::SegmentRead | Step::LedgerInsert => &[1, 4],
            Step::TableCreate | Step::CatalogCommit | Step::MarkCommitted => &[1],
        };
        for mode in modes {
            for &occurrence in occurrences {
                cases += 1;
                match case(step, mode, occurrence).await {
                    Ok(true) => fired += 1,
                    Ok(false) => {}
                    Err(violation) => {
                        failures.push(format!("{step:?} {mode:?} #{occurrence}: {violation}"))
                    }
                }
            }
        }
    }
    println!("crash matrix: {cases} cases, {fired} with the fault fired, all recovered");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(fired, cases, "every case reaches its fault");
    Ok(())
}

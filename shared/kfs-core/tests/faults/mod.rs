//! Fault injection around the pipeline's side effects, shared by the crash matrix and
//! the seeded simulation: wrappers of the source, the ledger, the catalog and the
//! pointer swap that crash, fail or time out before or after the effect, a hook for the
//! core's storage failpoints (data file writes, deletes), the etcd read, a "process"
//! (its own connections, all under one fault) that runs committer ticks and converter
//! events, the workload, and the invariant check.

#![allow(dead_code, missing_docs)] // each test uses part of it

pub mod outside;

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use async_trait::async_trait;
use iceberg::table::Table;
use iceberg::{
    Catalog, Error, ErrorKind, Namespace, NamespaceIdent, TableCommit, TableCreation, TableIdent,
};
use kfs_core::SegmentStream;
use kfs_core::TableSwap;
use kfs_core::failpoint::{self, Failpoint, FailpointHook, Injection};
use kfs_core::testing::open_sql_catalog;
use kfs_core::testing::{Probe, Probed, SqlTableSwap};
use kfs_core::{CatalogHandle, LOCAL_CATALOG_NAME, S3Settings, Warehouse, table_ident};
use kfs_core::{ConverterService, ConverterSettings};
use kfs_core::{EntryState, InsertOutcome, Ledger, LedgerEntry, LedgerError, SqliteLedger};
use kfs_core::{MaintenancePolicy, maintain_table};
use kfs_core::{MemorySource, SegmentSource, SourceError, SourceObject};
use kfs_core::{PipelineConfig, now_ms, run_pass};
use kfs_core::{table_progress, table_watermarks};
use kfs_plan::crosscheck::{CrossCheckPolicy, EtcdState};
use kfs_plan::events::ObjectCreated;
use kfs_plan::keys::{SegmentFile, SegmentKey};
use kfs_plan::naming::TableNaming;
use kfs_plan::sweep::ListedSegment;
use kfs_segment::Compression;
use kfs_workload::{encode_records, simple_records};

pub const PARTITIONS: i32 = 2;

/// Retries of transient failures, without the production delays.
pub const FAST_RETRY: kfs_core::RetryPolicy = kfs_core::RetryPolicy {
    attempts: 3,
    base_delay: std::time::Duration::from_millis(1),
    max_delay: std::time::Duration::from_millis(4),
};
pub const SEGMENTS: i64 = 3;
pub const RECORDS: i64 = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    SegmentRead,
    DataFileWrite,
    TableCreate,
    LedgerInsert,
    EtcdRead,
    CatalogCommit,
    MarkCommitted,
    CompactionCommit,
    FileDelete,
    /// A schema fetched from the registry (registry tables only; not in [`STEPS`]).
    RegistryRead,
}

/// Every side-effecting step.
pub const STEPS: [Step; 9] = [
    Step::SegmentRead,
    Step::DataFileWrite,
    Step::TableCreate,
    Step::LedgerInsert,
    Step::EtcdRead,
    Step::CatalogCommit,
    Step::MarkCommitted,
    Step::CompactionCommit,
    Step::FileDelete,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    CrashBefore,
    CrashAfter,
    ErrorBefore,
    ErrorAfter,
    TimeoutAfter,
    /// A transient I/O failure that arrives marked non-retryable, as iceberg-rust's
    /// storage layer reports every opendal error.
    UnmarkedIoBefore,
    /// Throttling (S3 SlowDown, a throttled catalog or ledger), arriving unmarked.
    ThrottledBefore,
}

/// Every fault mode.
pub const MODES: [Mode; 7] = [
    Mode::CrashBefore,
    Mode::CrashAfter,
    Mode::ErrorBefore,
    Mode::ErrorAfter,
    Mode::TimeoutAfter,
    Mode::UnmarkedIoBefore,
    Mode::ThrottledBefore,
];

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
    /// The deployment another engine maintains just before this process's first
    /// commit (of an append, a replace or an expiry) on a table with a snapshot, if
    /// any; cleared once it has.
    pub outside_before_commit: std::sync::Mutex<Option<std::path::PathBuf>>,
}

impl Faults {
    /// Another engine maintains the deployment in `dir` (a rewrite without our
    /// summary, every other snapshot expired) between this process's load of the
    /// table and its first commit (see [`outside::maintain_outside`]).
    pub fn with_outside_commit(self: Arc<Self>, dir: &Path) -> Arc<Self> {
        if let Ok(mut slot) = self.outside_before_commit.lock() {
            *slot = Some(dir.to_owned());
        }
        self
    }

    /// Runs the outside maintenance due before a commit, if any.
    async fn outside_first(&self) {
        let dir = self
            .outside_before_commit
            .lock()
            .ok()
            .and_then(|slot| slot.clone());
        let Some(dir) = dir else {
            return;
        };
        if let Ok(outside::OutsideOutcome::Maintained) =
            outside::maintain_outside(&dir, 4_242_424_242).await
            && let Ok(mut slot) = self.outside_before_commit.lock()
        {
            *slot = None;
        }
    }

    /// `mode` at the `occurrence`-th call of `step` (0: never).
    /// No fault.
    pub fn none() -> Arc<Self> {
        Self::new(Step::SegmentRead, Mode::ErrorBefore, 0)
    }

    pub fn new(step: Step, mode: Mode, occurrence: usize) -> Arc<Self> {
        Arc::new(Self {
            step,
            mode,
            occurrence,
            calls: AtomicUsize::new(0),
            crashed: AtomicBool::new(false),
            fired: AtomicBool::new(false),
            outside_before_commit: std::sync::Mutex::new(None),
        })
    }

    /// Whether the process has crashed.
    pub fn crashed(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }

    fn plan(&self, step: Step) -> Injection {
        if self.crashed() {
            return Injection::FailBefore("injected: the process has crashed".into());
        }
        if step != self.step || self.calls.fetch_add(1, Ordering::SeqCst) + 1 != self.occurrence {
            return Injection::Pass;
        }
        self.fired.store(true, Ordering::SeqCst);
        let what = format!("injected {:?} at {step:?}", self.mode);
        match self.mode {
            Mode::CrashBefore => {
                self.crashed.store(true, Ordering::SeqCst);
                Injection::FailBefore(what)
            }
            Mode::ErrorBefore | Mode::UnmarkedIoBefore | Mode::ThrottledBefore => {
                Injection::FailBefore(what)
            }
            Mode::CrashAfter => {
                self.crashed.store(true, Ordering::SeqCst);
                Injection::FailAfter(what)
            }
            Mode::ErrorAfter | Mode::TimeoutAfter => Injection::FailAfter(what),
        }
    }

    /// The error of an injected failure, as the real component would return it: the
    /// storage modes as iceberg-rust's storage layer does (unexpected, not retryable,
    /// the opendal error attached), the others unexpected and retryable.
    fn iceberg_error(&self, what: String) -> Error {
        let storage = |kind: opendal::ErrorKind, text: &str| {
            Error::new(ErrorKind::Unexpected, "Failure in doing io operation")
                .with_source(opendal::Error::new(kind, format!("{what}: {text}")))
        };
        match self.mode {
            _ if self.crashed() => Error::new(ErrorKind::Unexpected, what).with_retryable(true),
            Mode::UnmarkedIoBefore => storage(opendal::ErrorKind::Unexpected, "connection reset"),
            Mode::ThrottledBefore => storage(opendal::ErrorKind::RateLimited, "SlowDown"),
            Mode::TimeoutAfter => {
                Error::new(ErrorKind::Unexpected, format!("{what}: timed out")).with_retryable(true)
            }
            _ => Error::new(ErrorKind::Unexpected, format!("{what}: failed")).with_retryable(true),
        }
    }
}

/// The core's storage failpoints, driven by the process's fault.
impl FailpointHook for Faults {
    fn inject(&self, point: Failpoint) -> Injection {
        self.plan(match point {
            Failpoint::DataFileWrite => Step::DataFileWrite,
            Failpoint::FileDelete => Step::FileDelete,
        })
    }

    fn error(&self, _: Failpoint, message: String) -> Error {
        self.iceberg_error(message)
    }
}

/// Runs `call` under the fault plan of `step`, turning injected failures into `fail`.
pub async fn faulty<T, E>(
    faults: &Faults,
    step: Step,
    fail: impl FnOnce(String) -> E,
    call: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, E> {
    failpoint::apply(faults.plan(step), fail, call).await
}

/// Reads etcd (here: what the simulated brokers wrote) under the fault of the etcd
/// read step: a failed read is an unreachable etcd, as the committer's reader maps it.
pub fn read_etcd(faults: &Faults, written: &EtcdState) -> EtcdState {
    match faults.plan(Step::EtcdRead) {
        Injection::Pass => written.clone(),
        Injection::FailBefore(what) | Injection::FailAfter(what) => EtcdState::Unreachable(what),
    }
}

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

/// A step of a process failed; `retryable` says whether the schedule would simply run
/// again.
#[derive(Debug)]
pub struct TickError {
    pub kind: kfs_core::ErrorKind,
    pub retryable: bool,
    pub message: String,
}

impl TickError {
    fn of(kind: kfs_core::ErrorKind, e: impl std::fmt::Display) -> Self {
        Self {
            kind,
            retryable: kind.is_retryable(),
            message: e.to_string(),
        }
    }
}

/// One process of a deployment whose catalog and ledger (SQLite) and warehouse live in
/// `dir`: its own connections, every one of its side effects under `faults`.
pub struct Process<'a> {
    /// How tables are named and laid out (new tables only).
    pub naming: TableNaming,
    /// Whether its commits merge small files (processes that differ here lay the same
    /// commit out differently).
    pub coalesce: bool,
    pub source: FaultySource<'a>,
    pub catalog: FaultyCatalog,
    pub swap: FaultySwap,
    pub ledger: FaultyLedger<'a>,
    pub faults: Arc<Faults>,
    /// The schema registry of registry tables, under this process's fault (each
    /// process caches its own schemas, as each function instance does).
    pub schemas: Option<Arc<kfs_core::RegistrySchemas>>,
    /// Where maintenance may list and delete: the deployment's warehouse.
    pub storage: kfs_core::MaintenanceStorage,
}

/// The catalog of the deployment in `dir`.
pub async fn open_catalog(dir: &Path) -> Result<kfs_core::testing::SqlCatalog, String> {
    open_sql_catalog(
        &dir.join("catalog.db"),
        &Warehouse::Local(dir.join("wh")),
        &S3Settings::default(),
    )
    .await
    .map_err(|e| e.to_string())
}

impl<'a> Process<'a> {
    pub async fn open(
        dir: &Path,
        source: &'a MemorySource,
        ledger: &'a SqliteLedger,
        faults: Arc<Faults>,
    ) -> Result<Self, String> {
        let catalog = open_catalog(dir).await?;
        let swap = SqlTableSwap::open(&dir.join("catalog.db"), LOCAL_CATALOG_NAME)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Self {
            naming: TableNaming::default(),
            coalesce: false,
            source: FaultySource {
                inner: source,
                faults: faults.clone(),
            },
            catalog: FaultyCatalog {
                inner: Arc::new(catalog),
                faults: faults.clone(),
            },
            swap: FaultySwap {
                inner: swap,
                faults: faults.clone(),
            },
            ledger: faulty_ledger(ledger, faults.clone(), false),
            faults,
            schemas: None,
            storage: kfs_core::MaintenanceStorage {
                s3: S3Settings::default(),
                warehouse: Warehouse::Local(dir.join("wh")),
            },
        })
    }

    /// The process reading registry tables' schemas from `registry`, under its fault.
    pub fn with_registry(mut self, registry: Arc<kfs_core::MemoryRegistry>) -> Self {
        let faulty = FaultyRegistry {
            inner: registry,
            faults: self.faults.clone(),
        };
        // Retries as in production, with short pauses (the matrices run thousands).
        let policy = kfs_core::LookupPolicy {
            first_pause: std::time::Duration::from_millis(1),
            ..kfs_core::LookupPolicy::default()
        };
        self.schemas = Some(Arc::new(kfs_core::SchemaCache::with_policy(
            Arc::new(faulty),
            policy,
        )));
        self
    }

    /// One committer tick: read etcd, run a pass (convert what is new, commit the
    /// table), then maintain the table by `maintenance`.
    pub async fn tick(
        &self,
        etcd: &EtcdState,
        crosscheck: CrossCheckPolicy,
        maintenance: Option<&MaintenancePolicy>,
    ) -> Result<(), TickError> {
        let hook: Arc<dyn FailpointHook> = self.faults.clone();
        failpoint::scoped(hook, async {
            let config = PipelineConfig {
                naming: self.naming.clone(),
                etcd: read_etcd(&self.faults, etcd),
                crosscheck,
                retry: FAST_RETRY,
                schemas: self.schemas.clone(),
                commit: kfs_core::CommitSettings {
                    coalesce: self.coalesce,
                    ..Default::default()
                },
                ..PipelineConfig::default()
            };
            let report = run_pass(
                &self.source,
                &self.catalog,
                &self.swap,
                &self.ledger,
                &config,
                &|_| {},
            )
            .await
            .map_err(|e| TickError::of(e.kind(), &e))?;
            // With KFS_SIM_TRACE, what each pass left each table waiting for.
            if std::env::var_os("KFS_SIM_TRACE").is_some() {
                for (table, outcome) in &report.tables {
                    eprintln!(
                        "  pass: {table} at {:?}, holds {:?}, {} dropped, {} late dropped, {} recovered",
                        outcome.watermarks,
                        outcome.holds,
                        outcome.runs_dropped,
                        outcome.late_dropped,
                        outcome.recovered
                    );
                }
            }
            // A pass isolates what failed and goes on: a tick that left a segment
            // unconverted, a table uncommitted or an item unread is not a clean one
            // (a feed refused its table is, in the scenarios with colliding feeds).
            if report.left_work() {
                return Err(TickError {
                    kind: kfs_core::ErrorKind::Transient,
                    retryable: true,
                    message: format!(
                        "failed segments {:?}, tables {:?}, unreadable items {:?}",
                        report.failed_segments, report.failed_tables, report.unreadable
                    ),
                });
            }
            let Some(policy) = maintenance else {
                return Ok(());
            };
            let ident = table_ident(&TableNaming::default().table_for("orders"));
            maintain_table(
                &self.catalog,
                &self.swap,
                &self.ledger,
                &self.storage,
                &ident,
                policy,
                None,
                now_ms(),
            )
            .await
            .map(|_| ())
            .map_err(|e| TickError::of(e.kind(), &e))
        })
        .await
    }

    /// The converter function handling S3 events for `keys` (as delivered: in any
    /// order, some twice).
    pub async fn convert_events(&self, keys: &[String]) -> Result<(), TickError> {
        let events: Vec<ObjectCreated> = keys
            .iter()
            .map(|key| ObjectCreated {
                bucket: BUCKET.into(),
                key: key.clone(),
                etag: None,
                sequencer: None,
                size: None,
            })
            .collect();
        let service = ConverterService::new(
            FaultySource {
                inner: self.source.inner,
                faults: self.faults.clone(),
            },
            CatalogHandle {
                catalog: Arc::new(FaultyCatalog {
                    inner: self.catalog.inner.clone(),
                    faults: self.faults.clone(),
                }),
                swap: Arc::new(FaultySwap {
                    inner: self.swap.inner.clone(),
                    faults: self.faults.clone(),
                }),
            },
            faulty_ledger(self.ledger.inner, self.faults.clone(), false),
            ConverterSettings {
                bucket: BUCKET.into(),
                prefix: String::new(),
                naming: self.naming.clone(),
                limits: Default::default(),
                concurrency: 2,
                // Room for one conversion at a time: admission waits, never fails.
                memory_budget_mib: Some(100),
                retry: FAST_RETRY,
                schemas: self.schemas.clone(),
            },
        );
        let hook: Arc<dyn FailpointHook> = self.faults.clone();
        for outcome in failpoint::scoped(hook, service.handle(&events)).await {
            outcome.map_err(|e| TickError::of(e.kind(), &e))?;
        }
        Ok(())
    }
}

/// The bucket of the simulated S3 events.
pub const BUCKET: &str = "segments";

/// What the brokers have written to etcd once every segment is uploaded.
pub fn etcd_caught_up() -> EtcdState {
    EtcdState::Read {
        topics: TOPICS.iter().map(|t| (*t).to_owned()).collect(),
        next_offsets: TOPICS
            .iter()
            .flat_map(|topic| {
                (0..PARTITIONS).map(move |p| (((*topic).to_owned(), p), SEGMENTS * RECORDS))
            })
            .collect(),
    }
}

/// The topics of the workload: `orders`, and the ones the simulation makes collide
/// with its table (sanitizing alike, or mapped to it by a rule).
pub const TOPICS: [&str; 3] = ["orders", "Orders", "orders-eu"];

/// Plain ticks until two in a row succeed (a retryable failure, such as a busy
/// database, is followed by the next tick, as the schedule would), then a maintenance
/// tick that also removes orphans; etcd has caught up.
pub async fn quiesce(
    dir: &Path,
    source: &MemorySource,
    ledger: &SqliteLedger,
    naming: &TableNaming,
) -> Result<(), String> {
    let mut process = Process::open(dir, source, ledger, Faults::none()).await?;
    process.naming = naming.clone();
    let (mut clean, mut attempts) = (0, 0);
    let mut policy = Some(MaintenancePolicy {
        orphan_age: Some(std::time::Duration::ZERO),
        force_orphan_age: true,
        orphan_interval: std::time::Duration::ZERO,
        ..MaintenancePolicy::default()
    });
    while clean < 2 {
        attempts += 1;
        let maintenance = if clean == 1 { policy.take() } else { None };
        match process
            .tick(
                &etcd_caught_up(),
                CrossCheckPolicy::default(),
                maintenance.as_ref(),
            )
            .await
        {
            Ok(()) => clean += 1,
            Err(e) if e.retryable && attempts < 8 => {
                clean = 0;
                policy = policy.or(maintenance);
            }
            Err(e) => return Err(format!("quiescence tick {attempts}: {}", e.message)),
        }
    }
    Ok(())
}

pub fn segment(base: i64) -> Result<Vec<u8>, kfs_segment::EncodeError> {
    let records = simple_records(base, RECORDS, |offset| Some(value(offset).into_bytes()));
    Ok(encode_records(records, Compression::Snappy)?.kfs)
}

/// The value of the record at `offset`: a JSON object, except at every third offset
/// (which a JSON table sends to its dead-letter table).
pub fn value(offset: i64) -> String {
    if offset % 3 == 0 {
        format!("v{offset}")
    } else {
        format!("{{\"n\":{offset},\"even\":{}}}", offset % 2 == 0)
    }
}

/// Uploads segment `index` of `partition` (its `.kfs` and `.index`), as the broker does.
pub fn put_segment(
    source: &MemorySource,
    partition: i32,
    index: i64,
) -> Result<(), kfs_segment::EncodeError> {
    put_feed_segment(source, "ns", "orders", partition, index)
}

/// [`put_segment`] for the topic `topic` of the KafScale namespace `namespace`.
pub fn put_feed_segment(
    source: &MemorySource,
    namespace: &str,
    topic: &str,
    partition: i32,
    index: i64,
) -> Result<(), kfs_segment::EncodeError> {
    let key = SegmentKey {
        namespace: namespace.into(),
        topic: topic.into(),
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

/// The Avro schema of the registry workload's values (schema id [`REGISTRY_SCHEMA_ID`]).
pub const REGISTRY_SCHEMA: &str = r#"{"type": "record", "name": "V", "fields": [
    {"name": "n", "type": "long"}, {"name": "even", "type": "boolean"}]}"#;

/// The id the registry holds [`REGISTRY_SCHEMA`] under.
pub const REGISTRY_SCHEMA_ID: u32 = 1;

/// The registry of the registry workload.
pub fn registry() -> Arc<kfs_core::MemoryRegistry> {
    let registry = kfs_core::MemoryRegistry::default();
    registry.register(
        kfs_core::SchemaId::Confluent(REGISTRY_SCHEMA_ID),
        kfs_core::RegisteredSchema::new(kfs_core::SchemaKind::Avro, REGISTRY_SCHEMA),
    );
    Arc::new(registry)
}

/// The registry-framed value of the record at `offset`: an Avro record of schema
/// [`REGISTRY_SCHEMA_ID`], except at every third offset, which names a schema id the
/// registry does not hold (a dead letter).
pub fn registry_value(offset: i64) -> Result<Vec<u8>, String> {
    use apache_avro::types::Value;
    let schema = apache_avro::Schema::parse_str(REGISTRY_SCHEMA).map_err(|e| e.to_string())?;
    let id = if offset % 3 == 0 {
        77
    } else {
        REGISTRY_SCHEMA_ID
    };
    let mut bytes = vec![0];
    bytes.extend_from_slice(&id.to_be_bytes());
    let record = Value::Record(vec![
        ("n".into(), Value::Long(offset)),
        ("even".into(), Value::Boolean(offset % 2 == 0)),
    ]);
    bytes.extend(apache_avro::to_avro_datum(&schema, record).map_err(|e| e.to_string())?);
    Ok(bytes)
}

/// Every segment of the registry workload (the layout of [`source`]).
pub fn registry_source() -> Result<MemorySource, String> {
    let source = MemorySource::default();
    for partition in 0..PARTITIONS {
        for index in 0..SEGMENTS {
            let key = SegmentKey {
                namespace: "ns".into(),
                topic: "orders".into(),
                partition,
                base_offset: index * RECORDS,
            };
            let values = (index * RECORDS..(index + 1) * RECORDS)
                .map(registry_value)
                .collect::<Result<Vec<_>, _>>()?;
            let records = simple_records(index * RECORDS, RECORDS, |offset| {
                values
                    .get(usize::try_from(offset - index * RECORDS).ok()?)
                    .cloned()
            });
            let segment =
                encode_records(records, Compression::Snappy).map_err(|e| e.to_string())?;
            source.put(&key.object_key(SegmentFile::Data), segment.kfs);
            source.put(&key.object_key(SegmentFile::Index), Vec::new());
        }
    }
    Ok(source)
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

/// Checks the invariants; returns how many segments were quarantined as late, or a
/// description of the first violation. The table belongs to one feed (whichever
/// created it, when others collide with it): only that feed's entries are checked
/// against it; another feed's entries may only be pending (a converter that claimed
/// the table in a race), never committed.
///
/// Every segment is in the table exactly once, or quarantined because it arrived after
/// the table moved past it (below its partition's start, or inside a recorded gap):
/// the live files hold exactly the other segments' records, no file is registered
/// twice, every referenced file exists, every partition stands at its end, and every
/// ledger entry is committed (in a snapshot the table has, or one expiry removed, below
/// the watermark) or quarantined as late.
pub async fn check(catalog: &dyn Catalog, ledger: &SqliteLedger) -> Result<i64, String> {
    let fail = |e: &dyn std::fmt::Display| e.to_string();
    let ident = table_ident(&TableNaming::default().table_for("orders"));
    let table = catalog.load_table(&ident).await.map_err(|e| fail(&e))?;
    let progress = table_progress(&table).map_err(|e| fail(&e))?;
    let watermarks = &progress.watermarks;
    for partition in 0..PARTITIONS {
        if watermarks.get(&partition) != Some(&(SEGMENTS * RECORDS)) {
            let entries = ledger.list(None, None).await.map_err(|e| fail(&e))?;
            let open: Vec<String> = entries
                .iter()
                .filter(|e| !matches!(e.state, EntryState::Committed { .. }))
                .map(|e| {
                    format!(
                        "{} {}-{} {:?}",
                        e.segment, e.base_offset, e.last_offset, e.state
                    )
                })
                .collect();
            return Err(format!(
                "watermarks {watermarks:?}, gaps {:?}; not committed: {open:?}",
                progress.gaps
            ));
        }
    }
    // Segments whose first, shorter upload was converted before the broker wrote the
    // key again: one record fewer each (the rewrite is quarantined or unseen).
    // (A segment may be in more than one committed entry: converted alone and in a
    // run, one of them recovered as covered.)
    let (mut late, mut skipped, mut short) = (0, 0, BTreeSet::new());
    let owner = (
        table.metadata().properties().get("kfs.topic").cloned(),
        table
            .metadata()
            .properties()
            .get(kfs_core::SOURCE_NAMESPACE_PROPERTY)
            .cloned(),
    );
    for entry in ledger.list(None, None).await.map_err(|e| fail(&e))? {
        // A rewrite's entry is keyed `{segment}#rewritten-{version}` (or `#overlap-`).
        let segment = entry.segment.split('#').next().unwrap_or_default();
        let namespace = SegmentKey::parse(segment).map(|(key, _)| key.namespace);
        if owner.0.as_deref() != Some(entry.topic.as_str()) || owner.1 != namespace {
            if !matches!(entry.state, EntryState::Pending) {
                return Err(format!(
                    "{}: an entry of a feed that does not own the table ({owner:?}) is {:?}",
                    entry.segment, entry.state
                ));
            }
            continue;
        }
        let below_watermark = watermarks
            .get(&entry.partition)
            .is_some_and(|&next| entry.last_offset < next);
        match &entry.state {
            EntryState::Committed { snapshot_id }
                if table.metadata().snapshot_by_id(*snapshot_id).is_some() || below_watermark =>
            {
                let first_last = entry.members.first().map_or(entry.last_offset, |m| {
                    m.gap_from.unwrap_or(m.base_offset) - 1
                });
                let ends = std::iter::once((entry.base_offset, first_last))
                    .chain(entry.members.iter().map(|m| (m.base_offset, m.last_offset)));
                short.extend(
                    ends.filter(|(base, last)| last - base + 1 == RECORDS - 1)
                        .map(|(base, _)| (entry.partition, base)),
                );
            }
            // A version of a key other than the one in the table: quarantined beside it.
            EntryState::Quarantined { error }
                if error.contains("was rewritten")
                    || error.contains("overlaps what the table holds") => {}
            EntryState::Quarantined { error }
                if error.contains("not ingested behind the watermark") =>
            {
                // Late: below its partition's start, or inside a recorded gap.
                let accounted = matches!(
                    progress.classify(entry.partition, entry.base_offset),
                    ListedSegment::LateBeforeStart { .. } | ListedSegment::LateAfterGap(_)
                );
                if !accounted {
                    return Err(format!(
                        "{}: quarantined as late, but neither below the start {:?} nor in a recorded gap {:?}",
                        entry.segment, progress.starts, progress.gaps
                    ));
                }
                late += 1;
            }
            // Broken bytes, skipped by the operator: its offsets are a skipped gap.
            EntryState::Skipped { .. } => skipped += 1,
            other => return Err(format!("{}: ledger says {other:?}", entry.segment)),
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
    let short = short.len() as i64;
    let expected = ((PARTITIONS as i64 * SEGMENTS - late - skipped) * RECORDS - short) as u64;
    if records != expected {
        return Err(format!(
            "{records} records, expected {expected} ({late} segments quarantined as late, {skipped} skipped, {short} short first uploads)"
        ));
    }
    Ok(late)
}

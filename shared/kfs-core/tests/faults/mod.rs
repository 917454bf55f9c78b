//! Fault injection around the pipeline's side effects, shared by the crash matrix and
//! the seeded simulation: wrappers of the source, the ledger, the catalog and the
//! pointer swap that crash, fail or time out before or after the effect, a hook for the
//! core's storage failpoints (data file writes, deletes), the etcd read, a "process"
//! (its own connections, all under one fault) that runs committer ticks and converter
//! events, the workload, and the invariant check.

#![allow(dead_code, missing_docs)] // each test uses part of it

mod mirror;
pub mod outside;
mod process;
mod workload;
mod wrappers;

pub use mirror::*;
pub use process::*;
pub use workload::*;
pub use wrappers::*;

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
    /// Whether the other engine's maintenance of a mirror's change log landed.
    pub outside_maintained_log: AtomicBool,
}

impl Faults {
    /// Another engine maintains the deployment in `dir` (a rewrite without our
    /// summary, every other snapshot expired; of a mirror's change log too) between
    /// this process's load of the table and its first commit (see
    /// [`outside::maintain_outside`]).
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
        let maintained = outside::maintain_outside(&dir, 4_242_424_242).await;
        // A mirror's change log too, when there is one (a rewrite of its own).
        let log = kfs_plan::naming::TableNaming::default()
            .table_for("orders")
            .change_log();
        if let Ok(outside::OutsideOutcome::Maintained) =
            outside::maintain_outside_table(&dir, &log, 4_242_424_243).await
        {
            self.outside_maintained_log.store(true, Ordering::SeqCst);
        }
        if let Ok(outside::OutsideOutcome::Maintained) = maintained
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
            outside_maintained_log: AtomicBool::new(false),
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

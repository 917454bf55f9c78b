//! What a pass runs on: its settings ([`PipelineConfig`]), the limits of a segment's
//! conversion attempts, and what every stage of a pass works with.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kfs_plan::naming::TableNaming;
use kfs_plan::shard::Shard;
use kfs_segment::DecodeLimits;

use super::report::Progress;
use crate::commit::CommitSettings;
use kfs_catalog::catalog::CatalogAccess;
use kfs_catalog::fault::RetryPolicy;

/// Conversions of one segment that may begin and never end (their process died)
/// before the sweep quarantines the segment instead of trying it again.
pub const UNFINISHED_ATTEMPTS: u32 = 3;

/// Longest a conversion may run, unless the configuration says otherwise: Lambda's
/// longest timeout. An attempt that began earlier and never ended is dead.
pub const CONVERSION_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// Settings of a pipeline pass.
#[derive(Debug, Clone, Default)]
pub struct PipelineConfig {
    /// Topic → table mapping.
    pub naming: TableNaming,
    /// Decoder limits.
    pub limits: DecodeLimits,
    /// Committer settings (their `start_offsets` are replaced per topic).
    pub commit: CommitSettings,
    /// Start offsets of partitions seen for the first time, per topic.
    pub start_offsets: BTreeMap<String, BTreeMap<i32, i64>>,
    /// Most segments converted in one pass (the sweep's bound); `None` for all.
    pub max_conversions: Option<usize>,
    /// Most segments one run converts into one set of data files
    /// ([`MAX_RUN_SEGMENTS`](crate::MAX_RUN_SEGMENTS) when `None`; 1 for a
    /// data file per segment).
    pub max_run_segments: Option<usize>,
    /// When the pass must be done: conversions stop early enough to leave
    /// `commit_reserve` for the commits, and tables not reached by then wait.
    pub deadline: Option<Instant>,
    /// Time kept for commits before the deadline.
    pub commit_reserve: Duration,
    /// Tables committed at the same time (at least one).
    pub table_concurrency: usize,
    /// What etcd said at the start of the pass (the cross-check; `Disabled` by default).
    pub etcd: kfs_plan::crosscheck::EtcdState,
    /// How the cross-check treats etcd lag and outages.
    pub crosscheck: kfs_plan::crosscheck::CrossCheckPolicy,
    /// The topics this pass handles (all by default; see [`Shard`]).
    pub shard: Shard,
    /// Only the topics whose table is one of these (`namespace.name`), when set: a
    /// wake-up's pass (`kfs_plan::wakeup`), which lists and commits the tables it
    /// names and nothing else. Every topic of a named table is listed, as its commit
    /// needs.
    pub only_tables: Option<std::collections::BTreeSet<String>>,
    /// Tries of one segment after transient failures, before the pass fails.
    pub retry: RetryPolicy,
    /// The writer schemas of registry tables' values (`None`: no registry is
    /// configured, and a registry table's segments wait for one).
    pub schemas: Option<std::sync::Arc<crate::convert::RegistrySchemas>>,
    /// Longest a conversion may run (the function's timeout; [`CONVERSION_TIMEOUT`]
    /// when `None`): unfinished attempts that began longer ago are dead, and after
    /// [`UNFINISHED_ATTEMPTS`] of them the segment is quarantined.
    pub conversion_timeout: Option<Duration>,
}

/// What every stage of a pass works with.
pub(super) struct Pass<'a, S, L> {
    pub(super) source: &'a S,
    pub(super) access: CatalogAccess<'a>,
    pub(super) ledger: &'a L,
    pub(super) config: &'a PipelineConfig,
    pub(super) progress: &'a (dyn Fn(&Progress) + Sync),
    /// When the sweep and the conversions stop: the commits' reserve before the
    /// pass's deadline.
    pub(super) sweep_deadline: Option<Instant>,
}

impl<S, L> Pass<'_, S, L> {
    /// Whether the sweep and the conversions must stop: what is not reached waits for
    /// the next pass, and the commits keep their time.
    pub(super) fn past_sweep_deadline(&self) -> bool {
        self.sweep_deadline.is_some_and(|d| Instant::now() >= d)
    }
}

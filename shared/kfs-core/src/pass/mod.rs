//! One pass of the pipeline, as both the CLI and the Lambda functions run it, in
//! three stages read top to bottom in [`run_once`]: the sweep lists the source and
//! gathers every complete segment the ledger has not seen (`sweep`), the
//! conversions turn them into pending files (`convert`), and each table's pending
//! segments are committed (`commit`).

mod commit;
mod convert;
mod sweep;
mod tables;

pub use convert::run_attempt;

use crate::catalog::CatalogAccess;
use crate::catalog::TableSwap;
use crate::commit::{CommitOutcome, CommitSettings};
use crate::error::PipelineError;
use crate::fault::RetryPolicy;
use crate::ledger::Ledger;
use crate::source::SegmentSource;
use iceberg::Catalog;
use kfs_plan::naming::TableNaming;
use kfs_plan::shard::Shard;
use kfs_segment::DecodeLimits;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

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

/// Progress of a pass, for progress bars and logs.
#[derive(Debug, Clone)]
pub enum Progress {
    /// The source was listed.
    Listed {
        /// Complete segments found.
        segments: usize,
        /// Of which not yet in the ledger.
        new: usize,
    },
    /// A segment, or a run of segments, was converted.
    Converted {
        /// Segment key (the run's first).
        segment: String,
        /// Segments converted (more than one for a run).
        segments: usize,
        /// Records converted.
        records: u64,
    },
    /// A segment could not be converted and was quarantined.
    Quarantined {
        /// Segment key.
        segment: String,
        /// The error.
        error: String,
    },
    /// A table's commit cycle finished.
    Committed {
        /// Table.
        table: String,
        /// Snapshot created, if any.
        snapshot_id: Option<i64>,
    },
}

/// What a pass did.
#[derive(Debug, Clone, Default)]
pub struct RunReport {
    /// Objects listed: after each partition's watermark, and where a late segment
    /// would be (what is retained below the watermark is never listed).
    pub objects: usize,
    /// Objects that are not segment files.
    pub ignored: usize,
    /// Segments missing their `.kfs` or `.index` (left for later).
    pub incomplete: usize,
    /// Complete segments.
    pub segments: usize,
    /// Segments the ledger already knew, or below their table's watermark.
    pub known: usize,
    /// Topics another shard handles (not listed further).
    pub other_shards: usize,
    /// Topics the settings do not select for ingestion (not listed further).
    pub unselected_topics: usize,
    /// Segments converted in this pass.
    pub converted: usize,
    /// Records converted in this pass.
    pub records_converted: u64,
    /// Segments quarantined in this pass: key and error.
    pub quarantined: Vec<(String, String)>,
    /// Segment keys whose content changed after they were converted (ETag differs).
    pub rewritten: Vec<String>,
    /// Commit outcome per table.
    pub tables: BTreeMap<String, CommitOutcome>,
    /// Tables whose commit failed this pass, with the error; their files stay pending.
    pub failed_tables: BTreeMap<String, String>,
    /// New segments left unconverted for the next pass (the conversion bound or the
    /// deadline reached).
    pub deferred: usize,
    /// Feeds (`namespace/topic`) the sweep did not finish before the deadline: the
    /// rest of their listing waits for the next pass.
    pub deferred_feeds: usize,
    /// Tables whose feeds the sweep listed.
    pub swept: BTreeSet<String>,
    /// Feeds (`namespace/topic`) refused their table, with the reason: another feed
    /// owns it, or kfs-iceberg did not create it. Their segments wait, unconverted and
    /// uncommitted, until the mapping is fixed.
    pub refused: BTreeMap<String, String>,
    /// Segments whose conversion failed this pass for a reason that is not their bytes
    /// (after the retries), with the error: left unrecorded, tried again next pass;
    /// every other segment and table went on.
    pub failed_segments: Vec<(String, String)>,
    /// Ledger items that could not be read, with the reason: their partitions wait
    /// at them until an operator repairs or removes the item; others go on.
    pub unreadable: Vec<(String, String)>,
}

impl RunReport {
    /// True when the pass left work undone that another pass (or an operator) must
    /// finish: a table that failed to open or commit, a segment that failed to
    /// convert, or an unreadable ledger item.
    pub fn left_work(&self) -> bool {
        !self.failed_tables.is_empty()
            || !self.failed_segments.is_empty()
            || !self.unreadable.is_empty()
    }

    /// True when something needs an operator or another pass: [`Self::left_work`], or
    /// a feed refused its table.
    pub fn has_failures(&self) -> bool {
        self.left_work() || !self.refused.is_empty()
    }
}

/// What every stage of a pass works with.
struct Pass<'a, S, L> {
    source: &'a S,
    access: CatalogAccess<'a>,
    ledger: &'a L,
    config: &'a PipelineConfig,
    progress: &'a (dyn Fn(&Progress) + Sync),
    /// When the sweep and the conversions stop: the commits' reserve before the
    /// pass's deadline.
    sweep_deadline: Option<Instant>,
}

impl<S, L> Pass<'_, S, L> {
    /// Whether the sweep and the conversions must stop: what is not reached waits for
    /// the next pass, and the commits keep their time.
    fn past_sweep_deadline(&self) -> bool {
        self.sweep_deadline.is_some_and(|d| Instant::now() >= d)
    }
}

/// Runs one pass: list, convert what is new, commit every table with pending work.
pub async fn run_once(
    source: &impl SegmentSource,
    catalog: &dyn Catalog,
    swap: &dyn TableSwap,
    ledger: &impl Ledger,
    config: &PipelineConfig,
    progress: &(dyn Fn(&Progress) + Sync),
) -> Result<RunReport, PipelineError> {
    config.naming.validate().map_err(PipelineError::Config)?;
    let access = CatalogAccess { catalog, swap };
    let pass = Pass {
        source,
        access,
        ledger,
        config,
        progress,
        sweep_deadline: config
            .deadline
            .map(|d| d.checked_sub(config.commit_reserve).unwrap_or(d)),
    };
    let mut report = RunReport::default();
    let mut tables = tables::Tables::new(
        access,
        &config.naming,
        ledger.identity(),
        config.schemas.clone(),
    );
    let sweep::Sweep {
        work,
        tables: mut swept,
    } = sweep::sweep(&pass, &mut tables, &mut report).await?;
    progress(&Progress::Listed {
        segments: report.segments,
        new: work.len(),
    });
    convert::convert_new(&pass, &mut tables, &work, &mut swept, &mut report).await?;
    commit::commit_swept(catalog, ledger, config, swept, &mut report, progress).await;
    tables.report_into(&mut report);
    report.unreadable.sort();
    report.unreadable.dedup();
    Ok(report)
}

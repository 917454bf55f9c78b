//! The committer's settings ([`CommitSettings`]), what one commit cycle of a table did
//! ([`CommitOutcome`]) and how it fails ([`CommitError`]).

use std::collections::BTreeMap;

use kfs_plan::commit::Hold;
use kfs_plan::crosscheck::{CrossCheck, CrossCheckPolicy, EtcdView};
use kfs_plan::offsets::{Gap, OffsetMap};
use kfs_plan::progress::ProgressError;

use crate::ledger::LedgerError;

/// Settings of the committer.
#[derive(Debug, Clone)]
pub struct CommitSettings {
    /// Most segments one commit takes.
    pub max_segments: usize,
    /// Attempts after conflicts or unknown outcomes before giving up for this cycle.
    pub max_attempts: usize,
    /// Configured start offsets of partitions seen for the first time.
    pub start_offsets: BTreeMap<i32, i64>,
    /// What etcd says about the topic (the cross-check; `Disabled` by default).
    pub etcd: EtcdView,
    /// How the cross-check treats lag and outages.
    pub crosscheck: CrossCheckPolicy,
    /// Merge a commit's small data files into files of about the table's target size
    /// (`write.target-file-size-bytes`) before committing them, instead of committing
    /// one file per segment.
    pub coalesce: bool,
}

impl Default for CommitSettings {
    fn default() -> Self {
        Self {
            max_segments: 10_000,
            max_attempts: 8,
            start_offsets: BTreeMap::new(),
            etcd: EtcdView::Disabled,
            crosscheck: CrossCheckPolicy::default(),
            coalesce: false,
        }
    }
}

/// What one commit cycle of a table did.
#[derive(Debug, Clone, Default)]
pub struct CommitOutcome {
    /// The snapshot created, if any.
    pub snapshot_id: Option<i64>,
    /// Segments committed.
    pub segments: usize,
    /// Data files committed.
    pub files: usize,
    /// Small data files merged into the committed ones (deleted once the commit landed).
    pub coalesced: usize,
    /// Records committed.
    pub records: u64,
    /// Dead letters committed to the table's dead-letter table before its commit
    /// (records of JSON values that could not be written).
    pub dead_letters: u64,
    /// Records appended to the mirror's change log (`<table>__changes`) before its
    /// commit.
    pub change_log: u64,
    /// Gaps recorded.
    pub gaps: Vec<Gap>,
    /// Partitions held back, and why.
    pub holds: Vec<Hold>,
    /// Watermarks after the cycle.
    pub watermarks: OffsetMap,
    /// Pending segments found already in the table (a commit whose marking was lost),
    /// now marked committed.
    pub recovered: usize,
    /// Pending runs dropped because they overlap what the table holds (another
    /// process converted some of their segments in a run of its own, which committed
    /// first), or because a segment turned up inside one of their gaps: the segments
    /// past the watermark are converted again by the next pass; and single segments
    /// overlapping the watermark (another version of their key is in the table),
    /// quarantined beside their key.
    pub runs_dropped: usize,
    /// Pending entries the watermark covers that hold offsets the table recorded as a
    /// gap (converted while another process committed that gap): dropped, so that the
    /// next pass quarantines their segments inside the gap as late.
    pub late_dropped: usize,
    /// Attempts used.
    pub attempts: usize,
    /// The etcd cross-check's verdict (held, unconfirmed and stopped partitions).
    pub crosscheck: CrossCheck,
    /// Timestamp (Unix ms) of the newest record in the table after the cycle, when
    /// known: what the freshness metric (now − this) measures.
    pub newest_record_ms: Option<i64>,
    /// Pending items that could not be read, with the reason: each holds its
    /// partition at its segment.
    pub unreadable: Vec<(String, String)>,
    /// Rows the commit deleted by position (an upsert table's superseded rows and
    /// tombstones), as its snapshot's summary counts them.
    pub superseded_rows: u64,
}

/// A commit cycle failed; nothing was lost, the pending files stay pending.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// The catalog failed.
    #[error("table {table}: catalog: {source}")]
    Catalog {
        /// The table.
        table: String,
        /// The catalog's error.
        source: Box<iceberg::Error>,
    },
    /// The ledger failed.
    #[error("table {table}: {source}")]
    Ledger {
        /// The table.
        table: String,
        /// The ledger's error.
        source: LedgerError,
    },
    /// The table's progress cannot be established: unreadable, rolled back past our
    /// commit, or lost (see [`ProgressError`]); an operator decides.
    #[error("table {table}: {source}")]
    Progress {
        /// The table.
        table: String,
        /// What is wrong.
        source: ProgressError,
    },
    /// A pending entry's data file cannot be read back.
    #[error("table {table}: pending segment {segment} has an unreadable data file: {source}")]
    DataFile {
        /// The table.
        table: String,
        /// The segment.
        segment: String,
        /// Why.
        source: Box<iceberg::Error>,
    },
    /// The table belongs to another feed, or kfs-iceberg did not create it.
    #[error("{source}")]
    Ownership {
        /// The table.
        table: String,
        /// Why the commit was refused.
        source: crate::table::OwnershipError,
    },
    /// Concurrent commits kept winning; the next cycle will try again.
    #[error("table {table}: gave up after {attempts} conflicting attempts")]
    Contended {
        /// The table.
        table: String,
        /// Attempts made.
        attempts: usize,
    },
}

impl CommitError {
    /// What the failure means.
    pub fn kind(&self) -> kfs_catalog::fault::ErrorKind {
        use kfs_catalog::fault::{ErrorKind, iceberg_error_kind};
        match self {
            Self::Catalog { source, .. } | Self::DataFile { source, .. } => {
                iceberg_error_kind(source)
            }
            Self::Ledger { source, .. } => source.kind(),
            Self::Progress { .. } | Self::Ownership { .. } => ErrorKind::Config,
            Self::Contended { .. } => ErrorKind::Conflict,
        }
    }
}

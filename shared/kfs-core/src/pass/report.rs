//! What a pass tells as it goes ([`Progress`]) and when it is done ([`PassReport`]).

use std::collections::{BTreeMap, BTreeSet};

use crate::commit::CommitOutcome;

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
pub struct PassReport {
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

impl PassReport {
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

//! The committer core, per table: plan (with `kfs_plan::commit`), append the pending
//! data files in one snapshot whose summary carries the full offset map, verify that
//! the commit landed, and mark the ledger entries committed.
//!
//! Exactly once comes from the table, not from locks: the plan starts at the
//! watermarks of the current snapshot; a conflicting commit re-reads the table and
//! re-plans (dropping whatever the new watermarks cover) before trying again; an
//! unknown outcome is resolved by looking for the commit's id in the table's history,
//! never by deleting files.

mod coalesce;
mod dead_letters;
pub(crate) mod replace;
pub(crate) use replace::carried_properties;

use crate::ledger::{EntryState, Ledger, LedgerEntry, LedgerError, partition_heads};
use crate::table::history::newest_in_files;
use crate::table::table_ident;
use crate::table::{
    ATTEMPT_ID_KEY, ancestry, attempt_of, find_commit, newest_record_ms, table_progress,
    table_watermarks,
};
use coalesce::{coalesce, relayout};
use dead_letters::commit_dead_letters;
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, ErrorKind};
use kfs_plan::commit::{CommitPlan, Hold, PendingSegment, PlanInput, plan_commit};
use kfs_plan::crosscheck::{AgedSegment, CrossCheck, CrossCheckPolicy, EtcdView, cross_check};
use kfs_plan::naming::TableName;
use kfs_plan::offsets::{Gap, MAX_TIMESTAMP_KEY, OffsetMap, SummaryError, ranges_from_summary};
use kfs_plan::progress::ProgressError;
use kfs_plan::sweep::TableProgress;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

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
    pub fn kind(&self) -> crate::fault::ErrorKind {
        use crate::fault::{ErrorKind, iceberg_error_kind};
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

/// The feed a table records as its owner, as the commit filters ledger entries by it.
struct Owner {
    topic: String,
    /// `None` for a table from before namespaces were recorded: any namespace.
    namespace: Option<String>,
}

impl Owner {
    /// The owner of `table`, which must be `topic`.
    fn of(table: &Table, topic: &str) -> Result<Self, crate::table::OwnershipError> {
        let (owner_topic, namespace) = crate::table::table_owner(table).ok_or_else(|| {
            crate::table::OwnershipError::Foreign {
                table: table.identifier().to_string(),
                feed: format!("topic {topic:?}"),
            }
        })?;
        if owner_topic != topic {
            return Err(crate::table::OwnershipError::Taken {
                table: table.identifier().to_string(),
                owner_topic,
                owner_namespace: namespace.unwrap_or_else(|| "(any)".into()),
                feed: format!("topic {topic:?}"),
            });
        }
        Ok(Self {
            topic: owner_topic,
            namespace,
        })
    }

    /// Whether `entry` belongs to the owner.
    fn feeds(&self, entry: &LedgerEntry) -> bool {
        entry.topic == self.topic
            && self.namespace.as_ref().is_none_or(|namespace| {
                kfs_plan::keys::SegmentKey::parse(&entry.segment)
                    .is_some_and(|(key, _)| key.namespace == *namespace)
            })
    }
}

/// The snapshot whose added ranges hold `[base, last]` of `partition`, if any.
fn find_range(
    table: &Table,
    partition: i32,
    base: i64,
    last: i64,
) -> Result<Option<i64>, SummaryError> {
    for snapshot in ancestry(table) {
        let properties = &snapshot.summary().additional_properties;
        if ranges_from_summary(properties)?
            .get(&partition)
            .is_some_and(|&(first, next)| first <= base && last < next)
        {
            return Ok(Some(snapshot.snapshot_id()));
        }
    }
    Ok(None)
}

pub(crate) fn pending_segment(entry: &LedgerEntry) -> PendingSegment {
    PendingSegment {
        id: entry.segment.clone(),
        partition: entry.partition,
        base_offset: entry.base_offset,
        last_offset: entry.last_offset,
        records: entry.records,
        segments: entry.segments() as u64,
        inner_gaps: entry.inner_gaps(),
    }
}

/// Runs one commit cycle for one table.
pub async fn commit_table(
    catalog: &dyn Catalog,
    ledger: &impl Ledger,
    name: &TableName,
    topic: &str,
    listing: &BTreeMap<i32, BTreeSet<i64>>,
    settings: &CommitSettings,
    now_ms: i64,
) -> Result<CommitOutcome, CommitError> {
    let table_name = name.to_string();
    let catalog_error = |source: iceberg::Error| CommitError::Catalog {
        table: table_name.clone(),
        source: Box::new(source),
    };
    let ledger_error = |source| CommitError::Ledger {
        table: table_name.clone(),
        source,
    };
    let summary_error = |source: ProgressError| CommitError::Progress {
        table: table_name.clone(),
        source,
    };
    let ident = table_ident(name);
    let mut table = catalog.load_table(&ident).await.map_err(catalog_error)?;
    // Only the owner's entries: another feed's pending files (converted before its
    // mapping collided) are never appended here.
    let owner = Owner::of(&table, topic).map_err(|source| CommitError::Ownership {
        table: table_name.clone(),
        source,
    })?;
    // The head of each partition's pending work, the partitions sharing what one
    // commit may take: a backlog of any size costs one commit's worth of reads.
    let keys = ledger
        .work_keys("pending", &table_name)
        .await
        .map_err(ledger_error)?;
    let partitions = keys
        .iter()
        .map(|k| k.partition)
        .collect::<HashSet<_>>()
        .len();
    let share = (settings.max_segments / partitions.max(1)).max(1);
    let mut pending = ledger
        .get_many(&partition_heads(&keys, share))
        .await
        .map_err(ledger_error)?;
    pending
        .entries
        .retain(|e| e.state == EntryState::Pending && e.table == table_name);
    // A pending item that cannot be read (reported by the pass) holds its partition
    // at its segment, as a listed segment not converted yet does, even once the
    // source no longer lists it: its offsets are never passed as a gap.
    let mut held_listing;
    let listing = if pending.unreadable.is_empty() {
        listing
    } else {
        held_listing = listing.clone();
        for (segment, _) in &pending.unreadable {
            if let Some((key, _)) = kfs_plan::keys::SegmentKey::parse(segment) {
                held_listing
                    .entry(key.partition)
                    .or_default()
                    .insert(key.base_offset);
            }
        }
        &held_listing
    };
    let mut outcome = CommitOutcome {
        unreadable: pending.unreadable.clone(),
        ..CommitOutcome::default()
    };
    let pending_entries: Vec<LedgerEntry> = pending
        .entries
        .into_iter()
        .filter(|e| owner.feeds(e))
        .collect();
    let entries: HashMap<&str, &LedgerEntry> = pending_entries
        .iter()
        .map(|e| (e.segment.as_str(), e))
        .collect();
    // The etcd cross-check decides which pending segments this cycle may consider;
    // a held segment stays listed, so the planner holds its partition behind it.
    let aged: Vec<AgedSegment> = pending_entries
        .iter()
        .map(|e| AgedSegment {
            segment: pending_segment(e),
            created_ms: e.created_ms,
        })
        .collect();
    let watermarks = table_watermarks(&table).map_err(summary_error)?;
    outcome.crosscheck = cross_check(
        &aged,
        &watermarks,
        &settings.etcd,
        settings.crosscheck,
        now_ms,
    );
    // Segments an operator skipped: the planner passes them with a skipped gap.
    let mut skipped: BTreeMap<i32, BTreeSet<i64>> = BTreeMap::new();
    // An unreadable skipped item is not skipped: its partition waits at it.
    for entry in ledger
        .scan(Some("skipped"), Some(&table_name))
        .await
        .map_err(ledger_error)?
        .entries
        .into_iter()
        .filter(|e| owner.feeds(e))
    {
        skipped
            .entry(entry.partition)
            .or_default()
            .insert(entry.base_offset);
    }
    let mut pending: Vec<PendingSegment> = outcome.crosscheck.allowed.clone();
    for attempt in 1..=settings.max_attempts {
        outcome.attempts = attempt;
        let progress = table_progress(&table).map_err(summary_error)?;
        let watermarks = &progress.watermarks;
        // Planned again without what it dropped, so that a partition held by an
        // entry that can never commit moves on in this pass (each round drops at
        // least one pending entry, so this ends).
        let plan = loop {
            let plan = plan_commit(&PlanInput {
                topic,
                watermarks,
                starts: &progress.starts,
                pending: &pending,
                listing,
                start_offsets: &settings.start_offsets,
                max_segments: settings.max_segments,
                skipped: &skipped,
            });
            let (recovered, dropped_late) = recover_covered(
                &table,
                &progress,
                ledger,
                &plan,
                &entries,
                &settings.start_offsets,
                now_ms,
            )
            .await
            .map_err(|e| match e {
                Recover::Ledger(e) => ledger_error(e),
                Recover::Summary(e) => summary_error(e.into()),
            })?;
            outcome.recovered += recovered;
            outcome.late_dropped += dropped_late;
            let dropped = drop_overlapping_runs(ledger, &plan, &entries, watermarks, now_ms)
                .await
                .map_err(ledger_error)?;
            outcome.runs_dropped += dropped.len();
            let covered: BTreeSet<&str> = plan.covered.iter().map(|s| s.id.as_str()).collect();
            pending.retain(|s| !covered.contains(s.id.as_str()) && !dropped.contains(&s.id));
            if dropped.is_empty() {
                break plan;
            }
        };
        outcome.holds = plan.holds.clone();
        outcome.watermarks = plan.offsets.clone();
        let previous_newest = newest_record_ms(&table);
        if plan.is_empty() {
            outcome.watermarks = watermarks.clone();
            outcome.newest_record_ms = previous_newest;
            return Ok(outcome);
        }
        let commit_id = plan.commit_id(topic);
        // Dead letters land first: a segment in the table has its dead letters in the
        // dead-letter table, and recovery from the table's progress stays exact.
        let dead_letters =
            commit_dead_letters(catalog, name, topic, &plan, &entries, settings, &commit_id)
                .await?;
        let data_files = data_files_of(&table, &plan, &entries, &table_name).await?;
        // Files written before the table's partition spec evolved are written again
        // in the current spec (an append takes files of the default spec only).
        let (data_files, relaid) = relayout(&table, data_files, &commit_id)
            .await
            .map_err(catalog_error)?;
        let (data_files, mut merged_away) = if settings.coalesce && data_files.len() > 1 {
            let target = crate::table::target_file_size(&table);
            coalesce(&table, data_files, target, &commit_id)
                .await
                .map_err(catalog_error)?
        } else {
            (data_files, Vec::new())
        };
        merged_away.extend(relaid);
        let file_count = data_files.len();
        let appended: HashSet<String> = data_files
            .iter()
            .map(|f| f.file_path().to_owned())
            .collect();
        let newest = previous_newest.max(newest_in_files(&data_files));
        let mut properties = plan.summary(topic, &progress.gaps).properties();
        if let Some(newest) = newest {
            properties.insert(MAX_TIMESTAMP_KEY.to_owned(), newest.to_string());
        }
        let snapshot_id =
            match append_and_verify(catalog, &table, data_files, properties, &commit_id)
                .await
                .map_err(catalog_error)?
            {
                Appended::Landed(landed, snapshot_id, ours) => {
                    table = landed;
                    if !ours {
                        // Another attempt at this commit landed, with its own layout:
                        // its snapshot may reference what this one merged away.
                        merged_away.clear();
                    }
                    snapshot_id
                }
                // Someone else committed first, or the swap silently failed: re-plan.
                Appended::Replan(moved) => {
                    table = moved;
                    continue;
                }
            };
        let taken: Vec<&LedgerEntry> = plan
            .take
            .iter()
            .filter_map(|s| entries.get(s.id.as_str()).copied())
            .collect();
        ledger
            .mark_committed(&taken, snapshot_id, now_ms)
            .await
            .map_err(ledger_error)?;
        // This attempt's snapshot landed, holding the merged files: the small ones are
        // garbage now (a crash before this leaves them to orphan cleanup).
        for path in merged_away.iter().filter(|path| !appended.contains(*path)) {
            let _ = crate::failpoint::delete_file(table.file_io(), path).await;
        }
        outcome.snapshot_id = Some(snapshot_id);
        outcome.segments = usize::try_from(plan.segments()).unwrap_or(usize::MAX);
        outcome.files = file_count;
        outcome.coalesced = merged_away.len();
        outcome.records = plan.records();
        outcome.dead_letters = dead_letters;
        outcome.gaps = plan.gaps.clone();
        outcome.newest_record_ms = newest_record_ms(&table);
        return Ok(outcome);
    }
    Err(CommitError::Contended {
        table: table_name,
        attempts: settings.max_attempts,
    })
}

/// Appends `files` with the summary `properties` on the snapshot `table` is at, or
/// not at all, and in the same metadata update stores the progress the summary carries
/// in the table's properties (where no other engine's rewrite or expiry removes it,
/// [`kfs_plan::progress`]), attributed to `attempt_id`; returns the catalog's answer,
/// which the caller checks against the table (an error may hide a commit that landed,
/// and a success a swap that did not).
pub(crate) async fn pinned_append(
    catalog: &dyn Catalog,
    table: &Table,
    files: Vec<iceberg::spec::DataFile>,
    properties: HashMap<String, String>,
    attempt_id: &str,
) -> Result<Option<iceberg::Error>, iceberg::Error> {
    // The snapshot the append adds gets the next sequence number of the table it is
    // pinned to (a table that moved meanwhile refuses the whole update).
    let sequence_number = table.metadata().next_sequence_number();
    let progress =
        kfs_plan::progress::progress_properties(&properties, attempt_id, sequence_number);
    let tx = Transaction::new(table);
    let tx = tx
        .fast_append()
        // The duplicate-path check reads every manifest of the table on every commit
        // (commit time grows with the table's age). Exactly once does not rest on it:
        // the plan starts at the watermarks of the snapshot the commit is pinned to,
        // so a racing commit makes this one conflict.
        .with_check_duplicate(false)
        .add_data_files(files)
        .set_snapshot_properties(properties)
        .apply(tx)?;
    let mut update = tx.update_table_properties();
    for (key, value) in progress {
        update = update.set(key, value);
    }
    let tx = update.apply(tx)?;
    Ok(tx
        .commit(&crate::catalog::PinnedCatalog::new(catalog, table.clone()))
        .await
        .err())
}

/// What a pinned append came to, by the table re-read after it.
pub(crate) enum Appended {
    /// The commit is in the table: the table as re-read, the commit's snapshot, and
    /// whether that snapshot is this attempt's (by its attempt id) rather than another
    /// process's attempt at the same commit, which may have laid files out otherwise.
    Landed(Table, i64, bool),
    /// It is not (another commit came first, or the swap silently failed): the table as
    /// re-read, to plan again on.
    Replan(Table),
}

/// Appends `files` pinned to the snapshot `table` is at, then re-reads the table and
/// looks for `commit_id` in its history, whatever the catalog answered (the SQL
/// catalog can report success for a swap that did not happen, and an error may hide a
/// commit that did). An error a re-plan cannot answer is returned.
pub(crate) async fn append_and_verify(
    catalog: &dyn Catalog,
    table: &Table,
    files: Vec<iceberg::spec::DataFile>,
    properties: HashMap<String, String>,
    commit_id: &str,
) -> Result<Appended, iceberg::Error> {
    let mut properties = properties;
    let attempt_id = uuid::Uuid::new_v4().simple().to_string();
    properties.insert(ATTEMPT_ID_KEY.to_owned(), attempt_id.clone());
    let answer = pinned_append(catalog, table, files, properties, &attempt_id).await?;
    let table = catalog.load_table(table.identifier()).await?;
    if let Some(found) = find_commit(&table, commit_id) {
        let ours = attempt_of(&table, found).as_deref() == Some(attempt_id.as_str());
        return Ok(Appended::Landed(table, found.snapshot_id(), ours));
    }
    match answer {
        Some(e) if !replannable(&e) => Err(e),
        _ => Ok(Appended::Replan(table)),
    }
}

/// Whether a commit that did not land may be planned again and retried: a conflict,
/// a failed requirement, or a retryable failure.
pub(crate) fn replannable(error: &iceberg::Error) -> bool {
    error.kind() == ErrorKind::DataInvalid || crate::fault::iceberg_error_kind(error).is_retryable()
}

enum Recover {
    Ledger(LedgerError),
    Summary(SummaryError),
}

/// Pending runs the plan holds as overlapping the watermark (their first segments are
/// in the table, their last are not), or with a segment listed inside one of their
/// gaps, can never be committed as they are: dropped from the ledger, so that the
/// next pass converts their segments past the watermark again.
///
/// A single segment overlapping the watermark disagrees with the table: the table
/// holds its first offsets from another version of its key (a rewrite, converted in
/// a run before its event reached a converter) or from another segment. It is
/// quarantined beside its key, naming the offsets of it the table lacks (which the
/// partition's next commit records as a gap), and its pending entry dropped: the
/// partition moves on, and an operator sees what was not ingested. (Where the table
/// holds nothing of the partition yet, the overlap is with a configured start inside
/// the segment: that holds the partition, as before, until the start is corrected.)
/// Returns the entries dropped.
async fn drop_overlapping_runs(
    ledger: &impl Ledger,
    plan: &CommitPlan,
    entries: &HashMap<&str, &LedgerEntry>,
    watermarks: &OffsetMap,
    now_ms: i64,
) -> Result<Vec<String>, crate::ledger::LedgerError> {
    let mut dropped = Vec::new();
    for hold in &plan.holds {
        let (kfs_plan::commit::HoldReason::Overlap { id, .. }
        | kfs_plan::commit::HoldReason::RunGapFilled { id, .. }) = &hold.reason
        else {
            continue;
        };
        let Some(&entry) = entries.get(id.as_str()) else {
            continue;
        };
        if entry.members.is_empty() {
            let (Some(next), true) = (hold.next_offset, watermarks.contains_key(&hold.partition))
            else {
                continue;
            };
            quarantine_overlap(ledger, entry, next, now_ms).await?;
        }
        // Its files are left to orphan cleanup, which keeps what a table references:
        // a run whose gap filled might still land through a process that listed
        // before the segment turned up, and a process planning on an older table may
        // be reading an overlapping run's files (its commit would conflict, but its
        // read of a deleted file would fail its cycle).
        if ledger.discard_pending(id).await? {
            dropped.push(id.clone());
        }
    }
    Ok(dropped)
}

/// Records `entry`, a single segment whose first offsets the table holds up to
/// `next - 1`, as quarantined beside its key (`{key}#overlap-{version}`; recorded
/// again after a crash, it is found there).
async fn quarantine_overlap(
    ledger: &impl Ledger,
    entry: &LedgerEntry,
    next: i64,
    now_ms: i64,
) -> Result<(), crate::ledger::LedgerError> {
    let error = format!(
        "{} (offsets {}-{}) overlaps what the table holds up to offset {}: the table took those offsets from another version of this key (rewritten after it was converted in a run) or from another segment; this version is not ingested, and its offsets {next}-{} are recorded as a gap by the partition's next commit",
        entry.segment,
        entry.base_offset,
        entry.last_offset,
        next.saturating_sub(1),
        entry.last_offset,
    );
    let quarantined = entry.quarantined_beside("overlap", &entry.etag, error, now_ms);
    ledger.insert(&quarantined).await.map(|_| ())
}

/// Pending entries the watermark already covers were committed by an earlier cycle
/// whose marking was lost: find the snapshot that added them and mark them (or, when
/// expiry has removed it, mark them at the current snapshot if the table's progress
/// shows their offsets in the table). A covered entry holding offsets the table
/// recorded as a gap was converted while that gap was committed (on another process's
/// older listing): its records are not in the table, and never will be. It is
/// dropped, so that the next pass finds its segments where they stand: in the table,
/// or late inside the gap and quarantined for an operator. Returns the entries
/// recovered and the entries dropped.
async fn recover_covered(
    table: &Table,
    progress: &TableProgress,
    ledger: &impl Ledger,
    plan: &CommitPlan,
    entries: &HashMap<&str, &LedgerEntry>,
    configured_starts: &BTreeMap<i32, i64>,
    now_ms: i64,
) -> Result<(usize, usize), Recover> {
    let (mut recovered, mut dropped) = (0, 0);
    for segment in &plan.covered {
        let Some(&entry) = entries.get(segment.id.as_str()) else {
            continue;
        };
        if segment.holds_offsets_in(&progress.gaps).is_some() {
            // (Its files are left to orphan cleanup, as a dropped run's are.)
            if ledger
                .discard_pending(&segment.id)
                .await
                .map_err(Recover::Ledger)?
            {
                dropped += 1;
            }
            continue;
        }
        let found = find_range(
            table,
            segment.partition,
            segment.base_offset,
            segment.last_offset,
        )
        .map_err(Recover::Summary)?;
        let snapshot_id = match found {
            Some(id) => Some(id),
            // The snapshot that took it has been expired: the offsets are in the table
            // unless they lie in a recorded gap or below where the partition began.
            None => progress
                .shows_committed(segment, configured_starts.get(&segment.partition).copied())
                .then(|| table.metadata().current_snapshot_id())
                .flatten(),
        };
        if let Some(snapshot_id) = snapshot_id {
            recovered += ledger
                .mark_committed(&[entry], snapshot_id, now_ms)
                .await
                .map_err(Recover::Ledger)?;
        }
    }
    Ok((recovered, dropped))
}

async fn data_files_of(
    table: &Table,
    plan: &CommitPlan,
    entries: &HashMap<&str, &LedgerEntry>,
    table_name: &str,
) -> Result<Vec<(iceberg::spec::DataFile, i32)>, CommitError> {
    let metadata = table.metadata();
    let mut files = Vec::new();
    for segment in &plan.take {
        let Some(entry) = entries.get(segment.id.as_str()) else {
            continue;
        };
        let descriptions = crate::ledger::resolve(&entry.data_files, table.file_io())
            .await
            .map_err(|source| CommitError::DataFile {
                table: table_name.to_owned(),
                segment: segment.id.clone(),
                source: Box::new(source),
            })?;
        for json in &descriptions {
            let file = crate::ledger::from_ledger(json, metadata).map_err(|source| {
                CommitError::DataFile {
                    table: table_name.to_owned(),
                    segment: segment.id.clone(),
                    source: Box::new(source),
                }
            })?;
            files.push(file);
        }
    }
    Ok(files)
}

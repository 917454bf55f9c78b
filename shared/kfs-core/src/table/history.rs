//! The table's history read once: the ancestry of the current snapshot, the progress
//! its properties store and its summaries carry, the newest record time, and where one
//! of our commit or maintenance ids is.

use crate::table::TIMESTAMP_MS_FIELD_ID;
use iceberg::spec::Snapshot;
use iceberg::table::Table;
use kfs_plan::offsets::{
    COMMIT_ID_KEY, MAX_TIMESTAMP_KEY, OffsetMap, SummaryError, gap_history_from_summary,
    gaps_from_summary, offsets_from_summary, starts_from_summary,
};
use kfs_plan::progress::{ProgressError, established, lineage, stored_progress};
use kfs_plan::sweep::TableProgress;
use std::collections::BTreeSet;

/// Summary key of a maintenance snapshot: what made it (`compaction`,
/// `manifest-rewrite`) and an id derived from its inputs, to recognise it after an
/// unknown commit outcome.
pub const MAINTENANCE_ID_KEY: &str = "kfs.maintenance-id";

/// Summary key of an append: an id unique to the attempt that wrote it. Two processes
/// may plan the same commit (same commit id) and lay its files out differently; only
/// the one whose attempt id is in the snapshot found deletes what it merged away.
pub const ATTEMPT_ID_KEY: &str = "kfs.attempt-id";

/// Snapshots an ancestry walk visits at most (a bound on a corrupt parent chain).
const HISTORY_LIMIT: usize = 10_000;

/// The snapshots from the current one back through its parents, newest first.
pub fn ancestry(table: &Table) -> impl Iterator<Item = &Snapshot> {
    let metadata = table.metadata();
    let mut next = metadata.current_snapshot().map(|s| s.as_ref());
    std::iter::from_fn(move || {
        let snapshot = next?;
        next = snapshot
            .parent_snapshot_id()
            .and_then(|id| metadata.snapshot_by_id(id))
            .map(|s| s.as_ref());
        Some(snapshot)
    })
    .take(HISTORY_LIMIT)
}

/// The table's watermarks (see [`table_progress`]).
pub fn table_watermarks(table: &Table) -> Result<OffsetMap, ProgressError> {
    Ok(table_progress(table)?.watermarks)
}

/// The table's watermarks, its partitions' starts, and every gap it has recorded: from
/// the progress its properties store (which no other engine's rewrite or expiry
/// removes), or from its snapshots' summaries where those are newer (a commit by a
/// version that kept progress in summaries only). An error when the table was rolled
/// back past our last commit, or holds rows but no progress at all (ours was expired
/// before it was kept in properties): both need an operator.
pub fn table_progress(table: &Table) -> Result<TableProgress, ProgressError> {
    let stored = stored_progress(table.metadata().properties())?;
    let sequences: Vec<i64> = ancestry(table).map(Snapshot::sequence_number).collect();
    let all: Vec<i64> = table
        .metadata()
        .snapshots()
        .map(|s| s.sequence_number())
        .collect();
    let lineage = lineage(
        stored.as_ref().map_or(0, |s| s.sequence_number),
        &sequences,
        &all,
    );
    match established(stored, summary_progress(table)?, lineage)? {
        Some(progress) => Ok(progress),
        None => match current_records(table) {
            0 => Ok(TableProgress::default()),
            records => Err(ProgressError::Lost { records }),
        },
    }
}

/// Rows the current snapshot holds, by its summary's `total-records` (0 without one).
fn current_records(table: &Table) -> u64 {
    table
        .metadata()
        .current_snapshot()
        .and_then(|s| s.summary().additional_properties.get("total-records"))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The progress the summaries of the current ancestry record, and the sequence number
/// of the snapshot carrying it: the offset map and starts of the newest snapshot that
/// carries one, and the gap history of the newest snapshot that carries one plus the
/// gaps of newer snapshots (and, for tables written before the history was carried,
/// of every snapshot still in the table).
fn summary_progress(table: &Table) -> Result<Option<(TableProgress, i64)>, SummaryError> {
    let mut gaps = BTreeSet::new();
    for snapshot in ancestry(table) {
        let summary = &snapshot.summary().additional_properties;
        gaps.extend(gaps_from_summary(summary)?);
        if let Some(history) = gap_history_from_summary(summary)? {
            gaps.extend(history);
            break;
        }
    }
    for snapshot in ancestry(table) {
        let summary = &snapshot.summary().additional_properties;
        if let Some(watermarks) = offsets_from_summary(summary)? {
            let progress = TableProgress {
                watermarks,
                starts: starts_from_summary(summary)?.unwrap_or_default(),
                gaps: gaps.into_iter().collect(),
            };
            // Only a commit advances progress: a maintenance snapshot carrying the
            // offset map forward (ours, or a copy of stale summaries) never outranks
            // the stored progress.
            let sequence = match summary.contains_key(COMMIT_ID_KEY) {
                true => snapshot.sequence_number(),
                false => 0,
            };
            return Ok(Some((progress, sequence)));
        }
    }
    Ok(None)
}

/// The newest record timestamp (Unix ms) the table has recorded, if any: in its stored
/// progress, or else in its snapshots' summaries.
pub fn newest_record_ms(table: &Table) -> Option<i64> {
    let stored = stored_progress(table.metadata().properties())
        .ok()
        .flatten()
        .and_then(|s| s.newest_record_ms);
    let summarised = ancestry(table).find_map(|s| {
        s.summary()
            .additional_properties
            .get(MAX_TIMESTAMP_KEY)
            .and_then(|v| v.parse().ok())
    });
    stored.max(summarised)
}

/// The newest record timestamp among data files, from their `timestamp_ms` upper bounds.
pub(crate) fn newest_in_files(files: &[iceberg::spec::DataFile]) -> Option<i64> {
    files
        .iter()
        .filter_map(|f| f.upper_bounds().get(&TIMESTAMP_MS_FIELD_ID))
        .filter_map(|bound| match bound.literal() {
            iceberg::spec::PrimitiveLiteral::Long(ms) => Some(*ms),
            _ => None,
        })
        .max()
}

/// Where a commit is found in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FoundCommit {
    /// A snapshot in the current ancestry carries it.
    Snapshot(i64),
    /// The stored progress is its (its snapshot has since been expired, or another
    /// engine's snapshots followed it): the current snapshot holds it.
    Stored(i64),
}

impl FoundCommit {
    /// The snapshot to record the commit at.
    pub fn snapshot_id(self) -> i64 {
        match self {
            Self::Snapshot(id) | Self::Stored(id) => id,
        }
    }
}

/// Whether the table holds commit `commit_id`: a snapshot of the current ancestry
/// carries it, or the stored progress is its (which survives other engines' rewrites
/// and expiry of the snapshot in between).
pub fn find_commit(table: &Table, commit_id: &str) -> Option<FoundCommit> {
    if let Some(id) = find_tagged(table, COMMIT_ID_KEY, commit_id) {
        return Some(FoundCommit::Snapshot(id));
    }
    let stored = stored_progress(table.metadata().properties())
        .ok()
        .flatten()?;
    (stored.commit_id == commit_id)
        .then(|| table.metadata().current_snapshot_id())
        .flatten()
        .map(FoundCommit::Stored)
}

/// The attempt id of the commit `found` (see [`ATTEMPT_ID_KEY`]).
pub fn attempt_of(table: &Table, found: FoundCommit) -> Option<String> {
    match found {
        FoundCommit::Snapshot(id) => table
            .metadata()
            .snapshot_by_id(id)
            .and_then(|s| s.summary().additional_properties.get(ATTEMPT_ID_KEY))
            .cloned(),
        FoundCommit::Stored(_) => stored_progress(table.metadata().properties())
            .ok()
            .flatten()
            .and_then(|s| s.attempt_id),
    }
}

/// Whether a snapshot with this maintenance id is in the current ancestry.
pub fn find_maintenance(table: &Table, maintenance_id: &str) -> Option<i64> {
    find_tagged(table, MAINTENANCE_ID_KEY, maintenance_id)
}

/// The newest snapshot in the current ancestry whose summary has `key` = `value`.
fn find_tagged(table: &Table, key: &str, value: &str) -> Option<i64> {
    ancestry(table)
        .find(|s| {
            s.summary()
                .additional_properties
                .get(key)
                .map(String::as_str)
                == Some(value)
        })
        .map(Snapshot::snapshot_id)
}

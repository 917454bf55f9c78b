//! The table's history read once: the ancestry of the current snapshot, the offsets
//! and progress its summaries carry, the newest record time, and the snapshots that
//! carry one of our commit or maintenance ids.

use crate::table::TIMESTAMP_MS_FIELD_ID;
use iceberg::spec::Snapshot;
use iceberg::table::Table;
use kfs_plan::offsets::{
    COMMIT_ID_KEY, MAX_TIMESTAMP_KEY, OffsetMap, SummaryError, gap_history_from_summary,
    gaps_from_summary, offsets_from_summary, starts_from_summary,
};
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

/// The table's watermarks: the offset map of the newest snapshot that carries one.
pub fn table_watermarks(table: &Table) -> Result<OffsetMap, SummaryError> {
    Ok(table_offsets(table)?.0)
}

/// The offset map of the newest snapshot that carries one, and the partitions' starts
/// it records (empty for snapshots written before starts were recorded).
fn table_offsets(table: &Table) -> Result<(OffsetMap, OffsetMap), SummaryError> {
    for snapshot in ancestry(table) {
        let summary = &snapshot.summary().additional_properties;
        if let Some(offsets) = offsets_from_summary(summary)? {
            return Ok((offsets, starts_from_summary(summary)?.unwrap_or_default()));
        }
    }
    Ok(Default::default())
}

/// The table's watermarks, its partitions' starts, and every gap it has recorded: the
/// gap history of the newest snapshot that carries one, plus the gaps of newer
/// snapshots (and, for tables written before the history was carried, of every
/// snapshot still in the table).
pub fn table_progress(table: &Table) -> Result<TableProgress, SummaryError> {
    let mut gaps = BTreeSet::new();
    for snapshot in ancestry(table) {
        let summary = &snapshot.summary().additional_properties;
        gaps.extend(gaps_from_summary(summary)?);
        if let Some(history) = gap_history_from_summary(summary)? {
            gaps.extend(history);
            break;
        }
    }
    let gaps = gaps.into_iter().collect();
    let (watermarks, starts) = table_offsets(table)?;
    Ok(TableProgress {
        watermarks,
        starts,
        gaps,
    })
}

/// The newest record timestamp (Unix ms) the table's snapshots have recorded, if any.
pub fn newest_record_ms(table: &Table) -> Option<i64> {
    ancestry(table).find_map(|s| {
        s.summary()
            .additional_properties
            .get(MAX_TIMESTAMP_KEY)
            .and_then(|v| v.parse().ok())
    })
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

/// The snapshot in the current ancestry that carries `commit_id`, if any.
pub fn find_commit(table: &Table, commit_id: &str) -> Option<i64> {
    find_tagged(table, COMMIT_ID_KEY, commit_id)
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

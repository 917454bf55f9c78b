//! What a commit cycle finds already settled: pending entries the table covers
//! (marked committed at the snapshot that took them, or dropped when they hold a
//! recorded gap's offsets), and pending runs or segments that overlap the watermark
//! (dropped, or quarantined beside their key).

use std::collections::{BTreeMap, HashMap};

use iceberg::table::Table;
use kfs_plan::commit::{CommitPlan, PendingSegment};
use kfs_plan::offsets::{OffsetMap, SummaryError, ranges_from_summary};
use kfs_plan::sweep::TableProgress;

use crate::ledger::{Ledger, LedgerEntry, LedgerError};
use crate::table::ancestry;

pub(super) enum Recover {
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
pub(super) async fn drop_overlapping_runs(
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
pub(super) async fn recover_covered(
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

/// A pending entry as the commit planner sees it.
pub(super) fn pending_segment(entry: &LedgerEntry) -> PendingSegment {
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

//! Commit planning: which pending segments of one table a commit may take.
//!
//! Per partition, only a contiguous run starting at the table's watermark (the next
//! expected offset, from the current snapshot's summary) is committable. A partition
//! seen for the first time starts at its earliest segment in the source listing, or at
//! a configured offset, never at whichever segment happened to be converted first. A gap
//! before the next pending segment waits while the listing shows a segment inside it
//! (not yet converted, or quarantined); once no listed segment covers it, the gap is
//! recorded and the run goes on. Pending segments the watermark already covers are
//! reported, never committed again.

use std::collections::{BTreeMap, BTreeSet};

use crate::offsets::{CommitSummary, Gap, GapReason, OffsetMap};

/// A converted segment waiting to be committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingSegment {
    /// Ledger id of the segment.
    pub id: String,
    /// Partition.
    pub partition: i32,
    /// Base offset of its first batch.
    pub base_offset: i64,
    /// Offset of its last record.
    pub last_offset: i64,
    /// Data records it holds.
    pub records: u64,
    /// Segments it holds: more than one for a run converted into one set of files.
    pub segments: u64,
    /// Offsets inside `[base_offset, last_offset]` that no segment of the run holds
    /// (`(from, to)`, inclusive, in order): no segment was listed there when the run
    /// was converted. Committed as gaps, unless a segment is listed there by then.
    pub inner_gaps: Vec<(i64, i64)>,
}

impl PendingSegment {
    /// The first of `gaps` (recorded in the table) that covers an offset this segment
    /// holds, if any: such a segment was converted while its offsets were committed
    /// as a gap, so the table does not hold its records whatever its watermark says.
    /// The run's own inner gaps are not offsets it holds.
    pub fn holds_offsets_in(&self, gaps: &[Gap]) -> Option<Gap> {
        gaps.iter()
            .filter(|g| g.partition == self.partition)
            .find(|g| {
                let (from, to) = (g.from.max(self.base_offset), g.to.min(self.last_offset));
                from <= to && !self.gaps_cover(from, to)
            })
            .copied()
    }

    /// Whether the run's inner gaps cover every offset of `[from, to]`.
    fn gaps_cover(&self, from: i64, to: i64) -> bool {
        let mut next = from;
        for &(gap_from, gap_to) in &self.inner_gaps {
            if gap_to < next {
                continue;
            }
            if gap_from > next {
                return false;
            }
            match gap_to.checked_add(1) {
                Some(after) if after <= to => next = after,
                _ => return true,
            }
        }
        false
    }
}

/// What the planner needs to know about one table.
#[derive(Debug, Clone, Copy)]
pub struct PlanInput<'a> {
    /// Topic feeding the table.
    pub topic: &'a str,
    /// Next offset per partition, from the current snapshot (empty for a new table).
    pub watermarks: &'a OffsetMap,
    /// Pending segments of the table, in any order.
    pub pending: &'a [PendingSegment],
    /// Base offsets of the complete segments in the source, per partition.
    pub listing: &'a BTreeMap<i32, BTreeSet<i64>>,
    /// Where each partition began in the table, from the current snapshot.
    pub starts: &'a OffsetMap,
    /// Configured starting offsets for partitions seen for the first time.
    pub start_offsets: &'a BTreeMap<i32, i64>,
    /// Most segments one commit may take (bounds the work of one cycle).
    pub max_segments: usize,
    /// Base offsets, per partition, of listed segments an operator skipped: nothing
    /// waits for them, and the gap over them is recorded as skipped.
    pub skipped: &'a BTreeMap<i32, BTreeSet<i64>>,
}

/// Why a partition cannot move further in this commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoldReason {
    /// A segment inside the gap before the next pending segment is listed but not
    /// pending (not converted yet, or quarantined).
    WaitingForSegment {
        /// Base offset of the listed segment.
        base_offset: i64,
    },
    /// A pending segment starts below the watermark but ends above it: committing it
    /// would duplicate records, skipping it would lose some.
    Overlap {
        /// The segment's ledger id.
        id: String,
        /// Its base offset.
        base_offset: i64,
        /// Its last offset.
        last_offset: i64,
    },
    /// A segment is listed inside a gap of a pending run: the run can never be
    /// committed as it is (its gap is not empty), and is converted again.
    RunGapFilled {
        /// The run's ledger id.
        id: String,
        /// Base offset of the segment listed inside its gap.
        base_offset: i64,
    },
    /// A partition seen for the first time has no listed segment and no configured
    /// start, so where it begins is unknown.
    NoStartingPoint,
    /// The commit reached its segment limit.
    SegmentLimit,
    /// A pending segment ends at the largest offset: the watermark after it cannot be
    /// represented (the converter refuses such segments; this guards the plan).
    OffsetOverflow {
        /// The segment's ledger id.
        id: String,
    },
}

/// A partition held back, with the offset it waits at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// Partition.
    pub partition: i32,
    /// Next offset the table expects, if known.
    pub next_offset: Option<i64>,
    /// Why it waits.
    pub reason: HoldReason,
}

/// The plan of one commit.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CommitPlan {
    /// Segments to commit, by partition, in offset order.
    pub take: Vec<PendingSegment>,
    /// Full map of next offsets after the commit.
    pub offsets: OffsetMap,
    /// Where each partition began, after the commit (the partitions it starts added,
    /// unless their start was configured).
    pub starts: OffsetMap,
    /// Ranges the commit adds, per partition: `[first, next)` (gaps included).
    pub ranges: BTreeMap<i32, (i64, i64)>,
    /// Gaps the commit records.
    pub gaps: Vec<Gap>,
    /// Pending segments the watermark already covers.
    pub covered: Vec<PendingSegment>,
    /// Partitions that could not move (fully or partly).
    pub holds: Vec<Hold>,
}

impl CommitPlan {
    /// True when the commit would change nothing.
    pub fn is_empty(&self) -> bool {
        self.take.is_empty() && self.gaps.is_empty()
    }

    /// Data records the commit adds.
    pub fn records(&self) -> u64 {
        self.take.iter().map(|s| s.records).sum()
    }

    /// Segments the commit adds (a run counts its segments).
    pub fn segments(&self) -> u64 {
        self.take.iter().map(|s| s.segments).sum()
    }

    /// A commit id that depends only on the topic and the segments taken, so that a
    /// retried plan finds its own earlier commit.
    pub fn commit_id(&self, topic: &str) -> String {
        let mut hash = crate::hash::Fnv1a::default();
        hash.write_field(topic.as_bytes());
        for segment in &self.take {
            hash.write_field(
                format!(
                    "{}:{}-{}",
                    segment.id, segment.base_offset, segment.last_offset
                )
                .as_bytes(),
            );
        }
        for gap in &self.gaps {
            hash.write_field(format!("{}:{}-{}", gap.partition, gap.from, gap.to).as_bytes());
        }
        let hash = hash.finish();
        format!("{hash:016x}")
    }

    /// The snapshot summary this commit carries, given the gaps the table has recorded
    /// before it (carried forward with this commit's own).
    pub fn summary(&self, topic: &str, recorded_gaps: &[Gap]) -> CommitSummary {
        let mut gap_history: Vec<Gap> = recorded_gaps.to_vec();
        gap_history.extend(self.gaps.iter().copied());
        gap_history.sort_unstable();
        gap_history.dedup();
        CommitSummary {
            topic: topic.to_owned(),
            offsets: self.offsets.clone(),
            starts: self.starts.clone(),
            ranges: self.ranges.clone(),
            gaps: self.gaps.clone(),
            gap_history,
            commit_id: self.commit_id(topic),
            segments: self.segments(),
            records: self.records(),
        }
    }
}

/// Plans the commit of a sidecar (the dead-letter table, a mirror's change log) that
/// must land before the table's commit of `taken` (the segments the table's plan
/// takes, each with the records it brings the sidecar): every segment with records
/// the sidecar's `watermarks` do not cover yet, and the offset map moved past all of
/// `taken`. The table's commit lands only after this one, so a segment in the table
/// always has its records in the sidecar; a retried or raced commit takes nothing
/// twice. With `rows_checked` (a sidecar whose rows say which offsets it holds: the
/// change log), a covered segment is taken too, for the caller to leave out the rows
/// the sidecar holds: a run taken before the table's commit failed may come back cut
/// otherwise (a segment that turned up in its gap), and its offsets below the
/// watermark are not all in the sidecar.
pub fn plan_sidecar(
    watermarks: &OffsetMap,
    taken: &[PendingSegment],
    rows_checked: bool,
) -> CommitPlan {
    let mut plan = CommitPlan {
        offsets: watermarks.clone(),
        ..CommitPlan::default()
    };
    for segment in taken {
        let next = segment.last_offset.saturating_add(1);
        if !rows_checked
            && watermarks
                .get(&segment.partition)
                .is_some_and(|watermark| segment.last_offset < *watermark)
        {
            continue;
        }
        let offset = plan.offsets.entry(segment.partition).or_insert(next);
        *offset = (*offset).max(next);
        if segment.records == 0 {
            continue;
        }
        let range = plan
            .ranges
            .entry(segment.partition)
            .or_insert((segment.base_offset, next));
        range.0 = range.0.min(segment.base_offset);
        range.1 = range.1.max(next);
        plan.take.push(segment.clone());
    }
    plan
}

/// Plans one commit for one table.
pub fn plan_commit(input: &PlanInput<'_>) -> CommitPlan {
    let mut by_partition: BTreeMap<i32, Vec<&PendingSegment>> = BTreeMap::new();
    for segment in input.pending {
        by_partition
            .entry(segment.partition)
            .or_default()
            .push(segment);
    }
    let mut plan = CommitPlan {
        offsets: input.watermarks.clone(),
        starts: input.starts.clone(),
        ..CommitPlan::default()
    };
    let empty = BTreeSet::new();
    for (partition, mut segments) in by_partition {
        segments.sort_by_key(|s| (s.base_offset, s.last_offset));
        let listed = input.listing.get(&partition).unwrap_or(&empty);
        let skipped = input.skipped.get(&partition).unwrap_or(&empty);
        let start = input
            .watermarks
            .get(&partition)
            .or_else(|| input.start_offsets.get(&partition))
            .or_else(|| listed.first())
            .copied();
        let Some(start) = start else {
            plan.holds.push(Hold {
                partition,
                next_offset: None,
                reason: HoldReason::NoStartingPoint,
            });
            continue;
        };
        let mut next = start;
        let mut first_taken: Option<i64> = None;
        for segment in segments {
            if segment.last_offset < next {
                plan.covered.push(segment.clone());
                continue;
            }
            let hold = |reason| Hold {
                partition,
                next_offset: Some(next),
                reason,
            };
            let taken = plan.take.len();
            if let Some(reason) = stop_before(segment, next, taken, input, listed, skipped) {
                plan.holds.push(hold(reason));
                break;
            }
            if segment.base_offset > next {
                plan.gaps.push(Gap {
                    partition,
                    from: next,
                    to: segment.base_offset - 1,
                    reason: gap_reason(skipped, next, segment.base_offset - 1),
                });
            }
            let Some(after) = segment.last_offset.checked_add(1) else {
                plan.holds.push(hold(HoldReason::OffsetOverflow {
                    id: segment.id.clone(),
                }));
                break;
            };
            for &(from, to) in &segment.inner_gaps {
                plan.gaps.push(Gap {
                    partition,
                    from,
                    to,
                    reason: gap_reason(skipped, from, to),
                });
            }
            first_taken.get_or_insert(next);
            next = after;
            plan.take.push(segment.clone());
        }
        if let Some(first) = first_taken {
            // A configured start excludes what lies below it on purpose; a start taken
            // from the listing is recorded, so that an earlier segment turning up later
            // is surfaced rather than taken for committed.
            if !input.watermarks.contains_key(&partition)
                && !input.start_offsets.contains_key(&partition)
            {
                plan.starts.insert(partition, first);
            }
            plan.ranges.insert(partition, (first, next));
            plan.offsets.insert(partition, next);
        }
    }
    plan
}

/// Why a partition's commit stops before `segment`, its offsets continuing at `next`
/// with `taken` segments already taken, if it does: the segment overlaps what is
/// committed, the cycle's segment limit is reached, a segment turned up inside the
/// run's gaps, or a listed segment (not skipped) is still to come before it.
fn stop_before(
    segment: &PendingSegment,
    next: i64,
    taken: usize,
    input: &PlanInput<'_>,
    listed: &BTreeSet<i64>,
    skipped: &BTreeSet<i64>,
) -> Option<HoldReason> {
    if segment.base_offset < next {
        return Some(HoldReason::Overlap {
            id: segment.id.clone(),
            base_offset: segment.base_offset,
            last_offset: segment.last_offset,
        });
    }
    if taken >= input.max_segments {
        return Some(HoldReason::SegmentLimit);
    }
    if let Some(&inside) = segment
        .inner_gaps
        .iter()
        .find_map(|&(from, to)| listed.range(from..=to).find(|base| !skipped.contains(base)))
    {
        return Some(HoldReason::RunGapFilled {
            id: segment.id.clone(),
            base_offset: inside,
        });
    }
    if segment.base_offset > next
        && let Some(&waiting) = listed
            .range(next..segment.base_offset)
            .find(|base| !skipped.contains(base))
    {
        return Some(HoldReason::WaitingForSegment {
            base_offset: waiting,
        });
    }
    None
}

/// Why offsets `from..=to` are a gap: an operator skipped a segment among them, or no
/// segment covers them.
fn gap_reason(skipped: &BTreeSet<i64>, from: i64, to: i64) -> GapReason {
    if skipped.range(from..=to).next().is_some() {
        GapReason::Skipped
    } else {
        GapReason::NoSegment
    }
}

#[cfg(test)]
#[path = "commit_tests.rs"]
mod tests;

//! What a listed segment is, given the table's progress, before any ledger lookup:
//! a segment wholly below its partition's watermark and outside every recorded gap is
//! in the table already, so the sweep need not read the ledger for it; a segment
//! inside a recorded gap arrived after its offsets were committed as missing and must
//! be surfaced to an operator, never ingested behind the watermark and never dropped
//! without a word; so must a segment below the offset its partition began at, which
//! turned up after the partition's first commit.
//!
//! The same progress says which keys a sweep must list at all
//! ([`TableProgress::ranges_to_list`]): segment keys sort by base offset, so each
//! partition is listed after its watermark, plus the few ranges where a late segment
//! would be (below the start, inside a gap). What is retained below the watermark is
//! never listed, and a tick's cost follows new segments, not retention.

use crate::commit::PendingSegment;
use crate::offsets::{Gap, OffsetMap};

/// A table's progress as its snapshots record it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableProgress {
    /// Next offset per partition (the current offset map).
    pub watermarks: OffsetMap,
    /// Where each partition began in the table (partitions first committed before
    /// starts were recorded have none).
    pub starts: OffsetMap,
    /// Every gap the table's history records.
    pub gaps: Vec<Gap>,
}

/// Where a listed segment stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListedSegment {
    /// At or above the watermark (or its partition is new): look it up, convert it if new.
    Open,
    /// Below the watermark, outside every gap: already in the table.
    Committed,
    /// Below the watermark, inside this recorded gap: it came too late.
    LateAfterGap(Gap),
    /// Below the offset its partition began at: it came after the partition's first
    /// commit, and the table has never held it.
    LateBeforeStart {
        /// The partition's first offset in the table.
        start: i64,
    },
}

/// Base offsets of one partition a sweep lists, inclusive; `None` is unbounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BaseRange {
    /// The lowest base offset, if bounded.
    pub from: Option<i64>,
    /// The highest base offset, if bounded.
    pub to: Option<i64>,
}

impl BaseRange {
    /// Every base offset.
    pub const ALL: Self = Self {
        from: None,
        to: None,
    };

    /// Whether `base_offset` lies in the range.
    pub fn contains(&self, base_offset: i64) -> bool {
        self.from.is_none_or(|from| base_offset >= from)
            && self.to.is_none_or(|to| base_offset <= to)
    }

    /// Whether `base_offset` lies above the range: a listing in key order can stop.
    pub fn is_below(&self, base_offset: i64) -> bool {
        self.to.is_some_and(|to| base_offset > to)
    }
}

impl TableProgress {
    /// The base offset ranges of `partition` a sweep must list, in ascending order
    /// and disjoint: below the partition's start and inside each recorded gap (where
    /// a segment that came late would be), and from the watermark on (new segments).
    /// A partition without a watermark is listed whole. Every other listed segment
    /// would be [`ListedSegment::Committed`], so the sweep need not see it.
    pub fn ranges_to_list(&self, partition: i32) -> Vec<BaseRange> {
        let Some(&next) = self.watermarks.get(&partition) else {
            return vec![BaseRange::ALL];
        };
        let mut ranges: Vec<BaseRange> = Vec::new();
        // Offsets are never negative: a start at zero has nothing below it.
        if let Some(&start) = self.starts.get(&partition)
            && start > 0
        {
            ranges.push(BaseRange {
                from: None,
                to: Some(start - 1),
            });
        }
        let mut gaps: Vec<&Gap> = self
            .gaps
            .iter()
            .filter(|g| g.partition == partition && g.from < next)
            .collect();
        gaps.sort_by_key(|g| (g.from, g.to));
        ranges.extend(gaps.into_iter().map(|g| BaseRange {
            from: Some(g.from),
            to: Some(g.to),
        }));
        ranges.push(BaseRange {
            from: Some(next),
            to: None,
        });
        merge(ranges)
    }

    /// Whether the progress alone shows the offsets `segment` holds in the table
    /// (when the snapshot that added them has been expired): below the watermark, at
    /// or past the partition's start (recorded, else `configured_start`), and in no
    /// recorded gap (a run's own inner gaps aside).
    pub fn shows_committed(&self, segment: &PendingSegment, configured_start: Option<i64>) -> bool {
        let below_watermark = self
            .watermarks
            .get(&segment.partition)
            .is_some_and(|&next| segment.last_offset < next);
        let past_start = self
            .starts
            .get(&segment.partition)
            .copied()
            .or(configured_start)
            .is_none_or(|start| segment.base_offset >= start);
        below_watermark && past_start && segment.holds_offsets_in(&self.gaps).is_none()
    }

    /// Classifies the segment of `partition` starting at `base_offset`.
    pub fn classify(&self, partition: i32, base_offset: i64) -> ListedSegment {
        if let Some(&start) = self.starts.get(&partition)
            && base_offset < start
        {
            return ListedSegment::LateBeforeStart { start };
        }
        match self.watermarks.get(&partition) {
            Some(&next) if base_offset < next => self
                .gaps
                .iter()
                .find(|g| g.partition == partition && g.from <= base_offset && base_offset <= g.to)
                .map_or(ListedSegment::Committed, |gap| {
                    ListedSegment::LateAfterGap(*gap)
                }),
            _ => ListedSegment::Open,
        }
    }
}

/// Merges ranges sorted by their start where they overlap or touch.
fn merge(ranges: Vec<BaseRange>) -> Vec<BaseRange> {
    let mut merged: Vec<BaseRange> = Vec::with_capacity(ranges.len());
    for range in ranges {
        if let Some(last) = merged.last_mut() {
            let touches = match (last.to, range.from) {
                (None, _) | (_, None) => true,
                (Some(to), Some(from)) => from <= to.saturating_add(1),
            };
            if touches {
                last.to = match (last.to, range.to) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    _ => None,
                };
                continue;
            }
        }
        merged.push(range);
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offsets::GapReason;

    #[test]
    fn classifies_against_watermarks_and_gaps() {
        let progress = TableProgress {
            watermarks: OffsetMap::from([(0, 100)]),
            starts: OffsetMap::from([(0, 10)]),
            gaps: vec![Gap {
                partition: 0,
                from: 20,
                to: 29,
                reason: GapReason::NoSegment,
            }],
        };
        assert_eq!(progress.classify(0, 10), ListedSegment::Committed);
        assert_eq!(
            progress.classify(0, 0),
            ListedSegment::LateBeforeStart { start: 10 }
        );
        assert_eq!(progress.classify(0, 100), ListedSegment::Open);
        assert_eq!(progress.classify(1, 0), ListedSegment::Open);
        assert!(matches!(
            progress.classify(0, 20),
            ListedSegment::LateAfterGap(_)
        ));
        assert_eq!(progress.classify(0, 30), ListedSegment::Committed);
        let segment = |partition, base_offset, last_offset| PendingSegment {
            id: String::new(),
            partition,
            base_offset,
            last_offset,
            records: 1,
            segments: 1,
            inner_gaps: Vec::new(),
        };
        assert!(progress.shows_committed(&segment(0, 30, 39), None));
        assert!(
            !progress.shows_committed(&segment(0, 15, 24), None),
            "overlaps the gap"
        );
        let mut run = segment(0, 15, 34);
        run.inner_gaps = progress.gaps.iter().map(|g| (g.from, g.to)).collect();
        assert!(progress.shows_committed(&run, None), "the run's own gap");
        assert!(
            !progress.shows_committed(&segment(0, 0, 9), None),
            "below the start"
        );
        assert!(
            !progress.shows_committed(&segment(0, 95, 104), None),
            "past the watermark"
        );
        assert!(
            !progress.shows_committed(&segment(1, 0, 9), None),
            "no watermark"
        );
    }

    #[test]
    fn lists_only_where_a_segment_may_need_work() {
        let gap = |from, to| Gap {
            partition: 0,
            from,
            to,
            reason: GapReason::NoSegment,
        };
        let progress = TableProgress {
            watermarks: OffsetMap::from([(0, 100)]),
            starts: OffsetMap::from([(0, 10)]),
            gaps: vec![gap(50, 59), gap(20, 29), gap(30, 34)],
        };
        let range = |from, to| BaseRange { from, to };
        assert_eq!(
            progress.ranges_to_list(0),
            vec![
                range(None, Some(9)),
                range(Some(20), Some(34)),
                range(Some(50), Some(59)),
                range(Some(100), None),
            ]
        );
        assert_eq!(progress.ranges_to_list(1), vec![BaseRange::ALL]);
        // Every offset the ranges leave out classifies as committed.
        let ranges = progress.ranges_to_list(0);
        for base in 0..120 {
            let listed = ranges.iter().any(|r| r.contains(base));
            let committed = progress.classify(0, base) == ListedSegment::Committed;
            assert_eq!(listed, !committed, "base {base}");
        }
        // A start at zero has nothing below it; a gap reaching the watermark merges.
        let progress = TableProgress {
            watermarks: OffsetMap::from([(0, 100)]),
            starts: OffsetMap::from([(0, 0)]),
            gaps: vec![gap(90, 99)],
        };
        assert_eq!(progress.ranges_to_list(0), vec![range(Some(90), None)]);
        assert!(range(Some(90), Some(95)).is_below(96));
        assert!(!range(Some(90), None).is_below(i64::MAX));
    }
}

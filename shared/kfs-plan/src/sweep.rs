//! What a listed segment is, given the table's progress, before any ledger lookup:
//! a segment wholly below its partition's watermark and outside every recorded gap is
//! in the table already, so the sweep need not read the ledger for it; a segment
//! inside a recorded gap arrived after its offsets were committed as missing and must
//! be surfaced to an operator, never ingested behind the watermark and never dropped
//! without a word; so must a segment below the offset its partition began at, which
//! turned up after the partition's first commit.

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

impl TableProgress {
    /// Whether the progress alone shows offsets `base..=last` of `partition` in the
    /// table (when the snapshot that added them has been expired): below the
    /// watermark, at or past the partition's start (recorded, else
    /// `configured_start`), and in no recorded gap.
    pub fn shows_committed(
        &self,
        partition: i32,
        base: i64,
        last: i64,
        configured_start: Option<i64>,
    ) -> bool {
        let below_watermark = self
            .watermarks
            .get(&partition)
            .is_some_and(|&next| last < next);
        let past_start = self
            .starts
            .get(&partition)
            .copied()
            .or(configured_start)
            .is_none_or(|start| base >= start);
        let in_gap = self
            .gaps
            .iter()
            .any(|g| g.partition == partition && g.from <= last && base <= g.to);
        below_watermark && past_start && !in_gap
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
        assert!(progress.shows_committed(0, 30, 39, None));
        assert!(
            !progress.shows_committed(0, 15, 24, None),
            "overlaps the gap"
        );
        assert!(!progress.shows_committed(0, 0, 9, None), "below the start");
        assert!(
            !progress.shows_committed(0, 95, 104, None),
            "past the watermark"
        );
        assert!(!progress.shows_committed(1, 0, 9, None), "no watermark");
    }
}

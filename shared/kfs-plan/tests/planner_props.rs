//! Property test of the commit planner over random partitions, arrival orders,
//! quarantines and missing segments, run cycle after cycle to quiescence.
//!
//! Invariants: watermarks never move backwards; no segment is committed twice; what is
//! committed plus the recorded gaps tiles `[start, watermark)` exactly; a gap never
//! hides a listed segment unless an operator skipped it (and then it says so); a
//! quarantined segment is never passed unless skipped; at quiescence everything before
//! the first quarantined segment that was not skipped is committed.

use std::collections::{BTreeMap, BTreeSet};

use kfs_plan::commit::{PendingSegment, PlanInput, plan_commit};
use kfs_plan::offsets::OffsetMap;
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct Segment {
    base: i64,
    last: i64,
    /// Not in the bucket (a failed upload): its range must become a gap.
    missing: bool,
    /// Listed but never converts.
    quarantined: bool,
    /// Quarantined, and skipped by an operator.
    skipped: bool,
}

fn partition_strategy() -> impl Strategy<Value = Vec<Segment>> {
    proptest::collection::vec(
        (
            1i64..20,
            0i64..3,
            proptest::bool::weighted(0.15),
            proptest::bool::weighted(0.05),
            proptest::bool::weighted(0.5),
        ),
        1..15,
    )
    .prop_map(|drafts| {
        let mut next = 0;
        drafts
            .into_iter()
            .map(|(len, gap, missing, quarantined, skipped)| {
                let base = next + gap;
                next = base + len;
                Segment {
                    base,
                    last: base + len - 1,
                    missing,
                    quarantined: quarantined && !missing,
                    skipped: quarantined && !missing && skipped,
                }
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn planner_keeps_its_invariants(
        partitions in proptest::collection::vec(partition_strategy(), 1..4),
        arrival_seed in any::<u64>(),
        max_segments in 1usize..6,
    ) {
        let listing: BTreeMap<i32, BTreeSet<i64>> = partitions.iter().enumerate()
            .map(|(p, segs)| (p as i32, segs.iter().filter(|s| !s.missing).map(|s| s.base).collect()))
            .collect();
        let skipped: BTreeMap<i32, BTreeSet<i64>> = partitions.iter().enumerate()
            .map(|(p, segs)| (p as i32, segs.iter().filter(|s| s.skipped).map(|s| s.base).collect()))
            .collect();
        // Convertible segments arrive in a shuffled order, a few per cycle.
        let mut arrivals: Vec<PendingSegment> = partitions.iter().enumerate().flat_map(|(p, segs)| {
            segs.iter().filter(|s| !s.missing && !s.quarantined).map(move |s| PendingSegment {
                id: format!("{p}:{}", s.base), partition: p as i32, base_offset: s.base, last_offset: s.last,
                records: (s.last - s.base + 1) as u64,
                segments: 1,
                inner_gaps: Vec::new(),
            })
        }).collect();
        let mut state = arrival_seed;
        for i in (1..arrivals.len()).rev() {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            arrivals.swap(i, (state >> 33) as usize % (i + 1));
        }
        let mut watermarks = OffsetMap::new();
        let mut starts = OffsetMap::new();
        let mut pending: Vec<PendingSegment> = Vec::new();
        let mut committed: BTreeSet<String> = BTreeSet::new();
        let mut tiles: BTreeMap<i32, Vec<(i64, i64)>> = BTreeMap::new();
        let mut idle_cycles = 0;
        while idle_cycles < 3 {
            for _ in 0..2 {
                if let Some(s) = arrivals.pop() { pending.push(s); }
            }
            let plan = plan_commit(&PlanInput {
                topic: "t", watermarks: &watermarks, starts: &starts, pending: &pending, listing: &listing,
                start_offsets: &BTreeMap::new(), max_segments, skipped: &skipped,
            });
            prop_assert!(plan.take.len() <= max_segments);
            for (p, old) in &watermarks {
                prop_assert!(plan.offsets.get(p).is_some_and(|new| new >= old), "watermark of {} moved back", p);
            }
            for s in &plan.take {
                prop_assert!(committed.insert(s.id.clone()), "{} committed twice", s.id);
                prop_assert!(watermarks.get(&s.partition).is_none_or(|w| s.base_offset >= *w));
                tiles.entry(s.partition).or_default().push((s.base_offset, s.last_offset));
            }
            for g in &plan.gaps {
                let listed = &listing[&g.partition];
                let passed_skipped = skipped[&g.partition].range(g.from..=g.to).next().is_some();
                prop_assert!(listed.range(g.from..=g.to).all(|b| skipped[&g.partition].contains(b)),
                    "gap {:?} hides a listed segment", g);
                prop_assert_eq!(passed_skipped, g.reason == kfs_plan::offsets::GapReason::Skipped,
                    "gap {:?} misreports a skip", g);
                tiles.entry(g.partition).or_default().push((g.from, g.to));
            }
            let done: BTreeSet<String> = plan.take.iter().chain(&plan.covered).map(|s| s.id.clone()).collect();
            pending.retain(|s| !done.contains(&s.id));
            if plan.is_empty() && arrivals.is_empty() { idle_cycles += 1; } else { idle_cycles = 0; }
            // A partition's start is set by its first commit and never changes.
            for (p, start) in &starts {
                prop_assert_eq!(plan.starts.get(p), Some(start), "start of {} changed", p);
            }
            for p in plan.offsets.keys() {
                prop_assert!(plan.starts.contains_key(p), "partition {} has no start", p);
            }
            watermarks = plan.offsets;
            starts = plan.starts;
        }
        for (p, segs) in partitions.iter().enumerate() {
            let p = p as i32;
            let start = segs.iter().find(|s| !s.missing).map(|s| s.base);
            let mut ranges = tiles.remove(&p).unwrap_or_default();
            ranges.sort();
            // Committed segments and gaps tile [start, watermark) with no hole or overlap.
            if let (Some(start), Some(&w)) = (start, watermarks.get(&p)) {
                prop_assert_eq!(starts.get(&p), Some(&start), "recorded start of {}", p);
                let mut cursor = start;
                for (from, to) in &ranges {
                    prop_assert_eq!(*from, cursor, "partition {} has a hole or overlap", p);
                    cursor = to + 1;
                }
                prop_assert_eq!(cursor, w);
            }
            // At quiescence the partition stands right after the last segment before its
            // first quarantined one (a gap is recorded only when a segment follows it).
            let blocking = |q: &&Segment| q.quarantined && !q.skipped;
            let first_quarantine = segs.iter().find(blocking).map_or(i64::MAX, |q| q.base);
            let expected = segs.iter()
                .filter(|s| !s.missing && !s.quarantined && s.base < first_quarantine)
                .map(|s| s.last + 1).max();
            prop_assert_eq!(watermarks.get(&p).copied(), expected, "partition {}", p);
            for s in segs.iter().filter(|s| !s.missing && !s.quarantined) {
                let before_quarantine = segs.iter().filter(blocking).all(|q| s.base < q.base);
                prop_assert_eq!(committed.contains(&format!("{p}:{}", s.base)), before_quarantine);
            }
        }
    }
}

//! Tests of commit planning.

mod dead_letters {
    use super::super::*;

    fn segment(id: &str, base: i64, last: i64, records: u64) -> PendingSegment {
        PendingSegment {
            id: id.into(),
            partition: 0,
            base_offset: base,
            last_offset: last,
            records,
            segments: 1,
            inner_gaps: Vec::new(),
        }
    }

    #[test]
    fn dead_letters_are_taken_once_and_the_map_moves_past_every_taken_segment() {
        let taken = [
            segment("a", 0, 9, 2),
            segment("b", 10, 19, 0),
            segment("c", 20, 29, 1),
        ];
        let first = plan_sidecar(&OffsetMap::new(), &taken, false);
        let ids: Vec<&str> = first.take.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["a", "c"]);
        assert_eq!(first.offsets, OffsetMap::from([(0, 30)]));
        assert_eq!(first.records(), 3);
        // Retried after it landed: nothing again.
        let again = plan_sidecar(&first.offsets, &taken, false);
        assert!(again.take.is_empty());
        // A later plan taking only newer segments.
        let later = plan_sidecar(&OffsetMap::from([(0, 20)]), &taken, false);
        assert_eq!(later.take.len(), 1);
        assert_eq!(later.take[0].id, "c");
        // Rows checked (a change log): covered segments are taken too, the map kept.
        let checked = plan_sidecar(&first.offsets, &taken, true);
        let ids: Vec<&str> = checked.take.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["a", "c"]);
        assert_eq!(checked.offsets, first.offsets);
    }
}

mod plans {
    use super::super::*;

    fn seg(partition: i32, base: i64, last: i64) -> PendingSegment {
        PendingSegment {
            id: format!("p{partition}-{base}"),
            partition,
            base_offset: base,
            last_offset: last,
            records: (last - base + 1) as u64,
            segments: 1,
            inner_gaps: Vec::new(),
        }
    }

    /// A gap no segment covers.
    fn no_segment(partition: i32, from: i64, to: i64) -> Gap {
        Gap {
            partition,
            from,
            to,
            reason: GapReason::NoSegment,
        }
    }

    fn plan(
        watermarks: &[(i32, i64)],
        pending: &[PendingSegment],
        listing: &[(i32, &[i64])],
    ) -> CommitPlan {
        let watermarks: OffsetMap = watermarks.iter().copied().collect();
        let listing: BTreeMap<i32, BTreeSet<i64>> = listing
            .iter()
            .map(|(p, offsets)| (*p, offsets.iter().copied().collect()))
            .collect();
        plan_commit(&PlanInput {
            topic: "t",
            watermarks: &watermarks,
            pending,
            listing: &listing,
            starts: &OffsetMap::new(),
            start_offsets: &BTreeMap::new(),
            max_segments: 1000,
            skipped: &BTreeMap::new(),
        })
    }

    #[test]
    fn a_new_partition_starts_at_its_earliest_listed_segment() {
        // Segment 10 was converted before segment 0: it must wait, not start the partition.
        let p = plan(&[], &[seg(0, 10, 19)], &[(0, &[0, 10])]);
        assert!(p.take.is_empty());
        assert_eq!(
            p.holds[0].reason,
            HoldReason::WaitingForSegment { base_offset: 0 }
        );
        let p = plan(&[], &[seg(0, 10, 19), seg(0, 0, 9)], &[(0, &[0, 10])]);
        assert_eq!(p.take.len(), 2);
        assert_eq!(p.offsets[&0], 20);
        assert_eq!(p.ranges[&0], (0, 20));
    }

    #[test]
    fn a_gap_no_segment_covers_is_recorded_and_passed() {
        let p = plan(&[(0, 10)], &[seg(0, 15, 19)], &[(0, &[0, 15])]);
        assert_eq!(p.gaps, vec![no_segment(0, 10, 14)]);
        assert_eq!(p.offsets[&0], 20);
        assert_eq!(p.ranges[&0], (10, 20));
    }

    #[test]
    fn a_run_records_the_gaps_it_spans_unless_a_segment_is_listed_in_one() {
        // A run of segments 0-9 and 15-19 (nothing was listed at 10-14), then 20-29.
        let run = PendingSegment {
            segments: 2,
            inner_gaps: vec![(10, 14)],
            records: 15,
            ..seg(0, 0, 19)
        };
        let p = plan(&[], &[run.clone(), seg(0, 20, 29)], &[(0, &[0, 15, 20])]);
        assert_eq!(p.take.len(), 2);
        assert_eq!(p.segments(), 3);
        assert_eq!(p.gaps, vec![no_segment(0, 10, 14)]);
        assert_eq!(p.offsets[&0], 30);
        assert_eq!(p.ranges[&0], (0, 30));
        // A segment turned up in the gap: the run is never committed as it is.
        let p = plan(&[], &[run, seg(0, 20, 29)], &[(0, &[0, 12, 15, 20])]);
        assert!(p.take.is_empty());
        assert_eq!(
            p.holds[0].reason,
            HoldReason::RunGapFilled {
                id: "p0-0".into(),
                base_offset: 12
            }
        );
    }

    #[test]
    fn a_segment_holds_offsets_in_a_recorded_gap_unless_its_own_gap_covers_them() {
        let gap = |from, to| Gap {
            partition: 0,
            from,
            to,
            reason: GapReason::NoSegment,
        };
        let mut run = seg(0, 0, 29);
        run.inner_gaps = vec![(10, 19)];
        // Its own gap, recorded when it committed: it holds none of those offsets.
        assert_eq!(run.holds_offsets_in(&[gap(10, 19)]), None);
        assert_eq!(run.holds_offsets_in(&[gap(12, 15), gap(30, 40)]), None);
        // A gap reaching into what it holds.
        assert_eq!(run.holds_offsets_in(&[gap(5, 12)]), Some(gap(5, 12)));
        assert_eq!(run.holds_offsets_in(&[gap(19, 20)]), Some(gap(19, 20)));
        // A run without gaps, and another partition's gap.
        run.inner_gaps.clear();
        assert_eq!(run.holds_offsets_in(&[gap(10, 19)]), Some(gap(10, 19)));
        let other = Gap {
            partition: 1,
            ..gap(0, 29)
        };
        assert_eq!(run.holds_offsets_in(&[other]), None);
        assert_eq!(seg(0, 0, 9).holds_offsets_in(&[gap(10, 19)]), None);
    }

    #[test]
    fn covered_segments_are_reported_and_overlaps_hold_the_partition() {
        let p = plan(
            &[(0, 20)],
            &[seg(0, 0, 9), seg(0, 15, 25), seg(1, 0, 4)],
            &[(0, &[0, 15]), (1, &[0])],
        );
        assert_eq!(p.covered, vec![seg(0, 0, 9)]);
        assert!(matches!(
            p.holds[0].reason,
            HoldReason::Overlap {
                base_offset: 15,
                ..
            }
        ));
        assert_eq!(p.take, vec![seg(1, 0, 4)]);
        assert_eq!(p.offsets, BTreeMap::from([(0, 20), (1, 5)]));
    }

    #[test]
    fn the_commit_id_depends_on_what_is_taken() {
        let a = plan(&[], &[seg(0, 0, 9)], &[(0, &[0])]);
        let b = plan(&[], &[seg(0, 0, 9)], &[(0, &[0])]);
        let c = plan(&[], &[seg(0, 0, 4)], &[(0, &[0])]);
        assert_eq!(a.commit_id("t"), b.commit_id("t"));
        assert_ne!(a.commit_id("t"), c.commit_id("t"));
        assert_ne!(a.commit_id("t"), a.commit_id("u"));
    }

    #[test]
    fn a_segment_at_the_largest_offset_holds_instead_of_wrapping() {
        let top = seg(0, i64::MAX - 9, i64::MAX);
        let p = plan(
            &[(0, i64::MAX - 9)],
            std::slice::from_ref(&top),
            &[(0, &[i64::MAX - 9])],
        );
        assert!(p.take.is_empty(), "{p:?}");
        assert_eq!(
            p.holds[0].reason,
            HoldReason::OffsetOverflow { id: top.id.clone() }
        );
        assert_eq!(p.offsets, BTreeMap::from([(0, i64::MAX - 9)]));
    }
}

//! Property tests of the maintenance planners over random tables.
//!
//! Compaction (`plan_compaction`): no more groups than allowed; every file in at most
//! one group; a group holds at least two files, all small, all of its partition value,
//! in offset order, and no more bytes than a group may take; the groups of a partition
//! value follow one another in offset order. In tiers (`CompactionPolicy::tiered`),
//! besides: a group's largest file is at most `tier_ratio` times its smallest, and it
//! holds at least `min_files` unless it is full.
//!
//! Expiry (`plan_expiry`): only snapshots the table has, each once; never the current
//! snapshot, the newest `retain_last` of the branch, or a ref's head; only snapshots the
//! rule names (older than the cutoff, or past the bound); every snapshot the age rule
//! names and nothing protects is removed; the bound holds but for what is protected.

use std::collections::BTreeSet;

use kfs_plan::compaction::{
    CompactionPolicy, ExpiryRule, FileStat, SnapshotStat, plan_compaction, plan_expiry,
};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn compaction_groups_keep_their_invariants(
        files in proptest::collection::vec((0u8..3, 0u32..40, 1u64..300), 0..60),
        target in 8u64..400,
        max_groups in 1usize..6,
        tiered in any::<bool>(),
    ) {
        let stats: Vec<FileStat> = files
            .iter()
            .enumerate()
            .map(|(i, (partition, order, bytes))| FileStat {
                path: format!("data/p{partition}/{order:08}-{i}.parquet"),
                bytes: *bytes,
                partition: format!("p{partition}"),
                order: format!("{order:08}"),
                deleted_rows: 0,
            })
            .collect();
        let sized = if tiered { CompactionPolicy::tiered } else { CompactionPolicy::for_target };
        let policy = CompactionPolicy { max_groups, ..sized(target) };
        let groups = plan_compaction(&stats, &policy);
        prop_assert!(groups.len() <= max_groups);
        let mut seen = BTreeSet::new();
        let mut last_of_partition: std::collections::BTreeMap<&str, (String, String)> =
            Default::default();
        for group in &groups {
            prop_assert!(group.files.len() >= 2, "a group of one: {:?}", group);
            prop_assert!(group.bytes() <= policy.max_group_bytes, "{:?}", group);
            if tiered {
                let sizes = group.files.iter().map(|f| f.bytes);
                let (least, most) = (sizes.clone().min().unwrap_or(0), sizes.max().unwrap_or(0));
                prop_assert!(most <= least.max(1) * policy.tier_ratio, "two tiers: {:?}", group);
                // A group short of `min_files` is one the next file would overfill.
                if group.files.len() < policy.min_files {
                    let next = stats
                        .iter()
                        .filter(|f| f.partition == group.partition && f.bytes < policy.small_below_bytes)
                        .filter(|f| {
                            let last = &group.files[group.files.len() - 1];
                            (&f.order, &f.path) > (&last.order, &last.path)
                        })
                        .min_by(|a, b| (&a.order, &a.path).cmp(&(&b.order, &b.path)));
                    prop_assert!(
                        next.is_some_and(|n| group.bytes() + n.bytes > policy.max_group_bytes),
                        "a short group that is not full: {:?}", group
                    );
                }
            }
            for pair in group.files.windows(2) {
                prop_assert!(
                    (&pair[0].order, &pair[0].path) <= (&pair[1].order, &pair[1].path),
                    "out of order: {:?}", group
                );
            }
            for file in &group.files {
                prop_assert!(seen.insert(file.path.clone()), "{} in two groups", file.path);
                prop_assert_eq!(&file.partition, &group.partition);
                prop_assert!(file.bytes < policy.small_below_bytes, "{} is not small", file.path);
                prop_assert!(stats.contains(file), "{} is not a table file", file.path);
            }
            let first = &group.files[0];
            if let Some(previous) = last_of_partition.get(group.partition.as_str()) {
                prop_assert!(previous <= &(first.order.clone(), first.path.clone()));
            }
            let last = &group.files[group.files.len() - 1];
            last_of_partition.insert(&group.partition, (last.order.clone(), last.path.clone()));
        }
    }

    #[test]
    fn expiry_never_removes_what_must_stay(
        branch in 1i64..30,
        others in proptest::collection::vec(0i64..60, 0..5),
        retain_last in 0usize..5,
        max_snapshots in proptest::option::of(0usize..12),
        cutoff in 0i64..60,
        refs in proptest::collection::vec(0usize..40, 0..3),
    ) {
        // The branch: ids 1..=branch, committed in that order (id = time); the newest first.
        let ancestry: Vec<i64> = (1..=branch).rev().collect();
        let mut all: Vec<SnapshotStat> =
            ancestry.iter().map(|&id| SnapshotStat { id, timestamp_ms: id }).collect();
        // Snapshots off the branch (an abandoned branch, a rolled-back commit).
        all.extend(others.iter().enumerate().map(|(i, &at)| SnapshotStat {
            id: 1_000 + i as i64,
            timestamp_ms: at,
        }));
        let ids: Vec<i64> = all.iter().map(|s| s.id).collect();
        let referenced: Vec<i64> = refs.iter().map(|&i| ids[i % ids.len()]).collect();
        let rule = ExpiryRule { older_than_ms: cutoff, retain_last, max_snapshots };
        let expired = plan_expiry(&ancestry, &all, &referenced, &rule);
        let expired_set: BTreeSet<i64> = expired.iter().copied().collect();
        prop_assert_eq!(expired_set.len(), expired.len(), "an id twice");
        let protected: BTreeSet<i64> = ancestry
            .iter()
            .take(retain_last.max(1))
            .chain(&referenced)
            .copied()
            .collect();
        for id in &expired {
            prop_assert!(ids.contains(id), "{} is not a snapshot", id);
            prop_assert!(!protected.contains(id), "{} is protected", id);
        }
        prop_assert!(!expired_set.contains(&ancestry[0]), "the current snapshot expired");
        for snapshot in &all {
            let named_by_age = snapshot.timestamp_ms < cutoff;
            if named_by_age && !protected.contains(&snapshot.id) {
                prop_assert!(expired_set.contains(&snapshot.id), "{} is old and kept", snapshot.id);
            }
            if expired_set.contains(&snapshot.id) && !named_by_age {
                prop_assert!(max_snapshots.is_some(), "{} expired by no rule", snapshot.id);
            }
        }
        if let Some(bound) = max_snapshots {
            let remaining = all.len() - expired.len();
            prop_assert!(
                remaining <= bound + protected.len(),
                "{} remain, bound {}, protected {}", remaining, bound, protected.len()
            );
        }
    }
}

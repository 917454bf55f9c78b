//! Maintenance planning, without I/O: which small data files to rewrite together
//! (bin packing toward a target size, per partition value, in offset order), and which
//! snapshots an expiry removes. The hosts read the table, call these functions, and
//! carry out the plans.

use std::collections::BTreeMap;

/// A live data file as the planner sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStat {
    /// Location of the file.
    pub path: String,
    /// Size in bytes (of its column data: what it adds to a merged file).
    pub bytes: u64,
    /// The partition value it belongs to, rendered (empty for an unpartitioned table).
    pub partition: String,
    /// Sort key inside the partition value (the file name encodes partition and base
    /// offset, so the path keeps rewritten files in offset order).
    pub order: String,
}

/// Settings of a compaction plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionPolicy {
    /// The size rewritten files aim at (`write.target-file-size-bytes`).
    pub target_bytes: u64,
    /// Files at or above this size are left alone (default 75% of the target).
    pub small_below_bytes: u64,
    /// Most input bytes one group takes (bounds the memory and time of one rewrite).
    pub max_group_bytes: u64,
    /// Most groups one run plans (bounds the work of one invocation).
    pub max_groups: usize,
    /// Row groups at least this large are copied into the merged file without
    /// decoding; smaller ones are decoded and re-encoded together.
    pub copy_row_group_min_bytes: u64,
}

impl CompactionPolicy {
    /// The policy for a target size: small below 75% of it, groups of one target.
    pub fn for_target(target_bytes: u64) -> Self {
        Self {
            target_bytes,
            small_below_bytes: target_bytes / 4 * 3,
            max_group_bytes: target_bytes,
            max_groups: usize::MAX,
            copy_row_group_min_bytes: target_bytes / 8,
        }
    }
}

/// Files rewritten together into about one target-size file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewriteGroup {
    /// The partition value.
    pub partition: String,
    /// The input files, in offset order.
    pub files: Vec<FileStat>,
}

impl RewriteGroup {
    /// Input bytes.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.bytes).sum()
    }
}

/// Groups the small files of each partition value, in offset order, into runs of about
/// `max_group_bytes`; a run of one file is left as it is (rewriting it gains nothing).
/// Every input file appears in at most one group.
pub fn plan_compaction(files: &[FileStat], policy: &CompactionPolicy) -> Vec<RewriteGroup> {
    let mut by_partition: BTreeMap<&str, Vec<&FileStat>> = BTreeMap::new();
    for file in files.iter().filter(|f| f.bytes < policy.small_below_bytes) {
        by_partition.entry(&file.partition).or_default().push(file);
    }
    let mut groups = Vec::new();
    for (partition, mut small) in by_partition {
        small.sort_by(|a, b| a.order.cmp(&b.order).then_with(|| a.path.cmp(&b.path)));
        let mut current: Vec<FileStat> = Vec::new();
        let mut bytes = 0u64;
        let flush = |current: &mut Vec<FileStat>, groups: &mut Vec<RewriteGroup>| {
            if current.len() > 1 {
                groups.push(RewriteGroup {
                    partition: partition.to_owned(),
                    files: std::mem::take(current),
                });
            } else {
                current.clear();
            }
        };
        for file in small {
            if !current.is_empty() && bytes.saturating_add(file.bytes) > policy.max_group_bytes {
                flush(&mut current, &mut groups);
                bytes = 0;
            }
            bytes = bytes.saturating_add(file.bytes);
            current.push(file.clone());
        }
        flush(&mut current, &mut groups);
    }
    groups.truncate(policy.max_groups);
    groups
}

/// Whether this pipeline wrote the data file at `path`: every file it writes (converted,
/// coalesced, compacted, re-laid, replayed) is named `{stem}-{token}.parquet`, the token
/// 16 lowercase hexadecimal digits. Other engines' names end otherwise (pyiceberg's and
/// Java's in a UUID, whose last group has 12 digits; Spark's in a 5-digit counter), and
/// compaction leaves their files as they are: they may be sorted or clustered in a
/// layout of their own, and the platform that wrote them maintains them.
pub fn written_by_pipeline(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let Some(stem) = name.strip_suffix(".parquet") else {
        return false;
    };
    match stem.rsplit_once('-') {
        Some((head, token)) => {
            !head.is_empty()
                && token.len() == 16
                && token
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        }
        None => false,
    }
}

/// A snapshot as expiry sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotStat {
    /// Snapshot id.
    pub id: i64,
    /// When it was committed, Unix ms.
    pub timestamp_ms: i64,
}

/// Which snapshots expiry removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpiryRule {
    /// Snapshots committed before this (Unix ms) expire.
    pub older_than_ms: i64,
    /// The newest this many snapshots of the current branch never expire (at least 1).
    pub retain_last: usize,
    /// Beyond the newest this many snapshots, snapshots expire whatever their age: the
    /// metadata file lists every snapshot and is rewritten by every commit, so this
    /// bounds commit cost on tables that commit often (`None`: no bound).
    pub max_snapshots: Option<usize>,
}

impl ExpiryRule {
    /// Expire by age only.
    pub fn older_than(older_than_ms: i64, retain_last: usize) -> Self {
        Self {
            older_than_ms,
            retain_last,
            max_snapshots: None,
        }
    }
}

/// The snapshots to remove: those older than the rule's cutoff or beyond its newest
/// `max_snapshots`, except the newest `retain_last` of the current branch's ancestry
/// and any snapshot a ref points to. `ancestry` is the current branch from newest to
/// oldest; `all` every snapshot; `referenced` the snapshot ids refs point to.
pub fn plan_expiry(
    ancestry: &[i64],
    all: &[SnapshotStat],
    referenced: &[i64],
    rule: &ExpiryRule,
) -> Vec<i64> {
    let kept: Vec<i64> = ancestry
        .iter()
        .take(rule.retain_last.max(1))
        .copied()
        .collect();
    // Newest first: the current branch in lineage order (timestamps may tie or skew
    // between writers), then any other snapshot by time.
    let lineage: std::collections::HashMap<i64, usize> = ancestry
        .iter()
        .enumerate()
        .map(|(position, &id)| (id, position))
        .collect();
    let mut newest_first: Vec<&SnapshotStat> = all.iter().collect();
    newest_first.sort_by_key(|s| match lineage.get(&s.id) {
        Some(&position) => (0, position, std::cmp::Reverse(0), 0),
        None => (1, 0, std::cmp::Reverse(s.timestamp_ms), s.id),
    });
    let mut expired: Vec<i64> = newest_first
        .iter()
        .enumerate()
        .filter(|(rank, s)| {
            s.timestamp_ms < rule.older_than_ms || rule.max_snapshots.is_some_and(|m| *rank >= m)
        })
        .map(|(_, s)| s.id)
        .filter(|id| !kept.contains(id) && !referenced.contains(id))
        .collect();
    expired.sort_unstable();
    expired
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(partition: &str, order: u32, bytes: u64) -> FileStat {
        FileStat {
            path: format!("s3://w/t/data/{partition}-{order:04}.parquet"),
            bytes,
            partition: partition.into(),
            order: format!("{order:08}"),
        }
    }

    #[test]
    fn tells_this_pipelines_files_from_other_engines() {
        for ours in [
            "s3://w/t/data/orders-p0-00000000000000000042-00000000deadbeef-0123456789abcdef.parquet",
            "file:///w/t/data/p=1/coalesced-c1-0-fedcba9876543210.parquet",
            "compacted-0011223344556677-89abcdef01234567.parquet",
        ] {
            assert!(written_by_pipeline(ours), "{ours}");
        }
        for foreign in [
            "s3://w/t/data/00000-0-8f3c1e7a-1b2c-4d5e-8f90-a1b2c3d4e5f6.parquet",
            "s3://w/t/data/00000-5-8f3c1e7a-1b2c-4d5e-8f90-a1b2c3d4e5f6-0-00001.parquet",
            "s3://w/t/data/-0123456789abcdef.parquet",
            "s3://w/t/data/x-0123456789ABCDEF.parquet",
            "s3://w/t/data/x-0123456789abcdef.orc",
            "0123456789abcdef.parquet",
        ] {
            assert!(!written_by_pipeline(foreign), "{foreign}");
        }
    }

    #[test]
    fn packs_small_files_per_partition_in_order() {
        let mut files: Vec<FileStat> = (0..10).rev().map(|i| file("a", i, 30)).collect();
        files.push(file("b", 0, 30));
        files.push(file("a", 99, 1_000));
        let groups = plan_compaction(&files, &CompactionPolicy::for_target(100));
        // a: 10 files of 30 bytes in runs of 3 (90 ≤ 100), the last single file stays.
        assert_eq!(groups.len(), 3);
        assert!(
            groups
                .iter()
                .all(|g| g.partition == "a" && g.files.len() == 3)
        );
        let first: Vec<&str> = groups[0].files.iter().map(|f| f.order.as_str()).collect();
        assert_eq!(first, ["00000000", "00000001", "00000002"]);
        let limited = plan_compaction(
            &files,
            &CompactionPolicy {
                max_groups: 1,
                ..CompactionPolicy::for_target(100)
            },
        );
        assert_eq!(limited.len(), 1);
    }

    /// Snapshots 1..=6 committed 10 ms apart, one lineage.
    fn six_snapshots() -> (Vec<SnapshotStat>, [i64; 6]) {
        let all = (1..=6)
            .map(|id| SnapshotStat {
                id,
                timestamp_ms: id * 10,
            })
            .collect();
        (all, [6, 5, 4, 3, 2, 1])
    }

    #[test]
    fn expiry_keeps_the_newest_and_referenced_snapshots() {
        let (all, ancestry) = six_snapshots();
        let by_age =
            |older_than_ms, retain_last| ExpiryRule::older_than(older_than_ms, retain_last);
        assert_eq!(
            plan_expiry(&ancestry, &all, &[6], &by_age(45, 2)),
            vec![1, 2, 3, 4]
        );
        assert_eq!(
            plan_expiry(&ancestry, &all, &[6, 2], &by_age(100, 3)),
            vec![1, 3]
        );
        assert!(plan_expiry(&ancestry, &all, &[6], &by_age(0, 1)).is_empty());
        // retain_last 0 still keeps the current snapshot.
        assert_eq!(
            plan_expiry(&ancestry, &all, &[], &by_age(100, 0)),
            vec![1, 2, 3, 4, 5]
        );
    }

    #[test]
    fn a_snapshot_bound_expires_the_oldest_whatever_their_age() {
        let (all, ancestry) = six_snapshots();
        let bounded = |max, retain_last| ExpiryRule {
            older_than_ms: 0,
            retain_last,
            max_snapshots: Some(max),
        };
        assert_eq!(
            plan_expiry(&ancestry, &all, &[], &bounded(2, 1)),
            vec![1, 2, 3, 4]
        );
        // retain_last and refs win over the bound.
        assert_eq!(
            plan_expiry(&ancestry, &all, &[1], &bounded(2, 3)),
            vec![2, 3]
        );
        // The bound and the age cutoff combine.
        let both = ExpiryRule {
            older_than_ms: 25,
            retain_last: 1,
            max_snapshots: Some(5),
        };
        assert_eq!(plan_expiry(&ancestry, &all, &[], &both), vec![1, 2]);
        assert!(plan_expiry(&ancestry, &all, &[], &bounded(6, 1)).is_empty());
    }
}

//! Maintenance planning, without I/O: which small data files to rewrite together
//! (bin packing toward a target size, per partition value, in offset order), and which
//! snapshots an expiry removes. The hosts read the table, call these functions, and
//! carry out the plans.
//!
//! Compaction can plan in tiers ([`CompactionPolicy::tiered`]): a table committed every
//! few seconds and compacted as often would otherwise merge its growing file with each
//! new small one, rewriting all it holds every time (quadratic in the bytes appended).
//! In tiers, files merge only with consecutive files of about their own size (the
//! largest of a group at most `tier_ratio` times the smallest), and only once
//! `min_files` of them have gathered, so each byte is rewritten about once per tier it
//! climbs: a logarithmic number of times.
//!
//! A file with rows deleted by live position deletes (a mirror's superseded rows,
//! another engine's `DELETE`) is always rewritten, whatever its size, alone if need
//! be: the rewrite leaves the deleted rows out, and the delete files that named only
//! rewritten files go (the fold of merge-on-read deletes).

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
    /// Rows of the file that live position deletes delete (0: none).
    pub deleted_rows: u64,
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
    /// Fewest files a group merges, unless it is full (`max_group_bytes` reached).
    pub min_files: usize,
    /// Sizes of one tier: the largest file of a group is at most this many times its
    /// smallest (0: any sizes together).
    pub tier_ratio: u64,
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
            min_files: 2,
            tier_ratio: 0,
        }
    }

    /// The policy for a target size in tiers of 4× (module doc): groups of at least 4
    /// files of about one size, for tables compacted as often as they are committed.
    pub fn tiered(target_bytes: u64) -> Self {
        Self {
            min_files: 4,
            tier_ratio: 4,
            ..Self::for_target(target_bytes)
        }
    }

    /// Whether files from `smallest` to `largest` bytes make one tier.
    fn one_tier(&self, smallest: u64, largest: u64) -> bool {
        self.tier_ratio == 0 || largest <= smallest.max(1).saturating_mul(self.tier_ratio)
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
/// `max_group_bytes` of consecutive files of one tier; a run of fewer than
/// `min_files` is left as it is unless it is full (a run of one never: rewriting it
/// gains nothing) or holds a file with deleted rows, which is rewritten whatever its
/// size (to leave those rows out). Every input file appears in at most one group, and
/// a partition's groups follow one another in offset order.
pub fn plan_compaction(files: &[FileStat], policy: &CompactionPolicy) -> Vec<RewriteGroup> {
    let mut by_partition: BTreeMap<&str, Vec<&FileStat>> = BTreeMap::new();
    let candidate = |f: &&FileStat| f.bytes < policy.small_below_bytes || f.deleted_rows > 0;
    for file in files.iter().filter(candidate) {
        by_partition.entry(&file.partition).or_default().push(file);
    }
    let min_files = policy.min_files.max(2);
    let mut groups = Vec::new();
    for (partition, mut small) in by_partition {
        small.sort_by(|a, b| a.order.cmp(&b.order).then_with(|| a.path.cmp(&b.path)));
        let mut current: Vec<FileStat> = Vec::new();
        let mut bytes = 0u64;
        // The smallest and largest file of `current`.
        let (mut smallest, mut largest) = (u64::MAX, 0u64);
        let mut flush = |current: &mut Vec<FileStat>, full: bool| {
            let folds = current.iter().any(|f| f.deleted_rows > 0);
            if folds || current.len() >= min_files || (full && current.len() >= 2) {
                groups.push(RewriteGroup {
                    partition: partition.to_owned(),
                    files: std::mem::take(current),
                });
            } else {
                current.clear();
            }
        };
        for file in small {
            let other_tier = !policy.one_tier(smallest.min(file.bytes), largest.max(file.bytes));
            let full = bytes.saturating_add(file.bytes) > policy.max_group_bytes;
            if !current.is_empty() && (other_tier || full) {
                flush(&mut current, full && !other_tier);
                (bytes, smallest, largest) = (0, u64::MAX, 0);
            }
            bytes = bytes.saturating_add(file.bytes);
            (smallest, largest) = (smallest.min(file.bytes), largest.max(file.bytes));
            current.push(file.clone());
        }
        flush(&mut current, false);
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
            deleted_rows: 0,
        }
    }

    #[test]
    fn a_file_with_deleted_rows_is_rewritten_whatever_its_size_alone_if_need_be() {
        let policy = CompactionPolicy::tiered(1 << 20);
        let mut big = file("p", 1, 900 << 10);
        big.deleted_rows = 3;
        let mut lone = file("q", 1, 10);
        lone.deleted_rows = 1;
        let groups = plan_compaction(
            &[big.clone(), file("r", 1, 900 << 10), lone.clone()],
            &policy,
        );
        let planned: Vec<&[FileStat]> = groups.iter().map(|g| g.files.as_slice()).collect();
        assert_eq!(planned, [&[big][..], &[lone][..]]);
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

    /// A table committed `commits` times, one file of `file_bytes` each, and compacted
    /// after every commit (a merged file takes its first input's place): the bytes
    /// rewritten per byte appended, and the files left.
    fn streamed(policy: &CompactionPolicy, commits: u32, file_bytes: u64) -> (f64, usize) {
        let mut files: Vec<FileStat> = Vec::new();
        let mut rewritten = 0u64;
        for commit in 0..commits {
            files.push(file("p", commit, file_bytes));
            for group in plan_compaction(&files, policy) {
                rewritten += group.bytes();
                files.retain(|f| !group.files.contains(f));
                files.push(FileStat {
                    path: format!("{}-merged-{commit}", group.files[0].path),
                    bytes: group.bytes(),
                    ..group.files[0].clone()
                });
            }
        }
        let appended = u64::from(commits) * file_bytes;
        (rewritten as f64 / appended as f64, files.len())
    }

    #[test]
    fn tiers_rewrite_each_byte_a_few_times_where_one_tier_rewrites_it_every_commit() {
        let target = 512 << 20;
        let (full, full_files) = streamed(&CompactionPolicy::for_target(target), 2_000, 10_000);
        let (tiered, tiered_files) = streamed(&CompactionPolicy::tiered(target), 2_000, 10_000);
        println!(
            "bytes rewritten per byte appended: one tier {full:.1}, tiers {tiered:.2} ({tiered_files} files left)"
        );
        // One tier merges the growing file with each new one: about n/2 rewrites a byte.
        assert!(full > 500.0, "{full}");
        assert_eq!(full_files, 1);
        // In tiers of 4: about once per tier (log4 2,000 < 6), and a few files a tier.
        assert!(tiered < 8.0, "{tiered}");
        assert!(tiered_files <= 4 * 6, "{tiered_files}");
    }

    #[test]
    fn a_tier_waits_for_its_files_and_never_merges_a_large_file_with_small_ones() {
        let policy = CompactionPolicy::tiered(1_000_000);
        let mut files = vec![file("a", 0, 400_000)];
        files.extend((1..4).map(|i| file("a", i, 1_000)));
        assert_eq!(plan_compaction(&files, &policy), Vec::new());
        // Sizes that straddle a power of the ratio still make one tier.
        files.push(file("a", 4, 3_000));
        let groups = plan_compaction(&files, &policy);
        assert_eq!(groups.len(), 1);
        let orders: Vec<&str> = groups[0].files.iter().map(|f| f.order.as_str()).collect();
        assert_eq!(orders, ["00000001", "00000002", "00000003", "00000004"]);
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

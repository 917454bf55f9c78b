//! Table maintenance: compaction (bin-packing small files into target-size files with
//! replace snapshots), snapshot expiry (and deletion of what only expired snapshots
//! reached), orphan cleanup (files under the table no snapshot and no pending ledger
//! entry references), and manifest rewrites. Plans come from
//! [`kfs_plan::compaction`]; commits go through the catalog ([`iceberg::Catalog`]) or
//! its pointer swap ([`TableSwap`]) for replace snapshots.

use std::collections::{BTreeSet, HashSet};
use std::time::Instant;

use iceberg::spec::DataFile;
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, ErrorKind, TableIdent};
use kfs_plan::compaction::{
    CompactionPolicy, ExpiryRule, FileStat, SnapshotStat, plan_compaction, plan_expiry,
};
use kfs_plan::hash::Fnv1a;

use crate::committer::ancestry;
use crate::failpoint::delete_file;
use crate::ledger::Ledger;
use crate::parquet_merge::merge_data_files;
use crate::rewrite::{Replacement, find_maintenance, stage_replace};
use crate::source::{OpendalSource, SegmentSource};
use crate::table::{OFFSET_FIELD_ID, PARTITION_FIELD_ID};
use crate::table_commit::TableSwap;

/// Table property of the target data file size.
pub const TARGET_FILE_SIZE_PROPERTY: &str = "write.target-file-size-bytes";
/// Default target data file size (512 MiB, what S3 Tables and Flink use).
pub const DEFAULT_TARGET_FILE_SIZE: u64 = 512 << 20;

/// Maintenance failed; what was committed before the failure stands.
#[derive(Debug, thiserror::Error)]
pub enum MaintenanceError {
    /// The catalog or storage failed.
    #[error("table {table}: {source}")]
    Iceberg {
        /// Table.
        table: String,
        /// The error.
        source: Box<iceberg::Error>,
    },
    /// Listing the table's files failed.
    #[error("table {table}: {source}")]
    Listing {
        /// Table.
        table: String,
        /// The error.
        source: crate::source::SourceError,
    },
    /// The ledger failed.
    #[error("table {table}: {source}")]
    Ledger {
        /// Table.
        table: String,
        /// The error.
        source: crate::ledger::LedgerError,
    },
}

impl MaintenanceError {
    /// Whether running again may succeed without anyone acting.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Iceberg { source, .. } => {
                source.retryable() || source.kind() == ErrorKind::CatalogCommitConflicts
            }
            Self::Listing { source, .. } => source.retryable,
            Self::Ledger { source, .. } => source.is_retryable(),
        }
    }
}

/// The table's target file size (its property, else the default).
pub fn target_file_size(table: &Table) -> u64 {
    table
        .metadata()
        .properties()
        .get(TARGET_FILE_SIZE_PROPERTY)
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_TARGET_FILE_SIZE)
}

/// How the compaction planner sees a data file.
pub fn file_stat(file: &DataFile) -> FileStat {
    FileStat {
        path: file.file_path().to_owned(),
        bytes: data_bytes(file),
        partition: format!("{:?}", file.partition()),
        order: offset_order(file),
    }
}

/// The bytes of a file's column data (without footer and page indexes), what it adds
/// to a merged file; the file size when the file does not say.
fn data_bytes(file: &DataFile) -> u64 {
    let columns: u64 = file.column_sizes().values().sum();
    if columns == 0 {
        file.file_size_in_bytes()
    } else {
        columns.min(file.file_size_in_bytes())
    }
}

/// Where a file's records sit in the topic: its lowest Kafka partition and offset
/// (from the column bounds), so merged files keep offset order; the name otherwise.
fn offset_order(file: &DataFile) -> String {
    let bound = |field: i32| match file.lower_bounds().get(&field).map(|d| d.literal()) {
        Some(iceberg::spec::PrimitiveLiteral::Int(v)) => Some(i64::from(*v)),
        Some(iceberg::spec::PrimitiveLiteral::Long(v)) => Some(*v),
        _ => None,
    };
    match (bound(PARTITION_FIELD_ID), bound(OFFSET_FIELD_ID)) {
        (Some(partition), Some(offset)) => format!("{partition:011}-{offset:020}"),
        _ => file
            .file_path()
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_owned(),
    }
}

/// Most planning rounds of one compaction run.
const COMPACTION_ROUNDS: usize = 4;

/// What a compaction run did.
#[derive(Debug, Clone, Default)]
pub struct CompactionReport {
    /// Groups planned (over every round).
    pub groups: usize,
    /// Replace snapshots committed (one per group).
    pub snapshots: Vec<i64>,
    /// Files replaced.
    pub files_removed: usize,
    /// Files written.
    pub files_added: usize,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Groups given up because their files were replaced meanwhile.
    pub stale_groups: usize,
    /// Groups left for the next run (deadline).
    pub deferred_groups: usize,
    /// Row groups copied without decoding.
    pub row_groups_copied: usize,
    /// Row groups decoded and re-encoded.
    pub row_groups_reencoded: usize,
    /// Compressed bytes copied.
    pub bytes_copied: u64,
    /// Compressed bytes re-encoded.
    pub bytes_reencoded: u64,
}

/// Compacts a table: plans groups of small files, rewrites each into one file and
/// commits it as a replace snapshot, one group at a time (bounded work, and an
/// append landing meanwhile costs one re-staged snapshot, not the rewrite).
pub async fn compact_table(
    catalog: &dyn Catalog,
    swap: &dyn TableSwap,
    ident: &TableIdent,
    policy: Option<CompactionPolicy>,
    deadline: Option<Instant>,
    now_ms: i64,
) -> Result<CompactionReport, MaintenanceError> {
    let name = ident.to_string();
    let iceberg = |source: iceberg::Error| MaintenanceError::Iceberg {
        table: name.clone(),
        source: Box::new(source),
    };
    let mut table = catalog.load_table(ident).await.map_err(iceberg)?;
    let policy = policy.unwrap_or_else(|| CompactionPolicy::for_target(target_file_size(&table)));
    let mut report = CompactionReport::default();
    // Merged files compress far better than their tiny inputs, so one round can leave
    // files well below the target: plan again on the result, a few rounds at most.
    for _round in 0..COMPACTION_ROUNDS {
        // Files of the default partition spec only: a merged file is written in it, and
        // files of an older spec keep the layout they were committed in.
        let default_spec = table.metadata().default_partition_spec_id();
        let live = crate::rewrite::live_entries_in(&table, Some(default_spec))
            .await
            .map_err(iceberg)?;
        let stats: Vec<FileStat> = live.iter().map(|e| file_stat(e.data_file())).collect();
        let groups = plan_compaction(&stats, &policy);
        if groups.is_empty() {
            break;
        }
        report.groups += groups.len();
        let by_path: std::collections::HashMap<&str, &DataFile> = live
            .iter()
            .map(|e| (e.file_path(), e.data_file()))
            .collect();
        for (done, group) in groups.iter().enumerate() {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                report.deferred_groups = groups.len() - done;
                return Ok(report);
            }
            let mut id = Fnv1a::default();
            for file in &group.files {
                id.write_field(file.path.as_bytes());
            }
            let group_id = format!("{:016x}", id.finish());
            let inputs: Vec<&DataFile> = group
                .files
                .iter()
                .filter_map(|f| by_path.get(f.path.as_str()).copied())
                .collect();
            let (written, merge) = merge_data_files(
                &table,
                &inputs,
                &format!("compacted-{group_id}-{}", crate::convert::write_token()),
                policy.copy_row_group_min_bytes,
            )
            .await
            .map_err(iceberg)?;
            let written = vec![written];
            let change = Replacement {
                remove: group.files.iter().map(|f| f.path.clone()).collect(),
                add: written.clone(),
                merge_manifests: false,
                maintenance_id: format!("compaction-{group_id}"),
            };
            match commit_replace(catalog, swap, ident, &mut table, &change, now_ms).await {
                Ok(Some(snapshot_id)) => {
                    report.snapshots.push(snapshot_id);
                    report.files_removed += group.files.len();
                    report.row_groups_copied += merge.row_groups_copied;
                    report.row_groups_reencoded += merge.row_groups_reencoded;
                    report.bytes_copied += merge.bytes_copied;
                    report.bytes_reencoded += merge.bytes_reencoded;
                    report.files_added += written.len();
                    report.bytes_read += group.bytes();
                    report.bytes_written +=
                        written.iter().map(|f| f.file_size_in_bytes()).sum::<u64>();
                }
                Ok(None) => {
                    report.stale_groups += 1;
                    for file in &written {
                        let _ = delete_file(table.file_io(), file.file_path()).await;
                    }
                }
                Err(e) => return Err(iceberg(e)),
            }
        }
    }
    Ok(report)
}

/// Commits a replace snapshot, re-staging it on the new head after a conflict. Returns
/// the snapshot id, or `None` when its files are no longer live (replaced by someone
/// else). An unknown outcome is settled by looking for the maintenance id.
async fn commit_replace(
    catalog: &dyn Catalog,
    swap: &dyn TableSwap,
    ident: &TableIdent,
    table: &mut Table,
    change: &Replacement,
    now_ms: i64,
) -> iceberg::Result<Option<i64>> {
    const ATTEMPTS: usize = 8;
    let mut last_error = None;
    for _ in 0..ATTEMPTS {
        let staged = match stage_replace(table, change, now_ms).await {
            Ok(staged) => staged,
            Err(e) if e.kind() == ErrorKind::CatalogCommitConflicts => return Ok(None),
            Err(e) => return Err(e),
        };
        match swap
            .commit(table, staged.requirements, staged.updates)
            .await
        {
            Ok(committed) => {
                *table = committed;
                return Ok(Some(staged.snapshot_id));
            }
            Err(e) => {
                *table = catalog.load_table(ident).await?;
                if let Some(id) = find_maintenance(table, &change.maintenance_id) {
                    return Ok(Some(id));
                }
                if e.kind() != ErrorKind::CatalogCommitConflicts && !e.retryable() {
                    return Err(e);
                }
                last_error = Some(e);
            }
        }
    }
    Err(last_error.unwrap_or_else(|| {
        iceberg::Error::new(ErrorKind::CatalogCommitConflicts, "commit kept conflicting")
    }))
}

/// Rewrites the table's data manifests into one when there are more than
/// `max_manifests`, as a replace snapshot that changes no data. Returns the snapshot.
pub async fn rewrite_manifests(
    catalog: &dyn Catalog,
    swap: &dyn TableSwap,
    ident: &TableIdent,
    max_manifests: usize,
    now_ms: i64,
) -> Result<Option<i64>, MaintenanceError> {
    let name = ident.to_string();
    let iceberg = |source: iceberg::Error| MaintenanceError::Iceberg {
        table: name.clone(),
        source: Box::new(source),
    };
    let mut table = catalog.load_table(ident).await.map_err(iceberg)?;
    let Some(current) = table.metadata().current_snapshot().cloned() else {
        return Ok(None);
    };
    let list = table
        .manifest_list_reader(&current)
        .load()
        .await
        .map_err(iceberg)?;
    if list.entries().len() <= max_manifests {
        return Ok(None);
    }
    let change = Replacement {
        merge_manifests: true,
        maintenance_id: format!("manifest-rewrite-{}", current.snapshot_id()),
        ..Replacement::default()
    };
    commit_replace(catalog, swap, ident, &mut table, &change, now_ms)
        .await
        .map_err(iceberg)
}

/// Every file the snapshots reach: their manifest lists, their manifests and the data
/// files their live entries name (a DELETED entry records a removal; the snapshot does
/// not read that file). Each manifest is read once, however many snapshots share it.
async fn reachable(
    table: &Table,
    snapshot_ids: impl IntoIterator<Item = i64>,
) -> iceberg::Result<HashSet<String>> {
    let mut files = HashSet::new();
    let mut manifests_seen = HashSet::new();
    for id in snapshot_ids {
        let Some(snapshot) = table.metadata().snapshot_by_id(id) else {
            continue;
        };
        files.insert(snapshot.manifest_list().to_owned());
        let list = table.manifest_list_reader(snapshot).load().await?;
        for manifest in list.entries() {
            if !manifests_seen.insert(manifest.manifest_path.clone()) {
                continue;
            }
            files.insert(manifest.manifest_path.clone());
            let loaded = manifest.load_manifest(table.file_io()).await?;
            for entry in loaded.entries().iter().filter(|e| e.is_alive()) {
                files.insert(entry.file_path().to_owned());
            }
        }
    }
    Ok(files)
}

/// What an expiry did (or, dry, would do).
#[derive(Debug, Clone, Default)]
pub struct ExpiryReport {
    /// Snapshots removed.
    pub expired: Vec<i64>,
    /// Snapshots left.
    pub retained: usize,
    /// Files deleted: reachable only from the expired snapshots.
    pub deleted_files: Vec<String>,
}

/// Expires the snapshots `rule` names (never the newest `retain_last` of the current
/// branch, never a ref's head); then deletes the manifest lists,
/// manifests and data files that no remaining snapshot reaches. With `dry_run`, only
/// reports.
pub async fn expire_snapshots(
    catalog: &dyn Catalog,
    ident: &TableIdent,
    rule: &ExpiryRule,
    dry_run: bool,
) -> Result<ExpiryReport, MaintenanceError> {
    let name = ident.to_string();
    let iceberg = |source: iceberg::Error| MaintenanceError::Iceberg {
        table: name.clone(),
        source: Box::new(source),
    };
    let table = catalog.load_table(ident).await.map_err(iceberg)?;
    let metadata = table.metadata();
    let lineage: Vec<i64> = ancestry(&table).map(|s| s.snapshot_id()).collect();
    let all: Vec<SnapshotStat> = metadata
        .snapshots()
        .map(|s| SnapshotStat {
            id: s.snapshot_id(),
            timestamp_ms: s.timestamp_ms(),
        })
        .collect();
    let referenced: Vec<i64> = serde_json::to_value(metadata)
        .ok()
        .and_then(|v| v.get("refs").cloned())
        .and_then(|refs| refs.as_object().cloned())
        .map(|refs| {
            refs.values()
                .filter_map(|r| r.get("snapshot-id").and_then(|id| id.as_i64()))
                .collect()
        })
        .unwrap_or_default();
    let expired = plan_expiry(&lineage, &all, &referenced, rule);
    let mut report = ExpiryReport {
        retained: all.len() - expired.len(),
        ..ExpiryReport::default()
    };
    if expired.is_empty() {
        return Ok(report);
    }
    let expired_set: BTreeSet<i64> = expired.iter().copied().collect();
    let keep = reachable(
        &table,
        all.iter()
            .map(|s| s.id)
            .filter(|id| !expired_set.contains(id)),
    )
    .await
    .map_err(iceberg)?;
    let doomed: BTreeSet<String> = reachable(&table, expired.iter().copied())
        .await
        .map_err(iceberg)?
        .into_iter()
        .filter(|file| !keep.contains(file))
        .collect();
    report.expired = expired.clone();
    report.deleted_files = doomed.into_iter().collect();
    if dry_run {
        return Ok(report);
    }
    // Our plan names the snapshots; the action keeps nothing else from expiring
    // (no age cutoff of its own) and commits through the catalog.
    let tx = Transaction::new(&table);
    let tx = tx
        .expire_snapshots()
        .expire_snapshot_ids(expired)
        .expire_older_than_ms(i64::MIN)
        .retain_last(1)
        .apply(tx)
        .map_err(iceberg)?;
    let committed = tx.commit(catalog).await;
    // The table is the truth: only delete once the snapshots are gone from it.
    let now = catalog.load_table(ident).await.map_err(iceberg)?;
    if report
        .expired
        .iter()
        .any(|id| now.metadata().snapshot_by_id(*id).is_some())
    {
        return Err(iceberg(committed.err().unwrap_or_else(|| {
            iceberg::Error::new(ErrorKind::CatalogCommitConflicts, "the expiry did not land")
        })));
    }
    for file in &report.deleted_files {
        delete_file(table.file_io(), file).await.map_err(iceberg)?;
    }
    Ok(report)
}

/// What an orphan cleanup did (or, dry, would do).
#[derive(Debug, Clone, Default)]
pub struct OrphanReport {
    /// Files under the table location.
    pub listed: usize,
    /// Unreferenced files old enough, deleted (or to delete).
    pub orphans: Vec<String>,
    /// Unreferenced files younger than the window, kept.
    pub too_young: usize,
}

/// Deletes files under the table's location that no snapshot, no metadata file in
/// the log and no pending ledger entry references, and that are older than
/// `older_than_ms` (Unix ms). With `dry_run`, only lists them.
pub async fn remove_orphans(
    catalog: &dyn Catalog,
    ledger: &impl Ledger,
    ident: &TableIdent,
    s3: &crate::catalog::S3Settings,
    older_than_ms: i64,
    dry_run: bool,
) -> Result<OrphanReport, MaintenanceError> {
    let name = ident.to_string();
    let iceberg = |source: iceberg::Error| MaintenanceError::Iceberg {
        table: name.clone(),
        source: Box::new(source),
    };
    let listing = |source| MaintenanceError::Listing {
        table: name.clone(),
        source,
    };
    let table = catalog.load_table(ident).await.map_err(iceberg)?;
    let metadata = table.metadata();
    let mut referenced = reachable(&table, metadata.snapshots().map(|s| s.snapshot_id()))
        .await
        .map_err(iceberg)?;
    referenced.insert(
        table
            .metadata_location_result()
            .map_err(iceberg)?
            .to_owned(),
    );
    referenced.extend(
        metadata
            .metadata_log()
            .iter()
            .map(|m| m.metadata_file.clone()),
    );
    for statistics in metadata.statistics_iter() {
        referenced.insert(statistics.statistics_path.clone());
    }
    // A dead-letter table's pending files are in its parent table's ledger entries.
    let parent = kfs_plan::naming::TableName::parse(&name)
        .and_then(|table| table.dead_letter_parent())
        .map(|parent| parent.to_string());
    for ledger_table in std::iter::once(&name).chain(parent.as_ref()) {
        let pending = ledger
            .list(Some("pending"), Some(ledger_table))
            .await
            .map_err(|source| MaintenanceError::Ledger {
                table: name.clone(),
                source,
            })?;
        for entry in &pending {
            referenced.extend(crate::pipeline::converted_paths(entry));
        }
    }
    let location = metadata.location().trim_end_matches('/');
    let root = location.strip_prefix("file://").unwrap_or(location);
    let source = OpendalSource::from_location(root, s3).map_err(listing)?;
    let objects = source.list().await.map_err(listing)?;
    let mut report = OrphanReport {
        listed: objects.len(),
        ..OrphanReport::default()
    };
    for object in objects {
        let path = format!("{location}/{}", object.key);
        if referenced.contains(&path) {
            continue;
        }
        let modified = source
            .stat(&object.key)
            .await
            .map_err(listing)?
            .and_then(|o| o.modified_ms)
            .unwrap_or(i64::MAX);
        if modified >= older_than_ms {
            report.too_young += 1;
            continue;
        }
        report.orphans.push(path);
    }
    if !dry_run {
        for path in &report.orphans {
            delete_file(table.file_io(), path).await.map_err(iceberg)?;
        }
    }
    Ok(report)
}

/// Table property recording the last orphan cleanup (Unix ms), so that a stateless
/// committer runs it once per interval.
pub const ORPHANS_REMOVED_PROPERTY: &str = "kfs.orphans-removed-ms";

/// When the committer maintains the tables it committed to.
#[derive(Debug, Clone)]
pub struct MaintenancePolicy {
    /// Compact small files.
    pub compact: bool,
    /// Expire snapshots older than this.
    pub snapshot_retention: std::time::Duration,
    /// Always keep this many snapshots.
    pub retain_last: usize,
    /// Keep at most this many snapshots whatever their age (default 1,000; `None`: age
    /// only). Commit
    /// cost grows with the snapshots a table keeps (the metadata file lists them all).
    pub max_snapshots: Option<usize>,
    /// Merge manifests when a table has more than this many.
    pub max_manifests: usize,
    /// Remove orphans older than this (`None`: never); must exceed the longest a
    /// file may stay pending.
    pub orphan_age: Option<std::time::Duration>,
    /// How often orphan cleanup runs per table.
    pub orphan_interval: std::time::Duration,
}

impl Default for MaintenancePolicy {
    fn default() -> Self {
        Self {
            compact: true,
            snapshot_retention: std::time::Duration::from_secs(5 * 86_400),
            retain_last: 1,
            max_snapshots: Some(1000),
            max_manifests: 10,
            orphan_age: Some(std::time::Duration::from_secs(3 * 86_400)),
            orphan_interval: std::time::Duration::from_secs(3600),
        }
    }
}

/// What maintenance did to one table.
#[derive(Debug, Clone, Default)]
pub struct MaintenanceSummary {
    /// Files replaced by compaction.
    pub files_compacted: usize,
    /// Snapshots expired.
    pub snapshots_expired: usize,
    /// Files deleted by expiry and orphan cleanup.
    pub files_deleted: usize,
    /// Whether manifests were merged.
    pub manifests_rewritten: bool,
    /// Whether orphan cleanup ran.
    pub orphan_cleanup: bool,
}

fn millis(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Maintains one table by `policy`, stopping before `deadline`: compaction, expiry,
/// manifest rewrite, and (once per interval) orphan cleanup.
#[allow(clippy::too_many_arguments)]
pub async fn maintain_table(
    catalog: &dyn Catalog,
    swap: &dyn TableSwap,
    ledger: &impl Ledger,
    s3: &crate::catalog::S3Settings,
    ident: &TableIdent,
    policy: &MaintenancePolicy,
    deadline: Option<Instant>,
    now_ms: i64,
) -> Result<MaintenanceSummary, MaintenanceError> {
    let out_of_time = || deadline.is_some_and(|d| Instant::now() >= d);
    let mut summary = MaintenanceSummary::default();
    if policy.compact {
        let report = compact_table(catalog, swap, ident, None, deadline, now_ms).await?;
        summary.files_compacted = report.files_removed;
    }
    if out_of_time() {
        return Ok(summary);
    }
    let expiry = expire_snapshots(
        catalog,
        ident,
        &ExpiryRule {
            older_than_ms: now_ms.saturating_sub(millis(policy.snapshot_retention)),
            retain_last: policy.retain_last,
            max_snapshots: policy.max_snapshots,
        },
        false,
    )
    .await?;
    summary.snapshots_expired = expiry.expired.len();
    summary.files_deleted += expiry.deleted_files.len();
    if out_of_time() {
        return Ok(summary);
    }
    summary.manifests_rewritten =
        rewrite_manifests(catalog, swap, ident, policy.max_manifests, now_ms)
            .await?
            .is_some();
    let Some(orphan_age) = policy.orphan_age else {
        return Ok(summary);
    };
    let name = ident.to_string();
    let iceberg = |source: iceberg::Error| MaintenanceError::Iceberg {
        table: name.clone(),
        source: Box::new(source),
    };
    let table = catalog.load_table(ident).await.map_err(iceberg)?;
    let last: i64 = table
        .metadata()
        .properties()
        .get(ORPHANS_REMOVED_PROPERTY)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if out_of_time() || now_ms.saturating_sub(last) < millis(policy.orphan_interval) {
        return Ok(summary);
    }
    let orphans = remove_orphans(
        catalog,
        ledger,
        ident,
        s3,
        now_ms.saturating_sub(millis(orphan_age)),
        false,
    )
    .await?;
    summary.orphan_cleanup = true;
    summary.files_deleted += orphans.orphans.len();
    let tx = Transaction::new(&table);
    let tx = tx
        .update_table_properties()
        .set(ORPHANS_REMOVED_PROPERTY.to_owned(), now_ms.to_string())
        .apply(tx)
        .map_err(iceberg)?;
    // Losing this race only means the next tick cleans again.
    let _ = tx.commit(catalog).await;
    Ok(summary)
}

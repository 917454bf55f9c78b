//! Compaction: small files bin-packed into target-size files with replace snapshots;
//! files with rows deleted by position deletes rewritten without them, and the delete
//! files that named only rewritten files removed in the same snapshot (the fold of
//! merge-on-read deletes: a mirror reads as plain data files again).

use super::MaintenanceError;
use crate::commit::replace::{DeletePolicy, Replacement, stage_replace};
use crate::table::find_maintenance;
use crate::table::{file_stat, target_file_size};
use iceberg::spec::DataFile;
use iceberg::table::Table;
use iceberg::{Catalog, ErrorKind, TableIdent};
use kfs_catalog::catalog::TableSwap;
use kfs_failpoint::delete_file;
use kfs_parquet::merge_data_files;
use kfs_plan::compaction::{CompactionPolicy, FileStat, plan_compaction, written_by_pipeline};
use kfs_plan::hash::Fnv1a;
use std::time::Instant;

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
    /// Nothing compacted: the table has live delete files this build does not read
    /// (another engine's equality deletes), which a rewrite would
    /// ignore, bringing their rows back. Position deletes are folded.
    pub skipped_for_deletes: bool,
    /// Position-delete files removed because every data file they name was rewritten
    /// without the rows they delete.
    pub delete_files_folded: usize,
}

impl CompactionReport {
    /// Counts a group committed: its files replaced by `written`, merged as `merge` says.
    fn count(
        &mut self,
        group: &kfs_plan::compaction::RewriteGroup,
        merge: &kfs_parquet::MergeStats,
        written: &[DataFile],
    ) {
        self.files_removed += group.files.len();
        self.row_groups_copied += merge.row_groups_copied;
        self.row_groups_reencoded += merge.row_groups_reencoded;
        self.bytes_copied += merge.bytes_copied;
        self.bytes_reencoded += merge.bytes_reencoded;
        self.files_added += written.len();
        self.bytes_read += group.bytes();
        self.bytes_written += written.iter().map(|f| f.file_size_in_bytes()).sum::<u64>();
    }
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
    let sized = |target| policy.unwrap_or_else(|| CompactionPolicy::for_target(target));
    compact_sized(catalog, swap, ident, sized, deadline, now_ms).await
}

/// [`compact_table`] with the policy `sized` gives for the table's target file size.
pub(crate) async fn compact_sized(
    catalog: &dyn Catalog,
    swap: &dyn TableSwap,
    ident: &TableIdent,
    sized: impl Fn(u64) -> CompactionPolicy,
    deadline: Option<Instant>,
    now_ms: i64,
) -> Result<CompactionReport, MaintenanceError> {
    let name = ident.to_string();
    let iceberg = |source: iceberg::Error| MaintenanceError::Iceberg {
        table: name.clone(),
        source: Box::new(source),
    };
    let mut table = catalog.load_table(ident).await.map_err(iceberg)?;
    super::ensure_ours(&table)?;
    let policy = sized(target_file_size(&table));
    let mut report = CompactionReport::default();
    // Merged files compress far better than their tiny inputs, so one round can leave
    // files well below the target: plan again on the result, a few rounds at most.
    for _round in 0..COMPACTION_ROUNDS {
        let deletes = crate::table::live_deletes(&table).await.map_err(iceberg)?;
        if !deletes.unread.is_empty() {
            // Equality deletes (another engine's): a rewrite that
            // does not apply them would bring their rows back.
            report.skipped_for_deletes = true;
            return Ok(report);
        }
        // Files of the default partition spec only: a merged file is written in it, and
        // files of an older spec keep the layout they were committed in.
        let default_spec = table.metadata().default_partition_spec_id();
        let live = crate::table::live_entries_in(&table, Some(default_spec))
            .await
            .map_err(iceberg)?;
        // Only files this pipeline wrote: another writer's files are its own (module
        // doc of `kfs_plan::compaction::written_by_pipeline`).
        let stats: Vec<FileStat> = live
            .iter()
            .filter(|e| written_by_pipeline(e.file_path()))
            .map(|e| FileStat {
                deleted_rows: deletes
                    .positions
                    .get(e.file_path())
                    .map_or(0, |rows| rows.len() as u64),
                ..file_stat(e.data_file())
            })
            .collect();
        let groups = plan_compaction(&stats, &policy);
        if groups.is_empty() {
            break;
        }
        report.groups += groups.len();
        let mut round = Round::read(&table, &live, deletes).await.map_err(iceberg)?;
        // Files an earlier group of the round removed: data files whose delete files
        // a later group may fold, and delete files already folded (one naming no
        // live file is in every group's fold: the first removes it).
        let mut gone = std::collections::BTreeSet::new();
        for (done, group) in groups.iter().enumerate() {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                report.deferred_groups = groups.len() - done;
                return Ok(report);
            }
            round
                .refresh_lineage(&table, group)
                .await
                .map_err(iceberg)?;
            let (written, merge, change) = round
                .rewrite(&table, group, &policy, &gone)
                .await
                .map_err(iceberg)?;
            match commit_replace(catalog, swap, ident, &mut table, &change, now_ms).await {
                Ok(Some(snapshot_id)) => {
                    gone.extend(change.remove.iter().cloned());
                    report.snapshots.push(snapshot_id);
                    report.count(group, &merge, &written);
                    report.delete_files_folded += change.remove.len() - group.files.len();
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

/// What one planning round of a compaction works from: the live data files of the
/// default spec (and the paths of every spec's), the live deletes, and (a v3 table's)
/// the files' row lineage.
struct Round {
    live: std::collections::HashMap<String, DataFile>,
    all_live: std::collections::HashSet<String>,
    deletes: crate::table::LiveDeletes,
    lineage: std::collections::HashMap<String, kfs_parquet::RowLineage>,
    /// The snapshot `lineage` was read at.
    lineage_at: Option<i64>,
}

impl Round {
    /// The round on `table`, whose live files of the default spec are `live` and live
    /// deletes `deletes`.
    async fn read(
        table: &Table,
        live: &[iceberg::spec::ManifestEntry],
        deletes: crate::table::LiveDeletes,
    ) -> iceberg::Result<Self> {
        Ok(Round {
            live: live
                .iter()
                .map(|e| (e.file_path().to_owned(), e.data_file().clone()))
                .collect(),
            deletes,
            lineage: crate::table::live_lineage(table).await?,
            lineage_at: table.metadata().current_snapshot_id(),
            // Every spec's: a delete file naming a live file of an older spec stays.
            all_live: crate::table::live_entries(table)
                .await?
                .iter()
                .map(|e| e.file_path().to_owned())
                .collect(),
        })
    }

    /// Rewrites `group` into one file (merged, or without its deleted rows when any
    /// file of it has some) and returns it with the replace that commits it: the
    /// group's files removed, and with them every delete file that names no data file
    /// still live beside them; `gone`: the files earlier groups of the round removed.
    async fn rewrite(
        &self,
        table: &Table,
        group: &kfs_plan::compaction::RewriteGroup,
        policy: &CompactionPolicy,
        gone: &std::collections::BTreeSet<String>,
    ) -> iceberg::Result<(Vec<DataFile>, kfs_parquet::MergeStats, Replacement)> {
        let mut id = Fnv1a::default();
        for file in &group.files {
            id.write_field(file.path.as_bytes());
        }
        let group_id = format!("{:016x}", id.finish());
        let inputs: Vec<&DataFile> = group
            .files
            .iter()
            .filter_map(|f| self.live.get(f.path.as_str()))
            .collect();
        let stem = format!("compacted-{group_id}-{}", crate::convert::write_token());
        // A v3 table's rows are rewritten whatever their deletes, to write their
        // lineage out (a copied row group would lose it).
        let v3 = table.metadata().format_version() >= iceberg::spec::FormatVersion::V3;
        let rewritten = v3 || group.files.iter().any(|f| f.deleted_rows > 0);
        let unlineaged = match v3 {
            true => inputs
                .iter()
                .map(|f| f.file_path())
                .filter(|path| !self.lineage.contains_key(*path))
                .map(str::to_owned)
                .collect(),
            false => std::collections::BTreeSet::new(),
        };
        let (written, merge) = match rewritten {
            true => {
                let positions = &self.deletes.positions;
                let kept =
                    kfs_parquet::rewrite_without(table, &inputs, positions, (&stem, &self.lineage))
                        .await?;
                (
                    kept.into_iter().collect(),
                    kfs_parquet::MergeStats::default(),
                )
            }
            false => {
                let (merged, stats) =
                    merge_data_files(table, &inputs, &stem, policy.copy_row_group_min_bytes)
                        .await?;
                (vec![merged], stats)
            }
        };
        let mut remove: std::collections::BTreeSet<String> =
            group.files.iter().map(|f| f.path.clone()).collect();
        // A delete file goes once every data file it names is gone: rewritten here or
        // by an earlier group of the round, or no longer live (rewritten, expired).
        let folded: Vec<String> = self
            .deletes
            .files
            .iter()
            .filter(|(path, named)| {
                !gone.contains(*path)
                    && named.iter().all(|data| {
                        remove.contains(data)
                            || gone.contains(data)
                            || !self.all_live.contains(data)
                    })
            })
            .map(|(path, _)| path.clone())
            .collect();
        remove.extend(folded);
        let change = Replacement {
            remove,
            add: written.clone(),
            merge_manifests: false,
            maintenance_id: format!("compaction-{group_id}"),
            deletes: DeletePolicy::Folded(self.deletes.files.keys().cloned().collect()),
            unlineaged,
        };
        Ok((written, merge, change))
    }

    /// Reads `table`'s row lineage again when a file of `group` has none in the
    /// round's and the table has moved on since it was read: a snapshot committed since
    /// (an earlier group's, another writer's) may have given it ids (a v3 manifest list
    /// assigns them to the manifests from before an upgrade), which the rewrite must
    /// keep.
    async fn refresh_lineage(
        &mut self,
        table: &Table,
        group: &kfs_plan::compaction::RewriteGroup,
    ) -> iceberg::Result<()> {
        let v3 = table.metadata().format_version() >= iceberg::spec::FormatVersion::V3;
        let head = table.metadata().current_snapshot_id();
        if !v3
            || head == self.lineage_at
            || group
                .files
                .iter()
                .all(|f| self.lineage.contains_key(&f.path))
        {
            return Ok(());
        }
        self.lineage = crate::table::live_lineage(table).await?;
        self.lineage_at = head;
        Ok(())
    }
}

/// Commits a replace snapshot, re-staging it on the new head after a conflict. Returns
/// the snapshot id, or `None` when its files are no longer live (replaced by someone
/// else). An unknown outcome is settled by looking for the maintenance id.
pub(crate) async fn commit_replace(
    catalog: &dyn Catalog,
    swap: &dyn TableSwap,
    ident: &TableIdent,
    table: &mut Table,
    change: &Replacement,
    now_ms: i64,
) -> iceberg::Result<Option<i64>> {
    const ATTEMPTS: usize = 8;
    let mut last_error = None;
    for attempt in 0..ATTEMPTS {
        // Files rewritten without lineage that a new head has since given ids: the
        // rewrite would give their rows other ones (stale: the next round redoes it).
        // (The first attempt is on the table the rewrite read its lineage from.)
        if attempt > 0 && !change.unlineaged.is_empty() {
            let lineage = crate::table::live_lineage(table).await?;
            if change
                .unlineaged
                .iter()
                .any(|path| lineage.contains_key(path))
            {
                return Ok(None);
            }
        }
        let mut staged = match stage_replace(table, change, now_ms).await {
            Ok(staged) => staged,
            Err(e) if e.kind() == ErrorKind::CatalogCommitConflicts => return Ok(None),
            Err(e) => return Err(e),
        };
        // A mirror's key index, carried to the new snapshot.
        let snapshot = (staged.snapshot_id, table.metadata().next_sequence_number());
        staged.updates.extend(
            crate::mirror::carried_index(table, (&change.remove, &change.add), snapshot).await?,
        );
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
                if !kfs_catalog::fault::iceberg_error_kind(&e).is_retryable() {
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

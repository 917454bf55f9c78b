//! Snapshot expiry, and deletion of the files only expired snapshots reached.

use super::MaintenanceError;
use crate::table::ancestry;
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, ErrorKind, TableIdent};
use kfs_failpoint::delete_file;
use kfs_plan::compaction::{ExpiryRule, SnapshotStat, plan_expiry};
use std::collections::{BTreeSet, HashSet};

/// Every file the snapshots reach: their manifest lists, their manifests and the data
/// files their live entries name (a DELETED entry records a removal; the snapshot does
/// not read that file). Each manifest is read once, however many snapshots share it.
pub(crate) async fn reachable(
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
    super::ensure_ours(&table)?;
    // gc.enabled=false: the files may be another table's too; no override.
    if let Some(off) = super::step_off(
        &name,
        table.metadata().properties(),
        super::MaintenanceStep::SnapshotExpiry,
    )?
    .filter(|off| !off.overridable)
    {
        return Err(MaintenanceError::Refused {
            table: name.clone(),
            reason: format!("{off}: nothing is expired or deleted"),
        });
    }
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

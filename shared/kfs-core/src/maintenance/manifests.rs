//! Manifest rewrites: many small manifests merged into few, as a replace snapshot.

use super::MaintenanceError;
use super::compact::commit_replace;
use crate::commit::replace::Replacement;
use iceberg::{Catalog, TableIdent};
use kfs_catalog::catalog::TableSwap;

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
    super::ensure_ours(&table)?;
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
        // A manifest rewrite moves no row: delete manifests are merged as they are.
        deletes: crate::commit::replace::DeletePolicy::Any,
        ..Replacement::default()
    };
    commit_replace(catalog, swap, ident, &mut table, &change, now_ms)
        .await
        .map_err(iceberg)
}

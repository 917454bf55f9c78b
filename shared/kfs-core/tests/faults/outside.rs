//! Another engine maintaining the table beside the pipeline, as S3 Tables, Glue's
//! optimizers or a Spark job would: it commits a snapshot of its own (the same rows,
//! a summary without any of kfs-iceberg's properties, as a rewrite leaves) and then
//! expires every other snapshot, our appends included. Conflicts with a racing commit
//! are its own business: it gives up, as a scheduled job retries later.

use std::collections::HashMap;
use std::path::Path;

use iceberg::spec::{
    MAIN_BRANCH, Operation, Snapshot, SnapshotReference, SnapshotRetention, Summary,
};
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, TableRequirement, TableUpdate};
use kfs_core::testing::SqlTableSwap;
use kfs_core::{LOCAL_CATALOG_NAME, TableSwap, table_ident};
use kfs_plan::naming::{TableName, TableNaming};

use super::open_catalog;

/// What the outside engine did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutsideOutcome {
    /// There was no table (or no snapshot) to maintain yet.
    Nothing,
    /// Its rewrite lost a race with a commit of ours.
    Conflicted,
    /// Its rewrite landed and every older snapshot was expired.
    Maintained,
}

/// One maintenance run of the outside engine on the `orders` table of the deployment
/// in `dir`.
pub async fn maintain_outside(dir: &Path, snapshot_id: i64) -> Result<OutsideOutcome, String> {
    let name = TableNaming::default().table_for("orders");
    maintain_outside_table(dir, &name, snapshot_id).await
}

/// One maintenance run of the outside engine on the table `name` of the deployment in
/// `dir` (the mirror's change log, too).
pub async fn maintain_outside_table(
    dir: &Path,
    name: &TableName,
    snapshot_id: i64,
) -> Result<OutsideOutcome, String> {
    let text = |e: &dyn std::fmt::Display| e.to_string();
    let catalog = open_catalog(dir).await?;
    let ident = table_ident(name);
    let Ok(table) = catalog.load_table(&ident).await else {
        return Ok(OutsideOutcome::Nothing);
    };
    let metadata = table.metadata();
    let Some(current) = metadata.current_snapshot() else {
        return Ok(OutsideOutcome::Nothing);
    };
    // A rewrite of the same rows: the current snapshot's manifests under a new
    // snapshot whose summary carries only what any engine writes.
    let totals: HashMap<String, String> = current
        .summary()
        .additional_properties
        .iter()
        .filter(|(k, _)| k.starts_with("total-"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let builder = Snapshot::builder()
        .with_snapshot_id(snapshot_id)
        .with_parent_snapshot_id(Some(current.snapshot_id()))
        .with_sequence_number(metadata.next_sequence_number())
        .with_timestamp_ms(kfs_core::now_ms().max(metadata.last_updated_ms()))
        .with_manifest_list(current.manifest_list().to_owned())
        .with_schema_id(metadata.current_schema_id())
        .with_summary(Summary {
            operation: Operation::Replace,
            additional_properties: totals,
        });
    // A v3 table's snapshot has a row range: this one adds no row.
    let snapshot = match metadata.format_version() >= iceberg::spec::FormatVersion::V3 {
        true => builder.with_row_range(metadata.next_row_id(), 0).build(),
        false => builder.build(),
    };
    let swap = SqlTableSwap::open(&dir.join("catalog.db"), LOCAL_CATALOG_NAME)
        .await
        .map_err(|e| text(&e))?;
    let committed = swap
        .commit(
            &table,
            vec![TableRequirement::RefSnapshotIdMatch {
                r#ref: MAIN_BRANCH.to_owned(),
                snapshot_id: Some(current.snapshot_id()),
            }],
            vec![
                TableUpdate::AddSnapshot { snapshot },
                TableUpdate::SetSnapshotRef {
                    ref_name: MAIN_BRANCH.to_owned(),
                    reference: SnapshotReference::new(
                        snapshot_id,
                        SnapshotRetention::branch(None, None, None),
                    ),
                },
            ],
        )
        .await;
    let Ok(table) = committed else {
        return Ok(OutsideOutcome::Conflicted);
    };
    // Every snapshot but the current one expired (metadata only: the files stay for
    // the orphan cleanup of whoever runs it).
    let older: Vec<i64> = table
        .metadata()
        .snapshots()
        .map(|s| s.snapshot_id())
        .filter(|id| *id != snapshot_id)
        .collect();
    if older.is_empty() {
        return Ok(OutsideOutcome::Maintained);
    }
    let tx = Transaction::new(&table);
    let Ok(tx) = tx.expire_snapshots().expire_snapshot_ids(older).apply(tx) else {
        return Ok(OutsideOutcome::Conflicted);
    };
    match tx
        .commit(&kfs_core::testing::PinnedCatalog::new(
            &catalog,
            table.clone(),
        ))
        .await
    {
        Ok(_) => Ok(OutsideOutcome::Maintained),
        Err(_) => Ok(OutsideOutcome::Conflicted),
    }
}

//! The in-memory catalog as the pipeline's catalog: JSON segments converted and
//! committed (schema changes and the dead-letter table through its swap), then
//! maintained (compaction through the swap, expiry, orphan cleanup); every offset once
//! in one of the two tables. A commit staged on a table that moved meanwhile is refused as a
//! conflict, through the catalog and through the swap alike.

use crate::local;

use std::collections::HashMap;

use iceberg::spec::{PrimitiveType, Type};
use iceberg::transaction::{AddColumn, ApplyTransactionAction, Transaction};
use kfs_core::{CatalogKind, S3Settings, Warehouse, open_catalog_handle, table_ident};
use kfs_core::{MaintenancePolicy, maintain_table};
use kfs_core::{PipelineConfig, now_ms, run_pass};
use kfs_plan::naming::{TableNaming, ValueFormat};
use local::{BoxError, Local, offsets};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pipeline_runs_on_the_memory_catalog() -> Result<(), BoxError> {
    let local = Local::open().await?;
    let handle = open_catalog_handle(
        &CatalogKind::Memory,
        &Warehouse::Local(local.dir.path().join("memory-wh")),
        &S3Settings::default(),
    )
    .await?;
    let (catalog, swap) = (handle.catalog.as_ref(), handle.swap.as_ref());
    let config = PipelineConfig {
        naming: TableNaming {
            value_format: ValueFormat::Json,
            ..TableNaming::default()
        },
        ..PipelineConfig::default()
    };
    for (base, extra) in [(0, ""), (4, r#", "later": true"#), (8, "")] {
        let values: Vec<String> = (base..base + 4)
            .map(|offset| {
                if offset % 4 == 3 {
                    "not json".to_owned()
                } else {
                    format!(r#"{{"n": {offset}{extra}}}"#)
                }
            })
            .collect();
        let values: Vec<&str> = values.iter().map(String::as_str).collect();
        local.put("orders", base, &values, 1)?;
        run_pass(
            &local.source,
            catalog,
            swap,
            &local.ledger,
            &config,
            &|_| {},
        )
        .await?;
    }
    let name = config.naming.table_for("orders");
    let ident = table_ident(&name);
    let table = catalog.load_table(&ident).await?;
    assert!(
        table
            .metadata()
            .current_schema()
            .field_by_name("later")
            .is_some()
    );
    // Compaction, expiry down to one snapshot, manifest merging, orphan cleanup.
    let policy = MaintenancePolicy {
        max_snapshots: Some(1),
        orphan_age: Some(std::time::Duration::ZERO),
        force_orphan_age: true,
        orphan_interval: std::time::Duration::ZERO,
        ..MaintenancePolicy::default()
    };
    let summary = maintain_table(
        catalog,
        swap,
        &local.ledger,
        &kfs_core::MaintenanceStorage {
            s3: S3Settings::default(),
            warehouse: Warehouse::Local(local.dir.path().join("memory-wh")),
        },
        &ident,
        &policy,
        None,
        now_ms(),
    )
    .await?;
    assert!(
        summary.files_compacted >= 2 && summary.snapshots_expired >= 1 && summary.orphan_cleanup,
        "{summary:?}"
    );
    let rows = offsets(catalog, &name).await?;
    let dead = offsets(catalog, &name.dead_letters()).await?;
    assert_eq!((rows.len(), dead.len()), (9, 3), "{rows:?} {dead:?}");
    for offset in 0..12 {
        let (in_table, in_dead) = (
            rows.get(&(0, offset)).copied().unwrap_or(0),
            dead.get(&(0, offset)).copied().unwrap_or(0),
        );
        let expected = if offset % 4 == 3 { (0, 1) } else { (1, 0) };
        assert_eq!((in_table, in_dead), expected, "offset {offset}");
    }

    // Two schema changes staged on the same version: the second is refused, through
    // the catalog and through the swap.
    let table = catalog.load_table(&ident).await?;
    let add = |column: &str| {
        let tx = Transaction::new(&table);
        tx.update_schema()
            .add_column(AddColumn::optional(
                column,
                Type::Primitive(PrimitiveType::String),
            ))
            .apply(tx)
    };
    let (first, second) = (add("x")?, add("y")?);
    let pinned = || kfs_core::testing::PinnedCatalog::new(catalog, table.clone());
    first.commit(&pinned()).await?;
    let refused = second
        .commit(&pinned())
        .await
        .err()
        .ok_or("a stale commit landed")?;
    assert_eq!(refused.kind(), iceberg::ErrorKind::CatalogCommitConflicts);
    let stale = swap
        .commit(
            &table,
            vec![iceberg::TableRequirement::CurrentSchemaIdMatch {
                current_schema_id: table.metadata().current_schema_id(),
            }],
            vec![iceberg::TableUpdate::SetProperties {
                updates: HashMap::from([("k".to_owned(), "v".to_owned())]),
            }],
        )
        .await
        .err()
        .ok_or("a stale swap landed")?;
    assert_eq!(stale.kind(), iceberg::ErrorKind::CatalogCommitConflicts);
    Ok(())
}

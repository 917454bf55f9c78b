//! Maintenance among neighbours: orphan cleanup confined to its table (a location that
//! holds another table's, or lies outside the warehouse, is refused by the committer's
//! cleanup; a table nested under ours that no catalog lists is found in the listing and
//! refused), and each maintenance step turned off per table by a table property (and
//! by Iceberg's `gc.enabled=false`), as for tables S3 Tables or Glue maintains; a
//! table another engine upgraded to format v3 keeps its row lineage through our
//! rewrites.

use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, TableIdent};
use kfs_core::{
    MaintenancePolicy, MaintenanceStep, MaintenanceStorage, OrphanRule, S3Settings,
    TickMaintenance, Warehouse, maintain_table, now_ms, remove_orphans, table_ident,
};
use kfs_plan::naming::TableName;

use crate::local::{BoxError, Local, offsets};

type TestResult = Result<(), BoxError>;

const VALUES: [&str; 5] = ["a", "b", "c", "d", "e"];

fn name(text: &str) -> TableName {
    TableName::parse(text).unwrap_or_else(|| panic!("{text}"))
}

pub(crate) fn storage(local: &Local) -> MaintenanceStorage {
    MaintenanceStorage {
        s3: S3Settings::default(),
        warehouse: Warehouse::Local(local.dir.path().join("wh")),
    }
}

/// The committer's policy with orphan cleanup forced to every file and every tick.
fn eager_policy() -> MaintenancePolicy {
    MaintenancePolicy {
        compact: false,
        orphan_age: Some(std::time::Duration::ZERO),
        force_orphan_age: true,
        orphan_interval: std::time::Duration::ZERO,
        ..MaintenancePolicy::default()
    }
}

/// One committer tick, maintenance included.
async fn tick(local: &Local) -> Result<kfs_core::TickReport, BoxError> {
    let maintenance = TickMaintenance {
        policy: eager_policy(),
        storage: storage(local),
    };
    Ok(kfs_core::run_tick(
        &local.source,
        local.access(),
        &local.ledger,
        &kfs_core::PipelineConfig::default(),
        Some(&maintenance),
    )
    .await?)
}

/// Every step of maintenance at once on `ident`, with no snapshot kept for its age
/// and one manifest at most (the policy of [`eager_policy`] besides).
pub(crate) async fn maintain_everything(
    local: &Local,
    ident: &TableIdent,
    policy: &MaintenancePolicy,
) -> Result<kfs_core::MaintenanceSummary, kfs_core::MaintenanceError> {
    maintain_table(
        &local.catalog,
        &local.swap,
        &local.ledger,
        &storage(local),
        ident,
        policy,
        None,
        now_ms() + 60_000,
    )
    .await
}

/// [`eager_policy`] with compaction on, no snapshot kept for its age and one manifest
/// at most: every step does something.
pub(crate) fn thorough_policy() -> MaintenancePolicy {
    MaintenancePolicy {
        compact: true,
        snapshot_retention: std::time::Duration::ZERO,
        max_manifests: 1,
        ..eager_policy()
    }
}

async fn set_location(catalog: &dyn Catalog, ident: &TableIdent, location: &str) -> TestResult {
    let table = catalog.load_table(ident).await?;
    let tx = Transaction::new(&table);
    let tx = tx
        .update_location()
        .set_location(location.to_owned())
        .apply(tx)?;
    tx.commit(catalog).await?;
    Ok(())
}

async fn set_property(
    catalog: &dyn Catalog,
    ident: &TableIdent,
    key: &str,
    value: &str,
) -> TestResult {
    let table = catalog.load_table(ident).await?;
    let tx = Transaction::new(&table);
    let tx = tx
        .update_table_properties()
        .set(key.to_owned(), value.to_owned())
        .apply(tx)?;
    tx.commit(catalog).await?;
    Ok(())
}

/// Every file the table's metadata names (data files, manifests, lists, metadata) exists.
async fn intact(catalog: &dyn Catalog, table: &TableName, count: i64) -> TestResult {
    let loaded = catalog.load_table(&table_ident(table)).await?;
    for entry in kfs_core::live_entries(&loaded).await? {
        let path = entry.data_file().file_path();
        assert!(loaded.file_io().exists(path).await?, "{path} is gone");
    }
    let found = offsets(catalog, table).await?;
    assert_eq!(found.len() as i64, count, "{table}: {found:?}");
    assert!(found.values().all(|&n| n == 1), "{table}: {found:?}");
    Ok(())
}

#[tokio::test]
async fn the_committers_cleanup_refuses_a_location_holding_another_table_or_outside_the_warehouse()
-> TestResult {
    let local = Local::open().await?;
    local.put("orders", 0, &VALUES, 1)?;
    local.put("clicks", 0, &VALUES, 1)?;
    let first = tick(&local).await?;
    assert_eq!(first.maintenance_failures(), 0, "{:?}", first.maintenance);
    let (orders, clicks) = (name("kafscale.orders"), name("kafscale.clicks"));
    let orders_location = local
        .catalog
        .load_table(&table_ident(&orders))
        .await?
        .metadata()
        .location()
        .to_owned();
    // clicks moved to the parent of orders' location: its listing holds orders' files.
    let parent = orders_location
        .trim_end_matches('/')
        .rsplit_once('/')
        .map(|(parent, _)| parent.to_owned())
        .ok_or("no parent")?;
    set_location(&local.catalog, &table_ident(&clicks), &parent).await?;
    local.put("clicks", 5, &VALUES, 1)?;
    let second = tick(&local).await?;
    let refused = second.maintenance.get(&clicks.to_string()).cloned();
    let reason = refused.clone().and_then(Result::err).unwrap_or_default();
    assert!(
        reason.contains("kafscale.clicks") && reason.contains("kafscale.orders"),
        "{refused:?}"
    );
    intact(&local.catalog, &orders, 5).await?;
    intact(&local.catalog, &clicks, 10).await?;

    // Outside the warehouse: refused, whatever is there.
    let outside = local.dir.path().join("elsewhere");
    std::fs::create_dir_all(&outside)?;
    std::fs::write(outside.join("precious.txt"), b"not ours")?;
    set_location(
        &local.catalog,
        &table_ident(&clicks),
        &format!("file://{}", outside.display()),
    )
    .await?;
    local.put("clicks", 10, &VALUES, 1)?;
    let third = tick(&local).await?;
    let reason = third
        .maintenance
        .get(&clicks.to_string())
        .cloned()
        .and_then(Result::err)
        .unwrap_or_default();
    assert!(reason.contains("outside the warehouse"), "{reason}");
    assert!(outside.join("precious.txt").exists());
    intact(&local.catalog, &orders, 5).await?;
    Ok(())
}

#[tokio::test]
async fn a_table_nested_under_ours_that_no_catalog_lists_is_found_in_the_listing() -> TestResult {
    let local = Local::open().await?;
    local.put("orders", 0, &VALUES, 1)?;
    local.run(&Default::default()).await?;
    let ident = table_ident(&name("kafscale.orders"));
    let location = local
        .catalog
        .load_table(&ident)
        .await?
        .metadata()
        .location()
        .to_owned();
    let root = location
        .strip_prefix("file://")
        .unwrap_or(&location)
        .to_owned();
    // Another engine's table, registered in another catalog, rooted inside ours.
    let foreign = std::path::Path::new(&root).join("data/imported/metadata");
    std::fs::create_dir_all(&foreign)?;
    std::fs::write(foreign.join("00000-x.metadata.json"), b"{}")?;
    let data = std::path::Path::new(&root).join("data/imported/data/part-0.parquet");
    std::fs::create_dir_all(data.parent().ok_or("no parent")?)?;
    std::fs::write(&data, b"PAR1")?;
    let rule = OrphanRule {
        older_than: std::time::Duration::ZERO,
        now_ms: now_ms() + 60_000,
        force: true,
        dry_run: false,
    };
    let result = remove_orphans(
        &local.catalog,
        &local.ledger,
        &ident,
        &storage(&local),
        &rule,
    )
    .await;
    let reason = result
        .as_ref()
        .err()
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(
        reason.contains("data/imported") && reason.contains("kafscale.orders"),
        "{result:?}"
    );
    assert!(data.exists());
    intact(&local.catalog, &name("kafscale.orders"), 5).await?;
    Ok(())
}

#[tokio::test]
async fn each_maintenance_step_is_turned_off_by_its_table_property() -> TestResult {
    let local = Local::open().await?;
    for base in [0, 5, 10, 15] {
        local.put("orders", base, &VALUES, 1)?;
        local.run(&Default::default()).await?;
    }
    let table = name("kafscale.orders");
    let ident = table_ident(&table);
    let before = local.catalog.load_table(&ident).await?;
    let snapshots = before.metadata().snapshots().count();
    let location = before.metadata().location().to_owned();
    let root = location
        .strip_prefix("file://")
        .unwrap_or(&location)
        .to_owned();
    let stray = std::path::Path::new(&root).join("data/stray.parquet");
    std::fs::write(&stray, b"PAR1")?;
    let policy = thorough_policy();
    let maintain = || maintain_everything(&local, &ident, &policy);
    for step in MaintenanceStep::ALL {
        set_property(&local.catalog, &ident, step.property(), "false").await?;
    }
    let off = maintain().await?;
    assert_eq!(off.files_compacted, 0, "{off:?}");
    assert_eq!(off.snapshots_expired, 0, "{off:?}");
    assert!(!off.manifests_rewritten, "{off:?}");
    assert!(!off.orphan_cleanup, "{off:?}");
    assert_eq!(off.steps_off.len(), 4, "{off:?}");
    assert!(stray.exists());
    let after = local.catalog.load_table(&ident).await?;
    assert!(after.metadata().snapshots().count() >= snapshots);

    // Iceberg's own switch: no expiry, no orphan cleanup, whatever ours say.
    for step in MaintenanceStep::ALL {
        set_property(&local.catalog, &ident, step.property(), "true").await?;
    }
    set_property(&local.catalog, &ident, "gc.enabled", "false").await?;
    let no_gc = maintain().await?;
    assert_eq!(no_gc.snapshots_expired, 0, "{no_gc:?}");
    assert!(!no_gc.orphan_cleanup, "{no_gc:?}");
    assert!(no_gc.files_compacted > 0, "{no_gc:?}");
    assert!(stray.exists());

    // A value that is not a boolean is a configuration error naming the property.
    set_property(
        &local.catalog,
        &ident,
        MaintenanceStep::Compaction.property(),
        "nope",
    )
    .await?;
    let bad = maintain().await;
    let text = bad
        .as_ref()
        .err()
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(
        text.contains(MaintenanceStep::Compaction.property()) && text.contains("nope"),
        "{bad:?}"
    );
    assert!(bad.is_err_and(|e| e.kind() == kfs_core::ErrorKind::Config));

    // Back on: everything runs.
    set_property(
        &local.catalog,
        &ident,
        MaintenanceStep::Compaction.property(),
        "true",
    )
    .await?;
    set_property(&local.catalog, &ident, "gc.enabled", "true").await?;
    let on = maintain().await?;
    assert!(on.orphan_cleanup && on.steps_off.is_empty(), "{on:?}");
    assert!(!stray.exists());
    intact(&local.catalog, &table, 20).await?;
    Ok(())
}

/// A table another engine upgraded to format v3 (as Spark's `format-version=3` does):
/// the appends that follow carry row lineage (each snapshot's first row id and added
/// rows, the table's next row id moving on); compaction and manifest rewrites carry
/// it too (every row keeps its `_row_id`), expiry and orphan cleanup run: pyiceberg
/// and DuckDB read every row after a maintenance pass.
#[tokio::test]
async fn a_table_upgraded_to_format_v3_keeps_its_row_lineage() -> TestResult {
    let local = Local::open().await?;
    let table = name("kafscale.orders");
    let ident = table_ident(&table);
    for base in [0, 5] {
        local.put("orders", base, &VALUES, 1)?;
        local.run(&Default::default()).await?;
    }
    let loaded = local.catalog.load_table(&ident).await?;
    let tx = Transaction::new(&loaded);
    let tx = tx
        .upgrade_table_version()
        .set_format_version(iceberg::spec::FormatVersion::V3)
        .apply(tx)?;
    tx.commit(&local.catalog).await?;
    for base in [10, 15] {
        local.put("orders", base, &VALUES, 1)?;
        local.run(&Default::default()).await?;
    }
    let upgraded = local.catalog.load_table(&ident).await?;
    assert_eq!(
        upgraded.metadata().format_version(),
        iceberg::spec::FormatVersion::V3
    );
    let current = upgraded
        .metadata()
        .current_snapshot()
        .ok_or("no snapshot")?;
    // The first v3 list gave the rows of before the upgrade their ids too (0-9), then
    // its own (10-14); the second its own.
    assert_eq!(current.row_range(), Some((15, 5)), "{current:?}");
    assert_eq!(upgraded.metadata().next_row_id(), 20);
    let before = crate::local::read::row_ids(&upgraded).await?;
    let report = maintain_everything(&local, &ident, &thorough_policy()).await?;
    // Every step runs: compaction and manifest rewrites carry the rows' lineage.
    assert!(report.steps_off.is_empty(), "{report:?}");
    assert!(
        report.files_compacted > 0
            && report.manifests_rewritten
            && report.snapshots_expired > 0
            && report.orphan_cleanup,
        "{report:?}"
    );
    let after = local.catalog.load_table(&ident).await?;
    assert!(
        after
            .metadata()
            .snapshots()
            .all(|s| s.row_range().is_some() || s.sequence_number() <= 2)
    );
    // Each row has the id it had before: written out in the rewritten files.
    assert_eq!(crate::local::read::row_ids(&after).await?, before);
    intact(&local.catalog, &table, 20).await?;
    crate::row_deltas::readers_see(&local, "kafscale.orders", 0..20).await
}

//! Failure isolation: one table that cannot be opened and one ledger item that cannot
//! be read are reported, and every other table commits on the same pass; the
//! poisoned item's partition waits at it (no offset passed), and lands exactly once
//! after the operator removes the item. On the real SQL catalog and ledger.

use std::collections::BTreeMap;

use iceberg::Catalog;
use kfs_core::{Ledger, SegmentSource, table_ident};
use kfs_plan::keys::SegmentFile;
use kfs_plan::naming::TableNaming;

use crate::local::{BoxError, Local, offsets};

type TestResult = Result<(), BoxError>;

const VALUES: [&str; 5] = ["a", "b", "c", "d", "e"];

/// Offsets `0..count` of partition 0, once each.
fn first(count: i64) -> BTreeMap<(i32, i64), usize> {
    (0..count).map(|o| ((0, o), 1)).collect()
}

#[tokio::test]
async fn a_broken_table_and_an_unreadable_ledger_item_stop_nothing_else() -> TestResult {
    let local = Local::open().await?;
    let naming = TableNaming::default();
    for topic in ["good", "broken", "poisoned"] {
        local.put(topic, 0, &VALUES, 1)?;
    }
    let report = local.run(&TableNaming::default()).await?;
    assert!(!report.has_failures(), "{report:?}");

    // The broken table's metadata file is overwritten: the table cannot be loaded.
    let broken = naming.table_for("broken");
    let table = local.catalog.load_table(&table_ident(&broken)).await?;
    let location = table
        .metadata_location()
        .ok_or("no metadata location")?
        .trim_start_matches("file://")
        .trim_start_matches("file:")
        .to_owned();
    std::fs::write(&location, b"{ not metadata")?;
    // A pending item of the poisoned topic becomes unreadable.
    let poisoned = local.put("poisoned", 5, &VALUES, 1)?;
    let segment = poisoned.object_key(SegmentFile::Data);
    local.convert(&naming, &poisoned).await?;
    let database = sqlx::SqlitePool::connect(&format!(
        "sqlite:{}",
        local.dir.path().join("ledger.db").display()
    ))
    .await?;
    sqlx::query("UPDATE ledger SET data_files = '{broken' WHERE segment = ?1")
        .bind(&segment)
        .execute(&database)
        .await?;
    for topic in ["good", "broken"] {
        local.put(topic, 5, &VALUES, 1)?;
    }
    local.put("poisoned", 10, &VALUES, 1)?;

    // A committer tick, maintenance and backlog included.
    let maintenance = kfs_core::TickMaintenance {
        policy: kfs_core::MaintenancePolicy::default(),
        storage: kfs_core::MaintenanceStorage {
            s3: kfs_core::S3Settings::default(),
            warehouse: kfs_core::Warehouse::Local(local.dir.path().join("wh")),
        },
    };
    let tick = kfs_core::run_tick(
        &local.source,
        local.access(),
        &local.ledger,
        &kfs_core::PipelineConfig::default(),
        Some(&maintenance),
    )
    .await?;
    let report = tick.pass;
    // Reported: the table that cannot be opened and the unreadable item.
    assert_eq!(
        report.failed_tables.keys().collect::<Vec<_>>(),
        vec![&broken.to_string()],
        "{report:?}"
    );
    assert_eq!(report.unreadable.len(), 1, "{report:?}");
    assert_eq!(report.unreadable[0].0, segment);
    assert!(report.quarantined.is_empty(), "{report:?}");
    // Every other table committed on the same pass.
    assert_eq!(
        offsets(&local.catalog, &naming.table_for("good")).await?,
        first(10)
    );
    // The poisoned partition waits at the unreadable item: nothing passed, its next
    // segment converted and held behind it.
    let poisoned_table = naming.table_for("poisoned");
    assert_eq!(offsets(&local.catalog, &poisoned_table).await?, first(5));
    assert_eq!(report.tables[&poisoned_table.to_string()].snapshot_id, None);

    // The operator removes the item: the segment converts again, all lands once.
    sqlx::query("DELETE FROM ledger WHERE segment = ?1")
        .bind(&segment)
        .execute(&database)
        .await?;
    let report = local.run(&TableNaming::default()).await?;
    assert!(report.unreadable.is_empty(), "{report:?}");
    assert_eq!(offsets(&local.catalog, &poisoned_table).await?, first(15));
    assert_eq!(
        offsets(&local.catalog, &naming.table_for("good")).await?,
        first(10)
    );
    Ok(())
}

#[tokio::test]
async fn a_segment_whose_conversions_keep_dying_is_quarantined_and_stops_blocking() -> TestResult {
    let local = Local::open().await?;
    let naming = TableNaming::default();
    let dying = local.put("heavy", 0, &VALUES, 1)?;
    local.put("heavy", 5, &VALUES, 1)?;
    local.put("light", 0, &VALUES, 1)?;
    let segment = dying.object_key(SegmentFile::Data);
    // Three processes began converting it and died (out of memory, a timeout): each
    // left its attempt open.
    for _ in 0..kfs_core::UNFINISHED_ATTEMPTS {
        local.ledger.begin_attempt(&segment, 1).await?;
    }
    // It was small, so first it died in a run: the run's attempt never ended either.
    let run = kfs_core::run_attempt(&segment);
    local.ledger.begin_attempt(&run, 1).await?;
    let report = local.run(&TableNaming::default()).await?;
    assert_eq!(report.quarantined.len(), 1, "{report:?}");
    assert_eq!(report.quarantined[0].0, segment);
    assert!(
        report.quarantined[0].1.contains("never ended"),
        "{}",
        report.quarantined[0].1
    );
    // Everything else converted; the quarantined segment's partition waits at it.
    assert_eq!(
        offsets(&local.catalog, &naming.table_for("light")).await?,
        first(5)
    );
    assert!(
        offsets(&local.catalog, &naming.table_for("heavy"))
            .await?
            .is_empty()
    );
    // The operator retries it (after raising the memory): it converts, once.
    assert!(local.ledger.release_quarantined(&segment).await?);
    let report = local.run(&TableNaming::default()).await?;
    assert!(!report.has_failures(), "{report:?}");
    assert!(report.quarantined.is_empty(), "{report:?}");
    assert_eq!(
        offsets(&local.catalog, &naming.table_for("heavy")).await?,
        first(10)
    );
    Ok(())
}

/// The in-memory source, each file listing answered only after `delay`.
struct SlowListing<'a> {
    inner: &'a kfs_core::MemorySource,
    delay: std::time::Duration,
}

impl SegmentSource for SlowListing<'_> {
    async fn list(&self) -> Result<Vec<kfs_core::SourceObject>, kfs_core::SourceError> {
        self.inner.list().await
    }
    async fn list_dirs(&self, dir: &str) -> Result<Vec<String>, kfs_core::SourceError> {
        self.inner.list_dirs(dir).await
    }
    async fn list_files(
        &self,
        dir: &str,
        start_after: Option<&str>,
    ) -> Result<kfs_core::ObjectStream, kfs_core::SourceError> {
        tokio::time::sleep(self.delay).await;
        self.inner.list_files(dir, start_after).await
    }
    async fn read(&self, key: &str) -> Result<Vec<u8>, kfs_core::SourceError> {
        self.inner.read(key).await
    }
    async fn read_range(
        &self,
        key: &str,
        range: std::ops::Range<u64>,
    ) -> Result<Vec<u8>, kfs_core::SourceError> {
        self.inner.read_range(key, range).await
    }
    async fn open(
        &self,
        key: &str,
        etag: Option<&str>,
    ) -> Result<kfs_core::SegmentStream, kfs_core::SourceError> {
        self.inner.open(key, etag).await
    }
    async fn stat(
        &self,
        key: &str,
    ) -> Result<Option<kfs_core::SourceObject>, kfs_core::SourceError> {
        self.inner.stat(key).await
    }
    fn describe(&self, key: &str) -> String {
        self.inner.describe(key)
    }
}

#[tokio::test]
async fn a_sweep_cut_by_its_deadline_never_commits_a_partly_listed_table() -> TestResult {
    let local = Local::open().await?;
    let naming = TableNaming::default();
    local.put("cut", 0, &VALUES, 1)?;
    local.run(&naming).await?;
    // At the watermark a segment not converted yet, behind it one converted already
    // (by an event): committing the second on a listing without the first would pass
    // offsets 5..9 as a gap.
    local.put("cut", 5, &VALUES, 1)?;
    let later = local.put("cut", 10, &VALUES, 1)?;
    local.convert(&naming, &later).await?;
    // The listing answers after the sweep's deadline: the sweep stops before it
    // looks at any listed segment.
    let slow = SlowListing {
        inner: &local.source,
        delay: std::time::Duration::from_millis(800),
    };
    let config = kfs_core::PipelineConfig {
        naming: naming.clone(),
        deadline: Some(std::time::Instant::now() + std::time::Duration::from_millis(300)),
        ..kfs_core::PipelineConfig::default()
    };
    let report = kfs_core::run_pass(
        &slow,
        &local.catalog,
        &local.swap,
        &local.ledger,
        &config,
        &|_| {},
    )
    .await?;
    let name = naming.table_for("cut");
    assert_eq!(report.deferred_feeds, 1, "{report:?}");
    assert!(
        report.failed_tables[&name.to_string()].contains("listing"),
        "{report:?}"
    );
    assert_eq!(offsets(&local.catalog, &name).await?, first(5));
    // The next pass lists it whole: everything lands, once, no gap.
    let report = local.run(&naming).await?;
    assert!(!report.has_failures(), "{report:?}");
    assert_eq!(offsets(&local.catalog, &name).await?, first(15));
    let table = local.catalog.load_table(&table_ident(&name)).await?;
    assert!(kfs_core::table_progress(&table)?.gaps.is_empty());
    Ok(())
}

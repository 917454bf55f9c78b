//! The committer under concurrency and injected faults, on the real SQL catalog
//! (SQLite) and ledger: two committers racing on one table, a commit whose ledger
//! marking is lost, and a segment that arrives late, after its range was skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::faults::{Faults, Mode, Step, faulty_ledger};
use kfs_core::testing::commit_table;
use kfs_core::testing::open_sql_catalog;
use kfs_core::testing::{TopicTable, ingest_segment};
use kfs_core::{CommitSettings, table_watermarks};
use kfs_core::{Ledger, SqliteLedger};
use kfs_core::{MemorySource, SourceObject};
use kfs_core::{S3Settings, Warehouse};
use kfs_plan::keys::SegmentKey;
use kfs_plan::naming::TableNaming;
use kfs_plan::offsets::{Gap, GapReason};
use kfs_segment::{Compression, DecodeLimits};
use kfs_workload::{encode_records, simple_records};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// A segment of `count` records starting at `base`.
fn segment(base: i64, count: i64) -> Vec<u8> {
    let records = simple_records(base, count, |_| Some(vec![b'v'; 100]));
    match encode_records(records, Compression::Zstd) {
        Ok(s) => s.kfs,
        Err(e) => panic!("encode: {e}"),
    }
}

fn key(base: i64) -> SegmentKey {
    SegmentKey {
        namespace: "ns".into(),
        topic: "orders".into(),
        partition: 0,
        base_offset: base,
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    catalog: kfs_core::testing::SqlCatalog,
    ledger_path: std::path::PathBuf,
    source: MemorySource,
    swap: kfs_core::testing::SqlTableSwap,
}

async fn setup() -> Result<Setup, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let warehouse = Warehouse::Local(dir.path().join("wh"));
    let catalog = open_sql_catalog(
        &dir.path().join("catalog.db"),
        &warehouse,
        &S3Settings::default(),
    )
    .await?;
    let swap = kfs_core::testing::SqlTableSwap::open(
        &dir.path().join("catalog.db"),
        kfs_core::LOCAL_CATALOG_NAME,
    )
    .await?;
    Ok(Setup {
        swap,
        ledger_path: dir.path().join("ledger.db"),
        _dir: dir,
        catalog,
        source: MemorySource::default(),
    })
}

impl Setup {
    /// The catalog with its swap.
    fn access(&self) -> kfs_core::CatalogAccess<'_> {
        kfs_core::CatalogAccess {
            catalog: &self.catalog,
            swap: &self.swap,
        }
    }
}

/// Converts the segments at `bases` (each 10 records) into pending ledger entries.
async fn convert(setup: &Setup, ledger: &impl Ledger, bases: &[i64]) -> TestResult {
    let target = TopicTable::open(
        kfs_core::CatalogAccess {
            catalog: &setup.catalog,
            swap: &setup.swap,
        },
        &TableNaming::default(),
        kfs_core::Feed {
            namespace: "ns",
            topic: "orders",
        },
        &ledger.identity(),
    )
    .await?;
    for &base in bases {
        let key = key(base);
        let object_key = key.to_string();
        setup.source.put(&object_key, segment(base, 10));
        let object = SourceObject {
            key: object_key,
            size: 0,
            etag: None,
            modified_ms: None,
        };
        ingest_segment(
            kfs_core::CatalogAccess {
                catalog: &setup.catalog,
                swap: &setup.swap,
            },
            &setup.source,
            &target,
            ledger,
            &key,
            &object,
            DecodeLimits::default(),
        )
        .await?;
    }
    Ok(())
}

fn listing(bases: &[i64]) -> BTreeMap<i32, BTreeSet<i64>> {
    BTreeMap::from([(0, bases.iter().copied().collect())])
}

async fn committed_records(setup: &Setup) -> Result<(u64, usize), Box<dyn std::error::Error>> {
    use iceberg::Catalog;
    let name = TableNaming::default().table_for("orders");
    let table = setup
        .catalog
        .load_table(&kfs_core::table_ident(&name))
        .await?;
    let mut records = 0;
    let mut paths = BTreeSet::new();
    if let Some(snapshot) = table.metadata().current_snapshot() {
        let list = table.manifest_list_reader(snapshot).load().await?;
        for manifest in list.entries() {
            for entry in manifest.load_manifest(table.file_io()).await?.entries() {
                if entry.is_alive() {
                    records += entry.data_file().record_count();
                    assert!(
                        paths.insert(entry.data_file().file_path().to_owned()),
                        "file registered twice"
                    );
                }
            }
        }
    }
    Ok((records, paths.len()))
}

#[tokio::test]
async fn two_committers_racing_commit_every_segment_once() -> TestResult {
    let setup = setup().await?;
    let ledger_a = SqliteLedger::open(&setup.ledger_path).await?;
    let ledger_b = SqliteLedger::open(&setup.ledger_path).await?;
    let bases: Vec<i64> = (0..12).map(|i| i * 10).collect();
    convert(&setup, &ledger_a, &bases).await?;
    let name = TableNaming::default().table_for("orders");
    let listing = listing(&bases);
    let settings = CommitSettings {
        max_segments: 4,
        ..CommitSettings::default()
    };
    for _ in 0..4 {
        let (a, b) = tokio::join!(
            commit_table(
                setup.access(),
                &ledger_a,
                &name,
                "orders",
                &listing,
                &settings,
                1
            ),
            commit_table(
                setup.access(),
                &ledger_b,
                &name,
                "orders",
                &listing,
                &settings,
                1
            ),
        );
        a?;
        b?;
    }
    assert_eq!(committed_records(&setup).await?, (120, 12));
    assert!(ledger_a.list(Some("pending"), None).await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn a_commit_whose_marking_was_lost_is_recovered_not_repeated() -> TestResult {
    let setup = setup().await?;
    // `mark_committed` fails once, after the commit landed.
    let inner = SqliteLedger::open(&setup.ledger_path).await?;
    let ledger = faulty_ledger(
        &inner,
        Faults::new(Step::MarkCommitted, Mode::ErrorBefore, 1),
        false,
    );
    let bases = [0, 10, 20];
    convert(&setup, &ledger, &bases).await?;
    let name = TableNaming::default().table_for("orders");
    let settings = CommitSettings::default();
    let first = commit_table(
        setup.access(),
        &ledger,
        &name,
        "orders",
        &listing(&bases),
        &settings,
        1,
    )
    .await;
    assert!(first.is_err_and(|e| e.kind().is_retryable()));
    assert_eq!(
        ledger.list(Some("pending"), None).await?.len(),
        3,
        "the commit landed but nothing was marked"
    );
    let second = commit_table(
        setup.access(),
        &ledger,
        &name,
        "orders",
        &listing(&bases),
        &settings,
        2,
    )
    .await?;
    assert_eq!(second.snapshot_id, None, "no second snapshot");
    assert_eq!(second.recovered, 3);
    assert!(ledger.list(Some("pending"), None).await?.is_empty());
    assert_eq!(committed_records(&setup).await?, (30, 3));
    Ok(())
}

#[tokio::test]
async fn gaps_wait_for_listed_segments_and_are_recorded_once_none_is_listed() -> TestResult {
    let setup = setup().await?;
    let ledger = SqliteLedger::open(&setup.ledger_path).await?;
    let name = TableNaming::default().table_for("orders");
    let settings = CommitSettings::default();
    // Segment 10 is listed but not converted yet: segment 20 must wait behind it.
    convert(&setup, &ledger, &[0, 20]).await?;
    let outcome = commit_table(
        setup.access(),
        &ledger,
        &name,
        "orders",
        &listing(&[0, 10, 20]),
        &settings,
        1,
    )
    .await?;
    assert_eq!(
        (outcome.segments, outcome.watermarks.get(&0).copied()),
        (1, Some(10))
    );
    assert_eq!(outcome.holds.len(), 1);
    assert!(outcome.gaps.is_empty());
    // The listing no longer shows segment 10 (its upload failed): the gap is recorded.
    let outcome = commit_table(
        setup.access(),
        &ledger,
        &name,
        "orders",
        &listing(&[0, 20]),
        &settings,
        2,
    )
    .await?;
    assert_eq!(outcome.segments, 1);
    assert_eq!(
        outcome.gaps,
        vec![Gap {
            partition: 0,
            from: 10,
            to: 19,
            reason: GapReason::NoSegment
        }]
    );
    assert_eq!(outcome.watermarks.get(&0), Some(&30));
    // A segment that shows up after its range was recorded as a gap is not slipped in
    // behind the watermark: it is quarantined unconverted, visible to the operator.
    convert(&setup, &ledger, &[10]).await?;
    let outcome = commit_table(
        setup.access(),
        &ledger,
        &name,
        "orders",
        &listing(&[0, 10, 20]),
        &settings,
        3,
    )
    .await?;
    assert_eq!((outcome.snapshot_id, outcome.recovered), (None, 0));
    assert!(ledger.list(Some("pending"), None).await?.is_empty());
    assert_eq!(ledger.list(Some("quarantined"), None).await?.len(), 1);
    assert_eq!(committed_records(&setup).await?, (20, 2));
    use iceberg::Catalog;
    let table = setup
        .catalog
        .load_table(&kfs_core::table_ident(&name))
        .await?;
    assert_eq!(table_watermarks(&table)?, BTreeMap::from([(0, 30)]));
    Ok(())
}

/// A pointer swap that lets an append land just before its first commit: the replace
/// snapshot staged on the old head must lose, be re-staged on the new head, and carry
/// the append's offsets forward.
struct AppendFirst<'a> {
    inner: kfs_core::testing::SqlTableSwap,
    setup: &'a Setup,
    ledger: &'a SqliteLedger,
    fired: AtomicUsize,
}

#[async_trait::async_trait]
impl kfs_core::TableSwap for AppendFirst<'_> {
    async fn commit(
        &self,
        table: &iceberg::table::Table,
        requirements: Vec<iceberg::TableRequirement>,
        updates: Vec<iceberg::TableUpdate>,
    ) -> iceberg::Result<iceberg::table::Table> {
        if self.fired.fetch_add(1, Ordering::SeqCst) == 0 {
            let name = TableNaming::default().table_for("orders");
            commit_table(
                self.setup.access(),
                self.ledger,
                &name,
                "orders",
                &listing(&(0..8).map(|i| i * 10).collect::<Vec<_>>()),
                &CommitSettings::default(),
                5,
            )
            .await
            .map_err(|e| iceberg::Error::new(iceberg::ErrorKind::Unexpected, e.to_string()))?;
        }
        self.inner.commit(table, requirements, updates).await
    }
}

#[tokio::test]
async fn a_compaction_racing_an_append_restages_and_loses_nothing() -> TestResult {
    use iceberg::Catalog;
    let setup = setup().await?;
    let ledger = SqliteLedger::open(&setup.ledger_path).await?;
    let name = TableNaming::default().table_for("orders");
    let ident = kfs_core::table_ident(&name);
    let first: Vec<i64> = (0..6).map(|i| i * 10).collect();
    convert(&setup, &ledger, &first).await?;
    commit_table(
        setup.access(),
        &ledger,
        &name,
        "orders",
        &listing(&first),
        &CommitSettings::default(),
        1,
    )
    .await?;
    assert_eq!(committed_records(&setup).await?, (60, 6));
    convert(&setup, &ledger, &[60, 70]).await?;
    let swap = AppendFirst {
        inner: kfs_core::testing::SqlTableSwap::open(
            &setup._dir.path().join("catalog.db"),
            kfs_core::LOCAL_CATALOG_NAME,
        )
        .await?,
        setup: &setup,
        ledger: &ledger,
        fired: AtomicUsize::new(0),
    };
    let report = kfs_core::compact_table(
        &setup.catalog,
        &swap,
        &ident,
        Some(kfs_plan::compaction::CompactionPolicy::for_target(1 << 20)),
        None,
        10,
    )
    .await?;
    // The first swap lost to the append; the re-staged one won.
    assert!(swap.fired.load(Ordering::SeqCst) >= 2);
    // Round one merged the 6 files; round two merged the result with the 2 appended.
    assert_eq!(report.files_removed, 6 + 3);
    assert_eq!(report.stale_groups, 0);
    assert_eq!(committed_records(&setup).await?, (80, 1));
    let table = setup.catalog.load_table(&ident).await?;
    assert_eq!(table_watermarks(&table)?, BTreeMap::from([(0, 80)]));
    let current = table.metadata().current_snapshot().ok_or("no snapshot")?;
    assert_eq!(
        current.summary().operation,
        iceberg::spec::Operation::Replace
    );
    // Expiry keeps what the table reads and removes what only old snapshots read.
    let expiry = kfs_core::expire_snapshots(
        &setup.catalog,
        &ident,
        &kfs_plan::compaction::ExpiryRule::older_than(i64::MAX, 1),
        false,
    )
    .await?;
    assert_eq!(expiry.retained, 1);
    assert!(expiry.deleted_files.iter().any(|f| f.ends_with(".parquet")));
    assert_eq!(committed_records(&setup).await?, (80, 1));
    Ok(())
}

/// An insert retried by the ledger's client after its first attempt landed finds the
/// entry it wrote: the converter keeps that entry's files (it deletes only files a
/// *different* winner's entry does not name), and they commit.
#[tokio::test]
async fn a_retried_insert_that_finds_its_own_entry_keeps_its_files() -> TestResult {
    let setup = setup().await?;
    let inner = SqliteLedger::open(&setup.ledger_path).await?;
    let ledger = faulty_ledger(&inner, Faults::none(), true);
    convert(&setup, &ledger, &[0, 10]).await?;
    for entry in ledger.list(Some("pending"), None).await? {
        for path in kfs_core::testing::converted_paths(&entry) {
            let local = path.strip_prefix("file://").unwrap_or(&path);
            assert!(std::path::Path::new(local).exists(), "{path} was deleted");
        }
    }
    let name = TableNaming::default().table_for("orders");
    commit_table(
        setup.access(),
        &ledger,
        &name,
        "orders",
        &listing(&[0, 10]),
        &CommitSettings::default(),
        1,
    )
    .await?;
    assert_eq!(committed_records(&setup).await?, (20, 2));
    Ok(())
}

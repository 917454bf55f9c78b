//! Data safety outside the crash model, one test per finding of the safety review:
//! feeds that collide on one table (topics that sanitize alike, a many-to-one rule,
//! one topic under two namespaces, a table someone else owns), orphan cleanup racing a
//! commit, post-commit deletes of an attempt that lost to another layout, and offsets
//! at the edge of 64 bits. Each runs on the real SQL catalog (SQLite) and ledger.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use futures::future::BoxFuture;
use iceberg::table::Table;
use iceberg::{Catalog, TableCommit, TableIdent};
use kfs_core::testing::{
    Probe, Probed, SqlCatalog, TopicTable, commit_table, ingest_segment, open_sql_catalog,
};
use kfs_core::{
    CatalogOverrides, CommitError, CommitOutcome, CommitSettings, EntryState, Feed,
    LEDGER_PROPERTY, Ledger, LedgerError, MaintenanceError, MaintenancePolicy, OrphanRule,
    Overridden, S3Settings, SOURCE_NAMESPACE_PROPERTY, SourceObject, SqliteLedger, Warehouse,
    maintain_table, now_ms, remove_orphans, table_ident,
};
use kfs_plan::keys::SegmentFile;
use kfs_plan::naming::{TableName, TableNaming, TablePattern};
use kfs_segment::DecodeLimits;

use crate::local::{BoxError, Local, offsets};

type TestResult = Result<(), BoxError>;

const VALUES: [&str; 5] = ["a", "b", "c", "d", "e"];

fn name(text: &str) -> TableName {
    TableName::parse(text).unwrap_or_else(|| panic!("{text}"))
}

/// The warehouse of `local`, where its maintenance may list and delete.
fn storage(local: &Local) -> kfs_core::MaintenanceStorage {
    kfs_core::MaintenanceStorage {
        s3: S3Settings::default(),
        warehouse: Warehouse::Local(local.dir.path().join("wh")),
    }
}

/// Every offset of `table` is there exactly once: `(partition 0, 0..count)`.
async fn exactly_once(catalog: &dyn Catalog, table: &TableName, count: i64) -> TestResult {
    let found = offsets(catalog, table).await?;
    let expected: BTreeMap<(i32, i64), usize> = (0..count).map(|o| ((0, o), 1)).collect();
    assert_eq!(found, expected, "{table}");
    Ok(())
}

/// Two segments (offsets 0..10) of `topic` under `namespace`.
fn two_segments(local: &Local, namespace: &str, topic: &str) -> TestResult {
    local.put_in(namespace, topic, 0, &VALUES, 1)?;
    local.put_in(namespace, topic, 5, &VALUES, 1)?;
    Ok(())
}

/// Runs a pass with `naming`; checks that exactly one feed was refused, that its
/// reason names `both`, and that nothing was quarantined.
async fn refused_once(local: &Local, naming: &TableNaming, both: &[&str]) -> TestResult {
    let report = local.run(naming).await?;
    assert!(report.quarantined.is_empty(), "{:?}", report.quarantined);
    assert_eq!(report.refused.len(), 1, "{:?}", report.refused);
    let reason = report.refused.values().next().cloned().unwrap_or_default();
    for part in both.iter().copied() {
        assert!(reason.contains(part), "{part} not named: {reason}");
    }
    // Nothing of the refused feed was converted: no ledger entry, no file.
    let refused_feed = report.refused.keys().next().cloned().unwrap_or_default();
    for entry in local.ledger.list(None, None).await? {
        assert!(
            !entry.segment.starts_with(&format!("{refused_feed}/")),
            "{} of the refused feed is in the ledger",
            entry.segment
        );
    }
    Ok(())
}

#[tokio::test]
async fn topics_that_sanitize_alike_are_refused_with_both_named_then_land_once_each() -> TestResult
{
    let local = Local::open().await?;
    two_segments(&local, "ns", "Orders_0")?;
    two_segments(&local, "ns", "orders_0")?;
    let mut naming = TableNaming::default();
    refused_once(&local, &naming, &["\"Orders_0\"", "\"orders_0\""]).await?;
    // The owner landed exactly once; a second pass changes nothing.
    let shared = name("kafscale.orders_0");
    exactly_once(&local.catalog, &shared, 10).await?;
    refused_once(&local, &naming, &["\"Orders_0\"", "\"orders_0\""]).await?;
    exactly_once(&local.catalog, &shared, 10).await?;
    // The operator gives the newcomer its own table: every record lands once.
    let table = local.catalog.load_table(&table_ident(&shared)).await?;
    let owner = table.metadata().properties().get("kfs.topic").cloned();
    let newcomer = if owner.as_deref() == Some("Orders_0") {
        "orders_0"
    } else {
        "Orders_0"
    };
    naming
        .overrides
        .insert(newcomer.into(), name("kafscale.orders_0_second"));
    let report = local.run(&naming).await?;
    assert!(report.refused.is_empty(), "{:?}", report.refused);
    exactly_once(&local.catalog, &shared, 10).await?;
    exactly_once(&local.catalog, &name("kafscale.orders_0_second"), 10).await?;
    Ok(())
}

#[tokio::test]
async fn a_many_to_one_rule_is_refused_with_both_topics_named_then_split() -> TestResult {
    let local = Local::open().await?;
    two_segments(&local, "ns", "orders-eu")?;
    two_segments(&local, "ns", "orders-us")?;
    let mut naming = TableNaming {
        patterns: vec![TablePattern::new("orders-(eu|us)", "sales.orders")?],
        ..TableNaming::default()
    };
    refused_once(&local, &naming, &["\"orders-eu\"", "\"orders-us\""]).await?;
    exactly_once(&local.catalog, &name("sales.orders"), 10).await?;
    // Named to one table explicitly: refused before anything runs.
    let mut explicit = TableNaming::default();
    explicit
        .overrides
        .insert("orders-eu".into(), name("sales.orders"));
    explicit
        .overrides
        .insert("orders-us".into(), name("sales.orders"));
    let refused = local.run(&explicit).await.err().map(|e| e.to_string());
    assert!(
        refused
            .as_deref()
            .is_some_and(|e| e.contains("orders-eu") && e.contains("orders-us")),
        "{refused:?}"
    );
    // One table per region: the newcomer lands in its own, the owner stays put.
    naming.patterns = vec![TablePattern::new("orders-(eu|us)", "sales.orders_$1")?];
    let table = local
        .catalog
        .load_table(&table_ident(&name("sales.orders")))
        .await?;
    let owner = table.metadata().properties().get("kfs.topic").cloned();
    let report = local.run(&naming).await?;
    assert!(report.refused.is_empty(), "{:?}", report.refused);
    // The newcomer lands in its own table; the owner's records stay where they were
    // committed (its segments are in the ledger: moving them is the operator's call).
    let newcomer = match owner.as_deref() {
        Some("orders-eu") => "us",
        _ => "eu",
    };
    exactly_once(
        &local.catalog,
        &name(&format!("sales.orders_{newcomer}")),
        10,
    )
    .await?;
    exactly_once(&local.catalog, &name("sales.orders"), 10).await?;
    Ok(())
}

#[tokio::test]
async fn one_topic_under_two_namespaces_is_refused_with_both_named() -> TestResult {
    let local = Local::open().await?;
    two_segments(&local, "east", "orders")?;
    two_segments(&local, "west", "orders")?;
    refused_once(
        &local,
        &TableNaming::default(),
        &["\"east\"", "\"west\"", "orders"],
    )
    .await?;
    let table = local
        .catalog
        .load_table(&table_ident(&name("kafscale.orders")))
        .await?;
    let properties = table.metadata().properties();
    assert!(properties.contains_key(SOURCE_NAMESPACE_PROPERTY));
    assert_eq!(
        properties.get(LEDGER_PROPERTY),
        Some(&local.ledger.identity())
    );
    exactly_once(&local.catalog, &name("kafscale.orders"), 10).await?;
    Ok(())
}

#[tokio::test]
async fn a_table_kfs_iceberg_did_not_create_is_never_written_compacted_or_cleaned() -> TestResult {
    use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
    let local = Local::open().await?;
    let namespace = iceberg::NamespaceIdent::new("kafscale".into());
    local
        .catalog
        .create_namespace(&namespace, Default::default())
        .await?;
    let schema = Schema::builder()
        .with_fields(vec![
            NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
        ])
        .build()?;
    local
        .catalog
        .create_table(
            &namespace,
            iceberg::TableCreation::builder()
                .name("orders".into())
                .schema(schema)
                .build(),
        )
        .await?;
    two_segments(&local, "ns", "orders")?;
    refused_once(
        &local,
        &TableNaming::default(),
        &["kafscale.orders", "orders"],
    )
    .await?;
    let ident = table_ident(&name("kafscale.orders"));
    let table = local.catalog.load_table(&ident).await?;
    assert!(table.metadata().current_snapshot().is_none());
    assert!(!table.metadata().properties().contains_key("kfs.topic"));
    let maintained = maintain_table(
        &local.catalog,
        &local.swap,
        &local.ledger,
        &storage(&local),
        &ident,
        &MaintenancePolicy::default(),
        None,
        now_ms(),
    )
    .await;
    assert!(
        matches!(maintained, Err(MaintenanceError::Refused { .. })),
        "{maintained:?}"
    );
    Ok(())
}

/// Converts `bases` of topic `orders` (5 records each) into pending entries.
async fn convert(local: &Local, bases: &[i64]) -> TestResult {
    let feed = Feed {
        namespace: "ns",
        topic: "orders",
    };
    let target = TopicTable::open(
        local.access(),
        &TableNaming::default(),
        feed,
        &local.ledger.identity(),
    )
    .await?;
    for &base in bases {
        let key = local.put("orders", base, &VALUES, 1)?;
        let object = SourceObject {
            key: key.object_key(SegmentFile::Data),
            size: 0,
            etag: None,
            modified_ms: None,
        };
        ingest_segment(
            local.access(),
            &local.source,
            &target,
            &local.ledger,
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

/// Commits the two segments `convert(local, &[0, 5])` converted, merging their files
/// into one or not.
async fn commit_both(
    catalog: &dyn Catalog,
    swap: &dyn kfs_core::TableSwap,
    ledger: &impl Ledger,
    table: &TableName,
    coalesce: bool,
) -> Result<CommitOutcome, CommitError> {
    let settings = CommitSettings {
        coalesce,
        ..CommitSettings::default()
    };
    commit_table(
        kfs_core::CatalogAccess { catalog, swap },
        ledger,
        table,
        "orders",
        &listing(&[0, 5]),
        &settings,
        now_ms(),
    )
    .await
}

/// Every data file the table's current snapshot references exists.
async fn referenced_files_exist(table: &Table) -> TestResult {
    for entry in kfs_core::live_entries(table).await? {
        let path = entry.data_file().file_path();
        assert!(
            table.file_io().exists(path).await?,
            "{path} is referenced but gone"
        );
    }
    Ok(())
}

#[tokio::test]
async fn another_feeds_pending_files_are_never_committed_or_marked() -> TestResult {
    let local = Local::open().await?;
    convert(&local, &[0]).await?;
    // What the converter did before feeds were checked: a segment of `Orders` (which
    // sanitizes to the same table) converted into `orders`'s table.
    let foreign = local.put("Orders", 5, &VALUES, 1)?;
    let target = TopicTable::open(
        local.access(),
        &TableNaming::default(),
        Feed {
            namespace: "ns",
            topic: "orders",
        },
        &local.ledger.identity(),
    )
    .await?;
    let object = SourceObject {
        key: foreign.object_key(SegmentFile::Data),
        size: 0,
        etag: None,
        modified_ms: None,
    };
    ingest_segment(
        local.access(),
        &local.source,
        &target,
        &local.ledger,
        &foreign,
        &object,
        DecodeLimits::default(),
    )
    .await?;
    let table = name("kafscale.orders");
    let outcome = commit_table(
        local.access(),
        &local.ledger,
        &table,
        "orders",
        &listing(&[0]),
        &CommitSettings::default(),
        now_ms(),
    )
    .await?;
    assert_eq!(outcome.segments, 1);
    let entry = local
        .ledger
        .get(&object.key)
        .await?
        .ok_or("foreign entry gone")?;
    assert_eq!(entry.state, EntryState::Pending, "{entry:?}");
    for path in kfs_core::testing::converted_paths(&entry) {
        assert!(
            std::path::Path::new(path.trim_start_matches("file://")).exists(),
            "{path}"
        );
    }
    exactly_once(&local.catalog, &table, 5).await?;
    Ok(())
}

/// Lets a commit land right before the ledger answers a listing: what a committer
/// running beside orphan cleanup does.
struct CommitWhileListing<'a> {
    commit: Mutex<Option<BoxFuture<'a, ()>>>,
}

impl Probe<SqliteLedger> for CommitWhileListing<'_> {
    async fn scan(
        &self,
        inner: &SqliteLedger,
        state: Option<&str>,
        table: Option<&str>,
    ) -> Result<kfs_core::Listing, LedgerError> {
        let commit = self.commit.lock().ok().and_then(|mut c| c.take());
        if let Some(commit) = commit {
            commit.await;
        }
        inner.scan(state, table).await
    }
}

#[tokio::test]
async fn orphan_cleanup_never_deletes_files_a_commit_lands_meanwhile() -> TestResult {
    let local = Local::open().await?;
    convert(&local, &[0, 5]).await?;
    let table = name("kafscale.orders");
    let committer = SqliteLedger::open(&local.dir.path().join("ledger.db")).await?;
    let ledger = Probed {
        inner: &local.ledger,
        probe: CommitWhileListing {
            commit: Mutex::new(Some(Box::pin(async {
                let outcome =
                    commit_both(&local.catalog, &local.swap, &committer, &table, false).await;
                assert!(outcome.is_ok_and(|o| o.segments == 2));
            }))),
        },
    };
    let report = remove_orphans(
        &local.catalog,
        &ledger,
        &table_ident(&table),
        &storage(&local),
        &OrphanRule {
            older_than: std::time::Duration::ZERO,
            now_ms: now_ms() + 60_000,
            force: true,
            dry_run: false,
        },
    )
    .await?;
    let loaded = local.catalog.load_table(&table_ident(&table)).await?;
    referenced_files_exist(&loaded).await?;
    exactly_once(&local.catalog, &table, 10).await?;
    assert!(report.orphans.is_empty(), "{:?}", report.orphans);
    Ok(())
}

#[tokio::test]
async fn orphan_cleanup_refuses_young_ages_and_ledgers_that_cannot_see_the_pending_files()
-> TestResult {
    let local = Local::open().await?;
    convert(&local, &[0]).await?;
    let ident = table_ident(&name("kafscale.orders"));
    let rule = |older_than: u64, force: bool| OrphanRule {
        older_than: std::time::Duration::from_secs(older_than),
        now_ms: now_ms(),
        force,
        dry_run: true,
    };
    let s3 = storage(&local);
    let young = remove_orphans(&local.catalog, &local.ledger, &ident, &s3, &rule(0, false)).await;
    assert!(
        young.as_ref().is_err_and(
            |e| e.kind() == kfs_core::ErrorKind::Config && e.to_string().contains("floor")
        ),
        "{young:?}"
    );
    // A ledger other than the one that protects the table (a fresh local ledger
    // against a deployed table) sees none of its pending files: refused.
    let other = SqliteLedger::open(&local.dir.path().join("other.db")).await?;
    let blind = remove_orphans(&local.catalog, &other, &ident, &s3, &rule(7200, false)).await;
    let text = blind
        .as_ref()
        .err()
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(
        text.contains(&local.ledger.identity()) && text.contains(&other.identity()),
        "{blind:?}"
    );
    remove_orphans(
        &local.catalog,
        &local.ledger,
        &ident,
        &s3,
        &rule(7200, false),
    )
    .await?;
    Ok(())
}

/// A catalog that lets another process commit right before its first commit goes
/// through (planned on the table as it was before).
struct CommitFirst<'a> {
    inner: &'a SqlCatalog,
    other: Mutex<Option<BoxFuture<'a, ()>>>,
}

impl std::fmt::Debug for CommitFirst<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CommitFirst")
    }
}

#[async_trait::async_trait]
impl CatalogOverrides for CommitFirst<'_> {
    fn inner(&self) -> &dyn Catalog {
        self.inner
    }
    async fn update_table(&self, commit: TableCommit) -> iceberg::Result<Table> {
        let other = self.other.lock().ok().and_then(|mut o| o.take());
        if let Some(other) = other {
            other.await;
        }
        self.inner.update_table(commit).await
    }
    async fn load_table(&self, table: &TableIdent) -> iceberg::Result<Table> {
        self.inner.load_table(table).await
    }
}

#[tokio::test]
async fn an_attempt_that_lost_to_another_layout_deletes_nothing_the_winner_references() -> TestResult
{
    let local = Local::open().await?;
    convert(&local, &[0, 5]).await?;
    let table = name("kafscale.orders");
    let dir = local.dir.path();
    let winner_catalog = open_sql_catalog(
        &dir.join("catalog.db"),
        &Warehouse::Local(dir.join("wh")),
        &S3Settings::default(),
    )
    .await?;
    let winner_ledger = SqliteLedger::open(&dir.join("ledger.db")).await?;
    // The winner commits the two files as they are; the loser planned the same
    // commit (same commit id) but merges them into one.
    let racing = Overridden(CommitFirst {
        inner: &local.catalog,
        other: Mutex::new(Some(Box::pin(async {
            let outcome =
                commit_both(&winner_catalog, &local.swap, &winner_ledger, &table, false).await;
            assert!(outcome.is_ok_and(|o| o.segments == 2 && o.coalesced == 0));
        }))),
    });
    let loser = commit_both(&racing, &local.swap, &local.ledger, &table, true).await?;
    assert!(loser.snapshot_id.is_some());
    let loaded = local.catalog.load_table(&table_ident(&table)).await?;
    assert_eq!(loaded.metadata().snapshots().count(), 1);
    referenced_files_exist(&loaded).await?;
    exactly_once(&local.catalog, &table, 10).await?;
    Ok(())
}

#[tokio::test]
async fn a_segment_ending_at_the_largest_offset_is_quarantined_not_wrapped() -> TestResult {
    let local = Local::open().await?;
    let base = i64::MAX - 4;
    local.put("edge", base, &VALUES, 1)?;
    let report = local.run(&TableNaming::default()).await?;
    assert_eq!(report.quarantined.len(), 1, "{report:?}");
    let (_, error) = &report.quarantined[0];
    assert!(error.contains("64 bits"), "{error}");
    let loaded = local
        .catalog
        .load_table(&table_ident(&name("kafscale.edge")))
        .await?;
    let watermarks = kfs_core::table_watermarks(&loaded)?;
    assert!(watermarks.values().all(|&next| next >= 0), "{watermarks:?}");
    Ok(())
}

#[tokio::test]
async fn a_table_from_before_feeds_were_recorded_keeps_working_and_records_its_ledger() -> TestResult
{
    let local = Local::open().await?;
    let table = name("kafscale.orders");
    // Created as earlier versions did: the topic recorded, no namespace, no ledger.
    kfs_core::testing::ensure_topic_table(&local.catalog, &table, "orders", &Default::default())
        .await?;
    two_segments(&local, "ns", "orders")?;
    let report = local.run(&TableNaming::default()).await?;
    assert!(report.refused.is_empty(), "{:?}", report.refused);
    exactly_once(&local.catalog, &table, 10).await?;
    let loaded = local.catalog.load_table(&table_ident(&table)).await?;
    let properties = loaded.metadata().properties();
    assert_eq!(
        properties.get(LEDGER_PROPERTY),
        Some(&local.ledger.identity())
    );
    assert!(!properties.contains_key(SOURCE_NAMESPACE_PROPERTY));
    Ok(())
}

#[tokio::test]
async fn a_topic_named_like_a_dead_letter_table_is_refused() -> TestResult {
    let local = Local::open().await?;
    two_segments(&local, "ns", "orders__dlq")?;
    refused_once(&local, &TableNaming::default(), &["orders__dlq", "__dlq"]).await?;
    let exists = local
        .catalog
        .table_exists(&table_ident(&name("kafscale.orders__dlq")))
        .await?;
    assert!(!exists, "the reserved table was created");
    Ok(())
}

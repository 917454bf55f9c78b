//! Topic tables in the Glue Data Catalog (moto): created with their timestamptz column,
//! appended to by the committer with the offset map in every snapshot, and committed to
//! again on top of the previous version.

use std::collections::{BTreeMap, BTreeSet};

use kfs_core::SourceObject;
use kfs_core::testing::commit_table;
use kfs_core::testing::ensure_topic_table;
use kfs_core::testing::{TopicTable, ingest_segment};
use kfs_core::{CommitSettings, table_progress, table_watermarks};
use kfs_plan::keys::SegmentKey;
use kfs_plan::naming::TableNaming;
use kfs_segment::DecodeLimits;
use kfs_testkit::{LocalStack, sample_segment, table_contents};

#[tokio::test(flavor = "multi_thread")]
async fn glue_tables_take_commits_with_the_offset_map() {
    let stack = LocalStack::start();
    let handle = stack.glue_catalog_handle().await;
    let catalog = handle.catalog.clone();
    let ledger = stack.ledger();
    let source = stack.source();
    let name = TableNaming::default().table_for("orders");
    let mut listing = BTreeMap::from([(0, BTreeSet::new())]);
    for (round, base) in [0i64, 10].into_iter().enumerate() {
        let key = SegmentKey {
            namespace: "default".into(),
            topic: "orders".into(),
            partition: 0,
            base_offset: base,
        };
        let segment = sample_segment(base, 10, b'g');
        let object_key = key.to_string();
        let index_key = object_key.replace(".kfs", ".index");
        stack.put(&[(&object_key, &segment.kfs), (&index_key, &segment.index)]);
        let table = ensure_topic_table(catalog.as_ref(), &name, "orders", &Default::default())
            .await
            .unwrap_or_else(|e| panic!("table: {e}"));
        let target = TopicTable {
            name: name.clone(),
            progress: table_progress(&table).unwrap_or_else(|e| panic!("progress: {e}")),
            table,
            lfs: Default::default(),
            keys: Default::default(),
            schemas: None,
        };
        let object = SourceObject {
            key: object_key,
            size: segment.kfs.len() as u64,
            etag: None,
            modified_ms: None,
        };
        ingest_segment(
            handle.access(),
            &source,
            &target,
            &ledger,
            &key,
            &object,
            DecodeLimits::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("ingest: {e}"));
        listing.entry(0).or_default().insert(base);
        let outcome = commit_table(
            handle.access(),
            &ledger,
            &name,
            "orders",
            &listing,
            &CommitSettings::default(),
            1,
        )
        .await
        .unwrap_or_else(|e| panic!("commit {round}: {e}"));
        assert!(outcome.snapshot_id.is_some(), "round {round}: {outcome:?}");
    }
    assert_eq!(
        table_contents(catalog.as_ref(), "kafscale.orders").await,
        (20, 2)
    );
    let ident = kfs_core::table_ident(&name);
    let table = catalog
        .load_table(&ident)
        .await
        .unwrap_or_else(|e| panic!("load: {e}"));
    assert_eq!(
        table_watermarks(&table).ok(),
        Some(BTreeMap::from([(0, 20)]))
    );
    assert_eq!(table.metadata().snapshots().count(), 2);
}

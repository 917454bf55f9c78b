//! The etcd cross-check end to end, against a real etcd and moto: a segment etcd has
//! not confirmed yet waits (and its partition behind it); once confirmed it commits; a
//! `next_offset` that falls below the table's watermark (topic recreated, etcd reset)
//! stops the partition with an alarm metric and loses nothing; an unreachable etcd
//! holds commits.

use std::time::{Duration, Instant};

use kfs_committer::{Committer, handle};
use kfs_core::Ledger;
use kfs_core::PipelineConfig;
use kfs_plan::crosscheck::CrossCheckPolicy;
use kfs_testkit::{Etcd, LocalStack, sample_segment, table_contents};
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn etcd_confirms_holds_and_stops() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let stack = LocalStack::start();
    let etcd = Etcd::start();
    etcd.put(
        "/kafscale/metadata/snapshot",
        r#"{"Brokers":[],"Topics":[{"Topic":"orders","Partitions":[{"Partition":0}]}]}"#,
    );
    etcd.put("/kafscale/topics/orders/partitions/0/next_offset", "10");
    let put = |stem: &str, segment: &kfs_segment::EncodedSegment| {
        stack.put(&[
            (&format!("{stem}.kfs"), &segment.kfs),
            (&format!("{stem}.index"), &segment.index),
        ]);
    };
    put(
        "default/orders/0/segment-00000000000000000000",
        &sample_segment(0, 10, b'a'),
    );
    put(
        "default/orders/0/segment-00000000000000000010",
        &sample_segment(10, 10, b'b'),
    );
    let catalog = stack.catalog_handle().await;
    let committer = Committer {
        source: stack.source(),
        catalog: catalog.clone(),
        ledger: stack.ledger(),
        config: PipelineConfig {
            // A long grace: unconfirmed segments wait for etcd during the whole test.
            crosscheck: CrossCheckPolicy {
                grace_ms: 3_600_000,
                ..CrossCheckPolicy::default()
            },
            table_concurrency: 2,
            ..PipelineConfig::default()
        },
        etcd_endpoints: vec![etcd.endpoint.clone()],
        maintenance: None,
    };
    let deadline = || Instant::now() + Duration::from_secs(300);

    // etcd says 10: only the first segment is confirmed.
    let tick = handle(&committer, &json!({}), deadline())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        tick["tables"]["kafscale.orders"]["watermarks"],
        json!({"0": 10}),
        "{tick}"
    );
    assert_eq!(
        tick["tables"]["kafscale.orders"]["etcd_held"]
            .as_array()
            .map(Vec::len),
        Some(1),
        "{tick}"
    );
    assert_eq!(
        table_contents(catalog.catalog.as_ref(), "kafscale.orders").await,
        (10, 1)
    );

    // The broker catches up.
    etcd.put("/kafscale/topics/orders/partitions/0/next_offset", "20");
    let tick = handle(&committer, &json!({}), deadline())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        tick["tables"]["kafscale.orders"]["watermarks"],
        json!({"0": 20}),
        "{tick}"
    );
    assert_eq!(
        table_contents(catalog.catalog.as_ref(), "kafscale.orders").await,
        (20, 2)
    );

    // The topic is recreated: etcd restarts at 5, below the watermark. A new segment
    // appears; the partition stops, nothing is dropped or re-ingested.
    etcd.put("/kafscale/topics/orders/partitions/0/next_offset", "5");
    put(
        "default/orders/0/segment-00000000000000000020",
        &sample_segment(20, 10, b'c'),
    );
    let tick = handle(&committer, &json!({}), deadline())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        tick["tables"]["kafscale.orders"]["stopped_partitions"],
        json!([[0, 5, 20]]),
        "{tick}"
    );
    assert_eq!(
        table_contents(catalog.catalog.as_ref(), "kafscale.orders").await,
        (20, 2)
    );
    assert_eq!(
        committer
            .ledger
            .list(Some("pending"), None)
            .await
            .unwrap_or_default()
            .len(),
        1
    );

    // etcd goes away: commits are held, not made blind.
    drop(etcd);
    let tick = handle(&committer, &json!({}), deadline())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        tick["tables"]["kafscale.orders"]["snapshot_id"],
        json!(null),
        "{tick}"
    );
    assert_eq!(
        table_contents(catalog.catalog.as_ref(), "kafscale.orders").await,
        (20, 2)
    );
}

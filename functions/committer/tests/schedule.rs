//! The committer's handler on the sample schedule event, against moto (S3 and the
//! DynamoDB ledger): segments announced by events and segments whose events were
//! dropped (found by the sweep) all land exactly once, one snapshot per table; a gap no
//! segment covers is recorded; a second tick adds nothing; a tick out of time stops
//! cleanly and leaves the work for the next one.

use std::time::{Duration, Instant};

use kfs_committer::{Committer, handle};
use kfs_core::ledger::Ledger;
use kfs_core::pipeline::PipelineConfig;
use kfs_testkit::{LocalStack, sample_segment, table_contents, workspace_root};
use serde_json::{Value, json};

fn schedule() -> Value {
    let path = workspace_root().join("events/schedule.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_default())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_schedule_commits_announced_and_swept_segments_exactly_once() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let stack = LocalStack::start();
    let segments = [
        (
            "default/orders/0/segment-00000000000000000000",
            sample_segment(0, 10, b'a'),
        ),
        (
            "default/orders/0/segment-00000000000000000010",
            sample_segment(10, 10, b'b'),
        ),
        // Offsets 20..24 were lost in a failed upload: a gap.
        (
            "default/orders/0/segment-00000000000000000025",
            sample_segment(25, 10, b'c'),
        ),
        (
            "default/orders/1/segment-00000000000000000000",
            sample_segment(0, 5, b'd'),
        ),
        (
            "default/clicks/0/segment-00000000000000000000",
            sample_segment(0, 7, b'e'),
        ),
    ];
    let mut objects = Vec::new();
    for (stem, segment) in &segments {
        objects.push((format!("{stem}.kfs"), segment.kfs.clone()));
        objects.push((format!("{stem}.index"), segment.index.clone()));
    }
    let refs: Vec<(&str, &[u8])> = objects
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_slice()))
        .collect();
    stack.put(&refs);
    let catalog = stack.catalog().await;
    // Two segments arrive through the converter; the events of the others were dropped.
    let converter = stack.converter(catalog.clone(), 2);
    let announced = json!({"Records": [
        {"eventSource": "aws:s3", "eventName": "ObjectCreated:Put", "s3": {"bucket": {"name": "kafscale-segments"}, "object": {"key": "default/orders/0/segment-00000000000000000010.index"}}},
        {"eventSource": "aws:s3", "eventName": "ObjectCreated:Put", "s3": {"bucket": {"name": "kafscale-segments"}, "object": {"key": "default/clicks/0/segment-00000000000000000000.kfs"}}}
    ]});
    let response = kfs_converter::handle(&converter, &announced)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(response["converted"], 2, "{response}");

    let committer = Committer {
        source: stack.source(),
        catalog: catalog.clone(),
        ledger: stack.ledger(),
        config: PipelineConfig {
            max_conversions: Some(100),
            table_concurrency: 4,
            ..PipelineConfig::default()
        },
        etcd_endpoints: Vec::new(),
    };
    // Out of time: nothing is done, nothing is lost.
    let late = handle(&committer, &schedule(), Instant::now())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(late["swept"], 0, "{late}");
    assert_eq!(
        stack
            .ledger()
            .list(Some("pending"), None)
            .await
            .unwrap_or_default()
            .len(),
        2
    );

    let deadline = Instant::now() + Duration::from_secs(300);
    let tick = handle(&committer, &schedule(), deadline)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tick["swept"], 3, "{tick}");
    assert_eq!(tick["failed_tables"], json!({}), "{tick}");
    assert_eq!(
        tick["tables"]["kafscale.orders"]["watermarks"],
        json!({"0": 35, "1": 5}),
        "{tick}"
    );
    assert_eq!(
        table_contents(catalog.as_ref(), "kafscale.orders").await,
        (35, 4)
    );
    assert_eq!(
        table_contents(catalog.as_ref(), "kafscale.clicks").await,
        (7, 1)
    );
    assert!(
        stack
            .ledger()
            .list(Some("pending"), None)
            .await
            .unwrap_or_default()
            .is_empty()
    );

    let again = handle(&committer, &schedule(), deadline)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again["swept"], 0, "{again}");
    assert_eq!(again["tables"], json!({}), "{again}");
    assert_eq!(
        table_contents(catalog.as_ref(), "kafscale.orders").await,
        (35, 4)
    );
}

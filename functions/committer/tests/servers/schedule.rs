//! The committer's handler on the sample schedule event, against moto (S3 and the
//! DynamoDB ledger): segments announced by events and segments whose events were
//! dropped (found by the sweep) all land exactly once, one snapshot per table; a gap no
//! segment covers is recorded; a second tick adds nothing; a tick out of time stops
//! cleanly and leaves the work for the next one.

use std::time::{Duration, Instant};

use kfs_committer::{Committer, handle};
use kfs_core::Ledger;
use kfs_core::PipelineConfig;
use kfs_testkit::{LocalStack, sample_segment, table_contents, workspace_root};
use serde_json::{Value, json};

fn schedule() -> Value {
    event("schedule.json")
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
    let catalog = stack.catalog_handle().await;
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
        etcd: kfs_etcd::EtcdConnection::plain(Vec::new()),
        maintenance: None,
        tick_log: None,
        pacing: None,
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
        table_contents(catalog.catalog.as_ref(), "kafscale.orders").await,
        (35, 4)
    );
    assert_eq!(
        table_contents(catalog.catalog.as_ref(), "kafscale.clicks").await,
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
        table_contents(catalog.catalog.as_ref(), "kafscale.orders").await,
        (35, 4)
    );
}

fn event(name: &str) -> Value {
    let path = workspace_root().join("events").join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_default())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Sharded ticks split the topics between them and together cover each exactly once;
/// freshness comes from the newest committed record; a segment that arrives after its
/// offsets were committed as a gap is quarantined, not ingested behind the watermark.
#[tokio::test(flavor = "multi_thread")]
async fn sharded_ticks_cover_every_topic_once_and_late_segments_are_quarantined() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let stack = LocalStack::start();
    let topics = ["orders", "clicks", "views", "carts", "users", "pages"];
    let mut objects = Vec::new();
    for topic in topics {
        for (base, count) in [(0, 10), (10, 10)] {
            let segment = sample_segment(base, count, b'x');
            let stem = format!("default/{topic}/0/segment-{base:020}");
            objects.push((format!("{stem}.kfs"), segment.kfs.clone()));
            objects.push((format!("{stem}.index"), segment.index.clone()));
        }
    }
    // orders/0 also has a segment after a gap (20..24 missing).
    let after_gap = sample_segment(25, 5, b'y');
    objects.push((
        "default/orders/0/segment-00000000000000000025.kfs".into(),
        after_gap.kfs.clone(),
    ));
    objects.push((
        "default/orders/0/segment-00000000000000000025.index".into(),
        after_gap.index.clone(),
    ));
    let refs: Vec<(&str, &[u8])> = objects
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_slice()))
        .collect();
    stack.put(&refs);
    let catalog = stack.catalog_handle().await;
    let committer = Committer {
        source: stack.source(),
        catalog: catalog.clone(),
        ledger: stack.ledger(),
        config: PipelineConfig {
            table_concurrency: 3,
            ..PipelineConfig::default()
        },
        etcd: kfs_etcd::EtcdConnection::plain(Vec::new()),
        maintenance: None,
        tick_log: None,
        pacing: None,
    };
    let deadline = Instant::now() + Duration::from_secs(300);
    let shard_one = event("schedule-shard.json");
    let mut shard_zero = shard_one.clone();
    shard_zero["shard"] = json!(0);
    let first = handle(&committer, &shard_one, deadline)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let second = handle(&committer, &shard_zero, deadline)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let tables = |tick: &Value| -> Vec<String> {
        tick["tables"]
            .as_object()
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default()
    };
    let (one, zero) = (tables(&first), tables(&second));
    assert!(!one.is_empty() && !zero.is_empty(), "{first} {second}");
    assert!(one.iter().all(|t| !zero.contains(t)), "{one:?} {zero:?}");
    assert_eq!(one.len() + zero.len(), topics.len());
    for topic in topics {
        let expected = if topic == "orders" { 25 } else { 20 };
        assert_eq!(
            table_contents(catalog.catalog.as_ref(), &format!("kafscale.{topic}"))
                .await
                .0,
            expected,
            "{topic}"
        );
    }
    // Freshness: the newest committed record of orders is offset 29.
    let orders = if one.contains(&"kafscale.orders".to_owned()) {
        &first
    } else {
        &second
    };
    assert_eq!(
        orders["tables"]["kafscale.orders"]["newest_record_ms"],
        json!(1_700_000_000_029_i64),
        "{orders}"
    );
    assert_eq!(
        shard_zero_rejects(&committer, deadline).await,
        "invalid committer tick input: shard 2 of 2: the index must be below a non-zero count"
    );

    // The missing segment turns up after its gap was committed: quarantined, alarmed,
    // the table untouched.
    let late = sample_segment(20, 5, b'z');
    stack.put(&[
        (
            "default/orders/0/segment-00000000000000000020.kfs",
            late.kfs.as_slice(),
        ),
        (
            "default/orders/0/segment-00000000000000000020.index",
            late.index.as_slice(),
        ),
    ]);
    let tick = handle(&committer, &schedule(), deadline)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tick["quarantined"], 1, "{tick}");
    let quarantined = stack
        .ledger()
        .list(Some("quarantined"), None)
        .await
        .unwrap_or_default();
    assert_eq!(quarantined.len(), 1);
    let error = match &quarantined[0].state {
        kfs_core::EntryState::Quarantined { error } => error.clone(),
        other => panic!("{other:?}"),
    };
    assert!(
        error.contains("committed as a gap") && error.contains("segment-00000000000000000020"),
        "{error}"
    );
    assert_eq!(
        table_contents(catalog.catalog.as_ref(), "kafscale.orders")
            .await
            .0,
        25
    );
}

async fn shard_zero_rejects<S, L>(committer: &Committer<S, L>, deadline: Instant) -> String
where
    S: kfs_core::SegmentSource,
    L: Ledger,
{
    match handle(committer, &json!({"shard": 2, "shards": 2}), deadline).await {
        Ok(v) => panic!("accepted {v}"),
        Err(e) => e.to_string(),
    }
}

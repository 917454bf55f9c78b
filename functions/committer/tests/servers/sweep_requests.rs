//! The committer's requests per segment, counted by moto's own request recorder (S3,
//! DynamoDB, Glue), not by our clients: a tick that finds 400 KB-sized segments of 4
//! partitions by listing alone (no events) converts them in runs and commits them; a
//! tick that only commits 400 segments the converter already converted from their
//! events. The counts are saved for `scripts/cost_model.py`.

use std::time::{Duration, Instant};

use kfs_committer::{Committer, handle};
use kfs_core::PipelineConfig;
use kfs_testkit::{LocalStack, RequestCounts, sample_segment, table_contents};
use serde_json::{Value, json};

const PARTITIONS: i64 = 4;
const PER_PARTITION: i64 = 100;
const SEGMENTS: i64 = PARTITIONS * PER_PARTITION;
const RECORDS: i64 = 2;

/// Puts `PER_PARTITION` segments of `RECORDS` records in each partition of `topic`;
/// returns the keys of their files and one segment's size.
fn put_segments(stack: &LocalStack, topic: &str) -> (Vec<String>, usize) {
    let mut objects = Vec::new();
    let mut size = 0;
    for partition in 0..PARTITIONS {
        for i in 0..PER_PARTITION {
            let base = i * RECORDS;
            let stem = format!("default/{topic}/{partition}/segment-{base:020}");
            let segment = sample_segment(base, RECORDS, b'v');
            size = segment.kfs.len();
            objects.push((format!("{stem}.kfs"), segment.kfs));
            objects.push((format!("{stem}.index"), segment.index));
        }
    }
    let refs: Vec<(&str, &[u8])> = objects
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_slice()))
        .collect();
    stack.put(&refs);
    (objects.into_iter().map(|(k, _)| k).collect(), size)
}

/// Runs one tick with the recorder on; returns its answer and what it requested.
async fn counted_tick(
    stack: &LocalStack,
    committer: &Committer<kfs_core::OpendalSource, kfs_aws::dynamo_ledger::DynamoLedger>,
) -> (Value, RequestCounts) {
    stack.moto.record_start();
    let deadline = Instant::now() + Duration::from_secs(600);
    let tick = handle(committer, &json!({}), deadline)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let counts = stack.moto.record_stop();
    assert_eq!(tick["failed_tables"], json!({}), "{tick}");
    (tick, counts)
}

/// Asserts the per-segment budget of a tick's requests, and saves them as `name`.
fn check_and_save(counts: &RequestCounts, name: &str, path: &str, size: usize, s3_budget: f64) {
    let per_segment = |n: u64| n as f64 / SEGMENTS as f64;
    let (s3, writes) = (counts.sum("s3", &[]), counts.dynamodb_writes());
    println!("{name}: {counts:?}");
    assert!(
        per_segment(s3) <= s3_budget,
        "{name}: {s3} S3 requests: {counts:?}"
    );
    assert!(
        per_segment(writes) <= 0.05,
        "{name}: {writes} DynamoDB writes: {counts:?}"
    );
    counts.save(
        name,
        json!({
            "path": path,
            "segments": SEGMENTS,
            "partitions": PARTITIONS,
            "segment_bytes": size,
        }),
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tick_sweeps_and_commits_small_segments_in_about_one_request_each() {
    let stack = LocalStack::start_recording();
    let catalog = stack.glue_catalog_handle().await;
    let committer = Committer {
        source: stack.source(),
        catalog: catalog.clone(),
        ledger: stack.ledger(),
        config: PipelineConfig {
            max_conversions: Some(SEGMENTS as usize),
            table_concurrency: 4,
            ..PipelineConfig::default()
        },
        etcd: kfs_etcd::EtcdConnection::plain(Vec::new()),
        maintenance: None,
        tick_log: None,
        pacing: None,
    };

    // Found by listing: converted in runs (one per partition) and committed.
    let (_, size) = put_segments(&stack, "clicks");
    let (tick, counts) = counted_tick(&stack, &committer).await;
    assert_eq!(tick["swept"], SEGMENTS, "{tick}");
    assert_eq!(
        table_contents(catalog.catalog.as_ref(), "kafscale.clicks").await,
        ((SEGMENTS * RECORDS) as u64, PARTITIONS as usize)
    );
    check_and_save(
        &counts,
        "committer-sweep",
        "committer (segments found by listing, converted and committed)",
        size,
        1.2,
    );

    // Converted from their events first: the tick lists, finds them pending, commits.
    let (keys, size) = put_segments(&stack, "views");
    let converter = stack.converter(catalog.clone(), 4);
    let response = kfs_converter::handle(&converter, &kfs_testkit::s3_events_in_sqs(&keys))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(response["batchItemFailures"], json!([]), "{response}");
    let (tick, counts) = counted_tick(&stack, &committer).await;
    assert_eq!(tick["swept"], 0, "{tick}");
    assert_eq!(
        table_contents(catalog.catalog.as_ref(), "kafscale.views").await,
        ((SEGMENTS * RECORDS) as u64, PARTITIONS as usize)
    );
    check_and_save(
        &counts,
        "committer-commit",
        "committer (segments the converter converted from events: listed and committed)",
        size,
        0.2,
    );
}

//! One SQS batch announcing 1,000 KB-sized segments of one partition, both files of
//! each (the broker's default: a segment per produce request), through the handler on
//! moto: one run, one Parquet file, and the S3 and DynamoDB requests the conversion
//! made, counted by moto's own request recorder (not by our clients).

use kfs_converter::handle;
use kfs_core::Ledger;
use kfs_testkit::{LocalStack, sample_segment};
use serde_json::{Value, json};

const SEGMENTS: i64 = 1_000;

/// An SQS record carrying the S3 notification of one created object.
fn sqs_record(n: usize, key: &str, etag: &str, size: u64) -> Value {
    let notification = json!({"Records": [{
        "eventVersion": "2.1",
        "eventSource": "aws:s3",
        "awsRegion": "us-east-1",
        "eventName": "ObjectCreated:Put",
        "s3": {
            "bucket": {"name": "kafscale-segments"},
            "object": {"key": key, "size": size, "eTag": etag, "sequencer": format!("{n:016X}")},
        },
    }]});
    json!({
        "messageId": format!("message-{n}"),
        "body": notification.to_string(),
        "eventSource": "aws:sqs",
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_of_small_segments_is_one_file_and_about_one_request_each() {
    let stack = LocalStack::start_recording();
    let ledger = stack.ledger();
    let service = stack.converter(stack.catalog_handle().await, 4);
    let segments: Vec<(String, kfs_segment::EncodedSegment)> = (0..SEGMENTS)
        .map(|i| {
            let stem = format!("default/clicks/0/segment-{:020}", i * 2);
            (stem, sample_segment(i * 2, 2, b'v'))
        })
        .collect();
    let mut objects: Vec<(String, &[u8])> = Vec::new();
    for (stem, segment) in &segments {
        objects.push((format!("{stem}.kfs"), &segment.kfs));
        objects.push((format!("{stem}.index"), &segment.index));
    }
    let refs: Vec<(&str, &[u8])> = objects.iter().map(|(k, b)| (k.as_str(), *b)).collect();
    stack.put(&refs);
    let listed: Value = serde_json::from_str(
        &stack
            .moto
            .tool(&["etags", "s3://kafscale-segments/default/"]),
    )
    .unwrap_or_else(|e| panic!("etags: {e}"));
    let records: Vec<Value> = objects
        .iter()
        .enumerate()
        .map(|(n, (key, _))| {
            let (etag, size) = (&listed[key][0], &listed[key][1]);
            sqs_record(
                n,
                key,
                etag.as_str().unwrap_or_default(),
                size.as_u64().unwrap_or(0),
            )
        })
        .collect();
    let records_announced = records.len();
    let event = json!({ "Records": records });

    stack.moto.record_start();
    let response = handle(&service, &event)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let counts = stack.moto.record_stop();
    println!("requests for {SEGMENTS} segments: {counts:?}");
    assert_eq!(response["batchItemFailures"], json!([]), "{response}");
    // One run: one pending entry listing every segment, one data file.
    let pending = ledger
        .list(Some("pending"), None)
        .await
        .unwrap_or_else(|e| panic!("ledger: {e}"));
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].segments(), SEGMENTS as usize);
    assert_eq!(pending[0].records, 2 * SEGMENTS as u64);
    assert_eq!(pending[0].data_files.len(), 1);

    let (s3, writes) = (counts.sum("s3", &[]), counts.dynamodb_writes());
    let per_segment = |n: u64| n as f64 / SEGMENTS as f64;
    assert!(per_segment(s3) <= 1.2, "{s3} S3 requests: {counts:?}");
    assert!(
        per_segment(writes) <= 0.05,
        "{writes} DynamoDB writes: {counts:?}"
    );
    // What DynamoDB bills a write of the run's item by (per kilobyte): its data file
    // descriptions and its members, as stored.
    let run = &pending[0];
    let item_bytes = run.stored_data_files().map_or(0, |s| s.len())
        + kfs_core::RunMember::to_stored(&run.members, &run.segment)
            .ok()
            .flatten()
            .map_or(0, |s| s.len());
    let members_json = serde_json::to_string(&run.members).map_or(0, |s| s.len());
    println!(
        "run item: {item_bytes} bytes for {} members ({members_json} bytes of members as JSON)",
        run.members.len()
    );
    counts.save(
        "converter-events",
        json!({
            "path": "converter (S3 events through SQS)",
            "segments": SEGMENTS,
            "segment_bytes": segments[0].1.kfs.len(),
            "runs": pending.len(),
            "run_item_bytes": item_bytes,
            "run_members": run.members.len(),
            "run_members_json_bytes": members_json,
            "run_data_files_bytes": run.stored_data_files().map_or(0, |s| s.len()),
            "sqs_messages": records_announced,
        }),
    );
}

//! Every sample event of `events/` through the converter's handler, against moto
//! (S3, DynamoDB, Glue): a segment converts once both files exist, whatever order and
//! however often its events arrive; test events and foreign keys are ignored; a key
//! rewritten with new content is quarantined, never ingested twice; an unreadable SQS
//! message is reported as that message's failure alone.

use kfs_converter::handle;
use kfs_core::{EntryState, Ledger, SegmentSource};
use kfs_testkit::{LocalStack, sample_segment, workspace_root};
use serde_json::{Value, json};

fn event(name: &str) -> Value {
    let path = workspace_root().join("events").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The ETag every sample event of `events/` carries.
const SAMPLE_ETAG: &str = "0123456789abcdef0123456789abcdef";

/// The sample event as S3 delivers it for the object now stored under its key: with
/// that object's ETag in place of the sample's.
async fn as_stored(stack: &LocalStack, key: &str, name: &str) -> Value {
    let stored = stack
        .source()
        .stat(key)
        .await
        .unwrap_or_else(|e| panic!("stat {key}: {e}"))
        .and_then(|object| object.etag)
        .unwrap_or_else(|| panic!("{key} has no ETag"));
    let text = serde_json::to_string(&event(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    serde_json::from_str(&text.replace(SAMPLE_ETAG, stored.trim_matches('"')))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn no_failures(response: &Value) -> bool {
    response["batchItemFailures"]
        .as_array()
        .is_some_and(|a| a.is_empty())
}

#[tokio::test(flavor = "multi_thread")]
async fn every_sample_event_through_the_handler() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let stack = LocalStack::start();
    let ledger = stack.ledger();
    let service = stack.converter(stack.catalog_handle().await, 4);
    let a = "default/orders/0/segment-00000000000000000000";
    let seg_a = sample_segment(0, 10, b'a');
    let seg_b = sample_segment(10, 10, b'b');
    let seg_c = sample_segment(0, 5, b'c');
    let seg_d = sample_segment(0, 7, b'd');
    stack.put(&[
        (&format!("{a}.kfs"), &seg_a.kfs),
        (
            "default/orders/0/segment-00000000000000000010.kfs",
            &seg_b.kfs,
        ),
        (
            "default/orders/0/segment-00000000000000000010.index",
            &seg_b.index,
        ),
        (
            "default/orders/1/segment-00000000000000000000.kfs",
            &seg_c.kfs,
        ),
        (
            "default/orders/1/segment-00000000000000000000.index",
            &seg_c.index,
        ),
        (
            "prod=eu/clicks/0/segment-00000000000000000000.kfs",
            &seg_d.kfs,
        ),
        (
            "prod=eu/clicks/0/segment-00000000000000000000.index",
            &seg_d.index,
        ),
        ("__health/startup_probe_1", b"ok"),
    ]);
    let pending = || async {
        ledger
            .list(Some("pending"), None)
            .await
            .unwrap_or_else(|e| panic!("ledger: {e}"))
            .len()
    };

    // The .kfs arrives first: its .index is missing, so nothing happens yet.
    let response = handle(&service, &event("sqs-s3-put-kfs.json"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(no_failures(&response), "{response}");
    assert_eq!(pending().await, 0);

    // The .index arrives: the segment converts.
    stack.put(&[(&format!("{a}.index"), &seg_a.index)]);
    let response = handle(&service, &event("sqs-s3-put-index.json"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(no_failures(&response), "{response}");
    assert_eq!(pending().await, 1);

    let response = handle(&service, &event("s3-put-direct.json"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(response["converted"], 1, "{response}");
    let response = handle(&service, &event("eventbridge-object-created.json"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(response["converted"], 1, "{response}");
    let response = handle(&service, &event("sqs-s3-test-event.json"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(no_failures(&response), "{response}");
    let response = handle(&service, &event("sqs-url-encoded-key.json"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(no_failures(&response), "{response}");
    assert!(
        ledger
            .get("prod=eu/clicks/0/segment-00000000000000000000.kfs")
            .await
            .is_ok_and(|e| e.is_some())
    );
    assert_eq!(pending().await, 4);

    // Delivered twice, and once more later: still one entry.
    let duplicate = as_stored(&stack, &format!("{a}.kfs"), "sqs-duplicate-delivery.json").await;
    let response = handle(&service, &duplicate)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(no_failures(&response), "{response}");
    assert_eq!(pending().await, 4);
    // ... and nothing quarantined: the events' ETags are the objects' own, so a
    // repeat is a repeat, not a rewrite (the rewrite below is the only quarantine).
    assert_eq!(
        ledger
            .list(Some("quarantined"), None)
            .await
            .unwrap_or_default(),
        Vec::new(),
        "a duplicate delivery quarantines nothing"
    );

    // The key is rewritten with different content: quarantined and alarmed, not ingested.
    let rewritten = sample_segment(0, 12, b'z');
    stack.put(&[(&format!("{a}.kfs"), &rewritten.kfs)]);
    let put = as_stored(&stack, &format!("{a}.kfs"), "sqs-s3-put-kfs.json").await;
    let response = handle(&service, &put)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(no_failures(&response), "{response}");
    assert_eq!(pending().await, 4);
    let quarantined = ledger
        .list(Some("quarantined"), None)
        .await
        .unwrap_or_default();
    assert_eq!(quarantined.len(), 1);
    assert!(
        matches!(&quarantined[0].state, EntryState::Quarantined { error } if error.contains("rewritten"))
    );

    // One unreadable message fails alone.
    let mut mixed = duplicate;
    mixed["Records"][1]["body"] = json!("this is not JSON");
    let response = handle(&service, &mixed)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        response["batchItemFailures"],
        json!([{"itemIdentifier": "6f9b2f1e-0006-4a6b-9c1d-000000000006"}])
    );

    // What the stack delivers: the bucket's EventBridge event, through the queue.
    let payments = sample_segment(0, 6, b'p');
    stack.put(&[
        (
            "default/payments/2/segment-00000000000000000000.kfs",
            &payments.kfs,
        ),
        (
            "default/payments/2/segment-00000000000000000000.index",
            &payments.index,
        ),
    ]);
    let response = handle(&service, &event("sqs-eventbridge-object-created.json"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(no_failures(&response), "{response}");
    let entry = ledger
        .get("default/payments/2/segment-00000000000000000000.kfs")
        .await
        .unwrap_or_else(|e| panic!("ledger: {e}"));
    assert!(entry.is_some_and(|e| e.records == 6));

    // A foreign event is an error, not a silent success.
    assert!(handle(&service, &json!({"hello": "world"})).await.is_err());
}

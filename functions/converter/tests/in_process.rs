//! The converter's handler in process, as the aws-lambda-rust-runtime examples test
//! theirs: the sample events of `events/` (what AWS sends) handed to
//! [`kfs_converter::handle`] over the in-memory bucket, ledger and catalog
//! ([`kfs_testkit::InMemory`]), with real encoded segments under the keys the events
//! name. No server: `cargo test -- --skip servers::` runs them.

use kfs_converter::handle;
use kfs_core::EntryState;
use kfs_testkit::{InMemory, sample_segment, workspace_root};
use serde_json::{Value, json};

/// A sample event of `events/`.
fn event(name: &str) -> Value {
    let path = workspace_root().join("events").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The answer to an SQS batch of which no message failed.
fn no_failures() -> Value {
    json!({"batchItemFailures": []})
}

/// The ledger holds exactly one entry, for `segment`, pending with `records` records.
async fn pending_alone(world: &InMemory, segment: &str, records: u64) {
    let all = world.entries().await;
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0].segment, segment);
    assert_eq!(all[0].state, EntryState::Pending);
    assert_eq!(all[0].records, records);
}

const ORDERS_0: &str = "default/orders/0/segment-00000000000000000000";

/// Each sample event the converter takes, in a world of its own holding the segment it
/// names (both files): the segment converts to one pending entry of its records, and
/// the answer says so (an SQS batch: no failed message; a direct event: the tally).
/// The S3 test event changes nothing; an event of no known shape is an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_sample_event_converts_the_segment_it_names() {
    let sqs = no_failures();
    let tally = |records: u64| json!({"converted": 1, "records": records});
    let cases = [
        ("sqs-s3-put-kfs.json", ORDERS_0, 0, 10, sqs.clone()),
        ("sqs-s3-put-index.json", ORDERS_0, 0, 10, sqs.clone()),
        (
            "s3-put-direct.json",
            "default/orders/0/segment-00000000000000000010",
            10,
            7,
            tally(7),
        ),
        (
            "eventbridge-object-created.json",
            "default/orders/1/segment-00000000000000000000",
            0,
            5,
            tally(5),
        ),
        (
            "sqs-eventbridge-object-created.json",
            "default/payments/2/segment-00000000000000000000",
            0,
            6,
            sqs.clone(),
        ),
        // The key `prod%3Deu/…` of the notification is `prod=eu/…` in the bucket.
        (
            "sqs-url-encoded-key.json",
            "prod=eu/clicks/0/segment-00000000000000000000",
            0,
            4,
            sqs.clone(),
        ),
        // Two messages of one notification: one conversion, both answered.
        ("sqs-duplicate-delivery.json", ORDERS_0, 0, 3, sqs.clone()),
    ];
    for (name, stem, base, count, answer) in cases {
        let world = InMemory::open().await;
        world.put_segment(stem, &sample_segment(base, count, b'v'));
        let service = world.converter(4);
        let response = handle(&service, &event(name))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(response, answer, "{name}");
        pending_alone(&world, &format!("{stem}.kfs"), count as u64).await;
    }

    let world = InMemory::open().await;
    world.put_segment(ORDERS_0, &sample_segment(0, 10, b'v'));
    let service = world.converter(4);
    let response = handle(&service, &event("sqs-s3-test-event.json"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(response, no_failures());
    assert!(world.entries().await.is_empty());
    assert!(handle(&service, &json!({"hello": "world"})).await.is_err());
    assert!(world.entries().await.is_empty());
}

/// The same events delivered again (SQS is at least once) change nothing: no failed
/// message, the answer counts duplicates, the ledger is as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_event_twice_changes_nothing() {
    let world = InMemory::open().await;
    world.put_segment(ORDERS_0, &sample_segment(0, 10, b'a'));
    let direct = "default/orders/0/segment-00000000000000000010";
    world.put_segment(direct, &sample_segment(10, 5, b'b'));
    let service = world.converter(4);
    for name in ["sqs-s3-put-kfs.json", "s3-put-direct.json"] {
        handle(&service, &event(name))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let before = world.entries().await;
    assert_eq!(before.len(), 2, "{before:?}");
    assert!(before.iter().all(|e| e.state == EntryState::Pending));

    for name in [
        "sqs-s3-put-kfs.json",
        "sqs-duplicate-delivery.json",
        "sqs-s3-put-kfs.json",
    ] {
        let response = handle(&service, &event(name))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(response, no_failures(), "{name}");
    }
    let response = handle(&service, &event("s3-put-direct.json"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(response, json!({"duplicates": 1, "records": 0}));
    assert_eq!(world.entries().await, before);
}

/// A message whose body is not JSON is reported by its id in `batchItemFailures`
/// (SQS redelivers it alone); the other message of the batch still converts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_message_fails_alone() {
    let world = InMemory::open().await;
    world.put_segment(ORDERS_0, &sample_segment(0, 10, b'a'));
    let service = world.converter(4);
    let mut batch = event("sqs-duplicate-delivery.json");
    batch["Records"][1]["body"] = json!("this is not JSON");
    let response = handle(&service, &batch)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        response,
        json!({"batchItemFailures": [{"itemIdentifier": "6f9b2f1e-0006-4a6b-9c1d-000000000006"}]})
    );
    pending_alone(&world, &format!("{ORDERS_0}.kfs"), 10).await;
}

/// The `.kfs` announced before its `.index` is uploaded: the segment is incomplete,
/// no entry and no failure (its `.index`'s event converts it); then the `.index`
/// arrives and its event converts the segment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segment_without_its_index_waits_for_it() {
    let world = InMemory::open().await;
    let segment = sample_segment(0, 10, b'a');
    world.put(&format!("{ORDERS_0}.kfs"), &segment.kfs);
    let direct = "default/orders/0/segment-00000000000000000010";
    world.put(&format!("{direct}.kfs"), &sample_segment(10, 5, b'b').kfs);
    let service = world.converter(4);
    let response = handle(&service, &event("sqs-s3-put-kfs.json"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(response, no_failures());
    let response = handle(&service, &event("s3-put-direct.json"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(response, json!({"incomplete": 1, "records": 0}));
    assert!(world.entries().await.is_empty());

    world.put(&format!("{ORDERS_0}.index"), &segment.index);
    let response = handle(&service, &event("sqs-s3-put-index.json"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(response, no_failures());
    pending_alone(&world, &format!("{ORDERS_0}.kfs"), 10).await;
}

/// A segment whose bytes are broken (one byte of its body flipped) is quarantined, not
/// failed: no failed message (a redelivery cannot mend it), no pending entry, the
/// quarantined entry says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_segment_is_quarantined_not_failed() {
    let world = InMemory::open().await;
    let mut segment = sample_segment(0, 10, b'a');
    let middle = segment.kfs.len() / 2;
    segment.kfs[middle] ^= 0xff;
    world.put_segment(ORDERS_0, &segment);
    let service = world.converter(4);
    let response = handle(&service, &event("sqs-s3-put-index.json"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(response, no_failures());
    let all = world.entries().await;
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0].segment, format!("{ORDERS_0}.kfs"));
    assert!(
        matches!(&all[0].state, EntryState::Quarantined { error } if !error.is_empty()),
        "{:?}",
        all[0].state
    );
    assert_eq!(all[0].records, 0);

    // A direct event of a broken segment: the tally counts it quarantined, no retry.
    let direct = "default/orders/0/segment-00000000000000000010";
    let mut broken = sample_segment(10, 5, b'b');
    let middle = broken.kfs.len() / 2;
    broken.kfs[middle] ^= 0xff;
    world.put_segment(direct, &broken);
    let response = handle(&service, &event("s3-put-direct.json"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(response, json!({"quarantined": 1, "records": 0}));
}

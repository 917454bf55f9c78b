//! The committer's handler in process, as the aws-lambda-rust-runtime examples test
//! theirs: the sample schedule events of `events/` handed to
//! [`kfs_committer::handle`] over the in-memory bucket, ledger and catalog
//! ([`kfs_testkit::InMemory`]), after the converter's handler left segments pending.
//! No server (etcd off: no endpoints): `cargo test -- --skip servers::` runs them.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kfs_committer::{Committer, handle};
use kfs_core::{EntryState, PipelineConfig, S3Settings, TickLog, TickMaintenance};
use kfs_plan::shard::Shard;
use kfs_testkit::memory::{Bucket, LedgerClient};
use kfs_testkit::{InMemory, s3_events_in_sqs, sample_segment, table_offsets, workspace_root};
use serde_json::{Value, json};

/// A sample event of `events/`.
fn event(name: &str) -> Value {
    let path = workspace_root().join("events").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The committer on the in-memory world.
type InMemoryCommitter<'a> = Committer<Bucket<'a>, LedgerClient<'a>>;

/// The committer of `world`, as the function builds it, etcd off; `maintenance` and
/// the tick log as asked.
fn committer(
    world: &InMemory,
    maintenance: Option<TickMaintenance>,
    tick_log: Option<TickLog>,
) -> InMemoryCommitter<'_> {
    Committer {
        source: world.bucket(),
        catalog: world.catalog.clone(),
        ledger: world.ledger(),
        config: PipelineConfig {
            max_conversions: Some(100),
            table_concurrency: 4,
            ..PipelineConfig::default()
        },
        etcd: kfs_etcd::EtcdConnection::plain(Vec::new()),
        maintenance,
        tick_log,
        pacing: None,
    }
}

/// The committer's default maintenance on `world`'s warehouse.
fn default_maintenance(world: &InMemory) -> TickMaintenance {
    TickMaintenance {
        policy: kfs_core::MaintenancePolicy::default(),
        storage: kfs_core::MaintenanceStorage {
            s3: S3Settings::default(),
            warehouse: world.warehouse.clone(),
        },
    }
}

/// Uploads segments (stem, base offset, records) and hands their `.index` events to
/// the converter's handler, as the queue would; `announced` says which.
async fn upload_and_convert(world: &InMemory, segments: &[(&str, i64, i64)], announced: usize) {
    for (stem, base, count) in segments {
        world.put_segment(stem, &sample_segment(*base, *count, b'v'));
    }
    let keys: Vec<String> = segments[..announced]
        .iter()
        .map(|(stem, _, _)| format!("{stem}.index"))
        .collect();
    let service = world.converter(4);
    let response = kfs_converter::handle(&service, &s3_events_in_sqs(&keys))
        .await
        .unwrap_or_else(|e| panic!("converter: {e}"));
    assert_eq!(response, json!({"batchItemFailures": []}));
}

/// Each offset of `partitions` (partition → offsets end, from 0) once.
fn once(partitions: &[(i32, i64)]) -> BTreeMap<(i32, i64), usize> {
    partitions
        .iter()
        .flat_map(|(partition, end)| (0..*end).map(move |offset| ((*partition, offset), 1)))
        .collect()
}

/// The schedule's tick commits what the converter left pending and what the sweep
/// finds (a segment whose event was lost): one snapshot per table holding exactly the
/// segments' offsets, every ledger entry committed in it, the tick's summary kept for
/// `kfs-iceberg status`. A second tick commits nothing new.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schedule_commits_pending_segments_exactly_once() {
    let world = InMemory::open().await;
    let segments = [
        ("default/orders/0/segment-00000000000000000000", 0, 10),
        ("default/orders/0/segment-00000000000000000010", 10, 10),
        ("default/orders/1/segment-00000000000000000000", 0, 5),
        ("default/clicks/0/segment-00000000000000000000", 0, 7),
        // Its event was lost: the sweep finds it.
        ("default/orders/0/segment-00000000000000000020", 20, 3),
    ];
    upload_and_convert(&world, &segments, 4).await;
    let pending = world.entries().await;
    assert!(pending.iter().all(|e| e.state == EntryState::Pending));
    assert_eq!(pending.iter().map(|e| e.records).sum::<u64>(), 32);

    let tick_log = TickLog::new(S3Settings::default().file_io(), &world.warehouse.location());
    let committer = committer(&world, None, Some(tick_log.clone()));
    let deadline = Instant::now() + Duration::from_secs(300);
    let tick = handle(&committer, &event("schedule.json"), deadline)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tick["swept"], 1, "{tick}");
    assert_eq!(tick["quarantined"], 0, "{tick}");
    assert_eq!(tick["failed_tables"], json!({}), "{tick}");
    assert_eq!(tick["failed_segments"], json!([]), "{tick}");
    let orders = &tick["tables"]["kafscale.orders"];
    let clicks = &tick["tables"]["kafscale.clicks"];
    assert_eq!(orders["watermarks"], json!({"0": 23, "1": 5}), "{tick}");
    assert_eq!(orders["records"], 28, "{tick}");
    assert_eq!(clicks["watermarks"], json!({"0": 7}), "{tick}");
    assert_eq!(clicks["records"], 7, "{tick}");

    let catalog = world.catalog.catalog.as_ref();
    let offsets = || async {
        (
            table_offsets(catalog, "kafscale.orders").await,
            table_offsets(catalog, "kafscale.clicks").await,
        )
    };
    let expected = (once(&[(0, 23), (1, 5)]), once(&[(0, 7)]));
    assert_eq!(offsets().await, expected);
    // Every entry committed, in its table's snapshot of this tick.
    let committed = world.entries().await;
    assert_eq!(committed.iter().map(|e| e.records).sum::<u64>(), 35);
    for entry in &committed {
        let table = &tick["tables"][entry.table.as_str()];
        assert_eq!(
            entry.state,
            EntryState::Committed {
                snapshot_id: table["snapshot_id"].as_i64().unwrap_or_default()
            },
            "{entry:?} {tick}"
        );
    }
    let kept = tick_log
        .read()
        .await
        .unwrap_or_else(|e| panic!("tick log: {e}"));
    assert_eq!(kept, vec![tick.clone()]);

    // Nothing new: nothing swept, no table committed, the tables and ledger unchanged.
    let again = handle(&committer, &event("schedule.json"), deadline)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again["swept"], 0, "{again}");
    assert_eq!(again["tables"], json!({}), "{again}");
    assert_eq!(offsets().await, expected);
    assert_eq!(world.entries().await, committed);
}

/// The sharded tick of `schedule-shard.json` (shard 1 of 2) commits the topics of its
/// shard alone, then runs maintenance on them; the other shard's tick commits the
/// rest. Each table holds its offsets once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_tick_commits_its_own_topics() {
    let world = InMemory::open().await;
    let topics = ["orders", "clicks", "views", "carts", "users", "pages"];
    let stems: Vec<String> = topics
        .iter()
        .map(|topic| format!("default/{topic}/0/segment-00000000000000000000"))
        .collect();
    let segments: Vec<(&str, i64, i64)> = stems.iter().map(|s| (s.as_str(), 0, 4)).collect();
    upload_and_convert(&world, &segments, segments.len()).await;

    let committer = committer(&world, Some(default_maintenance(&world)), None);
    let deadline = Instant::now() + Duration::from_secs(300);
    let shard_one = event("schedule-shard.json");
    let shard = Shard::new(1, 2).unwrap_or_else(|e| panic!("{e}"));
    let table = |topic: &str| format!("kafscale.{topic}");
    let (mine, theirs): (Vec<&str>, Vec<&str>) = topics.iter().partition(|t| shard.owns(t));
    assert!(
        !mine.is_empty() && !theirs.is_empty(),
        "{mine:?} {theirs:?}"
    );

    let tick = handle(&committer, &shard_one, deadline)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tick["shard"], json!([1, 2]), "{tick}");
    let names = |tick: &Value, key: &str| -> Vec<String> {
        tick[key]
            .as_object()
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default()
    };
    let mut expected: Vec<String> = mine.iter().map(|t| table(t)).collect();
    expected.sort();
    assert_eq!(names(&tick, "tables"), expected, "{tick}");
    assert_eq!(names(&tick, "maintenance"), expected, "{tick}");
    for (table, result) in tick["maintenance"].as_object().into_iter().flatten() {
        assert!(result.get("error").is_none(), "{table}: {result}");
    }
    for entry in world.entries().await {
        let owned = shard.owns(&entry.topic);
        assert_eq!(
            matches!(entry.state, EntryState::Committed { .. }),
            owned,
            "{entry:?}"
        );
    }

    let mut shard_zero = shard_one.clone();
    shard_zero["shard"] = json!(0);
    let tick = handle(&committer, &shard_zero, deadline)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut expected: Vec<String> = theirs.iter().map(|t| table(t)).collect();
    expected.sort();
    assert_eq!(names(&tick, "tables"), expected, "{tick}");
    assert!(
        world
            .entries()
            .await
            .iter()
            .all(|e| matches!(e.state, EntryState::Committed { .. }))
    );
    for topic in topics {
        assert_eq!(
            table_offsets(world.catalog.catalog.as_ref(), &table(topic)).await,
            once(&[(0, 4)]),
            "{topic}"
        );
    }
}

/// Wake-ups: the converter, given a wake-up queue, announces each table it left
/// pending work in once; `sqs-committer-wakeup.json` (two wake-ups of
/// `kafscale.orders` and a stray message) commits that table alone, without
/// maintenance, and asks for nothing again. The same batch delivered again (a
/// duplicate) commits nothing; the table whose wake-up was lost is committed by the
/// schedule's tick. Each offset lands once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wakeups_commit_the_tables_they_name_and_the_schedule_the_rest() {
    let world = InMemory::open().await;
    let segments = [
        ("default/orders/0/segment-00000000000000000000", 0, 10),
        ("default/orders/1/segment-00000000000000000000", 0, 5),
        ("default/clicks/0/segment-00000000000000000000", 0, 7),
    ];
    for (stem, base, count) in &segments {
        world.put_segment(stem, &sample_segment(*base, *count, b'v'));
    }
    let queue = std::sync::Arc::new(kfs_core::MemoryWakeups::default());
    let service = world.converter(4).with_wakeups(queue.clone());
    let keys: Vec<String> = segments
        .iter()
        .map(|(stem, _, _)| format!("{stem}.index"))
        .collect();
    let response = kfs_converter::handle(&service, &s3_events_in_sqs(&keys))
        .await
        .unwrap_or_else(|e| panic!("converter: {e}"));
    assert_eq!(response, json!({"batchItemFailures": []}));
    let sent: Vec<String> = queue.sent().into_iter().map(|(w, _)| w.table).collect();
    assert_eq!(sent, ["kafscale.clicks", "kafscale.orders"]);

    let committer = committer(&world, Some(default_maintenance(&world)), None);
    let deadline = Instant::now() + Duration::from_secs(300);
    let wakeups = event("sqs-committer-wakeup.json");
    let answer = handle(&committer, &wakeups, deadline)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(answer, json!({"batchItemFailures": []}));
    let catalog = world.catalog.catalog.as_ref();
    let orders = once(&[(0, 10), (1, 5)]);
    assert_eq!(table_offsets(catalog, "kafscale.orders").await, orders);
    for entry in world.entries().await {
        let committed = matches!(entry.state, EntryState::Committed { .. });
        assert_eq!(committed, entry.topic == "orders", "{entry:?}");
    }

    // Delivered again: nothing new to commit, nothing asked again.
    let again = handle(&committer, &wakeups, deadline)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again, json!({"batchItemFailures": []}));
    assert_eq!(table_offsets(catalog, "kafscale.orders").await, orders);

    // The clicks wake-up never came: the schedule commits it.
    let tick = handle(&committer, &event("schedule.json"), deadline)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tick["failed_tables"], json!({}), "{tick}");
    assert_eq!(
        table_offsets(catalog, "kafscale.clicks").await,
        once(&[(0, 7)])
    );
    assert_eq!(table_offsets(catalog, "kafscale.orders").await, orders);
    assert!(
        world
            .entries()
            .await
            .iter()
            .all(|e| matches!(e.state, EntryState::Committed { .. }))
    );
}

/// Pacing: a wake-up that comes less than the minimum interval after its table's last
/// commit commits nothing; its messages are held in the queue for the rest of the
/// interval and asked again; delivered again once the interval has passed, they commit
/// what piled up. Each offset lands once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wakeup_sooner_than_the_interval_is_held_and_commits_when_delivered_again() {
    let world = InMemory::open().await;
    let queue = std::sync::Arc::new(kfs_core::MemoryWakeups::default());
    let service = world.converter(4).with_wakeups(queue.clone());
    let convert = |stem: &str, base: i64| {
        world.put_segment(stem, &sample_segment(base, 5, b'v'));
        let keys = [format!("{stem}.index")];
        let service = &service;
        async move {
            let response = kfs_converter::handle(service, &s3_events_in_sqs(&keys))
                .await
                .unwrap_or_else(|e| panic!("converter: {e}"));
            assert_eq!(response, json!({"batchItemFailures": []}));
        }
    };
    let mut committer = committer(&world, None, None);
    committer.pacing = Some(kfs_committer::wakeup::Pacing {
        queue: queue.clone(),
        min_interval: Duration::from_secs(60),
    });
    let deadline = Instant::now() + Duration::from_secs(300);
    let wakeups = event("sqs-committer-wakeup.json");
    let catalog = world.catalog.catalog.as_ref();

    // The table's first commit: nothing to wait for.
    convert("default/orders/0/segment-00000000000000000000", 0).await;
    let answer = handle(&committer, &wakeups, deadline)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(answer, json!({"batchItemFailures": []}));
    assert!(queue.held().is_empty(), "{:?}", queue.held());
    assert_eq!(
        table_offsets(catalog, "kafscale.orders").await,
        once(&[(0, 5)])
    );

    // A second conversion a moment later: its wake-up is held, nothing commits.
    convert("default/orders/0/segment-00000000000000000005", 5).await;
    let answer = handle(&committer, &wakeups, deadline)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let asked = kfs_testkit::batch_item_failures(&answer);
    let orders_ids: Vec<&str> = wakeups["Records"]
        .as_array()
        .map(|records| {
            records
                .iter()
                .filter(|r| {
                    r["body"]
                        .as_str()
                        .is_some_and(|b| b.contains("kafscale.orders"))
                })
                .filter_map(|r| r["messageId"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(asked, orders_ids, "{answer}");
    let held = queue.held();
    assert_eq!(held.len(), orders_ids.len(), "{held:?}");
    assert!(held.iter().all(|(_, s)| (58..=60).contains(s)), "{held:?}");
    assert_eq!(
        table_offsets(catalog, "kafscale.orders").await,
        once(&[(0, 5)])
    );

    // Delivered again once the interval has passed (here: no interval): committed.
    committer.pacing = None;
    let answer = handle(&committer, &wakeups, deadline)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(answer, json!({"batchItemFailures": []}));
    assert_eq!(
        table_offsets(catalog, "kafscale.orders").await,
        once(&[(0, 10)])
    );
}

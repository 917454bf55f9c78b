//! Upload-to-visible latency of the Lambda path with wake-ups, through the real
//! handlers, on moto's S3, DynamoDB and SQS (a standard queue for the segments' S3
//! events, the FIFO wake-up queue).
//!
//! A producer uploads a segment every `1 / KFS_BENCH_RATE` seconds (default 2 a
//! second), round robin over 4 partitions, for `KFS_BENCH_MINUTES` (default 0.1: a few
//! seconds in the test run; the figures of docs/performance.md ran 5 minutes). Moto's
//! S3 sends each object's `ObjectCreated` event to the segment queue. A converter loop
//! polls it as the event source mapping does with the template's wake-up settings
//! (up to 100 messages, a batching window of 1 s) and hands each batch to the
//! converter's handler, which wakes the committer through the FIFO queue. A committer
//! loop long-polls the FIFO queue (1 s) and hands each batch to the committer's
//! handler, paced by `KFS_BENCH_MIN_INTERVAL` seconds (default 5, the template's), and
//! deletes what the handler does not ask to see again (a held wake-up comes back when
//! its interval has passed). Beside them the schedule ticks every
//! `KFS_BENCH_TICK_SECONDS` (default 60, the template's rate) through the same handler,
//! with the committer's maintenance (compaction, expiry, manifest merging), as the
//! stack's schedule does. Latency of a segment: from its upload to the commit time of
//! the first snapshot whose `kfs.offsets` summary passes its last offset. Prints p50,
//! p95, p99, max, commits per minute, the wake-ups held, and the snapshots, manifests
//! and data files at the end; asserts that every segment became visible and every
//! offset landed once, never a timing.
//!
//! `KFS_BENCH_MINUTES=5 cargo test -p kfs-committer --test integration -- servers::wakeup_freshness --nocapture`

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_sdk_sqs::types::{Message, QueueAttributeName};
use kfs_committer::wakeup::Pacing;
use kfs_committer::{Committer, handle};
use kfs_core::PipelineConfig;
use kfs_testkit::{LocalStack, load_table, sample_segment, table_contents};
use serde_json::{Value, json};

/// Records per segment.
const RECORDS: i64 = 20;
/// Partitions the producer writes to.
const PARTITIONS: i64 = 4;
/// The converter's batch: at most this many messages, gathered for at most the window.
const BATCH: usize = 100;
const WINDOW: Duration = Duration::from_secs(1);

fn env_number(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The `q`th percentile of `values` (sorted here).
fn percentile(values: &mut [f64], q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    let at = ((q / 100.0) * (values.len().saturating_sub(1)) as f64).round() as usize;
    values.get(at).copied().unwrap_or(f64::NAN)
}

/// Messages of `queue_url`: up to `max`, waiting up to `wait` seconds for the first.
async fn receive(sqs: &aws_sdk_sqs::Client, queue_url: &str, max: i32, wait: i32) -> Vec<Message> {
    sqs.receive_message()
        .queue_url(queue_url)
        .max_number_of_messages(max)
        .wait_time_seconds(wait)
        .send()
        .await
        .unwrap_or_else(|e| panic!("receive: {e:?}"))
        .messages()
        .to_vec()
}

/// Whether `queue_url` holds no message, visible or in flight (held included).
async fn queue_empty(sqs: &aws_sdk_sqs::Client, queue_url: &str) -> bool {
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(queue_url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .unwrap_or_else(|e| panic!("get_queue_attributes: {e:?}"));
    let count = |name: QueueAttributeName| {
        attributes
            .attributes()
            .and_then(|a| a.get(&name))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    count(QueueAttributeName::ApproximateNumberOfMessages) == 0
        && count(QueueAttributeName::ApproximateNumberOfMessagesNotVisible) == 0
}

/// `messages` as the SQS event a Lambda function receives.
fn sqs_event(messages: &[Message]) -> Value {
    let records: Vec<Value> = messages
        .iter()
        .map(|m| {
            json!({"messageId": m.message_id(), "receiptHandle": m.receipt_handle(), "body": m.body(), "eventSource": "aws:sqs"})
        })
        .collect();
    json!({ "Records": records })
}

/// Deletes `messages` but those `answer` asks to see again (`batchItemFailures`), as
/// the event source mapping does; returns how many were asked again.
async fn settle(
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
    messages: &[Message],
    answer: &Value,
) -> usize {
    let again = kfs_testkit::batch_item_failures(answer);
    for message in messages {
        if again.contains(&message.message_id().unwrap_or_default()) {
            continue;
        }
        sqs.delete_message()
            .queue_url(queue_url)
            .receipt_handle(message.receipt_handle().unwrap_or_default())
            .send()
            .await
            .unwrap_or_else(|e| panic!("delete: {e:?}"));
    }
    again.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wakeup_freshness() {
    let minutes = env_number("KFS_BENCH_MINUTES", 0.1);
    let rate = env_number("KFS_BENCH_RATE", 2.0);
    let min_interval = Duration::from_secs_f64(env_number("KFS_BENCH_MIN_INTERVAL", 5.0));
    let tick_every = Duration::from_secs_f64(env_number("KFS_BENCH_TICK_SECONDS", 60.0));
    let stack = Arc::new(LocalStack::start());
    let (sqs, segment_queue) = stack.segment_event_queue().await;
    let (_, wakeup_queue) = stack.wakeup_queue().await;
    let catalog = stack.catalog_handle().await;
    let wakeups = Arc::new(kfs_aws::SqsWakeups::new(sqs.clone(), wakeup_queue.clone()));
    let converter = Arc::new(
        stack
            .converter(catalog.clone(), 4)
            .with_wakeups(wakeups.clone()),
    );
    let committer = Arc::new(Committer {
        source: stack.source(),
        catalog: catalog.clone(),
        ledger: stack.ledger(),
        config: PipelineConfig {
            table_concurrency: 4,
            ..PipelineConfig::default()
        },
        etcd: kfs_etcd::EtcdConnection::plain(Vec::new()),
        maintenance: Some(kfs_core::TickMaintenance {
            policy: kfs_core::MaintenancePolicy::default(),
            storage: kfs_core::MaintenanceStorage {
                s3: stack.s3.clone(),
                warehouse: stack.warehouse.clone(),
            },
        }),
        tick_log: None,
        pacing: Some(Pacing {
            queue: wakeups,
            min_interval,
        }),
    });
    // Set once the producer is done, then once the converter has drained its queue.
    let produced_all = Arc::new(AtomicBool::new(false));
    let converted_all = Arc::new(AtomicBool::new(false));
    let held = Arc::new(AtomicU64::new(0));
    let committed_all = Arc::new(AtomicBool::new(false));

    // The producer: (partition, last offset, uploaded at) of every segment.
    let producer = {
        let (stack, produced_all) = (stack.clone(), produced_all.clone());
        tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let mut uploaded = Vec::new();
            let mut next = [0i64; PARTITIONS as usize];
            let mut n = 0u64;
            while started.elapsed() < Duration::from_secs_f64(minutes * 60.0) {
                let partition = (n % PARTITIONS as u64) as usize;
                let base = next[partition];
                let stem = format!("default/orders/{partition}/segment-{base:020}");
                let segment = sample_segment(base, RECORDS, b'v');
                stack.put(&[
                    (&format!("{stem}.kfs"), &segment.kfs),
                    (&format!("{stem}.index"), &segment.index),
                ]);
                uploaded.push((partition as i64, base + RECORDS - 1, now_s()));
                next[partition] += RECORDS;
                n += 1;
                let due = started + Duration::from_secs_f64(n as f64 / rate);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
            }
            produced_all.store(true, Ordering::SeqCst);
            uploaded
        })
    };
    // The converter: the segment queue's batches, as its event source mapping hands them.
    let converting = {
        let (converter, sqs) = (converter.clone(), sqs.clone());
        let (produced_all, converted_all) = (produced_all.clone(), converted_all.clone());
        async move {
            loop {
                let mut batch = receive(&sqs, &segment_queue, 10, 1).await;
                if batch.is_empty() {
                    if produced_all.load(Ordering::SeqCst)
                        && queue_empty(&sqs, &segment_queue).await
                    {
                        break;
                    }
                    continue;
                }
                let window = Instant::now() + WINDOW;
                while batch.len() < BATCH && Instant::now() < window {
                    batch.extend(receive(&sqs, &segment_queue, 10, 0).await);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                let answer = kfs_converter::handle(&converter, &sqs_event(&batch))
                    .await
                    .unwrap_or_else(|e| panic!("converter: {e}"));
                assert_eq!(answer, json!({"batchItemFailures": []}));
                settle(&sqs, &segment_queue, &batch, &answer).await;
            }
            converted_all.store(true, Ordering::SeqCst);
        }
    };
    // The schedule: a tick with maintenance every `tick_every`, until the wake-ups are
    // done.
    let scheduling = {
        let (committer, committed_all) = (committer.clone(), committed_all.clone());
        async move {
            let mut next = Instant::now() + tick_every;
            while !committed_all.load(Ordering::SeqCst) {
                if Instant::now() < next {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                let deadline = Instant::now() + Duration::from_secs(120);
                let tick = handle(&committer, &json!({}), deadline)
                    .await
                    .unwrap_or_else(|e| panic!("schedule: {e}"));
                assert_eq!(tick["failed_tables"], json!({}), "{tick}");
                next += tick_every;
            }
        }
    };
    // The committer: FIFO batches of wake-ups, as the event source mapping hands them.
    let committing = {
        let (committer, sqs, held) = (committer.clone(), sqs.clone(), held.clone());
        let committed_all = committed_all.clone();
        async move {
            loop {
                let messages = receive(&sqs, &wakeup_queue, 10, 1).await;
                if messages.is_empty() {
                    // Nothing waits or is held, and nothing more will be announced.
                    if converted_all.load(Ordering::SeqCst)
                        && queue_empty(&sqs, &wakeup_queue).await
                    {
                        break;
                    }
                    continue;
                }
                let deadline = Instant::now() + Duration::from_secs(120);
                let answer = handle(&committer, &sqs_event(&messages), deadline)
                    .await
                    .unwrap_or_else(|e| panic!("committer: {e}"));
                let again = settle(&sqs, &wakeup_queue, &messages, &answer).await;
                held.fetch_add(again as u64, Ordering::SeqCst);
            }
            committed_all.store(true, Ordering::SeqCst);
        }
    };
    // The converter's loop ends when the producer is done and its queue is empty; the
    // committer's when the wake-up queue is empty after the converter's last send.
    let (uploaded, (), (), ()) = tokio::join!(producer, converting, committing, scheduling);
    let uploaded = uploaded.unwrap_or_else(|e| panic!("producer: {e}"));

    let table = load_table(catalog.catalog.as_ref(), "kafscale.orders").await;
    let mut moves: Vec<(f64, BTreeMap<i64, i64>)> = table
        .metadata()
        .snapshots()
        .filter_map(|s| {
            let offsets = s.summary().additional_properties.get("kfs.offsets")?;
            let offsets: BTreeMap<i64, i64> =
                serde_json::from_str::<BTreeMap<String, i64>>(offsets)
                    .ok()?
                    .into_iter()
                    .filter_map(|(p, next)| Some((p.parse().ok()?, next)))
                    .collect();
            Some((s.timestamp_ms() as f64 / 1000.0, offsets))
        })
        .collect();
    moves.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut latencies: Vec<f64> = uploaded
        .iter()
        .filter_map(|(partition, last, at)| {
            let seen = moves
                .iter()
                .find(|(_, offsets)| offsets.get(partition).is_some_and(|next| next > last))?;
            Some((seen.0 - at).max(0.0))
        })
        .collect();
    let snapshots = table.metadata().snapshots().count();
    let manifests = match table.metadata().current_snapshot() {
        Some(current) => table
            .manifest_list_reader(current)
            .load()
            .await
            .map(|list| list.entries().len())
            .unwrap_or_else(|e| panic!("manifest list: {e}")),
        None => 0,
    };
    let data_files = kfs_core::live_entries(&table)
        .await
        .unwrap_or_else(|e| panic!("live files: {e}"))
        .len();
    let commits = table
        .metadata()
        .snapshots()
        .filter(|s| s.summary().operation == iceberg::spec::Operation::Append)
        .count();
    let (rows, _) = table_contents(catalog.catalog.as_ref(), "kafscale.orders").await;
    assert_eq!(latencies.len(), uploaded.len(), "segments never visible");
    assert_eq!(rows, uploaded.len() as u64 * RECORDS as u64, "rows");
    println!(
        "wakeup_freshness: {} segments over {minutes} min at {rate}/s, a commit at most every {:.0} s: p50 {:.2} s, p95 {:.2} s, p99 {:.2} s, max {:.2} s; {:.1} commits/min, {} wake-ups held; at the end {snapshots} snapshots, {manifests} manifests, {data_files} data files",
        uploaded.len(),
        min_interval.as_secs_f64(),
        percentile(&mut latencies, 50.0),
        percentile(&mut latencies, 95.0),
        percentile(&mut latencies, 99.0),
        percentile(&mut latencies, 100.0),
        commits as f64 / minutes,
        held.load(Ordering::SeqCst),
    );
}

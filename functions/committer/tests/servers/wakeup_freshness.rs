//! Upload-to-visible latency of the Lambda path with
//! wake-ups, through the real handlers, on moto's S3, DynamoDB and SQS (FIFO).
//!
//! A producer uploads a segment every `1 / KFS_BENCH_RATE` seconds (default 2 a
//! second), round robin over 4 partitions, for `KFS_BENCH_MINUTES` (default 0.1: a few seconds in the test run; the figures
//! of docs/performance.md ran 2 minutes); each
//! upload's S3 event goes to the converter's handler, batched as the segment queue's
//! event source would (what arrived in the last 200 ms), with the stack's wake-up
//! queue; a committer loop long-polls the FIFO queue (1 s) and hands each batch to the
//! committer's handler, deleting what it does not ask to see again, as the event source
//! mapping does. Latency of a segment: from its upload to the commit time of the first
//! snapshot whose `kfs.offsets` summary passes its last offset. Prints p50, p95, p99,
//! max, commits per minute and the snapshots; asserts that every segment became
//! visible and every offset landed once, never a timing.
//!
//! `KFS_BENCH_MINUTES=2 cargo test -p kfs-committer --test integration -- servers::wakeup_freshness --nocapture`

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kfs_committer::{Committer, handle};
use kfs_core::PipelineConfig;
use kfs_testkit::{LocalStack, load_table, s3_events_in_sqs, sample_segment, table_contents};
use serde_json::{Value, json};

/// Records per segment.
const RECORDS: i64 = 20;
/// Partitions the producer writes to.
const PARTITIONS: i64 = 4;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wakeup_freshness() {
    let minutes = env_number("KFS_BENCH_MINUTES", 0.1);
    let rate = env_number("KFS_BENCH_RATE", 2.0);
    let stack = Arc::new(LocalStack::start());
    let (sqs, queue_url) = stack.wakeup_queue().await;
    let catalog = stack.catalog_handle().await;
    let converter = Arc::new(stack.converter(catalog.clone(), 4).with_wakeups(Arc::new(
        kfs_aws::SqsWakeups::new(sqs.clone(), queue_url.clone()),
    )));
    let committer = Arc::new(Committer {
        source: stack.source(),
        catalog: catalog.clone(),
        ledger: stack.ledger(),
        config: PipelineConfig {
            table_concurrency: 4,
            ..PipelineConfig::default()
        },
        etcd: kfs_etcd::EtcdConnection::plain(Vec::new()),
        maintenance: None,
        tick_log: None,
    });
    // Set once the converter has handled the last upload (its wake-ups sent).
    let converted_all = Arc::new(AtomicBool::new(false));
    let (events, mut arrived) = tokio::sync::mpsc::unbounded_channel::<String>();

    // The producer: (partition, last offset, uploaded at) of every segment.
    let producer = {
        let stack = stack.clone();
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
                let _ = events.send(format!("{stem}.index"));
                next[partition] += RECORDS;
                n += 1;
                let due = started + Duration::from_secs_f64(n as f64 / rate);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
            }
            uploaded
        })
    };
    // The converter: what arrived in the last 200 ms, one invocation.
    let converting = {
        let (converter, converted_all) = (converter.clone(), converted_all.clone());
        async move {
            while let Some(first) = arrived.recv().await {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let mut keys = vec![first];
                while let Ok(key) = arrived.try_recv() {
                    keys.push(key);
                }
                let answer = kfs_converter::handle(&converter, &s3_events_in_sqs(&keys))
                    .await
                    .unwrap_or_else(|e| panic!("converter: {e}"));
                assert_eq!(answer, json!({"batchItemFailures": []}));
            }
            converted_all.store(true, Ordering::SeqCst);
        }
    };
    // The committer: FIFO batches of wake-ups, as the event source mapping hands them.
    let committing = {
        let (committer, sqs) = (committer.clone(), sqs.clone());
        async move {
            let mut drained = false;
            loop {
                let received = sqs
                    .receive_message()
                    .queue_url(&queue_url)
                    .max_number_of_messages(10)
                    .wait_time_seconds(1)
                    .send()
                    .await
                    .unwrap_or_else(|e| panic!("receive: {e:?}"));
                let messages = received.messages();
                if messages.is_empty() {
                    // Nothing waits, and nothing more will be announced: a second
                    // empty poll after the last wake-up was sent, so none is in flight.
                    if converted_all.load(Ordering::SeqCst) {
                        if drained {
                            break;
                        }
                        drained = true;
                    }
                    continue;
                }
                drained = false;
                let records: Vec<Value> = messages
                    .iter()
                    .map(|m| {
                        json!({"messageId": m.message_id(), "body": m.body(), "eventSource": "aws:sqs"})
                    })
                    .collect();
                let deadline = Instant::now() + Duration::from_secs(120);
                let answer = handle(&committer, &json!({ "Records": records }), deadline)
                    .await
                    .unwrap_or_else(|e| panic!("committer: {e}"));
                assert_eq!(answer, json!({"batchItemFailures": []}));
                for message in messages {
                    sqs.delete_message()
                        .queue_url(&queue_url)
                        .receipt_handle(message.receipt_handle().unwrap_or_default())
                        .send()
                        .await
                        .unwrap_or_else(|e| panic!("delete: {e:?}"));
                }
            }
        }
    };
    // The converter's loop ends when the producer hangs up; the committer's when the
    // queue is empty after the converter's last wake-up.
    let (uploaded, (), ()) = tokio::join!(producer, converting, committing);
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
    let snapshots = moves.len();
    let (rows, _) = table_contents(catalog.catalog.as_ref(), "kafscale.orders").await;
    assert_eq!(latencies.len(), uploaded.len(), "segments never visible");
    assert_eq!(rows, uploaded.len() as u64 * RECORDS as u64, "rows");
    println!(
        "wakeup_freshness: {} segments over {minutes} min at {rate}/s: p50 {:.2} s, p95 {:.2} s, p99 {:.2} s, max {:.2} s; {snapshots} snapshots, {:.1} commits/min",
        uploaded.len(),
        percentile(&mut latencies, 50.0),
        percentile(&mut latencies, 95.0),
        percentile(&mut latencies, 99.0),
        percentile(&mut latencies, 100.0),
        snapshots as f64 / minutes,
    );
}

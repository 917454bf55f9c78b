//! Wake-ups: a batch of SQS FIFO messages from the converter (`kfs_plan::wakeup`),
//! each naming a table that has pending work. The committer runs one tick for the
//! tables the batch names, without maintenance (the schedule's ticks maintain), and
//! answers with the messages to deliver again: those of the tables whose commit failed
//! (all of a table's, which is all of its message group's, so the group's order
//! holds). A message that is no wake-up is logged and dropped: a wake-up is a hint,
//! and the schedule's sweep commits whatever one would have.
//!
//! With [`Pacing`], a table's wake-ups that come sooner than its minimum interval
//! after its last commit are held in the queue for the rest of it
//! ([`kfs_core::hold_early`]) and answered as failures, so the queue delivers them
//! again, with whatever piled up behind them in the table's group, once the table
//! may commit: at most one commit per table and interval, whatever the rate of
//! conversions.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kfs_core::{Ledger, Paced, PipelineConfig, SegmentSource, WakeupQueue, hold_early, now_ms};
use kfs_plan::wakeup::Wakeup;
use serde_json::{Value, json};

use crate::{Committer, TickError, tick_within};

/// How the committer paces wake-ups: the queue they came from, which holds the early
/// ones, and the least time between two commits of a table.
#[derive(Clone)]
pub struct Pacing {
    /// The wake-up queue.
    pub queue: Arc<dyn WakeupQueue>,
    /// The least time between two commits of a table (zero: no pacing).
    pub min_interval: Duration,
}

/// One SQS message of a wake-up batch: its id, receipt and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The message id (`itemIdentifier` when it is to be delivered again).
    pub id: String,
    /// The receipt handle (what holds it in the queue).
    pub receipt: String,
    /// The body, as sent.
    pub body: String,
}

/// The messages of `event` when it is an SQS batch; `None` for any other event (a
/// schedule's tick).
pub fn messages_of(event: &Value) -> Option<Vec<Message>> {
    let records = event.get("Records")?.as_array()?;
    let from_sqs = records
        .first()
        .and_then(|r| r.get("eventSource"))
        .and_then(Value::as_str)
        == Some("aws:sqs");
    if !from_sqs {
        return None;
    }
    Some(
        records
            .iter()
            .map(|record| {
                let text = |field: &str| {
                    record
                        .get(field)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                Message {
                    id: text("messageId"),
                    receipt: text("receiptHandle"),
                    body: text("body"),
                }
            })
            .collect(),
    )
}

/// Runs the tick a batch of wake-ups asks for, for the tables that may commit now;
/// answers `{"batchItemFailures": [...]}`: the messages of the tables held for their
/// interval and of those whose commit failed.
pub async fn handle<S: SegmentSource, L: Ledger>(
    committer: &Committer<S, L>,
    messages: &[Message],
    deadline: Instant,
) -> Result<Value, TickError> {
    let mut by_table: BTreeMap<String, Vec<&Message>> = BTreeMap::new();
    for message in messages {
        match Wakeup::parse(&message.body) {
            Ok(wakeup) => by_table.entry(wakeup.table).or_default().push(message),
            Err(reason) => {
                tracing::warn!(message_id = %message.id, reason = %reason, "not a wake-up: dropped (the schedule commits what it would have)");
            }
        }
    }
    let held = hold(committer, &by_table).await;
    let due: Vec<String> = by_table
        .keys()
        .filter(|table| !held.contains(*table))
        .cloned()
        .collect();
    let mut again: BTreeSet<String> = held.into_iter().collect();
    if !due.is_empty() {
        tracing::info!(tables = ?due, "committer woken");
        let config = PipelineConfig {
            only_tables: Some(due.into_iter().collect()),
            ..committer.config.clone()
        };
        let report = tick_within(committer, config, None, deadline).await?;
        again.extend(report.pass.failed_tables.into_keys());
    }
    let failures: Vec<Value> = by_table
        .iter()
        .filter(|(table, _)| again.contains(*table))
        .flat_map(|(_, messages)| messages.iter())
        .map(|message| json!({ "itemIdentifier": message.id }))
        .collect();
    Ok(json!({ "batchItemFailures": failures }))
}

/// The tables whose wake-ups [`Pacing`] held in the queue (none without it).
async fn hold<S, L>(
    committer: &Committer<S, L>,
    by_table: &BTreeMap<String, Vec<&Message>>,
) -> Vec<String> {
    let Some(pacing) = &committer.pacing else {
        return Vec::new();
    };
    let receipts: BTreeMap<String, Vec<String>> = by_table
        .iter()
        .map(|(table, messages)| {
            let receipts = messages.iter().map(|m| m.receipt.clone()).collect();
            (table.clone(), receipts)
        })
        .collect();
    let paced = hold_early(
        committer.catalog.catalog.as_ref(),
        pacing.queue.as_ref(),
        &receipts,
        pacing.min_interval,
        now_ms(),
    )
    .await;
    let mut held = Vec::new();
    for (table, outcome) in paced {
        match outcome {
            Paced::Due => {}
            Paced::Held(seconds) => {
                tracing::info!(table = %table, seconds, "wake-up held: the table committed less than its minimum interval ago");
                held.push(table);
            }
            Paced::Unpaced(reason) => {
                tracing::warn!(table = %table, reason = %reason, "wake-up not paced: committing now");
            }
        }
    }
    held
}

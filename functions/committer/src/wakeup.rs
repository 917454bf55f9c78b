//! Wake-ups: a batch of SQS FIFO messages from the converter (`kfs_plan::wakeup`),
//! each naming a table that has pending work. The committer runs one tick for the
//! tables the batch names, without maintenance (the schedule's ticks maintain), and
//! answers with the messages to deliver again: those of the tables whose commit failed
//! (all of a table's, which is all of its message group's, so the group's order
//! holds). A message that is no wake-up is logged and dropped: a wake-up is a hint,
//! and the schedule's sweep commits whatever one would have.

use std::collections::BTreeMap;
use std::time::Instant;

use kfs_core::{Ledger, PipelineConfig, SegmentSource};
use kfs_plan::wakeup::Wakeup;
use serde_json::{Value, json};

use crate::{Committer, TickError, tick_within};

/// One SQS message of a wake-up batch: its id and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The message id (`itemIdentifier` when it is to be delivered again).
    pub id: String,
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
                    body: text("body"),
                }
            })
            .collect(),
    )
}

/// Runs the tick a batch of wake-ups asks for; answers `{"batchItemFailures": [...]}`.
pub async fn handle<S: SegmentSource, L: Ledger>(
    committer: &Committer<S, L>,
    messages: &[Message],
    deadline: Instant,
) -> Result<Value, TickError> {
    let mut by_table: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for message in messages {
        match Wakeup::parse(&message.body) {
            Ok(wakeup) => by_table.entry(wakeup.table).or_default().push(&message.id),
            Err(reason) => {
                tracing::warn!(message_id = %message.id, reason = %reason, "not a wake-up: dropped (the schedule commits what it would have)");
            }
        }
    }
    if by_table.is_empty() {
        return Ok(json!({ "batchItemFailures": [] }));
    }
    tracing::info!(tables = ?by_table.keys().collect::<Vec<_>>(), "committer woken");
    let config = PipelineConfig {
        only_tables: Some(by_table.keys().cloned().collect()),
        ..committer.config.clone()
    };
    let report = tick_within(committer, config, None, deadline).await?;
    let failures: Vec<Value> = by_table
        .iter()
        .filter(|(table, _)| report.pass.failed_tables.contains_key(*table))
        .flat_map(|(_, ids)| ids.iter())
        .map(|id| json!({ "itemIdentifier": id }))
        .collect();
    Ok(json!({ "batchItemFailures": failures }))
}

//! The converter function's handler: maps the three ways segment events arrive (SQS
//! messages holding S3 notifications or EventBridge events, direct S3 notifications,
//! EventBridge events) onto the converter service, and reports SQS failures per
//! message (`ReportBatchItemFailures`) so one bad message never redelivers the batch.

use std::collections::BTreeMap;
use std::time::Instant;

use kfs_aws::emf::MetricSet;
use kfs_core::Ledger;
use kfs_core::SegmentSource;
use kfs_core::{ConverterService, ObjectOutcome};
use kfs_core::{PipelineError, now_ms};
use kfs_plan::events::{
    EventBody, EventError, ObjectCreated, parse_eventbridge, parse_s3_notification,
};
use serde_json::{Value, json};

/// How the invocation arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    /// An SQS batch: each message id with what its body announces.
    Sqs(Vec<(String, Result<EventBody, EventError>)>),
    /// A direct S3 notification or an EventBridge event.
    Direct(EventBody),
}

/// Reads an event body that is either an S3 notification or an EventBridge event.
fn parse_body(body: &Value) -> Result<EventBody, EventError> {
    if body.get("detail-type").is_some() {
        parse_eventbridge(body)
    } else {
        parse_s3_notification(body)
    }
}

/// Recognises the trigger of an invocation.
pub fn classify(event: &Value) -> Result<Trigger, EventError> {
    let records = event.get("Records").and_then(Value::as_array);
    let first_source = records
        .and_then(|r| r.first())
        .and_then(|r| r.get("eventSource"))
        .and_then(Value::as_str);
    if first_source == Some("aws:sqs") {
        let messages = records
            .into_iter()
            .flatten()
            .map(|record| {
                let id = record
                    .get("messageId")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let body = record
                    .get("body")
                    .and_then(Value::as_str)
                    .ok_or_else(|| EventError("SQS message without a body".into()))
                    .and_then(|text| {
                        serde_json::from_str::<Value>(text).map_err(|e| EventError(e.to_string()))
                    })
                    .and_then(|body| parse_body(&body));
                (id, body)
            })
            .collect();
        return Ok(Trigger::Sqs(messages));
    }
    parse_body(event).map(Trigger::Direct)
}

/// Tally of what happened to the objects of one invocation.
#[derive(Debug, Default)]
struct Tally {
    counts: BTreeMap<&'static str, u64>,
    records: u64,
    /// Wake-ups sent to the committer, and sends that failed.
    wakeups: (usize, u32),
}

impl Tally {
    fn add(&mut self, outcome: &Result<ObjectOutcome, PipelineError>) {
        let kind = match outcome {
            Ok(ObjectOutcome::Converted { records, .. }) => {
                self.records += records;
                "converted"
            }
            Ok(ObjectOutcome::Quarantined { segment, error }) => {
                tracing::error!(segment = %segment, error = %error, "segment quarantined");
                "quarantined"
            }
            Ok(ObjectOutcome::Duplicate { .. }) => "duplicates",
            Ok(ObjectOutcome::Rewritten { segment }) => {
                tracing::error!(segment = %segment, "segment key rewritten with different content; quarantined");
                "rewritten"
            }
            Ok(ObjectOutcome::Incomplete { .. }) => "incomplete",
            Ok(ObjectOutcome::Ignored { .. }) => "ignored",
            Err(e) => {
                tracing::warn!(error = %e, kind = %e.kind(), "segment not converted");
                "failed"
            }
        };
        *self.counts.entry(kind).or_default() += 1;
    }

    fn count(&self, kind: &str) -> u64 {
        self.counts.get(kind).copied().unwrap_or(0)
    }

    fn emit(&self, started: Instant) {
        MetricSet::new(&[("Function", "converter")])
            .put("SegmentsConverted", self.count("converted") as f64, "Count")
            .put("RecordsConverted", self.records as f64, "Count")
            .put(
                "SegmentsQuarantined",
                self.count("quarantined") as f64,
                "Count",
            )
            .put("SegmentsRewritten", self.count("rewritten") as f64, "Count")
            .put("WakeupsSent", self.wakeups.0 as f64, "Count")
            .put("WakeupFailures", f64::from(self.wakeups.1), "Count")
            .put("ConversionFailures", self.count("failed") as f64, "Count")
            .put(
                "ConversionTime",
                started.elapsed().as_millis() as f64,
                "Milliseconds",
            )
            .emit(now_ms());
    }

    fn summary(&self) -> Value {
        let mut summary = serde_json::Map::new();
        for (kind, count) in &self.counts {
            summary.insert((*kind).to_owned(), json!(count));
        }
        summary.insert("records".into(), json!(self.records));
        Value::Object(summary)
    }
}

/// A failure the invocation reports to Lambda, which retries the event.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// The event is not one the converter understands.
    #[error("unrecognised event: {0}")]
    Event(#[from] EventError),
    /// Some objects failed for a reason that may pass; the event is retried.
    #[error("{failed} object(s) failed and will be retried: {first}")]
    Retry {
        /// How many failed.
        failed: usize,
        /// The first error.
        first: String,
    },
}

/// Wakes the committer for the tables `outcomes` gave pending work to (when the
/// service has a wake-up queue): what was sent, and whether sending failed. A failure
/// is logged and counted, never the event's: the segments are pending, and the
/// schedule commits them.
async fn announce<S: SegmentSource, L: Ledger>(
    service: &ConverterService<S, L>,
    outcomes: &[Result<ObjectOutcome, PipelineError>],
) -> (usize, u32) {
    match service.announce(outcomes).await {
        Ok(sent) => (sent, 0),
        Err(e) => {
            tracing::warn!(error = %e, kind = %e.kind, "committer not woken: the schedule commits these segments");
            (0, 1)
        }
    }
}

/// Handles one invocation. SQS batches answer with `batchItemFailures`; direct events
/// return an error when an object failed for a reason that may pass, so Lambda retries.
pub async fn handle<S: SegmentSource, L: Ledger>(
    service: &ConverterService<S, L>,
    event: &Value,
) -> Result<Value, HandlerError> {
    let started = Instant::now();
    let mut tally = Tally::default();
    match classify(event)? {
        Trigger::Sqs(messages) => {
            let mut objects: Vec<ObjectCreated> = Vec::new();
            let mut owners: Vec<usize> = Vec::new();
            let mut failed: Vec<bool> = vec![false; messages.len()];
            for (i, (id, body)) in messages.iter().enumerate() {
                match body {
                    Ok(EventBody::Created(created)) => {
                        owners.extend(std::iter::repeat_n(i, created.len()));
                        objects.extend(created.iter().cloned());
                    }
                    Ok(EventBody::TestEvent | EventBody::Other(_)) => {}
                    Err(e) => {
                        // Redelivered until the queue moves it to the dead-letter queue.
                        tracing::error!(message_id = %id, error = %e, "unreadable message");
                        failed[i] = true;
                    }
                }
            }
            let outcomes = service.handle(&objects).await;
            tally.wakeups = announce(service, &outcomes).await;
            for (outcome, owner) in outcomes.iter().zip(owners) {
                tally.add(outcome);
                if outcome.is_err() {
                    failed[owner] = true;
                }
            }
            tally.emit(started);
            let failures: Vec<Value> = messages
                .iter()
                .zip(failed)
                .filter(|(_, f)| *f)
                .map(|((id, _), _)| json!({"itemIdentifier": id}))
                .collect();
            Ok(json!({"batchItemFailures": failures}))
        }
        Trigger::Direct(EventBody::Created(objects)) => {
            let outcomes = service.handle(&objects).await;
            tally.wakeups = announce(service, &outcomes).await;
            outcomes.iter().for_each(|o| tally.add(o));
            tally.emit(started);
            let errors: Vec<&PipelineError> =
                outcomes.iter().filter_map(|o| o.as_ref().err()).collect();
            match errors.first() {
                Some(first) => Err(HandlerError::Retry {
                    failed: errors.len(),
                    first: first.to_string(),
                }),
                None => Ok(tally.summary()),
            }
        }
        Trigger::Direct(EventBody::TestEvent | EventBody::Other(_)) => Ok(tally.summary()),
    }
}

//! The committer's wake-up queue on SQS FIFO (`WAKEUP_QUEUE_URL`): each announcement
//! a message of its table's group, deduplicated by its segments
//! (`kfs_plan::wakeup`), sent ten to a request. The converter sends; the queue's
//! event source mapping invokes the committer, one invocation per table at a time.
//! The committer holds the wake-ups that came before a table's minimum interval
//! (`ChangeMessageVisibilityBatch`, ten to a request).

use aws_sdk_sqs::types::{ChangeMessageVisibilityBatchRequestEntry, SendMessageBatchRequestEntry};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use kfs_core::{Announcement, ErrorKind, WakeupError, WakeupQueue};

use crate::error::aws_error_kind;

/// Most messages of one `SendMessageBatch` request.
const MESSAGES_PER_REQUEST: usize = 10;

/// The wake-up queue of a deployment.
#[derive(Debug, Clone)]
pub struct SqsWakeups {
    client: aws_sdk_sqs::Client,
    queue_url: String,
}

impl SqsWakeups {
    /// The FIFO queue at `queue_url`.
    pub fn new(client: aws_sdk_sqs::Client, queue_url: String) -> Self {
        Self { client, queue_url }
    }

    /// The error of a request the queue answered with an error.
    fn request_error<E>(&self, e: &aws_sdk_sqs::error::SdkError<E, HttpResponse>) -> WakeupError
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        WakeupError {
            kind: aws_error_kind(e),
            message: format!(
                "{}: {}",
                self.queue_url,
                aws_sdk_sqs::error::DisplayErrorContext(e)
            ),
        }
    }

    /// The error of a batch the queue took with `refused` of its `entries` refused
    /// (the first's code and message). A sender's fault (a malformed entry, a queue
    /// that is no FIFO queue, a receipt that expired) stays; anything else may pass.
    fn refused_error(
        &self,
        refused: usize,
        entries: usize,
        first: &aws_sdk_sqs::types::BatchResultErrorEntry,
    ) -> WakeupError {
        WakeupError {
            kind: if first.sender_fault() {
                ErrorKind::Config
            } else {
                ErrorKind::Transient
            },
            message: format!(
                "{}: {refused} of {entries} entries refused, the first: {} {}",
                self.queue_url,
                first.code(),
                first.message().unwrap_or_default()
            ),
        }
    }
}

/// A batch entry that could not be built (a missing field: our bug, not the queue's).
fn malformed(e: aws_sdk_sqs::error::BuildError) -> WakeupError {
    WakeupError {
        kind: ErrorKind::Config,
        message: e.to_string(),
    }
}

#[async_trait::async_trait]
impl WakeupQueue for SqsWakeups {
    async fn send(&self, announcements: &[Announcement]) -> Result<(), WakeupError> {
        for chunk in announcements.chunks(MESSAGES_PER_REQUEST) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(at, (wakeup, deduplication_id))| {
                    SendMessageBatchRequestEntry::builder()
                        .id(at.to_string())
                        .message_body(wakeup.body())
                        .message_group_id(wakeup.group_id())
                        .message_deduplication_id(deduplication_id)
                        .build()
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(malformed)?;
            let sent = self
                .client
                .send_message_batch()
                .queue_url(&self.queue_url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| self.request_error(&e))?;
            if let Some(first) = sent.failed().first() {
                return Err(self.refused_error(sent.failed().len(), chunk.len(), first));
            }
        }
        Ok(())
    }

    async fn hold(&self, receipts: &[&str], seconds: u32) -> Result<(), WakeupError> {
        let seconds = i32::try_from(seconds).unwrap_or(i32::MAX);
        for chunk in receipts.chunks(MESSAGES_PER_REQUEST) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(at, receipt)| {
                    ChangeMessageVisibilityBatchRequestEntry::builder()
                        .id(at.to_string())
                        .receipt_handle(*receipt)
                        .visibility_timeout(seconds)
                        .build()
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(malformed)?;
            let changed = self
                .client
                .change_message_visibility_batch()
                .queue_url(&self.queue_url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| self.request_error(&e))?;
            if let Some(first) = changed.failed().first() {
                return Err(self.refused_error(changed.failed().len(), chunk.len(), first));
            }
        }
        Ok(())
    }
}

//! The committer's wake-up queue on SQS FIFO (`WAKEUP_QUEUE_URL`): each announcement
//! a message of its table's group, deduplicated by its segments
//! (`kfs_plan::wakeup`), sent ten to a request. The converter sends; the queue's
//! event source mapping invokes the committer, one invocation per table at a time.

use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
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
                .map_err(|e| WakeupError {
                    kind: ErrorKind::Config,
                    message: e.to_string(),
                })?;
            let sent = self
                .client
                .send_message_batch()
                .queue_url(&self.queue_url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| WakeupError {
                    kind: aws_error_kind(&e),
                    message: format!(
                        "{}: {}",
                        self.queue_url,
                        aws_sdk_sqs::error::DisplayErrorContext(&e)
                    ),
                })?;
            if let Some(failed) = sent.failed().first() {
                // A sender's fault (a malformed message, a queue that is no FIFO
                // queue) stays; anything else may pass.
                return Err(WakeupError {
                    kind: if failed.sender_fault() {
                        ErrorKind::Config
                    } else {
                        ErrorKind::Transient
                    },
                    message: format!(
                        "{}: {} of {} messages refused, the first: {} {}",
                        self.queue_url,
                        sent.failed().len(),
                        chunk.len(),
                        failed.code(),
                        failed.message().unwrap_or_default()
                    ),
                });
            }
        }
        Ok(())
    }
}

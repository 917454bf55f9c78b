//! The committer's wake-up queue as the converter sees it: where it announces the
//! tables it has just left pending work in (`kfs_plan::wakeup`), so that they are
//! committed in seconds rather than at the schedule's next tick. An SQS FIFO queue at
//! the AWS edge (`kfs-aws`), a queue in memory here.
//!
//! Announcing is best effort: the segment is already pending in the ledger, and a
//! wake-up that cannot be sent only leaves its commit to the schedule. A failed send
//! never fails the conversion (which would convert the segment again for nothing).

use std::collections::BTreeMap;
use std::sync::Mutex;

use kfs_catalog::fault::ErrorKind;
use kfs_plan::keys::SegmentKey;
use kfs_plan::naming::TableNaming;
use kfs_plan::wakeup::{Wakeup, deduplication_id};

/// A wake-up to send: the table's message and its deduplication id.
pub type Announcement = (Wakeup, String);

/// Sending wake-ups failed.
#[derive(Debug, thiserror::Error)]
#[error("wake-ups not sent ({kind}): {message}")]
pub struct WakeupError {
    /// What the failure means (given where the queue's error entered).
    pub kind: ErrorKind,
    /// The queue's error.
    pub message: String,
}

/// Where the converter announces the tables it left pending work in.
#[async_trait::async_trait]
pub trait WakeupQueue: Send + Sync {
    /// Sends each announcement (its table's message group, its deduplication id).
    async fn send(&self, announcements: &[Announcement]) -> Result<(), WakeupError>;
}

/// A wake-up queue in memory: what was sent, in order (tests).
#[derive(Debug, Default)]
pub struct MemoryWakeups {
    sent: Mutex<Vec<Announcement>>,
}

impl MemoryWakeups {
    /// Everything sent so far.
    pub fn sent(&self) -> Vec<Announcement> {
        self.sent
            .lock()
            .map(|sent| sent.clone())
            .unwrap_or_default()
    }
}

#[async_trait::async_trait]
impl WakeupQueue for MemoryWakeups {
    async fn send(&self, announcements: &[Announcement]) -> Result<(), WakeupError> {
        let mut sent = self.sent.lock().map_err(|_| WakeupError {
            kind: ErrorKind::Transient,
            message: "the memory queue's lock is poisoned".into(),
        })?;
        sent.extend(announcements.iter().cloned());
        Ok(())
    }
}

/// The announcements for the segments `converted` (keys relative to the source's
/// root): one per table, its deduplication id drawn from the table's segments, so a
/// redelivered batch announces nothing twice within the queue's window. Keys that are
/// not segment keys are left out.
pub fn announcements<'a>(
    naming: &TableNaming,
    converted: impl IntoIterator<Item = &'a str>,
) -> Vec<Announcement> {
    let mut by_table: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for segment in converted {
        if let Some((key, _)) = SegmentKey::parse(segment) {
            by_table
                .entry(naming.table_for(&key.topic).to_string())
                .or_default()
                .push(segment);
        }
    }
    by_table
        .into_iter()
        .map(|(table, mut segments)| {
            segments.sort_unstable();
            let id = deduplication_id(&table, &segments);
            (Wakeup { table }, id)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_announcement_per_table_whatever_the_order() {
        let naming = TableNaming::default();
        let segments = [
            "ns/orders/0/segment-00000000000000000000.kfs",
            "ns/payments/1/segment-00000000000000000010.kfs",
            "ns/orders/1/segment-00000000000000000005.kfs",
            "not a segment",
        ];
        let first = announcements(&naming, segments);
        let tables: Vec<&str> = first.iter().map(|(w, _)| w.table.as_str()).collect();
        assert_eq!(tables, ["kafscale.orders", "kafscale.payments"]);
        let mut reversed = segments;
        reversed.reverse();
        assert_eq!(announcements(&naming, reversed), first);
    }
}

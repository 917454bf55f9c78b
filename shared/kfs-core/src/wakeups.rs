//! The committer's wake-up queue as the converter sees it: where it announces the
//! tables it has just left pending work in (`kfs_plan::wakeup`), so that they are
//! committed in seconds rather than at the schedule's next tick. An SQS FIFO queue at
//! the AWS edge (`kfs-aws`), a queue in memory here.
//!
//! Announcing is best effort: the segment is already pending in the ledger, and a
//! wake-up that cannot be sent only leaves its commit to the schedule. A failed send
//! never fails the conversion (which would convert the segment again for nothing).
//!
//! The committer holds the wake-ups that come sooner than a table's minimum interval
//! after its last commit (`kfs_plan::wakeup::hold_seconds`): they stay in the queue,
//! invisible for the seconds left, and are then delivered again.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use iceberg::Catalog;
use kfs_catalog::fault::ErrorKind;
use kfs_plan::keys::SegmentKey;
use kfs_plan::naming::{TableName, TableNaming};
use kfs_plan::wakeup::{Wakeup, deduplication_id, hold_seconds};

use crate::table::table_ident;

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

/// Where the converter announces the tables it left pending work in, and where the
/// committer holds back the wake-ups that came too soon.
#[async_trait::async_trait]
pub trait WakeupQueue: Send + Sync {
    /// Sends each announcement (its table's message group, its deduplication id).
    async fn send(&self, announcements: &[Announcement]) -> Result<(), WakeupError>;

    /// Keeps the received messages `receipts` (their receipt handles) invisible for
    /// `seconds` from now, after which the queue delivers them again.
    async fn hold(&self, receipts: &[&str], seconds: u32) -> Result<(), WakeupError>;
}

/// A wake-up queue in memory: what was sent and what was held, in order (tests).
#[derive(Debug, Default)]
pub struct MemoryWakeups {
    sent: Mutex<Vec<Announcement>>,
    held: Mutex<Vec<(String, u32)>>,
}

impl MemoryWakeups {
    /// Everything sent so far.
    pub fn sent(&self) -> Vec<Announcement> {
        self.sent
            .lock()
            .map(|sent| sent.clone())
            .unwrap_or_default()
    }

    /// Every hold so far: the receipt and its seconds.
    pub fn held(&self) -> Vec<(String, u32)> {
        self.held
            .lock()
            .map(|held| held.clone())
            .unwrap_or_default()
    }
}

/// The error of a memory queue whose lock a panicking test poisoned.
fn poisoned<T>(_: T) -> WakeupError {
    WakeupError {
        kind: ErrorKind::Transient,
        message: "the memory queue's lock is poisoned".into(),
    }
}

#[async_trait::async_trait]
impl WakeupQueue for MemoryWakeups {
    async fn send(&self, announcements: &[Announcement]) -> Result<(), WakeupError> {
        let mut sent = self.sent.lock().map_err(poisoned)?;
        sent.extend(announcements.iter().cloned());
        Ok(())
    }

    async fn hold(&self, receipts: &[&str], seconds: u32) -> Result<(), WakeupError> {
        let mut held = self.held.lock().map_err(poisoned)?;
        held.extend(receipts.iter().map(|r| ((*r).to_owned(), seconds)));
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

/// What pacing made of a table's wake-ups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Paced {
    /// The interval has passed: commit now.
    Due,
    /// Held in the queue for this many seconds: commit nothing now.
    Held(u32),
    /// Pacing could not tell or could not hold (the reason): commit now, as without it.
    Unpaced(String),
}

/// Holds, in `queue`, the wake-ups of the tables in `receipts` (each table's messages'
/// receipt handles) that came sooner than `min_interval` after the table's last
/// commit (the timestamp of its current snapshot, read from `catalog`), and says
/// for each table what became of its wake-ups. A table whose last commit cannot be
/// read, or whose messages the queue will not hold, commits now, as without pacing.
pub async fn hold_early(
    catalog: &dyn Catalog,
    queue: &dyn WakeupQueue,
    receipts: &BTreeMap<String, Vec<String>>,
    min_interval: Duration,
    now_ms: i64,
) -> BTreeMap<String, Paced> {
    if min_interval.is_zero() {
        return receipts.keys().map(|t| (t.clone(), Paced::Due)).collect();
    }
    let last_commits =
        futures::future::join_all(receipts.keys().map(|table| last_commit_ms(catalog, table)))
            .await;
    let mut paced = BTreeMap::new();
    for ((table, handles), last) in receipts.iter().zip(last_commits) {
        let outcome = match last.map(|last| hold_seconds(last, now_ms, min_interval)) {
            Err(reason) => Paced::Unpaced(format!("last commit unknown: {reason}")),
            Ok(None) => Paced::Due,
            Ok(Some(seconds)) => {
                let handles: Vec<&str> = handles.iter().map(String::as_str).collect();
                match queue.hold(&handles, seconds).await {
                    Ok(()) => Paced::Held(seconds),
                    Err(e) => Paced::Unpaced(e.to_string()),
                }
            }
        };
        paced.insert(table.clone(), outcome);
    }
    paced
}

/// When `table` (`namespace.name`) was last committed: its current snapshot's
/// timestamp; `None` for a table without one (or that does not exist yet).
async fn last_commit_ms(catalog: &dyn Catalog, table: &str) -> Result<Option<i64>, String> {
    let name = TableName::parse(table).ok_or_else(|| format!("{table:?} is no table name"))?;
    // One read: a table that does not exist yet has no last commit.
    let loaded = match catalog.load_table(&table_ident(&name)).await {
        Ok(loaded) => loaded,
        Err(e) if e.kind() == iceberg::ErrorKind::TableNotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    Ok(loaded
        .metadata()
        .current_snapshot()
        .map(|snapshot| snapshot.timestamp_ms()))
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

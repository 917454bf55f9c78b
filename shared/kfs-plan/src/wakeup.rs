//! Wake-ups of the committer: what the converter announces on the committer's queue
//! once it has recorded segments' files as pending (an SQS FIFO message per table
//! and conversion: the table is the message group, its segments the deduplication
//! id), and which tables a batch of such messages asks the committer to
//! commit.
//!
//! A wake-up is a hint, never a fact. A lost one leaves the work to the schedule's
//! sweep; a duplicate, late or reordered one finds nothing pending, or commits what the
//! ledger and the listing say is due, as a scheduled tick would. One message group per
//! table means one committer invocation per table at a time, so wake-ups of one table
//! never race each other (a scheduled tick may still run beside, which the commit's
//! own exactly-once rules allow).
//!
//! A table's commits keep a minimum interval ([`hold_seconds`]): a wake-up that comes
//! sooner after the table's last commit is held in the queue (its visibility pushed
//! out) until the interval has passed, so a table takes at most one commit per interval
//! whatever the rate of conversions, and the wake-ups that pile up behind it in its
//! group are committed together.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::hash::Fnv1a;

/// Most characters of an SQS message group id or deduplication id.
pub const MAX_ID_CHARS: usize = 128;

/// A wake-up: the table whose pending work should be committed now.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Wakeup {
    /// The table, `namespace.name`.
    pub table: String,
}

impl Wakeup {
    /// The message body: `{"table": "…"}`.
    pub fn body(&self) -> String {
        serde_json::json!({ "table": self.table }).to_string()
    }

    /// Reads a message body; `Err` says why it is not a wake-up.
    pub fn parse(body: &str) -> Result<Self, String> {
        let wakeup: Self = serde_json::from_str(body)
            .map_err(|e| format!("not a wake-up ({{\"table\": \"…\"}}): {e}"))?;
        if wakeup.table.is_empty() {
            return Err("a wake-up naming no table".into());
        }
        Ok(wakeup)
    }

    /// The message group: the table's name when SQS accepts it as an id (at most 128
    /// characters, letters, digits and punctuation), else `table-` and its hash.
    pub fn group_id(&self) -> String {
        let acceptable =
            self.table.len() <= MAX_ID_CHARS && self.table.bytes().all(|b| b.is_ascii_graphic());
        if acceptable {
            self.table.clone()
        } else {
            let mut hash = Fnv1a::default();
            hash.write(self.table.as_bytes());
            format!("table-{:016x}", hash.finish())
        }
    }
}

/// The deduplication id of a wake-up of `table` for the segments `segments` (keys,
/// in a stable order): a redelivered conversion of the same segments sends no second
/// message within SQS's five-minute window; other segments send one.
pub fn deduplication_id(table: &str, segments: &[&str]) -> String {
    let mut hash = Fnv1a::default();
    hash.write_field(table.as_bytes());
    for segment in segments {
        hash.write_field(segment.as_bytes());
    }
    format!("segments-{:016x}", hash.finish())
}

/// The tables a batch of message bodies asks to commit, each once, and why the
/// bodies that are not wake-ups were skipped (their body's position and the reason).
pub fn tables_of<'a>(
    bodies: impl IntoIterator<Item = &'a str>,
) -> (BTreeSet<String>, Vec<(usize, String)>) {
    let mut tables = BTreeSet::new();
    let mut skipped = Vec::new();
    for (at, body) in bodies.into_iter().enumerate() {
        match Wakeup::parse(body) {
            Ok(wakeup) => {
                tables.insert(wakeup.table);
            }
            Err(reason) => skipped.push((at, reason)),
        }
    }
    (tables, skipped)
}

/// The longest an SQS message can be held invisible (12 hours), in seconds.
pub const MAX_HOLD_SECONDS: u32 = 43_200;

/// How many seconds a wake-up of a table last committed at `last_commit_ms` is held
/// before it commits, so that the table's commits stay `min_interval` apart: `None`
/// when it may commit now (no commit yet, the interval passed, no interval, or a last
/// commit stamped in the future by a clock ahead of ours, which must not hold the
/// table for long: at most one interval). Rounded up to whole seconds (what SQS
/// takes), at most [`MAX_HOLD_SECONDS`].
pub fn hold_seconds(
    last_commit_ms: Option<i64>,
    now_ms: i64,
    min_interval: Duration,
) -> Option<u32> {
    let interval_ms = i64::try_from(min_interval.as_millis()).unwrap_or(i64::MAX);
    let since_ms = now_ms.saturating_sub(last_commit_ms?).max(0);
    let wait_ms = interval_ms.saturating_sub(since_ms);
    if wait_ms <= 0 {
        return None;
    }
    let seconds = (wait_ms.saturating_add(999) / 1000).min(i64::from(MAX_HOLD_SECONDS));
    u32::try_from(seconds).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wakeup_is_held_until_the_interval_has_passed() {
        let five = Duration::from_secs(5);
        assert_eq!(hold_seconds(None, 10_000, five), None);
        assert_eq!(hold_seconds(Some(10_000), 10_000, five), Some(5));
        assert_eq!(hold_seconds(Some(10_000), 11_500, five), Some(4));
        assert_eq!(hold_seconds(Some(10_000), 14_999, five), Some(1));
        assert_eq!(hold_seconds(Some(10_000), 15_000, five), None);
        assert_eq!(hold_seconds(Some(10_000), 99_000, five), None);
        assert_eq!(hold_seconds(Some(10_000), 12_000, Duration::ZERO), None);
        // A last commit stamped ahead of this clock holds one interval at most.
        assert_eq!(hold_seconds(Some(90_000), 10_000, five), Some(5));
        // Extremes neither overflow nor exceed what SQS takes.
        assert_eq!(hold_seconds(Some(i64::MIN), i64::MAX, five), None);
        assert_eq!(hold_seconds(Some(i64::MAX), i64::MIN, five), Some(5));
        assert_eq!(
            hold_seconds(Some(0), 0, Duration::from_secs(u64::MAX)),
            Some(MAX_HOLD_SECONDS)
        );
    }

    #[test]
    fn a_wakeup_reads_back_what_it_wrote() {
        let wakeup = Wakeup {
            table: "kafscale.orders".into(),
        };
        assert_eq!(Wakeup::parse(&wakeup.body()), Ok(wakeup.clone()));
        assert_eq!(wakeup.group_id(), "kafscale.orders");
    }

    #[test]
    fn group_ids_are_ids_sqs_accepts() {
        for table in [
            "x".repeat(200),
            "ns.table with spaces".into(),
            "ns.tåble".into(),
        ] {
            let id = Wakeup { table }.group_id();
            assert!(id.len() <= MAX_ID_CHARS, "{id}");
            assert!(id.bytes().all(|b| b.is_ascii_graphic()), "{id}");
        }
    }

    #[test]
    fn the_same_segments_one_deduplication_id() {
        let segment = "ns/orders/0/segment-00000000000000000000.kfs";
        let next = "ns/orders/0/segment-00000000000000000010.kfs";
        let id = deduplication_id("kafscale.orders", &[segment]);
        assert_eq!(id, deduplication_id("kafscale.orders", &[segment]));
        assert_ne!(id, deduplication_id("kafscale.orders", &[segment, next]));
        assert_ne!(id, deduplication_id("kafscale.payments", &[segment]));
        assert!(id.len() <= MAX_ID_CHARS);
    }

    #[test]
    fn a_batch_names_each_table_once_and_says_what_it_skipped() {
        let bodies = [
            r#"{"table": "kafscale.orders"}"#,
            r#"{"table": "kafscale.orders"}"#,
            r#"{"table": "kafscale.payments"}"#,
            "not json",
            r#"{"table": ""}"#,
            r#"{"topic": "orders"}"#,
        ];
        let (tables, skipped) = tables_of(bodies);
        assert_eq!(
            tables.into_iter().collect::<Vec<_>>(),
            ["kafscale.orders", "kafscale.payments"]
        );
        let at: Vec<usize> = skipped.iter().map(|(at, _)| *at).collect();
        assert_eq!(at, [3, 4, 5]);
    }
}

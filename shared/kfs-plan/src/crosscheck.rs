//! The etcd cross-check: what the brokers' own bookkeeping says about the offsets a
//! commit is about to take.
//!
//! The broker writes `/kafscale/topics/{t}/partitions/{p}/next_offset` after both
//! uploads of a segment succeed, best effort, so it lags S3 and can point past gaps.
//! The rules:
//! - a pending segment whose last offset is at or past `next_offset` is held while it is
//!   younger than the grace period (etcd writes lag the uploads), then committed with a
//!   warning;
//! - a `next_offset` below the table's watermark means the topic was recreated or etcd
//!   was reset: the partition stops (nothing dropped, nothing re-ingested) until an
//!   operator acts;
//! - a topic with segments but absent from the cluster snapshot is reported;
//! - while etcd is unreachable, segments are held for the grace period, then the
//!   configured policy decides.

use std::collections::{BTreeMap, BTreeSet};

use crate::commit::PendingSegment;
use crate::offsets::OffsetMap;

/// What etcd said about one topic, or why it said nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EtcdView {
    /// The cross-check is off for this deployment.
    Disabled,
    /// etcd could not be read.
    Unreachable {
        /// Why.
        reason: String,
    },
    /// What etcd holds for the topic.
    Topic {
        /// Whether the topic is in `/kafscale/metadata/snapshot`.
        in_snapshot: bool,
        /// `next_offset` per partition; a missing key reads as 0.
        next_offsets: BTreeMap<i32, i64>,
    },
}

/// Everything the cross-check reads from etcd in one go: the topics of the cluster
/// snapshot and every partition's `next_offset`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum EtcdState {
    /// The cross-check is off.
    #[default]
    Disabled,
    /// etcd could not be read.
    Unreachable(String),
    /// What etcd holds.
    Read {
        /// Topics in `/kafscale/metadata/snapshot`.
        topics: BTreeSet<String>,
        /// `next_offset` by topic and partition.
        next_offsets: BTreeMap<(String, i32), i64>,
    },
}

impl EtcdState {
    /// The view of one topic.
    pub fn view(&self, topic: &str) -> EtcdView {
        match self {
            Self::Disabled => EtcdView::Disabled,
            Self::Unreachable(reason) => EtcdView::Unreachable {
                reason: reason.clone(),
            },
            Self::Read {
                topics,
                next_offsets,
            } => EtcdView::Topic {
                in_snapshot: topics.contains(topic),
                next_offsets: next_offsets
                    .iter()
                    .filter(|((t, _), _)| t == topic)
                    .map(|((_, p), next)| (*p, *next))
                    .collect(),
            },
        }
    }
}

/// What to do once etcd has been unreachable for longer than the grace period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnreachablePolicy {
    /// Keep holding commits until etcd answers.
    #[default]
    Hold,
    /// Commit without the cross-check (with a warning).
    Proceed,
}

/// Settings of the cross-check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CrossCheckPolicy {
    /// How long a segment may wait for etcd to catch up, in ms.
    pub grace_ms: i64,
    /// What to do when etcd stays unreachable.
    pub on_unreachable: UnreachablePolicy,
}

impl Default for CrossCheckPolicy {
    fn default() -> Self {
        Self {
            grace_ms: 5 * 60 * 1000,
            on_unreachable: UnreachablePolicy::Hold,
        }
    }
}

/// A pending segment with the time it was converted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgedSegment {
    /// The segment.
    pub segment: PendingSegment,
    /// When it was converted, Unix ms.
    pub created_ms: i64,
}

/// The verdict of the cross-check for one table.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CrossCheck {
    /// Segments the commit may consider.
    pub allowed: Vec<PendingSegment>,
    /// Segments held this cycle (etcd lagging or unreachable, inside the grace period).
    pub held: Vec<String>,
    /// Segments allowed past the grace period although etcd has not confirmed them.
    pub unconfirmed: Vec<String>,
    /// Partitions stopped: `(partition, etcd next_offset, table watermark)`.
    pub stopped: Vec<(i32, i64, i64)>,
    /// The topic has segments but is absent from etcd's cluster snapshot.
    pub topic_missing: bool,
    /// etcd could not be read.
    pub unreachable: bool,
}

/// Applies the cross-check to a table's pending segments.
pub fn cross_check(
    pending: &[AgedSegment],
    watermarks: &OffsetMap,
    view: &EtcdView,
    policy: CrossCheckPolicy,
    now_ms: i64,
) -> CrossCheck {
    let mut out = CrossCheck::default();
    let young = |s: &AgedSegment| now_ms - s.created_ms < policy.grace_ms;
    match view {
        EtcdView::Disabled => out.allowed = pending.iter().map(|s| s.segment.clone()).collect(),
        EtcdView::Unreachable { .. } => {
            out.unreachable = true;
            for s in pending {
                if young(s) || policy.on_unreachable == UnreachablePolicy::Hold {
                    out.held.push(s.segment.id.clone());
                } else {
                    out.unconfirmed.push(s.segment.id.clone());
                    out.allowed.push(s.segment.clone());
                }
            }
        }
        EtcdView::Topic {
            in_snapshot,
            next_offsets,
        } => {
            out.topic_missing = !in_snapshot && !pending.is_empty();
            let partitions: BTreeSet<i32> = pending.iter().map(|s| s.segment.partition).collect();
            let stopped: BTreeSet<i32> = partitions
                .into_iter()
                .filter(|p| {
                    let next = next_offsets.get(p).copied().unwrap_or(0);
                    match watermarks.get(p) {
                        Some(&watermark) if next < watermark => {
                            out.stopped.push((*p, next, watermark));
                            true
                        }
                        _ => false,
                    }
                })
                .collect();
            for s in pending {
                let partition = s.segment.partition;
                let next = next_offsets.get(&partition).copied().unwrap_or(0);
                if stopped.contains(&partition) || (s.segment.last_offset >= next && young(s)) {
                    out.held.push(s.segment.id.clone());
                } else {
                    if s.segment.last_offset >= next {
                        out.unconfirmed.push(s.segment.id.clone());
                    }
                    out.allowed.push(s.segment.clone());
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aged(partition: i32, base: i64, last: i64, created_ms: i64) -> AgedSegment {
        AgedSegment {
            segment: PendingSegment {
                id: format!("{partition}:{base}"),
                partition,
                base_offset: base,
                last_offset: last,
                records: 1,
                segments: 1,
                inner_gaps: Vec::new(),
            },
            created_ms,
        }
    }

    fn view(next: &[(i32, i64)]) -> EtcdView {
        EtcdView::Topic {
            in_snapshot: true,
            next_offsets: next.iter().copied().collect(),
        }
    }

    #[test]
    fn lagging_etcd_holds_young_segments_and_passes_old_ones_with_a_warning() {
        let policy = CrossCheckPolicy {
            grace_ms: 1000,
            ..CrossCheckPolicy::default()
        };
        let pending = [aged(0, 0, 9, 0), aged(0, 10, 19, 9_500)];
        let check = cross_check(
            &pending,
            &OffsetMap::new(),
            &view(&[(0, 10)]),
            policy,
            10_000,
        );
        assert_eq!(check.allowed.len(), 1);
        assert_eq!(check.held, vec!["0:10".to_owned()]);
        let later = cross_check(
            &pending,
            &OffsetMap::new(),
            &view(&[(0, 10)]),
            policy,
            20_000,
        );
        assert_eq!(later.allowed.len(), 2);
        assert_eq!(later.unconfirmed, vec!["0:10".to_owned()]);
    }

    #[test]
    fn a_next_offset_below_the_watermark_stops_the_partition() {
        let pending = [aged(0, 100, 109, 0), aged(1, 0, 9, 0)];
        let watermarks = OffsetMap::from([(0, 100)]);
        let check = cross_check(
            &pending,
            &watermarks,
            &view(&[(0, 5), (1, 10)]),
            CrossCheckPolicy::default(),
            1_000_000,
        );
        assert_eq!(check.stopped, vec![(0, 5, 100)]);
        assert_eq!(check.held, vec!["0:100".to_owned()]);
        assert_eq!(check.allowed.len(), 1);
    }

    #[test]
    fn unreachable_etcd_holds_then_follows_the_policy() {
        let pending = [aged(0, 0, 9, 0)];
        let unreachable = EtcdView::Unreachable {
            reason: "timeout".into(),
        };
        let hold = CrossCheckPolicy {
            grace_ms: 10,
            on_unreachable: UnreachablePolicy::Hold,
        };
        assert_eq!(
            cross_check(&pending, &OffsetMap::new(), &unreachable, hold, 100)
                .held
                .len(),
            1
        );
        let proceed = CrossCheckPolicy {
            on_unreachable: UnreachablePolicy::Proceed,
            ..hold
        };
        assert_eq!(
            cross_check(&pending, &OffsetMap::new(), &unreachable, proceed, 5)
                .held
                .len(),
            1
        );
        let check = cross_check(&pending, &OffsetMap::new(), &unreachable, proceed, 100);
        assert_eq!((check.allowed.len(), check.unconfirmed.len()), (1, 1));
    }

    #[test]
    fn a_topic_missing_from_the_snapshot_is_reported() {
        let missing = EtcdView::Topic {
            in_snapshot: false,
            next_offsets: BTreeMap::from([(0, 100)]),
        };
        assert!(
            cross_check(
                &[aged(0, 0, 9, 0)],
                &OffsetMap::new(),
                &missing,
                CrossCheckPolicy::default(),
                0
            )
            .topic_missing
        );
    }
}

/// Reads what the cross-check needs from etcd's raw contents: the cluster snapshot's
/// JSON (`/kafscale/metadata/snapshot`, parsed leniently: Go field names, unknown
/// fields ignored) and the keys under `/kafscale/topics/` (only
/// `…/partitions/{p}/next_offset` keys are used; other values are protobuf).
pub fn read_etcd_contents(
    snapshot_json: Option<&str>,
    topic_keys: &[(String, Vec<u8>)],
) -> EtcdState {
    let mut topics = BTreeSet::new();
    if let Some(text) = snapshot_json {
        match serde_json::from_str::<serde_json::Value>(text) {
            Ok(snapshot) => {
                for topic in snapshot
                    .get("Topics")
                    .and_then(|t| t.as_array())
                    .into_iter()
                    .flatten()
                {
                    if let Some(name) = topic
                        .get("Topic")
                        .or_else(|| topic.get("Name"))
                        .and_then(|n| n.as_str())
                    {
                        topics.insert(name.to_owned());
                    }
                }
            }
            Err(e) => return EtcdState::Unreachable(format!("cluster snapshot is not JSON: {e}")),
        }
    }
    let mut next_offsets = BTreeMap::new();
    for (key, value) in topic_keys {
        let Some(rest) = key
            .strip_prefix("/kafscale/topics/")
            .and_then(|r| r.strip_suffix("/next_offset"))
        else {
            continue;
        };
        let Some((topic, partition)) = rest.split_once("/partitions/") else {
            continue;
        };
        let (Ok(partition), Some(next)) = (
            partition.parse::<i32>(),
            std::str::from_utf8(value)
                .ok()
                .and_then(|v| v.trim().parse::<i64>().ok()),
        ) else {
            continue;
        };
        next_offsets.insert((topic.to_owned(), partition), next);
    }
    EtcdState::Read {
        topics,
        next_offsets,
    }
}

#[cfg(test)]
mod etcd_contents_tests {
    use super::*;

    #[test]
    fn reads_snapshot_topics_and_next_offsets_leniently() {
        let snapshot = r#"{"Brokers":[{"NodeID":1}],"Topics":[{"Topic":"orders","Partitions":[{"Partition":0}]},{"Topic":"clicks"}],"ClusterID":"x"}"#;
        let keys = vec![
            (
                "/kafscale/topics/orders/partitions/0/next_offset".to_owned(),
                b"120".to_vec(),
            ),
            (
                "/kafscale/topics/orders/partitions/0".to_owned(),
                vec![0x0a, 0x01],
            ),
            ("/kafscale/topics/orders/config".to_owned(), vec![0xff]),
            (
                "/kafscale/topics/orders/partitions/1/next_offset".to_owned(),
                b"not a number".to_vec(),
            ),
        ];
        let EtcdState::Read {
            topics,
            next_offsets,
        } = read_etcd_contents(Some(snapshot), &keys)
        else {
            panic!("expected a read state")
        };
        assert_eq!(
            topics,
            BTreeSet::from(["orders".to_owned(), "clicks".to_owned()])
        );
        assert_eq!(
            next_offsets,
            BTreeMap::from([(("orders".to_owned(), 0), 120)])
        );
        assert!(matches!(
            read_etcd_contents(Some("{"), &[]),
            EtcdState::Unreachable(_)
        ));
    }
}

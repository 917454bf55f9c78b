//! What every kfs-iceberg snapshot carries in its summary: the full map of next
//! offsets per partition (never a delta, so expiring old snapshots never loses the
//! watermark), the offset ranges this snapshot added, the gaps it recorded, and a
//! commit id.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

/// Summary key: JSON object `{"<partition>": <next offset>}` for every partition of the topic.
pub const OFFSETS_KEY: &str = "kfs.offsets";
/// Summary key: JSON object `{"<partition>": <first offset>}`: where each partition began
/// in the table (carried forward like the offset map, so it survives expiry). A segment
/// below its partition's start that turns up later was never in the table.
pub const STARTS_KEY: &str = "kfs.starts";
/// Summary key: JSON object `{"<partition>": [first, next]}` of the ranges this snapshot added.
pub const RANGES_KEY: &str = "kfs.ranges";
/// Summary key: JSON array of [`Gap`]s this snapshot recorded.
pub const GAPS_KEY: &str = "kfs.gaps";
/// Summary key: JSON array of every [`Gap`] the table has recorded, this snapshot's
/// included (carried forward like the offset map, so that expiring the snapshot that
/// recorded a gap never turns a late segment inside it into one taken for committed).
pub const GAP_HISTORY_KEY: &str = "kfs.gap-history";
/// Summary key: the id of the commit, to recognise our own commit after an unknown outcome.
pub const COMMIT_ID_KEY: &str = "kfs.commit-id";
/// Summary key: the topic the table is fed from.
pub const TOPIC_KEY: &str = "kfs.topic";
/// Summary key: number of segments in this commit.
pub const SEGMENTS_KEY: &str = "kfs.segments";
/// Summary key: number of data records in this commit.
pub const RECORDS_KEY: &str = "kfs.records";
/// Summary key: the newest record timestamp (Unix ms) in the table after this
/// snapshot, carried forward like the offset map; what the freshness metric measures.
pub const MAX_TIMESTAMP_KEY: &str = "kfs.max-timestamp-ms";

/// A summary property could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("snapshot summary property {key} is malformed: {reason}")]
pub struct SummaryError {
    /// The property.
    pub key: &'static str,
    /// Why it could not be read.
    pub reason: String,
}

/// Next offset to commit, per partition.
pub type OffsetMap = BTreeMap<i32, i64>;

/// An offset range no segment covers, recorded so that it is never skipped silently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord)]
pub struct Gap {
    /// Partition.
    pub partition: i32,
    /// First missing offset.
    pub from: i64,
    /// Last missing offset (inclusive).
    pub to: i64,
    /// Why the range is missing.
    pub reason: GapReason,
}

/// Why an offset range has no records in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum GapReason {
    /// No segment in the source covers it (e.g. a failed upload).
    NoSegment,
    /// An operator skipped a quarantined segment.
    Skipped,
}

fn parse<T: for<'de> Deserialize<'de>>(
    summary: &HashMap<String, String>,
    key: &'static str,
) -> Result<Option<T>, SummaryError> {
    summary
        .get(key)
        .map(|text| {
            serde_json::from_str(text).map_err(|e| SummaryError {
                key,
                reason: e.to_string(),
            })
        })
        .transpose()
}

/// Reads a JSON object keyed by partition number.
fn partition_map<V: for<'de> Deserialize<'de>>(
    summary: &HashMap<String, String>,
    key: &'static str,
) -> Result<Option<BTreeMap<i32, V>>, SummaryError> {
    let Some(map) = parse::<BTreeMap<String, V>>(summary, key)? else {
        return Ok(None);
    };
    map.into_iter()
        .map(|(partition, value)| {
            partition
                .parse::<i32>()
                .map(|p| (p, value))
                .map_err(|_| SummaryError {
                    key,
                    reason: format!("partition {partition:?} is not a number"),
                })
        })
        .collect::<Result<_, _>>()
        .map(Some)
}

/// Reads the offset map of a snapshot summary; `None` when the snapshot was not
/// written by kfs-iceberg.
pub fn offsets_from_summary(
    summary: &HashMap<String, String>,
) -> Result<Option<OffsetMap>, SummaryError> {
    partition_map(summary, OFFSETS_KEY)
}

/// Reads where each partition began (`None` when the snapshot predates the key, or
/// was not written by kfs-iceberg).
pub fn starts_from_summary(
    summary: &HashMap<String, String>,
) -> Result<Option<OffsetMap>, SummaryError> {
    partition_map(summary, STARTS_KEY)
}

/// Reads the ranges a snapshot added: partition → `[first, next)`.
pub fn ranges_from_summary(
    summary: &HashMap<String, String>,
) -> Result<BTreeMap<i32, (i64, i64)>, SummaryError> {
    Ok(partition_map(summary, RANGES_KEY)?.unwrap_or_default())
}

/// Reads the gaps a snapshot recorded.
pub fn gaps_from_summary(summary: &HashMap<String, String>) -> Result<Vec<Gap>, SummaryError> {
    Ok(parse(summary, GAPS_KEY)?.unwrap_or_default())
}

/// Reads every gap recorded up to a snapshot (`None` when it predates the key).
pub fn gap_history_from_summary(
    summary: &HashMap<String, String>,
) -> Result<Option<Vec<Gap>>, SummaryError> {
    parse(summary, GAP_HISTORY_KEY)
}

/// Encodes a partition-keyed map with string keys, as JSON objects require.
fn keyed<V: Serialize>(map: &BTreeMap<i32, V>) -> String {
    let keyed: BTreeMap<String, &V> = map.iter().map(|(p, v)| (p.to_string(), v)).collect();
    serde_json::to_string(&keyed).unwrap_or_default()
}

/// The summary properties of a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitSummary {
    /// Topic.
    pub topic: String,
    /// Full map of next offsets after the commit.
    pub offsets: OffsetMap,
    /// First offset of every partition in the table.
    pub starts: OffsetMap,
    /// Ranges added, per partition: `[first, next)`.
    pub ranges: BTreeMap<i32, (i64, i64)>,
    /// Gaps recorded.
    pub gaps: Vec<Gap>,
    /// Every gap the table has recorded, these included.
    pub gap_history: Vec<Gap>,
    /// Commit id.
    pub commit_id: String,
    /// Segments committed.
    pub segments: u64,
    /// Records committed.
    pub records: u64,
}

impl CommitSummary {
    /// The snapshot summary properties.
    pub fn properties(&self) -> HashMap<String, String> {
        HashMap::from([
            (TOPIC_KEY.to_owned(), self.topic.clone()),
            (OFFSETS_KEY.to_owned(), keyed(&self.offsets)),
            (STARTS_KEY.to_owned(), keyed(&self.starts)),
            (RANGES_KEY.to_owned(), keyed(&self.ranges)),
            (
                GAPS_KEY.to_owned(),
                serde_json::to_string(&self.gaps).unwrap_or_default(),
            ),
            (
                GAP_HISTORY_KEY.to_owned(),
                serde_json::to_string(&self.gap_history).unwrap_or_default(),
            ),
            (COMMIT_ID_KEY.to_owned(), self.commit_id.clone()),
            (SEGMENTS_KEY.to_owned(), self.segments.to_string()),
            (RECORDS_KEY.to_owned(), self.records.to_string()),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_properties_round_trip() {
        let summary = CommitSummary {
            topic: "orders".into(),
            offsets: BTreeMap::from([(0, 120), (1, 7)]),
            starts: BTreeMap::from([(0, 0), (1, 5)]),
            ranges: BTreeMap::from([(0, (100, 120))]),
            gaps: vec![Gap {
                partition: 0,
                from: 95,
                to: 99,
                reason: GapReason::NoSegment,
            }],
            gap_history: vec![],
            commit_id: "c1".into(),
            segments: 2,
            records: 20,
        };
        let props = summary.properties();
        assert_eq!(props[OFFSETS_KEY], r#"{"0":120,"1":7}"#);
        assert_eq!(
            offsets_from_summary(&props),
            Ok(Some(summary.offsets.clone()))
        );
        assert_eq!(ranges_from_summary(&props), Ok(summary.ranges.clone()));
        assert_eq!(
            starts_from_summary(&props),
            Ok(Some(summary.starts.clone()))
        );
        assert_eq!(gaps_from_summary(&props), Ok(summary.gaps.clone()));
        assert_eq!(gap_history_from_summary(&props), Ok(Some(vec![])));
        assert_eq!(offsets_from_summary(&HashMap::new()), Ok(None));
        let bad = HashMap::from([(OFFSETS_KEY.to_owned(), "{\"x\":1}".to_owned())]);
        assert!(offsets_from_summary(&bad).is_err());
    }
}

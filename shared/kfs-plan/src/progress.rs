//! A table's progress kept where no other engine can erase it: in table properties,
//! set in the same atomic metadata update as each append.
//!
//! Snapshot summaries carry the offset map too, but another engine's maintenance
//! (S3 Tables, Glue optimizers, Spark's `rewrite_data_files` and `expire_snapshots`)
//! writes snapshots without our summary and expires ours: after that, a table whose
//! progress lived in summaries alone looks new. Table properties survive rewrites,
//! overwrites, deletes and expiry. A rollback (`set-current-snapshot` to an older
//! snapshot) does not undo them, so the properties also record the sequence number of
//! the snapshot they came with: a current snapshot that does not descend from it means
//! the table was rolled back past our commit ([`lineage`]), which is reported, never
//! re-ingested or skipped in silence.

use crate::offsets::{
    COMMIT_ID_KEY, GAP_HISTORY_KEY, MAX_TIMESTAMP_KEY, OFFSETS_KEY, OffsetMap, STARTS_KEY,
    SummaryError, gap_history_from_summary, offsets_from_summary, starts_from_summary,
};
use crate::sweep::TableProgress;
use std::collections::HashMap;

/// Table property prefix of the stored progress.
pub const PROGRESS_PREFIX: &str = "kfs.progress.";
/// Table property: the sequence number of the snapshot the stored progress came with.
pub const PROGRESS_SEQUENCE_KEY: &str = "kfs.progress.sequence-number";
/// Table property: the attempt that wrote the stored progress (see `kfs.attempt-id`).
pub const PROGRESS_ATTEMPT_KEY: &str = "kfs.progress.attempt-id";

/// The summary keys whose values the table properties keep (under
/// [`PROGRESS_PREFIX`]): everything a commit carries forward, and its commit id.
const KEPT: [&str; 5] = [
    OFFSETS_KEY,
    STARTS_KEY,
    GAP_HISTORY_KEY,
    MAX_TIMESTAMP_KEY,
    COMMIT_ID_KEY,
];

/// The table property under which the value of summary key `key` is kept.
pub fn progress_property(key: &str) -> String {
    format!("{PROGRESS_PREFIX}{}", key.trim_start_matches("kfs."))
}

/// The progress a table's properties store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredProgress {
    /// Watermarks, starts and gaps.
    pub progress: TableProgress,
    /// The newest record timestamp (Unix ms), when recorded.
    pub newest_record_ms: Option<i64>,
    /// The commit that stored it.
    pub commit_id: String,
    /// The attempt that stored it.
    pub attempt_id: Option<String>,
    /// The sequence number of the snapshot it came with.
    pub sequence_number: i64,
}

/// The table properties an append sets, in the same metadata update, from its snapshot
/// summary `summary` (which must hold the full offset map, starts, gap history and
/// commit id), for a snapshot of sequence number `sequence_number`.
pub fn progress_properties(
    summary: &HashMap<String, String>,
    attempt_id: &str,
    sequence_number: i64,
) -> HashMap<String, String> {
    let mut properties: HashMap<String, String> = KEPT
        .iter()
        .filter_map(|key| Some((progress_property(key), summary.get(*key)?.clone())))
        .collect();
    properties.insert(PROGRESS_ATTEMPT_KEY.to_owned(), attempt_id.to_owned());
    properties.insert(
        PROGRESS_SEQUENCE_KEY.to_owned(),
        sequence_number.to_string(),
    );
    properties
}

/// The progress stored in a table's `properties`; `None` when none is (a table last
/// committed by a version that kept progress only in summaries, or never committed).
pub fn stored_progress(
    properties: &HashMap<String, String>,
) -> Result<Option<StoredProgress>, SummaryError> {
    // Read back as the summary it was copied from, with the same parsers.
    let summary: HashMap<String, String> = KEPT
        .iter()
        .filter_map(|key| {
            Some((
                (*key).to_owned(),
                properties.get(&progress_property(key))?.clone(),
            ))
        })
        .collect();
    let Some(watermarks) = offsets_from_summary(&summary)? else {
        return Ok(None);
    };
    let number = |key: &'static str| -> Result<Option<i64>, SummaryError> {
        properties
            .get(key)
            .map(|v| {
                v.parse().map_err(|_| SummaryError {
                    key,
                    reason: format!("{v:?} is not a number"),
                })
            })
            .transpose()
    };
    let sequence_number = number(PROGRESS_SEQUENCE_KEY)?.ok_or(SummaryError {
        key: PROGRESS_SEQUENCE_KEY,
        reason: "missing beside the stored offsets".into(),
    })?;
    let newest_record_ms = summary
        .get(MAX_TIMESTAMP_KEY)
        .map(|v| {
            v.parse().map_err(|_| SummaryError {
                key: MAX_TIMESTAMP_KEY,
                reason: format!("{v:?} is not a number"),
            })
        })
        .transpose()?;
    Ok(Some(StoredProgress {
        progress: TableProgress {
            watermarks,
            starts: starts_from_summary(&summary)?.unwrap_or_default(),
            gaps: gap_history_from_summary(&summary)?.unwrap_or_default(),
        },
        newest_record_ms,
        commit_id: summary.get(COMMIT_ID_KEY).cloned().unwrap_or_default(),
        attempt_id: properties.get(PROGRESS_ATTEMPT_KEY).cloned(),
        sequence_number,
    }))
}

/// Whether the current snapshot descends from the snapshot of a sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lineage {
    /// It does, or the history that would tell has been expired: a descendant's
    /// ancestry passes through every sequence number between its own and the stored
    /// one, and where the chain ends first (an expired parent; pyiceberg's expiry also
    /// clears the parent id of the oldest snapshot it keeps), expiry removed it, which
    /// never changes the current snapshot.
    Descends,
    /// It does not: the table was set back to a snapshot older than it, or to one that
    /// never had it as an ancestor.
    RolledBack {
        /// The sequence number of the current snapshot (`None`: no current snapshot).
        current: Option<i64>,
    },
}

/// Where the current snapshot stands against `stored`, the sequence number of the
/// snapshot that came with the stored progress: `ancestry` lists the sequence numbers
/// of the current snapshot and its parents, newest first; `all` those of every
/// snapshot the table still has (a snapshot of `stored` that is in the table but not
/// in the ancestry was rolled back from). Tables of format version 1 number no
/// snapshot (all are 0): they always descend. A rollback that another engine's expiry
/// followed (the rolled-back snapshots expired, a snapshot of its own on top) cannot
/// be told from ordinary maintenance.
pub fn lineage(stored: i64, ancestry: &[i64], all: &[i64]) -> Lineage {
    if stored == 0 {
        return Lineage::Descends;
    }
    let current = ancestry.first().copied();
    if current.is_none() {
        return Lineage::RolledBack { current };
    }
    for &sequence in ancestry {
        if sequence == stored {
            return Lineage::Descends;
        }
        if sequence < stored {
            return Lineage::RolledBack { current };
        }
    }
    if all.contains(&stored) {
        Lineage::RolledBack { current }
    } else {
        Lineage::Descends
    }
}

/// Progress that cannot be established: the table needs an operator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgressError {
    /// A stored value is unreadable.
    #[error(transparent)]
    Summary(#[from] SummaryError),
    /// The table was rolled back past our commit.
    #[error(
        "rolled back past kfs-iceberg's commit {commit_id} (snapshot sequence number {stored}; the current snapshot's is {current}): the offsets that commit recorded (up to {watermarks:?}) may no longer be in the table. Nothing is re-ingested or skipped until an operator decides: `kfs-iceberg progress keep --table TABLE` keeps the recorded progress (what the rollback removed stays out of the table; re-ingesting it is not automated: docs/operations/neighbours.md, Rollbacks)"
    )]
    RolledBack {
        /// Our last commit.
        commit_id: String,
        /// Its snapshot's sequence number.
        stored: i64,
        /// The current snapshot's sequence number, or `none`.
        current: String,
        /// The watermarks our last commit recorded.
        watermarks: OffsetMap,
    },
    /// The table holds rows but no progress: our snapshots were expired by another
    /// engine before progress was kept in table properties.
    #[error(
        "holds {records} rows but no kfs-iceberg progress: snapshots carrying it were expired (by another engine's maintenance) before this version kept progress in table properties. Committing from the configured start offsets could duplicate or wait forever; set the progress explicitly: `kfs-iceberg progress set --table TABLE --offsets PARTITION=NEXT,...` (the next offset per partition, e.g. from SELECT partition, max(offset) + 1 FROM the table GROUP BY partition)"
    )]
    Lost {
        /// Rows the current snapshot holds.
        records: u64,
    },
}

/// The table's progress from its properties (`stored`), the newest summary progress in
/// its ancestry (`summary`, with that snapshot's sequence number), and its lineage:
/// whichever is newer (a commit by a version that kept summaries only may follow one
/// that stored properties); an error when the table was rolled back past the stored
/// progress.
pub fn established(
    stored: Option<StoredProgress>,
    summary: Option<(TableProgress, i64)>,
    lineage: Lineage,
) -> Result<Option<TableProgress>, ProgressError> {
    match (stored, summary) {
        (Some(stored), Some((summary, sequence))) if sequence > stored.sequence_number => {
            Ok(Some(summary))
        }
        (Some(stored), _) => match lineage {
            Lineage::Descends => Ok(Some(stored.progress)),
            Lineage::RolledBack { current } => Err(ProgressError::RolledBack {
                commit_id: stored.commit_id,
                stored: stored.sequence_number,
                current: current.map_or_else(|| "none".to_owned(), |c| c.to_string()),
                watermarks: stored.progress.watermarks,
            }),
        },
        (None, summary) => Ok(summary.map(|(progress, _)| progress)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offsets::{CommitSummary, Gap, GapReason};
    use std::collections::BTreeMap;

    fn summary() -> HashMap<String, String> {
        let mut properties = CommitSummary {
            topic: "orders".into(),
            offsets: BTreeMap::from([(0, 120), (1, 7)]),
            starts: BTreeMap::from([(0, 0), (1, 5)]),
            ranges: BTreeMap::from([(0, (100, 120))]),
            gaps: vec![],
            gap_history: vec![Gap {
                partition: 0,
                from: 95,
                to: 99,
                reason: GapReason::NoSegment,
            }],
            commit_id: "c1".into(),
            segments: 2,
            records: 20,
        }
        .properties();
        properties.insert(MAX_TIMESTAMP_KEY.into(), "1700".into());
        properties
    }

    #[test]
    fn progress_round_trips_through_table_properties() {
        let properties = progress_properties(&summary(), "a1", 42);
        // Only the progress: not the per-commit ranges, counts or topic.
        assert!(properties.keys().all(|k| k.starts_with(PROGRESS_PREFIX)));
        assert_eq!(properties["kfs.progress.offsets"], r#"{"0":120,"1":7}"#);
        let stored = stored_progress(&properties).ok().flatten();
        let Some(stored) = stored else {
            panic!("nothing stored");
        };
        assert_eq!(
            stored.progress.watermarks,
            BTreeMap::from([(0, 120), (1, 7)])
        );
        assert_eq!(stored.progress.starts, BTreeMap::from([(0, 0), (1, 5)]));
        assert_eq!(stored.progress.gaps.len(), 1);
        assert_eq!(stored.newest_record_ms, Some(1700));
        assert_eq!(stored.commit_id, "c1");
        assert_eq!(stored.attempt_id.as_deref(), Some("a1"));
        assert_eq!(stored.sequence_number, 42);
        assert_eq!(stored_progress(&HashMap::new()), Ok(None));
        let mut broken = properties.clone();
        broken.remove(PROGRESS_SEQUENCE_KEY);
        assert!(stored_progress(&broken).is_err());
    }

    #[test]
    fn lineage_tells_a_rollback_from_an_expiry() {
        let all = [3, 4, 5, 6, 7, 8];
        // Ours is 5: found in the ancestry.
        assert_eq!(lineage(5, &[7, 6, 5, 4], &all), Lineage::Descends);
        // Expired below 6: the chain breaks above ours (ours is gone).
        assert_eq!(lineage(5, &[7, 6], &[6, 7]), Lineage::Descends);
        // Set back to 4 (ours, 5, is not on the way down).
        assert_eq!(
            lineage(5, &[4, 3], &all),
            Lineage::RolledBack { current: Some(4) }
        );
        // Set back to 4, then another engine appended 8 (whose parent is 4), its
        // history expired below 8: ours is still in the table, off the lineage.
        assert_eq!(
            lineage(5, &[8], &[5, 8]),
            Lineage::RolledBack { current: Some(8) }
        );
        // No current snapshot at all.
        assert_eq!(lineage(5, &[], &all), Lineage::RolledBack { current: None });
        // Format version 1: no sequence numbers.
        assert_eq!(lineage(0, &[0, 0], &[0, 0]), Lineage::Descends);
    }

    #[test]
    fn the_newer_of_properties_and_summaries_wins() {
        let stored = stored_progress(&progress_properties(&summary(), "a1", 10))
            .ok()
            .flatten();
        let older = TableProgress::default();
        let newer = TableProgress {
            watermarks: BTreeMap::from([(0, 500)]),
            ..TableProgress::default()
        };
        let got = established(stored.clone(), Some((older, 9)), Lineage::Descends);
        assert_eq!(
            got.ok().flatten().map(|p| p.watermarks),
            Some(BTreeMap::from([(0, 120), (1, 7)]))
        );
        let got = established(stored.clone(), Some((newer.clone(), 11)), Lineage::Descends);
        assert_eq!(got, Ok(Some(newer)));
        let rolled = established(stored, None, Lineage::RolledBack { current: Some(3) });
        assert!(matches!(
            rolled,
            Err(ProgressError::RolledBack { stored: 10, .. })
        ));
        assert_eq!(established(None, None, Lineage::Descends), Ok(None));
    }
}

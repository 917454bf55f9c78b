//! The conversions of the converter service: a partition's new segments in offset
//! order, the small ones of a raw table joined in runs, the others one at a time,
//! each within the function's memory admission.

use std::collections::{BTreeMap, HashMap};

use kfs_plan::keys::{SegmentFile, SegmentKey};
use kfs_plan::sweep::ListedSegment;

use super::{Answer, ConverterService, NewObject, ObjectOutcome};
use crate::error::PipelineError;
use crate::ingest::{NewSegment, RunLimits, TopicTable, ingest_runs, ingest_segment};
use crate::ledger::{EntryState, Ledger};
use crate::source::{SegmentSource, SourceObject};

impl<S: SegmentSource, L: Ledger> ConverterService<S, L> {
    /// Converts the new segments of one partition (in offset order): the small ones of
    /// a raw table in runs, the others one at a time. Returns each segment's objects
    /// with its outcome.
    pub(super) async fn convert_partition(&self, mut segments: Vec<NewObject>) -> Vec<Answer> {
        segments.sort_by_key(|(key, _, _)| key.base_offset);
        let Some((first, _, _)) = segments.first() else {
            return Vec::new();
        };
        let target = self
            .settings
            .retry
            .run(PipelineError::kind, || async {
                let feed = crate::table::Feed {
                    namespace: &first.namespace,
                    topic: &first.topic,
                };
                let ledger = self.ledger.identity();
                TopicTable::open(self.catalog.access(), &self.settings.naming, feed, &ledger)
                    .await
                    .map(|table| table.with_schemas(self.settings.schemas.clone()))
            })
            .await;
        let target = match target {
            Ok(target) => target,
            Err(e) => {
                return segments
                    .into_iter()
                    .map(|(key, _, objects)| {
                        let segment = key.object_key(SegmentFile::Data);
                        let failure = e.for_segment(&segment);
                        (segment, objects, Err(failure))
                    })
                    .collect();
            }
        };
        let mut outcomes = Vec::new();
        // Offsets already in the table: nothing to convert.
        let (committed, rest): (Vec<_>, Vec<_>) = segments.into_iter().partition(|(key, _, _)| {
            target.progress.classify(key.partition, key.base_offset) == ListedSegment::Committed
        });
        for (key, _, objects) in committed {
            let segment = key.object_key(SegmentFile::Data);
            let duplicate = ObjectOutcome::Duplicate {
                segment: segment.clone(),
            };
            outcomes.push((segment, objects, Ok(duplicate)));
        }
        let (small, large): (Vec<_>, Vec<_>) = rest
            .into_iter()
            .partition(|(_, object, _)| target.in_runs(object));
        for (key, object, objects) in large {
            let converted = self.convert_one(&target, &key, &object).await;
            outcomes.push((object.key, objects, converted));
        }
        if small.is_empty() {
            return outcomes;
        }
        let keys: HashMap<String, SegmentKey> = small
            .iter()
            .map(|(key, object, _)| (object.key.clone(), key.clone()))
            .collect();
        let mut stale = Vec::new();
        for (segment, at, outcome) in self.convert_runs(&target, small).await {
            match (outcome, keys.get(&segment)) {
                // The read was refused: the object is not the version its event
                // named. Once more, as it is now.
                (Err(e), Some(key)) if e.kind() == kfs_catalog::fault::ErrorKind::Conflict => {
                    stale.push((key.clone(), at, e));
                }
                (outcome, _) => outcomes.push((segment, at, outcome)),
            }
        }
        let mut again = Vec::new();
        for (key, at, refused) in stale {
            let segment = key.object_key(SegmentFile::Data);
            match self.source.stat(&segment).await {
                Ok(Some(object)) => again.push((key, object, at)),
                Ok(None) => {
                    let incomplete = ObjectOutcome::Incomplete {
                        segment: segment.clone(),
                    };
                    outcomes.push((segment, at, Ok(incomplete)));
                }
                Err(_) => outcomes.push((segment, at, Err(refused))),
            }
        }
        if !again.is_empty() {
            outcomes.extend(self.convert_runs(&target, again).await);
        }
        outcomes
    }

    /// Converts small segments of one partition in runs; returns each segment with its
    /// objects and outcome.
    async fn convert_runs(&self, target: &TopicTable, small: Vec<NewObject>) -> Vec<Answer> {
        // Runs are of raw tables without claim checks to resolve.
        let _admitted = self.admit(crate::convert::RUN_SEGMENT_BYTES, 0).await;
        let mut objects: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        let news: Vec<NewSegment> = small
            .into_iter()
            .map(|(key, object, at)| {
                objects.insert(object.key.clone(), at);
                NewSegment {
                    key,
                    object,
                    follows: false,
                }
            })
            .collect();
        let limits = RunLimits {
            decode: self.settings.limits,
            max_segments: crate::ingest::MAX_RUN_SEGMENTS,
        };
        let runs = match ingest_runs(
            &self.source,
            target,
            &self.ledger,
            &news,
            limits,
            &self.settings.retry,
            &|| false,
        )
        .await
        {
            Ok(runs) => runs,
            Err(e) => {
                return objects
                    .into_iter()
                    .map(|(segment, at)| {
                        let failure = e.for_segment(&segment);
                        (segment, at, Err(failure))
                    })
                    .collect();
            }
        };
        let mut outcomes = Vec::new();
        for entry in &runs.recorded {
            if let EntryState::Quarantined { error } = &entry.state {
                if let Some(at) = objects.remove(&entry.segment) {
                    let segment = entry.segment.clone();
                    let error = error.clone();
                    let quarantined = ObjectOutcome::Quarantined {
                        segment: segment.clone(),
                        error,
                    };
                    outcomes.push((segment, at, Ok(quarantined)));
                }
                continue;
            }
            for (n, segment) in crate::ingest::run_segments(entry).enumerate() {
                if let Some(at) = objects.remove(&segment) {
                    // The run's records are counted once, with its first segment.
                    let records = if n == 0 { entry.records } else { 0 };
                    let converted = ObjectOutcome::Converted {
                        segment: segment.clone(),
                        records,
                    };
                    outcomes.push((segment, at, Ok(converted)));
                }
            }
        }
        for failure in runs.failed {
            if let PipelineError::Unconverted { segment, .. } = &failure
                && let Some(at) = objects.remove(segment)
            {
                outcomes.push((segment.clone(), at, Err(failure)));
            }
        }
        // Segments in no entry recorded: another process recorded a run from the same
        // first segment that does not hold them. Failed, so that the event comes again.
        for (segment, at) in objects {
            let failure = PipelineError::Unconverted {
                message: "another conversion recorded a run from the same first segment without it; converted again when the event comes back".into(),
                kind: kfs_catalog::fault::ErrorKind::Transient,
                segment: segment.clone(),
            };
            outcomes.push((segment, at, Err(failure)));
        }
        outcomes
    }

    /// Converts one segment on its own (a large one, or one of a JSON table).
    async fn convert_one(
        &self,
        target: &TopicTable,
        key: &SegmentKey,
        kfs: &SourceObject,
    ) -> Result<ObjectOutcome, PipelineError> {
        let _admitted = self
            .admit(
                kfs.size,
                target.lfs.blob_bytes_in_flight() + target.held_bytes(kfs.size),
            )
            .await;
        let entry = self
            .settings
            .retry
            .run(PipelineError::kind, || {
                ingest_segment(
                    self.catalog.access(),
                    &self.source,
                    target,
                    &self.ledger,
                    key,
                    kfs,
                    self.settings.limits,
                )
            })
            .await?;
        Ok(match entry.state {
            EntryState::Quarantined { error } => ObjectOutcome::Quarantined {
                segment: entry.segment,
                error,
            },
            _ if kfs.etag.as_ref().is_some_and(|etag| *etag != entry.etag) => {
                ObjectOutcome::Duplicate {
                    segment: entry.segment,
                }
            }
            _ => ObjectOutcome::Converted {
                segment: entry.segment,
                records: entry.records,
            },
        })
    }
}

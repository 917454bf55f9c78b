//! The converter service: what the converter function does with the objects its
//! events announce. Events are hints, not facts: every decision is taken on the
//! objects as they are now (both files of the segment present, their current ETag) and
//! on the ledger, so duplicated, reordered and stale events change nothing.

mod conversion;

use futures::StreamExt;
use kfs_catalog::catalog::CatalogHandle;
use kfs_plan::events::ObjectCreated;
use kfs_plan::keys::{SegmentFile, SegmentKey};
use kfs_plan::naming::TableNaming;
use kfs_segment::DecodeLimits;

use crate::clock::now_ms;
use crate::error::PipelineError;
use crate::ledger::{InsertOutcome, Ledger, LedgerEntry};
use crate::source::SegmentSource;
use crate::source::SourceObject;
use crate::wakeups::{WakeupError, WakeupQueue, announcements};
use kfs_catalog::fault::RetryPolicy;
use std::collections::{BTreeMap, HashMap};

/// What the ledger holds of some segments: entries, and unreadable items' reasons.
type LedgerView = (HashMap<String, LedgerEntry>, HashMap<String, String>);

/// Settings of the converter service.
#[derive(Debug, Clone)]
pub struct ConverterSettings {
    /// The bucket holding the segments.
    pub bucket: String,
    /// Key prefix of the segments within the bucket (the source's root), without a
    /// trailing `/`; empty for the bucket root.
    pub prefix: String,
    /// Topic → table mapping.
    pub naming: TableNaming,
    /// Decoder limits.
    pub limits: DecodeLimits,
    /// Segments converted at the same time, at most.
    pub concurrency: usize,
    /// Memory the conversions in flight may take together, in MiB (the function's
    /// memory minus headroom); `None` for no bound beyond `concurrency`. Each
    /// conversion is admitted for its estimate ([`conversion_mib`]); one larger than
    /// the whole budget runs alone.
    pub memory_budget_mib: Option<u64>,
    /// Tries of one segment after transient failures, before its event fails.
    pub retry: RetryPolicy,
    /// The writer schemas of registry tables' values (`None`: no registry).
    pub schemas: Option<std::sync::Arc<crate::convert::RegistrySchemas>>,
}

/// What became of one announced object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObjectOutcome {
    /// The segment was converted and is pending.
    Converted {
        /// Segment key.
        segment: String,
        /// Records converted.
        records: u64,
    },
    /// The segment is malformed and was quarantined.
    Quarantined {
        /// Segment key.
        segment: String,
        /// The error.
        error: String,
    },
    /// The ledger already has this version of the segment.
    Duplicate {
        /// Segment key.
        segment: String,
    },
    /// The segment key was rewritten with other content after it was converted: the
    /// new version is quarantined, never ingested twice.
    Rewritten {
        /// Segment key.
        segment: String,
    },
    /// The other file of the segment is not there yet; its own event or the sweep
    /// will convert the segment.
    Incomplete {
        /// Segment key.
        segment: String,
    },
    /// Not a segment file of the configured bucket and prefix.
    Ignored {
        /// Why.
        reason: String,
    },
}

/// Memory one conversion takes beyond its batch: the Arrow batches in flight, the
/// Parquet row group being built and the writer's buffers (measured: a 255 MiB batch
/// of 27 million tombstones peaks at 307 MiB in all, `scripts/memory_bench.py`).
const WRITER_MIB: u64 = 64;

/// Assumed expansion of a compressed batch (typical codecs on typical records); the
/// decoder's own limits bound the worst case.
const TYPICAL_EXPANSION: u64 = 8;

/// The memory a conversion of a segment of `size` bytes is estimated to take, in MiB:
/// its largest batch frame (at most the segment, at most the decoder's batch limit),
/// that batch's records decompressed (assumed 8 times the frame, at most the decoder's
/// limit), and the writer.
pub fn conversion_mib(size: u64, limits: &DecodeLimits) -> u64 {
    let frame = size.min(limits.max_batch_bytes);
    let records = frame
        .saturating_mul(TYPICAL_EXPANSION)
        .min(limits.max_decompressed_batch_bytes);
    (frame + records).div_ceil(1 << 20) + WRITER_MIB
}

/// The converter service.
pub struct ConverterService<S, L> {
    source: S,
    catalog: CatalogHandle,
    ledger: L,
    settings: ConverterSettings,
    /// Permits in MiB of the memory budget, when there is one.
    memory: Option<tokio::sync::Semaphore>,
    /// Where the tables given pending work are announced (`None`: nowhere; the
    /// schedule commits them).
    wakeups: Option<std::sync::Arc<dyn WakeupQueue>>,
}

impl<S: SegmentSource, L: Ledger> ConverterService<S, L> {
    /// A service over a source rooted at the segment prefix, a catalog (with its
    /// pointer swap, for schema changes) and a ledger.
    pub fn new(source: S, catalog: CatalogHandle, ledger: L, settings: ConverterSettings) -> Self {
        let memory = settings.memory_budget_mib.map(|mib| {
            let permits = usize::try_from(mib)
                .unwrap_or(usize::MAX)
                .clamp(1, tokio::sync::Semaphore::MAX_PERMITS);
            tokio::sync::Semaphore::new(permits)
        });
        Self {
            source,
            catalog,
            ledger,
            settings,
            memory,
            wakeups: None,
        }
    }

    /// The service, announcing the tables it gives pending work to on `queue`.
    pub fn with_wakeups(mut self, queue: std::sync::Arc<dyn WakeupQueue>) -> Self {
        self.wakeups = Some(queue);
        self
    }

    /// Announces the tables that `outcomes` (of [`handle`](Self::handle)) gave pending
    /// work to, one wake-up per table; how many were sent (none without a queue). Best
    /// effort: the segments are pending whatever this returns, and the schedule
    /// commits them when a wake-up is lost.
    pub async fn announce(
        &self,
        outcomes: &[Result<ObjectOutcome, PipelineError>],
    ) -> Result<usize, WakeupError> {
        let Some(queue) = &self.wakeups else {
            return Ok(0);
        };
        let converted = outcomes.iter().filter_map(|outcome| match outcome {
            Ok(ObjectOutcome::Converted { segment, .. }) => Some(segment.as_str()),
            _ => None,
        });
        let announcements = announcements(&self.settings.naming, converted);
        if !announcements.is_empty() {
            queue.send(&announcements).await?;
        }
        Ok(announcements.len())
    }

    /// Waits until the memory budget has room for a conversion of `size` bytes of
    /// segments that holds up to `blob_bytes` besides (large-file blobs, a segment
    /// held for several passes; a
    /// conversion larger than the whole budget waits for all of it); the permit is
    /// held until the conversion ends.
    async fn admit(&self, size: u64, blob_bytes: u64) -> Option<tokio::sync::SemaphorePermit<'_>> {
        let memory = self.memory.as_ref()?;
        let budget = self.settings.memory_budget_mib.unwrap_or(u64::MAX);
        let wanted = conversion_mib(size, &self.settings.limits)
            .saturating_add(blob_bytes.div_ceil(1 << 20))
            .min(budget);
        let wanted = u32::try_from(wanted).unwrap_or(u32::MAX);
        // The semaphore is never closed, so this only waits.
        memory.acquire_many(wanted).await.ok()
    }

    /// Handles announced objects; one result per object, in order. The objects of one
    /// segment (its `.kfs` and `.index`, duplicates) share one conversion; the small
    /// segments of one partition are converted in runs, one data file each (a run
    /// only takes segments that continue one another: an event batch proves no gap
    /// empty); the others one at a time, several at once.
    pub async fn handle(
        &self,
        objects: &[ObjectCreated],
    ) -> Vec<Result<ObjectOutcome, PipelineError>> {
        let mut outcomes: Vec<Option<Result<ObjectOutcome, PipelineError>>> =
            objects.iter().map(|_| None).collect();
        let mut announced: BTreeMap<SegmentKey, Announced<'_>> = BTreeMap::new();
        for (at, object) in objects.iter().enumerate() {
            match self.announces(object) {
                Ok((key, file)) => {
                    let slot = announced.entry(key).or_default();
                    slot.objects.push(at);
                    match file {
                        SegmentFile::Data => slot.kfs = Some(object),
                        SegmentFile::Index => slot.index = true,
                    }
                }
                Err(reason) => outcomes[at] = Some(Ok(ObjectOutcome::Ignored { reason })),
            }
        }
        // Each segment as it is now, and what the ledger knows of it.
        let current: Vec<_> = futures::stream::iter(announced)
            .map(|(key, slot)| async move {
                let found = self.current(&key, &slot).await;
                (key, slot, found)
            })
            .buffered(self.settings.concurrency.max(1))
            .collect()
            .await;
        let keys: Vec<String> = current
            .iter()
            .filter(|(_, _, found)| matches!(found, Ok(Some(_))))
            .map(|(key, _, _)| key.object_key(SegmentFile::Data))
            .collect();
        let known = self.ledger_view(&keys).await;
        let mut new: BTreeMap<(String, String, i32), Vec<NewObject>> = BTreeMap::new();
        for (key, slot, found) in current {
            let segment = key.object_key(SegmentFile::Data);
            let outcome = match (found, &known) {
                (Err(e), _) => Err(e),
                (Ok(None), _) => Ok(ObjectOutcome::Incomplete { segment }),
                (Ok(Some(_)), Err(e)) => Err(e.for_segment(&segment)),
                (Ok(Some(object)), Ok((entries, unreadable))) => {
                    if let Some(reason) = unreadable.get(&segment) {
                        Err(PipelineError::Unconverted {
                            segment,
                            message: format!("its ledger item is unreadable: {reason}"),
                            kind: kfs_catalog::fault::ErrorKind::Config,
                        })
                    } else if let Some(entry) = entries.get(&segment) {
                        self.known(entry.clone(), object.etag.as_deref()).await
                    } else {
                        new.entry((key.namespace.clone(), key.topic.clone(), key.partition))
                            .or_default()
                            .push((key, object, slot.objects));
                        continue;
                    }
                }
            };
            fan_out(
                &mut outcomes,
                (key.object_key(SegmentFile::Data), slot.objects, outcome),
            );
        }
        let converted: Vec<_> = futures::stream::iter(new.into_values())
            .map(|segments| self.convert_partition(segments))
            .buffered(self.settings.concurrency.max(1))
            .collect()
            .await;
        for answer in converted.into_iter().flatten() {
            fan_out(&mut outcomes, answer);
        }
        // Every object was answered above; one that was not is failed, so that its
        // event comes again, never dropped.
        outcomes
            .into_iter()
            .zip(objects)
            .map(|(outcome, object)| {
                outcome.unwrap_or_else(|| {
                    Err(PipelineError::Unconverted {
                        segment: object.key.clone(),
                        message: "no outcome was reached for it".into(),
                        kind: kfs_catalog::fault::ErrorKind::Transient,
                    })
                })
            })
            .collect()
    }

    /// What the ledger holds of the segments `keys`: their entries, and the items that
    /// cannot be read with the reason, by segment.
    async fn ledger_view(&self, keys: &[String]) -> Result<LedgerView, PipelineError> {
        let listing = self.ledger.get_many(keys).await?;
        let entries = listing
            .entries
            .into_iter()
            .map(|entry| (entry.segment.clone(), entry))
            .collect();
        Ok((entries, listing.unreadable.into_iter().collect()))
    }

    /// The segment an object is a file of, or why it is none of the configured ones.
    fn announces(&self, object: &ObjectCreated) -> Result<(SegmentKey, SegmentFile), String> {
        let relative = self.relative(object).ok_or_else(|| {
            format!(
                "s3://{}/{} is outside the segment prefix",
                object.bucket, object.key
            )
        })?;
        let (key, file) = SegmentKey::parse(relative)
            .ok_or_else(|| format!("{relative} is not a segment file"))?;
        if !self.settings.naming.topics.selects(&key.topic) {
            return Err(format!("topic {} is not selected for ingestion", key.topic));
        }
        Ok((key, file))
    }

    /// The segment's `.kfs` as it is now, when both its files are there: an announced
    /// `.kfs` whose event says its size and ETag, and an announced `.index`, are not
    /// asked for again (segments are written once; a rewrite since fails the read,
    /// which is conditional on the ETag).
    async fn current(
        &self,
        key: &SegmentKey,
        slot: &Announced<'_>,
    ) -> Result<Option<SourceObject>, PipelineError> {
        let kfs_key = key.object_key(SegmentFile::Data);
        let index_key = key.object_key(SegmentFile::Index);
        let announced = slot.kfs.and_then(|event| {
            Some(SourceObject {
                key: kfs_key.clone(),
                size: event.size?,
                etag: Some(event.etag.clone()?),
                modified_ms: None,
            })
        });
        let (kfs, index) = futures::join!(
            async {
                match announced {
                    Some(object) => Ok(Some(object)),
                    None => self.source.stat(&kfs_key).await,
                }
            },
            async {
                if slot.index {
                    Ok(true)
                } else {
                    self.source.stat(&index_key).await.map(|o| o.is_some())
                }
            }
        );
        Ok(match (kfs?, index?) {
            (Some(kfs), true) => Some(kfs),
            _ => None,
        })
    }

    /// The key relative to the source root, if the object is under the prefix.
    fn relative<'a>(&self, object: &'a ObjectCreated) -> Option<&'a str> {
        if object.bucket != self.settings.bucket {
            return None;
        }
        match self.settings.prefix.as_str() {
            "" => Some(object.key.as_str()),
            prefix => object.key.strip_prefix(prefix)?.strip_prefix('/'),
        }
    }

    /// A segment the ledger knows: the same version is a duplicate delivery; another
    /// version is a rewrite, recorded as its own quarantined entry.
    async fn known(
        &self,
        entry: LedgerEntry,
        current_etag: Option<&str>,
    ) -> Result<ObjectOutcome, PipelineError> {
        let Some(current) = current_etag.filter(|etag| *etag != entry.etag) else {
            return Ok(ObjectOutcome::Duplicate {
                segment: entry.segment,
            });
        };
        let error = format!(
            "{} was rewritten with different content (ETag {} → {current}) after it was converted; the new content is not ingested",
            self.source.describe(&entry.segment),
            entry.etag
        );
        let rewrite = entry.quarantined_beside("rewritten", current, error, now_ms());
        match self.ledger.insert(&rewrite).await? {
            InsertOutcome::Inserted | InsertOutcome::Exists(_) => Ok(ObjectOutcome::Rewritten {
                segment: entry.segment,
            }),
        }
    }
}

/// A segment new to the ledger: its key, its `.kfs` as it is now, and the places in
/// the batch of the objects announcing it.
type NewObject = (SegmentKey, SourceObject, Vec<usize>);

/// The objects announcing one segment.
#[derive(Default)]
struct Announced<'a> {
    /// Their places in the batch.
    objects: Vec<usize>,
    /// The `.kfs`'s event, if announced.
    kfs: Option<&'a ObjectCreated>,
    /// Whether the `.index` was announced.
    index: bool,
}

/// A segment's key, the places of the objects announcing it, and its outcome.
type Answer = (String, Vec<usize>, Result<ObjectOutcome, PipelineError>);

/// Answers every object of a segment with its outcome (a failure is repeated as
/// [`PipelineError::Unconverted`] for the segment).
fn fan_out(
    outcomes: &mut [Option<Result<ObjectOutcome, PipelineError>>],
    (segment, objects, outcome): Answer,
) {
    let Some((&last, rest)) = objects.split_last() else {
        return;
    };
    for &at in rest {
        outcomes[at] = Some(match &outcome {
            Ok(outcome) => Ok(outcome.clone()),
            Err(e) => Err(e.for_segment(&segment)),
        });
    }
    outcomes[last] = Some(outcome);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_grow_with_the_segment_and_stop_at_the_decoder_limits() {
        let limits = DecodeLimits::default();
        // A broker's default 4 MiB segment: about 100 MiB, nine at a time in 1 GiB.
        assert_eq!(conversion_mib(4 << 20, &limits), 4 + 32 + WRITER_MIB);
        assert_eq!(conversion_mib(0, &limits), WRITER_MIB);
        // A batch at the decoder's limit, decompressed to its limit.
        let largest = 256 + 256 + WRITER_MIB;
        assert_eq!(conversion_mib(256 << 20, &limits), largest);
        assert_eq!(conversion_mib(u64::MAX, &limits), largest);
    }
}

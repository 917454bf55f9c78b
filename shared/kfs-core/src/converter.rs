//! The converter service: what the converter function does with the objects its
//! events announce. Events are hints, not facts: every decision is taken on the
//! objects as they are now (both files of the segment present, their current ETag) and
//! on the ledger, so duplicated, reordered and stale events change nothing.

use crate::catalog::CatalogHandle;
use futures::StreamExt;
use kfs_plan::events::ObjectCreated;
use kfs_plan::keys::{SegmentFile, SegmentKey};
use kfs_plan::naming::TableNaming;
use kfs_segment::DecodeLimits;

use crate::clock::now_ms;
use crate::error::PipelineError;
use crate::fault::RetryPolicy;
use crate::ingest::{TopicTable, ingest_segment};
use crate::ledger::{EntryState, InsertOutcome, Ledger, LedgerEntry};
use crate::source::SegmentSource;

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
        }
    }

    /// Waits until the memory budget has room for a conversion of `size` bytes (a
    /// conversion larger than the whole budget waits for all of it); the permit is
    /// held until the conversion ends.
    async fn admit(&self, size: u64) -> Option<tokio::sync::SemaphorePermit<'_>> {
        let memory = self.memory.as_ref()?;
        let budget = self.settings.memory_budget_mib.unwrap_or(u64::MAX);
        let wanted = conversion_mib(size, &self.settings.limits).min(budget);
        let wanted = u32::try_from(wanted).unwrap_or(u32::MAX);
        // The semaphore is never closed, so this only waits.
        memory.acquire_many(wanted).await.ok()
    }

    /// Handles announced objects, several at a time; one result per object, in order.
    pub async fn handle(
        &self,
        objects: &[ObjectCreated],
    ) -> Vec<Result<ObjectOutcome, PipelineError>> {
        futures::stream::iter(objects)
            .map(|object| self.handle_one(object))
            .buffered(self.settings.concurrency.max(1))
            .collect()
            .await
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

    async fn handle_one(&self, object: &ObjectCreated) -> Result<ObjectOutcome, PipelineError> {
        let Some(relative) = self.relative(object) else {
            return Ok(ObjectOutcome::Ignored {
                reason: format!(
                    "s3://{}/{} is outside the segment prefix",
                    object.bucket, object.key
                ),
            });
        };
        let Some((key, _)) = SegmentKey::parse(relative) else {
            return Ok(ObjectOutcome::Ignored {
                reason: format!("{relative} is not a segment file"),
            });
        };
        if !self.settings.naming.topics.selects(&key.topic) {
            return Ok(ObjectOutcome::Ignored {
                reason: format!("topic {} is not selected for ingestion", key.topic),
            });
        }
        let kfs_key = key.object_key(SegmentFile::Data);
        let index_key = key.object_key(SegmentFile::Index);
        let (kfs, index) = futures::join!(self.source.stat(&kfs_key), self.source.stat(&index_key));
        let (Some(kfs), Some(_)) = (kfs?, index?) else {
            return Ok(ObjectOutcome::Incomplete { segment: kfs_key });
        };
        if let Some(entry) = self.ledger.get(&kfs_key).await? {
            return self.known(entry, kfs.etag.as_deref()).await;
        }
        let _admitted = self.admit(kfs.size).await;
        let (key, kfs) = (&key, &kfs);
        let entry = self
            .settings
            .retry
            .run(PipelineError::kind, || async move {
                let access = self.catalog.access();
                let feed = crate::table::Feed {
                    namespace: &key.namespace,
                    topic: &key.topic,
                };
                let ledger = self.ledger.identity();
                let target = TopicTable::open(access, &self.settings.naming, feed, &ledger).await?;
                ingest_segment(
                    access,
                    &self.source,
                    &target,
                    &self.ledger,
                    key,
                    kfs,
                    self.settings.limits,
                )
                .await
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
        let now = now_ms();
        let rewrite = LedgerEntry {
            segment: format!("{}#rewritten-{current}", entry.segment),
            etag: current.to_owned(),
            data_files: Vec::new(),
            dead_letters: Default::default(),
            records: 0,
            bytes: 0,
            state: EntryState::Quarantined {
                error: format!(
                    "{} was rewritten with different content (ETag {} → {current}) after it was converted; the new content is not ingested",
                    self.source.describe(&entry.segment),
                    entry.etag
                ),
            },
            created_ms: now,
            updated_ms: now,
            ..entry.clone()
        };
        match self.ledger.insert(&rewrite).await? {
            InsertOutcome::Inserted | InsertOutcome::Exists(_) => Ok(ObjectOutcome::Rewritten {
                segment: entry.segment,
            }),
        }
    }
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

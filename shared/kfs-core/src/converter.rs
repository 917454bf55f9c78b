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
    /// Segments converted at the same time (bounds memory: each holds one segment).
    pub concurrency: usize,
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

/// The converter service.
pub struct ConverterService<S, L> {
    source: S,
    catalog: CatalogHandle,
    ledger: L,
    settings: ConverterSettings,
}

impl<S: SegmentSource, L: Ledger> ConverterService<S, L> {
    /// A service over a source rooted at the segment prefix, a catalog (with its
    /// pointer swap, for schema changes) and a ledger.
    pub fn new(source: S, catalog: CatalogHandle, ledger: L, settings: ConverterSettings) -> Self {
        Self {
            source,
            catalog,
            ledger,
            settings,
        }
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
        let kfs_key = key.object_key(SegmentFile::Data);
        let index_key = key.object_key(SegmentFile::Index);
        let (kfs, index) = futures::join!(self.source.stat(&kfs_key), self.source.stat(&index_key));
        let (Some(kfs), Some(_)) = (kfs?, index?) else {
            return Ok(ObjectOutcome::Incomplete { segment: kfs_key });
        };
        if let Some(entry) = self.ledger.get(&kfs_key).await? {
            return self.known(entry, kfs.etag.as_deref()).await;
        }
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

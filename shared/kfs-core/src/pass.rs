//! One pass of the pipeline, as both the CLI and the Lambda functions run it:
//! list the source, convert every complete segment the ledger has not seen (pending
//! or quarantined), then commit each table's pending segments.

use crate::catalog::CatalogAccess;
use crate::catalog::TableSwap;
use crate::clock::now_ms;
use crate::commit::{CommitOutcome, CommitSettings, commit_table};
use crate::error::PipelineError;
use crate::fault::RetryPolicy;
use crate::ingest::{TopicTable, ingest_segment};
use crate::ledger::{EntryState, Ledger, LedgerError};
use crate::source::{SegmentSource, SourceObject};
use crate::table::{Feed, OwnershipError};
use futures::StreamExt;
use iceberg::Catalog;
use kfs_plan::keys::{SegmentFile, SegmentKey, SegmentListing};
use kfs_plan::naming::TableNaming;
use kfs_plan::shard::Shard;
use kfs_plan::sweep::ListedSegment;
use kfs_segment::DecodeLimits;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// Settings of a pipeline pass.
#[derive(Debug, Clone, Default)]
pub struct PipelineConfig {
    /// Topic → table mapping.
    pub naming: TableNaming,
    /// Decoder limits.
    pub limits: DecodeLimits,
    /// Committer settings (their `start_offsets` are replaced per topic).
    pub commit: CommitSettings,
    /// Start offsets of partitions seen for the first time, per topic.
    pub start_offsets: BTreeMap<String, BTreeMap<i32, i64>>,
    /// Most segments converted in one pass (the sweep's bound); `None` for all.
    pub max_conversions: Option<usize>,
    /// When the pass must be done: conversions stop early enough to leave
    /// `commit_reserve` for the commits, and tables not reached by then wait.
    pub deadline: Option<Instant>,
    /// Time kept for commits before the deadline.
    pub commit_reserve: Duration,
    /// Tables committed at the same time (at least one).
    pub table_concurrency: usize,
    /// What etcd said at the start of the pass (the cross-check; `Disabled` by default).
    pub etcd: kfs_plan::crosscheck::EtcdState,
    /// How the cross-check treats etcd lag and outages.
    pub crosscheck: kfs_plan::crosscheck::CrossCheckPolicy,
    /// The topics this pass handles (all by default; see [`Shard`]).
    pub shard: Shard,
    /// Tries of one segment after transient failures, before the pass fails.
    pub retry: RetryPolicy,
}

/// Progress of a pass, for progress bars and logs.
#[derive(Debug, Clone)]
pub enum Progress {
    /// The source was listed.
    Listed {
        /// Complete segments found.
        segments: usize,
        /// Of which not yet in the ledger.
        new: usize,
    },
    /// A segment was converted.
    Converted {
        /// Segment key.
        segment: String,
        /// Records converted.
        records: u64,
    },
    /// A segment could not be converted and was quarantined.
    Quarantined {
        /// Segment key.
        segment: String,
        /// The error.
        error: String,
    },
    /// A table's commit cycle finished.
    Committed {
        /// Table.
        table: String,
        /// Snapshot created, if any.
        snapshot_id: Option<i64>,
    },
}

/// What a pass did.
#[derive(Debug, Clone, Default)]
pub struct RunReport {
    /// Objects listed.
    pub objects: usize,
    /// Objects that are not segment files.
    pub ignored: usize,
    /// Segments missing their `.kfs` or `.index` (left for later).
    pub incomplete: usize,
    /// Complete segments.
    pub segments: usize,
    /// Segments the ledger already knew, or below their table's watermark.
    pub known: usize,
    /// Segments of topics another shard handles.
    pub other_shards: usize,
    /// Segments converted in this pass.
    pub converted: usize,
    /// Records converted in this pass.
    pub records_converted: u64,
    /// Segments quarantined in this pass: key and error.
    pub quarantined: Vec<(String, String)>,
    /// Segment keys whose content changed after they were converted (ETag differs).
    pub rewritten: Vec<String>,
    /// Commit outcome per table.
    pub tables: BTreeMap<String, CommitOutcome>,
    /// Tables whose commit failed this pass, with the error; their files stay pending.
    pub failed_tables: BTreeMap<String, String>,
    /// New segments left for the next pass (conversion bound or deadline reached).
    pub deferred: usize,
    /// Feeds (`namespace/topic`) refused their table, with the reason: another feed
    /// owns it, or kfs-iceberg did not create it. Their segments wait, unconverted and
    /// uncommitted, until the mapping is fixed.
    pub refused: BTreeMap<String, String>,
}

/// Tables opened in this pass, by feed (namespace, topic); a feed refused its table
/// is remembered with the reason, and its segments wait.
struct Tables<'a> {
    catalog: CatalogAccess<'a>,
    naming: &'a TableNaming,
    /// The ledger's identity, recorded in the tables it protects.
    ledger: String,
    by_feed: HashMap<(String, String), Result<TopicTable, OwnershipError>>,
}

impl<'a> Tables<'a> {
    fn new(catalog: CatalogAccess<'a>, naming: &'a TableNaming, ledger: String) -> Self {
        Self {
            catalog,
            naming,
            ledger,
            by_feed: HashMap::new(),
        }
    }

    /// The table of `feed`, or why the feed was refused it.
    async fn get(
        &mut self,
        feed: Feed<'_>,
    ) -> Result<Result<&TopicTable, &OwnershipError>, PipelineError> {
        let id = (feed.namespace.to_owned(), feed.topic.to_owned());
        if !self.by_feed.contains_key(&id) {
            let opened = match TopicTable::open(self.catalog, self.naming, feed, &self.ledger).await
            {
                Ok(opened) => Ok(opened),
                Err(PipelineError::Ownership(refused)) => Err(refused),
                Err(e) => return Err(e),
            };
            self.by_feed.insert(id.clone(), opened);
        }
        match self.by_feed.get(&id) {
            Some(opened) => Ok(opened.as_ref()),
            None => Err(PipelineError::Ledger(LedgerError::Store {
                message: "table cache".into(),
                kind: crate::fault::ErrorKind::Transient,
            })),
        }
    }

    /// The feeds refused their tables, with the reasons.
    fn refused(&self) -> BTreeMap<String, String> {
        self.by_feed
            .iter()
            .filter_map(|((namespace, topic), opened)| {
                let refused = opened.as_ref().err()?;
                Some((format!("{namespace}/{topic}"), refused.to_string()))
            })
            .collect()
    }
}

/// Runs one pass: list, convert what is new, commit every table with pending work.
pub async fn run_once(
    source: &impl SegmentSource,
    catalog: &dyn Catalog,
    swap: &dyn TableSwap,
    ledger: &impl Ledger,
    config: &PipelineConfig,
    progress: &(dyn Fn(&Progress) + Sync),
) -> Result<RunReport, PipelineError> {
    config.naming.validate().map_err(PipelineError::Config)?;
    let objects = source.list().await?;
    let listing = SegmentListing::from_keys(objects.iter().map(|o| o.key.as_str()));
    let by_key: HashMap<&str, &SourceObject> =
        objects.iter().map(|o| (o.key.as_str(), o)).collect();
    let mut report = RunReport {
        objects: objects.len(),
        ignored: listing.ignored,
        incomplete: listing.incomplete.len(),
        segments: listing.complete.len(),
        ..RunReport::default()
    };
    let mut work = Vec::new();
    let mut tables = Tables::new(
        CatalogAccess { catalog, swap },
        &config.naming,
        ledger.identity(),
    );
    for key in &listing.complete {
        if !config.shard.owns(&key.topic) {
            report.other_shards += 1;
            continue;
        }
        let object_key = key.object_key(SegmentFile::Data);
        let Some(object) = by_key.get(object_key.as_str()) else {
            continue;
        };
        // Segments below the watermark are in the table: no ledger read for them, so a
        // sweep costs one read per segment not yet committed, not per segment listed.
        let Ok(target) = tables.get(feed_of(key)).await? else {
            continue;
        };
        let progress = &target.progress;
        if progress.classify(key.partition, key.base_offset) == ListedSegment::Committed {
            report.known += 1;
            continue;
        }
        match ledger.get(&object_key).await? {
            Some(entry) => {
                report.known += 1;
                if object.etag.as_ref().is_some_and(|etag| *etag != entry.etag) {
                    report.rewritten.push(object_key);
                }
            }
            None => work.push((key, *object)),
        }
    }
    progress(&Progress::Listed {
        segments: listing.complete.len(),
        new: work.len(),
    });
    let conversion_deadline = config
        .deadline
        .map(|d| d.checked_sub(config.commit_reserve).unwrap_or(d));
    let budget = config.max_conversions.unwrap_or(usize::MAX);
    for (done, (key, object)) in work.iter().enumerate() {
        if done >= budget || conversion_deadline.is_some_and(|d| Instant::now() >= d) {
            report.deferred = work.len() - done;
            break;
        }
        let Ok(target) = tables.get(feed_of(key)).await? else {
            continue;
        };
        let entry = config
            .retry
            .run(PipelineError::kind, || {
                ingest_segment(
                    CatalogAccess { catalog, swap },
                    source,
                    target,
                    ledger,
                    key,
                    object,
                    config.limits,
                )
            })
            .await?;
        match &entry.state {
            EntryState::Quarantined { error } => {
                progress(&Progress::Quarantined {
                    segment: entry.segment.clone(),
                    error: error.clone(),
                });
                report
                    .quarantined
                    .push((entry.segment.clone(), error.clone()));
            }
            _ => {
                progress(&Progress::Converted {
                    segment: entry.segment.clone(),
                    records: entry.records,
                });
                report.converted += 1;
                report.records_converted += entry.records;
            }
        }
    }
    // Commit every table that has pending work, with the listing of its feed.
    let pending = ledger.list(Some("pending"), None).await?;
    let feeds: BTreeSet<(String, &str)> = pending
        .iter()
        .filter(|e| config.shard.owns(&e.topic))
        .map(|e| (entry_namespace(e), e.topic.as_str()))
        .collect();
    // One job per table: feeds that share one (only a table from before namespaces
    // were recorded accepts a topic from several) commit together, on the listing of
    // them all.
    let mut jobs: BTreeMap<String, CommitJob> = BTreeMap::new();
    for (namespace, topic) in &feeds {
        let feed = Feed { namespace, topic };
        let Ok(target) = tables.get(feed).await? else {
            continue;
        };
        let name = target.name.clone();
        let (_, _, table_listing, _) = jobs.entry(name.to_string()).or_insert_with(|| {
            let settings = CommitSettings {
                start_offsets: config
                    .start_offsets
                    .get(*topic)
                    .cloned()
                    .unwrap_or_default(),
                etcd: config.etcd.view(topic),
                crosscheck: config.crosscheck,
                ..config.commit.clone()
            };
            (topic.to_string(), name, BTreeMap::new(), settings)
        });
        for key in listing
            .complete
            .iter()
            .filter(|k| k.topic == *topic && k.namespace == *namespace)
        {
            table_listing
                .entry(key.partition)
                .or_default()
                .insert(key.base_offset);
        }
    }
    let results: Vec<_> = futures::stream::iter(jobs.into_values())
        .map(|(topic, name, topic_listing, settings)| async move {
            if config.deadline.is_some_and(|d| Instant::now() >= d) {
                return (name, None);
            }
            let outcome = commit_table(
                catalog,
                ledger,
                &name,
                &topic,
                &topic_listing,
                &settings,
                now_ms(),
            )
            .await;
            (name, Some(outcome))
        })
        .buffer_unordered(config.table_concurrency.max(1))
        .collect()
        .await;
    for (name, outcome) in results {
        match outcome {
            Some(Ok(outcome)) => {
                progress(&Progress::Committed {
                    table: name.to_string(),
                    snapshot_id: outcome.snapshot_id,
                });
                report.tables.insert(name.to_string(), outcome);
            }
            Some(Err(e)) => {
                report.failed_tables.insert(name.to_string(), e.to_string());
            }
            None => {
                report.failed_tables.insert(
                    name.to_string(),
                    "deadline reached before its commit".into(),
                );
            }
        }
    }
    report.refused = tables.refused();
    Ok(report)
}

/// One table's commit: its topic, name, the listing of its feeds, and the settings.
type CommitJob = (
    String,
    kfs_plan::naming::TableName,
    BTreeMap<i32, BTreeSet<i64>>,
    CommitSettings,
);

/// The feed of a listed segment.
fn feed_of(key: &SegmentKey) -> Feed<'_> {
    Feed {
        namespace: &key.namespace,
        topic: &key.topic,
    }
}

/// The KafScale namespace of a ledger entry (the first part of its segment key).
fn entry_namespace(entry: &crate::ledger::LedgerEntry) -> String {
    SegmentKey::parse(&entry.segment).map_or_else(String::new, |(key, _)| key.namespace)
}

//! One pass of the pipeline, as both the CLI and the Lambda functions run it:
//! list the source, convert every complete segment the ledger has not seen (pending
//! or quarantined), then commit each table's pending segments.

use crate::catalog::CatalogAccess;
use crate::catalog::TableSwap;
use crate::clock::now_ms;
use crate::commit::{CommitOutcome, CommitSettings, commit_table};
use crate::error::PipelineError;
use crate::fault::RetryPolicy;
use crate::ingest::{
    MAX_RUN_SEGMENTS, NewSegment, RunLimits, TopicTable, ingest_runs, ingest_segment,
    quarantine_unconverted,
};
use crate::ledger::{EntryState, Ledger, LedgerError};
use crate::source::{SegmentSource, SourceObject};
use crate::table::{Feed, OwnershipError};
use futures::StreamExt;
use iceberg::Catalog;
use kfs_plan::keys::{SegmentFile, SegmentKey, SegmentListing};
use kfs_plan::naming::TableNaming;
use kfs_plan::shard::Shard;
use kfs_plan::sweep::{BaseRange, ListedSegment};
use kfs_segment::DecodeLimits;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

/// Conversions of one segment that may begin and never end (their process died)
/// before the sweep quarantines the segment instead of trying it again.
pub const UNFINISHED_ATTEMPTS: u32 = 3;

/// Longest a conversion may run, unless the configuration says otherwise: Lambda's
/// longest timeout. An attempt that began earlier and never ended is dead.
pub const CONVERSION_TIMEOUT: Duration = Duration::from_secs(15 * 60);

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
    /// Most segments one run converts into one set of data files
    /// ([`MAX_RUN_SEGMENTS`](crate::MAX_RUN_SEGMENTS) when `None`; 1 for a
    /// data file per segment).
    pub max_run_segments: Option<usize>,
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
    /// The writer schemas of registry tables' values (`None`: no registry is
    /// configured, and a registry table's segments wait for one).
    pub schemas: Option<std::sync::Arc<crate::convert::RegistrySchemas>>,
    /// Longest a conversion may run (the function's timeout; [`CONVERSION_TIMEOUT`]
    /// when `None`): unfinished attempts that began longer ago are dead, and after
    /// [`UNFINISHED_ATTEMPTS`] of them the segment is quarantined.
    pub conversion_timeout: Option<Duration>,
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
    /// A segment, or a run of segments, was converted.
    Converted {
        /// Segment key (the run's first).
        segment: String,
        /// Segments converted (more than one for a run).
        segments: usize,
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
    /// Objects listed: after each partition's watermark, and where a late segment
    /// would be (what is retained below the watermark is never listed).
    pub objects: usize,
    /// Objects that are not segment files.
    pub ignored: usize,
    /// Segments missing their `.kfs` or `.index` (left for later).
    pub incomplete: usize,
    /// Complete segments.
    pub segments: usize,
    /// Segments the ledger already knew, or below their table's watermark.
    pub known: usize,
    /// Topics another shard handles (not listed further).
    pub other_shards: usize,
    /// Topics the settings do not select for ingestion (not listed further).
    pub unselected_topics: usize,
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
    /// New segments left unconverted for the next pass (the conversion bound or the
    /// deadline reached).
    pub deferred: usize,
    /// Feeds (`namespace/topic`) the sweep did not finish before the deadline: the
    /// rest of their listing waits for the next pass.
    pub deferred_feeds: usize,
    /// Tables whose feeds the sweep listed.
    pub swept: BTreeSet<String>,
    /// Feeds (`namespace/topic`) refused their table, with the reason: another feed
    /// owns it, or kfs-iceberg did not create it. Their segments wait, unconverted and
    /// uncommitted, until the mapping is fixed.
    pub refused: BTreeMap<String, String>,
    /// Segments whose conversion failed this pass for a reason that is not their bytes
    /// (after the retries), with the error: left unrecorded, tried again next pass;
    /// every other segment and table went on.
    pub failed_segments: Vec<(String, String)>,
    /// Ledger items that could not be read, with the reason: their partitions wait
    /// at them until an operator repairs or removes the item; others go on.
    pub unreadable: Vec<(String, String)>,
}

impl RunReport {
    /// True when the pass left work undone that another pass (or an operator) must
    /// finish: a table that failed to open or commit, a segment that failed to
    /// convert, or an unreadable ledger item.
    pub fn left_work(&self) -> bool {
        !self.failed_tables.is_empty()
            || !self.failed_segments.is_empty()
            || !self.unreadable.is_empty()
    }

    /// True when something needs an operator or another pass: [`Self::left_work`], or
    /// a feed refused its table.
    pub fn has_failures(&self) -> bool {
        self.left_work() || !self.refused.is_empty()
    }
}

/// Why a feed has no table in this pass.
enum NoTable {
    /// Another feed owns it, or kfs-iceberg did not create it.
    Refused(OwnershipError),
    /// It could not be opened (catalog failure, table metadata unreadable): the table
    /// name and the error; the next pass tries again.
    Failed(String, String),
}

/// Tables opened in this pass, by feed (namespace, topic); a feed refused its table
/// is remembered with the reason, and its segments wait.
struct Tables<'a> {
    catalog: CatalogAccess<'a>,
    naming: &'a TableNaming,
    schemas: Option<std::sync::Arc<crate::convert::RegistrySchemas>>,
    /// The ledger's identity, recorded in the tables it protects.
    ledger: String,
    by_feed: HashMap<(String, String), Result<TopicTable, NoTable>>,
}

impl<'a> Tables<'a> {
    fn new(
        catalog: CatalogAccess<'a>,
        naming: &'a TableNaming,
        ledger: String,
        schemas: Option<std::sync::Arc<crate::convert::RegistrySchemas>>,
    ) -> Self {
        Self {
            catalog,
            naming,
            ledger,
            schemas,
            by_feed: HashMap::new(),
        }
    }

    /// The table of `feed`, or `None` when the feed was refused it or it could not be
    /// opened (remembered for the pass, reported at its end).
    async fn get(&mut self, feed: Feed<'_>) -> Option<&TopicTable> {
        let id = (feed.namespace.to_owned(), feed.topic.to_owned());
        if !self.by_feed.contains_key(&id) {
            let opened = match TopicTable::open(self.catalog, self.naming, feed, &self.ledger).await
            {
                Ok(opened) => Ok(opened.with_schemas(self.schemas.clone())),
                Err(PipelineError::Ownership(refused)) => Err(NoTable::Refused(refused)),
                Err(e) => Err(NoTable::Failed(
                    self.naming.table_for(feed.topic).to_string(),
                    e.to_string(),
                )),
            };
            self.by_feed.insert(id.clone(), opened);
        }
        self.by_feed.get(&id)?.as_ref().ok()
    }

    /// The feeds refused their tables, with the reasons.
    fn refused(&self) -> BTreeMap<String, String> {
        self.by_feed
            .iter()
            .filter_map(|((namespace, topic), opened)| match opened {
                Err(NoTable::Refused(refused)) => {
                    Some((format!("{namespace}/{topic}"), refused.to_string()))
                }
                _ => None,
            })
            .collect()
    }

    /// The tables that could not be opened, with the errors.
    fn failed(&self) -> impl Iterator<Item = (&String, &String)> {
        self.by_feed.values().filter_map(|opened| match opened {
            Err(NoTable::Failed(table, error)) => Some((table, error)),
            _ => None,
        })
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
    let mut report = RunReport::default();
    let mut work = Vec::new();
    let mut tables = Tables::new(
        CatalogAccess { catalog, swap },
        &config.naming,
        ledger.identity(),
        config.schemas.clone(),
    );
    let sweep_deadline = config
        .deadline
        .map(|d| d.checked_sub(config.commit_reserve).unwrap_or(d));
    // Per table: the listing the commit plans with, and the segments the ledger
    // holds open work for (no lookup needed for them).
    let mut swept: BTreeMap<String, SweptTable> = BTreeMap::new();
    let feeds = list_feeds(source, config, &mut report).await?;
    let past_deadline = || sweep_deadline.is_some_and(|d| Instant::now() >= d);
    // Feeds before this one were listed in full.
    let mut reached = feeds.len();
    'sweep: for (feed_at, (namespace, topic, partitions)) in feeds.iter().enumerate() {
        if past_deadline() {
            // Checked in every loop: a sweep of a long backlog must not eat the time
            // its commits need. What is not looked at waits for the next pass.
            reached = feed_at;
            break;
        }
        let feed = Feed { namespace, topic };
        let Some(target) = tables.get(feed).await else {
            continue;
        };
        let table_name = target.name.to_string();
        let table = match swept.entry(table_name.clone()) {
            std::collections::btree_map::Entry::Occupied(slot) => slot.into_mut(),
            std::collections::btree_map::Entry::Vacant(slot) => {
                let pending = ledger.work_keys("pending", &table_name).await?;
                let has_pending = !pending.is_empty();
                let mut pending_at: BTreeMap<i32, BTreeMap<i64, String>> = BTreeMap::new();
                for key in &pending {
                    pending_at
                        .entry(key.partition)
                        .or_default()
                        .insert(key.base_offset, key.segment.clone());
                }
                let mut open: HashSet<String> = pending.into_iter().map(|k| k.segment).collect();
                let quarantined = ledger.work_keys("quarantined", &table_name).await?;
                open.extend(quarantined.into_iter().map(|k| k.segment));
                report.swept.insert(table_name.clone());
                slot.insert(SweptTable {
                    topic: topic.clone(),
                    name: target.name.clone(),
                    listing: BTreeMap::new(),
                    open,
                    pending_at,
                    runs: HashMap::new(),
                    has_pending,
                })
            }
        };
        for (partition_dir, partition) in partitions {
            let partition = *partition;
            let dir = format!("{namespace}/{topic}/{partition_dir}/");
            // Only where work can be: after the watermark, and where a late segment
            // would be. What is retained below the watermark is never listed.
            for range in target.progress.ranges_to_list(partition) {
                let objects = list_range(source, &dir, range).await?;
                let found = SegmentListing::from_keys(objects.iter().map(|o| o.key.as_str()));
                report.objects += objects.len();
                report.ignored += found.ignored;
                report.incomplete += found.incomplete.len();
                report.segments += found.complete.len();
                let by_key: HashMap<&str, &SourceObject> =
                    objects.iter().map(|o| (o.key.as_str(), o)).collect();
                // Segments new to this pass's view, looked up in the ledger together,
                // each with whether the segment listed before it is new too.
                let mut unknown: Vec<(SegmentKey, &SourceObject, bool)> = Vec::new();
                let mut previous_new = false;
                for key in found.complete {
                    let follows = std::mem::replace(&mut previous_new, false);
                    if past_deadline() {
                        reached = feed_at;
                        break 'sweep;
                    }
                    table
                        .listing
                        .entry(key.partition)
                        .or_default()
                        .insert(key.base_offset);
                    let object_key = key.object_key(SegmentFile::Data);
                    let Some(&object) = by_key.get(object_key.as_str()) else {
                        continue;
                    };
                    if target.progress.classify(key.partition, key.base_offset)
                        == ListedSegment::Committed
                        || table.open.contains(&object_key)
                    {
                        // In the table, or open work the ledger holds: no lookup, so a
                        // sweep costs one read per segment new to it, not per segment
                        // waiting.
                        report.known += 1;
                        continue;
                    }
                    match table.run_holding(ledger, &key).await {
                        Err(LedgerError::Corrupt { segment, reason }) => {
                            report.known += 1;
                            report.unreadable.push((segment, reason));
                            continue;
                        }
                        Err(e) => return Err(e.into()),
                        Ok(Some(Held::Member(etag))) => {
                            // Converted in a pending run: no entry of its own.
                            report.known += 1;
                            if object.etag.as_ref().is_some_and(|current| *current != etag) {
                                report.rewritten.push(object_key);
                            }
                            continue;
                        }
                        Ok(Some(Held::InGap)) => {
                            // Listed inside a gap a pending run spans: the commit
                            // drops the run, and the next pass converts them all.
                            report.known += 1;
                            continue;
                        }
                        Ok(None) => {
                            unknown.push((key, object, follows));
                            previous_new = true;
                        }
                    }
                }
                let keys: Vec<String> = unknown
                    .iter()
                    .map(|(key, _, _)| key.object_key(SegmentFile::Data))
                    .collect();
                let found = ledger.get_many(&keys).await?;
                let unreadable: HashSet<String> =
                    found.unreadable.iter().map(|(s, _)| s.clone()).collect();
                report.known += found.unreadable.len();
                report.unreadable.extend(found.unreadable);
                let recorded: HashMap<String, crate::ledger::LedgerEntry> = found
                    .entries
                    .into_iter()
                    .map(|entry| (entry.segment.clone(), entry))
                    .collect();
                // A segment the ledger knows after all breaks the chain of new ones.
                let mut chained = false;
                for ((key, object, follows), object_key) in unknown.into_iter().zip(keys) {
                    if unreadable.contains(&object_key) {
                        chained = false;
                        continue;
                    }
                    match recorded.get(&object_key) {
                        Some(entry) => {
                            report.known += 1;
                            chained = false;
                            if object.etag.as_ref().is_some_and(|etag| *etag != entry.etag) {
                                report.rewritten.push(object_key);
                            }
                        }
                        None => {
                            work.push(NewSegment {
                                key,
                                object: object.clone(),
                                follows: follows && chained,
                            });
                            chained = true;
                        }
                    }
                }
            }
        }
    }
    // A table whose feeds were not all listed does not commit in this pass: its
    // listing is partial, and a segment not listed must never pass for a gap.
    report.deferred_feeds = feeds.len() - reached;
    for (_, topic, _) in &feeds[reached..] {
        let name = config.naming.table_for(topic).to_string();
        if swept.remove(&name).is_some() {
            report.failed_tables.insert(
                name,
                "deadline reached before its listing finished; the next pass lists it again".into(),
            );
        }
    }
    progress(&Progress::Listed {
        segments: report.segments,
        new: work.len(),
    });
    let budget = config.max_conversions.unwrap_or(usize::MAX);
    let stop = || sweep_deadline.is_some_and(|d| Instant::now() >= d);
    let run_limits = RunLimits {
        decode: config.limits,
        max_segments: config
            .max_run_segments
            .map_or(MAX_RUN_SEGMENTS, |n| n.clamp(1, MAX_RUN_SEGMENTS)),
    };
    let mut at = 0;
    let mut done = 0;
    while at < work.len() {
        if done >= budget || stop() {
            report.deferred += work.len() - at;
            break;
        }
        let key = &work[at].key;
        let Some(target) = tables.get(feed_of(key)).await else {
            at += 1;
            continue;
        };
        // The segments of this partition from here that convert in runs.
        let small = work[at..]
            .iter()
            .take_while(|new| {
                new.key.partition == key.partition
                    && new.key.topic == key.topic
                    && new.key.namespace == key.namespace
                    && target.in_runs(&new.object)
            })
            .take(budget - done)
            .count();
        // A segment that is not small is a group of its own, converted alone.
        let group = &work[at..at + small.max(1)];
        at += group.len();
        // Runs are tracked as attempts of their own: after a run that killed its
        // process, the group is converted one segment at a time, each tracked, so
        // that the segment that kills it is the one quarantined.
        let attempt = run_attempt(&group[0].key.object_key(SegmentFile::Data));
        let one_by_one =
            small == 0 || ledger.begin_attempt(&attempt, now_ms()).await?.unfinished > 0;
        if one_by_one {
            for NewSegment { key, object, .. } in group {
                if stop() {
                    report.deferred += 1;
                    continue;
                }
                done += 1;
                if let Some(entry) = convert_single(
                    source,
                    CatalogAccess { catalog, swap },
                    target,
                    ledger,
                    key,
                    object,
                    config,
                    &mut report,
                )
                .await?
                {
                    note_recorded(&entry, &mut report, &mut swept, progress);
                }
            }
            if small > 0 {
                ledger.end_attempt(&attempt).await?;
            }
            continue;
        }
        let runs = ingest_runs(
            source,
            target,
            ledger,
            group,
            run_limits,
            &config.retry,
            &stop,
        )
        .await;
        ledger.end_attempt(&attempt).await?;
        let runs = runs?;
        done += small - runs.deferred;
        report.deferred += runs.deferred;
        report
            .failed_segments
            .extend(runs.failed.iter().map(|e| match e {
                PipelineError::Unconverted {
                    segment, message, ..
                } => (segment.clone(), message.clone()),
                other => (String::new(), other.to_string()),
            }));
        for entry in &runs.recorded {
            note_recorded(entry, &mut report, &mut swept, progress);
        }
    }
    // Commit every table swept with pending work, on the listing of its feeds (feeds
    // that share one table, which only a table from before namespaces were recorded
    // allows, commit together).
    let mut jobs = Vec::new();
    for table in swept.into_values() {
        if !table.has_pending {
            continue;
        }
        let settings = CommitSettings {
            start_offsets: config
                .start_offsets
                .get(&table.topic)
                .cloned()
                .unwrap_or_default(),
            etcd: config.etcd.view(&table.topic),
            crosscheck: config.crosscheck,
            ..config.commit.clone()
        };
        jobs.push((table.topic, table.name, table.listing, settings));
    }
    let results: Vec<_> = futures::stream::iter(jobs)
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
                report.unreadable.extend(outcome.unreadable.iter().cloned());
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
    for (table, error) in tables.failed() {
        report
            .failed_tables
            .entry(table.clone())
            .or_insert_with(|| format!("could not be opened: {error}"));
    }
    report.unreadable.sort();
    report.unreadable.dedup();
    Ok(report)
}

/// The key under which the attempts of runs starting at the segment `lead` are
/// tracked (apart from the segment's own).
pub fn run_attempt(lead: &str) -> String {
    format!("{lead}#run")
}

/// Converts one segment (its attempts tracked: one whose conversions keep killing the
/// process is quarantined unconverted). Returns the entry recorded, or `None` when
/// the conversion failed for a reason that is not the segment's bytes (noted in the
/// report; the next pass tries again). Only the ledger failing fails the pass.
#[allow(clippy::too_many_arguments)]
async fn convert_single(
    source: &impl SegmentSource,
    catalog: CatalogAccess<'_>,
    target: &TopicTable,
    ledger: &impl Ledger,
    key: &SegmentKey,
    object: &SourceObject,
    config: &PipelineConfig,
    report: &mut RunReport,
) -> Result<Option<crate::ledger::LedgerEntry>, PipelineError> {
    let segment = key.object_key(SegmentFile::Data);
    // A conversion that killed its process (out of memory, a timeout, a crash)
    // never ended its attempt: after a few, all older than any conversion may run
    // (so none is merely running elsewhere), the segment is quarantined instead of
    // killing every pass that reaches it.
    let began = now_ms();
    let earlier = ledger.begin_attempt(&segment, began).await?;
    let timeout = config.conversion_timeout.unwrap_or(CONVERSION_TIMEOUT);
    let recorded = if earlier.dead(UNFINISHED_ATTEMPTS, timeout, began) {
        let why = format!(
            "{} conversions began and never ended, the latest over {} s ago (the process died: out of memory, a timeout or a crash); quarantined so that other segments go on: raise the function's memory or timeout, then `quarantine retry`",
            earlier.unfinished,
            timeout.as_secs()
        );
        quarantine_unconverted(source, target, ledger, key, object, &why).await
    } else {
        config
            .retry
            .run(PipelineError::kind, || {
                ingest_segment(catalog, source, target, ledger, key, object, config.limits)
            })
            .await
    };
    ledger.end_attempt(&segment).await?;
    match recorded {
        Ok(entry) => Ok(Some(entry)),
        // The ledger itself failing fails the pass: nothing can be recorded.
        Err(e @ PipelineError::Ledger(LedgerError::Store { .. })) => Err(e),
        Err(e) => {
            // Not the segment's bytes (those quarantine): the catalog, the store,
            // the table. Left unrecorded for the next pass; the rest goes on.
            report.failed_segments.push((segment, e.to_string()));
            Ok(None)
        }
    }
}

/// Notes an entry a conversion recorded (a segment, or a run of them) in the report
/// and the progress.
fn note_recorded(
    entry: &crate::ledger::LedgerEntry,
    report: &mut RunReport,
    swept: &mut BTreeMap<String, SweptTable>,
    progress: &(dyn Fn(&Progress) + Sync),
) {
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
            let segments = entry.segments();
            progress(&Progress::Converted {
                segment: entry.segment.clone(),
                segments,
                records: entry.records,
            });
            report.converted += segments;
            report.records_converted += entry.records;
            if let Some(table) = swept.get_mut(&entry.table) {
                table.has_pending = true;
            }
        }
    }
}

/// The objects of the partition directory `dir` whose base offsets lie in `range`,
/// in key order: listed from the range's start (`StartAfter`), and no further than
/// its end (segment keys sort by base offset).
async fn list_range(
    source: &impl SegmentSource,
    dir: &str,
    range: BaseRange,
) -> Result<Vec<SourceObject>, PipelineError> {
    let start_after = range.from.map(|from| format!("{dir}segment-{from:020}"));
    let mut listed = source.list_files(dir, start_after.as_deref()).await?;
    let mut objects = Vec::new();
    while let Some(object) = listed.next().await {
        let object = object?;
        if SegmentKey::parse(&object.key).is_some_and(|(k, _)| range.is_below(k.base_offset)) {
            break;
        }
        objects.push(object);
    }
    Ok(objects)
}

/// A feed's namespace, topic, and partitions (directory name and number).
type Feeds = (String, String, Vec<(String, i32)>);

/// What the sweep found for one table.
struct SweptTable {
    /// The topic feeding it.
    topic: String,
    /// Its name.
    name: kfs_plan::naming::TableName,
    /// Base offsets of the complete segments listed, per partition.
    listing: BTreeMap<i32, BTreeSet<i64>>,
    /// Segments with open work in the ledger (pending or quarantined).
    open: HashSet<String>,
    /// The pending entries' keys, by partition and base offset.
    pending_at: BTreeMap<i32, BTreeMap<i64, String>>,
    /// Pending entries read to see which segments their runs hold (`None`: gone).
    runs: HashMap<String, Option<HeldRun>>,
    /// Whether it has pending work: pending before the pass, or converted in it.
    has_pending: bool,
}

/// What a pending run holds: its last offset, and its members' versions by base
/// offset.
type HeldRun = (i64, HashMap<i64, String>);

/// How a pending run holds a listed segment.
enum Held {
    /// As a member, converted in this version.
    Member(String),
    /// Inside a gap the run spans (no segment was listed there when it was converted).
    InGap,
}

impl SweptTable {
    /// Whether the segment `key` lies inside a pending run (the run's entry, not the
    /// segment, is in the ledger): the run starting last before it, read once per
    /// pass.
    async fn run_holding(
        &mut self,
        ledger: &impl Ledger,
        key: &SegmentKey,
    ) -> Result<Option<Held>, LedgerError> {
        let Some((_, lead)) = self
            .pending_at
            .get(&key.partition)
            .and_then(|at| at.range(..key.base_offset).next_back())
        else {
            return Ok(None);
        };
        if !self.runs.contains_key(lead) {
            let run = ledger.get(lead).await?.map(|entry| {
                let members = entry
                    .members
                    .into_iter()
                    .map(|m| (m.base_offset, m.etag))
                    .collect();
                (entry.last_offset, members)
            });
            self.runs.insert(lead.clone(), run);
        }
        Ok(self.runs.get(lead).and_then(|run| {
            let (last_offset, members) = run.as_ref()?;
            if key.base_offset > *last_offset {
                return None;
            }
            // Inside the run's offsets: a segment it holds, or one in a gap it spans.
            Some(
                members
                    .get(&key.base_offset)
                    .map_or(Held::InGap, |etag| Held::Member(etag.clone())),
            )
        }))
    }
}

/// The feeds of the source and their partitions, as its directories show them
/// (`{namespace}/{topic}/{partition}/`), for the topics `shard` handles; the
/// others are counted.
async fn list_feeds(
    source: &impl SegmentSource,
    config: &PipelineConfig,
    report: &mut RunReport,
) -> Result<Vec<Feeds>, PipelineError> {
    let mut feeds = Vec::new();
    for namespace in source.list_dirs("").await? {
        for topic in source.list_dirs(&format!("{namespace}/")).await? {
            if !kfs_plan::keys::is_topic_name(&topic) {
                continue;
            }
            if !config.naming.topics.selects(&topic) {
                report.unselected_topics += 1;
                continue;
            }
            if !config.shard.owns(&topic) {
                report.other_shards += 1;
                continue;
            }
            let partitions: Vec<(String, i32)> = source
                .list_dirs(&format!("{namespace}/{topic}/"))
                .await?
                .into_iter()
                .filter_map(|dir| {
                    let partition = dir.parse().ok().filter(|p: &i32| *p >= 0)?;
                    Some((dir, partition))
                })
                .collect();
            feeds.push((namespace.clone(), topic, partitions));
        }
    }
    Ok(feeds)
}

/// The feed of a listed segment.
fn feed_of(key: &SegmentKey) -> Feed<'_> {
    Feed {
        namespace: &key.namespace,
        topic: &key.topic,
    }
}

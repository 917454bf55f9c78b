//! One pass of the pipeline, as both the CLI and the Lambda functions run it:
//! list the source, convert every complete segment the ledger has not seen (pending
//! or quarantined), then commit each table's pending segments.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};

use iceberg::Catalog;
use iceberg::table::Table;
use kfs_plan::keys::{SegmentFile, SegmentKey, SegmentListing};
use kfs_plan::naming::{TableName, TableNaming, ValueFormat};
use kfs_plan::offsets::SummaryError;
use kfs_plan::shard::Shard;
use kfs_plan::sweep::{ListedSegment, TableProgress};
use kfs_segment::DecodeLimits;

use crate::catalog::{CatalogAccess, ensure_topic_table, evolve_partition_spec};
use crate::committer::{CommitError, CommitOutcome, CommitSettings, commit_table, table_progress};
use crate::convert::{
    ConvertError, ConvertedSegment, SegmentInput, ValueColumns, convert_segment, scan_json_segment,
};
use crate::ledger::{DeadLetters, EntryState, InsertOutcome, Ledger, LedgerEntry, LedgerError};
use crate::source::{SegmentSource, SourceError, SourceObject};
use crate::table_commit::TableSwap;

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
}

/// A pass failed; what it did before the failure stands (the ledger is durable).
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// Listing or reading the source failed.
    #[error("source: {0}")]
    Source(#[from] SourceError),
    /// The ledger failed.
    #[error("ledger: {0}")]
    Ledger(#[from] LedgerError),
    /// The catalog failed.
    #[error("table {table}: {source}")]
    Catalog {
        /// Table.
        table: String,
        /// Catalog error.
        source: Box<iceberg::Error>,
    },
    /// A segment failed to convert for a reason that may pass.
    #[error("{0}")]
    Convert(#[from] ConvertError),
    /// A commit cycle failed.
    #[error("{0}")]
    Commit(#[from] CommitError),
    /// A table's snapshot summary is unreadable.
    #[error("table {table}: {source}")]
    Summary {
        /// Table.
        table: String,
        /// What is wrong.
        source: SummaryError,
    },
}

impl PipelineError {
    /// Whether running the pass again may succeed without anyone acting.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Source(e) => e.retryable,
            Self::Ledger(e) => e.is_retryable(),
            Self::Catalog { source, .. } => source.retryable(),
            Self::Convert(e) => !e.is_permanent(),
            Self::Commit(e) => e.is_retryable(),
            Self::Summary { .. } => false,
        }
    }
}

/// Now, in Unix milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Bytes at the end of a segment that identify its content: the footer, which holds
/// the CRC-32C of the whole body (checked when the segment is decoded).
const FOOTER_TAG_BYTES: u64 = kfs_segment::SEGMENT_FOOTER_LEN as u64;

/// The identity of a segment version: the store's ETag, or (where the store has none,
/// as in a local directory) its size and footer, which carries the body's CRC-32C.
pub fn version_tag(object: &SourceObject, tail: &[u8]) -> String {
    match &object.etag {
        Some(etag) => etag.clone(),
        None => {
            let footer: String = tail.iter().map(|b| format!("{b:02x}")).collect();
            format!("footer-{footer}-{}", object.size)
        }
    }
}

/// A topic's table, opened (created on first sight), with its progress at opening.
#[derive(Debug, Clone)]
pub struct TopicTable {
    /// The table's name.
    pub name: TableName,
    /// The table.
    pub table: Table,
    /// Its watermarks and recorded gaps.
    pub progress: TableProgress,
}

impl TopicTable {
    /// Opens the table of `topic`, creating it on first sight; an existing table whose
    /// partition spec differs from the one configured evolves to it.
    pub async fn open(
        catalog: CatalogAccess<'_>,
        naming: &TableNaming,
        topic: &str,
    ) -> Result<Self, PipelineError> {
        let name = naming.table_for(topic);
        let catalog_error = |source: iceberg::Error| PipelineError::Catalog {
            table: name.to_string(),
            source: Box::new(source),
        };
        let mut table = ensure_topic_table(catalog.catalog, &name, topic, naming)
            .await
            .map_err(catalog_error)?;
        if let Some(fields) = naming.configured_partition(topic) {
            table = match evolve_partition_spec(catalog.swap, &table, fields).await {
                Ok(table) => table,
                // Another process evolved it first: its spec is the configured one, or
                // the next pass tries again.
                Err(e) if e.kind() == iceberg::ErrorKind::CatalogCommitConflicts => catalog
                    .catalog
                    .load_table(table.identifier())
                    .await
                    .map_err(catalog_error)?,
                Err(e) => return Err(catalog_error(e)),
            };
        }
        let progress = table_progress(&table).map_err(|source| PipelineError::Summary {
            table: name.to_string(),
            source,
        })?;
        Ok(Self {
            name,
            table,
            progress,
        })
    }
}

/// Tables opened in this pass, by topic.
#[derive(Default)]
struct Tables {
    by_topic: HashMap<String, TopicTable>,
}

impl Tables {
    async fn get(
        &mut self,
        catalog: CatalogAccess<'_>,
        naming: &TableNaming,
        topic: &str,
    ) -> Result<&TopicTable, PipelineError> {
        if !self.by_topic.contains_key(topic) {
            let opened = TopicTable::open(catalog, naming, topic).await?;
            self.by_topic.insert(topic.to_owned(), opened);
        }
        self.by_topic.get(topic).ok_or_else(|| {
            PipelineError::Ledger(LedgerError::Store {
                message: "table cache".into(),
                retryable: false,
            })
        })
    }
}

/// Converts one segment and records the result in the ledger: pending with its data
/// files, or quarantined with the error. A segment that arrives after its offsets were
/// committed as a gap, or below the offset its partition began at (by the table's
/// progress at opening), is quarantined unconverted: the table has moved past it.
/// Returns the entry as recorded.
pub async fn ingest_segment(
    catalog: CatalogAccess<'_>,
    source: &impl SegmentSource,
    target: &TopicTable,
    ledger: &impl Ledger,
    key: &SegmentKey,
    object: &SourceObject,
    limits: DecodeLimits,
) -> Result<LedgerEntry, PipelineError> {
    let TopicTable {
        name: table_name,
        table,
        progress,
    } = target;
    let etag = match &object.etag {
        Some(etag) => etag.clone(),
        None => {
            let from = object.size.saturating_sub(FOOTER_TAG_BYTES);
            let tail = source.read_range(&object.key, from..object.size).await?;
            version_tag(object, &tail)
        }
    };
    let now = now_ms();
    let mut entry = LedgerEntry {
        segment: object.key.clone(),
        etag: etag.clone(),
        table: table_name.to_string(),
        topic: key.topic.clone(),
        partition: key.partition,
        base_offset: key.base_offset,
        last_offset: key.base_offset,
        records: 0,
        bytes: 0,
        data_files: Vec::new(),
        dead_letters: Default::default(),
        state: EntryState::Pending,
        created_ms: now,
        updated_ms: now,
    };
    let late = match progress.classify(key.partition, key.base_offset) {
        ListedSegment::LateAfterGap(gap) => Some(format!(
            "arrived after offsets {}..={} of partition {} were committed as a gap ({:?})",
            gap.from, gap.to, gap.partition, gap.reason
        )),
        ListedSegment::LateBeforeStart { start } => Some(format!(
            "arrived after partition {} began in the table at offset {start}; its offsets are below that start",
            key.partition
        )),
        ListedSegment::Open | ListedSegment::Committed => None,
    };
    if let Some(why) = late {
        entry.state = EntryState::Quarantined {
            error: format!(
                "{}: {why}; not ingested behind the watermark: load it elsewhere or skip it",
                source.describe(&object.key),
            ),
        };
        return match ledger.insert(&entry).await? {
            InsertOutcome::Inserted => Ok(entry),
            InsertOutcome::Exists(existing) => Ok(*existing),
        };
    }
    let body = source.open(&object.key, object.etag.as_deref()).await?;
    let input = SegmentInput { key, etag: &etag };
    let catalog_error = |source: iceberg::Error| PipelineError::Catalog {
        table: table_name.to_string(),
        source: Box::new(source),
    };
    let format = crate::table::value_format_of(table).map_err(|reason| {
        catalog_error(iceberg::Error::new(iceberg::ErrorKind::DataInvalid, reason))
    })?;
    let converted = match format {
        ValueFormat::Raw => convert_segment(table, input, body, limits, ValueColumns::Raw)
            .await
            .map(|converted| (converted, table.clone(), None)),
        ValueFormat::Json => convert_json_segment(catalog, target, input, body, limits).await?,
    };
    match converted {
        Ok((converted, table, dead_letter_table)) => {
            // Written in the table's default spec as the conversion saw it.
            let serialize = |files: Vec<iceberg::spec::DataFile>, table: &Table| {
                let metadata = table.metadata();
                files
                    .into_iter()
                    .map(|file| {
                        crate::ledger_files::to_ledger(
                            file,
                            metadata.default_partition_spec_id(),
                            metadata,
                        )
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(catalog_error)
            };
            entry.data_files = serialize(converted.data_files, &table)?;
            if let Some(dead_letter_table) = &dead_letter_table {
                entry.dead_letters = DeadLetters {
                    records: converted.dead_letters,
                    files: serialize(converted.dead_letter_files, dead_letter_table)?,
                };
            }
            entry.last_offset = converted.last_offset;
            entry.records = converted.records;
            entry.bytes = converted.file_bytes;
        }
        Err(e) if e.is_permanent() => {
            entry.state = EntryState::Quarantined {
                error: format!("{}: {e}", source.describe(&object.key)),
            };
        }
        Err(e) => return Err(e.into()),
    }
    let written = converted_paths(&entry);
    match ledger.insert(&entry).await? {
        InsertOutcome::Inserted => Ok(entry),
        InsertOutcome::Exists(existing) => {
            // Another process recorded this segment first: our files (named for this
            // write alone) are referenced by nothing, unless the entry found is our
            // own (a retried insert whose first attempt landed). Best effort; orphan
            // cleanup removes what a failure here leaves.
            let kept: HashSet<String> = converted_paths(&existing).into_iter().collect();
            for path in written.iter().filter(|path| !kept.contains(*path)) {
                let _ = crate::failpoint::delete_file(table.file_io(), path).await;
            }
            Ok(*existing)
        }
    }
}

/// Converts a segment of a JSON table: the segment is read into memory (segments are
/// small: 4 MiB by default), its values scanned for the columns they need, which are
/// added to (or widened in) the table's schema through `swap` (a concurrent change of
/// the schema makes it scan again), and
/// then converted, values that fit no column going to the dead-letter table.
/// Returns the conversion with the tables it wrote to, or the conversion's error.
async fn convert_json_segment(
    CatalogAccess { catalog, swap }: CatalogAccess<'_>,
    target: &TopicTable,
    input: SegmentInput<'_>,
    body: crate::convert::SegmentStream,
    limits: DecodeLimits,
) -> Result<JsonConversion, PipelineError> {
    /// Schema changes raced by other converters before this one gives up (retryably).
    const SCHEMA_ATTEMPTS: usize = 5;
    let catalog_error = |table: &TableName, source: iceberg::Error| PipelineError::Catalog {
        table: table.to_string(),
        source: Box::new(source),
    };
    let bytes: Vec<bytes::Bytes> = body.try_collect().await?;
    let bytes = bytes::Bytes::from(bytes.concat());
    let mut table = target.table.clone();
    for _ in 0..SCHEMA_ATTEMPTS {
        let schema = table.metadata().current_schema().clone();
        let last_column_id = table.metadata().last_column_id();
        let declared = crate::table::declared_columns(&table);
        let scanned = {
            let bytes = bytes.clone();
            let key = input.key.clone();
            let schema = schema.clone();
            tokio::task::spawn_blocking(move || {
                scan_json_segment(&bytes, &key, limits, &schema, last_column_id, declared)
            })
            .await
            .map_err(|join| {
                catalog_error(
                    &target.name,
                    iceberg::Error::new(
                        iceberg::ErrorKind::Unexpected,
                        format!("the scanning thread failed: {join}"),
                    ),
                )
            })?
        };
        let scan = match scanned {
            Ok(scan) => scan,
            Err(e) => return Ok(Err(e)),
        };
        if let Some(evolved) = &scan.evolved {
            match crate::catalog::evolve_schema(swap, &table, evolved.clone()).await {
                Ok(updated) => table = updated,
                Err(e) => {
                    // Another converter changed the schema first: scan against its
                    // schema. A failure that may pass fails this conversion (it is
                    // retried); one that cannot (the table refuses the columns, e.g.
                    // a field named like a partition field) quarantines the segment.
                    let reloaded = catalog
                        .load_table(table.identifier())
                        .await
                        .map_err(|source| catalog_error(&target.name, source))?;
                    if reloaded.metadata().current_schema_id() != schema.schema_id() {
                        table = reloaded;
                        continue;
                    }
                    if e.retryable() || e.kind() == iceberg::ErrorKind::CatalogCommitConflicts {
                        return Err(catalog_error(&target.name, e));
                    }
                    return Ok(Err(ConvertError::Unrepresentable {
                        segment: input.key.to_string(),
                        offset: input.key.base_offset,
                        reason: format!(
                            "table {} refuses the columns its values need: {e}",
                            target.name
                        ),
                    }));
                }
            }
        }
        let dead_letter_table = if scan.rejected > 0 {
            Some(
                crate::catalog::ensure_dead_letter_table(catalog, &target.name, &table)
                    .await
                    .map_err(|source| catalog_error(&target.name.dead_letters(), source))?,
            )
        } else {
            None
        };
        let converted = convert_segment(
            &table,
            input,
            crate::convert::in_memory(bytes),
            limits,
            ValueColumns::Json {
                dead_letters: dead_letter_table.as_ref(),
            },
        )
        .await;
        return Ok(converted.map(|converted| (converted, table, dead_letter_table)));
    }
    Err(catalog_error(
        &target.name,
        iceberg::Error::new(
            iceberg::ErrorKind::CatalogCommitConflicts,
            format!("the schema changed under {SCHEMA_ATTEMPTS} attempts to add columns"),
        )
        .with_retryable(true),
    ))
}

/// A JSON conversion: the converted segment with the table it was written for (its
/// schema as the conversion left it) and the dead-letter table, if it had records
/// for it; or the conversion's error.
type JsonConversion = Result<(ConvertedSegment, Table, Option<Table>), ConvertError>;

/// The data file paths of an entry (as serialized in the ledger), its dead-letter
/// files included.
pub fn converted_paths(entry: &LedgerEntry) -> Vec<String> {
    entry
        .data_files
        .iter()
        .chain(&entry.dead_letters.files)
        .filter_map(|file| {
            serde_json::from_str::<serde_json::Value>(file)
                .ok()?
                .get("file_path")?
                .as_str()
                .map(str::to_owned)
        })
        .collect()
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
    let mut tables = Tables::default();
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
        let progress = &tables
            .get(CatalogAccess { catalog, swap }, &config.naming, &key.topic)
            .await?
            .progress;
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
        let target = tables
            .get(CatalogAccess { catalog, swap }, &config.naming, &key.topic)
            .await?;
        let entry = ingest_segment(
            CatalogAccess { catalog, swap },
            source,
            target,
            ledger,
            key,
            object,
            config.limits,
        )
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
    // Commit every table that has pending work, with the listing of its topic.
    let pending = ledger.list(Some("pending"), None).await?;
    let topics: BTreeSet<&str> = pending
        .iter()
        .map(|e| e.topic.as_str())
        .filter(|topic| config.shard.owns(topic))
        .collect();
    let mut jobs = Vec::new();
    for topic in topics {
        let mut topic_listing: BTreeMap<i32, BTreeSet<i64>> = BTreeMap::new();
        for key in listing.complete.iter().filter(|k| k.topic == topic) {
            topic_listing
                .entry(key.partition)
                .or_default()
                .insert(key.base_offset);
        }
        let name = &tables
            .get(CatalogAccess { catalog, swap }, &config.naming, topic)
            .await?
            .name;
        let settings = CommitSettings {
            start_offsets: config.start_offsets.get(topic).cloned().unwrap_or_default(),
            etcd: config.etcd.view(topic),
            crosscheck: config.crosscheck,
            ..config.commit.clone()
        };
        jobs.push((topic.to_owned(), name.clone(), topic_listing, settings));
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
    Ok(report)
}

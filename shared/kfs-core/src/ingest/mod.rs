//! Ingesting one segment: its version identity, its table opened (and evolved), the
//! conversion (JSON values scanned first, the schema grown through the catalog's swap),
//! and the result recorded in the ledger: pending with its files, or quarantined.
//! The typed value formats live in `json` and `registry`, sharing one schema race
//! (`schema_race`) and one reading of a segment for several passes (`passes`); small
//! segments of raw tables are joined in `runs`.

mod json;
mod passes;
mod registry;
mod runs;
mod schema_race;

use json::convert_json_segment;
pub use passes::HELD_SEGMENT_BYTES;
pub use registry::INFLATED_VALUE_COPIES;
pub(crate) use registry::convert_registry_segment;
pub(crate) use runs::run_segments;
#[cfg_attr(not(feature = "test-support"), allow(unused_imports))]
pub use runs::{MAX_RUN_SEGMENTS, NewSegment, RunLimits, RunsOutcome, ingest_runs};

use crate::catalog::CatalogAccess;
use crate::clock::now_ms;
use crate::convert::{ConvertError, ConvertedSegment, SegmentInput, ValueColumns, convert_segment};
use crate::error::PipelineError;
use crate::ledger::{DeadLetters, EntryState, InsertOutcome, Ledger, LedgerEntry};
use crate::ledger::{converted_paths, description_paths, resolved_paths};
use crate::source::{SegmentSource, SourceObject};
use crate::table::table_progress;
use crate::table::{Feed, claim_table, ensure_owned_table, evolve_partition_spec};
use futures::TryFutureExt;
use iceberg::spec::DataFile;
use iceberg::table::Table;
use kfs_plan::keys::SegmentKey;
use kfs_plan::lfs::{LfsMode, LfsPolicy};
use kfs_plan::naming::{KeyFormat, TableName, TableNaming, ValueFormat};
use kfs_plan::sweep::{ListedSegment, TableProgress};
use kfs_segment::DecodeLimits;
use std::collections::HashSet;

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
    /// What is done with its topic's large-file claim checks.
    pub lfs: LfsPolicy,
    /// How a registry table's keys are read.
    pub keys: KeyFormat,
    /// The writer schemas of a registry table's values (`None`: no registry is
    /// configured).
    pub schemas: Option<std::sync::Arc<crate::convert::RegistrySchemas>>,
}

impl TopicTable {
    /// Opens the table of `feed`, creating it on first sight; an existing table whose
    /// partition spec differs from the one configured evolves to it. Fails with
    /// [`PipelineError::Ownership`] when another feed owns the table or kfs-iceberg
    /// did not create it. A new table records `feed`'s namespace and `ledger`
    /// ([`Ledger::identity`]); an older one without a ledger recorded gets `ledger`.
    pub async fn open(
        catalog: CatalogAccess<'_>,
        naming: &TableNaming,
        feed: Feed<'_>,
        ledger: &str,
    ) -> Result<Self, PipelineError> {
        let topic = feed.topic;
        let name = naming.table_for(topic);
        if name.dead_letter_parent().is_some() {
            return Err(crate::table::OwnershipError::Reserved {
                table: name.to_string(),
                feed: feed.to_string(),
            }
            .into());
        }
        let catalog_error = |source: iceberg::Error| PipelineError::Catalog {
            table: name.to_string(),
            source: Box::new(source),
        };
        let owner = std::collections::HashMap::from([
            (
                crate::table::SOURCE_NAMESPACE_PROPERTY.to_owned(),
                feed.namespace.to_owned(),
            ),
            (crate::table::LEDGER_PROPERTY.to_owned(), ledger.to_owned()),
        ]);
        let table = ensure_owned_table(catalog.catalog, &name, topic, owner, naming)
            .await
            .map_err(catalog_error)?;
        let table = claim_table(catalog.swap, table, feed, ledger).await?;
        let mut table = crate::table::upgrade_record_layout(catalog.catalog, catalog.swap, table)
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
        let lfs = naming.lfs.for_topic(topic);
        if lfs.mode != LfsMode::Off {
            match crate::table::value_format_of(&table) {
                Ok(ValueFormat::Raw) if lfs.mode.has_columns() => {
                    table = crate::table::add_lfs_columns(catalog.catalog, catalog.swap, table)
                        .await
                        .map_err(catalog_error)?;
                }
                Ok(ValueFormat::Raw) => {}
                Ok(format) => {
                    return Err(PipelineError::Config(format!(
                        "table {name} stores {} values, and LFS claim checks are handled in raw tables only: set topic {topic}'s lfs mode to off",
                        format.name()
                    )));
                }
                Err(reason) => {
                    return Err(catalog_error(iceberg::Error::new(
                        iceberg::ErrorKind::DataInvalid,
                        reason,
                    )));
                }
            }
        }
        let progress = table_progress(&table).map_err(|source| PipelineError::Progress {
            table: name.to_string(),
            source,
        })?;
        Ok(Self {
            name,
            table,
            progress,
            lfs,
            keys: naming.key_format,
            schemas: None,
        })
    }
}

/// Why a segment arrived too late to be ingested: after its offsets were committed as
/// a gap, or below the offset its partition began at (by the table's progress).
fn late(progress: &TableProgress, key: &SegmentKey) -> Option<String> {
    let why = match progress.classify(key.partition, key.base_offset) {
        ListedSegment::LateAfterGap(gap) => format!(
            "arrived after offsets {}..={} of partition {} were committed as a gap ({:?})",
            gap.from, gap.to, gap.partition, gap.reason
        ),
        ListedSegment::LateBeforeStart { start } => format!(
            "arrived after partition {} began in the table at offset {start}; its offsets are below that start",
            key.partition
        ),
        ListedSegment::Open | ListedSegment::Committed => return None,
    };
    Some(format!(
        "{why}; not ingested behind the watermark: load it elsewhere or skip it"
    ))
}

impl TopicTable {
    /// Bytes of a segment of `size` bytes its conversion holds besides its decoding
    /// (a JSON or registry table's segment read once for several passes), and, for a
    /// registry table, the copies of one value at its bounds, which its segment's
    /// size does not tell (a zlib value of a few KB inflating to
    /// `registry::MAX_INFLATED_PAYLOAD`: `INFLATED_VALUE_COPIES` of it).
    pub fn held_bytes(&self, size: u64) -> u64 {
        let format = crate::table::value_format_of(&self.table);
        let held = match format {
            Ok(ValueFormat::Json | ValueFormat::Registry) if size <= HELD_SEGMENT_BYTES => size,
            _ => 0,
        };
        match format {
            Ok(ValueFormat::Registry) => held.saturating_add(
                INFLATED_VALUE_COPIES.saturating_mul(crate::registry::MAX_INFLATED_PAYLOAD),
            ),
            _ => held,
        }
    }

    /// The table, reading registry-encoded values with `schemas`.
    pub fn with_schemas(
        self,
        schemas: Option<std::sync::Arc<crate::convert::RegistrySchemas>>,
    ) -> Self {
        Self { schemas, ..self }
    }

    /// Whether `object` is converted in runs of small segments ([`ingest_runs`]): a
    /// segment of at most 1 MiB of a raw table (a JSON table grows its schema segment
    /// by segment) without claim checks to handle (their blobs make any segment large).
    pub fn in_runs(&self, object: &SourceObject) -> bool {
        object.size <= crate::convert::RUN_SEGMENT_BYTES
            && !self.handles_claim_checks()
            && matches!(
                crate::table::value_format_of(&self.table),
                Ok(ValueFormat::Raw)
            )
    }

    /// Whether its segments go through the large-file claim-check handling: its mode
    /// is not `off`, or the table has `lfs_*` columns to fill.
    fn handles_claim_checks(&self) -> bool {
        self.lfs.mode != LfsMode::Off
            || crate::table::has_lfs_columns(self.table.metadata().current_schema())
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
        ..
    } = target;
    let mut entry = new_entry(source, target, key, object).await?;
    let etag = entry.etag.clone();
    if let Some(why) = late(progress, key) {
        entry.state = EntryState::Quarantined {
            error: format!("{}: {why}", source.describe(&object.key)),
        };
        return record(ledger, entry).await;
    }
    let input = SegmentInput { key, etag: &etag };
    let catalog_error = |source: iceberg::Error| PipelineError::Catalog {
        table: table_name.to_string(),
        source: Box::new(source),
    };
    let format = crate::table::value_format_of(table).map_err(|reason| {
        catalog_error(iceberg::Error::new(iceberg::ErrorKind::DataInvalid, reason))
    })?;
    // Every file this conversion writes, for cleanup when another process recorded
    // the segment first.
    let mut written: Vec<String> = Vec::new();
    let converted = match format {
        ValueFormat::Raw if target.handles_claim_checks() => {
            convert_lfs_segment(catalog, target, input, (source, object), limits).await?
        }
        ValueFormat::Raw => {
            let body = source.open(&object.key, object.etag.as_deref()).await?;
            convert_segment(table, input, body, limits, ValueColumns::Raw)
                .await
                .map(|converted| (converted, table.clone(), None))
        }
        ValueFormat::Json => {
            convert_json_segment(catalog, target, input, (source, object), limits).await?
        }
        ValueFormat::Registry => {
            convert_registry_segment(catalog, target, input, (source, object), limits).await?
        }
    };
    match converted {
        Ok((converted, table, dead_letter_table)) => {
            entry.data_files = describe_and_spill(converted.data_files, &table, &mut written)
                .await
                .map_err(catalog_error)?;
            if let Some(dead_letter_table) = &dead_letter_table {
                entry.dead_letters = DeadLetters {
                    records: converted.dead_letters,
                    files: describe(converted.dead_letter_files, dead_letter_table)
                        .map_err(catalog_error)?,
                };
            }
            entry.last_offset = converted.last_offset;
            entry.records = converted.records;
            entry.bytes = converted.file_bytes;
        }
        Err(e) if e.kind().quarantines() => {
            entry.state = EntryState::Quarantined {
                error: format!("{}: {e}", source.describe(&object.key)),
            };
        }
        Err(e) => return Err(e.into()),
    }
    written.extend(converted_paths(&entry));
    record_written(ledger, entry, table.file_io(), &written).await
}

/// Descriptions of `files`, written in `table`'s default spec as the conversion saw it.
fn describe(files: Vec<DataFile>, table: &Table) -> iceberg::Result<Vec<String>> {
    let metadata = table.metadata();
    files
        .into_iter()
        .map(|file| crate::ledger::to_ledger(file, metadata.default_partition_spec_id(), metadata))
        .collect()
}

/// Descriptions of `files` as an entry holds them: inline, or, past what a ledger item
/// holds, spilled beside the files they describe (the spill file noted in `written`).
async fn describe_and_spill(
    files: Vec<DataFile>,
    table: &Table,
    written: &mut Vec<String>,
) -> iceberg::Result<Vec<String>> {
    let spilled_at = format!(
        "{}/data/kfs-descriptions/{}.json",
        table.metadata().location().trim_end_matches('/'),
        uuid::Uuid::new_v4()
    );
    let descriptions = describe(files, table)?;
    written.extend(description_paths(descriptions.iter()));
    crate::ledger::spill(descriptions, table.file_io(), &spilled_at).await
}

/// Inserts a converted entry. When another process recorded the segment first, the
/// files this conversion `written` (named for this write alone) are referenced by
/// nothing, unless the entry found is our own (a retried insert whose first attempt
/// landed): they are deleted, best effort (orphan cleanup removes what a failure here
/// leaves). Returns the entry that is there.
async fn record_written(
    ledger: &impl Ledger,
    entry: LedgerEntry,
    file_io: &iceberg::io::FileIO,
    written: &[String],
) -> Result<LedgerEntry, PipelineError> {
    match ledger.insert(&entry).await? {
        InsertOutcome::Inserted => Ok(entry),
        InsertOutcome::Exists(existing) => {
            let Ok(kept) = resolved_paths(&existing, file_io).await else {
                return Ok(*existing);
            };
            let kept: HashSet<String> = kept.into_iter().collect();
            for path in written.iter().filter(|path| !kept.contains(*path)) {
                let _ = crate::failpoint::delete_file(file_io, path).await;
            }
            Ok(*existing)
        }
    }
}

/// The pending entry of a segment version about to be converted into `target`, its
/// version identified ([`version_tag`]).
async fn new_entry(
    source: &impl SegmentSource,
    target: &TopicTable,
    key: &SegmentKey,
    object: &SourceObject,
) -> Result<LedgerEntry, PipelineError> {
    let etag = match &object.etag {
        Some(etag) => etag.clone(),
        None => {
            let from = object.size.saturating_sub(FOOTER_TAG_BYTES);
            let tail = source.read_range(&object.key, from..object.size).await?;
            version_tag(object, &tail)
        }
    };
    Ok(entry_for(target, key, object, etag))
}

/// The pending entry of the segment version `etag` of `object`, for `target`.
fn entry_for(
    target: &TopicTable,
    key: &SegmentKey,
    object: &SourceObject,
    etag: String,
) -> LedgerEntry {
    let now = now_ms();
    LedgerEntry {
        segment: object.key.clone(),
        etag,
        table: target.name.to_string(),
        topic: key.topic.clone(),
        partition: key.partition,
        base_offset: key.base_offset,
        last_offset: key.base_offset,
        records: 0,
        bytes: 0,
        data_files: Vec::new(),
        dead_letters: Default::default(),
        members: Vec::new(),
        state: EntryState::Pending,
        created_ms: now,
        updated_ms: now,
    }
}

/// Inserts `entry` unless the segment has one; returns the entry that is there.
async fn record(ledger: &impl Ledger, entry: LedgerEntry) -> Result<LedgerEntry, PipelineError> {
    Ok(match ledger.insert(&entry).await? {
        InsertOutcome::Inserted => entry,
        InsertOutcome::Exists(existing) => *existing,
    })
}

/// Quarantines a segment without converting it, with `why`: its conversions kept
/// dying (a crash, out of memory, a timeout), so the sweep stops trying it and its
/// partition waits for an operator (`quarantine retry` after raising the limit, or
/// `skip`). Returns the entry as recorded.
pub async fn quarantine_unconverted(
    source: &impl SegmentSource,
    target: &TopicTable,
    ledger: &impl Ledger,
    key: &SegmentKey,
    object: &SourceObject,
    why: &str,
) -> Result<LedgerEntry, PipelineError> {
    let entry = new_entry(source, target, key, object).await?;
    let error = format!("{}: {why}", source.describe(&object.key));
    record(ledger, quarantined(entry, error)).await
}

/// `entry`, quarantined with `error`.
fn quarantined(entry: LedgerEntry, error: String) -> LedgerEntry {
    LedgerEntry {
        state: EntryState::Quarantined { error },
        ..entry
    }
}

/// A conversion: the converted segment with the table it was written for (its
/// schema as the conversion left it) and the dead-letter table, if it had records
/// for it; or the conversion's error.
pub(crate) type Conversion = Result<(ConvertedSegment, Table, Option<Table>), ConvertError>;

/// The dead-letter table of `name` (whose table is `table`), created on first need and
/// brought to the current record layout.
async fn open_dead_letter_table(
    CatalogAccess { catalog, swap }: CatalogAccess<'_>,
    name: &TableName,
    table: &Table,
) -> Result<Table, PipelineError> {
    crate::table::ensure_dead_letter_table(catalog, name, table)
        .and_then(|dlq| crate::table::upgrade_record_layout(catalog, swap, dlq))
        .await
        .map_err(|source| PipelineError::Catalog {
            table: name.dead_letters().to_string(),
            source: Box::new(source),
        })
}

/// Converts a segment of a raw table whose topic's large-file claim checks are
/// resolved, referenced or skipped (`convert::lfs`): blobs are fetched from `source`
/// while the segment decodes, and where they are, the dead-letter table is opened
/// first (a blob that cannot be had sends its record there).
async fn convert_lfs_segment(
    catalog: CatalogAccess<'_>,
    target: &TopicTable,
    input: SegmentInput<'_>,
    (source, object): (&impl SegmentSource, &SourceObject),
    limits: DecodeLimits,
) -> Result<Conversion, PipelineError> {
    let policy = target.lfs.clone();
    let dead_letter_table = if policy.mode.fetches() {
        Some(open_dead_letter_table(catalog, &target.name, &target.table).await?)
    } else {
        None
    };
    let body = source.open(&object.key, object.etag.as_deref()).await?;
    let concurrency = policy.concurrency;
    let (blobs, requests) = crate::convert::blob_channel(concurrency);
    let values = crate::convert::LfsValues {
        blobs: policy.mode.fetches().then_some(blobs),
        policy,
        namespace: input.key.namespace.clone(),
        dead_letters: dead_letter_table.as_ref(),
    };
    let (converted, ()) = futures::join!(
        convert_segment(
            &target.table,
            input,
            body,
            limits,
            ValueColumns::Lfs(values)
        ),
        crate::convert::serve_blobs(source, requests, concurrency),
    );
    Ok(converted.map(|converted| (converted, target.table.clone(), dead_letter_table)))
}

//! Ingesting one segment: its version identity, its table opened (and evolved), the
//! conversion (JSON values scanned first, the schema grown through the catalog's swap),
//! and the result recorded in the ledger: pending with its files, or quarantined.

use crate::catalog::CatalogAccess;
use crate::clock::now_ms;
use crate::convert::Role;
use crate::convert::{
    ConvertError, ConvertedSegment, SegmentInput, ValueColumns, convert_segment, scan_json_segment,
};
use crate::error::PipelineError;
use crate::ledger::{DeadLetters, EntryState, InsertOutcome, Ledger, LedgerEntry};
use crate::ledger::{converted_paths, description_paths, resolved_paths};
use crate::source::{SegmentSource, SourceObject};
use crate::table::table_progress;
use crate::table::{Feed, claim_table, ensure_owned_table, evolve_partition_spec};
use futures::{StreamExt, TryFutureExt};
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

/// Converts a segment of a JSON table: its values are scanned (streamed from the
/// source, never held whole) for the columns they need, which are added to (or widened
/// in) the table's schema through `swap` (a concurrent change of the schema makes it
/// scan again), then the segment is read again and converted, values that fit no
/// column going to the dead-letter table. Returns the conversion with the tables it
/// wrote to, or the conversion's error.
async fn convert_json_segment(
    CatalogAccess { catalog, swap }: CatalogAccess<'_>,
    target: &TopicTable,
    input: SegmentInput<'_>,
    (source, object): (&impl SegmentSource, &SourceObject),
    limits: DecodeLimits,
) -> Result<Conversion, PipelineError> {
    /// Schema changes raced by other converters before this one gives up (retryably).
    const SCHEMA_ATTEMPTS: usize = 5;
    let catalog_error = |table: &TableName, source: iceberg::Error| PipelineError::Catalog {
        table: table.to_string(),
        source: Box::new(source),
    };
    let mut passes = SegmentPasses::new(source, object);
    let mut table = target.table.clone();
    for _ in 0..SCHEMA_ATTEMPTS {
        let schema = table.metadata().current_schema().clone();
        let last_column_id = table.metadata().last_column_id();
        let declared = crate::table::declared_columns(&table);
        let caps = crate::convert::json::ColumnCaps::of(&table);
        let scanned = {
            let reader = crate::convert::StreamReader::new(passes.open().await?);
            let key = input.key.clone();
            let schema = schema.clone();
            scanning(&target.name, move || {
                scan_json_segment(
                    reader,
                    &key,
                    limits,
                    &schema,
                    last_column_id,
                    declared,
                    caps,
                )
            })
            .await?
        };
        let scan = match scanned {
            Ok(scan) => scan,
            Err(e) => return Ok(Err(e)),
        };
        if let Some(evolved) = &scan.evolved {
            match crate::table::evolve_schema(swap, &table, evolved.clone()).await {
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
                    if !crate::fault::iceberg_error_kind(&e).quarantines() {
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
                open_dead_letter_table(CatalogAccess { catalog, swap }, &target.name, &table)
                    .await?,
            )
        } else {
            None
        };
        let converted = convert_segment(
            &table,
            input,
            passes.open().await?,
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

/// Converts a segment of a registry table: the schema ids its values name are read
/// first (streamed from the source), their writer schemas fetched (once per process)
/// and absorbed by the table's schema through `swap` (new fields as new optional
/// columns, promotions Iceberg allows; a concurrent change makes it look again); a
/// schema the table cannot absorb, or an id the registry does not know, sends its
/// records to the dead-letter table with the reason, as does one needing columns the
/// table refuses (a field named like a partition field). Then the segment is read
/// again and converted. A registry that cannot answer fails the conversion
/// (transient: it is retried).
pub(crate) async fn convert_registry_segment(
    CatalogAccess { catalog, swap }: CatalogAccess<'_>,
    target: &TopicTable,
    input: SegmentInput<'_>,
    (source, object): (&impl SegmentSource, &SourceObject),
    limits: DecodeLimits,
) -> Result<Conversion, PipelineError> {
    /// Schema changes raced by other converters before this one gives up (retryably).
    const SCHEMA_ATTEMPTS: usize = 5;
    let catalog_error = |table: &TableName, source: iceberg::Error| PipelineError::Catalog {
        table: table.to_string(),
        source: Box::new(source),
    };
    let Some(schemas) = &target.schemas else {
        return Err(PipelineError::Config(format!(
            "table {} stores registry-encoded values, and no schema registry is configured (--schema-registry-url, [schema_registry] url, SCHEMA_REGISTRY_URL)",
            target.name
        )));
    };
    let mut passes = SegmentPasses::new(source, object);
    let keys = target.keys == KeyFormat::Registry;
    let (values, named_keys) = {
        let reader = crate::convert::StreamReader::new(passes.open().await?);
        let key = input.key.clone();
        let scanned = scanning(&target.name, move || {
            crate::convert::scan_schema_ids(reader, &key, limits, keys)
        })
        .await?;
        match scanned {
            Ok(named) => named,
            Err(e) => return Ok(Err(e)),
        }
    };
    // Values' schemas first, then keys', each in the order the segment names them.
    let named: Vec<_> = (values.into_named().into_iter().map(|n| (Role::Value, n)))
        .chain(named_keys.into_named().into_iter().map(|n| (Role::Key, n)))
        .collect();
    // Each distinct id once, several at a time, within the segment's lookup budget.
    let mut ids: Vec<crate::registry::SchemaId> = Vec::new();
    for (_, (id, _)) in &named {
        if !ids.contains(id) {
            ids.push(*id);
        }
    }
    let found = schemas
        .get_all(&ids, crate::convert::WriterSchema::parse)
        .await
        .map_err(|e| PipelineError::Unconverted {
            segment: input.key.to_string(),
            message: e.to_string(),
            kind: e.kind,
        })?;
    let found: std::collections::HashMap<_, _> = ids.into_iter().zip(found).collect();
    let mut parsed = Vec::new();
    for (role, (id, messages)) in named {
        let resolved = found
            .get(&id)
            .cloned()
            .unwrap_or_else(|| Err(format!("schema {id} was not looked up")));
        // The columns of its values, or why they have none.
        let resolved = resolved.and_then(|writer| Ok((writer.shapes(&messages)?, writer)));
        parsed.push((role, id, resolved));
    }
    let whose = |role: Role, id: &crate::registry::SchemaId| match role {
        Role::Value => format!("schema {id}"),
        Role::Key => format!("key schema {id}"),
    };
    let mut table = target.table.clone();
    for _ in 0..SCHEMA_ATTEMPTS {
        let current = table.metadata().current_schema().clone();
        let mut fields = current.as_struct().fields().to_vec();
        let mut next_id = next_field_id(&table);
        let mut writers = RegistryWriters::default();
        let caps = crate::convert::json::ColumnCaps::of(&table);
        for (role, id, resolved) in &parsed {
            let writer = resolved.clone().and_then(|(shapes, writer)| {
                // Measured before any change: a schema beyond the table's column cap
                // changes nothing, its records are dead letters.
                let mut grown_id = next_id;
                let cannot = |why: String| {
                    let whose = whose(*role, id);
                    format!("{whose} cannot be written to table {}: {why}", target.name)
                };
                if let Some(grown) =
                    absorb_shapes((*role, keys), &fields, &shapes, &mut grown_id).map_err(cannot)?
                {
                    caps.fields_within(grown_id).map_err(cannot)?;
                    fields = grown;
                    next_id = grown_id;
                }
                Ok(writer)
            });
            writers.of(*role).insert(*id, writer);
        }
        if fields.as_slice() != current.as_struct().fields() {
            let evolved = crate::table::next_schema(&current, fields)
                .map_err(|e| catalog_error(&target.name, e))?;
            match crate::table::evolve_schema(swap, &table, evolved).await {
                Ok(updated) => table = updated,
                Err(e) if e.kind() == iceberg::ErrorKind::CatalogCommitConflicts => {
                    table = catalog
                        .load_table(table.identifier())
                        .await
                        .map_err(|source| catalog_error(&target.name, source))?;
                    continue;
                }
                // The table refuses the columns (a field named like a partition
                // field): the writer schemas are added one at a time, and those
                // whose columns it refuses are dead letters.
                Err(e) if crate::fault::iceberg_error_kind(&e).quarantines() => {
                    for (role, id, resolved) in &parsed {
                        let Ok((shapes, _)) = resolved else { continue };
                        if matches!(writers.of(*role).get(id), Some(Err(_))) {
                            continue;
                        }
                        let current = table.metadata().current_schema().clone();
                        let mut next_id = next_field_id(&table);
                        // Fits as it is, or refused already (`writers` says why).
                        let Ok(Some(grown)) = absorb_shapes(
                            (*role, keys),
                            current.as_struct().fields(),
                            shapes,
                            &mut next_id,
                        ) else {
                            continue;
                        };
                        let evolved = crate::table::next_schema(&current, grown)
                            .map_err(|e| catalog_error(&target.name, e))?;
                        match crate::table::evolve_schema(swap, &table, evolved).await {
                            Ok(updated) => table = updated,
                            Err(e) if crate::fault::iceberg_error_kind(&e).quarantines() => {
                                writers.of(*role).insert(
                                    *id,
                                    Err(format!(
                                        "{} needs columns table {} refuses: {e}",
                                        whose(*role, id),
                                        target.name
                                    )),
                                );
                            }
                            // A concurrent change: the conversion is tried again.
                            Err(e) => return Err(catalog_error(&target.name, e)),
                        }
                    }
                }
                Err(e) => return Err(catalog_error(&target.name, e)),
            }
        }
        let dead_letter_table =
            open_dead_letter_table(CatalogAccess { catalog, swap }, &target.name, &table).await?;
        let converted = convert_segment(
            &table,
            input,
            passes.open().await?,
            limits,
            ValueColumns::Registry {
                writers: writers.values,
                key_writers: keys.then_some(writers.keys),
                dead_letters: Some(&dead_letter_table),
            },
        )
        .await;
        return Ok(converted.map(|converted| (converted, table, Some(dead_letter_table))));
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

/// The id the next new column of `table` gets.
fn next_field_id(table: &Table) -> i32 {
    let metadata = table.metadata();
    metadata
        .last_column_id()
        .max(metadata.current_schema().highest_field_id())
        + 1
}

/// `fields` grown by every table form of one writer schema in `role` (`keys`: the
/// table's keys are decoded); `None` when they fit as they are.
fn absorb_shapes(
    role: (Role, bool),
    fields: &[iceberg::spec::NestedFieldRef],
    shapes: &[Vec<(String, crate::convert::Shape)>],
    next_id: &mut i32,
) -> Result<Option<Vec<iceberg::spec::NestedFieldRef>>, String> {
    let mut grown: Option<Vec<iceberg::spec::NestedFieldRef>> = None;
    for shape in shapes {
        let now = grown.as_deref().unwrap_or(fields);
        if let Some(more) = crate::convert::absorb_as(role, now, shape, next_id)? {
            grown = Some(more);
        }
    }
    Ok(grown)
}

/// The writer schemas of a segment's values and keys, as the table absorbed them.
#[derive(Default)]
struct RegistryWriters {
    values: crate::convert::WriterSchemas,
    keys: crate::convert::WriterSchemas,
}

impl RegistryWriters {
    fn of(&mut self, role: Role) -> &mut crate::convert::WriterSchemas {
        match role {
            Role::Value => &mut self.values,
            Role::Key => &mut self.keys,
        }
    }
}

/// Copies of one registry value at the inflation bound a conversion holds at its peak
/// (the inflated payload, the decoded value, its cell, its Arrow column, the Parquet
/// writer's pages and statistics): six values inflating to 16 MiB each peak at 226
/// MiB of heap in one conversion (`tests/bombs.rs`), the batch flushed after each.
pub const INFLATED_VALUE_COPIES: u64 = 14;

/// Segments at most this large are read once and held for the passes a JSON or
/// registry conversion makes over them (a scan, the conversion, again after a schema
/// race): one read of the store, not one per pass.
pub const HELD_SEGMENT_BYTES: u64 = 16 << 20;

/// A segment read for several passes: held in memory after the first when it is at
/// most [`HELD_SEGMENT_BYTES`], read again for each otherwise.
struct SegmentPasses<'s, S> {
    source: &'s S,
    object: &'s SourceObject,
    held: Option<bytes::Bytes>,
}

impl<'s, S: SegmentSource> SegmentPasses<'s, S> {
    fn new(source: &'s S, object: &'s SourceObject) -> Self {
        Self {
            source,
            object,
            held: None,
        }
    }

    /// The segment's bytes as they arrive: the held ones, else read from the store
    /// (and held, when small).
    async fn open(&mut self) -> Result<crate::source::SegmentStream, crate::source::SourceError> {
        use futures::StreamExt;
        if let Some(held) = &self.held {
            return Ok(crate::source::in_memory(held.clone()));
        }
        let object = self.object;
        let mut stream = self
            .source
            .open(&object.key, object.etag.as_deref())
            .await?;
        if object.size == 0 || object.size > HELD_SEGMENT_BYTES {
            return Ok(stream);
        }
        let mut held = bytes::BytesMut::with_capacity(object.size as usize);
        while let Some(chunk) = stream.next().await {
            held.extend_from_slice(&chunk?);
            if held.len() as u64 > HELD_SEGMENT_BYTES {
                // Larger than its listing said: streamed, not held.
                let read = futures::stream::once(std::future::ready(Ok(held.freeze())));
                return Ok(Box::pin(read.chain(stream)));
            }
        }
        let held = held.freeze();
        self.held = Some(held.clone());
        Ok(crate::source::in_memory(held))
    }
}

/// Runs `scan` (a pass over a segment before its conversion) on a blocking thread; a
/// thread that dies is an unexpected failure of `table`'s conversion.
async fn scanning<T: Send + 'static>(
    table: &TableName,
    scan: impl FnOnce() -> T + Send + 'static,
) -> Result<T, PipelineError> {
    tokio::task::spawn_blocking(scan)
        .await
        .map_err(|join| PipelineError::Catalog {
            table: table.to_string(),
            source: Box::new(iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                format!("the scanning thread failed: {join}"),
            )),
        })
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

/// Most segments one run takes: its entry (some 120 bytes a member) stays far inside
/// a DynamoDB item.
pub const MAX_RUN_SEGMENTS: usize = 1000;

/// Most bytes of segments one run takes.
pub const MAX_RUN_BYTES: u64 = 64 << 20;

/// Bytes of segments a run keeps in flight ahead of its decoding: on S3 (some 20 ms a
/// read) a function waits as many times less than reading one at a time as there are
/// reads in flight ...
const RUN_READ_AHEAD_BYTES: u64 = 32 << 20;

/// ... and at most this many reads (a function has 1,024 file descriptors, and
/// converts a few partitions at once).
const RUN_READ_AHEAD_MAX: usize = 64;

/// A complete segment the ledger does not know yet, as listed.
#[derive(Debug, Clone)]
pub struct NewSegment {
    /// Its key.
    pub key: SegmentKey,
    /// Its `.kfs` object.
    pub object: SourceObject,
    /// Whether the segment listed just before it, in its partition, is the one before
    /// it in the same list of new segments: the offsets between the two are then a
    /// gap no segment was listed in, which a run may span (the commit checks it again
    /// against its own listing).
    pub follows: bool,
}

/// How large runs grow, and how their segments are decoded.
#[derive(Debug, Clone, Copy)]
pub struct RunLimits {
    /// Decoder limits.
    pub decode: DecodeLimits,
    /// Most segments in one run (at most [`MAX_RUN_SEGMENTS`]; 1: a data file per
    /// segment).
    pub max_segments: usize,
}

/// What converting a partition's small segments in runs did.
#[derive(Debug, Default)]
pub struct RunsOutcome {
    /// Entries recorded, in offset order: runs (pending) and segments quarantined on
    /// their own. A run's entry may be another process's, when it recorded the run's
    /// first segment first.
    pub recorded: Vec<LedgerEntry>,
    /// Segments converted into the runs recorded.
    pub converted: usize,
    /// Segments not reached because `stop` said so: left for the next pass.
    pub deferred: usize,
    /// Segments left unconverted after a failure that is not their bytes (after the
    /// retries), with the error ([`PipelineError::Unconverted`]): the conversion of
    /// the partition ends there for this pass, and the next pass goes on from them.
    pub failed: Vec<PipelineError>,
}

/// A run being gathered: its writer, its entry as it will be recorded, and what the
/// next segment must start at.
struct OpenRun {
    writer: crate::convert::RunWriter,
    entry: LedgerEntry,
    segment_bytes: u64,
}

/// Converts the small segments of one partition of a raw table, listed in offset
/// order, in runs (one set of data files each): a run takes segments while each
/// starts where the one before it ended, or after a gap no segment was listed in
/// ([`NewSegment::follows`]), up to `limits.max_segments` and `MAX_RUN_BYTES`. A segment whose bytes
/// are broken, or that arrived too late, is quarantined on its own and cuts the run.
/// Every run is recorded as one pending entry listing its segments. `stop` is asked
/// before each segment. Only a failure of the ledger itself is returned as an error.
pub async fn ingest_runs(
    source: &impl SegmentSource,
    target: &TopicTable,
    ledger: &impl Ledger,
    segments: &[NewSegment],
    limits: RunLimits,
    retry: &crate::fault::RetryPolicy,
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<RunsOutcome, PipelineError> {
    let mut outcome = RunsOutcome::default();
    let schema = match crate::convert::RunWriter::schema(&target.table) {
        Ok(schema) => schema,
        Err(source) => {
            let e = PipelineError::Catalog {
                table: target.name.to_string(),
                source: Box::new(source),
            };
            fail_rest(&mut outcome, None, segments, &e).await;
            return Ok(outcome);
        }
    };
    let mut run: Option<OpenRun> = None;
    // Bodies read ahead of the decoding, in order: as many as fit the byte budget.
    let largest = segments.iter().map(|s| s.object.size).max().unwrap_or(0);
    let read_ahead = usize::try_from(RUN_READ_AHEAD_BYTES / largest.max(1))
        .unwrap_or(RUN_READ_AHEAD_MAX)
        .clamp(1, RUN_READ_AHEAD_MAX);
    let mut bodies = futures::stream::iter(segments.iter())
        .map(|NewSegment { object, .. }| {
            retry.run(PipelineError::kind, move || async move {
                Ok::<_, PipelineError>(
                    source
                        .read_version(&object.key, object.etag.as_deref())
                        .await?,
                )
            })
        })
        .buffered(read_ahead);
    let mut at = 0;
    while at < segments.len() {
        let NewSegment {
            key,
            object,
            follows,
        } = &segments[at];
        if stop() {
            outcome.deferred = segments.len() - at;
            break;
        }
        let body = match bodies.next().await {
            Some(Ok(body)) => body,
            Some(Err(e)) => {
                fail_rest(&mut outcome, run.take(), &segments[at..], &e).await;
                break;
            }
            None => break,
        };
        at += 1;
        let etag = version_tag(object, tail_of(&body));
        if let Some(why) = late(&target.progress, key) {
            close_run(ledger, &mut run, &mut outcome).await?;
            let error = format!("{}: {why}", source.describe(&object.key));
            let entry = quarantined(entry_for(target, key, object, etag), error);
            outcome.recorded.push(record(ledger, entry).await?);
            continue;
        }
        // The next offset after the run, when this segment may join it: it starts
        // there, or (a gap no listed segment is in) later.
        let joins = run.as_ref().and_then(|open| {
            let next = open.entry.last_offset.checked_add(1)?;
            let room =
                open.entry.segments() < limits.max_segments && open.segment_bytes < MAX_RUN_BYTES;
            (room && (next == key.base_offset || (*follows && next < key.base_offset)))
                .then_some(next)
        });
        if joins.is_none() {
            close_run(ledger, &mut run, &mut outcome).await?;
        }
        let decoded = match crate::convert::decode_for_run(&schema, key, body, limits.decode).await
        {
            Ok(decoded) => decoded,
            Err(e) if e.kind().quarantines() => {
                close_run(ledger, &mut run, &mut outcome).await?;
                let error = format!("{}: {e}", source.describe(&object.key));
                let entry = quarantined(entry_for(target, key, object, etag), error);
                outcome.recorded.push(record(ledger, entry).await?);
                continue;
            }
            Err(e) => {
                let rest = &segments[at - 1..];
                fail_rest(&mut outcome, run.take(), rest, &e.into()).await;
                break;
            }
        };
        let open = match run.as_mut() {
            Some(open) => open,
            None => match crate::convert::RunWriter::new(&target.table, schema.clone(), key, &etag)
                .await
            {
                Ok(writer) => run.insert(OpenRun {
                    writer,
                    entry: entry_for(target, key, object, etag.clone()),
                    segment_bytes: 0,
                }),
                Err(e) => {
                    fail_rest(&mut outcome, None, &segments[at - 1..], &e.into()).await;
                    break;
                }
            },
        };
        let (records, last_offset) = (decoded.records, decoded.last_offset);
        if let Err(e) = open.writer.push(decoded).await {
            let rest = &segments[at - 1..];
            fail_rest(&mut outcome, run.take(), rest, &e.into()).await;
            break;
        }
        if open.entry.segment != object.key {
            open.entry.members.push(crate::ledger::RunMember {
                segment: object.key.clone(),
                etag,
                base_offset: key.base_offset,
                last_offset,
                gap_from: joins.filter(|next| *next < key.base_offset),
            });
        }
        open.entry.last_offset = last_offset;
        open.entry.records += records;
        open.segment_bytes += object.size;
    }
    close_run(ledger, &mut run, &mut outcome).await?;
    Ok(outcome)
}

/// The bytes at the end of a segment that identify its content ([`version_tag`]).
fn tail_of(body: &[u8]) -> &[u8] {
    let footer = usize::try_from(FOOTER_TAG_BYTES).unwrap_or(usize::MAX);
    &body[body.len().saturating_sub(footer)..]
}

/// Closes the open run, if any, and records it: its files described in its entry,
/// inserted unless another process recorded its first segment first. A run that
/// fails to close is left unrecorded (its files deleted), its segments reported.
async fn close_run(
    ledger: &impl Ledger,
    run: &mut Option<OpenRun>,
    outcome: &mut RunsOutcome,
) -> Result<(), PipelineError> {
    let Some(OpenRun {
        writer, mut entry, ..
    }) = run.take()
    else {
        return Ok(());
    };
    let table = writer.table().clone();
    let written = match writer.close().await {
        Ok(written) => written,
        Err(e) => {
            let e = PipelineError::from(e);
            outcome
                .failed
                .extend(run_segments(&entry).map(|s| e.for_segment(&s)));
            return Ok(());
        }
    };
    let mut paths = Vec::new();
    match describe_and_spill(written.data_files, &table, &mut paths).await {
        Ok(descriptions) => entry.data_files = descriptions,
        Err(e) => {
            for path in &paths {
                let _ = crate::failpoint::delete_file(table.file_io(), path).await;
            }
            let e = PipelineError::Catalog {
                table: entry.table.clone(),
                source: Box::new(e),
            };
            outcome
                .failed
                .extend(run_segments(&entry).map(|s| e.for_segment(&s)));
            return Ok(());
        }
    }
    entry.bytes = written.file_bytes;
    paths.extend(converted_paths(&entry));
    let segments = entry.segments();
    let recorded = record_written(ledger, entry, table.file_io(), &paths).await?;
    outcome.converted += segments;
    outcome.recorded.push(recorded);
    Ok(())
}

/// The keys of the segments an entry holds.
pub(crate) fn run_segments(entry: &LedgerEntry) -> impl Iterator<Item = String> + '_ {
    std::iter::once(entry.segment.clone()).chain(entry.members.iter().map(|m| m.segment.clone()))
}

/// After a failure that is not a segment's bytes: the open run is dropped (its files
/// deleted) and its segments, with `rest`, are reported failed with the error.
async fn fail_rest(
    outcome: &mut RunsOutcome,
    run: Option<OpenRun>,
    rest: &[NewSegment],
    error: &PipelineError,
) {
    if let Some(open) = run {
        outcome
            .failed
            .extend(run_segments(&open.entry).map(|s| error.for_segment(&s)));
        open.writer.discard().await;
    }
    outcome.failed.extend(
        rest.iter()
            .map(|segment| error.for_segment(&segment.object.key)),
    );
}

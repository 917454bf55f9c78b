//! Ingesting one segment: its version identity, its table opened (and evolved), the
//! conversion (JSON values scanned first, the schema grown through the catalog's swap),
//! and the result recorded in the ledger: pending with its files, or quarantined.
//! The typed value formats live in `json` and `registry`, sharing one schema race
//! (`schema_race`) and one reading of a segment for several passes (`passes`); small
//! segments of raw tables are joined in `runs`.

mod json;
mod passes;
mod record;
mod registry_segment;
mod runs;
mod schema_race;
mod target;

use json::convert_json_segment;
use record::{describe, describe_and_spill, new_entry, quarantined, record, record_written};
pub(crate) use registry_segment::convert_registry_segment;
pub(crate) use runs::run_segments;
#[cfg_attr(not(feature = "test-support"), allow(unused_imports))]
pub use runs::{MAX_RUN_SEGMENTS, NewSegment, RunLimits, RunsOutcome, ingest_runs};
pub(crate) use target::Conversion;
pub use target::TopicTable;
use target::late;
use target::open_dead_letter_table;

use crate::convert::{SegmentInput, ValueColumns, convert_segment};
use crate::error::PipelineError;
use crate::ledger::converted_paths;
use crate::ledger::{DeadLetters, EntryState, Ledger, LedgerEntry};
use crate::source::{SegmentSource, SourceObject};
use kfs_catalog::catalog::CatalogAccess;
use kfs_plan::keys::SegmentKey;
use kfs_plan::naming::ValueFormat;
use kfs_segment::DecodeLimits;

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

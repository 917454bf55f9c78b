//! The rows a replay reads and writes: dead letters read back into records, the
//! offsets their table holds already, and the records converted again through a
//! registry table's conversion (a segment built of them, in memory).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, RecordBatch};
use futures::TryStreamExt;
use iceberg::spec::DataFile;
use iceberg::table::Table;
use kfs_plan::keys::SegmentKey;
use kfs_plan::naming::{KeyFormat, TableName, ValueFormat};
use kfs_segment::{BatchSpec, Compression, OwnedRecord};

use crate::error::PipelineError;
use crate::ingest::TopicTable;
use crate::source::{MemorySource, SourceObject};
use kfs_catalog::catalog::CatalogAccess;

/// A dead-letter row read back.
#[derive(Debug, Clone)]
pub(super) struct DeadLetter {
    /// Its topic.
    pub topic: String,
    /// Its partition.
    pub partition: i32,
    /// The record as it came.
    pub record: OwnedRecord,
    /// Why it was refused.
    pub reason: String,
}

fn invalid(what: &str) -> iceberg::Error {
    iceberg::Error::new(
        iceberg::ErrorKind::DataInvalid,
        format!("dead-letter table: column {what} is not as the layout has it"),
    )
}

/// Every row of the dead-letter table `dlq`.
pub(super) async fn read_dead_letters(dlq: &Table) -> iceberg::Result<Vec<DeadLetter>> {
    if dlq.metadata().current_snapshot().is_none() {
        return Ok(Vec::new());
    }
    let batches: Vec<RecordBatch> = dlq
        .scan()
        .select([
            "topic",
            "partition",
            "offset",
            "timestamp_ms",
            "key",
            "value",
            "headers",
            crate::table::DEAD_LETTER_ERROR_COLUMN,
        ])
        .build()?
        .to_arrow()
        .await?
        .try_collect()
        .await?;
    let mut letters = Vec::new();
    for batch in &batches {
        letters.extend(letters_of(batch)?);
    }
    Ok(letters)
}

/// The dead letters of one batch (columns as [`read_dead_letters`] selects them).
fn letters_of(batch: &RecordBatch) -> iceberg::Result<Vec<DeadLetter>> {
    let column = |i: usize| batch.columns().get(i).ok_or_else(|| invalid("count"));
    let topics = column(0)?
        .as_string_opt::<i32>()
        .ok_or_else(|| invalid("topic"))?;
    let partitions = kfs_values::partition_numbers(column(1)?)
        .map_err(|e| invalid(&format!("partition ({e})")))?;
    let offsets = column(2)?
        .as_primitive_opt::<Int64Type>()
        .ok_or_else(|| invalid("offset"))?;
    let timestamps = column(3)?
        .as_primitive_opt::<Int64Type>()
        .ok_or_else(|| invalid("timestamp_ms"))?;
    let keys = column(4)?
        .as_binary_opt::<i64>()
        .ok_or_else(|| invalid("key"))?;
    let values = column(5)?
        .as_binary_opt::<i64>()
        .ok_or_else(|| invalid("value"))?;
    let headers = column(6)?
        .as_list_opt::<i32>()
        .ok_or_else(|| invalid("headers"))?;
    let reasons = column(7)?
        .as_string_opt::<i32>()
        .ok_or_else(|| invalid("error"))?;
    let bytes = |array: &arrow_array::LargeBinaryArray, row: usize| {
        (!array.is_null(row)).then(|| array.value(row).to_vec())
    };
    let mut letters = Vec::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        letters.push(DeadLetter {
            topic: topics.value(row).to_owned(),
            partition: partitions.value(row),
            record: OwnedRecord {
                offset: offsets.value(row),
                timestamp_ms: timestamps.value(row),
                key: bytes(keys, row),
                value: bytes(values, row),
                headers: headers_of(&headers.value(row))?,
            },
            reason: reasons.value(row).to_owned(),
        });
    }
    Ok(letters)
}

/// A record's headers: key bytes and value, in order.
type Headers = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// A row's headers: key bytes (the `key_bytes` column where the key was not UTF-8)
/// and value.
fn headers_of(entries: &dyn Array) -> iceberg::Result<Headers> {
    let entries = entries
        .as_struct_opt()
        .ok_or_else(|| invalid("headers' entries"))?;
    let text = entries
        .column_by_name("key")
        .and_then(|c| c.as_string_opt::<i32>())
        .ok_or_else(|| invalid("headers.key"))?;
    let values = entries
        .column_by_name("value")
        .and_then(|c| c.as_binary_opt::<i64>())
        .ok_or_else(|| invalid("headers.value"))?;
    let key_bytes = entries
        .column_by_name(crate::table::HEADER_KEY_BYTES)
        .and_then(|c| c.as_binary_opt::<i64>());
    Ok((0..entries.len())
        .map(|i| {
            let key = match key_bytes {
                Some(raw) if !raw.is_null(i) => raw.value(i).to_vec(),
                _ => text.value(i).as_bytes().to_vec(),
            };
            let value = (!values.is_null(i)).then(|| values.value(i).to_vec());
            (key, value)
        })
        .collect())
}

/// The `(partition, offset)`s of `letters` that `table` holds (at its current
/// snapshot): read through a filter on the letters' offset range.
pub(super) async fn present_offsets(
    table: &Table,
    letters: &[DeadLetter],
) -> iceberg::Result<BTreeSet<(i32, i64)>> {
    let wanted: BTreeSet<(i32, i64)> = letters
        .iter()
        .map(|l| (l.partition, l.record.offset))
        .collect();
    let (Some(low), Some(high)) = (
        wanted.iter().map(|(_, o)| *o).min(),
        wanted.iter().map(|(_, o)| *o).max(),
    ) else {
        return Ok(BTreeSet::new());
    };
    let mut present = crate::table::offsets_between(table, low, high).await?;
    present.retain(|at| wanted.contains(at));
    Ok(present)
}

/// The registry table `name` (`table`) as a conversion target, reading schemas with
/// `schemas`; a table of another value format is refused.
pub(super) fn target(
    name: &TableName,
    table: Table,
    schemas: Arc<crate::convert::RegistrySchemas>,
) -> Result<TopicTable, PipelineError> {
    match crate::table::value_format_of(&table) {
        Ok(ValueFormat::Registry) => {}
        other => {
            return Err(PipelineError::Config(format!(
                "table {name} does not store registry-encoded values ({other:?}): only a registry table's dead letters are replayed"
            )));
        }
    }
    let keys = if table
        .metadata()
        .current_schema()
        .field_by_name(crate::table::KEY_FIELDS_COLUMN)
        .is_some()
    {
        KeyFormat::Registry
    } else {
        KeyFormat::Raw
    };
    let progress =
        crate::table::table_progress(&table).map_err(|source| PipelineError::Progress {
            table: name.to_string(),
            source,
        })?;
    Ok(TopicTable {
        name: name.clone(),
        table,
        progress,
        lfs: kfs_plan::lfs::LfsPolicy::default(),
        keys,
        schemas: Some(schemas),
    })
}

/// Converts `records` (by topic and partition, in any order) as one in-memory segment
/// per partition: the data files, the records they hold, the records still refused,
/// and the table as the conversions left it (its schema grown).
pub(super) async fn convert(
    access: CatalogAccess<'_>,
    target: &TopicTable,
    records: BTreeMap<(String, i32), Vec<OwnedRecord>>,
) -> Result<(Vec<DataFile>, u64, u64, Table), PipelineError> {
    let namespace = target
        .table
        .metadata()
        .properties()
        .get(crate::table::SOURCE_NAMESPACE_PROPERTY)
        .cloned()
        .unwrap_or_else(|| "replay".to_owned());
    let mut target = target.clone();
    let (mut files, mut written, mut refused) = (Vec::new(), 0, 0);
    for ((topic, partition), mut records) in records {
        records.sort_by_key(|r| r.offset);
        let Some(first) = records.first() else {
            continue;
        };
        let key = SegmentKey {
            namespace: namespace.clone(),
            topic,
            partition,
            base_offset: first.offset,
        };
        let created_ms = first.timestamp_ms;
        // One batch per record: the offsets of dead letters have gaps between them.
        let batches: Vec<BatchSpec> = records
            .into_iter()
            .map(|record| BatchSpec::new(vec![record], Compression::None))
            .collect();
        let segment = kfs_segment::encode_segment(&batches, created_ms).map_err(|e| {
            PipelineError::Config(format!(
                "replay of {key}: the segment of its dead letters: {e}"
            ))
        })?;
        let source = MemorySource::default();
        let object_key = key.to_string();
        let object = SourceObject {
            key: object_key.clone(),
            size: segment.kfs.len() as u64,
            etag: Some(format!("replay-{}", uuid::Uuid::new_v4().simple())),
            modified_ms: None,
        };
        source.put(&object_key, segment.kfs);
        let etag = object.etag.clone().unwrap_or_default();
        let input = crate::convert::SegmentInput {
            key: &key,
            etag: &etag,
        };
        let converted = crate::ingest::convert_registry_segment(
            access,
            &target,
            input,
            (&source, &object),
            kfs_segment::DecodeLimits::default(),
        )
        .await?;
        let (segment, table, _) = converted?;
        files.extend(segment.data_files);
        written += segment.records;
        refused += segment.dead_letters;
        target.table = table;
    }
    Ok((files, written, refused, target.table))
}

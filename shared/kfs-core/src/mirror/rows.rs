//! The keyed rows of a mirror's data files: each row's key (the record key, or the
//! key fields' values, [`kfs_plan::field_key`]), its place (file, position) and what
//! orders its change (partition, offset, timestamp, and a `cdc` table's source
//! position), and whether it is a tombstone.

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Date64Type, Int8Type, Int16Type, Int32Type, Int64Type, TimestampMicrosecondType,
    TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType, UInt8Type, UInt16Type,
    UInt32Type, UInt64Type,
};
use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch, StructArray};
use arrow_schema::{DataType, TimeUnit};
use iceberg::table::Table;
use iceberg::{Error, ErrorKind, Result};
use kfs_plan::field_key::{self, FieldKind};
use kfs_plan::key_index::IndexedRow;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

/// The columns every row of the mirror is known by.
const COLUMNS: [&str; 5] = ["key", "value", "partition", "offset", "timestamp_ms"];

/// A keyed row of a data file as the mirror sees it.
pub(super) type Row = (Vec<u8>, IndexedRow);

/// How a mirror's rows are keyed.
#[derive(Debug, Clone)]
pub(super) enum KeyColumns {
    /// By the record key's bytes.
    Record,
    /// By value fields: their names, and the columns holding them.
    Fields {
        /// The key fields, as configured.
        fields: Vec<String>,
        /// The top-level column of each.
        columns: Vec<String>,
        /// What each column holds: which record keys can name it.
        kinds: Vec<FieldKind>,
    },
}

impl KeyColumns {
    /// How `table`'s rows are keyed; refuses key fields the table has no column for.
    pub(super) fn of(table: &Table) -> Result<Self> {
        Self::of_mode(table, crate::table::mode_of(table)?)
    }

    /// How `table`'s rows are keyed by `mode` (the table's, read by the caller).
    pub(super) fn of_mode(table: &Table, mode: kfs_plan::mode::ModeSetting) -> Result<Self> {
        if mode.key_fields.is_empty() {
            return Ok(Self::Record);
        }
        let schema = table.metadata().current_schema();
        let arrow = crate::table::arrow_schema(schema)?;
        let (mut columns, mut kinds) = (Vec::new(), Vec::new());
        for field in &mode.key_fields {
            let column = kfs_values::layout::column_for(field, true).into_owned();
            let Ok(held) = arrow.field_with_name(&column) else {
                let names: Vec<&str> = schema
                    .as_struct()
                    .fields()
                    .iter()
                    .map(|f| f.name.as_str())
                    .collect();
                return Err(kfs_catalog::fault::iceberg_error(
                    kfs_catalog::fault::ErrorKind::Config,
                    format!(
                        "table {}: upsert_key field {field:?} is no column of the table (its columns: {}): no value written so far has it; its files stay pending until a value brings the column, or the table property {} names fields the values have (the next commit keys every row anew)",
                        table.identifier(),
                        names.join(", "),
                        kfs_plan::mode::UPSERT_KEY_PROPERTY
                    ),
                ));
            };
            kinds.push(kind_of(held.data_type()));
            columns.push(column);
        }
        Ok(Self::Fields {
            fields: mode.key_fields,
            columns,
            kinds,
        })
    }

    /// The columns a file is read with: [`COLUMNS`], then the source positions', the
    /// key fields' and the decoded record key's (`key_fields`), those it has.
    fn projected(&self) -> Vec<&str> {
        let mut names = COLUMNS.to_vec();
        names.push(kfs_values::layout::SOURCE_POSITION_COLUMN);
        if let Self::Fields { columns, .. } = self {
            names.extend(columns.iter().map(String::as_str));
            names.push(kfs_values::layout::KEY_FIELDS_COLUMN);
        }
        names
    }
}

/// The rows of one data file.
#[derive(Debug, Default)]
pub(super) struct FileRows {
    /// Its keyed rows.
    pub rows: Vec<Row>,
    /// The positions of its tombstones that name no key (a mirror keyed by fields):
    /// they delete nothing, and are no row of the mirror either.
    pub keyless_tombstones: Vec<i64>,
}

/// The keyed rows of the data file at `path`, keyed by `keys`.
pub(super) async fn read_rows(table: &Table, path: &str, keys: &KeyColumns) -> Result<FileRows> {
    let failed = |reason: String| Error::new(ErrorKind::DataInvalid, format!("{path}: {reason}"));
    let bytes = table.file_io().new_input(path)?.read().await?;
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(|e| failed(e.to_string()))?;
    let schema = builder.schema().clone();
    let mut indices = Vec::new();
    for column in COLUMNS {
        let index = schema
            .index_of(column)
            .map_err(|_| failed(format!("no {column} column: a mirror needs the raw layout")))?;
        indices.push(index);
    }
    // A file written before a key field's column existed has none: its rows hold null.
    // Source positions are a `cdc` table's alone (another table's column of that name
    // is a value's).
    let changes = crate::table::reads_changes(table);
    indices.extend(
        keys.projected()[COLUMNS.len()..]
            .iter()
            .filter(|name| changes || **name != kfs_values::layout::SOURCE_POSITION_COLUMN)
            .filter_map(|name| schema.index_of(name).ok()),
    );
    let mask = ProjectionMask::roots(builder.parquet_schema(), indices);
    let reader = builder
        .with_projection(mask)
        .build()
        .map_err(|e| failed(e.to_string()))?;
    let mut rows = FileRows::default();
    let mut position = 0i64;
    for batch in reader {
        let batch = batch.map_err(|e| failed(e.to_string()))?;
        collect_rows(&batch, (path, keys), &mut position, &mut rows).map_err(failed)?;
    }
    Ok(rows)
}

/// The keyed rows of `batch` (projected by [`KeyColumns::projected`]), numbered from
/// `position`.
fn collect_rows(
    batch: &RecordBatch,
    (path, keys): (&str, &KeyColumns),
    position: &mut i64,
    rows: &mut FileRows,
) -> std::result::Result<(), String> {
    let column = |name: &str| {
        batch
            .column_by_name(name)
            .ok_or_else(|| format!("no {name} column"))
    };
    let record_keys = column("key")?;
    let value = column("value")?;
    let partition = kfs_values::partition_numbers(column("partition")?)
        .map_err(|e| format!("{e}, the batch from row {position}"))?;
    let offset = column("offset")?
        .as_any()
        .downcast_ref::<Int64Array>()
        .ok_or("offset is no long column")?;
    let timestamp = column("timestamp_ms")?
        .as_any()
        .downcast_ref::<Int64Array>()
        .ok_or("timestamp_ms is no long column")?;
    let key_of = RowKeys::new(batch, keys, record_keys.as_ref());
    let sources = SourcePositions::of(batch);
    for row in 0..batch.num_rows() {
        let at = *position;
        *position += 1;
        let tombstone = value.is_null(row);
        let source = sources.at(row);
        let Some(key) = key_of.key(row, tombstone)? else {
            if tombstone && matches!(keys, KeyColumns::Fields { .. }) {
                rows.keyless_tombstones.push(at);
            }
            continue;
        };
        rows.rows.push((
            key,
            IndexedRow {
                file: path.to_owned(),
                position: at,
                partition: partition.value(row),
                offset: offset.value(row),
                timestamp_ms: timestamp.value(row),
                tombstone,
                source,
            },
        ));
    }
    Ok(())
}

/// A batch's source positions, when its file has their column (a `cdc` table's). A
/// cell that holds no position's text (another engine's writing, a column of another
/// type) is none: the change's timestamp orders it, as it does one without a position.
struct SourcePositions<'a>(Option<&'a dyn Array>);

impl<'a> SourcePositions<'a> {
    fn of(batch: &'a RecordBatch) -> Self {
        Self(
            batch
                .column_by_name(kfs_values::layout::SOURCE_POSITION_COLUMN)
                .map(|c| c.as_ref()),
        )
    }

    /// The position of `row`, if it has one.
    fn at(&self, row: usize) -> Option<kfs_plan::changes::SourcePosition> {
        let column = self.0.filter(|c| c.is_valid(row))?;
        let text = match column.data_type() {
            DataType::Utf8 => column.as_string::<i32>().value(row),
            DataType::LargeUtf8 => column.as_string::<i64>().value(row),
            DataType::Utf8View => column.as_string_view().value(row),
            _ => return None,
        };
        kfs_plan::changes::SourcePosition::parse(text).ok()
    }
}

/// Where a batch's rows' keys are read from.
struct RowKeys<'a> {
    /// The record key column.
    record: &'a dyn Array,
    /// The key fields (empty: keyed by the record key).
    fields: &'a [String],
    /// What their columns hold.
    kinds: &'a [FieldKind],
    /// The key fields' columns (`None`: the file has no such column).
    values: Vec<Option<&'a ArrayRef>>,
    /// The decoded record key (`key_fields`), when the file has it.
    decoded: Option<&'a StructArray>,
}

impl<'a> RowKeys<'a> {
    fn new(batch: &'a RecordBatch, keys: &'a KeyColumns, record: &'a dyn Array) -> Self {
        let (fields, kinds, values) = match keys {
            KeyColumns::Record => (&[][..], &[][..], Vec::new()),
            KeyColumns::Fields {
                fields,
                columns,
                kinds,
            } => (
                fields.as_slice(),
                kinds.as_slice(),
                columns.iter().map(|c| batch.column_by_name(c)).collect(),
            ),
        };
        let decoded = batch
            .column_by_name(kfs_values::layout::KEY_FIELDS_COLUMN)
            .and_then(|c| c.as_struct_opt());
        Self {
            record,
            fields,
            kinds,
            values,
            decoded,
        }
    }

    /// The key of `row`, a tombstone or not: its key fields' values, or a
    /// tombstone's from its record key (decoded, else as it came); `None` for none.
    fn key(&self, row: usize, tombstone: bool) -> std::result::Result<Option<Vec<u8>>, String> {
        let record = record_key(self.record, row)?;
        if self.fields.is_empty() {
            return Ok(record.map(<[u8]>::to_vec));
        }
        let from_value = self.encoded(self.values.iter().map(|c| c.map(|c| (c.as_ref(), row))));
        if from_value.is_some() || !tombstone {
            return Ok(from_value);
        }
        if let Some(decoded) = self.decoded.filter(|d| !d.is_null(row)) {
            let children = self.fields.iter().map(|f| {
                decoded
                    .column_by_name(&kfs_values::layout::column_for(f, false))
                    .map(|c| (c.as_ref(), row))
            });
            if let Some(key) = self.encoded(children) {
                return Ok(Some(key));
            }
        }
        Ok(record.and_then(|key| field_key::from_record_key(key, self.fields, self.kinds)))
    }

    /// The key of the cells `parts` (`None`: no such column).
    fn encoded<'b>(
        &self,
        parts: impl Iterator<Item = Option<(&'b dyn Array, usize)>>,
    ) -> Option<Vec<u8>> {
        field_key::encode(parts.map(|part| part.and_then(|(column, row)| cell_text(column, row))))
    }
}

/// The record key of `row` (`None`: null).
fn record_key(column: &dyn Array, row: usize) -> std::result::Result<Option<&[u8]>, String> {
    if column.is_null(row) {
        return Ok(None);
    }
    match column.data_type() {
        DataType::LargeBinary => Ok(Some(column.as_binary::<i64>().value(row))),
        DataType::Binary => Ok(Some(column.as_binary::<i32>().value(row))),
        _ => Err("key is no binary column".into()),
    }
}

/// What the cells of `data_type` key a row by ([`cell_text`] gives every kind but
/// [`FieldKind::Unkeyed`] a text, one a cell of that kind could have).
pub(super) fn kind_of(data_type: &DataType) -> FieldKind {
    use DataType::*;
    match data_type {
        Utf8 | LargeUtf8 | Utf8View | Decimal128(..) => FieldKind::Text,
        Binary | LargeBinary | FixedSizeBinary(_) => FieldKind::Bytes,
        Boolean => FieldKind::Boolean,
        Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | UInt64 | Date32 | Date64
        | Timestamp(..) => FieldKind::Integer,
        _ => FieldKind::Unkeyed,
    }
}

/// The text a key field's cell keys by ([`kfs_plan::field_key`]): integers, dates and
/// timestamps in decimal (days, the column's unit), strings and bytes as they are,
/// booleans; `None` for a null and for a type no key is made of (fractions, nested:
/// the row is keyless, as a JSON key field holding a fraction is).
fn cell_text(column: &dyn Array, row: usize) -> Option<Vec<u8>> {
    if column.is_null(row) {
        return None;
    }
    let decimal = |n: String| Some(n.into_bytes());
    match column.data_type() {
        DataType::Utf8 => Some(column.as_string::<i32>().value(row).as_bytes().to_vec()),
        DataType::LargeUtf8 => Some(column.as_string::<i64>().value(row).as_bytes().to_vec()),
        DataType::Utf8View => Some(column.as_string_view().value(row).as_bytes().to_vec()),
        DataType::Binary => Some(column.as_binary::<i32>().value(row).to_vec()),
        DataType::LargeBinary => Some(column.as_binary::<i64>().value(row).to_vec()),
        DataType::FixedSizeBinary(_) => Some(column.as_fixed_size_binary().value(row).to_vec()),
        DataType::Boolean => decimal(column.as_boolean().value(row).to_string()),
        DataType::Int8 => decimal(column.as_primitive::<Int8Type>().value(row).to_string()),
        DataType::Int16 => decimal(column.as_primitive::<Int16Type>().value(row).to_string()),
        DataType::Int32 => decimal(column.as_primitive::<Int32Type>().value(row).to_string()),
        DataType::Int64 => decimal(column.as_primitive::<Int64Type>().value(row).to_string()),
        DataType::UInt8 => decimal(column.as_primitive::<UInt8Type>().value(row).to_string()),
        DataType::UInt16 => decimal(column.as_primitive::<UInt16Type>().value(row).to_string()),
        DataType::UInt32 => decimal(column.as_primitive::<UInt32Type>().value(row).to_string()),
        DataType::UInt64 => decimal(column.as_primitive::<UInt64Type>().value(row).to_string()),
        DataType::Date32 => decimal(column.as_primitive::<Date32Type>().value(row).to_string()),
        DataType::Date64 => decimal(column.as_primitive::<Date64Type>().value(row).to_string()),
        DataType::Timestamp(unit, _) => decimal(
            match unit {
                TimeUnit::Second => column.as_primitive::<TimestampSecondType>().value(row),
                TimeUnit::Millisecond => {
                    column.as_primitive::<TimestampMillisecondType>().value(row)
                }
                TimeUnit::Microsecond => {
                    column.as_primitive::<TimestampMicrosecondType>().value(row)
                }
                TimeUnit::Nanosecond => column.as_primitive::<TimestampNanosecondType>().value(row),
            }
            .to_string(),
        ),
        DataType::Decimal128(..) => decimal(
            column
                .as_primitive::<arrow_array::types::Decimal128Type>()
                .value_as_string(row),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{
        BinaryArray, BooleanArray, Date32Array, Date64Array, Decimal128Array, FixedSizeBinaryArray,
        Float32Array, Float64Array, Int8Array, Int16Array, Int32Array, LargeBinaryArray,
        LargeStringArray, ListArray, StringArray, StringViewArray, Time64MicrosecondArray,
        TimestampMicrosecondArray, TimestampMillisecondArray, TimestampNanosecondArray,
        TimestampSecondArray, UInt8Array, UInt16Array, UInt32Array, UInt64Array,
    };
    use std::sync::Arc;

    #[test]
    fn the_types_that_key_a_row_are_those_given_a_text_of_their_kind()
    -> std::result::Result<(), arrow_schema::ArrowError> {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec!["a"])),
            Arc::new(LargeStringArray::from(vec!["a"])),
            Arc::new(StringViewArray::from(vec!["a"])),
            Arc::new(BinaryArray::from(vec![&b"\0a"[..]])),
            Arc::new(LargeBinaryArray::from(vec![&b"\0a"[..]])),
            Arc::new(FixedSizeBinaryArray::try_from_iter([[0u8, 7]].into_iter())?),
            Arc::new(BooleanArray::from(vec![true])),
            Arc::new(Int8Array::from(vec![-7])),
            Arc::new(Int16Array::from(vec![7])),
            Arc::new(Int32Array::from(vec![7])),
            Arc::new(Int64Array::from(vec![i64::MIN])),
            Arc::new(UInt8Array::from(vec![7])),
            Arc::new(UInt16Array::from(vec![7])),
            Arc::new(UInt32Array::from(vec![7])),
            Arc::new(UInt64Array::from(vec![u64::MAX])),
            Arc::new(Date32Array::from(vec![-7])),
            Arc::new(Date64Array::from(vec![7])),
            Arc::new(TimestampSecondArray::from(vec![7])),
            Arc::new(TimestampMillisecondArray::from(vec![7])),
            Arc::new(TimestampMicrosecondArray::from(vec![7])),
            Arc::new(TimestampNanosecondArray::from(vec![7])),
            Arc::new(Decimal128Array::from(vec![725]).with_precision_and_scale(5, 2)?),
            Arc::new(Float32Array::from(vec![0.5])),
            Arc::new(Float64Array::from(vec![0.5])),
            Arc::new(Time64MicrosecondArray::from(vec![7])),
            Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
                Some(vec![Some(1)]),
            ])),
        ];
        for column in &columns {
            let kind = kind_of(column.data_type());
            let text = cell_text(column.as_ref(), 0);
            assert_eq!(
                kind != FieldKind::Unkeyed,
                text.is_some(),
                "{}",
                column.data_type()
            );
            if let Some(text) = text {
                assert!(kind.holds(&text), "{}: {text:?}", column.data_type());
            }
        }
        Ok(())
    }
}

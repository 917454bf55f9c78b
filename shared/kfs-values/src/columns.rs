//! Arrow columns of the topic table's record columns (id, topic, partition, offset,
//! timestamps, key, value, headers, and a `cdc` table's source positions), built from
//! decoded records.

use arrow_array::GenericByteArray;
use arrow_array::builder::{
    ArrayBuilder, GenericByteBuilder, Int32Builder, Int64Builder, LargeBinaryBuilder,
    OffsetBufferBuilder, StringBuilder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{ByteArrayType, Int32Type, Int64Type};
use arrow_array::{
    Array, ArrayRef, Int32Array, ListArray, RecordBatch, StructArray, TimestampMicrosecondArray,
};
use arrow_schema::{DataType, SchemaRef};
use kfs_segment::Record;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

/// Rows per Arrow batch handed to the Parquet writer.
pub const ROWS_PER_BATCH: usize = 8192;

/// Bytes buffered (estimated) before an Arrow batch is handed to the Parquet writer,
/// whatever its rows: 8,192 records of 1 MiB must not wait for one another.
pub const BYTES_PER_BATCH: usize = 32 << 20;

/// Bytes a row costs in the builders beyond its key, value and headers: the record id,
/// offsets, numbers and validity.
const ROW_OVERHEAD_BYTES: usize = 64;

/// Builds Arrow batches of the topic table from decoded records.
pub struct RecordColumns {
    schema: SchemaRef,
    header_field: Arc<arrow_schema::Field>,
    header_entry_fields: arrow_schema::Fields,
    record_id: StringBuilder,
    topic: StringBuilder,
    partition: Int32Builder,
    offset: Int64Builder,
    timestamp_ms: Int64Builder,
    key: LargeBinaryBuilder,
    value: LargeBinaryBuilder,
    header_offsets: OffsetBufferBuilder<i32>,
    header_keys: StringBuilder,
    header_values: LargeBinaryBuilder,
    /// The header keys' bytes where they are not UTF-8; `None` for a table of an older
    /// layout, which cannot hold them.
    header_key_bytes: Option<LargeBinaryBuilder>,
    timestamp_us: Vec<Option<i64>>,
    /// The changes' source positions, when the table has their column.
    source_positions: Option<StringBuilder>,
    /// Whether `timestamp` may be null (the current layout; an older one requires it).
    timestamp_nullable: bool,
    /// Whether `partition` is a long: another engine promoted it (Iceberg allows int
    /// to long and cannot narrow it back).
    partition_long: bool,
    has_value: bool,
    rows: usize,
    bytes: usize,
}

impl RecordColumns {
    /// Builders for `schema` (the Arrow form of the topic table's schema).
    pub fn new(schema: SchemaRef) -> iceberg::Result<Self> {
        let unexpected = || {
            iceberg::Error::new(
                iceberg::ErrorKind::DataInvalid,
                "table schema has no headers list of structs",
            )
        };
        let headers = schema
            .field_with_name("headers")
            .map_err(|_| unexpected())?;
        let DataType::List(header_field) = headers.data_type() else {
            return Err(unexpected());
        };
        let DataType::Struct(header_entry_fields) = header_field.data_type() else {
            return Err(unexpected());
        };
        let has_value = schema.field_with_name("value").is_ok();
        let partition_long = schema
            .field_with_name("partition")
            .is_ok_and(|field| field.data_type() == &DataType::Int64);
        let timestamp_nullable = schema
            .field_with_name("timestamp")
            .map_err(|_| unexpected())?
            .is_nullable();
        let header_key_bytes = header_entry_fields
            .find(crate::layout::HEADER_KEY_BYTES)
            .map(|_| LargeBinaryBuilder::new());
        let source_positions = schema
            .field_with_name(crate::layout::SOURCE_POSITION_COLUMN)
            .ok()
            .map(|_| StringBuilder::new());
        Ok(Self {
            has_value,
            timestamp_nullable,
            partition_long,
            header_key_bytes,
            header_field: header_field.clone(),
            header_entry_fields: header_entry_fields.clone(),
            schema,
            record_id: StringBuilder::new(),
            topic: StringBuilder::new(),
            partition: Int32Builder::new(),
            offset: Int64Builder::new(),
            timestamp_ms: Int64Builder::new(),
            key: LargeBinaryBuilder::new(),
            value: LargeBinaryBuilder::new(),
            header_offsets: OffsetBufferBuilder::new(ROWS_PER_BATCH),
            header_keys: StringBuilder::new(),
            header_values: LargeBinaryBuilder::new(),
            timestamp_us: Vec::with_capacity(ROWS_PER_BATCH),
            source_positions,
            rows: 0,
            bytes: 0,
        })
    }

    /// The `partition` values pushed since the last batch, in the table's type.
    fn partition_column(&mut self) -> ArrayRef {
        let ints = self.partition.finish();
        match self.partition_long {
            true => Arc::new(ints.unary::<_, Int64Type>(i64::from)),
            false => Arc::new(ints),
        }
    }

    /// Rows pushed since the last [`Self::finish`].
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Bytes buffered since the last [`Self::finish`] (an estimate: the record's bytes
    /// and a fixed cost per row and header).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Appends one record. In the current layout every record has a row; a table of an
    /// older layout refuses (with the reason) a header key that is not UTF-8 or a
    /// timestamp beyond microseconds, before anything is appended.
    pub fn push(&mut self, topic: &str, partition: i32, record: &Record<'_>) -> Result<(), String> {
        self.push_change(topic, partition, record, None)
    }

    /// [`Self::push`], a change event's record with its source position (kept when the
    /// table has the column, [`crate::layout::SOURCE_POSITION_COLUMN`]).
    pub fn push_change(
        &mut self,
        topic: &str,
        partition: i32,
        record: &Record<'_>,
        source: Option<&kfs_plan::changes::SourcePosition>,
    ) -> Result<(), String> {
        let micros = record.timestamp_ms.checked_mul(1000);
        if micros.is_none() && !self.timestamp_nullable {
            return Err(format!(
                "timestamp {} ms does not fit microseconds, and the table's timestamp column is required",
                record.timestamp_ms
            ));
        }
        if self.header_key_bytes.is_none()
            && let Some(header) = record
                .headers
                .iter()
                .find(|h| std::str::from_utf8(h.key).is_err())
        {
            return Err(format!(
                "header key {:?} is not UTF-8, and the table has no column for its bytes",
                header.key_text().0
            ));
        }
        // `topic:partition:offset`, written straight into the builder's buffer: no
        // string, and no formatting machinery, per record.
        let mut digits = itoa::Buffer::new();
        let _ = self.record_id.write_str(topic);
        let _ = self.record_id.write_char(':');
        let _ = self.record_id.write_str(digits.format(partition));
        let _ = self.record_id.write_char(':');
        let _ = self.record_id.write_str(digits.format(record.offset));
        self.record_id.append_value("");
        self.topic.append_value(topic);
        self.partition.append_value(partition);
        self.offset.append_value(record.offset);
        self.timestamp_ms.append_value(record.timestamp_ms);
        self.key.append_option(record.key);
        if self.has_value {
            self.value.append_option(record.value);
        }
        for header in &record.headers {
            let (text, bytes) = header.key_text();
            self.header_keys.append_value(text);
            self.header_values.append_option(header.value);
            if let Some(key_bytes) = &mut self.header_key_bytes {
                key_bytes.append_option(bytes);
            }
        }
        self.header_offsets.push_length(record.headers.len());
        let header_bytes: usize = record
            .headers
            .iter()
            .map(|h| 2 * h.key.len() + h.value.map_or(0, <[u8]>::len) + 24)
            .sum();
        self.bytes += ROW_OVERHEAD_BYTES
            + topic.len()
            + record.key.map_or(0, <[u8]>::len)
            + if self.has_value {
                record.value.map_or(0, <[u8]>::len)
            } else {
                0
            }
            + header_bytes;
        self.timestamp_us.push(micros);
        if let Some(positions) = &mut self.source_positions {
            positions.append_option(source.map(kfs_plan::changes::SourcePosition::text));
        }
        self.rows += 1;
        Ok(())
    }

    /// The rows pushed so far as one batch; the builders start over.
    pub fn finish(&mut self) -> iceberg::Result<RecordBatch> {
        self.finish_with(Vec::new())
    }

    /// The rows pushed so far as one batch, the schema's columns that are not record
    /// columns (a JSON table's payload, a dead-letter table's reason) taken from
    /// `other`, in schema order; the builders start over.
    pub fn finish_with(&mut self, other: Vec<ArrayRef>) -> iceberg::Result<RecordBatch> {
        let mut entry_columns: HashMap<&str, ArrayRef> = HashMap::from([
            (
                "key",
                Arc::new(finish_sized(&mut self.header_keys)) as ArrayRef,
            ),
            ("value", Arc::new(finish_sized(&mut self.header_values))),
        ]);
        if let Some(key_bytes) = &mut self.header_key_bytes {
            entry_columns.insert(
                crate::layout::HEADER_KEY_BYTES,
                Arc::new(finish_sized(key_bytes)),
            );
        }
        let entry_columns = self
            .header_entry_fields
            .iter()
            .map(|field| {
                entry_columns.remove(field.name().as_str()).ok_or_else(|| {
                    iceberg::Error::new(
                        iceberg::ErrorKind::DataInvalid,
                        format!("no data for header field {:?}", field.name()),
                    )
                })
            })
            .collect::<iceberg::Result<Vec<_>>>()?;
        let entries = StructArray::try_new(self.header_entry_fields.clone(), entry_columns, None)?;
        let offsets = std::mem::replace(
            &mut self.header_offsets,
            OffsetBufferBuilder::new(ROWS_PER_BATCH),
        )
        .finish();
        let headers =
            ListArray::try_new(self.header_field.clone(), offsets, Arc::new(entries), None)?;
        let timestamps = TimestampMicrosecondArray::from(std::mem::take(&mut self.timestamp_us))
            .with_timezone(iceberg::arrow::UTC_TIME_ZONE);
        self.rows = 0;
        self.bytes = 0;
        let mut record_columns: HashMap<&str, ArrayRef> = HashMap::from([
            (
                "record_id",
                Arc::new(finish_sized(&mut self.record_id)) as ArrayRef,
            ),
            ("topic", Arc::new(self.topic.finish())),
            ("partition", self.partition_column()),
            ("offset", Arc::new(self.offset.finish())),
            ("timestamp_ms", Arc::new(self.timestamp_ms.finish())),
            ("key", Arc::new(finish_sized(&mut self.key))),
            ("value", Arc::new(finish_sized(&mut self.value))),
            ("headers", Arc::new(headers)),
            ("timestamp", Arc::new(timestamps)),
        ]);
        if !self.has_value {
            record_columns.remove("value");
        }
        if let Some(positions) = &mut self.source_positions {
            record_columns.insert(
                crate::layout::SOURCE_POSITION_COLUMN,
                Arc::new(positions.finish()),
            );
        }
        let mut other = other.into_iter();
        let mut columns = Vec::with_capacity(self.schema.fields().len());
        for field in self.schema.fields() {
            let column = record_columns
                .remove(field.name().as_str())
                .or_else(|| other.next())
                .ok_or_else(|| {
                    iceberg::Error::new(
                        iceberg::ErrorKind::DataInvalid,
                        format!("no data for column {:?}", field.name()),
                    )
                })?;
            columns.push(column);
        }
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }
}

/// The `partition` column of a batch of the topic table, as ints: an int column, or a
/// long one (promoted by another engine) whose values all fit an int. Otherwise the
/// reason: the column's type, or the first row (of the batch) whose value is past an
/// int, which no Kafka partition is (another engine's row).
pub fn partition_numbers(column: &dyn Array) -> Result<Int32Array, String> {
    if let Some(ints) = column.as_primitive_opt::<Int32Type>() {
        return Ok(ints.clone());
    }
    let Some(longs) = column.as_primitive_opt::<Int64Type>() else {
        return Err(format!(
            "partition is a {} column, not an int or a long",
            column.data_type()
        ));
    };
    let past = longs
        .iter()
        .enumerate()
        .find_map(|(row, v)| v.filter(|v| i32::try_from(*v).is_err()).map(|v| (row, v)));
    match past {
        Some((row, value)) => Err(format!(
            "partition {value} (row {row} of the batch) is past an int: no Kafka partition"
        )),
        None => Ok(longs.unary::<_, Int32Type>(|v| v as i32)),
    }
}

/// The bytes `builder` holds as an array; it starts over with room for as many rows and
/// bytes (at most a batch's), so the next batch's values are not copied again each time
/// the buffer doubles.
fn finish_sized<T: ByteArrayType>(builder: &mut GenericByteBuilder<T>) -> GenericByteArray<T> {
    let (rows, bytes) = (builder.len(), builder.values_slice().len());
    std::mem::replace(
        builder,
        GenericByteBuilder::with_capacity(rows, bytes.min(BYTES_PER_BATCH)),
    )
    .finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray};

    /// The topic table's Arrow schema, its `partition` column of `partition_type`.
    fn schema(partition_type: DataType) -> SchemaRef {
        let schema = crate::layout::topic_schema()
            .and_then(|schema| iceberg::arrow::schema_to_arrow_schema(&schema))
            .unwrap_or_else(|e| panic!("{e}"));
        let fields: Vec<arrow_schema::FieldRef> = schema
            .fields()
            .iter()
            .map(|field| match field.name() == "partition" {
                true => Arc::new(
                    field
                        .as_ref()
                        .clone()
                        .with_data_type(partition_type.clone()),
                ),
                false => field.clone(),
            })
            .collect();
        Arc::new(arrow_schema::Schema::new(fields))
    }

    #[test]
    fn a_partition_column_promoted_to_long_is_written_and_read_as_its_numbers() {
        let record = Record {
            offset: 9,
            timestamp_ms: 1,
            key: Some(b"k"),
            value: Some(b"v"),
            headers: vec![],
        };
        for partition_type in [DataType::Int32, DataType::Int64] {
            let mut columns = RecordColumns::new(schema(partition_type.clone()))
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(columns.push("orders", 7, &record), Ok(()));
            let batch = columns.finish().unwrap_or_else(|e| panic!("{e}"));
            let partition = batch.column_by_name("partition").map(|c| c.as_ref());
            assert_eq!(partition.map(Array::data_type), Some(&partition_type));
            let numbers = partition.map(partition_numbers);
            assert_eq!(numbers, Some(Ok(Int32Array::from(vec![7]))));
        }
    }

    #[test]
    fn a_partition_past_an_int_or_of_another_type_is_no_partition() {
        let past = Int64Array::from(vec![Some(1), None, Some(i64::from(i32::MAX) + 1)]);
        let refused = partition_numbers(&past).err().unwrap_or_default();
        assert!(refused.contains("2147483648 (row 2"), "{refused}");
        let nulls_kept = Int64Array::from(vec![Some(1), None]);
        let read = partition_numbers(&nulls_kept);
        assert_eq!(read, Ok(Int32Array::from(vec![Some(1), None])));
        let text = partition_numbers(&StringArray::from(vec!["1"]));
        assert_eq!(
            text,
            Err("partition is a Utf8 column, not an int or a long".into())
        );
    }
}

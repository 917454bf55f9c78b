//! The converter core: one segment → verified records → Arrow → Parquet data file(s)
//! written through iceberg-rust's writer stack, named after the segment's identity.
//!
//! The data file name derives from the segment key, its ETag (or content hash) and a
//! token unique to the write ([`write_token`]): two conversions of one segment never
//! write the same path, and the ledger's conditional insert decides whose files count.
//! A partitioned table gets one file per partition value.
//!
//! Conversion streams: the segment arrives as a stream of chunks, a blocking thread
//! decodes it batch by batch into Arrow batches of [`ROWS_PER_BATCH`] rows, and the
//! async side hands them to the Parquet writer. Memory is bounded by a frame, a few
//! Arrow batches and the Parquet row group being built, never by the segment's size.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use arrow_array::builder::{
    Int32Builder, Int64Builder, LargeBinaryBuilder, OffsetBufferBuilder, StringBuilder,
};
use arrow_array::{ArrayRef, ListArray, RecordBatch, StructArray, TimestampMicrosecondArray};
use arrow_schema::{DataType, SchemaRef};
use iceberg::arrow::RecordBatchPartitionSplitter;
use iceberg::spec::DataFile;
use iceberg::table::Table;
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultLocationGenerator, FileNameGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::partitioning::PartitioningWriter;
use iceberg::writer::partitioning::fanout_writer::FanoutWriter;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use kfs_plan::keys::SegmentKey;
use kfs_plan::naming::sanitize;
use kfs_segment::{DecodeError, DecodeLimits, Record, SegmentDecoder};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;

use crate::failpoint::Failpoint;
use crate::source::SourceError;
use crate::table::arrow_schema;

/// Rows per Arrow batch handed to the Parquet writer.
pub const ROWS_PER_BATCH: usize = 8192;

/// Decoded Arrow batches in flight between the decoding thread and the writer.
const BATCHES_IN_FLIGHT: usize = 2;

/// A segment to convert: its key and its version identity.
#[derive(Debug, Clone, Copy)]
pub struct SegmentInput<'a> {
    /// The parsed key.
    pub key: &'a SegmentKey,
    /// ETag or content hash of this version.
    pub etag: &'a str,
}

/// The bytes of a segment as they arrive.
pub type SegmentStream = futures::stream::BoxStream<'static, Result<bytes::Bytes, SourceError>>;

/// A segment held in memory, as a stream of one chunk.
pub fn in_memory(bytes: impl Into<bytes::Bytes>) -> SegmentStream {
    let bytes: bytes::Bytes = bytes.into();
    Box::pin(futures::stream::once(async move { Ok(bytes) }))
}

/// What converting a segment produced.
#[derive(Debug, Clone)]
pub struct ConvertedSegment {
    /// Data files written (none when the segment holds no data record).
    pub data_files: Vec<DataFile>,
    /// Files written for the dead-letter table (JSON values that could not be written).
    pub dead_letter_files: Vec<DataFile>,
    /// Data records written to the table.
    pub records: u64,
    /// Data records written to the dead-letter table.
    pub dead_letters: u64,
    /// Base offset of the segment.
    pub base_offset: i64,
    /// Last offset of the segment.
    pub last_offset: i64,
    /// Bytes of the data files (the dead-letter files included).
    pub file_bytes: u64,
}

/// Converting a segment failed.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// The segment is malformed: permanent, the segment goes to quarantine.
    #[error("segment {segment} is malformed: {source}")]
    Malformed {
        /// The segment key.
        segment: String,
        /// Where and why.
        source: DecodeError,
    },
    /// A record cannot be represented in the table (e.g. a timestamp out of range).
    #[error("segment {segment}: record at offset {offset} cannot be stored: {reason}")]
    Unrepresentable {
        /// The segment key.
        segment: String,
        /// The record's offset.
        offset: i64,
        /// Why.
        reason: String,
    },
    /// Writing the data file failed.
    #[error("segment {segment}: writing its data file failed: {source}")]
    Write {
        /// The segment key.
        segment: String,
        /// The writer's error.
        source: Box<iceberg::Error>,
    },
}

impl ConvertError {
    /// Permanent failures quarantine the segment; the others may succeed on retry.
    pub fn is_permanent(&self) -> bool {
        match self {
            Self::Malformed { source, .. } => !source.is_retryable(),
            Self::Unrepresentable { .. } => true,
            Self::Write { source, .. } => !source.retryable(),
        }
    }
}

/// The data file name of a segment version: topic, partition, base offset, a hash of
/// the ETag, and a token unique to this write ([`write_token`]).
pub fn data_file_stem(key: &SegmentKey, etag: &str) -> String {
    format!(
        "{}-p{}-{:020}-{:016x}-{}",
        sanitize(&key.topic),
        key.partition,
        key.base_offset,
        kfs_plan::hash::fnv1a(etag.as_bytes()),
        write_token()
    )
}

/// A token unique to one data file write. Every written file gets a name of its own:
/// two processes converting (or merging) the same input at once must never write the
/// same path, since on storage without atomic writes (a local folder) the loser's
/// half-written file would replace the winner's committed one. The loser's file is
/// deleted when its ledger insert finds the winner's, or else left to orphan cleanup.
pub fn write_token() -> String {
    let mut token = uuid::Uuid::new_v4().simple().to_string();
    token.truncate(16);
    token
}

/// The name given: one file per write (per partition value, each in its own
/// directory).
#[derive(Debug, Clone)]
struct FixedFileName(String);

impl FileNameGenerator for FixedFileName {
    fn generate_file_name(&self) -> String {
        format!("{}.parquet", self.0)
    }
}

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
    timestamp_us: Vec<i64>,
    has_value: bool,
    rows: usize,
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
        Ok(Self {
            has_value,
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
            rows: 0,
        })
    }

    /// Rows pushed since the last [`Self::finish`].
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Appends one record; fails (with the reason) when it cannot be represented.
    pub fn push(&mut self, topic: &str, partition: i32, record: &Record<'_>) -> Result<(), String> {
        let micros = record.timestamp_ms.checked_mul(1000).ok_or_else(|| {
            format!(
                "timestamp {} ms does not fit microseconds",
                record.timestamp_ms
            )
        })?;
        // Written straight into the builder's buffer: no string per record.
        let _ = write!(self.record_id, "{topic}:{partition}:{}", record.offset);
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
            self.header_keys.append_value(header.key);
            self.header_values.append_option(header.value);
        }
        self.header_offsets.push_length(record.headers.len());
        self.timestamp_us.push(micros);
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
        let entries = StructArray::try_new(
            self.header_entry_fields.clone(),
            vec![
                Arc::new(self.header_keys.finish()) as ArrayRef,
                Arc::new(self.header_values.finish()),
            ],
            None,
        )?;
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
        let mut record_columns: HashMap<&str, ArrayRef> = HashMap::from([
            ("record_id", Arc::new(self.record_id.finish()) as ArrayRef),
            ("topic", Arc::new(self.topic.finish())),
            ("partition", Arc::new(self.partition.finish())),
            ("offset", Arc::new(self.offset.finish())),
            ("timestamp_ms", Arc::new(self.timestamp_ms.finish())),
            ("key", Arc::new(self.key.finish())),
            ("value", Arc::new(self.value.finish())),
            ("headers", Arc::new(headers)),
            ("timestamp", Arc::new(timestamps)),
        ]);
        if !self.has_value {
            record_columns.remove("value");
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

/// Table property of the data files' compression codec: `zstd` (default), `snappy`,
/// `gzip`, `lz4`, `brotli` or `uncompressed`.
pub const COMPRESSION_CODEC_PROPERTY: &str = "write.parquet.compression-codec";
/// Table property of the codec's level (zstd 1-22, default 3; gzip 0-9; brotli 0-11).
pub const COMPRESSION_LEVEL_PROPERTY: &str = "write.parquet.compression-level";

/// The Parquet compression a table's properties ask for; an unknown codec or a level
/// out of range is a `DataInvalid` error naming the property.
pub fn compression(properties: &HashMap<String, String>) -> iceberg::Result<Compression> {
    let invalid = |message: String| iceberg::Error::new(iceberg::ErrorKind::DataInvalid, message);
    let codec = properties
        .get(COMPRESSION_CODEC_PROPERTY)
        .map_or("zstd", String::as_str)
        .to_ascii_lowercase();
    let level = properties
        .get(COMPRESSION_LEVEL_PROPERTY)
        .map(|text| {
            text.trim().parse::<u32>().map_err(|_| {
                invalid(format!(
                    "{COMPRESSION_LEVEL_PROPERTY}={text:?} is not a level"
                ))
            })
        })
        .transpose()?;
    let out_of_range = |e: parquet::errors::ParquetError| {
        invalid(format!("{COMPRESSION_LEVEL_PROPERTY} for {codec}: {e}"))
    };
    Ok(match codec.as_str() {
        "zstd" => Compression::ZSTD(
            ZstdLevel::try_new(level.map_or(3, |l| l as i32)).map_err(out_of_range)?,
        ),
        "gzip" => Compression::GZIP(
            parquet::basic::GzipLevel::try_new(level.unwrap_or(6)).map_err(out_of_range)?,
        ),
        "brotli" => Compression::BROTLI(
            parquet::basic::BrotliLevel::try_new(level.unwrap_or(1)).map_err(out_of_range)?,
        ),
        "snappy" => Compression::SNAPPY,
        "lz4" | "lz4_raw" => Compression::LZ4_RAW,
        "uncompressed" | "none" => Compression::UNCOMPRESSED,
        other => {
            return Err(invalid(format!(
                "{COMPRESSION_CODEC_PROPERTY}={other:?}: expected zstd, snappy, gzip, lz4, brotli or uncompressed"
            )));
        }
    })
}

/// Parquet settings of data files: the table's compression ([`compression`], zstd
/// level 3 by default), row groups of at most 1 Mi rows / 128 MiB, and no dictionary for
/// the columns that are unique per record (a dictionary there is built only to be
/// abandoned).
pub fn writer_properties(
    table_properties: &HashMap<String, String>,
) -> iceberg::Result<WriterProperties> {
    let mut builder = WriterProperties::builder()
        .set_compression(compression(table_properties)?)
        .set_max_row_group_row_count(Some(1 << 20))
        .set_max_row_group_bytes(Some(128 << 20));
    for unique in ["record_id", "offset", "timestamp_ms", "timestamp"] {
        builder = builder.set_column_dictionary_enabled(ColumnPath::from(unique), false);
    }
    Ok(builder.build())
}

/// The builder of one data file, through iceberg-rust's writer stack.
type FileBuilder =
    DataFileWriterBuilder<ParquetWriterBuilder, DefaultLocationGenerator, FixedFileName>;

/// Where a segment's batches go: one Parquet file named `{stem}.parquet` in the table's
/// data directory, or, for a partitioned table, one such file per partition value in
/// that value's directory (`data/timestamp_day=2026-11-30/…`).
enum SegmentWriter {
    /// The table is unpartitioned.
    Single(Box<<FileBuilder as IcebergWriterBuilder>::R>),
    /// The table's default spec partitions it.
    Fanout {
        splitter: Box<RecordBatchPartitionSplitter>,
        writer: Box<FanoutWriter<FileBuilder>>,
    },
}

impl SegmentWriter {
    /// The writer for `table` (by its default partition spec), with every file named
    /// `{stem}.parquet`.
    async fn new(table: &Table, stem: String) -> iceberg::Result<Self> {
        let metadata = table.metadata();
        let location = DefaultLocationGenerator::new(metadata)?;
        let parquet = ParquetWriterBuilder::new(
            writer_properties(metadata.properties())?,
            metadata.current_schema().clone(),
        );
        let rolling = RollingFileWriterBuilder::new(
            parquet,
            usize::MAX,
            table.file_io().clone(),
            location,
            FixedFileName(stem),
        );
        let builder = DataFileWriterBuilder::new(rolling);
        let spec = metadata.default_partition_spec();
        if spec.is_unpartitioned() {
            return Ok(Self::Single(Box::new(builder.build(None).await?)));
        }
        Ok(Self::Fanout {
            splitter: Box::new(RecordBatchPartitionSplitter::try_new_with_computed_values(
                metadata.current_schema().clone(),
                spec.clone(),
            )?),
            writer: Box::new(FanoutWriter::new(builder)),
        })
    }

    async fn write(&mut self, batch: RecordBatch) -> iceberg::Result<()> {
        match self {
            Self::Single(writer) => writer.write(batch).await,
            Self::Fanout { splitter, writer } => {
                for (key, part) in splitter.split(&batch)? {
                    writer.write(key, part).await?;
                }
                Ok(())
            }
        }
    }

    async fn close(self) -> iceberg::Result<Vec<DataFile>> {
        match self {
            Self::Single(mut writer) => writer.close().await,
            Self::Fanout { writer, .. } => writer.close().await,
        }
    }
}

/// A batch of rows the decoding thread hands the writers.
enum Routed {
    /// Rows of the table.
    Table(RecordBatch),
    /// Rows of the dead-letter table.
    DeadLetters(RecordBatch),
}

/// What the decoding thread sends the writers.
type DecodedBatch = Result<Routed, ConvertError>;

/// How records become rows, on the decoding thread.
trait RecordRouter: Send {
    /// Takes one record; fails (with the reason) when it can go nowhere.
    fn push(&mut self, topic: &str, partition: i32, record: &Record<'_>) -> Result<(), String>;
    /// Rows buffered.
    fn rows(&self) -> usize;
    /// The buffered rows as batches; the buffers start over.
    fn flush(&mut self) -> iceberg::Result<Vec<Routed>>;
    /// Records routed to the dead-letter table so far.
    fn dead_letters(&self) -> u64;
}

/// Raw values: every record is a row of the table.
struct RawRouter(RecordColumns);

impl RecordRouter for RawRouter {
    fn push(&mut self, topic: &str, partition: i32, record: &Record<'_>) -> Result<(), String> {
        self.0.push(topic, partition, record)
    }
    fn rows(&self) -> usize {
        self.0.rows()
    }
    fn flush(&mut self) -> iceberg::Result<Vec<Routed>> {
        Ok(if self.0.rows() == 0 {
            Vec::new()
        } else {
            vec![Routed::Table(self.0.finish()?)]
        })
    }
    fn dead_letters(&self) -> u64 {
        0
    }
}

/// JSON values: a record whose value fits the table's schema is a row of the table
/// (its fields in the payload columns); any other is a row of the dead-letter table,
/// with the reason.
struct JsonRouter {
    schema: iceberg::spec::Schema,
    declared: bool,
    payload: SchemaRef,
    table: RecordColumns,
    values: Vec<serde_json::Map<String, serde_json::Value>>,
    dead: Option<DeadLetterColumns>,
    segment: String,
    dead_count: u64,
}

/// The rows of a dead-letter batch being built.
struct DeadLetterColumns {
    record: RecordColumns,
    errors: StringBuilder,
    segments: StringBuilder,
}

impl JsonRouter {
    fn new(table: &Table, dead_letters: Option<&Table>, segment: String) -> iceberg::Result<Self> {
        let schema = table.metadata().current_schema().as_ref().clone();
        let arrow = arrow_schema(&schema)?;
        let payload = Arc::new(arrow_schema::Schema::new(
            arrow
                .fields()
                .iter()
                .filter(|f| !crate::json_values::METADATA_COLUMNS.contains(&f.name().as_str()))
                .cloned()
                .collect::<Vec<_>>(),
        ));
        let dead = dead_letters
            .map(|dlq| -> iceberg::Result<_> {
                Ok(DeadLetterColumns {
                    record: RecordColumns::new(arrow_schema(dlq.metadata().current_schema())?)?,
                    errors: StringBuilder::new(),
                    segments: StringBuilder::new(),
                })
            })
            .transpose()?;
        Ok(Self {
            declared: crate::table::declared_columns(table),
            schema,
            payload,
            table: RecordColumns::new(arrow)?,
            values: Vec::with_capacity(ROWS_PER_BATCH),
            dead,
            segment,
            dead_count: 0,
        })
    }
}

impl RecordRouter for JsonRouter {
    fn push(&mut self, topic: &str, partition: i32, record: &Record<'_>) -> Result<(), String> {
        let parsed = crate::json_values::parse_value(record.value).and_then(|value| {
            let value = if self.declared {
                crate::json_values::project(&value, self.schema.as_struct().fields())
            } else {
                value
            };
            crate::json_values::fits(&self.schema, &value)?;
            let mut value = value;
            crate::json_values::conform(&mut value, self.schema.as_struct().fields());
            Ok(value)
        });
        match parsed {
            Ok(value) => {
                self.table.push(topic, partition, record)?;
                self.values.push(value);
            }
            Err(rejection) => {
                let Some(dead) = &mut self.dead else {
                    return Err(format!("{rejection}, and no dead-letter table was opened"));
                };
                dead.record.push(topic, partition, record)?;
                dead.errors.append_value(&rejection.0);
                dead.segments.append_value(&self.segment);
                self.dead_count += 1;
            }
        }
        Ok(())
    }

    fn rows(&self) -> usize {
        self.table.rows() + self.dead.as_ref().map_or(0, |d| d.record.rows())
    }

    fn flush(&mut self) -> iceberg::Result<Vec<Routed>> {
        let mut routed = Vec::new();
        if self.table.rows() > 0 {
            let values = std::mem::take(&mut self.values);
            let payload = crate::json_values::payload_columns(&self.payload, &values)?;
            routed.push(Routed::Table(self.table.finish_with(payload)?));
        }
        if let Some(dead) = &mut self.dead
            && dead.record.rows() > 0
        {
            let reasons: Vec<ArrayRef> = vec![
                Arc::new(dead.errors.finish()),
                Arc::new(dead.segments.finish()),
            ];
            routed.push(Routed::DeadLetters(dead.record.finish_with(reasons)?));
        }
        Ok(routed)
    }

    fn dead_letters(&self) -> u64 {
        self.dead_count
    }
}

/// What the decoding thread found once the segment ended.
struct Decoded {
    records: u64,
    dead_letters: u64,
    base_offset: i64,
    last_offset: i64,
}

/// A blocking `Read` over a segment stream (used on a blocking thread only).
struct StreamReader {
    stream: SegmentStream,
    chunk: bytes::Bytes,
    runtime: tokio::runtime::Handle,
}

impl std::io::Read for StreamReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use futures::StreamExt;
        while self.chunk.is_empty() {
            match self.runtime.block_on(self.stream.next()) {
                None => return Ok(0),
                Some(Ok(chunk)) => self.chunk = chunk,
                Some(Err(e)) => return Err(std::io::Error::other(e)),
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk[..n]);
        bytes::Buf::advance(&mut self.chunk, n);
        Ok(n)
    }
}

/// What decoding a segment's records found: records, base and last offset.
struct RecordScan {
    records: u64,
    base_offset: i64,
    last_offset: i64,
}

/// Decodes a segment from `reader`, handing each batch's records to `each` (which
/// returns `false` to stop early); checks the header against the key.
fn decode_records(
    reader: impl std::io::Read,
    key: &SegmentKey,
    limits: DecodeLimits,
    mut each: impl FnMut(&[Record<'_>]) -> Result<bool, ConvertError>,
) -> Result<RecordScan, ConvertError> {
    let malformed = |source: DecodeError| ConvertError::Malformed {
        segment: key.to_string(),
        source,
    };
    // No BufReader: the stream's chunks already are the buffer.
    let mut decoder = SegmentDecoder::from_reader(reader, limits).map_err(malformed)?;
    if decoder.header().base_offset != key.base_offset {
        return Err(malformed(DecodeError::at(
            8,
            kfs_segment::DecodeErrorKind::HeaderMismatch {
                header: format!("base offset {}", decoder.header().base_offset),
                found: format!("the object key's base offset {}", key.base_offset),
            },
        )));
    }
    let mut records = 0u64;
    loop {
        let Some(batch) = decoder.next_batch().map_err(malformed)? else {
            break;
        };
        records += batch.records.len() as u64;
        if !each(&batch.records)? {
            return Ok(RecordScan {
                records,
                base_offset: key.base_offset,
                last_offset: key.base_offset,
            });
        }
    }
    let (base_offset, last_offset) = decoder
        .summary()
        .map(|s| (s.header.base_offset, s.last_offset))
        .unwrap_or((key.base_offset, key.base_offset));
    Ok(RecordScan {
        records,
        base_offset,
        last_offset,
    })
}

/// Decodes a segment from `reader` into Arrow batches sent to `batches`; runs on a
/// blocking thread. Stops early (returning `Ok`) when the writer hung up.
fn decode_segment(
    reader: impl std::io::Read,
    key: &SegmentKey,
    mut router: Box<dyn RecordRouter>,
    limits: DecodeLimits,
    batches: &tokio::sync::mpsc::Sender<DecodedBatch>,
) -> Result<Decoded, ConvertError> {
    let segment = key.to_string();
    let write_error = |source: iceberg::Error| ConvertError::Write {
        segment: segment.clone(),
        source: Box::new(source),
    };
    let mut hung_up = false;
    let scan = decode_records(reader, key, limits, |records| {
        for record in records {
            router
                .push(&key.topic, key.partition, record)
                .map_err(|reason| ConvertError::Unrepresentable {
                    segment: segment.clone(),
                    offset: record.offset,
                    reason,
                })?;
        }
        if router.rows() >= ROWS_PER_BATCH {
            for routed in router.flush().map_err(write_error)? {
                if batches.blocking_send(Ok(routed)).is_err() {
                    hung_up = true;
                    return Ok(false);
                }
            }
        }
        Ok(true)
    })?;
    if !hung_up {
        for routed in router.flush().map_err(write_error)? {
            // A hung-up writer has its own error to report.
            let _ = batches.blocking_send(Ok(routed));
        }
    }
    Ok(Decoded {
        records: scan.records,
        dead_letters: router.dead_letters(),
        base_offset: scan.base_offset,
        last_offset: scan.last_offset,
    })
}

/// How a segment's record values are written.
#[derive(Clone, Copy)]
pub enum ValueColumns<'a> {
    /// As bytes, in the `value` column.
    Raw,
    /// As the table's payload columns (its schema already holds every field the
    /// segment's values need, see [`scan_json_segment`]); values that do not fit go to
    /// `dead_letters`.
    Json {
        /// The dead-letter table, when the segment has records for it.
        dead_letters: Option<&'a Table>,
    },
}

/// What scanning a segment's JSON values against a schema found.
#[derive(Debug, Clone)]
pub struct JsonScan {
    /// The schema grown by the values' new fields and widened types, if they needed
    /// any change.
    pub evolved: Option<iceberg::spec::Schema>,
    /// Records whose values cannot be written (for the dead-letter table).
    pub rejected: u64,
}

/// Scans a segment's JSON values (held in memory) against `schema`: the fields to add
/// and the types to widen, in offset order (the first record to give a field a type
/// decides it), and how many records no schema change could take. Blocking work: run
/// it on a blocking thread.
pub fn scan_json_segment(
    segment: &[u8],
    key: &SegmentKey,
    limits: DecodeLimits,
    schema: &iceberg::spec::Schema,
    last_column_id: i32,
    declared: bool,
) -> Result<JsonScan, ConvertError> {
    let mut evolving = crate::json_values::EvolvingSchema::new(schema, last_column_id);
    if declared {
        evolving = evolving.declared();
    }
    let mut rejected = 0u64;
    decode_records(segment, key, limits, |records| {
        for record in records {
            let absorbed = crate::json_values::parse_value(record.value)
                .and_then(|value| evolving.absorb(&value));
            if absorbed.is_err() {
                rejected += 1;
            }
        }
        Ok(true)
    })?;
    let evolved = if evolving.changed() {
        Some(
            evolving
                .schema(schema.schema_id() + 1)
                .map_err(|source| ConvertError::Write {
                    segment: key.to_string(),
                    source: Box::new(source),
                })?,
        )
    } else {
        None
    };
    Ok(JsonScan { evolved, rejected })
}

/// Converts one segment, read from `body` as it arrives, into data files for `table`
/// (and, for JSON values that do not fit, for its dead-letter table).
pub async fn convert_segment(
    table: &Table,
    input: SegmentInput<'_>,
    body: SegmentStream,
    limits: DecodeLimits,
    values: ValueColumns<'_>,
) -> Result<ConvertedSegment, ConvertError> {
    let segment = input.key.to_string();
    let write_error = |source: iceberg::Error| ConvertError::Write {
        segment: segment.clone(),
        source: Box::new(source),
    };
    let stem = data_file_stem(input.key, input.etag);
    let (router, dead_letter_table): (Box<dyn RecordRouter>, Option<&Table>) = match values {
        ValueColumns::Raw => {
            let schema = arrow_schema(table.metadata().current_schema()).map_err(write_error)?;
            (
                Box::new(RawRouter(RecordColumns::new(schema).map_err(write_error)?)),
                None,
            )
        }
        ValueColumns::Json { dead_letters } => (
            Box::new(JsonRouter::new(table, dead_letters, segment.clone()).map_err(write_error)?),
            dead_letters,
        ),
    };
    let mut writer = SegmentWriter::new(table, stem.clone())
        .await
        .map_err(write_error)?;
    let mut dead_writer = match dead_letter_table {
        Some(dlq) => Some(SegmentWriter::new(dlq, stem).await.map_err(write_error)?),
        None => None,
    };
    let (sender, mut receiver) = tokio::sync::mpsc::channel::<DecodedBatch>(BATCHES_IN_FLIGHT);
    let key = input.key.clone();
    let reader = StreamReader {
        stream: body,
        chunk: bytes::Bytes::new(),
        runtime: tokio::runtime::Handle::current(),
    };
    let decoding =
        tokio::task::spawn_blocking(move || decode_segment(reader, &key, router, limits, &sender));
    let mut written: Result<(), ConvertError> = Ok(());
    while let Some(batch) = receiver.recv().await {
        let written_batch = match batch {
            Ok(Routed::Table(arrow)) => writer.write(arrow).await.map_err(write_error),
            Ok(Routed::DeadLetters(arrow)) => match &mut dead_writer {
                Some(dead) => dead.write(arrow).await.map_err(write_error),
                None => Err(write_error(iceberg::Error::new(
                    iceberg::ErrorKind::Unexpected,
                    "dead letters without a dead-letter table",
                ))),
            },
            Err(e) => Err(e),
        };
        if let Err(e) = written_batch {
            written = Err(e);
            break;
        }
    }
    // Hang up first, so a decoder blocked on a full channel ends.
    drop(receiver);
    let decoded = match decoding.await {
        Ok(decoded) => decoded,
        Err(join) => Err(write_error(iceberg::Error::new(
            iceberg::ErrorKind::Unexpected,
            format!("the decoding thread failed: {join}"),
        ))),
    };
    let decoded = match (written, decoded) {
        (Ok(()), Ok(decoded)) => decoded,
        (Err(e), _) | (Ok(()), Err(e)) => {
            // Best effort: files named for this write alone, referenced by nothing;
            // orphan cleanup removes what is left.
            discard(table, writer).await;
            if let (Some(dlq), Some(dead)) = (dead_letter_table, dead_writer) {
                discard(dlq, dead).await;
            }
            return Err(e);
        }
    };
    let data_files = crate::failpoint::around(Failpoint::DataFileWrite, writer.close())
        .await
        .map_err(write_error)?;
    let dead_letter_files = match dead_writer {
        Some(dead) => crate::failpoint::around(Failpoint::DataFileWrite, dead.close())
            .await
            .map_err(write_error)?,
        None => Vec::new(),
    };
    Ok(ConvertedSegment {
        file_bytes: data_files
            .iter()
            .chain(&dead_letter_files)
            .map(|f| f.file_size_in_bytes())
            .sum(),
        data_files,
        dead_letter_files,
        records: decoded.records - decoded.dead_letters,
        dead_letters: decoded.dead_letters,
        base_offset: decoded.base_offset,
        last_offset: decoded.last_offset,
    })
}

/// Writes a data file of `table` written in an older partition spec (or schema) again
/// in the table's default spec: its rows, with the table's current columns, in one
/// file per partition value named `{stem}.parquet` (a data file write, through its
/// failpoint).
pub async fn rewrite_in_default_spec(
    table: &Table,
    file: &DataFile,
    stem: String,
) -> iceberg::Result<Vec<DataFile>> {
    let parquet_error = |e: parquet::errors::ParquetError| {
        iceberg::Error::new(
            iceberg::ErrorKind::DataInvalid,
            format!("{}: {e}", file.file_path()),
        )
    };
    let bytes = table.file_io().new_input(file.file_path())?.read().await?;
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes)
        .map_err(parquet_error)?
        .with_batch_size(ROWS_PER_BATCH)
        .build()
        .map_err(parquet_error)?;
    let target = arrow_schema(table.metadata().current_schema())?;
    let mut writer = SegmentWriter::new(table, stem).await?;
    for batch in reader {
        let batch = batch.map_err(|e| {
            iceberg::Error::new(
                iceberg::ErrorKind::DataInvalid,
                format!("{}: {e}", file.file_path()),
            )
        })?;
        let batch = crate::parquet_merge::conform_batch(&batch, &target).map_err(|e| {
            iceberg::Error::new(
                iceberg::ErrorKind::DataInvalid,
                format!("{} does not match the table schema: {e}", file.file_path()),
            )
        })?;
        writer.write(batch).await?;
    }
    crate::failpoint::around(Failpoint::DataFileWrite, writer.close()).await
}

/// Closes a writer whose conversion failed and deletes what it wrote.
async fn discard(table: &Table, writer: SegmentWriter) {
    if let Ok(files) = writer.close().await {
        for file in files {
            let _ = crate::failpoint::delete_file(table.file_io(), file.file_path()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compression_follows_the_table_properties() {
        let codec = |pairs: &[(&str, &str)]| {
            let properties: HashMap<String, String> = pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            compression(&properties).map(|c| format!("{c:?}"))
        };
        assert_eq!(codec(&[]).ok().as_deref(), Some("ZSTD(ZstdLevel(3))"));
        assert_eq!(
            codec(&[
                (COMPRESSION_CODEC_PROPERTY, "GZIP"),
                (COMPRESSION_LEVEL_PROPERTY, "9")
            ])
            .ok()
            .as_deref(),
            Some("GZIP(GzipLevel(9))")
        );
        assert_eq!(
            codec(&[(COMPRESSION_CODEC_PROPERTY, "snappy")])
                .ok()
                .as_deref(),
            Some("SNAPPY")
        );
        for bad in [
            &[(COMPRESSION_CODEC_PROPERTY, "lzma")][..],
            &[(COMPRESSION_LEVEL_PROPERTY, "99")][..],
            &[(COMPRESSION_LEVEL_PROPERTY, "high")][..],
        ] {
            let error = codec(bad).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(
                error.contains("write.parquet.compression"),
                "{bad:?}: {error}"
            );
        }
    }
}

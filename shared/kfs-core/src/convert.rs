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
    /// Data records converted.
    pub records: u64,
    /// Base offset of the segment.
    pub base_offset: i64,
    /// Last offset of the segment.
    pub last_offset: i64,
    /// Bytes of the data files.
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
        Ok(Self {
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
        self.value.append_option(record.value);
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
        Ok(RecordBatch::try_new(
            self.schema.clone(),
            vec![
                Arc::new(self.record_id.finish()),
                Arc::new(self.topic.finish()),
                Arc::new(self.partition.finish()),
                Arc::new(self.offset.finish()),
                Arc::new(self.timestamp_ms.finish()),
                Arc::new(self.key.finish()),
                Arc::new(self.value.finish()),
                Arc::new(headers),
                Arc::new(timestamps),
            ],
        )?)
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

/// What the decoding thread sends the writer.
type DecodedBatch = Result<RecordBatch, ConvertError>;

/// What the decoding thread found once the segment ended.
struct Decoded {
    records: u64,
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

/// Decodes a segment from `reader` into Arrow batches sent to `batches`; runs on a
/// blocking thread. Stops early (returning `Ok`) when the writer hung up.
fn decode_segment(
    reader: impl std::io::Read,
    key: &SegmentKey,
    mut columns: RecordColumns,
    limits: DecodeLimits,
    batches: &tokio::sync::mpsc::Sender<DecodedBatch>,
) -> Result<Decoded, ConvertError> {
    let segment = key.to_string();
    let malformed = |source: DecodeError| ConvertError::Malformed {
        segment: segment.clone(),
        source,
    };
    let write_error = |source: iceberg::Error| ConvertError::Write {
        segment: segment.clone(),
        source: Box::new(source),
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
        {
            let Some(batch) = decoder.next_batch().map_err(malformed)? else {
                break;
            };
            for record in &batch.records {
                columns
                    .push(&key.topic, key.partition, record)
                    .map_err(|reason| ConvertError::Unrepresentable {
                        segment: segment.clone(),
                        offset: record.offset,
                        reason,
                    })?;
            }
            records += batch.records.len() as u64;
        }
        if columns.rows() >= ROWS_PER_BATCH {
            let arrow = columns.finish().map_err(write_error)?;
            if batches.blocking_send(Ok(arrow)).is_err() {
                return Ok(Decoded {
                    records,
                    base_offset: key.base_offset,
                    last_offset: key.base_offset,
                });
            }
        }
    }
    if columns.rows() > 0 {
        let arrow = columns.finish().map_err(write_error)?;
        // A hung-up writer has its own error to report.
        let _ = batches.blocking_send(Ok(arrow));
    }
    let (base_offset, last_offset) = decoder
        .summary()
        .map(|s| (s.header.base_offset, s.last_offset))
        .unwrap_or((key.base_offset, key.base_offset));
    Ok(Decoded {
        records,
        base_offset,
        last_offset,
    })
}

/// Converts one segment, read from `body` as it arrives, into data files for `table`.
pub async fn convert_segment(
    table: &Table,
    input: SegmentInput<'_>,
    body: SegmentStream,
    limits: DecodeLimits,
) -> Result<ConvertedSegment, ConvertError> {
    let segment = input.key.to_string();
    let write_error = |source: iceberg::Error| ConvertError::Write {
        segment: segment.clone(),
        source: Box::new(source),
    };
    let metadata = table.metadata();
    let schema = arrow_schema(metadata.current_schema()).map_err(write_error)?;
    let columns = RecordColumns::new(schema).map_err(write_error)?;
    let stem = data_file_stem(input.key, input.etag);
    let mut writer = SegmentWriter::new(table, stem).await.map_err(write_error)?;
    let (sender, mut receiver) = tokio::sync::mpsc::channel::<DecodedBatch>(BATCHES_IN_FLIGHT);
    let key = input.key.clone();
    let reader = StreamReader {
        stream: body,
        chunk: bytes::Bytes::new(),
        runtime: tokio::runtime::Handle::current(),
    };
    let decoding =
        tokio::task::spawn_blocking(move || decode_segment(reader, &key, columns, limits, &sender));
    let mut written: Result<(), ConvertError> = Ok(());
    while let Some(batch) = receiver.recv().await {
        let written_batch = match batch {
            Ok(arrow) => writer.write(arrow).await.map_err(write_error),
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
            if let Ok(files) = writer.close().await {
                for file in files {
                    let _ = crate::failpoint::delete_file(table.file_io(), file.file_path()).await;
                }
            }
            return Err(e);
        }
    };
    let data_files = crate::failpoint::around(Failpoint::DataFileWrite, writer.close())
        .await
        .map_err(write_error)?;
    Ok(ConvertedSegment {
        file_bytes: data_files.iter().map(|f| f.file_size_in_bytes()).sum(),
        data_files,
        records: decoded.records,
        base_offset: decoded.base_offset,
        last_offset: decoded.last_offset,
    })
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

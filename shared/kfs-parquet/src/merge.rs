//! Merging Parquet data files into one, decoding only what must be decoded: a row group
//! of at least `copy_min_bytes` whose Parquet schema is the table's is copied column
//! chunk by column chunk (compressed pages as they are); smaller row groups are decoded
//! and re-encoded together into full-size row groups. Rows keep their input order. The
//! merged file's Iceberg metrics come from the inputs' (counts summed, bounds widened),
//! which describe the same rows, and its column sizes from what was written.
//!
//! The Parquet writer is synchronous: it runs on a blocking thread, reading inputs by
//! range from the table's FileIO and streaming its output through a bounded channel to
//! an upload task, so memory stays bounded by one row group, not by the file.

use super::{conform_batch, parquet_error};
use arrow_array::RecordBatch;
use bytes::Bytes;
use iceberg::io::FileRead;
use iceberg::spec::{DataContentType, DataFile, DataFileBuilder, DataFileFormat, Datum};
use iceberg::table::Table;
use iceberg::writer::file_writer::location_generator::{
    DefaultLocationGenerator, LocationGenerator,
};
use iceberg::{Error, ErrorKind, Result};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::arrow_writer::ArrowRowGroupWriterFactory;
use parquet::arrow::{ArrowSchemaConverter, add_encoded_arrow_schema_to_metadata};
use parquet::column::writer::ColumnCloseResult;
use parquet::file::metadata::{
    PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader, RowGroupMetaData,
};
use parquet::file::page_index::column_index::ColumnIndexMetaData;
use parquet::file::page_index::offset_index::OffsetIndexMetaData;
use parquet::file::reader::{ChunkReader, Length};
use parquet::file::writer::SerializedFileWriter;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::ops::Range;
use std::sync::Arc;
use tokio::runtime::Handle;

/// Rows re-encoded into one row group before it is written.
const REENCODE_ROWS: usize = 1 << 20;
/// Bytes of decoded data re-encoded into one row group before it is written.
const REENCODE_BYTES: usize = 128 << 20;
/// Size of the output pieces handed to the upload task.
const UPLOAD_PIECE: usize = 8 << 20;
/// Size of the pieces read from an input for a copied column chunk.
const READ_PIECE: u64 = 8 << 20;

/// How a merge went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MergeStats {
    /// Row groups copied without decoding.
    pub row_groups_copied: usize,
    /// Row groups decoded and re-encoded.
    pub row_groups_reencoded: usize,
    /// Compressed bytes copied.
    pub bytes_copied: u64,
    /// Compressed bytes decoded.
    pub bytes_reencoded: u64,
}

/// Merges `inputs` (data files of `table`, of one partition value) into one data file
/// named `{stem}.parquet` in the table's data directory (a data file write, through its
/// failpoint).
pub async fn merge_data_files(
    table: &Table,
    inputs: &[&DataFile],
    stem: &str,
    copy_min_bytes: u64,
) -> Result<(DataFile, MergeStats)> {
    kfs_failpoint::around(
        kfs_failpoint::Failpoint::DataFileWrite,
        merge_and_upload(table, inputs, stem, copy_min_bytes),
    )
    .await
}

async fn merge_and_upload(
    table: &Table,
    inputs: &[&DataFile],
    stem: &str,
    copy_min_bytes: u64,
) -> Result<(DataFile, MergeStats)> {
    let first = inputs
        .first()
        .ok_or_else(|| Error::new(ErrorKind::DataInvalid, "nothing to merge"))?;
    let metadata = table.metadata();
    let path = DefaultLocationGenerator::new(metadata)?
        .generate_location(None, &format!("{stem}.parquet"));
    let arrow_schema = crate::arrow_schema(metadata.current_schema())?;
    let file_io = table.file_io().clone();
    let mut sources = Vec::with_capacity(inputs.len());
    for input in inputs {
        let file = file_io.new_input(input.file_path())?;
        let length = file.metadata().await?.size;
        sources.push(RangeSource {
            path: input.file_path().to_owned(),
            reader: Arc::from(file.reader().await?),
            length,
            handle: Handle::current(),
        });
    }
    let (sender, mut receiver) = tokio::sync::mpsc::channel::<Bytes>(2);
    let upload_path = path.clone();
    let upload_io = file_io.clone();
    let upload = tokio::spawn(async move {
        let mut out = upload_io.new_output(&upload_path)?.writer().await?;
        while let Some(piece) = receiver.recv().await {
            out.write(piece).await?;
        }
        out.close().await
    });
    let table_properties = metadata.properties().clone();
    let merged = tokio::task::spawn_blocking(move || {
        merge_blocking(
            &sources,
            table_properties,
            arrow_schema,
            copy_min_bytes,
            ChannelWrite::new(sender),
        )
    })
    .await
    .map_err(|e| Error::new(ErrorKind::Unexpected, format!("merge task: {e}")))?;
    let uploaded = upload
        .await
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("upload task: {e}")))?;
    let (written, size, stats) = merged?;
    uploaded?;
    let data_file = merged_data_file(
        inputs,
        &written,
        path,
        size,
        first.partition().clone(),
        metadata.default_partition_spec_id(),
    )?;
    Ok((data_file, stats))
}

/// The synchronous merge: returns the written file's metadata, its size and stats.
fn merge_blocking(
    sources: &[RangeSource],
    table_properties: std::collections::HashMap<String, String>,
    arrow_schema: arrow_schema::SchemaRef,
    copy_min_bytes: u64,
    out: ChannelWrite,
) -> Result<(ParquetMetaData, u64, MergeStats)> {
    let mut properties = crate::writer_properties(&table_properties)?;
    add_encoded_arrow_schema_to_metadata(&arrow_schema, &mut properties);
    let properties = Arc::new(properties);
    let schema = ArrowSchemaConverter::new()
        .with_coerce_types(properties.coerce_types())
        .convert(&arrow_schema)
        .map_err(parquet_error(ErrorKind::DataInvalid, "table schema"))?;
    let mut writer = SerializedFileWriter::new(out, schema.root_schema_ptr(), properties)
        .map_err(parquet_error(ErrorKind::DataInvalid, "merged file"))?;
    let factory = ArrowRowGroupWriterFactory::new(&writer, arrow_schema.clone());
    let mut stats = MergeStats::default();
    let mut pending: Vec<RecordBatch> = Vec::new();
    let mut row_groups = 0usize;
    for source in sources {
        let footer = ParquetMetaDataReader::new()
            .with_page_index_policy(PageIndexPolicy::Optional)
            .parse_and_finish(source)
            .map_err(parquet_error(ErrorKind::DataInvalid, &source.path))?;
        // Column chunks can be copied only into the same column layout.
        let input_schema = footer.file_metadata().schema_descr();
        let same_schema = input_schema.num_columns() == schema.num_columns()
            && (0..schema.num_columns()).all(|i| input_schema.column(i) == schema.column(i));
        for (index, group) in footer.row_groups().iter().enumerate() {
            let bytes = u64::try_from(group.compressed_size()).unwrap_or(0);
            // The writer needs every copied chunk's page locations (offset index).
            let offsets = footer.offset_index().and_then(|o| o.get(index));
            let column_indexes = footer.column_index().and_then(|c| c.get(index));
            let copyable = same_schema && offsets.is_some_and(|o| o.len() == group.columns().len());
            if copyable && bytes >= copy_min_bytes {
                flush(&mut writer, &factory, &mut pending, &mut row_groups)?;
                copy_row_group(&mut writer, source, group, offsets, column_indexes)?;
                row_groups += 1;
                stats.row_groups_copied += 1;
                stats.bytes_copied += bytes;
                continue;
            }
            let reader = ParquetRecordBatchReaderBuilder::try_new(source.clone())
                .map_err(parquet_error(ErrorKind::DataInvalid, &source.path))?
                .with_row_groups(vec![index])
                .build()
                .map_err(parquet_error(ErrorKind::DataInvalid, &source.path))?;
            for batch in reader {
                let batch = batch.map_err(|e| {
                    Error::new(ErrorKind::DataInvalid, format!("{}: {e}", source.path))
                })?;
                // The table's columns, field ids and nullability; a file written under an
                // older schema gets the columns added since (null) and its widened ones
                // cast.
                pending.push(conform_batch(&batch, &arrow_schema).map_err(|e| {
                    Error::new(
                        ErrorKind::DataInvalid,
                        format!("{} does not match the table schema: {e}", source.path),
                    )
                })?);
                let rows: usize = pending.iter().map(RecordBatch::num_rows).sum();
                let memory: usize = pending.iter().map(RecordBatch::get_array_memory_size).sum();
                if rows >= REENCODE_ROWS || memory >= REENCODE_BYTES {
                    flush(&mut writer, &factory, &mut pending, &mut row_groups)?;
                }
            }
            stats.row_groups_reencoded += 1;
            stats.bytes_reencoded += bytes;
        }
    }
    flush(&mut writer, &factory, &mut pending, &mut row_groups)?;
    // Writes the footer and flushes the last piece to the upload; dropping the writer
    // then ends the upload.
    let written = writer
        .finish()
        .map_err(parquet_error(ErrorKind::DataInvalid, "merged file"))?;
    let size = writer.inner().written;
    drop(writer);
    Ok((written, size, stats))
}

/// Copies a row group's column chunks as they are (no decoding) into the next row
/// group of `writer`, with their page locations and column indexes.
fn copy_row_group(
    writer: &mut SerializedFileWriter<ChannelWrite>,
    source: &RangeSource,
    group: &RowGroupMetaData,
    offsets: Option<&Vec<OffsetIndexMetaData>>,
    column_indexes: Option<&Vec<ColumnIndexMetaData>>,
) -> Result<()> {
    let mut row_group = writer
        .next_row_group()
        .map_err(parquet_error(ErrorKind::DataInvalid, "merged file"))?;
    for (c, column) in group.columns().iter().enumerate() {
        let column_index = column_indexes
            .and_then(|ci| ci.get(c))
            .filter(|ci| !matches!(ci, ColumnIndexMetaData::NONE))
            .cloned();
        row_group
            .append_column(
                source,
                ColumnCloseResult {
                    bytes_written: u64::try_from(column.compressed_size()).unwrap_or(0),
                    rows_written: u64::try_from(group.num_rows()).unwrap_or(0),
                    metadata: column.clone(),
                    bloom_filter: None,
                    column_index,
                    offset_index: offsets.and_then(|o| o.get(c)).cloned(),
                },
            )
            .map_err(parquet_error(ErrorKind::DataInvalid, &source.path))?;
    }
    row_group
        .close()
        .map_err(parquet_error(ErrorKind::DataInvalid, "merged file"))?;
    Ok(())
}

/// Encodes the pending batches as one row group.
fn flush(
    writer: &mut SerializedFileWriter<ChannelWrite>,
    factory: &ArrowRowGroupWriterFactory,
    pending: &mut Vec<RecordBatch>,
    row_groups: &mut usize,
) -> Result<()> {
    if pending.is_empty() {
        return Ok(());
    }
    let columns = factory
        .create_column_writers(*row_groups)
        .map_err(parquet_error(ErrorKind::DataInvalid, "merged file"))?;
    let mut encoder =
        super::encode::RowGroupEncoder::new(columns, super::encode::encoding_threads(usize::MAX));
    for batch in pending.drain(..) {
        encoder
            .write(&batch)
            .map_err(parquet_error(ErrorKind::DataInvalid, "merged file"))?;
    }
    let columns = encoder
        .finish()
        .map_err(parquet_error(ErrorKind::DataInvalid, "merged file"))?;
    let mut row_group = writer
        .next_row_group()
        .map_err(parquet_error(ErrorKind::DataInvalid, "merged file"))?;
    for column in columns {
        column
            .close()
            .map_err(parquet_error(ErrorKind::DataInvalid, "merged file"))?
            .append_to_row_group(&mut row_group)
            .map_err(parquet_error(ErrorKind::DataInvalid, "merged file"))?;
    }
    row_group
        .close()
        .map_err(parquet_error(ErrorKind::DataInvalid, "merged file"))?;
    *row_groups += 1;
    Ok(())
}

/// The merged file's Iceberg entry: counts summed and bounds widened over the inputs,
/// column sizes and split offsets from what was written.
fn merged_data_file(
    inputs: &[&DataFile],
    written: &ParquetMetaData,
    path: String,
    size: u64,
    partition: iceberg::spec::Struct,
    spec_id: i32,
) -> Result<DataFile> {
    let sum = |maps: &mut HashMap<i32, u64>, from: &HashMap<i32, u64>| {
        for (id, n) in from {
            *maps.entry(*id).or_default() += n;
        }
    };
    let (mut values, mut nulls, mut nans) = (HashMap::new(), HashMap::new(), HashMap::new());
    let mut lower: HashMap<i32, Datum> = HashMap::new();
    let mut upper: HashMap<i32, Datum> = HashMap::new();
    // Bounds of different types (a column widened between the inputs) do not compare:
    // the merged file gets none for that column.
    let mut incomparable: std::collections::HashSet<i32> = std::collections::HashSet::new();
    for input in inputs {
        sum(&mut values, input.value_counts());
        sum(&mut nulls, input.null_value_counts());
        sum(&mut nans, input.nan_value_counts());
        for (bounds, from, keep) in [
            (&mut lower, input.lower_bounds(), std::cmp::Ordering::Less),
            (
                &mut upper,
                input.upper_bounds(),
                std::cmp::Ordering::Greater,
            ),
        ] {
            for (id, bound) in from {
                let Some(current) = bounds.get(id) else {
                    bounds.insert(*id, bound.clone());
                    continue;
                };
                match bound.partial_cmp(current) {
                    Some(order) if order == keep => {
                        bounds.insert(*id, bound.clone());
                    }
                    Some(_) => {}
                    None => {
                        incomparable.insert(*id);
                    }
                }
            }
        }
    }
    // A count or bound only holds for the merged file if every input had one (a file
    // written before a column was added has none for it).
    values.retain(|id, _| inputs.iter().all(|i| i.value_counts().contains_key(id)));
    nulls.retain(|id, _| {
        inputs
            .iter()
            .all(|i| i.null_value_counts().contains_key(id))
    });
    nans.retain(|id, _| inputs.iter().all(|i| i.nan_value_counts().contains_key(id)));
    lower.retain(|id, _| {
        !incomparable.contains(id) && inputs.iter().all(|i| i.lower_bounds().contains_key(id))
    });
    upper.retain(|id, _| {
        !incomparable.contains(id) && inputs.iter().all(|i| i.upper_bounds().contains_key(id))
    });
    let mut column_sizes: HashMap<i32, u64> = HashMap::new();
    let mut splits = Vec::new();
    for group in written.row_groups() {
        if let Some(offset) = group.file_offset() {
            splits.push(offset);
        }
        for column in group.columns() {
            let info = column.column_descr().self_type().get_basic_info();
            if info.has_id() {
                *column_sizes.entry(info.id()).or_default() +=
                    u64::try_from(column.compressed_size()).unwrap_or(0);
            }
        }
    }
    DataFileBuilder::default()
        .content(DataContentType::Data)
        .file_path(path)
        .file_format(DataFileFormat::Parquet)
        .partition(partition)
        .partition_spec_id(spec_id)
        .record_count(inputs.iter().map(|i| i.record_count()).sum())
        .file_size_in_bytes(size)
        .column_sizes(column_sizes)
        .value_counts(values)
        .null_value_counts(nulls)
        .nan_value_counts(nans)
        .lower_bounds(lower)
        .upper_bounds(upper)
        .split_offsets(Some(splits))
        .build()
        .map_err(|e| {
            Error::new(
                ErrorKind::Unexpected,
                format!("merged data file entry: {e}"),
            )
        })
}

/// An input file read by range through FileIO, from a blocking thread.
#[derive(Clone)]
struct RangeSource {
    path: String,
    reader: Arc<dyn FileRead>,
    length: u64,
    handle: Handle,
}

impl RangeSource {
    fn read(&self, range: Range<u64>) -> parquet::errors::Result<Bytes> {
        self.handle
            .block_on(self.reader.read(range))
            .map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))
    }
}

impl Length for RangeSource {
    fn len(&self) -> u64 {
        self.length
    }
}

impl ChunkReader for RangeSource {
    type T = RangeRead;

    fn get_read(&self, start: u64) -> parquet::errors::Result<RangeRead> {
        Ok(RangeRead {
            source: self.clone(),
            position: start,
            buffer: Bytes::new(),
        })
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        self.read(start..start.saturating_add(length as u64).min(self.length))
    }
}

/// A sequential reader fetching `READ_PIECE` bytes at a time.
struct RangeRead {
    source: RangeSource,
    position: u64,
    buffer: Bytes,
}

impl Read for RangeRead {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.buffer.is_empty() {
            if self.position >= self.source.length {
                return Ok(0);
            }
            let end = self
                .position
                .saturating_add(READ_PIECE)
                .min(self.source.length);
            self.buffer = self
                .source
                .read(self.position..end)
                .map_err(std::io::Error::other)?;
            self.position = end;
        }
        let n = out.len().min(self.buffer.len());
        out[..n].copy_from_slice(&self.buffer[..n]);
        self.buffer = self.buffer.slice(n..);
        Ok(n)
    }
}

/// The merged file's bytes, handed to the upload task in pieces (blocking when it
/// falls behind, which bounds memory).
struct ChannelWrite {
    sender: tokio::sync::mpsc::Sender<Bytes>,
    piece: Vec<u8>,
    written: u64,
}

impl ChannelWrite {
    fn new(sender: tokio::sync::mpsc::Sender<Bytes>) -> Self {
        Self {
            sender,
            piece: Vec::with_capacity(UPLOAD_PIECE),
            written: 0,
        }
    }

    fn send_piece(&mut self) -> std::io::Result<()> {
        if self.piece.is_empty() {
            return Ok(());
        }
        let piece = Bytes::from(std::mem::replace(
            &mut self.piece,
            Vec::with_capacity(UPLOAD_PIECE),
        ));
        self.sender
            .blocking_send(piece)
            .map_err(|_| std::io::Error::other("the upload stopped"))
    }
}

impl Write for ChannelWrite {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.piece.extend_from_slice(bytes);
        self.written += bytes.len() as u64;
        if self.piece.len() >= UPLOAD_PIECE {
            self.send_piece()?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send_piece()
    }
}

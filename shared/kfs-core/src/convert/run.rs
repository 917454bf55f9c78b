//! Runs: small segments of one partition, each continuing the one before it, written
//! into one set of data files (one Parquet file per partition value) instead of a set
//! per segment. The broker flushes a segment per produce request by default, so most
//! segments are a few KB: one file for a thousand of them is a thousand fewer PUTs,
//! ledger writes and files to merge.
//!
//! Each segment is read whole and decoded in full before any of its rows reach the
//! writer, so a segment whose bytes are broken leaves the run exactly as it was: the
//! run is cut before it, the segment is quarantined alone, and the next run starts
//! after it. Memory is one segment's rows plus the Arrow batch being gathered, as for
//! one segment's conversion.

use super::decode::decode_into;
use super::route::{RawRouter, Routed};
use super::writer::{SegmentWriter, discard};
use super::{ConvertError, ROWS_PER_BATCH, RecordColumns, data_file_stem};
use crate::table::arrow_schema;
use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use iceberg::spec::DataFile;
use iceberg::table::Table;
use kfs_failpoint::Failpoint;
use kfs_plan::keys::SegmentKey;
use kfs_segment::DecodeLimits;

/// Segments of at most this many bytes are read whole and converted in runs; larger
/// ones stream on their own, as they always did.
pub const RUN_SEGMENT_BYTES: u64 = 1 << 20;

/// Segments decoded on the task that reads them, below this size: a thread hand-off
/// costs more than decoding a few KB.
const INLINE_DECODE_BYTES: usize = 64 << 10;

/// A small segment decoded whole, its rows not yet in any run.
#[derive(Debug, Clone)]
pub struct DecodedSegment {
    batches: Vec<RecordBatch>,
    /// Data records.
    pub records: u64,
    /// Offset of its last record (its base offset when it has none).
    pub last_offset: i64,
}

/// Decodes the whole segment `key` from `body` into rows of a run's columns
/// (`schema`: the table's, raw values; [`RunWriter::schema`]), on this task when it
/// is small, else on a blocking thread.
pub async fn decode_for_run(
    schema: &SchemaRef,
    key: &SegmentKey,
    body: bytes::Bytes,
    limits: DecodeLimits,
) -> Result<DecodedSegment, ConvertError> {
    let schema = schema.clone();
    if body.len() <= INLINE_DECODE_BYTES {
        return decode_whole(&body, key, schema, limits);
    }
    let owned = key.clone();
    tokio::task::spawn_blocking(move || decode_whole(&body, &owned, schema, limits))
        .await
        .map_err(|join| ConvertError::Write {
            segment: key.to_string(),
            source: Box::new(iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                format!("the decoding thread failed: {join}"),
            )),
        })?
}

/// What a closed run wrote.
#[derive(Debug, Clone)]
pub struct WrittenRun {
    /// Its data files.
    pub data_files: Vec<DataFile>,
    /// Their bytes.
    pub file_bytes: u64,
}

/// The data files of one run being written (raw values).
pub struct RunWriter {
    table: Table,
    schema: SchemaRef,
    writer: SegmentWriter,
    segment: String,
    /// Decoded batches waiting to be gathered into one of [`ROWS_PER_BATCH`] rows.
    gathered: Vec<RecordBatch>,
    gathered_rows: usize,
}

impl RunWriter {
    /// The Arrow columns of runs for `table` (what [`decode_for_run`] decodes into).
    pub fn schema(table: &Table) -> iceberg::Result<SchemaRef> {
        arrow_schema(table.metadata().current_schema())
    }

    /// A run for `table`, of the columns `schema` ([`RunWriter::schema`]), whose files
    /// are named after its first segment (`lead`) and that segment's version.
    pub async fn new(
        table: &Table,
        schema: SchemaRef,
        lead: &SegmentKey,
        etag: &str,
    ) -> Result<Self, ConvertError> {
        let segment = lead.to_string();
        let writer = SegmentWriter::new(table, data_file_stem(lead, etag))
            .await
            .map_err(|source| ConvertError::Write {
                segment: segment.clone(),
                source: Box::new(source),
            })?;
        Ok(Self {
            table: table.clone(),
            schema,
            writer,
            segment,
            gathered: Vec::new(),
            gathered_rows: 0,
        })
    }

    /// The table the run is written for.
    pub fn table(&self) -> &Table {
        &self.table
    }

    fn write_error(&self, source: iceberg::Error) -> ConvertError {
        ConvertError::Write {
            segment: self.segment.clone(),
            source: Box::new(source),
        }
    }

    /// Adds a decoded segment's rows to the run.
    pub async fn push(&mut self, segment: DecodedSegment) -> Result<(), ConvertError> {
        for batch in segment.batches {
            self.gathered_rows += batch.num_rows();
            self.gathered.push(batch);
        }
        if self.gathered_rows >= ROWS_PER_BATCH {
            self.write_gathered().await?;
        }
        Ok(())
    }

    /// Writes the gathered batches as one.
    async fn write_gathered(&mut self) -> Result<(), ConvertError> {
        if self.gathered.is_empty() {
            return Ok(());
        }
        let batch =
            arrow_select::concat::concat_batches(&self.schema, &self.gathered).map_err(|e| {
                self.write_error(iceberg::Error::new(
                    iceberg::ErrorKind::Unexpected,
                    format!("gathering a run's rows: {e}"),
                ))
            })?;
        self.gathered.clear();
        self.gathered_rows = 0;
        let written = self.writer.write(batch).await;
        written.map_err(|e| self.write_error(e))
    }

    /// Writes what is left and closes the run's files.
    pub async fn close(mut self) -> Result<WrittenRun, ConvertError> {
        if let Err(e) = self.write_gathered().await {
            discard(&self.table, self.writer).await;
            return Err(e);
        }
        let segment = self.segment;
        let data_files = kfs_failpoint::around(Failpoint::DataFileWrite, self.writer.close())
            .await
            .map_err(|source| ConvertError::Write {
                segment,
                source: Box::new(source),
            })?;
        Ok(WrittenRun {
            file_bytes: data_files.iter().map(|f| f.file_size_in_bytes()).sum(),
            data_files,
        })
    }

    /// Drops the run: deletes what it wrote (best effort; orphan cleanup removes what
    /// is left).
    pub async fn discard(self) {
        discard(&self.table, self.writer).await;
    }
}

/// Decodes a whole segment held in memory into Arrow batches of the table's columns.
fn decode_whole(
    body: &[u8],
    key: &SegmentKey,
    schema: SchemaRef,
    limits: DecodeLimits,
) -> Result<DecodedSegment, ConvertError> {
    let router = RawRouter(
        RecordColumns::new(schema).map_err(|source| ConvertError::Write {
            segment: key.to_string(),
            source: Box::new(source),
        })?,
    );
    let mut batches = Vec::new();
    let decoded = decode_into(body, key, Box::new(router), limits, |routed| {
        if let Routed::Table(batch) = routed {
            batches.push(batch);
        }
        true
    })?;
    Ok(DecodedSegment {
        batches,
        records: decoded.records,
        last_offset: decoded.last_offset,
    })
}

//! The converter core: one segment → verified records → Arrow → Parquet data file(s)
//! written through iceberg-rust's writer stack, named after the segment's identity.
//!
//! The data file name derives from the segment key, its ETag (or content hash) and a
//! token unique to the write ([`write_token`]): two conversions of one segment never
//! write the same path, and the ledger's conditional insert decides whose files count.
//! A partitioned table gets one file per partition value. Small segments that
//! continue one another are converted together, in runs ([`RunWriter`]).
//!
//! Conversion streams: the segment arrives as a stream of chunks, a blocking thread
//! decodes it batch by batch into Arrow batches of [`ROWS_PER_BATCH`] rows or
//! [`BYTES_PER_BATCH`] bytes, whichever comes first, and the
//! async side hands them to the Parquet writer. Memory is bounded by a frame, a few
//! Arrow batches and the Parquet row group being built, never by the segment's size.

mod decode;
mod lfs;
mod registry_router;
mod route;
mod run;
mod writer;

pub use decode::{JsonReading, scan_json_segment, scan_schema_ids};
pub(crate) use kfs_values::cells::{Role, Shape, absorb_as};
#[cfg(feature = "test-support")]
pub use kfs_values::writer_schema::{registry_change_columns, registry_columns};
pub use kfs_values::{
    BYTES_PER_BATCH, MAX_SCHEMAS_PER_SEGMENT, NamedSchemas, ROWS_PER_BATCH, RecordColumns,
    RegistrySchemas, WriterSchema, WriterSchemas,
};
pub use lfs::LfsValues;
pub(crate) use lfs::{blob_channel, serve_blobs};
pub use run::{DecodedSegment, RUN_SEGMENT_BYTES, RunWriter, decode_for_run};
pub use writer::{data_file_stem, rewrite_in_default_spec, write_token};

use crate::source::SegmentStream;
use crate::table::arrow_schema;
pub(crate) use decode::StreamReader;
use decode::decode_segment;
use iceberg::spec::DataFile;
use iceberg::table::Table;
use kfs_failpoint::Failpoint;
use kfs_plan::keys::SegmentKey;
use kfs_segment::{DecodeError, DecodeLimits};
use route::{DecodedBatch, JsonRouter, RawRouter, RecordRouter, Routed};
use writer::{SegmentWriter, discard};

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

/// What converting a segment produced.
#[derive(Debug, Clone)]
pub struct ConvertedSegment {
    /// Data files written (none when the segment holds no data record).
    pub data_files: Vec<DataFile>,
    /// Files written for the dead-letter table (JSON values that could not be written).
    pub dead_letter_files: Vec<DataFile>,
    /// Data records written to the table (not those left out by configuration:
    /// claim checks in LFS mode `skip`).
    pub records: u64,
    /// Data records written to the dead-letter table.
    pub dead_letters: u64,
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
    /// Reading what a record refers to (a large-file blob) failed: what the store's
    /// error says (a transient failure is retried, never quarantined).
    #[error("segment {segment}: record at offset {offset}: {source}")]
    Refers {
        /// The segment key.
        segment: String,
        /// The record's offset.
        offset: i64,
        /// The store's error.
        source: crate::source::SourceError,
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
    /// What the failure means: broken bytes and unrepresentable records are invalid
    /// data (the segment is quarantined); a failed write is what its cause says.
    pub fn kind(&self) -> kfs_catalog::fault::ErrorKind {
        use kfs_catalog::fault::ErrorKind;
        match self {
            Self::Malformed { source, .. } if source.is_retryable() => ErrorKind::Transient,
            Self::Malformed { .. } | Self::Unrepresentable { .. } => ErrorKind::InvalidData,
            Self::Write { source, .. } => kfs_catalog::fault::iceberg_error_kind(source),
            Self::Refers { source, .. } => source.kind,
        }
    }
}

/// How a segment's record values are written.
pub enum ValueColumns<'a> {
    /// As bytes, in the `value` column.
    Raw,
    /// As bytes, large-file claim checks handled by the topic's LFS mode (see
    /// `convert::lfs`); records whose blob cannot be had go to the dead-letter table.
    Lfs(LfsValues<'a>),
    /// As the table's payload columns, decoded with the writer schema each value's
    /// framing names (`writers`, resolved and absorbed by the table's schema before
    /// the conversion); any other record goes to `dead_letters`.
    Registry {
        /// The writer schemas of the segment's values.
        writers: WriterSchemas,
        /// The writer schemas of its keys, when keys are decoded (`key_format =
        /// "registry"`).
        key_writers: Option<WriterSchemas>,
        /// The dead-letter table.
        dead_letters: Option<&'a Table>,
    },
    /// As the table's payload columns (its schema already holds every field the
    /// segment's values need, see `scan_json_segment`); values that do not fit go to
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
    let (router, dead_letter_table) = router_for(table, values, &segment).map_err(write_error)?;
    let mut writer = SegmentWriter::new(table, stem.clone())
        .await
        .map_err(write_error)?;
    let mut dead_writer = match dead_letter_table {
        Some(dlq) => Some(SegmentWriter::new(dlq, stem).await.map_err(write_error)?),
        None => None,
    };
    let (sender, mut receiver) = tokio::sync::mpsc::channel::<DecodedBatch>(BATCHES_IN_FLIGHT);
    let key = input.key.clone();
    let reader = StreamReader::new(body);
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
    let data_files = kfs_failpoint::around(Failpoint::DataFileWrite, writer.close())
        .await
        .map_err(write_error)?;
    let dead_letter_files = match dead_writer {
        Some(dead) => kfs_failpoint::around(Failpoint::DataFileWrite, dead.close())
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
        records: decoded.records - decoded.dead_letters - decoded.skipped,
        dead_letters: decoded.dead_letters,
        last_offset: decoded.last_offset,
    })
}

/// The router that turns a segment's records into `table`'s columns as `values` says,
/// and the dead-letter table its rejected records go to, if any.
fn router_for<'t>(
    table: &Table,
    values: ValueColumns<'t>,
    segment: &str,
) -> iceberg::Result<(Box<dyn RecordRouter>, Option<&'t Table>)> {
    Ok(match values {
        ValueColumns::Raw => {
            let schema = arrow_schema(table.metadata().current_schema())?;
            (Box::new(RawRouter(RecordColumns::new(schema)?)), None)
        }
        ValueColumns::Json { dead_letters } => (
            Box::new(JsonRouter::new(table, dead_letters, segment.to_owned())?),
            dead_letters,
        ),
        ValueColumns::Registry {
            writers,
            key_writers,
            dead_letters,
        } => (
            Box::new(registry_router::RegistryRouter::new(
                table,
                (writers, key_writers),
                dead_letters,
                segment.to_owned(),
            )?),
            dead_letters,
        ),
        ValueColumns::Lfs(values) => {
            let dead_letters = values.dead_letters;
            (
                Box::new(lfs::LfsRouter::new(table, values, segment.to_owned())?),
                dead_letters,
            )
        }
    })
}

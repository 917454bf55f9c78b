//! The decode loop: a segment read from its byte stream on a blocking thread, its
//! records routed into Arrow batches for the writers; and the JSON pre-scan that finds
//! the columns a segment's values need.

use super::route::{DecodedBatch, PushError, RecordRouter, Routed};
use super::{BYTES_PER_BATCH, ConvertError, JsonScan, ROWS_PER_BATCH};
use crate::source::SegmentStream;
use kfs_plan::keys::SegmentKey;
use kfs_segment::{DecodeError, DecodeLimits, Record, SegmentDecoder};

/// What the decoding thread found once the segment ended.
pub(crate) struct Decoded {
    pub(crate) records: u64,
    pub(crate) dead_letters: u64,
    pub(crate) skipped: u64,
    pub(crate) last_offset: i64,
}

/// A blocking buffered reader over a segment stream (used on a blocking thread only):
/// its buffer is the stream's current chunk, so a batch that lies whole in a chunk is
/// decoded where it arrived, never copied.
pub(crate) struct StreamReader {
    stream: SegmentStream,
    chunk: bytes::Bytes,
    /// The stream has ended (it is not polled again).
    ended: bool,
    runtime: tokio::runtime::Handle,
}

impl StreamReader {
    /// A reader of `stream`, to be read on a blocking thread of the current runtime.
    pub(crate) fn new(stream: SegmentStream) -> Self {
        Self {
            stream,
            chunk: bytes::Bytes::new(),
            ended: false,
            runtime: tokio::runtime::Handle::current(),
        }
    }
}

impl std::io::BufRead for StreamReader {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        use futures::StreamExt;
        while self.chunk.is_empty() && !self.ended {
            match self.runtime.block_on(self.stream.next()) {
                None => self.ended = true,
                Some(Ok(chunk)) => self.chunk = chunk,
                Some(Err(e)) => return Err(std::io::Error::other(e)),
            }
        }
        Ok(&self.chunk)
    }

    fn consume(&mut self, amount: usize) {
        let amount = amount.min(self.chunk.len());
        bytes::Buf::advance(&mut self.chunk, amount);
    }
}

impl std::io::Read for StreamReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::io::BufRead;
        let chunk = self.fill_buf()?;
        let n = buf.len().min(chunk.len());
        buf[..n].copy_from_slice(&chunk[..n]);
        self.consume(n);
        Ok(n)
    }
}

/// What decoding a segment's records found: records and the last offset.
struct RecordScan {
    records: u64,
    last_offset: i64,
}

/// Decodes a segment from `reader`, handing each data record to `each` as it is
/// decoded (which returns `false` to stop early); checks the header against the key.
/// No list of a batch's records is built: memory stays at one batch's bytes.
fn decode_records(
    reader: impl std::io::BufRead,
    key: &SegmentKey,
    limits: DecodeLimits,
    mut each: impl FnMut(&Record<'_>) -> Result<bool, ConvertError>,
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
    let mut failed: Option<ConvertError> = None;
    let mut stopped = false;
    loop {
        let next = decoder.next_batch_each(|record| {
            records += 1;
            match each(record) {
                Ok(true) => true,
                Ok(false) => {
                    stopped = true;
                    false
                }
                Err(e) => {
                    failed = Some(e);
                    false
                }
            }
        });
        if let Some(e) = failed.take() {
            return Err(e);
        }
        if stopped {
            return Ok(RecordScan {
                records,
                last_offset: key.base_offset,
            });
        }
        if next.map_err(malformed)?.is_none() {
            break;
        }
    }
    let last_offset = decoder.summary().map_or(key.base_offset, |s| s.last_offset);
    if last_offset.checked_add(1).is_none() {
        // The watermark after it (the next offset) cannot be represented.
        return Err(ConvertError::Unrepresentable {
            segment: key.to_string(),
            offset: last_offset,
            reason: "the offset after it does not fit in 64 bits, so no watermark can follow it"
                .into(),
        });
    }
    Ok(RecordScan {
        records,
        last_offset,
    })
}

/// Decodes a segment from `reader` into Arrow batches sent to `batches`; runs on a
/// blocking thread. Stops early (returning `Ok`) when the writer hung up.
pub(crate) fn decode_segment(
    reader: impl std::io::BufRead,
    key: &SegmentKey,
    router: Box<dyn RecordRouter>,
    limits: DecodeLimits,
    batches: &tokio::sync::mpsc::Sender<DecodedBatch>,
) -> Result<Decoded, ConvertError> {
    decode_into(reader, key, router, limits, |routed| {
        batches.blocking_send(Ok(routed)).is_ok()
    })
}

/// Decodes a segment from `reader` into Arrow batches handed to `sink`, which answers
/// `false` when it takes no more (decoding then stops early, returning `Ok`).
pub(crate) fn decode_into(
    reader: impl std::io::BufRead,
    key: &SegmentKey,
    mut router: Box<dyn RecordRouter>,
    limits: DecodeLimits,
    mut sink: impl FnMut(Routed) -> bool,
) -> Result<Decoded, ConvertError> {
    let segment = key.to_string();
    let write_error = |source: iceberg::Error| ConvertError::Write {
        segment: segment.clone(),
        source: Box::new(source),
    };
    let mut hung_up = false;
    let pushed = |offset: i64, result: Result<(), PushError>| {
        result.map_err(|e| match e {
            PushError::Unrepresentable(reason) => ConvertError::Unrepresentable {
                segment: segment.clone(),
                offset,
                reason,
            },
            PushError::Source(source) => ConvertError::Refers {
                segment: segment.clone(),
                offset,
                source,
            },
        })
    };
    let scan = decode_records(reader, key, limits, |record| {
        pushed(
            record.offset,
            router.push(&key.topic, key.partition, record),
        )?;
        // Checked per record: one Kafka batch may hold millions of records, or a few
        // of a megabyte each.
        if router.rows() >= ROWS_PER_BATCH || router.bytes() >= BYTES_PER_BATCH {
            pushed(record.offset, router.settle())?;
            for routed in router.flush().map_err(write_error)? {
                if !sink(routed) {
                    hung_up = true;
                    return Ok(false);
                }
            }
        }
        Ok(true)
    })?;
    if !hung_up {
        pushed(scan.last_offset, router.settle())?;
        for routed in router.flush().map_err(write_error)? {
            // A hung-up writer has its own error to report.
            if !sink(routed) {
                break;
            }
        }
    }
    Ok(Decoded {
        records: scan.records,
        dead_letters: router.dead_letters(),
        skipped: router.skipped(),
        last_offset: scan.last_offset,
    })
}

/// How a JSON table reads its values: its columns declared or grown, its caps,
/// whether they are Debezium change events (a `cdc` table: the `after` image's fields
/// are the columns), and, for a mirror keyed by value fields, how a delete names its
/// key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonReading {
    /// The columns were declared: fields without one are not written.
    pub declared: bool,
    /// How many columns the table may have and gain.
    pub caps: kfs_values::json::ColumnCaps,
    /// The values are Debezium change events.
    pub cdc: bool,
    /// The mirror's key fields, when it is keyed by value fields: a delete naming no
    /// key is refused (for the dead-letter table).
    delete_keys: Option<crate::mirror::DeleteKeys>,
}

/// What a value's row holds: its fields, and for a change event the rest of it (the
/// `after` image the `value` column holds instead of the envelope, `None` for a
/// delete, and the source position; its fields moved to the first).
pub(crate) type ValueFields = (
    serde_json::Map<String, serde_json::Value>,
    Option<kfs_values::json::Change>,
);

impl JsonReading {
    /// How `table` reads its values.
    pub fn of(table: &iceberg::table::Table) -> Self {
        Self {
            declared: crate::table::declared_columns(table),
            caps: kfs_values::json::ColumnCaps::of(table),
            cdc: crate::table::reads_changes(table),
            delete_keys: crate::mirror::DeleteKeys::of(table),
        }
    }

    /// The fields of the record `record`'s value (see [`ValueFields`]), or why it has
    /// none (a delete that names no key of a mirror keyed by fields among the reasons).
    pub(crate) fn fields(
        &self,
        record: &kfs_segment::Record<'_>,
    ) -> Result<ValueFields, kfs_values::json::Rejection> {
        let fields = match self.cdc {
            true => kfs_values::json::parse_change(record.value)
                .map(|mut change| (std::mem::take(&mut change.fields), Some(change)))?,
            false => kfs_values::json::parse_value(record.value).map(|fields| (fields, None))?,
        };
        let deletes = match &fields.1 {
            Some(change) => change.image.is_none(),
            None => record.value.is_none(),
        };
        if deletes
            && let Some(reason) = self
                .delete_keys
                .as_ref()
                .and_then(|keys| keys.unnamed(record.key, None))
        {
            return Err(kfs_values::json::Rejection(reason));
        }
        Ok(fields)
    }
}

/// Scans a segment's JSON values, read from `segment` as it arrives, against `schema`:
/// the fields to add and the types to widen, in offset order (the first record to give
/// a field a type decides it), and how many records no schema change could take.
/// Memory is bounded by one batch, never by the segment. Blocking work: run it on a
/// blocking thread.
pub fn scan_json_segment(
    segment: impl std::io::BufRead,
    key: &SegmentKey,
    limits: DecodeLimits,
    schema: &iceberg::spec::Schema,
    last_column_id: i32,
    reading: JsonReading,
) -> Result<JsonScan, ConvertError> {
    let mut evolving =
        kfs_values::json::EvolvingSchema::new(schema, last_column_id).with_caps(reading.caps);
    if reading.declared {
        evolving = evolving.declared();
    }
    let mut rejected = 0u64;
    decode_records(segment, key, limits, |record| {
        let absorbed = reading
            .fields(record)
            .and_then(|(value, _)| evolving.absorb(&value));
        if absorbed.is_err() {
            rejected += 1;
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

/// The schemas named by the registry framing of a segment's values (and of its keys,
/// with `keys`), with the Protobuf messages their payloads name, read from `segment`
/// as it arrives (values without the framing are left to the conversion, which sends
/// them to the dead-letter table). Blocking work: run it on a blocking thread.
pub fn scan_schema_ids(
    segment: impl std::io::BufRead,
    key: &SegmentKey,
    limits: DecodeLimits,
    keys: bool,
) -> Result<(super::NamedSchemas, super::NamedSchemas), ConvertError> {
    let mut values = super::NamedSchemas::default();
    let mut named_keys = super::NamedSchemas::default();
    decode_records(segment, key, limits, |record| {
        // A compressed payload's head only: its schema and the message it names.
        let head =
            |v| kfs_values::registry::frame_head(v, kfs_values::writer_schema::SCANNED_BYTES);
        if let Some(Ok(framed)) = record.value.map(head) {
            values.note(&framed);
        }
        if keys && let Some(Ok(framed)) = record.key.map(head) {
            named_keys.note(&framed);
        }
        Ok(true)
    })?;
    Ok((values, named_keys))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::SourceError;
    use futures::StreamExt;
    use kfs_catalog::fault::ErrorKind;
    use kfs_segment::{BatchSpec, Compression, OwnedRecord, encode_segment};

    /// A segment of two uncompressed batches of three 300-byte records each.
    fn segment() -> Vec<u8> {
        let record = |offset: i64| OwnedRecord {
            offset,
            timestamp_ms: 1_700_000_000_000,
            key: Some(b"k".to_vec()),
            value: Some(vec![b'v'; 300]),
            headers: vec![(b"h".to_vec(), None)],
        };
        let batch =
            |from: i64| BatchSpec::new((from..from + 3).map(record).collect(), Compression::None);
        encode_segment(&[batch(0), batch(3)], 1)
            .map(|segment| segment.kfs)
            .unwrap_or_default()
    }

    fn key() -> SegmentKey {
        SegmentKey {
            namespace: "ns".into(),
            topic: "orders".into(),
            partition: 0,
            base_offset: 0,
        }
    }

    /// Decodes the pieces as a stream through `StreamReader`, on a blocking thread as
    /// the converter does; returns the records' offsets.
    async fn decode(
        pieces: Vec<Result<bytes::Bytes, SourceError>>,
    ) -> Result<Vec<i64>, ConvertError> {
        let stream: SegmentStream = futures::stream::iter(pieces).boxed();
        tokio::task::spawn_blocking(move || {
            let mut offsets = Vec::new();
            decode_records(
                StreamReader::new(stream),
                &key(),
                DecodeLimits::default(),
                |record| {
                    offsets.push(record.offset);
                    Ok(true)
                },
            )
            .map(|_| offsets)
        })
        .await
        .unwrap_or_else(|e| panic!("the decoding thread failed: {e}"))
    }

    /// Chunks of every size read back the same records: batches whole in a chunk are
    /// read in place, batches across chunks gathered.
    #[tokio::test]
    async fn every_chunking_of_a_segment_reads_the_same_records() {
        let bytes = segment();
        for size in [1, 17, 100, 700, bytes.len()] {
            let pieces = bytes
                .chunks(size)
                .map(|c| Ok(bytes::Bytes::copy_from_slice(c)))
                .collect();
            let offsets = decode(pieces).await.map_err(|e| e.to_string());
            assert_eq!(
                offsets,
                Ok((0..6).collect::<Vec<_>>()),
                "chunks of {size} bytes"
            );
        }
    }

    /// A store that fails mid-body (a reset connection, throttling) fails the
    /// conversion as transient, to be retried: the segment is not quarantined.
    #[tokio::test]
    async fn a_stream_failing_midway_is_a_transient_error() {
        let bytes = segment();
        let failure = SourceError {
            location: "ns/orders/0/00000000000000000000.kfs".into(),
            message: "connection reset".into(),
            kind: ErrorKind::Transient,
        };
        let pieces = vec![
            Ok(bytes::Bytes::copy_from_slice(&bytes[..500])),
            Err(failure),
        ];
        match decode(pieces).await {
            Err(e) => assert_eq!(e.kind(), ErrorKind::Transient, "{e}"),
            Ok(offsets) => panic!("decoded {offsets:?} from half a segment"),
        }
    }
}

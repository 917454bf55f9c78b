//! Writing segments and indexes byte-compatible with the KafScale broker.
//!
//! Used by tests, the `gen` command and benchmarks. Records are given with absolute
//! offsets and timestamps; the encoder derives deltas, lengths and both CRCs.

use crate::batch::{BATCH_HEADER_LEN, CRC_START};
use crate::compression::{self, Compression, SnappyFraming};
use crate::envelope::{FOOTER_MAGIC, SEGMENT_HEADER_LEN, SEGMENT_MAGIC};
use crate::error::EncodeError;
use crate::index::{DEFAULT_INDEX_INTERVAL, SegmentIndex};
use crate::wire::{put_varint, put_varlong};

/// An owned record to encode.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OwnedRecord {
    /// Absolute offset.
    pub offset: i64,
    /// Timestamp in Unix milliseconds (the producer's CreateTime).
    pub timestamp_ms: i64,
    /// Key; `None` is null.
    pub key: Option<Vec<u8>>,
    /// Value; `None` is null.
    pub value: Option<Vec<u8>>,
    /// Headers in order: key bytes (usually UTF-8) and value; a `None` value is null.
    pub headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl OwnedRecord {
    /// Copies a decoded record.
    pub fn from_record(record: &crate::Record<'_>) -> Self {
        Self {
            offset: record.offset,
            timestamp_ms: record.timestamp_ms,
            key: record.key.map(<[u8]>::to_vec),
            value: record.value.map(<[u8]>::to_vec),
            headers: record
                .headers
                .iter()
                .map(|h| (h.key.to_vec(), h.value.map(<[u8]>::to_vec)))
                .collect(),
        }
    }

    /// The record as decoded records are, its value `value` (its own, or another:
    /// what a claim check's blob replaces it with).
    pub fn with_value<'a>(&'a self, value: Option<&'a [u8]>) -> crate::Record<'a> {
        crate::Record {
            offset: self.offset,
            timestamp_ms: self.timestamp_ms,
            key: self.key.as_deref(),
            value,
            headers: self
                .headers
                .iter()
                .map(|(key, value)| crate::RecordHeader {
                    key,
                    value: value.as_deref(),
                })
                .collect(),
        }
    }
}

/// A batch to encode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchSpec {
    /// Records, offsets strictly increasing.
    pub records: Vec<OwnedRecord>,
    /// Codec of the records section.
    pub compression: Compression,
    /// Snappy framing, when `compression` is snappy.
    pub snappy_framing: SnappyFraming,
    /// `Some(append time)` writes a LogAppendTime batch whose maxTimestamp is that time.
    pub log_append_time_ms: Option<i64>,
    /// Writes a control (transaction marker) batch.
    pub control: bool,
    /// Partition leader epoch (-1 as in the broker's worked example).
    pub partition_leader_epoch: i32,
}

impl BatchSpec {
    /// A plain CreateTime batch with the given codec.
    pub fn new(records: Vec<OwnedRecord>, compression: Compression) -> Self {
        Self {
            records,
            compression,
            snappy_framing: SnappyFraming::Xerial,
            log_append_time_ms: None,
            control: false,
            partition_leader_epoch: -1,
        }
    }
}

/// An encoded segment and its index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedSegment {
    /// Base offset of the first batch.
    pub base_offset: i64,
    /// Offset of the last record.
    pub last_offset: i64,
    /// The `.kfs` bytes.
    pub kfs: Vec<u8>,
    /// The `.index` bytes.
    pub index: Vec<u8>,
}

fn to_i32(value: usize, what: &'static str) -> Result<i32, EncodeError> {
    i32::try_from(value).map_err(|_| EncodeError::TooLarge { what })
}

fn put_nullable(
    out: &mut Vec<u8>,
    bytes: Option<&[u8]>,
    what: &'static str,
) -> Result<(), EncodeError> {
    match bytes {
        None => put_varint(out, -1),
        Some(bytes) => {
            put_varint(out, to_i32(bytes.len(), what)?);
            out.extend_from_slice(bytes);
        }
    }
    Ok(())
}

fn encode_record(
    record: &OwnedRecord,
    base_offset: i64,
    base_timestamp: i64,
    body: &mut Vec<u8>,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    body.clear();
    body.push(0); // attributes
    // As Kafka's producer computes it (Java's `long` wraps); the reader adds it back
    // the same way.
    let timestamp_delta = record.timestamp_ms.wrapping_sub(base_timestamp);
    put_varlong(body, timestamp_delta);
    let offset_delta =
        i32::try_from(record.offset - base_offset).map_err(|_| EncodeError::TooLarge {
            what: "offset delta",
        })?;
    put_varint(body, offset_delta);
    put_nullable(body, record.key.as_deref(), "key")?;
    put_nullable(body, record.value.as_deref(), "value")?;
    put_varint(body, to_i32(record.headers.len(), "header count")?);
    for (key, value) in &record.headers {
        put_nullable(body, Some(key), "header key")?;
        put_nullable(body, value.as_deref(), "header value")?;
    }
    put_varint(out, to_i32(body.len(), "record")?);
    out.extend_from_slice(body);
    Ok(())
}

/// Encodes one batch frame with the given base offset (the broker's rewrite).
pub fn encode_batch(spec: &BatchSpec) -> Result<Vec<u8>, EncodeError> {
    let (first, last) = match (spec.records.first(), spec.records.last()) {
        (Some(first), Some(last)) => (first, last),
        _ => return Err(EncodeError::EmptyBatch),
    };
    for pair in spec.records.windows(2) {
        if pair[1].offset <= pair[0].offset {
            return Err(EncodeError::OffsetOrder {
                offset: pair[1].offset,
                previous: pair[0].offset,
            });
        }
    }
    let base_offset = first.offset;
    let base_timestamp = first.timestamp_ms;
    let create_max = spec
        .records
        .iter()
        .map(|r| r.timestamp_ms)
        .max()
        .unwrap_or(base_timestamp);
    let max_timestamp = spec.log_append_time_ms.unwrap_or(create_max);
    let mut plain = Vec::new();
    let mut body = Vec::new();
    for record in &spec.records {
        encode_record(record, base_offset, base_timestamp, &mut body, &mut plain)?;
    }
    let mut attributes = spec.compression.id();
    if spec.log_append_time_ms.is_some() {
        attributes |= 0x08;
    }
    if spec.control {
        attributes |= 0x20;
    }
    let mut frame = Vec::with_capacity(BATCH_HEADER_LEN + plain.len());
    frame.extend_from_slice(&base_offset.to_be_bytes());
    frame.extend_from_slice(&[0; 4]); // batchLength, patched below
    frame.extend_from_slice(&spec.partition_leader_epoch.to_be_bytes());
    frame.push(2); // magic
    frame.extend_from_slice(&[0; 4]); // crc, patched below
    frame.extend_from_slice(&attributes.to_be_bytes());
    let last_offset_delta =
        i32::try_from(last.offset - base_offset).map_err(|_| EncodeError::TooLarge {
            what: "last offset delta",
        })?;
    frame.extend_from_slice(&last_offset_delta.to_be_bytes());
    frame.extend_from_slice(&base_timestamp.to_be_bytes());
    frame.extend_from_slice(&max_timestamp.to_be_bytes());
    frame.extend_from_slice(&(-1i64).to_be_bytes()); // producerId
    frame.extend_from_slice(&(-1i16).to_be_bytes()); // producerEpoch
    frame.extend_from_slice(&(-1i32).to_be_bytes()); // baseSequence
    frame.extend_from_slice(&to_i32(spec.records.len(), "record count")?.to_be_bytes());
    compression::compress(spec.compression, spec.snappy_framing, &plain, &mut frame)?;
    let batch_length = to_i32(frame.len() - 12, "batch length")?;
    frame[8..12].copy_from_slice(&batch_length.to_be_bytes());
    let crc = crc32c::crc32c(&frame[CRC_START..]);
    frame[17..21].copy_from_slice(&crc.to_be_bytes());
    Ok(frame)
}

/// Encodes a segment and its index from batches, with the given flush time.
pub fn encode_segment(
    batches: &[BatchSpec],
    created_ms: i64,
) -> Result<EncodedSegment, EncodeError> {
    let frames = batches
        .iter()
        .map(encode_batch)
        .collect::<Result<Vec<_>, _>>()?;
    segment_from_frames(&frames, created_ms)
}

/// Assembles a segment and its index from already encoded batch frames.
pub fn segment_from_frames(
    frames: &[Vec<u8>],
    created_ms: i64,
) -> Result<EncodedSegment, EncodeError> {
    let mut starts = Vec::with_capacity(frames.len());
    let mut message_count: i64 = 0;
    let mut last_offset = None;
    let mut position = SEGMENT_HEADER_LEN as u64;
    for frame in frames {
        let field = |range: std::ops::Range<usize>| -> [u8; 8] {
            let mut out = [0u8; 8];
            out[8 - range.len()..].copy_from_slice(&frame[range]);
            out
        };
        if frame.len() < BATCH_HEADER_LEN {
            return Err(EncodeError::TooLarge {
                what: "batch frame (too short)",
            });
        }
        let base = i64::from_be_bytes(field(0..8));
        let count = i64::from_be_bytes(field(57..61)) as i32;
        let last_delta = i64::from_be_bytes(field(23..27)) as i32;
        if let Some(previous) = last_offset
            && base <= previous
        {
            return Err(EncodeError::OffsetOrder {
                offset: base,
                previous,
            });
        }
        last_offset = Some(base + i64::from(last_delta));
        message_count += i64::from(count);
        starts.push((base, position, count));
        position += frame.len() as u64;
    }
    let (Some(&(base_offset, _, _)), Some(last_offset)) = (starts.first(), last_offset) else {
        return Err(EncodeError::EmptySegment);
    };
    let message_count = i32::try_from(message_count).map_err(|_| EncodeError::TooLarge {
        what: "message count",
    })?;
    let mut kfs = Vec::with_capacity(position as usize + 16);
    kfs.extend_from_slice(&SEGMENT_MAGIC);
    kfs.extend_from_slice(&1u16.to_be_bytes());
    kfs.extend_from_slice(&0u16.to_be_bytes());
    kfs.extend_from_slice(&base_offset.to_be_bytes());
    kfs.extend_from_slice(&message_count.to_be_bytes());
    kfs.extend_from_slice(&created_ms.to_be_bytes());
    kfs.extend_from_slice(&0u32.to_be_bytes());
    for frame in frames {
        kfs.extend_from_slice(frame);
    }
    let body_crc = crc32c::crc32c(&kfs[SEGMENT_HEADER_LEN..]);
    kfs.extend_from_slice(&body_crc.to_be_bytes());
    kfs.extend_from_slice(&last_offset.to_be_bytes());
    kfs.extend_from_slice(&FOOTER_MAGIC);
    let index = SegmentIndex::for_batches(starts, DEFAULT_INDEX_INTERVAL).encode();
    Ok(EncodedSegment {
        base_offset,
        last_offset,
        kfs,
        index,
    })
}

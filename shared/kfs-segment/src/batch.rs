//! Kafka RecordBatch v2: the batch header, its verification, and its records.
//!
//! [`decode_batch`] takes one whole batch frame, checks its magic, CRC-32C, codec,
//! record count and offsets, decompresses it if needed, and returns every record,
//! borrowed from the frame (uncompressed) or from a reusable decompression buffer.
//! A batch either decodes completely or not at all.

use crate::compression::{self, Compression};
use crate::error::{DecodeError, DecodeErrorKind};
use crate::limits::DecodeLimits;
use crate::wire::Cursor;

/// Size of the fixed RecordBatch v2 header, up to and including the record count.
pub const BATCH_HEADER_LEN: usize = 61;
/// Bytes before `batchLength`'s coverage starts: baseOffset (8) + batchLength (4).
pub const BATCH_LENGTH_PREFIX: usize = 12;
/// Smallest valid `batchLength` (the header after the prefix, with no records).
pub const MIN_BATCH_LENGTH: i32 = (BATCH_HEADER_LEN - BATCH_LENGTH_PREFIX) as i32;
/// Offset within the batch where the CRC-covered bytes start (the attributes field).
pub const CRC_START: usize = 21;

const ATTR_TIMESTAMP_TYPE: i16 = 0x08;
const ATTR_TRANSACTIONAL: i16 = 0x10;
const ATTR_CONTROL: i16 = 0x20;

/// How a batch's record timestamps are to be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimestampType {
    /// The producer's timestamps: baseTimestamp + timestampDelta.
    CreateTime,
    /// The broker's append time: every record gets the batch's maxTimestamp.
    LogAppendTime,
}

/// The fixed header of a RecordBatch v2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Offset of the first record (rewritten by the broker).
    pub base_offset: i64,
    /// Bytes after the `batchLength` field.
    pub batch_length: i32,
    /// Partition leader epoch.
    pub partition_leader_epoch: i32,
    /// Format magic, always 2 here.
    pub magic: i8,
    /// CRC-32C of the batch from the attributes field to the end.
    pub crc: u32,
    /// Attribute bits: codec, timestamp type, transactional, control.
    pub attributes: i16,
    /// Offset of the last record relative to `base_offset`.
    pub last_offset_delta: i32,
    /// Timestamp of the first record (ms).
    pub base_timestamp: i64,
    /// Largest timestamp in the batch (ms), or the append time for LogAppendTime.
    pub max_timestamp: i64,
    /// Producer id (-1 when not idempotent).
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i16,
    /// First sequence number.
    pub base_sequence: i32,
    /// Number of records in the batch.
    pub record_count: i32,
}

impl BatchHeader {
    /// Parses the 61-byte header at the start of `frame`, checking nothing but length.
    pub(crate) fn parse(frame: &[u8], position: u64) -> Result<Self, DecodeError> {
        let mut cur = Cursor::new(frame, position);
        Ok(Self {
            base_offset: cur.i64("batch header")?,
            batch_length: cur.i32("batch header")?,
            partition_leader_epoch: cur.i32("batch header")?,
            magic: cur.u8("batch header")? as i8,
            crc: cur.u32("batch header")?,
            attributes: cur.i16("batch header")?,
            last_offset_delta: cur.i32("batch header")?,
            base_timestamp: cur.i64("batch header")?,
            max_timestamp: cur.i64("batch header")?,
            producer_id: cur.i64("batch header")?,
            producer_epoch: cur.i16("batch header")?,
            base_sequence: cur.i32("batch header")?,
            record_count: cur.i32("batch header")?,
        })
    }

    /// The batch's codec; fails for codec ids above 4.
    pub fn compression(&self) -> Result<Compression, DecodeErrorKind> {
        Compression::from_attributes(self.attributes)
    }

    /// Whether timestamps are CreateTime or LogAppendTime.
    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes & ATTR_TIMESTAMP_TYPE != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }

    /// True for transaction marker batches, which carry no data records.
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }

    /// True when the producer wrote the batch inside a transaction.
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    /// Offset of the last record: `base_offset + last_offset_delta`.
    pub fn last_offset(&self) -> Option<i64> {
        self.base_offset
            .checked_add(i64::from(self.last_offset_delta))
    }

    /// Total frame size: `12 + batch_length`.
    pub fn frame_len(&self) -> u64 {
        BATCH_LENGTH_PREFIX as u64 + self.batch_length.max(0) as u64
    }
}

/// One record header: a key and a nullable value.
///
/// Kafka's protocol calls the key a string, but no broker checks it: librdkafka and Go
/// clients send any bytes. The key is kept as sent; [`RecordHeader::key_text`] decodes it
/// as Kafka's Java consumer does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader<'a> {
    /// Header key, as sent (usually UTF-8, not always).
    pub key: &'a [u8],
    /// Header value; `None` is null, distinct from empty.
    pub value: Option<&'a [u8]>,
}

impl<'a> RecordHeader<'a> {
    /// The key as text, decoded as Kafka's Java consumer decodes it (UTF-8, each invalid
    /// sequence replaced by U+FFFD), with the raw bytes when that decoding lost
    /// something (`None` for a valid UTF-8 key).
    pub fn key_text(&self) -> (std::borrow::Cow<'a, str>, Option<&'a [u8]>) {
        match std::str::from_utf8(self.key) {
            Ok(text) => (std::borrow::Cow::Borrowed(text), None),
            Err(_) => (String::from_utf8_lossy(self.key), Some(self.key)),
        }
    }
}

/// One data record, borrowing its bytes from the batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    /// Absolute offset.
    pub offset: i64,
    /// Timestamp in Unix milliseconds (maxTimestamp for LogAppendTime batches).
    pub timestamp_ms: i64,
    /// Key; `None` is null, distinct from empty.
    pub key: Option<&'a [u8]>,
    /// Value; `None` is null (a tombstone), distinct from empty.
    pub value: Option<&'a [u8]>,
    /// Headers in their original order (duplicate keys kept).
    pub headers: Vec<RecordHeader<'a>>,
}

/// A decoded, verified batch.
#[derive(Debug, Clone)]
pub struct Batch<'a> {
    /// The batch header.
    pub header: BatchHeader,
    /// Absolute byte position of the batch in the segment file.
    pub position: u64,
    /// The batch codec.
    pub compression: Compression,
    /// Data records in offset order; empty for control batches.
    pub records: Vec<Record<'a>>,
    /// Size of the records section as stored (compressed size for compressed batches).
    pub stored_records_bytes: u64,
    /// Size of the records section after decompression.
    pub records_bytes: u64,
}

impl Batch<'_> {
    /// True for transaction marker batches, which carry no data records.
    pub fn is_control(&self) -> bool {
        self.header.is_control()
    }
}

/// A batch frame whose header, CRC-32C and codec are verified and whose records
/// section is decompressed, its records not decoded yet.
pub(crate) struct OpenBatch<'a> {
    /// The batch header.
    pub(crate) header: BatchHeader,
    /// The batch codec.
    pub(crate) compression: Compression,
    /// The records section, decompressed.
    data: &'a [u8],
    /// Where the records section starts in the file.
    origin: u64,
    /// Size of the records section as stored.
    stored_records_bytes: u64,
}

/// What visiting a batch's records found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Visited {
    /// Records decoded.
    pub(crate) records: u64,
    /// Offset of the first.
    pub(crate) first_offset: Option<i64>,
    /// Whether the visitor stopped before the end.
    pub(crate) stopped: bool,
}

/// Verifies one batch frame (`12 + batchLength` bytes) that starts at absolute
/// `position` up to its records: magic, CRC-32C, codec, counts; compressed records are
/// decompressed into `scratch`.
pub(crate) fn open_batch<'a>(
    frame: &'a [u8],
    position: u64,
    limits: &DecodeLimits,
    scratch: &'a mut Vec<u8>,
) -> Result<OpenBatch<'a>, DecodeError> {
    let header = BatchHeader::parse(frame, position)?;
    let fail = |at: u64, kind| DecodeError::at(position + at, kind).in_batch(header.base_offset);
    if header.frame_len() != frame.len() as u64 {
        return Err(fail(
            8,
            DecodeErrorKind::BatchLength {
                length: i64::from(header.batch_length),
                reason: format!("frame holds {} bytes", frame.len()),
            },
        ));
    }
    if header.magic != 2 {
        return Err(fail(16, DecodeErrorKind::BatchMagic(header.magic)));
    }
    let computed = crc32c::crc32c(&frame[CRC_START..]);
    if computed != header.crc {
        return Err(fail(
            17,
            DecodeErrorKind::BatchCrc {
                stored: header.crc,
                computed,
            },
        ));
    }
    let compression = header.compression().map_err(|kind| fail(21, kind))?;
    if header.record_count < 0 {
        return Err(fail(
            57,
            DecodeErrorKind::NegativeRecordCount(header.record_count),
        ));
    }
    if header.last_offset_delta < 0 {
        return Err(fail(
            23,
            DecodeErrorKind::OffsetDelta {
                delta: header.last_offset_delta,
                reason: "the batch's lastOffsetDelta is negative".into(),
            },
        ));
    }
    if header.last_offset().is_none() {
        return Err(fail(
            23,
            DecodeErrorKind::Overflow {
                what: "batch last offset",
            },
        ));
    }
    let stored = &frame[BATCH_HEADER_LEN..];
    let records_position = position + BATCH_HEADER_LEN as u64;
    let (records_data, origin) = if compression == Compression::None {
        (stored, records_position)
    } else {
        let cap = limits.decompressed_cap(stored.len() as u64);
        compression::decompress(compression, stored, cap, scratch)
            .map_err(|kind| fail(BATCH_HEADER_LEN as u64, kind))?;
        // Positions inside decompressed data are reported at the compressed blob.
        (scratch.as_slice(), records_position)
    };
    Ok(OpenBatch {
        header,
        compression,
        data: records_data,
        origin,
        stored_records_bytes: stored.len() as u64,
    })
}

impl<'a> OpenBatch<'a> {
    /// Decodes the records in order, handing each to `each` (which returns `false` to
    /// stop), and checks them against the header (count, offset deltas, no trailing
    /// bytes). A record is handed as soon as it is decoded: a later one may still
    /// fail the batch. The record's list of headers is used again for the next record
    /// unless `each` takes it.
    pub(crate) fn visit(
        &self,
        mut each: impl FnMut(&mut Record<'a>) -> bool,
    ) -> Result<Visited, DecodeError> {
        decode_records(
            &self.header,
            self.data,
            self.origin,
            self.compression != Compression::None,
            &mut each,
        )
        .map_err(|e| e.in_batch(self.header.base_offset))
    }
}

/// Decodes and verifies one batch frame (`12 + batchLength` bytes) that starts at
/// absolute `position`, its records in a list. Compressed records are decompressed into
/// `scratch`.
pub(crate) fn decode_batch<'a>(
    frame: &'a [u8],
    position: u64,
    limits: &DecodeLimits,
    scratch: &'a mut Vec<u8>,
) -> Result<Batch<'a>, DecodeError> {
    let open = open_batch(frame, position, limits, scratch)?;
    // Never trust the declared count for allocation: bound it by the bytes present.
    let capacity = (open.header.record_count as usize).min(open.data.len() / MIN_RECORD_LEN);
    let mut records = Vec::with_capacity(capacity);
    open.visit(|record| {
        records.push(Record {
            headers: std::mem::take(&mut record.headers),
            ..*record
        });
        true
    })?;
    Ok(Batch {
        header: open.header,
        position,
        compression: open.compression,
        records: if open.header.is_control() {
            Vec::new()
        } else {
            records
        },
        stored_records_bytes: open.stored_records_bytes,
        records_bytes: open.data.len() as u64,
    })
}

/// Smallest possible encoded record: length, attributes, timestampDelta, offsetDelta,
/// keyLength, valueLength and headerCount, one byte each.
const MIN_RECORD_LEN: usize = 7;

fn decode_records<'a>(
    header: &BatchHeader,
    data: &'a [u8],
    origin: u64,
    compressed: bool,
    each: &mut dyn FnMut(&mut Record<'a>) -> bool,
) -> Result<Visited, DecodeError> {
    let mut cur = Cursor::new(data, origin);
    let mut visited = Visited {
        records: 0,
        first_offset: None,
        stopped: false,
    };
    let mut previous_delta: Option<i32> = None;
    let fixed_position = |cur: &Cursor<'_>| if compressed { origin } else { cur.position() };
    let mut headers = Vec::new();
    for index in 0..header.record_count {
        if cur.remaining() == 0 {
            return Err(DecodeError::at(
                fixed_position(&cur),
                DecodeErrorKind::RecordCountMismatch {
                    declared: header.record_count,
                    found: index,
                },
            ));
        }
        let mut record = decode_record(header, &mut cur, previous_delta, headers)
            .map_err(|e| if compressed { relocate(e, origin) } else { e })?;
        previous_delta = Some((record.offset - header.base_offset) as i32);
        visited.records += 1;
        visited.first_offset.get_or_insert(record.offset);
        if !each(&mut record) {
            visited.stopped = true;
            return Ok(visited);
        }
        // The list again for the next record (empty if `each` took it): no allocation
        // per record for its headers.
        headers = record.headers;
        headers.clear();
    }
    if cur.remaining() != 0 {
        return Err(DecodeError::at(
            fixed_position(&cur),
            DecodeErrorKind::TrailingRecordBytes {
                count: cur.remaining() as u64,
                declared: header.record_count,
            },
        ));
    }
    Ok(visited)
}

/// Errors inside decompressed data point at the compressed blob, since positions in
/// the decompressed stream do not exist in the file.
fn relocate(mut err: DecodeError, origin: u64) -> DecodeError {
    err.position = origin;
    err
}

/// Decodes the record at `cur`, its headers into `headers` (empty; its capacity is
/// reused).
fn decode_record<'a>(
    header: &BatchHeader,
    cur: &mut Cursor<'a>,
    previous_delta: Option<i32>,
    mut headers: Vec<RecordHeader<'a>>,
) -> Result<Record<'a>, DecodeError> {
    let length_at = cur.position();
    let length = cur.varint("record length")?;
    if length < 0 || length as usize > cur.remaining() {
        return Err(DecodeError::at(
            length_at,
            DecodeErrorKind::InvalidLength {
                field: "record",
                length: i64::from(length),
                reason: if length < 0 {
                    "negative"
                } else {
                    "points past the end of the records section"
                },
            },
        ));
    }
    let body_at = cur.position();
    let mut body = Cursor::new(cur.take(length as usize, "record")?, body_at);
    let _attributes = body.u8("record attributes")?;
    let timestamp_delta = body.varlong("record timestampDelta")?;
    let delta_at = body.position();
    let offset_delta = body.varint("record offsetDelta")?;
    let delta_error = |reason: String| {
        DecodeError::at(
            delta_at,
            DecodeErrorKind::OffsetDelta {
                delta: offset_delta,
                reason,
            },
        )
    };
    if offset_delta < 0 || offset_delta > header.last_offset_delta {
        return Err(delta_error(format!(
            "outside the batch's range 0..={}",
            header.last_offset_delta
        )));
    }
    if let Some(previous) = previous_delta
        && offset_delta <= previous
    {
        return Err(delta_error(format!(
            "does not follow the previous record's delta {previous}"
        )));
    }
    let key = body.nullable_bytes("record key")?;
    let value = body.nullable_bytes("record value")?;
    decode_headers(&mut body, &mut headers)?;
    if body.remaining() != 0 {
        return Err(DecodeError::at(
            length_at,
            DecodeErrorKind::RecordLength {
                declared: i64::from(length),
                used: (length as usize - body.remaining()) as i64,
            },
        ));
    }
    let offset = header.base_offset + i64::from(offset_delta);
    let timestamp_ms = match header.timestamp_type() {
        TimestampType::LogAppendTime => header.max_timestamp,
        // Kafka's own arithmetic (Java's `long`, which wraps): a producer computes
        // the delta as `timestamp - baseTimestamp`, so a batch holding CreateTimes at
        // both ends of i64 is valid and reads back exactly.
        TimestampType::CreateTime => header.base_timestamp.wrapping_add(timestamp_delta),
    };
    Ok(Record {
        offset,
        timestamp_ms,
        key,
        value,
        headers,
    })
}

/// Decodes a record's header count and headers from `body` into `headers`.
fn decode_headers<'a>(
    body: &mut Cursor<'a>,
    headers: &mut Vec<RecordHeader<'a>>,
) -> Result<(), DecodeError> {
    let count_at = body.position();
    let header_count = body.varint("record header count")?;
    // Each header needs at least two bytes (key length, value length).
    if header_count < 0 || header_count as usize > body.remaining() / 2 {
        return Err(DecodeError::at(
            count_at,
            DecodeErrorKind::InvalidLength {
                field: "record header count",
                length: i64::from(header_count),
                reason: if header_count < 0 {
                    "negative"
                } else {
                    "more headers than the record has bytes for"
                },
            },
        ));
    }
    headers.reserve(header_count as usize);
    for _ in 0..header_count {
        let key_at = body.position();
        let key = body.nullable_bytes("record header key")?.ok_or_else(|| {
            DecodeError::at(
                key_at,
                DecodeErrorKind::InvalidLength {
                    field: "record header key",
                    length: -1,
                    reason: "header keys cannot be null",
                },
            )
        })?;
        let value = body.nullable_bytes("record header value")?;
        headers.push(RecordHeader { key, value });
    }
    Ok(())
}

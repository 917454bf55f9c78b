//! The one error type of the codec: where in the input a problem is, and what it is.
//!
//! Every decoding failure names the byte position in the file (absolute, header
//! included), the base offset of the batch it belongs to when that is known, and a
//! reason worded for an operator. Errors are classified: damaged input is permanent
//! (retrying reads the same bytes), while an I/O error of the underlying reader may be
//! retryable.

use std::fmt;

/// A segment or index could not be decoded or failed verification.
#[derive(Debug, thiserror::Error)]
pub struct DecodeError {
    /// Absolute byte position in the file where the problem was found.
    pub position: u64,
    /// Base offset of the batch being decoded, when known.
    pub batch_base_offset: Option<i64>,
    /// What is wrong.
    #[source]
    pub kind: DecodeErrorKind,
}

impl DecodeError {
    /// Builds an error at `position`, outside any batch.
    pub fn at(position: u64, kind: DecodeErrorKind) -> Self {
        Self {
            position,
            batch_base_offset: None,
            kind,
        }
    }

    /// Attaches the base offset of the batch being decoded.
    pub fn in_batch(mut self, base_offset: i64) -> Self {
        self.batch_base_offset = Some(base_offset);
        self
    }

    /// True when the same read may succeed later (an I/O error of the reader other than
    /// end of input); false for damaged or invalid bytes, which never heal.
    pub fn is_retryable(&self) -> bool {
        match &self.kind {
            DecodeErrorKind::Io(err) => !matches!(err.kind(), std::io::ErrorKind::UnexpectedEof),
            _ => false,
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at byte {}", self.position)?;
        if let Some(base) = self.batch_base_offset {
            write!(f, " (batch with base offset {base})")?;
        }
        write!(f, ": {}", self.kind)
    }
}

/// The reason a segment or index failed to decode.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeErrorKind {
    /// The input ends before a structure is complete.
    #[error("input ends inside the {what}: {needed} more bytes needed, {available} present")]
    Truncated {
        /// The structure being read.
        what: &'static str,
        /// Bytes the structure needs.
        needed: u64,
        /// Bytes that were left.
        available: u64,
    },
    /// A magic number does not match.
    #[error(
        "{what} magic is {found:02x?}, expected {expected:02x?} (not a KafScale file, or damaged)"
    )]
    BadMagic {
        /// Which magic.
        what: &'static str,
        /// The expected bytes.
        expected: [u8; 4],
        /// The bytes found.
        found: [u8; 4],
    },
    /// A format version this decoder does not know.
    #[error("{what} version {found} is not supported (only 1)")]
    UnsupportedVersion {
        /// Which version field.
        what: &'static str,
        /// The version found.
        found: u16,
    },
    /// Segment header flags must be 0.
    #[error("segment header flags are {0:#06x}, expected 0")]
    UnsupportedFlags(u16),
    /// The footer CRC does not match the body.
    #[error("body CRC-32C mismatch: footer says {stored:#010x}, body computes to {computed:#010x}")]
    BodyCrc {
        /// CRC stored in the footer.
        stored: u32,
        /// CRC computed over the body.
        computed: u32,
    },
    /// A batch CRC does not match its bytes.
    #[error("batch CRC-32C mismatch: batch says {stored:#010x}, bytes compute to {computed:#010x}")]
    BatchCrc {
        /// CRC stored in the batch header.
        stored: u32,
        /// CRC computed over the batch.
        computed: u32,
    },
    /// Only RecordBatch v2 (magic 2) is supported.
    #[error("batch magic is {0}, only record batch v2 (magic 2) is supported")]
    BatchMagic(i8),
    /// A batch length outside what the format or the limits allow.
    #[error("batch length {length} is invalid: {reason}")]
    BatchLength {
        /// The declared length.
        length: i64,
        /// Why it is invalid.
        reason: String,
    },
    /// The codec bits name no known codec.
    #[error("unknown compression codec {0} in batch attributes")]
    UnknownCodec(u8),
    /// The compressed records could not be decompressed.
    #[error("{codec} decompression failed: {reason}")]
    Decompress {
        /// Codec name.
        codec: &'static str,
        /// What the decompressor reported.
        reason: String,
    },
    /// Decompressed output exceeds the configured cap (a compression bomb, or a limit set too low).
    #[error(
        "{codec} records expand past the limit of {limit} bytes (compressed size {compressed}); raise DecodeLimits if this data is legitimate"
    )]
    DecompressedTooLarge {
        /// Codec name.
        codec: &'static str,
        /// The cap that was hit.
        limit: u64,
        /// Size of the compressed input.
        compressed: u64,
    },
    /// The batch's record count is negative.
    #[error("batch record count {0} is negative")]
    NegativeRecordCount(i32),
    /// The records section holds fewer records than declared.
    #[error("batch declares {declared} records but its records section ends after {found}")]
    RecordCountMismatch {
        /// Count in the batch header.
        declared: i32,
        /// Records actually decoded.
        found: i32,
    },
    /// Bytes remain in a records section after the declared records.
    #[error("{count} bytes left over after the batch's {declared} declared records")]
    TrailingRecordBytes {
        /// Leftover bytes.
        count: u64,
        /// Count in the batch header.
        declared: i32,
    },
    /// A varint runs past its maximum length.
    #[error("{field} varint is longer than {max_bytes} bytes")]
    VarintOverflow {
        /// Field being read.
        field: &'static str,
        /// Maximum encoded length.
        max_bytes: usize,
    },
    /// A length field is negative (other than -1 where null is allowed) or points past the data.
    #[error("{field} length {length} is invalid: {reason}")]
    InvalidLength {
        /// Field being read.
        field: &'static str,
        /// The declared length.
        length: i64,
        /// Why it is invalid.
        reason: &'static str,
    },
    /// A record's length prefix disagrees with its fields.
    #[error("record length prefix says {declared} bytes but its fields take {used}")]
    RecordLength {
        /// Declared record length.
        declared: i64,
        /// Bytes the fields used.
        used: i64,
    },
    /// An offset delta is out of order or out of the batch's range.
    #[error("record offset delta {delta} is invalid: {reason}")]
    OffsetDelta {
        /// The offset delta.
        delta: i32,
        /// Why it is invalid.
        reason: String,
    },
    /// Offsets go backwards or repeat between batches.
    #[error(
        "batch base offset {offset} does not follow the previous batch's last offset {previous}"
    )]
    OffsetNotIncreasing {
        /// This batch's base offset.
        offset: i64,
        /// Previous batch's last offset.
        previous: i64,
    },
    /// An offset or timestamp computation overflows i64.
    #[error("{what} overflows a 64-bit integer")]
    Overflow {
        /// What overflowed.
        what: &'static str,
    },
    /// The segment header and the body disagree.
    #[error("segment header says {header} but the body has {found}")]
    HeaderMismatch {
        /// What the header claims.
        header: String,
        /// What the body holds.
        found: String,
    },
    /// The footer's last offset disagrees with the last batch.
    #[error("footer last offset is {footer} but the last batch ends at offset {decoded}")]
    FooterLastOffset {
        /// Offset in the footer.
        footer: i64,
        /// Last offset decoded from the batches.
        decoded: i64,
    },
    /// Bytes after the last batch that are too short to be a batch.
    #[error("{count} stray bytes between the last batch and the footer")]
    StrayBodyBytes {
        /// Number of stray bytes.
        count: u64,
    },
    /// The index is inconsistent with itself or with its segment.
    #[error("index entry {entry} is invalid: {reason}")]
    IndexEntry {
        /// Entry number (0-based).
        entry: u64,
        /// Why it is invalid.
        reason: String,
    },
    /// The index header is invalid.
    #[error("index header is invalid: {0}")]
    IndexHeader(String),
    /// The reader failed.
    #[error("read failed: {0}")]
    Io(#[from] std::io::Error),
}

/// A segment or index could not be encoded from the given records.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// A batch needs at least one record.
    #[error("a batch needs at least one record")]
    EmptyBatch,
    /// Record offsets must strictly increase within and across batches.
    #[error("record offset {offset} does not follow {previous}")]
    OffsetOrder {
        /// The offending offset.
        offset: i64,
        /// The offset before it.
        previous: i64,
    },
    /// A value does not fit the field that carries it.
    #[error("{what} does not fit its field")]
    TooLarge {
        /// What does not fit.
        what: &'static str,
    },
    /// A segment needs at least one batch.
    #[error("a segment needs at least one batch")]
    EmptySegment,
    /// The compressor failed.
    #[error("{codec} compression failed: {reason}")]
    Compress {
        /// Codec name.
        codec: &'static str,
        /// What the compressor reported.
        reason: String,
    },
}

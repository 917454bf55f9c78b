//! The envelope of a `.kfs` segment: its 32-byte header and 16-byte footer, their
//! magic numbers and lengths, each parsed and checked on its own.

use crate::error::{DecodeError, DecodeErrorKind};
use crate::wire::Cursor;

/// Segment header magic, `KAFS`.
pub const SEGMENT_MAGIC: [u8; 4] = *b"KAFS";
/// Segment footer magic, `END!`.
pub const FOOTER_MAGIC: [u8; 4] = *b"END!";
/// Size of the segment header.
pub const SEGMENT_HEADER_LEN: usize = 32;
/// Size of the segment footer.
pub const SEGMENT_FOOTER_LEN: usize = 16;

/// The 32-byte header of a `.kfs` segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Format version (1).
    pub version: u16,
    /// Flags (0).
    pub flags: u16,
    /// Base offset of the first batch.
    pub base_offset: i64,
    /// Sum of the batches' record counts.
    pub message_count: i32,
    /// Flush time, Unix milliseconds.
    pub created_ms: i64,
}

impl SegmentHeader {
    /// Parses and checks magic, version and flags.
    pub fn parse(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut cur = Cursor::new(bytes, 0);
        let magic = cur.magic("segment header")?;
        if magic != SEGMENT_MAGIC {
            return Err(DecodeError::at(
                0,
                DecodeErrorKind::BadMagic {
                    what: "segment header",
                    expected: SEGMENT_MAGIC,
                    found: magic,
                },
            ));
        }
        let version = cur.u16("segment header")?;
        if version != 1 {
            return Err(DecodeError::at(
                4,
                DecodeErrorKind::UnsupportedVersion {
                    what: "segment",
                    found: version,
                },
            ));
        }
        let flags = cur.u16("segment header")?;
        if flags != 0 {
            return Err(DecodeError::at(6, DecodeErrorKind::UnsupportedFlags(flags)));
        }
        let base_offset = cur.i64("segment header")?;
        let message_count = cur.i32("segment header")?;
        let created_ms = cur.i64("segment header")?;
        let _reserved = cur.u32("segment header")?;
        Ok(Self {
            version,
            flags,
            base_offset,
            message_count,
            created_ms,
        })
    }
}

/// The 16-byte footer of a `.kfs` segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentFooter {
    /// CRC-32C of the body.
    pub body_crc: u32,
    /// Offset of the last record.
    pub last_offset: i64,
}

impl SegmentFooter {
    /// Parses the footer that starts at absolute `position`, checking its magic.
    pub(crate) fn parse(bytes: &[u8], position: u64) -> Result<Self, DecodeError> {
        let mut cur = Cursor::new(bytes, position);
        let body_crc = cur.u32("segment footer")?;
        let last_offset = cur.i64("segment footer")?;
        let magic = cur.magic("segment footer")?;
        if magic != FOOTER_MAGIC {
            return Err(DecodeError::at(
                position + 12,
                DecodeErrorKind::BadMagic {
                    what: "segment footer",
                    expected: FOOTER_MAGIC,
                    found: magic,
                },
            ));
        }
        Ok(Self {
            body_crc,
            last_offset,
        })
    }
}

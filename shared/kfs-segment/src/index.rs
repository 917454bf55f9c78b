//! The `.index` file: a sparse map from batch base offsets to byte positions in the
//! `.kfs`, and its check against the segment it belongs to.

use crate::envelope::SEGMENT_HEADER_LEN;
use crate::error::{DecodeError, DecodeErrorKind};
use crate::wire::Cursor;

/// Index header magic, `IDX\0`.
pub const INDEX_MAGIC: [u8; 4] = *b"IDX\0";
/// Size of the index header.
pub const INDEX_HEADER_LEN: usize = 16;
/// Size of one index entry.
pub const INDEX_ENTRY_LEN: usize = 12;
/// The interval the broker writes (messages between entries).
pub const DEFAULT_INDEX_INTERVAL: i32 = 100;

/// One index entry: a batch's base offset and its absolute position in the `.kfs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    /// Base offset of the batch.
    pub offset: i64,
    /// Absolute byte position of the batch in the `.kfs` (header included).
    pub position: i32,
}

/// A decoded `.index` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentIndex {
    /// Messages between entries, as written by the broker.
    pub interval: i32,
    /// Entries in file order.
    pub entries: Vec<IndexEntry>,
}

impl SegmentIndex {
    /// Decodes and checks an index: magic, version, entry count against the file size,
    /// offsets and positions strictly increasing, the first entry at the first batch.
    pub fn decode(data: &[u8]) -> Result<Self, DecodeError> {
        let mut cur = Cursor::new(data, 0);
        let magic = cur.magic("index header")?;
        if magic != INDEX_MAGIC {
            return Err(DecodeError::at(
                0,
                DecodeErrorKind::BadMagic {
                    what: "index header",
                    expected: INDEX_MAGIC,
                    found: magic,
                },
            ));
        }
        let version = cur.u16("index header")?;
        if version != 1 {
            return Err(DecodeError::at(
                4,
                DecodeErrorKind::UnsupportedVersion {
                    what: "index",
                    found: version,
                },
            ));
        }
        let count = cur.i32("index header")?;
        let interval = cur.i32("index header")?;
        let _reserved = cur.u16("index header")?;
        let entries_len = (data.len() - INDEX_HEADER_LEN) as u64;
        if count < 0 || count as u64 * INDEX_ENTRY_LEN as u64 != entries_len {
            return Err(DecodeError::at(
                6,
                DecodeErrorKind::IndexHeader(format!(
                    "entry count {count} does not match the {entries_len} bytes of entries"
                )),
            ));
        }
        let mut entries = Vec::with_capacity(count as usize);
        for i in 0..count as u64 {
            let at = cur.position();
            let entry = IndexEntry {
                offset: cur.i64("index entry")?,
                position: cur.i32("index entry")?,
            };
            let fail = |reason: String| {
                DecodeError::at(at, DecodeErrorKind::IndexEntry { entry: i, reason })
            };
            match entries.last() {
                None if entry.position != SEGMENT_HEADER_LEN as i32 => {
                    return Err(fail(format!(
                        "the first entry must point at byte {SEGMENT_HEADER_LEN}, not {}",
                        entry.position
                    )));
                }
                Some(prev @ IndexEntry { .. })
                    if entry.offset <= prev.offset || entry.position <= prev.position =>
                {
                    return Err(fail(format!(
                        "offset {} at byte {} does not follow offset {} at byte {}",
                        entry.offset, entry.position, prev.offset, prev.position
                    )));
                }
                _ => {}
            }
            entries.push(entry);
        }
        Ok(Self { interval, entries })
    }

    /// Encodes the index as the broker writes it.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(INDEX_HEADER_LEN + self.entries.len() * INDEX_ENTRY_LEN);
        out.extend_from_slice(&INDEX_MAGIC);
        out.extend_from_slice(&1u16.to_be_bytes());
        out.extend_from_slice(&(self.entries.len() as i32).to_be_bytes());
        out.extend_from_slice(&self.interval.to_be_bytes());
        out.extend_from_slice(&0u16.to_be_bytes());
        for entry in &self.entries {
            out.extend_from_slice(&entry.offset.to_be_bytes());
            out.extend_from_slice(&entry.position.to_be_bytes());
        }
        out
    }

    /// Builds the index the broker writes for batches given as
    /// `(base offset, absolute position, record count)`: the first batch always gets an
    /// entry, later ones once at least `interval` messages passed since the last entry.
    pub fn for_batches(batches: impl IntoIterator<Item = (i64, u64, i32)>, interval: i32) -> Self {
        let mut entries = Vec::new();
        let mut since_entry: i64 = 0;
        for (offset, position, record_count) in batches {
            if entries.is_empty() || since_entry >= i64::from(interval) {
                entries.push(IndexEntry {
                    offset,
                    position: position as i32,
                });
                since_entry = 0;
            }
            since_entry += i64::from(record_count);
        }
        Self { interval, entries }
    }

    /// Checks the index against the batch starts of its segment, given as
    /// `(base offset, absolute position)` in order: every entry must land on a batch
    /// start with the same base offset.
    pub fn check_against(&self, batch_starts: &[(i64, u64)]) -> Result<(), DecodeError> {
        if self.entries.is_empty() && !batch_starts.is_empty() {
            return Err(DecodeError::at(
                6,
                DecodeErrorKind::IndexHeader(
                    "no entries, but the first batch always has one".into(),
                ),
            ));
        }
        for (i, entry) in self.entries.iter().enumerate() {
            let at = (INDEX_HEADER_LEN + i * INDEX_ENTRY_LEN) as u64;
            let fail = |reason: String| {
                DecodeError::at(
                    at,
                    DecodeErrorKind::IndexEntry {
                        entry: i as u64,
                        reason,
                    },
                )
            };
            let position = u64::try_from(entry.position)
                .map_err(|_| fail(format!("negative position {}", entry.position)))?;
            match batch_starts.binary_search_by_key(&position, |&(_, p)| p) {
                Ok(found) if batch_starts[found].0 == entry.offset => {}
                Ok(found) => {
                    return Err(fail(format!(
                        "says offset {} at byte {position}, but the batch there starts at offset {}",
                        entry.offset, batch_starts[found].0
                    )));
                }
                Err(_) => {
                    return Err(fail(format!(
                        "byte {position} (offset {}) is not the start of a batch in the segment",
                        entry.offset
                    )));
                }
            }
        }
        Ok(())
    }
}

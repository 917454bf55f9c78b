//! Deletion vectors (Iceberg v3 merge-on-read deletes): the positions of a data file's
//! deleted rows as a `deletion-vector-v1` blob (a 64-bit Roaring bitmap in the portable
//! format, framed by its length, magic and CRC-32), in a Puffin file whose footer
//! names each blob's data file and cardinality; and reading a blob back, another
//! engine's too ([`read_deletion_vector`]: run containers as well, every length,
//! order and the CRC checked, never more positions than its data file has rows).
//! Pure bytes: writing the file and recording it in a manifest are the caller's.
//!
//! The bitmap: the count of 32-bit buckets (u64 LE), then for each bucket in ascending
//! order its key (the positions' high 32 bits, u32 LE, at most 2^31 - 1 as Java and
//! pyiceberg require) and a standard 32-bit Roaring bitmap of the low 32 bits (array
//! containers up to 4,096 values, bitmap containers above; no run containers).

use std::collections::{BTreeMap, BTreeSet};

use iceberg::spec::{DataContentType, DataFile, DataFileBuilder, DataFileFormat, Struct};

/// Magic of a Puffin file.
const PUFFIN_MAGIC: &[u8; 4] = b"PFA1";
/// Magic of a deletion vector (Java's 1681511377, little-endian).
const VECTOR_MAGIC: [u8; 4] = [0xD1, 0xD3, 0x39, 0x64];
/// The cookie of a 32-bit Roaring bitmap without run containers.
const SERIAL_COOKIE_NO_RUNCONTAINER: u32 = 12_346;
/// The cookie (low 16 bits) of a 32-bit Roaring bitmap with run containers.
const SERIAL_COOKIE: u32 = 12_347;
/// Below this many containers a bitmap with run containers has no offsets.
const NO_OFFSET_THRESHOLD: usize = 4;
/// Most values of an array container.
const ARRAY_MAX: usize = 4_096;
/// The `_pos` metadata column the blobs describe.
const POS_FIELD_ID: i32 = 2_147_483_645;
/// The highest bucket key readers take (Java's signed int).
const MAX_KEY: u64 = i32::MAX as u64;

/// Why a deletion vector cannot be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VectorError {
    /// A position is negative.
    #[error("{file}: negative position {position}")]
    Position {
        /// The data file.
        file: String,
        /// The position.
        position: i64,
    },
    /// A vector deletes nothing.
    #[error("{0}: a deletion vector must delete a row")]
    Empty(String),
    /// A blob that is no deletion vector.
    #[error("{file}: deletion vector, at byte {at}: {reason}")]
    Malformed {
        /// The data file.
        file: String,
        /// Where in the blob.
        at: usize,
        /// What is wrong.
        reason: String,
    },
    /// A vector deleting more rows than its data file has.
    #[error("{file}: a deletion vector of more than the file's {limit} rows")]
    TooMany {
        /// The data file.
        file: String,
        /// Its rows.
        limit: u64,
    },
}

/// Where a deletion vector sits in its Puffin file: what its manifest entry records
/// (`content_offset`, `content_size_in_bytes`, `referenced_data_file`, and the
/// cardinality as `record_count`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VectorBlob {
    /// The data file whose rows it deletes.
    pub referenced_data_file: String,
    /// The blob's offset in the Puffin file.
    pub offset: u64,
    /// The blob's length.
    pub length: u64,
    /// The rows it deletes.
    pub cardinality: u64,
}

/// The `deletion-vector-v1` blob of `positions` (of `file`, for errors).
pub fn deletion_vector(file: &str, positions: &BTreeSet<i64>) -> Result<Vec<u8>, VectorError> {
    if positions.is_empty() {
        return Err(VectorError::Empty(file.to_owned()));
    }
    let mut buckets: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for &position in positions {
        // Every non-negative i64 is below 2^63, so its key is at most 2^31 - 1.
        let Some(unsigned) = u64::try_from(position).ok().filter(|p| p >> 32 <= MAX_KEY) else {
            return Err(VectorError::Position {
                file: file.to_owned(),
                position,
            });
        };
        // Both halves fit: the key is at most 2^31 - 1, the low half 32 bits.
        buckets
            .entry((unsigned >> 32) as u32)
            .or_default()
            .push(unsigned as u32);
    }
    let mut vector = VECTOR_MAGIC.to_vec();
    vector.extend_from_slice(&(buckets.len() as u64).to_le_bytes());
    for (key, values) in &buckets {
        vector.extend_from_slice(&key.to_le_bytes());
        roaring32(values, &mut vector);
    }
    let mut blob = Vec::with_capacity(vector.len() + 8);
    blob.extend_from_slice(&(vector.len() as u32).to_be_bytes());
    blob.extend_from_slice(&vector);
    blob.extend_from_slice(&crc32fast::hash(&vector).to_be_bytes());
    Ok(blob)
}

/// Appends the portable 32-bit Roaring bitmap of `values` (ascending, distinct).
fn roaring32(values: &[u32], out: &mut Vec<u8>) {
    let mut containers: BTreeMap<u16, Vec<u16>> = BTreeMap::new();
    for value in values {
        containers
            .entry((value >> 16) as u16)
            .or_default()
            .push(*value as u16);
    }
    let start = out.len();
    out.extend_from_slice(&SERIAL_COOKIE_NO_RUNCONTAINER.to_le_bytes());
    out.extend_from_slice(&(containers.len() as u32).to_le_bytes());
    for (key, low) in &containers {
        out.extend_from_slice(&key.to_le_bytes());
        out.extend_from_slice(&((low.len() - 1) as u16).to_le_bytes());
    }
    let mut offset = 8 + 8 * containers.len();
    for low in containers.values() {
        out.extend_from_slice(&(offset as u32).to_le_bytes());
        offset += container_bytes(low.len());
    }
    for low in containers.values() {
        if low.len() <= ARRAY_MAX {
            for value in low {
                out.extend_from_slice(&value.to_le_bytes());
            }
        } else {
            let mut words = [0u64; 1024];
            for value in low {
                words[usize::from(*value) / 64] |= 1 << (value % 64);
            }
            for word in words {
                out.extend_from_slice(&word.to_le_bytes());
            }
        }
    }
    debug_assert_eq!(out.len() - start, offset);
}

/// The bytes of a container of `cardinality` values.
fn container_bytes(cardinality: usize) -> usize {
    if cardinality <= ARRAY_MAX {
        2 * cardinality
    } else {
        8 * 1024
    }
}

/// The positions the `deletion-vector-v1` blob `blob` of the data file `file`
/// deletes, ascending; refuses a blob whose framing, CRC, bitmap or order is broken
/// (naming the byte), and one deleting more than `max_positions` (the data file's
/// rows), before it takes memory for them.
pub fn read_deletion_vector(
    file: &str,
    blob: &[u8],
    max_positions: u64,
) -> Result<Vec<i64>, VectorError> {
    let mut framing = Cursor::new(file, blob, 0);
    let length = u32::from_be_bytes(framing.array()?) as usize;
    if blob.len().checked_sub(8) != Some(length) {
        return Err(framing.fail(
            0,
            format!(
                "its length says {length} bytes of vector, the blob holds {}",
                blob.len()
            ),
        ));
    }
    let vector = &blob[4..4 + length];
    let crc = u32::from_be_bytes(Cursor::new(file, &blob[4 + length..], 4 + length).array()?);
    if crc != crc32fast::hash(vector) {
        return Err(framing.fail(4 + length, "the CRC does not match".into()));
    }
    let mut at = Cursor::new(file, vector, 4);
    if at.array::<4>()? != VECTOR_MAGIC {
        return Err(at.fail(0, "no deletion vector magic".into()));
    }
    let buckets = u64::from_le_bytes(at.array()?);
    let mut positions = Vec::new();
    let mut previous: Option<u32> = None;
    for _ in 0..buckets {
        let key_at = at.position();
        let key = u32::from_le_bytes(at.array()?);
        if u64::from(key) > MAX_KEY || previous.is_some_and(|p| key <= p) {
            return Err(at.fail(key_at, format!("bucket key {key} out of order or range")));
        }
        previous = Some(key);
        read_roaring32(&mut at, u64::from(key) << 32, &mut positions, max_positions)?;
    }
    if at.left() > 0 {
        return Err(at.fail(
            at.position(),
            format!("{} bytes after the bitmap", at.left()),
        ));
    }
    Ok(positions)
}

/// Reads one portable 32-bit Roaring bitmap at `at`, its values under `high`, onto
/// `out` (at most `max` in all).
fn read_roaring32(
    at: &mut Cursor<'_>,
    high: u64,
    out: &mut Vec<i64>,
    max: u64,
) -> Result<(), VectorError> {
    let start = at.position();
    let cookie = u32::from_le_bytes(at.array()?);
    let (count, runs) = if cookie == SERIAL_COOKIE_NO_RUNCONTAINER {
        (u32::from_le_bytes(at.array()?) as usize, None)
    } else if cookie & 0xFFFF == SERIAL_COOKIE {
        let count = (cookie >> 16) as usize + 1;
        (count, Some(at.take(count.div_ceil(8))?))
    } else {
        return Err(at.fail(start, format!("no Roaring cookie ({cookie})")));
    };
    if count > 1 << 16 {
        return Err(at.fail(start, format!("{count} containers")));
    }
    let header = at.take(4 * count)?;
    let offsets = match runs.is_none() || count >= NO_OFFSET_THRESHOLD {
        true => Some(at.take(4 * count)?),
        false => None,
    };
    let u16_of = |bytes: &[u8], i: usize| u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]);
    let mut previous: Option<u16> = None;
    for c in 0..count {
        let (key, cardinality) = (
            u16_of(header, 2 * c),
            usize::from(u16_of(header, 2 * c + 1)) + 1,
        );
        if previous.is_some_and(|p| key <= p) {
            return Err(at.fail(start, format!("container key {key} out of order")));
        }
        previous = Some(key);
        if let Some(offsets) = offsets {
            let said = u32::from_le_bytes([
                offsets[4 * c],
                offsets[4 * c + 1],
                offsets[4 * c + 2],
                offsets[4 * c + 3],
            ]);
            if said as usize != at.position() - start {
                return Err(at.fail(
                    at.position(),
                    format!("container {c} is not where its offset ({said}) says"),
                ));
            }
        }
        if (out.len() + cardinality) as u64 > max {
            return Err(VectorError::TooMany {
                file: at.file.to_owned(),
                limit: max,
            });
        }
        let base = high | u64::from(key) << 16;
        let is_run = runs.is_some_and(|bits| bits[c / 8] >> (c % 8) & 1 == 1);
        let values = match (is_run, cardinality <= ARRAY_MAX) {
            (true, _) => run_container(at, cardinality)?,
            (false, true) => {
                let bytes = at.take(2 * cardinality)?;
                (0..cardinality).map(|i| u16_of(bytes, i)).collect()
            }
            (false, false) => {
                let words = at.take(8 * 1024)?;
                (0..1 << 16)
                    .filter(|v: &usize| words[v / 8] >> (v % 8) & 1 == 1)
                    .map(|v| v as u16)
                    .collect::<Vec<u16>>()
            }
        };
        if values.len() != cardinality || values.windows(2).any(|w| w[0] >= w[1]) {
            return Err(at.fail(at.position(), format!("container {c} holds {} values out of order or not the {cardinality} its header says", values.len())));
        }
        // Positions are below 2^63: the bucket key is at most 2^31 - 1.
        out.extend(values.into_iter().map(|low| (base | u64::from(low)) as i64));
    }
    Ok(())
}

/// The values of a run container at `at`: its runs (start, length - 1), ascending,
/// apart, each within the container, `cardinality` values in all (its header's: a
/// run container's runs may claim no more, so it never inflates past 65,536 values).
fn run_container(at: &mut Cursor<'_>, cardinality: usize) -> Result<Vec<u16>, VectorError> {
    let runs = usize::from(u16::from_le_bytes(at.array()?));
    let pairs = at.take(4 * runs)?;
    let mut values: Vec<u16> = Vec::with_capacity(cardinality);
    for run in pairs.chunks_exact(4) {
        let start = u32::from(u16::from_le_bytes([run[0], run[1]]));
        let last = start + u32::from(u16::from_le_bytes([run[2], run[3]]));
        let apart = values
            .last()
            .is_none_or(|previous| u32::from(*previous) < start);
        let fits = values.len() + ((last - start) as usize) < cardinality;
        if last > u32::from(u16::MAX) || !apart || !fits {
            return Err(at.fail(
                at.position(),
                format!("a run {start}..={last} out of order, past the container or its {cardinality} values"),
            ));
        }
        values.extend((start..=last).map(|v| v as u16));
    }
    Ok(values)
}

/// A reader of a blob's bytes that names the byte of what it cannot read.
struct Cursor<'a> {
    file: &'a str,
    bytes: &'a [u8],
    at: usize,
    /// Where `bytes` start in the blob (errors name the blob's byte).
    base: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `bytes`, which begin at byte `base` of the blob.
    fn new(file: &'a str, bytes: &'a [u8], base: usize) -> Self {
        Self {
            file,
            bytes,
            at: 0,
            base,
        }
    }

    fn position(&self) -> usize {
        self.at
    }

    fn left(&self) -> usize {
        self.bytes.len().saturating_sub(self.at)
    }

    fn fail(&self, at: usize, reason: String) -> VectorError {
        VectorError::Malformed {
            file: self.file.to_owned(),
            at: self.base + at,
            reason,
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], VectorError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len());
        let Some(end) = end else {
            return Err(self.fail(self.at, format!("{n} bytes wanted, {} left", self.left())));
        };
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], VectorError> {
        let mut array = [0u8; N];
        array.copy_from_slice(self.take(N)?);
        Ok(array)
    }
}

/// A Puffin file of one deletion vector per data file of `vectors` (one each: the spec
/// allows no more per data file and snapshot): its bytes, and where each blob is.
pub fn puffin_of_vectors(
    vectors: &BTreeMap<String, BTreeSet<i64>>,
) -> Result<(Vec<u8>, Vec<VectorBlob>), VectorError> {
    let mut file = PUFFIN_MAGIC.to_vec();
    let mut blobs = Vec::new();
    let mut metadata = Vec::new();
    for (data_file, positions) in vectors {
        let blob = deletion_vector(data_file, positions)?;
        let located = VectorBlob {
            referenced_data_file: data_file.clone(),
            offset: file.len() as u64,
            length: blob.len() as u64,
            cardinality: positions.len() as u64,
        };
        metadata.push(serde_json::json!({
            "type": "deletion-vector-v1",
            "fields": [POS_FIELD_ID],
            "snapshot-id": -1,
            "sequence-number": -1,
            "offset": located.offset,
            "length": located.length,
            "properties": {
                "referenced-data-file": data_file,
                "cardinality": located.cardinality.to_string(),
            },
        }));
        file.extend_from_slice(&blob);
        blobs.push(located);
    }
    let footer = serde_json::json!({
        "blobs": metadata,
        "properties": { "created-by": "kfs-iceberg" },
    })
    .to_string();
    file.extend_from_slice(PUFFIN_MAGIC);
    file.extend_from_slice(footer.as_bytes());
    file.extend_from_slice(&(footer.len() as u32).to_le_bytes());
    file.extend_from_slice(&[0, 0, 0, 0]);
    file.extend_from_slice(PUFFIN_MAGIC);
    Ok((file, blobs))
}

/// The manifest entry's file of the deletion vector `blob`, in the Puffin file at
/// `path` of `file_size` bytes: position deletes in the `puffin` format, its data
/// file referenced, its blob's offset and length, its cardinality as the record count,
/// in the partition `partition` of spec `spec_id` (its data file's).
pub fn vector_delete_file(
    path: &str,
    file_size: u64,
    blob: &VectorBlob,
    spec_id: i32,
    partition: Struct,
) -> iceberg::Result<DataFile> {
    let signed = |n: u64| {
        i64::try_from(n).map_err(|_| {
            iceberg::Error::new(
                iceberg::ErrorKind::DataInvalid,
                format!("{path}: offset or length {n} beyond 2^63"),
            )
        })
    };
    DataFileBuilder::default()
        .content(DataContentType::PositionDeletes)
        .file_path(path.to_owned())
        .file_format(DataFileFormat::Puffin)
        .partition(partition)
        .partition_spec_id(spec_id)
        .record_count(blob.cardinality)
        .file_size_in_bytes(file_size)
        .referenced_data_file(Some(blob.referenced_data_file.clone()))
        .content_offset(Some(signed(blob.offset)?))
        .content_size_in_bytes(Some(signed(blob.length)?))
        .build()
        .map_err(|e| iceberg::Error::new(iceberg::ErrorKind::Unexpected, format!("{path}: {e}")))
}

#[cfg(test)]
#[path = "vectors_tests.rs"]
mod tests;

//! Deletion vectors (Iceberg v3 merge-on-read deletes): the positions of a data file's
//! deleted rows as a `deletion-vector-v1` blob (a 64-bit Roaring bitmap in the portable
//! format, framed by its length, magic and CRC-32), in a Puffin file whose footer
//! names each blob's data file and cardinality. Pure bytes: writing the file and
//! recording it in a manifest are the caller's.
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

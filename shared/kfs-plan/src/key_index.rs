//! The mirror's key index: every live keyed row of a mirror table at one snapshot, by
//! key: the data file and position it lies at, and what the fold of changes orders it
//! by (partition, offset, timestamp, source position) and whether it is a tombstone. A commit that
//! finds its keys' rows here reads no data file but its own new ones.
//!
//! A tombstone's row is a *marker*: a deleted key's last change, which a mirror keyed
//! by value fields keeps (a key's changes may come from several partitions), so that
//! a change of the key committed later is ordered against the delete rather than
//! applied as the key's first. It names the deleted tombstone row, or no file
//! ([`MARKER_FILE`]) once a compaction rewrote that row away; markers older than
//! [`MARKER_RETENTION_MS`] behind a commit's newest change are let go.
//!
//! Pure logic: the index as data, its blob encoding (what the committer stores in a
//! Puffin file beside the table, blob type [`BLOB_TYPE`], named with the snapshot it
//! describes by the table's properties [`INDEX_PATH_PROPERTY`] and
//! [`INDEX_SNAPSHOT_PROPERTY`]) and its decoding, bounded by the bytes it has: a
//! hostile or broken blob is refused with the byte position and the reason, never a
//! panic or an allocation its bytes do not justify.
//!
//! Encoding (version 2; integers as LEB128 varints, signed ones zig-zag): the version
//! byte, the count of files and each file's path (length, UTF-8 bytes), the count of
//! keys, then per key in byte order: the key (length, bytes), its count of rows, and
//! per row: file number, position, partition, offset, timestamp, the tombstone flag
//! (0 or 1) and the source position: 0 for none, 1 and a log sequence number, or 2
//! and a binlog position (file as length and UTF-8 bytes, position, row). Version 1,
//! which an older build wrote, is the same without source positions; it still reads.

use crate::changes::SourcePosition;

use std::collections::HashMap;

/// The Puffin blob type of a key index.
pub const BLOB_TYPE: &str = "kfs-key-index-v1";

/// Table property naming the file of the key index of the snapshot
/// [`INDEX_SNAPSHOT_PROPERTY`] names; both are set by the commit that makes it.
pub const INDEX_PATH_PROPERTY: &str = "kfs.key-index";

/// Table property naming the snapshot the key index describes.
pub const INDEX_SNAPSHOT_PROPERTY: &str = "kfs.key-index-snapshot-id";

/// Table property naming the key the index's keys were made by (the table's
/// [`crate::mode::UPSERT_KEY_PROPERTY`] when it was written; absent: the record key,
/// as every index before keys of fields).
pub const INDEX_KEY_PROPERTY: &str = "kfs.key-index-key";

/// The key a table's properties say its rows are keyed by (`key`: the record key).
fn table_key(properties: &HashMap<String, String>) -> &str {
    properties
        .get(crate::mode::UPSERT_KEY_PROPERTY)
        .map_or(crate::mode::RECORD_KEY, String::as_str)
}

/// The key index file `properties` name for the snapshot `current`, if any: an index
/// of another snapshot (a compaction's or another engine's since) is no index of this
/// one, nor is an index made by another key than the one the table names now (its
/// `kfs.upsert-key` changed since).
pub fn index_path(properties: &HashMap<String, String>, current: i64) -> Option<&str> {
    let snapshot = properties.get(INDEX_SNAPSHOT_PROPERTY)?;
    let indexed_key = properties
        .get(INDEX_KEY_PROPERTY)
        .map_or(crate::mode::RECORD_KEY, String::as_str);
    (snapshot.parse::<i64>().ok()? == current && indexed_key == table_key(properties))
        .then(|| properties.get(INDEX_PATH_PROPERTY).map(String::as_str))
        .flatten()
}

/// The properties that name `path` as the key index of the snapshot `snapshot_id`,
/// made by the key the table's `properties` name.
pub fn index_properties(
    path: &str,
    snapshot_id: i64,
    properties: &HashMap<String, String>,
) -> Vec<(String, String)> {
    vec![
        (INDEX_PATH_PROPERTY.to_owned(), path.to_owned()),
        (INDEX_SNAPSHOT_PROPERTY.to_owned(), snapshot_id.to_string()),
        (
            INDEX_KEY_PROPERTY.to_owned(),
            table_key(properties).to_owned(),
        ),
    ]
}

/// The file a marker names once its tombstone row is rewritten away: none.
pub const MARKER_FILE: &str = "";

/// How long (by record timestamps) a marker is kept behind the newest change a commit
/// applies: a day, as Kafka keeps a compacted topic's tombstones
/// (`delete.retention.ms`). A change older than that against a delete is applied.
pub const MARKER_RETENTION_MS: i64 = 24 * 60 * 60 * 1000;

/// The encoding's version byte.
const VERSION: u8 = 2;

/// The version before source positions, still read.
const VERSION_WITHOUT_SOURCES: u8 = 1;

/// A live keyed row of a mirror table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedRow {
    /// The data file holding the row.
    pub file: String,
    /// The row's position in that file.
    pub position: i64,
    /// The record's partition.
    pub partition: i32,
    /// The record's offset.
    pub offset: i64,
    /// The record's timestamp (ms).
    pub timestamp_ms: i64,
    /// Its value is null: the key's tombstone.
    pub tombstone: bool,
    /// Its change's source position, when its envelope had one.
    pub source: Option<SourcePosition>,
}

/// A row as the index holds it: its file by number.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Slot {
    file: u32,
    position: i64,
    partition: i32,
    offset: i64,
    timestamp_ms: i64,
    tombstone: bool,
    source: Option<SourcePosition>,
}

/// The live keyed rows of a mirror table at one snapshot, by key.
#[derive(Debug, Clone, Default)]
pub struct KeyIndex {
    files: Vec<String>,
    file_numbers: HashMap<String, u32>,
    rows: HashMap<Vec<u8>, Vec<Slot>>,
}

impl KeyIndex {
    /// Adds a live row of `key`.
    pub fn insert(&mut self, key: Vec<u8>, row: &IndexedRow) {
        let file = self.file_number(&row.file);
        self.rows.entry(key).or_default().push(Slot {
            file,
            position: row.position,
            partition: row.partition,
            offset: row.offset,
            timestamp_ms: row.timestamp_ms,
            tombstone: row.tombstone,
            source: row.source.clone(),
        });
    }

    /// The live rows of `key`.
    pub fn rows_of(&self, key: &[u8]) -> Vec<IndexedRow> {
        self.rows
            .get(key)
            .into_iter()
            .flatten()
            .map(|slot| self.row(slot))
            .collect()
    }

    /// Forgets every row of `key` (a commit replaces them with what survives it).
    pub fn remove(&mut self, key: &[u8]) {
        self.rows.remove(key);
    }

    /// Forgets every row that lies in one of `files` (rewritten away by a compaction);
    /// a marker there is kept, naming no file ([`MARKER_FILE`]).
    pub fn remove_files(&mut self, files: &std::collections::BTreeSet<String>) {
        let gone: std::collections::HashSet<u32> = files
            .iter()
            .filter_map(|file| self.file_numbers.get(file).copied())
            .collect();
        if gone.is_empty() {
            return;
        }
        let no_file = self.file_number(MARKER_FILE);
        self.rows.retain(|_, rows| {
            rows.retain_mut(|slot| match (gone.contains(&slot.file), slot.tombstone) {
                (false, _) => true,
                (true, true) => {
                    (slot.file, slot.position) = (no_file, 0);
                    true
                }
                (true, false) => false,
            });
            !rows.is_empty()
        });
    }

    /// Lets go of the markers older than `cutoff_ms` (a record timestamp).
    pub fn forget_markers_before(&mut self, cutoff_ms: i64) {
        self.rows.retain(|_, rows| {
            rows.retain(|slot| !slot.tombstone || slot.timestamp_ms >= cutoff_ms);
            !rows.is_empty()
        });
    }

    /// The index without its markers: the live rows alone (what a read of the table's
    /// files finds).
    pub fn live(&self) -> Self {
        let mut live = self.clone();
        live.forget_markers_before(i64::MAX);
        live
    }

    /// How many keys have live rows.
    pub fn keys(&self) -> usize {
        self.rows.len()
    }

    /// How many live rows it holds.
    pub fn rows(&self) -> usize {
        self.rows.values().map(Vec::len).sum()
    }

    /// The blob of the index (see the module's encoding), keys in byte order and only
    /// the files some row lies in, so equal indexes encode alike.
    pub fn encode(&self) -> Vec<u8> {
        let mut keys: Vec<(&Vec<u8>, &Vec<Slot>)> = self
            .rows
            .iter()
            .filter(|(_, rows)| !rows.is_empty())
            .collect();
        keys.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let mut renumbered: HashMap<u32, u64> = HashMap::new();
        let mut files: Vec<&str> = Vec::new();
        for slot in keys.iter().flat_map(|(_, rows)| rows.iter()) {
            renumbered.entry(slot.file).or_insert_with(|| {
                files.push(&self.files[slot.file as usize]);
                files.len() as u64 - 1
            });
        }
        let mut out = vec![VERSION];
        put(&mut out, files.len() as u64);
        for file in files {
            put(&mut out, file.len() as u64);
            out.extend_from_slice(file.as_bytes());
        }
        put(&mut out, keys.len() as u64);
        for (key, rows) in keys {
            put(&mut out, key.len() as u64);
            out.extend_from_slice(key);
            put(&mut out, rows.len() as u64);
            for slot in rows {
                put(&mut out, renumbered[&slot.file]);
                put(&mut out, zigzag(slot.position));
                put(&mut out, zigzag(i64::from(slot.partition)));
                put(&mut out, zigzag(slot.offset));
                put(&mut out, zigzag(slot.timestamp_ms));
                out.push(u8::from(slot.tombstone));
                match &slot.source {
                    None => out.push(0),
                    Some(SourcePosition::Lsn(lsn)) => {
                        out.push(1);
                        put(&mut out, *lsn);
                    }
                    Some(SourcePosition::Binlog { file, pos, row }) => {
                        out.push(2);
                        put(&mut out, file.len() as u64);
                        out.extend_from_slice(file.as_bytes());
                        put(&mut out, *pos);
                        put(&mut out, *row);
                    }
                }
            }
        }
        out
    }

    /// Reads a blob [`Self::encode`] wrote; `Err` names the byte position and the
    /// reason. Nothing is allocated beyond what the blob's bytes can hold.
    pub fn decode(blob: &[u8]) -> Result<Self, String> {
        let mut reader = Reader { blob, at: 0 };
        let version = reader.byte()?;
        if version != VERSION && version != VERSION_WITHOUT_SOURCES {
            return Err(format!(
                "key index version {version} at byte 0 (this build reads {VERSION_WITHOUT_SOURCES} and {VERSION})"
            ));
        }
        let sources = version == VERSION;
        let mut index = Self::default();
        // Every file takes a byte at least, every key two, every row six.
        for _ in 0..reader.count(1)? {
            let start = reader.at;
            let path = std::str::from_utf8(reader.bytes()?)
                .map_err(|e| format!("key index file path at byte {start}: {e}"))?;
            if index.file_numbers.contains_key(path) {
                return Err(format!("key index repeats file {path:?} at byte {start}"));
            }
            index.file_number(path);
        }
        for _ in 0..reader.count(2)? {
            let key = reader.bytes()?.to_vec();
            let start = reader.at;
            let count = reader.count(6)?;
            if count == 0 {
                return Err(format!(
                    "key index lists a key without rows at byte {start}"
                ));
            }
            let mut rows = Vec::with_capacity(count);
            for _ in 0..count {
                rows.push(reader.slot(index.files.len(), sources)?);
            }
            if index.rows.insert(key, rows).is_some() {
                return Err(format!("key index repeats a key (at byte {})", reader.at));
            }
        }
        if reader.at != blob.len() {
            return Err(format!(
                "key index has {} bytes left after its rows (at byte {})",
                blob.len() - reader.at,
                reader.at
            ));
        }
        Ok(index)
    }

    fn row(&self, slot: &Slot) -> IndexedRow {
        IndexedRow {
            file: self.files[slot.file as usize].clone(),
            position: slot.position,
            partition: slot.partition,
            offset: slot.offset,
            timestamp_ms: slot.timestamp_ms,
            tombstone: slot.tombstone,
            source: slot.source.clone(),
        }
    }

    fn file_number(&mut self, file: &str) -> u32 {
        if let Some(number) = self.file_numbers.get(file) {
            return *number;
        }
        let number = self.files.len() as u32;
        self.files.push(file.to_owned());
        self.file_numbers.insert(file.to_owned(), number);
        number
    }
}

/// Puffin's magic, at the start of a file and around its footer.
const PUFFIN_MAGIC: [u8; 4] = *b"PFA1";

/// Where a key index blob lies in a Puffin file, as its footer says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexBlob {
    /// Its first byte in the file.
    pub offset: usize,
    /// Its bytes in the file.
    pub length: usize,
    /// It is zstd-compressed (else stored as it is).
    pub zstd: bool,
    /// Its bytes before compression, as its `uncompressed-bytes` property says.
    pub uncompressed: Option<u64>,
}

/// The blob property recording a key index's size before compression.
pub const UNCOMPRESSED_BYTES_PROPERTY: &str = "uncompressed-bytes";

/// The [`BLOB_TYPE`] blob of the snapshot `snapshot_id` in the Puffin file `file`
/// (its whole bytes), read from its footer (magic, JSON payload, payload length,
/// flags, magic); `None` when it holds none. A file that is no Puffin file, whose
/// footer is compressed or does not read, or whose blob lies outside it, is refused
/// with the reason: every length is checked against the bytes there are.
pub fn find_index_blob(file: &[u8], snapshot_id: i64) -> Result<Option<IndexBlob>, String> {
    let trailer = 12; // payload length, flags, magic
    if file.len() < PUFFIN_MAGIC.len() * 2 + trailer || file[..4] != PUFFIN_MAGIC {
        return Err(format!("{} bytes are no Puffin file", file.len()));
    }
    let end = file.len();
    let word = |at: usize| -> [u8; 4] {
        let mut word = [0; 4];
        word.copy_from_slice(&file[at..at + 4]);
        word
    };
    if word(end - 4) != PUFFIN_MAGIC {
        return Err(format!("no Puffin magic at byte {}", end - 4));
    }
    if word(end - 8) != [0; 4] {
        return Err("a compressed Puffin footer (this reader writes none)".into());
    }
    let payload_length = u32::from_le_bytes(word(end - 12)) as usize;
    let payload_end = end - trailer;
    let payload_start = payload_end
        .checked_sub(payload_length)
        .filter(|start| *start >= 8)
        .ok_or_else(|| format!("a Puffin footer of {payload_length} bytes in a file of {end}"))?;
    if word(payload_start - 4) != PUFFIN_MAGIC {
        return Err(format!("no Puffin magic at byte {}", payload_start - 4));
    }
    let footer: serde_json::Value = serde_json::from_slice(&file[payload_start..payload_end])
        .map_err(|e| format!("the Puffin footer at byte {payload_start}: {e}"))?;
    let blobs = footer
        .get("blobs")
        .and_then(serde_json::Value::as_array)
        .ok_or("the Puffin footer lists no blobs")?;
    let Some(blob) = blobs.iter().find(|b| {
        b.get("type").and_then(serde_json::Value::as_str) == Some(BLOB_TYPE)
            && b.get("snapshot-id").and_then(serde_json::Value::as_i64) == Some(snapshot_id)
    }) else {
        return Ok(None);
    };
    let number = |name: &str| {
        blob.get(name)
            .and_then(serde_json::Value::as_u64)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| format!("the key index blob has no {name}"))
    };
    let (offset, length) = (number("offset")?, number("length")?);
    if offset
        .checked_add(length)
        .is_none_or(|blob_end| blob_end > payload_start - 4)
    {
        return Err(format!(
            "the key index blob ({length} bytes at byte {offset}) lies outside the file's blobs"
        ));
    }
    let zstd = match blob
        .get("compression-codec")
        .and_then(serde_json::Value::as_str)
    {
        None => false,
        Some("zstd") => true,
        Some(other) => return Err(format!("key index blob compressed with {other}")),
    };
    let uncompressed = blob
        .get("properties")
        .and_then(|p| p.get(UNCOMPRESSED_BYTES_PROPERTY))
        .and_then(serde_json::Value::as_str)
        .and_then(|n| n.parse().ok());
    Ok(Some(IndexBlob {
        offset,
        length,
        zstd,
        uncompressed,
    }))
}

/// Appends `value` as a LEB128 varint.
fn put(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

fn unzigzag(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

/// A blob being read.
struct Reader<'a> {
    blob: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, String> {
        let byte = *self
            .blob
            .get(self.at)
            .ok_or_else(|| format!("key index ends at byte {}", self.at))?;
        self.at += 1;
        Ok(byte)
    }

    fn varint(&mut self) -> Result<u64, String> {
        let start = self.at;
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.byte()?;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(format!(
            "key index varint longer than 10 bytes at byte {start}"
        ))
    }

    /// A count of items each taking at least `bytes` bytes, refused when the rest of
    /// the blob cannot hold them.
    fn count(&mut self, bytes: usize) -> Result<usize, String> {
        let start = self.at;
        let count = self.varint()?;
        let room = (self.blob.len() - self.at) / bytes;
        usize::try_from(count)
            .ok()
            .filter(|count| *count <= room)
            .ok_or_else(|| {
                format!("key index count {count} at byte {start}: more than its bytes can hold")
            })
    }

    fn bytes(&mut self) -> Result<&[u8], String> {
        let start = self.at;
        let length = self.count(1)?;
        let bytes = self.blob.get(self.at..self.at + length).ok_or_else(|| {
            format!("key index length {length} at byte {start} runs past its end")
        })?;
        self.at += length;
        Ok(bytes)
    }

    /// A row; its source position after it when the version has `sources`.
    fn slot(&mut self, files: usize, sources: bool) -> Result<Slot, String> {
        let start = self.at;
        let file = self.varint()?;
        let file = u32::try_from(file)
            .ok()
            .filter(|file| (*file as usize) < files)
            .ok_or_else(|| format!("key index row at byte {start} names file {file} of {files}"))?;
        let position = unzigzag(self.varint()?);
        let partition = i32::try_from(unzigzag(self.varint()?))
            .map_err(|_| format!("key index row at byte {start}: partition beyond an int"))?;
        let offset = unzigzag(self.varint()?);
        let timestamp_ms = unzigzag(self.varint()?);
        let tombstone = match self.byte()? {
            0 => false,
            1 => true,
            other => {
                return Err(format!(
                    "key index row at byte {start}: tombstone flag {other}, not 0 or 1"
                ));
            }
        };
        let source = match sources {
            true => self.source()?,
            false => None,
        };
        Ok(Slot {
            file,
            position,
            partition,
            offset,
            timestamp_ms,
            tombstone,
            source,
        })
    }

    /// A row's source position: its kind's byte, then its fields.
    fn source(&mut self) -> Result<Option<SourcePosition>, String> {
        let start = self.at;
        Ok(match self.byte()? {
            0 => None,
            1 => Some(SourcePosition::Lsn(self.varint()?)),
            2 => {
                let file = std::str::from_utf8(self.bytes()?)
                    .map_err(|e| format!("key index binlog file at byte {start}: {e}"))?
                    .to_owned();
                let (pos, row) = (self.varint()?, self.varint()?);
                Some(SourcePosition::Binlog { file, pos, row })
            }
            other => {
                return Err(format!(
                    "key index row at byte {start}: source position kind {other}, not 0, 1 or 2"
                ));
            }
        })
    }
}

#[cfg(test)]
#[path = "key_index_tests.rs"]
mod tests;

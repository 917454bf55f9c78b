//! Where a mirror's key index lives: a Puffin file beside the table's metadata (one
//! blob of type `kfs_plan::key_index::BLOB_TYPE`, zstd-compressed, for the `key`
//! column), named with the snapshot it describes by two table properties set in the
//! same commit as that snapshot, so the index and the table never disagree: an index
//! is used only by a commit planned on the snapshot it names.
//!
//! Not a statistics file of the snapshot: pyiceberg 0.12 refuses to load a table
//! whose statistics hold a blob type it does not know. Orphan cleanup keeps the file
//! the properties name; another engine's may remove it, which costs the next commit
//! a read of the table (that writes the index again).

use std::collections::HashMap;

use std::io::Read;

use iceberg::puffin::{Blob, CompressionCodec, PuffinWriter};
use iceberg::table::Table;
use iceberg::{Result, TableUpdate};
use kfs_plan::key_index::{
    BLOB_TYPE, KeyIndex, UNCOMPRESSED_BYTES_PROPERTY, find_index_blob, index_path, index_properties,
};

/// Most bytes a key index may inflate to (what its blob's `uncompressed-bytes`
/// property may claim): a damaged or hostile file must not take the committer's
/// memory. 2 GiB holds the index of some hundred million keys.
const MAX_INDEX_BYTES: u64 = 2 << 30;

/// The key index of the snapshot `table` is at: `Some` (empty for a table without a
/// snapshot) when the table's properties name one for it that reads, `None`
/// otherwise (the caller reads the table). Only a failure to ask whether the file is
/// there is returned (it is retried); a file that is gone, damaged (its footer, its
/// compression, its blob), or larger than [`MAX_INDEX_BYTES`] is passed over, since
/// reading the table is always right.
pub(super) async fn load(table: &Table) -> Result<Option<KeyIndex>> {
    let metadata = table.metadata();
    let Some(snapshot) = metadata.current_snapshot() else {
        return Ok(Some(KeyIndex::default()));
    };
    let Some(path) = index_path(metadata.properties(), snapshot.snapshot_id()) else {
        return Ok(None);
    };
    let input = table.file_io().new_input(path)?;
    if !input.exists().await? {
        return Ok(None);
    }
    Ok(read(table, path, snapshot.snapshot_id())
        .await
        .ok()
        .flatten())
}

/// The index in `table`'s Puffin file at `path` for the snapshot `snapshot_id`;
/// `None` when it holds none; `Err` when it cannot be read as one. The footer is read
/// here, every length checked (iceberg-rust 0.10's Puffin reader overflows on a file
/// cut short), and the blob inflated no further than it claims.
async fn read(table: &Table, path: &str, snapshot_id: i64) -> Result<Option<KeyIndex>> {
    let invalid = |reason: String| iceberg::Error::new(iceberg::ErrorKind::DataInvalid, reason);
    let file = table.file_io().new_input(path)?.read().await?;
    let Some(blob) = find_index_blob(&file, snapshot_id).map_err(invalid)? else {
        return Ok(None);
    };
    let stored = file
        .get(blob.offset..blob.offset.saturating_add(blob.length))
        .ok_or_else(|| invalid("the key index blob lies outside its file".into()))?;
    let inflated = match blob.zstd {
        false => stored.to_vec(),
        true => {
            let claimed = blob
                .uncompressed
                .filter(|n| *n <= MAX_INDEX_BYTES)
                .ok_or_else(|| invalid(format!("no size within {MAX_INDEX_BYTES} bytes")))?;
            let mut inflated = Vec::new();
            // One byte past the claim, to tell a blob that inflates beyond it.
            zstd::stream::read::Decoder::new(stored)
                .and_then(|decoder| decoder.take(claimed + 1).read_to_end(&mut inflated))
                .map_err(|e| invalid(format!("the index does not inflate: {e}")))?;
            if inflated.len() as u64 != claimed {
                return Err(invalid(format!(
                    "the index inflates to {} bytes, not the {claimed} it claims",
                    inflated.len()
                )));
            }
            inflated
        }
    };
    KeyIndex::decode(&inflated).map(Some).map_err(invalid)
}

/// Writes `index`, the key index of the snapshot `snapshot_id` (sequence number
/// `sequence_number`) about to be committed to `table`, and returns the update that
/// names it in the table's properties.
pub(crate) async fn index_updates(
    table: &Table,
    index: &KeyIndex,
    (snapshot_id, sequence_number): (i64, i64),
) -> Result<Vec<TableUpdate>> {
    let metadata = table.metadata();
    let path = format!(
        "{}/metadata/kfs-key-index-{snapshot_id}-{}.puffin",
        metadata.location(),
        uuid::Uuid::new_v4()
    );
    let key_field: Vec<i32> = metadata
        .current_schema()
        .field_by_name("key")
        .map(|f| f.id)
        .into_iter()
        .collect();
    let encoded = index.encode();
    let output = table.file_io().new_output(&path)?;
    let mut writer = PuffinWriter::new(&output, HashMap::new(), false).await?;
    let blob = Blob::builder()
        .r#type(BLOB_TYPE.to_owned())
        .fields(key_field)
        .snapshot_id(snapshot_id)
        .sequence_number(sequence_number)
        .properties(HashMap::from([
            ("keys".to_owned(), index.keys().to_string()),
            ("rows".to_owned(), index.rows().to_string()),
            (
                UNCOMPRESSED_BYTES_PROPERTY.to_owned(),
                encoded.len().to_string(),
            ),
        ]))
        .data(encoded)
        .build();
    writer.add(blob, CompressionCodec::zstd_default()).await?;
    writer.close().await?;
    Ok(vec![TableUpdate::SetProperties {
        updates: index_properties(&path, snapshot_id, metadata.properties())
            .into_iter()
            .collect(),
    }])
}

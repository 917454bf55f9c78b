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

use iceberg::puffin::{Blob, CompressionCodec, PuffinReader, PuffinWriter};
use iceberg::table::Table;
use iceberg::{Result, TableUpdate};
use kfs_plan::key_index::{BLOB_TYPE, KeyIndex, index_path, index_properties};

/// The key index of the snapshot `table` is at: `Some` (empty for a table without a
/// snapshot) when the table's properties name one for it that reads, `None`
/// otherwise (the caller reads the table). A failure to read an index file that is
/// there is returned (it is retried); one that is gone or does not decode is passed
/// over.
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
    let reader = PuffinReader::new(input);
    let Some(blob) = reader
        .file_metadata()
        .await?
        .blobs()
        .iter()
        .find(|b| b.blob_type() == BLOB_TYPE && b.snapshot_id() == snapshot.snapshot_id())
        .cloned()
    else {
        return Ok(None);
    };
    let blob = reader.blob(&blob).await?;
    // One that does not decode costs the commit a read of the table, which writes a
    // new one.
    Ok(KeyIndex::decode(blob.data()).ok())
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
    let output = table.file_io().new_output(&path)?;
    let mut writer = PuffinWriter::new(&output, HashMap::new(), false).await?;
    let blob = Blob::builder()
        .r#type(BLOB_TYPE.to_owned())
        .fields(key_field)
        .snapshot_id(snapshot_id)
        .sequence_number(sequence_number)
        .data(index.encode())
        .properties(HashMap::from([
            ("keys".to_owned(), index.keys().to_string()),
            ("rows".to_owned(), index.rows().to_string()),
        ]))
        .build();
    writer.add(blob, CompressionCodec::zstd_default()).await?;
    writer.close().await?;
    Ok(vec![TableUpdate::SetProperties {
        updates: index_properties(&path, snapshot_id).into_iter().collect(),
    }])
}

//! Row lineage of a format v3 table's live data files (`_row_id`,
//! `_last_updated_sequence_number`): the first row id each file has or inherits from
//! its manifest, and its data sequence number; what a rewrite needs to carry its rows'
//! lineage into the files it writes (iceberg-rust 0.10.1 does not assign inherited
//! first row ids when it reads a manifest).

use std::collections::HashMap;

use iceberg::Result;
use iceberg::spec::{DataContentType, ManifestContentType, ManifestEntryRef, ManifestFile};
use iceberg::table::Table;
use kfs_parquet::RowLineage;

/// The first row id of each data file of `manifest` (its entries `entries`, in their
/// order): a file's own, or the one it inherits (the manifest's first row id plus the
/// rows of the live files before it that inherit theirs: what the manifest list
/// reserved, its existing and added rows). `None` for a manifest without row ids (a
/// v2 table's, a delete manifest) and for DELETED entries.
pub(crate) fn inherited_first_row_ids(
    manifest: &ManifestFile,
    entries: &[ManifestEntryRef],
) -> Vec<Option<i64>> {
    let mut next = manifest.first_row_id.and_then(|id| i64::try_from(id).ok());
    entries
        .iter()
        .map(|entry| {
            if !entry.is_alive() || entry.content_type() != DataContentType::Data {
                return None;
            }
            if let Some(own) = entry.data_file().first_row_id() {
                return Some(own);
            }
            // Ids past 2^63 (a hostile record count): none from here on.
            let assigned = next?;
            next = i64::try_from(entry.record_count())
                .ok()
                .and_then(|rows| assigned.checked_add(rows));
            Some(assigned)
        })
        .collect()
}

/// The lineage of every live data file of `table`'s current snapshot that has row
/// ids (none in a v2 table), by path.
pub async fn live_lineage(table: &Table) -> Result<HashMap<String, RowLineage>> {
    let mut lineage = HashMap::new();
    let Some(snapshot) = table.metadata().current_snapshot() else {
        return Ok(lineage);
    };
    let list = table.manifest_list_reader(snapshot).load().await?;
    for manifest in list.entries() {
        if manifest.content != ManifestContentType::Data {
            continue;
        }
        let loaded = manifest.load_manifest(table.file_io()).await?;
        let ids = inherited_first_row_ids(manifest, loaded.entries());
        for (entry, id) in loaded.entries().iter().zip(ids) {
            if let (Some(first_row_id), Some(sequence_number)) = (id, entry.sequence_number()) {
                lineage.insert(
                    entry.file_path().to_owned(),
                    RowLineage {
                        first_row_id,
                        sequence_number,
                    },
                );
            }
        }
    }
    Ok(lineage)
}

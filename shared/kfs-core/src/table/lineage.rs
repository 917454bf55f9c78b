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

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::{DataFileBuilder, DataFileFormat, ManifestEntry, ManifestStatus, Struct};
    use std::sync::Arc;

    type TestResult<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

    fn entry(status: ManifestStatus, rows: u64, own: Option<i64>) -> TestResult<ManifestEntryRef> {
        let file = DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path(format!("s3://b/t/data/{rows}-{own:?}.parquet"))
            .file_format(DataFileFormat::Parquet)
            .partition(Struct::empty())
            .record_count(rows)
            .file_size_in_bytes(100)
            .first_row_id(own)
            .build()?;
        Ok(Arc::new(
            ManifestEntry::builder()
                .status(status)
                .data_file(file)
                .build(),
        ))
    }

    fn manifest(first_row_id: Option<u64>) -> ManifestFile {
        ManifestFile {
            manifest_path: "s3://b/t/metadata/m.avro".to_owned(),
            manifest_length: 1,
            partition_spec_id: 0,
            content: ManifestContentType::Data,
            sequence_number: 1,
            min_sequence_number: 1,
            added_snapshot_id: 1,
            added_files_count: None,
            existing_files_count: None,
            deleted_files_count: None,
            added_rows_count: None,
            existing_rows_count: None,
            deleted_rows_count: None,
            partitions: None,
            key_metadata: None,
            first_row_id,
        }
    }

    #[test]
    fn live_files_inherit_consecutive_ranges_and_keep_their_own() -> TestResult {
        let entries = [
            entry(ManifestStatus::Added, 3, None)?,
            entry(ManifestStatus::Deleted, 50, None)?,
            entry(ManifestStatus::Existing, 4, Some(900))?,
            entry(ManifestStatus::Existing, 2, None)?,
        ];
        let ids = inherited_first_row_ids(&manifest(Some(10)), &entries);
        // A DELETED entry takes no range; a file with its own id keeps it and does not
        // move the next inherited one.
        assert_eq!(ids, vec![Some(10), None, Some(900), Some(13)]);
        // A manifest without a first row id (a v2 table's, or one written before an
        // upgrade): no file inherits one.
        let ids = inherited_first_row_ids(&manifest(None), &entries);
        assert_eq!(ids, vec![None, None, Some(900), None]);
        Ok(())
    }

    /// Another engine's manifest whose first row id or record counts reach past 2^63:
    /// the files from there on get no lineage (their rows keep their own values),
    /// never a wrapped id that another row already has.
    #[test]
    fn ids_past_two_to_the_63_are_none_never_wrapped() -> TestResult {
        let entries = [
            entry(ManifestStatus::Added, 5, None)?,
            entry(ManifestStatus::Added, 1, None)?,
            entry(ManifestStatus::Added, 1, Some(7))?,
        ];
        let near = (i64::MAX - 2) as u64;
        let ids = inherited_first_row_ids(&manifest(Some(near)), &entries);
        assert_eq!(ids, vec![Some(i64::MAX - 2), None, Some(7)]);
        let ids = inherited_first_row_ids(&manifest(Some(u64::MAX)), &entries);
        assert_eq!(ids, vec![None, None, Some(7)]);
        let huge = [
            entry(ManifestStatus::Added, u64::MAX, None)?,
            entry(ManifestStatus::Added, 1, None)?,
        ];
        let ids = inherited_first_row_ids(&manifest(Some(0)), &huge);
        assert_eq!(ids, vec![Some(0), None]);
        Ok(())
    }
}

//! Building **row-delta** snapshots, the commit of merge-on-read changes that
//! iceberg-rust 0.10.1 has no action for: data files added beside delete files that
//! delete rows of live data files (the old versions of updated keys, the deleted
//! keys), in one snapshot.
//!
//! Every manifest of the parent is kept as it is; the added data files go in a new
//! data manifest and the delete files in a new delete manifest, both at the new
//! snapshot's sequence number, so its deletes reach every row committed up to and
//! including it (a row added and deleted in one commit is deleted, as the spec's
//! `<=` rule for position deletes says). The summary's totals are the parent's plus
//! what was added, less what was removed, with the caller's properties (the offset
//! map) on top. The commit requires `main` still at the parent.
//!
//! A format v2 table takes position-delete files. A v3 table takes deletion vectors
//! (position deletes must not be added to it), at most one per data file: a data
//! file's new vector replaces its live one, whose entry is removed (its delete
//! manifest written again, the vector DELETED); the caller merged the old vector's
//! rows into the new one. The manifest list assigns the new data files' row ids
//! (row lineage): an updated key's new row is a new row, with a new id.

use crate::commit::manifest::{
    SnapshotParts, carry_entry, manifest_list_path, manifest_list_writer, manifest_writer,
    row_range, snapshot_of,
};
use crate::commit::replace::{StagedReplace, commit_on_main, new_snapshot_id};
use crate::commit::summary::FileSummary;
use iceberg::spec::{
    DataContentType, DataFile, DataFileFormat, FormatVersion, ManifestContentType, ManifestEntry,
    ManifestFile, Operation, Summary,
};
use iceberg::table::Table;
use iceberg::{Error, ErrorKind, Result};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// What a row-delta snapshot changes.
#[derive(Debug, Clone, Default)]
pub struct RowDelta {
    /// Data files to add.
    pub data: Vec<DataFile>,
    /// Delete files to add: a v2 table's position-delete files (each written by
    /// `kfs_parquet::write_position_deletes`), a v3 table's deletion vectors (one per
    /// data file, `kfs_parquet::vector_delete_file`).
    /// Each with the id of the partition spec of the data files it deletes from (its
    /// own): a delete manifest is written per spec.
    pub deletes: Vec<(i32, DataFile)>,
    /// Summary properties of the snapshot (the offset map and what else it carries).
    pub properties: HashMap<String, String>,
}

/// Builds a row-delta snapshot on the table's current snapshot (or as its first):
/// writes the new manifests and the manifest list, and returns the commit to make.
/// Refuses a change that adds nothing, and files of the wrong content or of the wrong
/// kind of deletes for the table's format version.
pub async fn stage_row_delta(
    table: &Table,
    change: &RowDelta,
    now_ms: i64,
) -> Result<StagedReplace> {
    check(table, change)?;
    let metadata = table.metadata();
    let parent = metadata.current_snapshot();
    let parent_id = parent.map(|p| p.snapshot_id());
    let mut staging = Staging {
        table,
        snapshot_id: new_snapshot_id(table),
        sequence_number: metadata.next_sequence_number(),
        commit_uuid: uuid::Uuid::new_v4(),
        written: 0,
        summary: FileSummary::default(),
    };
    // The parent's manifests, but those of DELETED entries alone (nothing live).
    let kept: Vec<ManifestFile> = match parent {
        Some(parent) => table
            .manifest_list_reader(parent)
            .load()
            .await?
            .entries()
            .iter()
            .filter(|m| m.has_added_files() || m.has_existing_files())
            .cloned()
            .collect(),
        None => Vec::new(),
    };
    let mut manifests = staging
        .replace_vectors(kept, &change.deletes, parent_id)
        .await?;
    let default_spec = metadata.default_partition_spec_id();
    let mut by_spec: BTreeMap<i32, Vec<DataFile>> = BTreeMap::new();
    for (spec_id, file) in &change.deletes {
        by_spec.entry(*spec_id).or_default().push(file.clone());
    }
    for (spec_id, files) in by_spec.iter().chain([(&default_spec, &change.data)]) {
        if let Some(manifest) = staging.manifest(*spec_id, files).await? {
            manifests.insert(0, manifest);
        }
    }
    let list_path = manifest_list_path(table, staging.snapshot_id, staging.commit_uuid);
    let mut list = manifest_list_writer(
        table,
        &list_path,
        staging.snapshot_id,
        parent_id,
        staging.sequence_number,
    )
    .await?;
    list.add_manifests(manifests.into_iter())?;
    let rows = row_range(table, &list);
    list.close().await?;
    let mut properties = staging.summary.build_after(parent);
    properties.extend(change.properties.clone());
    let operation = match (change.data.is_empty(), change.deletes.is_empty()) {
        (false, true) => Operation::Append,
        (true, false) => Operation::Delete,
        _ => Operation::Overwrite,
    };
    let parts = SnapshotParts {
        snapshot_id: staging.snapshot_id,
        parent_id,
        sequence_number: staging.sequence_number,
        timestamp_ms: now_ms,
        manifest_list: list_path,
        summary: Summary {
            operation,
            additional_properties: properties,
        },
        rows,
    };
    Ok(commit_on_main(table, snapshot_of(table, parts), parent_id))
}

/// A row-delta snapshot being written.
struct Staging<'a> {
    table: &'a Table,
    snapshot_id: i64,
    sequence_number: i64,
    commit_uuid: uuid::Uuid,
    /// Manifests written so far (they are numbered).
    written: usize,
    summary: FileSummary,
}

impl Staging<'_> {
    /// A writer of the snapshot's next manifest, of data (or delete) files of `spec`.
    fn writer(
        &mut self,
        spec: &iceberg::spec::PartitionSpecRef,
        deletes: bool,
    ) -> Result<crate::commit::manifest::TypedManifestWriter> {
        self.written += 1;
        let number = (self.commit_uuid, self.written);
        manifest_writer(self.table, number, self.snapshot_id, spec, deletes)
    }

    /// The manifest adding `files`, all of one content (data, or deletes) and of the
    /// partition spec `spec_id`, at the snapshot's sequence number; `None` for no file.
    async fn manifest(&mut self, spec_id: i32, files: &[DataFile]) -> Result<Option<ManifestFile>> {
        let Some(first) = files.first() else {
            return Ok(None);
        };
        let metadata = self.table.metadata();
        let spec = metadata.partition_spec_by_id(spec_id).ok_or_else(|| {
            Error::new(
                ErrorKind::DataInvalid,
                format!("no partition spec {spec_id}"),
            )
        })?;
        let spec = spec.clone();
        let mut writer = self.writer(&spec, first.content_type() != DataContentType::Data)?;
        for file in files {
            self.summary.count(file, spec_id, true);
            writer.add_file(file.clone(), self.sequence_number)?;
        }
        Ok(Some(writer.write_manifest_file().await?))
    }

    /// `kept` (the parent's manifests) with the live deletion vectors of the data
    /// files `deletes` gives new vectors removed: each delete manifest holding one
    /// written again, those vectors DELETED and its other live files EXISTING. A v2
    /// table's deletes name no data file: `kept` as it is.
    async fn replace_vectors(
        &mut self,
        kept: Vec<ManifestFile>,
        deletes: &[(i32, DataFile)],
        parent_id: Option<i64>,
    ) -> Result<Vec<ManifestFile>> {
        let targets: BTreeSet<String> = deletes
            .iter()
            .filter(|(_, file)| file.file_format() == DataFileFormat::Puffin)
            .filter_map(|(_, file)| file.referenced_data_file())
            .collect();
        let replaced = |entry: &ManifestEntry| {
            entry.is_alive()
                && entry.file_format() == DataFileFormat::Puffin
                && entry
                    .data_file()
                    .referenced_data_file()
                    .is_some_and(|file| targets.contains(&file))
        };
        let mut manifests = Vec::with_capacity(kept.len());
        for manifest in kept {
            if targets.is_empty() || manifest.content != ManifestContentType::Deletes {
                manifests.push(manifest);
                continue;
            }
            let loaded = manifest.load_manifest(self.table.file_io()).await?;
            if !loaded.entries().iter().any(|e| replaced(e)) {
                manifests.push(manifest);
                continue;
            }
            let spec = self
                .table
                .metadata()
                .partition_spec_by_id(manifest.partition_spec_id)
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::DataInvalid,
                        format!("no partition spec {}", manifest.partition_spec_id),
                    )
                })?
                .clone();
            let mut writer = self.writer(&spec, true)?;
            for entry in loaded.entries().iter().filter(|e| e.is_alive()) {
                let parent = parent_id.unwrap_or(self.snapshot_id);
                let counted = (&mut self.summary, manifest.partition_spec_id);
                carry_entry(&mut writer, entry, replaced(entry), parent, counted)?;
            }
            manifests.push(writer.write_manifest_file().await?);
        }
        Ok(manifests)
    }
}

/// Refuses what a row delta cannot commit: no file, a delete file among the data
/// files, and deletes of the wrong kind for the table's format version (a v2 table's
/// are position-delete files; a v3 table's deletion vectors, one per data file).
fn check(table: &Table, change: &RowDelta) -> Result<()> {
    let invalid = |reason: String| Err(Error::new(ErrorKind::DataInvalid, reason));
    if change.data.is_empty() && change.deletes.is_empty() {
        return invalid("a row delta that adds no file".into());
    }
    if let Some(file) = change
        .data
        .iter()
        .find(|f| f.content_type() != DataContentType::Data)
    {
        return invalid(format!(
            "{} is a delete file among the data files",
            file.file_path()
        ));
    }
    let vectors = match table.metadata().format_version() {
        FormatVersion::V1 => return invalid("a format v1 table takes no row deltas".into()),
        FormatVersion::V2 => false,
        FormatVersion::V3 => true,
    };
    let mut targets = BTreeSet::new();
    for (_, file) in &change.deletes {
        let path = file.file_path();
        if file.content_type() != DataContentType::PositionDeletes {
            return invalid(format!("{path} is no position-delete file"));
        }
        match (vectors, file.file_format(), file.referenced_data_file()) {
            (false, DataFileFormat::Parquet, _) => {}
            (false, _, _) => {
                return invalid(format!(
                    "{path}: a format v2 table takes position-delete files, not deletion vectors"
                ));
            }
            (true, DataFileFormat::Puffin, Some(target)) => {
                if !targets.insert(target.clone()) {
                    return invalid(format!("{target}: two deletion vectors in one commit"));
                }
            }
            (true, _, _) => {
                return invalid(format!(
                    "{path}: a format v3 table takes deletion vectors (a Puffin blob naming its data file), not position-delete files"
                ));
            }
        }
    }
    Ok(())
}

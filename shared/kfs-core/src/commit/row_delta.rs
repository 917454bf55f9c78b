//! Building **row-delta** snapshots, the commit of merge-on-read changes that
//! iceberg-rust 0.10.1 has no action for: data files added beside position-delete
//! files that delete rows of live data files (the old versions of updated keys, the
//! deleted keys), in one snapshot.
//!
//! Every manifest of the parent is kept as it is; the added data files go in a new
//! data manifest and the delete files in a new delete manifest, both at the new
//! snapshot's sequence number, so its deletes reach every row committed up to and
//! including it (a row added and deleted in one commit is deleted, as the spec's
//! `<=` rule for position deletes says). The summary's totals are the parent's plus
//! what was added, with the caller's properties (the offset map) on top. The commit
//! requires `main` still at the parent. Format v2 only: v3 tables take deletion
//! vectors, never position-delete files.

use crate::commit::replace::{StagedReplace, commit_on_main, new_snapshot_id};
use iceberg::spec::{
    DataContentType, DataFile, FormatVersion, ManifestFile, ManifestListWriter,
    ManifestWriterBuilder, Operation, Snapshot, SnapshotSummaryCollector, Summary,
};
use iceberg::table::Table;
use iceberg::{Error, ErrorKind, Result};
use std::collections::HashMap;

/// What a row-delta snapshot changes.
#[derive(Debug, Clone, Default)]
pub struct RowDelta {
    /// Data files to add.
    pub data: Vec<DataFile>,
    /// Position-delete files to add (each written by `kfs_parquet::write_position_deletes`).
    pub deletes: Vec<DataFile>,
    /// Summary properties of the snapshot (the offset map and what else it carries).
    pub properties: HashMap<String, String>,
}

/// The summary totals a snapshot carries: (total, added, removed) property names.
const TOTALS: [(&str, &str, &str); 6] = [
    ("total-records", "added-records", "deleted-records"),
    ("total-data-files", "added-data-files", "deleted-data-files"),
    ("total-files-size", "added-files-size", "removed-files-size"),
    (
        "total-delete-files",
        "added-delete-files",
        "removed-delete-files",
    ),
    (
        "total-position-deletes",
        "added-position-deletes",
        "removed-position-deletes",
    ),
    (
        "total-equality-deletes",
        "added-equality-deletes",
        "removed-equality-deletes",
    ),
];

/// Builds a row-delta snapshot on the table's current snapshot (or as its first):
/// writes the new manifests and the manifest list, and returns the commit to make.
/// Refuses a change that adds nothing, files of the wrong content, and tables that are
/// not format v2.
pub async fn stage_row_delta(
    table: &Table,
    change: &RowDelta,
    now_ms: i64,
) -> Result<StagedReplace> {
    check(table, change)?;
    let metadata = table.metadata();
    let parent = metadata.current_snapshot();
    let staging = Staging {
        table,
        snapshot_id: new_snapshot_id(table),
        sequence_number: metadata.next_sequence_number(),
        commit_uuid: uuid::Uuid::new_v4(),
    };
    let mut manifests: Vec<ManifestFile> = match parent {
        Some(parent) => table
            .manifest_list_reader(parent)
            .load()
            .await?
            .entries()
            .to_vec(),
        None => Vec::new(),
    };
    let mut summary = SnapshotSummaryCollector::default();
    for (at, files) in [&change.deletes, &change.data].into_iter().enumerate() {
        if let Some(manifest) = staging.manifest(at, files, &mut summary).await? {
            manifests.insert(0, manifest);
        }
    }
    let parent_id = parent.map(|p| p.snapshot_id());
    let list_path = staging.manifest_list(parent_id, manifests).await?;
    let mut properties = totals(summary.build(), parent);
    properties.extend(change.properties.clone());
    let operation = match (change.data.is_empty(), change.deletes.is_empty()) {
        (false, true) => Operation::Append,
        (true, false) => Operation::Delete,
        _ => Operation::Overwrite,
    };
    let snapshot = Snapshot::builder()
        .with_snapshot_id(staging.snapshot_id)
        .with_parent_snapshot_id(parent_id)
        .with_sequence_number(staging.sequence_number)
        .with_timestamp_ms(now_ms.max(metadata.last_updated_ms()))
        .with_manifest_list(list_path)
        .with_schema_id(metadata.current_schema_id())
        .with_summary(Summary {
            operation,
            additional_properties: properties,
        })
        .build();
    Ok(commit_on_main(table, snapshot, parent_id))
}

/// A row-delta snapshot being written.
struct Staging<'a> {
    table: &'a Table,
    snapshot_id: i64,
    sequence_number: i64,
    commit_uuid: uuid::Uuid,
}

impl Staging<'_> {
    /// The manifest (number `at`) adding `files`, all of one content (data, or
    /// position deletes), at the snapshot's sequence number; `None` for no file.
    async fn manifest(
        &self,
        at: usize,
        files: &[DataFile],
        summary: &mut SnapshotSummaryCollector,
    ) -> Result<Option<ManifestFile>> {
        let Some(first) = files.first() else {
            return Ok(None);
        };
        let metadata = self.table.metadata();
        let (schema, spec) = (
            metadata.current_schema().clone(),
            metadata.default_partition_spec().clone(),
        );
        let builder = ManifestWriterBuilder::new(
            self.table.file_io().new_output(format!(
                "{}/metadata/{}-m{at}.avro",
                metadata.location(),
                self.commit_uuid
            ))?,
            Some(self.snapshot_id),
            schema.clone(),
            spec.as_ref().clone(),
        );
        let mut writer = match first.content_type() {
            DataContentType::Data => builder.build_v2_data(),
            _ => builder.build_v2_deletes(),
        };
        for file in files {
            summary.add_file(file, schema.clone(), spec.clone());
            writer.add_file(file.clone(), self.sequence_number)?;
        }
        Ok(Some(writer.write_manifest_file().await?))
    }

    /// Writes the manifest list of `manifests`; returns its path.
    async fn manifest_list(
        &self,
        parent_id: Option<i64>,
        manifests: Vec<ManifestFile>,
    ) -> Result<String> {
        let path = format!(
            "{}/metadata/snap-{}-0-{}.avro",
            self.table.metadata().location(),
            self.snapshot_id,
            self.commit_uuid
        );
        let mut list = ManifestListWriter::v2(
            self.table.file_io().new_output(&path)?.writer().await?,
            self.snapshot_id,
            parent_id,
            self.sequence_number,
        );
        list.add_manifests(manifests.into_iter())?;
        list.close().await?;
        Ok(path)
    }
}

/// `added` (a snapshot's own summary) with the totals: the parent's plus what it adds,
/// less what it removes.
fn totals(
    mut added: HashMap<String, String>,
    parent: Option<&iceberg::spec::SnapshotRef>,
) -> HashMap<String, String> {
    let previous = parent.map(|p| &p.summary().additional_properties);
    let count = |map: &HashMap<String, String>, key: &str| {
        map.get(key)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    for (total, plus, minus) in TOTALS {
        let before = previous.map_or(0, |p| count(p, total));
        let after = (before + count(&added, plus)).saturating_sub(count(&added, minus));
        added.insert(total.to_owned(), after.to_string());
    }
    added
}

/// Refuses what a row delta cannot commit.
fn check(table: &Table, change: &RowDelta) -> Result<()> {
    let invalid = |reason: String| Err(Error::new(ErrorKind::DataInvalid, reason));
    if table.metadata().format_version() != FormatVersion::V2 {
        return invalid(format!(
            "position deletes need a format v2 table; this one is {} (v3 tables take deletion vectors)",
            table.metadata().format_version()
        ));
    }
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
    if let Some(file) = change
        .deletes
        .iter()
        .find(|f| f.content_type() != DataContentType::PositionDeletes)
    {
        return invalid(format!("{} is no position-delete file", file.file_path()));
    }
    Ok(())
}

//! Writing manifests for the snapshots iceberg-rust has no action for (`replace`,
//! `row_delta`): a writer in the table's format version, and a live entry of a
//! manifest being rewritten carried into the new one, EXISTING or DELETED, its
//! sequence numbers and the snapshot that added it kept; the manifest list and the
//! snapshot, a v3 one with its row range (row lineage).

use iceberg::spec::{
    DataFile, DataFileBuilder, FormatVersion, ManifestEntry, ManifestListWriter, ManifestWriter,
    ManifestWriterBuilder, PartitionSpecRef, Snapshot, SnapshotSummaryCollector, Summary,
};
use iceberg::table::Table;
use iceberg::{Error, ErrorKind, Result};

/// A writer of the manifest number `number` of the snapshot `snapshot_id` made by the
/// commit `commit_uuid` (under the table's `metadata/`), for data (or delete, with
/// `deletes`) files of `spec`, in `table`'s format version (v3's carry row lineage:
/// their first row ids are assigned when the manifest list is written).
pub(crate) fn manifest_writer(
    table: &Table,
    (commit_uuid, number): (uuid::Uuid, usize),
    snapshot_id: i64,
    spec: &PartitionSpecRef,
    deletes: bool,
) -> Result<ManifestWriter> {
    let metadata = table.metadata();
    let path = format!(
        "{}/metadata/{commit_uuid}-m{number}.avro",
        metadata.location()
    );
    let builder = ManifestWriterBuilder::new(
        table.file_io().new_output(path)?,
        Some(snapshot_id),
        metadata.current_schema().clone(),
        spec.as_ref().clone(),
    );
    Ok(
        match (metadata.format_version() >= FormatVersion::V3, deletes) {
            (true, true) => builder.build_v3_deletes(),
            (true, false) => builder.build_v3_data(),
            (false, true) => builder.build_v2_deletes(),
            (false, false) => builder.build_v2_data(),
        },
    )
}

/// The path of the manifest list of the snapshot `snapshot_id` made by the commit
/// `commit_uuid`.
pub(crate) fn manifest_list_path(
    table: &Table,
    snapshot_id: i64,
    commit_uuid: uuid::Uuid,
) -> String {
    format!(
        "{}/metadata/snap-{snapshot_id}-0-{commit_uuid}.avro",
        table.metadata().location()
    )
}

/// Writes the live `entry` of a manifest being rewritten into `writer`: DELETED when
/// `remove` (counted as removed in `summary`), else EXISTING; its data and file
/// sequence numbers kept, an existing one's adding snapshot too (`parent_id` where the
/// entry inherited it).
pub(crate) fn carry_entry(
    writer: &mut ManifestWriter,
    entry: &ManifestEntry,
    remove: bool,
    parent_id: i64,
    (summary, spec): (&mut SnapshotSummaryCollector, &PartitionSpecRef),
    table: &Table,
) -> Result<()> {
    let data_sequence = entry.sequence_number().ok_or_else(|| {
        Error::new(
            ErrorKind::DataInvalid,
            format!("{} has no sequence number", entry.file_path()),
        )
    })?;
    let file_sequence = entry.file_sequence_number.or(Some(data_sequence));
    if remove {
        let schema = table.metadata().current_schema().clone();
        summary.remove_file(entry.data_file(), schema, spec.clone());
        return writer.add_delete_file(entry.data_file().clone(), data_sequence, file_sequence);
    }
    writer.add_existing_file(
        entry.data_file().clone(),
        entry.snapshot_id().unwrap_or(parent_id),
        data_sequence,
        file_sequence,
    )
}

/// The manifest list writer at `path` of the snapshot `snapshot_id` (its parent,
/// its sequence number), in `table`'s format version: v3's assigns the first row id of
/// each data manifest that has none from the table's next row id.
pub(crate) async fn manifest_list_writer(
    table: &Table,
    path: &str,
    snapshot_id: i64,
    parent_id: Option<i64>,
    sequence_number: i64,
) -> Result<ManifestListWriter> {
    let output = table.file_io().new_output(path)?.writer().await?;
    let metadata = table.metadata();
    Ok(match metadata.format_version() >= FormatVersion::V3 {
        true => ManifestListWriter::v3(
            output,
            snapshot_id,
            parent_id,
            sequence_number,
            Some(metadata.next_row_id()),
        ),
        false => ManifestListWriter::v2(output, snapshot_id, parent_id, sequence_number),
    })
}

/// What a snapshot built here is made of.
pub(crate) struct SnapshotParts {
    /// Its id.
    pub snapshot_id: i64,
    /// Its parent's.
    pub parent_id: Option<i64>,
    /// Its sequence number.
    pub sequence_number: i64,
    /// When it is made.
    pub timestamp_ms: i64,
    /// Its manifest list's path.
    pub manifest_list: String,
    /// Its summary.
    pub summary: Summary,
    /// A v3 snapshot's row range: the table's next row id, and the rows the manifest
    /// list writer assigned ids to (`None` for v2).
    pub rows: Option<(u64, u64)>,
}

/// The rows `list` (written on `table`, not closed yet) assigned ids to, from the
/// table's next row id: a v3 snapshot's row range; `None` for v2.
pub(crate) fn row_range(table: &Table, list: &ManifestListWriter) -> Option<(u64, u64)> {
    let first = table.metadata().next_row_id();
    list.next_row_id()
        .map(|next| (first, next.saturating_sub(first)))
}

/// The snapshot of `parts`, on `table`'s current schema.
pub(crate) fn snapshot_of(table: &Table, parts: SnapshotParts) -> Snapshot {
    let builder = Snapshot::builder()
        .with_snapshot_id(parts.snapshot_id)
        .with_parent_snapshot_id(parts.parent_id)
        .with_sequence_number(parts.sequence_number)
        .with_timestamp_ms(parts.timestamp_ms.max(table.metadata().last_updated_ms()))
        .with_manifest_list(parts.manifest_list)
        .with_schema_id(table.metadata().current_schema_id())
        .with_summary(parts.summary);
    match parts.rows {
        Some((first_row_id, added_rows)) => {
            builder.with_row_range(first_row_id, added_rows).build()
        }
        None => builder.build(),
    }
}

/// `file` (a data file of the partition spec `spec_id`) with its first row id written
/// out: what an EXISTING or DELETED entry of a v3 manifest must carry (the format's
/// rule), since inheritance starts again in the manifest it is written to.
pub(crate) fn with_first_row_id(
    file: &DataFile,
    spec_id: i32,
    first_row_id: i64,
) -> Result<DataFile> {
    let mut builder = DataFileBuilder::default();
    builder
        .content(file.content_type())
        .file_path(file.file_path().to_owned())
        .file_format(file.file_format())
        .partition(file.partition().clone())
        .partition_spec_id(spec_id)
        .record_count(file.record_count())
        .file_size_in_bytes(file.file_size_in_bytes())
        .column_sizes(file.column_sizes().clone())
        .value_counts(file.value_counts().clone())
        .null_value_counts(file.null_value_counts().clone())
        .nan_value_counts(file.nan_value_counts().clone())
        .lower_bounds(file.lower_bounds().clone())
        .upper_bounds(file.upper_bounds().clone())
        .key_metadata(file.key_metadata().map(<[u8]>::to_vec))
        .split_offsets(file.split_offsets().map(<[i64]>::to_vec))
        .equality_ids(file.equality_ids())
        .first_row_id(Some(first_row_id))
        .referenced_data_file(file.referenced_data_file())
        .content_offset(file.content_offset())
        .content_size_in_bytes(file.content_size_in_bytes());
    if let Some(order) = file.sort_order_id() {
        builder.sort_order_id(order);
    }
    builder
        .build()
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("{}: {e}", file.file_path())))
}

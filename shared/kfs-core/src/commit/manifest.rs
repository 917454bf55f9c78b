//! Writing manifests for the snapshots iceberg-rust has no action for (`replace`,
//! `row_delta`): a writer in the table's format version, and a live entry of a
//! manifest being rewritten carried into the new one, EXISTING or DELETED, its
//! sequence numbers and the snapshot that added it kept; the manifest list and the
//! snapshot, a v3 one with its row range (row lineage).

use iceberg::spec::{
    DataFile, DataFileBuilder, FormatVersion, Literal, ManifestEntry, ManifestFile,
    ManifestListWriter, ManifestWriter, ManifestWriterBuilder, PartitionSpecRef, SchemaRef,
    Snapshot, Struct, StructType, Summary,
};
use iceberg::table::Table;
use iceberg::{Error, ErrorKind, Result};

use crate::commit::summary::{FileSummary, widened};

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
) -> Result<TypedManifestWriter> {
    let metadata = table.metadata();
    let path = format!(
        "{}/metadata/{commit_uuid}-m{number}.avro",
        metadata.location()
    );
    // The current schema, unless the spec no longer binds it (an older spec whose
    // source column was dropped since): then the newest schema it binds, as the
    // manifests of that spec were written with.
    let mut schemas: Vec<&SchemaRef> = metadata.schemas_iter().collect();
    schemas.sort_by_key(|schema| std::cmp::Reverse(schema.schema_id()));
    let schema = std::iter::once(metadata.current_schema())
        .chain(schemas)
        .find(|schema| spec.partition_type(schema).is_ok())
        .unwrap_or(metadata.current_schema());
    let types = spec.partition_type(schema).ok();
    let builder = ManifestWriterBuilder::new(
        table.file_io().new_output(path)?,
        Some(snapshot_id),
        schema.clone(),
        spec.as_ref().clone(),
    );
    let writer = match (metadata.format_version() >= FormatVersion::V3, deletes) {
        (true, true) => builder.build_v3_deletes(),
        (true, false) => builder.build_v3_data(),
        (false, true) => builder.build_v2_deletes(),
        (false, false) => builder.build_v2_data(),
    };
    Ok(TypedManifestWriter {
        writer,
        spec_id: spec.spec_id(),
        types,
    })
}

/// A manifest writer that writes each entry's partition values in the manifest's
/// partition type (its spec's, for the schema it is written with): a value of a source
/// column promoted since its file was written (int to long, float to double: by our
/// JSON widening, or another engine) is promoted too, since iceberg-rust refuses a
/// value of another type than the manifest's.
pub(crate) struct TypedManifestWriter {
    writer: ManifestWriter,
    spec_id: i32,
    types: Option<StructType>,
}

impl TypedManifestWriter {
    /// Adds `file` as ADDED at the data sequence number `sequence_number`.
    pub(crate) fn add_file(&mut self, file: DataFile, sequence_number: i64) -> Result<()> {
        let file = self.typed(file)?;
        self.writer.add_file(file, sequence_number)
    }

    /// Adds `file` as EXISTING, added by `snapshot_id`, with its sequence numbers.
    pub(crate) fn add_existing_file(
        &mut self,
        file: DataFile,
        snapshot_id: i64,
        sequence_number: i64,
        file_sequence_number: Option<i64>,
    ) -> Result<()> {
        let file = self.typed(file)?;
        self.writer
            .add_existing_file(file, snapshot_id, sequence_number, file_sequence_number)
    }

    /// Adds `file` as DELETED, with its sequence numbers.
    pub(crate) fn add_delete_file(
        &mut self,
        file: DataFile,
        sequence_number: i64,
        file_sequence_number: Option<i64>,
    ) -> Result<()> {
        let file = self.typed(file)?;
        self.writer
            .add_delete_file(file, sequence_number, file_sequence_number)
    }

    /// Writes the manifest.
    pub(crate) async fn write_manifest_file(self) -> Result<ManifestFile> {
        self.writer.write_manifest_file().await
    }

    /// `file`, its partition values promoted to the manifest's types where they are
    /// of a type the source column was promoted from.
    fn typed(&self, file: DataFile) -> Result<DataFile> {
        let Some(types) = &self.types else {
            return Ok(file);
        };
        match promoted(file.partition(), types) {
            Some(partition) => copy_of(&file, self.spec_id, file.first_row_id(), partition),
            None => Ok(file),
        }
    }
}

/// `partition` with each value of a type its field's type was promoted from (int to
/// long, float to double) promoted; `None` when none is.
fn promoted(partition: &Struct, types: &StructType) -> Option<Struct> {
    let (fields, values) = (types.fields(), partition.fields());
    if values.len() != fields.len() {
        return None;
    }
    let mut changed = false;
    let promoted: Vec<Option<Literal>> = values
        .iter()
        .zip(fields)
        .map(|(value, field)| match widened(value) {
            Some((wider, ty)) if field.field_type.as_primitive_type() == Some(&ty) => {
                changed = true;
                Some(wider)
            }
            _ => value.clone(),
        })
        .collect();
    changed.then(|| Struct::from_iter(promoted))
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
/// `remove` (counted as removed in `summary`, of the spec `spec_id`), else EXISTING;
/// its data and file sequence numbers kept, an existing one's adding snapshot too
/// (`parent_id` where the entry inherited it).
pub(crate) fn carry_entry(
    writer: &mut TypedManifestWriter,
    entry: &ManifestEntry,
    remove: bool,
    parent_id: i64,
    (summary, spec_id): (&mut FileSummary, i32),
) -> Result<()> {
    let data_sequence = entry.sequence_number().ok_or_else(|| {
        Error::new(
            ErrorKind::DataInvalid,
            format!("{} has no sequence number", entry.file_path()),
        )
    })?;
    let file_sequence = entry.file_sequence_number.or(Some(data_sequence));
    if remove {
        summary.count(entry.data_file(), spec_id, false);
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
    copy_of(file, spec_id, Some(first_row_id), file.partition().clone())
}

/// `file` of the partition spec `spec_id`, with `first_row_id` and `partition`.
fn copy_of(
    file: &DataFile,
    spec_id: i32,
    first_row_id: Option<i64>,
    partition: Struct,
) -> Result<DataFile> {
    let mut builder = DataFileBuilder::default();
    builder
        .content(file.content_type())
        .file_path(file.file_path().to_owned())
        .file_format(file.file_format())
        .partition(partition)
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
        .first_row_id(first_row_id)
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

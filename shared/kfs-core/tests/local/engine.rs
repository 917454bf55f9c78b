//! Commits as another engine writing deletes would (Flink's equality deletes, a v3
//! engine's deletion vectors): a delete snapshot on `main` adding one delete manifest,
//! every parent manifest kept, v2 or v3 by the table's format (v3: iceberg-rust's v3
//! manifest and list writers, row lineage carried).

use std::collections::HashMap;

use iceberg::TableUpdate;
use iceberg::spec::{
    DataFile, FormatVersion, ManifestListWriter, ManifestWriterBuilder, Operation, Snapshot,
    SnapshotReference, SnapshotRetention, Summary,
};
use iceberg::table::Table;
use kfs_core::TableSwap;

use super::{BoxError, Local};

/// Commits `deletes` (delete files already written) to `table` as one delete
/// snapshot on `main`; returns the snapshot it replaced there.
pub async fn commit_deletes(
    local: &Local,
    table: &Table,
    deletes: Vec<DataFile>,
) -> Result<i64, BoxError> {
    let metadata = table.metadata();
    let v3 = metadata.format_version() >= FormatVersion::V3;
    let parent = metadata.current_snapshot().ok_or("no snapshot")?.clone();
    let (snapshot_id, sequence) = (parent.snapshot_id() + 1, metadata.next_sequence_number());
    let location = metadata.location();
    let builder = ManifestWriterBuilder::new(
        table
            .file_io()
            .new_output(format!("{location}/metadata/engine-{snapshot_id}-m0.avro"))?,
        Some(snapshot_id),
        metadata.current_schema().clone(),
        metadata.default_partition_spec().as_ref().clone(),
    );
    let mut manifest = match v3 {
        true => builder.build_v3_deletes(),
        false => builder.build_v2_deletes(),
    };
    for file in deletes {
        manifest.add_file(file, sequence)?;
    }
    let mut manifests = table
        .manifest_list_reader(&parent)
        .load()
        .await?
        .entries()
        .to_vec();
    manifests.push(manifest.write_manifest_file().await?);
    let list_path = format!("{location}/metadata/engine-snap-{snapshot_id}.avro");
    let output = table.file_io().new_output(&list_path)?.writer().await?;
    let first_row_id = metadata.next_row_id();
    let mut list = match v3 {
        true => ManifestListWriter::v3(
            output,
            snapshot_id,
            Some(parent.snapshot_id()),
            sequence,
            Some(first_row_id),
        ),
        false => ManifestListWriter::v2(output, snapshot_id, Some(parent.snapshot_id()), sequence),
    };
    list.add_manifests(manifests.into_iter())?;
    let assigned = list.next_row_id().map(|next| next - first_row_id);
    list.close().await?;
    let snapshot = Snapshot::builder()
        .with_snapshot_id(snapshot_id)
        .with_parent_snapshot_id(Some(parent.snapshot_id()))
        .with_sequence_number(sequence)
        .with_timestamp_ms(metadata.last_updated_ms() + 1)
        .with_manifest_list(list_path)
        .with_schema_id(metadata.current_schema_id())
        .with_summary(Summary {
            operation: Operation::Delete,
            additional_properties: HashMap::new(),
        });
    let snapshot = match assigned {
        Some(assigned) => snapshot.with_row_range(first_row_id, assigned).build(),
        None => snapshot.build(),
    };
    let updates = vec![TableUpdate::AddSnapshot { snapshot }, main_at(snapshot_id)];
    local.swap.commit(table, Vec::new(), updates).await?;
    Ok(parent.snapshot_id())
}

/// Writes `bytes` as the file `name` under `table`'s `data/`: its path and size.
pub async fn write_file(
    table: &Table,
    name: &str,
    bytes: Vec<u8>,
) -> Result<(String, u64), BoxError> {
    let path = format!("{}/data/{name}", table.metadata().location());
    let size = bytes.len() as u64;
    table
        .file_io()
        .new_output(&path)?
        .write(bytes.into())
        .await?;
    Ok((path, size))
}

/// The update pointing `main` at `snapshot_id`.
pub fn main_at(snapshot_id: i64) -> TableUpdate {
    TableUpdate::SetSnapshotRef {
        ref_name: "main".to_owned(),
        reference: SnapshotReference::new(snapshot_id, SnapshotRetention::branch(None, None, None)),
    }
}

//! The table's data files as the planners see them: live manifest entries (optionally
//! of one partition spec), the target file size, and a file's size and offset order.

use iceberg::Result;
use iceberg::spec::{DataFile, ManifestContentType, ManifestEntry};
use iceberg::table::Table;
use kfs_plan::compaction::FileStat;

use super::{OFFSET_FIELD_ID, PARTITION_FIELD_ID};

/// Table property of the target data file size.
pub const TARGET_FILE_SIZE_PROPERTY: &str = "write.target-file-size-bytes";
/// Default target data file size (512 MiB, what S3 Tables and Flink use).
pub const DEFAULT_TARGET_FILE_SIZE: u64 = 512 << 20;

/// The table's target file size (its property, else the default).
pub fn target_file_size(table: &Table) -> u64 {
    table
        .metadata()
        .properties()
        .get(TARGET_FILE_SIZE_PROPERTY)
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_TARGET_FILE_SIZE)
}

/// How the compaction planner sees a data file.
pub fn file_stat(file: &DataFile) -> FileStat {
    FileStat {
        path: file.file_path().to_owned(),
        bytes: data_bytes(file),
        partition: format!("{:?}", file.partition()),
        order: offset_order(file),
        deleted_rows: 0,
    }
}

/// The bytes of a file's column data (without footer and page indexes), what it adds
/// to a merged file; the file size when the file does not say.
fn data_bytes(file: &DataFile) -> u64 {
    let columns: u64 = file.column_sizes().values().sum();
    if columns == 0 {
        file.file_size_in_bytes()
    } else {
        columns.min(file.file_size_in_bytes())
    }
}

/// Where a file's records sit in the topic: its lowest Kafka partition and offset
/// (from the column bounds), so merged files keep offset order; the name otherwise.
fn offset_order(file: &DataFile) -> String {
    let bound = |field: i32| match file.lower_bounds().get(&field).map(|d| d.literal()) {
        Some(iceberg::spec::PrimitiveLiteral::Int(v)) => Some(i64::from(*v)),
        Some(iceberg::spec::PrimitiveLiteral::Long(v)) => Some(*v),
        _ => None,
    };
    match (bound(PARTITION_FIELD_ID), bound(OFFSET_FIELD_ID)) {
        (Some(partition), Some(offset)) => format!("{partition:011}-{offset:020}"),
        _ => file
            .file_path()
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_owned(),
    }
}

/// The live data files of the current snapshot, with their manifest entries.
pub async fn live_entries(table: &Table) -> Result<Vec<ManifestEntry>> {
    live_entries_in(table, None).await
}

/// The live data files of the current snapshot written in the partition spec
/// `spec_id` (all of them for `None`), with their manifest entries.
pub async fn live_entries_in(table: &Table, spec_id: Option<i32>) -> Result<Vec<ManifestEntry>> {
    let Some(snapshot) = table.metadata().current_snapshot() else {
        return Ok(Vec::new());
    };
    let list = table.manifest_list_reader(snapshot).load().await?;
    let mut live = Vec::new();
    for manifest in list.entries() {
        if manifest.content != ManifestContentType::Data
            || spec_id.is_some_and(|id| manifest.partition_spec_id != id)
        {
            continue;
        }
        let loaded = manifest.load_manifest(table.file_io()).await?;
        live.extend(
            loaded
                .entries()
                .iter()
                .filter(|e| e.is_alive())
                .map(|e| e.as_ref().clone()),
        );
    }
    Ok(live)
}

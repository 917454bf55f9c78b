//! Data files as the ledger records them: iceberg-rust's `DataFile` JSON plus the id of
//! the partition spec the file was written in, which that JSON leaves out (a manifest
//! knows it) and which a pending file needs once the table's spec has evolved.

use iceberg::spec::{
    DataFile, TableMetadata, deserialize_data_file_from_json, serialize_data_file_to_json,
};
use iceberg::{Error, ErrorKind, Result};

/// The field holding the file's partition spec id.
pub const SPEC_ID_FIELD: &str = "partition_spec_id";

fn spec_type(metadata: &TableMetadata, spec_id: i32) -> Result<iceberg::spec::StructType> {
    metadata
        .partition_spec_by_id(spec_id)
        .ok_or_else(|| {
            Error::new(
                ErrorKind::DataInvalid,
                format!("the table has no partition spec {spec_id}"),
            )
        })?
        .partition_type(metadata.current_schema())
}

/// `file`, written in the table's partition spec `spec_id`, as the ledger records it.
pub fn to_ledger(file: DataFile, spec_id: i32, metadata: &TableMetadata) -> Result<String> {
    let json = serialize_data_file_to_json(
        file,
        &spec_type(metadata, spec_id)?,
        metadata.format_version(),
    )?;
    let mut value: serde_json::Value = serde_json::from_str(&json)
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("data file JSON: {e}")))?;
    if let Some(object) = value.as_object_mut() {
        object.insert(SPEC_ID_FIELD.to_owned(), spec_id.into());
    }
    Ok(value.to_string())
}

/// A data file from the ledger's JSON, with the id of the spec it was written in (the
/// table's default spec for entries recorded before the id was; iceberg-rust 0.10.1
/// does not show a `DataFile`'s spec id).
pub fn from_ledger(json: &str, metadata: &TableMetadata) -> Result<(DataFile, i32)> {
    let spec_id = serde_json::from_str::<serde_json::Value>(json)
        .ok()
        .and_then(|value| value.get(SPEC_ID_FIELD)?.as_i64())
        .and_then(|id| i32::try_from(id).ok())
        .unwrap_or_else(|| metadata.default_partition_spec_id());
    let file = deserialize_data_file_from_json(
        json,
        spec_id,
        &spec_type(metadata, spec_id)?,
        metadata.current_schema(),
    )?;
    Ok((file, spec_id))
}

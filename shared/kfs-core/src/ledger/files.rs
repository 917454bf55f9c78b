//! Data files as the ledger records them: iceberg-rust's `DataFile` JSON plus the id of
//! the partition spec the file was written in, which that JSON leaves out (a manifest
//! knows it) and which a pending file needs once the table's spec has evolved.
//!
//! An entry holds its descriptions inline while they are small. A segment written
//! into many partition values (`identity(key)`) has one file, and one description of
//! a kilobyte or two, per value: past [`INLINE_DESCRIPTION_BYTES`] they are written as
//! a JSON array to object storage beside the files they describe, and the entry holds
//! one pointer (`@<location>`) instead, so no ledger item outgrows its store
//! (DynamoDB's stop at 400 KB).

use iceberg::io::FileIO;
use iceberg::spec::{
    DataFile, TableMetadata, deserialize_data_file_from_json, serialize_data_file_to_json,
};
use iceberg::{Error, ErrorKind, Result};

/// Most bytes of descriptions an entry holds inline; more go to object storage.
pub const INLINE_DESCRIPTION_BYTES: usize = 256 * 1024;

/// What starts a stored description that points at the descriptions' location (a
/// description itself is a JSON object, `{`).
const POINTER: char = '@';

/// Where an entry's descriptions were written, when it holds a pointer.
pub fn spilled_to(stored: &[String]) -> Option<&str> {
    match stored {
        [only] => only.strip_prefix(POINTER),
        _ => None,
    }
}

/// `descriptions` as an entry stores them: as they are while they fit
/// [`INLINE_DESCRIPTION_BYTES`], else written to `location` (a JSON array, through
/// `file_io`) and replaced by a pointer to it.
pub async fn spill(
    descriptions: Vec<String>,
    file_io: &FileIO,
    location: &str,
) -> Result<Vec<String>> {
    let bytes: usize = descriptions.iter().map(String::len).sum();
    if bytes <= INLINE_DESCRIPTION_BYTES {
        return Ok(descriptions);
    }
    let json = serde_json::to_vec(&descriptions)
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("descriptions: {e}")))?;
    file_io.new_output(location)?.write(json.into()).await?;
    Ok(vec![format!("{POINTER}{location}")])
}

/// The descriptions an entry stores: read back from object storage when it holds a
/// pointer ([`spill`]).
pub async fn resolve(stored: &[String], file_io: &FileIO) -> Result<Vec<String>> {
    let Some(location) = spilled_to(stored) else {
        return Ok(stored.to_vec());
    };
    let bytes = file_io.new_input(location)?.read().await?;
    serde_json::from_slice(&bytes).map_err(|e| {
        Error::new(
            ErrorKind::DataInvalid,
            format!("data file descriptions at {location}: {e}"),
        )
    })
}

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

//! Parquet writer settings of data files, from the table's properties: its codec and
//! level, row group bounds, and no dictionary for the columns unique per record.

use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;
use std::collections::HashMap;

use crate::table::compression;

/// Parquet settings of data files: the table's compression (`compression`, zstd
/// level 3 by default), row groups of at most 1 Mi rows / 128 MiB, and no dictionary for
/// the columns that are unique per record (a dictionary there is built only to be
/// abandoned).
pub fn writer_properties(
    table_properties: &HashMap<String, String>,
) -> iceberg::Result<WriterProperties> {
    let mut builder = WriterProperties::builder()
        .set_compression(compression(table_properties)?)
        .set_max_row_group_row_count(Some(1 << 20))
        .set_max_row_group_bytes(Some(128 << 20));
    for unique in ["record_id", "offset", "timestamp_ms", "timestamp"] {
        builder = builder.set_column_dictionary_enabled(ColumnPath::from(unique), false);
    }
    Ok(builder.build())
}

//! Parquet data files of kfs-iceberg: the writer settings a table's properties ask for
//! (codec and level, row group bounds), the file writer of conversion (columns encoded
//! in parallel, Iceberg metrics from the footer), conforming batches of older schemas
//! to the table's columns, the row-group merge shared by coalescing (at commit) and
//! compaction, and the delete files of merge-on-read deletes (position deletes, and
//! deletion vectors in Puffin files). Knows Iceberg, Parquet and Puffin, nothing of
//! segments, ledgers or catalogs.
//!
//! Modules: `properties` (writer settings from table properties), `encode` (a row
//! group's columns encoded in parallel), `metrics` (Iceberg metrics from a footer),
//! `conform` (batches widened to the table's schema), `writer` (the file writer),
//! `merge` (the row-group merge, a data file write through its failpoint), `fold`
//! (data files rewritten without the rows position deletes delete), `deletes`
//! (position-delete files of merge-on-read deletes), `vectors` (deletion vectors in
//! Puffin files, v3's merge-on-read deletes).

#[cfg(test)]
mod bounds_props;
mod conform;
mod deletes;
mod encode;
mod fold;
mod merge;
mod metrics;
mod properties;
mod vectors;
mod writer;

pub use conform::conform_batch;
pub use deletes::{
    DELETE_FILE_PATH_FIELD_ID, DELETE_POS_FIELD_ID, PositionDeletes, position_delete_schema,
    write_position_deletes,
};
pub use fold::{LAST_UPDATED_FIELD_ID, ROW_ID_FIELD_ID, RowLineage, rewrite_without};
pub use merge::{MergeStats, merge_data_files};
pub use properties::{
    COMPRESSION_CODEC_PROPERTY, COMPRESSION_LEVEL_PROPERTY, compression, writer_properties,
};
pub use vectors::{
    VectorBlob, VectorError, deletion_vector, puffin_of_vectors, read_deletion_vector,
    vector_delete_file,
};
#[cfg(any(test, feature = "test-support"))]
pub use writer::testing;
pub use writer::{ParquetFileWriter, ParquetFileWriterBuilder};

use std::sync::Arc;

/// The Arrow schema (with Parquet field ids) data files of `schema` are written with.
pub fn arrow_schema(schema: &iceberg::spec::Schema) -> iceberg::Result<arrow_schema::SchemaRef> {
    Ok(Arc::new(iceberg::arrow::schema_to_arrow_schema(schema)?))
}

/// Turns a Parquet error into an Iceberg one of `kind`, naming what failed (`what`: a
/// file or a step).
fn parquet_error(
    kind: iceberg::ErrorKind,
    what: &str,
) -> impl Fn(parquet::errors::ParquetError) -> iceberg::Error + '_ {
    move |e| iceberg::Error::new(kind, format!("{what}: {e}"))
}

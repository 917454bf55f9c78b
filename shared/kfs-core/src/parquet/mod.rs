//! Parquet data files: the writer settings a table's properties ask for, the file
//! writer of conversion (columns encoded in parallel, metrics from the footer), and the
//! row-group merge shared by coalescing (at commit) and compaction, reading files of
//! older schemas with the table's current columns.

#[cfg(test)]
mod bounds_props;
mod conform;
mod encode;
mod merge;
mod metrics;
mod properties;
mod writer;

pub use conform::conform_batch;
pub use merge::merge_data_files;
pub use properties::writer_properties;
pub(crate) use writer::ParquetFileWriterBuilder;
#[cfg(test)]
pub(crate) use writer::tests;

/// Turns a Parquet error into an Iceberg one of `kind`, naming what failed (`what`: a
/// file or a step).
fn parquet_error(
    kind: iceberg::ErrorKind,
    what: &str,
) -> impl Fn(parquet::errors::ParquetError) -> iceberg::Error + '_ {
    move |e| iceberg::Error::new(kind, format!("{what}: {e}"))
}

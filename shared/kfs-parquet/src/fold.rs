//! Rewriting data files without the rows position deletes delete: how compaction folds
//! merge-on-read deletes. Every input is decoded (its row groups hold deleted rows, so
//! none can be copied whole), conformed to the table's schema, filtered by position and
//! written with the table's writer settings; the new file's metrics come from what was
//! written, since the inputs' counts include the deleted rows.

use crate::{ParquetFileWriterBuilder, PositionDeletes, conform_batch};
use arrow_array::{BooleanArray, RecordBatch};
use iceberg::spec::{DataContentType, DataFile};
use iceberg::table::Table;
use iceberg::writer::file_writer::location_generator::{
    DefaultLocationGenerator, LocationGenerator,
};
use iceberg::writer::file_writer::{FileWriter, FileWriterBuilder};
use iceberg::{Error, ErrorKind, Result};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

/// Rewrites `inputs` (data files of `table`, of one partition value of its default
/// spec) into one data file named `{stem}.parquet` in the table's data directory,
/// without the rows `deletes` names (a data file write, through its failpoint); rows
/// keep their order. `None` when every row is deleted: no file is written.
pub async fn rewrite_without(
    table: &Table,
    inputs: &[&DataFile],
    deletes: &PositionDeletes,
    stem: &str,
) -> Result<Option<DataFile>> {
    kfs_failpoint::around(
        kfs_failpoint::Failpoint::DataFileWrite,
        rewrite(table, inputs, deletes, stem),
    )
    .await
}

async fn rewrite(
    table: &Table,
    inputs: &[&DataFile],
    deletes: &PositionDeletes,
    stem: &str,
) -> Result<Option<DataFile>> {
    let first = inputs
        .first()
        .ok_or_else(|| Error::new(ErrorKind::DataInvalid, "nothing to rewrite"))?;
    let metadata = table.metadata();
    let path = DefaultLocationGenerator::new(metadata)?
        .generate_location(None, &format!("{stem}.parquet"));
    let schema = metadata.current_schema().clone();
    let arrow = crate::arrow_schema(&schema)?;
    let builder =
        ParquetFileWriterBuilder::new(crate::writer_properties(metadata.properties())?, schema)?;
    let mut writer = builder.build(table.file_io().new_output(&path)?).await?;
    let mut written = 0usize;
    for input in inputs {
        let name = input.file_path();
        let invalid =
            |e: &dyn std::fmt::Display| Error::new(ErrorKind::DataInvalid, format!("{name}: {e}"));
        let bytes = table.file_io().new_input(name)?.read().await?;
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .map_err(|e| invalid(&e))?
            .build()
            .map_err(|e| invalid(&e))?;
        let deleted = deletes.get(name);
        let mut position = 0i64;
        for batch in reader {
            let batch = conform_batch(&batch.map_err(|e| invalid(&e))?, &arrow)
                .map_err(|e| invalid(&format!("does not match the table schema: {e}")))?;
            let rows = i64::try_from(batch.num_rows()).unwrap_or(i64::MAX);
            let kept = match deleted {
                Some(deleted) => without(&batch, position, deleted).map_err(|e| invalid(&e))?,
                None => batch,
            };
            position = position.saturating_add(rows);
            if kept.num_rows() > 0 {
                written += kept.num_rows();
                writer.write(&kept).await?;
            }
        }
    }
    if written == 0 {
        return Ok(None);
    }
    let built = writer.close().await?;
    let [mut file] = <[_; 1]>::try_from(built).map_err(|_| {
        Error::new(
            ErrorKind::Unexpected,
            format!("{path}: the writer wrote no file, or several"),
        )
    })?;
    file.content(DataContentType::Data)
        .partition_spec_id(metadata.default_partition_spec_id())
        .partition(first.partition().clone());
    file.build()
        .map(Some)
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("{path}: {e}")))
}

/// The rows of `batch` (its first at file position `first`) whose positions `deleted`
/// does not hold.
fn without(
    batch: &RecordBatch,
    first: i64,
    deleted: &std::collections::BTreeSet<i64>,
) -> std::result::Result<RecordBatch, arrow_schema::ArrowError> {
    let end = first.saturating_add(i64::try_from(batch.num_rows()).unwrap_or(i64::MAX));
    if deleted.range(first..end).next().is_none() {
        return Ok(batch.clone());
    }
    let keep: BooleanArray = (first..end).map(|p| Some(!deleted.contains(&p))).collect();
    arrow_select::filter::filter_record_batch(batch, &keep)
}

//! Rewriting data files without the rows position deletes delete: how compaction folds
//! merge-on-read deletes. Every input is decoded (its row groups hold deleted rows, so
//! none can be copied whole), conformed to the table's schema, filtered by position and
//! written with the table's writer settings; the new file's metrics come from what was
//! written, since the inputs' counts include the deleted rows.
//!
//! A format v3 table's rows keep their lineage: the rewritten file carries each row's
//! `_row_id` and `_last_updated_sequence_number` written out (the input's own values,
//! else what the row inherits: its file's first row id plus its position, its file's
//! data sequence number), as the format asks of any writer that moves rows.

use crate::{ParquetFileWriterBuilder, PositionDeletes, conform_batch};
use arrow_array::{Array, ArrayRef, BooleanArray, Int64Array, RecordBatch};
use iceberg::spec::{
    DataContentType, DataFile, FormatVersion, NestedField, PrimitiveType, Schema, Type,
};
use iceberg::table::Table;
use iceberg::writer::file_writer::location_generator::{
    DefaultLocationGenerator, LocationGenerator,
};
use iceberg::writer::file_writer::{FileWriter, FileWriterBuilder};
use iceberg::{Error, ErrorKind, Result};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use std::collections::HashMap;
use std::sync::Arc;

/// The field id of the `_row_id` metadata column (row lineage).
pub const ROW_ID_FIELD_ID: i32 = 2_147_483_540;
/// The field id of the `_last_updated_sequence_number` metadata column.
pub const LAST_UPDATED_FIELD_ID: i32 = 2_147_483_539;

/// Where the lineage of a v3 data file's rows starts: the first row id it has or
/// inherits, and its data sequence number (what a row whose own values are null
/// inherits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowLineage {
    /// The first row's `_row_id`; the row at position `p` has this plus `p`.
    pub first_row_id: i64,
    /// The file's data sequence number.
    pub sequence_number: i64,
}

/// Rewrites `inputs` (data files of `table`, of one partition value of its default
/// spec) into one data file named `{stem}.parquet` in the table's data directory,
/// without the rows `deletes` names (a data file write, through its failpoint); rows
/// keep their order. A v3 table's rows keep their lineage: `lineage` gives each
/// input's (an input without one keeps its rows' own values, nulls included). `None`
/// when every row is deleted: no file is written.
pub async fn rewrite_without(
    table: &Table,
    inputs: &[&DataFile],
    deletes: &PositionDeletes,
    (stem, lineage): (&str, &HashMap<String, RowLineage>),
) -> Result<Option<DataFile>> {
    kfs_failpoint::around(
        kfs_failpoint::Failpoint::DataFileWrite,
        rewrite(table, inputs, deletes, stem, lineage),
    )
    .await
}

/// `schema` with the two row lineage columns after its own.
fn with_lineage_columns(schema: &Schema) -> Result<Schema> {
    let mut fields = schema.as_struct().fields().to_vec();
    for (id, name) in [
        (ROW_ID_FIELD_ID, "_row_id"),
        (LAST_UPDATED_FIELD_ID, "_last_updated_sequence_number"),
    ] {
        fields.push(Arc::new(NestedField::optional(
            id,
            name,
            Type::Primitive(PrimitiveType::Long),
        )));
    }
    Schema::builder()
        .with_schema_id(schema.schema_id())
        .with_identifier_field_ids(schema.identifier_field_ids())
        .with_fields(fields)
        .build()
}

/// `batch` (conformed to a schema ending with the lineage columns; its first row at
/// position `first` of a file of lineage `lineage`) with every null lineage value
/// replaced by what the row inherits.
fn inherit_lineage(batch: &RecordBatch, first: i64, lineage: RowLineage) -> Result<RecordBatch> {
    let columns = batch.num_columns();
    let invalid =
        |what: &str| Error::new(ErrorKind::DataInvalid, format!("{what}: not a long column"));
    let long = |at: usize, what: &str| {
        batch
            .column(at)
            .as_any()
            .downcast_ref::<Int64Array>()
            .cloned()
            .ok_or_else(|| invalid(what))
    };
    let (ids, sequences) = match columns.checked_sub(2) {
        Some(at) => (
            long(at, "_row_id")?,
            long(at + 1, "_last_updated_sequence_number")?,
        ),
        None => return Err(invalid("row lineage")),
    };
    let overflow = || {
        Error::new(
            ErrorKind::DataInvalid,
            format!(
                "row lineage: first row id {} plus position {first} is past 2^63",
                lineage.first_row_id
            ),
        )
    };
    let row_ids: Int64Array = (0..batch.num_rows())
        .map(|row| match ids.is_valid(row) {
            true => Ok(Some(ids.value(row))),
            false => i64::try_from(row)
                .ok()
                .and_then(|row| lineage.first_row_id.checked_add(first)?.checked_add(row))
                .map(Some)
                .ok_or_else(overflow),
        })
        .collect::<Result<_>>()?;
    let updated: Int64Array = (0..batch.num_rows())
        .map(|row| match sequences.is_valid(row) {
            true => Some(sequences.value(row)),
            false => Some(lineage.sequence_number),
        })
        .collect();
    let mut filled: Vec<ArrayRef> = batch.columns()[..columns - 2].to_vec();
    filled.push(Arc::new(row_ids));
    filled.push(Arc::new(updated));
    RecordBatch::try_new(batch.schema(), filled)
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("row lineage: {e}")))
}

async fn rewrite(
    table: &Table,
    inputs: &[&DataFile],
    deletes: &PositionDeletes,
    stem: &str,
    lineage: &HashMap<String, RowLineage>,
) -> Result<Option<DataFile>> {
    let first = inputs
        .first()
        .ok_or_else(|| Error::new(ErrorKind::DataInvalid, "nothing to rewrite"))?;
    let metadata = table.metadata();
    let path = DefaultLocationGenerator::new(metadata)?
        .generate_location(None, &format!("{stem}.parquet"));
    let lineaged = metadata.format_version() >= FormatVersion::V3;
    let schema = match lineaged {
        true => Arc::new(with_lineage_columns(metadata.current_schema())?),
        false => metadata.current_schema().clone(),
    };
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
        // A v3 file without lineage (its manifest has no first row id yet, as right
        // after an upgrade) keeps its rows' nulls: they have none to carry.
        let inherited = lineage.get(name).copied().filter(|_| lineaged);
        let mut position = 0i64;
        for batch in reader {
            let batch = conform_batch(&batch.map_err(|e| invalid(&e))?, &arrow)
                .map_err(|e| invalid(&format!("does not match the table schema: {e}")))?;
            let batch = match inherited {
                Some(lineage) => inherit_lineage(&batch, position, lineage)?,
                None => batch,
            };
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

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_schema::{DataType, Field, Schema as ArrowSchema};

    type TestResult<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

    /// A batch of a value column and the two lineage columns.
    fn batch(ids: Vec<Option<i64>>, updated: Vec<Option<i64>>) -> TestResult<RecordBatch> {
        let values: Vec<i64> = (0..ids.len() as i64).collect();
        let schema = Arc::new(ArrowSchema::new(vec![
            Field::new("value", DataType::Int64, false),
            Field::new("_row_id", DataType::Int64, true),
            Field::new("_last_updated_sequence_number", DataType::Int64, true),
        ]));
        Ok(RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(values)),
                Arc::new(Int64Array::from(ids)),
                Arc::new(Int64Array::from(updated)),
            ],
        )?)
    }

    fn longs(batch: &RecordBatch, at: usize) -> Vec<Option<i64>> {
        let column = batch.column(at).as_any().downcast_ref::<Int64Array>();
        column.map(|c| c.iter().collect()).unwrap_or_default()
    }

    #[test]
    fn a_row_keeps_its_own_lineage_and_inherits_what_it_lacks() -> TestResult {
        let lineage = RowLineage {
            first_row_id: 100,
            sequence_number: 7,
        };
        let input = batch(vec![None, Some(5), None], vec![Some(3), None, None])?;
        // The batch starts at position 10 of its file.
        let filled = inherit_lineage(&input, 10, lineage)?;
        assert_eq!(longs(&filled, 1), vec![Some(110), Some(5), Some(112)]);
        assert_eq!(longs(&filled, 2), vec![Some(3), Some(7), Some(7)]);
        assert_eq!(longs(&filled, 0), longs(&input, 0));
        Ok(())
    }

    /// A first row id near 2^63 (another engine's hostile metadata): an error naming
    /// the id and the position, never a wrapped id shared with another row.
    #[test]
    fn a_row_id_past_two_to_the_63_is_an_error_not_a_wrapped_id() -> TestResult {
        let lineage = RowLineage {
            first_row_id: i64::MAX - 1,
            sequence_number: 1,
        };
        let input = batch(vec![None, None, None], vec![None, None, None])?;
        let error = match inherit_lineage(&input, 0, lineage) {
            Ok(filled) => return Err(format!("overflow accepted: {:?}", longs(&filled, 1)).into()),
            Err(error) => error,
        };
        assert!(
            error.to_string().contains(&format!("{}", i64::MAX - 1)),
            "{error}"
        );
        assert!(error.to_string().contains("past 2^63"), "{error}");
        // Rows that carry their own ids need nothing inherited, however high.
        let own = batch(vec![Some(i64::MAX); 3], vec![Some(1); 3])?;
        let filled = inherit_lineage(&own, i64::MAX, lineage)?;
        assert_eq!(longs(&filled, 1), vec![Some(i64::MAX); 3]);
        Ok(())
    }

    #[test]
    fn a_batch_without_the_lineage_columns_is_refused() -> TestResult {
        let schema = Arc::new(ArrowSchema::new(vec![Field::new(
            "value",
            DataType::Utf8,
            false,
        )]));
        let strings = arrow_array::StringArray::from(vec!["a"]);
        let input = RecordBatch::try_new(schema, vec![Arc::new(strings)])?;
        let lineage = RowLineage {
            first_row_id: 0,
            sequence_number: 1,
        };
        assert!(inherit_lineage(&input, 0, lineage).is_err());
        Ok(())
    }
}

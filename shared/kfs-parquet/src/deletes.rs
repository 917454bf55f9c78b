//! Position-delete files (Iceberg v2 merge-on-read deletes): the rows a commit deletes,
//! as `(file_path, pos)` pairs in a Parquet file of the spec's reserved columns
//! (`file_path` 2147483546, `pos` 2147483545), sorted by path then position as the
//! spec requires, with the metrics readers prune by (a reader skips the delete file
//! for a data file outside its `file_path` bounds). Written through the data files'
//! own writer, so codec, row groups and metrics follow the table's settings.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use iceberg::io::FileIO;
use iceberg::spec::{DataContentType, DataFile, NestedField, PrimitiveType, Schema, Struct, Type};
use iceberg::writer::file_writer::{FileWriter, FileWriterBuilder};
use iceberg::{Error, ErrorKind, Result};
use parquet::file::properties::WriterProperties;

use crate::ParquetFileWriterBuilder;

/// The field id of a position-delete file's `file_path` column (reserved by the spec).
pub const DELETE_FILE_PATH_FIELD_ID: i32 = 2_147_483_546;
/// The field id of a position-delete file's `pos` column (reserved by the spec).
pub const DELETE_POS_FIELD_ID: i32 = 2_147_483_545;

/// Rows written per batch (bounded memory whatever the deletes' count).
const BATCH_ROWS: usize = 65_536;

/// The rows to delete: each data file's path (as the table's metadata has it) and the
/// positions (0-based row numbers) of its rows to delete. Ordered as the spec orders
/// a position-delete file.
pub type PositionDeletes = BTreeMap<String, BTreeSet<i64>>;

/// The schema of a position-delete file.
pub fn position_delete_schema() -> Result<Schema> {
    Schema::builder()
        .with_fields(vec![
            Arc::new(NestedField::required(
                DELETE_FILE_PATH_FIELD_ID,
                "file_path",
                Type::Primitive(PrimitiveType::String),
            )),
            Arc::new(NestedField::required(
                DELETE_POS_FIELD_ID,
                "pos",
                Type::Primitive(PrimitiveType::Long),
            )),
        ])
        .build()
}

/// Writes `deletes` to the position-delete file at `path` with `properties` (the
/// table's writer settings); returns its manifest entry's file, of partition
/// `partition` in spec `spec_id` (the partition of the data files it deletes from:
/// every one of them must be in it). `referenced_data_file` is set when it deletes
/// from one data file only. Refuses an empty set (a delete file deleting nothing) and
/// negative positions.
pub async fn write_position_deletes(
    io: &FileIO,
    path: &str,
    properties: WriterProperties,
    deletes: &PositionDeletes,
    spec_id: i32,
    partition: Struct,
) -> Result<DataFile> {
    let invalid = |reason: String| Error::new(ErrorKind::DataInvalid, format!("{path}: {reason}"));
    if deletes.values().all(BTreeSet::is_empty) {
        return Err(invalid("a position-delete file must delete a row".into()));
    }
    if let Some((file, pos)) = deletes
        .iter()
        .find_map(|(file, positions)| positions.first().filter(|p| **p < 0).map(|p| (file, *p)))
    {
        return Err(invalid(format!("{file}: negative position {pos}")));
    }
    let builder = ParquetFileWriterBuilder::new(properties, Arc::new(position_delete_schema()?))?;
    let mut writer = builder.build(io.new_output(path)?).await?;
    let arrow = crate::arrow_schema(&position_delete_schema()?)?;
    let mut pending: Vec<(&str, i64)> = Vec::with_capacity(BATCH_ROWS);
    let mut total = 0u64;
    // Plain loops, no iterator adaptor held across the writes: the future stays
    // provably `Send` wherever it is awaited.
    for (file, positions) in deletes {
        for &pos in positions {
            pending.push((file.as_str(), pos));
            if pending.len() == BATCH_ROWS {
                total += write_batch(&mut writer, &arrow, &mut pending).await?;
            }
        }
    }
    total += write_batch(&mut writer, &arrow, &mut pending).await?;
    let mut built = writer.close().await?;
    let [mut file] = <[_; 1]>::try_from(std::mem::take(&mut built))
        .map_err(|_| invalid("the writer wrote no file, or several".into()))?;
    let referenced: Vec<&String> = deletes
        .iter()
        .filter(|(_, positions)| !positions.is_empty())
        .map(|(file, _)| file)
        .collect();
    file.content(DataContentType::PositionDeletes)
        .partition_spec_id(spec_id)
        .partition(partition)
        .record_count(total);
    if let [only] = referenced.as_slice() {
        file.referenced_data_file(Some((*only).clone()));
    }
    file.build()
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("{path}: {e}")))
}

/// Writes the rows `pending` holds as one batch and empties it; returns how many.
async fn write_batch<W: FileWriter>(
    writer: &mut W,
    schema: &arrow_schema::SchemaRef,
    pending: &mut Vec<(&str, i64)>,
) -> Result<u64> {
    if pending.is_empty() {
        return Ok(0);
    }
    let paths: ArrayRef = Arc::new(StringArray::from_iter_values(pending.iter().map(|r| r.0)));
    let positions: ArrayRef = Arc::new(Int64Array::from_iter_values(pending.iter().map(|r| r.1)));
    let batch = RecordBatch::try_new(schema.clone(), vec![paths, positions])
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("position deletes: {e}")))?;
    writer.write(&batch).await?;
    let rows = pending.len() as u64;
    pending.clear();
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    type Fallible<T> = std::result::Result<T, Box<dyn std::error::Error>>;

    #[tokio::test]
    async fn a_delete_file_holds_the_sorted_pairs_in_the_reserved_columns() -> Fallible<()> {
        let io = FileIO::new_with_memory();
        let path = "memory://t/deletes.parquet";
        let deletes: PositionDeletes = BTreeMap::from([
            ("file:///wh/b.parquet".to_owned(), BTreeSet::from([7, 2])),
            (
                "file:///wh/a.parquet".to_owned(),
                BTreeSet::from([0, 100_000]),
            ),
            ("file:///wh/c.parquet".to_owned(), BTreeSet::new()),
        ]);
        let file = write_position_deletes(
            &io,
            path,
            WriterProperties::default(),
            &deletes,
            0,
            Struct::empty(),
        )
        .await?;
        assert_eq!(file.content_type(), DataContentType::PositionDeletes);
        assert_eq!(file.record_count(), 4);
        assert_eq!(file.referenced_data_file(), None);

        let bytes = io.new_input(path)?.read().await?;
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)?;
        let ids: Vec<String> = reader
            .schema()
            .fields()
            .iter()
            .map(|f| {
                f.metadata()
                    .get("PARQUET:field_id")
                    .cloned()
                    .unwrap_or_default()
            })
            .collect();
        assert_eq!(ids, ["2147483546", "2147483545"]);
        let mut rows = Vec::new();
        for batch in reader.build()? {
            let batch = batch?;
            let paths = batch
                .column(0)
                .as_any()
                .downcast_ref::<StringArray>()
                .ok_or("file_path is no string column")?;
            let positions = batch
                .column(1)
                .as_any()
                .downcast_ref::<Int64Array>()
                .ok_or("pos is no long column")?;
            for i in 0..batch.num_rows() {
                rows.push((paths.value(i).to_owned(), positions.value(i)));
            }
        }
        let expected = [
            ("file:///wh/a.parquet", 0),
            ("file:///wh/a.parquet", 100_000),
            ("file:///wh/b.parquet", 2),
            ("file:///wh/b.parquet", 7),
        ];
        let expected: Vec<(String, i64)> = expected
            .iter()
            .map(|(p, n)| ((*p).to_owned(), *n))
            .collect();
        assert_eq!(rows, expected);
        // The metrics readers prune by hold the rows: a `file_path` bound that left
        // a row's path out would make a reader skip the deletes of that data file.
        let bound = |bounds: &std::collections::HashMap<i32, iceberg::spec::Datum>, id| {
            bounds.get(&id).map(|d| d.literal().clone())
        };
        use iceberg::spec::PrimitiveLiteral::{Long, String as Text};
        let (path_id, pos_id) = (2_147_483_546, 2_147_483_545);
        let (Some(Text(low)), Some(Text(high))) = (
            bound(file.lower_bounds(), path_id),
            bound(file.upper_bounds(), path_id),
        ) else {
            return Err(format!("no file_path bounds: {file:?}").into());
        };
        for (path, _) in &rows {
            assert!(
                low.as_str() <= path.as_str() && path.as_str() <= high.as_str(),
                "{low} {path} {high}"
            );
        }
        assert_eq!(bound(file.lower_bounds(), pos_id), Some(Long(0)));
        assert_eq!(bound(file.upper_bounds(), pos_id), Some(Long(100_000)));
        assert_eq!(file.value_counts().get(&path_id), Some(&4));
        assert_eq!(file.null_value_counts().get(&pos_id), Some(&0));
        Ok(())
    }

    #[tokio::test]
    async fn one_data_file_is_referenced_and_nonsense_is_refused() -> Fallible<()> {
        let io = FileIO::new_with_memory();
        let at = |name: &str| format!("memory://t/{name}");
        let one: PositionDeletes =
            BTreeMap::from([("file:///wh/a.parquet".to_owned(), BTreeSet::from([3]))]);
        let file = write_position_deletes(
            &io,
            &at("one.parquet"),
            WriterProperties::default(),
            &one,
            0,
            Struct::empty(),
        )
        .await?;
        assert_eq!(
            file.referenced_data_file().as_deref(),
            Some("file:///wh/a.parquet")
        );
        for (name, deletes) in [
            ("empty.parquet", PositionDeletes::new()),
            (
                "negative.parquet",
                BTreeMap::from([("file:///wh/a.parquet".to_owned(), BTreeSet::from([-1, 4]))]),
            ),
        ] {
            let refused = write_position_deletes(
                &io,
                &at(name),
                WriterProperties::default(),
                &deletes,
                0,
                Struct::empty(),
            )
            .await;
            let error = refused.err().ok_or(format!("{name} was written"))?;
            assert_eq!(error.kind(), ErrorKind::DataInvalid, "{error}");
        }
        Ok(())
    }
}

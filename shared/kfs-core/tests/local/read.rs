//! Reading a table's live rows as a reader applies its deletes, deletion vectors too
//! (iceberg-rust 0.10's scan reads Puffin files as Parquet): every live data file's
//! `partition` and `offset` columns, the rows `kfs_core::live_deletes` deletes left
//! out, with each row's `_row_id` in a v3 table (its own, else its file's first row id
//! plus its position). pyiceberg and DuckDB read the same tables independently
//! (`check_deletes.py`).

use std::collections::BTreeMap;

use arrow_array::{Array, Int32Array, Int64Array, RecordBatch};
use iceberg::table::Table;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

/// A live row: its partition and offset, and its `_row_id` (a v3 table's).
pub type LiveRow = ((i32, i64), Option<i64>);

/// How often each (partition, offset) is live in `table`.
pub async fn offsets_applying_vectors(
    table: &Table,
) -> Result<BTreeMap<(i32, i64), usize>, String> {
    let mut found = BTreeMap::new();
    for (at, _) in live_rows(table).await? {
        *found.entry(at).or_default() += 1;
    }
    Ok(found)
}

/// Each live row's `_row_id` by its (partition, offset); refuses a row without one.
pub async fn row_ids(table: &Table) -> Result<BTreeMap<(i32, i64), i64>, String> {
    live_rows(table)
        .await?
        .into_iter()
        .map(|(at, id)| Ok((at, id.ok_or(format!("{at:?} has no row id"))?)))
        .collect()
}

/// Every live row of `table`.
pub async fn live_rows(table: &Table) -> Result<Vec<LiveRow>, String> {
    let text = |e: &dyn std::fmt::Display| format!("{}: {e}", table.identifier());
    let deletes = kfs_core::live_deletes(table).await.map_err(|e| text(&e))?;
    let lineage = kfs_core::testing::live_lineage(table)
        .await
        .map_err(|e| text(&e))?;
    let mut rows = Vec::new();
    for entry in kfs_core::live_entries(table).await.map_err(|e| text(&e))? {
        let path = entry.file_path();
        let first_row_id = lineage.get(path).map(|l| l.first_row_id);
        let mut position = 0i64;
        for batch in read_columns(table, path).await? {
            let long = |name: &str| {
                batch
                    .column_by_name(name)
                    .and_then(|c| c.as_any().downcast_ref::<Int64Array>().cloned())
            };
            let partitions = batch
                .column_by_name("partition")
                .and_then(partition_ints)
                .ok_or(format!("{path}: partition column"))?;
            let offsets = long("offset").ok_or(format!("{path}: offset column"))?;
            let own = long("_row_id");
            for row in 0..batch.num_rows() {
                if !deletes.deletes(path, position) {
                    let id = match &own {
                        Some(ids) if ids.is_valid(row) => Some(ids.value(row)),
                        _ => first_row_id.map(|first| first + position),
                    };
                    rows.push(((partitions.value(row), offsets.value(row)), id));
                }
                position += 1;
            }
        }
    }
    Ok(rows)
}

/// The `partition`, `offset` and (where the file has it) `_row_id` columns of the data
/// file at `path`.
async fn read_columns(table: &Table, path: &str) -> Result<Vec<RecordBatch>, String> {
    let text = |e: &dyn std::fmt::Display| format!("{path}: {e}");
    let bytes = table
        .file_io()
        .new_input(path)
        .map_err(|e| text(&e))?
        .read()
        .await
        .map_err(|e| text(&e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(|e| text(&e))?;
    let schema = builder.parquet_schema();
    let columns: Vec<usize> = schema
        .columns()
        .iter()
        .enumerate()
        .filter(|(_, c)| ["partition", "offset", "_row_id"].contains(&c.name()))
        .map(|(at, _)| at)
        .collect();
    let mask = ProjectionMask::leaves(schema, columns);
    let reader = builder
        .with_projection(mask)
        .build()
        .map_err(|e| text(&e))?;
    reader.map(|batch| batch.map_err(|e| text(&e))).collect()
}

/// A `partition` column as ints, whether it is an int or (promoted by another engine) a
/// long.
pub fn partition_ints(column: &arrow_array::ArrayRef) -> Option<Int32Array> {
    // Not the safe cast: a value past an int is an error, not a null.
    let options = arrow_cast::CastOptions {
        safe: false,
        ..Default::default()
    };
    let ints =
        arrow_cast::cast_with_options(column, &arrow_schema::DataType::Int32, &options).ok()?;
    ints.as_any().downcast_ref::<Int32Array>().cloned()
}

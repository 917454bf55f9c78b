//! Reading which offsets a format v3 table holds, its deletion vectors applied
//! (iceberg-rust 0.10's scan reads Puffin files as Parquet): every live data file's
//! `partition` and `offset` columns, the rows `kfs_core::live_deletes` deletes left
//! out. pyiceberg and DuckDB read the same tables independently (`check_deletes.py`).

use std::collections::BTreeMap;

use arrow_array::{Int32Array, Int64Array};
use iceberg::table::Table;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

/// How often each (partition, offset) is live in `table`.
pub async fn offsets_applying_vectors(
    table: &Table,
) -> Result<BTreeMap<(i32, i64), usize>, String> {
    let text = |e: &dyn std::fmt::Display| format!("{}: {e}", table.identifier());
    let deletes = kfs_core::live_deletes(table).await.map_err(|e| text(&e))?;
    let mut found = BTreeMap::new();
    for entry in kfs_core::live_entries(table).await.map_err(|e| text(&e))? {
        let path = entry.file_path();
        let bytes = table
            .file_io()
            .new_input(path)
            .map_err(|e| text(&e))?
            .read()
            .await
            .map_err(|e| text(&e))?;
        let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(|e| text(&e))?;
        let schema = builder.parquet_schema();
        let columns: Vec<usize> = ["partition", "offset"]
            .iter()
            .map(|name| {
                schema
                    .columns()
                    .iter()
                    .position(|c| c.name() == *name)
                    .ok_or(format!("{path}: no {name} column"))
            })
            .collect::<Result<_, _>>()?;
        let mask = ProjectionMask::leaves(schema, columns);
        let reader = builder
            .with_projection(mask)
            .build()
            .map_err(|e| text(&e))?;
        let mut position = 0i64;
        for batch in reader {
            let batch = batch.map_err(|e| text(&e))?;
            let column = |name: &str| batch.column_by_name(name).ok_or(format!("{path}: {name}"));
            let partitions = column("partition")?
                .as_any()
                .downcast_ref::<Int32Array>()
                .ok_or("partition column")?
                .clone();
            let offsets = column("offset")?
                .as_any()
                .downcast_ref::<Int64Array>()
                .ok_or("offset column")?
                .clone();
            for row in 0..batch.num_rows() {
                if !deletes.deletes(path, position) {
                    *found
                        .entry((partitions.value(row), offsets.value(row)))
                        .or_default() += 1;
                }
                position += 1;
            }
        }
    }
    Ok(found)
}

//! Which offsets a table's rows hold: its `(partition, offset)` pairs in a range of
//! offsets, read at its current snapshot through a filter on the range (files whose
//! bounds lie outside it are not read).

use std::collections::BTreeSet;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, RecordBatch};
use futures::TryStreamExt;
use iceberg::expr::Reference;
use iceberg::spec::Datum;
use iceberg::table::Table;

/// The `(partition, offset)` of every row of `table` whose offset lies in `low..=high`.
pub async fn offsets_between(
    table: &Table,
    low: i64,
    high: i64,
) -> iceberg::Result<BTreeSet<(i32, i64)>> {
    let mut present = BTreeSet::new();
    if table.metadata().current_snapshot().is_none() || low > high {
        return Ok(present);
    }
    let filter = Reference::new("offset")
        .greater_than_or_equal_to(Datum::long(low))
        .and(Reference::new("offset").less_than_or_equal_to(Datum::long(high)));
    let batches: Vec<RecordBatch> = table
        .scan()
        .select(["partition", "offset"])
        .with_filter(filter)
        .build()?
        .to_arrow()
        .await?
        .try_collect()
        .await?;
    let invalid = |what: &str| {
        iceberg::Error::new(
            iceberg::ErrorKind::DataInvalid,
            format!(
                "{}: column {what} is not as the layout has it",
                table.identifier()
            ),
        )
    };
    for batch in &batches {
        let partitions = kfs_values::partition_numbers(batch.column(0))
            .map_err(|e| invalid(&format!("partition ({e})")))?;
        let offsets = batch
            .column(1)
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| invalid("offset"))?;
        for row in 0..batch.num_rows() {
            if partitions.is_valid(row) && offsets.is_valid(row) {
                present.insert((partitions.value(row), offsets.value(row)));
            }
        }
    }
    Ok(present)
}

//! Property test of a written file's bounds: over random row-group splits and values
//! (strings and binaries of 0-300 bytes, non-ASCII text, runs of `0xFF`, nulls, longs),
//! every Iceberg lower bound is at most every non-null value of its column and every
//! upper bound at least each, and so is every row group's Parquet statistic.

use super::testing::{Fallible, write};
use super::writer::ParquetFileWriterBuilder;
use arrow_array::{ArrayRef, Int64Array, LargeBinaryArray, RecordBatch, StringArray};
use iceberg::io::FileIO;
use iceberg::spec::{Datum, NestedField, PrimitiveType, Schema, Type};
use parquet::file::properties::WriterProperties;
use parquet::file::statistics::Statistics;
use proptest::prelude::*;
use std::sync::Arc;

/// A row: a string, a binary and a long, each perhaps null.
type Row = (Option<String>, Option<Vec<u8>>, Option<i64>);

/// A string value: ASCII, non-ASCII or the highest code point, up to 300 bytes.
fn text() -> impl Strategy<Value = Option<String>> {
    let piece = prop_oneof![
        "[a-z]{0,40}",
        "[é€😀]{0,20}",
        Just("\u{10FFFF}".repeat(3)),
        Just("m".to_owned()),
    ];
    proptest::option::weighted(
        0.9,
        proptest::collection::vec(piece, 0..8).prop_map(|pieces| {
            let mut text: String = pieces.concat();
            while text.len() > 300 {
                text.pop();
            }
            text
        }),
    )
}

/// A binary value of 0-300 bytes, often a run of `0xFF` (which cannot be incremented).
fn bytes() -> impl Strategy<Value = Option<Vec<u8>>> {
    proptest::option::weighted(
        0.9,
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..300),
            (0usize..300).prop_map(|n| vec![0xFF; n]),
            (0usize..300, any::<u8>()).prop_map(|(n, b)| {
                let mut v = vec![0xFF; n];
                v.push(b);
                v
            }),
        ],
    )
}

fn schema() -> Fallible<Arc<Schema>> {
    let field = |id, name: &str, t| Arc::new(NestedField::optional(id, name, Type::Primitive(t)));
    Ok(Arc::new(
        Schema::builder()
            .with_fields(vec![
                field(1, "s", PrimitiveType::String),
                field(2, "b", PrimitiveType::Binary),
                field(3, "n", PrimitiveType::Long),
            ])
            .build()?,
    ))
}

/// The non-null values of column `id` as Iceberg values.
fn column_values(rows: &[Row], id: i32) -> Vec<Datum> {
    rows.iter()
        .filter_map(|(s, b, n)| match id {
            1 => s.clone().map(Datum::string),
            2 => b.clone().map(Datum::binary),
            _ => n.map(Datum::long),
        })
        .collect()
}

/// Whether `low <= value <= high` holds for every value (a missing bound holds).
fn within(values: &[Datum], low: Option<&Datum>, high: Option<&Datum>) -> Result<(), String> {
    for value in values {
        if let Some(low) = low
            && low.partial_cmp(value) == Some(std::cmp::Ordering::Greater)
        {
            return Err(format!("lower bound {low} above value {value}"));
        }
        if let Some(high) = high
            && high.partial_cmp(value) == Some(std::cmp::Ordering::Less)
        {
            return Err(format!("upper bound {high} below value {value}"));
        }
    }
    Ok(())
}

/// A row group statistic's bytes as the column's Iceberg value.
fn statistic(id: i32, bytes: Option<&[u8]>) -> Option<Datum> {
    let bytes = bytes?;
    Some(match id {
        1 => Datum::string(String::from_utf8_lossy(bytes)),
        2 => Datum::binary(bytes.to_vec()),
        _ => Datum::long(i64::from_le_bytes(bytes.try_into().ok()?)),
    })
}

async fn check(rows: Vec<Row>, group_rows: usize) -> Fallible<()> {
    let schema = schema()?;
    let arrow = crate::arrow_schema(&schema)?;
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter(rows.iter().map(|r| r.0.clone()))),
        Arc::new(LargeBinaryArray::from_iter(
            rows.iter().map(|r| r.1.clone()),
        )),
        Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.2))),
    ];
    let batch = RecordBatch::try_new(arrow, columns)?;
    let properties = WriterProperties::builder()
        .set_max_row_group_row_count(Some(group_rows))
        .build();
    let io = FileIO::new_with_memory();
    let builder = ParquetFileWriterBuilder::new(properties, schema)?;
    let file = write(&io, builder, "memory://t/bounds.parquet", &[batch]).await?;
    for id in 1..=3 {
        let values = column_values(&rows, id);
        within(
            &values,
            file.lower_bounds().get(&id),
            file.upper_bounds().get(&id),
        )
        .map_err(|e| format!("column {id}, file bounds: {e}"))?;
    }
    // Each row group's own statistics hold for its rows.
    let bytes = io.new_input(file.file_path())?.read().await?;
    let reader = parquet::file::serialized_reader::SerializedFileReader::new(bytes)?;
    let mut first = 0usize;
    for group in parquet::file::reader::FileReader::metadata(&reader).row_groups() {
        let count = usize::try_from(group.num_rows())?;
        let slice = &rows[first..first + count];
        for (index, column) in group.columns().iter().enumerate() {
            let id = i32::try_from(index + 1)?;
            let Some(stats) = column.statistics() else {
                continue;
            };
            let (low, high) = match stats {
                Statistics::Int64(s) => (
                    s.min_opt().map(|v| Datum::long(*v)),
                    s.max_opt().map(|v| Datum::long(*v)),
                ),
                _ => (
                    statistic(id, stats.min_bytes_opt()),
                    statistic(id, stats.max_bytes_opt()),
                ),
            };
            within(&column_values(slice, id), low.as_ref(), high.as_ref())
                .map_err(|e| format!("column {id}, row group statistics: {e}"))?;
        }
        first += count;
    }
    Ok(())
}

/// Runs `check` to completion on a fresh current-thread runtime (proptest's bodies are
/// synchronous).
fn check_blocking(rows: Vec<Row>, group_rows: usize) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| e.to_string())?;
    runtime
        .block_on(check(rows, group_rows))
        .map_err(|e| e.to_string())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn file_bounds_and_row_group_statistics_hold_for_every_row(
        rows in proptest::collection::vec((text(), bytes(), proptest::option::of(any::<i64>())), 1..200),
        group_rows in 1usize..50,
    ) {
        check_blocking(rows, group_rows).map_err(TestCaseError::fail)?;
    }
}

/// The finding of the review: one long string in the first row group, short ones in the
/// next; the file's lower bound must be at most the long string (it was `m`).
#[tokio::test]
async fn a_truncated_statistic_still_bounds_the_file() -> Fallible<()> {
    let mut rows = vec![(Some("a".repeat(100)), Some(vec![0xFF; 100]), Some(1))];
    rows.extend((0..20).map(|_| (Some("m".to_owned()), Some(vec![1]), Some(2))));
    check(rows, 1).await
}

//! Widening declared columns of a JSON table: a table whose `n` column was declared
//! `int` and `f` column `float` (by someone else) takes values that fit them, then a
//! value beyond 32 bits and one beyond `float`'s range: the converter widens `n` to
//! long and `f` to double (same field ids, through the catalog's pointer swap). One
//! commit merges a file written before the widening with one written after; a later
//! field adds a column, and compaction merges files from before and after it. A scan
//! reads every value back, the old files' as the wider type.
//! A value whose column the table refuses (named like a partition field) quarantines
//! its segment, with the reason, and nothing else.

use crate::local;

use std::sync::Arc;

use arrow_array::Array;
use futures::TryStreamExt;
use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
use kfs_core::testing::{ensure_topic_table, evolve_schema};
use kfs_core::{PipelineConfig, run_pass};
use kfs_plan::naming::{TableNaming, ValueFormat};
use local::{BoxError, Local};

type TestResult = Result<(), BoxError>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_int_and_float_columns_widen_to_long_and_double() -> TestResult {
    let local = Local::open().await?;
    let Local {
        catalog,
        swap,
        ledger,
        source,
        ..
    } = &local;
    let naming = TableNaming {
        value_format: ValueFormat::Json,
        ..TableNaming::default()
    };
    let name = naming.table_for("metrics");
    // Someone declares `n int` and `f float`.
    let table = ensure_topic_table(catalog, &name, "metrics", &naming).await?;
    let current = table.metadata().current_schema();
    let mut fields = current.as_struct().fields().to_vec();
    let next = table.metadata().last_column_id() + 1;
    fields.push(Arc::new(NestedField::optional(
        next,
        "n",
        Type::Primitive(PrimitiveType::Int),
    )));
    fields.push(Arc::new(NestedField::optional(
        next + 1,
        "f",
        Type::Primitive(PrimitiveType::Float),
    )));
    let declared = Schema::builder()
        .with_schema_id(current.schema_id() + 1)
        .with_fields(fields)
        .build()?;
    evolve_schema(swap, &table, declared).await?;

    let mut config = PipelineConfig {
        naming: naming.clone(),
        ..PipelineConfig::default()
    };
    // One commit takes files written before and after the widening, merged into one
    // (coalescing reads the older file's int column as long).
    config.commit.coalesce = true;
    local.put("metrics", 0, &[r#"{"n": 7, "f": 1.5}"#, r#"{"n": -3}"#], 1)?;
    local.put("metrics", 2, &[r#"{"n": 5000000000, "f": 1e300}"#], 1)?;
    let report = run_pass(source, catalog, swap, ledger, &config, &|_| {}).await?;
    let outcome = report.tables.values().next().ok_or("no commit")?;
    assert_eq!(
        (outcome.segments, outcome.files, outcome.coalesced),
        (2, 1, 2)
    );
    // A later field, and a file written before it compacted with one written after.
    local.put("metrics", 3, &[r#"{"n": 1, "g": {"h": true}}"#], 1)?;
    run_pass(source, catalog, swap, ledger, &config, &|_| {}).await?;
    let table = iceberg::Catalog::load_table(catalog, &kfs_core::table_ident(&name)).await?;
    assert_eq!(table.metadata().schemas_iter().count(), 4);
    let compacted = kfs_core::compact_table(
        catalog,
        swap,
        &kfs_core::table_ident(&name),
        None,
        None,
        kfs_core::now_ms(),
    )
    .await?;
    assert_eq!(
        (compacted.files_removed, compacted.files_added),
        (2, 1),
        "{compacted:?}"
    );

    let table = iceberg::Catalog::load_table(catalog, &kfs_core::table_ident(&name)).await?;
    let schema = table.metadata().current_schema();
    let field = |name: &str| {
        schema
            .field_by_name(name)
            .map(|f| (f.id, f.field_type.to_string()))
    };
    assert_eq!(field("n"), Some((next, "long".to_owned())));
    assert_eq!(field("f"), Some((next + 1, "double".to_owned())));
    let batches: Vec<arrow_array::RecordBatch> = table
        .scan()
        .select(["offset", "n", "f", "g"])
        .build()?
        .to_arrow()
        .await?
        .try_collect()
        .await?;
    let mut rows = Vec::new();
    for batch in &batches {
        let offsets = batch
            .column(0)
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .ok_or("offset")?;
        let n = batch
            .column(1)
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .ok_or("n is not read as long")?;
        let f = batch
            .column(2)
            .as_any()
            .downcast_ref::<arrow_array::Float64Array>()
            .ok_or("f is not read as double")?;
        let g = batch
            .column(3)
            .as_any()
            .downcast_ref::<arrow_array::StructArray>()
            .ok_or("g is not a struct")?;
        let h = g
            .column_by_name("h")
            .and_then(|h| h.as_any().downcast_ref::<arrow_array::BooleanArray>())
            .ok_or("g.h is not boolean")?;
        for row in 0..batch.num_rows() {
            rows.push((
                offsets.value(row),
                (!n.is_null(row)).then(|| n.value(row)),
                (!f.is_null(row)).then(|| f.value(row)),
                (!g.is_null(row) && !h.is_null(row)).then(|| h.value(row)),
            ));
        }
    }
    rows.sort_by_key(|r| r.0);
    assert_eq!(
        rows,
        vec![
            (0, Some(7), Some(1.5), None),
            (1, Some(-3), None, None),
            (2, Some(5_000_000_000), Some(1e300), None),
            (3, Some(1), None, Some(true)),
        ]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_whose_column_the_table_refuses_quarantines_only_its_segment() -> TestResult {
    let local = Local::open().await?;
    let config = PipelineConfig {
        naming: TableNaming {
            value_format: ValueFormat::Json,
            partition_by: kfs_plan::layout::parse_partition_spec("day(timestamp)")?,
            partition_by_given: true,
            ..TableNaming::default()
        },
        ..PipelineConfig::default()
    };
    // `timestamp_day` is the name of the partition field: no column may take it.
    local.put("clash", 0, &[r#"{"timestamp_day": 1}"#], 1)?;
    local.put("fine", 0, &[r#"{"n": 1}"#], 1)?;
    let report = local.run_config(&config).await?;
    assert_eq!(report.quarantined.len(), 1, "{report:?}");
    let (segment, error) = &report.quarantined[0];
    assert!(segment.contains("/clash/"), "{segment}");
    assert!(error.contains("refuses the columns"), "{error}");
    assert_eq!(report.converted, 1);
    assert!(
        report.tables.keys().any(|t| t.ends_with(".fine")),
        "{report:?}"
    );
    Ok(())
}

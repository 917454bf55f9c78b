//! Widening declared columns of a JSON table: a table whose `n` column was declared
//! `int` and `f` column `float` (by someone else) takes values that fit them, then a
//! value beyond 32 bits and one beyond `float`'s range: the converter widens `n` to
//! long and `f` to double (same field ids, through the catalog's pointer swap), and a
//! scan reads the old files' values as the wider type beside the new ones.

use std::sync::Arc;

use arrow_array::Array;
use futures::TryStreamExt;
use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
use kfs_core::catalog::{
    LOCAL_CATALOG_NAME, S3Settings, Warehouse, ensure_topic_table, evolve_schema, open_sql_catalog,
};
use kfs_core::ledger::SqliteLedger;
use kfs_core::pipeline::{PipelineConfig, run_once};
use kfs_core::source::MemorySource;
use kfs_core::table_commit::SqlTableSwap;
use kfs_plan::keys::{SegmentFile, SegmentKey};
use kfs_plan::naming::{TableNaming, ValueFormat};
use kfs_segment::{BatchSpec, Compression, OwnedRecord, encode_segment};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Uploads a segment at `base` whose records have `values`.
fn put(source: &MemorySource, base: i64, values: &[&str]) -> TestResult {
    let records = values
        .iter()
        .zip(base..)
        .map(|(value, offset)| OwnedRecord {
            offset,
            timestamp_ms: 1_700_000_000_000 + offset,
            key: None,
            value: Some(value.as_bytes().to_vec()),
            headers: vec![],
        })
        .collect();
    let key = SegmentKey {
        namespace: "ns".into(),
        topic: "metrics".into(),
        partition: 0,
        base_offset: base,
    };
    let segment = encode_segment(&[BatchSpec::new(records, Compression::None)], 1)?;
    source.put(&key.object_key(SegmentFile::Data), segment.kfs);
    source.put(&key.object_key(SegmentFile::Index), segment.index);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_int_and_float_columns_widen_to_long_and_double() -> TestResult {
    let dir = tempfile::tempdir()?;
    let database = dir.path().join("catalog.db");
    let catalog = open_sql_catalog(
        &database,
        &Warehouse::Local(dir.path().join("wh")),
        &S3Settings::default(),
    )
    .await?;
    let swap = SqlTableSwap::open(&database, LOCAL_CATALOG_NAME).await?;
    let ledger = SqliteLedger::open(&dir.path().join("ledger.db")).await?;
    let naming = TableNaming {
        value_format: ValueFormat::Json,
        ..TableNaming::default()
    };
    let name = naming.table_for("metrics");
    // Someone declares `n int` and `f float`.
    let table = ensure_topic_table(&catalog, &name, "metrics", &naming).await?;
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
    evolve_schema(&swap, &table, declared).await?;

    let source = MemorySource::default();
    let config = PipelineConfig {
        naming: naming.clone(),
        ..PipelineConfig::default()
    };
    put(&source, 0, &[r#"{"n": 7, "f": 1.5}"#, r#"{"n": -3}"#])?;
    run_once(&source, &catalog, &swap, &ledger, &config, &|_| {}).await?;
    put(&source, 2, &[r#"{"n": 5000000000, "f": 1e300}"#])?;
    run_once(&source, &catalog, &swap, &ledger, &config, &|_| {}).await?;

    let table =
        iceberg::Catalog::load_table(&catalog, &kfs_core::catalog::table_ident(&name)).await?;
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
        .select(["offset", "n", "f"])
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
        for row in 0..batch.num_rows() {
            rows.push((
                offsets.value(row),
                (!n.is_null(row)).then(|| n.value(row)),
                (!f.is_null(row)).then(|| f.value(row)),
            ));
        }
    }
    rows.sort_by_key(|r| r.0);
    assert_eq!(
        rows,
        vec![
            (0, Some(7), Some(1.5)),
            (1, Some(-3), None),
            (2, Some(5_000_000_000), Some(1e300)),
        ]
    );
    Ok(())
}

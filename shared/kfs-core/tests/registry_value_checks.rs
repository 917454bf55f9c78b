//! Nothing vanishes and nothing changes on a registry table: a value beyond its
//! column's range (an Avro time before midnight, a decimal wider than its precision),
//! a property its JSON Schema does not declare, or a field whose column another field
//! of the table holds (`a-b` and `a_b`) makes its record a dead letter naming the field
//! and the reason. The segment's other records are written; nothing is quarantined.

use crate::local;

use std::collections::BTreeMap;
use std::sync::Arc;

use apache_avro::types::Value;
use futures::TryStreamExt;
use iceberg::Catalog;
use kfs_core::{
    MemoryRegistry, PipelineConfig, RegisteredSchema, SchemaCache, SchemaId, SchemaKind,
    table_ident,
};
use kfs_plan::naming::{TableNaming, ValueFormat};
use local::{BoxError, Local, dead_letter_reasons, offsets};

fn config(registry: MemoryRegistry) -> PipelineConfig {
    PipelineConfig {
        naming: TableNaming {
            value_format: ValueFormat::Registry,
            ..TableNaming::default()
        },
        schemas: Some(Arc::new(SchemaCache::new(Arc::new(registry)))),
        ..PipelineConfig::default()
    }
}

/// `payload` framed for the Confluent schema `id`.
fn framed(id: u32, payload: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0];
    bytes.extend_from_slice(&id.to_be_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

/// Converts `values` (offsets from 0) with `registry`: the offsets in the table, and
/// the dead letters' reasons by offset.
async fn convert(
    local: &Local,
    registry: MemoryRegistry,
    values: Vec<Vec<u8>>,
) -> Result<(Vec<i64>, BTreeMap<i64, String>), BoxError> {
    let config = config(registry);
    local.put_records(
        "events",
        kfs_workload::simple_records(0, values.len() as i64, |o| values.get(o as usize).cloned()),
    )?;
    let report = local.run_config(&config).await?;
    assert!(
        report.quarantined.is_empty() && !report.left_work(),
        "{report:?}"
    );
    let name = config.naming.table_for("events");
    let rows = offsets(&local.catalog, &name).await?;
    assert!(rows.values().all(|n| *n == 1), "{rows:?}");
    let reasons = dead_letter_reasons(&local.catalog, &name).await?;
    Ok((rows.keys().map(|(_, o)| *o).collect(), reasons))
}

/// The values of the long column `column` by offset.
async fn longs(local: &Local, column: &str) -> Result<BTreeMap<i64, Option<i64>>, BoxError> {
    use arrow_array::Array;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    let name = config(MemoryRegistry::default()).naming.table_for("events");
    let table = local.catalog.load_table(&table_ident(&name)).await?;
    let batches: Vec<arrow_array::RecordBatch> = table
        .scan()
        .select(["offset", column])
        .build()?
        .to_arrow()
        .await?
        .try_collect()
        .await?;
    let mut found = BTreeMap::new();
    for batch in &batches {
        let offsets = batch.column(0).as_primitive::<Int64Type>();
        let values = batch.column(1).as_primitive::<Int64Type>();
        for row in 0..batch.num_rows() {
            found.insert(
                offsets.value(row),
                (!values.is_null(row)).then(|| values.value(row)),
            );
        }
    }
    Ok(found)
}

/// An Avro `time-micros` of -1 failed the data file's write, so the whole segment was
/// quarantined and its partition waited; a `decimal(4, 2)` holding 42949674.19 was
/// stored as 1.23.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn avro_values_beyond_their_columns_are_dead_letters_not_a_quarantine() -> Result<(), BoxError>
{
    const SCHEMA: &str = r#"{"type": "record", "name": "E", "fields": [
        {"name": "at", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}}
    ]}"#;
    let registry = MemoryRegistry::default();
    registry.register(
        SchemaId::Confluent(1),
        RegisteredSchema::new(SchemaKind::Avro, SCHEMA),
    );
    let schema = apache_avro::Schema::parse_str(SCHEMA)?;
    let value = |at: i64, price: &[u8]| -> Result<Vec<u8>, BoxError> {
        let record = Value::Record(vec![
            ("at".into(), Value::TimeMicros(at)),
            (
                "price".into(),
                Value::Decimal(apache_avro::Decimal::from(price.to_vec())),
            ),
        ]);
        Ok(framed(1, &apache_avro::to_avro_datum(&schema, record)?))
    };
    let values = vec![
        value(1_000, &[0x04, 0xD2])?,
        value(-1, &[0x01])?,
        value(2_000, &[0x01, 0x00, 0x00, 0x00, 0x7B])?,
        value(86_399_999_999, &[0x27, 0x0F])?,
    ];
    let local = Local::open().await?;
    let (rows, reasons) = convert(&local, registry, values).await?;
    assert_eq!(rows, [0, 3]);
    assert_eq!(reasons.keys().copied().collect::<Vec<_>>(), [1, 2]);
    assert!(
        reasons[&1].contains("field at") && reasons[&1].contains("outside a day"),
        "{}",
        reasons[&1]
    );
    assert!(
        reasons[&2].contains("field price") && reasons[&2].contains("42949674.19"),
        "{}",
        reasons[&2]
    );
    Ok(())
}

/// JSON Schema values naming `a-b` (version 1) and `a_b` (version 2): both went to
/// the column `a_b`, and which field a row's value was is lost. Version 2 is refused,
/// as a JSON value naming both is; a property version 1 does not declare is a dead
/// letter naming it, never dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_schema_fields_are_never_merged_nor_dropped() -> Result<(), BoxError> {
    let registry = MemoryRegistry::default();
    for (id, property) in [(1, "a-b"), (2, "a_b")] {
        let text = format!(
            r#"{{"type": "object", "properties": {{"{property}": {{"type": "integer"}}}}}}"#
        );
        registry.register(
            SchemaId::Confluent(id),
            RegisteredSchema::new(SchemaKind::Json, &text),
        );
    }
    let values = vec![
        framed(1, br#"{"a-b": 1}"#),
        framed(2, br#"{"a_b": 2}"#),
        framed(1, br#"{"a-b": 3, "extra": "x"}"#),
        framed(1, br#"{"a-b": 4, "extra": null}"#),
    ];
    let local = Local::open().await?;
    let (rows, reasons) = convert(&local, registry, values).await?;
    assert_eq!(rows, [0, 3]);
    assert_eq!(reasons.keys().copied().collect::<Vec<_>>(), [1, 2]);
    assert!(
        reasons[&1].contains("\"a_b\"") && reasons[&1].contains("holds another field"),
        "{}",
        reasons[&1]
    );
    assert!(
        reasons[&2].contains("\"extra\"") && reasons[&2].contains("not declared"),
        "{}",
        reasons[&2]
    );
    let values = longs(&local, "a_b").await?;
    assert_eq!(values, [(0, Some(1)), (3, Some(4))].into_iter().collect());
    Ok(())
}

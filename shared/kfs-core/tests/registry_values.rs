//! Registry-encoded Avro values (`value_format = "registry"`) on the in-memory registry:
//! three schema versions (fields added, removed, promoted) become typed columns whose
//! field ids never change; a version the table cannot absorb, an unknown schema id, a
//! value without the framing and a payload that does not decode are dead letters with
//! the reason; every record is in one of the two tables exactly once. A registry that
//! cannot answer fails the pass, and nothing is quarantined or dead-lettered for it.

use crate::local;

use std::collections::BTreeMap;
use std::sync::Arc;

use apache_avro::types::Value;
use futures::TryStreamExt;
use iceberg::Catalog;
use kfs_core::{
    MemoryRegistry, PipelineConfig, RegisteredSchema, RegistryError, SchemaCache, SchemaId,
    SchemaKind, SchemaRegistry, run_pass, table_ident,
};
use kfs_plan::naming::{TableNaming, ValueFormat};
use local::{BoxError, Local, offsets};

const V1: &str = r#"{"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "int"},
    {"name": "name", "type": "string"},
    {"name": "amount", "type": "float"},
    {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}}
]}"#;

const V2: &str = r#"{"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"},
    {"name": "name", "type": "string"},
    {"name": "amount", "type": "double"},
    {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "email", "type": ["null", "string"], "default": null}
]}"#;

const V3: &str = r#"{"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"},
    {"name": "amount", "type": "double"},
    {"name": "attrs", "type": {"type": "map", "values": "long"}},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["NEW", "OLD"]}},
    {"name": "offset", "type": "long"}
]}"#;

const INCOMPATIBLE: &str = r#"{"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "string"}
]}"#;

fn framed(id: u32, schema: &str, value: Value) -> Result<Vec<u8>, BoxError> {
    let schema = apache_avro::Schema::parse_str(schema)?;
    let mut bytes = vec![0];
    bytes.extend_from_slice(&id.to_be_bytes());
    bytes.extend(apache_avro::to_avro_datum(&schema, value)?);
    Ok(bytes)
}

fn record(fields: Vec<(&str, Value)>) -> Value {
    Value::Record(
        fields
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value))
            .collect(),
    )
}

/// One value of schema id 1 (v1).
fn one_v1_value() -> Result<Vec<u8>, BoxError> {
    framed(
        1,
        V1,
        record(vec![
            ("id", Value::Int(1)),
            ("name", Value::String("n".into())),
            ("amount", Value::Float(1.0)),
            ("placed", Value::TimestampMillis(0)),
        ]),
    )
}

fn registry() -> MemoryRegistry {
    let registry = MemoryRegistry::default();
    for (id, text) in [(1, V1), (2, V2), (3, V3), (4, INCOMPATIBLE)] {
        registry.register(
            SchemaId::Confluent(id),
            RegisteredSchema::new(SchemaKind::Avro, text),
        );
    }
    registry
}

fn config(registry: Arc<dyn SchemaRegistry>) -> PipelineConfig {
    PipelineConfig {
        naming: TableNaming {
            value_format: ValueFormat::Registry,
            ..TableNaming::default()
        },
        schemas: Some(Arc::new(SchemaCache::new(registry))),
        ..PipelineConfig::default()
    }
}

/// The field ids of `name`'s columns by name.
async fn field_ids(
    local: &Local,
    config: &PipelineConfig,
) -> Result<BTreeMap<String, (i32, String)>, BoxError> {
    let name = config.naming.table_for("orders");
    let table = local.catalog.load_table(&table_ident(&name)).await?;
    Ok(table
        .metadata()
        .current_schema()
        .as_struct()
        .fields()
        .iter()
        .map(|f| (f.name.clone(), (f.id, f.field_type.to_string())))
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_versions_become_columns_with_stable_ids_and_the_rest_dead_letters()
-> Result<(), BoxError> {
    let local = Local::open().await?;
    let config = config(Arc::new(registry()));
    let run = || {
        run_pass(
            &local.source,
            &local.catalog,
            &local.swap,
            &local.ledger,
            &config,
            &|_| {},
        )
    };
    let v1 = |id: i32| {
        framed(
            1,
            V1,
            record(vec![
                ("id", Value::Int(id)),
                ("name", Value::String(format!("n{id}"))),
                ("amount", Value::Float(1.5)),
                ("placed", Value::TimestampMillis(1_764_669_600_000)),
            ]),
        )
    };
    let first: Vec<Option<Vec<u8>>> = vec![Some(v1(0)?), Some(v1(1)?)];
    local.put_records(
        "orders",
        kfs_workload::simple_records(0, 2, |o| first[o as usize].clone()),
    )?;
    let report = run().await?;
    assert!(report.quarantined.is_empty(), "{:?}", report.quarantined);
    let before = field_ids(&local, &config).await?;
    assert_eq!(before["id"].1, "int");

    let v2 = framed(
        2,
        V2,
        record(vec![
            ("id", Value::Long(1 << 40)),
            ("name", Value::String("big".into())),
            ("amount", Value::Double(2.25)),
            ("placed", Value::TimestampMillis(1_764_669_600_001)),
            (
                "tags",
                Value::Array(vec![Value::String("a".into()), Value::String("b".into())]),
            ),
            (
                "email",
                Value::Union(1, Box::new(Value::String("x@y".into()))),
            ),
        ]),
    )?;
    let v3 = framed(
        3,
        V3,
        record(vec![
            ("id", Value::Long(3)),
            ("amount", Value::Double(-1.0)),
            (
                "attrs",
                Value::Map([("k".to_owned(), Value::Long(7))].into_iter().collect()),
            ),
            (
                "price",
                Value::Decimal(apache_avro::Decimal::from(vec![0x30, 0x39])),
            ),
            ("day", Value::Date(20_000)),
            ("kind", Value::Enum(1, "OLD".into())),
            ("offset", Value::Long(42)),
        ]),
    )?;
    let incompatible = framed(
        4,
        INCOMPATIBLE,
        record(vec![("id", Value::String("x".into()))]),
    )?;
    let mut unknown = v2.clone();
    unknown[1..5].copy_from_slice(&99u32.to_be_bytes());
    let mut garbage = v1(5)?;
    garbage.truncate(8);
    let second: Vec<Option<Vec<u8>>> = vec![
        Some(v2),
        Some(v3),
        Some(incompatible),
        Some(unknown),
        Some(b"not framed".to_vec()),
        Some(garbage),
        None,
    ];
    local.put_records(
        "orders",
        kfs_workload::simple_records(2, 7, |o| second[(o - 2) as usize].clone()),
    )?;
    let report = run().await?;
    assert!(report.quarantined.is_empty(), "{:?}", report.quarantined);
    assert!(
        report.failed_tables.is_empty(),
        "{:?}",
        report.failed_tables
    );

    let name = config.naming.table_for("orders");
    let rows = offsets(&local.catalog, &name).await?;
    let dead = offsets(&local.catalog, &name.dead_letters()).await?;
    let once = |list: &[i64]| -> BTreeMap<(i32, i64), usize> {
        list.iter().map(|o| ((0, *o), 1)).collect()
    };
    assert_eq!(rows, once(&[0, 1, 2, 3, 8]));
    assert_eq!(dead, once(&[4, 5, 6, 7]));

    // Ids never change: v1's columns keep theirs, id is long now, the new ones follow.
    let after = field_ids(&local, &config).await?;
    for column in ["id", "name", "amount", "placed"] {
        assert_eq!(after[column].0, before[column].0, "{column}");
    }
    assert_eq!(
        (after["id"].1.as_str(), after["amount"].1.as_str()),
        ("long", "double")
    );
    for (column, kind) in [
        ("tags", "list"),
        ("email", "string"),
        ("price", "decimal(10, 2)"),
        ("day", "date"),
        ("kind", "string"),
        ("value_offset", "long"),
        ("placed", "timestamptz"),
    ] {
        assert!(
            after[column].1.starts_with(kind),
            "{column}: {}",
            after[column].1
        );
    }

    // The values, as a reader sees them.
    let table = local.catalog.load_table(&table_ident(&name)).await?;
    let batches: Vec<arrow_array::RecordBatch> = table
        .scan()
        .select(["offset", "id", "name", "amount", "price", "value_offset"])
        .build()?
        .to_arrow()
        .await?
        .try_collect()
        .await?;
    let mut seen = BTreeMap::new();
    for batch in &batches {
        use arrow_array::cast::AsArray;
        use arrow_array::types::{Decimal128Type, Float64Type, Int64Type};
        let offsets = batch.column(0).as_primitive::<Int64Type>();
        let ids = batch.column(1).as_primitive::<Int64Type>();
        let amounts = batch.column(3).as_primitive::<Float64Type>();
        let prices = batch.column(4).as_primitive::<Decimal128Type>();
        let inner = batch.column(5).as_primitive::<Int64Type>();
        for row in 0..batch.num_rows() {
            let at = |a: &dyn arrow_array::Array| !a.is_null(row);
            seen.insert(
                offsets.value(row),
                (
                    at(ids).then(|| ids.value(row)),
                    at(amounts).then(|| amounts.value(row)),
                    at(prices).then(|| prices.value(row)),
                    at(inner).then(|| inner.value(row)),
                ),
            );
        }
    }
    assert_eq!(seen[&1], (Some(1), Some(1.5), None, None));
    assert_eq!(seen[&2], (Some(1 << 40), Some(2.25), None, None));
    assert_eq!(seen[&3], (Some(3), Some(-1.0), Some(12345), Some(42)));
    assert_eq!(seen[&8], (None, None, None, None));
    Ok(())
}

/// A registry that cannot answer.
#[derive(Debug)]
struct Down;

#[async_trait::async_trait]
impl SchemaRegistry for Down {
    async fn schema(&self, _: SchemaId) -> Result<Option<RegisteredSchema>, RegistryError> {
        Err(RegistryError {
            location: "http://registry".into(),
            message: "connection refused".into(),
            kind: kfs_core::ErrorKind::Transient,
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_outage_is_retried_never_dead_lettered() -> Result<(), BoxError> {
    let local = Local::open().await?;
    let value = one_v1_value()?;
    local.put_records(
        "orders",
        kfs_workload::simple_records(0, 1, |_| Some(value.clone())),
    )?;
    let down = config(Arc::new(Down));
    let failed = run_pass(
        &local.source,
        &local.catalog,
        &local.swap,
        &local.ledger,
        &down,
        &|_| {},
    )
    .await;
    let report = failed?;
    assert!(report.quarantined.is_empty(), "{:?}", report.quarantined);
    let name = down.naming.table_for("orders");
    assert!(offsets(&local.catalog, &name).await?.is_empty());
    assert!(
        offsets(&local.catalog, &name.dead_letters())
            .await?
            .is_empty()
    );
    // The registry is back: the segment converts.
    let up = config(Arc::new(registry()));
    let report = local.run_config(&up).await?;
    assert!(report.quarantined.is_empty(), "{:?}", report.quarantined);
    assert_eq!(offsets(&local.catalog, &name).await?.len(), 1);
    Ok(())
}

/// A writer schema needing a column the table refuses (named like its partition field)
/// sends its records to the dead-letter table; the segment's other records are
/// written, and nothing is quarantined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_the_table_refuses_sends_only_its_records_to_dead_letters() -> Result<(), BoxError>
{
    const CLASH: &str = r#"{"type": "record", "name": "Clash", "fields": [
        {"name": "timestamp_day", "type": "long"}
    ]}"#;
    let local = Local::open().await?;
    let registry = registry();
    registry.register(
        SchemaId::Confluent(5),
        RegisteredSchema::new(SchemaKind::Avro, CLASH),
    );
    let mut config = config(Arc::new(registry));
    config.naming.partition_by = kfs_plan::layout::parse_partition_spec("day(timestamp)")?;
    config.naming.partition_by_given = true;
    let fine = one_v1_value()?;
    let clash = framed(5, CLASH, record(vec![("timestamp_day", Value::Long(1))]))?;
    let values = [fine, clash];
    local.put_records(
        "orders",
        kfs_workload::simple_records(0, 2, |o| values.get(o as usize).cloned()),
    )?;
    let report = local.run_config(&config).await?;
    assert!(
        report.quarantined.is_empty() && !report.left_work(),
        "{report:?}"
    );
    let name = config.naming.table_for("orders");
    let once = |o: i64| -> BTreeMap<(i32, i64), usize> { [((0, o), 1)].into_iter().collect() };
    assert_eq!(offsets(&local.catalog, &name).await?, once(0));
    assert_eq!(
        offsets(&local.catalog, &name.dead_letters()).await?,
        once(1)
    );
    Ok(())
}

/// Two converters growing the table's schema at once, both from the table as it was
/// before either (as two invocations opened it): the second's schema change conflicts,
/// it re-reads the table and grows it again. Both segments' rows land, with the
/// columns of both versions; no record is dead-lettered for the race.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_converters_growing_the_schema_at_once_both_land() -> Result<(), BoxError> {
    use kfs_core::{Feed, Ledger, SegmentSource};
    let local = Local::open().await?;
    let config = config(Arc::new(registry()));
    let v2 = |id: i64| {
        framed(
            2,
            V2,
            record(vec![
                ("id", Value::Long(id)),
                ("name", Value::String(format!("n{id}"))),
                ("amount", Value::Double(2.25)),
                ("placed", Value::TimestampMillis(1_764_669_600_000)),
                ("tags", Value::Array(vec![Value::String("a".into())])),
                ("email", Value::Union(0, Box::new(Value::Null))),
            ]),
        )
    };
    let v3 = |id: i64| {
        framed(
            3,
            V3,
            record(vec![
                ("id", Value::Long(id)),
                ("amount", Value::Double(-1.0)),
                ("attrs", Value::Map(Default::default())),
                (
                    "price",
                    Value::Decimal(apache_avro::Decimal::from(vec![0x01])),
                ),
                ("day", Value::Date(20_000)),
                ("kind", Value::Enum(0, "NEW".into())),
                ("offset", Value::Long(id)),
            ]),
        )
    };
    let first: Vec<Vec<u8>> = vec![v2(0)?, v2(1)?];
    let second: Vec<Vec<u8>> = vec![v3(2)?, v3(3)?];
    let a = local.put_records(
        "orders",
        kfs_workload::simple_records(0, 2, |o| first.get(o as usize).cloned()),
    )?;
    let b = local.put_records(
        "orders",
        kfs_workload::simple_records(2, 2, |o| second.get(o as usize - 2).cloned()),
    )?;
    let target = kfs_core::testing::TopicTable::open(
        local.access(),
        &config.naming,
        Feed {
            namespace: "ns",
            topic: "orders",
        },
        &local.ledger.identity(),
    )
    .await?
    .with_schemas(config.schemas.clone());
    let convert = |key: kfs_plan::keys::SegmentKey| {
        let (local, target) = (&local, &target);
        async move {
            let segment = key.object_key(kfs_plan::keys::SegmentFile::Data);
            let object = local.source.stat(&segment).await?.ok_or("no segment")?;
            Ok::<_, BoxError>(
                kfs_core::testing::ingest_segment(
                    local.access(),
                    &local.source,
                    target,
                    &local.ledger,
                    &key,
                    &object,
                    kfs_segment::DecodeLimits::default(),
                )
                .await?,
            )
        }
    };
    let (one, two) = tokio::join!(convert(a), convert(b));
    let (one, two) = (one?, two?);
    assert!(
        one.dead_letters.is_empty() && two.dead_letters.is_empty(),
        "{one:?} {two:?}"
    );
    let report = local.run_config(&config).await?;
    assert!(report.quarantined.is_empty(), "{report:?}");
    let name = config.naming.table_for("orders");
    let rows = offsets(&local.catalog, &name).await?;
    assert_eq!(
        rows,
        (0..4).map(|o| ((0, o), 1)).collect::<BTreeMap<_, _>>()
    );
    let columns = field_ids(&local, &config).await?;
    for column in [
        "id",
        "name",
        "tags",
        "email",
        "attrs",
        "price",
        "kind",
        "value_offset",
    ] {
        assert!(columns.contains_key(column), "{column}: {columns:?}");
    }
    // Each segment was read from the store once: held for its scan and conversion,
    // and for the second converter's pass after its race.
    assert_eq!(local.source.opens(), 2);
    // Each converter grew the table once: the first from the table it opened, the
    // second after its change conflicted and it read the table again.
    let table = local
        .catalog
        .load_table(&kfs_core::table_ident(&name))
        .await?;
    assert_eq!(table.metadata().schemas_iter().count(), 3);
    // No id was given twice.
    let mut ids: Vec<i32> = columns.values().map(|(id, _)| *id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), columns.len());
    Ok(())
}

/// A registry table in upsert mode: one row per record key, its last Avro value
/// decoded into the columns (the table keeps `value` too, whose null is the tombstone
/// that deletes the key), over two commits; iceberg-rust, pyiceberg and DuckDB read
/// exactly the last rows, before and after a compaction that folds the deletes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_table_in_upsert_mode_mirrors_its_keys() -> Result<(), BoxError> {
    let local = Local::open().await?;
    let registry = Arc::new(MemoryRegistry::default());
    registry.register(
        SchemaId::Confluent(1),
        RegisteredSchema::new(SchemaKind::Avro, V1),
    );
    let mut config = config(registry);
    config.naming.mode = kfs_plan::mode::ModeSetting::parse("upsert", None)?;
    let order = |offset: i64, key: &str, name: Option<&str>| -> Result<_, BoxError> {
        let value = match name {
            Some(name) => Some(framed(
                1,
                V1,
                record(vec![
                    ("id", Value::Int(offset as i32)),
                    ("name", Value::String(name.into())),
                    ("amount", Value::Float(1.5)),
                    ("placed", Value::TimestampMillis(1_700_000_000_000)),
                ]),
            )?),
            None => None,
        };
        Ok(kfs_segment::OwnedRecord {
            offset,
            timestamp_ms: 1_700_000_000_000 + offset,
            key: Some(key.as_bytes().to_vec()),
            value,
            headers: vec![],
        })
    };
    local.put_records(
        "orders",
        vec![
            order(0, "a", Some("a1"))?,
            order(1, "b", Some("b1"))?,
            order(2, "a", Some("a2"))?,
            order(3, "c", Some("c1"))?,
        ],
    )?;
    local.run_config(&config).await?;
    local.put_records(
        "orders",
        vec![
            order(4, "b", None)?,
            order(5, "c", Some("c2"))?,
            order(6, "d", Some("d1"))?,
        ],
    )?;
    let report = local.run_config(&config).await?;
    assert!(!report.left_work(), "{report:?}");
    let name = config.naming.table_for("orders");
    let expected: BTreeMap<(i32, i64), usize> = [2, 5, 6].iter().map(|o| ((0, *o), 1)).collect();
    assert_eq!(offsets(&local.catalog, &name).await?, expected);
    crate::row_deltas::readers_see(&local, &name.to_string(), [2, 5, 6].into_iter()).await?;
    local.compact(&name).await?;
    assert_eq!(offsets(&local.catalog, &name).await?, expected);
    crate::row_deltas::readers_see(&local, &name.to_string(), [2, 5, 6].into_iter()).await
}

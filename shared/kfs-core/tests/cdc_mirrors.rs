//! The `cdc` table mode on Debezium change events in JSON (with and without the schema
//! wrapper, as Kafka Connect's JSON converter writes them with `schemas.enable` on or
//! off), and in Avro through the schema registry (Debezium's envelope schema, its key
//! decoded into `key_fields`): snapshot reads, creates, updates, deletes followed by Debezium's tombstone,
//! a row created again after its delete, over two commits. The mirror holds each
//! key's last `after` image, its fields as columns; a message event, a truncate and a
//! value that is no change event go to the dead-letter table with the reason and leave
//! their key's row as it was. iceberg-rust, pyiceberg and DuckDB read exactly the
//! expected rows, before and after a compaction that folds the deletes; keyed by the
//! record key and by the `id` field (`upsert_key id`) alike.

use std::collections::BTreeMap;

use futures::TryStreamExt;
use iceberg::Catalog;
use kfs_core::table_ident;
use kfs_plan::naming::{TableNaming, ValueFormat};

use crate::local::{BoxError, Local, dead_letter_reasons, offsets};

type TestResult = Result<(), BoxError>;

/// The topic Debezium writes the `customers` table's changes to.
const TOPIC: &str = "dbserver1.inventory.customers";

/// A Debezium event of key `id` with operation `op` and images of `name` (`None`:
/// null), at `offset`; `wrapped` puts it in the schema wrapper.
fn event(
    offset: i64,
    id: i64,
    op: &str,
    before: Option<&str>,
    after: Option<&str>,
    wrapped: bool,
) -> kfs_segment::OwnedRecord {
    let image = |name: Option<&str>| match name {
        Some(name) => serde_json::json!({"id": id, "name": name}),
        None => serde_json::Value::Null,
    };
    let payload = serde_json::json!({
        "op": op,
        "before": image(before),
        "after": image(after),
        "source": {"connector": "postgresql", "lsn": 1000 + offset},
        "ts_ms": 1_700_000_000_000i64 + offset,
    });
    let value = match wrapped {
        true => {
            serde_json::json!({"schema": {"type": "struct", "name": "dbserver1.public.customers.Envelope"}, "payload": payload})
        }
        false => payload,
    };
    record(offset, id, Some(value.to_string()))
}

/// A record of key `id` (Debezium's key struct) with `value` at `offset`.
fn record(offset: i64, id: i64, value: Option<String>) -> kfs_segment::OwnedRecord {
    kfs_segment::OwnedRecord {
        offset,
        timestamp_ms: 1_700_000_000_000 + offset,
        key: Some(format!("{{\"id\":{id}}}").into_bytes()),
        value: value.map(String::into_bytes),
        headers: vec![],
    }
}

/// The `name` column of the mirror, by offset.
async fn names(local: &Local, naming: &TableNaming) -> Result<BTreeMap<i64, String>, BoxError> {
    text_by_offset(local, naming, "name").await
}

/// The text column `column` of the mirror, by offset (a null as the empty text).
async fn text_by_offset(
    local: &Local,
    naming: &TableNaming,
    column: &str,
) -> Result<BTreeMap<i64, String>, BoxError> {
    use arrow_array::cast::AsArray;
    let table = local
        .catalog
        .load_table(&table_ident(&naming.table_for(TOPIC)))
        .await?;
    let batches: Vec<arrow_array::RecordBatch> = table
        .scan()
        .select(["offset", column])
        .build()?
        .to_arrow()
        .await?
        .try_collect()
        .await?;
    let mut found = BTreeMap::new();
    for batch in batches {
        let offsets = batch
            .column(0)
            .as_primitive::<arrow_array::types::Int64Type>();
        let names = batch.column(1).as_string::<i32>();
        for row in 0..batch.num_rows() {
            found.insert(offsets.value(row), names.value(row).to_owned());
        }
    }
    Ok(found)
}

/// Rows of the mirror: `name` by offset.
fn rows_of(rows: &[(i64, &str)]) -> BTreeMap<i64, String> {
    rows.iter().map(|(o, n)| (*o, (*n).to_owned())).collect()
}

/// Checks the mirror after the second round of events (the same in every format):
/// each key's last image, the message, truncate and non-event records (offsets 10,
/// 11, 12; the last refused for `no_event`) in the dead-letter table, and, when
/// `keyed_by_fields`, the delete whose key names none of them (offset 14), every reader
/// reading exactly those rows, before and after a compaction that leaves no delete
/// file. Each row holds its event's source position (`lsn` `lsn_base` + its offset).
async fn mirrors_the_second_round(
    local: &Local,
    naming: &TableNaming,
    (no_event, keyed_by_fields): (&str, bool),
    lsn_base: i64,
) -> TestResult {
    let name = naming.table_for(TOPIC);
    let rows = rows_of(&[(3, "anna"), (9, "bo again"), (13, "dee two")]);
    assert_eq!(names(local, naming).await?, rows);
    let positions: BTreeMap<i64, String> = rows
        .keys()
        .map(|offset| (*offset, format!("lsn:{}", lsn_base + offset)))
        .collect();
    let column = kfs_values::layout::SOURCE_POSITION_COLUMN;
    assert_eq!(text_by_offset(local, naming, column).await?, positions);
    let letters = dead_letter_reasons(&local.catalog, &name).await?;
    let refused: &[i64] = match keyed_by_fields {
        true => &[10, 11, 12, 14],
        false => &[10, 11, 12],
    };
    assert_eq!(letters.keys().copied().collect::<Vec<_>>(), refused);
    if keyed_by_fields {
        assert!(letters[&14].contains("names no row"), "{letters:?}");
    }
    assert!(letters[&10].contains("op m"), "{letters:?}");
    assert!(letters[&11].contains("truncate"), "{letters:?}");
    assert!(letters[&12].contains(no_event), "{letters:?}");
    let by_offset: BTreeMap<(i32, i64), usize> = rows.keys().map(|o| ((0, *o), 1)).collect();
    assert_eq!(offsets(&local.catalog, &name).await?, by_offset);
    crate::row_deltas::readers_see(local, &name.to_string(), rows.keys().copied()).await?;
    // Compacted: the same rows, no delete file left.
    local.compact(&name).await?;
    let table = local.catalog.load_table(&table_ident(&name)).await?;
    assert!(kfs_core::live_deletes(&table).await?.files.is_empty());
    assert_eq!(names(local, naming).await?, rows);
    crate::row_deltas::readers_see(local, &name.to_string(), rows.keys().copied()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_events_in_json_mirror_each_rows_last_image() -> TestResult {
    json_events_mirrored(None, None).await
}

/// Keyed by the `id` field (`upsert_key id`): the after image's `id`; a delete's,
/// whose row holds no image, from its record key (Debezium's key object).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_events_in_json_mirror_by_the_id_field() -> TestResult {
    json_events_mirrored(Some("id"), None).await
}

/// Keyed by the record key, then by `id` (an operator set `kfs.upsert-key=id`
/// between the commits): the key index of the record key's bytes is no index of the
/// `id` keys, so the second commit reads the table and keys every row anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_keyed_anew_between_commits_keys_every_row_anew() -> TestResult {
    json_events_mirrored(None, Some("id")).await
}

/// The JSON events mirrored, keyed by `key` (`upsert_key`; `None`: the record key),
/// and after the first commit by `rekeyed` when given (the table property changed).
async fn json_events_mirrored(key: Option<&str>, rekeyed: Option<&str>) -> TestResult {
    let local = Local::open().await?;
    let naming = TableNaming {
        value_format: ValueFormat::Json,
        mode: kfs_plan::mode::ModeSetting::parse("cdc", key)?,
        ..TableNaming::default()
    };
    naming.validate()?;
    local.put_records(
        TOPIC,
        vec![
            event(0, 1, "r", None, Some("ann"), false),
            event(1, 2, "r", None, Some("bob"), true),
            event(2, 3, "c", None, Some("cy"), false),
            event(3, 1, "u", Some("ann"), Some("anna"), true),
            event(4, 2, "d", Some("bob"), None, false),
            record(5, 2, None),
            event(6, 4, "c", None, Some("dee"), true),
        ],
    )?;
    local.run(&naming).await?;
    assert_eq!(
        names(&local, &naming).await?,
        rows_of(&[(2, "cy"), (3, "anna"), (6, "dee")])
    );
    if let Some(fields) = rekeyed {
        use iceberg::transaction::{ApplyTransactionAction, Transaction};
        let ident = table_ident(&naming.table_for(TOPIC));
        let table = local.catalog.load_table(&ident).await?;
        let tx = Transaction::new(&table);
        let tx = tx
            .update_table_properties()
            .set(
                kfs_plan::mode::UPSERT_KEY_PROPERTY.to_owned(),
                fields.to_owned(),
            )
            .apply(tx)?;
        tx.commit(&local.catalog).await?;
    }
    local.put_records(
        TOPIC,
        vec![
            event(7, 3, "d", Some("cy"), None, true),
            record(8, 3, None),
            event(9, 2, "c", None, Some("bo again"), false),
            // A message event, a truncate and a value that is no change event: dead
            // letters, their keys' rows as they were.
            event(10, 4, "m", None, None, false),
            event(11, 1, "t", None, None, false),
            record(12, 1, Some("{\"id\": 1}".into())),
            event(13, 4, "u", Some("dee"), Some("dee two"), false),
            // A delete whose key holds no `id`: keyed by `id`, a dead letter (it would
            // delete nothing); keyed by the record key, a key with no row.
            kfs_segment::OwnedRecord {
                key: Some(br#"{"other":1}"#.to_vec()),
                ..event(14, 1, "d", Some("anna"), None, false)
            },
        ],
    )?;
    let report = local.run(&naming).await?;
    assert!(!report.left_work(), "{report:?}");
    let keyed_by_fields = key.or(rekeyed).is_some();
    mirrors_the_second_round(
        &local,
        &naming,
        ("no Debezium change event", keyed_by_fields),
        1000,
    )
    .await
}

/// Debezium's Avro envelope of the `customers` table (as its Avro converter registers
/// it: `before` and `after` optional records of the row, the `source` block, `op`,
/// `ts_ms` and the `transaction` block).
const ENVELOPE: &str = r#"{"type": "record", "name": "Envelope", "namespace": "dbserver1.inventory.customers",
  "fields": [
    {"name": "before", "type": ["null", {"type": "record", "name": "Value", "fields": [
      {"name": "id", "type": "int"},
      {"name": "name", "type": "string"},
      {"name": "email", "type": ["null", "string"], "default": null}],
      "connect.name": "dbserver1.inventory.customers.Value"}], "default": null},
    {"name": "after", "type": ["null", "Value"], "default": null},
    {"name": "source", "type": {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
      "fields": [
        {"name": "version", "type": "string"},
        {"name": "connector", "type": "string"},
        {"name": "name", "type": "string"},
        {"name": "ts_ms", "type": "long"},
        {"name": "db", "type": "string"},
        {"name": "schema", "type": "string"},
        {"name": "table", "type": "string"},
        {"name": "txId", "type": ["null", "long"], "default": null},
        {"name": "lsn", "type": ["null", "long"], "default": null}]}},
    {"name": "op", "type": "string"},
    {"name": "ts_ms", "type": ["null", "long"], "default": null},
    {"name": "transaction", "type": ["null", {"type": "record", "name": "block", "namespace": "event",
      "fields": [
        {"name": "id", "type": "string"},
        {"name": "total_order", "type": "long"},
        {"name": "data_collection_order", "type": "long"}]}], "default": null}],
  "connect.name": "dbserver1.inventory.customers.Envelope"}"#;

/// Debezium's Avro key of the `customers` table: its primary key.
const KEY: &str = r#"{"type": "record", "name": "Key", "namespace": "dbserver1.inventory.customers",
  "fields": [{"name": "id", "type": "int"}], "connect.name": "dbserver1.inventory.customers.Key"}"#;

/// A key of the topic that holds no `id`.
const OTHER_KEY: &str =
    r#"{"type": "record", "name": "OtherKey", "fields": [{"name": "other", "type": "int"}]}"#;

/// A row's fields on the topic of `customers` with schema id 1, keyed by `id`
/// (schema id 2), with the optional value of `envelope`.
fn avro_record(
    offset: i64,
    id: i32,
    envelope: Option<apache_avro::types::Value>,
) -> Result<kfs_segment::OwnedRecord, BoxError> {
    use apache_avro::types::Value;
    let framed = |id: u32, schema: &str, value: Value| -> Result<Vec<u8>, BoxError> {
        let schema = apache_avro::Schema::parse_str(schema)?;
        let mut bytes = vec![0];
        bytes.extend_from_slice(&id.to_be_bytes());
        bytes.extend(apache_avro::to_avro_datum(&schema, value)?);
        Ok(bytes)
    };
    Ok(kfs_segment::OwnedRecord {
        offset,
        timestamp_ms: 1_700_000_000_000 + offset,
        key: Some(framed(
            2,
            KEY,
            Value::Record(vec![("id".into(), Value::Int(id))]),
        )?),
        value: envelope.map(|e| framed(1, ENVELOPE, e)).transpose()?,
        headers: vec![],
    })
}

/// A Debezium change event in Avro of key `id` with operation `op` and images of
/// `name` (`None`: null), at `offset`.
fn avro_event(
    offset: i64,
    id: i32,
    op: &str,
    (before, after): (Option<&str>, Option<&str>),
) -> Result<kfs_segment::OwnedRecord, BoxError> {
    use apache_avro::types::Value;
    let optional = |value: Option<Value>| match value {
        Some(value) => Value::Union(1, Box::new(value)),
        None => Value::Union(0, Box::new(Value::Null)),
    };
    let image = |name: Option<&str>| {
        optional(name.map(|name| {
            Value::Record(vec![
                ("id".into(), Value::Int(id)),
                ("name".into(), Value::String(name.into())),
                (
                    "email".into(),
                    optional(Some(Value::String(format!("{name}@example.com")))),
                ),
            ])
        }))
    };
    let text = |s: &str| Value::String(s.into());
    let source = Value::Record(vec![
        ("version".into(), text("2.7.0.Final")),
        ("connector".into(), text("postgresql")),
        ("name".into(), text("dbserver1")),
        ("ts_ms".into(), Value::Long(1_700_000_000_000 + offset)),
        ("db".into(), text("postgres")),
        ("schema".into(), text("inventory")),
        ("table".into(), text("customers")),
        ("txId".into(), optional(Some(Value::Long(500 + offset)))),
        (
            "lsn".into(),
            optional(Some(Value::Long(24_000_000 + offset))),
        ),
    ]);
    let envelope = Value::Record(vec![
        ("before".into(), image(before)),
        ("after".into(), image(after)),
        ("source".into(), source),
        ("op".into(), text(op)),
        (
            "ts_ms".into(),
            optional(Some(Value::Long(1_700_000_000_000 + offset))),
        ),
        ("transaction".into(), optional(None)),
    ]);
    avro_record(offset, id, Some(envelope))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_events_in_avro_mirror_each_rows_last_image() -> TestResult {
    avro_events_mirrored(None).await
}

/// Keyed by the `id` field: the after image's `id`; a delete's from the decoded
/// record key (`key_fields.id`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_events_in_avro_mirror_by_the_id_field() -> TestResult {
    avro_events_mirrored(Some("id")).await
}

/// The Avro events mirrored, keyed by `key` (`upsert_key`; `None`: the record key).
async fn avro_events_mirrored(key: Option<&str>) -> TestResult {
    use kfs_core::{MemoryRegistry, RegisteredSchema, SchemaCache, SchemaId, SchemaKind};
    let local = Local::open().await?;
    let registry = MemoryRegistry::default();
    for (id, text) in [(1, ENVELOPE), (2, KEY)] {
        registry.register(
            SchemaId::Confluent(id),
            RegisteredSchema::new(SchemaKind::Avro, text),
        );
    }
    // Schema 4: a key without `id`.
    registry.register(
        SchemaId::Confluent(4),
        RegisteredSchema::new(SchemaKind::Avro, OTHER_KEY),
    );
    // Schema 3: a row of the table written without its envelope.
    registry.register(
        SchemaId::Confluent(3),
        RegisteredSchema::new(
            SchemaKind::Avro,
            r#"{"type": "record", "name": "Row", "fields": [{"name": "id", "type": "int"}]}"#,
        ),
    );
    let config = kfs_core::PipelineConfig {
        naming: TableNaming {
            value_format: ValueFormat::Registry,
            key_format: kfs_plan::naming::KeyFormat::Registry,
            mode: kfs_plan::mode::ModeSetting::parse("cdc", key)?,
            ..TableNaming::default()
        },
        schemas: Some(std::sync::Arc::new(SchemaCache::new(std::sync::Arc::new(
            registry,
        )))),
        ..kfs_core::PipelineConfig::default()
    };
    config.naming.validate()?;
    local.put_records(
        TOPIC,
        vec![
            avro_event(0, 1, "r", (None, Some("ann")))?,
            avro_event(1, 2, "r", (None, Some("bob")))?,
            avro_event(2, 3, "c", (None, Some("cy")))?,
            avro_event(3, 1, "u", (Some("ann"), Some("anna")))?,
            avro_event(4, 2, "d", (Some("bob"), None))?,
            avro_record(5, 2, None)?,
            avro_event(6, 4, "c", (None, Some("dee")))?,
        ],
    )?;
    local.run_config(&config).await?;
    let naming = &config.naming;
    assert_eq!(
        names(&local, naming).await?,
        rows_of(&[(2, "cy"), (3, "anna"), (6, "dee")])
    );
    let mut not_an_envelope = avro_record(12, 1, None)?;
    let mut value = vec![0, 0, 0, 0, 3];
    value.extend(apache_avro::to_avro_datum(
        &apache_avro::Schema::parse_str(
            r#"{"type": "record", "name": "Row", "fields": [{"name": "id", "type": "int"}]}"#,
        )?,
        apache_avro::types::Value::Record(vec![("id".into(), apache_avro::types::Value::Int(1))]),
    )?);
    not_an_envelope.value = Some(value);
    // A tombstone whose decoded key holds no `id`: keyed by `id`, a dead letter.
    let mut other_key = avro_record(14, 1, None)?;
    let mut framed_key = vec![0, 0, 0, 0, 4];
    framed_key.extend(apache_avro::to_avro_datum(
        &apache_avro::Schema::parse_str(OTHER_KEY)?,
        apache_avro::types::Value::Record(vec![(
            "other".into(),
            apache_avro::types::Value::Int(1),
        )]),
    )?);
    other_key.key = Some(framed_key);
    local.put_records(
        TOPIC,
        vec![
            avro_event(7, 3, "d", (Some("cy"), None))?,
            avro_record(8, 3, None)?,
            avro_event(9, 2, "c", (None, Some("bo again")))?,
            // A message event, a truncate and a value that is no change event: dead
            // letters, their keys' rows as they were.
            avro_event(10, 4, "m", (None, None))?,
            avro_event(11, 1, "t", (None, None))?,
            not_an_envelope,
            avro_event(13, 4, "u", (Some("dee"), Some("dee two")))?,
            other_key,
        ],
    )?;
    let report = local.run_config(&config).await?;
    assert!(!report.left_work(), "{report:?}");
    let refused = ("no Debezium envelope", key.is_some());
    mirrors_the_second_round(&local, naming, refused, 24_000_000).await
}

/// JSON records (offset, record key, value; `None`: a tombstone) mirrored in upsert
/// mode keyed by the value field `key`: the mirror's `name` by offset, and the dead
/// letters' offsets.
async fn upserted_by(
    key: &str,
    records: &[(i64, &str, Option<&str>)],
) -> Result<(BTreeMap<i64, String>, Vec<i64>), BoxError> {
    let local = Local::open().await?;
    let naming = TableNaming {
        value_format: ValueFormat::Json,
        mode: kfs_plan::mode::ModeSetting::parse("upsert", Some(key))?,
        ..TableNaming::default()
    };
    naming.validate()?;
    let records = records
        .iter()
        .map(|(offset, key, value)| kfs_segment::OwnedRecord {
            key: Some(key.as_bytes().to_vec()),
            ..record(*offset, 0, value.map(str::to_owned))
        });
    local.put_records(TOPIC, records.collect())?;
    let report = local.run(&naming).await?;
    assert!(!report.left_work(), "{report:?}");
    let letters = dead_letter_reasons(&local.catalog, &naming.table_for(TOPIC)).await?;
    Ok((
        names(&local, &naming).await?,
        letters.keys().copied().collect(),
    ))
}

/// A key field named like a record column (`offset`, whose column is `value_offset`)
/// keys by the value's field, not the record's offset; a tombstone whose key holds
/// no such field is a dead letter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_field_named_like_a_record_column_keys_by_the_values_field() -> TestResult {
    let (one, two) = (r#"{"offset":1}"#, r#"{"offset":2}"#);
    let (rows, letters) = upserted_by(
        "offset",
        &[
            (0, one, Some(r#"{"offset":1,"name":"a"}"#)),
            (1, two, Some(r#"{"offset":2,"name":"b"}"#)),
            (2, one, Some(r#"{"offset":1,"name":"a2"}"#)),
            (3, two, None),
            (4, r#"{"id":2}"#, None),
        ],
    )
    .await?;
    assert_eq!(rows, rows_of(&[(2, "a2")]));
    assert_eq!(letters, [4]);
    Ok(())
}

/// A key field holding fractions (a `double` column) keys no row: each value is kept
/// as it came, and a tombstone naming a fraction is a dead letter (it would delete
/// nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_field_of_fractions_keys_no_row_and_its_tombstones_are_dead_letters() -> TestResult {
    let half = r#"{"ratio":0.5}"#;
    let (rows, letters) = upserted_by(
        "ratio",
        &[
            (0, half, Some(r#"{"ratio":0.5,"name":"x"}"#)),
            (1, half, Some(r#"{"ratio":0.5,"name":"y"}"#)),
            (2, half, None),
        ],
    )
    .await?;
    assert_eq!((rows, letters), (rows_of(&[(0, "x"), (1, "y")]), vec![2]));
    Ok(())
}

/// A key of a field changed from two partitions, a commit apart: the delete committed
/// first (partition 1, the latest timestamp then) is kept as a marker, so a change of
/// the key committed later with an earlier timestamp (partition 0) is ordered against
/// it and applied as event order says (not at all); a change after the delete is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_orders_a_later_committed_change_of_its_key_from_another_partition() -> TestResult
{
    let local = Local::open().await?;
    let naming = TableNaming {
        value_format: ValueFormat::Json,
        mode: kfs_plan::mode::ModeSetting::parse("upsert", Some("id"))?,
        ..TableNaming::default()
    };
    let change = |offset: i64, at_ms: i64, name: Option<&str>| kfs_segment::OwnedRecord {
        offset,
        timestamp_ms: 1_700_000_000_000 + at_ms,
        key: Some(br#"{"id":1}"#.to_vec()),
        value: name.map(|name| format!(r#"{{"id":1,"name":"{name}"}}"#).into_bytes()),
        headers: vec![],
    };
    local.put_records_at(TOPIC, 0, vec![change(0, 100, Some("a"))])?;
    local.put_records_at(TOPIC, 1, vec![change(0, 300, None)])?;
    local.run(&naming).await?;
    assert_eq!(names(&local, &naming).await?, rows_of(&[]));
    // Partition 0's next change is older than the delete: event order deletes it.
    local.put_records_at(TOPIC, 0, vec![change(1, 200, Some("c"))])?;
    local.run(&naming).await?;
    assert_eq!(names(&local, &naming).await?, rows_of(&[]));
    // Through a compaction (the marker kept, its row rewritten away), a newer change
    // of partition 1 applies.
    local.compact(&naming.table_for(TOPIC)).await?;
    local.put_records_at(TOPIC, 1, vec![change(1, 400, Some("d"))])?;
    let report = local.run(&naming).await?;
    assert!(!report.left_work(), "{report:?}");
    assert_eq!(names(&local, &naming).await?, rows_of(&[(1, "d")]));
    Ok(())
}

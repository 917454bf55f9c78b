//! The `cdc` table mode on Debezium change events in JSON (with and without the schema
//! wrapper, as Kafka Connect's JSON converter writes them with `schemas.enable` on or
//! off): snapshot reads, creates, updates, deletes followed by Debezium's tombstone,
//! a row created again after its delete, over two commits. The mirror holds each
//! key's last `after` image, its fields as columns; a message event, a truncate and a
//! value that is no change event go to the dead-letter table with the reason and leave
//! their key's row as it was. iceberg-rust, pyiceberg and DuckDB read exactly the
//! expected rows, before and after a compaction that folds the deletes.

use std::collections::BTreeMap;

use futures::TryStreamExt;
use iceberg::Catalog;
use kfs_core::table_ident;
use kfs_plan::naming::{TableNaming, ValueFormat};

use crate::local::{BoxError, Local, dead_letter_reasons, offsets};

type TestResult = Result<(), BoxError>;

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
    use arrow_array::cast::AsArray;
    let table = local
        .catalog
        .load_table(&table_ident(&naming.table_for("customers")))
        .await?;
    let batches: Vec<arrow_array::RecordBatch> = table
        .scan()
        .select(["offset", "name"])
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_events_in_json_mirror_each_rows_last_image() -> TestResult {
    let local = Local::open().await?;
    let naming = TableNaming {
        value_format: ValueFormat::Json,
        mode: kfs_plan::mode::ModeSetting::parse("cdc", None)?,
        ..TableNaming::default()
    };
    naming.validate()?;
    local.put_records(
        "customers",
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
    let name = naming.table_for("customers");
    let expect = |rows: &[(i64, &str)]| -> BTreeMap<i64, String> {
        rows.iter().map(|(o, n)| (*o, (*n).to_owned())).collect()
    };
    assert_eq!(
        names(&local, &naming).await?,
        expect(&[(2, "cy"), (3, "anna"), (6, "dee")])
    );
    local.put_records(
        "customers",
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
        ],
    )?;
    let report = local.run(&naming).await?;
    assert!(!report.left_work(), "{report:?}");
    let rows = expect(&[(3, "anna"), (9, "bo again"), (13, "dee two")]);
    assert_eq!(names(&local, &naming).await?, rows);
    let letters = dead_letter_reasons(&local.catalog, &name).await?;
    assert_eq!(letters.keys().copied().collect::<Vec<_>>(), [10, 11, 12]);
    assert!(letters[&10].contains("op m"), "{letters:?}");
    assert!(letters[&11].contains("truncate"), "{letters:?}");
    assert!(
        letters[&12].contains("no Debezium change event"),
        "{letters:?}"
    );
    let by_offset: BTreeMap<(i32, i64), usize> = rows.keys().map(|o| ((0, *o), 1)).collect();
    assert_eq!(offsets(&local.catalog, &name).await?, by_offset);
    crate::row_deltas::readers_see(&local, &name.to_string(), rows.keys().copied()).await?;
    // Compacted: the same rows, no delete file left.
    local.compact(&name).await?;
    let table = local.catalog.load_table(&table_ident(&name)).await?;
    assert!(kfs_core::live_deletes(&table).await?.files.is_empty());
    assert_eq!(names(&local, &naming).await?, rows);
    crate::row_deltas::readers_see(&local, &name.to_string(), rows.keys().copied()).await
}

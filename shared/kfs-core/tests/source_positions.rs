//! One key's Debezium changes from two partitions, ordered by their source positions
//! (PostgreSQL's `lsn`) where their record timestamps say the opposite: within a
//! commit, across commits against a delete (Debezium's tombstone after it standing at
//! the delete's position), with the key index rebuilt from the table's files, and
//! through a compaction. Every step's answer differs from the timestamps' order, so
//! the test fails if positions are not kept in the `__source_position` column and the
//! index.

use std::collections::BTreeMap;

use futures::TryStreamExt;
use iceberg::Catalog;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use kfs_core::table_ident;
use kfs_plan::naming::{TableNaming, ValueFormat};

use crate::local::{BoxError, Local};

type TestResult = Result<(), BoxError>;

const TOPIC: &str = "dbserver1.public.customers";

/// A Debezium JSON event of key 1 at `offset` (record timestamp `at_ms` past a base):
/// `op` with the after image `name` (`None`: none), at `lsn` (`None`: Debezium's
/// tombstone, a null value).
fn change(
    offset: i64,
    at_ms: i64,
    op: &str,
    name: Option<&str>,
    lsn: Option<u64>,
) -> kfs_segment::OwnedRecord {
    let value = lsn.map(|lsn| {
        let after = name.map(|name| serde_json::json!({"id": 1, "name": name}));
        serde_json::json!({"op": op, "after": after, "source": {"connector": "postgresql", "lsn": lsn}})
            .to_string()
            .into_bytes()
    });
    kfs_segment::OwnedRecord {
        offset,
        timestamp_ms: 1_700_000_000_000 + at_ms,
        key: Some(br#"{"id":1}"#.to_vec()),
        value,
        headers: vec![],
    }
}

/// The mirror's rows: (partition, offset) to name and source position.
async fn rows(
    local: &Local,
    naming: &TableNaming,
) -> Result<BTreeMap<(i32, i64), (String, String)>, BoxError> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int32Type, Int64Type};
    let table = local
        .catalog
        .load_table(&table_ident(&naming.table_for(TOPIC)))
        .await?;
    let column = kfs_values::layout::SOURCE_POSITION_COLUMN;
    let batches: Vec<arrow_array::RecordBatch> = table
        .scan()
        // In the schema's order: iceberg-rust 0.10 mislabels the columns of a
        // selection in another order (icegatetech/icegate#168 traced it to its
        // record batch transformer).
        .select(["partition", "offset", column, "name"])
        .build()?
        .to_arrow()
        .await?
        .try_collect()
        .await?;
    let mut found = BTreeMap::new();
    for batch in batches {
        let named = |name: &str| {
            batch
                .column_by_name(name)
                .cloned()
                .ok_or_else(|| format!("no column {name}"))
        };
        let (partition, offset) = (named("partition")?, named("offset")?);
        let (name, position) = (named("name")?, named(column)?);
        let (partition, offset) = (
            partition.as_primitive::<Int32Type>(),
            offset.as_primitive::<Int64Type>(),
        );
        let (name, position) = (name.as_string::<i32>(), position.as_string::<i32>());
        for row in 0..batch.num_rows() {
            found.insert(
                (partition.value(row), offset.value(row)),
                (name.value(row).to_owned(), position.value(row).to_owned()),
            );
        }
    }
    Ok(found)
}

/// One row: partition, offset, name, lsn.
fn row(
    partition: i32,
    offset: i64,
    name: &str,
    lsn: u64,
) -> BTreeMap<(i32, i64), (String, String)> {
    BTreeMap::from([((partition, offset), (name.to_owned(), format!("lsn:{lsn}")))])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_changes_from_two_partitions_apply_in_their_source_order() -> TestResult {
    let local = Local::open().await?;
    let naming = TableNaming {
        value_format: ValueFormat::Json,
        mode: kfs_plan::mode::ModeSetting::parse("cdc", Some("id"))?,
        ..TableNaming::default()
    };
    naming.validate()?;
    let run = || async {
        let report = local.run(&naming).await?;
        assert!(!report.left_work(), "{report:?}");
        rows(&local, &naming).await
    };
    // One commit: partition 1's update is later in the log, earlier by timestamp.
    local.put_records_at(TOPIC, 0, vec![change(0, 5_000, "c", Some("a"), Some(100))])?;
    local.put_records_at(TOPIC, 1, vec![change(0, 1_000, "u", Some("b"), Some(200))])?;
    assert_eq!(run().await?, row(1, 0, "b", 200));
    // A delete and its tombstone; then, a commit later, a change of partition 0 that
    // is newer by timestamp but older in the log: the delete stands.
    local.put_records_at(
        TOPIC,
        1,
        vec![
            change(1, 1_000, "d", None, Some(300)),
            change(2, 1_000, "d", None, None),
        ],
    )?;
    assert_eq!(run().await?, BTreeMap::new());
    local.put_records_at(TOPIC, 0, vec![change(1, 9_000, "u", Some("c"), Some(250))])?;
    assert_eq!(run().await?, BTreeMap::new());
    // The key index forgotten (as after another engine's commit): rebuilt from the
    // files, the deleted tombstones give the delete's marker and position back.
    let ident = table_ident(&naming.table_for(TOPIC));
    let table = local.catalog.load_table(&ident).await?;
    let tx = Transaction::new(&table);
    let tx = tx
        .update_table_properties()
        .set(
            kfs_plan::key_index::INDEX_SNAPSHOT_PROPERTY.to_owned(),
            "-1".to_owned(),
        )
        .apply(tx)?;
    tx.commit(&local.catalog).await?;
    local.put_records_at(TOPIC, 0, vec![change(2, 9_999, "u", Some("e"), Some(260))])?;
    assert_eq!(run().await?, BTreeMap::new());
    // A create later in the log, however old its timestamp, applies.
    local.put_records_at(TOPIC, 1, vec![change(3, 1, "c", Some("f"), Some(400))])?;
    assert_eq!(run().await?, row(1, 3, "f", 400));
    // Through a compaction, the row keeps its position.
    local.compact(&naming.table_for(TOPIC)).await?;
    local.put_records_at(TOPIC, 0, vec![change(3, 99_999, "u", Some("g"), Some(350))])?;
    assert_eq!(run().await?, row(1, 3, "f", 400));
    Ok(())
}

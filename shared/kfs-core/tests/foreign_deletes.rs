//! Another engine's equality deletes on a mirror (Flink's and Redpanda Connect's
//! upserts write them into the tables they share): the mirror cannot tell which rows
//! they delete, so its next commit stops with the reason, its files kept pending, and
//! compaction leaves the table alone (a rewrite that ignored them would bring their
//! rows back). Nothing is lost: once the other engine's snapshot is rolled back, the
//! pending commit lands and the mirror reads as the fold of every change.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow_array::{LargeBinaryArray, RecordBatch};
use iceberg::Catalog;
use iceberg::spec::{DataContentType, DataFileBuilder, DataFileFormat, Struct};
use iceberg::table::Table;
use kfs_core::{TableSwap, table_ident};
use kfs_plan::naming::TableNaming;

use crate::local::{BoxError, Local, offsets};
use crate::row_deltas::keyed;

type TestResult = Result<(), BoxError>;

/// Commits, as another engine would, an equality-delete file deleting the rows of
/// key `key` (a delete snapshot on `main`); returns the snapshot it replaced.
async fn commit_equality_deletes(
    local: &Local,
    table: &Table,
    key: &[u8],
) -> Result<i64, BoxError> {
    let metadata = table.metadata();
    let key_id = metadata
        .current_schema()
        .field_by_name("key")
        .ok_or("no key column")?
        .id;
    let field =
        arrow_schema::Field::new("key", arrow_schema::DataType::LargeBinary, true).with_metadata(
            HashMap::from([("PARQUET:field_id".to_owned(), key_id.to_string())]),
        );
    let schema = Arc::new(arrow_schema::Schema::new(vec![field]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(LargeBinaryArray::from(vec![Some(key)]))],
    )?;
    let mut bytes = Vec::new();
    let mut writer = parquet::arrow::ArrowWriter::try_new(&mut bytes, schema, None)?;
    writer.write(&batch)?;
    writer.close()?;
    let (path, size) =
        crate::local::engine::write_file(table, "engine-eq-deletes.parquet", bytes).await?;
    let file = DataFileBuilder::default()
        .content(DataContentType::EqualityDeletes)
        .file_path(path)
        .file_format(DataFileFormat::Parquet)
        .partition(Struct::empty())
        .partition_spec_id(metadata.default_partition_spec_id())
        .record_count(1)
        .file_size_in_bytes(size)
        .equality_ids(Some(vec![key_id]))
        .build()?;
    crate::local::engine::commit_deletes(local, table, vec![file]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_engines_equality_deletes_stop_the_mirror_and_lose_nothing() -> TestResult {
    let local = Local::open().await?;
    let naming = TableNaming {
        mode: kfs_plan::mode::ModeSetting::parse("upsert", None)?,
        ..TableNaming::default()
    };
    let name = naming.table_for("orders");
    let ident = table_ident(&name);
    local.put_records(
        "orders",
        vec![
            keyed(0, "k1", Some("a")),
            keyed(1, "k2", Some("b")),
            keyed(2, "k1", Some("c")),
        ],
    )?;
    local.run(&naming).await?;
    let table = local.catalog.load_table(&ident).await?;
    let ours = commit_equality_deletes(&local, &table, b"k2").await?;

    // Our next commit cannot tell which rows the equality deletes delete: it stops
    // with the reason, and its files stay pending.
    local.put_records(
        "orders",
        vec![keyed(3, "k2", Some("d")), keyed(4, "k3", Some("e"))],
    )?;
    let stopped = local.run(&naming).await?;
    let reason = stopped
        .failed_tables
        .get(&name.to_string())
        .cloned()
        .unwrap_or_default();
    assert!(
        reason.contains("does not read (equality deletes"),
        "{stopped:?}"
    );
    assert!(stopped.left_work(), "{stopped:?}");
    // Compaction leaves the table alone.
    let compaction = local.compact(&name).await?;
    assert!(compaction.skipped_for_deletes, "{compaction:?}");

    // The other engine's snapshot rolled back: the pending commit lands, and the
    // mirror holds each key's last change.
    let table = local.catalog.load_table(&ident).await?;
    local
        .swap
        .commit(
            &table,
            Vec::new(),
            vec![crate::local::engine::main_at(ours)],
        )
        .await?;
    let landed = local.run(&naming).await?;
    assert!(!landed.left_work(), "{landed:?}");
    let expected: BTreeMap<(i32, i64), usize> =
        [2, 3, 4].into_iter().map(|o| ((0, o), 1)).collect();
    assert_eq!(offsets(&local.catalog, &name).await?, expected);
    crate::row_deltas::readers_see(&local, &name.to_string(), [2, 3, 4].into_iter()).await
}

//! Merge-on-read deletes (format v2 position deletes) through a row-delta commit, the
//! ground the upsert and CDC modes build on: rows of a table the pipeline committed
//! are deleted by a position-delete file (`kfs_parquet::write_position_deletes`) in a
//! `delete` snapshot (`kfs_core::stage_row_delta`), then a second delete reaches a
//! row of another file; every reader sees the table without them: iceberg-rust's
//! scan here, pyiceberg and DuckDB through `tests/python/check_deletes.py`. The
//! summary's totals count the delete files; the offset map moves forward unchanged.
//! Compaction leaves a table with delete files alone (a merge that ignored them would
//! bring the deleted rows back). A keyed topic mirrored over commits
//! (`kfs_core::supersede`: inserts, updates, tombstones and re-inserts within one
//! commit and across commits) reads, in every reader, as the reference fold of its
//! changes.

use std::collections::{BTreeMap, BTreeSet};

use iceberg::Catalog;
use iceberg::spec::Struct;
use kfs_core::{RowDelta, TableSwap, live_entries, now_ms, stage_row_delta, table_ident};
use kfs_plan::naming::TableNaming;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::local::{BoxError, Local, offsets};

type TestResult = Result<(), BoxError>;

/// The positions of each offset in each live data file of `table`.
async fn positions(
    table: &iceberg::table::Table,
) -> Result<BTreeMap<i64, (String, i64)>, BoxError> {
    let mut found = BTreeMap::new();
    for entry in live_entries(table).await? {
        let path = entry.file_path().to_owned();
        let bytes = table.file_io().new_input(&path)?.read().await?;
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)?;
        let column = reader
            .schema()
            .index_of("offset")
            .map_err(|e| format!("{path}: {e}"))?;
        let mut position = 0i64;
        for batch in reader.build()? {
            let batch = batch?;
            let offsets = batch
                .column(column)
                .as_any()
                .downcast_ref::<arrow_array::Int64Array>()
                .ok_or("offset is no long column")?;
            for row in 0..batch.num_rows() {
                found.insert(offsets.value(row), (path.clone(), position));
                position += 1;
            }
        }
    }
    Ok(found)
}

/// Deletes the rows holding `doomed` offsets in one row-delta commit.
async fn delete_offsets(local: &Local, doomed: &[i64]) -> Result<(), BoxError> {
    let name = TableNaming::default().table_for("orders");
    let ident = table_ident(&name);
    let table = local.catalog.load_table(&ident).await?;
    let at = positions(&table).await?;
    let mut deletes: kfs_parquet::PositionDeletes = BTreeMap::new();
    for offset in doomed {
        let (path, position) = at.get(offset).ok_or(format!("no row of offset {offset}"))?;
        deletes.entry(path.clone()).or_default().insert(*position);
    }
    commit_deletes(local, &table, &deletes).await
}

/// Commits `deletes` to `table` in one row-delta snapshot.
async fn commit_deletes(
    local: &Local,
    table: &iceberg::table::Table,
    deletes: &kfs_parquet::PositionDeletes,
) -> Result<(), BoxError> {
    let path = format!(
        "{}/data/deletes-{}.parquet",
        table.metadata().location(),
        uuid::Uuid::new_v4()
    );
    let properties = kfs_parquet::writer_properties(table.metadata().properties())?;
    let file = kfs_parquet::write_position_deletes(
        table.file_io(),
        &path,
        properties,
        deletes,
        table.metadata().default_partition_spec_id(),
        Struct::empty(),
    )
    .await?;
    let spec_id = table.metadata().default_partition_spec_id();
    let change = RowDelta {
        deletes: vec![(spec_id, file)],
        ..RowDelta::default()
    };
    let staged = stage_row_delta(table, &change, now_ms()).await?;
    local
        .swap
        .commit(table, staged.requirements, staged.updates)
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn position_deletes_in_a_row_delta_hide_their_rows_from_every_reader() -> TestResult {
    let local = Local::open().await?;
    let values = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"];
    let naming = TableNaming::default();
    // Two commits, two small data files (which compaction would merge).
    local.put("orders", 0, &values, 1)?;
    local.run(&naming).await?;
    local.put("orders", 10, &values, 1)?;
    local.run(&naming).await?;
    let name = naming.table_for("orders");
    let before = local
        .catalog
        .load_table(&table_ident(&name))
        .await?
        .metadata()
        .current_snapshot()
        .map(|s| s.summary().additional_properties.clone())
        .ok_or("no snapshot")?;

    delete_offsets(&local, &[3, 5, 12]).await?;
    delete_offsets(&local, &[0, 19]).await?;

    let gone: BTreeSet<i64> = BTreeSet::from([0, 3, 5, 12, 19]);
    let expected: BTreeMap<(i32, i64), usize> = (0..20)
        .filter(|o| !gone.contains(o))
        .map(|o| ((0, o), 1))
        .collect();
    assert_eq!(offsets(&local.catalog, &name).await?, expected);

    let table = local.catalog.load_table(&table_ident(&name)).await?;
    let snapshot = table.metadata().current_snapshot().ok_or("no snapshot")?;
    let summary = &snapshot.summary().additional_properties;
    assert_eq!(
        snapshot.summary().operation,
        iceberg::spec::Operation::Delete
    );
    assert_eq!(
        summary.get("total-delete-files").map(String::as_str),
        Some("2")
    );
    assert_eq!(
        summary.get("total-position-deletes").map(String::as_str),
        Some("5")
    );
    assert_eq!(summary.get("total-records"), before.get("total-records"));
    assert_eq!(
        summary.get(kfs_plan::offsets::OFFSETS_KEY),
        None,
        "a delete carries no offsets of its own here: the caller's properties do"
    );

    let compacted = kfs_core::compact_table(
        &local.catalog,
        &local.swap,
        &table_ident(&name),
        Some(kfs_plan::compaction::CompactionPolicy::for_target(1 << 20)),
        None,
        now_ms(),
    )
    .await?;
    // The fold: both files rewritten without their deleted rows, into one, and both
    // delete files gone with them.
    assert!(!compacted.skipped_for_deletes, "{compacted:?}");
    assert_eq!(compacted.delete_files_folded, 2, "{compacted:?}");
    assert_eq!(offsets(&local.catalog, &name).await?, expected);
    let table = local.catalog.load_table(&table_ident(&name)).await?;
    let summary = &table
        .metadata()
        .current_snapshot()
        .ok_or("no snapshot")?
        .summary()
        .additional_properties;
    assert_eq!(
        summary.get("total-delete-files").map(String::as_str),
        Some("0")
    );
    assert_eq!(summary.get("total-records").map(String::as_str), Some("15"));
    assert!(kfs_core::live_deletes(&table).await?.files.is_empty());
    metrics_match_rows(&table).await?;

    readers_see(&local, &name.to_string(), expected.keys().map(|(_, o)| *o)).await
}

/// Checks every live data file's record count, and its `offset` column's value count
/// and bounds, against the rows the file holds.
pub async fn metrics_match_rows(table: &iceberg::table::Table) -> TestResult {
    use arrow_array::Array;
    for entry in live_entries(table).await? {
        let file = entry.data_file();
        let bytes = table.file_io().new_input(file.file_path())?.read().await?;
        let mut offsets: Vec<i64> = Vec::new();
        for batch in ParquetRecordBatchReaderBuilder::try_new(bytes)?.build()? {
            let batch = batch?;
            let column = batch.column_by_name("offset").ok_or("no offset")?;
            let column = column
                .as_any()
                .downcast_ref::<arrow_array::Int64Array>()
                .ok_or("offset is no long")?;
            offsets.extend(column.iter().flatten());
        }
        let path = file.file_path();
        assert_eq!(file.record_count(), offsets.len() as u64, "{path}");
        assert_eq!(
            file.value_counts().get(&4),
            Some(&(offsets.len() as u64)),
            "{path}"
        );
        let (low, high) = (offsets.iter().min(), offsets.iter().max());
        let bound = |d: Option<&iceberg::spec::Datum>| match d.map(|d| d.literal()) {
            Some(iceberg::spec::PrimitiveLiteral::Long(v)) => Some(*v),
            _ => None,
        };
        assert_eq!(bound(file.lower_bounds().get(&4)), low.copied(), "{path}");
        assert_eq!(bound(file.upper_bounds().get(&4)), high.copied(), "{path}");
    }
    Ok(())
}

/// Checks that pyiceberg and DuckDB read exactly the rows of `offsets` in `table`.
pub async fn readers_see(
    local: &Local,
    table: &str,
    offsets: impl Iterator<Item = i64>,
) -> TestResult {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/python/check_deletes.py");
    let offsets: Vec<String> = offsets.map(|o| o.to_string()).collect();
    let output = std::process::Command::new("python3")
        .arg(script)
        .arg("--warehouse")
        .arg(local.dir.path().join("wh"))
        .arg("--catalog-db")
        .arg(local.dir.path().join("catalog.db"))
        .arg("--table")
        .arg(table)
        .arg("--offsets")
        .arg(offsets.join(","))
        .output()?;
    // Each reader's result, measured ones too (`--nocapture`).
    println!("{}", String::from_utf8_lossy(&output.stdout));
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

#[tokio::test]
async fn a_row_delta_refuses_what_it_cannot_commit() -> TestResult {
    let local = Local::open().await?;
    local.put("orders", 0, &["a", "b"], 1)?;
    let naming = TableNaming::default();
    local.run(&naming).await?;
    let table = local
        .catalog
        .load_table(&table_ident(&naming.table_for("orders")))
        .await?;
    let empty = stage_row_delta(&table, &RowDelta::default(), now_ms()).await;
    assert_eq!(
        empty.err().map(|e| e.kind()),
        Some(iceberg::ErrorKind::DataInvalid)
    );
    let data_as_delete = RowDelta {
        deletes: live_entries(&table)
            .await?
            .iter()
            .map(|e| (0, e.data_file().clone()))
            .collect(),
        ..RowDelta::default()
    };
    let refused = stage_row_delta(&table, &data_as_delete, now_ms()).await;
    assert_eq!(
        refused.err().map(|e| e.kind()),
        Some(iceberg::ErrorKind::DataInvalid)
    );
    Ok(())
}

/// A record of key `key` (value `None`: a tombstone) at `offset`.
pub fn keyed(offset: i64, key: &str, value: Option<&str>) -> kfs_segment::OwnedRecord {
    kfs_segment::OwnedRecord {
        offset,
        timestamp_ms: 1_700_000_000_000 + offset,
        key: Some(key.as_bytes().to_vec()),
        value: value.map(|v| v.as_bytes().to_vec()),
        headers: vec![],
    }
}

/// Commits `records` (one segment) through a pass of the pipeline on a table in
/// upsert mode: one row-delta snapshot adding the rows and deleting what they
/// supersede.
async fn mirror_round(
    local: &Local,
    naming: &TableNaming,
    records: Vec<kfs_segment::OwnedRecord>,
) -> TestResult {
    local.put_records("orders", records)?;
    let before = snapshots(local, naming).await?;
    local.run(naming).await?;
    assert_eq!(
        snapshots(local, naming).await?,
        before + 1,
        "one snapshot a round"
    );
    Ok(())
}

/// How many snapshots the `orders` table of `naming` has (0 before it exists).
async fn snapshots(local: &Local, naming: &TableNaming) -> Result<usize, BoxError> {
    let ident = table_ident(&naming.table_for("orders"));
    if !local.catalog.table_exists(&ident).await? {
        return Ok(0);
    }
    Ok(local
        .catalog
        .load_table(&ident)
        .await?
        .metadata()
        .snapshots()
        .count())
}

/// `naming` with its tables in upsert mode, keyed by the record key.
fn upsert(naming: TableNaming) -> Result<TableNaming, BoxError> {
    Ok(TableNaming {
        mode: kfs_plan::mode::ModeSetting::parse("upsert", None)?,
        ..naming
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_topic_mirrored_over_commits_reads_as_the_fold_of_its_changes() -> TestResult {
    mirror_rounds(&upsert(TableNaming::default())?).await
}

/// Partitioned by the key, a key's rows share a partition and each partition's rows
/// get their own delete file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_partitioned_by_key_deletes_partition_by_partition() -> TestResult {
    let naming = TableNaming {
        partition_by: kfs_plan::layout::parse_partition_spec("identity(key)")?,
        partition_by_given: true,
        ..TableNaming::default()
    };
    mirror_rounds(&upsert(naming)?).await
}

/// Keys of a mebibyte (two of them differing only in their last byte, one updated
/// across commits and then deleted) are mirrored like any other: the key index holds
/// them whole, and only the key's own older row is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_of_a_mebibyte_are_mirrored_like_any_other() -> TestResult {
    let local = Local::open().await?;
    let naming = upsert(TableNaming::default())?;
    let big = |last: char| format!("{}{last}", "k".repeat((1 << 20) - 1));
    let (a, b) = (big('a'), big('b'));
    mirror_round(
        &local,
        &naming,
        vec![keyed(0, &a, Some("a1")), keyed(1, &b, Some("b1"))],
    )
    .await?;
    mirror_round(
        &local,
        &naming,
        vec![keyed(2, &a, Some("a2")), keyed(3, "small", Some("s"))],
    )
    .await?;
    let name = naming.table_for("orders");
    let expected: BTreeMap<(i32, i64), usize> = [1, 2, 3].iter().map(|o| ((0, *o), 1)).collect();
    assert_eq!(offsets(&local.catalog, &name).await?, expected);
    mirror_round(&local, &naming, vec![keyed(4, &b, None)]).await?;
    let expected: BTreeMap<(i32, i64), usize> = [2, 3].iter().map(|o| ((0, *o), 1)).collect();
    assert_eq!(offsets(&local.catalog, &name).await?, expected);
    let table = local.catalog.load_table(&table_ident(&name)).await?;
    let indexed = kfs_core::supersede(&table, &[]).await?;
    assert!(indexed.indexed, "no key index after the commits");
    assert_eq!((indexed.index.keys(), indexed.index.rows()), (2, 2));
    assert_eq!(indexed.index.rows_of(a.as_bytes()).len(), 1);
    readers_see(&local, &name.to_string(), [2, 3].into_iter()).await
}

/// A key index that is damaged (its file cut short, then gone) costs the next commit
/// a read of the table, never the commit: the mirror stays the fold of its changes
/// and the commit writes a sound index again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_key_index_costs_a_read_of_the_table_not_the_commit() -> TestResult {
    let local = Local::open().await?;
    let naming = upsert(TableNaming::default())?;
    let name = naming.table_for("orders");
    let rounds = [
        vec![keyed(0, "k1", Some("a")), keyed(1, "k2", Some("b"))],
        vec![keyed(2, "k1", Some("c"))],
        vec![keyed(3, "k2", None), keyed(4, "k3", Some("d"))],
    ];
    for (round, records) in rounds.into_iter().enumerate() {
        mirror_round(&local, &naming, records).await?;
        let table = local.catalog.load_table(&table_ident(&name)).await?;
        assert!(
            kfs_core::supersede(&table, &[]).await?.indexed,
            "round {round}"
        );
        let path = table
            .metadata()
            .properties()
            .get(kfs_plan::key_index::INDEX_PATH_PROPERTY)
            .ok_or("no key index named")?
            .clone();
        match round {
            // Cut short: its footer does not read.
            0 => {
                let bytes = table.file_io().new_input(&path)?.read().await?;
                let cut = bytes.slice(..bytes.len() / 2);
                table.file_io().new_output(&path)?.write(cut).await?;
            }
            _ => table.file_io().delete(&path).await?,
        }
        assert!(
            !kfs_core::supersede(&table, &[]).await?.indexed,
            "round {round}"
        );
    }
    let expected: BTreeMap<(i32, i64), usize> = [2, 4].iter().map(|o| ((0, *o), 1)).collect();
    assert_eq!(offsets(&local.catalog, &name).await?, expected);
    readers_see(&local, &name.to_string(), [2, 4].into_iter()).await
}

/// The mirror's three rounds under `naming`, each checked against the reference fold.
async fn mirror_rounds(naming: &TableNaming) -> TestResult {
    let local = Local::open().await?;
    let rounds = vec![
        vec![
            keyed(0, "k1", Some("v1")),
            keyed(1, "k2", Some("v2")),
            keyed(2, "k3", Some("v3")),
            keyed(3, "k1", Some("v1b")),
            keyed(4, "k2", None),
            keyed(5, "k4", Some("v4")),
            keyed(6, "k5", Some("v5")),
        ],
        vec![
            keyed(7, "k3", Some("v3b")),
            keyed(8, "k2", Some("v2 again")),
            keyed(9, "k4", None),
            keyed(10, "k6", Some("v6")),
            keyed(11, "k6", Some("v6b")),
        ],
        vec![keyed(12, "k1", None), keyed(13, "k4", Some("v4 again"))],
    ];
    let mut reference: BTreeMap<String, (i64, Option<String>)> = BTreeMap::new();
    for round in rounds {
        for r in &round {
            let key = String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).into_owned();
            let value = r
                .value
                .as_ref()
                .map(|v| String::from_utf8_lossy(v).into_owned());
            reference.insert(key, (r.offset, value));
        }
        mirror_round(&local, naming, round).await?;
        let expected: BTreeMap<(i32, i64), usize> = reference
            .values()
            .filter(|(_, value)| value.is_some())
            .map(|(offset, _)| ((0, *offset), 1))
            .collect();
        let name = naming.table_for("orders");
        assert_eq!(offsets(&local.catalog, &name).await?, expected);
        readers_see(&local, &name.to_string(), expected.keys().map(|(_, o)| *o)).await?;
    }
    // Nothing new: nothing more to delete, found through the last commit's key index
    // as by reading every file.
    let (table, _) = orders_and_its_files(&local, naming).await?;
    let indexed = kfs_core::supersede(&table, &[]).await?;
    assert!(indexed.indexed && indexed.deletes.is_empty());
    let read = kfs_core::testing::supersede_with(&table, &[], false).await?;
    assert_eq!(
        (read.index.keys(), read.index.rows()),
        (indexed.index.keys(), indexed.index.rows())
    );
    assert_eq!(read.index.encode(), indexed.index.encode());
    // Compacted: the deleted rows are left out of the rewritten files, the delete
    // files go, and the readers see the same rows.
    let name = naming.table_for("orders");
    let compacted = local.compact(&name).await?;
    assert!(compacted.delete_files_folded > 0, "{compacted:?}");
    let table = local.catalog.load_table(&table_ident(&name)).await?;
    assert!(kfs_core::live_deletes(&table).await?.files.is_empty());
    metrics_match_rows(&table).await?;
    // The compaction carried the key index to its snapshot: the rows of the files it
    // rewrote are the rewritten files' now.
    let carried = kfs_core::supersede(&table, &[]).await?;
    let read = kfs_core::testing::supersede_with(&table, &[], false).await?;
    assert!(carried.indexed, "the compaction left no key index");
    assert_eq!(carried.index.encode(), read.index.encode());
    let expected: BTreeMap<(i32, i64), usize> = reference
        .values()
        .filter(|(_, value)| value.is_some())
        .map(|(offset, _)| ((0, *offset), 1))
        .collect();
    assert_eq!(offsets(&local.catalog, &name).await?, expected);
    readers_see(&local, &name.to_string(), expected.keys().map(|(_, o)| *o)).await
}

/// The `orders` table of `naming` and its live data files.
async fn orders_and_its_files(
    local: &Local,
    naming: &TableNaming,
) -> Result<(iceberg::table::Table, Vec<iceberg::spec::DataFile>), BoxError> {
    let table = local
        .catalog
        .load_table(&table_ident(&naming.table_for("orders")))
        .await?;
    let files = live_entries(&table)
        .await?
        .iter()
        .map(|e| e.data_file().clone())
        .collect();
    Ok((table, files))
}

/// A table without the raw layout's `value` column (a JSON table) cannot be mirrored
/// by its rows' nullness: refused with the reason, nothing deleted.
#[tokio::test]
async fn a_table_without_the_raw_layout_is_refused_by_the_mirror() -> TestResult {
    let local = Local::open().await?;
    let naming = TableNaming {
        value_format: kfs_plan::naming::ValueFormat::Json,
        ..TableNaming::default()
    };
    local.put_records(
        "orders",
        vec![
            keyed(0, "k1", Some(r#"{"n": 1}"#)),
            keyed(1, "k1", Some(r#"{"n": 2}"#)),
        ],
    )?;
    local.run(&naming).await?;
    let (table, all) = orders_and_its_files(&local, &naming).await?;
    let refused = kfs_core::supersede(&table, &all).await;
    let error = refused.err().ok_or("a JSON table was mirrored")?;
    assert_eq!(error.kind(), iceberg::ErrorKind::DataInvalid);
    assert!(error.to_string().contains("raw layout"), "{error}");
    Ok(())
}

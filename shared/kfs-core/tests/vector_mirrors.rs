//! A mirror on a format v3 table (`format-version = 3` among the new tables'
//! properties, or a v2 mirror another engine upgraded): its commits delete superseded
//! rows with deletion vectors, one per data file, a file's new vector merging its old
//! one (and the position deletes of before the upgrade) and replacing it in the same
//! row delta. pyiceberg and DuckDB read exactly the fold of the changes after every
//! commit; row lineage moves on with the rows added; compaction folds the vectors,
//! each row keeping its `_row_id`.

use std::collections::{BTreeMap, BTreeSet};

use iceberg::Catalog;
use iceberg::spec::{DataContentType, DataFileFormat, FormatVersion};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use kfs_core::table_ident;
use kfs_plan::naming::TableNaming;
use kfs_segment::OwnedRecord;

use crate::local::{BoxError, Local, offsets};
use crate::row_deltas::{keyed, readers_see};

type TestResult = Result<(), BoxError>;

/// The rounds of changes: the first round's file loses rows in every later one (its
/// vector replaced each time), keys deleted, inserted again, and updated twice in one
/// commit.
pub(crate) fn rounds() -> Vec<Vec<OwnedRecord>> {
    vec![
        (0..6)
            .map(|o| keyed(o, &format!("k{o}"), Some("first")))
            .collect(),
        vec![
            keyed(6, "k0", Some("k0 again")),
            keyed(7, "k1", None),
            keyed(8, "k7", Some("new")),
        ],
        vec![
            keyed(9, "k2", Some("k2 again")),
            keyed(10, "k7", Some("k7 again")),
            keyed(11, "k1", Some("back")),
        ],
        vec![
            keyed(12, "k0", None),
            keyed(13, "k3", Some("k3 again")),
            keyed(14, "k4", Some("once")),
            keyed(15, "k4", Some("twice")),
        ],
    ]
}

/// The upsert naming, its new tables in `format` (`None`: the default).
pub(crate) fn naming(format: Option<&str>) -> Result<TableNaming, BoxError> {
    let mut naming = TableNaming {
        mode: kfs_plan::mode::ModeSetting::parse("upsert", None)?,
        ..TableNaming::default()
    };
    if let Some(format) = format {
        naming
            .properties
            .insert("format-version".to_owned(), format.to_owned());
    }
    Ok(naming)
}

/// The fold of `records`: each live key's last offset, on partition 0.
pub(crate) fn fold(
    reference: &mut Reference,
    records: &[OwnedRecord],
) -> BTreeMap<(i32, i64), usize> {
    for r in records {
        let key = String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).into_owned();
        reference.insert(key, (r.offset, r.value.is_some()));
    }
    reference
        .values()
        .filter(|(_, live)| *live)
        .map(|(offset, _)| ((0, *offset), 1))
        .collect()
}

/// The fold of the changes so far, by key: its last offset and whether it is live.
pub(crate) type Reference = BTreeMap<String, (i64, bool)>;

/// A v2 mirror given the first two rounds: its naming, the fold so far, and the
/// rounds left.
pub(crate) async fn two_v2_rounds(
    local: &Local,
) -> Result<(TableNaming, Reference, std::vec::IntoIter<Vec<OwnedRecord>>), BoxError> {
    let naming = naming(None)?;
    let mut reference = BTreeMap::new();
    let mut rounds = rounds().into_iter();
    for round in rounds.by_ref().take(2) {
        fold(&mut reference, &round);
        local.put_records("orders", round)?;
        local.run(&naming).await?;
    }
    Ok((naming, reference, rounds))
}

/// Upgrades the `orders` table to format v3, as another engine would.
pub(crate) async fn upgrade_to_v3(local: &Local, naming: &TableNaming) -> Result<Table, BoxError> {
    let table = orders(local, naming).await?;
    let tx = Transaction::new(&table);
    let tx = tx
        .upgrade_table_version()
        .set_format_version(FormatVersion::V3)
        .apply(tx)?;
    Ok(tx.commit(&local.catalog).await?)
}

/// Checks that `table`'s deletes are deletion vectors only (`legacy` position-delete
/// files of before an upgrade aside), at most one live per data file, each entry's
/// record count the rows its vector deletes, and the snapshot's delete totals those of
/// its live delete files.
async fn one_vector_per_file(table: &Table, legacy: usize) -> TestResult {
    let snapshot = table.metadata().current_snapshot().ok_or("no snapshot")?;
    let list = table.manifest_list_reader(snapshot).load().await?;
    let read = kfs_core::live_deletes(table).await?;
    let (mut vectors, mut parquet) = (BTreeMap::<String, usize>::new(), BTreeSet::new());
    let (mut files, mut deleted) = (0u64, 0u64);
    for manifest in list.entries() {
        let loaded = manifest.load_manifest(table.file_io()).await?;
        // A manifest whose vectors were all replaced records that in its snapshot,
        // and is left out of the next, not carried on.
        let live = loaded.entries().iter().filter(|e| e.is_alive()).count();
        let ours = manifest.added_snapshot_id == snapshot.snapshot_id();
        assert!(
            live > 0 || ours,
            "{} lists nothing live",
            manifest.manifest_path
        );
        for entry in loaded.entries().iter().filter(|e| e.is_alive()) {
            let file = entry.data_file();
            if entry.content_type() == DataContentType::Data {
                continue;
            }
            (files, deleted) = (files + 1, deleted + file.record_count());
            match (file.file_format(), file.referenced_data_file()) {
                (DataFileFormat::Puffin, Some(data)) => {
                    let rows = read.positions.get(&data).map_or(0, BTreeSet::len);
                    assert_eq!(file.record_count(), rows as u64, "{data}");
                    *vectors.entry(data).or_default() += 1;
                }
                _ => {
                    parquet.insert(file.file_path().to_owned());
                }
            }
        }
    }
    assert!(vectors.values().all(|n| *n == 1), "{vectors:?}");
    assert_eq!(parquet.len(), legacy, "{parquet:?}");
    let total = |key: &str| {
        snapshot
            .summary()
            .additional_properties
            .get(key)
            .and_then(|v| v.parse::<u64>().ok())
    };
    // (A total another engine's snapshot left out is left out after it.)
    assert!(total("total-delete-files").is_none_or(|t| t == files));
    assert!(total("total-position-deletes").is_none_or(|t| t == deleted));
    Ok(())
}

/// The `orders` table of `naming`.
pub(crate) async fn orders(local: &Local, naming: &TableNaming) -> Result<Table, BoxError> {
    let ident = table_ident(&naming.table_for("orders"));
    Ok(local.catalog.load_table(&ident).await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v3_mirror_deletes_with_one_deletion_vector_per_data_file() -> TestResult {
    let local = Local::open().await?;
    let naming = naming(Some("3"))?;
    let name = naming.table_for("orders");
    let mut reference = BTreeMap::new();
    let mut rows_added = 0u64;
    let mut rounds = rounds().into_iter();
    for round in rounds.by_ref().take(3) {
        let expected = fold(&mut reference, &round);
        rows_added += round.len() as u64;
        local.put_records("orders", round)?;
        local.run(&naming).await?;
        let table = orders(&local, &naming).await?;
        assert_eq!(table.metadata().format_version(), FormatVersion::V3);
        // Every row added has its id: the table's next row id follows them.
        assert_eq!(table.metadata().next_row_id(), rows_added);
        one_vector_per_file(&table, 0).await?;
        assert_eq!(offsets(&local.catalog, &name).await?, expected);
        readers_see(&local, &name.to_string(), expected.keys().map(|(_, o)| *o)).await?;
    }
    // The first file's vector was replaced in every round: it deletes k0, k1 and k2's
    // first rows. Our snapshots carry their totals.
    let table = orders(&local, &naming).await?;
    let summary = &table
        .metadata()
        .current_snapshot()
        .ok_or("no snapshot")?
        .summary();
    assert!(
        summary
            .additional_properties
            .contains_key("total-position-deletes")
    );
    let deletes = kfs_core::live_deletes(&table).await?;
    assert!(
        deletes
            .positions
            .values()
            .any(|rows| rows == &BTreeSet::from([0, 1, 2])),
        "{:?}",
        deletes.positions
    );
    // The key index the last commit left is what a read of the files finds.
    let indexed = kfs_core::supersede(&table, &[]).await?;
    let read = kfs_core::testing::supersede_with(&table, &[], false).await?;
    assert!(indexed.indexed && indexed.deletes.is_empty());
    assert_eq!(indexed.index.encode(), read.index.encode());
    // Compaction folds the vectors: the files rewritten without their deleted rows,
    // every live row keeping its `_row_id` (written out), the vectors removed.
    let before = crate::local::read::row_ids(&table).await?;
    let compacted = local.compact(&name).await?;
    assert!(compacted.delete_files_folded > 0, "{compacted:?}");
    let table = orders(&local, &naming).await?;
    assert!(kfs_core::live_deletes(&table).await?.files.is_empty());
    assert_eq!(crate::local::read::row_ids(&table).await?, before);
    crate::row_deltas::metrics_match_rows(&table).await?;
    let expected = fold(&mut reference, &[]);
    assert_eq!(offsets(&local.catalog, &name).await?, expected);
    readers_see(&local, &name.to_string(), expected.keys().map(|(_, o)| *o)).await?;
    // A commit after the compaction deletes rows of the compacted file by a vector.
    for round in rounds {
        let expected = fold(&mut reference, &round);
        local.put_records("orders", round)?;
        local.run(&naming).await?;
        let table = orders(&local, &naming).await?;
        one_vector_per_file(&table, 0).await?;
        assert_eq!(offsets(&local.catalog, &name).await?, expected);
        readers_see(&local, &name.to_string(), expected.keys().map(|(_, o)| *o)).await?;
    }
    // Every step of maintenance: compaction and manifest rewrites keep the lineage,
    // expiry and orphan cleanup every live file.
    let table = orders(&local, &naming).await?;
    let before = crate::local::read::row_ids(&table).await?;
    let ident = table_ident(&name);
    let policy = crate::neighbours::thorough_policy();
    let report = crate::neighbours::maintain_everything(&local, &ident, &policy).await?;
    assert!(report.steps_off.is_empty(), "{report:?}");
    assert!(
        report.files_compacted > 0 && report.snapshots_expired > 0,
        "{report:?}"
    );
    let table = orders(&local, &naming).await?;
    assert_eq!(crate::local::read::row_ids(&table).await?, before);
    let carried = kfs_core::supersede(&table, &[]).await?;
    let read = kfs_core::testing::supersede_with(&table, &[], false).await?;
    assert_eq!(carried.index.encode(), read.index.encode());
    let expected = fold(&mut reference, &[]);
    assert_eq!(offsets(&local.catalog, &name).await?, expected);
    readers_see(&local, &name.to_string(), expected.keys().map(|(_, o)| *o)).await
}

/// A v2 mirror (position-delete files) another engine upgraded to v3: the next
/// commit's vector for a file with position deletes merges them (a reader applies
/// the vector alone), and no position-delete file is added after the upgrade.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_upgraded_to_v3_merges_its_position_deletes_into_vectors() -> TestResult {
    let local = Local::open().await?;
    let (naming, mut reference, rounds) = two_v2_rounds(&local).await?;
    let name = naming.table_for("orders");
    let table = orders(&local, &naming).await?;
    assert_eq!(table.metadata().format_version(), FormatVersion::V2);
    let legacy = kfs_core::live_deletes(&table).await?.files.len();
    assert!(legacy > 0);
    upgrade_to_v3(&local, &naming).await?;
    for round in rounds {
        let expected = fold(&mut reference, &round);
        local.put_records("orders", round)?;
        local.run(&naming).await?;
        let table = orders(&local, &naming).await?;
        one_vector_per_file(&table, legacy).await?;
        assert_eq!(offsets(&local.catalog, &name).await?, expected);
        readers_see(&local, &name.to_string(), expected.keys().map(|(_, o)| *o)).await?;
    }
    Ok(())
}

/// A deletion vector another engine recorded outside its Puffin file is refused
/// with the file and the bytes, never read past its end.
#[tokio::test]
async fn a_vector_outside_its_file_is_refused_with_the_file_and_bytes() -> TestResult {
    let local = Local::open().await?;
    let naming = naming(Some("3"))?;
    local.put_records("orders", rounds().remove(0))?;
    local.run(&naming).await?;
    let table = orders(&local, &naming).await?;
    let data = kfs_core::live_entries(&table).await?;
    let data = data.first().ok_or("no data file")?.file_path().to_owned();
    let vectors = BTreeMap::from([(data, BTreeSet::from([1]))]);
    let (bytes, blobs) = kfs_parquet::puffin_of_vectors(&vectors)?;
    let (path, size) = crate::local::engine::write_file(&table, "outside.puffin", bytes).await?;
    let blob = kfs_parquet::VectorBlob {
        offset: size,
        ..blobs.first().ok_or("no blob")?.clone()
    };
    let spec_id = table.metadata().default_partition_spec_id();
    let file = kfs_parquet::vector_delete_file(
        &path,
        size,
        &blob,
        spec_id,
        iceberg::spec::Struct::empty(),
    )?;
    crate::local::engine::commit_deletes(&local, &table, vec![file]).await?;
    let table = orders(&local, &naming).await?;
    let refused = kfs_core::live_deletes(&table).await;
    let text = refused.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        text.contains("outside.puffin") && text.contains("outside the file"),
        "{text}"
    );
    Ok(())
}

/// Two live vectors of one data file (another engine's: the format allows one) delete
/// what either does, and the mirror's next vector for that file replaces both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_vectors_of_one_file_are_merged_and_replaced_by_the_next() -> TestResult {
    let local = Local::open().await?;
    let naming = naming(Some("3"))?;
    let name = naming.table_for("orders");
    let mut reference = BTreeMap::new();
    let first = rounds().remove(0);
    fold(&mut reference, &first);
    local.put_records("orders", first)?;
    local.run(&naming).await?;
    let table = orders(&local, &naming).await?;
    let data = kfs_core::live_entries(&table).await?;
    let data = data.first().ok_or("no data file")?.file_path().to_owned();
    let spec_id = table.metadata().default_partition_spec_id();
    let mut files = Vec::new();
    for (at, position) in [(0, 1), (1, 3)] {
        let vectors = BTreeMap::from([(data.clone(), BTreeSet::from([position]))]);
        let (bytes, blobs) = kfs_parquet::puffin_of_vectors(&vectors)?;
        let name = format!("twice-{at}.puffin");
        let (path, size) = crate::local::engine::write_file(&table, &name, bytes).await?;
        let blob = blobs.first().ok_or("no blob")?;
        let empty = iceberg::spec::Struct::empty();
        files.push(kfs_parquet::vector_delete_file(
            &path, size, blob, spec_id, empty,
        )?);
    }
    crate::local::engine::commit_deletes(&local, &table, files).await?;
    let table = orders(&local, &naming).await?;
    let both = kfs_core::live_deletes(&table).await?;
    assert_eq!(both.positions.get(&data), Some(&BTreeSet::from([1, 3])));
    // The engine deleted k1 and k3; the mirror updates k0.
    reference.remove("k1");
    reference.remove("k3");
    let update = vec![keyed(6, "k0", Some("k0 again"))];
    let expected = fold(&mut reference, &update);
    local.put_records("orders", update)?;
    local.run(&naming).await?;
    let table = orders(&local, &naming).await?;
    one_vector_per_file(&table, 0).await?;
    let merged = kfs_core::live_deletes(&table).await?;
    assert_eq!(
        merged.positions.get(&data),
        Some(&BTreeSet::from([0, 1, 3]))
    );
    assert_eq!(offsets(&local.catalog, &name).await?, expected);
    readers_see(&local, &name.to_string(), expected.keys().map(|(_, o)| *o)).await
}

/// A mirror whose partition spec evolved (unpartitioned, then `bucket(4, key)`): a key
/// whose row lies in a file of the older spec is deleted by a delete file of that
/// spec, in a delete manifest of that spec; v2 (position deletes) and v3 (vectors).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_deletes_rows_of_an_older_partition_spec() -> TestResult {
    for format in [None, Some("3")] {
        let local = Local::open().await?;
        let first = naming(format)?;
        let name = first.table_for("orders");
        let mut reference = BTreeMap::new();
        let mut rounds = rounds().into_iter();
        for round in rounds.by_ref().take(1) {
            fold(&mut reference, &round);
            local.put_records("orders", round)?;
            local.run(&first).await?;
        }
        let evolved = TableNaming {
            partition_by: kfs_plan::layout::parse_partition_spec("bucket(4, key)")?,
            partition_by_given: true,
            ..first.clone()
        };
        for round in rounds {
            let expected = fold(&mut reference, &round);
            local.put_records("orders", round)?;
            let report = local.run(&evolved).await?;
            assert!(!report.left_work(), "{report:?}");
            assert_eq!(offsets(&local.catalog, &name).await?, expected);
            readers_see(&local, &name.to_string(), expected.keys().map(|(_, o)| *o)).await?;
        }
        let table = orders(&local, &first).await?;
        assert_eq!(table.metadata().partition_specs_iter().count(), 2);
        // Compacted: the readers see the same rows.
        local.compact(&name).await?;
        let expected = fold(&mut reference, &[]);
        assert_eq!(offsets(&local.catalog, &name).await?, expected);
        readers_see(&local, &name.to_string(), expected.keys().map(|(_, o)| *o)).await?;
    }
    Ok(())
}

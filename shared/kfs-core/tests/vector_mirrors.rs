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
fn rounds() -> Vec<Vec<OwnedRecord>> {
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
fn naming(format: Option<&str>) -> Result<TableNaming, BoxError> {
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
fn fold(reference: &mut Reference, records: &[OwnedRecord]) -> BTreeMap<(i32, i64), usize> {
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
type Reference = BTreeMap<String, (i64, bool)>;

/// A v2 mirror given the first two rounds: its naming, the fold so far, and the
/// rounds left.
async fn two_v2_rounds(
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
async fn upgrade_to_v3(local: &Local, naming: &TableNaming) -> Result<Table, BoxError> {
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
async fn orders(local: &Local, naming: &TableNaming) -> Result<Table, BoxError> {
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

/// Every live row of `table` and its row id, if it has one.
async fn live_row_ids(table: &Table) -> Result<BTreeMap<(i32, i64), Option<i64>>, BoxError> {
    Ok(crate::local::read::live_rows(table)
        .await?
        .into_iter()
        .collect())
}

/// A mirror compacted right after another engine upgraded it to v3, before any
/// commit since: its rows have no lineage yet (the manifests are from before), so the
/// compacted file is written with null ids and its rows inherit fresh ones, unique;
/// from then on every row keeps its id through commits and compactions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_compacted_right_after_its_upgrade_gives_its_rows_ids() -> TestResult {
    let local = Local::open().await?;
    let (naming, mut reference, mut rounds) = two_v2_rounds(&local).await?;
    let name = naming.table_for("orders");
    let table = upgrade_to_v3(&local, &naming).await?;
    let before = live_row_ids(&table).await?;
    assert!(before.values().all(Option::is_none), "{before:?}");
    let compacted = local.compact(&name).await?;
    assert!(compacted.delete_files_folded > 0, "{compacted:?}");
    let table = orders(&local, &naming).await?;
    assert!(kfs_core::live_deletes(&table).await?.files.is_empty());
    crate::row_deltas::metrics_match_rows(&table).await?;
    let ids = crate::local::read::row_ids(&table).await?;
    assert_eq!(
        ids.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>()
    );
    let unique: BTreeSet<i64> = ids.values().copied().collect();
    assert_eq!(unique.len(), ids.len(), "{ids:?}");
    assert!(
        unique
            .iter()
            .all(|id| (*id as u64) < table.metadata().next_row_id())
    );
    let expected = fold(&mut reference, &[]);
    assert_eq!(offsets(&local.catalog, &name).await?, expected);
    readers_see(&local, &name.to_string(), expected.keys().map(|(_, o)| *o)).await?;
    // From then on the rows keep their ids: a commit deleting some, then compaction.
    let round = rounds.next().ok_or("a third round")?;
    let expected = fold(&mut reference, &round);
    local.put_records("orders", round)?;
    local.run(&naming).await?;
    let table = orders(&local, &naming).await?;
    let before = crate::local::read::row_ids(&table).await?;
    local.compact(&name).await?;
    let table = orders(&local, &naming).await?;
    assert_eq!(crate::local::read::row_ids(&table).await?, before);
    for (row, id) in &ids {
        if let Some(kept) = before.get(row) {
            assert_eq!(kept, id, "{row:?}");
        }
    }
    assert_eq!(offsets(&local.catalog, &name).await?, expected);
    readers_see(&local, &name.to_string(), expected.keys().map(|(_, o)| *o)).await
}

/// `table` as of its snapshot `snapshot_id` (its main branch set there).
fn table_at(table: &Table, snapshot_id: i64) -> Result<Table, BoxError> {
    use iceberg::spec::{MAIN_BRANCH, SnapshotReference, SnapshotRetention, TableMetadataBuilder};
    let reference =
        SnapshotReference::new(snapshot_id, SnapshotRetention::branch(None, None, None));
    let metadata = TableMetadataBuilder::new_from_metadata(table.metadata().clone(), None)
        .set_ref(MAIN_BRANCH, reference)?
        .build()?
        .metadata;
    Ok(Table::builder()
        .metadata(metadata)
        .identifier(table.identifier().clone())
        .file_io(table.file_io().clone())
        .runtime(iceberg::Runtime::try_current()?)
        .build()?)
}

/// The upsert naming (`format`), its tables partitioned by Kafka partition, and
/// `rounds` of changes put on partition 0 and, of other keys, on partition 1: each
/// commit's Puffin file holds vectors of files of both partitions.
async fn two_partitions(
    local: &Local,
    format: Option<&str>,
    rounds: usize,
) -> Result<TableNaming, BoxError> {
    let mut naming = naming(format)?;
    naming.partition_by = kfs_plan::layout::parse_partition_spec("identity(partition)")?;
    for round in self::rounds().into_iter().take(rounds) {
        let other: Vec<OwnedRecord> = round
            .iter()
            .map(|r| OwnedRecord {
                key: r.key.as_ref().map(|k| [b"p1-", &k[..]].concat()),
                ..r.clone()
            })
            .collect();
        local.put_records_at("orders", 0, round)?;
        local.put_records_at("orders", 1, other)?;
        local.run(&naming).await?;
    }
    Ok(naming)
}

/// A compaction of a v3 mirror whose Puffin files hold vectors of files of two
/// partitions (two groups): the second group removes each Puffin file whose files the
/// first rewrote, so no vector is left behind naming a file that is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_of_two_groups_leaves_no_vector_of_a_file_gone() -> TestResult {
    let local = Local::open().await?;
    let naming = two_partitions(&local, Some("3"), 3).await?;
    let name = naming.table_for("orders");
    let table = orders(&local, &naming).await?;
    let before = crate::local::read::row_ids(&table).await?;
    let report = local.compact(&name).await?;
    assert!(report.snapshots.len() >= 2, "{report:?}");
    assert_eq!(report.stale_groups, 0, "{report:?}");
    let table = orders(&local, &naming).await?;
    // After each group, every live vector is of a live file: a vector of a file the
    // group rewrote goes with it, even while its Puffin file stays for another's.
    for snapshot_id in &report.snapshots {
        let then = table_at(&table, *snapshot_id)?;
        let live: BTreeSet<String> = kfs_core::live_entries(&then)
            .await?
            .iter()
            .map(|e| e.file_path().to_owned())
            .collect();
        for (puffin, named) in kfs_core::live_deletes(&then).await?.files {
            let gone: Vec<&String> = named.iter().filter(|d| !live.contains(*d)).collect();
            assert!(gone.is_empty(), "{puffin} keeps vectors of {gone:?}");
        }
    }
    let left = kfs_core::live_deletes(&table).await?.files;
    assert!(left.is_empty(), "delete files left: {left:?}");
    assert_eq!(crate::local::read::row_ids(&table).await?, before);
    crate::row_deltas::metrics_match_rows(&table).await?;
    Ok(())
}

/// A compaction of several groups right after an upgrade to v3: the first group's
/// snapshot gives every row an id (its v3 manifest list assigns the first row ids of
/// the manifests from before), and the later groups' rewrites keep those ids instead
/// of rewriting with the lineage of before that snapshot (none), which would give
/// their rows other ids from one snapshot to the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_group_of_a_compaction_after_an_upgrade_keeps_the_ids_the_first_gave() -> TestResult {
    let local = Local::open().await?;
    // One group a Kafka partition.
    let naming = two_partitions(&local, None, 2).await?;
    let name = naming.table_for("orders");
    upgrade_to_v3(&local, &naming).await?;
    let report = local.compact(&name).await?;
    assert!(report.snapshots.len() >= 2, "{report:?}");
    let table = orders(&local, &naming).await?;
    let last = crate::local::read::row_ids(&table).await?;
    for snapshot_id in &report.snapshots {
        let then = crate::local::read::row_ids(&table_at(&table, *snapshot_id)?).await?;
        assert_eq!(
            then, last,
            "the rows' ids in snapshot {snapshot_id} and the last"
        );
    }
    let unique: BTreeSet<i64> = last.values().copied().collect();
    assert_eq!(unique.len(), last.len(), "{last:?}");
    Ok(())
}

/// The pointer swap of a compaction with another writer's commit landing just before
/// its first replace: a pass of the pipeline appending `records`.
struct AppendFirst<'a> {
    local: &'a Local,
    naming: &'a TableNaming,
    records: std::sync::Mutex<Option<Vec<OwnedRecord>>>,
}

#[async_trait::async_trait]
impl kfs_core::TableSwap for AppendFirst<'_> {
    async fn commit(
        &self,
        table: &Table,
        requirements: Vec<iceberg::TableRequirement>,
        updates: Vec<iceberg::TableUpdate>,
    ) -> iceberg::Result<Table> {
        let records = self.records.lock().ok().and_then(|mut slot| slot.take());
        if let Some(records) = records {
            let failed =
                |e: BoxError| iceberg::Error::new(iceberg::ErrorKind::Unexpected, e.to_string());
            self.local.put_records("orders", records).map_err(failed)?;
            // Run to its end here (the pass's future is not `Send` for every
            // lifetime the trait's future asks of it).
            let run = self.local.run(self.naming);
            tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(run))
                .map_err(failed)?;
        }
        self.local.swap.commit(table, requirements, updates).await
    }
}

/// A compaction right after an upgrade to v3 whose replace meets a commit that landed
/// meanwhile (an append, whose v3 manifest list gave the rows of before their ids):
/// the rewrite, made without ids, is given up rather than committed with other ones,
/// and the next round compacts with the ids the append gave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_rewritten_without_ids_a_commit_since_gave_is_given_up() -> TestResult {
    let local = Local::open().await?;
    let (naming, _, _) = two_v2_rounds(&local).await?;
    let name = naming.table_for("orders");
    upgrade_to_v3(&local, &naming).await?;
    // A new key: the append deletes nothing (a delete file landing would make the
    // replace conflict on its own).
    let swap = AppendFirst {
        local: &local,
        naming: &naming,
        records: std::sync::Mutex::new(Some(vec![keyed(100, "fresh", Some("new"))])),
    };
    let report = kfs_core::compact_table(
        &local.catalog,
        &swap,
        &table_ident(&name),
        None,
        None,
        kfs_core::now_ms(),
    )
    .await?;
    assert!(report.stale_groups >= 1, "{report:?}");
    assert!(!report.snapshots.is_empty(), "{report:?}");
    // Every row keeps the id the append's snapshot gave it.
    let table = orders(&local, &naming).await?;
    let last = crate::local::read::row_ids(&table).await?;
    for snapshot_id in &report.snapshots {
        let then = crate::local::read::row_ids(&table_at(&table, *snapshot_id)?).await?;
        assert_eq!(
            then, last,
            "the rows' ids in snapshot {snapshot_id} and the last"
        );
    }
    let appended = table
        .metadata()
        .snapshots()
        .filter(|s| !report.snapshots.contains(&s.snapshot_id()))
        .max_by_key(|s| s.sequence_number())
        .ok_or("the append")?;
    let before = crate::local::read::row_ids(&table_at(&table, appended.snapshot_id())?).await?;
    assert_eq!(before, last);
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

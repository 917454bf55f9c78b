//! Row lineage of v3 mirrors through compaction: a mirror compacted right after an
//! upgrade gives its rows ids; the groups of one compaction keep the ids an earlier
//! group's snapshot gave (and give a rewrite up when a commit since gave them); a
//! Puffin file holding vectors of files of two groups leaves no vector of a file that
//! is gone.

use std::collections::{BTreeMap, BTreeSet};

use iceberg::table::Table;
use kfs_core::table_ident;
use kfs_plan::naming::TableNaming;
use kfs_segment::OwnedRecord;

use crate::local::{BoxError, Local, offsets};
use crate::row_deltas::{keyed, readers_see};
use crate::vector_mirrors::{fold, naming, orders, rounds, two_v2_rounds, upgrade_to_v3};

type TestResult = Result<(), BoxError>;

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

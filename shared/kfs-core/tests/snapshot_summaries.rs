//! Every snapshot's summary says what its files hold: the files, rows and bytes it
//! adds and removes, and the totals of the files it leaves live. A deletion vector is
//! counted as Java's `SnapshotSummary` counts it: a delete file and a DV (not a
//! position-delete file), its rows, and its blob's size (its Puffin file holds other
//! files' vectors too), so a summary read by any engine, and the totals the next
//! snapshot carries on from it, are those of the table's files.

use std::collections::BTreeMap;

use iceberg::spec::{DataContentType, DataFile, DataFileFormat, ManifestStatus};
use iceberg::table::Table;
use kfs_core::table_ident;

use crate::local::{BoxError, Local};
use crate::vector_mirrors::{fold, naming, orders, rounds, two_v2_rounds, upgrade_to_v3};

type TestResult = Result<(), BoxError>;

/// The sums of some files, by what a summary counts.
#[derive(Default, Debug)]
struct Sums {
    data_files: u64,
    records: u64,
    bytes: u64,
    delete_files: u64,
    position_delete_files: u64,
    vectors: u64,
    position_deletes: u64,
    equality_delete_files: u64,
    equality_deletes: u64,
}

impl Sums {
    fn add(&mut self, file: &DataFile) {
        let vector = file.file_format() == DataFileFormat::Puffin;
        self.bytes += match (vector, file.content_size_in_bytes()) {
            (true, Some(size)) => size as u64,
            _ => file.file_size_in_bytes(),
        };
        match file.content_type() {
            DataContentType::Data => {
                self.data_files += 1;
                self.records += file.record_count();
            }
            DataContentType::PositionDeletes => {
                self.delete_files += 1;
                match vector {
                    true => self.vectors += 1,
                    false => self.position_delete_files += 1,
                }
                self.position_deletes += file.record_count();
            }
            DataContentType::EqualityDeletes => {
                self.delete_files += 1;
                self.equality_delete_files += 1;
                self.equality_deletes += file.record_count();
            }
        }
    }

    /// The sums by the properties naming them: `added-…` (or `deleted-…`, `removed-…`
    /// with `removed`).
    fn changes(&self, removed: bool) -> BTreeMap<&'static str, u64> {
        let names = match removed {
            false => [
                "added-data-files",
                "added-records",
                "added-files-size",
                "added-delete-files",
                "added-position-delete-files",
                "added-dvs",
                "added-position-deletes",
                "added-equality-delete-files",
                "added-equality-deletes",
            ],
            true => [
                "deleted-data-files",
                "deleted-records",
                "removed-files-size",
                "removed-delete-files",
                "removed-position-delete-files",
                "removed-dvs",
                "removed-position-deletes",
                "removed-equality-delete-files",
                "removed-equality-deletes",
            ],
        };
        names.into_iter().zip(self.values()).collect()
    }

    /// The sums by the `total-…` properties naming them.
    fn totals(&self) -> BTreeMap<&'static str, u64> {
        BTreeMap::from([
            ("total-data-files", self.data_files),
            ("total-records", self.records),
            ("total-files-size", self.bytes),
            ("total-delete-files", self.delete_files),
            ("total-position-deletes", self.position_deletes),
            ("total-equality-deletes", self.equality_deletes),
        ])
    }

    fn values(&self) -> [u64; 9] {
        [
            self.data_files,
            self.records,
            self.bytes,
            self.delete_files,
            self.position_delete_files,
            self.vectors,
            self.position_deletes,
            self.equality_delete_files,
            self.equality_deletes,
        ]
    }
}

/// Checks the summary of every snapshot `table` lists against its files: what it
/// added and removed (a count of 0 is left out), and its totals (where it carries
/// them) those of its live files.
pub(crate) async fn summaries_match_files(table: &Table) -> TestResult {
    for snapshot in table.metadata().snapshots() {
        let id = snapshot.snapshot_id();
        let (mut added, mut removed, mut live) =
            (Sums::default(), Sums::default(), Sums::default());
        let list = table.manifest_list_reader(snapshot).load().await?;
        for manifest in list.entries() {
            let loaded = manifest.load_manifest(table.file_io()).await?;
            for entry in loaded.entries() {
                let ours = entry.snapshot_id() == Some(id);
                match entry.status() {
                    ManifestStatus::Added if ours => added.add(entry.data_file()),
                    ManifestStatus::Deleted if ours => removed.add(entry.data_file()),
                    _ => {}
                }
                if entry.is_alive() {
                    live.add(entry.data_file());
                }
            }
        }
        let summary = &snapshot.summary().additional_properties;
        let read = |name: &str| summary.get(name).map(|v| v.parse::<u64>());
        let changes = added.changes(false).into_iter();
        for (name, sum) in changes.chain(removed.changes(true)) {
            let expected = (sum > 0).then_some(sum);
            let found = read(name).transpose()?;
            assert_eq!(found, expected, "{name} of snapshot {id}: {summary:?}");
        }
        for (name, sum) in live.totals() {
            if let Some(found) = read(name).transpose()? {
                assert_eq!(found, sum, "{name} of snapshot {id}: {summary:?}");
            }
        }
    }
    Ok(())
}

/// A v3 mirror: every commit's row delta (its Puffin file holding vectors of several
/// data files, each replacing the file's last), the compaction folding them, and every
/// step of maintenance leave summaries that are their files' sums.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_snapshot_of_a_v3_mirror_sums_its_files() -> TestResult {
    let local = Local::open().await?;
    let naming = naming(Some("3"))?;
    let name = naming.table_for("orders");
    let mut reference = BTreeMap::new();
    for round in rounds() {
        fold(&mut reference, &round);
        local.put_records("orders", round)?;
        local.run(&naming).await?;
        summaries_match_files(&orders(&local, &naming).await?).await?;
    }
    // A commit whose vectors share one Puffin file (the last round deleted rows of
    // several files) is among them.
    let table = orders(&local, &naming).await?;
    let deletes = kfs_core::live_deletes(&table).await?;
    assert!(
        deletes.files.values().any(|named| named.len() > 1),
        "{:?}",
        deletes.files
    );
    let compacted = local.compact(&name).await?;
    assert!(compacted.delete_files_folded > 0, "{compacted:?}");
    summaries_match_files(&orders(&local, &naming).await?).await?;
    let last = vec![crate::row_deltas::keyed(16, "k5", None)];
    local.put_records("orders", last)?;
    local.run(&naming).await?;
    summaries_match_files(&orders(&local, &naming).await?).await?;
    let policy = crate::neighbours::thorough_policy();
    let report =
        crate::neighbours::maintain_everything(&local, &table_ident(&name), &policy).await?;
    assert!(report.steps_off.is_empty(), "{report:?}");
    summaries_match_files(&orders(&local, &naming).await?).await
}

/// A v2 mirror (position-delete files) upgraded to v3 by another engine: the commits
/// after the upgrade replace position deletes by vectors, and compaction folds both;
/// every summary is its files' sums.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_snapshot_of_an_upgraded_mirror_sums_its_files() -> TestResult {
    let local = Local::open().await?;
    let (naming, mut reference, rounds) = two_v2_rounds(&local).await?;
    let name = naming.table_for("orders");
    summaries_match_files(&orders(&local, &naming).await?).await?;
    upgrade_to_v3(&local, &naming).await?;
    for round in rounds {
        fold(&mut reference, &round);
        local.put_records("orders", round)?;
        local.run(&naming).await?;
        summaries_match_files(&orders(&local, &naming).await?).await?;
    }
    local.compact(&name).await?;
    summaries_match_files(&orders(&local, &naming).await?).await
}

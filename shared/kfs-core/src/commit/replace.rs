//! Building **replace** snapshots from iceberg-rust's public
//! building blocks (manifest writers, the manifest list writer, snapshot and ref
//! updates), which 0.10.1 has no action for.
//!
//! A replace snapshot keeps every manifest it does not touch; a manifest holding a
//! replaced file is rewritten with that file DELETED (keeping its sequence numbers) and
//! every other live file EXISTING; the new files are ADDED with the data sequence number
//! of the snapshot the rewrite started from, so a rewrite can never make an older row
//! look newer than a change committed meanwhile. The summary carries the table's full
//! offset map forward. The commit requires `main` to still be at the snapshot the
//! snapshot was built on; on a conflict the caller rebuilds on the new head.

use crate::commit::manifest::{
    SnapshotParts, carry_entry, manifest_list_path, manifest_list_writer, manifest_writer,
    row_range, snapshot_of, with_first_row_id,
};
use crate::commit::summary::{FileCounts, FileSummary};
use crate::table::{MAINTENANCE_ID_KEY, ancestry};
use iceberg::spec::{
    DataContentType, DataFile, MAIN_BRANCH, ManifestContentType, ManifestEntry, ManifestFile,
    Operation, Snapshot, SnapshotReference, SnapshotRetention, Summary,
};
use iceberg::table::Table;
use iceberg::{Error, ErrorKind, Result, TableRequirement, TableUpdate};
use kfs_plan::offsets::{GAP_HISTORY_KEY, MAX_TIMESTAMP_KEY, OFFSETS_KEY, STARTS_KEY, TOPIC_KEY};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// What every snapshot of a table carries forward unchanged when it adds no offsets
/// (a replace, a replay of dead letters): the offset map, the partitions' starts, the
/// gap history, the newest timestamp and the topic, as the table's properties store
/// them (which no other engine's expiry removes), or else as the newest snapshot with
/// each has it.
pub(crate) fn carried_properties(table: &Table) -> HashMap<String, String> {
    let mut properties = HashMap::new();
    let stored = table.metadata().properties();
    for key in [
        OFFSETS_KEY,
        STARTS_KEY,
        GAP_HISTORY_KEY,
        MAX_TIMESTAMP_KEY,
        TOPIC_KEY,
    ] {
        let value = stored
            .get(&kfs_plan::progress::progress_property(key))
            .or_else(|| ancestry(table).find_map(|s| s.summary().additional_properties.get(key)));
        if let Some(value) = value {
            properties.insert(key.to_owned(), value.clone());
        }
    }
    properties
}

/// A change of the live file set, as a replace snapshot.
#[derive(Debug, Clone, Default)]
pub struct Replacement {
    /// Paths of live files the snapshot removes.
    pub remove: BTreeSet<String>,
    /// Files it adds.
    pub add: Vec<DataFile>,
    /// Rewrite every data manifest into one (a manifest rewrite), not only the
    /// manifests holding removed files.
    pub merge_manifests: bool,
    /// What made it, and its id, for the summary (see [`MAINTENANCE_ID_KEY`]).
    pub maintenance_id: String,
    /// How it treats the table's live delete files.
    pub deletes: DeletePolicy,
    /// Files it rewrote without row lineage (a v3 table's files whose manifests had
    /// no first row id yet): stale once the head gives them ids.
    pub unlineaged: BTreeSet<String>,
}

/// How a replace treats the table's live delete files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum DeletePolicy {
    /// None may be live: files rewritten without reading them would bring deleted
    /// rows back (a conflict, re-planned).
    #[default]
    Refuse,
    /// The replace was planned with these delete files (paths) applied: they may be
    /// live, those in `remove` are removed; any other live one landed since, and may
    /// delete rows of the rewritten files (a conflict, re-planned).
    Folded(BTreeSet<String>),
    /// Any: the replace moves no row (a manifest rewrite); delete manifests are merged
    /// like the data manifests.
    Any,
}

/// A snapshot staged for commit (a replace, a row delta): its id, and the commit's
/// requirements and updates.
#[derive(Debug, Clone)]
pub struct StagedReplace {
    /// The snapshot's id.
    pub snapshot_id: i64,
    /// Requirements of its commit.
    pub requirements: Vec<TableRequirement>,
    /// Updates of its commit.
    pub updates: Vec<TableUpdate>,
}

/// Builds a replace snapshot on the table's current snapshot: writes the manifests and
/// the manifest list, and returns the commit to make. Fails with
/// `CatalogCommitConflicts` when a file to remove is no longer live (someone else
/// replaced it): the caller re-plans.
pub async fn stage_replace(
    table: &Table,
    change: &Replacement,
    now_ms: i64,
) -> Result<StagedReplace> {
    let metadata = table.metadata();
    let parent = metadata.current_snapshot().ok_or_else(|| {
        Error::new(
            ErrorKind::DataInvalid,
            "the table has no snapshot to rewrite",
        )
    })?;
    let mut staged = Staging {
        table,
        parent,
        snapshot_id: new_snapshot_id(table),
        commit_uuid: uuid::Uuid::new_v4(),
        manifests: Vec::new(),
        summary: FileSummary::default(),
        totals: FileCounts::default(),
        written: 0,
    };
    let touched = staged.sort_manifests(change).await?;
    staged.rewrite(touched).await?;
    staged.add(&change.add).await?;
    staged.finish(change, now_ms).await
}

/// Whether `change` removes the live `entry`: a file it names, or a delete file of one
/// data file it names (a deletion vector, whose Puffin file may hold others' vectors
/// and stay: a vector of a file that is gone is removed with it, as Java's rewrites
/// do).
fn removes(change: &Replacement, entry: &ManifestEntry) -> bool {
    change.remove.contains(entry.file_path())
        || (entry.content_type() != DataContentType::Data
            && entry
                .data_file()
                .referenced_data_file()
                .is_some_and(|data| change.remove.contains(&data)))
}

/// Live delete files the replace was not planned with: a conflict, re-planned.
fn unplanned_deletes() -> Error {
    Error::new(
        ErrorKind::CatalogCommitConflicts,
        "delete files landed since the rewrite was planned: it must not ignore them",
    )
    .with_retryable(true)
}

/// The live entries of manifests a replace touches, by partition spec and content
/// (`true` for deletes), each with whether it is replaced.
type Touched = BTreeMap<(i32, bool), Vec<(ManifestEntry, bool)>>;

/// A replace snapshot being built on `parent`.
struct Staging<'a> {
    table: &'a Table,
    parent: &'a iceberg::spec::SnapshotRef,
    snapshot_id: i64,
    commit_uuid: uuid::Uuid,
    /// The new snapshot's manifests so far.
    manifests: Vec<ManifestFile>,
    summary: FileSummary,
    /// The live files it keeps and adds.
    totals: FileCounts,
    /// Manifests written so far (they are numbered).
    written: usize,
}

impl Staging<'_> {
    /// Keeps every manifest the change does not touch, and returns the live entries of
    /// those it does. Fails with `CatalogCommitConflicts` when a file to remove is no
    /// longer live.
    async fn sort_manifests(&mut self, change: &Replacement) -> Result<Touched> {
        let file_io = self.table.file_io();
        let mut removed = BTreeSet::new();
        let mut touched: Touched = BTreeMap::new();
        let list = self.table.manifest_list_reader(self.parent).load().await?;
        for manifest in list.entries() {
            let deletes = manifest.content != ManifestContentType::Data;
            // A manifest of DELETED entries alone lists nothing live: left out.
            if !manifest.has_added_files() && !manifest.has_existing_files() {
                continue;
            }
            if deletes && change.deletes == DeletePolicy::Refuse {
                // Deletes landed since the rewrite was planned: its merged files
                // would bring their rows back.
                return Err(unplanned_deletes());
            }
            let loaded = manifest.load_manifest(file_io).await?;
            let touches = change.merge_manifests
                || loaded
                    .entries()
                    .iter()
                    .any(|e| e.is_alive() && removes(change, e));
            let ids = crate::table::inherited_first_row_ids(manifest, loaded.entries());
            for (entry, id) in loaded.entries().iter().zip(ids) {
                if !entry.is_alive() {
                    continue;
                }
                if let DeletePolicy::Folded(known) = &change.deletes
                    && deletes
                    && !known.contains(entry.file_path())
                {
                    return Err(unplanned_deletes());
                }
                let remove = removes(change, entry);
                if change.remove.contains(entry.file_path()) {
                    removed.insert(entry.file_path().to_owned());
                } else if !remove {
                    self.totals.count(entry.data_file());
                }
                if touches {
                    let mut entry = entry.as_ref().clone();
                    // A v3 data file written EXISTING or DELETED carries the first
                    // row id it inherited (inheritance starts again in the new manifest).
                    if let Some(id) = id.filter(|_| entry.data_file().first_row_id().is_none()) {
                        let spec_id = manifest.partition_spec_id;
                        entry.data_file = with_first_row_id(entry.data_file(), spec_id, id)?;
                    }
                    touched
                        .entry((manifest.partition_spec_id, deletes))
                        .or_default()
                        .push((entry, remove));
                }
            }
            if !touches {
                self.manifests.push(manifest.clone());
            }
        }
        if removed.len() != change.remove.len() {
            return Err(Error::new(
                ErrorKind::CatalogCommitConflicts,
                format!(
                    "{} of the files to replace are no longer live: re-plan",
                    change.remove.len() - removed.len()
                ),
            )
            .with_retryable(true));
        }
        Ok(touched)
    }

    /// A manifest of the new snapshot, for data (or delete, with `deletes`) files of
    /// `spec`.
    fn new_manifest(
        &mut self,
        spec: &iceberg::spec::PartitionSpecRef,
        deletes: bool,
    ) -> Result<crate::commit::manifest::TypedManifestWriter> {
        self.written += 1;
        let number = (self.commit_uuid, self.written);
        manifest_writer(self.table, number, self.snapshot_id, spec, deletes)
    }

    /// Writes the touched manifests again: a replaced file DELETED (keeping its
    /// sequence numbers), every other live file EXISTING.
    async fn rewrite(&mut self, touched: Touched) -> Result<()> {
        for ((spec_id, deletes), entries) in touched {
            let spec = self
                .table
                .metadata()
                .partition_spec_by_id(spec_id)
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::DataInvalid,
                        format!("no partition spec {spec_id}"),
                    )
                })?
                .clone();
            let mut writer = self.new_manifest(&spec, deletes)?;
            for (entry, remove) in entries {
                let parent_id = self.parent.snapshot_id();
                let counted = (&mut self.summary, spec_id);
                carry_entry(&mut writer, &entry, remove, parent_id, counted)?;
            }
            self.manifests.push(writer.write_manifest_file().await?);
        }
        Ok(())
    }

    /// Adds the new files, with the data sequence number of the snapshot the rewrite
    /// started from (a rewrite never makes an older row look newer).
    async fn add(&mut self, files: &[DataFile]) -> Result<()> {
        if files.is_empty() {
            return Ok(());
        }
        let spec = self.table.metadata().default_partition_spec().clone();
        let mut writer = self.new_manifest(&spec, false)?;
        for file in files {
            self.summary.count(file, spec.spec_id(), true);
            self.totals.count(file);
            writer.add_file(file.clone(), self.parent.sequence_number())?;
        }
        self.manifests
            .insert(0, writer.write_manifest_file().await?);
        Ok(())
    }

    /// Writes the manifest list and returns the commit: the snapshot, its summary
    /// (the offset map carried forward), and `main` required at the parent.
    async fn finish(self, change: &Replacement, now_ms: i64) -> Result<StagedReplace> {
        let metadata = self.table.metadata();
        let (snapshot_id, parent_id) = (self.snapshot_id, self.parent.snapshot_id());
        let sequence_number = metadata.next_sequence_number();
        let list_path = manifest_list_path(self.table, snapshot_id, self.commit_uuid);
        let mut list_writer = manifest_list_writer(
            self.table,
            &list_path,
            snapshot_id,
            Some(parent_id),
            sequence_number,
        )
        .await?;
        list_writer.add_manifests(self.manifests.into_iter())?;
        let rows = row_range(self.table, &list_writer);
        list_writer.close().await?;
        let mut properties: HashMap<String, String> = self.summary.build();
        properties.extend(self.totals.totals());
        // The offset map (and what else every snapshot carries) moves forward unchanged.
        properties.extend(carried_properties(self.table));
        properties.insert(MAINTENANCE_ID_KEY.to_owned(), change.maintenance_id.clone());
        let snapshot = snapshot_of(
            self.table,
            SnapshotParts {
                snapshot_id,
                parent_id: Some(parent_id),
                sequence_number,
                timestamp_ms: now_ms,
                manifest_list: list_path,
                summary: Summary {
                    operation: Operation::Replace,
                    additional_properties: properties,
                },
                rows,
            },
        );
        Ok(commit_on_main(self.table, snapshot, Some(parent_id)))
    }
}

/// The commit of `snapshot`: added, `main` set to it, `main` required at `parent_id`
/// (`None`: a table without a snapshot yet).
pub(crate) fn commit_on_main(
    table: &Table,
    snapshot: Snapshot,
    parent_id: Option<i64>,
) -> StagedReplace {
    let snapshot_id = snapshot.snapshot_id();
    StagedReplace {
        snapshot_id,
        requirements: vec![
            TableRequirement::UuidMatch {
                uuid: table.metadata().uuid(),
            },
            TableRequirement::RefSnapshotIdMatch {
                r#ref: MAIN_BRANCH.to_owned(),
                snapshot_id: parent_id,
            },
        ],
        updates: vec![
            TableUpdate::AddSnapshot { snapshot },
            TableUpdate::SetSnapshotRef {
                ref_name: MAIN_BRANCH.to_owned(),
                reference: SnapshotReference::new(
                    snapshot_id,
                    SnapshotRetention::branch(None, None, None),
                ),
            },
        ],
    }
}

/// A positive snapshot id the table does not have yet.
pub(crate) fn new_snapshot_id(table: &Table) -> i64 {
    loop {
        let (high, low) = uuid::Uuid::new_v4().as_u64_pair();
        let id = ((high ^ low) & (i64::MAX as u64)) as i64;
        if id != 0 && table.metadata().snapshot_by_id(id).is_none() {
            return id;
        }
    }
}

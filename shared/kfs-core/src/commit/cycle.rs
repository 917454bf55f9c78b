//! One commit cycle of one table, as stages: gather the owner's pending work, plan
//! (settling what the table already covers or overlaps), land the plan's files in one
//! snapshot, and mark what it took committed. A conflict re-reads the table and plans
//! again.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use iceberg::table::Table;
use kfs_catalog::catalog::CatalogAccess;
use kfs_plan::commit::{CommitPlan, PendingSegment, PlanInput, plan_commit};
use kfs_plan::crosscheck::{AgedSegment, cross_check};
use kfs_plan::naming::TableName;
use kfs_plan::offsets::MAX_TIMESTAMP_KEY;
use kfs_plan::progress::ProgressError;
use kfs_plan::sweep::TableProgress;

use super::append::{Appended, append_and_verify};
use super::coalesce::{coalesce, relayout};
use super::outcome::{CommitError, CommitOutcome, CommitSettings};
use super::recover::{Recover, drop_overlapping_runs, pending_segment, recover_covered};
use super::sidecars::{Sidecar, SidecarInput, commit_sidecar};
use crate::ledger::{EntryState, Ledger, LedgerEntry, LedgerError, partition_heads};
use crate::table::history::newest_in_files;
use crate::table::{newest_record_ms, table_ident, table_progress, table_watermarks};

/// A table's offsets per partition: the base offsets of the complete segments listed.
type Listing = BTreeMap<i32, BTreeSet<i64>>;

/// Runs one commit cycle for one table.
pub async fn commit_table(
    access: CatalogAccess<'_>,
    ledger: &impl Ledger,
    name: &TableName,
    topic: &str,
    listing: &Listing,
    settings: &CommitSettings,
    now_ms: i64,
) -> Result<CommitOutcome, CommitError> {
    let catalog = access.catalog;
    let cycle = Cycle {
        access,
        ledger,
        name,
        table_name: name.to_string(),
        topic,
        settings,
        now_ms,
    };
    let mut table = catalog
        .load_table(&table_ident(name))
        .await
        .map_err(|e| cycle.catalog_error(e))?;
    // Only the owner's entries: another feed's pending files (converted before its
    // mapping collided) are never appended here.
    let owner = Owner::of(&table, topic).map_err(|source| CommitError::Ownership {
        table: cycle.table_name.clone(),
        source,
    })?;
    let gathered = cycle.gather(&owner).await?;
    let listing = held_listing(listing, &gathered.unreadable);
    let entries: HashMap<&str, &LedgerEntry> = gathered
        .entries
        .iter()
        .map(|e| (e.segment.as_str(), e))
        .collect();
    let mut outcome = CommitOutcome {
        unreadable: gathered.unreadable.clone(),
        ..CommitOutcome::default()
    };
    // The etcd cross-check decides which pending segments this cycle may consider;
    // a held segment stays listed, so the planner holds its partition behind it.
    let aged: Vec<AgedSegment> = gathered
        .entries
        .iter()
        .map(|e| AgedSegment {
            segment: pending_segment(e),
            created_ms: e.created_ms,
        })
        .collect();
    let watermarks = table_watermarks(&table).map_err(|e| cycle.progress_error(e))?;
    outcome.crosscheck = cross_check(
        &aged,
        &watermarks,
        &settings.etcd,
        settings.crosscheck,
        now_ms,
    );
    let mut pending: Vec<PendingSegment> = outcome.crosscheck.allowed.clone();
    for attempt in 1..=settings.max_attempts {
        outcome.attempts = attempt;
        let progress = table_progress(&table).map_err(|e| cycle.progress_error(e))?;
        let planning = Planning {
            table: &table,
            progress: &progress,
            listing: &listing,
            skipped: &gathered.skipped,
            entries: &entries,
        };
        let plan = cycle.plan(&planning, &mut pending, &mut outcome).await?;
        outcome.holds = plan.holds.clone();
        outcome.watermarks = plan.offsets.clone();
        let previous_newest = newest_record_ms(&table);
        if plan.is_empty() {
            outcome.watermarks = progress.watermarks.clone();
            outcome.newest_record_ms = previous_newest;
            return Ok(outcome);
        }
        let landed = match cycle.land(&planning, &plan, previous_newest).await? {
            Landing::Landed(landed) => landed,
            // Someone else committed first, or the swap silently failed: re-plan.
            Landing::Replan(moved) => {
                table = moved;
                continue;
            }
        };
        return cycle.settle(landed, &plan, &entries, outcome).await;
    }
    Err(CommitError::Contended {
        table: cycle.table_name,
        attempts: settings.max_attempts,
    })
}

/// What one cycle works with.
struct Cycle<'a, L> {
    access: CatalogAccess<'a>,
    ledger: &'a L,
    name: &'a TableName,
    table_name: String,
    topic: &'a str,
    settings: &'a CommitSettings,
    now_ms: i64,
}

/// The owner's pending work, as the cycle found it in the ledger.
struct Gathered {
    /// Pending entries at the head of each partition, the owner's only.
    entries: Vec<LedgerEntry>,
    /// Pending items that could not be read, with the reason.
    unreadable: Vec<(String, String)>,
    /// Segments an operator skipped, per partition (the planner passes them with a
    /// skipped gap).
    skipped: Listing,
}

/// What a plan is made on: the table as read, its progress, and the pending work.
struct Planning<'a> {
    table: &'a Table,
    progress: &'a TableProgress,
    listing: &'a Listing,
    skipped: &'a Listing,
    entries: &'a HashMap<&'a str, &'a LedgerEntry>,
}

/// What landing a plan came to.
enum Landing {
    /// The plan's snapshot is in the table.
    Landed(Landed),
    /// It is not (another commit came first): the table as re-read.
    Replan(Table),
}

/// A plan's snapshot, landed.
struct Landed {
    /// The table as re-read after the append.
    table: Table,
    snapshot_id: i64,
    /// The paths of the files appended.
    appended: HashSet<String>,
    /// Small files merged into the appended ones (garbage once this attempt landed).
    merged_away: Vec<String>,
    /// Dead letters committed before the append.
    dead_letters: u64,
    /// Records appended to the mirror's change log before the append.
    change_log: u64,
}

impl<L: Ledger> Cycle<'_, L> {
    fn catalog_error(&self, source: iceberg::Error) -> CommitError {
        CommitError::Catalog {
            table: self.table_name.clone(),
            source: Box::new(source),
        }
    }

    fn ledger_error(&self, source: LedgerError) -> CommitError {
        CommitError::Ledger {
            table: self.table_name.clone(),
            source,
        }
    }

    fn progress_error(&self, source: ProgressError) -> CommitError {
        CommitError::Progress {
            table: self.table_name.clone(),
            source,
        }
    }

    /// Marks what `plan` took committed at the landed snapshot, deletes the small files
    /// merged into the appended ones (garbage now: a crash before this leaves them to
    /// orphan cleanup), and completes `outcome`.
    async fn settle(
        &self,
        landed: Landed,
        plan: &CommitPlan,
        entries: &HashMap<&str, &LedgerEntry>,
        mut outcome: CommitOutcome,
    ) -> Result<CommitOutcome, CommitError> {
        let taken: Vec<&LedgerEntry> = plan
            .take
            .iter()
            .filter_map(|s| entries.get(s.id.as_str()).copied())
            .collect();
        self.ledger
            .mark_committed(&taken, landed.snapshot_id, self.now_ms)
            .await
            .map_err(|e| self.ledger_error(e))?;
        for path in landed
            .merged_away
            .iter()
            .filter(|p| !landed.appended.contains(*p))
        {
            let _ = kfs_failpoint::delete_file(landed.table.file_io(), path).await;
        }
        outcome.snapshot_id = Some(landed.snapshot_id);
        outcome.segments = usize::try_from(plan.segments()).unwrap_or(usize::MAX);
        outcome.files = landed.appended.len();
        outcome.coalesced = landed.merged_away.len();
        outcome.records = plan.records();
        outcome.dead_letters = landed.dead_letters;
        outcome.change_log = landed.change_log;
        outcome.gaps = plan.gaps.clone();
        outcome.newest_record_ms = newest_record_ms(&landed.table);
        outcome.superseded_rows = landed
            .table
            .metadata()
            .snapshot_by_id(landed.snapshot_id)
            .and_then(|s| {
                s.summary()
                    .additional_properties
                    .get("added-position-deletes")
            })
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        Ok(outcome)
    }

    /// The head of each partition's pending work, the partitions sharing what one
    /// commit may take (a backlog of any size costs one commit's worth of reads), and
    /// the segments an operator skipped; the owner's entries only.
    async fn gather(&self, owner: &Owner) -> Result<Gathered, CommitError> {
        let keys = self
            .ledger
            .work_keys("pending", &self.table_name)
            .await
            .map_err(|e| self.ledger_error(e))?;
        let partitions = keys
            .iter()
            .map(|k| k.partition)
            .collect::<HashSet<_>>()
            .len();
        let share = (self.settings.max_segments / partitions.max(1)).max(1);
        let pending = self
            .ledger
            .get_many(&partition_heads(&keys, share))
            .await
            .map_err(|e| self.ledger_error(e))?;
        let entries = pending
            .entries
            .into_iter()
            .filter(|e| e.state == EntryState::Pending && e.table == self.table_name)
            .filter(|e| owner.feeds(e))
            .collect();
        let mut skipped = Listing::new();
        // An unreadable skipped item is not skipped: its partition waits at it.
        for entry in self
            .ledger
            .scan(Some("skipped"), Some(&self.table_name))
            .await
            .map_err(|e| self.ledger_error(e))?
            .entries
            .into_iter()
            .filter(|e| owner.feeds(e))
        {
            skipped
                .entry(entry.partition)
                .or_default()
                .insert(entry.base_offset);
        }
        Ok(Gathered {
            entries,
            unreadable: pending.unreadable,
            skipped,
        })
    }

    /// Plans a commit on `on`, planned again without what settling the plan dropped,
    /// so that a partition held by an entry that can never commit moves on in this
    /// pass (each round drops at least one pending entry, so this ends). Entries the
    /// table covers are marked committed or dropped; `pending` loses them.
    async fn plan(
        &self,
        on: &Planning<'_>,
        pending: &mut Vec<PendingSegment>,
        outcome: &mut CommitOutcome,
    ) -> Result<CommitPlan, CommitError> {
        loop {
            let plan = plan_commit(&PlanInput {
                topic: self.topic,
                watermarks: &on.progress.watermarks,
                starts: &on.progress.starts,
                pending,
                listing: on.listing,
                start_offsets: &self.settings.start_offsets,
                max_segments: self.settings.max_segments,
                skipped: on.skipped,
            });
            let (recovered, dropped_late) = recover_covered(
                on.table,
                on.progress,
                self.ledger,
                &plan,
                on.entries,
                &self.settings.start_offsets,
                self.now_ms,
            )
            .await
            .map_err(|e| match e {
                Recover::Ledger(e) => self.ledger_error(e),
                Recover::Summary(e) => self.progress_error(e.into()),
            })?;
            outcome.recovered += recovered;
            outcome.late_dropped += dropped_late;
            let dropped = drop_overlapping_runs(
                self.ledger,
                &plan,
                on.entries,
                &on.progress.watermarks,
                self.now_ms,
            )
            .await
            .map_err(|e| self.ledger_error(e))?;
            outcome.runs_dropped += dropped.len();
            let covered: BTreeSet<&str> = plan.covered.iter().map(|s| s.id.as_str()).collect();
            pending.retain(|s| !covered.contains(s.id.as_str()) && !dropped.contains(&s.id));
            if dropped.is_empty() {
                return Ok(plan);
            }
        }
    }

    /// Lands `plan` on the table it was made on: its dead letters first, and a
    /// mirror's change log (a segment in the table has its dead letters in the
    /// dead-letter table and its records in the change log, and recovery from the
    /// table's progress stays exact), then its data files, laid out in the current
    /// partition spec and coalesced when the settings say so, appended in one snapshot
    /// carrying the full offset map.
    async fn land(
        &self,
        on: &Planning<'_>,
        plan: &CommitPlan,
        previous_newest: Option<i64>,
    ) -> Result<Landing, CommitError> {
        let (table, topic) = (on.table, self.topic);
        let commit_id = plan.commit_id(topic);
        let sidecar = SidecarInput {
            name: self.name,
            table,
            topic,
            plan,
            entries: on.entries,
            settings: self.settings,
            commit_id: &commit_id,
        };
        let dead_letters = commit_sidecar(Sidecar::DeadLetters, self.access, &sidecar).await?;
        let mode = crate::table::mode_of(table).map_err(|e| self.catalog_error(e))?;
        let change_log = match mode.change_log {
            true => commit_sidecar(Sidecar::ChangeLog, self.access, &sidecar).await?,
            false => 0,
        };
        let data_files = data_files_of(table, plan, on.entries, &self.table_name).await?;
        // Files written before the table's partition spec evolved are written again
        // in the current spec (an append takes files of the default spec only).
        let (data_files, relaid) = relayout(table, data_files, &commit_id)
            .await
            .map_err(|e| self.catalog_error(e))?;
        let (data_files, mut merged_away) = if self.settings.coalesce && data_files.len() > 1 {
            let target = crate::table::target_file_size(table);
            coalesce(table, data_files, target, &commit_id)
                .await
                .map_err(|e| self.catalog_error(e))?
        } else {
            (data_files, Vec::new())
        };
        merged_away.extend(relaid);
        let appended: HashSet<String> = data_files
            .iter()
            .map(|f| f.file_path().to_owned())
            .collect();
        let newest = previous_newest.max(newest_in_files(&data_files));
        let mut properties = plan.summary(topic, &on.progress.gaps).properties();
        if let Some(newest) = newest {
            properties.insert(MAX_TIMESTAMP_KEY.to_owned(), newest.to_string());
        }
        let answer = append_and_verify(
            self.access,
            table,
            &mode,
            data_files,
            properties,
            &commit_id,
        )
        .await
        .map_err(|e| self.catalog_error(e))?;
        Ok(match answer {
            Appended::Landed(landed, snapshot_id, ours) => {
                if !ours {
                    // Another attempt at this commit landed, with its own layout: its
                    // snapshot may reference what this one merged away.
                    merged_away.clear();
                }
                Landing::Landed(Landed {
                    table: landed,
                    snapshot_id,
                    appended,
                    merged_away,
                    dead_letters,
                    change_log,
                })
            }
            Appended::Replan(moved) => Landing::Replan(moved),
        })
    }
}

/// `listing`, with each pending item that cannot be read (reported by the pass)
/// holding its partition at its segment, as a listed segment not converted yet does,
/// even once the source no longer lists it: its offsets are never passed as a gap.
fn held_listing<'a>(listing: &'a Listing, unreadable: &[(String, String)]) -> Cow<'a, Listing> {
    if unreadable.is_empty() {
        return Cow::Borrowed(listing);
    }
    let mut held = listing.clone();
    for (segment, _) in unreadable {
        if let Some((key, _)) = kfs_plan::keys::SegmentKey::parse(segment) {
            held.entry(key.partition)
                .or_default()
                .insert(key.base_offset);
        }
    }
    Cow::Owned(held)
}

/// The feed a table records as its owner, as the commit filters ledger entries by it.
struct Owner {
    topic: String,
    /// `None` for a table from before namespaces were recorded: any namespace.
    namespace: Option<String>,
}

impl Owner {
    /// The owner of `table`, which must be `topic`.
    fn of(table: &Table, topic: &str) -> Result<Self, crate::table::OwnershipError> {
        let (owner_topic, namespace) = crate::table::table_owner(table).ok_or_else(|| {
            crate::table::OwnershipError::Foreign {
                table: table.identifier().to_string(),
                feed: format!("topic {topic:?}"),
            }
        })?;
        if owner_topic != topic {
            return Err(crate::table::OwnershipError::Taken {
                table: table.identifier().to_string(),
                owner_topic,
                owner_namespace: namespace.unwrap_or_else(|| "(any)".into()),
                feed: format!("topic {topic:?}"),
            });
        }
        Ok(Self {
            topic: owner_topic,
            namespace,
        })
    }

    /// Whether `entry` belongs to the owner.
    fn feeds(&self, entry: &LedgerEntry) -> bool {
        entry.topic == self.topic
            && self.namespace.as_ref().is_none_or(|namespace| {
                kfs_plan::keys::SegmentKey::parse(&entry.segment)
                    .is_some_and(|(key, _)| key.namespace == *namespace)
            })
    }
}

async fn data_files_of(
    table: &Table,
    plan: &CommitPlan,
    entries: &HashMap<&str, &LedgerEntry>,
    table_name: &str,
) -> Result<Vec<(iceberg::spec::DataFile, i32)>, CommitError> {
    let metadata = table.metadata();
    let mut files = Vec::new();
    for segment in &plan.take {
        let Some(entry) = entries.get(segment.id.as_str()) else {
            continue;
        };
        let descriptions = crate::ledger::resolve(&entry.data_files, table.file_io())
            .await
            .map_err(|source| CommitError::DataFile {
                table: table_name.to_owned(),
                segment: segment.id.clone(),
                source: Box::new(source),
            })?;
        for json in &descriptions {
            let file = crate::ledger::from_ledger(json, metadata).map_err(|source| {
                CommitError::DataFile {
                    table: table_name.to_owned(),
                    segment: segment.id.clone(),
                    source: Box::new(source),
                }
            })?;
            files.push(file);
        }
    }
    Ok(files)
}

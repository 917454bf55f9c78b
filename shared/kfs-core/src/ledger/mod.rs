//! The ledger: what happened to every segment. One trait, an embedded SQLite
//! implementation (the local default) and an in-memory one (unit tests and fault
//! injection); DynamoDB implements it for the Lambda deployment.
//!
//! A segment is identified by its object key; its entry records the ETag (or content
//! hash) of the version that was converted, so a key rewritten with other content is
//! recognised. States: `pending` (converted, data files written, not yet in the table),
//! `committed` (with the snapshot id), `quarantined` (with the error). Every transition
//! is conditional on the state it leaves, so replays and races are harmless.

#[cfg(any(test, feature = "test-support"))]
mod contract;
mod files;
mod members;
mod memory;
#[cfg(feature = "test-support")]
mod probe;
#[cfg(feature = "sql")]
mod sqlite;

#[cfg(any(test, feature = "test-support"))]
pub use contract::check_contract;
pub use files::{from_ledger, resolve, spill, spilled_to, to_ledger};
pub use members::RunMember;
pub use memory::MemoryLedger;
#[cfg(feature = "test-support")]
pub use probe::{Probe, Probed};
#[cfg(feature = "sql")]
pub use sqlite::SqliteLedger;

use kfs_catalog::fault::ErrorKind;
use serde::{Deserialize, Serialize};
use std::future::Future;

/// The state of a segment in the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum EntryState {
    /// Converted; its data files wait for a commit.
    Pending,
    /// In the table since this snapshot.
    Committed {
        /// The snapshot that added it.
        snapshot_id: i64,
    },
    /// Could not be converted; holds back its partition until an operator acts.
    Quarantined {
        /// Why, worded for an operator.
        error: String,
    },
    /// Quarantined, then skipped by an operator: its offsets are committed as a gap
    /// recorded as skipped, and its partition moves on.
    Skipped {
        /// Why it was quarantined.
        error: String,
    },
}

impl EntryState {
    /// The state's name as stored.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Committed { .. } => "committed",
            Self::Quarantined { .. } => "quarantined",
            Self::Skipped { .. } => "skipped",
        }
    }
}

/// One segment's record in the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerEntry {
    /// Object key of the `.kfs`, relative to the source prefix.
    pub segment: String,
    /// ETag or content hash of the converted version.
    pub etag: String,
    /// Target table, `namespace.name`.
    pub table: String,
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Base offset of the segment.
    pub base_offset: i64,
    /// Last offset of the segment (the base offset when unknown, e.g. quarantined).
    pub last_offset: i64,
    /// Data records.
    pub records: u64,
    /// Bytes of the data files written.
    pub bytes: u64,
    /// The data files, as Iceberg `DataFile` JSON.
    pub data_files: Vec<String>,
    /// What went to the table's dead-letter table (JSON values that could not be
    /// written); committed with the entry, before the table's own commit.
    #[serde(default)]
    pub dead_letters: DeadLetters,
    /// The other segments of a run converted with this one into the same data files,
    /// in offset order after it (empty for an entry of one segment). The entry's
    /// `segment`, `etag` and `base_offset` are the run's first segment's; its
    /// `last_offset`, `records` and `bytes` cover the whole run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<RunMember>,
    /// State.
    pub state: EntryState,
    /// When the entry was created, Unix ms.
    pub created_ms: i64,
    /// When the entry last changed, Unix ms.
    pub updated_ms: i64,
}

impl LedgerEntry {
    /// The data file descriptions as stored (a JSON array): what tells one conversion
    /// of a key from another, since every conversion writes files of its own.
    pub fn stored_data_files(&self) -> Result<String, LedgerError> {
        serde_json::to_string(&self.data_files).map_err(|e| LedgerError::Corrupt {
            segment: self.segment.clone(),
            reason: format!("data_files: {e}"),
        })
    }

    /// A quarantined entry for version `version` of this entry's key, kept beside it
    /// (`{segment}#{tag}-{version}`, so this entry stays as it is): content an operator
    /// must see that is not ingested (a rewrite, a segment overlapping the table).
    pub fn quarantined_beside(
        &self,
        tag: &str,
        version: &str,
        error: String,
        now_ms: i64,
    ) -> LedgerEntry {
        LedgerEntry {
            segment: format!("{}#{tag}-{version}", self.segment),
            etag: version.to_owned(),
            data_files: Vec::new(),
            dead_letters: DeadLetters::default(),
            records: 0,
            bytes: 0,
            state: EntryState::Quarantined { error },
            created_ms: now_ms,
            updated_ms: now_ms,
            ..self.clone()
        }
    }

    /// Segments the entry holds: its own and its run's.
    pub fn segments(&self) -> usize {
        1 + self.members.len()
    }

    /// The offsets inside the entry's range that none of its segments holds
    /// (`(from, to)`, inclusive): the gaps its run spans.
    pub fn inner_gaps(&self) -> Vec<(i64, i64)> {
        self.members
            .iter()
            .filter_map(|m| Some((m.gap_from?, m.base_offset.checked_sub(1)?)))
            .collect()
    }

    /// The key and version of the segment of the entry that starts at `base_offset`:
    /// the entry's own or a run member's.
    pub fn member_at(&self, base_offset: i64) -> Option<(&str, &str)> {
        if base_offset == self.base_offset {
            return Some((&self.segment, &self.etag));
        }
        self.members
            .iter()
            .find(|m| m.base_offset == base_offset)
            .map(|m| (m.segment.as_str(), m.etag.as_str()))
    }
}

/// An entry's optional JSON field as stored: `None` when `empty`.
fn to_stored_field(
    value: &(impl Serialize + ?Sized),
    empty: bool,
    field: &str,
    segment: &str,
) -> Result<Option<String>, LedgerError> {
    if empty {
        return Ok(None);
    }
    serde_json::to_string(value)
        .map(Some)
        .map_err(|e| LedgerError::Corrupt {
            segment: segment.to_owned(),
            reason: format!("{field}: {e}"),
        })
}

/// An entry's optional JSON field from its stored form (absent: the default).
fn from_stored_field<T: serde::de::DeserializeOwned + Default>(
    stored: Option<&str>,
    field: &str,
    segment: &str,
) -> Result<T, LedgerError> {
    stored
        .map_or(Ok(T::default()), serde_json::from_str)
        .map_err(|e| LedgerError::Corrupt {
            segment: segment.to_owned(),
            reason: format!("{field}: {e}"),
        })
}

/// A segment's records for the dead-letter table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetters {
    /// Records.
    pub records: u64,
    /// The dead-letter table's data files, as Iceberg `DataFile` JSON.
    pub files: Vec<String>,
}

impl DeadLetters {
    /// True when the segment had no record for the dead-letter table.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// As stored (JSON) for the entry of `segment`, `None` when empty.
    pub fn to_stored(&self, segment: &str) -> Result<Option<String>, LedgerError> {
        to_stored_field(self, self.is_empty(), "dead_letters", segment)
    }

    /// From the stored form of the entry of `segment` (absent: empty).
    pub fn from_stored(stored: Option<&str>, segment: &str) -> Result<Self, LedgerError> {
        from_stored_field(stored, "dead_letters", segment)
    }
}

/// What a conditional insert found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InsertOutcome {
    /// The entry was written.
    Inserted,
    /// An entry for the segment already existed; it was left as it is.
    Exists(Box<LedgerEntry>),
}

/// A ledger operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The backing store failed.
    #[error("ledger store failed ({kind}): {message}")]
    Store {
        /// What failed.
        message: String,
        /// What the failure means.
        kind: ErrorKind,
    },
    /// A stored entry could not be read.
    #[error("ledger entry {segment} is unreadable: {reason}")]
    Corrupt {
        /// The segment.
        segment: String,
        /// Why.
        reason: String,
    },
}

impl LedgerError {
    /// What the failure means: the store's own kind; an unreadable entry is for the
    /// operator.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Store { kind, .. } => *kind,
            Self::Corrupt { .. } => ErrorKind::Config,
        }
    }
}

/// What a listing of the ledger found: the entries it could read, and the items it
/// could not (each reported, never the reason a whole listing fails: one bad item
/// must not stop every table).
#[derive(Debug, Clone, Default)]
pub struct Listing {
    /// The entries read, ordered by table, partition and base offset.
    pub entries: Vec<LedgerEntry>,
    /// Items that could not be read: segment and reason.
    pub unreadable: Vec<(String, String)>,
}

impl Listing {
    /// Files an item the backend could not read: an unreadable entry is noted, any
    /// other failure (the store's) is returned.
    pub fn note(&mut self, read: Result<LedgerEntry, LedgerError>) -> Result<(), LedgerError> {
        match read {
            Ok(entry) => self.entries.push(entry),
            Err(LedgerError::Corrupt { segment, reason }) => {
                self.unreadable.push((segment, reason))
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }
}

/// An entry's place in its table's open work, without its body: what a key-only
/// index answers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WorkKey {
    /// Object key of the `.kfs`.
    pub segment: String,
    /// Partition.
    pub partition: i32,
    /// Base offset.
    pub base_offset: i64,
}

/// The first `per_partition` keys of each partition, of keys ordered by partition
/// and base offset: the head of every partition's work, which is all one commit can
/// take when it takes at most `per_partition` segments.
pub fn partition_heads(keys: &[WorkKey], per_partition: usize) -> Vec<String> {
    let mut heads = Vec::new();
    let mut taken = 0;
    let mut partition = None;
    for key in keys {
        if partition != Some(key.partition) {
            partition = Some(key.partition);
            taken = 0;
        }
        if taken < per_partition {
            heads.push(key.segment.clone());
            taken += 1;
        }
    }
    heads
}

/// The conversions of a segment that began and have not ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Attempts {
    /// How many.
    pub unfinished: u32,
    /// When the latest of them began (Unix ms), if any.
    pub last_began_ms: Option<i64>,
}

impl Attempts {
    /// True when at least `count` conversions began and never ended, the latest more
    /// than `running_at_most` before `now_ms`: longer than any conversion may run (the
    /// function's timeout), so none of them is still running elsewhere.
    pub fn dead(&self, count: u32, running_at_most: std::time::Duration, now_ms: i64) -> bool {
        let limit = i64::try_from(running_at_most.as_millis()).unwrap_or(i64::MAX);
        self.unfinished >= count
            && self
                .last_began_ms
                .is_some_and(|began| now_ms.saturating_sub(began) > limit)
    }
}

/// The ledger interface every backend implements.
pub trait Ledger: Send + Sync {
    /// Which ledger this is (`sqlite:<path>`, `dynamodb:<table>`, `memory:<id>`):
    /// recorded in the tables it protects, so that orphan cleanup refuses to run
    /// where it cannot see their pending files.
    fn identity(&self) -> String;

    /// The entry of a segment, if any.
    fn get(
        &self,
        segment: &str,
    ) -> impl Future<Output = Result<Option<LedgerEntry>, LedgerError>> + Send;

    /// Inserts an entry unless one exists for the segment.
    fn insert(
        &self,
        entry: &LedgerEntry,
    ) -> impl Future<Output = Result<InsertOutcome, LedgerError>> + Send;

    /// Every entry in a state named `state` (`pending`, `committed`, `quarantined`,
    /// `skipped`), optionally of one table, ordered by table, partition and base
    /// offset; items that cannot be read are reported in the listing.
    fn scan(
        &self,
        state: Option<&str>,
        table: Option<&str>,
    ) -> impl Future<Output = Result<Listing, LedgerError>> + Send;

    /// The keys of `table`'s entries in `state` (`pending`, `quarantined` or
    /// `skipped`), ordered by partition and base offset. Cheap (DynamoDB answers from
    /// its keys-only index) but possibly a moment behind writes: for deciding what to
    /// read or to leave alone, never for acting on an entry.
    fn work_keys(
        &self,
        state: &str,
        table: &str,
    ) -> impl Future<Output = Result<Vec<WorkKey>, LedgerError>> + Send;

    /// The entries of `segments` that exist, read as [`Ledger::get`] reads them, in
    /// the listing's order; items that cannot be read are reported in the listing.
    fn get_many(
        &self,
        segments: &[String],
    ) -> impl Future<Output = Result<Listing, LedgerError>> + Send {
        async move {
            let mut listing = Listing::default();
            for segment in segments {
                match self.get(segment).await {
                    Ok(None) => {}
                    Ok(Some(entry)) => listing.entries.push(entry),
                    Err(e) => listing.note(Err(e))?,
                }
            }
            sort_entries(&mut listing.entries);
            Ok(listing)
        }
    }

    /// [`Ledger::scan`], failing on the first item that cannot be read: for callers
    /// that must see every entry (orphan cleanup deletes what no entry names).
    fn list(
        &self,
        state: Option<&str>,
        table: Option<&str>,
    ) -> impl Future<Output = Result<Vec<LedgerEntry>, LedgerError>> + Send {
        async move {
            let listing = self.scan(state, table).await?;
            match listing.unreadable.into_iter().next() {
                Some((segment, reason)) => Err(LedgerError::Corrupt { segment, reason }),
                None => Ok(listing.entries),
            }
        }
    }

    /// Notes that a conversion of `segment` begins at `now_ms`; returns the conversions
    /// of it that began before and have not ended ([`Ledger::end_attempt`]): still
    /// running in another process, or dead with their process (a crash, out of
    /// memory, a timeout). Only time tells them apart ([`Attempts::dead`]).
    fn begin_attempt(
        &self,
        segment: &str,
        now_ms: i64,
    ) -> impl Future<Output = Result<Attempts, LedgerError>> + Send;

    /// Notes that a conversion of `segment` ended, whatever its outcome: its unfinished
    /// attempts are forgotten.
    fn end_attempt(&self, segment: &str) -> impl Future<Output = Result<(), LedgerError>> + Send;

    /// Moves pending entries to committed, dropping their data file descriptions (the
    /// table holds them now, and committed entries must stay small); returns how many
    /// moved. Each moves only while it is still the conversion the caller committed:
    /// pending, with the same data files ([`LedgerEntry::stored_data_files`]). An
    /// entry dropped and converted again under the same key since the caller read it
    /// (a run whose gap filled) is a different conversion, and is left alone.
    fn mark_committed(
        &self,
        entries: &[&LedgerEntry],
        snapshot_id: i64,
        now_ms: i64,
    ) -> impl Future<Output = Result<usize, LedgerError>> + Send;

    /// Removes the entry of `segment` if it is in the state named `state`; returns
    /// whether it was (entries in another state are left alone).
    fn remove_in_state(
        &self,
        segment: &str,
        state: &str,
    ) -> impl Future<Output = Result<bool, LedgerError>> + Send;

    /// Removes a quarantined entry so that the segment is converted again (an operator's
    /// retry after a fix); returns whether it was there and quarantined (entries in
    /// another state are left alone).
    fn release_quarantined(
        &self,
        segment: &str,
    ) -> impl Future<Output = Result<bool, LedgerError>> + Send {
        self.remove_in_state(segment, "quarantined")
    }

    /// Removes a pending entry whose run can never be committed (it overlaps what
    /// another run committed): its segments past the watermark are converted again.
    /// Returns whether it was there and pending.
    fn discard_pending(
        &self,
        segment: &str,
    ) -> impl Future<Output = Result<bool, LedgerError>> + Send {
        self.remove_in_state(segment, "pending")
    }

    /// Moves a quarantined entry to skipped (an operator gives up its offsets, which the
    /// next commit records as a skipped gap); returns whether it was quarantined.
    fn skip_quarantined(
        &self,
        segment: &str,
        now_ms: i64,
    ) -> impl Future<Output = Result<bool, LedgerError>> + Send;
}

/// After a conditional insert found the segment taken: the entry that is there.
pub async fn existing_entry(
    ledger: &impl Ledger,
    segment: &str,
) -> Result<InsertOutcome, LedgerError> {
    match ledger.get(segment).await? {
        Some(existing) => Ok(InsertOutcome::Exists(Box::new(existing))),
        None => Err(LedgerError::Store {
            message: format!("{segment} exists by its insert condition but cannot be read"),
            kind: ErrorKind::Transient,
        }),
    }
}

/// Orders entries by table, partition and base offset, as `Ledger::list` returns them.
pub fn sort_entries(entries: &mut [LedgerEntry]) {
    entries.sort_by(|a, b| {
        (&a.table, a.partition, a.base_offset).cmp(&(&b.table, b.partition, b.base_offset))
    });
}

/// The paths of the files an entry names as stored: its data files and dead-letter
/// files, or, when its descriptions were spilled to object storage, the location they
/// were spilled to instead of the data files (`resolved_paths` reads them).
pub fn converted_paths(entry: &LedgerEntry) -> Vec<String> {
    let mut paths: Vec<String> = spilled_to(&entry.data_files)
        .map(str::to_owned)
        .into_iter()
        .collect();
    paths.extend(description_paths(
        entry.data_files.iter().chain(&entry.dead_letters.files),
    ));
    paths
}

/// Every path an entry names: [`converted_paths`], and the data files of spilled
/// descriptions, read back through `file_io`.
pub async fn resolved_paths(
    entry: &LedgerEntry,
    file_io: &iceberg::io::FileIO,
) -> iceberg::Result<Vec<String>> {
    let mut paths = converted_paths(entry);
    if spilled_to(&entry.data_files).is_some() {
        paths.extend(description_paths(
            resolve(&entry.data_files, file_io).await?.iter(),
        ));
    }
    Ok(paths)
}

/// The data files of `entry`'s table (not its dead letters'), as `table` reads them
/// (spilled descriptions read back): what its commit adds.
#[cfg(feature = "test-support")]
pub async fn pending_data_files(
    entry: &LedgerEntry,
    table: &iceberg::table::Table,
) -> iceberg::Result<Vec<iceberg::spec::DataFile>> {
    let descriptions = resolve(&entry.data_files, table.file_io()).await?;
    descriptions
        .iter()
        .map(|json| files::from_ledger(json, table.metadata()).map(|(file, _)| file))
        .collect()
}

/// The `file_path` of each data file description (a pointer names none).
pub(crate) fn description_paths<'a>(descriptions: impl Iterator<Item = &'a String>) -> Vec<String> {
    descriptions
        .filter_map(|file| {
            serde_json::from_str::<serde_json::Value>(file)
                .ok()?
                .get("file_path")?
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

#[cfg(test)]
mod attempt_tests {
    use super::Attempts;
    use std::time::Duration;

    #[test]
    fn only_old_unfinished_attempts_are_dead() {
        let minute = Duration::from_secs(60);
        let at = |unfinished, last_began_ms| Attempts {
            unfinished,
            last_began_ms: Some(last_began_ms),
        };
        // Three conversions running beside this one right now: not dead.
        assert!(!at(3, 1_000).dead(3, minute, 2_000));
        // Three that began long ago and never ended: dead.
        assert!(at(3, 1_000).dead(3, minute, 1_000 + 61_000));
        // Two are not enough, and nothing began: not dead.
        assert!(!at(2, 0).dead(3, minute, 1_000_000));
        assert!(!Attempts::default().dead(0, minute, 1_000_000));
    }
}

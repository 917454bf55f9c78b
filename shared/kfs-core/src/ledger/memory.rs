//! The in-memory ledger: unit tests and fault injection.

use super::{
    Attempts, EntryState, InsertOutcome, Ledger, LedgerEntry, LedgerError, Listing, WorkKey,
    sort_entries,
};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// An in-memory ledger for unit tests and fault injection.
#[derive(Debug, Default)]
pub struct MemoryLedger {
    entries: Mutex<BTreeMap<String, LedgerEntry>>,
    attempts: Mutex<BTreeMap<String, Attempts>>,
}

impl MemoryLedger {
    fn with<T>(
        &self,
        f: impl FnOnce(&mut BTreeMap<String, LedgerEntry>) -> T,
    ) -> Result<T, LedgerError> {
        let mut guard = self.entries.lock().map_err(|_| LedgerError::Store {
            message: "memory ledger lock poisoned".into(),
            kind: kfs_catalog::fault::ErrorKind::Transient,
        })?;
        Ok(f(&mut guard))
    }
}

impl Ledger for MemoryLedger {
    fn identity(&self) -> String {
        format!("memory:{:p}", self)
    }

    async fn get(&self, segment: &str) -> Result<Option<LedgerEntry>, LedgerError> {
        self.with(|m| m.get(segment).cloned())
    }

    async fn insert(&self, entry: &LedgerEntry) -> Result<InsertOutcome, LedgerError> {
        self.with(|m| match m.get(&entry.segment) {
            Some(existing) => InsertOutcome::Exists(Box::new(existing.clone())),
            None => {
                m.insert(entry.segment.clone(), entry.clone());
                InsertOutcome::Inserted
            }
        })
    }

    async fn work_keys(&self, state: &str, table: &str) -> Result<Vec<WorkKey>, LedgerError> {
        let mut keys = self.with(|m| {
            m.values()
                .filter(|e| e.state.name() == state && e.table == table)
                .map(|e| WorkKey {
                    segment: e.segment.clone(),
                    partition: e.partition,
                    base_offset: e.base_offset,
                })
                .collect::<Vec<_>>()
        })?;
        keys.sort_by_key(|k| (k.partition, k.base_offset));
        Ok(keys)
    }

    async fn scan(&self, state: Option<&str>, table: Option<&str>) -> Result<Listing, LedgerError> {
        let mut out = self.with(|m| {
            m.values()
                .filter(|e| {
                    state.is_none_or(|s| e.state.name() == s) && table.is_none_or(|t| e.table == t)
                })
                .cloned()
                .collect::<Vec<_>>()
        })?;
        sort_entries(&mut out);
        Ok(Listing {
            entries: out,
            unreadable: Vec::new(),
        })
    }

    async fn begin_attempt(&self, segment: &str, now_ms: i64) -> Result<Attempts, LedgerError> {
        let mut attempts = self.attempts.lock().map_err(|_| LedgerError::Store {
            message: "memory ledger lock poisoned".into(),
            kind: kfs_catalog::fault::ErrorKind::Transient,
        })?;
        let current = attempts.entry(segment.to_owned()).or_default();
        let before = *current;
        *current = Attempts {
            unfinished: before.unfinished.saturating_add(1),
            last_began_ms: Some(now_ms),
        };
        Ok(before)
    }

    async fn end_attempt(&self, segment: &str) -> Result<(), LedgerError> {
        let mut attempts = self.attempts.lock().map_err(|_| LedgerError::Store {
            message: "memory ledger lock poisoned".into(),
            kind: kfs_catalog::fault::ErrorKind::Transient,
        })?;
        attempts.remove(segment);
        Ok(())
    }

    async fn mark_committed(
        &self,
        entries: &[&LedgerEntry],
        snapshot_id: i64,
        now_ms: i64,
    ) -> Result<usize, LedgerError> {
        self.with(|m| {
            let mut moved = 0;
            for committed in entries {
                if let Some(entry) = m.get_mut(&committed.segment)
                    && entry.state == EntryState::Pending
                    && entry.data_files == committed.data_files
                {
                    entry.state = EntryState::Committed { snapshot_id };
                    entry.updated_ms = now_ms;
                    entry.data_files.clear();
                    moved += 1;
                }
            }
            moved
        })
    }

    async fn remove_in_state(&self, segment: &str, state: &str) -> Result<bool, LedgerError> {
        self.with(|m| {
            let found = m.get(segment).is_some_and(|e| e.state.name() == state);
            if found {
                m.remove(segment);
            }
            found
        })
    }

    async fn skip_quarantined(&self, segment: &str, now_ms: i64) -> Result<bool, LedgerError> {
        self.with(|m| match m.get_mut(segment) {
            Some(entry) => match &entry.state {
                EntryState::Quarantined { error } => {
                    entry.state = EntryState::Skipped {
                        error: error.clone(),
                    };
                    entry.updated_ms = now_ms;
                    true
                }
                _ => false,
            },
            None => false,
        })
    }
}

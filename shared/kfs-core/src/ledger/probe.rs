//! A ledger seen through a test's probe: every call goes to the real ledger, unless
//! the probe, which sees it first, does something else with it (counts it, fails it,
//! answers from an older view, lets another process act before it). One delegation
//! for every test that wraps a ledger; behind the `test-support` feature.

use std::future::Future;

use super::{Attempts, InsertOutcome, Ledger, LedgerEntry, LedgerError, Listing, WorkKey};

/// What a test does around the calls of a wrapped ledger: each method receives the
/// real ledger and, unless overridden, passes the call to it.
pub trait Probe<L: Ledger>: Send + Sync {
    /// [`Ledger::get`].
    fn get(
        &self,
        inner: &L,
        segment: &str,
    ) -> impl Future<Output = Result<Option<LedgerEntry>, LedgerError>> + Send {
        inner.get(segment)
    }
    /// [`Ledger::insert`].
    fn insert(
        &self,
        inner: &L,
        entry: &LedgerEntry,
    ) -> impl Future<Output = Result<InsertOutcome, LedgerError>> + Send {
        inner.insert(entry)
    }
    /// [`Ledger::scan`].
    fn scan(
        &self,
        inner: &L,
        state: Option<&str>,
        table: Option<&str>,
    ) -> impl Future<Output = Result<Listing, LedgerError>> + Send {
        inner.scan(state, table)
    }
    /// [`Ledger::work_keys`].
    fn work_keys(
        &self,
        inner: &L,
        state: &str,
        table: &str,
    ) -> impl Future<Output = Result<Vec<WorkKey>, LedgerError>> + Send {
        inner.work_keys(state, table)
    }
    /// [`Ledger::get_many`].
    fn get_many(
        &self,
        inner: &L,
        segments: &[String],
    ) -> impl Future<Output = Result<Listing, LedgerError>> + Send {
        inner.get_many(segments)
    }
    /// [`Ledger::begin_attempt`].
    fn begin_attempt(
        &self,
        inner: &L,
        segment: &str,
        now_ms: i64,
    ) -> impl Future<Output = Result<Attempts, LedgerError>> + Send {
        inner.begin_attempt(segment, now_ms)
    }
    /// [`Ledger::end_attempt`].
    fn end_attempt(
        &self,
        inner: &L,
        segment: &str,
    ) -> impl Future<Output = Result<(), LedgerError>> + Send {
        inner.end_attempt(segment)
    }
    /// [`Ledger::mark_committed`].
    fn mark_committed(
        &self,
        inner: &L,
        entries: &[&LedgerEntry],
        snapshot_id: i64,
        now_ms: i64,
    ) -> impl Future<Output = Result<usize, LedgerError>> + Send {
        inner.mark_committed(entries, snapshot_id, now_ms)
    }
    /// [`Ledger::remove_in_state`].
    fn remove_in_state(
        &self,
        inner: &L,
        segment: &str,
        state: &str,
    ) -> impl Future<Output = Result<bool, LedgerError>> + Send {
        inner.remove_in_state(segment, state)
    }
    /// [`Ledger::skip_quarantined`].
    fn skip_quarantined(
        &self,
        inner: &L,
        segment: &str,
        now_ms: i64,
    ) -> impl Future<Output = Result<bool, LedgerError>> + Send {
        inner.skip_quarantined(segment, now_ms)
    }
}

/// The ledger `inner` seen through `probe`.
pub struct Probed<'a, L, P> {
    /// The real ledger.
    pub inner: &'a L,
    /// What the test does around its calls.
    pub probe: P,
}

impl<L: Ledger, P: Probe<L>> Ledger for Probed<'_, L, P> {
    fn identity(&self) -> String {
        self.inner.identity()
    }
    fn get(
        &self,
        segment: &str,
    ) -> impl Future<Output = Result<Option<LedgerEntry>, LedgerError>> + Send {
        self.probe.get(self.inner, segment)
    }
    fn insert(
        &self,
        entry: &LedgerEntry,
    ) -> impl Future<Output = Result<InsertOutcome, LedgerError>> + Send {
        self.probe.insert(self.inner, entry)
    }
    fn scan(
        &self,
        state: Option<&str>,
        table: Option<&str>,
    ) -> impl Future<Output = Result<Listing, LedgerError>> + Send {
        self.probe.scan(self.inner, state, table)
    }
    fn work_keys(
        &self,
        state: &str,
        table: &str,
    ) -> impl Future<Output = Result<Vec<WorkKey>, LedgerError>> + Send {
        self.probe.work_keys(self.inner, state, table)
    }
    fn get_many(
        &self,
        segments: &[String],
    ) -> impl Future<Output = Result<Listing, LedgerError>> + Send {
        self.probe.get_many(self.inner, segments)
    }
    fn begin_attempt(
        &self,
        segment: &str,
        now_ms: i64,
    ) -> impl Future<Output = Result<Attempts, LedgerError>> + Send {
        self.probe.begin_attempt(self.inner, segment, now_ms)
    }
    fn end_attempt(&self, segment: &str) -> impl Future<Output = Result<(), LedgerError>> + Send {
        self.probe.end_attempt(self.inner, segment)
    }
    fn mark_committed(
        &self,
        entries: &[&LedgerEntry],
        snapshot_id: i64,
        now_ms: i64,
    ) -> impl Future<Output = Result<usize, LedgerError>> + Send {
        self.probe
            .mark_committed(self.inner, entries, snapshot_id, now_ms)
    }
    fn remove_in_state(
        &self,
        segment: &str,
        state: &str,
    ) -> impl Future<Output = Result<bool, LedgerError>> + Send {
        self.probe.remove_in_state(self.inner, segment, state)
    }
    fn skip_quarantined(
        &self,
        segment: &str,
        now_ms: i64,
    ) -> impl Future<Output = Result<bool, LedgerError>> + Send {
        self.probe.skip_quarantined(self.inner, segment, now_ms)
    }
}

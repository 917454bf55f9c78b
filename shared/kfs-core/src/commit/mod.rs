//! The committer core, per table: plan (with `kfs_plan::commit`), append the pending
//! data files in one snapshot whose summary carries the full offset map, verify that
//! the commit landed, and mark the ledger entries committed. The cycle's stages are in
//! `cycle`, the append in `append`, what the table already settled in `recover`; the
//! snapshots iceberg-rust has no action for are built in `replace` (compaction's) and
//! `row_delta` (merge-on-read deletes beside added rows).
//!
//! Exactly once comes from the table, not from locks: the plan starts at the
//! watermarks of the current snapshot; a conflicting commit re-reads the table and
//! re-plans (dropping whatever the new watermarks cover) before trying again; an
//! unknown outcome is resolved by looking for the commit's id in the table's history,
//! never by deleting files.

mod append;
mod coalesce;
mod cycle;
mod manifest;
mod outcome;
mod recover;
pub(crate) mod replace;
mod row_delta;
mod sidecars;
mod summary;

pub(crate) use append::{Appended, append_and_verify};
pub use cycle::commit_table;
pub use outcome::{CommitError, CommitOutcome, CommitSettings};
pub use replace::StagedReplace;
pub(crate) use replace::carried_properties;
pub use row_delta::{RowDelta, stage_row_delta};

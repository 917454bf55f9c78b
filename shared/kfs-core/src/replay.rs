//! Replaying dead letters (`kfs-iceberg dead-letters replay`): the rows of a registry
//! table's dead-letter table refused for a reason that may pass (an id the registry
//! did not know, a reference it did not hold, a schema past a segment's lookup cap)
//! are decoded again, as their segment's conversion would, and the records that now
//! decode are appended to their table.
//!
//! **Exactly once.** A replayed record is a row of the table at its `(partition,
//! offset)`, and nothing else writes rows there: the pipeline appends only offsets
//! past the table's watermarks, and a dead letter's offset is below them (its segment
//! was committed). So the table's own rows are the record of what was replayed; no
//! separate state can disagree with them. Each attempt reads the table at one
//! snapshot S, leaves out every dead letter whose `(partition, offset)` S holds,
//! converts the rest, and appends them pinned to S (the catalog refuses the swap
//! unless `main` is still at S). Then:
//! - another replay (or any commit) landing first makes the pinned append fail: the
//!   attempt re-reads the table and leaves out what the winner appended;
//! - a crash before the swap leaves only unreferenced files (orphan cleanup's);
//! - a crash after it, or a second replay, finds the rows in the table: nothing is
//!   appended again;
//! - compaction rewrites rows but never drops or adds one, and snapshot expiry
//!   removes no live row, so neither changes what the check sees.
//!
//! A dead letter is *replayed* when its table holds its `(partition, offset)`; the
//! dead-letter row stays (the dead-letter table is append-only history), and the
//! replay's snapshot records how many it appended and from which table
//! ([`REPLAYED_KEY`], [`REPLAYED_FROM_KEY`]).

use std::collections::{BTreeMap, BTreeSet};

use crate::error::PipelineError;
use crate::table::table_ident;
use kfs_catalog::catalog::CatalogAccess;
use kfs_plan::naming::TableName;
use kfs_segment::OwnedRecord;

#[path = "replay_rows.rs"]
mod rows;

/// Summary key of a replay's snapshot: the dead letters it appended.
pub const REPLAYED_KEY: &str = "kfs.replayed-records";

/// Summary key of a replay's snapshot: the dead-letter table they came from.
pub const REPLAYED_FROM_KEY: &str = "kfs.replayed-from";

/// Attempts of a replay's append raced by other commits before it gives up.
const ATTEMPTS: usize = 5;

/// What a replay did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReplayReport {
    /// Dead letters whose reason may pass.
    pub retryable: u64,
    /// Of those, already in the table (replayed before).
    pub present: u64,
    /// Appended to the table now.
    pub replayed: u64,
    /// Decoded again and still refused (they stay dead letters).
    pub still_refused: u64,
}

/// Whether a dead letter's `reason` may pass: the registry did not know its schema
/// (or a schema it references), or its segment named too many schemas to look it up.
pub fn retryable_reason(reason: &str) -> bool {
    let reason = reason.strip_prefix("key: ").unwrap_or(reason);
    reason.starts_with("schema ")
        && (reason.contains("is not in the schema registry")
            || reason.contains("was not looked up"))
}

/// Replays the retryable dead letters of the registry table `name` (see the module's
/// documentation), reading their schemas with `schemas`.
pub async fn replay_dead_letters(
    access: CatalogAccess<'_>,
    name: &TableName,
    schemas: std::sync::Arc<crate::convert::RegistrySchemas>,
) -> Result<ReplayReport, PipelineError> {
    let catalog = access.catalog;
    let catalog_error = |table: &TableName, source: iceberg::Error| PipelineError::Catalog {
        table: table.to_string(),
        source: Box::new(source),
    };
    let dlq_name = name.dead_letters();
    let dlq_ident = table_ident(&dlq_name);
    let mut report = ReplayReport::default();
    if !catalog
        .table_exists(&dlq_ident)
        .await
        .map_err(|e| catalog_error(&dlq_name, e))?
    {
        return Ok(report);
    }
    let dlq = catalog
        .load_table(&dlq_ident)
        .await
        .map_err(|e| catalog_error(&dlq_name, e))?;
    let letters = rows::read_dead_letters(&dlq)
        .await
        .map_err(|e| catalog_error(&dlq_name, e))?;
    let letters: Vec<rows::DeadLetter> = letters
        .into_iter()
        .filter(|letter| retryable_reason(&letter.reason))
        .collect();
    report.retryable = letters.len() as u64;
    if letters.is_empty() {
        return Ok(report);
    }
    for _ in 0..ATTEMPTS {
        let table = catalog
            .load_table(&table_ident(name))
            .await
            .map_err(|e| catalog_error(name, e))?;
        // A mirror keeping its change log: the log would not get the replayed records.
        if crate::table::mode_of(&table).is_ok_and(|mode| mode.change_log) {
            return Err(PipelineError::Config(format!(
                "table {name} keeps its change log ({}): replaying its dead letters is not built for it (the log would miss them); they stay in {dlq_name}",
                kfs_plan::mode::CHANGE_LOG_PROPERTY
            )));
        }
        let present = rows::present_offsets(&table, &letters)
            .await
            .map_err(|e| catalog_error(name, e))?;
        let todo = records_to_replay(&letters, &present);
        report.present = present.len() as u64;
        if todo.is_empty() {
            return Ok(report);
        }
        let checked = table.metadata().current_snapshot_id();
        let target = rows::target(name, table, schemas.clone())?;
        let (files, records, refused, table) = rows::convert(access, &target, todo).await?;
        // The conversion reads the table again (a schema it grew): the append is pinned
        // to that version, so it must be the snapshot whose rows were checked above,
        // or another replay's rows may have landed in between: check again. (Its files
        // are left to orphan cleanup.)
        if table.metadata().current_snapshot_id() != checked {
            continue;
        }
        if files.is_empty() {
            report.still_refused = refused;
            return Ok(report);
        }
        let commit_id = format!("replay-{}", uuid::Uuid::new_v4().simple());
        let mut properties = crate::commit::carried_properties(&table);
        properties.insert(
            kfs_plan::offsets::COMMIT_ID_KEY.to_owned(),
            commit_id.clone(),
        );
        properties.insert(REPLAYED_KEY.to_owned(), records.to_string());
        properties.insert(REPLAYED_FROM_KEY.to_owned(), dlq_name.to_string());
        let mode = crate::table::mode_of(&table).map_err(|e| catalog_error(name, e))?;
        match crate::commit::append_and_verify(access, &table, &mode, files, properties, &commit_id)
            .await
            .map_err(|e| catalog_error(name, e))?
        {
            crate::commit::Appended::Landed(..) => {
                report.replayed = records;
                report.still_refused = refused;
                return Ok(report);
            }
            // Another commit came first: read the table again.
            crate::commit::Appended::Replan(_) => continue,
        }
    }
    Err(catalog_error(
        name,
        iceberg::Error::new(
            iceberg::ErrorKind::CatalogCommitConflicts,
            format!("the replay lost {ATTEMPTS} races to other commits"),
        )
        .with_retryable(true),
    ))
}

/// The letters' records not in the table yet, once each (a record refused twice, its
/// segment converted again, is one record), grouped by topic and partition.
fn records_to_replay(
    letters: &[rows::DeadLetter],
    present: &BTreeSet<(i32, i64)>,
) -> BTreeMap<(String, i32), Vec<OwnedRecord>> {
    let mut todo: BTreeMap<(String, i32), Vec<OwnedRecord>> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for letter in letters {
        let at = (letter.partition, letter.record.offset);
        if present.contains(&at) || !seen.insert(at) {
            continue;
        }
        todo.entry((letter.topic.clone(), letter.partition))
            .or_default()
            .push(letter.record.clone());
    }
    todo
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_reasons_that_may_pass_are_retryable() {
        for reason in [
            "schema id 7 is not in the schema registry (asked 3 times)",
            "key: schema id 7 is not in the schema registry (asked 3 times)",
            "schema id 7 references subject s version 2, which is not in the schema registry (asked 3 times)",
            "schema id 9 was not looked up: the segment names more than 100 distinct schemas, the most one segment's records may name",
        ] {
            assert!(retryable_reason(reason), "{reason}");
        }
        for reason in [
            "value does not start with the schema registry's magic byte 0",
            "schema id 7: payload does not decode",
            "schema id 4 cannot be written to table t: id is string",
        ] {
            assert!(!retryable_reason(reason), "{reason}");
        }
    }
}

//! Committing a table's dead letters: the dead-letter files of committed entries
//! appended to `<table>__dlq`, exactly once, through the same pinned append.

use super::append::{Appended, append_and_verify};
use super::outcome::{CommitError, CommitSettings};
use super::recover::pending_segment;
use crate::ledger::LedgerEntry;
use crate::table::table_ident;
use crate::table::table_watermarks;
use kfs_catalog::catalog::CatalogAccess;
use kfs_plan::commit::{CommitPlan, PendingSegment, plan_dead_letters};
use kfs_plan::naming::TableName;
use std::collections::HashMap;

/// Commits the dead letters of the segments `plan` takes to the table's dead-letter
/// table ([`plan_dead_letters`]), unless they are there already; a no-op when none
/// has any. The snapshot carries the offset map and `commit_id` like the table's.
/// Returns the dead letters committed.
pub(crate) async fn commit_dead_letters(
    access: CatalogAccess<'_>,
    name: &TableName,
    topic: &str,
    plan: &CommitPlan,
    entries: &HashMap<&str, &LedgerEntry>,
    settings: &CommitSettings,
    commit_id: &str,
) -> Result<u64, CommitError> {
    let taken: Vec<PendingSegment> = plan
        .take
        .iter()
        .filter_map(|segment| entries.get(segment.id.as_str()))
        .map(|entry| PendingSegment {
            records: entry.dead_letters.records,
            segments: entry.segments() as u64,
            inner_gaps: entry.inner_gaps(),
            ..pending_segment(entry)
        })
        .collect();
    if taken.iter().all(|segment| segment.records == 0) {
        return Ok(0);
    }
    let dead_letter_name = name.dead_letters();
    let table_name = dead_letter_name.to_string();
    let catalog_error = |source: iceberg::Error| CommitError::Catalog {
        table: table_name.clone(),
        source: Box::new(source),
    };
    let ident = table_ident(&dead_letter_name);
    let mut table = access
        .catalog
        .load_table(&ident)
        .await
        .map_err(catalog_error)?;
    for _ in 0..settings.max_attempts {
        let watermarks = table_watermarks(&table).map_err(|source| CommitError::Progress {
            table: table_name.clone(),
            source,
        })?;
        let dead_letters = plan_dead_letters(&watermarks, &taken);
        if dead_letters.take.is_empty() {
            return Ok(0);
        }
        let metadata = table.metadata();
        let mut files = Vec::new();
        for segment in &dead_letters.take {
            let Some(entry) = entries.get(segment.id.as_str()) else {
                continue;
            };
            for json in &entry.dead_letters.files {
                files.push(
                    crate::ledger::from_ledger(json, metadata)
                        .map(|(file, _)| file)
                        .map_err(|source| CommitError::DataFile {
                            table: table_name.clone(),
                            segment: segment.id.clone(),
                            source: Box::new(source),
                        })?,
                );
            }
        }
        let mut summary = dead_letters.summary(topic, &[]);
        summary.commit_id = commit_id.to_owned();
        // A dead-letter table is a log, whatever its table's mode.
        let log = kfs_plan::mode::ModeSetting::default();
        match append_and_verify(access, &table, &log, files, summary.properties(), commit_id)
            .await
            .map_err(catalog_error)?
        {
            Appended::Landed(..) => return Ok(dead_letters.records()),
            Appended::Replan(moved) => table = moved,
        }
    }
    Err(CommitError::Contended {
        table: table_name,
        attempts: settings.max_attempts,
    })
}

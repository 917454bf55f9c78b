//! Committing a table's sidecars, each before the table's own commit and exactly once
//! by its own offset map, through the same pinned append: its dead letters (the
//! dead-letter files of the entries committed, appended to `<table>__dlq`) and a
//! mirror's change log (the rows of the entries' data files written again in
//! `<table>__changes` and appended there: every record the mirror mirrors).

use super::append::{Appended, append_and_verify};
use super::outcome::{CommitError, CommitSettings};
use super::recover::pending_segment;
use crate::ledger::LedgerEntry;
use crate::table::table_ident;
use crate::table::table_watermarks;
use iceberg::spec::DataFile;
use iceberg::table::Table;
use kfs_catalog::catalog::CatalogAccess;
use kfs_plan::commit::{CommitPlan, PendingSegment, plan_sidecar};
use kfs_plan::naming::TableName;
use kfs_plan::offsets::OffsetMap;
use std::collections::HashMap;

/// A table beside the table committed, fed by the same segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sidecar {
    /// `<table>__dlq`: the records the converter could not write.
    DeadLetters,
    /// `<table>__changes`: a mirror's change log.
    ChangeLog,
}

/// What a sidecar's commit reads: the table committed (`name`, `table` as planned)
/// and its topic, the plan, its entries, the settings and the commit's id.
pub(crate) struct SidecarInput<'a> {
    pub name: &'a TableName,
    pub table: &'a Table,
    pub topic: &'a str,
    pub plan: &'a CommitPlan,
    pub entries: &'a HashMap<&'a str, &'a LedgerEntry>,
    pub settings: &'a CommitSettings,
    pub commit_id: &'a str,
}

impl Sidecar {
    /// The sidecar of the table `name`.
    fn name_of(self, name: &TableName) -> TableName {
        match self {
            Self::DeadLetters => name.dead_letters(),
            Self::ChangeLog => name.change_log(),
        }
    }

    /// The records an entry brings the sidecar.
    fn records(self, entry: &LedgerEntry) -> u64 {
        match self {
            Self::DeadLetters => entry.dead_letters.records,
            Self::ChangeLog => entry.records,
        }
    }

    /// The sidecar table: the dead-letter table the converter made, or the change log
    /// (made on first use, its schema brought to the mirror's).
    async fn open(
        self,
        access: CatalogAccess<'_>,
        input: &SidecarInput<'_>,
    ) -> iceberg::Result<Table> {
        match self {
            Self::DeadLetters => {
                let ident = table_ident(&self.name_of(input.name));
                access.catalog.load_table(&ident).await
            }
            Self::ChangeLog => {
                crate::table::ensure_change_log_table(
                    access.catalog,
                    access.swap,
                    input.name,
                    input.table,
                )
                .await
            }
        }
    }

    /// The files `entry` brings the sidecar `sidecar` (as planned on, at
    /// `watermarks`), written for it: the dead letters as the converter wrote them, or
    /// the rows of the entry's data files the change log does not hold yet, written
    /// again under it (named after the commit, unique to this attempt).
    async fn files_of(
        self,
        entry: &LedgerEntry,
        (input, sidecar, watermarks): (&SidecarInput<'_>, &Table, &OffsetMap),
    ) -> iceberg::Result<Vec<DataFile>> {
        let mut files = Vec::new();
        match self {
            Self::DeadLetters => {
                for json in &entry.dead_letters.files {
                    files.push(crate::ledger::from_ledger(json, sidecar.metadata())?.0);
                }
            }
            Self::ChangeLog => {
                // Below its watermark the log may hold some of the entry's rows (a run
                // taken before the mirror's commit failed, now cut otherwise).
                let held = match watermarks.get(&entry.partition) {
                    Some(&next) if entry.base_offset < next => {
                        let high = entry.last_offset.min(next - 1);
                        let mut held =
                            crate::table::offsets_between(sidecar, entry.base_offset, high).await?;
                        held.retain(|(partition, _)| *partition == entry.partition);
                        held
                    }
                    _ => std::collections::BTreeSet::new(),
                };
                for (index, json) in entry.data_files.iter().enumerate() {
                    let (file, _) = crate::ledger::from_ledger(json, input.table.metadata())?;
                    crate::table::check_columns(sidecar, &file)?;
                    let stem = format!(
                        "changes-{}-{index}-{}",
                        input.commit_id,
                        crate::convert::write_token()
                    );
                    let written =
                        crate::convert::rewrite_in_default_spec(sidecar, &file, stem, &held)
                            .await?;
                    files.extend(written.into_iter().filter(|f| f.record_count() > 0));
                }
            }
        }
        Ok(files)
    }
}

/// Commits what the segments `input.plan` takes bring the sidecar `sidecar`, unless it
/// holds them already ([`plan_sidecar`]: a segment whose offsets the dead-letter
/// table's offset map covers is taken nowhere again; the change log takes it and
/// leaves out the rows it holds); a no-op when none brings any record. The snapshot
/// carries the sidecar's offset map and the commit's id. Returns the records committed.
pub(crate) async fn commit_sidecar(
    sidecar: Sidecar,
    access: CatalogAccess<'_>,
    input: &SidecarInput<'_>,
) -> Result<u64, CommitError> {
    let taken: Vec<PendingSegment> = input
        .plan
        .take
        .iter()
        .filter_map(|segment| input.entries.get(segment.id.as_str()))
        .map(|entry| PendingSegment {
            records: sidecar.records(entry),
            segments: entry.segments() as u64,
            inner_gaps: entry.inner_gaps(),
            ..pending_segment(entry)
        })
        .collect();
    if taken.iter().all(|segment| segment.records == 0) {
        return Ok(0);
    }
    let table_name = sidecar.name_of(input.name).to_string();
    let catalog_error = |source: iceberg::Error| CommitError::Catalog {
        table: table_name.clone(),
        source: Box::new(source),
    };
    let mut table = sidecar.open(access, input).await.map_err(catalog_error)?;
    for _ in 0..input.settings.max_attempts {
        let watermarks = table_watermarks(&table).map_err(|source| CommitError::Progress {
            table: table_name.clone(),
            source,
        })?;
        let planned = plan_sidecar(&watermarks, &taken, sidecar == Sidecar::ChangeLog);
        if planned.take.is_empty() {
            return Ok(0);
        }
        let mut files = Vec::new();
        for segment in &planned.take {
            let Some(entry) = input.entries.get(segment.id.as_str()) else {
                continue;
            };
            files.extend(
                sidecar
                    .files_of(entry, (input, &table, &watermarks))
                    .await
                    .map_err(|source| match source.kind() {
                        // The log lags the file's columns: the next attempt follows.
                        iceberg::ErrorKind::CatalogCommitConflicts => catalog_error(source),
                        _ => CommitError::DataFile {
                            table: table_name.clone(),
                            segment: segment.id.clone(),
                            source: Box::new(source),
                        },
                    })?,
            );
        }
        // Every row held already (a retry after the log's commit landed).
        if files.is_empty() && planned.offsets == watermarks {
            return Ok(0);
        }
        let records: u64 = files.iter().map(DataFile::record_count).sum();
        let mut summary = planned.summary(input.topic, &[]);
        summary.commit_id = input.commit_id.to_owned();
        // A sidecar is a log, whatever its table's mode.
        let log = kfs_plan::mode::ModeSetting::default();
        match append_and_verify(
            access,
            &table,
            &log,
            files,
            summary.properties(),
            input.commit_id,
        )
        .await
        .map_err(catalog_error)?
        {
            Appended::Landed(..) => return Ok(records),
            Appended::Replan(moved) => table = moved,
        }
    }
    Err(CommitError::Contended {
        table: table_name,
        attempts: input.settings.max_attempts,
    })
}

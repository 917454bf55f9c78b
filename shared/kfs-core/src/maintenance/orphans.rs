//! Orphan cleanup: files under the table that no snapshot and no pending ledger entry
//! references, older than the given age. The pending files are read from the ledger
//! before the table is: a commit that lands in between turns pending files into
//! referenced ones, never into unprotected ones. It refuses an age below
//! [`MIN_ORPHAN_AGE`] (files being written are young) unless forced, and a table whose
//! pending files are recorded in another ledger than the one it reads.

use super::MaintenanceError;
use super::expire::reachable;
use crate::failpoint::delete_file;
use crate::ledger::Ledger;
use crate::source::{OpendalSource, SegmentSource};
use crate::table::LEDGER_PROPERTY;
use iceberg::{Catalog, TableIdent};
use std::collections::HashSet;

/// What an orphan cleanup did (or, dry, would do).
#[derive(Debug, Clone, Default)]
pub struct OrphanReport {
    /// Files under the table location.
    pub listed: usize,
    /// Unreferenced files old enough, deleted (or to delete).
    pub orphans: Vec<String>,
    /// Unreferenced files younger than the window, kept.
    pub too_young: usize,
}

/// The youngest an orphan may be without `force`: longer than any file takes to be
/// written and recorded as pending.
pub const MIN_ORPHAN_AGE: std::time::Duration = std::time::Duration::from_secs(3600);

/// Which unreferenced files an orphan cleanup deletes.
#[derive(Debug, Clone, Copy)]
pub struct OrphanRule {
    /// Only files older than this.
    pub older_than: std::time::Duration,
    /// Now (Unix ms).
    pub now_ms: i64,
    /// Allow `older_than` below [`MIN_ORPHAN_AGE`], and a table that records no ledger
    /// or another one than the ledger given.
    pub force: bool,
    /// Only list what would be deleted.
    pub dry_run: bool,
}

/// Deletes files under the table's location that no snapshot, no metadata file in
/// the log and no pending ledger entry references, and that are older than
/// `rule.older_than`. With `rule.dry_run`, only lists them.
pub async fn remove_orphans(
    catalog: &dyn Catalog,
    ledger: &impl Ledger,
    ident: &TableIdent,
    s3: &crate::storage::S3Settings,
    rule: &OrphanRule,
) -> Result<OrphanReport, MaintenanceError> {
    let name = ident.to_string();
    let refused = |reason: String| MaintenanceError::Refused {
        table: name.clone(),
        reason,
    };
    if rule.older_than < MIN_ORPHAN_AGE && !rule.force {
        return Err(refused(format!(
            "an orphan age of {:?} is below the floor of {:?}: files still being written would be deleted (force it only when nothing writes the table)",
            rule.older_than, MIN_ORPHAN_AGE
        )));
    }
    let older_than_ms = rule
        .now_ms
        .saturating_sub(i64::try_from(rule.older_than.as_millis()).unwrap_or(i64::MAX));
    let iceberg = |source: iceberg::Error| MaintenanceError::Iceberg {
        table: name.clone(),
        source: Box::new(source),
    };
    let listing = |source| MaintenanceError::Listing {
        table: name.clone(),
        source,
    };
    // The ledger first: whatever it lists as pending now is either still pending or
    // in a snapshot of the table read after it.
    let mut referenced: HashSet<String> = HashSet::new();
    let mut pending_entries = Vec::new();
    // A dead-letter table's pending files are in its parent table's ledger entries.
    let parent = kfs_plan::naming::TableName::parse(&name)
        .and_then(|table| table.dead_letter_parent())
        .map(|parent| parent.to_string());
    for ledger_table in std::iter::once(&name).chain(parent.as_ref()) {
        let pending = ledger
            .list(Some("pending"), Some(ledger_table))
            .await
            .map_err(|source| MaintenanceError::Ledger {
                table: name.clone(),
                source,
            })?;
        pending_entries.extend(pending);
    }
    let table = catalog.load_table(ident).await.map_err(iceberg)?;
    for entry in &pending_entries {
        // Spilled descriptions are read back: an unreadable one stops the cleanup.
        referenced.extend(
            crate::ledger::resolved_paths(entry, table.file_io())
                .await
                .map_err(iceberg)?,
        );
    }
    super::ensure_ours(&table)?;
    // A dead-letter table created before ledgers were recorded: its parent's.
    let recorded = match (table.metadata().properties().get(LEDGER_PROPERTY), &parent) {
        (Some(recorded), _) => Some(recorded.clone()),
        (None, Some(parent)) => match kfs_plan::naming::TableName::parse(parent) {
            Some(parent) => catalog
                .load_table(&crate::table::table_ident(&parent))
                .await
                .map_err(iceberg)?
                .metadata()
                .properties()
                .get(LEDGER_PROPERTY)
                .cloned(),
            None => None,
        },
        (None, None) => None,
    };
    let recorded = recorded.as_ref();
    if recorded != Some(&ledger.identity()) && !rule.force {
        return Err(refused(match recorded {
            Some(recorded) => format!(
                "its pending files are recorded in ledger {recorded}, and this cleanup reads {}: run it where that ledger is",
                ledger.identity()
            ),
            None => format!(
                "it records no ledger ({LEDGER_PROPERTY}; the next conversion of its topic records one), so its pending files cannot be seen"
            ),
        }));
    }
    let metadata = table.metadata();
    referenced.extend(
        reachable(&table, metadata.snapshots().map(|s| s.snapshot_id()))
            .await
            .map_err(iceberg)?,
    );
    referenced.insert(
        table
            .metadata_location_result()
            .map_err(iceberg)?
            .to_owned(),
    );
    referenced.extend(
        metadata
            .metadata_log()
            .iter()
            .map(|m| m.metadata_file.clone()),
    );
    for statistics in metadata.statistics_iter() {
        referenced.insert(statistics.statistics_path.clone());
    }
    let location = metadata.location().trim_end_matches('/');
    let root = location.strip_prefix("file://").unwrap_or(location);
    let source = OpendalSource::from_location(root, s3).map_err(listing)?;
    let objects = source.list().await.map_err(listing)?;
    let mut report = OrphanReport {
        listed: objects.len(),
        ..OrphanReport::default()
    };
    for object in objects {
        let path = format!("{location}/{}", object.key);
        if referenced.contains(&path) {
            continue;
        }
        let modified = source
            .stat(&object.key)
            .await
            .map_err(listing)?
            .and_then(|o| o.modified_ms)
            .unwrap_or(i64::MAX);
        if modified >= older_than_ms {
            report.too_young += 1;
            continue;
        }
        report.orphans.push(path);
    }
    if !rule.dry_run {
        for path in &report.orphans {
            delete_file(table.file_io(), path).await.map_err(iceberg)?;
        }
    }
    Ok(report)
}

//! Orphan cleanup: files under the table that no snapshot and no pending ledger entry
//! references, older than the given age.

use super::MaintenanceError;
use super::expire::reachable;
use crate::failpoint::delete_file;
use crate::ledger::Ledger;
use crate::source::{OpendalSource, SegmentSource};
use iceberg::{Catalog, TableIdent};

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

/// Deletes files under the table's location that no snapshot, no metadata file in
/// the log and no pending ledger entry references, and that are older than
/// `older_than_ms` (Unix ms). With `dry_run`, only lists them.
pub async fn remove_orphans(
    catalog: &dyn Catalog,
    ledger: &impl Ledger,
    ident: &TableIdent,
    s3: &crate::storage::S3Settings,
    older_than_ms: i64,
    dry_run: bool,
) -> Result<OrphanReport, MaintenanceError> {
    let name = ident.to_string();
    let iceberg = |source: iceberg::Error| MaintenanceError::Iceberg {
        table: name.clone(),
        source: Box::new(source),
    };
    let listing = |source| MaintenanceError::Listing {
        table: name.clone(),
        source,
    };
    let table = catalog.load_table(ident).await.map_err(iceberg)?;
    let metadata = table.metadata();
    let mut referenced = reachable(&table, metadata.snapshots().map(|s| s.snapshot_id()))
        .await
        .map_err(iceberg)?;
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
        for entry in &pending {
            referenced.extend(crate::ledger::converted_paths(entry));
        }
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
    if !dry_run {
        for path in &report.orphans {
            delete_file(table.file_io(), path).await.map_err(iceberg)?;
        }
    }
    Ok(report)
}

//! Orphan cleanup: files under the table that no snapshot and no pending ledger entry
//! references, older than the given age. The pending files are read from the ledger
//! before the table is: a commit that lands in between turns pending files into
//! referenced ones, never into unprotected ones. It refuses an age below
//! [`MIN_ORPHAN_AGE`] (files being written are young) unless forced, a table whose
//! pending files are recorded in another ledger than the one it reads, a table with
//! `gc.enabled=false`, and a location it cannot keep to itself ([`super::confine`]):
//! outside the warehouse, holding another table's location, or holding another
//! table's root in its listing.

use super::MaintenanceError;
use super::confine::{MaintenanceStorage, Neighbours, nested_roots, normalize};
use super::expire::reachable;
use crate::ledger::{Ledger, LedgerEntry};
use crate::source::{OpendalSource, SegmentSource};
use crate::table::LEDGER_PROPERTY;
use iceberg::table::Table;
use iceberg::{Catalog, TableIdent};
use kfs_failpoint::delete_file;
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
    /// Unreferenced metadata files kept because they could not be read as this
    /// table's (another `table-uuid`, compressed, or not JSON).
    pub unverified: usize,
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

/// [`remove_orphans_among`] the tables of the table's own namespace.
pub async fn remove_orphans(
    catalog: &dyn Catalog,
    ledger: &impl Ledger,
    ident: &TableIdent,
    storage: &MaintenanceStorage,
    rule: &OrphanRule,
) -> Result<OrphanReport, MaintenanceError> {
    let neighbours = Neighbours::load(catalog, [ident.namespace().clone()]).await;
    remove_orphans_among(catalog, ledger, ident, storage, &neighbours, rule).await
}

/// Deletes files under the table's location that no snapshot, no metadata file in
/// the log, no statistics file and no pending ledger entry references, and that are
/// older than `rule.older_than`; with `rule.dry_run`, only lists them. Refuses a
/// location outside `storage.warehouse` or holding one of `neighbours` (or another
/// table's root found in the listing).
pub async fn remove_orphans_among(
    catalog: &dyn Catalog,
    ledger: &impl Ledger,
    ident: &TableIdent,
    storage: &MaintenanceStorage,
    neighbours: &Neighbours,
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
    let parent = kfs_plan::naming::TableName::parse(&name)
        .and_then(|table| table.dead_letter_parent())
        .map(|parent| parent.to_string());
    let pending_entries = pending(ledger, &name, parent.as_ref()).await?;
    let table = catalog.load_table(ident).await.map_err(iceberg)?;
    super::ensure_ours(&table)?;
    // gc.enabled=false: the files may be another table's too; no override.
    if let Some(off) = super::step_off(
        &name,
        table.metadata().properties(),
        super::MaintenanceStep::OrphanRemoval,
    )?
    .filter(|off| !off.overridable)
    {
        return Err(refused(format!("{off}: nothing is deleted")));
    }
    check_ledger(catalog, ledger, &table, parent.as_ref(), rule.force).await?;
    let location = normalize(table.metadata().location());
    neighbours.check(&name, &location, &storage.warehouse)?;
    let referenced = referenced(&table, &pending_entries)
        .await
        .map_err(iceberg)?;
    let root = location.strip_prefix("file://").unwrap_or(&location);
    let source = OpendalSource::from_location(root, &storage.s3).map_err(listing)?;
    let objects = source.list().await.map_err(listing)?;
    if let Some(nested) = nested_roots(objects.iter().map(|o| o.key.as_str()))
        .into_iter()
        .next()
    {
        return Err(refused(format!(
            "orphan cleanup: {location}/{nested} holds another table (its metadata is under {location}/{nested}/metadata/): its files would be taken for orphans; give each table a location of its own"
        )));
    }
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
        if is_metadata_file(&object.key) && !ours(&table, &path).await {
            report.unverified += 1;
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

/// The pending entries of `table` (and of its parent, for a dead-letter table, whose
/// pending files are in the parent's entries).
async fn pending(
    ledger: &impl Ledger,
    table: &str,
    parent: Option<&String>,
) -> Result<Vec<LedgerEntry>, MaintenanceError> {
    let mut entries = Vec::new();
    for ledger_table in std::iter::once(table).chain(parent.map(String::as_str)) {
        let listed = ledger
            .list(Some("pending"), Some(ledger_table))
            .await
            .map_err(|source| MaintenanceError::Ledger {
                table: table.to_owned(),
                source,
            })?;
        entries.extend(listed);
    }
    Ok(entries)
}

/// Refuses (unless `force`) a table whose pending files are recorded in another
/// ledger than `ledger`, or in none.
async fn check_ledger(
    catalog: &dyn Catalog,
    ledger: &impl Ledger,
    table: &Table,
    parent: Option<&String>,
    force: bool,
) -> Result<(), MaintenanceError> {
    let name = table.identifier().to_string();
    let iceberg = |source: iceberg::Error| MaintenanceError::Iceberg {
        table: name.clone(),
        source: Box::new(source),
    };
    // A dead-letter table created before ledgers were recorded: its parent's.
    let recorded = match (table.metadata().properties().get(LEDGER_PROPERTY), parent) {
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
    if recorded.as_ref() == Some(&ledger.identity()) || force {
        return Ok(());
    }
    Err(MaintenanceError::Refused {
        table: name,
        reason: match recorded {
            Some(recorded) => format!(
                "its pending files are recorded in ledger {recorded}, and this cleanup reads {}: run it where that ledger is",
                ledger.identity()
            ),
            None => format!(
                "it records no ledger ({LEDGER_PROPERTY}; the next conversion of its topic records one), so its pending files cannot be seen"
            ),
        },
    })
}

/// Every file the table references, normalized ([`normalize`]): the files of pending
/// entries (spilled descriptions read back), what every snapshot reaches (every
/// snapshot of the metadata: every branch's and tag's), the current and previous
/// metadata files, statistics and partition statistics files, and the mirror's key
/// index.
async fn referenced(table: &Table, pending: &[LedgerEntry]) -> iceberg::Result<HashSet<String>> {
    let mut files: HashSet<String> = HashSet::new();
    for entry in pending {
        files.extend(crate::ledger::resolved_paths(entry, table.file_io()).await?);
    }
    let metadata = table.metadata();
    files.extend(reachable(table, metadata.snapshots().map(|s| s.snapshot_id())).await?);
    files.insert(table.metadata_location_result()?.to_owned());
    files.extend(
        metadata
            .metadata_log()
            .iter()
            .map(|m| m.metadata_file.clone()),
    );
    files.extend(
        metadata
            .statistics_iter()
            .map(|s| s.statistics_path.clone()),
    );
    files.extend(
        metadata
            .partition_statistics_iter()
            .map(|s| s.statistics_path.clone()),
    );
    // The mirror's key index (named by the properties, not by a snapshot).
    files.extend(
        metadata
            .properties()
            .get(kfs_plan::key_index::INDEX_PATH_PROPERTY)
            .cloned(),
    );
    Ok(files.iter().map(|f| normalize(f)).collect())
}

/// Whether `key` (relative to the table root) is a table metadata file.
fn is_metadata_file(key: &str) -> bool {
    key.starts_with("metadata/") && key.ends_with(".metadata.json")
}

/// Whether the unreferenced metadata file `path` is this table's (a commit that lost
/// its race): one of another `table-uuid` is kept, whoever wrote it (another table at
/// the same location, or a creation of this table that lost to another process: the
/// catalog check of locations tells the first apart), and so is one that cannot be
/// read as JSON.
async fn ours(table: &Table, path: &str) -> bool {
    let Ok(input) = table.file_io().new_input(path) else {
        return false;
    };
    let Ok(bytes) = input.read().await else {
        return false;
    };
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return false;
    };
    let own = table.metadata().uuid().to_string();
    value.get("table-uuid").and_then(|u| u.as_str()) == Some(own.as_str())
}

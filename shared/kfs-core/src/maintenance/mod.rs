//! Table maintenance: compaction (bin-packing small files into target-size files with
//! replace snapshots), snapshot expiry (and deletion of what only expired snapshots
//! reached), orphan cleanup (files under the table no snapshot and no pending ledger
//! entry references), and manifest rewrites. Plans come from
//! [`kfs_plan::compaction`]; commits go through the catalog ([`iceberg::Catalog`]) or
//! its pointer swap ([`TableSwap`]) for replace snapshots.

mod compact;
mod expire;
mod manifests;
mod orphans;

pub use compact::{CompactionReport, compact_table};
pub use expire::{ExpiryReport, expire_snapshots};
pub use manifests::rewrite_manifests;
pub use orphans::{MIN_ORPHAN_AGE, OrphanReport, OrphanRule, remove_orphans};

use crate::catalog::CatalogAccess;
use crate::catalog::TableSwap;
use crate::ledger::Ledger;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, TableIdent};
use kfs_plan::compaction::ExpiryRule;
use kfs_plan::naming::TableName;
use std::collections::BTreeMap;
use std::time::Instant;

/// Maintenance failed; what was committed before the failure stands.
#[derive(Debug, thiserror::Error)]
pub enum MaintenanceError {
    /// The catalog or storage failed.
    #[error("table {table}: {source}")]
    Iceberg {
        /// Table.
        table: String,
        /// The error.
        source: Box<iceberg::Error>,
    },
    /// Listing the table's files failed.
    #[error("table {table}: {source}")]
    Listing {
        /// Table.
        table: String,
        /// The error.
        source: crate::source::SourceError,
    },
    /// The ledger failed.
    #[error("table {table}: {source}")]
    Ledger {
        /// Table.
        table: String,
        /// The error.
        source: crate::ledger::LedgerError,
    },
    /// Maintenance refused to run: the table is not kfs-iceberg's, or orphan cleanup
    /// could not protect its pending files (an age below the floor, another ledger).
    #[error("table {table}: refused: {reason}")]
    Refused {
        /// Table.
        table: String,
        /// Why, and what would allow it.
        reason: String,
    },
}

/// Refuses maintenance of a table kfs-iceberg did not create (no topic recorded).
pub(crate) fn ensure_ours(table: &iceberg::table::Table) -> Result<(), MaintenanceError> {
    match crate::table::table_owner(table) {
        Some(_) => Ok(()),
        None => Err(MaintenanceError::Refused {
            table: table.identifier().to_string(),
            reason: format!(
                "it has no {} property: kfs-iceberg did not create it and does not compact, expire or clean it",
                crate::table::TOPIC_PROPERTY
            ),
        }),
    }
}

impl MaintenanceError {
    /// What the failure means.
    pub fn kind(&self) -> crate::fault::ErrorKind {
        match self {
            Self::Iceberg { source, .. } => crate::fault::iceberg_error_kind(source),
            Self::Listing { source, .. } => source.kind,
            Self::Ledger { source, .. } => source.kind(),
            Self::Refused { .. } => crate::fault::ErrorKind::Config,
        }
    }
}

/// Table property recording the last orphan cleanup (Unix ms), so that a stateless
/// committer runs it once per interval.
pub const ORPHANS_REMOVED_PROPERTY: &str = "kfs.orphans-removed-ms";

/// When the committer maintains the tables it committed to.
#[derive(Debug, Clone)]
pub struct MaintenancePolicy {
    /// Compact small files.
    pub compact: bool,
    /// Expire snapshots older than this.
    pub snapshot_retention: std::time::Duration,
    /// Always keep this many snapshots.
    pub retain_last: usize,
    /// Keep at most this many snapshots whatever their age (default 1,000; `None`: age
    /// only). Commit
    /// cost grows with the snapshots a table keeps (the metadata file lists them all).
    pub max_snapshots: Option<usize>,
    /// Merge manifests when a table has more than this many.
    pub max_manifests: usize,
    /// Remove orphans older than this (`None`: never); must exceed the longest a
    /// file may stay pending, and is refused below [`MIN_ORPHAN_AGE`] unless
    /// `force_orphan_age`.
    pub orphan_age: Option<std::time::Duration>,
    /// Allow an `orphan_age` below [`MIN_ORPHAN_AGE`] (tests; an operator who knows no
    /// file is being written).
    pub force_orphan_age: bool,
    /// How often orphan cleanup runs per table.
    pub orphan_interval: std::time::Duration,
}

impl Default for MaintenancePolicy {
    fn default() -> Self {
        Self {
            compact: true,
            snapshot_retention: std::time::Duration::from_secs(5 * 86_400),
            retain_last: 1,
            max_snapshots: Some(1000),
            max_manifests: 10,
            orphan_age: Some(std::time::Duration::from_secs(3 * 86_400)),
            force_orphan_age: false,
            orphan_interval: std::time::Duration::from_secs(3600),
        }
    }
}

/// What maintenance did to one table.
#[derive(Debug, Clone, Default)]
pub struct MaintenanceSummary {
    /// Files replaced by compaction.
    pub files_compacted: usize,
    /// Snapshots expired.
    pub snapshots_expired: usize,
    /// Files deleted by expiry and orphan cleanup.
    pub files_deleted: usize,
    /// Whether manifests were merged.
    pub manifests_rewritten: bool,
    /// Whether orphan cleanup ran.
    pub orphan_cleanup: bool,
}

fn millis(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Maintains one table by `policy`, stopping before `deadline`: compaction, expiry,
/// manifest rewrite, and (once per interval) orphan cleanup.
#[allow(clippy::too_many_arguments)]
pub async fn maintain_table(
    catalog: &dyn Catalog,
    swap: &dyn TableSwap,
    ledger: &impl Ledger,
    s3: &crate::storage::S3Settings,
    ident: &TableIdent,
    policy: &MaintenancePolicy,
    deadline: Option<Instant>,
    now_ms: i64,
) -> Result<MaintenanceSummary, MaintenanceError> {
    let out_of_time = || deadline.is_some_and(|d| Instant::now() >= d);
    let mut summary = MaintenanceSummary::default();
    // Each step loads the table and refuses one kfs-iceberg did not create.
    if policy.compact {
        let report = compact_table(catalog, swap, ident, None, deadline, now_ms).await?;
        summary.files_compacted = report.files_removed;
    }
    if out_of_time() {
        return Ok(summary);
    }
    let expiry = expire_snapshots(
        catalog,
        ident,
        &ExpiryRule {
            older_than_ms: now_ms.saturating_sub(millis(policy.snapshot_retention)),
            retain_last: policy.retain_last,
            max_snapshots: policy.max_snapshots,
        },
        false,
    )
    .await?;
    summary.snapshots_expired = expiry.expired.len();
    summary.files_deleted += expiry.deleted_files.len();
    if out_of_time() {
        return Ok(summary);
    }
    summary.manifests_rewritten =
        rewrite_manifests(catalog, swap, ident, policy.max_manifests, now_ms)
            .await?
            .is_some();
    let Some(orphan_age) = policy.orphan_age else {
        return Ok(summary);
    };
    let name = ident.to_string();
    let iceberg = |source: iceberg::Error| MaintenanceError::Iceberg {
        table: name.clone(),
        source: Box::new(source),
    };
    let table = catalog.load_table(ident).await.map_err(iceberg)?;
    let last: i64 = table
        .metadata()
        .properties()
        .get(ORPHANS_REMOVED_PROPERTY)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if out_of_time() || now_ms.saturating_sub(last) < millis(policy.orphan_interval) {
        return Ok(summary);
    }
    let orphans = remove_orphans(
        catalog,
        ledger,
        ident,
        s3,
        &OrphanRule {
            older_than: orphan_age,
            now_ms,
            force: policy.force_orphan_age,
            dry_run: false,
        },
    )
    .await?;
    summary.orphan_cleanup = true;
    summary.files_deleted += orphans.orphans.len();
    let tx = Transaction::new(&table);
    let tx = tx
        .update_table_properties()
        .set(ORPHANS_REMOVED_PROPERTY.to_owned(), now_ms.to_string())
        .apply(tx)
        .map_err(iceberg)?;
    // Losing this race only means the next tick cleans again.
    let _ = tx.commit(catalog).await;
    Ok(summary)
}

/// Maintains `tables` one after the other by `policy` until `deadline` (tables not
/// reached wait for the next call): what the committer does after its commits and
/// what `kfs-iceberg maintain` does on demand. Each table's result stands alone: one
/// failure stops nothing else.
pub async fn maintain_tables(
    catalog: CatalogAccess<'_>,
    ledger: &impl Ledger,
    s3: &crate::storage::S3Settings,
    tables: &[TableName],
    policy: &MaintenancePolicy,
    deadline: Option<Instant>,
) -> BTreeMap<String, Result<MaintenanceSummary, String>> {
    let mut done = BTreeMap::new();
    for name in tables {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let result = maintain_table(
            catalog.catalog,
            catalog.swap,
            ledger,
            s3,
            &crate::table::table_ident(name),
            policy,
            deadline,
            crate::clock::now_ms(),
        )
        .await
        .map_err(|e| e.to_string());
        done.insert(name.to_string(), result);
    }
    done
}

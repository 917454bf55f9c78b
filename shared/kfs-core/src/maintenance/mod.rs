//! Table maintenance: compaction (bin-packing small files into target-size files with
//! replace snapshots), snapshot expiry (and deletion of what only expired snapshots
//! reached), orphan cleanup (files under the table no snapshot and no pending ledger
//! entry references), and manifest rewrites. Plans come from
//! [`kfs_plan::compaction`]; commits go through the catalog ([`iceberg::Catalog`]) or
//! its pointer swap ([`TableSwap`]) for replace snapshots.

mod compact;
mod confine;
mod expire;
mod manifests;
mod orphans;
mod switches;

use compact::compact_sized;
pub use compact::{CompactionReport, compact_table};
pub use confine::{MaintenanceStorage, Neighbours};
pub use expire::{ExpiryReport, expire_snapshots};
use kfs_plan::compaction::CompactionPolicy;
pub use manifests::rewrite_manifests;
pub use orphans::{MIN_ORPHAN_AGE, OrphanReport, OrphanRule, remove_orphans, remove_orphans_among};
pub use switches::{
    GC_ENABLED_PROPERTY, MAINTENANCE_ENABLED_PROPERTY, MaintenanceStep, StepOff, ensure_step_on,
    step_off,
};

use crate::ledger::Ledger;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, TableIdent};
use kfs_catalog::catalog::CatalogAccess;
use kfs_catalog::catalog::TableSwap;
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
    pub fn kind(&self) -> kfs_catalog::fault::ErrorKind {
        match self {
            Self::Iceberg { source, .. } => kfs_catalog::fault::iceberg_error_kind(source),
            Self::Listing { source, .. } => source.kind,
            Self::Ledger { source, .. } => source.kind(),
            Self::Refused { .. } => kfs_catalog::fault::ErrorKind::Config,
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
    /// Compact in tiers (`kfs_plan::compaction::CompactionPolicy::tiered`): for tables
    /// compacted about as often as they are committed (`run --follow`), whose growing
    /// file would otherwise be rewritten with every new small one.
    pub tiered_compaction: bool,
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
    /// Run the steps a table property turns off (`kfs.maintenance.<step>.enabled=false`):
    /// an operator's explicit override. Never overrides `gc.enabled=false`.
    pub ignore_table_switches: bool,
}

impl Default for MaintenancePolicy {
    fn default() -> Self {
        Self {
            compact: true,
            tiered_compaction: false,
            snapshot_retention: std::time::Duration::from_secs(5 * 86_400),
            retain_last: 1,
            max_snapshots: Some(1000),
            max_manifests: 10,
            orphan_age: Some(std::time::Duration::from_secs(3 * 86_400)),
            force_orphan_age: false,
            orphan_interval: std::time::Duration::from_secs(3600),
            ignore_table_switches: false,
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
    /// Steps a table property turned off (`kfs.maintenance.<step>.enabled=false`,
    /// `gc.enabled=false`): the platform or another engine maintains the table.
    pub steps_off: Vec<StepOff>,
}

fn millis(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Maintains one table by `policy`, stopping before `deadline`: compaction, expiry,
/// manifest rewrite, and (once per interval) orphan cleanup, each unless a table
/// property turns it off ([`step_off`]). Orphan cleanup checks the tables of the
/// table's namespace ([`Neighbours`]).
#[allow(clippy::too_many_arguments)]
pub async fn maintain_table(
    catalog: &dyn Catalog,
    swap: &dyn TableSwap,
    ledger: &impl Ledger,
    storage: &MaintenanceStorage,
    ident: &TableIdent,
    policy: &MaintenancePolicy,
    deadline: Option<Instant>,
    now_ms: i64,
) -> Result<MaintenanceSummary, MaintenanceError> {
    let mut neighbours = NeighbourCache::new([ident.namespace().clone()]);
    let site = Site {
        catalog,
        swap,
        storage,
    };
    maintain_one(
        &site,
        ledger,
        ident,
        policy,
        deadline,
        now_ms,
        &mut neighbours,
    )
    .await
}

/// Where maintenance runs: the catalog, its pointer swap and the storage.
struct Site<'a> {
    catalog: &'a dyn Catalog,
    swap: &'a dyn TableSwap,
    storage: &'a MaintenanceStorage,
}

/// The other tables' locations, read once per maintenance run, when a cleanup first
/// needs them.
struct NeighbourCache {
    namespaces: Vec<iceberg::NamespaceIdent>,
    loaded: Option<Neighbours>,
}

impl NeighbourCache {
    fn new(namespaces: impl IntoIterator<Item = iceberg::NamespaceIdent>) -> Self {
        Self {
            namespaces: namespaces.into_iter().collect(),
            loaded: None,
        }
    }

    async fn get(&mut self, catalog: &dyn Catalog) -> &Neighbours {
        if self.loaded.is_none() {
            let loaded = Neighbours::load(catalog, self.namespaces.iter().cloned()).await;
            self.loaded = Some(loaded);
        }
        self.loaded.get_or_insert_with(Neighbours::default)
    }
}

/// The steps of `ident` its properties turn off (unless `policy` overrides them).
async fn steps_off(
    catalog: &dyn Catalog,
    ident: &TableIdent,
    policy: &MaintenancePolicy,
) -> Result<Vec<StepOff>, MaintenanceError> {
    let name = ident.to_string();
    let table = catalog
        .load_table(ident)
        .await
        .map_err(|source| MaintenanceError::Iceberg {
            table: name.clone(),
            source: Box::new(source),
        })?;
    let mut off = Vec::new();
    for step in MaintenanceStep::ALL {
        if let Some(switch) = step_off(&name, table.metadata().properties(), step)?
            && !(policy.ignore_table_switches && switch.overridable)
        {
            off.push(switch);
        }
    }
    Ok(off)
}

async fn maintain_one(
    site: &Site<'_>,
    ledger: &impl Ledger,
    ident: &TableIdent,
    policy: &MaintenancePolicy,
    deadline: Option<Instant>,
    now_ms: i64,
    neighbours: &mut NeighbourCache,
) -> Result<MaintenanceSummary, MaintenanceError> {
    let (catalog, swap) = (site.catalog, site.swap);
    let out_of_time = || deadline.is_some_and(|d| Instant::now() >= d);
    let mut summary = MaintenanceSummary {
        steps_off: steps_off(catalog, ident, policy).await?,
        ..MaintenanceSummary::default()
    };
    let runs = |step: MaintenanceStep| !summary.steps_off.iter().any(|off| off.step == step);
    // Each step loads the table and refuses one kfs-iceberg did not create.
    if policy.compact && runs(MaintenanceStep::Compaction) {
        let sized = |target| match policy.tiered_compaction {
            true => CompactionPolicy::tiered(target),
            false => CompactionPolicy::for_target(target),
        };
        let report = compact_sized(catalog, swap, ident, sized, deadline, now_ms).await?;
        summary.files_compacted = report.files_removed;
    }
    if out_of_time() {
        return Ok(summary);
    }
    if runs(MaintenanceStep::SnapshotExpiry) {
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
    }
    if out_of_time() {
        return Ok(summary);
    }
    if runs(MaintenanceStep::ManifestRewrite) {
        summary.manifests_rewritten =
            rewrite_manifests(catalog, swap, ident, policy.max_manifests, now_ms)
                .await?
                .is_some();
    }
    let Some(orphan_age) = policy.orphan_age else {
        return Ok(summary);
    };
    if !runs(MaintenanceStep::OrphanRemoval) {
        return Ok(summary);
    }
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
    let orphans = remove_orphans_among(
        catalog,
        ledger,
        ident,
        site.storage,
        neighbours.get(catalog).await,
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
    storage: &MaintenanceStorage,
    tables: &[TableName],
    policy: &MaintenancePolicy,
    deadline: Option<Instant>,
) -> BTreeMap<String, Result<MaintenanceSummary, String>> {
    let mut done = BTreeMap::new();
    // The namespaces maintained: no table of theirs may lie under a cleaned one.
    let mut neighbours = NeighbourCache::new(
        tables
            .iter()
            .map(|t| crate::table::table_ident(t).namespace().clone()),
    );
    let site = Site {
        catalog: catalog.catalog,
        swap: catalog.swap,
        storage,
    };
    for name in tables {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let result = maintain_one(
            &site,
            ledger,
            &crate::table::table_ident(name),
            policy,
            deadline,
            crate::clock::now_ms(),
            &mut neighbours,
        )
        .await
        .map_err(|e| e.to_string());
        done.insert(name.to_string(), result);
    }
    done
}

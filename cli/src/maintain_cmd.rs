//! The maintenance commands on the embedded catalog: `maintain` (everything the
//! committer does after its commits, by the same policy and code), and each step on its
//! own: `compact`, `expire-snapshots`, `remove-orphans` and `rewrite-manifests`, for one
//! table or every table.

use iceberg::{Catalog, NamespaceIdent, TableIdent};
use kfs_core::now_ms;
use kfs_core::{
    MaintenancePolicy, MaintenanceStep, Neighbours, compact_table, expire_snapshots,
    maintain_tables, remove_orphans_among, rewrite_manifests,
};
use kfs_plan::compaction::CompactionPolicy;
use kfs_plan::naming::TableName;

use crate::CliError;
use crate::embedded::{Embedded, WarehouseArgs};
use kfs_core::Ledger;
use kfs_plan::duration::parse_duration;

/// Which tables, and whether to act.
#[derive(Debug, clap::Args)]
pub struct Target {
    #[command(flatten)]
    warehouse: WarehouseArgs,
    /// One table, `namespace.name` (default: every table of the catalog).
    #[arg(long)]
    table: Option<String>,
    /// Report what would be done, change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Run a step on tables whose properties turn it off
    /// (`kfs.maintenance.<step>.enabled=false`, `kfs.maintenance.enabled=false`: the
    /// platform or another engine maintains them). Never overrides Iceberg's
    /// `gc.enabled=false`.
    #[arg(long)]
    even_if_disabled: bool,
}

/// Arguments of `maintain`.
#[derive(Debug, clap::Args)]
pub struct MaintainArgs {
    #[command(flatten)]
    target: Target,
    /// Do not compact small files.
    #[arg(long)]
    no_compact: bool,
    /// Expire snapshots older than this (at least one is kept).
    #[arg(long, default_value = "5d")]
    snapshot_retention: String,
    /// Keep at most this many snapshots whatever their age (`0`: age only).
    #[arg(long, default_value_t = 1000)]
    max_snapshots: usize,
    /// Merge a table's manifests past this many.
    #[arg(long, default_value_t = 10)]
    max_manifests: usize,
    /// Delete unreferenced files older than this (`off`: no orphan cleanup). Keep it
    /// longer than any conversion takes; below 1h it is refused without `--force`.
    #[arg(long, default_value = "3d")]
    orphan_age: String,
    /// Allow an orphan age below 1h, and cleaning a table whose pending files are
    /// recorded in another ledger than this one. Only when nothing writes the tables.
    #[arg(long)]
    force: bool,
}

/// Arguments of `compact`.
#[derive(Debug, clap::Args)]
pub struct CompactArgs {
    #[command(flatten)]
    target: Target,
    /// Target data file size in bytes (default: the table's
    /// `write.target-file-size-bytes`, else 512 MiB); files below 75% of it are rewritten.
    #[arg(long)]
    target_file_size: Option<u64>,
}

/// Arguments of `expire-snapshots`.
#[derive(Debug, clap::Args)]
pub struct ExpireArgs {
    #[command(flatten)]
    target: Target,
    /// Expire snapshots older than this (e.g. `0s`, `12h`, `5d`).
    #[arg(long, default_value = "5d")]
    older_than: String,
    /// Always keep this many of the newest snapshots.
    #[arg(long, default_value_t = 1)]
    retain_last: usize,
    /// Also expire every snapshot beyond the newest N, whatever its age.
    #[arg(long, value_name = "N")]
    max_snapshots: Option<usize>,
}

/// Arguments of `remove-orphans`.
#[derive(Debug, clap::Args)]
pub struct OrphanArgs {
    #[command(flatten)]
    target: Target,
    /// Only delete unreferenced files older than this. Keep it longer than any
    /// conversion takes: a file being written is not in the ledger yet. Below 1h it
    /// is refused without `--force`.
    #[arg(long, default_value = "3d")]
    older_than: String,
    /// Allow `--older-than` below 1h, and cleaning a table whose pending files are
    /// recorded in another ledger than this one. Only when nothing writes the tables.
    #[arg(long)]
    force: bool,
}

/// Arguments of `rewrite-manifests`.
#[derive(Debug, clap::Args)]
pub struct RewriteManifestsArgs {
    #[command(flatten)]
    target: Target,
    /// Rewrite when a table has more data manifests than this.
    #[arg(long, default_value_t = 1)]
    max_manifests: usize,
}

fn pipeline(e: impl std::fmt::Display) -> CliError {
    CliError::Pipeline(e.to_string())
}

async fn tables<L>(embedded: &Embedded<L>, target: &Target) -> Result<Vec<TableIdent>, CliError> {
    if let Some(table) = &target.table {
        let name = TableName::parse(table)
            .ok_or_else(|| CliError::Usage(format!("--table {table}: expected namespace.name")))?;
        return Ok(vec![kfs_core::table_ident(&name)]);
    }
    let mut all = Vec::new();
    for namespace in embedded
        .catalog
        .list_namespaces(None)
        .await
        .map_err(pipeline)?
    {
        all.extend(list(embedded.catalog.as_ref(), &namespace).await?);
    }
    Ok(all)
}

async fn list(
    catalog: &dyn Catalog,
    namespace: &NamespaceIdent,
) -> Result<Vec<TableIdent>, CliError> {
    catalog.list_tables(namespace).await.map_err(pipeline)
}

/// Prints (on stderr) the catalog, warehouse, ledger and tables `command` is about to
/// act on, before it acts: `--stack` takes them from the deployed functions.
fn announce<L>(embedded: &Embedded<L>, command: &str, target: &Target, tables: &[TableIdent]) {
    let names: Vec<String> = tables.iter().map(ToString::to_string).collect();
    eprint!(
        "{}",
        crate::target::describe(&embedded.site, command, target.dry_run, &names)
    );
}

/// The tables `command` acts on, announced.
async fn announced<L>(
    embedded: &Embedded<L>,
    command: &str,
    target: &Target,
) -> Result<Vec<TableIdent>, CliError> {
    let idents = tables(embedded, target).await?;
    announce(embedded, command, target, &idents);
    Ok(idents)
}

/// Whether `step` runs on `ident`: a table property may turn it off (a line says so
/// and the table is skipped) unless `--even-if-disabled` overrides it.
async fn step_runs<L>(
    embedded: &Embedded<L>,
    ident: &TableIdent,
    step: MaintenanceStep,
    target: &Target,
) -> Result<bool, CliError> {
    let table = embedded.catalog.load_table(ident).await.map_err(pipeline)?;
    let off = kfs_core::step_off(&ident.to_string(), table.metadata().properties(), step)
        .map_err(pipeline)?;
    match off {
        Some(off) if !(target.even_if_disabled && off.overridable) => {
            out!(
                "{ident}: skipped: {off}{}",
                if off.overridable {
                    " (--even-if-disabled runs it anyway)"
                } else {
                    ""
                }
            );
            Ok(false)
        }
        _ => Ok(true),
    }
}

fn cutoff(older_than: &str) -> Result<i64, CliError> {
    let age =
        parse_duration(older_than).map_err(|e| CliError::Usage(format!("--older-than {e}")))?;
    Ok(now_ms().saturating_sub(i64::try_from(age.as_millis()).unwrap_or(i64::MAX)))
}

/// Runs `maintain`: [`maintain_tables`], as the committer runs it after a tick.
pub async fn maintain(args: &MaintainArgs, stack: Option<&str>) -> Result<(), CliError> {
    if args.target.dry_run {
        return Err(CliError::Usage(
            "maintain has no --dry-run: use it on compact, expire-snapshots or remove-orphans"
                .into(),
        ));
    }
    let duration = |option: &str, text: &str| {
        parse_duration(text).map_err(|e| CliError::Usage(format!("--{option} {e}")))
    };
    let policy = MaintenancePolicy {
        compact: !args.no_compact,
        snapshot_retention: duration("snapshot-retention", &args.snapshot_retention)?,
        max_snapshots: Some(args.max_snapshots).filter(|&n| n > 0),
        max_manifests: args.max_manifests,
        orphan_age: match args.orphan_age.as_str() {
            "off" => None,
            text => Some(duration("orphan-age", text)?),
        },
        force_orphan_age: args.force,
        ignore_table_switches: args.target.even_if_disabled,
        // On demand: orphan cleanup runs whenever asked, not once per interval.
        orphan_interval: std::time::Duration::ZERO,
        ..MaintenancePolicy::default()
    };
    if policy
        .orphan_age
        .is_some_and(|age| age < kfs_core::MIN_ORPHAN_AGE && !args.force)
    {
        return Err(CliError::Usage(format!(
            "--orphan-age {}: below the floor of 1h, files still being written would be deleted; add --force only when nothing writes the tables",
            args.orphan_age
        )));
    }
    let opened = args.target.warehouse.open(stack).await?;
    crate::with_opened!(opened, embedded => maintain_on(args, &policy, &embedded).await)
}

async fn maintain_on<L: Ledger>(
    args: &MaintainArgs,
    policy: &MaintenancePolicy,
    embedded: &Embedded<L>,
) -> Result<(), CliError> {
    let names: Vec<TableName> = announced(embedded, "maintain", &args.target)
        .await?
        .iter()
        .map(|ident| TableName {
            namespace: ident.namespace().to_url_string(),
            name: ident.name().to_owned(),
        })
        .collect();
    let results = maintain_tables(
        kfs_core::CatalogAccess {
            catalog: embedded.catalog.as_ref(),
            swap: embedded.swap.as_ref(),
        },
        &embedded.ledger,
        &embedded.storage(),
        &names,
        policy,
        None,
    )
    .await;
    let mut failed = 0;
    for (table, result) in &results {
        match result {
            Ok(m) => out!(
                "{table}: {} files compacted, {} snapshots expired, {} files deleted, manifests {}, orphan cleanup {}{}",
                m.files_compacted,
                m.snapshots_expired,
                m.files_deleted,
                if m.manifests_rewritten {
                    "merged"
                } else {
                    "kept"
                },
                if m.orphan_cleanup { "ran" } else { "skipped" },
                m.steps_off
                    .iter()
                    .map(|off| format!("; {off}"))
                    .collect::<String>(),
            ),
            Err(e) => {
                failed += 1;
                eprintln!("{table}: maintenance failed: {e}");
            }
        }
    }
    if failed > 0 {
        return Err(CliError::Pipeline(format!(
            "maintenance failed for {failed} of {} tables (the others are done)",
            results.len()
        )));
    }
    Ok(())
}

/// Runs `compact`.
pub async fn compact(args: &CompactArgs, stack: Option<&str>) -> Result<(), CliError> {
    let opened = args.target.warehouse.open(stack).await?;
    crate::with_opened!(opened, embedded => compact_on(args, &embedded).await)
}

async fn compact_on<L: Ledger>(args: &CompactArgs, embedded: &Embedded<L>) -> Result<(), CliError> {
    for ident in announced(embedded, "compact", &args.target).await? {
        if !step_runs(embedded, &ident, MaintenanceStep::Compaction, &args.target).await? {
            continue;
        }
        let policy = args.target_file_size.map(CompactionPolicy::for_target);
        if args.target.dry_run {
            let table = embedded
                .catalog
                .load_table(&ident)
                .await
                .map_err(pipeline)?;
            let policy = policy.unwrap_or_else(|| {
                CompactionPolicy::for_target(kfs_core::target_file_size(&table))
            });
            let live = kfs_core::live_entries(&table).await.map_err(pipeline)?;
            let small = live
                .iter()
                .filter(|e| e.file_size_in_bytes() < policy.small_below_bytes)
                .count();
            out!(
                "{ident}: {} live files, {small} below {} bytes would be rewritten",
                live.len(),
                policy.small_below_bytes
            );
            continue;
        }
        let report = compact_table(
            embedded.catalog.as_ref(),
            embedded.swap.as_ref(),
            &ident,
            policy,
            None,
            now_ms(),
        )
        .await
        .map_err(pipeline)?;
        if report.skipped_for_deletes {
            out!(
                "{ident}: not compacted: the table has equality deletes, which this build does not apply (compact it with the engine that wrote them)"
            );
            continue;
        }
        out!(
            "{ident}: {} groups, {} files -> {} files ({} -> {} bytes), {} replace snapshots, {} stale groups, {} row groups copied, {} re-encoded, {} delete files folded",
            report.groups,
            report.files_removed,
            report.files_added,
            report.bytes_read,
            report.bytes_written,
            report.snapshots.len(),
            report.stale_groups,
            report.row_groups_copied,
            report.row_groups_reencoded,
            report.delete_files_folded
        );
    }
    Ok(())
}

/// Runs `expire-snapshots`.
pub async fn expire(args: &ExpireArgs, stack: Option<&str>) -> Result<(), CliError> {
    let opened = args.target.warehouse.open(stack).await?;
    crate::with_opened!(opened, embedded => expire_on(args, &embedded).await)
}

async fn expire_on<L: Ledger>(args: &ExpireArgs, embedded: &Embedded<L>) -> Result<(), CliError> {
    let older_than = cutoff(&args.older_than)?;
    for ident in announced(embedded, "expire-snapshots", &args.target).await? {
        if !step_runs(
            embedded,
            &ident,
            MaintenanceStep::SnapshotExpiry,
            &args.target,
        )
        .await?
        {
            continue;
        }
        let report = expire_snapshots(
            embedded.catalog.as_ref(),
            &ident,
            &kfs_plan::compaction::ExpiryRule {
                older_than_ms: older_than,
                retain_last: args.retain_last,
                max_snapshots: args.max_snapshots,
            },
            args.target.dry_run,
        )
        .await
        .map_err(pipeline)?;
        let verb = if args.target.dry_run {
            "would expire"
        } else {
            "expired"
        };
        out!(
            "{ident}: {verb} {} snapshots ({} kept), {} files unreachable",
            report.expired.len(),
            report.retained,
            report.deleted_files.len()
        );
    }
    Ok(())
}

/// Runs `remove-orphans`.
pub async fn orphans(args: &OrphanArgs, stack: Option<&str>) -> Result<(), CliError> {
    let opened = args.target.warehouse.open(stack).await?;
    crate::with_opened!(opened, embedded => orphans_on(args, &embedded).await)
}

async fn orphans_on<L: Ledger>(args: &OrphanArgs, embedded: &Embedded<L>) -> Result<(), CliError> {
    let rule = kfs_core::OrphanRule {
        older_than: parse_duration(&args.older_than)
            .map_err(|e| CliError::Usage(format!("--older-than {e}")))?,
        now_ms: now_ms(),
        force: args.force,
        dry_run: args.target.dry_run,
    };
    if rule.older_than < kfs_core::MIN_ORPHAN_AGE && !rule.force {
        return Err(CliError::Usage(format!(
            "--older-than {}: below the floor of 1h, files still being written would be deleted; add --force only when nothing writes the tables",
            args.older_than
        )));
    }
    let idents = announced(embedded, "remove-orphans", &args.target).await?;
    // Every table of every namespace: none may lie under a table being cleaned.
    let neighbours = Neighbours::of_catalog(embedded.catalog.as_ref()).await;
    for ident in idents {
        if !step_runs(
            embedded,
            &ident,
            MaintenanceStep::OrphanRemoval,
            &args.target,
        )
        .await?
        {
            continue;
        }
        let report = remove_orphans_among(
            embedded.catalog.as_ref(),
            &embedded.ledger,
            &ident,
            &embedded.storage(),
            &neighbours,
            &rule,
        )
        .await
        .map_err(pipeline)?;
        for path in &report.orphans {
            out!(
                "{}{path}",
                if args.target.dry_run {
                    "would delete "
                } else {
                    "deleted "
                }
            );
        }
        out!(
            "{ident}: {} files listed, {} orphans, {} unreferenced but younger than --older-than",
            report.listed,
            report.orphans.len(),
            report.too_young
        );
    }
    Ok(())
}

/// Runs `rewrite-manifests`.
pub async fn rewrite(args: &RewriteManifestsArgs, stack: Option<&str>) -> Result<(), CliError> {
    let opened = args.target.warehouse.open(stack).await?;
    crate::with_opened!(opened, embedded => rewrite_on(args, &embedded).await)
}

async fn rewrite_on<L: Ledger>(
    args: &RewriteManifestsArgs,
    embedded: &Embedded<L>,
) -> Result<(), CliError> {
    for ident in announced(embedded, "rewrite-manifests", &args.target).await? {
        if !step_runs(
            embedded,
            &ident,
            MaintenanceStep::ManifestRewrite,
            &args.target,
        )
        .await?
        {
            continue;
        }
        if args.target.dry_run {
            out!("{ident}: --dry-run: nothing rewritten");
            continue;
        }
        match rewrite_manifests(
            embedded.catalog.as_ref(),
            embedded.swap.as_ref(),
            &ident,
            args.max_manifests,
            now_ms(),
        )
        .await
        .map_err(pipeline)?
        {
            Some(snapshot) => out!("{ident}: manifests merged in snapshot {snapshot}"),
            None => out!(
                "{ident}: at most {} manifests, nothing to do",
                args.max_manifests
            ),
        }
    }
    Ok(())
}

//! `kfs-iceberg status`: per table, the watermark of every partition, pending work,
//! the last commit, and quarantined segments with their errors.

use std::collections::BTreeMap;

use kfs_core::now_ms;
use kfs_core::table_ident;
use kfs_core::table_watermarks;
use kfs_core::{EntryState, Ledger, LedgerEntry};
use kfs_plan::naming::TableName;

use serde_json::Value;

use crate::CliError;
use crate::embedded::{Embedded, WarehouseArgs};
use crate::time::rfc3339_ms;

/// Arguments of `status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    warehouse: WarehouseArgs,
}

fn age(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{}s", s / 60, s % 60),
        _ => format!("{}h{}m", s / 3600, s / 60 % 60),
    }
}

/// Runs `status`.
pub async fn run(args: &StatusArgs, stack: Option<&str>) -> Result<(), CliError> {
    let opened = args.warehouse.open(stack).await?;
    crate::with_opened!(opened, embedded => report(&embedded).await)
}

/// Loaded tables by name: `Err` for a table the catalog lists but cannot load.
type LoadedTables = BTreeMap<String, iceberg::Result<iceberg::table::Table>>;

async fn report<L: Ledger>(embedded: &Embedded<L>) -> Result<(), CliError> {
    let entries = open_work(embedded).await?;
    let mut by_table: BTreeMap<String, Vec<&LedgerEntry>> = BTreeMap::new();
    for entry in &entries {
        by_table.entry(entry.table.clone()).or_default().push(entry);
    }
    let mut loaded = protected_tables(embedded, &mut by_table).await?;
    if by_table.is_empty() {
        out!("no segments seen yet");
    }
    let now = now_ms();
    last_ticks(embedded, now).await;
    for (table, entries) in &by_table {
        match entries.first() {
            Some(entry) => out!("table {table} (topic {})", entry.topic),
            None => out!("table {table}"),
        }
        let table = match loaded.remove(table) {
            Some(table) => table,
            // Work for a table the catalog did not list (dropped, or not created yet).
            None => {
                let name = TableName::parse(table)
                    .ok_or_else(|| CliError::Pipeline(format!("bad table name {table}")))?;
                embedded.catalog.load_table(&table_ident(&name)).await
            }
        };
        match table {
            Ok(loaded) => table_state(&loaded, now),
            Err(e) => out!("  table not readable: {e}"),
        }
        work_state(entries, now);
    }
    Ok(())
}

/// Open work only (pending, quarantined, skipped), which the ledgers index: what
/// status reads grows with the backlog, never with the ledger's history.
async fn open_work<L: Ledger>(embedded: &Embedded<L>) -> Result<Vec<LedgerEntry>, CliError> {
    let mut entries = Vec::new();
    for state in ["pending", "quarantined", "skipped"] {
        let listing = embedded
            .ledger
            .scan(Some(state), None)
            .await
            .map_err(|e| CliError::Pipeline(e.to_string()))?;
        for (segment, reason) in &listing.unreadable {
            out!(
                "ledger item {segment} is unreadable ({reason}): its partition waits at it; repair or delete the item"
            );
        }
        entries.extend(listing.entries);
    }
    Ok(entries)
}

/// Every table this ledger protects, waiting work or not, added to `by_table`; each
/// table is loaded once, here, and reported by the caller.
async fn protected_tables<L: Ledger>(
    embedded: &Embedded<L>,
    by_table: &mut BTreeMap<String, Vec<&LedgerEntry>>,
) -> Result<LoadedTables, CliError> {
    let identity = embedded.ledger.identity();
    let mut loaded = BTreeMap::new();
    for namespace in embedded
        .catalog
        .list_namespaces(None)
        .await
        .map_err(|e| CliError::Pipeline(format!("listing the catalog: {e}")))?
    {
        let tables = embedded
            .catalog
            .list_tables(&namespace)
            .await
            .map_err(|e| {
                CliError::Pipeline(format!("listing {}: {e}", namespace.to_url_string()))
            })?;
        for ident in tables {
            let name = format!("{}.{}", ident.namespace().to_url_string(), ident.name());
            let table = embedded.catalog.load_table(&ident).await;
            let ours = table.as_ref().is_ok_and(|table| {
                table.metadata().properties().get(kfs_core::LEDGER_PROPERTY) == Some(&identity)
            });
            if ours || by_table.contains_key(&name) {
                by_table.entry(name.clone()).or_default();
                loaded.insert(name, table);
            }
        }
    }
    Ok(loaded)
}

/// A table's last commit, freshness and partition watermarks.
fn table_state(loaded: &iceberg::table::Table, now: i64) {
    match loaded.metadata().current_snapshot() {
        Some(snapshot) => out!(
            "  last commit: snapshot {} at {} ({} ago)",
            snapshot.snapshot_id(),
            rfc3339_ms(snapshot.timestamp_ms()),
            age(now - snapshot.timestamp_ms())
        ),
        None => out!("  last commit: none"),
    }
    if let Some(newest) = kfs_core::newest_record_ms(loaded) {
        out!(
            "  freshness: newest committed record at {} ({} ago)",
            rfc3339_ms(newest),
            age(now - newest)
        );
    }
    // A table whose progress cannot be established says so, with the remedy, beside
    // the others' state (never `next offset 0` in silence).
    match table_watermarks(loaded) {
        Ok(watermarks) => {
            for (partition, next) in &watermarks {
                out!("  partition {partition}: next offset {next}");
            }
        }
        Err(e) => out!("  progress: needs an operator: {e}"),
    }
}

/// A table's open work: pending totals, then every quarantined and skipped segment.
fn work_state(entries: &[&LedgerEntry], now: i64) {
    let pending: Vec<&&LedgerEntry> = entries
        .iter()
        .filter(|e| e.state == EntryState::Pending)
        .collect();
    let pending_bytes: u64 = pending.iter().map(|e| e.bytes).sum();
    let pending_files: usize = pending.iter().map(|e| e.data_files.len()).sum();
    match pending.iter().map(|e| e.created_ms).min() {
        Some(oldest) => out!(
            "  pending: {} segments, {pending_files} files, {pending_bytes} bytes, oldest {} ago",
            pending.iter().map(|e| e.segments()).sum::<usize>(),
            age(now - oldest)
        ),
        None => out!("  pending: none"),
    }
    for entry in entries {
        match &entry.state {
            EntryState::Quarantined { error } => out!(
                "  quarantined {} (partition {}): {error}",
                entry.segment,
                entry.partition
            ),
            EntryState::Skipped { error } => out!(
                "  skipped {} (partition {}, given up by an operator): {error}",
                entry.segment,
                entry.partition
            ),
            _ => {}
        }
    }
}

/// The last run's (on a stack, each committer shard's last tick's) result: when, what
/// it committed, and every failure with its reason.
async fn last_ticks<L>(embedded: &Embedded<L>, now: i64) {
    let ticks = match embedded.tick_log.read().await {
        Ok(ticks) => ticks,
        Err(e) => {
            out!("last pass: not readable ({e})");
            return;
        }
    };
    if ticks.is_empty() {
        out!("last pass: none recorded yet");
    }
    let count = |value: &Value| match value {
        Value::Array(items) => items.len(),
        Value::Object(fields) => fields.len(),
        Value::Number(n) => n
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(0),
        _ => 0,
    };
    for tick in &ticks {
        let finished = tick["finished_ms"].as_i64().unwrap_or(0);
        let shard = match (tick["shard"][0].as_u64(), tick["shard"][1].as_u64()) {
            (Some(index), Some(shards)) if shards > 1 => {
                format!(" (shard {index} of {shards})")
            }
            _ => String::new(),
        };
        // A table counts as committed only when the pass gave it a snapshot.
        let committed = tick["tables"].as_object().map_or(0, |t| {
            t.values().filter(|o| !o["snapshot_id"].is_null()).count()
        });
        let counts = [
            count(&tick["tables"]),
            count(&tick["swept"]),
            count(&tick["deferred"]),
            count(&tick["failed_tables"]),
            count(&tick["failed_segments"]),
        ];
        let when = format!("{} ({} ago)", rfc3339_ms(finished), age(now - finished));
        // A pass that found nothing new (a second `run`) says so: "0 tables
        // committed" read as if the tables held nothing.
        if committed == 0 && count(&tick["quarantined"]) == 0 && counts.iter().all(|&n| n == 0) {
            out!(
                "last pass{shard}: {when}: nothing new to convert; the tables hold what earlier passes committed"
            );
        } else {
            let [checked, swept, deferred, failed_tables, failed_segments] = counts;
            out!(
                "last pass{shard}: {when}: {committed} tables committed ({checked} checked), {swept} segments swept, {deferred} deferred, {failed_tables} failed tables, {failed_segments} failed segments",
            );
        }
        if let Some(failed) = tick["failed_tables"].as_object() {
            for (table, error) in failed {
                out!(
                    "  failed table {table}: {}",
                    error.as_str().unwrap_or_default()
                );
            }
        }
        for (key, label) in [
            ("failed_segments", "failed segment"),
            ("unreadable_ledger_items", "unreadable ledger item"),
        ] {
            for item in tick[key].as_array().into_iter().flatten() {
                out!(
                    "  {label} {}: {}",
                    item[0].as_str().unwrap_or_default(),
                    item[1].as_str().unwrap_or_default()
                );
            }
        }
        if let Some(maintenance) = tick["maintenance"].as_object() {
            for (table, result) in maintenance {
                if let Some(error) = result["error"].as_str() {
                    out!("  maintenance of {table} failed: {error}");
                }
            }
        }
    }
}

//! `kfs-iceberg status`: per table, the watermark of every partition, pending work,
//! the last commit, and quarantined segments with their errors.

use std::collections::BTreeMap;

use kfs_core::now_ms;
use kfs_core::table_ident;
use kfs_core::table_watermarks;
use kfs_core::{EntryState, Ledger, LedgerEntry};
use kfs_plan::naming::TableName;

use crate::CliError;
use crate::embedded::WarehouseArgs;
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
pub async fn run(args: &StatusArgs) -> Result<(), CliError> {
    let embedded = args.warehouse.open().await?;
    let listing = embedded
        .ledger
        .scan(None, None)
        .await
        .map_err(|e| CliError::Pipeline(e.to_string()))?;
    for (segment, reason) in &listing.unreadable {
        println!(
            "ledger item {segment} is unreadable ({reason}): its partition waits at it; repair or delete the item"
        );
    }
    let entries = listing.entries;
    let mut by_table: BTreeMap<&str, Vec<&LedgerEntry>> = BTreeMap::new();
    for entry in &entries {
        by_table
            .entry(entry.table.as_str())
            .or_default()
            .push(entry);
    }
    if by_table.is_empty() {
        println!("no segments seen yet");
    }
    let now = now_ms();
    for (table, entries) in by_table {
        let topic = entries.first().map_or("", |e| e.topic.as_str());
        println!("table {table} (topic {topic})");
        let name = TableName::parse(table)
            .ok_or_else(|| CliError::Pipeline(format!("bad table name {table}")))?;
        match embedded.catalog.load_table(&table_ident(&name)).await {
            Ok(loaded) => {
                match loaded.metadata().current_snapshot() {
                    Some(snapshot) => println!(
                        "  last commit: snapshot {} at {} ({} ago)",
                        snapshot.snapshot_id(),
                        rfc3339_ms(snapshot.timestamp_ms()),
                        age(now - snapshot.timestamp_ms())
                    ),
                    None => println!("  last commit: none"),
                }
                let watermarks =
                    table_watermarks(&loaded).map_err(|e| CliError::Pipeline(e.to_string()))?;
                for (partition, next) in &watermarks {
                    println!("  partition {partition}: next offset {next}");
                }
            }
            Err(e) => println!("  table not readable: {e}"),
        }
        let pending: Vec<&&LedgerEntry> = entries
            .iter()
            .filter(|e| e.state == EntryState::Pending)
            .collect();
        let pending_bytes: u64 = pending.iter().map(|e| e.bytes).sum();
        let pending_files: usize = pending.iter().map(|e| e.data_files.len()).sum();
        match pending.iter().map(|e| e.created_ms).min() {
            Some(oldest) => println!(
                "  pending: {} segments, {pending_files} files, {pending_bytes} bytes, oldest {} ago",
                pending.len(),
                age(now - oldest)
            ),
            None => println!("  pending: none"),
        }
        for entry in entries {
            if let EntryState::Quarantined { error } = &entry.state {
                println!(
                    "  quarantined {} (partition {}): {error}",
                    entry.segment, entry.partition
                );
            }
        }
    }
    Ok(())
}

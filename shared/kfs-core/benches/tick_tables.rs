//! Macro benchmark: one committer pass over many tables at once, as a tick (or a
//! committer woken for every table) meets them at scale.
//!
//! `KFS_BENCH_TABLES` topics (default 1,000), one partition each, on the embedded
//! default (the SQLite catalog and ledger, a local warehouse under `TMPDIR`). Each
//! round uploads one 10-record segment per topic, then runs one `run_pass` with the
//! committer's table concurrency (8): it converts each segment and commits each
//! table. Round 1 also creates the tables; rounds 2 and on are the steady state.
//! Prints per round the pass's wall time, the tables it committed, tables per
//! second and the time per table; then checks that every table holds every round's
//! records once.
//!
//! `TMPDIR=/dev/shm cargo bench --profile soak -p kfs-core --bench tick_tables`
//! (`KFS_BENCH_ROUNDS`, default 3; `KFS_BENCH_CONCURRENCY`, default 8).

mod common;

use std::time::Instant;

use common::{BenchResult, tiny_segment};
use kfs_core::testing::{SqlTableSwap, open_sql_catalog};
use kfs_core::{
    LOCAL_CATALOG_NAME, MemorySource, PipelineConfig, S3Settings, SqliteLedger, Warehouse,
    run_pass, table_ident, table_watermarks,
};
use kfs_plan::keys::{SegmentFile, SegmentKey};
use kfs_plan::naming::TableNaming;

/// Offsets per segment (the tiny segments hold 10 records).
const SEGMENT_OFFSETS: i64 = 10;

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn topic(index: usize) -> String {
    format!("topic{index:05}")
}

async fn run(tables: usize, rounds: usize, concurrency: usize) -> BenchResult<()> {
    let dir = tempfile::tempdir()?;
    let database = dir.path().join("catalog.db");
    let warehouse = Warehouse::Local(dir.path().join("wh"));
    let catalog = open_sql_catalog(&database, &warehouse, &S3Settings::default()).await?;
    let swap = SqlTableSwap::open(&database, LOCAL_CATALOG_NAME).await?;
    let ledger = SqliteLedger::open(&dir.path().join("ledger.db")).await?;
    let source = MemorySource::default();
    let naming = TableNaming::default();
    let config = PipelineConfig {
        naming: naming.clone(),
        table_concurrency: concurrency,
        ..PipelineConfig::default()
    };
    for round in 0..rounds {
        let base = round as i64 * SEGMENT_OFFSETS;
        for index in 0..tables {
            let key = SegmentKey {
                namespace: "ns".into(),
                topic: topic(index),
                partition: 0,
                base_offset: base,
            };
            source.put(&key.object_key(SegmentFile::Data), tiny_segment(base)?);
            source.put(&key.object_key(SegmentFile::Index), Vec::new());
        }
        let started = Instant::now();
        let report = run_pass(&source, &catalog, &swap, &ledger, &config, &|_| {}).await?;
        let elapsed = started.elapsed();
        if report.has_failures() {
            return Err(format!("round {}: {:?}", round + 1, report.failed_tables).into());
        }
        let committed = report.tables.len();
        println!(
            "tick_tables: round {} ({}): {committed} tables in {:.2} s, {:.0} tables/s, {:.1} ms per table, concurrency {concurrency}",
            round + 1,
            if round == 0 {
                "creating them"
            } else {
                "steady"
            },
            elapsed.as_secs_f64(),
            committed as f64 / elapsed.as_secs_f64().max(1e-9),
            elapsed.as_secs_f64() * 1000.0 / committed.max(1) as f64,
        );
    }
    use iceberg::Catalog;
    let end = rounds as i64 * SEGMENT_OFFSETS;
    for index in 0..tables {
        let name = naming.table_for(&topic(index));
        let table = catalog.load_table(&table_ident(&name)).await?;
        let watermarks = table_watermarks(&table)?;
        if watermarks.get(&0) != Some(&end) {
            return Err(format!("{name}: watermarks {watermarks:?}, expected {end}").into());
        }
    }
    println!("tick_tables: every table holds its {rounds} segments");
    Ok(())
}

fn main() -> BenchResult<()> {
    let tables = setting("KFS_BENCH_TABLES", 1000);
    let rounds = setting("KFS_BENCH_ROUNDS", 3);
    let concurrency = setting("KFS_BENCH_CONCURRENCY", 8);
    tokio::runtime::Runtime::new()?.block_on(run(tables, rounds, concurrency))
}

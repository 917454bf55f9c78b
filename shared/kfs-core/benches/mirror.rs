//! Macro benchmark: what finding a key's current row costs the upsert mode's first
//! cut (`kfs_core::supersede`, which reads every live data file at each commit), as
//! the mirrored table grows.
//!
//! A table on the SQLite catalog and a local warehouse (under `TMPDIR`) is loaded with
//! `KFS_BENCH_KEYS` distinct keys (default 100,000) in segments of 10,000 records,
//! then takes `KFS_BENCH_COMMITS` commits (default 5) of `KFS_BENCH_CHANGES` changes
//! each (default 1,000: updates of existing keys, a tenth of them tombstones). For
//! each commit it prints the rows the table holds, the time `supersede` takes and the
//! rows it deletes, and the time per change.
//!
//! `TMPDIR=/dev/shm cargo bench --profile soak -p kfs-core --bench mirror`

mod common;

use std::time::Instant;

use common::{BenchResult, BenchTable};

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A segment of the records `(key index, tombstone)` from offset `base`.
fn segment(base: i64, records: &[(usize, bool)]) -> BenchResult<Vec<u8>> {
    let records = records
        .iter()
        .enumerate()
        .map(|(at, (key, tombstone))| {
            let offset = base + at as i64;
            kfs_segment::OwnedRecord {
                offset,
                timestamp_ms: 1_700_000_000_000 + offset,
                key: Some(format!("key-{key:08}").into_bytes()),
                value: (!tombstone).then(|| vec![b'v'; 100]),
                headers: vec![],
            }
        })
        .collect();
    let batch = kfs_segment::BatchSpec::new(records, kfs_segment::Compression::Zstd);
    Ok(kfs_segment::encode_segment(&[batch], 1)?.kfs)
}

async fn run(keys: usize, commits: usize, changes: usize) -> BenchResult<()> {
    let mut bench = BenchTable::new().await?;
    let mut base = 0i64;
    for chunk in (0..keys).collect::<Vec<_>>().chunks(10_000) {
        let records: Vec<(usize, bool)> = chunk.iter().map(|k| (*k, false)).collect();
        bench.add_segment(base, segment(base, &records)?).await?;
        base += records.len() as i64;
    }
    bench.commit().await?;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut rows = keys;
    for commit in 1..=commits {
        let records: Vec<(usize, bool)> = (0..changes)
            .map(|at| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                ((state % keys as u64) as usize, at % 10 == 9)
            })
            .collect();
        bench.add_segment(base, segment(base, &records)?).await?;
        base += records.len() as i64;
        bench.commit().await?;
        rows += changes;
        let table = {
            use iceberg::Catalog;
            bench
                .catalog
                .load_table(&kfs_core::table_ident(&bench.name))
                .await?
        };
        let current = table.metadata().current_snapshot_id();
        let added: Vec<iceberg::spec::DataFile> = kfs_core::live_entries(&table)
            .await?
            .into_iter()
            .filter(|e| e.snapshot_id() == current)
            .map(|e| e.data_file().clone())
            .collect();
        let started = Instant::now();
        let deletes = kfs_core::supersede(&table, &added).await?;
        let elapsed = started.elapsed();
        let deleted: usize = deletes.values().map(|p| p.len()).sum();
        println!(
            "mirror: commit {commit}: {rows} rows in the table, {changes} changes: supersede {:.1} ms ({:.1} µs per change), {deleted} rows to delete",
            elapsed.as_secs_f64() * 1000.0,
            elapsed.as_secs_f64() * 1e6 / changes as f64,
        );
    }
    Ok(())
}

fn main() -> BenchResult<()> {
    let keys = setting("KFS_BENCH_KEYS", 100_000);
    let commits = setting("KFS_BENCH_COMMITS", 5);
    let changes = setting("KFS_BENCH_CHANGES", 1_000);
    tokio::runtime::Runtime::new()?.block_on(run(keys, commits, changes))
}

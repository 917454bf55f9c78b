//! Macro benchmark: what finding a key's current row costs a mirror's commit
//! (`kfs_core::supersede`) with the key index the previous commit wrote, against
//! reading every live data file (what a commit without an index does), as the
//! mirrored table grows; both must find the same rows to delete.
//!
//! A table on the SQLite catalog and a local warehouse (under `TMPDIR`) is loaded with
//! `KFS_BENCH_KEYS` distinct keys (default 100,000) in segments of 10,000 records,
//! then takes `KFS_BENCH_COMMITS` commits (default 5) of `KFS_BENCH_CHANGES` changes
//! each (default 1,000: updates of existing keys, a tenth of them tombstones). For
//! each commit it prints the rows the table holds, the rows to delete, the time
//! `supersede` takes with the index and reading the table, and their ratio.
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
    let mut bench = BenchTable::mirror().await?;
    let mut base = 0i64;
    for chunk in (0..keys).collect::<Vec<_>>().chunks(10_000) {
        let records: Vec<(usize, bool)> = chunk.iter().map(|k| (*k, false)).collect();
        bench.add_segment(base, segment(base, &records)?).await?;
        base += records.len() as i64;
    }
    bench.commit().await?;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut rows = keys;
    let (mut indexed_total, mut read_total) = (0.0f64, 0.0f64);
    for commit in 1..=commits {
        let records: Vec<(usize, bool)> = (0..changes)
            .map(|at| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                ((state % keys as u64) as usize, at % 10 == 9)
            })
            .collect();
        let entry = bench.add_segment(base, segment(base, &records)?).await?;
        base += records.len() as i64;
        rows += changes;
        let table = {
            use iceberg::Catalog;
            bench
                .catalog
                .load_table(&kfs_core::table_ident(&bench.name))
                .await?
        };
        let added = kfs_core::testing::pending_data_files(&entry, &table).await?;
        let mut timed = Vec::new();
        for indexed in [true, false] {
            let started = Instant::now();
            let superseded = kfs_core::testing::supersede_with(&table, &added, indexed).await?;
            let elapsed = started.elapsed().as_secs_f64();
            let deleted: usize = superseded.deletes.values().map(|p| p.len()).sum();
            timed.push((elapsed, deleted, superseded.indexed));
        }
        let [(with_index, deleted, found), (reading, deleted_reading, _)] = timed[..] else {
            return Err("two timings".into());
        };
        if deleted != deleted_reading || !found {
            return Err(format!(
                "commit {commit}: the index found {deleted} rows to delete (index used: {found}), reading the table {deleted_reading}"
            )
            .into());
        }
        indexed_total += with_index;
        read_total += reading;
        println!(
            "mirror: commit {commit}: {rows} rows in the table, {changes} changes, {deleted} rows to delete: supersede with the key index {:.1} ms ({:.1} µs per change), reading the table {:.1} ms; ratio {:.2}",
            with_index * 1000.0,
            with_index * 1e6 / changes as f64,
            reading * 1000.0,
            reading / with_index,
        );
        bench.commit().await?;
    }
    println!(
        "mirror: over {commits} commits, reading the table takes {:.2}x the key index's time",
        read_total / indexed_total
    );
    Ok(())
}

fn main() -> BenchResult<()> {
    let keys = setting("KFS_BENCH_KEYS", 100_000);
    let commits = setting("KFS_BENCH_COMMITS", 5);
    let changes = setting("KFS_BENCH_CHANGES", 1_000);
    tokio::runtime::Runtime::new()?.block_on(run(keys, commits, changes))
}

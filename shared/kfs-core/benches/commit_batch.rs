//! Macro benchmark: one commit of many pending files on the SQLite catalog.
//!
//! Converts `KFS_BENCH_FILES` (default 1000) one-segment files of partition 0 into
//! pending ledger entries, then times the single `commit_table` call that commits them
//! all in one snapshot: as they are, and coalesced into target-size files first (what
//! the committer does). The warehouse lives under `TMPDIR`.
//!
//! `TMPDIR=/dev/shm cargo bench -p kfs-core --bench commit_batch`

mod common;

use std::time::Instant;

use common::{BenchResult, BenchTable, tiny_segment as segment};
use kfs_core::CommitSettings;

async fn commit_once(files: usize, coalesce: bool) -> BenchResult<()> {
    let mut bench = BenchTable::new().await?;
    for i in 0..files {
        let base = i as i64 * 10;
        bench.add_segment(base, segment(base)?).await?;
    }
    let started = Instant::now();
    let outcome = bench
        .commit_with(&CommitSettings {
            coalesce,
            ..CommitSettings::default()
        })
        .await?;
    let elapsed = started.elapsed();
    println!(
        "commit_batch coalesce={coalesce}: {} pending files in one snapshot as {} files: {:.2} s",
        outcome.segments,
        outcome.files,
        elapsed.as_secs_f64()
    );
    Ok(())
}

fn main() -> BenchResult<()> {
    let files: usize = std::env::var("KFS_BENCH_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let runtime = tokio::runtime::Runtime::new()?;
    for coalesce in [false, true] {
        runtime.block_on(commit_once(files, coalesce))?;
    }
    Ok(())
}

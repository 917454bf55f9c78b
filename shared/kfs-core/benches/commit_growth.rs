//! Macro benchmark: does committing get slower as a table ages?
//!
//! Appends `KFS_BENCH_COMMITS` (default 1000) one-segment commits to a table on the
//! SQLite catalog, the SQLite ledger and a local warehouse (the embedded default), timing each `commit_table` call, twice: with
//! no maintenance, and with the committer's maintenance after every commit
//! (`maintain_table` with the default policy: compaction, 5-day expiry, manifests
//! merged past 10) bounded to `KFS_BENCH_MAX_SNAPSHOTS` snapshots (default 50). Prints
//! the median commit time around the 10th and the last commit and their ratio, and at
//! the 10th, 100th, 1,000th and 10,000th commit what the table's metadata has become:
//! the `metadata.json` bytes, the snapshots and manifests it holds, its live data
//! files, and how long planning a full scan takes (iceberg-rust's `plan_files`, which
//! reads the manifest list and every manifest, as a reader's planning does).
//!
//! `KFS_BENCH_COMMITS=10000 KFS_BENCH_MAINTENANCE=on TMPDIR=/dev/shm cargo bench
//! --profile soak -p kfs-core --bench commit_growth` is the 10,000-commit run.
//!
//! With `KFS_BENCH_READERS=on`, each checkpoint also times two independent readers'
//! planning of a full scan (`tests/python/plan_times.py`: pyiceberg's `plan_files`,
//! DuckDB's `iceberg_metadata`; run `source scripts/python-env.sh` first).
//!
//! `TMPDIR=/dev/shm cargo bench -p kfs-core --bench commit_growth`
//! (`KFS_BENCH_MAINTENANCE=on|off` for one of the two runs; the warehouse lives under
//! `TMPDIR`: in memory it stands in for object storage, on a local disk every file
//! write adds an fsync).

mod common;

use std::time::{Duration, Instant};

use common::{BenchResult, BenchTable, tiny_segment as segment};
use kfs_core::now_ms;
use kfs_core::table_ident;
use kfs_core::{MaintenancePolicy, SqliteLedger, maintain_table};

/// The commits after which the table's metadata is measured.
const CHECKPOINTS: [usize; 4] = [10, 100, 1_000, 10_000];

/// What the table's metadata is after a number of commits.
struct Checkpoint {
    commits: usize,
    metadata_bytes: u64,
    snapshots: usize,
    manifests: usize,
    data_files: usize,
    plan: Duration,
    /// The independent readers' planning (`KFS_BENCH_READERS=on`), as they print it.
    readers: Option<String>,
}

/// The independent readers' planning times of the bench table, as
/// `tests/python/plan_times.py` prints them.
fn readers_planning(bench: &BenchTable<SqliteLedger>) -> BenchResult<String> {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/plan_times.py");
    let output = std::process::Command::new("python3")
        .arg(script)
        .arg("--warehouse")
        .arg(bench.dir().join("wh"))
        .arg("--catalog-db")
        .arg(bench.dir().join("catalog.db"))
        .arg("--table")
        .arg(bench.name.to_string())
        .output()?;
    if !output.status.success() {
        return Err(format!("plan_times.py: {}", String::from_utf8_lossy(&output.stderr)).into());
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// Measures the table's current metadata (reloaded from the catalog).
async fn checkpoint(bench: &BenchTable<SqliteLedger>, commits: usize) -> BenchResult<Checkpoint> {
    use iceberg::Catalog;
    let table = bench.catalog.load_table(&table_ident(&bench.name)).await?;
    let location = table.metadata_location().unwrap_or_default();
    let metadata_bytes = table.file_io().new_input(location)?.metadata().await?.size;
    let metadata = table.metadata();
    let manifests = match metadata.current_snapshot() {
        Some(snapshot) => table
            .manifest_list_reader(snapshot)
            .load()
            .await?
            .entries()
            .len(),
        None => 0,
    };
    let started = Instant::now();
    let tasks: Vec<_> = {
        use futures::TryStreamExt;
        table
            .scan()
            .build()?
            .plan_files()
            .await?
            .try_collect()
            .await?
    };
    let plan = started.elapsed();
    let readers = match std::env::var("KFS_BENCH_READERS").as_deref() {
        Ok("on") => Some(readers_planning(bench)?),
        _ => None,
    };
    Ok(Checkpoint {
        readers,
        commits,
        metadata_bytes,
        snapshots: metadata.snapshots().count(),
        manifests,
        data_files: tasks.len(),
        plan,
    })
}

/// Runs `commits` commits; returns each commit's duration, and the checkpoints.
async fn run(
    commits: usize,
    maintenance: Option<&MaintenancePolicy>,
) -> BenchResult<(Vec<Duration>, Vec<Checkpoint>)> {
    let mut bench = BenchTable::with_sqlite_ledger().await?;
    let mut times = Vec::with_capacity(commits);
    let mut checkpoints = Vec::new();
    let ident = table_ident(&bench.name);
    for i in 0..commits {
        let base = i as i64 * 10;
        bench.add_segment(base, segment(base)?).await?;
        let started = Instant::now();
        bench.commit().await?;
        times.push(started.elapsed());
        if let Some(policy) = maintenance {
            maintain_table(
                &bench.catalog,
                &bench.swap,
                &bench.ledger,
                &bench.storage(),
                &ident,
                policy,
                None,
                now_ms(),
            )
            .await?;
        }
        if CHECKPOINTS.contains(&(i + 1)) {
            checkpoints.push(checkpoint(&bench, i + 1).await?);
        }
    }
    Ok((times, checkpoints))
}

fn median_around(times: &[Duration], index: usize) -> Duration {
    let from = index.saturating_sub(5);
    let to = (index + 5).min(times.len());
    let mut window: Vec<Duration> = times[from..to].to_vec();
    window.sort();
    window.get(window.len() / 2).copied().unwrap_or_default()
}

fn main() -> BenchResult<()> {
    let commits: usize = std::env::var("KFS_BENCH_COMMITS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let max_snapshots: usize = std::env::var("KFS_BENCH_MAX_SNAPSHOTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let policy = MaintenancePolicy {
        max_snapshots: Some(max_snapshots),
        orphan_age: None,
        ..MaintenancePolicy::default()
    };
    let runtime = tokio::runtime::Runtime::new()?;
    let modes: &[bool] = match std::env::var("KFS_BENCH_MAINTENANCE").as_deref() {
        Ok("on") => &[true],
        Ok("off") => &[false],
        _ => &[false, true],
    };
    for &maintain in modes {
        let (times, checkpoints) = runtime.block_on(run(commits, maintain.then_some(&policy)))?;
        for c in &checkpoints {
            println!(
                "commit_growth maintenance={maintain}: after commit #{}: commit {:.1} ms, metadata.json {} bytes, {} snapshots, {} manifests, {} data files, planning {:.1} ms",
                c.commits,
                median_around(&times, c.commits - 1).as_secs_f64() * 1000.0,
                c.metadata_bytes,
                c.snapshots,
                c.manifests,
                c.data_files,
                c.plan.as_secs_f64() * 1000.0
            );
            if let Some(readers) = &c.readers {
                println!(
                    "commit_growth maintenance={maintain}: after commit #{}: {readers}",
                    c.commits
                );
            }
        }
        let curve: Vec<String> = [10, 100, 250, 500, 750, commits.saturating_sub(5)]
            .iter()
            .filter(|&&i| i < times.len())
            .map(|&i| {
                format!(
                    "#{i}: {:.1} ms",
                    median_around(&times, i).as_secs_f64() * 1000.0
                )
            })
            .collect();
        println!("commit_growth maintenance={maintain}: {}", curve.join(", "));
        let early = median_around(&times, 10);
        let late = median_around(&times, commits.saturating_sub(5));
        println!(
            "commit_growth maintenance={maintain}: commit #10 {:.1} ms, commit #{commits} {:.1} ms, ratio {:.2}x",
            early.as_secs_f64() * 1000.0,
            late.as_secs_f64() * 1000.0,
            late.as_secs_f64() / early.as_secs_f64().max(1e-9)
        );
    }
    Ok(())
}

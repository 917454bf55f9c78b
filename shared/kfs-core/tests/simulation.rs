//! Seeded simulation of the pipeline under faults: segments arrive partitions
//! interleaved at random, in batches (some uploaded twice), one to three passes run at once on separate
//! connections to the same SQL catalog (SQLite) and ledger, each with a random fault
//! (a crash, error or timeout before or after a random side effect) or none, round after
//! round; then plain passes until quiet.
//!
//! After every round no partition watermark has moved backwards; at the end the
//! exactly-once invariants hold (every record once, no file registered twice, every
//! referenced file present, the ledger agreeing with the table).
//!
//! `KFS_SIM_SEEDS` (default 1000) seeds from `KFS_SIM_FIRST_SEED` (default 0); a
//! failing seed replays exactly with `KFS_SIM_FIRST_SEED=N KFS_SIM_SEEDS=1`.

mod faults;

use std::sync::Arc;

use faults::{
    Faults, FaultyCatalog, FaultyLedger, FaultySource, Mode, PARTITIONS, SEGMENTS, Step, check,
    put_segment, watermarks,
};
use futures::StreamExt;
use kfs_core::catalog::{S3Settings, Warehouse, open_sql_catalog};
use kfs_core::ledger::SqliteLedger;
use kfs_core::pipeline::{PipelineConfig, run_once};
use kfs_core::source::MemorySource;

const STEPS: [Step; 5] = [
    Step::SegmentRead,
    Step::TableCreate,
    Step::LedgerInsert,
    Step::CatalogCommit,
    Step::MarkCommitted,
];
const MODES: [Mode; 5] = [
    Mode::CrashBefore,
    Mode::CrashAfter,
    Mode::ErrorBefore,
    Mode::ErrorAfter,
    Mode::TimeoutAfter,
];
const ROUNDS: usize = 3;

/// SplitMix64: the same seed, the same run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n.max(1)
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One process's pass, with its own connections and its own fault.
async fn pass(
    dir: &std::path::Path,
    source: &MemorySource,
    faults: Arc<Faults>,
) -> Result<(), String> {
    let text = |e: &dyn std::fmt::Display| e.to_string();
    let warehouse = Warehouse::Local(dir.join("wh"));
    let catalog = open_sql_catalog(&dir.join("catalog.db"), &warehouse, &S3Settings::default())
        .await
        .map_err(|e| text(&e))?;
    let ledger = SqliteLedger::open(&dir.join("ledger.db"))
        .await
        .map_err(|e| text(&e))?;
    // A pass that fails (injected, or losing a race) leaves what it leaves.
    let _ = run_once(
        &FaultySource {
            inner: source,
            faults: faults.clone(),
        },
        &FaultyCatalog {
            inner: &catalog,
            faults: faults.clone(),
        },
        &FaultyLedger {
            inner: &ledger,
            faults,
        },
        &PipelineConfig::default(),
        &|_| {},
    )
    .await;
    Ok(())
}

/// One seed; returns how many injected faults fired.
async fn simulate(seed: u64) -> Result<usize, String> {
    let text = |e: &dyn std::fmt::Display| e.to_string();
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().map_err(|e| text(&e))?;
    let source = MemorySource::default();
    // The broker uploads a partition's segments in order; partitions interleave at
    // random, and the arrivals spread over the rounds.
    let mut next: Vec<i64> = vec![0; PARTITIONS as usize];
    let mut arrivals: Vec<(i32, i64)> = Vec::new();
    while arrivals.len() < (PARTITIONS as i64 * SEGMENTS) as usize {
        let partition = rng.below(PARTITIONS as u64) as usize;
        if next[partition] < SEGMENTS {
            arrivals.push((partition as i32, next[partition]));
            next[partition] += 1;
        }
    }
    let mut last_marks = kfs_plan::offsets::OffsetMap::new();
    let mut fired = 0;
    for round in 0..ROUNDS {
        let take = if round + 1 == ROUNDS {
            arrivals.len()
        } else {
            rng.below(arrivals.len() as u64 + 1) as usize
        };
        for (partition, index) in arrivals.drain(..take) {
            put_segment(&source, partition, index).map_err(|e| text(&e))?;
            if rng.below(5) == 0 {
                // Uploaded again with the same bytes (an S3 event delivered twice).
                put_segment(&source, partition, index).map_err(|e| text(&e))?;
            }
        }
        let processes = 1 + rng.below(3);
        let runs: Vec<Arc<Faults>> = (0..processes)
            .map(|_| {
                if rng.below(2) == 0 {
                    Faults::new(Step::SegmentRead, Mode::ErrorBefore, 0)
                } else {
                    Faults::new(
                        STEPS[rng.below(STEPS.len() as u64) as usize],
                        MODES[rng.below(MODES.len() as u64) as usize],
                        1 + rng.below(4) as usize,
                    )
                }
            })
            .collect();
        if std::env::var("KFS_SIM_TRACE").is_ok() {
            eprintln!("round {round}: {take} arrivals, faults {runs:?}");
        }
        let results =
            futures::future::join_all(runs.iter().cloned().map(|f| pass(dir.path(), &source, f)))
                .await;
        fired += runs
            .iter()
            .filter(|f| f.fired.load(std::sync::atomic::Ordering::SeqCst))
            .count();
        for result in results {
            result?;
        }
        let catalog = open_sql_catalog(
            &dir.path().join("catalog.db"),
            &Warehouse::Local(dir.path().join("wh")),
            &S3Settings::default(),
        )
        .await
        .map_err(|e| text(&e))?;
        let marks = watermarks(&catalog).await?;
        for (partition, old) in &last_marks {
            if marks.get(partition).is_none_or(|new| new < old) {
                return Err(format!(
                    "round {round}: partition {partition} moved back from {old} to {:?}",
                    marks.get(partition)
                ));
            }
        }
        last_marks = marks;
    }
    // Quiescence: plain passes.
    let warehouse = Warehouse::Local(dir.path().join("wh"));
    let catalog = open_sql_catalog(
        &dir.path().join("catalog.db"),
        &warehouse,
        &S3Settings::default(),
    )
    .await
    .map_err(|e| text(&e))?;
    let ledger = SqliteLedger::open(&dir.path().join("ledger.db"))
        .await
        .map_err(|e| text(&e))?;
    // Two clean passes in a row, as the schedule would run them: a pass that meets a
    // retryable error (a busy database) is simply followed by the next.
    let (mut clean, mut attempts) = (0, 0);
    while clean < 2 {
        attempts += 1;
        match run_once(
            &source,
            &catalog,
            &ledger,
            &PipelineConfig::default(),
            &|_| {},
        )
        .await
        {
            Ok(_) => clean += 1,
            Err(e) if e.is_retryable() && attempts < 6 => clean = 0,
            Err(e) => return Err(format!("quiescence pass {attempts}: {e}")),
        }
    }
    check(&catalog, &ledger).await?;
    Ok(fired)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_simulation_keeps_exactly_once() {
    let first = env_number("KFS_SIM_FIRST_SEED", 0);
    let seeds = env_number("KFS_SIM_SEEDS", 1000);
    let outcomes: Vec<(u64, Result<usize, String>)> = futures::stream::iter(first..first + seeds)
        .map(|seed| async move { (seed, simulate(seed).await) })
        .buffer_unordered(4)
        .collect()
        .await;
    let fired: usize = outcomes.iter().filter_map(|(_, r)| r.as_ref().ok()).sum();
    let failures: Vec<String> = outcomes
        .iter()
        .filter_map(|(seed, r)| r.as_ref().err().map(|e| format!("seed {seed}: {e}")))
        .collect();
    println!(
        "simulation: {seeds} seeds from {first}, {fired} injected faults fired, {} failed",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "replay with KFS_SIM_FIRST_SEED=N KFS_SIM_SEEDS=1:\n{}",
        failures.join("\n")
    );
}

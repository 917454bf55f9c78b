//! Seeded simulation of the deployment under faults, round after round:
//! - segments arrive partitions interleaved at random, in random batches; in a quarter
//!   of the seeds a partition's segments also arrive out of order (a late one is
//!   quarantined, never taken for committed); a fifth are uploaded twice; in a third
//!   of the seeds one segment has broken bytes: quarantined on its own (the runs of
//!   small segments around it still convert), then skipped by the operator; in a
//!   quarter, one segment's first upload half-fails (a shorter `.kfs`, no `.index`) and
//!   the key is written again, its `.index` a round before its `.kfs`: whichever
//!   version is converted first is the segment's, a later one is quarantined as a
//!   rewrite, never ingested beside it;
//! - S3 events for a random part of each round's arrivals are delivered to a converter,
//!   shuffled and some twice (the others are dropped: the sweep finds them);
//! - one to four committer ticks run at once, each a separate process with its own
//!   connections and a random fault (a crash, error or timeout before or after a random
//!   side effect: segment read, data file write, table creation, ledger insert, etcd
//!   read, catalog commit, marking committed, compaction commit, file delete) or none;
//!   some ticks compact the table and expire snapshots beside the appends;
//! - etcd lags the uploads by up to two segments, is unreachable, or is off, with a
//!   grace period that holds or lets unconfirmed segments through;
//! - faults include transient failures that arrive marked non-retryable (as
//!   iceberg-rust's storage layer reports them) and throttling;
//! - in three quarters of the seeds a second feed collides with the table (a topic that
//!   sanitizes alike, one mapped to it by a many-to-one rule, or the same topic under
//!   another namespace) and uploads segments beside it; whichever creates the table
//!   owns it, the other is refused;
//! - processes differ in whether their commits merge small files, so two attempts at
//!   one commit lay it out differently; in half the seeds, maintenance also removes
//!   orphans (an age window of one to three seconds) beside the appends.
//!
//! - in half the seeds another engine maintains the table beside the pipeline, at
//!   random points of random rounds: a snapshot of its own without our summary (the
//!   same rows, as a rewrite leaves them), then every other snapshot expired, ours
//!   included (`faults/outside.rs`); a mirror's change log alike.
//!
//! - in a third of the seeds the table is in upsert mode and the segments carry keyed
//!   records (four keys per partition: updates within a segment and across segments,
//!   tombstones, keys inserted again), so every commit is a row delta deleting what it
//!   supersedes, raced by the other processes' commits and compactions; in odd seeds
//!   the changes are JSON values keyed by their `id` field (`upsert_key id`, a
//!   tombstone's key from its JSON record key) instead of by the record key, half of
//!   them (seeds 3 mod 4) keeping the mirror's change log beside it, which must hold
//!   every record exactly once; in seeds 2 mod 4 the table is format v3, its deletes
//!   deletion vectors (`KFS_SIM_KEYED=1`: in every seed).
//!
//! After every round no partition watermark has moved backwards; after quiescence
//! (plain ticks with etcd caught up, then orphan cleanup) every record of the table's
//! owner is in the table exactly once or its segment is quarantined as late (never for
//! a transient fault) or skipped, no file is registered twice, every referenced file exists, the
//! ledger agrees with the table, and no entry of the refused feed is committed; a
//! mirror reads, its deletes applied, as the fold of the records it holds: each key's
//! last row once, none for a key whose last record is a tombstone.
//!
//! `KFS_SIM_SEEDS` seeds from `KFS_SIM_FIRST_SEED` (default 0): by default 100 in a
//! debug build (every `cargo test`) and 1,000 in a release build; `scripts/simulation.sh`
//! runs 1,000 on the debug build (CI: 400), and a soak as many as it asks for. A seed
//! fixes the arrivals, events, etcd, faults and processes of every round; how the
//! processes of a round interleave is left to the runtime, so a failing seed replays
//! its scenario with `KFS_SIM_FIRST_SEED=N KFS_SIM_SEEDS=1`, and replays exactly, call
//! for call, with `KFS_SIM_SERIAL=1` too (the processes of each round one after
//! another, as the seed lists them). `KFS_SIM_TRACE=1` prints each round.

use crate::faults;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use faults::{
    Faults, MODES, PARTITIONS, Process, RECORDS, Records, SEGMENTS, STEPS, TOPICS, break_segment,
    check, open_catalog, orders_key, put_feed_segment, put_first_version, quiesce, watermarks,
};
use futures::StreamExt;
use kfs_core::Ledger;
use kfs_core::MaintenancePolicy;
use kfs_core::MemorySource;
use kfs_core::SqliteLedger;
use kfs_plan::crosscheck::{CrossCheckPolicy, EtcdState, UnreachablePolicy};
use kfs_plan::keys::{SegmentFile, SegmentKey};
use kfs_plan::naming::{TableNaming, TablePattern};

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

/// No fault one time in `none_in`, else a random mode at a random step, at one of
/// its first four occurrences.
fn random_fault(rng: &mut Rng, none_in: u64) -> Arc<Faults> {
    if rng.below(none_in) == 0 {
        return Faults::none();
    }
    Faults::new(
        STEPS[rng.below(STEPS.len() as u64) as usize],
        MODES[rng.below(MODES.len() as u64) as usize],
        1 + rng.below(4) as usize,
    )
}

/// What one process does in a round.
#[derive(Debug)]
enum Work {
    /// A committer tick, maintaining the table after it or not, merging small files
    /// in its commits or not.
    Tick { maintain: bool, coalesce: bool },
    /// The converter, handling S3 events for these segments.
    Events(Vec<String>),
    /// Another engine's maintenance: a rewrite without our summary (this snapshot
    /// id), then every other snapshot expired.
    Outside(i64),
    /// A committer woken for these tables (the converter's wake-ups: duplicated, late,
    /// reordered or naming a table with nothing pending, as the round draws them; a
    /// lost one is a round without it), committing them alone, without maintenance;
    /// paced by this minimum interval (seconds): the tables committed sooner are held
    /// (`kfs_core::hold_early`, reading the last commit through the faulty catalog),
    /// which commits nothing for them, as a lost wake-up.
    Wakeup(BTreeSet<String>, u64),
}

/// The tables of a wake-up that pacing lets commit now: those not held for having
/// been committed less than `min_interval` seconds ago (a held one is delivered again
/// later, which here is a later round's wake-up or tick).
async fn paced(
    process: &Process<'_>,
    tables: &BTreeSet<String>,
    min_interval: u64,
) -> BTreeSet<String> {
    let queue = kfs_core::MemoryWakeups::default();
    let receipts = tables
        .iter()
        .map(|table| (table.clone(), vec![format!("receipt-{table}")]))
        .collect();
    let paced = kfs_core::hold_early(
        &process.catalog,
        &queue,
        &receipts,
        std::time::Duration::from_secs(min_interval),
        kfs_core::now_ms(),
    )
    .await;
    paced
        .into_iter()
        .filter(|(_, outcome)| !matches!(outcome, kfs_core::Paced::Held(_)))
        .map(|(table, _)| table)
        .collect()
}

/// What one seed saw: injected faults that fired, segments quarantined as late,
/// whether its table was a mirror.
type SeedOutcome = Result<(usize, i64, bool), String>;

/// One seed; returns how many injected faults fired and how many segments ended
/// quarantined as late.
async fn simulate(seed: u64) -> SeedOutcome {
    let text = |e: &dyn std::fmt::Display| e.to_string();
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().map_err(|e| text(&e))?;
    let source = MemorySource::default();
    let ledger = SqliteLedger::open(&dir.path().join("ledger.db"))
        .await
        .map_err(|e| text(&e))?;
    // The broker uploads a partition's segments in order, partitions interleaved at
    // random; in a quarter of the seeds, out of order as well.
    let in_order = rng.below(4) != 0;
    // A second feed of the same table, if any: (namespace, topic), and the naming
    // that maps it there.
    let mut naming = TableNaming::default();
    // In a third of the seeds the table mirrors keyed records (upsert mode): every
    // commit a row delta deleting what it supersedes.
    // (`KFS_SIM_KEYED=1`: every seed, for a soak of the mirror alone.)
    let keyed = rng.below(3) == 0 || std::env::var_os("KFS_SIM_KEYED").is_some();
    // Half the mirrors (odd seeds) are keyed by a JSON value field instead of the
    // record key: the same changes, each key's row found by its `id` column.
    let kind = match (keyed, seed % 2 == 1) {
        // Half of those (seeds 2 mod 4) on a format v3 table: deletion vectors.
        (true, false) => {
            naming = match seed % 4 == 2 {
                true => faults::vector_naming()?,
                false => faults::upsert_naming()?,
            };
            Records::Keyed
        }
        // Half of those (seeds 3 mod 4) keep the mirror's change log beside it.
        (true, true) => {
            naming = match seed % 4 == 3 {
                true => faults::logged_naming()?,
                false => faults::field_key_naming()?,
            };
            Records::FieldKeyed
        }
        (false, _) => Records::Plain,
    };
    let collider: Option<(&str, &str)> = match rng.below(4) {
        0 => None,
        1 => Some(("ns", "Orders")),
        2 => {
            let rule = TablePattern::new("orders(-eu)?", "orders").map_err(|e| text(&e))?;
            naming.patterns.push(rule);
            Some(("ns", "orders-eu"))
        }
        _ => Some(("ns2", "orders")),
    };
    // In half the seeds another engine maintains the table too (S3 Tables, a Glue
    // optimizer, a Spark job): rewrites without our summary, expiring our snapshots.
    let outside_engine = rng.below(2) == 0;
    let orphan_age =
        (rng.below(2) == 0).then(|| std::time::Duration::from_millis(1000 + rng.below(2000)));
    // In a third of the seeds one segment (not a partition's last: a skipped segment
    // is passed when the next one commits) is uploaded with broken bytes, inside what
    // would be a run.
    let broken: Option<(i32, i64)> = (rng.below(3) == 0).then(|| {
        (
            rng.below(PARTITIONS as u64) as i32,
            rng.below(SEGMENTS as u64 - 1) as i64,
        )
    });
    // In a quarter of the seeds one segment's first upload half-fails: its `.kfs` lands
    // with other content (one record short), its `.index` does not. The broker,
    // restarted, writes the key again; its `.index` lands first, its `.kfs` a round
    // later. Between, the key is complete with the first content: whichever version a
    // process converts first is the segment's, and a later one is a rewrite,
    // quarantined for an operator, never ingested beside it.
    let rewritten: Option<(i32, i64)> = (rng.below(4) == 0)
        .then(|| {
            (
                rng.below(PARTITIONS as u64) as i32,
                rng.below(SEGMENTS as u64 - 1) as i64,
            )
        })
        .filter(|segment| Some(*segment) != broken);
    let mut rewrite_due: Vec<(i32, i64)> = Vec::new();
    let mut remaining: Vec<Vec<i64>> = (0..PARTITIONS).map(|_| (0..SEGMENTS).collect()).collect();
    let mut arrivals: Vec<(i32, i64)> = Vec::new();
    while arrivals.len() < (PARTITIONS as i64 * SEGMENTS) as usize {
        let partition = rng.below(PARTITIONS as u64) as usize;
        if remaining[partition].is_empty() {
            continue;
        }
        let pick = if in_order {
            0
        } else {
            rng.below(remaining[partition].len() as u64) as usize
        };
        arrivals.push((partition as i32, remaining[partition].remove(pick)));
    }
    let mut uploaded_next: Vec<i64> = vec![0; PARTITIONS as usize];
    let mut etcd_next: Vec<i64> = vec![0; PARTITIONS as usize];
    let mut last_marks = kfs_plan::offsets::OffsetMap::new();
    let mut fired = 0;
    let trace = std::env::var("KFS_SIM_TRACE").is_ok();
    let serial = std::env::var("KFS_SIM_SERIAL").is_ok();
    for round in 0..ROUNDS {
        let take = if round + 1 == ROUNDS {
            arrivals.len()
        } else {
            rng.below(arrivals.len() as u64 + 1) as usize
        };
        let mut events = Vec::new();
        for (partition, index) in rewrite_due.drain(..) {
            put_feed_segment(&source, "ns", "orders", partition, index, kind)
                .map_err(|e| text(&e))?;
            events.push(orders_key(partition, index).object_key(SegmentFile::Data));
        }
        for (partition, index) in arrivals.drain(..take) {
            put_feed_segment(&source, "ns", "orders", partition, index, kind)
                .map_err(|e| text(&e))?;
            if broken == Some((partition, index)) {
                break_segment(&source, ("ns", "orders"), partition, index, kind)
                    .map_err(|e| text(&e))?;
            }
            if rewritten == Some((partition, index)) {
                put_first_version(&source, partition, index, kind).map_err(|e| text(&e))?;
                rewrite_due.push((partition, index));
            }
            let next = &mut uploaded_next[partition as usize];
            *next = (*next).max((index + 1) * RECORDS);
            let times = if rng.below(5) == 0 {
                // Uploaded again with the same bytes (an S3 event delivered twice).
                put_feed_segment(&source, "ns", "orders", partition, index, kind)
                    .map_err(|e| text(&e))?;
                if broken == Some((partition, index)) {
                    break_segment(&source, ("ns", "orders"), partition, index, kind)
                        .map_err(|e| text(&e))?;
                }
                2
            } else {
                1
            };
            let mut keys = vec![SegmentKey {
                namespace: "ns".into(),
                topic: "orders".into(),
                partition,
                base_offset: index * RECORDS,
            }];
            // The other feed uploads the same layout (whichever feed owns the table,
            // all of its records are due there).
            if let Some((namespace, topic)) = collider {
                put_feed_segment(&source, namespace, topic, partition, index, kind)
                    .map_err(|e| text(&e))?;
                if broken == Some((partition, index)) {
                    break_segment(&source, (namespace, topic), partition, index, kind)
                        .map_err(|e| text(&e))?;
                }
                keys.push(SegmentKey {
                    namespace: namespace.into(),
                    topic: topic.into(),
                    partition,
                    base_offset: index * RECORDS,
                });
            }
            // Each object's event is delivered (perhaps twice) or dropped.
            for key in &keys {
                for file in [SegmentFile::Data, SegmentFile::Index] {
                    for _ in 0..times {
                        if rng.below(3) != 0 {
                            events.push(key.object_key(file));
                        }
                    }
                }
            }
        }
        for i in (1..events.len()).rev() {
            events.swap(i, rng.below(i as u64 + 1) as usize);
        }
        // etcd: written after the uploads, best effort, so it lags; or unreachable; or off.
        for (etcd, uploaded) in etcd_next.iter_mut().zip(&uploaded_next) {
            let lag = rng.below(3) as i64 * RECORDS;
            *etcd = (*etcd).max(uploaded - lag);
        }
        let etcd = match rng.below(4) {
            0 => EtcdState::Disabled,
            1 => EtcdState::Unreachable("simulated outage".into()),
            _ => EtcdState::Read {
                topics: TOPICS
                    .iter()
                    .map(|t| (*t).to_owned())
                    .collect::<BTreeSet<_>>(),
                next_offsets: TOPICS
                    .iter()
                    .flat_map(|topic| {
                        etcd_next
                            .iter()
                            .enumerate()
                            .map(|(p, next)| (((*topic).to_owned(), p as i32), *next))
                    })
                    .collect(),
            },
        };
        let crosscheck = CrossCheckPolicy {
            grace_ms: if rng.below(2) == 0 { 0 } else { 300_000 },
            on_unreachable: if rng.below(2) == 0 {
                UnreachablePolicy::Hold
            } else {
                UnreachablePolicy::Proceed
            },
        };
        let maintenance = MaintenancePolicy {
            max_snapshots: Some(2 + rng.below(4) as usize),
            max_manifests: 2,
            orphan_age,
            force_orphan_age: true,
            orphan_interval: std::time::Duration::ZERO,
            ..MaintenancePolicy::default()
        };
        let processes = 1 + rng.below(4);
        let mut work: Vec<(Work, Arc<Faults>)> = (0..processes)
            .map(|_| {
                let faults = random_fault(&mut rng, 3);
                let maintain = rng.below(3) == 0;
                let coalesce = rng.below(2) == 0;
                (Work::Tick { maintain, coalesce }, faults)
            })
            .collect();
        if !events.is_empty() {
            let faults = random_fault(&mut rng, 2);
            work.push((Work::Events(events), faults));
        }
        // Wake-ups: each table of the topics (or one that does not exist) drawn, up
        // to two committers woken at once, beside the ticks.
        for _ in 0..rng.below(3) {
            let mut tables: BTreeSet<String> = TOPICS
                .iter()
                .filter(|_| rng.below(2) == 0)
                .map(|topic| naming.table_for(topic).to_string())
                .collect();
            if rng.below(4) == 0 {
                tables.insert("kafscale.no_such_table".to_owned());
            }
            if !tables.is_empty() {
                let min_interval = [0, 0, 1, 3600][rng.below(4) as usize];
                work.push((
                    Work::Wakeup(tables, min_interval),
                    random_fault(&mut rng, 3),
                ));
            }
        }
        if outside_engine && rng.below(2) == 0 {
            let snapshot_id = 1 + rng.below(i64::MAX as u64 - 1) as i64;
            work.push((Work::Outside(snapshot_id), Faults::none()));
        }
        if trace {
            eprintln!("round {round}: {take} arrivals, {etcd:?}, {crosscheck:?}, {work:?}");
        }
        let runs = work.iter().map(|(work, faults)| {
            let (dir, source, ledger, etcd, maintenance, naming) =
                (dir.path(), &source, &ledger, &etcd, &maintenance, &naming);
            async move {
                if let Work::Outside(snapshot_id) = work {
                    let outcome = faults::outside::maintain_outside(dir, *snapshot_id).await?;
                    // It maintains a mirror's change log as well, when there is one.
                    let log = TableNaming::default().table_for("orders").change_log();
                    let log = faults::outside::maintain_outside_table(dir, &log, *snapshot_id);
                    let logged = log.await?;
                    if trace {
                        eprintln!("  outside engine: {outcome:?}, change log {logged:?}");
                    }
                    return Ok(());
                }
                let mut process = Process::open(dir, source, ledger, faults.clone()).await?;
                process.naming = naming.clone();
                if let Work::Tick { coalesce, .. } = work {
                    process.coalesce = *coalesce;
                }
                if let Work::Wakeup(tables, min_interval) = work {
                    process.woken_for = Some(paced(&process, tables, *min_interval).await);
                }
                // A process that fails (injected, or losing a race) leaves what it leaves.
                let outcome = match work {
                    Work::Tick { maintain, .. } => {
                        process
                            .tick(etcd, crosscheck, maintain.then_some(maintenance))
                            .await
                    }
                    Work::Wakeup(..) => process.tick(etcd, crosscheck, None).await,
                    Work::Events(keys) => process.convert_events(keys).await,
                    Work::Outside(_) => Ok(()),
                };
                if trace && let Err(e) = outcome {
                    eprintln!("  {work:?}: {}", e.message);
                }
                Ok::<(), String>(())
            }
        });
        let results = if serial {
            let mut results = Vec::new();
            for run in runs {
                results.push(run.await);
            }
            results
        } else {
            futures::future::join_all(runs).await
        };
        fired += work
            .iter()
            .filter(|(_, f)| f.fired.load(Ordering::SeqCst))
            .count();
        for result in results {
            result?;
        }
        let marks = watermarks(&open_catalog(dir.path()).await?).await?;
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
    for (partition, index) in rewrite_due.drain(..) {
        put_feed_segment(&source, "ns", "orders", partition, index, kind).map_err(|e| text(&e))?;
    }
    quiesce(dir.path(), &source, &ledger, &naming).await?;
    if let Some((partition, index)) = broken {
        // Quarantined in the feed that owns the table, holding its partition: the
        // operator skips it (the other feed's copy waits, unconverted, refused).
        let mut skipped = 0;
        for (namespace, topic) in std::iter::once(("ns", "orders")).chain(collider) {
            let segment = SegmentKey {
                namespace: namespace.into(),
                topic: topic.into(),
                partition,
                base_offset: index * RECORDS,
            }
            .object_key(SegmentFile::Data);
            if ledger
                .skip_quarantined(&segment, 0)
                .await
                .map_err(|e| text(&e))?
            {
                skipped += 1;
            }
        }
        if skipped != 1 {
            return Err(format!(
                "{skipped} copies of the broken segment {partition}/{index} were quarantined, not one"
            ));
        }
        quiesce(dir.path(), &source, &ledger, &naming).await?;
    }
    let catalog = open_catalog(dir.path()).await?;
    let late = check(&catalog, &ledger).await?;
    Ok((fired, late, kind != Records::Plain))
}

/// Seeds run on two threads, each with a single-threaded runtime running two seeds at
/// a time. Not one multi-threaded runtime: sqlx 0.8's pool maintenance task reads its
/// idle count while another thread's release has popped a connection before counting
/// it back in, sees the count wrapped below zero, and spins on its worker forever
/// (holding whatever task waits in that worker's slot). On one thread per runtime the
/// release and the read never interleave.
#[test]
fn seeded_simulation_keeps_exactly_once() {
    let first = env_number("KFS_SIM_FIRST_SEED", 0);
    let default_seeds = if cfg!(debug_assertions) { 100 } else { 1000 };
    let seeds = env_number("KFS_SIM_SEEDS", default_seeds);
    let next = std::sync::atomic::AtomicU64::new(first);
    let claim = || {
        let seed = next.fetch_add(1, Ordering::SeqCst);
        (seed < first + seeds).then_some(seed)
    };
    let outcomes: Vec<(u64, SeedOutcome)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap_or_else(|e| panic!("runtime: {e}"));
                    runtime.block_on(
                        futures::stream::iter(std::iter::from_fn(claim))
                            .map(|seed| async move { (seed, simulate(seed).await) })
                            .buffer_unordered(2)
                            .collect::<Vec<_>>(),
                    )
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|worker| {
                worker
                    .join()
                    .unwrap_or_else(|_| panic!("a worker panicked"))
            })
            .collect()
    });
    let fired: usize = outcomes
        .iter()
        .filter_map(|(_, r)| r.as_ref().ok().map(|(fired, _, _)| fired))
        .sum();
    let late: i64 = outcomes
        .iter()
        .filter_map(|(_, r)| r.as_ref().ok().map(|(_, late, _)| late))
        .sum();
    let mirrors = outcomes
        .iter()
        .filter(|(_, r)| r.as_ref().is_ok_and(|(_, _, mirror)| *mirror))
        .count();
    let failures: Vec<String> = outcomes
        .iter()
        .filter_map(|(seed, r)| r.as_ref().err().map(|e| format!("seed {seed}: {e}")))
        .collect();
    println!(
        "simulation: {seeds} seeds from {first} ({mirrors} mirrors read as their fold), {fired} injected faults fired, {late} late segments quarantined, {} failed",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "replay with KFS_SIM_FIRST_SEED=N KFS_SIM_SEEDS=1:\n{}",
        failures.join("\n")
    );
}

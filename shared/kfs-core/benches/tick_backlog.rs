//! Macro benchmark: does a committer tick stay bounded as retention and backlog grow?
//!
//! A table `held` has `KFS_BENCH_PARTITIONS` partitions (default 10), each with
//! `retained / partitions` committed segments still in the source below its watermark
//! (retention keeps them) and `pending / partitions` converted segments waiting in the
//! ledger behind a quarantined one at the watermark: the backlog an operator's fix
//! releases. A table `live` gets `KFS_BENCH_NEW` new segments (default 20) the tick
//! converts and commits. One `run_tick` per size, with a deadline of 60 seconds, on an
//! in-memory source that counts its listing requests as S3 bills them (one per call
//! and per page of 1,000 keys) and an in-memory ledger that counts what it is asked.
//!
//! Prints, per size: the tick's wall time, the source's listing requests, and the
//! ledger's point reads, batch-read items, key reads and full-entry reads; then checks
//! that `live` committed every new segment and `held` stayed held.
//!
//! `TMPDIR=/dev/shm cargo bench -p kfs-core --bench tick_backlog`
//! (`KFS_BENCH_RETAINED=10000,100000,1000000`, `KFS_BENCH_PENDING=100000` to choose
//! the sizes; the setup, not the tick, takes most of the run).
//!
//! The retained segments are empty objects: the tick must never read them, and a
//! configured start (`start_offsets`) puts the table's first commit above them, so
//! the setup need not convert a million segments. The pending entries' data files are
//! descriptions only: the tick holds them behind the quarantine and never reads them.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{BenchResult, tiny_segment};
use kfs_core::testing::{Probe, Probed, SqlTableSwap, open_sql_catalog};
use kfs_core::{
    CatalogAccess, EntryState, LOCAL_CATALOG_NAME, Ledger, LedgerEntry, LedgerError, Listing,
    MemoryLedger, MemorySource, PipelineConfig, S3Settings, Warehouse, WorkKey, now_ms, run_pass,
    run_tick,
};
use kfs_plan::keys::{SegmentFile, SegmentKey};
use kfs_plan::naming::TableNaming;

/// Offsets per segment (the tiny segments hold 10 records).
const SEGMENT_OFFSETS: i64 = 10;

/// What the ledger was asked.
#[derive(Debug, Default)]
struct Asked {
    gets: AtomicU64,
    batch_items: AtomicU64,
    key_reads: AtomicU64,
    keys: AtomicU64,
    scanned_entries: AtomicU64,
}

impl Asked {
    fn snapshot(&self) -> [u64; 5] {
        [
            self.gets.load(Ordering::Relaxed),
            self.batch_items.load(Ordering::Relaxed),
            self.key_reads.load(Ordering::Relaxed),
            self.keys.load(Ordering::Relaxed),
            self.scanned_entries.load(Ordering::Relaxed),
        ]
    }
}

/// Counts what the ledger is asked.
impl Probe<MemoryLedger> for Asked {
    async fn get(
        &self,
        inner: &MemoryLedger,
        segment: &str,
    ) -> Result<Option<LedgerEntry>, LedgerError> {
        self.gets.fetch_add(1, Ordering::Relaxed);
        inner.get(segment).await
    }
    async fn scan(
        &self,
        inner: &MemoryLedger,
        state: Option<&str>,
        table: Option<&str>,
    ) -> Result<Listing, LedgerError> {
        let listing = inner.scan(state, table).await?;
        self.scanned_entries
            .fetch_add(listing.entries.len() as u64, Ordering::Relaxed);
        Ok(listing)
    }
    async fn work_keys(
        &self,
        inner: &MemoryLedger,
        state: &str,
        table: &str,
    ) -> Result<Vec<WorkKey>, LedgerError> {
        let keys = inner.work_keys(state, table).await?;
        self.key_reads.fetch_add(1, Ordering::Relaxed);
        self.keys.fetch_add(keys.len() as u64, Ordering::Relaxed);
        Ok(keys)
    }
    async fn get_many(
        &self,
        inner: &MemoryLedger,
        segments: &[String],
    ) -> Result<Listing, LedgerError> {
        self.batch_items
            .fetch_add(segments.len() as u64, Ordering::Relaxed);
        inner.get_many(segments).await
    }
}

fn key(topic: &str, partition: i32, base_offset: i64) -> SegmentKey {
    SegmentKey {
        namespace: "ns".into(),
        topic: topic.into(),
        partition,
        base_offset,
    }
}

/// Puts a segment's two objects.
fn put(source: &MemorySource, key: &SegmentKey, kfs: Vec<u8>) {
    source.put(&key.object_key(SegmentFile::Data), kfs);
    source.put(&key.object_key(SegmentFile::Index), Vec::new());
}

/// One measured tick.
struct Measured {
    elapsed: Duration,
    list_requests: u64,
    asked: [u64; 5],
    live_committed: usize,
    held_holds: usize,
}

async fn measure(
    retained: usize,
    pending: usize,
    partitions: i32,
    new: usize,
) -> BenchResult<Measured> {
    let dir = tempfile::tempdir()?;
    let database = dir.path().join("catalog.db");
    let warehouse = Warehouse::Local(dir.path().join("wh"));
    let catalog = open_sql_catalog(&database, &warehouse, &S3Settings::default()).await?;
    let swap = SqlTableSwap::open(&database, LOCAL_CATALOG_NAME).await?;
    let source = MemorySource::default();
    let memory = MemoryLedger::default();
    let ledger = Probed {
        inner: &memory,
        probe: Asked::default(),
    };
    let naming = TableNaming::default();
    let per_partition = (retained / partitions as usize) as i64;
    let first = per_partition * SEGMENT_OFFSETS;

    // The first commit: one real segment per partition, above the retained range.
    for partition in 0..partitions {
        put(
            &source,
            &key("held", partition, first),
            tiny_segment(first)?,
        );
    }
    put(&source, &key("live", 0, 0), tiny_segment(0)?);
    let starts: BTreeMap<i32, i64> = (0..partitions).map(|p| (p, first)).collect();
    let config = PipelineConfig {
        naming: naming.clone(),
        start_offsets: BTreeMap::from([("held".to_owned(), starts)]),
        ..PipelineConfig::default()
    };
    let report = run_pass(&source, &catalog, &swap, &ledger, &config, &|_| {}).await?;
    if report.has_failures() || report.tables.len() != 2 {
        return Err(format!("setup commit failed: {report:?}").into());
    }

    // Retention: the committed segments below the watermark stay in the source.
    for partition in 0..partitions {
        for i in 0..per_partition {
            put(
                &source,
                &key("held", partition, i * SEGMENT_OFFSETS),
                Vec::new(),
            );
        }
    }
    // The backlog: a quarantined segment at each watermark, converted ones behind it.
    let held = naming.table_for("held").to_string();
    let watermark = first + SEGMENT_OFFSETS;
    let now = now_ms();
    let entry = |k: &SegmentKey, state: EntryState| LedgerEntry {
        segment: k.object_key(SegmentFile::Data),
        etag: String::new(),
        table: held.clone(),
        topic: "held".into(),
        partition: k.partition,
        base_offset: k.base_offset,
        last_offset: k.base_offset + SEGMENT_OFFSETS - 1,
        records: 10,
        bytes: 2_000,
        data_files: vec![format!(
            r#"{{"file_path":"file:///nowhere/{}.parquet","file_format":"PARQUET","record_count":10}}"#,
            k.base_offset
        )],
        dead_letters: Default::default(),
        members: Vec::new(),
        state,
        created_ms: now,
        updated_ms: now,
    };
    for partition in 0..partitions {
        let quarantined = key("held", partition, watermark);
        put(&source, &quarantined, Vec::new());
        let error = "bench: held".to_owned();
        ledger
            .insert(&entry(&quarantined, EntryState::Quarantined { error }))
            .await?;
        for i in 1..=(pending / partitions as usize) as i64 {
            let waiting = key("held", partition, watermark + i * SEGMENT_OFFSETS);
            put(&source, &waiting, Vec::new());
            ledger.insert(&entry(&waiting, EntryState::Pending)).await?;
        }
    }
    // New segments of the live table.
    for i in 1..=new as i64 {
        let base = i * SEGMENT_OFFSETS;
        put(&source, &key("live", 0, base), tiny_segment(base)?);
    }

    let config = PipelineConfig {
        naming,
        deadline: Some(Instant::now() + Duration::from_secs(60)),
        commit_reserve: Duration::from_secs(20),
        ..PipelineConfig::default()
    };
    let requests_before = source.list_requests();
    let asked_before = ledger.probe.snapshot();
    let started = Instant::now();
    let tick = run_tick(
        &source,
        CatalogAccess {
            catalog: &catalog,
            swap: &swap,
        },
        &ledger,
        &config,
        None,
    )
    .await?;
    let elapsed = started.elapsed();
    let asked_after = ledger.probe.snapshot();
    let asked: Vec<u64> = asked_after
        .iter()
        .zip(asked_before)
        .map(|(after, before)| after - before)
        .collect();
    let live = outcome_of(&tick.pass, "live")?;
    let held_outcome = outcome_of(&tick.pass, "held")?;
    Ok(Measured {
        elapsed,
        list_requests: source.list_requests() - requests_before,
        asked: [asked[0], asked[1], asked[2], asked[3], asked[4]],
        live_committed: live.segments,
        held_holds: held_outcome.holds.len(),
    })
}

fn outcome_of<'a>(
    pass: &'a kfs_core::PassReport,
    topic: &str,
) -> BenchResult<&'a kfs_core::CommitOutcome> {
    let name = TableNaming::default().table_for(topic).to_string();
    pass.tables
        .get(&name)
        .ok_or_else(|| format!("{name} was not committed: {pass:?}").into())
}

fn sizes(variable: &str, default: &[usize]) -> BenchResult<Vec<usize>> {
    match std::env::var(variable) {
        Ok(text) => text
            .split(',')
            .map(|n| {
                n.trim()
                    .parse()
                    .map_err(|e| format!("{variable}: {e}").into())
            })
            .collect(),
        Err(_) => Ok(default.to_vec()),
    }
}

fn main() -> BenchResult<()> {
    let retained = sizes("KFS_BENCH_RETAINED", &[10_000, 100_000, 1_000_000])?;
    let pending = sizes("KFS_BENCH_PENDING", &[100_000])?;
    let partitions: i32 = std::env::var("KFS_BENCH_PARTITIONS")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(10);
    let new: usize = std::env::var("KFS_BENCH_NEW")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(20);
    let runtime = tokio::runtime::Runtime::new()?;
    println!(
        "| retained segments | pending entries | tick | list requests | ledger gets | batch-read items | key reads (keys) | entries scanned | live committed | held partitions |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for &pending in &pending {
        for &retained in &retained {
            let m = runtime.block_on(measure(retained, pending, partitions, new))?;
            println!(
                "| {retained} | {pending} | {:.0} ms | {} | {} | {} | {} ({}) | {} | {} of {new} | {} of {partitions} |",
                m.elapsed.as_secs_f64() * 1000.0,
                m.list_requests,
                m.asked[0],
                m.asked[1],
                m.asked[2],
                m.asked[3],
                m.asked[4],
                m.live_committed,
                m.held_holds,
            );
            if m.live_committed != new || m.held_holds != partitions as usize {
                return Err("the tick did not commit the live table or hold the held one".into());
            }
        }
    }
    Ok(())
}

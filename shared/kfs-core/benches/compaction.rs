//! Macro benchmark: compaction throughput, copying column chunks versus decoding and
//! re-encoding them.
//!
//! Builds a table of `KFS_BENCH_FILES` (default 16) data files of about 8 MiB each
//! (one row group each, 400-byte values), then compacts it into one file twice on
//! fresh copies: with every row group copied as it is, and with every row group
//! decoded and re-encoded. Prints MiB/s of input file bytes, single table, one
//! process.
//!
//! `cargo bench -p kfs-core --bench compaction`

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use kfs_core::catalog::{
    LOCAL_CATALOG_NAME, S3Settings, Warehouse, ensure_topic_table, open_sql_catalog, table_ident,
};
use kfs_core::committer::{CommitSettings, commit_table};
use kfs_core::ledger::MemoryLedger;
use kfs_core::maintenance::compact_table;
use kfs_core::pipeline::{ingest_segment, now_ms};
use kfs_core::source::{MemorySource, SegmentSource};
use kfs_core::table_commit::SqlTableSwap;
use kfs_plan::compaction::CompactionPolicy;
use kfs_plan::keys::SegmentKey;
use kfs_plan::naming::TableNaming;
use kfs_segment::{BatchSpec, Compression, DecodeLimits, OwnedRecord, encode_segment};

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

const RECORDS: i64 = 20_000;

fn segment(base: i64) -> BenchResult<Vec<u8>> {
    let mut state = base as u64 ^ 0x9e37_79b9_7f4a_7c15;
    let records = (base..base + RECORDS)
        .map(|offset| {
            let value: Vec<u8> = (0..400)
                .map(|i| {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1);
                    // Half random bytes, half text: compresses about 2:1.
                    if i % 2 == 0 {
                        (state >> 56) as u8
                    } else {
                        b'a' + (i % 26) as u8
                    }
                })
                .collect();
            OwnedRecord {
                offset,
                timestamp_ms: 1_700_000_000_000 + offset,
                key: Some(format!("customer-{}", offset % 1000).into_bytes()),
                value: Some(value),
                headers: vec![("source".into(), Some(b"bench".to_vec()))],
            }
        })
        .collect();
    Ok(encode_segment(&[BatchSpec::new(records, Compression::None)], 1)?.kfs)
}

/// A table of `files` data files, and the time to compact it into one.
async fn compact(files: usize, copy: bool) -> BenchResult<(u64, f64, String)> {
    let dir = tempfile::tempdir()?;
    let database = dir.path().join("catalog.db");
    let warehouse = Warehouse::Local(dir.path().join("wh"));
    let catalog = open_sql_catalog(&database, &warehouse, &S3Settings::default()).await?;
    let swap = SqlTableSwap::open(&database, LOCAL_CATALOG_NAME).await?;
    let ledger = MemoryLedger::default();
    let source = MemorySource::default();
    let name = TableNaming::default().table_for("bench");
    let table = ensure_topic_table(&catalog, &name, "bench").await?;
    let mut listing = BTreeMap::from([(0, BTreeSet::new())]);
    let mut input_bytes = 0;
    for i in 0..files {
        let base = i as i64 * RECORDS;
        let key = SegmentKey {
            namespace: "ns".into(),
            topic: "bench".into(),
            partition: 0,
            base_offset: base,
        };
        source.put(&key.to_string(), segment(base)?);
        let object = source
            .stat(&key.to_string())
            .await?
            .ok_or("segment vanished")?;
        let entry = ingest_segment(
            &source,
            &table,
            &name,
            &ledger,
            &key,
            &object,
            DecodeLimits::default(),
        )
        .await?;
        input_bytes += entry.bytes;
        listing.entry(0).or_default().insert(base);
    }
    commit_table(
        &catalog,
        &ledger,
        &name,
        "bench",
        &listing,
        &CommitSettings::default(),
        now_ms(),
    )
    .await?;
    let policy = CompactionPolicy {
        copy_row_group_min_bytes: if copy { 0 } else { u64::MAX },
        ..CompactionPolicy::for_target(1 << 40)
    };
    let started = Instant::now();
    let report = compact_table(
        &catalog,
        &swap,
        &table_ident(&name),
        Some(policy),
        None,
        now_ms(),
    )
    .await?;
    let seconds = started.elapsed().as_secs_f64();
    let detail = format!(
        "{} files -> {}, {} row groups copied, {} re-encoded, {} -> {} bytes",
        report.files_removed,
        report.files_added,
        report.row_groups_copied,
        report.row_groups_reencoded,
        report.bytes_read,
        report.bytes_written
    );
    Ok((input_bytes, seconds, detail))
}

fn main() -> BenchResult<()> {
    let files: usize = std::env::var("KFS_BENCH_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16);
    let runtime = tokio::runtime::Runtime::new()?;
    let mut rates = Vec::new();
    for copy in [true, false] {
        let (bytes, seconds, detail) = runtime.block_on(compact(files, copy))?;
        let rate = bytes as f64 / (1 << 20) as f64 / seconds;
        rates.push(rate);
        println!(
            "compaction {}: {:.1} MiB in {:.3} s = {rate:.0} MiB/s ({detail})",
            if copy {
                "copy column chunks"
            } else {
                "decode + re-encode"
            },
            bytes as f64 / (1 << 20) as f64,
            seconds
        );
    }
    if let [copy, reencode] = rates[..] {
        println!(
            "compaction copy / re-encode: {:.1}x",
            copy / reencode.max(1e-9)
        );
    }
    Ok(())
}

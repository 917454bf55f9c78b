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

mod common;

use std::time::Instant;

use common::{BenchResult, BenchTable};
use kfs_core::compact_table;
use kfs_core::now_ms;
use kfs_core::table_ident;
use kfs_plan::compaction::CompactionPolicy;
use kfs_segment::{BatchSpec, Compression, OwnedRecord, encode_segment};

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
    let mut bench = BenchTable::new().await?;
    let mut input_bytes = 0;
    for i in 0..files {
        let base = i as i64 * RECORDS;
        input_bytes += bench.add_segment(base, segment(base)?).await?.bytes;
    }
    bench.commit().await?;
    let policy = CompactionPolicy {
        copy_row_group_min_bytes: if copy { 0 } else { u64::MAX },
        ..CompactionPolicy::for_target(1 << 40)
    };
    let started = Instant::now();
    let report = compact_table(
        &bench.catalog,
        &bench.swap,
        &table_ident(&bench.name),
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

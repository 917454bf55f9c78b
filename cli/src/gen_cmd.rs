//! `kfs-iceberg gen`: write synthetic segments in the broker's bucket layout.

use std::path::{Path, PathBuf};

use kfs_workload::{WorkloadConfig, generate};

use crate::CliError;
use crate::options::CodecArg;

/// Arguments of `gen`.
#[derive(Debug, clap::Args)]
pub struct GenArgs {
    /// Directory to write `{ns}/{topic}/{partition}/segment-*.kfs` and `.index` under.
    #[arg(long)]
    out: PathBuf,
    /// The broker's S3 namespace.
    #[arg(long, default_value = "default")]
    namespace: String,
    /// Number of topics.
    #[arg(long, default_value_t = 2)]
    topics: usize,
    /// Partitions per topic.
    #[arg(long, default_value_t = 2)]
    partitions: usize,
    /// Segments per partition.
    #[arg(long, default_value_t = 3)]
    segments: usize,
    /// Data records per segment.
    #[arg(long, default_value_t = 200)]
    records: usize,
    /// The codec of every batch, or `mixed` (drawn at random per batch).
    #[arg(long, value_enum, default_value_t = CodecArg::Mixed)]
    codec: CodecArg,
    /// PRNG seed: the same seed and `--start-ms` write the same bytes.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// The earliest a partition's records are stamped, in ms since the epoch (each
    /// partition starts at a random time within the day after it). Default: early
    /// enough that every record is in the past, within about a day of now, so
    /// `status` shows a freshness a newcomer recognises.
    #[arg(long)]
    start_ms: Option<i64>,
    /// Mean time between a partition's records, in ms (3600000 spreads 600 records
    /// over about 25 days).
    #[arg(long, default_value_t = 20)]
    record_spacing_ms: u64,
    /// JSON values of the later half of each partition's segments carry two more
    /// fields (`channel`, `shipping`): a schema that grows, for `--value-format json`.
    #[arg(long)]
    later_fields: bool,
    /// A keyed topic of this many keys (`customer-0` …), each in one partition, as a
    /// producer's partitioner places them: records update keys earlier records wrote,
    /// and a null value (3 in 100) deletes its key; for `run --table-mode upsert`.
    /// Default: keys drawn from 50,000 in every partition.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    keys: Option<u64>,
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    let io = |source| CliError::Io {
        path: path.to_owned(),
        source,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    std::fs::write(path, bytes).map_err(io)
}

/// A start that puts every record of `args`'s workload in the past, within about a
/// day of now: a day (the partitions' random starts) and the records' mean spacing,
/// doubled, before now.
fn recent_start_ms(args: &GenArgs) -> i64 {
    let records = args.segments.saturating_mul(args.records) as u64;
    let span = records
        .saturating_mul(args.record_spacing_ms)
        .saturating_mul(2);
    let span = i64::try_from(span).unwrap_or(i64::MAX);
    kfs_core::now_ms()
        .saturating_sub(86_400_000)
        .saturating_sub(span)
}

/// Runs `gen`.
pub fn run(args: &GenArgs) -> Result<(), CliError> {
    let config = WorkloadConfig {
        namespace: args.namespace.clone(),
        topics: args.topics,
        partitions: args.partitions,
        segments: args.segments,
        records: args.records,
        codec: args.codec.into(),
        seed: args.seed,
        record_spacing_ms: args.record_spacing_ms,
        later_fields: args.later_fields,
        keys: args.keys,
        start_ms: args.start_ms.unwrap_or_else(|| recent_start_ms(args)),
    };
    let (mut segments, mut records, mut bytes) = (0u64, 0u64, 0u64);
    for generated in generate(&config) {
        let generated = generated?;
        write(&args.out.join(&generated.kfs_key), &generated.segment.kfs)?;
        write(
            &args.out.join(&generated.index_key),
            &generated.segment.index,
        )?;
        segments += 1;
        records += generated.records as u64;
        bytes += generated.segment.kfs.len() as u64;
    }
    out!(
        "wrote {segments} segments ({records} records, {bytes} bytes of .kfs) under {}",
        args.out.display()
    );
    Ok(())
}

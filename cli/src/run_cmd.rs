//! `kfs-iceberg run`: one pass of the pipeline on the embedded default, with a
//! progress bar and a closing summary.

use std::collections::BTreeMap;
use std::path::PathBuf;

use indicatif::{ProgressBar, ProgressStyle};
use kfs_core::OpendalSource;
use kfs_core::S3Settings;
use kfs_core::{PipelineConfig, Progress, RunReport, run_once};
use kfs_plan::commit::HoldReason;
use kfs_plan::naming::{TableName, TableNaming, TablePattern, ValueFormat};
use serde::Deserialize;

use crate::CliError;
use crate::embedded::WarehouseArgs;

/// Arguments of `run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Where the segments are: a directory or s3://bucket/prefix.
    #[arg(long)]
    source: String,
    #[command(flatten)]
    warehouse: WarehouseArgs,
    /// A TOML configuration file (table names, partition specs, start offsets).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Partition spec of the tables, e.g. `day(timestamp)` or `hour(timestamp),
    /// bucket(16, key)` (`''`: unpartitioned); overrides the configuration file's
    /// `partition_by`. New tables are created with it; an existing table with another
    /// spec evolves to it: new data is written in the new layout, data already
    /// committed keeps its own.
    #[arg(long, value_name = "SPEC")]
    partition_by: Option<String>,
    /// How tables created by this run store record values: `raw` (key and value as
    /// bytes) or `json` (the fields of JSON object values as typed columns; values
    /// that cannot be written go to `<table>__dlq`). Overrides the configuration
    /// file's `value_format`; existing tables keep theirs.
    #[arg(long, value_name = "FORMAT")]
    value_format: Option<String>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// Commit one data file per segment instead of merging each commit's small files
    /// into target-size files first.
    #[arg(long)]
    no_coalesce: bool,
}

/// The configuration file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    /// Namespace of tables not named explicitly (default `kafscale`).
    namespace: Option<String>,
    /// `topic = "namespace.table"` entries.
    #[serde(default)]
    tables: BTreeMap<String, String>,
    /// `[start_offsets.<topic>]` with `"<partition>" = offset` entries.
    #[serde(default)]
    start_offsets: BTreeMap<String, BTreeMap<String, i64>>,
    /// Partition spec of new tables (`"day(timestamp)"`).
    partition_by: Option<String>,
    /// `topic = "spec"` entries: the partition spec of that topic's new table.
    #[serde(default)]
    partitioning: BTreeMap<String, String>,
    /// `[[table_patterns]]` rules: `topic` (a regular expression matching whole topic
    /// names) and `table` (`namespace.name`, with `$1` or `${group}`), tried in order
    /// after the explicit `tables` entries.
    #[serde(default)]
    table_patterns: Vec<TablePatternEntry>,
    /// Properties of new tables (`"write.parquet.compression-codec" = "zstd"`).
    #[serde(default)]
    table_properties: BTreeMap<String, String>,
    /// How new tables store record values: `"raw"` (default) or `"json"`.
    value_format: Option<String>,
    /// `topic = "name type, ..."` entries: the declared columns of that topic's new
    /// JSON table (otherwise inferred from the values).
    #[serde(default)]
    value_columns: BTreeMap<String, String>,
}

/// One `[[table_patterns]]` rule.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TablePatternEntry {
    topic: String,
    table: String,
}

/// Parses a partition spec given on the command line or in the configuration.
fn partition_spec(
    text: &str,
    origin: &str,
) -> Result<Vec<kfs_plan::layout::PartitionField>, CliError> {
    kfs_plan::layout::parse_partition_spec(text)
        .map_err(|e| CliError::Usage(format!("{origin}: {e}")))
}

fn load_config(path: Option<&PathBuf>) -> Result<PipelineConfig, CliError> {
    let Some(path) = path else {
        return Ok(PipelineConfig::default());
    };
    let text = std::fs::read_to_string(path).map_err(|source| CliError::Io {
        path: path.clone(),
        source,
    })?;
    let file: ConfigFile = toml::from_str(&text)
        .map_err(|e| CliError::Usage(format!("{}: {}", path.display(), e.message())))?;
    let origin = path.display().to_string();
    let mut naming = TableNaming {
        namespace: file.namespace,
        partition_by: partition_spec(file.partition_by.as_deref().unwrap_or_default(), &origin)?,
        partition_by_given: file.partition_by.is_some(),
        value_format: file
            .value_format
            .as_deref()
            .map(ValueFormat::parse)
            .transpose()
            .map_err(|e| CliError::Usage(format!("{origin}: {e}")))?
            .unwrap_or_default(),
        ..TableNaming::default()
    };
    for rule in &file.table_patterns {
        let pattern = TablePattern::new(&rule.topic, &rule.table)
            .map_err(|e| CliError::Usage(format!("{origin}: table_patterns: {e}")))?;
        naming.patterns.push(pattern);
    }
    // Checked now, not at the first table creation.
    kfs_core::compression(&file.table_properties.clone().into_iter().collect())
        .map_err(|e| CliError::Usage(format!("{origin}: table_properties: {}", e.message())))?;
    naming.properties = file.table_properties;
    for (topic, text) in file.value_columns {
        let columns = kfs_plan::value_columns::parse_value_columns(&text)
            .map_err(|e| CliError::Usage(format!("{origin}: value_columns.{topic}: {e}")))?;
        naming.value_columns.insert(topic, columns);
    }
    for (topic, spec) in file.partitioning {
        let fields = partition_spec(&spec, &format!("{origin}: partitioning.{topic}"))?;
        naming.partitioning.insert(topic, fields);
    }
    for (topic, table) in file.tables {
        let name = TableName::parse(&table).ok_or_else(|| {
            CliError::Usage(format!(
                "{}: table {table:?} is not namespace.name",
                path.display()
            ))
        })?;
        naming.overrides.insert(topic, name);
    }
    naming
        .validate()
        .map_err(|e| CliError::Usage(format!("{origin}: {e}")))?;
    let mut start_offsets = BTreeMap::new();
    for (topic, partitions) in file.start_offsets {
        let mut map = BTreeMap::new();
        for (partition, offset) in partitions {
            let p = partition.parse::<i32>().map_err(|_| {
                CliError::Usage(format!(
                    "{}: start_offsets.{topic}: {partition:?} is not a partition",
                    path.display()
                ))
            })?;
            map.insert(p, offset);
        }
        start_offsets.insert(topic, map);
    }
    Ok(PipelineConfig {
        naming,
        start_offsets,
        ..PipelineConfig::default()
    })
}

/// Runs `run`.
pub async fn run(args: &RunArgs) -> Result<(), CliError> {
    let mut config = load_config(args.config.as_ref())?;
    config.commit.coalesce = !args.no_coalesce;
    if let Some(spec) = &args.partition_by {
        config.naming.partition_by = partition_spec(spec, "--partition-by")?;
        config.naming.partition_by_given = true;
    }
    if let Some(format) = &args.value_format {
        config.naming.value_format = ValueFormat::parse(format)
            .map_err(|e| CliError::Usage(format!("--value-format: {e}")))?;
    }
    let source = OpendalSource::from_location(&args.source, &S3Settings::from_env())
        .map_err(|e| CliError::Pipeline(format!("source {e}")))?;
    let embedded = args.warehouse.open().await?;
    let bar = if args.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(0)
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} segments {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let on_progress = |event: &Progress| match event {
        Progress::Listed { new, .. } => bar.set_length(*new as u64),
        Progress::Converted { .. } => bar.inc(1),
        Progress::Quarantined { segment, error } => {
            bar.inc(1);
            bar.suspend(|| eprintln!("quarantined {segment}: {error}"));
        }
        Progress::Committed { table, .. } => bar.set_message(format!("committed {table}")),
    };
    let report = run_once(
        &source,
        embedded.catalog.as_ref(),
        embedded.swap.as_ref(),
        &embedded.ledger,
        &config,
        &on_progress,
    )
    .await
    .map_err(|e| CliError::Pipeline(e.to_string()))?;
    bar.finish_and_clear();
    print_report(&report);
    if !report.failed_tables.is_empty() {
        let reasons: Vec<String> = report
            .failed_tables
            .iter()
            .map(|(table, error)| format!("{table}: {error}"))
            .collect();
        return Err(CliError::Pipeline(format!(
            "{} table(s) could not be committed; their files stay pending for the next run:\n  {}",
            report.failed_tables.len(),
            reasons.join("\n  ")
        )));
    }
    if !report.failed_segments.is_empty() || !report.unreadable.is_empty() {
        return Err(CliError::Pipeline(format!(
            "{} segment(s) failed to convert and {} ledger item(s) are unreadable (see above); every other table went on",
            report.failed_segments.len(),
            report.unreadable.len()
        )));
    }
    if !report.refused.is_empty() {
        return Err(CliError::Pipeline(format!(
            "{} topic(s) refused their table (see above); their segments wait until the mapping is fixed",
            report.refused.len()
        )));
    }
    Ok(())
}

fn print_report(report: &RunReport) {
    println!(
        "{} segments listed past the tables' watermarks ({} new, {} already known), {} converted ({} records), {} quarantined, {} incomplete, {} other objects ignored",
        report.segments,
        report.segments - report.known,
        report.known,
        report.converted,
        report.records_converted,
        report.quarantined.len(),
        report.incomplete,
        report.ignored
    );
    for (segment, error) in &report.quarantined {
        println!("  quarantined {segment}: {error}");
    }
    for (table, error) in &report.failed_tables {
        println!("table {table}: commit failed: {error}");
    }
    for (segment, error) in &report.failed_segments {
        println!("  failed {segment}: {error} (tried again next run)");
    }
    for (segment, reason) in &report.unreadable {
        println!(
            "  ledger item {segment} is unreadable: {reason} (its partition waits at it; repair or delete the item)"
        );
    }
    for (feed, reason) in &report.refused {
        println!("topic {feed}: refused: {reason}");
    }
    for segment in &report.rewritten {
        println!(
            "  warning: {segment} was rewritten with different content after it was converted; not ingested again"
        );
    }
    for (table, outcome) in &report.tables {
        match outcome.snapshot_id {
            Some(id) if outcome.dead_letters > 0 => println!(
                "table {table}: snapshot {id}: +{} segments, {} files, {} records; {} records to {table}{}",
                outcome.segments,
                outcome.files,
                outcome.records,
                outcome.dead_letters,
                kfs_plan::naming::DEAD_LETTER_SUFFIX
            ),
            Some(id) => println!(
                "table {table}: snapshot {id}: +{} segments, {} files, {} records",
                outcome.segments, outcome.files, outcome.records
            ),
            None => println!("table {table}: no new snapshot"),
        }
        let marks: Vec<String> = outcome
            .watermarks
            .iter()
            .map(|(p, next)| format!("{p}→{next}"))
            .collect();
        println!(
            "  next offset per partition: {}",
            if marks.is_empty() {
                "-".into()
            } else {
                marks.join(" ")
            }
        );
        for gap in &outcome.gaps {
            println!(
                "  gap recorded: partition {} offsets {}..={} ({})",
                gap.partition,
                gap.from,
                gap.to,
                match gap.reason {
                    kfs_plan::offsets::GapReason::NoSegment => "no segment covers them",
                    kfs_plan::offsets::GapReason::Skipped => "skipped by an operator",
                }
            );
        }
        for hold in &outcome.holds {
            let at = hold
                .next_offset
                .map_or_else(|| "?".to_owned(), |o| o.to_string());
            let why = match &hold.reason {
                HoldReason::WaitingForSegment { base_offset } => {
                    format!(
                        "waiting for segment at offset {base_offset} (not converted yet, or quarantined)"
                    )
                }
                HoldReason::Overlap { id, .. } => {
                    format!("segment {id} overlaps what is committed")
                }
                HoldReason::NoStartingPoint => "no segment listed to start from".into(),
                HoldReason::SegmentLimit => "segment limit of this cycle reached".into(),
                HoldReason::OffsetOverflow { id } => {
                    format!("{id} ends at the largest offset; no watermark can follow it")
                }
            };
            println!("  partition {} held at {at}: {why}", hold.partition);
        }
    }
}

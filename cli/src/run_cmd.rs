//! `kfs-iceberg run`: one pass of the pipeline on the embedded default, with a
//! progress bar and a closing summary.

use std::path::PathBuf;

use indicatif::{ProgressBar, ProgressStyle};
use kfs_core::OpendalSource;
use kfs_core::S3Settings;
use kfs_core::Settings;
use kfs_core::{PassReport, PipelineConfig, Progress, run_pass};
use kfs_plan::lfs::BlobOrigin;
use kfs_plan::mode::TableMode;
use kfs_plan::naming::{KeyFormat, ValueFormat};

use crate::CliError;
use crate::embedded::{Access, WarehouseArgs};
use crate::options::{KeyFormatArg, LfsModeArg, TableModeArg, ValueFormatArg};

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
    /// bytes), `json` (the fields of JSON object values as typed columns) or
    /// `registry` (Avro, Protobuf or JSON Schema values framed for a schema registry,
    /// Confluent's or AWS Glue's, decoded with the writer schema each names, as typed
    /// columns; needs --schema-registry-url); values that
    /// cannot be written go to `<table>__dlq`. Overrides the configuration file's
    /// `value_format`; existing tables keep theirs.
    #[arg(long, value_name = "FORMAT", value_enum, ignore_case = true)]
    value_format: Option<ValueFormatArg>,
    /// How tables created by this run treat their records: `append` (every record a
    /// row, the default), `upsert` (one row per key, its last change; a record with a
    /// null value deletes its key; merge on read with position deletes, read by
    /// pyiceberg, DuckDB, Daft, ClickHouse, Spark, Trino) or `cdc` (Debezium change
    /// events in JSON, with `--value-format json`: one row per key, the `after`
    /// image's fields as the columns; a delete deletes the key). Overrides the
    /// configuration file's `table_mode`; existing tables keep theirs.
    #[arg(long, value_name = "MODE", value_enum, ignore_case = true)]
    table_mode: Option<TableModeArg>,
    /// The key of `--table-mode upsert`: `key`, the record key (the default).
    /// Overrides the configuration file's `upsert_key`.
    #[arg(long, value_name = "FIELD[,FIELD...]")]
    upsert_key: Option<String>,
    /// Keep the change log of `--table-mode upsert` or `cdc` tables beside them: every
    /// record appended to `<table>__changes`, exactly once with the mirror's commits.
    /// Overrides the configuration file's `change_log`.
    #[arg(long)]
    change_log: bool,
    /// How registry tables read record keys: `raw` (bytes only, the default) or
    /// `registry` (keys framed for the schema registry, as the values are, decoded
    /// into the struct column `key_fields` as well; a record whose key is not goes to
    /// `<table>__dlq`). Needs `--value-format registry`; overrides the configuration
    /// file's `key_format`.
    #[arg(long, value_name = "FORMAT", value_enum, ignore_case = true)]
    key_format: Option<KeyFormatArg>,
    /// The schema registry of `--value-format registry`: `https://…` for the
    /// Confluent REST API (Confluent Schema Registry, Karapace, Apicurio, Redpanda),
    /// `glue://` or `glue://REGION` for the AWS Glue Schema Registry (read with the
    /// AWS credentials of the environment); overrides the configuration file's
    /// `[schema_registry] url`.
    #[arg(long, value_name = "URL")]
    schema_registry_url: Option<String>,
    /// A JSON file of the registry's credentials: `{"username", "password"}` or
    /// `{"token"}` (never printed).
    #[arg(long, value_name = "FILE")]
    schema_registry_credentials: Option<PathBuf>,
    /// What is done with large-file (LFS) claim-check records: `off` (values as they
    /// came), `resolve` (each blob fetched into `value`), `reference` (the envelope
    /// kept, described by `lfs_*` columns), `skip` (not written) or `hybrid` (resolved
    /// up to `--lfs-max-inline-size`, referenced above). A blob that is missing, too
    /// large or fails its checksum sends its record to `<table>__dlq`. Overrides the
    /// configuration file's `[lfs] mode`; blobs are read under the source only.
    #[arg(long, value_name = "MODE", value_enum, ignore_case = true)]
    lfs_mode: Option<LfsModeArg>,
    /// Largest blob resolved into a row, in bytes (default 64 MiB).
    #[arg(long, value_name = "BYTES")]
    lfs_max_inline_size: Option<u64>,
    /// With a local source directory, the bucket it stands for: claim checks naming
    /// another bucket are dead letters (an S3 source's own bucket is the only one read).
    #[arg(long, value_name = "BUCKET")]
    lfs_bucket: Option<String>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    #[command(flatten)]
    follow: crate::follow::FollowArgs,
    /// Commit one data file per segment: no runs of small segments converted into one
    /// file, and no merging of each commit's small files into target-size files.
    #[arg(long)]
    no_coalesce: bool,
}

/// Parses a partition spec given on the command line.
fn partition_spec(
    text: &str,
    origin: &str,
) -> Result<Vec<kfs_plan::layout::PartitionField>, CliError> {
    kfs_plan::layout::parse_partition_spec(text)
        .map_err(|e| CliError::Usage(format!("{origin}: {e}")))
}

/// The schema cache in front of the registry at `location`: AWS Glue's through the
/// AWS edge when built with it.
pub(crate) async fn open_schema_registry(
    location: &kfs_core::RegistryLocation,
) -> Result<std::sync::Arc<kfs_core::RegistrySchemas>, CliError> {
    #[cfg(feature = "aws")]
    let opened = kfs_aws::open_schema_registry(location, &S3Settings::from_env())
        .await
        .map_err(|e| e.0);
    #[cfg(not(feature = "aws"))]
    let opened = kfs_core::open_registry(location).map(std::sync::Arc::new);
    opened.map_err(|e| CliError::Usage(format!("--schema-registry-url: {e}")))
}

/// The pipeline's settings from the configuration file ([`kfs_core::Settings`] in
/// TOML), checked once.
async fn load_config(args: &RunArgs) -> Result<PipelineConfig, CliError> {
    let (mut settings, origin) = match &args.config {
        Some(path) => (
            Settings::from_toml_file(path).map_err(|e| CliError::Usage(e.0))?,
            path.display().to_string(),
        ),
        None => (Settings::default(), "the command line".to_owned()),
    };
    // The flags that name what the file names too win.
    if let Some(format) = args.value_format {
        settings.value_format = Some(ValueFormat::from(format).name().to_owned());
    }
    if let Some(mode) = args.table_mode {
        settings.table_mode = Some(TableMode::from(mode).name().to_owned());
    }
    if let Some(key) = &args.upsert_key {
        settings.upsert_key = Some(key.clone());
    }
    if args.change_log {
        settings.change_log = Some(true);
    }
    if let Some(format) = args.key_format {
        settings.key_format = Some(KeyFormat::from(format).name().to_owned());
    }
    if let Some(url) = &args.schema_registry_url {
        settings.schema_registry.url = Some(url.clone().into());
    }
    if let Some(file) = &args.schema_registry_credentials {
        settings.schema_registry.credentials_file = Some(file.clone());
    }
    // Sections the deployed functions read, which `run` takes from its flags: refused
    // rather than silently ignored.
    for (section, given) in [
        (
            "[catalog] (use --catalog-type and its options)",
            settings.catalog != Default::default(),
        ),
        (
            "[maintenance] (use `kfs-iceberg maintain`)",
            settings.maintenance != Default::default(),
        ),
        (
            "[etcd] (the committer's cross-check)",
            !settings.etcd.endpoints.is_empty(),
        ),
    ] {
        if given {
            return Err(CliError::Usage(format!(
                "{origin}: run does not read {section}"
            )));
        }
    }
    let valid = settings
        .validate(&origin)
        .map_err(|e| CliError::Usage(e.0))?;
    let schemas = match &valid.schema_registry {
        Some(location) => Some(open_schema_registry(location).await?),
        None => None,
    };
    Ok(PipelineConfig {
        schemas,
        naming: valid.naming,
        start_offsets: valid.start_offsets,
        crosscheck: valid.crosscheck,
        ..PipelineConfig::default()
    })
}

/// Runs `run` (refused with `--stack`: a stack's committer runs its passes).
pub async fn run(args: &RunArgs, stack: Option<&str>) -> Result<(), CliError> {
    if let Some(stack) = stack {
        return Err(CliError::Usage(format!(
            "run --stack {stack}: the stack's committer runs its passes (invoke it to run one now); run works on a local warehouse"
        )));
    }
    let mut config = load_config(args).await?;
    config.commit.coalesce = !args.no_coalesce;
    if args.no_coalesce {
        config.max_run_segments = Some(1);
    }
    if let Some(spec) = &args.partition_by {
        config.naming.partition_by = partition_spec(spec, "--partition-by")?;
        config.naming.partition_by_given = true;
    }
    if let Some(mode) = args.lfs_mode {
        config.naming.lfs.policy.mode = mode.into();
    }
    if let Some(size) = args.lfs_max_inline_size {
        config.naming.lfs.policy.max_inline_size = size;
    }
    let bucket = args
        .lfs_bucket
        .clone()
        .or_else(|| config.naming.lfs.policy.origin.bucket.take());
    config.naming.lfs.policy.origin = BlobOrigin::for_source(&args.source, bucket.as_deref())
        .map_err(|e| CliError::Usage(format!("--lfs-bucket: {e}")))?;
    config
        .naming
        .validate()
        .map_err(|e| CliError::Usage(format!("--lfs-mode: {e}")))?;
    let local = !args.source.starts_with("s3://");
    if local {
        crate::source_check::check_local_path(&args.source)?;
    }
    let source = OpendalSource::from_location(&args.source, &S3Settings::from_env())
        .map_err(|e| CliError::Pipeline(format!("source {e}")))?;
    // The source's layout before the warehouse is created: a wrong path creates nothing.
    crate::source_check::check_layout(&source, &args.source, local, args.follow.follow).await?;
    let embedded = args.warehouse.open_local(Access::Create).await?;
    if args.follow.follow {
        return crate::follow::follow(&source, &args.source, &embedded, &config, &args.follow)
            .await;
    }
    let bar = progress_bar(args.quiet);
    let on_progress = |event: &Progress| match event {
        Progress::Listed { new, .. } => bar.set_length(*new as u64),
        // A run of segments converted into one file counts as each of its segments.
        Progress::Converted { segments, .. } => bar.inc(*segments as u64),
        Progress::Quarantined { segment, error } => {
            bar.inc(1);
            bar.suspend(|| eprintln!("quarantined {segment}: {error}"));
        }
        Progress::Committed { table, .. } => bar.set_message(format!("committed {table}")),
    };
    let report = run_pass(
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
    crate::report::print_report(&report);
    let shard = kfs_plan::shard::Shard::default();
    let summary = report.summary(shard, kfs_core::now_ms());
    if let Err(e) = embedded.tick_log.write(shard, &summary).await {
        eprintln!("kfs-iceberg: the run's summary could not be kept for status: {e}");
    }
    outcome(&report)
}

/// The progress bar of a run (hidden with `--quiet`), counted in segments.
fn progress_bar(quiet: bool) -> ProgressBar {
    let bar = if quiet {
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
    bar
}

/// The run's exit: an error naming what failed, or what waits, if anything did.
fn outcome(report: &PassReport) -> Result<(), CliError> {
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

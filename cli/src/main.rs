//! `kfs-iceberg`: the command-line face of the project.
//!
//! `dump` shows and verifies a segment, `gen` writes sample segments in the broker's
//! bucket layout, `run` converts and commits, `status` reports, and `compact`,
//! `expire-snapshots`, `remove-orphans` and `rewrite-manifests` maintain the tables.
//! Every failure prints one line on stderr naming the file, the byte
//! position and the reason, and exits non-zero ([`error`] lists the codes).

/// Prints a line on standard output as `println!` does, except that a reader that went
/// away (`kfs-iceberg status | head`) ends the command quietly, as SIGPIPE ends other
/// Unix tools, instead of a panic ([`output::line`]).
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::line(format_args!($($arg)*))
    };
}

mod dead_letters_cmd;
mod dump;
mod embedded;
mod error;
mod follow;
mod gen_cmd;
mod maintain_cmd;
mod metrics;
mod options;
mod output;
mod progress_cmd;
mod quarantine_cmd;
mod report;
mod run_cmd;
mod source_check;
mod status_cmd;
mod target;
mod time;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use error::CliError;

/// Turns KafScale log segments into Apache Iceberg tables.
#[derive(Debug, Parser)]
#[command(name = "kfs-iceberg", version, about)]
struct Cli {
    /// Work on a deployed stack (AWS CloudFormation): its catalog and DynamoDB ledger,
    /// as its functions' configuration names them; the AWS side (region, credentials,
    /// endpoints) from this environment. For status, quarantine and the maintenance
    /// commands; those that delete or rewrite first print the catalog, warehouse,
    /// ledger and tables they act on (with --dry-run too).
    #[arg(long, global = true, value_name = "NAME")]
    stack: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Verify a .kfs segment and print its header, batches and records.
    Dump(dump::DumpArgs),
    /// Write synthetic segments in the broker's bucket layout.
    Gen(gen_cmd::GenArgs),
    /// Convert every complete segment under the source and commit it to Iceberg.
    Run(run_cmd::RunArgs),
    /// Show watermarks, pending work and quarantined segments per table.
    Status(status_cmd::StatusArgs),
    /// Maintain tables as the committer does: compaction, snapshot expiry, manifest
    /// rewrite and orphan cleanup, by one policy.
    Maintain(maintain_cmd::MaintainArgs),
    /// Rewrite small data files into target-size files (replace snapshots).
    Compact(maintain_cmd::CompactArgs),
    /// Remove old snapshots and the files only they reached.
    ExpireSnapshots(maintain_cmd::ExpireArgs),
    /// Delete files under the tables that nothing references.
    RemoveOrphans(maintain_cmd::OrphanArgs),
    /// Merge a table's manifests into one.
    RewriteManifests(maintain_cmd::RewriteManifestsArgs),
    /// List quarantined segments, or release them for another try.
    Quarantine(quarantine_cmd::QuarantineArgs),
    /// Decide a table's progress where the pipeline cannot: set it after another
    /// engine's expiry removed it, or keep it after a rollback past our commits.
    Progress(progress_cmd::ProgressArgs),
    /// Replay a registry table's dead letters once their cause is gone.
    DeadLetters(dead_letters_cmd::DeadLettersArgs),
}

fn block_on<F: std::future::Future<Output = Result<(), CliError>>>(
    future: F,
) -> Result<(), CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Pipeline(format!("cannot start the async runtime: {e}")))?
        .block_on(future)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The deployed stack, if any, passed down to the commands that can work on one.
    let stack = cli.stack.as_deref();
    let result = match cli.command {
        Command::Dump(args) => dump::run(&args),
        Command::Gen(args) => gen_cmd::run(&args),
        Command::Run(args) => block_on(run_cmd::run(&args, stack)),
        Command::Status(args) => block_on(status_cmd::run(&args, stack)),
        Command::Maintain(args) => block_on(maintain_cmd::maintain(&args, stack)),
        Command::Compact(args) => block_on(maintain_cmd::compact(&args, stack)),
        Command::ExpireSnapshots(args) => block_on(maintain_cmd::expire(&args, stack)),
        Command::RemoveOrphans(args) => block_on(maintain_cmd::orphans(&args, stack)),
        Command::RewriteManifests(args) => block_on(maintain_cmd::rewrite(&args, stack)),
        Command::Quarantine(args) => block_on(quarantine_cmd::run(&args, stack)),
        Command::Progress(args) => block_on(progress_cmd::run(&args, stack)),
        Command::DeadLetters(args) => block_on(dead_letters_cmd::run(&args, stack)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // One line, whatever the error says; a URL in it (a client library's
            // message) without its secrets.
            let line = kfs_plan::secret_url::redact_text(&err.to_string().replace('\n', " "));
            eprintln!("kfs-iceberg: {line}");
            ExitCode::from(err.exit_code())
        }
    }
}

//! `kfs-iceberg quarantine list | retry`: what is quarantined and why, and releasing a
//! segment after a fix so that the next `run` converts it again.

use kfs_core::ledger::{EntryState, Ledger};

use crate::CliError;
use crate::embedded::WarehouseArgs;
use crate::time::rfc3339_ms;

/// Arguments of `quarantine`.
#[derive(Debug, clap::Args)]
pub struct QuarantineArgs {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// List quarantined segments: key, partition, offset, when, and the error.
    List {
        #[command(flatten)]
        warehouse: WarehouseArgs,
    },
    /// Release quarantined segments (after fixing or re-uploading them): the next
    /// `run` converts them again; a segment still malformed is quarantined again.
    Retry {
        #[command(flatten)]
        warehouse: WarehouseArgs,
        /// Segment keys as `list` prints them.
        segments: Vec<String>,
        /// Every quarantined segment.
        #[arg(long, conflicts_with = "segments")]
        all: bool,
    },
}

fn pipeline(e: impl std::fmt::Display) -> CliError {
    CliError::Pipeline(e.to_string())
}

/// Runs `quarantine`.
pub async fn run(args: &QuarantineArgs) -> Result<(), CliError> {
    match &args.action {
        Action::List { warehouse } => {
            let embedded = warehouse.open().await?;
            let entries = embedded
                .ledger
                .list(Some("quarantined"), None)
                .await
                .map_err(pipeline)?;
            if entries.is_empty() {
                println!("no quarantined segments");
            }
            for entry in entries {
                if let EntryState::Quarantined { error } = &entry.state {
                    println!(
                        "{}\t{} partition {} from offset {}\t{}\t{}",
                        entry.segment,
                        entry.table,
                        entry.partition,
                        entry.base_offset,
                        rfc3339_ms(entry.created_ms),
                        error
                    );
                }
            }
            Ok(())
        }
        Action::Retry {
            warehouse,
            segments,
            all,
        } => {
            let embedded = warehouse.open().await?;
            let targets: Vec<String> = if *all {
                embedded
                    .ledger
                    .list(Some("quarantined"), None)
                    .await
                    .map_err(pipeline)?
                    .into_iter()
                    .map(|e| e.segment)
                    .collect()
            } else if segments.is_empty() {
                return Err(CliError::Usage(
                    "quarantine retry: name the segments, or --all".into(),
                ));
            } else {
                segments.clone()
            };
            let mut missing = Vec::new();
            for segment in &targets {
                if embedded
                    .ledger
                    .release_quarantined(segment)
                    .await
                    .map_err(pipeline)?
                {
                    println!("released {segment}: the next run converts it again");
                } else {
                    missing.push(segment.as_str());
                }
            }
            if missing.is_empty() {
                Ok(())
            } else {
                Err(CliError::Usage(format!(
                    "not quarantined: {}",
                    missing.join(", ")
                )))
            }
        }
    }
}

//! `kfs-iceberg quarantine list | retry | skip`: what is quarantined and why, releasing
//! a segment after a fix so that the next `run` converts it again, or giving up its
//! offsets explicitly (committed as a gap recorded as skipped, never silently).

use kfs_core::{EntryState, Ledger};

use crate::CliError;
use crate::embedded::{Embedded, WarehouseArgs};
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
    /// Give up quarantined segments for good: the next `run` commits their offsets
    /// (up to the partition's next segment) as a gap recorded as `skipped` in the
    /// snapshot summary, and the partition moves on.
    Skip {
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
pub async fn run(args: &QuarantineArgs, stack: Option<&str>) -> Result<(), CliError> {
    match &args.action {
        Action::List { warehouse } => {
            let opened = warehouse.open(stack).await?;
            crate::with_opened!(opened, embedded => list(&embedded).await)
        }
        Action::Retry {
            warehouse,
            segments,
            all,
        } => act_on(warehouse, segments, *all, Verb::Retry, stack).await,
        Action::Skip {
            warehouse,
            segments,
            all,
        } => act_on(warehouse, segments, *all, Verb::Skip, stack).await,
    }
}

/// Prints the quarantined segments.
async fn list<L: Ledger>(embedded: &Embedded<L>) -> Result<(), CliError> {
    let entries = embedded
        .ledger
        .list(Some("quarantined"), None)
        .await
        .map_err(pipeline)?;
    if entries.is_empty() {
        out!("no quarantined segments");
    }
    for entry in entries {
        if let EntryState::Quarantined { error } = &entry.state {
            out!(
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

#[derive(Debug, Clone, Copy)]
enum Verb {
    Retry,
    Skip,
}

/// Releases or skips the named (or all) quarantined segments, on the deployed
/// `stack` if one is named.
async fn act_on(
    warehouse: &WarehouseArgs,
    segments: &[String],
    all: bool,
    verb: Verb,
    stack: Option<&str>,
) -> Result<(), CliError> {
    let opened = warehouse.open(stack).await?;
    crate::with_opened!(opened, embedded => act(&embedded, segments, all, verb).await)
}

/// Releases or skips segments of one ledger.
async fn act<L: Ledger>(
    embedded: &Embedded<L>,
    segments: &[String],
    all: bool,
    verb: Verb,
) -> Result<(), CliError> {
    let quarantined = embedded
        .ledger
        .list(Some("quarantined"), None)
        .await
        .map_err(pipeline)?;
    let targets: Vec<String> = if all {
        quarantined.iter().map(|e| e.segment.clone()).collect()
    } else if segments.is_empty() {
        return Err(CliError::Usage(format!(
            "quarantine {}: name the segments, or --all",
            match verb {
                Verb::Retry => "retry",
                Verb::Skip => "skip",
            }
        )));
    } else {
        segments.to_vec()
    };
    // What it is about to change (a skip gives offsets up for good): the ledger, and
    // the tables of the segments named.
    let tables: std::collections::BTreeSet<String> = quarantined
        .iter()
        .filter(|e| targets.contains(&e.segment))
        .map(|e| e.table.clone())
        .collect();
    eprint!(
        "{}",
        crate::target::describe(
            &embedded.site,
            match verb {
                Verb::Retry => "quarantine retry",
                Verb::Skip => "quarantine skip",
            },
            false,
            &tables.into_iter().collect::<Vec<_>>(),
        )
    );
    let mut missing = Vec::new();
    for segment in &targets {
        let done = match verb {
            Verb::Retry => embedded.ledger.release_quarantined(segment).await,
            Verb::Skip => {
                embedded
                    .ledger
                    .skip_quarantined(segment, kfs_core::now_ms())
                    .await
            }
        }
        .map_err(pipeline)?;
        if !done {
            missing.push(segment.as_str());
            continue;
        }
        match verb {
            Verb::Retry => out!("released {segment}: the next run converts it again"),
            Verb::Skip => {
                let entry = quarantined.iter().find(|e| &e.segment == segment);
                out!(
                    "skipped {segment}: the next run commits partition {} past offset {} with a gap recorded as skipped",
                    entry.map_or(-1, |e| e.partition),
                    entry.map_or(-1, |e| e.base_offset)
                );
            }
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

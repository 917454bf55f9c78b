//! `kfs-iceberg progress set | keep`: an operator's decision on a table's stored
//! progress, where the pipeline cannot establish it alone: a table whose progress
//! another engine's expiry removed before it was kept in table properties (`set` the
//! next offset per partition), or a table rolled back past our commits (`keep` the
//! recorded progress: what the rollback removed stays out of the table).

use kfs_core::{ProgressDecision, decide_progress, table_ident};
use kfs_plan::naming::TableName;
use kfs_plan::offsets::OffsetMap;

use crate::CliError;
use crate::embedded::{Embedded, WarehouseArgs};

/// Arguments of `progress`.
#[derive(Debug, clap::Args)]
pub struct ProgressArgs {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Store the next offset of the named partitions (others keep theirs): the next
    /// `run` commits each partition from there.
    Set {
        #[command(flatten)]
        warehouse: WarehouseArgs,
        /// The table, `namespace.name`.
        #[arg(long)]
        table: String,
        /// `PARTITION=NEXT_OFFSET`, comma-separated (e.g. `0=1200,1=980`).
        #[arg(long, value_parser = parse_offsets)]
        offsets: OffsetMap,
    },
    /// After a rollback past our commits: keep the recorded progress and go on from
    /// it (the offsets the rollback removed are not ingested again).
    Keep {
        #[command(flatten)]
        warehouse: WarehouseArgs,
        /// The table, `namespace.name`.
        #[arg(long)]
        table: String,
    },
}

/// Parses `0=1200,1=980`.
fn parse_offsets(text: &str) -> Result<OffsetMap, String> {
    text.split(',')
        .map(|pair| {
            let (partition, next) = pair
                .split_once('=')
                .ok_or_else(|| format!("{pair:?} is not PARTITION=NEXT_OFFSET"))?;
            let partition = partition
                .trim()
                .parse::<i32>()
                .map_err(|_| format!("partition {partition:?} is not a number"))?;
            let next = next
                .trim()
                .parse::<i64>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or_else(|| format!("offset {next:?} is not a non-negative number"))?;
            Ok((partition, next))
        })
        .collect()
}

/// Runs `progress`.
pub async fn run(args: &ProgressArgs, stack: Option<&str>) -> Result<(), CliError> {
    let (warehouse, table, decision) = match &args.action {
        Action::Set {
            warehouse,
            table,
            offsets,
        } => (warehouse, table, ProgressDecision::Set(offsets.clone())),
        Action::Keep { warehouse, table } => {
            (warehouse, table, ProgressDecision::KeepAfterRollback)
        }
    };
    let name = TableName::parse(table)
        .ok_or_else(|| CliError::Usage(format!("{table:?} is not namespace.name")))?;
    let opened = warehouse.open(stack).await?;
    crate::with_opened!(opened, embedded => decide(&embedded, &name, &decision).await)
}

async fn decide<L>(
    embedded: &Embedded<L>,
    name: &TableName,
    decision: &ProgressDecision,
) -> Result<(), CliError> {
    let progress = decide_progress(
        embedded.catalog.as_ref(),
        embedded.swap.as_ref(),
        &table_ident(name),
        decision,
        kfs_core::now_ms(),
    )
    .await
    .map_err(|e| CliError::Pipeline(format!("{name}: {e}")))?;
    out!(
        "{name}: progress stored, next offsets {:?}; the next run commits from there",
        progress.watermarks
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_parse_or_say_why_not() {
        assert_eq!(
            parse_offsets("0=1200, 1=980"),
            Ok(OffsetMap::from([(0, 1200), (1, 980)]))
        );
        assert!(parse_offsets("0").is_err());
        assert!(parse_offsets("x=1").is_err());
        assert!(parse_offsets("0=-1").is_err());
    }
}

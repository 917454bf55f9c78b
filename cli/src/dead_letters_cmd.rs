//! `kfs-iceberg dead-letters replay`: a registry table's dead letters refused for a
//! reason that may pass (an unknown schema id, a reference the registry did not hold,
//! a schema past a segment's lookup cap) decoded again and appended to their table
//! once the cause is gone, exactly once (`kfs_core::replay_dead_letters` says why);
//! locally, or on a deployed stack's catalog with `--stack`.

use std::path::PathBuf;

use kfs_plan::naming::TableName;

use crate::CliError;
use crate::embedded::WarehouseArgs;

/// Arguments of `dead-letters`.
#[derive(Debug, clap::Args)]
pub struct DeadLettersArgs {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Append the table's retryable dead letters that now decode to the table (each
    /// once: a second replay, or one after a crash, appends none of them again); the
    /// others stay dead letters.
    Replay {
        #[command(flatten)]
        warehouse: WarehouseArgs,
        /// The registry table, `namespace.name` (not its `__dlq` table).
        #[arg(long)]
        table: String,
        /// The schema registry the table's values are read with (as `run` takes it).
        #[arg(long, value_name = "URL")]
        schema_registry_url: String,
        /// A JSON file of the registry's credentials: `{"username", "password"}` or
        /// `{"token"}` (never printed).
        #[arg(long, value_name = "FILE")]
        schema_registry_credentials: Option<PathBuf>,
    },
}

/// Runs `dead-letters`.
pub async fn run(args: &DeadLettersArgs, stack: Option<&str>) -> Result<(), CliError> {
    let Action::Replay {
        warehouse,
        table,
        schema_registry_url,
        schema_registry_credentials,
    } = &args.action;
    let name = TableName::parse(table)
        .filter(|name| name.dead_letter_parent().is_none())
        .ok_or_else(|| {
            CliError::Usage(format!(
                "--table {table}: expected namespace.name of a registry table (not its dead-letter table)"
            ))
        })?;
    let credentials = match schema_registry_credentials {
        Some(path) => kfs_core::RegistryCredentials::from_file(path).map_err(CliError::Usage)?,
        None => kfs_core::RegistryCredentials::default(),
    };
    let url = kfs_plan::secret_url::SecretUrl::new(schema_registry_url.as_str());
    let location = kfs_core::RegistryLocation::parse(&url, credentials)
        .map_err(|e| CliError::Usage(format!("--schema-registry-url: {e}")))?;
    let schemas = crate::run_cmd::open_schema_registry(&location).await?;
    let opened = warehouse.open(stack).await?;
    let report = crate::with_opened!(opened, embedded => {
        let access = kfs_core::CatalogAccess {
            catalog: embedded.catalog.as_ref(),
            swap: embedded.swap.as_ref(),
        };
        kfs_core::replay_dead_letters(access, &name, schemas)
            .await
            .map_err(|e| CliError::Pipeline(e.to_string()))?
    });
    out!(
        "{name}: {} retryable dead letters; {} replayed now, {} replayed before, {} still refused",
        report.retryable,
        report.replayed,
        report.present,
        report.still_refused
    );
    Ok(())
}

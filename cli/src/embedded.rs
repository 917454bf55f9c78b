//! The embedded default: the Iceberg SQL catalog on SQLite (catalog name `local`) and
//! the SQLite ledger, both at `<warehouse>/catalog.db` and `<warehouse>/ledger.db` for a
//! local warehouse; for an S3 warehouse, `--catalog` and `--state` say where they live.

use std::path::{Path, PathBuf};

use kfs_core::catalog::SqlCatalog;
use kfs_core::catalog::{LOCAL_CATALOG_NAME, S3Settings, Warehouse, open_sql_catalog};
use kfs_core::ledger::SqliteLedger;
use kfs_core::table_commit::SqlTableSwap;

use crate::CliError;

/// Where the embedded catalog and ledger live.
#[derive(Debug, Clone, clap::Args)]
pub struct WarehouseArgs {
    /// Warehouse: a directory or s3://bucket/prefix.
    #[arg(long)]
    pub warehouse: String,
    /// The SQLite file of the catalog (default: `WAREHOUSE/catalog.db`, or `STATE/catalog.db`).
    #[arg(long, value_name = "FILE")]
    pub catalog: Option<PathBuf>,
    /// Directory of the local state (catalog and ledger) when the warehouse is in S3.
    #[arg(long, value_name = "DIR")]
    pub state: Option<PathBuf>,
}

/// The opened catalog and ledger.
pub struct Embedded {
    /// The SQL catalog.
    pub catalog: SqlCatalog,
    /// The SQL catalog's pointer swap (replace snapshots).
    pub swap: SqlTableSwap,
    /// The ledger.
    pub ledger: SqliteLedger,
}

impl WarehouseArgs {
    fn state_dir(&self, warehouse: &Warehouse) -> Result<PathBuf, CliError> {
        match (&self.state, warehouse) {
            (Some(dir), _) => Ok(dir.clone()),
            (None, Warehouse::Local(dir)) => Ok(dir.clone()),
            (None, Warehouse::S3 { .. }) => Err(CliError::Usage(
                "an s3:// warehouse needs --state DIR (where the SQLite catalog and ledger live)"
                    .into(),
            )),
        }
    }

    /// Opens the catalog and the ledger.
    pub async fn open(&self) -> Result<Embedded, CliError> {
        let warehouse = Warehouse::parse(&self.warehouse).map_err(CliError::Usage)?;
        let state = self.state_dir(&warehouse)?;
        std::fs::create_dir_all(&state).map_err(|source| CliError::Io {
            path: state.clone(),
            source,
        })?;
        let catalog_path = self
            .catalog
            .clone()
            .unwrap_or_else(|| state.join("catalog.db"));
        let catalog = open_sql_catalog(&catalog_path, &warehouse, &S3Settings::from_env())
            .await
            .map_err(|e| {
                CliError::Pipeline(format!("opening catalog {}: {e}", catalog_path.display()))
            })?;
        let swap = SqlTableSwap::open(&catalog_path, LOCAL_CATALOG_NAME)
            .await
            .map_err(|e| CliError::Pipeline(e.to_string()))?;
        let ledger_path = state.join("ledger.db");
        let ledger = open_ledger(&ledger_path).await?;
        Ok(Embedded {
            catalog,
            swap,
            ledger,
        })
    }
}

async fn open_ledger(path: &Path) -> Result<SqliteLedger, CliError> {
    SqliteLedger::open(path)
        .await
        .map_err(|e| CliError::Pipeline(format!("opening ledger {}: {e}", path.display())))
}

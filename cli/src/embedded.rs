//! The catalog and ledger a command works on. The embedded default: the Iceberg SQL
//! catalog on SQLite (catalog name `local`) and the SQLite ledger, both at
//! `<warehouse>/catalog.db` and `<warehouse>/ledger.db` for a local warehouse; for an S3
//! warehouse, `--catalog` and `--state` say where they live. `--catalog-type` chooses
//! another catalog (REST, Glue, S3 Tables); the ledger stays in the state directory.
//! With `--stack NAME`, a deployed stack's: its catalog and its DynamoDB ledger, as its
//! functions' configuration names them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use iceberg::Catalog;
use kfs_core::{CatalogKind, CatalogSettings, RestCredentials, S3Settings, Warehouse};
// Every catalog kind with the AWS feature; the SQL, REST and memory ones without it.
#[cfg(feature = "aws")]
use kfs_aws::open_catalog_handle;
use kfs_core::SqliteLedger;
use kfs_core::TableSwap;
#[cfg(not(feature = "aws"))]
use kfs_core::open_catalog_handle;

use crate::error::{CliError, PlaceError};
use crate::options::CatalogTypeArg;

/// Environment variable holding REST catalog credentials as JSON (as `--catalog-credentials`).
pub const CREDENTIALS_VARIABLE: &str = "KFS_CATALOG_CREDENTIALS";

/// Whether a command may create the warehouse (`run`) or needs one that exists (the
/// read-only and maintenance commands, which never create one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// The warehouse and state folders are created when missing.
    Create,
    /// The warehouse must exist, with its catalog and ledger.
    Existing,
}

/// Where the embedded catalog and ledger live.
#[derive(Debug, Clone, clap::Args)]
pub struct WarehouseArgs {
    /// Warehouse: a directory or s3://bucket/prefix (not with `--stack`). `run` creates
    /// a missing one; the other commands need one that exists.
    #[arg(long)]
    pub warehouse: Option<String>,
    /// The SQLite file of the catalog (default: `WAREHOUSE/catalog.db`, or `STATE/catalog.db`).
    #[arg(long, value_name = "FILE")]
    pub catalog: Option<PathBuf>,
    /// Directory of the local state (catalog and ledger) when the warehouse is in S3.
    #[arg(long, value_name = "DIR")]
    pub state: Option<PathBuf>,
    /// The catalog: `sql` (the embedded SQLite catalog, default), `rest` (an Iceberg
    /// REST catalog such as Apache Polaris or Unity Catalog: `--catalog-uri`,
    /// `--rest-warehouse`, credentials), `glue` (the AWS Glue Data Catalog) or
    /// `s3tables` (`--table-bucket-arn`), or `memory` (a catalog that ends with the
    /// command: a dry run whose data files stay under the warehouse).
    #[arg(
        long,
        value_name = "TYPE",
        value_enum,
        ignore_case = true,
        default_value_t
    )]
    pub catalog_type: CatalogTypeArg,
    /// The REST catalog's base URI (the client appends `/v1/...`); with `sql`, a
    /// PostgreSQL database (`postgres://user:password@host:port/database`) instead of
    /// the SQLite file.
    #[arg(long, value_name = "URI")]
    pub catalog_uri: Option<String>,
    /// The REST catalog's warehouse *name* (Polaris' catalog, Unity's catalog), kept
    /// apart from the storage location, which the server decides.
    #[arg(long, value_name = "NAME")]
    pub rest_warehouse: Option<String>,
    /// A JSON file of REST credentials: `{"client_id", "client_secret", "scope",
    /// "oauth2-server-uri"}` or `{"token"}` (else the `KFS_CATALOG_CREDENTIALS`
    /// variable holds that JSON). Never printed.
    #[arg(long, value_name = "FILE")]
    pub catalog_credentials: Option<PathBuf>,
    /// The S3 Tables table bucket (`arn:aws:s3tables:<region>:<account>:bucket/<name>`).
    #[arg(long, value_name = "ARN")]
    pub table_bucket_arn: Option<String>,
}

/// The opened catalog and ledger.
pub struct Embedded<L> {
    /// The catalog.
    pub catalog: Arc<dyn Catalog>,
    /// The catalog's pointer swap (replace snapshots, schema changes).
    pub swap: Arc<dyn TableSwap>,
    /// The ledger.
    pub ledger: L,
    /// The S3 settings of the warehouse's files.
    pub s3: S3Settings,
    /// The warehouse: orphan cleanup lists and deletes only inside it.
    pub warehouse: Warehouse,
    /// The catalog, warehouse and ledger named for the operator.
    pub site: crate::target::Site,
    /// Where the last run's (a stack: each committer shard's last tick's) summary is.
    pub tick_log: kfs_core::TickLog,
}

impl<L> Embedded<L> {
    /// Where maintenance may list and delete: the storage and the warehouse.
    pub fn storage(&self) -> kfs_core::MaintenanceStorage {
        kfs_core::MaintenanceStorage {
            s3: self.s3.clone(),
            warehouse: self.warehouse.clone(),
        }
    }
}

/// The catalog and ledger of a local warehouse, or of a deployed stack.
pub enum Opened {
    /// The embedded default (or another catalog) with the SQLite ledger.
    Local(Embedded<SqliteLedger>),
    /// A deployed stack's catalog and DynamoDB ledger.
    #[cfg(feature = "aws")]
    Stack(Embedded<kfs_aws::dynamo_ledger::DynamoLedger>),
}

/// Runs `$body` with `$embedded` bound to the opened catalog and ledger, whichever
/// ledger it is.
#[macro_export]
macro_rules! with_opened {
    ($opened:expr, $embedded:ident => $body:expr) => {
        match $opened {
            $crate::embedded::Opened::Local($embedded) => $body,
            #[cfg(feature = "aws")]
            $crate::embedded::Opened::Stack($embedded) => $body,
        }
    };
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

    /// Opens the catalog and the ledger: the deployed stack's when `stack` (`--stack`)
    /// names one, else the existing warehouse's (never created).
    pub async fn open(&self, stack: Option<&str>) -> Result<Opened, CliError> {
        match stack {
            Some(name) => self.open_stack(name).await,
            None => Ok(Opened::Local(self.open_local(Access::Existing).await?)),
        }
    }

    #[cfg(feature = "aws")]
    async fn open_stack(&self, name: &str) -> Result<Opened, CliError> {
        if self.warehouse.is_some() || self.catalog.is_some() || self.state.is_some() {
            return Err(CliError::Usage(format!(
                "--stack {name} names the warehouse, catalog and ledger: leave out --warehouse, --catalog and --state"
            )));
        }
        let env = kfs_aws::stack::stack_function_env(name)
            .await
            .map_err(|e| CliError::Usage(e.0))?;
        let handle = env
            .catalog_handle()
            .await
            .map_err(|e| CliError::Pipeline(format!("stack {name}: {}", e.0)))?;
        let ledger = env.ledger().await;
        let site = crate::target::Site {
            stack: Some(name.to_owned()),
            catalog: crate::target::describe_catalog(&env.catalog),
            warehouse: env.warehouse.location(),
            ledger: kfs_core::Ledger::identity(&ledger),
        };
        Ok(Opened::Stack(Embedded {
            catalog: handle.catalog,
            swap: handle.swap,
            ledger,
            site,
            s3: env.s3.clone(),
            warehouse: env.warehouse.clone(),
            tick_log: env.tick_log(),
        }))
    }

    #[cfg(not(feature = "aws"))]
    async fn open_stack(&self, name: &str) -> Result<Opened, CliError> {
        Err(CliError::Usage(format!(
            "--stack {name}: this kfs-iceberg was built without the aws feature"
        )))
    }

    /// Opens the warehouse's catalog and SQLite ledger (never a stack's), creating
    /// the warehouse only with [`Access::Create`].
    pub async fn open_local(&self, access: Access) -> Result<Embedded<SqliteLedger>, CliError> {
        let location = self.warehouse.as_deref().ok_or_else(|| {
            CliError::Usage(
                "--warehouse DIR (or --stack NAME, a deployed stack) is required".into(),
            )
        })?;
        let warehouse = Warehouse::parse(location).map_err(CliError::Usage)?;
        let state = self.state_dir(&warehouse)?;
        let kind = self.catalog_kind(&state)?;
        self.check_places(location, &warehouse, &state, &kind, access)?;
        let s3 = S3Settings::from_env();
        let tick_log = kfs_core::TickLog::new(s3.file_io(), &warehouse.location());
        if let Warehouse::S3 { .. } = warehouse {
            // One request before anything is created: storage that cannot be signed
            // for says which variables to set.
            if let Err(e) = tick_log.read().await
                && kfs_core::missing_credentials(&e)
            {
                return Err(CliError::Credentials {
                    location: warehouse.location(),
                });
            }
        }
        if access == Access::Create {
            std::fs::create_dir_all(&state).map_err(|source| CliError::Io {
                path: state.clone(),
                source,
            })?;
        }
        let handle = open_catalog_handle(&kind, &warehouse, &s3)
            .await
            .map_err(|e| {
                CliError::Pipeline(format!("opening the {} catalog: {e}", self.catalog_type))
            })?;
        let ledger_path = state.join("ledger.db");
        let ledger = open_ledger(&ledger_path).await?;
        let site = crate::target::Site {
            stack: None,
            catalog: crate::target::describe_catalog(&kind),
            warehouse: warehouse.location(),
            ledger: kfs_core::Ledger::identity(&ledger),
        };
        Ok(Embedded {
            site,
            catalog: handle.catalog,
            swap: handle.swap,
            ledger,
            tick_log,
            s3,
            warehouse,
        })
    }

    /// Checks the warehouse and state folders before anything is created: neither is
    /// a file, and with [`Access::Existing`] both exist with the ledger (and the
    /// SQLite catalog) in them.
    fn check_places(
        &self,
        location: &str,
        warehouse: &Warehouse,
        state: &Path,
        kind: &CatalogKind,
        access: Access,
    ) -> Result<(), CliError> {
        let flag = if self.state.is_some() {
            "--state"
        } else {
            "--warehouse"
        };
        let shown = |path: &Path| path.display().to_string();
        if let Warehouse::Local(dir) = warehouse {
            if dir.is_file() {
                return Err(PlaceError::IsAFile {
                    flag: "--warehouse",
                    path: location.to_owned(),
                }
                .into());
            }
            if access == Access::Existing && !dir.exists() {
                return Err(PlaceError::WarehouseMissing(location.to_owned()).into());
            }
        }
        if state.is_file() {
            return Err(PlaceError::IsAFile {
                flag,
                path: shown(state),
            }
            .into());
        }
        if access == Access::Create {
            return Ok(());
        }
        if !state.exists() {
            return Err(PlaceError::StateMissing(shown(state)).into());
        }
        let mut needed = vec![state.join("ledger.db")];
        if let CatalogKind::Sql { database } = kind {
            needed.insert(0, database.clone());
        }
        match needed.into_iter().find(|file| !file.is_file()) {
            Some(missing) => Err(PlaceError::NotAWarehouse {
                flag,
                path: shown(state),
                missing: shown(&missing),
            }
            .into()),
            None => Ok(()),
        }
    }

    /// The catalog the options choose ([`CatalogSettings::kind`]); the SQLite catalog
    /// lives in `state` unless `--catalog` says where.
    fn catalog_kind(&self, state: &Path) -> Result<CatalogKind, CliError> {
        if self.catalog_type == CatalogTypeArg::Sql
            && self.catalog_uri.as_deref().is_some_and(|uri| {
                !uri.starts_with("postgres://") && !uri.starts_with("postgresql://")
            })
        {
            return Err(CliError::Usage(format!(
                "--catalog-type sql: --catalog-uri must be a postgres:// URL (a SQLite catalog is --catalog FILE), not {:?}",
                self.catalog_uri
                    .as_deref()
                    .map(kfs_plan::secret_url::redact)
                    .unwrap_or_default()
            )));
        }
        let credentials = if self.catalog_type == CatalogTypeArg::Rest {
            self.rest_credentials()?
        } else {
            RestCredentials::default()
        };
        let settings = CatalogSettings {
            kind: Some(self.catalog_type.name().to_owned()),
            uri: self.catalog_uri.clone().map(Into::into),
            database: self.catalog.clone(),
            warehouse: self.rest_warehouse.clone(),
            table_bucket_arn: self.table_bucket_arn.clone(),
        };
        settings
            .kind(
                "sql",
                Some(&state.join("catalog.db")),
                credentials,
                &|name| std::env::var(name).ok(),
            )
            .map_err(|e| CliError::Usage(format!("--catalog-type {}: {e}", self.catalog_type)))
    }

    /// REST credentials from `--catalog-credentials` or `KFS_CATALOG_CREDENTIALS`
    /// (none: an open catalog).
    fn rest_credentials(&self) -> Result<RestCredentials, CliError> {
        let (document, origin) = match &self.catalog_credentials {
            Some(path) => (
                std::fs::read_to_string(path).map_err(|source| CliError::Io {
                    path: path.clone(),
                    source,
                })?,
                path.display().to_string(),
            ),
            None => match std::env::var(CREDENTIALS_VARIABLE) {
                Ok(document) if !document.is_empty() => (document, CREDENTIALS_VARIABLE.to_owned()),
                _ => return Ok(RestCredentials::default()),
            },
        };
        RestCredentials::from_json(&document).map_err(|e| CliError::Usage(format!("{origin}: {e}")))
    }
}

async fn open_ledger(path: &Path) -> Result<SqliteLedger, CliError> {
    SqliteLedger::open(path)
        .await
        .map_err(|e| CliError::Pipeline(format!("opening ledger {}: {e}", path.display())))
}

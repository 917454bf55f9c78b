//! The catalog and ledger a command works on. The embedded default: the Iceberg SQL
//! catalog on SQLite (catalog name `local`) and the SQLite ledger, both at
//! `<warehouse>/catalog.db` and `<warehouse>/ledger.db` for a local warehouse; for an S3
//! warehouse, `--catalog` and `--state` say where they live. `--catalog-type` chooses
//! another catalog (REST, Glue, S3 Tables); the ledger stays in the state directory.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use iceberg::Catalog;
use kfs_core::{CatalogKind, RestCredentials, RestSettings, S3Settings, Warehouse};
// Every catalog kind with the AWS feature; the SQL, REST and memory ones without it.
#[cfg(feature = "aws")]
use kfs_aws::open_catalog_handle;
use kfs_core::SqliteLedger;
use kfs_core::TableSwap;
#[cfg(not(feature = "aws"))]
use kfs_core::open_catalog_handle;

use crate::CliError;

/// Environment variable holding REST catalog credentials as JSON (as `--catalog-credentials`).
pub const CREDENTIALS_VARIABLE: &str = "KFS_CATALOG_CREDENTIALS";

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
    /// The catalog: `sql` (the embedded SQLite catalog, default), `rest` (an Iceberg
    /// REST catalog such as Apache Polaris or Unity Catalog: `--catalog-uri`,
    /// `--rest-warehouse`, credentials), `glue` (the AWS Glue Data Catalog) or
    /// `s3tables` (`--table-bucket-arn`), or `memory` (a catalog that ends with the
    /// command: a dry run whose data files stay under the warehouse).
    #[arg(long, value_name = "TYPE", default_value = "sql")]
    pub catalog_type: String,
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
pub struct Embedded {
    /// The catalog.
    pub catalog: Arc<dyn Catalog>,
    /// The catalog's pointer swap (replace snapshots, schema changes).
    pub swap: Arc<dyn TableSwap>,
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
        let kind = self.catalog_kind(&state)?;
        let handle = open_catalog_handle(&kind, &warehouse, &S3Settings::from_env())
            .await
            .map_err(|e| {
                CliError::Pipeline(format!("opening the {} catalog: {e}", self.catalog_type))
            })?;
        let ledger_path = state.join("ledger.db");
        let ledger = open_ledger(&ledger_path).await?;
        Ok(Embedded {
            catalog: handle.catalog,
            swap: handle.swap,
            ledger,
        })
    }

    /// The catalog the options choose; the SQLite catalog lives in `state` unless
    /// `--catalog` says where.
    fn catalog_kind(&self, state: &Path) -> Result<CatalogKind, CliError> {
        let needs = |option: &str| {
            CliError::Usage(format!(
                "--catalog-type {} needs {option}",
                self.catalog_type
            ))
        };
        Ok(match self.catalog_type.as_str() {
            "sql" => match &self.catalog_uri {
                Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                    CatalogKind::SqlPostgres { url: url.clone() }
                }
                Some(other) => {
                    return Err(CliError::Usage(format!(
                        "--catalog-type sql: --catalog-uri must be a postgres:// URL (a SQLite catalog is --catalog FILE), not {:?}",
                        other.split('@').next_back().unwrap_or_default()
                    )));
                }
                None => CatalogKind::Sql {
                    database: self
                        .catalog
                        .clone()
                        .unwrap_or_else(|| state.join("catalog.db")),
                },
            },
            "rest" => CatalogKind::Rest(RestSettings {
                uri: self
                    .catalog_uri
                    .clone()
                    .ok_or_else(|| needs("--catalog-uri"))?,
                warehouse: self.rest_warehouse.clone(),
                credentials: self.rest_credentials()?,
            }),
            "memory" => CatalogKind::Memory,
            "glue" => CatalogKind::Glue {
                endpoint: std::env::var("AWS_ENDPOINT_URL_GLUE")
                    .or_else(|_| std::env::var("AWS_ENDPOINT_URL"))
                    .ok()
                    .filter(|e| !e.is_empty()),
            },
            "s3tables" => {
                let arn = self
                    .table_bucket_arn
                    .clone()
                    .ok_or_else(|| needs("--table-bucket-arn"))?;
                if !kfs_core::is_table_bucket_arn(&arn) {
                    return Err(CliError::Usage(format!(
                        "--table-bucket-arn {arn:?}: expected arn:aws:s3tables:<region>:<account>:bucket/<name>"
                    )));
                }
                CatalogKind::S3Tables(kfs_core::S3TablesSettings {
                    table_bucket_arn: arn,
                    endpoint: std::env::var("AWS_ENDPOINT_URL_S3TABLES")
                        .or_else(|_| std::env::var("AWS_ENDPOINT_URL"))
                        .ok()
                        .filter(|e| !e.is_empty()),
                })
            }
            other => {
                return Err(CliError::Usage(format!(
                    "--catalog-type {other:?}: expected sql, rest, glue, s3tables or memory"
                )));
            }
        })
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

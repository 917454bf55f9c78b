//! What both Lambda functions read from their environment, and the clients they build
//! from it once, at cold start.
//!
//! | variable | meaning |
//! |---|---|
//! | `SEGMENT_BUCKET` | bucket the KafScale brokers write to |
//! | `SEGMENT_PREFIX` | key prefix of the segments in it (empty for the bucket root) |
//! | `LEDGER_TABLE` | DynamoDB ledger table |
//! | `WAREHOUSE` | `s3://bucket/prefix` of the Iceberg warehouse |
//! | `CATALOG_TYPE` | `glue` (default) or `sql` (SQLite file at `CATALOG_URI`, tests only) |
//! | `TABLE_NAMESPACE` | namespace of the topic tables (default `kafscale`) |
//! | `CONVERT_CONCURRENCY` | segments converted at once per invocation (default 4) |
//! | `SWEEP_MAX_SEGMENTS` | segments the committer's sweep converts per run (default 200) |
//! | `ETCD_ENDPOINTS` | comma-separated etcd endpoints of the offset cross-check (empty: off) |
//!
//! Credentials come from the function's role (the standard AWS chain); endpoints from
//! `AWS_ENDPOINT_URL` for local stacks.

use std::path::PathBuf;
use std::sync::Arc;

use iceberg::Catalog;
use kfs_core::catalog::{CatalogKind, S3Settings, Warehouse, open_catalog};
use kfs_core::source::OpendalSource;
use kfs_plan::naming::TableNaming;

use crate::dynamo_ledger::DynamoLedger;

/// Structured JSON logs on stdout (CloudWatch adds the timestamps), filtered by
/// `RUST_LOG`.
pub fn init_logging() {
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_target(false)
        .with_current_span(false)
        .without_time()
        .init();
}

/// A missing or invalid setting.
#[derive(Debug, thiserror::Error)]
#[error("configuration: {0}")]
pub struct ConfigError(pub String);

/// The settings of a function.
#[derive(Debug, Clone)]
pub struct FunctionEnv {
    /// Segment bucket.
    pub bucket: String,
    /// Segment prefix, without leading or trailing `/`.
    pub prefix: String,
    /// Ledger table.
    pub ledger_table: String,
    /// Warehouse.
    pub warehouse: Warehouse,
    /// Catalog.
    pub catalog: CatalogKind,
    /// Table naming.
    pub naming: TableNaming,
    /// Conversion concurrency.
    pub convert_concurrency: usize,
    /// Sweep bound.
    pub sweep_max_segments: usize,
    /// S3 settings.
    pub s3: S3Settings,
    /// etcd endpoints of the cross-check.
    pub etcd_endpoints: Vec<String>,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn required(name: &str) -> Result<String, ConfigError> {
    var(name).ok_or_else(|| ConfigError(format!("{name} is not set")))
}

fn number(name: &str, default: usize) -> Result<usize, ConfigError> {
    var(name).map_or(Ok(default), |v| {
        v.parse()
            .map_err(|_| ConfigError(format!("{name}={v:?} is not a number")))
    })
}

impl FunctionEnv {
    /// Reads the environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        let warehouse = Warehouse::parse(&required("WAREHOUSE")?).map_err(ConfigError)?;
        let catalog = match var("CATALOG_TYPE").as_deref().unwrap_or("glue") {
            "glue" => CatalogKind::Glue {
                endpoint: var("AWS_ENDPOINT_URL_GLUE").or_else(|| var("AWS_ENDPOINT_URL")),
            },
            "sql" => CatalogKind::Sql {
                database: PathBuf::from(required("CATALOG_URI")?),
            },
            other => {
                return Err(ConfigError(format!(
                    "CATALOG_TYPE={other:?}: expected glue or sql"
                )));
            }
        };
        Ok(Self {
            bucket: required("SEGMENT_BUCKET")?,
            prefix: var("SEGMENT_PREFIX")
                .unwrap_or_default()
                .trim_matches('/')
                .to_owned(),
            ledger_table: required("LEDGER_TABLE")?,
            warehouse,
            catalog,
            naming: TableNaming {
                namespace: var("TABLE_NAMESPACE"),
                ..TableNaming::default()
            },
            convert_concurrency: number("CONVERT_CONCURRENCY", 4)?,
            sweep_max_segments: number("SWEEP_MAX_SEGMENTS", 200)?,
            s3: S3Settings::from_env(),
            etcd_endpoints: var("ETCD_ENDPOINTS")
                .map(|v| {
                    v.split(',')
                        .map(|e| e.trim().to_owned())
                        .filter(|e| !e.is_empty())
                        .collect()
                })
                .unwrap_or_default(),
        })
    }

    /// The segment source, rooted at the segment prefix.
    pub fn source(&self) -> Result<OpendalSource, ConfigError> {
        OpendalSource::s3(&self.bucket, &self.prefix, &self.s3)
            .map_err(|e| ConfigError(e.to_string()))
    }

    /// The catalog.
    pub async fn catalog(&self) -> Result<Arc<dyn Catalog>, ConfigError> {
        open_catalog(&self.catalog, &self.warehouse, &self.s3)
            .await
            .map_err(|e| ConfigError(format!("catalog: {e}")))
    }

    /// The DynamoDB ledger, with the standard AWS configuration chain.
    pub async fn ledger(&self) -> DynamoLedger {
        let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        DynamoLedger::new(
            aws_sdk_dynamodb::Client::new(&config),
            self.ledger_table.clone(),
        )
    }
}

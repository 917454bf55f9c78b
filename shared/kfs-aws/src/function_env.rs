//! What both Lambda functions read from their environment, and the clients they build
//! from it once, at cold start.
//!
//! | variable | meaning |
//! |---|---|
//! | `SEGMENT_BUCKET` | bucket the KafScale brokers write to |
//! | `SEGMENT_PREFIX` | key prefix of the segments in it (empty for the bucket root) |
//! | `LEDGER_TABLE` | DynamoDB ledger table |
//! | `WAREHOUSE` | `s3://bucket/prefix` of the Iceberg warehouse |
//! | `CATALOG_TYPE` | `glue` (default), `rest`, `s3tables` (the table bucket `TABLE_BUCKET_ARN`), or `sql` (a PostgreSQL database at `CATALOG_URI` = `postgres://…`, or a SQLite file there, for tests; only in functions built with their `sql` feature) |
//! | `TABLE_BUCKET_ARN` | with `s3tables`: `arn:aws:s3tables:<region>:<account>:bucket/<name>` |
//! | `CATALOG_URI` | the REST catalog's base URI |
//! | `CATALOG_WAREHOUSE` | the REST catalog's warehouse *name* (Polaris catalog, Unity catalog) |
//! | `CATALOG_SECRET_ARN` | Secrets Manager secret, or SSM parameter (`arn:aws:ssm:…:parameter/<name>`, a `SecureString`), holding the REST credentials as JSON: `{"client_id", "client_secret", "scope", "oauth2-server-uri"}` or `{"token"}` |
//! | `TABLE_NAMESPACE` | namespace of the topic tables (default `kafscale`) |
//! | `TABLE_MAPPING` | JSON array of `{"topic": "<regex>", "table": "namespace.name"}` rules (whole-name matches, `$1`/`${group}` in the table), tried in order; other topics go to `TABLE_NAMESPACE.<topic>` |
//! | `TABLE_PROPERTIES` | JSON object of properties of the tables the functions create, e.g. `{"write.parquet.compression-codec": "zstd", "write.parquet.compression-level": "9", "write.target-file-size-bytes": "268435456"}` |
//! | `VALUE_FORMAT` | how the tables the functions create store record values: `raw` (default) `json` (typed columns; values that cannot be written go to `<table>__dlq`) or `registry` (Avro values framed for a schema registry, as typed columns) |
//! | `LFS_MODE` | what is done with large-file (LFS) claim-check records: `off` (default), `resolve` (blobs fetched from the segment bucket into `value`), `reference` (envelopes kept, described by `lfs_*` columns), `skip` or `hybrid` (resolved up to `LFS_MAX_INLINE_SIZE`, referenced above); a blob that cannot be had sends its record to `<table>__dlq` |
//! | `LFS_TOPICS` | JSON object `{"<topic>": "<mode>"}`: per-topic LFS modes |
//! | `LFS_MAX_INLINE_SIZE`, `LFS_CONCURRENCY`, `LFS_VERIFY_CHECKSUMS`, `LFS_MIN_CHECKSUM_ALG` | largest blob resolved, in bytes (default 64 MiB); blobs fetched at once (default 4); `on` (default) or `off`; the weakest checksum accepted, `sha256` (default), `md5`, `crc32` or `none` (an envelope cannot lower it) |
//! | `TABLE_MODE` | how the tables the functions create treat their records: `append` (default), `upsert` (one row per record key, its last change; a record with a null value deletes its key) or `cdc` (Debezium change events in JSON or through the registry mirrored by key, the `after` image's fields as columns; `VALUE_FORMAT=json` or `registry`); `TABLE_MAPPING` rules may carry their own `table_mode` |
//! | `UPSERT_KEY` | the key of `upsert` and `cdc` tables: unset (or `key`) for the record key, or value fields `FIELD[,FIELD...]` (with `TABLE_MODE=upsert` or `cdc`, `VALUE_FORMAT=json` or `registry`); `TABLE_MAPPING` rules may carry their own `upsert_key` |
//! | `KEY_FORMAT` | how registry tables read record keys: `raw` (default) or `registry` (keys framed for the schema registry, decoded into the struct column `key_fields`; a record whose key is not goes to `<table>__dlq`) |
//! | `SCHEMA_REGISTRY_URL` | with `VALUE_FORMAT=registry`: the schema registry the values' schema ids are looked up in: `https://…` for the Confluent REST API, `glue://` (or `glue://REGION`) for the AWS Glue Schema Registry, read with the function's role |
//! | `SCHEMA_REGISTRY_SECRET_ARN` | Secrets Manager secret, or SSM parameter, holding the registry's credentials as JSON: `{"username", "password"}` (Confluent Cloud: API key and secret) or `{"token"}`; read at cold start, never logged |
//! | `VALUE_COLUMNS` | declared columns of new JSON tables, a JSON object `{"<topic>": "name type, ..."}` (types boolean, int, long, float, double, string); other topics infer theirs |
//! | `PARTITION_BY` | partition spec of the tables the functions create, e.g. `day(timestamp)` or `hour(timestamp), bucket(16, key)` (default: unpartitioned; existing tables keep theirs) |
//! | `CONVERT_CONCURRENCY` | segments converted at once per invocation (default 4) |
//! | `SWEEP_MAX_SEGMENTS` | segments the committer's sweep converts per run (default 200) |
//! | `ETCD_ENDPOINTS` | comma-separated etcd endpoints of the offset cross-check (empty: off); `https://` for TLS; a user or client certificate over `http://`, or TLS files beside it, are refused at start |
//! | `ETCD_GRACE`, `ETCD_UNREACHABLE` | how long a segment past etcd's offsets (or etcd unreachable) waits (default `5m`), then `hold` (default) or `proceed` |
//! | `ETCD_CA_FILE`, `ETCD_CERT_FILE`, `ETCD_KEY_FILE` | PEM files (in the package or a layer, under `/opt`) of etcd's CA and the client certificate |
//! | `ETCD_USERNAME`, `ETCD_PASSWORD_SECRET_ARN` | etcd's authentication: the user, and the secret or SSM parameter holding its password |
//! | `TOPICS_INCLUDE`, `TOPICS_EXCLUDE` | comma-separated regular expressions over whole topic names: the topics ingested (default all), and those never ingested |
//! | `TABLE_PREFIX` | prefix of default table names (`<namespace>.<prefix><topic>`) |
//! | `MAINTENANCE` | `on` (default) or `off`: the committer's compaction, expiry, manifest rewrite and orphan cleanup |
//! | `SNAPSHOT_RETENTION` | expire snapshots older than this (default `5d`; at least one is kept) |
//! | `MAX_SNAPSHOTS` | keep at most this many snapshots per table whatever their age (default 1000; `0`: age only). Every commit rewrites the metadata file, which lists every snapshot: commit cost grows about 18 µs per snapshot kept, so tables that commit every minute want a bound |
//! | `ORPHAN_AGE` | delete unreferenced files older than this, hourly (default `3d`, below `1h` each cleanup is refused and alarmed; `off` to disable) |
//! | `MAX_MANIFESTS` | merge a table's manifests past this many (default 10: commit time stays flat as the table ages) |
//! | `WAKEUP_QUEUE_URL` | the committer's wake-up queue (SQS FIFO): the converter announces the tables it left pending work in, the committer holds the early wake-ups there (empty: no wake-ups, the schedule commits) |
//! | `WAKEUP_MIN_INTERVAL_SECONDS` | the least seconds between two commits of a table that wake-ups ask for (default 5; `0`: a commit per wake-up); a wake-up that comes sooner is held in the queue for the rest |
//!
//! AWS credentials come from the function's role (the standard AWS chain); endpoints
//! from `AWS_ENDPOINT_URL` for local stacks. REST catalog credentials are read from
//! Secrets Manager at cold start, never from plain variables, and never logged.

use kfs_core::MaintenancePolicy;
use kfs_core::OpendalSource;
use kfs_core::{CatalogHandle, CatalogKind, RestCredentials, S3Settings, Warehouse};
use kfs_core::{EtcdSettings, Settings};
use kfs_plan::crosscheck::CrossCheckPolicy;
use kfs_plan::naming::TableNaming;

use crate::dynamo_ledger::DynamoLedger;
pub use crate::error::ConfigError;

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
    /// Memory the converter's conversions may take together, in MiB: the function's
    /// memory (`AWS_LAMBDA_FUNCTION_MEMORY_SIZE`, set by Lambda) minus 128 MiB for the
    /// runtime; `None` outside Lambda.
    pub memory_budget_mib: Option<u64>,
    /// Sweep bound.
    pub sweep_max_segments: usize,
    /// S3 settings.
    pub s3: S3Settings,
    /// The etcd cross-check's endpoints, TLS files and user.
    pub etcd: EtcdSettings,
    /// How the cross-check treats etcd lag and outages: `ETCD_GRACE` (default `5m`)
    /// and `ETCD_UNREACHABLE` (`hold`, the default: commits wait for etcd; `proceed`:
    /// after the grace they commit without the check, with a warning metric).
    pub crosscheck: CrossCheckPolicy,
    /// Secrets Manager secret of the REST catalog's credentials.
    pub catalog_secret_arn: Option<String>,
    /// The committer's maintenance policy (`None`: off).
    pub maintenance: Option<MaintenancePolicy>,
    /// The schema registry of registry-encoded values (`SCHEMA_REGISTRY_URL`; `None`:
    /// no registry).
    pub schema_registry: Option<kfs_core::RegistryLocation>,
    /// Secrets Manager secret, or SSM parameter, of the registry's credentials
    /// (`SCHEMA_REGISTRY_SECRET_ARN`).
    pub schema_registry_secret_arn: Option<String>,
    /// The committer's wake-up queue (`WAKEUP_QUEUE_URL`, an SQS FIFO queue; `None`:
    /// the converter wakes nobody, and the schedule commits).
    pub wakeup_queue_url: Option<String>,
    /// The least time between two commits of a table that wake-ups ask for
    /// (`WAKEUP_MIN_INTERVAL_SECONDS`, default 5): a wake-up that comes sooner is held
    /// in the queue for the rest of it.
    pub wakeup_min_interval: std::time::Duration,
}

/// The default least time between two commits of a table that wake-ups ask for.
pub const DEFAULT_WAKEUP_MIN_INTERVAL_SECONDS: usize = 5;

impl FunctionEnv {
    /// Reads the environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(&|name| std::env::var(name).ok())
    }

    /// Reads the variables `lookup` returns (empty values count as unset): the
    /// deployment's wiring here, everything else through [`Settings::from_env`].
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let var = |name: &str| lookup(name).filter(|v| !v.is_empty());
        let required =
            |name: &str| var(name).ok_or_else(|| ConfigError(format!("{name} is not set")));
        let number = |name: &str, default: usize| {
            var(name).map_or(Ok(default), |v| {
                v.parse()
                    .map_err(|_| ConfigError(format!("{name}={v:?} is not a number")))
            })
        };
        let settings = Settings::from_env(lookup).map_err(|e| ConfigError(e.0))?;
        let valid = settings.validate("").map_err(|e| ConfigError(e.0))?;
        if settings.catalog.kind.as_deref() == Some("memory") {
            return Err(ConfigError(
                "CATALOG_TYPE=\"memory\": a function needs a lasting catalog (glue, rest, s3tables or sql)".into(),
            ));
        }
        let catalog = settings
            .catalog
            .kind("glue", None, RestCredentials::default(), lookup)
            .map_err(|e| ConfigError(format!("CATALOG_TYPE: {e}")))?;
        let warehouse = Warehouse::parse(&required("WAREHOUSE")?).map_err(ConfigError)?;
        let bucket = required("SEGMENT_BUCKET")?;
        let prefix = var("SEGMENT_PREFIX")
            .unwrap_or_default()
            .trim_matches('/')
            .to_owned();
        let mut naming = valid.naming;
        naming.lfs.policy.origin = kfs_plan::lfs::BlobOrigin {
            bucket: Some(bucket.clone()),
            prefix: prefix.clone(),
        };
        Ok(Self {
            bucket,
            prefix,
            ledger_table: required("LEDGER_TABLE")?,
            warehouse,
            catalog,
            naming,
            convert_concurrency: number("CONVERT_CONCURRENCY", 4)?,
            memory_budget_mib: var("AWS_LAMBDA_FUNCTION_MEMORY_SIZE")
                .and_then(|mb| mb.trim().parse::<u64>().ok())
                .map(|mb| mb.saturating_sub(128).max(1)),
            sweep_max_segments: number("SWEEP_MAX_SEGMENTS", 200)?,
            s3: S3Settings::from_lookup(lookup),
            etcd: settings.etcd,
            catalog_secret_arn: var("CATALOG_SECRET_ARN"),
            maintenance: valid.maintenance,
            crosscheck: valid.crosscheck,
            schema_registry: valid.schema_registry,
            schema_registry_secret_arn: var("SCHEMA_REGISTRY_SECRET_ARN"),
            wakeup_queue_url: var("WAKEUP_QUEUE_URL"),
            wakeup_min_interval: std::time::Duration::from_secs(number(
                "WAKEUP_MIN_INTERVAL_SECONDS",
                DEFAULT_WAKEUP_MIN_INTERVAL_SECONDS,
            )? as u64),
        })
    }

    /// The segment source, rooted at the segment prefix.
    pub fn source(&self) -> Result<OpendalSource, ConfigError> {
        OpendalSource::s3(&self.bucket, &self.prefix, &self.s3)
            .map_err(|e| ConfigError(e.to_string()))
    }

    /// The catalog with its pointer swap; a REST catalog gets its credentials from
    /// Secrets Manager or SSM first.
    pub async fn catalog_handle(&self) -> Result<CatalogHandle, ConfigError> {
        let mut kind = self.catalog.clone();
        if let (CatalogKind::Rest(rest), Some(arn)) = (&mut kind, &self.catalog_secret_arn) {
            let config = self.aws_config().await;
            rest.credentials = crate::secrets::rest_credentials(&config, arn).await?;
        }
        crate::catalog::open_catalog_handle(&kind, &self.warehouse, &self.s3)
            .await
            .map_err(|e| ConfigError(format!("catalog: {e}")))
    }

    /// The registry's schema cache, its credentials read from
    /// `SCHEMA_REGISTRY_SECRET_ARN` (Secrets Manager or SSM) once, at cold start;
    /// `None` without a registry. `glue://` is the AWS Glue Schema Registry, read
    /// with the function's role.
    pub async fn schemas(
        &self,
    ) -> Result<Option<std::sync::Arc<kfs_core::RegistrySchemas>>, ConfigError> {
        let Some(location) = &self.schema_registry else {
            return Ok(None);
        };
        let mut location = location.clone();
        if let (kfs_core::RegistryLocation::Confluent { credentials, .. }, Some(arn)) =
            (&mut location, &self.schema_registry_secret_arn)
        {
            let config = self.aws_config().await;
            let document = crate::secrets::secret_string(&config, arn, "schema registry").await?;
            *credentials = kfs_core::RegistryCredentials::from_json(
                &document,
                &format!("schema registry secret {arn}"),
            )
            .map_err(ConfigError)?;
        }
        crate::open_schema_registry(&location, &self.s3)
            .await
            .map(Some)
            .map_err(|e| ConfigError(format!("SCHEMA_REGISTRY_URL: {}", e.0)))
    }

    /// How the committer reaches etcd: the TLS files read and the password fetched
    /// (from `ETCD_PASSWORD_SECRET_ARN` when set) once, at cold start.
    pub async fn etcd_connection(&self) -> Result<kfs_etcd::EtcdConnection, ConfigError> {
        let read = |path: &Option<std::path::PathBuf>, what: &str| {
            path.as_ref()
                .map(|path| {
                    std::fs::read(path)
                        .map_err(|e| ConfigError(format!("{what} {}: {e}", path.display())))
                })
                .transpose()
        };
        let ca_pem = read(&self.etcd.ca_file, "ETCD_CA_FILE")?;
        let identity_pem = match (
            read(&self.etcd.cert_file, "ETCD_CERT_FILE")?,
            read(&self.etcd.key_file, "ETCD_KEY_FILE")?,
        ) {
            (Some(mut cert), Some(key)) => {
                cert.push(b'\n');
                cert.extend_from_slice(&key);
                Some(cert)
            }
            (None, None) => None,
            _ => {
                return Err(ConfigError(
                    "ETCD_CERT_FILE and ETCD_KEY_FILE go together".into(),
                ));
            }
        };
        let user = match &self.etcd.username {
            None => None,
            Some(name) => {
                let Some(arn) = &self.etcd.password_secret else {
                    return Err(ConfigError(
                        "ETCD_USERNAME needs ETCD_PASSWORD_SECRET_ARN (the secret or SSM parameter holding the password)".into(),
                    ));
                };
                let config = self.aws_config().await;
                let password = crate::secrets::secret_string(&config, arn, "etcd password").await?;
                Some((name.clone(), password))
            }
        };
        let connection = kfs_etcd::EtcdConnection {
            endpoints: self.etcd.endpoints.clone(),
            ca_pem,
            identity_pem,
            user,
        };
        connection.check().map_err(ConfigError)?;
        Ok(connection)
    }

    /// Where the committer keeps its last tick's summary (beside the tables).
    pub fn tick_log(&self) -> kfs_core::TickLog {
        kfs_core::TickLog::new(self.s3.file_io(), &self.warehouse.location())
    }

    /// The AWS SDK configuration: the standard chain, with the region, endpoint and
    /// static keys of these settings when they are given (local stacks).
    pub async fn aws_config(&self) -> aws_config::SdkConfig {
        crate::catalog::aws_config(&self.s3, self.s3.endpoint.as_deref()).await
    }

    /// The committer's wake-up queue, when `WAKEUP_QUEUE_URL` names one.
    pub async fn wakeups(&self) -> Option<crate::wakeups::SqsWakeups> {
        let url = self.wakeup_queue_url.clone()?;
        let config = self.aws_config().await;
        Some(crate::wakeups::SqsWakeups::new(
            aws_sdk_sqs::Client::new(&config),
            url,
        ))
    }

    /// The DynamoDB ledger, with the standard AWS configuration chain.
    pub async fn ledger(&self) -> DynamoLedger {
        let config = self.aws_config().await;
        DynamoLedger::new(
            aws_sdk_dynamodb::Client::new(&config),
            self.ledger_table.clone(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kfs_plan::crosscheck::UnreachablePolicy;

    fn env(pairs: &[(&str, &str)]) -> Result<FunctionEnv, ConfigError> {
        let vars: std::collections::HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        FunctionEnv::from_lookup(&|name| vars.get(name).cloned())
    }

    #[test]
    fn snapshot_bound_defaults_to_a_thousand_and_zero_means_age_only() {
        let policy = |pairs: &[(&str, &str)]| {
            env(pairs)
                .ok()
                .and_then(|e| e.maintenance)
                .map(|m| m.max_snapshots)
        };
        let base = [
            ("WAREHOUSE", "s3://bucket/wh"),
            ("SEGMENT_BUCKET", "segments"),
            ("LEDGER_TABLE", "ledger"),
        ];
        assert_eq!(policy(&base), Some(Some(1000)));
        let with = |value| {
            let mut pairs = base.to_vec();
            pairs.push(("MAX_SNAPSHOTS", value));
            policy(&pairs)
        };
        assert_eq!(with("50"), Some(Some(50)));
        assert_eq!(with("0"), Some(None));
        assert!(env(&[("WAREHOUSE", "s3://b/w"), ("MAX_SNAPSHOTS", "many")]).is_err());
    }

    #[test]
    fn the_etcd_policy_comes_from_etcd_grace_and_etcd_unreachable() {
        let base = [
            ("WAREHOUSE", "s3://bucket/wh"),
            ("SEGMENT_BUCKET", "segments"),
            ("LEDGER_TABLE", "ledger"),
        ];
        let policy = |extra: &[(&str, &str)]| {
            let mut pairs = base.to_vec();
            pairs.extend_from_slice(extra);
            env(&pairs).map(|e| e.crosscheck)
        };
        assert!(policy(&[]).is_ok_and(|p| p == CrossCheckPolicy::default()));
        assert!(
            policy(&[("ETCD_GRACE", "30s"), ("ETCD_UNREACHABLE", "proceed")]).is_ok_and(|p| p
                == CrossCheckPolicy {
                    grace_ms: 30_000,
                    on_unreachable: UnreachablePolicy::Proceed,
                })
        );
        assert!(policy(&[("ETCD_UNREACHABLE", "skip")]).is_err());
        assert!(policy(&[("ETCD_GRACE", "soon")]).is_err());
    }

    #[test]
    fn s3_tables_needs_a_table_bucket_arn_and_keeps_orphans_to_the_service() {
        let base = [
            ("WAREHOUSE", "s3://bucket/wh"),
            ("SEGMENT_BUCKET", "segments"),
            ("LEDGER_TABLE", "ledger"),
            ("CATALOG_TYPE", "s3tables"),
        ];
        let with = |arn: &str| {
            let mut pairs = base.to_vec();
            pairs.push(("TABLE_BUCKET_ARN", arn));
            env(&pairs)
        };
        let arn = "arn:aws:s3tables:eu-west-1:123456789012:bucket/lake";
        let parsed = with(arn).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            parsed.catalog,
            CatalogKind::S3Tables(kfs_core::S3TablesSettings {
                table_bucket_arn: arn.into(),
                endpoint: None,
            })
        );
        assert_eq!(parsed.maintenance.map(|m| m.orphan_age), Some(None));
        // The SQL catalog on PostgreSQL.
        let postgres = env(&[
            ("WAREHOUSE", "s3://bucket/wh"),
            ("SEGMENT_BUCKET", "segments"),
            ("LEDGER_TABLE", "ledger"),
            ("CATALOG_TYPE", "sql"),
            ("CATALOG_URI", "postgres://kfs:pw@db.internal:5432/iceberg"),
        ])
        .map(|e| e.catalog)
        .ok();
        assert_eq!(
            postgres,
            Some(CatalogKind::SqlPostgres {
                url: "postgres://kfs:pw@db.internal:5432/iceberg".into()
            })
        );
        let error = with("lake")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(error.contains("TABLE_BUCKET_ARN"), "{error}");
        assert!(env(&base).is_err());
    }

    #[test]
    fn table_mapping_and_properties_come_from_json() {
        let base = [
            ("WAREHOUSE", "s3://bucket/wh"),
            ("SEGMENT_BUCKET", "segments"),
            ("LEDGER_TABLE", "ledger"),
        ];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut pairs = base.to_vec();
            pairs.extend_from_slice(extra);
            env(&pairs)
        };
        let naming = with(&[
            (
                "TABLE_MAPPING",
                r#"[{"topic": "orders-(.*)", "table": "sales.orders_$1"}]"#,
            ),
            (
                "TABLE_PROPERTIES",
                r#"{"write.parquet.compression-codec": "snappy"}"#,
            ),
        ])
        .map(|e| e.naming);
        let naming = naming.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(naming.table_for("orders-eu").to_string(), "sales.orders_eu");
        assert_eq!(naming.table_for("clicks").to_string(), "kafscale.clicks");
        assert_eq!(
            naming
                .properties
                .get("write.parquet.compression-codec")
                .map(String::as_str),
            Some("snappy")
        );
        for (name, value) in [
            ("TABLE_MAPPING", r#"{"topic": "x"}"#),
            ("TABLE_MAPPING", r#"[{"topic": "(", "table": "t"}]"#),
            (
                "TABLE_PROPERTIES",
                r#"{"write.parquet.compression-codec": "lzma"}"#,
            ),
            ("TABLE_PROPERTIES", r#"["not", "an object"]"#),
        ] {
            let error = with(&[(name, value)]).err().map(|e| e.to_string());
            assert!(
                error.as_deref().is_some_and(|e| e.contains(name)),
                "{name}={value}: {error:?}"
            );
        }
    }

    #[test]
    fn partition_spec_comes_from_partition_by() {
        let base = [
            ("WAREHOUSE", "s3://bucket/wh"),
            ("SEGMENT_BUCKET", "segments"),
            ("LEDGER_TABLE", "ledger"),
        ];
        let spec = |value: Option<&str>| {
            let mut pairs = base.to_vec();
            pairs.extend(value.map(|v| ("PARTITION_BY", v)));
            env(&pairs).map(|e| {
                e.naming
                    .partition_for("orders")
                    .iter()
                    .map(|f| f.to_string())
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(spec(None).ok(), Some(vec![]));
        assert_eq!(
            spec(Some("day(timestamp), bucket(16, key)")).ok(),
            Some(vec!["day(timestamp)".into(), "bucket(16, key)".into()])
        );
        let error = spec(Some("week(timestamp)")).err().map(|e| e.to_string());
        assert!(
            error
                .as_deref()
                .is_some_and(|e| e.contains("PARTITION_BY") && e.contains("week")),
            "{error:?}"
        );
    }
}

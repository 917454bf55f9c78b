//! The settings of a deployment in one place: which topics are ingested, the tables
//! they land in and their layout, the catalog, the maintenance policy and the etcd
//! cross-check. The command line reads them from a TOML file (then its flags), the
//! Lambda functions from their environment, and `kfs-iceberg --stack` from a deployed
//! function's environment; every source fills one [`Settings`], and
//! [`Settings::validate`] checks it once into what the pipeline runs on.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kfs_plan::crosscheck::{CrossCheckPolicy, UnreachablePolicy};
use kfs_plan::duration::parse_duration;
use kfs_plan::layout::{PartitionField, parse_partition_spec};
use kfs_plan::naming::{KeyFormat, TableName, TableNaming, TopicSelection, ValueFormat};
use kfs_plan::secret_url::SecretUrl;
use serde::Deserialize;

use crate::maintenance::MaintenancePolicy;
use kfs_catalog::catalog::{CatalogKind, RestCredentials, RestSettings, S3TablesSettings};

mod env;
mod etcd;
mod modes;
use env::VARIABLES;
pub use etcd::EtcdSettings;

/// Settings that cannot be used: which one, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SettingsError(pub String);

/// Everything configurable about what is ingested and how, as the TOML file spells
/// it (the environment variables of [`Settings::from_env`] fill the same fields).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Namespace of tables not named explicitly (default `kafscale`; `TABLE_NAMESPACE`).
    pub namespace: Option<String>,
    /// Prefix of default table names (`TABLE_PREFIX`).
    pub table_prefix: Option<String>,
    /// Topics ingested: regular expressions over whole names (default: every topic;
    /// `TOPICS_INCLUDE`, comma-separated).
    #[serde(default)]
    pub include_topics: Vec<String>,
    /// Topics never ingested, even when included (`TOPICS_EXCLUDE`).
    #[serde(default)]
    pub exclude_topics: Vec<String>,
    /// `topic = "namespace.table"` entries.
    #[serde(default)]
    pub tables: BTreeMap<String, String>,
    /// `[[table_patterns]]` rules, tried in order after `tables` (`TABLE_MAPPING`, a
    /// JSON array of the same objects).
    #[serde(default)]
    pub table_patterns: Vec<TablePatternEntry>,
    /// Partition spec of new tables (`"day(timestamp)"`; `PARTITION_BY`).
    pub partition_by: Option<String>,
    /// `topic = "spec"` entries: the partition spec of that topic's table.
    #[serde(default)]
    pub partitioning: BTreeMap<String, String>,
    /// Properties of new tables (`TABLE_PROPERTIES`, a JSON object).
    #[serde(default)]
    pub table_properties: BTreeMap<String, String>,
    /// How new tables store record values: `"raw"` (default) or `"json"`
    /// (`VALUE_FORMAT`).
    pub value_format: Option<String>,
    /// How new tables treat their records: `"append"` (default), or `"upsert"` (one
    /// row per key, its last change) (`TABLE_MODE`).
    pub table_mode: Option<String>,
    /// The key of upsert tables: `"key"` (the record key, the default) (`UPSERT_KEY`).
    pub upsert_key: Option<String>,
    /// Whether upsert and cdc tables keep their change log beside them, every record
    /// appended to `<table>__changes` (default off; `CHANGE_LOG=on|off`).
    pub change_log: Option<bool>,
    /// How registry tables read record keys: `"raw"` (default) or `"registry"` (keys
    /// framed for the schema registry, decoded into the struct column `key_fields`)
    /// (`KEY_FORMAT`).
    pub key_format: Option<String>,
    /// `topic = "name type, ..."`: declared columns of that topic's new JSON table
    /// (`VALUE_COLUMNS`, a JSON object).
    #[serde(default)]
    pub value_columns: BTreeMap<String, String>,
    /// `[start_offsets.<topic>]` with `"<partition>" = offset` entries.
    #[serde(default)]
    pub start_offsets: BTreeMap<String, BTreeMap<String, i64>>,
    /// The catalog (`[catalog]`).
    #[serde(default)]
    pub catalog: CatalogSettings,
    /// Table maintenance (`[maintenance]`).
    #[serde(default)]
    pub maintenance: MaintenanceSettings,
    /// The etcd offset cross-check (`[etcd]`).
    #[serde(default)]
    pub etcd: EtcdSettings,
    /// Large-file (LFS) claim-check records (`[lfs]`).
    #[serde(default)]
    pub lfs: LargeFileSettings,
    /// The schema registry of `value_format = "registry"` (`[schema_registry]`).
    #[serde(default)]
    pub schema_registry: SchemaRegistrySettings,
    /// How errors name the settings: as the file spells them, or as variables.
    #[serde(skip)]
    spelling: Spelling,
}

/// How the settings are named in errors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Spelling {
    /// As the TOML file names them.
    #[default]
    File,
    /// As the functions' environment variables.
    Environment,
}

/// The schema registry registry-encoded values name their schemas in
/// (`[schema_registry]`): the Confluent REST API of Confluent Schema Registry,
/// Karapace, Apicurio or Redpanda, or the AWS Glue Schema Registry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchemaRegistrySettings {
    /// Its base URL, `https://…`, or `glue://[REGION]` for the AWS Glue Schema
    /// Registry (`SCHEMA_REGISTRY_URL`); a user and password in it are never printed.
    pub url: Option<SecretUrl>,
    /// A JSON file holding `{"username", "password"}` or `{"token"}` (never printed).
    pub credentials_file: Option<PathBuf>,
}

/// What is done with KafScale's large-file (LFS) claim-check records (`[lfs]`): a
/// record whose value is an LFS proxy's envelope stands for a blob in the segment
/// bucket. See `kfs_plan::lfs` for the modes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LargeFileSettings {
    /// `off` (default), `resolve`, `reference`, `skip` or `hybrid` (`LFS_MODE`).
    pub mode: Option<String>,
    /// `topic = "mode"` entries: that topic's mode (`LFS_TOPICS`, a JSON object).
    #[serde(default)]
    pub topics: BTreeMap<String, String>,
    /// Largest blob resolved into a row, in bytes (default 64 MiB;
    /// `LFS_MAX_INLINE_SIZE`).
    pub max_inline_size: Option<u64>,
    /// Whether blobs are checked against their envelope's checksum (default true;
    /// `LFS_VERIFY_CHECKSUMS`, `on` or `off`; off: `min_checksum_alg = "none"`).
    pub verify_checksums: Option<bool>,
    /// The weakest checksum a resolved blob is verified by: `sha256` (default),
    /// `md5`, `crc32` or `none` (`LFS_MIN_CHECKSUM_ALG`); an envelope carrying none
    /// as strong is a dead letter, whatever its `checksum_alg` says.
    pub min_checksum_alg: Option<String>,
    /// Blobs fetched at once (default 4; `LFS_CONCURRENCY`).
    pub concurrency: Option<usize>,
    /// The bucket blobs are read from: the segment bucket (the default), or, for a
    /// local source directory, the bucket that directory stands for (envelopes naming
    /// another are dead letters).
    pub bucket: Option<String>,
}

impl LargeFileSettings {
    /// The settings checked; the origin of the blobs holds the configured bucket only
    /// (the host, which knows the source, completes it: `BlobOrigin::for_source`).
    fn validate(
        &self,
        fail: &dyn Fn(&str, &dyn std::fmt::Display) -> SettingsError,
    ) -> Result<kfs_plan::lfs::LfsSettings, SettingsError> {
        use kfs_plan::lfs::{LfsMode, LfsPolicy, LfsSettings};
        let defaults = LfsPolicy::default();
        let mode = |what: &str, text: &str| LfsMode::parse(text).map_err(|e| fail(what, &e));
        let mut settings = LfsSettings {
            policy: LfsPolicy {
                mode: self
                    .mode
                    .as_deref()
                    .map(|text| mode("lfs mode", text))
                    .transpose()?
                    .unwrap_or_default(),
                max_inline_size: self.max_inline_size.unwrap_or(defaults.max_inline_size),
                min_checksum: self.min_checksum(&fail)?,
                concurrency: self.concurrency.unwrap_or(defaults.concurrency),
                origin: kfs_plan::lfs::BlobOrigin {
                    bucket: self.bucket.clone(),
                    ..defaults.origin
                },
            },
            topics: BTreeMap::new(),
        };
        for (topic, text) in &self.topics {
            settings
                .topics
                .insert(topic.clone(), mode("lfs topics", text)?);
        }
        settings.validate().map_err(|e| fail("lfs", &e))?;
        Ok(settings)
    }

    /// The weakest checksum accepted: `min_checksum_alg`, `none` when checksums are
    /// not verified (both given must agree), else `sha256`.
    fn min_checksum(
        &self,
        fail: &dyn Fn(&str, &dyn std::fmt::Display) -> SettingsError,
    ) -> Result<kfs_plan::lfs::ChecksumAlg, SettingsError> {
        use kfs_plan::lfs::ChecksumAlg;
        let named = self
            .min_checksum_alg
            .as_deref()
            .map(ChecksumAlg::parse)
            .transpose()
            .map_err(|e| fail("lfs min_checksum_alg", &e))?;
        match (self.verify_checksums, named) {
            (Some(false), Some(alg)) if alg != ChecksumAlg::None => Err(fail(
                "lfs min_checksum_alg",
                &format!(
                    "{} asks for {} checksums while verification is off (lfs verify_checksums): set one of them",
                    alg.name(),
                    alg.name()
                ),
            )),
            (Some(false), _) => Ok(ChecksumAlg::None),
            (_, named) => Ok(named.unwrap_or_default()),
        }
    }
}

/// One `[[table_patterns]]` rule: topics matching `topic` go to `table`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TablePatternEntry {
    /// Regular expression over whole topic names.
    pub topic: String,
    /// `namespace.name`, with `$1` or `${group}`.
    pub table: String,
    /// The mode of the tables it names (the default `table_mode` when absent).
    pub table_mode: Option<String>,
    /// Their upsert key (with `table_mode`).
    pub upsert_key: Option<String>,
    /// Whether they keep their change log beside them (with `table_mode`).
    pub change_log: Option<bool>,
}

/// Where the tables are registered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogSettings {
    /// `sql`, `rest`, `glue`, `s3tables` or `memory` (`CATALOG_TYPE`).
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// The REST catalog's base URI, or a `postgres://` SQL catalog (`CATALOG_URI`);
    /// its password and secret parameters are never printed.
    pub uri: Option<SecretUrl>,
    /// The SQLite file of a `sql` catalog.
    pub database: Option<PathBuf>,
    /// The REST catalog's warehouse name (`CATALOG_WAREHOUSE`).
    pub warehouse: Option<String>,
    /// The S3 Tables table bucket ARN (`TABLE_BUCKET_ARN`).
    pub table_bucket_arn: Option<String>,
}

/// How tables are maintained after commits.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaintenanceSettings {
    /// Whether to maintain at all (default on; `MAINTENANCE=on|off`).
    pub enabled: Option<bool>,
    /// Expire snapshots older than this (default `5d`; `SNAPSHOT_RETENTION`).
    pub snapshot_retention: Option<String>,
    /// Keep at most this many snapshots (default 1000, 0: age only; `MAX_SNAPSHOTS`).
    pub max_snapshots: Option<usize>,
    /// Delete unreferenced files older than this (default `3d`, `off`; at least 1h;
    /// `ORPHAN_AGE`).
    pub orphan_age: Option<String>,
    /// Merge a table's manifests past this many (default 10; `MAX_MANIFESTS`).
    pub max_manifests: Option<usize>,
}

/// Validated settings: what the pipeline runs on.
#[derive(Debug, Clone)]
pub struct ValidSettings {
    /// Topic selection, table names and the layout of new tables.
    pub naming: TableNaming,
    /// Start offsets per topic and partition.
    pub start_offsets: BTreeMap<String, BTreeMap<i32, i64>>,
    /// Maintenance after commits (`None`: off).
    pub maintenance: Option<MaintenancePolicy>,
    /// The cross-check's grace and unreachable policy.
    pub crosscheck: CrossCheckPolicy,
    /// Where the writer schemas of registry-encoded values are (`None`: no
    /// registry); opened by the host, which may reach AWS Glue's.
    pub schema_registry: Option<kfs_values::registry::RegistryLocation>,
}

fn invalid(origin: &str, message: impl std::fmt::Display) -> SettingsError {
    if origin.is_empty() {
        SettingsError(message.to_string())
    } else {
        SettingsError(format!("{origin}: {message}"))
    }
}

impl Settings {
    /// Reads a TOML file of settings.
    pub fn from_toml_file(path: &Path) -> Result<Self, SettingsError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| invalid(&origin, e))?;
        toml::from_str(&text).map_err(|e| invalid(&origin, e.message()))
    }

    /// The name of a setting in errors: its variable when read from the environment.
    fn name(&self, setting: &str) -> String {
        match self.spelling {
            Spelling::File => setting.to_owned(),
            Spelling::Environment => VARIABLES
                .iter()
                .find(|(name, _)| *name == setting)
                .map_or_else(
                    || setting.to_owned(),
                    |(_, variable)| (*variable).to_owned(),
                ),
        }
    }

    /// Checks every setting; `origin` (a file; empty for the environment, whose
    /// variables are named instead) says where they came from in errors.
    pub fn validate(&self, origin: &str) -> Result<ValidSettings, SettingsError> {
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            invalid(origin, format!("{}: {e}", self.name(what)))
        };
        let spec = |what: &str, text: &str| -> Result<Vec<PartitionField>, SettingsError> {
            parse_partition_spec(text).map_err(|e| fail(what, &e))
        };
        let mut naming = TableNaming {
            namespace: self.namespace.clone(),
            partition_by: spec(
                "partition_by",
                self.partition_by.as_deref().unwrap_or_default(),
            )?,
            partition_by_given: self.partition_by.is_some(),
            value_format: self
                .value_format
                .as_deref()
                .map(ValueFormat::parse)
                .transpose()
                .map_err(|e| fail("value_format", &e))?
                .unwrap_or_default(),
            key_format: self
                .key_format
                .as_deref()
                .map(KeyFormat::parse)
                .transpose()
                .map_err(|e| fail("key_format", &e))?
                .unwrap_or_default(),
            topics: TopicSelection::new(&self.include_topics, &self.exclude_topics)
                .map_err(|e| fail("topics", &e))?,
            table_prefix: self.table_prefix.clone().unwrap_or_default(),
            lfs: self.lfs.validate(&fail)?,
            ..TableNaming::default()
        };
        let (mode, patterns) = self.modes().map_err(|(what, e)| fail(what, &e))?;
        (naming.mode, naming.patterns) = (mode, patterns);
        // Checked now, not at the first table creation.
        let mut properties = self.table_properties.clone().into_iter().collect();
        crate::compression(&properties)
            .and_then(|_| crate::table::creation_format_version(&mut properties))
            .map_err(|e| fail("table_properties", &e.message()))?;
        naming.properties = self.table_properties.clone();
        for (topic, text) in &self.value_columns {
            let columns = kfs_plan::value_columns::parse_value_columns(text)
                .map_err(|e| fail(&format!("value_columns.{topic}"), &e))?;
            naming.value_columns.insert(topic.clone(), columns);
        }
        for (topic, text) in &self.partitioning {
            let fields = spec(&format!("partitioning.{topic}"), text)?;
            naming.partitioning.insert(topic.clone(), fields);
        }
        for (topic, table) in &self.tables {
            let name = TableName::parse(table)
                .ok_or_else(|| fail("tables", &format!("{table:?} is not namespace.name")))?;
            naming.overrides.insert(topic.clone(), name);
        }
        naming.validate().map_err(|e| invalid(origin, e))?;
        let mut start_offsets = BTreeMap::new();
        for (topic, partitions) in &self.start_offsets {
            let mut map = BTreeMap::new();
            for (partition, offset) in partitions {
                let p = partition.parse::<i32>().map_err(|_| {
                    fail(
                        &format!("start_offsets.{topic}"),
                        &format!("{partition:?} is not a partition"),
                    )
                })?;
                map.insert(p, *offset);
            }
            start_offsets.insert(topic.clone(), map);
        }
        let schema_registry = self.schema_registry(&naming, &fail)?;
        self.etcd.check_transport(self.spelling, origin)?;
        Ok(ValidSettings {
            schema_registry,
            naming,
            start_offsets,
            maintenance: self.maintenance_policy(origin)?,
            crosscheck: self.crosscheck_policy(origin)?,
        })
    }

    /// Where the registry is, when one is configured; a registry table without one is
    /// refused.
    fn schema_registry(
        &self,
        naming: &TableNaming,
        fail: &dyn Fn(&str, &dyn std::fmt::Display) -> SettingsError,
    ) -> Result<Option<kfs_values::registry::RegistryLocation>, SettingsError> {
        let settings = &self.schema_registry;
        let Some(url) = settings.url.as_ref() else {
            if naming.value_format == ValueFormat::Registry {
                return Err(fail(
                    "schema_registry",
                    &"value_format registry needs the schema registry's URL",
                ));
            }
            return Ok(None);
        };
        let credentials = match &settings.credentials_file {
            Some(path) => kfs_values::registry::RegistryCredentials::from_file(path)
                .map_err(|e| fail("schema_registry", &e))?,
            None => kfs_values::registry::RegistryCredentials::default(),
        };
        kfs_values::registry::RegistryLocation::parse(url, credentials)
            .map(Some)
            .map_err(|e| fail("schema_registry", &e))
    }

    fn maintenance_policy(&self, origin: &str) -> Result<Option<MaintenancePolicy>, SettingsError> {
        let settings = &self.maintenance;
        if settings.enabled == Some(false) {
            return Ok(None);
        }
        let duration = |what: &str, text: &str| {
            parse_duration(text).map_err(|e| invalid(origin, format!("{}: {e}", self.name(what))))
        };
        let defaults = MaintenancePolicy::default();
        let orphan_age = match settings.orphan_age.as_deref().map(str::trim) {
            Some("off") => None,
            // S3 Tables removes unreferenced files itself, and its storage buckets
            // cannot be listed.
            _ if self.catalog.kind.as_deref() == Some("s3tables") => None,
            // Below the 1h floor, each cleanup refuses (a maintenance failure,
            // alarmed) while conversion and commits go on.
            text => Some(duration("orphan_age", text.unwrap_or("3d"))?),
        };
        Ok(Some(MaintenancePolicy {
            snapshot_retention: duration(
                "snapshot_retention",
                settings.snapshot_retention.as_deref().unwrap_or("5d"),
            )?,
            orphan_age,
            max_manifests: settings.max_manifests.unwrap_or(defaults.max_manifests),
            max_snapshots: match settings.max_snapshots {
                Some(0) => None,
                Some(n) => Some(n),
                None => defaults.max_snapshots,
            },
            ..defaults
        }))
    }

    fn crosscheck_policy(&self, origin: &str) -> Result<CrossCheckPolicy, SettingsError> {
        let grace = parse_duration(self.etcd.grace.as_deref().unwrap_or("5m"))
            .map_err(|e| invalid(origin, format!("{}: {e}", self.name("etcd grace"))))?;
        Ok(CrossCheckPolicy {
            grace_ms: i64::try_from(grace.as_millis())
                .map_err(|_| invalid(origin, "etcd grace is too long"))?,
            on_unreachable: match self.etcd.unreachable.as_deref().map(str::trim) {
                None | Some("hold") => UnreachablePolicy::Hold,
                Some("proceed") => UnreachablePolicy::Proceed,
                Some(other) => {
                    return Err(invalid(
                        origin,
                        format!(
                            "{} {other:?}: expected hold or proceed",
                            self.name("etcd unreachable")
                        ),
                    ));
                }
            },
        })
    }
}

impl CatalogSettings {
    /// The catalog these settings name (`default` when no type is given). A `sql`
    /// catalog is PostgreSQL when `uri` is a `postgres://` URL, else the SQLite file
    /// `database` (or a non-PostgreSQL `uri`, or `sqlite_default`); endpoints of the
    /// AWS catalogs come from `lookup` (`AWS_ENDPOINT_URL_GLUE`, `AWS_ENDPOINT_URL`, ...).
    pub fn kind(
        &self,
        default: &str,
        sqlite_default: Option<&Path>,
        credentials: RestCredentials,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<CatalogKind, SettingsError> {
        let kind = self.kind.as_deref().unwrap_or(default);
        let needs = |what: &str| SettingsError(format!("catalog type {kind} needs {what}"));
        let endpoint = |service: &str| {
            lookup(&format!("AWS_ENDPOINT_URL_{service}"))
                .or_else(|| lookup("AWS_ENDPOINT_URL"))
                .filter(|e| !e.is_empty())
        };
        Ok(match kind {
            "sql" => match (&self.uri, &self.database) {
                (Some(url), _) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                    CatalogKind::SqlPostgres { url: url.clone() }
                }
                (_, Some(database)) => CatalogKind::Sql {
                    database: database.clone(),
                },
                (Some(file), None) => CatalogKind::Sql {
                    database: PathBuf::from(file.expose()),
                },
                (None, None) => CatalogKind::Sql {
                    database: sqlite_default
                        .ok_or_else(|| needs("a database: a postgres:// URI (--catalog-uri, CATALOG_URI) or a SQLite file"))?
                        .to_path_buf(),
                },
            },
            "rest" => CatalogKind::Rest(RestSettings {
                uri: self
                    .uri
                    .clone()
                    .ok_or_else(|| needs("a URI (--catalog-uri, CATALOG_URI)"))?,
                warehouse: self.warehouse.clone(),
                credentials,
            }),
            "glue" => CatalogKind::Glue {
                endpoint: endpoint("GLUE"),
            },
            "s3tables" => {
                let arn = self
                    .table_bucket_arn
                    .clone()
                    .ok_or_else(|| needs("a table bucket ARN (--table-bucket-arn, TABLE_BUCKET_ARN)"))?;
                if !crate::is_table_bucket_arn(&arn) {
                    return Err(SettingsError(format!(
                        "table bucket ARN (--table-bucket-arn, TABLE_BUCKET_ARN) {arn:?}: expected arn:aws:s3tables:<region>:<account>:bucket/<name>"
                    )));
                }
                CatalogKind::S3Tables(S3TablesSettings {
                    table_bucket_arn: arn,
                    endpoint: endpoint("S3TABLES"),
                })
            }
            "memory" => CatalogKind::Memory,
            other => {
                return Err(SettingsError(format!(
                    "catalog type {other:?}: expected sql, rest, glue, s3tables or memory"
                )));
            }
        })
    }
}

#[cfg(test)]
mod tests;

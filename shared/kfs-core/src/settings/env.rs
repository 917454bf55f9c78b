//! The settings as the Lambda functions (and `kfs-iceberg --stack`) read them: from
//! environment variables, each setting under the name `VARIABLES` gives it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use kfs_plan::secret_url::SecretUrl;

use super::{
    CatalogSettings, EtcdSettings, LargeFileSettings, MaintenanceSettings, SchemaRegistrySettings,
    Settings, SettingsError, Spelling, invalid,
};

/// Settings and the variables that set them.
pub(super) const VARIABLES: &[(&str, &str)] = &[
    ("topics", "TOPICS_INCLUDE/TOPICS_EXCLUDE"),
    ("table_patterns", "TABLE_MAPPING"),
    ("partition_by", "PARTITION_BY"),
    ("table_properties", "TABLE_PROPERTIES"),
    ("value_format", "VALUE_FORMAT"),
    ("key_format", "KEY_FORMAT"),
    ("table_mode", "TABLE_MODE"),
    ("upsert_key", "UPSERT_KEY"),
    ("change_log", "CHANGE_LOG"),
    ("value_columns", "VALUE_COLUMNS"),
    ("snapshot_retention", "SNAPSHOT_RETENTION"),
    ("orphan_age", "ORPHAN_AGE"),
    ("etcd grace", "ETCD_GRACE"),
    ("etcd unreachable", "ETCD_UNREACHABLE"),
    ("schema_registry", "SCHEMA_REGISTRY_URL"),
    ("lfs mode", "LFS_MODE"),
    ("lfs topics", "LFS_TOPICS"),
    ("lfs", "LFS_MAX_INLINE_SIZE/LFS_CONCURRENCY"),
    ("lfs min_checksum_alg", "LFS_MIN_CHECKSUM_ALG"),
];

impl Settings {
    /// Reads the settings from environment variables (the names in the field docs;
    /// empty values count as unset).
    pub fn from_env(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let env = Env(lookup);
        let (var, list, number) = (
            |name: &str| env.var(name),
            |name: &str| env.list(name),
            |name: &str| env.number(name),
        );
        let verify_checksums =
            env.switch("LFS_VERIFY_CHECKSUMS", &["on", "true"], &["off", "false"])?;
        // MAINTENANCE: on unless off (`None` keeps the default, on).
        let enabled = env
            .switch("MAINTENANCE", &["on"], &["off"])?
            .and_then(|on| (!on).then_some(false));
        Ok(Self {
            namespace: var("TABLE_NAMESPACE"),
            table_prefix: var("TABLE_PREFIX"),
            include_topics: list("TOPICS_INCLUDE"),
            exclude_topics: list("TOPICS_EXCLUDE"),
            tables: BTreeMap::new(),
            table_patterns: env.json("TABLE_MAPPING", "a JSON array of {\"topic\", \"table\"}")?,
            partition_by: var("PARTITION_BY"),
            partitioning: BTreeMap::new(),
            table_properties: env.json("TABLE_PROPERTIES", "a JSON object of strings")?,
            value_format: var("VALUE_FORMAT"),
            key_format: var("KEY_FORMAT"),
            table_mode: var("TABLE_MODE"),
            upsert_key: var("UPSERT_KEY"),
            change_log: env.switch("CHANGE_LOG", &["on", "true"], &["off", "false"])?,
            value_columns: env.json("VALUE_COLUMNS", "a JSON object of strings")?,
            start_offsets: BTreeMap::new(),
            catalog: CatalogSettings {
                kind: var("CATALOG_TYPE"),
                uri: var("CATALOG_URI").map(SecretUrl::from),
                database: None,
                warehouse: var("CATALOG_WAREHOUSE"),
                table_bucket_arn: var("TABLE_BUCKET_ARN"),
            },
            maintenance: MaintenanceSettings {
                enabled,
                snapshot_retention: var("SNAPSHOT_RETENTION"),
                max_snapshots: number("MAX_SNAPSHOTS")?,
                orphan_age: var("ORPHAN_AGE"),
                max_manifests: number("MAX_MANIFESTS")?,
            },
            spelling: Spelling::Environment,
            schema_registry: SchemaRegistrySettings {
                url: var("SCHEMA_REGISTRY_URL").map(SecretUrl::from),
                credentials_file: None,
            },
            lfs: LargeFileSettings {
                mode: var("LFS_MODE"),
                topics: env.json("LFS_TOPICS", "a JSON object of topic to mode")?,
                max_inline_size: number("LFS_MAX_INLINE_SIZE")?.map(|n| n as u64),
                verify_checksums,
                min_checksum_alg: var("LFS_MIN_CHECKSUM_ALG"),
                concurrency: number("LFS_CONCURRENCY")?,
                bucket: None,
            },
            etcd: EtcdSettings {
                endpoints: list("ETCD_ENDPOINTS").into_iter().map(Into::into).collect(),
                grace: var("ETCD_GRACE"),
                unreachable: var("ETCD_UNREACHABLE"),
                ca_file: var("ETCD_CA_FILE").map(PathBuf::from),
                cert_file: var("ETCD_CERT_FILE").map(PathBuf::from),
                key_file: var("ETCD_KEY_FILE").map(PathBuf::from),
                username: var("ETCD_USERNAME"),
                password_secret: var("ETCD_PASSWORD_SECRET_ARN"),
            },
        })
    }
}

/// The environment, read as the settings spell it: empty values count as unset.
struct Env<'a>(&'a dyn Fn(&str) -> Option<String>);

impl Env<'_> {
    /// The variable `name`, unless unset or empty.
    fn var(&self, name: &str) -> Option<String> {
        (self.0)(name).filter(|v| !v.trim().is_empty())
    }

    /// The comma-separated items of `name` (none when unset).
    fn list(&self, name: &str) -> Vec<String> {
        self.var(name)
            .map(|v| {
                v.split(',')
                    .map(|item| item.trim().to_owned())
                    .filter(|item| !item.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `name` parsed as JSON (`expected` says what it should be); the default when
    /// unset.
    fn json<T: serde::de::DeserializeOwned + Default>(
        &self,
        name: &str,
        expected: &str,
    ) -> Result<T, SettingsError> {
        self.var(name).map_or(Ok(T::default()), |text| {
            serde_json::from_str(&text)
                .map_err(|e| invalid(name, format!("expected {expected}: {e}")))
        })
    }

    /// `name` as a count.
    fn number(&self, name: &str) -> Result<Option<usize>, SettingsError> {
        self.var(name)
            .map(|v| {
                v.trim()
                    .parse::<usize>()
                    .map_err(|_| invalid(name, format!("{v:?} is not a number")))
            })
            .transpose()
    }

    /// `name` as a switch: one of `on` (true) or `off` (false) spellings.
    fn switch(&self, name: &str, on: &[&str], off: &[&str]) -> Result<Option<bool>, SettingsError> {
        let Some(value) = self.var(name) else {
            return Ok(None);
        };
        let value = value.trim();
        if on.contains(&value) {
            Ok(Some(true))
        } else if off.contains(&value) {
            Ok(Some(false))
        } else {
            Err(invalid(name, format!("{value:?}: expected on or off")))
        }
    }
}

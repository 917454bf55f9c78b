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
        let var = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let list = |name: &str| {
            var(name)
                .map(|v| {
                    v.split(',')
                        .map(|item| item.trim().to_owned())
                        .filter(|item| !item.is_empty())
                        .collect()
                })
                .unwrap_or_default()
        };
        fn json<T: serde::de::DeserializeOwned + Default>(
            name: &str,
            text: Option<String>,
            expected: &str,
        ) -> Result<T, SettingsError> {
            text.map_or(Ok(T::default()), |text| {
                serde_json::from_str(&text)
                    .map_err(|e| invalid(name, format!("expected {expected}: {e}")))
            })
        }
        let number = |name: &str| {
            var(name)
                .map(|v| {
                    v.trim()
                        .parse::<usize>()
                        .map_err(|_| invalid(name, format!("{v:?} is not a number")))
                })
                .transpose()
        };
        let verify_checksums = match var("LFS_VERIFY_CHECKSUMS").as_deref().map(str::trim) {
            None => None,
            Some("on" | "true") => Some(true),
            Some("off" | "false") => Some(false),
            Some(other) => {
                return Err(invalid(
                    "LFS_VERIFY_CHECKSUMS",
                    format!("{other:?}: expected on or off"),
                ));
            }
        };
        let enabled = match var("MAINTENANCE").as_deref().map(str::trim) {
            None | Some("on") => None,
            Some("off") => Some(false),
            Some(other) => {
                return Err(invalid(
                    "MAINTENANCE",
                    format!("{other:?}: expected on or off"),
                ));
            }
        };
        Ok(Self {
            namespace: var("TABLE_NAMESPACE"),
            table_prefix: var("TABLE_PREFIX"),
            include_topics: list("TOPICS_INCLUDE"),
            exclude_topics: list("TOPICS_EXCLUDE"),
            tables: BTreeMap::new(),
            table_patterns: json(
                "TABLE_MAPPING",
                var("TABLE_MAPPING"),
                "a JSON array of {\"topic\", \"table\"}",
            )?,
            partition_by: var("PARTITION_BY"),
            partitioning: BTreeMap::new(),
            table_properties: json(
                "TABLE_PROPERTIES",
                var("TABLE_PROPERTIES"),
                "a JSON object of strings",
            )?,
            value_format: var("VALUE_FORMAT"),
            key_format: var("KEY_FORMAT"),
            value_columns: json(
                "VALUE_COLUMNS",
                var("VALUE_COLUMNS"),
                "a JSON object of strings",
            )?,
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
                topics: json(
                    "LFS_TOPICS",
                    var("LFS_TOPICS"),
                    "a JSON object of topic to mode",
                )?,
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

//! The catalog: which one holds the tables ([`CatalogKind`]), the handle of an opened
//! catalog with its pointer swap ([`CatalogHandle`]), and the implementations that need
//! no cloud SDK: SQL (SQLite, the embedded default, and PostgreSQL), REST and memory.
//! The AWS catalogs (Glue, S3 Tables) are opened at the edge, by `kfs-aws`, through
//! the same handle.

mod delegate;
mod memory;
mod pinned;
mod rest_swap;
mod rest_tables;
#[cfg(feature = "sql")]
mod sql;
mod swap;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use iceberg::{Catalog, CatalogBuilder};
use iceberg_storage_opendal::OpenDalResolvingStorageFactory;

use crate::storage::{S3Settings, Warehouse};

pub use delegate::{CatalogOverrides, Overridden};
pub use memory::MemoryTables;
pub use pinned::PinnedCatalog;
pub use rest_swap::RestTableSwap;
pub use rest_tables::RestTables;
#[cfg(feature = "sql")]
pub use sql::{SqlCatalog, SqlTableSwap, open_postgres_catalog, open_sql_catalog};
pub use swap::{
    MetadataPointer, TableSwap, lost_race, publish, read_table, stage_updates, table_handle,
};

/// The catalog name of the embedded default (what pyiceberg's `SqlCatalog` must be
/// given too).
pub const LOCAL_CATALOG_NAME: &str = "local";

/// Which catalog holds the tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatalogKind {
    /// The Iceberg SQL catalog on a SQLite file (the embedded default).
    Sql {
        /// The SQLite file.
        database: PathBuf,
    },
    /// The Iceberg SQL catalog on a PostgreSQL database.
    SqlPostgres {
        /// `postgres://user:password@host:port/database` (never printed with its
        /// password).
        url: kfs_plan::secret_url::SecretUrl,
    },
    /// AWS Glue Data Catalog.
    Glue {
        /// A custom Glue endpoint (`AWS_ENDPOINT_URL_GLUE` or `AWS_ENDPOINT_URL`).
        endpoint: Option<String>,
    },
    /// An Iceberg REST catalog (Apache Polaris, Unity Catalog).
    Rest(RestSettings),
    /// An Amazon S3 Tables table bucket.
    S3Tables(S3TablesSettings),
    /// A catalog in memory ([`MemoryTables`]): tables under the warehouse,
    /// the catalog gone with the process.
    Memory,
}

impl CatalogKind {
    /// The kind's name, as `--catalog-type` and `CATALOG_TYPE` spell it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Sql { .. } | Self::SqlPostgres { .. } => "sql",
            Self::Glue { .. } => "glue",
            Self::Rest(_) => "rest",
            Self::S3Tables(_) => "s3tables",
            Self::Memory => "memory",
        }
    }
}

/// Where the S3 Tables tables are: a table bucket, and the service's endpoint when it
/// is not AWS's (a local stand-in).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3TablesSettings {
    /// The table bucket's ARN (`arn:aws:s3tables:<region>:<account>:bucket/<name>`).
    pub table_bucket_arn: String,
    /// A custom endpoint (`AWS_ENDPOINT_URL_S3TABLES` or `AWS_ENDPOINT_URL`).
    pub endpoint: Option<String>,
}

/// True for a table bucket ARN (`arn:aws:s3tables:<region>:<account>:bucket/<name>`).
pub fn is_table_bucket_arn(text: &str) -> bool {
    let mut parts = text.splitn(6, ':');
    matches!(
        (parts.next(), parts.next(), parts.next(), parts.nth(2)),
        (Some("arn"), Some(_), Some("s3tables"), Some(resource)) if resource.starts_with("bucket/") && resource.len() > 7
    )
}

/// Where a REST catalog is and how to authenticate to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestSettings {
    /// Base URI; the client appends `/v1/...` (never printed with its secrets).
    pub uri: kfs_plan::secret_url::SecretUrl,
    /// The catalog's warehouse *name* (Polaris' catalog, Unity's catalog name), sent to
    /// `/v1/config`; distinct from the storage location, which the server decides.
    pub warehouse: Option<String>,
    /// Credentials (from Secrets Manager in Lambda, the environment or a file locally).
    pub credentials: RestCredentials,
}

/// REST catalog credentials: a bearer `token`, or OAuth2 client credentials
/// (`credential` = `client_id:client_secret`, with `scope` and `oauth2-server-uri`).
/// Its `Debug` shows which fields are set, never their values.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RestCredentials(HashMap<String, String>);

impl std::fmt::Debug for RestCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut keys: Vec<&str> = self.0.keys().map(String::as_str).collect();
        keys.sort_unstable();
        write!(f, "RestCredentials({} = <redacted>)", keys.join(", "))
    }
}

impl RestCredentials {
    /// The keys a credentials document may hold.
    pub const KEYS: [&'static str; 6] = [
        "token",
        "credential",
        "client_id",
        "client_secret",
        "scope",
        "oauth2-server-uri",
    ];

    /// Reads a JSON object such as `{"client_id": "...", "client_secret": "...",
    /// "scope": "PRINCIPAL_ROLE:ALL"}` or `{"token": "..."}`. The error never quotes
    /// the document.
    pub fn from_json(document: &str) -> Result<Self, String> {
        let map: HashMap<String, serde_json::Value> =
            serde_json::from_str(document).map_err(|e| {
                format!(
                    "the credentials are not a JSON object (line {}, column {})",
                    e.line(),
                    e.column()
                )
            })?;
        let mut fields = HashMap::new();
        for (key, value) in map {
            if !Self::KEYS.contains(&key.as_str()) {
                return Err(format!(
                    "unknown credentials field {key:?} (expected one of {})",
                    Self::KEYS.join(", ")
                ));
            }
            let serde_json::Value::String(value) = value else {
                return Err(format!("credentials field {key:?} must be a string"));
            };
            fields.insert(key, value);
        }
        match (fields.remove("client_id"), fields.remove("client_secret")) {
            (Some(id), Some(secret)) => {
                fields.insert("credential".into(), format!("{id}:{secret}"));
            }
            (None, None) => {}
            _ => return Err("client_id and client_secret go together".into()),
        }
        if !fields.contains_key("token") && !fields.contains_key("credential") {
            return Err("the credentials hold neither a token nor client credentials".into());
        }
        Ok(Self(fields))
    }

    /// The client properties these credentials give.
    pub fn properties(&self) -> &HashMap<String, String> {
        &self.0
    }
}

/// The catalog name REST clients are given (it names the client, not the warehouse).
pub const REST_CATALOG_NAME: &str = "rest";

/// An opened catalog with its pointer swap (for replace snapshots).
#[derive(Clone)]
pub struct CatalogHandle {
    /// The catalog.
    pub catalog: Arc<dyn Catalog>,
    /// Its pointer swap.
    pub swap: Arc<dyn TableSwap>,
}

impl CatalogHandle {
    /// The catalog and its swap, borrowed.
    pub fn access(&self) -> CatalogAccess<'_> {
        CatalogAccess {
            catalog: self.catalog.as_ref(),
            swap: self.swap.as_ref(),
        }
    }
}

/// A catalog with its pointer swap, borrowed: what converting into a table needs (the
/// swap changes a JSON table's schema).
#[derive(Clone, Copy)]
pub struct CatalogAccess<'a> {
    /// The catalog.
    pub catalog: &'a dyn Catalog,
    /// Its pointer swap.
    pub swap: &'a dyn TableSwap,
}

/// Opens the configured catalog and its pointer swap: SQL, REST and memory catalogs
/// (the AWS ones are opened by `kfs-aws`, which hands the others to this function).
pub async fn open_catalog_handle(
    kind: &CatalogKind,
    warehouse: &Warehouse,
    s3: &S3Settings,
) -> iceberg::Result<CatalogHandle> {
    match kind {
        #[cfg(feature = "sql")]
        CatalogKind::Sql { database } => Ok(CatalogHandle {
            catalog: Arc::new(open_sql_catalog(database, warehouse, s3).await?),
            swap: Arc::new(SqlTableSwap::open(database, LOCAL_CATALOG_NAME).await?),
        }),
        #[cfg(feature = "sql")]
        CatalogKind::SqlPostgres { url } => Ok(CatalogHandle {
            catalog: Arc::new(open_postgres_catalog(url.expose(), warehouse, s3).await?),
            swap: Arc::new(SqlTableSwap::open_postgres(url.expose(), LOCAL_CATALOG_NAME).await?),
        }),
        #[cfg(not(feature = "sql"))]
        CatalogKind::Sql { .. } | CatalogKind::SqlPostgres { .. } => Err(iceberg::Error::new(
            iceberg::ErrorKind::FeatureUnsupported,
            "this build has no SQL catalog (kfs-core's `sql` feature)",
        )),
        CatalogKind::Rest(rest) => {
            use iceberg_catalog_rest::{
                REST_CATALOG_PROP_URI, REST_CATALOG_PROP_WAREHOUSE, RestCatalogBuilder,
            };
            let mut props = s3.file_io_properties();
            props.extend(rest.credentials.properties().clone());
            props.insert(
                REST_CATALOG_PROP_URI.to_owned(),
                rest.uri.expose().to_owned(),
            );
            if let Some(name) = &rest.warehouse {
                props.insert(REST_CATALOG_PROP_WAREHOUSE.to_owned(), name.clone());
            }
            let catalog = RestCatalogBuilder::default()
                .with_storage_factory(Arc::new(OpenDalResolvingStorageFactory::new()))
                .load(REST_CATALOG_NAME, props)
                .await?;
            // Client-credentials tokens expire; a bearer token given as is cannot be renewed.
            let catalog: Arc<dyn Catalog> =
                if rest.credentials.properties().contains_key("credential") {
                    Arc::new(RestTables::new(catalog))
                } else {
                    Arc::new(catalog)
                };
            Ok(CatalogHandle {
                catalog,
                swap: Arc::new(RestTableSwap::new(
                    rest.uri.expose().to_owned(),
                    rest.warehouse.clone(),
                    rest.credentials.properties().clone(),
                )),
            })
        }
        CatalogKind::Memory => {
            let tables = Arc::new(MemoryTables::new(s3.file_io(), &warehouse.location())?);
            Ok(CatalogHandle {
                catalog: tables.clone(),
                swap: tables,
            })
        }
        CatalogKind::Glue { .. } | CatalogKind::S3Tables(_) => Err(iceberg::Error::new(
            iceberg::ErrorKind::FeatureUnsupported,
            format!(
                "the {} catalog is an AWS catalog: open it with kfs_aws::open_catalog_handle",
                kind.name()
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rest_credentials_are_checked_and_never_shown() {
        let credentials = RestCredentials::from_json(
            r#"{"client_id": "kfs", "client_secret": "s3cr3t", "scope": "PRINCIPAL_ROLE:ALL"}"#,
        )
        .unwrap_or_default();
        assert_eq!(
            credentials
                .properties()
                .get("credential")
                .map(String::as_str),
            Some("kfs:s3cr3t")
        );
        let shown = format!("{credentials:?}");
        assert!(
            !shown.contains("s3cr3t") && shown.contains("credential"),
            "{shown}"
        );
        for bad in [
            "not json s3cr3t",
            r#"{"client_id": "kfs"}"#,
            r#"{"scope": "x"}"#,
            r#"{"password": "s3cr3t"}"#,
            r#"{"token": 5}"#,
        ] {
            let error = RestCredentials::from_json(bad).err().unwrap_or_default();
            assert!(
                !error.is_empty() && !error.contains("s3cr3t"),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn table_bucket_arns_are_recognised() {
        assert!(is_table_bucket_arn(
            "arn:aws:s3tables:us-east-1:123456789012:bucket/lake"
        ));
        for bad in [
            "lake",
            "arn:aws:s3:::lake",
            "arn:aws:s3tables:us-east-1:123456789012:bucket/",
            "arn:aws:s3tables:us-east-1:123456789012:table/x",
        ] {
            assert!(!is_table_bucket_arn(bad), "{bad}");
        }
    }
}

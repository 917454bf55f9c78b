//! Opening the Iceberg catalog and the topic tables.
//!
//! The embedded default is the Iceberg SQL catalog on SQLite, named `local`, with the
//! warehouse on the local disk or in S3 (any S3-compatible endpoint, configured from
//! the standard AWS environment variables).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use iceberg::io::{
    LocalFsStorageFactory, S3_ACCESS_KEY_ID, S3_ENDPOINT, S3_PATH_STYLE_ACCESS, S3_REGION,
    S3_SECRET_ACCESS_KEY, S3_SESSION_TOKEN,
};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, CatalogBuilder, ErrorKind, NamespaceIdent, TableCreation, TableIdent};
pub use iceberg_catalog_sql::SqlCatalog;
use iceberg_catalog_sql::{
    SQL_CATALOG_PROP_BIND_STYLE, SQL_CATALOG_PROP_URI, SQL_CATALOG_PROP_WAREHOUSE, SqlBindStyle,
    SqlCatalogBuilder,
};
use iceberg_storage_opendal::{OpenDalResolvingStorageFactory, OpenDalStorageFactory};
use kfs_plan::naming::{TableName, TableNaming};

use crate::table::{COMMIT_RETRIES_PROPERTY, VALUE_FORMAT_PROPERTY, topic_table_properties};
use crate::table_commit::{SqlTableSwap, TableSwap};

/// The catalog name of the embedded default (what pyiceberg's `SqlCatalog` must be
/// given too).
pub const LOCAL_CATALOG_NAME: &str = "local";

/// Where table data and metadata live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Warehouse {
    /// A local directory (absolute).
    Local(PathBuf),
    /// `s3://bucket/prefix`.
    S3 {
        /// Bucket.
        bucket: String,
        /// Key prefix, without leading or trailing `/`.
        prefix: String,
    },
}

impl Warehouse {
    /// Parses a directory or an `s3://bucket/prefix` URL.
    pub fn parse(text: &str) -> Result<Self, String> {
        if let Some(rest) = text.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(format!("{text}: no bucket"));
            }
            return Ok(Self::S3 {
                bucket: bucket.to_owned(),
                prefix: prefix.trim_matches('/').to_owned(),
            });
        }
        let path = Path::new(text.strip_prefix("file://").unwrap_or(text));
        let absolute = std::path::absolute(path).map_err(|e| format!("{text}: {e}"))?;
        Ok(Self::Local(absolute))
    }

    /// The warehouse location as Iceberg spells it.
    pub fn location(&self) -> String {
        match self {
            Self::Local(path) => format!("file://{}", path.display()),
            Self::S3 { bucket, prefix } if prefix.is_empty() => format!("s3://{bucket}"),
            Self::S3 { bucket, prefix } => format!("s3://{bucket}/{prefix}"),
        }
    }
}

/// S3 settings from the standard AWS environment variables.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct S3Settings {
    /// `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`: a custom endpoint (path-style access).
    pub endpoint: Option<String>,
    /// `AWS_REGION` or `AWS_DEFAULT_REGION` (default `us-east-1`).
    pub region: String,
    /// `AWS_ACCESS_KEY_ID`.
    pub access_key_id: Option<String>,
    /// `AWS_SECRET_ACCESS_KEY`.
    pub secret_access_key: Option<String>,
    /// `AWS_SESSION_TOKEN`.
    pub session_token: Option<String>,
}

impl S3Settings {
    /// The AWS SDK configuration for these settings' region and static credentials
    /// (else the standard chain), with `endpoint` for a service not on AWS (a local
    /// stand-in).
    pub async fn aws_config(&self, endpoint: Option<&str>) -> aws_config::SdkConfig {
        let mut config = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new(self.region.clone()));
        if let Some(endpoint) = endpoint {
            config = config.endpoint_url(endpoint);
        }
        if let (Some(key), Some(secret)) = (&self.access_key_id, &self.secret_access_key) {
            config = config.credentials_provider(aws_sdk_glue::config::Credentials::new(
                key,
                secret,
                self.session_token.clone(),
                None,
                "environment",
            ));
        }
        config.load().await
    }

    /// Reads the environment.
    pub fn from_env() -> Self {
        Self::from_lookup(&|name| std::env::var(name).ok())
    }

    /// Reads the variables `lookup` returns (empty values count as unset).
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Self {
        let var = |name: &str| lookup(name).filter(|v| !v.is_empty());
        Self {
            endpoint: var("AWS_ENDPOINT_URL_S3").or_else(|| var("AWS_ENDPOINT_URL")),
            region: var("AWS_REGION")
                .or_else(|| var("AWS_DEFAULT_REGION"))
                .unwrap_or_else(|| "us-east-1".into()),
            access_key_id: var("AWS_ACCESS_KEY_ID"),
            secret_access_key: var("AWS_SECRET_ACCESS_KEY"),
            session_token: var("AWS_SESSION_TOKEN"),
        }
    }

    /// A FileIO over any supported scheme (`s3://`, `file://`) with these settings.
    pub fn file_io(&self) -> iceberg::io::FileIO {
        iceberg::io::FileIOBuilder::new(Arc::new(OpenDalResolvingStorageFactory::new()))
            .with_props(self.file_io_properties())
            .build()
    }

    /// The FileIO properties these settings give.
    pub fn file_io_properties(&self) -> HashMap<String, String> {
        let mut props = HashMap::from([(S3_REGION.to_owned(), self.region.clone())]);
        if let Some(endpoint) = &self.endpoint {
            props.insert(S3_ENDPOINT.to_owned(), endpoint.clone());
            props.insert(S3_PATH_STYLE_ACCESS.to_owned(), "true".to_owned());
        }
        for (key, value) in [
            (S3_ACCESS_KEY_ID, &self.access_key_id),
            (S3_SECRET_ACCESS_KEY, &self.secret_access_key),
            (S3_SESSION_TOKEN, &self.session_token),
        ] {
            if let Some(value) = value {
                props.insert(key.to_owned(), value.clone());
            }
        }
        props
    }
}

/// Opens the SQL catalog on SQLite at `database`, creating the file if needed.
pub async fn open_sql_catalog(
    database: &Path,
    warehouse: &Warehouse,
    s3: &S3Settings,
) -> iceberg::Result<SqlCatalog> {
    if let Some(parent) = database.parent() {
        std::fs::create_dir_all(parent).map_err(|e| {
            iceberg::Error::new(
                ErrorKind::Unexpected,
                format!("cannot create {}: {e}", parent.display()),
            )
        })?;
    }
    // One connection: the SQLite catalog must not race itself.
    open_sql_catalog_at(
        &format!("sqlite://{}?mode=rwc", database.display()),
        SqlBindStyle::QMark,
        1,
        warehouse,
        s3,
    )
    .await
}

/// Opens the SQL catalog on the PostgreSQL database at `url`
/// (`postgres://user:password@host:port/database`), creating its tables if needed.
pub async fn open_postgres_catalog(
    url: &str,
    warehouse: &Warehouse,
    s3: &S3Settings,
) -> iceberg::Result<SqlCatalog> {
    open_sql_catalog_at(url, SqlBindStyle::DollarNumeric, 4, warehouse, s3).await
}

async fn open_sql_catalog_at(
    uri: &str,
    bind_style: SqlBindStyle,
    max_connections: u32,
    warehouse: &Warehouse,
    s3: &S3Settings,
) -> iceberg::Result<SqlCatalog> {
    let mut props = HashMap::from([
        (SQL_CATALOG_PROP_URI.to_owned(), uri.to_owned()),
        (SQL_CATALOG_PROP_WAREHOUSE.to_owned(), warehouse.location()),
        (
            SQL_CATALOG_PROP_BIND_STYLE.to_owned(),
            bind_style.to_string(),
        ),
        (
            "pool.max-connections".to_owned(),
            max_connections.to_string(),
        ),
        // No idle reaping every 10 s: sqlx's pool maintenance task can wedge in a
        // busy loop (launchbadge/sqlx#3645, an idle-count underflow), which the
        // seeded simulation hit as a thread spinning at 100% and a process that never
        // exits. A handful of connections gains nothing from reaping; the sweep now
        // runs only at sqlx's 30-minute connection lifetime.
        ("pool.idle-timeout".to_owned(), "31536000".to_owned()),
    ]);
    let builder = match warehouse {
        Warehouse::Local(_) => {
            SqlCatalogBuilder::default().with_storage_factory(Arc::new(LocalFsStorageFactory))
        }
        Warehouse::S3 { .. } => {
            props.extend(s3.file_io_properties());
            SqlCatalogBuilder::default().with_storage_factory(Arc::new(OpenDalStorageFactory::S3 {
                customized_credential_load: None,
            }))
        }
    };
    builder.load(LOCAL_CATALOG_NAME, props).await
}

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
        /// `postgres://user:password@host:port/database`.
        url: String,
    },
    /// AWS Glue Data Catalog.
    Glue {
        /// A custom Glue endpoint (`AWS_ENDPOINT_URL_GLUE` or `AWS_ENDPOINT_URL`).
        endpoint: Option<String>,
    },
    /// An Iceberg REST catalog (Apache Polaris, Unity Catalog).
    Rest(RestSettings),
    /// An Amazon S3 Tables table bucket.
    S3Tables(crate::s3tables::S3TablesSettings),
    /// A catalog in memory ([`crate::memory_catalog`]): tables under the warehouse,
    /// the catalog gone with the process.
    Memory,
}

/// Where a REST catalog is and how to authenticate to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestSettings {
    /// Base URI; the client appends `/v1/...`.
    pub uri: String,
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

/// Opens the configured catalog over `warehouse` (for a REST catalog, the server
/// decides where tables live; `warehouse` is only the default location of the others).
pub async fn open_catalog(
    kind: &CatalogKind,
    warehouse: &Warehouse,
    s3: &S3Settings,
) -> iceberg::Result<Arc<dyn Catalog>> {
    Ok(open_catalog_handle(kind, warehouse, s3).await?.catalog)
}

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

/// Opens the configured catalog and its pointer swap.
pub async fn open_catalog_handle(
    kind: &CatalogKind,
    warehouse: &Warehouse,
    s3: &S3Settings,
) -> iceberg::Result<CatalogHandle> {
    match kind {
        CatalogKind::Sql { database } => Ok(CatalogHandle {
            catalog: Arc::new(open_sql_catalog(database, warehouse, s3).await?),
            swap: Arc::new(SqlTableSwap::open(database, LOCAL_CATALOG_NAME).await?),
        }),
        CatalogKind::SqlPostgres { url } => Ok(CatalogHandle {
            catalog: Arc::new(open_postgres_catalog(url, warehouse, s3).await?),
            swap: Arc::new(SqlTableSwap::open_postgres(url, LOCAL_CATALOG_NAME).await?),
        }),
        CatalogKind::Rest(rest) => {
            use iceberg_catalog_rest::{
                REST_CATALOG_PROP_URI, REST_CATALOG_PROP_WAREHOUSE, RestCatalogBuilder,
            };
            let mut props = s3.file_io_properties();
            props.extend(rest.credentials.properties().clone());
            props.insert(REST_CATALOG_PROP_URI.to_owned(), rest.uri.clone());
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
                    Arc::new(crate::rest_tables::RestTables::new(catalog))
                } else {
                    Arc::new(catalog)
                };
            Ok(CatalogHandle {
                catalog,
                swap: Arc::new(crate::rest_swap::RestTableSwap::new(
                    rest.uri.clone(),
                    rest.warehouse.clone(),
                    rest.credentials.properties().clone(),
                )),
            })
        }
        CatalogKind::S3Tables(settings) => crate::s3tables::open(settings, s3).await,
        CatalogKind::Memory => {
            let tables = Arc::new(crate::memory_catalog::MemoryTables::new(
                s3.file_io(),
                &warehouse.location(),
            )?);
            Ok(CatalogHandle {
                catalog: tables.clone(),
                swap: tables,
            })
        }
        CatalogKind::Glue { endpoint } => {
            use iceberg_catalog_glue::{
                GLUE_CATALOG_PROP_URI, GLUE_CATALOG_PROP_WAREHOUSE, GlueCatalogBuilder,
            };
            let mut props = s3.file_io_properties();
            props.insert(GLUE_CATALOG_PROP_WAREHOUSE.to_owned(), warehouse.location());
            props.insert("region_name".to_owned(), s3.region.clone());
            if let Some(endpoint) = endpoint {
                props.insert(GLUE_CATALOG_PROP_URI.to_owned(), endpoint.clone());
            }
            if let (Some(key), Some(secret)) = (&s3.access_key_id, &s3.secret_access_key) {
                props.insert("aws_access_key_id".to_owned(), key.clone());
                props.insert("aws_secret_access_key".to_owned(), secret.clone());
                if let Some(token) = &s3.session_token {
                    props.insert("aws_session_token".to_owned(), token.clone());
                }
            }
            let inner = GlueCatalogBuilder::default()
                .with_storage_factory(Arc::new(OpenDalStorageFactory::S3 {
                    customized_credential_load: None,
                }))
                .load(LOCAL_CATALOG_NAME, props)
                .await?;
            let glue = aws_sdk_glue::Client::new(&s3.aws_config(endpoint.as_deref()).await);
            let catalog = Arc::new(crate::glue::GlueTables::new(
                inner,
                glue,
                warehouse.location(),
            )?);
            Ok(CatalogHandle {
                catalog: catalog.clone(),
                swap: catalog,
            })
        }
    }
}

/// The identifier of a table.
pub fn table_ident(name: &TableName) -> TableIdent {
    TableIdent::new(
        NamespaceIdent::new(name.namespace.clone()),
        name.name.clone(),
    )
}

/// Loads the table for `topic`, creating its namespace and the table (laid out as
/// `layout` says: value format, partition spec and properties) on first sight, and
/// makes sure iceberg-rust's blind commit retries are off for it. An existing table
/// keeps its own format, spec and properties.
pub async fn ensure_topic_table(
    catalog: &dyn Catalog,
    name: &TableName,
    topic: &str,
    layout: &TableNaming,
) -> iceberg::Result<Table> {
    ensure_table(catalog, name, || {
        let declared = layout.value_columns_for(topic);
        let schema = crate::table::schema_for(layout.value_format, declared)?;
        let spec = crate::table::topic_partition_spec(&schema, layout.partition_for(topic))?;
        let mut properties = topic_table_properties(topic);
        properties.extend(layout.properties.clone());
        properties.insert(
            VALUE_FORMAT_PROPERTY.to_owned(),
            layout.value_format.name().to_owned(),
        );
        if !declared.is_empty() {
            properties.insert(
                crate::table::VALUE_COLUMNS_PROPERTY.to_owned(),
                "declared".to_owned(),
            );
        }
        crate::convert::compression(&properties)?;
        Ok(TableCreation::builder()
            .name(name.name.clone())
            .schema(schema)
            .partition_spec(spec)
            .properties(properties)
            .build())
    })
    .await
}

/// Loads the dead-letter table of the table `name` ([`TableName::dead_letters`]),
/// creating it on first use: unpartitioned, with the table's properties (its topic,
/// codec, target file size), its value format raw.
pub async fn ensure_dead_letter_table(
    catalog: &dyn Catalog,
    name: &TableName,
    table: &Table,
) -> iceberg::Result<Table> {
    let name = name.dead_letters();
    ensure_table(catalog, &name, || {
        let mut properties = table.metadata().properties().clone();
        properties.remove(VALUE_FORMAT_PROPERTY);
        Ok(TableCreation::builder()
            .name(name.name.clone())
            .schema(crate::table::dead_letter_schema()?)
            .properties(properties)
            .build())
    })
    .await
}

/// Makes `evolved` (the table's current schema grown by JSON values: columns added,
/// int widened to long, float to double) the table's current schema, through the
/// catalog's pointer swap; fails if the table's schema changed meanwhile.
pub async fn evolve_schema(
    swap: &dyn TableSwap,
    table: &Table,
    evolved: iceberg::spec::Schema,
) -> iceberg::Result<Table> {
    let requirements = vec![iceberg::TableRequirement::CurrentSchemaIdMatch {
        current_schema_id: table.metadata().current_schema_id(),
    }];
    let updates = vec![
        iceberg::TableUpdate::AddSchema { schema: evolved },
        // -1: the schema just added.
        iceberg::TableUpdate::SetCurrentSchema { schema_id: -1 },
    ];
    swap.commit(table, requirements, updates).await
}

/// Makes the partition spec `fields` (bound to the table's current schema) the
/// table's default spec, unless it already is (same source columns and transforms, in
/// order): new data files are written in it, files already committed keep theirs.
/// Through the catalog's pointer swap; fails if the default spec changed meanwhile.
pub async fn evolve_partition_spec(
    swap: &dyn TableSwap,
    table: &Table,
    fields: &[kfs_plan::layout::PartitionField],
) -> iceberg::Result<Table> {
    let metadata = table.metadata();
    let wanted = crate::table::topic_partition_spec(metadata.current_schema(), fields)?;
    let current = metadata.default_partition_spec();
    let layout = |fields: Vec<(i32, iceberg::spec::Transform)>| fields;
    let same = layout(
        current
            .fields()
            .iter()
            .map(|f| (f.source_id, f.transform))
            .collect(),
    ) == layout(
        wanted
            .fields()
            .iter()
            .map(|f| (f.source_id, f.transform))
            .collect(),
    );
    if same {
        return Ok(table.clone());
    }
    let requirements = vec![iceberg::TableRequirement::DefaultSpecIdMatch {
        default_spec_id: current.spec_id(),
    }];
    let updates = vec![
        iceberg::TableUpdate::AddSpec { spec: wanted },
        // -1: the spec just added.
        iceberg::TableUpdate::SetDefaultSpec { spec_id: -1 },
    ];
    swap.commit(table, requirements, updates).await
}

/// Loads `name`, creating its namespace and the table (as `creation` says) on first
/// sight, with iceberg-rust's blind commit retries off.
async fn ensure_table(
    catalog: &dyn Catalog,
    name: &TableName,
    creation: impl FnOnce() -> iceberg::Result<TableCreation>,
) -> iceberg::Result<Table> {
    let ident = table_ident(name);
    let namespace = ident.namespace().clone();
    if !catalog.namespace_exists(&namespace).await? {
        match catalog.create_namespace(&namespace, HashMap::new()).await {
            Ok(_) => {}
            // Another process won the race (SQL catalogs report it as a constraint error).
            Err(_) if catalog.namespace_exists(&namespace).await? => {}
            Err(e) => return Err(e),
        }
    }
    let table = if catalog.table_exists(&ident).await? {
        catalog.load_table(&ident).await?
    } else {
        match catalog.create_table(&namespace, creation()?).await {
            Ok(table) => table,
            Err(_) if catalog.table_exists(&ident).await? => catalog.load_table(&ident).await?,
            Err(e) => return Err(e),
        }
    };
    if table
        .metadata()
        .properties()
        .get(COMMIT_RETRIES_PROPERTY)
        .map(String::as_str)
        == Some("0")
    {
        return Ok(table);
    }
    let tx = Transaction::new(&table);
    let tx = tx
        .update_table_properties()
        .set(COMMIT_RETRIES_PROPERTY.to_owned(), "0".to_owned())
        .apply(tx)?;
    tx.commit(catalog).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_warehouses() {
        assert_eq!(
            Warehouse::parse("s3://bucket/a/b/"),
            Ok(Warehouse::S3 {
                bucket: "bucket".into(),
                prefix: "a/b".into()
            })
        );
        assert_eq!(
            Warehouse::parse("s3://bucket").map(|w| w.location()),
            Ok("s3://bucket".into())
        );
        assert_eq!(
            Warehouse::parse("/tmp/wh").map(|w| w.location()),
            Ok("file:///tmp/wh".into())
        );
        assert!(Warehouse::parse("s3:///x").is_err());
    }

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
}

//! The Iceberg SQL catalog (SQLite, the embedded default, or PostgreSQL) and its
//! pointer swap: a compare-and-swap on the catalog's `iceberg_tables` row.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use iceberg::io::LocalFsStorageFactory;
use iceberg::spec::TableMetadata;
use iceberg::{CatalogBuilder, Error, ErrorKind, Result};
pub use iceberg_catalog_sql::SqlCatalog;
use iceberg_catalog_sql::{
    SQL_CATALOG_PROP_BIND_STYLE, SQL_CATALOG_PROP_URI, SQL_CATALOG_PROP_WAREHOUSE, SqlBindStyle,
    SqlCatalogBuilder,
};
use iceberg_storage_opendal::OpenDalStorageFactory;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};

use super::LOCAL_CATALOG_NAME;
use super::swap::{MetadataPointer, lost_race};
use crate::storage::{S3Settings, Warehouse};
use iceberg::TableIdent;

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

/// The pointer swap of the Iceberg SQL catalog on SQLite: the same conditional
/// `UPDATE` of the `iceberg_tables` row that iceberg-rust's SQL catalog runs.
#[derive(Debug, Clone)]
pub struct SqlTableSwap {
    pool: SqlPool,
    catalog_name: String,
}

/// The database of a SQL catalog.
#[derive(Debug, Clone)]
enum SqlPool {
    Sqlite(SqlitePool),
    Postgres(sqlx::PgPool),
}

/// The pointer swap: the new location where the row still holds the old one.
const SWAP_SQLITE: &str = "UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ? \
     WHERE catalog_name = ? AND table_name = ? AND table_namespace = ? \
     AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL) AND metadata_location = ?";
/// The table's current metadata location, in the catalog's row.
const CURRENT_SQLITE: &str = "SELECT metadata_location FROM iceberg_tables \
     WHERE catalog_name = ? AND table_name = ? AND table_namespace = ? \
     AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)";
/// [`CURRENT_SQLITE`] with PostgreSQL's placeholders.
const CURRENT_POSTGRES: &str = "SELECT metadata_location FROM iceberg_tables \
     WHERE catalog_name = $1 AND table_name = $2 AND table_namespace = $3 \
     AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)";
/// [`SWAP_SQLITE`] with PostgreSQL's placeholders.
const SWAP_POSTGRES: &str = "UPDATE iceberg_tables SET metadata_location = $1, previous_metadata_location = $2 \
     WHERE catalog_name = $3 AND table_name = $4 AND table_namespace = $5 \
     AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL) AND metadata_location = $6";

fn opening(database: &str, e: sqlx::Error) -> Error {
    Error::new(
        ErrorKind::Unexpected,
        format!("opening catalog {database}: {e}"),
    )
    .with_retryable(true)
}

impl SqlTableSwap {
    /// Opens the catalog's SQLite file (which must exist).
    pub async fn open(database: &std::path::Path, catalog_name: &str) -> Result<Self> {
        let options = SqliteConnectOptions::new()
            .filename(database)
            .busy_timeout(std::time::Duration::from_secs(30));
        // No pool maintenance task (launchbadge/sqlx#3645; see `open_sql_catalog`).
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(options)
            .await
            .map_err(|e| opening(&database.display().to_string(), e))?;
        Ok(Self {
            pool: SqlPool::Sqlite(pool),
            catalog_name: catalog_name.to_owned(),
        })
    }

    /// Opens the catalog's PostgreSQL database at `url`.
    pub async fn open_postgres(url: &str, catalog_name: &str) -> Result<Self> {
        // The URL may hold a password: errors name the host, never the URL.
        let host = url
            .rsplit_once('@')
            .map_or("the PostgreSQL catalog", |(_, host)| host);
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect(url)
            .await
            .map_err(|e| opening(host, e))?;
        Ok(Self {
            pool: SqlPool::Postgres(pool),
            catalog_name: catalog_name.to_owned(),
        })
    }
}

#[async_trait]
impl MetadataPointer for SqlTableSwap {
    /// The location the row must still hold.
    type Version = String;

    async fn current(&self, ident: &TableIdent) -> Result<(String, String)> {
        let values = [
            self.catalog_name.clone(),
            ident.name().to_owned(),
            ident.namespace().join("."),
        ];
        let row: Option<(String,)> = match &self.pool {
            SqlPool::Sqlite(pool) => {
                let mut query = sqlx::query_as(CURRENT_SQLITE);
                for value in &values {
                    query = query.bind(value);
                }
                query.fetch_optional(pool).await
            }
            SqlPool::Postgres(pool) => {
                let mut query = sqlx::query_as(CURRENT_POSTGRES);
                for value in &values {
                    query = query.bind(value);
                }
                query.fetch_optional(pool).await
            }
        }
        .map_err(|e| {
            Error::new(ErrorKind::Unexpected, format!("reading {ident}: {e}")).with_retryable(true)
        })?;
        let (location,) = row.ok_or_else(|| {
            Error::new(
                ErrorKind::TableNotFound,
                format!("table {ident} is not found"),
            )
        })?;
        Ok((location.clone(), location))
    }

    async fn swap(
        &self,
        ident: &TableIdent,
        expected: String,
        _current_location: &str,
        _staged: &TableMetadata,
        staged_location: &str,
    ) -> Result<()> {
        let values = [
            staged_location.to_owned(),
            expected.clone(),
            self.catalog_name.clone(),
            ident.name().to_owned(),
            ident.namespace().join("."),
            expected,
        ];
        let swapped = match &self.pool {
            SqlPool::Sqlite(pool) => {
                let mut query = sqlx::query(SWAP_SQLITE);
                for value in &values {
                    query = query.bind(value);
                }
                query.execute(pool).await.map(|r| r.rows_affected())
            }
            SqlPool::Postgres(pool) => {
                let mut query = sqlx::query(SWAP_POSTGRES);
                for value in &values {
                    query = query.bind(value);
                }
                query.execute(pool).await.map(|r| r.rows_affected())
            }
        }
        .map_err(|e| {
            Error::new(ErrorKind::Unexpected, format!("commit to {ident}: {e}"))
                .with_retryable(true)
        })?;
        if swapped != 1 {
            return Err(lost_race(ident, "the table moved"));
        }
        Ok(())
    }
}

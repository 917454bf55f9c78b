//! Committing a table change given as data (requirements plus updates), with the
//! catalog's own compare-and-swap. iceberg-rust 0.10.1 builds such commits only inside
//! its transactions (the `TableCommit` builder is crate-private), and has no action for
//! replace snapshots: compaction and manifest rewrites stage their updates here and
//! swap the metadata pointer per catalog: the row of the SQL catalog, Glue's
//! `UpdateTable` with `VersionId` (in [`crate::glue`]), the REST commit endpoint.

use std::str::FromStr;
use std::sync::Arc;

use async_trait::async_trait;
use iceberg::Runtime;
use iceberg::spec::TableMetadata;
use iceberg::table::Table;
use iceberg::{
    Error, ErrorKind, MetadataLocation, Result, TableIdent, TableRequirement, TableUpdate,
};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};

/// Checks the requirements against `current` and applies the updates: the metadata
/// the commit would publish, and the location of its next version. No I/O.
pub fn stage_updates(
    current: &TableMetadata,
    current_location: &str,
    requirements: &[TableRequirement],
    updates: Vec<TableUpdate>,
) -> Result<(TableMetadata, MetadataLocation)> {
    for requirement in requirements {
        requirement.check(Some(current))?;
    }
    let mut builder = current
        .clone()
        .into_builder(Some(current_location.to_owned()));
    for update in updates {
        builder = update.apply(builder)?;
    }
    let staged = builder.build()?.metadata;
    let location = MetadataLocation::from_str(current_location)?
        .with_next_version()
        .with_new_metadata(&staged);
    Ok((staged, location))
}

/// A table handle for staged metadata at `location`.
pub fn table_at(
    template: &Table,
    metadata: TableMetadata,
    location: &MetadataLocation,
) -> Result<Table> {
    Table::builder()
        .file_io(template.file_io().clone())
        .runtime(Runtime::try_current()?)
        .metadata_location(location.to_string())
        .metadata(metadata)
        .identifier(template.identifier().clone())
        .build()
}

/// Swaps a table's metadata pointer to the result of requirements plus updates, or
/// fails with `CatalogCommitConflicts` (retryable) when the table moved.
#[async_trait]
pub trait TableSwap: Send + Sync {
    /// Commits against `table` (as loaded); returns the table as committed.
    async fn commit(
        &self,
        table: &Table,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> Result<Table>;
}

/// The pointer swap of the Iceberg SQL catalog on SQLite: the same conditional
/// `UPDATE` of the `iceberg_tables` row that iceberg-rust's SQL catalog runs.
#[derive(Debug, Clone)]
pub struct SqlTableSwap {
    pool: SqlitePool,
    catalog_name: String,
}

impl SqlTableSwap {
    /// Opens the catalog's SQLite file (which must exist).
    pub async fn open(database: &std::path::Path, catalog_name: &str) -> Result<Self> {
        let options = SqliteConnectOptions::new()
            .filename(database)
            .busy_timeout(std::time::Duration::from_secs(30));
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await
            .map_err(|e| {
                Error::new(
                    ErrorKind::Unexpected,
                    format!("opening catalog {}: {e}", database.display()),
                )
                .with_retryable(true)
            })?;
        Ok(Self {
            pool,
            catalog_name: catalog_name.to_owned(),
        })
    }
}

#[async_trait]
impl TableSwap for SqlTableSwap {
    async fn commit(
        &self,
        table: &Table,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> Result<Table> {
        let current_location = table.metadata_location_result()?.to_owned();
        let (staged, location) =
            stage_updates(table.metadata(), &current_location, &requirements, updates)?;
        staged.write_to(table.file_io(), &location).await?;
        let ident: &TableIdent = table.identifier();
        let swapped = sqlx::query(
            "UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ? \
             WHERE catalog_name = ? AND table_name = ? AND table_namespace = ? \
             AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL) AND metadata_location = ?",
        )
        .bind(location.to_string())
        .bind(&current_location)
        .bind(&self.catalog_name)
        .bind(ident.name())
        .bind(ident.namespace().join("."))
        .bind(&current_location)
        .execute(&self.pool)
        .await
        .map_err(|e| {
            Error::new(ErrorKind::Unexpected, format!("commit to {ident}: {e}"))
                .with_retryable(true)
        })?
        .rows_affected();
        if swapped != 1 {
            let _ = table.file_io().delete(location.to_string()).await;
            return Err(Error::new(
                ErrorKind::CatalogCommitConflicts,
                format!("commit to {ident} lost a race: the table moved"),
            )
            .with_retryable(true));
        }
        table_at(table, staged, &location)
    }
}

/// A shared swap.
pub type SharedSwap = Arc<dyn TableSwap>;

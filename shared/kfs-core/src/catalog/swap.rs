//! Committing a table change given as data (requirements plus updates), with the
//! catalog's own compare-and-swap. iceberg-rust 0.10.1 builds such commits only inside
//! its transactions (the `TableCommit` builder is crate-private), and has no action for
//! replace snapshots: compaction and manifest rewrites stage their updates here and
//! swap the metadata pointer per catalog: the row of the SQL catalog, Glue's
//! `UpdateTable` with `VersionId` (in [`crate::glue`]), the REST commit endpoint.

use async_trait::async_trait;
use iceberg::Runtime;
use iceberg::spec::TableMetadata;
use iceberg::table::Table;
use iceberg::{MetadataLocation, Result, TableIdent, TableRequirement, TableUpdate};
use std::str::FromStr;

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

/// A table handle: metadata read from (or written to) `location`, with the FileIO and
/// runtime it is used with.
pub fn table_handle(
    file_io: &iceberg::io::FileIO,
    runtime: Runtime,
    ident: TableIdent,
    location: String,
    metadata: TableMetadata,
) -> Result<Table> {
    Table::builder()
        .file_io(file_io.clone())
        .runtime(runtime)
        .metadata_location(location)
        .metadata(metadata)
        .identifier(ident)
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

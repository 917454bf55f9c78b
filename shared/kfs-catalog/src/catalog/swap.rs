//! Committing a table change given as data (requirements plus updates), with the
//! catalog's own compare-and-swap. iceberg-rust 0.10.1 builds such commits only inside
//! its transactions (the `TableCommit` builder is crate-private), and has no action for
//! replace snapshots: compaction and manifest rewrites stage their updates here and
//! swap the metadata pointer per catalog: the row of the SQL catalog, Glue's
//! `UpdateTable` with `VersionId` and S3 Tables' version token (in `kfs-aws`), the map
//! of the in-memory catalog, each a [`MetadataPointer`] behind one blanket [`TableSwap`];
//! and the REST commit endpoint, which stages on the server.

use async_trait::async_trait;
use iceberg::Runtime;
use iceberg::io::FileIO;
use iceberg::spec::TableMetadata;
use iceberg::table::Table;
use iceberg::{
    Error, ErrorKind, MetadataLocation, Result, TableIdent, TableRequirement, TableUpdate,
};
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

/// The table whose current metadata file is `location`, read through `file_io`.
pub async fn read_table(
    file_io: &FileIO,
    runtime: Runtime,
    ident: TableIdent,
    location: String,
) -> Result<Table> {
    let metadata = TableMetadata::read_from(file_io, &location).await?;
    table_handle(file_io, runtime, ident, location, metadata)
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

/// Where a catalog keeps a table's metadata pointer, and its compare-and-swap: the one
/// part of a commit each catalog does its own way. Its [`TableSwap`] impl does the rest
/// (stage, write the metadata file, swap, clean up a lost race) once for all.
#[async_trait]
pub trait MetadataPointer: Send + Sync {
    /// What the swap is conditional on: a version id or token, or the location itself.
    type Version: Send;

    /// The table's current metadata location, and the version to swap from.
    async fn current(&self, ident: &TableIdent) -> Result<(String, Self::Version)>;

    /// Points the table at `staged_location` if it is still at `version` (whose
    /// location is `current_location`); fails with `CatalogCommitConflicts` otherwise.
    async fn swap(
        &self,
        ident: &TableIdent,
        version: Self::Version,
        current_location: &str,
        staged: &TableMetadata,
        staged_location: &str,
    ) -> Result<()>;
}

/// Every [`MetadataPointer`] is a [`TableSwap`]: the change is staged against the table
/// as the catalog holds it now (the requirements decide whether it still applies),
/// written, and swapped in; metadata files go through the table's FileIO. When the
/// catalog still points where `table` was loaded from, its metadata is used as it is,
/// not read again.
#[async_trait]
impl<P: MetadataPointer> TableSwap for P {
    async fn commit(
        &self,
        table: &Table,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> Result<Table> {
        let (file_io, ident) = (table.file_io(), table.identifier());
        let (current_location, version) = self.current(ident).await?;
        let (staged, location) = if table.metadata_location() == Some(current_location.as_str()) {
            stage_updates(table.metadata(), &current_location, &requirements, updates)?
        } else {
            let current = TableMetadata::read_from(file_io, &current_location).await?;
            stage_updates(&current, &current_location, &requirements, updates)?
        };
        publish(
            self,
            file_io,
            ident,
            version,
            &current_location,
            staged,
            location,
        )
        .await
    }
}

/// Writes `staged` at `location` (through `file_io`) and swaps the pointer to it from
/// `version`; a swap that lost a race deletes the file it wrote (best effort: orphan
/// cleanup removes what is left). Returns the table as committed.
pub async fn publish<P: MetadataPointer + ?Sized>(
    pointer: &P,
    file_io: &FileIO,
    ident: &TableIdent,
    version: P::Version,
    current_location: &str,
    staged: TableMetadata,
    location: MetadataLocation,
) -> Result<Table> {
    staged.write_to(file_io, &location).await?;
    let location = location.to_string();
    if let Err(e) = pointer
        .swap(ident, version, current_location, &staged, &location)
        .await
    {
        if e.kind() == ErrorKind::CatalogCommitConflicts {
            let _ = kfs_failpoint::delete_file(file_io, &location).await;
        }
        return Err(e);
    }
    table_handle(
        file_io,
        Runtime::try_current()?,
        ident.clone(),
        location,
        staged,
    )
}

/// The error of a swap that lost a race: retryable, the caller re-reads and re-plans.
pub fn lost_race(ident: &TableIdent, why: &str) -> Error {
    Error::new(
        ErrorKind::CatalogCommitConflicts,
        format!("commit to {ident} lost a race: {why}"),
    )
    .with_retryable(true)
}

//! The one loop every typed value format (JSON, registry) runs to grow a table's
//! schema for a segment: look at the table as it is, evolve its schema through the
//! catalog's swap, and when another converter changed the table first, look again at
//! the table it left, a few times at most before giving up (retryably).

use iceberg::spec::Schema;
use iceberg::table::Table;
use kfs_plan::naming::TableName;

use crate::error::PipelineError;
use kfs_catalog::catalog::CatalogAccess;

/// Schema changes raced by other converters before a conversion gives up (retryably).
const SCHEMA_ATTEMPTS: usize = 5;

/// What one attempt at a segment came to.
pub(super) enum Attempt<T> {
    /// Done, with what it produced.
    Done(T),
    /// Another writer changed the table first: try again against this one.
    Raced(Box<Table>),
}

/// What evolving a table's schema came to.
pub(super) enum Evolved {
    /// The table with its schema evolved.
    Updated(Table),
    /// Another writer changed the table first: its table as it is now.
    Raced(Box<Table>),
    /// The table refuses the change (a column named like a partition field): why.
    Refused(iceberg::Error),
}

/// A catalog failure on `table`.
pub(super) fn catalog_error(table: &TableName, source: iceberg::Error) -> PipelineError {
    PipelineError::Catalog {
        table: table.to_string(),
        source: Box::new(source),
    }
}

/// Runs `attempt` on `table` until no other writer races it, at most
/// [`SCHEMA_ATTEMPTS`] times; then fails retryably (the conversion is tried again).
pub(super) async fn racing<T>(
    name: &TableName,
    mut table: Table,
    mut attempt: impl AsyncFnMut(Table) -> Result<Attempt<T>, PipelineError>,
) -> Result<T, PipelineError> {
    for _ in 0..SCHEMA_ATTEMPTS {
        match attempt(table).await? {
            Attempt::Done(done) => return Ok(done),
            Attempt::Raced(now) => table = *now,
        }
    }
    Err(catalog_error(
        name,
        iceberg::Error::new(
            iceberg::ErrorKind::CatalogCommitConflicts,
            format!("the schema changed under {SCHEMA_ATTEMPTS} attempts to add columns"),
        )
        .with_retryable(true),
    ))
}

/// Evolves `table`'s schema to `schema`. A failure reloads the table: a conflict, or a
/// schema changed meanwhile, is a race; a change the table refuses (a failure that
/// quarantines) is a refusal; any other failure (one that may pass) is an error.
pub(super) async fn evolve(
    CatalogAccess { catalog, swap }: CatalogAccess<'_>,
    name: &TableName,
    table: &Table,
    schema: Schema,
) -> Result<Evolved, PipelineError> {
    let e = match crate::table::evolve_schema(swap, table, schema).await {
        Ok(updated) => return Ok(Evolved::Updated(updated)),
        Err(e) => e,
    };
    let reloaded = catalog
        .load_table(table.identifier())
        .await
        .map_err(|source| catalog_error(name, source))?;
    let changed = reloaded.metadata().current_schema_id() != table.metadata().current_schema_id();
    if changed || e.kind() == iceberg::ErrorKind::CatalogCommitConflicts {
        return Ok(Evolved::Raced(Box::new(reloaded)));
    }
    if kfs_catalog::fault::iceberg_error_kind(&e).quarantines() {
        return Ok(Evolved::Refused(e));
    }
    Err(catalog_error(name, e))
}

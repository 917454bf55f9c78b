//! A mirror's change log as a table: made beside the mirror with its columns' ids,
//! its schema following the mirror's forward only (a column once in the log stays),
//! and the check that a data file's columns are all the log's before its rows are
//! written there (else they would be dropped unseen).

use super::ensure::{check_sidecar, ensure_table, sidecar_properties};
use iceberg::spec::{DataFile, Schema};
use iceberg::table::Table;
use iceberg::{Catalog, TableCreation};
use kfs_catalog::catalog::TableSwap;
use kfs_plan::naming::TableName;

/// Table property of a change log: the id of the mirror's schema it last followed.
pub const FOLLOWED_SCHEMA_PROPERTY: &str = "kfs.change-log-schema-id";

/// Loads the change log of the mirror `table` named `name` ([`TableName::change_log`]),
/// creating it on first use: an append table of the mirror's first schema and
/// partition spec (which a new table numbers alike, so its columns' ids are the
/// mirror's) and its properties; then brings its schema to the mirror's current one,
/// unless the log followed that one or a later one already.
pub async fn ensure_change_log_table(
    catalog: &dyn Catalog,
    swap: &dyn TableSwap,
    name: &TableName,
    table: &Table,
) -> iceberg::Result<Table> {
    let metadata = table.metadata();
    let first_schema = metadata.schemas_iter().min_by_key(|s| s.schema_id());
    let first_spec = metadata.partition_specs_iter().min_by_key(|s| s.spec_id());
    let (Some(first_schema), Some(first_spec)) = (first_schema, first_spec) else {
        return Err(iceberg::Error::new(
            iceberg::ErrorKind::DataInvalid,
            format!(
                "table {} has no schema or partition spec",
                table.identifier()
            ),
        ));
    };
    let log_name = name.change_log();
    // Loaded at every commit: made (and its namespace looked up) only when missing.
    let loaded = catalog
        .load_table(&crate::table::table_ident(&log_name))
        .await;
    let log = match loaded {
        Ok(log) => log,
        Err(_) => {
            ensure_table(catalog, &log_name, || {
                Ok(TableCreation::builder()
                    .name(log_name.name.clone())
                    .schema(first_schema.as_ref().clone())
                    .partition_spec(first_spec.as_ref().clone().into_unbound())
                    .properties(sidecar_properties(table))
                    .build())
            })
            .await?
        }
    };
    check_sidecar(&log, table, "change log")?;
    check_ids(&log, table)?;
    follow_schema(catalog, swap, log, metadata.current_schema()).await
}

/// Refuses a change log whose columns' ids name other columns than the mirror's (a
/// table kfs-iceberg did not create): the rows written into it are matched by id.
fn check_ids(log: &Table, mirror: &Table) -> iceberg::Result<()> {
    let (ours, theirs) = (
        log.metadata().current_schema(),
        mirror.metadata().current_schema(),
    );
    for id in 1..=ours.highest_field_id() {
        if let (Some(a), Some(b)) = (ours.name_by_field_id(id), theirs.name_by_field_id(id))
            && a != b
        {
            return Err(kfs_catalog::fault::iceberg_error(
                kfs_catalog::fault::ErrorKind::Config,
                format!(
                    "table {} cannot be the change log of {}: its column {id} is {a:?}, the mirror's {b:?} (a table kfs-iceberg did not make); drop it, or turn the mirror's {} off",
                    log.identifier(),
                    mirror.identifier(),
                    kfs_plan::mode::CHANGE_LOG_PROPERTY
                ),
            ));
        }
    }
    Ok(())
}

/// Makes `schema` (the mirror's current schema) the log's, unless the log followed it
/// or a later one already (a committer that read the mirror before a schema change
/// never takes the log back): the mirror's columns, and the log's own that the mirror
/// no longer has (another engine dropped them) after them. Through the pointer swap;
/// a concurrent change makes it look again.
async fn follow_schema(
    catalog: &dyn Catalog,
    swap: &dyn TableSwap,
    log: Table,
    schema: &Schema,
) -> iceberg::Result<Table> {
    super::ensure::swap_schema(catalog, swap, log, "to follow its mirror's", |log| {
        let metadata = log.metadata();
        let followed = metadata
            .properties()
            .get(FOLLOWED_SCHEMA_PROPERTY)
            .and_then(|id| id.parse::<i32>().ok());
        let current = metadata.current_schema();
        if followed.is_some_and(|id| id >= schema.schema_id())
            || current.as_struct() == schema.as_struct()
        {
            return Ok(None);
        }
        let mut fields = schema.as_struct().fields().to_vec();
        fields.extend(
            current
                .as_struct()
                .fields()
                .iter()
                .filter(|field| schema.field_by_id(field.id).is_none())
                .cloned(),
        );
        let followed = iceberg::TableUpdate::SetProperties {
            updates: [(
                FOLLOWED_SCHEMA_PROPERTY.to_owned(),
                schema.schema_id().to_string(),
            )]
            .into(),
        };
        Ok(Some((super::next_schema(current, fields)?, vec![followed])))
    })
    .await
}

/// Refuses (retryably) to write `file`'s rows into `log` while a column of it is none
/// of the log's (the mirror's schema grew after this committer read it): they would
/// be dropped. The next pass reads the mirror again and the log follows it.
pub fn check_columns(log: &Table, file: &DataFile) -> iceberg::Result<()> {
    let schema = log.metadata().current_schema();
    let missing = file
        .value_counts()
        .keys()
        .chain(file.column_sizes().keys())
        .find(|id| schema.field_by_id(**id).is_none());
    match missing {
        None => Ok(()),
        Some(id) => Err(iceberg::Error::new(
            iceberg::ErrorKind::CatalogCommitConflicts,
            format!(
                "{}: its column {id} is not in the change log {} yet (the mirror's schema grew since it was read): the next attempt reads it again",
                file.file_path(),
                log.identifier()
            ),
        )
        .with_retryable(true)),
    }
}

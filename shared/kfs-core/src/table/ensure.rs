//! Opening a topic's table through the catalog: the namespace and the table created on
//! first sight (and its dead-letter table and a mirror's change log on first use),
//! iceberg-rust's blind commit
//! retries turned off, and the schema and partition spec evolved through the catalog's
//! pointer swap.

use crate::table::{
    COMMIT_RETRIES_PROPERTY, TOPIC_PROPERTY, VALUE_FORMAT_PROPERTY, topic_table_properties,
};
use iceberg::spec::FormatVersion;
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, NamespaceIdent, TableCreation, TableIdent};
use kfs_catalog::catalog::TableSwap;
use kfs_plan::naming::{TableName, TableNaming};
use std::collections::HashMap;

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
/// keeps its own format, spec and properties. (Tests and benchmarks; the pipeline
/// opens tables through `ensure_owned_table`, which also claims them.)
#[cfg(any(test, feature = "test-support"))]
pub async fn ensure_topic_table(
    catalog: &dyn Catalog,
    name: &TableName,
    topic: &str,
    layout: &TableNaming,
) -> iceberg::Result<Table> {
    ensure_owned_table(catalog, name, topic, HashMap::new(), layout).await
}

/// [`ensure_topic_table`], a new table created with the `owner` properties too (its
/// feed's namespace and ledger): set in the creation itself, which one process wins,
/// so two feeds racing to create one table never both own it.
pub async fn ensure_owned_table(
    catalog: &dyn Catalog,
    name: &TableName,
    topic: &str,
    owner: HashMap<String, String>,
    layout: &TableNaming,
) -> iceberg::Result<Table> {
    ensure_table(catalog, name, || {
        let declared = layout.value_columns_for(topic);
        let mode = layout.mode_for(topic);
        let schema = crate::table::schema_of(layout.value_format, declared, mode.mirrors())?;
        let spec = crate::table::topic_partition_spec(&schema, layout.partition_for(topic))?;
        let mut properties = topic_table_properties(topic);
        properties.extend(layout.properties.clone());
        // What the table belongs to is not a setting.
        properties.insert(crate::table::TOPIC_PROPERTY.to_owned(), topic.to_owned());
        properties.extend(owner);
        properties.insert(
            VALUE_FORMAT_PROPERTY.to_owned(),
            layout.value_format.name().to_owned(),
        );
        properties.extend(mode.properties());
        if !declared.is_empty() {
            properties.insert(
                crate::table::VALUE_COLUMNS_PROPERTY.to_owned(),
                "declared".to_owned(),
            );
        }
        crate::table::compression(&properties)?;
        let format_version = creation_format_version(&mut properties)?;
        Ok(TableCreation::builder()
            .name(name.name.clone())
            .schema(schema)
            .partition_spec(spec)
            .properties(properties)
            .format_version(format_version)
            .build())
    })
    .await
}

/// The property that chooses a new table's format version (`2`, the default, or `3`:
/// a mirror's deletes as deletion vectors, its rows with lineage).
pub const FORMAT_VERSION_PROPERTY: &str = "format-version";

/// The format version `properties` (a new table's) ask for, taken out of them (the
/// format version is the table metadata's, not a property); v2 when they name none.
/// Refuses any but 2 and 3.
pub(crate) fn creation_format_version(
    properties: &mut HashMap<String, String>,
) -> iceberg::Result<FormatVersion> {
    match properties.remove(FORMAT_VERSION_PROPERTY).as_deref() {
        None | Some("2") => Ok(FormatVersion::V2),
        Some("3") => Ok(FormatVersion::V3),
        Some(other) => Err(iceberg::Error::new(
            iceberg::ErrorKind::DataInvalid,
            format!("{FORMAT_VERSION_PROPERTY} = {other:?}: new tables are format 2 or 3"),
        )),
    }
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
    let dead_letters = ensure_table(catalog, &name, || {
        let mut properties = sidecar_properties(table);
        properties.remove(VALUE_FORMAT_PROPERTY);
        Ok(TableCreation::builder()
            .name(name.name.clone())
            .schema(crate::table::dead_letter_schema()?)
            .properties(properties)
            .build())
    })
    .await?;
    check_sidecar(&dead_letters, table, "dead-letter table")?;
    Ok(dead_letters)
}

/// The properties of a sidecar of `table` (its dead-letter table, its change log):
/// the table's (topic, owner, codec, target file size) but its mode and key index,
/// and its own progress, not the table's: created after the table committed, it would
/// otherwise look rolled back past commits it never had.
pub(super) fn sidecar_properties(table: &Table) -> HashMap<String, String> {
    let mut properties = table.metadata().properties().clone();
    for mirror_only in [
        kfs_plan::mode::TABLE_MODE_PROPERTY,
        kfs_plan::mode::UPSERT_KEY_PROPERTY,
        kfs_plan::mode::CHANGE_LOG_PROPERTY,
        kfs_plan::key_index::INDEX_PATH_PROPERTY,
        kfs_plan::key_index::INDEX_SNAPSHOT_PROPERTY,
        kfs_plan::key_index::INDEX_KEY_PROPERTY,
    ] {
        properties.remove(mirror_only);
    }
    properties.retain(|key, _| !key.starts_with(kfs_plan::progress::PROGRESS_PREFIX));
    properties
}

/// Refuses `sidecar` as the `what` of `table` when it belongs to another topic: a
/// table of that name fed by a topic of its own (`orders__dlq`) is not ours to write.
pub(super) fn check_sidecar(sidecar: &Table, table: &Table, what: &str) -> iceberg::Result<()> {
    let topic = |t: &Table| t.metadata().properties().get(TOPIC_PROPERTY).cloned();
    if topic(sidecar) != topic(table) {
        return Err(kfs_catalog::fault::iceberg_error(
            kfs_catalog::fault::ErrorKind::Config,
            format!(
                "table {} is not the {what} of {}: it belongs to topic {:?}",
                sidecar.identifier(),
                table.identifier(),
                topic(sidecar)
            ),
        ));
    }
    Ok(())
}

/// A change of a topic table's layout that older versions did not make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutUpgrade {
    /// The current record layout ([`crate::table::record_layout_upgrade`]: an optional
    /// `timestamp`, header keys' bytes).
    RecordLayout,
    /// The `lfs_*` columns ([`crate::table::lfs_columns_upgrade`]).
    LfsColumns,
    /// A `cdc` table's column of source positions
    /// ([`crate::table::source_position_upgrade`]).
    SourcePosition,
}

impl LayoutUpgrade {
    /// The schema after the upgrade of `schema` (given the table's last column id);
    /// `None` when it has it already.
    fn of(
        self,
        schema: &iceberg::spec::Schema,
        last_column_id: i32,
    ) -> Option<iceberg::spec::Schema> {
        match self {
            Self::RecordLayout => crate::table::record_layout_upgrade(schema, last_column_id),
            Self::LfsColumns => crate::table::lfs_columns_upgrade(schema, last_column_id),
            Self::SourcePosition => crate::table::source_position_upgrade(schema, last_column_id),
        }
    }
}

/// Brings `table` to the layout `upgrade` says through the catalog's pointer swap, once;
/// a table already there is returned as it is. A concurrent schema change makes it
/// look again at the table as that change left it.
pub async fn upgrade_layout(
    catalog: &dyn Catalog,
    swap: &dyn TableSwap,
    table: Table,
    upgrade: LayoutUpgrade,
) -> iceberg::Result<Table> {
    swap_schema(catalog, swap, table, &format!("{upgrade:?}"), |table| {
        let metadata = table.metadata();
        Ok(upgrade
            .of(metadata.current_schema(), metadata.last_column_id())
            .map(|schema| (schema, Vec::new())))
    })
    .await
}

/// Makes the schema `change` gives of the table as it stands its current schema, with
/// `change`'s other updates, through the pointer swap, unless `change` answers `None`
/// (nothing to change); a concurrent schema change makes it look again at the table as
/// that change left it (`what`: the change, for the error after too many).
pub(super) async fn swap_schema(
    catalog: &dyn Catalog,
    swap: &dyn TableSwap,
    mut table: Table,
    what: &str,
    change: impl Fn(
        &Table,
    ) -> iceberg::Result<Option<(iceberg::spec::Schema, Vec<iceberg::TableUpdate>)>>,
) -> iceberg::Result<Table> {
    /// Concurrent schema changes raced before giving up (retryably).
    const ATTEMPTS: usize = 5;
    for _ in 0..ATTEMPTS {
        let Some((schema, others)) = change(&table)? else {
            return Ok(table);
        };
        match commit_schema(swap, &table, schema, others).await {
            Ok(changed) => return Ok(changed),
            Err(e) if e.kind() == iceberg::ErrorKind::CatalogCommitConflicts => {
                table = catalog.load_table(table.identifier()).await?;
            }
            Err(e) => return Err(e),
        }
    }
    Err(iceberg::Error::new(
        iceberg::ErrorKind::CatalogCommitConflicts,
        format!(
            "the schema of {} changed under {ATTEMPTS} attempts ({what})",
            table.identifier()
        ),
    )
    .with_retryable(true))
}

/// Makes `evolved` (the table's current schema grown by JSON values: columns added,
/// int widened to long, float to double) the table's current schema, through the
/// catalog's pointer swap; fails if the table's schema changed meanwhile.
pub async fn evolve_schema(
    swap: &dyn TableSwap,
    table: &Table,
    evolved: iceberg::spec::Schema,
) -> iceberg::Result<Table> {
    commit_schema(swap, table, evolved, Vec::new()).await
}

/// Makes `schema` the table's current schema, with the `others` updates, through the
/// pointer swap; fails if the table's schema changed meanwhile.
async fn commit_schema(
    swap: &dyn TableSwap,
    table: &Table,
    schema: iceberg::spec::Schema,
    others: Vec<iceberg::TableUpdate>,
) -> iceberg::Result<Table> {
    let requirements = vec![iceberg::TableRequirement::CurrentSchemaIdMatch {
        current_schema_id: table.metadata().current_schema_id(),
    }];
    let mut updates = vec![
        iceberg::TableUpdate::AddSchema { schema },
        // -1: the schema just added.
        iceberg::TableUpdate::SetCurrentSchema { schema_id: -1 },
    ];
    updates.extend(others);
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
pub(super) async fn ensure_table(
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

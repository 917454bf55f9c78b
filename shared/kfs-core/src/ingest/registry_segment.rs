//! Converting a segment of a registry table: the schema ids its values (and keys)
//! name, their writer schemas looked up and absorbed by the table's schema, then the
//! segment converted, every value a schema cannot be written for a dead letter.

use std::sync::Arc;

use iceberg::spec::NestedFieldRef;
use iceberg::table::Table;
use kfs_plan::naming::KeyFormat;
use kfs_segment::DecodeLimits;

use super::passes::{SegmentPasses, scanning};
use super::schema_race::{Attempt, Evolved, catalog_error, evolve, racing};
use super::target::{Conversion, TopicTable, open_dead_letter_table};
use crate::convert::{Role, SegmentInput, Shape, ValueColumns, WriterSchema, WriterSchemas};
use crate::convert::{convert_segment, scan_schema_ids};
use crate::error::PipelineError;
use crate::source::{SegmentSource, SourceObject};
use kfs_catalog::catalog::CatalogAccess;
use kfs_values::registry::SchemaId;

/// A writer schema the segment names, in its role, with the table forms of its
/// values (or why it has none).
type Named = (
    Role,
    SchemaId,
    Result<(Vec<Vec<(String, Shape)>>, Arc<WriterSchema>), String>,
);

/// Converts a segment of a registry table: the schema ids its values name are read
/// first (streamed from the source), their writer schemas fetched (once per process)
/// and absorbed by the table's schema through the catalog's swap (new fields as new
/// optional columns, promotions Iceberg allows; a concurrent change makes it look
/// again); a schema the table cannot absorb, or an id the registry does not know,
/// sends its records to the dead-letter table with the reason, as does one needing
/// columns the table refuses (a field named like a partition field). Then the segment
/// is read again and converted. A registry that cannot answer fails the conversion
/// (transient: it is retried).
pub(crate) async fn convert_registry_segment(
    access: CatalogAccess<'_>,
    target: &TopicTable,
    input: SegmentInput<'_>,
    (source, object): (&impl SegmentSource, &SourceObject),
    limits: DecodeLimits,
) -> Result<Conversion, PipelineError> {
    let mut passes = SegmentPasses::new(source, object);
    let keys = target.keys == KeyFormat::Registry;
    let named = match named_schemas(target, input, &mut passes, limits, keys).await? {
        Ok(named) => named,
        Err(e) => return Ok(Err(e)),
    };
    racing(&target.name, target.table.clone(), async |mut table| {
        let (fields, mut writers) = absorb_all(target, &table, &named, keys);
        let current = table.metadata().current_schema().clone();
        if fields.as_slice() != current.as_struct().fields() {
            let evolved = crate::table::next_schema(&current, fields)
                .map_err(|e| catalog_error(&target.name, e))?;
            match evolve(access, &target.name, &table, evolved).await? {
                Evolved::Updated(updated) => table = updated,
                Evolved::Raced(now) => return Ok(Attempt::Raced(now)),
                // The table refuses the columns (a field named like a partition
                // field): the writer schemas are added one at a time, and those
                // whose columns it refuses are dead letters.
                Evolved::Refused(_) => {
                    table = add_one_at_a_time(access, target, table, &named, &mut writers, keys)
                        .await?;
                }
            }
        }
        let dead_letter_table = open_dead_letter_table(access, &target.name, &table).await?;
        let converted = convert_segment(
            &table,
            input,
            passes.open().await?,
            limits,
            ValueColumns::Registry {
                writers: writers.values,
                key_writers: keys.then_some(writers.keys),
                dead_letters: Some(&dead_letter_table),
            },
        )
        .await;
        Ok(Attempt::Done(converted.map(|converted| {
            (converted, table, Some(dead_letter_table))
        })))
    })
    .await
}

/// The writer schemas the segment's values (then keys) name, each looked up once
/// within the segment's lookup budget, with the table forms of their values; or the
/// conversion's error when the segment cannot be scanned.
async fn named_schemas(
    target: &TopicTable,
    input: SegmentInput<'_>,
    passes: &mut SegmentPasses<'_, impl SegmentSource>,
    limits: DecodeLimits,
    keys: bool,
) -> Result<Result<Vec<Named>, crate::convert::ConvertError>, PipelineError> {
    let Some(schemas) = &target.schemas else {
        return Err(PipelineError::Config(format!(
            "table {} stores registry-encoded values, and no schema registry is configured (--schema-registry-url, [schema_registry] url, SCHEMA_REGISTRY_URL)",
            target.name
        )));
    };
    let (values, named_keys) = {
        let reader = crate::convert::StreamReader::new(passes.open().await?);
        let key = input.key.clone();
        let scanned = scanning(&target.name, move || {
            scan_schema_ids(reader, &key, limits, keys)
        })
        .await?;
        match scanned {
            Ok(named) => named,
            Err(e) => return Ok(Err(e)),
        }
    };
    // Values' schemas first, then keys', each in the order the segment names them.
    let named: Vec<_> = (values.into_named().into_iter().map(|n| (Role::Value, n)))
        .chain(named_keys.into_named().into_iter().map(|n| (Role::Key, n)))
        .collect();
    // Each distinct id once, several at a time, within the segment's lookup budget.
    let mut ids: Vec<SchemaId> = Vec::new();
    for (_, (id, _)) in &named {
        if !ids.contains(id) {
            ids.push(*id);
        }
    }
    let found = schemas
        .get_all(&ids, WriterSchema::parse)
        .await
        .map_err(|e| PipelineError::Unconverted {
            segment: input.key.to_string(),
            message: e.to_string(),
            kind: e.kind,
        })?;
    let found: std::collections::HashMap<_, _> = ids.into_iter().zip(found).collect();
    let changes = crate::table::reads_changes(&target.table);
    Ok(Ok(named
        .into_iter()
        .map(|(role, (id, messages))| {
            let resolved = found
                .get(&id)
                .cloned()
                .unwrap_or_else(|| Err(format!("schema {id} was not looked up")));
            // The columns of its values (a change event's: its after image's), or
            // why they have none.
            let resolved = resolved.and_then(|writer| {
                let shapes = match (role, changes) {
                    (Role::Value, true) => writer.change_shapes(&messages)?,
                    _ => writer.shapes(&messages)?,
                };
                Ok((shapes, writer))
            });
            (role, id, resolved)
        })
        .collect()))
}

/// Whose schema `id` is, as a reason names it.
fn whose(role: Role, id: &SchemaId) -> String {
    match role {
        Role::Value => format!("schema {id}"),
        Role::Key => format!("key schema {id}"),
    }
}

/// The table's fields grown by every named schema that fits within its column cap,
/// and the writers of all of them (a schema that cannot be written: why).
fn absorb_all(
    target: &TopicTable,
    table: &Table,
    named: &[Named],
    keys: bool,
) -> (Vec<NestedFieldRef>, RegistryWriters) {
    let mut fields = table
        .metadata()
        .current_schema()
        .as_struct()
        .fields()
        .to_vec();
    let mut next_id = next_field_id(table);
    let mut writers = RegistryWriters::default();
    let caps = kfs_values::json::ColumnCaps::of(table);
    for (role, id, resolved) in named {
        let writer = resolved.clone().and_then(|(shapes, writer)| {
            // Measured before any change: a schema beyond the table's column cap
            // changes nothing, its records are dead letters.
            let mut grown_id = next_id;
            let cannot = |why: String| {
                let whose = whose(*role, id);
                format!("{whose} cannot be written to table {}: {why}", target.name)
            };
            if let Some(grown) =
                absorb_shapes((*role, keys), &fields, &shapes, &mut grown_id).map_err(cannot)?
            {
                caps.fields_within(grown_id).map_err(cannot)?;
                fields = grown;
                next_id = grown_id;
            }
            Ok(writer)
        });
        writers.of(*role).insert(*id, writer);
    }
    (fields, writers)
}

/// Adds the named schemas' columns to `table` one schema at a time, after the table
/// refused them all at once: a schema whose columns it refuses gets that reason in
/// `writers` (its records are dead letters). Returns the table as it is after.
async fn add_one_at_a_time(
    access: CatalogAccess<'_>,
    target: &TopicTable,
    mut table: Table,
    named: &[Named],
    writers: &mut RegistryWriters,
    keys: bool,
) -> Result<Table, PipelineError> {
    for (role, id, resolved) in named {
        let Ok((shapes, _)) = resolved else { continue };
        if matches!(writers.of(*role).get(id), Some(Err(_))) {
            continue;
        }
        let current = table.metadata().current_schema().clone();
        let mut next_id = next_field_id(&table);
        // Fits as it is, or refused already (`writers` says why).
        let Ok(Some(grown)) = absorb_shapes(
            (*role, keys),
            current.as_struct().fields(),
            shapes,
            &mut next_id,
        ) else {
            continue;
        };
        let evolved = crate::table::next_schema(&current, grown)
            .map_err(|e| catalog_error(&target.name, e))?;
        match evolve(access, &target.name, &table, evolved).await? {
            Evolved::Updated(updated) => table = updated,
            Evolved::Refused(e) => {
                let why = format!(
                    "{} needs columns table {} refuses: {e}",
                    whose(*role, id),
                    target.name
                );
                writers.of(*role).insert(*id, Err(why));
            }
            // A concurrent change: the conversion is tried again.
            Evolved::Raced(_) => {
                return Err(catalog_error(
                    &target.name,
                    iceberg::Error::new(
                        iceberg::ErrorKind::CatalogCommitConflicts,
                        "the schema changed while adding a writer schema's columns",
                    )
                    .with_retryable(true),
                ));
            }
        }
    }
    Ok(table)
}

/// The id the next new column of `table` gets.
fn next_field_id(table: &Table) -> i32 {
    let metadata = table.metadata();
    metadata
        .last_column_id()
        .max(metadata.current_schema().highest_field_id())
        + 1
}

/// `fields` grown by every table form of one writer schema in `role` (`keys`: the
/// table's keys are decoded); `None` when they fit as they are.
fn absorb_shapes(
    role: (Role, bool),
    fields: &[NestedFieldRef],
    shapes: &[Vec<(String, Shape)>],
    next_id: &mut i32,
) -> Result<Option<Vec<NestedFieldRef>>, String> {
    let mut grown: Option<Vec<NestedFieldRef>> = None;
    for shape in shapes {
        let now = grown.as_deref().unwrap_or(fields);
        if let Some(more) = crate::convert::absorb_as(role, now, shape, next_id)? {
            grown = Some(more);
        }
    }
    Ok(grown)
}

/// The writer schemas of a segment's values and keys, as the table absorbed them.
#[derive(Default)]
struct RegistryWriters {
    values: WriterSchemas,
    keys: WriterSchemas,
}

impl RegistryWriters {
    fn of(&mut self, role: Role) -> &mut WriterSchemas {
        match role {
            Role::Value => &mut self.values,
            Role::Key => &mut self.keys,
        }
    }
}

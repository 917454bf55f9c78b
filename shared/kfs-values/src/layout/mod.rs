//! The Iceberg table layout (format v2), one table per topic.
//!
//! | id | column | type |
//! |---|---|---|
//! | 1 | `record_id` | string, required: `"{topic}:{partition}:{offset}"` |
//! | 2 | `topic` | string, required |
//! | 3 | `partition` | int, required |
//! | 4 | `offset` | long, required |
//! | 5 | `timestamp_ms` | long, required |
//! | 6 | `key` | binary, optional (null stays null, empty stays empty) |
//! | 7 | `value` | binary, optional (null is a tombstone) |
//! | 8 | `headers` | list (element 10) of struct {`key` (11) string required, `value` (12) binary optional, `key_bytes` (13) binary optional}, required |
//! | 9 | `timestamp` | timestamptz (µs), optional |
//!
//! Ids 1-7 match the upstream Go processor's columns; `headers` is typed instead of its
//! lossy JSON string; `timestamp` makes time partitioning and time queries natural.
//!
//! Every record a broker accepts has a row: a header key that is not UTF-8 is decoded
//! as Kafka's Java consumer decodes it (invalid sequences become U+FFFD) and its bytes
//! are kept in `key_bytes` (null for a valid key); a CreateTime beyond the microsecond
//! range (Kafka does not bound it) keeps its exact `timestamp_ms`, and `timestamp` is
//! null. Tables created before `key_bytes` existed and with a required `timestamp`
//! are evolved to this layout when they are opened ([`record_layout_upgrade`]).
//! Ids are numbered breadth-first, the way Iceberg reassigns them on table creation,
//! so they survive unchanged.
//!
//! A JSON table (`kfs.value-format` = `json`) has the same columns without `value`
//! (`headers` 7, `timestamp` 8, the header fields 9-12), plus one column per field of
//! its values, added as they appear (`crate::json`); a JSON table in upsert mode keeps
//! `value` (the record's value as it came: null for the tombstone that deletes a key). Its dead-letter table
//! `<table>__dlq` has the raw table's columns plus `error` and `segment`.
//!
//! A raw table whose topic resolves or references large-file (LFS) claim checks
//! (`lfs` mode `resolve`, `reference` or `hybrid`) gets optional columns describing
//! each claim check's blob, added when the table is opened so ([`LFS_COLUMNS`]):
//! `lfs_resolved` (boolean: `value` holds the blob, not the envelope), `lfs_bucket`,
//! `lfs_key`, `lfs_blob_size` (long), `lfs_checksum`, `lfs_checksum_alg` and
//! `lfs_content_type`; null for a record that is no claim check.

mod names;

pub use names::{MAX_COLUMN_NAME_BYTES, Placement, column_for, field_doc, place};
use std::collections::HashMap;
use std::sync::Arc;

use std::str::FromStr;

use iceberg::spec::{
    ListType, NestedField, NestedFieldRef, PrimitiveType, Schema, StructType, Transform, Type,
    UnboundPartitionSpec,
};
use kfs_plan::layout::PartitionField;
use kfs_plan::naming::ValueFormat;
use kfs_plan::value_columns::ValueColumn;

/// Table property recording the topic a table is fed from.
pub const TOPIC_PROPERTY: &str = "kfs.topic";
/// Table property recording how the table stores record values (`raw` when absent).
pub const VALUE_FORMAT_PROPERTY: &str = "kfs.value-format";

/// How `table` stores record values, by its [`VALUE_FORMAT_PROPERTY`].
pub fn value_format_of(table: &iceberg::table::Table) -> Result<ValueFormat, String> {
    table
        .metadata()
        .properties()
        .get(VALUE_FORMAT_PROPERTY)
        .map_or(Ok(ValueFormat::Raw), |text| ValueFormat::parse(text))
}

/// Field id of `partition` (the Kafka partition).
pub const PARTITION_FIELD_ID: i32 = 3;
/// Field id of `offset`.
pub const OFFSET_FIELD_ID: i32 = 4;
/// Field id of `timestamp_ms`, whose upper bounds give the newest record of a file.
pub const TIMESTAMP_MS_FIELD_ID: i32 = 5;

/// The schema of a raw topic table (the table above).
pub fn topic_schema() -> iceberg::Result<Schema> {
    record_schema(true, &[])
}

/// Table property saying that a JSON table's columns were declared
/// (`declared`): fields without a column are not written, and no column is added.
pub const VALUE_COLUMNS_PROPERTY: &str = "kfs.value-columns";

/// Whether `table`'s value columns were declared ([`VALUE_COLUMNS_PROPERTY`]).
pub fn declared_columns(table: &iceberg::table::Table) -> bool {
    table
        .metadata()
        .properties()
        .get(VALUE_COLUMNS_PROPERTY)
        .is_some_and(|v| v == "declared")
}

/// The schema a new table of `format` starts with: for `json`, the Kafka metadata
/// columns of the raw table without `value` (ids 1-8), the `declared` columns (if
/// any), then the headers' element and fields; the values' other fields are added as
/// they appear (`crate::json`) unless columns were declared.
pub fn schema_for(format: ValueFormat, declared: &[ValueColumn]) -> iceberg::Result<Schema> {
    schema_of(format, declared, false)
}

/// [`schema_for`], a JSON or registry table's keeping the raw table's `value` column
/// too when `keep_value` (an upsert table's: a null `value` is the tombstone that
/// deletes its key, which the value's columns alone cannot tell from a row of nulls).
pub fn schema_of(
    format: ValueFormat,
    declared: &[ValueColumn],
    keep_value: bool,
) -> iceberg::Result<Schema> {
    match format {
        ValueFormat::Raw if declared.is_empty() => topic_schema(),
        ValueFormat::Raw => Err(iceberg::Error::new(
            iceberg::ErrorKind::DataInvalid,
            "value columns are declared for a table whose value format is raw, not json",
        )),
        ValueFormat::Registry if declared.is_empty() => record_schema(keep_value, &[]),
        ValueFormat::Registry => Err(iceberg::Error::new(
            iceberg::ErrorKind::DataInvalid,
            "value columns are declared for a table whose value format is registry: its columns come from the writer schemas",
        )),
        ValueFormat::Json => {
            use kfs_plan::value_columns::ColumnType;
            let columns: Vec<ExtraColumn> = declared
                .iter()
                .map(|column| {
                    let name = column_for(&column.name, true);
                    let doc = (name != column_name(&column.name)).then(|| field_doc(&column.name));
                    let primitive = match column.column_type {
                        ColumnType::Boolean => PrimitiveType::Boolean,
                        ColumnType::Int => PrimitiveType::Int,
                        ColumnType::Long => PrimitiveType::Long,
                        ColumnType::Float => PrimitiveType::Float,
                        ColumnType::Double => PrimitiveType::Double,
                        ColumnType::String => PrimitiveType::String,
                    };
                    (name.into_owned(), false, Type::Primitive(primitive), doc)
                })
                .collect();
            record_schema(keep_value, &columns)
        }
    }
}

/// Column of the dead-letter table: why the record could not be written.
pub const DEAD_LETTER_ERROR_COLUMN: &str = "error";
/// Column of the dead-letter table: the segment object the record came from.
pub const DEAD_LETTER_SEGMENT_COLUMN: &str = "segment";

/// The schema of a dead-letter table: the raw table's columns (the record as it came,
/// with its topic, partition and offset) plus `error` (the reason) and `segment` (the
/// object it was read from).
pub fn dead_letter_schema() -> iceberg::Result<Schema> {
    let text = || Type::Primitive(PrimitiveType::String);
    record_schema(
        true,
        &[
            (DEAD_LETTER_ERROR_COLUMN.to_owned(), true, text(), None),
            (DEAD_LETTER_SEGMENT_COLUMN.to_owned(), true, text(), None),
        ],
    )
}

/// The record columns (with or without `value`) plus required string columns
/// `extra`, numbered breadth-first: top-level columns first, then the headers' element
/// and its fields.
/// A column after the record columns: name, required, type, doc.
type ExtraColumn = (String, bool, Type, Option<String>);

fn record_schema(with_value: bool, extra: &[ExtraColumn]) -> iceberg::Result<Schema> {
    use PrimitiveType::{Binary, Int, Long, String as Text, Timestamptz};
    type Column<'a> = (&'a str, bool, Option<Type>, Option<&'a str>);
    let mut top: Vec<Column<'_>> = vec![
        ("record_id", true, Some(Type::Primitive(Text)), None),
        ("topic", true, Some(Type::Primitive(Text)), None),
        ("partition", true, Some(Type::Primitive(Int)), None),
        ("offset", true, Some(Type::Primitive(Long)), None),
        ("timestamp_ms", true, Some(Type::Primitive(Long)), None),
        ("key", false, Some(Type::Primitive(Binary)), None),
    ];
    if with_value {
        top.push(("value", false, Some(Type::Primitive(Binary)), None));
    }
    top.push(("headers", true, None, None));
    top.push(("timestamp", false, Some(Type::Primitive(Timestamptz)), None));
    top.extend(extra.iter().map(|(name, required, field_type, doc)| {
        (
            name.as_str(),
            *required,
            Some(field_type.clone()),
            doc.as_deref(),
        )
    }));
    let element_id = top.len() as i32 + 1;
    let header = StructType::new(vec![
        NestedField::required(element_id + 1, "key", Type::Primitive(Text)).into(),
        NestedField::optional(element_id + 2, "value", Type::Primitive(Binary)).into(),
        NestedField::optional(element_id + 3, HEADER_KEY_BYTES, Type::Primitive(Binary)).into(),
    ]);
    let headers = Type::List(ListType::new(
        NestedField::list_element(element_id, Type::Struct(header), true).into(),
    ));
    let fields = top
        .into_iter()
        .zip(1..)
        .map(|((name, required, field_type, doc), id)| {
            let field_type = field_type.unwrap_or_else(|| headers.clone());
            let field = if required {
                NestedField::required(id, name, field_type)
            } else {
                NestedField::optional(id, name, field_type)
            };
            Arc::new(match doc {
                Some(doc) => field.with_doc(doc),
                None => field,
            })
        })
        .collect::<Vec<_>>();
    debug_assert_eq!(fields[PARTITION_FIELD_ID as usize - 1].name, "partition");
    debug_assert_eq!(fields[OFFSET_FIELD_ID as usize - 1].name, "offset");
    debug_assert_eq!(
        fields[TIMESTAMP_MS_FIELD_ID as usize - 1].name,
        "timestamp_ms"
    );
    Schema::builder().with_fields(fields).build()
}

/// The columns describing a claim check's blob, in order, as [`lfs_columns_upgrade`]
/// adds them.
pub const LFS_COLUMNS: [(&str, PrimitiveType); 7] = [
    ("lfs_resolved", PrimitiveType::Boolean),
    ("lfs_bucket", PrimitiveType::String),
    ("lfs_key", PrimitiveType::String),
    ("lfs_blob_size", PrimitiveType::Long),
    ("lfs_checksum", PrimitiveType::String),
    ("lfs_checksum_alg", PrimitiveType::String),
    ("lfs_content_type", PrimitiveType::String),
];

/// Whether `schema` has the [`LFS_COLUMNS`].
pub fn has_lfs_columns(schema: &Schema) -> bool {
    schema.field_by_name(LFS_COLUMNS[0].0).is_some()
}

/// `schema` with the [`LFS_COLUMNS`] it lacks added (optional, ids above
/// `last_column_id`); `None` when it has them all.
pub fn lfs_columns_upgrade(schema: &Schema, last_column_id: i32) -> Option<Schema> {
    let mut next_id = last_column_id.max(schema.highest_field_id()) + 1;
    let mut fields = schema.as_struct().fields().to_vec();
    let before = fields.len();
    for (name, primitive) in LFS_COLUMNS {
        if schema.field_by_name(name).is_none() {
            fields.push(Arc::new(NestedField::optional(
                next_id,
                name,
                Type::Primitive(primitive),
            )));
            next_id += 1;
        }
    }
    if fields.len() == before {
        return None;
    }
    next_schema(schema, fields).ok()
}

/// The schema after `schema`: its id the next one, its identifier fields kept, its
/// columns `fields`.
pub fn next_schema(schema: &Schema, fields: Vec<NestedFieldRef>) -> iceberg::Result<Schema> {
    Schema::builder()
        .with_schema_id(schema.schema_id() + 1)
        .with_identifier_field_ids(schema.identifier_field_ids())
        .with_fields(fields)
        .build()
}

/// Field of a header entry holding the key's bytes when they are not valid UTF-8.
pub const HEADER_KEY_BYTES: &str = "key_bytes";

/// The schema that brings `schema` (a topic, JSON or dead-letter table's, as an older
/// version created it) to the current record layout: `timestamp` optional, and
/// `key_bytes` in the header entries (id above `last_column_id`); `None` when it already
/// has it. A schema whose record columns are not the layout's is left alone.
pub fn record_layout_upgrade(schema: &Schema, last_column_id: i32) -> Option<Schema> {
    let mut changed = false;
    let mut next_id = last_column_id.max(schema.highest_field_id()) + 1;
    let fields: Vec<_> = schema
        .as_struct()
        .fields()
        .iter()
        .map(|field| {
            let mut upgraded = field.as_ref().clone();
            match (field.name.as_str(), field.field_type.as_ref()) {
                ("timestamp", Type::Primitive(PrimitiveType::Timestamptz)) if field.required => {
                    upgraded.required = false;
                    changed = true;
                }
                ("headers", Type::List(list)) => {
                    if let Type::Struct(entry) = list.element_field.field_type.as_ref()
                        && entry.field_by_name(HEADER_KEY_BYTES).is_none()
                    {
                        let mut entry_fields = entry.fields().to_vec();
                        entry_fields.push(Arc::new(NestedField::optional(
                            next_id,
                            HEADER_KEY_BYTES,
                            Type::Primitive(PrimitiveType::Binary),
                        )));
                        next_id += 1;
                        let mut element = list.element_field.as_ref().clone();
                        element.field_type = Box::new(Type::Struct(StructType::new(entry_fields)));
                        upgraded.field_type =
                            Box::new(Type::List(ListType::new(Arc::new(element))));
                        changed = true;
                    }
                }
                _ => {}
            }
            Arc::new(upgraded)
        })
        .collect();
    if !changed {
        return None;
    }
    next_schema(schema, fields).ok()
}

/// The partition spec of a new topic table: `fields` bound to the topic schema. An
/// unknown column, or a transform its type does not allow (`day(key)`), is a
/// `DataInvalid` error naming the field.
pub fn topic_partition_spec(
    schema: &Schema,
    fields: &[PartitionField],
) -> iceberg::Result<UnboundPartitionSpec> {
    let mut builder = UnboundPartitionSpec::builder();
    for field in fields {
        let source = schema.field_by_name(&field.column).ok_or_else(|| {
            iceberg::Error::new(
                iceberg::ErrorKind::DataInvalid,
                format!(
                    "partition field {field}: the table has no column {:?} (columns: {})",
                    field.column,
                    schema
                        .as_struct()
                        .fields()
                        .iter()
                        .map(|f| f.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        })?;
        let transform = Transform::from_str(&field.transform.iceberg_name())?;
        if transform.result_type(&source.field_type).is_err() {
            return Err(iceberg::Error::new(
                iceberg::ErrorKind::DataInvalid,
                format!(
                    "partition field {field}: {} does not apply to column {:?} of type {}",
                    field.transform.iceberg_name(),
                    field.column,
                    source.field_type
                ),
            ));
        }
        builder = builder.add_partition_field(source.id, field.name(), transform)?;
    }
    Ok(builder.build())
}

/// Properties of a new topic table.
///
/// `commit.retry.num-retries` is 0 because iceberg-rust's built-in retry re-applies an
/// append to a refreshed table without re-planning it, which would write a stale
/// offset map; the committer re-plans after every conflict instead.
pub fn topic_table_properties(topic: &str) -> HashMap<String, String> {
    HashMap::from([
        (TOPIC_PROPERTY.to_owned(), topic.to_owned()),
        ("write.format.default".to_owned(), "parquet".to_owned()),
        (
            kfs_parquet::COMPRESSION_CODEC_PROPERTY.to_owned(),
            "zstd".to_owned(),
        ),
        (COMMIT_RETRIES_PROPERTY.to_owned(), "0".to_owned()),
        // A commit every minute would otherwise carry 100 previous metadata files in
        // every metadata file; older ones are left to orphan cleanup.
        (
            "write.metadata.previous-versions-max".to_owned(),
            "10".to_owned(),
        ),
    ])
}

/// The table property that sets iceberg-rust's built-in commit retries.
pub const COMMIT_RETRIES_PROPERTY: &str = "commit.retry.num-retries";

/// The Kafka metadata columns of a JSON table (and `value`, the raw table's, and
/// [`SOURCE_POSITION_COLUMN`], a `cdc` table's); a payload field of one of these names
/// is stored as `value_<name>`.
pub const METADATA_COLUMNS: [&str; 10] = [
    "record_id",
    "value",
    "topic",
    "partition",
    "offset",
    "timestamp_ms",
    "key",
    "headers",
    "timestamp",
    SOURCE_POSITION_COLUMN,
];

/// The column of a `cdc` table holding each change's position in its source
/// database's log, when its envelope has one (`kfs_plan::changes::SourcePosition`'s
/// text: `lsn:<lsn>` or `binlog:<file>:<pos>:<row>`): what orders a key's changes
/// from different partitions. Named as Debezium names the metadata its
/// `ExtractNewRecordState` adds (`__lsn`, `__source_ts_ms`).
pub const SOURCE_POSITION_COLUMN: &str = "__source_position";

/// `schema` (a `cdc` table's) with [`SOURCE_POSITION_COLUMN`] added (optional, its id
/// above `last_column_id`); `None` when it has it.
pub fn source_position_upgrade(schema: &Schema, last_column_id: i32) -> Option<Schema> {
    if schema.field_by_name(SOURCE_POSITION_COLUMN).is_some() {
        return None;
    }
    let mut fields = schema.as_struct().fields().to_vec();
    fields.push(Arc::new(NestedField::optional(
        last_column_id.max(schema.highest_field_id()) + 1,
        SOURCE_POSITION_COLUMN,
        Type::Primitive(PrimitiveType::String),
    )));
    next_schema(schema, fields).ok()
}

/// The struct column of a registry table whose keys are decoded (`key_format =
/// "registry"`): the key's fields. While keys are decoded, a value field of this name
/// is refused (its records are dead letters with the reason).
pub const KEY_FIELDS_COLUMN: &str = "key_fields";

/// True when `name` is a Kafka metadata column's, in any case (`Offset` too: Glue and
/// Hive-style engines do not tell names apart by case).
fn is_metadata_name(name: &str) -> bool {
    METADATA_COLUMNS
        .iter()
        .any(|m| m.eq_ignore_ascii_case(name))
}

/// The column a top-level payload field is stored in.
pub fn column_name(field: &str) -> String {
    if is_metadata_name(field) || field.starts_with("value_") && is_renamed(field) {
        format!("value_{field}")
    } else {
        field.to_owned()
    }
}

/// True for `value_<metadata column>` (and `value_value_...` chains), names the renaming
/// itself produces, so that a payload field literally named `value_offset` cannot
/// collide with a renamed `offset`.
fn is_renamed(field: &str) -> bool {
    let mut rest = field;
    while let Some(inner) = rest.strip_prefix("value_") {
        if is_metadata_name(inner) {
            return true;
        }
        rest = inner;
    }
    false
}

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
//! | 8 | `headers` | list (element 10) of struct {`key` (11) string required, `value` (12) binary optional}, required |
//! | 9 | `timestamp` | timestamptz (µs), required |
//!
//! Ids 1-7 match the upstream Go processor's columns; `headers` is typed instead of its
//! lossy JSON string; `timestamp` makes time partitioning and time queries natural.
//! Ids are numbered breadth-first, the way Iceberg reassigns them on table creation,
//! so they survive unchanged.
//!
//! A JSON table (`kfs.value-format` = `json`) has the same columns without `value`
//! (`headers` 7, `timestamp` 8, the header fields 9-11), plus one column per field of
//! its values, added as they appear (`convert::json`). Its dead-letter table
//! `<table>__dlq` has the raw table's columns plus `error` and `segment`.

use std::collections::HashMap;
use std::sync::Arc;

use std::str::FromStr;

use iceberg::spec::{
    ListType, NestedField, PrimitiveType, Schema, StructType, Transform, Type, UnboundPartitionSpec,
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
/// they appear (`convert::json`) unless columns were declared.
pub fn schema_for(format: ValueFormat, declared: &[ValueColumn]) -> iceberg::Result<Schema> {
    match format {
        ValueFormat::Raw if declared.is_empty() => topic_schema(),
        ValueFormat::Raw => Err(iceberg::Error::new(
            iceberg::ErrorKind::DataInvalid,
            "value columns are declared for a table whose value format is raw, not json",
        )),
        ValueFormat::Json => {
            use kfs_plan::value_columns::ColumnType;
            let columns: Vec<(String, bool, Type)> = declared
                .iter()
                .map(|column| {
                    let primitive = match column.column_type {
                        ColumnType::Boolean => PrimitiveType::Boolean,
                        ColumnType::Int => PrimitiveType::Int,
                        ColumnType::Long => PrimitiveType::Long,
                        ColumnType::Float => PrimitiveType::Float,
                        ColumnType::Double => PrimitiveType::Double,
                        ColumnType::String => PrimitiveType::String,
                    };
                    (column_name(&column.name), false, Type::Primitive(primitive))
                })
                .collect();
            record_schema(false, &columns)
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
            (DEAD_LETTER_ERROR_COLUMN.to_owned(), true, text()),
            (DEAD_LETTER_SEGMENT_COLUMN.to_owned(), true, text()),
        ],
    )
}

/// The record columns (with or without `value`) plus required string columns
/// `extra`, numbered breadth-first: top-level columns first, then the headers' element
/// and its fields.
fn record_schema(with_value: bool, extra: &[(String, bool, Type)]) -> iceberg::Result<Schema> {
    use PrimitiveType::{Binary, Int, Long, String as Text, Timestamptz};
    let mut top: Vec<(&str, bool, Option<Type>)> = vec![
        ("record_id", true, Some(Type::Primitive(Text))),
        ("topic", true, Some(Type::Primitive(Text))),
        ("partition", true, Some(Type::Primitive(Int))),
        ("offset", true, Some(Type::Primitive(Long))),
        ("timestamp_ms", true, Some(Type::Primitive(Long))),
        ("key", false, Some(Type::Primitive(Binary))),
    ];
    if with_value {
        top.push(("value", false, Some(Type::Primitive(Binary))));
    }
    top.push(("headers", true, None));
    top.push(("timestamp", true, Some(Type::Primitive(Timestamptz))));
    top.extend(
        extra.iter().map(|(name, required, field_type)| {
            (name.as_str(), *required, Some(field_type.clone()))
        }),
    );
    let element_id = top.len() as i32 + 1;
    let header = StructType::new(vec![
        NestedField::required(element_id + 1, "key", Type::Primitive(Text)).into(),
        NestedField::optional(element_id + 2, "value", Type::Primitive(Binary)).into(),
    ]);
    let headers = Type::List(ListType::new(
        NestedField::list_element(element_id, Type::Struct(header), true).into(),
    ));
    let fields = top
        .into_iter()
        .zip(1..)
        .map(|((name, required, field_type), id)| {
            let field_type = field_type.unwrap_or_else(|| headers.clone());
            Arc::new(if required {
                NestedField::required(id, name, field_type)
            } else {
                NestedField::optional(id, name, field_type)
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
            "write.parquet.compression-codec".to_owned(),
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

/// The Arrow schema (with Parquet field ids) data files of `schema` are written with.
pub fn arrow_schema(schema: &Schema) -> iceberg::Result<arrow_schema::SchemaRef> {
    Ok(Arc::new(iceberg::arrow::schema_to_arrow_schema(schema)?))
}

/// The Kafka metadata columns of a JSON table (and `value`, the raw table's); a payload
/// field of one of these names is stored as `value_<name>`.
pub const METADATA_COLUMNS: [&str; 9] = [
    "record_id",
    "value",
    "topic",
    "partition",
    "offset",
    "timestamp_ms",
    "key",
    "headers",
    "timestamp",
];

/// The column a top-level payload field is stored in.
pub fn column_name(field: &str) -> String {
    if METADATA_COLUMNS.contains(&field) || field.starts_with("value_") && is_renamed(field) {
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
        if METADATA_COLUMNS.contains(&inner) {
            return true;
        }
        rest = inner;
    }
    false
}

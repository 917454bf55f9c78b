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

use std::collections::HashMap;
use std::sync::Arc;

use std::str::FromStr;

use iceberg::spec::{
    ListType, NestedField, PrimitiveType, Schema, StructType, Transform, Type, UnboundPartitionSpec,
};
use kfs_plan::layout::PartitionField;

/// Table property recording the topic a table is fed from.
pub const TOPIC_PROPERTY: &str = "kfs.topic";

/// Field id of `partition` (the Kafka partition).
pub const PARTITION_FIELD_ID: i32 = 3;
/// Field id of `offset`.
pub const OFFSET_FIELD_ID: i32 = 4;
/// Field id of `timestamp_ms`, whose upper bounds give the newest record of a file.
pub const TIMESTAMP_MS_FIELD_ID: i32 = 5;

/// The schema of every topic table.
pub fn topic_schema() -> iceberg::Result<Schema> {
    let header = StructType::new(vec![
        NestedField::required(11, "key", Type::Primitive(PrimitiveType::String)).into(),
        NestedField::optional(12, "value", Type::Primitive(PrimitiveType::Binary)).into(),
    ]);
    Schema::builder()
        .with_fields(vec![
            NestedField::required(1, "record_id", Type::Primitive(PrimitiveType::String)).into(),
            NestedField::required(2, "topic", Type::Primitive(PrimitiveType::String)).into(),
            NestedField::required(
                PARTITION_FIELD_ID,
                "partition",
                Type::Primitive(PrimitiveType::Int),
            )
            .into(),
            NestedField::required(
                OFFSET_FIELD_ID,
                "offset",
                Type::Primitive(PrimitiveType::Long),
            )
            .into(),
            NestedField::required(
                TIMESTAMP_MS_FIELD_ID,
                "timestamp_ms",
                Type::Primitive(PrimitiveType::Long),
            )
            .into(),
            NestedField::optional(6, "key", Type::Primitive(PrimitiveType::Binary)).into(),
            NestedField::optional(7, "value", Type::Primitive(PrimitiveType::Binary)).into(),
            NestedField::required(
                8,
                "headers",
                Type::List(ListType::new(
                    NestedField::list_element(10, Type::Struct(header), true).into(),
                )),
            )
            .into(),
            NestedField::required(9, "timestamp", Type::Primitive(PrimitiveType::Timestamptz))
                .into(),
        ])
        .build()
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

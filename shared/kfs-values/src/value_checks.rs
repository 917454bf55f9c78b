//! Tests: registry values are never changed nor lost on their way to cells. A value
//! beyond its column's range, two fields sharing a column, or a property its JSON
//! Schema does not declare is an error naming the field and the reason (the record's
//! dead letter), for each value format.

use super::avro::AvroWriter;
use super::cells::{Cell, Shape, absorb, new_table_row, write_row};
use super::json_schema::JsonSchemaWriter;
use super::protobuf::{MessageSelector, ProtobufWriter};
use crate::registry::SchemaId;
use apache_avro::types::Value as Avro;
use iceberg::spec::PrimitiveType;

/// Decodes one Avro value of `schema` into a row of a new table of its shape, and
/// builds its Arrow columns.
fn avro_row(schema: &str, fields: Vec<(&str, Avro)>) -> Result<Cell, String> {
    let writer = AvroWriter::parse(schema, &[])?;
    let parsed = apache_avro::Schema::parse_str(schema).map_err(|e| e.to_string())?;
    let record = Avro::Record(
        fields
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value))
            .collect(),
    );
    let bytes = apache_avro::to_avro_datum(&parsed, record).map_err(|e| e.to_string())?;
    let (columns, row_type) = new_table_row(&writer.shape)?;
    let row = writer.decode(&bytes, &row_type, true)?;
    write_row(&columns, &row)?;
    Ok(row)
}

const AVRO: &str = r#"{"type": "record", "name": "R", "fields": [
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}},
    {"name": "at", "type": {"type": "long", "logicalType": "time-micros"}},
    {"name": "at_ms", "type": {"type": "int", "logicalType": "time-millis"}}
]}"#;

fn avro(price: &[u8], at: i64, at_ms: i32) -> Result<Cell, String> {
    avro_row(
        AVRO,
        vec![
            (
                "price",
                Avro::Decimal(apache_avro::Decimal::from(price.to_vec())),
            ),
            ("at", Avro::TimeMicros(at)),
            ("at_ms", Avro::TimeMillis(at_ms)),
        ],
    )
}

#[test]
fn avro_values_beyond_their_column_are_refused_never_changed() -> Result<(), String> {
    // In range: 99.99, the day's last microsecond and millisecond.
    let row = avro(&[0x27, 0x0F], 86_399_999_999, 86_399_999)?;
    assert_eq!(
        row,
        Cell::Struct(vec![
            Cell::Decimal(9_999),
            Cell::Int(86_399_999_999),
            Cell::Int(86_399_999_000)
        ])
    );
    // 42949674.19 (2^32 + 123 hundredths): was stored as 1.23.
    let overflow = avro(&[0x01, 0x00, 0x00, 0x00, 0x7B], 0, 0);
    assert!(
        overflow
            .as_ref()
            .is_err_and(|e| e.contains("field price") && e.contains("42949674.19")),
        "{overflow:?}"
    );
    // 100.00: one digit too many.
    assert!(avro(&[0x27, 0x10], 0, 0).is_err_and(|e| e.contains("decimal(4, 2)")));
    // A time before midnight or after the day: was left for the data file's writer
    // to refuse, with the whole segment.
    for (at, at_ms) in [(-1, 0), (86_400_000_000, 0), (0, -1), (0, 86_400_000)] {
        let refused = avro(&[0], at, at_ms);
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("field at") && e.contains("outside a day")),
            "{at} {at_ms}: {refused:?}"
        );
    }
    Ok(())
}

fn json_schema_row(schema: &str, value: &str) -> Result<Cell, String> {
    let writer = JsonSchemaWriter::parse(schema)?;
    let (columns, row_type) = new_table_row(&writer.shape)?;
    let row = writer.decode(value.as_bytes(), &row_type, true)?;
    write_row(&columns, &row)?;
    Ok(row)
}

#[test]
fn json_schema_floats_do_not_overflow_to_infinity() -> Result<(), String> {
    const SCHEMA: &str = r#"{"type": "object", "properties": {
        "f": {"type": "number", "format": "float"},
        "i": {"type": "integer", "format": "int32"}
    }}"#;
    let row = json_schema_row(SCHEMA, r#"{"f": 3.4028234e38, "i": -2147483648}"#)?;
    assert_eq!(
        row,
        Cell::Struct(vec![Cell::Float(3.4028234e38), Cell::Int(-2_147_483_648)])
    );
    for (value, field) in [
        (r#"{"f": 1e39}"#, "property f"),
        (r#"{"f": -3.5e38}"#, "property f"),
        (r#"{"i": 2147483648}"#, "property i"),
    ] {
        let refused = json_schema_row(SCHEMA, value);
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains(field) && e.contains("beyond")),
            "{value}: {refused:?}"
        );
    }
    Ok(())
}

const PROTO: &str = r#"syntax = "proto3";
    import "google/protobuf/timestamp.proto";
    message Event { google.protobuf.Timestamp at = 1; }"#;

/// A Confluent-framed `Event` (message index [0]) whose `at` has these parts.
fn protobuf_row(seconds: i64, nanos: i32) -> Result<Cell, String> {
    use prost::Message;
    use prost_reflect::Value;
    let writer = ProtobufWriter::parse(PROTO, &[])?;
    let selector = MessageSelector::Path(vec![0]);
    let event = writer.message(&selector)?;
    let mut at = prost_reflect::DynamicMessage::new(
        event
            .get_field_by_name("at")
            .and_then(|f| f.kind().as_message().cloned())
            .ok_or("no Timestamp")?,
    );
    at.set_field_by_name("seconds", Value::I64(seconds));
    at.set_field_by_name("nanos", Value::I32(nanos));
    let mut value = prost_reflect::DynamicMessage::new(event);
    value.set_field_by_name("at", Value::Message(at));
    let mut framed = vec![0];
    framed.extend(value.encode_to_vec());
    let (columns, row_type) = new_table_row(&writer.shape(&selector)?)?;
    let row = writer.decode(&SchemaId::Confluent(1), &framed, &row_type, true)?;
    write_row(&columns, &row)?;
    Ok(row)
}

#[test]
fn protobuf_timestamps_out_of_range_are_refused_never_another_instant() -> Result<(), String> {
    assert_eq!(
        protobuf_row(-1, 999_999_999)?,
        Cell::Struct(vec![Cell::Int(-1)])
    );
    // 2e9 nanos was stored as 2 s later; -1 nanos as the second itself.
    for nanos in [2_000_000_000, 1_000_000_000, -1] {
        let refused = protobuf_row(10, nanos);
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("field at") && e.contains("nanos")),
            "{nanos}: {refused:?}"
        );
    }
    assert!(protobuf_row(i64::MAX / 1000, 0).is_err_and(|e| e.contains("beyond")));
    Ok(())
}

#[test]
fn registry_fields_sharing_a_column_are_refused_as_json_fields_are() -> Result<(), String> {
    let p = |name: &str| (name.to_owned(), Shape::Primitive(PrimitiveType::Long));
    // One version naming two fields that map to one column.
    for (a, b) in [("a-b", "a_b"), ("a_b", "a.b"), ("a b", "a-b"), ("Id", "id")] {
        let refused = absorb(&[], &[p(a), p(b)], true, &mut 1);
        assert!(
            refused.as_ref().is_err_and(|e| e.contains(b)),
            "{a} {b}: {refused:?}"
        );
        // Nested in a struct alike.
        let nested = ("s".to_owned(), Shape::Struct(vec![p(a), p(b)]));
        assert!(absorb(&[], &[nested], true, &mut 1).is_err(), "{a} {b}");
    }
    // A later version naming another field for a column: refused, not merged.
    let mut next = 1;
    let v1 = absorb(&[], &[p("a-b")], true, &mut next)?.ok_or("v1 added nothing")?;
    let refused = absorb(&v1, &[p("a_b")], true, &mut next);
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.contains("holds another field")),
        "{refused:?}"
    );
    // The same field again fits as it is; so does a renamed metadata field, whose
    // column older versions recorded the name of.
    assert_eq!(absorb(&v1, &[p("a-b")], true, &mut next)?, None);
    let legacy = iceberg::spec::NestedField::optional(9, "value_offset", long())
        .with_doc(crate::layout::field_doc("offset"));
    assert_eq!(
        absorb(&[legacy.into()], &[p("offset")], true, &mut next)?,
        None
    );
    // JSON Schema properties whose names differ only by punctuation.
    let writer = JsonSchemaWriter::parse(
        r#"{"type": "object", "properties": {"a b": {"type": "integer"}, "a.b": {"type": "integer"}}}"#,
    )?;
    assert!(absorb(&[], &writer.shape, true, &mut 1).is_err());
    Ok(())
}

fn long() -> iceberg::spec::Type {
    iceberg::spec::Type::Primitive(PrimitiveType::Long)
}

#[test]
fn json_schema_values_with_undeclared_properties_are_refused() -> Result<(), String> {
    const SCHEMA: &str = r#"{"type": "object", "properties": {
        "a": {"type": "integer"},
        "s": {"type": "object", "properties": {"x": {"type": "string"}}},
        "l": {"type": "array", "items": {"type": "object", "properties": {"y": {"type": "integer"}}}},
        "m": {"type": "object", "additionalProperties": {"type": "integer"}},
        "n": {"type": "null"}
    }}"#;
    // Declared properties, a map's any keys, and undeclared ones that are null.
    json_schema_row(
        SCHEMA,
        r#"{"a": 1, "s": {"x": "x", "z": null}, "l": [{"y": 2}], "m": {"any": 3}, "n": null, "q": null}"#,
    )?;
    for (value, named) in [
        (r#"{"a": 1, "b": 2}"#, "\"b\""),
        (r#"{"s": {"x": "x", "z": 1}}"#, "\"s.z\""),
        (r#"{"l": [{"y": 1}, {"w": true}]}"#, "\"l[].w\""),
        (r#"{"n": 5}"#, "\"n\""),
        // Another spelling of a declared property's column.
        (r#"{"a": 1, "A": 2}"#, "\"A\""),
    ] {
        let refused = json_schema_row(SCHEMA, value);
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains(named) && e.contains("not declared")),
            "{value}: {refused:?}"
        );
    }
    Ok(())
}

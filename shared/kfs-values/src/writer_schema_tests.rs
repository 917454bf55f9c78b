//! Debezium change events in each registry format, read as a `cdc` table reads them:
//! the envelope's `after` image as the columns, its events as rows or deletes, and
//! what is no change event refused with the reason.

use super::*;
use crate::registry::{RegisteredSchema, SchemaKind};

const AVRO: &str = r#"{"type": "record", "name": "Envelope", "fields": [
  {"name": "before", "type": ["null", {"type": "record", "name": "Value", "fields": [
    {"name": "id", "type": "int"}, {"name": "email", "type": ["null", "string"]}]}], "default": null},
  {"name": "after", "type": ["null", "Value"], "default": null},
  {"name": "op", "type": "string"}]}"#;

const PROTO: &str = r#"syntax = "proto3";
    message Value { int32 id = 1; string email = 2; }
    message Envelope { Value before = 1; Value after = 2; string op = 3; }"#;

const JSON_SCHEMA: &str = r##"{"type": "object", "properties": {
  "before": {"oneOf": [{"type": "null"}, {"$ref": "#/definitions/Value"}]},
  "after": {"oneOf": [{"type": "null"}, {"$ref": "#/definitions/Value"}]},
  "op": {"type": "string"}},
  "definitions": {"Value": {"type": "object", "properties": {
    "id": {"type": "integer"}, "email": {"type": "string"}}}}}"##;

/// A change event of `op` with an `after` image of id 7 (none for a delete), framed
/// for schema id 1 in `kind`'s encoding.
fn event(kind: SchemaKind, op: &str) -> Vec<u8> {
    let mut framed = vec![0, 0, 0, 0, 1];
    let with_after = op != "d";
    match kind {
        SchemaKind::Avro => {
            use apache_avro::types::Value;
            let schema = apache_avro::Schema::parse_str(AVRO).unwrap_or_else(|e| panic!("{e}"));
            let after = match with_after {
                true => Value::Union(
                    1,
                    Box::new(Value::Record(vec![
                        ("id".into(), Value::Int(7)),
                        (
                            "email".into(),
                            Value::Union(1, Box::new(Value::String("a@x".into()))),
                        ),
                    ])),
                ),
                false => Value::Union(0, Box::new(Value::Null)),
            };
            let envelope = Value::Record(vec![
                ("before".into(), Value::Union(0, Box::new(Value::Null))),
                ("after".into(), after),
                ("op".into(), Value::String(op.into())),
            ]);
            framed.extend(
                apache_avro::to_avro_datum(&schema, envelope).unwrap_or_else(|e| panic!("{e}")),
            );
        }
        SchemaKind::Protobuf => {
            // The message-index list [1] (Envelope), then the message: field 2
            // (after: id 7, email "a@x"), field 3 (op).
            framed.extend([2, 2]);
            if with_after {
                framed.extend([0x12, 7, 0x08, 7, 0x12, 3, b'a', b'@', b'x']);
            }
            framed.extend([0x1a, op.len() as u8]);
            framed.extend(op.as_bytes());
        }
        SchemaKind::Json => {
            let after = match with_after {
                true => serde_json::json!({"id": 7, "email": "a@x"}),
                false => serde_json::Value::Null,
            };
            framed.extend(
                serde_json::json!({"before": null, "after": after, "op": op})
                    .to_string()
                    .into_bytes(),
            );
        }
    }
    framed
}

#[test]
fn debezium_events_in_every_registry_format_mirror_their_after_image() -> Result<(), String> {
    for (kind, text) in [
        (SchemaKind::Avro, AVRO),
        (SchemaKind::Protobuf, PROTO),
        (SchemaKind::Json, JSON_SCHEMA),
    ] {
        let writer = Arc::new(WriterSchema::parse(RegisteredSchema::new(kind, text))?);
        let id = SchemaId::Confluent(1);
        let mut named = NamedSchemas::default();
        named.note(&crate::registry::frame(&event(kind, "c"))?);
        let messages = named.into_named().pop().map(|(_, m)| m).unwrap_or_default();
        let shapes = writer.change_shapes(&messages)?;
        let [shape] = shapes.as_slice() else {
            return Err(format!("{kind:?}: {shapes:?}"));
        };
        // JSON Schema's properties come sorted by name, the others in their order.
        let expected: Vec<Cell> = shape
            .iter()
            .map(|(name, _)| match name.as_str() {
                "id" => Cell::Int(7),
                _ => Cell::Text("a@x".into()),
            })
            .collect();
        let mut names: Vec<&str> = shape.iter().map(|(name, _)| name.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, ["email", "id"], "{kind:?}");
        let (_, row) = crate::cells::new_table_row(shape)?;
        let writers = WriterSchemas::from([(id, Ok(writer))]);
        for op in ["c", "u", "r"] {
            let (changed, _) = decode_framed_change(&writers, &event(kind, op), &row)?;
            assert_eq!(
                changed.row,
                Some(Cell::Struct(expected.clone())),
                "{kind:?} {op}"
            );
        }
        let (deleted, _) = decode_framed_change(&writers, &event(kind, "d"), &row)?;
        assert_eq!(deleted.row, None, "{kind:?}");
        for (op, reason) in [("m", "op m"), ("t", "truncate"), ("x", "op")] {
            let refused = decode_framed_change(&writers, &event(kind, op), &row)
                .err()
                .unwrap_or_default();
            assert!(refused.contains(reason), "{kind:?} {op}: {refused}");
        }
    }
    Ok(())
}

#[test]
fn a_schema_that_is_no_envelope_has_no_change_columns() -> Result<(), String> {
    let row = r#"{"type": "record", "name": "Row", "fields": [{"name": "id", "type": "int"}]}"#;
    let writer = WriterSchema::parse(RegisteredSchema::new(SchemaKind::Avro, row))?;
    let refused = writer
        .change_shapes(&MessageLists::new())
        .err()
        .unwrap_or_default();
    assert!(refused.contains("no Debezium envelope"), "{refused}");
    Ok(())
}

#[test]
fn a_protobuf_message_that_is_no_envelope_refuses_only_its_values() -> Result<(), String> {
    let writer = Arc::new(WriterSchema::parse(RegisteredSchema::new(
        SchemaKind::Protobuf,
        PROTO,
    ))?);
    // The message-index list [0] (Value, a row without its envelope): id 7.
    let row = [0, 0, 0, 0, 1, 2, 0, 0x08, 7];
    let mut named = NamedSchemas::default();
    named.note(&crate::registry::frame(&event(SchemaKind::Protobuf, "c"))?);
    named.note(&crate::registry::frame(&row)?);
    let messages = named.into_named().pop().map(|(_, m)| m).unwrap_or_default();
    assert_eq!(messages.len(), 2);
    let shapes = writer.change_shapes(&messages)?;
    assert_eq!(shapes.len(), 1, "{shapes:?}");
    let (_, columns) = crate::cells::new_table_row(&shapes[0])?;
    let writers = WriterSchemas::from([(SchemaId::Confluent(1), Ok(writer))]);
    assert!(
        decode_framed_change(&writers, &event(SchemaKind::Protobuf, "u"), &columns)?
            .0
            .row
            .is_some()
    );
    let refused = decode_framed_change(&writers, &row, &columns)
        .err()
        .unwrap_or_default();
    assert!(refused.contains("no Debezium change event"), "{refused}");
    Ok(())
}

//! Fuzzes Debezium change events as a `cdc` table reads them: the first byte picks
//! the format (Avro, Protobuf or JSON Schema through the registry, or JSON as Kafka
//! Connect's JSON converter writes it), the rest is the event. Every input becomes a
//! row, a delete or a refusal with the reason; never a panic, never an allocation its
//! bytes do not justify.
#![no_main]

mod registry_common;

use kfs_core::SchemaKind;
use libfuzzer_sys::fuzz_target;

/// Debezium's Avro envelope, an `after` row of several mapped types.
const AVRO: &str = r#"{"type": "record", "name": "Envelope", "fields": [
    {"name": "before", "type": ["null", {"type": "record", "name": "Value", "fields": [
        {"name": "id", "type": "long"},
        {"name": "email", "type": ["null", "string"]},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}}]}]},
    {"name": "after", "type": ["null", "Value"]},
    {"name": "source", "type": {"type": "record", "name": "Source", "fields": [
        {"name": "lsn", "type": ["null", "long"]},
        {"name": "file", "type": ["null", "string"]},
        {"name": "pos", "type": ["null", "long"]}]}},
    {"name": "op", "type": "string"},
    {"name": "ts_ms", "type": ["null", "long"]}]}"#;

/// Debezium's envelope in Protobuf.
const PROTO: &str = r#"syntax = "proto3";
    message Value { int64 id = 1; string email = 2; repeated string tags = 3; map<string, double> attrs = 4; }
    message Source { optional int64 lsn = 1; optional string file = 2; optional int64 pos = 3; }
    message Envelope { Value before = 1; Value after = 2; Source source = 3; string op = 4; }"#;

/// Debezium's envelope in JSON Schema.
const JSON_SCHEMA: &str = r##"{"type": "object", "properties": {
    "before": {"oneOf": [{"type": "null"}, {"$ref": "#/definitions/Value"}]},
    "after": {"oneOf": [{"type": "null"}, {"$ref": "#/definitions/Value"}]},
    "op": {"type": "string"}},
    "definitions": {"Value": {"type": "object", "properties": {
        "id": {"type": "integer"}, "email": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}}}}}}"##;

type Writer = std::sync::OnceLock<std::sync::Arc<kfs_core::WriterSchema>>;
static AVRO_WRITER: Writer = std::sync::OnceLock::new();
static PROTO_WRITER: Writer = std::sync::OnceLock::new();
static JSON_SCHEMA_WRITER: Writer = std::sync::OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let Some((format, event)) = data.split_first() else {
        return;
    };
    let writer = match format % 4 {
        0 => registry_common::writer(&AVRO_WRITER, SchemaKind::Avro, AVRO),
        1 => registry_common::writer(&PROTO_WRITER, SchemaKind::Protobuf, PROTO),
        2 => registry_common::writer(&JSON_SCHEMA_WRITER, SchemaKind::Json, JSON_SCHEMA),
        _ => {
            let _ = kfs_values::json::parse_change(Some(event));
            return;
        }
    };
    registry_common::decode_change(writer, event);
});

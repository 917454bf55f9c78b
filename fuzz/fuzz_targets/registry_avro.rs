//! Fuzzes Avro values of a schema registry: any payload for a schema of every
//! mapped type (arrays and maps of longs, nulls and records among them) decodes into
//! columns or is refused; never a panic, never an allocation its bytes do not justify.
#![no_main]

mod registry_common;

use kfs_core::SchemaKind;
use libfuzzer_sys::fuzz_target;

const SCHEMA: &str = r#"{"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"},
    {"name": "note", "type": ["null", "string"]},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "longs", "type": {"type": "array", "items": "long"}},
    {"name": "nulls", "type": {"type": "array", "items": "null"}},
    {"name": "attrs", "type": {"type": "map", "values": "double"}},
    {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "raw", "type": {"type": "fixed", "name": "F", "size": 4}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "kind", "type": {"type": "enum", "name": "K", "symbols": ["A", "B"]}},
    {"name": "ships", "type": {"type": "array", "items": {"type": "record", "name": "Ship", "fields": [
        {"name": "city", "type": "string"}, {"name": "none", "type": "null"}]}}},
    {"name": "back", "type": ["null", "Ship"]}
]}"#;

static WRITER: std::sync::OnceLock<std::sync::Arc<kfs_core::WriterSchema>> =
    std::sync::OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let writer = registry_common::writer(&WRITER, SchemaKind::Avro, SCHEMA);
    registry_common::decode(writer, data);
});

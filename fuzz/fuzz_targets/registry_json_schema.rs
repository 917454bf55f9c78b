//! Fuzzes JSON values of a schema registry (JSON Schema): any payload for a schema
//! of objects, arrays, maps and `$ref`s decodes into columns or is refused; never a
//! panic, never a nesting or an allocation its bytes do not justify.
#![no_main]

mod registry_common;

use kfs_core::SchemaKind;
use libfuzzer_sys::fuzz_target;

const SCHEMA: &str = r##"{"type": "object", "properties": {
    "id": {"type": "integer"},
    "small": {"type": "integer", "format": "int32"},
    "note": {"type": ["string", "null"]},
    "amount": {"oneOf": [{"type": "null"}, {"type": "number"}]},
    "tags": {"type": "array", "items": {"type": "string"}},
    "grid": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
    "attrs": {"type": "object", "additionalProperties": {"type": "integer"}},
    "ship": {"$ref": "#/definitions/Ship"},
    "kind": {"enum": ["A", "B"]}
}, "definitions": {"Ship": {"type": "object", "properties": {"city": {"type": "string"}}}}}"##;

static WRITER: std::sync::OnceLock<std::sync::Arc<kfs_core::WriterSchema>> =
    std::sync::OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let writer = registry_common::writer(&WRITER, SchemaKind::Json, SCHEMA);
    registry_common::decode(writer, data);
});

//! What the registry value targets share: a writer schema parsed once, and any bytes
//! decoded as the payload of a value framed for it (Confluent's framing, schema id 1):
//! no input may panic or exceed the fuzzer's memory limit; a value either becomes
//! Arrow columns or is refused with the reason.

use kfs_core::testing::{registry_change_columns, registry_columns};
use kfs_core::{RegisteredSchema, SchemaId, SchemaKind, WriterSchema};
use std::sync::{Arc, OnceLock};

/// The writer schema `text` of `kind`, parsed once per process.
pub fn writer(
    cell: &'static OnceLock<Arc<WriterSchema>>,
    kind: SchemaKind,
    text: &str,
) -> &'static Arc<WriterSchema> {
    cell.get_or_init(|| {
        let parsed = WriterSchema::parse(RegisteredSchema::new(kind, text));
        Arc::new(parsed.unwrap_or_else(|e| panic!("the target's schema: {e}")))
    })
}

/// Decodes `payload` as one value framed for `writer`.
#[allow(dead_code)]
pub fn decode(writer: &Arc<WriterSchema>, payload: &[u8]) {
    let mut value = vec![0, 0, 0, 0, 1];
    value.extend_from_slice(payload);
    let _ = registry_columns(writer, SchemaId::Confluent(1), &[&value]);
}

/// Decodes `payload` as one Debezium change event framed for `writer`, as a `cdc`
/// table reads it.
#[allow(dead_code)]
pub fn decode_change(writer: &Arc<WriterSchema>, payload: &[u8]) {
    let mut value = vec![0, 0, 0, 0, 1];
    value.extend_from_slice(payload);
    let _ = registry_change_columns(writer, SchemaId::Confluent(1), &[&value]);
}

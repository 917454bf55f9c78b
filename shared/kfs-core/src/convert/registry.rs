//! Values encoded against a schema registry (`--value-format registry`), Avro
//! (`convert::avro`), Protobuf (`convert::protobuf`) or JSON Schema
//! (`convert::json_schema`): each value's
//! framing names its writer schema, resolved before the segment is converted
//! ([`WriterSchemas`]); a value that decodes becomes a row of the table's payload
//! columns, any other record a dead letter with the reason (no framing, an unknown
//! schema id, a schema the table cannot absorb, a payload that does not decode).

use super::avro::AvroWriter;
use super::cells::{Cell, NULL, Shape, column};
use super::json_schema::JsonSchemaWriter;
use super::protobuf::{MessageSelector, ProtobufWriter};
use super::route::{DeadLetterColumns, PushError, RecordRouter, Routed, dead_letter, flushed};
use super::{ROWS_PER_BATCH, RecordColumns};
use crate::registry::SchemaId;
use crate::table::arrow_schema;
use arrow_array::ArrayRef;
use arrow_schema::{DataType, Fields};
use iceberg::table::Table;
use kfs_segment::Record;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// A writer schema the registry holds, parsed.
#[derive(Debug)]
pub enum WriterSchema {
    /// An Avro schema.
    Avro(AvroWriter),
    /// A JSON Schema (the values are JSON text).
    JsonSchema(JsonSchemaWriter),
    /// A Protobuf schema (a `.proto` file; its values name one of its messages).
    Protobuf(ProtobufWriter),
}

impl WriterSchema {
    /// Parses a registered schema; `Err` says why its records cannot be read.
    pub fn parse(schema: crate::registry::RegisteredSchema) -> Result<Self, String> {
        use crate::registry::SchemaKind;
        match schema.kind {
            SchemaKind::Avro => AvroWriter::parse(&schema.text, &schema.references).map(Self::Avro),
            SchemaKind::Json => JsonSchemaWriter::parse(&schema.text).map(Self::JsonSchema),
            SchemaKind::Protobuf => {
                ProtobufWriter::parse(&schema.text, &schema.references).map(Self::Protobuf)
            }
        }
    }

    /// The top-level fields of its values as columns: one form for Avro and JSON
    /// Schema, one per message the values name for Protobuf (`messages`: what a
    /// segment's values start with; one naming no message is left out, its values
    /// are dead letters when decoded).
    pub fn shapes(&self, messages: &MessageLists) -> Result<Vec<Vec<(String, Shape)>>, String> {
        match self {
            Self::Avro(avro) => Ok(vec![avro.shape.clone()]),
            Self::JsonSchema(json) => Ok(vec![json.shape.clone()]),
            Self::Protobuf(protobuf) => messages
                .iter()
                .filter(|selector| protobuf.message(selector).is_ok())
                .map(|selector| protobuf.shape(selector))
                .collect(),
        }
    }

    fn decode(&self, id: &SchemaId, payload: &[u8], columns: &DataType) -> Result<Cell, String> {
        match self {
            Self::Avro(avro) => avro.decode(payload, columns),
            Self::JsonSchema(json) => json.decode(payload, columns),
            Self::Protobuf(protobuf) => protobuf.decode(id, payload, columns),
        }
    }
}

/// The Protobuf messages a segment's values framed with one schema name, were it a
/// Protobuf schema (at most [`MAX_MESSAGE_LISTS`]; ignored for the other kinds).
pub type MessageLists = BTreeSet<MessageSelector>;

/// Most message selectors kept per schema while scanning a segment: a producer
/// names one message per topic; values naming others still decode or are dead
/// letters with the reason, never lose a field.
pub const MAX_MESSAGE_LISTS: usize = 16;

/// The schemas a segment's values name, with the Protobuf messages they name.
pub type NamedSchemas = BTreeMap<SchemaId, MessageLists>;

/// Writer schemas by id, fetched from the registry once and parsed once for the
/// process.
pub type RegistrySchemas = crate::registry::SchemaCache<WriterSchema>;

/// The writer schemas of a segment's values by id: parsed and absorbed by the table,
/// or why their records are dead letters.
pub type WriterSchemas = HashMap<SchemaId, Result<Arc<WriterSchema>, String>>;

/// Registry-encoded values: rows of the payload columns, or dead letters.
pub(crate) struct RegistryRouter {
    table: RecordColumns,
    payload: Fields,
    payload_type: DataType,
    rows: Vec<Cell>,
    value_bytes: usize,
    writers: WriterSchemas,
    dead: Option<DeadLetterColumns>,
}

impl RegistryRouter {
    pub(crate) fn new(
        table: &Table,
        writers: WriterSchemas,
        dead_letters: Option<&Table>,
        segment: String,
    ) -> iceberg::Result<Self> {
        let arrow = arrow_schema(table.metadata().current_schema())?;
        let payload: Fields = arrow
            .fields()
            .iter()
            .filter(|f| !crate::table::METADATA_COLUMNS.contains(&f.name().as_str()))
            .cloned()
            .collect();
        Ok(Self {
            payload_type: DataType::Struct(payload.clone()),
            payload,
            table: RecordColumns::new(arrow)?,
            rows: Vec::with_capacity(ROWS_PER_BATCH),
            value_bytes: 0,
            writers,
            dead: dead_letters
                .map(|dlq| DeadLetterColumns::new(dlq, segment))
                .transpose()?,
        })
    }

    /// The row of `value`, or why it has none.
    fn row(&self, value: Option<&[u8]>) -> Result<Cell, String> {
        let Some(value) = value else {
            // A tombstone: its payload columns are null.
            return Ok(Cell::Struct(vec![Cell::Null; self.payload.len()]));
        };
        let framed = crate::registry::frame(value)?;
        let id = framed.id;
        match self.writers.get(&id) {
            Some(Ok(writer)) => writer
                .decode(&id, &framed.payload, &self.payload_type)
                .map_err(|e| format!("schema {id}: {e}")),
            Some(Err(why)) => Err(why.clone()),
            None => Err(format!("schema {id} was not resolved before conversion")),
        }
    }
}

impl RecordRouter for RegistryRouter {
    fn push(&mut self, topic: &str, partition: i32, record: &Record<'_>) -> Result<(), PushError> {
        match self.row(record.value) {
            Ok(row) => {
                self.table.push(topic, partition, record)?;
                self.rows.push(row);
                // Decoded values take a few times their encoded bytes.
                self.value_bytes += 4 * record.value.map_or(0, <[u8]>::len);
                Ok(())
            }
            Err(reason) => dead_letter(self.dead.as_mut(), (topic, partition), record, &reason),
        }
    }

    fn rows(&self) -> usize {
        self.table.rows() + self.dead.as_ref().map_or(0, DeadLetterColumns::rows)
    }

    fn bytes(&self) -> usize {
        self.table.bytes()
            + self.value_bytes
            + self.dead.as_ref().map_or(0, DeadLetterColumns::bytes)
    }

    fn flush(&mut self) -> iceberg::Result<Vec<Routed>> {
        flushed(
            &mut self.table,
            || {
                let rows = std::mem::take(&mut self.rows);
                self.value_bytes = 0;
                let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.payload.len());
                for (i, field) in self.payload.iter().enumerate() {
                    let cells: Vec<&Cell> = rows
                        .iter()
                        .map(|row| match row {
                            Cell::Struct(values) => values.get(i).unwrap_or(&NULL),
                            _ => &NULL,
                        })
                        .collect();
                    columns.push(column(field.data_type(), &cells)?);
                }
                Ok(columns)
            },
            self.dead.as_mut(),
        )
    }

    fn dead_letters(&self) -> u64 {
        self.dead.as_ref().map_or(0, DeadLetterColumns::count)
    }
}

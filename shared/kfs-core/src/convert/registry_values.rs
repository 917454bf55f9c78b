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
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// A writer schema the registry holds, parsed.
#[derive(Debug)]
pub enum WriterSchema {
    /// An Avro schema.
    Avro(Box<AvroWriter>),
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
            SchemaKind::Avro => AvroWriter::parse(&schema.text, &schema.references)
                .map(|avro| Self::Avro(Box::new(avro))),
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
    /// Fields whose form is an empty struct (an empty record or message, or lists and
    /// maps of them) are left out: Parquet has no empty struct, and such a column
    /// would fail every data file of the table. Their values hold no field (a
    /// Protobuf value setting one is a dead letter, as for any field without a
    /// column).
    pub fn shapes(&self, messages: &MessageLists) -> Result<Vec<Vec<(String, Shape)>>, String> {
        let shapes = match self {
            Self::Avro(avro) => vec![avro.shape.clone()],
            Self::JsonSchema(json) => vec![json.shape.clone()],
            Self::Protobuf(protobuf) => messages
                .iter()
                .filter(|selector| protobuf.message(selector).is_ok())
                .map(|selector| protobuf.shape(selector))
                .collect::<Result<_, _>>()?,
        };
        Ok(shapes.into_iter().map(storable_fields).collect())
    }

    /// Decodes a payload into a cell of `columns` (`top`: the table's payload
    /// columns; else the fields of a struct column, a decoded key's), with the items
    /// it holds; a payload beyond the bounds of `convert::bounds` is refused before
    /// anything it declares is allocated.
    pub fn decode(
        &self,
        id: &SchemaId,
        payload: &[u8],
        (columns, top): (&DataType, bool),
    ) -> Result<(Cell, u64), String> {
        match self {
            Self::Avro(avro) => avro.decode_counted(payload, columns, top),
            Self::JsonSchema(json) => json.decode_counted(payload, columns, top),
            Self::Protobuf(protobuf) => protobuf.decode_counted(id, payload, (columns, top)),
        }
    }
}

/// `fields` without those whose form holds no column (`WriterSchema::shapes`).
fn storable_fields(fields: Vec<(String, Shape)>) -> Vec<(String, Shape)> {
    fields
        .into_iter()
        .filter_map(|(name, shape)| Some((name, storable(shape)?)))
        .collect()
}

/// `shape` without its empty structs; `None` when nothing is left of it.
fn storable(shape: Shape) -> Option<Shape> {
    match shape {
        Shape::Primitive(_) => Some(shape),
        Shape::Struct(fields) => {
            let fields = storable_fields(fields);
            (!fields.is_empty()).then_some(Shape::Struct(fields))
        }
        Shape::List(item) => storable(*item).map(|item| Shape::List(Box::new(item))),
        Shape::Map(value) => storable(*value).map(|value| Shape::Map(Box::new(value))),
    }
}

/// The Protobuf messages a segment's values framed with one schema name, were it a
/// Protobuf schema (at most [`MAX_MESSAGE_LISTS`]; ignored for the other kinds).
pub type MessageLists = BTreeSet<MessageSelector>;

/// Bytes of a compressed payload a scan inflates: room for the longest message-index
/// list (32 varints of at most 10 bytes, and its count).
pub const SCANNED_BYTES: u64 = 512;

/// Most message selectors kept per schema while scanning a segment: a producer
/// names one message per topic; values naming others still decode or are dead
/// letters with the reason, never lose a field.
pub const MAX_MESSAGE_LISTS: usize = 16;

/// Most distinct schemas a segment's values (and, apart, its keys) may name: the
/// first this many are looked up in the registry; records naming others are dead
/// letters with the reason. A producer names a few per topic; a hostile one naming
/// thousands must not make a lookup each (each a request, and a schema absorbed).
pub const MAX_SCHEMAS_PER_SEGMENT: usize = 100;

/// The schemas a segment's values (or keys) name, in the order they first appear
/// (the order they are absorbed in: the table's columns never depend on how ids
/// sort, Glue's being random), with the Protobuf messages they name; at most
/// [`MAX_SCHEMAS_PER_SEGMENT`].
#[derive(Debug, Default)]
pub struct NamedSchemas {
    named: Vec<(SchemaId, MessageLists)>,
    at: HashMap<SchemaId, usize>,
}

impl NamedSchemas {
    /// Notes the schema a framed value names, and the message it would name (unless
    /// the segment has named [`MAX_SCHEMAS_PER_SEGMENT`] others).
    pub fn note(&mut self, framed: &crate::registry::Framed<'_>) {
        if self.named.len() >= MAX_SCHEMAS_PER_SEGMENT && !self.at.contains_key(&framed.id) {
            return;
        }
        let at = *self.at.entry(framed.id).or_insert_with(|| {
            self.named.push((framed.id, MessageLists::new()));
            self.named.len() - 1
        });
        let lists = &mut self.named[at].1;
        if lists.len() < MAX_MESSAGE_LISTS
            && let Ok((selector, _)) =
                super::protobuf::message_selector(&framed.id, &framed.payload)
        {
            lists.insert(selector);
        }
    }

    /// The schemas in the order they first appear, with their messages.
    pub fn into_named(self) -> Vec<(SchemaId, MessageLists)> {
        self.named
    }
}

/// Writer schemas by id, fetched from the registry once and parsed once for the
/// process.
pub type RegistrySchemas = crate::registry::SchemaCache<WriterSchema>;

/// The writer schemas of a segment's values by id: parsed and absorbed by the table,
/// or why their records are dead letters.
pub type WriterSchemas = HashMap<SchemaId, Result<Arc<WriterSchema>, String>>;

/// Registry-encoded values (and keys): rows of the payload columns, or dead letters.
pub(crate) struct RegistryRouter {
    table: RecordColumns,
    payload: Fields,
    payload_type: DataType,
    rows: Vec<Cell>,
    value_bytes: usize,
    writers: WriterSchemas,
    /// The writer schemas of keys, when keys are decoded.
    key_writers: Option<WriterSchemas>,
    /// The table's `key_fields` column, when keys are decoded: its type, and a cell
    /// per row.
    key_column: Option<(DataType, Vec<Cell>)>,
    /// The columns besides the record's, in the table's order: a payload column (by
    /// its index in `payload`), or `None` for `key_fields`.
    order: Vec<Option<usize>>,
    dead: Option<DeadLetterColumns>,
}

impl RegistryRouter {
    pub(crate) fn new(
        table: &Table,
        (writers, key_writers): (WriterSchemas, Option<WriterSchemas>),
        dead_letters: Option<&Table>,
        segment: String,
    ) -> iceberg::Result<Self> {
        let arrow = arrow_schema(table.metadata().current_schema())?;
        let keys = key_writers.is_some();
        let mut payload = Vec::new();
        let mut order = Vec::new();
        let mut key_column = None;
        for field in arrow.fields() {
            let name = field.name().as_str();
            if crate::table::METADATA_COLUMNS.contains(&name) {
                continue;
            }
            if keys && name == crate::table::KEY_FIELDS_COLUMN {
                key_column = Some((field.data_type().clone(), Vec::new()));
                order.push(None);
            } else {
                order.push(Some(payload.len()));
                payload.push(field.clone());
            }
        }
        let payload = Fields::from(payload);
        Ok(Self {
            order,
            payload_type: DataType::Struct(payload.clone()),
            payload,
            table: RecordColumns::new(arrow)?,
            rows: Vec::with_capacity(ROWS_PER_BATCH),
            value_bytes: 0,
            writers,
            key_writers,
            key_column,
            dead: dead_letters
                .map(|dlq| DeadLetterColumns::new(dlq, segment))
                .transpose()?,
        })
    }

    /// The row of `value` and the bytes of its payload, or why it has none.
    fn row(&self, value: Option<&[u8]>) -> Result<(Cell, usize), String> {
        let Some(value) = value else {
            // A tombstone: its payload columns are null.
            return Ok((Cell::Struct(vec![Cell::Null; self.payload.len()]), 0));
        };
        decode(&self.writers, value, (&self.payload_type, true))
    }

    /// The `key_fields` cell of `key` (null when keys are not decoded, or the key is
    /// null) and the bytes of its payload, or why the record has none.
    fn key_cell(&self, key: Option<&[u8]>) -> Result<(Cell, usize), String> {
        match (&self.key_writers, &self.key_column, key) {
            (Some(writers), Some((key_type, _)), Some(key)) => {
                decode(writers, key, (key_type, false)).map_err(|e| format!("key: {e}"))
            }
            // A key with no column yet: its schema was refused (the writers say why).
            (Some(writers), None, Some(key)) => {
                let id = crate::registry::frame(key)
                    .map_err(|e| format!("key: {e}"))?
                    .id;
                Err(match writers.get(&id) {
                    Some(Err(why)) => format!("key: {why}"),
                    _ => format!("key: schema {id}: the table has no key_fields column"),
                })
            }
            _ => Ok((Cell::Null, 0)),
        }
    }
}

/// Decodes `values`, framed for `writer` (the schema `id`), into the Arrow columns of
/// `writer`'s table form, as a registry table's conversion does: the decoding and
/// column building of the converter without the segment and the Parquet writer
/// (benchmarks). A value that does not decode is an error.
#[cfg(feature = "test-support")]
pub fn registry_columns(
    writer: &Arc<WriterSchema>,
    id: SchemaId,
    values: &[&[u8]],
) -> Result<Vec<ArrayRef>, String> {
    let mut writers = WriterSchemas::new();
    writers.insert(id, Ok(writer.clone()));
    let mut named = NamedSchemas::default();
    for value in values.iter().take(1) {
        named.note(&crate::registry::frame(value)?);
    }
    let messages = named.into_named().pop().map(|(_, m)| m).unwrap_or_default();
    let shape = writer.shapes(&messages)?.pop().unwrap_or_default();
    let (fields, row_type) = super::cells::new_table_row(&shape)?;
    let rows: Vec<Cell> = values
        .iter()
        .map(|value| decode(&writers, value, (&row_type, true)).map(|(cell, _)| cell))
        .collect::<Result<_, _>>()?;
    fields
        .iter()
        .enumerate()
        .map(|(i, field)| row_column(&rows, i, field.data_type()).map_err(|e| e.to_string()))
        .collect()
}

/// The Arrow column of type `data_type` of the `i`th field of each of `rows`.
fn row_column(
    rows: &[Cell],
    i: usize,
    data_type: &DataType,
) -> Result<ArrayRef, arrow_schema::ArrowError> {
    let cells: Vec<&Cell> = rows
        .iter()
        .map(|row| match row {
            Cell::Struct(values) => values.get(i).unwrap_or(&NULL),
            _ => &NULL,
        })
        .collect();
    column(data_type, &cells)
}

/// A framed value (or key) decoded with the writer schema it names into a cell of
/// `columns` (`top`: the table's payload columns), with the bytes its decoded form is
/// counted for while its row waits for its batch: a few times its payload's
/// (inflated, when it was compressed) and its items' (`bounds::ITEM_BYTES` each); or
/// why not.
fn decode(
    writers: &WriterSchemas,
    value: &[u8],
    columns: (&DataType, bool),
) -> Result<(Cell, usize), String> {
    let framed = crate::registry::frame(value)?;
    let id = framed.id;
    match writers.get(&id) {
        Some(Ok(writer)) => writer
            .decode(&id, &framed.payload, columns)
            .map(|(cell, items)| {
                let items = usize::try_from(items).unwrap_or(usize::MAX);
                let decoded = items.saturating_mul(super::bounds::ITEM_BYTES);
                (
                    cell,
                    framed
                        .payload
                        .len()
                        .saturating_mul(4)
                        .saturating_add(decoded),
                )
            })
            .map_err(|e| format!("schema {id}: {e}")),
        Some(Err(why)) => Err(why.clone()),
        // The scan notes the first schemas only.
        None => Err(format!(
            "schema {id} was not looked up: the segment names more than {MAX_SCHEMAS_PER_SEGMENT} distinct schemas, the most one segment's records may name"
        )),
    }
}

impl RecordRouter for RegistryRouter {
    fn push(&mut self, topic: &str, partition: i32, record: &Record<'_>) -> Result<(), PushError> {
        match self
            .row(record.value)
            .and_then(|row| Ok((row, self.key_cell(record.key)?)))
        {
            Ok(((row, value_bytes), (key, key_bytes))) => {
                self.table.push(topic, partition, record)?;
                self.rows.push(row);
                if let Some((_, keys)) = &mut self.key_column {
                    keys.push(key);
                }
                // Decoded values take a few times their payload's bytes (inflated: a
                // compressed Glue value counts as what it holds) and a few dozen per
                // item (`decode`), so a batch is flushed before they add up.
                self.value_bytes = self
                    .value_bytes
                    .saturating_add(value_bytes.saturating_add(key_bytes));
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
                let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.order.len());
                for slot in &self.order {
                    columns.push(match (slot, &mut self.key_column) {
                        (Some(i), _) => {
                            let field = self.payload.get(*i).ok_or_else(|| {
                                iceberg::Error::new(
                                    iceberg::ErrorKind::Unexpected,
                                    "a payload column out of range",
                                )
                            })?;
                            row_column(&rows, *i, field.data_type())?
                        }
                        (None, Some((key_type, keys))) => {
                            let keys = std::mem::take(keys);
                            column(key_type, &keys.iter().collect::<Vec<_>>())?
                        }
                        (None, None) => {
                            return Err(iceberg::Error::new(
                                iceberg::ErrorKind::Unexpected,
                                "the key_fields column without its keys",
                            ));
                        }
                    });
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

//! The writer schemas of registry-encoded values: Avro ([`crate::avro`]), Protobuf
//! ([`crate::protobuf`]) or JSON Schema ([`crate::json_schema`]), parsed once, their
//! fields as columns, and a framed value decoded into a cell of the table's columns.

use crate::avro::AvroWriter;
use crate::cells::{Cell, NULL, Shape, column};
use crate::json_schema::JsonSchemaWriter;
use crate::protobuf::{MessageSelector, ProtobufWriter};
use crate::registry::SchemaId;
use arrow_array::ArrayRef;
use arrow_schema::DataType;
use kfs_plan::changes::ChangedRow;
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

    /// The columns of a `cdc` table its values give: [`Self::shapes`] of the Debezium
    /// envelopes, each its `after` image's fields. A Protobuf message the segment's
    /// values name that is no envelope is left out (its values are dead letters when
    /// decoded); `Err` when none is an envelope (no `after` record).
    pub fn change_shapes(
        &self,
        messages: &MessageLists,
    ) -> Result<Vec<Vec<(String, Shape)>>, String> {
        let after = |envelope: Vec<(String, Shape)>| {
            envelope
                .into_iter()
                .find_map(|(name, shape)| match (name == "after", shape) {
                    (true, Shape::Struct(fields)) => Some(fields),
                    _ => None,
                })
        };
        let shapes: Vec<_> = self
            .shapes(messages)?
            .into_iter()
            .filter_map(after)
            .collect();
        if shapes.is_empty() {
            return Err(
                "the schema is no Debezium envelope: it has no \"after\" record (table mode cdc reads change events)".to_owned(),
            );
        }
        Ok(shapes)
    }

    /// Decodes a payload, a Debezium change event, into the row of the table's
    /// payload `columns` its `after` image gives (`None`: the event deletes its key)
    /// and its source position, with the items it holds; a message or truncate event, or a value that is no
    /// envelope, is refused with the reason.
    pub fn decode_change(
        &self,
        id: &SchemaId,
        payload: &[u8],
        columns: &DataType,
    ) -> Result<(ChangedRow<Cell>, u64), String> {
        match self {
            Self::Avro(avro) => avro.decode_change(payload, columns),
            Self::JsonSchema(json) => json.decode_change(payload, columns),
            Self::Protobuf(protobuf) => protobuf.decode_change(id, payload, columns),
        }
    }

    /// Decodes a payload into a cell of `columns` (`top`: the table's payload
    /// columns; else the fields of a struct column, a decoded key's), with the items
    /// it holds; a payload beyond the bounds of `crate::bounds` is refused before
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
                crate::protobuf::message_selector(&framed.id, &framed.payload)
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

/// Decodes `values`, framed for `writer` (the schema `id`), into the Arrow columns of
/// `writer`'s table form, as a registry table's conversion does: the decoding and
/// column building of the converter without the segment and the Parquet writer
/// (benchmarks, fuzzing). A value that does not decode is an error.
pub fn registry_columns(
    writer: &Arc<WriterSchema>,
    id: SchemaId,
    values: &[&[u8]],
) -> Result<Vec<ArrayRef>, String> {
    columns_of(writer, id, values, false)
}

/// [`registry_columns`] for a `cdc` table: `values` are Debezium change events, their
/// `after` images the rows (a delete's row null).
pub fn registry_change_columns(
    writer: &Arc<WriterSchema>,
    id: SchemaId,
    values: &[&[u8]],
) -> Result<Vec<ArrayRef>, String> {
    columns_of(writer, id, values, true)
}

/// The columns of `values` as a registry table reads them (`changes`: a `cdc` table).
fn columns_of(
    writer: &Arc<WriterSchema>,
    id: SchemaId,
    values: &[&[u8]],
    changes: bool,
) -> Result<Vec<ArrayRef>, String> {
    let mut writers = WriterSchemas::new();
    writers.insert(id, Ok(writer.clone()));
    let mut named = NamedSchemas::default();
    for value in values.iter().take(1) {
        named.note(&crate::registry::frame(value)?);
    }
    let messages = named.into_named().pop().map(|(_, m)| m).unwrap_or_default();
    let shapes = match changes {
        true => writer.change_shapes(&messages)?,
        false => writer.shapes(&messages)?,
    };
    let shape = shapes.into_iter().next_back().unwrap_or_default();
    let (fields, row_type) = crate::cells::new_table_row(&shape)?;
    let rows: Vec<Cell> = values
        .iter()
        .map(|value| match changes {
            true => decode_framed_change(&writers, value, &row_type)
                .map(|(changed, _)| changed.row.unwrap_or(Cell::Null)),
            false => decode_framed(&writers, value, (&row_type, true)).map(|(cell, _)| cell),
        })
        .collect::<Result<_, _>>()?;
    fields
        .iter()
        .enumerate()
        .map(|(i, field)| row_column(&rows, i, field.data_type()).map_err(|e| e.to_string()))
        .collect()
}

/// The Arrow column of type `data_type` of the `i`th field of each of `rows`.
pub fn row_column(
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
/// counted for while its row waits for its batch (a few times its payload's); or why not.
pub fn decode_framed(
    writers: &WriterSchemas,
    value: &[u8],
    (columns, top): (&DataType, bool),
) -> Result<(Cell, usize), String> {
    framed(writers, value, |writer, id, payload| {
        writer.decode(id, payload, (columns, top))
    })
}

/// A framed Debezium change event decoded with the writer schema it names into the
/// row of the table's payload `columns` its `after` image gives (`None`: a delete)
/// and its source position, with the bytes counted for it as for any value; or why
/// not.
pub fn decode_framed_change(
    writers: &WriterSchemas,
    value: &[u8],
    columns: &DataType,
) -> Result<(ChangedRow<Cell>, usize), String> {
    framed(writers, value, |writer, id, payload| {
        writer.decode_change(id, payload, columns)
    })
}

/// A framed value decoded by `decode` with the writer schema it names, with the bytes
/// its decoded form is counted for while its row waits for its batch: a few times its
/// payload's (inflated, when it was compressed) and its items' (`bounds::ITEM_BYTES`
/// each); or why not.
fn framed<T>(
    writers: &WriterSchemas,
    value: &[u8],
    decode: impl FnOnce(&WriterSchema, &SchemaId, &[u8]) -> Result<(T, u64), String>,
) -> Result<(T, usize), String> {
    let framed = crate::registry::frame(value)?;
    let id = framed.id;
    match writers.get(&id) {
        Some(Ok(writer)) => decode(writer, &id, &framed.payload)
            .map(|(decoded, items)| {
                let items = usize::try_from(items).unwrap_or(usize::MAX);
                let counted = items.saturating_mul(crate::bounds::ITEM_BYTES);
                (
                    decoded,
                    framed
                        .payload
                        .len()
                        .saturating_mul(4)
                        .saturating_add(counted),
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

#[cfg(test)]
#[path = "writer_schema_tests.rs"]
mod tests;

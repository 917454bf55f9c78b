//! Protobuf values of a schema registry, as pure logic: a registered `.proto` schema
//! (with the files it imports through registry references, and Google's well-known
//! types) compiled by `protox`, the message a value names ([`MessageSelector`]: a
//! Confluent message-index list, or an AWS Glue message index), its table form
//! ([`Shape`]), and each decoded value (`prost-reflect`) as [`Cell`]s of the table's
//! columns.
//!
//! | Protobuf | Iceberg |
//! |---|---|
//! | `bool`, `string`, `bytes`, `float`, `double` | same |
//! | `int32`, `sint32`, `sfixed32` | int |
//! | `int64`, `sint64`, `sfixed64`, `uint32`, `fixed32` | long |
//! | `uint64`, `fixed64` | long (a value beyond a long is a dead letter, never wrapped) |
//! | `enum` | string (the symbol; an unknown number as its digits) |
//! | message | struct (fields by name) |
//! | `repeated` | list |
//! | `map<K, V>` | map with string keys (integer and boolean keys as text) |
//! | `oneof` | each member its own column, null unless it is the one set |
//! | `google.protobuf.Timestamp` | timestamptz (µs: nanos below a microsecond are dropped; nanos outside `[0, 999 999 999]` are a dead letter) |
//! | `google.protobuf.*Value` wrappers | the wrapped type, null when unset |
//!
//! Presence follows the schema, as Kafka Connect's converter reads it: a proto3 scalar
//! without `optional` reads as its default (0, "", false) when unset; an `optional`
//! or proto2 scalar, a wrapper, a message and an unset `oneof` member are null.
//!
//! Not mapped (the writer schema's records go to the dead-letter table with the
//! reason): recursive messages (`google.protobuf.Struct` among them), and imports
//! that are neither registry references nor Google's well-known types.

mod bounds;
pub mod debezium;

use crate::bounds::ShapeBudget;
use crate::cells::{Cell, Shape, list_cell, map_cell, struct_cell};
use crate::fit::fit;
use crate::registry::SchemaId;
use arrow_schema::{DataType, TimeUnit};
use iceberg::spec::PrimitiveType;
use prost_reflect::{
    FieldDescriptor, FileDescriptor, Kind, MapKey, MessageDescriptor, ReflectMessage, Value,
};
use std::collections::HashMap;

/// Deepest nesting of a message (a recursive message never ends).
const MAX_DEPTH: usize = 32;

/// Longest message-index list read (a message nested this deep has no table form).
const MAX_INDEXES: usize = MAX_DEPTH;

/// The name the registered schema's own file is compiled under.
const MAIN_FILE: &str = "kfs-registry-schema.proto";

/// Which message of a schema's file a value holds, as its framing says.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum MessageSelector {
    /// Confluent's message-index list: the position among the file's top-level
    /// messages, then among each one's nested types.
    Path(Vec<i32>),
    /// AWS Glue's message index: the position among all the file's messages, nested
    /// ones included, sorted by full name.
    Sorted(u32),
}

impl std::fmt::Display for MessageSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Path(path) => write!(f, "{path:?}"),
            Self::Sorted(index) => write!(f, "{index} (AWS Glue)"),
        }
    }
}

/// Splits a Protobuf payload (after the schema id of its framing) into the message it
/// names and the message's bytes: Confluent's message-index list, or Glue's index.
pub fn message_selector<'p>(
    id: &SchemaId,
    payload: &'p [u8],
) -> Result<(MessageSelector, &'p [u8]), String> {
    match id {
        SchemaId::Confluent(_) => {
            message_indexes(payload).map(|(path, rest)| (MessageSelector::Path(path), rest))
        }
        SchemaId::Glue(_) => {
            let mut rest = payload;
            let index = varint(&mut rest, payload.len())?;
            let index = u32::try_from(index)
                .map_err(|_| format!("Protobuf message index {index} is beyond an int"))?;
            Ok((MessageSelector::Sorted(index), rest))
        }
    }
}

/// A Protobuf writer schema: the registered file, compiled with its imports.
#[derive(Debug)]
pub struct ProtobufWriter {
    file: FileDescriptor,
    /// All its messages, nested ones included, sorted by full name: what AWS Glue's
    /// message index counts.
    sorted: Vec<MessageDescriptor>,
}

/// The registered file and its references, by import name; Google's well-known
/// types besides.
struct Sources(HashMap<String, String>);

impl protox::file::FileResolver for Sources {
    fn open_file(&self, name: &str) -> Result<protox::file::File, protox::Error> {
        match self.0.get(name) {
            Some(source) => protox::file::File::from_source(name, source),
            None => protox::file::GoogleFileResolver::new().open_file(name),
        }
    }
}

impl ProtobufWriter {
    /// Compiles `text`, a `.proto` file, importing `references` (import name, text:
    /// what the registry's references resolve to).
    pub fn parse(text: &str, references: &[(String, String)]) -> Result<Self, String> {
        let mut sources: HashMap<String, String> = references.iter().cloned().collect();
        sources.insert(MAIN_FILE.to_owned(), text.to_owned());
        let mut compiler = protox::Compiler::with_file_resolver(Sources(sources));
        compiler
            .open_file(MAIN_FILE)
            .map_err(|e| format!("Protobuf schema does not compile: {e}"))?;
        let file = compiler
            .descriptor_pool()
            .get_file_by_name(MAIN_FILE)
            .ok_or_else(|| "Protobuf schema compiled to no file".to_owned())?;
        if file.messages().len() == 0 {
            return Err("the Protobuf schema defines no message: its values have no fields".into());
        }
        let mut sorted: Vec<MessageDescriptor> = Vec::new();
        let mut level: Vec<MessageDescriptor> = file.messages().collect();
        while !level.is_empty() {
            let next = level.iter().flat_map(|m| m.child_messages()).collect();
            sorted.append(&mut level);
            level = next;
        }
        sorted.sort_by(|a, b| a.full_name().cmp(b.full_name()));
        Ok(Self { file, sorted })
    }

    /// The message `selector` names.
    pub fn message(&self, selector: &MessageSelector) -> Result<MessageDescriptor, String> {
        let named = || format!("Protobuf message index {selector} names no message of the schema");
        match selector {
            MessageSelector::Path(path) => {
                let mut at = path.iter().map(|i| usize::try_from(*i).ok());
                let first = at.next().flatten().ok_or_else(named)?;
                let mut message = self.file.messages().nth(first).ok_or_else(named)?;
                for index in at {
                    // Nested types as protoc declares them, map entries among them.
                    let child = message
                        .child_messages()
                        .nth(index.ok_or_else(named)?)
                        .ok_or_else(named)?;
                    message = child;
                }
                Ok(message)
            }
            MessageSelector::Sorted(index) => usize::try_from(*index)
                .ok()
                .and_then(|index| self.sorted.get(index))
                .cloned()
                .ok_or_else(named),
        }
    }

    /// The table form of the message `selector` names: its fields as columns.
    pub fn shape(&self, selector: &MessageSelector) -> Result<Vec<(String, Shape)>, String> {
        let message = self.message(selector)?;
        let mut budget = ShapeBudget::new("Protobuf");
        fields_shape(&message, (0, &mut budget))
            .map_err(|e| format!("message {}: {e}", message.full_name()))
    }

    /// Decodes one payload of schema `id` (the value after its schema id: the message
    /// it names, then the message) into the row of `columns` (`top`: the table's
    /// payload columns, whose names may differ from the fields'; else a struct
    /// column's fields, a decoded key's).
    pub fn decode(
        &self,
        id: &SchemaId,
        payload: &[u8],
        columns: &DataType,
        top: bool,
    ) -> Result<Cell, String> {
        self.decode_counted(id, payload, (columns, top))
            .map(|(cell, _)| cell)
    }

    /// [`ProtobufWriter::decode`], with the items the value holds.
    pub fn decode_counted(
        &self,
        id: &SchemaId,
        payload: &[u8],
        (columns, top): (&DataType, bool),
    ) -> Result<(Cell, u64), String> {
        let (decoded, fields, items) = self.read(id, payload, columns)?;
        message_cell(&decoded, fields, top).map(|cell| (cell, items))
    }

    /// Decodes one payload of schema `id`, a Debezium change event (`debezium`), into
    /// the row of the table's payload `columns` its `after` image gives, `None` for a
    /// delete, with the items the value holds; a message or truncate event, or a value
    /// that is no envelope, is refused with the reason. The
    /// row comes with the envelope's source position.
    pub fn decode_change(
        &self,
        id: &SchemaId,
        payload: &[u8],
        columns: &DataType,
    ) -> Result<(kfs_plan::changes::ChangedRow<Cell>, u64), String> {
        let (decoded, fields, items) = self.read(id, payload, columns)?;
        kfs_plan::changes::row_after(debezium::envelope(&decoded), |after| {
            message_cell(&after, fields, true)
        })
        .map(|row| (row, items))
    }

    /// The message a payload of schema `id` holds, the struct `columns` it is
    /// written to, and its items. The message is walked first (`bounds`): its
    /// lengths, depth and items are bounded before it is decoded.
    fn read<'c>(
        &self,
        id: &SchemaId,
        payload: &[u8],
        columns: &'c DataType,
    ) -> Result<(prost_reflect::DynamicMessage, &'c arrow_schema::Fields, u64), String> {
        let (selector, message) = message_selector(id, payload)?;
        let descriptor = self.message(&selector)?;
        let after = payload.len() - message.len();
        let items = bounds::check_protobuf(&descriptor, message)
            .map_err(|e| format!("Protobuf payload does not decode (after byte {after}): {e}"))?;
        let decoded = prost_reflect::DynamicMessage::decode(descriptor, message)
            .map_err(|e| format!("Protobuf payload does not decode (after byte {after}): {e}"))?;
        let DataType::Struct(fields) = columns else {
            return Err(format!(
                "a Protobuf message cannot be written to a {columns} column"
            ));
        };
        Ok((decoded, fields, items))
    }
}

/// Splits the payload of a Confluent-framed Protobuf value into its message-index
/// list and the message: a zig-zag varint count, then that many zig-zag varints; a
/// count of 0 stands for `[0]`, the file's first message.
fn message_indexes(payload: &[u8]) -> Result<(Vec<i32>, &[u8]), String> {
    let mut rest = payload;
    let count = zigzag(&mut rest, payload.len())?;
    if count == 0 {
        return Ok((vec![0], rest));
    }
    let count = usize::try_from(count)
        .ok()
        .filter(|n| *n <= MAX_INDEXES)
        .ok_or_else(|| {
            format!(
                "Protobuf message-index list of {count} entries at byte 0 (at most {MAX_INDEXES})"
            )
        })?;
    let mut indexes = Vec::with_capacity(count);
    for _ in 0..count {
        let index = zigzag(&mut rest, payload.len())?;
        indexes.push(
            i32::try_from(index)
                .map_err(|_| format!("Protobuf message index {index} is beyond an int"))?,
        );
    }
    Ok((indexes, rest))
}

/// Reads a zig-zag varint from the front of `rest` (`total`: the payload's length,
/// for positions in messages).
fn zigzag(rest: &mut &[u8], total: usize) -> Result<i64, String> {
    let value = varint(rest, total)?;
    Ok(((value >> 1) as i64) ^ -((value & 1) as i64))
}

/// Reads an unsigned varint from the front of `rest`.
fn varint(rest: &mut &[u8], total: usize) -> Result<u64, String> {
    let mut value: u64 = 0;
    for shift in (0..64).step_by(7) {
        let Some((&byte, tail)) = rest.split_first() else {
            return Err(format!(
                "Protobuf message index is cut short at byte {total}"
            ));
        };
        *rest = tail;
        value |= u64::from(byte & 0x7F) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(format!(
        "Protobuf message-index varint runs past 10 bytes at byte {}",
        total - rest.len()
    ))
}

/// The wrapped type of a `google.protobuf` wrapper message.
fn wrapper(message: &MessageDescriptor) -> Option<PrimitiveType> {
    Some(match message.full_name() {
        "google.protobuf.DoubleValue" => PrimitiveType::Double,
        "google.protobuf.FloatValue" => PrimitiveType::Float,
        "google.protobuf.Int64Value"
        | "google.protobuf.UInt64Value"
        | "google.protobuf.UInt32Value" => PrimitiveType::Long,
        "google.protobuf.Int32Value" => PrimitiveType::Int,
        "google.protobuf.BoolValue" => PrimitiveType::Boolean,
        "google.protobuf.StringValue" => PrimitiveType::String,
        "google.protobuf.BytesValue" => PrimitiveType::Binary,
        _ => return None,
    })
}

const TIMESTAMP: &str = "google.protobuf.Timestamp";

/// A message's depth in the schema, and what its table form may still take.
type ShapeWalk<'b> = (usize, &'b mut ShapeBudget);

/// The fields of `message` as columns; every field, element and map takes from the
/// budget, so the computation ends early for a message whose form is too large,
/// however often its fields reuse one message type.
fn fields_shape(
    message: &MessageDescriptor,
    (depth, budget): ShapeWalk<'_>,
) -> Result<Vec<(String, Shape)>, String> {
    message
        .fields()
        .map(|field| {
            budget.field()?;
            let shape = field_shape(&field, (depth + 1, &mut *budget))
                .map_err(|e| format!("field {}: {e}", field.name()))?;
            Ok((field.name().to_owned(), shape))
        })
        .collect()
}

/// The table form of one field (a list when repeated, a map for a map field).
fn field_shape(field: &FieldDescriptor, (depth, budget): ShapeWalk<'_>) -> Result<Shape, String> {
    if field.is_map() {
        let Kind::Message(entry) = field.kind() else {
            return Err("a map field without its entry message".into());
        };
        budget.field()?;
        budget.field()?;
        let value = kind_shape(&entry.map_entry_value_field().kind(), (depth + 1, budget))?;
        return Ok(Shape::Map(Box::new(value)));
    }
    if field.is_list() {
        budget.field()?;
    }
    let shape = kind_shape(&field.kind(), (depth, budget))?;
    Ok(if field.is_list() {
        Shape::List(Box::new(shape))
    } else {
        shape
    })
}

fn kind_shape(kind: &Kind, (depth, budget): ShapeWalk<'_>) -> Result<Shape, String> {
    if depth > MAX_DEPTH {
        return Err(format!(
            "Protobuf message nests deeper than {MAX_DEPTH} levels (a recursive message has no table form)"
        ));
    }
    let primitive = |p| Ok(Shape::Primitive(p));
    match kind {
        Kind::Double => primitive(PrimitiveType::Double),
        Kind::Float => primitive(PrimitiveType::Float),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => primitive(PrimitiveType::Int),
        Kind::Int64
        | Kind::Sint64
        | Kind::Sfixed64
        | Kind::Uint32
        | Kind::Fixed32
        | Kind::Uint64
        | Kind::Fixed64 => primitive(PrimitiveType::Long),
        Kind::Bool => primitive(PrimitiveType::Boolean),
        Kind::String | Kind::Enum(_) => primitive(PrimitiveType::String),
        Kind::Bytes => primitive(PrimitiveType::Binary),
        Kind::Message(message) if message.full_name() == TIMESTAMP => {
            primitive(PrimitiveType::Timestamptz)
        }
        Kind::Message(message) => match wrapper(message) {
            Some(wrapped) => primitive(wrapped),
            None => Ok(Shape::Struct(fields_shape(message, (depth, budget))?)),
        },
    }
}

/// A field of a decoded message: its descriptor and value, `None` when it is null.
struct Member<'m> {
    field: FieldDescriptor,
    value: Option<std::borrow::Cow<'m, Value>>,
}

/// The row (or struct cell) of a decoded `message` in the columns `fields` (`top`:
/// the table's top level, whose column names may differ from the field names).
fn message_cell(
    message: &prost_reflect::DynamicMessage,
    fields: &arrow_schema::Fields,
    top: bool,
) -> Result<Cell, String> {
    let descriptor = message.descriptor();
    // Bytes the schema has no field for: the payload was not written with this schema,
    // and what they hold would be lost.
    if let Some(unknown) = message.unknown_fields().next() {
        return Err(format!(
            "Protobuf message {} holds field number {}, which its schema does not have",
            descriptor.full_name(),
            unknown.number()
        ));
    }
    let members: Vec<Member<'_>> = descriptor
        .fields()
        .map(|field| {
            // Explicit presence (optional, proto2, messages, oneof members): null when
            // unset; implicit presence: the default, as the wire cannot tell them apart.
            let value = if field.supports_presence() && !message.has_field(&field) {
                None
            } else {
                Some(message.get_field(&field))
            };
            Member { field, value }
        })
        .collect();
    let named: Vec<(&str, &Member<'_>)> = members.iter().map(|m| (m.field.name(), m)).collect();
    // A value of a message whose fields the table was not grown by (it names another
    // message than those the segment's scan saw) must not lose a field silently: a
    // field set without a column is an error.
    let unset = |m: &Member<'_>| m.value.is_none() || !message.has_field(&m.field);
    struct_cell(fields, &named, (top, "field"), unset, member_cell)
}

fn member_cell(member: &Member<'_>, data_type: &DataType) -> Result<Cell, String> {
    let Some(value) = &member.value else {
        return Ok(Cell::Null);
    };
    let kind = member.field.kind();
    if member.field.is_map() {
        let (Value::Map(map), DataType::Map(entries, _), Kind::Message(entry)) =
            (value.as_ref(), data_type, &kind)
        else {
            return Err(format!(
                "a Protobuf map cannot be written to a {data_type} column"
            ));
        };
        let value_kind = entry.map_entry_value_field().kind();
        let keyed: Vec<(String, &Value)> = map.iter().map(|(k, v)| (map_key(k), v)).collect();
        return map_cell(
            entries,
            keyed.iter().map(|(k, v)| (k.as_str(), *v)).collect(),
            |v, t| value_cell(v, &value_kind, t),
        );
    }
    if member.field.is_list() {
        let (Value::List(items), DataType::List(item) | DataType::LargeList(item)) =
            (value.as_ref(), data_type)
        else {
            return Err(format!(
                "a repeated Protobuf field cannot be written to a {data_type} column"
            ));
        };
        return list_cell(item, items, |v, t| value_cell(v, &kind, t));
    }
    value_cell(value, &kind, data_type)
}

/// A map key as the map column's string key.
fn map_key(key: &MapKey) -> String {
    match key {
        MapKey::Bool(b) => b.to_string(),
        MapKey::I32(i) => i.to_string(),
        MapKey::I64(i) => i.to_string(),
        MapKey::U32(u) => u.to_string(),
        MapKey::U64(u) => u.to_string(),
        MapKey::String(s) => s.clone(),
    }
}

/// What a value is, for messages.
fn kind_name(value: &Value) -> &'static str {
    match value {
        Value::Bool(_) => "bool",
        Value::I32(_) => "int32",
        Value::I64(_) => "int64",
        Value::U32(_) => "uint32",
        Value::U64(_) => "uint64",
        Value::F32(_) => "float",
        Value::F64(_) => "double",
        Value::String(_) => "string",
        Value::Bytes(_) => "bytes",
        Value::EnumNumber(_) => "enum",
        Value::Message(_) => "message",
        Value::List(_) => "repeated field",
        Value::Map(_) => "map",
    }
}

/// One (non-repeated) value of kind `kind` as a cell of a column of type `data_type`;
/// a value beyond the column's range is refused ([`fit`]), never changed.
fn value_cell(value: &Value, kind: &Kind, data_type: &DataType) -> Result<Cell, String> {
    let converted = match (data_type, value) {
        (DataType::Boolean, Value::Bool(b)) => Cell::Bool(*b),
        (DataType::Int32 | DataType::Int64, Value::I32(i)) => Cell::Int(i64::from(*i)),
        (DataType::Int64, Value::I64(i)) => Cell::Int(*i),
        (DataType::Int64, Value::U32(u)) => Cell::Int(i64::from(*u)),
        (DataType::Int64, Value::U64(u)) => {
            Cell::Int(i64::try_from(*u).map_err(|_| format!("uint64 {u} is beyond a long"))?)
        }
        (DataType::Float32 | DataType::Float64, Value::F32(f)) => Cell::Float(f64::from(*f)),
        (DataType::Float64, Value::F64(f)) => Cell::Float(*f),
        (DataType::Utf8 | DataType::LargeUtf8, Value::String(s)) => Cell::Text(s.clone()),
        (DataType::Binary | DataType::LargeBinary, Value::Bytes(b)) => Cell::Bytes(b.to_vec()),
        (DataType::Utf8 | DataType::LargeUtf8, Value::EnumNumber(number)) => {
            let Kind::Enum(symbols) = kind else {
                return Err(format!("enum number {number} without its enum"));
            };
            Cell::Text(match symbols.get_value(*number) {
                Some(symbol) => symbol.name().to_owned(),
                None => number.to_string(),
            })
        }
        (DataType::Timestamp(TimeUnit::Microsecond, _), Value::Message(m))
            if m.descriptor().full_name() == TIMESTAMP =>
        {
            Cell::Int(timestamp_micros(m)?)
        }
        (DataType::Struct(fields), Value::Message(m)) => message_cell(m, fields, false)?,
        (_, Value::Message(m)) if wrapper(&m.descriptor()).is_some() => {
            let descriptor = m.descriptor();
            let Some(inner) = descriptor.get_field_by_name("value") else {
                return Err(format!(
                    "wrapper {} without its value",
                    descriptor.full_name()
                ));
            };
            value_cell(&m.get_field(&inner), &inner.kind(), data_type)?
        }
        (_, other) => {
            return Err(format!(
                "a Protobuf {} cannot be written to a {data_type} column",
                kind_name(other)
            ));
        }
    };
    fit(converted, data_type)
}

/// A `google.protobuf.Timestamp` in microseconds since the epoch: the sub-microsecond
/// part of its nanos is dropped (the column holds microseconds); nanos outside
/// `[0, 999 999 999]`, which the type does not allow, and an instant beyond 64-bit
/// microseconds are refused, never read as another instant.
fn timestamp_micros(m: &prost_reflect::DynamicMessage) -> Result<i64, String> {
    let field = |name: &str| m.get_field_by_name(name).map(|v| v.into_owned());
    let seconds = field("seconds").and_then(|v| v.as_i64()).unwrap_or(0);
    let nanos = field("nanos").and_then(|v| v.as_i32()).unwrap_or(0);
    if !(0..1_000_000_000).contains(&nanos) {
        return Err(format!(
            "timestamp nanos {nanos} is outside 0 to 999999999, as google.protobuf.Timestamp requires"
        ));
    }
    seconds
        .checked_mul(1_000_000)
        .and_then(|us| us.checked_add(i64::from(nanos / 1000)))
        .ok_or_else(|| format!("timestamp of {seconds} s is beyond the range of microseconds"))
}

#[cfg(test)]
mod tests;

//! Typed values between a registry's decoder and Arrow, as pure logic: the table form
//! of a writer schema ([`Shape`]), how it grows a table's schema with stable field
//! ids ([`absorb`]), and rows of [`Cell`]s as Arrow columns ([`column()`]).
//!
//! Field ids stay stable across schema versions: a field is matched to its column by
//! name (`crate::layout::place`, the rule of JSON fields: two fields whose names map to
//! one column, `a-b` and `a_b`, are refused, never merged), a new field is a new
//! optional column with a new id, a field a version leaves out keeps its column (null
//! in that version's rows), and a type changes only as Iceberg allows (int to long,
//! float to double, a decimal's precision up at the same scale). Any other change is
//! refused with the reason: that version's records are dead letters.

use std::sync::Arc;

use super::json::new_field;
use crate::layout::Placement;
use arrow_array::builder::{
    BooleanBuilder, Date32Builder, Decimal128Builder, Float32Builder, Float64Builder, Int32Builder,
    Int64Builder, LargeBinaryBuilder, LargeStringBuilder, StringBuilder, Time64MicrosecondBuilder,
    TimestampMicrosecondBuilder,
};
use arrow_array::{
    ArrayRef, BinaryArray, FixedSizeBinaryArray, ListArray, MapArray, StructArray, new_null_array,
};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::{ArrowError, DataType, TimeUnit};
use iceberg::spec::{
    ListType, MapType, NestedField, NestedFieldRef, PrimitiveType, StructType, Type,
};

/// The table form of a schema's field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shape {
    /// A primitive column.
    Primitive(PrimitiveType),
    /// A struct of named fields.
    Struct(Vec<(String, Shape)>),
    /// A list of one element type.
    List(Box<Shape>),
    /// A map from strings to one value type.
    Map(Box<Shape>),
}

/// One decoded value, as a column of the table's type holds it.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// Null.
    Null,
    /// A boolean.
    Bool(bool),
    /// An integer, date (days), time or timestamp (µs).
    Int(i64),
    /// A float or double.
    Float(f64),
    /// A string.
    Text(String),
    /// Bytes, fixed or a UUID's 16 bytes.
    Bytes(Vec<u8>),
    /// A decimal's unscaled value.
    Decimal(i128),
    /// A struct's fields, in its columns' order.
    Struct(Vec<Cell>),
    /// A list's elements.
    List(Vec<Cell>),
    /// A map's entries.
    Map(Vec<(Cell, Cell)>),
}

/// `fields` (a table's columns, `top` for the top level) grown by `shape` (a writer
/// schema's fields); new ids from `next_id`. `None` when nothing changes.
pub fn absorb(
    fields: &[NestedFieldRef],
    shape: &[(String, Shape)],
    top: bool,
    next_id: &mut i32,
) -> Result<Option<Vec<NestedFieldRef>>, String> {
    let mut grown: Vec<NestedFieldRef> = fields.to_vec();
    let mut changed = false;
    for (name, field_shape) in shape {
        // The JSON fields' rule: a column holding another field is refused.
        match crate::layout::place(&grown, name, top, name)? {
            Placement::Column(at) => {
                let existing = &grown[at];
                if let Some(field_type) = grow(&existing.field_type, field_shape, next_id)
                    .map_err(|e| format!("field {name}: {e}"))?
                {
                    let mut widened = existing.as_ref().clone();
                    widened.field_type = Box::new(field_type);
                    grown[at] = Arc::new(widened);
                    changed = true;
                }
            }
            Placement::New { name: column, doc } => {
                let id = take(next_id);
                let field_type =
                    type_of(field_shape, next_id).map_err(|e| format!("field {name}: {e}"))?;
                grown.push(new_field(id, &column, field_type, doc));
                changed = true;
            }
        }
    }
    Ok(changed.then_some(grown))
}

/// The one field of a writer schema whose top level is not a record (an Avro
/// `"string"`, a JSON Schema `{"type": "long"}`): a value's column `value_value`, a
/// key's `key_fields.value`.
pub const SCALAR_FIELD: &str = "value";

/// Whose fields a writer schema describes: a record's value (the table's top-level
/// columns) or its key (the fields of the struct column `key_fields`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The value.
    Value,
    /// The key.
    Key,
}

/// `fields` (a table's columns) grown by `shape`, a writer schema's fields in
/// `role` (`keys`: the table's keys are decoded, into `key_fields`); new ids from
/// `next_id`. `None` when nothing changes.
pub fn absorb_as(
    (role, keys): (Role, bool),
    fields: &[NestedFieldRef],
    shape: &[(String, Shape)],
    next_id: &mut i32,
) -> Result<Option<Vec<NestedFieldRef>>, String> {
    let column = crate::layout::KEY_FIELDS_COLUMN;
    if role == Role::Value {
        if keys
            && let Some((name, _)) = shape
                .iter()
                .find(|(name, _)| crate::layout::column_for(name, true) == column)
        {
            return Err(format!(
                "field {name} collides with {column}, the column of the decoded keys"
            ));
        }
        return absorb(fields, shape, true, next_id);
    }
    let key = Shape::Struct(shape.to_vec());
    let mut grown: Vec<NestedFieldRef> = fields.to_vec();
    match grown.iter().position(|f| f.name == column) {
        Some(at) => {
            let Some(field_type) = grow(&grown[at].field_type, &key, next_id)? else {
                return Ok(None);
            };
            let mut widened = grown[at].as_ref().clone();
            widened.field_type = Box::new(field_type);
            grown[at] = Arc::new(widened);
        }
        None => {
            let id = take(next_id);
            grown.push(Arc::new(
                NestedField::optional(id, column, type_of(&key, next_id)?)
                    .with_doc("kfs: the record's key, decoded with its registry schema"),
            ));
        }
    }
    Ok(Some(grown))
}

fn take(next_id: &mut i32) -> i32 {
    let id = *next_id;
    *next_id += 1;
    id
}

/// The Iceberg type of a new column of `shape`, its nested fields numbered from
/// `next_id`; two fields of a struct that map to one column are refused.
fn type_of(shape: &Shape, next_id: &mut i32) -> Result<Type, String> {
    Ok(match shape {
        Shape::Primitive(p) => Type::Primitive(p.clone()),
        Shape::Struct(fields) => {
            let ids: Vec<i32> = fields.iter().map(|_| take(next_id)).collect();
            let mut built: Vec<NestedFieldRef> = Vec::with_capacity(fields.len());
            for ((name, s), id) in fields.iter().zip(ids) {
                let Placement::New { name: column, doc } =
                    crate::layout::place(&built, name, false, name)?
                else {
                    return Err(format!(
                        "field {name:?} maps to a column another field of its struct holds"
                    ));
                };
                let field_type = type_of(s, next_id).map_err(|e| format!("field {name}: {e}"))?;
                built.push(new_field(id, &column, field_type, doc));
            }
            Type::Struct(StructType::new(built))
        }
        Shape::List(item) => {
            let id = take(next_id);
            Type::List(ListType::new(Arc::new(NestedField::list_element(
                id,
                type_of(item, next_id)?,
                false,
            ))))
        }
        Shape::Map(value) => {
            let (key_id, value_id) = (take(next_id), take(next_id));
            Type::Map(MapType::new(
                Arc::new(NestedField::map_key_element(
                    key_id,
                    Type::Primitive(PrimitiveType::String),
                )),
                Arc::new(NestedField::map_value_element(
                    value_id,
                    type_of(value, next_id)?,
                    false,
                )),
            ))
        }
    })
}

/// The type `existing` becomes to hold `shape` too (`None`: it holds it as it is).
fn grow(existing: &Type, shape: &Shape, next_id: &mut i32) -> Result<Option<Type>, String> {
    use PrimitiveType as P;
    let refused = || {
        Err(format!(
            "the table's column is {existing}, the schema's field is {}",
            type_of(shape, &mut 0).map_or_else(|e| e, |t| t.to_string())
        ))
    };
    match (existing, shape) {
        (Type::Primitive(a), Shape::Primitive(b)) => match (a, b) {
            _ if a == b => Ok(None),
            (P::Int, P::Long) => Ok(Some(Type::Primitive(P::Long))),
            (P::Float, P::Double) => Ok(Some(Type::Primitive(P::Double))),
            // Written as the wider column's type.
            (P::Long, P::Int) | (P::Double, P::Float) => Ok(None),
            (
                P::Decimal {
                    precision: p1,
                    scale: s1,
                },
                P::Decimal {
                    precision: p2,
                    scale: s2,
                },
            ) if s1 == s2 => Ok((p2 > p1).then(|| {
                Type::Primitive(P::Decimal {
                    precision: *p2,
                    scale: *s2,
                })
            })),
            _ => refused(),
        },
        (Type::Struct(st), Shape::Struct(fields)) => {
            Ok(absorb(st.fields(), fields, false, next_id)?
                .map(|f| Type::Struct(StructType::new(f))))
        }
        (Type::List(list), Shape::List(item)) => {
            Ok(
                grow(&list.element_field.field_type, item, next_id)?.map(|element| {
                    let mut field = list.element_field.as_ref().clone();
                    field.field_type = Box::new(element);
                    Type::List(ListType::new(Arc::new(field)))
                }),
            )
        }
        (Type::Map(map), Shape::Map(value)) => {
            Ok(
                grow(&map.value_field.field_type, value, next_id)?.map(|grown| {
                    let mut field = map.value_field.as_ref().clone();
                    field.field_type = Box::new(grown);
                    Type::Map(MapType::new(map.key_field.clone(), Arc::new(field)))
                }),
            )
        }
        _ => refused(),
    }
}

/// The cell of a struct column of `fields` from a value's named `members` (an Avro
/// record's fields, a JSON object's properties, a Protobuf message's fields), each
/// converted by `convert`; a column no member names is null. `top`: the table's top
/// level (whose column names may differ from their fields'); `member` names a member in
/// errors. Nothing is lost: a member without a column that is not null (`is_null`), or
/// two members naming one column, is an error.
pub fn struct_cell<V>(
    fields: &arrow_schema::Fields,
    members: &[(&str, &V)],
    (top, member): (bool, &str),
    is_null: impl Fn(&V) -> bool,
    convert: impl Fn(&V, &DataType) -> Result<Cell, String>,
) -> Result<Cell, String> {
    let mut children = vec![Cell::Null; fields.len()];
    let mut named: Vec<Option<&str>> = vec![None; fields.len()];
    for (name, value) in members {
        let column = crate::layout::column_for(name, top);
        let Some(at) = fields.iter().position(|f| f.name().as_str() == column) else {
            if is_null(value) {
                continue;
            }
            return Err(format!("{member} {name} has no column in the table"));
        };
        if let Some(other) = named[at] {
            return Err(format!(
                "{member}s {other} and {name} map to one column, {column}"
            ));
        }
        named[at] = Some(name);
        children[at] =
            convert(value, fields[at].data_type()).map_err(|e| format!("{member} {name}: {e}"))?;
    }
    Ok(Cell::Struct(children))
}

/// The cell of a list column of `item`s from `items`, each converted by `convert`.
pub fn list_cell<'v, V: 'v>(
    item: &arrow_schema::FieldRef,
    items: impl IntoIterator<Item = &'v V>,
    convert: impl Fn(&V, &DataType) -> Result<Cell, String>,
) -> Result<Cell, String> {
    Ok(Cell::List(
        items
            .into_iter()
            .map(|v| convert(v, item.data_type()))
            .collect::<Result<_, _>>()?,
    ))
}

/// The cell of a map column whose entries are `entries` from string-keyed `pairs`
/// (in key order), each value converted by `convert`.
pub fn map_cell<V>(
    entries: &arrow_schema::FieldRef,
    mut pairs: Vec<(&str, &V)>,
    convert: impl Fn(&V, &DataType) -> Result<Cell, String>,
) -> Result<Cell, String> {
    let value_type = match entries.data_type() {
        DataType::Struct(kv) if kv.len() == 2 => kv[1].data_type(),
        other => return Err(format!("a map column of entries {other}")),
    };
    pairs.sort_by(|a, b| a.0.cmp(b.0));
    Ok(Cell::Map(
        pairs
            .into_iter()
            .map(|(k, v)| Ok((Cell::Text(k.to_owned()), convert(v, value_type)?)))
            .collect::<Result<_, String>>()?,
    ))
}

/// A null cell, to borrow.
pub(crate) const NULL: Cell = Cell::Null;

/// The Arrow column of type `data_type` holding `cells` (one a row). A cell whose kind
/// does not match the type is null (the decoder built the cells for these types).
pub fn column(data_type: &DataType, cells: &[&Cell]) -> Result<ArrayRef, ArrowError> {
    macro_rules! primitive {
        ($builder:ty, $pick:expr) => {{
            let mut builder = <$builder>::new();
            for cell in cells {
                builder.append_option($pick(*cell));
            }
            Arc::new(builder.finish()) as ArrayRef
        }};
    }
    let int = |c: &Cell| match c {
        Cell::Int(i) => Some(*i),
        _ => None,
    };
    let float = |c: &Cell| match c {
        Cell::Float(f) => Some(*f),
        _ => None,
    };
    let text = |c: &Cell| match c {
        Cell::Text(s) => Some(s.clone()),
        _ => None,
    };
    let bytes = |c: &Cell| match c {
        Cell::Bytes(b) => Some(b.clone()),
        _ => None,
    };
    Ok(match data_type {
        DataType::Boolean => primitive!(BooleanBuilder, |c: &Cell| match c {
            Cell::Bool(b) => Some(*b),
            _ => None,
        }),
        DataType::Int32 => {
            primitive!(Int32Builder, |c: &Cell| int(c)
                .and_then(|i| i32::try_from(i).ok()))
        }
        DataType::Int64 => primitive!(Int64Builder, int),
        DataType::Float32 => primitive!(Float32Builder, |c: &Cell| float(c).map(|f| f as f32)),
        DataType::Float64 => primitive!(Float64Builder, float),
        DataType::Date32 => {
            primitive!(Date32Builder, |c: &Cell| int(c)
                .and_then(|i| i32::try_from(i).ok()))
        }
        DataType::Time64(TimeUnit::Microsecond) => primitive!(Time64MicrosecondBuilder, int),
        DataType::Timestamp(TimeUnit::Microsecond, tz) => {
            let mut builder = TimestampMicrosecondBuilder::with_capacity(cells.len())
                .with_timezone_opt(tz.clone());
            for cell in cells {
                builder.append_option(int(cell));
            }
            Arc::new(builder.finish())
        }
        DataType::Decimal128(precision, scale) => {
            let mut builder = Decimal128Builder::with_capacity(cells.len())
                .with_precision_and_scale(*precision, *scale)?;
            for cell in cells {
                builder.append_option(match cell {
                    Cell::Decimal(d) => Some(*d),
                    _ => None,
                });
            }
            Arc::new(builder.finish())
        }
        DataType::Utf8 => primitive!(StringBuilder, text),
        DataType::LargeUtf8 => primitive!(LargeStringBuilder, text),
        DataType::LargeBinary => primitive!(LargeBinaryBuilder, bytes),
        DataType::Binary => Arc::new(BinaryArray::from_iter(cells.iter().map(|c| bytes(c)))),
        DataType::FixedSizeBinary(size) => {
            let values: Vec<Option<Vec<u8>>> = cells.iter().map(|c| bytes(c)).collect();
            if values.iter().all(Option::is_none) {
                new_null_array(data_type, cells.len())
            } else {
                Arc::new(FixedSizeBinaryArray::try_from_sparse_iter_with_size(
                    values.into_iter(),
                    *size,
                )?)
            }
        }
        DataType::Struct(fields) => struct_column(fields, cells)?,
        DataType::List(item) => list_column(item, cells)?,
        DataType::Map(entries, sorted) => map_column(entries, *sorted, cells)?,
        other => {
            return Err(ArrowError::NotYetImplemented(format!(
                "registry values in a {other} column"
            )));
        }
    })
}

/// Which of `cells` are present (`present`), as a null buffer; `None` when all are.
fn presence(cells: &[&Cell], present: impl Fn(&Cell) -> bool) -> Option<NullBuffer> {
    let valid: Vec<bool> = cells.iter().map(|c| present(c)).collect();
    (!valid.iter().all(|v| *v)).then(|| NullBuffer::from(valid))
}

/// The struct column of `fields` holding `cells` (a cell that is no struct is null).
fn struct_column(fields: &arrow_schema::Fields, cells: &[&Cell]) -> Result<ArrayRef, ArrowError> {
    let mut children = Vec::with_capacity(fields.len());
    for (i, field) in fields.iter().enumerate() {
        let child: Vec<&Cell> = cells
            .iter()
            .map(|c| match c {
                Cell::Struct(values) => values.get(i).unwrap_or(&NULL),
                _ => &NULL,
            })
            .collect();
        children.push(column(field.data_type(), &child)?);
    }
    let nulls = presence(cells, |c| matches!(c, Cell::Struct(_)));
    Ok(if fields.is_empty() {
        Arc::new(StructArray::new_empty_fields(cells.len(), nulls))
    } else {
        Arc::new(StructArray::try_new(fields.clone(), children, nulls)?)
    })
}

/// The list column of `item`s holding `cells` (a cell that is no list is null).
fn list_column(item: &arrow_schema::FieldRef, cells: &[&Cell]) -> Result<ArrayRef, ArrowError> {
    let mut lengths = Vec::with_capacity(cells.len());
    let mut flat: Vec<&Cell> = Vec::new();
    for cell in cells {
        match cell {
            Cell::List(items) => {
                lengths.push(items.len());
                flat.extend(items.iter());
            }
            _ => lengths.push(0),
        }
    }
    let values = column(item.data_type(), &flat)?;
    let nulls = presence(cells, |c| matches!(c, Cell::List(_)));
    Ok(Arc::new(ListArray::try_new(
        item.clone(),
        OffsetBuffer::from_lengths(lengths),
        values,
        nulls,
    )?))
}

/// The map column of `entries` holding `cells` (a cell that is no map is null).
fn map_column(
    entries: &arrow_schema::FieldRef,
    sorted: bool,
    cells: &[&Cell],
) -> Result<ArrayRef, ArrowError> {
    let DataType::Struct(kv) = entries.data_type() else {
        return Err(ArrowError::SchemaError(format!(
            "map entries of type {}",
            entries.data_type()
        )));
    };
    let mut lengths = Vec::with_capacity(cells.len());
    let (mut keys, mut values): (Vec<&Cell>, Vec<&Cell>) = (Vec::new(), Vec::new());
    for cell in cells {
        match cell {
            Cell::Map(pairs) => {
                lengths.push(pairs.len());
                for (k, v) in pairs {
                    keys.push(k);
                    values.push(v);
                }
            }
            _ => lengths.push(0),
        }
    }
    let (Some(key_field), Some(value_field)) = (kv.first(), kv.get(1)) else {
        return Err(ArrowError::SchemaError(
            "map entries without key and value".into(),
        ));
    };
    let entries_array = StructArray::try_new(
        kv.clone(),
        vec![
            column(key_field.data_type(), &keys)?,
            column(value_field.data_type(), &values)?,
        ],
        None,
    )?;
    let nulls = presence(cells, |c| matches!(c, Cell::Map(_)));
    Ok(Arc::new(MapArray::try_new(
        entries.clone(),
        OffsetBuffer::from_lengths(lengths),
        entries_array,
        nulls,
        sorted,
    )?))
}

/// The columns of a new table holding `shape`, and its row type (a struct of them):
/// what the decoders' tests and benchmarks write rows into.
pub(crate) fn new_table_row(
    shape: &[(String, Shape)],
) -> Result<(arrow_schema::Fields, DataType), String> {
    let fields = absorb(&[], shape, true, &mut 1)?.unwrap_or_default();
    let schema = iceberg::spec::Schema::builder()
        .with_fields(fields)
        .build()
        .map_err(|e| e.to_string())?;
    let arrow = kfs_parquet::arrow_schema(&schema).map_err(|e| e.to_string())?;
    Ok((
        arrow.fields().clone(),
        DataType::Struct(arrow.fields().clone()),
    ))
}

/// Builds the Arrow column of each of `row`'s cells (a row decoded for `fields`).
#[cfg(test)]
pub(crate) fn write_row(fields: &arrow_schema::Fields, row: &Cell) -> Result<(), String> {
    if let Cell::Struct(values) = row {
        for (field, value) in fields.iter().zip(values) {
            column(field.data_type(), &[value]).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "cells_tests.rs"]
mod tests;

//! JSON record values as typed columns (`--value-format json`), as pure logic with no
//! I/O: what a value needs of a table's schema (new optional columns, int widened to
//! long, float widened to double), whether it fits a schema as it is, and the Arrow
//! columns of the values that fit.
//!
//! Types are inferred as Kafka Connect's Iceberg sink infers them, except that numbers
//! take the widest type at once (so inferred columns never need widening): `true`/`false` → boolean, an integer → long, any other
//! number → double, a string → string, an object → struct, an array → list (of its
//! elements' type). A column declared narrower (int, float) is widened (to long,
//! double) by a value that overflows it.
//! A field that is only ever null, `[]` or `{}` has no type yet and gets no column
//! until a value gives it one. Top-level fields become top-level columns; one whose
//! name is a Kafka metadata column (`offset`, `timestamp`, ...) is stored as
//! `value_<name>`.
//!
//! A record whose value cannot be written is rejected with the reason, for the
//! dead-letter table: a value that is not JSON, not an object, or whose field has a
//! type its column cannot take (a string in a long column, a fraction in an int
//! column, an integer beyond 64 bits).

use std::sync::Arc;

use crate::table::{METADATA_COLUMNS, column_name};
use arrow_array::{ArrayRef, RecordBatch};
use iceberg::spec::{
    ListType, NestedField, NestedFieldRef, PrimitiveType, Schema, StructType, Type,
};
use serde_json::{Map, Value};

/// Why a record's value cannot be written to the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection(pub String);

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Parses a record value into the JSON object whose fields become columns, with the
/// top-level keys renamed to their columns (`column_name`). A null value (a
/// tombstone) is an empty object: the row keeps its metadata, every field null.
pub fn parse_value(value: Option<&[u8]>) -> Result<Map<String, Value>, Rejection> {
    let Some(bytes) = value else {
        return Ok(Map::new());
    };
    let parsed: Value = serde_json::from_slice(bytes).map_err(|e| {
        Rejection(format!(
            "value is not JSON: {e} (at byte {})",
            byte_of(bytes, e.line(), e.column())
        ))
    })?;
    match parsed {
        Value::Object(fields) => Ok(fields
            .into_iter()
            .map(|(name, value)| (column_name(&name), value))
            .collect()),
        other => Err(Rejection(format!(
            "value is a JSON {}, not an object",
            kind(&other)
        ))),
    }
}

/// The byte position of serde_json's 1-based line and column.
fn byte_of(bytes: &[u8], line: usize, column: usize) -> usize {
    let line_start: usize = bytes
        .split(|b| *b == b'\n')
        .take(line.saturating_sub(1))
        .map(|l| l.len() + 1)
        .sum();
    line_start + column.saturating_sub(1)
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A schema as it grows while a segment's values are scanned: the fields of the table
/// schema, and the next free field id.
#[derive(Debug, Clone)]
pub struct EvolvingSchema {
    fields: Vec<NestedFieldRef>,
    next_id: i32,
    changed: bool,
    declared: bool,
}

impl EvolvingSchema {
    /// Starts from `schema`; new fields get ids above `last_column_id` (the table's).
    pub fn new(schema: &Schema, last_column_id: i32) -> Self {
        Self {
            fields: schema.as_struct().fields().to_vec(),
            next_id: last_column_id.max(schema.highest_field_id()) + 1,
            changed: false,
            declared: false,
        }
    }

    /// For a table whose columns were declared: fields without a column are left out
    /// (never added); declared columns still widen.
    pub fn declared(mut self) -> Self {
        self.declared = true;
        self
    }

    /// Takes in a value's fields: adds the columns it needs and widens the ones it
    /// overflows, unless one of its fields cannot be reconciled with its column; then
    /// the schema is left as it was and the reason returned.
    pub fn absorb(&mut self, value: &Map<String, Value>) -> Result<(), Rejection> {
        let mut next_id = self.next_id;
        let projected;
        let value = if self.declared {
            projected = project(value, &self.fields);
            &projected
        } else {
            value
        };
        if let Some(fields) = merge_fields(&self.fields, value, "", &mut next_id)? {
            self.fields = fields;
            self.next_id = next_id;
            self.changed = true;
        }
        Ok(())
    }

    /// True when some value changed the schema.
    pub fn changed(&self) -> bool {
        self.changed
    }

    /// The schema grown so far, with id `schema_id`.
    pub fn schema(&self, schema_id: i32) -> iceberg::Result<Schema> {
        Schema::builder()
            .with_schema_id(schema_id)
            .with_fields(self.fields.clone())
            .build()
    }
}

/// Whether a value fits `schema` as it is: no column to add or widen, and no field
/// its column cannot take.
pub fn fits(schema: &Schema, value: &Map<String, Value>) -> Result<(), Rejection> {
    // Per record on the converter's second pass: merged against the schema's fields
    // as they are, nothing copied unless the value would change them.
    let mut next_id = schema.highest_field_id().saturating_add(1);
    match merge_fields(schema.as_struct().fields(), value, "", &mut next_id)? {
        None => Ok(()),
        Some(_) => Err(Rejection(
            "value needs a column (or a wider one) the table's schema does not have".to_owned(),
        )),
    }
}

/// True for a value that gives a column no type: null, `[]`, `{}`, and arrays or
/// objects holding only such values.
fn typeless(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(items) => items.iter().all(typeless),
        Value::Object(fields) => fields.values().all(typeless),
        _ => false,
    }
}

/// True when the value is the container the column is (an object for a struct, an
/// array for a list).
fn same_shape(column: &Type, value: &Value) -> bool {
    matches!(
        (column, value),
        (Type::Struct(_), Value::Object(_)) | (Type::List(_), Value::Array(_))
    )
}

/// A value that [`fits`] the schema, made ready to become its Arrow columns: every
/// value without a type whose column took another shape meanwhile is null.
pub fn conform(value: &mut Map<String, Value>, fields: &[NestedFieldRef]) {
    for (name, field_value) in value.iter_mut() {
        if let Some(field) = fields.iter().find(|f| &f.name == name) {
            conform_value(field_value, &field.field_type);
        }
    }
}

fn conform_value(value: &mut Value, column: &Type) {
    if typeless(value) && !same_shape(column, value) {
        *value = Value::Null;
        return;
    }
    match (column, value) {
        (Type::Struct(fields), Value::Object(object)) => conform(object, fields.fields()),
        (Type::List(list), Value::Array(items)) => {
            for item in items {
                conform_value(item, &list.element_field.field_type);
            }
        }
        _ => {}
    }
}

/// The part of a value that `fields` has columns for, nested structs (and structs in
/// lists) alike: what a table with declared columns keeps of it.
pub fn project(value: &Map<String, Value>, fields: &[NestedFieldRef]) -> Map<String, Value> {
    value
        .iter()
        .filter_map(|(name, field_value)| {
            let field = fields.iter().find(|f| &f.name == name)?;
            Some((name.clone(), project_value(field_value, &field.field_type)))
        })
        .collect()
}

fn project_value(value: &Value, column: &Type) -> Value {
    match (column, value) {
        (Type::Struct(fields), Value::Object(object)) => {
            Value::Object(project(object, fields.fields()))
        }
        (Type::List(list), Value::Array(items)) => Value::Array(
            items
                .iter()
                .map(|item| project_value(item, &list.element_field.field_type))
                .collect(),
        ),
        _ => value.clone(),
    }
}

/// Merges an object's fields into `fields`: `Some` with the new fields when something
/// changed.
fn merge_fields(
    fields: &[NestedFieldRef],
    value: &Map<String, Value>,
    path: &str,
    next_id: &mut i32,
) -> Result<Option<Vec<NestedFieldRef>>, Rejection> {
    let mut merged: Option<Vec<NestedFieldRef>> = None;
    for (name, field_value) in value {
        let field_path = if path.is_empty() {
            name.clone()
        } else {
            format!("{path}.{name}")
        };
        let current = merged.as_deref().unwrap_or(fields);
        match current.iter().position(|f| &f.name == name) {
            Some(index) => {
                let field = &current[index];
                if path.is_empty() && METADATA_COLUMNS.contains(&name.as_str()) {
                    return Err(Rejection(format!(
                        "field {field_path:?} collides with a metadata column"
                    )));
                }
                if let Some(widened) =
                    merge_type(&field.field_type, field_value, &field_path, next_id)?
                {
                    let mut updated = field.as_ref().clone();
                    updated.field_type = Box::new(widened);
                    let list = merged.get_or_insert_with(|| fields.to_vec());
                    list[index] = Arc::new(updated);
                }
            }
            None => {
                if let Some(field_type) = infer(field_value, &field_path, next_id)? {
                    let id = take_id(next_id, &field_path)?;
                    merged
                        .get_or_insert_with(|| fields.to_vec())
                        .push(Arc::new(NestedField::optional(id, name, field_type)));
                }
            }
        }
    }
    Ok(merged)
}

fn take_id(next_id: &mut i32, path: &str) -> Result<i32, Rejection> {
    let id = *next_id;
    *next_id = id
        .checked_add(1)
        .ok_or_else(|| Rejection(format!("field {path:?}: no field id left")))?;
    Ok(id)
}

/// A JSON number's kind: integer fitting int, long, or anything else as double.
enum Number {
    Int,
    Long,
    Double,
    Overflow,
}

fn number(n: &serde_json::Number) -> Number {
    match n.as_i64() {
        Some(i) if i32::try_from(i).is_ok() => Number::Int,
        Some(_) => Number::Long,
        None if n.is_u64() => Number::Overflow,
        None => Number::Double,
    }
}

fn mismatch(path: &str, column: &Type, value: &Value) -> Rejection {
    Rejection(format!(
        "field {path:?}: a JSON {} does not fit column type {column}",
        kind(value)
    ))
}

/// Merges a value into a column's type: `Some` with the widened (or grown) type when
/// it changed.
fn merge_type(
    column: &Type,
    value: &Value,
    path: &str,
    next_id: &mut i32,
) -> Result<Option<Type>, Rejection> {
    use PrimitiveType as P;
    let prim = |p: P| Ok(Some(Type::Primitive(p)));
    // A value without a type (null, `[]`, `{}`...) gave no column one when it was
    // first seen: whatever type its field took since, it is written as null.
    if typeless(value) && !same_shape(column, value) {
        return Ok(None);
    }
    match (column, value) {
        (_, Value::Null) => Ok(None),
        (Type::Primitive(P::Boolean), Value::Bool(_)) => Ok(None),
        (Type::Primitive(P::String), Value::String(_)) => Ok(None),
        (Type::Primitive(column_type), Value::Number(n)) => match (column_type, number(n)) {
            (_, Number::Overflow) => Err(Rejection(format!(
                "field {path:?}: integer {n} is beyond the range of long"
            ))),
            (P::Int, Number::Int) | (P::Long, Number::Int | Number::Long) => Ok(None),
            (P::Int, Number::Long) => prim(P::Long),
            (P::Double, _) => Ok(None),
            (P::Float, _) => match n.as_f64() {
                Some(f) if f.abs() <= f64::from(f32::MAX) => Ok(None),
                _ => prim(P::Double),
            },
            (P::Int | P::Long, Number::Double) => Err(Rejection(format!(
                "field {path:?}: {n} is not an integer, as its column ({column}) requires"
            ))),
            _ => Err(mismatch(path, column, value)),
        },
        (Type::List(list), Value::Array(items)) => {
            let mut element = list.element_field.field_type.as_ref().clone();
            let mut changed = false;
            for item in items {
                if item.is_null() && list.element_field.required {
                    return Err(Rejection(format!(
                        "field {path:?}: null element in a list of required elements"
                    )));
                }
                if let Some(widened) = merge_type(&element, item, &format!("{path}[]"), next_id)? {
                    element = widened;
                    changed = true;
                }
            }
            if !changed {
                return Ok(None);
            }
            let mut field = list.element_field.as_ref().clone();
            field.field_type = Box::new(element);
            Ok(Some(Type::List(ListType::new(Arc::new(field)))))
        }
        (Type::Struct(fields), Value::Object(object)) => {
            Ok(merge_fields(fields.fields(), object, path, next_id)?
                .map(|merged| Type::Struct(StructType::new(merged))))
        }
        _ => Err(mismatch(path, column, value)),
    }
}

/// The type of a field seen for the first time; `None` while it has none (null, `[]`,
/// `{}`, or a list of those).
fn infer(value: &Value, path: &str, next_id: &mut i32) -> Result<Option<Type>, Rejection> {
    use PrimitiveType as P;
    Ok(match value {
        Value::Null => None,
        Value::Bool(_) => Some(Type::Primitive(P::Boolean)),
        Value::String(_) => Some(Type::Primitive(P::String)),
        // Long from the start, never int: a column inferred as int would need widening
        // at the first large value.
        Value::Number(n) => Some(Type::Primitive(match number(n) {
            Number::Int | Number::Long => P::Long,
            Number::Double => P::Double,
            Number::Overflow => {
                return Err(Rejection(format!(
                    "field {path:?}: integer {n} is beyond the range of long"
                )));
            }
        })),
        Value::Object(object) => {
            let mut fields = Vec::new();
            for (name, field_value) in object {
                let field_path = format!("{path}.{name}");
                if let Some(field_type) = infer(field_value, &field_path, next_id)? {
                    let id = take_id(next_id, &field_path)?;
                    fields.push(Arc::new(NestedField::optional(id, name, field_type)));
                }
            }
            (!fields.is_empty()).then(|| Type::Struct(StructType::new(fields)))
        }
        Value::Array(items) => {
            let element_path = format!("{path}[]");
            // The element id comes first, as Iceberg numbers a list before its element.
            let mut element: Option<Type> = None;
            let mut reserved = *next_id;
            let element_id = take_id(&mut reserved, &element_path)?;
            let mut inner_ids = reserved;
            for item in items {
                element = match element {
                    None => infer(item, &element_path, &mut inner_ids)?,
                    Some(known) => Some(
                        merge_type(&known, item, &element_path, &mut inner_ids)?.unwrap_or(known),
                    ),
                };
            }
            element.map(|element| {
                *next_id = inner_ids;
                Type::List(ListType::new(Arc::new(NestedField::list_element(
                    element_id, element, false,
                ))))
            })
        }
    })
}

/// Builds the payload columns of values that fit `payload` (the Arrow form of the
/// table's payload fields, in table order), one row per value.
pub fn payload_columns(
    payload: &arrow_schema::SchemaRef,
    values: &[Map<String, Value>],
) -> Result<Vec<ArrayRef>, arrow_schema::ArrowError> {
    if payload.fields().is_empty() {
        return Ok(Vec::new());
    }
    let mut decoder = arrow_json::ReaderBuilder::new(payload.clone())
        .with_batch_size(values.len().max(1))
        .build_decoder()?;
    decoder.serialize(values)?;
    let batch = decoder
        .flush()?
        .unwrap_or_else(|| RecordBatch::new_empty(payload.clone()));
    Ok(batch.columns().to_vec())
}

#[cfg(test)]
mod tests;

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
//! until a value gives it one. Top-level fields become top-level columns; field names
//! become column names every catalog accepts (`crate::layout::column_for`: one whose
//! name is a Kafka metadata column, `offset`, `timestamp`..., is stored as
//! `value_<name>`; `a.b` as `a_b`), and two fields that would share a column make the
//! later record a dead letter.
//!
//! A record whose value cannot be written is rejected with the reason, for the
//! dead-letter table: a value that is not JSON, not an object, or whose field has a
//! type its column cannot take (a string in a long column, a fraction in an int
//! column, an integer beyond 64 bits), a field whose column holds another field, or a
//! field the table's column caps leave no room for ([`ColumnCaps`]).

mod conform;

pub use conform::{conform, project};

use std::sync::Arc;

use crate::layout::Placement;

/// [`crate::layout::place`], its error a rejection.
fn place<'a>(
    fields: &[NestedFieldRef],
    name: &'a str,
    top: bool,
    path: &str,
) -> Result<Placement<'a>, Rejection> {
    crate::layout::place(fields, name, top, path).map_err(Rejection)
}

use crate::layout::METADATA_COLUMNS;
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

/// Parses a record value into the JSON object whose fields become columns (named as
/// the producer named them: `place` finds their columns). A null value (a
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
        Value::Object(fields) => Ok(fields),
        other => Err(Rejection(format!(
            "value is a JSON {}, not an object",
            kind(&other)
        ))),
    }
}

/// A change event's row.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Change {
    /// The fields that become columns (the `after` image's; none for a delete).
    pub fields: Map<String, Value>,
    /// What the table's `value` column holds: the `after` image as JSON; `None`: the
    /// change deletes its key.
    pub image: Option<Vec<u8>>,
    /// The envelope's source position, when it has one.
    pub source: Option<kfs_plan::changes::SourcePosition>,
}

/// A value of a `cdc` table: a Debezium change event (JSON, with or without the schema
/// wrapper, `kfs_plan::changes::envelope`). Returns the object whose fields become
/// columns (the `after` image of a create, update or snapshot read; empty for a delete),
/// what the table's `value` column holds (the `after` image as JSON, or `None` for a
/// delete and for Debezium's tombstone, a null value, which delete the key) and the
/// envelope's source position. A value
/// that is no change event, a truncate, a message (`m`, no row) and an `after` image
/// that is no object are rejected, with the reason.
pub fn parse_change(value: Option<&[u8]>) -> Result<Change, Rejection> {
    let Some(bytes) = value else {
        return Ok(Change::default());
    };
    let parsed: Value = serde_json::from_slice(bytes).map_err(|e| {
        Rejection(format!(
            "value is not JSON: {e} (at byte {})",
            byte_of(bytes, e.line(), e.column())
        ))
    })?;
    let changed =
        kfs_plan::changes::row_after(kfs_plan::changes::envelope(&parsed), |after| match after {
            Value::Object(after) => {
                let image =
                    serde_json::to_vec(&after).map_err(|e| format!("the after image: {e}"))?;
                Ok((after, Some(image)))
            }
            other => Err(format!(
                "the after image is a JSON {}, not an object",
                kind(&other)
            )),
        })
        .map_err(Rejection)?;
    let (fields, image) = changed.row.unwrap_or_default();
    Ok(Change {
        fields,
        image,
        source: changed.source,
    })
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

/// How many fields a JSON table may have, and gain from one segment: a record whose
/// value would go beyond either is a dead letter with the reason, so that a producer
/// sending random field names cannot grow a schema without bound. Set per table by the
/// properties [`MAX_FIELDS_PROPERTY`] and [`MAX_NEW_FIELDS_PROPERTY`]. A registry
/// table has the first cap too ([`ColumnCaps::fields_within`]): a writer schema whose
/// columns would take it beyond is refused before any schema change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnCaps {
    /// Field ids a table may use in all (columns and nested fields, the record
    /// columns included).
    pub max_fields: i32,
    /// Field ids one segment's values may add.
    pub max_new_fields_per_segment: i32,
}

/// Table property: [`ColumnCaps::max_fields`].
pub const MAX_FIELDS_PROPERTY: &str = "kfs.json.max-fields";
/// Table property: [`ColumnCaps::max_new_fields_per_segment`].
pub const MAX_NEW_FIELDS_PROPERTY: &str = "kfs.json.max-new-fields-per-segment";

impl Default for ColumnCaps {
    fn default() -> Self {
        Self {
            max_fields: 1000,
            max_new_fields_per_segment: 100,
        }
    }
}

impl ColumnCaps {
    /// The caps `table`'s properties set (the defaults where a property is absent or
    /// not a positive number).
    pub fn of(table: &iceberg::table::Table) -> Self {
        let properties = table.metadata().properties();
        let number = |key: &str, default: i32| {
            properties
                .get(key)
                .and_then(|text| text.trim().parse::<i32>().ok())
                .filter(|n| *n > 0)
                .unwrap_or(default)
        };
        let defaults = Self::default();
        Self {
            max_fields: number(MAX_FIELDS_PROPERTY, defaults.max_fields),
            max_new_fields_per_segment: number(
                MAX_NEW_FIELDS_PROPERTY,
                defaults.max_new_fields_per_segment,
            ),
        }
    }
}

impl ColumnCaps {
    /// `Ok` when a table whose next field id is `next_id` (its fields grown by a
    /// writer schema) stays within [`ColumnCaps::max_fields`]; else why not.
    pub fn fields_within(&self, next_id: i32) -> Result<(), String> {
        let used = next_id.saturating_sub(1);
        if used > self.max_fields {
            return Err(format!(
                "its columns take the table to {used} fields, beyond its cap of {} fields ({MAX_FIELDS_PROPERTY})",
                self.max_fields
            ));
        }
        Ok(())
    }
}

/// A schema as it grows while a segment's values are scanned: the fields of the table
/// schema, and the next free field id.
#[derive(Debug, Clone)]
pub struct EvolvingSchema {
    fields: Vec<NestedFieldRef>,
    first_id: i32,
    next_id: i32,
    changed: bool,
    declared: bool,
    caps: ColumnCaps,
}

impl EvolvingSchema {
    /// Starts from `schema`; new fields get ids above `last_column_id` (the table's).
    pub fn new(schema: &Schema, last_column_id: i32) -> Self {
        let next_id = last_column_id.max(schema.highest_field_id()) + 1;
        Self {
            fields: schema.as_struct().fields().to_vec(),
            first_id: next_id,
            next_id,
            changed: false,
            declared: false,
            caps: ColumnCaps::default(),
        }
    }

    /// For a table whose columns were declared: fields without a column are left out
    /// (never added); declared columns still widen.
    pub fn declared(mut self) -> Self {
        self.declared = true;
        self
    }

    /// With these column caps (the defaults otherwise).
    pub fn with_caps(mut self, caps: ColumnCaps) -> Self {
        self.caps = caps;
        self
    }

    /// Takes in a value's fields: adds the columns it needs and widens the ones it
    /// overflows, unless one of its fields cannot be reconciled with its column or the
    /// columns it needs go beyond the caps; then the schema is left as it was and the
    /// reason returned.
    pub fn absorb(&mut self, value: &Map<String, Value>) -> Result<(), Rejection> {
        let mut next_id = self.next_id;
        let projected;
        let value = if self.declared {
            projected = project(value, &self.fields);
            &projected
        } else {
            value
        };
        if let Some(fields) = merge_fields(&self.fields, value, None, &mut next_id)? {
            let used = next_id - 1;
            if used > self.caps.max_fields {
                return Err(Rejection(format!(
                    "value needs {} new field(s), beyond the table's cap of {} fields ({MAX_FIELDS_PROPERTY})",
                    next_id - self.next_id,
                    self.caps.max_fields
                )));
            }
            if next_id - self.first_id > self.caps.max_new_fields_per_segment {
                return Err(Rejection(format!(
                    "value needs {} new field(s), beyond the cap of {} new fields per segment ({MAX_NEW_FIELDS_PROPERTY})",
                    next_id - self.next_id,
                    self.caps.max_new_fields_per_segment
                )));
            }
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
    match merge_fields(schema.as_struct().fields(), value, None, &mut next_id)? {
        None => Ok(()),
        Some(_) => Err(Rejection(format!(
            "value needs a column (or a wider one) the table's schema does not have: the segment's values went beyond the column caps ({MAX_FIELDS_PROPERTY}, {MAX_NEW_FIELDS_PROPERTY}) before this one, or the schema changed after the segment was scanned"
        ))),
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

/// Merges an object's fields into `fields` (the top-level columns when `parent` is
/// `None`, else the columns of the struct at path `parent`): `Some` with the new fields
/// when something changed.
fn merge_fields(
    fields: &[NestedFieldRef],
    value: &Map<String, Value>,
    parent: Option<&str>,
    next_id: &mut i32,
) -> Result<Option<Vec<NestedFieldRef>>, Rejection> {
    let top = parent.is_none();
    let mut merged: Option<Vec<NestedFieldRef>> = None;
    for (name, field_value) in value {
        let field_path = match parent {
            None => name.clone(),
            Some(path) => format!("{path}.{name}"),
        };
        let current = merged.as_deref().unwrap_or(fields);
        let placement = match place(current, name, top, &field_path) {
            Ok(placement) => placement,
            // A value without a type carries no data: written as null, or left out.
            Err(_) if typeless(field_value) => continue,
            Err(rejection) => return Err(rejection),
        };
        match placement {
            Placement::Column(index) => {
                let field = &current[index];
                if top && METADATA_COLUMNS.contains(&field.name.as_str()) {
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
            Placement::New { name: column, doc } => {
                if let Some(field_type) = infer(field_value, &field_path, next_id)? {
                    let id = take_id(next_id, &field_path)?;
                    merged
                        .get_or_insert_with(|| fields.to_vec())
                        .push(new_field(id, &column, field_type, doc));
                }
            }
        }
    }
    Ok(merged)
}

/// A new optional column, with the doc recording its field's name when they differ.
pub(crate) fn new_field(
    id: i32,
    name: &str,
    field_type: Type,
    doc: Option<String>,
) -> NestedFieldRef {
    let field = NestedField::optional(id, name, field_type);
    Arc::new(match doc {
        Some(doc) => field.with_doc(doc),
        None => field,
    })
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
            Ok(merge_fields(fields.fields(), object, Some(path), next_id)?
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
                let Placement::New { name: column, doc } =
                    place(&fields, name, false, &field_path)?
                else {
                    return Err(Rejection(format!(
                        "field {field_path:?} maps to a column another field of its object holds"
                    )));
                };
                if let Some(field_type) = infer(field_value, &field_path, next_id)? {
                    let id = take_id(next_id, &field_path)?;
                    fields.push(new_field(id, &column, field_type, doc));
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

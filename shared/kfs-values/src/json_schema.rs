//! JSON values of a schema registry whose schemas are JSON Schema, as pure logic: the
//! table form of a schema ([`Shape`]), and each value as [`Cell`]s of the table's
//! columns.
//!
//! | JSON Schema | Iceberg |
//! |---|---|
//! | `boolean`, `integer`, `number`, `string` (and a string `enum`) | boolean, long, double, string |
//! | `integer` with `format: int32` (or Kafka Connect's `connect.type` `int8`, `int16`, `int32`) | int |
//! | `number` with `format: float` (or `connect.type: float32`) | float |
//! | `object` with `properties` | struct (its properties by name, in name order) |
//! | `object` with only `additionalProperties` (a schema) | map with string keys |
//! | `array` with `items` | list |
//! | `type: [T, "null"]`, `oneOf`/`anyOf` of `null` and one schema | that type (every column is optional) |
//! | `$ref` to `#/definitions/…` or `#/$defs/…` | what it refers to |
//!
//! A schema whose top level is not an object is one field, `value`
//! (`cells::SCALAR_FIELD`).
//!
//! Nothing is dropped or changed: a value holding a property its schema does not
//! declare (JSON Schema allows them unless `additionalProperties` is `false`; the
//! table has no column for them), or a number beyond its column's range (an int
//! beyond 32 bits, a `format: float` beyond a float's range, `crate::fit`), is a
//! dead letter naming the property and the reason, as Kafka Connect's JSON Schema
//! converter fails on them.
//!
//! Not mapped (the writer schema's records go to the dead-letter table with the
//! reason): a schema without a type, unions of several non-null types, references
//! outside the document, recursive schemas.

use super::bounds::{ShapeBudget, check_json};
use super::cells::{Cell, SCALAR_FIELD, Shape, list_cell, map_cell, struct_cell};
use super::fit::fit;
use arrow_schema::DataType;
use iceberg::spec::PrimitiveType;
use serde_json::Value;

/// Deepest nesting of a writer schema (a recursive schema never ends).
const MAX_DEPTH: usize = 32;

/// A JSON Schema writer schema, with its table form.
#[derive(Debug)]
pub struct JsonSchemaWriter {
    /// Its top-level properties as columns.
    pub shape: Vec<(String, Shape)>,
    /// Its top level is not an object: a value is the one field [`SCALAR_FIELD`].
    scalar: bool,
}

impl JsonSchemaWriter {
    /// Parses `text`, a JSON Schema whose top level is an object with properties.
    pub fn parse(text: &str) -> Result<Self, String> {
        let root: Value =
            serde_json::from_str(text).map_err(|e| format!("JSON Schema does not parse: {e}"))?;
        let mut budget = ShapeBudget::new("JSON Schema");
        match shape_of(&root, &root, (0, &mut budget))? {
            Some(Shape::Struct(fields)) => Ok(Self {
                shape: fields,
                scalar: false,
            }),
            Some(other) => Ok(Self {
                shape: vec![(SCALAR_FIELD.to_owned(), other)],
                scalar: true,
            }),
            None => Err("the JSON Schema is null: its values hold nothing".into()),
        }
    }

    /// Decodes one payload (the JSON text after its framing) into the row of `columns`
    /// (`top`: the table's payload columns, whose names may differ from the
    /// properties'; else a struct column's fields, a decoded key's).
    pub fn decode(&self, payload: &[u8], columns: &DataType, top: bool) -> Result<Cell, String> {
        self.decode_counted(payload, columns, top)
            .map(|(cell, _)| cell)
    }

    /// [`JsonSchemaWriter::decode`], with the items the value holds (at most): the
    /// text is walked first (`bounds::check_json`), its items and depth bounded before
    /// it is parsed.
    pub fn decode_counted(
        &self,
        payload: &[u8],
        columns: &DataType,
        top: bool,
    ) -> Result<(Cell, u64), String> {
        let (value, items) = read(payload)?;
        let value = if self.scalar {
            Value::Object([(SCALAR_FIELD.to_owned(), value)].into_iter().collect())
        } else {
            value
        };
        let Value::Object(properties) = &value else {
            return Err("JSON payload is not an object".into());
        };
        undeclared(properties, &self.shape).map_err(|path| {
            format!(
                "property {path:?} is not declared by the schema (or is declared null): the table has no column for it"
            )
        })?;
        cell(&value, columns, top).map(|cell| (cell, items))
    }

    /// Decodes one payload, a Debezium change event (`kfs_plan::changes::envelope`),
    /// into the row of the table's payload `columns` its `after` image gives, `None`
    /// for a delete, with the items the value holds (at most); a message or truncate
    /// event, a value that is no envelope, or an image holding a property its schema
    /// does not declare is refused with the reason. The
    /// row comes with the envelope's source position.
    pub fn decode_change(
        &self,
        payload: &[u8],
        columns: &DataType,
    ) -> Result<(kfs_plan::changes::ChangedRow<Cell>, u64), String> {
        let (value, items) = read(payload)?;
        kfs_plan::changes::row_after(kfs_plan::changes::envelope(&value), |after| {
            let (Value::Object(properties), Some((_, Shape::Struct(declared)))) =
                (&after, self.shape.iter().find(|(name, _)| name == "after"))
            else {
                return Err("the after image is no object its schema declares".into());
            };
            undeclared(properties, declared).map_err(|path| {
                format!("after image property {path:?} is not declared by the schema: the table has no column for it")
            })?;
            cell(&after, columns, true)
        })
        .map(|row| (row, items))
    }
}

/// The JSON value a payload holds, with its items (at most): the text is walked first
/// (`bounds::check_json`), its items and depth bounded before it is parsed.
fn read(payload: &[u8]) -> Result<(Value, u64), String> {
    let items = check_json(payload)?;
    let value = serde_json::from_slice(payload).map_err(|e| {
        format!(
            "JSON payload does not parse: {e} (line {}, column {})",
            e.line(),
            e.column()
        )
    })?;
    Ok((value, items))
}

/// The path of the first property of `properties` (an object of the table form
/// `fields`) that holds a value its schema does not declare (nested ones included:
/// `s.x`, `list[].x`); a null one holds nothing and is allowed. JSON Schema allows
/// undeclared properties unless `additionalProperties` is `false`, but only declared
/// ones have columns: as Kafka Connect's JSON Schema converter fails on unknown
/// properties, the record is a dead letter naming it rather than losing it.
fn undeclared(
    properties: &serde_json::Map<String, Value>,
    fields: &[(String, Shape)],
) -> Result<(), String> {
    for (name, value) in properties {
        match fields.iter().find(|(declared, _)| declared == name) {
            Some((_, shape)) => {
                undeclared_within(value, shape).map_err(|path| format!("{name}{path}"))?;
            }
            None if value.is_null() => {}
            None => return Err(name.clone()),
        }
    }
    Ok(())
}

/// [`undeclared`] within one value of table form `shape`; the path is relative
/// (`.x`, `[].x`).
fn undeclared_within(value: &Value, shape: &Shape) -> Result<(), String> {
    match (shape, value) {
        (Shape::Struct(fields), Value::Object(properties)) => {
            undeclared(properties, fields).map_err(|path| format!(".{path}"))
        }
        (Shape::List(item), Value::Array(items)) => items
            .iter()
            .try_for_each(|v| undeclared_within(v, item))
            .map_err(|path| format!("[]{path}")),
        (Shape::Map(values), Value::Object(entries)) => entries.iter().try_for_each(|(key, v)| {
            undeclared_within(v, values).map_err(|path| format!(".{key}{path}"))
        }),
        _ => Ok(()),
    }
}

/// The schema `reference` (`#/definitions/x`, `#/$defs/x`) points at in `root`.
fn resolve<'a>(root: &'a Value, reference: &str) -> Result<&'a Value, String> {
    let pointer = reference
        .strip_prefix('#')
        .ok_or_else(|| format!("JSON Schema reference {reference:?} leaves the document"))?;
    root.pointer(pointer)
        .ok_or_else(|| format!("JSON Schema reference {reference:?} points at nothing"))
}

/// The table form of `schema` (within `root`); `None` for `null` (no column). Every
/// property, element and map it visits takes from `budget`, so the computation ends
/// early for a schema whose form is too large, however its `$ref`s multiply.
fn shape_of(
    schema: &Value,
    root: &Value,
    (depth, budget): (usize, &mut ShapeBudget),
) -> Result<Option<Shape>, String> {
    if depth > MAX_DEPTH {
        return Err(format!(
            "JSON Schema nests deeper than {MAX_DEPTH} levels (a recursive schema has no table form)"
        ));
    }
    let Some(object) = schema.as_object() else {
        return Err(format!("JSON Schema {schema} is not an object"));
    };
    if let Some(Value::String(reference)) = object.get("$ref") {
        return shape_of(resolve(root, reference)?, root, (depth + 1, budget));
    }
    for union in ["oneOf", "anyOf"] {
        if let Some(Value::Array(options)) = object.get(union) {
            let kept: Vec<&Value> = options
                .iter()
                .filter(|o| o.get("type").and_then(Value::as_str) != Some("null"))
                .collect();
            return match kept.as_slice() {
                [] => Ok(None),
                [only] => shape_of(only, root, (depth + 1, budget)),
                _ => Err(format!(
                    "JSON Schema {union} of {} non-null schemas has no table form (only null and one schema)",
                    kept.len()
                )),
            };
        }
    }
    let kind: &str = match object.get("type") {
        Some(Value::String(kind)) => kind,
        Some(Value::Array(kinds)) => {
            let mut kept = kinds
                .iter()
                .filter_map(Value::as_str)
                .filter(|k| *k != "null");
            match (kept.next(), kept.next()) {
                (None, _) => return Ok(None),
                (Some(only), None) => only,
                (Some(_), Some(_)) => {
                    return Err(format!(
                        "JSON Schema type {kinds:?} of several non-null types has no table form"
                    ));
                }
            }
        }
        None if object.get("enum").is_some() => "string",
        None if object.get("properties").is_some() => "object",
        _ => return Err(format!("JSON Schema {schema} has no type")),
    };
    let primitive = |p| Ok(Some(Shape::Primitive(p)));
    match kind {
        "null" => Ok(None),
        "boolean" => primitive(PrimitiveType::Boolean),
        // A narrower width, as OpenAPI's `format` or Kafka Connect's JSON Schema
        // converter (`connect.type`) declares it: a later version may widen it.
        "integer" if narrow(object, &["int32"], &["int8", "int16", "int32"]) => {
            primitive(PrimitiveType::Int)
        }
        "integer" => primitive(PrimitiveType::Long),
        "number" if narrow(object, &["float"], &["float32"]) => primitive(PrimitiveType::Float),
        "number" => primitive(PrimitiveType::Double),
        "string" => primitive(PrimitiveType::String),
        "array" => match object.get("items") {
            Some(items) => {
                budget.field()?;
                Ok(shape_of(items, root, (depth + 1, budget))?
                    .map(|item| Shape::List(Box::new(item))))
            }
            None => Err("JSON Schema array without items has no table form".into()),
        },
        "object" => match (object.get("properties"), object.get("additionalProperties")) {
            (Some(Value::Object(properties)), _) => {
                let mut fields = Vec::with_capacity(properties.len());
                for (name, property) in properties {
                    budget.field()?;
                    if let Some(shape) = shape_of(property, root, (depth + 1, &mut *budget))
                        .map_err(|e| format!("property {name}: {e}"))?
                    {
                        fields.push((name.clone(), shape));
                    }
                }
                Ok(Some(Shape::Struct(fields)))
            }
            (_, Some(values @ Value::Object(_))) => {
                budget.field()?;
                budget.field()?;
                Ok(shape_of(values, root, (depth + 1, budget))?.map(|v| Shape::Map(Box::new(v))))
            }
            _ => Err(
                "JSON Schema object without properties nor an additionalProperties schema has no table form"
                    .into(),
            ),
        },
        other => Err(format!("JSON Schema type {other:?} is not known")),
    }
}

/// Whether `object` declares one of the narrow `formats` or Kafka Connect `types`.
fn narrow(object: &serde_json::Map<String, Value>, formats: &[&str], types: &[&str]) -> bool {
    let is = |key: &str, names: &[&str]| {
        object
            .get(key)
            .and_then(Value::as_str)
            .is_some_and(|name| names.contains(&name))
    };
    is("format", formats) || is("connect.type", types)
}

/// What a value is, for messages.
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

/// `value` as a cell of a column of type `data_type` (`top`: a top-level column); a
/// value beyond the column's range is refused ([`fit`]), never changed.
fn cell(value: &Value, data_type: &DataType, top: bool) -> Result<Cell, String> {
    let refused = || {
        Err(format!(
            "a JSON {} cannot be written to a {data_type} column",
            kind(value)
        ))
    };
    let converted = match (data_type, value) {
        (_, Value::Null) => Cell::Null,
        (DataType::Boolean, Value::Bool(b)) => Cell::Bool(*b),
        (DataType::Int64 | DataType::Int32, Value::Number(n)) => match n.as_i64() {
            Some(i) => Cell::Int(i),
            None if n.is_u64() => return Err(format!("{n} is beyond the range of a long column")),
            None => {
                return Err(format!(
                    "JSON number {n} is not an integer, as a {data_type} column requires"
                ));
            }
        },
        (DataType::Float64 | DataType::Float32, Value::Number(n)) => match n.as_f64() {
            Some(f) => Cell::Float(f),
            None => return refused(),
        },
        (DataType::Utf8 | DataType::LargeUtf8, Value::String(s)) => Cell::Text(s.clone()),
        (DataType::Struct(fields), Value::Object(properties)) => {
            let members: Vec<(&str, &Value)> = properties
                .iter()
                .map(|(name, v)| (name.as_str(), v))
                .collect();
            struct_cell(
                fields,
                &members,
                (top, "property"),
                Value::is_null,
                |v, t| cell(v, t, false),
            )?
        }
        (DataType::List(item) | DataType::LargeList(item), Value::Array(items)) => {
            list_cell(item, items, |v, t| cell(v, t, false))?
        }
        (DataType::Map(entries, _), Value::Object(map)) => map_cell(
            entries,
            map.iter().map(|(k, v)| (k.as_str(), v)).collect(),
            |v, t| cell(v, t, false),
        )?,
        _ => return refused(),
    };
    fit(converted, data_type)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_map_to_shapes_or_say_why_not() -> Result<(), String> {
        let writer = JsonSchemaWriter::parse(
            r##"{"type": "object", "properties": {
                "id": {"type": "integer"},
                "note": {"type": ["string", "null"]},
                "amount": {"oneOf": [{"type": "null"}, {"type": "number"}]},
                "tags": {"type": "array", "items": {"type": "string"}},
                "attrs": {"type": "object", "additionalProperties": {"type": "integer"}},
                "ship": {"$ref": "#/definitions/Ship"},
                "kind": {"enum": ["A", "B"]}
            }, "definitions": {"Ship": {"type": "object", "properties": {"city": {"type": "string"}}}}}"##,
        )?;
        let names: Vec<&str> = writer.shape.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["amount", "attrs", "id", "kind", "note", "ship", "tags"]
        );
        // A schema that is not an object is one field.
        let scalar = JsonSchemaWriter::parse(r#"{"type": "string"}"#)?;
        assert_eq!(
            scalar.shape,
            [(
                SCALAR_FIELD.to_owned(),
                Shape::Primitive(PrimitiveType::String)
            )]
        );
        for refused in [
            r#"{"type": "null"}"#,
            r#"{"type": "object", "properties": {"u": {"type": ["integer", "string"]}}}"#,
            r##"{"type": "object", "properties": {"n": {"$ref": "#"}}}"##,
            r#"{"type": "object", "properties": {"x": {}}}"#,
            r#"{"type": "object""#,
        ] {
            assert!(JsonSchemaWriter::parse(refused).is_err(), "{refused}");
        }
        Ok(())
    }

    #[test]
    fn declared_widths_are_kept() -> Result<(), String> {
        let writer = JsonSchemaWriter::parse(
            r#"{"type": "object", "properties": {
                "a": {"type": "integer", "format": "int32"},
                "b": {"type": "integer", "connect.type": "int16"},
                "c": {"type": "integer", "format": "int64"},
                "d": {"type": "number", "format": "float"},
                "e": {"type": "number", "connect.type": "float64"}
            }}"#,
        )?;
        let types: Vec<&Shape> = writer.shape.iter().map(|(_, shape)| shape).collect();
        let p = |p| Shape::Primitive(p);
        assert_eq!(
            types,
            [
                &p(PrimitiveType::Int),
                &p(PrimitiveType::Int),
                &p(PrimitiveType::Long),
                &p(PrimitiveType::Float),
                &p(PrimitiveType::Double)
            ]
        );
        Ok(())
    }

    proptest::proptest! {
        /// Any bytes, and any JSON, decode into a row or are refused; never a panic.
        #[test]
        fn any_payload_decodes_or_is_refused(
            payload in proptest::collection::vec(proptest::num::u8::ANY, 0..100),
            n in proptest::num::i64::ANY,
            score in proptest::num::f64::ANY,
        ) {
            let fail = proptest::test_runner::TestCaseError::fail;
            let writer = JsonSchemaWriter::parse(
                r#"{"type": "object", "properties": {"n": {"type": "integer"},
                    "score": {"type": "number"}, "tags": {"type": "array", "items": {"type": "string"}},
                    "m": {"type": "object", "additionalProperties": {"type": "integer"}}}}"#,
            )
            .map_err(fail)?;
            let (fields, row_type) = super::super::cells::new_table_row(&writer.shape).map_err(fail)?;
            let json = format!(r#"{{"n": {n}, "score": {score:?}, "tags": ["a"], "m": {{"k": {n}}}}}"#);
            for bytes in [payload.as_slice(), json.as_bytes()] {
                if let Ok(row) = writer.decode(bytes, &row_type, true) {
                    super::super::cells::write_row(&fields, &row).map_err(fail)?;
                }
            }
        }
    }
}

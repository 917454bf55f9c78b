//! A JSON value that fits a table's schema, made ready for its Arrow columns
//! (`conform`: keyed by column names, stale typeless values null) or cut to the
//! columns a table has (`project`).

use iceberg::spec::{NestedFieldRef, Type};
use serde_json::{Map, Value};

use super::{place, same_shape, typeless};
use crate::layout::Placement;

/// A value that [`fits`](super::fits) the schema, made ready to become its Arrow columns: its
/// fields keyed by their columns' names (`place`), every value without a type whose
/// column took another shape meanwhile null, and fields without a column (only ever
/// typeless) left out.
pub fn conform(value: Map<String, Value>, fields: &[NestedFieldRef]) -> Map<String, Value> {
    conform_object(value, fields, true)
}

fn conform_object(
    value: Map<String, Value>,
    fields: &[NestedFieldRef],
    top: bool,
) -> Map<String, Value> {
    value
        .into_iter()
        .filter_map(|(name, field_value)| {
            let Ok(Placement::Column(index)) = place(fields, &name, top, &name) else {
                return None;
            };
            let field = &fields[index];
            Some((
                field.name.clone(),
                conform_value(field_value, &field.field_type),
            ))
        })
        .collect()
}

fn conform_value(value: Value, column: &Type) -> Value {
    if typeless(&value) && !same_shape(column, &value) {
        return Value::Null;
    }
    match (column, value) {
        (Type::Struct(fields), Value::Object(object)) => {
            Value::Object(conform_object(object, fields.fields(), false))
        }
        (Type::List(list), Value::Array(items)) => Value::Array(
            items
                .into_iter()
                .map(|item| conform_value(item, &list.element_field.field_type))
                .collect(),
        ),
        (_, value) => value,
    }
}

/// The part of a value that `fields` has columns for, nested structs (and structs in
/// lists) alike: what a table with declared columns keeps of it. Fields keep the
/// producer's names.
pub fn project(value: &Map<String, Value>, fields: &[NestedFieldRef]) -> Map<String, Value> {
    project_object(value, fields, true)
}

fn project_object(
    value: &Map<String, Value>,
    fields: &[NestedFieldRef],
    top: bool,
) -> Map<String, Value> {
    value
        .iter()
        .filter_map(|(name, field_value)| {
            let Ok(Placement::Column(index)) = place(fields, name, top, name) else {
                return None;
            };
            Some((
                name.clone(),
                project_value(field_value, &fields[index].field_type),
            ))
        })
        .collect()
}

fn project_value(value: &Value, column: &Type) -> Value {
    match (column, value) {
        (Type::Struct(fields), Value::Object(object)) => {
            Value::Object(project_object(object, fields.fields(), false))
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

//! Avro values of a schema registry, as pure logic: the table form of an Avro writer
//! schema ([`Shape`]), and each decoded value as [`Cell`]s of the table's columns.
//!
//! | Avro | Iceberg |
//! |---|---|
//! | `boolean`, `int`, `long`, `float`, `double`, `string`, `bytes` | same |
//! | `enum` | string (the symbol) |
//! | `fixed(n)` | fixed(n) |
//! | `record` | struct (fields by name) |
//! | `array`, `map` | list, map with string keys |
//! | union of `null` and one type | that type (every column is optional) |
//! | `date`, `time-millis`, `time-micros` | date, time (µs) |
//! | `timestamp-millis`, `timestamp-micros` | timestamptz (µs) |
//! | `local-timestamp-millis`, `local-timestamp-micros` | timestamp (µs) |
//! | `decimal(p, s)` (p ≤ 38) | decimal(p, s) |
//! | `uuid` | uuid |
//!
//! A value beyond its column's range (a decimal with more digits than its precision, a
//! time outside the day) is a dead letter, never another value (`crate::fit`).
//!
//! A schema whose top level is not a record (a `"string"` key's) is one field,
//! `value` (`cells::SCALAR_FIELD`).
//!
//! Not mapped (the writer schema's records go to the dead-letter table with the
//! reason): unions of several non-null types, nanosecond timestamps, `duration`,
//! decimals beyond 38 digits or without a scale, recursive records.

mod bounds;
pub mod debezium;

use crate::bounds::ShapeBudget;
use crate::cells::{Cell, SCALAR_FIELD, Shape, list_cell, map_cell, struct_cell};
use crate::fit::fit;
use apache_avro::Schema;
use apache_avro::types::Value;
use arrow_schema::{DataType, TimeUnit};
use bounds::{AvroNames, check_avro};
use iceberg::spec::PrimitiveType;

/// Deepest nesting of a writer schema (a recursive record never ends).
const MAX_DEPTH: usize = 32;

/// Largest allocation the Avro decoder makes for one length it reads (a string,
/// bytes): a hostile payload claiming a gigabyte string must not take the memory of
/// the conversions beside it. No value of a batch the segment decoder accepts is
/// larger than this (a value is part of one record of one batch).
const MAX_AVRO_ALLOCATION: usize = 64 << 20;

/// An Avro writer schema, with its table form.
pub struct AvroWriter {
    /// The schema values are decoded with.
    pub schema: Schema,
    /// The schemas its registry references define (named types it uses).
    pub references: Vec<Schema>,
    /// Its top-level fields as columns.
    pub shape: Vec<(String, Shape)>,
    /// Its top level is not a record: a value is the one field [`SCALAR_FIELD`].
    scalar: bool,
    /// Its named types and those of its references, by full name: what a payload is
    /// walked with before it is decoded.
    names: AvroNames,
    /// The schema with its names resolved once, when it references no other: a
    /// reader of bare datums (a single-object reader whose header is empty).
    resolved: Option<apache_avro::GenericSingleObjectReader>,
}

impl std::fmt::Debug for AvroWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AvroWriter")
            .field("schema", &self.schema)
            .field("references", &self.references.len())
            .finish_non_exhaustive()
    }
}

/// No header: values are bare datums (the registry's framing is read before).
struct NoHeader;

impl apache_avro::headers::HeaderBuilder for NoHeader {
    fn build_header(&self) -> Vec<u8> {
        Vec::new()
    }
}

impl AvroWriter {
    /// Parses `text`, an Avro schema whose top level is a record, with the texts of
    /// the schemas it references (named types it uses).
    pub fn parse(text: &str, references: &[(String, String)]) -> Result<Self, String> {
        // Process-wide, the first call's value stays.
        apache_avro::util::max_allocation_bytes(MAX_AVRO_ALLOCATION);
        let (schema, references) =
            Schema::parse_str_with_list(text, references.iter().map(|(_, text)| text))
                .map_err(|e| format!("Avro schema does not parse: {e}"))?;
        let all: Vec<&Schema> = std::iter::once(&schema).chain(&references).collect();
        let names = apache_avro::schema::ResolvedSchema::try_from(all)
            .map_err(|e| format!("Avro schema does not resolve: {e}"))?;
        let mut budget = ShapeBudget::new("Avro");
        let (shape, scalar) = match shape_of(&schema, names.get_names(), (0, &mut budget))? {
            Some(Shape::Struct(fields)) => (fields, false),
            Some(other) => (vec![(SCALAR_FIELD.to_owned(), other)], true),
            None => return Err("the Avro schema is null: its values hold nothing".into()),
        };
        let names: AvroNames = names
            .get_names()
            .iter()
            .map(|(name, schema)| (name.clone(), (*schema).clone()))
            .collect();
        let resolved = references
            .is_empty()
            .then(|| {
                apache_avro::GenericSingleObjectReader::new_with_header_builder(
                    schema.clone(),
                    NoHeader,
                )
                .ok()
            })
            .flatten();
        Ok(Self {
            schema,
            references,
            shape,
            scalar,
            names,
            resolved,
        })
    }

    /// Decodes one payload (the value after its framing) into the row of `columns`
    /// (`top`: the table's payload columns, whose names may differ from the fields';
    /// else a struct column's fields, a decoded key's).
    pub fn decode(&self, payload: &[u8], columns: &DataType, top: bool) -> Result<Cell, String> {
        self.decode_counted(payload, columns, top)
            .map(|(cell, _)| cell)
    }

    /// [`AvroWriter::decode`], with the items the value holds.
    pub fn decode_counted(
        &self,
        payload: &[u8],
        columns: &DataType,
        top: bool,
    ) -> Result<(Cell, u64), String> {
        let (value, items) = self.read(payload)?;
        let cell = if self.scalar {
            let record = Value::Record(vec![(SCALAR_FIELD.to_owned(), value)]);
            cell(&record, columns, top)
        } else {
            cell(&value, columns, top)
        };
        cell.map(|cell| (cell, items))
    }

    /// Decodes one payload, a Debezium change event (`debezium`), into the row of the
    /// table's payload `columns` its `after` image gives, `None` for a delete, with
    /// the items the value holds; a message or truncate event, or a value that is no
    /// envelope, is refused with the reason. The
    /// row comes with the envelope's source position.
    pub fn decode_change(
        &self,
        payload: &[u8],
        columns: &DataType,
    ) -> Result<(kfs_plan::changes::ChangedRow<Cell>, u64), String> {
        let (value, items) = self.read(payload)?;
        kfs_plan::changes::row_after(debezium::envelope(&value), |after| {
            cell(&after, columns, true)
        })
        .map(|row| (row, items))
    }

    /// The value a payload holds, with its items. The payload is walked first
    /// (`bounds`): nothing it declares is allocated before it is checked against the
    /// bytes it has.
    fn read(&self, payload: &[u8]) -> Result<(Value, u64), String> {
        let items = check_avro(&self.schema, &self.names, payload)
            .map_err(|e| format!("Avro payload does not decode: {e}"))?;
        let mut reader = payload;
        let value = match &self.resolved {
            // Names resolved once, not per value.
            Some(resolved) => resolved.read_value(&mut reader),
            None => apache_avro::from_avro_datum_schemata(
                &self.schema,
                std::iter::once(&self.schema)
                    .chain(&self.references)
                    .collect(),
                &mut reader,
                None,
            ),
        }
        .map_err(|e| format!("Avro payload does not decode: {e}"))?;
        if !reader.is_empty() {
            return Err(format!(
                "Avro payload has {} bytes left after its value (at byte {})",
                reader.len(),
                payload.len() - reader.len()
            ));
        }
        Ok((value, items))
    }
}

type Names<'a> = std::collections::HashMap<apache_avro::schema::Name, &'a Schema>;

/// The table form of `schema`; `None` for `null` (no column). Every field, element
/// and map it visits takes from `budget`, so the computation ends early for a schema
/// whose form is too large, however its named types multiply.
fn shape_of(
    schema: &Schema,
    names: &Names<'_>,
    (depth, budget): (usize, &mut ShapeBudget),
) -> Result<Option<Shape>, String> {
    if depth > MAX_DEPTH {
        return Err(format!(
            "Avro schema nests deeper than {MAX_DEPTH} levels (a recursive record has no table form)"
        ));
    }
    let primitive = |p| Ok(Some(Shape::Primitive(p)));
    match schema {
        Schema::Null => Ok(None),
        Schema::Boolean => primitive(PrimitiveType::Boolean),
        Schema::Int => primitive(PrimitiveType::Int),
        Schema::Long => primitive(PrimitiveType::Long),
        Schema::Float => primitive(PrimitiveType::Float),
        Schema::Double => primitive(PrimitiveType::Double),
        Schema::Bytes => primitive(PrimitiveType::Binary),
        Schema::String | Schema::Enum(_) => primitive(PrimitiveType::String),
        Schema::Fixed(fixed) => primitive(PrimitiveType::Fixed(fixed.size as u64)),
        Schema::Uuid => primitive(PrimitiveType::Uuid),
        Schema::Date => primitive(PrimitiveType::Date),
        Schema::TimeMillis | Schema::TimeMicros => primitive(PrimitiveType::Time),
        Schema::TimestampMillis | Schema::TimestampMicros => primitive(PrimitiveType::Timestamptz),
        Schema::LocalTimestampMillis | Schema::LocalTimestampMicros => {
            primitive(PrimitiveType::Timestamp)
        }
        Schema::Decimal(decimal)
            if decimal.precision <= 38 && decimal.scale <= decimal.precision =>
        {
            primitive(PrimitiveType::Decimal {
                precision: decimal.precision as u32,
                scale: decimal.scale as u32,
            })
        }
        Schema::Decimal(decimal) => Err(format!(
            "Avro decimal({}, {}) is beyond Iceberg's 38 digits",
            decimal.precision, decimal.scale
        )),
        Schema::Union(union) => {
            let types: Vec<&Schema> = union
                .variants()
                .iter()
                .filter(|s| !matches!(s, Schema::Null))
                .collect();
            match types.as_slice() {
                [] => Ok(None),
                [only] => shape_of(only, names, (depth + 1, budget)),
                _ => Err(format!(
                    "Avro union of {} non-null types has no table form (only a union of null and one type)",
                    types.len()
                )),
            }
        }
        Schema::Record(record) => {
            let mut fields = Vec::with_capacity(record.fields.len());
            for field in &record.fields {
                budget.field()?;
                if let Some(shape) = shape_of(&field.schema, names, (depth + 1, &mut *budget))
                    .map_err(|e| format!("field {}: {e}", field.name))?
                {
                    fields.push((field.name.clone(), shape));
                }
            }
            Ok(Some(Shape::Struct(fields)))
        }
        Schema::Array(array) => {
            budget.field()?;
            Ok(shape_of(&array.items, names, (depth + 1, budget))?
                .map(|items| Shape::List(Box::new(items))))
        }
        Schema::Map(map) => {
            budget.field()?;
            budget.field()?;
            Ok(shape_of(&map.types, names, (depth + 1, budget))?
                .map(|values| Shape::Map(Box::new(values))))
        }
        Schema::Ref { name } => match names.get(name) {
            Some(named) => shape_of(named, names, (depth + 1, budget)),
            None => Err(format!("Avro schema refers to unknown type {name}")),
        },
        Schema::BigDecimal
        | Schema::TimestampNanos
        | Schema::LocalTimestampNanos
        | Schema::Duration => Err(format!(
            "Avro type {:?} has no Iceberg form here",
            apache_avro::schema::SchemaKind::from(schema)
        )),
    }
}

/// What a value is, for messages.
fn kind(value: &Value) -> String {
    format!("{:?}", apache_avro::schema::SchemaKind::from(value)).to_lowercase()
}

/// `value` as a cell of a column of type `data_type` (`top`: a top-level column, whose
/// name may have been changed from its field's); a value beyond the column's range is
/// refused ([`fit`]), never changed.
fn cell(value: &Value, data_type: &DataType, top: bool) -> Result<Cell, String> {
    let value = match value {
        Value::Union(_, inner) => inner.as_ref(),
        other => other,
    };
    let refused = || {
        Err(format!(
            "an Avro {} cannot be written to a {data_type} column",
            kind(value)
        ))
    };
    let converted = match (data_type, value) {
        (_, Value::Null) => Cell::Null,
        (DataType::Boolean, Value::Boolean(b)) => Cell::Bool(*b),
        (DataType::Int32, Value::Int(i)) => Cell::Int(i64::from(*i)),
        (DataType::Int64, Value::Int(i)) => Cell::Int(i64::from(*i)),
        (DataType::Int64, Value::Long(l)) => Cell::Int(*l),
        (DataType::Float32, Value::Float(f)) => Cell::Float(f64::from(*f)),
        (DataType::Float64, Value::Float(f)) => Cell::Float(f64::from(*f)),
        (DataType::Float64, Value::Double(d)) => Cell::Float(*d),
        (DataType::Utf8 | DataType::LargeUtf8, Value::String(s) | Value::Enum(_, s)) => {
            Cell::Text(s.clone())
        }
        (DataType::Binary | DataType::LargeBinary, Value::Bytes(b) | Value::Fixed(_, b)) => {
            Cell::Bytes(b.clone())
        }
        (DataType::FixedSizeBinary(n), Value::Fixed(size, b)) if *size as i32 == *n => {
            Cell::Bytes(b.clone())
        }
        (DataType::FixedSizeBinary(16), Value::Uuid(uuid)) => Cell::Bytes(uuid.as_bytes().to_vec()),
        (DataType::Date32, Value::Date(d)) => Cell::Int(i64::from(*d)),
        (DataType::Time64(TimeUnit::Microsecond), Value::TimeMillis(ms)) => {
            Cell::Int(i64::from(*ms) * 1000)
        }
        (DataType::Time64(TimeUnit::Microsecond), Value::TimeMicros(us)) => Cell::Int(*us),
        (
            DataType::Timestamp(TimeUnit::Microsecond, _),
            Value::TimestampMillis(ms) | Value::LocalTimestampMillis(ms),
        ) => match ms.checked_mul(1000) {
            Some(us) => Cell::Int(us),
            None => return Err(format!("timestamp {ms} ms is beyond microseconds")),
        },
        (
            DataType::Timestamp(TimeUnit::Microsecond, _),
            Value::TimestampMicros(us) | Value::LocalTimestampMicros(us),
        ) => Cell::Int(*us),
        (DataType::Decimal128(_, _), Value::Decimal(decimal)) => {
            let bytes = Vec::<u8>::try_from(decimal).map_err(|e| format!("decimal: {e}"))?;
            if bytes.len() > 16 {
                return Err(format!(
                    "decimal of {} bytes is beyond 38 digits",
                    bytes.len()
                ));
            }
            let negative = bytes.first().is_some_and(|b| b & 0x80 != 0);
            let mut wide = [if negative { 0xFF } else { 0 }; 16];
            wide[16 - bytes.len()..].copy_from_slice(&bytes);
            Cell::Decimal(i128::from_be_bytes(wide))
        }
        (DataType::Struct(fields), Value::Record(pairs)) => {
            let members: Vec<(&str, &Value)> =
                pairs.iter().map(|(name, v)| (name.as_str(), v)).collect();
            let null = |v: &Value| {
                matches!(v, Value::Null)
                    || matches!(v, Value::Union(_, inner) if **inner == Value::Null)
            };
            struct_cell(fields, &members, (top, "field"), null, |v, t| {
                cell(v, t, false)
            })?
        }
        (DataType::List(item) | DataType::LargeList(item), Value::Array(items)) => {
            list_cell(item, items, |v, t| cell(v, t, false))?
        }
        (DataType::Map(entries, _), Value::Map(map)) => map_cell(
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
        let writer = AvroWriter::parse(
            r#"{"type": "record", "name": "Order", "fields": [
                {"name": "id", "type": "long"},
                {"name": "note", "type": ["null", "string"], "default": null},
                {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
                {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
                {"name": "tags", "type": {"type": "array", "items": "string"}},
                {"name": "attrs", "type": {"type": "map", "values": "int"}},
                {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
                {"name": "ship", "type": {"type": "record", "name": "Ship", "fields": [{"name": "city", "type": "string"}]}},
                {"name": "back", "type": ["null", "Ship"]}
            ]}"#,
            &[],
        )?;
        let names: Vec<&str> = writer.shape.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "id", "note", "at", "price", "tags", "attrs", "kind", "ship", "back"
            ]
        );
        assert_eq!(writer.shape[7].1, writer.shape[8].1);
        // A schema that is not a record is one field.
        let scalar = AvroWriter::parse(r#""long""#, &[])?;
        assert_eq!(
            scalar.shape,
            [(
                SCALAR_FIELD.to_owned(),
                Shape::Primitive(PrimitiveType::Long)
            )]
        );
        let (_, row_type) = crate::cells::new_table_row(&scalar.shape)?;
        assert_eq!(
            scalar.decode(&[0x54], &row_type, true),
            Ok(Cell::Struct(vec![Cell::Int(42)]))
        );
        for refused in [
            r#""null""#,
            r#"{"type": "record", "name": "R", "fields": [{"name": "u", "type": ["int", "string"]}]}"#,
            r#"{"type": "record", "name": "L", "fields": [{"name": "next", "type": ["null", "L"]}]}"#,
            r#"{"type": "record""#,
        ] {
            assert!(AvroWriter::parse(refused, &[]).is_err(), "{refused}");
        }
        Ok(())
    }

    const EVERY_TYPE: &str = r#"{"type": "record", "name": "Order", "fields": [
        {"name": "id", "type": "long"},
        {"name": "note", "type": ["null", "string"]},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "double"}},
        {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "raw", "type": {"type": "fixed", "name": "F", "size": 4}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "ship", "type": {"type": "record", "name": "Ship", "fields": [{"name": "city", "type": "string"}]}}
    ]}"#;

    proptest::proptest! {
        /// A hostile producer's payload: any bytes decode into a row that becomes
        /// Arrow columns, or are refused with the reason; never a panic.
        #[test]
        fn any_payload_decodes_or_is_refused(
            payload in proptest::collection::vec(proptest::num::u8::ANY, 0..200)
        ) {
            let fail = proptest::test_runner::TestCaseError::fail;
            let writer = AvroWriter::parse(EVERY_TYPE, &[]).map_err(fail)?;
            let (fields, row_type) = crate::cells::new_table_row(&writer.shape).map_err(fail)?;
            if let Ok(row) = writer.decode(&payload, &row_type, true) {
                crate::cells::write_row(&fields, &row).map_err(fail)?;
            }
        }
    }
}

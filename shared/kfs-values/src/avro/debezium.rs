//! Debezium change events in Avro (the registry's format): the value envelope read
//! into `kfs_plan::changes::Envelope`, its `before` and `after` images kept as Avro
//! records for the table's cells, its `source` position read as the JSON envelope's
//! is.

use apache_avro::types::Value;
use kfs_plan::changes::{Envelope, EnvelopeFields, read_envelope};

/// Reads a decoded Avro Debezium value envelope; `Err` says why it is none.
pub fn envelope(value: &Value) -> Result<Envelope<Value>, String> {
    match unwrapped(value) {
        Value::Record(fields) => read_envelope(&AvroEnvelope(fields)),
        _ => Err("a Debezium envelope is an Avro record".into()),
    }
}

/// A Debezium envelope in Avro: its record's fields.
struct AvroEnvelope<'a>(&'a [(String, Value)]);

/// The field `name` of `fields`, out of its union.
fn field<'a>(fields: &'a [(String, Value)], name: &str) -> Option<&'a Value> {
    fields
        .iter()
        .find(|(field, _)| field == name)
        .map(|(_, value)| unwrapped(value))
}

impl AvroEnvelope<'_> {
    fn source(&self, name: &str) -> Option<&Value> {
        match field(self.0, "source") {
            Some(Value::Record(source)) => field(source, name),
            _ => None,
        }
    }
}

impl EnvelopeFields for AvroEnvelope<'_> {
    type Row = Value;

    fn op(&self) -> Result<Option<String>, String> {
        match field(self.0, "op") {
            None => Ok(None),
            Some(Value::String(code) | Value::Enum(_, code)) => Ok(Some(code.clone())),
            Some(other) => Err(format!("\"op\" is {other:?}, not a string")),
        }
    }

    fn image(&self, name: &str) -> Result<Option<Value>, String> {
        match field(self.0, name) {
            None | Some(Value::Null) => Ok(None),
            Some(row @ Value::Record(_)) => Ok(Some(row.clone())),
            Some(other) => Err(format!("\"{name}\" is {other:?}, not a row")),
        }
    }

    fn source_number(&self, name: &str) -> Option<u64> {
        match self.source(name) {
            Some(Value::Long(n)) => u64::try_from(*n).ok(),
            Some(Value::Int(n)) => u64::try_from(*n).ok(),
            _ => None,
        }
    }

    fn source_text(&self, name: &str) -> Option<String> {
        match self.source(name) {
            Some(Value::String(text)) => Some(text.clone()),
            _ => None,
        }
    }
}

/// The value inside a union (`["null", T]` decodes as a union), else the value.
fn unwrapped(value: &Value) -> &Value {
    match value {
        Value::Union(_, inner) => inner,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apache_avro::Schema;
    use kfs_plan::changes::{Action, Operation, SourcePosition};

    /// A Debezium-shaped envelope schema (PostgreSQL's source fields, MySQL's binlog
    /// ones, all optional as Debezium writes them).
    const SCHEMA: &str = r#"{"type": "record", "name": "Envelope", "namespace": "dbserver1.inventory.customers",
      "fields": [
        {"name": "before", "type": ["null", {"type": "record", "name": "Value", "fields": [
          {"name": "id", "type": "int"}, {"name": "email", "type": "string"}]}], "default": null},
        {"name": "after", "type": ["null", "Value"], "default": null},
        {"name": "source", "type": {"type": "record", "name": "Source", "namespace": "io.debezium.connector",
          "fields": [
            {"name": "connector", "type": "string"},
            {"name": "lsn", "type": ["null", "long"], "default": null},
            {"name": "file", "type": ["null", "string"], "default": null},
            {"name": "pos", "type": ["null", "long"], "default": null},
            {"name": "row", "type": ["null", "int"], "default": null}]}},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": null}]}"#;

    fn row(id: i32, email: &str) -> Value {
        Value::Union(
            1,
            Box::new(Value::Record(vec![
                ("id".into(), Value::Int(id)),
                ("email".into(), Value::String(email.into())),
            ])),
        )
    }

    fn optional(value: Option<Value>) -> Value {
        match value {
            Some(v) => Value::Union(1, Box::new(v)),
            None => Value::Union(0, Box::new(Value::Null)),
        }
    }

    /// An envelope encoded with the schema and decoded back, as the registry path
    /// reads it.
    fn decoded(before: Value, after: Value, source: [Option<Value>; 4], op: &str) -> Value {
        let schema = Schema::parse_str(SCHEMA).unwrap_or_else(|e| panic!("{e}"));
        let [lsn, file, pos, row] = source;
        let value = Value::Record(vec![
            ("before".into(), before),
            ("after".into(), after),
            (
                "source".into(),
                Value::Record(vec![
                    ("connector".into(), Value::String("x".into())),
                    ("lsn".into(), optional(lsn)),
                    ("file".into(), optional(file)),
                    ("pos".into(), optional(pos)),
                    ("row".into(), optional(row)),
                ]),
            ),
            ("op".into(), Value::String(op.into())),
            ("ts_ms".into(), optional(Some(Value::Long(1)))),
        ]);
        let bytes = apache_avro::to_avro_datum(&schema, value).unwrap_or_else(|e| panic!("{e}"));
        apache_avro::from_avro_datum(&schema, &mut bytes.as_slice(), None)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn creates_updates_and_deletes_read_as_their_actions_and_positions() {
        let null = || Value::Union(0, Box::new(Value::Null));
        let postgres = [Some(Value::Long(24_023_128)), None, None, None];
        let create = envelope(&decoded(null(), row(1, "a@x"), postgres.clone(), "c"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(create.source, Some(SourcePosition::Lsn(24_023_128)));
        assert!(matches!(
            create.action(),
            Ok(Some(Action::Upsert(Value::Record(_))))
        ));
        let mysql = [
            None,
            Some(Value::String("mysql-bin.000003".into())),
            Some(Value::Long(154)),
            Some(Value::Int(2)),
        ];
        let delete =
            envelope(&decoded(row(1, "a@x"), null(), mysql, "d")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(delete.action(), Ok(Some(Action::Delete)));
        assert_eq!(
            delete.source,
            Some(SourcePosition::Binlog {
                file: "mysql-bin.000003".into(),
                pos: 154,
                row: 2
            })
        );
        let update = envelope(&decoded(row(1, "a@x"), row(1, "b@x"), postgres, "u"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(update.op, Operation::Update);
        assert!(update.before.is_some() && update.after.is_some());
    }

    #[test]
    fn what_is_no_envelope_says_why() {
        for value in [
            Value::Null,
            Value::Record(vec![("after".into(), Value::Null)]),
            Value::Record(vec![("op".into(), Value::Long(3))]),
            Value::Record(vec![("op".into(), Value::String("x".into()))]),
            Value::Record(vec![
                ("op".into(), Value::String("c".into())),
                ("after".into(), Value::Long(7)),
            ]),
        ] {
            assert!(envelope(&value).is_err(), "{value:?}");
        }
    }
}

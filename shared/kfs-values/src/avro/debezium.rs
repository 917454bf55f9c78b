//! Debezium change events in Avro (the registry's format): the value envelope read
//! into `kfs_plan::changes::Envelope`, its `before` and `after` images kept as Avro
//! records for the table's cells, its `source` position read as the JSON envelope's
//! is.

use apache_avro::types::Value;
use kfs_plan::changes::{Envelope, Operation, source_position_of};

/// Reads a decoded Avro Debezium value envelope; `Err` says why it is none.
pub fn envelope(value: &Value) -> Result<Envelope<Value>, String> {
    let Value::Record(fields) = unwrapped(value) else {
        return Err("a Debezium envelope is an Avro record".into());
    };
    let field = |name: &str| {
        fields
            .iter()
            .find(|(field, _)| field == name)
            .map(|(_, value)| unwrapped(value))
    };
    let op = match field("op") {
        Some(Value::String(code) | Value::Enum(_, code)) => Operation::of_code(code)?,
        Some(other) => return Err(format!("\"op\" is {other:?}, not a string")),
        None => return Err("no \"op\": not a Debezium envelope".into()),
    };
    let image = |name: &str| match field(name) {
        None | Some(Value::Null) => Ok(None),
        Some(row @ Value::Record(_)) => Ok(Some(row.clone())),
        Some(other) => Err(format!("\"{name}\" is {other:?}, not a row")),
    };
    let source = match field("source") {
        Some(Value::Record(source)) => {
            let get = |name: &str| {
                source
                    .iter()
                    .find(|(field, _)| field == name)
                    .map(|(_, value)| unwrapped(value))
            };
            let number = |name: &str| match get(name) {
                Some(Value::Long(n)) => u64::try_from(*n).ok(),
                Some(Value::Int(n)) => u64::try_from(*n).ok(),
                _ => None,
            };
            let file = match get("file") {
                Some(Value::String(file)) => Some(file.as_str()),
                _ => None,
            };
            source_position_of(number("lsn"), file, number("pos"), number("row"))
        }
        _ => None,
    };
    Ok(Envelope {
        op,
        before: image("before")?,
        after: image("after")?,
        source,
    })
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
    use kfs_plan::changes::{Action, SourcePosition};

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

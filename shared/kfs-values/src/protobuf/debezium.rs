//! Debezium change events in Protobuf (the registry's format): the value envelope read
//! into `kfs_plan::changes::Envelope`, its `before` and `after` images kept as
//! messages for the table's cells (an unset image is null), its `source` position
//! read as the JSON envelope's is.

use kfs_plan::changes::{Envelope, EnvelopeFields, read_envelope};
use prost_reflect::{DynamicMessage, ReflectMessage, Value};

/// Reads a decoded Protobuf Debezium value envelope; `Err` says why it is none.
pub fn envelope(message: &DynamicMessage) -> Result<Envelope<DynamicMessage>, String> {
    read_envelope(&ProtobufEnvelope(message))
}

/// A Debezium envelope in Protobuf.
struct ProtobufEnvelope<'a>(&'a DynamicMessage);

/// The field `name` of `message` when it is set.
fn set(message: &DynamicMessage, name: &str) -> Option<Value> {
    message
        .descriptor()
        .get_field_by_name(name)
        .filter(|field| message.has_field(field))
        .map(|field| message.get_field(&field).into_owned())
}

impl ProtobufEnvelope<'_> {
    fn source(&self, name: &str) -> Option<Value> {
        match set(self.0, "source") {
            Some(Value::Message(source)) => set(&source, name),
            _ => None,
        }
    }
}

impl EnvelopeFields for ProtobufEnvelope<'_> {
    type Row = DynamicMessage;

    fn op(&self) -> Result<Option<String>, String> {
        match set(self.0, "op") {
            None => Ok(None),
            Some(Value::String(code)) => Ok(Some(code)),
            Some(other) => Err(format!("\"op\" is {other:?}, not a string")),
        }
    }

    fn image(&self, name: &str) -> Result<Option<DynamicMessage>, String> {
        match set(self.0, name) {
            None => Ok(None),
            Some(Value::Message(row)) => Ok(Some(row)),
            Some(other) => Err(format!("\"{name}\" is {other:?}, not a row")),
        }
    }

    fn source_number(&self, name: &str) -> Option<u64> {
        match self.source(name)? {
            Value::I64(n) => u64::try_from(n).ok(),
            Value::I32(n) => u64::try_from(n).ok(),
            Value::U64(n) => Some(n),
            Value::U32(n) => Some(u64::from(n)),
            _ => None,
        }
    }

    fn source_text(&self, name: &str) -> Option<String> {
        match self.source(name)? {
            Value::String(text) => Some(text),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protobuf::{MessageSelector, ProtobufWriter};
    use kfs_plan::changes::{Action, Operation, SourcePosition};
    use prost_reflect::prost::Message;

    const PROTO: &str = r#"syntax = "proto3";
        message Row { int32 id = 1; string email = 2; }
        message Source { string connector = 1; optional int64 lsn = 2; optional string file = 3;
                         optional int64 pos = 4; optional int32 row = 5; }
        message Envelope { Row before = 1; Row after = 2; Source source = 3; string op = 4; }"#;

    fn descriptor(index: i32) -> prost_reflect::MessageDescriptor {
        ProtobufWriter::parse(PROTO, &[])
            .and_then(|writer| writer.message(&MessageSelector::Path(vec![index])))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// An envelope built, encoded and decoded back, as the registry path reads it.
    fn decoded(
        op: &str,
        before: Option<(i32, &str)>,
        after: Option<(i32, &str)>,
        source: &[(&str, Value)],
    ) -> DynamicMessage {
        let row = |(id, email): (i32, &str)| {
            let mut row = DynamicMessage::new(descriptor(0));
            row.set_field_by_name("id", Value::I32(id));
            row.set_field_by_name("email", Value::String(email.into()));
            Value::Message(row)
        };
        let mut src = DynamicMessage::new(descriptor(1));
        src.set_field_by_name("connector", Value::String("x".into()));
        for (name, value) in source {
            src.set_field_by_name(name, value.clone());
        }
        let mut envelope = DynamicMessage::new(descriptor(2));
        envelope.set_field_by_name("op", Value::String(op.into()));
        envelope.set_field_by_name("source", Value::Message(src));
        if let Some(before) = before {
            envelope.set_field_by_name("before", row(before));
        }
        if let Some(after) = after {
            envelope.set_field_by_name("after", row(after));
        }
        DynamicMessage::decode(descriptor(2), envelope.encode_to_vec().as_slice())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn creates_updates_and_deletes_read_as_their_actions_and_positions() {
        let create = envelope(&decoded(
            "c",
            None,
            Some((1, "a@x")),
            &[("lsn", Value::I64(77))],
        ))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(create.source, Some(SourcePosition::Lsn(77)));
        assert!(create.before.is_none());
        assert!(matches!(create.action(), Ok(Some(Action::Upsert(_)))));
        let binlog = [
            ("file", Value::String("mysql-bin.000003".into())),
            ("pos", Value::I64(154)),
            ("row", Value::I32(1)),
        ];
        let delete = envelope(&decoded("d", Some((1, "a@x")), None, &binlog))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(delete.action(), Ok(Some(Action::Delete)));
        assert_eq!(
            delete.source,
            Some(SourcePosition::Binlog {
                file: "mysql-bin.000003".into(),
                pos: 154,
                row: 1
            })
        );
        let update = envelope(&decoded("u", Some((1, "a@x")), Some((1, "b@x")), &[]))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(update.op, Operation::Update);
        assert_eq!(update.source, None);
    }

    #[test]
    fn what_is_no_envelope_says_why() {
        let row = DynamicMessage::new(descriptor(0));
        assert!(envelope(&row).is_err(), "a row without op");
        assert!(envelope(&decoded("x", None, None, &[])).is_err());
        assert!(
            envelope(&decoded("c", None, None, &[]))
                .map(|e| e.action())
                .is_ok_and(|action| action.is_err()),
            "a create without an after image"
        );
    }
}

//! Keys of value fields: a mirror keyed by `upsert_key FIELD[,FIELD...]` knows a row
//! by its key fields' values, each as text (an integer in decimal, a string as it is,
//! a boolean as `true` or `false`), length-prefixed in the order the fields are named.
//! A row with a null in any key field has no key: it is kept as it came, like a
//! record without a key.
//!
//! A tombstone or a delete has no value to read its key fields from: they come from
//! the record key ([`from_record_key`]): a JSON object key holding every field (with
//! or without the JSON converter's `schema`/`payload` wrapper, as Debezium keys its
//! events), or, with one key field, the key itself: a JSON string or integer, else
//! its bytes (Flink's `raw` key format). What text can name a field depends on what
//! its column holds ([`FieldKind`]): an integer column (dates and timestamps too: their
//! stored numbers) only an integer's canonical decimal, a boolean column `true` or
//! `false`, a text column any text (a raw key only as UTF-8 without control
//! characters: a registry frame or a serialized number is binary, not text), a bytes
//! column a raw key as it is; a column of fractions or nested values none. A key that
//! names no key is what the converter sends to the dead-letter table, since it would
//! delete nothing. The host reads the columns and a decoded registry key's fields;
//! this module only encodes. Pure, no I/O.

use serde_json::Value;

/// The key of a row whose key fields hold `parts` in order (each a value's text,
/// `None` for a null): `None` when any is null or there are none.
pub fn encode<T: AsRef<[u8]>>(parts: impl IntoIterator<Item = Option<T>>) -> Option<Vec<u8>> {
    let mut key = Vec::new();
    let mut any = false;
    for part in parts {
        let part = part?;
        let bytes = part.as_ref();
        // A part longer than 4 GiB is no key a table holds: keyless.
        let length = u32::try_from(bytes.len()).ok()?;
        key.extend_from_slice(&length.to_le_bytes());
        key.extend_from_slice(bytes);
        any = true;
    }
    any.then_some(key)
}

/// The text a JSON scalar keys by: strings as they are, integers in decimal, booleans;
/// `None` for null, fractions, arrays and objects (no key field holds them).
fn json_text(value: &Value) -> Option<Vec<u8>> {
    match value {
        Value::String(text) => Some(text.as_bytes().to_vec()),
        Value::Number(number) if number.is_i64() || number.is_u64() => {
            Some(number.to_string().into_bytes())
        }
        Value::Bool(flag) => Some(flag.to_string().into_bytes()),
        _ => None,
    }
}

/// What a key field's column holds: which text of a record key can name it (a row's
/// key is its cells' text, so only text a cell could have names a row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// Integers, dates and timestamps (their stored numbers): canonical decimal text.
    Integer,
    /// Booleans: `true` or `false`.
    Boolean,
    /// Text and decimals (their text).
    Text,
    /// Bytes, fixed and UUIDs: a raw key as it is.
    Bytes,
    /// Fractions and nested values: no key is made of them.
    Unkeyed,
}

impl FieldKind {
    /// Whether `text` is one a cell of this kind could have.
    pub fn holds(self, text: &[u8]) -> bool {
        match self {
            Self::Integer => std::str::from_utf8(text)
                .ok()
                .and_then(|t| t.parse::<i128>().ok())
                .is_some_and(|n| n.to_string().as_bytes() == text),
            Self::Boolean => text == b"true" || text == b"false",
            Self::Text | Self::Bytes => true,
            Self::Unkeyed => false,
        }
    }
}

/// Whether a raw record key (no JSON) reads as text: UTF-8 without control characters.
fn is_text(key: &[u8]) -> bool {
    std::str::from_utf8(key).is_ok_and(|text| !text.chars().any(char::is_control))
}

/// The key that the record key `key` names for a mirror keyed by `fields`, whose
/// columns hold `kinds` (in the fields' order; a field without one holds text): see
/// the module's rule. `None` when it names none (an object key without every field, a
/// value no cell of its field could have, a binary key for a field of text).
pub fn from_record_key(key: &[u8], fields: &[String], kinds: &[FieldKind]) -> Option<Vec<u8>> {
    let kind = |at: usize| kinds.get(at).copied().unwrap_or(FieldKind::Text);
    let parsed: Option<Value> = serde_json::from_slice(key).ok();
    if let Some(Value::Object(object)) = &parsed {
        let payload = match (object.get("schema"), object.get("payload")) {
            (Some(_), Some(Value::Object(payload))) => payload,
            _ => object,
        };
        return encode(fields.iter().enumerate().map(|(at, f)| {
            payload
                .get(f)
                .and_then(json_text)
                .filter(|text| kind(at).holds(text))
        }));
    }
    let [_] = fields else {
        return None;
    };
    let text = match (kind(0), parsed.as_ref().and_then(json_text)) {
        (FieldKind::Bytes, _) => key.to_vec(),
        (_, Some(text)) => text,
        (_, None) if is_text(key) => key.to_vec(),
        (_, None) => return None,
    };
    kind(0).holds(&text).then(|| encode([Some(text)])).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn a_key_is_its_fields_text_in_order_and_none_with_a_null() {
        let key = encode([Some("7"), Some("eu")]);
        assert_eq!(encode([Some("7"), Some("eu")]), key);
        assert_ne!(encode([Some("eu"), Some("7")]), key);
        // Length prefixes: ("ab", "c") is not ("a", "bc").
        assert_ne!(
            encode([Some("ab"), Some("c")]),
            encode([Some("a"), Some("bc")])
        );
        assert_eq!(encode([Some("7"), None]), None);
        assert_eq!(encode::<&str>([]), None);
    }

    #[test]
    fn a_record_key_names_its_fields_as_the_value_does() {
        let by_id = fields(&["id"]);
        let seven = encode([Some("7")]);
        for key in [
            &br#"{"id":7}"#[..],
            br#"{"schema":{"type":"struct"},"payload":{"id":7}}"#,
            br#"{"id":"7"}"#,
            b"7",
            br#""7""#,
        ] {
            assert_eq!(from_record_key(key, &by_id, &[]), seven, "{key:?}");
        }
        // A raw key is its bytes as text (Flink's raw key format).
        assert_eq!(
            from_record_key(b"customer-3", &by_id, &[]),
            encode([Some("customer-3")])
        );
        // An object without the field, or a fraction, names no key of two fields.
        let two = fields(&["id", "region"]);
        assert_eq!(
            from_record_key(br#"{"id":7,"region":"eu"}"#, &two, &[]),
            encode([Some("7"), Some("eu")])
        );
        assert_eq!(from_record_key(br#"{"id":7}"#, &two, &[]), None);
        assert_eq!(from_record_key(b"7", &two, &[]), None);
        assert_eq!(from_record_key(br#"{"id":7.5}"#, &by_id, &[]), None);
        assert_eq!(from_record_key(br#"{"other":7}"#, &by_id, &[]), None);
        // A binary key (a registry frame, a serialized long) names no key of text...
        assert_eq!(from_record_key(&[0, 0, 0, 0, 7, 14], &by_id, &[]), None);
        assert_eq!(from_record_key(&7i64.to_be_bytes(), &by_id, &[]), None);
        // ...but is the key of a field of bytes, as it is.
        let frame = [0u8, 0, 0, 0, 7, 14];
        assert_eq!(
            from_record_key(&frame, &by_id, &[FieldKind::Bytes]),
            encode([Some(&frame[..])])
        );
        // An integer field is named by an integer's canonical text only; a boolean by
        // `true` or `false`; a field of fractions by nothing.
        let int = [FieldKind::Integer];
        assert_eq!(from_record_key(b"7", &by_id, &int), seven);
        assert_eq!(from_record_key(br#"{"id":"7"}"#, &by_id, &int), seven);
        for key in [
            &b"007"[..],
            b"+7",
            b"7.0",
            b"seven",
            br#"{"id":"2024-01-01"}"#,
        ] {
            assert_eq!(from_record_key(key, &by_id, &int), None, "{key:?}");
        }
        let flag = [FieldKind::Boolean];
        assert_eq!(
            from_record_key(b"true", &by_id, &flag),
            encode([Some("true")])
        );
        assert_eq!(from_record_key(b"yes", &by_id, &flag), None);
        assert_eq!(from_record_key(b"0.5", &by_id, &[FieldKind::Unkeyed]), None);
        // A raw key of text: no control characters; a JSON string may hold any.
        assert_eq!(from_record_key(b"a\nb", &by_id, &[]), None);
        assert_eq!(
            from_record_key(br#"{"id":"a\nb"}"#, &by_id, &[]),
            encode([Some("a\nb")])
        );
        assert_eq!(json_text(&serde_json::json!(true)), Some(b"true".to_vec()));
        assert_eq!(json_text(&serde_json::json!([1])), None);
    }

    proptest::proptest! {
        /// Keys of different parts never collide; any record key is read without a
        /// panic; an integer names the same key in an object, as a scalar and as the
        /// text a value's column gives it.
        #[test]
        fn keys_are_injective_and_any_record_key_is_read(
            a in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..6), 1..4),
            b in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..6), 1..4),
            key in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
            id in proptest::num::i64::ANY,
        ) {
            let (ka, kb) = (encode(a.iter().map(Some)), encode(b.iter().map(Some)));
            proptest::prop_assert_eq!(ka == kb, a == b);
            for n in 1..4 {
                for kind in [FieldKind::Integer, FieldKind::Boolean, FieldKind::Text, FieldKind::Bytes, FieldKind::Unkeyed] {
                    let _ = from_record_key(&key, &fields(&["id", "region", "at"][..n]), &[kind; 3]);
                }
            }
            let text = encode([Some(id.to_string())]);
            let by_id = fields(&["id"]);
            for kinds in [&[][..], &[FieldKind::Integer], &[FieldKind::Text]] {
                proptest::prop_assert_eq!(&from_record_key(format!("{{\"id\":{id}}}").as_bytes(), &by_id, kinds), &text);
                proptest::prop_assert_eq!(&from_record_key(id.to_string().as_bytes(), &by_id, kinds), &text);
            }
        }
    }
}

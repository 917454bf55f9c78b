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
//! its bytes as text (Flink's `raw` key format). A key holding a NUL byte is binary,
//! not text (a registry frame begins with one, as do most serialized numbers): it
//! names no key, and the converter sends such a delete to the dead-letter table. The
//! host reads the columns and a decoded registry key's fields; this module only
//! encodes. Pure, no I/O.

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

/// The key that the record key `key` names for a mirror keyed by `fields` (see the
/// module's rule), or `None` when it names none (an object key without every field,
/// a binary key).
pub fn from_record_key(key: &[u8], fields: &[String]) -> Option<Vec<u8>> {
    let parsed: Option<Value> = serde_json::from_slice(key).ok();
    if let Some(Value::Object(object)) = &parsed {
        let payload = match (object.get("schema"), object.get("payload")) {
            (Some(_), Some(Value::Object(payload))) => payload,
            _ => object,
        };
        return encode(fields.iter().map(|f| payload.get(f).and_then(json_text)));
    }
    match fields {
        [_] => match parsed.as_ref().and_then(json_text) {
            Some(text) => encode([Some(text)]),
            None if key.contains(&0) => None,
            None => encode([Some(key)]),
        },
        _ => None,
    }
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
            assert_eq!(from_record_key(key, &by_id), seven, "{key:?}");
        }
        // A raw key is its bytes as text (Flink's raw key format).
        assert_eq!(
            from_record_key(b"customer-3", &by_id),
            encode([Some("customer-3")])
        );
        // An object without the field, or a fraction, names no key of two fields.
        let two = fields(&["id", "region"]);
        assert_eq!(
            from_record_key(br#"{"id":7,"region":"eu"}"#, &two),
            encode([Some("7"), Some("eu")])
        );
        assert_eq!(from_record_key(br#"{"id":7}"#, &two), None);
        assert_eq!(from_record_key(b"7", &two), None);
        assert_eq!(from_record_key(br#"{"id":7.5}"#, &by_id), None);
        assert_eq!(from_record_key(br#"{"other":7}"#, &by_id), None);
        // A binary key (a registry frame, a serialized long) names no key.
        assert_eq!(from_record_key(&[0, 0, 0, 0, 7, 14], &by_id), None);
        assert_eq!(from_record_key(&7i64.to_be_bytes(), &by_id), None);
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
                let _ = from_record_key(&key, &fields(&["id", "region", "at"][..n]));
            }
            let text = encode([Some(id.to_string())]);
            let by_id = fields(&["id"]);
            proptest::prop_assert_eq!(&from_record_key(format!("{{\"id\":{id}}}").as_bytes(), &by_id), &text);
            proptest::prop_assert_eq!(&from_record_key(id.to_string().as_bytes(), &by_id), &text);
        }
    }
}

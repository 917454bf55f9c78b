//! Tests of JSON values against table schemas.

use super::*;
use crate::layout::{MAX_COLUMN_NAME_BYTES, column_for, field_doc};

fn object(text: &str) -> Map<String, Value> {
    parse_value(Some(text.as_bytes())).unwrap_or_else(|e| unreachable!("{e}"))
}

fn base() -> Schema {
    Schema::builder()
        .with_fields(vec![
            NestedField::required(1, "offset", Type::Primitive(PrimitiveType::Long)).into(),
        ])
        .build()
        .unwrap_or_else(|e| unreachable!("{e}"))
}

fn grown(values: &[&str]) -> (Schema, Vec<Result<(), Rejection>>) {
    let mut evolving = EvolvingSchema::new(&base(), 1);
    let results = values.iter().map(|v| evolving.absorb(&object(v))).collect();
    (
        evolving.schema(1).unwrap_or_else(|e| unreachable!("{e}")),
        results,
    )
}

fn column_type(schema: &Schema, name: &str) -> String {
    schema
        .field_by_name(name)
        .map(|f| f.field_type.to_string())
        .unwrap_or_default()
}

#[test]
fn infers_types_adds_fields_and_widens() {
    let (schema, results) = grown(&[
        r#"{"id": 1, "name": "a", "price": 2.5, "ok": true, "tags": ["x"], "addr": {"zip": 7}}"#,
        r#"{"id": 5000000000, "extra": "later", "addr": {"city": "Oslo"}}"#,
        r#"{"id": "not a number"}"#,
        r#"{"price": 3}"#,
        r#"{"empty": [], "nothing": null, "hollow": {}}"#,
    ]);
    assert!(results[0].is_ok() && results[1].is_ok() && results[3].is_ok());
    assert!(results[2].is_err(), "{results:?}");
    assert_eq!(column_type(&schema, "id"), "long");
    assert_eq!(column_type(&schema, "name"), "string");
    assert_eq!(column_type(&schema, "price"), "double");
    assert_eq!(column_type(&schema, "ok"), "boolean");
    assert_eq!(column_type(&schema, "extra"), "string");
    assert!(column_type(&schema, "tags").starts_with("list"));
    assert!(schema.field_by_name("addr.zip").is_some());
    assert!(schema.field_by_name("addr.city").is_some());
    for absent in ["empty", "nothing", "hollow"] {
        assert!(schema.field_by_name(absent).is_none(), "{absent}");
    }
    // Ids are unique and new ones lie above the table's.
    let mut ids: Vec<i32> = (1..=schema.highest_field_id())
        .filter(|id| schema.field_by_id(*id).is_some())
        .collect();
    let count = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), count);
}

#[test]
fn rejects_what_cannot_be_reconciled() {
    let reason = |schema_values: &[&str], value: &str| {
        let mut evolving = EvolvingSchema::new(&base(), 1);
        for v in schema_values {
            let _ = evolving.absorb(&object(v));
        }
        match parse_value(Some(value.as_bytes())) {
            Err(e) => e.0,
            Ok(v) => evolving.absorb(&v).err().map(|e| e.0).unwrap_or_default(),
        }
    };
    assert!(reason(&[], "not json").contains("not JSON"));
    assert!(reason(&[], "{\"a\": 1,}").contains("at byte 8"));
    assert!(reason(&[], "[1, 2]").contains("array, not an object"));
    assert!(reason(&[r#"{"n": 1}"#], r#"{"n": 1.5}"#).contains("not an integer"));
    assert!(reason(&[r#"{"s": "x"}"#], r#"{"s": 1}"#).contains("does not fit"));
    assert!(reason(&[], r#"{"big": 18446744073709551615}"#).contains("beyond"));
    assert!(reason(&[r#"{"l": [1]}"#], r#"{"l": ["x"]}"#).contains("l[]"));
    assert_eq!(reason(&[r#"{"n": 1}"#], r#"{"n": 2}"#), "");
}

#[test]
fn declared_narrow_columns_widen() {
    let declared = Schema::builder()
        .with_fields(vec![
            NestedField::optional(1, "n", Type::Primitive(PrimitiveType::Int)).into(),
            NestedField::optional(2, "f", Type::Primitive(PrimitiveType::Float)).into(),
        ])
        .build()
        .unwrap_or_else(|e| unreachable!("{e}"));
    assert_eq!(fits(&declared, &object(r#"{"n": 7, "f": 2.5}"#)), Ok(()));
    let value = object(r#"{"n": 3000000000, "f": 1e300, "s": {"x": [1]}}"#);
    assert!(fits(&declared, &value).is_err());
    let mut evolving = EvolvingSchema::new(&declared, 2);
    assert_eq!(evolving.absorb(&value), Ok(()));
    let evolved = evolving.schema(1).unwrap_or_else(|e| unreachable!("{e}"));
    assert_eq!(column_type(&evolved, "n"), "long");
    assert_eq!(column_type(&evolved, "f"), "double");
    // Field ids stay: old files' columns are read as the wider type.
    assert_eq!(evolved.field_by_name("n").map(|f| f.id), Some(1));
    assert_eq!(fits(&evolved, &value), Ok(()));
    assert!(evolved.field_by_name("s.x").is_some());
}

#[test]
fn declared_columns_keep_their_fields_only() {
    let declared = Schema::builder()
        .with_fields(vec![
            NestedField::optional(1, "n", Type::Primitive(PrimitiveType::Int)).into(),
        ])
        .build()
        .unwrap_or_else(|e| unreachable!("{e}"));
    let mut evolving = EvolvingSchema::new(&declared, 1).declared();
    assert_eq!(
        evolving.absorb(&object(r#"{"n": 5000000000, "extra": "x"}"#)),
        Ok(())
    );
    let schema = evolving.schema(1).unwrap_or_else(|e| unreachable!("{e}"));
    assert_eq!(column_type(&schema, "n"), "long");
    assert!(schema.field_by_name("extra").is_none());
    assert!(
        evolving
            .absorb(&object(r#"{"n": "text", "extra": 1}"#))
            .is_err()
    );
    let kept = project(
        &object(r#"{"n": 1, "extra": 2}"#),
        schema.as_struct().fields(),
    );
    assert_eq!(kept.keys().collect::<Vec<_>>(), vec!["n"]);
}

#[test]
fn metadata_names_are_renamed() {
    let text = r#"{"offset": 1, "value_offset": 2, "name": "x", "Timestamp": "t"}"#;
    let (schema, results) = grown(&[text]);
    assert!(results[0].is_ok());
    assert_eq!(column_type(&schema, "value_offset"), "long");
    assert_eq!(column_type(&schema, "value_value_offset"), "long");
    assert_eq!(column_type(&schema, "value_Timestamp"), "string");
    assert_eq!(column_type(&schema, "offset"), "long");
    let conformed = conform(object(text), schema.as_struct().fields());
    let names: Vec<&str> = conformed.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        vec![
            "name",
            "value_Timestamp",
            "value_offset",
            "value_value_offset"
        ]
    );
}

#[test]
fn names_map_to_what_catalogs_accept() {
    assert_eq!(column_for("order_id", false), "order_id");
    assert_eq!(column_for("a.b", false), "a_b");
    assert_eq!(column_for("a b-c", false), "a_b_c");
    assert_eq!(column_for("ctl\u{1}x", false), "ctl_x");
    assert_eq!(column_for("", false), "_");
    assert_eq!(column_for("名前", false), "_u540d_u524d");
    assert_eq!(column_for("offset", true), "value_offset");
    assert_eq!(column_for("offset", false), "offset");
    let long = "x".repeat(1000);
    let mapped = column_for(&long, false);
    assert_eq!(mapped.len(), MAX_COLUMN_NAME_BYTES);
    assert_ne!(mapped, column_for(&"x".repeat(999), false));
    assert!(field_doc(&long).len() <= 255);
}

#[test]
fn fields_sharing_a_column_are_rejected_never_merged() {
    // `a.b` came first: its column `a_b` records it; a literal `a_b` is another field.
    let (schema, results) = grown(&[
        r#"{"a.b": 1}"#,
        r#"{"a_b": 2}"#,
        r#"{"a.b": 3}"#,
        r#"{"A_b": 4}"#,
        r#"{"n": {"b": 1}}"#,
        r#"{"n.b": 2}"#,
        r#"{"x.y": 1, "x_y": 2}"#,
        r#"{"s": {"p.q": 1, "p_q": 2}}"#,
    ]);
    assert!(results[0].is_ok());
    let refused = results[1].clone().err().map(|r| r.0).unwrap_or_default();
    assert!(refused.contains("holds another field"), "{refused}");
    assert!(results[2].is_ok());
    let refused = results[3].clone().err().map(|r| r.0).unwrap_or_default();
    assert!(refused.contains("only in case"), "{refused}");
    assert!(results[4].is_ok() && results[5].is_ok(), "{results:?}");
    assert!(results[6].is_err() && results[7].is_err(), "{results:?}");
    assert!(column_type(&schema, "n_b").contains("long"));
    let doc = schema
        .field_by_name("a_b")
        .and_then(|f| f.doc.clone())
        .unwrap_or_default();
    assert!(doc.contains("\"a.b\""), "{doc}");
    // The record that fits is written under the column's name.
    assert_eq!(fits(&schema, &object(r#"{"a.b": 5}"#)), Ok(()));
    assert!(fits(&schema, &object(r#"{"a_b": 5}"#)).is_err());
    let conformed = conform(object(r#"{"a.b": 5}"#), schema.as_struct().fields());
    assert_eq!(conformed.keys().collect::<Vec<_>>(), vec!["a_b"]);
}

#[test]
fn column_caps_turn_excess_fields_into_rejections() {
    let caps = ColumnCaps {
        max_fields: 6,
        max_new_fields_per_segment: 3,
    };
    let mut evolving = EvolvingSchema::new(&base(), 1).with_caps(caps);
    assert_eq!(evolving.absorb(&object(r#"{"a": 1, "b": 2}"#)), Ok(()));
    let refused = evolving
        .absorb(&object(r#"{"c": 1, "d": 2}"#))
        .err()
        .map(|r| r.0)
        .unwrap_or_default();
    assert!(refused.contains(MAX_NEW_FIELDS_PROPERTY), "{refused}");
    assert_eq!(evolving.absorb(&object(r#"{"c": 1}"#)), Ok(()));
    // The next segment starts its own count; the table's cap still holds.
    let schema = evolving.schema(1).unwrap_or_else(|e| unreachable!("{e}"));
    let mut next = EvolvingSchema::new(&schema, 4).with_caps(caps);
    assert_eq!(next.absorb(&object(r#"{"d": 1, "e": 2}"#)), Ok(()));
    let refused = next
        .absorb(&object(r#"{"f": 1}"#))
        .err()
        .map(|r| r.0)
        .unwrap_or_default();
    assert!(refused.contains(MAX_FIELDS_PROPERTY), "{refused}");
}

#[test]
fn fitting_values_become_arrow_columns() {
    let (schema, _) = grown(&[r#"{"id": 1, "tags": ["a"], "addr": {"zip": 7}}"#]);
    let payload = Schema::builder()
        .with_fields(
            schema
                .as_struct()
                .fields()
                .iter()
                .filter(|f| f.name != "offset")
                .cloned()
                .collect::<Vec<_>>(),
        )
        .build()
        .unwrap_or_else(|e| unreachable!("{e}"));
    let arrow = kfs_parquet::arrow_schema(&payload).unwrap_or_else(|e| unreachable!("{e}"));
    let values = vec![
        object(r#"{"id": 2, "tags": ["b", null], "addr": {"zip": 9}}"#),
        object(r#"{"unknown": null, "hollow": []}"#),
    ];
    for value in &values {
        assert_eq!(fits(&schema, value), Ok(()));
    }
    assert!(fits(&schema, &object(r#"{"id": "text"}"#)).is_err());
    assert!(fits(&schema, &object(r#"{"new": 1}"#)).is_err());
    let columns = payload_columns(&arrow, &values).unwrap_or_else(|e| unreachable!("{e}"));
    assert_eq!(columns.len(), 3);
    assert_eq!(columns[0].len(), 2);
    for column in &columns {
        assert!(column.is_null(1), "{column:?}");
    }
}

#[test]
fn change_events_give_their_after_image_or_delete_or_the_reason() {
    let change = |text: &str| parse_change(Some(text.as_bytes()));
    let Change {
        fields,
        image,
        source,
    } = change(r#"{"op":"u","before":{"id":1},"after":{"id":1,"name":"b"},"source":{"lsn":12}}"#)
        .unwrap_or_else(|e| unreachable!("{e}"));
    assert_eq!(source, Some(kfs_plan::changes::SourcePosition::Lsn(12)));
    assert_eq!(fields.get("name"), Some(&Value::from("b")));
    let image: Value =
        serde_json::from_slice(&image.unwrap_or_default()).unwrap_or_else(|e| unreachable!("{e}"));
    assert_eq!(image, serde_json::json!({"id": 1, "name": "b"}));
    // The schema wrapper of Kafka Connect's JSON converter.
    let wrapped = change(r#"{"schema":{},"payload":{"op":"c","after":{"id":2}}}"#);
    assert!(wrapped.is_ok_and(|c| c.fields.len() == 1 && c.image.is_some() && c.source.is_none()));
    // Deletes, and Debezium's tombstone after them, delete the key.
    let deleted = change(r#"{"op":"d","before":{"id":1},"after":null}"#);
    assert!(deleted.is_ok_and(|c| c.fields.is_empty() && c.image.is_none()));
    assert!(parse_change(None).is_ok_and(|c| c == Change::default()));
    for (text, reason) in [
        ("not json", "value is not JSON"),
        ("[1]", "no Debezium change event"),
        (r#"{"after":{"id":1}}"#, "no Debezium change event"),
        (r#"{"op":"m","message":{"prefix":"x"}}"#, "op m"),
        (r#"{"op":"t"}"#, "truncate"),
        (r#"{"op":"c","after":[1,2]}"#, "no Debezium change event"),
        (r#"{"op":"c","after":null}"#, "after"),
        (r#"{"op":"x","after":{}}"#, "no Debezium change event"),
    ] {
        let refused = change(text).err().map(|e| e.0).unwrap_or_default();
        assert!(refused.contains(reason), "{text}: {refused}");
    }
}

/// JSON values of any shape, nested a few levels.
fn any_json() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[a-z]{0,3}".prop_map(Value::from),
        Just(Value::from("c")),
        Just(Value::from("d")),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(
                prop_oneof![
                    Just("op".to_owned()),
                    Just("after".to_owned()),
                    Just("before".to_owned()),
                    Just("payload".to_owned()),
                    Just("schema".to_owned()),
                    Just("source".to_owned()),
                    "[a-z]{1,3}"
                ],
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest::proptest! {
    /// A hostile producer's value, bytes or JSON of any shape, is a change or a
    /// reason, never a panic; a change's image is the JSON of its fields.
    #[test]
    fn any_value_is_a_change_or_a_reason(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64), json in any_json()) {
        let _ = parse_change(Some(&bytes));
        if let Ok(Change { fields, image: Some(image), .. }) = parse_change(Some(json.to_string().as_bytes())) {
            let parsed: Value = serde_json::from_slice(&image).unwrap_or(Value::Null);
            proptest::prop_assert_eq!(parsed, Value::Object(fields));
        }
    }
}

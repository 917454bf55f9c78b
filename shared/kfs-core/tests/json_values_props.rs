//! Property tests of JSON values as typed columns, on arbitrary JSON (nested objects
//! and arrays of mixed types, nulls, large and fractional numbers, metadata names) and
//! arbitrary bytes: nothing panics; every value a schema absorbs then fits the grown
//! schema and becomes Arrow columns of it (what the converter's second pass relies
//! on); a value that is refused leaves the schema as it was.

use iceberg::spec::Schema;
use kfs_core::testing::{EvolvingSchema, conform, fits, parse_value, payload_columns};
use kfs_plan::naming::ValueFormat;
use proptest::prelude::*;
use serde_json::{Map, Value};

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e300f64..1e300).prop_map(Value::from),
        (-1000i32..1000).prop_map(Value::from),
        "[a-z]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(field_name(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn field_name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("a".to_owned()),
        Just("b".to_owned()),
        Just("offset".to_owned()),
        Just("value".to_owned()),
        Just("value_offset".to_owned()),
        // Names catalogs refuse or confuse: mapped, colliding after mapping, by case.
        Just("a.b".to_owned()),
        Just("a_b".to_owned()),
        Just("A".to_owned()),
        Just("Offset".to_owned()),
        Just(String::new()),
        Just("x".repeat(300)),
        "[a-c]{1,2}",
        "\\PC{0,3}",
    ]
}

fn object() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map(field_name(), json_value(), 0..5)
        .prop_map(|m| m.into_iter().collect())
}

/// The payload part of a JSON table's schema, in Arrow.
fn payload(schema: &Schema) -> arrow_schema::SchemaRef {
    let arrow = kfs_core::testing::arrow_schema(schema).unwrap_or_else(|e| panic!("{e}"));
    std::sync::Arc::new(arrow_schema::Schema::new(
        arrow
            .fields()
            .iter()
            .filter(|f| !kfs_core::testing::METADATA_COLUMNS.contains(&f.name().as_str()))
            .cloned()
            .collect::<Vec<_>>(),
    ))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn absorbed_values_fit_and_convert(values in prop::collection::vec(object(), 1..6)) {
        let base = kfs_core::testing::schema_for(ValueFormat::Json, &[])
            .unwrap_or_else(|e| panic!("{e}"));
        let mut evolving = EvolvingSchema::new(&base, base.highest_field_id());
        let mut accepted = Vec::new();
        for value in &values {
            let text = serde_json::to_vec(&Value::Object(value.clone()))
                .unwrap_or_else(|e| panic!("{e}"));
            let parsed = parse_value(Some(&text)).unwrap_or_else(|e| panic!("{e}"));
            let before = evolving.schema(1).unwrap_or_else(|e| panic!("{e}"));
            match evolving.absorb(&parsed) {
                Ok(()) => accepted.push(parsed),
                Err(_) => {
                    let after = evolving.schema(1).unwrap_or_else(|e| panic!("{e}"));
                    prop_assert_eq!(before, after, "a refused value changed the schema");
                }
            }
        }
        let schema = evolving.schema(1).unwrap_or_else(|e| panic!("{e}"));
        let mut conformed = Vec::new();
        for value in accepted {
            prop_assert_eq!(fits(&schema, &value), Ok(()), "{:?} in {:?}", value, schema);
            conformed.push(conform(value, schema.as_struct().fields()));
        }
        let columns = payload_columns(&payload(&schema), &conformed);
        let accepted = conformed;
        prop_assert!(columns.is_ok(), "{:?}: {:?}", accepted, columns.err());
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        if let Ok(value) = parse_value(Some(&bytes)) {
            let base = kfs_core::testing::schema_for(ValueFormat::Json, &[])
                .unwrap_or_else(|e| panic!("{e}"));
            let _ = EvolvingSchema::new(&base, base.highest_field_id()).absorb(&value);
        }
    }
}

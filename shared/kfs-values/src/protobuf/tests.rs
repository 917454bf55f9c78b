//! Tests of `protobuf`.

use super::*;

const SHIP: &str = r#"syntax = "proto3"; package shop;
    message Ship { string city = 1; optional int32 zip = 2; }"#;

const PAYMENT: &str = r#"syntax = "proto3"; package shop;
    import "google/protobuf/timestamp.proto";
    import "google/protobuf/wrappers.proto";
    import "ship.proto";
    message Header { string h = 1; }
    message Payment {
        int64 id = 1;
        double amount = 2;
        google.protobuf.Timestamp placed = 3;
        map<int32, string> attrs = 4;
        Kind kind = 5;
        Ship ship = 6;
        oneof contact { string phone = 7; string fax = 8; }
        google.protobuf.Int64Value limit = 9;
        repeated sint32 scores = 10;
        uint64 big = 11;
        message Inner { bool ok = 1; }
    }
    enum Kind { NEW = 0; OLD = 1; }"#;

const CONFLUENT: SchemaId = SchemaId::Confluent(1);

fn writer() -> Result<ProtobufWriter, String> {
    ProtobufWriter::parse(PAYMENT, &[("ship.proto".into(), SHIP.into())])
}

#[test]
fn message_index_lists_name_messages() -> Result<(), String> {
    assert_eq!(message_indexes(&[0, 9])?, (vec![0], &[9u8][..]));
    // [1]: count 1 (zig-zag 2), index 1 (zig-zag 2).
    assert_eq!(message_indexes(&[2, 2, 9])?, (vec![1], &[9u8][..]));
    // [1, 0]: count 2 (4), then 1 (2) and 0 (0).
    assert_eq!(message_indexes(&[4, 2, 0])?, (vec![1, 0], &[][..]));
    assert!(message_indexes(&[]).is_err_and(|e| e.contains("cut short")));
    assert!(message_indexes(&[2]).is_err_and(|e| e.contains("cut short")));
    assert!(message_indexes(&[0xFF; 11]).is_err());
    assert!(message_indexes(&[0x7E]).is_err_and(|e| e.contains("entries")));
    let writer = writer()?;
    let path = |p: &[i32]| MessageSelector::Path(p.to_vec());
    assert_eq!(writer.message(&path(&[1]))?.full_name(), "shop.Payment");
    // Nested types count as protoc declares them: the map field's entry first.
    assert_eq!(
        writer.message(&path(&[1, 0]))?.full_name(),
        "shop.Payment.AttrsEntry"
    );
    assert_eq!(
        writer.message(&path(&[1, 1]))?.full_name(),
        "shop.Payment.Inner"
    );
    for none in [&[2][..], &[-1], &[0, 0], &[]] {
        assert!(
            writer
                .message(&path(none))
                .is_err_and(|e| e.contains("names no message")),
            "{none:?}"
        );
    }
    // Glue: all messages sorted by full name: Header, Payment, AttrsEntry, Inner.
    let sorted: Vec<String> = (0..4)
        .map(|i| {
            writer
                .message(&MessageSelector::Sorted(i))
                .map(|m| m.full_name().to_owned())
        })
        .collect::<Result<_, _>>()?;
    assert_eq!(
        sorted,
        [
            "shop.Header",
            "shop.Payment",
            "shop.Payment.AttrsEntry",
            "shop.Payment.Inner"
        ]
    );
    assert!(writer.message(&MessageSelector::Sorted(4)).is_err());
    let glue = SchemaId::Glue(uuid::Uuid::nil());
    assert_eq!(
        message_selector(&glue, &[1, 9])?,
        (MessageSelector::Sorted(1), &[9u8][..])
    );
    Ok(())
}

#[test]
fn schemas_map_to_shapes_or_say_why_not() -> Result<(), String> {
    let shape = writer()?.shape(&MessageSelector::Path(vec![1]))?;
    let names: Vec<&str> = shape.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "id", "amount", "placed", "attrs", "kind", "ship", "phone", "fax", "limit", "scores",
            "big"
        ]
    );
    assert_eq!(shape[2].1, Shape::Primitive(PrimitiveType::Timestamptz));
    assert_eq!(
        shape[3].1,
        Shape::Map(Box::new(Shape::Primitive(PrimitiveType::String)))
    );
    assert_eq!(shape[8].1, Shape::Primitive(PrimitiveType::Long));
    let recursive =
        ProtobufWriter::parse(r#"syntax = "proto3"; message Node { Node next = 1; }"#, &[])?;
    assert!(
        recursive
            .shape(&MessageSelector::Path(vec![0]))
            .is_err_and(|e| e.contains("recursive"))
    );
    let json = ProtobufWriter::parse(
        r#"syntax = "proto3"; import "google/protobuf/struct.proto";
           message J { google.protobuf.Struct s = 1; }"#,
        &[],
    )?;
    assert!(json.shape(&MessageSelector::Path(vec![0])).is_err());
    for refused in [
        r#"syntax = "proto3"; import "missing.proto"; message M { int32 a = 1; }"#,
        r#"syntax = "proto3"; message M { int32 a = 1"#,
        r#"syntax = "proto3"; enum E { A = 0; }"#,
    ] {
        assert!(ProtobufWriter::parse(refused, &[]).is_err(), "{refused}");
    }
    Ok(())
}

#[test]
fn values_decode_into_their_columns() -> Result<(), String> {
    use prost::Message;
    let writer = writer()?;
    let payment = writer.message(&MessageSelector::Path(vec![1]))?;
    let (fields, row_type) =
        crate::cells::new_table_row(&writer.shape(&MessageSelector::Path(vec![1]))?)?;
    let mut value = prost_reflect::DynamicMessage::new(payment.clone());
    let mut placed = prost_reflect::DynamicMessage::new(
        payment
            .get_field_by_name("placed")
            .and_then(|f| f.kind().as_message().cloned())
            .ok_or("no Timestamp")?,
    );
    placed.set_field_by_name("seconds", Value::I64(1_764_669_600));
    placed.set_field_by_name("nanos", Value::I32(5_000));
    value.set_field_by_name("id", Value::I64(7));
    value.set_field_by_name("placed", Value::Message(placed));
    value.set_field_by_name(
        "attrs",
        Value::Map([(MapKey::I32(3), Value::String("c".into()))].into()),
    );
    value.set_field_by_name("kind", Value::EnumNumber(1));
    value.set_field_by_name("fax", Value::String("777".into()));
    value.set_field_by_name("scores", Value::List(vec![Value::I32(-1), Value::I32(2)]));
    let mut framed = vec![2, 2];
    framed.extend(value.encode_to_vec());
    let row = writer.decode(&CONFLUENT, &framed, &row_type, true)?;
    let Cell::Struct(cells) = &row else {
        return Err(format!("{row:?}"));
    };
    let text = |s: &str| Cell::Text(s.into());
    assert_eq!(
        cells,
        &vec![
            Cell::Int(7),
            Cell::Float(0.0),
            Cell::Int(1_764_669_600_000_005),
            Cell::Map(vec![(text("3"), text("c"))]),
            text("OLD"),
            Cell::Null,
            Cell::Null,
            text("777"),
            Cell::Null,
            Cell::List(vec![Cell::Int(-1), Cell::Int(2)]),
            Cell::Int(0),
        ]
    );
    crate::cells::write_row(&fields, &row)?;

    // uint64 beyond a long is refused, never wrapped.
    value.set_field_by_name("big", Value::U64(u64::MAX));
    let mut framed = vec![2, 2];
    framed.extend(value.encode_to_vec());
    assert!(
        writer
            .decode(&CONFLUENT, &framed, &row_type, true)
            .is_err_and(|e| e.contains("beyond a long"))
    );
    Ok(())
}

proptest::proptest! {
    /// A hostile producer's payload: any bytes decode into a row that becomes
    /// Arrow columns, or are refused with the reason; never a panic.
    #[test]
    fn any_payload_decodes_or_is_refused(
        payload in proptest::collection::vec(proptest::num::u8::ANY, 0..200)
    ) {
        let fail = proptest::test_runner::TestCaseError::fail;
        let writer = writer().map_err(fail)?;
        let shape = writer.shape(&MessageSelector::Path(vec![1])).map_err(fail)?;
        let (fields, row_type) = crate::cells::new_table_row(&shape).map_err(fail)?;
        // As framed for Payment ([1]) and as whatever the bytes say.
        let mut framed = vec![2, 2];
        framed.extend_from_slice(&payload);
        let glue = SchemaId::Glue(uuid::Uuid::nil());
        for (id, value) in [(&CONFLUENT, &framed), (&CONFLUENT, &payload), (&glue, &payload)] {
            if let Ok(row) = writer.decode(id, value, &row_type, true) {
                crate::cells::write_row(&fields, &row).map_err(fail)?;
            }
        }
    }
}

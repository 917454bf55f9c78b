//! Tests of `cells`.

use super::*;

#[test]
fn keys_grow_their_own_struct_and_a_value_field_named_like_it_is_refused() -> Result<(), String> {
    let mut next = 1;
    let key = vec![("offset".to_owned(), Shape::Primitive(PrimitiveType::Long))];
    let fields =
        absorb_as((Role::Key, true), &[], &key, &mut next)?.ok_or("the key added nothing")?;
    // The key's fields keep their names inside key_fields (no renaming there).
    assert_eq!(fields[0].name, crate::layout::KEY_FIELDS_COLUMN);
    let Type::Struct(key_struct) = fields[0].field_type.as_ref() else {
        return Err(format!("key_fields is {}", fields[0].field_type));
    };
    assert_eq!(key_struct.fields()[0].name, "offset");
    let clash = vec![(
        "key_fields".to_owned(),
        Shape::Primitive(PrimitiveType::Long),
    )];
    assert!(
        absorb_as((Role::Value, true), &fields, &clash, &mut next)
            .is_err_and(|e| e.contains("collides"))
    );
    // While keys are not decoded, it is a value column like any other.
    assert!(absorb_as((Role::Value, false), &[], &clash, &mut next)?.is_some());
    Ok(())
}

#[test]
fn versions_grow_a_schema_with_stable_ids() -> Result<(), String> {
    let mut next = 1;
    let v1 = vec![
        ("id".to_owned(), Shape::Primitive(PrimitiveType::Int)),
        ("name".to_owned(), Shape::Primitive(PrimitiveType::String)),
    ];
    let fields = absorb(&[], &v1, true, &mut next)?.ok_or("v1 added nothing")?;
    assert_eq!(next, 3);
    // v2: id promoted to long, name gone, amount added.
    let v2 = vec![
        ("id".to_owned(), Shape::Primitive(PrimitiveType::Long)),
        ("amount".to_owned(), Shape::Primitive(PrimitiveType::Double)),
    ];
    let grown = absorb(&fields, &v2, true, &mut next)?.ok_or("v2 changed nothing")?;
    let ids: Vec<(i32, &str, String)> = grown
        .iter()
        .map(|f| (f.id, f.name.as_str(), f.field_type.to_string()))
        .collect();
    assert_eq!(
        ids,
        [
            (1, "id", "long".to_owned()),
            (2, "name", "string".to_owned()),
            (3, "amount", "double".to_owned())
        ]
    );
    // v1 again changes nothing (int is written as long); a string id is refused.
    assert_eq!(absorb(&grown, &v1, true, &mut next)?, None);
    let v3 = vec![("id".to_owned(), Shape::Primitive(PrimitiveType::String))];
    assert!(absorb(&grown, &v3, true, &mut next).is_err_and(|e| e.contains("field id")));
    // A metadata column's name is a value column's.
    let v4 = vec![("offset".to_owned(), Shape::Primitive(PrimitiveType::Long))];
    let grown = absorb(&grown, &v4, true, &mut next)?.ok_or("v4 added nothing")?;
    assert!(grown.iter().any(|f| f.name == "value_offset"));
    Ok(())
}

#[test]
fn cells_become_columns_of_every_type() -> Result<(), ArrowError> {
    let item = Arc::new(arrow_schema::Field::new("element", DataType::Int64, true));
    let list = DataType::List(item);
    let rows = [
        Cell::List(vec![Cell::Int(1), Cell::Int(2)]),
        Cell::Null,
        Cell::List(vec![]),
    ];
    let refs: Vec<&Cell> = rows.iter().collect();
    let array = column(&list, &refs)?;
    assert_eq!((array.len(), array.null_count()), (3, 1));
    let decimal = column(&DataType::Decimal128(10, 2), &[&Cell::Decimal(-12345)])?;
    assert_eq!(decimal.len(), 1);
    let uuid = column(
        &DataType::FixedSizeBinary(16),
        &[&Cell::Bytes(vec![7; 16]), &Cell::Null],
    )?;
    assert_eq!(uuid.null_count(), 1);
    Ok(())
}

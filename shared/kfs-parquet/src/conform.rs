//! Reading a data file written under an older schema with the table's current columns:
//! matched by field id, added ones null, widened ones cast.

use arrow_array::RecordBatch;
use std::sync::Arc;

/// `batch` (read from a data file) with the columns of `target` (the table's current
/// schema): columns matched by field id (else by name), those the file predates null,
/// widened ones cast (int → long, float → double), nested structs and lists alike.
pub fn conform_batch(
    batch: &RecordBatch,
    target: &arrow_schema::SchemaRef,
) -> std::result::Result<RecordBatch, arrow_schema::ArrowError> {
    if batch.schema().fields() == target.fields() {
        return RecordBatch::try_new(target.clone(), batch.columns().to_vec());
    }
    let columns = conform_children(
        batch.schema().fields(),
        batch.columns(),
        target.fields(),
        batch.num_rows(),
    )?;
    RecordBatch::try_new_with_options(
        target.clone(),
        columns,
        &arrow_array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )
}

/// The columns `target` asks for, from `columns` (described by `fields`).
fn conform_children(
    fields: &arrow_schema::Fields,
    columns: &[arrow_array::ArrayRef],
    target: &arrow_schema::Fields,
    rows: usize,
) -> std::result::Result<Vec<arrow_array::ArrayRef>, arrow_schema::ArrowError> {
    let id = |field: &arrow_schema::Field| {
        field
            .metadata()
            .get(parquet::arrow::PARQUET_FIELD_ID_META_KEY)
            .cloned()
    };
    target
        .iter()
        .map(|wanted| {
            let found = fields
                .iter()
                .position(|field| match (id(field), id(wanted)) {
                    (Some(a), Some(b)) => a == b,
                    _ => field.name() == wanted.name(),
                });
            match found {
                Some(index) => conform_array(&columns[index], wanted.data_type()),
                None => Ok(arrow_array::new_null_array(wanted.data_type(), rows)),
            }
        })
        .collect()
}

/// `array` as `target`'s type.
fn conform_array(
    array: &arrow_array::ArrayRef,
    target: &arrow_schema::DataType,
) -> std::result::Result<arrow_array::ArrayRef, arrow_schema::ArrowError> {
    use arrow_array::Array;
    use arrow_array::cast::AsArray;
    use arrow_schema::DataType;
    if array.data_type() == target {
        return Ok(array.clone());
    }
    match (array.data_type(), target) {
        (DataType::Struct(fields), DataType::Struct(wanted)) => {
            let input = array.as_struct();
            let children = conform_children(fields, input.columns(), wanted, input.len())?;
            Ok(Arc::new(arrow_array::StructArray::try_new_with_length(
                wanted.clone(),
                children,
                input.nulls().cloned(),
                input.len(),
            )?))
        }
        (DataType::List(_), DataType::List(element)) => {
            let input = array.as_list::<i32>();
            let values = conform_array(input.values(), element.data_type())?;
            Ok(Arc::new(arrow_array::ListArray::try_new(
                element.clone(),
                input.offsets().clone(),
                values,
                input.nulls().cloned(),
            )?))
        }
        (DataType::Map(_, _), DataType::Map(entries, ordered)) => {
            let input = array.as_map();
            let entries_array: arrow_array::ArrayRef = Arc::new(input.entries().clone());
            let conformed = conform_array(&entries_array, entries.data_type())?;
            let Some(conformed) = conformed.as_struct_opt() else {
                return Err(arrow_schema::ArrowError::CastError(format!(
                    "map entries of {} are not a struct",
                    entries.data_type()
                )));
            };
            Ok(Arc::new(arrow_array::MapArray::try_new(
                entries.clone(),
                input.offsets().clone(),
                conformed.clone(),
                input.nulls().cloned(),
                *ordered,
            )?))
        }
        // A column of Iceberg's `unknown` type, or written before the field had one.
        (DataType::Null, _) => Ok(arrow_array::new_null_array(target, array.len())),
        // A file written with dictionary-encoded Arrow columns: their values.
        (DataType::Dictionary(_, _), _) => {
            let dictionary = array.as_any_dictionary();
            let keys = arrow_array::UInt64Array::new(
                dictionary
                    .normalized_keys()
                    .into_iter()
                    .map(|key| u64::try_from(key).unwrap_or(u64::MAX))
                    .collect(),
                array.logical_nulls(),
            );
            let values = arrow_select::take::take(dictionary.values(), &keys, None)?;
            conform_array(&values, target)
        }
        _ => promote(array, target),
    }
}

/// `array` as `target` where that is an Iceberg type promotion (int to long, float to
/// double, a decimal's precision widened) or the same values in another Arrow form
/// (32- and 64-bit offsets; a string column read as binary; a timestamp's zone named
/// differently); any other pair is an error naming both types. Deliberately not
/// `arrow_cast::cast`: that converts between any two types (text parsed as numbers,
/// numbers truncated), which a data file of the table never needs, and is a megabyte of
/// the committer's binary.
fn promote(
    array: &arrow_array::ArrayRef,
    target: &arrow_schema::DataType,
) -> std::result::Result<arrow_array::ArrayRef, arrow_schema::ArrowError> {
    use arrow_array::types::{
        Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type,
        UInt32Type,
    };
    use arrow_schema::DataType as T;
    // The same buffers under the target type (checked as the array is built).
    let relabel = || -> std::result::Result<arrow_array::ArrayRef, arrow_schema::ArrowError> {
        let data = array
            .to_data()
            .into_builder()
            .data_type(target.clone())
            .build()?;
        Ok(arrow_array::make_array(data))
    };
    match (array.data_type(), target) {
        (T::Int8, T::Int32) => Ok(widen::<Int8Type, Int32Type>(array, i32::from)),
        (T::Int16, T::Int32) => Ok(widen::<Int16Type, Int32Type>(array, i32::from)),
        (T::UInt8, T::Int32) => Ok(widen::<UInt8Type, Int32Type>(array, i32::from)),
        (T::UInt16, T::Int32) => Ok(widen::<UInt16Type, Int32Type>(array, i32::from)),
        (T::Int8, T::Int64) => Ok(widen::<Int8Type, Int64Type>(array, i64::from)),
        (T::Int16, T::Int64) => Ok(widen::<Int16Type, Int64Type>(array, i64::from)),
        (T::Int32, T::Int64) => Ok(widen::<Int32Type, Int64Type>(array, i64::from)),
        (T::UInt8, T::Int64) => Ok(widen::<UInt8Type, Int64Type>(array, i64::from)),
        (T::UInt16, T::Int64) => Ok(widen::<UInt16Type, Int64Type>(array, i64::from)),
        (T::UInt32, T::Int64) => Ok(widen::<UInt32Type, Int64Type>(array, i64::from)),
        (T::Float32, T::Float64) => Ok(widen::<Float32Type, Float64Type>(array, f64::from)),
        (T::Decimal128(from, scale), T::Decimal128(to, wanted))
            if scale == wanted && to >= from =>
        {
            relabel()
        }
        (T::Timestamp(unit, _), T::Timestamp(wanted, _)) if unit == wanted => relabel(),
        // A string column read as binary, or the reverse (then checked to be UTF-8 as
        // the array is built): the same offsets and bytes.
        (T::Utf8, T::Binary)
        | (T::Binary, T::Utf8)
        | (T::LargeUtf8, T::LargeBinary)
        | (T::LargeBinary, T::LargeUtf8) => relabel(),
        // 32- and 64-bit offsets (and the same, string and binary crossed).
        (T::Utf8 | T::Binary | T::LargeUtf8 | T::LargeBinary, T::Utf8 | T::Binary) => {
            let (offsets, values, nulls) = byte_parts(array)?;
            let offsets = offsets
                .into_iter()
                .map(i32::try_from)
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|_| {
                    arrow_schema::ArrowError::CastError(format!(
                        "a column of {} holds more bytes than {target} can",
                        array.data_type()
                    ))
                })?;
            let offsets = arrow_buffer::OffsetBuffer::new(offsets.into());
            Ok(match target {
                T::Utf8 => Arc::new(arrow_array::StringArray::try_new(offsets, values, nulls)?),
                _ => Arc::new(arrow_array::BinaryArray::try_new(offsets, values, nulls)?),
            })
        }
        (T::Utf8 | T::Binary | T::LargeUtf8 | T::LargeBinary, T::LargeUtf8 | T::LargeBinary) => {
            let (offsets, values, nulls) = byte_parts(array)?;
            let offsets = arrow_buffer::OffsetBuffer::new(offsets.into());
            Ok(match target {
                T::LargeUtf8 => Arc::new(arrow_array::LargeStringArray::try_new(
                    offsets, values, nulls,
                )?),
                _ => Arc::new(arrow_array::LargeBinaryArray::try_new(
                    offsets, values, nulls,
                )?),
            })
        }
        (from, to) => Err(arrow_schema::ArrowError::CastError(format!(
            "a column of {from} cannot be read as {to}: not an Iceberg type promotion"
        ))),
    }
}

/// A primitive column widened value by value (`f` is lossless).
fn widen<I, O>(
    array: &arrow_array::ArrayRef,
    f: fn(I::Native) -> O::Native,
) -> arrow_array::ArrayRef
where
    I: arrow_array::ArrowPrimitiveType,
    O: arrow_array::ArrowPrimitiveType,
{
    use arrow_array::cast::AsArray;
    Arc::new(array.as_primitive::<I>().unary::<_, O>(f))
}

/// A string or binary column's offsets (as 64-bit), values and nulls.
fn byte_parts(
    array: &arrow_array::ArrayRef,
) -> std::result::Result<
    (
        Vec<i64>,
        arrow_buffer::Buffer,
        Option<arrow_buffer::NullBuffer>,
    ),
    arrow_schema::ArrowError,
> {
    use arrow_array::cast::AsArray;
    use arrow_schema::DataType as T;
    let wide = |offsets: &[i32]| offsets.iter().map(|&o| i64::from(o)).collect::<Vec<_>>();
    Ok(match array.data_type() {
        T::Utf8 => {
            let (offsets, values, nulls) = array.as_string::<i32>().clone().into_parts();
            (wide(&offsets), values, nulls)
        }
        T::Binary => {
            let (offsets, values, nulls) = array.as_binary::<i32>().clone().into_parts();
            (wide(&offsets), values, nulls)
        }
        T::LargeUtf8 => {
            let (offsets, values, nulls) = array.as_string::<i64>().clone().into_parts();
            (offsets.to_vec(), values, nulls)
        }
        T::LargeBinary => {
            let (offsets, values, nulls) = array.as_binary::<i64>().clone().into_parts();
            (offsets.to_vec(), values, nulls)
        }
        other => {
            return Err(arrow_schema::ArrowError::CastError(format!(
                "{other} is not a string or binary type"
            )));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Decimal128Type, Float64Type, Int64Type};
    use arrow_array::{
        Array, ArrayRef, BinaryArray, Decimal128Array, DictionaryArray, Float32Array, Int32Array,
        LargeStringArray, StringArray, TimestampMicrosecondArray, TimestampMillisecondArray,
    };
    use arrow_schema::{DataType, Field, Fields, Schema, TimeUnit};

    type Result = std::result::Result<(), arrow_schema::ArrowError>;

    fn conform(
        array: ArrayRef,
        target: &DataType,
    ) -> std::result::Result<ArrayRef, arrow_schema::ArrowError> {
        conform_array(&array, target)
    }

    #[test]
    fn iceberg_promotions_keep_values_and_nulls() -> Result {
        let longs = conform(
            Arc::new(Int32Array::from(vec![Some(1), None, Some(-7)])),
            &DataType::Int64,
        )?;
        assert_eq!(
            longs.as_primitive::<Int64Type>().iter().collect::<Vec<_>>(),
            [Some(1), None, Some(-7)]
        );
        let doubles = conform(
            Arc::new(Float32Array::from(vec![Some(1.5), None])),
            &DataType::Float64,
        )?;
        assert_eq!(
            doubles
                .as_primitive::<Float64Type>()
                .iter()
                .collect::<Vec<_>>(),
            [Some(1.5), None]
        );
        let narrow =
            Decimal128Array::from(vec![Some(12_345), None]).with_precision_and_scale(5, 2)?;
        let wide = conform(Arc::new(narrow), &DataType::Decimal128(10, 2))?;
        assert_eq!(wide.data_type(), &DataType::Decimal128(10, 2));
        assert_eq!(
            wide.as_primitive::<Decimal128Type>()
                .iter()
                .collect::<Vec<_>>(),
            [Some(12_345), None]
        );
        Ok(())
    }

    #[test]
    fn other_forms_of_the_same_values_are_read_as_the_table_s() -> Result {
        let binary: ArrayRef = Arc::new(BinaryArray::from(vec![Some(&b"ab"[..]), None, Some(b"")]));
        let large = conform(binary, &DataType::LargeBinary)?;
        assert_eq!(
            large.as_binary::<i64>().iter().collect::<Vec<_>>(),
            [Some(&b"ab"[..]), None, Some(b"")]
        );
        let strings = conform(
            Arc::new(LargeStringArray::from(vec![Some("x"), None])),
            &DataType::Utf8,
        )?;
        assert_eq!(
            strings.as_string::<i32>().iter().collect::<Vec<_>>(),
            [Some("x"), None]
        );
        let utc = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        let stamps = conform(
            Arc::new(TimestampMicrosecondArray::from(vec![Some(5), None]).with_timezone("+00:00")),
            &utc,
        )?;
        assert_eq!(stamps.data_type(), &utc);
        let dictionary: DictionaryArray<arrow_array::types::Int32Type> =
            vec![Some("a"), None, Some("b"), Some("a")]
                .into_iter()
                .collect();
        let values = conform(Arc::new(dictionary), &DataType::LargeUtf8)?;
        assert_eq!(
            values.as_string::<i64>().iter().collect::<Vec<_>>(),
            [Some("a"), None, Some("b"), Some("a")]
        );
        let unknown = conform(Arc::new(arrow_array::NullArray::new(2)), &DataType::Int64)?;
        assert_eq!((unknown.len(), unknown.null_count()), (2, 2));
        Ok(())
    }

    #[test]
    fn what_is_not_a_promotion_is_an_error_naming_both_types() {
        let refused: [(ArrayRef, DataType); 6] = [
            (Arc::new(StringArray::from(vec!["1"])), DataType::Int64),
            (
                Arc::new(arrow_array::Int64Array::from(vec![1])),
                DataType::Int32,
            ),
            (Arc::new(Float32Array::from(vec![1.0])), DataType::Int64),
            (
                Arc::new(TimestampMillisecondArray::from(vec![1])),
                DataType::Timestamp(TimeUnit::Microsecond, None),
            ),
            (
                Arc::new(
                    Decimal128Array::from(vec![1])
                        .with_precision_and_scale(10, 2)
                        .unwrap_or_else(|e| panic!("{e}")),
                ),
                DataType::Decimal128(5, 2),
            ),
            (
                Arc::new(BinaryArray::from(vec![&[0xff_u8][..]])),
                DataType::Utf8,
            ),
        ];
        for (array, target) in refused {
            let from = array.data_type().clone();
            match conform(array, &target) {
                Err(e) => assert!(!e.to_string().is_empty(), "{from} -> {target}"),
                Ok(_) => panic!("{from} read as {target}"),
            }
        }
        let message = conform(Arc::new(StringArray::from(vec!["1"])), &DataType::Int64)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            message.contains("Utf8")
                && message.contains("Int64")
                && message.contains("not an Iceberg type promotion"),
            "{message}"
        );
    }

    #[test]
    fn nested_columns_are_matched_by_field_id_and_widened_inside() -> Result {
        let id = |field: Field, id: &str| {
            field.with_metadata(
                [(
                    parquet::arrow::PARQUET_FIELD_ID_META_KEY.to_owned(),
                    id.to_owned(),
                )]
                .into(),
            )
        };
        let old_item = Arc::new(id(Field::new("element", DataType::Int32, true), "3"));
        let old_fields = Fields::from(vec![id(
            Field::new("n", DataType::List(old_item.clone()), true),
            "2",
        )]);
        let old_list = arrow_array::ListArray::try_new(
            old_item,
            arrow_buffer::OffsetBuffer::from_lengths([2, 0]),
            Arc::new(Int32Array::from(vec![1, 2])),
            Some(arrow_buffer::NullBuffer::from(vec![true, false])),
        )?;
        let old_struct =
            arrow_array::StructArray::try_new(old_fields.clone(), vec![Arc::new(old_list)], None)?;
        let file = Arc::new(Schema::new(vec![id(
            Field::new("s", DataType::Struct(old_fields), true),
            "1",
        )]));
        let batch = RecordBatch::try_new(file, vec![Arc::new(old_struct)])?;
        let new_item = Arc::new(id(Field::new("element", DataType::Int64, true), "3"));
        let new_fields = Fields::from(vec![
            id(Field::new("n", DataType::List(new_item), true), "2"),
            id(Field::new("added", DataType::Utf8, true), "4"),
        ]);
        let table = Arc::new(Schema::new(vec![id(
            Field::new("renamed", DataType::Struct(new_fields), true),
            "1",
        )]));
        let conformed = conform_batch(&batch, &table)?;
        let s = conformed.column(0).as_struct();
        let list = s.column(0).as_list::<i32>();
        assert_eq!(
            list.value(0).as_primitive::<Int64Type>().values().to_vec(),
            [1, 2]
        );
        assert!(list.is_null(1));
        assert_eq!(s.column(1).null_count(), 2);
        Ok(())
    }
}

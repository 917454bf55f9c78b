//! A written Parquet file's Iceberg metrics, read from its footer: per field id, the
//! compressed column sizes, value and null counts, the lower and upper bounds of its
//! column chunks' statistics, and the row groups' offsets for splitting. NaN counts,
//! which Parquet statistics do not keep, are counted on the batches as they are
//! written ([`count_nans`]).
//!
//! A file's bound must hold for every row group: engines skip files and row groups by
//! it, so a bound that is too tight answers queries wrongly without an error
//! (trinodb/trino#19052). A column gets a file bound only when every row group holding
//! a non-null value of it has one; a string or binary statistic parquet-rs truncated
//! (at 64 bytes) is still a valid bound (a prefix is below the value, and the truncated
//! maximum is incremented), so it widens the file's bound like an exact one. iceberg-rust
//! 0.10.1 skips inexact row groups instead and keeps the others' bounds (docs/upstream.md).

use arrow_array::cast::AsArray;
use arrow_array::types::{ArrowPrimitiveType, Float32Type, Float64Type};
use arrow_array::{Array, ArrayRef, GenericListArray, OffsetSizeTrait, RecordBatch};
use arrow_schema::{DataType, Field};
use iceberg::spec::{
    DataContentType, DataFileBuilder, DataFileFormat, Datum, PrimitiveType, Schema, Struct, Type,
};
use iceberg::{Error, ErrorKind, Result};
use parquet::file::metadata::ParquetMetaData;
use parquet::file::statistics::{Statistics, ValueStatistics};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The data file entry of `metadata` (a file of `size` bytes at `path`, written with
/// `schema`'s field ids): content, format, counts, sizes, bounds and split offsets;
/// the caller sets the partition.
pub(crate) fn data_file_builder(
    schema: &Schema,
    metadata: &ParquetMetaData,
    size: u64,
    path: String,
    nans: HashMap<i32, u64>,
) -> Result<DataFileBuilder> {
    let (mut sizes, mut values, mut nulls) = (HashMap::new(), HashMap::new(), HashMap::new());
    let mut lower: HashMap<i32, Datum> = HashMap::new();
    let mut upper: HashMap<i32, Datum> = HashMap::new();
    // Columns with a row group whose values have no usable bound: no file bound.
    let mut unbounded: HashSet<(i32, Bound)> = HashSet::new();
    for group in metadata.row_groups() {
        for column in group.columns() {
            let info = column.column_descr().self_type().get_basic_info();
            if !info.has_id() {
                continue;
            }
            let id = info.id();
            let Some(Type::Primitive(primitive)) = schema.field_by_id(id).map(|f| &*f.field_type)
            else {
                continue;
            };
            *sizes.entry(id).or_insert(0u64) +=
                u64::try_from(column.compressed_size()).unwrap_or(0);
            let num_values = u64::try_from(column.num_values()).unwrap_or(0);
            *values.entry(id).or_insert(0u64) += num_values;
            let Some(statistics) = column.statistics() else {
                if num_values > 0 {
                    unbounded.extend([(id, Bound::Min), (id, Bound::Max)]);
                }
                continue;
            };
            if let Some(null_count) = statistics.null_count_opt() {
                *nulls.entry(id).or_insert(0u64) += null_count;
            }
            // Only nulls (or nothing): the row group constrains no bound.
            if statistics.null_count_opt() == Some(num_values) {
                continue;
            }
            for which in [Bound::Min, Bound::Max] {
                match group_bound(primitive, statistics, which)? {
                    Some(datum) => match which {
                        Bound::Min => widen(&mut lower, id, datum, std::cmp::Ordering::Less),
                        Bound::Max => widen(&mut upper, id, datum, std::cmp::Ordering::Greater),
                    },
                    None => {
                        unbounded.insert((id, which));
                    }
                }
            }
        }
    }
    lower.retain(|id, _| !unbounded.contains(&(*id, Bound::Min)));
    upper.retain(|id, _| !unbounded.contains(&(*id, Bound::Max)));
    let mut builder = DataFileBuilder::default();
    builder
        .content(DataContentType::Data)
        .file_path(path)
        .file_format(DataFileFormat::Parquet)
        .partition(Struct::empty())
        .record_count(u64::try_from(metadata.file_metadata().num_rows()).unwrap_or(0))
        .file_size_in_bytes(size)
        .column_sizes(sizes)
        .value_counts(values)
        .null_value_counts(nulls)
        .nan_value_counts(nans)
        .lower_bounds(lower)
        .upper_bounds(upper)
        .split_offsets(Some(
            metadata
                .row_groups()
                .iter()
                .filter_map(|group| group.file_offset())
                .collect(),
        ));
    Ok(builder)
}

/// Adds the NaN values of `batch`'s float columns (nested ones included) to `counts`,
/// by field id (the Arrow fields' `PARQUET:field_id`).
pub(crate) fn count_nans(batch: &RecordBatch, counts: &mut HashMap<i32, u64>) {
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        count_field_nans(field, column.as_ref(), counts);
    }
}

fn count_field_nans(field: &Field, array: &dyn Array, counts: &mut HashMap<i32, u64>) {
    fn nans<T: ArrowPrimitiveType>(array: &dyn Array, is_nan: impl Fn(T::Native) -> bool) -> u64 {
        array.as_primitive_opt::<T>().map_or(0, |a| {
            a.iter().flatten().filter(|v| is_nan(*v)).count() as u64
        })
    }
    let found = match field.data_type() {
        DataType::Float32 => nans::<Float32Type>(array, f32::is_nan),
        DataType::Float64 => nans::<Float64Type>(array, f64::is_nan),
        DataType::Struct(children) => {
            if let Some(array) = array.as_struct_opt() {
                for (child, column) in children.iter().zip(array.columns()) {
                    count_field_nans(child, column.as_ref(), counts);
                }
            }
            return;
        }
        DataType::List(child) => {
            if let Some(list) = array.as_list_opt::<i32>() {
                count_field_nans(child, listed_values(list).as_ref(), counts);
            }
            return;
        }
        DataType::LargeList(child) => {
            if let Some(list) = array.as_list_opt::<i64>() {
                count_field_nans(child, listed_values(list).as_ref(), counts);
            }
            return;
        }
        DataType::Map(entries, _) => {
            if let Some(map) = array.as_map_opt() {
                let offsets = map.value_offsets();
                let at = |o: Option<&i32>| o.and_then(|o| usize::try_from(*o).ok()).unwrap_or(0);
                let (first, last) = (at(offsets.first()), at(offsets.last()));
                let entries_array: ArrayRef = Arc::new(map.entries().clone());
                count_field_nans(
                    entries,
                    entries_array
                        .slice(first, last.saturating_sub(first))
                        .as_ref(),
                    counts,
                );
            }
            return;
        }
        _ => return,
    };
    let Some(id) = field
        .metadata()
        .get(parquet::arrow::PARQUET_FIELD_ID_META_KEY)
        .and_then(|id| id.parse::<i32>().ok())
    else {
        return;
    };
    *counts.entry(id).or_insert(0) += found;
}

/// The values a list array's rows hold (its child values between its first and last
/// offsets).
fn listed_values<O: OffsetSizeTrait>(list: &GenericListArray<O>) -> ArrayRef {
    let offsets = list.value_offsets();
    let first = offsets.first().map_or(0, |o| o.as_usize());
    let last = offsets.last().map_or(0, |o| o.as_usize());
    list.values().slice(first, last.saturating_sub(first))
}

/// Keeps in `bounds` whichever of its bound for `id` and `datum` lies further towards
/// `keep`.
fn widen(bounds: &mut HashMap<i32, Datum>, id: i32, datum: Datum, keep: std::cmp::Ordering) {
    match bounds.get(&id) {
        Some(current) if datum.partial_cmp(current) != Some(keep) => {}
        _ => {
            bounds.insert(id, datum);
        }
    }
}

/// A row group's bound on a column's values, valid for all of them: `None` when it has
/// none that is. A truncated string or binary statistic is valid (see the module's
/// docs); a statistic Parquet marks inexact for another type is not used.
fn group_bound(
    primitive: &PrimitiveType,
    statistics: &Statistics,
    which: Bound,
) -> Result<Option<Datum>> {
    let exact = match which {
        Bound::Min => statistics.min_is_exact(),
        Bound::Max => statistics.max_is_exact(),
    };
    if !exact && !matches!(primitive, PrimitiveType::String | PrimitiveType::Binary) {
        return Ok(None);
    }
    bound(primitive, statistics, which)
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Bound {
    Min,
    Max,
}

/// A column chunk's bound as a value of the field's Iceberg type; `None` for a type
/// whose Parquet statistics do not order as Iceberg's do, or when there is none.
fn bound(
    primitive: &PrimitiveType,
    statistics: &Statistics,
    which: Bound,
) -> Result<Option<Datum>> {
    fn pick<T>(s: &ValueStatistics<T>, which: Bound) -> Option<&T> {
        match which {
            Bound::Min => s.min_opt(),
            Bound::Max => s.max_opt(),
        }
    }
    let bytes = match which {
        Bound::Min => statistics.min_bytes_opt(),
        Bound::Max => statistics.max_bytes_opt(),
    };
    let invalid = |what: &str| {
        Error::new(
            ErrorKind::DataInvalid,
            format!("a {what} statistic for a {primitive} column"),
        )
    };
    // Decimals are stored big-endian, two's complement, as Iceberg serializes them.
    let decimal =
        |unscaled: i128| Datum::try_from_bytes(&unscaled.to_be_bytes(), primitive.clone());
    use PrimitiveType as P;
    Ok(match (primitive, statistics) {
        (P::Boolean, Statistics::Boolean(s)) => pick(s, which).map(|v| Datum::bool(*v)),
        (P::Int, Statistics::Int32(s)) => pick(s, which).map(|v| Datum::int(*v)),
        (P::Date, Statistics::Int32(s)) => pick(s, which).map(|v| Datum::date(*v)),
        (P::Long, Statistics::Int64(s)) => pick(s, which).map(|v| Datum::long(*v)),
        (P::Time, Statistics::Int64(s)) => {
            pick(s, which).map(|v| Datum::time_micros(*v)).transpose()?
        }
        (P::Timestamp, Statistics::Int64(s)) => pick(s, which).map(|v| Datum::timestamp_micros(*v)),
        (P::Timestamptz, Statistics::Int64(s)) => {
            pick(s, which).map(|v| Datum::timestamptz_micros(*v))
        }
        (P::TimestampNs, Statistics::Int64(s)) => {
            pick(s, which).map(|v| Datum::timestamp_nanos(*v))
        }
        (P::TimestamptzNs, Statistics::Int64(s)) => {
            pick(s, which).map(|v| Datum::timestamptz_nanos(*v))
        }
        (P::Float, Statistics::Float(s)) => pick(s, which).map(|v| Datum::float(*v)),
        (P::Double, Statistics::Double(s)) => pick(s, which).map(|v| Datum::double(*v)),
        (P::Decimal { .. }, Statistics::Int32(s)) => pick(s, which)
            .map(|v| decimal(i128::from(*v)))
            .transpose()?,
        (P::Decimal { .. }, Statistics::Int64(s)) => pick(s, which)
            .map(|v| decimal(i128::from(*v)))
            .transpose()?,
        (P::Decimal { .. }, Statistics::ByteArray(_) | Statistics::FixedLenByteArray(_)) => bytes
            .map(|b| Datum::try_from_bytes(b, primitive.clone()))
            .transpose()?,
        (P::String, Statistics::ByteArray(_)) => bytes
            .map(|b| {
                std::str::from_utf8(b)
                    .map(Datum::string)
                    .map_err(|_| invalid("non-UTF-8 string"))
            })
            .transpose()?,
        (P::Binary, Statistics::ByteArray(_)) => bytes.map(|b| Datum::binary(b.to_vec())),
        (P::Fixed(len), Statistics::FixedLenByteArray(_)) => bytes
            .map(|b| match u64::try_from(b.len()).ok() == Some(*len) {
                true => Ok(Datum::fixed(b.to_vec())),
                false => Err(invalid("fixed of another length")),
            })
            .transpose()?,
        (P::Uuid, Statistics::FixedLenByteArray(_)) => bytes
            .map(|b| {
                uuid::Uuid::from_slice(b)
                    .map(Datum::uuid)
                    .map_err(|_| invalid("uuid of another length"))
            })
            .transpose()?,
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use parquet::data_type::{ByteArray, FixedLenByteArray};

    fn both(primitive: &PrimitiveType, statistics: &Statistics) -> (Option<Datum>, Option<Datum>) {
        let get = |which| bound(primitive, statistics, which).ok().flatten();
        (get(Bound::Min), get(Bound::Max))
    }

    #[test]
    fn bounds_of_every_type_read_as_iceberg_values() {
        let decimal = PrimitiveType::Decimal {
            precision: 9,
            scale: 2,
        };
        // Compared by value: the parsed decimals have another precision.
        let parse = |text: &str| {
            Datum::decimal_from_str(text)
                .ok()
                .map(|d| d.literal().clone())
        };
        let values = |(min, max): (Option<Datum>, Option<Datum>)| {
            (
                min.map(|d| d.literal().clone()),
                max.map(|d| d.literal().clone()),
            )
        };
        assert_eq!(
            values(both(
                &decimal,
                &Statistics::int32(Some(-150), Some(2500), None, None, false)
            )),
            (parse("-1.50"), parse("25.00"))
        );
        assert_eq!(
            values(both(
                &decimal,
                &Statistics::int64(Some(1), Some(99), None, None, false)
            )),
            (parse("0.01"), parse("0.99"))
        );
        let big_endian = |v: i32| ByteArray::from(v.to_be_bytes().to_vec());
        assert_eq!(
            values(both(
                &decimal,
                &Statistics::byte_array(
                    Some(big_endian(-7)),
                    Some(big_endian(700)),
                    None,
                    None,
                    false
                )
            )),
            (parse("-0.07"), parse("7.00"))
        );
        let id = uuid::Uuid::from_u128(42);
        let fixed = |b: &[u8]| FixedLenByteArray::from(ByteArray::from(b.to_vec()));
        let uuids = Statistics::fixed_len_byte_array(
            Some(fixed(id.as_bytes())),
            Some(fixed(id.as_bytes())),
            None,
            None,
            false,
        );
        assert_eq!(
            both(&PrimitiveType::Uuid, &uuids),
            (Some(Datum::uuid(id)), Some(Datum::uuid(id)))
        );
        // A statistic that cannot be the column's type is an error, never a panic.
        let short = Statistics::fixed_len_byte_array(Some(fixed(b"ab")), None, None, None, false);
        assert!(bound(&PrimitiveType::Uuid, &short, Bound::Min).is_err());
        assert!(bound(&PrimitiveType::Fixed(3), &short, Bound::Min).is_err());
        let not_utf8 =
            Statistics::byte_array(Some(ByteArray::from(vec![0xff])), None, None, None, false);
        assert!(bound(&PrimitiveType::String, &not_utf8, Bound::Min).is_err());
        assert_eq!(
            both(
                &PrimitiveType::Date,
                &Statistics::int32(Some(3), Some(9), None, None, false)
            ),
            (Some(Datum::date(3)), Some(Datum::date(9)))
        );
        assert_eq!(
            both(
                &PrimitiveType::Boolean,
                &Statistics::boolean(Some(false), Some(true), None, None, false)
            ),
            (Some(Datum::bool(false)), Some(Datum::bool(true)))
        );
        // Statistics of another physical type give no bound.
        assert_eq!(
            both(
                &PrimitiveType::Long,
                &Statistics::int32(Some(1), Some(2), None, None, false)
            ),
            (None, None)
        );
    }
}

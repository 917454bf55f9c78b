//! Whether a decoded registry value fits its column as it is: the ranges of Iceberg's
//! types, checked once for every value format (Avro, Protobuf, JSON Schema) before a
//! value becomes a cell of its row.
//!
//! A value out of its column's range is never stored as another value (a decimal
//! truncated to its physical width, a float overflowed to infinity, an integer
//! wrapped) nor left for the data file's writer to refuse (a time outside the day
//! fails the whole file, and with it the segment): it is an error naming the value
//! and the column type, and the record a dead letter with that reason.
//!
//! | Column | Range |
//! |---|---|
//! | int, date | 32-bit signed |
//! | time (µs) | `[0, 86 400 000 000)`: within one day |
//! | float | a finite value stays finite (no overflow to infinity) |
//! | decimal(p, s) | at most `p` digits |
//! | fixed(n), uuid | exactly `n` (16) bytes |
//!
//! Long, double and timestamps hold every value their cells can carry (a timestamp
//! beyond 64-bit microseconds is refused where it is converted to microseconds).

use super::cells::Cell;
use arrow_schema::{DataType, TimeUnit};

/// Microseconds in a day: a time of day is below it.
pub const MICROS_PER_DAY: i64 = 86_400_000_000;

/// `cell` as a cell of a `data_type` column, or why the column cannot hold it.
/// Composite cells (structs, lists, maps) pass as they are: their members were
/// checked when they were converted.
pub fn fit(cell: Cell, data_type: &DataType) -> Result<Cell, String> {
    match (data_type, &cell) {
        (DataType::Int32, Cell::Int(i)) if i32::try_from(*i).is_err() => {
            Err(format!("{i} is beyond the range of an int column"))
        }
        (DataType::Date32, Cell::Int(days)) if i32::try_from(*days).is_err() => Err(format!(
            "date of {days} days is beyond the range of a date column"
        )),
        (DataType::Time64(TimeUnit::Microsecond), Cell::Int(us))
            if !(0..MICROS_PER_DAY).contains(us) =>
        {
            Err(format!(
                "time of {us} µs is outside a day (0 to {MICROS_PER_DAY} µs), as a time column requires"
            ))
        }
        (DataType::Float32, Cell::Float(f)) if f.is_finite() && (*f as f32).is_infinite() => {
            Err(format!("{f} is beyond the range of a float column"))
        }
        (DataType::Decimal128(precision, scale), Cell::Decimal(unscaled))
            if !fits_digits(*unscaled, *precision) =>
        {
            Err(format!(
                "{} has more than {precision} digits: it does not fit decimal({precision}, {scale})",
                decimal_text(*unscaled, *scale)
            ))
        }
        (DataType::FixedSizeBinary(size), Cell::Bytes(bytes))
            if i32::try_from(bytes.len()).ok() != Some(*size) =>
        {
            Err(format!(
                "{} bytes do not fit a fixed({size}) column",
                bytes.len()
            ))
        }
        _ => Ok(cell),
    }
}

/// True when `unscaled` has at most `precision` decimal digits.
fn fits_digits(unscaled: i128, precision: u8) -> bool {
    match 10i128.checked_pow(u32::from(precision)) {
        Some(bound) => unscaled.unsigned_abs() < bound.unsigned_abs(),
        // Beyond 38 digits: anything an i128 holds.
        None => true,
    }
}

/// A decimal's text, from its unscaled value and scale (`12345`, 2 → `123.45`).
pub fn decimal_text(unscaled: i128, scale: i8) -> String {
    let digits = unscaled.unsigned_abs().to_string();
    let sign = if unscaled < 0 { "-" } else { "" };
    let Ok(scale) = usize::try_from(scale) else {
        return format!("{sign}{digits}e{}", -i32::from(scale));
    };
    if scale == 0 {
        return format!("{sign}{digits}");
    }
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (whole, fraction) = padded.split_at(padded.len() - scale);
    format!("{sign}{whole}.{fraction}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_beyond_their_column_are_refused_never_changed() {
        let time = DataType::Time64(TimeUnit::Microsecond);
        let refused = [
            (Cell::Int(i64::from(i32::MAX) + 1), DataType::Int32, "int"),
            (Cell::Int(i64::from(i32::MIN) - 1), DataType::Date32, "date"),
            (Cell::Int(-1), time.clone(), "outside a day"),
            (Cell::Int(MICROS_PER_DAY), time.clone(), "outside a day"),
            (Cell::Float(1e39), DataType::Float32, "float"),
            (Cell::Float(-1e39), DataType::Float32, "float"),
            (
                Cell::Decimal(4_294_967_419),
                DataType::Decimal128(4, 2),
                "42949674.19 has more than 4 digits",
            ),
            (
                Cell::Decimal(-10_000),
                DataType::Decimal128(4, 2),
                "-100.00",
            ),
            (
                Cell::Decimal(i128::MAX),
                DataType::Decimal128(38, 0),
                "38 digits",
            ),
            (
                Cell::Bytes(vec![0; 15]),
                DataType::FixedSizeBinary(16),
                "fixed(16)",
            ),
        ];
        for (cell, data_type, reason) in refused {
            let result = fit(cell.clone(), &data_type);
            assert!(
                result.as_ref().is_err_and(|e| e.contains(reason)),
                "{cell:?} in {data_type}: {result:?}"
            );
        }
        let kept = [
            (Cell::Int(i64::from(i32::MIN)), DataType::Int32),
            (Cell::Int(0), time.clone()),
            (Cell::Int(MICROS_PER_DAY - 1), time),
            (Cell::Float(f64::from(f32::MAX)), DataType::Float32),
            (Cell::Float(f64::INFINITY), DataType::Float32),
            (Cell::Float(f64::NAN), DataType::Float32),
            (Cell::Float(1e300), DataType::Float64),
            (Cell::Decimal(9_999), DataType::Decimal128(4, 2)),
            (Cell::Decimal(-9_999), DataType::Decimal128(4, 2)),
            (
                Cell::Decimal(10i128.pow(38) - 1),
                DataType::Decimal128(38, 0),
            ),
            (Cell::Int(i64::MIN), DataType::Int64),
            (Cell::Null, DataType::Int32),
            (Cell::Bytes(vec![0; 16]), DataType::FixedSizeBinary(16)),
        ];
        for (cell, data_type) in kept {
            assert!(
                fit(cell.clone(), &data_type).is_ok(),
                "{cell:?} {data_type}"
            );
        }
    }

    #[test]
    fn decimals_read_as_written() {
        assert_eq!(decimal_text(12_345, 2), "123.45");
        assert_eq!(decimal_text(-5, 3), "-0.005");
        assert_eq!(decimal_text(7, 0), "7");
        assert_eq!(decimal_text(7, -2), "7e2");
        assert_eq!(decimal_text(i128::MIN, 0), i128::MIN.to_string());
    }
}

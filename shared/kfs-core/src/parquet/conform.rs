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
    use arrow_schema::DataType;
    if array.data_type() == target {
        return Ok(array.clone());
    }
    match (array.data_type(), target) {
        (DataType::Struct(fields), DataType::Struct(wanted)) => {
            let Some(input) = array.as_any().downcast_ref::<arrow_array::StructArray>() else {
                return Err(arrow_schema::ArrowError::CastError(format!(
                    "not a struct array: {}",
                    array.data_type()
                )));
            };
            let children = conform_children(fields, input.columns(), wanted, input.len())?;
            Ok(Arc::new(arrow_array::StructArray::try_new_with_length(
                wanted.clone(),
                children,
                input.nulls().cloned(),
                input.len(),
            )?))
        }
        (DataType::List(_), DataType::List(element)) => {
            let Some(input) = array.as_any().downcast_ref::<arrow_array::ListArray>() else {
                return Err(arrow_schema::ArrowError::CastError(format!(
                    "not a list array: {}",
                    array.data_type()
                )));
            };
            let values = conform_array(input.values(), element.data_type())?;
            Ok(Arc::new(arrow_array::ListArray::try_new(
                element.clone(),
                input.offsets().clone(),
                values,
                input.nulls().cloned(),
            )?))
        }
        _ => arrow_cast::cast(array, target),
    }
}

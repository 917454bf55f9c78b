//! The Parquet file writer of conversion, in iceberg-rust's writer stack (in place of
//! its `ParquetWriter`): the columns encoded in parallel ([`RowGroupEncoder`]), row
//! groups bounded by the table's properties exactly as Parquet's own writer bounds
//! them, each
//! row group uploaded as soon as it is complete, and the Iceberg metrics read from the
//! footer ([`data_file_builder`]) rather than from a second pass over the rows.

use super::encode::{RowGroupEncoder, encoding_threads};
use super::metrics::{count_nans, data_file_builder};
use super::parquet_error;
use arrow_array::RecordBatch;
use bytes::Bytes;
use iceberg::io::{FileWrite, OutputFile};
use iceberg::spec::{DataFileBuilder, SchemaRef};
use iceberg::writer::CurrentFileStatus;
use iceberg::writer::file_writer::{FileWriter, FileWriterBuilder};
use iceberg::{Error, ErrorKind, Result};
use parquet::arrow::arrow_writer::ArrowRowGroupWriterFactory;
use parquet::arrow::{ArrowSchemaConverter, add_encoded_arrow_schema_to_metadata};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use std::collections::HashMap;
use std::sync::Arc;

/// Most threads one file's encoding uses.
const MAX_ENCODING_THREADS: usize = 4;

/// Builds a [`ParquetFileWriter`] per output file.
#[derive(Clone)]
pub struct ParquetFileWriterBuilder {
    properties: Arc<WriterProperties>,
    schema: SchemaRef,
    arrow_schema: arrow_schema::SchemaRef,
    threads: usize,
}

impl ParquetFileWriterBuilder {
    /// Files of `schema` written with `properties` (the table's, see
    /// [`crate::writer_properties`]).
    pub fn new(mut properties: WriterProperties, schema: SchemaRef) -> Result<Self> {
        let arrow_schema = crate::arrow_schema(&schema)?;
        add_encoded_arrow_schema_to_metadata(&arrow_schema, &mut properties);
        Ok(Self {
            properties: Arc::new(properties),
            schema,
            arrow_schema,
            threads: encoding_threads(MAX_ENCODING_THREADS),
        })
    }
}

#[cfg(any(test, feature = "test-support"))]
impl ParquetFileWriterBuilder {
    /// The same, encoding on `threads` threads whatever the machine has.
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads;
        self
    }
}

impl FileWriterBuilder for ParquetFileWriterBuilder {
    type R = ParquetFileWriter;

    async fn build(&self, output: OutputFile) -> Result<Self::R> {
        Ok(ParquetFileWriter {
            builder: self.clone(),
            output,
            open: None,
            rows: 0,
            uploaded: 0,
            nans: HashMap::new(),
        })
    }
}

/// The file being written: the Parquet encoder (its output buffered until a row group
/// is complete), the row group in progress and the upload.
struct OpenFile {
    file: SerializedFileWriter<Vec<u8>>,
    factory: ArrowRowGroupWriterFactory,
    row_group: Option<RowGroupEncoder>,
    upload: Box<dyn FileWrite>,
}

/// Writes one Parquet data file; nothing is created until a row arrives.
pub struct ParquetFileWriter {
    builder: ParquetFileWriterBuilder,
    output: OutputFile,
    open: Option<OpenFile>,
    rows: usize,
    uploaded: u64,
    nans: HashMap<i32, u64>,
}

impl ParquetFileWriter {
    async fn open(&mut self) -> Result<&mut OpenFile> {
        if self.open.is_none() {
            let path = self.output.location().to_owned();
            let parquet_schema = ArrowSchemaConverter::new()
                .with_coerce_types(self.builder.properties.coerce_types())
                .convert(&self.builder.arrow_schema)
                .map_err(parquet_error(ErrorKind::Unexpected, &path))?;
            let file = SerializedFileWriter::new(
                Vec::new(),
                parquet_schema.root_schema_ptr(),
                self.builder.properties.clone(),
            )
            .map_err(parquet_error(ErrorKind::Unexpected, &path))?;
            let factory = ArrowRowGroupWriterFactory::new(&file, self.builder.arrow_schema.clone());
            let upload = self.output.writer().await?;
            self.open = Some(OpenFile {
                file,
                factory,
                row_group: None,
                upload,
            });
        }
        self.open
            .as_mut()
            .ok_or_else(|| Error::new(ErrorKind::Unexpected, "the file did not open"))
    }

    /// Encodes `batch` into the row group in progress, starting one when none is.
    async fn encode(&mut self, batch: &RecordBatch) -> Result<()> {
        let threads = self.builder.threads;
        let path = self.output.location().to_owned();
        let open = self.open().await?;
        let row_group = match &mut open.row_group {
            Some(row_group) => row_group,
            slot => slot.insert(RowGroupEncoder::new(
                open.factory
                    .create_column_writers(open.file.flushed_row_groups().len())
                    .map_err(parquet_error(ErrorKind::Unexpected, &path))?,
                threads,
            )),
        };
        row_group
            .write(batch)
            .map_err(parquet_error(ErrorKind::Unexpected, &path))
    }

    /// Closes the row group in progress, if any, and uploads what the file holds so far.
    async fn flush(&mut self) -> Result<()> {
        let path = self.output.location().to_owned();
        let Some(open) = self.open.as_mut() else {
            return Ok(());
        };
        if let Some(row_group) = open.row_group.take() {
            let mut writer = open
                .file
                .next_row_group()
                .map_err(parquet_error(ErrorKind::Unexpected, &path))?;
            let columns = row_group
                .finish()
                .map_err(parquet_error(ErrorKind::Unexpected, &path))?;
            for column in columns {
                column
                    .close()
                    .map_err(parquet_error(ErrorKind::Unexpected, &path))?
                    .append_to_row_group(&mut writer)
                    .map_err(parquet_error(ErrorKind::Unexpected, &path))?;
            }
            writer
                .close()
                .map_err(parquet_error(ErrorKind::Unexpected, &path))?;
        }
        let piece = std::mem::take(open.file.inner_mut());
        if !piece.is_empty() {
            self.uploaded += piece.len() as u64;
            open.upload.write(Bytes::from(piece)).await?;
        }
        Ok(())
    }

    fn limits(&self) -> (Option<usize>, Option<usize>) {
        (
            self.builder.properties.max_row_group_row_count(),
            self.builder.properties.max_row_group_bytes(),
        )
    }

    /// Rows in the row group in progress, and at least its encoded bytes (exactly
    /// them while it is encoded on the calling thread).
    fn buffered(&self) -> (usize, usize) {
        self.open
            .as_ref()
            .and_then(|open| open.row_group.as_ref())
            .map_or((0, 0), |group| (group.rows(), group.bytes_at_most()))
    }

    /// The encoded bytes of the row group in progress (once its threads are done with
    /// what they were handed).
    fn buffered_bytes(&mut self) -> Result<usize> {
        let path = self.output.location().to_owned();
        match self.open.as_mut().and_then(|open| open.row_group.as_mut()) {
            Some(group) => group
                .bytes()
                .map_err(parquet_error(ErrorKind::Unexpected, &path)),
            None => Ok(0),
        }
    }
}

/// Rows that fit in a row group of `bytes` over `rows` rows before it reaches `max`
/// bytes, at its average row size (unbounded while the average rounds to zero).
fn byte_fit(max: usize, bytes: usize, rows: usize) -> usize {
    match bytes / rows.max(1) {
        0 => usize::MAX,
        average => max.saturating_sub(bytes) / average,
    }
}

impl FileWriter for ParquetFileWriter {
    async fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        count_nans(batch, &mut self.nans);
        let (max_rows, max_bytes) = self.limits();
        let mut rest = batch.clone();
        while rest.num_rows() > 0 {
            // As Parquet's own writer: a batch is cut where the row group fills, by
            // rows, or by bytes at the row group's average row size so far. The bytes
            // are known exactly only once the encoding threads catch up, so they are
            // asked for only when a bound on them (`buffered`) cannot settle the
            // decision: the cuts are Parquet's, and the threads rarely wait.
            let (rows, bytes_at_most) = self.buffered();
            let mut fit = rest.num_rows();
            if let Some(max) = max_rows {
                fit = fit.min(max.saturating_sub(rows).max(1));
            }
            if let Some(max) = max_bytes
                && rows > 0
                && (bytes_at_most >= max || fit > byte_fit(max, bytes_at_most, rows))
            {
                let bytes = self.buffered_bytes()?;
                if bytes >= max {
                    self.flush().await?;
                    continue;
                }
                fit = fit.min(byte_fit(max, bytes, rows).max(1));
            }
            let part = rest.slice(0, fit);
            rest = rest.slice(fit, rest.num_rows() - fit);
            self.encode(&part).await?;
            self.rows += fit;
            let (rows, bytes_at_most) = self.buffered();
            let full = max_rows.is_some_and(|max| rows >= max)
                || match max_bytes {
                    Some(max) if bytes_at_most >= max => self.buffered_bytes()? >= max,
                    _ => false,
                };
            if full {
                self.flush().await?;
            }
        }
        Ok(())
    }

    async fn close(mut self) -> Result<Vec<DataFileBuilder>> {
        if self.open.is_none() {
            return Ok(Vec::new());
        }
        self.flush().await?;
        let path = self.output.location().to_owned();
        let Some(mut open) = self.open.take() else {
            return Ok(Vec::new());
        };
        let metadata = open
            .file
            .finish()
            .map_err(parquet_error(ErrorKind::Unexpected, &path))?;
        let footer = std::mem::take(open.file.inner_mut());
        self.uploaded += footer.len() as u64;
        open.upload.write(Bytes::from(footer)).await?;
        open.upload.close().await?;
        Ok(vec![data_file_builder(
            &self.builder.schema,
            &metadata,
            self.uploaded,
            path,
            std::mem::take(&mut self.nans),
        )?])
    }
}

impl CurrentFileStatus for ParquetFileWriter {
    fn current_file_path(&self) -> String {
        self.output.location().to_owned()
    }

    fn current_row_num(&self) -> usize {
        self.rows
    }

    fn current_written_size(&self) -> usize {
        usize::try_from(self.uploaded)
            .unwrap_or(usize::MAX)
            .saturating_add(self.buffered().1)
    }
}

/// Helpers of the writer's tests, and of kfs-core's that compare its files with
/// iceberg-rust's writer (the `test-support` feature).
#[cfg(any(test, feature = "test-support"))]
pub mod testing {
    use super::*;
    use iceberg::io::FileIO;

    /// A test's result: any error, boxed.
    pub type Fallible<T> = std::result::Result<T, Box<dyn std::error::Error>>;

    /// Writes `batches` through `builder` to `path`; the one data file written (an
    /// error if the writer wrote none or several).
    pub async fn write<B: FileWriterBuilder>(
        io: &FileIO,
        builder: B,
        path: &str,
        batches: &[RecordBatch],
    ) -> Fallible<iceberg::spec::DataFile> {
        let mut writer = builder.build(io.new_output(path)?).await?;
        for batch in batches {
            writer.write(batch).await?;
        }
        let mut built = writer.close().await?;
        if built.len() != 1 {
            return Err(format!("{} data files written, not one", built.len()).into());
        }
        Ok(built.remove(0).partition_spec_id(0).build()?)
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{Fallible, write};
    use super::*;
    use iceberg::io::FileIO;
    use iceberg::writer::file_writer::ParquetWriterBuilder;

    #[tokio::test]
    async fn nan_counts_match_iceberg_rusts_writer_in_nested_columns() -> Fallible<()> {
        use arrow_array::{ArrayRef, Float32Array, Float64Array, ListArray, StructArray};
        use iceberg::spec::{ListType, NestedField, PrimitiveType, Schema, StructType, Type};
        let double = || Type::Primitive(PrimitiveType::Double);
        let schema = Arc::new(
            Schema::builder()
                .with_fields(vec![
                    NestedField::optional(1, "f", Type::Primitive(PrimitiveType::Float)).into(),
                    NestedField::optional(
                        2,
                        "s",
                        Type::Struct(StructType::new(vec![
                            NestedField::optional(4, "d", double()).into(),
                        ])),
                    )
                    .into(),
                    NestedField::optional(
                        3,
                        "l",
                        Type::List(ListType::new(
                            NestedField::list_element(5, double(), false).into(),
                        )),
                    )
                    .into(),
                ])
                .build()?,
        );
        let arrow = crate::arrow_schema(&schema)?;
        let arrow_schema::DataType::Struct(s_fields) = arrow.field(1).data_type().clone() else {
            return Err("not a struct".into());
        };
        let arrow_schema::DataType::List(element) = arrow.field(2).data_type().clone() else {
            return Err("not a list".into());
        };
        let nan = f64::NAN;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Float32Array::from(vec![
                Some(f32::NAN),
                None,
                Some(1.0),
                Some(f32::NAN),
            ])),
            Arc::new(StructArray::new(
                s_fields,
                vec![Arc::new(Float64Array::from(vec![
                    Some(nan),
                    Some(2.0),
                    None,
                    Some(nan),
                ]))],
                None,
            )),
            {
                let list = ListArray::from_iter_primitive::<arrow_array::types::Float64Type, _, _>(
                    [vec![nan, 1.0], vec![], vec![nan], vec![3.0, nan, nan]]
                        .into_iter()
                        .map(|row| Some(row.into_iter().map(Some))),
                );
                Arc::new(ListArray::try_new(
                    element,
                    list.offsets().clone(),
                    list.values().clone(),
                    None,
                )?)
            },
        ];
        let batch = RecordBatch::try_new(arrow, columns)?;
        let io = FileIO::new_with_memory();
        let ours = ParquetFileWriterBuilder::new(WriterProperties::default(), schema.clone())?;
        let ours = write(
            &io,
            ours,
            "memory://t/nans.parquet",
            std::slice::from_ref(&batch),
        )
        .await?;
        let reference = ParquetWriterBuilder::new(WriterProperties::default(), schema);
        let reference = write(&io, reference, "memory://t/nans-ref.parquet", &[batch]).await?;
        assert_eq!(
            ours.nan_value_counts(),
            &std::collections::HashMap::from([(1, 2), (4, 2), (5, 4)])
        );
        assert_eq!(ours.nan_value_counts(), reference.nan_value_counts());
        assert_eq!(ours.lower_bounds(), reference.lower_bounds());
        assert_eq!(ours.upper_bounds(), reference.upper_bounds());
        Ok(())
    }

    #[tokio::test]
    async fn a_writer_given_no_row_writes_no_file() -> Fallible<()> {
        use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
        let schema = Arc::new(
            Schema::builder()
                .with_fields(vec![
                    NestedField::required(1, "offset", Type::Primitive(PrimitiveType::Long)).into(),
                    NestedField::optional(2, "value", Type::Primitive(PrimitiveType::Binary))
                        .into(),
                ])
                .build()?,
        );
        let io = FileIO::new_with_memory();
        let empty = RecordBatch::new_empty(crate::arrow_schema(&schema)?);
        let builder = ParquetFileWriterBuilder::new(WriterProperties::default(), schema)?;
        let output = io.new_output("memory://t/empty.parquet")?;
        let mut writer = builder.build(output).await?;
        writer.write(&empty).await?;
        assert!(writer.close().await?.is_empty());
        assert!(!io.exists("memory://t/empty.parquet").await?);
        Ok(())
    }
}

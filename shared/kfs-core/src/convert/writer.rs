//! Writing a segment's rows as Parquet data files through iceberg-rust's writer stack:
//! one file per write (per partition value), named after the segment's identity and a
//! token unique to the write.

use super::ROWS_PER_BATCH;
use crate::table::arrow_schema;
use arrow_array::RecordBatch;
use iceberg::arrow::RecordBatchPartitionSplitter;
use iceberg::spec::DataFile;
use iceberg::spec::PartitionKey;
use iceberg::table::Table;
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultLocationGenerator, FileNameGenerator, LocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::partitioning::PartitioningWriter;
use iceberg::writer::partitioning::fanout_writer::FanoutWriter;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use kfs_failpoint::Failpoint;
use kfs_parquet::{ParquetFileWriterBuilder, writer_properties};
use kfs_plan::keys::SegmentKey;
use kfs_plan::naming::sanitize;

/// The data file name of a segment version: topic, partition, base offset, a hash of
/// the ETag, and a token unique to this write ([`write_token`]).
pub fn data_file_stem(key: &SegmentKey, etag: &str) -> String {
    format!(
        "{}-p{}-{:020}-{:016x}-{}",
        sanitize(&key.topic),
        key.partition,
        key.base_offset,
        kfs_plan::hash::fnv1a(etag.as_bytes()),
        write_token()
    )
}

/// A token unique to one data file write. Every written file gets a name of its own:
/// two processes converting (or merging) the same input at once must never write the
/// same path, since on storage without atomic writes (a local folder) the loser's
/// half-written file would replace the winner's committed one. The loser's file is
/// deleted when its ledger insert finds the winner's, or else left to orphan cleanup.
pub fn write_token() -> String {
    let mut token = uuid::Uuid::new_v4().simple().to_string();
    token.truncate(16);
    token
}

/// The name given: one file per write (per partition value, each in its own
/// directory).
#[derive(Debug, Clone)]
pub(crate) struct FixedFileName(String);

impl FileNameGenerator for FixedFileName {
    fn generate_file_name(&self) -> String {
        format!("{}.parquet", self.0)
    }
}

/// Longest partition directory written, in bytes. A longer one (`identity(key)` of a
/// long key) is written as `partition-{hash of the directory}`, so that object keys stay
/// within what stores accept (S3: 1,024 bytes). Readers take partition values from
/// the manifests, never from paths.
pub(crate) const MAX_PARTITION_PATH_BYTES: usize = 256;

/// Iceberg's default locations (`data/{partition path}/{file}`), with the partition
/// directory bounded by [`MAX_PARTITION_PATH_BYTES`].
#[derive(Debug, Clone)]
pub(crate) struct BoundedLocation(DefaultLocationGenerator);

impl LocationGenerator for BoundedLocation {
    fn generate_location(&self, partition_key: Option<&PartitionKey>, file_name: &str) -> String {
        match partition_key {
            Some(key) if !PartitionKey::is_effectively_none(partition_key) => {
                let directory = key.to_path();
                if directory.len() <= MAX_PARTITION_PATH_BYTES {
                    return self.0.generate_location(partition_key, file_name);
                }
                let flat = self.0.generate_location(None, file_name);
                let data = flat.strip_suffix(file_name).unwrap_or(&flat);
                format!(
                    "{data}partition-{:016x}/{file_name}",
                    kfs_plan::hash::fnv1a(directory.as_bytes())
                )
            }
            _ => self.0.generate_location(None, file_name),
        }
    }
}

/// The builder of one data file, through iceberg-rust's writer stack with our Parquet
/// file writer.
type FileBuilder = DataFileWriterBuilder<ParquetFileWriterBuilder, BoundedLocation, FixedFileName>;

/// Where a segment's batches go: one Parquet file named `{stem}.parquet` in the table's
/// data directory, or, for a partitioned table, one such file per partition value in
/// that value's directory (`data/timestamp_day=2026-11-30/…`).
pub(crate) enum SegmentWriter {
    /// The table is unpartitioned.
    Single(Box<<FileBuilder as IcebergWriterBuilder>::R>),
    /// The table's default spec partitions it.
    Fanout {
        splitter: Box<RecordBatchPartitionSplitter>,
        writer: Box<FanoutWriter<FileBuilder>>,
    },
}

impl SegmentWriter {
    /// The writer for `table` (by its default partition spec), with every file named
    /// `{stem}.parquet`.
    pub(crate) async fn new(table: &Table, stem: String) -> iceberg::Result<Self> {
        let metadata = table.metadata();
        let location = BoundedLocation(DefaultLocationGenerator::new(metadata)?);
        let parquet = ParquetFileWriterBuilder::new(
            writer_properties(metadata.properties())?,
            metadata.current_schema().clone(),
        )?;
        let rolling = RollingFileWriterBuilder::new(
            parquet,
            usize::MAX,
            table.file_io().clone(),
            location,
            FixedFileName(stem),
        );
        let builder = DataFileWriterBuilder::new(rolling);
        let spec = metadata.default_partition_spec();
        if spec.is_unpartitioned() {
            return Ok(Self::Single(Box::new(builder.build(None).await?)));
        }
        Ok(Self::Fanout {
            splitter: Box::new(RecordBatchPartitionSplitter::try_new_with_computed_values(
                metadata.current_schema().clone(),
                spec.clone(),
            )?),
            writer: Box::new(FanoutWriter::new(builder)),
        })
    }

    pub(crate) async fn write(&mut self, batch: RecordBatch) -> iceberg::Result<()> {
        match self {
            Self::Single(writer) => writer.write(batch).await,
            Self::Fanout { splitter, writer } => {
                for (key, part) in splitter.split(&batch)? {
                    writer.write(key, part).await?;
                }
                Ok(())
            }
        }
    }

    pub(crate) async fn close(self) -> iceberg::Result<Vec<DataFile>> {
        match self {
            Self::Single(mut writer) => writer.close().await,
            Self::Fanout { writer, .. } => writer.close().await,
        }
    }
}

/// Writes a data file of `table` written in an older partition spec (or schema) again
/// in the table's default spec: its rows but those at the `(partition, offset)`s
/// `skip`, with the table's current columns, in one file per partition value named
/// `{stem}.parquet` (a data file write, through its failpoint); none when every row
/// is skipped.
pub async fn rewrite_in_default_spec(
    table: &Table,
    file: &DataFile,
    stem: String,
    skip: &std::collections::BTreeSet<(i32, i64)>,
) -> iceberg::Result<Vec<DataFile>> {
    let parquet_error = |e: parquet::errors::ParquetError| {
        iceberg::Error::new(
            iceberg::ErrorKind::DataInvalid,
            format!("{}: {e}", file.file_path()),
        )
    };
    let bytes = table.file_io().new_input(file.file_path())?.read().await?;
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes)
        .map_err(parquet_error)?
        .with_batch_size(ROWS_PER_BATCH)
        .build()
        .map_err(parquet_error)?;
    let target = arrow_schema(table.metadata().current_schema())?;
    let mut writer = SegmentWriter::new(table, stem).await?;
    for batch in reader {
        let batch = batch.map_err(|e| {
            iceberg::Error::new(
                iceberg::ErrorKind::DataInvalid,
                format!("{}: {e}", file.file_path()),
            )
        })?;
        let batch = kfs_parquet::conform_batch(&batch, &target)
            .and_then(|batch| without_rows(batch, skip))
            .map_err(|e| {
                iceberg::Error::new(
                    iceberg::ErrorKind::DataInvalid,
                    format!("{} does not match the table schema: {e}", file.file_path()),
                )
            })?;
        if batch.num_rows() > 0 {
            writer.write(batch).await?;
        }
    }
    kfs_failpoint::around(Failpoint::DataFileWrite, writer.close()).await
}

/// `batch` without its rows at the `(partition, offset)`s `skip`.
fn without_rows(
    batch: RecordBatch,
    skip: &std::collections::BTreeSet<(i32, i64)>,
) -> Result<RecordBatch, arrow_schema::ArrowError> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    if skip.is_empty() {
        return Ok(batch);
    }
    let column = |name: &str| {
        batch
            .column_by_name(name)
            .cloned()
            .ok_or_else(|| arrow_schema::ArrowError::SchemaError(format!("no {name} column")))
    };
    let (partitions, offsets) = (column("partition")?, column("offset")?);
    let partitions = kfs_values::partition_numbers(&partitions)
        .map_err(arrow_schema::ArrowError::SchemaError)?;
    let Some(offsets) = offsets.as_primitive_opt::<Int64Type>() else {
        return Err(arrow_schema::ArrowError::SchemaError(
            "offset is no long column".into(),
        ));
    };
    let keep: arrow_array::BooleanArray = partitions
        .iter()
        .zip(offsets.iter())
        .map(|(p, o)| Some(!p.zip(o).is_some_and(|at| skip.contains(&at))))
        .collect();
    arrow_select::filter::filter_record_batch(&batch, &keep)
}

/// Closes a writer whose conversion failed and deletes what it wrote.
pub(crate) async fn discard(table: &Table, writer: SegmentWriter) {
    if let Ok(files) = writer.close().await {
        for file in files {
            let _ = kfs_failpoint::delete_file(table.file_io(), file.file_path()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::RecordColumns;
    use iceberg::io::FileIO;
    use iceberg::writer::file_writer::ParquetWriterBuilder;
    use kfs_parquet::testing::{Fallible, write};
    use kfs_segment::{Record, RecordHeader};
    use parquet::file::properties::WriterProperties;
    use std::cmp::Ordering;
    use std::sync::Arc;

    /// Records of every shape the raw layout holds: null and empty keys and values,
    /// headers or none, values large enough that batches encode in parallel.
    fn batch(first: i64, rows: i64) -> Fallible<RecordBatch> {
        let schema = crate::table::arrow_schema(&crate::table::topic_schema()?)?;
        let mut columns = RecordColumns::new(schema)?;
        let values: Vec<Vec<u8>> = (first..first + rows)
            .map(|i| format!("{i:08}-{}", "v".repeat((i % 700) as usize)).into_bytes())
            .collect();
        for (i, value) in (first..).zip(&values) {
            let record = Record {
                offset: i,
                timestamp_ms: 1_700_000_000_000 + i,
                key: (i % 3 != 0).then_some(if i % 5 == 0 { &b""[..] } else { &value[..8] }),
                value: (i % 11 != 0).then_some(&value[..]),
                headers: if i % 2 == 0 {
                    vec![RecordHeader {
                        key: b"h",
                        value: (i % 4 == 0).then_some(&value[..3]),
                    }]
                } else {
                    Vec::new()
                },
            };
            columns.push("orders", 1, &record)?;
        }
        Ok(columns.finish()?)
    }

    /// Every bound of `reference` is in `ours`, never further towards `tighter`.
    fn widens(
        ours: &std::collections::HashMap<i32, iceberg::spec::Datum>,
        reference: &std::collections::HashMap<i32, iceberg::spec::Datum>,
        tighter: Ordering,
    ) -> Fallible<()> {
        for (id, bound) in reference {
            let Some(our) = ours.get(id) else {
                return Err(format!("no bound for field {id}").into());
            };
            if our.partial_cmp(bound) == Some(tighter) {
                return Err(format!("field {id}: {our} is tighter than {bound}").into());
            }
        }
        Ok(())
    }

    #[tokio::test]
    async fn files_and_metrics_match_iceberg_rusts_writer_with_columns_encoded_in_parallel()
    -> Fallible<()> {
        let schema = Arc::new(crate::table::topic_schema()?);
        // Small row groups: several per file, and a batch cut where one fills.
        let properties = || {
            WriterProperties::builder()
                .set_max_row_group_row_count(Some(3_000))
                .set_max_row_group_bytes(Some(1 << 20))
                .build()
        };
        let batches = [batch(0, 5_000)?, batch(5_000, 1)?, batch(5_001, 4_000)?];
        let ours = ParquetFileWriterBuilder::new(properties(), schema.clone())?.with_threads(2);
        let io = FileIO::new_with_memory();
        let ours = write(&io, ours, "memory://t/ours.parquet", &batches).await?;
        let reference = write(
            &io,
            ParquetWriterBuilder::new(properties(), schema),
            "memory://t/reference.parquet",
            &batches,
        )
        .await?;
        assert_eq!(ours.record_count(), 9_001);
        assert_eq!(ours.record_count(), reference.record_count());
        assert_eq!(ours.value_counts(), reference.value_counts());
        assert_eq!(ours.null_value_counts(), reference.null_value_counts());
        // iceberg-rust leaves out row groups whose statistics Parquet truncated (long
        // values) and keeps the others' bounds; ours widen by them: as wide or wider.
        widens(
            ours.lower_bounds(),
            reference.lower_bounds(),
            Ordering::Greater,
        )?;
        widens(
            ours.upper_bounds(),
            reference.upper_bounds(),
            Ordering::Less,
        )?;
        assert!(
            ours.split_offsets().is_some_and(|s| s.len() > 2),
            "{ours:?}"
        );
        assert_eq!(
            ours.split_offsets().map(<[i64]>::len),
            reference.split_offsets().map(<[i64]>::len)
        );
        assert!(!ours.lower_bounds().is_empty());
        // The rows read back are the rows written.
        let bytes = io.new_input(ours.file_path())?.read().await?;
        assert_eq!(bytes.len() as u64, ours.file_size_in_bytes());
        let read: Vec<RecordBatch> =
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes)?
                .build()?
                .collect::<std::result::Result<_, _>>()?;
        let schema = batches[0].schema();
        assert_eq!(
            arrow_select::concat::concat_batches(&schema, &read)?,
            arrow_select::concat::concat_batches(&schema, &batches)?
        );
        Ok(())
    }
}

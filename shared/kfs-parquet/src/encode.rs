//! Encoding Arrow batches into the column writers of one Parquet row group, the columns
//! spread over the cores the process has. Encoding and compressing a column chunk is
//! independent of every other column's, so once a large batch arrives the row group's
//! top-level columns are split into as many groups as there are threads, balanced by
//! their size in memory, and each group is handed to a thread of its own that encodes
//! batch after batch as they come, without waiting for the other groups: the widest
//! column (a record's value, most of the bytes) is encoded continuously while another
//! core decodes the next records and encodes the narrow columns. Small batches (a few
//! KB-sized segments) are encoded on the calling thread: starting threads would cost
//! more than they save.

use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use parquet::arrow::arrow_writer::{ArrowColumnWriter, compute_leaves};
use parquet::errors::{ParquetError, Result};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

/// Batches smaller than this (Arrow memory) are encoded on the calling thread while no
/// larger one has started the row group's threads.
const PARALLEL_MIN_BYTES: usize = 1 << 20;

/// Batches queued for each encoding thread: enough to keep it busy while the next batch
/// is decoded, few enough to bound memory.
const QUEUED_BATCHES: usize = 2;

/// What the encoded size of a batch may add to the writers' estimate beyond its Arrow
/// memory, which bounds it: page and level overheads.
const ENCODING_SLACK_BYTES: usize = 64 << 10;

/// The threads encoding may use: the cores available to the process (one in a Lambda
/// function below 1,769 MB, two at 3,538 MB), at most `limit`.
pub(crate) fn encoding_threads(limit: usize) -> usize {
    std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .clamp(1, limit.max(1))
}

/// The column writers of one row group, fed batch by batch (see the module's
/// documentation); [`Self::finish`] returns them, in schema order, for closing.
pub(crate) struct RowGroupEncoder {
    state: State,
    threads: usize,
    rows: usize,
    /// The writers' estimate of their encoded bytes, when last asked.
    known_bytes: usize,
    /// Arrow bytes handed to the threads since then.
    unsettled_bytes: usize,
}

enum State {
    /// Encoding on the calling thread.
    Inline(Vec<ArrowColumnWriter>),
    /// Encoding on threads, each owning some top-level columns' writers.
    Threads(Vec<Worker>),
    /// A thread failed (its error was returned) or the writers were taken.
    Done,
}

struct Worker {
    jobs: SyncSender<Job>,
    thread: JoinHandle<Result<Vec<(usize, ArrowColumnWriter)>>>,
}

enum Job {
    Encode(RecordBatch),
    Report(SyncSender<usize>),
}

/// One top-level column's index and its writers (one per leaf, owned or borrowed),
/// each with the index of its leaf.
type ColumnWriters<W = ArrowColumnWriter> = (usize, Vec<(usize, W)>);

impl RowGroupEncoder {
    /// Encodes into `columns` (one writer per leaf column, in schema order) on up to
    /// `threads` threads.
    pub(crate) fn new(columns: Vec<ArrowColumnWriter>, threads: usize) -> Self {
        Self {
            state: State::Inline(columns),
            threads,
            rows: 0,
            known_bytes: 0,
            unsettled_bytes: 0,
        }
    }

    /// Rows written so far.
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// At least the writers' estimate of their encoded bytes (exactly it while
    /// encoding on the calling thread), without waiting for the threads.
    pub(crate) fn bytes_at_most(&self) -> usize {
        if self.unsettled_bytes == 0 {
            self.known_bytes
        } else {
            self.known_bytes + 2 * self.unsettled_bytes + ENCODING_SLACK_BYTES
        }
    }

    /// The writers' estimate of their encoded bytes, once the threads have encoded
    /// every batch handed to them.
    pub(crate) fn bytes(&mut self) -> Result<usize> {
        match &self.state {
            State::Inline(columns) => Ok(estimated_bytes(columns.iter())),
            State::Threads(workers) => {
                let mut total = 0;
                let mut failed = false;
                for worker in workers {
                    let (reply, answer) = sync_channel(1);
                    match worker
                        .jobs
                        .send(Job::Report(reply))
                        .ok()
                        .and_then(|()| answer.recv().ok())
                    {
                        Some(bytes) => total += bytes,
                        None => failed = true,
                    }
                }
                if failed {
                    return Err(self.failure());
                }
                self.known_bytes = total;
                self.unsettled_bytes = 0;
                Ok(total)
            }
            State::Done => Err(ParquetError::General(
                "the row group was already finished".into(),
            )),
        }
    }

    /// Encodes `batch` (of the row group's schema).
    pub(crate) fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let size = batch.get_array_memory_size();
        if self.threads > 1
            && size >= PARALLEL_MIN_BYTES
            && let State::Inline(_) = self.state
            && let State::Inline(columns) = std::mem::replace(&mut self.state, State::Done)
        {
            self.state = State::Threads(start_threads(columns, batch, self.threads)?);
        }
        match &mut self.state {
            State::Inline(columns) => {
                encode_columns(&mut leaf_writers(columns, batch)?, batch)?;
                self.known_bytes = estimated_bytes(columns.iter());
            }
            State::Threads(workers) => {
                let sent = workers
                    .iter()
                    .all(|worker| worker.jobs.send(Job::Encode(batch.clone())).is_ok());
                if !sent {
                    return Err(self.failure());
                }
                self.unsettled_bytes += size;
            }
            State::Done => {
                return Err(ParquetError::General(
                    "the row group was already finished".into(),
                ));
            }
        }
        self.rows += batch.num_rows();
        Ok(())
    }

    /// The column writers, in schema order, once every batch is encoded.
    pub(crate) fn finish(mut self) -> Result<Vec<ArrowColumnWriter>> {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Inline(columns) => Ok(columns),
            State::Threads(workers) => {
                let mut columns = Vec::new();
                for worker in join(workers) {
                    columns.extend(worker?);
                }
                columns.sort_by_key(|(leaf, _)| *leaf);
                Ok(columns.into_iter().map(|(_, writer)| writer).collect())
            }
            State::Done => Err(ParquetError::General(
                "the row group was already finished".into(),
            )),
        }
    }

    /// The error of a thread that stopped early (the threads are joined; nothing more
    /// is accepted).
    fn failure(&mut self) -> ParquetError {
        let State::Threads(workers) = std::mem::replace(&mut self.state, State::Done) else {
            return ParquetError::General("the row group was already finished".into());
        };
        join(workers)
            .into_iter()
            .find_map(Result::err)
            .unwrap_or_else(|| ParquetError::General("an encoding thread stopped".into()))
    }
}

/// Waits for `workers` to encode what they were handed; each one's writers or error.
fn join(workers: Vec<Worker>) -> Vec<Result<Vec<(usize, ArrowColumnWriter)>>> {
    workers
        .into_iter()
        .map(|Worker { jobs, thread }| {
            drop(jobs);
            thread.join().unwrap_or_else(|_| {
                Err(ParquetError::General("an encoding thread panicked".into()))
            })
        })
        .collect()
}

fn estimated_bytes<'a>(writers: impl Iterator<Item = &'a ArrowColumnWriter>) -> usize {
    writers
        .map(ArrowColumnWriter::get_estimated_total_bytes)
        .sum()
}

/// Leaf columns (Parquet's primitive columns) under a column of `data_type`.
fn leaf_count(data_type: &DataType) -> usize {
    match data_type {
        DataType::Struct(fields) => fields.iter().map(|f| leaf_count(f.data_type())).sum(),
        DataType::List(item)
        | DataType::LargeList(item)
        | DataType::ListView(item)
        | DataType::LargeListView(item)
        | DataType::FixedSizeList(item, _)
        | DataType::Map(item, _) => leaf_count(item.data_type()),
        _ => 1,
    }
}

/// `columns` (one writer per leaf) grouped by the top-level column of `batch` they
/// belong to.
fn leaf_writers<'a>(
    columns: &'a mut [ArrowColumnWriter],
    batch: &RecordBatch,
) -> Result<Vec<ColumnWriters<&'a mut ArrowColumnWriter>>> {
    let counts: Vec<usize> = batch
        .schema()
        .fields()
        .iter()
        .map(|field| leaf_count(field.data_type()))
        .collect();
    if counts.iter().sum::<usize>() != columns.len() {
        return Err(ParquetError::General(format!(
            "a batch of {} leaf columns for {} column writers",
            counts.iter().sum::<usize>(),
            columns.len()
        )));
    }
    let mut writers = columns.iter_mut().enumerate();
    Ok(counts
        .into_iter()
        .enumerate()
        .map(|(column, count)| (column, writers.by_ref().take(count).collect()))
        .collect())
}

/// Encodes each top-level column of `batch` into its leaves' writers.
fn encode_columns<W: std::borrow::BorrowMut<ArrowColumnWriter>>(
    columns: &mut [ColumnWriters<W>],
    batch: &RecordBatch,
) -> Result<()> {
    let schema = batch.schema();
    for (column, writers) in columns {
        let (Some(field), Some(array)) =
            (schema.fields().get(*column), batch.columns().get(*column))
        else {
            return Err(ParquetError::General(format!(
                "a batch of {} columns has no column {column}",
                batch.num_columns()
            )));
        };
        let leaves = compute_leaves(field, array)?;
        if leaves.len() != writers.len() {
            return Err(ParquetError::General(format!(
                "column {} has {} leaves for {} writers",
                field.name(),
                leaves.len(),
                writers.len()
            )));
        }
        for ((_, writer), leaf) in writers.iter_mut().zip(&leaves) {
            writer.borrow_mut().write(leaf)?;
        }
    }
    Ok(())
}

/// Threads owning `columns`' writers, the top-level columns of `batch` spread over
/// `threads` groups (largest first, each to the group with the least so far).
fn start_threads(
    columns: Vec<ArrowColumnWriter>,
    batch: &RecordBatch,
    threads: usize,
) -> Result<Vec<Worker>> {
    let mut columns = columns;
    let owned: Vec<(usize, Vec<usize>)> = leaf_writers(&mut columns, batch)?
        .into_iter()
        .map(|(column, writers)| (column, writers.into_iter().map(|(leaf, _)| leaf).collect()))
        .collect();
    let mut writers: Vec<Option<ArrowColumnWriter>> = columns.into_iter().map(Some).collect();
    let mut order: Vec<usize> = (0..owned.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(batch.column(owned[i].0).get_array_memory_size()));
    let threads = threads.min(owned.len()).max(1);
    let mut loads = vec![0usize; threads];
    let mut groups: Vec<Vec<ColumnWriters>> = (0..threads).map(|_| Vec::new()).collect();
    for i in order {
        let (lightest, _) = loads
            .iter()
            .enumerate()
            .min_by_key(|(_, load)| **load)
            .unwrap_or((0, &0));
        loads[lightest] += batch.column(owned[i].0).get_array_memory_size();
        let (column, leaves) = &owned[i];
        let group_writers = leaves
            .iter()
            .map(|&leaf| {
                writers[leaf]
                    .take()
                    .map(|writer| (leaf, writer))
                    .ok_or_else(|| ParquetError::General(format!("leaf {leaf} assigned twice")))
            })
            .collect::<Result<Vec<_>>>()?;
        groups[lightest].push((*column, group_writers));
    }
    groups
        .into_iter()
        .filter(|group| !group.is_empty())
        .map(|group| {
            let (jobs, queue) = sync_channel(QUEUED_BATCHES);
            let thread = std::thread::Builder::new()
                .name("kfs-encode".into())
                .spawn(move || encode_jobs(group, &queue))
                .map_err(|e| ParquetError::General(format!("no encoding thread: {e}")))?;
            Ok(Worker { jobs, thread })
        })
        .collect()
}

/// An encoding thread: encodes the batches it is handed into its columns' writers until
/// the row group ends; returns the writers with their leaf indices.
fn encode_jobs(
    mut columns: Vec<ColumnWriters>,
    jobs: &Receiver<Job>,
) -> Result<Vec<(usize, ArrowColumnWriter)>> {
    for job in jobs {
        match job {
            Job::Encode(batch) => encode_columns(&mut columns, &batch)?,
            Job::Report(reply) => {
                let bytes = estimated_bytes(
                    columns
                        .iter()
                        .flat_map(|(_, writers)| writers.iter().map(|(_, w)| w)),
                );
                // The encoder stopped waiting only if it failed elsewhere.
                let _ = reply.send(bytes);
            }
        }
    }
    Ok(columns
        .into_iter()
        .flat_map(|(_, writers)| writers)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{ArrayRef, Int64Array, LargeBinaryArray, ListArray, StructArray};
    use arrow_schema::{Field, Fields, Schema, SchemaRef};
    use parquet::arrow::ArrowSchemaConverter;
    use parquet::arrow::arrow_writer::ArrowRowGroupWriterFactory;
    use parquet::file::properties::WriterProperties;
    use parquet::file::writer::SerializedFileWriter;
    use std::sync::Arc;

    type Fallible<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

    fn schema() -> SchemaRef {
        let entry = Fields::from(vec![Field::new("k", DataType::Int64, true)]);
        Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, false),
            Field::new("v", DataType::LargeBinary, true),
            Field::new_list("l", Field::new("e", DataType::Struct(entry), true), true),
        ]))
    }

    fn writers(schema: &SchemaRef) -> Result<Vec<ArrowColumnWriter>> {
        let parquet = ArrowSchemaConverter::new().convert(schema)?;
        let file = SerializedFileWriter::new(
            Vec::new(),
            parquet.root_schema_ptr(),
            Arc::new(WriterProperties::default()),
        )?;
        ArrowRowGroupWriterFactory::new(&file, schema.clone()).create_column_writers(0)
    }

    /// `rows` rows of `width`-byte values (incompressible enough to be counted).
    fn batch(schema: &SchemaRef, rows: usize, width: usize) -> Fallible<RecordBatch> {
        let values: Vec<Vec<u8>> = (0..rows)
            .map(|i| {
                (0..width)
                    .map(|j| ((i * 31 + j * 17) % 251) as u8)
                    .collect()
            })
            .collect();
        let DataType::List(item) = schema.field(2).data_type() else {
            return Err("not a list".into());
        };
        let DataType::Struct(entry) = item.data_type() else {
            return Err("not a struct".into());
        };
        let entries = StructArray::try_new(
            entry.clone(),
            vec![Arc::new(Int64Array::from_iter_values(0..rows as i64)) as ArrayRef],
            None,
        )?;
        let list = ListArray::try_new(
            item.clone(),
            arrow_buffer::OffsetBuffer::from_lengths(std::iter::repeat_n(1, rows)),
            Arc::new(entries),
            None,
        )?;
        Ok(RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from_iter_values(0..rows as i64)),
                Arc::new(LargeBinaryArray::from_iter_values(&values)),
                Arc::new(list),
            ],
        )?)
    }

    #[test]
    fn threads_encode_what_the_calling_thread_does_and_the_bound_holds() -> Fallible {
        let schema = schema();
        let batches = [
            batch(&schema, 100, 10)?,
            batch(&schema, 4_000, 400)?,
            batch(&schema, 7, 3)?,
            batch(&schema, 3_000, 700)?,
        ];
        let mut finished = Vec::new();
        for threads in [1, 2, 3] {
            let mut encoder = RowGroupEncoder::new(writers(&schema)?, threads);
            for batch in &batches {
                encoder.write(batch)?;
                let bound = encoder.bytes_at_most();
                let exact = encoder.bytes()?;
                assert!(bound >= exact, "{threads} threads: {bound} < {exact}");
                assert_eq!(encoder.bytes_at_most(), exact);
            }
            assert_eq!(encoder.rows(), 7_107);
            let mut sizes = Vec::new();
            for writer in encoder.finish()? {
                let chunk = writer.close()?;
                let closed = chunk.close();
                sizes.push((closed.rows_written, closed.bytes_written));
            }
            finished.push(sizes);
        }
        assert_eq!(finished[0].len(), 3);
        assert_eq!(finished[0], finished[1]);
        assert_eq!(finished[0], finished[2]);
        Ok(())
    }

    #[test]
    fn a_batch_of_another_schema_is_an_error_on_any_thread() -> Fallible {
        let schema = schema();
        let other = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        let stranger = RecordBatch::try_new(
            other,
            vec![Arc::new(Int64Array::from_iter_values(0..10)) as ArrayRef],
        )?;
        let mut inline = RowGroupEncoder::new(writers(&schema)?, 1);
        assert!(inline.write(&stranger).is_err());
        let mut threaded = RowGroupEncoder::new(writers(&schema)?, 2);
        threaded.write(&batch(&schema, 4_000, 400)?)?;
        // The threads find it out as they encode it: the error comes back at the latest
        // when the row group is finished.
        let failed = threaded.write(&stranger).is_err()
            || threaded.bytes().is_err()
            || threaded.finish().is_err();
        assert!(failed);
        Ok(())
    }
}

//! Encoding Arrow batches into the column writers of one Parquet row group, the columns
//! of a large batch spread over the cores the process has. Encoding and compressing a
//! column chunk is independent of every other column's, so a batch's leaf columns are
//! split into as many groups as there are cores, balanced by their size in memory, and
//! each group is encoded on a thread of its own. A small batch (a few KB-sized
//! segments) is encoded on the calling thread: starting threads would cost more than
//! they save.

use arrow_array::{Array, RecordBatch};
use parquet::arrow::arrow_writer::{ArrowColumnWriter, ArrowLeafColumn, compute_leaves};
use parquet::errors::{ParquetError, Result};

/// Batches smaller than this (Arrow memory) are encoded on the calling thread.
const PARALLEL_MIN_BYTES: usize = 1 << 20;

/// The threads encoding may use: the cores available to the process (one in a Lambda
/// function below 1,769 MB, two at 3,538 MB), at most `limit`.
pub(crate) fn encoding_threads(limit: usize) -> usize {
    std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .clamp(1, limit.max(1))
}

/// Encodes `batch` into `columns`, the leaf column writers of one row group in schema
/// order, on up to `threads` threads.
pub(crate) fn encode_batch(
    columns: &mut [ArrowColumnWriter],
    batch: &RecordBatch,
    threads: usize,
) -> Result<()> {
    let mut leaves: Vec<(ArrowLeafColumn, usize)> = Vec::with_capacity(columns.len());
    for (field, array) in batch.schema().fields().iter().zip(batch.columns()) {
        let field_leaves = compute_leaves(field, array)?;
        // A nested column's memory is shared by its leaves (not measured when there
        // is one thread: nothing to balance).
        let size = if threads > 1 {
            array.get_array_memory_size() / field_leaves.len().max(1)
        } else {
            0
        };
        leaves.extend(field_leaves.into_iter().map(|leaf| (leaf, size)));
    }
    if leaves.len() != columns.len() {
        return Err(ParquetError::General(format!(
            "a batch of {} leaf columns for {} column writers",
            leaves.len(),
            columns.len()
        )));
    }
    let total: usize = leaves.iter().map(|(_, size)| size).sum();
    let threads = threads.min(leaves.len());
    if threads <= 1 || total < PARALLEL_MIN_BYTES {
        for (writer, (leaf, _)) in columns.iter_mut().zip(&leaves) {
            writer.write(leaf)?;
        }
        return Ok(());
    }
    // Largest first, each to the group with the least so far.
    let mut order: Vec<usize> = (0..leaves.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(leaves[i].1));
    let mut loads = vec![0usize; threads];
    let mut group_of = vec![0usize; leaves.len()];
    for i in order {
        let (lightest, _) = loads
            .iter()
            .enumerate()
            .min_by_key(|(_, load)| **load)
            .unwrap_or((0, &0));
        group_of[i] = lightest;
        loads[lightest] += leaves[i].1;
    }
    let mut groups: Vec<Vec<(&mut ArrowColumnWriter, &ArrowLeafColumn)>> =
        (0..threads).map(|_| Vec::new()).collect();
    for ((writer, (leaf, _)), group) in columns.iter_mut().zip(&leaves).zip(group_of) {
        groups[group].push((writer, leaf));
    }
    let encode = |group: Vec<(&mut ArrowColumnWriter, &ArrowLeafColumn)>| -> Result<()> {
        for (writer, leaf) in group {
            writer.write(leaf)?;
        }
        Ok(())
    };
    std::thread::scope(|scope| {
        let mut groups = groups.into_iter();
        let here = groups.next().unwrap_or_default();
        let others: Vec<_> = groups
            .map(|group| scope.spawn(move || encode(group)))
            .collect();
        let mut result = encode(here);
        for other in others {
            let joined = other.join().unwrap_or_else(|_| {
                Err(ParquetError::General("an encoding thread panicked".into()))
            });
            result = result.and(joined);
        }
        result
    })
}

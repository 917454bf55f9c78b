//! The table's live delete files as readers apply them: the rows position-delete
//! files and deletion vectors delete, per data file, and which data files each delete
//! file names (what the mirror skips, and what compaction folds away). A data file
//! with a deletion vector takes its rows from the vector alone: the format v3 rule (a
//! writer merges the file's older position deletes into its vector).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use arrow_array::{Int64Array, RecordBatch, StringArray};
use iceberg::io::FileRead;
use iceberg::spec::{DataContentType, DataFile, DataFileFormat, ManifestContentType};
use iceberg::table::Table;
use iceberg::{Error, ErrorKind, Result};
use kfs_parquet::PositionDeletes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

/// The live delete files of a table's current snapshot.
#[derive(Debug, Clone, Default)]
pub struct LiveDeletes {
    /// The rows deleted, per data file: by its deletion vector where it has one, else
    /// by the position-delete files (Parquet) naming it.
    pub positions: PositionDeletes,
    /// Each position-delete file and each Puffin file of deletion vectors, with the
    /// data files it names.
    pub files: BTreeMap<String, BTreeSet<String>>,
    /// Delete files this build does not read (equality deletes): a rewrite that
    /// ignored them would bring their rows back.
    pub unread: Vec<String>,
}

impl LiveDeletes {
    /// Whether `path`'s row at `position` is deleted.
    pub fn deletes(&self, path: &str, position: i64) -> bool {
        self.positions
            .get(path)
            .is_some_and(|rows| rows.contains(&position))
    }
}

/// The live delete files of `table`'s current snapshot, the position deletes and
/// every deletion vector read.
pub async fn live_deletes(table: &Table) -> Result<LiveDeletes> {
    live_deletes_of(table, None).await
}

/// [`live_deletes`], reading only the deletion vectors of the data files `only` (with
/// their rows; all for `None`): what a commit that deletes rows of those files merges its deletes
/// with. Position-delete files are read whole (they name no single data file).
pub async fn live_deletes_of(
    table: &Table,
    only: Option<&HashMap<String, u64>>,
) -> Result<LiveDeletes> {
    let mut live = LiveDeletes::default();
    let Some(snapshot) = table.metadata().current_snapshot() else {
        return Ok(live);
    };
    let list = table.manifest_list_reader(snapshot).load().await?;
    let mut vectors = Vec::new();
    for manifest in list.entries() {
        if manifest.content != ManifestContentType::Deletes {
            continue;
        }
        let loaded = manifest.load_manifest(table.file_io()).await?;
        for entry in loaded.entries().iter().filter(|e| e.is_alive()) {
            let file = entry.data_file();
            let path = file.file_path().to_owned();
            match (file.content_type(), file.file_format()) {
                (DataContentType::PositionDeletes, DataFileFormat::Parquet) => {
                    let named = read_position_deletes(table, &path, &mut live.positions).await?;
                    live.files.insert(path, named);
                }
                (DataContentType::PositionDeletes, DataFileFormat::Puffin) => {
                    // Two live vectors of one file (the format allows one; an engine
                    // may have left two) delete what either does: both are read, and
                    // a commit's new vector replaces both.
                    let referenced = vector_target(file)?;
                    live.files
                        .entry(path.clone())
                        .or_default()
                        .insert(referenced.clone());
                    if only.is_none_or(|only| only.contains_key(&referenced)) {
                        vectors.push(file.clone());
                    }
                }
                _ => live.unread.push(path),
            }
        }
    }
    if !vectors.is_empty() {
        read_vectors(table, &vectors, only, &mut live.positions).await?;
    }
    Ok(live)
}

/// The data file the deletion vector `file` names.
fn vector_target(file: &DataFile) -> Result<String> {
    file.referenced_data_file().ok_or_else(|| {
        Error::new(
            ErrorKind::DataInvalid,
            format!(
                "{}: a deletion vector that names no data file",
                file.file_path()
            ),
        )
    })
}

/// Reads the deletion vectors `vectors` (manifest entries' files) of `table`: a data
/// file's (every vector of it, should there be more than one) replace what
/// position-delete files said of it in `into`; a vector of a data file that is not
/// live is skipped (it deletes nothing a reader reads). `known` gives the rows of the
/// data files (else every live data file's is read).
async fn read_vectors(
    table: &Table,
    vectors: &[DataFile],
    known: Option<&HashMap<String, u64>>,
    into: &mut PositionDeletes,
) -> Result<()> {
    let listed: HashMap<String, u64>;
    let rows = match known {
        Some(rows) => rows,
        None => {
            listed = crate::table::live_entries(table)
                .await?
                .iter()
                .map(|e| (e.file_path().to_owned(), e.record_count()))
                .collect();
            &listed
        }
    };
    let mut read = PositionDeletes::new();
    for file in vectors {
        let referenced = vector_target(file)?;
        let Some(&limit) = rows.get(&referenced) else {
            continue;
        };
        let blob = vector_blob(table, file).await?;
        let positions =
            kfs_parquet::read_deletion_vector(&referenced, &blob, limit).map_err(|e| {
                Error::new(ErrorKind::DataInvalid, format!("{}: {e}", file.file_path()))
            })?;
        read.entry(referenced).or_default().extend(positions);
    }
    into.extend(read);
    Ok(())
}

/// The bytes of the deletion vector `file` (a manifest entry's file): its
/// `content_offset` and `content_size_in_bytes`, checked against the Puffin file's
/// size before anything is read.
async fn vector_blob(table: &Table, file: &DataFile) -> Result<bytes::Bytes> {
    let path = file.file_path();
    let invalid = |reason: String| Error::new(ErrorKind::DataInvalid, format!("{path}: {reason}"));
    let (Some(offset), Some(size)) = (file.content_offset(), file.content_size_in_bytes()) else {
        return Err(invalid(
            "a deletion vector without its offset and size".into(),
        ));
    };
    let range = u64::try_from(offset)
        .ok()
        .zip(u64::try_from(size).ok())
        .and_then(|(offset, size)| Some(offset..offset.checked_add(size)?))
        .filter(|range| range.end <= file.file_size_in_bytes())
        .ok_or_else(|| {
            invalid(format!(
                "a deletion vector at byte {offset}, {size} bytes long, outside the file's {} bytes",
                file.file_size_in_bytes()
            ))
        })?;
    table
        .file_io()
        .new_input(path)?
        .reader()
        .await?
        .read(range)
        .await
}

/// Adds the rows the position-delete file at `path` deletes to `into`; returns the
/// data files it names.
async fn read_position_deletes(
    table: &Table,
    path: &str,
    into: &mut PositionDeletes,
) -> Result<BTreeSet<String>> {
    let invalid =
        |e: &dyn std::fmt::Display| Error::new(ErrorKind::DataInvalid, format!("{path}: {e}"));
    let bytes = table.file_io().new_input(path)?.read().await?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .map_err(|e| invalid(&e))?
        .build()
        .map_err(|e| invalid(&e))?;
    let mut named = BTreeSet::new();
    for batch in reader {
        let batch = batch.map_err(|e| invalid(&e))?;
        read_pairs(&batch, into, &mut named).map_err(|e| invalid(&e))?;
    }
    Ok(named)
}

/// The `(file_path, pos)` pairs of a position-delete file's batch.
fn read_pairs(
    batch: &RecordBatch,
    into: &mut PositionDeletes,
    named: &mut BTreeSet<String>,
) -> std::result::Result<(), String> {
    let paths = batch
        .column_by_name("file_path")
        .and_then(|c| c.as_any().downcast_ref::<StringArray>())
        .ok_or("no string file_path column")?;
    let positions = batch
        .column_by_name("pos")
        .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
        .ok_or("no long pos column")?;
    for row in 0..batch.num_rows() {
        let (path, position) = (paths.value(row), positions.value(row));
        match into.get_mut(path) {
            Some(rows) => {
                rows.insert(position);
            }
            None => {
                into.insert(path.to_owned(), BTreeSet::from([position]));
            }
        }
        if !named.contains(path) {
            named.insert(path.to_owned());
        }
    }
    Ok(())
}

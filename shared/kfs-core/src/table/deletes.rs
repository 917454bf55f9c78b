//! The table's live delete files as readers apply them: the rows position-delete
//! files delete, per data file, and which data files each delete file names (what
//! the mirror skips, and what compaction folds away).

use std::collections::{BTreeMap, BTreeSet};

use arrow_array::{Int64Array, RecordBatch, StringArray};
use iceberg::spec::{DataContentType, DataFileFormat, ManifestContentType};
use iceberg::table::Table;
use iceberg::{Error, ErrorKind, Result};
use kfs_parquet::PositionDeletes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

/// The live delete files of a table's current snapshot.
#[derive(Debug, Clone, Default)]
pub struct LiveDeletes {
    /// The rows deleted by position-delete files (Parquet), per data file.
    pub positions: PositionDeletes,
    /// Each position-delete file, with the data files it names.
    pub files: BTreeMap<String, BTreeSet<String>>,
    /// Delete files this build does not read (equality deletes, deletion vectors): a
    /// rewrite that ignored them would bring their rows back.
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

/// The live delete files of `table`'s current snapshot, the position deletes read.
pub async fn live_deletes(table: &Table) -> Result<LiveDeletes> {
    let mut live = LiveDeletes::default();
    let Some(snapshot) = table.metadata().current_snapshot() else {
        return Ok(live);
    };
    let list = table.manifest_list_reader(snapshot).load().await?;
    for manifest in list.entries() {
        if manifest.content != ManifestContentType::Deletes {
            continue;
        }
        let loaded = manifest.load_manifest(table.file_io()).await?;
        for entry in loaded.entries().iter().filter(|e| e.is_alive()) {
            let file = entry.data_file();
            let path = file.file_path().to_owned();
            if file.content_type() != DataContentType::PositionDeletes
                || file.file_format() != DataFileFormat::Parquet
            {
                live.unread.push(path);
                continue;
            }
            let named = read_position_deletes(table, &path, &mut live.positions).await?;
            live.files.insert(path, named);
        }
    }
    Ok(live)
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

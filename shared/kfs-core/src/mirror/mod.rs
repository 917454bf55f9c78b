//! The mirror of a keyed topic (the `upsert` and `cdc` table modes): which rows a
//! commit must delete so that the table holds one row per key, its last change, and
//! no row for a key whose last change is a tombstone (a null value).
//!
//! The rows are the key (the record key, or the key fields' values: [`rows`]),
//! whether the value is null, partition, offset, timestamp and (a `cdc` table's)
//! source position; their order is `kfs_plan::changes::fold`'s, and each key's row in
//! the index carries the position the fold placed it at (a Debezium tombstone its
//! delete's). Only keys that the commit's
//! new files hold are looked up; rows that live delete files already delete are not
//! deleted again. A record without a key is not a change of any key: it is kept; a
//! tombstone that names no key of a mirror keyed by fields is a dead letter since the
//! converter refuses it ([`named`]); one in a file written before is deleted itself.
//!
//! The keys' live rows come from the key index of the snapshot the commit is planned
//! on ([`index`]: a Puffin file the previous mirror commit wrote), so a
//! commit reads only its own new files. Without one (the table's first mirror commit,
//! a compaction's or another engine's snapshot since, an index that does not read)
//! every live data file is read once and the index is built again, with the markers
//! of the deleted tombstones the files still hold (a compaction rewrote the others
//! away).

mod index;
mod named;
mod rows;

pub(crate) use index::index_updates;
pub(crate) use named::DeleteKeys;
use rows::{KeyColumns, Row, read_rows};

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use iceberg::spec::{DataFile, FormatVersion, Struct};
use iceberg::table::Table;
use iceberg::{Error, ErrorKind, Result};
use kfs_parquet::PositionDeletes;
use kfs_plan::changes::{Action, Change, SourcePosition, fold};
use kfs_plan::key_index::{IndexedRow, KeyIndex, MARKER_RETENTION_MS};

/// What a commit to a mirror changes besides its new files.
#[derive(Debug, Default)]
pub struct Superseded {
    /// The position deletes of the rows the new files supersede.
    pub deletes: PositionDeletes,
    /// The key index of the snapshot the commit makes: every live keyed row after it.
    pub index: KeyIndex,
    /// The keys' rows came from the index of the snapshot planned on (else every live
    /// data file was read).
    pub indexed: bool,
}

/// The position deletes that make `table`, with the data files `added` (about to be
/// committed: none of them in the table yet), a mirror of its keys: every row of a key
/// that `added` holds, but the key's last change, and that one too when it is a
/// tombstone; with the key index after them. Refuses a table without the raw layout's
/// columns, and one with delete files this build does not read. The deletes name data
/// files of any partition: [`write_deletes`] writes one position-delete file per
/// partition.
pub async fn supersede(table: &Table, added: &[DataFile]) -> Result<Superseded> {
    supersede_with(table, added, true).await
}

/// [`supersede`] with the table's key index (`indexed`), or every live data file read
/// as if there were none (what a commit without an index costs: benchmarks).
pub async fn supersede_with(
    table: &Table,
    added: &[DataFile],
    indexed: bool,
) -> Result<Superseded> {
    let key_columns = KeyColumns::of(table)?;
    // A key of fields may change in several partitions: its delete is kept as a marker.
    let markers = matches!(key_columns, KeyColumns::Fields { .. });
    let mut rows: Vec<Row> = Vec::new();
    let mut deletes = PositionDeletes::new();
    let added_paths: BTreeSet<&str> = added.iter().map(DataFile::file_path).collect();
    for file in added {
        let read = read_rows(table, file.file_path(), &key_columns).await?;
        rows.extend(read.rows);
        if !read.keyless_tombstones.is_empty() {
            deletes
                .entry(file.file_path().to_owned())
                .or_default()
                .extend(read.keyless_tombstones);
        }
    }
    // Rows past `fresh` are the index's: their deletes are in the table already.
    let fresh = rows.len();
    let keys: HashSet<Vec<u8>> = rows.iter().map(|(key, _)| key.clone()).collect();
    let found = match indexed {
        true => index::load(table).await?,
        false => None,
    };
    let (mut index, indexed) = match found {
        Some(index) => (index, true),
        None => (live_rows(table, &added_paths, &key_columns).await?, false),
    };
    for key in &keys {
        rows.extend(
            index
                .rows_of(key)
                .into_iter()
                // A file of the commit is never in the table yet; were it, its rows
                // are those read above.
                .filter(|row| !added_paths.contains(row.file.as_str()))
                .map(|row| (key.clone(), row)),
        );
    }
    // Each key's last change: its live row, or (keyed by fields) its delete's marker,
    // with the source position the fold places it at.
    let winners: BTreeMap<usize, Option<SourcePosition>> = fold(changes_of(&rows))
        .into_values()
        .filter_map(|change| match change.action {
            Action::Upsert(at) if markers || !rows[at].1.tombstone => Some((at, change.source)),
            _ => None,
        })
        .collect();
    let newest = rows[..fresh].iter().map(|(_, row)| row.timestamp_ms).max();
    for key in &keys {
        index.remove(key);
    }
    for (at, (key, row)) in rows.into_iter().enumerate() {
        // A marker's row is deleted already; a tombstone, a row superseded, is deleted.
        let marker = at >= fresh && row.tombstone;
        let wins = winners.get(&at);
        if let Some(source) = wins {
            let source = source.clone();
            index.insert(
                key,
                &IndexedRow {
                    source,
                    ..row.clone()
                },
            );
        }
        let wins = wins.is_some();
        if !marker && (!wins || row.tombstone) {
            deletes.entry(row.file).or_default().insert(row.position);
        }
    }
    if let Some(newest) = newest.filter(|_| markers) {
        index.forget_markers_before(newest.saturating_sub(MARKER_RETENTION_MS));
    }
    Ok(Superseded {
        deletes,
        index,
        indexed,
    })
}

/// The updates that carry the key index of the snapshot `table` is at to the
/// snapshot `snapshot` (id, sequence number) a replace is about to make (a compaction
/// removing the files `removed` and adding `added`, rows deleted left out; a manifest
/// rewrite): the removed files' rows forgotten, the added files' read. None for a
/// table that is no mirror or has no index of its snapshot (its next commit reads the
/// table).
pub(crate) async fn carried_index(
    table: &Table,
    (removed, added): (&BTreeSet<String>, &[DataFile]),
    snapshot: (i64, i64),
) -> Result<Vec<iceberg::TableUpdate>> {
    let Some(mode) = crate::table::mode_of(table)
        .ok()
        .filter(|mode| mode.mirrors())
    else {
        return Ok(Vec::new());
    };
    let Some(mut index) = index::load(table).await? else {
        return Ok(Vec::new());
    };
    index.remove_files(removed);
    let key_columns = KeyColumns::of_mode(table, mode)?;
    for file in added {
        for (key, row) in read_rows(table, file.file_path(), &key_columns).await?.rows {
            index.insert(key, &row);
        }
    }
    index_updates(table, &index, snapshot).await
}

/// The rows `rows` as changes of their keys, each by its place in `rows`.
fn changes_of(rows: &[Row]) -> impl Iterator<Item = Change<Vec<u8>, usize>> + '_ {
    rows.iter().enumerate().map(|(at, (key, row))| Change {
        key: key.clone(),
        action: Action::Upsert(at),
        partition: row.partition,
        offset: row.offset,
        timestamp_ms: row.timestamp_ms,
        source: row.source.clone(),
    })
}

/// The markers among `tombstones` (deleted tombstone rows of a mirror keyed by
/// fields): each key's delete that is its last change, against the other tombstones
/// and the live rows of `index`.
fn markers_among(index: &KeyIndex, tombstones: Vec<Row>) -> Vec<Row> {
    let keys: BTreeSet<&Vec<u8>> = tombstones.iter().map(|(key, _)| key).collect();
    let live: Vec<Row> = keys
        .into_iter()
        .flat_map(|key| index.rows_of(key).into_iter().map(|row| (key.clone(), row)))
        .collect();
    let deletes = tombstones.len();
    let rows: Vec<Row> = tombstones.into_iter().chain(live).collect();
    fold(changes_of(&rows))
        .into_values()
        .filter_map(|change| match change.action {
            Action::Upsert(at) if at < deletes => {
                let (key, row) = &rows[at];
                let source = change.source;
                Some((
                    key.clone(),
                    IndexedRow {
                        source,
                        ..row.clone()
                    },
                ))
            }
            _ => None,
        })
        .collect()
}

/// Every live keyed row of `table` but those of the files `added` (read apart): each
/// live data file read, the rows its live deletes delete left out; keyed by fields,
/// each key's delete that is its last change too, as its marker (the tombstone rows a
/// compaction has not rewritten away yet). Refuses delete files this build does not
/// read.
async fn live_rows(
    table: &Table,
    added: &BTreeSet<&str>,
    key_columns: &KeyColumns,
) -> Result<KeyIndex> {
    let deleted = crate::table::live_deletes(table).await?;
    if let Some(unread) = deleted.unread.first() {
        return Err(Error::new(
            ErrorKind::DataInvalid,
            format!(
                "{unread}: a delete file this build does not read (equality deletes): the mirror cannot tell which rows it deletes"
            ),
        ));
    }
    let markers = matches!(key_columns, KeyColumns::Fields { .. });
    let mut index = KeyIndex::default();
    let mut tombstones = Vec::new();
    for entry in crate::table::live_entries(table).await? {
        if added.contains(entry.file_path()) {
            continue;
        }
        for (key, row) in read_rows(table, entry.file_path(), key_columns).await?.rows {
            if !deleted.deletes(&row.file, row.position) {
                index.insert(key, &row);
            } else if markers && row.tombstone {
                tombstones.push((key, row));
            }
        }
    }
    for (key, row) in markers_among(&index, tombstones) {
        index.insert(key, &row);
    }
    Ok(index)
}

/// Writes `deletes` (from [`supersede`]) as delete files of `table`, under its `data/`
/// folder: a format v2 table's as position-delete files with its writer settings, one
/// per partition of the data files they delete from (a delete file lies in the
/// partition of its rows); a v3 table's as deletion vectors (one per data file,
/// merged with its live deletes).
/// `added` are the commit's new files, which the table does not list yet. Each file
/// comes with the partition spec id of the data files it deletes from. Refuses a
/// delete of a file that is neither live nor added.
pub async fn write_deletes(
    table: &Table,
    added: &[DataFile],
    deletes: &PositionDeletes,
) -> Result<Vec<(i32, DataFile)>> {
    let placed = placements(table, added).await?;
    if let Some(file) = deletes
        .keys()
        .find(|file| !placed.contains_key(file.as_str()))
    {
        return Err(Error::new(
            ErrorKind::DataInvalid,
            format!("{file}: a delete of a file the table does not hold"),
        ));
    }
    match table.metadata().format_version() >= FormatVersion::V3 {
        true => write_vectors(table, &placed, deletes).await,
        false => write_position_deletes(table, &placed, deletes).await,
    }
}

/// Where a data file lies (its partition spec's id, its partition) and its rows.
type Placed = (i32, Struct, u64);

/// Where each data file of `table` (live, or among `added`, which are written in the
/// default spec) lies, with its rows.
async fn placements(table: &Table, added: &[DataFile]) -> Result<HashMap<String, Placed>> {
    let mut placed = HashMap::new();
    for spec in table.metadata().partition_specs_iter() {
        let spec_id = spec.spec_id();
        for entry in crate::table::live_entries_in(table, Some(spec_id)).await? {
            let file = entry.data_file();
            placed.insert(
                file.file_path().to_owned(),
                (spec_id, file.partition().clone(), file.record_count()),
            );
        }
    }
    let default_spec = table.metadata().default_partition_spec_id();
    for file in added {
        placed.insert(
            file.file_path().to_owned(),
            (default_spec, file.partition().clone(), file.record_count()),
        );
    }
    Ok(placed)
}

/// The position-delete files of `deletes`: one per partition.
async fn write_position_deletes(
    table: &Table,
    placed: &HashMap<String, Placed>,
    deletes: &PositionDeletes,
) -> Result<Vec<(i32, DataFile)>> {
    let mut by_partition: BTreeMap<(i32, String), (Struct, PositionDeletes)> = BTreeMap::new();
    for (file, positions) in deletes {
        let Some((spec_id, partition, _)) = placed.get(file.as_str()) else {
            continue;
        };
        by_partition
            .entry((*spec_id, format!("{partition:?}")))
            .or_insert_with(|| (partition.clone(), PositionDeletes::new()))
            .1
            .insert(file.clone(), positions.clone());
    }
    let properties = table.metadata().properties();
    let mut written = Vec::new();
    for ((spec_id, _), (partition, deletes)) in by_partition {
        let path = format!(
            "{}/data/deletes-{}.parquet",
            table.metadata().location(),
            uuid::Uuid::new_v4()
        );
        written.push((
            spec_id,
            kfs_parquet::write_position_deletes(
                table.file_io(),
                &path,
                kfs_parquet::writer_properties(properties)?,
                &deletes,
                spec_id,
                partition,
            )
            .await?,
        ));
    }
    Ok(written)
}

/// The deletion vectors of `deletes` (a format v3 table's): one Puffin file of one
/// vector per data file, each merged with every row the file's live deletes delete
/// (its vector, or the position-delete files of before the table's upgrade), since a
/// file's new vector replaces what deleted its rows before (the row delta removes
/// the old vector: at most one per data file). Each vector's entry lies in its data
/// file's partition.
async fn write_vectors(
    table: &Table,
    placed: &HashMap<String, Placed>,
    deletes: &PositionDeletes,
) -> Result<Vec<(i32, DataFile)>> {
    if deletes.is_empty() {
        return Ok(Vec::new());
    }
    // The files' rows as placed: no second read of the data manifests.
    let touched: HashMap<String, u64> = deletes
        .keys()
        .filter_map(|file| Some((file.clone(), placed.get(file)?.2)))
        .collect();
    let live = crate::table::live_deletes_of(table, Some(&touched)).await?;
    let mut merged = deletes.clone();
    for (file, rows) in &mut merged {
        if let Some(before) = live.positions.get(file) {
            rows.extend(before);
        }
    }
    let path = format!(
        "{}/data/deletes-{}.puffin",
        table.metadata().location(),
        uuid::Uuid::new_v4()
    );
    let invalid = |e: kfs_parquet::VectorError| Error::new(ErrorKind::DataInvalid, e.to_string());
    let (bytes, blobs) = kfs_parquet::puffin_of_vectors(&merged).map_err(invalid)?;
    let size = bytes.len() as u64;
    table
        .file_io()
        .new_output(&path)?
        .write(bytes.into())
        .await?;
    let mut written = Vec::new();
    for blob in &blobs {
        if let Some((spec_id, partition, _)) = placed.get(&blob.referenced_data_file) {
            let file =
                kfs_parquet::vector_delete_file(&path, size, blob, *spec_id, partition.clone())?;
            written.push((*spec_id, file));
        }
    }
    Ok(written)
}

//! The keyed workload (four keys per partition: updates, tombstones, keys written
//! again; keyed by the record key or, in JSON, by the `id` field) and the check that
//! a mirror of it reads as its fold, its key index agreeing with its files.

use super::*;
use kfs_plan::key_index::KeyIndex;

/// The key of the keyed workload's record at `offset` of `partition`: four keys per
/// partition, so that a segment updates its own rows and those of earlier segments.
pub fn mirror_key(partition: i32, offset: i64) -> String {
    format!("p{partition}-k{}", offset % 4)
}

/// The keyed workload's value at `offset`: a tombstone at every fifth offset (a key
/// deleted, and inserted again by a later record).
pub fn mirror_value(offset: i64) -> Option<Vec<u8>> {
    (offset % 5 != 4).then(|| format!("v{offset}").into_bytes())
}

/// The first `segments` segments of each partition of the keyed workload (the
/// layout of [`source`]): records of [`mirror_key`] with [`mirror_value`] (as `kind`
/// has them), for tables in upsert mode.
pub fn keyed_source(
    segments: i64,
    kind: Records,
) -> Result<MemorySource, kfs_segment::EncodeError> {
    let source = MemorySource::default();
    put_keyed_segments(&source, 0..segments, kind)?;
    Ok(source)
}

/// Uploads the keyed workload's segments `indices` of each partition, of `kind`
/// ([`Records::Keyed`] or [`Records::FieldKeyed`]).
pub fn put_keyed_segments(
    source: &MemorySource,
    indices: std::ops::Range<i64>,
    kind: Records,
) -> Result<(), kfs_segment::EncodeError> {
    for partition in 0..PARTITIONS {
        for index in indices.clone() {
            put_feed_segment(source, "ns", "orders", partition, index, kind)?;
        }
    }
    Ok(())
}

/// The naming of the keyed workload: its table in upsert mode by the record key.
pub fn upsert_naming() -> Result<TableNaming, String> {
    Ok(TableNaming {
        mode: kfs_plan::mode::ModeSetting::parse("upsert", None)?,
        ..TableNaming::default()
    })
}

/// [`upsert_naming`] with the table created in format v3: its deletes are deletion
/// vectors.
pub fn vector_naming() -> Result<TableNaming, String> {
    let mut naming = upsert_naming()?;
    naming
        .properties
        .insert("format-version".to_owned(), "3".to_owned());
    Ok(naming)
}

/// [`field_key_naming`] with the mirror's change log kept beside it.
pub fn logged_naming() -> Result<TableNaming, String> {
    let mut naming = field_key_naming()?;
    naming.mode = naming.mode.with_change_log(true)?;
    Ok(naming)
}

/// The naming of the keyed workload in JSON ([`Records::FieldKeyed`]): its table a
/// JSON mirror keyed by the value field `id`.
pub fn field_key_naming() -> Result<TableNaming, String> {
    Ok(TableNaming {
        value_format: kfs_plan::naming::ValueFormat::Json,
        mode: kfs_plan::mode::ModeSetting::parse("upsert", Some("id"))?,
        ..TableNaming::default()
    })
}

/// Checks that the table reads as the mirror of the keyed workload's records but
/// those `absent` (late, skipped, the last of a short first upload): each key's last
/// record once (by [`kfs_plan::changes::fold`]'s order: partition, then offset), none
/// for a key whose last record is a tombstone.
pub async fn check_mirror(
    catalog: &dyn Catalog,
    absent: &BTreeSet<(i32, i64)>,
) -> Result<(), String> {
    let mut last: std::collections::BTreeMap<String, (i32, i64)> = Default::default();
    for partition in 0..PARTITIONS {
        for offset in 0..SEGMENTS * RECORDS {
            if !absent.contains(&(partition, offset)) {
                last.insert(mirror_key(partition, offset), (partition, offset));
            }
        }
    }
    last.retain(|_, (_, offset)| mirror_value(*offset).is_some());
    let expected: std::collections::BTreeMap<(i32, i64), usize> =
        last.values().map(|at| (*at, 1)).collect();
    let name = TableNaming::default().table_for("orders");
    let seen = crate::local::offsets(catalog, &name).await?;
    if seen != expected {
        return Err(format!(
            "the mirror reads {seen:?}, the fold of its records says {expected:?}"
        ));
    }
    let (by_field, index, read) = check_key_index(catalog, &name).await?;
    // Each live key is indexed by the key it is mirrored by: the record key, or the
    // text of its `id` field (`kfs_plan::field_key`), never the other.
    let indexed_key = |key: &str| match by_field {
        true => kfs_plan::field_key::encode([Some(key.as_bytes())]).unwrap_or_default(),
        false => key.as_bytes().to_vec(),
    };
    for key in last.keys() {
        let rows = index.rows_of(&indexed_key(key));
        if rows.is_empty() {
            return Err(format!(
                "key {key} is live but not indexed by its {} key",
                if by_field { "field" } else { "record" }
            ));
        }
        // A live key has no marker: a delete's marker goes with the change after it.
        if rows.iter().any(|row| row.tombstone) {
            return Err(format!("key {key} is live but has a marker: {rows:?}"));
        }
    }
    // A marker whose tombstone row is still in a file is found again by an index
    // rebuilt from the files.
    for key in (0..PARTITIONS).flat_map(|p| (0..4).map(move |k| mirror_key(p, k))) {
        let rebuilt = read.rows_of(&indexed_key(&key));
        let kept = index.rows_of(&indexed_key(&key));
        let kept = kept.iter().filter(|row| row.tombstone);
        if let Some(lost) = kept
            .filter(|row| row.file != kfs_plan::key_index::MARKER_FILE)
            .find(|row| !rebuilt.contains(row))
        {
            return Err(format!(
                "key {key}'s marker {lost:?} is not rebuilt from the files: {rebuilt:?}"
            ));
        }
    }
    Ok(())
}

/// Checks that the mirror's change log holds every record of the keyed workload but
/// those `absent` and the mirror's dead letters, each exactly once (tombstones too: a
/// log keeps every change).
pub async fn check_change_log(
    catalog: &dyn Catalog,
    absent: &BTreeSet<(i32, i64)>,
) -> Result<(), String> {
    let expected: std::collections::BTreeMap<(i32, i64), usize> = (0..PARTITIONS)
        .flat_map(|p| (0..SEGMENTS * RECORDS).map(move |o| (p, o)))
        .filter(|at| !absent.contains(at))
        .map(|at| (at, 1))
        .collect();
    let name = TableNaming::default().table_for("orders");
    // What the mirror refused (a short first upload's values are not JSON) is in its
    // dead-letter table, not in the log.
    let refused = crate::local::offsets(catalog, &name.dead_letters()).await?;
    let expected: std::collections::BTreeMap<(i32, i64), usize> = expected
        .into_iter()
        .filter(|(at, _)| !refused.contains_key(at))
        .collect();
    let seen = crate::local::offsets(catalog, &name.change_log()).await?;
    if seen != expected {
        let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
        let missing: Vec<_> = expected
            .keys()
            .filter(|at| !seen.contains_key(at))
            .collect();
        return Err(format!(
            "the change log holds {} records, the workload {}: twice {twice:?}, missing {missing:?}",
            seen.values().sum::<usize>(),
            expected.len()
        ));
    }
    Ok(())
}

/// Checks that the key index the mirror's last commit left (when the table is still
/// at that commit's snapshot) holds exactly the live keyed rows a read of every data
/// file finds; returns whether the table is keyed by value fields, the index, and the
/// index that read builds.
async fn check_key_index(
    catalog: &dyn Catalog,
    name: &kfs_plan::naming::TableName,
) -> Result<(bool, KeyIndex, KeyIndex), String> {
    let table = catalog
        .load_table(&table_ident(name))
        .await
        .map_err(|e| e.to_string())?;
    let indexed = kfs_core::supersede(&table, &[])
        .await
        .map_err(|e| e.to_string())?;
    let read = kfs_core::testing::supersede_with(&table, &[], false)
        .await
        .map_err(|e| e.to_string())?;
    // The markers (deleted keys' last changes) may differ: a read of the files finds
    // those of the tombstone rows a compaction has not dropped, the index keeps them
    // all for a day. The live rows are the same.
    if indexed.index.live().encode() != read.index.live().encode() {
        return Err(format!(
            "the key index holds {} rows of {} keys (found: {}), the table {} rows of {} keys",
            indexed.index.rows(),
            indexed.index.keys(),
            indexed.indexed,
            read.index.rows(),
            read.index.keys()
        ));
    }
    let by_field = table
        .metadata()
        .properties()
        .get(kfs_plan::mode::UPSERT_KEY_PROPERTY)
        .is_some_and(|key| key != kfs_plan::mode::RECORD_KEY);
    Ok((by_field, indexed.index, read.index))
}

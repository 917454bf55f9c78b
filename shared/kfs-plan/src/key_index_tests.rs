use super::*;
use proptest::prelude::*;

fn row(file: &str, position: i64, offset: i64, tombstone: bool) -> IndexedRow {
    IndexedRow {
        file: file.to_owned(),
        position,
        partition: 3,
        offset,
        timestamp_ms: 1_700_000_000_000 + offset,
        tombstone,
        source: None,
    }
}

/// The index as a sorted list, to compare two.
fn listed(index: &KeyIndex) -> Vec<(Vec<u8>, Vec<IndexedRow>)> {
    let mut keys: Vec<&Vec<u8>> = index.rows.keys().collect();
    keys.sort();
    keys.into_iter()
        .map(|key| (key.clone(), index.rows_of(key)))
        .collect()
}

#[test]
fn an_index_reads_back_what_it_holds() -> Result<(), String> {
    let mut index = KeyIndex::default();
    index.insert(b"a".to_vec(), &row("s3://b/t/data/1.parquet", 0, 10, false));
    index.insert(b"b".to_vec(), &row("s3://b/t/data/2.parquet", 4, 11, false));
    index.insert(b"b".to_vec(), &row("s3://b/t/data/1.parquet", 7, 12, true));
    index.insert(Vec::new(), &row("s3://b/t/data/3.parquet", -1, -5, false));
    let mut sourced = row("s3://b/t/data/2.parquet", 5, 13, false);
    sourced.source = Some(SourcePosition::Binlog {
        file: "mysql-bin.000003".into(),
        pos: 154,
        row: 1,
    });
    index.insert(b"c".to_vec(), &sourced);
    sourced.source = Some(SourcePosition::Lsn(u64::MAX));
    index.insert(b"d".to_vec(), &sourced);
    let decoded = KeyIndex::decode(&index.encode())?;
    assert_eq!(listed(&decoded), listed(&index));
    assert_eq!((decoded.keys(), decoded.rows()), (5, 6));
    index.remove(b"c");
    index.remove(b"d");
    let mut rewritten = index.clone();
    rewritten.remove_files(&["s3://b/t/data/1.parquet".to_owned()].into_iter().collect());
    // The live row in the file is forgotten; the marker (a tombstone) is kept, naming
    // no file.
    let b = rewritten.rows_of(b"b");
    assert_eq!(b.len(), 2);
    assert!(
        b.iter()
            .any(|r| r.tombstone && r.file == MARKER_FILE && r.offset == 12)
    );
    assert!(rewritten.rows_of(b"a").is_empty());
    assert_eq!((rewritten.keys(), rewritten.rows()), (2, 3));
    assert_eq!(
        listed(&KeyIndex::decode(&rewritten.encode())?),
        listed(&rewritten)
    );
    // Markers are let go of by age, and left out of the live rows.
    let mut aged = rewritten.clone();
    aged.forget_markers_before(1_700_000_000_000 + 13);
    assert_eq!((aged.keys(), aged.rows()), (2, 2));
    assert_eq!(rewritten.live().encode(), aged.encode());
    index.remove(b"b");
    assert!(index.rows_of(b"b").is_empty());
    // A file no row lies in any more is not written.
    let shrunk = index.encode();
    assert!(!shrunk.windows(6).any(|w| w == b"2.parq"));
    assert_eq!(listed(&KeyIndex::decode(&shrunk)?), listed(&index));
    Ok(())
}

#[test]
fn an_index_is_used_only_for_the_snapshot_it_names() {
    let properties: HashMap<String, String> =
        index_properties("s3://b/t/metadata/i.puffin", 42, &HashMap::new())
            .into_iter()
            .collect();
    assert_eq!(
        index_path(&properties, 42),
        Some("s3://b/t/metadata/i.puffin")
    );
    assert_eq!(index_path(&properties, 43), None);
    assert_eq!(index_path(&HashMap::new(), 42), None);
    let mut broken = properties.clone();
    broken.insert(INDEX_SNAPSHOT_PROPERTY.to_owned(), "x".to_owned());
    assert_eq!(index_path(&broken, 42), None);
    // Made by the record key: no index of a table keyed by fields since.
    let mut rekeyed = properties.clone();
    rekeyed.insert(crate::mode::UPSERT_KEY_PROPERTY.to_owned(), "id".to_owned());
    assert_eq!(index_path(&rekeyed, 42), None);
    let by_id: HashMap<String, String> = rekeyed
        .clone()
        .into_iter()
        .chain(index_properties("i.puffin", 42, &rekeyed))
        .collect();
    assert_eq!(index_path(&by_id, 42), Some("i.puffin"));
    // An index written before keys of fields named none: the record key's.
    let mut older = properties.clone();
    older.remove(INDEX_KEY_PROPERTY);
    assert_eq!(index_path(&older, 42), Some("s3://b/t/metadata/i.puffin"));
}

#[test]
fn a_broken_blob_says_where_and_why() {
    let mut index = KeyIndex::default();
    index.insert(b"key".to_vec(), &row("f", 1, 2, false));
    let blob = index.encode();
    for cut in 0..blob.len() {
        let refused = KeyIndex::decode(&blob[..cut]).err().unwrap_or_default();
        assert!(refused.contains("byte"), "cut at {cut}: {refused}");
    }
    let mut version = blob.clone();
    version[0] = 9;
    assert!(KeyIndex::decode(&version).is_err());
    let mut longer = blob.clone();
    longer.push(0);
    assert!(
        KeyIndex::decode(&longer)
            .err()
            .unwrap_or_default()
            .contains("left")
    );
    // A file listed twice, a key without rows: refused (encode writes neither).
    let twice = [1, 2, 1, b'a', 1, b'a', 0];
    assert!(
        KeyIndex::decode(&twice)
            .err()
            .unwrap_or_default()
            .contains("repeats file")
    );
    let rowless = [1, 0, 1, 1, b'k', 0];
    assert!(
        KeyIndex::decode(&rowless)
            .err()
            .unwrap_or_default()
            .contains("without rows")
    );
    // A count of a billion keys in a blob of a few bytes allocates nothing.
    let huge = [1, 0, 0x80, 0x80, 0x80, 0x80, 0x04];
    assert!(
        KeyIndex::decode(&huge)
            .err()
            .unwrap_or_default()
            .contains("count")
    );
}

#[test]
fn an_index_an_older_build_wrote_reads_without_source_positions() -> Result<(), String> {
    // Version 1: one file `f`, key `k` with one row (file 0, position 2, partition 0,
    // offset 5, timestamp 3, a tombstone).
    let blob = [1, 1, 1, b'f', 1, 1, b'k', 1, 0, 4, 0, 10, 6, 1];
    let index = KeyIndex::decode(&blob)?;
    let mut expected = row("f", 2, 5, true);
    (expected.partition, expected.timestamp_ms) = (0, 3);
    assert_eq!(index.rows_of(b"k"), vec![expected]);
    let mut unknown_kind = KeyIndex::default();
    unknown_kind.insert(b"k".to_vec(), &row("f", 0, 1, false));
    let mut bytes = unknown_kind.encode();
    if let Some(kind) = bytes.last_mut() {
        *kind = 3;
    }
    assert!(
        KeyIndex::decode(&bytes)
            .err()
            .unwrap_or_default()
            .contains("source position kind 3")
    );
    Ok(())
}

/// Any source position, or none.
fn any_source() -> impl Strategy<Value = Option<SourcePosition>> {
    prop_oneof![
        Just(None),
        any::<u64>().prop_map(|lsn| Some(SourcePosition::Lsn(lsn))),
        (".{0,12}", any::<u64>(), any::<u64>())
            .prop_map(|(file, pos, row)| Some(SourcePosition::Binlog { file, pos, row })),
    ]
}

proptest! {
    #[test]
    fn any_index_round_trips(
        rows in proptest::collection::vec(
            (proptest::collection::vec(any::<u8>(), 0..8), 0u8..4, any::<i64>(), any::<i32>(), any::<i64>(), (any::<i64>(), any::<bool>(), any_source())),
            0..40,
        )
    ) {
        let mut index = KeyIndex::default();
        for (key, file, position, partition, offset, (timestamp_ms, tombstone, source)) in rows {
            index.insert(key, &IndexedRow {
                file: format!("data/{file}.parquet"),
                position,
                partition,
                offset,
                timestamp_ms,
                tombstone,
                source,
            });
        }
        let decoded = KeyIndex::decode(&index.encode());
        prop_assert!(decoded.is_ok(), "{decoded:?}");
        let decoded = decoded.unwrap_or_default();
        prop_assert_eq!(listed(&decoded), listed(&index));
        prop_assert_eq!(decoded.encode(), index.encode());
    }

    #[test]
    fn any_bytes_decode_or_are_refused(blob in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = KeyIndex::decode(&blob);
    }
}

/// A Puffin file of `blob` (uncompressed) for snapshot 7, its footer as iceberg-rust's
/// writer lays it out.
fn puffin(blob: &[u8]) -> Vec<u8> {
    let footer = serde_json::json!({"blobs": [{
        "type": BLOB_TYPE, "fields": [1], "snapshot-id": 7, "sequence-number": 3,
        "offset": 4, "length": blob.len(),
        "properties": {UNCOMPRESSED_BYTES_PROPERTY: blob.len().to_string()}}]})
    .to_string();
    let mut file = PUFFIN_MAGIC.to_vec();
    file.extend_from_slice(blob);
    file.extend_from_slice(&PUFFIN_MAGIC);
    file.extend_from_slice(footer.as_bytes());
    file.extend_from_slice(&(footer.len() as u32).to_le_bytes());
    file.extend_from_slice(&[0; 4]);
    file.extend_from_slice(&PUFFIN_MAGIC);
    file
}

#[test]
fn the_index_blob_is_found_by_its_footer_and_a_cut_file_refused() -> Result<(), String> {
    let mut index = KeyIndex::default();
    index.insert(b"k".to_vec(), &row("f", 0, 1, false));
    let blob = index.encode();
    let file = puffin(&blob);
    let found = find_index_blob(&file, 7)?.ok_or("no blob")?;
    assert_eq!(
        (found.offset, found.length, found.zstd),
        (4, blob.len(), false)
    );
    assert_eq!(found.uncompressed, Some(blob.len() as u64));
    assert_eq!(find_index_blob(&file, 8)?, None);
    for cut in 0..file.len() {
        assert!(find_index_blob(&file[..cut], 7).is_err(), "cut at {cut}");
    }
    Ok(())
}

proptest! {
    #[test]
    fn any_bytes_as_a_puffin_file_are_read_or_refused(
        file in proptest::collection::vec(any::<u8>(), 0..200),
        tail in proptest::collection::vec(any::<u8>(), 0..16),
    ) {
        let _ = find_index_blob(&file, 7);
        // With Puffin's magic around them, bytes reach the footer's parsing.
        let mut framed = PUFFIN_MAGIC.to_vec();
        framed.extend_from_slice(&file);
        framed.extend_from_slice(&tail);
        framed.extend_from_slice(&PUFFIN_MAGIC);
        let _ = find_index_blob(&framed, 7);
    }
}

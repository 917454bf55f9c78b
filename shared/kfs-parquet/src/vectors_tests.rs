use super::*;

/// The positions the 32-bit bitmap at the start of `bytes` holds, read back by the
/// format's rules (a reader of our own, checked against pyiceberg's below), and the
/// bytes it took.
fn read_roaring32(bytes: &[u8]) -> (Vec<u32>, usize) {
    let u32_at =
        |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let u16_at = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
    assert_eq!(u32_at(0), SERIAL_COOKIE_NO_RUNCONTAINER);
    let containers = u32_at(4) as usize;
    let mut values = Vec::new();
    let mut end = 8 + 8 * containers;
    for c in 0..containers {
        let key = u32::from(u16_at(8 + 4 * c));
        let cardinality = usize::from(u16_at(10 + 4 * c)) + 1;
        let offset = u32_at(8 + 4 * containers + 4 * c) as usize;
        assert_eq!(offset, end, "container {c} not where its offset says");
        if cardinality <= ARRAY_MAX {
            for i in 0..cardinality {
                values.push(key << 16 | u32::from(u16_at(offset + 2 * i)));
            }
        } else {
            for word in 0..1024 {
                let at = offset + 8 * word;
                let mut bits = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or_default());
                while bits != 0 {
                    let bit = bits.trailing_zeros();
                    values.push(key << 16 | (word as u32 * 64 + bit));
                    bits &= bits - 1;
                }
            }
            assert_eq!(
                values.iter().filter(|v| *v >> 16 == key).count(),
                cardinality
            );
        }
        end = offset + container_bytes(cardinality);
    }
    (values, end)
}

/// The positions of a `deletion-vector-v1` blob, checking its framing.
fn read_vector(blob: &[u8]) -> Vec<i64> {
    let length = u32::from_be_bytes(blob[0..4].try_into().unwrap_or_default()) as usize;
    assert_eq!(blob.len(), 4 + length + 4, "length prefix");
    let vector = &blob[4..4 + length];
    assert_eq!(vector[0..4], VECTOR_MAGIC);
    let crc = u32::from_be_bytes(blob[4 + length..].try_into().unwrap_or_default());
    assert_eq!(crc, crc32fast::hash(vector), "CRC over magic and vector");
    let buckets = u64::from_le_bytes(vector[4..12].try_into().unwrap_or_default());
    let mut at = 12;
    let mut positions = Vec::new();
    for _ in 0..buckets {
        let key = u32::from_le_bytes(vector[at..at + 4].try_into().unwrap_or_default());
        let (low, used) = read_roaring32(&vector[at + 4..]);
        positions.extend(
            low.into_iter()
                .map(|l| (i64::from(key) << 32) | i64::from(l)),
        );
        at += 4 + used;
    }
    assert_eq!(at, vector.len(), "trailing bytes");
    positions
}

#[test]
fn a_vector_holds_its_positions_in_array_and_bitmap_containers_and_buckets() {
    let positions: BTreeSet<i64> = [0, 1, 65_535, 65_536]
        .into_iter()
        .chain(200_000..205_000) // 5,000 in one container: a bitmap container
        .chain([1 << 32, (1 << 32) + 7, (i64::from(i32::MAX) << 32) | 3])
        .collect();
    let blob = deletion_vector("f", &positions).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        read_vector(&blob),
        positions.into_iter().collect::<Vec<_>>()
    );
}

#[test]
fn what_no_reader_could_take_is_refused() {
    // The highest position there is fits the highest key readers take.
    let top = deletion_vector("f", &BTreeSet::from([i64::MAX])).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read_vector(&top), [i64::MAX]);
    let refused = |positions: &[i64]| deletion_vector("f", &positions.iter().copied().collect());
    assert_eq!(refused(&[]), Err(VectorError::Empty("f".into())));
    for bad in [-1, i64::MIN] {
        assert!(
            matches!(refused(&[1, bad]), Err(VectorError::Position { position, .. }) if position == bad),
            "{bad}"
        );
    }
}

#[test]
fn a_puffin_file_frames_its_blobs_and_footer() {
    let vectors = BTreeMap::from([
        ("s3://b/t/data/a.parquet".to_owned(), BTreeSet::from([3, 9])),
        ("s3://b/t/data/b.parquet".to_owned(), BTreeSet::from([0])),
    ]);
    let (file, blobs) = puffin_of_vectors(&vectors).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(&file[..4], PUFFIN_MAGIC);
    assert_eq!(&file[file.len() - 4..], PUFFIN_MAGIC);
    assert_eq!(file[file.len() - 8..file.len() - 4], [0, 0, 0, 0]);
    let size = u32::from_le_bytes(
        file[file.len() - 12..file.len() - 8]
            .try_into()
            .unwrap_or_default(),
    ) as usize;
    let footer: serde_json::Value =
        serde_json::from_slice(&file[file.len() - 12 - size..file.len() - 12]).unwrap_or_default();
    assert_eq!(
        &file[file.len() - 16 - size..file.len() - 12 - size],
        PUFFIN_MAGIC
    );
    assert_eq!(blobs.len(), 2);
    for (at, blob) in blobs.iter().enumerate() {
        let meta = &footer["blobs"][at];
        assert_eq!(meta["offset"], blob.offset);
        assert_eq!(meta["length"], blob.length);
        assert_eq!(meta["type"], "deletion-vector-v1");
        assert_eq!(
            meta["properties"]["referenced-data-file"],
            blob.referenced_data_file
        );
        assert_eq!(
            meta["properties"]["cardinality"],
            blob.cardinality.to_string()
        );
        let bytes = &file[blob.offset as usize..(blob.offset + blob.length) as usize];
        let expected: Vec<i64> = vectors[&blob.referenced_data_file]
            .iter()
            .copied()
            .collect();
        assert_eq!(read_vector(bytes), expected);
    }
}

#[test]
fn a_vectors_manifest_entry_points_at_its_blob() -> Result<(), Box<dyn std::error::Error>> {
    let vectors = BTreeMap::from([("s3://b/t/data/a.parquet".to_owned(), BTreeSet::from([3, 9]))]);
    let (file, blobs) = puffin_of_vectors(&vectors)?;
    let entry = vector_delete_file(
        "s3://b/t/data/dv.puffin",
        file.len() as u64,
        &blobs[0],
        0,
        Struct::empty(),
    )?;
    assert_eq!(entry.content_type(), DataContentType::PositionDeletes);
    assert_eq!(entry.file_format(), DataFileFormat::Puffin);
    assert_eq!(entry.record_count(), 2);
    assert_eq!(entry.file_size_in_bytes(), file.len() as u64);
    assert_eq!(
        entry.referenced_data_file().as_deref(),
        Some("s3://b/t/data/a.parquet")
    );
    assert_eq!(entry.content_offset(), Some(4));
    assert_eq!(entry.content_size_in_bytes(), Some(blobs[0].length as i64));
    Ok(())
}

/// pyiceberg (its Puffin reader and pyroaring) reads the vectors back.
#[test]
fn pyiceberg_reads_the_vectors_back() -> Result<(), Box<dyn std::error::Error>> {
    let vectors = BTreeMap::from([
        (
            "s3://b/t/data/a.parquet".to_owned(),
            (0..6_000).step_by(1).collect::<BTreeSet<i64>>(),
        ),
        (
            "s3://b/t/data/b.parquet".to_owned(),
            BTreeSet::from([5, 1 << 32, (1 << 33) + 1]),
        ),
    ]);
    let (file, _) = puffin_of_vectors(&vectors)?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("vectors.puffin");
    std::fs::write(&path, &file)?;
    let expected = serde_json::to_string(&vectors)?;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/python/check_vectors.py");
    let output = std::process::Command::new("python3")
        .arg(script)
        .arg(&path)
        .arg(expected)
        .output()?;
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

proptest::proptest! {
    /// Any set of positions reads back whole: dense and sparse containers, several
    /// buckets, the edges of containers and buckets.
    #[test]
    fn any_positions_read_back(
        low in proptest::collection::btree_set(0i64..300_000, 1..6_000),
        high in proptest::collection::btree_set(0i64..=i64::MAX, 0..20),
    ) {
        let positions: BTreeSet<i64> = low.into_iter().chain(high).collect();
        let blob = deletion_vector("f", &positions).unwrap_or_else(|e| panic!("{e}"));
        proptest::prop_assert_eq!(read_vector(&blob), positions.into_iter().collect::<Vec<_>>());
    }
}

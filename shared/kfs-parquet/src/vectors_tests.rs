use super::*;

/// The positions of a `deletion-vector-v1` blob, read by [`read_deletion_vector`].
fn read_vector(blob: &[u8]) -> Vec<i64> {
    read_deletion_vector("f", blob, u64::MAX).unwrap_or_else(|e| panic!("{e}"))
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

/// Another engine's vector: pyroaring's `BitMap64` (CRoaring's portable format), run
/// containers included (a run of 100,000 positions), a bitmap container and a
/// second bucket, framed as Java frames it, is read back whole.
#[test]
fn another_engines_vector_with_run_containers_reads_back() -> Result<(), Box<dyn std::error::Error>>
{
    let script = r#"
import sys, zlib
from pyroaring import BitMap64
b = BitMap64(range(0, 100000))
b.update(range(140000, 200000, 2))
b.update([(1 << 32) + 5, (1 << 32) + 70000])
b.run_optimize()
vector = bytes([0xD1, 0xD3, 0x39, 0x64]) + b.serialize()
blob = len(vector).to_bytes(4, "big") + vector + zlib.crc32(vector).to_bytes(4, "big")
sys.stdout.write(blob.hex())
"#;
    let output = std::process::Command::new("python3")
        .args(["-c", script])
        .output()?;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let hex = String::from_utf8(output.stdout)?;
    let blob: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16))
        .collect::<Result<_, _>>()?;
    let expected: Vec<i64> = (0..100_000)
        .chain((140_000..200_000).step_by(2))
        .chain([(1 << 32) + 5, (1 << 32) + 70_000])
        .collect();
    assert_eq!(read_deletion_vector("f", &blob, 200_000)?, expected);
    // More positions than the data file has rows: refused before they are read.
    let too_many = read_deletion_vector("f", &blob, 1_000);
    assert!(
        matches!(too_many, Err(VectorError::TooMany { limit: 1_000, .. })),
        "{too_many:?}"
    );
    Ok(())
}

#[test]
fn a_broken_vector_names_its_byte() {
    let blob =
        deletion_vector("f", &BTreeSet::from([1, 2, 70_000])).unwrap_or_else(|e| panic!("{e}"));
    let mut flipped = blob.clone();
    flipped[9] ^= 0xFF;
    let crc = read_deletion_vector("d.parquet", &flipped, 10)
        .err()
        .map(|e| e.to_string());
    assert_eq!(
        crc.as_deref(),
        Some(
            format!(
                "d.parquet: deletion vector, at byte {}: the CRC does not match",
                blob.len() - 4
            )
            .as_str()
        )
    );
    for cut in 0..blob.len() {
        assert!(
            read_deletion_vector("f", &blob[..cut], 10).is_err(),
            "cut at {cut}"
        );
    }
}

proptest::proptest! {
    /// Any bytes are read or refused, never a panic; every truncation of a vector is
    /// refused.
    #[test]
    fn any_bytes_are_read_or_refused(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..400)) {
        let _ = read_deletion_vector("f", &bytes, 1 << 20);
        // With a valid frame around them too, so the bitmap itself is reached.
        let mut vector = VECTOR_MAGIC.to_vec();
        vector.extend_from_slice(&bytes);
        let mut framed = (vector.len() as u32).to_be_bytes().to_vec();
        framed.extend_from_slice(&vector);
        framed.extend_from_slice(&crc32fast::hash(&vector).to_be_bytes());
        let _ = read_deletion_vector("f", &framed, 1 << 20);
    }
}

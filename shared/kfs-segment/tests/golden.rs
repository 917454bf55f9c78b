//! The worked example of `kafscale-format.md` as a golden vector, both ways: our
//! decoder reads the broker's bytes, and our encoder writes exactly those bytes.

use kfs_segment::{
    BatchSpec, Compression, DecodeLimits, OwnedRecord, SegmentIndex, check_index, decode_all,
    encode_segment,
};

const KFS: &[u8] = include_bytes!("../../../tests/fixtures/golden/worked-example.kfs");
const INDEX: &[u8] = include_bytes!("../../../tests/fixtures/golden/worked-example.index");

fn worked_example_record() -> OwnedRecord {
    OwnedRecord {
        offset: 0,
        timestamp_ms: 1_700_000_000_000,
        key: Some(b"k1".to_vec()),
        value: Some(b"v1".to_vec()),
        headers: vec![(b"h".to_vec(), Some(b"x".to_vec()))],
    }
}

#[test]
fn decodes_the_worked_example() -> Result<(), Box<dyn std::error::Error>> {
    let (records, summary) = decode_all(KFS, DecodeLimits::default())?;
    assert_eq!(records, vec![worked_example_record()]);
    assert_eq!(summary.batches, 1);
    assert_eq!(summary.last_offset, 0);
    assert_eq!(summary.footer.body_crc, 0xb71b_a454);
    assert_eq!(summary.header.created_ms, 1_700_000_000_000);
    let index = check_index(KFS, INDEX, DecodeLimits::default())?;
    assert_eq!(index.interval, 100);
    assert_eq!(index.entries.len(), 1);
    assert_eq!(index.entries[0].position, 32);
    Ok(())
}

#[test]
fn encodes_the_worked_example_byte_for_byte() -> Result<(), Box<dyn std::error::Error>> {
    let batch = BatchSpec::new(vec![worked_example_record()], Compression::None);
    let segment = encode_segment(&[batch], 1_700_000_000_000)?;
    assert_eq!(segment.kfs, KFS);
    assert_eq!(segment.index, INDEX);
    assert_eq!(SegmentIndex::decode(INDEX)?.encode(), INDEX);
    // The batch CRC given in the reference.
    assert_eq!(&segment.kfs[49..53], &0xd398_10bau32.to_be_bytes());
    Ok(())
}

//! Property tests: whatever the encoder writes, both decoders (slice and streaming)
//! read back exactly; arbitrary and mutated bytes never panic.

use std::io::{BufRead, Read};

use kfs_segment::{
    BatchSpec, Compression, DecodeError, DecodeLimits, OwnedRecord, SegmentDecoder, SegmentIndex,
    SnappyFraming, check_index, decode_all, encode_segment,
};
use proptest::prelude::*;

/// A reader that hands out at most `chunk` bytes per call and buffers no more, to
/// exercise the streaming decoder's look-ahead, and its choice between a batch whole in
/// the buffer and one gathered across buffers, at every boundary.
struct Chunked<'a> {
    data: &'a [u8],
    chunk: usize,
}

impl Read for Chunked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.chunk.min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

impl BufRead for Chunked<'_> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        Ok(&self.data[..self.chunk.min(self.data.len())])
    }

    fn consume(&mut self, amount: usize) {
        self.data = &self.data[amount.min(self.data.len())..];
    }
}

fn stream_decode(data: &[u8], chunk: usize) -> Result<Vec<OwnedRecord>, DecodeError> {
    let mut decoder =
        SegmentDecoder::from_reader(Chunked { data, chunk }, DecodeLimits::default())?;
    let mut records = Vec::new();
    decoder.for_each_batch(|batch| {
        records.extend(batch.records.iter().map(OwnedRecord::from_record));
        Ok::<(), DecodeError>(())
    })?;
    Ok(records)
}

/// Decodes through `next_batch_each`, records handed one by one and never listed.
fn record_by_record(data: &[u8], chunk: usize) -> Result<Vec<OwnedRecord>, DecodeError> {
    let mut decoder =
        SegmentDecoder::from_reader(Chunked { data, chunk }, DecodeLimits::default())?;
    let mut records = Vec::new();
    while decoder
        .next_batch_each(|record| {
            records.push(OwnedRecord::from_record(record));
            true
        })?
        .is_some()
    {}
    Ok(records)
}

fn bytes_or_null() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop_oneof![
        1 => Just(None),
        1 => Just(Some(Vec::new())),
        6 => proptest::collection::vec(any::<u8>(), 1..64).prop_map(Some),
        1 => proptest::collection::vec(any::<u8>(), 1000..5000).prop_map(Some),
    ]
}

#[derive(Debug, Clone)]
struct RecordDraft {
    gap: i64,
    ts_jitter: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

fn record_draft() -> impl Strategy<Value = RecordDraft> {
    (
        prop_oneof![8 => Just(1i64), 1 => 2i64..5],
        -5_000i64..5_000,
        bytes_or_null(),
        bytes_or_null(),
        // Header keys as any producer may send them: text, or bytes that are not UTF-8.
        proptest::collection::vec(
            (
                prop_oneof![
                    "\\PC{0,8}".prop_map(String::into_bytes),
                    proptest::collection::vec(any::<u8>(), 0..8),
                ],
                bytes_or_null(),
            ),
            0..4,
        ),
    )
        .prop_map(|(gap, ts_jitter, key, value, headers)| RecordDraft {
            gap,
            ts_jitter,
            key,
            value,
            headers,
        })
}

#[derive(Debug, Clone)]
struct BatchDraft {
    records: Vec<RecordDraft>,
    compression: Compression,
    framing: SnappyFraming,
    log_append: bool,
    control: bool,
    gap_before: i64,
}

fn batch_draft() -> impl Strategy<Value = BatchDraft> {
    (
        proptest::collection::vec(record_draft(), 1..12),
        proptest::sample::select(Compression::ALL.to_vec()),
        prop_oneof![Just(SnappyFraming::Xerial), Just(SnappyFraming::Raw)],
        proptest::bool::weighted(0.2),
        proptest::bool::weighted(0.05),
        prop_oneof![4 => Just(1i64), 1 => 2i64..1000],
    )
        .prop_map(
            |(records, compression, framing, log_append, control, gap_before)| BatchDraft {
                records,
                compression,
                framing,
                log_append,
                control,
                gap_before,
            },
        )
}

/// Turns drafts into batch specs and the records a decoder must return.
fn build(base: i64, drafts: &[BatchDraft]) -> (Vec<BatchSpec>, Vec<OwnedRecord>) {
    let mut next = base;
    let mut clock = 1_700_000_000_000i64;
    let mut specs = Vec::new();
    let mut expected = Vec::new();
    for (i, draft) in drafts.iter().enumerate() {
        if i > 0 {
            next += draft.gap_before - 1;
        }
        let mut records = Vec::new();
        for (j, r) in draft.records.iter().enumerate() {
            if j > 0 {
                next += r.gap - 1;
            }
            clock += 7;
            records.push(OwnedRecord {
                offset: next,
                timestamp_ms: clock + r.ts_jitter,
                key: r.key.clone(),
                value: r.value.clone(),
                headers: r.headers.clone(),
            });
            next += 1;
        }
        let mut spec = BatchSpec::new(records, draft.compression);
        spec.snappy_framing = draft.framing;
        spec.control = draft.control;
        if draft.log_append {
            spec.log_append_time_ms = Some(clock + 1_000);
        }
        if !draft.control {
            expected.extend(spec.records.iter().cloned().map(|mut r| {
                if let Some(append) = spec.log_append_time_ms {
                    r.timestamp_ms = append;
                }
                r
            }));
        }
        specs.push(spec);
    }
    (specs, expected)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn encode_then_decode_round_trips(
        base in 0i64..1_000_000_000_000,
        drafts in proptest::collection::vec(batch_draft(), 1..8),
        // Buffers smaller than a batch (gathered), larger (in place), and all of it.
        chunk in prop_oneof![1usize..200, 200usize..20_000, Just(usize::MAX)],
    ) {
        let (specs, expected) = build(base, &drafts);
        let segment = encode_segment(&specs, 1_700_000_000_123).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let (records, summary) = decode_all(&segment.kfs, DecodeLimits::default()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&records, &expected);
        prop_assert_eq!(summary.batches, specs.len() as u64);
        prop_assert_eq!(summary.control_batches, specs.iter().filter(|s| s.control).count() as u64);
        prop_assert_eq!(summary.last_offset, segment.last_offset);
        let streamed = stream_decode(&segment.kfs, chunk).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&streamed, &expected);
        let each = record_by_record(&segment.kfs, chunk).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&each, &expected);
        prop_assert!(check_index(&segment.kfs, &segment.index, DecodeLimits::default()).is_ok());
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let slice = decode_all(&data, DecodeLimits::default());
        let stream = stream_decode(&data, 7);
        prop_assert_eq!(slice.is_ok(), stream.is_ok());
        prop_assert_eq!(record_by_record(&data, 7).is_ok(), stream.is_ok());
        let _ = SegmentIndex::decode(&data);
    }

    #[test]
    fn arbitrary_bodies_behind_a_valid_header_never_panic(body in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let mut data = b"KAFS\x00\x01\x00\x00".to_vec();
        data.extend_from_slice(&[0; 24]);
        data.extend_from_slice(&body);
        let _ = decode_all(&data, DecodeLimits::default());
        let _ = stream_decode(&data, 13);
    }

    #[test]
    fn mutated_segments_never_panic_and_both_decoders_agree(
        drafts in proptest::collection::vec(batch_draft(), 1..4),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
        cut in any::<prop::sample::Index>(),
        truncate in proptest::bool::weighted(0.3),
        chunk in prop_oneof![Just(64usize), Just(usize::MAX)],
    ) {
        let (specs, _) = build(10, &drafts);
        let segment = encode_segment(&specs, 1).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut data = segment.kfs.clone();
        for (at, xor) in flips {
            let i = at.index(data.len());
            data[i] ^= xor;
        }
        if truncate {
            data.truncate(cut.index(data.len()));
        }
        let slice = decode_all(&data, DecodeLimits::default());
        let stream = stream_decode(&data, chunk);
        prop_assert_eq!(slice.is_ok(), stream.is_ok());
        let each = record_by_record(&data, chunk);
        prop_assert_eq!(each.as_ref().ok(), stream.as_ref().ok());
        prop_assert_eq!(each.is_ok(), stream.is_ok());
        if truncate {
            prop_assert!(slice.is_err());
        }
    }

    #[test]
    fn any_limits_never_panic(
        drafts in proptest::collection::vec(batch_draft(), 1..4),
        max_batch_bytes in 0u64..8192,
        max_decompressed_batch_bytes in 0u64..8192,
        max_compression_ratio in 0u64..8,
        ratio_free_bytes in 0u64..8192,
    ) {
        let limits = DecodeLimits { max_batch_bytes, max_decompressed_batch_bytes, max_compression_ratio, ratio_free_bytes };
        let (specs, expected) = build(0, &drafts);
        let segment = encode_segment(&specs, 1).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let slice = decode_all(&segment.kfs, limits);
        let stream = SegmentDecoder::from_reader(&segment.kfs[..], limits)
            .and_then(|mut d| d.for_each_batch(|_| Ok::<(), DecodeError>(())));
        prop_assert_eq!(slice.is_ok(), stream.is_ok());
        if let Ok((records, _)) = slice {
            prop_assert_eq!(records, expected);
        }
    }
}

/// A batch that lies whole in the reader's buffer is decoded where it lies: an
/// uncompressed record's value points into the reader's own bytes, not into a copy. One
/// that spans buffers is gathered, and reads back the same.
#[test]
fn batches_whole_in_the_buffer_are_decoded_in_place() -> Result<(), Box<dyn std::error::Error>> {
    let records: Vec<OwnedRecord> = (0..3)
        .map(|i| OwnedRecord {
            offset: 40 + i,
            timestamp_ms: 1_700_000_000_000 + i,
            key: Some(format!("key-{i}").into_bytes()),
            value: Some(vec![b'v'; 300]),
            headers: vec![(b"trace".to_vec(), Some(b"abc".to_vec()))],
        })
        .collect();
    let specs = vec![
        BatchSpec::new(records[..2].to_vec(), Compression::None),
        BatchSpec::new(records[2..].to_vec(), Compression::None),
    ];
    let segment = encode_segment(&specs, 1)?;
    let bytes = segment.kfs.as_slice();
    let within = |value: &[u8]| bytes.as_ptr_range().contains(&value.as_ptr());

    let mut decoder = SegmentDecoder::from_reader(bytes, DecodeLimits::default())?;
    let mut in_place = 0;
    while decoder
        .next_batch_each(|record| {
            in_place += usize::from(record.value.is_some_and(within));
            true
        })?
        .is_some()
    {}
    assert_eq!(in_place, 3, "every value read where it lies");

    // Buffers of 100 bytes hold no whole batch: each is gathered into a frame.
    let mut gathered = 0;
    let mut decoder = SegmentDecoder::from_reader(
        Chunked {
            data: bytes,
            chunk: 100,
        },
        DecodeLimits::default(),
    )?;
    while decoder
        .next_batch_each(|record| {
            gathered += usize::from(record.value.is_some_and(|v| !within(v)));
            true
        })?
        .is_some()
    {}
    assert_eq!(gathered, 3, "every value read from a gathered frame");
    assert_eq!(stream_decode(bytes, 100)?, records);
    assert_eq!(stream_decode(bytes, usize::MAX)?, records);
    Ok(())
}

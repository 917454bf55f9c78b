//! Decoding throughput per codec, against the decompression library alone and against
//! the `kafka-protocol` crate's decoder.
//!
//! Throughput is reported in bytes of record payload (keys, values and header bytes),
//! on one core. Run with `cargo bench -p kfs-segment --bench decode`.
//!
//! - `decode/<codec>`: the whole segment through [`SegmentDecoder::from_slice`]: both
//!   CRCs, decompression, record parsing, all checks.
//! - `decompress_only/<codec>`: the same compressed record blobs through the codec
//!   library alone, the floor for the compressed cases (target: decode within 1.5×).
//! - `kafka_protocol/none`: the same uncompressed body through
//!   `kafka_protocol::records::RecordBatchDecoder::decode_all`.

use std::hint::black_box;
use std::io::Read;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kfs_segment::{
    BatchSpec, Compression, DecodeLimits, OwnedRecord, SEGMENT_FOOTER_LEN, SEGMENT_HEADER_LEN,
    SegmentDecoder, SnappyFraming, encode_segment,
};

const RECORDS_PER_BATCH: usize = 500;
const BATCHES: usize = 64;

/// SplitMix64, so the data is the same on every run.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// JSON-like values of about 1 KiB that compress about as well as real events.
fn records(count: usize, first_offset: i64, state: &mut u64) -> Vec<OwnedRecord> {
    (0..count)
        .map(|i| {
            let mut value = String::with_capacity(1100);
            value.push_str(&format!(
                "{{\"order_id\":{},\"items\":[",
                first_offset + i as i64
            ));
            while value.len() < 900 + (next(state) % 200) as usize {
                value.push_str(&format!(
                    "{{\"sku\":\"SKU-{:06}\",\"qty\":{},\"price\":{}.{:02}}},",
                    next(state) % 1_000_000,
                    next(state) % 9,
                    next(state) % 500,
                    next(state) % 100
                ));
            }
            value.push_str("]}");
            OwnedRecord {
                offset: first_offset + i as i64,
                timestamp_ms: 1_700_000_000_000 + i as i64,
                key: Some(format!("customer-{}", next(state) % 100_000).into_bytes()),
                value: Some(value.into_bytes()),
                headers: vec![(
                    "trace-id".into(),
                    Some(format!("{:032x}", next(state)).into_bytes()),
                )],
            }
        })
        .collect()
}

struct Fixture {
    kfs: Vec<u8>,
    payload_bytes: u64,
}

fn fixture(compression: Compression) -> Fixture {
    let mut state = 7;
    let mut payload_bytes = 0u64;
    let batches: Vec<BatchSpec> = (0..BATCHES)
        .map(|b| {
            let recs = records(
                RECORDS_PER_BATCH,
                (b * RECORDS_PER_BATCH) as i64,
                &mut state,
            );
            payload_bytes += recs
                .iter()
                .map(|r| {
                    let headers: usize = r
                        .headers
                        .iter()
                        .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len))
                        .sum();
                    (r.key.as_ref().map_or(0, Vec::len)
                        + r.value.as_ref().map_or(0, Vec::len)
                        + headers) as u64
                })
                .sum::<u64>();
            let mut spec = BatchSpec::new(recs, compression);
            spec.snappy_framing = SnappyFraming::Xerial;
            spec
        })
        .collect();
    match encode_segment(&batches, 1_700_000_000_000) {
        Ok(segment) => Fixture {
            kfs: segment.kfs,
            payload_bytes,
        },
        Err(e) => panic!("fixture: {e}"),
    }
}

/// The compressed records sections of every batch of a segment.
fn record_blobs(kfs: &[u8]) -> Vec<&[u8]> {
    let body = &kfs[SEGMENT_HEADER_LEN..kfs.len() - SEGMENT_FOOTER_LEN];
    let mut blobs = Vec::new();
    let mut pos = 0;
    while pos < body.len() {
        let len = i32::from_be_bytes([body[pos + 8], body[pos + 9], body[pos + 10], body[pos + 11]])
            as usize;
        blobs.push(&body[pos + 61..pos + 12 + len]);
        pos += 12 + len;
    }
    blobs
}

fn decode_whole(kfs: &[u8]) -> usize {
    let mut total = 0;
    let decoded =
        SegmentDecoder::from_slice(kfs, DecodeLimits::default()).and_then(|mut decoder| {
            decoder.for_each_batch(|batch| {
                total += batch
                    .records
                    .iter()
                    .map(|r| r.value.map_or(0, <[u8]>::len))
                    .sum::<usize>();
                Ok::<(), kfs_segment::DecodeError>(())
            })
        });
    assert!(decoded.is_ok(), "{decoded:?}");
    total
}

fn library_decompress(compression: Compression, blob: &[u8], out: &mut Vec<u8>) {
    out.clear();
    let ok = match compression {
        Compression::None => true,
        Compression::Gzip => flate2::read::GzDecoder::new(blob).read_to_end(out).is_ok(),
        Compression::Lz4 => lz4_flex::frame::FrameDecoder::new(blob)
            .read_to_end(out)
            .is_ok(),
        Compression::Zstd => zstd::stream::read::Decoder::with_buffer(blob)
            .and_then(|mut d| d.read_to_end(out))
            .is_ok(),
        Compression::Snappy => {
            // xerial: 16-byte header, then [u32 len][raw block] chunks.
            let mut rest = &blob[16..];
            let mut decoder = snap::raw::Decoder::new();
            while rest.len() >= 4 {
                let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
                let block = &rest[4..4 + len];
                let start = out.len();
                let n = snap::raw::decompress_len(block).unwrap_or(0);
                out.resize(start + n, 0);
                let _ = decoder.decompress(block, &mut out[start..]);
                rest = &rest[4 + len..];
            }
            true
        }
    };
    assert!(ok);
}

fn benches(c: &mut Criterion) {
    let mut decode = c.benchmark_group("decode");
    decode.sample_size(20);
    let fixtures: Vec<(Compression, Fixture)> =
        Compression::ALL.iter().map(|&c| (c, fixture(c))).collect();
    for (compression, fx) in &fixtures {
        decode.throughput(Throughput::Bytes(fx.payload_bytes));
        decode.bench_function(compression.name(), |b| {
            b.iter(|| black_box(decode_whole(&fx.kfs)))
        });
    }
    decode.finish();

    let mut floor = c.benchmark_group("decompress_only");
    floor.sample_size(20);
    for (compression, fx) in fixtures.iter().filter(|(c, _)| *c != Compression::None) {
        let blobs = record_blobs(&fx.kfs);
        floor.throughput(Throughput::Bytes(fx.payload_bytes));
        floor.bench_function(compression.name(), |b| {
            let mut out = Vec::new();
            b.iter(|| {
                for blob in &blobs {
                    library_decompress(*compression, blob, &mut out);
                }
                black_box(out.len())
            })
        });
    }
    floor.finish();

    let mut peer = c.benchmark_group("kafka_protocol");
    peer.sample_size(20);
    if let Some((_, fx)) = fixtures.iter().find(|(c, _)| *c == Compression::None) {
        let body = bytes::Bytes::copy_from_slice(
            &fx.kfs[SEGMENT_HEADER_LEN..fx.kfs.len() - SEGMENT_FOOTER_LEN],
        );
        peer.throughput(Throughput::Bytes(fx.payload_bytes));
        peer.bench_function("none", |b| {
            b.iter(|| {
                let mut buf = body.clone();
                let sets = kafka_protocol::records::RecordBatchDecoder::decode_all(&mut buf);
                black_box(sets.map(|s| s.len()).unwrap_or(0))
            })
        });
    }
    peer.finish();
}

mod harness {
    //! criterion's generated entry points.
    #![allow(missing_docs)]
    use super::{benches, criterion_group};
    criterion_group!(codec, benches);
}

criterion_main!(harness::codec);

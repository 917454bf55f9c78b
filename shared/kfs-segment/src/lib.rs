//! Decoder, verifier and encoder for KafScale `.kfs` segments and `.index` files.
//!
//! A segment is a 32-byte header, Kafka RecordBatch v2 frames back to back, and a
//! 16-byte footer (see `kafscale-format.md` in the team's reference material). This
//! crate does no I/O of its own (it reads from a slice or a caller's
//! [`std::io::Read`]) and no async, so the same code serves the Lambda functions, the
//! CLI, tests and benchmarks.
//!
//! What it verifies, beyond what the upstream readers do (they check neither CRC and
//! reject compressed batches):
//! - header and footer magic, version, flags;
//! - the body CRC-32C in the footer and every batch's CRC-32C;
//! - batch magic 2, codec ids, each batch's record count against the records decoded,
//!   record lengths against their fields (header keys are kept as bytes: Kafka does
//!   not check them);
//! - offsets strictly increasing within and across batches, the first batch at the
//!   header's base offset, the header's message count, the footer's last offset;
//! - index entries land on batch starts with matching offsets.
//!
//! Semantics: LogAppendTime batches give every record the batch's maxTimestamp;
//! control batches are counted, not returned as data; null and empty keys, values and
//! header values stay distinct.
//!
//! Safety against hostile input: no length read from the input is used to allocate
//! before it is checked against the bytes present; decompressed output is capped by
//! [`DecodeLimits`]; the crate forbids `unsafe` and is fuzzed (`fuzz/`).
//!
//! # Why not the `kafka-protocol` crate's record decoder
//!
//! `kafka_protocol::records::RecordBatchDecoder` was weighed and not used:
//! - it materialises an owned `Record` per record (copying every batch-level field
//!   into each) and stores headers in an `IndexMap`, which drops repeated header keys,
//!   which Kafka allows: that would lose data;
//! - it decodes a whole buffer of batches into one `Vec`, with no batch-by-batch
//!   streaming API and no borrowing of uncompressed payloads;
//! - it caps no decompressed size (a compression bomb allocates), reports errors
//!   without byte positions, and accepts only one snappy framing per build;
//! - on the benchmark in `benches/decode.rs` (`kafka_protocol` group), it is slower
//!   on the same uncompressed batches.
//!
//! # Example
//!
//! ```
//! use kfs_segment::{BatchSpec, Compression, DecodeLimits, OwnedRecord, SegmentDecoder, encode_segment};
//!
//! let record = OwnedRecord { offset: 0, timestamp_ms: 1_700_000_000_000, key: Some(b"k1".to_vec()),
//!     value: Some(b"v1".to_vec()), headers: vec![("h".into(), Some(b"x".to_vec()))] };
//! let segment = encode_segment(&[BatchSpec::new(vec![record], Compression::Zstd)], 1_700_000_000_000)?;
//! let mut decoder = SegmentDecoder::from_slice(&segment.kfs, DecodeLimits::default())?;
//! while let Some(batch) = decoder.next_batch()? {
//!     for record in &batch.records {
//!         assert_eq!(record.value, Some(&b"v1"[..]));
//!     }
//! }
//! assert_eq!(decoder.summary().map(|s| s.records), Some(1));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod batch;
mod compression;
mod encode;
mod envelope;
mod error;
mod frames;
mod index;
mod limits;
mod segment;
mod wire;

pub use batch::{
    BATCH_HEADER_LEN, Batch, BatchHeader, MIN_BATCH_LENGTH, Record, RecordHeader, TimestampType,
};
pub use compression::{Compression, SnappyFraming};
pub use encode::{
    BatchSpec, EncodedSegment, OwnedRecord, encode_batch, encode_segment, segment_from_frames,
};
pub use envelope::{
    FOOTER_MAGIC, SEGMENT_FOOTER_LEN, SEGMENT_HEADER_LEN, SEGMENT_MAGIC, SegmentFooter,
    SegmentHeader,
};
pub use error::{DecodeError, DecodeErrorKind, EncodeError};
pub use frames::{Frame, FrameSource, ReadFrames, SliceFrames};
pub use index::{DEFAULT_INDEX_INTERVAL, INDEX_MAGIC, IndexEntry, SegmentIndex};
pub use limits::DecodeLimits;
pub use segment::{SegmentDecoder, SegmentSummary};

/// Decodes and verifies a whole in-memory segment, returning every data record as an
/// owned copy with the summary. Convenient for tests and small segments; use
/// [`SegmentDecoder`] to stream.
pub fn decode_all(
    data: &[u8],
    limits: DecodeLimits,
) -> Result<(Vec<OwnedRecord>, SegmentSummary), DecodeError> {
    let mut decoder = SegmentDecoder::from_slice(data, limits)?;
    let mut records = Vec::new();
    let summary = decoder.for_each_batch(|batch| {
        records.extend(batch.records.iter().map(OwnedRecord::from_record));
        Ok::<(), DecodeError>(())
    })?;
    Ok((records, summary))
}

/// Decodes a segment and checks its index against it: every index entry must land on
/// a batch start with the same base offset.
pub fn check_index(
    kfs: &[u8],
    index: &[u8],
    limits: DecodeLimits,
) -> Result<SegmentIndex, DecodeError> {
    let index = SegmentIndex::decode(index)?;
    let mut decoder = SegmentDecoder::from_slice(kfs, limits)?;
    let mut starts = Vec::new();
    decoder.for_each_batch(|batch| {
        starts.push((batch.header.base_offset, batch.position));
        Ok::<(), DecodeError>(())
    })?;
    index.check_against(&starts)?;
    Ok(index)
}

//! Fuzzes both segment decoders: no input may panic, exceed the memory limits, or
//! make the slice and streaming decoders disagree on whether it is valid.
#![no_main]

use kfs_segment::{DecodeError, DecodeLimits, SegmentDecoder, decode_all};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let slice = decode_all(data, DecodeLimits::default());
    let stream = SegmentDecoder::from_reader(data, DecodeLimits::default())
        .and_then(|mut decoder| decoder.for_each_batch(|_| Ok::<(), DecodeError>(())));
    assert_eq!(
        slice.is_ok(),
        stream.is_ok(),
        "slice: {slice:?}, stream: {stream:?}"
    );
    if let (Ok((records, summary)), Ok(streamed)) = (&slice, &stream) {
        assert_eq!(records.len() as u64, summary.records);
        assert_eq!(summary, streamed);
    }
});

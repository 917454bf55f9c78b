//! Fuzzes the index decoder and its check against a fixed valid segment.
#![no_main]

use kfs_segment::{DecodeLimits, SegmentIndex, check_index};
use libfuzzer_sys::fuzz_target;

const SEGMENT: &[u8] = include_bytes!("../../tests/fixtures/golden/worked-example.kfs");

fuzz_target!(|data: &[u8]| {
    if let Ok(index) = SegmentIndex::decode(data) {
        assert_eq!(SegmentIndex::decode(&index.encode()).ok(), Some(index));
    }
    let _ = check_index(SEGMENT, data, DecodeLimits::default());
});

//! Fuzzes a mirror's key index as the committer reads it from the Puffin file beside
//! the table (`kfs_plan::key_index`): any bytes as a Puffin file (its footer, the
//! blob's place and properties) and as the index blob itself (its rows' source
//! positions too), and any text as a `__source_position` cell. Every input reads or is
//! refused; never a panic, never an allocation its bytes do not justify; an index that
//! reads encodes to bytes that read back to it, and a position to text that reads back
//! to it.
#![no_main]

use kfs_plan::changes::SourcePosition;
use kfs_plan::key_index::{KeyIndex, find_index_blob};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some(blob)) = find_index_blob(data, 1) {
        assert!(blob.offset.saturating_add(blob.length) <= data.len(), "{blob:?}");
    }
    if let Ok(index) = KeyIndex::decode(data) {
        let encoded = index.encode();
        let again = KeyIndex::decode(&encoded).map(|again| again.encode());
        assert_eq!(again.as_deref(), Ok(&encoded[..]));
    }
    if let Ok(position) = std::str::from_utf8(data).map(SourcePosition::parse)
        && let Ok(position) = position
    {
        assert_eq!(SourcePosition::parse(&position.text()), Ok(position));
    }
});

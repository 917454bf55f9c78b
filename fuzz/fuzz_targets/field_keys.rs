//! Fuzzes the record key a tombstone of a mirror keyed by value fields names its key
//! by (`kfs_plan::field_key::from_record_key`): the first byte picks how many key
//! fields (one to three), the rest is the key. Every input names a key or none;
//! never a panic, never an allocation its bytes do not justify.
#![no_main]

use libfuzzer_sys::fuzz_target;

const FIELDS: [&str; 3] = ["id", "region", "at"];

fuzz_target!(|data: &[u8]| {
    let Some((&first, key)) = data.split_first() else {
        return;
    };
    let count = usize::from(first % 3) + 1;
    let fields: Vec<String> = FIELDS[..count].iter().map(|f| (*f).to_owned()).collect();
    if let Some(found) = kfs_plan::field_key::from_record_key(key, &fields) {
        // A key is its fields' texts with their lengths: never more than the record key
        // and four bytes a field, plus what an integer's decimal text adds.
        assert!(found.len() <= key.len() + 4 * count + 24 * count, "{found:?}");
    }
});

//! Fuzzes the record key a tombstone of a mirror keyed by value fields names its key
//! by (`kfs_plan::field_key::from_record_key`): the first byte picks how many key
//! fields (one to three) and what their columns hold, the rest is the key. Every input
//! names a key or none, each part a text its column could hold; never a panic, never
//! an allocation its bytes do not justify.
#![no_main]

use kfs_plan::field_key::FieldKind;
use libfuzzer_sys::fuzz_target;

const FIELDS: [&str; 3] = ["id", "region", "at"];

const KINDS: [FieldKind; 5] = [
    FieldKind::Integer,
    FieldKind::Boolean,
    FieldKind::Text,
    FieldKind::Bytes,
    FieldKind::Unkeyed,
];

fuzz_target!(|data: &[u8]| {
    let Some((&first, key)) = data.split_first() else {
        return;
    };
    let count = usize::from(first % 3) + 1;
    let kind = KINDS[usize::from(first / 3) % KINDS.len()];
    let fields: Vec<String> = FIELDS[..count].iter().map(|f| (*f).to_owned()).collect();
    if let Some(found) = kfs_plan::field_key::from_record_key(key, &fields, &[kind; 3]) {
        assert_ne!(kind, FieldKind::Unkeyed, "{found:?}");
        // Each part, after its four bytes of length, is a text its column could hold.
        let mut rest = &found[..];
        while let Some((length, tail)) = rest.split_first_chunk::<4>() {
            let length = u32::from_le_bytes(*length) as usize;
            assert!(kind.holds(&tail[..length]), "{found:?}");
            rest = &tail[length..];
        }
        // A key is its fields' texts with their lengths: never more than the record key
        // and four bytes a field, plus what an integer's decimal text adds.
        assert!(found.len() <= key.len() + 4 * count + 24 * count, "{found:?}");
    }
});

//! Fuzzes reading a `deletion-vector-v1` blob as another engine may have written it
//! (`kfs_parquet::read_deletion_vector`): the input is the blob, its frame's length and
//! CRC made right half the time so the bitmap itself is reached. Every input is read
//! or refused with the byte; never a panic, never an allocation its bytes do not
//! justify (at most a million positions, as a data file of that many rows).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let blob = match first % 2 {
        0 => rest.to_vec(),
        _ => {
            let mut vector = vec![0xD1, 0xD3, 0x39, 0x64];
            vector.extend_from_slice(rest);
            let mut framed = (vector.len() as u32).to_be_bytes().to_vec();
            framed.extend_from_slice(&vector);
            framed.extend_from_slice(&crc32fast::hash(&vector).to_be_bytes());
            framed
        }
    };
    if let Ok(positions) = kfs_parquet::read_deletion_vector("f", &blob, 1_000_000) {
        assert!(positions.windows(2).all(|w| w[0] < w[1]));
        assert!(positions.len() <= 1_000_000);
    }
});

//! The committed corpus of malformed segments and indexes (`tests/corpus/` at the
//! workspace root): every file must give an error, never a panic, from both decoders,
//! and decoding a small file must stay small in memory, measured by a counting
//! allocator.

// A global allocator is the one way to measure heap use from inside the process.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use kfs_segment::{DecodeError, DecodeLimits, SegmentDecoder, check_index, decode_all};

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: delegates to the system allocator and only adds bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = CURRENT.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
        PEAK.fetch_max(now, Ordering::SeqCst);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        CURRENT.fetch_sub(layout.size(), Ordering::SeqCst);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/corpus")
}

fn files(dir: &Path, extension: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == extension));
    files.sort();
    files
}

fn stream_decode(data: &[u8]) -> Result<u64, DecodeError> {
    let mut decoder = SegmentDecoder::from_reader(data, DecodeLimits::default())?;
    let summary = decoder.for_each_batch(|_| Ok::<(), DecodeError>(()))?;
    Ok(summary.records)
}

/// Decodes record by record (`next_batch_each`): the same errors, no record list.
fn each_decode(data: &[u8]) -> Result<u64, DecodeError> {
    let mut decoder = SegmentDecoder::from_reader(data, DecodeLimits::default())?;
    let mut records = 0u64;
    while decoder
        .next_batch_each(|_| {
            records += 1;
            true
        })?
        .is_some()
    {}
    Ok(records)
}

/// Runs `f` and returns its result with the peak heap growth while it ran.
fn peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = CURRENT.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    let out = f();
    (out, PEAK.load(Ordering::SeqCst).saturating_sub(base))
}

#[test]
fn every_malformed_segment_is_an_error_with_a_position_and_small_memory() {
    let files = files(&corpus_dir(), "kfs");
    assert!(
        files.len() >= 30,
        "corpus has only {} segments",
        files.len()
    );
    for path in files {
        let data = std::fs::read(&path).unwrap_or_default();
        let name = path.display();
        let (slice, slice_peak) =
            peak_during(|| decode_all(&data, DecodeLimits::default()).map(|(r, _)| r.len()));
        let (stream, stream_peak) = peak_during(|| stream_decode(&data));
        let each = each_decode(&data);
        assert!(each.is_err(), "{name}: record by record, got {each:?}");
        let err = match (slice, stream) {
            (Err(slice), Err(_)) => slice,
            (slice, stream) => {
                panic!("{name}: expected errors, got slice {slice:?}, stream {stream:?}")
            }
        };
        let message = err.to_string();
        assert!(message.starts_with("at byte "), "{name}: {message}");
        assert!(!message.contains('\n'), "{name}: {message}");
        // A 4 KB input never costs more than a few MB (at most the 8 MiB zstd window
        // a frame may declare plus 1 MiB of output); larger inputs, such as
        // compression bombs, are bounded by the decompression cap and that window.
        let budget = if data.len() <= 4 * 1024 {
            12 << 20
        } else {
            2 * DecodeLimits::default().decompressed_cap(data.len() as u64) as usize + (12 << 20)
        };
        assert!(
            slice_peak <= budget,
            "{name}: slice decoder peaked at {slice_peak} bytes"
        );
        assert!(
            stream_peak <= budget,
            "{name}: stream decoder peaked at {stream_peak} bytes"
        );
        println!("{name}: {message} (peak {slice_peak}/{stream_peak} bytes)");
    }
}

#[test]
fn every_malformed_index_is_an_error_next_to_a_good_segment() {
    let dir = corpus_dir().join("index");
    let indexes = files(&dir, "index");
    assert!(
        indexes.len() >= 5,
        "index corpus has only {} files",
        indexes.len()
    );
    for path in indexes {
        let index = std::fs::read(&path).unwrap_or_default();
        let kfs = std::fs::read(path.with_extension("kfs")).unwrap_or_default();
        let name = path.display();
        assert!(
            decode_all(&kfs, DecodeLimits::default()).is_ok(),
            "{name}: its segment should be valid"
        );
        let result = check_index(&kfs, &index, DecodeLimits::default());
        match result {
            Err(err) => println!("{name}: {err}"),
            Ok(index) => panic!("{name}: expected an error, got {index:?}"),
        }
    }
}

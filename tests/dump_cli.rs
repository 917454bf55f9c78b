//! End to end: `kfs-iceberg dump` against the golden vector, against segments written
//! by the independent Python encoder (`tests/independent/`), and against every
//! malformed file of the corpus (`tests/corpus/`).

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;
use support::{files_under, independent_bucket, kfs, output_of, repo, tempdir};

fn kfs_iceberg(args: &[&std::ffi::OsStr]) -> Output {
    output_of(kfs().args(args))
}

fn dump_json(path: &Path) -> Vec<Value> {
    let output = kfs_iceberg(&["dump".as_ref(), "--json".as_ref(), path.as_os_str()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{}: {stderr}", path.display());
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{}: bad JSON line {line:?}: {e}", path.display()))
        })
        .collect()
}

#[test]
fn dump_json_prints_the_worked_example() {
    let records = dump_json(&repo().join("tests/fixtures/golden/worked-example.kfs"));
    let expected = serde_json::json!({
        "offset": 0, "timestamp_ms": 1_700_000_000_000i64, "key": "azE=", "value": "djE=",
        "headers": [{"key": "h", "value": "eA=="}]
    });
    assert_eq!(records, vec![expected]);
}

#[test]
fn dump_text_verifies_the_index_and_shows_the_records() {
    let golden = repo().join("tests/fixtures/golden");
    let output = kfs_iceberg(&[
        "dump".as_ref(),
        "--index".as_ref(),
        golden.join("worked-example.index").as_os_str(),
        golden.join("worked-example.kfs").as_os_str(),
    ]);
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("key \"k1\" value \"v1\" header \"h\"=\"x\""),
        "{text}"
    );
    assert!(text.contains("verified: 1 batches"), "{text}");
    assert!(text.contains("index: 1 entries"), "{text}");
}

#[test]
fn dump_json_reproduces_every_record_written_by_an_independent_encoder() {
    let mut checked_segments = 0;
    let mut checked_records = 0;
    for seed in [1, 2, 3] {
        let bucket = tempdir();
        independent_bucket(seed, bucket.path());
        let files = files_under(bucket.path());
        for expected_path in files
            .iter()
            .filter(|p| p.to_string_lossy().ends_with(".expected.jsonl"))
        {
            let name = expected_path.to_string_lossy();
            let kfs = PathBuf::from(name.replace(".expected.jsonl", ".kfs"));
            let index = kfs.with_extension("index");
            let expected: Vec<Value> = std::fs::read_to_string(expected_path)
                .unwrap_or_default()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap_or(Value::Null))
                .collect();
            let actual = dump_json(&kfs);
            assert_eq!(actual.len(), expected.len(), "{}", kfs.display());
            for (a, e) in actual.iter().zip(&expected) {
                assert_eq!(a, e, "{}", kfs.display());
            }
            let checked = kfs_iceberg(&[
                "dump".as_ref(),
                "--index".as_ref(),
                index.as_os_str(),
                kfs.as_os_str(),
            ]);
            assert!(
                checked.status.success(),
                "{}: {}",
                index.display(),
                String::from_utf8_lossy(&checked.stderr)
            );
            checked_segments += 1;
            checked_records += actual.len();
        }
    }
    assert!(
        checked_segments >= 40,
        "only {checked_segments} segments checked"
    );
    println!(
        "{checked_segments} independent segments, {checked_records} records reproduced exactly"
    );
}

#[test]
fn every_malformed_file_exits_non_zero_with_one_clear_line() {
    let corpus = repo().join("tests/corpus");
    let manifest: Value = std::fs::read_to_string(corpus.join("manifest.json"))
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or(Value::Null);
    let Some(entries) = manifest.as_object() else {
        panic!("tests/corpus/manifest.json is missing or not an object")
    };
    let mut checked = 0;
    for name in entries.keys() {
        let path = corpus.join(name);
        let output = if name.ends_with(".index") {
            let kfs = path.with_extension("kfs");
            kfs_iceberg(&[
                "dump".as_ref(),
                "--index".as_ref(),
                path.as_os_str(),
                kfs.as_os_str(),
            ])
        } else {
            kfs_iceberg(&["dump".as_ref(), path.as_os_str()])
        };
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{name}: exited 0");
        assert_eq!(output.status.code(), Some(1), "{name}: {stderr}");
        assert!(
            output.stdout.is_empty(),
            "{name}: printed output for a malformed segment"
        );
        assert_eq!(stderr.lines().count(), 1, "{name}: {stderr}");
        assert!(
            stderr.contains(&*path.to_string_lossy()),
            "{name}: {stderr}"
        );
        assert!(stderr.contains("at byte "), "{name}: {stderr}");
        assert!(!stderr.contains("panicked"), "{name}: {stderr}");
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} corpus files");
}

#[test]
fn a_missing_file_is_one_line_too() {
    let output = kfs_iceberg(&["dump".as_ref(), "/nonexistent/segment.kfs".as_ref()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("/nonexistent/segment.kfs"), "{stderr}");
}

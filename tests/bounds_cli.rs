//! Column bounds end to end (issue 36, finding 1): JSON strings longer than Parquet's
//! 64-byte statistics, non-ASCII and `U+FFFF`/`U+10FFFF` runs among them, written by the
//! independent encoder; after `run` (coalesced), `run --no-coalesce` and `compact`, every
//! data file's Iceberg bounds hold its rows, and pyiceberg's and DuckDB's filtered scans
//! return exactly what a full scan's filter keeps (`tests/python/check_bounds.py`). The
//! 1,100,000-record case of the finding is the same script at `--records 1100000`
//! (docs, "Column bounds").

use crate::support;

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use support::{kfs_ok, repo, succeed, tempdir};

fn bounds_script(args: &[&str], paths: &[(&str, &Path)]) -> Value {
    let mut command = Command::new("python3");
    command
        .arg(repo().join("tests/python/check_bounds.py"))
        .args(args);
    for (flag, path) in paths {
        command.arg(flag).arg(path);
    }
    let out = succeed(&mut command, "check_bounds.py");
    let facts: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("check_bounds.py output: {e}"));
    println!("check_bounds {args:?}: {facts}");
    facts
}

fn check(warehouse: &Path) -> Value {
    let facts = bounds_script(&["check"], &[("--warehouse", warehouse)]);
    assert_eq!(facts["rows"], 7000, "{facts}");
    assert!(facts["predicates"].as_u64() > Some(30), "{facts}");
    assert_eq!(facts["duckdb"], true, "{facts}");
    facts
}

/// `kfs-iceberg run --value-format json` from `source` into `warehouse`, with `extra`.
fn run_json(source: &str, warehouse: &Path, extra: &[&str]) {
    let wh = warehouse.to_string_lossy();
    let mut args = vec!["run", "--quiet", "--value-format", "json"];
    args.extend_from_slice(extra);
    args.extend(["--source", source, "--warehouse", &wh]);
    kfs_ok(&args);
}

#[test]
fn long_and_non_ascii_strings_keep_every_file_bound_valid_through_coalescing_and_compaction() {
    let dir = tempdir();
    let source = dir.path().join("source");
    bounds_script(
        &["write", "--records", "7000", "--segments", "2"],
        &[("--out", &source)],
    );
    let src = source.to_string_lossy().into_owned();

    // Coalesced: both segments' files merged before the commit.
    let coalesced = dir.path().join("coalesced");
    run_json(&src, &coalesced, &[]);
    check(&coalesced);

    // One file per segment, then compacted into one.
    let compacted = dir.path().join("compacted");
    let wh = compacted.to_string_lossy().into_owned();
    run_json(&src, &compacted, &["--no-coalesce"]);
    let before = check(&compacted);
    assert_eq!(before["data_files"], 2, "{before}");
    kfs_ok(&[
        "compact",
        "--warehouse",
        &wh,
        "--table",
        "kafscale.bounds",
        "--target-file-size",
        "67108864",
    ]);
    let after = check(&compacted);
    assert_eq!(after["data_files"], 1, "{after}");
}

//! Helpers shared by the end-to-end tests: paths, processes and files.

#![allow(dead_code)] // each test file uses a different subset

use std::path::{Path, PathBuf};

#[allow(unused_imports)] // not every test file lists files
pub use kfs_testkit::files_under;
use serde_json::Value;
use std::process::{Command, Output};

/// The workspace root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A command running the built `kfs-iceberg` binary.
pub fn kfs() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kfs-iceberg"))
}

/// Runs a command and returns its output, panicking if it cannot start.
pub fn output_of(command: &mut Command) -> Output {
    command
        .output()
        .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"))
}

/// Runs a command that must succeed.
pub fn succeed(command: &mut Command, what: &str) -> Output {
    let output = output_of(command);
    assert!(
        output.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&output.stderr),
        String::from_utf8_lossy(&output.stdout)
    );
    output
}

/// A fresh temporary directory.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"))
}

/// Writes the independent Python encoder's bucket for `seed` into `out`.
pub fn independent_bucket(seed: u64, out: &Path) {
    succeed(
        Command::new("python3")
            .arg(repo().join("tests/independent/make_segments.py"))
            .arg("--out")
            .arg(out)
            .args(["--seed", &seed.to_string()]),
        "make_segments.py (scripts/test.sh makes the environment: source scripts/python-env.sh)",
    );
}

/// Writes `.expected.jsonl` beside every segment under `root`, with `dump --json`
/// (itself checked against the independent encoder in dump_cli.rs).
pub fn write_expected(root: &Path) {
    for file in files_under(root)
        .into_iter()
        .filter(|f| f.extension().is_some_and(|e| e == "kfs"))
    {
        let dumped = succeed(kfs().arg("dump").arg("--json").arg(&file), "dump --json");
        let target = PathBuf::from(file.to_string_lossy().replace(".kfs", ".expected.jsonl"));
        std::fs::write(&target, &dumped.stdout)
            .unwrap_or_else(|e| panic!("{}: {e}", target.display()));
    }
}

/// `kfs-iceberg ARGS`, which must succeed; its standard output.
pub fn kfs_ok(args: &[&str]) -> String {
    String::from_utf8_lossy(&succeed(kfs().args(args), &args.join(" ")).stdout).into_owned()
}

/// The independent encoder's bucket for `seed`, with a topic `tiny` of `tiny` 1-3
/// record segments over 2 partitions.
pub fn tiny_bucket(out: &Path, seed: u64, tiny: u32) {
    succeed(
        Command::new("python3")
            .arg(repo().join("tests/independent/make_segments.py"))
            .arg("--out")
            .arg(out)
            .args([
                "--seed",
                &seed.to_string(),
                "--tiny-segments",
                &tiny.to_string(),
            ]),
        "make_segments.py",
    );
}

/// `kfs-iceberg run` committing one file per segment.
pub fn run_uncoalesced(source: &str, warehouse: &str) {
    kfs_ok(&[
        "run",
        "--quiet",
        "--no-coalesce",
        "--source",
        source,
        "--warehouse",
        warehouse,
    ]);
}

/// `tests/python/verify_tables.py` on `warehouse` against the segments under
/// `expected`, with more arguments (`--foreign`, `--only`); its JSON facts.
pub fn verify_tables(warehouse: &Path, expected: &Path, args: &[&str]) -> Value {
    let out = succeed(
        Command::new("python3")
            .arg(repo().join("tests/python/verify_tables.py"))
            .arg("--warehouse")
            .arg(warehouse)
            .arg("--expected")
            .arg(expected)
            .args(args),
        "verify_tables.py",
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("verify_tables.py: {e}"))
}

/// Copies the first `count` segments of every partition under `from` (with their
/// index and expected records, when written) into `to`.
pub fn copy_first_segments(from: &Path, to: &Path, count: usize) {
    let mut segments: Vec<_> = files_under(from)
        .into_iter()
        .filter(|f| f.extension().is_some_and(|e| e == "kfs"))
        .collect();
    segments.sort();
    let mut per_partition = std::collections::BTreeMap::<_, usize>::new();
    for segment in segments {
        let partition = segment.parent().map(Path::to_path_buf);
        let taken = per_partition.entry(partition).or_default();
        if *taken >= count {
            continue;
        }
        *taken += 1;
        let stem = segment.to_string_lossy().replace(".kfs", "");
        for suffix in [".kfs", ".index", ".expected.jsonl"] {
            let file = Path::new(&format!("{stem}{suffix}")).to_path_buf();
            if !file.exists() {
                continue;
            }
            let relative = file.strip_prefix(from).unwrap_or_else(|e| panic!("{e}"));
            let target = to.join(relative);
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{e}"));
            }
            std::fs::copy(&file, &target).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        }
    }
}

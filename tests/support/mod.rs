//! Helpers shared by the end-to-end tests: paths, processes and files.

#![allow(dead_code)] // each test file uses a different subset

use std::path::{Path, PathBuf};

#[allow(unused_imports)] // not every test file lists files
pub use kfs_testkit::files_under;
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
        "make_segments.py (pip install -r tests/requirements.txt)",
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

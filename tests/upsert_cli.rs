//! `--table-mode upsert` end to end on the embedded default: a keyed topic (`gen
//! --keys`: updates, tombstones, keys deleted and written again, records without a
//! key) is mirrored over two runs, each commit a row delta; the same segments are
//! also run into an append table (the change log), and pyiceberg and DuckDB read the
//! mirror as exactly the fold of that log, folded independently in Python
//! (`tests/python/check_mirror.py`). A mode the build cannot commit yet, or given to a
//! table whose values are not raw, is refused before anything is written.

use crate::support;

use std::path::Path;

use support::{copy_first_segments, kfs, output_of, repo, succeed, tempdir};

/// Runs the segments under `source` into `warehouse`, in upsert mode or not.
fn run(source: &Path, warehouse: &Path, upsert: bool) {
    let mut command = kfs();
    command.args(["run", "--quiet", "--source"]).arg(source);
    command.arg("--warehouse").arg(warehouse);
    if upsert {
        command.args(["--table-mode", "upsert"]);
    }
    succeed(&mut command, "run");
}

/// Checks that the mirror in `mirror` reads as the fold of the log in `log`.
fn check_mirror(log: &Path, mirror: &Path) -> String {
    let out = succeed(
        std::process::Command::new("python3")
            .arg(repo().join("tests/python/check_mirror.py"))
            .arg("--log-warehouse")
            .arg(log)
            .arg("--mirror-warehouse")
            .arg(mirror)
            .args(["--table", "kafscale.orders"]),
        "check_mirror.py",
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{text}");
    text
}

#[test]
fn a_keyed_topic_mirrored_over_two_runs_reads_as_the_fold_of_its_log() {
    let dir = tempdir();
    let all = dir.path().join("all");
    // 2 partitions × 4 segments × 300 records over 60 keys.
    succeed(
        kfs().arg("gen").arg("--out").arg(&all).args([
            "--topics",
            "1",
            "--segments",
            "4",
            "--records",
            "300",
            "--keys",
            "60",
        ]),
        "gen --keys",
    );
    let source = dir.path().join("source");
    let (log, mirror) = (dir.path().join("log"), dir.path().join("mirror"));
    for taken in [2, 4] {
        copy_first_segments(&all, &source, taken);
        run(&source, &log, false);
        run(&source, &mirror, true);
        let text = check_mirror(&log, &mirror);
        assert!(text.contains("pyiceberg: reads the fold exactly"), "{text}");
        assert!(text.contains("DuckDB: reads the fold exactly"), "{text}");
    }
}

#[test]
fn a_mode_that_cannot_be_committed_is_refused_before_anything_is_written() {
    let dir = tempdir();
    let source = dir.path().join("source");
    succeed(
        kfs().arg("gen").arg("--out").arg(&source).args([
            "--topics",
            "1",
            "--segments",
            "1",
            "--records",
            "10",
        ]),
        "gen",
    );
    let warehouse = dir.path().join("wh");
    for (args, reason) in [
        (
            &["--table-mode", "upsert", "--value-format", "json"][..],
            "value_format json",
        ),
        (&["--table-mode", "cdc"][..], "cdc"),
        (
            &["--table-mode", "upsert", "--upsert-key", "id"][..],
            "\"id\"",
        ),
        (&["--upsert-key", "id"][..], "upsert_key"),
    ] {
        let out = output_of(
            kfs()
                .args(["run", "--quiet", "--source"])
                .arg(&source)
                .arg("--warehouse")
                .arg(&warehouse)
                .args(args),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(stderr.contains(reason), "{args:?}: {stderr}");
    }
    assert!(
        !warehouse.join("catalog.db").exists(),
        "something was written"
    );
}

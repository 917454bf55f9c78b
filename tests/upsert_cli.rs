//! `--table-mode upsert` end to end on the embedded default: a keyed topic (`gen
//! --keys`: updates, tombstones, keys deleted and written again, records without a
//! key) is mirrored over two runs, each commit a row delta; the same segments are
//! also run into an append table (the change log), and pyiceberg and DuckDB read the
//! mirror as exactly the fold of that log, folded independently in Python
//! (`tests/python/check_mirror.py`); the same with JSON values, whose fields are the
//! mirror's columns (a value that is no JSON object goes to the dead-letter table and
//! changes nothing), and keyed by a value field. A mode the build cannot commit is
//! refused before anything is written.

use crate::support;

use std::path::Path;

use support::{copy_first_segments, kfs, output_of, repo, succeed, tempdir};

/// Runs the segments under `source` into `warehouse` with `args`.
fn run(source: &Path, warehouse: &Path, args: &[&str]) {
    let mut command = kfs();
    command.args(["run", "--quiet", "--source"]).arg(source);
    command.arg("--warehouse").arg(warehouse).args(args);
    succeed(&mut command, "run");
}

/// One topic of one segment a partition, generated under `dir` with `args` (`gen`).
fn one_segment(dir: &Path, args: &[&str]) -> std::path::PathBuf {
    let source = dir.join("source");
    let mut command = kfs();
    command.arg("gen").arg("--out").arg(&source);
    command
        .args(["--topics", "1", "--segments", "1"])
        .args(args);
    succeed(&mut command, "gen");
    source
}

/// Checks that the mirror in `mirror` reads as the fold of the log in `log` (with
/// `args` for check_mirror.py).
fn check_mirror(log: &Path, mirror: &Path, args: &[&str]) -> String {
    let out = succeed(
        std::process::Command::new("python3")
            .arg(repo().join("tests/python/check_mirror.py"))
            .arg("--log-warehouse")
            .arg(log)
            .arg("--mirror-warehouse")
            .arg(mirror)
            .args(["--table", "kafscale.orders"])
            .args(args),
        "check_mirror.py",
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{text}");
    text
}

#[test]
fn a_keyed_topic_mirrored_over_two_runs_reads_as_the_fold_of_its_log() {
    mirrored_over_two_runs(&["--table-mode", "upsert"], &[]);
}

/// A JSON mirror: the value's fields are the columns, beside the record key (and the
/// value as it came, whose null is the tombstone); a value that is not a JSON object
/// goes to the dead-letter table and changes nothing.
#[test]
fn a_keyed_topic_of_json_values_mirrored_reads_as_the_fold_of_what_it_could_hold() {
    let text = mirrored_over_two_runs(
        &["--table-mode", "upsert", "--value-format", "json"],
        &["--dead-letters"],
    );
    assert!(
        !text.contains("dead letters left out of the fold: 0"),
        "{text}"
    );
    // The value's fields are the columns, beside the record's own.
    assert!(
        text.contains("columns: record_id, topic, partition, offset"),
        "{text}"
    );
    assert!(
        text.contains("customer, items, order_id; order_id is the row's own"),
        "{text}"
    );
}

/// A JSON mirror keyed by a value field (`--upsert-key customer`): a keyed record's
/// `customer` is its key, a keyless record's one of the keys at random, from any
/// partition (ordered across partitions by timestamp); a tombstone names its key by
/// the record key's text. Folded independently by the same fields. It keeps its
/// change log (`--change-log`): pyiceberg and DuckDB read every record of the log but
/// the dead letters in `kafscale.orders__changes` once, after each run.
#[test]
fn a_json_mirror_keyed_by_a_value_field_reads_as_the_fold_of_its_log() {
    let text = mirrored_over_two_runs(
        &[
            "--table-mode",
            "upsert",
            "--value-format",
            "json",
            "--upsert-key",
            "customer",
            "--change-log",
        ],
        &["--dead-letters", "--key-fields", "customer", "--change-log"],
    );
    assert!(text.contains("order_id is the row's own"), "{text}");
    for reader in ["pyiceberg", "DuckDB"] {
        let line = format!("change log: {reader} holds every record once");
        assert!(text.contains(&line), "{text}");
    }
}

/// A keyed topic over 60 keys run twice into a mirror (`mirror_args`) and into a log
/// beside; checked after each run; returns the last check's output.
fn mirrored_over_two_runs(mirror_args: &[&str], check_args: &[&str]) -> String {
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
    let mut text = String::new();
    for taken in [2, 4] {
        copy_first_segments(&all, &source, taken);
        run(&source, &log, &[]);
        run(&source, &mirror, mirror_args);
        text = check_mirror(&log, &mirror, check_args);
        assert!(text.contains("pyiceberg: reads the fold exactly"), "{text}");
        assert!(text.contains("DuckDB: reads the fold exactly"), "{text}");
    }
    text
}

/// A key field no value has (a careless operator's typo) stops the table's commits
/// with the reason, its files kept pending; nothing is committed as if keyless.
#[test]
fn a_key_field_no_value_has_stops_the_commit_with_the_reason() {
    let dir = tempdir();
    let source = one_segment(dir.path(), &["--records", "50", "--keys", "10"]);
    let out = output_of(
        kfs()
            .args(["run", "--quiet", "--source"])
            .arg(&source)
            .arg("--warehouse")
            .arg(dir.path().join("wh"))
            .args(["--table-mode", "upsert", "--value-format", "json"])
            .args(["--upsert-key", "custmer"]),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a key of no column was committed");
    assert!(
        stderr.contains("upsert_key field \"custmer\" is no column") && stderr.contains("customer"),
        "{stderr}"
    );
}

#[test]
fn a_mode_that_cannot_be_committed_is_refused_before_anything_is_written() {
    let dir = tempdir();
    let source = one_segment(dir.path(), &["--records", "10"]);
    let warehouse = dir.path().join("wh");
    for (args, reason) in [
        (&["--table-mode", "cdc"][..], "not value_format raw"),
        (
            &["--table-mode", "upsert", "--upsert-key", "id"][..],
            "\"id\"",
        ),
        (&["--upsert-key", "id"][..], "upsert_key"),
        (&["--change-log"][..], "no table mirrors"),
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

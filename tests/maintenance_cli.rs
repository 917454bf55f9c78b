//! Table maintenance end to end on the embedded default: a table fed by 500 tiny
//! segments (written by the independent encoder) is compacted, its snapshots expired,
//! its orphans removed and its manifests merged; pyiceberg and DuckDB read exactly the
//! encoded rows after every step, the history shows `replace` snapshots, the offset
//! map survives, the file count lands near bytes ÷ target, and after expiry every file
//! the table references exists while unreachable ones are gone. A second test runs
//! appends and compactions as concurrent processes and checks nothing is lost or
//! duplicated.

use crate::support;

use std::path::Path;
use std::process::{Child, Command};

use serde_json::Value;
use support::{files_under, kfs, kfs_ok, run_uncoalesced, succeed, tempdir, tiny_bucket};

fn verify(warehouse: &Path, expected: &Path) -> Value {
    support::verify_tables(warehouse, expected, &[])
}

fn parquet_files(dir: &Path) -> Vec<String> {
    files_under(dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .map(|p| p.display().to_string())
        .collect()
}

#[test]
fn compaction_expiry_orphans_and_manifest_rewrite_keep_every_row() {
    let dir = tempdir();
    let (source, warehouse) = (dir.path().join("bucket"), dir.path().join("wh"));
    tiny_bucket(&source, 21, 500);
    let (src, wh) = (source.to_string_lossy(), warehouse.to_string_lossy());
    run_uncoalesced(&src, &wh);
    let before = verify(&warehouse, &source);
    let tiny = &before["tiny"];
    assert_eq!(tiny["data_files"].as_array().map(Vec::len), Some(500));
    let offsets = tiny["offsets"].clone();

    // Target: a quarter of the table's bytes, so a handful of files remains.
    let data_bytes = tiny["data_bytes"].as_u64().unwrap_or(0);
    let target = 64 * 1024;
    let report = kfs_ok(&[
        "compact",
        "--warehouse",
        &wh,
        "--table",
        "kafscale.tiny",
        "--target-file-size",
        &target.to_string(),
    ]);
    let compacted = verify(&warehouse, &source);
    let after = &compacted["tiny"];
    let files = after["data_files"].as_array().map_or(0, Vec::len);
    let bytes = after["data_bytes"].as_u64().unwrap_or(0);
    // About total bytes ÷ target, plus the remainder (the table is unpartitioned).
    let expected_files = bytes.div_ceil(target) as usize;
    assert!(
        files >= 1 && files <= expected_files + 1,
        "{files} files of {bytes} bytes for a {target}-byte target (from {data_bytes} bytes in 500 files): {report}"
    );
    assert_eq!(after["offsets"], offsets);
    let history: Vec<&str> = after["history"]
        .as_array()
        .map(|h| h.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert!(history.contains(&"Operation.REPLACE"), "{history:?}");
    assert_eq!(after["operation"], "Operation.REPLACE");
    // Tiny inputs are decoded and re-encoded (copying their column chunks would only
    // copy their tiny pages); copying large row groups is covered by
    // shared/kfs-core/tests/parquet_merge.rs and the compaction benchmark.
    assert!(
        report.contains(" re-encoded") && !report.contains(" 0 re-encoded"),
        "{report}"
    );

    // A snapshot bound expires old snapshots however young they are.
    let bounded = kfs_ok(&[
        "expire-snapshots",
        "--warehouse",
        &wh,
        "--older-than",
        "5d",
        "--max-snapshots",
        "2",
        "--dry-run",
    ]);
    assert!(
        bounded.contains("would expire") && bounded.contains("(2 kept)"),
        "{bounded}"
    );

    // A stray file left by a crashed writer.
    let stray = warehouse.join("kafscale/tiny/data/stray-crashed-writer.parquet");
    std::fs::write(&stray, b"PAR1").unwrap_or_else(|e| panic!("{e}"));
    kfs_ok(&[
        "expire-snapshots",
        "--warehouse",
        &wh,
        "--older-than",
        "0s",
        "--retain-last",
        "1",
    ]);
    let expired = verify(&warehouse, &source);
    let live: Vec<String> = expired["tiny"]["data_files"]
        .as_array()
        .map(|f| {
            f.iter()
                .filter_map(|p| {
                    p.as_str()
                        .map(|p| p.trim_start_matches("file://").to_owned())
                })
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(expired["tiny"]["snapshots"], 1);
    let on_disk: Vec<String> = parquet_files(&warehouse.join("kafscale/tiny/data"));
    for file in &live {
        assert!(Path::new(file).exists(), "referenced {file} is missing");
    }
    // Unreachable data files are gone; only the stray remains besides the live ones.
    assert_eq!(on_disk.len(), live.len() + 1, "{on_disk:?}");

    let dry = kfs_ok(&[
        "remove-orphans",
        "--warehouse",
        &wh,
        "--older-than",
        "0s",
        "--force",
        "--dry-run",
    ]);
    assert!(
        dry.contains("would delete") && dry.contains("stray-crashed-writer"),
        "{dry}"
    );
    assert!(stray.exists());
    // Without --force, an age below the floor is refused, and nothing is deleted.
    let refused = kfs()
        .args(["remove-orphans", "--warehouse", &wh, "--older-than", "0s"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("floor of 1h"),
        "{stderr}"
    );
    assert!(stray.exists());
    kfs_ok(&[
        "remove-orphans",
        "--warehouse",
        &wh,
        "--older-than",
        "0s",
        "--force",
    ]);
    assert!(!stray.exists());
    kfs_ok(&["rewrite-manifests", "--warehouse", &wh]);
    let last = verify(&warehouse, &source);
    assert_eq!(last["tiny"]["offsets"], offsets);
    assert_eq!(last["tiny"]["data_files"], expired["tiny"]["data_files"]);
    for table in ["orders", "orders_v2_eu", "clickstream"] {
        assert_eq!(last[table]["rows"], before[table]["rows"], "{table}");
    }
}

/// Coalescing before the first commit: one cycle over 500 tiny segments commits a
/// handful of files, and the small files are gone once the commit landed.
#[test]
fn coalescing_commits_a_handful_of_files_for_500_segments() {
    let dir = tempdir();
    let (source, warehouse) = (dir.path().join("bucket"), dir.path().join("wh"));
    tiny_bucket(&source, 23, 500);
    let (src, wh) = (source.to_string_lossy(), warehouse.to_string_lossy());
    kfs_ok(&["run", "--quiet", "--source", &src, "--warehouse", &wh]);
    let facts = verify(&warehouse, &source);
    let tiny = &facts["tiny"];
    assert_eq!(tiny["snapshots"], 1);
    let files = tiny["data_files"].as_array().map_or(0, Vec::len);
    assert_eq!(files, 1, "{tiny}");
    // Only the committed file is left in the data directory.
    assert_eq!(
        parquet_files(&warehouse.join("kafscale/tiny/data")).len(),
        1
    );
}

fn spawn(args: &[&str]) -> Child {
    kfs()
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn: {e}"))
}

#[test]
fn appends_and_compactions_in_two_processes_lose_and_duplicate_nothing() {
    let dir = tempdir();
    let (full, source, warehouse) = (
        dir.path().join("full"),
        dir.path().join("bucket"),
        dir.path().join("wh"),
    );
    tiny_bucket(&full, 22, 300);
    let (src, wh) = (source.to_string_lossy(), warehouse.to_string_lossy());
    // Segments arrive in five waves; each wave's append runs while a compaction runs.
    let mut segments: Vec<_> = files_under(&full)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "kfs"))
        .collect();
    segments.sort();
    let mut compactions_committed = 0;
    for wave in segments.chunks(segments.len().div_ceil(5)) {
        for kfs_file in wave {
            for ext in ["kfs", "index", "expected.jsonl"] {
                let from = kfs_file.with_extension(ext);
                let rel = from.strip_prefix(&full).unwrap_or(&from);
                let to = source.join(rel);
                if let Some(parent) = to.parent() {
                    std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{e}"));
                }
                let _ = std::fs::copy(&from, &to);
            }
        }
        let mut append = spawn(&[
            "run",
            "--quiet",
            "--no-coalesce",
            "--source",
            &src,
            "--warehouse",
            &wh,
        ]);
        let compact = spawn(&["compact", "--warehouse", &wh, "--target-file-size", "32768"]);
        let compact = compact.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
        let appended = append.wait().unwrap_or_else(|e| panic!("{e}"));
        // Either may lose a race (SQLite busy, a conflict it gave up on): never data.
        if compact.status.success() {
            compactions_committed += 1;
        }
        // The append may also lose a race; the settling run below finishes its work.
        let _ = appended;
    }
    // Settle: one more append and compaction, sequentially.
    run_uncoalesced(&src, &wh);
    kfs_ok(&["compact", "--warehouse", &wh, "--target-file-size", "32768"]);
    assert!(compactions_committed > 0);
    let facts = verify(&warehouse, &source);
    assert!(
        facts["tiny"]["history"]
            .as_array()
            .is_some_and(|h| h.iter().any(|o| o == "Operation.REPLACE")),
        "{facts}"
    );
}

/// `maintain` runs the committer's whole policy in one command: the tiny files are
/// compacted, old snapshots expired and the manifests merged, every row still read back
/// exactly; a second `maintain` finds nothing more to compact; `--dry-run` is refused.
#[test]
fn maintain_runs_the_committers_policy_and_keeps_every_row() {
    let dir = tempdir();
    let (source, warehouse) = (dir.path().join("bucket"), dir.path().join("wh"));
    tiny_bucket(&source, 7, 60);
    let (src, wh) = (source.to_string_lossy(), warehouse.to_string_lossy());
    run_uncoalesced(&src, &wh);
    let before = parquet_files(&warehouse).len();
    let first = kfs_ok(&[
        "maintain",
        "--warehouse",
        &wh,
        "--snapshot-retention",
        "0s",
        "--max-manifests",
        "1",
        "--orphan-age",
        "off",
    ]);
    assert!(
        first.contains("files compacted") && first.contains("manifests merged"),
        "{first}"
    );
    let compacted: usize = first
        .lines()
        .filter_map(|line| {
            line.split(": ")
                .nth(1)?
                .split(' ')
                .next()?
                .parse::<usize>()
                .ok()
        })
        .sum();
    assert!(compacted > 0, "nothing compacted:\n{first}");
    assert!(
        parquet_files(&warehouse).len() < before,
        "expiry deleted no replaced file"
    );
    // Exits non-zero unless every encoded row is read back exactly once.
    verify(&warehouse, &source);
    let again = kfs_ok(&["maintain", "--warehouse", &wh, "--orphan-age", "off"]);
    assert!(again.contains(": 0 files compacted"), "{again}");
    let refused = kfs()
        .args(["maintain", "--warehouse", &wh, "--dry-run"])
        .output()
        .unwrap_or_else(|e| panic!("kfs-iceberg: {e}"));
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("no --dry-run"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

/// Sets `table`'s location (`location: Some`) or properties through pyiceberg, as
/// another engine or an operator would.
fn pyiceberg_alter(
    warehouse: &Path,
    table: &str,
    location: Option<&str>,
    properties: &[(&str, &str)],
) {
    let props: serde_json::Map<String, Value> = properties
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Value::String((*v).to_owned())))
        .collect();
    let script = r#"
import json, sys
from pyiceberg.catalog.sql import SqlCatalog
wh, table, location, props = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
catalog = SqlCatalog("local", uri=f"sqlite:///{wh}/catalog.db", warehouse=f"file://{wh}")
t = catalog.load_table(table)
if props:
    with t.transaction() as tx:
        tx.set_properties(props)
if location:
    # pyiceberg 0.12 cannot move a table: a new metadata file, swapped in the catalog.
    import sqlite3, uuid
    old = catalog.load_table(table).metadata_location
    with open(old.removeprefix("file://")) as f:
        metadata = json.load(f)
    metadata["location"] = location
    new = old.rsplit("/", 1)[0] + f"/99999-{uuid.uuid4()}.metadata.json"
    with open(new.removeprefix("file://"), "w") as f:
        json.dump(metadata, f)
    namespace, name = table.split(".")
    with sqlite3.connect(f"{wh}/catalog.db") as db:
        db.execute("UPDATE iceberg_tables SET previous_metadata_location = metadata_location, metadata_location = ? WHERE table_namespace = ? AND table_name = ?", (new, namespace, name))
print(catalog.load_table(table).metadata.location)
"#;
    succeed(
        Command::new("python3")
            .args(["-c", script])
            .arg(warehouse)
            .arg(table)
            .arg(location.unwrap_or(""))
            .arg(Value::Object(props).to_string()),
        "pyiceberg alter",
    );
}

/// Orphan cleanup among neighbours: a table whose location is the parent of another
/// table's is refused by `remove-orphans` (its dry run too), naming both, and lists
/// none of the other table's files; every destructive command first prints the
/// catalog, warehouse, ledger and tables it acts on.
#[test]
fn remove_orphans_refuses_a_location_holding_another_tables() {
    let dir = tempdir();
    let (source, warehouse) = (dir.path().join("bucket"), dir.path().join("wh"));
    let (src, wh) = (source.to_string_lossy(), warehouse.to_string_lossy());
    kfs_ok(&["gen", "--out", &src, "--segments", "1", "--partitions", "1"]);
    run_uncoalesced(&src, &wh);
    let parent = format!("file://{}/kafscale", warehouse.display());
    pyiceberg_alter(&warehouse, "kafscale.payments", Some(&parent), &[]);
    let refused = kfs()
        .args([
            "remove-orphans",
            "--warehouse",
            &wh,
            "--older-than",
            "0s",
            "--force",
            "--dry-run",
        ])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&refused.stdout),
        String::from_utf8_lossy(&refused.stderr),
    );
    assert!(!refused.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("kafscale.payments") && stderr.contains("kafscale.orders"),
        "{stderr}"
    );
    assert!(!stdout.contains("orders/"), "{stdout}");
    // What it was about to act on, printed first.
    assert!(
        stderr.contains("kfs-iceberg remove-orphans --dry-run on a local configuration:")
            && stderr.contains(&format!("warehouse: file://{}", warehouse.display()))
            && stderr.contains("ledger:    sqlite:")
            && stderr.contains("catalog:   sql (SQLite ")
            && stderr.contains("tables (2): "),
        "{stderr}"
    );
    // The other table's files are all there: every row still reads back.
    let orders_data = warehouse.join("kafscale/orders/data");
    assert!(!parquet_files(&orders_data).is_empty());
    kfs_ok(&[
        "remove-orphans",
        "--warehouse",
        &wh,
        "--table",
        "kafscale.orders",
        "--older-than",
        "0s",
        "--force",
    ]);
    assert!(!parquet_files(&orders_data).is_empty());
}

/// A table property turns a step off for the tables another engine maintains:
/// `compact` skips the table and says why, `--even-if-disabled` runs it anyway, and
/// `maintain` reports the step off.
#[test]
fn table_properties_turn_maintenance_steps_off() {
    let dir = tempdir();
    let (source, warehouse) = (dir.path().join("bucket"), dir.path().join("wh"));
    let (src, wh) = (source.to_string_lossy(), warehouse.to_string_lossy());
    kfs_ok(&["gen", "--out", &src, "--topics", "1", "--partitions", "1"]);
    run_uncoalesced(&src, &wh);
    let data = warehouse.join("kafscale/orders/data");
    let files = parquet_files(&data).len();
    assert!(files > 1, "{files}");
    pyiceberg_alter(
        &warehouse,
        "kafscale.orders",
        None,
        &[("kfs.maintenance.compaction.enabled", "false")],
    );
    let skipped = kfs_ok(&["compact", "--warehouse", &wh]);
    assert!(
        skipped.contains("kafscale.orders: skipped: compaction is off by kfs.maintenance.compaction.enabled=false"),
        "{skipped}"
    );
    assert_eq!(parquet_files(&data).len(), files);
    let maintained = kfs_ok(&["maintain", "--warehouse", &wh, "--orphan-age", "off"]);
    assert!(
        maintained.contains("0 files compacted")
            && maintained.contains("compaction is off by kfs.maintenance.compaction.enabled=false"),
        "{maintained}"
    );
    let forced = kfs_ok(&["compact", "--warehouse", &wh, "--even-if-disabled"]);
    assert!(forced.contains("kafscale.orders: 1 groups"), "{forced}");
}

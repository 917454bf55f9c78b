//! Time partitioning end to end on the embedded default: segments whose records span
//! about three weeks are run with `--partition-by 'day(timestamp)'`; pyiceberg and
//! DuckDB read back exactly the encoded rows, every data file holds one day, and a
//! pyiceberg scan filtered to one day plans only that day's files and returns exactly
//! that day's records (`tests/python/check_partitioned.py`): committed with coalescing
//! (one file per day), rerun (nothing added), and committed one file per segment and
//! day, then compacted per day. A bad spec is refused with its position and reason.

use crate::support;

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use support::{kfs, output_of, repo, succeed, tempdir, write_expected};

/// Checks the table in `warehouse` against the records encoded under `source`, with
/// pyiceberg and DuckDB, and its day partitioning with pyiceberg; returns the facts.
fn check(warehouse: &Path, source: &Path) -> Value {
    succeed(
        Command::new("python3")
            .arg(repo().join("tests/python/verify_tables.py"))
            .arg("--warehouse")
            .arg(warehouse)
            .arg("--expected")
            .arg(source),
        "verify_tables.py",
    );
    let out = succeed(
        Command::new("python3")
            .arg(repo().join("tests/python/check_partitioned.py"))
            .arg("--warehouse")
            .arg(warehouse)
            .arg("--expected")
            .arg(source),
        "check_partitioned.py",
    );
    let facts: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("check_partitioned.py output: {e}"));
    println!("check_partitioned: {facts}");
    let days = facts["days"].as_u64().unwrap_or(0);
    let planned = facts["planned_files"].as_u64().unwrap_or(0);
    let files = facts["files"].as_u64().unwrap_or(0);
    assert!(days >= 10, "records should span many days: {facts}");
    assert!(
        planned >= 1 && planned < files,
        "one day's scan must plan only its files: {facts}"
    );
    facts
}

fn gen_segments(out: &Path, args: &[&str]) {
    succeed(kfs().arg("gen").arg("--out").arg(out).args(args), "gen");
}

/// `kfs-iceberg run --quiet ARGS --source SOURCE --warehouse WAREHOUSE`.
fn run_command(source: &Path, warehouse: &Path, args: &[&str]) -> Command {
    let mut command = kfs();
    command
        .args(["run", "--quiet"])
        .args(args)
        .arg("--source")
        .arg(source)
        .arg("--warehouse")
        .arg(warehouse);
    command
}

fn run(source: &Path, warehouse: &Path, extra: &[&str]) {
    let mut args = vec!["--partition-by", "day(timestamp)"];
    args.extend_from_slice(extra);
    succeed(
        &mut run_command(source, warehouse, &args),
        "run --partition-by",
    );
}

#[test]
fn day_partitioned_tables_plan_one_day_and_hold_exactly_the_encoded_rows() {
    let dir = tempdir();
    let source = dir.path().join("bucket");
    // 2 partitions × 3 segments × 200 records, an hour apart on average.
    gen_segments(
        &source,
        &["--topics", "1", "--record-spacing-ms", "3600000"],
    );
    write_expected(&source);
    // Coalesced at commit: one file per day.
    let warehouse = dir.path().join("coalesced");
    run(&source, &warehouse, &[]);
    let facts = check(&warehouse, &source);
    assert_eq!(facts["files"], facts["days"], "{facts}");
    // A rerun adds nothing.
    run(&source, &warehouse, &[]);
    check(&warehouse, &source);
    // One file per segment and day, then compacted per day.
    let warehouse = dir.path().join("compacted");
    run(&source, &warehouse, &["--no-coalesce"]);
    let before = check(&warehouse, &source);
    let wh = warehouse.to_string_lossy().into_owned();
    succeed(kfs().args(["compact", "--warehouse", &wh]), "compact");
    let after = check(&warehouse, &source);
    assert!(
        after["files"].as_u64() < before["files"].as_u64(),
        "{before} → {after}"
    );
    assert_eq!(after["files"], after["days"], "{after}");
}

#[test]
fn a_bad_partition_spec_is_refused_with_where_and_why() {
    let dir = tempdir();
    let warehouse = dir.path().join("wh");
    for (spec, expected) in [
        ("week(timestamp)", "at byte 0: unknown transform \"week\""),
        ("day(nosuch)", "the table has no column \"nosuch\""),
        ("day(key)", "day does not apply to column \"key\""),
    ] {
        let source = dir.path().join("bucket");
        gen_segments(
            &source,
            &["--topics", "1", "--partitions", "1", "--segments", "1"],
        );
        let output = output_of(&mut run_command(
            &source,
            &warehouse,
            &["--partition-by", spec],
        ));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{spec} was accepted");
        assert!(stderr.contains(expected), "{spec}: {stderr}");
    }
}

#[test]
fn topics_map_to_tables_by_pattern_with_the_configured_layout_and_properties() {
    let dir = tempdir();
    let source = dir.path().join("bucket");
    let warehouse = dir.path().join("wh");
    // Topics `orders` and `payments`.
    gen_segments(&source, &["--topics", "2", "--segments", "2"]);
    let config = dir.path().join("kfs.toml");
    std::fs::write(
        &config,
        r#"
[[table_patterns]]
topic = "(?P<name>orders|payments)"
table = "sales.${name}_v1"

[partitioning]
payments = "identity(partition)"

[table_properties]
"write.parquet.compression-codec" = "gzip"
"write.parquet.compression-level" = "9"
"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let config_arg = config.to_string_lossy().into_owned();
    succeed(
        &mut run_command(&source, &warehouse, &["--config", &config_arg]),
        "run --config",
    );
    let script = r#"
import json, os, sys
import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog
wh = os.path.abspath(sys.argv[1])
catalog = SqlCatalog("local", uri=f"sqlite:///{wh}/catalog.db", warehouse=f"file://{wh}")
facts = {}
for name in ("orders_v1", "payments_v1"):
    table = catalog.load_table(f"sales.{name}")
    files = [task.file.file_path for task in table.scan().plan_files()]
    codecs = sorted({pq.ParquetFile(path.removeprefix("file://")).metadata.row_group(0).column(0).compression for path in files})
    facts[name] = {
        "rows": table.scan().to_arrow().num_rows,
        "spec": [str(f.transform) + ":" + f.name for f in table.spec().fields],
        "codec": table.properties.get("write.parquet.compression-codec"),
        "file_codecs": codecs,
    }
facts["tables"] = sorted(str(t) for t in catalog.list_tables("sales"))
print(json.dumps(facts))
"#;
    let out = succeed(
        Command::new("python3").args(["-c", script]).arg(&warehouse),
        "pyiceberg check of the mapped tables",
    );
    let facts: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}"));
    println!("mapped tables: {facts}");
    assert_eq!(facts["orders_v1"]["rows"], 800, "{facts}");
    assert_eq!(facts["payments_v1"]["rows"], 800, "{facts}");
    assert_eq!(facts["orders_v1"]["spec"], serde_json::json!([]), "{facts}");
    assert_eq!(
        facts["payments_v1"]["spec"],
        serde_json::json!(["identity:partition"]),
        "{facts}"
    );
    for table in ["orders_v1", "payments_v1"] {
        assert_eq!(facts[table]["codec"], "gzip", "{facts}");
        assert_eq!(
            facts[table]["file_codecs"],
            serde_json::json!(["GZIP"]),
            "{facts}"
        );
    }
    // A bad property is refused before anything runs.
    std::fs::write(
        &config,
        "[table_properties]\n\"write.parquet.compression-codec\" = \"lzma\"\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let output = output_of(&mut run_command(
        &source,
        &dir.path().join("other"),
        &["--config", &config_arg],
    ));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("\"lzma\""),
        "{stderr}"
    );
}

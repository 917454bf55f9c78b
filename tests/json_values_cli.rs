//! `--value-format json` end to end on the embedded default: JSON order events (with
//! tombstones, empty and binary values among them) become typed columns that pyiceberg
//! reads back equal to the JSON fields; fields that appear only in later segments are
//! added as new columns when those segments arrive; every value that is not a JSON
//! object lands in `<table>__dlq` with its raw bytes, position and reason; and the
//! table plus its dead-letter table hold every encoded offset exactly once, across a
//! rerun and the maintenance of both tables too (`tests/python/check_json_values.py`).

use crate::support;

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use support::{copy_first_segments, kfs, repo, succeed, tempdir, write_expected};

/// Checks the JSON table in `warehouse` against the records encoded under `source`;
/// returns the facts of topic `orders`'s table.
fn check(warehouse: &Path, source: &Path) -> Value {
    let out = succeed(
        Command::new("python3")
            .arg(repo().join("tests/python/check_json_values.py"))
            .arg("--warehouse")
            .arg(warehouse)
            .arg("--expected")
            .arg(source),
        "check_json_values.py",
    );
    let facts: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("check_json_values.py output: {e}"));
    println!("check_json_values: {facts}");
    let table = facts["orders"].clone();
    assert!(table.is_object(), "{facts}");
    assert_eq!(
        table["dead_letters"], table["expected_dead_letters"],
        "{table}"
    );
    assert!(table["dead_letters"].as_u64() > Some(0), "{table}");
    assert_eq!(
        table["rows"].as_u64().unwrap_or(0) + table["dead_letters"].as_u64().unwrap_or(0),
        table["offsets"].as_u64().unwrap_or(u64::MAX),
        "{table}"
    );
    table
}

fn run(source: &Path, warehouse: &Path) {
    succeed(
        kfs()
            .args(["run", "--quiet", "--value-format", "json", "--source"])
            .arg(source)
            .arg("--warehouse")
            .arg(warehouse),
        "run --value-format json",
    );
}

#[test]
fn json_values_become_typed_columns_that_grow_with_a_dead_letter_table_for_the_rest() {
    let dir = tempdir();
    let source = dir.path().join("bucket");
    // 2 partitions × 4 segments × 300 records; the last two segments of each
    // partition carry `channel` and `shipping` too.
    succeed(
        kfs().arg("gen").arg("--out").arg(&source).args([
            "--topics",
            "1",
            "--segments",
            "4",
            "--records",
            "300",
            "--later-fields",
        ]),
        "gen",
    );
    write_expected(&source);
    let early = dir.path().join("early");
    copy_first_segments(&source, &early, 2);
    let warehouse = dir.path().join("wh");

    // The first segments: the columns of the first events.
    run(&early, &warehouse);
    let first = check(&warehouse, &early);
    let columns = &first["columns"];
    assert_eq!(columns["order_id"], "long", "{first}");
    assert_eq!(columns["amount"], "double", "{first}");
    assert_eq!(columns["customer"], "string", "{first}");
    assert!(
        columns["items"]
            .as_str()
            .is_some_and(|t| t.starts_with("list<struct<")),
        "{first}"
    );
    assert!(columns.get("channel").is_none(), "{first}");

    // The rest arrive: their new fields become new columns, null for the older rows.
    run(&source, &warehouse);
    let all = check(&warehouse, &source);
    let columns = &all["columns"];
    assert_eq!(columns["channel"], "string", "{all}");
    assert!(
        columns["shipping"]
            .as_str()
            .is_some_and(|t| t.starts_with("struct<")),
        "{all}"
    );
    assert!(all["schemas"].as_u64() >= Some(2), "{all}");

    // A rerun adds nothing.
    run(&source, &warehouse);
    let again = check(&warehouse, &source);
    assert_eq!(again, all);

    // Maintenance of both tables (the namespace's every table) keeps every offset
    // exactly once.
    let wh = warehouse.to_string_lossy().into_owned();
    for command in [
        &["compact", "--warehouse", &wh][..],
        &[
            "expire-snapshots",
            "--warehouse",
            &wh,
            "--older-than",
            "0s",
            "--retain-last",
            "1",
        ],
        &[
            "remove-orphans",
            "--warehouse",
            &wh,
            "--older-than",
            "0s",
            "--force",
        ],
    ] {
        succeed(kfs().args(command), command[0]);
    }
    let maintained = check(&warehouse, &source);
    assert_eq!(maintained["rows"], all["rows"], "{maintained}");
    assert_eq!(
        maintained["dead_letters"], all["dead_letters"],
        "{maintained}"
    );
}

#[test]
fn declared_columns_are_the_schema_and_other_fields_are_not_written() {
    let dir = tempdir();
    let source = dir.path().join("bucket");
    succeed(
        kfs().arg("gen").arg("--out").arg(&source).args([
            "--topics",
            "1",
            "--segments",
            "2",
            "--records",
            "200",
            "--later-fields",
        ]),
        "gen",
    );
    write_expected(&source);
    let config = dir.path().join("kfs.toml");
    std::fs::write(
        &config,
        "value_format = \"json\"\n[value_columns]\norders = \"order_id long, amount float, currency string, channel string\"\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let warehouse = dir.path().join("wh");
    succeed(
        kfs()
            .args(["run", "--quiet", "--config"])
            .arg(&config)
            .arg("--source")
            .arg(&source)
            .arg("--warehouse")
            .arg(&warehouse),
        "run with declared columns",
    );
    let out = succeed(
        Command::new("python3")
            .arg(repo().join("tests/python/check_json_values.py"))
            .arg("--warehouse")
            .arg(&warehouse)
            .arg("--expected")
            .arg(&source)
            .arg("--declared"),
        "check_json_values.py --declared",
    );
    let facts: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}"));
    println!("declared: {facts}");
    let columns = &facts["orders"]["columns"];
    assert_eq!(
        columns,
        &serde_json::json!({
            "order_id": "long",
            "amount": "float",
            "currency": "string",
            "channel": "string"
        }),
        "{facts}"
    );
    assert_eq!(
        facts["orders"]["dead_letters"],
        facts["orders"]["expected_dead_letters"]
    );
    // A bad list is refused with where and why.
    std::fs::write(&config, "[value_columns]\norders = \"order_id decimal\"\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let refused = support::output_of(
        kfs()
            .args(["run", "--quiet", "--config"])
            .arg(&config)
            .arg("--source")
            .arg(&source)
            .arg("--warehouse")
            .arg(dir.path().join("other")),
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("value_columns.orders") && stderr.contains("at byte 9: unknown type"),
        "{stderr}"
    );
}

#[test]
fn an_unknown_value_format_is_refused() {
    let dir = tempdir();
    let output = support::output_of(
        kfs()
            .args(["run", "--quiet", "--value-format", "avro", "--source"])
            .arg(dir.path())
            .arg("--warehouse")
            .arg(dir.path().join("wh")),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    // clap refuses it with the list of formats.
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--value-format")
            && stderr.contains("possible values: raw, json, registry"),
        "{stderr}"
    );
}

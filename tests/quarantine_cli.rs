//! `kfs-iceberg quarantine`: a malformed segment is listed with its key and a
//! positioned error and holds back only its own partition; after the segment is fixed,
//! `retry` releases it and the next run commits it and the segments behind it; `skip`
//! gives its offsets up, and the next run records them as a skipped gap.

use crate::support;

use support::{kfs, output_of, succeed, tempdir};

fn ok(args: &[&str]) -> String {
    String::from_utf8_lossy(&succeed(kfs().args(args), &args.join(" ")).stdout).into_owned()
}

/// Writes 2 partitions × 3 segments of 20 records and corrupts partition 0's second
/// segment; returns its key.
fn corrupt_source(source: &std::path::Path) -> (&'static str, Vec<u8>) {
    let src = source.to_string_lossy();
    ok(&[
        "gen",
        "--out",
        &src,
        "--topics",
        "1",
        "--partitions",
        "2",
        "--segments",
        "3",
        "--records",
        "20",
        "--codec",
        "none",
    ]);
    let key = "default/orders/0/segment-00000000000000000020.kfs";
    let path = source.join(key);
    let good = std::fs::read(&path).unwrap_or_else(|e| panic!("{e}"));
    let mut bad = good.clone();
    bad[200] ^= 0xff;
    std::fs::write(&path, &bad).unwrap_or_else(|e| panic!("{e}"));
    (key, good)
}

/// The current snapshot summary of `kafscale.orders`, from its newest metadata file.
fn current_summary(warehouse: &std::path::Path) -> serde_json::Value {
    let dir = warehouse.join("kafscale/orders/metadata");
    let newest = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".metadata.json"))
        .max()
        .unwrap_or_else(|| panic!("no metadata in {}", dir.display()));
    let text = std::fs::read_to_string(&newest).unwrap_or_else(|e| panic!("{e}"));
    let metadata: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    let current = metadata["current-snapshot-id"].clone();
    metadata["snapshots"]
        .as_array()
        .and_then(|all| all.iter().find(|s| s["snapshot-id"] == current))
        .map(|s| s["summary"].clone())
        .unwrap_or_else(|| panic!("no current snapshot in {}", newest.display()))
}

#[test]
fn a_skipped_segment_is_committed_as_a_skipped_gap() {
    let dir = tempdir();
    let (source, warehouse) = (dir.path().join("bucket"), dir.path().join("wh"));
    let (src, wh) = (source.to_string_lossy(), warehouse.to_string_lossy());
    let (key, _) = corrupt_source(&source);
    let first = ok(&["run", "--quiet", "--source", &src, "--warehouse", &wh]);
    assert!(first.contains("0→20 1→60"), "{first}");

    let skipped = ok(&["quarantine", "skip", "--warehouse", &wh, key]);
    assert!(
        skipped.contains("skipped") && skipped.contains("partition 0 past offset 20"),
        "{skipped}"
    );
    let second = ok(&["run", "--quiet", "--source", &src, "--warehouse", &wh]);
    // Partition 0 moves on past the skipped segment; nothing is converted again.
    assert!(second.contains("0→60 1→60"), "{second}");
    assert!(second.contains("0 converted"), "{second}");
    assert!(
        second.contains("partition 0 offsets 20..=39 (skipped by an operator)"),
        "{second}"
    );
    let summary = current_summary(&warehouse);
    let gaps: serde_json::Value = summary["kfs.gaps"]
        .as_str()
        .and_then(|g| serde_json::from_str(g).ok())
        .unwrap_or_else(|| panic!("no gaps in {summary}"));
    assert_eq!(
        gaps,
        serde_json::json!([{"partition": 0, "from": 20, "to": 39, "reason": "skipped"}]),
        "{summary}"
    );
    assert!(ok(&["quarantine", "list", "--warehouse", &wh]).contains("no quarantined segments"));
    // A third run changes nothing.
    let third = ok(&["run", "--quiet", "--source", &src, "--warehouse", &wh]);
    assert!(
        third.contains("0 converted") && !third.contains("snapshot"),
        "{third}"
    );
}

#[test]
fn a_quarantined_segment_is_listed_and_retried_after_a_fix() {
    let dir = tempdir();
    let (source, warehouse) = (dir.path().join("bucket"), dir.path().join("wh"));
    let (src, wh) = (source.to_string_lossy(), warehouse.to_string_lossy());
    let (key, good) = corrupt_source(&source);
    let path = source.join(key);
    let first = ok(&["run", "--quiet", "--source", &src, "--warehouse", &wh]);
    assert!(
        first.contains("5 converted") && first.contains("1 quarantined"),
        "{first}"
    );
    // Partition 1 moved on; partition 0 stops before the quarantined segment.
    assert!(first.contains("0→20 1→60"), "{first}");
    let listed = ok(&["quarantine", "list", "--warehouse", &wh]);
    assert!(
        listed.starts_with(key) && listed.contains("at byte") && listed.contains("CRC"),
        "{listed}"
    );

    // Retrying something that is not quarantined is refused, clearly.
    let refused = output_of(kfs().args(["quarantine", "retry", "--warehouse", &wh, "nope"]));
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("not quarantined: nope"));

    std::fs::write(&path, &good).unwrap_or_else(|e| panic!("{e}"));
    let released = ok(&["quarantine", "retry", "--warehouse", &wh, key]);
    assert!(released.contains("released"), "{released}");
    let second = ok(&["run", "--quiet", "--source", &src, "--warehouse", &wh]);
    assert!(second.contains("1 converted"), "{second}");
    assert!(second.contains("0→60 1→60"), "{second}");
    assert!(ok(&["quarantine", "list", "--warehouse", &wh]).contains("no quarantined segments"));
}

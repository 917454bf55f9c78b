//! Tables among neighbours, end to end: another engine (pyiceberg) rewrites every
//! topic table and expires all older snapshots between two runs, as S3 Tables does
//! after its compaction and retention; the second run must take the new segments
//! exactly (every offset once, pyiceberg and DuckDB agreeing), and our own
//! maintenance on the same tables afterwards must keep every row and every file a
//! snapshot references; rows another writer appended are kept, once. A rollback past our commits stops the table's commits with
//! a reason, re-ingests nothing, and `progress keep` lets it go on.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use support::{
    files_under, kfs, kfs_ok, repo, run_uncoalesced, succeed, tempdir, tiny_bucket,
    verify_tables as verify_with,
};

fn verify(warehouse: &Path, expected: &Path) -> Value {
    verify_with(warehouse, expected, &[])
}

fn outside(warehouse: &Path, args: &[&str]) -> Value {
    let out = succeed(
        Command::new("python3")
            .arg(repo().join("tests/python/outside_engine.py"))
            .arg("--warehouse")
            .arg(warehouse)
            .args(args),
        "outside_engine.py",
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("outside_engine.py: {e}"))
}

/// Moves the later half of every `tiny` partition's segments (their `.kfs`, `.index`
/// and `.expected.jsonl`) from `bucket` to `aside`, keeping their paths.
fn hold_back_later_half(bucket: &Path, aside: &Path) {
    let mut partitions: BTreeMap<PathBuf, Vec<PathBuf>> = BTreeMap::new();
    for file in files_under(bucket) {
        if file.extension().is_some_and(|e| e == "kfs")
            && file.components().any(|c| c.as_os_str() == "tiny")
            && let Some(dir) = file.parent()
        {
            partitions.entry(dir.to_owned()).or_default().push(file);
        }
    }
    assert!(partitions.len() >= 2, "{partitions:?}");
    for (_, mut segments) in partitions {
        segments.sort();
        let later = segments.split_off(segments.len() / 2);
        for segment in later {
            let stem = segment
                .to_string_lossy()
                .trim_end_matches(".kfs")
                .to_owned();
            for suffix in [".kfs", ".index", ".expected.jsonl"] {
                let from = PathBuf::from(format!("{stem}{suffix}"));
                if !from.exists() {
                    continue;
                }
                let to = aside.join(from.strip_prefix(bucket).unwrap_or(&from));
                if let Some(parent) = to.parent() {
                    std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{e}"));
                }
                std::fs::rename(&from, &to).unwrap_or_else(|e| panic!("{e}"));
            }
        }
    }
}

/// Moves everything under `aside` back into `bucket`.
fn bring_back(aside: &Path, bucket: &Path) {
    for file in files_under(aside) {
        let to = bucket.join(file.strip_prefix(aside).unwrap_or(&file));
        std::fs::rename(&file, &to).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// Every file the table's current snapshot references exists.
fn referenced_exist(facts: &Value) {
    for table in facts.as_object().into_iter().flat_map(|m| m.values()) {
        for file in table["data_files"].as_array().into_iter().flatten() {
            let path = file.as_str().unwrap_or("").trim_start_matches("file://");
            assert!(Path::new(path).exists(), "referenced {path} is missing");
        }
    }
}

#[test]
fn another_engines_rewrite_and_expiry_between_runs_loses_and_doubles_nothing() {
    let dir = tempdir();
    let (source, aside, warehouse) = (
        dir.path().join("bucket"),
        dir.path().join("aside"),
        dir.path().join("wh"),
    );
    tiny_bucket(&source, 37, 24);
    hold_back_later_half(&source, &aside);
    let (src, wh) = (source.to_string_lossy(), warehouse.to_string_lossy());
    run_uncoalesced(&src, &wh);
    verify(&warehouse, &source);

    // Another engine rewrites every table and expires all our snapshots.
    let rewritten = outside(&warehouse, &["rewrite-expire"]);
    assert!(rewritten["kafscale.tiny"]["snapshots"] == 1, "{rewritten}");

    // Another writer appends rows of its own to one of them.
    let appended = outside(&warehouse, &["append-foreign", "kafscale.tiny"]);
    // The other engines' files (its rewrite's and the other writer's): our maintenance
    // leaves them as they are.
    let theirs: Vec<String> = [&rewritten["kafscale.tiny"], &appended["kafscale.tiny"]]
        .iter()
        .flat_map(|facts| facts["files"].as_array().cloned().unwrap_or_default())
        .filter_map(|f| f.as_str().map(str::to_owned))
        .collect();
    assert!(theirs.len() > 1, "{rewritten} {appended}");
    let foreign = ["--foreign", "tiny:foreign-writer:3"];

    // New segments arrive; the next run takes exactly them.
    bring_back(&aside, &source);
    run_uncoalesced(&src, &wh);
    let after = verify_with(&warehouse, &source, &foreign);
    referenced_exist(&after);
    let status = kfs_ok(&["status", "--warehouse", &wh]);
    assert!(!status.contains("held at 0"), "{status}");

    // Our own maintenance on the same tables.
    for args in [
        vec!["compact", "--warehouse", &wh, "--target-file-size", "65536"],
        vec![
            "expire-snapshots",
            "--warehouse",
            &wh,
            "--older-than",
            "0s",
            "--retain-last",
            "1",
        ],
        vec![
            "rewrite-manifests",
            "--warehouse",
            &wh,
            "--max-manifests",
            "1",
        ],
        vec![
            "remove-orphans",
            "--warehouse",
            &wh,
            "--older-than",
            "0s",
            "--force",
        ],
    ] {
        kfs_ok(&args);
        // The other writer's rows too: never dropped or doubled by our maintenance.
        let facts = verify_with(&warehouse, &source, &foreign);
        referenced_exist(&facts);
        assert_eq!(
            facts["tiny"]["offsets"], after["tiny"]["offsets"],
            "{args:?}"
        );
        let live = facts["tiny"]["data_files"].to_string();
        for file in &theirs {
            assert!(
                live.contains(file.as_str()),
                "{args:?} removed {file}: {live}"
            );
        }
    }
    // A run with nothing new changes nothing.
    run_uncoalesced(&src, &wh);
    verify_with(&warehouse, &source, &foreign);
}

/// The `.kfs` keys under `bucket`, relative, one per line.
fn keys_under(bucket: &Path) -> Vec<String> {
    files_under(bucket)
        .into_iter()
        .filter(|f| f.extension().is_some_and(|e| e == "kfs"))
        .map(|f| f.strip_prefix(bucket).unwrap_or(&f).display().to_string())
        .collect()
}

#[test]
fn a_rollback_past_our_commits_is_reported_and_nothing_is_re_ingested() {
    let dir = tempdir();
    let (source, later, last, warehouse) = (
        dir.path().join("bucket"),
        dir.path().join("later"),
        dir.path().join("last"),
        dir.path().join("wh"),
    );
    tiny_bucket(&source, 37, 24);
    // Three stages of `tiny`: A (first half), B (a quarter), C (the last quarter).
    hold_back_later_half(&source, &later);
    hold_back_later_half(&later, &last);
    let (src, wh) = (source.to_string_lossy(), warehouse.to_string_lossy());
    run_uncoalesced(&src, &wh);
    let stage_a = keys_under(&source);
    bring_back(&later, &source);
    run_uncoalesced(&src, &wh);
    verify(&warehouse, &source);
    let stage_b: Vec<String> = keys_under(&source)
        .into_iter()
        .filter(|k| !stage_a.contains(k))
        .collect();
    assert!(!stage_b.is_empty());
    // An operator rolls kafscale.tiny back to its first snapshot (before B).
    outside(&warehouse, &["rollback", "kafscale.tiny"]);

    // C arrives: the run refuses the rolled-back table's commit, with the reason and
    // the remedy, and commits nothing to it.
    bring_back(&last, &source);
    let refused = kfs()
        .args([
            "run",
            "--quiet",
            "--no-coalesce",
            "--source",
            &src,
            "--warehouse",
            &wh,
        ])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&refused.stdout),
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(
        said.contains("rolled back past") && said.contains("progress keep"),
        "{said}"
    );
    let status = kfs_ok(&["status", "--warehouse", &wh]);
    assert!(status.contains("rolled back past"), "{status}");

    // The operator keeps the recorded progress: C lands, B is not ingested again.
    kfs_ok(&[
        "progress",
        "keep",
        "--warehouse",
        &wh,
        "--table",
        "kafscale.tiny",
    ]);
    run_uncoalesced(&src, &wh);
    let only = dir.path().join("only.txt");
    let kept: Vec<String> = keys_under(&source)
        .into_iter()
        .filter(|k| !stage_b.contains(k))
        .collect();
    std::fs::write(&only, kept.join("\n")).unwrap_or_else(|e| panic!("{e}"));
    // A and C, not B.
    verify_with(&warehouse, &source, &["--only", &only.to_string_lossy()]);
}

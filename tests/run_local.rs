//! End to end: `kfs-iceberg run` on the embedded default (SQLite catalog and ledger,
//! local warehouse), read back independently with pyiceberg and
//! DuckDB (`tests/python/verify_tables.py`) and compared row by row with what was
//! encoded. Covers rerun idempotency, incremental runs, and runs killed at random
//! moments. (Against S3 on moto: `servers::moto_cli`.)

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{files_under, independent_bucket, kfs, repo, succeed, tempdir, write_expected};

pub(crate) fn run(source: &str, warehouse: &str, extra: &[&str], env: &[(&str, &str)]) -> String {
    let mut command = kfs();
    command
        .args([
            "run",
            "--quiet",
            "--source",
            source,
            "--warehouse",
            warehouse,
        ])
        .args(extra);
    command.envs(env.iter().copied());
    String::from_utf8_lossy(&succeed(&mut command, "kfs-iceberg run").stdout).into_owned()
}

/// Runs the independent checker; returns its per-table facts.
pub(crate) fn verify(
    warehouse: &str,
    expected: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Value {
    let mut command = Command::new("python3");
    command
        .arg(repo().join("tests/python/verify_tables.py"))
        .args(["--warehouse", warehouse, "--expected"])
        .arg(expected)
        .args(extra)
        .envs(env.iter().copied());
    let out = succeed(
        &mut command,
        "verify_tables.py (scripts/test.sh makes the environment: source scripts/python-env.sh)",
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("verify_tables.py printed no JSON: {e}"))
}

pub(crate) fn snapshots(facts: &Value) -> Vec<(String, u64)> {
    facts
        .as_object()
        .map(|tables| {
            tables
                .iter()
                .map(|(t, f)| (t.clone(), f["snapshots"].as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default()
}

fn copy(from_root: &Path, file: &Path, to_root: &Path) {
    let relative = file.strip_prefix(from_root).unwrap_or(file);
    let target = to_root.join(relative);
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{}: {e}", parent.display()));
    }
    std::fs::copy(file, &target).unwrap_or_else(|e| panic!("{}: {e}", target.display()));
}

/// The `.kfs` files of a bucket, grouped by partition directory, in offset order.
fn segments_by_partition(root: &Path) -> Vec<Vec<PathBuf>> {
    let mut groups: std::collections::BTreeMap<PathBuf, Vec<PathBuf>> = Default::default();
    for file in files_under(root) {
        let is_complete =
            file.extension().is_some_and(|e| e == "kfs") && file.with_extension("index").exists();
        if is_complete && let Some(parent) = file.parent() {
            groups.entry(parent.to_owned()).or_default().push(file);
        }
    }
    groups.into_values().collect()
}

#[test]
fn run_matches_the_encoded_records_reruns_add_nothing_and_new_segments_add_only_themselves() {
    let full = tempdir();
    let source = tempdir();
    let warehouse = tempdir();
    let wh = warehouse.path().to_string_lossy().into_owned();
    independent_bucket(4, full.path());
    // Wave 1: every object except the later half of each partition's segments.
    let mut later = Vec::new();
    for group in segments_by_partition(full.path()) {
        let keep = group.len().div_ceil(2);
        later.extend(group[keep..].iter().cloned());
    }
    let is_later = |file: &Path| {
        let stem = file.to_string_lossy();
        let stem = stem
            .split(".expected")
            .next()
            .unwrap_or(&stem)
            .trim_end_matches(".kfs")
            .trim_end_matches(".index");
        later
            .iter()
            .any(|l| l.to_string_lossy().trim_end_matches(".kfs") == stem)
    };
    let wave1: Vec<PathBuf> = files_under(full.path())
        .into_iter()
        .filter(|f| !is_later(f))
        .collect();
    for file in &wave1 {
        copy(full.path(), file, source.path());
    }
    let src = source.path().to_string_lossy().into_owned();
    let summary = run(&src, &wh, &[], &[]);
    assert!(summary.contains("0 quarantined"), "{summary}");
    let first = verify(&wh, source.path(), &[], &[]);
    assert!(
        snapshots(&first).iter().all(|(_, n)| *n == 1),
        "one snapshot per table per run: {first}"
    );

    // A second run over the same source adds no snapshot and no row.
    let again = run(&src, &wh, &[], &[]);
    assert!(again.contains("0 converted"), "{again}");
    let second = verify(&wh, source.path(), &[], &[]);
    assert_eq!(snapshots(&first), snapshots(&second));

    // New segments arrive: only they are added, in one more snapshot per table.
    for file in files_under(full.path()).into_iter().filter(|f| is_later(f)) {
        copy(full.path(), &file, source.path());
    }
    let third_run = run(&src, &wh, &[], &[]);
    assert!(
        third_run.contains(&format!("{} converted", later.len())),
        "{third_run}"
    );
    let third = verify(&wh, source.path(), &[], &[]);
    for ((table, before), (_, after)) in snapshots(&second).iter().zip(snapshots(&third)) {
        assert!(
            after == *before || after == before + 1,
            "{table}: {before} → {after} snapshots"
        );
    }
    assert!(snapshots(&third).iter().any(|(_, n)| *n == 2), "{third}");

    let status = succeed(kfs().args(["status", "--warehouse", &wh]), "status");
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains("pending: none") && status.contains("next offset"),
        "{status}"
    );
}

#[test]
fn runs_killed_at_random_moments_still_end_with_every_record_exactly_once() {
    let full = tempdir();
    let source = tempdir();
    let warehouse = tempdir();
    let baseline = tempdir();
    let src = source.path().to_string_lossy().into_owned();
    let wh = warehouse.path().to_string_lossy().into_owned();
    let all = full.path().to_string_lossy().into_owned();
    let generated = kfs()
        .args([
            "gen",
            "--out",
            &all,
            "--topics",
            "3",
            "--partitions",
            "2",
            "--segments",
            "12",
            "--records",
            "500",
        ])
        .args(["--codec", "mixed", "--seed", "11"])
        .output();
    assert!(generated.is_ok_and(|o| o.status.success()));
    write_expected(full.path());
    // How long an uninterrupted run over everything takes here.
    let started = Instant::now();
    run(&all, &baseline.path().to_string_lossy(), &[], &[]);
    let full_run = started.elapsed();
    // Segments arrive in waves; every run is killed at a random moment of its work.
    let groups = segments_by_partition(full.path());
    let waves = 6;
    let mut killed = 0;
    let mut state: u64 = 0x5eed;
    for wave in 0..waves {
        for group in &groups {
            let per_wave = group.len().div_ceil(waves);
            for kfs_file in group.iter().skip(wave * per_wave).take(per_wave) {
                for file in [
                    kfs_file.clone(),
                    kfs_file.with_extension("index"),
                    PathBuf::from(
                        kfs_file
                            .to_string_lossy()
                            .replace(".kfs", ".expected.jsonl"),
                    ),
                ] {
                    copy(full.path(), &file, source.path());
                }
            }
        }
        for _ in 0..3 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let fraction = ((state >> 33) % 1000) as f64 / 1000.0;
            let delay = full_run.mul_f64(fraction / waves as f64 * 1.5);
            let mut child: Child = kfs()
                .args(["run", "--quiet", "--source", &src, "--warehouse", &wh])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("spawn: {e}"));
            let started = Instant::now();
            while started.elapsed() < delay {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            if let Ok(None) = child.try_wait() {
                let _ = child.kill(); // SIGKILL: no cleanup of any kind
                killed += 1;
            }
            let _ = child.wait();
        }
    }
    let last = run(&src, &wh, &[], &[]);
    assert!(last.contains("0 quarantined"), "{last}");
    let facts = verify(&wh, full.path(), &[], &[]);
    assert!(
        killed >= 6,
        "only {killed} runs were killed before finishing (full run takes {full_run:?})"
    );
    println!(
        "{killed} of {} runs killed (full run {full_run:?}); afterwards: {facts}",
        waves * 3
    );
}

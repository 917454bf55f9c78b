//! Large-file (LFS) claim checks end to end: segments and blobs written by an
//! independent encoder (`tests/python/check_lfs.py`), converted by `kfs-iceberg run
//! --lfs-mode …` in every mode, read back by pyiceberg (and DuckDB on a local
//! warehouse): every record in the table or the dead-letter table exactly once,
//! resolved values equal to the blobs, each dead letter with its reason. The moto
//! test (`servers::moto_cli`) runs every mode with the source in S3.

use crate::support;

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use support::{kfs, repo, succeed, tempdir};

/// Writes the corpus under `dir`, its envelopes naming `bucket` and `prefix`.
pub(crate) fn make_corpus(dir: &Path, bucket: &str, prefix: &str) {
    succeed(
        Command::new("python3")
            .arg(repo().join("tests/python/check_lfs.py"))
            .arg("make")
            .arg(dir)
            .args(["--bucket", bucket, "--prefix", prefix]),
        "check_lfs.py make",
    );
}

/// Checks the tables after a run in `mode`; returns the checker's facts.
pub(crate) fn check(
    mode: &str,
    catalog_db: &Path,
    warehouse: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Value {
    let out = succeed(
        Command::new("python3")
            .arg(repo().join("tests/python/check_lfs.py"))
            .args([
                "check",
                "--mode",
                mode,
                "--warehouse",
                warehouse,
                "--catalog-db",
            ])
            .arg(catalog_db)
            .args(extra)
            .envs(env.iter().copied()),
        "check_lfs.py check",
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("check_lfs.py output: {e}"))
}

#[test]
fn claim_checks_resolve_from_a_local_directory_standing_for_the_bucket() {
    let source = tempdir();
    make_corpus(source.path(), "kafscale-segments", "");
    for mode in ["hybrid", "resolve"] {
        let warehouse = tempdir();
        succeed(
            kfs()
                .args([
                    "run",
                    "--quiet",
                    "--lfs-mode",
                    mode,
                    "--lfs-max-inline-size",
                    "64",
                ])
                .args(["--lfs-bucket", "kafscale-segments", "--source"])
                .arg(source.path())
                .arg("--warehouse")
                .arg(warehouse.path()),
            "kfs-iceberg run --lfs-mode",
        );
        let facts = check(
            mode,
            &warehouse.path().join("catalog.db"),
            &warehouse.path().to_string_lossy(),
            &[],
            &[],
        );
        println!("{facts}");
        assert_eq!(
            facts["rows"].as_u64().unwrap_or(0) + facts["dead_letters"].as_u64().unwrap_or(0),
            11,
            "{facts}"
        );
        assert_eq!(facts["duckdb_rows"], facts["rows"], "{facts}");
    }
}

#[test]
fn a_bucket_other_than_the_sources_is_refused_at_the_start() {
    let out = support::output_of(
        kfs()
            .args([
                "run",
                "--quiet",
                "--lfs-mode",
                "resolve",
                "--lfs-bucket",
                "other",
            ])
            .args(["--source", "s3://segments/prefix", "--warehouse"])
            .arg(tempdir().path()),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("segment bucket only"),
        "{stderr}"
    );
}

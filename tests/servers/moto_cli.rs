//! `kfs-iceberg run` with its source and warehouse in S3 (moto), read back with
//! pyiceberg; a rerun adds nothing. Record values framed for the AWS Glue Schema
//! Registry (Avro, Protobuf and JSON, uncompressed and zlib), their schemas registered
//! in moto's Glue by `tests/python/check_glue_registry.py`, converted with
//! `--schema-registry-url glue://` and read back by pyiceberg and DuckDB.

use std::process::Command;

use kfs_testkit::Moto;

use crate::run_local::{run, snapshots, verify};
use crate::support::{independent_bucket, kfs, output_of, repo, succeed, tempdir};

#[test]
fn s3_source_and_warehouse_against_moto() {
    let moto = Moto::start();
    let env_owned = moto.env();
    let env: Vec<(&str, &str)> = env_owned.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let env = env.as_slice();
    let bucket = tempdir();
    independent_bucket(5, bucket.path());
    moto.tool(&["mb", "kafscale-segments", "lakehouse"]);
    moto.tool(&[
        "put",
        &bucket.path().to_string_lossy(),
        "s3://kafscale-segments/cluster-a",
    ]);
    let state = tempdir();
    let state_dir = state.path().to_string_lossy().into_owned();
    let warehouse = "s3://lakehouse/warehouse";
    let summary = run(
        "s3://kafscale-segments/cluster-a",
        warehouse,
        &["--state", &state_dir],
        env,
    );
    assert!(
        summary.contains("0 quarantined") && summary.contains("1 incomplete"),
        "{summary}"
    );
    let catalog_db = state
        .path()
        .join("catalog.db")
        .to_string_lossy()
        .into_owned();
    let extra = [
        "--no-duckdb",
        "--catalog-db",
        catalog_db.as_str(),
        "--s3-endpoint",
        moto.endpoint.as_str(),
    ];
    let first = verify(warehouse, bucket.path(), &extra, env);
    let again = run(
        "s3://kafscale-segments/cluster-a",
        warehouse,
        &["--state", &state_dir],
        env,
    );
    assert!(again.contains("0 converted"), "{again}");
    let second = verify(warehouse, bucket.path(), &extra, env);
    assert_eq!(snapshots(&first), snapshots(&second));
}

/// Large-file claim checks in every mode with the segments and blobs in S3 (moto):
/// see `lfs_cli`. Blobs are read from the segment bucket, under its prefix.
#[test]
fn lfs_claim_checks_in_every_mode_against_moto() {
    let moto = Moto::start();
    let env_owned = moto.env();
    let env: Vec<(&str, &str)> = env_owned.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let env = env.as_slice();
    let corpus = tempdir();
    crate::lfs_cli::make_corpus(corpus.path(), "kafscale-segments", "cluster-a");
    moto.tool(&["mb", "kafscale-segments", "lakehouse"]);
    moto.tool(&[
        "put",
        &corpus.path().to_string_lossy(),
        "s3://kafscale-segments/cluster-a",
    ]);
    for mode in ["off", "reference", "skip", "resolve", "hybrid"] {
        let state = tempdir();
        let state_dir = state.path().to_string_lossy().into_owned();
        let warehouse = format!("s3://lakehouse/{mode}");
        let summary = run(
            "s3://kafscale-segments/cluster-a",
            &warehouse,
            &[
                "--state",
                &state_dir,
                "--lfs-mode",
                mode,
                "--lfs-max-inline-size",
                "64",
            ],
            env,
        );
        assert!(summary.contains("0 quarantined"), "{mode}: {summary}");
        let facts = crate::lfs_cli::check(
            mode,
            &state.path().join("catalog.db"),
            &warehouse,
            &[
                "--s3-endpoint",
                moto.endpoint.as_str(),
                "--prefix",
                "cluster-a",
            ],
            env,
        );
        println!("{facts}");
        let accounted = facts["rows"].as_u64().unwrap_or(0)
            + facts["dead_letters"].as_u64().unwrap_or(0)
            + facts["skipped"].as_u64().unwrap_or(0);
        assert_eq!(accounted, 11, "{mode}: {facts}");
    }
}

/// `--value-format registry` with the AWS Glue Schema Registry (moto's Glue): values of
/// three Avro versions, a Protobuf message chosen by Glue's message index and JSON
/// values, uncompressed and zlib-compressed, become typed columns; an incompatible
/// version, an unknown version id, an unknown compression, a zlib payload cut short, a
/// Confluent-framed value, an index naming no message and a JSON value the table cannot
/// hold are dead letters (`tests/python/check_glue_registry.py`). Glue takes no
/// registry credentials.
#[test]
fn glue_schema_registry_values_against_moto() {
    let moto = Moto::start();
    let dir = tempdir();
    let segments = dir.path().join("segments");
    let versions = dir.path().join("versions.json");
    let warehouse = dir.path().join("warehouse");
    let script = repo().join("tests/python/check_glue_registry.py");
    succeed(
        Command::new("python3")
            .arg(&script)
            .arg("make")
            .arg(&segments)
            .arg("--versions")
            .arg(&versions)
            .envs(moto.env()),
        "check_glue_registry.py make",
    );
    let out = succeed(
        kfs()
            .args(["run", "--quiet", "--value-format", "registry"])
            .args(["--schema-registry-url", "glue://", "--source"])
            .arg(&segments)
            .arg("--warehouse")
            .arg(&warehouse)
            .envs(moto.env()),
        "kfs-iceberg run --schema-registry-url glue://",
    );
    let summary = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(summary.contains("0 quarantined"), "{summary}");
    let out = succeed(
        Command::new("python3")
            .arg(&script)
            .arg("check")
            .arg("--warehouse")
            .arg(&warehouse)
            .arg("--versions")
            .arg(&versions),
        "check_glue_registry.py check",
    );
    let facts = String::from_utf8_lossy(&out.stdout);
    println!("{facts}");
    assert!(
        facts.contains(r#""glue_orders_rows": 5"#) && facts.contains(r#""glue_payments_rows": 2"#),
        "{facts}"
    );

    // Glue authenticates with the AWS credentials: registry credentials are refused.
    let credentials = dir.path().join("registry.json");
    std::fs::write(&credentials, r#"{"username": "kfs", "password": "secret"}"#)
        .unwrap_or_else(|e| panic!("{}: {e}", credentials.display()));
    let refused = output_of(
        kfs()
            .args(["run", "--quiet", "--value-format", "registry"])
            .args([
                "--schema-registry-url",
                "glue://",
                "--schema-registry-credentials",
            ])
            .arg(&credentials)
            .arg("--source")
            .arg(&segments)
            .arg("--warehouse")
            .arg(dir.path().join("other-warehouse"))
            .envs(moto.env()),
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("takes no registry credentials"),
        "{stderr}"
    );
}

/// An S3 source is checked as a local one is, by listing: a prefix whose objects are
/// none of them segments, and a namespace folder, are refused before the state is
/// created; a prefix with no object at all runs (a bucket may be empty at first).
#[test]
fn an_s3_source_without_segments_in_the_layout_is_refused_against_moto() {
    let moto = Moto::start();
    let env = moto.env();
    let local = tempdir();
    let stray = local.path().join("stray");
    std::fs::create_dir_all(stray.join("notes")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(stray.join("notes/readme.txt"), "no segment").unwrap_or_else(|e| panic!("{e}"));
    let segments = local.path().join("segments");
    crate::support::kfs_ok(&[
        "gen",
        "--out",
        &segments.to_string_lossy(),
        "--topics",
        "1",
        "--partitions",
        "1",
    ]);
    moto.tool(&["mb", "kfs-first-hour"]);
    moto.tool(&["put", &stray.to_string_lossy(), "s3://kfs-first-hour/stray"]);
    moto.tool(&[
        "put",
        &segments.to_string_lossy(),
        "s3://kfs-first-hour/segments",
    ]);
    let state = tempdir();
    let state_dir = state.path().join("state").to_string_lossy().into_owned();
    let run_from = |source: &str| {
        let mut command = kfs();
        command
            .args(["run", "--quiet", "--source", source])
            .args([
                "--warehouse",
                "s3://kfs-first-hour/wh",
                "--state",
                &state_dir,
            ])
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())));
        output_of(&mut command)
    };
    for (source, words) in [
        (
            "s3://kfs-first-hour/stray",
            [
                "none of its 1 files is a segment file",
                "<namespace>/<topic>/<partition>/",
            ],
        ),
        (
            "s3://kfs-first-hour/segments/default",
            [
                "is a namespace folder",
                "point --source at the folder above the namespace",
            ],
        ),
    ] {
        let output = run_from(source);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{source}: {stderr}");
        for word in words {
            assert!(stderr.contains(word), "{source}: no {word:?} in {stderr}");
        }
        assert!(!std::path::Path::new(&state_dir).exists(), "{source}");
    }
    let output = run_from("s3://kfs-first-hour/nothing-yet");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("0 segments listed"), "{stdout}");
}

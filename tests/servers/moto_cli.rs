//! `kfs-iceberg run` with its source and warehouse in S3 (moto), read back with
//! pyiceberg; a rerun adds nothing.

use kfs_testkit::Moto;

use crate::run_local::{run, snapshots, verify};
use crate::support::{independent_bucket, tempdir};

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

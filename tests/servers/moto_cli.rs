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

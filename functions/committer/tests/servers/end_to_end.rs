//! The deployed path end to end on moto (S3, DynamoDB, Glue, Secrets Manager) and a
//! real etcd: segments written by the independent encoder are put in the bucket; S3
//! events built from the real objects reach the converter's handler duplicated and out
//! of order, some never (the sweep finds those); the committer's handler commits to
//! tables registered in Glue, or in a REST catalog whose OAuth2 credentials come from
//! Secrets Manager and which answers one commit with a 503 after applying it;
//! pyiceberg reads the tables back through the same catalog and compares them row by
//! row with what was encoded. A second tick adds nothing.

use std::path::Path;
use std::time::{Duration, Instant};

use kfs_testkit::rest_catalog::{RestCatalogServer, RestServerConfig};

use kfs_committer::{Committer, handle};
use kfs_core::CatalogHandle;
use kfs_core::MaintenancePolicy;
use kfs_core::PipelineConfig;
use kfs_testkit::{Etcd, LocalStack, files_under, workspace_root};
use serde_json::{Value, json};

/// The files below `dir`, as keys relative to it.
fn files(dir: &Path) -> Vec<String> {
    files_under(dir)
        .iter()
        .filter_map(|p| {
            p.strip_prefix(dir)
                .ok()
                .map(|r| r.to_string_lossy().into_owned())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn independent_segments_land_in_glue_tables_exactly_once() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let stack = LocalStack::start();
    let handle = stack.glue_catalog_handle().await;
    let glue = vec!["--glue-endpoint".to_owned(), stack.moto.endpoint.clone()];
    deliver_commit_and_read_back(&stack, handle, &glue).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn independent_segments_land_in_rest_catalog_tables_exactly_once() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let stack = LocalStack::start();
    let secret = r#"{"client_id": "kfs-committer", "client_secret": "s3cr3t-value", "scope": "PRINCIPAL_ROLE:ALL"}"#;
    let arn = stack.moto.tool(&["secret", "kfs-iceberg/catalog", secret]);
    let server = RestCatalogServer::start(RestServerConfig {
        warehouse_name: "analytics".into(),
        storage_root: "s3://lakehouse/rest".into(),
        file_io: stack.s3.file_io(),
        client_defaults: stack.s3.file_io_properties(),
        credential: Some(("kfs-committer".into(), "s3cr3t-value".into())),
        scope: Some("PRINCIPAL_ROLE:ALL".into()),
        static_tokens: Vec::new(),
    })
    .await
    .unwrap_or_else(|e| panic!("rest server: {e}"));
    // The function's own configuration path: variables, then the secret.
    let env = stack.function_env(&[
        ("WAREHOUSE", "s3://lakehouse/rest".to_owned()),
        ("CATALOG_TYPE", "rest".to_owned()),
        ("CATALOG_URI", server.uri()),
        ("CATALOG_WAREHOUSE", "analytics".to_owned()),
        ("CATALOG_SECRET_ARN", arn),
    ]);
    let handle = env.catalog_handle().await.unwrap_or_else(|e| panic!("{e}"));
    assert!(!format!("{env:?}").contains("s3cr3t"));
    // The first commit is applied but answered with a 503: the committer must find it
    // in the table, not commit again.
    server.fail_commits_after_apply(1);
    let rest = [
        "--rest-uri",
        &server.uri(),
        "--rest-warehouse",
        "analytics",
        "--rest-credential",
        "kfs-committer:s3cr3t-value",
        "--rest-scope",
        "PRINCIPAL_ROLE:ALL",
    ]
    .map(str::to_owned);
    let tables = deliver_commit_and_read_back(&stack, handle, &rest).await;
    // One append per table, plus the compactions' replace snapshots.
    assert!(server.commits_applied() >= tables);
    assert!(server.tokens_issued() >= 1);
    assert_eq!(server.unauthorized(), 0);
}

/// Delivers the independent segments through the converter (duplicated, reordered,
/// some dropped), runs two committer ticks (committing, then compacting through the
/// catalog's own pointer swap), and reads the tables back with pyiceberg through
/// `reader_args`' catalog; returns the number of tables.
async fn deliver_commit_and_read_back(
    stack: &LocalStack,
    catalogs: CatalogHandle,
    reader_args: &[String],
) -> usize {
    let etcd = Etcd::start();
    let bucket = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let generated = std::process::Command::new("python3")
        .arg(workspace_root().join("tests/independent/make_segments.py"))
        .arg("--out")
        .arg(bucket.path())
        .args(["--seed", "6"])
        .output()
        .unwrap_or_else(|e| panic!("make_segments.py: {e}"));
    assert!(
        generated.status.success(),
        "{}",
        String::from_utf8_lossy(&generated.stderr)
    );
    stack.moto.tool(&[
        "put",
        &bucket.path().to_string_lossy(),
        "s3://kafscale-segments",
    ]);
    // etcd knows every partition's end, as the broker would after its uploads.
    let keys = files(bucket.path());
    let mut topics = std::collections::BTreeSet::new();
    for key in keys.iter().filter(|k| k.ends_with(".kfs")) {
        let parts: Vec<&str> = key.split('/').collect();
        if let [_, topic, partition, _] = parts.as_slice() {
            topics.insert((*topic).to_owned());
            etcd.put(
                &format!("/kafscale/topics/{topic}/partitions/{partition}/next_offset"),
                "999999999",
            );
        }
    }
    let snapshot: Vec<Value> = topics.iter().map(|t| json!({"Topic": t})).collect();
    etcd.put(
        "/kafscale/metadata/snapshot",
        &json!({"Topics": snapshot}).to_string(),
    );

    let converter = stack.converter(catalogs.clone(), 4);
    // Events for every object, in reverse order, the first third delivered twice, and
    // the events of every fifth segment file dropped.
    let mut announced: Vec<&String> = keys
        .iter()
        .rev()
        .enumerate()
        .filter(|(i, _)| i % 5 != 0)
        .map(|(_, k)| k)
        .collect();
    let again: Vec<&String> = announced
        .iter()
        .take(announced.len() / 3)
        .copied()
        .collect();
    announced.extend(again);
    for chunk in announced.chunks(10) {
        let response = kfs_converter::handle(&converter, &kfs_testkit::s3_events_in_sqs(chunk))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(response["batchItemFailures"], json!([]), "{response}");
    }

    let committer = Committer {
        source: stack.source(),
        catalog: catalogs.clone(),
        ledger: stack.ledger(),
        config: PipelineConfig {
            max_conversions: Some(1000),
            table_concurrency: 4,
            ..PipelineConfig::default()
        },
        etcd: kfs_etcd::EtcdConnection::plain(vec![etcd.endpoint.clone()]),
        maintenance: Some(kfs_core::TickMaintenance {
            policy: MaintenancePolicy::default(),
            storage: kfs_core::MaintenanceStorage {
                s3: stack.s3.clone(),
                warehouse: stack.warehouse.clone(),
            },
        }),
        tick_log: Some(kfs_core::TickLog::new(
            stack.s3.file_io(),
            &stack.warehouse.location(),
        )),
        pacing: None,
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    let tick = handle(&committer, &json!({}), deadline)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tick["failed_tables"], json!({}), "{tick}");
    let again = handle(&committer, &json!({}), deadline)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // The last tick's summary is kept beside the tables for `kfs-iceberg status`.
    let recorded = committer
        .tick_log
        .as_ref()
        .map(|log| log.read())
        .unwrap_or_else(|| unreachable!())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(recorded, vec![again.clone()]);
    assert_eq!(
        (again["swept"].clone(), again["tables"].clone()),
        (json!(0), json!({})),
        "{again}"
    );

    let env = stack.moto.env();
    let verify = std::process::Command::new("python3")
        .arg(workspace_root().join("tests/python/verify_tables.py"))
        .args([
            "--warehouse",
            "s3://lakehouse/warehouse",
            "--no-duckdb",
            "--expected",
        ])
        .arg(bucket.path())
        .args(reader_args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap_or_else(|e| panic!("verify_tables.py: {e}"));
    assert!(
        verify.status.success(),
        "{}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
    let facts: Value = serde_json::from_slice(&verify.stdout).unwrap_or(Value::Null);
    let tables = facts.as_object().map_or(0, |t| t.len());
    assert!(tables > 0, "{facts}");
    assert_eq!(
        tick["maintenance"].as_object().map(|m| m.len()),
        Some(tables),
        "{tick}"
    );
    for (table, fact) in facts.as_object().into_iter().flatten() {
        // One append, and a replace snapshot if compaction merged several files.
        let history = fact["history"].to_string();
        match fact["snapshots"].as_u64() {
            Some(1) => assert_eq!(history, r#"["Operation.APPEND"]"#, "{table}"),
            Some(2) => {
                assert_eq!(
                    history, r#"["Operation.APPEND","Operation.REPLACE"]"#,
                    "{table}"
                );
                assert_eq!(
                    fact["data_files"].as_array().map(Vec::len),
                    Some(1),
                    "{table}"
                );
            }
            other => panic!("{table}: {other:?} snapshots: {fact}"),
        }
    }
    tables
}

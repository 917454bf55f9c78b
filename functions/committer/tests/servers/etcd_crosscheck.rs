//! The etcd cross-check end to end, against a real etcd and moto: a segment etcd has
//! not confirmed yet waits (and its partition behind it); once confirmed it commits; a
//! `next_offset` that falls below the table's watermark (topic recreated, etcd reset)
//! stops the partition with an alarm metric and loses nothing; an unreachable etcd
//! holds commits.

use std::time::{Duration, Instant};

use kfs_committer::{Committer, handle};
use kfs_core::Ledger;
use kfs_core::PipelineConfig;
use kfs_plan::crosscheck::CrossCheckPolicy;
use kfs_testkit::{Etcd, LocalStack, sample_segment, table_contents};
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn etcd_confirms_holds_and_stops() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let stack = LocalStack::start();
    let etcd = Etcd::start();
    etcd.put(
        "/kafscale/metadata/snapshot",
        r#"{"Brokers":[],"Topics":[{"Topic":"orders","Partitions":[{"Partition":0}]}]}"#,
    );
    etcd.put("/kafscale/topics/orders/partitions/0/next_offset", "10");
    let put = |stem: &str, segment: &kfs_segment::EncodedSegment| {
        stack.put(&[
            (&format!("{stem}.kfs"), &segment.kfs),
            (&format!("{stem}.index"), &segment.index),
        ]);
    };
    put(
        "default/orders/0/segment-00000000000000000000",
        &sample_segment(0, 10, b'a'),
    );
    put(
        "default/orders/0/segment-00000000000000000010",
        &sample_segment(10, 10, b'b'),
    );
    let catalog = stack.catalog_handle().await;
    let committer = Committer {
        source: stack.source(),
        catalog: catalog.clone(),
        ledger: stack.ledger(),
        config: PipelineConfig {
            // A long grace: unconfirmed segments wait for etcd during the whole test.
            crosscheck: CrossCheckPolicy {
                grace_ms: 3_600_000,
                ..CrossCheckPolicy::default()
            },
            table_concurrency: 2,
            // An entry per segment, so that etcd confirms them one at a time (a run
            // waits until etcd confirms its last offset).
            max_run_segments: Some(1),
            ..PipelineConfig::default()
        },
        etcd: kfs_etcd::EtcdConnection::plain(vec![etcd.endpoint.clone()]),
        maintenance: None,
        tick_log: None,
        pacing: None,
    };
    let deadline = || Instant::now() + Duration::from_secs(300);

    // etcd says 10: only the first segment is confirmed.
    let tick = handle(&committer, &json!({}), deadline())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        tick["tables"]["kafscale.orders"]["watermarks"],
        json!({"0": 10}),
        "{tick}"
    );
    assert_eq!(
        tick["tables"]["kafscale.orders"]["etcd_held"]
            .as_array()
            .map(Vec::len),
        Some(1),
        "{tick}"
    );
    assert_eq!(
        table_contents(catalog.catalog.as_ref(), "kafscale.orders").await,
        (10, 1)
    );

    // The broker catches up.
    etcd.put("/kafscale/topics/orders/partitions/0/next_offset", "20");
    let tick = handle(&committer, &json!({}), deadline())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        tick["tables"]["kafscale.orders"]["watermarks"],
        json!({"0": 20}),
        "{tick}"
    );
    assert_eq!(
        table_contents(catalog.catalog.as_ref(), "kafscale.orders").await,
        (20, 2)
    );

    // The topic is recreated: etcd restarts at 5, below the watermark. A new segment
    // appears; the partition stops, nothing is dropped or re-ingested.
    etcd.put("/kafscale/topics/orders/partitions/0/next_offset", "5");
    put(
        "default/orders/0/segment-00000000000000000020",
        &sample_segment(20, 10, b'c'),
    );
    let tick = handle(&committer, &json!({}), deadline())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        tick["tables"]["kafscale.orders"]["stopped_partitions"],
        json!([[0, 5, 20]]),
        "{tick}"
    );
    assert_eq!(
        table_contents(catalog.catalog.as_ref(), "kafscale.orders").await,
        (20, 2)
    );
    assert_eq!(
        committer
            .ledger
            .list(Some("pending"), None)
            .await
            .unwrap_or_default()
            .len(),
        1
    );

    // etcd goes away: commits are held, not made blind.
    drop(etcd);
    let tick = handle(&committer, &json!({}), deadline())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        tick["tables"]["kafscale.orders"]["snapshot_id"],
        json!(null),
        "{tick}"
    );
    assert_eq!(
        table_contents(catalog.catalog.as_ref(), "kafscale.orders").await,
        (20, 2)
    );
}

/// etcd as deployed: TLS with a private CA and client certificates, and
/// authentication. The committer's connection comes from its configuration (the PEM
/// files, the user, and the password from Secrets Manager) and reads the offsets; each
/// missing piece makes etcd unreachable (the policy then holds), never an open read.
#[tokio::test(flavor = "multi_thread")]
async fn etcd_over_tls_with_a_user_is_read_as_configured() {
    let stack = LocalStack::start();
    let mut etcd = Etcd::start_secure();
    etcd.enable_auth("etcd-pa55word");
    etcd.put(
        "/kafscale/metadata/snapshot",
        r#"{"Topics":[{"Topic":"orders"}]}"#,
    );
    etcd.put("/kafscale/topics/orders/partitions/0/next_offset", "42");
    let pki = etcd
        .tls
        .clone()
        .unwrap_or_else(|| unreachable!("a secure etcd"));
    let file = |name: &str| pki.join(name).to_string_lossy().into_owned();
    let secret = stack
        .moto
        .tool(&["secret", "kfs-iceberg/etcd", "etcd-pa55word"]);
    let configured = |drop: &[&str]| {
        let vars: Vec<(&str, String)> = [
            ("WAREHOUSE", "s3://lakehouse/warehouse".to_owned()),
            ("ETCD_ENDPOINTS", etcd.endpoint.clone()),
            ("ETCD_CA_FILE", file("ca.pem")),
            ("ETCD_CERT_FILE", file("client.pem")),
            ("ETCD_KEY_FILE", file("client-key.pem")),
            ("ETCD_USERNAME", "root".to_owned()),
            ("ETCD_PASSWORD_SECRET_ARN", secret.clone()),
        ]
        .into_iter()
        .filter(|(name, _)| !drop.contains(name))
        .collect();
        stack.function_env(&vars)
    };
    let read = |env: kfs_aws::function_env::FunctionEnv| async move {
        let connection = env
            .etcd_connection()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!format!("{connection:?}").contains("pa55word"));
        kfs_etcd::read_etcd(&connection, Duration::from_secs(5)).await
    };
    match read(configured(&[])).await {
        kfs_plan::crosscheck::EtcdState::Read { next_offsets, .. } => {
            assert_eq!(next_offsets.get(&("orders".to_owned(), 0)), Some(&42));
        }
        other => panic!("not read: {other:?}"),
    }
    for missing in [
        &["ETCD_USERNAME", "ETCD_PASSWORD_SECRET_ARN"][..],
        &["ETCD_CERT_FILE", "ETCD_KEY_FILE"],
        &["ETCD_CA_FILE"],
    ] {
        let state = read(configured(missing)).await;
        assert!(
            matches!(state, kfs_plan::crosscheck::EtcdState::Unreachable(_)),
            "without {missing:?}: {state:?}"
        );
    }
    // A user without a password is a configuration error at cold start.
    let error = configured(&["ETCD_PASSWORD_SECRET_ARN"])
        .etcd_connection()
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(error.contains("ETCD_PASSWORD_SECRET_ARN"), "{error}");
}

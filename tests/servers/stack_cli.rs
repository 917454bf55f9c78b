//! `kfs-iceberg --stack NAME` against a deployed stack: `template.yaml`, transformed
//! by SAM's own translator, deployed twice to moto's CloudFormation (the two stacks
//! share no name); the functions' core, configured from the deployed committer's own
//! environment, converts and commits through the stack's DynamoDB ledger and Glue
//! catalog; then the command line, given only the stack's name, reads that
//! configuration and operates the stack: `status`, `quarantine list|retry|skip` and
//! `remove-orphans`, which keeps the pending file the ledger protects.

use std::collections::{BTreeMap, HashMap};
use std::process::Command;

use kfs_core::{ConverterService, ConverterSettings, PipelineConfig, run_pass};
use kfs_plan::events::ObjectCreated;
use kfs_testkit::{Moto, sample_segment};

fn json_map(text: &str) -> BTreeMap<String, String> {
    serde_json::from_str::<BTreeMap<String, serde_json::Value>>(text)
        .unwrap_or_else(|e| panic!("{e}: {text}"))
        .into_iter()
        .map(|(k, v)| {
            let v = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
            (k, v)
        })
        .collect()
}

/// Runs `kfs-iceberg --stack <stack> <args>` with the AWS side pointing at moto.
fn cli(moto: &Moto, stack: &str, args: &[&str]) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_kfs-iceberg"))
        .args(["--stack", stack])
        .args(args)
        .envs(moto.env())
        .output()
        .unwrap_or_else(|e| panic!("kfs-iceberg: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

fn segment_key(topic: &str, base: i64, extension: &str) -> String {
    format!("default/{topic}/0/segment-{base:020}.{extension}")
}

#[test]
fn the_command_line_operates_a_deployed_stack() {
    let moto = Moto::start();
    moto.tool(&["mb", "kafscale-segments", "lakehouse"]);
    let parameters = [
        "SegmentBucketName=kafscale-segments",
        "WarehouseBucketName=lakehouse",
        "TopicsExclude=ignored.*",
    ];
    let deploy = |name: &str| {
        let mut args = vec!["stack", name];
        args.extend(parameters);
        json_map(&moto.tool(&args))
    };
    let first = deploy("kfs-one");
    let second = deploy("kfs-two");
    for (output, value) in &first {
        if output != "DashboardName" || value.contains("kfs-one") {
            assert_ne!(second.get(output), Some(value), "{output} is shared");
        }
    }
    let committer = &first["CommitterFunctionName"];
    let variables = json_map(&moto.tool(&["function-env", committer]));
    assert_eq!(variables["LEDGER_TABLE"], first["LedgerTableName"]);

    // The functions' core on the deployed configuration.
    let mut all: HashMap<String, String> = variables.into_iter().collect();
    all.extend(moto.env().into_iter().map(|(k, v)| (k.to_owned(), v)));
    let env = kfs_aws::function_env::FunctionEnv::from_lookup(&|name| all.get(name).cloned())
        .unwrap_or_else(|e| panic!("the deployed configuration: {e}"));
    let put = |objects: Vec<(String, Vec<u8>)>| {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        for (key, bytes) in &objects {
            let path = dir.path().join(key);
            std::fs::create_dir_all(path.parent().unwrap_or(dir.path()))
                .unwrap_or_else(|e| panic!("{e}"));
            std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{e}"));
        }
        moto.tool(&[
            "put",
            &dir.path().to_string_lossy(),
            "s3://kafscale-segments",
        ]);
        objects
            .iter()
            .filter(|(key, _)| key.ends_with(".kfs"))
            .map(|(key, _)| ObjectCreated {
                bucket: "kafscale-segments".into(),
                key: key.clone(),
                etag: None,
                sequencer: None,
                size: None,
            })
            .collect::<Vec<_>>()
    };
    let segment = |topic: &str, base: i64, count: i64| {
        let encoded = sample_segment(base, count, b'v');
        vec![
            (segment_key(topic, base, "kfs"), encoded.kfs),
            (segment_key(topic, base, "index"), encoded.index),
        ]
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let handle = runtime
        .block_on(env.catalog_handle())
        .unwrap_or_else(|e| panic!("{e}"));
    let converter = ConverterService::new(
        env.source().unwrap_or_else(|e| panic!("{e}")),
        handle.clone(),
        runtime.block_on(env.ledger()),
        ConverterSettings {
            bucket: env.bucket.clone(),
            prefix: env.prefix.clone(),
            naming: env.naming.clone(),
            limits: kfs_segment::DecodeLimits::default(),
            concurrency: 2,
            memory_budget_mib: None,
            retry: kfs_core::RetryPolicy::default(),
            schemas: None,
        },
    );
    let convert = |objects: &[ObjectCreated]| {
        for outcome in runtime.block_on(converter.handle(objects)) {
            outcome.unwrap_or_else(|e| panic!("convert: {e}"));
        }
    };
    let mut broken = segment("payments", 0, 3);
    broken[0].1.truncate(40);
    let broken_objects = put(broken);
    let pending_file = runtime.block_on(async {
        let source = env.source().unwrap_or_else(|e| panic!("{e}"));
        // Committed: orders 0-4. Pending: orders 5-9. Quarantined: a payments segment
        // whose bytes are broken. Never converted: a topic the stack excludes.
        let mut objects = put(segment("orders", 0, 5));
        objects.extend(broken_objects.iter().cloned());
        objects.extend(put(segment("ignored-topic", 0, 2)));
        for outcome in converter.handle(&objects).await {
            outcome.unwrap_or_else(|e| panic!("convert: {e}"));
        }
        let config = PipelineConfig {
            naming: env.naming.clone(),
            ..PipelineConfig::default()
        };
        let ledger = env.ledger().await;
        let report = run_pass(
            &source,
            handle.catalog.as_ref(),
            handle.swap.as_ref(),
            &ledger,
            &config,
            &|_| {},
        )
        .await
        .unwrap_or_else(|e| panic!("pass: {e}"));
        assert_eq!(report.unselected_topics, 1, "{report:?}");
        // As the committer records its tick, for status.
        let shard = kfs_plan::shard::Shard::default();
        env.tick_log()
            .write(shard, &report.summary(shard, kfs_core::now_ms()))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let late = put(segment("orders", 5, 5));
        for outcome in converter.handle(&late).await {
            outcome.unwrap_or_else(|e| panic!("convert: {e}"));
        }
        let entry = kfs_core::Ledger::get(&ledger, &segment_key("orders", 5, "kfs"))
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("orders 5 is not in the ledger"));
        kfs_core::converted_paths(&entry)
            .into_iter()
            .next()
            .unwrap_or_default()
    });
    assert!(
        pending_file.starts_with("s3://lakehouse/"),
        "{pending_file}"
    );

    let (ok, status) = cli(&moto, "kfs-one", &["status"]);
    assert!(ok, "{status}");
    for expected in [
        "checked), 0 segments swept",
        "table kafscale.orders",
        "freshness: newest committed record at",
        "partition 0: next offset 5",
        "pending: 1 segments",
        "quarantined default/payments/0/segment-00000000000000000000.kfs",
    ] {
        assert!(status.contains(expected), "{expected:?} in:\n{status}");
    }
    assert!(!status.contains("ignored"), "{status}");
    // The other stack has its own, empty ledger.
    let (ok, other) = cli(&moto, "kfs-two", &["status"]);
    assert!(ok && other.contains("no segments seen yet"), "{other}");

    let broken_key = segment_key("payments", 0, "kfs");
    let (ok, listed) = cli(&moto, "kfs-one", &["quarantine", "list"]);
    assert!(ok && listed.contains(&broken_key), "{listed}");
    let (ok, retried) = cli(&moto, "kfs-one", &["quarantine", "retry", &broken_key]);
    assert!(ok && retried.contains("released"), "{retried}");
    let (ok, listed) = cli(&moto, "kfs-one", &["quarantine", "list"]);
    assert!(ok && listed.contains("no quarantined segments"), "{listed}");
    let (ok, skipped) = cli(&moto, "kfs-one", &["quarantine", "skip", &broken_key]);
    assert!(!ok && skipped.contains("not quarantined"), "{skipped}");
    // Released, its event redelivered: still broken, so quarantined again; then
    // given up for good.
    convert(&broken_objects);
    let (ok, listed) = cli(&moto, "kfs-one", &["quarantine", "list"]);
    assert!(ok && listed.contains(&broken_key), "{listed}");
    let (ok, skipped) = cli(&moto, "kfs-one", &["quarantine", "skip", &broken_key]);
    assert!(ok && skipped.contains("skipped"), "{skipped}");

    // An unreferenced file beside the table's data: removed; the pending file: kept.
    let orphan_dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let data_dir = pending_file
        .trim_start_matches("s3://lakehouse/")
        .rsplit_once('/')
        .map_or("", |(dir, _)| dir);
    let orphan = orphan_dir.path().join(data_dir).join("orphan.parquet");
    std::fs::create_dir_all(orphan.parent().unwrap_or(orphan_dir.path()))
        .unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(&orphan, b"left by a crashed writer").unwrap_or_else(|e| panic!("{e}"));
    moto.tool(&[
        "put",
        &orphan_dir.path().to_string_lossy(),
        "s3://lakehouse",
    ]);
    let (ok, refused) = cli(&moto, "kfs-one", &["remove-orphans", "--older-than", "0s"]);
    assert!(!ok && refused.contains("floor"), "{refused}");
    let (ok, removed) = cli(
        &moto,
        "kfs-one",
        &["remove-orphans", "--older-than", "0s", "--force"],
    );
    assert!(ok, "{removed}");
    assert!(removed.contains("orphan.parquet"), "{removed}");
    // What it acted on, named before it acted: the stack's own configuration.
    assert!(
        removed.contains("kfs-iceberg remove-orphans on stack kfs-one:")
            && removed.contains("warehouse: s3://lakehouse")
            && removed.contains("ledger:    dynamodb:")
            && removed.contains("catalog:   glue"),
        "{removed}"
    );
    assert!(!removed.contains(&pending_file), "{removed}");
    let (ok, status) = cli(&moto, "kfs-one", &["status"]);
    assert!(ok && status.contains("pending: 1 segments"), "{status}");

    // Operator mistakes: a stack that does not exist, a stack with a warehouse.
    let (ok, missing) = cli(&moto, "kfs-none", &["status"]);
    assert!(!ok && missing.contains("kfs-none"), "{missing}");
    let (ok, both) = cli(&moto, "kfs-one", &["status", "--warehouse", "/tmp/x"]);
    assert!(!ok && both.contains("leave out --warehouse"), "{both}");
    let (ok, run) = cli(
        &moto,
        "kfs-one",
        &["run", "--source", "/tmp/x", "--warehouse", "/tmp/y"],
    );
    assert!(!ok && run.contains("committer"), "{run}");
}

//! The built converter binary under the Lambda runtime emulator: `cargo lambda watch`
//! serves it, `cargo lambda invoke --data-file events/…` delivers a sample event, and
//! the segment lands in the DynamoDB ledger on moto.
//!
//! Ignored by `cargo test`: `cargo lambda watch` builds the function, which it cannot do
//! while `cargo test` holds the target directory. CI runs it after the tests, through
//! `scripts/lambda_check.sh` (the test binary run directly, the build then incremental).

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kfs_core::Ledger;
use kfs_testkit::{LocalStack, sample_segment, workspace_root};

/// Kills the whole process group (the emulator and the function it started).
struct Group(Child);

impl Drop for Group {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            // `--`: a negative pid is a process group, not an option.
            .args(["-9", "--", &format!("-{}", self.0.id())])
            .status();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "builds the function with cargo lambda: scripts/lambda_check.sh runs it"]
async fn the_built_converter_answers_under_cargo_lambda() {
    let stack = LocalStack::start();
    let segment = sample_segment(0, 10, b'w');
    let stem = "default/orders/0/segment-00000000000000000000";
    stack.put(&[
        (&format!("{stem}.kfs"), &segment.kfs),
        (&format!("{stem}.index"), &segment.index),
    ]);
    let state = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    // cargo lambda takes a port number, not a bound socket: a free one, as free as a
    // port can be (this test runs alone, after the others).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"));
    let env = [
        format!("AWS_ENDPOINT_URL={}", stack.moto.endpoint),
        "AWS_ACCESS_KEY_ID=test".into(),
        "AWS_SECRET_ACCESS_KEY=test".into(),
        "AWS_REGION=us-east-1".into(),
        "SEGMENT_BUCKET=kafscale-segments".into(),
        "LEDGER_TABLE=kfs-ledger".into(),
        "WAREHOUSE=s3://lakehouse/warehouse".into(),
        "CATALOG_TYPE=sql".into(),
        format!("CATALOG_URI={}", state.path().join("catalog.db").display()),
    ];
    let mut watch = Command::new("cargo");
    watch
        .current_dir(workspace_root())
        .args([
            "lambda",
            "watch",
            "--ignore-changes",
            "-A",
            "127.0.0.1",
            "-P",
            &port.to_string(),
        ])
        .args(["-p", "kfs-converter", "--bin", "kfs-converter"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    for var in &env {
        watch.args(["--env-var", var]);
    }
    let _watch = Group(
        watch
            .spawn()
            .unwrap_or_else(|e| panic!("cargo lambda watch (pip install cargo-lambda): {e}")),
    );
    let deadline = Instant::now() + Duration::from_secs(600);
    let event = workspace_root().join("events/sqs-s3-put-index.json");
    let answer = loop {
        let output = Command::new("cargo")
            .current_dir(workspace_root())
            .args([
                "lambda",
                "invoke",
                "kfs-converter",
                "-A",
                "127.0.0.1",
                "-P",
                &port.to_string(),
                "--data-file",
            ])
            .arg(&event)
            .output()
            .unwrap_or_else(|e| panic!("cargo lambda invoke: {e}"));
        if output.status.success() {
            break String::from_utf8_lossy(&output.stdout).into_owned();
        }
        // The emulator compiles the function on first use: wait for it.
        assert!(
            Instant::now() < deadline,
            "invoke kept failing: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        std::thread::sleep(Duration::from_secs(2));
    };
    assert!(
        answer.contains("\"batchItemFailures\":[]") || answer.contains("\"batchItemFailures\": []"),
        "{answer}"
    );
    let entry = stack
        .ledger()
        .get(&format!("{stem}.kfs"))
        .await
        .unwrap_or_else(|e| panic!("ledger: {e}"));
    assert_eq!(entry.map(|e| e.records), Some(10));
}

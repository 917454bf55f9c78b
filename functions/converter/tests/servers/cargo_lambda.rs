//! The built converter binary under the Lambda runtime emulator: `cargo lambda watch
//! --only-lambda-apis` serves the Runtime API, the binary cargo built for these tests
//! polls it as Lambda would run it, `cargo lambda invoke --data-file events/…`
//! delivers a sample SQS event, and the segment lands in the DynamoDB ledger on moto.
//! Nothing is compiled inside the test (the emulator builds nothing in this mode), so
//! it runs in `cargo test` like any other.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kfs_core::Ledger;
use kfs_testkit::{LocalStack, sample_segment, workspace_root};

/// Kills the whole process group of a child on drop.
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

/// Starts `command` in a process group of its own.
fn spawn(command: &mut Command, what: &str) -> Group {
    Group(
        command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "{what} (in the tests' Python environment: source scripts/python-env.sh): {e}"
                )
            }),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn the_built_converter_answers_under_cargo_lambda() {
    let stack = LocalStack::start();
    let segment = sample_segment(0, 10, b'w');
    let stem = "default/orders/0/segment-00000000000000000000";
    // The segment of the SQS-wrapped EventBridge sample (what the stack delivers).
    let payments = sample_segment(0, 6, b'p');
    let payments_stem = "default/payments/2/segment-00000000000000000000";
    stack.put(&[
        (&format!("{stem}.kfs"), &segment.kfs),
        (&format!("{stem}.index"), &segment.index),
        (&format!("{payments_stem}.kfs"), &payments.kfs),
        (&format!("{payments_stem}.index"), &payments.index),
    ]);
    let state = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    // cargo lambda takes a port number, not a bound socket: a free one, and another
    // try below if the emulator cannot have it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"));
    let _emulator = spawn(
        Command::new("cargo").current_dir(workspace_root()).args([
            "lambda",
            "watch",
            "--only-lambda-apis",
            "-A",
            "127.0.0.1",
            "-P",
            &port.to_string(),
        ]),
        "cargo lambda watch",
    );
    // The runtime client gives up when the Runtime API is not there yet.
    let listening = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < listening,
            "cargo lambda watch did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let _function = spawn(
        Command::new(env!("CARGO_BIN_EXE_kfs-converter")).envs([
            (
                "AWS_LAMBDA_RUNTIME_API",
                format!("http://127.0.0.1:{port}/.rt"),
            ),
            // `_`: the emulator's one function, invoked without a name.
            ("AWS_LAMBDA_FUNCTION_NAME", "_".into()),
            ("AWS_LAMBDA_FUNCTION_VERSION", "1".into()),
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1769".into()),
            ("AWS_ENDPOINT_URL", stack.moto.endpoint.clone()),
            ("AWS_ACCESS_KEY_ID", "test".into()),
            ("AWS_SECRET_ACCESS_KEY", "test".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("SEGMENT_BUCKET", "kafscale-segments".into()),
            ("LEDGER_TABLE", "kfs-ledger".into()),
            ("WAREHOUSE", "s3://lakehouse/warehouse".into()),
            ("CATALOG_TYPE", "sql".into()),
            (
                "CATALOG_URI",
                state.path().join("catalog.db").display().to_string(),
            ),
        ]),
        "the converter binary",
    );
    for (sample, stem, records) in [
        ("sqs-s3-put-index.json", stem, 10),
        ("sqs-eventbridge-object-created.json", payments_stem, 6),
    ] {
        let answer = invoke(port, sample);
        assert!(
            answer.contains("\"batchItemFailures\":[]")
                || answer.contains("\"batchItemFailures\": []"),
            "{sample}: {answer}"
        );
        let entry = stack
            .ledger()
            .get(&format!("{stem}.kfs"))
            .await
            .unwrap_or_else(|e| panic!("ledger: {e}"));
        assert_eq!(entry.map(|e| e.records), Some(records), "{sample}");
    }
}

/// Delivers `events/<sample>` to the function behind the emulator on `port`; its
/// answer.
fn invoke(port: u16, sample: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    let event = workspace_root().join("events").join(sample);
    loop {
        // `timeout`: an invoke waits for as long as no function answers.
        let output = Command::new("timeout")
            .current_dir(workspace_root())
            .args([
                "30",
                "cargo",
                "lambda",
                "invoke",
                "-A",
                "127.0.0.1",
                "-P",
                &port.to_string(),
                "--data-file",
            ])
            .arg(&event)
            .output()
            .unwrap_or_else(|e| panic!("cargo lambda invoke (in the tests' Python environment: source scripts/python-env.sh): {e}"));
        if output.status.success() {
            return String::from_utf8_lossy(&output.stdout).into_owned();
        }
        // The emulator and the function take a moment to start.
        assert!(
            Instant::now() < deadline,
            "invoke kept failing: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

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

/// The quick code update docs/operations/deploy.md gives (`cargo lambda deploy
/// --binary-name <crate> <function>`), as far as it can run here: each binary name it
/// deploys is a function crate's binary and the template's `BuildProperties: Binary`,
/// and the pinned cargo lambda packages the built converter under it (`--dry`: the
/// archive made, nothing uploaded).
#[test]
fn the_documented_cargo_lambda_deploy_packages_the_built_function() {
    let root = workspace_root();
    let read = |path: &str| {
        std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let deploy = read("docs/operations/deploy.md");
    let template = read("template.yaml");
    for crate_dir in ["converter", "committer"] {
        let binary = format!("kfs-{crate_dir}");
        let manifest = read(&format!("functions/{crate_dir}/Cargo.toml"));
        assert!(
            manifest.contains(&format!("[[bin]]\nname = \"{binary}\"")),
            "functions/{crate_dir} builds no binary {binary}"
        );
        assert!(
            template.contains(&format!("Binary: {binary}")),
            "template.yaml builds no {binary}"
        );
        assert!(
            deploy.contains(&format!(
                "cargo lambda build --release --arm64 --locked -p {binary}"
            )) && deploy.contains(&format!("cargo lambda deploy --binary-name {binary} ")),
            "deploy.md does not build and deploy {binary}"
        );
    }
    // The built converter, where `cargo lambda build` puts it.
    let lambda_dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let function_dir = lambda_dir.path().join("kfs-converter");
    std::fs::create_dir_all(&function_dir).unwrap_or_else(|e| panic!("{e}"));
    std::fs::copy(
        env!("CARGO_BIN_EXE_kfs-converter"),
        function_dir.join("bootstrap"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let output = Command::new("cargo")
        .current_dir(&root)
        .args(["lambda", "deploy", "--dry", "--output-format", "json"])
        .arg("--lambda-dir")
        .arg(lambda_dir.path())
        .args(["--binary-name", "kfs-converter", "kfs-prod-ConverterFunction-0123ABCD"])
        .envs([
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_REGION", "us-east-1"),
        ])
        .output()
        .unwrap_or_else(|e| {
            panic!("cargo lambda deploy (in the tests' Python environment: source scripts/python-env.sh): {e}")
        });
    assert!(
        output.status.success(),
        "cargo lambda deploy --dry: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let start = stdout
        .find('{')
        .unwrap_or_else(|| panic!("no JSON: {stdout}"));
    let plan: serde_json::Value = serde_json::from_str(&stdout[start..])
        .unwrap_or_else(|e| panic!("cargo lambda deploy --dry printed {stdout}: {e}"));
    assert_eq!(plan["files"], serde_json::json!(["bootstrap"]), "{plan}");
    assert_eq!(plan["config"]["runtime"], "provided.al2023", "{plan}");
    // Nothing of the function's configuration is changed by the documented command.
    for setting in ["memory", "timeout", "env_var", "role"] {
        assert!(plan["config"][setting].is_null(), "{setting}: {plan}");
    }
    let archive = plan["path"].as_str().unwrap_or_default();
    assert!(
        std::path::Path::new(archive).is_file(),
        "no archive at {archive}: {plan}"
    );
}

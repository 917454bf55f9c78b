//! End to end: the first hour's wrong paths. `run --source` given a path that does not
//! exist, an empty folder, a file, a segment file, a namespace, topic or partition
//! folder, or the folder above the bucket's root; `status`, `quarantine`, `progress` and
//! the maintenance commands given a warehouse that does not exist or is no warehouse; a
//! warehouse that is a file; S3 without AWS credentials. Each exits 2 (1 for missing
//! credentials), says what is wrong and what to do in one line, and creates nothing.
//! And the quick start's own steps: the run counts every segment, and `status` after a
//! second run does not read as if nothing had been committed.

use crate::support;

use std::path::Path;
use std::process::Output;

use support::{files_under, kfs, kfs_ok, output_of, tempdir};

/// `kfs-iceberg ARGS`, which must fail with `code` on one line of stderr containing
/// every one of `words`; its stderr.
fn refused(args: &[&str], code: i32, words: &[&str]) -> String {
    let output = output_of(kfs().args(args));
    check_refused(&output, args, code, words)
}

fn check_refused(output: &Output, args: &[&str], code: i32, words: &[&str]) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(code), "{args:?}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    for word in words {
        assert!(stderr.contains(word), "{args:?}: no {word:?} in {stderr}");
    }
    stderr
}

/// Sample segments under `dir/src`: `dir/src/default/<topic>/<partition>/segment-*`.
fn sample(dir: &Path) -> String {
    let src = dir.join("src").display().to_string();
    kfs_ok(&["gen", "--out", &src, "--topics", "1", "--partitions", "1"]);
    src
}

fn run_into(source: &str, warehouse: &str) -> Vec<String> {
    vec![
        "run".into(),
        "--quiet".into(),
        "--source".into(),
        source.into(),
        "--warehouse".into(),
        warehouse.into(),
    ]
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

#[test]
fn a_source_that_is_missing_empty_or_a_file_is_refused_and_creates_nothing() {
    let dir = tempdir();
    let src = sample(dir.path());
    let wh = dir.path().join("wh").display().to_string();
    let missing = dir.path().join("nope").display().to_string();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap_or_else(|e| panic!("{e}"));
    let empty = empty.display().to_string();
    let segment = format!("{src}/default/orders/0/segment-00000000000000000000.kfs");
    let stray = dir.path().join("notes.txt");
    std::fs::write(&stray, "not a segment").unwrap_or_else(|e| panic!("{e}"));
    let stray = stray.display().to_string();
    let no_segments = dir.path().join("other");
    std::fs::create_dir_all(no_segments.join("a/b")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(no_segments.join("a/b/data.json"), "{}").unwrap_or_else(|e| panic!("{e}"));
    let no_segments = no_segments.display().to_string();
    // A segment whose topic folder is no Kafka topic name (the run would ignore it).
    let bad = dir.path().join("bad");
    std::fs::create_dir_all(bad.join("default/no topic/0")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::copy(
        &segment,
        bad.join("default/no topic/0/segment-00000000000000000000.kfs"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let bad = bad.display().to_string();
    let cases: [(&str, &[&str]); 6] = [
        (
            &bad,
            &["default/no topic/0/segment-00000000000000000000.kfs is not in the layout"],
        ),
        (&missing, &["does not exist", "kfs-iceberg gen --out"]),
        (
            &empty,
            &["is empty", "<namespace>/<topic>/<partition>/segment-"],
        ),
        (
            &segment,
            &[
                "is a segment file",
                "folder above the namespace",
                "kfs-iceberg dump",
            ],
        ),
        (&stray, &["is a file, not a folder"]),
        (&no_segments, &["none of its 1 files is a segment file"]),
    ];
    for (source, words) in cases {
        let args = run_into(source, &wh);
        let stderr = refused(&strs(&args), 2, words);
        assert!(stderr.contains(source), "{stderr}");
        assert!(
            !Path::new(&wh).exists(),
            "{source}: the warehouse was created"
        );
    }
}

#[test]
fn a_namespace_topic_or_partition_folder_names_the_folder_above_the_namespace() {
    let dir = tempdir();
    let src = sample(dir.path());
    let wh = dir.path().join("wh").display().to_string();
    for (source, what) in [
        (format!("{src}/default"), "is a namespace folder"),
        (format!("{src}/default/orders"), "is a topic folder"),
        (format!("{src}/default/orders/0"), "is a partition folder"),
    ] {
        let args = run_into(&source, &wh);
        refused(
            &strs(&args),
            2,
            &[
                what,
                "point --source at the folder above the namespace",
                &format!("({src})"),
            ],
        );
        assert!(
            !Path::new(&wh).exists(),
            "{source}: the warehouse was created"
        );
    }
    // One level too high: the folder below is named.
    let above = dir.path().display().to_string();
    let args = run_into(&above, &wh);
    refused(
        &strs(&args),
        2,
        &["1 level(s) too deep", &format!("point --source at {src}")],
    );
    assert!(!Path::new(&wh).exists());
}

#[test]
fn read_only_and_maintenance_commands_never_create_a_warehouse() {
    let dir = tempdir();
    let wh = dir.path().join("wh").display().to_string();
    let commands: [&[&str]; 8] = [
        &["status"],
        &["quarantine", "list"],
        &["quarantine", "retry", "--all"],
        &["progress", "keep", "--table", "kafscale.orders"],
        &["maintain"],
        &["compact"],
        &["expire-snapshots"],
        &["remove-orphans", "--dry-run"],
    ];
    for command in commands {
        let mut args = command.to_vec();
        args.extend(["--warehouse", &wh]);
        refused(
            &args,
            2,
            &["--warehouse", &wh, "does not exist", "kfs-iceberg run"],
        );
        assert!(
            !Path::new(&wh).exists(),
            "{command:?} created the warehouse"
        );
    }
    // A folder that is no warehouse is left as it was.
    let plain = dir.path().join("plain");
    std::fs::create_dir(&plain).unwrap_or_else(|e| panic!("{e}"));
    let plain = plain.display().to_string();
    refused(
        &["status", "--warehouse", &plain],
        2,
        &["is not a kfs-iceberg warehouse", "catalog.db"],
    );
    assert!(
        files_under(Path::new(&plain)).is_empty(),
        "status wrote into {plain}"
    );
    // An S3 warehouse's state folder, likewise.
    let state = dir.path().join("state").display().to_string();
    refused(
        &["status", "--warehouse", "s3://bucket/wh", "--state", &state],
        2,
        &["--state", "does not exist"],
    );
    assert!(!Path::new(&state).exists());
}

#[test]
fn a_warehouse_that_is_a_file_says_so() {
    let dir = tempdir();
    let src = sample(dir.path());
    let file = dir.path().join("wh.txt");
    std::fs::write(&file, "x").unwrap_or_else(|e| panic!("{e}"));
    let file = file.display().to_string();
    let args = run_into(&src, &file);
    for args in [strs(&args), vec!["status", "--warehouse", &file]] {
        let stderr = refused(&args, 2, &[&file, "is a file, not a folder"]);
        assert!(!stderr.contains("os error"), "{stderr}");
    }
    assert_eq!(std::fs::read_to_string(&file).ok().as_deref(), Some("x"));
}

#[test]
fn s3_without_credentials_names_the_variables_and_creates_nothing() {
    let dir = tempdir();
    let src = sample(dir.path());
    let wh = dir.path().join("wh").display().to_string();
    let state = dir.path().join("state").display().to_string();
    let nowhere = dir.path().join("no-aws-config").display().to_string();
    let without_credentials = |args: &[&str]| {
        let mut command = kfs();
        for name in [
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AWS_PROFILE",
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            "AWS_ROLE_ARN",
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        ] {
            command.env_remove(name);
        }
        command
            .env("AWS_CONFIG_FILE", &nowhere)
            .env("AWS_SHARED_CREDENTIALS_FILE", &nowhere)
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("AWS_REGION", "eu-west-1")
            .args(args);
        output_of(&mut command)
    };
    let words = [
        "no AWS credentials",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_PROFILE",
        "AWS_REGION",
    ];
    let from_s3 = run_into("s3://kfs-first-hour/segments", &wh);
    let output = without_credentials(&strs(&from_s3));
    let stderr = check_refused(&output, &strs(&from_s3), 1, &words);
    assert!(stderr.contains("s3://kfs-first-hour/segments"), "{stderr}");
    assert!(!stderr.contains("reqsign"), "{stderr}");
    assert!(!Path::new(&wh).exists());
    let into_s3 = [
        "run",
        "--quiet",
        "--source",
        &src,
        "--warehouse",
        "s3://kfs-first-hour/wh",
        "--state",
        &state,
    ];
    let output = without_credentials(&into_s3);
    let stderr = check_refused(&output, &into_s3, 1, &words);
    assert!(stderr.contains("s3://kfs-first-hour/wh"), "{stderr}");
    assert!(!Path::new(&state).exists());
}

#[test]
fn the_quick_start_counts_every_segment_and_status_says_what_is_committed() {
    let dir = tempdir();
    let src = dir.path().join("bucket").display().to_string();
    let wh = dir.path().join("warehouse").display().to_string();
    // Small segments of one partition are converted as one run (one file).
    kfs_ok(&["gen", "--out", &src, "--segments", "4"]);
    let first = kfs_ok(&["run", "--source", &src, "--warehouse", &wh]);
    assert!(first.contains("16 converted"), "{first}");
    let status = kfs_ok(&["status", "--warehouse", &wh]);
    assert!(status.contains("2 tables committed"), "{status}");
    // A second run finds nothing new; status does not read as if nothing were there.
    kfs_ok(&["run", "--quiet", "--source", &src, "--warehouse", &wh]);
    let status = kfs_ok(&["status", "--warehouse", &wh]);
    assert!(!status.contains("0 tables committed"), "{status}");
    assert!(status.contains("nothing new to convert"), "{status}");
    for table in ["kafscale.orders", "kafscale.payments"] {
        assert!(status.contains(&format!("table {table}")), "{status}");
    }
    assert!(status.contains("last commit: snapshot"), "{status}");
    // The sample data is recent: its freshness reads in hours of a day or two, not
    // thousands of hours.
    for line in status.lines().filter(|l| l.contains("freshness:")) {
        let hours = line
            .rsplit_once('(')
            .and_then(|(_, age)| age.split_once('h'))
            .and_then(|(hours, _)| hours.parse::<u32>().ok());
        assert!(hours.is_some_and(|h| h < 48), "{line}");
    }
    assert!(status.contains("freshness:"), "{status}");
}

/// A reader that closes the pipe (`kfs-iceberg status | head`) ends the command as
/// SIGPIPE ends other tools (status 141), never with a panic.
#[test]
fn a_closed_standard_output_ends_the_command_quietly() {
    let dir = tempdir();
    let source = sample(dir.path());
    let warehouse = dir.path().join("warehouse").to_string_lossy().into_owned();
    kfs_ok(&strs(&run_into(&source, &warehouse)));
    let mut child = kfs()
        .args(["status", "--warehouse", &warehouse])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    // The reader goes away before the first line is written.
    drop(child.stdout.take());
    let output = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("wait: {e}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(output.status.code(), Some(141), "{stderr}");
}

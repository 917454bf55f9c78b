//! `kfs-iceberg run --follow`: passes one after another while segments keep arriving,
//! `/metrics` and `/healthz` served meanwhile, SIGTERM and SIGINT ending it with exit 0
//! after the pass under way; the tables then hold every offset of every complete
//! segment exactly once (`tests/python/verify_tables.py`).

use crate::run_local::verify;
use crate::support;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use support::{files_under, independent_bucket, kfs, tempdir};

/// A follow-mode process and the lines it prints.
struct Following {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Following {
    fn start(source: &Path, warehouse: &Path) -> Self {
        let mut child = kfs()
            .args(["run", "--follow", "--interval", "100ms"])
            .args(["--metrics-addr", "127.0.0.1:0", "--source"])
            .arg(source)
            .arg("--warehouse")
            .arg(warehouse)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("kfs-iceberg run --follow: {e}"));
        let stdout: ChildStdout = child
            .stdout
            .take()
            .unwrap_or_else(|| panic!("no standard output"));
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        Self { child, lines }
    }

    /// The first printed line containing `needle`, within a minute.
    fn line_with(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => {}
                Err(e) => panic!("no line with {needle:?}: {e}"),
            }
        }
        panic!("no line with {needle:?} within a minute")
    }

    fn signal(&self, name: &str) {
        let sent = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap_or_else(|e| panic!("kill: {e}"));
        assert!(sent.success(), "kill -{name}");
    }

    /// Waits for the exit (within a minute); the exit code.
    fn exit_code(&mut self) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap_or(None) {
                return status.code();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("run --follow did not stop within a minute of the signal");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Following {
    /// A test that failed does not leave its follow mode running.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The address the follow mode says it serves its metrics at.
fn metrics_address(follow: &Following) -> String {
    follow
        .line_with("metrics at http://")
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no metrics address"))
}

/// One HTTP GET of `path` at `addr`: the status line and the body.
fn get(addr: &str, path: &str) -> (String, String) {
    let mut stream =
        std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n")
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (
        head.lines().next().unwrap_or("").to_owned(),
        body.to_owned(),
    )
}

/// The value of an unlabelled metric.
fn metric(addr: &str, name: &str) -> f64 {
    let (_, body) = get(addr, "/metrics");
    body.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no metric {name} in:\n{body}"))
}

/// Copies a file as an upload appears: whole, under its final name at once.
fn upload(from_root: &Path, file: &Path, to_root: &Path) {
    let target = to_root.join(file.strip_prefix(from_root).unwrap_or(file));
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{}: {e}", parent.display()));
    }
    let partial = target.with_extension("part");
    std::fs::copy(file, &partial).unwrap_or_else(|e| panic!("{}: {e}", partial.display()));
    std::fs::rename(&partial, &target).unwrap_or_else(|e| panic!("{}: {e}", target.display()));
}

#[test]
fn follow_takes_segments_as_they_arrive_serves_metrics_and_stops_on_sigterm() {
    let full = tempdir();
    let source = tempdir();
    let warehouse = tempdir();
    independent_bucket(4, full.path());
    let mut follow = Following::start(source.path(), warehouse.path());
    let addr = metrics_address(&follow);
    let (status, _) = get(&addr, "/healthz");
    assert!(status.contains("200"), "{status}");

    // Objects arrive a few at a time, each segment's index before its data, while the
    // passes go on: every pass takes what is complete by then.
    let mut files: Vec<PathBuf> = files_under(full.path());
    files.sort_by_key(|f| {
        (
            f.with_extension(""),
            f.extension().is_none_or(|e| e != "index"),
        )
    });
    // A segment without its index never completes: it is not counted.
    let segments = files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "kfs") && f.with_extension("index").exists())
        .count();
    for chunk in files.chunks(5) {
        for file in chunk {
            upload(full.path(), file, source.path());
        }
        std::thread::sleep(Duration::from_millis(150));
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while metric(&addr, "kfs_segments_converted_total") < segments as f64 {
        assert!(
            Instant::now() < deadline,
            "not every segment converted within two minutes"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The conversions of the last pass are committed by that pass.
    let passes = metric(&addr, "kfs_passes_total");
    while metric(&addr, "kfs_passes_total") < passes + 1.0 {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(metric(&addr, "kfs_passes_total") >= 2.0);
    let (_, body) = get(&addr, "/metrics");
    assert!(body.contains("kfs_table_commits_total{table=\""), "{body}");
    assert!(metric(&addr, "kfs_pass_failures_total") == 0.0, "{body}");

    follow.signal("TERM");
    follow.line_with("stopped after the pass under way");
    assert_eq!(follow.exit_code(), Some(0));
    // Every offset of every segment, once, as the independent checker reads them.
    verify(&warehouse.path().to_string_lossy(), source.path(), &[], &[]);
}

#[test]
fn follow_waits_on_an_empty_folder_and_stops_on_sigint() {
    let source = tempdir();
    let warehouse = tempdir();
    let mut follow = Following::start(source.path(), warehouse.path());
    follow.line_with("following ");
    follow.signal("INT");
    follow.line_with("stopped after the pass under way");
    assert_eq!(follow.exit_code(), Some(0));
}

#[test]
fn follow_options_need_follow() {
    let out = kfs()
        .args([
            "run",
            "--interval",
            "1s",
            "--source",
            ".",
            "--warehouse",
            ".",
        ])
        .output()
        .unwrap_or_else(|e| panic!("kfs-iceberg: {e}"));
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--follow"), "{stderr}");
}

/// What a careless or hostile client sends to the metrics address: bytes that are no
/// HTTP, a head that never ends, another method, a connection dropped at once. Each
/// gets an answer or nothing, the server keeps serving, and the loop keeps going.
#[test]
fn malformed_metrics_requests_are_answered_and_change_nothing() {
    let source = tempdir();
    let warehouse = tempdir();
    let follow = Following::start(source.path(), warehouse.path());
    let addr = metrics_address(&follow);
    let exchange = |request: &[u8]| -> String {
        let mut stream =
            std::net::TcpStream::connect(&addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        // The server may answer (and close) before reading all of a long request.
        let _ = stream.write_all(request);
        let _ = stream.shutdown(std::net::Shutdown::Write);
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        response.lines().next().unwrap_or("").to_owned()
    };
    let garbage: Vec<u8> = (0..=255u8).chain(*b"\r\n\r\n").collect();
    assert!(exchange(&garbage).contains("405"), "garbage");
    assert!(
        exchange(b"POST /metrics HTTP/1.1\r\n\r\n").contains("405"),
        "POST"
    );
    assert!(
        exchange(b"GET /../../etc/passwd HTTP/1.1\r\n\r\n").contains("404"),
        "a path of its own"
    );
    let endless: Vec<u8> = b"GET /metrics HTTP/1.1\r\nX: "
        .iter()
        .copied()
        .chain(std::iter::repeat_n(b'a', 200_000))
        .collect();
    assert!(exchange(&endless).contains("431"), "an endless head");
    drop(std::net::TcpStream::connect(&addr));
    let (status, _) = get(&addr, "/healthz");
    assert!(status.contains("200"), "{status}");
    assert!(metric(&addr, "kfs_passes_total") >= 0.0);
}

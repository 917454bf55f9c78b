//! `kfs-iceberg dead-letters replay` end to end: records whose schema ids a registry
//! did not know (`scripts/registry_stub.py --mode missing`) become dead letters; once
//! the registry knows them (`--mode found`), the replay appends each of them to the
//! table exactly once, and a second replay appends nothing.

use crate::support;

use std::path::Path;
use std::process::{Child, Command};

use serde_json::Value;
use support::{kfs_ok, repo, succeed, tempdir};

/// The stub registry, stopped when dropped.
struct Stub {
    child: Child,
    url: String,
}

impl Stub {
    fn start(dir: &Path, mode: &str) -> Self {
        let port_file = dir.join(format!("{mode}.port"));
        let child = Command::new("python3")
            .arg(repo().join("scripts/registry_stub.py"))
            .arg("--port-file")
            .arg(&port_file)
            .args(["--latency-ms", "1", "--mode", mode])
            .spawn()
            .unwrap_or_else(|e| panic!("registry_stub.py: {e}"));
        // Killed and waited for when dropped, on every path.
        let mut stub = Self {
            child,
            url: String::new(),
        };
        for _ in 0..200 {
            if let Ok(port) = std::fs::read_to_string(&port_file) {
                stub.url = format!("http://127.0.0.1:{port}");
                return stub;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("the stub registry did not start");
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn bench(args: &[&str], path: &Path) -> String {
    let out = succeed(
        Command::new("python3")
            .arg(repo().join("scripts/registry_lookup_bench.py"))
            .args(args)
            .arg(path),
        "registry_lookup_bench.py",
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn counts(warehouse: &Path) -> (u64, u64) {
    let facts: Value = serde_json::from_str(&bench(&["--count"], warehouse))
        .unwrap_or_else(|e| panic!("counts: {e}"));
    (
        facts["rows"].as_u64().unwrap_or(u64::MAX),
        facts["dead_letters"].as_u64().unwrap_or(u64::MAX),
    )
}

#[test]
fn dead_letters_of_unknown_schemas_are_replayed_once_the_registry_knows_them() {
    let dir = tempdir();
    let (source, warehouse) = (dir.path().join("source"), dir.path().join("warehouse"));
    bench(&["--ids", "5", "--write-segment"], &source);
    let (src, wh) = (source.to_string_lossy(), warehouse.to_string_lossy());
    {
        let missing = Stub::start(dir.path(), "missing");
        kfs_ok(&[
            "run",
            "--quiet",
            "--value-format",
            "registry",
            "--schema-registry-url",
            &missing.url,
            "--source",
            &src,
            "--warehouse",
            &wh,
        ]);
    }
    assert_eq!(counts(&warehouse), (0, 5));
    let found = Stub::start(dir.path(), "found");
    let replay = [
        "dead-letters",
        "replay",
        "--table",
        "kafscale.orders",
        "--schema-registry-url",
        &found.url,
        "--warehouse",
        &wh,
    ];
    let first = kfs_ok(&replay);
    // The dead-letter rows stay; the table gains each record once.
    assert_eq!(counts(&warehouse), (5, 5), "{first}");
    let again = kfs_ok(&replay);
    assert_eq!(counts(&warehouse), (5, 5), "{again}");
    assert_ne!(
        first, again,
        "the second replay must say it replayed nothing new"
    );
}

//! `--value-format registry` end to end (and JSON values of JSON Schema versions, on a
//! second topic): Avro values encoded by fastavro with
//! Confluent's framing across three schema versions (fields added, removed, promoted),
//! their schemas served by a registry that follows the Confluent REST API and wants
//! basic authentication (`tests/python/check_registry.py serve`), converted by
//! `kfs-iceberg run` in two passes (the table's schema grows between them), read back
//! by pyiceberg and DuckDB: the encoded values, field ids stable, an incompatible
//! version, an unknown id, an unframed value and a payload cut short in the
//! dead-letter table with their reasons, every record once. Protobuf values likewise:
//! encoded by Google's protobuf library from schemas that protoc compiled from the
//! registry's text, three versions (the third the second message of its file and
//! importing another by a registry reference), and what a table of them cannot hold.

use crate::support;

use std::path::Path;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use support::{kfs, output_of, repo, succeed, tempdir};

/// The registry server, stopped when dropped.
pub(crate) struct Registry {
    child: Child,
    /// Its base URL, without credentials.
    pub(crate) url: String,
}

/// The password the registry server wants (user `kfs`).
pub(crate) const PASSWORD: &str = "s3cret-registry";

impl Registry {
    /// Starts the server, wanting user `kfs` and [`PASSWORD`].
    pub(crate) fn start(dir: &Path) -> Self {
        let port_file = dir.join("registry.port");
        let child = Command::new("python3")
            .arg(repo().join("tests/python/check_registry.py"))
            .args([
                "serve",
                "--user",
                "kfs",
                "--password",
                PASSWORD,
                "--port-file",
            ])
            .arg(&port_file)
            .spawn()
            .unwrap_or_else(|e| panic!("check_registry.py serve: {e}"));
        let started = Instant::now();
        let port = loop {
            if let Ok(port) = std::fs::read_to_string(&port_file) {
                break port;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the registry did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        Self {
            child,
            url: format!("http://127.0.0.1:{}", port.trim()),
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes part `part` of the registry-encoded segments into `dir`.
pub(crate) fn make(dir: &Path, part: &str) {
    succeed(
        Command::new("python3")
            .arg(repo().join("tests/python/check_registry.py"))
            .arg("make")
            .arg(dir)
            .args(["--part", part]),
        "check_registry.py make",
    );
}

/// A registry wanting basic authentication, its credentials' file, a source and a
/// warehouse.
struct Setup {
    dir: tempfile::TempDir,
    registry: Registry,
    credentials: std::path::PathBuf,
    source: std::path::PathBuf,
    warehouse: std::path::PathBuf,
}

impl Setup {
    fn new() -> Self {
        let dir = tempdir();
        let registry = Registry::start(dir.path());
        let credentials = dir.path().join("registry.json");
        std::fs::write(
            &credentials,
            r#"{"username": "kfs", "password": "s3cret-registry"}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        Self {
            source: dir.path().join("segments"),
            warehouse: dir.path().join("warehouse"),
            dir,
            registry,
            credentials,
        }
    }

    /// `kfs-iceberg run --value-format registry` with `extra` flags and `credentials`:
    /// its output, which never holds the password.
    fn run(&self, extra: &[&str], credentials: &Path, warehouse: &Path) -> Output {
        let out = output_of(
            kfs()
                .args(["run", "--quiet", "--value-format", "registry"])
                .args(extra)
                .args(["--schema-registry-url", &self.registry.url])
                .arg("--schema-registry-credentials")
                .arg(credentials)
                .arg("--source")
                .arg(&self.source)
                .arg("--warehouse")
                .arg(warehouse),
        );
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !text.contains("s3cret-registry") && !text.contains("nope"),
            "credentials printed: {text}"
        );
        out
    }

    /// A run that succeeds, with no segment quarantined: its output.
    fn converts(&self, extra: &[&str]) -> String {
        let out = self.run(extra, &self.credentials, &self.warehouse);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success() && text.contains("0 quarantined"),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    }

    /// `check_registry.py CHECK --warehouse`: the facts it prints.
    fn check(&self, check: &str) -> String {
        let out = succeed(
            Command::new("python3")
                .arg(repo().join("tests/python/check_registry.py"))
                .arg(check)
                .arg("--warehouse")
                .arg(&self.warehouse),
            "check_registry.py",
        );
        let facts = String::from_utf8_lossy(&out.stdout).into_owned();
        println!("{facts}");
        facts
    }
}

#[test]
fn avro_values_of_three_schema_versions_become_typed_columns() {
    let setup = Setup::new();
    make(&setup.source, "1");
    make(&setup.source, "3");
    setup.converts(&[]);
    make(&setup.source, "2");
    setup.converts(&[]);
    let facts = setup.check("check");
    assert!(
        facts.contains(r#""rows": 6"#)
            && facts.contains(r#""duckdb_rows": 6"#)
            && facts.contains(r#""json_schema_duckdb_rows": 3"#),
        "{facts}"
    );

    // Refused credentials are for the operator: the run fails and says so, and the
    // segment waits (nothing is dead-lettered or quarantined for it).
    let wrong = setup.dir.path().join("wrong.json");
    std::fs::write(&wrong, r#"{"username": "kfs", "password": "nope"}"#)
        .unwrap_or_else(|e| panic!("{e}"));
    let refused = setup.run(&[], &wrong, &setup.dir.path().join("other-warehouse"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&refused.stdout),
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(!refused.status.success() && text.contains("401"), "{text}");
    assert!(
        !text.contains(" 1 quarantined") && !text.contains("dead letter"),
        "{text}"
    );
}

#[test]
fn protobuf_values_of_three_schema_versions_become_typed_columns() {
    let setup = Setup::new();
    make(&setup.source, "4");
    setup.converts(&[]);
    let facts = setup.check("check-protobuf");
    assert!(
        facts.contains(r#""protobuf_rows": 7"#) && facts.contains(r#""duckdb_rows": 7"#),
        "{facts}"
    );
}

#[test]
fn keys_framed_for_the_registry_become_a_typed_struct() {
    let setup = Setup::new();
    make(&setup.source, "5");
    setup.converts(&["--key-format", "registry"]);
    let facts = setup.check("check-keys");
    assert!(
        facts.contains(r#""keyed_rows": 4"#) && facts.contains(r#""duckdb_rows": 4"#),
        "{facts}"
    );

    // Keys are decoded in registry tables only: refused at load otherwise.
    let refused = output_of(
        kfs()
            .args(["run", "--quiet", "--key-format", "registry", "--source"])
            .arg(&setup.source)
            .arg("--warehouse")
            .arg(setup.dir.path().join("raw")),
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("key_format registry"),
        "{stderr}"
    );
}

#[test]
fn a_registry_table_without_a_registry_is_refused_at_the_start() {
    let dir = tempdir();
    let out = output_of(
        kfs()
            .args(["run", "--quiet", "--value-format", "registry", "--source"])
            .arg(dir.path())
            .arg("--warehouse")
            .arg(dir.path().join("wh")),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("schema registry"),
        "{stderr}"
    );
}

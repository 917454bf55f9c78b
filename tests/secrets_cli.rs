//! Secrets given in URLs never leave the process: a schema registry URL carrying
//! `user:password@` (and a `token=` parameter) and a PostgreSQL catalog URI carrying a
//! password, through `kfs-iceberg run` and `status`, when the registry answers and
//! when it cannot be reached: no output and no file written under the run's
//! directories holds the secret.

use crate::registry_cli::{PASSWORD, Registry, make};
use crate::support;

use std::path::Path;

use support::{files_under, kfs, output_of, tempdir};

/// The catalog URI's password.
const CATALOG_SECRET: &str = "s3cr3t-XYZ";

/// Runs `kfs-iceberg` with `args` in `dir`: its exit status and its output, which
/// never holds a secret.
fn run(args: &[&str], dir: &Path) -> (bool, String) {
    let out = output_of(
        kfs()
            .args(args)
            .arg("--warehouse")
            .arg(dir.join("warehouse"))
            .current_dir(dir),
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for secret in [PASSWORD, CATALOG_SECRET] {
        assert!(!text.contains(secret), "{args:?} printed {secret}: {text}");
    }
    (out.status.success(), text)
}

#[test]
fn secrets_in_urls_are_never_printed_nor_written() {
    let dir = tempdir();
    let registry = Registry::start(dir.path());
    let source = dir.path().join("segments");
    make(&source, "1");
    let source = source.to_string_lossy().into_owned();
    let with_password = registry
        .url
        .replacen("http://", &format!("http://kfs:{PASSWORD}@"), 1);
    let run_with = |url: &str| {
        let args = [
            "run",
            "--value-format",
            "registry",
            "--schema-registry-url",
            url,
            "--source",
            &source,
        ];
        run(&args, dir.path())
    };

    // The password in the URL authenticates: the values convert.
    let (ok, text) = run_with(&with_password);
    assert!(ok && text.contains("0 quarantined"), "{text}");
    // A registry that cannot be reached: the run says where, without the password.
    make(dir.path().join("segments").as_path(), "3");
    let unreachable = format!("http://kfs:{PASSWORD}@127.0.0.1:9/x?token={PASSWORD}");
    let (_, text) = run_with(&unreachable);
    assert!(text.contains("127.0.0.1:9"), "{text}");
    // A URL that is not one the registry can be: refused, without the password.
    let (ok, text) = run_with(&format!("ftp://kfs:{PASSWORD}@registry"));
    assert!(!ok && text.contains("ftp://kfs:***@registry"), "{text}");
    let (ok, text) = run(&["status"], dir.path());
    assert!(ok, "{text}");

    // A PostgreSQL catalog that cannot be reached, and a URI that is none.
    let postgres = format!("postgres://kfs:{CATALOG_SECRET}@127.0.0.1:9/iceberg");
    let mysql = format!("mysql://kfs:{CATALOG_SECRET}@127.0.0.1:9/iceberg");
    for uri in [&postgres, &mysql] {
        for command in ["run", "status"] {
            let mut args = vec![command, "--catalog-type", "sql", "--catalog-uri", uri];
            if command == "run" {
                args.extend(["--source", &source]);
            }
            let (ok, text) = run(&args, dir.path());
            assert!(!ok, "{args:?}: {text}");
        }
    }

    // Nothing written under the directory holds a secret.
    let written = files_under(dir.path());
    assert!(
        written.iter().any(|f| f.ends_with("shard-0.json")),
        "no tick log among {written:?}"
    );
    for file in written {
        let bytes = std::fs::read(&file).unwrap_or_default();
        for secret in [PASSWORD, CATALOG_SECRET] {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{} holds {secret}",
                file.display()
            );
        }
    }
}

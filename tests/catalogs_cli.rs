//! `kfs-iceberg run` against a catalog other than the embedded one: an Iceberg REST
//! catalog (the in-process server that follows the REST spec) with OAuth2 client
//! credentials read from a file, the REST warehouse name apart from the storage
//! location. pyiceberg reads the tables back through the same REST catalog and finds
//! exactly the encoded rows; a rerun commits nothing; the secret is never printed; a
//! missing option or a bad credentials file is refused with what is wrong. (The SQL
//! catalog on PostgreSQL: `servers::postgres_cli`.)

use crate::support;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output};

use kfs_testkit::rest_catalog::{RestCatalogServer, RestServerConfig};
use support::{kfs, output_of, repo, succeed, tempdir, write_expected};

const SECRET: &str = "s3cr3t-value";

/// `kfs-iceberg run` against the REST catalog at `uri`, on a blocking thread (the
/// server runs on this test's runtime).
async fn run_rest(source: &Path, state: &Path, uri: &str, credentials: &Path) -> Output {
    let mut command = kfs();
    command
        .args(["run", "--quiet", "--source"])
        .arg(source)
        .arg("--warehouse")
        .arg(state.join("unused-warehouse"))
        .arg("--state")
        .arg(state)
        .args(["--catalog-type", "rest", "--catalog-uri", uri])
        .args(["--rest-warehouse", "lake", "--catalog-credentials"])
        .arg(credentials);
    tokio::task::spawn_blocking(move || output_of(&mut command))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_commits_to_a_rest_catalog_with_client_credentials_from_a_file() {
    let dir = tempdir();
    let source = dir.path().join("bucket");
    succeed(
        kfs().arg("gen").arg("--out").arg(&source).args([
            "--topics",
            "2",
            "--segments",
            "2",
            "--records",
            "100",
        ]),
        "gen",
    );
    write_expected(&source);
    let storage = dir.path().join("rest-storage");
    std::fs::create_dir_all(&storage).unwrap_or_else(|e| panic!("{e}"));
    let server = RestCatalogServer::start(RestServerConfig {
        warehouse_name: "lake".into(),
        storage_root: format!("file://{}", storage.display()),
        file_io: iceberg::io::FileIO::new_with_fs(),
        client_defaults: HashMap::new(),
        credential: Some(("kfs".into(), SECRET.into())),
        scope: None,
        static_tokens: Vec::new(),
    })
    .await
    .unwrap_or_else(|e| panic!("REST server: {e}"));
    let credentials = dir.path().join("credentials.json");
    std::fs::write(
        &credentials,
        format!(r#"{{"client_id": "kfs", "client_secret": "{SECRET}"}}"#),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let state = dir.path().join("state");

    let first = run_rest(&source, &state, &server.uri(), &credentials).await;
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&first.stdout),
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(first.status.success(), "{printed}");
    assert!(
        !printed.contains(SECRET),
        "the secret was printed: {printed}"
    );
    let commits = server.commits_applied();
    assert!(commits >= 2, "one commit per table: {commits}");
    assert!(server.tokens_issued() >= 1);

    let uri = server.uri();
    let expected = source.clone();
    let verified = tokio::task::spawn_blocking(move || {
        succeed(
            Command::new("python3")
                .arg(repo().join("tests/python/verify_tables.py"))
                .arg("--warehouse")
                .arg("unused")
                .arg("--expected")
                .arg(&expected)
                .args([
                    "--no-duckdb",
                    "--rest-uri",
                    &uri,
                    "--rest-warehouse",
                    "lake",
                ])
                .args(["--rest-credential", &format!("kfs:{SECRET}")]),
            "verify_tables.py through the REST catalog",
        )
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    println!("{}", String::from_utf8_lossy(&verified.stdout));

    // A rerun finds everything committed.
    let again = run_rest(&source, &state, &server.uri(), &credentials).await;
    assert!(again.status.success());
    assert_eq!(server.commits_applied(), commits);

    // Refusals: a missing URI, a credentials file that is not JSON (never quoted).
    std::fs::write(&credentials, format!("client_secret={SECRET}"))
        .unwrap_or_else(|e| panic!("{e}"));
    let bad = run_rest(&source, &state, &server.uri(), &credentials).await;
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success());
    assert!(
        stderr.contains("credentials.json") && stderr.contains("not a JSON object"),
        "{stderr}"
    );
    assert!(!stderr.contains(SECRET), "{stderr}");
    let no_uri = output_of(
        kfs()
            .args(["run", "--quiet", "--source"])
            .arg(&source)
            .arg("--warehouse")
            .arg(dir.path().join("wh"))
            .args(["--catalog-type", "rest"]),
    );
    let stderr = String::from_utf8_lossy(&no_uri.stderr);
    assert!(
        stderr.contains("--catalog-type rest") && stderr.contains("needs a URI (--catalog-uri"),
        "{stderr}"
    );
}

//! `kfs-iceberg` on the SQL catalog on PostgreSQL (a server started for the test): run,
//! compact (a replace snapshot through the row swap) and rerun, read back by
//! pyiceberg's SQL catalog on the same database.

use std::path::Path;
use std::process::Command;

use crate::support::{kfs, repo, succeed, tempdir, write_expected};

/// `kfs-iceberg ARGS --warehouse WH --state STATE --catalog-type sql --catalog-uri URL`.
fn on_postgres(args: &[&str], warehouse: &Path, state: &Path, url: &str) -> Command {
    let mut command = kfs();
    command
        .args(args)
        .arg("--warehouse")
        .arg(warehouse)
        .arg("--state")
        .arg(state)
        .args(["--catalog-type", "sql", "--catalog-uri", url]);
    command
}

#[test]
fn run_and_compact_with_the_sql_catalog_on_postgresql() {
    let postgres = kfs_testkit::Postgres::start();
    let dir = tempdir();
    let source = dir.path().join("bucket");
    succeed(
        kfs().arg("gen").arg("--out").arg(&source).args([
            "--topics",
            "2",
            "--segments",
            "3",
            "--records",
            "100",
        ]),
        "gen",
    );
    write_expected(&source);
    let (warehouse, state) = (dir.path().join("wh"), dir.path().join("state"));
    let run = |what: &str| {
        let mut command = on_postgres(
            &["run", "--quiet", "--no-coalesce"],
            &warehouse,
            &state,
            &postgres.url,
        );
        command.arg("--source").arg(&source);
        succeed(&mut command, what)
    };
    run("run on PostgreSQL");
    let verify = || {
        succeed(
            Command::new("python3")
                .arg(repo().join("tests/python/verify_tables.py"))
                .arg("--warehouse")
                .arg(&warehouse)
                .arg("--expected")
                .arg(&source)
                .args(["--no-duckdb", "--sql-uri"])
                .arg(format!(
                    "postgresql+psycopg2://kfs@127.0.0.1:{}/postgres",
                    postgres.port
                )),
            "verify_tables.py through the PostgreSQL catalog",
        )
    };
    verify();
    // Compaction commits a replace snapshot through the catalog's row swap.
    let compacted = succeed(
        &mut on_postgres(&["compact"], &warehouse, &state, &postgres.url),
        "compact on PostgreSQL",
    );
    let report = String::from_utf8_lossy(&compacted.stdout);
    assert!(report.contains("kafscale.orders"), "{report}");
    verify();
    let again = run("rerun on PostgreSQL");
    let printed = String::from_utf8_lossy(&again.stdout);
    // Everything is below the watermarks now: a rerun lists nothing it would convert.
    assert!(
        printed.contains("0 segments listed past the tables' watermarks (0 new, 0 already known)"),
        "{printed}"
    );
}

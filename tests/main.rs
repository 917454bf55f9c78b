//! The end-to-end tests: the built `kfs-iceberg` command on local folders, read back
//! by pyiceberg and DuckDB, one binary.

mod support;

mod bounds_cli;
mod catalogs_cli;
mod docs_commands;
mod dump_cli;
mod first_hour_cli;
mod follow_cli;
mod gen_cli;
mod json_values_cli;
mod lfs_cli;
mod maintenance_cli;
mod neighbours_cli;
mod partitioning_cli;
mod quarantine_cli;
mod registry_cli;
mod replay_cli;
mod run_local;
mod secrets_cli;
mod upsert_cli;

/// Tests that need servers started per test (moto, etcd, PostgreSQL, `cargo lambda`);
/// `cargo test -- --skip servers::` leaves them out.
mod servers {
    mod moto_cli;
    mod postgres_cli;
    mod stack_cli;
}

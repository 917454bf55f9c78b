//! The integration tests of kfs-aws, one binary: the template's lint, and the AWS
//! implementations against moto.

mod template;

/// Tests that need servers started per test (moto, etcd, PostgreSQL, `cargo lambda`);
/// `cargo test -- --skip servers::` leaves them out.
mod servers {
    mod catalog_credentials;
    mod dynamo_ledger;
    mod glue_catalog;
    mod s3tables_catalog;
    mod wakeups;
}

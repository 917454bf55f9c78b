//! The converter function's tests, one binary: each sample event through the handler
//! in process on the in-memory bucket, ledger and catalog, and on moto; and the built
//! binary under the `cargo lambda` runtime emulator.

mod in_process;

/// Tests that need servers started per test (moto, etcd, PostgreSQL, `cargo lambda`);
/// `cargo test -- --skip servers::` leaves them out.
mod servers {
    mod batch_requests;
    mod cargo_lambda;
    mod events;
}

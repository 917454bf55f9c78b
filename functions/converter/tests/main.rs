//! The converter function's tests, one binary: each sample event through the handler
//! on moto, and the built binary under `cargo lambda` (run by CI after the tests).

/// Tests that need servers started per test (moto, etcd, PostgreSQL, `cargo lambda`);
/// `cargo test -- --skip servers::` leaves them out.
mod servers {
    mod cargo_lambda;
    mod events;
}

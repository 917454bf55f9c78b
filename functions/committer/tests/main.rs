//! The committer function's tests, one binary: the schedule events in process on the
//! in-memory bucket, ledger and catalog, and on moto; the etcd cross-check against a
//! real etcd, and both functions end to end on moto.

mod in_process;

/// Tests that need servers started per test (moto, etcd, PostgreSQL, `cargo lambda`);
/// `cargo test -- --skip servers::` leaves them out.
mod servers {
    mod end_to_end;
    mod etcd_crosscheck;
    mod schedule;
    mod sweep_requests;
    mod wakeup_freshness;
}

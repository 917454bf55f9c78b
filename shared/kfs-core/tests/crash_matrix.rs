//! The crash matrix: a fault at every side-effecting step of a pipeline pass, in every
//! mode, then recovery by plain reruns; after each case the exactly-once invariants
//! are checked on the real SQL catalog (SQLite) and ledger.
//!
//! Steps: reading a segment, creating the table, the ledger insert, the catalog
//! commit, marking entries committed. Modes: crash before the effect, crash after it
//! (the caller never learns), error before, error after, timeout after. A crash stops
//! the process: every later call fails, the pass ends, and recovery starts a fresh
//! process on the same catalog and ledger. Steps a pass takes once per segment are hit
//! at their first and at a middle occurrence; the others (once per table) at their
//! first.
//!
//! Invariants after recovery: every record of every segment is in the table exactly
//! once (record count, no data file registered twice, the watermarks at the end of
//! every partition); every file the table references exists; every ledger entry is
//! committed in a snapshot the table has.

mod faults;

use std::sync::atomic::Ordering;

use faults::{Faults, FaultyCatalog, FaultyLedger, FaultySource, Mode, Step, check, source};
use kfs_core::catalog::{S3Settings, Warehouse, open_sql_catalog};
use kfs_core::ledger::SqliteLedger;
use kfs_core::pipeline::{PipelineConfig, run_once};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// One case: a faulty pass, then up to three plain passes; returns whether the fault
/// fired, or the violated invariant.
async fn case(step: Step, mode: Mode, occurrence: usize) -> Result<bool, String> {
    let text = |e: &dyn std::fmt::Display| e.to_string();
    let dir = tempfile::tempdir().map_err(|e| text(&e))?;
    let warehouse = Warehouse::Local(dir.path().join("wh"));
    let database = dir.path().join("catalog.db");
    let catalog = open_sql_catalog(&database, &warehouse, &S3Settings::default())
        .await
        .map_err(|e| text(&e))?;
    let ledger = SqliteLedger::open(&dir.path().join("ledger.db"))
        .await
        .map_err(|e| text(&e))?;
    let source = source().map_err(|e| text(&e))?;
    let config = PipelineConfig::default();
    let faults = Faults::new(step, mode, occurrence);
    let faulty_source = FaultySource {
        inner: &source,
        faults: faults.clone(),
    };
    let faulty_ledger = FaultyLedger {
        inner: &ledger,
        faults: faults.clone(),
    };
    let faulty_catalog = FaultyCatalog {
        inner: &catalog,
        faults: faults.clone(),
    };
    // The faulty pass may fail; what it leaves behind is what recovery works from.
    let _ = run_once(
        &faulty_source,
        &faulty_catalog,
        &faulty_ledger,
        &config,
        &|_| {},
    )
    .await;
    // Recovery: a fresh process (new connections), plain reruns.
    let catalog = open_sql_catalog(&database, &warehouse, &S3Settings::default())
        .await
        .map_err(|e| text(&e))?;
    let ledger = SqliteLedger::open(&dir.path().join("ledger.db"))
        .await
        .map_err(|e| text(&e))?;
    for _ in 0..3 {
        run_once(&source, &catalog, &ledger, &config, &|_| {})
            .await
            .map_err(|e| format!("recovery pass: {e}"))?;
    }
    check(&catalog, &ledger).await?;
    Ok(faults.fired.load(Ordering::SeqCst))
}

#[tokio::test]
async fn every_fault_at_every_step_recovers_to_exactly_once() -> TestResult {
    let steps = [
        Step::SegmentRead,
        Step::TableCreate,
        Step::LedgerInsert,
        Step::CatalogCommit,
        Step::MarkCommitted,
    ];
    let modes = [
        Mode::CrashBefore,
        Mode::CrashAfter,
        Mode::ErrorBefore,
        Mode::ErrorAfter,
        Mode::TimeoutAfter,
    ];
    let (mut cases, mut fired, mut failures) = (0, 0, Vec::new());
    for step in steps {
        let occurrences: &[usize] = match step {
            Step::SegmentRead | Step::LedgerInsert => &[1, 4],
            Step::TableCreate | Step::CatalogCommit | Step::MarkCommitted => &[1],
        };
        for mode in modes {
            for &occurrence in occurrences {
                cases += 1;
                match case(step, mode, occurrence).await {
                    Ok(true) => fired += 1,
                    Ok(false) => {}
                    Err(violation) => {
                        failures.push(format!("{step:?} {mode:?} #{occurrence}: {violation}"))
                    }
                }
            }
        }
    }
    println!("crash matrix: {cases} cases, {fired} with the fault fired, all recovered");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(fired, cases, "every case reaches its fault");
    Ok(())
}

//! Exactly once across a JSON table and its dead-letter table under faults: the
//! workload's values are JSON objects except at every third offset, so each segment
//! has rows for both tables. A fault at every step a JSON conversion and its commit
//! take (segment read, data file write, table creation, ledger insert, the pointer
//! swap of the schema change, the catalog commits of the dead-letter table and the
//! table, marking committed), in every mode, at its first three occurrences, then recovery by plain
//! ticks: every offset is in exactly one of the two tables, once, the non-JSON ones in
//! the dead-letter table. The same matrix runs on a registry table (Avro values of
//! a schema registry, every third naming a schema id the registry does not hold), with
//! the registry's own failures among the steps.

use crate::faults;
use crate::local;

use std::sync::atomic::Ordering;

use faults::{
    Faults, MODES, PARTITIONS, Process, RECORDS, SEGMENTS, Step, etcd_caught_up, open_catalog,
    registry, registry_source, source,
};
use kfs_core::{EntryState, Ledger, SqliteLedger};
use kfs_plan::crosscheck::CrossCheckPolicy;
use kfs_plan::naming::{TableNaming, ValueFormat};
use local::offsets;

/// What the values are: JSON objects, or Avro records of a schema registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Values {
    Json,
    Registry,
}

fn naming(values: Values) -> TableNaming {
    TableNaming {
        value_format: match values {
            Values::Json => ValueFormat::Json,
            Values::Registry => ValueFormat::Registry,
        },
        ..TableNaming::default()
    }
}

/// A process of the workload of `values`, under `faults`.
async fn process<'a>(
    dir: &std::path::Path,
    source: &'a kfs_core::MemorySource,
    ledger: &'a SqliteLedger,
    faults: std::sync::Arc<Faults>,
    values: Values,
) -> Result<Process<'a>, String> {
    let mut process = Process::open(dir, source, ledger, faults).await?;
    process.naming = naming(values);
    if values == Values::Registry {
        process = process.with_registry(registry());
    }
    Ok(process)
}

/// One case: a faulty tick, then plain ticks; returns whether the fault fired, or the
/// violated invariant.
async fn case(
    values: Values,
    step: Step,
    mode: faults::Mode,
    occurrence: usize,
) -> Result<bool, String> {
    let text = |e: &dyn std::fmt::Display| e.to_string();
    let dir = tempfile::tempdir().map_err(|e| text(&e))?;
    let source = match values {
        Values::Json => source().map_err(|e| text(&e))?,
        Values::Registry => registry_source()?,
    };
    let ledger = SqliteLedger::open(&dir.path().join("ledger.db"))
        .await
        .map_err(|e| text(&e))?;
    let faults = Faults::new(step, mode, occurrence);
    let faulty = process(dir.path(), &source, &ledger, faults.clone(), values).await?;
    let _ = faulty
        .tick(&etcd_caught_up(), CrossCheckPolicy::default(), None)
        .await;
    let fired = faults.fired.load(Ordering::SeqCst);
    let recovery = process(dir.path(), &source, &ledger, Faults::none(), values).await?;
    let mut clean = 0;
    for attempt in 1..=8 {
        match recovery
            .tick(&etcd_caught_up(), CrossCheckPolicy::default(), None)
            .await
        {
            Ok(()) => clean += 1,
            Err(e) if e.retryable && attempt < 8 => clean = 0,
            Err(e) => return Err(format!("recovery tick {attempt}: {}", e.message)),
        }
        if clean == 2 {
            break;
        }
    }
    let catalog = open_catalog(dir.path()).await?;
    let name = naming(values).table_for("orders");
    let in_table = offsets(&catalog, &name).await?;
    let in_dead_letters = offsets(&catalog, &name.dead_letters()).await?;
    for partition in 0..PARTITIONS {
        for offset in 0..SEGMENTS * RECORDS {
            let at = (partition, offset);
            let (rows, dead) = (
                in_table.get(&at).copied().unwrap_or(0),
                in_dead_letters.get(&at).copied().unwrap_or(0),
            );
            let expected = if offset % 3 == 0 { (0, 1) } else { (1, 0) };
            if (rows, dead) != expected {
                return Err(format!(
                    "partition {partition} offset {offset}: {rows} rows in the table, {dead} in the dead-letter table; expected {expected:?}"
                ));
            }
        }
    }
    let total = in_table.len() + in_dead_letters.len();
    if total != (PARTITIONS as i64 * SEGMENTS * RECORDS) as usize {
        return Err(format!("{total} offsets in the two tables"));
    }
    for entry in ledger.list(None, None).await.map_err(|e| text(&e))? {
        if !matches!(entry.state, EntryState::Committed { .. }) {
            return Err(format!("{}: ledger says {:?}", entry.segment, entry.state));
        }
    }
    Ok(fired)
}

/// Runs the matrix of `steps` on `values`; returns the cases, those whose fault
/// fired, and the failures.
async fn matrix(values: Values, steps: &[Step]) -> (usize, usize, Vec<String>) {
    let (mut cases, mut fired, mut failures) = (0, 0, Vec::new());
    for step in steps {
        for mode in MODES {
            for occurrence in 1..=3 {
                cases += 1;
                match case(values, *step, mode, occurrence).await {
                    Ok(true) => fired += 1,
                    Ok(false) => {}
                    Err(e) => failures.push(format!("{step:?} {mode:?} #{occurrence}: {e}")),
                }
            }
        }
    }
    (cases, fired, failures)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_tables_and_their_dead_letters_stay_exactly_once_under_faults()
-> Result<(), Box<dyn std::error::Error>> {
    let steps = [
        Step::SegmentRead,
        Step::DataFileWrite,
        Step::TableCreate,
        Step::LedgerInsert,
        Step::CompactionCommit,
        Step::CatalogCommit,
        Step::MarkCommitted,
    ];
    let (cases, fired, failures) = matrix(Values::Json, &steps).await;
    println!("dead-letter matrix: {cases} cases, {fired} with the fault fired");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Some steps happen fewer than three times (one schema change, one table creation
    // per table).
    assert!(fired >= cases / 2, "{fired} of {cases} faults fired");
    Ok(())
}

/// The registry path: the registry failing (down, timing out, throttled) at each of
/// its reads, and every other step of a registry conversion and its commit; the
/// values naming an unknown schema id always in the dead-letter table, never lost,
/// never twice; a registry failure never dead-letters a record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_tables_and_their_dead_letters_stay_exactly_once_under_faults()
-> Result<(), Box<dyn std::error::Error>> {
    let steps = [
        Step::RegistryRead,
        Step::SegmentRead,
        Step::DataFileWrite,
        Step::TableCreate,
        Step::LedgerInsert,
        Step::CatalogCommit,
        Step::MarkCommitted,
    ];
    let (cases, fired, failures) = matrix(Values::Registry, &steps).await;
    println!("registry dead-letter matrix: {cases} cases, {fired} with the fault fired");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(fired >= cases / 2, "{fired} of {cases} faults fired");
    Ok(())
}

//! The crash matrix: a fault at every side-effecting step of a committer tick and its
//! maintenance, in every mode, then recovery by plain ticks; after each case the
//! exactly-once invariants are checked on the real SQL catalog (SQLite) and ledger.
//!
//! The faulty process runs one tick: read etcd, convert the six segments (read each;
//! the three of each partition continue one another, so they are one run: write its
//! data file, insert it in the ledger; the first creates the table), commit them,
//! mark them committed, then maintain the table: compact the small files
//! (a replace snapshot through the pointer swap) and expire the append snapshot
//! (deleting what only it reached).
//!
//! Steps: segment read, data file write, table creation, ledger insert, etcd read,
//! catalog commit, marking committed, compaction commit, file delete. Modes: crash
//! before the effect, crash after it (the caller never learns), error before, error
//! after, timeout after. A crash stops the process: every later call fails, the tick
//! ends, and recovery starts a fresh process on the same catalog and ledger. Steps
//! taken once per segment, run or file are hit at their first and at a later
//! occurrence; the others at their first.
//!
//! A second matrix puts another engine's commit (a rewrite without our summary, then
//! every other snapshot expired) between the faulty process's load of the table and
//! its first commit on a table holding a snapshot, with every mode at each commit
//! step.
//!
//! A third matrix puts every fault at every step of a wake-up (the pass restricted to
//! the woken table, without maintenance), then delivers the same wake-up again (the
//! queue redelivers what was not acknowledged) before the plain ticks.
//!
//! A fourth matrix runs the tick on a table in upsert mode fed keyed records (keys
//! updated within a segment and across segments, tombstones, keys inserted again),
//! its first segments committed before the faulty tick: every commit is a row delta
//! deleting what it supersedes, and after recovery the table also reads (with its
//! deletes applied) as the fold of every record, each key's last row once.
//! A fifth runs the fourth with the changes in JSON, the mirror keyed by their `id`
//! field; a sixth the fifth with the mirror's change log kept beside it (appended
//! before the mirror's commit), which must hold every record exactly once. A seventh
//! runs the fourth on a format v3 table (deletion vectors), and an eighth the sixth
//! with the other engine maintaining the mirror and its change log before the first
//! commit, every mode at each commit.
//!
//! Invariants after recovery: every record of every segment is in the table exactly
//! once (record count, no data file registered twice, the watermarks at the end of
//! every partition); every file the table references exists; every ledger entry is
//! committed.

use crate::faults;

use std::sync::atomic::Ordering;

use faults::{
    Faults, MODES, Process, STEPS, Step, check, etcd_caught_up, open_catalog, quiesce, source,
};
use kfs_core::MaintenancePolicy;
use kfs_core::SqliteLedger;
use kfs_plan::crosscheck::CrossCheckPolicy;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// What the faulty process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trigger {
    /// A scheduled tick, with maintenance.
    Tick,
    /// A scheduled tick, with another engine committing to the table (a rewrite
    /// without our summary, then every other snapshot expired) between the faulty
    /// process's load of the table and its first commit on a table holding a snapshot.
    Outside,
    /// A wake-up for the table: its pass alone, no maintenance; recovery starts with
    /// the same wake-up delivered again.
    Wakeup,
    /// A scheduled tick, with maintenance, of a table in upsert mode fed keyed
    /// records (updates within a segment and across segments, tombstones, keys
    /// inserted again): after recovery the table also reads as their fold.
    Mirror,
    /// [`Trigger::Mirror`] with the changes in JSON and the mirror keyed by their
    /// `id` field (`upsert_key id`).
    FieldMirror,
    /// [`Trigger::FieldMirror`] keeping the mirror's change log beside it.
    LoggedMirror,
    /// [`Trigger::Mirror`] on a format v3 table: its deletes are deletion vectors,
    /// a file's new vector replacing its old one.
    VectorMirror,
    /// [`Trigger::LoggedMirror`] with [`Trigger::Outside`]'s engine maintaining the
    /// mirror and its change log (a rewrite of each, every other snapshot expired)
    /// before the faulty process's first commit: the change log's append.
    OutsideLogged,
}

/// The table the wake-ups name.
const WOKEN: &str = "kafscale.orders";

/// One case: the faulty process run by `trigger`, then recovery; returns whether the
/// fault fired, or the violated invariant.
async fn case_of(
    trigger: Trigger,
    step: Step,
    mode: faults::Mode,
    occurrence: usize,
) -> Result<bool, String> {
    let outside = matches!(trigger, Trigger::Outside | Trigger::OutsideLogged);
    let text = |e: &dyn std::fmt::Display| e.to_string();
    let dir = tempfile::tempdir().map_err(|e| text(&e))?;
    let ledger = SqliteLedger::open(&dir.path().join("ledger.db"))
        .await
        .map_err(|e| text(&e))?;
    let (kind, naming) = match trigger {
        Trigger::Mirror => (faults::Records::Keyed, faults::upsert_naming()?),
        Trigger::FieldMirror => (faults::Records::FieldKeyed, faults::field_key_naming()?),
        Trigger::LoggedMirror | Trigger::OutsideLogged => {
            (faults::Records::FieldKeyed, faults::logged_naming()?)
        }
        Trigger::VectorMirror => (faults::Records::Keyed, faults::vector_naming()?),
        _ => (faults::Records::Plain, Default::default()),
    };
    let mirror = kind != faults::Records::Plain;
    // A mirror's first segments are committed before the faulty tick, so that its
    // commit deletes rows of an earlier one.
    let source = match mirror {
        true => faults::keyed_source(1, kind),
        false => source(),
    }
    .map_err(|e| text(&e))?;
    let faults = Faults::new(step, mode, occurrence);
    let faults = match outside {
        true => faults.with_outside_commit(dir.path()),
        false => faults,
    };
    let mut process = Process::open(dir.path(), &source, &ledger, faults.clone()).await?;
    process.naming = naming.clone();
    if mirror {
        let mut first = Process::open(dir.path(), &source, &ledger, Faults::none()).await?;
        first.naming = naming.clone();
        first
            .tick(&etcd_caught_up(), CrossCheckPolicy::default(), None)
            .await
            .map_err(|e| format!("the first commit: {}", e.message))?;
        faults::put_keyed_segments(&source, 1..faults::SEGMENTS, kind).map_err(|e| text(&e))?;
    }
    let maintenance = MaintenancePolicy {
        max_snapshots: Some(1),
        orphan_age: None,
        ..MaintenancePolicy::default()
    };
    let woken = || Some(std::collections::BTreeSet::from([WOKEN.to_owned()]));
    if trigger == Trigger::Wakeup {
        process.woken_for = woken();
    }
    let maintain = (trigger != Trigger::Wakeup).then_some(&maintenance);
    // The faulty tick may fail; what it leaves behind is what recovery works from.
    let _ = process
        .tick(&etcd_caught_up(), CrossCheckPolicy::default(), maintain)
        .await;
    // Recovery: a fresh process (new connections); the wake-up delivered again, then
    // plain ticks.
    let ledger = SqliteLedger::open(&dir.path().join("ledger.db"))
        .await
        .map_err(|e| text(&e))?;
    if trigger == Trigger::Wakeup {
        let mut again = Process::open(dir.path(), &source, &ledger, Faults::none()).await?;
        again.naming = naming.clone();
        again.woken_for = woken();
        again
            .tick(&etcd_caught_up(), CrossCheckPolicy::default(), None)
            .await
            .map_err(|e| format!("the wake-up delivered again: {}", e.message))?;
    }
    quiesce(dir.path(), &source, &ledger, &naming).await?;
    let catalog = open_catalog(dir.path()).await?;
    let late = check(&catalog, &ledger).await?;
    if late != 0 {
        return Err(format!("{late} segments quarantined as late"));
    }
    if outside
        && faults
            .outside_before_commit
            .lock()
            .map_or(true, |slot| slot.is_some())
    {
        // The other engine never got to commit: the case says nothing of it.
        return Ok(false);
    }
    if trigger == Trigger::OutsideLogged && !faults.outside_maintained_log.load(Ordering::SeqCst) {
        return Ok(false);
    }
    Ok(faults.fired.load(Ordering::SeqCst) || outside)
}

/// The mirror's matrix keeping its change log beside it: every step of the fifth,
/// and the change log's append (the tick's first catalog commit; the second is the
/// expiry's). (The log's few files are not compacted yet.)
#[tokio::test]
async fn every_fault_at_every_step_of_a_mirror_with_its_change_log_recovers_exactly_once()
-> TestResult {
    run_matrix(
        Trigger::LoggedMirror,
        STEPS.into_iter(),
        |step| match step {
            Step::CatalogCommit => &[1, 2],
            step => mirror_occurrences(step),
        },
    )
    .await
}

/// How often each step is faulted in a scheduled tick: at its first and at a later
/// occurrence for the steps taken once per segment, run or file.
fn tick_occurrences(step: Step) -> &'static [usize] {
    match step {
        Step::SegmentRead | Step::FileDelete => &[1, 4],
        // Once per run: the three segments of each partition are one run.
        Step::DataFileWrite | Step::LedgerInsert => &[1, 2],
        Step::TableCreate
        | Step::EtcdRead
        | Step::CatalogCommit
        | Step::MarkCommitted
        | Step::CompactionCommit => &[1],
        // Registry tables only: their matrix is the dead-letter matrix's.
        Step::RegistryRead => &[],
    }
}

/// Runs every mode at each of `steps`, at the occurrences `occurrences` gives, with
/// the faulty process run by `trigger`; prints the tally and fails with every case
/// that did not recover (or whose fault never fired).
async fn run_matrix(
    trigger: Trigger,
    steps: impl Iterator<Item = Step>,
    occurrences: fn(Step) -> &'static [usize],
) -> TestResult {
    let (mut cases, mut fired, mut failures) = (0, 0, Vec::new());
    for step in steps {
        for mode in MODES {
            for &occurrence in occurrences(step) {
                cases += 1;
                match case_of(trigger, step, mode, occurrence).await {
                    Ok(true) => fired += 1,
                    Ok(false) => failures.push(format!(
                        "{step:?} {mode:?} #{occurrence}: the fault never fired"
                    )),
                    Err(violation) => {
                        failures.push(format!("{step:?} {mode:?} #{occurrence}: {violation}"))
                    }
                }
            }
        }
    }
    println!(
        "{trigger:?} crash matrix: {cases} cases, {fired} with the fault fired, all recovered"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

#[tokio::test]
async fn every_fault_at_every_step_recovers_to_exactly_once() -> TestResult {
    run_matrix(Trigger::Tick, STEPS.into_iter(), tick_occurrences).await
}

/// The mirror's commit is a row delta through the pointer swap (the compaction
/// commit's step), its deletes planned on the snapshot it is pinned to; the table
/// exists before the faulty tick (its first segments committed); the compaction after
/// the commit folds the deletes (the data files rewritten without the deleted rows,
/// the delete files removed: the second swap), and the expiry deletes what only the
/// first snapshot reached.
#[tokio::test]
async fn every_fault_at_every_step_of_a_mirror_recovers_to_its_fold_exactly_once() -> TestResult {
    run_matrix(Trigger::Mirror, STEPS.into_iter(), mirror_occurrences).await
}

/// The mirror's matrix with its changes in JSON, keyed by their `id` field: each
/// key's row found by the column's text, a tombstone's by its JSON record key.
#[tokio::test]
async fn every_fault_at_every_step_of_a_mirror_keyed_by_a_field_recovers_to_its_fold_exactly_once()
-> TestResult {
    run_matrix(Trigger::FieldMirror, STEPS.into_iter(), mirror_occurrences).await
}

/// The mirror's matrix on a format v3 table: every step of the fifth, the row delta
/// writing deletion vectors (a data file's replacing its vector of the first commit's
/// deletes), the compaction folding them (the rows' lineage written out).
#[tokio::test]
async fn every_fault_at_every_step_of_a_v3_mirror_recovers_to_its_fold_exactly_once() -> TestResult
{
    run_matrix(Trigger::VectorMirror, STEPS.into_iter(), mirror_occurrences).await
}

/// The occurrences of each step a mirror's matrix faults.
fn mirror_occurrences(step: Step) -> &'static [usize] {
    match step {
        Step::TableCreate => &[][..],
        // One file only the first snapshot reached: its manifest list.
        Step::FileDelete => &[1],
        // The row delta, then the compaction that folds its deletes.
        Step::CompactionCommit => &[1, 2],
        step => tick_occurrences(step),
    }
}

#[tokio::test]
async fn an_outside_commit_before_ours_at_every_commit_fault_recovers_to_exactly_once() -> TestResult
{
    let mut failures = Vec::new();
    // No fault, then every mode at each commit: the append (the expiry's commit is a
    // catalog commit too) and the compaction's replace.
    let mut cases = vec![(Step::SegmentRead, faults::Mode::ErrorBefore, 0)];
    for step in [Step::CatalogCommit, Step::CompactionCommit] {
        cases.extend(MODES.iter().map(|mode| (step, *mode, 1)));
    }
    let (total, mut among) = (cases.len(), 0);
    for (step, mode, occurrence) in cases {
        match case_of(Trigger::Outside, step, mode, occurrence).await {
            Ok(true) => among += 1,
            Ok(false) => {}
            Err(violation) => {
                failures.push(format!("{step:?} {mode:?} #{occurrence}: {violation}"))
            }
        }
    }
    println!("outside commits: {among} of {total} cases had one before ours, all recovered");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Without a fault, and with every fault that leaves the tick a later commit.
    assert!(among * 2 > total, "{among} of {total}");
    Ok(())
}

/// Another engine maintains a mirror and its change log just before the faulty
/// process's first commit (the log's append, which then finds the log rewritten and
/// its snapshots expired), with every mode at each commit: the log's append, the
/// expiry's, the mirror's row delta and the compaction. The change log holds every
/// record once and the mirror reads as their fold.
#[tokio::test]
async fn an_outside_engine_maintaining_a_change_log_at_every_commit_fault_recovers() -> TestResult {
    let mut failures = Vec::new();
    let mut cases = vec![(Step::SegmentRead, faults::Mode::ErrorBefore, 0)];
    for (step, occurrence) in [
        (Step::CatalogCommit, 1),
        (Step::CatalogCommit, 2),
        (Step::CompactionCommit, 1),
        (Step::CompactionCommit, 2),
    ] {
        cases.extend(MODES.iter().map(|mode| (step, *mode, occurrence)));
    }
    let (total, mut among) = (cases.len(), 0);
    for (step, mode, occurrence) in cases {
        match case_of(Trigger::OutsideLogged, step, mode, occurrence).await {
            Ok(true) => among += 1,
            Ok(false) => {}
            Err(violation) => {
                failures.push(format!("{step:?} {mode:?} #{occurrence}: {violation}"))
            }
        }
    }
    println!(
        "outside engine on a change log: {among} of {total} cases had it before ours, all recovered"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(among * 2 > total, "{among} of {total}");
    Ok(())
}

#[tokio::test]
async fn every_fault_at_every_step_of_a_wakeup_recovers_to_exactly_once() -> TestResult {
    // A wake-up converts what its pass finds and commits; it never maintains.
    let steps = STEPS.into_iter().filter(|step| {
        !matches!(
            step,
            Step::CompactionCommit | Step::FileDelete | Step::RegistryRead
        )
    });
    let occurrences = |step| match step {
        Step::SegmentRead => &[1, 4][..],
        Step::DataFileWrite | Step::LedgerInsert => &[1, 2],
        _ => &[1],
    };
    run_matrix(Trigger::Wakeup, steps, occurrences).await
}

//! The conversions of a pass: the new segments the sweep gathered, converted in
//! listing order within the pass's bound and deadline, small segments of a partition
//! joined in runs, each segment's or run's attempts tracked so that one that keeps
//! killing its process is quarantined.

use std::collections::BTreeMap;

use kfs_plan::keys::{SegmentFile, SegmentKey};

use super::config::{CONVERSION_TIMEOUT, Pass, PipelineConfig, UNFINISHED_ATTEMPTS};
use super::report::{PassReport, Progress};
use super::sweep::{SweptTable, feed_of};
use super::tables::Tables;
use crate::clock::now_ms;
use crate::error::PipelineError;
use crate::ingest::{
    MAX_RUN_SEGMENTS, NewSegment, RunLimits, TopicTable, ingest_runs, ingest_segment,
    quarantine_unconverted,
};
use crate::ledger::{EntryState, Ledger, LedgerEntry, LedgerError};
use crate::source::{SegmentSource, SourceObject};

/// Converts the segments of `work`, in order, until the pass's bound or its sweep
/// deadline: a partition's small segments in runs, any other segment alone. Notes
/// each entry recorded in `report` and in its table of `swept` (which then has
/// pending work). Only the ledger failing fails the pass.
pub(super) async fn convert_new<S: SegmentSource, L: Ledger>(
    pass: &Pass<'_, S, L>,
    tables: &mut Tables<'_>,
    work: &[NewSegment],
    swept: &mut BTreeMap<String, SweptTable>,
    report: &mut PassReport,
) -> Result<(), PipelineError> {
    let config = pass.config;
    let budget = config.max_conversions.unwrap_or(usize::MAX);
    let stop = || pass.past_sweep_deadline();
    let run_limits = RunLimits {
        decode: config.limits,
        max_segments: config
            .max_run_segments
            .map_or(MAX_RUN_SEGMENTS, |n| n.clamp(1, MAX_RUN_SEGMENTS)),
    };
    let mut at = 0;
    let mut done = 0;
    while at < work.len() {
        if done >= budget || stop() {
            report.deferred += work.len() - at;
            break;
        }
        let key = &work[at].key;
        let Some(target) = tables.get(feed_of(key)).await else {
            at += 1;
            continue;
        };
        // The segments of this partition from here that convert in runs.
        let small = work[at..]
            .iter()
            .take_while(|new| {
                new.key.partition == key.partition
                    && new.key.topic == key.topic
                    && new.key.namespace == key.namespace
                    && target.in_runs(&new.object)
            })
            .take(budget - done)
            .count();
        // A segment that is not small is a group of its own, converted alone.
        let group = &work[at..at + small.max(1)];
        at += group.len();
        // Runs are tracked as attempts of their own: after a run that killed its
        // process, the group is converted one segment at a time, each tracked, so
        // that the segment that kills it is the one quarantined.
        let attempt = run_attempt(&group[0].key.object_key(SegmentFile::Data));
        let one_by_one = small == 0
            || pass
                .ledger
                .begin_attempt(&attempt, now_ms())
                .await?
                .unfinished
                > 0;
        if one_by_one {
            for NewSegment { key, object, .. } in group {
                if stop() {
                    report.deferred += 1;
                    continue;
                }
                done += 1;
                let recorded = convert_single(pass, target, key, object, report).await?;
                if let Some(entry) = recorded {
                    note_recorded(&entry, report, swept, pass.progress);
                }
            }
            if small > 0 {
                pass.ledger.end_attempt(&attempt).await?;
            }
            continue;
        }
        let runs = ingest_runs(
            pass.source,
            target,
            pass.ledger,
            group,
            run_limits,
            &config.retry,
            &stop,
        )
        .await;
        pass.ledger.end_attempt(&attempt).await?;
        let runs = runs?;
        done += small - runs.deferred;
        report.deferred += runs.deferred;
        report
            .failed_segments
            .extend(runs.failed.iter().map(|e| match e {
                PipelineError::Unconverted {
                    segment, message, ..
                } => (segment.clone(), message.clone()),
                other => (String::new(), other.to_string()),
            }));
        for entry in &runs.recorded {
            note_recorded(entry, report, swept, pass.progress);
        }
    }
    Ok(())
}

/// The key under which the attempts of runs starting at the segment `lead` are
/// tracked (apart from the segment's own).
pub fn run_attempt(lead: &str) -> String {
    format!("{lead}#run")
}

/// Converts one segment (its attempts tracked: one whose conversions keep killing the
/// process is quarantined unconverted). Returns the entry recorded, or `None` when
/// the conversion failed for a reason that is not the segment's bytes (noted in the
/// report; the next pass tries again). Only the ledger failing fails the pass.
async fn convert_single<S: SegmentSource, L: Ledger>(
    pass: &Pass<'_, S, L>,
    target: &TopicTable,
    key: &SegmentKey,
    object: &SourceObject,
    report: &mut PassReport,
) -> Result<Option<LedgerEntry>, PipelineError> {
    let (source, ledger, config): (&S, &L, &PipelineConfig) =
        (pass.source, pass.ledger, pass.config);
    let segment = key.object_key(SegmentFile::Data);
    // A conversion that killed its process (out of memory, a timeout, a crash)
    // never ended its attempt: after a few, all older than any conversion may run
    // (so none is merely running elsewhere), the segment is quarantined instead of
    // killing every pass that reaches it.
    let began = now_ms();
    let earlier = ledger.begin_attempt(&segment, began).await?;
    let timeout = config.conversion_timeout.unwrap_or(CONVERSION_TIMEOUT);
    let recorded = if earlier.dead(UNFINISHED_ATTEMPTS, timeout, began) {
        let why = format!(
            "{} conversions began and never ended, the latest over {} s ago (the process died: out of memory, a timeout or a crash); quarantined so that other segments go on: raise the function's memory or timeout, then `quarantine retry`",
            earlier.unfinished,
            timeout.as_secs()
        );
        quarantine_unconverted(source, target, ledger, key, object, &why).await
    } else {
        config
            .retry
            .run(PipelineError::kind, || {
                ingest_segment(
                    pass.access,
                    source,
                    target,
                    ledger,
                    key,
                    object,
                    config.limits,
                )
            })
            .await
    };
    ledger.end_attempt(&segment).await?;
    match recorded {
        Ok(entry) => Ok(Some(entry)),
        // The ledger itself failing fails the pass: nothing can be recorded.
        Err(e @ PipelineError::Ledger(LedgerError::Store { .. })) => Err(e),
        Err(e) => {
            // Not the segment's bytes (those quarantine): the catalog, the store,
            // the table. Left unrecorded for the next pass; the rest goes on.
            report.failed_segments.push((segment, e.to_string()));
            Ok(None)
        }
    }
}

/// Notes an entry a conversion recorded (a segment, or a run of them) in the report
/// and the progress.
fn note_recorded(
    entry: &LedgerEntry,
    report: &mut PassReport,
    swept: &mut BTreeMap<String, SweptTable>,
    progress: &(dyn Fn(&Progress) + Sync),
) {
    match &entry.state {
        EntryState::Quarantined { error } => {
            progress(&Progress::Quarantined {
                segment: entry.segment.clone(),
                error: error.clone(),
            });
            report
                .quarantined
                .push((entry.segment.clone(), error.clone()));
        }
        _ => {
            let segments = entry.segments();
            progress(&Progress::Converted {
                segment: entry.segment.clone(),
                segments,
                records: entry.records,
            });
            report.converted += segments;
            report.records_converted += entry.records;
            if let Some(table) = swept.get_mut(&entry.table) {
                table.has_pending = true;
            }
        }
    }
}

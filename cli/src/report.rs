//! How a pass is told on the terminal: its conversions, then per table the commit,
//! watermarks, gaps and holds, then what failed and why (`run`, and each pass of
//! `run --follow` that did something).

use kfs_core::{CommitOutcome, PassReport};
use kfs_plan::commit::HoldReason;

/// Prints what a pass did: its conversions, then per table the commit, watermarks,
/// gaps and holds, then what failed and why.
pub fn print_report(report: &PassReport) {
    out!(
        "{} segments listed past the tables' watermarks ({} new, {} already known), {} converted ({} records), {} quarantined, {} incomplete, {} other objects ignored",
        report.segments,
        report.segments - report.known,
        report.known,
        report.converted,
        report.records_converted,
        report.quarantined.len(),
        report.incomplete,
        report.ignored
    );
    for (segment, error) in &report.quarantined {
        out!("  quarantined {segment}: {error}");
    }
    for (table, error) in &report.failed_tables {
        out!("table {table}: commit failed: {error}");
    }
    for (segment, error) in &report.failed_segments {
        out!("  failed {segment}: {error} (tried again next run)");
    }
    for (segment, reason) in &report.unreadable {
        out!(
            "  ledger item {segment} is unreadable: {reason} (its partition waits at it; repair or delete the item)"
        );
    }
    for (feed, reason) in &report.refused {
        out!("topic {feed}: refused: {reason}");
    }
    for segment in &report.rewritten {
        out!(
            "  warning: {segment} was rewritten with different content after it was converted; not ingested again"
        );
    }
    for (table, outcome) in &report.tables {
        print_table(table, outcome);
    }
}

/// One table's part of a pass: its snapshot, watermarks, gaps and holds.
fn print_table(table: &str, outcome: &CommitOutcome) {
    match outcome.snapshot_id {
        Some(id) if outcome.dead_letters > 0 => out!(
            "table {table}: snapshot {id}: +{} segments, {} files, {} records; {} records to {table}{}",
            outcome.segments,
            outcome.files,
            outcome.records,
            outcome.dead_letters,
            kfs_plan::naming::DEAD_LETTER_SUFFIX
        ),
        Some(id) => out!(
            "table {table}: snapshot {id}: +{} segments, {} files, {} records",
            outcome.segments,
            outcome.files,
            outcome.records
        ),
        None => out!("table {table}: no new snapshot"),
    }
    if outcome.change_log > 0 {
        out!(
            "  {} records to its change log {table}{}",
            outcome.change_log,
            kfs_plan::naming::CHANGE_LOG_SUFFIX
        );
    }
    if outcome.superseded_rows > 0 {
        out!(
            "  {} earlier rows superseded (upsert: deleted by position)",
            outcome.superseded_rows
        );
    }
    let marks: Vec<String> = outcome
        .watermarks
        .iter()
        .map(|(p, next)| format!("{p}→{next}"))
        .collect();
    out!(
        "  next offset per partition: {}",
        if marks.is_empty() {
            "-".into()
        } else {
            marks.join(" ")
        }
    );
    for gap in &outcome.gaps {
        out!(
            "  gap recorded: partition {} offsets {}..={} ({})",
            gap.partition,
            gap.from,
            gap.to,
            match gap.reason {
                kfs_plan::offsets::GapReason::NoSegment => "no segment covers them",
                kfs_plan::offsets::GapReason::Skipped => "skipped by an operator",
            }
        );
    }
    for hold in &outcome.holds {
        let at = hold
            .next_offset
            .map_or_else(|| "?".to_owned(), |o| o.to_string());
        let why = match &hold.reason {
            HoldReason::WaitingForSegment { base_offset } => {
                format!(
                    "waiting for segment at offset {base_offset} (not converted yet, or quarantined)"
                )
            }
            HoldReason::Overlap { id, .. } => {
                format!("segment {id} overlaps what is committed")
            }
            HoldReason::RunGapFilled { id, base_offset } => format!(
                "the run from {id} spans a gap where segment {base_offset} turned up; dropped, it is converted again"
            ),
            HoldReason::NoStartingPoint => "no segment listed to start from".into(),
            HoldReason::SegmentLimit => "segment limit of this cycle reached".into(),
            HoldReason::OffsetOverflow { id } => {
                format!("{id} ends at the largest offset; no watermark can follow it")
            }
        };
        out!("  partition {} held at {at}: {why}", hold.partition);
    }
}

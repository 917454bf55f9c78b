//! An operator's decisions on a table's stored progress: set it explicitly (a table
//! whose progress was lost to another engine's expiry), or keep it after a rollback
//! past our commits. Each is one property update pinned to the current snapshot, so
//! a commit landing meanwhile makes it fail rather than be overwritten.

use iceberg::spec::MAIN_BRANCH;
use iceberg::{Catalog, TableIdent, TableRequirement, TableUpdate};
use kfs_catalog::catalog::TableSwap;
use kfs_plan::offsets::{CommitSummary, MAX_TIMESTAMP_KEY, OffsetMap};
use kfs_plan::progress::{StoredProgress, progress_properties, stored_progress};
use kfs_plan::sweep::TableProgress;
use std::collections::HashMap;

/// What an operator decides for a table's progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProgressDecision {
    /// The next offset per partition, for the partitions named (others keep theirs).
    Set(OffsetMap),
    /// After a rollback past our commits: keep the stored progress (what was rolled
    /// back stays out of the table) and take the current snapshot as descending from it.
    KeepAfterRollback,
}

/// Carries out `decision` on table `ident`; returns the progress stored.
pub async fn decide_progress(
    catalog: &dyn Catalog,
    swap: &dyn TableSwap,
    ident: &TableIdent,
    decision: &ProgressDecision,
    now_ms: i64,
) -> iceberg::Result<TableProgress> {
    let table = catalog.load_table(ident).await?;
    let stored = stored_progress(table.metadata().properties())
        .map_err(|e| iceberg::Error::new(iceberg::ErrorKind::DataInvalid, e.to_string()))?;
    let mut progress = stored
        .as_ref()
        .map(|s| s.progress.clone())
        .unwrap_or_default();
    match decision {
        ProgressDecision::Set(offsets) => progress.watermarks.extend(offsets),
        ProgressDecision::KeepAfterRollback if stored.is_none() => {
            return Err(iceberg::Error::new(
                iceberg::ErrorKind::DataInvalid,
                format!("{ident} stores no progress: there is no rollback to accept"),
            ));
        }
        ProgressDecision::KeepAfterRollback => {}
    }
    let summary = summary_of(&progress, stored.as_ref(), now_ms);
    let current = table.metadata().current_snapshot();
    let properties = progress_properties(
        &summary,
        "operator",
        current.map_or(0, |s| s.sequence_number()),
    );
    let requirements = vec![
        TableRequirement::UuidMatch {
            uuid: table.metadata().uuid(),
        },
        TableRequirement::RefSnapshotIdMatch {
            r#ref: MAIN_BRANCH.to_owned(),
            snapshot_id: current.map(|s| s.snapshot_id()),
        },
    ];
    let updates = vec![TableUpdate::SetProperties {
        updates: properties,
    }];
    swap.commit(&table, requirements, updates).await?;
    Ok(progress)
}

/// The summary form of `progress`, under an operator's commit id.
fn summary_of(
    progress: &TableProgress,
    stored: Option<&StoredProgress>,
    now_ms: i64,
) -> HashMap<String, String> {
    let mut summary = CommitSummary {
        topic: String::new(),
        offsets: progress.watermarks.clone(),
        starts: progress.starts.clone(),
        ranges: Default::default(),
        gaps: Vec::new(),
        gap_history: progress.gaps.clone(),
        commit_id: format!("operator-{now_ms}"),
        segments: 0,
        records: 0,
    }
    .properties();
    if let Some(newest) = stored.and_then(|s| s.newest_record_ms) {
        summary.insert(MAX_TIMESTAMP_KEY.to_owned(), newest.to_string());
    }
    summary
}

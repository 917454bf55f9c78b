//! The committer function's handler: on every schedule tick, one pipeline pass within
//! the invocation's time budget: sweep the segment prefix for segments no event
//! announced (a bounded number per run), commit every table with pending files
//! (tables concurrently), then publish the backlog metrics the alarms watch.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kfs_aws::emf::MetricSet;
use kfs_core::SegmentSource;
use kfs_core::{CatalogHandle, S3Settings, table_ident};
use kfs_core::{EntryState, Ledger};
use kfs_core::{MaintenancePolicy, MaintenanceSummary, maintain_table};
use kfs_core::{PipelineConfig, PipelineError, run_once};
use kfs_etcd::read_etcd;
use kfs_plan::shard::Shard;
use serde_json::{Value, json};

/// The committer's clients and settings.
pub struct Committer<S, L> {
    /// Segment source (rooted at the segment prefix).
    pub source: S,
    /// Iceberg catalog, with its pointer swap (schema changes, replace snapshots).
    pub catalog: CatalogHandle,
    /// Ledger.
    pub ledger: L,
    /// Pass settings (`deadline` and `etcd` are set per invocation).
    pub config: PipelineConfig,
    /// etcd endpoints of the offset cross-check (empty: off).
    pub etcd_endpoints: Vec<String>,
    /// Table maintenance after the commits (`None`: off).
    pub maintenance: Option<Maintenance>,
}

/// What the committer needs to maintain tables.
pub struct Maintenance {
    /// When and what to maintain.
    pub policy: MaintenancePolicy,
    /// Storage settings (listing table locations for orphans).
    pub s3: S3Settings,
}

/// Time kept free at the end of an invocation, so that it always ends cleanly.
pub const SAFETY_MARGIN: Duration = Duration::from_secs(20);

/// How long reading etcd may take.
pub const ETCD_TIMEOUT: Duration = Duration::from_secs(5);

/// The shard a tick handles: `{"shard": i, "shards": n}` in the schedule's input
/// (top level, or under `detail`); every topic when absent.
pub fn shard_of(event: &Value) -> Result<Shard, InvalidTick> {
    let fields = [event, &event["detail"]];
    let Some(source) = fields.iter().find(|v| v.get("shards").is_some()) else {
        return Ok(Shard::default());
    };
    let number = |name: &str| {
        source
            .get(name)
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| InvalidTick(format!("\"{name}\" must be a small non-negative integer")))
    };
    Shard::new(number("shard")?, number("shards")?).map_err(InvalidTick)
}

/// A tick's input is malformed (a permanent error: fix the schedule's input).
#[derive(Debug, thiserror::Error)]
#[error("invalid committer tick input: {0}")]
pub struct InvalidTick(pub String);

/// Why a tick failed.
#[derive(Debug, thiserror::Error)]
pub enum TickError {
    /// The schedule's input is malformed.
    #[error(transparent)]
    Input(#[from] InvalidTick),
    /// The pass failed.
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
}

/// Runs one tick (`event` is the scheduler's payload, logged for tracing);
/// `deadline` is when the invocation must have returned.
pub async fn handle<S: SegmentSource, L: Ledger>(
    committer: &Committer<S, L>,
    event: &Value,
    deadline: Instant,
) -> Result<Value, TickError> {
    let started = Instant::now();
    let tick = event.get("id").and_then(|id| id.as_str()).unwrap_or("-");
    tracing::info!(tick, "committer tick");
    let etcd = read_etcd(&committer.etcd_endpoints, ETCD_TIMEOUT).await;
    if let kfs_plan::crosscheck::EtcdState::Unreachable(reason) = &etcd {
        tracing::warn!(reason = %reason, "etcd unreachable: the cross-check holds commits per its policy");
    }
    let shard = shard_of(event)?;
    let config = PipelineConfig {
        deadline: Some(deadline.checked_sub(SAFETY_MARGIN).unwrap_or(deadline)),
        etcd,
        shard,
        ..committer.config.clone()
    };
    let report = run_once(
        &committer.source,
        committer.catalog.catalog.as_ref(),
        committer.catalog.swap.as_ref(),
        &committer.ledger,
        &config,
        &|_| {},
    )
    .await?;
    let maintained = maintain(committer, &report, config.deadline).await;
    let now = kfs_core::now_ms();
    let freshness = |o: &kfs_core::CommitOutcome| {
        o.newest_record_ms
            .map(|newest| ((now - newest).max(0) / 1000) as f64)
    };
    for (table, outcome) in &report.tables {
        let mut metrics = MetricSet::new(&[("Table", table)]);
        if let Some(seconds) = freshness(outcome) {
            metrics = metrics.put("Freshness", seconds, "Seconds");
        }
        metrics
            .put(
                "SnapshotsCommitted",
                f64::from(u8::from(outcome.snapshot_id.is_some())),
                "Count",
            )
            .put("FilesPerCommit", outcome.files as f64, "Count")
            .put("RecordsCommitted", outcome.records as f64, "Count")
            .put("GapsRecorded", outcome.gaps.len() as f64, "Count")
            .put("PartitionsHeld", outcome.holds.len() as f64, "Count")
            .put("EtcdHolds", outcome.crosscheck.held.len() as f64, "Count")
            .put(
                "EtcdUnconfirmedCommits",
                outcome.crosscheck.unconfirmed.len() as f64,
                "Count",
            )
            .put(
                "PartitionsStopped",
                outcome.crosscheck.stopped.len() as f64,
                "Count",
            )
            .emit(now);
        for (partition, next_offset, watermark) in &outcome.crosscheck.stopped {
            tracing::error!(table = %table, partition, next_offset, watermark,
                "etcd next_offset is below the table's watermark (topic recreated or etcd reset): partition stopped until an operator acts");
        }
        if outcome.crosscheck.topic_missing {
            tracing::warn!(table = %table, "the topic has segments but is absent from etcd's cluster snapshot");
        }
    }
    for (table, result) in &maintained {
        match result {
            Ok(summary) => MetricSet::new(&[("Table", table)])
                .put("FilesCompacted", summary.files_compacted as f64, "Count")
                .put(
                    "SnapshotsExpired",
                    summary.snapshots_expired as f64,
                    "Count",
                )
                .put("FilesDeleted", summary.files_deleted as f64, "Count")
                .emit(now),
            Err(error) => {
                tracing::error!(table = %table, error = %error, "maintenance failed; the data is untouched, the next tick tries again");
            }
        }
    }
    for (table, error) in &report.failed_tables {
        tracing::error!(table = %table, error = %error, "commit failed; files stay pending");
    }
    // The backlog the alarms watch, per table.
    let open = committer
        .ledger
        .list(Some("pending"), None)
        .await
        .map_err(PipelineError::from)?;
    let quarantined = committer
        .ledger
        .list(Some("quarantined"), None)
        .await
        .map_err(PipelineError::from)?;
    let mut backlog: BTreeMap<&str, (u64, u64, i64, u64)> = BTreeMap::new();
    for entry in &open {
        let slot = backlog
            .entry(entry.table.as_str())
            .or_insert((0, 0, now, 0));
        slot.0 += entry.data_files.len() as u64;
        slot.1 += entry.bytes;
        slot.2 = slot.2.min(entry.created_ms);
    }
    for entry in &quarantined {
        if matches!(entry.state, EntryState::Quarantined { .. }) {
            backlog
                .entry(entry.table.as_str())
                .or_insert((0, 0, now, 0))
                .3 += 1;
        }
    }
    for (table, (files, bytes, oldest, quarantined)) in &backlog {
        MetricSet::new(&[("Table", table)])
            .put("PendingFiles", *files as f64, "Count")
            .put("PendingBytes", *bytes as f64, "Bytes")
            .put(
                "OldestPendingAge",
                ((now - oldest).max(0) / 1000) as f64,
                "Seconds",
            )
            .put("QuarantinedSegments", *quarantined as f64, "Count")
            .emit(now);
    }
    let stopped: usize = report
        .tables
        .values()
        .map(|o| o.crosscheck.stopped.len())
        .sum();
    let unreachable = report.tables.values().any(|o| o.crosscheck.unreachable);
    let max_pending_age = backlog
        .values()
        .map(|(_, _, oldest, _)| (now - oldest).max(0) / 1000)
        .max()
        .unwrap_or(0);
    let total_quarantined: u64 = backlog.values().map(|(_, _, _, q)| q).sum();
    let mut totals = MetricSet::new(&[("Function", "committer")]);
    if let Some(worst) = report
        .tables
        .values()
        .filter_map(freshness)
        .reduce(f64::max)
    {
        totals = totals.put("MaxFreshness", worst, "Seconds");
    }
    totals
        .put("MaxOldestPendingAge", max_pending_age as f64, "Seconds")
        .put(
            "TotalQuarantinedSegments",
            total_quarantined as f64,
            "Count",
        )
        .put("TotalPartitionsStopped", stopped as f64, "Count")
        .put("EtcdUnreachable", f64::from(u8::from(unreachable)), "Count")
        .put("SegmentsSwept", report.converted as f64, "Count")
        .put("SegmentsDeferred", report.deferred as f64, "Count")
        .put("CommitFailures", report.failed_tables.len() as f64, "Count")
        .put(
            "MaintenanceFailures",
            maintained.values().filter(|r| r.is_err()).count() as f64,
            "Count",
        )
        .put(
            "CommitterDuration",
            started.elapsed().as_millis() as f64,
            "Milliseconds",
        )
        .emit(now);
    let tables: BTreeMap<&String, Value> = report
        .tables
        .iter()
        .map(|(table, o)| {
            (
                table,
                json!({
                    "snapshot_id": o.snapshot_id,
                    "segments": o.segments,
                    "records": o.records,
                    "watermarks": o.watermarks,
                    "newest_record_ms": o.newest_record_ms,
                    "etcd_held": o.crosscheck.held,
                    "stopped_partitions": o.crosscheck.stopped,
                }),
            )
        })
        .collect();
    Ok(json!({
        "shard": [shard.index, shard.count],
        "swept": report.converted,
        "quarantined": report.quarantined.len(),
        "deferred": report.deferred,
        "tables": tables,
        "failed_tables": report.failed_tables,
        "maintenance": maintained
            .iter()
            .map(|(table, result)| {
                let value = match result {
                    Ok(m) => json!({
                        "files_compacted": m.files_compacted,
                        "snapshots_expired": m.snapshots_expired,
                        "files_deleted": m.files_deleted,
                        "manifests_rewritten": m.manifests_rewritten,
                        "orphan_cleanup": m.orphan_cleanup,
                    }),
                    Err(e) => json!({"error": e}),
                };
                (table.clone(), value)
            })
            .collect::<BTreeMap<String, Value>>(),
    }))
}

/// Maintains the tables committed to in this tick, one after the other, until the
/// deadline; tables not reached are maintained on a later tick.
async fn maintain<S: SegmentSource, L: Ledger>(
    committer: &Committer<S, L>,
    report: &kfs_core::RunReport,
    deadline: Option<Instant>,
) -> BTreeMap<String, Result<MaintenanceSummary, String>> {
    let mut done = BTreeMap::new();
    let Some(maintenance) = &committer.maintenance else {
        return done;
    };
    // Each committed table, and its dead-letter table when it took dead letters.
    let tables = report.tables.iter().flat_map(|(table, outcome)| {
        let name = kfs_plan::naming::TableName::parse(table);
        let dead_letters = name
            .as_ref()
            .filter(|_| outcome.dead_letters > 0)
            .map(|name| name.dead_letters());
        name.into_iter().chain(dead_letters)
    });
    for name in tables {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let table = name.to_string();
        let result = maintain_table(
            committer.catalog.catalog.as_ref(),
            committer.catalog.swap.as_ref(),
            &committer.ledger,
            &maintenance.s3,
            &table_ident(&name),
            &maintenance.policy,
            deadline,
            kfs_core::now_ms(),
        )
        .await
        .map_err(|e| e.to_string());
        done.insert(table, result);
    }
    done
}

//! The committer function's handler: on every schedule tick, read etcd for the offset
//! cross-check, run the core's tick ([`kfs_core::run_tick`]: sweep, commits,
//! maintenance, backlog) within the invocation's time budget, then publish the tick's
//! metrics (CloudWatch EMF) and answer with its summary. A batch of wake-ups from the
//! converter (SQS FIFO, `kfs_plan::wakeup`) runs the same tick for the tables it
//! names only, without maintenance (the schedule's), and answers which messages to
//! deliver again ([`wakeup`]).

pub mod wakeup;

use std::time::{Duration, Instant};

use kfs_aws::emf::MetricSet;
use kfs_core::{
    CatalogHandle, CommitOutcome, Ledger, PipelineConfig, PipelineError, SegmentSource, TickLog,
    TickMaintenance, TickReport, run_tick,
};
use kfs_etcd::read_etcd;
use kfs_plan::shard::Shard;
use serde_json::Value;

/// The committer's clients and settings, built once per container.
pub struct Committer<S, L> {
    /// Segment source (rooted at the segment prefix).
    pub source: S,
    /// Iceberg catalog, with its pointer swap (schema changes, replace snapshots).
    pub catalog: CatalogHandle,
    /// Ledger.
    pub ledger: L,
    /// Pass settings (`deadline`, `etcd` and `shard` are set per invocation).
    pub config: PipelineConfig,
    /// How to reach etcd for the offset cross-check (no endpoints: off).
    pub etcd: kfs_etcd::EtcdConnection,
    /// Table maintenance after the commits (`None`: off).
    pub maintenance: Option<TickMaintenance>,
    /// Where the last tick's summary is kept for `kfs-iceberg status` (`None`: not kept).
    pub tick_log: Option<TickLog>,
    /// How wake-ups are paced (`None`: every wake-up commits at once).
    pub pacing: Option<wakeup::Pacing>,
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
    if let Some(messages) = wakeup::messages_of(event) {
        return wakeup::handle(committer, &messages, deadline).await;
    }
    let tick = event.get("id").and_then(|id| id.as_str()).unwrap_or("-");
    tracing::info!(tick, "committer tick");
    let shard = shard_of(event)?;
    let config = PipelineConfig {
        shard,
        ..committer.config.clone()
    };
    let report = tick_within(committer, config, committer.maintenance.as_ref(), deadline).await?;
    let summary = report.summary(shard);
    if let Some(log) = &committer.tick_log {
        // For `kfs-iceberg status`; the tick is done whether or not this lands.
        if let Err(e) = log.write(shard, &summary).await {
            tracing::warn!(error = %e, "the tick's summary could not be recorded for status");
        }
    }
    Ok(summary)
}

/// Reads etcd, runs a tick of `config` (its deadline and etcd view set here) with
/// `maintenance`, then logs what an operator acts on and publishes the metrics.
pub(crate) async fn tick_within<S: SegmentSource, L: Ledger>(
    committer: &Committer<S, L>,
    config: PipelineConfig,
    maintenance: Option<&TickMaintenance>,
    deadline: Instant,
) -> Result<TickReport, PipelineError> {
    let etcd = read_etcd(&committer.etcd, ETCD_TIMEOUT).await;
    if let kfs_plan::crosscheck::EtcdState::Unreachable(reason) = &etcd {
        tracing::warn!(reason = %reason, "etcd unreachable: the cross-check holds commits per its policy");
    }
    let config = PipelineConfig {
        deadline: Some(deadline.checked_sub(SAFETY_MARGIN).unwrap_or(deadline)),
        etcd,
        ..config
    };
    let report = run_tick(
        &committer.source,
        committer.catalog.access(),
        &committer.ledger,
        &config,
        maintenance,
    )
    .await?;
    log_problems(&report);
    for metrics in metric_sets(&report) {
        metrics.emit(report.now_ms);
    }
    Ok(report)
}

/// Errors and warnings an operator acts on, one log line each.
fn log_problems(report: &TickReport) {
    for (table, outcome) in &report.pass.tables {
        for (partition, next_offset, watermark) in &outcome.crosscheck.stopped {
            tracing::error!(table = %table, partition, next_offset, watermark,
                "etcd next_offset is below the table's watermark (topic recreated or etcd reset): partition stopped until an operator acts");
        }
        if outcome.crosscheck.topic_missing {
            tracing::warn!(table = %table, "the topic has segments but is absent from etcd's cluster snapshot");
        }
    }
    for (table, result) in &report.maintenance {
        if let Err(error) = result {
            tracing::error!(table = %table, error = %error, "maintenance failed; the data is untouched, the next tick tries again");
        }
    }
    for (table, error) in &report.pass.failed_tables {
        tracing::error!(table = %table, error = %error, "commit failed; files stay pending");
    }
    for (segment, error) in &report.pass.failed_segments {
        tracing::error!(segment = %segment, error = %error, "segment conversion failed; tried again next tick, other tables went on");
    }
    for (segment, reason) in &report.pass.unreadable {
        tracing::error!(segment = %segment, error = %reason, "ledger item unreadable; its partition waits at it until the item is repaired or removed");
    }
    for (feed, reason) in &report.pass.refused {
        tracing::error!(topic = %feed, error = %reason, "topic refused its table; its segments wait until the mapping is fixed");
    }
}

/// The tick's metrics: per table committed, per table maintained, the backlog per
/// table, and the function's totals (what the alarms watch).
pub fn metric_sets(report: &TickReport) -> Vec<MetricSet> {
    let count = |n: usize| n as f64;
    let mut sets = Vec::new();
    for (table, outcome) in &report.pass.tables {
        let mut metrics = MetricSet::new(&[("Table", table)]);
        if let Some(seconds) = report.freshness_s(table) {
            metrics = metrics.put("Freshness", seconds, "Seconds");
        }
        sets.push(commit_metrics(metrics, outcome));
    }
    for (table, summary) in report
        .maintenance
        .iter()
        .filter_map(|(table, result)| Some((table, result.as_ref().ok()?)))
    {
        sets.push(
            MetricSet::new(&[("Table", table)])
                .put("FilesCompacted", count(summary.files_compacted), "Count")
                .put(
                    "SnapshotsExpired",
                    count(summary.snapshots_expired),
                    "Count",
                )
                .put("FilesDeleted", count(summary.files_deleted), "Count"),
        );
    }
    for (table, backlog) in &report.backlog {
        sets.push(
            MetricSet::new(&[("Table", table)])
                .put("PendingSegments", backlog.pending_segments as f64, "Count")
                .put(
                    "OldestPendingAge",
                    backlog.oldest_pending_age_s(report.now_ms) as f64,
                    "Seconds",
                )
                .put("QuarantinedSegments", backlog.quarantined as f64, "Count"),
        );
    }
    let mut totals = MetricSet::new(&[("Function", "committer")]);
    if let Some(worst) = report.max_freshness_s() {
        totals = totals.put("MaxFreshness", worst, "Seconds");
    }
    sets.push(
        totals
            .put(
                "MaxOldestPendingAge",
                report.max_oldest_pending_age_s() as f64,
                "Seconds",
            )
            .put(
                "TotalQuarantinedSegments",
                report.quarantined() as f64,
                "Count",
            )
            .put(
                "TotalPartitionsStopped",
                count(report.partitions_stopped()),
                "Count",
            )
            .put(
                "EtcdUnreachable",
                f64::from(u8::from(report.etcd_unreachable())),
                "Count",
            )
            .put("SegmentsSwept", count(report.pass.converted), "Count")
            .put("SegmentsDeferred", count(report.pass.deferred), "Count")
            .put("FeedsDeferred", count(report.pass.deferred_feeds), "Count")
            .put(
                "ConversionFailures",
                count(report.pass.failed_segments.len()),
                "Count",
            )
            .put(
                "UnreadableLedgerItems",
                count(report.pass.unreadable.len()),
                "Count",
            )
            .put(
                "CommitFailures",
                count(report.pass.failed_tables.len() + report.pass.refused.len()),
                "Count",
            )
            .put(
                "MaintenanceFailures",
                count(report.maintenance_failures()),
                "Count",
            )
            .put(
                "CommitterDuration",
                report.elapsed.as_millis() as f64,
                "Milliseconds",
            ),
    );
    sets
}

/// One table's commit metrics.
fn commit_metrics(metrics: MetricSet, outcome: &CommitOutcome) -> MetricSet {
    let count = |n: usize| n as f64;
    metrics
        .put(
            "SnapshotsCommitted",
            f64::from(u8::from(outcome.snapshot_id.is_some())),
            "Count",
        )
        .put("FilesPerCommit", count(outcome.files), "Count")
        .put("RecordsCommitted", outcome.records as f64, "Count")
        .put("GapsRecorded", count(outcome.gaps.len()), "Count")
        .put("PartitionsHeld", count(outcome.holds.len()), "Count")
        .put("EtcdHolds", count(outcome.crosscheck.held.len()), "Count")
        .put(
            "EtcdUnconfirmedCommits",
            count(outcome.crosscheck.unconfirmed.len()),
            "Count",
        )
        .put(
            "PartitionsStopped",
            count(outcome.crosscheck.stopped.len()),
            "Count",
        )
}

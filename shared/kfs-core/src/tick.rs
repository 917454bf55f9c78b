//! The committer's tick as data: one pipeline pass within the deadline, maintenance of
//! the tables it committed to (and of their dead-letter tables), and the backlog per
//! table swept, gathered in one [`TickReport`] that the Lambda handler turns into metrics and
//! its answer. No I/O beyond the pass, the maintenance and the backlog's key reads.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kfs_plan::naming::TableName;
use kfs_plan::shard::Shard;
use serde_json::{Value, json};

use crate::clock::now_ms;
use crate::error::PipelineError;
use crate::ledger::{EntryState, Ledger, partition_heads};
use crate::maintenance::{
    MaintenancePolicy, MaintenanceStorage, MaintenanceSummary, maintain_tables,
};
use crate::pass::{PassReport, PipelineConfig, run_pass};
use crate::source::SegmentSource;
use kfs_catalog::catalog::CatalogAccess;

/// Table maintenance after a tick's commits.
#[derive(Debug, Clone)]
pub struct TickMaintenance {
    /// When and what to maintain.
    pub policy: MaintenancePolicy,
    /// The storage and the warehouse orphan cleanup is confined to.
    pub storage: MaintenanceStorage,
}

/// What waits in the ledger for one table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backlog {
    /// Entries converted and pending a commit: a segment converted on its own, or a
    /// run of segments (read from the keys alone, a run counts once).
    pub pending_segments: u64,
    /// When the oldest pending entry at the head of a partition was created (Unix ms;
    /// now when none is pending): what holds a partition back is at its head.
    pub oldest_pending_ms: i64,
    /// Segments quarantined.
    pub quarantined: u64,
}

impl Backlog {
    fn empty(now_ms: i64) -> Self {
        Self {
            pending_segments: 0,
            oldest_pending_ms: now_ms,
            quarantined: 0,
        }
    }

    /// Seconds since the oldest pending entry was created, at `now_ms`.
    pub fn oldest_pending_age_s(&self, now_ms: i64) -> i64 {
        (now_ms - self.oldest_pending_ms).max(0) / 1000
    }
}

/// What one tick did.
#[derive(Debug, Clone)]
pub struct TickReport {
    /// The pass: segments swept, commits per table, failed tables.
    pub pass: PassReport,
    /// Maintenance per table reached before the deadline: its summary or its error.
    pub maintenance: BTreeMap<String, Result<MaintenanceSummary, String>>,
    /// What waits per table after the tick.
    pub backlog: BTreeMap<String, Backlog>,
    /// When the report was made (Unix ms).
    pub now_ms: i64,
    /// How long the tick took.
    pub elapsed: Duration,
}

impl TickReport {
    /// Seconds from `table`'s newest committed record to the report's time, when known.
    pub fn freshness_s(&self, table: &str) -> Option<f64> {
        let newest = self.pass.tables.get(table)?.newest_record_ms?;
        Some(((self.now_ms - newest).max(0) / 1000) as f64)
    }

    /// The worst freshness of the tables committed to.
    pub fn max_freshness_s(&self) -> Option<f64> {
        self.pass
            .tables
            .keys()
            .filter_map(|table| self.freshness_s(table))
            .reduce(f64::max)
    }

    /// The oldest pending entry's age over every table, in seconds.
    pub fn max_oldest_pending_age_s(&self) -> i64 {
        self.backlog
            .values()
            .map(|b| b.oldest_pending_age_s(self.now_ms))
            .max()
            .unwrap_or(0)
    }

    /// Segments quarantined over every table.
    pub fn quarantined(&self) -> u64 {
        self.backlog.values().map(|b| b.quarantined).sum()
    }

    /// Partitions the etcd cross-check stopped, over every table.
    pub fn partitions_stopped(&self) -> usize {
        self.pass
            .tables
            .values()
            .map(|o| o.crosscheck.stopped.len())
            .sum()
    }

    /// Whether etcd could not be read for the cross-check.
    pub fn etcd_unreachable(&self) -> bool {
        self.pass.tables.values().any(|o| o.crosscheck.unreachable)
    }

    /// Tables whose maintenance failed.
    pub fn maintenance_failures(&self) -> usize {
        self.maintenance.values().filter(|r| r.is_err()).count()
    }
}

/// Runs one tick: the pass as `config` says (its deadline bounds everything), then
/// maintenance of the tables committed to, then the backlog.
pub async fn run_tick(
    source: &impl SegmentSource,
    catalog: CatalogAccess<'_>,
    ledger: &impl Ledger,
    config: &PipelineConfig,
    maintenance: Option<&TickMaintenance>,
) -> Result<TickReport, PipelineError> {
    let started = Instant::now();
    let pass = run_pass(
        source,
        catalog.catalog,
        catalog.swap,
        ledger,
        config,
        &|_| {},
    )
    .await?;
    let maintained = match maintenance {
        Some(maintenance) => {
            maintain_tables(
                catalog,
                ledger,
                &maintenance.storage,
                &committed_tables(&pass),
                &maintenance.policy,
                config.deadline,
            )
            .await
        }
        None => BTreeMap::new(),
    };
    let now = now_ms();
    Ok(TickReport {
        backlog: backlog(ledger, &pass.swept, now).await?,
        pass,
        maintenance: maintained,
        now_ms: now,
        elapsed: started.elapsed(),
    })
}

/// Each table committed to, and its dead-letter table when it took dead letters.
fn committed_tables(pass: &PassReport) -> Vec<TableName> {
    pass.tables
        .iter()
        .flat_map(|(table, outcome)| {
            let name = TableName::parse(table);
            let dead_letters = name
                .as_ref()
                .filter(|_| outcome.dead_letters > 0)
                .map(TableName::dead_letters);
            let change_log = name
                .as_ref()
                .filter(|_| outcome.change_log > 0)
                .map(TableName::change_log);
            name.into_iter().chain(dead_letters).chain(change_log)
        })
        .collect()
}

/// What waits in the ledger for each of `tables`: pending and quarantined segments,
/// read from the ledger's keys, and the age of each partition's head (one entry
/// read per partition), so the cost follows partitions, not the backlog's size.
pub async fn backlog(
    ledger: &impl Ledger,
    tables: impl IntoIterator<Item = &String>,
    now_ms: i64,
) -> Result<BTreeMap<String, Backlog>, PipelineError> {
    let mut backlog: BTreeMap<String, Backlog> = BTreeMap::new();
    for table in tables {
        let pending = ledger.work_keys("pending", table).await?;
        let quarantined = ledger.work_keys("quarantined", table).await?;
        if pending.is_empty() && quarantined.is_empty() {
            continue;
        }
        let mut slot = Backlog::empty(now_ms);
        slot.pending_segments = pending.len() as u64;
        slot.quarantined = quarantined.len() as u64;
        // Unreadable items are the pass's to report; the backlog counts what it can read.
        let heads = ledger.get_many(&partition_heads(&pending, 1)).await?;
        for entry in heads.entries {
            if entry.state == EntryState::Pending {
                slot.oldest_pending_ms = slot.oldest_pending_ms.min(entry.created_ms);
            }
        }
        backlog.insert(table.clone(), slot);
    }
    Ok(backlog)
}

impl PassReport {
    /// What the pass did, as JSON: `shard`'s pass that ended at `finished_ms`, per
    /// table the commit, then what failed and why (what [`TickLog`] keeps).
    pub fn summary(&self, shard: Shard, finished_ms: i64) -> Value {
        let tables: BTreeMap<&String, Value> = self
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
        json!({
            "shard": [shard.index, shard.count],
            "finished_ms": finished_ms,
            "swept": self.converted,
            "quarantined": self.quarantined.len(),
            "deferred": self.deferred,
            "deferred_feeds": self.deferred_feeds,
            "tables": tables,
            "failed_tables": self.failed_tables,
            "failed_segments": self.failed_segments,
            "unreadable_ledger_items": self.unreadable,
            "refused_topics": self.refused,
        })
    }
}

impl TickReport {
    /// What the tick did, as JSON: the pass's [`PassReport::summary`] and the
    /// maintenance per table: the committer's answer, and what `kfs-iceberg status`
    /// shows of the last tick.
    pub fn summary(&self, shard: Shard) -> Value {
        let maintenance: BTreeMap<&String, Value> = self
            .maintenance
            .iter()
            .map(|(table, result)| {
                let value = match result {
                    Ok(m) => json!({
                        "files_compacted": m.files_compacted,
                        "snapshots_expired": m.snapshots_expired,
                        "files_deleted": m.files_deleted,
                        "manifests_rewritten": m.manifests_rewritten,
                        "orphan_cleanup": m.orphan_cleanup,
                        "steps_off": m.steps_off.iter().map(ToString::to_string).collect::<Vec<_>>(),
                    }),
                    Err(e) => json!({"error": e}),
                };
                (table, value)
            })
            .collect();
        let mut summary = self.pass.summary(shard, self.now_ms);
        summary["maintenance"] = json!(maintenance);
        summary
    }
}

/// Where the committer keeps its last tick's summary, one file per shard
/// (`<warehouse>/kfs-iceberg/ticks/shard-<i>.json`), for `kfs-iceberg status`: beside
/// the tables, never inside one (orphan cleanup lists table locations only, and no
/// namespace is spelled `kfs-iceberg`).
#[derive(Debug, Clone)]
pub struct TickLog {
    file_io: iceberg::io::FileIO,
    root: String,
}

impl TickLog {
    /// The log of the warehouse at `warehouse` (its location), through `file_io`.
    pub fn new(file_io: iceberg::io::FileIO, warehouse: &str) -> Self {
        Self {
            file_io,
            root: format!("{}/kfs-iceberg/ticks", warehouse.trim_end_matches('/')),
        }
    }

    fn path(&self, shard: u32) -> String {
        format!("{}/shard-{shard}.json", self.root)
    }

    /// Records `summary` as `shard`'s last tick; a URL in its messages (an error a
    /// client library wrote) is kept without its secrets.
    pub async fn write(&self, shard: Shard, summary: &Value) -> iceberg::Result<()> {
        let text = serde_json::to_string(summary).unwrap_or_default();
        let bytes = kfs_plan::secret_url::redact_text(&text).into_bytes();
        self.file_io
            .new_output(self.path(shard.index))?
            .write(bytes.into())
            .await
    }

    /// The last tick of each shard, from shard 0 up to the first without one; a
    /// summary that does not parse is skipped.
    pub async fn read(&self) -> iceberg::Result<Vec<Value>> {
        let mut ticks = Vec::new();
        for shard in 0..u32::MAX {
            let path = self.path(shard);
            if !self.file_io.exists(&path).await? {
                break;
            }
            let bytes = self.file_io.new_input(&path)?.read().await?;
            // A log written before URLs were redacted is read without its secrets.
            let text = kfs_plan::secret_url::redact_text(&String::from_utf8_lossy(&bytes));
            if let Ok(summary) = serde_json::from_str(&text) {
                ticks.push(summary);
            }
        }
        Ok(ticks)
    }
}

//! `run --follow`: the committer's tick on one machine, over and over, a pause of
//! `--interval` between ticks, as KafScale's processor runs in a container, until
//! SIGTERM or SIGINT. A tick is a pass of the pipeline, then the maintenance of the
//! tables it committed to (compaction, snapshot expiry, manifest merging, orphan
//! cleanup, by the committer's default policy and each table's switches), so that a
//! table committed every few seconds keeps its metadata and files in bounds.
//!
//! A signal lets the pass under way finish (its commits land, its conversions are
//! recorded) and then ends the command with exit 0; a second signal ends it at once,
//! abandoning the pass as a crash would, which the pipeline is built to survive: what
//! was converted and not committed is committed by the next run, never twice. With
//! `--metrics-addr`, `/metrics` and `/healthz` are served while it runs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kfs_core::{
    CatalogAccess, Ledger, MaintenancePolicy, PassReport, PipelineConfig, SegmentSource,
    TickMaintenance, run_tick,
};
use tokio::sync::watch;

use crate::CliError;
use crate::embedded::Embedded;
use crate::metrics::Metrics;

/// The pause between passes when `--interval` is not given: KafScale's processor
/// polls every five seconds.
const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);

/// How often the tables are compacted at most when `--compact-interval` is not given:
/// after every tick, as the committer does. Compaction in tiers merges files of about
/// one size only, so compacting after every tick of a second rewrote 3.13 times the
/// appended bytes in five minutes (docs/performance.md, "Freshness of `run --follow`").
const DEFAULT_COMPACT_INTERVAL: Duration = Duration::ZERO;

/// The follow mode's options of `run`.
#[derive(Debug, clap::Args)]
pub struct FollowArgs {
    /// Keep going: a pass, a pause of `--interval`, the next pass, until SIGTERM or
    /// SIGINT, which let the pass under way finish and exit 0 (a second signal stops at
    /// once; what was under way is picked up by the next run).
    #[arg(long)]
    pub follow: bool,
    /// With --follow: the pause between the end of one pass and the start of the next
    /// (`500ms`, `5s`, `1m`; default 5s).
    #[arg(long, value_name = "DURATION", requires = "follow", value_parser = kfs_plan::duration::parse_duration)]
    pub interval: Option<Duration>,
    /// With --follow: compact the tables at most this often (default `0s`: after every
    /// tick, as the committer does; compaction runs in tiers, merging files of about
    /// one size only).
    #[arg(long, value_name = "DURATION", requires = "follow", value_parser = kfs_plan::duration::parse_duration)]
    pub compact_interval: Option<Duration>,
    /// With --follow: serve Prometheus metrics at `/metrics` and liveness at `/healthz`
    /// on this address (e.g. `127.0.0.1:9464`; port 0 picks a free one, printed).
    #[arg(long, value_name = "ADDR", requires = "follow")]
    pub metrics_addr: Option<SocketAddr>,
}

/// How many stop signals have arrived.
struct Signals(watch::Receiver<u32>);

impl Signals {
    /// Counts SIGTERM and SIGINT from now on (they no longer end the process).
    fn listen() -> Result<Self, CliError> {
        use tokio::signal::unix::{SignalKind, signal};
        let fail = |e: std::io::Error| CliError::Pipeline(format!("cannot watch for signals: {e}"));
        let mut term = signal(SignalKind::terminate()).map_err(fail)?;
        let mut int = signal(SignalKind::interrupt()).map_err(fail)?;
        let (count, seen) = watch::channel(0u32);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    Some(()) = term.recv() => {}
                    Some(()) = int.recv() => {}
                    else => return,
                }
                count.send_modify(|n| *n += 1);
            }
        });
        Ok(Self(seen))
    }

    /// Whether at least one signal has arrived.
    fn stopping(&self) -> bool {
        *self.0.borrow() > 0
    }

    /// Waits until `n` signals have arrived.
    async fn reached(&self, n: u32) {
        let mut seen = self.0.clone();
        // The sender lives as long as the process: an error cannot come; wait forever.
        if seen.wait_for(|count| *count >= n).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Runs passes until a signal; see the module's documentation.
pub async fn follow<L: Ledger>(
    source: &impl SegmentSource,
    location: &str,
    embedded: &Embedded<L>,
    config: &PipelineConfig,
    args: &FollowArgs,
) -> Result<(), CliError> {
    let interval = args.interval.unwrap_or(DEFAULT_INTERVAL);
    let signals = Signals::listen()?;
    let metrics = Arc::new(Metrics::default());
    let mut maintenance = TickMaintenance {
        // Compacted about as often as committed: in tiers, so a table's growing file is
        // not rewritten with each new small one.
        policy: MaintenancePolicy {
            tiered_compaction: true,
            ..MaintenancePolicy::default()
        },
        storage: embedded.storage(),
    };
    let compact_interval = args.compact_interval.unwrap_or(DEFAULT_COMPACT_INTERVAL);
    let mut last_compaction: Option<Instant> = None;
    if let Some(addr) = args.metrics_addr {
        let bound = crate::metrics::serve(addr, metrics.clone()).await?;
        out!("metrics at http://{bound}/metrics, liveness at http://{bound}/healthz");
    }
    out!(
        "following {location}: a pass, then {} of rest; SIGTERM or SIGINT stops after the pass under way",
        humantime(interval)
    );
    while !signals.stopping() {
        let started = Instant::now();
        maintenance.policy.compact =
            last_compaction.is_none_or(|at| at.elapsed() >= compact_interval);
        let tick = run_tick(
            source,
            CatalogAccess {
                catalog: embedded.catalog.as_ref(),
                swap: embedded.swap.as_ref(),
            },
            &embedded.ledger,
            config,
            Some(&maintenance),
        );
        let result = tokio::select! {
            result = tick => result,
            () = signals.reached(2) => {
                eprintln!("kfs-iceberg: stopped at once; the pass under way is picked up by the next run");
                return Ok(());
            }
        };
        match result {
            Ok(tick) => {
                metrics.record_tick(&tick, started.elapsed());
                if maintenance.policy.compact && !tick.maintenance.is_empty() {
                    last_compaction = Some(started);
                }
                if did_something(&tick.pass) {
                    out!("pass at {}:", crate::time::rfc3339_ms(tick.now_ms));
                    crate::report::print_report(&tick.pass);
                }
                for (table, result) in &tick.maintenance {
                    if let Err(e) = result {
                        eprintln!(
                            "kfs-iceberg: {table}: maintenance failed: {e} (tried again after its next commit)"
                        );
                    }
                }
                let shard = kfs_plan::shard::Shard::default();
                if let Err(e) = embedded.tick_log.write(shard, &tick.summary(shard)).await {
                    eprintln!("kfs-iceberg: the pass's summary could not be kept for status: {e}");
                }
            }
            Err(e) => {
                metrics.record_failure(kfs_core::now_ms(), started.elapsed());
                eprintln!(
                    "kfs-iceberg: the pass failed: {e} (tried again in {})",
                    humantime(interval)
                );
            }
        }
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = signals.reached(1) => {}
        }
    }
    out!("stopped after the pass under way");
    Ok(())
}

/// Whether a pass has anything to say: conversions, commits or trouble.
fn did_something(report: &PassReport) -> bool {
    report.converted > 0
        || report.tables.values().any(|t| t.snapshot_id.is_some())
        || !report.quarantined.is_empty()
        || !report.failed_tables.is_empty()
        || !report.failed_segments.is_empty()
        || !report.unreadable.is_empty()
        || !report.refused.is_empty()
        || !report.rewritten.is_empty()
}

/// A duration as an operator writes it: `500ms`, `5s`, `2m`.
fn humantime(d: Duration) -> String {
    match d.as_millis() {
        ms if ms % 60_000 == 0 && ms > 0 => format!("{}m", ms / 60_000),
        ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
        ms => format!("{ms}ms"),
    }
}

//! What `run --follow` tells a scraper: its passes, conversions and commits as
//! Prometheus metrics at `/metrics`, and whether it is alive at `/healthz`, served on
//! one address by a small HTTP/1.1 responder (GET only, one request per connection).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kfs_core::TickReport;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::CliError;

/// The largest request head read before the connection is answered `431`.
const MAX_REQUEST_BYTES: usize = 8 * 1024;
/// How long a client has to send its request head.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Counters and gauges of one table.
#[derive(Debug, Default, Clone)]
struct TableMetrics {
    commits: u64,
    records: u64,
    commit_failures: u64,
    maintenance_failures: u64,
    last_commit_seconds: f64,
    newest_record_seconds: f64,
    pending_segments: u64,
    quarantined_segments: u64,
}

/// A metric: name, type, help and how its value is read.
type Metric<T> = (&'static str, &'static str, &'static str, fn(&T) -> f64);

/// The follow mode's own metrics.
const LOOP_METRICS: [Metric<Counters>; 9] = [
    (
        "kfs_passes_total",
        "counter",
        "Passes of the pipeline run.",
        |c| c.passes as f64,
    ),
    (
        "kfs_pass_failures_total",
        "counter",
        "Passes that failed as a whole (tried again after the interval).",
        |c| c.pass_failures as f64,
    ),
    (
        "kfs_segments_converted_total",
        "counter",
        "Segments converted.",
        |c| c.segments_converted as f64,
    ),
    (
        "kfs_records_converted_total",
        "counter",
        "Records converted.",
        |c| c.records_converted as f64,
    ),
    (
        "kfs_segments_quarantined_total",
        "counter",
        "Segments quarantined (their partition waits for an operator).",
        |c| c.segments_quarantined as f64,
    ),
    (
        "kfs_segments_failed_total",
        "counter",
        "Segment conversions that failed and are tried again.",
        |c| c.segments_failed as f64,
    ),
    (
        "kfs_last_pass_end_timestamp_seconds",
        "gauge",
        "When the last pass ended.",
        |c| c.last_pass_end_seconds,
    ),
    (
        "kfs_last_pass_duration_seconds",
        "gauge",
        "How long the last pass took.",
        |c| c.last_pass_duration_seconds,
    ),
    (
        "kfs_last_pass_success",
        "gauge",
        "1 when the last pass committed every table it reached.",
        |c| f64::from(u8::from(c.last_pass_ok)),
    ),
];

/// The metrics of each table, labelled `table`.
const TABLE_METRICS: [Metric<TableMetrics>; 8] = [
    (
        "kfs_table_commits_total",
        "counter",
        "Snapshots committed to the table.",
        |t| t.commits as f64,
    ),
    (
        "kfs_table_records_committed_total",
        "counter",
        "Records committed to the table.",
        |t| t.records as f64,
    ),
    (
        "kfs_table_commit_failures_total",
        "counter",
        "Commits of the table that failed (its files stay pending).",
        |t| t.commit_failures as f64,
    ),
    (
        "kfs_table_maintenance_failures_total",
        "counter",
        "Maintenance of the table that failed (tried again after its next commit).",
        |t| t.maintenance_failures as f64,
    ),
    (
        "kfs_table_last_commit_timestamp_seconds",
        "gauge",
        "When the table's last snapshot was committed.",
        |t| t.last_commit_seconds,
    ),
    (
        "kfs_table_newest_record_timestamp_seconds",
        "gauge",
        "The newest record time committed to the table (freshness: now minus this).",
        |t| t.newest_record_seconds,
    ),
    (
        "kfs_table_pending_segments",
        "gauge",
        "Segments converted and waiting for a commit.",
        |t| t.pending_segments as f64,
    ),
    (
        "kfs_table_quarantined_segments",
        "gauge",
        "Segments quarantined, waiting for an operator.",
        |t| t.quarantined_segments as f64,
    ),
];

/// Everything the follow mode has done since it started.
#[derive(Debug, Default)]
struct Counters {
    passes: u64,
    pass_failures: u64,
    segments_converted: u64,
    records_converted: u64,
    segments_quarantined: u64,
    segments_failed: u64,
    last_pass_end_seconds: f64,
    last_pass_duration_seconds: f64,
    last_pass_ok: bool,
    last_pass_failed: bool,
    tables: BTreeMap<String, TableMetrics>,
}

/// The follow mode's metrics, shared between its loop and the HTTP responder.
#[derive(Debug, Default)]
pub struct Metrics {
    counters: Mutex<Counters>,
}

/// Seconds since the Unix epoch of a millisecond timestamp.
fn seconds(ms: i64) -> f64 {
    ms as f64 / 1000.0
}

impl Metrics {
    fn with<T>(&self, f: impl FnOnce(&mut Counters) -> T) -> T {
        f(&mut self.counters.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Counts a tick that took `took`.
    pub fn record_tick(&self, tick: &TickReport, took: Duration) {
        let report = &tick.pass;
        let ended_ms = tick.now_ms;
        self.with(|c| {
            c.passes += 1;
            c.segments_converted += report.converted as u64;
            c.records_converted += report.records_converted;
            c.segments_quarantined += report.quarantined.len() as u64;
            c.segments_failed += report.failed_segments.len() as u64;
            c.last_pass_end_seconds = seconds(ended_ms);
            c.last_pass_duration_seconds = took.as_secs_f64();
            c.last_pass_ok = report.failed_tables.is_empty();
            c.last_pass_failed = false;
            for (table, outcome) in &report.tables {
                let t = c.tables.entry(table.clone()).or_default();
                if outcome.snapshot_id.is_some() {
                    t.commits += 1;
                    t.records += outcome.records;
                    t.last_commit_seconds = seconds(ended_ms);
                }
                if let Some(newest) = outcome.newest_record_ms {
                    t.newest_record_seconds = seconds(newest);
                }
            }
            for table in report.failed_tables.keys() {
                c.tables.entry(table.clone()).or_default().commit_failures += 1;
            }
            for (table, result) in &tick.maintenance {
                if result.is_err() {
                    c.tables
                        .entry(table.clone())
                        .or_default()
                        .maintenance_failures += 1;
                }
            }
            for (table, backlog) in &tick.backlog {
                let t = c.tables.entry(table.clone()).or_default();
                t.pending_segments = backlog.pending_segments;
                t.quarantined_segments = backlog.quarantined;
            }
        });
    }

    /// Counts a pass that failed as a whole at `ended_ms`.
    pub fn record_failure(&self, ended_ms: i64, took: Duration) {
        self.with(|c| {
            c.passes += 1;
            c.pass_failures += 1;
            c.last_pass_end_seconds = seconds(ended_ms);
            c.last_pass_duration_seconds = took.as_secs_f64();
            c.last_pass_ok = false;
            c.last_pass_failed = true;
        });
    }

    /// The metrics in Prometheus' text exposition format.
    pub fn render(&self) -> String {
        let c = self.with(|c| Counters {
            tables: c.tables.clone(),
            ..*c
        });
        let mut text = String::new();
        for (name, kind, help, value) in LOOP_METRICS {
            let _ = write!(
                text,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {}\n",
                value(&c)
            );
        }
        for (name, kind, help, value) in TABLE_METRICS {
            let _ = write!(text, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
            for (table, t) in &c.tables {
                let label = table.replace('\\', "\\\\").replace('"', "\\\"");
                let _ = writeln!(text, "{name}{{table=\"{label}\"}} {}", value(t));
            }
        }
        text
    }

    /// Whether the loop is healthy: its last pass did not fail as a whole (a table
    /// whose commit failed is a table's trouble, in the metrics, not the loop's).
    fn healthy(&self) -> bool {
        self.with(|c| !c.last_pass_failed)
    }
}

/// Binds `addr` and answers scrapes in the background for as long as the process runs.
pub async fn serve(addr: SocketAddr, metrics: Arc<Metrics>) -> Result<SocketAddr, CliError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| CliError::Usage(format!("--metrics-addr {addr}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| CliError::Usage(format!("--metrics-addr {addr}: {e}")))?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let metrics = metrics.clone();
            tokio::spawn(async move {
                // A client that breaks off is nobody's concern but its own.
                let _ = answer(stream, &metrics).await;
            });
        }
    });
    Ok(bound)
}

/// Reads one request head and answers it.
async fn answer(mut stream: TcpStream, metrics: &Metrics) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let complete = tokio::time::timeout(REQUEST_TIMEOUT, async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            if head.len() > MAX_REQUEST_BYTES {
                return Ok(false);
            }
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                return Ok(false);
            }
            head.extend_from_slice(&buf[..n]);
        }
        Ok::<_, std::io::Error>(true)
    })
    .await
    .unwrap_or(Ok(false))?;
    let line = String::from_utf8_lossy(head.split(|&b| b == b'\r').next().unwrap_or_default());
    let mut parts = line.split(' ');
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, kind, body) = if !complete {
        (
            "431 Request Header Fields Too Large",
            "text/plain",
            String::new(),
        )
    } else if method != "GET" && method != "HEAD" {
        (
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n".to_owned(),
        )
    } else {
        match path {
            "/metrics" => (
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                metrics.render(),
            ),
            "/healthz" if metrics.healthy() => ("200 OK", "text/plain", "ok\n".to_owned()),
            "/healthz" => (
                "503 Service Unavailable",
                "text/plain",
                "the last pass failed\n".to_owned(),
            ),
            _ => (
                "404 Not Found",
                "text/plain",
                "/metrics or /healthz\n".to_owned(),
            ),
        }
    };
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if method != "HEAD" {
        response.push_str(&body);
    }
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_loop_renders_every_metric_at_zero_and_is_healthy() {
        let metrics = Metrics::default();
        let text = metrics.render();
        for name in ["kfs_passes_total 0", "kfs_segments_converted_total 0"] {
            assert!(text.contains(name), "{text}");
        }
        assert!(metrics.healthy());
    }

    #[test]
    fn a_failed_pass_is_unhealthy_until_one_succeeds() {
        let metrics = Metrics::default();
        metrics.record_failure(1_000, Duration::from_millis(5));
        assert!(!metrics.healthy());
        let tick = TickReport {
            pass: kfs_core::PassReport::default(),
            maintenance: BTreeMap::new(),
            backlog: BTreeMap::new(),
            now_ms: 2_000,
            elapsed: Duration::from_millis(5),
        };
        metrics.record_tick(&tick, Duration::from_millis(5));
        assert!(metrics.healthy());
        let text = metrics.render();
        assert!(text.contains("kfs_pass_failures_total 1"), "{text}");
        assert!(
            text.contains("kfs_last_pass_end_timestamp_seconds 2"),
            "{text}"
        );
    }
}

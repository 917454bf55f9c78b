//! The commits of a pass: every table the sweep listed that has pending work
//! committed on its listing, several tables at a time, each outcome noted.

use std::collections::BTreeMap;
use std::time::Instant;

use futures::StreamExt;
use kfs_catalog::catalog::CatalogAccess;

use super::config::PipelineConfig;
use super::report::{PassReport, Progress};
use super::sweep::SweptTable;
use crate::clock::now_ms;
use crate::commit::{CommitSettings, commit_table};
use crate::ledger::Ledger;

/// Commits every table of `swept` with pending work, on the listing of its feeds
/// (feeds that share one table, which only a table from before namespaces were
/// recorded allows, commit together); `config.table_concurrency` at a time, none
/// begun after the deadline. Outcomes and failures go to `report`.
pub(super) async fn commit_swept(
    access: CatalogAccess<'_>,
    ledger: &impl Ledger,
    config: &PipelineConfig,
    swept: BTreeMap<String, SweptTable>,
    report: &mut PassReport,
    progress: &(dyn Fn(&Progress) + Sync),
) {
    let jobs: Vec<_> = swept
        .into_values()
        .filter(|table| table.has_pending)
        .map(|table| {
            let settings = CommitSettings {
                start_offsets: config
                    .start_offsets
                    .get(&table.topic)
                    .cloned()
                    .unwrap_or_default(),
                etcd: config.etcd.view(&table.topic),
                crosscheck: config.crosscheck,
                ..config.commit.clone()
            };
            (table.topic, table.name, table.listing, settings)
        })
        .collect();
    let results: Vec<_> = futures::stream::iter(jobs)
        .map(|(topic, name, topic_listing, settings)| async move {
            if config.deadline.is_some_and(|d| Instant::now() >= d) {
                return (name, None);
            }
            let outcome = commit_table(
                access,
                ledger,
                &name,
                &topic,
                &topic_listing,
                &settings,
                now_ms(),
            )
            .await;
            (name, Some(outcome))
        })
        .buffer_unordered(config.table_concurrency.max(1))
        .collect()
        .await;
    for (name, outcome) in results {
        match outcome {
            Some(Ok(outcome)) => {
                report.unreadable.extend(outcome.unreadable.iter().cloned());
                progress(&Progress::Committed {
                    table: name.to_string(),
                    snapshot_id: outcome.snapshot_id,
                });
                report.tables.insert(name.to_string(), outcome);
            }
            Some(Err(e)) => {
                report.failed_tables.insert(name.to_string(), e.to_string());
            }
            None => {
                report.failed_tables.insert(
                    name.to_string(),
                    "deadline reached before its commit".into(),
                );
            }
        }
    }
}

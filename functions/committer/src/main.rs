//! The committer Lambda function: builds its clients once, then runs
//! [`kfs_committer::handle`] on every schedule tick, within the invocation's deadline.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kfs_aws::function_env::FunctionEnv;
use kfs_committer::Committer;
use kfs_core::{PipelineConfig, TickMaintenance};
use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde_json::Value;

/// The invocation's deadline as an `Instant`.
fn deadline_of(deadline_ms: u64) -> Instant {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    Instant::now() + Duration::from_millis(deadline_ms.saturating_sub(now_ms))
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    kfs_aws::function_env::init_logging();
    let env = FunctionEnv::from_env()?;
    let handle = env.catalog_handle().await?;
    let committer = std::sync::Arc::new(Committer {
        source: env.source()?,
        catalog: handle,
        ledger: env.ledger().await,
        config: PipelineConfig {
            naming: env.naming.clone(),
            schemas: env.schemas().await?,
            max_conversions: Some(env.sweep_max_segments),
            commit_reserve: Duration::from_secs(120),
            table_concurrency: 8,
            crosscheck: env.crosscheck,
            commit: kfs_core::CommitSettings {
                coalesce: true,
                ..kfs_core::CommitSettings::default()
            },
            ..PipelineConfig::default()
        },
        etcd: env.etcd_connection().await?,
        maintenance: env.maintenance.clone().map(|policy| TickMaintenance {
            policy,
            storage: kfs_core::MaintenanceStorage {
                s3: env.s3.clone(),
                warehouse: env.warehouse.clone(),
            },
        }),
        tick_log: Some(env.tick_log()),
        pacing: env
            .wakeups()
            .await
            .map(|queue| kfs_committer::wakeup::Pacing {
                queue: std::sync::Arc::new(queue),
                min_interval: env.wakeup_min_interval,
            }),
    });
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| {
        let committer = committer.clone();
        async move {
            let deadline = deadline_of(event.context.deadline);
            Ok::<Value, Error>(kfs_committer::handle(&committer, &event.payload, deadline).await?)
        }
    }))
    .await
}

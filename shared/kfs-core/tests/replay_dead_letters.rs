//! `kfs-iceberg dead-letters replay` (issue 36): records dead-lettered because the
//! registry did not know their schema are appended to their table once it does,
//! exactly once: a second replay appends nothing, and the pipeline goes on after it
//! with its watermarks intact.

use crate::local;
use crate::registry_lookups::{Counting, long_value};

use std::sync::Arc;

use kfs_core::{PipelineConfig, SchemaCache, replay_dead_letters};
use kfs_plan::naming::{TableNaming, ValueFormat};
use local::{BoxError, Local, offsets};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_of_an_unknown_schema_are_replayed_exactly_once() -> Result<(), BoxError> {
    let local = Local::open().await?;
    // Schema 7 is unknown for its first three lookups (one conversion's tries).
    let registry = Arc::new(Counting {
        not_found: 3,
        ..Counting::default()
    });
    let config = PipelineConfig {
        naming: TableNaming {
            value_format: ValueFormat::Registry,
            ..TableNaming::default()
        },
        schemas: Some(Arc::new(SchemaCache::new(registry.clone()))),
        ..PipelineConfig::default()
    };
    let values = [
        Some(long_value(7, 1)),
        Some(b"not framed".to_vec()),
        Some(long_value(7, 2)),
        Some(long_value(7, 3)),
    ];
    local.put_records(
        "orders",
        kfs_workload::simple_records(0, 4, |o| values[o as usize].clone()),
    )?;
    let report = local.run_config(&config).await?;
    assert!(report.quarantined.is_empty(), "{:?}", report.quarantined);
    let name = config.naming.table_for("orders");
    assert!(offsets(&local.catalog, &name).await?.is_empty());
    assert_eq!(
        offsets(&local.catalog, &name.dead_letters()).await?.len(),
        4
    );

    // The registry knows schema 7 now; a new process replays.
    let fresh = || Arc::new(SchemaCache::new(registry.clone()));
    let replayed = replay_dead_letters(local.access(), &name, fresh()).await?;
    assert_eq!(
        (replayed.retryable, replayed.replayed, replayed.present),
        (3, 3, 0)
    );
    let rows = offsets(&local.catalog, &name).await?;
    assert_eq!(rows.keys().map(|(_, o)| *o).collect::<Vec<_>>(), [0, 2, 3]);
    assert!(rows.values().all(|n| *n == 1));

    // Again (a rerun after a crash, or by mistake): nothing is appended twice.
    let again = replay_dead_letters(local.access(), &name, fresh()).await?;
    assert_eq!((again.replayed, again.present), (0, 3));
    assert_eq!(offsets(&local.catalog, &name).await?, rows);

    // The pipeline (a process started after the fix) goes on from its watermarks:
    // the next segment lands once.
    local.put_records(
        "orders",
        kfs_workload::simple_records(4, 2, |o| Some(long_value(7, o as u8))),
    )?;
    let config = PipelineConfig {
        schemas: Some(fresh()),
        ..config
    };
    local.run_config(&config).await?;
    let rows = offsets(&local.catalog, &name).await?;
    assert_eq!(
        rows.keys().map(|(_, o)| *o).collect::<Vec<_>>(),
        [0, 2, 3, 4, 5]
    );
    assert!(rows.values().all(|n| *n == 1));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replays_at_once_append_each_record_once() -> Result<(), BoxError> {
    let local = Local::open().await?;
    let registry = Arc::new(Counting {
        not_found: 3,
        ..Counting::default()
    });
    let config = PipelineConfig {
        naming: TableNaming {
            value_format: ValueFormat::Registry,
            ..TableNaming::default()
        },
        schemas: Some(Arc::new(SchemaCache::new(registry.clone()))),
        ..PipelineConfig::default()
    };
    local.put_records(
        "orders",
        kfs_workload::simple_records(0, 5, |o| Some(long_value(7, o as u8))),
    )?;
    local.run_config(&config).await?;
    let name = config.naming.table_for("orders");
    assert_eq!(
        offsets(&local.catalog, &name.dead_letters()).await?.len(),
        5
    );
    let fresh = || Arc::new(SchemaCache::new(registry.clone()));
    let (one, two) = tokio::join!(
        replay_dead_letters(local.access(), &name, fresh()),
        replay_dead_letters(local.access(), &name, fresh()),
    );
    let (one, two) = (one?, two?);
    assert_eq!(one.replayed + two.replayed, 5, "{one:?} {two:?}");
    let rows = offsets(&local.catalog, &name).await?;
    assert_eq!(rows.len(), 5);
    assert!(rows.values().all(|n| *n == 1));
    Ok(())
}

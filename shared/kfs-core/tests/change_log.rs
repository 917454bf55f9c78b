//! A mirror keeping its change log beside it (`change_log`): every record it mirrors
//! (updates, tombstones, keys written again) appended to `<table>__changes`, exactly
//! once with the mirror's commits, over two runs; a field the second run's values
//! bring becomes a column of both; records the mirror refuses go to its dead-letter
//! table, not to the log; the mirror's compaction leaves the log as it is.
//! iceberg-rust, pyiceberg and DuckDB read the log; the crash matrix and the
//! simulation run it under faults (`crash_matrix`, seeds 3 mod 4).

use std::collections::BTreeMap;

use iceberg::Catalog;
use kfs_core::table_ident;
use kfs_plan::naming::{TableNaming, ValueFormat};

use crate::local::{BoxError, Local, dead_letter_reasons, offsets};
use crate::row_deltas::keyed;

type TestResult = Result<(), BoxError>;

const TOPIC: &str = "customers";

/// `offsets` of partition 0, each once.
fn each_once(offsets: impl IntoIterator<Item = i64>) -> BTreeMap<(i32, i64), usize> {
    offsets.into_iter().map(|o| ((0, o), 1)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_keeps_every_record_in_its_change_log_exactly_once() -> TestResult {
    let local = Local::open().await?;
    let naming = TableNaming {
        value_format: ValueFormat::Json,
        mode: kfs_plan::mode::ModeSetting::parse("upsert", None)?.with_change_log(true)?,
        ..TableNaming::default()
    };
    naming.validate()?;
    let (name, log) = (
        naming.table_for(TOPIC),
        naming.table_for(TOPIC).change_log(),
    );
    local.put_records(
        TOPIC,
        vec![
            keyed(0, "a", Some(r#"{"name":"ann"}"#)),
            keyed(1, "b", Some(r#"{"name":"bob"}"#)),
            keyed(2, "a", Some(r#"{"name":"anna"}"#)),
            keyed(3, "b", None),
        ],
    )?;
    let report = local.run(&naming).await?;
    assert!(!report.left_work(), "{report:?}");
    assert_eq!(offsets(&local.catalog, &name).await?, each_once([2]));
    assert_eq!(offsets(&local.catalog, &log).await?, each_once(0..4));
    // The second run: a key written again, a field no value had (a column of both
    // tables now), and a value the mirror refuses (a dead letter, in neither).
    local.put_records(
        TOPIC,
        vec![
            keyed(4, "b", Some(r#"{"name":"bo","tier":2}"#)),
            keyed(5, "a", Some("[1, 2]")),
            keyed(6, "c", Some(r#"{"name":"cy"}"#)),
        ],
    )?;
    let report = local.run(&naming).await?;
    assert!(!report.left_work(), "{report:?}");
    assert_eq!(offsets(&local.catalog, &name).await?, each_once([2, 4, 6]));
    let logged = each_once([0, 1, 2, 3, 4, 6]);
    assert_eq!(offsets(&local.catalog, &log).await?, logged);
    let letters = dead_letter_reasons(&local.catalog, &name).await?;
    assert_eq!(letters.keys().copied().collect::<Vec<_>>(), [5]);
    let log_table = local.catalog.load_table(&table_ident(&log)).await?;
    let mirror = local.catalog.load_table(&table_ident(&name)).await?;
    assert_eq!(
        log_table.metadata().current_schema().as_struct(),
        mirror.metadata().current_schema().as_struct(),
        "the log's columns are the mirror's"
    );
    let log_mode = kfs_plan::mode::ModeSetting::of_properties(log_table.metadata().properties());
    assert_eq!(log_mode, Ok(kfs_plan::mode::ModeSetting::default()));
    // The mirror compacted: its log is as it was.
    local.compact(&name).await?;
    assert_eq!(offsets(&local.catalog, &log).await?, logged);
    crate::row_deltas::readers_see(&local, &log.to_string(), [0, 1, 2, 3, 4, 6].into_iter()).await
}

/// A table named like the mirror's change log that another topic owns (its own topic
/// `customers__changes`) is not taken as the log: the mirror's commits stop with the
/// reason, its files kept; nothing is written into the other topic's table; once the
/// operator turns the mirror's log off, the pending commit lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_log_name_another_topic_owns_stops_the_mirror_and_loses_nothing() -> TestResult {
    let local = Local::open().await?;
    let other = format!("{TOPIC}__changes");
    local.put_records(&other, vec![keyed(0, "x", Some(r#"{"name":"xavier"}"#))])?;
    local.run(&TableNaming::default()).await?;
    let naming = TableNaming {
        value_format: ValueFormat::Json,
        mode: kfs_plan::mode::ModeSetting::parse("upsert", None)?.with_change_log(true)?,
        ..TableNaming::default()
    };
    let (name, log) = (
        naming.table_for(TOPIC),
        naming.table_for(TOPIC).change_log(),
    );
    assert_eq!(log, naming.table_for(&other));
    local.put_records(
        TOPIC,
        vec![
            keyed(0, "a", Some(r#"{"name":"ann"}"#)),
            keyed(1, "a", Some(r#"{"name":"anna"}"#)),
        ],
    )?;
    let report = local.run(&naming).await?;
    let text = format!("{report:?}");
    assert!(
        report.left_work() && text.contains("belongs to topic"),
        "{text}"
    );
    assert_eq!(offsets(&local.catalog, &name).await?, BTreeMap::new());
    assert_eq!(offsets(&local.catalog, &log).await?, each_once([0]));
    // The operator turns the mirror's log off: the commit that waited lands.
    let mirror = local.catalog.load_table(&table_ident(&name)).await?;
    let tx = iceberg::transaction::Transaction::new(&mirror);
    let tx = iceberg::transaction::ApplyTransactionAction::apply(
        tx.update_table_properties().set(
            kfs_plan::mode::CHANGE_LOG_PROPERTY.to_owned(),
            "false".to_owned(),
        ),
        tx,
    )?;
    tx.commit(&local.catalog).await?;
    let naming = TableNaming {
        mode: kfs_plan::mode::ModeSetting::parse("upsert", None)?,
        ..naming
    };
    let report = local.run(&naming).await?;
    assert!(!report.left_work(), "{report:?}");
    assert_eq!(offsets(&local.catalog, &name).await?, each_once([1]));
    assert_eq!(offsets(&local.catalog, &log).await?, each_once([0]));
    Ok(())
}

/// A change log is a mirror's: refused for an append table, with the reason.
#[test]
fn a_change_log_needs_a_mirror() {
    let refused = kfs_plan::mode::ModeSetting::default().with_change_log(true);
    assert!(refused.err().unwrap_or_default().contains("append mode"));
}

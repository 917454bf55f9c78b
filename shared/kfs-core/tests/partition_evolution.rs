//! Evolving a table's partition spec for new data: a table committed unpartitioned is
//! configured `hour(timestamp)`. The next pass evolves its spec (through the catalog's
//! pointer swap); a segment converted before the change but still pending is written
//! again in the new spec at commit (an append takes files of the default spec only);
//! new segments are written in it; the committed file keeps its layout. Every offset is
//! read back exactly once, and compaction merges only files of the current spec.

use crate::local;

use kfs_core::Ledger;
use kfs_core::SourceObject;
use kfs_core::table_ident;
use kfs_core::testing::{TopicTable, ingest_segment};
use kfs_core::{PipelineConfig, now_ms, run_pass};
use kfs_plan::keys::SegmentFile;
use kfs_plan::layout::parse_partition_spec;
use kfs_plan::naming::TableNaming;
use kfs_segment::DecodeLimits;
use local::{BoxError, Local, offsets};

/// The values of the segment at `base`: 10 records, 20 minutes apart.
const VALUES: [&str; 10] = ["v"; 10];
const SPACING_MS: i64 = 1_200_000;

/// Checks that every offset below 30 is in the table once.
async fn exactly_once(local: &Local, name: &kfs_plan::naming::TableName) -> Result<(), BoxError> {
    let rows = offsets(&local.catalog, name).await?;
    assert_eq!(rows.len(), 30, "{rows:?}");
    assert!(rows.values().all(|&n| n == 1), "{rows:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_spec_evolves_the_table_for_new_and_pending_data() -> Result<(), BoxError> {
    let local = Local::open().await?;
    let Local {
        catalog,
        swap,
        ledger,
        source,
        ..
    } = &local;
    let access = local.access();
    let unpartitioned = PipelineConfig::default();
    let name = unpartitioned.naming.table_for("orders");

    // Committed unpartitioned.
    local.put("orders", 0, &VALUES, SPACING_MS)?;
    run_pass(source, catalog, swap, ledger, &unpartitioned, &|_| {}).await?;
    // Converted unpartitioned, still pending when the spec changes.
    let key = local.put("orders", 10, &VALUES, SPACING_MS)?;
    let feed = kfs_core::Feed {
        namespace: &key.namespace,
        topic: "orders",
    };
    let target = TopicTable::open(access, &unpartitioned.naming, feed, &ledger.identity()).await?;
    let object = SourceObject {
        key: key.object_key(SegmentFile::Data),
        size: 0,
        etag: None,
        modified_ms: None,
    };
    ingest_segment(
        access,
        source,
        &target,
        ledger,
        &key,
        &object,
        DecodeLimits::default(),
    )
    .await?;
    let pending_file = kfs_core::testing::converted_paths(
        &ledger.get(&object.key).await?.ok_or("no ledger entry")?,
    );
    assert_eq!(pending_file.len(), 1);

    // Configured by hour: the table evolves, the pending file is laid out again.
    local.put("orders", 20, &VALUES, SPACING_MS)?;
    let hourly = PipelineConfig {
        naming: TableNaming {
            partition_by: parse_partition_spec("hour(timestamp)")?,
            partition_by_given: true,
            ..TableNaming::default()
        },
        ..PipelineConfig::default()
    };
    let report = run_pass(source, catalog, swap, ledger, &hourly, &|_| {}).await?;
    let outcome = report.tables.values().next().ok_or("no commit")?;
    assert_eq!(outcome.segments, 2, "{outcome:?}");
    let table = iceberg::Catalog::load_table(catalog, &table_ident(&name)).await?;
    let metadata = table.metadata();
    assert_eq!(metadata.partition_specs_iter().count(), 2);
    assert_eq!(metadata.default_partition_spec().fields().len(), 1);
    assert!(!std::path::Path::new(pending_file[0].trim_start_matches("file://")).exists());
    exactly_once(&local, &name).await?;
    let old_spec = kfs_core::testing::live_entries_in(&table, Some(0)).await?;
    let new_spec =
        kfs_core::testing::live_entries_in(&table, Some(metadata.default_partition_spec_id()))
            .await?;
    assert_eq!(old_spec.len(), 1, "the committed file keeps its layout");
    assert!(
        new_spec.len() >= 3,
        "hours of segments 10-29: {}",
        new_spec.len()
    );
    assert!(
        new_spec
            .iter()
            .all(|e| e.file_path().contains("timestamp_hour="))
    );

    // A rerun changes nothing; compaction merges files of the current spec only.
    let again = run_pass(source, catalog, swap, ledger, &hourly, &|_| {}).await?;
    assert!(
        again.tables.values().all(|o| o.snapshot_id.is_none()),
        "{again:?}"
    );
    kfs_core::compact_table(catalog, swap, &table_ident(&name), None, None, now_ms()).await?;
    let table = iceberg::Catalog::load_table(catalog, &table_ident(&name)).await?;
    assert_eq!(
        kfs_core::testing::live_entries_in(&table, Some(0))
            .await?
            .len(),
        1
    );
    exactly_once(&local, &name).await?;
    Ok(())
}

//! Evolving a table's partition spec for new data: a table committed unpartitioned is
//! configured `hour(timestamp)`. The next pass evolves its spec (through the catalog's
//! pointer swap); a segment converted before the change but still pending is written
//! again in the new spec at commit (an append takes files of the default spec only);
//! new segments are written in it; the committed file keeps its layout. Every offset is
//! read back exactly once, and compaction merges only files of the current spec.

use std::collections::BTreeMap;

use arrow_array::Array;
use futures::TryStreamExt;
use kfs_core::catalog::{
    CatalogAccess, LOCAL_CATALOG_NAME, S3Settings, Warehouse, open_sql_catalog, table_ident,
};
use kfs_core::ledger::{Ledger, SqliteLedger};
use kfs_core::pipeline::{PipelineConfig, TopicTable, ingest_segment, now_ms, run_once};
use kfs_core::source::{MemorySource, SourceObject};
use kfs_core::table_commit::SqlTableSwap;
use kfs_plan::keys::{SegmentFile, SegmentKey};
use kfs_plan::layout::parse_partition_spec;
use kfs_plan::naming::TableNaming;
use kfs_segment::{BatchSpec, Compression, DecodeLimits, OwnedRecord, encode_segment};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Uploads the segment at `base` (10 records, 20 minutes apart) and returns its key.
fn put(source: &MemorySource, base: i64) -> Result<SegmentKey, Box<dyn std::error::Error>> {
    let records = (base..base + 10)
        .map(|offset| OwnedRecord {
            offset,
            timestamp_ms: 1_700_000_000_000 + offset * 1_200_000,
            key: Some(format!("k{offset}").into_bytes()),
            value: Some(format!("v{offset}").into_bytes()),
            headers: vec![],
        })
        .collect();
    let key = SegmentKey {
        namespace: "ns".into(),
        topic: "orders".into(),
        partition: 0,
        base_offset: base,
    };
    let segment = encode_segment(&[BatchSpec::new(records, Compression::Zstd)], 1)?;
    source.put(&key.object_key(SegmentFile::Data), segment.kfs);
    source.put(&key.object_key(SegmentFile::Index), segment.index);
    Ok(key)
}

/// Offset → rows holding it, in the table's current snapshot.
async fn offsets(
    table: &iceberg::table::Table,
) -> Result<BTreeMap<i64, usize>, Box<dyn std::error::Error>> {
    let batches: Vec<arrow_array::RecordBatch> = table
        .scan()
        .select(["offset"])
        .build()?
        .to_arrow()
        .await?
        .try_collect()
        .await?;
    let mut found = BTreeMap::new();
    for batch in batches {
        let column = batch
            .column(0)
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .ok_or("offset column")?
            .clone();
        for row in 0..column.len() {
            *found.entry(column.value(row)).or_default() += 1;
        }
    }
    Ok(found)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_spec_evolves_the_table_for_new_and_pending_data() -> TestResult {
    let dir = tempfile::tempdir()?;
    let database = dir.path().join("catalog.db");
    let catalog = open_sql_catalog(
        &database,
        &Warehouse::Local(dir.path().join("wh")),
        &S3Settings::default(),
    )
    .await?;
    let swap = SqlTableSwap::open(&database, LOCAL_CATALOG_NAME).await?;
    let access = CatalogAccess {
        catalog: &catalog,
        swap: &swap,
    };
    let ledger = SqliteLedger::open(&dir.path().join("ledger.db")).await?;
    let source = MemorySource::default();
    let unpartitioned = PipelineConfig::default();
    let name = unpartitioned.naming.table_for("orders");

    // Committed unpartitioned.
    put(&source, 0)?;
    run_once(&source, &catalog, &swap, &ledger, &unpartitioned, &|_| {}).await?;
    // Converted unpartitioned, still pending when the spec changes.
    let key = put(&source, 10)?;
    let target = TopicTable::open(access, &unpartitioned.naming, "orders").await?;
    let object = SourceObject {
        key: key.object_key(SegmentFile::Data),
        size: 0,
        etag: None,
        modified_ms: None,
    };
    ingest_segment(
        access,
        &source,
        &target,
        &ledger,
        &key,
        &object,
        DecodeLimits::default(),
    )
    .await?;
    let pending_file = kfs_core::pipeline::converted_paths(
        &ledger.get(&object.key).await?.ok_or("no ledger entry")?,
    );
    assert_eq!(pending_file.len(), 1);

    // Configured by hour: the table evolves, the pending file is laid out again.
    put(&source, 20)?;
    let hourly = PipelineConfig {
        naming: TableNaming {
            partition_by: parse_partition_spec("hour(timestamp)")?,
            partition_by_given: true,
            ..TableNaming::default()
        },
        ..PipelineConfig::default()
    };
    let report = run_once(&source, &catalog, &swap, &ledger, &hourly, &|_| {}).await?;
    let outcome = report.tables.values().next().ok_or("no commit")?;
    assert_eq!(outcome.segments, 2, "{outcome:?}");
    let table = iceberg::Catalog::load_table(&catalog, &table_ident(&name)).await?;
    let metadata = table.metadata();
    assert_eq!(metadata.partition_specs_iter().count(), 2);
    assert_eq!(metadata.default_partition_spec().fields().len(), 1);
    assert!(!std::path::Path::new(pending_file[0].trim_start_matches("file://")).exists());
    let rows = offsets(&table).await?;
    assert_eq!(rows.len(), 30);
    assert!(rows.values().all(|&n| n == 1), "{rows:?}");
    let old_spec = kfs_core::rewrite::live_entries_in(&table, Some(0)).await?;
    let new_spec =
        kfs_core::rewrite::live_entries_in(&table, Some(metadata.default_partition_spec_id()))
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
    let again = run_once(&source, &catalog, &swap, &ledger, &hourly, &|_| {}).await?;
    assert!(
        again.tables.values().all(|o| o.snapshot_id.is_none()),
        "{again:?}"
    );
    kfs_core::maintenance::compact_table(
        &catalog,
        &swap,
        &table_ident(&name),
        None,
        None,
        now_ms(),
    )
    .await?;
    let table = iceberg::Catalog::load_table(&catalog, &table_ident(&name)).await?;
    assert_eq!(
        kfs_core::rewrite::live_entries_in(&table, Some(0))
            .await?
            .len(),
        1
    );
    let rows = offsets(&table).await?;
    assert_eq!(rows.len(), 30);
    assert!(rows.values().all(|&n| n == 1), "{rows:?}");
    Ok(())
}

//! Every malformed segment of the codec corpus (`tests/corpus/*.kfs`), each in its own
//! partition among good segments, goes through the pipeline on the real SQL catalog and
//! ledger: each ends quarantined with a positioned error and holds back only its own
//! partition, while every good record lands exactly once; once an operator skips them,
//! every partition moves on and each skipped range is in the snapshot summary.

use std::path::{Path, PathBuf};

use kfs_core::MemorySource;
use kfs_core::table_progress;
use kfs_core::testing::open_sql_catalog;
use kfs_core::{Ledger, SqliteLedger};
use kfs_core::{PassReport, PipelineConfig, now_ms, run_pass};
use kfs_core::{S3Settings, Warehouse, table_ident};
use kfs_plan::keys::{SegmentFile, SegmentKey};
use kfs_plan::naming::TableNaming;
use kfs_plan::offsets::{Gap, GapReason};

use crate::faults;

use faults::segment;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Where the good segment after a corpus segment starts, past its base offset.
const NEXT_SEGMENT_AFTER: i64 = 1000;

fn corpus() -> Result<Vec<PathBuf>, std::io::Error> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/corpus");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "kfs"))
        .collect();
    files.sort();
    Ok(files)
}

/// The base offset a segment's header claims, when it has a plausible one.
fn header_base(bytes: &[u8]) -> i64 {
    bytes
        .get(8..16)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(i64::from_be_bytes)
        .filter(|base| (0..1 << 40).contains(base))
        .unwrap_or(0)
}

fn put(source: &MemorySource, partition: i32, base: i64, bytes: Vec<u8>) {
    let key = SegmentKey {
        namespace: "ns".into(),
        topic: "corpus".into(),
        partition,
        base_offset: base,
    };
    source.put(&key.object_key(SegmentFile::Data), bytes);
    source.put(&key.object_key(SegmentFile::Index), Vec::new());
}

#[tokio::test]
async fn every_corpus_segment_is_quarantined_then_skipped_and_the_rest_lands_once() -> TestResult {
    let corpus = corpus()?;
    assert!(corpus.len() >= 50, "corpus has {} segments", corpus.len());
    let dir = tempfile::tempdir()?;
    let warehouse = Warehouse::Local(dir.path().join("wh"));
    let catalog = open_sql_catalog(
        &dir.path().join("catalog.db"),
        &warehouse,
        &S3Settings::default(),
    )
    .await?;
    let swap = kfs_core::testing::SqlTableSwap::open(
        &dir.path().join("catalog.db"),
        kfs_core::LOCAL_CATALOG_NAME,
    )
    .await?;
    let ledger = SqliteLedger::open(&dir.path().join("ledger.db")).await?;
    let source = MemorySource::default();
    // Per partition: a good segment before the bad one (when there is room), the bad
    // one at the base offset its header claims, and a good one well after it.
    let mut expected = Vec::new();
    for (partition, path) in corpus.iter().enumerate() {
        let partition = i32::try_from(partition)?;
        let bad = std::fs::read(path)?;
        let base = header_base(&bad);
        let mut records = 10;
        if base >= 10 {
            put(&source, partition, base - 10, segment(base - 10)?);
            records += 10;
        }
        put(&source, partition, base, bad);
        let next = base + NEXT_SEGMENT_AFTER;
        put(&source, partition, next, segment(next)?);
        expected.push((partition, base, records));
    }
    let config = PipelineConfig::default();
    let first: PassReport = run_pass(&source, &catalog, &swap, &ledger, &config, &|_| {}).await?;
    assert_eq!(
        first.quarantined.len(),
        corpus.len(),
        "{:?}",
        first.quarantined
    );
    for (segment, error) in &first.quarantined {
        assert!(
            error.contains(segment) && error.contains("at byte"),
            "{segment}: not a positioned error: {error}"
        );
    }
    let ident = table_ident(&TableNaming::default().table_for("corpus"));
    let progress = table_progress(&iceberg::Catalog::load_table(&catalog, &ident).await?)?;
    for &(partition, base, _) in &expected {
        // Held right before its quarantined segment (no watermark when it came first).
        let held = (base >= 10).then_some(base);
        assert_eq!(progress.watermarks.get(&partition).copied(), held);
    }

    for entry in ledger.list(Some("quarantined"), None).await? {
        assert!(ledger.skip_quarantined(&entry.segment, now_ms()).await?);
    }
    let second = run_pass(&source, &catalog, &swap, &ledger, &config, &|_| {}).await?;
    assert!(second.quarantined.is_empty());
    assert_eq!(second.converted, 0, "nothing is converted twice");
    let table = iceberg::Catalog::load_table(&catalog, &ident).await?;
    let progress = table_progress(&table)?;
    for &(partition, base, _) in &expected {
        assert_eq!(
            progress.watermarks.get(&partition).copied(),
            Some(base + NEXT_SEGMENT_AFTER + 10)
        );
        let skipped = Gap {
            partition,
            from: base,
            to: base + NEXT_SEGMENT_AFTER - 1,
            reason: GapReason::Skipped,
        };
        assert!(
            progress.gaps.contains(&skipped),
            "partition {partition}: {:?}",
            progress.gaps
        );
    }
    // Every good record exactly once: the table's record count is theirs.
    let total: u64 = expected.iter().map(|&(_, _, records)| records).sum();
    let summary = &table
        .metadata()
        .current_snapshot()
        .ok_or("no snapshot")?
        .summary()
        .additional_properties;
    assert_eq!(
        summary.get("total-records").map(String::as_str),
        Some(total.to_string().as_str())
    );
    Ok(())
}

//! Merging data files: row groups copied as they are and row groups re-encoded give
//! the same rows, in order, with metrics that cover the merged file.

use std::collections::BTreeMap;

use futures::TryStreamExt;
use iceberg::spec::DataFile;
use kfs_core::testing::merge_data_files;
use kfs_core::testing::{SegmentInput, ValueColumns, convert_segment, in_memory};
use kfs_core::testing::{ensure_topic_table, open_sql_catalog};
use kfs_core::{S3Settings, Warehouse};
use kfs_plan::keys::SegmentKey;
use kfs_plan::naming::TableNaming;
use kfs_segment::{Compression, DecodeLimits};
use kfs_workload::{encode_records, simple_records};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn segment(base: i64, count: i64) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    let mut records = simple_records(base, count, |offset| Some(vec![(offset % 251) as u8; 300]));
    for record in &mut records {
        if record.offset % 3 == 0 {
            record.key = None;
        }
        record.headers = vec![("h".into(), Some(vec![1, 2]))];
    }
    Ok(encode_records(records, Compression::Zstd)?.kfs)
}

/// (offset, key, value length) of every row, in file order.
async fn rows(
    table: &iceberg::table::Table,
    file: &DataFile,
) -> Result<Vec<(i64, Option<Vec<u8>>, usize)>, Box<dyn std::error::Error>> {
    use arrow_array::{Array, Int64Array, LargeBinaryArray};
    let input = table.file_io().new_input(file.file_path())?;
    let reader =
        iceberg::arrow::ArrowFileReader::new(input.metadata().await?, input.reader().await?);
    let mut stream = parquet::arrow::ParquetRecordBatchStreamBuilder::new(reader)
        .await?
        .build()?;
    let mut out = Vec::new();
    while let Some(batch) = stream.try_next().await? {
        let offsets = batch
            .column_by_name("offset")
            .and_then(|c| c.as_any().downcast_ref::<Int64Array>().cloned())
            .ok_or("offset")?;
        let keys = batch
            .column_by_name("key")
            .and_then(|c| c.as_any().downcast_ref::<LargeBinaryArray>().cloned())
            .ok_or("key")?;
        let values = batch
            .column_by_name("value")
            .and_then(|c| c.as_any().downcast_ref::<LargeBinaryArray>().cloned())
            .ok_or("value")?;
        for i in 0..batch.num_rows() {
            out.push((
                offsets.value(i),
                (!keys.is_null(i)).then(|| keys.value(i).to_vec()),
                values.value(i).len(),
            ));
        }
    }
    Ok(out)
}

#[tokio::test]
async fn copied_and_reencoded_row_groups_hold_the_same_rows() -> TestResult {
    let dir = tempfile::tempdir()?;
    let catalog = open_sql_catalog(
        &dir.path().join("catalog.db"),
        &Warehouse::Local(dir.path().join("wh")),
        &S3Settings::default(),
    )
    .await?;
    let name = TableNaming::default().table_for("orders");
    let table = ensure_topic_table(&catalog, &name, "orders", &Default::default()).await?;
    let mut files = Vec::new();
    for (i, base) in [0i64, 500, 1000].into_iter().enumerate() {
        let key = SegmentKey {
            namespace: "ns".into(),
            topic: "orders".into(),
            partition: 0,
            base_offset: base,
        };
        let bytes = segment(base, 500)?;
        let converted = convert_segment(
            &table,
            SegmentInput {
                key: &key,
                etag: &format!("e{i}"),
            },
            in_memory(bytes),
            DecodeLimits::default(),
            ValueColumns::Raw,
        )
        .await?;
        files.extend(converted.data_files);
    }
    let inputs: Vec<&DataFile> = files.iter().collect();
    let mut expected = Vec::new();
    for file in &inputs {
        expected.extend(rows(&table, file).await?);
    }
    // Every row group re-encoded.
    let (reencoded, stats) = merge_data_files(&table, &inputs, "reencoded", u64::MAX).await?;
    assert_eq!(stats.row_groups_copied, 0);
    assert_eq!(stats.row_groups_reencoded, 3);
    assert_eq!(rows(&table, &reencoded).await?, expected);
    // Our own output again, plus one converter file: its row group is copied, the
    // converter's re-encoded (or copied too, when the layouts agree).
    let (mixed, stats) = merge_data_files(&table, &[&reencoded, inputs[0]], "mixed", 0).await?;
    assert!(stats.row_groups_copied >= 1, "{stats:?}");
    let mut twice = expected.clone();
    twice.extend(expected.iter().take(500).cloned());
    assert_eq!(rows(&table, &mixed).await?, twice);
    // Metrics: counts add up, bounds cover every input.
    assert_eq!(mixed.record_count(), 2000);
    let bounds: BTreeMap<_, _> = mixed.lower_bounds().iter().collect();
    assert!(!bounds.is_empty());
    // Null keys: every third offset of 0..1500, then of 0..500 again.
    assert_eq!(mixed.null_value_counts().get(&6).copied(), Some(500 + 167));
    assert!(mixed.file_size_in_bytes() > 0);
    Ok(())
}

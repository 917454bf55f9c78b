//! What the core's end-to-end tests on one machine share: a deployment on local files
//! (the SQL catalog on SQLite with its pointer swap, the SQLite ledger, segments in
//! memory), uploading a segment, and reading back which offsets a table holds.

#![allow(dead_code)] // each test file uses a different part

pub mod engine;
pub mod read;

use std::collections::BTreeMap;

use futures::TryStreamExt;
use iceberg::Catalog;
use kfs_core::MemorySource;
use kfs_core::SqliteLedger;
use kfs_core::testing::SqlTableSwap;
use kfs_core::testing::{SqlCatalog, open_sql_catalog};
use kfs_core::{CatalogAccess, LOCAL_CATALOG_NAME, S3Settings, Warehouse, table_ident};
use kfs_core::{PassReport, PipelineConfig, run_pass};
use kfs_plan::keys::{SegmentFile, SegmentKey};
use kfs_plan::naming::{TableName, TableNaming};
use kfs_segment::Compression;
use kfs_workload::{encode_records, simple_records};

/// Errors of the tests.
pub type BoxError = Box<dyn std::error::Error>;

/// The catalog, its swap, the ledger and the source, in a temporary directory.
pub struct Local {
    /// Holds the files.
    pub dir: tempfile::TempDir,
    /// The SQL catalog.
    pub catalog: SqlCatalog,
    /// Its pointer swap.
    pub swap: SqlTableSwap,
    /// The ledger.
    pub ledger: SqliteLedger,
    /// The segments.
    pub source: MemorySource,
}

impl Local {
    /// A fresh deployment.
    pub async fn open() -> Result<Self, BoxError> {
        let dir = tempfile::tempdir()?;
        let database = dir.path().join("catalog.db");
        let catalog = open_sql_catalog(
            &database,
            &Warehouse::Local(dir.path().join("wh")),
            &S3Settings::default(),
        )
        .await?;
        let swap = SqlTableSwap::open(&database, LOCAL_CATALOG_NAME).await?;
        let ledger = SqliteLedger::open(&dir.path().join("ledger.db")).await?;
        Ok(Self {
            dir,
            catalog,
            swap,
            ledger,
            source: MemorySource::default(),
        })
    }

    /// The catalog with its swap.
    pub fn access(&self) -> CatalogAccess<'_> {
        CatalogAccess {
            catalog: &self.catalog,
            swap: &self.swap,
        }
    }

    /// Uploads a segment of `topic` partition 0 at `base` (its `.kfs` and `.index`),
    /// one record per value, timestamps `spacing_ms` apart; returns its key.
    pub fn put(
        &self,
        topic: &str,
        base: i64,
        values: &[&str],
        spacing_ms: i64,
    ) -> Result<SegmentKey, BoxError> {
        self.put_in("ns", topic, base, values, spacing_ms)
    }

    /// [`Local::put`] under the KafScale namespace `namespace`.
    pub fn put_in(
        &self,
        namespace: &str,
        topic: &str,
        base: i64,
        values: &[&str],
        spacing_ms: i64,
    ) -> Result<SegmentKey, BoxError> {
        let mut records = simple_records(base, values.len() as i64, |offset| {
            values
                .get(usize::try_from(offset - base).ok()?)
                .map(|v| v.as_bytes().to_vec())
        });
        for record in &mut records {
            record.timestamp_ms = 1_700_000_000_000 + (record.offset % 1_000_000_000) * spacing_ms;
        }
        self.put_records_in(namespace, topic, base, records)
    }

    /// Uploads a segment of `topic` partition 0 holding `records` as they are.
    pub fn put_records(
        &self,
        topic: &str,
        records: Vec<kfs_segment::OwnedRecord>,
    ) -> Result<SegmentKey, BoxError> {
        let base = records.first().map_or(0, |r| r.offset);
        self.put_records_in("ns", topic, base, records)
    }

    /// Uploads a segment of `topic` partition `partition` holding `records` as they are.
    pub fn put_records_at(
        &self,
        topic: &str,
        partition: i32,
        records: Vec<kfs_segment::OwnedRecord>,
    ) -> Result<SegmentKey, BoxError> {
        let base = records.first().map_or(0, |r| r.offset);
        self.put_segment(("ns", topic, partition), base, records)
    }

    fn put_records_in(
        &self,
        namespace: &str,
        topic: &str,
        base: i64,
        records: Vec<kfs_segment::OwnedRecord>,
    ) -> Result<SegmentKey, BoxError> {
        self.put_segment((namespace, topic, 0), base, records)
    }

    fn put_segment(
        &self,
        (namespace, topic, partition): (&str, &str, i32),
        base: i64,
        records: Vec<kfs_segment::OwnedRecord>,
    ) -> Result<SegmentKey, BoxError> {
        let key = SegmentKey {
            namespace: namespace.into(),
            topic: topic.into(),
            partition,
            base_offset: base,
        };
        let segment = encode_records(records, Compression::Zstd)?;
        self.source
            .put(&key.object_key(SegmentFile::Data), segment.kfs);
        self.source
            .put(&key.object_key(SegmentFile::Index), segment.index);
        Ok(key)
    }

    /// Converts the segment `key` into a pending entry of its feed's table, as the
    /// converter does on the segment's event (no commit).
    pub async fn convert(
        &self,
        naming: &TableNaming,
        key: &SegmentKey,
    ) -> Result<kfs_core::LedgerEntry, BoxError> {
        use kfs_core::{Feed, Ledger, SegmentSource};
        let feed = Feed {
            namespace: &key.namespace,
            topic: &key.topic,
        };
        let target = kfs_core::testing::TopicTable::open(
            self.access(),
            naming,
            feed,
            &self.ledger.identity(),
        )
        .await?;
        let segment = key.object_key(SegmentFile::Data);
        let object = self.source.stat(&segment).await?.ok_or("no segment")?;
        Ok(kfs_core::testing::ingest_segment(
            self.access(),
            &self.source,
            &target,
            &self.ledger,
            key,
            &object,
            kfs_segment::DecodeLimits::default(),
        )
        .await?)
    }

    /// Runs one pass with `naming` and the default settings otherwise.
    pub async fn run(&self, naming: &TableNaming) -> Result<PassReport, BoxError> {
        self.run_config(&PipelineConfig {
            naming: naming.clone(),
            ..PipelineConfig::default()
        })
        .await
    }

    /// Compacts the table `name` by its own target size, now.
    pub async fn compact(&self, name: &TableName) -> Result<kfs_core::CompactionReport, BoxError> {
        Ok(kfs_core::compact_table(
            &self.catalog,
            &self.swap,
            &table_ident(name),
            None,
            None,
            kfs_core::now_ms(),
        )
        .await?)
    }

    /// Runs one pass with `config`.
    pub async fn run_config(&self, config: &PipelineConfig) -> Result<PassReport, BoxError> {
        Ok(run_pass(
            &self.source,
            &self.catalog,
            &self.swap,
            &self.ledger,
            config,
            &|_| {},
        )
        .await?)
    }
}

/// `(partition, offset)` → rows holding it in the table `name` (empty when the table
/// does not exist or has no snapshot).
pub async fn offsets(
    catalog: &dyn Catalog,
    name: &TableName,
) -> Result<BTreeMap<(i32, i64), usize>, String> {
    let text = |e: iceberg::Error| format!("{name}: {e}");
    let ident = table_ident(name);
    let mut found = BTreeMap::new();
    if !catalog.table_exists(&ident).await.map_err(text)? {
        return Ok(found);
    }
    let table = catalog.load_table(&ident).await.map_err(text)?;
    if table.metadata().current_snapshot().is_none() {
        return Ok(found);
    }
    if table.metadata().format_version() >= iceberg::spec::FormatVersion::V3 {
        return read::offsets_applying_vectors(&table).await;
    }
    let batches: Vec<arrow_array::RecordBatch> = table
        .scan()
        .select(["partition", "offset"])
        .build()
        .map_err(text)?
        .to_arrow()
        .await
        .map_err(text)?
        .try_collect()
        .await
        .map_err(text)?;
    for batch in batches {
        let partitions = read::partition_ints(batch.column(0)).ok_or("partition column")?;
        let offsets = batch
            .column(1)
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .ok_or("offset column")?
            .clone();
        for row in 0..batch.num_rows() {
            *found
                .entry((partitions.value(row), offsets.value(row)))
                .or_default() += 1;
        }
    }
    Ok(found)
}

/// The reasons of the dead letters of the table `name`, by offset (empty when its
/// dead-letter table has no rows).
pub async fn dead_letter_reasons(
    catalog: &dyn Catalog,
    name: &TableName,
) -> Result<BTreeMap<i64, String>, BoxError> {
    use arrow_array::cast::AsArray;
    let ident = table_ident(&name.dead_letters());
    let mut found = BTreeMap::new();
    if !catalog.table_exists(&ident).await? {
        return Ok(found);
    }
    let table = catalog.load_table(&ident).await?;
    if table.metadata().current_snapshot().is_none() {
        return Ok(found);
    }
    let batches: Vec<arrow_array::RecordBatch> = table
        .scan()
        .select(["offset", "error"])
        .build()?
        .to_arrow()
        .await?
        .try_collect()
        .await?;
    for batch in batches {
        let offsets = batch
            .column(0)
            .as_primitive::<arrow_array::types::Int64Type>();
        let errors = batch.column(1).as_string::<i32>();
        for row in 0..batch.num_rows() {
            found.insert(offsets.value(row), errors.value(row).to_owned());
        }
    }
    Ok(found)
}

//! The table the macro benchmarks work on: the SQLite catalog and a local warehouse in
//! a temporary directory, an in-memory source and ledger, and a topic `bench` whose
//! segments are converted the way the pipeline converts them.

// Each benchmark uses part of it.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use kfs_core::now_ms;
use kfs_core::testing::SqlTableSwap;
use kfs_core::testing::commit_table;
use kfs_core::testing::{SqlCatalog, ensure_topic_table, open_sql_catalog};
use kfs_core::testing::{TopicTable, ingest_segment};
use kfs_core::{CommitOutcome, CommitSettings, table_progress};
use kfs_core::{LOCAL_CATALOG_NAME, S3Settings, Warehouse};
use kfs_core::{Ledger, LedgerEntry, MemoryLedger, SqliteLedger};
use kfs_core::{MemorySource, SegmentSource};
use kfs_plan::keys::SegmentKey;
use kfs_plan::naming::{TableName, TableNaming};
use kfs_segment::DecodeLimits;

/// A segment of 10 records of 200-byte values starting at `base` (a produce request's
/// worth: what the broker writes by default).
pub fn tiny_segment(base: i64) -> BenchResult<Vec<u8>> {
    let records = (base..base + 10)
        .map(|offset| kfs_segment::OwnedRecord {
            offset,
            timestamp_ms: 1_700_000_000_000 + offset,
            key: Some(format!("k{offset}").into_bytes()),
            value: Some(vec![b'v'; 200]),
            headers: vec![],
        })
        .collect();
    let batch = kfs_segment::BatchSpec::new(records, kfs_segment::Compression::None);
    Ok(kfs_segment::encode_segment(&[batch], 1)?.kfs)
}

/// A benchmark's error.
pub type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// The benchmark table and everything around it, with its ledger: in memory, or the
/// embedded default's SQLite file ([`BenchTable::with_sqlite_ledger`]).
pub struct BenchTable<L = MemoryLedger> {
    _dir: tempfile::TempDir,
    /// The catalog.
    pub catalog: SqlCatalog,
    /// Its pointer swap.
    pub swap: SqlTableSwap,
    /// The ledger.
    pub ledger: L,
    source: MemorySource,
    /// The table's name.
    pub name: TableName,
    table: iceberg::table::Table,
    listing: BTreeMap<i32, BTreeSet<i64>>,
    warehouse: Warehouse,
}

impl BenchTable {
    /// A fresh table with a ledger in memory.
    pub async fn new() -> BenchResult<Self> {
        BenchTable::open(
            tempfile::tempdir()?,
            MemoryLedger::default(),
            &TableNaming::default(),
        )
        .await
    }

    /// A fresh table in upsert mode (a mirror of the record keys), ledger in memory.
    #[allow(dead_code)] // not every benchmark mirrors
    pub async fn mirror() -> BenchResult<Self> {
        let layout = TableNaming {
            mode: kfs_plan::mode::ModeSetting::parse("upsert", None)?,
            ..TableNaming::default()
        };
        BenchTable::open(tempfile::tempdir()?, MemoryLedger::default(), &layout).await
    }
}

impl BenchTable<SqliteLedger> {
    /// A fresh table with the embedded default's ledger (a SQLite file beside the
    /// catalog), whose pending entries are found through an index, as in DynamoDB.
    pub async fn with_sqlite_ledger() -> BenchResult<Self> {
        let dir = tempfile::tempdir()?;
        let ledger = SqliteLedger::open(&dir.path().join("ledger.db")).await?;
        BenchTable::open(dir, ledger, &TableNaming::default()).await
    }
}

impl<L: Ledger> BenchTable<L> {
    /// A fresh table in `dir`, recording to `ledger`.
    async fn open(dir: tempfile::TempDir, ledger: L, layout: &TableNaming) -> BenchResult<Self> {
        let database = dir.path().join("catalog.db");
        let warehouse = Warehouse::Local(dir.path().join("wh"));
        let catalog = open_sql_catalog(&database, &warehouse, &S3Settings::default()).await?;
        let swap = SqlTableSwap::open(&database, LOCAL_CATALOG_NAME).await?;
        let name = TableNaming::default().table_for("bench");
        let table = ensure_topic_table(&catalog, &name, "bench", layout).await?;
        Ok(Self {
            _dir: dir,
            catalog,
            swap,
            ledger,
            source: MemorySource::default(),
            name,
            table,
            listing: BTreeMap::new(),
            warehouse,
        })
    }

    /// Where its maintenance may list and delete.
    #[allow(dead_code)] // not every benchmark maintains
    pub fn storage(&self) -> kfs_core::MaintenanceStorage {
        kfs_core::MaintenanceStorage {
            s3: S3Settings::default(),
            warehouse: self.warehouse.clone(),
        }
    }

    /// The folder holding the catalog (`catalog.db`) and the warehouse (`wh`).
    #[allow(dead_code)] // not every benchmark reads it
    pub fn dir(&self) -> &std::path::Path {
        self._dir.path()
    }

    /// The table as created.
    pub fn table(&self) -> &iceberg::table::Table {
        &self.table
    }

    /// Converts the segment of partition 0 at `base` into a pending entry.
    pub async fn add_segment(&mut self, base: i64, kfs: Vec<u8>) -> BenchResult<LedgerEntry> {
        let key = SegmentKey {
            namespace: "ns".into(),
            topic: "bench".into(),
            partition: 0,
            base_offset: base,
        };
        self.source.put(&key.to_string(), kfs);
        let object = self
            .source
            .stat(&key.to_string())
            .await?
            .ok_or("segment vanished")?;
        let target = TopicTable {
            name: self.name.clone(),
            table: self.table.clone(),
            progress: table_progress(&self.table)?,
            lfs: Default::default(),
            keys: Default::default(),
            schemas: None,
        };
        let entry = ingest_segment(
            kfs_core::CatalogAccess {
                catalog: &self.catalog,
                swap: &self.swap,
            },
            &self.source,
            &target,
            &self.ledger,
            &key,
            &object,
            DecodeLimits::default(),
        )
        .await?;
        self.listing.entry(0).or_default().insert(base);
        Ok(entry)
    }

    /// Commits the pending segments.
    pub async fn commit(&self) -> BenchResult<CommitOutcome> {
        self.commit_with(&CommitSettings::default()).await
    }

    /// Commits the pending segments with `settings`.
    pub async fn commit_with(&self, settings: &CommitSettings) -> BenchResult<CommitOutcome> {
        Ok(commit_table(
            kfs_core::CatalogAccess {
                catalog: &self.catalog,
                swap: &self.swap,
            },
            &self.ledger,
            &self.name,
            "bench",
            &self.listing,
            settings,
            now_ms(),
        )
        .await?)
    }
}

//! The functions' world in memory, for their handlers' in-process tests: the segment
//! bucket a [`MemorySource`], the ledger a [`MemoryLedger`], the catalog the in-memory
//! one ([`kfs_core::CatalogKind::Memory`]) over a warehouse in a temporary folder. No
//! server, no network: what [`crate::LocalStack`] is on moto, in a few milliseconds.

use std::future::Future;

use kfs_core::testing::{Probe, Probed};
use kfs_core::{
    CatalogHandle, CatalogKind, ConverterService, MemoryLedger, MemorySource, ObjectStream,
    S3Settings, SegmentSource, SegmentStream, SourceError, SourceObject, Warehouse,
};

/// The bucket of the sample events (`events/`).
pub const SEGMENT_BUCKET: &str = "kafscale-segments";

/// Segments, ledger and catalog in memory (see the module's docs). Each function
/// reaches them through its own clients ([`InMemory::bucket`], [`InMemory::ledger`],
/// a clone of the catalog handle), as the Lambda functions reach S3, DynamoDB and the
/// catalog.
pub struct InMemory {
    /// The segment bucket.
    pub source: MemorySource,
    /// The ledger.
    pub ledger: MemoryLedger,
    /// The catalog, with its pointer swap.
    pub catalog: CatalogHandle,
    /// Where the tables' files are.
    pub warehouse: Warehouse,
    /// Holds the warehouse.
    _dir: tempfile::TempDir,
}

impl InMemory {
    /// An empty bucket, ledger and catalog.
    pub async fn open() -> Self {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let warehouse = Warehouse::Local(dir.path().join("warehouse"));
        let catalog =
            kfs_core::open_catalog_handle(&CatalogKind::Memory, &warehouse, &S3Settings::default())
                .await
                .unwrap_or_else(|e| panic!("memory catalog: {e}"));
        Self {
            source: MemorySource::default(),
            ledger: MemoryLedger::default(),
            catalog,
            warehouse,
            _dir: dir,
        }
    }

    /// Uploads one object to the bucket (replacing what the key held).
    pub fn put(&self, key: &str, bytes: &[u8]) {
        self.source.put(key, bytes.to_vec());
    }

    /// Uploads a segment's `.kfs` and `.index` under `stem` (their key without the
    /// extension).
    pub fn put_segment(&self, stem: &str, segment: &kfs_segment::EncodedSegment) {
        self.put(&format!("{stem}.kfs"), &segment.kfs);
        self.put(&format!("{stem}.index"), &segment.index);
    }

    /// Every entry of the ledger.
    pub async fn entries(&self) -> Vec<kfs_core::LedgerEntry> {
        use kfs_core::Ledger;
        self.ledger
            .list(None, None)
            .await
            .unwrap_or_else(|e| panic!("ledger: {e}"))
    }

    /// A client of the bucket.
    pub fn bucket(&self) -> Bucket<'_> {
        Bucket(&self.source)
    }

    /// A client of the ledger (the same ledger, whoever asks).
    pub fn ledger(&self) -> LedgerClient<'_> {
        Probed {
            inner: &self.ledger,
            probe: Through,
        }
    }

    /// The converter service on this world, as [`crate::LocalStack::converter`] has
    /// it: segments at the bucket root, default naming and limits.
    pub fn converter(&self, concurrency: usize) -> ConverterService<Bucket<'_>, LedgerClient<'_>> {
        ConverterService::new(
            self.bucket(),
            self.catalog.clone(),
            self.ledger(),
            crate::converter_settings(SEGMENT_BUCKET, concurrency),
        )
    }
}

/// A client of an in-memory ledger ([`InMemory::ledger`]).
pub type LedgerClient<'a> = Probed<'a, MemoryLedger, Through>;

/// Every ledger call passed on as it is.
#[derive(Debug, Clone, Copy)]
pub struct Through;

impl Probe<MemoryLedger> for Through {}

/// A client of an in-memory bucket: every call goes to it.
#[derive(Debug, Clone, Copy)]
pub struct Bucket<'a>(pub &'a MemorySource);

impl SegmentSource for Bucket<'_> {
    fn list(&self) -> impl Future<Output = Result<Vec<SourceObject>, SourceError>> + Send {
        self.0.list()
    }

    fn list_dirs(
        &self,
        dir: &str,
    ) -> impl Future<Output = Result<Vec<String>, SourceError>> + Send {
        self.0.list_dirs(dir)
    }

    fn list_files(
        &self,
        dir: &str,
        start_after: Option<&str>,
    ) -> impl Future<Output = Result<ObjectStream, SourceError>> + Send {
        self.0.list_files(dir, start_after)
    }

    fn read(&self, key: &str) -> impl Future<Output = Result<Vec<u8>, SourceError>> + Send {
        self.0.read(key)
    }

    fn read_range(
        &self,
        key: &str,
        range: std::ops::Range<u64>,
    ) -> impl Future<Output = Result<Vec<u8>, SourceError>> + Send {
        self.0.read_range(key, range)
    }

    fn open(
        &self,
        key: &str,
        etag: Option<&str>,
    ) -> impl Future<Output = Result<SegmentStream, SourceError>> + Send {
        self.0.open(key, etag)
    }

    fn stat(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<Option<SourceObject>, SourceError>> + Send {
        self.0.stat(key)
    }

    fn describe(&self, key: &str) -> String {
        self.0.describe(key)
    }
}

//! The kfs-iceberg pipeline: a segment into the ledger, exactly-once commits to
//! Iceberg tables, their maintenance, and the passes and ticks that run it all. The
//! Lambda functions and the CLI both run this code; the source, the ledger and the
//! catalog sit behind narrow interfaces with in-memory implementations. No cloud SDK
//! is linked here: the AWS implementations (DynamoDB ledger, Glue and S3 Tables
//! catalogs) live in `kfs-aws` and plug into the same traits.
//!
//! What the pipeline stands on, each its own crate: the catalogs, the warehouse
//! storage and the error kinds of foreign errors (`kfs-catalog`); record values as
//! Arrow columns, the table layout and the schema registries (`kfs-values`);
//! Parquet data files (`kfs-parquet`); and failpoints (`kfs-failpoint`, re-exported
//! as [`failpoint`]).
//!
//! Modules, from the bottom up (each depends only on those above it in this list):
//! `clock`, `source` (segments in), `ledger`, `table` (history, ownership, opening),
//! `convert` (one segment to data files), `commit` (exactly-once appends),
//! `maintenance`, `error`, `ingest` (one segment into the ledger), `pass` (one pipeline
//! pass), `tick` (the committer's tick), `wakeups` (the committer's wake-up queue),
//! `converter` (the converter function's core).

mod clock;
mod commit;
mod convert;
mod converter;
mod error;
mod ingest;
mod ledger;
mod maintenance;
mod mirror;
mod pass;
mod replay;
mod settings;
mod source;
mod table;
#[cfg(feature = "test-support")]
pub mod testing;
mod tick;
mod wakeups;

pub use clock::now_ms;
pub use commit::{
    CommitError, CommitOutcome, CommitSettings, RowDelta, StagedReplace, stage_row_delta,
};
pub use convert::{MAX_SCHEMAS_PER_SEGMENT, RegistrySchemas, WriterSchema};
pub use converter::{ConverterService, ConverterSettings, ObjectOutcome, conversion_mib};
pub use error::PipelineError;
pub use ingest::MAX_RUN_SEGMENTS;
pub use kfs_catalog::catalog::{
    CatalogAccess, CatalogHandle, CatalogKind, CatalogOverrides, LOCAL_CATALOG_NAME,
    MetadataPointer, Overridden, RestCredentials, RestSettings, S3TablesSettings, TableSwap,
    is_table_bucket_arn, lost_race, open_catalog_handle, publish, read_table, stage_updates,
    table_handle,
};
pub use kfs_catalog::fault::{
    ErrorKind, Fault, MISSING_AWS_CREDENTIALS, RetryPolicy, iceberg_error, iceberg_error_kind,
    missing_credentials, opendal_error_kind,
};
pub use kfs_catalog::storage::{S3Settings, Warehouse};
/// Failpoints of the storage effects (data file writes, deletes), where tests inject
/// crashes and errors: the `kfs-failpoint` crate, which kfs-parquet's merge shares.
pub use kfs_failpoint as failpoint;
pub use kfs_values::registry::{
    Framed, HttpRegistry, MemoryRegistry, RegisteredSchema, RegistryCredentials, RegistryError,
    RegistryLocation, SchemaId, SchemaKind, SchemaRegistry, frame,
};
pub use kfs_values::registry::{LookupPolicy, SchemaCache, open_registry};
#[cfg(feature = "sql")]
pub use ledger::SqliteLedger;
pub use ledger::{
    Attempts, DeadLetters, EntryState, InsertOutcome, Ledger, LedgerEntry, LedgerError, Listing,
    MemoryLedger, RunMember, WorkKey, converted_paths, existing_entry, partition_heads,
    sort_entries,
};
pub use maintenance::{
    CompactionReport, ExpiryReport, GC_ENABLED_PROPERTY, MAINTENANCE_ENABLED_PROPERTY,
    MIN_ORPHAN_AGE, MaintenanceError, MaintenancePolicy, MaintenanceStep, MaintenanceStorage,
    MaintenanceSummary, Neighbours, OrphanReport, OrphanRule, StepOff, compact_table,
    ensure_step_on, expire_snapshots, maintain_table, maintain_tables, remove_orphans,
    remove_orphans_among, rewrite_manifests, step_off,
};
pub use mirror::{Superseded, supersede, write_deletes};
pub use pass::{
    CONVERSION_TIMEOUT, PassReport, PipelineConfig, Progress, UNFINISHED_ATTEMPTS, run_attempt,
    run_pass,
};
pub use replay::{
    REPLAYED_FROM_KEY, REPLAYED_KEY, ReplayReport, replay_dead_letters, retryable_reason,
};
pub use settings::{
    CatalogSettings, EtcdSettings, LargeFileSettings, MaintenanceSettings, SchemaRegistrySettings,
    Settings, SettingsError, TablePatternEntry, ValidSettings,
};
pub use source::{
    MemorySource, ObjectStream, OpendalSource, SegmentSource, SegmentStream, SourceError,
    SourceObject,
};
pub use table::{
    Feed, LEDGER_PROPERTY, LiveDeletes, MAX_COLUMN_NAME_BYTES, OwnershipError, ProgressDecision,
    SOURCE_NAMESPACE_PROPERTY, column_for, compression, decide_progress, live_deletes,
    live_entries, newest_record_ms, table_ident, table_progress, table_watermarks,
    target_file_size,
};
pub use tick::{Backlog, TickLog, TickMaintenance, TickReport, backlog, run_tick};
pub use wakeups::{
    Announcement, MemoryWakeups, Paced, WakeupError, WakeupQueue, announcements, hold_early,
};

//! Internals that the integration tests, the benchmarks and the test kit drive
//! directly: conversion of one segment, merges, JSON values, the ledger contract, the
//! pinned append and the SQL catalog's pieces. Behind the `test-support` feature, never
//! part of a production build.

pub use crate::catalog::sql::SqlCatalog;
pub use crate::catalog::{
    MemoryTables, PinnedCatalog, RestTables, SqlTableSwap, open_postgres_catalog, open_sql_catalog,
};
pub use crate::commit::commit_table;
pub use crate::convert::json::{EvolvingSchema, conform, fits, parse_value, payload_columns};
pub use crate::convert::{
    ROWS_PER_BATCH, RecordColumns, SegmentInput, ValueColumns, convert_segment,
};
pub use crate::ingest::{TopicTable, ingest_segment};
pub use crate::ledger::{check_contract, converted_paths};
pub use crate::parquet::{merge_data_files, writer_properties};
pub use crate::source::in_memory;
pub use crate::table::{
    METADATA_COLUMNS, arrow_schema, ensure_topic_table, evolve_schema, live_entries_in, schema_for,
};

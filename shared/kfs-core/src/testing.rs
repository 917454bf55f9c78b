//! Internals that the integration tests, the benchmarks and the test kit drive
//! directly: conversion of one segment, merges, JSON values, the ledger contract, the
//! pinned append and the SQL catalog's pieces. Behind the `test-support` feature, never
//! part of a production build.

pub use crate::commit::commit_table;
pub use crate::convert::{
    ROWS_PER_BATCH, RecordColumns, SegmentInput, ValueColumns, convert_segment,
    registry_change_columns, registry_columns,
};
pub use crate::ingest::{
    NewSegment, RunLimits, RunsOutcome, TopicTable, ingest_runs, ingest_segment,
};
pub use crate::ledger::{
    Probe, Probed, check_contract, converted_paths, pending_data_files, spilled_to,
};
pub use crate::mirror::supersede_with;
pub use crate::source::in_memory;
pub use crate::table::live_lineage;
pub use crate::table::{
    METADATA_COLUMNS, arrow_schema, ensure_topic_table, evolve_schema, live_entries_in, schema_for,
};
pub use kfs_catalog::catalog::SqlCatalog;
pub use kfs_catalog::catalog::{
    MemoryTables, PinnedCatalog, RestTables, SqlTableSwap, open_postgres_catalog, open_sql_catalog,
};
pub use kfs_parquet::{merge_data_files, writer_properties};
pub use kfs_values::json::{EvolvingSchema, conform, fits, parse_value, payload_columns};

/// `schema` as tables were laid out before every record had a row: `timestamp`
/// required and no `key_bytes` in the header entries (to test the upgrade).
pub fn legacy_record_schema(
    schema: &iceberg::spec::Schema,
) -> iceberg::Result<iceberg::spec::Schema> {
    use iceberg::spec::{ListType, StructType, Type};
    use std::sync::Arc;
    let fields: Vec<_> = schema
        .as_struct()
        .fields()
        .iter()
        .map(|field| {
            let mut old = field.as_ref().clone();
            if field.name == "timestamp" {
                old.required = true;
            }
            if let Type::List(list) = field.field_type.as_ref()
                && let Type::Struct(entry) = list.element_field.field_type.as_ref()
            {
                let kept: Vec<_> = entry
                    .fields()
                    .iter()
                    .filter(|f| f.name != crate::table::HEADER_KEY_BYTES)
                    .cloned()
                    .collect();
                let mut element = list.element_field.as_ref().clone();
                element.field_type = Box::new(Type::Struct(StructType::new(kept)));
                old.field_type = Box::new(Type::List(ListType::new(Arc::new(element))));
            }
            Arc::new(old)
        })
        .collect();
    iceberg::spec::Schema::builder()
        .with_schema_id(schema.schema_id() + 1)
        .with_fields(fields)
        .build()
}

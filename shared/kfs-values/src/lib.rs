//! Record values as Arrow columns, as the topic table holds them: the table's layout
//! and the column names of value fields ([`layout`]), the record columns of every
//! table ([`columns`]), JSON values ([`json`]), and values encoded against a schema
//! registry: the registry clients ([`registry`]), the writer schemas
//! ([`writer_schema`]) and their decoders ([`avro`], [`protobuf`], [`json_schema`])
//! into typed cells ([`cells`]) checked against their columns ([`fit`]) and bounded
//! before anything a value declares is allocated ([`bounds`]).
//!
//! No segment, ledger or catalog here: kfs-core's conversion routes each record's
//! value through these modules, and writes the columns to Parquet with kfs-parquet.
//!
//! Modules, from the bottom up: `layout`, `bounds`, `cells`, `fit`, `columns`,
//! `json`, `registry`, `avro`, `protobuf`, `json_schema`, `writer_schema`.

pub mod avro;
pub mod bounds;
pub mod cells;
pub mod columns;
pub mod fit;
pub mod json;
pub mod json_schema;
pub mod layout;
pub mod protobuf;
pub mod registry;
#[cfg(test)]
mod value_checks;
pub mod writer_schema;

pub use columns::{BYTES_PER_BATCH, ROWS_PER_BATCH, RecordColumns, partition_numbers};
pub use writer_schema::{
    MAX_SCHEMAS_PER_SEGMENT, NamedSchemas, RegistrySchemas, WriterSchema, WriterSchemas,
};

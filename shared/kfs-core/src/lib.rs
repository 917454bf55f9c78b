//! The kfs-iceberg core: converting segments to Parquet data files, the ledger of what
//! happened to each segment, and exactly-once commits to Iceberg tables. The Lambda
//! functions and the CLI both run this code; the source, the ledger and the catalog
//! sit behind narrow interfaces with in-memory implementations.

pub mod catalog;
pub mod committer;
pub mod convert;
pub mod converter;
pub mod etcd;
pub mod failpoint;
pub mod glue;
pub mod json_values;
pub mod ledger;
pub mod ledger_files;
pub mod maintenance;
pub mod memory_catalog;
pub mod metrics;
pub mod parquet_merge;
pub mod pipeline;
pub mod rest_swap;
pub mod rest_tables;
pub mod rewrite;
pub mod s3tables;
pub mod source;
pub mod table;
pub mod table_commit;

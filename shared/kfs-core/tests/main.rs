//! The integration tests of kfs-core, one binary: the crash and dead-letter matrices,
//! the seeded simulation, faults of the committer, and the pipeline on the SQLite and
//! in-memory catalogs. None needs a server.

mod faults;
mod local;

mod cdc_mirrors;
mod change_log;
mod committer_faults;
mod crash_matrix;
mod dead_letter_matrix;
mod foreign_deletes;
mod isolation;
mod json_values_props;
mod json_widening;
mod lfs_records;
mod memory_catalog;
mod neighbours;
mod parquet_merge;
mod partition_evolution;
mod poison_records;
mod promoted_partitions;
mod quarantine_corpus;
mod registry_lookups;
mod registry_value_checks;
mod registry_values;
mod replay_dead_letters;
mod row_deltas;
mod runs;
mod safety;
mod simulation;
mod snapshot_summaries;
mod source_positions;
mod vector_lineage;
mod vector_mirrors;
mod vector_readers;

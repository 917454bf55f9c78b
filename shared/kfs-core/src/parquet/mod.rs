//! Parquet data files: the writer settings a table's properties ask for, and the
//! row-group merge shared by coalescing (at commit) and compaction, reading files of
//! older schemas with the table's current columns.

mod conform;
mod merge;
mod properties;

pub use conform::conform_batch;
pub use merge::merge_data_files;
pub use properties::writer_properties;

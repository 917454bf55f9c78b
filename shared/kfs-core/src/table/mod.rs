//! The topic table: its layout (schema, partition spec, properties, the column names of
//! JSON fields), how it is opened
//! and evolved through the catalog, the feed that owns it, its history and progress (stored in its
//! properties, carried in its snapshot summaries), and its data files as the planners see them.

mod change_log;
mod deletes;
mod ensure;
pub(crate) mod files;
pub(crate) mod history;
mod lineage;
mod offsets;
mod ownership;
mod progress;

pub use change_log::{check_columns, ensure_change_log_table};
pub use deletes::{LiveDeletes, live_deletes, live_deletes_of};
pub(crate) use ensure::creation_format_version;
#[cfg(any(test, feature = "test-support"))]
pub use ensure::ensure_topic_table;
pub use ensure::{
    LayoutUpgrade, ensure_dead_letter_table, ensure_owned_table, evolve_partition_spec,
    evolve_schema, table_ident, upgrade_layout,
};
pub use files::{file_stat, live_entries, live_entries_in, target_file_size};
pub use history::{
    ATTEMPT_ID_KEY, MAINTENANCE_ID_KEY, ancestry, attempt_of, find_commit, find_maintenance,
    newest_record_ms, table_progress, table_watermarks,
};
pub use kfs_parquet::{arrow_schema, compression};
pub use kfs_values::layout::*;
pub(crate) use lineage::inherited_first_row_ids;
pub use lineage::live_lineage;
pub use offsets::offsets_between;
pub use ownership::{
    Feed, LEDGER_PROPERTY, OwnershipError, SOURCE_NAMESPACE_PROPERTY, claim_table, table_owner,
};
pub use progress::{ProgressDecision, decide_progress};

/// The mode `table` records ([`kfs_plan::mode`]; `append` when none): a mode this
/// version does not know, or cannot commit, is a configuration error naming it.
pub fn mode_of(table: &iceberg::table::Table) -> iceberg::Result<kfs_plan::mode::ModeSetting> {
    let config = |reason: String| {
        kfs_catalog::fault::iceberg_error(
            kfs_catalog::fault::ErrorKind::Config,
            format!("table {}: {reason}", table.identifier()),
        )
    };
    let mode = kfs_plan::mode::ModeSetting::of_properties(table.metadata().properties())
        .map_err(config)?;
    let format = value_format_of(table).map_err(config)?;
    mode.check(format).map_err(config)?;
    Ok(mode)
}

/// Whether `table` reads its values as Debezium change events (mode `cdc`).
pub fn reads_changes(table: &iceberg::table::Table) -> bool {
    mode_of(table).is_ok_and(|mode| mode.mode == kfs_plan::mode::TableMode::Cdc)
}

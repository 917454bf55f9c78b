//! The table a topic's segments are ingested into ([`TopicTable`]): opened (created on
//! first sight) with its progress, its value format, LFS policy and schemas; its
//! dead-letter table; and what a conversion into it returns ([`Conversion`]).

use super::passes::HELD_SEGMENT_BYTES;
use crate::convert::{ConvertError, ConvertedSegment};
use crate::error::PipelineError;
use crate::source::SourceObject;
use crate::table::LayoutUpgrade;
use crate::table::table_progress;
use crate::table::{Feed, claim_table, ensure_owned_table, evolve_partition_spec};
use futures::TryFutureExt;
use iceberg::table::Table;
use kfs_catalog::catalog::CatalogAccess;
use kfs_plan::keys::SegmentKey;
use kfs_plan::lfs::{LfsMode, LfsPolicy};
use kfs_plan::naming::{KeyFormat, TableName, TableNaming, ValueFormat};
use kfs_plan::sweep::{ListedSegment, TableProgress};

/// Copies of one registry value at the inflation bound a conversion holds at its peak
/// (the inflated payload, the decoded value, its cell, its Arrow column, the Parquet
/// writer's pages and statistics): six values inflating to 16 MiB each peak at 226
/// MiB of heap in one conversion (`tests/bombs.rs`), the batch flushed after each.
pub const INFLATED_VALUE_COPIES: u64 = 14;

/// A topic's table, opened (created on first sight), with its progress at opening.
#[derive(Debug, Clone)]
pub struct TopicTable {
    /// The table's name.
    pub name: TableName,
    /// The table.
    pub table: Table,
    /// Its watermarks and recorded gaps.
    pub progress: TableProgress,
    /// What is done with its topic's large-file claim checks.
    pub lfs: LfsPolicy,
    /// How a registry table's keys are read.
    pub keys: KeyFormat,
    /// The writer schemas of a registry table's values (`None`: no registry is
    /// configured).
    pub schemas: Option<std::sync::Arc<crate::convert::RegistrySchemas>>,
}

impl TopicTable {
    /// Opens the table of `feed`, creating it on first sight; an existing table whose
    /// partition spec differs from the one configured evolves to it. Fails with
    /// [`PipelineError::Ownership`] when another feed owns the table or kfs-iceberg
    /// did not create it. A new table records `feed`'s namespace and `ledger`
    /// ([`Ledger::identity`](crate::ledger::Ledger::identity)); an older one without a
    /// ledger recorded gets `ledger`.
    pub async fn open(
        catalog: CatalogAccess<'_>,
        naming: &TableNaming,
        feed: Feed<'_>,
        ledger: &str,
    ) -> Result<Self, PipelineError> {
        let topic = feed.topic;
        let name = naming.table_for(topic);
        if name.dead_letter_parent().is_some() {
            return Err(crate::table::OwnershipError::Reserved {
                table: name.to_string(),
                feed: feed.to_string(),
            }
            .into());
        }
        let catalog_error = |source: iceberg::Error| PipelineError::Catalog {
            table: name.to_string(),
            source: Box::new(source),
        };
        let owner = std::collections::HashMap::from([
            (
                crate::table::SOURCE_NAMESPACE_PROPERTY.to_owned(),
                feed.namespace.to_owned(),
            ),
            (crate::table::LEDGER_PROPERTY.to_owned(), ledger.to_owned()),
        ]);
        let table = ensure_owned_table(catalog.catalog, &name, topic, owner, naming)
            .await
            .map_err(catalog_error)?;
        let table = claim_table(catalog.swap, table, feed, ledger).await?;
        let lfs = naming.lfs.for_topic(topic);
        let mut table = table;
        for upgrade in layout_upgrades(&table, &lfs).map_err(|reason| match reason {
            LayoutRefusal::Config(reason) => PipelineError::Config(format!(
                "table {name}: {reason}: set topic {topic}'s lfs mode to off"
            )),
            LayoutRefusal::Unreadable(reason) => {
                catalog_error(iceberg::Error::new(iceberg::ErrorKind::DataInvalid, reason))
            }
        })? {
            table = crate::table::upgrade_layout(catalog.catalog, catalog.swap, table, upgrade)
                .await
                .map_err(catalog_error)?;
        }
        if let Some(fields) = naming.configured_partition(topic) {
            table = match evolve_partition_spec(catalog.swap, &table, fields).await {
                Ok(table) => table,
                // Another process evolved it first: its spec is the configured one, or
                // the next pass tries again.
                Err(e) if e.kind() == iceberg::ErrorKind::CatalogCommitConflicts => catalog
                    .catalog
                    .load_table(table.identifier())
                    .await
                    .map_err(catalog_error)?,
                Err(e) => return Err(catalog_error(e)),
            };
        }
        let progress = table_progress(&table).map_err(|source| PipelineError::Progress {
            table: name.to_string(),
            source,
        })?;
        Ok(Self {
            name,
            table,
            progress,
            lfs,
            keys: naming.key_format,
            schemas: None,
        })
    }
}

/// Why a table's layout cannot be brought to what its settings ask.
enum LayoutRefusal {
    /// The settings ask what the table cannot do.
    Config(String),
    /// The table's properties do not read.
    Unreadable(String),
}

/// The layout upgrades `table` needs: the current record layout, a `cdc` table's
/// source positions, and the `lfs_*` columns when `lfs` writes them (a raw table's
/// alone: LFS claim checks in a table of other values are refused).
fn layout_upgrades(table: &Table, lfs: &LfsPolicy) -> Result<Vec<LayoutUpgrade>, LayoutRefusal> {
    let mut upgrades = vec![LayoutUpgrade::RecordLayout];
    if crate::table::reads_changes(table) {
        upgrades.push(LayoutUpgrade::SourcePosition);
    }
    if lfs.mode != LfsMode::Off {
        match crate::table::value_format_of(table) {
            Ok(ValueFormat::Raw) if lfs.mode.has_columns() => {
                upgrades.push(LayoutUpgrade::LfsColumns);
            }
            Ok(ValueFormat::Raw) => {}
            Ok(format) => {
                return Err(LayoutRefusal::Config(format!(
                    "it stores {} values, and LFS claim checks are handled in raw tables only",
                    format.name()
                )));
            }
            Err(reason) => return Err(LayoutRefusal::Unreadable(reason)),
        }
    }
    Ok(upgrades)
}

/// Why a segment arrived too late to be ingested: after its offsets were committed as
/// a gap, or below the offset its partition began at (by the table's progress).
pub(super) fn late(progress: &TableProgress, key: &SegmentKey) -> Option<String> {
    let why = match progress.classify(key.partition, key.base_offset) {
        ListedSegment::LateAfterGap(gap) => format!(
            "arrived after offsets {}..={} of partition {} were committed as a gap ({:?})",
            gap.from, gap.to, gap.partition, gap.reason
        ),
        ListedSegment::LateBeforeStart { start } => format!(
            "arrived after partition {} began in the table at offset {start}; its offsets are below that start",
            key.partition
        ),
        ListedSegment::Open | ListedSegment::Committed => return None,
    };
    Some(format!(
        "{why}; not ingested behind the watermark: load it elsewhere or skip it"
    ))
}

impl TopicTable {
    /// Bytes of a segment of `size` bytes its conversion holds besides its decoding
    /// (a JSON or registry table's segment read once for several passes), and, for a
    /// registry table, the copies of one value at its bounds, which its segment's
    /// size does not tell (a zlib value of a few KB inflating to
    /// `registry::MAX_INFLATED_PAYLOAD`: `INFLATED_VALUE_COPIES` of it).
    pub fn held_bytes(&self, size: u64) -> u64 {
        let format = crate::table::value_format_of(&self.table);
        let held = match format {
            Ok(ValueFormat::Json | ValueFormat::Registry) if size <= HELD_SEGMENT_BYTES => size,
            _ => 0,
        };
        match format {
            Ok(ValueFormat::Registry) => held.saturating_add(
                INFLATED_VALUE_COPIES.saturating_mul(kfs_values::registry::MAX_INFLATED_PAYLOAD),
            ),
            _ => held,
        }
    }

    /// The table, reading registry-encoded values with `schemas`.
    pub fn with_schemas(
        self,
        schemas: Option<std::sync::Arc<crate::convert::RegistrySchemas>>,
    ) -> Self {
        Self { schemas, ..self }
    }

    /// Whether `object` is converted in runs of small segments
    /// ([`ingest_runs`](super::ingest_runs)): a segment of at most 1 MiB of a raw table
    /// (a JSON table grows its schema segment by segment) without claim checks to
    /// handle (their blobs make any segment large).
    pub fn in_runs(&self, object: &SourceObject) -> bool {
        object.size <= crate::convert::RUN_SEGMENT_BYTES
            && !self.handles_claim_checks()
            && matches!(
                crate::table::value_format_of(&self.table),
                Ok(ValueFormat::Raw)
            )
    }

    /// Whether its segments go through the large-file claim-check handling: its mode
    /// is not `off`, or the table has `lfs_*` columns to fill.
    pub(super) fn handles_claim_checks(&self) -> bool {
        self.lfs.mode != LfsMode::Off
            || crate::table::has_lfs_columns(self.table.metadata().current_schema())
    }
}

/// A conversion: the converted segment with the table it was written for (its
/// schema as the conversion left it) and the dead-letter table, if it had records
/// for it; or the conversion's error.
pub(crate) type Conversion = Result<(ConvertedSegment, Table, Option<Table>), ConvertError>;

/// The dead-letter table of `name` (whose table is `table`), created on first need and
/// brought to the current record layout.
pub(super) async fn open_dead_letter_table(
    CatalogAccess { catalog, swap }: CatalogAccess<'_>,
    name: &TableName,
    table: &Table,
) -> Result<Table, PipelineError> {
    crate::table::ensure_dead_letter_table(catalog, name, table)
        .and_then(|dlq| {
            crate::table::upgrade_layout(catalog, swap, dlq, LayoutUpgrade::RecordLayout)
        })
        .await
        .map_err(|source| PipelineError::Catalog {
            table: name.dead_letters().to_string(),
            source: Box::new(source),
        })
}

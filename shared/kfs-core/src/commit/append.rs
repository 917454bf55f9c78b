//! Landing a commit's files: pinned to the snapshot the plan was made on, the
//! table's stored progress set in the same metadata update, and the outcome checked
//! against the table re-read after it, whatever the catalog answered. An append
//! table's files are appended; a mirror's (`kfs_plan::mode`) come in a row delta
//! with the position deletes of the rows they supersede ([`crate::mirror`]), planned
//! on the same pinned snapshot, so a commit that lands applies each change once.

use std::collections::HashMap;

use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{ErrorKind, TableUpdate};
use kfs_catalog::catalog::CatalogAccess;
use kfs_plan::mode::ModeSetting;

use crate::commit::row_delta::{RowDelta, stage_row_delta};
use crate::table::{ATTEMPT_ID_KEY, attempt_of, find_commit};

/// Appends `files` with the summary `properties` on the snapshot `table` is at, or
/// not at all, and in the same metadata update stores the progress the summary carries
/// in the table's properties (where no other engine's rewrite or expiry removes it,
/// [`kfs_plan::progress`]), attributed to `attempt_id`; returns the catalog's answer,
/// which the caller checks against the table (an error may hide a commit that landed,
/// and a success a swap that did not).
async fn pinned_append(
    catalog: &dyn iceberg::Catalog,
    table: &Table,
    files: Vec<iceberg::spec::DataFile>,
    properties: HashMap<String, String>,
    attempt_id: &str,
) -> Result<Option<iceberg::Error>, iceberg::Error> {
    let progress = pinned_progress(table, &properties, attempt_id);
    let tx = Transaction::new(table);
    let tx = tx
        .fast_append()
        // The duplicate-path check reads every manifest of the table on every commit
        // (commit time grows with the table's age). Exactly once does not rest on it:
        // the plan starts at the watermarks of the snapshot the commit is pinned to,
        // so a racing commit makes this one conflict.
        .with_check_duplicate(false)
        .add_data_files(files)
        .set_snapshot_properties(properties)
        .apply(tx)?;
    let mut update = tx.update_table_properties();
    for (key, value) in progress {
        update = update.set(key, value);
    }
    let tx = update.apply(tx)?;
    Ok(tx
        .commit(&kfs_catalog::catalog::PinnedCatalog::new(
            catalog,
            table.clone(),
        ))
        .await
        .err())
}

/// The progress properties a commit of the summary `properties` stores, attributed to
/// `attempt_id`: its snapshot gets the next sequence number of the table it is pinned
/// to (a table that moved meanwhile refuses the whole update).
fn pinned_progress(
    table: &Table,
    properties: &HashMap<String, String>,
    attempt_id: &str,
) -> HashMap<String, String> {
    let sequence_number = table.metadata().next_sequence_number();
    kfs_plan::progress::progress_properties(properties, attempt_id, sequence_number)
}

/// [`pinned_append`] for a mirror: the files in a row delta beside the position
/// deletes of every row they supersede, as the table the commit is pinned to holds
/// them, committed through the pointer swap (which requires `main` unmoved).
async fn pinned_row_delta(
    access: CatalogAccess<'_>,
    table: &Table,
    files: Vec<iceberg::spec::DataFile>,
    properties: HashMap<String, String>,
    attempt_id: &str,
) -> Result<Option<iceberg::Error>, iceberg::Error> {
    let progress = pinned_progress(table, &properties, attempt_id);
    let superseded = crate::mirror::supersede(table, &files).await?;
    let deletes = crate::mirror::write_deletes(table, &files, &superseded.deletes).await?;
    let change = RowDelta {
        data: files,
        deletes,
        properties,
    };
    let staged = stage_row_delta(table, &change, crate::now_ms()).await?;
    let mut updates = staged.updates;
    let snapshot = (staged.snapshot_id, table.metadata().next_sequence_number());
    updates.extend(crate::mirror::index_updates(table, &superseded.index, snapshot).await?);
    updates.push(TableUpdate::SetProperties {
        updates: progress.into_iter().collect(),
    });
    Ok(access
        .swap
        .commit(table, staged.requirements, updates)
        .await
        .err())
}

/// What a pinned append came to, by the table re-read after it.
pub(crate) enum Appended {
    /// The commit is in the table: the table as re-read, the commit's snapshot, and
    /// whether that snapshot is this attempt's (by its attempt id) rather than another
    /// process's attempt at the same commit, which may have laid files out otherwise.
    Landed(Table, i64, bool),
    /// It is not (another commit came first, or the swap silently failed): the table as
    /// re-read, to plan again on.
    Replan(Table),
}

/// Lands `files` pinned to the snapshot `table` is at (appended, or in a row delta
/// for a table whose `mode` mirrors its keys), then re-reads the table and looks for
/// `commit_id` in its history, whatever the catalog answered (the SQL catalog can
/// report success for a swap that did not happen, and an error may hide a commit that
/// did). An error a re-plan cannot answer is returned.
pub(crate) async fn append_and_verify(
    access: CatalogAccess<'_>,
    table: &Table,
    mode: &ModeSetting,
    files: Vec<iceberg::spec::DataFile>,
    properties: HashMap<String, String>,
    commit_id: &str,
) -> Result<Appended, iceberg::Error> {
    let mut properties = properties;
    let attempt_id = uuid::Uuid::new_v4().simple().to_string();
    properties.insert(ATTEMPT_ID_KEY.to_owned(), attempt_id.clone());
    let answer = match mode.mirrors() {
        false => pinned_append(access.catalog, table, files, properties, &attempt_id).await?,
        true => pinned_row_delta(access, table, files, properties, &attempt_id).await?,
    };
    let table = access.catalog.load_table(table.identifier()).await?;
    if let Some(found) = find_commit(&table, commit_id) {
        let ours = attempt_of(&table, found).as_deref() == Some(attempt_id.as_str());
        return Ok(Appended::Landed(table, found.snapshot_id(), ours));
    }
    match answer {
        Some(e) if !replannable(&e) => Err(e),
        _ => Ok(Appended::Replan(table)),
    }
}

/// Whether a commit that did not land may be planned again and retried: a conflict,
/// a failed requirement, or a retryable failure.
fn replannable(error: &iceberg::Error) -> bool {
    error.kind() == ErrorKind::DataInvalid
        || kfs_catalog::fault::iceberg_error_kind(error).is_retryable()
}

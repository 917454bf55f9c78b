//! Recording what ingesting a segment came to in the ledger: its version's identity,
//! its entry (pending with its data files described, spilled when large; or
//! quarantined), inserted unless another process recorded it first.

use super::target::TopicTable;
use crate::clock::now_ms;
use crate::error::PipelineError;
use crate::ledger::{EntryState, InsertOutcome, Ledger, LedgerEntry};
use crate::ledger::{description_paths, resolved_paths};
use crate::source::{SegmentSource, SourceObject};
use iceberg::spec::DataFile;
use iceberg::table::Table;
use kfs_plan::keys::SegmentKey;
use std::collections::HashSet;

/// Bytes at the end of a segment that identify its content: the footer, which holds
/// the CRC-32C of the whole body (checked when the segment is decoded).
pub(super) const FOOTER_TAG_BYTES: u64 = kfs_segment::SEGMENT_FOOTER_LEN as u64;

/// The identity of a segment version: the store's ETag, or (where the store has none,
/// as in a local directory) its size and footer, which carries the body's CRC-32C.
pub fn version_tag(object: &SourceObject, tail: &[u8]) -> String {
    match &object.etag {
        Some(etag) => etag.clone(),
        None => {
            let footer: String = tail.iter().map(|b| format!("{b:02x}")).collect();
            format!("footer-{footer}-{}", object.size)
        }
    }
}

/// Descriptions of `files`, written in `table`'s default spec as the conversion saw it.
pub(super) fn describe(files: Vec<DataFile>, table: &Table) -> iceberg::Result<Vec<String>> {
    let metadata = table.metadata();
    files
        .into_iter()
        .map(|file| crate::ledger::to_ledger(file, metadata.default_partition_spec_id(), metadata))
        .collect()
}

/// Descriptions of `files` as an entry holds them: inline, or, past what a ledger item
/// holds, spilled beside the files they describe (the spill file noted in `written`).
pub(super) async fn describe_and_spill(
    files: Vec<DataFile>,
    table: &Table,
    written: &mut Vec<String>,
) -> iceberg::Result<Vec<String>> {
    let spilled_at = format!(
        "{}/data/kfs-descriptions/{}.json",
        table.metadata().location().trim_end_matches('/'),
        uuid::Uuid::new_v4()
    );
    let descriptions = describe(files, table)?;
    written.extend(description_paths(descriptions.iter()));
    crate::ledger::spill(descriptions, table.file_io(), &spilled_at).await
}

/// Inserts a converted entry. When another process recorded the segment first, the
/// files this conversion `written` (named for this write alone) are referenced by
/// nothing, unless the entry found is our own (a retried insert whose first attempt
/// landed): they are deleted, best effort (orphan cleanup removes what a failure here
/// leaves). Returns the entry that is there.
pub(super) async fn record_written(
    ledger: &impl Ledger,
    entry: LedgerEntry,
    file_io: &iceberg::io::FileIO,
    written: &[String],
) -> Result<LedgerEntry, PipelineError> {
    match ledger.insert(&entry).await? {
        InsertOutcome::Inserted => Ok(entry),
        InsertOutcome::Exists(existing) => {
            let Ok(kept) = resolved_paths(&existing, file_io).await else {
                return Ok(*existing);
            };
            let kept: HashSet<String> = kept.into_iter().collect();
            for path in written.iter().filter(|path| !kept.contains(*path)) {
                let _ = kfs_failpoint::delete_file(file_io, path).await;
            }
            Ok(*existing)
        }
    }
}

/// The pending entry of a segment version about to be converted into `target`, its
/// version identified ([`version_tag`]).
pub(super) async fn new_entry(
    source: &impl SegmentSource,
    target: &TopicTable,
    key: &SegmentKey,
    object: &SourceObject,
) -> Result<LedgerEntry, PipelineError> {
    let etag = match &object.etag {
        Some(etag) => etag.clone(),
        None => {
            let from = object.size.saturating_sub(FOOTER_TAG_BYTES);
            let tail = source.read_range(&object.key, from..object.size).await?;
            version_tag(object, &tail)
        }
    };
    Ok(entry_for(target, key, object, etag))
}

/// The pending entry of the segment version `etag` of `object`, for `target`.
pub(super) fn entry_for(
    target: &TopicTable,
    key: &SegmentKey,
    object: &SourceObject,
    etag: String,
) -> LedgerEntry {
    let now = now_ms();
    LedgerEntry {
        segment: object.key.clone(),
        etag,
        table: target.name.to_string(),
        topic: key.topic.clone(),
        partition: key.partition,
        base_offset: key.base_offset,
        last_offset: key.base_offset,
        records: 0,
        bytes: 0,
        data_files: Vec::new(),
        dead_letters: Default::default(),
        members: Vec::new(),
        state: EntryState::Pending,
        created_ms: now,
        updated_ms: now,
    }
}

/// Inserts `entry` unless the segment has one; returns the entry that is there.
pub(super) async fn record(
    ledger: &impl Ledger,
    entry: LedgerEntry,
) -> Result<LedgerEntry, PipelineError> {
    Ok(match ledger.insert(&entry).await? {
        InsertOutcome::Inserted => entry,
        InsertOutcome::Exists(existing) => *existing,
    })
}

/// `entry`, quarantined with `error`.
pub(super) fn quarantined(entry: LedgerEntry, error: String) -> LedgerEntry {
    LedgerEntry {
        state: EntryState::Quarantined { error },
        ..entry
    }
}

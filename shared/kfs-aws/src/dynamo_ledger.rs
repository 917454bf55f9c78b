//! The ledger on DynamoDB.
//!
//! Table design (`infra/ledger-table.json`, the same definition the SAM template
//! declares):
//! - partition key `segment_key` (S): the `.kfs` object key; one item per segment;
//! - sparse GSI `work` (keys only): partition key `work_key` = `pending#<table>` or
//!   `quarantined#<table>`, sort key `work_order` = `<partition:010>#<base offset:020>`.
//!   Committed items drop both attributes, so the index holds only open work and a
//!   query for a table's pending segments reads nothing else;
//! - items keyed `attempt#<segment key>` count conversions of a segment that began and
//!   never ended (`started`, a number): no `work_key`, skipped by listings;
//! - optional TTL attribute `expires_at` (epoch seconds) on committed items. Leave TTL
//!   off unless the segment bucket expires segments first: an expired entry whose
//!   segment is still listed would be converted again (harmlessly, as the committer
//!   finds its range already in the table, but at a cost).
//!
//! Every state change is a conditional write (`attribute_not_exists` on insert,
//! `entry_state = pending` on commit). The GSI is eventually consistent, so every item
//! found through it is re-read from the base table with a consistent read before it
//! is acted on.

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use kfs_core::{
    Attempts, DeadLetters, EntryState, InsertOutcome, Ledger, LedgerEntry, LedgerError, Listing,
    RunMember, WorkKey, existing_entry, sort_entries,
};
use kfs_plan::fault::ErrorKind;

/// Name of the sparse work index.
pub const WORK_INDEX: &str = "work";

/// Key prefix of the items counting unfinished conversions of a segment.
const ATTEMPT_PREFIX: &str = "attempt#";

type Item = HashMap<String, AttributeValue>;

/// The ledger on a DynamoDB table.
#[derive(Debug, Clone)]
pub struct DynamoLedger {
    client: Client,
    table: String,
}

/// Operation errors that can say a write's condition failed.
trait ConditionFailed {
    fn condition_failed(&self) -> bool;
}

impl ConditionFailed for aws_sdk_dynamodb::operation::put_item::PutItemError {
    fn condition_failed(&self) -> bool {
        self.is_conditional_check_failed_exception()
    }
}

impl ConditionFailed for aws_sdk_dynamodb::operation::update_item::UpdateItemError {
    fn condition_failed(&self) -> bool {
        self.is_conditional_check_failed_exception()
    }
}

impl ConditionFailed for aws_sdk_dynamodb::operation::delete_item::DeleteItemError {
    fn condition_failed(&self) -> bool {
        self.is_conditional_check_failed_exception()
    }
}

/// Whether a conditional write applied: `Ok(false)` when its condition did not hold.
fn applied<T, E>(result: Result<T, SdkError<E, HttpResponse>>) -> Result<bool, LedgerError>
where
    E: ConditionFailed + ProvideErrorMetadata + std::error::Error + 'static,
{
    match result {
        Ok(_) => Ok(true),
        Err(e) if e.as_service_error().is_some_and(E::condition_failed) => Ok(false),
        Err(e) => Err(store_error(e)),
    }
}

fn store_error<E>(e: SdkError<E, HttpResponse>) -> LedgerError
where
    E: std::error::Error + ProvideErrorMetadata + 'static,
{
    let kind = crate::aws_error_kind(&e);
    let mut message = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(inner) = source {
        message.push_str(&format!(": {inner}"));
        source = inner.source();
    }
    LedgerError::Store { message, kind }
}

fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

fn n(value: impl ToString) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

fn work_order(partition: i32, base_offset: i64) -> String {
    format!("{partition:010}#{base_offset:020}")
}

fn to_item(entry: &LedgerEntry) -> Result<Item, LedgerError> {
    let data_files = entry.stored_data_files()?;
    let mut item = Item::from([
        ("segment_key".to_owned(), s(&entry.segment)),
        ("etag".to_owned(), s(&entry.etag)),
        ("table_name".to_owned(), s(&entry.table)),
        ("topic".to_owned(), s(&entry.topic)),
        ("partition_id".to_owned(), n(entry.partition)),
        ("base_offset".to_owned(), n(entry.base_offset)),
        ("last_offset".to_owned(), n(entry.last_offset)),
        ("record_count".to_owned(), n(entry.records)),
        ("byte_count".to_owned(), n(entry.bytes)),
        ("data_files".to_owned(), s(&data_files)),
        ("entry_state".to_owned(), s(entry.state.name())),
        ("created_ms".to_owned(), n(entry.created_ms)),
        ("updated_ms".to_owned(), n(entry.updated_ms)),
    ]);
    match &entry.state {
        EntryState::Pending | EntryState::Quarantined { .. } | EntryState::Skipped { .. } => {
            item.insert(
                "work_key".into(),
                s(&format!("{}#{}", entry.state.name(), entry.table)),
            );
            item.insert(
                "work_order".into(),
                s(&work_order(entry.partition, entry.base_offset)),
            );
        }
        EntryState::Committed { snapshot_id } => {
            item.insert("snapshot_id".into(), n(snapshot_id));
        }
    }
    if let EntryState::Quarantined { error } | EntryState::Skipped { error } = &entry.state {
        item.insert("error_text".into(), s(error));
    }
    if let Some(dead_letters) = entry.dead_letters.to_stored(&entry.segment)? {
        item.insert("dead_letters".into(), s(&dead_letters));
    }
    if let Some(members) = RunMember::to_stored(&entry.members, &entry.segment)? {
        item.insert("members".into(), s(&members));
    }
    Ok(item)
}

fn from_item(item: &Item) -> Result<LedgerEntry, LedgerError> {
    let segment = item
        .get("segment_key")
        .and_then(|v| v.as_s().ok())
        .cloned()
        .unwrap_or_default();
    let corrupt = |reason: String| LedgerError::Corrupt {
        segment: segment.clone(),
        reason,
    };
    let text = |name: &str| -> Result<String, LedgerError> {
        item.get(name)
            .and_then(|v| v.as_s().ok())
            .cloned()
            .ok_or_else(|| corrupt(format!("missing text attribute {name}")))
    };
    fn number<T: std::str::FromStr>(item: &Item, name: &str) -> Option<T> {
        item.get(name)
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse().ok())
    }
    let num = |name: &str| -> Result<i64, LedgerError> {
        number::<i64>(item, name).ok_or_else(|| corrupt(format!("missing number attribute {name}")))
    };
    let state = match text("entry_state")?.as_str() {
        "pending" => EntryState::Pending,
        "committed" => EntryState::Committed {
            snapshot_id: num("snapshot_id")?,
        },
        "quarantined" => EntryState::Quarantined {
            error: text("error_text").unwrap_or_default(),
        },
        "skipped" => EntryState::Skipped {
            error: text("error_text").unwrap_or_default(),
        },
        other => return Err(corrupt(format!("unknown state {other:?}"))),
    };
    let data_files: Vec<String> =
        serde_json::from_str(&text("data_files")?).map_err(|e| corrupt(e.to_string()))?;
    let dead_letters = DeadLetters::from_stored(text("dead_letters").ok().as_deref(), &segment)?;
    let members = RunMember::from_stored(text("members").ok().as_deref(), &segment)?;
    Ok(LedgerEntry {
        dead_letters,
        members,
        etag: text("etag")?,
        table: text("table_name")?,
        topic: text("topic")?,
        partition: number::<i32>(item, "partition_id")
            .ok_or_else(|| corrupt("missing partition_id".into()))?,
        base_offset: num("base_offset")?,
        last_offset: num("last_offset")?,
        records: num("record_count")? as u64,
        bytes: num("byte_count")? as u64,
        data_files,
        state,
        created_ms: num("created_ms")?,
        updated_ms: num("updated_ms")?,
        segment: segment.clone(),
    })
}

impl DynamoLedger {
    /// A ledger on `table` through `client`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    /// Reads items by key with consistent reads, 100 at a time; items that cannot be
    /// read are noted in the listing.
    async fn consistent_get_many(&self, keys: Vec<String>) -> Result<Listing, LedgerError> {
        let mut out = Listing::default();
        for chunk in keys.chunks(100) {
            let mut pending: Vec<Item> = chunk
                .iter()
                .map(|k| Item::from([("segment_key".to_owned(), s(k))]))
                .collect();
            let mut rounds = 0;
            while !pending.is_empty() {
                rounds += 1;
                if rounds > 20 {
                    return Err(LedgerError::Store {
                        message: "BatchGetItem kept returning unprocessed keys".into(),
                        kind: ErrorKind::Transient,
                    });
                }
                let request = KeysAndAttributes::builder()
                    .set_keys(Some(std::mem::take(&mut pending)))
                    .consistent_read(true)
                    .build()
                    .map_err(|e| LedgerError::Store {
                        message: e.to_string(),
                        kind: ErrorKind::Config,
                    })?;
                let response = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, request)
                    .send()
                    .await
                    .map_err(store_error)?;
                if let Some(items) = response.responses().and_then(|r| r.get(&self.table)) {
                    for item in items {
                        out.note(from_item(item))?;
                    }
                }
                if let Some(left) = response.unprocessed_keys().and_then(|u| u.get(&self.table)) {
                    pending = left.keys().to_vec();
                }
            }
        }
        Ok(out)
    }

    /// The work index's keys under `work_key`, in partition and offset order.
    async fn work_index(&self, work_key: &str) -> Result<Vec<WorkKey>, LedgerError> {
        let mut keys = Vec::new();
        let mut start = None;
        loop {
            let response = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(WORK_INDEX)
                .key_condition_expression("#w = :w")
                .expression_attribute_names("#w", "work_key")
                .expression_attribute_values(":w", s(work_key))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(store_error)?;
            for item in response.items() {
                let Some(segment) = item.get("segment_key").and_then(|v| v.as_s().ok()) else {
                    continue;
                };
                let order = item.get("work_order").and_then(|v| v.as_s().ok());
                let place = order.and_then(|order| {
                    let (partition, base) = order.split_once('#')?;
                    Some((partition.parse().ok()?, base.parse().ok()?))
                });
                let Some((partition, base_offset)) = place else {
                    return Err(LedgerError::Corrupt {
                        segment: segment.clone(),
                        reason: format!("work_order {order:?} is not <partition>#<base offset>"),
                    });
                };
                keys.push(WorkKey {
                    segment: segment.clone(),
                    partition,
                    base_offset,
                });
            }
            start = response.last_evaluated_key().cloned();
            if start.is_none() {
                return Ok(keys);
            }
        }
    }

    /// Every item of the table or of the work index, by a paginated scan.
    async fn scan_items(&self, index: Option<&str>) -> Result<Vec<Item>, LedgerError> {
        let mut items = Vec::new();
        let mut start = None;
        loop {
            let response = self
                .client
                .scan()
                .table_name(&self.table)
                .set_index_name(index.map(str::to_owned))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(store_error)?;
            items.extend(response.items().iter().cloned());
            start = response.last_evaluated_key().cloned();
            if start.is_none() {
                return Ok(items);
            }
        }
    }
}

impl Ledger for DynamoLedger {
    fn identity(&self) -> String {
        format!("dynamodb:{}", self.table)
    }

    async fn get(&self, segment: &str) -> Result<Option<LedgerEntry>, LedgerError> {
        let response = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("segment_key", s(segment))
            .consistent_read(true)
            .send()
            .await
            .map_err(store_error)?;
        response.item().map(from_item).transpose()
    }

    async fn insert(&self, entry: &LedgerEntry) -> Result<InsertOutcome, LedgerError> {
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(to_item(entry)?))
            .condition_expression("attribute_not_exists(#k)")
            .expression_attribute_names("#k", "segment_key")
            .send()
            .await;
        if applied(result)? {
            Ok(InsertOutcome::Inserted)
        } else {
            existing_entry(self, &entry.segment).await
        }
    }

    async fn work_keys(&self, state: &str, table: &str) -> Result<Vec<WorkKey>, LedgerError> {
        self.work_index(&format!("{state}#{table}")).await
    }

    async fn get_many(&self, segments: &[String]) -> Result<Listing, LedgerError> {
        let mut listing = self.consistent_get_many(segments.to_vec()).await?;
        sort_entries(&mut listing.entries);
        Ok(listing)
    }

    async fn scan(&self, state: Option<&str>, table: Option<&str>) -> Result<Listing, LedgerError> {
        let keys: Vec<String> = match (state, table) {
            (Some(state @ ("pending" | "quarantined" | "skipped")), Some(table)) => self
                .work_index(&format!("{state}#{table}"))
                .await?
                .into_iter()
                .map(|k| k.segment)
                .collect(),
            (Some(state @ ("pending" | "quarantined" | "skipped")), None) => {
                let prefix = format!("{state}#");
                self.scan_items(Some(WORK_INDEX))
                    .await?
                    .iter()
                    .filter(|i| {
                        i.get("work_key")
                            .and_then(|v| v.as_s().ok())
                            .is_some_and(|w| w.starts_with(&prefix))
                    })
                    .filter_map(|i| i.get("segment_key")?.as_s().ok().cloned())
                    .collect()
            }
            _ => {
                let mut listing = Listing::default();
                for item in self.scan_items(None).await? {
                    let attempt = item
                        .get("segment_key")
                        .and_then(|v| v.as_s().ok())
                        .is_some_and(|k| k.starts_with(ATTEMPT_PREFIX));
                    if !attempt {
                        listing.note(from_item(&item))?;
                    }
                }
                listing.entries.retain(|e| {
                    state.is_none_or(|s| e.state.name() == s) && table.is_none_or(|t| e.table == t)
                });
                sort_entries(&mut listing.entries);
                return Ok(listing);
            }
        };
        // The index is eventually consistent: act only on what the base table says now.
        let mut listing = self.consistent_get_many(keys).await?;
        listing.entries.retain(|e| {
            state.is_none_or(|s| e.state.name() == s) && table.is_none_or(|t| e.table == t)
        });
        sort_entries(&mut listing.entries);
        Ok(listing)
    }

    async fn begin_attempt(&self, segment: &str, now_ms: i64) -> Result<Attempts, LedgerError> {
        let response = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("segment_key", s(&format!("{ATTEMPT_PREFIX}{segment}")))
            .update_expression("ADD started :one SET last_ms = :now")
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":now", n(now_ms))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
            .send()
            .await
            .map_err(store_error)?;
        // The item as it was: none before the first attempt.
        let number = |name: &str| {
            response
                .attributes()
                .and_then(|a| a.get(name))
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse::<i64>().ok())
        };
        Ok(Attempts {
            unfinished: number("started").map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX)),
            last_began_ms: number("last_ms"),
        })
    }

    async fn end_attempt(&self, segment: &str) -> Result<(), LedgerError> {
        self.client
            .delete_item()
            .table_name(&self.table)
            .key("segment_key", s(&format!("{ATTEMPT_PREFIX}{segment}")))
            .send()
            .await
            .map_err(store_error)?;
        Ok(())
    }

    async fn mark_committed(
        &self,
        entries: &[&LedgerEntry],
        snapshot_id: i64,
        now_ms: i64,
    ) -> Result<usize, LedgerError> {
        let mut moved = 0;
        for entry in entries {
            let result = self
                .client
                .update_item()
                .table_name(&self.table)
                .key("segment_key", s(&entry.segment))
                // The data file descriptions are in the table now: dropped, so that
                // committed items stay small.
                .update_expression("SET #s = :committed, snapshot_id = :snapshot, updated_ms = :now, data_files = :none REMOVE work_key, work_order")
                .expression_attribute_values(":none", s("[]"))
                // Only the conversion committed (its own data files), not one made
                // again under the same key since.
                .condition_expression("#s = :pending AND data_files = :files")
                .expression_attribute_values(":files", s(&entry.stored_data_files()?))
                .expression_attribute_names("#s", "entry_state")
                .expression_attribute_values(":committed", s("committed"))
                .expression_attribute_values(":pending", s("pending"))
                .expression_attribute_values(":snapshot", n(snapshot_id))
                .expression_attribute_values(":now", n(now_ms))
                .send()
                .await;
            if applied(result)? {
                moved += 1;
            }
        }
        Ok(moved)
    }

    async fn remove_in_state(&self, segment: &str, state: &str) -> Result<bool, LedgerError> {
        let result = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key("segment_key", s(segment))
            .condition_expression("#s = :state")
            .expression_attribute_names("#s", "entry_state")
            .expression_attribute_values(":state", s(state))
            .send()
            .await;
        applied(result)
    }

    async fn skip_quarantined(&self, segment: &str, now_ms: i64) -> Result<bool, LedgerError> {
        // The work index key names the table, which the update cannot compute: read
        // it first; the condition still makes the move from quarantined only.
        let Some(entry) = self.get(segment).await? else {
            return Ok(false);
        };
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("segment_key", s(segment))
            .update_expression("SET #s = :skipped, work_key = :work, updated_ms = :now")
            .condition_expression("#s = :quarantined")
            .expression_attribute_names("#s", "entry_state")
            .expression_attribute_values(":skipped", s("skipped"))
            .expression_attribute_values(":quarantined", s("quarantined"))
            .expression_attribute_values(":work", s(&format!("skipped#{}", entry.table)))
            .expression_attribute_values(":now", n(now_ms))
            .send()
            .await;
        applied(result)
    }
}

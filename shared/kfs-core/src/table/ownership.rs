//! Which feed (a KafScale namespace and topic) a table belongs to: recorded in its
//! properties, checked before anything is appended to, compacted in, expired from or
//! cleaned out of it. A table belongs to exactly one feed: a second feed that maps to
//! it (two topics that sanitize alike, a many-to-one mapping, one topic under two
//! namespaces) is refused with both named, and only the newcomer waits; a table that
//! kfs-iceberg did not create is never written.

use crate::table::TOPIC_PROPERTY;
use iceberg::table::Table;
use iceberg::{TableRequirement, TableUpdate};
use kfs_catalog::catalog::TableSwap;
use std::collections::HashMap;

/// Table property recording the KafScale namespace of the table's topic, set when the
/// table is created. Tables created before it existed have none: any namespace's
/// topic of that name feeds them, as before.
pub const SOURCE_NAMESPACE_PROPERTY: &str = "kfs.source-namespace";

/// Table property recording the ledger that holds the table's pending files
/// ([`crate::ledger::Ledger::identity`]): orphan cleanup runs only where that ledger
/// is the one it reads.
pub const LEDGER_PROPERTY: &str = "kfs.ledger";

/// A feed: a topic of one KafScale namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Feed<'a> {
    /// The KafScale namespace (the first part of a segment's key).
    pub namespace: &'a str,
    /// The topic.
    pub topic: &'a str,
}

impl std::fmt::Display for Feed<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "topic {:?} of namespace {:?}",
            self.topic, self.namespace
        )
    }
}

/// A feed was refused a table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OwnershipError {
    /// The table was not created by kfs-iceberg.
    #[error(
        "table {table} has no {TOPIC_PROPERTY} property: kfs-iceberg did not create it and does not write, compact, expire or clean it; {feed} is held: map it to another table"
    )]
    Foreign {
        /// The table.
        table: String,
        /// The feed refused.
        feed: String,
    },
    /// The table's name is reserved for the dead-letter table of another.
    #[error(
        "table {table} ends in {}, the dead-letter tables' suffix; {feed} is held: map it to another table",
        kfs_plan::naming::DEAD_LETTER_SUFFIX
    )]
    Reserved {
        /// The table.
        table: String,
        /// The feed refused.
        feed: String,
    },
    /// Another feed owns the table.
    #[error(
        "table {table} belongs to topic {owner_topic:?} of namespace {owner_namespace}; {feed} maps to it too and is held (nothing of it is written): map one of the two topics to another table"
    )]
    Taken {
        /// The table.
        table: String,
        /// The owner's topic.
        owner_topic: String,
        /// The owner's namespace (`"(any)"` when the table records none yet).
        owner_namespace: String,
        /// The feed refused.
        feed: String,
    },
}

/// The table's owner as its properties record it: the topic, and the namespace when
/// recorded; `None` for a table kfs-iceberg did not create.
pub fn table_owner(table: &Table) -> Option<(String, Option<String>)> {
    let properties = table.metadata().properties();
    let topic = properties.get(TOPIC_PROPERTY)?.clone();
    Some((topic, properties.get(SOURCE_NAMESPACE_PROPERTY).cloned()))
}

/// Whether `feed` may write `table`: the topic matches and the namespace recorded
/// (if any: tables from before namespaces were recorded have none) too; or why not.
fn check_owner(table: &Table, feed: Feed<'_>) -> Result<(), OwnershipError> {
    let name = table.identifier().to_string();
    let Some((topic, namespace)) = table_owner(table) else {
        return Err(OwnershipError::Foreign {
            table: name,
            feed: feed.to_string(),
        });
    };
    let taken = |owner_namespace: String| OwnershipError::Taken {
        table: name.clone(),
        owner_topic: topic.clone(),
        owner_namespace,
        feed: feed.to_string(),
    };
    match namespace {
        _ if topic != feed.topic => Err(taken(
            namespace.map_or_else(|| "(any)".to_owned(), |ns| format!("{ns:?}")),
        )),
        Some(ns) if ns != feed.namespace => Err(taken(format!("{ns:?}"))),
        _ => Ok(()),
    }
}

/// Opens `table` for `feed`: checks the owner, and records `ledger`
/// ([`LEDGER_PROPERTY`]) on a table from before ledgers were recorded, best effort
/// (only orphan cleanup needs it, and refuses to run without it). The owner itself is
/// never claimed after creation: a property update cannot be made conditional on the
/// property's absence, so two feeds claiming at once could both believe they own the
/// table. Returns the table as it stands after the claim.
pub async fn claim_table(
    swap: &dyn TableSwap,
    table: Table,
    feed: Feed<'_>,
    ledger: &str,
) -> Result<Table, OwnershipError> {
    check_owner(&table, feed)?;
    if table.metadata().properties().contains_key(LEDGER_PROPERTY) {
        return Ok(table);
    }
    let updates = vec![TableUpdate::SetProperties {
        updates: HashMap::from([(LEDGER_PROPERTY.to_owned(), ledger.to_owned())]),
    }];
    let requirements = vec![TableRequirement::UuidMatch {
        uuid: table.metadata().uuid(),
    }];
    match swap.commit(&table, requirements, updates).await {
        Ok(claimed) => Ok(claimed),
        // Orphan cleanup refuses the table until a later open records it.
        Err(_) => Ok(table),
    }
}

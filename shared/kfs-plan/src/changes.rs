//! Changes of keyed records, the pure core of the `upsert` and `cdc` table modes: what
//! one record asks of the mirror (its key's row upserted, or deleted), read from a
//! keyed record (a null value is a tombstone) or from a Debezium envelope (`op`,
//! `before`, `after`, `source`), and how a batch of changes folds into the last change
//! per key: what a commit applies, and the reference fold tests compare readers with.
//!
//! Order. Changes of one partition apply in offset order (Kafka's own). Changes of one
//! key from different partitions (a producer that re-keyed or re-partitioned) apply in
//! the order of their source positions when both envelopes carry one of the same kind
//! (PostgreSQL's `lsn`, MySQL's binlog `file`, `pos` and `row`), else of their record
//! timestamps, else of partition and offset. A batch is folded in its canonical order
//! (partition, then offset), so every committer folds the same batch into the same
//! result. A mirror keeps each row's position in its `__source_position` column, in
//! the text form [`SourcePosition::text`] writes and [`SourcePosition::parse`] reads.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde_json::Value;

/// What a change does to its key's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action<V> {
    /// The key's row becomes this value (inserted, or replacing the current one).
    Upsert(V),
    /// The key's row is deleted (a tombstone, a Debezium delete).
    Delete,
}

/// Where a change stands in its source database's log, when its envelope says.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum SourcePosition {
    /// A PostgreSQL log sequence number.
    Lsn(u64),
    /// A MySQL binlog position: the file, the position in it, the row of the event.
    Binlog {
        /// The binlog file (names sort in log order).
        file: String,
        /// The event's position in the file.
        pos: u64,
        /// The row within the event.
        row: u64,
    },
}

/// One record's change of its key's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change<K, V> {
    /// The key (the record key, or the named key fields' values).
    pub key: K,
    /// What it does.
    pub action: Action<V>,
    /// The record's partition.
    pub partition: i32,
    /// The record's offset.
    pub offset: i64,
    /// The record's timestamp (ms).
    pub timestamp_ms: i64,
    /// Its source position, when its envelope has one.
    pub source: Option<SourcePosition>,
}

impl SourcePosition {
    /// The position's text, as a mirror's `__source_position` column holds it:
    /// `lsn:<lsn>`, or `binlog:<file>:<pos>:<row>`.
    pub fn text(&self) -> String {
        match self {
            Self::Lsn(lsn) => format!("lsn:{lsn}"),
            Self::Binlog { file, pos, row } => format!("binlog:{file}:{pos}:{row}"),
        }
    }

    /// The position [`Self::text`] wrote; `Err` says why `text` is none (the file of a
    /// binlog position may hold any character: its numbers are read from the end).
    pub fn parse(text: &str) -> Result<Self, String> {
        let number = |digits: &str| {
            digits
                .parse::<u64>()
                .map_err(|_| format!("source position {text:?}: {digits:?} is no number"))
        };
        if let Some(lsn) = text.strip_prefix("lsn:") {
            return Ok(Self::Lsn(number(lsn)?));
        }
        let binlog = text
            .strip_prefix("binlog:")
            .ok_or_else(|| format!("source position {text:?}: neither lsn: nor binlog:"))?;
        let mut parts = binlog.rsplitn(3, ':');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(row), Some(pos), Some(file)) => Ok(Self::Binlog {
                file: file.to_owned(),
                pos: number(pos)?,
                row: number(row)?,
            }),
            _ => Err(format!(
                "source position {text:?}: a binlog position is file:pos:row"
            )),
        }
    }

    /// The order of two positions of the same kind (two log sequence numbers, two
    /// binlog positions); `None` for positions of different databases' kinds, which
    /// tell nothing of each other's order.
    pub fn order(&self, other: &Self) -> Option<Ordering> {
        match (self, other) {
            (Self::Lsn(_), Self::Lsn(_)) | (Self::Binlog { .. }, Self::Binlog { .. }) => {
                Some(self.cmp(other))
            }
            _ => None,
        }
    }
}

impl<K, V> Change<K, V> {
    /// Whether `self` applies after `earlier`, a change of the same key (see the
    /// module's order).
    pub fn supersedes(&self, earlier: &Self) -> bool {
        if self.partition == earlier.partition {
            return self.offset > earlier.offset;
        }
        let by_source = match (&self.source, &earlier.source) {
            (Some(a), Some(b)) => a.order(b).unwrap_or(Ordering::Equal),
            _ => Ordering::Equal,
        };
        by_source
            .then(self.timestamp_ms.cmp(&earlier.timestamp_ms))
            .then((self.partition, self.offset).cmp(&(earlier.partition, earlier.offset)))
            == Ordering::Greater
    }
}

/// The last change of each key among `changes`, folded in their canonical order
/// (partition, then offset): the mirror's rows after applying them, a `Delete` for
/// each key whose last change deletes it. A change without a source position stands
/// where its partition's previous change of the key stood (Debezium's tombstone, a
/// null value after a delete event, takes its delete's position), and comes out of the
/// fold with that position.
pub fn fold<K: Ord + Clone, V>(
    changes: impl IntoIterator<Item = Change<K, V>>,
) -> BTreeMap<K, Change<K, V>> {
    let mut ordered: Vec<Change<K, V>> = changes.into_iter().collect();
    ordered.sort_by_key(|c| (c.partition, c.offset));
    let mut last: BTreeMap<K, Change<K, V>> = BTreeMap::new();
    let mut positions: BTreeMap<(i32, K), SourcePosition> = BTreeMap::new();
    for mut change in ordered {
        let previous = (change.partition, change.key.clone());
        match &change.source {
            Some(source) => {
                positions.insert(previous, source.clone());
            }
            None => change.source = positions.get(&previous).cloned(),
        }
        match last.get(&change.key) {
            Some(current) if !change.supersedes(current) => {}
            _ => {
                last.insert(change.key.clone(), change);
            }
        }
    }
    last
}

/// A Debezium event's operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// `c`: a row created.
    Create,
    /// `u`: a row updated.
    Update,
    /// `d`: a row deleted.
    Delete,
    /// `r`: a row read by a snapshot.
    Read,
    /// `t`: a table truncated.
    Truncate,
    /// `m`: a logical-decoding message (no row).
    Message,
}

/// A Debezium change event, as its value envelope says; `R` is a row as the
/// envelope's format has it (a JSON object, an Avro record).
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope<R = Value> {
    /// The operation.
    pub op: Operation,
    /// The row before (null for creates and reads; complete only with full replica
    /// identity).
    pub before: Option<R>,
    /// The row after (null for deletes).
    pub after: Option<R>,
    /// The source position, when `source` has one.
    pub source: Option<SourcePosition>,
}

impl Operation {
    /// The operation Debezium's `op` code names.
    pub fn of_code(code: &str) -> Result<Self, String> {
        Ok(match code {
            "c" => Operation::Create,
            "u" => Operation::Update,
            "d" => Operation::Delete,
            "r" => Operation::Read,
            "t" => Operation::Truncate,
            "m" => Operation::Message,
            other => return Err(format!("unknown Debezium op {other:?}")),
        })
    }
}

/// What a reader of Debezium envelopes in one format (JSON, Avro, Protobuf) tells of
/// a decoded envelope; [`read_envelope`] makes the envelope of it, the same way for
/// every format.
pub trait EnvelopeFields {
    /// A row as the format has it.
    type Row;
    /// The `op` code; `Ok(None)` when there is none, `Err` when it is no string.
    fn op(&self) -> Result<Option<String>, String>;
    /// The image `name` (`before`, `after`): `Ok(None)` when null or unset, `Err` when
    /// it is no row.
    fn image(&self, name: &str) -> Result<Option<Self::Row>, String>;
    /// A non-negative integer field `name` of the `source` block.
    fn source_number(&self, name: &str) -> Option<u64>;
    /// A string field `name` of the `source` block.
    fn source_text(&self, name: &str) -> Option<String>;
}

/// The envelope `fields` describe: its operation, images and source position
/// (PostgreSQL's `lsn`, or MySQL's binlog `file` and `pos`, and `row`, 0 when absent).
pub fn read_envelope<F: EnvelopeFields>(fields: &F) -> Result<Envelope<F::Row>, String> {
    let op = match fields.op()? {
        Some(code) => Operation::of_code(&code)?,
        None => return Err("no \"op\": not a Debezium envelope".into()),
    };
    let source = match fields.source_number("lsn") {
        Some(lsn) => Some(SourcePosition::Lsn(lsn)),
        None => fields
            .source_text("file")
            .zip(fields.source_number("pos"))
            .map(|(file, pos)| SourcePosition::Binlog {
                file,
                pos,
                row: fields.source_number("row").unwrap_or(0),
            }),
    };
    Ok(Envelope {
        op,
        before: fields.image("before")?,
        after: fields.image("after")?,
        source,
    })
}

impl<R: Clone> Envelope<R> {
    /// What the event does to its key's row: creates, updates and snapshot reads
    /// upsert the `after` image; deletes delete; `None` for messages (no row).
    /// Truncates and an upsert without an `after` image are refused (the reason): a
    /// mirror cannot apply them row by row.
    pub fn action(&self) -> Result<Option<Action<R>>, String> {
        match self.op {
            Operation::Create | Operation::Update | Operation::Read => match &self.after {
                Some(after) => Ok(Some(Action::Upsert(after.clone()))),
                None => Err(format!("a {:?} event without an after image", self.op)),
            },
            Operation::Delete => Ok(Some(Action::Delete)),
            Operation::Message => Ok(None),
            Operation::Truncate => {
                Err("a truncate event: the mirror cannot apply it row by row".into())
            }
        }
    }

    /// What the event does to its key's row, as a mirror applies it: [`Self::action`],
    /// with a message event (no row) refused too, for the dead-letter table.
    pub fn row_action(&self) -> Result<Action<R>, String> {
        self.action()?
            .ok_or_else(|| "a Debezium message event (op m) changes no row".to_owned())
    }
}

/// What a change event leaves its key with: the row, and where the event stands in
/// its source database's log.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangedRow<C> {
    /// The row made from its `after` image; `None`: the event deletes the key.
    pub row: Option<C>,
    /// The envelope's source position, when it has one.
    pub source: Option<SourcePosition>,
}

/// The row a change event leaves its key with, made by `row` from its `after` image
/// (`None`: the event deletes the key), with its source position, whatever the format
/// `read` the envelope from; a value that is no envelope, a message or a truncate
/// event is refused with the reason ([`Envelope::row_action`]).
pub fn row_after<R: Clone, C>(
    read: Result<Envelope<R>, String>,
    row: impl FnOnce(R) -> Result<C, String>,
) -> Result<ChangedRow<C>, String> {
    let envelope = read.map_err(|e| format!("value is no Debezium change event: {e}"))?;
    let row = match envelope.row_action()? {
        Action::Upsert(after) => Some(row(after)?),
        Action::Delete => None,
    };
    Ok(ChangedRow {
        row,
        source: envelope.source,
    })
}

/// Reads a Debezium value envelope (as the JSON converter writes it, with or without
/// its `schema`/`payload` wrapper); `Err` says why it is none.
pub fn envelope(value: &Value) -> Result<Envelope, String> {
    let payload = match (value.get("schema"), value.get("payload")) {
        (Some(_), Some(payload)) => payload,
        _ => value,
    };
    let object = payload
        .as_object()
        .ok_or("a Debezium envelope is a JSON object")?;
    read_envelope(&JsonEnvelope(object))
}

/// A Debezium envelope in JSON.
struct JsonEnvelope<'a>(&'a serde_json::Map<String, Value>);

impl JsonEnvelope<'_> {
    fn source(&self, name: &str) -> Option<&Value> {
        self.0.get("source").and_then(|source| source.get(name))
    }
}

impl EnvelopeFields for JsonEnvelope<'_> {
    type Row = Value;

    fn op(&self) -> Result<Option<String>, String> {
        match self.0.get("op") {
            None => Ok(None),
            Some(Value::String(code)) => Ok(Some(code.clone())),
            Some(other) => Err(format!("\"op\" is {other}, not a string")),
        }
    }

    fn image(&self, name: &str) -> Result<Option<Value>, String> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(row @ Value::Object(_)) => Ok(Some(row.clone())),
            Some(other) => Err(format!("\"{name}\" is {other}, not a row")),
        }
    }

    fn source_number(&self, name: &str) -> Option<u64> {
        self.source(name).and_then(Value::as_u64)
    }

    fn source_text(&self, name: &str) -> Option<String> {
        self.source(name).and_then(Value::as_str).map(str::to_owned)
    }
}

#[cfg(test)]
#[path = "changes_tests.rs"]
mod tests;

//! Where each decoded record goes: a row of the table (raw bytes, or JSON fields in
//! payload columns) or a row of the dead-letter table with the reason.

use super::{ConvertError, ROWS_PER_BATCH, RecordColumns};
use crate::table::arrow_schema;
use arrow_array::builder::StringBuilder;
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::SchemaRef;
use iceberg::table::Table;
use kfs_segment::Record;
use std::sync::Arc;

/// How many bytes a parsed JSON value takes per byte of its text (maps, strings and
/// numbers as `serde_json` holds them), for the flush bound.
const PARSED_JSON_FACTOR: usize = 4;

/// A batch of rows the decoding thread hands the writers.
pub(crate) enum Routed {
    /// Rows of the table.
    Table(RecordBatch),
    /// Rows of the dead-letter table.
    DeadLetters(RecordBatch),
}

/// What the decoding thread sends the writers.
pub(crate) type DecodedBatch = Result<Routed, ConvertError>;

/// Why a record could not be routed.
#[derive(Debug)]
pub(crate) enum PushError {
    /// It can go nowhere (the reason).
    Unrepresentable(String),
    /// Reading what it refers to (a large-file blob) failed: the store's error.
    Source(crate::source::SourceError),
}

impl From<String> for PushError {
    fn from(reason: String) -> Self {
        Self::Unrepresentable(reason)
    }
}

/// How records become rows, on the decoding thread.
pub(crate) trait RecordRouter: Send {
    /// Takes one record; fails when it can go nowhere, or what it refers to cannot be
    /// read.
    fn push(&mut self, topic: &str, partition: i32, record: &Record<'_>) -> Result<(), PushError>;
    /// Routes the records it holds back (blobs being fetched), before a flush.
    fn settle(&mut self) -> Result<(), PushError> {
        Ok(())
    }
    /// Records left out by configuration (claim checks in LFS mode `skip`) so far.
    fn skipped(&self) -> u64 {
        0
    }
    /// Rows buffered.
    fn rows(&self) -> usize;
    /// Bytes buffered (an estimate).
    fn bytes(&self) -> usize;
    /// The buffered rows as batches; the buffers start over.
    fn flush(&mut self) -> iceberg::Result<Vec<Routed>>;
    /// Records routed to the dead-letter table so far.
    fn dead_letters(&self) -> u64;
}

/// Raw values: every record is a row of the table.
pub(crate) struct RawRouter(pub(crate) RecordColumns);

impl RecordRouter for RawRouter {
    fn push(&mut self, topic: &str, partition: i32, record: &Record<'_>) -> Result<(), PushError> {
        Ok(self.0.push(topic, partition, record)?)
    }
    fn rows(&self) -> usize {
        self.0.rows()
    }
    fn bytes(&self) -> usize {
        self.0.bytes()
    }
    fn flush(&mut self) -> iceberg::Result<Vec<Routed>> {
        Ok(if self.0.rows() == 0 {
            Vec::new()
        } else {
            vec![Routed::Table(self.0.finish()?)]
        })
    }
    fn dead_letters(&self) -> u64 {
        0
    }
}

/// JSON values: a record whose value fits the table's schema is a row of the table
/// (its fields in the payload columns); any other is a row of the dead-letter table,
/// with the reason.
pub(crate) struct JsonRouter {
    schema: iceberg::spec::Schema,
    reading: super::JsonReading,
    payload: SchemaRef,
    out: RoutedRows,
    values: Vec<serde_json::Map<String, serde_json::Value>>,
    /// Bytes of the parsed values buffered (an estimate: parsed JSON takes several
    /// times its text).
    value_bytes: usize,
}

/// The rows a router builds: the table's record columns and, when the dead-letter
/// table is opened, its rows; what every router counts, refuses and flushes alike.
pub(crate) struct RoutedRows {
    /// The table's record columns (a router builds the columns after them).
    pub(crate) table: RecordColumns,
    dead: Option<DeadLetterColumns>,
}

impl RoutedRows {
    /// Rows of `table` (record columns of `schema`), refused records to `dead_letters`
    /// (when opened) with `segment` named.
    pub(crate) fn new(
        schema: SchemaRef,
        dead_letters: Option<&Table>,
        segment: String,
    ) -> iceberg::Result<Self> {
        Ok(Self {
            table: RecordColumns::new(schema)?,
            dead: dead_letters
                .map(|dlq| DeadLetterColumns::new(dlq, segment))
                .transpose()?,
        })
    }

    /// Sends `record` to the dead-letter rows, refused for `reason`; with no
    /// dead-letter table opened, the record can go nowhere (the reason says why).
    pub(crate) fn refuse(
        &mut self,
        (topic, partition): (&str, i32),
        record: &Record<'_>,
        reason: &str,
    ) -> Result<(), PushError> {
        let Some(dead) = &mut self.dead else {
            return Err(format!("{reason}, and no dead-letter table was opened").into());
        };
        Ok(dead.push(topic, partition, record, reason)?)
    }

    /// Rows buffered, `waiting` more besides (records a router holds back).
    pub(crate) fn rows(&self, waiting: usize) -> usize {
        self.table.rows() + waiting + self.dead.as_ref().map_or(0, DeadLetterColumns::rows)
    }

    /// Bytes buffered (an estimate), `values` more besides (what a router holds of
    /// the values).
    pub(crate) fn bytes(&self, values: usize) -> usize {
        self.table.bytes() + values + self.dead.as_ref().map_or(0, DeadLetterColumns::bytes)
    }

    /// Records refused so far.
    pub(crate) fn dead_letters(&self) -> u64 {
        self.dead.as_ref().map_or(0, DeadLetterColumns::count)
    }

    /// The batches the buffers hold, and they start over: the table's rows (their
    /// columns beyond the record columns built by `payload`, called only when there
    /// are rows), then the dead letters.
    pub(crate) fn flush(
        &mut self,
        payload: impl FnOnce() -> iceberg::Result<Vec<ArrayRef>>,
    ) -> iceberg::Result<Vec<Routed>> {
        let mut routed = Vec::new();
        if self.table.rows() > 0 {
            let payload = payload()?;
            routed.push(Routed::Table(self.table.finish_with(payload)?));
        }
        if let Some(dead) = &mut self.dead {
            routed.extend(dead.finish()?);
        }
        Ok(routed)
    }
}

/// The rows of a dead-letter batch being built: each record as it came, with the
/// reason and the segment it was read from.
pub(crate) struct DeadLetterColumns {
    record: RecordColumns,
    errors: StringBuilder,
    segments: StringBuilder,
    segment: String,
    count: u64,
}

impl DeadLetterColumns {
    /// Builders for `dlq`'s rows of records read from `segment`.
    pub(crate) fn new(dlq: &Table, segment: String) -> iceberg::Result<Self> {
        Ok(Self {
            record: RecordColumns::new(arrow_schema(dlq.metadata().current_schema())?)?,
            errors: StringBuilder::new(),
            segments: StringBuilder::new(),
            segment,
            count: 0,
        })
    }

    /// Appends `record`, refused for `reason`.
    pub(crate) fn push(
        &mut self,
        topic: &str,
        partition: i32,
        record: &Record<'_>,
        reason: &str,
    ) -> Result<(), String> {
        self.record.push(topic, partition, record)?;
        self.errors.append_value(reason);
        self.segments.append_value(&self.segment);
        self.count += 1;
        Ok(())
    }

    /// Rows buffered.
    pub(crate) fn rows(&self) -> usize {
        self.record.rows()
    }

    /// Bytes buffered (an estimate).
    pub(crate) fn bytes(&self) -> usize {
        self.record.bytes()
    }

    /// Records refused so far.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    /// The buffered rows as a batch, if any; the builders start over.
    pub(crate) fn finish(&mut self) -> iceberg::Result<Option<Routed>> {
        if self.record.rows() == 0 {
            return Ok(None);
        }
        let reasons: Vec<ArrayRef> = vec![
            Arc::new(self.errors.finish()),
            Arc::new(self.segments.finish()),
        ];
        Ok(Some(Routed::DeadLetters(self.record.finish_with(reasons)?)))
    }
}

impl JsonRouter {
    pub(crate) fn new(
        table: &Table,
        dead_letters: Option<&Table>,
        segment: String,
    ) -> iceberg::Result<Self> {
        let schema = table.metadata().current_schema().as_ref().clone();
        let arrow = arrow_schema(&schema)?;
        let payload = Arc::new(arrow_schema::Schema::new(
            arrow
                .fields()
                .iter()
                .filter(|f| !crate::table::METADATA_COLUMNS.contains(&f.name().as_str()))
                .cloned()
                .collect::<Vec<_>>(),
        ));
        Ok(Self {
            reading: super::JsonReading::of(table),
            schema,
            payload,
            out: RoutedRows::new(arrow, dead_letters, segment)?,
            values: Vec::with_capacity(ROWS_PER_BATCH),
            value_bytes: 0,
        })
    }
}

impl RecordRouter for JsonRouter {
    fn push(&mut self, topic: &str, partition: i32, record: &Record<'_>) -> Result<(), PushError> {
        let parsed = self.reading.fields(record).and_then(|(value, change)| {
            let value = if self.reading.declared {
                kfs_values::json::project(&value, self.schema.as_struct().fields())
            } else {
                value
            };
            kfs_values::json::fits(&self.schema, &value)?;
            let value = kfs_values::json::conform(value, self.schema.as_struct().fields());
            Ok((value, change))
        });
        match parsed {
            Ok((value, change)) => {
                match change {
                    // A change event's row holds its `after` image, not the envelope.
                    Some(change) => {
                        let changed = Record {
                            value: change.image.as_deref(),
                            ..record.clone()
                        };
                        let source = change.source.as_ref();
                        self.out
                            .table
                            .push_change(topic, partition, &changed, source)?;
                    }
                    None => self.out.table.push(topic, partition, record)?,
                }
                self.values.push(value);
                self.value_bytes += PARSED_JSON_FACTOR * record.value.map_or(0, <[u8]>::len);
            }
            Err(rejection) => {
                self.out.refuse((topic, partition), record, &rejection.0)?;
            }
        }
        Ok(())
    }

    fn rows(&self) -> usize {
        self.out.rows(0)
    }

    fn bytes(&self) -> usize {
        self.out.bytes(self.value_bytes)
    }

    fn flush(&mut self) -> iceberg::Result<Vec<Routed>> {
        self.out.flush(|| {
            let values = std::mem::take(&mut self.values);
            self.value_bytes = 0;
            Ok(kfs_values::json::payload_columns(&self.payload, &values)?)
        })
    }

    fn dead_letters(&self) -> u64 {
        self.out.dead_letters()
    }
}

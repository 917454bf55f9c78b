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

/// How records become rows, on the decoding thread.
pub(crate) trait RecordRouter: Send {
    /// Takes one record; fails (with the reason) when it can go nowhere.
    fn push(&mut self, topic: &str, partition: i32, record: &Record<'_>) -> Result<(), String>;
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
    fn push(&mut self, topic: &str, partition: i32, record: &Record<'_>) -> Result<(), String> {
        self.0.push(topic, partition, record)
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
    declared: bool,
    payload: SchemaRef,
    table: RecordColumns,
    values: Vec<serde_json::Map<String, serde_json::Value>>,
    /// Bytes of the parsed values buffered (an estimate: parsed JSON takes several
    /// times its text).
    value_bytes: usize,
    dead: Option<DeadLetterColumns>,
    segment: String,
    dead_count: u64,
}

/// The rows of a dead-letter batch being built.
struct DeadLetterColumns {
    record: RecordColumns,
    errors: StringBuilder,
    segments: StringBuilder,
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
        let dead = dead_letters
            .map(|dlq| -> iceberg::Result<_> {
                Ok(DeadLetterColumns {
                    record: RecordColumns::new(arrow_schema(dlq.metadata().current_schema())?)?,
                    errors: StringBuilder::new(),
                    segments: StringBuilder::new(),
                })
            })
            .transpose()?;
        Ok(Self {
            declared: crate::table::declared_columns(table),
            schema,
            payload,
            table: RecordColumns::new(arrow)?,
            values: Vec::with_capacity(ROWS_PER_BATCH),
            value_bytes: 0,
            dead,
            segment,
            dead_count: 0,
        })
    }
}

impl RecordRouter for JsonRouter {
    fn push(&mut self, topic: &str, partition: i32, record: &Record<'_>) -> Result<(), String> {
        let parsed = crate::convert::json::parse_value(record.value).and_then(|value| {
            let value = if self.declared {
                crate::convert::json::project(&value, self.schema.as_struct().fields())
            } else {
                value
            };
            crate::convert::json::fits(&self.schema, &value)?;
            Ok(crate::convert::json::conform(
                value,
                self.schema.as_struct().fields(),
            ))
        });
        match parsed {
            Ok(value) => {
                self.table.push(topic, partition, record)?;
                self.values.push(value);
                self.value_bytes += PARSED_JSON_FACTOR * record.value.map_or(0, <[u8]>::len);
            }
            Err(rejection) => {
                let Some(dead) = &mut self.dead else {
                    return Err(format!("{rejection}, and no dead-letter table was opened"));
                };
                dead.record.push(topic, partition, record)?;
                dead.errors.append_value(&rejection.0);
                dead.segments.append_value(&self.segment);
                self.dead_count += 1;
            }
        }
        Ok(())
    }

    fn rows(&self) -> usize {
        self.table.rows() + self.dead.as_ref().map_or(0, |d| d.record.rows())
    }

    fn bytes(&self) -> usize {
        self.table.bytes() + self.value_bytes + self.dead.as_ref().map_or(0, |d| d.record.bytes())
    }

    fn flush(&mut self) -> iceberg::Result<Vec<Routed>> {
        let mut routed = Vec::new();
        if self.table.rows() > 0 {
            let values = std::mem::take(&mut self.values);
            self.value_bytes = 0;
            let payload = crate::convert::json::payload_columns(&self.payload, &values)?;
            routed.push(Routed::Table(self.table.finish_with(payload)?));
        }
        if let Some(dead) = &mut self.dead
            && dead.record.rows() > 0
        {
            let reasons: Vec<ArrayRef> = vec![
                Arc::new(dead.errors.finish()),
                Arc::new(dead.segments.finish()),
            ];
            routed.push(Routed::DeadLetters(dead.record.finish_with(reasons)?));
        }
        Ok(routed)
    }

    fn dead_letters(&self) -> u64 {
        self.dead_count
    }
}

//! Registry-encoded values as table rows (`--value-format registry`): each value's
//! framing names its writer schema ([`WriterSchemas`], resolved before the
//! segment is converted); a value that decodes becomes a row of the table's payload
//! columns, any other record a dead letter with the reason (no framing, an unknown
//! schema id, a schema the table cannot absorb, a payload that does not decode, a
//! delete naming no key of a mirror keyed by fields).

use super::route::{PushError, RecordRouter, Routed, RoutedRows};
use crate::table::arrow_schema;
use arrow_array::ArrayRef;
use arrow_schema::{DataType, Fields};
use iceberg::table::Table;
use kfs_plan::changes::ChangedRow;
use kfs_segment::Record;
use kfs_values::ROWS_PER_BATCH;
use kfs_values::cells::{Cell, column};
use kfs_values::writer_schema::{WriterSchemas, decode_framed, decode_framed_change, row_column};

/// Registry-encoded values (and keys): rows of the payload columns, or dead letters.
pub(crate) struct RegistryRouter {
    out: RoutedRows,
    payload: Fields,
    payload_type: DataType,
    rows: Vec<Cell>,
    value_bytes: usize,
    writers: WriterSchemas,
    /// The writer schemas of keys, when keys are decoded.
    key_writers: Option<WriterSchemas>,
    /// The table's `key_fields` column, when keys are decoded: its type, and a cell
    /// per row.
    key_column: Option<(DataType, Vec<Cell>)>,
    /// The columns besides the record's, in the table's order: a payload column (by
    /// its index in `payload`), or `None` for `key_fields`.
    order: Vec<Option<usize>>,
    /// The values are Debezium change events (a `cdc` table): a row is the `after`
    /// image, and a delete's row is null with a null `value`, the tombstone.
    changes: bool,
    /// The mirror's key fields, when it is keyed by value fields: a delete naming no
    /// key is a dead letter.
    delete_keys: Option<crate::mirror::DeleteKeys>,
}

impl RegistryRouter {
    pub(crate) fn new(
        table: &Table,
        (writers, key_writers): (WriterSchemas, Option<WriterSchemas>),
        dead_letters: Option<&Table>,
        segment: String,
    ) -> iceberg::Result<Self> {
        let arrow = arrow_schema(table.metadata().current_schema())?;
        let keys = key_writers.is_some();
        let mut payload = Vec::new();
        let mut order = Vec::new();
        let mut key_column = None;
        for field in arrow.fields() {
            let name = field.name().as_str();
            if crate::table::METADATA_COLUMNS.contains(&name) {
                continue;
            }
            if keys && name == crate::table::KEY_FIELDS_COLUMN {
                key_column = Some((field.data_type().clone(), Vec::new()));
                order.push(None);
            } else {
                order.push(Some(payload.len()));
                payload.push(field.clone());
            }
        }
        let payload = Fields::from(payload);
        Ok(Self {
            order,
            payload_type: DataType::Struct(payload.clone()),
            payload,
            out: RoutedRows::new(arrow, dead_letters, segment)?,
            rows: Vec::with_capacity(ROWS_PER_BATCH),
            value_bytes: 0,
            writers,
            key_writers,
            key_column,
            changes: crate::table::reads_changes(table),
            delete_keys: crate::mirror::DeleteKeys::of(table),
        })
    }

    /// The row of `value` (with a change event's source position) and the bytes of its
    /// payload, or why it has none; no row for a tombstone (and a change event's
    /// delete).
    fn row(&self, value: Option<&[u8]>) -> Result<(ChangedRow<Cell>, usize), String> {
        let tombstone = ChangedRow {
            row: None,
            source: None,
        };
        match (value, self.changes) {
            (None, _) => Ok((tombstone, 0)),
            (Some(value), true) => decode_framed_change(&self.writers, value, &self.payload_type),
            (Some(value), false) => decode_framed(&self.writers, value, (&self.payload_type, true))
                .map(|(row, bytes)| {
                    let row = Some(row);
                    (ChangedRow { row, ..tombstone }, bytes)
                }),
        }
    }

    /// Why a delete whose record key is `key` (decoded: `decoded`) names no key of a
    /// mirror keyed by fields; `None` when it names one, or the mirror is keyed by the
    /// record key.
    fn unnamed_delete(&self, key: Option<&[u8]>, decoded: &Cell) -> Option<String> {
        let decoded_type = self
            .key_column
            .as_ref()
            .map(|(key_type, _)| (decoded, key_type));
        self.delete_keys.as_ref()?.unnamed(key, decoded_type)
    }

    /// The `key_fields` cell of `key` (null when keys are not decoded, or the key is
    /// null) and the bytes of its payload, or why the record has none.
    fn key_cell(&self, key: Option<&[u8]>) -> Result<(Cell, usize), String> {
        match (&self.key_writers, &self.key_column, key) {
            (Some(writers), Some((key_type, _)), Some(key)) => {
                decode_framed(writers, key, (key_type, false)).map_err(|e| format!("key: {e}"))
            }
            // A key with no column yet: its schema was refused (the writers say why).
            (Some(writers), None, Some(key)) => {
                let id = kfs_values::registry::frame(key)
                    .map_err(|e| format!("key: {e}"))?
                    .id;
                Err(match writers.get(&id) {
                    Some(Err(why)) => format!("key: {why}"),
                    _ => format!("key: schema {id}: the table has no key_fields column"),
                })
            }
            _ => Ok((Cell::Null, 0)),
        }
    }
}

impl RecordRouter for RegistryRouter {
    fn push(&mut self, topic: &str, partition: i32, record: &Record<'_>) -> Result<(), PushError> {
        match self
            .row(record.value)
            .and_then(|row| Ok((row, self.key_cell(record.key)?)))
        {
            Ok(((ChangedRow { row, source }, value_bytes), (key, key_bytes))) => {
                if row.is_none()
                    && let Some(reason) = self.unnamed_delete(record.key, &key)
                {
                    return self.out.refuse((topic, partition), record, &reason);
                }
                // A tombstone or a delete (no row): null payload columns and a null value.
                let written = Record {
                    value: row.is_some().then_some(record.value).flatten(),
                    ..record.clone()
                };
                self.out
                    .table
                    .push_change(topic, partition, &written, source.as_ref())?;
                self.rows.push(
                    row.unwrap_or_else(|| Cell::Struct(vec![Cell::Null; self.payload.len()])),
                );
                if let Some((_, keys)) = &mut self.key_column {
                    keys.push(key);
                }
                // Decoded values take a few times their payload's bytes (inflated: a
                // compressed Glue value counts as what it holds) and a few dozen per
                // item (`decode`), so a batch is flushed before they add up.
                self.value_bytes = self
                    .value_bytes
                    .saturating_add(value_bytes.saturating_add(key_bytes));
                Ok(())
            }
            Err(reason) => self.out.refuse((topic, partition), record, &reason),
        }
    }

    fn rows(&self) -> usize {
        self.out.rows(0)
    }

    fn bytes(&self) -> usize {
        self.out.bytes(self.value_bytes)
    }

    fn flush(&mut self) -> iceberg::Result<Vec<Routed>> {
        self.out.flush(|| {
            let rows = std::mem::take(&mut self.rows);
            self.value_bytes = 0;
            let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.order.len());
            for slot in &self.order {
                columns.push(match (slot, &mut self.key_column) {
                    (Some(i), _) => {
                        let field = self.payload.get(*i).ok_or_else(|| {
                            iceberg::Error::new(
                                iceberg::ErrorKind::Unexpected,
                                "a payload column out of range",
                            )
                        })?;
                        row_column(&rows, *i, field.data_type())?
                    }
                    (None, Some((key_type, keys))) => {
                        let keys = std::mem::take(keys);
                        column(key_type, &keys.iter().collect::<Vec<_>>())?
                    }
                    (None, None) => {
                        return Err(iceberg::Error::new(
                            iceberg::ErrorKind::Unexpected,
                            "the key_fields column without its keys",
                        ));
                    }
                });
            }
            Ok(columns)
        })
    }

    fn dead_letters(&self) -> u64 {
        self.out.dead_letters()
    }
}

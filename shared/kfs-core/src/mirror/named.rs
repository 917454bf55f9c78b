//! Whether a delete of a mirror keyed by value fields names its key, decided where the
//! record is converted. A tombstone (or a Debezium delete) has no value to read its
//! key fields from: its key comes from the record key (the decoded `key_fields`, else
//! [`kfs_plan::field_key::from_record_key`]), as the committer reads it
//! ([`super::rows`]). A delete that names no key would delete nothing: it goes to the
//! dead-letter table with the reason instead, so no change is dropped unseen.

use arrow_schema::DataType;
use iceberg::table::Table;
use kfs_plan::field_key::FieldKind;
use kfs_values::cells::Cell;

/// How the deletes of a mirror keyed by value fields name their key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeleteKeys {
    /// The key fields, as configured.
    fields: Vec<String>,
    /// What their columns hold (empty before the columns exist: text).
    kinds: Vec<FieldKind>,
}

impl DeleteKeys {
    /// For `table` when it is a mirror keyed by value fields; `None` for any other
    /// (a mirror keyed by the record key: a delete with a key names it).
    pub(crate) fn of(table: &Table) -> Option<Self> {
        let mode = crate::table::mode_of(table).ok()?;
        if mode.key_fields.is_empty() {
            return None;
        }
        let fields = mode.key_fields.clone();
        let kinds = match super::rows::KeyColumns::of_mode(table, mode) {
            Ok(super::rows::KeyColumns::Fields { kinds, .. }) => kinds,
            _ => Vec::new(),
        };
        Some(Self { fields, kinds })
    }

    /// Why a delete whose record key is `key` names no key of the mirror, `decoded`
    /// being its decoded key and the type of `key_fields` (keys decoded with their
    /// registry schema); `None` when it names one.
    pub(crate) fn unnamed(
        &self,
        key: Option<&[u8]>,
        decoded: Option<(&Cell, &DataType)>,
    ) -> Option<String> {
        if let Some((Cell::Struct(cells), DataType::Struct(types))) = decoded {
            let named = self.fields.iter().all(|field| {
                let column = kfs_values::layout::column_for(field, false);
                types
                    .iter()
                    .position(|t| *t.name() == *column)
                    .is_some_and(|at| {
                        cells
                            .get(at)
                            .is_some_and(|cell| !matches!(cell, Cell::Null))
                            && super::rows::kind_of(types[at].data_type()) != FieldKind::Unkeyed
                    })
            });
            if named {
                return None;
            }
        }
        let fields = self.fields.join(", ");
        let Some(key) = key else {
            return Some(format!(
                "a delete without a record key names no row of a mirror keyed by the value fields {fields}"
            ));
        };
        if kfs_plan::field_key::from_record_key(key, &self.fields, &self.kinds).is_some() {
            return None;
        }
        Some(match decoded {
            Some(_) => format!(
                "a delete whose decoded key lacks a value of the key fields {fields} (null, missing, or a type no key is made of) names no row of the mirror keyed by them"
            ),
            None => format!(
                "a delete whose record key names no row of a mirror keyed by the value fields {fields}: the key must hold them as their columns do (a JSON object of every key field, or with one key field its text: an integer's digits, true or false, text without control characters); a binary key, such as a registry frame, needs key_format registry"
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_schema::{Field, Fields};

    fn by(fields: &[&str]) -> DeleteKeys {
        DeleteKeys {
            fields: fields.iter().map(|f| (*f).to_owned()).collect(),
            kinds: Vec::new(),
        }
    }

    #[test]
    fn a_delete_names_its_key_by_the_record_key_or_its_decoded_fields() {
        let id = by(&["id"]);
        assert_eq!(id.unnamed(Some(br#"{"id":7}"#), None), None);
        assert_eq!(id.unnamed(Some(b"7"), None), None);
        let missing = id.unnamed(Some(br#"{"other":7}"#), None);
        assert!(missing.is_some_and(|why| why.contains("value fields id")));
        assert!(id.unnamed(None, None).is_some());
        // A registry frame read as raw bytes names no key; decoded, its field does.
        let frame = [0u8, 0, 0, 0, 3, 14];
        assert!(id.unnamed(Some(&frame), None).is_some());
        let key_type = DataType::Struct(Fields::from(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("ratio", DataType::Float64, true),
        ]));
        let decoded = Cell::Struct(vec![Cell::Int(7), Cell::Float(0.5)]);
        assert_eq!(id.unnamed(Some(&frame), Some((&decoded, &key_type))), None);
        // A null field, a fraction, a field the key lacks: none.
        let null = Cell::Struct(vec![Cell::Null, Cell::Float(0.5)]);
        assert!(id.unnamed(Some(&frame), Some((&null, &key_type))).is_some());
        let ratio = by(&["ratio"]);
        assert!(
            ratio
                .unnamed(Some(&frame), Some((&decoded, &key_type)))
                .is_some()
        );
        let region = by(&["id", "region"]);
        assert!(
            region
                .unnamed(Some(&frame), Some((&decoded, &key_type)))
                .is_some()
        );
    }
}

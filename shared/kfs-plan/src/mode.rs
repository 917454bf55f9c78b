//! Table modes: whether a table appends every record (`append`, the default) or
//! mirrors its topic's keys (`upsert`: one row per key, its last change; a tombstone
//! deletes the key), and by which key. A table's mode is chosen when it is created
//! and recorded in its properties ([`TABLE_MODE_PROPERTY`], [`UPSERT_KEY_PROPERTY`]),
//! so every process commits it alike whatever its own settings say.
//!
//! Built: `upsert` of raw, JSON and registry tables by the record key (a JSON or
//! registry mirror keeps the `value` column, whose null marks the tombstone), and
//! `cdc` of Debezium envelopes in JSON and in the registry's formats (Avro,
//! Protobuf, JSON Schema): the `after` image's fields are the columns; `value` holds
//! the image (JSON) or the event as it came (registry), null for a delete. Either is
//! keyed by the record key (the default) or by value fields (`upsert_key`,
//! [`crate::field_key`]), which raw values do not have. A mirror may keep its change
//! log beside it (`change_log`, [`CHANGE_LOG_PROPERTY`]): every record it mirrors, as
//! an append table `<table>__changes`.

use std::collections::HashMap;

use crate::formats::ValueFormat;

/// Table property recording a table's mode (`append` when absent).
pub const TABLE_MODE_PROPERTY: &str = "kfs.table-mode";
/// Table property recording a mirror's key: `key` (the record key) or its key
/// fields, comma-separated.
pub const UPSERT_KEY_PROPERTY: &str = "kfs.upsert-key";
/// How [`UPSERT_KEY_PROPERTY`] names the record key.
pub const RECORD_KEY: &str = "key";
/// Table property recording that a mirror keeps its change log beside it (`true`).
pub const CHANGE_LOG_PROPERTY: &str = "kfs.change-log";

/// How a table treats its topic's records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TableMode {
    /// Every record is a row (the change log).
    #[default]
    Append,
    /// One row per key, its last change; a tombstone (a null value) deletes the key.
    Upsert,
    /// One row per key of Debezium change events (`before`, `after`, `op`).
    Cdc,
}

impl TableMode {
    /// The mode's name, as configured and as recorded in a table's properties.
    pub fn name(self) -> &'static str {
        match self {
            Self::Append => "append",
            Self::Upsert => "upsert",
            Self::Cdc => "cdc",
        }
    }

    /// Parses `append`, `upsert` or `cdc`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "append" => Ok(Self::Append),
            "upsert" => Ok(Self::Upsert),
            "cdc" => Ok(Self::Cdc),
            other => Err(format!(
                "table mode {other:?}: expected append, upsert or cdc"
            )),
        }
    }
}

/// A table's mode and, for a mirror, its key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModeSetting {
    /// The mode.
    pub mode: TableMode,
    /// The value fields the mirror is keyed by; empty for the record key.
    pub key_fields: Vec<String>,
    /// The mirror keeps its change log beside it: every record it mirrors appended to
    /// `<table>__changes` (`crate::naming::TableName::change_log`).
    pub change_log: bool,
}

impl ModeSetting {
    /// The setting `mode` (`append`, `upsert`, `cdc`) keyed by `key`
    /// (`FIELD[,FIELD...]`; absent, empty or `key` for the record key).
    pub fn parse(mode: &str, key: Option<&str>) -> Result<Self, String> {
        let mode = TableMode::parse(mode)?;
        let key_fields: Vec<String> = key
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|field| !field.is_empty())
            .map(str::to_owned)
            .collect();
        let key_fields = match key_fields.as_slice() {
            [only] if only == RECORD_KEY => Vec::new(),
            _ => key_fields,
        };
        if mode == TableMode::Append && !key_fields.is_empty() {
            return Err("upsert_key is given for a table in append mode: only upsert and cdc tables have a key".into());
        }
        Ok(Self {
            mode,
            key_fields,
            change_log: false,
        })
    }

    /// This setting keeping the mirror's change log beside it when `on`; refused for an
    /// append table, whose rows are the change log already.
    pub fn with_change_log(self, on: bool) -> Result<Self, String> {
        if on && !self.mirrors() {
            return Err("change_log is given for a table in append mode: its rows are the change log already; only upsert and cdc tables keep one beside them".into());
        }
        Ok(Self {
            change_log: on,
            ..self
        })
    }

    /// Whether the table mirrors its keys (`upsert` or `cdc`).
    pub fn mirrors(&self) -> bool {
        self.mode != TableMode::Append
    }

    /// Refuses what is not built for a table whose values are `format`.
    pub fn check(&self, format: ValueFormat) -> Result<(), String> {
        match self.mode {
            TableMode::Append => Ok(()),
            TableMode::Cdc if format == ValueFormat::Raw => Err(
                "table mode cdc reads Debezium change events, whose after image's fields become the columns: it needs value_format json or registry, not value_format raw".into(),
            ),
            _ if !self.key_fields.is_empty() && format == ValueFormat::Raw => Err(format!(
                "upsert_key {:?}: a key of value fields needs value_format json or registry (raw values have no fields); without upsert_key the record key is the key",
                self.key_fields.join(",")
            )),
            TableMode::Cdc | TableMode::Upsert => Ok(()),
        }
    }

    /// The properties a new table of this mode records.
    pub fn properties(&self) -> Vec<(String, String)> {
        if !self.mirrors() {
            return Vec::new();
        }
        let key = match self.key_fields.is_empty() {
            true => RECORD_KEY.to_owned(),
            false => self.key_fields.join(","),
        };
        let mut properties = vec![
            (TABLE_MODE_PROPERTY.to_owned(), self.mode.name().to_owned()),
            (UPSERT_KEY_PROPERTY.to_owned(), key),
        ];
        if self.change_log {
            properties.push((CHANGE_LOG_PROPERTY.to_owned(), "true".to_owned()));
        }
        properties
    }

    /// The mode a table's properties record (`append` when they record none; a change
    /// log recorded for an append table is none: its rows are the log).
    pub fn of_properties(properties: &HashMap<String, String>) -> Result<Self, String> {
        match properties.get(TABLE_MODE_PROPERTY) {
            None => Ok(Self::default()),
            Some(mode) => {
                let setting = Self::parse(
                    mode,
                    properties.get(UPSERT_KEY_PROPERTY).map(String::as_str),
                )?;
                let logged = properties
                    .get(CHANGE_LOG_PROPERTY)
                    .is_some_and(|on| on.trim().eq_ignore_ascii_case("true"));
                let mirrors = setting.mirrors();
                setting.with_change_log(logged && mirrors)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_name_themselves() {
        for mode in [TableMode::Append, TableMode::Upsert, TableMode::Cdc] {
            assert_eq!(TableMode::parse(mode.name()), Ok(mode));
        }
        assert_eq!(TableMode::parse(" UPSERT "), Ok(TableMode::Upsert));
        let refused = TableMode::parse("merge").err().unwrap_or_default();
        assert!(refused.contains("\"merge\"") && refused.contains("append, upsert or cdc"));
    }

    #[test]
    fn the_record_key_is_the_default_key() -> Result<(), String> {
        let by_record = ModeSetting::parse("upsert", None)?;
        assert!(by_record.key_fields.is_empty() && by_record.mirrors());
        assert_eq!(ModeSetting::parse("upsert", Some("key"))?, by_record);
        assert_eq!(ModeSetting::parse("upsert", Some(" "))?, by_record);
        let fields = ModeSetting::parse("upsert", Some("id, region"))?;
        assert_eq!(fields.key_fields, ["id", "region"]);
        assert!(ModeSetting::parse("append", Some("id")).is_err());
        Ok(())
    }

    #[test]
    fn what_is_not_built_is_refused_with_the_reason() -> Result<(), String> {
        let upsert = ModeSetting::parse("upsert", None)?;
        assert_eq!(upsert.check(ValueFormat::Raw), Ok(()));
        assert_eq!(upsert.check(ValueFormat::Json), Ok(()));
        assert_eq!(upsert.check(ValueFormat::Registry), Ok(()));
        let fields = ModeSetting::parse("upsert", Some("id"))?;
        let raw = fields.check(ValueFormat::Raw).err().unwrap_or_default();
        assert!(
            raw.contains("\"id\"") && raw.contains("raw values have no fields"),
            "{raw}"
        );
        for format in [ValueFormat::Json, ValueFormat::Registry] {
            assert_eq!(fields.check(format), Ok(()));
            assert_eq!(ModeSetting::parse("cdc", Some("id"))?.check(format), Ok(()));
        }
        let cdc = ModeSetting::parse("cdc", None)?;
        assert_eq!(cdc.check(ValueFormat::Json), Ok(()));
        assert_eq!(cdc.check(ValueFormat::Registry), Ok(()));
        let raw = cdc.check(ValueFormat::Raw).err().unwrap_or_default();
        assert!(raw.contains("value_format raw"), "{raw}");
        assert_eq!(ModeSetting::default().check(ValueFormat::Json), Ok(()));
        Ok(())
    }

    #[test]
    fn a_table_records_its_mode_in_its_properties() -> Result<(), String> {
        assert!(ModeSetting::default().properties().is_empty());
        let upsert = ModeSetting::parse("upsert", None)?;
        let properties: HashMap<String, String> = upsert.properties().into_iter().collect();
        assert_eq!(properties[TABLE_MODE_PROPERTY], "upsert");
        assert_eq!(properties[UPSERT_KEY_PROPERTY], "key");
        assert_eq!(ModeSetting::of_properties(&properties)?, upsert);
        assert_eq!(
            ModeSetting::of_properties(&HashMap::new())?,
            ModeSetting::default()
        );
        let broken = HashMap::from([(TABLE_MODE_PROPERTY.to_owned(), "weird".to_owned())]);
        assert!(ModeSetting::of_properties(&broken).is_err());
        let logged = upsert.clone().with_change_log(true)?;
        let properties: HashMap<String, String> = logged.properties().into_iter().collect();
        assert_eq!(properties[CHANGE_LOG_PROPERTY], "true");
        assert_eq!(ModeSetting::of_properties(&properties)?, logged);
        let appended = ModeSetting::default().with_change_log(true);
        assert!(appended.err().unwrap_or_default().contains("append mode"));
        let logged_append = HashMap::from([
            (TABLE_MODE_PROPERTY.to_owned(), "append".to_owned()),
            (CHANGE_LOG_PROPERTY.to_owned(), "true".to_owned()),
        ]);
        assert_eq!(
            ModeSetting::of_properties(&logged_append)?,
            ModeSetting::default()
        );
        Ok(())
    }
}

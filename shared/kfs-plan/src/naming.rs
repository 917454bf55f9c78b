//! The Iceberg table a topic lands in: `kafscale.<topic>` by default, the topic
//! lowercased with every character outside `[a-z0-9_]` replaced by `_`, unless the
//! configuration names another table for it, explicitly or by a regular expression
//! over topic names; and how a new table is laid out: its partition spec (per topic,
//! else the default; unpartitioned unless configured) and table properties.

use std::collections::BTreeMap;

pub use crate::formats::{KeyFormat, ValueFormat};

use crate::layout::PartitionField;

/// The default Iceberg namespace of the tables.
pub const DEFAULT_NAMESPACE: &str = "kafscale";

/// A table identifier: namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableName {
    /// Namespace (one level).
    pub namespace: String,
    /// Table name.
    pub name: String,
}

impl std::fmt::Display for TableName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.namespace, self.name)
    }
}

impl TableName {
    /// Parses `namespace.name`; a bare name goes to the default namespace.
    pub fn parse(text: &str) -> Option<Self> {
        let (namespace, name) = match text.rsplit_once('.') {
            Some((ns, name)) => (ns, name),
            None => (DEFAULT_NAMESPACE, text),
        };
        if namespace.is_empty() || name.is_empty() {
            return None;
        }
        Some(Self {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })
    }

    /// The table's dead-letter table, `<namespace>.<name>__dlq`: records of a JSON
    /// table whose value cannot be written, with their position and the reason.
    pub fn dead_letters(&self) -> Self {
        Self {
            namespace: self.namespace.clone(),
            name: format!("{}{DEAD_LETTER_SUFFIX}", self.name),
        }
    }

    /// The mirror's change log, `<namespace>.<name>__changes`: every record the mirror
    /// `<name>` mirrors, appended as it came (`crate::mode::ModeSetting::change_log`).
    pub fn change_log(&self) -> Self {
        Self {
            namespace: self.namespace.clone(),
            name: format!("{}{CHANGE_LOG_SUFFIX}", self.name),
        }
    }

    /// The table whose dead-letter table this would be (its ledger entries hold this
    /// table's pending files), by the name alone.
    pub fn dead_letter_parent(&self) -> Option<Self> {
        let name = self.name.strip_suffix(DEAD_LETTER_SUFFIX)?;
        (!name.is_empty()).then(|| Self {
            namespace: self.namespace.clone(),
            name: name.to_owned(),
        })
    }
}

/// Maps topics to tables.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableNaming {
    /// The namespace of tables not named explicitly.
    pub namespace: Option<String>,
    /// Explicit `topic → table` entries.
    pub overrides: BTreeMap<String, TableName>,
    /// Partition spec of new tables whose topic has no entry in `partitioning`.
    pub partition_by: Vec<PartitionField>,
    /// Whether `partition_by` was given (command line, configuration file,
    /// `PARTITION_BY`) rather than left at its default: an existing table whose spec
    /// differs then evolves to it for new data, as one with a `partitioning` entry does.
    pub partition_by_given: bool,
    /// Partition spec of new tables, per topic.
    pub partitioning: BTreeMap<String, Vec<PartitionField>>,
    /// `topic regex → table` rules, tried in order after the explicit entries.
    pub patterns: Vec<TablePattern>,
    /// Table properties of new tables (`write.target-file-size-bytes`,
    /// `write.parquet.compression-codec`, `write.parquet.compression-level`, ...).
    pub properties: BTreeMap<String, String>,
    /// How record values are stored in new tables.
    pub value_format: ValueFormat,
    /// How record keys are read in registry tables: `Registry` decodes keys framed
    /// for the schema registry into the struct column `key_fields`.
    pub key_format: KeyFormat,
    /// Declared columns of new JSON tables, per topic: their schema is these (the
    /// values' other fields are not written); topics without an entry infer theirs.
    pub value_columns: BTreeMap<String, Vec<crate::value_columns::ValueColumn>>,
    /// Which topics are ingested (all by default); the others are never converted
    /// nor swept.
    pub topics: TopicSelection,
    /// Prefix of the names of tables named by default (`<prefix><topic>`), as the
    /// upstream processor's `tablePrefix`; explicit entries and rules are kept as given.
    pub table_prefix: String,
    /// What is done with large-file (LFS) claim-check records, per topic.
    pub lfs: crate::lfs::LfsSettings,
    /// The mode of new tables whose rule sets none ([`crate::mode`]).
    pub mode: crate::mode::ModeSetting,
}

/// Which topics are ingested: those matching an `include` pattern (every topic when
/// there is none) and no `exclude` pattern. Patterns are regular expressions over
/// whole topic names.
#[derive(Debug, Clone, Default)]
pub struct TopicSelection {
    include: Vec<regex::Regex>,
    exclude: Vec<regex::Regex>,
}

impl PartialEq for TopicSelection {
    fn eq(&self, other: &Self) -> bool {
        let texts = |list: &[regex::Regex]| {
            list.iter()
                .map(|r| r.as_str().to_owned())
                .collect::<Vec<_>>()
        };
        texts(&self.include) == texts(&other.include)
            && texts(&self.exclude) == texts(&other.exclude)
    }
}

impl Eq for TopicSelection {}

impl TopicSelection {
    /// A selection from `include` and `exclude` patterns (anchored at both ends).
    pub fn new(include: &[String], exclude: &[String]) -> Result<Self, String> {
        let compile = |list: &[String], what: &str| {
            list.iter()
                .map(|p| p.trim())
                .filter(|p| !p.is_empty())
                .map(|p| {
                    regex::Regex::new(&format!("^(?:{p})$"))
                        .map_err(|e| format!("{what} topic pattern {p:?}: {e}"))
                })
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(Self {
            include: compile(include, "include")?,
            exclude: compile(exclude, "exclude")?,
        })
    }

    /// Whether `topic` is ingested.
    pub fn selects(&self, topic: &str) -> bool {
        (self.include.is_empty() || self.include.iter().any(|r| r.is_match(topic)))
            && !self.exclude.iter().any(|r| r.is_match(topic))
    }
}

/// Suffix of a table's dead-letter table.
pub const DEAD_LETTER_SUFFIX: &str = "__dlq";

/// Suffix of a mirror's change log.
pub const CHANGE_LOG_SUFFIX: &str = "__changes";

/// A rule mapping every topic its regular expression matches (in full) to a table
/// named by a template: `$1`, `${name}` are the expression's groups, and each part of
/// the result is sanitized like a topic.
#[derive(Debug, Clone)]
pub struct TablePattern {
    topic: regex::Regex,
    table: String,
    /// The mode of the tables the rule names, when it sets one.
    mode: Option<crate::mode::ModeSetting>,
}

impl PartialEq for TablePattern {
    fn eq(&self, other: &Self) -> bool {
        self.topic.as_str() == other.topic.as_str()
            && self.table == other.table
            && self.mode == other.mode
    }
}

impl Eq for TablePattern {}

impl TablePattern {
    /// A rule: topics matching `topic` (anchored at both ends) go to the table named by
    /// `table`, `namespace.name` or a bare name.
    pub fn new(topic: &str, table: &str) -> Result<Self, String> {
        let regex = regex::Regex::new(&format!("^(?:{topic})$"))
            .map_err(|e| format!("topic pattern {topic:?}: {e}"))?;
        if table.trim().is_empty() {
            return Err(format!("topic pattern {topic:?}: empty table name"));
        }
        Ok(Self {
            topic: regex,
            table: table.to_owned(),
            mode: None,
        })
    }

    /// The rule, its tables created in `mode` rather than the naming's default.
    pub fn with_mode(mut self, mode: crate::mode::ModeSetting) -> Self {
        self.mode = Some(mode);
        self
    }

    /// Whether the rule makes its tables mirrors (`upsert` or `cdc`).
    pub fn mirrors(&self) -> bool {
        self.mode
            .as_ref()
            .is_some_and(crate::mode::ModeSetting::mirrors)
    }

    /// The table of `topic`, if the rule matches it and names a table.
    fn table_for(&self, topic: &str, namespace: &str) -> Option<TableName> {
        let captures = self.topic.captures(topic)?;
        let mut expanded = String::new();
        captures.expand(&self.table, &mut expanded);
        let (ns, name) = match expanded.rsplit_once('.') {
            Some((ns, name)) => (sanitize(ns), sanitize(name)),
            None => (namespace.to_owned(), sanitize(&expanded)),
        };
        (!ns.is_empty() && !name.is_empty()).then_some(TableName {
            namespace: ns,
            name,
        })
    }
}

impl TableNaming {
    /// Refuses a mapping that sends two topics to one table by name (a table is fed by
    /// one topic: its offsets are per partition). Collisions a rule or sanitizing
    /// makes (`Orders_0` and `orders_0`, one topic under two namespaces) are found when
    /// the second feed opens the table, which refuses it with both named.
    pub fn validate(&self) -> Result<(), String> {
        let mut fed: BTreeMap<String, &str> = BTreeMap::new();
        for (topic, table) in &self.overrides {
            if let Some(other) = fed.insert(table.to_string(), topic) {
                return Err(format!(
                    "topics {other:?} and {topic:?} both map to table {table}: a table is fed by one topic; give each its own table"
                ));
            }
        }
        self.lfs.validate()?;
        if self.key_format == KeyFormat::Registry && self.value_format != ValueFormat::Registry {
            return Err(format!(
                "key_format registry: keys are decoded in registry tables only; value_format is {}",
                self.value_format.name()
            ));
        }
        if self.value_format != ValueFormat::Raw && self.lfs.any() {
            return Err(format!(
                "lfs: claim-check records are handled in raw tables only; value_format {} takes lfs mode off",
                self.value_format.name()
            ));
        }
        for mode in
            std::iter::once(&self.mode).chain(self.patterns.iter().filter_map(|p| p.mode.as_ref()))
        {
            mode.check(self.value_format)?;
        }
        Ok(())
    }

    /// The mode of `topic`'s new table: that of the first rule matching the topic
    /// that sets one, else the default.
    pub fn mode_for(&self, topic: &str) -> &crate::mode::ModeSetting {
        self.patterns
            .iter()
            .filter(|pattern| pattern.topic.is_match(topic))
            .find_map(|pattern| pattern.mode.as_ref())
            .unwrap_or(&self.mode)
    }

    /// The partition spec of `topic`'s table (empty: unpartitioned).
    pub fn partition_for(&self, topic: &str) -> &[PartitionField] {
        self.partitioning
            .get(topic)
            .map_or(self.partition_by.as_slice(), Vec::as_slice)
    }

    /// The partition spec configured for `topic`'s table, if one was given (an entry
    /// in `partitioning`, or `partition_by` given): an existing table evolves to it.
    pub fn configured_partition(&self, topic: &str) -> Option<&[PartitionField]> {
        match self.partitioning.get(topic) {
            Some(fields) => Some(fields),
            None => self
                .partition_by_given
                .then_some(self.partition_by.as_slice()),
        }
    }

    /// The declared columns of `topic`'s new table (empty: inferred from the values).
    pub fn value_columns_for(&self, topic: &str) -> &[crate::value_columns::ValueColumn] {
        self.value_columns.get(topic).map_or(&[], Vec::as_slice)
    }

    /// The table for `topic`.
    pub fn table_for(&self, topic: &str) -> TableName {
        if let Some(name) = self.overrides.get(topic) {
            return name.clone();
        }
        let namespace = self.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE);
        if let Some(name) = self
            .patterns
            .iter()
            .find_map(|pattern| pattern.table_for(topic, namespace))
        {
            return name;
        }
        TableName {
            namespace: namespace.to_owned(),
            name: sanitize(&format!("{}{topic}", self.table_prefix)),
        }
    }
}

/// Lowercases and replaces every character outside `[a-z0-9_]` with `_`.
pub fn sanitize(topic: &str) -> String {
    topic
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_topics_named_to_one_table_are_refused() {
        let mut naming = TableNaming::default();
        let orders = TableName::parse("sales.orders").unwrap_or_else(|| unreachable!());
        naming.overrides.insert("orders-eu".into(), orders.clone());
        assert_eq!(naming.validate(), Ok(()));
        naming.overrides.insert("orders-us".into(), orders);
        let refused = naming.validate().err().unwrap_or_default();
        assert!(
            refused.contains("orders-eu") && refused.contains("orders-us"),
            "{refused}"
        );
    }

    #[test]
    fn default_names_are_sanitized_and_overrides_win() {
        let mut naming = TableNaming::default();
        assert_eq!(
            naming.table_for("Orders.v2-eu").to_string(),
            "kafscale.orders_v2_eu"
        );
        naming.overrides.insert(
            "clicks".into(),
            TableName::parse("web.clickstream").unwrap_or_else(|| unreachable!()),
        );
        assert_eq!(naming.table_for("clicks").to_string(), "web.clickstream");
        assert_eq!(
            TableName::parse("plain").map(|t| t.to_string()),
            Some("kafscale.plain".into())
        );
        let orders = naming.table_for("orders");
        assert_eq!(orders.dead_letters().to_string(), "kafscale.orders__dlq");
        assert_eq!(
            orders.dead_letters().dead_letter_parent(),
            Some(orders.clone())
        );
        assert_eq!(orders.dead_letter_parent(), None);
    }

    #[test]
    fn patterns_map_topics_by_regular_expression_after_explicit_entries() {
        let rule = |topic: &str, table: &str| {
            TablePattern::new(topic, table).unwrap_or_else(|e| unreachable!("{e}"))
        };
        let mut naming = TableNaming {
            patterns: vec![
                rule(r"orders-(?P<region>[a-z]+)", "sales.orders_${region}"),
                rule(r"(.*)\.audit", "audit_$1"),
            ],
            ..TableNaming::default()
        };
        naming.overrides.insert(
            "orders-eu".into(),
            TableName::parse("eu.orders").unwrap_or_else(|| unreachable!()),
        );
        let table = |topic: &str| naming.table_for(topic).to_string();
        assert_eq!(table("orders-us"), "sales.orders_us");
        assert_eq!(table("orders-eu"), "eu.orders");
        // Anchored: a partial match is no match.
        assert_eq!(table("old-orders-us"), "kafscale.old_orders_us");
        assert_eq!(table("Billing.audit"), "kafscale.audit_billing");
        assert!(TablePattern::new("(", "t").is_err());
        assert!(TablePattern::new("x", " ").is_err());
    }

    #[test]
    fn topics_are_selected_by_include_and_exclude_patterns_and_prefixed() {
        let list = |items: &[&str]| items.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let all = TopicSelection::default();
        assert!(all.selects("anything"));
        let some = TopicSelection::new(&list(&["orders.*", "payments"]), &list(&["orders-test"]))
            .unwrap_or_else(|e| unreachable!("{e}"));
        assert!(some.selects("orders-eu"));
        assert!(some.selects("payments"));
        assert!(!some.selects("orders-test"));
        assert!(!some.selects("payments-v2"), "anchored at both ends");
        assert!(!some.selects("clicks"));
        assert!(TopicSelection::new(&list(&["("]), &[]).is_err());
        let naming = TableNaming {
            table_prefix: "kfs_".into(),
            ..TableNaming::default()
        };
        assert_eq!(
            naming.table_for("Orders").to_string(),
            "kafscale.kfs_orders"
        );
    }
}

//! The Iceberg table a topic lands in: `kafscale.<topic>` by default, the topic
//! lowercased with every character outside `[a-z0-9_]` replaced by `_`, unless the
//! configuration names another table for it; and the partition spec its table is
//! created with (per topic, else the default; unpartitioned unless configured).

use std::collections::BTreeMap;

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
    /// Partition spec of new tables, per topic.
    pub partitioning: BTreeMap<String, Vec<PartitionField>>,
}

impl TableNaming {
    /// The partition spec of `topic`'s table (empty: unpartitioned).
    pub fn partition_for(&self, topic: &str) -> &[PartitionField] {
        self.partitioning
            .get(topic)
            .map_or(self.partition_by.as_slice(), Vec::as_slice)
    }

    /// The table for `topic`.
    pub fn table_for(&self, topic: &str) -> TableName {
        if let Some(name) = self.overrides.get(topic) {
            return name.clone();
        }
        TableName {
            namespace: self
                .namespace
                .clone()
                .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned()),
            name: sanitize(topic),
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
    }
}

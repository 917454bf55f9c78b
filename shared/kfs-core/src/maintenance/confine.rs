//! What confines orphan cleanup to its own table: the storage it may list and delete
//! in (the warehouse), the other tables' locations (none may lie under the cleaned
//! table's), another table's root found in the listing itself (a table no catalog we
//! read lists), and one spelling of a location (`s3a://` and `s3://`, `file:/` and a
//! bare path are the same place), so that a file another engine references under
//! another spelling is never taken for an orphan.

use std::collections::BTreeSet;

use iceberg::{Catalog, NamespaceIdent};

use super::MaintenanceError;
use kfs_catalog::storage::{S3Settings, Warehouse};

/// Where maintenance works: how to reach the storage, and the warehouse every table
/// whose orphans are removed must lie in (a table outside it is refused).
#[derive(Debug, Clone)]
pub struct MaintenanceStorage {
    /// Credentials and endpoint of the storage.
    pub s3: S3Settings,
    /// The warehouse: orphan cleanup lists and deletes only inside it.
    pub warehouse: Warehouse,
}

/// The directory beside the tables where the committer keeps its tick summaries.
const TICK_LOG_DIR: &str = "kfs-iceberg";

/// `location` in one spelling: `s3a://` and `s3n://` are `s3://`; `file:/p`,
/// `file:///p` and `/p` are `file:///p`; no trailing `/`.
pub(crate) fn normalize(location: &str) -> String {
    let trimmed = location.trim_end_matches('/');
    for scheme in ["s3://", "s3a://", "s3n://"] {
        if let Some(rest) = trimmed.strip_prefix(scheme) {
            return format!("s3://{rest}");
        }
    }
    if let Some(rest) = trimmed.strip_prefix("file://") {
        return format!("file://{rest}");
    }
    if let Some(rest) = trimmed.strip_prefix("file:") {
        return format!("file://{rest}");
    }
    if trimmed.starts_with('/') {
        return format!("file://{trimmed}");
    }
    trimmed.to_owned()
}

/// Whether `inner` is `outer` or lies under it (both normalized).
pub(crate) fn within(outer: &str, inner: &str) -> bool {
    inner == outer
        || inner
            .strip_prefix(outer)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The other tables whose locations a cleanup must not contain: every table of the
/// namespaces read (and what could not be read, which refuses every cleanup: an
/// unknown location could lie under the cleaned table's).
#[derive(Debug, Clone, Default)]
pub struct Neighbours {
    /// `(table, normalized location)`.
    tables: Vec<(String, String)>,
    /// `(table or namespace, why its location is unknown)`.
    unknown: Vec<(String, String)>,
}

impl Neighbours {
    /// Every table of `namespaces` in `catalog`, with its location.
    pub async fn load(
        catalog: &dyn Catalog,
        namespaces: impl IntoIterator<Item = NamespaceIdent>,
    ) -> Self {
        let mut neighbours = Self::default();
        let namespaces: BTreeSet<NamespaceIdent> = namespaces.into_iter().collect();
        for namespace in namespaces {
            let idents = match catalog.list_tables(&namespace).await {
                Ok(idents) => idents,
                Err(e) => {
                    let what = format!("namespace {}", namespace.to_url_string());
                    neighbours.unknown.push((what, e.to_string()));
                    continue;
                }
            };
            for ident in idents {
                match catalog.load_table(&ident).await {
                    Ok(table) => neighbours
                        .tables
                        .push((ident.to_string(), normalize(table.metadata().location()))),
                    Err(e) => neighbours.unknown.push((ident.to_string(), e.to_string())),
                }
            }
        }
        neighbours
    }

    /// Every table of every namespace of `catalog` (what the command line checks).
    pub async fn of_catalog(catalog: &dyn Catalog) -> Self {
        match catalog.list_namespaces(None).await {
            Ok(namespaces) => Self::load(catalog, namespaces).await,
            Err(e) => Self {
                tables: Vec::new(),
                unknown: vec![("the catalog's namespaces".into(), e.to_string())],
            },
        }
    }

    /// Refuses orphan cleanup of `table` at `location` when the location lies outside
    /// `warehouse`, is the warehouse itself (or holds the committer's tick log), or
    /// holds another table's location (or one that could not be read).
    pub fn check(
        &self,
        table: &str,
        location: &str,
        warehouse: &Warehouse,
    ) -> Result<(), MaintenanceError> {
        let refused = |reason: String| MaintenanceError::Refused {
            table: table.to_owned(),
            reason: format!("orphan cleanup: {reason}"),
        };
        let location = normalize(location);
        let root = normalize(&warehouse.location());
        let off = super::MaintenanceStep::OrphanRemoval.property();
        if !within(&root, &location) {
            return Err(refused(format!(
                "its location {location} lies outside the warehouse {root}: only files inside the warehouse are listed or deleted (point the warehouse at where the tables are, or set {off}=false on the table)"
            )));
        }
        if within(&location, &format!("{root}/{TICK_LOG_DIR}")) {
            return Err(refused(format!(
                "its location {location} holds the whole warehouse {root} (or its {TICK_LOG_DIR}/ directory): give the table a location of its own"
            )));
        }
        for (other, other_location) in &self.tables {
            if other != table && within(&location, other_location) {
                return Err(refused(format!(
                    "its location {location} contains the location {other_location} of table {other}: the files of {other} would be taken for orphans; give each table a location of its own (or set {off}=false on {table})"
                )));
            }
        }
        if let Some((what, why)) = self.unknown.first() {
            return Err(refused(format!(
                "the location of {what} could not be read ({why}), and it could lie under {location}; cleanup waits until it can be read"
            )));
        }
        Ok(())
    }
}

/// The directories (relative to a table's root) that hold another table: a
/// `<dir>/metadata/*.metadata.json` or `<dir>/metadata/version-hint.text` below the
/// root's own `metadata/`.
pub(crate) fn nested_roots<'a>(keys: impl IntoIterator<Item = &'a str>) -> BTreeSet<String> {
    keys.into_iter()
        .filter_map(|key| {
            let (dir, file) = key.rsplit_once('/')?;
            let is_metadata = file.ends_with(".metadata.json") || file == "version-hint.text";
            let root = dir.strip_suffix("/metadata")?;
            (is_metadata && !root.is_empty()).then(|| root.to_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_are_compared_in_one_spelling() {
        assert_eq!(normalize("s3a://b/wh/t/"), "s3://b/wh/t");
        assert_eq!(normalize("s3n://b/wh/t"), "s3://b/wh/t");
        assert_eq!(normalize("file:/tmp/wh"), "file:///tmp/wh");
        assert_eq!(normalize("/tmp/wh/"), "file:///tmp/wh");
        assert_eq!(normalize("file:///tmp/wh"), "file:///tmp/wh");
        assert!(within("s3://b/wh", "s3://b/wh/orders"));
        assert!(within("s3://b/wh", "s3://b/wh"));
        // A sibling sharing a prefix is not inside.
        assert!(!within("s3://b/wh/orders", "s3://b/wh/orders_v2"));
    }

    fn neighbours(tables: &[(&str, &str)]) -> Neighbours {
        Neighbours {
            tables: tables
                .iter()
                .map(|(t, l)| ((*t).to_owned(), normalize(l)))
                .collect(),
            unknown: Vec::new(),
        }
    }

    #[test]
    fn a_location_holding_another_tables_or_outside_the_warehouse_is_refused() {
        let warehouse = Warehouse::S3 {
            bucket: "lake".into(),
            prefix: "wh".into(),
        };
        let known = neighbours(&[
            ("kafscale.orders", "s3a://lake/wh/kafscale/orders"),
            ("kafscale.orders_v2", "s3://lake/wh/kafscale/orders_v2"),
            ("kafscale.parent", "s3://lake/wh/kafscale"),
        ]);
        let check = |table: &str, location: &str| {
            known
                .check(table, location, &warehouse)
                .err()
                .map(|e| e.to_string())
        };
        assert_eq!(
            check("kafscale.orders", "s3://lake/wh/kafscale/orders"),
            None
        );
        let parent = check("kafscale.parent", "s3://lake/wh/kafscale").unwrap_or_default();
        assert!(
            parent.contains("kafscale.parent") && parent.contains("kafscale.orders"),
            "{parent}"
        );
        // Two tables at one location.
        let same = check("kafscale.twin", "s3://lake/wh/kafscale/orders/").unwrap_or_default();
        assert!(same.contains("kafscale.orders"), "{same}");
        for outside in ["s3://lake/other/t", "s3://elsewhere/wh/t", "file:///tmp/t"] {
            let text = check("kafscale.x", outside).unwrap_or_default();
            assert!(text.contains("outside the warehouse"), "{outside}: {text}");
        }
        let root = check("kafscale.x", "s3://lake/wh").unwrap_or_default();
        assert!(root.contains("whole warehouse"), "{root}");
        let mut blind = neighbours(&[]);
        blind
            .unknown
            .push(("kafscale.broken".into(), "no metadata".into()));
        let text = blind
            .check(
                "kafscale.orders",
                "s3://lake/wh/kafscale/orders",
                &warehouse,
            )
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(text.contains("kafscale.broken"), "{text}");
    }

    #[test]
    fn another_tables_root_is_found_in_a_listing() {
        let keys = [
            "metadata/00001-a.metadata.json",
            "data/p=1/f.parquet",
            "data/imported/metadata/00000-x.metadata.json",
            "data/hadoop/metadata/version-hint.text",
            "data/metadata/f.parquet",
        ];
        let roots: Vec<String> = nested_roots(keys).into_iter().collect();
        assert_eq!(roots, ["data/hadoop", "data/imported"]);
    }
}

//! What a command that deletes or rewrites is about to act on: the catalog, the
//! warehouse, the ledger and the tables, printed before it acts (with `--dry-run` too),
//! so that `--stack NAME`, which takes all of them from the deployed function's
//! configuration, never touches a lake the operator did not mean.

use kfs_core::CatalogKind;

/// Where a command works: named for the operator, never with a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    /// The deployed stack `--stack` named, if any.
    pub stack: Option<String>,
    /// The catalog ([`describe_catalog`]).
    pub catalog: String,
    /// The warehouse location.
    pub warehouse: String,
    /// The ledger's identity (`sqlite:<path>`, `dynamodb:<table>`).
    pub ledger: String,
}

/// The catalog as the operator knows it: its kind and what locates it (a file, a URI
/// without its credentials, a table bucket's ARN).
pub fn describe_catalog(kind: &CatalogKind) -> String {
    match kind {
        CatalogKind::Sql { database } => format!("sql (SQLite {})", database.display()),
        // user:password@host/database: only what follows the credentials.
        CatalogKind::SqlPostgres { url } => format!(
            "sql (PostgreSQL {})",
            url.expose()
                .rsplit_once('@')
                .map_or(url.redacted(), |(_, host)| host.to_owned())
        ),
        CatalogKind::Glue { endpoint: None } => "glue (the account's Glue Data Catalog)".into(),
        CatalogKind::Glue {
            endpoint: Some(endpoint),
        } => format!("glue ({endpoint})"),
        CatalogKind::Rest(rest) => match &rest.warehouse {
            Some(name) => format!("rest ({}, warehouse {name})", rest.uri),
            None => format!("rest ({})", rest.uri),
        },
        CatalogKind::S3Tables(settings) => format!("s3tables ({})", settings.table_bucket_arn),
        CatalogKind::Memory => "memory (gone with the command)".into(),
    }
}

/// The lines a destructive command prints before acting: `command` (and whether it
/// is a dry run) on `site`, over `tables`.
pub fn describe(site: &Site, command: &str, dry_run: bool, tables: &[String]) -> String {
    let mut text = format!(
        "kfs-iceberg {command}{} on {}:\n",
        if dry_run { " --dry-run" } else { "" },
        match &site.stack {
            Some(stack) => format!("stack {stack}"),
            None => "a local configuration".to_owned(),
        }
    );
    text.push_str(&format!("  catalog:   {}\n", site.catalog));
    text.push_str(&format!("  warehouse: {}\n", site.warehouse));
    text.push_str(&format!("  ledger:    {}\n", site.ledger));
    if tables.is_empty() {
        text.push_str("  tables:    none\n");
    } else {
        text.push_str(&format!(
            "  tables ({}): {}\n",
            tables.len(),
            tables.join(", ")
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_names_catalog_warehouse_ledger_and_tables_and_no_secret() {
        let site = Site {
            stack: Some("kfs-prod".into()),
            catalog: describe_catalog(&CatalogKind::SqlPostgres {
                url: "postgres://kfs:hunter2@db.internal:5432/lake".into(),
            }),
            warehouse: "s3://lake/wh".into(),
            ledger: "dynamodb:kfs-prod-Ledger".into(),
        };
        let text = describe(
            &site,
            "remove-orphans",
            true,
            &["kafscale.orders".into(), "kafscale.clicks".into()],
        );
        assert_eq!(
            text,
            "kfs-iceberg remove-orphans --dry-run on stack kfs-prod:\n  catalog:   sql (PostgreSQL db.internal:5432/lake)\n  warehouse: s3://lake/wh\n  ledger:    dynamodb:kfs-prod-Ledger\n  tables (2): kafscale.orders, kafscale.clicks\n"
        );
        assert!(!text.contains("hunter2"));
        let local = Site {
            stack: None,
            ..site
        };
        let text = describe(&local, "compact", false, &[]);
        assert!(
            text.starts_with("kfs-iceberg compact on a local configuration:\n")
                && text.ends_with("  tables:    none\n"),
            "{text}"
        );
        assert_eq!(
            describe_catalog(&CatalogKind::S3Tables(kfs_core::S3TablesSettings {
                table_bucket_arn: "arn:aws:s3tables:eu-west-1:1:bucket/b".into(),
                endpoint: None,
            })),
            "s3tables (arn:aws:s3tables:eu-west-1:1:bucket/b)"
        );
    }
}

//! The tables a pass opens, by feed: opened once each, refused or failed feeds
//! remembered with the reason and reported at the pass's end.

use std::collections::{BTreeMap, HashMap};

use kfs_plan::naming::TableNaming;

use super::report::PassReport;
use crate::error::PipelineError;
use crate::ingest::TopicTable;
use crate::table::{Feed, OwnershipError};
use kfs_catalog::catalog::CatalogAccess;

/// Why a feed has no table in this pass.
enum NoTable {
    /// Another feed owns it, or kfs-iceberg did not create it.
    Refused(OwnershipError),
    /// It could not be opened (catalog failure, table metadata unreadable): the table
    /// name and the error; the next pass tries again.
    Failed(String, String),
}

/// Tables opened in this pass, by feed (namespace, topic); a feed refused its table
/// is remembered with the reason, and its segments wait.
pub(super) struct Tables<'a> {
    catalog: CatalogAccess<'a>,
    naming: &'a TableNaming,
    schemas: Option<std::sync::Arc<crate::convert::RegistrySchemas>>,
    /// The ledger's identity, recorded in the tables it protects.
    ledger: String,
    by_feed: HashMap<(String, String), Result<TopicTable, NoTable>>,
}

impl<'a> Tables<'a> {
    pub(super) fn new(
        catalog: CatalogAccess<'a>,
        naming: &'a TableNaming,
        ledger: String,
        schemas: Option<std::sync::Arc<crate::convert::RegistrySchemas>>,
    ) -> Self {
        Self {
            catalog,
            naming,
            ledger,
            schemas,
            by_feed: HashMap::new(),
        }
    }

    /// The table of `feed`, or `None` when the feed was refused it or it could not be
    /// opened (remembered for the pass, reported at its end).
    pub(super) async fn get(&mut self, feed: Feed<'_>) -> Option<&TopicTable> {
        let id = (feed.namespace.to_owned(), feed.topic.to_owned());
        if !self.by_feed.contains_key(&id) {
            let opened = match TopicTable::open(self.catalog, self.naming, feed, &self.ledger).await
            {
                Ok(opened) => Ok(opened.with_schemas(self.schemas.clone())),
                Err(PipelineError::Ownership(refused)) => Err(NoTable::Refused(refused)),
                Err(e) => Err(NoTable::Failed(
                    self.naming.table_for(feed.topic).to_string(),
                    e.to_string(),
                )),
            };
            self.by_feed.insert(id.clone(), opened);
        }
        self.by_feed.get(&id)?.as_ref().ok()
    }

    /// The feeds refused their tables, with the reasons.
    fn refused(&self) -> BTreeMap<String, String> {
        self.by_feed
            .iter()
            .filter_map(|((namespace, topic), opened)| match opened {
                Err(NoTable::Refused(refused)) => {
                    Some((format!("{namespace}/{topic}"), refused.to_string()))
                }
                _ => None,
            })
            .collect()
    }

    /// The tables that could not be opened, with the errors.
    fn failed(&self) -> impl Iterator<Item = (&String, &String)> {
        self.by_feed.values().filter_map(|opened| match opened {
            Err(NoTable::Failed(table, error)) => Some((table, error)),
            _ => None,
        })
    }

    /// Notes in `report` the feeds refused their tables and the tables that could not
    /// be opened.
    pub(super) fn report_into(&self, report: &mut PassReport) {
        report.refused = self.refused();
        for (table, error) in self.failed() {
            report
                .failed_tables
                .entry(table.clone())
                .or_insert_with(|| format!("could not be opened: {error}"));
        }
    }
}

//! A catalog that serves one table as loaded (the pinned append: iceberg-rust's
//! transaction commits against exactly the table the plan was made on).

use async_trait::async_trait;
use iceberg::table::Table;
use iceberg::{Catalog, Result, TableIdent};

use super::delegate::{CatalogOverrides, Overridden};

/// A catalog view that pins one table at the version a plan was made on.
///
/// iceberg-rust's `Transaction::commit` re-reads the table and, when it moved, re-applies
/// its actions on the new version: an append planned against one snapshot would be
/// committed on top of whatever landed meanwhile (the same segments from a racing
/// committer included). Committing through this view makes the re-read return the
/// planned version, so the commit carries `assert-ref-snapshot-id` for the snapshot the
/// plan saw, and the catalog's own compare-and-swap rejects it if the table moved.
pub type PinnedCatalog<'a> = Overridden<Pinned<'a>>;

/// The pinned table over its catalog (see [`PinnedCatalog`]).
pub struct Pinned<'a> {
    inner: &'a dyn Catalog,
    pinned: Table,
}

impl<'a> PinnedCatalog<'a> {
    /// `inner`, with `pinned` returned for its table.
    pub fn new(inner: &'a dyn Catalog, pinned: Table) -> Self {
        Overridden(Pinned { inner, pinned })
    }
}

impl std::fmt::Debug for Pinned<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PinnedCatalog({})", self.pinned.identifier())
    }
}

#[async_trait]
impl CatalogOverrides for Pinned<'_> {
    fn inner(&self) -> &dyn Catalog {
        self.inner
    }

    async fn load_table(&self, table: &TableIdent) -> Result<Table> {
        if table == self.pinned.identifier() {
            return Ok(self.pinned.clone());
        }
        self.inner.load_table(table).await
    }
}

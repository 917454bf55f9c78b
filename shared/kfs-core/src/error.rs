//! The error of a pipeline pass and of one segment's ingestion.

use crate::commit::CommitError;
use crate::convert::ConvertError;
use crate::ledger::LedgerError;
use crate::source::SourceError;
use kfs_catalog::fault::ErrorKind;
use kfs_plan::progress::ProgressError;

/// A pass failed; what it did before the failure stands (the ledger is durable).
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// Listing or reading the source failed.
    #[error("source: {0}")]
    Source(#[from] SourceError),
    /// The ledger failed.
    #[error("ledger: {0}")]
    Ledger(#[from] LedgerError),
    /// The catalog failed.
    #[error("table {table}: {source}")]
    Catalog {
        /// Table.
        table: String,
        /// Catalog error.
        source: Box<iceberg::Error>,
    },
    /// A segment failed to convert for a reason that may pass.
    #[error("{0}")]
    Convert(#[from] ConvertError),
    /// A commit cycle failed.
    #[error("{0}")]
    Commit(#[from] CommitError),
    /// A feed was refused its table (another feed owns it, or kfs-iceberg did not
    /// create it); only that feed waits.
    #[error("{0}")]
    Ownership(#[from] crate::table::OwnershipError),
    /// The configuration is refused (two topics mapped to one table, ...).
    #[error("configuration: {0}")]
    Config(String),
    /// A segment was left unconverted by a failure reported for several segments at
    /// once (a run, or the objects of one segment): its message and kind.
    #[error("{segment}: {message}")]
    Unconverted {
        /// The segment.
        segment: String,
        /// The failure.
        message: String,
        /// What the failure means.
        kind: ErrorKind,
    },
    /// A table's progress cannot be established (unreadable, rolled back past our
    /// commit, or lost): an operator decides.
    #[error("table {table}: {source}")]
    Progress {
        /// Table.
        table: String,
        /// What is wrong.
        source: ProgressError,
    },
}

impl PipelineError {
    /// What the failure means (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Source(e) => e.kind,
            Self::Ledger(e) => e.kind(),
            Self::Catalog { source, .. } => kfs_catalog::fault::iceberg_error_kind(source),
            Self::Convert(e) => e.kind(),
            Self::Commit(e) => e.kind(),
            Self::Unconverted { kind, .. } => *kind,
            Self::Progress { .. } | Self::Ownership(_) | Self::Config(_) => ErrorKind::Config,
        }
    }

    /// The same failure, reported for `segment` (one error answers several segments).
    pub fn for_segment(&self, segment: &str) -> Self {
        Self::Unconverted {
            segment: segment.to_owned(),
            message: self.to_string(),
            kind: self.kind(),
        }
    }

    /// Whether running the pass again may succeed without anyone acting.
    pub fn is_retryable(&self) -> bool {
        self.kind().is_retryable()
    }
}

//! The command line's error: every failure of a command, worded for the operator, and
//! the exit code it ends the process with.
//!
//! Exit codes:
//! - `0`: the command did what it was asked.
//! - `1`: the work failed ([`CliError::exit_code`]): a segment that does not decode, a
//!   file that cannot be read or written, storage that cannot be reached (no AWS
//!   credentials among others), a commit or a pipeline step that failed.
//! - `2`: the command was asked wrongly and did nothing: arguments or configuration
//!   ([`CliError::Usage`]), or a source, warehouse or state folder that is not what it
//!   should be ([`CliError::Place`]). clap's own refusals (an unknown flag or value)
//!   exit `2` too.

use std::path::PathBuf;

/// A failure of a command, worded for the operator.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// A segment or index is malformed.
    #[error("{path}: {source}")]
    Decode {
        /// The file.
        path: PathBuf,
        /// Where and what.
        source: kfs_segment::DecodeError,
    },
    /// Segments could not be generated.
    #[error("generating segments: {0}")]
    Encode(#[from] kfs_segment::EncodeError),
    /// The arguments or the configuration are wrong.
    #[error("{0}")]
    Usage(String),
    /// A path given on the command line is not what the command needs.
    #[error(transparent)]
    Place(#[from] PlaceError),
    /// An S3 location could not be read for want of AWS credentials.
    #[error("{location}: {}", kfs_core::MISSING_AWS_CREDENTIALS)]
    Credentials {
        /// The source or warehouse.
        location: String,
    },
    /// The pipeline failed.
    #[error("{0}")]
    Pipeline(String),
}

impl CliError {
    /// The process's exit code for this failure (see the module's documentation).
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Usage(_) | Self::Place(_) => 2,
            Self::Io { .. }
            | Self::Decode { .. }
            | Self::Encode(_)
            | Self::Credentials { .. }
            | Self::Pipeline(_) => 1,
        }
    }
}

/// The bucket layout a source holds, as messages spell it.
pub const LAYOUT: &str = "<namespace>/<topic>/<partition>/segment-<20 digits>.kfs (and .index)";

/// A source, warehouse or state folder that is not what the command needs; each names
/// the path, what is wrong and what to do.
#[derive(Debug, thiserror::Error)]
pub enum PlaceError {
    /// The source does not exist.
    #[error(
        "--source {0}: does not exist; expected a folder holding {LAYOUT} (`kfs-iceberg gen --out {0}` writes a sample one)"
    )]
    SourceMissing(String),
    /// The source is a segment file.
    #[error(
        "--source {0}: is a segment file; --source takes the folder above the namespace, holding {LAYOUT} (to look inside one segment: `kfs-iceberg dump {0}`)"
    )]
    SourceIsSegment(String),
    /// The source is a file.
    #[error("--source {0}: is a file, not a folder; expected a folder holding {LAYOUT}")]
    SourceIsFile(String),
    /// The local source holds no file at all.
    #[error(
        "--source {0}: is empty; expected a folder holding {LAYOUT} (`kfs-iceberg gen --out {0}` writes a sample one)"
    )]
    SourceEmpty(String),
    /// Files, but no segment file at the place the layout puts them.
    #[error(
        "--source {given}: none of its {objects} files is a segment file; expected {LAYOUT} under it"
    )]
    SourceNoSegments {
        /// The source, as given.
        given: String,
        /// Files found.
        objects: usize,
    },
    /// Segment files too close to the source: it is a namespace, topic or partition
    /// folder.
    #[error(
        "--source {given}: is a {what} folder (segment files {found}); point --source at the folder above the namespace{}, which holds {LAYOUT}",
        suggestion.as_deref().map(|s| format!(" ({s})")).unwrap_or_default()
    )]
    SourceTooDeep {
        /// The source, as given.
        given: String,
        /// `namespace`, `topic` or `partition`.
        what: &'static str,
        /// Where a segment file was found, relative to the source.
        found: String,
        /// The folder to give instead, when it can be told.
        suggestion: Option<String>,
    },
    /// Segment files too far below the source: it is above the bucket's root.
    #[error(
        "--source {given}: segment files lie {levels} level(s) too deep ({found}); point --source at {suggestion}, the folder holding {LAYOUT}"
    )]
    SourceTooHigh {
        /// The source, as given.
        given: String,
        /// Levels too many.
        levels: usize,
        /// Where a segment file was found, relative to the source.
        found: String,
        /// The folder to give instead.
        suggestion: String,
    },
    /// Segment files at the right depth whose folders are not a namespace, a topic
    /// and a partition number.
    #[error(
        "--source {given}: {found} is not in the layout {LAYOUT} (a topic name of [a-zA-Z0-9._-], a partition number)"
    )]
    SourceBadLayout {
        /// The source, as given.
        given: String,
        /// The segment file, relative to the source.
        found: String,
    },
    /// A read-only or maintenance command was given a warehouse that does not exist.
    #[error(
        "--warehouse {0}: does not exist (nothing was created); check the path, or create it with `kfs-iceberg run --source SOURCE --warehouse {0}`"
    )]
    WarehouseMissing(String),
    /// A read-only or maintenance command was given a state folder that does not
    /// exist.
    #[error(
        "--state {0}: does not exist (nothing was created); give the folder `kfs-iceberg run --state` used"
    )]
    StateMissing(String),
    /// A folder that is not a warehouse `run` wrote.
    #[error(
        "{flag} {path}: is not a kfs-iceberg warehouse (no {missing} in it; nothing was created); give the folder `kfs-iceberg run --warehouse` wrote"
    )]
    NotAWarehouse {
        /// `--warehouse` or `--state`.
        flag: &'static str,
        /// The folder.
        path: String,
        /// The file it lacks.
        missing: String,
    },
    /// A path that must be a folder is a file.
    #[error("{flag} {path}: is a file, not a folder; give a folder (`run` creates a missing one)")]
    IsAFile {
        /// `--warehouse` or `--state`.
        flag: &'static str,
        /// The file.
        path: String,
    },
}

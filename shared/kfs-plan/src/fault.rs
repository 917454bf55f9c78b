//! The one error taxonomy: every error that crosses a crate boundary carries one
//! [`ErrorKind`], given once where the foreign error enters (an opendal error kind, an
//! AWS error code, an HTTP status), never guessed later from message text. The kind
//! alone decides what the pipeline does:
//!
//! | kind | what it means | what the pipeline does |
//! |---|---|---|
//! | `Transient` | I/O, throttling, 5xx, timeouts, an unknown outcome | retry with backoff, then fail the attempt (the event or the tick runs again) |
//! | `Conflict` | lost a compare-and-swap to another writer | re-read and re-plan |
//! | `InvalidData` | a segment's own bytes, or a record that cannot be represented | quarantine the segment (only this kind does) |
//! | `Config` | a setting or a permission the operator must fix | fail, alarmed, the segment untouched |

use std::fmt;

/// What a failure means for the pipeline (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// May pass on its own: I/O, throttling, 5xx, timeouts, an unknown outcome.
    Transient,
    /// Lost a compare-and-swap: re-read and re-plan.
    Conflict,
    /// The input itself is wrong: a segment's bytes, or a record that cannot be stored.
    InvalidData,
    /// A setting or permission the operator must fix.
    Config,
}

impl ErrorKind {
    /// Whether running the same work again may succeed without anyone acting.
    pub fn is_retryable(self) -> bool {
        matches!(self, Self::Transient | Self::Conflict)
    }

    /// Whether the failure condemns the segment: only invalid data does.
    pub fn quarantines(self) -> bool {
        self == Self::InvalidData
    }

    /// The kind of an HTTP answer's status: 408, 429 and 5xx are transient, 409 and
    /// 412 conflicts, 400, 422 and 413 invalid requests, and the rest of 4xx (401, 403,
    /// 404, ...) configuration. A 2xx or 3xx that reached error handling is transient
    /// (its outcome is unknown).
    pub fn of_http_status(status: u16) -> Self {
        match status {
            408 | 429 | 500..=599 => Self::Transient,
            409 | 412 => Self::Conflict,
            400 | 413 | 422 => Self::InvalidData,
            401..=499 => Self::Config,
            _ => Self::Transient,
        }
    }

    /// The kind's name, as logs and metrics spell it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Transient => "transient",
            Self::Conflict => "conflict",
            Self::InvalidData => "invalid_data",
            Self::Config => "config",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A foreign error with the kind it was given where it entered: carried as the
/// source of another crate's error (an `iceberg::Error`, say) so that the kind
/// survives the trip without being guessed again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Fault {
    /// The kind.
    pub kind: ErrorKind,
    /// What failed, with the foreign error's own words.
    pub message: String,
}

impl Fault {
    /// A fault of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// The kind of the first [`Fault`] in `error`'s chain of sources (itself
    /// included), if any.
    pub fn find(error: &(dyn std::error::Error + 'static)) -> Option<ErrorKind> {
        let mut next = Some(error);
        while let Some(current) = next {
            if let Some(fault) = current.downcast_ref::<Fault>() {
                return Some(fault.kind);
            }
            next = current.source();
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_statuses_map_to_kinds() {
        assert_eq!(ErrorKind::of_http_status(503), ErrorKind::Transient);
        assert_eq!(ErrorKind::of_http_status(429), ErrorKind::Transient);
        assert_eq!(ErrorKind::of_http_status(409), ErrorKind::Conflict);
        assert_eq!(ErrorKind::of_http_status(401), ErrorKind::Config);
        assert_eq!(ErrorKind::of_http_status(403), ErrorKind::Config);
        assert_eq!(ErrorKind::of_http_status(400), ErrorKind::InvalidData);
        assert!(!ErrorKind::Config.is_retryable());
        assert!(ErrorKind::InvalidData.quarantines());
        assert!(!ErrorKind::Transient.quarantines());
    }

    #[test]
    fn a_fault_is_found_through_sources() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] Fault);
        let outer = Outer(Fault::new(ErrorKind::Config, "denied"));
        assert_eq!(Fault::find(&outer), Some(ErrorKind::Config));
        assert_eq!(Fault::find(&std::fmt::Error), None);
    }
}

//! Where foreign errors enter kfs-core and get their [`ErrorKind`]: opendal's error
//! kinds, iceberg-rust's errors (through the opendal error or the [`Fault`] they
//! carry), and the iceberg errors kfs-iceberg builds itself ([`iceberg_error`]).
//! Nothing here reads an error's message.

use iceberg::ErrorKind as IcebergKind;
pub use kfs_plan::fault::{ErrorKind, Fault};

/// The kind of an opendal error, by its error kind: throttling and unexpected
/// failures (network, 5xx, an unknown outcome) are transient whatever opendal's retry
/// layer marked them; a failed condition or an existing object is a conflict; a
/// missing object, a refused permission or an invalid configuration is for the
/// operator; a range beyond the object is invalid data.
pub fn opendal_error_kind(error: &opendal::Error) -> ErrorKind {
    use opendal::ErrorKind as Kind;
    match error.kind() {
        Kind::RateLimited | Kind::Unexpected => ErrorKind::Transient,
        Kind::ConditionNotMatch | Kind::AlreadyExists => ErrorKind::Conflict,
        Kind::RangeNotSatisfied => ErrorKind::InvalidData,
        Kind::NotFound
        | Kind::PermissionDenied
        | Kind::ConfigInvalid
        | Kind::Unsupported
        | Kind::IsADirectory
        | Kind::NotADirectory
        | Kind::IsSameFile => ErrorKind::Config,
        _ => ErrorKind::Transient,
    }
}

/// The kind of an iceberg-rust error: a [`Fault`] or an opendal error in its chain of
/// sources decides (iceberg-rust's storage layer reports every I/O failure as an
/// unexpected, non-retryable error, its cause attached); otherwise its own kind
/// (a lost commit is a conflict; invalid data is invalid data; missing namespaces and
/// tables, unsupported features and refused configuration are for the operator), and
/// an unexpected error that says nothing more is transient (its outcome is unknown).
pub fn iceberg_error_kind(error: &iceberg::Error) -> ErrorKind {
    let mut next = std::error::Error::source(error);
    while let Some(current) = next {
        if let Some(fault) = current.downcast_ref::<Fault>() {
            return fault.kind;
        }
        if let Some(opendal) = current.downcast_ref::<opendal::Error>() {
            return opendal_error_kind(opendal);
        }
        if let Some(nested) = current.downcast_ref::<iceberg::Error>() {
            return iceberg_error_kind(nested);
        }
        if current.is::<std::io::Error>() {
            return ErrorKind::Transient;
        }
        next = current.source();
    }
    match error.kind() {
        IcebergKind::CatalogCommitConflicts => ErrorKind::Conflict,
        _ if error.retryable() => ErrorKind::Transient,
        IcebergKind::DataInvalid => ErrorKind::InvalidData,
        IcebergKind::TableAlreadyExists | IcebergKind::NamespaceAlreadyExists => {
            ErrorKind::Conflict
        }
        IcebergKind::Unexpected => ErrorKind::Transient,
        _ => ErrorKind::Config,
    }
}

/// An iceberg error that carries `kind` (as a [`Fault`] source, and retryable when
/// the kind is), for the errors kfs-iceberg raises through iceberg-rust's interfaces.
pub fn iceberg_error(kind: ErrorKind, message: impl Into<String>) -> iceberg::Error {
    let message = message.into();
    let iceberg_kind = match kind {
        ErrorKind::Conflict => IcebergKind::CatalogCommitConflicts,
        ErrorKind::InvalidData => IcebergKind::DataInvalid,
        ErrorKind::Transient | ErrorKind::Config => IcebergKind::Unexpected,
    };
    iceberg::Error::new(iceberg_kind, message.clone())
        .with_retryable(kind.is_retryable())
        .with_source(Fault::new(kind, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_errors_are_classified_by_their_opendal_kind_not_their_flag() {
        // What iceberg-rust's storage layer returns for an S3 SlowDown that outlived
        // opendal's retries: unexpected, not retryable, the cause attached.
        let slow_down =
            iceberg::Error::new(IcebergKind::Unexpected, "Failure in doing io operation")
                .with_source(opendal::Error::new(
                    opendal::ErrorKind::RateLimited,
                    "SlowDown",
                ));
        assert!(!slow_down.retryable());
        assert_eq!(iceberg_error_kind(&slow_down), ErrorKind::Transient);
        let denied = iceberg::Error::new(IcebergKind::Unexpected, "io").with_source(
            opendal::Error::new(opendal::ErrorKind::PermissionDenied, "403"),
        );
        assert_eq!(iceberg_error_kind(&denied), ErrorKind::Config);
    }

    #[test]
    fn built_errors_keep_their_kind() {
        for kind in [
            ErrorKind::Transient,
            ErrorKind::Conflict,
            ErrorKind::InvalidData,
            ErrorKind::Config,
        ] {
            let error = iceberg_error(kind, "x");
            assert_eq!(iceberg_error_kind(&error), kind);
            assert_eq!(error.retryable(), kind.is_retryable());
        }
        let lost = iceberg::Error::new(IcebergKind::CatalogCommitConflicts, "lost");
        assert_eq!(iceberg_error_kind(&lost), ErrorKind::Conflict);
        let missing = iceberg::Error::new(IcebergKind::TableNotFound, "gone");
        assert_eq!(iceberg_error_kind(&missing), ErrorKind::Config);
    }
}

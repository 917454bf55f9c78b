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
    if missing_credentials(error) {
        return ErrorKind::Config;
    }
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

/// What to do when no AWS credentials were found, naming the variables to set.
pub const MISSING_AWS_CREDENTIALS: &str = "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), and AWS_REGION";

/// Whether `error`, or an error in its chain of sources, is a request that could not
/// be signed for want of credentials: opendal reports it as an unexpected error whose
/// source is the signer's (reqsign's) error of kind `CredentialInvalid`, the typed
/// kind this looks for (no message is read).
pub fn missing_credentials(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(current) = next {
        if current
            .downcast_ref::<reqsign_core::Error>()
            .is_some_and(|e| e.kind() == reqsign_core::ErrorKind::CredentialInvalid)
        {
            return true;
        }
        next = current.source();
    }
    false
}

/// The kind of a local file system error: a missing file, a refused permission or a
/// path that is not a file is for the operator; any other failure may pass.
pub fn io_error_kind(error: &std::io::Error) -> ErrorKind {
    use std::io::ErrorKind as Kind;
    match error.kind() {
        Kind::NotFound | Kind::PermissionDenied | Kind::IsADirectory | Kind::NotADirectory => {
            ErrorKind::Config
        }
        Kind::InvalidData | Kind::UnexpectedEof => ErrorKind::InvalidData,
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
    let message: String = message.into();
    let iceberg_kind = match kind {
        ErrorKind::Conflict => IcebergKind::CatalogCommitConflicts,
        ErrorKind::InvalidData => IcebergKind::DataInvalid,
        ErrorKind::Transient | ErrorKind::Config => IcebergKind::Unexpected,
    };
    // The source carries the kind; its words are the error's own, printed once.
    iceberg::Error::new(iceberg_kind, message)
        .with_retryable(kind.is_retryable())
        .with_source(Fault::new(kind, format!("kind {kind}")))
}

/// How often, and how patiently, a unit of work (one segment's ingestion) is tried
/// again after a transient failure before the failure fails the attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Tries in all (at least one).
    pub attempts: u32,
    /// Delay before the second try; each later one doubles it.
    pub base_delay: std::time::Duration,
    /// The longest delay.
    pub max_delay: std::time::Duration,
}

impl Default for RetryPolicy {
    /// Three tries, 100-200 ms then 200-400 ms apart (jitter: each delay drawn from
    /// the upper half of 200 ms, then 400 ms).
    fn default() -> Self {
        Self {
            attempts: 3,
            base_delay: std::time::Duration::from_millis(200),
            max_delay: std::time::Duration::from_secs(5),
        }
    }
}

impl RetryPolicy {
    /// Tries `work` until it succeeds, fails with a kind other than transient, or
    /// has had its tries; the delays double from `base_delay`, each drawn at random
    /// from its upper half (jitter, so that throttled workers spread out).
    pub async fn run<T, E, F, Fut>(
        &self,
        kind: impl Fn(&E) -> ErrorKind,
        mut work: F,
    ) -> Result<T, E>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, E>>,
    {
        let mut attempt = 1;
        loop {
            match work().await {
                Err(e) if kind(&e) == ErrorKind::Transient && attempt < self.attempts => {
                    tokio::time::sleep(self.delay(attempt)).await;
                    attempt += 1;
                }
                answer => return answer,
            }
        }
    }

    /// The delay after failed try `attempt` (from 1).
    fn delay(&self, attempt: u32) -> std::time::Duration {
        use std::hash::BuildHasher;
        let full = self
            .base_delay
            .saturating_mul(1 << (attempt - 1).min(16))
            .min(self.max_delay);
        let random = std::collections::hash_map::RandomState::new().hash_one(attempt);
        let half = full / 2;
        half + half.mul_f64((random % 1_000) as f64 / 1_000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_not_signed_for_want_of_credentials_is_told_by_the_signers_kind() {
        // What opendal's S3 service returns when no credential could be loaded.
        let unsigned = || {
            opendal::Error::new(opendal::ErrorKind::Unexpected, "signing http request").set_source(
                reqsign_core::Error::credential_invalid("failed to load signing credential"),
            )
        };
        assert!(missing_credentials(&unsigned()));
        assert_eq!(opendal_error_kind(&unsigned()), ErrorKind::Config);
        let through_iceberg =
            iceberg::Error::new(IcebergKind::Unexpected, "io").with_source(unsigned());
        assert!(missing_credentials(&through_iceberg));
        assert_eq!(iceberg_error_kind(&through_iceberg), ErrorKind::Config);
        let other =
            opendal::Error::new(opendal::ErrorKind::Unexpected, "signing http request").set_source(
                reqsign_core::Error::new(reqsign_core::ErrorKind::RequestInvalid, "bad request"),
            );
        assert!(!missing_credentials(&other));
        assert_eq!(opendal_error_kind(&other), ErrorKind::Transient);
    }

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

    #[tokio::test]
    async fn transient_failures_are_tried_again_the_others_are_not() {
        let policy = RetryPolicy {
            attempts: 3,
            base_delay: std::time::Duration::from_millis(1),
            max_delay: std::time::Duration::from_millis(2),
        };
        for (kind, tries) in [
            (ErrorKind::Transient, 3),
            (ErrorKind::Conflict, 1),
            (ErrorKind::InvalidData, 1),
            (ErrorKind::Config, 1),
        ] {
            let calls = std::sync::atomic::AtomicU32::new(0);
            let out: Result<(), ErrorKind> = policy
                .run(
                    |kind| *kind,
                    || async {
                        calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        Err(kind)
                    },
                )
                .await;
            assert_eq!(out, Err(kind));
            assert_eq!(calls.into_inner(), tries, "{kind}");
        }
        let delay = RetryPolicy::default().delay(2);
        assert!(
            delay >= std::time::Duration::from_millis(200)
                && delay <= std::time::Duration::from_millis(400)
        );
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

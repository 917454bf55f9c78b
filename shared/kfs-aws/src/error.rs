//! Errors at the AWS edge: a missing or invalid setting (shared by the settings and
//! the secrets they point to), and the one place an AWS SDK error gets its
//! [`ErrorKind`]: by the service's error code, else the HTTP status, else what the SDK
//! says about the request (timeouts and dispatch failures are transient).

use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use kfs_plan::fault::ErrorKind;

/// A missing or invalid setting.
#[derive(Debug, thiserror::Error)]
#[error("configuration: {0}")]
pub struct ConfigError(pub String);

/// The kind of an AWS SDK error (see the module docs).
pub fn aws_error_kind<E: ProvideErrorMetadata>(error: &SdkError<E, HttpResponse>) -> ErrorKind {
    match error {
        SdkError::ConstructionFailure(_) => ErrorKind::Config,
        SdkError::DispatchFailure(failure) if failure.is_user() => ErrorKind::Config,
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            ErrorKind::Transient
        }
        // An AWS service answers nearly every refusal with 400: an unknown code is for
        // the operator, never a verdict on the segment's data.
        SdkError::ServiceError(service) => {
            service.err().code().and_then(code_kind).unwrap_or_else(|| {
                match ErrorKind::of_http_status(service.raw().status().as_u16()) {
                    ErrorKind::InvalidData => ErrorKind::Config,
                    kind => kind,
                }
            })
        }
        _ => ErrorKind::Transient,
    }
}

/// The kind of the AWS error codes that say more than their HTTP status.
fn code_kind(code: &str) -> Option<ErrorKind> {
    Some(match code {
        "Throttling"
        | "ThrottlingException"
        | "ThrottledException"
        | "TooManyRequestsException"
        | "ProvisionedThroughputExceededException"
        | "RequestLimitExceeded"
        | "SlowDown"
        | "RequestTimeout"
        | "RequestTimeoutException"
        | "InternalServerError"
        | "InternalFailure"
        | "InternalServiceException"
        | "InternalServerException"
        | "ServiceUnavailable"
        | "ServiceUnavailableException"
        | "ResourceNotReadyException"
        | "OperationTimeoutException"
        | "TransactionConflictException"
        | "TransactionInProgressException"
        | "ExpiredToken"
        | "ExpiredTokenException" => ErrorKind::Transient,
        "ConditionalCheckFailedException"
        | "ConcurrentModificationException"
        | "AlreadyExistsException"
        | "ConflictException"
        | "PreconditionFailed" => ErrorKind::Conflict,
        "AccessDenied"
        | "AccessDeniedException"
        | "UnrecognizedClientException"
        | "InvalidSignatureException"
        | "InvalidClientTokenId"
        | "MissingAuthenticationToken"
        | "EntityNotFoundException"
        | "ResourceNotFoundException"
        | "NoSuchBucket"
        | "ValidationException"
        | "InvalidInputException"
        | "ResourceNumberLimitExceededException" => ErrorKind::Config,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_decide_before_statuses() {
        assert_eq!(code_kind("ThrottlingException"), Some(ErrorKind::Transient));
        assert_eq!(
            code_kind("ConcurrentModificationException"),
            Some(ErrorKind::Conflict)
        );
        assert_eq!(code_kind("AccessDeniedException"), Some(ErrorKind::Config));
        assert_eq!(code_kind("SomethingNew"), None);
    }
}

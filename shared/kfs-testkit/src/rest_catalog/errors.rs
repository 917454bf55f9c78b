//! Iceberg REST error responses, and parsing request bodies into them.

use super::*;

/// An Iceberg REST error response: `{"error": {"message", "type", "code"}}`.
#[derive(Debug)]
pub(super) struct ApiError {
    pub(super) status: StatusCode,
    pub(super) kind: &'static str,
    pub(super) message: String,
}

#[derive(Serialize)]
pub(super) struct ErrorBody<'a> {
    pub(super) error: ErrorModel<'a>,
}

#[derive(Serialize)]
pub(super) struct ErrorModel<'a> {
    pub(super) message: &'a str,
    #[serde(rename = "type")]
    pub(super) kind: &'a str,
    pub(super) code: u16,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let error = ErrorModel {
            message: &self.message,
            kind: self.kind,
            code: self.status.as_u16(),
        };
        (self.status, Json(ErrorBody { error })).into_response()
    }
}

pub(super) fn api(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
    ApiError {
        status,
        kind,
        message: message.into(),
    }
}

pub(super) fn bad_request(e: impl Display) -> ApiError {
    api(
        StatusCode::BAD_REQUEST,
        "BadRequestException",
        e.to_string(),
    )
}

pub(super) fn internal(e: impl Display) -> ApiError {
    api(
        StatusCode::INTERNAL_SERVER_ERROR,
        "InternalServerError",
        e.to_string(),
    )
}

pub(super) fn no_such_namespace(ns: &[String]) -> ApiError {
    let message = format!("Namespace does not exist: {}", ns.join("."));
    api(StatusCode::NOT_FOUND, "NoSuchNamespaceException", message)
}

pub(super) fn no_such_table((ns, name): &TableKey) -> ApiError {
    let message = format!("Table does not exist: {}.{name}", ns.join("."));
    api(StatusCode::NOT_FOUND, "NoSuchTableException", message)
}

pub(super) fn table_already_exists((ns, name): &TableKey) -> ApiError {
    let message = format!("Table already exists: {}.{name}", ns.join("."));
    api(StatusCode::CONFLICT, "AlreadyExistsException", message)
}

pub(super) fn commit_failed(message: impl Into<String>) -> ApiError {
    api(StatusCode::CONFLICT, "CommitFailedException", message)
}

pub(super) fn oauth_error(status: StatusCode, error: &str, description: &str) -> Response {
    #[derive(Serialize)]
    struct OAuthError<'a> {
        error: &'a str,
        error_description: &'a str,
    }
    (
        status,
        Json(OAuthError {
            error,
            error_description: description,
        }),
    )
        .into_response()
}

pub(super) fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| bad_request(format!("Invalid request body: {e}")))
}

/// Splits a namespace path parameter on the spec's unit separator.
pub(super) fn split_ns(ns: &str) -> Vec<String> {
    ns.split('\u{1f}').map(str::to_owned).collect()
}

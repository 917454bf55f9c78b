//! The pointer swap of an Iceberg REST catalog: the REST commit endpoint
//! `POST {uri}/v1/{prefix}/namespaces/{namespace}/tables/{table}` with the commit's
//! requirements and updates. The server checks the requirements, writes the new metadata
//! file and swaps its pointer. A 409 is a conflict; a 5xx or a lost connection leaves the
//! commit state unknown, and the caller re-reads the table to settle it.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use iceberg::spec::TableMetadata;
use iceberg::table::Table;
use iceberg::{Error, ErrorKind, Result, Runtime, TableIdent, TableRequirement, TableUpdate};
use reqwest::header::CONTENT_TYPE;
use reqwest::{RequestBuilder, Response, StatusCode, Url};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::catalog::TableSwap;

/// What `/v1/config` and the token endpoint said: where to send commits, and how.
#[derive(Clone)]
struct Session {
    uri: String,
    prefix: Option<String>,
    token: Option<String>,
}

/// Commits through an Iceberg REST catalog's table commit endpoint.
pub struct RestTableSwap {
    client: reqwest::Client,
    uri: String,
    warehouse: Option<String>,
    credentials: HashMap<String, String>,
    state: tokio::sync::Mutex<Option<Session>>,
}

impl std::fmt::Debug for RestTableSwap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestTableSwap")
            .field("uri", &kfs_plan::secret_url::redact(&self.uri))
            .field("warehouse", &self.warehouse)
            .finish_non_exhaustive()
    }
}

#[derive(Serialize)]
struct CommitRequest<'a> {
    identifier: Identifier<'a>,
    requirements: &'a [TableRequirement],
    updates: &'a [TableUpdate],
}

#[derive(Serialize)]
struct Identifier<'a> {
    namespace: &'a [String],
    name: &'a str,
}

#[derive(Deserialize)]
struct CommitResponse {
    #[serde(rename = "metadata-location")]
    metadata_location: String,
    metadata: TableMetadata,
}

#[derive(Deserialize)]
struct ConfigResponse {
    #[serde(default)]
    defaults: HashMap<String, String>,
    #[serde(default)]
    overrides: HashMap<String, String>,
}

impl RestTableSwap {
    /// A swap for the catalog at `uri` (the base URI; `/v1/...` is appended), in the
    /// warehouse named `warehouse`. `credentials` is the property map given to
    /// iceberg-catalog-rest: `token` (a bearer token), or `credential`
    /// (`client_id:client_secret`, or a secret alone) with `scope` (default `catalog`)
    /// and `oauth2-server-uri` (default `{uri}/v1/oauth/tokens`). Nothing is requested
    /// until the first commit.
    pub fn new(
        uri: String,
        warehouse: Option<String>,
        credentials: HashMap<String, String>,
    ) -> Self {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(120))
            .build()
            .unwrap_or_default();
        Self {
            client,
            uri,
            warehouse,
            credentials,
            state: tokio::sync::Mutex::new(None),
        }
    }

    /// The cached session, or a new one.
    async fn session(&self) -> Result<Session> {
        let mut state = self.state.lock().await;
        if let Some(session) = state.as_ref() {
            return Ok(session.clone());
        }
        let token = self.token().await?;
        let mut request = self.client.get(url(&self.uri, ["v1", "config"])?);
        if let Some(warehouse) = &self.warehouse {
            request = request.query(&[("warehouse", warehouse)]);
        }
        let response = send(authorized(request, token.as_deref()), "REST config request").await?;
        let mut config: ConfigResponse = response
            .json()
            .await
            .map_err(|e| transport("reading the REST config", e))?;
        let prefix = config
            .overrides
            .remove("prefix")
            .or_else(|| config.defaults.remove("prefix"))
            .filter(|p| !p.is_empty());
        let uri = config
            .overrides
            .remove("uri")
            .unwrap_or_else(|| self.uri.clone());
        let session = Session { uri, prefix, token };
        *state = Some(session.clone());
        Ok(session)
    }

    /// The bearer token: given, from the OAuth2 client-credentials flow, or none.
    async fn token(&self) -> Result<Option<String>> {
        if let Some(token) = self.credentials.get("token") {
            return Ok(Some(token.clone()));
        }
        let Some(credential) = self.credentials.get("credential") else {
            return Ok(None);
        };
        let (client_id, secret) = match credential.split_once(':') {
            Some((id, secret)) => (Some(id), secret),
            None => (None, credential.as_str()),
        };
        let scope = self
            .credentials
            .get("scope")
            .map_or("catalog", String::as_str);
        let server = match self.credentials.get("oauth2-server-uri") {
            Some(server) => Url::parse(server).map_err(|e| {
                Error::new(
                    ErrorKind::DataInvalid,
                    format!("invalid oauth2-server-uri: {e}"),
                )
            })?,
            None => url(&self.uri, ["v1", "oauth", "tokens"])?,
        };
        let mut form = vec![("grant_type", "client_credentials")];
        form.extend(client_id.map(|id| ("client_id", id)));
        form.extend([("client_secret", secret), ("scope", scope)]);
        let response = send(self.client.post(server).form(&form), "OAuth2 token request").await?;
        let body: Value = response
            .json()
            .await
            .map_err(|e| transport("reading the OAuth2 token", e))?;
        match body.get("access_token").and_then(Value::as_str) {
            Some(token) => Ok(Some(token.to_owned())),
            None => Err(Error::new(
                ErrorKind::Unexpected,
                "OAuth2 token response has no access_token",
            )),
        }
    }
}

#[async_trait]
impl TableSwap for RestTableSwap {
    async fn commit(
        &self,
        table: &Table,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> Result<Table> {
        let ident = table.identifier();
        let request = CommitRequest {
            identifier: Identifier {
                namespace: ident.namespace().as_ref().as_slice(),
                name: ident.name(),
            },
            requirements: &requirements,
            updates: &updates,
        };
        let body = serde_json::to_vec(&request).map_err(|e| {
            Error::new(
                ErrorKind::DataInvalid,
                format!("encoding the commit to {ident}: {e}"),
            )
        })?;
        let mut reauthenticated = false;
        loop {
            let session = self.session().await?;
            let prefix = session.prefix.as_deref().unwrap_or("");
            let namespace = ident.namespace().join("\u{1f}");
            let path = ["v1"]
                .into_iter()
                .chain(prefix.split('/').filter(|p| !p.is_empty()));
            let target = url(
                &session.uri,
                path.chain(["namespaces", namespace.as_str(), "tables", ident.name()]),
            )?;
            let request = self
                .client
                .post(target)
                .header(CONTENT_TYPE, "application/json");
            let response = authorized(request.body(body.clone()), session.token.as_deref())
                .send()
                .await
                .map_err(|e| unknown_state(ident, &describe(e)))?;
            let status = response.status();
            if status == StatusCode::UNAUTHORIZED && !reauthenticated {
                reauthenticated = true;
                let mut state = self.state.lock().await;
                if state.as_ref().is_some_and(|s| s.token == session.token) {
                    *state = None;
                }
                continue;
            }
            if !status.is_success() {
                let message = server_message(response).await;
                return Err(match status.as_u16() {
                    409 => Error::new(
                        ErrorKind::CatalogCommitConflicts,
                        format!("commit to {ident} conflicted: {message}"),
                    )
                    .with_retryable(true),
                    429 | 500 | 502 | 503 | 504 => {
                        unknown_state(ident, &format!("HTTP {status}: {message}"))
                    }
                    404 => Error::new(
                        ErrorKind::TableNotFound,
                        format!("commit to {ident}: {message}"),
                    ),
                    _ => crate::fault::iceberg_error(
                        crate::fault::ErrorKind::of_http_status(status.as_u16()),
                        format!("commit to {ident} failed with HTTP {status}: {message}"),
                    ),
                });
            }
            let bytes = response
                .bytes()
                .await
                .map_err(|e| unknown_state(ident, &describe(e)))?;
            let committed: CommitResponse = serde_json::from_slice(&bytes)
                .map_err(|e| unknown_state(ident, &format!("unreadable commit response: {e}")))?;
            return crate::catalog::table_handle(
                table.file_io(),
                Runtime::try_current()?,
                ident.clone(),
                committed.metadata_location,
                committed.metadata,
            );
        }
    }
}

/// `base` with the given path segments appended, each percent-encoded.
fn url<'a>(base: &str, segments: impl IntoIterator<Item = &'a str>) -> Result<Url> {
    let invalid = |what: String| {
        crate::fault::iceberg_error(
            crate::fault::ErrorKind::Config,
            format!("REST catalog uri: {what}"),
        )
    };
    let mut url = Url::parse(base).map_err(|e| invalid(e.to_string()))?;
    url.path_segments_mut()
        .map_err(|()| invalid("not a base URI".to_owned()))?
        .pop_if_empty()
        .extend(segments);
    Ok(url)
}

fn authorized(request: RequestBuilder, token: Option<&str>) -> RequestBuilder {
    match token {
        Some(token) => request.bearer_auth(token),
        None => request,
    }
}

/// Sends a session request; a non-2xx answer is an error (retryable if transient).
async fn send(request: RequestBuilder, what: &str) -> Result<Response> {
    let response = request.send().await.map_err(|e| transport(what, e))?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let message = server_message(response).await;
    Err(crate::fault::iceberg_error(
        crate::fault::ErrorKind::of_http_status(status.as_u16()),
        format!("{what} failed with HTTP {status}: {message}"),
    ))
}

fn transport(what: &str, e: reqwest::Error) -> Error {
    Error::new(ErrorKind::Unexpected, format!("{what}: {}", describe(e))).with_retryable(true)
}

fn unknown_state(ident: &TableIdent, cause: &str) -> Error {
    let message = format!("commit to {ident}: the commit state is unknown ({cause})");
    Error::new(ErrorKind::Unexpected, message).with_retryable(true)
}

/// The error and its causes, without the URL.
fn describe(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        text = format!("{text}: {cause}");
        source = cause.source();
    }
    text
}

/// The server's message: REST `error.message`, OAuth2 `error_description`/`error`, or
/// the start of the body.
async fn server_message(response: Response) -> String {
    let text = response.text().await.unwrap_or_default();
    let json: Option<Value> = serde_json::from_str(&text).ok();
    let field = |pointer: &str| json.as_ref()?.pointer(pointer)?.as_str().map(str::to_owned);
    field("/error/message")
        .or_else(|| field("/error_description"))
        .or_else(|| field("/error"))
        .unwrap_or_else(|| text.chars().take(200).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_paths_are_percent_encoded() {
        let namespace = ["a", "b c"].join("\u{1f}");
        let segments = [
            "v1",
            "lake",
            "namespaces",
            namespace.as_str(),
            "tables",
            "t/x",
        ];
        match url("http://h:1/base/", segments) {
            Ok(u) => assert_eq!(
                u.as_str(),
                "http://h:1/base/v1/lake/namespaces/a%1Fb%20c/tables/t%2Fx"
            ),
            Err(e) => panic!("{e}"),
        }
        match url("http://h:1", ["v1", "config"]) {
            Ok(u) => assert_eq!(u.as_str(), "http://h:1/v1/config"),
            Err(e) => panic!("{e}"),
        }
    }
}

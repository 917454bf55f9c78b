//! An in-process fake Iceberg REST catalog server for tests.
//!
//! It serves the part of the Iceberg REST catalog API that `iceberg-catalog-rest` and
//! pyiceberg's `RestCatalog` use: `/v1/config`, OAuth2 client-credentials tokens,
//! namespaces, tables, table commits and multi-table transactions (also `stage-create`).
//! State lives in memory; every table version is written as a real metadata JSON file
//! through a [`FileIO`]. Failures can be injected: transient 500s, commit conflicts (409)
//! and commits that are applied but answered 503 (the "unknown commit state" case).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Display;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use axum::body::Bytes;
use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Path, Query, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use iceberg::io::FileIO;
use iceberg::spec::{
    FormatVersion, Schema, SortOrder, TableMetadata, TableMetadataBuilder, UnboundPartitionSpec,
};
use iceberg::{MetadataLocation, TableCreation, TableRequirement, TableUpdate};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

/// Settings of the fake server.
#[derive(Clone, Debug)]
pub struct RestServerConfig {
    /// Warehouse name clients pass to `/v1/config` (a name, not a location). The server
    /// answers `overrides: {"prefix": <name>}` and serves every catalog path under
    /// `/v1/{prefix}/...`; an unknown warehouse or prefix gets 404.
    pub warehouse_name: String,
    /// Storage root where table locations are allocated: `{storage_root}/{namespace}/{table}`
    /// (namespace levels joined by `/`), unless the create request gives a location or the
    /// namespace has a `location` property (e.g. `s3://lakehouse/rest` or `file:///tmp/x`).
    pub storage_root: String,
    /// FileIO used to write each new metadata JSON file
    /// (`{location}/metadata/{version:05}-{uuid}.metadata.json`).
    pub file_io: FileIO,
    /// Properties returned to clients in the config `defaults` (e.g. `s3.endpoint`,
    /// `s3.region`, `s3.access-key-id`...) so that the client's FileIO can reach storage.
    pub client_defaults: HashMap<String, String>,
    /// OAuth2 client credentials `(client_id, client_secret)` the token endpoint accepts;
    /// `None` (and no static tokens) disables auth.
    pub credential: Option<(String, String)>,
    /// Scope the token endpoint requires when `credential` is set (`None`: any).
    pub scope: Option<String>,
    /// Static bearer tokens also accepted (for the clients' `token` property).
    pub static_tokens: Vec<String>,
}

const TOKEN_PATH: &str = "/v1/oauth/tokens";

/// Endpoints advertised in the config response (pyiceberg checks them).
const ENDPOINTS: &[&str] = &[
    "GET /v1/{prefix}/namespaces",
    "POST /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "DELETE /v1/{prefix}/namespaces/{namespace}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "POST /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/transactions/commit",
];

type TableKey = (Vec<String>, String);
type St = State<Arc<Shared>>;
type ApiResult = Result<Response, ApiError>;

#[derive(Default)]
struct Store {
    namespaces: BTreeMap<Vec<String>, HashMap<String, String>>,
    /// (namespace, name) -> (current metadata location, current metadata).
    tables: BTreeMap<TableKey, (String, TableMetadata)>,
    /// Tables created with `stage-create`, not visible until committed.
    staged: BTreeMap<TableKey, TableMetadata>,
    tokens: HashSet<String>,
}

#[derive(Default)]
struct Counters {
    fail_after_apply: AtomicUsize,
    conflicts: AtomicUsize,
    fail_requests: AtomicUsize,
    commits: AtomicUsize,
    tokens: AtomicUsize,
    unauthorized: AtomicUsize,
}

struct Shared {
    config: RestServerConfig,
    store: Mutex<Store>,
    /// Serialises every change to tables, including the metadata file write.
    writes: tokio::sync::Mutex<()>,
    n: Counters,
}

impl Shared {
    fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn check_prefix(&self, prefix: &str) -> Result<(), ApiError> {
        if prefix == self.config.warehouse_name {
            Ok(())
        } else {
            Err(api(
                StatusCode::NOT_FOUND,
                "NoSuchWarehouseException",
                format!("Unknown warehouse: {prefix}"),
            ))
        }
    }

    fn authorized(&self, headers: &HeaderMap) -> bool {
        if self.config.credential.is_none() && self.config.static_tokens.is_empty() {
            return true;
        }
        let token = headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim());
        token.is_some_and(|t| {
            self.config.static_tokens.iter().any(|s| s == t) || self.store().tokens.contains(t)
        })
    }
}

/// Takes one from a failure-injection counter; true if it was positive.
fn take(counter: &AtomicUsize) -> bool {
    counter
        .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

/// A fake Iceberg REST catalog serving on `127.0.0.1` until dropped.
pub struct RestCatalogServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for RestCatalogServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestCatalogServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl RestCatalogServer {
    /// Binds `127.0.0.1:0` and serves on the current tokio runtime until dropped.
    pub async fn start(config: RestServerConfig) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            config,
            store: Mutex::default(),
            writes: tokio::sync::Mutex::new(()),
            n: Counters::default(),
        });
        let app = router(Arc::clone(&shared));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { shared, addr, task })
    }

    /// Base URI for clients, e.g. `http://127.0.0.1:PORT` (clients append `/v1/...`).
    pub fn uri(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The next `n` commit requests are applied (new metadata written and made current)
    /// but answered with 503: the "unknown commit state" case.
    pub fn fail_commits_after_apply(&self, n: usize) {
        self.shared.n.fail_after_apply.store(n, SeqCst);
    }

    /// The next `n` commit requests are rejected with 409 `CommitFailedException`
    /// without being applied.
    pub fn conflict_commits(&self, n: usize) {
        self.shared.n.conflicts.store(n, SeqCst);
    }

    /// The next `n` requests of any kind (token requests included) get 500 before
    /// anything is done.
    pub fn fail_requests(&self, n: usize) {
        self.shared.n.fail_requests.store(n, SeqCst);
    }

    /// Table commits applied so far, across tables (each table of a multi-table
    /// transaction counts once; creations do not count).
    pub fn commits_applied(&self) -> usize {
        self.shared.n.commits.load(SeqCst)
    }

    /// Every token issued so far stops being accepted, as when tokens expire.
    pub fn revoke_tokens(&self) {
        self.shared.store().tokens.clear();
    }

    /// Tokens issued by the token endpoint.
    pub fn tokens_issued(&self) -> usize {
        self.shared.n.tokens.load(SeqCst)
    }

    /// Catalog requests rejected with 401 for a missing or invalid bearer token
    /// (rejected token requests are not counted).
    pub fn unauthorized(&self) -> usize {
        self.shared.n.unauthorized.load(SeqCst)
    }

    /// Current metadata location of a table, if it exists (namespace levels separated by `.`).
    pub fn metadata_location(&self, namespace: &str, table: &str) -> Option<String> {
        self.table(namespace, table).map(|(location, _)| location)
    }

    /// Current metadata of a table, if it exists (namespace levels separated by `.`).
    pub fn metadata(&self, namespace: &str, table: &str) -> Option<TableMetadata> {
        self.table(namespace, table).map(|(_, metadata)| metadata)
    }

    fn table(&self, namespace: &str, table: &str) -> Option<(String, TableMetadata)> {
        let ns: Vec<String> = namespace
            .split(['.', '\u{1f}'])
            .map(str::to_owned)
            .collect();
        self.shared
            .store()
            .tables
            .get(&(ns, table.to_owned()))
            .cloned()
    }
}

impl Drop for RestCatalogServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/config", get(config))
        .route(TOKEN_PATH, post(token))
        .route(
            "/v1/{prefix}/namespaces",
            get(list_namespaces).post(create_namespace),
        )
        .route(
            "/v1/{prefix}/namespaces/{namespace}",
            get(load_namespace)
                .head(namespace_exists)
                .delete(drop_namespace),
        )
        .route(
            "/v1/{prefix}/namespaces/{namespace}/tables",
            get(list_tables).post(create_table),
        )
        .route(
            "/v1/{prefix}/namespaces/{namespace}/tables/{table}",
            get(load_table)
                .head(table_exists)
                .post(commit_table)
                .delete(drop_table),
        )
        .route("/v1/{prefix}/transactions/commit", post(commit_transaction))
        .fallback(|| async {
            api(
                StatusCode::NOT_FOUND,
                "NotFoundException",
                "No such endpoint",
            )
        })
        .layer(middleware::from_fn_with_state(Arc::clone(&shared), guard))
        .with_state(shared)
}

/// Failure injection and bearer-token auth for every request.
async fn guard(State(s): St, req: Request, next: Next) -> Response {
    if take(&s.n.fail_requests) {
        let e = api(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalServerError",
            "Injected transient failure",
        );
        return e.into_response();
    }
    if req.uri().path() != TOKEN_PATH && !s.authorized(req.headers()) {
        s.n.unauthorized.fetch_add(1, SeqCst);
        let e = api(
            StatusCode::UNAUTHORIZED,
            "NotAuthorizedException",
            "Missing or invalid bearer token",
        );
        return e.into_response();
    }
    next.run(req).await
}

// ---- Errors ----------------------------------------------------------------------------

/// An Iceberg REST error response: `{"error": {"message", "type", "code"}}`.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: ErrorModel<'a>,
}

#[derive(Serialize)]
struct ErrorModel<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    code: u16,
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

fn api(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
    ApiError {
        status,
        kind,
        message: message.into(),
    }
}

fn bad_request(e: impl Display) -> ApiError {
    api(
        StatusCode::BAD_REQUEST,
        "BadRequestException",
        e.to_string(),
    )
}

fn internal(e: impl Display) -> ApiError {
    api(
        StatusCode::INTERNAL_SERVER_ERROR,
        "InternalServerError",
        e.to_string(),
    )
}

fn no_such_namespace(ns: &[String]) -> ApiError {
    let message = format!("Namespace does not exist: {}", ns.join("."));
    api(StatusCode::NOT_FOUND, "NoSuchNamespaceException", message)
}

fn no_such_table((ns, name): &TableKey) -> ApiError {
    let message = format!("Table does not exist: {}.{name}", ns.join("."));
    api(StatusCode::NOT_FOUND, "NoSuchTableException", message)
}

fn table_already_exists((ns, name): &TableKey) -> ApiError {
    let message = format!("Table already exists: {}.{name}", ns.join("."));
    api(StatusCode::CONFLICT, "AlreadyExistsException", message)
}

fn commit_failed(message: impl Into<String>) -> ApiError {
    api(StatusCode::CONFLICT, "CommitFailedException", message)
}

fn oauth_error(status: StatusCode, error: &str, description: &str) -> Response {
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

fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| bad_request(format!("Invalid request body: {e}")))
}

/// Splits a namespace path parameter on the spec's unit separator.
fn split_ns(ns: &str) -> Vec<String> {
    ns.split('\u{1f}').map(str::to_owned).collect()
}

// ---- Request and response bodies -------------------------------------------------------

#[derive(Serialize, Deserialize)]
struct Ident {
    namespace: Vec<String>,
    name: String,
}

#[derive(Serialize, Deserialize)]
struct NamespaceBody {
    namespace: Vec<String>,
    #[serde(default)]
    properties: Option<HashMap<String, String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct CreateTableReq {
    name: String,
    location: Option<String>,
    schema: Schema,
    partition_spec: Option<UnboundPartitionSpec>,
    write_order: Option<SortOrder>,
    stage_create: Option<bool>,
    properties: Option<HashMap<String, String>>,
}

#[derive(Deserialize)]
struct CommitReq {
    identifier: Option<Ident>,
    #[serde(default)]
    requirements: Vec<TableRequirement>,
    #[serde(default)]
    updates: Vec<TableUpdate>,
}

#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct TableResp<'a> {
    metadata_location: Option<&'a str>,
    metadata: &'a TableMetadata,
    #[serde(skip_serializing_if = "Option::is_none")]
    config: Option<HashMap<String, String>>,
}

fn load_result(location: Option<&str>, metadata: &TableMetadata) -> Response {
    Json(TableResp {
        metadata_location: location,
        metadata,
        config: Some(HashMap::new()),
    })
    .into_response()
}

// ---- Config and auth -------------------------------------------------------------------

async fn config(State(s): St, Query(q): Query<HashMap<String, String>>) -> ApiResult {
    #[derive(Serialize)]
    struct ConfigResp<'a> {
        defaults: &'a HashMap<String, String>,
        overrides: HashMap<&'a str, &'a str>,
        endpoints: &'a [&'a str],
    }
    let name = s.config.warehouse_name.as_str();
    if let Some(w) = q.get("warehouse").filter(|w| w.as_str() != name) {
        return Err(api(
            StatusCode::NOT_FOUND,
            "NoSuchWarehouseException",
            format!("Unknown warehouse: {w}"),
        ));
    }
    let overrides = HashMap::from([("prefix", name)]);
    Ok(Json(ConfigResp {
        defaults: &s.config.client_defaults,
        overrides,
        endpoints: ENDPOINTS,
    })
    .into_response())
}

async fn token(
    State(s): St,
    form: Result<Form<HashMap<String, String>>, FormRejection>,
) -> Response {
    #[derive(Serialize)]
    struct TokenResp {
        access_token: String,
        token_type: &'static str,
        expires_in: u64,
        issued_token_type: &'static str,
    }
    let Ok(Form(f)) = form else {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "Expected a form-encoded body",
        );
    };
    let field = |k: &str| f.get(k).map(String::as_str);
    if field("grant_type") != Some("client_credentials") {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "unsupported_grant_type",
            "Only client_credentials is supported",
        );
    }
    match &s.config.credential {
        Some((id, secret))
            if field("client_id") == Some(id.as_str())
                && field("client_secret") == Some(secret.as_str()) => {}
        None if s.config.static_tokens.is_empty() => {}
        _ => {
            return oauth_error(
                StatusCode::UNAUTHORIZED,
                "invalid_client",
                "Unknown client or wrong secret",
            );
        }
    }
    let has_scope =
        |scope: &String| field("scope").is_some_and(|v| v.split(' ').any(|x| x == scope));
    let scope_ok = s.config.scope.as_ref().is_none_or(has_scope);
    if !scope_ok {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_scope",
            "Required scope missing",
        );
    }
    let access_token = uuid::Uuid::new_v4().simple().to_string();
    s.store().tokens.insert(access_token.clone());
    s.n.tokens.fetch_add(1, SeqCst);
    let resp = TokenResp {
        access_token,
        token_type: "bearer",
        expires_in: 3600,
        issued_token_type: "urn:ietf:params:oauth:token-type:access_token",
    };
    Json(resp).into_response()
}

// ---- Namespaces ------------------------------------------------------------------------

async fn list_namespaces(
    State(s): St,
    Path(prefix): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult {
    #[derive(Serialize)]
    struct ListResp<'a> {
        namespaces: Vec<&'a Vec<String>>,
    }
    s.check_prefix(&prefix)?;
    let parent = q
        .get("parent")
        .filter(|p| !p.is_empty())
        .map(|p| split_ns(p.as_str()))
        .unwrap_or_default();
    let store = s.store();
    if !parent.is_empty() && !store.namespaces.contains_key(&parent) {
        return Err(no_such_namespace(&parent));
    }
    let namespaces = store
        .namespaces
        .keys()
        .filter(|k| k.len() == parent.len() + 1 && k.starts_with(&parent))
        .collect();
    Ok(Json(ListResp { namespaces }).into_response())
}

async fn create_namespace(State(s): St, Path(prefix): Path<String>, body: Bytes) -> ApiResult {
    s.check_prefix(&prefix)?;
    let req: NamespaceBody = parse(&body)?;
    if req.namespace.is_empty() || req.namespace.iter().any(String::is_empty) {
        return Err(bad_request("Empty namespace name"));
    }
    let properties = req.properties.unwrap_or_default();
    let mut store = s.store();
    if store.namespaces.contains_key(&req.namespace) {
        let message = format!("Namespace already exists: {}", req.namespace.join("."));
        return Err(api(StatusCode::CONFLICT, "AlreadyExistsException", message));
    }
    store
        .namespaces
        .insert(req.namespace.clone(), properties.clone());
    Ok(Json(NamespaceBody {
        namespace: req.namespace,
        properties: Some(properties),
    })
    .into_response())
}

async fn load_namespace(State(s): St, Path((prefix, ns)): Path<(String, String)>) -> ApiResult {
    s.check_prefix(&prefix)?;
    let ns = split_ns(&ns);
    let properties = s
        .store()
        .namespaces
        .get(&ns)
        .cloned()
        .ok_or_else(|| no_such_namespace(&ns))?;
    Ok(Json(NamespaceBody {
        namespace: ns,
        properties: Some(properties),
    })
    .into_response())
}

async fn namespace_exists(State(s): St, Path((prefix, ns)): Path<(String, String)>) -> ApiResult {
    s.check_prefix(&prefix)?;
    let found = s.store().namespaces.contains_key(&split_ns(&ns));
    let status = if found {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::NOT_FOUND
    };
    Ok(status.into_response())
}

async fn drop_namespace(State(s): St, Path((prefix, ns)): Path<(String, String)>) -> ApiResult {
    s.check_prefix(&prefix)?;
    let ns = split_ns(&ns);
    let mut store = s.store();
    if !store.namespaces.contains_key(&ns) {
        return Err(no_such_namespace(&ns));
    }
    if store
        .tables
        .keys()
        .chain(store.staged.keys())
        .any(|(n, _)| *n == ns)
    {
        let message = format!("Namespace is not empty: {}", ns.join("."));
        return Err(api(
            StatusCode::CONFLICT,
            "NamespaceNotEmptyException",
            message,
        ));
    }
    store.namespaces.remove(&ns);
    Ok(StatusCode::NO_CONTENT.into_response())
}

// ---- Tables ----------------------------------------------------------------------------

async fn list_tables(State(s): St, Path((prefix, ns)): Path<(String, String)>) -> ApiResult {
    #[derive(Serialize)]
    struct ListResp {
        identifiers: Vec<Ident>,
    }
    s.check_prefix(&prefix)?;
    let ns = split_ns(&ns);
    let store = s.store();
    if !store.namespaces.contains_key(&ns) {
        return Err(no_such_namespace(&ns));
    }
    let identifiers = store
        .tables
        .keys()
        .filter(|(n, _)| *n == ns)
        .map(|(n, name)| Ident {
            namespace: n.clone(),
            name: name.clone(),
        })
        .collect();
    Ok(Json(ListResp { identifiers }).into_response())
}

async fn create_table(
    State(s): St,
    Path((prefix, ns)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult {
    s.check_prefix(&prefix)?;
    let req: CreateTableReq = parse(&body)?;
    let key = (split_ns(&ns), req.name.clone());
    let _writes = s.writes.lock().await;
    let location = {
        let store = s.store();
        let ns_props = store
            .namespaces
            .get(&key.0)
            .ok_or_else(|| no_such_namespace(&key.0))?;
        if store.tables.contains_key(&key) {
            return Err(table_already_exists(&key));
        }
        match (req.location, ns_props.get("location")) {
            (Some(location), _) => location,
            (None, Some(base)) => format!("{}/{}", base.trim_end_matches('/'), key.1),
            (None, None) => {
                let root = s.config.storage_root.trim_end_matches('/');
                format!("{root}/{}/{}", key.0.join("/"), key.1)
            }
        }
    };
    let mut properties = req.properties.unwrap_or_default();
    let format_version = match properties.remove("format-version").as_deref() {
        None | Some("2") => FormatVersion::V2,
        Some("1") => FormatVersion::V1,
        Some("3") => FormatVersion::V3,
        Some(v) => return Err(bad_request(format!("Unsupported format-version: {v}"))),
    };
    let creation = TableCreation {
        name: key.1.clone(),
        location: Some(location),
        schema: req.schema,
        partition_spec: req.partition_spec,
        sort_order: req.write_order,
        properties,
        format_version,
    };
    let metadata = TableMetadataBuilder::from_table_creation(creation)
        .and_then(|b| b.build())
        .map_err(bad_request)?
        .metadata;
    if req.stage_create == Some(true) {
        s.store().staged.insert(key, metadata.clone());
        return Ok(load_result(None, &metadata));
    }
    let p = Prepared {
        location: MetadataLocation::new_with_metadata(metadata.location(), &metadata),
        key,
        metadata,
    };
    write(&s, &p).await?;
    let location = install(&s, &p);
    Ok(load_result(Some(location.as_str()), &p.metadata))
}

async fn load_table(
    State(s): St,
    Path((prefix, ns, table)): Path<(String, String, String)>,
) -> ApiResult {
    s.check_prefix(&prefix)?;
    let key = (split_ns(&ns), table);
    let store = s.store();
    let (location, metadata) = store.tables.get(&key).ok_or_else(|| no_such_table(&key))?;
    Ok(load_result(Some(location.as_str()), metadata))
}

async fn table_exists(
    State(s): St,
    Path((prefix, ns, table)): Path<(String, String, String)>,
) -> ApiResult {
    s.check_prefix(&prefix)?;
    let found = s.store().tables.contains_key(&(split_ns(&ns), table));
    let status = if found {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::NOT_FOUND
    };
    Ok(status.into_response())
}

/// Drops the table from the catalog; files are kept even when `purgeRequested=true`.
async fn drop_table(
    State(s): St,
    Path((prefix, ns, table)): Path<(String, String, String)>,
) -> ApiResult {
    s.check_prefix(&prefix)?;
    let key = (split_ns(&ns), table);
    let _writes = s.writes.lock().await;
    let mut store = s.store();
    let dropped = store.tables.remove(&key).is_some() | store.staged.remove(&key).is_some();
    if !dropped {
        return Err(no_such_table(&key));
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

// ---- Commits ---------------------------------------------------------------------------

/// A new table version, built and checked but not yet written or made current.
struct Prepared {
    key: TableKey,
    location: MetadataLocation,
    metadata: TableMetadata,
}

/// Checks the requirements against the current metadata and applies the updates.
/// The caller must hold `Shared::writes` until the result is installed.
fn prepare(
    s: &Shared,
    key: TableKey,
    requirements: &[TableRequirement],
    updates: Vec<TableUpdate>,
) -> Result<Prepared, ApiError> {
    let (current, staged) = {
        let store = s.store();
        (
            store.tables.get(&key).cloned(),
            store.staged.get(&key).cloned(),
        )
    };
    let base = match (&current, staged) {
        (Some((_, metadata)), _) => metadata.clone(),
        (None, Some(staged)) => staged,
        (None, None) => return Err(no_such_table(&key)),
    };
    for requirement in requirements {
        requirement
            .check(current.as_ref().map(|(_, m)| m))
            .map_err(|e| match e.kind() {
                iceberg::ErrorKind::TableNotFound => no_such_table(&key),
                _ => commit_failed(e.to_string()),
            })?;
    }
    let current_location = current.map(|(location, _)| location);
    let mut builder = base.into_builder(current_location.clone());
    for update in updates {
        builder = update.apply(builder).map_err(bad_request)?;
    }
    let metadata = builder.build().map_err(bad_request)?.metadata;
    let location = match current_location {
        Some(l) => MetadataLocation::from_str(&l)
            .map_err(internal)?
            .with_next_version()
            .with_new_metadata(&metadata),
        None => MetadataLocation::new_with_metadata(metadata.location(), &metadata),
    };
    Ok(Prepared {
        key,
        location,
        metadata,
    })
}

async fn write(s: &Shared, p: &Prepared) -> Result<(), ApiError> {
    p.metadata
        .write_to(&s.config.file_io, &p.location)
        .await
        .map_err(internal)
}

/// Makes a written version current; returns its metadata location.
fn install(s: &Shared, p: &Prepared) -> String {
    let location = p.location.to_string();
    let mut store = s.store();
    store.staged.remove(&p.key);
    store
        .tables
        .insert(p.key.clone(), (location.clone(), p.metadata.clone()));
    location
}

fn unknown_commit_state() -> ApiError {
    let message = "Injected failure after the commit was applied";
    api(
        StatusCode::SERVICE_UNAVAILABLE,
        "ServiceUnavailableException",
        message,
    )
}

async fn commit_table(
    State(s): St,
    Path((prefix, ns, table)): Path<(String, String, String)>,
    body: Bytes,
) -> ApiResult {
    s.check_prefix(&prefix)?;
    let req: CommitReq = parse(&body)?;
    let _writes = s.writes.lock().await;
    if take(&s.n.conflicts) {
        return Err(commit_failed("Injected commit conflict"));
    }
    let p = prepare(&s, (split_ns(&ns), table), &req.requirements, req.updates)?;
    write(&s, &p).await?;
    let location = install(&s, &p);
    s.n.commits.fetch_add(1, SeqCst);
    if take(&s.n.fail_after_apply) {
        return Err(unknown_commit_state());
    }
    Ok(Json(TableResp {
        metadata_location: Some(location.as_str()),
        metadata: &p.metadata,
        config: None,
    })
    .into_response())
}

/// Atomic multi-table commit: all changes are checked before any is written.
async fn commit_transaction(State(s): St, Path(prefix): Path<String>, body: Bytes) -> ApiResult {
    #[derive(Deserialize)]
    #[serde(rename_all = "kebab-case")]
    struct TransactionReq {
        table_changes: Vec<CommitReq>,
    }
    s.check_prefix(&prefix)?;
    let req: TransactionReq = parse(&body)?;
    let _writes = s.writes.lock().await;
    if take(&s.n.conflicts) {
        return Err(commit_failed("Injected commit conflict"));
    }
    let mut prepared = Vec::new();
    for change in req.table_changes {
        let ident = change
            .identifier
            .ok_or_else(|| bad_request("Table change without identifier"))?;
        let key = (ident.namespace, ident.name);
        if prepared.iter().any(|p: &Prepared| p.key == key) {
            return Err(bad_request("Several changes to the same table"));
        }
        prepared.push(prepare(&s, key, &change.requirements, change.updates)?);
    }
    for p in &prepared {
        write(&s, p).await?;
    }
    for p in &prepared {
        install(&s, p);
        s.n.commits.fetch_add(1, SeqCst);
    }
    if take(&s.n.fail_after_apply) {
        return Err(unknown_commit_state());
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use iceberg::io::LocalFsStorageFactory;
    use iceberg::spec::{NestedField, PrimitiveType, Type};
    use iceberg::table::Table;
    use iceberg::transaction::{ApplyTransactionAction, Transaction};
    use iceberg::{Catalog, CatalogBuilder, ErrorKind, NamespaceIdent, TableIdent};
    use iceberg_catalog_rest::{RestCatalog, RestCatalogBuilder};

    use super::*;

    fn ok<T, E: Display>(result: Result<T, E>) -> T {
        result.unwrap_or_else(|e| panic!("{e}"))
    }

    fn fails<T>(result: iceberg::Result<T>) -> iceberg::Error {
        match result {
            Ok(_) => panic!("expected an error"),
            Err(e) => e,
        }
    }

    fn server_config(root: &str, static_tokens: Vec<String>) -> RestServerConfig {
        RestServerConfig {
            warehouse_name: "lake".to_string(),
            storage_root: root.to_string(),
            file_io: FileIO::new_with_fs(),
            client_defaults: HashMap::new(),
            credential: Some(("id".to_string(), "secret".to_string())),
            scope: Some("catalog".to_string()),
            static_tokens,
        }
    }

    async fn start(static_tokens: Vec<String>) -> (tempfile::TempDir, String, RestCatalogServer) {
        let dir = ok(tempfile::tempdir());
        let root = format!("file://{}", dir.path().display());
        let server = ok(RestCatalogServer::start(server_config(&root, static_tokens)).await);
        (dir, root, server)
    }

    async fn client(
        server: &RestCatalogServer,
        warehouse: &str,
        extra: &[(&str, &str)],
    ) -> RestCatalog {
        let mut props = HashMap::from([
            ("uri".to_string(), server.uri()),
            ("warehouse".to_string(), warehouse.to_string()),
        ]);
        props.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let builder =
            RestCatalogBuilder::default().with_storage_factory(Arc::new(LocalFsStorageFactory));
        ok(builder.load("rest", props).await)
    }

    async fn set_property(
        catalog: &dyn Catalog,
        ident: &TableIdent,
        value: &str,
    ) -> iceberg::Result<Table> {
        let table = catalog.load_table(ident).await?;
        let tx = Transaction::new(&table);
        let tx = tx
            .update_table_properties()
            .set("k".to_string(), value.to_string())
            .apply(tx)?;
        tx.commit(catalog).await
    }

    /// Table `t` with one column, without client-side retries (so that an injected
    /// conflict surfaces).
    fn creation() -> TableCreation {
        let field = NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long));
        let schema = ok(Schema::builder().with_fields(vec![field.into()]).build());
        TableCreation::builder()
            .name("t".to_string())
            .schema(schema)
            .properties(HashMap::from([(
                "commit.retry.num-retries".to_string(),
                "0".to_string(),
            )]))
            .build()
    }

    fn property(table: &Table) -> Option<&str> {
        table.metadata().properties().get("k").map(String::as_str)
    }

    fn location(server: &RestCatalogServer) -> String {
        server
            .metadata_location("db", "t")
            .unwrap_or_else(|| panic!("no table db.t"))
    }

    #[tokio::test]
    async fn rest_client_creates_commits_and_sees_injected_failures() {
        let (_dir, root, server) = start(vec![]).await;
        let catalog = client(&server, "lake", &[("credential", "id:secret")]).await;

        let ns = NamespaceIdent::new("db".to_string());
        ok(catalog.create_namespace(&ns, HashMap::new()).await);
        assert!(ok(catalog.namespace_exists(&ns).await));
        let again = fails(catalog.create_namespace(&ns, HashMap::new()).await);
        assert_eq!(again.kind(), ErrorKind::NamespaceAlreadyExists);
        assert_eq!(ok(catalog.list_namespaces(None).await), vec![ns.clone()]);

        let table = ok(catalog.create_table(&ns, creation()).await);
        let ident = TableIdent::new(ns.clone(), "t".to_string());
        let first = location(&server);
        assert_eq!(table.metadata_location(), Some(first.as_str()));
        assert!(
            first.starts_with(&format!("{root}/db/t/metadata/00000-")),
            "{first}"
        );
        assert!(ok(catalog.table_exists(&ident).await));
        assert!(!ok(catalog
            .table_exists(&TableIdent::new(ns.clone(), "u".to_string()))
            .await));
        assert_eq!(ok(catalog.list_tables(&ns).await), vec![ident.clone()]);
        assert_eq!(server.tokens_issued(), 1);

        // A plain commit writes version 1 and makes it current.
        let table = ok(set_property(&catalog, &ident, "v1").await);
        assert_eq!(property(&table), Some("v1"));
        assert_eq!(server.commits_applied(), 1);
        let second = location(&server);
        assert!(
            second.starts_with(&format!("{root}/db/t/metadata/00001-")),
            "{second}"
        );
        assert_eq!(table.metadata_location(), Some(second.as_str()));
        assert!(std::path::Path::new(second.trim_start_matches("file://")).exists());

        // A failed requirement is a 409 and changes nothing.
        let stale = [TableRequirement::UuidMatch {
            uuid: uuid::Uuid::new_v4(),
        }];
        let key = (vec!["db".to_string()], "t".to_string());
        match prepare(&server.shared, key, &stale, vec![]) {
            Ok(_) => panic!("a stale requirement passed"),
            Err(e) => assert_eq!(
                (e.status, e.kind),
                (StatusCode::CONFLICT, "CommitFailedException")
            ),
        }

        // An injected conflict surfaces as a commit conflict.
        server.conflict_commits(1);
        let err = fails(set_property(&catalog, &ident, "v2").await);
        assert_eq!(err.kind(), ErrorKind::CatalogCommitConflicts);
        assert_eq!(server.commits_applied(), 1);
        assert_eq!(property(&ok(catalog.load_table(&ident).await)), Some("v1"));

        // Unknown commit state: the client sees an error, yet the change is applied.
        server.fail_commits_after_apply(1);
        fails(set_property(&catalog, &ident, "v3").await);
        assert_eq!(server.commits_applied(), 2);
        assert_eq!(property(&ok(catalog.load_table(&ident).await)), Some("v3"));
        assert!(location(&server).contains("/metadata/00002-"));

        // A transient server error fails one request only.
        server.fail_requests(1);
        fails(catalog.load_table(&ident).await);
        ok(catalog.load_table(&ident).await);

        ok(catalog.drop_table(&ident).await);
        assert!(!ok(catalog.table_exists(&ident).await));
        assert_eq!(
            fails(catalog.load_table(&ident).await).kind(),
            ErrorKind::TableNotFound
        );
        ok(catalog.drop_namespace(&ns).await);
        assert!(!ok(catalog.namespace_exists(&ns).await));
        assert_eq!(server.unauthorized(), 0);
    }

    #[tokio::test]
    async fn expired_tokens_are_renewed_by_the_catalog_adapter() {
        let (_dir, _root, server) = start(vec![]).await;
        let catalog = kfs_core::testing::RestTables::new(
            client(&server, "lake", &[("credential", "id:secret")]).await,
        );
        let ns = NamespaceIdent::new("db".to_string());
        ok(catalog.create_namespace(&ns, HashMap::new()).await);
        ok(catalog.create_table(&ns, creation()).await);
        let ident = TableIdent::new(ns.clone(), "t".to_string());
        assert_eq!(server.tokens_issued(), 1);

        // A read after the token expired: refused once, renewed, answered.
        server.revoke_tokens();
        let table = ok(catalog.load_table(&ident).await);
        assert_eq!((server.tokens_issued(), server.unauthorized()), (2, 1));

        // A commit after the token expired, pinned to the table as loaded (as the
        // committer commits: no reload that would renew the token first): refused,
        // retryable, and the next attempt lands.
        server.revoke_tokens();
        let tx = Transaction::new(&table);
        let tx = ok(tx
            .update_table_properties()
            .set("k".to_string(), "v1".to_string())
            .apply(tx));
        let pinned = kfs_core::testing::PinnedCatalog::new(&catalog, table.clone());
        let refused = fails(tx.commit(&pinned).await);
        assert!(refused.retryable(), "{refused}");
        assert_eq!(server.commits_applied(), 0);
        let table = ok(set_property(&catalog, &ident, "v1").await);
        assert_eq!(property(&table), Some("v1"));
        assert_eq!((server.tokens_issued(), server.unauthorized()), (3, 2));
    }

    #[tokio::test]
    async fn auth_scope_and_warehouse_are_checked() {
        let (_dir, _root, server) = start(vec!["static".to_string()]).await;
        let ns = NamespaceIdent::new("db".to_string());

        let wrong_secret = client(&server, "lake", &[("credential", "id:wrong")]).await;
        fails(wrong_secret.list_namespaces(None).await);
        let wrong_scope = client(
            &server,
            "lake",
            &[("credential", "id:secret"), ("scope", "x")],
        )
        .await;
        fails(wrong_scope.list_namespaces(None).await);
        assert_eq!(server.tokens_issued(), 0);

        let anonymous = client(&server, "lake", &[]).await;
        fails(anonymous.list_namespaces(None).await);
        assert_eq!(server.unauthorized(), 1);

        let with_token = client(&server, "lake", &[("token", "static")]).await;
        ok(with_token.create_namespace(&ns, HashMap::new()).await);
        let other_warehouse = client(&server, "elsewhere", &[("token", "static")]).await;
        fails(other_warehouse.list_namespaces(None).await);

        let with_credential = client(&server, "lake", &[("credential", "id:secret")]).await;
        assert_eq!(ok(with_credential.list_namespaces(None).await), vec![ns]);
        assert_eq!(server.tokens_issued(), 1);
        assert_eq!(server.unauthorized(), 1);
    }
}

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

mod auth;
mod bodies;
mod commits;
mod errors;
mod namespaces;
mod tables;
#[cfg(test)]
mod tests;

use auth::*;
use bodies::*;
use commits::*;
use errors::*;
use namespaces::*;
use tables::*;

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

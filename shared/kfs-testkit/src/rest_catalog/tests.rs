//! The fake REST catalog server against iceberg-rust's REST client.

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

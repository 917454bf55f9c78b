//! Namespace endpoints: list, create, load, exists, drop.

use super::*;

pub(super) async fn list_namespaces(
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

pub(super) async fn create_namespace(
    State(s): St,
    Path(prefix): Path<String>,
    body: Bytes,
) -> ApiResult {
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

pub(super) async fn load_namespace(
    State(s): St,
    Path((prefix, ns)): Path<(String, String)>,
) -> ApiResult {
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

pub(super) async fn namespace_exists(
    State(s): St,
    Path((prefix, ns)): Path<(String, String)>,
) -> ApiResult {
    s.check_prefix(&prefix)?;
    let found = s.store().namespaces.contains_key(&split_ns(&ns));
    let status = if found {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::NOT_FOUND
    };
    Ok(status.into_response())
}

pub(super) async fn drop_namespace(
    State(s): St,
    Path((prefix, ns)): Path<(String, String)>,
) -> ApiResult {
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

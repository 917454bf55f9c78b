//! Table endpoints: list, create (and stage-create), load, exists, drop, rename.

use super::*;

pub(super) async fn list_tables(
    State(s): St,
    Path((prefix, ns)): Path<(String, String)>,
) -> ApiResult {
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

pub(super) async fn create_table(
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

pub(super) async fn load_table(
    State(s): St,
    Path((prefix, ns, table)): Path<(String, String, String)>,
) -> ApiResult {
    s.check_prefix(&prefix)?;
    let key = (split_ns(&ns), table);
    let store = s.store();
    let (location, metadata) = store.tables.get(&key).ok_or_else(|| no_such_table(&key))?;
    Ok(load_result(Some(location.as_str()), metadata))
}

pub(super) async fn table_exists(
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
pub(super) async fn drop_table(
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

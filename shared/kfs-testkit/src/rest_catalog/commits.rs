//! Table commits and multi-table transactions, with the injected failures.

use super::*;

/// A new table version, built and checked but not yet written or made current.
pub(super) struct Prepared {
    pub(super) key: TableKey,
    pub(super) location: MetadataLocation,
    pub(super) metadata: TableMetadata,
}

/// Checks the requirements against the current metadata and applies the updates.
/// The caller must hold `Shared::writes` until the result is installed.
pub(super) fn prepare(
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

pub(super) async fn write(s: &Shared, p: &Prepared) -> Result<(), ApiError> {
    p.metadata
        .write_to(&s.config.file_io, &p.location)
        .await
        .map_err(internal)
}

/// Makes a written version current; returns its metadata location.
pub(super) fn install(s: &Shared, p: &Prepared) -> String {
    let location = p.location.to_string();
    let mut store = s.store();
    store.staged.remove(&p.key);
    store
        .tables
        .insert(p.key.clone(), (location.clone(), p.metadata.clone()));
    location
}

pub(super) fn unknown_commit_state() -> ApiError {
    let message = "Injected failure after the commit was applied";
    api(
        StatusCode::SERVICE_UNAVAILABLE,
        "ServiceUnavailableException",
        message,
    )
}

pub(super) async fn commit_table(
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
pub(super) async fn commit_transaction(
    State(s): St,
    Path(prefix): Path<String>,
    body: Bytes,
) -> ApiResult {
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

//! `/v1/config` and the OAuth2 client-credentials token endpoint.

use super::*;

pub(super) async fn config(State(s): St, Query(q): Query<HashMap<String, String>>) -> ApiResult {
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

pub(super) async fn token(
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

//! `GET` and `DELETE /v1/compilations/{key}`.

use axum::Extension;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::auth::Admin;
use crate::error::{ApiError, ErrorEnvelope};
use crate::state::AppState;
use withloop_worker::cache::CacheOutcome;
use withloop_worker::key::is_key;
use withloop_worker::request::CompileResponse;

/// A compilation's metadata, report and key components (compare two
/// compilations' `components` to see why one missed). `cache` says which
/// tier answered this lookup.
#[utoipa::path(
    get,
    path = "/v1/compilations/{key}",
    tag = "compilations",
    params(("key" = String, Path, description = "The compilation's key")),
    responses(
        (status = 200, description = "The compilation", body = CompileResponse),
        (status = 404, description = "Not cached", body = ErrorEnvelope),
    )
)]
pub async fn get(State(state): State<AppState>, Path(key): Path<String>) -> Result<Json<CompileResponse>, ApiError> {
    if !is_key(&key) {
        return Err(ApiError::not_found(format!("`{key}` is not a compilation key (64 hex digits)")));
    }
    if let Some(c) = state.cache.in_memory(&key).await {
        return Ok(Json(CompileResponse::of(&c, CacheOutcome::Memory)));
    }
    if let Some(store) = state.cache.store() {
        let meta = store.metadata(&key).await.map_err(ApiError::cache_database)?;
        if let Some(meta) = meta {
            let compiled = withloop_worker::cache::Compiled::new(meta, Default::default());
            return Ok(Json(CompileResponse::of(&compiled, CacheOutcome::Database)));
        }
    }
    Err(ApiError::not_found(format!("no compilation has the key {key} (it may have been evicted)")))
}

/// Purge one compilation from both cache tiers. Needs the admin token when the
/// server has API tokens; the embedded default (no tokens) allows anyone.
#[utoipa::path(
    delete,
    path = "/v1/compilations/{key}",
    tag = "compilations",
    params(("key" = String, Path, description = "The compilation's key")),
    responses(
        (status = 204, description = "Purged"),
        (status = 403, description = "Not the admin token", body = ErrorEnvelope),
        (status = 404, description = "Not cached", body = ErrorEnvelope),
    )
)]
pub async fn purge(
    State(state): State<AppState>,
    Extension(Admin(admin)): Extension<Admin>,
    Path(key): Path<String>,
) -> Result<Response, ApiError> {
    let open = state.tokens.is_empty() && state.config.admin_token.is_none();
    if !admin && !open {
        return Err(ApiError::new(StatusCode::FORBIDDEN, "forbidden", "purging a compilation needs the admin token"));
    }
    let purged = state.cache.purge(&key).await.map_err(ApiError::cache_database)?;
    if purged {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiError::not_found(format!("no compilation has the key {key}")))
    }
}

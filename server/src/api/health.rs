//! `/healthz`, `/readyz` and `/metrics`.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::state::AppState;

/// Liveness and readiness.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok`, `ready` or `not_ready`.
    pub status: String,
    /// `embedded` (memory cache, in-process compiles) or `database`.
    pub mode: String,
    /// The compiler's build identity (part of every cache key).
    pub compiler: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn mode(state: &AppState) -> String {
    if state.embedded() { "embedded" } else { "database" }.to_string()
}

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "operations", responses((status = 200, body = Health)))]
pub async fn healthz(State(state): State<AppState>) -> Json<Health> {
    Json(Health { status: "ok".into(), mode: mode(&state), compiler: withloop_worker::key::compiler_id(), error: None })
}

/// The server can serve: its database answers, or it runs embedded.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    responses((status = 200, body = Health), (status = 503, description = "The database does not answer", body = Health))
)]
pub async fn readyz(State(state): State<AppState>) -> Response {
    let mut health = Health {
        status: "ready".into(),
        mode: mode(&state),
        compiler: withloop_worker::key::compiler_id(),
        error: None,
    };
    if let Some(store) = state.cache.store()
        && let Err(e) = store.ping().await
    {
        health.status = "not_ready".into();
        health.error = Some(format!("the cache database does not answer: {e}"));
        return (StatusCode::SERVICE_UNAVAILABLE, Json(health)).into_response();
    }
    Json(health).into_response()
}

/// Prometheus metrics (text exposition format).
#[utoipa::path(get, path = "/metrics", tag = "operations", responses((status = 200, content_type = "text/plain")))]
pub async fn metrics(State(state): State<AppState>) -> Response {
    let (bytes, entries) = state.cache.memory_usage().await;
    let text = state.metrics.render(bytes, entries);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response()
}

//! The HTTP API: one router, handlers by resource, one error envelope
//! ([`crate::error`]), and the OpenAPI document generated from the handlers'
//! annotations ([`ApiDoc`], committed as `openapi/openapi.json`).

pub mod artifacts;
pub mod compilations;
pub mod compile;
pub mod health;
pub mod jobs;
pub mod run;

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use tower_http::compression::CompressionLayer;
use tower_http::cors::{AllowOrigin, Any, CorsLayer};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;

use crate::error::{ApiError, ErrorBody, ErrorEnvelope};
use crate::state::AppState;

/// The OpenAPI document.
#[derive(Debug, OpenApi)]
#[openapi(
    info(
        title = "withloop",
        description = "Compilation as a service for shape-generic array programs (SaC): object code, \
                       specialised variants and optimisation reports, cached by content and shape signature.",
        license(name = "MIT OR Apache-2.0")
    ),
    paths(
        compile::compile,
        run::run,
        artifacts::artifact,
        compilations::get,
        compilations::purge,
        jobs::get,
        jobs::cancel,
        jobs::events,
        jobs::workers,
        health::healthz,
        health::readyz,
        health::metrics,
    ),
    components(schemas(ErrorEnvelope, ErrorBody, withloop_worker::jobs::JobEvent)),
    tags(
        (name = "compile", description = "Compile programs"),
        (name = "run", description = "Run programs in sandboxed processes"),
        (name = "artifacts", description = "Fetch compiled artifacts"),
        (name = "compilations", description = "Inspect and purge cached compilations"),
        (name = "jobs", description = "Follow asynchronous compiles"),
        (name = "operations", description = "Health and metrics"),
    )
)]
pub struct ApiDoc;

/// The OpenAPI document as pretty JSON (what `openapi/openapi.json` holds).
pub fn openapi_json() -> String {
    ApiDoc::openapi().to_pretty_json().unwrap_or_default() + "\n"
}

/// The router with every route and layer.
pub fn router(state: AppState) -> Router {
    let v1 = Router::new()
        .route("/v1/compile", post(compile::compile))
        .route("/v1/run", post(run::run))
        .route("/v1/compilations/{key}", get(compilations::get).delete(compilations::purge))
        .route("/v1/artifacts/{key}/{kind}", get(artifacts::artifact))
        .route("/v1/jobs/{id}", get(jobs::get).delete(jobs::cancel))
        .route("/v1/workers", get(jobs::workers))
        .route("/v1/jobs/{id}/events", get(jobs::events))
        .route_layer(middleware::from_fn_with_state(state.clone(), crate::auth::authorise));
    let request_id = HeaderName::from_static("x-request-id");
    Router::new()
        .merge(v1)
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .route("/openapi.json", get(openapi))
        .route("/docs", get(docs))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), track))
        .layer(axum::extract::DefaultBodyLimit::max(state.config.max_body_kb.saturating_mul(1024)))
        .layer(CompressionLayer::new())
        .layer(cors(&state.config.cors_origins))
        .layer(TraceLayer::new_for_http())
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
        .with_state(state)
}

fn cors(origins: &str) -> CorsLayer {
    let layer = CorsLayer::new().allow_methods([Method::GET, Method::POST, Method::DELETE]).allow_headers(Any);
    let origins: Vec<&str> = origins.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    if origins.contains(&"*") {
        layer.allow_origin(Any)
    } else {
        let list: Vec<HeaderValue> = origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()).collect();
        layer.allow_origin(AllowOrigin::list(list))
    }
}

/// Metrics per route and the per-request time limit.
async fn track(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().to_string();
    let route = req.extensions().get::<MatchedPath>().map_or("unmatched".to_string(), |p| p.as_str().to_string());
    let limit = state.config.request_timeout();
    let response = match tokio::time::timeout(limit, next.run(req)).await {
        Ok(r) => r,
        Err(_) => ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "timeout",
            format!(
                "the request took longer than {} s; compiles continue in the background and are cached \
                 (ask again, or use `?async=true`)",
                limit.as_secs()
            ),
        )
        .into_response(),
    };
    state.metrics.request(&method, &route, response.status().as_u16(), started.elapsed().as_secs_f64());
    response
}

async fn not_found(req: Request) -> ApiError {
    ApiError::not_found(format!("no route for {} {}; see /docs for the API", req.method(), req.uri().path()))
}

async fn method_not_allowed(req: Request) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{} is not allowed on {}", req.method(), req.uri().path()),
    )
}

async fn openapi() -> Response {
    Json(ApiDoc::openapi()).into_response()
}

/// Interactive API documentation: a self-contained page (no external
/// scripts) that renders `/openapi.json` and can send each operation.
async fn docs() -> Html<&'static str> {
    Html(include_str!("docs.html"))
}

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
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, header};
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
    modifiers(&SharedResponses),
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

/// What every operation may answer besides its own responses, said once
/// here rather than in each handler's annotation: the layers' errors (504
/// past the request timeout on every route; on `/v1`, 401 and 429 where
/// tokens or a rate limit are configured, 503 when the database or queue
/// fails; 415 for a POST body that is not JSON), the optional bearer token,
/// and the artifact download's content type per kind.
struct SharedResponses;

impl utoipa::Modify for SharedResponses {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
        use utoipa::openapi::{ContentBuilder, HeaderBuilder, ObjectBuilder, Ref, ResponseBuilder, Type};
        let envelope = |description: &str| {
            ResponseBuilder::new().description(description).content(
                "application/json",
                ContentBuilder::new().schema(Some(Ref::from_schema_name("ErrorEnvelope"))).build(),
            )
        };
        let bearer = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(
                "`Authorization: Bearer <token>` on `/v1` when the server has tokens (`WITHLOOP_TOKENS`); \
                 without them every request is anonymous",
            ))
            .build();
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme("bearer", SecurityScheme::Http(bearer));
        let seconds = HeaderBuilder::new()
            .schema(ObjectBuilder::new().schema_type(Type::Integer))
            .description(Some("Seconds until the team's next request is allowed"))
            .build();
        // Each shared response once, under components, referenced by status.
        let shared = [
            ("504", "Timeout", envelope("The request took longer than the server's request timeout")),
            ("401", "Unauthorized", envelope("No token, or not one the server knows (only where it has tokens)")),
            ("429", "RateLimited", envelope("The team's rate limit is reached").header("Retry-After", seconds)),
            ("503", "Unavailable", envelope("The database or the queue is unavailable")),
            (
                "415",
                "UnsupportedMediaType",
                envelope("The body is not `application/json` (`multipart/form-data` for runs)"),
            ),
        ];
        let mut refs = std::collections::HashMap::new();
        for (status, name, response) in shared {
            components.responses.insert(name.to_string(), response.build().into());
            refs.insert(status, utoipa::openapi::RefOr::Ref(Ref::new(format!("#/components/responses/{name}"))));
        }
        for (path, item) in doc.paths.paths.iter_mut() {
            let v1 = path.starts_with("/v1/");
            let operations = [(&mut item.get, false), (&mut item.post, true), (&mut item.delete, false)];
            for (operation, post) in operations {
                let Some(op) = operation.as_mut() else { continue };
                let mut add = |status: &str| {
                    op.responses.responses.entry(status.to_string()).or_insert_with(|| refs[status].clone());
                };
                add("504");
                if v1 {
                    add("401");
                    add("429");
                    add("503");
                    // The token is optional: a server without tokens takes anonymous requests.
                    op.security = Some(vec![
                        SecurityRequirement::default(),
                        SecurityRequirement::new("bearer", Vec::<String>::new()),
                    ]);
                }
                if post {
                    add("415");
                }
            }
        }
        // Each kind is served with its own type (`ArtifactLink.content_type`).
        let artifact = doc.paths.paths.get_mut("/v1/artifacts/{key}/{kind}").and_then(|i| i.get.as_mut());
        if let Some(utoipa::openapi::RefOr::T(ok)) = artifact.and_then(|op| op.responses.responses.get_mut("200")) {
            ok.content.clear();
            for kind in withloop_worker::ArtifactKind::ALL {
                let media = kind.content_type().split(';').next().unwrap_or_default().to_string();
                let bytes = ObjectBuilder::new()
                    .schema_type(Type::String)
                    .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(utoipa::openapi::KnownFormat::Binary)));
                ok.content.entry(media).or_insert_with(|| ContentBuilder::new().schema(Some(bytes)).build());
            }
        }
    }
}

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
        .layer(middleware::map_response(weak_etag_when_encoded))
        .layer(cors(&state.config.cors_origins))
        .layer(TraceLayer::new_for_http())
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
        .with_state(state)
}

/// A strong ETag names one representation, bytes and all (RFC 9110
/// §8.8.1): an artifact the compression layer gzipped is another, so its ETag
/// becomes weak there. `If-None-Match` compares weakly, so either form gets
/// its 304 ([`artifacts::artifact`]).
async fn weak_etag_when_encoded(mut response: Response) -> Response {
    if response.headers().contains_key(header::CONTENT_ENCODING) {
        let weak = response
            .headers()
            .get(header::ETAG)
            .and_then(|v| v.to_str().ok())
            .filter(|t| !t.starts_with("W/"))
            .and_then(|t| HeaderValue::from_str(&format!("W/{t}")).ok());
        if let Some(v) = weak {
            response.headers_mut().insert(header::ETAG, v);
        }
    }
    response
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

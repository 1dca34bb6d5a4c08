//! `POST /v1/compile`.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use withloop_worker::cache::CacheOutcome;
use withloop_worker::request::{CompileRequest, CompileResponse, GenericFallback, Prepared, prepare};

use crate::error::{ApiError, ApiJson, ErrorEnvelope};
use crate::state::AppState;
use withloop_worker::jobs::JobSpec;

/// `?async=true`.
#[derive(Clone, Copy, Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct CompileQuery {
    /// Answer at once with 202 and a job to follow.
    #[serde(default, rename = "async")]
    pub run_async: bool,
}

/// The answer to an asynchronous compile.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct JobAccepted {
    pub job: String,
    pub key: String,
    /// `/v1/jobs/{job}`.
    pub job_url: String,
    /// `/v1/jobs/{job}/events` (server-sent events).
    pub events_url: String,
}

/// Compile a program (or fetch it from the cache).
#[utoipa::path(
    post,
    path = "/v1/compile",
    tag = "compile",
    params(CompileQuery),
    request_body = CompileRequest,
    responses(
        (status = 200, description = "Compiled, or served from the cache", body = CompileResponse),
        (status = 202, description = "Accepted as a job (`?async=true`)", body = JobAccepted),
        (status = 400, description = "The request is malformed", body = ErrorEnvelope),
        (status = 413, description = "The body is too large", body = ErrorEnvelope),
        (status = 422, description = "The program has errors, or uses what withloop does not support", body = ErrorEnvelope),
        (status = 500, description = "A compiler bug", body = ErrorEnvelope),
    )
)]
pub async fn compile(
    State(state): State<AppState>,
    query: Result<Query<CompileQuery>, axum::extract::rejection::QueryRejection>,
    ApiJson(request): ApiJson<CompileRequest>,
) -> Result<Response, ApiError> {
    let Query(query) =
        query.map_err(|e| ApiError::invalid(format!("the query string is not valid: {}", e.body_text())))?;
    let prepared = prepare(&request)?;
    if query.run_async {
        let key = prepared.key.clone();
        let job = submit(&state, &request, prepared, request.bypass_cache).await?;
        let accepted =
            JobAccepted { key, job_url: format!("/v1/jobs/{job}"), events_url: format!("/v1/jobs/{job}/events"), job };
        return Ok((StatusCode::ACCEPTED, Json(accepted)).into_response());
    }
    if request.progressive
        && !request.bypass_cache
        && let Some(response) = progressive(&state, &request, &prepared).await?
    {
        return Ok(Json(response).into_response());
    }
    let (compiled, outcome) = state.compiler.compile_cached(prepared, request.bypass_cache, None).await?;
    if outcome == CacheOutcome::Memory {
        let body = CompileResponse::memory_hit_body(&compiled)
            .map_err(|e| ApiError::internal(format!("serialising the compilation: {e}")))?;
        return Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response());
    }
    Ok(Json(CompileResponse::of(&compiled, outcome)).into_response())
}

/// Starts a job compiling `prepared`: on the Postgres queue when the server
/// has a database, else as a task of this process. Returns the job id.
async fn submit(
    state: &AppState,
    request: &CompileRequest,
    prepared: Prepared,
    bypass: bool,
) -> Result<String, ApiError> {
    if let Some(queue) = &state.queue {
        let spec = JobSpec::Compile { request: request.clone(), bypass_cache: bypass };
        return queue.enqueue(&spec, Some(&prepared.key)).await.map_err(ApiError::job_queue);
    }
    let job = state.jobs.create(&prepared.key, "compile");
    let (state, running) = (state.clone(), job.clone());
    tokio::spawn(async move {
        let progress_job = running.clone();
        let progress: withloop_worker::compiler::Progress = Arc::new(move |phase| progress_job.phase(phase));
        match state.compiler.compile_cached(prepared, bypass, Some(progress)).await {
            Ok((compiled, outcome)) => {
                let response = CompileResponse::of(&compiled, outcome);
                running.succeed(serde_json::to_value(response).unwrap_or_default());
            }
            Err(e) => running.fail(e.body),
        }
    });
    Ok(job.id.clone())
}

/// The progressive lookup: the exact build if cached; else the generic build
/// if cached, with the exact one compiling as a job; else `None`.
async fn progressive(
    state: &AppState,
    request: &CompileRequest,
    prepared: &Prepared,
) -> Result<Option<CompileResponse>, ApiError> {
    let Some(generic) = prepared.generic() else { return Ok(None) };
    if let Ok(Some((compiled, outcome))) = state.cache.lookup(&prepared.key, &state.metrics).await {
        return Ok(Some(CompileResponse::of(&compiled, outcome)));
    }
    let Ok(Some((compiled, outcome))) = state.cache.lookup(&generic.key, &state.metrics).await else {
        return Ok(None);
    };
    let job = submit(state, request, prepared.clone(), false).await?;
    let mut response = CompileResponse::of(&compiled, outcome);
    response.generic_fallback =
        Some(GenericFallback { requested_key: prepared.key.clone(), job_url: format!("/v1/jobs/{job}"), job });
    Ok(Some(response))
}

//! `POST /v1/compile`.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use withloop_worker::build::{DiagnosticData, PhaseTime, VariantData};
use withloop_worker::{ArtifactKind, Language};

use crate::cache::{CacheOutcome, Compiled};
use crate::error::{ApiError, ApiJson, ErrorEnvelope};
use crate::jobs::Job;
use crate::key::KeyComponents;
use crate::service::{self, Prepared};
use crate::state::AppState;

/// What to compile and how.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompileRequest {
    /// The program's source text.
    pub source: String,
    /// `sac` (default) or `l0`.
    #[serde(default)]
    pub language: Language,
    /// The name diagnostics and reports give the source (default `program.sac`).
    #[serde(default)]
    pub file_name: Option<String>,
    /// Files `#include "name"` may name: name → text.
    #[serde(default)]
    pub includes: BTreeMap<String, String>,
    /// Entry functions to export (default: every function of the program).
    #[serde(default)]
    pub entry: Vec<String>,
    /// Shape hints: function → parameter → SaC type (`"double[1000,1000]"`,
    /// `"double[.,.]"`, `"int[*]"`). Each makes a specialised variant.
    #[serde(default)]
    pub shapes: BTreeMap<String, BTreeMap<String, String>>,
    #[serde(default)]
    pub options: CompileOptions,
    /// Artifacts to produce (default: `report`).
    #[serde(default)]
    pub emit: Vec<ArtifactKind>,
    /// Compile even if the result is cached (the new result replaces it).
    #[serde(default)]
    pub bypass_cache: bool,
    /// When the exact (shape-specialised) build is not cached but the generic
    /// one (same request without `shapes`) is, return the generic one at once,
    /// flagged in `generic_fallback`, and compile the specialised one as a job.
    #[serde(default)]
    pub progressive: bool,
}

/// How to compile.
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompileOptions {
    /// LLVM optimisation level, 0 to 3 (default 3).
    #[serde(default)]
    pub opt_level: Option<u8>,
    /// Optimisation passes to switch off (`wlf`, `ive`, …; see the report's `passes`).
    #[serde(default)]
    pub disable: Vec<String>,
    /// Target triple (default: the server's).
    #[serde(default)]
    pub target: Option<String>,
    /// Target CPU (default: the server's own for its triple, else `generic`).
    #[serde(default)]
    pub cpu: Option<String>,
    /// Target features, `+avx2,-fma`.
    #[serde(default)]
    pub features: Option<String>,
    /// 1: sequential code; otherwise large with-loops are split over threads
    /// at run time (default).
    #[serde(default)]
    pub threads: Option<u32>,
    /// `-D NAME[=VALUE]` for the C preprocessor.
    #[serde(default)]
    pub defines: Vec<String>,
    /// Specialisations per function (default 20).
    #[serde(default)]
    pub max_specialisations: Option<usize>,
}

/// Where to fetch one artifact.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ArtifactLink {
    /// `/v1/artifacts/{key}/{kind}`.
    pub url: String,
    /// BLAKE3 of the bytes (the ETag).
    pub content_hash: String,
    pub size: u64,
    pub content_type: String,
}

/// Served instead of the specialised build while it compiles (`progressive`).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct GenericFallback {
    /// The key of the build that was asked for.
    pub requested_key: String,
    /// The job compiling it.
    pub job: String,
    /// `/v1/jobs/{job}`.
    pub job_url: String,
}

/// A compilation.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct CompileResponse {
    /// The cache key (see `components`).
    pub key: String,
    /// Where the result came from: `miss` (compiled now), `memory`, `database`.
    pub cache: CacheOutcome,
    /// Present when this is the generic build served for a specialised request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generic_fallback: Option<GenericFallback>,
    /// The readable tuple the key hashes.
    pub components: KeyComponents,
    /// Warnings and notes.
    pub diagnostics: Vec<DiagnosticData>,
    /// Exported functions and specialised variants with their C symbols.
    pub variants: Vec<VariantData>,
    /// The optimisation report (schema `withloop.optimisation-report/1`).
    #[schema(value_type = Object)]
    pub report: serde_json::Value,
    /// Artifact kind → where to fetch it.
    pub artifacts: BTreeMap<String, ArtifactLink>,
    /// How long the compilation took when it ran.
    pub compile_ms: f64,
    pub phases: Vec<PhaseTime>,
    /// When it was compiled (milliseconds since the Unix epoch).
    pub created_unix_ms: u64,
}

impl CompileResponse {
    pub fn of(compiled: &Compiled, cache: CacheOutcome) -> CompileResponse {
        let meta = &compiled.meta;
        CompileResponse {
            key: meta.key.clone(),
            cache,
            generic_fallback: None,
            components: meta.components.clone(),
            diagnostics: meta.diagnostics.clone(),
            variants: meta.variants.clone(),
            report: meta.report.clone(),
            artifacts: meta
                .artifacts
                .iter()
                .map(|a| {
                    (
                        a.kind.name().to_string(),
                        ArtifactLink {
                            url: format!("/v1/artifacts/{}/{}", meta.key, a.kind.name()),
                            content_hash: a.content_hash.clone(),
                            size: a.size,
                            content_type: a.content_type.clone(),
                        },
                    )
                })
                .collect(),
            compile_ms: meta.compile_ms,
            phases: meta.phases.clone(),
            created_unix_ms: meta.created_unix_ms,
        }
    }
}

/// `?async=true`.
#[derive(Clone, Copy, Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
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
    let prepared = service::prepare(&request)?;
    if query.run_async {
        let job = start_job(&state, prepared, request.bypass_cache);
        let accepted = JobAccepted {
            job: job.id.clone(),
            key: job.key.clone(),
            job_url: format!("/v1/jobs/{}", job.id),
            events_url: format!("/v1/jobs/{}/events", job.id),
        };
        return Ok((StatusCode::ACCEPTED, Json(accepted)).into_response());
    }
    if request.progressive && !request.bypass_cache {
        if let Some(response) = progressive(&state, &prepared).await {
            return Ok(Json(response).into_response());
        }
    }
    let (compiled, outcome) = service::compile_cached(&state, prepared, request.bypass_cache, None).await?;
    Ok(Json(CompileResponse::of(&compiled, outcome)).into_response())
}

/// Starts a job compiling `prepared` in the background.
fn start_job(state: &AppState, prepared: Prepared, bypass: bool) -> Arc<Job> {
    let job = state.jobs.create(&prepared.key);
    let (state, running) = (state.clone(), job.clone());
    tokio::spawn(async move {
        match service::compile_cached(&state, prepared, bypass, Some(running.clone())).await {
            Ok((compiled, outcome)) => {
                let response = CompileResponse::of(&compiled, outcome);
                running.succeed(serde_json::to_value(response).unwrap_or_default());
            }
            Err(e) => running.fail(e.body),
        }
    });
    job
}

/// The progressive lookup: the exact build if cached; else the generic build
/// if cached, with the exact one compiling as a job; else `None`.
async fn progressive(state: &AppState, prepared: &Prepared) -> Option<CompileResponse> {
    let generic = prepared.generic()?;
    if let Ok(Some((compiled, outcome))) = state.cache.lookup(&prepared.key, &state.metrics).await {
        return Some(CompileResponse::of(&compiled, outcome));
    }
    let (compiled, outcome) = state.cache.lookup(&generic.key, &state.metrics).await.ok()??;
    let job = start_job(state, prepared.clone(), false);
    let mut response = CompileResponse::of(&compiled, outcome);
    response.generic_fallback = Some(GenericFallback {
        requested_key: prepared.key.clone(),
        job_url: format!("/v1/jobs/{}", job.id),
        job: job.id.clone(),
    });
    Some(response)
}

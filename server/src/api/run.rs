//! `POST /v1/run`: run an entry of a program in a sandboxed child process.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{FromRequest, Multipart, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use withloop_worker::failure::Failure;
use withloop_worker::jobs::JobSpec;
use withloop_worker::request::{CompileRequest, prepare};
use withloop_worker::run::{RunRequest, RunResponse, run_sandboxed, runner};

use crate::api::compile::{CompileQuery, JobAccepted};
use crate::error::{ApiError, ApiJson, ErrorEnvelope};
use crate::state::AppState;

/// The compile request a run names: given, or the one behind `key`.
async fn program(state: &AppState, request: &RunRequest) -> Result<CompileRequest, ApiError> {
    match (&request.key, &request.compile) {
        (Some(_), Some(_)) => Err(ApiError::invalid("give either `key` or `compile`, not both")),
        (None, None) => {
            Err(ApiError::invalid("give the program: `compile` (a compile request) or `key` (a compilation)"))
        }
        (None, Some(c)) => Ok(c.clone()),
        (Some(key), None) => {
            let unknown =
                || ApiError::not_found(format!("no compilation has the key {key} (it may have been evicted)"));
            if let Some(c) = state.cache.in_memory(key).await {
                return c.meta.request.clone().ok_or_else(unknown);
            }
            let store = state.cache.store().ok_or_else(unknown)?;
            let meta = store.metadata(key).await.map_err(ApiError::cache_database)?;
            meta.and_then(|m| m.request).ok_or_else(unknown)
        }
    }
}

/// Run a program's entry function on arguments, in a separate process with
/// limits (wall time, CPU time, memory, output). The program is compiled
/// through the cache first (compile errors are 422 before anything runs).
/// Errors of the run itself: `runtime_error` (with the located diagnostic),
/// `time_limit`, `memory_limit`, `output_limit` (422), `crashed` (500).
#[utoipa::path(
    post,
    path = "/v1/run",
    tag = "run",
    params(CompileQuery),
    request_body(
        content(
            (RunRequest = "application/json"),
            (RunRequest = "multipart/form-data"),
        ),
        description = "JSON, or multipart: a part `request` (JSON) and `.npy` parts that arguments \
                       name as `{\"npy_part\": \"<part>\"}`"
    ),
    responses(
        (status = 200, description = "The results", body = RunResponse),
        (status = 202, description = "Accepted as a job (`?async=true`)", body = JobAccepted),
        (status = 400, description = "The request is malformed", body = ErrorEnvelope),
        (status = 404, description = "No compilation has the key", body = ErrorEnvelope),
        (status = 413, description = "The body is too large", body = ErrorEnvelope),
        (status = 422, description = "Compile error, run-time error or a limit reached", body = ErrorEnvelope),
        (status = 500, description = "The run crashed (a withloop bug)", body = ErrorEnvelope),
    )
)]
pub async fn run(
    State(state): State<AppState>,
    query: Result<Query<CompileQuery>, axum::extract::rejection::QueryRejection>,
    body: Request,
) -> Result<Response, ApiError> {
    let Query(query) =
        query.map_err(|e| ApiError::invalid(format!("the query string is not valid: {}", e.body_text())))?;
    let multipart = body
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("multipart/form-data"));
    let mut request = if multipart {
        let form = Multipart::from_request(body, &state).await.map_err(|e| form_error(e.status(), e.body_text()))?;
        from_form(form).await?
    } else {
        let ApiJson(request) = ApiJson::<RunRequest>::from_request(body, &state).await?;
        request
    };
    if request.target != "cpu" {
        return Err(ApiError::invalid(format!(
            "there is no `{}` target; runs go to `cpu` workers (GPU workers are not available yet)",
            request.target
        )));
    }
    request.limits.within(&state.config.max_run_limits())?;
    let mut compile = program(&state, &request).await?;
    // An L0 program with `main` exports only `main` by default: a run of
    // another function given with its program exports that one.
    let l0 = compile.source_language() == withloop_worker::Language::L0;
    if l0 && request.key.is_none() && compile.entry.is_empty() && request.entry != "main" {
        compile.entry = vec![request.entry.clone()];
    }
    let prepared = prepare(&compile)?;
    let (compiled, _) = state.compiler.compile_cached(prepared, false, None).await?;
    let key = compiled.meta.key.clone();
    request.compile = Some(compiled.meta.request.clone().unwrap_or(compile));
    request.key = None;
    if query.run_async {
        let job = submit(&state, request, key.clone()).await?;
        let accepted =
            JobAccepted { key, job_url: format!("/v1/jobs/{job}"), events_url: format!("/v1/jobs/{job}/events"), job };
        return Ok((StatusCode::ACCEPTED, Json(accepted)).into_response());
    }
    let path = runner(state.config.runner.as_deref())?;
    // A synchronous run is not cancellable: the client closing the connection ends it.
    let (_keep, never) = tokio::sync::watch::channel(false);
    let _slot = run_slot(&state).await?;
    let response = run_sandboxed(&path, &key, &request, never).await?;
    Ok(Json(response).into_response())
}

/// A multipart body that could not be read: 413 `payload_too_large` past the
/// body limit (as a JSON body), else 400.
fn form_error(status: StatusCode, text: String) -> ApiError {
    if status == StatusCode::PAYLOAD_TOO_LARGE { ApiError::payload_too_large() } else { ApiError::invalid(text) }
}

/// A multipart run: the part `request` is the JSON request; every other part
/// is a `.npy` file that arguments name as `{"npy_part": "<part name>"}`.
async fn from_form(mut form: Multipart) -> Result<RunRequest, ApiError> {
    let mut json = None;
    let mut files: HashMap<String, Vec<u8>> = HashMap::new();
    while let Some(field) = form.next_field().await.map_err(|e| form_error(e.status(), e.body_text()))? {
        let name = field.name().unwrap_or_default().to_string();
        let data = field.bytes().await.map_err(|e| form_error(e.status(), e.body_text()))?;
        if name == "request" {
            json = Some(data);
        } else {
            files.insert(name, data.to_vec());
        }
    }
    let json =
        json.ok_or_else(|| ApiError::invalid("a multipart run needs a part named `request` (the JSON request)"))?;
    let mut request: RunRequest = serde_json::from_slice(&json)
        .map_err(|e| ApiError::invalid(format!("the `request` part is not valid: {e}")))?;
    for (i, arg) in request.args.iter_mut().enumerate() {
        let Some(part) = arg.get("npy_part").and_then(|p| p.as_str()).map(str::to_string) else { continue };
        let bytes = files.remove(&part).ok_or_else(|| {
            ApiError::invalid(format!("args[{i}] names the part `{part}`, which the request does not have"))
        })?;
        *arg = serde_json::json!({ "npy": base64::engine::general_purpose::STANDARD.encode(bytes) });
    }
    Ok(request)
}

/// A slot to run a program in: at most `--max-runs` children at once.
async fn run_slot(state: &AppState) -> Result<tokio::sync::OwnedSemaphorePermit, Failure> {
    state.runs.clone().acquire_owned().await.map_err(|_| Failure::transient("the server is shutting down"))
}

/// Queues a run job: on Postgres with a database, else as a task here.
async fn submit(state: &AppState, request: RunRequest, key: String) -> Result<String, ApiError> {
    if let Some(queue) = &state.queue {
        let spec = JobSpec::Run { request, key: key.clone() };
        return queue.enqueue(&spec, Some(&key)).await.map_err(ApiError::job_queue);
    }
    let path = runner(state.config.runner.as_deref())?;
    let job = state.jobs.create(&key, "run");
    let running = job.clone();
    let state = state.clone();
    tokio::spawn(async move {
        // The job stays queued until a run slot is free (or it is cancelled).
        let mut cancelled = running.cancellation();
        let slot = tokio::select! {
            slot = run_slot(&state) => slot,
            () = async { let _ = cancelled.wait_for(|c| *c).await; } => return,
        };
        let _slot = match slot {
            Ok(slot) => slot,
            Err(f) => return running.fail(f.body),
        };
        running.phase("run".into());
        match run_sandboxed(&path, &key, &request, running.cancellation()).await {
            Ok(response) => running.succeed(serde_json::to_value(response).unwrap_or_default()),
            Err(e) => running.fail(e.body),
        }
    });
    Ok(job.id.clone())
}

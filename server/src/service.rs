//! Compiling through the cache: request → key → memory → (single flight:
//! database → compile on a compile thread → both tiers).
//!
//! Identical requests that arrive while one is compiling join that compile
//! (single flight): the compile runs in its own task, so it finishes and is
//! cached even when every request waiting for it has gone away.

use std::collections::{BTreeMap, BTreeSet};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use bytes::Bytes;
use compiler_core::diagnostics::ErrorClass;
use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};
use withloop_worker::ArtifactKind;
use withloop_worker::build::{BuildError, BuildOutput, BuildRequest, canonical_hint};

use crate::api::compile::CompileRequest;
use crate::cache::{ArtifactInfo, CacheOutcome, CompilationMeta, Compiled};
use crate::error::ApiError;
use crate::jobs::Job;
use crate::key::{CACHE_FORMAT, KeyComponents, TargetComponents, compiler_id, content_hash, normalise_source};
use crate::metrics::Lookup;
use crate::state::AppState;

/// A compile everyone asking for the same key waits on.
pub(crate) type Flight = Shared<BoxFuture<'static, Result<(Arc<Compiled>, CacheOutcome), ApiError>>>;

/// A request made ready: what to build and under which key.
#[derive(Clone, Debug)]
pub struct Prepared {
    pub build: BuildRequest,
    pub components: KeyComponents,
    pub key: String,
}

impl Prepared {
    /// The same request without shape hints (the generic build), if it had any.
    pub fn generic(&self) -> Option<Prepared> {
        if self.build.shapes.is_empty() {
            return None;
        }
        let mut g = self.clone();
        g.build.shapes.clear();
        g.components.shapes.clear();
        g.key = g.components.key();
        Some(g)
    }
}

/// Checks a request and computes its key.
pub fn prepare(request: &CompileRequest) -> Result<Prepared, ApiError> {
    let file_name = request.file_name.clone().unwrap_or_else(|| "program.sac".to_string());
    if file_name.is_empty() || file_name.contains(['/', '\\', '\0']) || file_name.len() > 200 {
        return Err(ApiError::invalid("`file_name` must be a plain file name such as `relax.sac`"));
    }
    let options = &request.options;
    let opt_level = options.opt_level.unwrap_or(3);
    if opt_level > 3 {
        return Err(ApiError::invalid(format!("`options.opt_level` is {opt_level}; it must be 0, 1, 2 or 3")));
    }
    let known = compiler_core::opt::pass_names();
    let mut disabled = BTreeSet::new();
    for pass in &options.disable {
        if !known.contains(&pass.as_str()) {
            return Err(ApiError::invalid(format!(
                "`options.disable` names no pass `{pass}`; the passes are: {}",
                known.join(", ")
            )));
        }
        disabled.insert(pass.clone());
    }
    if options.threads == Some(0) {
        return Err(ApiError::invalid("`options.threads` must be at least 1 (1: sequential code)"));
    }
    let mut shapes = BTreeSet::new();
    let mut bad_hints = Vec::new();
    for (function, params) in &request.shapes {
        for (param, ty) in params {
            match canonical_hint(&format!("{function}.{param}={ty}")) {
                Ok(h) => {
                    shapes.insert(h);
                }
                Err(d) => bad_hints.push(*d),
            }
        }
    }
    if !bad_hints.is_empty() {
        return Err(ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "compile_error", "a shape hint is not a SaC type")
            .with_diagnostics(bad_hints));
    }
    let mut emit: BTreeSet<ArtifactKind> = request.emit.iter().copied().collect();
    if emit.is_empty() {
        emit.insert(ArtifactKind::Report);
    }
    let codegen = withloop_codegen::Options {
        opt_level,
        triple: options.target.clone(),
        cpu: options.cpu.clone(),
        features: options.features.clone(),
        parallel: options.threads != Some(1),
        threads: None,
        parallel_min: None,
    };
    let spec = withloop_codegen::target_spec(&codegen);
    if options.target.is_some() || options.cpu.is_some() || options.features.is_some() {
        withloop_codegen::target_machine(&spec, &codegen)
            .map_err(|e| ApiError::invalid(format!("the target cannot be compiled for: {e}")))?;
    }
    let host = withloop_codegen::target_spec(&withloop_codegen::Options::default());
    if emit.contains(&ArtifactKind::Shared) && spec.triple != host.triple {
        return Err(ApiError::invalid(format!(
            "shared libraries are linked for the server's own target ({}) only; ask for `object` for `{}`",
            host.triple, spec.triple
        )));
    }
    let mut entries: Vec<String> = request.entry.clone();
    entries.sort();
    entries.dedup();
    let source = normalise_source(&request.source);
    let includes: BTreeMap<String, String> =
        request.includes.iter().map(|(name, text)| (name.clone(), normalise_source(text))).collect();
    let mut option_map = BTreeMap::new();
    option_map.insert("opt_level".to_string(), opt_level.to_string());
    option_map.insert("disable".to_string(), disabled.iter().cloned().collect::<Vec<_>>().join(","));
    option_map.insert("threads".to_string(), options.threads.map_or("auto".to_string(), |t| t.to_string()));
    option_map.insert("defines".to_string(), serde_json::to_string(&options.defines).unwrap_or_default());
    option_map.insert(
        "max_specialisations".to_string(),
        options.max_specialisations.map_or("default".to_string(), |n| n.to_string()),
    );
    let components = KeyComponents {
        format: CACHE_FORMAT,
        compiler: compiler_id(),
        language: request.language.name().to_string(),
        file_name: file_name.clone(),
        source: content_hash(source.as_bytes()),
        includes: includes.iter().map(|(n, t)| (n.clone(), content_hash(t.as_bytes()))).collect(),
        entries: entries.clone(),
        shapes: shapes.iter().cloned().collect(),
        options: option_map,
        target: TargetComponents { triple: spec.triple, cpu: spec.cpu, features: spec.features },
        emit: emit.iter().map(|k| k.name().to_string()).collect(),
    };
    let key = components.key();
    let build = BuildRequest {
        language: request.language,
        file_name,
        source,
        includes,
        defines: options.defines.clone(),
        entries,
        shapes: shapes.into_iter().collect(),
        max_specialisations: options.max_specialisations,
        disabled_passes: disabled,
        codegen,
        emit,
    };
    Ok(Prepared { build, components, key })
}

/// The compilation for `prepared`: from memory, or through the single flight
/// (database, then a compile). `bypass`: compile even if cached (the result
/// replaces the cached one).
pub async fn compile_cached(
    state: &AppState,
    prepared: Prepared,
    bypass: bool,
    job: Option<Arc<Job>>,
) -> Result<(Arc<Compiled>, CacheOutcome), ApiError> {
    if !bypass {
        if let Some(c) = state.cache.in_memory(&prepared.key).await {
            state.metrics.lookup(Lookup::Memory);
            return Ok((c, CacheOutcome::Memory));
        }
    }
    let flight = {
        let mut inflight = state.inflight.lock().unwrap_or_else(|p| p.into_inner());
        match inflight.get(&prepared.key) {
            Some(f) => {
                state.metrics.coalesced_requests.fetch_add(1, Ordering::Relaxed);
                f.clone()
            }
            None => {
                let key = prepared.key.clone();
                let task = tokio::spawn(fly(state.clone(), prepared, bypass, job));
                let flight: Flight = async move {
                    task.await.unwrap_or_else(|e| Err(ApiError::internal(format!("the compile task failed: {e}"))))
                }
                .boxed()
                .shared();
                inflight.insert(key, flight.clone());
                flight
            }
        }
    };
    flight.await
}

/// The single flight's work; removes itself from the in-flight map when done.
async fn fly(
    state: AppState,
    prepared: Prepared,
    bypass: bool,
    job: Option<Arc<Job>>,
) -> Result<(Arc<Compiled>, CacheOutcome), ApiError> {
    let key = prepared.key.clone();
    let result = lookup_or_compile(&state, prepared, bypass, job).await;
    state.inflight.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
    result
}

async fn lookup_or_compile(
    state: &AppState,
    prepared: Prepared,
    bypass: bool,
    job: Option<Arc<Job>>,
) -> Result<(Arc<Compiled>, CacheOutcome), ApiError> {
    if bypass {
        state.metrics.lookup(Lookup::Miss);
    } else {
        match state.cache.lookup(&prepared.key, &state.metrics).await {
            Ok(Some(hit)) => return Ok(hit),
            Ok(None) => {}
            // The cache is a cache: a database that fails is logged and
            // compiled around.
            Err(e) => tracing::warn!(key = %prepared.key, error = %e, "cache lookup failed; compiling"),
        }
    }
    state.metrics.queue_depth.fetch_add(1, Ordering::Relaxed);
    let permit = state.compile_slots.clone().acquire_owned().await;
    state.metrics.queue_depth.fetch_sub(1, Ordering::Relaxed);
    let permit = permit.map_err(|_| ApiError::internal("the server is shutting down"))?;
    state.metrics.compiles_running.fetch_add(1, Ordering::Relaxed);
    let started = Instant::now();
    let output = run_build(prepared.build.clone(), job).await;
    state.metrics.compiles_running.fetch_sub(1, Ordering::Relaxed);
    drop(permit);
    let seconds = started.elapsed().as_secs_f64();
    state.metrics.compiled(seconds, output.is_ok());
    let output = output.map_err(build_error)?;
    let compiled = Arc::new(compiled(&prepared, output, seconds * 1e3));
    if let Err(e) = state.cache.insert(compiled.clone()).await {
        tracing::warn!(key = %prepared.key, error = %e, "storing the compilation in the database failed");
    }
    Ok((compiled, CacheOutcome::Miss))
}

/// Runs the compiler on a thread of its own (deep recursion in the front end
/// needs a large stack; a panic becomes a compiler-bug error).
async fn run_build(build: BuildRequest, job: Option<Arc<Job>>) -> Result<BuildOutput, BuildError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new().name("withloop-compile".into()).stack_size(256 << 20).spawn(move || {
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let mut progress = |phase: withloop_worker::Phase| {
                if let Some(job) = &job {
                    job.phase(phase.name());
                }
            };
            withloop_worker::build(&build, &mut progress)
        }));
        let result = result.unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "no message".to_string());
            Err(BuildError::bug(format!("the compiler panicked: {what}")))
        });
        let _ = tx.send(result);
    });
    if let Err(e) = spawned {
        return Err(BuildError::bug(format!("cannot start a compile thread: {e}")));
    }
    rx.await.unwrap_or_else(|_| Err(BuildError::bug("the compile thread ended without a result".into())))
}

fn build_error(e: BuildError) -> ApiError {
    let (status, code) = match e.class() {
        ErrorClass::User => (StatusCode::UNPROCESSABLE_ENTITY, "compile_error"),
        ErrorClass::Limitation => (StatusCode::UNPROCESSABLE_ENTITY, "compiler_limitation"),
        ErrorClass::Bug => (StatusCode::INTERNAL_SERVER_ERROR, "compiler_bug"),
    };
    ApiError::new(status, code, e.to_string()).with_diagnostics(e.diagnostics)
}

fn compiled(prepared: &Prepared, output: BuildOutput, compile_ms: f64) -> Compiled {
    let mut bytes = BTreeMap::new();
    let mut artifacts = Vec::new();
    for (kind, data) in output.artifacts {
        artifacts.push(ArtifactInfo {
            kind,
            content_hash: content_hash(&data),
            size: data.len() as u64,
            content_type: kind.content_type().to_string(),
        });
        bytes.insert(kind, Bytes::from(data));
    }
    let created_unix_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    Compiled {
        meta: CompilationMeta {
            key: prepared.key.clone(),
            components: prepared.components.clone(),
            created_unix_ms,
            compile_ms,
            phases: output.phases,
            diagnostics: output.diagnostics,
            variants: output.variants,
            report: output.report,
            artifacts,
        },
        bytes,
    }
}

//! Compile requests: what clients send (the API's `POST /v1/compile` body and
//! the compile job's payload), how a request becomes a build with a cache key
//! ([`prepare`]), and the response a compilation is reported with.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::build::{BuildRequest, DiagnosticData, PhaseTime, VariantData, canonical_hint};
use crate::cache::{CacheOutcome, Compiled};
use crate::failure::{Failure, FailureKind};
use crate::key::{CACHE_FORMAT, KeyComponents, TargetComponents, compiler_id, content_hash, normalise_source};
use crate::{ArtifactKind, Language};

/// What to compile and how.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompileRequest {
    /// The program's source text.
    pub source: String,
    /// `sac` or `l0` (default: `l0` for a `file_name` ending in `.l0`, else `sac`).
    #[serde(default)]
    pub language: Option<Language>,
    /// The name diagnostics and reports give the source (default `program.sac`,
    /// `program.l0` for L0).
    #[serde(default)]
    pub file_name: Option<String>,
    /// Files `#include "name"` may name: name → text.
    #[serde(default)]
    pub includes: BTreeMap<String, String>,
    /// Entry functions to export (default: every function of the program; for
    /// L0, `main` where the program has one).
    /// Functions they do not call are neither type-checked nor compiled.
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
#[derive(Clone, Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompileOptions {
    /// LLVM optimisation level, 0 to 3 (default 3).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 3)]
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
    #[schema(minimum = 1)]
    pub threads: Option<u32>,
    /// Combine floating-point folds strictly in index order (bit-identical to
    /// the interpreter on one thread). Default `false`: `+` and `*` folds may be
    /// reassociated and vectorised, a register tile's multiply-add steps fused
    /// (FMA) (SaC leaves a fold's order open).
    #[serde(default)]
    pub exact_folds: Option<bool>,
    /// Vectorised loops call glibc's vector `exp`, `log`, `sin`, `cos`, `pow`
    /// (libmvec, results within 4 ulp; x86-64 Linux targets; objects then link
    /// with `-lmvec`). Default `true`; `false`: the scalar functions per lane.
    #[serde(default)]
    pub vector_math: Option<bool>,
    /// `-D NAME[=VALUE]` for the C preprocessor.
    #[serde(default)]
    pub defines: Vec<String>,
    /// Specialisations per function (default 20).
    #[serde(default)]
    pub max_specialisations: Option<usize>,
    /// Compile generic code for every entry (default `true`). `false`: an
    /// entry with shape hints gets its hinted instances only, as JAX's `jit`
    /// compiles one shape: less to compile; arguments no hinted instance
    /// accepts fail at run time (R0004) instead of running generic code. An
    /// entry without hints keeps its generic code.
    #[serde(default)]
    pub generic: Option<bool>,
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
    /// The JSON body of `CompileResponse::of(compiled, Memory)`, serialised
    /// once per cached compilation and kept with it: every memory-tier hit
    /// on a compilation answers the same bytes, and cloning and serialising
    /// the report for each (its strings escaped anew) was a fifth of a hit's
    /// CPU under load.
    pub fn memory_hit_body(compiled: &Compiled) -> serde_json::Result<bytes::Bytes> {
        if let Some(body) = compiled.memory_hit_body.get() {
            return Ok(body.clone());
        }
        let body = serde_json::to_vec(&CompileResponse::of(compiled, CacheOutcome::Memory))?;
        Ok(compiled.memory_hit_body.get_or_init(|| body.into()).clone())
    }

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

/// A request made ready: what to build and under which key.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// The request as it was keyed (sources normalised, cache flags off): what
    /// a run by key compiles again.
    pub request: CompileRequest,
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
        g.request.shapes.clear();
        g.build.shapes.clear();
        g.components.shapes.clear();
        // Without hints nothing is left out: the same build as the default's.
        g.build.generic = true;
        g.request.options.generic = None;
        g.components.options.remove("generic");
        g.key = g.components.key();
        Some(g)
    }
}

impl CompileRequest {
    /// `language`, else `l0` for a file name ending in `.l0`, else `sac`.
    pub fn source_language(&self) -> Language {
        self.language.unwrap_or(match &self.file_name {
            Some(name) if name.ends_with(".l0") => Language::L0,
            _ => Language::Sac,
        })
    }
}

/// Checks a request and computes its key.
pub fn prepare(request: &CompileRequest) -> Result<Prepared, Failure> {
    let language = request.source_language();
    let file_name = request.file_name.clone().unwrap_or_else(|| format!("program.{}", language.name()));
    if file_name.is_empty() || file_name.contains(['/', '\\', '\0']) || file_name.len() > 200 {
        return Err(Failure::invalid("`file_name` must be a plain file name such as `relax.sac`"));
    }
    if language == Language::L0 {
        // L0 has no preprocessor: what these would do, nothing does.
        if !request.options.defines.is_empty() {
            return Err(Failure::invalid("`options.defines` is for SaC's preprocessor; L0 has none"));
        }
        if !request.includes.is_empty() {
            return Err(Failure::invalid("`includes` are for SaC's `#include`; L0 has no preprocessor"));
        }
    }
    // Text only: a NUL is no character of a program (and the database's
    // `jsonb`, which keeps requests and jobs, cannot hold one).
    let texts = std::iter::once(("source".to_string(), &request.source))
        .chain(request.includes.iter().map(|(name, text)| (format!("includes[{name:?}]"), text)))
        .chain(request.options.defines.iter().enumerate().map(|(k, d)| (format!("options.defines[{k}]"), d)));
    for (what, text) in texts {
        if let Some(at) = text.find('\0') {
            let line = text[..at].matches('\n').count() + 1;
            let column = text[..at].rfind('\n').map_or(at, |nl| at - nl - 1) + 1;
            return Err(Failure::invalid(format!("`{what}` holds a NUL character (line {line}, column {column})")));
        }
    }
    if request.includes.keys().any(|name| name.contains('\0')) {
        return Err(Failure::invalid("an include's name holds a NUL character"));
    }
    let options = &request.options;
    let opt_level = options.opt_level.unwrap_or(3);
    if opt_level > 3 {
        return Err(Failure::invalid(format!("`options.opt_level` is {opt_level}; it must be 0, 1, 2 or 3")));
    }
    let known = compiler_core::opt::pass_names();
    let mut disabled = BTreeSet::new();
    for pass in &options.disable {
        if !known.contains(&pass.as_str()) {
            return Err(Failure::invalid(format!(
                "`options.disable` names no pass `{pass}`; the passes are: {}",
                known.join(", ")
            )));
        }
        disabled.insert(pass.clone());
    }
    if options.threads == Some(0) {
        return Err(Failure::invalid("`options.threads` must be at least 1 (1: sequential code)"));
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
        return Err(Failure::new(FailureKind::User, "compile_error", "a shape hint is not a SaC type")
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
        stream_min: None,
        exact_folds: options.exact_folds.unwrap_or(false),
        partitions: None,
        vector_math: options.vector_math.unwrap_or(true),
    };
    let spec = withloop_codegen::target_spec(&codegen);
    if options.target.is_some() || options.cpu.is_some() || options.features.is_some() {
        withloop_codegen::target_machine(&spec, &codegen)
            .map_err(|e| Failure::invalid(format!("the target cannot be compiled for: {e}")))?;
    }
    let host = withloop_codegen::host_spec();
    if emit.contains(&ArtifactKind::Shared) && spec.triple != host.triple {
        return Err(Failure::invalid(format!(
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
    option_map.insert("exact_folds".to_string(), options.exact_folds.unwrap_or(false).to_string());
    option_map.insert("vector_math".to_string(), options.vector_math.unwrap_or(true).to_string());
    option_map.insert("defines".to_string(), serde_json::to_string(&options.defines).unwrap_or_default());
    option_map.insert(
        "max_specialisations".to_string(),
        options.max_specialisations.map_or("default".to_string(), |n| n.to_string()),
    );
    // Only when set, so that the keys of every other request stay as they were.
    let generic = options.generic.unwrap_or(true);
    if !generic {
        option_map.insert("generic".to_string(), "false".to_string());
    }
    let components = KeyComponents {
        format: CACHE_FORMAT,
        compiler: compiler_id(),
        language: language.name().to_string(),
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
        language,
        file_name,
        source,
        includes,
        defines: options.defines.clone(),
        entries,
        shapes: shapes.into_iter().collect(),
        max_specialisations: options.max_specialisations,
        generic,
        disabled_passes: disabled,
        codegen,
        emit,
    };
    let mut keyed = request.clone();
    keyed.source = build.source.clone();
    keyed.includes = build.includes.clone();
    keyed.bypass_cache = false;
    keyed.progressive = false;
    Ok(Prepared { request: keyed, build, components, key })
}

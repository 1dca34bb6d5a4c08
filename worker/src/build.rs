//! One compile job: source text in memory → diagnostics, variants, the
//! optimisation report and the requested artifacts.
//!
//! ```text
//! BuildRequest { source: "int[.] neg(int[.] a) { … }", shapes: ["neg.a=int[1000]"],
//!                emit: {shared, header, report}, … }
//!   → front end (cpp with the request's include files, parse, resolve, infer)
//!   → lowering, entry selection, the optimisation pipeline
//!   → LLVM (object code, then `cc` for the shared library)
//!   → BuildOutput { variants: [neg(int[1000]) -> int[1000] as wl_neg__i_1000, …],
//!                   artifacts: [(shared, …), (header, …), (report, …)], … }
//! ```
//!
//! Failures are diagnostics in all three classes (see
//! [`compiler_core::diagnostics::ErrorClass`]): the program's errors, what
//! withloop does not support yet (`L…` codes, e.g. a program the native back end
//! cannot compile) and withloop's own bugs (`B…`). Diagnostics are returned as
//! plain data with their rendered text, so callers can cache and serve them
//! without the source map.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use compiler_core::diagnostics::render::render;
use compiler_core::diagnostics::{self as codes, Diagnostic, ErrorClass, Label, Severity};
use compiler_core::driver::{self, FrontendOptions};
use compiler_core::span::SourceMap;
use compiler_core::syntax::cpp::MemoryLoader;
use compiler_core::{ir, opt};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use withloop_codegen::Output;
use withloop_codegen::link::LinkKind;

/// What a compilation can produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ArtifactKind {
    /// A relocatable object file exporting the C ABI.
    Object,
    /// A shared library (the object linked with withloop's runtime).
    Shared,
    /// The C header declaring the ABI.
    Header,
    /// LLVM IR after LLVM's optimisations.
    LlvmIr,
    /// Target assembly.
    Asm,
    /// The optimisation report (JSON, schema `withloop.optimisation-report/1`).
    Report,
    /// withloop's IR after the optimisation pipeline (text form).
    Ir,
}

impl ArtifactKind {
    pub const ALL: [ArtifactKind; 7] = [
        ArtifactKind::Object,
        ArtifactKind::Shared,
        ArtifactKind::Header,
        ArtifactKind::LlvmIr,
        ArtifactKind::Asm,
        ArtifactKind::Report,
        ArtifactKind::Ir,
    ];

    /// The spelling in URLs and JSON (`llvm_ir`).
    pub fn name(self) -> &'static str {
        match self {
            ArtifactKind::Object => "object",
            ArtifactKind::Shared => "shared",
            ArtifactKind::Header => "header",
            ArtifactKind::LlvmIr => "llvm_ir",
            ArtifactKind::Asm => "asm",
            ArtifactKind::Report => "report",
            ArtifactKind::Ir => "ir",
        }
    }

    pub fn parse(name: &str) -> Option<ArtifactKind> {
        ArtifactKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The HTTP content type the artifact is served with.
    pub fn content_type(self) -> &'static str {
        match self {
            ArtifactKind::Object => "application/x-object",
            ArtifactKind::Shared => "application/x-sharedlib",
            ArtifactKind::Header => "text/x-c; charset=utf-8",
            ArtifactKind::LlvmIr => "text/x-llvm; charset=utf-8",
            ArtifactKind::Asm => "text/x-asm; charset=utf-8",
            ArtifactKind::Report => "application/json",
            ArtifactKind::Ir => "text/plain; charset=utf-8",
        }
    }

    /// A file name for downloads, from the program's stem (`relax` → `librelax.so`).
    pub fn file_name(self, stem: &str) -> String {
        match self {
            ArtifactKind::Object => format!("{stem}.o"),
            ArtifactKind::Shared => format!("lib{stem}.so"),
            ArtifactKind::Header => format!("{stem}.h"),
            ArtifactKind::LlvmIr => format!("{stem}.ll"),
            ArtifactKind::Asm => format!("{stem}.s"),
            ArtifactKind::Report => format!("{stem}.report.json"),
            ArtifactKind::Ir => format!("{stem}.wl"),
        }
    }
}

/// The source language.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Language {
    #[default]
    Sac,
    L0,
}

impl Language {
    pub fn name(self) -> &'static str {
        match self {
            Language::Sac => "sac",
            Language::L0 => "l0",
        }
    }
}

/// Everything a compilation depends on.
#[derive(Clone, Debug)]
pub struct BuildRequest {
    pub language: Language,
    /// The name diagnostics and reports use for the source (`prog.sac`).
    pub file_name: String,
    pub source: String,
    /// Files `#include` may name, by exact name.
    pub includes: BTreeMap<String, String>,
    /// `-D NAME[=VALUE]`.
    pub defines: Vec<String>,
    /// Entry functions to export; empty: every user function.
    pub entries: Vec<String>,
    /// Shape hints, `FUNCTION.PARAM=TYPE`.
    pub shapes: Vec<String>,
    pub max_specialisations: Option<usize>,
    /// Generic code for entries with shape hints (`false`: their hinted
    /// instances only, see `driver::leave_out_generic`).
    pub generic: bool,
    /// Optimisation passes switched off.
    pub disabled_passes: BTreeSet<String>,
    pub codegen: withloop_codegen::Options,
    pub emit: BTreeSet<ArtifactKind>,
}

/// A source position, 1-based.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SourceRange {
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub end_line: usize,
    pub end_column: usize,
}

/// A labelled span of a diagnostic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LabelData {
    #[serde(flatten)]
    pub range: SourceRange,
    pub message: String,
    /// The span the diagnostic is about (others explain it).
    pub primary: bool,
}

/// A diagnostic as plain data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DiagnosticData {
    /// `E0302`, `L0001`, …
    pub code: String,
    /// Whose fault: `user` (the program), `limitation` (withloop does not
    /// support it yet) or `bug` (withloop is wrong).
    pub class: String,
    /// `error`, `warning` or `note`.
    pub severity: String,
    pub message: String,
    /// Where the diagnostic points (absent for diagnostics about no place).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<SourceRange>,
    pub labels: Vec<LabelData>,
    pub notes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// The diagnostic rendered as the command line prints it.
    pub rendered: String,
}

impl DiagnosticData {
    pub fn is_error(&self) -> bool {
        self.severity == "error"
    }

    /// `d` as data, located and rendered with `sources`.
    pub fn of(sources: &SourceMap, d: &Diagnostic) -> DiagnosticData {
        let range = |l: &Label| {
            let f = sources.get(l.span.file);
            let (line, column) = f.line_col(l.span.start);
            let (end_line, end_column) = f.line_col(l.span.end);
            SourceRange { file: f.name.to_string(), line, column, end_line, end_column }
        };
        let mut labels = Vec::new();
        if let Some(p) = &d.primary {
            labels.push(LabelData { range: range(p), message: p.message.clone(), primary: true });
        }
        labels.extend(d.secondary.iter().map(|l| LabelData {
            range: range(l),
            message: l.message.clone(),
            primary: false,
        }));
        DiagnosticData {
            code: d.code.id.to_string(),
            class: class_name(d.code.class()).to_string(),
            severity: match d.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
                Severity::Note => "note",
            }
            .to_string(),
            message: d.message.clone(),
            at: d.primary.as_ref().map(range),
            labels,
            notes: d.notes.clone(),
            hint: d.hint.clone(),
            rendered: render(sources, d),
        }
    }

    /// A diagnostic about no place in the source.
    fn unlocated(code: codes::Code, message: String) -> DiagnosticData {
        DiagnosticData {
            code: code.id.to_string(),
            class: class_name(code.class()).to_string(),
            severity: "error".to_string(),
            rendered: format!("error[{}]: {message}\n", code.id),
            message,
            at: None,
            labels: Vec::new(),
            notes: Vec::new(),
            hint: None,
        }
    }
}

fn class_name(class: ErrorClass) -> &'static str {
    match class {
        ErrorClass::User => "user",
        ErrorClass::Limitation => "limitation",
        ErrorClass::Bug => "bug",
    }
}

/// One specialised or generic instance that compiled code exports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct VariantData {
    /// The function's name in the source.
    pub function: String,
    /// `(double[100,100], double) -> double[100,100]`.
    pub signature: String,
    /// withloop's link name of the instance (`scale__d_100_100__d`).
    pub symbol: String,
    /// The C symbol of the instance in object code and shared libraries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub c_symbol: Option<String>,
    /// Why the instance exists: `declared`, `hint`, `call_site` or `wrapper`.
    pub reason: String,
    /// Every parameter's shape is known (AKS): no run-time dispatch or shape
    /// arithmetic remains.
    pub specialised: bool,
}

/// How long one phase took. `pass:NAME` entries break `optimise` down by
/// pass: they are part of it, not added to it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PhaseTime {
    pub phase: String,
    pub ms: f64,
}

/// What a successful compilation produced.
#[derive(Clone, Debug)]
pub struct BuildOutput {
    /// Warnings and notes (errors make the build fail).
    pub diagnostics: Vec<DiagnosticData>,
    pub variants: Vec<VariantData>,
    /// The optimisation report (always made; also an artifact when asked for).
    pub report: serde_json::Value,
    pub artifacts: Vec<(ArtifactKind, Vec<u8>)>,
    pub phases: Vec<PhaseTime>,
}

/// Why a compilation failed: diagnostics, at least one of them an error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildError {
    pub diagnostics: Vec<DiagnosticData>,
}

impl BuildError {
    /// The class of the failure: a bug if any error is one, else a limitation
    /// if any is one, else the user's.
    pub fn class(&self) -> ErrorClass {
        let classes: Vec<&str> = self.diagnostics.iter().filter(|d| d.is_error()).map(|d| d.class.as_str()).collect();
        if classes.contains(&"bug") {
            ErrorClass::Bug
        } else if classes.contains(&"limitation") {
            ErrorClass::Limitation
        } else {
            ErrorClass::User
        }
    }

    /// Every diagnostic rendered, then a summary line.
    pub fn rendered(&self) -> String {
        self.diagnostics.iter().map(|d| d.rendered.as_str()).collect()
    }

    /// A failure that is withloop's fault (a panic, a lost thread, …).
    pub fn bug(message: String) -> BuildError {
        BuildError::single(codes::INTERNAL_ERROR, message)
    }

    fn single(code: codes::Code, message: String) -> BuildError {
        BuildError { diagnostics: vec![DiagnosticData::unlocated(code, message)] }
    }
}

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let errors: Vec<&DiagnosticData> = self.diagnostics.iter().filter(|d| d.is_error()).collect();
        match errors.first() {
            Some(first) if errors.len() == 1 => write!(f, "error[{}]: {}", first.code, first.message),
            Some(first) => write!(f, "error[{}]: {} (and {} more errors)", first.code, first.message, errors.len() - 1),
            None => write!(f, "the compilation failed"),
        }
    }
}

/// Where a build is (reported to `progress` as each phase starts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Frontend,
    Optimise,
    /// An optimisation pass starting its first run.
    Pass(&'static str),
    /// Code generation for one artifact kind.
    Codegen(ArtifactKind),
    Link,
}

impl Phase {
    pub fn name(self) -> String {
        match self {
            Phase::Frontend => "frontend".into(),
            Phase::Optimise => "optimise".into(),
            Phase::Pass(name) => format!("pass:{name}"),
            Phase::Codegen(k) => format!("codegen:{}", k.name()),
            Phase::Link => "link".into(),
        }
    }
}

/// Canonical form of a shape hint (`main.a = double[ 100 ,100 ]` →
/// `main.a=double[100,100]`), or the diagnostic explaining why it is not one.
pub fn canonical_hint(text: &str) -> Result<String, Box<DiagnosticData>> {
    let mut sources = SourceMap::new();
    match driver::parse_hint(&mut sources, text) {
        Ok(h) => Ok(format!("{}.{}={}", h.function, h.param, h.ty)),
        Err(d) => Err(Box::new(DiagnosticData::of(&sources, &d))),
    }
}

/// A program through the front end and the optimiser.
#[derive(Debug)]
pub struct Optimised {
    pub frontend: driver::Frontend,
    pub module: ir::Module,
    pub outcome: opt::Outcome,
    /// Warnings and notes.
    pub diagnostics: Vec<DiagnosticData>,
    pub phases: Vec<PhaseTime>,
}

/// Phase timing.
struct Laps {
    phases: Vec<PhaseTime>,
    clock: Instant,
}

impl Laps {
    fn lap(&mut self, name: &str) {
        let now = Instant::now();
        self.phases.push(PhaseTime { phase: name.to_string(), ms: (now - self.clock).as_secs_f64() * 1e3 });
        self.clock = now;
    }
}

/// Front end, lowering, entry selection and the optimisation pipeline.
pub fn optimise(request: &BuildRequest, progress: &mut dyn FnMut(Phase)) -> Result<Optimised, BuildError> {
    let mut laps = Laps { phases: Vec::new(), clock: Instant::now() };
    progress(Phase::Frontend);
    let options = FrontendOptions {
        defines: request.defines.clone(),
        include_dirs: Vec::new(),
        no_prelude: false,
        shape_hints: request.shapes.clone(),
        max_specialisations: request.max_specialisations,
        language: Some(match request.language {
            Language::Sac => driver::Language::Sac,
            Language::L0 => driver::Language::L0,
        }),
        entries: request.entries.clone(),
    };
    let loader = MemoryLoader { files: request.includes.iter().map(|(k, v)| (k.clone(), v.clone())).collect() };
    let fe = driver::frontend(&request.file_name, &request.source, &loader, &options);
    let diagnostics: Vec<DiagnosticData> = fe.diagnostics.iter().map(|d| DiagnosticData::of(&fe.sources, d)).collect();
    if fe.has_errors() {
        return Err(BuildError { diagnostics });
    }
    let mut module = match &fe.l0 {
        Some(m) => m.clone(),
        None => ir::lower::lower(&fe.program, &fe.typed, &fe.sources),
    };
    driver::select_entries(&mut module, &request.entries, &request.file_name)
        .map_err(|d| BuildError { diagnostics: vec![DiagnosticData::of(&fe.sources, &d)] })?;
    if !request.generic {
        driver::leave_out_generic(&mut module, &fe.typed);
    }
    laps.lap("frontend");

    progress(Phase::Optimise);
    let pipeline = opt::PipelineOptions {
        disabled: request.disabled_passes.clone(),
        register_tile: withloop_codegen::register_tile(&request.codegen),
        matrix_products: withloop_codegen::matrix_products(&request.codegen),
        ..Default::default()
    };
    let mut started: Vec<&'static str> = Vec::new();
    let mut on_pass = |name: &'static str| {
        if !started.contains(&name) {
            started.push(name);
            progress(Phase::Pass(name));
        }
    };
    let outcome = opt::optimise_observed(&mut module, &fe.sources, &pipeline, &mut on_pass).map_err(|broken| {
        BuildError::single(
            codes::INTERNAL_ERROR,
            format!(
                "the `{}` pass left the IR malformed (a compiler bug): {}",
                broken.pass,
                broken.problems.join("; ")
            ),
        )
    })?;
    laps.lap("optimise");
    // The passes' own times go here, not into the report: the report is an
    // artifact served by its content hash, so it must not vary per compile.
    laps.phases.extend(
        outcome
            .passes
            .iter()
            .filter(|p| p.runs > 0)
            .map(|p| PhaseTime { phase: format!("pass:{}", p.name), ms: p.time.as_secs_f64() * 1e3 }),
    );
    Ok(Optimised { frontend: fe, module, outcome, diagnostics, phases: laps.phases })
}

/// Compiles `request`; `progress` hears each phase as it starts.
pub fn build(request: &BuildRequest, progress: &mut dyn FnMut(Phase)) -> Result<BuildOutput, BuildError> {
    let Optimised { frontend: fe, module, outcome, diagnostics, phases } = optimise(request, progress)?;
    let mut laps = Laps { phases, clock: Instant::now() };
    let mut report =
        opt::report::build(&request.file_name, &outcome, &fe.program, &fe.typed, &fe.sources, false, false);
    if fe.l0.is_some() {
        opt::report::add_module_entries(&mut report, &module, &fe.sources);
    }
    opt::report::keep_exported_symbols(&mut report, &module);
    let report_text = report.to_json();
    let report_json: serde_json::Value = serde_json::from_str(&report_text)
        .map_err(|e| BuildError::single(codes::INTERNAL_ERROR, format!("the report is not JSON: {e}")))?;
    let variants = variants(&report);

    let mut artifacts = Vec::new();
    let mut object: Option<Vec<u8>> = None;
    for &kind in &request.emit {
        let bytes = match kind {
            ArtifactKind::Report => report_text.clone().into_bytes(),
            ArtifactKind::Ir => ir::print::module_text(&module).into_bytes(),
            ArtifactKind::Header => withloop_codegen::abi::header(&module, &request.file_name).into_bytes(),
            ArtifactKind::Object | ArtifactKind::Shared => {
                if object.is_none() {
                    progress(Phase::Codegen(ArtifactKind::Object));
                    object = Some(native(&module, &fe.sources, &request.codegen, Output::Object)?);
                    laps.lap("codegen:object");
                }
                let obj = object.as_deref().unwrap_or_default();
                if kind == ArtifactKind::Object {
                    obj.to_vec()
                } else {
                    progress(Phase::Link);
                    let so = withloop_codegen::link::link_bytes(obj, LinkKind::SharedLibrary)
                        .map_err(|e| BuildError::single(codes::INTERNAL_ERROR, e.to_string()))?;
                    laps.lap("link");
                    so
                }
            }
            ArtifactKind::LlvmIr | ArtifactKind::Asm => {
                progress(Phase::Codegen(kind));
                let output = if kind == ArtifactKind::Asm { Output::Assembly } else { Output::LlvmIr };
                let bytes = native(&module, &fe.sources, &request.codegen, output)?;
                laps.lap(&Phase::Codegen(kind).name());
                bytes
            }
        };
        artifacts.push((kind, bytes));
    }
    Ok(BuildOutput { diagnostics, variants, report: report_json, artifacts, phases: laps.phases })
}

fn native(
    module: &ir::Module,
    sources: &SourceMap,
    options: &withloop_codegen::Options,
    output: Output,
) -> Result<Vec<u8>, BuildError> {
    withloop_codegen::compile(module, sources, options, false, output).map_err(|e| {
        let code = match e {
            withloop_codegen::CodegenError::Unsupported(_) => codes::UNSUPPORTED,
            withloop_codegen::CodegenError::Target(_) => codes::BAD_TARGET,
            withloop_codegen::CodegenError::Bug(_) | withloop_codegen::CodegenError::Llvm(_) => codes::INTERNAL_ERROR,
        };
        BuildError::single(code, e.to_string())
    })
}

/// Keeps only the named entries (and their exported variants); the
/// optimiser's dead-function removal drops what nothing else reaches.
fn variants(report: &opt::report::Report) -> Vec<VariantData> {
    report
        .variants
        .iter()
        .filter(|v| !v.library && v.c_symbol.is_some())
        .map(|v| VariantData {
            function: v.function.clone(),
            signature: signature(&v.params, &v.results),
            symbol: v.symbol.clone(),
            c_symbol: v.c_symbol.clone(),
            reason: v.reason.to_string(),
            specialised: v.params.iter().all(|p| !p.contains('.') && !p.contains('*') && !p.contains('+')),
        })
        .collect()
}

/// `(double[.,.], double) -> double[.,.]`: an instance's signature as the API
/// shows it (no results: `void`; several: parenthesised).
pub fn signature(params: &[String], results: &[String]) -> String {
    let results = match results {
        [] => "void".to_string(),
        [one] => one.clone(),
        many => format!("({})", many.join(", ")),
    };
    format!("({}) -> {results}", params.join(", "))
}

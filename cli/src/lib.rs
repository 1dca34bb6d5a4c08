//! The `withloop` command line as a library: the test harness drives the same
//! functions the binary does, so what the tests check is what users get.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use compiler_core::diagnostics::render::{render, render_short};
use compiler_core::diagnostics::{Diagnostic, Severity};
use compiler_core::driver::{self, FrontendOptions};
use compiler_core::interp::{self, EntryError, RunOptions, Value, format};
use compiler_core::span::SourceMap;
use compiler_core::syntax::cpp::SourceLoader;
use compiler_core::{ir, opt};

/// `#include` from the file system: relative to the including file first, then
/// the `-I` directories (only those for `<file>`).
#[derive(Debug, Default, Clone, Copy)]
pub struct FsLoader;

impl SourceLoader for FsLoader {
    fn load(
        &self,
        path: &str,
        angled: bool,
        includer: &str,
        include_dirs: &[String],
    ) -> Result<(String, String), String> {
        let mut tried = Vec::new();
        let mut candidates: Vec<PathBuf> = Vec::new();
        if !angled {
            let base = Path::new(includer).parent().unwrap_or(Path::new(""));
            candidates.push(base.join(path));
        }
        candidates.extend(include_dirs.iter().map(|d| Path::new(d).join(path)));
        for c in candidates {
            match std::fs::read_to_string(&c) {
                Ok(text) => return Ok((c.to_string_lossy().into_owned(), text)),
                Err(_) => tried.push(c.to_string_lossy().into_owned()),
            }
        }
        Err(if tried.is_empty() {
            "no include directories given (-I)".to_string()
        } else {
            format!("looked for: {}", tried.join(", "))
        })
    }
}

/// What to compile and how.
#[derive(Clone, Debug, Default)]
pub struct Invocation {
    pub file: PathBuf,
    pub frontend: FrontendOptions,
    /// Entry function (default `main`).
    pub entry: Option<String>,
    /// `--arg` values in SaC syntax.
    pub args: Vec<String>,
    /// Print the instances chosen (`check --instances`; implied by `--shape`).
    pub list_instances: bool,
    /// List library instances too.
    pub list_library_instances: bool,
    /// Run without the typed program (every call dispatched at run time).
    pub untyped: bool,
    /// `compile --time-phases`: print each compile phase's wall time to stderr.
    pub time_phases: bool,
    /// `compile --no-generic`: entries with shape hints get their hinted
    /// instances only (`driver::leave_out_generic`).
    pub leave_out_generic: bool,
    /// What runs the program.
    pub engine: Engine,
}

/// What `withloop run` runs a program with.
#[derive(Clone, Debug, Default)]
pub enum Engine {
    /// The reference interpreter over the resolved program.
    #[default]
    Reference,
    /// The IR interpreter over the lowered program, before optimisation.
    Ir,
    /// The IR interpreter over the program after the optimisation pipeline.
    Optimised(opt::PipelineOptions),
    /// Native code: the optimised program compiled by LLVM and run in-process.
    Native(opt::PipelineOptions, withloop_codegen::Options),
}

/// A diagnostic with where it points, for tests and tooling.
#[derive(Clone, Debug)]
pub struct Located {
    pub diagnostic: Diagnostic,
    pub file: String,
    pub line: usize,
    pub column: usize,
}

/// Everything a command produced.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Standard output: the program's output, then returned values.
    pub stdout: Vec<u8>,
    /// Rendered diagnostics (standard error).
    pub stderr: String,
    pub diagnostics: Vec<Located>,
    pub exit_code: i32,
    /// Calls the typed program had no static target for (a compiler bug if not 0).
    pub untyped_fallbacks: usize,
}

/// Exit status for compile errors.
pub const EXIT_COMPILE_ERROR: i32 = 1;
/// Exit status for run-time errors.
pub const EXIT_RUNTIME_ERROR: i32 = 2;

fn locate(sources: &SourceMap, d: &Diagnostic) -> Located {
    let (file, line, column) = match d.span() {
        Some(s) => {
            let f = sources.get(s.file);
            let (l, c) = f.line_col(s.start);
            (f.name.to_string(), l, c)
        }
        None => (String::new(), 0, 0),
    };
    Located { diagnostic: d.clone(), file, line, column }
}

fn read(inv: &Invocation, report: &mut Report) -> Option<String> {
    match std::fs::read_to_string(&inv.file) {
        Ok(t) => Some(t),
        Err(e) => {
            report.stderr = format!("error: cannot read `{}`: {e}\n", inv.file.display());
            report.exit_code = EXIT_COMPILE_ERROR;
            None
        }
    }
}

fn add_diagnostics(report: &mut Report, sources: &SourceMap, diagnostics: &[Diagnostic]) {
    for d in diagnostics {
        report.stderr.push_str(&render(sources, d));
        report.diagnostics.push(locate(sources, d));
    }
}

/// `withloop check FILE`: diagnostics only.
pub fn check(inv: &Invocation) -> Report {
    let inv = inv.clone();
    // The front end recurses over expression trees as deep as the parser
    // allows (`MAX_EXPR_DEPTH`): more than a main thread's 8 MiB holds.
    interp::with_large_stack(move || check_here(&inv))
}

fn check_here(inv: &Invocation) -> Report {
    let mut report = Report::default();
    let Some(text) = read(inv, &mut report) else { return report };
    let fe = driver::frontend(&inv.file.to_string_lossy(), &text, &FsLoader, &inv.frontend);
    add_diagnostics(&mut report, &fe.sources, &fe.diagnostics);
    let errors = fe.diagnostics.iter().filter(|d| d.severity == Severity::Error).count();
    if errors > 0 {
        report.stderr.push_str(&format!("error: could not compile `{}` ({errors} error(s))\n", inv.file.display()));
        report.exit_code = EXIT_COMPILE_ERROR;
    } else if inv.list_instances || !inv.frontend.shape_hints.is_empty() {
        let text = driver::instances_text(&fe.program, &fe.typed, &fe.sources, inv.list_library_instances);
        report.stdout.extend_from_slice(text.as_bytes());
    }
    report
}

/// `withloop passes`: the optimisation pipeline, one stage after another, each
/// pass with its one-line description (a pass that runs twice in a stage is
/// listed where it runs, both times: the list is the order things happen in).
pub fn passes() -> Report {
    let mut text = String::new();
    for stage in opt::PIPELINE {
        text.push_str(&format!("stage {} (rounds until nothing changes, at most {}):\n", stage.name, stage.max_rounds));
        let width = stage.passes.iter().map(|p| p.name.len()).max().unwrap_or(0);
        for pass in stage.passes {
            text.push_str(&format!("  {:width$}  {}\n", pass.name, pass.description));
        }
    }
    Report { stdout: text.into_bytes(), ..Default::default() }
}

/// `withloop run FILE`: runs the entry function in the reference interpreter and
/// prints each returned value in SaC syntax after the program's own output.
pub fn run(inv: &Invocation) -> Report {
    let inv = inv.clone();
    // The interpreter needs a deep stack; everything it touches stays on that thread.
    interp::with_large_stack(move || run_here(&inv))
}

fn run_here(inv: &Invocation) -> Report {
    let mut report = Report::default();
    let Some(text) = read(inv, &mut report) else { return report };
    let mut options = inv.frontend.clone();
    // L0 compiles the functions it exports: the one to run. (SaC checks the
    // whole program, as sac2c does: entries there would leave the functions
    // the entry does not call unchecked.)
    let l0 = options.language.unwrap_or_else(|| driver::Language::of_file(&inv.file.to_string_lossy()));
    if let (Some(e), true, driver::Language::L0) = (&inv.entry, options.entries.is_empty(), l0) {
        options.entries = vec![e.clone()];
    }
    let mut fe = driver::frontend(&inv.file.to_string_lossy(), &text, &FsLoader, &options);
    add_diagnostics(&mut report, &fe.sources, &fe.diagnostics);
    if fe.has_errors() {
        let errors = fe.diagnostics.iter().filter(|d| d.is_error()).count();
        report.stderr.push_str(&format!("error: could not compile `{}` ({errors} error(s))\n", inv.file.display()));
        report.exit_code = EXIT_COMPILE_ERROR;
        return report;
    }
    let mut args = Vec::new();
    for a in &inv.args {
        match driver::parse_value(&mut fe.sources, a) {
            Ok(v) => args.push(v),
            Err(d) => {
                add_diagnostics(&mut report, &fe.sources, &[*d]);
                report.exit_code = EXIT_COMPILE_ERROR;
                return report;
            }
        }
    }
    let entry = inv.entry.clone().unwrap_or_else(|| "main".to_string());
    let mut stdout = Vec::new();
    // L0's reference semantics is its lowered IR, interpreted.
    let engine = match (&inv.engine, fe.language) {
        (Engine::Reference, driver::Language::L0) => Engine::Ir,
        (e, _) => e.clone(),
    };
    let result = match &engine {
        Engine::Reference => {
            let typed = if inv.untyped { None } else { Some(&fe.typed) };
            let run =
                interp::run(&fe.program, typed, &fe.sources, &entry, args, RunOptions::default(), &mut |b: &[u8]| {
                    stdout.extend_from_slice(b)
                });
            report.untyped_fallbacks = run.untyped_fallbacks;
            run.result
        }
        Engine::Ir | Engine::Optimised(_) | Engine::Native(..) => {
            let mut module = lower(&fe);
            if let Err(problems) = ir::verify::verify(&module) {
                report
                    .stderr
                    .push_str(&format!("error[B0001]: the lowered IR is malformed:\n  {}\n", problems.join("\n  ")));
                report.exit_code = EXIT_RUNTIME_ERROR;
                return report;
            }
            if let Engine::Optimised(options) | Engine::Native(options, _) = &engine
                && let Err(broken) = opt::optimise(&mut module, &fe.sources, options)
            {
                report.stderr.push_str(&format!(
                    "error[B0001]: the `{}` pass left the IR malformed (a compiler bug):\n  {}\n",
                    broken.pass,
                    broken.problems.join("\n  ")
                ));
                report.exit_code = EXIT_RUNTIME_ERROR;
                return report;
            }
            if let Engine::Native(_, codegen) = &engine {
                let mut sink = |b: &[u8]| stdout.extend_from_slice(b);
                match withloop_codegen::jit::run(&module, &fe.sources, &entry, args, codegen, None, &mut sink) {
                    Ok(values) => Ok(values),
                    Err(withloop_codegen::jit::RunError::UnknownEntry(name)) => Err(EntryError::Unknown(name)),
                    Err(withloop_codegen::jit::RunError::Runtime(e)) => Err(EntryError::Runtime(e)),
                    Err(withloop_codegen::jit::RunError::Codegen(e)) => {
                        report.stdout = stdout;
                        report.stderr.push_str(&codegen_error_text(&e));
                        report.exit_code = EXIT_COMPILE_ERROR;
                        return report;
                    }
                }
            } else {
                match ir::interp::run(&module, &fe.sources, &entry, args, RunOptions::default(), &mut |b: &[u8]| {
                    stdout.extend_from_slice(b)
                }) {
                    None => Err(EntryError::Unknown(entry.clone())),
                    Some(r) => r.map_err(EntryError::Runtime),
                }
            }
        }
    };
    report.stdout = stdout;
    match result {
        Ok(values) => report.stdout.extend_from_slice(value_lines(&values).as_bytes()),
        Err(EntryError::Unknown(name)) => {
            let mut msg = format!("error: `{}` defines no function `{name}` to run\n", inv.file.display());
            let mut names: Vec<String> = fe
                .program
                .user_names
                .iter()
                .filter(|(_, ids)| ids.iter().any(|id| !fe.program.function(*id).is_library()))
                .map(|(n, _)| n.to_string())
                .collect();
            if let Some(m) = &fe.l0 {
                names.extend(m.entries.iter().map(|(n, _)| n.to_string()));
            }
            if !names.is_empty() {
                names.sort();
                msg.push_str(&format!("  = note: its functions are: {}\n", names.join(", ")));
            }
            report.stderr.push_str(&msg);
            report.exit_code = EXIT_COMPILE_ERROR;
        }
        Err(EntryError::Runtime(e)) => {
            let d = e.to_diagnostic();
            report.stderr.push_str(&render(&fe.sources, &d));
            report.diagnostics.push(locate(&fe.sources, &d));
            report.exit_code = EXIT_RUNTIME_ERROR;
        }
    }
    report
}

/// What `withloop compile` prints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Emit {
    /// The IR text after all passes.
    #[default]
    Ir,
    /// The optimisation report, as text.
    Report,
    /// The optimisation report, as JSON.
    ReportJson,
    /// A summary of the with-loops left after optimisation.
    Structure,
    /// A relocatable object file with the C ABI's functions.
    Object,
    /// A shared library (linked with the system `cc`).
    Shared,
    /// The C header declaring the ABI.
    Header,
    /// LLVM IR after LLVM's optimisations.
    LlvmIr,
    /// Target assembly.
    Asm,
    /// An executable whose exit status is `main`'s result (`withloop build`).
    Executable,
}

impl Emit {
    /// The `--emit` spelling of each kind.
    pub const NAMES: [(&'static str, Emit); 10] = [
        ("ir", Emit::Ir),
        ("report", Emit::Report),
        ("report-json", Emit::ReportJson),
        ("structure", Emit::Structure),
        ("obj", Emit::Object),
        ("so", Emit::Shared),
        ("header", Emit::Header),
        ("llvm-ir", Emit::LlvmIr),
        ("asm", Emit::Asm),
        ("exe", Emit::Executable),
    ];

    pub fn parse(name: &str) -> Option<Emit> {
        Emit::NAMES.iter().find(|(n, _)| *n == name).map(|(_, e)| *e)
    }

    /// Whether the output is bytes for a file rather than text for a terminal.
    pub fn binary(self) -> bool {
        matches!(self, Emit::Object | Emit::Shared | Emit::Executable)
    }

    /// The file name `withloop compile` writes when `-o` is not given (for
    /// kinds that are not printed).
    pub fn default_output(self, source: &Path) -> Option<PathBuf> {
        let stem = source.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "a".into());
        let name = match self {
            Emit::Object => format!("{stem}.o"),
            Emit::Shared => format!("lib{stem}.so"),
            Emit::Executable => stem,
            _ => return None,
        };
        Some(source.with_file_name(name))
    }
}

/// Front end and lowering: the program as IR, or the report of why not.
pub fn lowered(inv: &Invocation) -> Result<(driver::Frontend, ir::Module), Report> {
    lowered_timed(inv, &mut Phases::default())
}

/// Wall times of compile phases, printed by `compile --time-phases`.
#[derive(Default)]
struct Phases(Vec<(&'static str, Duration)>);

impl Phases {
    /// Runs `f` as phase `name`.
    fn time<T>(&mut self, name: &'static str, f: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let x = f();
        self.0.push((name, start.elapsed()));
        x
    }

    /// `phase NAME MS ms` lines and the total.
    fn text(&self) -> String {
        let mut out = String::new();
        for (name, d) in &self.0 {
            out.push_str(&format!("phase {name:<13} {:9.2} ms\n", d.as_secs_f64() * 1e3));
        }
        let total: Duration = self.0.iter().map(|(_, d)| *d).sum();
        out.push_str(&format!("phase {:<13} {:9.2} ms\n", "total", total.as_secs_f64() * 1e3));
        out
    }
}

fn lowered_timed(inv: &Invocation, phases: &mut Phases) -> Result<(driver::Frontend, ir::Module), Report> {
    let mut report = Report::default();
    let Some(text) = read(inv, &mut report) else { return Err(report) };
    let fe =
        phases.time("front-end", || driver::frontend(&inv.file.to_string_lossy(), &text, &FsLoader, &inv.frontend));
    add_diagnostics(&mut report, &fe.sources, &fe.diagnostics);
    if fe.has_errors() {
        let errors = fe.diagnostics.iter().filter(|d| d.is_error()).count();
        report.stderr.push_str(&format!("error: could not compile `{}` ({errors} error(s))\n", inv.file.display()));
        report.exit_code = EXIT_COMPILE_ERROR;
        return Err(report);
    }
    let mut module = phases.time("lowering", || lower(&fe));
    if let Err(d) = driver::select_entries(&mut module, &inv.frontend.entries, &inv.file.to_string_lossy()) {
        report.stderr.push_str(&render(&fe.sources, &d));
        report.diagnostics.push(locate(&fe.sources, &d));
        report.exit_code = EXIT_COMPILE_ERROR;
        return Err(report);
    }
    if inv.leave_out_generic {
        driver::leave_out_generic(&mut module, &fe.typed);
    }
    Ok((fe, module))
}

/// The program as IR: L0's front end lowers as it checks; SaC lowers here.
fn lower(fe: &driver::Frontend) -> ir::Module {
    match &fe.l0 {
        Some(m) => m.clone(),
        None => ir::lower::lower(&fe.program, &fe.typed, &fe.sources),
    }
}

/// [`lowered`], then optimised with `options`.
pub fn optimised(
    inv: &Invocation,
    options: &opt::PipelineOptions,
) -> Result<(driver::Frontend, ir::Module, opt::Outcome), Report> {
    optimised_timed(inv, options, &mut Phases::default())
}

fn optimised_timed(
    inv: &Invocation,
    options: &opt::PipelineOptions,
    phases: &mut Phases,
) -> Result<(driver::Frontend, ir::Module, opt::Outcome), Report> {
    let (fe, mut module) = lowered_timed(inv, phases)?;
    match phases.time("optimisation", || opt::optimise(&mut module, &fe.sources, options)) {
        Ok(outcome) => Ok((fe, module, outcome)),
        Err(broken) => {
            let mut report = Report::default();
            for (stage, round, text) in &broken.outcome.dumps {
                let pass = options.dump_after.as_deref().unwrap_or("");
                report.stdout.extend_from_slice(
                    format!("// IR after `{pass}` ({stage} stage, round {round})\n{text}\n").as_bytes(),
                );
            }
            report.stderr.push_str(&format!(
                "error[B0001]: the `{}` pass left the IR malformed (a compiler bug):\n  {}\n",
                broken.pass,
                broken.problems.join("\n  ")
            ));
            report.exit_code = EXIT_RUNTIME_ERROR;
            Err(report)
        }
    }
}

/// `withloop compile FILE`: compiles and prints (or writes to `output`) what
/// `emit` asks for; native kinds use `native`.
pub fn compile(
    inv: &Invocation,
    options: &opt::PipelineOptions,
    emit: Emit,
    native: &withloop_codegen::Options,
    output: Option<&Path>,
) -> Report {
    let (inv, options, native, output) = (inv.clone(), options.clone(), native.clone(), output.map(Path::to_path_buf));
    // Deep expression trees, as in `check`.
    interp::with_large_stack(move || compile_here(&inv, &options, emit, &native, output.as_deref()))
}

fn compile_here(
    inv: &Invocation,
    options: &opt::PipelineOptions,
    emit: Emit,
    native: &withloop_codegen::Options,
    output: Option<&Path>,
) -> Report {
    let mut phases = Phases::default();
    let (fe, module, outcome) = match optimised_timed(inv, options, &mut phases) {
        Ok(x) => x,
        Err(report) => return report,
    };
    let mut report = Report::default();
    for (stage, round, text) in &outcome.dumps {
        let pass = options.dump_after.as_deref().unwrap_or("");
        report
            .stdout
            .extend_from_slice(format!("// IR after `{pass}` ({stage} stage, round {round})\n{text}\n").as_bytes());
    }
    let file = inv.file.to_string_lossy();
    let build = || {
        let mut report = opt::report::build(
            &file,
            &outcome,
            &fe.program,
            &fe.typed,
            &fe.sources,
            inv.list_library_instances,
            !options.no_timing,
        );
        if fe.l0.is_some() {
            opt::report::add_module_entries(&mut report, &module, &fe.sources);
        }
        opt::report::keep_exported_symbols(&mut report, &module);
        report
    };
    use withloop_codegen::Output;
    let mut native_bytes = |executable: bool, out: Output| {
        let (bytes, times) = withloop_codegen::compile_timed(&module, &fe.sources, native, executable, out)?;
        phases.0.extend(times);
        Ok::<_, withloop_codegen::CodegenError>(bytes)
    };
    let bytes: Result<Vec<u8>, withloop_codegen::CodegenError> = match emit {
        Emit::Ir => Ok(ir::print::module_text(&module).into_bytes()),
        Emit::Report => Ok(build().to_text().into_bytes()),
        Emit::ReportJson => Ok((build().to_json() + "\n").into_bytes()),
        Emit::Structure => Ok(ir::print::structure_text(&module).into_bytes()),
        Emit::Header => Ok(withloop_codegen::abi::header(&module, &file).into_bytes()),
        Emit::LlvmIr => native_bytes(false, Output::LlvmIr),
        Emit::Asm => native_bytes(false, Output::Assembly),
        Emit::Object => native_bytes(false, Output::Object),
        Emit::Shared | Emit::Executable => {
            let kind = if emit == Emit::Shared {
                withloop_codegen::link::LinkKind::SharedLibrary
            } else {
                withloop_codegen::link::LinkKind::Executable
            };
            let target = output.map(Path::to_path_buf).or_else(|| emit.default_output(&inv.file));
            match (native_bytes(emit == Emit::Executable, Output::Object), target) {
                (Err(e), _) => Err(e),
                (Ok(obj), Some(target)) => {
                    phases.time("link", || withloop_codegen::link::link(&obj, kind, &target)).map(|()| Vec::new())
                }
                (Ok(_), None) => Ok(Vec::new()),
            }
        }
    };
    let bytes = match bytes {
        Ok(b) => b,
        Err(e) => {
            report.stderr.push_str(&codegen_error_text(&e));
            report.exit_code = EXIT_COMPILE_ERROR;
            return report;
        }
    };
    if inv.time_phases {
        report.stderr.push_str(&phases.text());
    }
    if matches!(emit, Emit::Shared | Emit::Executable) {
        return report;
    }
    let target = output.map(Path::to_path_buf).or_else(|| emit.default_output(&inv.file));
    match target {
        Some(path) if path.as_os_str() != "-" => {
            if let Err(e) = std::fs::write(&path, &bytes) {
                report.stderr.push_str(&format!("error: cannot write `{}`: {e}\n", path.display()));
                report.exit_code = EXIT_COMPILE_ERROR;
            }
        }
        _ => report.stdout.extend_from_slice(&bytes),
    }
    report
}

/// One-line rendering of a located diagnostic (`file:line:col: error[E…]: …`).
pub fn short(sources: &SourceMap, d: &Diagnostic) -> String {
    render_short(sources, d)
}

/// Formats values the way `withloop run` prints them.
pub fn value_lines(values: &[Value]) -> String {
    values.iter().map(|v| format::value_literal(v) + "\n").collect()
}

/// A code generation failure as the CLI prints it, with its error class's
/// code (as the service reports it): a limitation (L0001, the interpreter
/// runs the program) or a compiler bug (B0001).
fn codegen_error_text(e: &withloop_codegen::CodegenError) -> String {
    use compiler_core::diagnostics as codes;
    match e {
        withloop_codegen::CodegenError::Unsupported(_) => format!(
            "error[{}]: {e}\n  = hint: `withloop run --interp` runs the program in the interpreter\n",
            codes::UNSUPPORTED.id
        ),
        withloop_codegen::CodegenError::Bug(_) => format!("error[{}]: {e}\n", codes::INTERNAL_ERROR.id),
        _ => format!("error: {e}\n"),
    }
}

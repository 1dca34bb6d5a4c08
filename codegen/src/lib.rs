//! withloop's LLVM back end: optimised IR to native code.
//!
//! # Pipeline
//!
//! [`emit`] turns every IR function into an LLVM function (array
//! representations, reference counting and run-time errors are described in its
//! module documentation); LLVM's own pipeline (`default<O0…O3>`) then optimises
//! the module for a target machine (the host, or an explicit triple/CPU), and
//! the result is run in-process ([`jit`]), written as an object file, assembly
//! or LLVM IR, or linked into a shared library or executable ([`link`]).
//!
//! # The runtime
//!
//! Compiled code calls a small runtime, `withloop-rt` (our own Rust crate,
//! built as an rlib for the JIT and as a static library for everything that is
//! linked): array allocation and reference counts, run-time errors, the generic
//! path for rare primitives and printing, and the thread pool of parallel
//! with-loops. Its functions are declared in [`rt`].
//!
//! # The C ABI
//!
//! [`abi`] wraps every entry point and every specialised instance in a C
//! function with array descriptors, out-parameters for results and an error
//! code; it also writes the matching header.

pub mod abi;
mod emit;
pub mod jit;
pub mod link;
mod rt;

use compiler_core::ir::Module as IrModule;
use compiler_core::span::SourceMap;
use inkwell::OptimizationLevel;
use inkwell::context::Context;
use inkwell::targets::{CodeModel, FileType, InitializationConfig, RelocMode, Target, TargetMachine, TargetTriple};

/// Why code generation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CodegenError {
    /// The program uses something the native back end does not compile (a
    /// compiler limitation; the interpreter runs it).
    Unsupported(String),
    /// The back end produced something wrong (a compiler bug).
    Bug(String),
    /// LLVM refused the target or failed to write output.
    Llvm(String),
}

impl std::fmt::Display for CodegenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CodegenError::Unsupported(what) => write!(f, "the native back end does not support {what} yet"),
            CodegenError::Bug(what) => write!(f, "code generation failed (a compiler bug): {what}"),
            CodegenError::Llvm(what) => write!(f, "LLVM: {what}"),
        }
    }
}

impl std::error::Error for CodegenError {}

/// How to generate code.
#[derive(Clone, Debug)]
pub struct Options {
    /// LLVM's optimisation level, 0 to 3.
    pub opt_level: u8,
    /// Target triple (default: the host's).
    pub triple: Option<String>,
    /// Target CPU (default: the host's when the triple is the host's, else generic).
    pub cpu: Option<String>,
    /// Target features (`+avx2,-fma`; default: the host CPU's).
    pub features: Option<String>,
    /// Split large with-loops over threads.
    pub parallel: bool,
    /// For in-process runs ([`jit::run`]): the thread count (default: the
    /// context's, i.e. `WITHLOOP_THREADS` or every core) and the smallest
    /// with-loop part, in iterations, that is split (default 32768). Compiled
    /// libraries and executables take both from their context. `parallel_min`
    /// also replaces [`STATIC_PARALLEL_MIN`] as the compile-time cut.
    pub threads: Option<u32>,
    pub parallel_min: Option<i64>,
    /// Folds of `float`/`double` `+` and `*` combine their elements strictly
    /// in index order, as the interpreter does. By default (SaC leaves a
    /// fold's order unspecified) LLVM may reassociate them, which lets it
    /// vectorise the loop with several partial accumulators.
    pub exact_folds: bool,
}

/// With-loop parts with fewer iterations than this, when the count is known at
/// compile time, always run sequentially (the run-time threshold,
/// `WITHLOOP_PARALLEL_MIN`, decides the rest). Emitting the parallel variant of
/// every small constant-size with-loop (the 9x9 minors of a determinant) only
/// doubled their code and compile time.
pub const STATIC_PARALLEL_MIN: i64 = 4096;

impl Default for Options {
    fn default() -> Self {
        Options {
            opt_level: 3,
            triple: None,
            cpu: None,
            features: None,
            parallel: true,
            threads: None,
            parallel_min: None,
            exact_folds: false,
        }
    }
}

impl Options {
    fn llvm_level(&self) -> OptimizationLevel {
        match self.opt_level {
            0 => OptimizationLevel::None,
            1 => OptimizationLevel::Less,
            2 => OptimizationLevel::Default,
            _ => OptimizationLevel::Aggressive,
        }
    }
}

/// The target a compilation is for, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetSpec {
    pub triple: String,
    pub cpu: String,
    pub features: String,
}

/// The target of `options`: the host unless a triple is given.
pub fn target_spec(options: &Options) -> TargetSpec {
    let host = host_spec();
    let triple = options.triple.clone().unwrap_or_else(|| host.triple.clone());
    let native = triple == host.triple;
    let cpu = options.cpu.clone().unwrap_or_else(|| if native { host.cpu.clone() } else { "generic".to_string() });
    let features = options
        .features
        .clone()
        .unwrap_or_else(|| if native && options.cpu.is_none() { host.features.clone() } else { String::new() });
    TargetSpec { triple, cpu, features }
}

/// This machine's triple, CPU and CPU features, asked of LLVM once per process
/// (the compile service keys every request by them).
pub fn host_spec() -> &'static TargetSpec {
    static HOST: std::sync::OnceLock<TargetSpec> = std::sync::OnceLock::new();
    HOST.get_or_init(|| TargetSpec {
        triple: TargetMachine::get_default_triple().as_str().to_string_lossy().into_owned(),
        cpu: TargetMachine::get_host_cpu_name().to_string(),
        features: TargetMachine::get_host_cpu_features().to_string(),
    })
}

/// The LLVM target machine for `spec`.
pub fn target_machine(spec: &TargetSpec, options: &Options) -> Result<TargetMachine, CodegenError> {
    Target::initialize_all(&InitializationConfig::default());
    let triple = TargetTriple::create(&spec.triple);
    let target =
        Target::from_triple(&triple).map_err(|e| CodegenError::Llvm(format!("target `{}`: {e}", spec.triple)))?;
    target
        .create_target_machine(
            &triple,
            &spec.cpu,
            &spec.features,
            options.llvm_level(),
            RelocMode::PIC,
            CodeModel::Default,
        )
        .ok_or_else(|| CodegenError::Llvm(format!("no target machine for `{}` (CPU `{}`)", spec.triple, spec.cpu)))
}

/// What [`compile`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// A relocatable object file.
    Object,
    /// Assembly for the target.
    Assembly,
    /// LLVM IR (after LLVM's optimisation pipeline).
    LlvmIr,
}

/// Compiles `module` with a C function for every export ([`abi`]); with
/// `executable`, also a C `main` that runs the program's `main`.
pub fn compile(
    module: &IrModule,
    sources: &SourceMap,
    options: &Options,
    executable: bool,
    output: Output,
) -> Result<Vec<u8>, CodegenError> {
    compile_timed(module, sources, options, executable, output).map(|(bytes, _)| bytes)
}

/// The wall time of each phase of a native compile, in order: `llvm-emit`
/// (our IR to LLVM IR, verified), `llvm-opt` (LLVM's pipeline), and
/// `machine-code` (object or assembly; absent for LLVM IR).
pub type PhaseTimes = Vec<(&'static str, std::time::Duration)>;

/// [`compile`], also giving the time each phase took.
pub fn compile_timed(
    module: &IrModule,
    sources: &SourceMap,
    options: &Options,
    executable: bool,
    output: Output,
) -> Result<(Vec<u8>, PhaseTimes), CodegenError> {
    let mut times = PhaseTimes::new();
    let mut clock = std::time::Instant::now();
    let mut lap = |times: &mut PhaseTimes, name: &'static str| {
        let now = std::time::Instant::now();
        times.push((name, now - clock));
        clock = now;
    };
    let spec = target_spec(options);
    let ctx = Context::create();
    let mut e = emit::Emitter::new(&ctx, module, sources, options.parallel);
    e.static_parallel_min = options.parallel_min.unwrap_or(STATIC_PARALLEL_MIN);
    e.exact_folds = options.exact_folds;
    e.functions()?;
    e.exports()?;
    if executable {
        e.executable_main()?;
    }
    let (llmod, tm) = e.finish(&spec, options)?;
    lap(&mut times, "llvm-emit");
    emit::optimise(&llmod, &tm, options)?;
    lap(&mut times, "llvm-opt");
    let bytes = match output {
        Output::LlvmIr => llmod.print_to_string().to_bytes().to_vec(),
        Output::Object | Output::Assembly => {
            let ft = if output == Output::Object { FileType::Object } else { FileType::Assembly };
            let buf = tm
                .write_to_memory_buffer(&llmod, ft)
                .map_err(|e| CodegenError::Llvm(format!("writing {output:?}: {}", e.to_string_lossy())))?;
            lap(&mut times, "machine-code");
            buf.as_slice().to_vec()
        }
    };
    Ok((bytes, times))
}

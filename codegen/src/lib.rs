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
mod elf;
mod emit;
pub mod jit;
pub mod link;
mod machines;
mod rt;
pub mod targets;
mod vecmath;

use compiler_core::ir::Module as IrModule;
use compiler_core::opt::MatrixProducts;
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
    /// The target asked for names a CPU or feature that LLVM does not know
    /// or cannot compile with ([`targets::check`]): a user error.
    Target(String),
}

impl std::fmt::Display for CodegenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CodegenError::Unsupported(what) => write!(f, "the native back end does not support {what} yet"),
            CodegenError::Bug(what) => write!(f, "code generation failed (a compiler bug): {what}"),
            CodegenError::Llvm(what) => write!(f, "LLVM: {what}"),
            CodegenError::Target(what) => write!(f, "{what}"),
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
    /// For in-process runs: the footprint, in bytes, from which a with-loop
    /// step of a loop streams its stores (default: the context's,
    /// `WITHLOOP_STREAM_MIN` or a third of the last-level cache).
    pub stream_min: Option<i64>,
    /// Folds of `float`/`double` `+` and `*` combine their elements strictly
    /// in index order, as the interpreter does. By default (SaC leaves a
    /// fold's order unspecified) LLVM may reassociate them, which lets it
    /// vectorise the loop with several partial accumulators, and a register
    /// tile's `acc + x * y` steps may be fused into one FMA (one rounding
    /// instead of two, as `gcc -O3 -march=native` contracts them).
    pub exact_folds: bool,
    /// Object files are compiled in this many parts on threads of their own
    /// (`None`: one per core, at most four, for modules large enough).
    pub partitions: Option<usize>,
    /// Vector math intrinsics call glibc's libmvec (x86-64 GNU/Linux; see
    /// [`vecmath`]): loops over `exp`, `log`, `sin`, `cos`, `pow` run vectorised,
    /// with results within 4 ulp instead of 1. Off: the scalar functions, per lane.
    pub vector_math: bool,
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
            stream_min: None,
            exact_folds: false,
            partitions: None,
            vector_math: true,
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

impl TargetSpec {
    /// Whether this x86-64 target has `feature` (`avx512f`, `avx2`, `fma`):
    /// when the feature list adds it, or when the CPU has it
    /// ([`x86_cpu_has`]) and the list does not take it away, as LLVM reads
    /// `--cpu` and `--features` together. The host's list names every feature
    /// of this machine; a CPU given by name (`--cpu sapphirerapids`) comes
    /// with an empty list, so the CPU's own features must be looked up.
    pub fn has(&self, feature: &str) -> bool {
        let listed = |sign: char| self.features.split(',').any(|f| f.strip_prefix(sign) == Some(feature));
        self.triple.starts_with("x86_64") && (listed('+') || (!listed('-') && x86_cpu_has(&self.cpu, feature)))
    }
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

/// The register tile (rows, columns of `double` results) the optimiser's
/// `tile` pass should use for this target, if any. 4x32 where the target has
/// AVX-512 (32 vector registers of 8 doubles: the tile's 16, plus room for the
/// loads); 4x8 with AVX2 and FMA (16 registers of 4 doubles: the tile's 8, two
/// rows of the packed panel and a broadcast — wider tiles spill: 4x16 ran at a
/// third of 4x8's speed on a 512x512 product, while 4x8 ran 3.4x faster than
/// `interchange`'s row updates). Features as [`TargetSpec::has`] reads them.
pub fn register_tile(options: &Options) -> Option<[i64; 2]> {
    let spec = target_spec(options);
    if spec.has("avx512f") {
        Some([4, 32])
    } else if spec.has("avx2") && spec.has("fma") {
        Some([4, 8])
    } else {
        None
    }
}

/// Which matrix products should run as the runtime's blocked product (the
/// optimiser's `gemm` pass) rather than in `register_tile`'s tiles: all of
/// them for targets with AVX2 and FMA but not AVX-512F; with AVX-512F, those
/// of generic code (extents known at run time only), which then compiles
/// quicker, while products of known shape keep the faster tiles. Measured on an AVX-512
/// Xeon (session 45, `bench/ab/ab.c matmul`, both load orders, the runtime
/// held to its AVX2 kernels by `WITHLOOP_GEMM_KERNELS=avx2`): code for
/// `--cpu haswell` ran a 1024x1024 product 1.08-1.12x (one thread) and
/// 1.09-1.18x (two) faster through the runtime's 6x8 AVX2 tiles than in the
/// 4x8 register tiles (8 accumulators, just what two FMA units of latency 4
/// keep busy), and compiled in 27 ms instead of 42 (`--time-phases`);
/// code for the machine itself (4x32 tiles) was as fast as or up to 1.07x
/// faster than the runtime's 12x16 AVX-512 tiles (session 46, on an Emerald
/// Rapids Xeon after the runtime's changes: the tiles 1.05-1.07x faster on one
/// thread, 1.11x on two). With the generic instance's product as the
/// runtime's, the compile service compiled the bench's matmul (both
/// instances) in 34 ms instead of 60 (medians of 9, in turns).
pub fn matrix_products(options: &Options) -> MatrixProducts {
    let spec = target_spec(options);
    if !(spec.has("avx2") && spec.has("fma")) {
        MatrixProducts::None
    } else if spec.has("avx512f") {
        MatrixProducts::Dynamic
    } else {
        MatrixProducts::All
    }
}

/// Whether the x86-64 CPU LLVM knows by `cpu` has `feature` (only the ones
/// [`register_tile`] asks about: `avx512f`, `avx2`, `fma`). A CPU given by
/// name (`--cpu sapphirerapids`, no `--features`) gets no feature list from
/// [`target_spec`], and LLVM's C API does not say what a named CPU has, so
/// the names are listed here: LLVM 19's x86 CPUs with those features. An
/// unknown name has none (no tile: correct code, only slower products).
pub fn x86_cpu_has(cpu: &str, feature: &str) -> bool {
    const AVX512F: &[&str] = &[
        "x86-64-v4",
        "knl",
        "knm",
        "skylake-avx512",
        "skx",
        "cascadelake",
        "cooperlake",
        "cannonlake",
        "icelake-client",
        "icelake-server",
        "rocketlake",
        "tigerlake",
        "sapphirerapids",
        "emeraldrapids",
        "graniterapids",
        "graniterapids-d",
        "znver4",
        "znver5",
    ];
    const AVX2_FMA: &[&str] = &[
        "x86-64-v3",
        "haswell",
        "core-avx2",
        "broadwell",
        "skylake",
        "alderlake",
        "raptorlake",
        "meteorlake",
        "arrowlake",
        "arrowlake-s",
        "lunarlake",
        "gracemont",
        "sierraforest",
        "grandridge",
        "clearwaterforest",
        "znver1",
        "znver2",
        "znver3",
        "bdver4",
    ];
    match feature {
        "avx512f" => AVX512F.contains(&cpu),
        "avx2" | "fma" => AVX512F.contains(&cpu) || AVX2_FMA.contains(&cpu),
        _ => false,
    }
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

/// LLVM's process-wide settings, made once, before the first target machine
/// (every compile, the JIT's included, gets its target machine from
/// [`target_machine`]).
///
/// Loop strength reduction is off in LLVM's code generator (`-disable-lsr`;
/// [`emit::optimise`] runs it in the optimisation pipeline instead, for the
/// targets that want it). On x86-64 it bought nothing measurable and cost much:
/// every bench kernel ran as fast without it (A/B of the bench library on
/// Zen 4, one and two threads, within the host's 3% noise: relax, relax_iv,
/// relax_apl, smooth, mg3, floyd, matmul, det, neg, dot, blackscholes), while
/// it took 15-50% of machine-code time for stencils with symbolic offsets:
/// the generic instance of a 27-point stencil has 27 loop-invariant offsets
/// whose combinations LSR enumerates through scalar evolution (mg3's generic
/// instance: 61 of 119 ms of `llc`; relax_apl 22 of 135 ms). x86-64's
/// addressing (base + index × scale + displacement) leaves it little to win.
///
/// The SLP vectoriser packs nothing (`-slp-max-vf=1`): `default<O3>` runs it
/// whatever the pass-builder options say (the alias switches it on), and it
/// took 11-18% of `opt`'s time on the bench kernels (det's unrolled minors,
/// Black–Scholes, the stencils' address arithmetic; the compile service's
/// geometric mean against JAX 6-9% lower without it) for code that ran as
/// fast without it: it changed the machine code of det, blackscholes and
/// mg3's hot functions only, and each ran within the host's noise (Zen 3,
/// A/B of the bench library in one process, `bench/ab/ab.c`: det 0.96-1.02,
/// blackscholes 1.00-1.02, mg3 0.996-1.02; on an AVX-512 Xeon (family 6 model 207) the same
/// A/B with SLP put back: det 0.99-1.00, blackscholes 0.99-1.00, mg3 0.99-1.01).
/// The loops' vectoriser does our work: the register tiles emit vectors
/// themselves (`emit::tile`).
///
/// `WITHLOOP_LLVM_ARGS` (whitespace-separated) adds LLVM options after these,
/// once per process: for measuring LLVM's settings (`-time-passes`, an A/B of
/// `-slp-max-vf=0`) without a rebuild.
fn configure_llvm() {
    static CONFIGURED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    CONFIGURED.get_or_init(|| {
        Target::initialize_all(&InitializationConfig::default());
        // The environment's last: they win.
        let extra = std::env::var("WITHLOOP_LLVM_ARGS").unwrap_or_default();
        let mut args = vec!["withloop", "-disable-lsr", "-slp-max-vf=1"];
        args.extend(extra.split_whitespace());
        set_llvm_options(&args);
    });
}

/// Parses `args` as LLVM's command line (`args[0]` names the program). LLVM
/// keeps them in globals: call this once per process, before code generation.
#[allow(unsafe_code)]
fn set_llvm_options(args: &[&str]) {
    let args: Vec<std::ffi::CString> =
        args.iter().map(|a| std::ffi::CString::new(*a).expect("LLVM options have no NUL")).collect();
    let argv: Vec<*const std::ffi::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    let argc = i32::try_from(argv.len()).expect("a handful of LLVM options");
    // SAFETY: `argv` holds `argc` pointers to NUL-terminated strings that
    // outlive the call (LLVM copies what it keeps); a null overview is allowed.
    unsafe { llvm_sys::support::LLVMParseCommandLineOptions(argc, argv.as_ptr(), std::ptr::null()) };
}

/// The LLVM target machine for `spec`.
pub fn target_machine(spec: &TargetSpec, options: &Options) -> Result<TargetMachine, CodegenError> {
    // LLVM would take an unknown CPU and may end the process at the first
    // function. The host's own names come from LLVM and need no check.
    if spec != host_spec() {
        targets::check(spec)?;
    }
    configure_llvm();
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

/// Asks Linux for ordinary pages for the rest of this process: for a process
/// that lives for one compile (the CLI). mimalloc marks its arena for
/// transparent huge pages, and each huge page costs a 2 MiB zeroing at its
/// first touch, on the thread that touches it (perf of an empty program's
/// compile: half its samples zeroing pages). With 4 KiB pages, `withloop
/// compile --entry neg` of bench/kernels.sac (`perf stat -r 30`, four runs
/// in turns): 57-62 ms instead of 59-65, spread 1-2% instead of 2-6%;
/// `--entry matmul` 89-92 against 86-99: a steadier start more than a faster
/// one. A long-lived process (the service) keeps its huge pages.
#[allow(unsafe_code)]
pub fn small_pages_only() {
    #[cfg(target_os = "linux")]
    {
        unsafe extern "C" {
            fn prctl(option: std::ffi::c_int, ...) -> std::ffi::c_int;
        }
        const PR_SET_THP_DISABLE: std::ffi::c_int = 41;
        let (on, unused): (std::ffi::c_ulong, std::ffi::c_ulong) = (1, 0);
        // SAFETY: sets a flag of this process; a kernel without it refuses
        // the call, which changes nothing.
        unsafe { prctl(PR_SET_THP_DISABLE, on, unused, unused, unused) };
    }
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
    let facts = emit::Facts::of(module);
    if output == Output::Object
        && let Some(parts) = partitions(module, options.partitions)
    {
        // `None`: the parts' objects could not be merged; one part, as below.
        if let Some(done) = compile_in_parts(module, sources, options, executable, &spec, &parts, &facts)? {
            return Ok(done);
        }
    }
    let ctx = Context::create();
    let (llmod, tm) = emit_module(&ctx, module, sources, options, &spec, None, executable, &facts)?;
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

/// `module` (the part `partition` names, if any) as an LLVM module for
/// `spec`, with the target machine that compiles it; `main`: with the
/// executable's `main`.
#[allow(clippy::too_many_arguments)]
fn emit_module<'ctx>(
    ctx: &'ctx Context,
    module: &IrModule,
    sources: &SourceMap,
    options: &Options,
    spec: &TargetSpec,
    partition: Option<emit::Partition>,
    main: bool,
    facts: &emit::Facts,
) -> Result<(inkwell::module::Module<'ctx>, machines::Lease), CodegenError> {
    let mut e = emitter(ctx, module, sources, options, facts.clone());
    e.streams = options.opt_level > 0 && spec.triple.starts_with("x86_64");
    e.partition = partition;
    e.functions()?;
    e.exports()?;
    if main {
        e.executable_main()?;
    }
    e.finish(spec, options)
}

/// An emitter of `module` with what `options` asks of the code (for
/// objects and for the JIT alike).
pub(crate) fn emitter<'ctx, 'a>(
    ctx: &'ctx Context,
    module: &'a IrModule,
    sources: &'a SourceMap,
    options: &Options,
    facts: emit::Facts,
) -> emit::Emitter<'ctx, 'a> {
    let mut e = emit::Emitter::new(ctx, module, sources, options.parallel, facts);
    e.static_parallel_min = static_parallel_min(options);
    e.exact_folds = options.exact_folds;
    e
}

/// The compile-time cut below which a part of known size gets no parallel
/// variant ([`STATIC_PARALLEL_MIN`], or the run-time threshold asked for).
fn static_parallel_min(options: &Options) -> i64 {
    options.parallel_min.unwrap_or(STATIC_PARALLEL_MIN)
}

/// A part lighter than this ([`llvm_cost`]: about a dispatch wrapper) is not
/// worth a thread of its own: each part pays for an LLVM context, target
/// machine and pass pipelines, and a merge. A one-kernel module (its instance
/// with a with-loop, the entry's wrapper and their C functions) splits in
/// two: compiled for its shape hints only, nine bench kernels took 35 ms in
/// the compile service (geometric mean) split, 53 ms whole (60 kept them whole).
const MIN_PART_COST: usize = 30;

/// What LLVM is expected to spend on IR function `f`, in units of about one
/// plain statement, to balance parts: loops are what the loop passes, the
/// vectoriser and the code generator spend their time on (a with-loop, whose
/// parts become loop nests and perhaps a chunk function of their own; an
/// element-wise primitive on an array, a flat loop; a `loop`), while a
/// dispatch wrapper's compares and calls cost little. Each function also
/// costs a fixed amount (its C export, its frame and error paths). Measured
/// per function on bench/kernels.sac, a wrapper costs about half an
/// instance with one with-loop, which the IR's statement count (a wrapper
/// has more statements) got the wrong way round.
fn llvm_cost(f: &compiler_core::ir::Function) -> usize {
    use compiler_core::ir::Op;
    use compiler_core::sema::hir::Prim;
    if f.body.stmts.is_empty() {
        return 0;
    }
    let mut cost = 20;
    f.body.walk(&mut |s| {
        cost += match &s.op {
            Op::With(w) => 30 + 20 * w.parts.len(),
            Op::Loop { .. } => 10,
            Op::Prim { prim, .. }
                if !matches!(prim, Prim::Shape | Prim::Dim | Prim::Size | Prim::Hide(_))
                    && s.defs.iter().any(|d| !f.ty(*d).shape.is_scalar()) =>
            {
                30
            }
            _ => 1,
        }
    });
    cost
}

/// How the functions of a module are split between parts compiled on
/// threads of their own.
#[derive(Clone, Debug)]
struct Parts {
    /// Per IR function, its part.
    part_of: Vec<usize>,
    count: usize,
    /// The part of the rarely run (`cold`) functions, if there are any: it
    /// is compiled without optimisation (LLVM leaves them unoptimised anyway,
    /// see `Emitter::unoptimised`; at `-O0` code generation also takes the
    /// fast register allocator and skips loop strength reduction and the
    /// machine passes, most of what a cold function cost).
    cold: Option<usize>,
    /// Per IR function: called from another part.
    shared: Vec<bool>,
    suffix: String,
}

impl Parts {
    fn partition(&self, part: usize) -> emit::Partition {
        emit::Partition {
            own: self.part_of.iter().map(|p| *p == part).collect(),
            shared: self.shared.clone(),
            suffix: self.suffix.clone(),
        }
    }
}

/// A function whose [`llvm_cost`] is above this joins the cold part, compiled
/// at `-O0`: LLVM's optimisation and code generation grow faster than
/// linearly with a function's size (see [`emit::LARGE_FUNCTION`], the same
/// guard where a module is compiled whole). A rank-generic loop full of
/// inlined dispatch code cost 20,000; the largest function of
/// bench/kernels.sac costs about 2,200.
const LARGE_COST: usize = 8_000;

/// How the functions of `module` are split between parts compiled on threads
/// of their own (LLVM's pipeline and code generation are most of a compile's
/// time, and independent per function): one part per core, at most four,
/// balanced by [`llvm_cost`], or as many as asked, plus one part for the
/// cold functions and those above [`LARGE_COST`] (compiled at `-O0`); `None`
/// when one part will do, or when a part would be lighter than
/// [`MIN_PART_COST`].
fn partitions(module: &IrModule, asked: Option<usize>) -> Option<Parts> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()).min(4);
    let costs: Vec<usize> = module.functions.iter().map(llvm_cost).collect();
    let is_cold = |k: usize| (module.functions[k].cold || costs[k] > LARGE_COST) && costs[k] > 0;
    let hot = (0..costs.len()).filter(|k| costs[*k] > 0 && !is_cold(*k)).count();
    // A large function goes to the cold part even when the rest is one part.
    let large = costs.iter().any(|c| *c > LARGE_COST);
    let count = asked.unwrap_or(cores).min(hot);
    if (count < 2 && !large) || hot == 0 {
        return None;
    }
    let count = count.max(1);
    let cold = (0..costs.len()).any(is_cold).then_some(count);
    // Largest first, each to the lightest part.
    let mut order: Vec<usize> = (0..costs.len()).filter(|k| !is_cold(*k)).collect();
    order.sort_by_key(|k| std::cmp::Reverse(costs[*k]));
    let mut load = vec![0usize; count];
    let mut part_of = vec![cold.unwrap_or(0); costs.len()];
    for k in order {
        let lightest = (0..count).min_by_key(|p| load[*p]).unwrap_or(0);
        part_of[k] = lightest;
        load[lightest] += costs[k].max(1);
    }
    if asked.is_none() && !large && load.iter().min().is_some_and(|l| *l < MIN_PART_COST) {
        return None;
    }
    let count = count + cold.is_some() as usize;
    // Functions called from another part are shared (global, hidden).
    let mut shared = vec![false; costs.len()];
    for (k, f) in module.functions.iter().enumerate() {
        for g in compiler_core::opt::util::callees(f) {
            let g = g.0 as usize;
            if g < shared.len() && part_of[g] != part_of[k] {
                shared[g] = true;
            }
        }
    }
    // The suffix: a hash of what the parts define, so that the objects of two
    // programs linked together do not clash.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (f, cost) in module.functions.iter().zip(&costs) {
        for b in f.name.bytes().chain(cost.to_le_bytes()) {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    Some(Parts { part_of, count, cold, shared, suffix: format!("p{h:016x}") })
}

/// Compiles `module` to one object in parts: each part's LLVM module is
/// emitted, optimised and compiled on a thread of its own (emission was a
/// serial tenth of a small compile when the calling thread emitted every
/// part), and the objects are merged ([`link::relocatable`]; `None` when
/// that cannot be done). Phases: `llvm-emit`, `llvm-opt` as the slowest part
/// took them, `machine-code` the rest of the parallel time, then `merge`.
fn compile_in_parts(
    module: &IrModule,
    sources: &SourceMap,
    options: &Options,
    executable: bool,
    spec: &TargetSpec,
    parts: &Parts,
    facts: &emit::Facts,
) -> Result<Option<(Vec<u8>, PhaseTimes)>, CodegenError> {
    let start = std::time::Instant::now();
    let main_fn = module.entry("main").map(|f| f.0 as usize);
    type PartResult = Result<(Vec<u8>, [std::time::Duration; 3]), CodegenError>;
    let unoptimised = Options { opt_level: 0, ..options.clone() };
    let compile_part = |part: usize| -> PartResult {
        let t0 = std::time::Instant::now();
        let ctx = Context::create();
        let options = if parts.cold == Some(part) { &unoptimised } else { options };
        let main = executable && main_fn.is_some_and(|m| parts.part_of[m] == part);
        let (llmod, tm) = emit_module(&ctx, module, sources, options, spec, Some(parts.partition(part)), main, facts)?;
        let t1 = std::time::Instant::now();
        emit::optimise(&llmod, &tm, options)?;
        let t2 = std::time::Instant::now();
        let buf = tm
            .write_to_memory_buffer(&llmod, FileType::Object)
            .map_err(|e| CodegenError::Llvm(format!("writing an object: {}", e.to_string_lossy())))?;
        Ok((buf.as_slice().to_vec(), [t1 - t0, t2 - t1, t2.elapsed()]))
    };
    // Each part is emitted, optimised and compiled on a thread of its own,
    // in an LLVM context of its own; the calling thread takes the first.
    let compiled: Vec<PartResult> = std::thread::scope(|scope| {
        let handles: Vec<_> = (1..parts.count).map(|part| scope.spawn(move || compile_part(part))).collect();
        let first = compile_part(0);
        std::iter::once(first)
            .chain(handles.into_iter().map(|h| {
                h.join().unwrap_or_else(|_| Err(CodegenError::Bug("a code generation thread panicked".into())))
            }))
            .collect()
    });
    let mut objects = Vec::with_capacity(compiled.len());
    // Each phase as the slowest part took it.
    let mut slowest = [std::time::Duration::ZERO; 3];
    for r in compiled {
        let (obj, phases) = r?;
        for (s, p) in slowest.iter_mut().zip(phases) {
            *s = (*s).max(p);
        }
        objects.push(obj);
    }
    let merge_start = std::time::Instant::now();
    let Some(merged) = link::relocatable(&objects) else { return Ok(None) };
    let merge = merge_start.elapsed();
    let [emit, opt, _] = slowest;
    let times = vec![
        ("llvm-emit", emit),
        ("llvm-opt", opt),
        ("machine-code", (merge_start - start).saturating_sub(emit + opt)),
        ("merge", merge),
    ];
    Ok(Some((merged, times)))
}

//! `withloop`: check, compile, build and run SaC programs.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use compiler_core::driver::FrontendOptions;
use compiler_core::opt;
use withloop_cli::{Emit, Engine, Invocation, check, compile, run};

#[derive(Parser, Debug)]
#[command(name = "withloop", version, about = "Compile and run shape-generic array programs written in SaC")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Report every error and warning in a program; exit 1 if there are errors.
    Check {
        #[command(flatten)]
        source: SourceArgs,
        /// Print the instances (specialisations) chosen for the user's functions.
        #[arg(long)]
        instances: bool,
        /// With --instances: list the library's instances too.
        #[arg(long)]
        all_instances: bool,
    },
    /// Run a program (its `main`, or --entry) and print the returned values.
    ///
    /// Exit status: 0 on success, 1 on a compile error, 2 on a run-time error.
    Run {
        #[command(flatten)]
        source: SourceArgs,
        /// The function to run.
        #[arg(long, default_value = "main")]
        entry: String,
        /// An argument for the entry function, in SaC syntax (`3`, `[1.5, 2.0]`,
        /// `reshape([2,2], [1,2,3,4])`); repeat for several.
        #[arg(long = "arg", value_name = "VALUE", allow_hyphen_values = true)]
        args: Vec<String>,
        /// Use the reference interpreter (the semantic oracle) instead of native code.
        #[arg(long)]
        interp: bool,
        /// Run the lowered IR in the IR interpreter instead.
        #[arg(long)]
        ir: bool,
        /// Run the optimised IR in the IR interpreter instead.
        #[arg(long)]
        opt: bool,
        #[command(flatten)]
        passes: PassArgs,
        #[command(flatten)]
        native: NativeArgs,
        /// Ignore the inferred types and dispatch every call at run time.
        #[arg(long)]
        untyped: bool,
    },
    /// Compile a program through the optimiser and print or write the result.
    Compile {
        #[command(flatten)]
        source: SourceArgs,
        /// What to produce: `ir` (the IR after all passes), `report` (the
        /// optimisation report), `report-json` (the same as JSON), `structure`
        /// (the with-loops that are left), `obj` (object file), `so` (shared
        /// library), `header` (C header of the ABI), `llvm-ir`, `asm`, `exe`.
        #[arg(long, default_value = "report")]
        emit: String,
        /// Where to write it (`-` for standard output). Default: text kinds
        /// are printed; `obj`, `so` and `exe` go beside the source
        /// (`prog.o`, `libprog.so`, `prog`).
        #[arg(short = 'o', long = "output", value_name = "OUT")]
        output: Option<PathBuf>,
        /// Export only this function (repeatable; default: every function of
        /// the file). What it does not call is neither type-checked nor
        /// compiled (shape hints for it are checked against its declaration).
        #[arg(long = "entry", value_name = "FUNCTION")]
        entries: Vec<String>,
        #[command(flatten)]
        native: NativeArgs,
        /// Include library functions in the report.
        #[arg(long)]
        library: bool,
        /// Leave run times out of the report.
        #[arg(long)]
        no_timing: bool,
        /// Print the wall time of each compile phase to stderr (front end,
        /// lowering, optimisation, LLVM emission, LLVM optimisation, machine
        /// code, link; the native ones only for native outputs).
        #[arg(long)]
        time_phases: bool,
        /// Leave out the generic code of entries with shape hints: each
        /// dispatches among its hinted instances only, and arguments none of
        /// them accepts fail at run time (R0004), as JAX's `jit` compiles one
        /// shape. Less to compile; an entry without hints keeps its generic code.
        #[arg(long)]
        no_generic: bool,
        #[command(flatten)]
        passes: PassArgs,
    },
    /// List the optimisation passes, stage by stage in pipeline order, with
    /// what each does (the names `--disable`, `--passes` and
    /// `--dump-ir-after` take).
    Passes,
    /// Build a native executable whose exit status is `main`'s result (a
    /// run-time error prints its location and exits with 2).
    Build {
        #[command(flatten)]
        source: SourceArgs,
        /// The executable to write (default: the source's name without `.sac`).
        #[arg(short = 'o', long = "output", value_name = "EXE")]
        output: Option<PathBuf>,
        #[command(flatten)]
        native: NativeArgs,
        #[command(flatten)]
        passes: PassArgs,
    },
}

/// How native code is generated.
#[derive(Args, Debug)]
struct NativeArgs {
    /// LLVM optimisation level, 0 to 3.
    #[arg(short = 'O', value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u8).range(0..=3))]
    opt_level: u8,
    /// Target triple (default: the host's).
    #[arg(long, value_name = "TRIPLE")]
    target: Option<String>,
    /// Target CPU (default: the host's; `generic` for portable code).
    #[arg(long, value_name = "CPU")]
    cpu: Option<String>,
    /// Target features, e.g. `+avx2,-fma` (default: the host CPU's).
    // A list may start with `-` (`--features -avx512f`): a value, not a flag.
    #[arg(long, value_name = "FEATURES", allow_hyphen_values = true)]
    features: Option<String>,
    /// Run every with-loop on one thread (no parallel with-loops).
    #[arg(long)]
    sequential: bool,
    /// Combine the elements of floating-point folds strictly in index order,
    /// as the interpreter does (by default `+` and `*` folds may be reassociated
    /// and vectorised, and a register tile's multiply-add steps fused into FMA
    /// instructions, as gcc -O3 does: SaC leaves a fold's order open).
    #[arg(long)]
    exact_folds: bool,
    /// Call the scalar `exp`, `log`, `sin`, `cos`, `pow` per vector lane instead
    /// of glibc's vector versions (libmvec: within 4 ulp, not 1; x86-64 Linux).
    #[arg(long)]
    no_vector_math: bool,
}

impl NativeArgs {
    fn options(&self) -> withloop_codegen::Options {
        withloop_codegen::Options {
            opt_level: self.opt_level,
            triple: self.target.clone(),
            cpu: self.cpu.clone(),
            features: self.features.clone(),
            parallel: !self.sequential,
            exact_folds: self.exact_folds,
            vector_math: !self.no_vector_math,
            ..Default::default()
        }
    }
}

/// Which optimisation passes run (`--no-PASS` is short for `--disable PASS`).
#[derive(Args, Debug)]
struct PassArgs {
    /// Switch a pass off (repeatable); `withloop passes` lists them.
    #[arg(long = "disable", value_name = "PASS")]
    disable: Vec<String>,
    /// Run only these passes (comma-separated; `none` for none).
    #[arg(long, value_name = "PASS,…", value_delimiter = ',')]
    passes: Option<Vec<String>>,
    /// Print the IR after every run of this pass.
    #[arg(long, value_name = "PASS")]
    dump_ir_after: Option<String>,
    /// Run the IR verifier after every pass.
    #[arg(long)]
    verify_ir: bool,
}

impl PassArgs {
    fn options(&self) -> Result<opt::PipelineOptions, String> {
        let known = opt::pass_names();
        let check = |p: &str| {
            if known.contains(&p) { Ok(()) } else { Err(format!("unknown pass `{p}` (passes: {})", known.join(", "))) }
        };
        let mut options = match &self.passes {
            Some(only) => {
                let only: Vec<&str> = only.iter().map(String::as_str).filter(|p| *p != "none").collect();
                for p in &only {
                    check(p)?;
                }
                opt::PipelineOptions::only(&only)
            }
            None => opt::PipelineOptions::default(),
        };
        for p in &self.disable {
            check(p)?;
            options.disabled.insert(p.clone());
        }
        if let Some(p) = &self.dump_ir_after {
            check(p)?;
        }
        options.dump_after = self.dump_ir_after.clone();
        options.verify = self.verify_ir || cfg!(debug_assertions);
        // One compile per process: function-local passes may use every core
        // (`PipelineOptions::threads`).
        options.threads = std::thread::available_parallelism().ok().map(|n| n.get());
        Ok(options)
    }

    /// [`Self::options`] for native code: with the target's register tile,
    /// and whether its matrix products run as the runtime's product.
    fn native_options(&self, native: &NativeArgs) -> Result<opt::PipelineOptions, String> {
        let mut options = self.options()?;
        options.register_tile = withloop_codegen::register_tile(&native.options());
        options.matrix_products = withloop_codegen::matrix_products(&native.options());
        Ok(options)
    }
}

#[derive(Args, Debug)]
struct SourceArgs {
    /// The SaC source file.
    file: PathBuf,
    /// Define a preprocessor macro, `NAME` or `NAME=VALUE` (as sac2c's -D).
    #[arg(short = 'D', value_name = "NAME[=VALUE]")]
    defines: Vec<String>,
    /// Add a directory to search for #include files.
    #[arg(short = 'I', value_name = "DIR")]
    include_dirs: Vec<String>,
    /// Do not load the implicit prelude (sac2c's -noprelude).
    #[arg(long)]
    noprelude: bool,
    /// A shape hint: specialise FUNCTION for PARAMETER of TYPE, e.g.
    /// `--shape main.a=double[100,100]` or `--shape f.x=int[.,.]`. Repeatable.
    #[arg(long = "shape", value_name = "FUNCTION.PARAMETER=TYPE")]
    shapes: Vec<String>,
    /// Most specialisations per function (sac2c's -maxspec).
    #[arg(long, value_name = "N")]
    maxspec: Option<usize>,
}

impl SourceArgs {
    fn invocation(self) -> Invocation {
        Invocation {
            file: self.file,
            frontend: FrontendOptions {
                defines: self.defines,
                include_dirs: self.include_dirs,
                no_prelude: self.noprelude,
                shape_hints: self.shapes,
                max_specialisations: self.maxspec,
                ..Default::default()
            },
            ..Default::default()
        }
    }
}

fn main() -> ExitCode {
    // sac2c spells its long flags with one dash; accept that spelling too.
    // `--no-wlf` is `--disable wlf`.
    let argv = std::env::args().flat_map(|a| {
        if a == "-noprelude" {
            vec!["--noprelude".to_string()]
        } else if let Some(p) = a.strip_prefix("--no-").filter(|p| opt::pass_names().contains(p)) {
            vec!["--disable".to_string(), p.to_string()]
        } else {
            vec![a]
        }
    });
    let cli = Cli::parse_from(argv);
    // Not for `run`: compiled code's large arrays ask for huge pages
    // themselves (the runtime's `blocks.rs`), and they pay there.
    if !matches!(cli.command, Command::Run { .. }) {
        withloop_codegen::small_pages_only();
    }
    let report = match cli.command {
        Command::Check { source, instances, all_instances } => {
            let mut inv = source.invocation();
            inv.list_instances = instances || all_instances;
            inv.list_library_instances = all_instances;
            check(&inv)
        }
        Command::Compile {
            source,
            emit,
            output,
            entries,
            native,
            passes,
            library,
            no_timing,
            time_phases,
            no_generic,
        } => {
            let mut inv = source.invocation();
            inv.frontend.entries = entries;
            inv.leave_out_generic = no_generic;
            inv.list_library_instances = library;
            inv.time_phases = time_phases;
            let Some(emit) = Emit::parse(&emit) else {
                let names: Vec<String> = Emit::NAMES.iter().map(|(n, _)| format!("`{n}`")).collect();
                eprintln!("error: unknown --emit `{emit}` (expected one of {})", names.join(", "));
                return ExitCode::from(64);
            };
            let options = match passes.native_options(&native) {
                Ok(mut o) => {
                    o.no_timing = no_timing;
                    o
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(64);
                }
            };
            compile(&inv, &options, emit, &native.options(), output.as_deref())
        }
        Command::Passes => withloop_cli::passes(),
        Command::Build { source, output, native, passes } => {
            let inv = source.invocation();
            match passes.native_options(&native) {
                Ok(options) => compile(&inv, &options, Emit::Executable, &native.options(), output.as_deref()),
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(64);
                }
            }
        }
        Command::Run { source, entry, args, interp, ir, opt, passes, native, untyped } => {
            let mut inv = source.invocation();
            if !interp && !ir && !opt && !untyped {
                match passes.native_options(&native) {
                    Ok(o) => inv.engine = Engine::Native(o, native.options()),
                    Err(e) => {
                        eprintln!("error: {e}");
                        return ExitCode::from(64);
                    }
                }
            }
            if ir {
                inv.engine = Engine::Ir;
            }
            if opt {
                match passes.options() {
                    Ok(o) => inv.engine = Engine::Optimised(o),
                    Err(e) => {
                        eprintln!("error: {e}");
                        return ExitCode::from(64);
                    }
                }
            }
            inv.entry = Some(entry);
            inv.args = args;
            inv.untyped = untyped;
            run(&inv)
        }
    };
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(&report.stdout);
    let _ = out.flush();
    eprint!("{}", report.stderr);
    ExitCode::from(report.exit_code as u8)
}

/// mimalloc, with `override` (LLVM's C++ allocations go through it too): the
/// optimiser's IR rewriting is allocation-heavy, and glibc's malloc and free
/// were a quarter of its profile. Compiling bench/kernels.sac's 13 kernels:
/// optimisation 215 -> 162 ms, the whole compile -9%.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_feature_list_may_start_with_a_minus() {
        let cli = Cli::try_parse_from(["withloop", "compile", "f.sac", "--features", "-avx512f,+fma", "--emit", "obj"])
            .expect("`-avx512f` is the value of --features");
        let Command::Compile { native, .. } = cli.command else { panic!("a compile command") };
        assert_eq!(native.features.as_deref(), Some("-avx512f,+fma"));
    }
}

//! The C ABI end to end: a generated shared library and header used from a C
//! program and from Python (ctypes + NumPy), and executables from
//! `withloop build` (exit status, output, run-time errors with locations).
//!
//! Needs the system C compiler and python3 with NumPy (`.ci/run` installs them).

use std::path::{Path, PathBuf};
use std::process::Command;

use compiler_core::driver::FrontendOptions;
use compiler_core::opt::{MatrixProducts, PipelineOptions};
use withloop_cli::{Emit, Invocation, compile};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("abi")
}

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("withloop-abi-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch directory");
    d
}

fn invocation(file: &str, hints: &[&str]) -> Invocation {
    Invocation {
        file: dir().join(file),
        frontend: FrontendOptions { shape_hints: hints.iter().map(|h| h.to_string()).collect(), ..Default::default() },
        ..Default::default()
    }
}

fn emit(inv: &Invocation, emit: Emit, out: &Path) {
    let report = compile(inv, &PipelineOptions::default(), emit, &withloop_codegen::Options::default(), Some(out));
    assert_eq!(report.exit_code, 0, "withloop compile --emit {emit:?} failed:\n{}", report.stderr);
    assert!(out.is_file(), "{} was not written", out.display());
}

fn run(cmd: &mut Command) -> (i32, String, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Shared library + header for kernels.sac (with a `double[3,3]` variant of `scale`).
fn kernels(work: &Path) {
    let inv = invocation("kernels.sac", &["scale.m=double[3,3]"]);
    emit(&inv, Emit::Shared, &work.join("libkernels.so"));
    emit(&inv, Emit::Header, &work.join("kernels.h"));
}

/// Builds the C program `abi/NAME.c` against `libLIB.so` and its header in
/// `work`, as `work/NAME`.
fn build_c(work: &Path, name: &str, lib: &str) -> PathBuf {
    let exe = work.join(name);
    let (code, _, stderr) = run(Command::new("cc")
        .args(["-Wall", "-Wextra", "-Werror", "-std=c11", "-o"])
        .arg(&exe)
        .arg(dir().join(format!("{name}.c")))
        .arg("-I")
        .arg(work)
        .arg("-L")
        .arg(work)
        .arg(format!("-l{lib}")));
    assert_eq!(code, 0, "cc failed:\n{stderr}");
    exe
}

/// Builds abi/check.c against `libkernels.so` and `kernels.h` in `work`, runs
/// it, checks that none of its checks failed; returns what it printed.
fn run_check_c(work: &Path) -> String {
    let exe = build_c(work, "check", "kernels");
    let (code, stdout, stderr) = run(Command::new(&exe).env("LD_LIBRARY_PATH", work));
    assert_eq!(code, 0, "the C program failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("0 failure(s)"), "{stdout}");
    stdout
}

#[test]
fn a_c_program_calls_the_shared_library_through_the_header() {
    let work = scratch("c");
    kernels(&work);
    let header = std::fs::read_to_string(work.join("kernels.h")).expect("header");
    for decl in [
        "int32_t wl_scale(wl_ctx *ctx, const wl_array *m /* double[.,.] */, double s, wl_array *result0 /* double[.,.] */);",
        "int32_t wl_scale__d_3_3__d(wl_ctx *ctx, const wl_array *m /* double[3,3] */, double s, wl_array *result0 /* double[3,3] */);",
        "int32_t wl_total(wl_ctx *ctx, const wl_array *a /* double[*] */, double *result0);",
        "int32_t wl_squares(wl_ctx *ctx, int32_t n, wl_array *result0 /* int[.] */);",
        "int32_t wl_anyneg(wl_ctx *ctx, const wl_array *x /* float[.] */, bool *result0);",
        "int32_t wl_inc_(wl_ctx *ctx, const wl_array *a /* int[.] */, wl_array *result0 /* int[.] */);",
        "int32_t wl_keywords(wl_ctx *ctx, int32_t new_, int32_t typeof_, int32_t int32_t_, int32_t arg__x, int32_t *result0);",
    ] {
        assert!(header.contains(decl), "the header lacks `{decl}`:\n{header}");
    }
    // The header is C++ too.
    let probe = work.join("probe.cpp");
    std::fs::write(&probe, "#include \"kernels.h\"\nint main() { return wl_ctx_new() == nullptr; }\n").unwrap();
    let (code, _, stderr) =
        run(Command::new("g++").args(["-std=c++17", "-Wall", "-Werror", "-fsyntax-only", "-I"]).arg(&work).arg(&probe));
    assert_eq!(code, 0, "g++ rejects the header:\n{stderr}");
    let stdout = run_check_c(&work);
    assert!(stdout.contains("message: argument `m` must have shape [3,3], not [2,3]"), "{stdout}");
    assert!(
        stdout.contains("error R0001 at ")
            && stdout.contains("kernels.sac:16:10: index [5] is out of bounds for shape [3]"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn a_library_compiled_in_parts_links_and_runs() {
    // Three parts on threads of their own, merged into one object: functions
    // called across parts are hidden globals, exports go with their functions.
    let work = scratch("parts");
    let inv = invocation("kernels.sac", &["scale.m=double[3,3]"]);
    let parts = withloop_codegen::Options { partitions: Some(3), ..Default::default() };
    let report = compile(&inv, &PipelineOptions::default(), Emit::Shared, &parts, Some(&work.join("libkernels.so")));
    assert_eq!(report.exit_code, 0, "compile failed:\n{}", report.stderr);
    emit(&inv, Emit::Header, &work.join("kernels.h"));
    run_check_c(&work);
    // Only the exports are visible from the library.
    let (_, symbols, _) = run(Command::new("nm").args(["-D", "--defined-only"]).arg(work.join("libkernels.so")));
    assert!(symbols.lines().any(|l| l.ends_with(" wl_scale")), "{symbols}");
    assert!(!symbols.contains(" wl."), "internal functions are exported:\n{symbols}");
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn cold_code_compiled_in_a_part_of_its_own_runs() {
    // The generic relaxation's original code (for extents below the version's
    // threshold) is a cold function: compiled in parts, it goes to a part of
    // its own, compiled at -O0. Both versions run, and agree with the
    // interpreter's output (checked in when this test was written).
    let work = scratch("cold");
    let inv = invocation("cold.sac", &[]);
    let object = work.join("cold.o");
    let parts = withloop_codegen::Options { partitions: Some(2), ..Default::default() };
    let report = compile(&inv, &PipelineOptions::default(), Emit::Object, &parts, Some(&object));
    assert_eq!(report.exit_code, 0, "compile failed:\n{}", report.stderr);
    let (_, symbols, _) = run(Command::new("nm").arg("--defined-only").arg(&object));
    assert!(symbols.contains("relax_apl__d_X_X__i__original1"), "no cold original:\n{symbols}");
    let exe = work.join("cold");
    let report = compile(&inv, &PipelineOptions::default(), Emit::Executable, &parts, Some(&exe));
    assert_eq!(report.exit_code, 0, "build failed:\n{}", report.stderr);
    let (code, stdout, stderr) = run(&mut Command::new(&exe));
    assert_eq!(code, 0, "{stdout}{stderr}");
    let small = "Shape    : <  2,  5>\n\
                 |0.000000e+00 1.000000e+00 4.000000e+00 9.000000e+00 1.600000e+01 | \n\
                 |2.500000e+01 3.600000e+01 4.900000e+01 6.400000e+01 8.100000e+01 | \n";
    let large = "|2.500000e+01 6.037500e+01 7.825000e+01 8.837500e+01 8.100000e+01 | \n\
                 |1.000000e+02 1.510625e+02 1.805625e+02 1.990625e+02 1.960000e+02 | \n\
                 |2.250000e+02 2.860625e+02 3.255625e+02 3.540625e+02 3.610000e+02 | \n\
                 |4.000000e+02 4.653750e+02 5.132500e+02 5.533750e+02 5.760000e+02 | \n";
    assert!(stdout.contains(small) && stdout.contains(large), "{stdout}");
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn the_same_program_compiles_to_the_same_bytes() {
    // A compile cache hands out what one compile wrote; every compile of the
    // program must write the same (the order of reference count drops once
    // followed a hash set's).
    let work = scratch("deterministic");
    let inv = invocation("cold.sac", &[]);
    let parts = withloop_codegen::Options { partitions: Some(2), ..Default::default() };
    let bytes = |emit: Emit, name: &str, k: usize| {
        let out = work.join(format!("{name}{k}"));
        let report = compile(&inv, &PipelineOptions::default(), emit, &parts, Some(&out));
        assert_eq!(report.exit_code, 0, "compile failed:\n{}", report.stderr);
        std::fs::read(&out).expect("output")
    };
    for (emit, name) in [(Emit::LlvmIr, "cold.ll"), (Emit::Object, "cold.o")] {
        let first = bytes(emit, name, 0);
        for k in 1..4 {
            assert!(bytes(emit, name, k) == first, "{name}: compile {k} differs from the first");
        }
    }
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn python_calls_the_shared_library_with_numpy_arrays() {
    let work = scratch("py");
    kernels(&work);
    let (code, stdout, stderr) =
        run(Command::new("python3").arg(dir().join("check.py")).arg(work.join("libkernels.so")));
    assert_eq!(code, 0, "the Python script failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("scale (3, 4) 33.0"), "{stdout}");
    assert!(stdout.contains("total ok"), "{stdout}");
    assert!(stdout.contains("squares [0, 1, 4, 9, 16, 25]"), "{stdout}");
    assert!(stdout.contains("kernels.sac:16:10 index [3] is out of bounds for shape [3]"), "{stdout}");
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn an_executable_exits_with_mains_result() {
    let work = scratch("exe");
    let exe = work.join("exit");
    emit(&invocation("exit.sac", &[]), Emit::Executable, &exe);
    let (code, stdout, stderr) = run(&mut Command::new(&exe));
    assert_eq!((code, stdout.as_str(), stderr.as_str()), (17, "sum 30\n", ""));
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn calls_that_fail_release_what_they_allocated() {
    // Each failing function of failing.sac allocates arrays of 100000 ints
    // before its error: in a function, in one that returns two arrays,
    // through nested calls, carried by a loop, and as with-loop results
    // being built, and a fold split over threads (its partial results).
    // 1200 failing calls lost
    // 800 MB when a failure returned without releasing them.
    let work = scratch("failing");
    let inv = invocation("failing.sac", &[]);
    emit(&inv, Emit::Shared, &work.join("libfailing.so"));
    emit(&inv, Emit::Header, &work.join("failing.h"));
    let exe = build_c(&work, "failing", "failing");
    let (code, stdout, stderr) = run(Command::new(&exe).env("LD_LIBRARY_PATH", &work));
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.starts_with("21505 of 21505 calls failed (R0001)"), "{stdout}");
    let grown: i64 = stdout
        .rsplit("grew by ")
        .next()
        .and_then(|t| t.trim().strip_suffix("kB"))
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(grown < 32 * 1024, "{stdout}");
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn an_executable_reports_run_time_errors_with_their_location() {
    let work = scratch("fails");
    let exe = work.join("fails");
    emit(&invocation("fails.sac", &[]), Emit::Executable, &exe);
    let (code, stdout, stderr) = run(&mut Command::new(&exe));
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(stderr.ends_with("fails.sac:6:10: error[R0001]: index [3] is out of bounds for shape [3]\n"), "{stderr}");
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn object_assembly_and_llvm_ir_are_written() {
    let work = scratch("kinds");
    let inv = invocation("kernels.sac", &[]);
    emit(&inv, Emit::Object, &work.join("k.o"));
    let obj = std::fs::read(work.join("k.o")).expect("object");
    assert_eq!(&obj[..4], b"\x7fELF", "not an ELF object");
    emit(&inv, Emit::Asm, &work.join("k.s"));
    let asm = std::fs::read_to_string(work.join("k.s")).expect("assembly");
    assert!(asm.contains("wl_scale:") && asm.contains(".globl\twl_scale"), "{asm}");
    emit(&inv, Emit::LlvmIr, &work.join("k.ll"));
    let ll = std::fs::read_to_string(work.join("k.ll")).expect("llvm ir");
    assert!(ll.contains(" i32 @wl_total(ptr"), "{}", &ll[..ll.len().min(2000)]);
    // The C functions are glue LLVM leaves unoptimised (compile time); the
    // function each calls stays a function of its own, optimised.
    let attrs_of = |define: &str| {
        let line =
            ll.lines().find(|l| l.starts_with("define") && l.contains(define)).unwrap_or_else(|| panic!("{define}"));
        let group = line.rsplit_once('#').map(|(_, g)| g.trim_end_matches(" {").to_string()).expect("attribute group");
        let attrs = ll.lines().find(|l| l.starts_with(&format!("attributes #{group} = "))).expect("attributes");
        attrs.to_string()
    };
    assert!(attrs_of("@wl_total(").contains("optnone"), "{}", attrs_of("@wl_total("));
    assert!(
        ll.lines().any(|l| l.starts_with("define") && l.contains("@wl.total")),
        "the kernel was inlined into its C function"
    );
    assert!(!attrs_of("@wl.total").contains("optnone"), "{}", attrs_of("@wl.total"));
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn c_functions_of_endless_loops_loop() {
    let work = scratch("spin");
    let inv = invocation("spin.sac", &["spin.n=int"]);
    emit(&inv, Emit::Shared, &work.join("libspin.so"));
    emit(&inv, Emit::Header, &work.join("spin.h"));
    let header = std::fs::read_to_string(work.join("spin.h")).expect("header");
    assert!(header.contains("int32_t wl_spin__i(") && header.contains("int32_t wl_spin("), "{header}");
    // Each C function (the variant's and the entry's) is called in a child
    // that must still be running when `timeout` stops it (exit status 124).
    for symbol in ["wl_spin__i", "wl_spin"] {
        let source = work.join(format!("{symbol}.c"));
        let program = format!(
            "#include <stdio.h>\n#include \"spin.h\"\nint main(void) {{ wl_ctx *ctx = wl_ctx_new(); int32_t r = 0; \
             int32_t rc = {symbol}(ctx, 1, &r); printf(\"returned %d\\n\", (int)rc); return 0; }}\n"
        );
        std::fs::write(&source, program).expect("C source");
        let exe = work.join(symbol);
        let (code, _, stderr) = run(Command::new("cc")
            .arg("-o")
            .arg(&exe)
            .arg(&source)
            .arg("-I")
            .arg(&work)
            .arg("-L")
            .arg(&work)
            .arg("-lspin"));
        assert_eq!(code, 0, "cc failed:\n{stderr}");
        let (code, stdout, _) = run(Command::new("timeout").arg("1").arg(&exe).env("LD_LIBRARY_PATH", &work));
        assert_eq!(code, 124, "{symbol} returned instead of looping: {stdout}");
    }
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn no_aggregate_stores_for_fast_instruction_selection() {
    // Cold functions (and `-O0` builds) go through FastISel, which cannot
    // store an aggregate and hands the rest of the block to SelectionDAG at
    // several times the cost: stack vectors' shapes are stored extent by
    // extent.
    let work = scratch("fastisel");
    let inv = invocation("kernels.sac", &[]);
    let out = work.join("k0.ll");
    let native = withloop_codegen::Options { opt_level: 0, ..Default::default() };
    let report = compile(&inv, &PipelineOptions::default(), Emit::LlvmIr, &native, Some(&out));
    assert_eq!(report.exit_code, 0, "{}", report.stderr);
    let ll = std::fs::read_to_string(&out).expect("llvm ir");
    let aggregate: Vec<&str> =
        ll.lines().filter(|l| l.trim_start().starts_with("store [") || l.trim_start().starts_with("store {")).collect();
    assert!(aggregate.is_empty(), "aggregate stores: {aggregate:#?}");
    assert!(ll.contains("stackvec.extent"), "no stack vector in the kernels");
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn loops_are_not_unrolled_for_unknown_trip_counts() {
    let work = scratch("unroll");
    let inv = invocation("kernels.sac", &[]);
    let ll = |opt_level| {
        let out = work.join(format!("k{opt_level}.ll"));
        let native = withloop_codegen::Options { opt_level, ..Default::default() };
        let report = compile(&inv, &PipelineOptions::default(), Emit::LlvmIr, &native, Some(&out));
        assert_eq!(report.exit_code, 0, "{}", report.stderr);
        std::fs::read_to_string(&out).expect("llvm ir")
    };
    // Every loop's back edge carries a loop ID (a distinct node whose first
    // operand is itself) with the option; loops over a few iterations (index
    // components, extents, chunks) with the options that keep them scalar.
    let o0 = ll(0);
    let node_of = |text: &str| {
        o0.lines()
            .find_map(|l| l.strip_suffix(&format!(" = !{{{text}}}")))
            .unwrap_or_else(|| panic!("no node !{{{text}}} in\n{o0}"))
            .to_string()
    };
    let option = node_of("!\"llvm.loop.unroll.runtime.disable\"");
    let small = [
        node_of("!\"llvm.loop.vectorize.width\", i32 1"),
        node_of("!\"llvm.loop.interleave.count\", i32 1"),
        node_of("!\"llvm.loop.unroll.disable\""),
    ]
    .join(", ");
    let ids: Vec<&str> = o0.lines().filter_map(|l| l.split_once(", !llvm.loop ").map(|(_, id)| id)).collect();
    assert!(!ids.is_empty(), "no loop IDs in\n{o0}");
    let mut small_loops = 0;
    for id in &ids {
        let node = format!("\n{id} = distinct !{{{id}, {option}}}");
        let small_node = format!("\n{id} = distinct !{{{id}, {small}}}");
        small_loops += o0.contains(&small_node) as usize;
        assert!(
            o0.contains(&node) || o0.contains(&small_node),
            "loop ID {id} is neither `distinct {{self, {option}}}` nor `distinct {{self, {small}}}`"
        );
    }
    assert!(small_loops > 0, "no loop marked as small in\n{o0}");
    // After O3 no loop has the prologue/remainder copies of run-time unrolling.
    let o3 = ll(3);
    assert!(!o3.contains(".prol:") && !o3.contains(".epil:"), "run-time unrolled:\n{o3}");
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn entry_options_export_only_the_named_functions() {
    let work = scratch("entry");
    let mut inv = invocation("kernels.sac", &[]);
    inv.frontend.entries = vec!["total".to_string()];
    emit(&inv, Emit::LlvmIr, &work.join("k.ll"));
    let ll = std::fs::read_to_string(work.join("k.ll")).expect("llvm ir");
    assert!(ll.contains(" i32 @wl_total(ptr"), "{}", &ll[..ll.len().min(2000)]);
    assert!(!ll.contains("@wl_scale("), "scale was not asked for:\n{}", &ll[..ll.len().min(2000)]);
    inv.frontend.entries = vec!["total".to_string(), "nothing".to_string()];
    let report =
        compile(&inv, &PipelineOptions::default(), Emit::LlvmIr, &Default::default(), Some(&work.join("x.ll")));
    assert_ne!(report.exit_code, 0);
    assert!(
        report.stderr.contains("defines no function `nothing` to export")
            && report.stderr.contains("same, scale, squares, total"),
        "{}",
        report.stderr
    );
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn with_loops_known_to_be_small_get_no_parallel_variant() {
    let work = scratch("small");
    let inv = invocation("parallel.sac", &[]);
    let chunks = |native: &withloop_codegen::Options| {
        let out = work.join("p.ll");
        let report = compile(&inv, &PipelineOptions::default(), Emit::LlvmIr, native, Some(&out));
        assert_eq!(report.exit_code, 0, "{}", report.stderr);
        let ll = std::fs::read_to_string(&out).expect("llvm ir");
        let count = |f: &str| ll.matches(&format!("define internal void @wl.chunk.{f}")).count();
        (count("small"), count("big"), count("fibs"), count("louds"), count("blocks"), count("wide"), count("edges"))
    };
    let o0 = withloop_codegen::Options { opt_level: 0, ..Default::default() };
    assert_eq!(
        chunks(&o0),
        (0, 1, 1, 0, 1, 1, 1),
        "81 iterations are below the compile-time cut; 12 calls of a recursive function are not; \
         calls of a printing function never run in parallel; ten indices of a nested 32x32 fold \
         each are not either; inside the chunks of a split with-loop, nested ones of static size \
         get no variant of their own; a part of one row never splits"
    );
    let eager = withloop_codegen::Options { opt_level: 0, parallel_min: Some(1), ..Default::default() };
    assert_eq!(
        chunks(&eager),
        (1, 1, 1, 0, 1, 1, 1),
        "parallel_min 1 splits every with-loop that may run in parallel (but nested ones inside chunks, \
         and parts of one row)"
    );
    let _ = std::fs::remove_dir_all(&work);
}

/// A function far larger than any the optimiser usually leaves (a
/// rank-generic loop full of inlined dispatch code) is compiled without LLVM's
/// optimisation (`optnone`), which grows faster than linearly with its size;
/// the program's other functions are optimised as usual.
#[test]
fn very_large_functions_are_left_unoptimised() {
    let work = scratch("large");
    let mut inv = invocation("../lang/opt/relax_apl_generic_hidden_rank.sac", &["relax_apl.a=double[4,4]"]);
    inv.frontend.entries = vec!["relax_apl".to_string()];
    emit(&inv, Emit::LlvmIr, &work.join("large.ll"));
    let ll = std::fs::read_to_string(work.join("large.ll")).expect("llvm ir");
    // The attribute group of each defined function, and the groups' text.
    let group_of = |name: &str| {
        let line = ll.lines().find(|l| l.starts_with("define") && l.contains(&format!("@{name}("))).unwrap_or("");
        line.rsplit(' ').find(|w| w.starts_with('#')).unwrap_or("").to_string()
    };
    let optnone =
        |group: &str| ll.lines().any(|l| l.starts_with(&format!("attributes {group} = ")) && l.contains("optnone"));
    let generic = group_of("wl.relax_apl__d_X_X__i");
    assert!(!generic.is_empty() && optnone(&generic), "the generic instance is not left unoptimised ({generic})");
    // Functions of ordinary size are optimised as usual: a with-loop's chunk
    // function (the C functions, glue, are always left unoptimised).
    let chunk = ll
        .lines()
        .find(|l| l.starts_with("define") && l.contains("@wl.chunk.relax_apl__d_X_X__i."))
        .and_then(|l| l.rsplit(' ').find(|w| w.starts_with('#')))
        .unwrap_or("")
        .to_string();
    assert!(!chunk.is_empty() && !optnone(&chunk), "a chunk function is optimised as usual ({chunk})");
    let variant = group_of("wl_relax_apl__d_X_X__i");
    assert!(!variant.is_empty() && optnone(&variant), "the variant's C function is not left unoptimised ({variant})");
    // The entry's dispatch wrapper, which only its C function calls, is glue too.
    let wrapper = group_of("wl.relax_apl__wrapper_double_int");
    assert!(!wrapper.is_empty() && optnone(&wrapper), "the entry's wrapper is not left unoptimised ({wrapper})");
    let _ = std::fs::remove_dir_all(&work);
}

/// An entry's instance whose own code only allocates, checks and hands its
/// with-loop to a chunk function, called once per call of the entry, is
/// glue LLVM leaves unoptimised (compile time); its chunk function, an
/// instance that loops itself and one that computes without chunk functions
/// are optimised.
#[test]
fn instances_that_only_drive_chunk_functions_are_left_unoptimised() {
    let work = scratch("drivers");
    let inv = invocation("drivers.sac", &[]);
    emit(&inv, Emit::LlvmIr, &work.join("drivers.ll"));
    let ll = std::fs::read_to_string(work.join("drivers.ll")).expect("llvm ir");
    let optnone = |prefix: &str| {
        let line = ll
            .lines()
            .find(|l| l.starts_with("define") && l.contains(&format!("@{prefix}")))
            .unwrap_or_else(|| panic!("no function {prefix}"));
        let group = line.rsplit(' ').find(|w| w.starts_with('#')).unwrap_or("");
        ll.lines().any(|l| l.starts_with(&format!("attributes {group} = ")) && l.contains("optnone"))
    };
    assert!(optnone("wl.scale__d_X_X("), "the driver is not left unoptimised");
    assert!(!optnone("wl.chunk.scale__d_X_X."), "its chunk function is not optimised");
    assert!(!optnone("wl.halve_steps__d_X_X__i("), "an instance with a loop is not optimised");
    assert!(!optnone("wl.det2__d_2_2("), "an instance that computes itself is not optimised");
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn vectorised_exp_and_log_call_libmvec_and_link_with_it() {
    let work = scratch("vecmath");
    let inv = invocation("vecmath.sac", &[]);
    // An explicit x86-64 target with AVX-512, whatever this machine is.
    let target = |vector_math| withloop_codegen::Options {
        triple: Some("x86_64-unknown-linux-gnu".into()),
        cpu: Some("x86-64-v4".into()),
        features: Some("+sse2,+avx2,+fma,+avx512f".into()),
        vector_math,
        ..Default::default()
    };
    let ll = |vector_math: bool| {
        let out = work.join(format!("v{vector_math}.ll"));
        let report = compile(&inv, &PipelineOptions::default(), Emit::LlvmIr, &target(vector_math), Some(&out));
        assert_eq!(report.exit_code, 0, "{}", report.stderr);
        std::fs::read_to_string(&out).expect("llvm ir")
    };
    let vector = ll(true);
    // (The loop calls `exp`: 512-bit vectors on this AVX-512 target, `_ZGVeN8v_exp`.)
    let calls = |f: &str| vector.lines().any(|l| l.contains("call <") && l.contains("@_ZGV") && l.contains(f));
    assert!(calls("eN8v_exp(") && calls("eN8v_log("), "no libmvec calls:\n{vector}");
    let scalar = ll(false);
    assert!(!scalar.contains("_ZGV"), "libmvec without vector math:\n{scalar}");
    assert!(scalar.contains("@llvm.exp.v4f64("), "the loop was not vectorised:\n{scalar}");
    // For this machine: the executable links (with -lmvec when it calls
    // libmvec) and prints what the scalar functions give, to 6 decimals.
    let exe = work.join("vecmath");
    emit(&inv, Emit::Executable, &exe);
    let (code, stdout, stderr) = run(&mut Command::new(&exe));
    assert_eq!((code, stderr.as_str()), (0, ""));
    let x: Vec<f64> = (0..4096).map(f64::from).collect();
    let y = |v: f64| (0.001 * v).exp() + (1.0 + v).ln();
    let total: f64 = x.iter().map(|&v| y(v)).sum();
    assert_eq!(stdout, format!("{:.6} {:.6}\n", y(1000.0), total));
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn register_tiles_for_avx_targets_jam_the_fold() {
    let work = scratch("tile");
    let inv = invocation("../lang/opt/register_tile.sac", &[]);
    let target = |cpu: &str, features: &str| withloop_codegen::Options {
        triple: Some("x86_64-unknown-linux-gnu".into()),
        cpu: Some(cpu.into()),
        features: (!features.is_empty()).then(|| features.into()),
        ..Default::default()
    };
    // A 4x32 tile where there are 32 vector registers of 8 doubles, 4x8 with
    // 16 of 4 (and FMA), none without; the features of a named CPU count
    // unless the list takes them away, as LLVM reads the two.
    let avx512 = target("x86-64-v4", "+sse2,+avx2,+fma,+avx512f");
    let avx2 = target("x86-64", "+sse2,+avx2,+fma");
    let sse = target("x86-64", "+sse2,+sse4.2");
    assert_eq!(withloop_codegen::register_tile(&avx512), Some([4, 32]));
    assert_eq!(withloop_codegen::register_tile(&avx2), Some([4, 8]));
    assert_eq!(withloop_codegen::register_tile(&sse), None);
    assert_eq!(withloop_codegen::register_tile(&target("sapphirerapids", "")), Some([4, 32]));
    assert_eq!(withloop_codegen::register_tile(&target("znver3", "")), Some([4, 8]));
    assert_eq!(withloop_codegen::register_tile(&target("x86-64-v4", "-avx512f")), Some([4, 8]));
    assert_eq!(withloop_codegen::register_tile(&target("westmere", "")), None);
    // Matrix products run as the runtime's product where its AVX2 tiles beat
    // the register tiles: AVX2 and FMA without AVX-512; with AVX-512 only
    // generic code's; never without AVX2.
    let products = |t: &withloop_codegen::Options| withloop_codegen::matrix_products(t);
    assert_eq!(products(&avx2), MatrixProducts::All);
    assert_eq!(products(&target("znver3", "")), MatrixProducts::All);
    assert_eq!(products(&target("x86-64-v4", "-avx512f")), MatrixProducts::All);
    assert_eq!(products(&avx512), MatrixProducts::Dynamic);
    assert_eq!(products(&target("sapphirerapids", "")), MatrixProducts::Dynamic);
    assert_eq!(products(&sse), MatrixProducts::None);
    assert_eq!(products(&target("westmere", "")), MatrixProducts::None);
    let ll = |native: &withloop_codegen::Options, name: &str| {
        let out = work.join(name);
        let pipeline = PipelineOptions { register_tile: withloop_codegen::register_tile(native), ..Default::default() };
        let report = compile(&inv, &pipeline, Emit::LlvmIr, native, Some(&out));
        assert_eq!(report.exit_code, 0, "{}", report.stderr);
        std::fs::read_to_string(&out).expect("llvm ir")
    };
    // Tiled: full tiles run jammed (their accumulators become vectors, added
    // in order), the edges index by index.
    let tiled = ll(&avx512, "tiled.ll");
    assert!(tiled.contains("tile.full") && tiled.contains("tile.edge"), "no tiles:\n{tiled}");
    assert!(
        tiled.lines().any(|l| l.contains("= fadd ") && l.contains("x double>") && !l.contains("reassoc")),
        "the tile's accumulators are not vectors:\n{tiled}"
    );
    // Each tile a vector per row of the tile (the columns are its lanes);
    // the multiply-add may be fused (contracted), never reassociated.
    assert!(tiled.contains("fadd contract <32 x double>"), "the tile's rows are not vectors:\n{tiled}");
    let exact = ll(&withloop_codegen::Options { exact_folds: true, ..avx512.clone() }, "exact.ll");
    assert!(exact.contains("tile.full") && !exact.contains("contract"), "exact folds fused:\n{exact}");
    // The jammed nest is emitted once per tiled with-loop (the main program's
    // and the generic instance's): a parallel part's inline path calls its
    // chunk function instead of holding a copy (unoptimised IR, so LLVM has
    // not duplicated blocks).
    let unoptimised = ll(&withloop_codegen::Options { opt_level: 0, ..avx512.clone() }, "tiled-O0.ll");
    let full_tiles = unoptimised.lines().filter(|l| l.starts_with("tile.full")).count();
    assert_eq!(full_tiles, 2, "{full_tiles} jammed nests for two tiled with-loops:\n{unoptimised}");
    let narrow = ll(&avx2, "narrow.ll");
    assert!(narrow.contains("fadd contract <8 x double>"), "no 8-column tile rows with AVX2:\n{narrow}");
    let untiled = ll(&sse, "untiled.ll");
    assert!(!untiled.contains("tile.full"), "a tile without AVX2:\n{untiled}");
    // The generic instance's tiled part packs panels: its chunks are ranges
    // of column tiles (each panel packed once), asked for like any other
    // part's. Its results on two threads are checked by the data-file tests.
    assert!(tiled.contains("@wl_parallel_chunks("), "the packed part is not split:\n{tiled}");
    let _ = std::fs::remove_dir_all(&work);
}

/// Loops of stencil steps marked `tiled` (`opt::timetile`) run in time tiles
/// (`withloop_rt`'s `wl_time_tiled`): with tile buffers small enough for
/// this program's arrays (bands of two to eight steps), on one thread and on
/// two, the executable prints what it prints without tiles, and what the
/// interpreter prints; in instances of known shape and in generic ones
/// (`--maxspec 0`: no call is specialised).
#[test]
fn time_tiled_loops_compute_what_the_interpreter_does() {
    let work = scratch("timetile");
    // The four loops in `main` (which inlined them) and in the instances it
    // exports: of known shape and generic, or generic only. Without
    // specialisations, the APL relaxation's library calls (`rotate`, `take`,
    // …) stay calls of their generic instances, so its step does not fold
    // and is no stencil: three loops of two.
    for (name, max_specialisations, loops) in [("known", None, 12), ("generic", Some(0), 6)] {
        let mut inv = invocation("timetile.sac", &[]);
        inv.frontend.max_specialisations = max_specialisations;
        // Small as they are, the with-loops get their parallel variants
        // (which the tiles run).
        let native = withloop_codegen::Options { parallel_min: Some(1), ..Default::default() };
        let build = |emit: Emit, out: &Path| {
            let report = compile(&inv, &PipelineOptions::default(), emit, &native, Some(out));
            assert_eq!(report.exit_code, 0, "{}", report.stderr);
        };
        build(Emit::LlvmIr, &work.join(format!("{name}.ll")));
        let ll = std::fs::read_to_string(work.join(format!("{name}.ll"))).expect("llvm ir");
        assert_eq!(ll.matches("call i64 @wl_time_tiled(").count(), loops, "{name}: every loop runs through the tiles");
        let exe = work.join(name);
        build(Emit::Executable, &exe);
        let reference = withloop_cli::run(&inv);
        assert_eq!(reference.exit_code, 0, "{}", reference.stderr);
        // The interpreter also prints `main`'s result.
        let want = String::from_utf8_lossy(&reference.stdout).strip_suffix("0\n").expect("main's result").to_string();
        for (bytes, threads) in [("1000000000000", "2"), ("2500", "1"), ("2500", "2"), ("5000", "2"), ("12000", "1")] {
            let (code, stdout, stderr) =
                run(Command::new(&exe).env("WITHLOOP_TILE_BYTES", bytes).env("WITHLOOP_THREADS", threads));
            assert_eq!(code, 0, "{stderr}");
            assert!(
                stdout == want,
                "{name}: tile buffers of {bytes} bytes, {threads} threads:\n{stdout}\nwant:\n{want}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn a_construct_native_code_cannot_compile_is_a_limitation_with_its_code() {
    // A scan over tuples with array elements runs in the interpreter only.
    let mut inv = invocation("scan_tuple_of_arrays.l0", &[]);
    inv.args = vec!["[[1, 2], [3, 4]]".to_string()];
    inv.engine = withloop_cli::Engine::Native(PipelineOptions::default(), withloop_codegen::Options::default());
    let report = withloop_cli::run(&inv);
    assert_eq!(report.exit_code, 1, "{}", report.stderr);
    assert!(
        report.stderr.starts_with("error[L0001]: the native back end does not support a scan"),
        "{}",
        report.stderr
    );
    assert!(report.stderr.contains("--interp"), "{}", report.stderr);
    inv.engine = withloop_cli::Engine::default();
    let reference = withloop_cli::run(&inv);
    assert_eq!(reference.exit_code, 0, "{}", reference.stderr);
}

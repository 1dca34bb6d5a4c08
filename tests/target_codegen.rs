//! Code generation that differs by target.
//!
//! Streaming stores: an element-wise loop whose static result is larger than
//! `STREAM_MIN_BYTES` (32 MiB) stores non-temporally on x86-64, past the
//! caches, and fences before it returns; a small one stores as usual; one
//! whose length is known only at run time has both loops and takes the
//! streaming one for a large result. A streaming loop runs up to a 64-byte
//! boundary of its result first, so that its vector stores are aligned ones
//! (LLVM splits an under-aligned non-temporal vector store into one store
//! per element). The results are the same either way, on one thread and on
//! several (whose chunks start anywhere in the result), for elements of
//! every width. A with-loop part of static size that writes and reads 40 MiB
//! or more streams too, each row of its innermost loop aligned so.
//!
//! Loop strength reduction: off in LLVM's code generator on every target
//! (`configure_llvm`); targets other than x86-64 run it in the optimisation
//! pipeline instead, so their LLVM IR shows its induction variables.
//!
//! Vector math: a loop of `exp`/`log` calls libmvec at the width the target
//! has, a CPU given by name included (its features are the CPU's).

use compiler_core::driver::{FrontendOptions, frontend};
use compiler_core::interp::value::{Array, Elems, Value};
use compiler_core::opt::{self, PipelineOptions};
use compiler_core::syntax::cpp::MemoryLoader;
use withloop_codegen::{Options, Output};

/// 4,500,000 doubles: 36 MB, above the threshold; 1,000: far below;
/// `generic`: either, decided at run time.
const SOURCE: &str = "double[4500000] big(double[4500000] a) { return -a; }\n\
                      double[1000] small(double[1000] a) { return -a; }\n\
                      double[.] generic(double[.] a) { return -a; }\n";
const N: usize = 4_500_000;

fn optimised(source: &str) -> (compiler_core::ir::Module, compiler_core::span::SourceMap) {
    let fe = frontend("target_codegen.sac", source, &MemoryLoader::default(), &FrontendOptions::default());
    assert!(!fe.has_errors(), "{:?}", fe.diagnostics);
    let mut module = compiler_core::ir::lower::lower(&fe.program, &fe.typed, &fe.sources);
    opt::optimise(&mut module, &fe.sources, &PipelineOptions { verify: true, ..Default::default() })
        .unwrap_or_else(|b| panic!("pass `{}` broke the IR", b.pass));
    (module, fe.sources)
}

/// `source`, optimised, as LLVM IR for the host.
fn host_llvm_ir(source: &str) -> String {
    let (module, sources) = optimised(source);
    let ir = withloop_codegen::compile(&module, &sources, &Options::default(), false, Output::LlvmIr)
        .expect("the module compiles");
    String::from_utf8(ir).expect("LLVM IR is text")
}

/// The text of each function of an LLVM module whose name starts with `prefix`.
fn functions<'t>(ir: &'t str, prefix: &str) -> Vec<&'t str> {
    ir.split("\ndefine ")
        .filter(|f| f.split_once('@').is_some_and(|(_, rest)| rest.starts_with(prefix)))
        .map(|f| f.split("\n}\n").next().unwrap_or(f))
        .collect()
}

#[cfg(target_arch = "x86_64")]
#[test]
fn large_static_results_are_stored_past_the_caches() {
    let ir = host_llvm_ir(SOURCE);
    let big = functions(&ir, "wl.flat.stream.big");
    assert_eq!(big.len(), 1, "one flat loop for `big`, the streaming one");
    assert!(functions(&ir, "wl.flat.big").is_empty(), "no plain loop for `big`");
    assert!(big[0].contains("!nontemporal"), "{}", big[0]);
    assert!(big[0].contains("@llvm.x86.sse.sfence()"), "{}", big[0]);
    // The vectorised stores, past the head that reaches a 64-byte boundary.
    let aligned_vectors = |f: &str| {
        f.lines().any(|l| {
            l.contains("store <") && l.contains("x double>") && l.contains(", align 64,") && l.contains("!nontemporal")
        })
    };
    assert!(aligned_vectors(big[0]), "{}", big[0]);
    let small: Vec<&str> = functions(&ir, "wl.").into_iter().filter(|f| f.contains("small")).collect();
    assert!(!small.is_empty());
    assert!(small.iter().all(|f| !f.contains("!nontemporal")), "`small` stores as usual");
    let (plain, streaming) = (functions(&ir, "wl.flat.generic"), functions(&ir, "wl.flat.stream.generic"));
    assert_eq!((plain.len(), streaming.len()), (1, 1), "`generic`: a plain and a streaming loop");
    assert!(!plain[0].contains("!nontemporal"), "{}", plain[0]);
    let streaming = merged_into(&ir, streaming[0]);
    assert!(streaming.contains("!nontemporal"), "{streaming}");
    assert!(aligned_vectors(streaming), "{streaming}");
}

/// Function `f`, or, where LLVM's `mergefunc` found it identical to another
/// and left it a call of that one (`generic`'s streaming loop is `big`'s
/// loop), the function it calls.
fn merged_into<'t>(ir: &'t str, f: &'t str) -> &'t str {
    let body = f.split_once('{').map_or("", |(_, b)| b);
    let calls: Vec<&str> = body
        .lines()
        .filter_map(|l| l.split_once("call void @wl.").map(|(_, rest)| rest.split('(').next().unwrap_or("")))
        .collect();
    match calls.as_slice() {
        // The name up to its parameters: that function's definition.
        [callee] if !body.contains("store ") => functions(ir, &format!("wl.{callee}(")).first().copied().unwrap_or(f),
        _ => f,
    }
}

/// `entry` of `module` run natively on `arg` with `threads` threads: its
/// array result.
fn run_natively(
    module: &compiler_core::ir::Module,
    sources: &compiler_core::span::SourceMap,
    entry: &str,
    arg: &Value,
    threads: u32,
) -> std::sync::Arc<Array> {
    run_natively_on(module, sources, entry, vec![arg.clone()], threads)
}

/// [`run_natively`] on several arguments.
fn run_natively_on(
    module: &compiler_core::ir::Module,
    sources: &compiler_core::span::SourceMap,
    entry: &str,
    args: Vec<Value>,
    threads: u32,
) -> std::sync::Arc<Array> {
    run_natively_with(module, sources, entry, args, Options { threads: Some(threads), ..Default::default() })
}

/// [`run_natively_on`] with `options`.
fn run_natively_with(
    module: &compiler_core::ir::Module,
    sources: &compiler_core::span::SourceMap,
    entry: &str,
    args: Vec<Value>,
    options: Options,
) -> std::sync::Arc<Array> {
    let out = withloop_codegen::jit::run(module, sources, entry, args, &options, None, &mut |_| {})
        .unwrap_or_else(|e| panic!("run: {e:?}"));
    match out.into_iter().next() {
        Some(Value::Array(a)) => a,
        other => panic!("{entry}: an array result, not {other:?}"),
    }
}

#[test]
fn streamed_results_are_the_same_on_one_thread_and_two() {
    let (module, sources) = optimised(SOURCE);
    for (entry, n) in [("big", N), ("generic", N), ("generic", 1000)] {
        let input: Vec<f64> = (0..n).map(|i| (i % 977) as f64 * 0.5 - 100.0).collect();
        let arg = Value::Array(std::sync::Arc::new(Array { shape: vec![n], elems: Elems::Double(input.clone()) }));
        for threads in [1, 2] {
            let a = run_natively(&module, &sources, entry, &arg, threads);
            let Elems::Double(got) = &a.elems else { panic!("doubles") };
            assert_eq!(a.shape, [n]);
            assert!(got.iter().zip(&input).all(|(g, x)| *g == -*x), "{entry} of {n}, {threads} thread(s)");
        }
    }
}

/// Element-wise loops over 1-, 4- and 8-byte elements of run-time length.
const WIDTHS: &str = "bool[.] flip(bool[.] a) { return !a; }\n\
                      float[.] halve(float[.] a) { return a * 0.5f; }\n\
                      double[.] twice(double[.] a) { return a + a; }\n";

#[test]
fn streamed_results_are_whole_at_every_element_width_and_chunk_boundary() {
    let (module, sources) = optimised(WIDTHS);
    // Above 32 MiB at each width, odd lengths (a tail after the last whole
    // vector), and on three threads twelve chunks starting anywhere.
    let bools = 33_554_467;
    let flags: Vec<bool> = (0..bools).map(|i| i % 3 == 0).collect();
    let floats: Vec<f32> = (0..8_388_619).map(|i| (i % 1013) as f32 - 7.0).collect();
    let doubles: Vec<f64> = (0..4_194_319).map(|i| (i % 977) as f64 * 0.25).collect();
    let arrays = [
        ("flip", Elems::Bool(flags.clone()), flags.len()),
        ("halve", Elems::Float(floats.clone()), floats.len()),
        ("twice", Elems::Double(doubles.clone()), doubles.len()),
    ];
    for (entry, elems, n) in arrays {
        let arg = Value::Array(std::sync::Arc::new(Array { shape: vec![n], elems }));
        for threads in [1, 3] {
            let a = run_natively(&module, &sources, entry, &arg, threads);
            assert_eq!(a.shape, [n]);
            let whole = match &a.elems {
                Elems::Bool(got) => got.iter().zip(&flags).all(|(g, x)| *g != *x),
                Elems::Float(got) => got.iter().zip(&floats).all(|(g, x)| *g == *x * 0.5),
                Elems::Double(got) => got.iter().zip(&doubles).all(|(g, x)| *g == *x + *x),
                other => panic!("{entry}: {other:?}"),
            };
            assert!(whole, "{entry} of {n}, {threads} thread(s)");
        }
    }
}

/// With-loop parts that write and read 40 MiB or more: a relaxation's
/// interior (rows of 1701 doubles, so each row starts at another offset from
/// a 64-byte boundary), a full-frame element-wise genarray of rank 3 (one
/// loop over offsets), and a rank-1 genarray over all but its last index
/// (its default written apart). `small` reads and writes 16 MB.
/// `relax_static_steps` iterates `relax`: a step streams when its footprint
/// reaches the context's bound, which follows the machine's cache. Of
/// run-time shape: `relax_any` (never streams), `flip_any` (a flat part) and
/// `relax_steps` (a stencil in a loop), which stream when their arrays are
/// large, and steps that never stream: `floyd_steps` updates its array in
/// place and copies a row of it, `shift_steps` writes a border column besides
/// the rest.
const PARTS: &str = "double[1700,1701] relax(double[1700,1701] a)\n\
                     {\n\
                       return with { ([1, 1] <= [i, j] < [1699, 1700]) :\n\
                                0.25 * (a[[i - 1, j]] + a[[i + 1, j]] + a[[i, j - 1]] + a[[i, j + 1]]);\n\
                              } : modarray(a);\n\
                     }\n\
                     double[1700,1701] relax_static_steps(double[1700,1701] a, int n)\n\
                     {\n\
                       for (k = 0; k < n; k++) {\n\
                         a = with { ([1, 1] <= [i, j] < [1699, 1700]) :\n\
                                  0.25 * (a[[i - 1, j]] + a[[i + 1, j]] + a[[i, j - 1]] + a[[i, j + 1]]);\n\
                                } : modarray(a);\n\
                       }\n\
                       return a;\n\
                     }\n\
                     float[200,300,211] halve(float[200,300,211] a) { return { iv -> a[iv] * 0.5f }; }\n\
                     int[6000001] step(int[6000001] a)\n\
                     {\n\
                       return with { ([0] <= [i] < [6000000]) : a[[i + 1]] - a[[i]]; } : genarray([6000001], 0);\n\
                     }\n\
                     double[1000,1000] small(double[1000,1000] a) { return { [i, j] -> a[[i, j]] + 1.0 }; }\n\
                     double[.,.] relax_any(double[.,.] a)\n\
                     {\n\
                       return with { ([1, 1] <= [i, j] < shape(a) - 1) :\n\
                                0.25 * (a[[i - 1, j]] + a[[i + 1, j]] + a[[i, j - 1]] + a[[i, j + 1]]);\n\
                              } : modarray(a);\n\
                     }\n\
                     bool[.,.] flip_any(bool[.,.] a) { return { iv -> !a[iv] }; }\n\
                     double[.,.] relax_steps(double[.,.] a, int n)\n\
                     {\n\
                       for (k = 0; k < n; k++) {\n\
                         a = with { ([1, 1] <= [i, j] < shape(a) - 1) :\n\
                                  0.25 * (a[[i - 1, j]] + a[[i + 1, j]] + a[[i, j - 1]] + a[[i, j + 1]]);\n\
                                } : modarray(a);\n\
                       }\n\
                       return a;\n\
                     }\n\
                     double[.,.] floyd_steps(double[.,.] d)\n\
                     {\n\
                       for (k = 0; k < shape(d)[0]; k++) {\n\
                         d = { [i, j] -> min(d[[i, j]], d[[i, k]] + d[[k, j]]) };\n\
                       }\n\
                       return d;\n\
                     }\n\
                     double[.,.] shift_steps(double[.,.] a, int n)\n\
                     {\n\
                       for (k = 0; k < n; k++) {\n\
                         a = with { ([0, 0] <= [i, j] < [shape(a)[0], 1]) : 0.0;\n\
                                    ([0, 1] <= [i, j] < shape(a)) : a[[i, j - 1]] * 0.5;\n\
                                  } : genarray(shape(a), 0.0);\n\
                       }\n\
                       return a;\n\
                     }\n";

#[cfg(target_arch = "x86_64")]
#[test]
fn large_with_loop_parts_store_aligned_vectors_past_the_caches() {
    let ir = host_llvm_ir(PARTS);
    for (name, elem) in [("relax", "x double>"), ("halve", "x float>"), ("step", "x i32>")] {
        let chunks = functions(&ir, &format!("wl.chunk.stream.{name}__"));
        assert_eq!(chunks.len(), 1, "{name}: one chunk function");
        let f = chunks[0];
        assert!(f.contains("@llvm.x86.sse.sfence()"), "{f}");
        let aligned = f.lines().any(|l| {
            l.contains("store <") && l.contains(elem) && l.contains(", align 64,") && l.contains("!nontemporal")
        });
        assert!(aligned, "{name}: aligned non-temporal vector stores\n{f}");
    }
    let small = functions(&ir, "wl.chunk.small");
    assert_eq!(small.len(), 1);
    assert!(!small[0].contains("!nontemporal"), "`small` stores as usual\n{}", small[0]);
    assert!(functions(&ir, "wl.chunk.stream.small").is_empty());
    // Of run-time shape: a stencil run once gets no streaming copy (it would
    // be compiled in every generic instance, most of which run on small
    // arrays); a flat element-wise part and a stencil iterated in a loop get
    // one, taken for a large array.
    assert_eq!(functions(&ir, "wl.chunk.relax_any").len(), 1);
    assert!(functions(&ir, "wl.chunk.stream.relax_any").is_empty());
    // A step of static shape gets both too: whether its arrays stay cached
    // for the next step depends on the machine it runs on.
    for name in ["flip_any", "relax_steps", "relax_static_steps"] {
        let (plain, streaming) =
            (functions(&ir, &format!("wl.chunk.{name}")), functions(&ir, &format!("wl.chunk.stream.{name}")));
        assert_eq!((plain.len(), streaming.len()), (1, 1), "`{name}`: a plain and a streaming chunk function");
        assert!(!plain[0].contains("!nontemporal"), "{}", plain[0]);
        assert!(streaming[0].contains("!nontemporal") && streaming[0].contains(", align 64,"), "{}", streaming[0]);
    }
    // The relaxation's result is a fresh array (`flip_any`'s may take over
    // its argument's buffer): LLVM is told the cells written are not what
    // the chunk reads, and vectorises without an overlap test.
    for f in [functions(&ir, "wl.chunk.relax_steps"), functions(&ir, "wl.chunk.stream.relax_steps")].concat() {
        assert!(f.contains("!alias.scope") && !f.contains("vector.memcheck"), "{f}");
    }
    // Steps where streaming buys nothing get no copy: an update in place
    // (the lines written were just read), a copy of one row (its footprint is
    // not the array's), a border strip (a column of cells); the rest of
    // `shift_steps` gets one.
    assert!(functions(&ir, "wl.chunk.floyd_steps").len() >= 2, "the row copy and the update run in parallel");
    assert!(functions(&ir, "wl.chunk.stream.floyd_steps").is_empty());
    assert_eq!(functions(&ir, "wl.chunk.shift_steps").len(), 2, "the strip and the interior run in parallel");
    assert_eq!(functions(&ir, "wl.chunk.stream.shift_steps").len(), 1);
}

/// A 5-point relaxation of the interior of a `rows` x `cols` grid, the border kept.
fn relaxed(grid: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    let mut out = grid.to_vec();
    for i in 1..rows - 1 {
        for j in 1..cols - 1 {
            let at = |r: usize, c: usize| grid[r * cols + c];
            out[i * cols + j] = 0.25 * (at(i - 1, j) + at(i + 1, j) + at(i, j - 1) + at(i, j + 1));
        }
    }
    out
}

#[test]
fn streamed_with_loop_parts_are_whole_on_one_thread_and_three() {
    let (module, sources) = optimised(PARTS);
    let (rows, cols) = (1700, 1701);
    let grid: Vec<f64> = (0..rows * cols).map(|i| (i % 1013) as f64 * 0.5).collect();
    let small: Vec<f64> = (0..37 * 45).map(|i| (i % 17) as f64).collect();
    // 44 MB read and written: streams, in chunks that start anywhere.
    let flags: Vec<bool> = (0..4001 * 5501).map(|i| i % 7 < 3).collect();
    let few: Vec<bool> = (0..13 * 5).map(|i| i % 2 == 0).collect();
    let flipped = |f: &[bool]| Elems::Bool(f.iter().map(|x| !x).collect());
    let floats: Vec<f32> = (0..200 * 300 * 211).map(|i| (i % 1019) as f32 - 9.0).collect();
    let ints: Vec<i64> = (0..6_000_001i64).map(|i| (i * i) % 7919).collect();
    let mut steps: Vec<i64> = ints.windows(2).map(|w| w[1] - w[0]).collect();
    steps.push(0);
    let cases = [
        (
            "relax",
            Array { shape: vec![rows, cols], elems: Elems::Double(grid.clone()) },
            Elems::Double(relaxed(&grid, rows, cols)),
        ),
        (
            "relax_any",
            Array { shape: vec![rows, cols], elems: Elems::Double(grid.clone()) },
            Elems::Double(relaxed(&grid, rows, cols)),
        ),
        (
            "relax_any",
            Array { shape: vec![37, 45], elems: Elems::Double(small.clone()) },
            Elems::Double(relaxed(&small, 37, 45)),
        ),
        ("flip_any", Array { shape: vec![4001, 5501], elems: Elems::Bool(flags.clone()) }, flipped(&flags)),
        ("flip_any", Array { shape: vec![13, 5], elems: Elems::Bool(few.clone()) }, flipped(&few)),
        (
            "halve",
            Array { shape: vec![200, 300, 211], elems: Elems::Float(floats.clone()) },
            Elems::Float(floats.iter().map(|x| x * 0.5).collect()),
        ),
        (
            "step",
            Array { shape: vec![6_000_001], elems: Elems::Int(compiler_core::syntax::ast::BaseType::Int, ints) },
            Elems::Int(compiler_core::syntax::ast::BaseType::Int, steps),
        ),
    ];
    for (entry, input, want) in cases {
        let shape = input.shape.clone();
        let arg = Value::Array(std::sync::Arc::new(input));
        for threads in [1, 3] {
            let a = run_natively(&module, &sources, entry, &arg, threads);
            assert_eq!(a.shape, shape, "{entry}");
            assert!(a.elems == want, "{entry}, {threads} thread(s): a wrong element");
        }
    }
    // Two steps of the relaxation of run-time shape, large and small.
    for (grid, rows, cols) in [(&grid, rows, cols), (&small, 37, 45)] {
        let twice = relaxed(&relaxed(grid, rows, cols), rows, cols);
        let arg =
            Value::Array(std::sync::Arc::new(Array { shape: vec![rows, cols], elems: Elems::Double(grid.clone()) }));
        let steps =
            Value::Scalar(compiler_core::interp::value::Scalar::Int(compiler_core::syntax::ast::BaseType::Int, 2));
        for threads in [1, 3] {
            let a = run_natively_on(&module, &sources, "relax_steps", vec![arg.clone(), steps.clone()], threads);
            assert!(a.elems == Elems::Double(twice.clone()), "relax_steps {rows}x{cols}, {threads} thread(s)");
        }
        // Whichever copy the context's bound picks, streaming or not.
        let entries: &[&str] = if rows == 1700 { &["relax_steps", "relax_static_steps"] } else { &["relax_steps"] };
        for (entry, stream_min) in entries.iter().flat_map(|e| [(e, 0), (e, i64::MAX)]) {
            let options = Options { threads: Some(2), stream_min: Some(stream_min), ..Default::default() };
            let a = run_natively_with(&module, &sources, entry, vec![arg.clone(), steps.clone()], options);
            assert!(a.elems == Elems::Double(twice.clone()), "{entry} {rows}x{cols}, stream_min {stream_min}");
        }
        // Two shifts right by a column, halving: the rest's streaming copy
        // for the large grid.
        let shifted = |g: &[f64]| -> Vec<f64> {
            (0..rows * cols).map(|k| if k % cols == 0 { 0.0 } else { g[k - 1] * 0.5 }).collect()
        };
        let want = Elems::Double(shifted(&shifted(grid)));
        for threads in [1, 3] {
            let a = run_natively_on(&module, &sources, "shift_steps", vec![arg.clone(), steps.clone()], threads);
            assert!(a.elems == want, "shift_steps {rows}x{cols}, {threads} thread(s)");
        }
    }
}

/// A rank-generic 5-point stencil: its loop nest is what strength reduction rewrites.
const STENCIL: &str = "double[.,.] relax(double[.,.] a)\n\
                       {\n\
                         return with { ([1, 1] <= iv < shape(a) - 1) :\n\
                                  0.25 * (a[iv + [1, 0]] + a[iv - [1, 0]] + a[iv + [0, 1]] + a[iv - [0, 1]]);\n\
                                } : modarray(a);\n\
                       }\n";

fn llvm_ir(triple: Option<&str>) -> String {
    let (module, sources) = optimised(STENCIL);
    let options =
        Options { triple: triple.map(String::from), cpu: triple.map(|_| "generic".into()), ..Default::default() };
    let ir =
        withloop_codegen::compile(&module, &sources, &options, false, Output::LlvmIr).expect("the module compiles");
    String::from_utf8(ir).expect("LLVM IR is text")
}

#[test]
fn loop_strength_reduction_runs_in_the_pipeline_where_addressing_is_narrow() {
    let ir = llvm_ir(Some("aarch64-unknown-linux-gnu"));
    assert!(ir.contains("%lsr.iv"), "AArch64: strength-reduced induction variables in\n{ir}");
}

#[test]
fn x86_64_leaves_loop_strength_reduction_out() {
    let ir = llvm_ir(Some("x86_64-unknown-linux-gnu"));
    assert!(!ir.contains("%lsr.iv"), "x86-64: no strength reduction in\n{ir}");
    assert!(ir.contains("<4 x double>") || ir.contains("<2 x double>"), "the loop is still vectorised:\n{ir}");
}

/// An element-wise `exp` and `log` over an array, as Black–Scholes has them.
const VECTOR_MATH: &str =
    "use Math: all;\ndouble[.] curve(double[.] a) { return { [i] -> exp(a[[i]]) * log(a[[i]] + 2.0) }; }\n";

/// The LLVM IR of `source` built for x86-64 GNU/Linux and `cpu` (given by
/// name, no feature list unless `features`).
fn x86_ir(source: &str, cpu: &str, features: Option<&str>) -> String {
    let (module, sources) = optimised(source);
    let options = Options {
        triple: Some("x86_64-unknown-linux-gnu".into()),
        cpu: Some(cpu.into()),
        features: features.map(String::from),
        ..Default::default()
    };
    let ir =
        withloop_codegen::compile(&module, &sources, &options, false, Output::LlvmIr).expect("the module compiles");
    String::from_utf8(ir).expect("LLVM IR is text")
}

/// The libmvec functions an x86-64 GNU/Linux build for `cpu` (given by name,
/// no feature list) calls from the loop of [`VECTOR_MATH`].
fn libmvec_calls(cpu: &str, features: Option<&str>) -> Vec<String> {
    let ir = x86_ir(VECTOR_MATH, cpu, features);
    let mut calls: Vec<String> =
        ir.split("@_ZGV").skip(1).filter_map(|rest| rest.split('(').next()).map(|name| format!("_ZGV{name}")).collect();
    calls.sort();
    calls.dedup();
    calls
}

/// A CPU given by name comes with an empty feature list; its own features
/// decide the vector math's width (they were read from the list alone, and
/// `--cpu sapphirerapids` builds called the scalar `exp` per element:
/// Black–Scholes at half speed on a lent Sapphire Rapids machine).
#[cfg(target_os = "linux")]
#[test]
fn a_cpu_given_by_name_gets_vector_math_of_its_width() {
    let avx2 = libmvec_calls("znver3", None);
    assert!(avx2.iter().any(|f| f == "_ZGVdN4v_exp") && avx2.iter().any(|f| f == "_ZGVdN4v_log"), "{avx2:?}");
    let avx512 = libmvec_calls("skylake-avx512", None);
    assert!(avx512.iter().any(|f| f.starts_with("_ZGVeN8v_")), "{avx512:?}");
    // The feature list can take the CPU's wider registers away.
    let sse = libmvec_calls("znver3", Some("-avx2,-avx"));
    assert!(!sse.is_empty() && sse.iter().all(|f| f.starts_with("_ZGVbN2v_")), "{sse:?}");
}

/// On AVX-512 CPUs, which LLVM has prefer 256-bit vectors, a function that
/// calls `exp` or `log` is vectorised in 512-bit vectors all the same, so it
/// calls libmvec's eight-lane versions (Black–Scholes 0.73-0.87 of its time
/// on Sapphire Rapids); a function without such calls keeps the CPU's
/// preference.
#[cfg(target_os = "linux")]
#[test]
fn math_loops_get_512_bit_vectors_on_avx512_cpus() {
    let calls = libmvec_calls("sapphirerapids", None);
    assert!(!calls.is_empty() && calls.iter().all(|f| f.starts_with("_ZGVeN8v_")), "{calls:?}");
    assert!(x86_ir(VECTOR_MATH, "sapphirerapids", None).contains("\"prefer-vector-width\"=\"512\""));
    let plain = x86_ir(SOURCE, "sapphirerapids", None);
    assert!(!plain.contains("prefer-vector-width"), "a loop without math calls was widened:\n{plain}");
    // Without AVX-512 nothing is widened.
    assert!(!x86_ir(VECTOR_MATH, "znver3", None).contains("prefer-vector-width"));
}

/// A CPU or feature LLVM would take and then end the process on (an abort at
/// the first function for an unknown x86-64 CPU, a segmentation fault without
/// SSE2) is an error before LLVM sees it.
#[test]
fn names_that_would_end_the_process_are_errors() {
    let (module, sources) = optimised(SOURCE);
    for (cpu, features, says) in [
        ("znver33", None, "did you mean `znver3`?"),
        ("pentium4", None, "no 64-bit mode"),
        ("x86-64", Some("-sse2"), "without `sse2`"),
    ] {
        let options = Options {
            triple: Some("x86_64-unknown-linux-gnu".into()),
            cpu: Some(cpu.into()),
            features: features.map(String::from),
            ..Default::default()
        };
        match withloop_codegen::compile(&module, &sources, &options, false, Output::Object) {
            Err(withloop_codegen::CodegenError::Target(why)) => assert!(why.contains(says), "{why}"),
            other => panic!("{cpu} {features:?}: {:?}", other.map(|b| b.len())),
        }
    }
}

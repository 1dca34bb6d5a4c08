//! Folds whose result depends on the order they combine in: `min`/`max` of
//! floats where a NaN is met (`min(x, nan)` is NaN, `min(nan, x)` is `x`) and
//! `+` of floats (rounding). With exact folds native code combines them in
//! index order on one thread, as the interpreter does, however many threads
//! it may use; and the optimiser never reorders a `min` fold of floats (wlf
//! folded a genarray written upper half first into the fold, reordering it).
//! The lang harness cannot hold these: its two-thread run reassociates.

use compiler_core::driver::{FrontendOptions, frontend};
use compiler_core::interp::value::{Scalar, Value};
use compiler_core::opt::{self, PipelineOptions};
use compiler_core::syntax::cpp::MemoryLoader;

/// `main()` of a SaC program: by the reference interpreter, and natively
/// (optimised) with `options`.
fn both(source: &str, options: &withloop_codegen::Options) -> (Value, Value) {
    let fe = frontend("fold_order.sac", source, &MemoryLoader::default(), &FrontendOptions::default());
    assert!(!fe.has_errors(), "the program does not compile");
    let run = compiler_core::interp::run(
        &fe.program,
        Some(&fe.typed),
        &fe.sources,
        "main",
        Vec::new(),
        Default::default(),
        &mut |_| {},
    );
    let reference = run.result.unwrap_or_else(|e| panic!("interpreter: {e:?}")).remove(0);
    let mut module = compiler_core::ir::lower::lower(&fe.program, &fe.typed, &fe.sources);
    opt::optimise(&mut module, &fe.sources, &PipelineOptions { verify: true, ..Default::default() })
        .unwrap_or_else(|b| panic!("pass `{}` broke the IR", b.pass));
    let (values, _) =
        withloop_codegen::jit::run_counted(&module, &fe.sources, "main", Vec::new(), options, None, &mut |_| {})
            .unwrap_or_else(|e| panic!("run: {e:?}"));
    (reference, values[0].clone())
}

fn exact_on_two_threads() -> withloop_codegen::Options {
    withloop_codegen::Options { threads: Some(2), parallel_min: Some(1), exact_folds: true, ..Default::default() }
}

#[test]
fn a_min_fold_of_doubles_meeting_a_nan_keeps_its_order_with_exact_folds() {
    // In index order: min(-5, nan) = nan, then min(nan, 1000) = 1000, …
    let source = "use Array: all;
        double main()
        {
          z = _hideValue_SxA_(0, 0.0);
          n = 100000;
          a = with { ([0] <= [i] < [n]) : (i == 0) ? -5.0 : ((i == n - 2) ? z / z : 1000.0); } : genarray([n], 0.0);
          return minval(a);
        }";
    let (reference, native) = both(source, &exact_on_two_threads());
    assert_eq!(reference, Value::Scalar(Scalar::Double(1000.0)));
    assert_eq!(native, reference);
}

#[test]
fn folding_a_genarray_into_a_min_fold_of_doubles_keeps_the_index_order() {
    let source = "use Array: all;
        double main()
        {
          z = _hideValue_SxA_(0, 0.0);
          n = 300;
          b = with {
                ([150] <= [i] < [n]) : (i == 150) ? z / z : 1000.0;
                ([0] <= [i] < [150]) : (i == 0) ? -5.0 : 1000.0;
              } : genarray([n], 0.0);
          return minval(b);
        }";
    let one = withloop_codegen::Options { threads: Some(1), exact_folds: true, ..Default::default() };
    let (reference, native) = both(source, &one);
    assert_eq!(reference, Value::Scalar(Scalar::Double(1000.0)));
    assert_eq!(native, reference);
}

#[test]
fn a_sum_of_doubles_is_bit_for_bit_the_interpreters_with_exact_folds_on_two_threads() {
    let source = "
        double main()
        {
          n = 1000000;
          a = with { ([0] <= iv < [n]) : 1.0 / tod(iv[0] + 1); } : genarray([n], 0.0);
          return with { ([0] <= iv < [n]) : a[iv]; } : fold(+, 0.0);
        }";
    let (reference, native) = both(source, &exact_on_two_threads());
    assert_eq!(native, reference);
}

//! In-place updates, counted (seed 004 §3.1): the let-with in a loop of an L0
//! program writes into the loop-carried array instead of copying it, so
//! filling n elements copies O(n) elements at most, not O(n²); a SaC
//! `modarray` with-loop over a loop-carried array that reads it only where it
//! writes updates it in place, every iteration. The native runtime counts
//! every element `wl_copy` copies (an update that cannot be made in place
//! copies its whole array); no timing is involved.

use compiler_core::driver::{FrontendOptions, frontend};
use compiler_core::interp::value::{Scalar, Value};
use compiler_core::opt::{self, PipelineOptions};
use compiler_core::span::{FileKind, SourceMap};
use compiler_core::syntax::cpp::MemoryLoader;

/// Compiles an L0 file and runs `main` natively on one `int`; returns its
/// result vector's length and the elements copied.
fn run_counted(path: &str, n: i64) -> (usize, i64) {
    let text = std::fs::read_to_string(path).expect("test program");
    let mut sources = SourceMap::new();
    let file = sources.add(path, text, FileKind::User);
    let l0 = compiler_core::l0::compile(&sources, file, &[]);
    let mut module = l0.module.unwrap_or_else(|| panic!("{path} does not compile: {:?}", l0.diagnostics));
    opt::optimise(&mut module, &sources, &PipelineOptions { verify: true, ..Default::default() })
        .unwrap_or_else(|b| panic!("pass `{}` broke the IR", b.pass));
    let options = withloop_codegen::Options::default();
    let args = vec![Value::Scalar(Scalar::int(n))];
    let (values, counts) =
        withloop_codegen::jit::run_counted(&module, &sources, "main", args, &options, None, &mut |_| {})
            .unwrap_or_else(|e| panic!("run: {e:?}"));
    (values[0].shape().iter().product(), counts.elements_copied)
}

#[test]
fn the_fibonacci_loop_updates_its_array_in_place() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/lang/l0/fibs_in_place.l0");
    for n in [1_000, 100_000] {
        let (len, copied) = run_counted(path, n);
        assert_eq!(len as i64, n);
        // A copy per update would copy about n²/2 elements (5·10⁹ for n = 100 000).
        assert!(copied <= n, "n = {n}: {copied} elements copied");
    }
}

/// The elements a SaC program's `main(n)` copies, run natively.
fn sac_copies(source: &str, n: i64) -> i64 {
    let fe = frontend("inplace.sac", source, &MemoryLoader::default(), &FrontendOptions::default());
    assert!(!fe.has_errors(), "the program does not compile");
    let mut module = compiler_core::ir::lower::lower(&fe.program, &fe.typed, &fe.sources);
    opt::optimise(&mut module, &fe.sources, &PipelineOptions { verify: true, ..Default::default() })
        .unwrap_or_else(|b| panic!("pass `{}` broke the IR", b.pass));
    let options = withloop_codegen::Options { parallel: false, ..Default::default() };
    let args = vec![Value::Scalar(Scalar::int(n))];
    let (_, counts) =
        withloop_codegen::jit::run_counted(&module, &fe.sources, "main", args, &options, None, &mut |_| {})
            .unwrap_or_else(|e| panic!("run: {e:?}"));
    counts.elements_copied
}

#[test]
fn a_loop_carried_array_is_updated_in_place_by_its_modarray() {
    // 50 steps over 10 000 elements, each reading the element it writes: a copy
    // per step would copy 500 000 elements.
    let source = "int main(int n)
{
  a = genarray([n], 0);
  for (k = 0; k < 50; k++) {
    a = with { ([0] <= [j] < [n]) : a[[j]] + k; } : modarray(a);
  }
  return a[[n - 1]];
}";
    let copied = sac_copies(source, 10_000);
    assert!(copied <= 10_000, "{copied} elements copied");
}

/// A rank-k update (`elim` of tests/lang/opt/snapshot_in_place.sac): every
/// step reads row `k` and column `k`, which it changes too. `snapshot` copies
/// row k and leaves `a[[i, k]]` to be read when row i starts; the step then
/// updates `a` in place. Natively on two threads (every with-loop split),
/// with some passes off (the reads reach code generation as offsets, as
/// index vectors, or with their bounds checks), the result must be the
/// interpreter's and the steps must copy no more than the first one's array.
#[test]
fn a_step_reading_the_rows_it_writes_updates_in_place_on_two_threads() {
    let source = "use Array: all;
int main(int n)
{
  a = { [i, j] -> (i * 5 + j * 3) % 17 | [i, j] < [n, n] };
  for (k = 0; k < n; k++) {
    a = { [i, j] -> (a[[i, j]] * 3 + a[[i, k]] * a[[k, j]]) % 101 | [i, j] < shape(a) };
  }
  return sum(a);
}";
    let fe = frontend("rows.sac", source, &MemoryLoader::default(), &FrontendOptions::default());
    assert!(!fe.has_errors(), "the program does not compile");
    let n = 48;
    let args = vec![Value::Scalar(Scalar::int(n))];
    let run_options = compiler_core::interp::RunOptions::default();
    let want = compiler_core::interp::run(
        &fe.program,
        Some(&fe.typed),
        &fe.sources,
        "main",
        args.clone(),
        run_options,
        &mut |_| {},
    )
    .result
    .unwrap_or_else(|e| panic!("the interpreter: {e:?}"));
    for off in [&[][..], &["ive"], &["licm"], &["ive", "cse"], &["bce"]] {
        let mut module = compiler_core::ir::lower::lower(&fe.program, &fe.typed, &fe.sources);
        let disabled = off.iter().map(|p| p.to_string()).collect();
        let pipeline = PipelineOptions { verify: true, disabled, ..Default::default() };
        let outcome = opt::optimise(&mut module, &fe.sources, &pipeline)
            .unwrap_or_else(|b| panic!("pass `{}` broke the IR", b.pass));
        let rows: u64 = outcome.passes.iter().filter_map(|p| p.counters.get("row_reads_first")).sum();
        let options = withloop_codegen::Options { threads: Some(2), parallel_min: Some(1), ..Default::default() };
        let (got, counts) =
            withloop_codegen::jit::run_counted(&module, &fe.sources, "main", args.clone(), &options, None, &mut |_| {})
                .unwrap_or_else(|e| panic!("{off:?} off: {e:?}"));
        assert_eq!(got, want, "{off:?} off");
        if off.contains(&"bce") {
            // The reads keep their checks: no snapshot, a new array per step.
            assert_eq!(rows, 0);
        } else {
            assert!(rows >= 1, "{off:?} off: the column is read per row");
            assert!(counts.elements_copied <= n * n, "{off:?} off: {} elements copied", counts.elements_copied);
        }
    }
}

//! Scans and filters (L0's `scan` and `filter` with-loop operators) and extent
//! reads of generic arrays in native code, against the IR interpreter.
//!
//! Each program is written in the IR's text form (no SaC program lowers to
//! these operators, or to an extent read past the rank that stays checked) and
//! runs interpreted, natively, and natively after the optimisation pipeline;
//! results — or error codes and messages — must be identical. Native runs use the most eager parallel settings, so a scan or
//! filter that were wrongly split over threads would show.
//!
//! The last test counts the bytes this thread holds around native runs (a
//! counting global allocator) to catch reference-counting leaks in a loop.

// The counting allocator implements `GlobalAlloc`, an unsafe trait.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use compiler_core::interp::format::value_literal;
use compiler_core::interp::value::{Elems, Value};
use compiler_core::interp::{RunOptions, RuntimeError};
use compiler_core::ir::{self, parse, print, verify};
use compiler_core::opt::{self, PipelineOptions};
use compiler_core::span::{FileKind, SourceMap, Span};
use compiler_core::syntax::ast::BaseType;
use withloop_codegen::Options;
use withloop_codegen::jit::{self, RunError};

// ------------------------------------------------------------ allocation count

thread_local! {
    /// Bytes allocated and not yet freed by this thread.
    static HELD: Cell<i64> = const { Cell::new(0) };
}

struct Counting;

fn count(delta: i64) {
    let _ = HELD.try_with(|h| h.set(h.get() + delta));
}

// SAFETY: every call goes to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as i64);
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as i64);
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as i64));
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as i64 - layout.size() as i64);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn held() -> i64 {
    HELD.with(Cell::get)
}

// ------------------------------------------------------------ running

struct Program {
    module: ir::Module,
    sources: SourceMap,
}

fn load(text: &str) -> Program {
    let mut sources = SourceMap::new();
    let file = sources.add("test.ir", text, FileKind::User);
    let module = parse::parse_module(text, Span::new(file, 0, 0)).unwrap_or_else(|e| panic!("parse: {e}"));
    verify::verify(&module).unwrap_or_else(|e| panic!("verify: {}", e.join("; ")));
    Program { module, sources }
}

/// Values, or the error as `CODE: message`.
type Outcome = Result<Vec<Value>, String>;

fn error_text(e: &RuntimeError) -> String {
    format!("{}: {}", e.code.id, e.message)
}

fn interpret(p: &Program, args: &[Value]) -> Outcome {
    ir::interp::run(&p.module, &p.sources, "main", args.to_vec(), RunOptions::default(), &mut |_| {})
        .expect("an entry `main`")
        .map_err(|e| error_text(&e))
}

/// Parallel splitting as eager as it gets: every part of an eligible
/// with-loop is split over four threads.
fn eager() -> Options {
    // Folds in index order: results compare bit for bit with the interpreter.
    Options { threads: Some(4), parallel_min: Some(1), exact_folds: true, ..Options::default() }
}

fn native(p: &Program, args: &[Value], options: &Options) -> Outcome {
    match jit::run(&p.module, &p.sources, "main", args.to_vec(), options, None, &mut |_| {}) {
        Ok(v) => Ok(v),
        Err(RunError::Runtime(e)) => Err(error_text(&e)),
        Err(other) => panic!("native code generation failed: {other:?}"),
    }
}

fn same(a: &Outcome, b: &Outcome) -> bool {
    match (a, b) {
        (Ok(x), Ok(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.identical(q)),
        (Err(x), Err(y)) => x == y,
        _ => false,
    }
}

fn show(o: &Outcome) -> String {
    match o {
        Ok(vs) => vs.iter().map(value_literal).collect::<Vec<_>>().join(" | "),
        Err(e) => format!("error {e}"),
    }
}

/// Runs `main` of `p` on `args` interpreted, natively, and natively after the
/// optimiser; all must agree. Returns what they give, values as literals.
fn agree_program(p: &Program, args: &[Value]) -> Result<Vec<String>, String> {
    let want = interpret(p, args);
    let got = native(p, args, &eager());
    assert!(same(&want, &got), "native code: expected {}, got {}", show(&want), show(&got));
    let mut optimised = Program { module: p.module.clone(), sources: p.sources.clone() };
    opt::optimise(&mut optimised.module, &optimised.sources, &PipelineOptions { verify: true, ..Default::default() })
        .unwrap_or_else(|b| panic!("pass `{}` broke the IR: {}", b.pass, b.problems.join("; ")));
    let interpreted = interpret(&optimised, args);
    assert!(same(&want, &interpreted), "optimised IR: expected {}, got {}", show(&want), show(&interpreted));
    let got = native(&optimised, args, &eager());
    assert!(
        same(&want, &got),
        "native code of the optimised IR: expected {}, got {}\n{}",
        show(&want),
        show(&got),
        print::module_text(&optimised.module)
    );
    want.map(|vs| vs.iter().map(value_literal).collect())
}

fn agree(text: &str) -> Result<Vec<String>, String> {
    agree_program(&load(text), &[])
}

fn ints(v: &[i64]) -> Value {
    Value::from_parts(vec![v.len()], Elems::Int(BaseType::Int, v.to_vec()))
}

// ------------------------------------------------------------ scans

const SCAN_INT: &str = include_str!("../../tests/ir/scan_int.ir");

#[test]
fn int_scan_with_add() {
    assert_eq!(agree(SCAN_INT).unwrap(), ["[0, 1, 5, 14, 30, 55]"]);
}

const SCAN_DOUBLE: &str = "fn main() -> (double[7])  [instance main]
{
  %0: int[1] = const [0]
  %1: int[1] = const [7]
  %2: double = const 0.5
  %3: double = const 0.1
  %4: double[7] = with {
    part lower %0 upper %1 scalars [%5#i: int] {
      %6: double = prim to_double(%5)
      %7: double = prim mul(%6, %3)
      yield %7
    }
  } scan(%1, prim add, %2)
  return %4
}

entry main = main
";

#[test]
fn double_scan_with_add_rounds_as_the_interpreter() {
    // Sums of tenths are inexact: the native sums must be the same bits.
    let r = agree(SCAN_DOUBLE).unwrap();
    assert!(r[0].starts_with("[0.5, 0.6, 0.8"), "{r:?}");
}

const SCAN_CALL: &str = include_str!("../../tests/ir/scan_call.ir");

#[test]
fn int_scan_with_a_called_function() {
    // acc * 3 - i, from 1: 3, 8, 22, 63, 185 (not associative: order matters).
    assert_eq!(agree(SCAN_CALL).unwrap(), ["[3, 8, 22, 63, 185]"]);
}

const FOLD_LANES: &str = include_str!("../../tests/ir/fold_lanes.ir");

#[test]
fn folds_and_scans_over_pairs_natively() {
    // The leftmost minimum and its index; running (sum of 10 * i, count).
    assert_eq!(agree(FOLD_LANES).unwrap(), ["0.5", "4", "[0, 10, 30, 60, 100, 150]", "[1, 2, 3, 4, 5, 6]"]);
}

const SCAN_MIXED: &str = "fn avg(%0#acc: double, %1#x: int) -> (double)  [instance avg, noinline]
{
  %2: double = const 0.5
  %3: double = prim to_double(%1)
  %4: double = prim mul(%0, %2)
  %5: double = prim add(%4, %3)
  return %5
}

fn main() -> (double[6])  [instance main]
{
  %0: int[1] = const [0]
  %1: int[1] = const [6]
  %2: double = const 1.0
  %3: double[6] = with {
    part lower %0 upper %1 scalars [%4#i: int] {
      %5: int = prim mul(%4, %4)
      yield %5
    }
  } scan(%1, call avg, %2)
  return %3
}

entry main = main
";

#[test]
fn double_scan_of_int_values_with_a_called_function() {
    // The values (ints) are not of the accumulator's type (double).
    assert_eq!(agree(SCAN_MIXED).unwrap(), ["[0.5, 1.25, 4.625, 11.3125, 21.65625, 35.828125]"]);
}

const SCAN_PARTIAL: &str = "fn stepk(%0#k: int, %1#acc: int, %2#x: int) -> (int)  [instance stepk, noinline]
{
  %3: int = prim mul(%1, %0)
  %4: int = prim add(%3, %2)
  return %4
}

fn main() -> (int[4])  [instance main]
{
  %0: int[1] = const [0]
  %1: int[1] = const [4]
  %2: int = const 0
  %6: int = const 10
  %3: int[4] = with {
    part lower %0 upper %1 scalars [%4#i: int] {
      %5: int = prim add(%4, %6)
      yield %5
    }
  } scan(%1, call stepk partial(%6), %2)
  return %3
}

entry main = main
";

#[test]
fn scan_with_a_partially_applied_function() {
    // stepk(10, acc, x) = acc * 10 + x.
    assert_eq!(agree(SCAN_PARTIAL).unwrap(), ["[10, 111, 1122, 11233]"]);
}

const SCAN_SPLIT: &str = include_str!("../../tests/ir/scan_split.ir");

#[test]
fn scan_over_several_parts_follows_the_frame() {
    // The parts run last-first; the scan still goes 0, 1, …, 5.
    assert_eq!(agree(SCAN_SPLIT).unwrap(), ["[99, 98, 97, 96, 92, 87]"]);
}

const SCAN_2D_GAPS: &str = "fn main() -> (int[3,4])  [instance main]
{
  %0: int[2] = const [1, 0]
  %1: int[2] = const [3, 4]
  %2: int[2] = const [0, 1]
  %3: int[2] = const [1, 3]
  %4: int = const 7
  %5: int = const 10
  %6: int = const 100
  %7: int[3,4] = with {
    part lower %0 upper %1 scalars [%8#i: int, %9#j: int] {
      %10: int = prim mul(%8, %5)
      %11: int = prim add(%10, %9)
      yield %11
    }
    part lower %2 upper %3 scalars [%12#i: int, %13#j: int] {
      yield %6
    }
  } scan(%1, prim add, %4)
  return %7
}

entry main = main
";

#[test]
fn two_dimensional_scan_keeps_the_accumulator_at_uncovered_indices() {
    // [0,0] and [0,3] are uncovered: the accumulator stays.
    assert_eq!(agree(SCAN_2D_GAPS).unwrap(), ["[[7, 107, 207, 207], [217, 228, 240, 253], [273, 294, 316, 339]]"]);
}

const SCAN_STRIDED: &str = "fn main() -> (int[10])  [instance main]
{
  %0: int[1] = const [1]
  %1: int[1] = const [10]
  %2: int[1] = const [3]
  %3: int[1] = const [2]
  %4: int = const 0
  %5: int[10] = with {
    part lower %0 upper %1 step %2 width %3 scalars [%6#i: int] {
      yield %6
    }
  } scan(%1, prim add, %4)
  return %5
}

entry main = main
";

#[test]
fn scan_over_a_strided_generator() {
    // Covered: 1 2 _ 4 5 _ 7 8 _ (and 0 before).
    assert_eq!(agree(SCAN_STRIDED).unwrap(), ["[0, 1, 3, 3, 7, 12, 12, 19, 27, 27]"]);
}

fn overlapping(first_match: bool, op: &str) -> String {
    format!(
        "fn main() -> (int[.])  [instance main]
{{
  %0: int[1] = const [0]
  %1: int[1] = const [4]
  %2: int[1] = const [2]
  %3: int[1] = const [6]
  %4: int = const 1
  %5: int = const 10
  %6: int = const 0
  %7: bool = const true
  %8: bool = const false
  %9: int[.] = with{} {{
    part lower %0 upper %1 scalars [%10#i: int] {{
      yield {}
    }}
    part lower %2 upper %3 scalars [%11#i: int] {{
      yield {}
    }}
  }} {op}
  return %9
}}

entry main = main
",
        if first_match { " first_match" } else { "" },
        if op.starts_with("filter") { "%7, %10" } else { "%4" },
        if op.starts_with("filter") { "%8, %11" } else { "%5" },
    )
}

#[test]
fn overlapping_parts_last_or_first_match() {
    // Indices 2 and 3 are covered twice: the last part wins, or the first.
    assert_eq!(agree(&overlapping(false, "scan(%3, prim add, %6)")).unwrap(), ["[1, 2, 12, 22, 32, 42]"]);
    assert_eq!(agree(&overlapping(true, "scan(%3, prim add, %6)")).unwrap(), ["[1, 2, 3, 4, 14, 24]"]);
    // The second part drops its indices (2..6) unless the first one matched.
    assert_eq!(agree(&overlapping(false, "filter(%3) cell int")).unwrap(), ["[0, 1]"]);
    assert_eq!(agree(&overlapping(true, "filter(%3) cell int")).unwrap(), ["[0, 1, 2, 3]"]);
}

const SCAN_EMPTY: &str = "fn main() -> (int[.], double[.,.])  [instance main]
{
  %0: int[1] = const [0]
  %1: int = const 5
  %2: int[2] = const [0, 0]
  %3: int[2] = const [2, 0]
  %4: double = const 1.5
  %5: int[.] = with {
    part lower %0 upper %0 scalars [%6#i: int] {
      yield %6
    }
  } scan(%0, prim add, %1)
  %7: double[.,.] = with {
    part lower %2 upper %3 scalars [%8#i: int, %9#j: int] {
      yield %4
    }
  } scan(%3, prim mul, %4)
  return %5, %7
}

entry main = main
";

#[test]
fn scans_over_empty_frames() {
    assert_eq!(agree(SCAN_EMPTY).unwrap(), ["[]", "genarray([2, 0], 0.0)"]);
}

const SCAN_RANK0: &str = "fn main() -> (int)  [instance main]
{
  %0: int[0] = const genarray([0], 0)
  %1: int = const 5
  %2: int = with {
    part lower %0 upper %0 {
      %3: int = const 4
      yield %3
    }
  } scan(%0, prim add, %1)
  return %2
}

entry main = main
";

#[test]
fn scan_over_the_empty_frame_is_one_step() {
    assert_eq!(agree(SCAN_RANK0).unwrap(), ["9"]);
}

const SCAN_ROWS: &str = "fn main() -> (int[4,2])  [instance main]
{
  %0: int[1] = const [0]
  %1: int[1] = const [4]
  %2: int[2] = const [0, 100]
  %3: int[4,2] = with {
    part lower %0 upper %1 scalars [%4#i: int] {
      %5: int = prim mul(%4, %4)
      %6: int[2] = array [%4, %5]
      yield %6
    }
  } scan(%1, prim add, %2)
  return %3
}

entry main = main
";

#[test]
fn scan_of_vectors() {
    assert_eq!(agree(SCAN_ROWS).unwrap(), ["[[0, 100], [1, 101], [3, 105], [6, 114]]"]);
}

const SCAN_ROWS_UNCOVERED: &str = "fn main() -> (int[.,.], int[.,.])  [instance main]
{
  %0: int[1] = const [0]
  %1: int[1] = const [3]
  %2: int[2] = const [1, 2]
  %3: int[.,.] = with {
    part lower %0 upper %0 scalars [%4#i: int] {
      %5: int[2] = array [%4, %4]
      yield %5
    }
  } scan(%1, prim add, %2)
  %6: int[.,.] = with {
  } scan(%1, prim add, %2)
  return %3, %6
}

entry main = main
";

#[test]
fn scan_of_vectors_with_no_index_covered_repeats_the_neutral_element() {
    assert_eq!(agree(SCAN_ROWS_UNCOVERED).unwrap(), ["[[1, 2], [1, 2], [1, 2]]", "[[1, 2], [1, 2], [1, 2]]"]);
}

const SCAN_ROWS_CALL: &str = "fn vstep(%0#acc: double[2], %1#x: double[2]) -> (double[2])  [instance vstep, noinline]
{
  %2: double = const 0.5
  %3: double[2] = prim mul(%0, %2)
  %4: double[2] = prim add(%3, %1)
  return %4
}

fn main() -> (double[.,.])  [instance main]
{
  %0: int[1] = const [1]
  %1: int[1] = const [5]
  %7: int[1] = const [4]
  %2: double[2] = const [1.0, -1.0]
  %3: double[.,.] = with {
    part lower %0 upper %7 scalars [%4#i: int] {
      %5: double = prim to_double(%4)
      %6: double[2] = array [%5, %5]
      yield %6
    }
  } scan(%1, call vstep, %2)
  return %3
}

entry main = main
";

#[test]
fn scan_of_vectors_with_a_called_function_and_uncovered_ends() {
    // Index 0 and 4 are uncovered.
    assert_eq!(
        agree(SCAN_ROWS_CALL).unwrap(),
        ["[[1.0, -1.0], [1.5, 0.5], [2.75, 2.25], [4.375, 4.125], [4.375, 4.125]]"]
    );
}

const SCAN_IRREGULAR: &str = "fn main() -> (int[.,.])  [instance main]
{
  %0: int[1] = const [0]
  %1: int[1] = const [3]
  %2: int[2] = const [0, 0]
  %3: int[.,.] = with {
    part lower %0 upper %1 scalars [%4#i: int] {
      %5: int[1] = const [0]
      %6: int[1] = array [%4]
      %7: int[.] = prim cat(%5, %6)
      %8: int[.] = prim take(%4, %7)
      yield %8
    }
  } scan(%1, prim add, %2)
  return %3
}

entry main = main
";

#[test]
fn scan_of_vectors_of_the_wrong_shape_fails_as_in_the_interpreter() {
    assert_eq!(agree(SCAN_IRREGULAR).unwrap_err(), "R0002: `+` on arrays of shapes [2] and [0]");
}

const SCAN_GROWING: &str = "fn grow(%0#acc: int[.], %1#x: int) -> (int[.])  [instance grow, noinline]
{
  %2: int[1] = array [%1]
  %3: int[.] = prim cat(%0, %2)
  return %3
}

fn main() -> (int[.,.])  [instance main]
{
  %0: int[1] = const [0]
  %1: int[1] = const [3]
  %2: int[1] = const [7]
  %3: int[.,.] = with {
    part lower %0 upper %1 scalars [%4#i: int] {
      yield %4
    }
  } scan(%1, call grow, %2)
  return %3
}

entry main = main
";

#[test]
fn scan_whose_accumulator_changes_shape_fails_as_in_the_interpreter() {
    // Scalar values, a vector accumulator that grows: the accumulators do
    // not stack.
    assert_eq!(
        agree(SCAN_GROWING).unwrap_err(),
        "R0007: array elements differ in shape: element 0 is [2], element 1 is [3]"
    );
}

const SCAN_NEGATIVE: &str = "fn main() -> (int[.])  [instance main]
{
  %0: int[1] = const [0]
  %1: int[1] = const [-2]
  %2: int = const 0
  %3: int[.] = with {
    part lower %0 upper %0 scalars [%4#i: int] {
      yield %4
    }
  } scan(%1, prim add, %2)
  return %3
}

entry main = main
";

#[test]
fn scan_over_a_negative_shape_fails() {
    assert_eq!(agree(SCAN_NEGATIVE).unwrap_err(), "R0013: scan shape has a negative extent -2");
}

const SCAN_BIG: &str = "fn main(%0#n: int) -> (int[.], int)  [instance main]
{
  %1: int[1] = const [0]
  %2: int[1] = array [%0]
  %3: int = const 0
  %4: int = const 7
  %5: int[.], %6: int = with {
    part lower %1 upper %2 scalars [%7#i: int] {
      %8: int = prim mod(%7, %4)
      yield %8, %8
    }
  } scan(%2, prim sub, %3), fold(prim add, %3)
  return %5, %6
}

entry main = main
";

#[test]
fn a_large_scan_beside_a_fold_is_not_split_over_threads() {
    // Large enough to split were it eligible (and `sub` has no identity
    // that would let chunks start afresh).
    let p = load(SCAN_BIG);
    let args = [Value::Scalar(compiler_core::interp::value::Scalar::int(100_000))];
    let r = agree_program(&p, &args).unwrap();
    assert_eq!(r[1], "299995");
}

// ------------------------------------------------------------ filters

const FILTER_FOLD: &str = include_str!("../../tests/ir/filter_fold.ir");

#[test]
fn filter_keeps_some_values_beside_a_fold() {
    assert_eq!(agree(FILTER_FOLD).unwrap(), ["[0, 9, 36, 81]", "285"]);
}

fn filter_flag(flag: &str, cell: &str) -> String {
    format!(
        "fn main() -> (int[.])  [instance main]
{{
  %0: int[1] = const [0]
  %1: int[1] = const [5]
  %2: int = const 2
  %3: int[.] = with {{
    part lower %0 upper %1 scalars [%4#i: int] {{
      %5: bool = const {flag}
      %6: int = prim add(%4, %2)
      yield %5, %6
    }}
  }} filter(%1){cell}
  return %3
}}

entry main = main
"
    )
}

#[test]
fn filter_keeping_all_or_none() {
    assert_eq!(agree(&filter_flag("true", " cell int")).unwrap(), ["[2, 3, 4, 5, 6]"]);
    assert_eq!(agree(&filter_flag("true", "")).unwrap(), ["[2, 3, 4, 5, 6]"]);
    assert_eq!(agree(&filter_flag("false", " cell int")).unwrap(), ["[]"]);
}

#[test]
fn filter_keeping_nothing_without_a_cell_type_has_no_shape() {
    let e = agree(&filter_flag("false", "")).unwrap_err();
    assert!(e.starts_with("R0012: "), "{e}");
}

const FILTER_DOUBLE: &str = "fn main() -> (double[.])  [instance main]
{
  %0: int[1] = const [0]
  %1: int[1] = const [9]
  %2: double = const 0.25
  %3: double = const 1.0
  %4: double = const 0.0
  %5: double[.] = with {
    part lower %0 upper %1 scalars [%6#i: int] {
      %7: double = prim to_double(%6)
      %8: double = prim mul(%7, %2)
      %9: double = prim sub(%8, %3)
      %10: bool = prim ge(%9, %4)
      %11: double = prim math_sqrt(%9)
      yield %10, %11
    }
  } filter(%1) cell double
  return %5
}

entry main = main
";

#[test]
fn filter_of_doubles() {
    assert_eq!(agree(FILTER_DOUBLE).unwrap(), ["[0.0, 0.5, 0.7071067811865476, 0.8660254037844386, 1.0]"]);
}

const FILTER_PARTS: &str = "fn main() -> (int[.])  [instance main]
{
  %0: int[1] = const [0]
  %1: int[1] = const [5]
  %2: int[1] = const [10]
  %3: int = const 2
  %4: int = const 0
  %5: int[.] = with {
    part lower %1 upper %2 scalars [%6#i: int] {
      %7: int = prim mod(%6, %3)
      %8: bool = prim eq(%7, %4)
      %9: int = prim mul(%6, %6)
      yield %8, %9
    }
    part lower %0 upper %1 scalars [%10#i: int] {
      %11: int = prim mod(%10, %3)
      %12: bool = prim neq(%11, %4)
      %13: int = prim neg(%10)
      yield %12, %13
    }
  } filter(%2) cell int
  return %5
}

entry main = main
";

#[test]
fn filter_over_several_parts_keeps_row_major_order() {
    // The parts run last-first; the kept values are in index order.
    assert_eq!(agree(FILTER_PARTS).unwrap(), ["[-1, -3, 36, 64]"]);
}

const FILTER_2D: &str = "fn main() -> (int[.])  [instance main]
{
  %0: int[2] = const [0, 0]
  %1: int[2] = const [3, 3]
  %2: int = const 3
  %3: int[.] = with {
    part lower %0 upper %1 scalars [%4#i: int, %5#j: int] {
      %6: bool = prim neq(%4, %5)
      %7: int = prim mul(%4, %2)
      %8: int = prim add(%7, %5)
      yield %6, %8
    }
  } filter(%1)
  return %3
}

entry main = main
";

#[test]
fn filter_over_a_matrix_frame() {
    assert_eq!(agree(FILTER_2D).unwrap(), ["[1, 2, 3, 5, 6, 7]"]);
}

const FILTER_EMPTY_FRAME: &str = "fn main() -> (double[.])  [instance main]
{
  %0: int[1] = const [0]
  %3: double[.] = with {
    part lower %0 upper %0 scalars [%4#i: int] {
      %6: bool = const true
      %7: double = const 1.5
      yield %6, %7
    }
  } filter(%0) cell double
  return %3
}

entry main = main
";

#[test]
fn filter_over_an_empty_frame() {
    assert_eq!(agree(FILTER_EMPTY_FRAME).unwrap(), ["genarray([0], 0.0)"]);
}

fn filter_rows(flag: &str, cell: &str) -> String {
    format!(
        "fn main() -> (int[.,.])  [instance main]
{{
  %0: int[1] = const [0]
  %1: int[1] = const [6]
  %2: int = const 2
  %3: int = const 1
  %4: int[.,.] = with {{
    part lower %0 upper %1 scalars [%5#i: int] {{
      %6: int = prim mod(%5, %2)
      %7: bool = prim eq(%6, %3)
      %8: bool = const false
      %9: int = prim add(%5, %3)
      %10: int[2] = array [%5, %9]
      yield {flag}, %10
    }}
  }} filter(%1){cell}
  return %4
}}

entry main = main
"
    )
}

#[test]
fn filter_of_vectors() {
    assert_eq!(agree(&filter_rows("%7", "")).unwrap(), ["[[1, 2], [3, 4], [5, 6]]"]);
    assert_eq!(agree(&filter_rows("%7", " cell int[2]")).unwrap(), ["[[1, 2], [3, 4], [5, 6]]"]);
    assert_eq!(agree(&filter_rows("%8", " cell int[2]")).unwrap(), ["genarray([0, 2], 0)"]);
    let e = agree(&filter_rows("%8", "")).unwrap_err();
    assert!(e.starts_with("R0012: "), "{e}");
}

const FILTER_IRREGULAR: &str = "fn main() -> (int[.,.])  [instance main]
{
  %0: int[1] = const [0]
  %1: int[1] = const [2]
  %2: int[1] = const [4]
  %3: bool = const true
  %4: int[.,.] = with {
    part lower %0 upper %1 scalars [%5#i: int] {
      %6: int[1] = array [%5]
      yield %3, %6
    }
    part lower %1 upper %2 scalars [%7#i: int] {
      %8: int[2] = array [%7, %7]
      yield %3, %8
    }
  } filter(%2)
  return %4
}

entry main = main
";

#[test]
fn filter_of_vectors_of_different_shapes_fails_as_in_the_interpreter() {
    assert_eq!(
        agree(FILTER_IRREGULAR).unwrap_err(),
        "R0007: array elements differ in shape: element 0 is [1], element 2 is [2]"
    );
}

const DYNAMIC_FRAMES: &str = "fn main(%0#s: int[.]) -> (int[*], int[.])  [instance main]
{
  %1: int = const 0
  %2: int = const 1
  %3: int = const 2
  %4: int[.] = prim mul(%0, %1)
  %5: int[*] = with {
    part lower %4 upper %0 index %6#iv: int[.] {
      yield %2
    }
  } scan(%0, prim add, %1)
  %7: int[.] = with {
    part lower %4 upper %0 index %8#iv: int[.] offset %9#o: int {
      %10: int = prim mod(%9, %3)
      %11: bool = prim eq(%10, %1)
      yield %11, %9
    }
  } filter(%0) cell int
  return %5, %7
}

entry main = main
";

#[test]
fn scan_and_filter_over_frames_of_run_time_rank() {
    // The generators' length is only known at run time (an odometer).
    let p = load(DYNAMIC_FRAMES);
    assert_eq!(agree_program(&p, &[ints(&[2, 3])]).unwrap(), ["[[1, 2, 3], [4, 5, 6]]", "[0, 2, 4]"]);
    assert_eq!(agree_program(&p, &[ints(&[0, 4])]).unwrap(), ["genarray([0, 4], 0)", "[]"]);
    assert_eq!(agree_program(&p, &[ints(&[])]).unwrap(), ["1", "[0]"]);
}

// ------------------------------------------------------------ reference counts

const LOOP: &str = "fn work(%0#a: int[.]) -> (int, int[.], int[.,.])  [instance work, noinline]
{
  %1: int[1] = prim shape(%0)
  %2: int[1] = const [0]
  %3: int = const 0
  %4: int[.] = with {
    part lower %2 upper %1 index %5#iv: int[1] {
      %6: int = prim sel(%5, %0)
      yield %6
    }
  } scan(%1, prim add, %3)
  %7: int = const 2
  %8: int[.], %20: int = with {
    part lower %2 upper %1 index %9#iv: int[1] {
      %10: int = prim sel(%9, %4)
      %11: int = prim mod(%10, %7)
      %12: bool = prim eq(%11, %3)
      yield %12, %10, %10
    }
  } filter(%1) cell int, fold(prim add, %3)
  %21: int[2] = const [0, 0]
  %22: int = const 1
  %23: int[.,.] = with {
    part lower %2 upper %1 scalars [%24#i: int] {
      %25: int[2] = array [%24, %22]
      yield %25
    }
  } scan(%1, prim add, %21)
  %26: int[.,.] = with {
    part lower %2 upper %1 scalars [%27#i: int] {
      %28: bool = prim gt(%27, %22)
      %29: int[1] = array [%27]
      %30: int[2] = prim sel(%29, %23)
      yield %28, %30
    }
  } filter(%1)
  return %20, %8, %26
}

fn main(%0#n: int, %1#a: int[.]) -> (int, int[.], int[.,.])  [instance main]
{
  %2: int = const 0
  %3: int = const 1
  %4: int, %5: int = loop while init(%2, %2) params(%6#i: int, %7#acc: int) cond {
    %8: bool = prim lt(%6, %0)
    yield %8
  } body {
    %9: int, %10: int[.], %15: int[.,.] = call work(%1)
    %11: int = prim add(%7, %9)
    %12: int = prim add(%6, %3)
    yield %12, %11
  }
  %13: int, %14: int[.], %16: int[.,.] = call work(%1)
  return %5, %14, %16
}

entry main = main
";

#[test]
fn scans_and_filters_in_a_loop_free_what_they_allocate() {
    let p = load(LOOP);
    let a = ints(&[1, 2, 3, 4, 5, 6, 7]);
    let args = |n: i64| [Value::Scalar(compiler_core::interp::value::Scalar::int(n)), a.clone()];
    let r = agree_program(&p, &args(3)).unwrap();
    // Prefix sums 1 3 6 10 15 21 28 (sum 84, three times), the even ones,
    // and the rows past index 1 of the scan of [i, 1].
    assert_eq!(r, ["252", "[6, 10, 28]", "[[3, 3], [6, 4], [10, 5], [15, 6], [21, 7]]"]);
    // Net bytes this thread still holds after a native run: the same for 10
    // and for 1010 iterations (a leak of one array per call would be 40+
    // bytes each). A first run warms up what compilation caches once.
    let options = Options { parallel: false, ..Options::default() };
    native(&p, &args(1), &options).unwrap();
    let mut growth = Vec::new();
    for n in [10, 1010] {
        let before = held();
        let out = native(&p, &args(n), &options).unwrap();
        drop(out);
        growth.push(held() - before);
    }
    assert!(growth[1] - growth[0] < 1000, "bytes held after 10 and 1010 iterations: {growth:?}");
    for &g in &growth {
        assert!(g < 1 << 16, "a native run keeps {g} bytes: {growth:?}");
    }
}

// ------------------------------------------------------------ extent reads

/// Two extents of an argument of any rank, read at constant indices: native
/// code reads them from the descriptor without building the shape vector,
/// checking the index against the rank (past it, the interpreter's error).
const EXTENTS: &str = "fn main(%0#a: int[*]) -> (int, int)  [instance main]
{
  %1: int[.] = prim shape(%0)
  %2: int[1] = const [0]
  %3: int = prim sel(%2, %1)
  %4: int[1] = const [2]
  %5: int = prim sel(%4, %1)
  return %3, %5
}

entry main = main
";

#[test]
fn extents_of_a_generic_argument_are_read_and_checked_against_its_rank() {
    let p = load(EXTENTS);
    let cube = Value::from_parts(vec![2, 1, 3], Elems::Int(BaseType::Int, vec![0; 6]));
    assert_eq!(agree_program(&p, &[cube]).unwrap(), ["2", "3"]);
    let matrix = Value::from_parts(vec![2, 2], Elems::Int(BaseType::Int, vec![0; 4]));
    assert_eq!(agree_program(&p, &[matrix]).unwrap_err(), "R0001: index [2] is out of bounds for shape [2]");
}

// ------------------------------------------------------------ narrowed parameters

/// The LLVM IR of `main`'s definition as emitted (LLVM's pipeline would
/// inline `main` into its entry point).
fn main_as_emitted(p: &Program) -> String {
    let as_emitted = Options { opt_level: 0, ..Options::default() };
    let ir =
        withloop_codegen::compile(&p.module, &p.sources, &as_emitted, false, withloop_codegen::Output::LlvmIr).unwrap();
    let ir = String::from_utf8(ir).unwrap();
    ir.split("define").find(|f| f.contains("@wl.main(")).expect("main's definition").to_string()
}

/// Native runs of `p` whose results are dropped hold no memory afterwards:
/// the bytes held after 1010 runs are those held after 10.
fn assert_runs_hold_nothing(p: &Program, args: &[Value]) {
    let mut growth = Vec::new();
    for n in [10, 1010] {
        let before = held();
        for _ in 0..n {
            drop(native(p, args, &Options::default()).unwrap());
        }
        growth.push(held() - before);
    }
    assert!(growth[1] - growth[0] < 1000, "bytes held after 10 and 1010 runs: {growth:?}");
}

/// A parameter narrowed to an instance's type (what a dispatch wrapper does
/// before the instance's code): read through the narrowed value only.
const NARROWED_READ: &str = "fn main(%0#a: int[*]) -> (int)  [instance main]
{
  %1: int[2] = narrow %0
  %2: int[1] = const [1]
  %3: int = prim sel(%2, %1)
  return %3
}

entry main = main
";

/// Narrowed values returned, one of them twice: each result needs a
/// reference of its own.
const NARROWED_RETURNED: &str = "fn main(%0#a: int[*]) -> (int, int[2], int[.], int[2])  [instance main]
{
  %1: int[2] = narrow %0
  %2: int[.] = narrow %0
  %3: int[1] = const [1]
  %4: int = prim sel(%3, %1)
  return %4, %1, %2, %1
}

entry main = main
";

#[test]
fn a_narrowed_parameter_is_borrowed_like_the_parameter() {
    let read = load(NARROWED_READ);
    assert_eq!(agree_program(&read, &[ints(&[4, 5])]).unwrap(), ["5"]);
    let body = main_as_emitted(&read);
    assert!(
        !body.contains("@wl_inc(") && !body.contains("@wl_dec("),
        "no reference is taken for a narrowed parameter:\n{body}"
    );

    let returned = load(NARROWED_RETURNED);
    assert_eq!(agree_program(&returned, &[ints(&[4, 5])]).unwrap(), ["5", "[4, 5]", "[4, 5]", "[4, 5]"]);
    // Every result holds a reference of its own: dropping them frees the
    // arrays once each, and repeated runs hold nothing more.
    assert_runs_hold_nothing(&returned, &[ints(&[4, 5])]);
}

// ------------------------------------------------------------ stack vectors

/// Generic code's shape vector, read by a selection, an offset computation
/// and an element-wise primitive (whose result, also only read, bounds the
/// with-loop).
const SHAPE_READ: &str = "fn main(%0#a: int[.,.]) -> (int)  [instance main]
{
  %12: int[2] = prim shape(%0)
  %2: int = const 0
  %3: int[2] = const [0, 0]
  %4: int = const 1
  %13: int[2] = prim sub(%12, %4)
  %16: int[1] = const [1]
  %18: int = prim sel(%16, %12) unchecked
  %11: int = with {
    part lower %3 upper %13 scalars [%21: int, %22: int] {
      %23: int[2] = array [%21, %22]
      %24: int = prim vect2offset(%12, %23)
      %15: int = prim idx_sel(%24, %0) unchecked
      %19: int = prim mul(%15, %18)
      yield %19
    }
  } fold(prim add, %2) cell int
  return %11
}

entry main = main
";

/// The same shape vector, also returned: it outlives the call.
const SHAPE_RETURNED: &str = "fn main(%0#a: int[.,.]) -> (int, int[2])  [instance main]
{
  %12: int[2] = prim shape(%0)
  %16: int[1] = const [1]
  %18: int = prim sel(%16, %12) unchecked
  return %18, %12
}

entry main = main
";

#[test]
fn small_vectors_that_are_only_read_are_built_in_the_frame() {
    let matrix = Value::from_parts(vec![3, 4], Elems::Int(BaseType::Int, (0..12).collect()));
    let read = load(SHAPE_READ);
    // Rows 0 and 1, columns 0 to 2 of iota(12) as 3x4, each times 4.
    assert_eq!(agree_program(&read, std::slice::from_ref(&matrix)).unwrap(), ["72"]);
    let body = main_as_emitted(&read);
    assert!(!body.contains("@wl_shape_vector("), "the shape is read from the descriptor:\n{body}");
    assert!(body.contains("stackvec"), "the shape vector is built in the frame:\n{body}");
    assert!(!body.contains("@wl_alloc("), "so is `shape - 1`, the with-loop's bound:\n{body}");

    let returned = load(SHAPE_RETURNED);
    assert_eq!(agree_program(&returned, std::slice::from_ref(&matrix)).unwrap(), ["4", "[3, 4]"]);
    assert_runs_hold_nothing(&returned, std::slice::from_ref(&matrix));
}

// ------------------------------------------------------------ the stack

/// Recursion `n` calls deep (below the depth limit for the tests' `n`).
const DEEP: &str = "fn down(%0#n: int) -> (int)  [instance down]
{
  %1: int = const 0
  %2: bool = prim eq(%0, %1)
  %3: int = if %2 {
    yield %1
  } else {
    %4: int = const 1
    %5: int = prim sub(%0, %4)
    %6: int = call down(%5)
    %7: int = prim add(%6, %4)
    yield %7
  }
  return %3
}

fn main(%0#n: int) -> (int)  [instance main]
{
  %1: int = call down(%0)
  return %1
}

entry main = main
";

#[test]
fn recursion_deeper_than_the_threads_stack_is_an_error_not_a_crash() {
    // A thread of 256 KiB: 9,000 calls need more than it has, 100 do not.
    let outcomes = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(|| {
            let p = load(DEEP);
            let depth = |n: i64| Value::Scalar(compiler_core::interp::value::Scalar::int(n));
            let as_emitted = Options { opt_level: 0, ..Options::default() };
            [100, 9_000].map(|n| native(&p, &[depth(n)], &as_emitted).map(|v| value_literal(&v[0])))
        })
        .unwrap()
        .join()
        .expect("the thread does not crash");
    assert_eq!(outcomes[0].as_deref(), Ok("100"));
    let err = outcomes[1].as_ref().unwrap_err();
    assert!(err.starts_with("R0009: nested calls used up the thread's stack"), "{err}");
}

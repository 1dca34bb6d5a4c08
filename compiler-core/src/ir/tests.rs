//! IR-level tests: the constructs no SaC program lowers to (scans, filters),
//! written in the text form, run before and after the optimisation pipeline.

use super::*;
use crate::interp::format::value_literal;
use crate::interp::{RunOptions, value::Value};
use crate::opt::{self, PipelineOptions};
use crate::span::{FileKind, SourceMap};

fn run_text(text: &str, optimise: bool) -> Result<Vec<String>, String> {
    let mut sources = SourceMap::new();
    let file = sources.add("test.ir", text, FileKind::User);
    let mut m = parse::parse_module(text, Span::new(file, 0, 0)).map_err(|e| e.to_string())?;
    verify::verify(&m).map_err(|e| e.join("; "))?;
    // The text form round-trips.
    assert_eq!(
        print::module_text(&parse::parse_module(&print::module_text(&m), Span::new(file, 0, 0)).unwrap()),
        print::module_text(&m)
    );
    if optimise {
        opt::optimise(&mut m, &sources, &PipelineOptions { verify: true, ..Default::default() })
            .map_err(|b| b.problems.join("; "))?;
    }
    let mut out = Vec::new();
    let result = interp::run(&m, &sources, "main", Vec::<Value>::new(), RunOptions::default(), &mut |b| {
        out.extend_from_slice(b)
    })
    .ok_or("no entry")?
    .map_err(|e| format!("{} {}", e.code.id, e.message))?;
    Ok(result.iter().map(value_literal).collect())
}

/// The pipeline with only `dce` on (verified after it).
fn only_dce() -> PipelineOptions {
    PipelineOptions {
        verify: true,
        disabled: opt::pass_names().into_iter().filter(|n| *n != "dce").map(String::from).collect(),
        ..Default::default()
    }
}

fn both(text: &str) -> Vec<String> {
    let plain = run_text(text, false).expect("runs");
    let optimised = run_text(text, true).expect("runs optimised");
    assert_eq!(plain, optimised, "optimisation changed the result");
    plain
}

const SCAN: &str = include_str!("../../../tests/ir/scan_int.ir");

#[test]
fn scan_accumulates_in_row_major_order() {
    // Prefix sums of the squares 0, 1, 4, 9, 16, 25.
    assert_eq!(both(SCAN), vec!["[0, 1, 5, 14, 30, 55]"]);
}

const SCAN_SPLIT: &str = include_str!("../../../tests/ir/scan_split.ir");

#[test]
fn scan_follows_the_frame_not_the_parts() {
    // Values by index: 1 1 1 1 4 5; running differences from 100.
    assert_eq!(both(SCAN_SPLIT), vec!["[99, 98, 97, 96, 92, 87]"]);
}

const SCAN_CALL: &str = include_str!("../../../tests/ir/scan_call.ir");

#[test]
fn a_scan_keeps_its_function_through_optimisation() {
    // The scan's function is called from nowhere else: removing unused
    // functions must still count it as called (and renumber the scan's call).
    assert_eq!(both(SCAN_CALL), vec!["[3, 8, 22, 63, 185]"]);
}

const FOLD_LANES: &str = include_str!("../../../tests/ir/fold_lanes.ir");

#[test]
fn folds_and_scans_over_pairs_combine_their_lanes_together() {
    // The leftmost minimum and its index; running (sum of 10 * i, count).
    assert_eq!(both(FOLD_LANES), vec!["0.5", "4", "[0, 10, 30, 60, 100, 150]", "[1, 2, 3, 4, 5, 6]"]);
}

#[test]
fn the_verifier_rejects_broken_lane_groups() {
    let broken = [
        // The lanes out of order.
        FOLD_LANES.replace(
            "fold(lane 0 of 2 call minloc, %3), fold(lane 1 of 2",
            "fold(lane 1 of 2 call minloc, %3), fold(lane 0 of 2",
        ),
        // A group missing its second lane.
        FOLD_LANES.replace("fold(lane 1 of 2 call minloc, %4)", "fold(prim add, %4)"),
        // Lanes of different partial arguments.
        FOLD_LANES.replace("lane 1 of 2 call pair partial(%7)", "lane 1 of 2 call pair partial(%6)"),
    ];
    for text in broken {
        let e = run_text(&text, false).unwrap_err();
        assert!(e.contains("lane"), "{e}");
    }
}

const FILTER: &str = include_str!("../../../tests/ir/filter_fold.ir");

#[test]
fn filter_keeps_flagged_values_in_order() {
    // Squares of 0, 3, 6, 9; and, alongside, the sum of all squares (a redomap).
    assert_eq!(both(FILTER), vec!["[0, 9, 36, 81]", "285"]);
}

const FILTER_EMPTY: &str = "fn main() -> (double[.])  [instance main]
{
  %0: int[1] = const [0]
  %1: int[1] = const [4]
  %3: double[.] = with {
    part lower %0 upper %1 scalars [%4#i: int] {
      %6: bool = const false
      %7: double = const 1.5
      yield %6, %7
    }
  } filter(%1) cell double
  return %3
}

entry main = main
";

#[test]
fn an_empty_filter_is_an_empty_vector_of_its_cell_type() {
    assert_eq!(both(FILTER_EMPTY), vec!["genarray([0], 0.0)"]);
}

const REDOMAP: &str = "fn main() -> (int)  [instance main]
{
  %0: int[1] = const [0]
  %1: int[1] = const [20]
  %2: int = const 0
  %3: int[20] = with {
    part lower %0 upper %1 scalars [%4#i: int] {
      %5: int = prim mul(%4, %4)
      yield %5
    }
  } genarray(%1, %2)
  %6: int = with {
    part lower %0 upper %1 index %7#iv: int[1] {
      %8: int = prim sel(%7, %3)
      %9: int = const 1
      %10: int = prim add(%8, %9)
      yield %10
    }
  } fold(prim max, %2)
  return %6
}

entry main = main
";

#[test]
fn map_then_reduce_is_one_fold() {
    assert_eq!(both(REDOMAP), vec!["362"]);
    // After optimisation the map is folded into the reduction (a redomap).
    let mut sources = SourceMap::new();
    let file = sources.add("test.ir", REDOMAP, FileKind::User);
    let mut m = parse::parse_module(REDOMAP, Span::new(file, 0, 0)).unwrap();
    opt::optimise(&mut m, &sources, &PipelineOptions { verify: true, ..Default::default() }).unwrap();
    assert_eq!(print::structure_text(&m), "fn main: 1 with-loop\n  fold max: 1 part [0]..[20]; 0 checks\n");
}

#[test]
fn ifs_left_empty_are_removed_and_ifs_with_checks_stay() {
    let text = "fn main() -> (int)  [instance main]
{
  %0: int = const 3
  %1: int = const 0
  %2: bool = prim lt(%0, %1)
  if %2 {
    yield
  } else {
    yield
  }
  %3: int[1] = const [4]
  %4: int[1] = array [%0]
  if %2 {
    yield
  } else {
    check in_bounds(%4, %3) R0001 \"selection\"
    yield
  }
  return %0
}
";
    let mut sources = SourceMap::new();
    let file = sources.add("test.ir", text, FileKind::User);
    let mut m = parse::parse_module(text, Span::new(file, 0, 0)).unwrap();
    let only_dce = only_dce();
    opt::optimise(&mut m, &sources, &only_dce).unwrap();
    let ifs = |m: &Module| {
        let mut n = 0;
        m.functions[0].body.walk(&mut |s| n += usize::from(matches!(s.op, Op::If { .. })));
        n
    };
    assert_eq!(ifs(&m), 1, "{}", print::module_text(&m));
    assert!(print::module_text(&m).contains("check in_bounds"));
}

/// Two loops from one macro expansion share its span; inference enters the
/// first (`x < 3` on entry) and not the second (`y > 5` is false on entry),
/// so lowering leaves the second out. Recorded by span, the first loop's
/// entry counted for both, and the second was lowered with an untyped body
/// (a `+` that reached no instance, B0001).
#[test]
fn a_loop_inference_never_entered_is_left_out_though_it_shares_a_span() {
    let source = "#define TWO_LOOPS(a, b) while (a < 3) { a = a + 1; } while (b > 5) { b = b + half(tod(b)); }\n\
                  int half(double d) { return toi(d / 2.0); }\n\
                  int main() { x = 0; y = 0; TWO_LOOPS(x, y) return x * 10 + y; }\n";
    let options = crate::driver::FrontendOptions::default();
    let fe = crate::driver::frontend("loops.sac", source, &crate::syntax::cpp::MemoryLoader::default(), &options);
    assert!(!fe.has_errors(), "{:?}", fe.diagnostics);
    let m = lower::lower(&fe.program, &fe.typed, &fe.sources);
    let main = m.functions.iter().find(|f| f.name == "main").expect("main");
    let text = print::function_text(&m, main);
    assert_eq!(text.matches("loop while").count(), 1, "{text}");
    assert!(!text.contains("B0001"), "{text}");
}

/// A dead `genarray` or `reshape` leaves the check of its shape in its place
/// (a constant shape needs none); the checks print, parse back and fail as
/// the producers would.
#[test]
fn dead_producers_leave_their_shape_checks() {
    let text = "fn main() -> (int)  [instance main]
{
  %0: int = const -2
  %1: int[2] = const [4, 1]
  %2: int[6] = const [1, 2, 3, 4, 5, 6]
  %3: int[2] = array [%0, %0]
  %4: int[.,.] = prim genarray(%3, %0)
  %5: int[2] = const [2, 2]
  %6: int[2,2] = prim genarray(%5, %0)
  %7: int[.,.] = prim reshape(%1, %2)
  return %0
}

entry main = main
";
    let mut sources = SourceMap::new();
    let file = sources.add("test.ir", text, FileKind::User);
    let mut m = parse::parse_module(text, Span::new(file, 0, 0)).unwrap();
    let only_dce = only_dce();
    opt::optimise(&mut m, &sources, &only_dce).unwrap();
    let after = print::module_text(&m);
    assert!(after.contains("check extents(%3) R0013"), "{after}");
    assert!(after.contains("= prim shape(%2)") && after.contains("check reshape(%1, %"), "{after}");
    assert!(!after.contains("prim genarray") && !after.contains("extents(%5)"), "{after}");
    let again = parse::parse_module(&after, Span::new(file, 0, 0)).unwrap();
    assert_eq!(print::module_text(&again), after);
    let run = |m: &Module| {
        interp::run(m, &sources, "main", Vec::<Value>::new(), RunOptions::default(), &mut |_| {})
            .unwrap()
            .map_err(|e| (e.code.id, e.message))
    };
    let message = "genarray shape has a negative extent -2".to_string();
    assert_eq!(run(&m), Err(("R0013", message)));
    // Without the genarray, the reshape's check fails with the interpreter's message.
    let fine = text.replace("%0: int = const -2", "%0: int = const 2");
    let mut m = parse::parse_module(&fine, Span::new(file, 0, 0)).unwrap();
    opt::optimise(&mut m, &sources, &only_dce).unwrap();
    let message = "cannot reshape 6 elements (shape [6]) to shape [4,1] (4 elements)";
    assert_eq!(run(&m), Err(("R0005", message.to_string())));
}

#[test]
fn functions_differing_in_the_sign_of_zero_stay_apart() {
    // Two copies of one function (as `version` outlines them from two
    // inlined calls) that differ only in `0.0` against `-0.0`: merge once
    // took them for one (floats compared as numbers), and both calls gave inf.
    let text = "fn f__d(%0#x: double) -> (double)  [instance f, noinline, cold]
{
  %1: double = const 1.0
  %2: double = const 0.0
  %3: double = prim mul(%2, %0)
  %4: double = prim div(%1, %3)
  return %4
}

fn f__d__2(%0#x: double) -> (double)  [instance f, noinline, cold]
{
  %1: double = const 1.0
  %2: double = const -0.0
  %3: double = prim mul(%2, %0)
  %4: double = prim div(%1, %3)
  return %4
}

fn main() -> (double[2])  [instance main]
{
  %0: double = const 2.0
  %1: double = call f__d(%0)
  %2: double = call f__d__2(%0)
  %3: double[2] = array [%1, %2]
  return %3
}

entry main = main
";
    assert_eq!(both(text), vec!["[inf, -inf]"]);
    // Equal copies still merge.
    let mut sources = SourceMap::new();
    let same = text.replace("const -0.0", "const 0.0");
    let file = sources.add("test.ir", &same, FileKind::User);
    let mut m = parse::parse_module(&same, Span::new(file, 0, 0)).unwrap();
    let outcome = opt::optimise(&mut m, &sources, &PipelineOptions { verify: true, ..Default::default() }).unwrap();
    let merge = outcome.passes.iter().find(|p| p.name == "merge").unwrap();
    assert_eq!(merge.counters.get("functions_merged"), Some(&1));
}

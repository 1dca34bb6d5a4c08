//! Snapshot tests of the optimisation report (JSON and text) for a few
//! programs, so that changes to what the optimiser does, or to the schema, show
//! up in review. Timing is off, so the snapshots are stable. Update with
//! `cargo insta review` (or `INSTA_UPDATE=always`). Also: the pipeline's IR and
//! report are the same on one thread as on four.

use std::path::Path;

use compiler_core::opt::{self, PipelineOptions};
use withloop_cli::{Invocation, optimised};

fn report(file: &str) -> opt::report::Report {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let inv = Invocation { file: root.join(file), ..Default::default() };
    let options = PipelineOptions { verify: true, no_timing: true, ..Default::default() };
    let (fe, _module, outcome) = optimised(&inv, &options).unwrap_or_else(|r| panic!("{}", r.stderr));
    let mut r = opt::report::build(file, &outcome, &fe.program, &fe.typed, &fe.sources, false, false);
    // Locations name the file relative to tests/, whatever the checkout's path.
    for v in &mut r.variants {
        if let Some(at) = &mut v.at {
            at.file = file.to_string();
        }
    }
    for m in &mut r.remarks {
        if let Some(at) = &mut m.at {
            at.file = file.to_string();
        }
    }
    r
}

#[test]
fn fold80_report_json() {
    insta::assert_snapshot!(report("lang/opt/fold80_four_ranges.sac").to_json());
}

#[test]
fn two_consumers_report_text() {
    insta::assert_snapshot!(report("lang/opt/two_consumers_fused.sac").to_text());
}

#[test]
fn generic_report_text() {
    insta::assert_snapshot!(report("lang/opt/generic_map_map.sac").to_text());
}

/// `withloop passes` (which `--disable`'s help points at) lists every pass
/// `--disable` accepts, in pipeline order, with its description.
#[test]
fn passes_listing() {
    let listing = String::from_utf8(withloop_cli::passes().stdout).expect("utf-8");
    for name in opt::pass_names() {
        assert!(
            listing.lines().any(|l| l.split_whitespace().next() == Some(name)),
            "`{name}` is missing from:\n{listing}"
        );
    }
    insta::assert_snapshot!(listing);
}

/// Function-local passes spread the functions over threads: the benchmark
/// suite's kernels with its shape hints (functions enough that they do) come
/// out of the pipeline with the same IR, counters and remarks on one thread
/// as on four.
#[test]
fn the_pipeline_does_the_same_on_any_number_of_threads() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let hints = [
        "neg.a=double[4000,4000]",
        "relax.a=double[2000,2000]",
        "relax_iv.a=double[2000,2000]",
        "relax_apl.a=double[2000,2000]",
        "smooth.a=double[4000000]",
        "mg3.u=double[128,128,128]",
        "matmul.a=double[1024,1024]",
        "matmul.b=double[1024,1024]",
        "det.a=double[10,10]",
        "floyd.d=double[512,512]",
    ];
    let frontend = compiler_core::driver::FrontendOptions {
        shape_hints: hints.iter().map(|h| h.to_string()).collect(),
        ..Default::default()
    };
    let inv = Invocation { file: root.join("../bench/kernels.sac"), frontend, ..Default::default() };
    let run = |threads: usize| {
        let options = PipelineOptions { verify: true, no_timing: true, threads: Some(threads), ..Default::default() };
        let (fe, module, outcome) = optimised(&inv, &options).unwrap_or_else(|r| panic!("{}", r.stderr));
        let report = opt::report::build("kernels.sac", &outcome, &fe.program, &fe.typed, &fe.sources, false, false);
        (compiler_core::ir::print::module_text(&module), report.to_json(), outcome.runs_spread)
    };
    let (one_ir, one_report, one_spread) = run(1);
    let (four_ir, four_report, four_spread) = run(4);
    assert_eq!(one_spread, 0, "one thread spread functions over threads");
    if std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2) {
        assert!(four_spread > 0, "no pass spread the functions over threads");
    }
    assert!(one_ir == four_ir, "the IR differs between one thread and four");
    assert_eq!(one_report, four_report);
    assert!(one_report.contains("with_loops_folded"), "the report says nothing folded:\n{one_report}");
}

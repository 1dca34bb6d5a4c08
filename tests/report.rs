//! Snapshot tests of the optimisation report (JSON and text) for a few
//! programs, so that changes to what the optimiser does, or to the schema, show
//! up in review. Timing is off, so the snapshots are stable. Update with
//! `cargo insta review` (or `INSTA_UPDATE=always`).

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

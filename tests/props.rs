//! Property tests over random well-typed programs (`support/gen.rs`):
//!
//! * the result does not depend on how much the compiler knows: running untyped
//!   (every call dispatched at run time), typed without hints, with exact-shape
//!   hints and with rank-only hints all give the same output;
//! * the typed program never lacks a call target for a call it executes.
//!
//! `WITHLOOP_PROP_PROGRAMS` sets how many programs (default 150).

#[path = "support/gen.rs"]
mod generator;

use compiler_core::driver::{FrontendOptions, frontend, parse_value};
use compiler_core::interp::{self, EntryError, RunOptions, format::value_literal};
use compiler_core::syntax::cpp::MemoryLoader;
use generator::{Gen, Program, Ty};

/// Output of one run: printed text and returned values, or the error code.
fn run_once(p: &Program, hints: &[String], typed: bool) -> Result<String, String> {
    let options = FrontendOptions { shape_hints: hints.to_vec(), ..Default::default() };
    let mut fe = frontend("gen.sac", &p.source, &MemoryLoader::default(), &options);
    if fe.has_errors() {
        let msgs: Vec<String> =
            fe.diagnostics.iter().filter(|d| d.is_error()).map(|d| format!("{} {}", d.code.id, d.message)).collect();
        return Err(format!("compile error: {}", msgs.join("; ")));
    }
    let mut args = Vec::new();
    for a in &p.args {
        args.push(parse_value(&mut fe.sources, a).map_err(|d| d.message.clone())?);
    }
    let mut out = Vec::new();
    let run_options = RunOptions { max_steps: Some(2_000_000), ..Default::default() };
    let run =
        interp::run(&fe.program, typed.then_some(&fe.typed), &fe.sources, &p.entry, args, run_options, &mut |b| {
            out.extend_from_slice(b)
        });
    if typed && run.untyped_fallbacks > 0 {
        return Err(format!("BUG: {} call(s) without a typed target", run.untyped_fallbacks));
    }
    match run.result {
        Ok(values) => {
            let mut text = String::from_utf8_lossy(&out).into_owned();
            for v in values {
                text.push_str(&value_literal(&v));
                text.push('\n');
            }
            Ok(text)
        }
        Err(EntryError::Runtime(e)) => Err(format!("run-time {}", e.code.id)),
        Err(EntryError::Unknown(n)) => Err(format!("no entry {n}")),
    }
}

fn exact_hint(name: &str, ty: &Ty) -> String {
    let e = match ty.elem {
        generator::Elem::Int => "int",
        generator::Elem::Double => "double",
    };
    let dims: Vec<String> = ty.shape.iter().map(|d| d.to_string()).collect();
    if dims.is_empty() { format!("f.{name}={e}") } else { format!("f.{name}={e}[{}]", dims.join(",")) }
}

fn rank_hint(name: &str, ty: &Ty) -> String {
    let e = match ty.elem {
        generator::Elem::Int => "int",
        generator::Elem::Double => "double",
    };
    if ty.shape.is_empty() {
        format!("f.{name}={e}")
    } else {
        format!("f.{name}={e}[{}]", vec!["."; ty.shape.len()].join(","))
    }
}

#[test]
fn results_do_not_depend_on_hints_or_typing() {
    let n: u64 = std::env::var("WITHLOOP_PROP_PROGRAMS").ok().and_then(|s| s.parse().ok()).unwrap_or(150);
    let failure = interp::with_large_stack(move || {
        for seed in 0..n {
            let p = Gen::new(seed).program();
            let baseline = run_once(&p, &[], false);
            if let Err(e) = &baseline
                && e.starts_with("compile error")
            {
                return Some(format!("seed {seed}: the generator made an ill-typed program: {e}\n{}", p.source));
            }
            let exact: Vec<String> = p.params.iter().map(|(n, t)| exact_hint(n, t)).collect();
            // A rank-only hint must not be wider than the declared type.
            let ranks: Vec<String> = p
                .params
                .iter()
                .zip(&p.declared)
                .map(
                    |((n, t), d)| {
                        if d.chars().any(|c| c.is_ascii_digit()) { exact_hint(n, t) } else { rank_hint(n, t) }
                    },
                )
                .collect();
            for (what, hints, typed) in
                [("typed", vec![], true), ("exact hints", exact, true), ("rank hints", ranks, true)]
            {
                let got = run_once(&p, &hints, typed);
                if got != baseline {
                    return Some(format!(
                        "seed {seed}: {what} {hints:?} gives\n{got:?}\nbut untyped gives\n{baseline:?}\nprogram (args {:?}):\n{}",
                        p.args, p.source
                    ));
                }
            }
        }
        None
    });
    if let Some(f) = failure {
        panic!("{f}");
    }
}

/// Guards against a generator that only makes trivial or failing programs.
#[test]
fn generated_programs_mostly_run_and_use_arrays() {
    let stats = interp::with_large_stack(|| {
        let (mut ok, mut with_loops, mut calls_through_wrappers) = (0, 0, 0);
        for seed in 0..60 {
            let p = Gen::new(seed).program();
            if run_once(&p, &[], true).is_ok() {
                ok += 1;
            }
            if p.source.contains("with {") {
                with_loops += 1;
            }
            if p.source.contains("[*] x") || p.source.contains("[+] x") {
                calls_through_wrappers += 1;
            }
        }
        (ok, with_loops, calls_through_wrappers)
    });
    assert!(stats.0 >= 50, "only {} of 60 generated programs ran without error", stats.0);
    assert!(stats.1 >= 20, "only {} of 60 generated programs contain with-loops", stats.1);
    assert!(stats.2 >= 5, "only {} of 60 generated programs have generic helpers", stats.2);
}

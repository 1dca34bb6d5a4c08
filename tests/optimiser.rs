//! Differential tests of the optimiser over random well-typed programs
//! (`support/gen.rs`): the reference interpreter, the unoptimised IR and the IR
//! after the pipeline — with all passes, and with a random subset of them —
//! must print and return exactly the same (fold order is only changed for
//! exactly associative folds, so doubles compare exactly), or fail with the same
//! error code. The verifier runs after every pass.
//!
//! Every eighth program (`WITHLOOP_NATIVE_EVERY`) also runs as native code,
//! compiled by LLVM from the fully optimised IR.
//!
//! `WITHLOOP_OPT_PROGRAMS` sets how many programs each of the four shards runs
//! (default 2,500: 10,000 in all). A failure prints the seed, the pass set and
//! the program; rerun one seed with `WITHLOOP_OPT_SEED=<seed>`.

#[path = "support/gen.rs"]
#[allow(dead_code)]
mod generator;

use compiler_core::driver::{FrontendOptions, frontend, parse_value};
use compiler_core::interp::{self, EntryError, RunOptions, Value, format::value_literal};
use compiler_core::ir;
use compiler_core::opt::{self, PipelineOptions};
use compiler_core::syntax::cpp::MemoryLoader;
use generator::{Gen, Program, Rng};

const SHARDS: u64 = 4;

fn render(out: &[u8], values: &[Value]) -> String {
    let mut text = String::from_utf8_lossy(out).into_owned();
    for v in values {
        text.push_str(&value_literal(v));
        text.push('\n');
    }
    text
}

/// Runs `p` every way; `None` when all agree, else what differed.
fn check(p: &Program, hints: &[String], subset: &PipelineOptions, native: bool) -> Option<String> {
    let options = FrontendOptions { shape_hints: hints.to_vec(), ..Default::default() };
    let mut fe = frontend("gen.sac", &p.source, &MemoryLoader::default(), &options);
    if fe.has_errors() {
        let msgs: Vec<String> =
            fe.diagnostics.iter().filter(|d| d.is_error()).map(|d| format!("{} {}", d.code.id, d.message)).collect();
        return Some(format!("compile error: {}", msgs.join("; ")));
    }
    let mut args = Vec::new();
    for a in &p.args {
        match parse_value(&mut fe.sources, a) {
            Ok(v) => args.push(v),
            Err(d) => return Some(d.message.clone()),
        }
    }
    let run_options = RunOptions { max_steps: Some(2_000_000), ..Default::default() };
    let mut out = Vec::new();
    let reference =
        interp::run(&fe.program, Some(&fe.typed), &fe.sources, &p.entry, args.clone(), run_options.clone(), &mut |b| {
            out.extend_from_slice(b)
        });
    let want = match reference.result {
        Ok(values) => Ok(render(&out, &values)),
        Err(EntryError::Runtime(e)) if e.code.id == "R0015" => return None, // step limit: inconclusive
        Err(EntryError::Runtime(e)) => Err(e.code.id.to_string()),
        Err(EntryError::Unknown(n)) => return Some(format!("no entry {n}")),
    };
    let base = ir::lower::lower(&fe.program, &fe.typed, &fe.sources);
    if let Err(e) = ir::verify::verify(&base) {
        return Some(format!("lowered IR malformed: {}", e.join("; ")));
    }
    let all = PipelineOptions { verify: true, ..Default::default() };
    for (what, options) in [("unoptimised", None), ("all passes", Some(&all)), ("pass subset", Some(subset))] {
        let mut m = base.clone();
        if let Some(Err(broken)) = options.map(|o| opt::optimise(&mut m, &fe.sources, o)) {
            return Some(format!("{what}: pass `{}` broke the IR: {}", broken.pass, broken.problems.join("; ")));
        }
        let mut out = Vec::new();
        let got = match ir::interp::run(&m, &fe.sources, &p.entry, args.clone(), run_options.clone(), &mut |b| {
            out.extend_from_slice(b)
        }) {
            Some(Ok(values)) => Ok(render(&out, &values)),
            Some(Err(e)) => Err(e.code.id.to_string()),
            None => return Some(format!("{what}: no entry")),
        };
        if got != want {
            return Some(format!("{what}: expected {want:?}, got {got:?}"));
        }
        if native && what == "all passes" {
            let mut out = Vec::new();
            let codegen = withloop_codegen::Options { exact_folds: true, ..Default::default() };
            let got =
                match withloop_codegen::jit::run(&m, &fe.sources, &p.entry, args.clone(), &codegen, None, &mut |b| {
                    out.extend_from_slice(b)
                }) {
                    Ok(values) => Ok(render(&out, &values)),
                    Err(withloop_codegen::jit::RunError::Runtime(e)) => Err(e.code.id.to_string()),
                    Err(other) => return Some(format!("native code: {other:?}")),
                };
            if got != want {
                return Some(format!("native code: expected {want:?}, got {got:?}"));
            }
        }
    }
    None
}

fn exact_hint(name: &str, ty: &generator::Ty) -> String {
    let e = match ty.elem {
        generator::Elem::Int => "int",
        generator::Elem::Double => "double",
    };
    let dims: Vec<String> = ty.shape.iter().map(|d| d.to_string()).collect();
    if dims.is_empty() { format!("f.{name}={e}") } else { format!("f.{name}={e}[{}]", dims.join(",")) }
}

fn shard(k: u64) {
    let n: u64 = std::env::var("WITHLOOP_OPT_PROGRAMS").ok().and_then(|s| s.parse().ok()).unwrap_or(2500);
    let only: Option<u64> = std::env::var("WITHLOOP_OPT_SEED").ok().and_then(|s| s.parse().ok());
    let every: u64 = std::env::var("WITHLOOP_NATIVE_EVERY").ok().and_then(|s| s.parse().ok()).unwrap_or(8).max(1);
    let failure = interp::with_large_stack(move || {
        let names = opt::pass_names();
        let seeds: Vec<u64> = match only {
            Some(s) if s % SHARDS == k => vec![s],
            Some(_) => Vec::new(),
            None => (0..n).map(|i| i * SHARDS + k).collect(),
        };
        for seed in seeds {
            let p = Gen::new(seed).program();
            let mut rng = Rng::new(seed ^ 0x5eed);
            // Half the programs with exact shapes (more folds), half generic.
            let hints: Vec<String> =
                if rng.chance(50) { p.params.iter().map(|(n, t)| exact_hint(n, t)).collect() } else { Vec::new() };
            let subset: Vec<&str> = names.iter().copied().filter(|_| rng.chance(50)).collect();
            let options = PipelineOptions { verify: true, ..PipelineOptions::only(&subset) };
            let native = only.is_some() || (seed / SHARDS).is_multiple_of(every);
            if let Some(what) = check(&p, &hints, &options, native) {
                return Some(format!(
                    "seed {seed} (hints {hints:?}, passes {subset:?}): {what}\n--- program (args {:?}) ---\n{}",
                    p.args, p.source
                ));
            }
        }
        None
    });
    if let Some(f) = failure {
        panic!("{f}");
    }
}

#[test]
fn optimised_programs_behave_like_the_reference_0() {
    shard(0);
}

#[test]
fn optimised_programs_behave_like_the_reference_1() {
    shard(1);
}

#[test]
fn optimised_programs_behave_like_the_reference_2() {
    shard(2);
}

#[test]
fn optimised_programs_behave_like_the_reference_3() {
    shard(3);
}

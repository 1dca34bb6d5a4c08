//! The language test harness: every `tests/**/*.sac` and `*.l0` file with a `// ==` block is
//! a test. The block (in `//` comments at the top of the file) says what to run and
//! what must happen:
//!
//! ```text
//! // Kreye's determinant on a 3x3 matrix.
//! // ==
//! // flags: --noprelude -DN=3 -Iinclude   (optional: driver flags; `--disable PASS` for the optimised and native runs and the structure checks;
//! //                                       `--entry-only`: export only the entry, as `withloop compile --entry`)
//! // entry: det                           (optional: function to run, default main)
//! // args: [[1,2],[3,4]] ; 5              (optional: --arg values, `;`-separated)
//! // shapes: f.a=int[3,3] ; f.b=int[.]     (optional: shape hints, `;`-separated)
//! // maxspec: 4                            (optional: specialisations per function)
//! // instances:                            (the user instances `withloop check
//! // | f(int[3,3]) -> int  [f__i_3_3]  shape hint     --instances` lists)
//! // output:                              (stdout of `withloop run`, line by line)
//! // | 18
//! // error: E0203 @ 7:5 "before it is assigned"   (compile error; repeat for several)
//! // runtime-error: R0001 @ 12:10 "out of bounds"  (run-time error)
//! // warning: W0011 @ 3:9                          (expected warnings, if any listed)
//! // structure:                        (lines of `withloop compile --emit structure`,
//! // | fn main: 1 with-loop              in this order, others may come between)
//! // remark: wlf missed @ 12:5 "several consumers"  (an optimisation remark)
//! // counter: with_loops_folded >= 2               (a report total: `=` or `>=`)
//! ```
//!
//! `output` must match exactly. Compile errors must match as a set: every expected
//! error reported (code, and line:col and message text when given) and nothing else.
//! A run-time error must match, and any `output` is what was printed before it.
//! Every program that runs also runs through the unoptimised and the optimised
//! IR, which must print the same and fail the same way (code and location).
//! Run one file: `cargo test -p withloop-tests --test lang -- det`.

use std::path::{Path, PathBuf};

use compiler_core::diagnostics::Severity;
use compiler_core::{ir, opt};
use libtest_mimic::{Arguments, Failed, Trial};
use withloop_cli::{Engine, Invocation, Located, Report, check, run};

fn main() {
    let args = Arguments::from_args();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    collect(root, &mut files);
    files.sort();
    let trials = files
        .into_iter()
        .filter_map(|path| {
            let text = std::fs::read_to_string(&path).ok()?;
            if !text.lines().any(|l| l.trim() == "// ==") {
                return None; // a support file (e.g. included by tests)
            }
            // Paths relative to tests/ (the working directory of `cargo test`), so
            // diagnostics and listings do not depend on where the checkout is.
            let relative = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
            let name = relative.to_string_lossy().trim_end_matches(".sac").trim_end_matches(".l0").to_string();
            let path = if std::env::current_dir().is_ok_and(|d| d == root) { relative } else { path };
            // On a deep stack, as `withloop` compiles and runs: expressions
            // may be 1024 levels deep, more than a test thread's stack holds
            // in a debug build.
            Some(Trial::test(name, move || compiler_core::interp::with_large_stack(move || run_test(&path, &text))))
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "target") {
                collect(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "sac" || x == "l0") {
            out.push(p);
        }
    }
}

#[derive(Debug, Default)]
struct Expect {
    entry: Option<String>,
    args: Vec<String>,
    flags: Vec<String>,
    output: Option<String>,
    shapes: Vec<String>,
    maxspec: Option<usize>,
    instances: Option<String>,
    structure: Option<Vec<String>>,
    remarks: Vec<RemarkSpec>,
    counters: Vec<(String, String, u64)>,
    errors: Vec<ErrSpec>,
    runtime_error: Option<ErrSpec>,
    warnings: Option<Vec<ErrSpec>>,
}

/// `remark: PASS KIND [@ LINE:COL] ["text"]`.
#[derive(Debug, Clone)]
struct RemarkSpec {
    pass: String,
    kind: String,
    at: Option<(usize, usize)>,
    contains: Option<String>,
}

#[derive(Debug, Clone)]
struct ErrSpec {
    code: String,
    at: Option<(usize, usize)>,
    contains: Option<String>,
}

impl std::fmt::Display for ErrSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.code)?;
        if let Some((l, c)) = self.at {
            write!(f, " @ {l}:{c}")?;
        }
        if let Some(t) = &self.contains {
            write!(f, " \"{t}\"")?;
        }
        Ok(())
    }
}

fn parse_err_spec(text: &str) -> Result<ErrSpec, String> {
    let text = text.trim();
    let (head, contains) = match text.find('"') {
        Some(q) => {
            let rest = &text[q + 1..];
            let end = rest.rfind('"').ok_or("unterminated message text")?;
            (&text[..q], Some(rest[..end].to_string()))
        }
        None => (text, None),
    };
    let mut parts = head.split('@');
    let code = parts.next().unwrap_or("").trim().to_string();
    if code.is_empty() {
        return Err("missing error code".into());
    }
    let at = match parts.next() {
        Some(pos) => {
            let (l, c) = pos.trim().split_once(':').ok_or("position must be LINE:COL")?;
            Some((l.trim().parse().map_err(|_| "bad line")?, c.trim().parse().map_err(|_| "bad column")?))
        }
        None => None,
    };
    Ok(ErrSpec { code, at, contains })
}

fn parse_remark_spec(text: &str) -> Result<RemarkSpec, String> {
    let (head, contains) = match text.find('"') {
        Some(q) => {
            let rest = &text[q + 1..];
            let end = rest.rfind('"').ok_or("unterminated message text")?;
            (&text[..q], Some(rest[..end].to_string()))
        }
        None => (text, None),
    };
    let (words, at) = match head.split_once('@') {
        Some((w, pos)) => {
            let (l, c) = pos.trim().split_once(':').ok_or("position must be LINE:COL")?;
            (w, Some((l.trim().parse().map_err(|_| "bad line")?, c.trim().parse().map_err(|_| "bad column")?)))
        }
        None => (head, None),
    };
    let mut it = words.split_whitespace();
    let pass = it.next().ok_or("remark: PASS KIND")?.to_string();
    let kind = it.next().ok_or("remark: PASS KIND")?.to_string();
    Ok(RemarkSpec { pass, kind, at, contains })
}

fn parse_expect(text: &str) -> Result<Expect, String> {
    let mut e = Expect::default();
    let mut in_block = false;
    let mut output: Option<Vec<String>> = None;
    let mut instances: Option<Vec<String>> = None;
    let mut structure: Option<Vec<String>> = None;
    // Which block `|` lines belong to.
    let mut block = "";
    for line in text.lines() {
        let t = line.trim_start();
        let Some(body) = t.strip_prefix("//") else { break };
        if !in_block {
            in_block = body.trim() == "==";
            continue;
        }
        if let Some(rest) = body.strip_prefix(" |").or_else(|| body.strip_prefix("|")) {
            let target = match block {
                "instances" => instances.as_mut(),
                "structure" => structure.as_mut(),
                _ => output.as_mut(),
            };
            let out = target.ok_or("`|` line outside `output:`, `instances:` or `structure:`")?;
            out.push(rest.strip_prefix(' ').unwrap_or(rest).to_string());
            continue;
        }
        let body = body.trim();
        if body.is_empty() {
            continue;
        }
        let (key, value) = body.split_once(':').ok_or_else(|| format!("cannot read `{body}`"))?;
        let value = value.trim();
        match key.trim() {
            "entry" => e.entry = Some(value.to_string()),
            "args" => e.args = value.split(';').map(|a| a.trim().to_string()).filter(|a| !a.is_empty()).collect(),
            "flags" => e.flags = value.split_whitespace().map(str::to_string).collect(),
            "output" => {
                block = "output";
                if !value.is_empty() {
                    output = Some(vec![value.to_string()]);
                } else {
                    output = Some(Vec::new());
                }
            }
            "instances" => {
                block = "instances";
                instances = Some(Vec::new());
            }
            "structure" => {
                block = "structure";
                structure = Some(Vec::new());
            }
            "remark" => e.remarks.push(parse_remark_spec(value)?),
            "counter" => {
                let parts: Vec<&str> = value.split_whitespace().collect();
                match parts.as_slice() {
                    [name, op @ ("=" | ">="), n] => {
                        e.counters.push((name.to_string(), op.to_string(), n.parse().map_err(|_| "counter value")?))
                    }
                    _ => return Err("counter: NAME = N or NAME >= N".into()),
                }
            }
            "shapes" => e.shapes = value.split(';').map(|a| a.trim().to_string()).filter(|a| !a.is_empty()).collect(),
            "maxspec" => e.maxspec = Some(value.parse().map_err(|_| "maxspec must be a number")?),
            "error" => e.errors.push(parse_err_spec(value)?),
            "runtime-error" => e.runtime_error = Some(parse_err_spec(value)?),
            "warning" => e.warnings.get_or_insert_with(Vec::new).push(parse_err_spec(value)?),
            other => return Err(format!("unknown key `{other}`")),
        }
    }
    if !in_block {
        return Err("no `// ==` block".into());
    }
    e.output = output.map(|lines| lines.iter().map(|l| format!("{l}\n")).collect());
    e.instances = instances.map(|lines| lines.iter().map(|l| format!("{l}\n")).collect());
    e.structure = structure;
    Ok(e)
}

fn matches(spec: &ErrSpec, d: &Located) -> bool {
    d.diagnostic.code.id == spec.code
        && spec.at.is_none_or(|(l, c)| d.line == l && d.column == c)
        && spec.contains.as_ref().is_none_or(|t| d.diagnostic.message.contains(t.as_str()))
}

fn describe(d: &Located) -> String {
    format!("{} @ {}:{} \"{}\"", d.diagnostic.code.id, d.line, d.column, d.diagnostic.message)
}

/// Checks that `found` and `expected` match one to one.
fn compare_sets(what: &str, expected: &[ErrSpec], found: &[&Located], report: &Report) -> Result<(), Failed> {
    let mut unmatched: Vec<&Located> = found.to_vec();
    let mut missing = Vec::new();
    for spec in expected {
        match unmatched.iter().position(|d| matches(spec, d)) {
            Some(i) => {
                unmatched.remove(i);
            }
            None => missing.push(spec.to_string()),
        }
    }
    if missing.is_empty() && unmatched.is_empty() {
        return Ok(());
    }
    let mut msg = format!("{what} differ\n");
    for m in missing {
        msg.push_str(&format!("  expected but not reported: {m}\n"));
    }
    for u in unmatched {
        msg.push_str(&format!("  reported but not expected: {}\n", describe(u)));
    }
    msg.push_str(&format!("--- stderr ---\n{}", report.stderr));
    Err(msg.into())
}

/// The register tile tests compile with (`codegen::register_tile` of an
/// AVX-512 target).
const TEST_TILE: [i64; 2] = [4, 32];

/// The register tile of AVX2 targets: tile tests also run natively with it.
const AVX2_TILE: [i64; 2] = [4, 8];

fn run_test(path: &Path, text: &str) -> Result<(), Failed> {
    let expect = parse_expect(text).map_err(|e| format!("{}: bad test header: {e}", path.display()))?;
    let mut inv = Invocation { file: path.to_path_buf(), ..Default::default() };
    // Native code is checked with the register tile of AVX-512 targets on
    // any host (tiles are correct anywhere, only their speed needs the
    // registers); `--no-register-tile` checks `interchange`'s code instead,
    // `--register-tile` checks the structure with the tile.
    let mut native_tile = Some(TEST_TILE);
    let mut tile_structure = false;
    // `--matrix-products`: matrix products run as the runtime's product
    // (`gemm`), in the structure checks and natively, as for AVX2 targets;
    // `--dynamic-matrix-products`: those of unknown extents only, as for
    // AVX-512 targets.
    let mut matrix_products = opt::MatrixProducts::None;
    let mut entry_only = false;
    // `--disable PASS`: the optimised and native runs, and the structure,
    // remark and counter checks, go without it.
    let mut disabled = std::collections::BTreeSet::new();
    let mut flags = expect.flags.iter();
    while let Some(f) = flags.next() {
        if f == "--noprelude" || f == "-noprelude" {
            inv.frontend.no_prelude = true;
        } else if f == "--register-tile" {
            tile_structure = true;
        } else if f == "--matrix-products" {
            matrix_products = opt::MatrixProducts::All;
        } else if f == "--dynamic-matrix-products" {
            matrix_products = opt::MatrixProducts::Dynamic;
        } else if f == "--entry-only" {
            // Only the entry exported, as the compile service and
            // `withloop compile --entry` export it: what it does not reach is
            // left out, and inlining sees the callers it would there.
            entry_only = true;
        } else if f == "--no-register-tile" {
            native_tile = None;
        } else if f == "--disable" {
            disabled.insert(flags.next().cloned().unwrap_or_default());
        } else if let Some(d) = f.strip_prefix("-D") {
            inv.frontend.defines.push(if d.is_empty() {
                flags.next().cloned().unwrap_or_default()
            } else {
                d.to_string()
            });
        } else if let Some(d) = f.strip_prefix("-I") {
            let dir = if d.is_empty() { flags.next().cloned().unwrap_or_default() } else { d.to_string() };
            let base = path.parent().unwrap_or(Path::new("."));
            inv.frontend.include_dirs.push(base.join(dir).to_string_lossy().into_owned());
        } else {
            return Err(format!("unknown flag `{f}`").into());
        }
    }
    inv.entry = expect.entry.clone();
    if entry_only {
        inv.frontend.entries = vec![expect.entry.clone().unwrap_or_else(|| "main".into())];
    }
    inv.args = expect.args.clone();
    inv.frontend.shape_hints = expect.shapes.clone();
    inv.frontend.max_specialisations = expect.maxspec;

    if let Some(want) = &expect.instances {
        let mut listing = inv.clone();
        listing.list_instances = true;
        let report = check(&listing);
        let got = String::from_utf8_lossy(&report.stdout).to_string();
        if *want != got {
            return Err(format!("instances differ\n{}--- stderr ---\n{}", diff(want, &got), report.stderr).into());
        }
    }

    if !expect.errors.is_empty() {
        let report = check(&inv);
        let errors: Vec<&Located> =
            report.diagnostics.iter().filter(|d| d.diagnostic.severity == Severity::Error).collect();
        compare_sets("compile errors", &expect.errors, &errors, &report)?;
        if report.exit_code != 1 {
            return Err(format!("exit code {} instead of 1", report.exit_code).into());
        }
        return check_warnings(&expect, &report);
    }

    let report = run(&inv);
    let stdout = String::from_utf8_lossy(&report.stdout).to_string();
    ir_text_round_trips(&inv)?;
    check_optimisation(&inv, &expect, tile_structure.then_some(TEST_TILE), matrix_products, &disabled)?;
    // The same program through the IR must behave identically.
    let mut through_ir = inv.clone();
    through_ir.engine = Engine::Ir;
    same_behaviour("the unoptimised IR", &report, &run(&through_ir))?;
    let mut optimised = inv.clone();
    optimised.engine = Engine::Optimised(opt::PipelineOptions {
        verify: true,
        matrix_products,
        disabled: disabled.clone(),
        ..Default::default()
    });
    same_behaviour("the optimised IR", &report, &run(&optimised))?;
    // And natively, compiled by LLVM.
    let mut native = inv.clone();
    // Two threads and no size threshold: every with-loop that may run in
    // parallel does, so the parallel paths are checked on every test.
    let parallel = withloop_codegen::Options { threads: Some(2), parallel_min: Some(1), ..Default::default() };
    let tiled = opt::PipelineOptions {
        register_tile: native_tile,
        matrix_products,
        disabled: disabled.clone(),
        ..Default::default()
    };
    native.engine = Engine::Native(tiled.clone(), parallel);
    let native_report = run(&native);
    if same_behaviour("native code", &report, &native_report).is_err() {
        // Floating-point folds may be reassociated (vectorised, and combined
        // from threads' partial results), and vectorised `exp`/`log` round
        // within 4 ulp: one thread with exact folds and scalar math must match
        // exactly, the default code up to rounding.
        let sequential =
            withloop_codegen::Options { threads: Some(1), exact_folds: true, vector_math: false, ..Default::default() };
        native.engine = Engine::Native(tiled, sequential);
        same_behaviour("native code on one thread", &report, &run(&native))?;
        same_up_to_rounding("native code (folds reassociated, vector math, two threads)", &report, &native_report)?;
    }
    if tile_structure {
        // Narrower tiles take other edge widths: one thread, exact folds (no
        // contraction), so the results must be the same.
        let avx2 = opt::PipelineOptions { register_tile: Some(AVX2_TILE), ..Default::default() };
        let sequential =
            withloop_codegen::Options { threads: Some(1), exact_folds: true, vector_math: false, ..Default::default() };
        native.engine = Engine::Native(avx2, sequential);
        same_behaviour("native code with the AVX2 tile", &report, &run(&native))?;
    }
    // The code generator alone: the IR without any optimisation (what
    // `--passes none` gives), on one thread with folds in order and scalar
    // math, behaves exactly as the interpreter does. A difference here is
    // the code generator's; one only in the optimised runs, the optimiser's.
    native.engine = Engine::Native(
        opt::PipelineOptions::only(&[]),
        withloop_codegen::Options { threads: Some(1), exact_folds: true, vector_math: false, ..Default::default() },
    );
    same_behaviour("native code of the unoptimised IR", &report, &run(&native))?;
    if report.untyped_fallbacks > 0 {
        return Err(format!(
            "type inference left {} executed call(s) without a target (a bug in inference)\n--- stderr ---\n{}",
            report.untyped_fallbacks, report.stderr
        )
        .into());
    }
    match &expect.runtime_error {
        Some(spec) => {
            if report.exit_code != 2 {
                return Err(format!(
                    "expected a run-time error {spec}, got exit code {}\n--- stdout ---\n{stdout}--- stderr ---\n{}",
                    report.exit_code, report.stderr
                )
                .into());
            }
            let errors: Vec<&Located> =
                report.diagnostics.iter().filter(|d| d.diagnostic.severity == Severity::Error).collect();
            compare_sets("run-time errors", std::slice::from_ref(spec), &errors, &report)?;
        }
        None => {
            if report.exit_code != 0 {
                return Err(format!(
                    "exit code {}\n--- stdout ---\n{stdout}--- stderr ---\n{}",
                    report.exit_code, report.stderr
                )
                .into());
            }
        }
    }
    if let Some(want) = &expect.output {
        if *want != stdout {
            return Err(format!("output differs\n{}", diff(want, &stdout)).into());
        }
    } else if expect.runtime_error.is_none() && expect.instances.is_none() {
        return Err("the test states no `output:` (or errors, or instances) to check".into());
    }
    check_warnings(&expect, &report)
}

/// Structure, remark and counter expectations against the optimised program.
fn check_optimisation(
    inv: &Invocation,
    expect: &Expect,
    register_tile: Option<[i64; 2]>,
    matrix_products: opt::MatrixProducts,
    disabled: &std::collections::BTreeSet<String>,
) -> Result<(), Failed> {
    if expect.structure.is_none() && expect.remarks.is_empty() && expect.counters.is_empty() {
        return Ok(());
    }
    // With the passes the flags switch off, as the optimised run has them.
    let options = opt::PipelineOptions {
        verify: true,
        no_timing: true,
        register_tile,
        matrix_products,
        disabled: disabled.clone(),
        ..Default::default()
    };
    let (fe, module, outcome) = withloop_cli::optimised(inv, &options).map_err(|r| r.stderr)?;
    let report = opt::report::build("", &outcome, &fe.program, &fe.typed, &fe.sources, true, false);
    if let Some(want) = &expect.structure {
        let got = ir::print::structure_text(&module);
        let mut lines = got.lines();
        for w in want {
            if !lines.any(|l| l == w) {
                return Err(format!("structure line not found (in order): {w}\n--- structure ---\n{got}").into());
            }
        }
    }
    for r in &expect.remarks {
        let found = report.remarks.iter().any(|x| {
            x.pass == r.pass
                && x.kind == r.kind
                && r.at.is_none_or(|(l, c)| x.at.as_ref().is_some_and(|a| a.line == l && a.column == c))
                && r.contains.as_ref().is_none_or(|t| x.message.contains(t.as_str()))
        });
        if !found {
            return Err(format!("remark not found: {r:?}\n--- report ---\n{}", report.to_text()).into());
        }
    }
    for (name, op, n) in &expect.counters {
        let got = report.totals.get(name.as_str()).copied().unwrap_or(0);
        let ok = if op == "=" { got == *n } else { got >= *n };
        if !ok {
            return Err(
                format!("counter {name} is {got}, expected {op} {n}\n--- report ---\n{}", report.to_text()).into()
            );
        }
    }
    Ok(())
}

/// The lowered IR verifies, and its text form reads back to the same text.
fn ir_text_round_trips(inv: &Invocation) -> Result<(), Failed> {
    let Ok((fe, module)) = withloop_cli::lowered(inv) else { return Ok(()) };
    ir::verify::verify(&module).map_err(|e| format!("the lowered IR is malformed:\n  {}", e.join("\n  ")))?;
    let text = ir::print::module_text(&module);
    let span = compiler_core::span::Span::new(fe.main_file, 0, 0);
    let parsed = ir::parse::parse_module(&text, span).map_err(|e| format!("the IR text does not read back: {e}"))?;
    let again = ir::print::module_text(&parsed);
    if again != text {
        return Err(format!("the IR text does not round-trip\n{}", diff(&text, &again)).into());
    }
    ir::verify::verify(&parsed).map_err(|e| format!("the IR read back is malformed:\n  {}", e.join("\n  ")))?;
    Ok(())
}

/// Compares a run through another engine with the reference run: output, exit
/// code, and the run-time error's code and location.
fn same_behaviour(what: &str, reference: &Report, other: &Report) -> Result<(), Failed> {
    let error_of = |r: &Report| {
        r.diagnostics
            .iter()
            .filter(|d| d.diagnostic.severity == Severity::Error)
            .map(|d| format!("{} @ {}:{}", d.diagnostic.code.id, d.line, d.column))
            .next_back()
    };
    let (want, got) = (String::from_utf8_lossy(&reference.stdout), String::from_utf8_lossy(&other.stdout));
    if want != got || reference.exit_code != other.exit_code || error_of(reference) != error_of(other) {
        return Err(format!(
            "{what} behaves differently from the reference interpreter\n{}exit code {} vs {}\nerror {:?} vs {:?}\n--- stderr ---\n{}",
            diff(&want, &got),
            reference.exit_code,
            other.exit_code,
            error_of(reference),
            error_of(other),
            other.stderr
        )
        .into());
    }
    Ok(())
}

/// Like [`same_behaviour`], but numbers in the output may differ by a relative
/// 1e-9 (a reassociated floating-point fold, libmvec's rounding).
fn same_up_to_rounding(what: &str, reference: &Report, other: &Report) -> Result<(), Failed> {
    fn tokens(s: &str) -> Vec<String> {
        let mut out = Vec::new();
        let cs: Vec<char> = s.chars().collect();
        let mut i = 0;
        while i < cs.len() {
            let starts_number =
                cs[i].is_ascii_digit() || (cs[i] == '-' && cs.get(i + 1).is_some_and(|c| c.is_ascii_digit()));
            let mut j = i + 1;
            if starts_number {
                while j < cs.len() && (cs[j].is_ascii_digit() || ".eE+-".contains(cs[j])) {
                    j += 1;
                }
            }
            out.push(cs[i..j].iter().collect());
            i = j;
        }
        out
    }
    let (want, got) = (String::from_utf8_lossy(&reference.stdout), String::from_utf8_lossy(&other.stdout));
    let (a, b) = (tokens(&want), tokens(&got));
    let close = a.len() == b.len()
        && a.iter().zip(&b).all(|(x, y)| {
            x == y
                || matches!((x.parse::<f64>(), y.parse::<f64>()), (Ok(p), Ok(q))
                    if (p - q).abs() <= 1e-9 * p.abs().max(q.abs()))
        });
    if !close || reference.exit_code != other.exit_code {
        return same_behaviour(what, reference, other);
    }
    Ok(())
}

fn check_warnings(expect: &Expect, report: &Report) -> Result<(), Failed> {
    if let Some(w) = &expect.warnings {
        let found: Vec<&Located> =
            report.diagnostics.iter().filter(|d| d.diagnostic.severity == Severity::Warning).collect();
        compare_sets("warnings", w, &found, report)?;
    }
    Ok(())
}

fn diff(want: &str, got: &str) -> String {
    let w: Vec<&str> = want.lines().collect();
    let g: Vec<&str> = got.lines().collect();
    let mut out = String::new();
    for i in 0..w.len().max(g.len()) {
        match (w.get(i), g.get(i)) {
            (Some(a), Some(b)) if a == b => out.push_str(&format!("   {a}\n")),
            (a, b) => {
                if let Some(a) = a {
                    out.push_str(&format!(" - {a:?}\n"));
                }
                if let Some(b) = b {
                    out.push_str(&format!(" + {b:?}\n"));
                }
            }
        }
    }
    if want.ends_with('\n') != got.ends_with('\n') {
        out.push_str(" (trailing newline differs)\n");
    }
    out
}

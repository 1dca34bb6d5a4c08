//! The optimising middle end: named passes over the IR, run as one pipeline.
//!
//! The pipeline ([`PIPELINE`]) is a list of stages; each stage is a list of
//! passes run in order, round after round, until a round changes nothing (or the
//! stage's round cap is hit, which is reported). The array-level stage folds,
//! fuses and simplifies with-loops; the lowering stage then prepares code
//! generation (offsets instead of index vectors, bounds checks, memory reuse).
//!
//! Every pass is a function `fn(&mut Module, &mut PassCx)` documented in its own
//! module, with a before/after example and its limits. A pass counts what it did
//! ([`PassCx::count`]) and explains what it did or did not do in remarks located
//! in the source ([`PassCx::remark`]). Passes can be switched off by name
//! ([`PipelineOptions::disabled`]) to bisect a problem; the verifier runs after
//! every pass when [`PipelineOptions::verify`] is set (tests and debug builds),
//! and a pass that breaks the IR is reported as a compiler bug naming the pass.
//!
//! All passes preserve the program's results and output exactly, with two
//! documented exceptions: a fold whose function is not exactly associative (say
//! `+` on doubles) may combine its elements in another order when its index set
//! is split (SaC leaves fold order unspecified), and computations whose results
//! are never used may be dropped together with the run-time errors they would have
//! raised (SaC does not evaluate dead code). Not the check of a producer's shape:
//! one whose shape optimisation read in place of its elements leaves it behind
//! ([`dce`]).

pub mod index;
pub mod report;
pub mod util;

pub mod arrayelim;
pub mod bce;
pub mod cse;
pub mod dce;
pub mod elementwise;
pub mod filterfusion;
pub mod fusion;
pub mod gemm;
pub mod inline;
pub mod interchange;
pub mod ive;
pub mod licm;
pub mod merge;
pub mod retire;
pub mod reuse;
pub mod simplify;
pub mod snapshot;
pub mod tile;
pub mod timetile;
pub mod unroll;
pub mod unswitch;
pub mod version;
pub mod wlf;
pub mod wls;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::ir::{self, Function, Module};
use crate::span::{SourceMap, Span};
use crate::{HashMap, HashSet};

/// A named transformation of the whole module.
#[derive(Clone, Copy, Debug)]
pub struct Pass {
    pub name: &'static str,
    /// One line: what the pass does.
    pub description: &'static str,
    pub run: fn(&mut Module, &mut PassCx),
}

/// Passes run round after round until nothing changes.
#[derive(Clone, Copy, Debug)]
pub struct Stage {
    pub name: &'static str,
    pub passes: &'static [Pass],
    pub max_rounds: usize,
}

/// The optimisation pipeline, in order.
pub const PIPELINE: &[Stage] = &[
    Stage {
        name: "array",
        passes: &[
            inline::PASS,
            retire::PASS,
            merge::PASS,
            simplify::PASS,
            cse::PASS,
            version::PASS,
            dce::PASS,
            unroll::PASS,
            arrayelim::PASS,
            elementwise::PASS,
            fusion::PASS,
            cse::PASS,
            wlf::PASS,
            filterfusion::PASS,
            wls::PASS,
            bce::PASS,
            licm::PASS,
            unswitch::PASS,
        ],
        max_rounds: 16,
    },
    Stage {
        name: "lowering",
        passes: &[
            snapshot::PASS,
            bce::PASS,
            gemm::PASS,
            tile::PASS,
            interchange::PASS,
            ive::PASS,
            arrayelim::PASS,
            simplify::PASS,
            cse::PASS,
            licm::PASS,
            dce::PASS,
            reuse::PASS,
            timetile::PASS,
        ],
        max_rounds: 8,
    },
];

/// Every pass name, in pipeline order (each once).
pub fn pass_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = Vec::new();
    for stage in PIPELINE {
        for p in stage.passes {
            if !names.contains(&p.name) {
                names.push(p.name);
            }
        }
    }
    names
}

/// The description of a pass.
pub fn describe(name: &str) -> Option<&'static str> {
    PIPELINE.iter().flat_map(|s| s.passes).find(|p| p.name == name).map(|p| p.description)
}

#[derive(Clone, Debug, Default)]
pub struct PipelineOptions {
    /// Passes not to run.
    pub disabled: BTreeSet<String>,
    /// Run the verifier after every pass.
    pub verify: bool,
    /// Record the IR text after every run of this pass.
    pub dump_after: Option<String>,
    /// Leave out run times (for reproducible reports).
    pub no_timing: bool,
    /// The register tile (rows, columns) of `tile`, when the target has
    /// one worth using (the code generator says: `register_tile`).
    pub register_tile: Option<[i64; 2]>,
    /// Which matrix products run as the runtime's blocked product (`gemm`)
    /// rather than in register tiles (the code generator says:
    /// `matrix_products`).
    pub matrix_products: MatrixProducts,
    /// Threads a function-local pass may spread the functions over
    /// ([`PassCx::each_function`]), where they are large enough: up to this
    /// many, one per core at most ([`MAX_PASS_THREADS`]); `None`, the calling
    /// thread only. The outcome is the same with any number. The CLI, one
    /// compile per process, asks for one per core; the compile service runs
    /// several compiles at once, each on its own thread: a pass that waited
    /// for a helper thread while the cores ran other compiles would wait for
    /// the scheduler (the differential tests' four threads, one program in
    /// 32 on two threads each, took 1.4x as long).
    pub threads: Option<usize>,
}

/// The matrix products `gemm` hands to the runtime's blocked product.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MatrixProducts {
    /// None: every product is compiled from its with-loop.
    #[default]
    None,
    /// Those whose extents are known only at run time (generic code): a
    /// product of known shape keeps its register tiles, where they are the
    /// faster, and the generic instance compiles quicker without them.
    Dynamic,
    /// All, where the runtime's product is the faster.
    All,
}

impl PipelineOptions {
    /// Options with only the named passes enabled.
    pub fn only(names: &[&str]) -> PipelineOptions {
        let disabled = pass_names().into_iter().filter(|n| !names.contains(n)).map(str::to_string).collect();
        PipelineOptions { disabled, ..Default::default() }
    }

    pub fn enabled(&self, pass: &str) -> bool {
        !self.disabled.contains(pass)
    }
}

/// What a remark says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RemarkKind {
    /// A transformation was made.
    Applied,
    /// A transformation was considered and not made; the message says why.
    Missed,
    /// A fact the compiler established or could not establish.
    Analysis,
}

impl RemarkKind {
    pub fn name(self) -> &'static str {
        match self {
            RemarkKind::Applied => "applied",
            RemarkKind::Missed => "missed",
            RemarkKind::Analysis => "analysis",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Remark {
    pub pass: &'static str,
    pub kind: RemarkKind,
    /// The function (link name) the remark is about.
    pub function: String,
    pub message: String,
    pub span: Option<Span>,
}

/// What a pass gets: the sources (for locations), and where it reports.
#[derive(Debug)]
pub struct PassCx<'a> {
    pub sources: &'a SourceMap,
    pass: &'static str,
    changed: bool,
    counters: BTreeMap<&'static str, u64>,
    remarks: Vec<Remark>,
    /// The pipeline's options: which passes run (a pass that only prepares
    /// another one asks), the register tile.
    pub options: &'a PipelineOptions,
    /// Functions (link names) that no pass changed in the stage's last round:
    /// a function-local pass has nothing left to do there ([`PassCx::each_function`]).
    stable: &'a HashSet<String>,
    /// Functions this pass changed, as far as it said which.
    touched: HashSet<String>,
    /// The pass said which functions it changed (else it may have changed any).
    attributed: bool,
    /// Functions this pass looked at; `None`: every function (a pass that
    /// works on the whole module and did not say).
    visited: Option<HashSet<String>>,
    /// The pass spread functions over threads ([`PassCx::each_function`]).
    spread: bool,
}

impl<'a> PassCx<'a> {
    /// A fresh context for one run of pass `pass`.
    fn new(
        pass: &'static str,
        sources: &'a SourceMap,
        options: &'a PipelineOptions,
        stable: &'a HashSet<String>,
    ) -> PassCx<'a> {
        PassCx {
            sources,
            pass,
            changed: false,
            counters: BTreeMap::new(),
            remarks: Vec::new(),
            options,
            stable,
            touched: HashSet::default(),
            attributed: false,
            visited: None,
            spread: false,
        }
    }

    /// Runs a function-local pass's `work` on every function that changed
    /// since the pass last looked at it (in the stage's first round, on every
    /// function). For passes whose effect on a function depends only on that
    /// function: one that no pass changed in a whole round would come out of
    /// the next round as it went in, so it is skipped, and the stage's later
    /// rounds cost what the functions still changing cost. What `work` counts
    /// or marks as changed is recorded against the function.
    ///
    /// The functions are spread over threads ([`PipelineOptions::threads`]):
    /// largest first, each to whichever thread is free, each with a context
    /// of its own, merged in module order, so that what the pass reports does
    /// not depend on the threads.
    pub fn each_function(&mut self, m: &mut Module, work: impl Fn(&mut Function, &mut PassCx) + Sync) {
        let todo: Vec<&mut Function> = m.functions.iter_mut().filter(|f| !self.stable.contains(&f.name)).collect();
        let threads = self.options.threads.unwrap_or(1).min(todo.len());
        // What the largest function leaves to the other threads: a pass over
        // one large function and a few small ones gains nothing from them.
        // Not measured where one thread will do: the compile service's case,
        // at every pass.
        let spread_worth_it = || {
            let sizes = todo.iter().map(|f| f.values.len());
            sizes.clone().sum::<usize>() - sizes.max().unwrap_or(0) >= PARALLEL_MIN_VALUES
        };
        let held = (threads >= 2 && spread_worth_it()).then(PassThreads::take).flatten();
        let Some(held) = held else {
            for f in todo {
                self.visit(f, &mut &work);
            }
            return;
        };
        let mut order: Vec<usize> = (0..todo.len()).collect();
        order.sort_by_key(|k| std::cmp::Reverse(todo[*k].values.len()));
        let slots: Vec<Mutex<Option<&mut Function>>> = todo.into_iter().map(|f| Mutex::new(Some(f))).collect();
        let runs: Vec<Mutex<Option<FunctionRun>>> = slots.iter().map(|_| Mutex::new(None)).collect();
        let next = AtomicUsize::new(0);
        let (pass, sources, options, stable) = (self.pass, self.sources, self.options, self.stable);
        let worker = || {
            while let Some(&k) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
                let Some(f) = slots[k].lock().unwrap_or_else(|e| e.into_inner()).take() else { continue };
                let mut cx = PassCx::new(pass, sources, options, stable);
                cx.visit(f, &mut &work);
                *runs[k].lock().unwrap_or_else(|e| e.into_inner()) = Some(cx.into_function_run());
            }
        };
        self.spread = true;
        // This thread works too, and returns when the helpers have. A pass
        // that panics on a helper panics here, with its own message.
        let pool = held.0;
        pool.in_place_scope(|scope| {
            for _ in 1..threads.min(pool.current_num_threads() + 1) {
                scope.spawn(|_| worker());
            }
            worker();
        });
        for run in runs {
            if let Some(run) = run.into_inner().unwrap_or_else(|e| e.into_inner()) {
                self.absorb(run);
            }
        }
    }

    /// What this context recorded of one function ([`PassCx::visit`] on a fresh one).
    fn into_function_run(self) -> FunctionRun {
        FunctionRun {
            changed: self.changed,
            counters: self.counters,
            remarks: self.remarks,
            touched: self.touched,
            visited: self.visited,
        }
    }

    /// Takes over what another context recorded of one function, as if this
    /// one had visited it.
    fn absorb(&mut self, run: FunctionRun) {
        self.changed |= run.changed;
        self.attributed = true;
        for (k, n) in run.counters {
            *self.counters.entry(k).or_default() += n;
        }
        self.remarks.extend(run.remarks);
        self.touched.extend(run.touched);
        self.visited.get_or_insert_with(HashSet::default).extend(run.visited.into_iter().flatten());
    }

    /// [`PassCx::each_function`] for passes that read other functions too
    /// (the effects of callees, what is still to be inlined): every function
    /// is visited, each round.
    pub fn every_function(&mut self, m: &mut Module, mut work: impl FnMut(&mut Function, &mut PassCx)) {
        for f in &mut m.functions {
            self.visit(f, &mut work);
        }
    }

    fn visit(&mut self, f: &mut Function, work: &mut dyn FnMut(&mut Function, &mut PassCx)) {
        let changed_before = std::mem::replace(&mut self.changed, false);
        self.attributed = true;
        work(f, self);
        if self.changed {
            self.touched.insert(f.name.clone());
        }
        self.changed |= changed_before;
        self.visited.get_or_insert_with(HashSet::default).insert(f.name.clone());
    }

    /// Records that a whole-module pass changed `function` (passes that go
    /// through [`PassCx::each_function`] need not say).
    pub fn changed_function(&mut self, function: &str) {
        self.changed = true;
        self.attributed = true;
        self.touched.insert(function.to_string());
    }

    /// Records that a whole-module pass removed functions (which changes
    /// none of the others).
    pub fn removed_functions(&mut self) {
        self.changed = true;
        self.attributed = true;
    }

    /// Counts `n` occurrences of `counter`; any count marks the module changed.
    pub fn count(&mut self, counter: &'static str, n: u64) {
        if n > 0 {
            *self.counters.entry(counter).or_default() += n;
            self.changed = true;
        }
    }

    /// Counts something the pass saw or left as it was (no change: a counter
    /// that `count`ed would keep the pipeline's rounds going).
    pub fn observe(&mut self, counter: &'static str, n: u64) {
        if n > 0 {
            *self.counters.entry(counter).or_default() += n;
        }
    }

    /// Marks the module changed without counting anything visible.
    pub fn changed(&mut self) {
        self.changed = true;
    }

    pub fn remark(&mut self, kind: RemarkKind, function: &str, span: Option<Span>, message: impl Into<String>) {
        // Library locations mean nothing to the user: remarks stay unlocated there.
        let span = span.filter(|s| !self.sources.is_library(*s));
        self.remarks.push(Remark {
            pass: self.pass,
            kind,
            function: function.to_string(),
            message: message.into(),
            span,
        });
    }
}

/// A function-local pass spreads the functions over at most this many threads.
pub const MAX_PASS_THREADS: usize = 4;

/// Values (all a function's arena holds, a measure of its size) that the
/// functions other than the largest must have for a function-local pass to
/// spread them over threads: waking a thread and taking its results back
/// takes tens of microseconds, a pass over a small function less.
const PARALLEL_MIN_VALUES: usize = 2_000;

/// The stack of the threads function-local passes run on, as the compile
/// service gives a compile's own thread (passes recurse into nested blocks;
/// reserved, not used, until they do).
const PASS_THREAD_STACK: usize = 256 << 20;

/// The threads that help a function-local pass's calling thread: one per
/// core but that one, at most [`MAX_PASS_THREADS`] in all, started once per
/// process and kept (threads started for each pass cost 150-300 us each
/// time on a Firecracker guest, more than many passes take: a determinant's
/// compile took 20 ms longer);
/// `None` on a one-core machine or where they cannot be started (an
/// address-space limit).
fn pass_threads() -> Option<&'static rayon::ThreadPool> {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()).min(MAX_PASS_THREADS);
        if cores < 2 {
            return None;
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(cores - 1)
            .stack_size(PASS_THREAD_STACK)
            .thread_name(|k| format!("withloop-pass-{k}"))
            .build()
            .ok()
    })
    .as_ref()
}

/// The pass threads ([`pass_threads`]), held by one function-local pass at a
/// time: another compile's pass runs on its own thread meanwhile rather than
/// queue behind this one's functions.
#[derive(Debug)]
struct PassThreads(&'static rayon::ThreadPool);

static PASS_THREADS_TAKEN: AtomicBool = AtomicBool::new(false);

impl PassThreads {
    /// The pass threads, if there are any and no other pass holds them.
    fn take() -> Option<PassThreads> {
        let pool = pass_threads()?;
        PASS_THREADS_TAKEN.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).ok()?;
        Some(PassThreads(pool))
    }
}

impl Drop for PassThreads {
    fn drop(&mut self) {
        PASS_THREADS_TAKEN.store(false, Ordering::Release);
    }
}

/// What a function-local pass recorded of one function on a helper thread.
struct FunctionRun {
    changed: bool,
    counters: BTreeMap<&'static str, u64>,
    remarks: Vec<Remark>,
    touched: HashSet<String>,
    visited: Option<HashSet<String>>,
}

/// What one pass did over the whole pipeline.
#[derive(Clone, Debug, Default)]
pub struct PassStats {
    pub name: &'static str,
    pub description: &'static str,
    pub enabled: bool,
    pub runs: u32,
    pub time: Duration,
    pub counters: BTreeMap<&'static str, u64>,
}

/// The outcome of a pipeline run.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub passes: Vec<PassStats>,
    /// Rounds each stage ran.
    pub rounds: Vec<(&'static str, usize)>,
    pub remarks: Vec<Remark>,
    /// IR text after each run of `dump_after`: (stage, round, text).
    pub dumps: Vec<(&'static str, usize, String)>,
    /// Runs of function-local passes that spread the functions over threads
    /// ([`PipelineOptions::threads`]; not in the report, which is the same
    /// on any number of threads).
    pub runs_spread: usize,
}

/// A pass left the IR malformed (a compiler bug).
#[derive(Clone, Debug)]
pub struct BrokenIr {
    pub pass: &'static str,
    pub problems: Vec<String>,
    /// The outcome up to the failure.
    pub outcome: Outcome,
}

/// Runs the pipeline over `module`.
pub fn optimise(module: &mut Module, sources: &SourceMap, options: &PipelineOptions) -> Result<Outcome, Box<BrokenIr>> {
    optimise_observed(module, sources, options, &mut |_| {})
}

/// What one run of a pass did.
struct PassRun {
    elapsed: Duration,
    changed: bool,
    counters: BTreeMap<&'static str, u64>,
    remarks: Vec<Remark>,
    /// The functions it changed; `None`: it did not say, so maybe any.
    changed_functions: Option<HashSet<String>>,
    /// The functions it looked at; `None`: every one.
    visited: Option<HashSet<String>>,
    /// It spread the functions over threads.
    spread: bool,
}

/// Runs `pass` once over `module`, skipping the `stable` functions where
/// the pass is function-local.
fn run_pass(
    pass: &Pass,
    module: &mut Module,
    sources: &SourceMap,
    options: &PipelineOptions,
    stable: &HashSet<String>,
) -> PassRun {
    let mut cx = PassCx::new(pass.name, sources, options, stable);
    let start = Instant::now();
    (pass.run)(module, &mut cx);
    PassRun {
        elapsed: start.elapsed(),
        changed: cx.changed,
        counters: cx.counters,
        remarks: cx.remarks,
        changed_functions: cx.attributed.then_some(cx.touched),
        visited: cx.visited,
        spread: cx.spread,
    }
}

/// [`optimise`], telling `on_pass` the name of every pass as it starts (for
/// progress reports; a pass runs once per round of its stage).
///
/// A stage's rounds after the first look only at what is still changing:
/// function-local passes skip the functions no pass changed in the last round
/// ([`PassCx::each_function`]), which gives the same result as running them
/// (what they do to a function depends on nothing else) at the cost of the
/// functions that still change.
pub fn optimise_observed(
    module: &mut Module,
    sources: &SourceMap,
    options: &PipelineOptions,
    on_pass: &mut dyn FnMut(&'static str),
) -> Result<Outcome, Box<BrokenIr>> {
    let mut stats: Vec<PassStats> = pass_names()
        .into_iter()
        .map(|name| PassStats {
            name,
            description: describe(name).unwrap_or(""),
            enabled: options.enabled(name),
            ..Default::default()
        })
        .collect();
    let mut outcome = Outcome::default();
    let mut seen_remarks: BTreeSet<Remark> = BTreeSet::new();
    for stage in PIPELINE {
        let mut rounds = 0;
        // Missed opportunities are reported as of the last round: earlier ones may
        // have been taken later, or may concern code that is gone.
        let mut missed: Vec<Remark> = Vec::new();
        // Functions no pass changed in the last round (none in the first).
        let mut stable: HashSet<String> = HashSet::default();
        loop {
            if rounds == stage.max_rounds {
                outcome.remarks.push(Remark {
                    pass: "pipeline",
                    kind: RemarkKind::Analysis,
                    function: String::new(),
                    message: format!(
                        "the {} stage still changed the program after {} rounds; stopped there",
                        stage.name, stage.max_rounds
                    ),
                    span: None,
                });
                break;
            }
            rounds += 1;
            let mut changed = false;
            // Functions some pass of this round changed; `None`: maybe any.
            let mut touched: Option<HashSet<String>> = Some(HashSet::default());
            let mut round_missed: Vec<Remark> = Vec::new();
            for pass in stage.passes {
                if !options.enabled(pass.name) {
                    continue;
                }
                on_pass(pass.name);
                let run = run_pass(pass, module, sources, options, &stable);
                let st = stats.iter_mut().find(|s| s.name == pass.name).expect("every pass has stats");
                st.runs += 1;
                outcome.runs_spread += usize::from(run.spread);
                if !options.no_timing {
                    st.time += run.elapsed;
                }
                for (k, v) in run.counters {
                    *st.counters.entry(k).or_default() += v;
                }
                let first_of_pass = round_missed.len();
                // A missed opportunity of the last round stands where the
                // pass did not look again (the function was stable).
                for r in &missed {
                    let not_looked_at = run.visited.as_ref().is_some_and(|v| !v.contains(&r.function));
                    if r.pass == pass.name && not_looked_at && !round_missed.contains(r) {
                        round_missed.push(r.clone());
                    }
                }
                for r in run.remarks {
                    if r.kind == RemarkKind::Missed {
                        if !round_missed.contains(&r) {
                            round_missed.push(r);
                        }
                    } else if seen_remarks.insert(r.clone()) {
                        outcome.remarks.push(r);
                    }
                }
                // In module order, as if the pass had looked at every function.
                if round_missed.len() > first_of_pass + 1 {
                    let position: HashMap<&str, usize> =
                        module.functions.iter().enumerate().map(|(k, f)| (f.name.as_str(), k)).collect();
                    round_missed[first_of_pass..]
                        .sort_by_key(|r| position.get(r.function.as_str()).copied().unwrap_or(usize::MAX));
                }
                if run.changed {
                    changed = true;
                    // What changed is looked at by the passes after this one, this round.
                    match run.changed_functions {
                        Some(names) => {
                            stable.retain(|name| !names.contains(name));
                            if let Some(t) = &mut touched {
                                t.extend(names);
                            }
                        }
                        None => {
                            stable.clear();
                            touched = None;
                        }
                    }
                }
                if options.dump_after.as_deref() == Some(pass.name) {
                    outcome.dumps.push((stage.name, rounds, ir::print::module_text(module)));
                }
                if options.verify
                    && let Err(problems) = ir::verify::verify(module)
                {
                    outcome.passes = stats;
                    return Err(Box::new(BrokenIr { pass: pass.name, problems, outcome }));
                }
            }
            missed = round_missed;
            if !changed {
                break;
            }
            stable = match touched {
                Some(t) => module.functions.iter().map(|f| &f.name).filter(|n| !t.contains(*n)).cloned().collect(),
                None => HashSet::default(),
            };
        }
        for r in missed {
            if seen_remarks.insert(r.clone()) {
                outcome.remarks.push(r);
            }
        }
        outcome.rounds.push((stage.name, rounds));
    }
    // A missed remark that a later round turned into an applied one (same pass,
    // function and place) is history, not news.
    let applied: BTreeSet<(&'static str, String, Option<Span>)> = outcome
        .remarks
        .iter()
        .filter(|r| r.kind == RemarkKind::Applied)
        .map(|r| (r.pass, r.function.clone(), r.span))
        .collect();
    outcome
        .remarks
        .retain(|r| r.kind != RemarkKind::Missed || !applied.contains(&(r.pass, r.function.clone(), r.span)));
    outcome.passes = stats;
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::parse::parse_module;
    use crate::span::FileKind;

    const TWO: &str = "fn f(%0#a: int) -> (int)  [instance f]
{
  %1: int = const 1
  %2: int = prim add(%0, %1)
  return %2
}

fn g(%0#a: int) -> (int)  [instance g]
{
  return %0
}

entry f = f
entry g = g
";

    /// A module from its text form, with the source map that locates it.
    pub(crate) fn parsed(name: &str, text: &str) -> (SourceMap, Module) {
        let mut sources = SourceMap::new();
        let file = sources.add(name, text, FileKind::User);
        let m = parse_module(text, Span::new(file, 0, 0)).expect("the test module parses");
        (sources, m)
    }

    /// A context for one run of a pass named `test` with `stable` functions.
    fn cx<'a>(sources: &'a SourceMap, options: &'a PipelineOptions, stable: &'a HashSet<String>) -> PassCx<'a> {
        PassCx::new("test", sources, options, stable)
    }

    #[test]
    fn function_local_passes_skip_stable_functions_and_record_what_they_change() {
        let (sources, mut m) = parsed("two.ir", TWO);
        let options = PipelineOptions::default();
        let stable: HashSet<String> = ["g".to_string()].into_iter().collect();
        let mut c = cx(&sources, &options, &stable);
        let seen = std::sync::Mutex::new(Vec::new());
        // Counts something (a change) in `f` only.
        c.each_function(&mut m, |f, cx| {
            seen.lock().unwrap().push(f.name.clone());
            cx.count("things", u64::from(f.name == "f"));
        });
        assert_eq!(*seen.lock().unwrap(), ["f"], "the stable function was looked at");
        assert!(c.changed && c.attributed);
        assert_eq!(c.touched.iter().collect::<Vec<_>>(), ["f"]);
        assert_eq!(c.visited.as_ref().map(|v| v.len()), Some(1));

        // Passes that read other functions look at every one; one that
        // changes nothing records no function as changed.
        let mut c = cx(&sources, &options, &stable);
        seen.lock().unwrap().clear();
        c.every_function(&mut m, |f, _| seen.lock().unwrap().push(f.name.clone()));
        assert_eq!(*seen.lock().unwrap(), ["f", "g"]);
        assert!(!c.changed && c.touched.is_empty());
    }

    #[test]
    fn observations_are_counted_without_changing_anything() {
        let sources = SourceMap::new();
        let options = PipelineOptions::default();
        let stable = HashSet::default();
        let mut c = cx(&sources, &options, &stable);
        c.observe("calls_kept_in_loops", 2);
        c.observe("calls_kept_in_loops", 0);
        assert_eq!(c.counters.get("calls_kept_in_loops"), Some(&2));
        assert!(!c.changed, "an observation would keep the rounds going");
        c.count("calls_inlined", 1);
        assert!(c.changed);
    }

    #[test]
    fn a_change_without_a_function_makes_every_function_look_changed() {
        let (sources, mut m) = parsed("two.ir", TWO);
        let options = PipelineOptions::default();
        let stable = HashSet::default();
        fn unattributed(_: &mut Module, cx: &mut PassCx) {
            cx.count("things", 1);
        }
        let pass = Pass { name: "test", description: "", run: unattributed };
        let run = run_pass(&pass, &mut m, &sources, &options, &stable);
        assert!(run.changed);
        assert_eq!(run.changed_functions, None, "a whole-module change names no function");
    }
}

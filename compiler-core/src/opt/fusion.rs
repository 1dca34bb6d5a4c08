//! # fusion: with-loop fusion
//!
//! Two with-loops in one block that run over the same generators and do not
//! depend on each other become one with-loop with the operators of both (seed
//! 004 ch. 7's horizontal fusion; seed 002's multi-operator with-loops). The
//! index set is traversed once, and selections both bodies make (after CSE)
//! are made once.
//!
//! ```text
//! %s = with { part [0] .. [n] index %i { … yield %a } } fold(prim add, %z)
//! %m = with { part [0] .. [n] index %j { … yield %b } } fold(prim max, %w)
//!   ⇒
//! %s, %m = with { part [0] .. [n] index %i { … yield %a, %b } } fold(prim add, %z), fold(prim max, %w)
//! ```
//!
//! This is what lets a producer with two consumers fold without duplicated
//! work: the consumers fuse first, then with-loop folding sees one consumer that
//! reads the producer once per element. Producer–consumer pairs (map∘map,
//! map∘fold) are with-loop folding's job.
//!
//! Conditions: the same number of parts with the same bounds, steps and widths
//! (equal values or equal constants) and the same `first_match`; the second does
//! not read the first; what lies between them cannot fail or print (the first
//! moves down to the second) and does not read the first's results (a
//! with-loop or branch printing or calling anywhere inside counts as
//! printing); neither has printing in its body or a fold function that may
//! print; neither is a filter whose length is taken (a loop over
//! its result, which `filterfusion` fuses into it instead).

use crate::{HashMap, HashSet};

use super::util;
use super::{Pass, PassCx, RemarkKind};
use crate::interp::value::Value;
use crate::ir::*;
use crate::span::Span;

pub const PASS: Pass = Pass {
    name: "fusion",
    description: "with-loops over the same generators that do not depend on each other become one",
    run,
};

fn run(m: &mut Module, cx: &mut PassCx) {
    let effectful = util::effectful_functions(m);
    cx.each_function(m, |f, cx| {
        let consts = util::constants(f);
        let mut fused = 0;
        let mut remarks: Vec<(Option<Span>, String)> = Vec::new();
        let name = f.name.clone();
        // Filters whose length is taken are read by a loop over them, which
        // `filterfusion` fuses into the filter; fused here first, they could not be.
        let mut read_filters = HashSet::default();
        f.body.walk(&mut |s| {
            if let Op::Prim { prim: crate::sema::hir::Prim::Shape, args, .. } = &s.op {
                read_filters.insert(args[0]);
            }
        });
        let cx_ = Ctx { consts: &consts, read_filters: &read_filters, effectful: &effectful };
        block(&mut f.body, &cx_, &mut fused, &mut remarks);
        for (span, msg) in remarks {
            cx.remark(RemarkKind::Applied, &name, span, msg);
        }
        cx.count("with_loops_fused", fused);
    });
}

struct Ctx<'a> {
    consts: &'a HashMap<ValueId, Value>,
    read_filters: &'a HashSet<ValueId>,
    /// Per function: whether calling it may print (`util::effectful_functions`).
    effectful: &'a [bool],
}

fn block(b: &mut Block, cx: &Ctx, fused: &mut u64, remarks: &mut Vec<(Option<Span>, String)>) {
    for s in &mut b.stmts {
        s.op.walk_blocks_mut(&mut |inner| block(inner, cx, fused, remarks));
    }
    'again: loop {
        // What each statement reads, and whether it prints or may fail, found
        // once per round and only for the statements a candidate pair needs
        // (recomputed for every pair, the checks were cubic in a block's
        // length: a 27-point stencil's hundreds of with-loops).
        let mut facts: Vec<Option<Facts>> = vec![None; b.stmts.len()];
        for j in 0..b.stmts.len() {
            if !matches!(b.stmts[j].op, Op::With(_)) {
                continue;
            }
            // The nearest earlier with-loop it can fuse with.
            for i in (0..j).rev() {
                if !matches!(b.stmts[i].op, Op::With(_)) {
                    continue;
                }
                let read_filter = |s: &Stmt| {
                    let Op::With(w) = &s.op else { return false };
                    w.ops
                        .iter()
                        .zip(&s.defs)
                        .any(|(o, d)| matches!(o, WithOp::Filter { .. }) && cx.read_filters.contains(d))
                };
                if !read_filter(&b.stmts[i]) && !read_filter(&b.stmts[j]) && fusible(&b.stmts, i, j, cx, &mut facts) {
                    let first = b.stmts.remove(i);
                    let second = &mut b.stmts[j - 1];
                    merge(first, second);
                    *fused += 1;
                    remarks.push((
                        second.blame_span(),
                        "fused with an earlier with-loop over the same index set".to_string(),
                    ));
                    continue 'again;
                }
            }
        }
        break;
    }
}

/// What [`fusible`] asks of a statement of the block.
#[derive(Clone)]
struct Facts {
    /// The values it reads from outside itself.
    uses: HashSet<ValueId>,
    /// It prints or calls a function (that may print): nothing moves past it.
    effect: bool,
    /// It may fail (see [`util::may_fail`]).
    may_fail: bool,
    /// A with-loop: some part's body prints or calls.
    prints: bool,
    /// A with-loop: some part's body may fail.
    body_may_fail: bool,
}

/// Whether the operation prints or calls a function (that may print),
/// itself or in its nested blocks, or folds with a function that may print.
fn effect_anywhere(s: &Stmt, effectful: &[bool]) -> bool {
    let prints = |g: FuncId| effectful.get(g.0 as usize).copied().unwrap_or(true);
    let here = |t: &Stmt| {
        matches!(&t.op, Op::Prim { prim, .. } if prim.has_effect())
            || matches!(t.op, Op::Call { .. })
            || matches!(&t.op, Op::With(w) if w.ops.iter().any(|o| matches!(o,
                WithOp::Fold { fun, .. } | WithOp::Scan { fun, .. } if fun.callee().is_some_and(prints))))
    };
    let mut effect = here(s);
    s.op.walk_blocks(&mut |b| b.walk(&mut |t| effect |= here(t)));
    effect
}

impl Facts {
    fn of(s: &Stmt, effectful: &[bool]) -> Facts {
        let effect = effect_anywhere(s, effectful);
        let (mut prints, mut body_may_fail) = (false, false);
        if let Op::With(w) = &s.op {
            // A fold function that prints would interleave its output too.
            prints = effect;
            for part in &w.parts {
                body_may_fail |= util::block_may_fail(&part.body);
            }
        }
        Facts { uses: util::free_uses(s), effect, may_fail: util::may_fail(&s.op), prints, body_may_fail }
    }
}

/// Statement `k`'s facts, found on first use.
fn facts_of<'f>(facts: &'f mut [Option<Facts>], stmts: &[Stmt], k: usize, effectful: &[bool]) -> &'f Facts {
    facts[k].get_or_insert_with(|| Facts::of(&stmts[k], effectful))
}

fn same_value(a: ValueId, b: ValueId, consts: &HashMap<ValueId, Value>) -> bool {
    a == b
        || match (consts.get(&a), consts.get(&b)) {
            (Some(x), Some(y)) => util::int_vec(x).is_some() && util::int_vec(x) == util::int_vec(y),
            _ => false,
        }
}

fn fusible(stmts: &[Stmt], i: usize, j: usize, cx: &Ctx, facts: &mut [Option<Facts>]) -> bool {
    let consts = cx.consts;
    let (Op::With(a), Op::With(b)) = (&stmts[i].op, &stmts[j].op) else { return false };
    if a.parts.len() != b.parts.len() || a.parts.is_empty() || a.first_match != b.first_match {
        return false;
    }
    let opt_same = |x: Option<ValueId>, y: Option<ValueId>| match (x, y) {
        (None, None) => true,
        (Some(x), Some(y)) => same_value(x, y, consts),
        _ => false,
    };
    for (p, q) in a.parts.iter().zip(&b.parts) {
        if !same_value(p.lower, q.lower, consts)
            || !same_value(p.upper, q.upper, consts)
            || !opt_same(p.step, q.step)
            || !opt_same(p.width, q.width)
        {
            return false;
        }
        if p.offset.is_some() || q.offset.is_some() {
            return false;
        }
    }
    // Printing in bodies would interleave differently.
    if facts_of(facts, stmts, i, cx.effectful).prints || facts_of(facts, stmts, j, cx.effectful).prints {
        return false;
    }
    // The second must not read the first.
    let first_defs = &stmts[i].defs;
    let reads_first = |f: &Facts| first_defs.iter().any(|d| f.uses.contains(d));
    if reads_first(facts_of(facts, stmts, j, cx.effectful)) {
        return false;
    }
    // The first moves down past what lies between.
    let a_may_fail = facts_of(facts, stmts, i, cx.effectful).body_may_fail;
    for k in i + 1..j {
        let s = facts_of(facts, stmts, k, cx.effectful);
        if reads_first(s) || s.effect || (a_may_fail && s.may_fail) {
            return false;
        }
    }
    true
}

/// Merges `first` into `second` (which runs where `second` was).
fn merge(first: Stmt, second: &mut Stmt) {
    let Op::With(a) = first.op else { return };
    let Op::With(b) = &mut second.op else { return };
    let a = *a;
    let mut parts = Vec::with_capacity(b.parts.len());
    for (p, mut q) in a.parts.into_iter().zip(std::mem::take(&mut b.parts)) {
        // One index for both bodies: the first's, or the second's if the first has none.
        let mut map = HashMap::default();
        let index = match (p.index, q.index) {
            (Some(x), Some(y)) => {
                map.insert(y, x);
                Some(x)
            }
            (x, y) => x.or(y),
        };
        let scalars = match (&p.scalars, &q.scalars) {
            (Some(x), Some(y)) => {
                for (s, t) in y.iter().zip(x) {
                    map.insert(*s, *t);
                }
                Some(x.clone())
            }
            (x, y) => x.clone().or_else(|| y.clone()),
        };
        util::substitute(&mut q.body, &map);
        let mut body = p.body;
        body.stmts.extend(q.body.stmts);
        body.yields.extend(q.body.yields);
        let mut result_spans = p.result_spans;
        result_spans.extend(q.result_spans);
        parts.push(Part { index, scalars, body, result_spans, ..q });
    }
    b.parts = parts;
    let mut ops = a.ops;
    ops.append(&mut b.ops);
    b.ops = ops;
    let mut cells = a.cells;
    cells.append(&mut b.cells);
    b.cells = cells;
    let mut reuse = a.reuse;
    reuse.append(&mut b.reuse);
    b.reuse = reuse;
    let mut defs = first.defs;
    defs.append(&mut second.defs);
    second.defs = defs;
}

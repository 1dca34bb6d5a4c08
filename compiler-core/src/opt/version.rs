//! # version: a fast path for shape-generic code on arrays that are not tiny
//!
//! Generic (AKD) code computes its index bounds from extents through `max`,
//! `abs`, `mod` and comparisons: the library's `rotate`, `take` and `drop`
//! handle negative counts and arrays smaller than the count. Whether
//! `take([m - 2, n - 2], x)` takes from the front, or `rotate(0, 1, a)` splits
//! its rows at 1, depends on the extents `m` and `n`, so with-loop folding
//! cannot order the bounds of the with-loops they build and seed 002's APL
//! relaxation stays eleven with-loops where the specialised code has one.
//!
//! This pass splits a function body or loop body whose with-loops depend on
//! such undecided computations of extents into a version for extents of at
//! least `K` and the original code for the rest:
//!
//! ```text
//! body {                                   body {
//!   %m = idx_sel(0, shape(%a))               %m = idx_sel(0, shape(%a))
//!   %r = max(%m, 1)                          %c = ge(%m, 3)
//!   %k = aplmod(1, %r)                 ⇒     %x = if %c {
//!   …with-loops bounded by %k, %m - 2…          …the same statements…   (simplify: %r = %m, %k = 1)
//!   yield %x                                  } else {
//! }                                             …a copy of them…
//!                                             }
//!                                             yield %x
//!                                           }
//! ```
//!
//! In the first branch, simplification decides those computations from the
//! condition ([`super::index::Known`]: `max(m, 1)` is `m`, `aplmod(1, m)` is
//! 1, `abs(m - 2)` is `m - 2`), and with-loop folding orders bounds such as
//! `1` and `m - 1`, so the generic relaxation folds as the specialised one.
//! `K` is the least threshold that decides every such computation (at least
//! 2, at most [`MAX_THRESHOLD`]). The pass waits until the function's calls
//! of inlined (library) functions are inlined: their code holds the computations.
//!
//! The same split serves bounds checks that hold for every index exactly when
//! extents of different arrays relate: in generic matrix multiplication,
//! `b[[k, j]]` with `k < shape(a)[1]` is in bounds everywhere iff
//! `shape(b)[0] >= shape(a)[1]`. The first branch runs where that relation
//! holds (bce proves the check from it, so the fold can be interchanged);
//! the original code, check included, runs elsewhere and fails where it
//! failed. Per check component, the relations are its least value `>= 0`
//! and its greatest `< extent`, over the ranges of the parts around it.
//!
//! Limits: thresholds only for blocks with at least two with-loops at their
//! top level whose bounds or shapes depend on an undecided computation;
//! relations only over extents defined at the block's top or around it (one
//! split per block: the branches are not function or loop bodies, and blocks
//! inside `if`s are not looked at); thresholds only decide extents with
//! coefficients of one sign (`m - 2`, not `m - n`); the code of the block is
//! duplicated.

use crate::{HashMap, HashSet};

use super::index::{self, Affine, Atom, Known, Order, Reader};
use super::util::{self, Cloner};
use super::{Pass, PassCx, RemarkKind};
use crate::interp::ops::{BinOp, UnOp};
use crate::interp::value::{Scalar, Value};
use crate::ir::*;
use crate::sema::hir::Prim;
use crate::span::Span;

pub const PASS: Pass = Pass {
    name: "version",
    description: "a fast path for extents above a threshold (generic index computations decided, with-loops fold) or in relations that prove bounds checks",
    run,
};

/// Definitions of the function's values (see [`index::defs`]).
type Defs = HashMap<ValueId, index::Def>;

/// Extents are not required to be larger than this.
pub const MAX_THRESHOLD: i64 = 64;

fn run(m: &mut Module, cx: &mut PassCx) {
    let inlinable = super::inline::inlinable(m);
    let mut outlined: Vec<Function> = Vec::new();
    let mut names: HashSet<String> = m.functions.iter().map(|g| g.name.clone()).collect();
    for i in 0..m.functions.len() {
        // The original code a split moved out is not split again.
        if m.functions[i].cold {
            continue;
        }
        // Not before inlining is done: the thresholds come from the code the
        // library's functions bring.
        let mut waiting = false;
        m.functions[i].body.walk(&mut |s| {
            waiting |= matches!(&s.op, Op::Call { func, .. } if inlinable.get(func.0 as usize) == Some(&true))
        });
        if waiting {
            continue;
        }
        let first_id = (m.functions.len() + outlined.len()) as u32;
        let f = &mut m.functions[i];
        let mut done = Vec::new();
        let span = f.span;
        // Definitions as they are before any split (a split defines only its condition).
        let defs = index::defs(f);
        let mut cold = Cold { first_id, functions: Vec::new(), names: &mut names };
        util::with_body(f, |f, body| visit(f, &defs, body, span, &mut done, &mut cold));
        outlined.extend(cold.functions);
        let name = f.name.clone();
        for (span, split) in &done {
            let mut why = Vec::new();
            if let Some(t) = split.threshold {
                let plural = if split.extents == 1 { "" } else { "s" };
                why.push(format!(
                    "extents of at least {t} ({} extent{plural}): bounds computed from them compare there, so with-loops can fold",
                    split.extents
                ));
            }
            if split.relations > 0 {
                let plural = if split.relations == 1 { "" } else { "s" };
                why.push(format!(
                    "extents in {} relation{plural} that prove the with-loops' bounds checks",
                    split.relations
                ));
            }
            cx.remark(RemarkKind::Applied, &name, Some(*span), format!("a version for {}", why.join("; and for ")));
        }
        cx.count("blocks_versioned", done.len() as u64);
        if !done.is_empty() {
            cx.changed_function(&name);
        }
    }
    m.functions.extend(outlined);
}

/// Functions made of the original code beside versions (cold: compiled for
/// speed of compilation), numbered from `first_id` as they will be added.
struct Cold<'a> {
    first_id: u32,
    functions: Vec<Function>,
    /// The module's function names, those of `functions` included.
    names: &'a mut HashSet<String>,
}

/// Versions `b` (a function or loop body), or else the loop bodies in it.
fn visit(f: &mut Function, defs: &Defs, b: &mut Block, span: Span, done: &mut Vec<(Span, Split)>, cold: &mut Cold) {
    if let Some(split) = split(f, defs, b, span, cold) {
        done.push((span, split));
        return;
    }
    for s in &mut b.stmts {
        let at = s.span;
        match &mut s.op {
            Op::Loop { body, .. } => visit(f, defs, body, at, done, cold),
            Op::With(w) => {
                for p in &mut w.parts {
                    visit_nested(f, defs, &mut p.body, done, cold);
                }
            }
            _ => {}
        }
    }
}

/// Loops inside a with-loop part's body.
fn visit_nested(f: &mut Function, defs: &Defs, b: &mut Block, done: &mut Vec<(Span, Split)>, cold: &mut Cold) {
    for s in &mut b.stmts {
        let at = s.span;
        if let Op::Loop { body, .. } = &mut s.op {
            visit(f, defs, body, at, done, cold);
        }
    }
}

/// What versioning a block needs: the extents to bound, and how far (none:
/// no threshold), and relations between extents (each `>= 0`) under which
/// the bounds checks of its with-loops hold everywhere.
struct Need {
    extents: Vec<Atom>,
    threshold: Option<i64>,
    relations: Vec<Affine>,
}

/// A split made: its threshold, how many extents it bounds, how many relations it holds.
struct Split {
    threshold: Option<i64>,
    extents: usize,
    relations: usize,
}

/// Splits `b` when it qualifies.
fn split(f: &mut Function, defs: &Defs, b: &mut Block, span: Span, cold: &mut Cold) -> Option<Split> {
    let withs = b.stmts.iter().filter(|s| matches!(s.op, Op::With(_))).count();
    // One split per block: a block with branches holding with-loops (a split
    // made before, or the program's own) is left alone.
    let branches = b.stmts.iter().any(|s| {
        let mut holds = false;
        if let Op::If { .. } = &s.op {
            s.op.walk_blocks(&mut |inner| inner.walk(&mut |t| holds |= matches!(t.op, Op::With(_))));
        }
        holds
    });
    if withs == 0 || branches {
        return None;
    }
    let need = need(f, defs, b, withs)?;
    // Everything after the last definition of an extent's vector moves into
    // the branches; every with-loop must be among it.
    let atoms = need.extents.iter().chain(need.relations.iter().flat_map(|r| r.terms.keys()));
    let defined: Vec<usize> = atoms.filter_map(|a| b.stmts.iter().position(|s| s.defs.contains(&a.value))).collect();
    let from = defined.iter().max().map_or(0, |k| k + 1);
    if b.stmts[..from].iter().any(|s| matches!(s.op, Op::With(_))) {
        return None;
    }
    let rest: Vec<Stmt> = b.stmts.drain(from..).collect();
    let at = rest.first().map_or(span, |s| s.span);
    // The condition: every extent at least the threshold, every relation holds.
    let mut cond_stmts = Vec::new();
    let mut conds = Vec::new();
    if let Some(t) = need.threshold {
        let k = util::emit_const(f, &mut cond_stmts, Value::Scalar(Scalar::int(t)), at);
        for e in &need.extents {
            let x = index::emit_scalar(f, &mut cond_stmts, &Affine::atom(*e), at);
            conds.push(util::emit_prim(f, &mut cond_stmts, Prim::Bin(BinOp::Ge), vec![x, k], util::bool_ty(), at));
        }
    }
    for r in &need.relations {
        // `r >= 0` as `positive terms >= negative terms - c` (no subtraction to wrap).
        let plus = Affine { terms: r.terms.iter().filter(|(_, k)| **k > 0).map(|(a, k)| (*a, *k)).collect(), c: 0 };
        let minus =
            Affine { terms: r.terms.iter().filter(|(_, k)| **k < 0).map(|(a, k)| (*a, -*k)).collect(), c: -r.c };
        let x = index::emit_scalar(f, &mut cond_stmts, &plus, at);
        let y = index::emit_scalar(f, &mut cond_stmts, &minus, at);
        conds.push(util::emit_prim(f, &mut cond_stmts, Prim::Bin(BinOp::Ge), vec![x, y], util::bool_ty(), at));
    }
    let mut cond = *conds.first()?;
    for c in &conds[1..] {
        cond = util::emit_prim(f, &mut cond_stmts, Prim::Bin(BinOp::And), vec![cond, *c], util::bool_ty(), at);
    }
    let then_block = Block { stmts: rest, yields: b.yields.clone() };
    let copy = Cloner { src: None, map: Default::default() }.block(f, &then_block);
    // The original code runs rarely (tiny arrays, or on to an error): it
    // becomes a cold function of its own, cheap to compile.
    let id = FuncId(cold.first_id + cold.functions.len() as u32);
    let name = util::fresh_function_name(cold.names, &format!("{}__original", f.name));
    let else_block = match outline(f, &copy, &b.stmts, defs, id, name, at) {
        Some((g, call)) => {
            cold.functions.push(g);
            call
        }
        None => copy,
    };
    let results = fresh_like(f, &b.yields);
    b.stmts.extend(cond_stmts);
    b.stmts.push(Stmt::new(results.clone(), Op::If { cond, then_block, else_block }, at));
    b.yields = results;
    Some(Split { threshold: need.threshold, extents: need.extents.len(), relations: need.relations.len() })
}

/// The extents whose bounds would decide the block's undecided computations
/// that its with-loops depend on (when it has several with-loops, which could
/// then fold), and the threshold that decides them all; and the relations
/// between extents that prove its with-loops' bounds checks.
fn need(f: &Function, defs: &Defs, b: &Block, withs: usize) -> Option<Need> {
    let reader = Reader::new(f, defs);
    let facts = index::Facts::default();
    let known = Known { reader: &reader, facts: &facts };
    let is_extent = |a: &Atom| a.component.is_some() && known.atom_range(a).0 == Some(0);
    let mut relations = Vec::new();
    for s in &b.stmts {
        if let Op::With(w) = &s.op {
            check_relations(w, &reader, &known, &is_extent, &mut Vec::new(), &mut relations);
        }
    }
    // The condition is computed at the block's top: its atoms must be defined
    // there or around the block, not inside a nested block.
    let mut nested = util::defined_in(b);
    for s in &b.stmts {
        for d in &s.defs {
            nested.remove(d);
        }
    }
    relations.retain(|r| r.terms.keys().all(|a| !nested.contains(&a.value)));
    relations.truncate(MAX_RELATIONS);
    let thresholds = if withs >= 2 { thresholds(b, &reader, &known, &is_extent) } else { None };
    if thresholds.is_none() && relations.is_empty() {
        return None;
    }
    let (extents, threshold) = match thresholds {
        Some((extents, t)) => (extents, Some(t)),
        None => (Vec::new(), None),
    };
    Some(Need { extents, threshold, relations })
}

/// Relations versioned on at most.
const MAX_RELATIONS: usize = 4;

/// The ranges of the index atoms of the with-loop parts around a statement.
type PartRanges = Vec<(Atom, Affine, Affine)>;

/// The relations between extents under which every `in_bounds` check in `w`
/// (nested with-loops included) holds for all indices of its parts: per
/// component, its least value `>= 0` and its greatest `< extent`, where the
/// extremes come from the parts' bounds. Components that do not move with
/// part indices by a coefficient of ±1, or whose relation mentions anything
/// but extents, are not versioned on.
fn check_relations(
    w: &With,
    r: &Reader,
    known: &Known,
    is_extent: &dyn Fn(&Atom) -> bool,
    ranges: &mut PartRanges,
    out: &mut Vec<Affine>,
) {
    for p in &w.parts {
        let mark = ranges.len();
        if let (Some(lo), Some(hi)) = (r.vector(p.lower), r.vector(p.upper)) {
            for (d, (l, h)) in lo.iter().zip(&hi).enumerate() {
                if let Some(iv) = p.index {
                    ranges.push((Atom { value: iv, component: Some(d) }, l.clone(), h.plus(-1)));
                }
                if let Some(s) = p.scalars.as_ref().and_then(|ss| ss.get(d)) {
                    ranges.push((Atom { value: *s, component: None }, l.clone(), h.plus(-1)));
                }
            }
        }
        // Nested with-loops are looked at by the recursion, with their parts' ranges.
        p.body.walk_outside_withs(&mut |t| match &t.op {
            Op::Check(CheckOp { check: Check::InBounds { index, shape }, .. }) => {
                let comps = if r.is_int_scalar(*index) { Some(vec![r.scalar(*index)]) } else { r.vector(*index) };
                let (Some(comps), Some(extents)) = (comps, r.vector(*shape)) else { return };
                for (c, n) in comps.iter().zip(&extents) {
                    let Some((least, most)) = extremes(c, ranges) else { continue };
                    for rel in [least, n.sub(&most).plus(-1)] {
                        let decided = known.range(&rel).0.is_some_and(|l| l >= 0);
                        if !decided && !rel.terms.is_empty() && rel.terms.keys().all(is_extent) && !out.contains(&rel) {
                            out.push(rel);
                        }
                    }
                }
            }
            Op::With(inner) => check_relations(inner, r, known, is_extent, ranges, out),
            _ => {}
        });
        ranges.truncate(mark);
    }
}

/// The least and greatest value of `c` over the parts' ranges.
fn extremes(c: &Affine, ranges: &PartRanges) -> Option<(Affine, Affine)> {
    let (mut least, mut most) = (c.clone(), c.clone());
    for (atom, &k) in &c.terms {
        let Some((_, lo, hi)) = ranges.iter().rev().find(|(a, _, _)| a == atom) else { continue };
        let drop = Affine::atom(*atom).scale(k);
        match k {
            1 => {
                least = least.sub(&drop).add(lo);
                most = most.sub(&drop).add(hi);
            }
            -1 => {
                least = least.sub(&drop).sub(hi);
                most = most.sub(&drop).sub(lo);
            }
            _ => return None,
        }
    }
    Some((least, most))
}

/// The extents whose thresholds decide the block's computations, and the
/// least threshold that decides them all (see the module documentation).
fn thresholds(
    b: &Block,
    reader: &Reader,
    known: &Known,
    is_extent: &dyn Fn(&Atom) -> bool,
) -> Option<(Vec<Atom>, i64)> {
    let mut extents: Vec<Atom> = Vec::new();
    let mut threshold = 2;
    let mut undecided: HashSet<ValueId> = HashSet::default();
    for s in &b.stmts {
        let Op::Prim { prim, args, .. } = &s.op else { continue };
        if !args.iter().all(|a| reader.is_int_scalar(*a)) {
            continue;
        }
        // The difference whose sign decides the statement, when it is not constant.
        let decider = match prim {
            Prim::Bin(
                BinOp::Max | BinOp::Min | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne,
            ) if args.len() == 2 => Some(reader.scalar(args[0]).sub(&reader.scalar(args[1]))),
            Prim::Un(UnOp::Abs) => Some(reader.scalar(args[0])),
            // `mod(c, y)` with a constant `c`: `y > |c|` decides it.
            Prim::Bin(BinOp::Mod | BinOp::AplMod) if args.len() == 2 => {
                reader.scalar(args[0]).as_const().map(|c| reader.scalar(args[1]).plus(-c.abs() - 1))
            }
            _ => None,
        };
        let Some(d) = decider else { continue };
        if d.terms.is_empty() || !d.terms.keys().all(is_extent) {
            continue;
        }
        let positive = d.terms.values().all(|&k| k > 0);
        let negative = d.terms.values().all(|&k| k < 0);
        if !positive && !negative {
            continue;
        }
        // Decided already (by what the extents' definitions tell)?
        let (lo, hi) = known.range(&d);
        if lo.is_some_and(|l| l >= 1) || hi.is_some_and(|h| h <= -1) {
            continue;
        }
        // Σ|k|·K ± c must be at least 1 in magnitude: K >= (1 ∓ c) / Σ|k|.
        let total: i64 = d.terms.values().map(|k| k.abs()).sum();
        let c = if positive { d.c } else { -d.c };
        let k = (1 - c + total - 1).div_euclid(total).max(2);
        if k > MAX_THRESHOLD {
            continue;
        }
        threshold = threshold.max(k);
        for a in d.terms.keys() {
            if !extents.contains(a) {
                extents.push(*a);
            }
        }
        undecided.extend(s.defs.iter().copied());
    }
    if undecided.is_empty() {
        return None;
    }
    // Some with-loop's bounds or shapes must depend on them.
    let mut tainted = undecided;
    let mut feeds_with = false;
    for s in &b.stmts {
        let uses = s.op.operands();
        if uses.iter().any(|u| tainted.contains(u)) {
            if matches!(s.op, Op::With(_)) {
                feeds_with = true;
            }
            tainted.extend(s.defs.iter().copied());
        }
    }
    if !feeds_with {
        return None;
    }
    Some((extents, threshold))
}

/// `block` as a function of its own (`id`, cold, never inlined) taking the
/// values it reads from around it; returns the function and the block that
/// calls it. `None` when the block holds statements whose errors are blamed
/// on the call of the enclosing function (they would be blamed on this call).
pub(super) fn outline(
    f: &mut Function,
    block: &Block,
    before: &[Stmt],
    defs: &Defs,
    id: FuncId,
    name: String,
    span: Span,
) -> Option<(Function, Block)> {
    let mut blamed_on_caller = false;
    block.walk(&mut |s| blamed_on_caller |= s.blame == Blame::Caller);
    if blamed_on_caller {
        return None;
    }
    // What the block reads of the statements before it that cannot fail
    // (shapes, their components, constants) is computed again inside, so the
    // function knows what these values are (`shape(a)`, not a parameter).
    let mut block = block.clone();
    let mut needed: crate::HashSet<ValueId> = crate::HashSet::default();
    let mut copied = Vec::new();
    {
        let mut wanted = std::collections::BTreeSet::new();
        reads(&block, &mut wanted);
        needed.extend(wanted);
        for s in before.iter().rev() {
            let pure = match &s.op {
                Op::Const(_) | Op::Array(_) => true,
                Op::Prim { prim: Prim::Sel | Prim::IdxSel, checked: false, .. } => true,
                Op::Prim { prim, .. } => !util::prim_may_fail(prim) && !prim.has_effect(),
                _ => false,
            };
            if pure && s.defs.iter().any(|d| needed.contains(d)) {
                needed.extend(s.op.operands());
                copied.push(s.clone());
            }
        }
    }
    copied.reverse();
    copied.append(&mut block.stmts);
    block.stmts = copied;
    let block = &block;
    let defined = util::defined_in(block);
    let mut free = std::collections::BTreeSet::new();
    reads(block, &mut free);
    let free: Vec<ValueId> = free.into_iter().filter(|v| !defined.contains(v)).collect();
    let mut g = Function {
        name,
        source_name: f.source_name.clone(),
        kind: FunctionKind::Instance,
        params: Vec::new(),
        results: block.yields.iter().map(|y| f.ty(*y).clone()).collect(),
        body: Block::default(),
        values: Vec::new(),
        inline: false,
        noinline: true,
        cold: true,
        library: f.library,
        specialises: None,
        span: f.span,
    };
    let mut cl = Cloner { src: Some(&f.values), map: HashMap::default() };
    // Constants from around the block are constants inside too; the rest are parameters.
    let mut consts = Vec::new();
    let mut args = Vec::new();
    for v in &free {
        let data = &f.values[v.0 as usize];
        let p = g.new_value(data.ty.clone(), data.name.clone());
        match defs.get(v) {
            Some(index::Def::Const(c)) => consts.push(Stmt::new(vec![p], Op::Const(c.clone()), span)),
            _ => {
                g.params.push(p);
                args.push(*v);
            }
        }
        cl.map.insert(*v, p);
    }
    g.body = cl.block(&mut g, block);
    consts.append(&mut g.body.stmts);
    g.body.stmts = consts;
    let results = fresh_like(f, &block.yields);
    let call = Stmt::new(results.clone(), Op::Call { func: id, args }, span);
    Some((g, Block { stmts: vec![call], yields: results }))
}

/// Every value the statements of `b` (nested ones too) and its yields read.
fn reads(b: &Block, out: &mut std::collections::BTreeSet<ValueId>) {
    for s in &b.stmts {
        out.extend(s.op.operands());
        s.op.walk_blocks(&mut |inner| reads(inner, out));
    }
    out.extend(b.yields.iter().copied());
}

/// Fresh values of `f` with the types and names of `like`.
fn fresh_like(f: &mut Function, like: &[ValueId]) -> Vec<ValueId> {
    like.iter()
        .map(|y| {
            let data = f.values[y.0 as usize].clone();
            f.new_value(data.ty, data.name)
        })
        .collect()
}

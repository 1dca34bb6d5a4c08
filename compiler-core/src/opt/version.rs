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
//! Limits: only blocks with at least two with-loops at their top level whose
//! bounds or shapes depend on an undecided computation are split (one split
//! per block: the branches are not function or loop bodies, and blocks inside
//! `if`s are not looked at); only extents with coefficients of one sign
//! (`m - 2`, not `m - n`) are decided; the code of the block is duplicated.

use std::collections::{HashMap, HashSet};

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
    description: "a fast path for extents above a threshold, where generic index computations are decided and with-loops fold",
    run,
};

/// Definitions of the function's values (see [`index::defs`]).
type Defs = HashMap<ValueId, index::Def>;

/// Extents are not required to be larger than this.
pub const MAX_THRESHOLD: i64 = 64;

fn run(m: &mut Module, cx: &mut PassCx) {
    let inlinable = super::inline::inlinable(m);
    for i in 0..m.functions.len() {
        // Not before inlining is done: the thresholds come from the code the
        // library's functions bring.
        let mut waiting = false;
        m.functions[i].body.walk(&mut |s| {
            waiting |= matches!(&s.op, Op::Call { func, .. } if inlinable.get(func.0 as usize) == Some(&true))
        });
        if waiting {
            continue;
        }
        let f = &mut m.functions[i];
        let mut done = Vec::new();
        let span = f.span;
        // Definitions as they are before any split (a split defines only its condition).
        let defs = index::defs(f);
        util::with_body(f, |f, body| visit(f, &defs, body, span, &mut done));
        let name = f.name.clone();
        for (span, threshold, extents) in &done {
            cx.remark(
                RemarkKind::Applied,
                &name,
                Some(*span),
                format!(
                    "a version for extents of at least {threshold} ({extents} extent{}): bounds computed from them compare there, so with-loops can fold",
                    if *extents == 1 { "" } else { "s" }
                ),
            );
        }
        cx.count("blocks_versioned", done.len() as u64);
    }
}

/// Versions `b` (a function or loop body), or else the loop bodies in it.
fn visit(f: &mut Function, defs: &Defs, b: &mut Block, span: Span, done: &mut Vec<(Span, i64, usize)>) {
    if let Some((threshold, extents)) = split(f, defs, b, span) {
        done.push((span, threshold, extents));
        return;
    }
    for s in &mut b.stmts {
        let at = s.span;
        match &mut s.op {
            Op::Loop { body, .. } => visit(f, defs, body, at, done),
            Op::With(w) => {
                for p in &mut w.parts {
                    visit_nested(f, defs, &mut p.body, done);
                }
            }
            _ => {}
        }
    }
}

/// Loops inside a with-loop part's body.
fn visit_nested(f: &mut Function, defs: &Defs, b: &mut Block, done: &mut Vec<(Span, i64, usize)>) {
    for s in &mut b.stmts {
        let at = s.span;
        if let Op::Loop { body, .. } = &mut s.op {
            visit(f, defs, body, at, done);
        }
    }
}

/// What versioning a block needs: the extents to bound, and how far.
struct Need {
    extents: Vec<Atom>,
    threshold: i64,
}

/// Splits `b` when it qualifies; returns the threshold and how many extents.
fn split(f: &mut Function, defs: &Defs, b: &mut Block, span: Span) -> Option<(i64, usize)> {
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
    if withs < 2 || branches {
        return None;
    }
    let need = need(f, defs, b)?;
    // Everything after the last definition of an extent's vector moves into
    // the branches; every with-loop must be among it.
    let defined: Vec<usize> =
        need.extents.iter().filter_map(|a| b.stmts.iter().position(|s| s.defs.contains(&a.value))).collect();
    let from = defined.iter().max().map_or(0, |k| k + 1);
    if b.stmts[..from].iter().any(|s| matches!(s.op, Op::With(_))) {
        return None;
    }
    let rest: Vec<Stmt> = b.stmts.drain(from..).collect();
    let at = rest.first().map_or(span, |s| s.span);
    // The condition: every extent at least the threshold.
    let mut cond_stmts = Vec::new();
    let k = util::emit_const(f, &mut cond_stmts, Value::Scalar(Scalar::int(need.threshold)), at);
    let mut cond: Option<ValueId> = None;
    for e in &need.extents {
        let x = index::emit_scalar(f, &mut cond_stmts, &Affine::atom(*e), at);
        let c = util::emit_prim(f, &mut cond_stmts, Prim::Bin(BinOp::Ge), vec![x, k], util::bool_ty(), at);
        cond = Some(match cond {
            None => c,
            Some(prev) => {
                util::emit_prim(f, &mut cond_stmts, Prim::Bin(BinOp::And), vec![prev, c], util::bool_ty(), at)
            }
        });
    }
    let cond = cond?;
    let then_block = Block { stmts: rest, yields: b.yields.clone() };
    let else_block = Cloner { src: None, map: Default::default() }.block(f, &then_block);
    let results: Vec<ValueId> = b
        .yields
        .iter()
        .map(|y| {
            let data = f.values[y.0 as usize].clone();
            f.new_value(data.ty, data.name)
        })
        .collect();
    b.stmts.extend(cond_stmts);
    b.stmts.push(Stmt::new(results.clone(), Op::If { cond, then_block, else_block }, at));
    b.yields = results;
    Some((need.threshold, need.extents.len()))
}

/// The extents whose bounds would decide the block's undecided computations
/// that its with-loops depend on, and the threshold that decides them all.
fn need(f: &Function, defs: &Defs, b: &Block) -> Option<Need> {
    let reader = Reader::new(f, defs);
    let facts = index::Facts::default();
    let known = Known { reader: &reader, facts: &facts };
    let is_extent = |a: &Atom| a.component.is_some() && known.atom_range(a).0 == Some(0);
    let mut extents: Vec<Atom> = Vec::new();
    let mut threshold = 2;
    let mut undecided: HashSet<ValueId> = HashSet::new();
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
    Some(Need { extents, threshold })
}

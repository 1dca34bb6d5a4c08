//! # licm: loop- and with-loop-invariant code motion
//!
//! Statements in a loop body (or condition) or a with-loop part that read
//! nothing the loop or part defines are computed once, before it. Only
//! statements that cannot fail and have no effect move (moving a failing one out
//! of a loop that may not run at all would make the program fail): constants,
//! array literals, total primitives, and `if`s and with-loops made only of such
//! statements. An element-wise operation on two arrays is total only where
//! both have one static shape (elsewhere it relies on the `same_shape` check
//! before it, which may have to stay); the runtime's matrix product never
//! moves (`bce` may have proven its selections with the loop's condition).
//!
//! ```text
//! %9 = with {                                %c = const [10]
//!   part … index %i {                        %n = prim mul(%k, %k)
//!     %c = const [10]                  ⇒     %9 = with {
//!     %n = prim mul(%k, %k)                    part … index %i {
//!     %j = prim add(%i, %c) …                    %j = prim add(%i, %c) …
//! ```
//!
//! Checks that do not depend on the loop move too, out of `do`-loops (which run
//! at least once) and with-loop parts whose index set is statically non-empty,
//! when nothing before them in the body can fail — the check then fails at the
//! same point in the program as before, once instead of per iteration (not out
//! of a later part of a tensor comprehension, which earlier parts may cover,
//! or of any part of a `foldfix`, which may stop before it or start at its
//! fixpoint). Out of
//! the only part of a with-loop over a symbolic index set, an invariant
//! `assert(c)` moves guarded: `assert(lower >= upper || c)` (component-wise
//! `||`), so an empty with-loop still does not fail — L0's zip-size assertions
//! leave the maps they guard, as in seed 004's P1. Other checks (`in_bounds`
//! narrowed by `bce` to the part's first index) move under
//! `if (lower >= upper) {} else { check }`.
//! Limits: nothing moves out of `while` conditions' side effects; failing
//! statements other than checks stay.

use crate::HashSet;

use super::util;
use super::{Pass, PassCx};
use crate::interp::ops::BinOp;
use crate::ir::*;
use crate::sema::hir::Prim;

pub const PASS: Pass =
    Pass { name: "licm", description: "loop- and with-loop-invariant statements (and checks) move out of loops", run };

fn run(m: &mut Module, cx: &mut PassCx) {
    cx.each_function(m, |f, cx| {
        let consts = util::constants(f);
        let mut hoisted = 0;
        let mut checks = 0;
        util::with_body(f, |f, body| block(f, body, &consts, &mut hoisted, &mut checks));
        cx.count("statements_hoisted", hoisted);
        cx.count("checks_hoisted", checks);
    });
}

/// Whether a statement can neither fail nor have an effect (nested ones
/// included) wherever it runs. An element-wise operation on two arrays relies
/// on the `same_shape` check before it, which may stay (checks leave no
/// `while` loop): only one on arrays of one static shape moves. A matrix
/// product's selections may be proven by the loop's condition (`bce`
/// assumes it in the body): it stays.
fn total(f: &Function, op: &Op) -> bool {
    match op {
        Op::Const(_) | Op::Array(_) => true,
        Op::Prim { prim: Prim::MatMul, .. } => false,
        Op::Prim { prim: prim @ (Prim::Bin(_) | Prim::Math(_)), args, .. } if args.len() == 2 => {
            let (x, y) = (&f.ty(args[0]).shape, &f.ty(args[1]).shape);
            let shapes_agree = x.is_scalar() || y.is_scalar() || x.extents().is_some_and(|e| y.extents() == Some(e));
            shapes_agree && !util::prim_may_fail(prim)
        }
        Op::Prim { prim, .. } => !util::prim_may_fail(prim) && !prim.has_effect(),
        Op::If { then_block, else_block, .. } => total_block(f, then_block) && total_block(f, else_block),
        _ => false,
    }
}

/// `sel([k], v)` / `idx_sel(k, v)` of a vector whose length exceeds the
/// constant `k` (`shape(a)[1]`): it cannot fail wherever it runs.
pub(super) fn component_of_vector(
    f: &Function,
    consts: &crate::HashMap<ValueId, crate::interp::value::Value>,
    op: &Op,
) -> bool {
    let Op::Prim { prim: prim @ (Prim::Sel | Prim::IdxSel), args, .. } = op else { return false };
    let k = match (prim, consts.get(&args[0])) {
        (Prim::Sel, Some(c)) => util::int_vec(c).filter(|v| v.len() == 1).map(|v| v[0]),
        (_, Some(c)) => util::int_scalar(c),
        _ => None,
    };
    let len = crate::sema::prim_ty::vector_len(f.ty(args[1]));
    matches!((k, len), (Some(k), Some(n)) if k >= 0 && (k as usize) < n)
}

/// An `if` that only runs checks (what a guarded move out of an inner part
/// leaves): it moves like a check.
fn guarded_checks(f: &Function, op: &Op) -> bool {
    let Op::If { then_block, else_block, .. } = op else { return false };
    let only_checks = |b: &Block| {
        b.yields.is_empty()
            && b.stmts.iter().all(|s| matches!(s.op, Op::Check(_)) || total(f, &s.op) || guarded_checks(f, &s.op))
    };
    only_checks(then_block) && only_checks(else_block)
}

fn total_block(f: &Function, b: &Block) -> bool {
    b.stmts.iter().all(|s| total(f, &s.op))
}

fn block(
    f: &mut Function,
    b: &mut Block,
    consts: &crate::HashMap<ValueId, crate::interp::value::Value>,
    hoisted: &mut u64,
    checks: &mut u64,
) {
    let stmts = std::mem::take(&mut b.stmts);
    let mut out = Vec::with_capacity(stmts.len());
    for mut s in stmts {
        // Inner loops first: what leaves them may leave this one next.
        s.op.walk_blocks_mut(&mut |inner| block(f, inner, consts, hoisted, checks));
        let mut moved = Vec::new();
        match &mut s.op {
            Op::Loop { params, cond, body, test_first, .. } => {
                let bound: HashSet<ValueId> = params.iter().copied().collect();
                hoist(f, consts, cond, &bound, &mut moved, CheckMove::No, hoisted, checks);
                let body_checks = if !*test_first && cond_is_pure(cond) { CheckMove::Plain } else { CheckMove::No };
                hoist(f, consts, body, &bound, &mut moved, body_checks, hoisted, checks);
            }
            Op::With(w) => {
                let single = w.parts.len() == 1;
                // A part may run nowhere: a tensor comprehension's later parts
                // where earlier ones cover them; any of a `foldfix`, which may
                // stop before it (or start at its fixpoint: no body runs).
                let fixpoint = w.ops.iter().any(|o| matches!(o, WithOp::Fold { fixpoint: Some(_), .. }));
                let first_match = w.first_match;
                for (pi, p) in w.parts.iter_mut().enumerate() {
                    let mut bound: HashSet<ValueId> = HashSet::default();
                    bound.extend(p.index);
                    bound.extend(p.scalars.iter().flatten());
                    bound.extend(p.offset);
                    let how = if fixpoint || (pi > 0 && first_match) {
                        CheckMove::No
                    } else if nonempty(p, consts) {
                        CheckMove::Plain
                    } else if single
                        && p.step.is_none()
                        && p.width.is_none()
                        && crate::sema::prim_ty::vector_len(f.ty(p.lower)).is_some()
                    {
                        CheckMove::Guarded { lower: p.lower, upper: p.upper }
                    } else {
                        CheckMove::No
                    };
                    let mut out = Vec::new();
                    hoist(f, consts, &mut p.body, &bound, &mut out, how, hoisted, checks);
                    moved.extend(guard(f, out, how, s.span));
                }
            }
            _ => {}
        }
        out.extend(moved);
        out.push(s);
    }
    b.stmts = out;
}

fn cond_is_pure(_cond: &Block) -> bool {
    // A do-loop's body runs before its condition: checks at the body's start run
    // at least once whatever the condition says.
    true
}

/// Whether a part's index set is statically non-empty.
fn nonempty(p: &Part, consts: &crate::HashMap<ValueId, crate::interp::value::Value>) -> bool {
    let get = |v: ValueId| consts.get(&v).and_then(util::int_vec);
    match (get(p.lower), get(p.upper)) {
        (Some(l), Some(h)) => {
            let dense = p.step.is_none_or(|s| get(s).is_some())
                && p.width.is_none_or(|w| get(w).is_some_and(|w| w.iter().all(|&x| x > 0)));
            dense && l.len() == h.len() && l.iter().zip(&h).all(|(a, b)| a < b)
        }
        _ => false,
    }
}

/// Whether invariant checks may leave a body.
#[derive(Clone, Copy)]
enum CheckMove {
    No,
    /// The body surely runs once: a check moves as it is.
    Plain,
    /// The only part of a with-loop, dense, over a symbolic index set: an
    /// `assert` moves guarded by the set being non-empty, `assert(c)` becoming
    /// `assert(any(lower >= upper) || c)` (L0's zip assertions leave the map).
    Guarded {
        lower: ValueId,
        upper: ValueId,
    },
}

/// Rewrites the checks that `hoist` moved out of a part under
/// `CheckMove::Guarded`: `assert(c)` becomes `assert(lower[0] >= upper[0] || … || c)`;
/// any other check runs under `if (lower[0] < upper[0] && …)`.
fn guard(f: &mut Function, moved: Vec<Stmt>, how: CheckMove, span: crate::span::Span) -> Vec<Stmt> {
    let CheckMove::Guarded { lower, upper } = how else { return moved };
    let n = crate::sema::prim_ty::vector_len(f.ty(lower)).unwrap_or(0);
    let mut out = Vec::with_capacity(moved.len());
    // `lower[0] >= upper[0] || …`, computed before the first check that needs it
    // (none for rank 0: the one index always runs).
    let mut empty: Option<Option<ValueId>> = None;
    for mut s in moved {
        if !matches!(s.op, Op::Check(_)) && !guarded_checks(f, &s.op) {
            out.push(s);
            continue;
        }
        let empty = *empty.get_or_insert_with(|| {
            let mut pre = Vec::new();
            let mut acc = None;
            for k in 0..n {
                let l = util::emit_component(f, &mut pre, lower, k, span);
                let u = util::emit_component(f, &mut pre, upper, k, span);
                let e = util::emit_prim(f, &mut pre, Prim::Bin(BinOp::Ge), vec![l, u], util::bool_ty(), span);
                acc = Some(match acc {
                    None => e,
                    Some(a) => util::emit_prim(f, &mut pre, Prim::Bin(BinOp::Or), vec![a, e], util::bool_ty(), span),
                });
            }
            for p in &mut pre {
                p.blame = s.blame;
            }
            out.extend(pre);
            acc
        });
        let Some(empty) = empty else {
            out.push(s);
            continue;
        };
        if let Op::Check(CheckOp { check: Check::Assert(cond), .. }) = &mut s.op {
            let mut pre = Vec::new();
            *cond = util::emit_prim(f, &mut pre, Prim::Bin(BinOp::Or), vec![empty, *cond], util::bool_ty(), span);
            for p in &mut pre {
                p.blame = s.blame;
            }
            out.extend(pre);
            out.push(s);
            continue;
        }
        let (blame, at) = (s.blame, s.span);
        let when_empty = Block { stmts: Vec::new(), yields: Vec::new() };
        let otherwise = Block { stmts: vec![s], yields: Vec::new() };
        out.push(Stmt {
            defs: Vec::new(),
            op: Op::If { cond: empty, then_block: when_empty, else_block: otherwise },
            span: at,
            blame,
        });
    }
    out
}

/// Moves invariant statements of `b` into `out` (checks as `how` allows, when
/// nothing before them in the body can fail).
#[allow(clippy::too_many_arguments)]
fn hoist(
    f: &Function,
    consts: &crate::HashMap<ValueId, crate::interp::value::Value>,
    b: &mut Block,
    bound: &HashSet<ValueId>,
    out: &mut Vec<Stmt>,
    how: CheckMove,
    hoisted: &mut u64,
    checks: &mut u64,
) {
    let movable = |op: &Op| match how {
        CheckMove::No => false,
        CheckMove::Plain => matches!(op, Op::Check(_)) || guarded_checks(f, op),
        CheckMove::Guarded { .. } => {
            matches!(op, Op::Check(CheckOp { check: Check::Assert(_) | Check::InBounds { .. }, .. }))
                || guarded_checks(f, op)
        }
    };
    let mut inside: HashSet<ValueId> = bound.clone();
    let mut failed_before = false;
    let stmts = std::mem::take(&mut b.stmts);
    let mut kept = Vec::with_capacity(stmts.len());
    for s in stmts {
        let invariant = !util::reads_any(&s, &inside);
        let is_check = movable(&s.op);
        if invariant && (total(f, &s.op) || component_of_vector(f, consts, &s.op)) {
            *hoisted += 1;
            out.push(s);
            continue;
        }
        if invariant && is_check && !failed_before {
            *checks += 1;
            out.push(s);
            continue;
        }
        // A selection proven in bounds cannot fail (but stays: the proof holds only in here).
        let proven_access = matches!(
            &s.op,
            Op::Prim { prim: Prim::Sel | Prim::IdxSel | Prim::Modarray | Prim::IdxModarray, checked: false, .. }
        );
        if util::may_fail(&s.op) && !proven_access {
            failed_before = true;
        }
        inside.extend(s.defs.iter().copied());
        kept.push(s);
    }
    b.stmts = kept;
}

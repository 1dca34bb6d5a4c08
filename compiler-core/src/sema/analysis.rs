//! Program-wide facts computed after resolution:
//!
//! * **purity**: a function is pure unless it (transitively) prints;
//! * **used parameters**: an argument for a parameter the callee never reads is not
//!   evaluated (real SaC programs pass `5/0` to such parameters and rely on it);
//! * **liveness**: an assignment whose targets are never read and whose value is pure
//!   is marked dead and skipped, as sac2c's dead-code removal would.

use crate::HashSet;
use std::rc::Rc;

use super::hir::Expr;
use super::hir::{Bound, ExprKind, FoldTarget, FunId, Function, LocalId, Program, Stmt, WithOp};

pub fn analyse(program: &mut Program) {
    compute_purity(program);
    let purity: Vec<bool> = program.functions.iter().map(|f| f.pure).collect();
    for k in 0..program.functions.len() {
        let f = &program.functions[k];
        if !f.resolved || f.intrinsic.is_some() {
            continue;
        }
        let mut used = HashSet::default();
        for s in &f.body {
            stmt_uses(s, &mut used);
        }
        for c in &f.conditions {
            expr_uses(c, &mut used);
        }
        // A parameter whose shape binds a used pattern variable is used too.
        let pattern_used = f.pattern_locals.iter().any(|(_, l)| used.contains(l));
        let param_used: Vec<bool> = f
            .params
            .iter()
            .map(|p| {
                used.contains(&p.local)
                    || (pattern_used && !matches!(p.ty.shape, crate::syntax::ast::ShapeSpec::Scalar))
            })
            .collect();
        let f = Rc::make_mut(&mut program.functions[k]);
        f.param_used = param_used;
        live_stmts(&mut f.body, HashSet::default(), &purity);
    }
}

/// Sets every function's `pure`. A function is only written to where its
/// flag changes: the library's stubs stay shared ([`Program::functions`]).
fn compute_purity(program: &mut Program) {
    for f in &mut program.functions {
        let pure = f.intrinsic.is_none();
        if f.pure != pure {
            Rc::make_mut(f).pure = pure;
        }
    }
    loop {
        let purity: Vec<bool> = program.functions.iter().map(|f| f.pure).collect();
        let mut changed = false;
        for f in &mut program.functions {
            if !f.pure {
                continue;
            }
            let pure =
                f.body.iter().all(|s| stmt_pure(s, &purity)) && f.conditions.iter().all(|c| expr_pure(c, &purity));
            if !pure {
                Rc::make_mut(f).pure = false;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
}

fn stmt_pure(s: &Stmt, purity: &[bool]) -> bool {
    match s {
        Stmt::Assign { value, .. } => expr_pure(value, purity),
        Stmt::If { cond, then_body, else_body, .. } => {
            expr_pure(cond, purity) && then_body.iter().chain(else_body).all(|s| stmt_pure(s, purity))
        }
        Stmt::While { cond, body, .. } | Stmt::DoWhile { body, cond, .. } => {
            expr_pure(cond, purity) && body.iter().all(|s| stmt_pure(s, purity))
        }
        Stmt::Return { values, .. } => values.iter().all(|v| expr_pure(v, purity)),
        Stmt::Eval { expr, .. } => expr_pure(expr, purity),
    }
}

/// Whether evaluating `e` has no effect besides its value (it may still fail).
pub fn expr_pure(e: &Expr, purity: &[bool]) -> bool {
    let mut pure = true;
    walk_expr(e, &mut |x| match &x.kind {
        ExprKind::Call { callee, .. }
            if callee.candidates.iter().any(|c: &FunId| !purity.get(c.0 as usize).copied().unwrap_or(false)) =>
        {
            pure = false;
        }
        ExprKind::Prim { prim, .. } if prim.has_effect() => pure = false,
        ExprKind::With(w) => {
            for op in &w.ops {
                if let WithOp::Fold { fun, .. } | WithOp::FoldFix { fun, .. } = op
                    && let FoldTarget::Call(c) = &fun.target
                    && c.candidates.iter().any(|c| !purity.get(c.0 as usize).copied().unwrap_or(false))
                {
                    pure = false;
                }
            }
            for p in &w.parts {
                if !p.body.iter().all(|s| stmt_pure(s, purity)) {
                    pure = false;
                }
            }
        }
        _ => {}
    });
    pure
}

/// Calls `f` on `e` and every sub-expression (not descending into with-loop part
/// bodies' statements, which callers handle).
pub fn walk_expr(e: &Expr, f: &mut dyn FnMut(&Expr)) {
    f(e);
    match &e.kind {
        ExprKind::Const(_) | ExprKind::Local(_) => {}
        ExprKind::Call { args, .. } | ExprKind::Prim { args, .. } | ExprKind::Array(args) => {
            args.iter().for_each(|a| walk_expr(a, f))
        }
        ExprKind::And(a, b) | ExprKind::Or(a, b) => {
            walk_expr(a, f);
            walk_expr(b, f);
        }
        ExprKind::Cond { cond, then_expr, else_expr } => {
            walk_expr(cond, f);
            walk_expr(then_expr, f);
            walk_expr(else_expr, f);
        }
        ExprKind::Cast { expr, .. } => walk_expr(expr, f),
        ExprKind::With(w) => {
            for op in &w.ops {
                match op {
                    WithOp::Genarray { shape, default, .. } => {
                        walk_expr(shape, f);
                        if let Some(d) = default {
                            walk_expr(d, f);
                        }
                    }
                    WithOp::Modarray { array, .. } => walk_expr(array, f),
                    WithOp::Fold { fun, neutral, .. } => {
                        fun.partial.iter().for_each(|a| walk_expr(a, f));
                        walk_expr(neutral, f);
                    }
                    WithOp::FoldFix { fun, neutral, fixpoint, .. } => {
                        fun.partial.iter().for_each(|a| walk_expr(a, f));
                        walk_expr(neutral, f);
                        walk_expr(fixpoint, f);
                    }
                }
            }
            for p in &w.parts {
                for b in [p.lower.as_ref().map(|l| &l.0), Some(&p.upper.1)].into_iter().flatten() {
                    if let Bound::Expr(x) = b {
                        walk_expr(x, f);
                    }
                }
                p.step.iter().chain(&p.width).for_each(|x| walk_expr(x, f));
                p.results.iter().for_each(|x| walk_expr(x, f));
            }
        }
    }
}

/// The functions a function may call: every candidate of every call site
/// and fold function in its body and type-pattern conditions (with-loop
/// bodies included), each reported once per site.
pub fn called_functions(f: &Function, out: &mut dyn FnMut(FunId)) {
    fn expr(e: &Expr, out: &mut dyn FnMut(FunId)) {
        walk_expr(e, &mut |x| match &x.kind {
            ExprKind::Call { callee, .. } => callee.candidates.iter().for_each(|c| out(*c)),
            ExprKind::With(w) => {
                for op in &w.ops {
                    if let WithOp::Fold { fun, .. } | WithOp::FoldFix { fun, .. } = op
                        && let FoldTarget::Call(callee) = &fun.target
                    {
                        callee.candidates.iter().for_each(|c| out(*c));
                    }
                }
                for p in &w.parts {
                    p.body.iter().for_each(|s| stmt_exprs(s, &mut |e| expr(e, out)));
                }
            }
            _ => {}
        });
    }
    f.body.iter().for_each(|s| stmt_exprs(s, &mut |e| expr(e, out)));
    f.conditions.iter().for_each(|c| expr(c, out));
}

/// Calls `f` on each expression of a statement and of the statements nested
/// in it (not inside the expressions: see [`walk_expr`]).
fn stmt_exprs(s: &Stmt, f: &mut dyn FnMut(&Expr)) {
    match s {
        Stmt::Assign { value, .. } => f(value),
        Stmt::If { cond, then_body, else_body, .. } => {
            f(cond);
            then_body.iter().chain(else_body).for_each(|s| stmt_exprs(s, f));
        }
        Stmt::While { cond, body, .. } | Stmt::DoWhile { body, cond, .. } => {
            f(cond);
            body.iter().for_each(|s| stmt_exprs(s, f));
        }
        Stmt::Return { values, .. } => values.iter().for_each(&mut *f),
        Stmt::Eval { expr, .. } => f(expr),
    }
}

/// Locals read by an expression, including inside with-loop bodies.
pub fn expr_uses(e: &Expr, out: &mut HashSet<LocalId>) {
    walk_expr(e, &mut |x| match &x.kind {
        ExprKind::Local(l) => {
            out.insert(*l);
        }
        ExprKind::With(w) => {
            for p in &w.parts {
                for s in &p.body {
                    stmt_uses(s, out);
                }
            }
        }
        _ => {}
    });
}

fn stmt_uses(s: &Stmt, out: &mut HashSet<LocalId>) {
    stmt_exprs(s, &mut |e| expr_uses(e, out))
}

/// Backward liveness over structured statements; marks dead assignments and returns
/// the locals live on entry. Also processes with-loop bodies inside expressions.
fn live_stmts(stmts: &mut [Stmt], mut live: HashSet<LocalId>, purity: &[bool]) -> HashSet<LocalId> {
    for s in stmts.iter_mut().rev() {
        match s {
            Stmt::Assign { targets, value, live: is_live, .. } => {
                let needed = targets.iter().any(|t| live.contains(t)) || !expr_pure(value, purity);
                *is_live = needed;
                if needed {
                    for t in targets.iter() {
                        live.remove(t);
                    }
                    live_in_expr(value, purity);
                    expr_uses(value, &mut live);
                }
            }
            Stmt::If { cond, then_body, else_body, .. } => {
                let a = live_stmts(then_body, live.clone(), purity);
                let b = live_stmts(else_body, live.clone(), purity);
                live = a.union(&b).copied().collect();
                live_in_expr(cond, purity);
                expr_uses(cond, &mut live);
            }
            Stmt::While { cond, body, .. } => {
                // Iterate to a fixed point: what the body needs at its start is live
                // at the loop head, which is also live at the body's end.
                let mut head = live.clone();
                expr_uses(cond, &mut head);
                loop {
                    let mut scratch = body.to_vec();
                    let body_in = live_stmts(&mut scratch, head.clone(), purity);
                    let mut next = live.clone();
                    expr_uses(cond, &mut next);
                    next.extend(body_in);
                    if next == head {
                        break;
                    }
                    head = next;
                }
                live_stmts(body, head.clone(), purity);
                live_in_expr(cond, purity);
                live = head;
            }
            Stmt::DoWhile { body, cond, .. } => {
                let mut head = live.clone();
                loop {
                    let mut end = live.clone();
                    expr_uses(cond, &mut end);
                    end.extend(head.iter().copied());
                    let mut scratch = body.to_vec();
                    let body_in = live_stmts(&mut scratch, end, purity);
                    if body_in == head {
                        break;
                    }
                    head = body_in;
                }
                let mut end = live.clone();
                expr_uses(cond, &mut end);
                end.extend(head.iter().copied());
                live_in_expr(cond, purity);
                live = live_stmts(body, end, purity);
            }
            Stmt::Return { values, .. } => {
                live = HashSet::default();
                for v in values.iter_mut() {
                    live_in_expr(v, purity);
                    expr_uses(v, &mut live);
                }
            }
            Stmt::Eval { expr, .. } => {
                live_in_expr(expr, purity);
                expr_uses(expr, &mut live);
            }
        }
    }
    live
}

/// Runs liveness inside the with-loop bodies nested in an expression.
fn live_in_expr(e: &mut Expr, purity: &[bool]) {
    match &mut e.kind {
        ExprKind::With(w) => {
            for p in &mut w.parts {
                let mut out = HashSet::default();
                for r in &mut p.results {
                    live_in_expr(r, purity);
                    expr_uses(r, &mut out);
                }
                live_stmts(&mut p.body, out, purity);
            }
            for op in &mut w.ops {
                match op {
                    WithOp::Genarray { shape, default, .. } => {
                        live_in_expr(shape, purity);
                        if let Some(d) = default {
                            live_in_expr(d, purity);
                        }
                    }
                    WithOp::Modarray { array, .. } => live_in_expr(array, purity),
                    WithOp::Fold { neutral, .. } => live_in_expr(neutral, purity),
                    WithOp::FoldFix { neutral, fixpoint, .. } => {
                        live_in_expr(neutral, purity);
                        live_in_expr(fixpoint, purity);
                    }
                }
            }
        }
        ExprKind::Call { args, .. } | ExprKind::Prim { args, .. } | ExprKind::Array(args) => {
            args.iter_mut().for_each(|a| live_in_expr(a, purity))
        }
        ExprKind::And(a, b) | ExprKind::Or(a, b) => {
            live_in_expr(a, purity);
            live_in_expr(b, purity);
        }
        ExprKind::Cond { cond, then_expr, else_expr } => {
            live_in_expr(cond, purity);
            live_in_expr(then_expr, purity);
            live_in_expr(else_expr, purity);
        }
        ExprKind::Cast { expr, .. } => live_in_expr(expr, purity),
        ExprKind::Const(_) | ExprKind::Local(_) => {}
    }
}

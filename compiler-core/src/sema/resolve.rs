//! Resolving function bodies: scopes, definite assignment, desugaring.

use crate::{HashMap, HashSet};
use std::rc::Rc;

use super::hir::{self, Callee, DotKind, Elem, ExprKind, FoldFun, FoldTarget, FunId, LocalId, LocalInfo, Prim, Stmt};
use super::types::{TypeEnv, resolve_type};
use super::{State, closest};
use crate::diagnostics::{self as codes, Diagnostic};
use crate::interp::ops::{BinOp, UnOp};
use crate::interp::value::{Elems, Scalar, Value, wrap_int};
use crate::library;
use crate::span::Span;
use crate::syntax::ast::{self, BaseType, ExprKind as A, Literal, Name, StmtKind};

pub(super) fn resolve_function(state: &mut State<'_>, id: FunId, def: &ast::FunDef, env: &TypeEnv) {
    let f = &state.functions[id.0 as usize];
    let from_library = f.is_library();
    let n_results = f.results.len();
    let mut scope = HashMap::default();
    for p in &f.params {
        scope.insert(p.name.clone(), p.local);
    }
    for (n, l) in &f.pattern_locals {
        scope.insert(n.clone(), *l);
    }
    let locals = f.locals.clone();
    let defined = vec![true; locals.len()];
    let mut assigned = HashSet::default();
    collect_assigned(&def.body.stmts, &mut assigned);
    let mut cx = Ctx {
        state,
        env,
        from_library,
        locals,
        scopes: vec![scope],
        defined,
        terminated: false,
        n_results,
        assigned_anywhere: assigned,
        reported: HashSet::default(),
        with_depth: 0,
        fun_name: def.name.clone(),
        fun_id: id,
        lost_names: def.lost_names.clone(),
    };
    let conditions: Vec<hir::Expr> = def.conditions.iter().map(|c| cx.expr(c)).collect();
    let body = cx.block(&def.body.stmts);
    if !cx.terminated && n_results > 0 && !def.syntax_errors {
        let end = Span { start: def.body.span.end.saturating_sub(1), ..def.body.span };
        cx.state.diags.push(
            Diagnostic::error(
                codes::MISSING_RETURN,
                format!("`{}` can reach its end without returning a value", def.name),
            )
            .at(end, "the function ends here")
            .with_label(def.name_span, "declared to return a value")
            .with_hint("end every path with `return …;`"),
        );
    }
    let locals = cx.locals;
    let f = Rc::make_mut(&mut state.functions[id.0 as usize]);
    f.body = body;
    f.conditions = conditions;
    f.locals = locals;
}

/// Names assigned anywhere in statements (not inside nested with-loop bodies).
fn collect_assigned(stmts: &[ast::Stmt], out: &mut HashSet<Name>) {
    for s in stmts {
        match &s.kind {
            StmtKind::Assign { targets, .. } => out.extend(targets.iter().map(|t| t.name.clone())),
            StmtKind::IndexAssign { target, .. }
            | StmtKind::OpAssign { target, .. }
            | StmtKind::Step { target, .. }
            | StmtKind::IndexStep { target, .. } => {
                out.insert(target.name.clone());
            }
            StmtKind::If { then_branch, else_branch, .. } => {
                collect_assigned(&then_branch.stmts, out);
                if let Some(e) = else_branch {
                    collect_assigned(&e.stmts, out);
                }
            }
            StmtKind::For { init, step, body, .. } => {
                collect_assigned(init, out);
                collect_assigned(step, out);
                collect_assigned(&body.stmts, out);
            }
            StmtKind::While { body, .. } | StmtKind::DoWhile { body, .. } => collect_assigned(&body.stmts, out),
            StmtKind::Decl { .. } | StmtKind::Return { .. } | StmtKind::Expr(_) | StmtKind::Error => {}
        }
    }
}

struct Ctx<'s, 'a> {
    state: &'s mut State<'a>,
    env: &'s TypeEnv,
    from_library: bool,
    locals: Vec<LocalInfo>,
    scopes: Vec<HashMap<Name, LocalId>>,
    /// Definitely assigned locals at the current point.
    defined: Vec<bool>,
    /// The current point is unreachable (after a `return`).
    terminated: bool,
    n_results: usize,
    assigned_anywhere: HashSet<Name>,
    /// Names already reported as unknown, to avoid cascades.
    reported: HashSet<Name>,
    with_depth: usize,
    fun_name: Name,
    /// The function being resolved.
    fun_id: FunId,
    /// Names a broken type pattern would have bound: not reported again as unknown.
    lost_names: Vec<Name>,
}

fn error_value() -> ExprKind {
    ExprKind::Const(Value::Scalar(Scalar::int(0)))
}

impl Ctx<'_, '_> {
    fn new_local(&mut self, name: &Name, span: Span) -> LocalId {
        let id = LocalId(self.locals.len() as u32);
        self.locals.push(LocalInfo { name: name.clone(), span, declared: None });
        self.defined.push(false);
        id
    }

    fn temp(&mut self, span: Span) -> LocalId {
        let name = Name::new(format!("_tmp{}", self.locals.len()));
        self.new_local(&name, span)
    }

    fn lookup_local(&self, name: &str) -> Option<LocalId> {
        self.scopes.iter().rev().find_map(|s| s.get(name).copied())
    }

    /// The local an assignment to `name` writes: the innermost existing binding, or a
    /// new one in the innermost scope (with-loop bodies shadow outer names).
    fn target(&mut self, name: &Name, span: Span) -> LocalId {
        let innermost = self.scopes.len() - 1;
        if let Some(&id) = self.scopes[innermost].get(name) {
            return id;
        }
        if innermost == 0 {
            let id = self.new_local(name, span);
            self.scopes[0].insert(name.clone(), id);
            return id;
        }
        let id = self.new_local(name, span);
        self.scopes[innermost].insert(name.clone(), id);
        id
    }

    fn diag(&mut self, d: Diagnostic) {
        self.state.diags.push(d);
    }

    // ------------------------------------------------------------ statements

    fn block(&mut self, stmts: &[ast::Stmt]) -> Vec<Stmt> {
        let mut out = Vec::new();
        for s in stmts {
            self.stmt(s, &mut out);
        }
        out
    }

    fn set_defined(&mut self, id: LocalId) {
        let i = id.0 as usize;
        if self.defined.len() <= i {
            self.defined.resize(i + 1, false);
        }
        self.defined[i] = true;
    }

    fn assign(&mut self, targets: Vec<LocalId>, value: hir::Expr, span: Span, out: &mut Vec<Stmt>) {
        for t in &targets {
            self.set_defined(*t);
        }
        out.push(Stmt::Assign { targets, value, live: true, span });
    }

    fn stmt(&mut self, s: &ast::Stmt, out: &mut Vec<Stmt>) {
        let span = s.span;
        match &s.kind {
            StmtKind::Decl { ty, names } => {
                let Some(ty) = resolve_type(ty, self.env, self.state.diags) else { return };
                for n in names {
                    let id = self.target(&n.name, n.span);
                    let info = &mut self.locals[id.0 as usize];
                    if let Some(prev) = &info.declared
                        && *prev != ty
                    {
                        let msg = format!("`{}` is declared as {prev} and as {ty}", n.name);
                        self.diag(Diagnostic::error(codes::TYPE_MISMATCH, msg).at(n.span, ""));
                    }
                    self.locals[id.0 as usize].declared = Some(ty.clone());
                }
            }
            StmtKind::Assign { targets, value } => {
                let v = self.expr_values(value, targets.len());
                let ids = targets.iter().map(|t| self.target(&t.name, t.span)).collect();
                self.assign(ids, v, span, out);
            }
            StmtKind::OpAssign { target, op, value } => {
                let current = self.var(&target.name, target.span);
                let rhs = self.expr(value);
                let v = self.call_named(op, target.span.to(value.span), vec![current, rhs], span);
                let id = self.target(&target.name, target.span);
                self.assign(vec![id], v, span, out);
            }
            StmtKind::Step { target, op, op_span } => {
                let current = self.var(&target.name, target.span);
                let v = self.call_named(op, *op_span, vec![current], span);
                let id = self.target(&target.name, target.span);
                self.assign(vec![id], v, span, out);
            }
            StmtKind::IndexAssign { target, index, op, value } => {
                self.index_update(
                    target,
                    index,
                    span,
                    out,
                    |cx, old| {
                        let rhs = cx.expr(value);
                        match (op, old) {
                            (Some(op), Some(old)) => cx.call_named(op, span, vec![old, rhs], span),
                            _ => rhs,
                        }
                    },
                    op.is_some(),
                );
            }
            StmtKind::IndexStep { target, index, op, op_span } => {
                self.index_update(
                    target,
                    index,
                    span,
                    out,
                    |cx, old| {
                        let old = old.expect("requested");
                        cx.call_named(op, *op_span, vec![old], span)
                    },
                    true,
                );
            }
            StmtKind::If { cond, then_branch, else_branch } => {
                let cond = self.expr(cond);
                let before = self.defined.clone();
                let then_body = self.block(&then_branch.stmts);
                let (then_defined, then_term) = (std::mem::replace(&mut self.defined, before), self.terminated);
                // Locals created in the `then` branch exist (undefined) in the `else` branch.
                self.defined.resize(self.locals.len(), false);
                self.terminated = false;
                let else_body = match else_branch {
                    Some(b) => self.block(&b.stmts),
                    None => Vec::new(),
                };
                let else_term = self.terminated;
                // Merge: what both live branches define.
                match (then_term, else_term) {
                    (true, true) => self.terminated = true,
                    (true, false) => {}
                    (false, true) => {
                        self.defined = then_defined;
                        self.terminated = false;
                    }
                    (false, false) => {
                        for (d, t) in self.defined.iter_mut().zip(then_defined.iter().chain(std::iter::repeat(&false)))
                        {
                            *d = *d && *t;
                        }
                    }
                }
                self.defined.resize(self.locals.len(), false);
                out.push(Stmt::If { cond, then_body, else_body, span });
            }
            StmtKind::While { cond, body } => {
                let cond = self.expr(cond);
                let before = self.defined.clone();
                let body = self.block(&body.stmts);
                self.restore_after_loop(before);
                out.push(Stmt::While { id: self.state.new_loop(), cond, body, span });
            }
            StmtKind::DoWhile { body, cond } => {
                let body = self.block(&body.stmts);
                let cond = self.expr(cond);
                self.terminated = false;
                out.push(Stmt::DoWhile { id: self.state.new_loop(), body, cond, span });
            }
            StmtKind::For { init, cond, step, body } => {
                for i in init {
                    self.stmt(i, out);
                }
                let cond = match cond {
                    Some(c) => self.expr(c),
                    None => hir::Expr { kind: ExprKind::Const(Value::Scalar(Scalar::Bool(true))), span },
                };
                let before = self.defined.clone();
                let mut body_stmts = self.block(&body.stmts);
                for st in step {
                    self.stmt(st, &mut body_stmts);
                }
                self.restore_after_loop(before);
                out.push(Stmt::While { id: self.state.new_loop(), cond, body: body_stmts, span });
            }
            StmtKind::Return { values } => {
                if self.with_depth > 0 {
                    self.diag(
                        Diagnostic::error(codes::BAD_WITH_LOOP, "`return` inside a with-loop body")
                            .at(span, "")
                            .with_hint("a partition's value follows the `:` after its body"),
                    );
                }
                // `return f(x);` may forward several results of `f`.
                let vals: Vec<hir::Expr> = if values.len() == 1 {
                    vec![self.expr_any(&values[0])]
                } else {
                    values.iter().map(|v| self.expr(v)).collect()
                };
                // `return f(x);` may return all of `f`'s results.
                let count = if vals.len() == 1 { self.value_count(&vals[0]) } else { Some(vals.len()) };
                if let Some(count) = count
                    && count != self.n_results
                    && !(vals.len() == 1 && self.n_results > 1 && count == 0)
                {
                    let msg = format!(
                        "`{}` returns {} value(s) but is declared with {}",
                        self.fun_name, count, self.n_results
                    );
                    self.diag(Diagnostic::error(codes::RETURN_COUNT, msg).at(span, ""));
                }
                out.push(Stmt::Return { values: vals, span });
                self.terminated = true;
            }
            StmtKind::Expr(e) => {
                let expr = self.expr_values(e, 0);
                out.push(Stmt::Eval { expr, span });
            }
            StmtKind::Error => {}
        }
    }

    fn restore_after_loop(&mut self, before: Vec<bool>) {
        // The body may run zero times: only what was defined before counts.
        let n = self.locals.len();
        self.defined = before;
        self.defined.resize(n, false);
        self.terminated = false;
    }

    /// `a[idx] = v` / `a[idx] op= v` / `a[idx]++` → `a = modarray(a, idx, v')`.
    fn index_update(
        &mut self,
        target: &ast::Target,
        index: &[ast::Expr],
        span: Span,
        out: &mut Vec<Stmt>,
        value: impl FnOnce(&mut Self, Option<hir::Expr>) -> hir::Expr,
        needs_old: bool,
    ) {
        let array = self.var(&target.name, target.span);
        let idx = self.index_expr(index, span);
        let (idx, old) = if needs_old {
            // Evaluate the index once.
            let tmp = self.temp(span);
            self.assign(vec![tmp], idx, span, out);
            let idx = hir::Expr { kind: ExprKind::Local(tmp), span };
            let old = self.call_named(&Name::new("sel"), span, vec![idx.clone(), array.clone()], span);
            (idx, Some(old))
        } else {
            (idx, None)
        };
        let v = value(self, old);
        let call = self.call_named(&Name::new("modarray"), span, vec![array, idx, v], span);
        let id = self.target(&target.name, target.span);
        self.assign(vec![id], call, span, out);
    }

    /// `[i, j]` or the single index expression of a selection.
    fn index_expr(&mut self, index: &[ast::Expr], span: Span) -> hir::Expr {
        if index.len() == 1 {
            return self.expr(&index[0]);
        }
        let elems: Vec<hir::Expr> = index.iter().map(|e| self.expr(e)).collect();
        self.array(elems, span)
    }

    // ------------------------------------------------------------ expressions

    /// How many values an expression yields, if known.
    fn value_count(&self, e: &hir::Expr) -> Option<usize> {
        match &e.kind {
            ExprKind::Call { callee, .. } => {
                let counts: HashSet<usize> = callee
                    .candidates
                    .iter()
                    .filter(|c| self.state.functions[c.0 as usize].intrinsic.is_none())
                    .map(|c| self.state.functions[c.0 as usize].results.len())
                    .collect();
                if counts.len() == 1 { counts.into_iter().next() } else { None }
            }
            ExprKind::With(w) => Some(w.ops.len()),
            _ => Some(1),
        }
    }

    /// An expression that must yield `n` values (0 for an expression statement).
    fn expr_values(&mut self, e: &ast::Expr, n: usize) -> hir::Expr {
        let v = self.expr_any(e);
        if let Some(count) = self.value_count(&v) {
            let ok = if n == 0 { true } else { count == n };
            if !ok {
                let d = if count == 0 {
                    Diagnostic::error(codes::VOID_VALUE, "this call returns no value").at(e.span, "")
                } else {
                    Diagnostic::error(
                        codes::ASSIGN_COUNT,
                        format!("{n} variable(s) on the left but {count} value(s) on the right"),
                    )
                    .at(e.span, format!("yields {count} value(s)"))
                };
                self.diag(d);
            }
        }
        v
    }

    /// A single-valued expression.
    fn expr(&mut self, e: &ast::Expr) -> hir::Expr {
        let v = self.expr_any(e);
        if let Some(count) = self.value_count(&v)
            && count != 1
        {
            let d = if count == 0 {
                Diagnostic::error(codes::VOID_VALUE, "this call returns no value, but a value is needed here")
                    .at(e.span, "")
            } else {
                Diagnostic::error(codes::ASSIGN_COUNT, format!("this yields {count} values where one is needed"))
                    .at(e.span, "")
                    .with_hint("bind the results first: `a, b = f(x);`")
            };
            self.diag(d);
        }
        v
    }

    fn expr_any(&mut self, e: &ast::Expr) -> hir::Expr {
        let span = e.span;
        let kind = match &e.kind {
            A::Lit(lit) => ExprKind::Const(self.literal(*lit, span)),
            A::Str(bytes) => ExprKind::Const(Value::Str(std::sync::Arc::from(bytes.as_slice()))),
            A::Var(name) => return self.var(name, span),
            A::Call { fun, args } => {
                let args: Vec<hir::Expr> = args.iter().map(|a| self.expr(a)).collect();
                return self.call(fun, args, span);
            }
            A::Binary { op, op_span, lhs, rhs } => {
                let args = vec![self.expr(lhs), self.expr(rhs)];
                return self.call_named(op, *op_span, args, span);
            }
            A::Unary { op, op_span, operand } => {
                let args = vec![self.expr(operand)];
                return self.call_named(op, *op_span, args, span);
            }
            A::And(a, b) => ExprKind::And(Box::new(self.expr(a)), Box::new(self.expr(b))),
            A::Or(a, b) => ExprKind::Or(Box::new(self.expr(a)), Box::new(self.expr(b))),
            A::Cond { cond, then_expr, else_expr } => ExprKind::Cond {
                cond: Box::new(self.expr(cond)),
                then_expr: Box::new(self.expr(then_expr)),
                else_expr: Box::new(self.expr(else_expr)),
            },
            A::Array(elems) => {
                let elems = elems.iter().map(|x| self.expr(x)).collect();
                return self.array(elems, span);
            }
            A::Select { array, index } => {
                let a = self.expr(array);
                let idx = self.index_expr(index, span);
                return self.call_named(&Name::new("sel"), span, vec![idx, a], span);
            }
            A::DotSelect { array, index } => {
                let mut args = vec![self.expr(array)];
                let mut kinds = Vec::new();
                let mut ellipses = 0;
                for item in index {
                    match item {
                        ast::DotIndex::Expr(x) => {
                            kinds.push(DotKind::Index);
                            args.push(self.expr(x));
                        }
                        ast::DotIndex::Dot(_) => kinds.push(DotKind::Dot),
                        ast::DotIndex::Ellipsis(s) => {
                            ellipses += 1;
                            if ellipses > 1 {
                                self.diag(
                                    Diagnostic::error(codes::BAD_DOT_SELECTION, "only one `...` per selection")
                                        .at(*s, ""),
                                );
                            }
                            kinds.push(DotKind::Ellipsis);
                        }
                    }
                }
                ExprKind::Prim { prim: Prim::DotSelect(kinds.into()), args }
            }
            A::With(w) => return self.with_loop(w),
            A::Tensor(t) => return self.tensor(t),
            A::Cast { ty, expr } => {
                let inner = self.expr(expr);
                match resolve_type(ty, self.env, self.state.diags) {
                    Some(ty) => ExprKind::Cast { ty, expr: Box::new(inner) },
                    None => error_value(),
                }
            }
            A::Error => error_value(),
        };
        hir::Expr { kind, span }
    }

    fn literal(&mut self, lit: Literal, span: Span) -> Value {
        match lit {
            Literal::Int(v, ty) => {
                let (lo, hi): (i128, i128) = match ty {
                    BaseType::Byte => (i8::MIN as i128, i8::MAX as i128),
                    BaseType::Short => (i16::MIN as i128, i16::MAX as i128),
                    BaseType::Int => (i32::MIN as i128, i32::MAX as i128),
                    BaseType::Long | BaseType::LongLong => (i64::MIN as i128, i64::MAX as i128),
                    BaseType::UByte => (0, u8::MAX as i128),
                    BaseType::UShort => (0, u16::MAX as i128),
                    BaseType::UInt => (0, u32::MAX as i128),
                    _ => (0, u64::MAX as i128),
                };
                if v < lo || v > hi {
                    self.diag(
                        Diagnostic::error(
                            codes::LITERAL_OUT_OF_RANGE,
                            format!("`{v}` does not fit in {ty} ({lo} to {hi})"),
                        )
                        .at(span, "")
                        .with_hint("a suffix picks a wider type: `l` for long, `ul` for ulong"),
                    );
                }
                let bits = if v > i64::MAX as i128 { v as u64 as i64 } else { v as i64 };
                Value::Scalar(Scalar::Int(ty, wrap_int(ty, bits)))
            }
            Literal::Real(v, BaseType::Float) => Value::Scalar(Scalar::Float(v as f32)),
            Literal::Real(v, _) => Value::Scalar(Scalar::Double(v)),
            Literal::Bool(b) => Value::Scalar(Scalar::Bool(b)),
            Literal::Char(c) => Value::Scalar(Scalar::Char(c)),
        }
    }

    /// An array literal; all-constant scalar elements fold into one constant.
    fn array(&mut self, elems: Vec<hir::Expr>, span: Span) -> hir::Expr {
        let consts: Option<Vec<Scalar>> =
            elems.iter().map(|e| if let ExprKind::Const(Value::Scalar(s)) = e.kind { Some(s) } else { None }).collect();
        if let Some(consts) = consts {
            if let Some(first) = consts.first() {
                let base = first.base();
                if let Some(other) = consts.iter().find(|s| s.base() != base) {
                    let msg = format!("array elements have different types: {base} and {}", other.base());
                    self.diag(
                        Diagnostic::error(codes::TYPE_MISMATCH, msg)
                            .at(span, "")
                            .with_hint("convert with `tod`, `toi`, …"),
                    );
                    return hir::Expr { kind: error_value(), span };
                }
                if let Ok(mut buf) = Elems::with_capacity(base, consts.len()) {
                    for s in &consts {
                        buf.push(*s);
                    }
                    return hir::Expr { kind: ExprKind::Const(Value::from_parts(vec![consts.len()], buf)), span };
                }
            } else {
                // `[]` is the empty int vector.
                return hir::Expr {
                    kind: ExprKind::Const(Value::from_parts(vec![0], Elems::Int(BaseType::Int, Vec::new()))),
                    span,
                };
            }
        }
        hir::Expr { kind: ExprKind::Array(elems), span }
    }

    fn var(&mut self, name: &Name, span: Span) -> hir::Expr {
        match self.lookup_local(name) {
            Some(id) => {
                let defined = self.defined.get(id.0 as usize).copied().unwrap_or(false);
                if !defined && !self.terminated && self.reported.insert(name.clone()) {
                    let first = self.locals[id.0 as usize].span;
                    self.diag(
                        Diagnostic::error(
                            codes::POSSIBLY_UNDEFINED,
                            format!("`{name}` may be used before it is assigned"),
                        )
                        .at(span, "used here")
                        .with_label(first, "assigned here, but not on every path to the use")
                        .with_hint(format!(
                            "give `{name}` a value on every path to this use (before the `if` or loop)"
                        )),
                    );
                }
                hir::Expr { kind: ExprKind::Local(id), span }
            }
            None => {
                if !self.lost_names.contains(name) && self.reported.insert(name.clone()) {
                    let d = if self.assigned_anywhere.contains(name) {
                        Diagnostic::error(codes::POSSIBLY_UNDEFINED, format!("`{name}` is used before it is assigned"))
                            .at(span, "used here")
                    } else {
                        let mut d = Diagnostic::error(codes::UNKNOWN_VARIABLE, format!("unknown variable `{name}`"))
                            .at(span, "");
                        if self.state.user_names.contains_key(name) || self.state.library_names.contains_key(name) {
                            d = d.with_hint(format!("`{name}` is a function; call it: `{name}(…)`"));
                        } else {
                            let names: Vec<Name> = self.scopes.iter().flat_map(|s| s.keys().cloned()).collect();
                            if let Some(best) = closest(name, names.iter().map(|n| n.as_str())) {
                                d = d.with_hint(format!("did you mean `{best}`?"));
                            }
                        }
                        d
                    };
                    self.diag(d);
                }
                hir::Expr { kind: error_value(), span }
            }
        }
    }

    fn call_named(&mut self, name: &Name, name_span: Span, args: Vec<hir::Expr>, span: Span) -> hir::Expr {
        let fun = ast::FunRef { module: None, name: name.clone(), span: name_span };
        self.call(&fun, args, span)
    }

    fn call(&mut self, fun: &ast::FunRef, args: Vec<hir::Expr>, span: Span) -> hir::Expr {
        if fun.module.is_none()
            && let Some((prim, arity)) = prim_by_name(&fun.name)
        {
            if arity != args.len() {
                let msg = format!("primitive `{}` takes {arity} argument(s), not {}", fun.name, args.len());
                self.diag(Diagnostic::error(codes::WRONG_ARITY, msg).at(span, ""));
                return hir::Expr { kind: error_value(), span };
            }
            return hir::Expr { kind: ExprKind::Prim { prim, args }, span };
        }
        match self.callee(fun, args.len()) {
            Some(callee) => hir::Expr { kind: ExprKind::Call { callee, args }, span },
            None => hir::Expr { kind: error_value(), span },
        }
    }

    /// Resolves a function name to the instances taking `arity` arguments.
    fn callee(&mut self, fun: &ast::FunRef, arity: usize) -> Option<Callee> {
        let display = match &fun.module {
            Some(m) => format!("{m}::{}", fun.name),
            None => fun.name.to_string(),
        };
        let Some(all) = self.state.lookup(fun.module.as_ref(), &fun.name, self.from_library) else {
            if let Some(m) = &fun.module
                && library::expand_module(m).is_none()
            {
                self.diag(Diagnostic::error(codes::UNKNOWN_MODULE, format!("unknown module `{m}`")).at(fun.span, ""));
                return None;
            }
            if self.reported.insert(Name::new(format!("fn {display}"))) {
                let d = self.unknown_function(fun, &display);
                self.diag(d);
            }
            return None;
        };
        let candidates: Vec<FunId> = all
            .iter()
            .copied()
            .filter(|id| {
                let f = &self.state.functions[id.0 as usize];
                f.intrinsic.is_some() || f.params.len() == arity
            })
            .collect();
        if candidates.is_empty() {
            let mut arities: Vec<usize> =
                all.iter().map(|id| self.state.functions[id.0 as usize].params.len()).collect();
            arities.sort_unstable();
            arities.dedup();
            let list = arities.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(" or ");
            let mut d =
                Diagnostic::error(codes::WRONG_ARITY, format!("`{display}` takes {list} argument(s), not {arity}"))
                    .at(fun.span, "");
            for id in all.iter().take(4) {
                let f = &self.state.functions[id.0 as usize];
                if !f.is_library() {
                    d = d.with_label(f.name_span, format!("`{}` defined here", f.signature()));
                }
            }
            // Binary `++` (concatenation) is in `Array`; the prelude has the unary one.
            if let Some(m) = self.providing_module(&fun.name) {
                d = d
                    .with_hint(format!("more instances of `{}` come from module `{m}`: add `use {m}: all;`", fun.name));
            }
            self.diag(d);
            return None;
        }
        for id in &candidates {
            self.state.enqueue(self.fun_id, *id);
        }
        let site = self.state.new_site();
        Some(Callee { name: fun.name.clone(), candidates: candidates.into(), site })
    }

    /// The module a program `use`s to get library function `name` (the
    /// library's own modules are parts of these).
    fn providing_module(&self, name: &Name) -> Option<&'static str> {
        let user_module = |m: &str| match m {
            "ArrayReduce" | "ArrayTransform" => Some("Array"),
            "ScalarIO" | "ArrayIO" | "TermFile" => Some("StdIO"),
            "Math" | "MathArray" => Some("Math"),
            "Constants" => Some("Constants"),
            _ => None,
        };
        self.state.providers.get(name)?.iter().find_map(|m| user_module(m))
    }

    fn unknown_function(&self, fun: &ast::FunRef, display: &str) -> Diagnostic {
        let is_op = crate::syntax::parser::is_operator_symbol(&fun.name);
        let what =
            if is_op { format!("no operator `{display}` is defined") } else { format!("unknown function `{display}`") };
        let mut d = Diagnostic::error(codes::UNKNOWN_FUNCTION, what).at(fun.span, "");
        if self.state.providers.contains_key(&fun.name) {
            if let Some(m) = self.providing_module(&fun.name) {
                return d.with_hint(format!("`{}` comes from module `{m}`: add `use {m}: all;`", fun.name));
            }
            return d.with_hint(format!(
                "`{}` is part of the prelude, which is switched off (`--noprelude`); define it or `use Array: all;`",
                fun.name
            ));
        }
        if fun.name.starts_with('_') && fun.name.ends_with('_') {
            return d.with_note("this is not one of the primitive functions withloop knows");
        }
        if self.lookup_local(&fun.name).is_some() {
            return d.with_hint(format!("`{}` is a variable; select from it with `{}[…]`", fun.name, fun.name));
        }
        let names: Vec<&str> = self
            .state
            .user_names
            .keys()
            .map(|n| n.as_str())
            .filter(|n| n.starts_with(|c: char| c.is_alphabetic() || c == '_'))
            .collect();
        if let Some(best) = closest(&fun.name, names.into_iter()) {
            d = d.with_hint(format!("did you mean `{best}`?"));
        }
        d
    }

    // ------------------------------------------------------------ with-loops

    fn with_loop(&mut self, w: &ast::WithLoop) -> hir::Expr {
        let ops: Vec<hir::WithOp> = w.ops.iter().map(|op| self.with_op(op)).collect();
        let mut parts = Vec::new();
        for part in &w.parts {
            let g = &part.generator;
            let lower = g.lower.as_ref().map(|(b, r)| (self.bound(b), *r));
            let upper = (g.upper.0, self.bound(&g.upper.1));
            let step = g.step.as_ref().map(|e| self.expr(e));
            let width = g.width.as_ref().map(|e| self.expr(e));
            let (index_vector, index_scalars, body, results) =
                self.in_part_scope(&g.index, &part.body, |cx| part.results.iter().map(|r| cx.expr(r)).collect());
            // One value per operator (`(a, b)` for a with-loop of two).
            if !w.ops.is_empty() && part.results.len() != w.ops.len() {
                let span = match (part.results.first(), part.results.last()) {
                    (Some(a), Some(b)) => a.span.to(b.span),
                    _ => part.span,
                };
                self.diag(
                    Diagnostic::error(
                        codes::BAD_WITH_LOOP,
                        format!(
                            "this partition yields {} value(s) but the with-loop has {} operator(s)",
                            part.results.len(),
                            w.ops.len()
                        ),
                    )
                    .at(span, "")
                    .with_hint("a with-loop of several operators takes one value per operator: `(a, b)`"),
                );
            }
            parts.push(hir::WithPart {
                lower,
                upper,
                step,
                width,
                index_vector,
                index_scalars,
                body,
                results,
                generator_span: g.span,
                span: part.span,
            });
        }
        let cell_hint = w
            .ops
            .iter()
            .find_map(|op| match op {
                ast::WithOp::Genarray { default: Some(d), .. } => literal_base(d),
                _ => None,
            })
            .or_else(|| w.parts.iter().find_map(|p| p.results.first().and_then(literal_base)));
        let with = hir::With { id: self.state.new_with(), parts, ops, span: w.span, cell_hint, first_match: false };
        hir::Expr { kind: ExprKind::With(Box::new(with)), span: w.span }
    }

    /// Resolves a partition's index, body and results in a fresh scope.
    fn in_part_scope<R>(
        &mut self,
        index: &ast::IndexPattern,
        body: &[ast::Stmt],
        results: impl FnOnce(&mut Self) -> R,
    ) -> (Option<LocalId>, Option<Vec<LocalId>>, Vec<Stmt>, R) {
        self.scopes.push(HashMap::default());
        self.with_depth += 1;
        let saved_term = self.terminated;
        let index_vector = index.vector.as_ref().map(|t| {
            let id = self.target(&t.name, t.span);
            self.set_defined(id);
            id
        });
        let index_scalars = index.scalars.as_ref().map(|ts| {
            ts.iter()
                .map(|t| {
                    let id = self.target(&t.name, t.span);
                    self.set_defined(id);
                    id
                })
                .collect::<Vec<_>>()
        });
        // Outer variables the body reassigns get a local copy first, so loops inside
        // the body update the copy.
        let mut assigned = HashSet::default();
        collect_assigned(body, &mut assigned);
        let mut names: Vec<&Name> = assigned.iter().collect();
        names.sort();
        let mut stmts = Vec::new();
        for name in names {
            if self.scopes.last().is_some_and(|s| s.contains_key(name)) {
                continue;
            }
            if let Some(outer) = self.lookup_local(name) {
                let span = self.locals[outer.0 as usize].span;
                let is_defined = self.defined.get(outer.0 as usize).copied().unwrap_or(false);
                let inner = self.target(name, span);
                if is_defined {
                    stmts.push(Stmt::Assign {
                        targets: vec![inner],
                        value: hir::Expr { kind: ExprKind::Local(outer), span },
                        live: true,
                        span,
                    });
                    self.set_defined(inner);
                }
            }
        }
        for s in body {
            self.stmt(s, &mut stmts);
        }
        let r = results(self);
        self.terminated = saved_term;
        self.with_depth -= 1;
        self.scopes.pop();
        (index_vector, index_scalars, stmts, r)
    }

    fn bound(&mut self, b: &ast::Bound) -> hir::Bound {
        match b {
            ast::Bound::Dot(s) => hir::Bound::Dot(*s),
            ast::Bound::Expr(e) => hir::Bound::Expr(self.expr(e)),
        }
    }

    fn with_op(&mut self, op: &ast::WithOp) -> hir::WithOp {
        match op {
            ast::WithOp::Genarray { shape, default, span } => hir::WithOp::Genarray {
                shape: self.expr(shape),
                default: default.as_ref().map(|d| self.expr(d)),
                span: *span,
            },
            ast::WithOp::Modarray { array, span } => hir::WithOp::Modarray { array: self.expr(array), span: *span },
            ast::WithOp::Fold { fun, neutral, span } => {
                let neutral = self.expr(neutral);
                hir::WithOp::Fold { fun: self.fold_fun(fun), neutral, span: *span }
            }
            ast::WithOp::FoldFix { fun, neutral, fixpoint, span } => {
                let neutral = self.expr(neutral);
                let fixpoint = self.expr(fixpoint);
                hir::WithOp::FoldFix { fun: self.fold_fun(fun), neutral, fixpoint, span: *span }
            }
        }
    }

    fn fold_fun(&mut self, f: &ast::FoldFun) -> FoldFun {
        let partial: Vec<hir::Expr> = f.partial_args.iter().map(|a| self.expr(a)).collect();
        let arity = partial.len() + 2;
        if f.fun.module.is_none()
            && let Some((prim, n)) = prim_by_name(&f.fun.name)
        {
            if n != arity {
                let msg = format!("fold function `{}` must take two arguments", f.fun.name);
                self.diag(Diagnostic::error(codes::BAD_FOLD_FUNCTION, msg).at(f.fun.span, ""));
            }
            return FoldFun { target: FoldTarget::Prim(prim), partial, span: f.fun.span };
        }
        match self.callee(&f.fun, arity) {
            Some(callee) => FoldFun { target: FoldTarget::Call(callee), partial, span: f.fun.span },
            None => FoldFun { target: FoldTarget::Prim(Prim::Bin(BinOp::Add)), partial, span: f.fun.span },
        }
    }

    // ------------------------------------------------------------ tensor comprehensions

    /// `{ P -> e | lb <= P < ub }` becomes `with { (lb <= P < ub) : e; } : genarray(frame)`,
    /// parts tried in order; bounds left out are inferred from selections in `e`.
    fn tensor(&mut self, t: &ast::TensorComprehension) -> hir::Expr {
        let span = t.span;
        let has_dots = t.parts.iter().any(|p| matches!(&p.pattern, ast::TensorPattern::Elems(es) if es.iter().any(|e| !matches!(e, ast::FrameElem::Var(_)))));
        if has_dots && t.parts.len() > 1 {
            self.diag(
                Diagnostic::error(
                    codes::UNSUPPORTED,
                    "frame patterns with `.` or `...` are supported in single-part comprehensions only",
                )
                .at(span, ""),
            );
            return hir::Expr { kind: error_value(), span };
        }
        // Upper bounds (explicit or inferred) per part.
        let mut uppers: Vec<Option<hir::Expr>> = Vec::new();
        for p in &t.parts {
            let up = match &p.upper {
                Some((rel, e)) => {
                    let ub = self.expr(e);
                    Some(match rel {
                        ast::Rel::Lt => ub,
                        // `iv <= ub` covers ub too: the frame is ub + 1.
                        ast::Rel::Le => hir::Expr {
                            kind: ExprKind::Prim { prim: Prim::Bin(BinOp::Add), args: vec![ub, int_const(1, e.span)] },
                            span: e.span,
                        },
                    })
                }
                None => self.infer_tensor_bound(p),
            };
            uppers.push(up);
        }
        let available: Vec<hir::Expr> = uppers.iter().flatten().cloned().collect();
        let frame = match available.len() {
            0 => {
                self.diag(
                    Diagnostic::error(
                        codes::BAD_TENSOR_COMPREHENSION,
                        "cannot tell the shape of this tensor comprehension",
                    )
                    .at(span, "")
                    .with_note("bounds are inferred only from selections `a[i]` of arrays defined outside")
                    .with_hint("give the bounds explicitly: `{ [i] -> e | [i] < [n] }`"),
                );
                return hir::Expr { kind: error_value(), span };
            }
            1 => available.into_iter().next().expect("one"),
            _ => hir::Expr { kind: ExprKind::Prim { prim: Prim::MaxVectors, args: available }, span },
        };
        let mut parts = Vec::new();
        for (p, up) in t.parts.iter().zip(uppers) {
            let (index, frame_kinds) = match &p.pattern {
                ast::TensorPattern::Vector(v) => {
                    (ast::IndexPattern { vector: Some(v.clone()), scalars: None, span: v.span }, None)
                }
                ast::TensorPattern::Elems(es) => {
                    let vars: Vec<ast::Target> = es
                        .iter()
                        .filter_map(|e| if let ast::FrameElem::Var(v) = e { Some(v.clone()) } else { None })
                        .collect();
                    let kinds = dot_kinds(es);
                    (ast::IndexPattern { vector: None, scalars: Some(vars), span: p.span }, Some(kinds))
                }
            };
            let _ = frame_kinds;
            let lower = p.lower.as_ref().map(|(e, rel)| (hir::Bound::Expr(self.expr(e)), *rel));
            let upper = match (up, &p.upper) {
                (Some(u), _) => (ast::Rel::Lt, hir::Bound::Expr(u)),
                (None, _) => (ast::Rel::Le, hir::Bound::Dot(p.span)),
            };
            let step = p.step.as_ref().map(|e| self.expr(e));
            let width = p.width.as_ref().map(|e| self.expr(e));
            let (index_vector, index_scalars, body, results) =
                self.in_part_scope(&index, &[], |cx| vec![cx.expr_any(&p.body)]);
            parts.push(hir::WithPart {
                lower,
                upper,
                step,
                width,
                index_vector,
                index_scalars,
                body,
                results,
                generator_span: p.span,
                span: p.span,
            });
        }
        // A body yielding several values (a call of a function with several results)
        // makes a comprehension with several results.
        let counts: Vec<Option<usize>> =
            parts.iter().map(|p| p.results.first().and_then(|r| self.value_count(r))).collect();
        let n_results = counts.iter().flatten().copied().max().unwrap_or(1).max(1);
        if counts.iter().any(|c| c.is_some_and(|c| c != n_results)) {
            self.diag(
                Diagnostic::error(
                    codes::BAD_TENSOR_COMPREHENSION,
                    "the parts of this comprehension yield different numbers of values",
                )
                .at(span, ""),
            );
        }
        if n_results > 1 && has_dots {
            self.diag(
                Diagnostic::error(
                    codes::UNSUPPORTED,
                    "frame patterns with `.` or `...` are supported for single-result comprehensions only",
                )
                .at(span, ""),
            );
            return hir::Expr { kind: error_value(), span };
        }
        let ops = (0..n_results).map(|_| hir::WithOp::Genarray { shape: frame.clone(), default: None, span }).collect();
        let with = hir::With {
            id: self.state.new_with(),
            parts,
            ops,
            span,
            cell_hint: t.parts.first().and_then(|p| literal_base(&p.body)),
            first_match: true,
        };
        let mut result = hir::Expr { kind: ExprKind::With(Box::new(with)), span };
        if has_dots && let Some(ast::TensorPart { pattern: ast::TensorPattern::Elems(es), .. }) = t.parts.first() {
            let kinds = dot_kinds(es);
            result =
                hir::Expr { kind: ExprKind::Prim { prim: Prim::FrameArrange(kinds.into()), args: vec![result] }, span };
        }
        result
    }

    /// The frame of a comprehension part from selections `X[i]`, `X[[j, i]]`, `X[iv]`
    /// in its body, where `X` does not depend on the frame's variables: the minimum
    /// over the extents found.
    fn infer_tensor_bound(&mut self, p: &ast::TensorPart) -> Option<hir::Expr> {
        let span = p.span;
        let (vars, vector): (Vec<Name>, bool) = match &p.pattern {
            ast::TensorPattern::Vector(v) => (vec![v.name.clone()], true),
            ast::TensorPattern::Elems(es) => (
                es.iter()
                    .filter_map(|e| if let ast::FrameElem::Var(v) = e { Some(v.name.clone()) } else { None })
                    .collect(),
                false,
            ),
        };
        let mut found: Vec<(usize, Option<usize>, ast::Expr)> = Vec::new(); // (var index, axis or whole, array)
        collect_selections(&p.body, &vars, &mut found);
        let shape_of = |cx: &mut Self, array: &ast::Expr| -> hir::Expr {
            let a = cx.expr(array);
            hir::Expr { kind: ExprKind::Prim { prim: Prim::Shape, args: vec![a] }, span }
        };
        if vector {
            let shapes: Vec<hir::Expr> = found
                .iter()
                .filter(|(_, axis, _)| axis.is_none())
                .map(|(_, _, a)| a.clone())
                .collect::<Vec<_>>()
                .iter()
                .map(|a| shape_of(self, a))
                .collect();
            return match shapes.len() {
                0 => None,
                1 => shapes.into_iter().next(),
                _ => Some(hir::Expr { kind: ExprKind::Prim { prim: Prim::MinVectors, args: shapes }, span }),
            };
        }
        let mut extents = Vec::new();
        for (k, _) in vars.iter().enumerate() {
            let mut cands = Vec::new();
            for (v, axis, array) in &found {
                if *v != k {
                    continue;
                }
                let Some(axis) = axis else { continue };
                let shp = shape_of(self, array);
                let sel = hir::Expr {
                    kind: ExprKind::Prim {
                        prim: Prim::Sel,
                        args: vec![hir::Expr { kind: ExprKind::Const(Value::int_vector(&[*axis as i64])), span }, shp],
                    },
                    span,
                };
                cands.push(hir::Expr { kind: ExprKind::Array(vec![sel]), span });
            }
            match cands.len() {
                0 => return None,
                1 => extents.push(cands.into_iter().next().expect("one")),
                _ => extents.push(hir::Expr { kind: ExprKind::Prim { prim: Prim::MinVectors, args: cands }, span }),
            }
        }
        // Concatenate the one-element extents into the frame vector.
        let mut it = extents.into_iter();
        let first = it.next()?;
        Some(it.fold(first, |acc, e| hir::Expr { kind: ExprKind::Prim { prim: Prim::Cat, args: vec![acc, e] }, span }))
    }
}

fn int_const(v: i64, span: Span) -> hir::Expr {
    hir::Expr { kind: ExprKind::Const(Value::Scalar(Scalar::int(v))), span }
}

/// The base type of a literal expression, if it is one.
fn literal_base(e: &ast::Expr) -> Option<BaseType> {
    match &e.kind {
        A::Lit(Literal::Int(_, t)) | A::Lit(Literal::Real(_, t)) => Some(*t),
        A::Lit(Literal::Bool(_)) => Some(BaseType::Bool),
        A::Lit(Literal::Char(_)) => Some(BaseType::Char),
        A::Cast { ty, .. } => match ty.name {
            ast::TypeName::Base(b) => Some(b),
            _ => None,
        },
        _ => None,
    }
}

/// Whether an expression mentions any of `names` as a variable.
fn mentions(e: &ast::Expr, names: &[Name]) -> bool {
    let mut found = false;
    visit_vars(e, &mut |n| {
        if names.contains(n) {
            found = true;
        }
    });
    found
}

fn visit_vars(e: &ast::Expr, f: &mut dyn FnMut(&Name)) {
    match &e.kind {
        A::Var(n) => f(n),
        A::Call { args, .. } => args.iter().for_each(|a| visit_vars(a, f)),
        A::Binary { lhs, rhs, .. } | A::And(lhs, rhs) | A::Or(lhs, rhs) => {
            visit_vars(lhs, f);
            visit_vars(rhs, f);
        }
        A::Unary { operand, .. } | A::Cast { expr: operand, .. } => visit_vars(operand, f),
        A::Cond { cond, then_expr, else_expr } => {
            visit_vars(cond, f);
            visit_vars(then_expr, f);
            visit_vars(else_expr, f);
        }
        A::Array(es) => es.iter().for_each(|a| visit_vars(a, f)),
        A::Select { array, index } => {
            visit_vars(array, f);
            index.iter().for_each(|a| visit_vars(a, f));
        }
        A::DotSelect { array, index } => {
            visit_vars(array, f);
            for i in index {
                if let ast::DotIndex::Expr(x) = i {
                    visit_vars(x, f);
                }
            }
        }
        // Conservatively: anything inside nested loops counts as mentioned.
        A::With(_) | A::Tensor(_) => f(&Name::new("\u{0}nested")),
        A::Lit(_) | A::Str(_) | A::Error => {}
    }
}

/// Finds `X[v]`, `X[.., v, ..]`, `X[[.., v, ..]]` where `v` is one of `vars` used
/// bare as an index component and `X` does not mention any of `vars`.
fn collect_selections(e: &ast::Expr, vars: &[Name], out: &mut Vec<(usize, Option<usize>, ast::Expr)>) {
    if let A::Select { array, index } = &e.kind
        && !mentions(array, vars)
    {
        let items: Vec<&ast::Expr> = match index.as_slice() {
            [single] => match &single.kind {
                A::Array(es) => es.iter().collect(),
                A::Var(n) => {
                    if let Some(k) = vars.iter().position(|v| v == n) {
                        // `X[iv]` for a vector frame, or `X[i]` for a scalar one.
                        out.push((k, None, (**array).clone()));
                        out.push((k, Some(0), (**array).clone()));
                    }
                    Vec::new()
                }
                _ => Vec::new(),
            },
            many => many.iter().collect(),
        };
        for (axis, item) in items.iter().enumerate() {
            if let A::Var(n) = &item.kind
                && let Some(k) = vars.iter().position(|v| v == n)
            {
                out.push((k, Some(axis), (**array).clone()));
            }
        }
    }
    match &e.kind {
        A::Call { args, .. } => args.iter().for_each(|a| collect_selections(a, vars, out)),
        A::Binary { lhs, rhs, .. } | A::And(lhs, rhs) | A::Or(lhs, rhs) => {
            collect_selections(lhs, vars, out);
            collect_selections(rhs, vars, out);
        }
        A::Unary { operand, .. } | A::Cast { expr: operand, .. } => collect_selections(operand, vars, out),
        A::Cond { cond, then_expr, else_expr } => {
            collect_selections(cond, vars, out);
            collect_selections(then_expr, vars, out);
            collect_selections(else_expr, vars, out);
        }
        A::Array(es) => es.iter().for_each(|a| collect_selections(a, vars, out)),
        A::Select { array, index } => {
            collect_selections(array, vars, out);
            index.iter().for_each(|a| collect_selections(a, vars, out));
        }
        _ => {}
    }
}

/// The primitive a `_name_` denotes, with its arity.
pub fn prim_by_name(name: &str) -> Option<(Prim, usize)> {
    let inner = name.strip_prefix('_')?.strip_suffix('_')?;
    let fixed = match inner {
        "dim_A" => Some((Prim::Dim, 1)),
        "shape_A" => Some((Prim::Shape, 1)),
        "size_A" => Some((Prim::Size, 1)),
        "sel_VxA" => Some((Prim::Sel, 2)),
        "modarray_AxVxS" | "modarray_AxVxA" => Some((Prim::Modarray, 3)),
        "reshape_VxA" => Some((Prim::Reshape, 2)),
        "genarray_VxA" => Some((Prim::Genarray, 2)),
        "cat_VxV" => Some((Prim::Cat, 2)),
        "take_SxV" => Some((Prim::Take, 2)),
        "drop_SxV" => Some((Prim::Drop, 2)),
        "hideValue_SxA" => Some((Prim::Hide(hir::Hidden::Value), 2)),
        "hideShape_SxA" => Some((Prim::Hide(hir::Hidden::Shape), 2)),
        "hideDim_SxA" => Some((Prim::Hide(hir::Hidden::Dim), 2)),
        "vect2offset" => Some((Prim::Vect2Offset, 2)),
        "idx_sel" => Some((Prim::IdxSel, 2)),
        "idx_modarray_AxSxS" => Some((Prim::IdxModarray, 3)),
        "all_V" => Some((Prim::All, 1)),
        "print_S" => Some((Prim::PrintScalar, 1)),
        "print_A" => Some((Prim::PrintArray, 1)),
        "show_S" => Some((Prim::Show, 1)),
        "puts_S" => Some((Prim::Puts, 1)),
        "error_S" => Some((Prim::Error, 1)),
        _ => None,
    };
    if fixed.is_some() {
        return fixed;
    }
    let (op, shapes) = inner.rsplit_once('_')?;
    if let Some(f) = hir::MathFn::from_name(op) {
        let ok = match f.arity() {
            1 => matches!(shapes, "S" | "V"),
            _ => matches!(shapes, "SxS" | "SxV" | "VxS" | "VxV"),
        };
        return ok.then_some((Prim::Math(f), f.arity()));
    }
    match shapes {
        "SxS" | "SxV" | "VxS" | "VxV" => {
            let bin = match op {
                "add" => BinOp::Add,
                "sub" => BinOp::Sub,
                "mul" => BinOp::Mul,
                "div" => BinOp::Div,
                "mod" => BinOp::Mod,
                "aplmod" => BinOp::AplMod,
                "min" => BinOp::Min,
                "max" => BinOp::Max,
                "eq" => BinOp::Eq,
                "neq" => BinOp::Ne,
                "lt" => BinOp::Lt,
                "le" => BinOp::Le,
                "gt" => BinOp::Gt,
                "ge" => BinOp::Ge,
                "and" => BinOp::And,
                "or" => BinOp::Or,
                "bitand" => BinOp::BitAnd,
                "bitor" => BinOp::BitOr,
                "bitxor" => BinOp::BitXor,
                "shl" => BinOp::Shl,
                "shr" => BinOp::Shr,
                _ => return None,
            };
            Some((Prim::Bin(bin), 2))
        }
        "S" | "V" => {
            let un = match op {
                "neg" => Prim::Un(UnOp::Neg),
                "abs" => Prim::Un(UnOp::Abs),
                "not" => Prim::Un(UnOp::Not),
                "bitnot" => Prim::Un(UnOp::BitNot),
                "toi" => Prim::Conv(BaseType::Int),
                "tof" => Prim::Conv(BaseType::Float),
                "tod" => Prim::Conv(BaseType::Double),
                "toc" => Prim::Conv(BaseType::Char),
                "tobool" => Prim::Conv(BaseType::Bool),
                "tob" => Prim::Conv(BaseType::Byte),
                "tos" => Prim::Conv(BaseType::Short),
                "tol" => Prim::Conv(BaseType::Long),
                "toll" => Prim::Conv(BaseType::LongLong),
                "toub" => Prim::Conv(BaseType::UByte),
                "tous" => Prim::Conv(BaseType::UShort),
                "toui" => Prim::Conv(BaseType::UInt),
                "toul" => Prim::Conv(BaseType::ULong),
                "toull" => Prim::Conv(BaseType::ULongLong),
                _ => return None,
            };
            Some((un, 1))
        }
        _ => None,
    }
}

#[allow(dead_code)]
fn elem_of(ty: &hir::Type) -> Option<BaseType> {
    match ty.elem {
        Elem::Base(b) => Some(b),
        Elem::String => None,
    }
}

/// What each element of a tensor comprehension's frame pattern is: an index
/// variable, a dot (a free axis) or an ellipsis.
fn dot_kinds(es: &[ast::FrameElem]) -> Vec<DotKind> {
    es.iter()
        .map(|e| match e {
            ast::FrameElem::Var(_) => DotKind::Index,
            ast::FrameElem::Dot(_) => DotKind::Dot,
            ast::FrameElem::Ellipsis(_) => DotKind::Ellipsis,
        })
        .collect()
}

//! L0's type checker and uniqueness checker (seed 004 §2–3).
//!
//! Types are explicit (no inference): every expression's type follows from its
//! parts, and the checker records it for the lowering ([`Checked::types`]).
//! Alongside types it tracks, per tuple leaf, the set of variables a value may
//! alias (§3.1), which variables have been consumed and where, and the
//! observations of the current *sequence* (the stretch between two binding
//! constructs, §3.2). The rules:
//!
//! * a let-with source and an argument for a `*[t]` parameter must be unique
//!   (E0401); they consume every variable they alias;
//! * nothing consumed, nor anything aliasing it, is used afterwards (rule 1, E0400),
//!   nor elsewhere in the same sequence (E0403);
//! * a function returning `*[t]` returns nothing aliasing a non-unique
//!   parameter (rule 2, E0402); its callers then own the result (rule 3);
//! * loop bodies and SOAC functions run repeatedly, so they consume only their
//!   own variables (E0404); curried SOAC arguments never go to unique
//!   parameters.
//!
//! Aliasing: a row `a[i]`, `transpose`, `reshape`, `split`, `zip`/`unzip`, `let b = a`
//! alias their source; `copy`, `iota`, `replicate`, `concat`, SOAC results and
//! calls returning `*[t]` are fresh; other calls alias their non-consumed
//! arguments. Literal arrays are never unique.

use crate::HashMap;
use std::collections::BTreeSet;

use super::ast::*;
use crate::diagnostics::{self as codes, Code, Diagnostic, Diagnostics};
use crate::span::Span;
use crate::syntax::ast::Name;

/// The checker's result: every expression's type (keyed by the expression's
/// address in the program, which the lowering walks unchanged).
#[derive(Debug, Default)]
pub struct Checked {
    pub types: HashMap<usize, Type>,
}

impl Checked {
    pub fn ty(&self, e: &Expr) -> &Type {
        &self.types[&(e as *const Expr as usize)]
    }

    /// The type of `e`, if `e` is an expression of the checked program.
    pub fn try_ty(&self, e: &Expr) -> Option<&Type> {
        self.types.get(&(e as *const Expr as usize))
    }
}

/// Built-in functions with a fixed signature on scalars.
pub fn math_builtin(name: &str) -> Option<(Vec<Type>, Type)> {
    let real1 = || Some((vec![Type::Real], Type::Real));
    match name {
        "sqrt" | "exp" | "log" | "sin" | "cos" | "tan" | "asin" | "acos" | "atan" | "floor" | "ceil" | "log10"
        | "log2" => real1(),
        "toReal" | "toFloat" => Some((vec![Type::Int], Type::Real)),
        "trunc" | "toInt" => Some((vec![Type::Real], Type::Int)),
        _ => None,
    }
}

/// Structural built-ins: reserved names.
pub const STRUCTURAL: &[&str] =
    &["iota", "replicate", "size", "reshape", "transpose", "split", "concat", "zip", "unzip", "copy", "abs"];

type VarId = usize;

struct Var {
    name: Name,
    ty: Type,
    /// Per leaf of `ty`: the variables this one may alias (itself included).
    aliases: Vec<BTreeSet<VarId>>,
    span: Span,
    /// Loop/lambda nesting level at the binding.
    level: usize,
}

/// An expression's type and, per leaf, what it may alias.
#[derive(Clone, Debug)]
struct Val {
    ty: Type,
    aliases: Vec<BTreeSet<VarId>>,
}

impl Val {
    fn fresh(ty: Type) -> Val {
        let n = ty.leaves().len();
        Val { ty, aliases: vec![BTreeSet::new(); n] }
    }

    fn all_aliases(&self) -> BTreeSet<VarId> {
        self.aliases.iter().flatten().copied().collect()
    }
}

/// A signature: parameter types and result type.
#[derive(Clone, Debug)]
struct Sig {
    params: Vec<Type>,
    ret: Type,
}

/// Checks a program; errors go to `diags`.
pub fn check(program: &Program, diags: &mut Diagnostics) -> Checked {
    let mut sigs: HashMap<Name, (Sig, Span)> = HashMap::default();
    // Functions with a syntax error in their body count as defined: their
    // calls are checked against their headers.
    let mut all: Vec<_> = program.headers().collect();
    all.sort_by_key(|(_, span, ..)| span.start);
    for (name, name_span, params, ret) in all {
        if STRUCTURAL.contains(&name.as_str()) && name != "abs" {
            diags.push(
                Diagnostic::error(codes::DUPLICATE_DEFINITION, format!("`{name}` is a built-in function of L0"))
                    .at(name_span, "cannot be redefined"),
            );
            continue;
        }
        if let Some((_, prev)) = sigs.get(name) {
            diags.push(
                Diagnostic::error(codes::DUPLICATE_DEFINITION, format!("`{name}` is defined twice"))
                    .at(name_span, "second definition")
                    .with_label(*prev, "first definition")
                    .with_hint("L0 has no overloading: rename one of them"),
            );
            continue;
        }
        let sig = Sig { params: params.iter().map(|p| p.ty.clone()).collect(), ret: ret.clone() };
        sigs.insert(name.clone(), (sig, name_span));
    }
    let mut checked = Checked::default();
    for f in &program.functions {
        let mut cx = Cx {
            sigs: &sigs,
            diags,
            types: &mut checked.types,
            vars: Vec::new(),
            scope: Vec::new(),
            consumed: HashMap::default(),
            observed: Vec::new(),
            level: 0,
            leafless_reported: false,
        };
        cx.function(f);
    }
    checked
}

struct Cx<'a> {
    sigs: &'a HashMap<Name, (Sig, Span)>,
    diags: &'a mut Diagnostics,
    types: &'a mut HashMap<usize, Type>,
    vars: Vec<Var>,
    scope: Vec<(Name, VarId)>,
    /// Consumed variables and where.
    consumed: HashMap<VarId, Span>,
    /// Variables observed in the current sequence.
    observed: Vec<(VarId, Span)>,
    level: usize,
    /// Whether this function's first array of empty tuples was reported.
    leafless_reported: bool,
}

/// The result of checking a SOAC's function argument.
struct FnInfo {
    params: Vec<Type>,
    ret: Type,
    /// Parameters already supplied (curried / the section's operand).
    supplied: usize,
}

impl Cx<'_> {
    fn report(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    fn lookup(&self, name: &str) -> Option<VarId> {
        self.scope.iter().rev().find(|(n, _)| n == name).map(|(_, v)| *v)
    }

    fn bind(&mut self, name: &Name, ty: Type, mut aliases: Vec<BTreeSet<VarId>>, span: Span) -> VarId {
        let id = self.vars.len();
        for (leaf, set) in ty.leaves().iter().zip(aliases.iter_mut()) {
            if leaf.rank() > 0 {
                set.insert(id);
            }
        }
        self.vars.push(Var { name: name.clone(), ty, aliases, span, level: self.level });
        if name != "_" {
            self.scope.push((name.clone(), id));
        }
        id
    }

    fn function(&mut self, f: &FunDef) {
        let mut params = Vec::new();
        for p in &f.params {
            if params.iter().any(|(n, _): &(Name, VarId)| *n == p.name) {
                let d = err(codes::DUPLICATE_PARAMETER, p.span, format!("parameter `{}` declared twice", p.name));
                self.report(d);
            }
            let n = p.ty.leaves().len();
            let id = self.bind(&p.name, p.ty.clone(), vec![BTreeSet::new(); n], p.span);
            params.push((p.name.clone(), id));
        }
        let Some(body) = self.expr(&f.body) else { return };
        if self.rule2(f, &params, &body) {
            return;
        }
        if !body.ty.fits(&f.ret) {
            let d = mismatch(f.body.span, &f.ret, &body.ty, "the function's result");
            self.report(d.with_label(f.ret_span, "declared here"));
        }
    }

    /// Rule 2: unique results alias no non-unique parameter. Reports and
    /// returns true when violated.
    fn rule2(&mut self, f: &FunDef, params: &[(Name, VarId)], body: &Val) -> bool {
        let mut broken = false;
        for (leaf, set) in f.ret.leaves().iter().zip(&body.aliases) {
            if !leaf.is_unique() {
                continue;
            }
            for (pname, pid) in params {
                if set.contains(pid) && !self.vars[*pid].ty.is_unique() && !broken {
                    let pspan = self.vars[*pid].span;
                    let d = Diagnostic::error(
                        codes::UNIQUE_RESULT_ALIASES,
                        format!("the unique result of `{}` aliases its non-unique parameter `{pname}`", f.name),
                    )
                    .at(f.body.span, "returned here")
                    .with_label(pspan, "not unique")
                    .with_hint("return a `copy(…)`, or declare the parameter unique (`*[…]`)");
                    self.report(d);
                    broken = true;
                }
            }
        }
        broken
    }

    fn record(&mut self, e: &Expr, ty: &Type) {
        // An array of empty tuples has no leaves to carry its length in
        // (arrays of tuples are tuples of arrays, seed 004 §4).
        if !self.leafless_reported && has_leafless_array(ty) {
            self.leafless_reported = true;
            self.report(
                err(codes::UNSUPPORTED, e.span, format!("withloop cannot compile arrays of empty tuples yet (`{ty}`)"))
                    .with_hint("give the tuple a component, e.g. an `int`"),
            );
        }
        self.types.insert(e as *const Expr as usize, ty.clone());
    }

    /// Uses a variable: checks it (and its aliases) were not consumed.
    fn use_var(&mut self, id: VarId, span: Span) {
        let aliases: BTreeSet<VarId> = self.vars[id].aliases.iter().flatten().copied().chain([id]).collect();
        for a in aliases {
            if let Some(at) = self.consumed.get(&a).copied() {
                let name = self.vars[id].name.clone();
                let what = if a == id { String::new() } else { format!(" (it aliases `{}`)", self.vars[a].name) };
                let d = Diagnostic::error(
                    codes::USE_AFTER_CONSUME,
                    format!("`{name}` is used after it was consumed{what}"),
                )
                .at(span, "used here")
                .with_label(at, "consumed here");
                self.report(d);
                return;
            }
        }
        self.observed.push((id, span));
    }

    /// Consumes everything `aliases` names: the variables and every variable
    /// aliasing them. `from` is where observations of the consumed expression
    /// itself start in `observed`.
    /// Consumes `aliases` at `span`. Uses in the same sequence before the
    /// consumption are errors: observations before `from`, and after it the
    /// ones outside `own` (the consumed argument's own; the call's other
    /// arguments are in the sequence too: `f(a, a)`).
    fn consume(&mut self, aliases: &BTreeSet<VarId>, span: Span, from: usize, own: std::ops::Range<usize>) {
        let mut hit: BTreeSet<VarId> = aliases.clone();
        for (id, v) in self.vars.iter().enumerate() {
            if v.aliases.iter().flatten().any(|a| aliases.contains(a)) {
                hit.insert(id);
            }
        }
        for &id in &hit {
            if self.vars[id].level < self.level {
                let name = self.vars[id].name.clone();
                let vspan = self.vars[id].span;
                let d = Diagnostic::error(
                    codes::CONSUMED_REPEATEDLY,
                    format!("`{name}` is bound outside this loop body or SOAC function, which may run many times, so it cannot be consumed here"),
                )
                .at(span, "consumed here")
                .with_label(vspan, "bound here")
                .with_hint("carry it through the loop (`loop (a) = …`) or update a `copy`");
                self.report(d);
                return;
            }
        }
        let before: Vec<(VarId, Span)> =
            self.observed.iter().enumerate().filter(|(i, _)| *i < from || !own.contains(i)).map(|(_, o)| *o).collect();
        for (id, at) in before {
            if hit.contains(&id) {
                let name = self.vars[id].name.clone();
                let d = Diagnostic::error(
                    codes::CONSUMED_IN_SEQUENCE,
                    format!("`{name}` is consumed and also used in the same sequence"),
                )
                .at(span, "consumed here")
                .with_label(at, "used here")
                .with_hint("bind the use with `let` first, so that the order is explicit");
                self.report(d);
                return;
            }
        }
        for id in hit {
            self.consumed.entry(id).or_insert(span);
        }
    }

    /// A new sequence (a binding construct's right-hand side or body).
    fn sequence<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> T {
        let saved = std::mem::take(&mut self.observed);
        let r = f(self);
        self.observed = saved;
        r
    }

    fn expr(&mut self, e: &Expr) -> Option<Val> {
        let v = self.expr_inner(e)?;
        self.record(e, &v.ty);
        Some(v)
    }

    fn int_arg(&mut self, e: &Expr, what: &str) -> Option<()> {
        let v = self.expr(e)?;
        if v.ty != Type::Int {
            let d = mismatch(e.span, &Type::Int, &v.ty, what);
            self.report(d);
            return None;
        }
        Some(())
    }

    fn static_int(&mut self, e: &Expr, what: &str) -> Option<i64> {
        let v = match &e.kind {
            ExprKind::Int(v) => Some(*v),
            ExprKind::Neg(inner) => match inner.kind {
                ExprKind::Int(v) => Some(-v),
                _ => None,
            },
            _ => None,
        };
        self.record(e, &Type::Int);
        if v.is_none() {
            let d = err(codes::BAD_STATIC_ARGUMENT, e.span, format!("{what} must be an integer literal"));
            self.report(d);
        }
        v
    }

    fn expr_inner(&mut self, e: &Expr) -> Option<Val> {
        let span = e.span;
        match &e.kind {
            ExprKind::Int(_) => Some(Val::fresh(Type::Int)),
            ExprKind::Real(_) => Some(Val::fresh(Type::Real)),
            ExprKind::Bool(_) => Some(Val::fresh(Type::Bool)),
            ExprKind::Char(_) => Some(Val::fresh(Type::Char)),
            ExprKind::Var(name) => {
                let Some(id) = self.lookup(name) else {
                    let d = err(codes::UNKNOWN_VARIABLE, span, format!("unknown variable `{name}`"));
                    self.report(d);
                    return None;
                };
                self.use_var(id, span);
                let v = &self.vars[id];
                Some(Val { ty: v.ty.clone(), aliases: v.aliases.clone() })
            }
            ExprKind::Tuple(items) => {
                let mut tys = Vec::new();
                let mut aliases = Vec::new();
                let mut ok = true;
                for it in items {
                    match self.expr(it) {
                        Some(v) => {
                            tys.push(v.ty);
                            aliases.extend(v.aliases);
                        }
                        None => ok = false,
                    }
                }
                ok.then_some(Val { ty: Type::Tuple(tys), aliases })
            }
            ExprKind::Array(items) => {
                if items.is_empty() {
                    let d = err(codes::TYPE_MISMATCH, span, "an empty array literal has no type")
                        .with_hint("L0 infers no types: write `iota(0)` or `replicate(0, x)`");
                    self.report(d);
                    return None;
                }
                let mut first: Option<Type> = None;
                let mut ok = true;
                for it in items {
                    let Some(v) = self.expr(it) else {
                        ok = false;
                        continue;
                    };
                    match &first {
                        None => first = Some(v.ty.shape_of()),
                        Some(t) if v.ty.shape_of() == *t => {}
                        Some(t) => {
                            let t = t.clone();
                            let d = mismatch(it.span, &t, &v.ty, "an array element");
                            self.report(d);
                            ok = false;
                        }
                    }
                }
                if ok && literal_shape(e).is_none() && shape_is_static(e, self.types) {
                    // Reported; the literal keeps its type, so that what
                    // uses it is checked without more errors.
                    let d = err(codes::IRREGULAR_LITERAL, span, "the rows of this array literal differ in shape")
                        .with_hint("L0's arrays are regular: every row must have the same length");
                    self.report(d);
                }
                ok.then(|| Val::fresh(Type::array(first.unwrap_or(Type::Int), Uniqueness::Nonunique)))
            }
            ExprKind::Bin(op, a, b) => {
                let x = self.expr(a);
                let y = self.expr(b);
                let (x, y) = (x?, y?);
                self.binop(*op, &x.ty, &y.ty, span).map(Val::fresh)
            }
            ExprKind::Neg(a) => {
                let x = self.expr(a)?;
                if !x.ty.is_numeric() {
                    let d =
                        err(codes::TYPE_MISMATCH, span, format!("`-` needs an `int` or a `real`, found `{}`", x.ty));
                    self.report(d);
                    return None;
                }
                Some(Val::fresh(x.ty))
            }
            ExprKind::Not(a) => {
                let x = self.expr(a)?;
                if x.ty != Type::Bool {
                    let d = mismatch(a.span, &Type::Bool, &x.ty, "the operand of `not`");
                    self.report(d);
                    return None;
                }
                Some(Val::fresh(Type::Bool))
            }
            ExprKind::If(c, t, f) => {
                if let Some(cv) = self.expr(c)
                    && cv.ty != Type::Bool
                {
                    let d = mismatch(c.span, &Type::Bool, &cv.ty, "the condition");
                    self.report(d);
                }
                // Consumption in one branch does not affect the other; after the
                // `if`, whatever either consumed is consumed.
                let before = self.consumed.clone();
                let tv = self.expr(t);
                let after_then = std::mem::replace(&mut self.consumed, before);
                let fv = self.expr(f);
                for (k, v) in after_then {
                    self.consumed.entry(k).or_insert(v);
                }
                let (tv, fv) = (tv?, fv?);
                if tv.ty.shape_of() != fv.ty.shape_of() {
                    let d = mismatch(f.span, &tv.ty, &fv.ty, "the `else` branch").with_label(t.span, "`then` branch");
                    self.report(d);
                    return None;
                }
                let ty = if tv.ty.fits(&fv.ty) { fv.ty.clone() } else { tv.ty.clone() };
                let aliases = tv.aliases.iter().zip(&fv.aliases).map(|(a, b)| a | b).collect();
                Some(Val { ty, aliases })
            }
            ExprKind::Index { array, array_span, indices } => {
                let Some(id) = self.lookup(array) else {
                    let d = err(codes::UNKNOWN_VARIABLE, *array_span, format!("unknown variable `{array}`"));
                    self.report(d);
                    return None;
                };
                self.use_var(id, *array_span);
                let mut ok = true;
                for i in indices {
                    ok &= self.int_arg(i, "an index").is_some();
                }
                let (ty, aliases) = (self.vars[id].ty.clone(), self.vars[id].aliases.clone());
                let mut t = ty.clone();
                for _ in indices {
                    match t.elem() {
                        Some(e) => {
                            t = e.clone().with_uniqueness(if ty.is_unique() {
                                Uniqueness::Unique
                            } else {
                                Uniqueness::Nonunique
                            })
                        }
                        None => {
                            let d = err(
                                codes::TYPE_MISMATCH,
                                span,
                                format!(
                                    "{} has type `{ty}`: {} indices are too many",
                                    if array == INDEXED {
                                        "the indexed expression".into()
                                    } else {
                                        format!("`{array}`")
                                    },
                                    indices.len()
                                ),
                            );
                            self.report(d);
                            return None;
                        }
                    }
                }
                if !ok {
                    return None;
                }
                let aliases = if t.rank() > 0 || matches!(t, Type::Tuple(_)) {
                    let all: BTreeSet<VarId> = aliases.iter().flatten().copied().collect();
                    t.leaves().iter().map(|l| if l.rank() > 0 { all.clone() } else { BTreeSet::new() }).collect()
                } else {
                    vec![BTreeSet::new()]
                };
                Some(Val { ty: t, aliases })
            }
            ExprKind::Call { fun, fun_span, args } => self.call(fun, *fun_span, args, span),
            ExprKind::Let { pat, value, body } => {
                let v = self.sequence(|cx| cx.expr(value));
                let mark = self.scope.len();
                let ok = match &v {
                    Some(v) => self.bind_pat(pat, v),
                    None => {
                        self.bind_unknown(pat);
                        false
                    }
                };
                let r = self.sequence(|cx| cx.expr(body));
                self.scope.truncate(mark);
                if ok { r } else { None }
            }
            ExprKind::LetWith { dest, dest_span, src, src_span, indices, value, body } => {
                let Some(id) = self.lookup(src) else {
                    let d = err(codes::UNKNOWN_VARIABLE, *src_span, format!("unknown variable `{src}`"));
                    self.report(d);
                    return None;
                };
                let ok = self.sequence(|cx| {
                    // The source's own occurrence, and reads of it in the new
                    // value, belong to this update.
                    let from = cx.observed.len();
                    cx.use_var(id, *src_span);
                    let mut ok = true;
                    for i in indices {
                        ok &= cx.int_arg(i, "an index").is_some();
                    }
                    let v = cx.expr(value);
                    let ty = cx.vars[id].ty.clone();
                    if !ty.is_unique() {
                        let vspan = cx.vars[id].span;
                        let d = Diagnostic::error(
                            codes::NOT_UNIQUE,
                            format!("`{src}` is updated in place, but its type `{ty}` is not unique"),
                        )
                        .at(*src_span, "the source of an in-place update must be unique")
                        .with_label(vspan, "bound here")
                        .with_hint("update a `copy(…)` of it; literal arrays and non-unique parameters are not unique");
                        cx.report(d);
                        ok = false;
                    }
                    let mut elem = ty.clone();
                    for _ in indices {
                        match elem.elem() {
                            Some(e) => elem = e.clone(),
                            None => {
                                let d = err(
                                    codes::TYPE_MISMATCH,
                                    *src_span,
                                    format!("`{src}` has type `{ty}`: too many indices"),
                                );
                                cx.report(d);
                                return false;
                            }
                        }
                    }
                    if let Some(v) = &v
                        && v.ty.shape_of() != elem.shape_of()
                    {
                        let d = mismatch(value.span, &elem, &v.ty, "the new value");
                        cx.report(d);
                        ok = false;
                    }
                    // The value is computed before the source is consumed: reading
                    // elements of the source is fine (`a with [i] <- a[i] + x`), but
                    // the new value may not share the source's memory.
                    let aliases: BTreeSet<VarId> = cx.vars[id].aliases.iter().flatten().copied().chain([id]).collect();
                    if let Some(v) = &v
                        && !v.all_aliases().is_disjoint(&aliases)
                    {
                        let d = Diagnostic::error(
                            codes::CONSUMED_IN_SEQUENCE,
                            format!("the new value aliases `{src}`, which this update consumes"),
                        )
                        .at(value.span, "aliases the source")
                        .with_label(*src_span, "consumed here")
                        .with_hint("update with a `copy(…)` of the value");
                        cx.report(d);
                        return false;
                    }
                    cx.consume(&aliases, *src_span, from, from..usize::MAX);
                    ok && v.is_some()
                });
                let ty = self.vars[id].ty.clone();
                let mark = self.scope.len();
                let n = ty.leaves().len();
                self.bind(dest, ty, vec![BTreeSet::new(); n], *dest_span);
                let r = self.sequence(|cx| cx.expr(body));
                self.scope.truncate(mark);
                if ok { r } else { None }
            }
            ExprKind::Loop { pat, init, var, var_span, bound, body, rest } => {
                let init_v = match init {
                    Some(i) => self.sequence(|cx| cx.expr(i)),
                    None => self.short_loop_init(pat),
                };
                let bound_ok = self.sequence(|cx| cx.int_arg(bound, "the loop bound")).is_some();
                let Some(init_v) = init_v else {
                    // The body and what follows are still checked, their
                    // variables bound as `int` (as `let` does).
                    let mark = self.scope.len();
                    self.level += 1;
                    self.bind_unknown(pat);
                    self.bind(var, Type::Int, vec![BTreeSet::new()], *var_span);
                    let _ = self.sequence(|cx| cx.expr(body));
                    self.level -= 1;
                    self.scope.truncate(mark);
                    self.rest_after_error(pat, None, rest);
                    return None;
                };
                // The body, once, with the loop variables fresh at a deeper level.
                let mark = self.scope.len();
                self.level += 1;
                let fresh = Val { ty: init_v.ty.clone(), aliases: vec![BTreeSet::new(); init_v.aliases.len()] };
                let pat_ok = self.bind_pat(pat, &fresh);
                let pat_vars: Vec<VarId> = self.scope[mark..].iter().map(|(_, v)| *v).collect();
                self.bind(var, Type::Int, vec![BTreeSet::new()], *var_span);
                let consumed_before = self.consumed.clone();
                let body_v = self.sequence(|cx| cx.expr(body));
                let consumes_pattern =
                    pat_vars.iter().any(|v| self.consumed.contains_key(v) && !consumed_before.contains_key(v));
                for v in &pat_vars {
                    self.consumed.remove(v);
                }
                self.level -= 1;
                self.scope.truncate(mark);
                let Some(body_v) = body_v else {
                    self.rest_after_error(pat, Some(&init_v), rest);
                    return None;
                };
                if !body_v.ty.fits(&init_v.ty.shape_of()) || body_v.ty.shape_of() != init_v.ty.shape_of() {
                    let d = mismatch(body.span, &init_v.ty, &body_v.ty, "the loop body's result");
                    self.report(d);
                    self.rest_after_error(pat, Some(&init_v), rest);
                    return None;
                }
                if consumes_pattern && !body_v.ty.fits(&init_v.ty) {
                    let d = mismatch(
                        body.span,
                        &init_v.ty,
                        &body_v.ty,
                        "the loop body's result (its variables are updated in place)",
                    );
                    self.report(d);
                    self.rest_after_error(pat, Some(&init_v), rest);
                    return None;
                }
                if consumes_pattern {
                    let span = init.as_ref().map_or(pat.span(), |i| i.span);
                    let all = init_v.all_aliases();
                    // The initial value is its own sequence.
                    self.sequence(|cx| cx.consume(&all, span, 0, 0..usize::MAX));
                }
                let after = if consumes_pattern {
                    Val { ty: init_v.ty.clone(), aliases: vec![BTreeSet::new(); init_v.aliases.len()] }
                } else {
                    let ty = if body_v.ty.fits(&init_v.ty) { init_v.ty.clone() } else { init_v.ty.shape_of() };
                    Val { ty, aliases: init_v.aliases.iter().zip(&body_v.aliases).map(|(a, b)| a | b).collect() }
                };
                let mark = self.scope.len();
                let ok = self.bind_pat(pat, &after);
                let r = self.sequence(|cx| cx.expr(rest));
                self.scope.truncate(mark);
                if pat_ok && ok && bound_ok { r } else { None }
            }
            ExprKind::Soac { soac, fun, args } => self.soac(*soac, fun, args, span),
        }
    }

    /// `loop (x) = …` / `loop ({x, y}) = …`: the pattern's variables' current values.
    fn short_loop_init(&mut self, pat: &Pat) -> Option<Val> {
        match pat {
            Pat::Id(n, s) => {
                let Some(id) = self.lookup(n) else {
                    let d = err(codes::UNKNOWN_VARIABLE, *s, format!("unknown variable `{n}`")).with_hint(
                        "`loop (x) = …` starts from `x`'s current value; write `loop (x = e) = …` to give one",
                    );
                    self.report(d);
                    return None;
                };
                self.use_var(id, *s);
                let v = &self.vars[id];
                Some(Val { ty: v.ty.clone(), aliases: v.aliases.clone() })
            }
            Pat::Tuple(ps, _) => {
                let mut tys = Vec::new();
                let mut aliases = Vec::new();
                for p in ps {
                    let v = self.short_loop_init(p)?;
                    tys.push(v.ty);
                    aliases.extend(v.aliases);
                }
                Some(Val { ty: Type::Tuple(tys), aliases })
            }
        }
    }

    /// What follows a loop whose initial value or body has an error, checked
    /// with the loop's variables of the initial value's type (`int` if it
    /// has none), for the errors it holds itself.
    fn rest_after_error(&mut self, pat: &Pat, init: Option<&Val>, rest: &Expr) {
        let mark = self.scope.len();
        let bound = match init {
            Some(v) => Val { ty: v.ty.clone(), aliases: vec![BTreeSet::new(); v.aliases.len()] },
            None => {
                self.bind_unknown(pat);
                let _ = self.sequence(|cx| cx.expr(rest));
                self.scope.truncate(mark);
                return;
            }
        };
        if !self.bind_pat(pat, &bound) {
            self.scope.truncate(mark);
            self.bind_unknown(pat);
        }
        let _ = self.sequence(|cx| cx.expr(rest));
        self.scope.truncate(mark);
    }

    fn bind_unknown(&mut self, pat: &Pat) {
        // Bind as `int` so that the body still gets checked without follow-up
        // "unknown variable" errors.
        for (n, s) in pat.names() {
            self.bind(&n, Type::Int, vec![BTreeSet::new()], s);
        }
    }

    fn bind_pat(&mut self, pat: &Pat, v: &Val) -> bool {
        match pat {
            Pat::Id(n, s) => {
                self.bind(n, v.ty.clone(), v.aliases.clone(), *s);
                true
            }
            Pat::Tuple(ps, s) => {
                let Type::Tuple(ts) = &v.ty else {
                    let d = err(codes::TYPE_MISMATCH, *s, format!("a tuple pattern cannot take apart a `{}`", v.ty));
                    self.report(d);
                    self.bind_unknown(pat);
                    return false;
                };
                if ts.len() != ps.len() {
                    let d = err(
                        codes::ASSIGN_COUNT,
                        *s,
                        format!("the pattern has {} components, the value `{}` has {}", ps.len(), v.ty, ts.len()),
                    );
                    self.report(d);
                    self.bind_unknown(pat);
                    return false;
                }
                let mut at = 0;
                let mut ok = true;
                for (p, t) in ps.iter().zip(ts) {
                    let n = t.leaves().len();
                    let sub = Val { ty: t.clone(), aliases: v.aliases[at..at + n].to_vec() };
                    at += n;
                    ok &= self.bind_pat(p, &sub);
                }
                ok
            }
        }
    }

    fn binop(&mut self, op: BinOp, a: &Type, b: &Type, span: Span) -> Option<Type> {
        let bad = |cx: &mut Self, want: &str| {
            let d = err(codes::TYPE_MISMATCH, span, format!("`{}` needs {want}, found `{a}` and `{b}`", op.symbol()));
            cx.report(d);
            None
        };
        match op {
            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Mod | BinOp::Pow => {
                if a == b && a.is_numeric() {
                    Some(a.clone())
                } else {
                    bad(self, "two `int`s or two `real`s")
                }
            }
            BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor | BinOp::Shl | BinOp::Shr => {
                if *a == Type::Int && *b == Type::Int { Some(Type::Int) } else { bad(self, "two `int`s") }
            }
            BinOp::Eq | BinOp::Ne => {
                if a == b && a.rank() == 0 && !matches!(a, Type::Tuple(_)) {
                    Some(Type::Bool)
                } else {
                    bad(self, "two scalars of the same type")
                }
            }
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                if a == b && (a.is_numeric() || *a == Type::Char) {
                    Some(Type::Bool)
                } else {
                    bad(self, "two numbers of the same type")
                }
            }
            BinOp::And | BinOp::Or => {
                if *a == Type::Bool && *b == Type::Bool {
                    Some(Type::Bool)
                } else {
                    bad(self, "two `bool`s")
                }
            }
        }
    }

    fn arity(&mut self, name: &str, span: Span, args: &[Expr], n: &[usize]) -> bool {
        if n.contains(&args.len()) {
            return true;
        }
        let want: Vec<String> = n.iter().map(|k| k.to_string()).collect();
        let d = err(
            codes::WRONG_ARITY,
            span,
            format!("`{name}` takes {} argument(s), given {}", want.join(" or "), args.len()),
        );
        self.report(d);
        false
    }

    fn call(&mut self, fun: &Name, fun_span: Span, args: &[Expr], span: Span) -> Option<Val> {
        if let Some((sig, _)) = self.sigs.get(fun).cloned() {
            if !self.arity(fun, fun_span, args, &[sig.params.len()]) {
                args.iter().for_each(|a| {
                    self.expr(a);
                });
                return None;
            }
            let from = self.observed.len();
            let mut vals = Vec::new();
            let mut ranges = Vec::new();
            // Every argument is checked, whatever an earlier one gave.
            let mut mismatched = false;
            for (a, p) in args.iter().zip(&sig.params) {
                let start = self.observed.len();
                let v = self.expr(a);
                ranges.push(start..self.observed.len());
                if let Some(v) = &v
                    && !v.ty.fits(p)
                {
                    let d = mismatch(a.span, p, &v.ty, &format!("this argument of `{fun}`"));
                    self.report(d);
                    mismatched = true;
                }
                vals.push(v);
            }
            if mismatched {
                return None;
            }
            let vals: Vec<Val> = vals.into_iter().collect::<Option<_>>()?;
            // Consumption: after all arguments are evaluated.
            let mut free = BTreeSet::new();
            for (((a, p), v), own) in args.iter().zip(&sig.params).zip(&vals).zip(ranges) {
                if p.leaves().iter().any(Type::is_unique) {
                    self.consume(&v.all_aliases(), a.span, from, own);
                } else {
                    free.extend(v.all_aliases());
                }
            }
            let aliases = sig
                .ret
                .leaves()
                .iter()
                .map(|l| if l.is_unique() || l.rank() == 0 { BTreeSet::new() } else { free.clone() })
                .collect();
            return Some(Val { ty: sig.ret.clone(), aliases });
        }
        if let Some((params, ret)) = math_builtin(fun) {
            if !self.arity(fun, fun_span, args, &[params.len()]) {
                return None;
            }
            let mut ok = true;
            for (a, p) in args.iter().zip(&params) {
                match self.expr(a) {
                    Some(v) if v.ty != *p => {
                        let d = mismatch(a.span, p, &v.ty, &format!("the argument of `{fun}`"));
                        self.report(d);
                        ok = false;
                    }
                    Some(_) => {}
                    None => ok = false,
                }
            }
            return ok.then(|| Val::fresh(ret));
        }
        let array_arg = |cx: &mut Self, a: &Expr, what: &str| -> Option<Val> {
            let v = cx.expr(a)?;
            if v.ty.rank() == 0 {
                let d = err(codes::TYPE_MISMATCH, a.span, format!("{what} should be an array, found `{}`", v.ty));
                cx.report(d);
                return None;
            }
            Some(v)
        };
        match fun.as_str() {
            "abs" => {
                if !self.arity(fun, fun_span, args, &[1]) {
                    return None;
                }
                let v = self.expr(&args[0])?;
                if !v.ty.is_numeric() {
                    let d = err(
                        codes::TYPE_MISMATCH,
                        args[0].span,
                        format!("`abs` needs an `int` or a `real`, found `{}`", v.ty),
                    );
                    self.report(d);
                    return None;
                }
                Some(Val::fresh(v.ty))
            }
            "iota" => {
                if !self.arity(fun, fun_span, args, &[1]) {
                    return None;
                }
                self.int_arg(&args[0], "the argument of `iota`")?;
                Some(Val::fresh(Type::array(Type::Int, Uniqueness::Unique)))
            }
            "replicate" => {
                if !self.arity(fun, fun_span, args, &[2]) {
                    return None;
                }
                let n = self.int_arg(&args[0], "the count of `replicate`");
                let v = self.expr(&args[1]);
                n?;
                Some(Val::fresh(Type::array(v?.ty.shape_of(), Uniqueness::Unique)))
            }
            "size" => {
                if !self.arity(fun, fun_span, args, &[1, 2]) {
                    return None;
                }
                let (k, a) = if args.len() == 2 {
                    (self.static_int(&args[0], "`size`'s dimension"), &args[1])
                } else {
                    (Some(0), &args[0])
                };
                let v = array_arg(self, a, "`size`'s argument")?;
                let k = k?;
                if k < 0 || k as usize >= v.ty.rank() {
                    let d = err(
                        codes::BAD_STATIC_ARGUMENT,
                        args[0].span,
                        format!("dimension {k} does not exist in `{}` (rank {})", v.ty, v.ty.rank()),
                    );
                    self.report(d);
                    return None;
                }
                Some(Val::fresh(Type::Int))
            }
            "reshape" => {
                if !self.arity(fun, fun_span, args, &[2]) {
                    return None;
                }
                let dims: Vec<&Expr> = match &args[0].kind {
                    ExprKind::Tuple(items) => items.iter().collect(),
                    _ => vec![&args[0]],
                };
                let mut ok = true;
                for d in &dims {
                    ok &= self.int_arg(d, "a dimension of `reshape`").is_some();
                }
                self.record(&args[0], &Type::Tuple(vec![Type::Int; dims.len()]));
                let v = array_arg(self, &args[1], "`reshape`'s array")?;
                if !ok {
                    return None;
                }
                let mut elem = v.ty.clone();
                while let Some(e) = elem.elem() {
                    elem = e.clone();
                }
                let mut ty = elem;
                for _ in &dims {
                    ty = Type::array(ty, Uniqueness::Nonunique);
                }
                let ty = if v.ty.is_unique() { ty.with_uniqueness(Uniqueness::Unique) } else { ty };
                let all = v.all_aliases();
                let n = ty.leaves().len();
                Some(Val { ty, aliases: vec![all; n] })
            }
            "transpose" => {
                if !self.arity(fun, fun_span, args, &[1, 3]) {
                    return None;
                }
                let (k, n, a) = if args.len() == 3 {
                    (
                        self.static_int(&args[0], "`transpose`'s k"),
                        self.static_int(&args[1], "`transpose`'s n"),
                        &args[2],
                    )
                } else {
                    (Some(0), Some(1), &args[0])
                };
                let v = array_arg(self, a, "`transpose`'s argument")?;
                let (k, n) = (k?, n?);
                let r = v.ty.rank() as i64;
                if k < 0 || k + n < 0 || k >= r || k + n >= r {
                    let d = err(
                        codes::BAD_STATIC_ARGUMENT,
                        span,
                        format!("`transpose({k}, {n}, ·)` needs dimensions {k} and {} of an array of rank {r}", k + n),
                    )
                    .with_hint("k and k + n must lie in 0 … rank − 1");
                    self.report(d);
                    return None;
                }
                Some(v)
            }
            "split" => {
                if !self.arity(fun, fun_span, args, &[2]) {
                    return None;
                }
                let n = self.int_arg(&args[0], "the split point");
                let v = array_arg(self, &args[1], "`split`'s array")?;
                n?;
                let aliases = [v.aliases.clone(), v.aliases].concat();
                Some(Val { ty: Type::Tuple(vec![v.ty.clone(), v.ty]), aliases })
            }
            "concat" => {
                if !self.arity(fun, fun_span, args, &[2]) {
                    return None;
                }
                let a = array_arg(self, &args[0], "`concat`'s first array");
                let b = array_arg(self, &args[1], "`concat`'s second array");
                let (a, b) = (a?, b?);
                if a.ty.shape_of() != b.ty.shape_of() {
                    let d = mismatch(args[1].span, &a.ty.shape_of(), &b.ty, "`concat`'s second array");
                    self.report(d);
                    return None;
                }
                Some(Val::fresh(a.ty.with_uniqueness(Uniqueness::Unique)))
            }
            "zip" => {
                if args.is_empty() {
                    self.arity(fun, fun_span, args, &[2]);
                    return None;
                }
                let mut elems = Vec::new();
                let mut aliases = Vec::new();
                let mut ok = true;
                for a in args {
                    match array_arg(self, a, "a `zip` argument") {
                        Some(v) => {
                            elems.push(v.ty.elem().cloned().unwrap_or(Type::Int));
                            aliases.extend(v.aliases);
                        }
                        None => ok = false,
                    }
                }
                ok.then(|| Val { ty: Type::array(Type::Tuple(elems), Uniqueness::Nonunique), aliases })
            }
            "unzip" => {
                if !self.arity(fun, fun_span, args, &[1]) {
                    return None;
                }
                let v = array_arg(self, &args[0], "`unzip`'s argument")?;
                let Some(Type::Tuple(ts)) = v.ty.elem().cloned() else {
                    let d = err(
                        codes::TYPE_MISMATCH,
                        args[0].span,
                        format!("`unzip` needs an array of tuples, found `{}`", v.ty),
                    );
                    self.report(d);
                    return None;
                };
                let u = if v.ty.is_unique() { Uniqueness::Unique } else { Uniqueness::Nonunique };
                Some(Val { ty: Type::Tuple(ts.into_iter().map(|t| Type::array(t, u)).collect()), aliases: v.aliases })
            }
            "copy" => {
                if !self.arity(fun, fun_span, args, &[1]) {
                    return None;
                }
                let v = self.expr(&args[0])?;
                Some(Val::fresh(v.ty.with_uniqueness(Uniqueness::Unique)))
            }
            _ => {
                let d = err(codes::UNKNOWN_FUNCTION, fun_span, format!("unknown function `{fun}`"));
                self.report(d);
                args.iter().for_each(|a| {
                    self.expr(a);
                });
                None
            }
        }
    }

    /// The function argument of a SOAC, with the elements it is applied to.
    fn fn_arg(&mut self, fun: &FnArg) -> Option<FnInfo> {
        match fun {
            FnArg::Named { name, span, curried } => {
                let (params, ret) = if let Some((sig, _)) = self.sigs.get(name).cloned() {
                    (sig.params, sig.ret)
                } else if let Some((p, r)) = math_builtin(name) {
                    (p, r)
                } else if STRUCTURAL.contains(&name.as_str()) {
                    // Built-ins typed by their arguments (`abs` of an int or
                    // a real) have no one signature to pass.
                    let d = err(
                        codes::UNKNOWN_FUNCTION,
                        *span,
                        format!("the built-in `{name}` cannot be passed as a function"),
                    )
                    .with_hint(format!("wrap it in a lambda, e.g. `fn int (int x) => {name}(x)`"));
                    self.report(d);
                    return None;
                } else {
                    let d = err(codes::UNKNOWN_FUNCTION, *span, format!("unknown function `{name}`"));
                    self.report(d);
                    return None;
                };
                if curried.len() >= params.len() {
                    let d = err(
                        codes::WRONG_ARITY,
                        *span,
                        format!(
                            "`{name}` takes {} argument(s); {} given here leave none for the SOAC",
                            params.len(),
                            curried.len()
                        ),
                    );
                    self.report(d);
                    return None;
                }
                for (a, p) in curried.iter().zip(&params) {
                    let v = self.expr(a)?;
                    if !v.ty.fits(&p.shape_of()) {
                        let d = mismatch(a.span, p, &v.ty, &format!("this argument of `{name}`"));
                        self.report(d);
                        return None;
                    }
                    if p.is_unique() {
                        let d = Diagnostic::error(
                            codes::CONSUMED_REPEATEDLY,
                            format!("`{name}` consumes this argument, but the SOAC calls `{name}` once per element"),
                        )
                        .at(a.span, "supplied for a unique parameter")
                        .with_hint("a curried argument cannot go to a unique (`*[…]`) parameter");
                        self.report(d);
                        return None;
                    }
                }
                Some(FnInfo { params, ret, supplied: curried.len() })
            }
            FnArg::Lambda { ret, params, body, .. } => {
                let mark = self.scope.len();
                self.level += 1;
                for p in params {
                    let n = p.ty.leaves().len();
                    self.bind(&p.name, p.ty.clone(), vec![BTreeSet::new(); n], p.span);
                }
                let saved_consumed = self.consumed.clone();
                let v = self.sequence(|cx| cx.expr(body));
                self.consumed = saved_consumed;
                self.level -= 1;
                self.scope.truncate(mark);
                let v = v?;
                if !v.ty.fits(ret) {
                    let d = mismatch(body.span, ret, &v.ty, "the lambda's result");
                    self.report(d);
                    return None;
                }
                Some(FnInfo { params: params.iter().map(|p| p.ty.clone()).collect(), ret: ret.clone(), supplied: 0 })
            }
            FnArg::Op { op, left, span } => {
                let left_ty = match left {
                    Some(l) => Some(self.expr(l)?.ty),
                    None => None,
                };
                // The section's type follows its operand(s); without one it is
                // fixed by the elements (see `apply`).
                let t = left_ty.clone().unwrap_or(Type::Int);
                let ret = match self.binop_ret(*op, &t) {
                    Some(r) => r,
                    None => {
                        let d =
                            err(codes::TYPE_MISMATCH, *span, format!("`op {}` does not apply to `{t}`", op.symbol()));
                        self.report(d);
                        return None;
                    }
                };
                Some(FnInfo { params: vec![t.clone(), t], ret, supplied: usize::from(left.is_some()) })
            }
        }
    }

    fn binop_ret(&mut self, op: BinOp, t: &Type) -> Option<Type> {
        let mut scratch = Diagnostics::new();
        std::mem::swap(self.diags, &mut scratch);
        let r = self.binop(op, t, t, Span::new(crate::span::FileId(0), 0, 0));
        std::mem::swap(self.diags, &mut scratch);
        r
    }

    /// Matches a function's remaining parameters against the element type(s)
    /// it is applied to: one parameter per element, or one per component of a
    /// tuple element (tuple shimming, seed 004 §2.3.1).
    fn apply(&mut self, info: &FnInfo, elems: &[Type], span: Span, soac: Soac) -> bool {
        let rest = &info.params[info.supplied..];
        let flat: Vec<Type> = if rest.len() == elems.len() {
            elems.to_vec()
        } else {
            elems
                .iter()
                .flat_map(|e| match e {
                    Type::Tuple(ts) => ts.clone(),
                    t => vec![t.clone()],
                })
                .collect()
        };
        if rest.len() != flat.len() {
            let shown: Vec<String> = elems.iter().map(|t| t.to_string()).collect();
            let d = err(
                codes::WRONG_ARITY,
                span,
                format!(
                    "`{}`'s function takes {} argument(s) here, but is applied to {}",
                    soac.name(),
                    rest.len(),
                    shown.join(", ")
                ),
            );
            self.report(d);
            return false;
        }
        for (p, t) in rest.iter().zip(&flat) {
            if t.shape_of() != p.shape_of() {
                let d = mismatch(span, p, t, &format!("the argument `{}`'s function gets", soac.name()));
                self.report(d);
                return false;
            }
        }
        true
    }

    fn soac(&mut self, soac: Soac, fun: &FnArg, args: &[Expr], span: Span) -> Option<Val> {
        let (neutral, arrays) = match soac {
            Soac::Map | Soac::Filter => (None, args),
            Soac::Reduce | Soac::Scan => {
                if args.len() < 2 {
                    let d = err(
                        codes::WRONG_ARITY,
                        span,
                        format!("`{}` takes a function, a neutral element and an array", soac.name()),
                    );
                    self.report(d);
                    return None;
                }
                (Some(&args[0]), &args[1..])
            }
        };
        if arrays.is_empty() {
            let d = err(codes::WRONG_ARITY, span, format!("`{}` needs an array", soac.name()));
            self.report(d);
            return None;
        }
        let mut info = self.fn_arg(fun);
        let from = self.observed.len();
        let ne = neutral.and_then(|n| self.expr(n));
        let mut elems = Vec::new();
        let mut array_vals = Vec::new();
        let mut ok = true;
        let mut ranges = Vec::new();
        for a in arrays {
            let start = self.observed.len();
            let v = self.expr(a);
            ranges.push(start..self.observed.len());
            match v {
                Some(v) if v.ty.rank() > 0 => {
                    elems.push(v.ty.elem().cloned().unwrap_or(Type::Int));
                    array_vals.push(v);
                }
                Some(v) => {
                    let d = err(
                        codes::TYPE_MISMATCH,
                        a.span,
                        format!("`{}` needs an array, found `{}`", soac.name(), v.ty),
                    );
                    self.report(d);
                    ok = false;
                }
                None => ok = false,
            }
        }
        if !ok {
            return None;
        }
        let elem = if elems.len() == 1 { elems[0].clone() } else { Type::Tuple(elems.clone()) };
        // An operator section without its operand takes the elements' type.
        if let (FnArg::Op { op, left: None, span: ospan }, Some(i)) = (fun, info.as_mut()) {
            let t = match (&elem, soac) {
                (Type::Tuple(ts), Soac::Map | Soac::Filter) if ts.len() == 2 && ts[0] == ts[1] => ts[0].clone(),
                (t, _) => t.clone(),
            };
            match self.binop_ret(*op, &t) {
                Some(r) => *i = FnInfo { params: vec![t.clone(), t], ret: r, supplied: 0 },
                None => {
                    let d = err(codes::TYPE_MISMATCH, *ospan, format!("`op {}` does not apply to `{t}`", op.symbol()));
                    self.report(d);
                    return None;
                }
            }
        }
        let info = info?;
        let fspan = fun.span();
        // A function with a unique parameter consumes what it is passed: the
        // SOAC passes it the arrays' elements, so it consumes the arrays
        // (which must be unique, like any argument for a unique parameter).
        if info.params[info.supplied..].iter().any(|p| p.leaves().iter().any(Type::is_unique)) {
            for ((a, v), own) in arrays.iter().zip(&array_vals).zip(&ranges) {
                if !v.ty.is_unique() {
                    let d = Diagnostic::error(
                        codes::NOT_UNIQUE,
                        format!(
                            "`{}`'s function consumes its argument, so this array must be unique, found `{}`",
                            soac.name(),
                            v.ty
                        ),
                    )
                    .at(a.span, "its elements go to a unique parameter")
                    .with_hint("pass a fresh array (`copy(…)`) or make the function's parameter non-unique");
                    self.report(d);
                    return None;
                }
                self.consume(&v.all_aliases(), a.span, from, own.clone());
            }
        }
        match soac {
            Soac::Map => {
                if !self.apply(&info, &elems, fspan, soac) {
                    return None;
                }
                Some(Val::fresh(Type::array(info.ret.shape_of(), Uniqueness::Unique)))
            }
            Soac::Filter => {
                if !self.apply(&info, &elems, fspan, soac) {
                    return None;
                }
                if info.ret != Type::Bool {
                    let d = mismatch(fspan, &Type::Bool, &info.ret, "`filter`'s predicate result");
                    self.report(d);
                    return None;
                }
                Some(Val::fresh(Type::array(elem.shape_of(), Uniqueness::Unique)))
            }
            Soac::Reduce | Soac::Scan => {
                let ne = ne?;
                if ne.ty.shape_of() != elem.shape_of() {
                    let d = mismatch(args[0].span, &elem, &ne.ty, "the neutral element");
                    self.report(d);
                    return None;
                }
                if !self.apply(&info, &[elem.clone(), elem.clone()], fspan, soac) {
                    return None;
                }
                if info.ret.shape_of() != elem.shape_of() {
                    let d = mismatch(fspan, &elem, &info.ret, &format!("`{}`'s operator result", soac.name()));
                    self.report(d);
                    return None;
                }
                if soac == Soac::Scan {
                    Some(Val::fresh(Type::array(elem.shape_of(), Uniqueness::Unique)))
                } else {
                    Some(Val::fresh(elem.shape_of()))
                }
            }
        }
    }
}

/// An error at `span`.
/// Whether `ty` holds an array whose elements have no leaves (`[{}]`).
fn has_leafless_array(ty: &Type) -> bool {
    match ty {
        Type::Array(e, _) => e.leaves().is_empty() || has_leafless_array(e),
        Type::Tuple(ts) => ts.iter().any(has_leafless_array),
        _ => false,
    }
}

fn err(code: Code, span: Span, msg: impl Into<String>) -> Diagnostic {
    Diagnostic::error(code, msg).at(span, "")
}

/// `what` has type `got` where `want` is expected (E0401 when only uniqueness differs).
fn mismatch(span: Span, want: &Type, got: &Type, what: &str) -> Diagnostic {
    let mut d =
        Diagnostic::error(codes::TYPE_MISMATCH, format!("{what} should be `{want}`, found `{got}`")).at(span, "");
    if want.is_unique() && got.shape_of() == want.shape_of() {
        d = Diagnostic::error(codes::NOT_UNIQUE, format!("{what} must be unique (`{want}`), found `{got}`"))
            .at(span, "")
            .with_hint("a fresh array (`copy(…)`, `iota`, `replicate`, a SOAC's result) is unique; literals are not");
    }
    d
}

/// The shape of a literal made only of literals (`None` when irregular).
fn literal_shape(e: &Expr) -> Option<Vec<usize>> {
    match &e.kind {
        ExprKind::Array(items) => {
            let mut inner: Option<Vec<usize>> = None;
            for it in items {
                let s = literal_shape(it)?;
                match &inner {
                    None => inner = Some(s),
                    Some(p) if *p == s => {}
                    Some(_) => return None,
                }
            }
            let mut v = vec![items.len()];
            v.extend(inner.unwrap_or_default());
            Some(v)
        }
        ExprKind::Tuple(items) => {
            // Tuples of arrays become arrays of their components: compare all.
            let shapes: Option<Vec<Vec<usize>>> = items.iter().map(literal_shape).collect();
            shapes.map(|s| s.into_iter().flatten().collect())
        }
        _ => Some(Vec::new()),
    }
}

/// Whether an array literal's rows are literal arrays all the way down to
/// scalars (literals or any expression of a scalar type, as in
/// `[[x, 1], [2]]`), so that [`literal_shape`] is its shape and irregularity
/// a compile-time error rather than a run-time one. An array-typed element
/// (`[a, [1]]`) has a shape known only at run time.
fn shape_is_static(e: &Expr, types: &HashMap<usize, Type>) -> bool {
    match &e.kind {
        ExprKind::Array(items) | ExprKind::Tuple(items) => items.iter().all(|i| shape_is_static(i, types)),
        _ => types.get(&(e as *const Expr as usize)).is_some_and(|t| t.leaves().iter().all(|l| l.rank() == 0)),
    }
}

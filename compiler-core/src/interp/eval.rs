//! The tree-walking evaluator over [`hir`](crate::sema::hir).

use crate::HashMap;
use std::rc::Rc;

use super::dispatch::{Bindings, match_pattern, matches, spec_is_plain};
use super::format;
use super::ops::{OpError, elementwise_convert};
use super::prims;
use super::value::{Array, Elems, Scalar, Value, row_major_offset, shape_size};
use super::{GENERATOR_LENGTH_MISMATCH, RunOptions, RuntimeError};
use crate::diagnostics::{self as codes, Code};
use crate::sema::analysis::expr_pure;
use crate::sema::hir::{
    self, Bound, Callee, Elem, Expr, ExprKind, FoldTarget, FunId, Function, Intrinsic, Prim, Program, SiteId, Stmt,
    Type, WithOp,
};
use crate::sema::ty::Shape;
use crate::sema::typed::{InstanceId, Target, Typed, WrapperId};
use crate::span::{SourceMap, Span};
use crate::syntax::ast::{BaseType, Rel};

pub(super) enum Flow {
    Normal,
    Return(Vec<Value>),
}

type Frame = Vec<Option<Value>>;

/// A call site and its arguments' base types and shapes: what dispatch depends on.
type DispatchKey = (SiteId, Vec<(Option<BaseType>, Vec<usize>)>);
type Res<T> = Result<T, RuntimeError>;

/// Per function: each parameter's shape class, and whether its type is plain.
struct Signature {
    classes: Vec<Shape>,
    plain: bool,
}

pub(super) struct Interp<'p> {
    program: &'p Program,
    /// The typed, specialised program; without it calls dispatch on the fly.
    typed: Option<&'p Typed>,
    sources: &'p SourceMap,
    options: RunOptions,
    out: &'p mut dyn FnMut(&[u8]),
    /// (call site, callee) of active calls, innermost last.
    stack: Vec<(Span, FunId)>,
    /// The instance each active call runs (parallel to `stack`).
    instances: Vec<Option<InstanceId>>,
    /// Calls the typed program had no target for (should stay 0; tests check it).
    pub(super) untyped_fallbacks: usize,
    signatures: HashMap<FunId, Rc<Signature>>,
    cache: HashMap<DispatchKey, FunId>,
    purity: Vec<bool>,
    steps: u64,
}

impl<'p> Interp<'p> {
    pub(super) fn new(
        program: &'p Program,
        typed: Option<&'p Typed>,
        sources: &'p SourceMap,
        options: RunOptions,
        out: &'p mut dyn FnMut(&[u8]),
    ) -> Self {
        let purity = program.functions.iter().map(|f| f.pure).collect();
        Interp {
            program,
            typed,
            instances: Vec::new(),
            untyped_fallbacks: 0,
            sources,
            options,
            out,
            stack: Vec::new(),
            signatures: HashMap::default(),
            cache: HashMap::default(),
            purity,
            steps: 0,
        }
    }

    /// An error at `span`, reported at the innermost place in the user's code.
    pub(super) fn error(&self, code: Code, message: impl Into<String>, span: Span) -> RuntimeError {
        let mut err = RuntimeError { code, message: message.into(), span, notes: Vec::new(), trace: Vec::new() };
        if self.sources.is_library(span) {
            // Blame the user's call that led into the library.
            let mut library_fn = None;
            for (site, callee) in self.stack.iter().rev() {
                if library_fn.is_none() {
                    library_fn = Some(self.program.function(*callee).name.clone());
                }
                if !self.sources.is_library(*site) {
                    err.span = *site;
                    break;
                }
                library_fn = Some(self.program.function(*callee).name.clone());
            }
            if let Some(f) = library_fn {
                err.notes.push(format!("raised inside the library function `{f}`"));
            }
        }
        let mut seen: Vec<(Span, FunId)> = Vec::new();
        for (site, callee) in self.stack.iter().rev() {
            if seen.len() >= 6 {
                break;
            }
            // Show each call site once, however often recursion passed through it.
            if seen.contains(&(*site, *callee)) {
                continue;
            }
            seen.push((*site, *callee));
            // The entry call's "site" is the entry's own name: not worth showing.
            let entry = *site == self.program.function(*callee).name_span;
            if !self.sources.is_library(*site) && *site != err.span && !entry {
                err.trace.push((*site, format!("in this call of `{}`", self.program.function(*callee).name)));
            }
        }
        err
    }

    fn op_error(&self, e: OpError, span: Span) -> RuntimeError {
        self.error(e.code, e.message, span)
    }

    fn signature(&mut self, id: FunId) -> Rc<Signature> {
        if let Some(s) = self.signatures.get(&id) {
            return s.clone();
        }
        let f = self.program.function(id);
        let classes: Vec<Shape> = f.params.iter().map(|p| Shape::of_spec(&p.ty.shape)).collect();
        let plain = f.params.iter().all(|p| spec_is_plain(&p.ty.shape)) && f.conditions.is_empty();
        let s = Rc::new(Signature { classes, plain });
        self.signatures.insert(id, s.clone());
        s
    }

    // ------------------------------------------------------------ calls

    /// Calls the most specific instance of `callee` that applies to `args`
    /// (`None` marks an argument not evaluated because no instance reads it).
    pub(super) fn call(&mut self, callee: &Callee, args: Vec<Option<Value>>, span: Span) -> Res<Vec<Value>> {
        if let (Some(typed), Some(Some(current))) = (self.typed, self.instances.last()) {
            match typed.instance(*current).calls.get(&callee.site) {
                Some(Target::Instance(i)) => return self.invoke_instance(*i, args, span, true),
                Some(Target::Wrapper(w)) => {
                    let i = self.wrapper_dispatch(*w, &args, span)?;
                    return self.invoke_instance(i, args, span, false);
                }
                None => self.untyped_fallbacks += 1,
            }
        }
        let id = self.select(callee, &args, span)?;
        self.invoke(id, None, args, span)
    }

    /// Calls the entry wrapper of a typed program.
    pub(super) fn call_entry(&mut self, w: WrapperId, args: Vec<Option<Value>>, span: Span) -> Res<Vec<Value>> {
        let i = self.wrapper_dispatch(w, &args, span)?;
        self.invoke_instance(i, args, span, false)
    }

    /// The most specific instance of the wrapper that admits the arguments.
    fn wrapper_dispatch(&mut self, w: WrapperId, args: &[Option<Value>], span: Span) -> Res<InstanceId> {
        let typed = self.typed.expect("typed program");
        let wrapper = typed.wrapper(w);
        let admitting: Vec<InstanceId> = wrapper
            .instances
            .iter()
            .copied()
            .filter(|i| {
                let inst = typed.instance(*i);
                inst.params.len() == args.len()
                    && inst.params.iter().zip(args).all(|(p, a)| a.as_ref().is_none_or(|v| p.admits(v)))
            })
            .collect();
        // The function first: among those with an admitting instance, the
        // ones no other is declared more specific than; then their instances.
        let funs: Vec<FunId> = admitting.iter().map(|i| typed.instance(*i).fun).collect();
        let program = self.program;
        let chosen = |f: FunId| !funs.iter().any(|&g| crate::sema::infer::declared_more_specific(program, g, f));
        let admitting: Vec<InstanceId> = admitting.into_iter().filter(|i| chosen(typed.instance(*i).fun)).collect();
        // Minimal elements: no other admitting instance is strictly more specific.
        let minimal: Vec<InstanceId> = admitting
            .iter()
            .copied()
            .filter(|&i| {
                let pi = &typed.instance(i).params;
                !admitting.iter().any(|&j| {
                    let pj = &typed.instance(j).params;
                    j != i
                        && pj.iter().zip(pi).all(|(x, y)| x.subset_of(y))
                        && !pi.iter().zip(pj).all(|(x, y)| x.subset_of(y))
                })
            })
            .collect();
        match minimal.first() {
            Some(i) => {
                let distinct: crate::HashSet<FunId> = minimal.iter().map(|i| typed.instance(*i).fun).collect();
                if distinct.len() > 1 {
                    let list: Vec<String> = distinct.iter().map(|f| self.program.function(*f).signature()).collect();
                    return Err(self.error(
                        codes::AMBIGUOUS_OVERLOAD,
                        format!("call of `{}` is ambiguous: {} all apply", wrapper.name, list.join(", ")),
                        span,
                    ));
                }
                Ok(*i)
            }
            None => {
                let callee = Callee {
                    name: wrapper.name.clone(),
                    candidates: wrapper.candidates.clone(),
                    site: SiteId(u32::MAX),
                };
                Err(self.no_instance(&callee, args, span))
            }
        }
    }

    /// Runs an instance; `static_call` says the binding was made at compile time, so
    /// an argument outside its parameter types is a compiler bug.
    fn invoke_instance(
        &mut self,
        i: InstanceId,
        args: Vec<Option<Value>>,
        span: Span,
        static_call: bool,
    ) -> Res<Vec<Value>> {
        let typed = self.typed.expect("typed program");
        let inst = typed.instance(i);
        if static_call {
            for (p, a) in inst.params.iter().zip(&args) {
                if let Some(v) = a
                    && !p.admits(v)
                {
                    // `[+]` also stands for "rank at least 2, 3, …": say which.
                    let rank = match p.shape {
                        crate::sema::ty::Shape::AtLeast(r) if r > 1 => format!(" of rank at least {r}"),
                        _ => String::new(),
                    };
                    return Err(self.error(
                        codes::INTERNAL_ERROR,
                        format!(
                            "a {} reached instance `{}`, which was compiled for {p}{rank}",
                            describe_value(v),
                            inst.symbol
                        ),
                        span,
                    ));
                }
            }
        }
        self.invoke(inst.fun, Some(i), args, span)
    }

    fn select(&mut self, callee: &Callee, args: &[Option<Value>], span: Span) -> Res<FunId> {
        let key: Vec<(Option<BaseType>, Vec<usize>)> =
            args.iter().map(|a| a.as_ref().map_or((None, Vec::new()), |v| (v.base(), v.shape().to_vec()))).collect();
        let cache_key = (callee.site, key);
        if let Some(id) = self.cache.get(&cache_key) {
            return Ok(*id);
        }
        let mut applicable: Vec<FunId> = Vec::new();
        for &id in callee.candidates.iter() {
            let f = self.program.function(id);
            if f.intrinsic.is_some() {
                applicable.push(id);
                continue;
            }
            let sig = self.signature(id);
            let ok = f.params.iter().zip(&sig.classes).zip(args).all(|((p, class), a)| match a {
                Some(v) => matches(&p.ty, class, v),
                None => true,
            });
            if ok {
                applicable.push(id);
            }
        }
        let chosen = match applicable.len() {
            0 => return Err(self.no_instance(callee, args, span)),
            1 => applicable[0],
            _ => {
                // The most specific: its class is inside every other's at every position.
                let sigs: Vec<(FunId, Rc<Signature>)> = applicable.iter().map(|&id| (id, self.signature(id))).collect();
                let best: Vec<FunId> = sigs
                    .iter()
                    .filter(|(_, s)| {
                        sigs.iter().all(|(_, o)| s.classes.iter().zip(&o.classes).all(|(a, b)| a.subset_of(b)))
                    })
                    .map(|(id, _)| *id)
                    .collect();
                match best.as_slice() {
                    [one] => *one,
                    _ => {
                        let list: Vec<String> =
                            applicable.iter().map(|id| self.program.function(*id).signature()).collect();
                        return Err(self.error(
                            codes::AMBIGUOUS_OVERLOAD,
                            format!("call of `{}` is ambiguous: {} all apply", callee.name, list.join(", ")),
                            span,
                        ));
                    }
                }
            }
        };
        if self.cache.len() < 100_000 {
            self.cache.insert(cache_key, chosen);
        }
        Ok(chosen)
    }

    fn no_instance(&self, callee: &Callee, args: &[Option<Value>], span: Span) -> RuntimeError {
        let arg_types: Vec<String> = args.iter().map(|a| a.as_ref().map_or("_".to_string(), describe_value)).collect();
        let mut err = self.error(
            codes::NO_MATCHING_INSTANCE,
            format!("no instance of `{}` accepts ({})", callee.name, arg_types.join(", ")),
            span,
        );
        for (listed, id) in callee.candidates.iter().enumerate() {
            if listed == 6 {
                err.notes.push(format!("… and {} more", callee.candidates.len() - 6));
                break;
            }
            err.notes.push(format!("candidate: {}", self.program.function(*id).signature()));
        }
        err
    }

    pub(super) fn invoke(
        &mut self,
        id: FunId,
        instance: Option<InstanceId>,
        args: Vec<Option<Value>>,
        span: Span,
    ) -> Res<Vec<Value>> {
        let f: &'p Function = self.program.function(id);
        if self.stack.len() >= self.options.max_call_depth {
            // Blame the user function that recursed: the one called most often on the stack.
            let mut counts: HashMap<FunId, usize> = HashMap::default();
            for (_, callee) in &self.stack {
                if !self.program.function(*callee).is_library() {
                    *counts.entry(*callee).or_default() += 1;
                }
            }
            let culprit = counts.into_iter().max_by_key(|(_, n)| *n).map(|(id, _)| id);
            let (name, at) = match culprit {
                Some(id) => {
                    let site = self.stack.iter().rev().find(|(_, c)| *c == id).map_or(span, |(s, _)| *s);
                    (self.program.function(id).name.clone(), site)
                }
                None => (f.name.clone(), span),
            };
            let mut err = self.error(
                codes::RECURSION_LIMIT,
                format!("more than {} nested calls: `{name}` keeps calling itself", self.options.max_call_depth),
                at,
            );
            err.span = at;
            err.trace.clear();
            err.notes.push("the recursion probably never reaches its base case".to_string());
            return Err(err);
        }
        if let Some(Intrinsic::Printf) = f.intrinsic {
            let args: Vec<Value> = args.into_iter().flatten().collect();
            let Some(Value::Str(fmt)) = args.first() else {
                return Err(self.error(codes::RUNTIME_TYPE_MISMATCH, "`printf` needs a format string first", span));
            };
            match format::printf(fmt, &args[1..]) {
                Ok(bytes) => (self.out)(&bytes),
                Err(msg) => return Err(self.error(codes::INVALID_ARGUMENT, msg, span)),
            }
            return Ok(Vec::new());
        }
        self.stack.push((span, id));
        self.instances.push(instance);
        let result = self.invoke_body(f, id, args, span);
        self.stack.pop();
        self.instances.pop();
        result
    }

    fn invoke_body(&mut self, f: &'p Function, id: FunId, args: Vec<Option<Value>>, span: Span) -> Res<Vec<Value>> {
        let mut frame: Frame = vec![None; f.locals.len()];
        let sig = self.signature(id);
        let mut env = Bindings::default();
        for (p, a) in f.params.iter().zip(args) {
            if let Some(v) = &a
                && !sig.plain
                && !match_pattern(&p.ty.shape, v.shape(), &mut env)
            {
                return Err(self.error(
                    codes::CONDITION_FAILED,
                    format!(
                        "argument `{}` of shape {} does not match `{}` in `{}`",
                        p.name,
                        shape_text(v.shape()),
                        p.ty,
                        f.signature()
                    ),
                    span,
                ));
            }
            frame[p.local.0 as usize] = a;
        }
        for (name, local) in &f.pattern_locals {
            if let Some(b) = env.get(name) {
                frame[local.0 as usize] = Some(b.to_value());
            }
        }
        for c in &f.conditions {
            let v = self.eval(&mut frame, c)?;
            if v != Value::Scalar(Scalar::Bool(true)) {
                let text = self.sources.snippet(c.span).to_string();
                return Err(self.error(
                    codes::CONDITION_FAILED,
                    format!("condition `{text}` of `{}` does not hold", f.signature()),
                    span,
                ));
            }
        }
        let values = match self.exec(&mut frame, &f.body)? {
            Flow::Return(values) => values,
            Flow::Normal => Vec::new(),
        };
        // Results must have their declared types.
        if values.len() == f.results.len() {
            for (k, (v, ty)) in values.iter().zip(&f.results).enumerate() {
                if !self.conforms(v, ty, &mut env) {
                    let what = if f.results.len() > 1 {
                        format!("result {} of `{}`", k + 1, f.name)
                    } else {
                        format!("the result of `{}`", f.name)
                    };
                    return Err(self.error(
                        codes::TYPE_ASSERTION_FAILED,
                        format!("{what} is {} but is declared {ty}", describe_value(v)),
                        self.return_span(f, span),
                    ));
                }
            }
        } else if !f.results.is_empty() {
            return Err(self.error(
                codes::RETURN_COUNT,
                format!("`{}` returned {} value(s) but is declared with {}", f.name, values.len(), f.results.len()),
                span,
            ));
        }
        Ok(values)
    }

    fn return_span(&self, f: &Function, call: Span) -> Span {
        if f.is_library() { call } else { f.name_span }
    }

    fn conforms(&self, v: &Value, ty: &Type, env: &mut Bindings) -> bool {
        let elem_ok = match (ty.elem, v) {
            (Elem::String, Value::Str(_)) => true,
            (Elem::Base(b), _) => v.base() == Some(b),
            _ => false,
        };
        elem_ok && match_pattern(&ty.shape, v.shape(), env)
    }

    // ------------------------------------------------------------ statements

    /// Counts one unit of work against the step budget.
    fn step(&mut self, span: Span) -> Res<()> {
        self.steps += 1;
        match self.options.max_steps {
            Some(max) if self.steps > max => {
                Err(self.error(codes::STEP_LIMIT, format!("the program ran for more than {max} steps"), span))
            }
            _ => Ok(()),
        }
    }

    pub(super) fn exec(&mut self, frame: &mut Frame, stmts: &[Stmt]) -> Res<Flow> {
        for s in stmts {
            if self.options.max_steps.is_some() {
                let span = match s {
                    Stmt::Assign { span, .. }
                    | Stmt::If { span, .. }
                    | Stmt::While { span, .. }
                    | Stmt::DoWhile { span, .. }
                    | Stmt::Return { span, .. }
                    | Stmt::Eval { span, .. } => *span,
                };
                self.step(span)?;
            }
            match s {
                Stmt::Assign { targets, value, live, span } => {
                    if !*live {
                        continue;
                    }
                    if targets.len() == 1 {
                        let v = self.eval(frame, value)?;
                        self.store(frame, targets[0], v, *span)?;
                    } else {
                        let vs = self.eval_multi(frame, value)?;
                        if vs.len() != targets.len() {
                            return Err(self.error(
                                codes::ASSIGN_COUNT,
                                format!(
                                    "{} variable(s) on the left but {} value(s) on the right",
                                    targets.len(),
                                    vs.len()
                                ),
                                *span,
                            ));
                        }
                        for (t, v) in targets.iter().zip(vs) {
                            self.store(frame, *t, v, *span)?;
                        }
                    }
                }
                Stmt::If { cond, then_body, else_body, .. } => {
                    let c = self.eval_bool(frame, cond, "`if` condition")?;
                    let flow = self.exec(frame, if c { then_body } else { else_body })?;
                    if let Flow::Return(_) = flow {
                        return Ok(flow);
                    }
                }
                Stmt::While { cond, body, span, .. } => {
                    while self.eval_bool(frame, cond, "loop condition")? {
                        if self.options.max_steps.is_some() {
                            self.step(*span)?;
                        }
                        if let Flow::Return(v) = self.exec(frame, body)? {
                            return Ok(Flow::Return(v));
                        }
                    }
                }
                Stmt::DoWhile { body, cond, .. } => loop {
                    if let Flow::Return(v) = self.exec(frame, body)? {
                        return Ok(Flow::Return(v));
                    }
                    if !self.eval_bool(frame, cond, "loop condition")? {
                        break;
                    }
                },
                Stmt::Return { values, span } => {
                    let mut out = Vec::new();
                    for v in values {
                        if values.len() == 1 {
                            out.extend(self.eval_multi(frame, v)?);
                        } else {
                            out.push(self.eval(frame, v)?);
                        }
                    }
                    let _ = span;
                    return Ok(Flow::Return(out));
                }
                Stmt::Eval { expr, .. } => {
                    self.eval_multi(frame, expr)?;
                }
            }
        }
        Ok(Flow::Normal)
    }

    fn store(&mut self, frame: &mut Frame, local: hir::LocalId, v: Value, span: Span) -> Res<()> {
        let f = self.stack.last().map(|(_, id)| *id);
        if let Some(fid) = f {
            let info = &self.program.function(fid).locals[local.0 as usize];
            if let Some(ty) = &info.declared
                && !self.conforms(&v, ty, &mut Bindings::default())
            {
                return Err(self.error(
                    codes::TYPE_ASSERTION_FAILED,
                    format!("`{}` is declared {ty} but is assigned {}", info.name, describe_value(&v)),
                    span,
                ));
            }
        }
        frame[local.0 as usize] = Some(v);
        Ok(())
    }

    fn eval_bool(&mut self, frame: &mut Frame, e: &Expr, what: &str) -> Res<bool> {
        match self.eval(frame, e)? {
            Value::Scalar(Scalar::Bool(b)) => Ok(b),
            other => Err(self.error(
                codes::RUNTIME_TYPE_MISMATCH,
                format!("the {what} must be a bool, not {}", describe_value(&other)),
                e.span,
            )),
        }
    }

    // ------------------------------------------------------------ expressions

    /// Evaluates an expression that yields exactly one value.
    pub(super) fn eval(&mut self, frame: &mut Frame, e: &Expr) -> Res<Value> {
        match &e.kind {
            ExprKind::Const(v) => Ok(v.clone()),
            ExprKind::Local(l) => match &frame[l.0 as usize] {
                Some(v) => Ok(v.clone()),
                None => Err(self.error(codes::INTERNAL_ERROR, "read of an unassigned variable", e.span)),
            },
            ExprKind::Prim { prim, args } => {
                let mut vals = Vec::with_capacity(args.len());
                for a in args {
                    vals.push(self.eval(frame, a)?);
                }
                self.prim(prim, vals, e.span)
            }
            ExprKind::And(a, b) => {
                if !self.eval_bool(frame, a, "operand of `&&`")? {
                    return Ok(Value::Scalar(Scalar::Bool(false)));
                }
                Ok(Value::Scalar(Scalar::Bool(self.eval_bool(frame, b, "operand of `&&`")?)))
            }
            ExprKind::Or(a, b) => {
                if self.eval_bool(frame, a, "operand of `||`")? {
                    return Ok(Value::Scalar(Scalar::Bool(true)));
                }
                Ok(Value::Scalar(Scalar::Bool(self.eval_bool(frame, b, "operand of `||`")?)))
            }
            ExprKind::Cond { cond, then_expr, else_expr } => {
                if self.eval_bool(frame, cond, "condition of `?:`")? {
                    self.eval(frame, then_expr)
                } else {
                    self.eval(frame, else_expr)
                }
            }
            ExprKind::Array(elems) => {
                let mut vals = Vec::with_capacity(elems.len());
                for x in elems {
                    vals.push(self.eval(frame, x)?);
                }
                prims::stack(vals).map_err(|err| self.op_error(err, e.span))
            }
            ExprKind::Cast { ty, expr } => {
                let v = self.eval(frame, expr)?;
                let v = match (ty.elem, v.base()) {
                    (Elem::Base(to), Some(from)) if to != from => {
                        elementwise_convert(&v, to).map_err(|err| self.op_error(err, e.span))?
                    }
                    _ => v,
                };
                if !self.conforms(&v, ty, &mut Bindings::default()) {
                    return Err(self.error(
                        codes::TYPE_ASSERTION_FAILED,
                        format!("cannot cast {} to {ty}", describe_value(&v)),
                        e.span,
                    ));
                }
                Ok(v)
            }
            ExprKind::Call { .. } | ExprKind::With(_) => {
                let mut vs = self.eval_multi(frame, e)?;
                if vs.len() != 1 {
                    return Err(self.error(
                        codes::ASSIGN_COUNT,
                        format!("this yields {} values where exactly one is needed", vs.len()),
                        e.span,
                    ));
                }
                Ok(vs.pop().expect("one value"))
            }
        }
    }

    /// Evaluates an expression that may yield several values (calls, with-loops).
    pub(super) fn eval_multi(&mut self, frame: &mut Frame, e: &Expr) -> Res<Vec<Value>> {
        match &e.kind {
            ExprKind::Call { callee, args } => {
                let single: Option<&Function> =
                    if callee.candidates.len() == 1 { Some(self.program.function(callee.candidates[0])) } else { None };
                let mut vals = Vec::with_capacity(args.len());
                for (k, a) in args.iter().enumerate() {
                    // An argument the callee never reads may fail (real programs pass
                    // `5/0` there): its failure is ignored. Its value, when it has one,
                    // still takes part in dispatch and type checks.
                    let unused = single.is_some_and(|f| f.param_used.get(k) == Some(&false));
                    if unused && expr_pure(a, &self.purity) {
                        let depth = self.stack.len();
                        match self.eval(frame, a) {
                            Ok(v) => vals.push(Some(v)),
                            Err(_) => {
                                self.stack.truncate(depth);
                                vals.push(None);
                            }
                        }
                    } else {
                        vals.push(Some(self.eval(frame, a)?));
                    }
                }
                self.call(callee, vals, e.span)
            }
            ExprKind::With(w) => self.with_loop(frame, w),
            _ => Ok(vec![self.eval(frame, e)?]),
        }
    }

    fn prim(&mut self, prim: &Prim, args: Vec<Value>, span: Span) -> Res<Value> {
        super::apply_prim(prim, args, self.out).map_err(|err| self.op_error(err, span))
    }

    // ------------------------------------------------------------ with-loops

    fn with_loop(&mut self, frame: &mut Frame, w: &hir::With) -> Res<Vec<Value>> {
        let mut states = Vec::with_capacity(w.ops.len());
        let recorded: Option<Vec<Option<crate::sema::ty::Ty>>> = match (self.typed, self.instances.last()) {
            (Some(typed), Some(Some(i))) => typed.instance(*i).withs.get(&w.id).cloned(),
            _ => None,
        };
        for (k, op) in w.ops.iter().enumerate() {
            let mut st = self.op_state(frame, op, w.cell_hint)?;
            if let (OpState::Gen { cell, .. }, Some(r)) = (&mut st, &recorded) {
                *cell = Some(r.get(k).cloned().flatten());
            }
            states.push(st);
        }
        // The frame shape dot bounds refer to: the first operator that has one.
        let frame_shape: Option<Vec<usize>> = states.iter().find_map(|s| s.frame_shape());
        let mut covered: Option<Vec<bool>> = None;
        if w.first_match
            && w.parts.len() > 1
            && let Some(fs) = &frame_shape
        {
            let n = shape_size(fs).ok_or_else(|| self.error(codes::ALLOCATION_TOO_LARGE, "frame too large", w.span))?;
            covered = Some(vec![false; n]);
        }
        'parts: for part in &w.parts {
            let generator = self.generator(frame, part, frame_shape.as_deref())?;
            // A genarray's indices are whole indices of its shape.
            for st in &states {
                if let OpState::Gen { shape, .. } = st
                    && generator.lower.len() != shape.len()
                {
                    return Err(self.error(
                        codes::BAD_GENERATOR_VALUE,
                        GENERATOR_LENGTH_MISMATCH.to_string(),
                        part.generator_span,
                    ));
                }
            }
            // Generators must stay inside every genarray and modarray result.
            if generator.nonempty() {
                for fs in states.iter().filter_map(|s| s.frame_shape()) {
                    let outside = (0..generator.lower.len()).any(|d| {
                        let hi = generator.coords[d].last().copied().unwrap_or(0);
                        generator.coords[d].first().is_some_and(|&lo| lo < 0)
                            || fs.get(d).is_none_or(|&e| hi >= e as i64)
                    });
                    if outside {
                        return Err(self.error(
                            codes::BAD_GENERATOR_VALUE,
                            format!(
                                "generator covers index {} outside the result shape {}",
                                shape_text_i(&generator.corner_max()),
                                shape_text(&fs)
                            ),
                            part.generator_span,
                        ));
                    }
                }
            }
            let n = generator.coords.len();
            let mut pos = vec![0usize; n];
            if !generator.nonempty() {
                continue;
            }
            let mut iv_value: Option<Value> = None;
            loop {
                let index: Vec<i64> = (0..n).map(|d| generator.coords[d][pos[d]]).collect();
                let frame_offset = frame_shape.as_deref().and_then(|fs| row_major_offset(&index, fs));
                let skip = match (&covered, frame_offset) {
                    (Some(c), Some(o)) => c[o],
                    _ => false,
                };
                if self.options.max_steps.is_some() {
                    self.step(part.span)?;
                }
                if !skip {
                    if let (Some(c), Some(o)) = (&mut covered, frame_offset) {
                        c[o] = true;
                    }
                    // Bind the index (re-using the vector's buffer when nobody kept it).
                    if let Some(l) = part.index_vector {
                        let reused = match iv_value.take() {
                            Some(Value::Array(mut rc)) => match std::sync::Arc::get_mut(&mut rc) {
                                Some(Array { elems: Elems::Int(_, data), .. }) if data.len() == n => {
                                    data.copy_from_slice(&index);
                                    Some(Value::Array(rc))
                                }
                                _ => None,
                            },
                            _ => None,
                        };
                        let v = reused
                            .unwrap_or_else(|| Value::from_parts(vec![n], Elems::Int(BaseType::Int, index.clone())));
                        frame[l.0 as usize] = Some(v);
                    }
                    if let Some(ls) = &part.index_scalars {
                        for (l, &i) in ls.iter().zip(&index) {
                            frame[l.0 as usize] = Some(Value::Scalar(Scalar::int(i)));
                        }
                    }
                    if let Flow::Return(_) = self.exec(frame, &part.body)? {
                        return Err(self.error(codes::BAD_WITH_LOOP, "`return` inside a with-loop body", part.span));
                    }
                    let mut all_done = true;
                    if part.results.len() == 1 && states.len() > 1 {
                        // One expression yielding a value per operator (`{ [i] -> f(i) }`
                        // where `f` returns several results).
                        let r = &part.results[0];
                        let vs = self.eval_multi(frame, r)?;
                        if vs.len() != states.len() {
                            return Err(self.error(
                                codes::ASSIGN_COUNT,
                                format!(
                                    "this yields {} values but the with-loop has {} operators",
                                    vs.len(),
                                    states.len()
                                ),
                                r.span,
                            ));
                        }
                        for (k, (v, st)) in vs.into_iter().zip(states.iter_mut()).enumerate() {
                            if !st.done() {
                                self.apply(st, &index, v, r.span, &w.ops[k])?;
                            }
                            all_done &= st.done();
                        }
                    } else {
                        for (k, (r, st)) in part.results.iter().zip(states.iter_mut()).enumerate() {
                            if st.done() {
                                continue;
                            }
                            let v = self.eval(frame, r)?;
                            self.apply(st, &index, v, r.span, &w.ops[k])?;
                            all_done &= st.done();
                        }
                    }
                    if all_done && states.iter().all(|s| s.done()) && !states.is_empty() {
                        break 'parts;
                    }
                    if let Some(l) = part.index_vector {
                        // Take the index back so its buffer can be reused.
                        iv_value = frame[l.0 as usize].take();
                    }
                }
                // Next index, last axis fastest.
                let mut d = n;
                loop {
                    if d == 0 {
                        continue 'parts;
                    }
                    d -= 1;
                    pos[d] += 1;
                    if pos[d] < generator.coords[d].len() {
                        break;
                    }
                    pos[d] = 0;
                }
            }
        }
        let mut results = Vec::with_capacity(states.len());
        for st in states {
            results.push(self.finish(st, w.span)?);
        }
        Ok(results)
    }

    fn op_state(&mut self, frame: &mut Frame, op: &WithOp, hint: Option<BaseType>) -> Res<OpState> {
        Ok(match op {
            WithOp::Genarray { shape, default, span } => {
                let shp = self.eval(frame, shape)?;
                let shape = shape_vector(&shp)
                    .map_err(|m| self.error(codes::INVALID_ARGUMENT, format!("genarray shape {m}"), shape.span))?;
                let default = match default {
                    Some(d) => Some(self.eval(frame, d)?),
                    None => None,
                };
                OpState::Gen { shape, default, result: None, hint, cell: None, span: *span }
            }
            WithOp::Modarray { array, .. } => {
                let a = self.eval(frame, array)?;
                OpState::Mod { array: a, result: None }
            }
            WithOp::Fold { fun, neutral, .. } => {
                let acc = self.eval(frame, neutral)?;
                let mut partial = Vec::new();
                for p in &fun.partial {
                    partial.push(self.eval(frame, p)?);
                }
                OpState::Fold { acc, target: fun.target.clone(), partial, fixpoint: None, done: false, span: fun.span }
            }
            WithOp::FoldFix { fun, neutral, fixpoint, .. } => {
                let acc = self.eval(frame, neutral)?;
                let fix = self.eval(frame, fixpoint)?;
                let mut partial = Vec::new();
                for p in &fun.partial {
                    partial.push(self.eval(frame, p)?);
                }
                let done = acc.identical(&fix);
                OpState::Fold { acc, target: fun.target.clone(), partial, fixpoint: Some(fix), done, span: fun.span }
            }
        })
    }

    fn apply(&mut self, st: &mut OpState, index: &[i64], v: Value, span: Span, op: &WithOp) -> Res<()> {
        match st {
            OpState::Gen { shape, default, result, hint, .. } => {
                let Some(offset) = row_major_offset(index, shape) else {
                    // Generators were checked against the result shape.
                    return Err(self.error(codes::INTERNAL_ERROR, "with-loop index outside the result", span));
                };
                if result.is_none() {
                    let cell_proto = default.clone().unwrap_or_else(|| zero_like(&v));
                    let _ = hint;
                    *result = Some(self.alloc_cells(shape, &cell_proto, op.span())?);
                }
                let r = result.as_mut().expect("allocated");
                write_cell(r, offset, &v).map_err(|m| self.error(m.0, m.1, span))
            }
            OpState::Mod { array, result } => {
                let n = index.len();
                let full = array.shape().to_vec();
                let Some(offset) = row_major_offset(index, &full[..n.min(full.len())]).filter(|_| n <= full.len())
                else {
                    return Err(self.error(
                        codes::INDEX_OUT_OF_BOUNDS,
                        format!(
                            "with-loop index {} outside the array of shape {}",
                            shape_text_i(index),
                            shape_text(&full)
                        ),
                        span,
                    ));
                };
                if result.is_none() {
                    let elems = array
                        .to_elems()
                        .ok_or_else(|| self.error(codes::RUNTIME_TYPE_MISMATCH, "cannot modify a string", span))?;
                    let cell_shape = full[n..].to_vec();
                    let cell_len = shape_size(&cell_shape).unwrap_or(0);
                    *result = Some(Cells { shape: full.clone(), cell_shape, cell_len, elems });
                }
                let r = result.as_mut().expect("allocated");
                write_cell(r, offset, &v).map_err(|m| self.error(m.0, m.1, span))
            }
            OpState::Fold { acc, target, partial, fixpoint, done, span: fspan } => {
                let fspan = *fspan;
                let mut args: Vec<Value> = partial.clone();
                args.push(std::mem::replace(acc, Value::Scalar(Scalar::int(0))));
                args.push(v);
                let next = match target {
                    FoldTarget::Prim(p) => self.prim(p, args, fspan)?,
                    FoldTarget::Call(callee) => {
                        let mut r = self.call(callee, args.into_iter().map(Some).collect(), fspan)?;
                        if r.len() != 1 {
                            return Err(self.error(
                                codes::BAD_FOLD_FUNCTION,
                                "the fold function must return one value",
                                fspan,
                            ));
                        }
                        r.pop().expect("one")
                    }
                };
                if let Some(fix) = fixpoint {
                    *done = next.identical(fix);
                }
                *acc = next;
                Ok(())
            }
        }
    }

    fn alloc_cells(&self, frame: &[usize], proto: &Value, span: Span) -> Res<Cells> {
        let cell_shape = proto.shape().to_vec();
        let cell_len = proto.len();
        let mut shape = frame.to_vec();
        shape.extend_from_slice(&cell_shape);
        let n =
            shape_size(&shape).ok_or_else(|| self.error(codes::ALLOCATION_TOO_LARGE, "array size overflows", span))?;
        let elems = prims::repeat(proto, n / cell_len.max(1), n).map_err(|e| self.op_error(e, span))?;
        Ok(Cells { shape, cell_shape, cell_len, elems })
    }

    fn finish(&mut self, st: OpState, span: Span) -> Res<Value> {
        match st {
            OpState::Gen { shape, default, result, hint, cell, span: op_span } => {
                let cells = match result {
                    Some(c) => c,
                    None => {
                        // Nothing was computed: fill with the default, or zeros of the
                        // statically known cell type (seed 003 §4.3.2 case 4).
                        let proto = match (default, cell) {
                            (Some(d), _) => d,
                            (None, Some(Some(ty))) => match (ty.elem, ty.shape.extents()) {
                                (Elem::Base(b), Some(ext)) => {
                                    let n = ext.iter().product::<usize>();
                                    let elems = Elems::filled(Scalar::zero(b), n)
                                        .map_err(|e| self.op_error(super::ops::too_large(e), op_span))?;
                                    Value::from_parts(ext, elems)
                                }
                                _ => return Err(self.unknown_result_shape(span)),
                            },
                            (None, Some(None)) => return Err(self.unknown_result_shape(span)),
                            (None, None) => Value::Scalar(Scalar::zero(hint.unwrap_or(BaseType::Int))),
                        };
                        self.alloc_cells(&shape, &proto, op_span)?
                    }
                };
                Ok(Value::from_parts(cells.shape, cells.elems))
            }
            OpState::Mod { array, result } => Ok(match result {
                Some(c) => Value::from_parts(c.shape, c.elems),
                None => array,
            }),
            OpState::Fold { acc, .. } => {
                let _ = span;
                Ok(acc)
            }
        }
    }

    fn unknown_result_shape(&self, span: Span) -> RuntimeError {
        let mut e = self.error(
            codes::UNKNOWN_RESULT_SHAPE,
            "the shape of this with-loop's result is unknown: no element was computed, and the shape of the elements is only known when they are",
            span,
        );
        e.notes.push(
            "give the genarray a default element, or make the element shape independent of the index".to_string(),
        );
        e
    }

    fn generator(&mut self, frame: &mut Frame, part: &hir::WithPart, frame_shape: Option<&[usize]>) -> Res<Gen> {
        let span = part.generator_span;
        let mut eval_vec = |this: &mut Self, e: &Expr, what: &str| -> Res<Vec<i64>> {
            let v = this.eval(frame, e)?;
            match (&v, v.as_int_vec()) {
                (Value::Array(a), Some(x)) if a.shape.len() == 1 => Ok(x),
                _ => Err(this.error(
                    codes::BAD_GENERATOR_VALUE,
                    format!("the generator's {what} must be an int vector, not {}", describe_value(&v)),
                    e.span,
                )),
            }
        };
        let lower = match &part.lower {
            Some((Bound::Expr(e), rel)) => Some((eval_vec(self, e, "lower bound")?, *rel)),
            _ => None,
        };
        // A lower `.` is the zero vector; with `<` it excludes it (`(. < iv < .)`).
        let strict_dot_lower = matches!(&part.lower, Some((Bound::Dot(_), Rel::Lt)));
        let upper = match &part.upper.1 {
            Bound::Expr(e) => Some(eval_vec(self, e, "upper bound")?),
            Bound::Dot(_) => None,
        };
        let step = match &part.step {
            Some(e) => Some(eval_vec(self, e, "step")?),
            None => None,
        };
        let width = match &part.width {
            Some(e) => Some(eval_vec(self, e, "width")?),
            None => None,
        };
        // The index length: from the index pattern, a bound, step/width, or the result.
        let n = part
            .index_scalars
            .as_ref()
            .map(|s| s.len())
            .or(lower.as_ref().map(|l| l.0.len()))
            .or(upper.as_ref().map(|u| u.len()))
            .or(step.as_ref().map(|s| s.len()))
            .or(width.as_ref().map(|w| w.len()))
            .or(frame_shape.map(|f| f.len()));
        let Some(n) = n else {
            return Err(self.error(codes::BAD_GENERATOR_VALUE, "cannot tell how long this generator's index is", span));
        };
        let dot_upper = || -> Option<Vec<i64>> {
            let fs = frame_shape?;
            (fs.len() >= n).then(|| fs[..n].iter().map(|&d| d as i64 - 1).collect())
        };
        let lo: Vec<i64> = match &lower {
            Some((l, rel)) => l.iter().map(|&x| if *rel == Rel::Lt { x + 1 } else { x }).collect(),
            None => vec![if strict_dot_lower { 1 } else { 0 }; n],
        };
        let hi_incl: Vec<i64> = match (&upper, &part.upper.1) {
            (Some(u), _) => u.iter().map(|&x| if part.upper.0 == Rel::Lt { x - 1 } else { x }).collect(),
            (None, _) => {
                let Some(d) = dot_upper() else {
                    return Err(self.error(
                        codes::BAD_GENERATOR_VALUE,
                        "a `.` upper bound needs a genarray or modarray result to refer to",
                        span,
                    ));
                };
                d.iter().map(|&x| if part.upper.0 == Rel::Lt { x - 1 } else { x }).collect()
            }
        };
        let step = step.unwrap_or_else(|| vec![1; n]);
        let width = width.unwrap_or_else(|| vec![1; n]);
        for (what, v) in [("lower bound", &lo), ("upper bound", &hi_incl), ("step", &step), ("width", &width)] {
            if v.len() != n {
                return Err(self.error(
                    codes::BAD_GENERATOR_VALUE,
                    format!("the generator's {what} has {} components but the index has {n}", v.len()),
                    span,
                ));
            }
        }
        if let Some(s) = step.iter().find(|&&s| s <= 0) {
            return Err(self.error(
                codes::BAD_GENERATOR_VALUE,
                format!("generator step must be positive, got {s}"),
                span,
            ));
        }
        if let Some(w) = width.iter().find(|&&w| w <= 0) {
            return Err(self.error(
                codes::BAD_GENERATOR_VALUE,
                format!("generator width must be positive, got {w}"),
                span,
            ));
        }
        let mut coords = Vec::with_capacity(n);
        let mut total: usize = 1;
        for d in 0..n {
            let mut c = Vec::new();
            let mut i = lo[d];
            while i <= hi_incl[d] {
                if (i - lo[d]) % step[d] < width[d] {
                    c.push(i);
                    if c.len() > super::value::MAX_ELEMENTS {
                        return Err(self.error(codes::ALLOCATION_TOO_LARGE, "generator has too many indices", span));
                    }
                    i += 1;
                } else {
                    // Jump to the next block.
                    i = lo[d] + ((i - lo[d]) / step[d] + 1) * step[d];
                }
            }
            total = total.saturating_mul(c.len());
            coords.push(c);
        }
        let _ = total;
        Ok(Gen { lower: lo, coords })
    }
}

struct Gen {
    lower: Vec<i64>,
    /// The covered coordinates per axis, ascending.
    coords: Vec<Vec<i64>>,
}

impl Gen {
    fn nonempty(&self) -> bool {
        self.coords.iter().all(|c| !c.is_empty())
    }

    fn corner_max(&self) -> Vec<i64> {
        self.coords.iter().map(|c| c.last().copied().unwrap_or(0)).collect()
    }
}

/// A result array under construction, addressed in whole cells.
struct Cells {
    shape: Vec<usize>,
    cell_shape: Vec<usize>,
    cell_len: usize,
    elems: Elems,
}

enum OpState {
    Gen {
        shape: Vec<usize>,
        default: Option<Value>,
        result: Option<Cells>,
        hint: Option<BaseType>,
        /// The cell type inference recorded (`Some(None)`: statically unknown).
        cell: Option<Option<crate::sema::ty::Ty>>,
        span: Span,
    },
    Mod {
        array: Value,
        result: Option<Cells>,
    },
    Fold {
        acc: Value,
        target: FoldTarget,
        partial: Vec<Value>,
        fixpoint: Option<Value>,
        done: bool,
        span: Span,
    },
}

impl OpState {
    fn frame_shape(&self) -> Option<Vec<usize>> {
        match self {
            OpState::Gen { shape, .. } => Some(shape.clone()),
            OpState::Mod { array, .. } => Some(array.shape().to_vec()),
            OpState::Fold { .. } => None,
        }
    }

    fn done(&self) -> bool {
        matches!(self, OpState::Fold { done: true, .. })
    }
}

fn zero_like(v: &Value) -> Value {
    match v.base() {
        Some(b) => {
            let zero = Scalar::zero(b);
            if v.shape().is_empty() {
                Value::Scalar(zero)
            } else {
                let n = v.len();
                Elems::filled(zero, n).map(|e| Value::from_parts(v.shape().to_vec(), e)).unwrap_or(Value::Scalar(zero))
            }
        }
        None => v.clone(),
    }
}

fn write_cell(r: &mut Cells, offset: usize, v: &Value) -> Result<(), (Code, String)> {
    if v.shape() != r.cell_shape.as_slice() {
        return Err((
            codes::IRREGULAR_ARRAY,
            format!(
                "with-loop elements differ in shape: {} here, {} elsewhere",
                shape_text(v.shape()),
                shape_text(&r.cell_shape)
            ),
        ));
    }
    if v.base() != Some(r.elems.base()) {
        return Err((
            codes::RUNTIME_TYPE_MISMATCH,
            format!(
                "with-loop elements differ in type: {} here, {} elsewhere",
                v.base().map_or("string".into(), |b| b.to_string()),
                r.elems.base()
            ),
        ));
    }
    let start = offset * r.cell_len;
    let ok = match v {
        Value::Scalar(s) => r.elems.set(start, *s),
        Value::Array(a) => r.elems.copy_range(start, &a.elems, 0, r.cell_len),
        Value::Str(_) => false,
    };
    if ok { Ok(()) } else { Err((codes::INTERNAL_ERROR, "cell write failed".into())) }
}

fn shape_vector(v: &Value) -> Result<Vec<usize>, String> {
    match (v, v.as_int_vec()) {
        (Value::Array(a), Some(x)) if a.shape.len() == 1 => {
            x.iter().map(|&d| if d < 0 { Err(format!("has a negative extent {d}")) } else { Ok(d as usize) }).collect()
        }
        _ => Err(format!("must be an int vector, not {}", describe_value(v))),
    }
}

pub fn shape_text(shape: &[usize]) -> String {
    format!("[{}]", shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(","))
}

fn shape_text_i(shape: &[i64]) -> String {
    format!("[{}]", shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(","))
}

/// `int[3,4]`, `double`, `string` — how a value's type is shown in messages.
pub fn describe_value(v: &Value) -> String {
    match v {
        Value::Str(_) => "string".to_string(),
        Value::Scalar(s) => s.base().to_string(),
        Value::Array(a) => format!("{}{}", a.elems.base(), shape_text(&a.shape)),
    }
}

//! The IR interpreter: runs a [`Module`] with the semantics stated in the module
//! documentation of [`crate::ir`].
//!
//! It shares primitives, value representation and printing with the reference
//! interpreter ([`crate::interp`]), so the two agree by construction where they
//! can. Differential tests run a program through the reference interpreter, the
//! unoptimised IR and the optimised IR and compare output, results, error codes
//! and error locations.
//!
//! It also polices the optimiser: a primitive whose check was removed
//! (`unchecked`) but fails anyway, a value read before it is defined, or a cell of
//! an unexpected type are compiler bugs (B0001), not user errors.

use super::*;
use crate::diagnostics::{self as codes, Code};
use crate::interp::dispatch::{Bindings, match_pattern};
use crate::interp::ops::OpError;
use crate::interp::prims;
use crate::interp::value::{self as val, Elems, Scalar, row_major_offset, shape_size};
use crate::interp::{RunOptions, RuntimeError, apply_prim, describe_value};
use crate::sema::hir::Elem;
use crate::span::SourceMap;

type Res<T> = Result<T, RuntimeError>;

/// Runs entry `entry` of `module` on `args`; program output goes to `out`.
/// Returns `None` when the module has no entry of that name.
pub fn run(
    module: &Module,
    sources: &SourceMap,
    entry: &str,
    args: Vec<Value>,
    options: RunOptions,
    out: &mut dyn FnMut(&[u8]),
) -> Option<Res<Vec<Value>>> {
    let candidates: Vec<FuncId> = module.entries.iter().filter(|(n, _)| n == entry).map(|(_, f)| *f).collect();
    let first = *candidates.first()?;
    let limit = options.max_elements;
    let mut it = Interp { module, sources, options, out, stack: Vec::new(), steps: 0 };
    let span = module.function(first).span;
    // One entry function per element-type signature: pick by the arguments' types.
    let chosen = candidates.iter().copied().find(|f| {
        let func = module.function(*f);
        func.params.len() == args.len()
            && func.params.iter().zip(&args).all(|(p, a)| match (func.ty(*p).elem, a) {
                (Elem::String, Value::Str(_)) => true,
                (Elem::Base(b), v) => v.base() == Some(b),
                _ => false,
            })
    });
    // The entry's parameter types hold for its arguments, as compiled code
    // checks them (an L0 `main([int] a)` given a matrix; SaC's entries are
    // dispatch wrappers, which admit what any instance does).
    if let Some(f) = chosen {
        let func = module.function(f);
        for (p, a) in func.params.iter().zip(&args) {
            let ty = func.ty(*p);
            let fits = ty.admits(a) || (a.base().is_some() && ty.shape.contains(a.shape()));
            if !fits {
                let message = format!("`{entry}` takes {ty}, not {}", describe_value(a));
                return Some(Err(it.error(codes::NO_MATCHING_INSTANCE, message, Some(span))));
            }
        }
    }
    let result = val::with_element_limit(limit, || match chosen {
        Some(f) => it.call(f, args, Some(span)),
        None => {
            let types: Vec<String> = args.iter().map(describe_value).collect();
            Err(it.error(
                codes::NO_MATCHING_INSTANCE,
                format!("no instance of `{entry}` accepts ({})", types.join(", ")),
                Some(span),
            ))
        }
    });
    Some(result)
}

struct Interp<'m> {
    module: &'m Module,
    sources: &'m SourceMap,
    options: RunOptions,
    out: &'m mut dyn FnMut(&[u8]),
    /// Active calls, innermost last: the user-facing call site (`None` where the
    /// call is invisible, inside a wrapper) and the callee.
    stack: Vec<(Option<Span>, FuncId)>,
    steps: u64,
}

type Frame = Vec<Option<Value>>;

impl Interp<'_> {
    /// An error blamed at `at` (`None`: the caller), moved out of library code to
    /// the user's call that led there.
    fn error(&self, code: Code, message: impl Into<String>, at: Option<Span>) -> RuntimeError {
        let mut span = at.filter(|s| !self.sources.is_library(*s));
        let mut note = None;
        if span.is_none() {
            if at.is_some() {
                note = self.stack.last().map(|(_, f)| self.module.function(*f).source_name.clone());
            }
            span = self.stack.iter().rev().filter_map(|(s, _)| *s).find(|s| !self.sources.is_library(*s));
        }
        let span = span.or(at).unwrap_or_else(|| Span::new(crate::span::FileId(0), 0, 0));
        let mut err = RuntimeError { code, message: message.into(), span, notes: Vec::new(), trace: Vec::new() };
        if let Some(f) = note {
            err.notes.push(format!("raised inside the library function `{f}`"));
        }
        let mut seen: Vec<Span> = Vec::new();
        for (site, callee) in self.stack.iter().rev() {
            let Some(site) = site else { continue };
            if seen.len() >= 6 || seen.contains(site) {
                continue;
            }
            seen.push(*site);
            let f = self.module.function(*callee);
            if !self.sources.is_library(*site) && *site != err.span && *site != f.span {
                err.trace.push((*site, format!("in this call of `{}`", f.source_name)));
            }
        }
        err
    }

    fn op_error(&self, e: OpError, at: Option<Span>) -> RuntimeError {
        self.error(e.code, e.message, at)
    }

    fn bug(&self, message: impl Into<String>, at: Option<Span>) -> RuntimeError {
        self.error(codes::INTERNAL_ERROR, message, at)
    }

    fn step(&mut self, at: Option<Span>) -> Res<()> {
        self.steps += 1;
        match self.options.max_steps {
            Some(max) if self.steps > max => {
                Err(self.error(codes::STEP_LIMIT, format!("the program ran for more than {max} steps"), at))
            }
            _ => Ok(()),
        }
    }

    // ------------------------------------------------------------ calls

    fn call(&mut self, fid: FuncId, args: Vec<Value>, site: Option<Span>) -> Res<Vec<Value>> {
        let f = self.module.function(fid);
        if self.stack.len() >= self.options.max_call_depth {
            return Err(self.recursion_error(site));
        }
        if f.params.len() != args.len() {
            return Err(self.bug(format!("`{}` called with {} arguments", f.name, args.len()), site));
        }
        self.stack.push((site, fid));
        let mut frame: Frame = vec![None; f.values.len()];
        for (p, a) in f.params.iter().zip(args) {
            frame[p.0 as usize] = Some(a);
        }
        let result = self.block(f, &mut frame, &f.body);
        self.stack.pop();
        result
    }

    /// Blames the user function that recursed: the one called most often on the stack.
    fn recursion_error(&self, site: Option<Span>) -> RuntimeError {
        let mut counts: crate::HashMap<FuncId, usize> = crate::HashMap::default();
        for (_, callee) in &self.stack {
            let f = self.module.function(*callee);
            if !f.library && f.kind == FunctionKind::Instance {
                *counts.entry(*callee).or_default() += 1;
            }
        }
        let culprit = counts.into_iter().max_by_key(|(f, n)| (*n, std::cmp::Reverse(*f))).map(|(f, _)| f);
        let (name, at) = match culprit {
            Some(f) => {
                let at = self.stack.iter().rev().find(|(_, c)| *c == f).and_then(|(s, _)| *s).or(site);
                (self.module.function(f).source_name.clone(), at)
            }
            None => (
                self.stack.last().map_or_else(|| Name::new("?"), |(_, f)| self.module.function(*f).source_name.clone()),
                site,
            ),
        };
        let mut err = self.error(
            codes::RECURSION_LIMIT,
            format!("more than {} nested calls: `{name}` keeps calling itself", self.options.max_call_depth),
            at,
        );
        if let Some(at) = at {
            err.span = at;
        }
        err.trace.clear();
        err.notes.clear();
        err.notes.push("the recursion probably never reaches its base case".to_string());
        err
    }

    // ------------------------------------------------------------ blocks

    fn get(&self, frame: &Frame, v: ValueId, at: Option<Span>) -> Res<Value> {
        match frame.get(v.0 as usize) {
            Some(Some(x)) => Ok(x.clone()),
            _ => Err(self.bug(format!("%{} is read before it is defined, or after its buffer was reused", v.0), at)),
        }
    }

    fn block(&mut self, f: &Function, frame: &mut Frame, b: &Block) -> Res<Vec<Value>> {
        for s in &b.stmts {
            self.stmt(f, frame, s)?;
        }
        let at = Some(f.span);
        b.yields.iter().map(|y| self.get(frame, *y, at)).collect()
    }

    fn define(&self, frame: &mut Frame, s: &Stmt, values: Vec<Value>) -> Res<()> {
        if values.len() != s.defs.len() {
            return Err(self.bug(
                format!("a statement produced {} values for {} definitions", values.len(), s.defs.len()),
                s.blame_span(),
            ));
        }
        for (d, v) in s.defs.iter().zip(values) {
            frame[d.0 as usize] = Some(v);
        }
        Ok(())
    }

    fn stmt(&mut self, f: &Function, frame: &mut Frame, s: &Stmt) -> Res<()> {
        let at = self.blame(s);
        if self.options.max_steps.is_some() {
            self.step(at)?;
        }
        let values = match &s.op {
            Op::Const(c) => vec![c.clone()],
            Op::Prim { prim, args, checked, in_place } => {
                let vals = args.iter().map(|a| self.get(frame, *a, at)).collect::<Res<Vec<_>>>()?;
                if *in_place {
                    // The optimiser claims the updated array is dead from here on:
                    // any later read of it is a bug.
                    frame[args[0].0 as usize] = None;
                }
                match apply_prim(prim, vals, self.out) {
                    Ok(v) => vec![v],
                    Err(e) if !checked && matches!(e.code, codes::INDEX_OUT_OF_BOUNDS | codes::SHAPE_MISMATCH) => {
                        return Err(self.bug(format!("a check the optimiser removed fails: {}", e.message), at));
                    }
                    Err(e) => return Err(self.op_error(e, at)),
                }
            }
            Op::Call { func, args } => {
                let vals = args.iter().map(|a| self.get(frame, *a, at)).collect::<Res<Vec<_>>>()?;
                // A call blamed on the caller (inside a wrapper) is invisible in
                // error locations: its frame has no site of its own.
                self.call(*func, vals, at)?
            }
            Op::Array(args) => {
                let vals = args.iter().map(|a| self.get(frame, *a, at)).collect::<Res<Vec<_>>>()?;
                vec![prims::stack(vals).map_err(|e| self.op_error(e, at))?]
            }
            Op::If { cond, then_block, else_block } => {
                let c = self.get(frame, *cond, at)?;
                let taken = match c {
                    Value::Scalar(Scalar::Bool(b)) => b,
                    other => {
                        return Err(self.error(
                            codes::RUNTIME_TYPE_MISMATCH,
                            format!("a condition must be a bool, not {}", describe_value(&other)),
                            at,
                        ));
                    }
                };
                self.block(f, frame, if taken { then_block } else { else_block })?
            }
            Op::Loop { init, params, cond, body, test_first, .. } => {
                let mut current = init.iter().map(|a| self.get(frame, *a, at)).collect::<Res<Vec<_>>>()?;
                let mut first = true;
                loop {
                    for (p, v) in params.iter().zip(&current) {
                        frame[p.0 as usize] = Some(v.clone());
                    }
                    if *test_first || !first {
                        let c = self.block(f, frame, cond)?;
                        match c.first() {
                            Some(Value::Scalar(Scalar::Bool(true))) => {}
                            Some(Value::Scalar(Scalar::Bool(false))) => break,
                            other => {
                                let what = other.map_or("nothing".to_string(), describe_value);
                                return Err(self.error(
                                    codes::RUNTIME_TYPE_MISMATCH,
                                    format!("the loop condition must be a bool, not {what}"),
                                    at,
                                ));
                            }
                        }
                    }
                    first = false;
                    if self.options.max_steps.is_some() {
                        self.step(at)?;
                    }
                    current = self.block(f, frame, body)?;
                }
                current
            }
            Op::With(w) => {
                let results = self.with_loop(f, frame, w, at)?;
                for r in w.reuse.iter().flatten() {
                    // As for in-place updates: the reused buffer is dead now.
                    frame[r.0 as usize] = None;
                }
                results
            }
            Op::Check(c) => {
                self.check(frame, c, at)?;
                Vec::new()
            }
            Op::Fail { code, message, args } => {
                let mut described = Vec::with_capacity(args.len());
                for a in args {
                    described.push(describe_value(&self.get(frame, *a, at)?));
                }
                let (message, notes) = crate::ir::fail_message(message, &described);
                let mut err = self.error(*code, message, at);
                err.notes.extend(notes);
                return Err(err);
            }
            Op::Narrow(v) => {
                let x = self.get(frame, *v, at)?;
                let want = f.ty(s.defs[0]);
                if !want.admits(&x) {
                    return Err(self.bug(format!("a {} was narrowed to {want}", describe_value(&x)), at));
                }
                vec![x]
            }
            Op::Pattern { args, specs, vars, labels, results: true, .. } => {
                let mut env = Bindings::default();
                let given = args.len().saturating_sub(labels.len());
                for (name, a) in vars.iter().zip(&args[..given]) {
                    let v = self.get(frame, *a, at)?;
                    match crate::interp::dispatch::Binding::of_value(&v) {
                        Some(b) => env.insert(name.clone(), b),
                        None => {
                            return Err(self.bug(format!("pattern variable `{name}` is {}", describe_value(&v)), at));
                        }
                    };
                }
                for ((a, spec), what) in args[given..].iter().zip(specs).zip(labels) {
                    let v = self.get(frame, *a, at)?;
                    if !match_pattern(spec, v.shape(), &mut env) {
                        let ty = crate::sema::hir::Type { elem: f.ty(*a).elem, shape: spec.clone() };
                        return Err(self.error(
                            codes::TYPE_ASSERTION_FAILED,
                            format!("{what} is {} but is declared {ty}", describe_value(&v)),
                            at,
                        ));
                    }
                }
                Vec::new()
            }
            Op::Pattern { args, specs, vars, function, labels, .. } => {
                let mut env = Bindings::default();
                for (k, (a, spec)) in args.iter().zip(specs).enumerate() {
                    let v = self.get(frame, *a, at)?;
                    if !match_pattern(spec, v.shape(), &mut env) {
                        let name = labels.get(k).map(|l| Name::new(l.as_str())).unwrap_or_else(|| {
                            f.values[a.0 as usize].name.clone().unwrap_or_else(|| Name::new(format!("#{}", k + 1)))
                        });
                        let ty = crate::sema::hir::Type { elem: f.ty(*a).elem, shape: spec.clone() };
                        return Err(self.error(
                            codes::CONDITION_FAILED,
                            format!(
                                "argument `{name}` of shape {} does not match `{ty}` in `{function}`",
                                crate::interp::shape_text(v.shape())
                            ),
                            at,
                        ));
                    }
                }
                let mut out = Vec::with_capacity(vars.len());
                for v in vars {
                    match env.get(v) {
                        Some(b) => out.push(b.to_value()),
                        None => return Err(self.bug(format!("pattern variable `{v}` is not bound"), at)),
                    }
                }
                out
            }
        };
        self.define(frame, s, values)
    }

    /// Where a statement's errors are reported (`None`: at the call of the
    /// function; wrappers' statements are all blamed so).
    fn blame(&self, s: &Stmt) -> Option<Span> {
        s.blame_span()
    }

    /// A span inside a statement (a generator, a part's result) where the
    /// statement's own blame would land in user code anyway; library spans defer
    /// to the statement's blame, which inlining may have moved.
    fn sub_span(&self, inner: Span, at: Option<Span>) -> Option<Span> {
        match at {
            Some(_) if !self.sources.is_library(inner) => Some(inner),
            _ => at,
        }
    }

    /// A check's shape operand: an int vector.
    fn shape_operand(&self, frame: &Frame, v: ValueId, at: Option<Span>) -> Res<Vec<i64>> {
        let x = self.get(frame, v, at)?;
        match (&x, x.as_int_vec()) {
            (Value::Array(a), Some(e)) if a.shape.len() == 1 => Ok(e),
            _ => Err(self.bug(format!("a check got {} where it needs a shape vector", describe_value(&x)), at)),
        }
    }

    fn check(&mut self, frame: &Frame, c: &CheckOp, at: Option<Span>) -> Res<()> {
        let fill = |msg: &str, a: &str, b: &str| msg.replace("{a}", a).replace("{b}", b);
        match &c.check {
            Check::SameShape(x, y) => {
                let (a, b) = (self.shape_operand(frame, *x, at)?, self.shape_operand(frame, *y, at)?);
                if !a.is_empty() && !b.is_empty() && a != b {
                    let (sa, sb) = (index_text(&a), index_text(&b));
                    return Err(self.error(c.code, fill(&c.message, &sa, &sb), at));
                }
            }
            Check::InBounds { index, shape } => {
                let i = self.get(frame, *index, at)?;
                let idx = prims::index_value(&i).map_err(|e| self.op_error(e, at))?;
                let shp = self.shape_operand(frame, *shape, at)?;
                let shp: Vec<usize> = shp.iter().map(|&d| d.max(0) as usize).collect();
                prims::check_index(&idx, &shp).map_err(|e| self.op_error(e, at))?;
            }
            Check::Assert(v) => {
                let x = self.get(frame, *v, at)?;
                if x != Value::Scalar(Scalar::Bool(true)) {
                    return Err(self.error(c.code, c.message.clone(), at));
                }
            }
            Check::Conforms(v, ty) => {
                let x = self.get(frame, *v, at)?;
                if !ty.admits(&x) {
                    return Err(self.error(c.code, fill(&c.message, &describe_value(&x), ""), at));
                }
            }
            Check::Extents(v) => {
                if let Some(d) = self.shape_operand(frame, *v, at)?.into_iter().find(|&d| d < 0) {
                    return Err(self.error(c.code, fill(&c.message, &d.to_string(), ""), at));
                }
            }
            Check::Reshape { shape, from } => {
                let shp = self.shape_operand(frame, *shape, at)?;
                let from: Vec<usize> =
                    self.shape_operand(frame, *from, at)?.iter().map(|&d| d.max(0) as usize).collect();
                if let Some(e) = prims::reshape_error(&shp, &from) {
                    return Err(self.op_error(e, at));
                }
            }
        }
        Ok(())
    }

    // ------------------------------------------------------------ with-loops

    fn with_loop(&mut self, f: &Function, frame: &mut Frame, w: &With, at: Option<Span>) -> Res<Vec<Value>> {
        let mut states = Vec::with_capacity(w.ops.len());
        for (k, op) in w.ops.iter().enumerate() {
            states.push(match op {
                WithOp::Genarray { shape, default } => {
                    let shp = self.get(frame, *shape, at)?;
                    let shape = shape_vector(&shp)
                        .map_err(|m| self.error(codes::INVALID_ARGUMENT, format!("genarray shape {m}"), at))?;
                    let default = match default {
                        Some(d) => Some(self.get(frame, *d, at)?),
                        None => None,
                    };
                    State::Gen { frame: shape, default, cells: None, cell_ty: w.cells.get(k).cloned().flatten() }
                }
                WithOp::Modarray { array } => {
                    let a = self.get(frame, *array, at)?;
                    State::Mod { frame: a.shape().to_vec(), array: a, cells: None }
                }
                WithOp::Fold { fun, partial, neutral, fixpoint } => {
                    let acc = self.get(frame, *neutral, at)?;
                    let partial = partial.iter().map(|p| self.get(frame, *p, at)).collect::<Res<Vec<_>>>()?;
                    let fix = match fixpoint {
                        Some(x) => Some(self.get(frame, *x, at)?),
                        None => None,
                    };
                    let done = fix.as_ref().is_some_and(|x| acc.identical(x));
                    State::Fold { acc, fun: fun.clone(), partial, fix, done }
                }
                WithOp::Scan { shape, fun, partial, neutral } => {
                    let shp = self.get(frame, *shape, at)?;
                    let shape = shape_vector(&shp)
                        .map_err(|m| self.error(codes::INVALID_ARGUMENT, format!("scan shape {m}"), at))?;
                    let n = shape_size(&shape)
                        .ok_or_else(|| self.error(codes::ALLOCATION_TOO_LARGE, "frame too large", at))?;
                    let neutral = self.get(frame, *neutral, at)?;
                    let partial = partial.iter().map(|p| self.get(frame, *p, at)).collect::<Res<Vec<_>>>()?;
                    State::Scan { frame: shape, values: vec![None; n], neutral, fun: fun.clone(), partial }
                }
                WithOp::Filter { shape } => {
                    let shp = self.get(frame, *shape, at)?;
                    let shape = shape_vector(&shp)
                        .map_err(|m| self.error(codes::INVALID_ARGUMENT, format!("filter shape {m}"), at))?;
                    let n = shape_size(&shape)
                        .ok_or_else(|| self.error(codes::ALLOCATION_TOO_LARGE, "frame too large", at))?;
                    State::Filter { frame: shape, values: vec![None; n], cell_ty: w.cells.get(k).cloned().flatten() }
                }
            });
        }
        let frame_shape: Option<Vec<usize>> = states.iter().find_map(|s| s.frame().map(<[usize]>::to_vec));
        let mut covered: Option<Vec<bool>> = None;
        if w.first_match
            && w.parts.len() > 1
            && let Some(fs) = &frame_shape
        {
            let n = shape_size(fs).ok_or_else(|| self.error(codes::ALLOCATION_TOO_LARGE, "frame too large", at))?;
            covered = Some(vec![false; n]);
        }
        // Fixpoint folds already at their fixpoint run no body at all.
        let finished = !states.is_empty() && states.iter().all(State::done);
        'parts: for part in w.parts.iter().filter(|_| !finished) {
            let gat = self.sub_span(part.span, at);
            let generator = self.generator(frame, part, gat)?;
            if !generator.nonempty() {
                continue;
            }
            for fs in states.iter().filter_map(State::frame) {
                let outside = generator.coords.iter().enumerate().any(|(d, c)| {
                    c.first().is_some_and(|&lo| lo < 0)
                        || fs.get(d).is_none_or(|&e| c.last().is_some_and(|&hi| hi >= e as i64))
                });
                if outside {
                    let corner: Vec<i64> = generator.coords.iter().map(|c| c.last().copied().unwrap_or(0)).collect();
                    return Err(self.error(
                        codes::BAD_GENERATOR_VALUE,
                        format!(
                            "generator covers index {} outside the result shape {}",
                            index_text(&corner),
                            crate::interp::shape_text(fs)
                        ),
                        gat,
                    ));
                }
            }
            let n = generator.coords.len();
            let mut pos = vec![0usize; n];
            loop {
                let index: Vec<i64> = (0..n).map(|d| generator.coords[d][pos[d]]).collect();
                let offset = frame_shape.as_deref().and_then(|fs| row_major_offset(&index, &fs[..n.min(fs.len())]));
                let skip = match (&covered, offset) {
                    (Some(c), Some(o)) => c[o],
                    _ => false,
                };
                if self.options.max_steps.is_some() {
                    self.step(gat)?;
                }
                if !skip {
                    if let (Some(c), Some(o)) = (&mut covered, offset) {
                        c[o] = true;
                    }
                    if let Some(iv) = part.index {
                        frame[iv.0 as usize] = Some(Value::from_parts(
                            vec![n],
                            Elems::Int(crate::syntax::ast::BaseType::Int, index.clone()),
                        ));
                    }
                    if let Some(ss) = &part.scalars {
                        for (s, &i) in ss.iter().zip(&index) {
                            frame[s.0 as usize] = Some(Value::Scalar(Scalar::int(i)));
                        }
                    }
                    if let Some(o) = part.offset {
                        let Some(off) = offset else {
                            return Err(self.bug("a with-loop offset without a result frame", gat));
                        };
                        frame[o.0 as usize] = Some(Value::Scalar(Scalar::int(off as i64)));
                    }
                    let mut values = self.block(f, frame, &part.body)?.into_iter();
                    // Values of the lanes of folds over tuples, combined together below.
                    let mut lane_values: Vec<Value> = Vec::new();
                    for (k, st) in states.iter_mut().enumerate() {
                        let rat = part.result_spans.get(k).map_or(at, |s| self.sub_span(*s, at));
                        let first = values.next().ok_or_else(|| self.bug("a part yields too few values", rat))?;
                        if let State::Filter { frame: fs, values: kept, .. } = st {
                            let v = values.next().ok_or_else(|| self.bug("a part yields too few values", rat))?;
                            let keep = match first {
                                Value::Scalar(Scalar::Bool(b)) => b,
                                other => {
                                    return Err(self.error(
                                        codes::RUNTIME_TYPE_MISMATCH,
                                        format!("a filter's flag must be a bool, not {}", describe_value(&other)),
                                        rat,
                                    ));
                                }
                            };
                            let o = row_major_offset(&index, fs)
                                .ok_or_else(|| self.bug("filter index outside its frame", rat))?;
                            kept[o] = Some((keep, v));
                            continue;
                        }
                        if let State::Fold { fun: FoldFn::Lane { .. }, .. } = st {
                            lane_values.push(first);
                            continue;
                        }
                        self.apply(st, &index, first, rat)?;
                    }
                    if !lane_values.is_empty() {
                        self.apply_lanes(&mut states, lane_values, at)?;
                    }
                    if states.iter().all(State::done) && !states.is_empty() {
                        break 'parts;
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
        let mut states: Vec<Option<State>> = states.into_iter().map(Some).collect();
        let mut results = Vec::with_capacity(states.len());
        let mut k = 0;
        while k < states.len() {
            let lanes = match &states[k] {
                Some(State::Scan { fun: FoldFn::Lane { lanes, .. }, .. }) => *lanes,
                _ => 1,
            };
            let group: Option<Vec<State>> =
                states.get_mut(k..k + lanes).map(|g| g.iter_mut().filter_map(Option::take).collect());
            let group =
                group.filter(|g| g.len() == lanes).ok_or_else(|| self.bug("a scan over tuples lacks lanes", at))?;
            if lanes > 1 || matches!(group.first(), Some(State::Scan { fun: FoldFn::Lane { .. }, .. })) {
                results.extend(self.finish_scan_lanes(group, at)?);
            } else {
                for st in group {
                    results.push(self.finish(st, at)?);
                }
            }
            k += lanes;
        }
        Ok(results)
    }

    /// One index's values of the lanes of the folds over tuples in `states`,
    /// in operator order: each group's accumulators combined by one call.
    fn apply_lanes(&mut self, states: &mut [State], values: Vec<Value>, at: Option<Span>) -> Res<()> {
        let mut values = values.into_iter();
        let mut k = 0;
        while k < states.len() {
            let State::Fold { fun: FoldFn::Lane { func, lanes, .. }, partial, .. } = &states[k] else {
                k += 1;
                continue;
            };
            let (func, lanes, partial) = (*func, *lanes, partial.clone());
            let group = states.get_mut(k..k + lanes).ok_or_else(|| self.bug("a fold over tuples lacks lanes", at))?;
            let mut accs = Vec::with_capacity(lanes);
            for st in group.iter_mut() {
                let State::Fold { acc, .. } = st else { return Err(self.bug("a fold lane is not a fold", at)) };
                accs.push(std::mem::replace(acc, Value::Scalar(Scalar::int(0))));
            }
            let xs: Vec<Value> = values.by_ref().take(lanes).collect();
            if xs.len() != lanes {
                return Err(self.bug("a part yields too few values for a fold over tuples", at));
            }
            let next = self.combine_lanes(func, &partial, accs, xs, at)?;
            for (st, v) in group.iter_mut().zip(next) {
                if let State::Fold { acc, .. } = st {
                    *acc = v;
                }
            }
            k += lanes;
        }
        Ok(())
    }

    /// `func(partial…, accs…, xs…)`: one step of a fold or scan over tuples.
    fn combine_lanes(
        &mut self,
        func: FuncId,
        partial: &[Value],
        accs: Vec<Value>,
        xs: Vec<Value>,
        at: Option<Span>,
    ) -> Res<Vec<Value>> {
        let lanes = accs.len();
        let mut args: Vec<Value> = partial.to_vec();
        args.extend(accs);
        args.extend(xs);
        let r = self.call(func, args, at)?;
        if r.len() != lanes {
            return Err(self.bug("a fold function over tuples returned the wrong number of values", at));
        }
        Ok(r)
    }

    /// The results of a scan over tuples: its lanes' accumulators, combined
    /// together at every covered index of the frame in row-major order.
    fn finish_scan_lanes(&mut self, group: Vec<State>, at: Option<Span>) -> Res<Vec<Value>> {
        let mut frames = Vec::new();
        let mut columns = Vec::new();
        let mut accs = Vec::new();
        let mut func_partial = None;
        for st in group {
            let State::Scan { frame, values, neutral, fun: FoldFn::Lane { func, .. }, partial } = st else {
                return Err(self.bug("a scan lane is not a scan over tuples", at));
            };
            func_partial.get_or_insert((func, partial));
            frames.push(frame);
            columns.push(values);
            accs.push(neutral);
        }
        let Some((func, partial)) = func_partial else { return Ok(Vec::new()) };
        let n = columns.first().map_or(0, Vec::len);
        let mut outs: Vec<Vec<Value>> = vec![Vec::with_capacity(n); accs.len()];
        let cells: Vec<(Vec<usize>, Option<crate::syntax::ast::BaseType>)> =
            accs.iter().map(|a| (a.shape().to_vec(), a.base())).collect();
        for o in 0..n {
            let xs: Option<Vec<Value>> = columns.iter_mut().map(|c| c.get_mut(o).and_then(Option::take)).collect();
            if let Some(xs) = xs {
                accs = self.combine_lanes(func, &partial, accs, xs, at)?;
            }
            for (out, acc) in outs.iter_mut().zip(&accs) {
                out.push(acc.clone());
            }
        }
        let mut results = Vec::with_capacity(outs.len());
        for ((out, frame), (cell, base)) in outs.into_iter().zip(frames).zip(cells) {
            let base = base.ok_or_else(|| self.error(codes::RUNTIME_TYPE_MISMATCH, "cannot scan strings", at))?;
            results.push(self.over_frame(&frame, out, &cell, base, at)?);
        }
        Ok(results)
    }

    fn apply(&mut self, st: &mut State, index: &[i64], v: Value, at: Option<Span>) -> Res<()> {
        match st {
            State::Gen { frame, default, cells, .. } => {
                let offset =
                    row_major_offset(index, frame).ok_or_else(|| self.bug("with-loop index outside the result", at))?;
                if cells.is_none() {
                    let proto = default.clone().unwrap_or_else(|| zero_like(&v));
                    *cells = Some(self.alloc(frame, &proto, at)?);
                }
                let c = cells.as_mut().expect("allocated");
                write_cell(c, offset, &v).map_err(|(code, m)| self.error(code, m, at))
            }
            State::Mod { frame, array, cells } => {
                let n = index.len();
                let offset = row_major_offset(index, &frame[..n.min(frame.len())])
                    .filter(|_| n <= frame.len())
                    .ok_or_else(|| self.bug("with-loop index outside the array", at))?;
                if cells.is_none() {
                    let elems = array
                        .to_elems()
                        .ok_or_else(|| self.error(codes::RUNTIME_TYPE_MISMATCH, "cannot modify a string", at))?;
                    let cell_shape = frame[n..].to_vec();
                    let cell_len = shape_size(&cell_shape).unwrap_or(0);
                    *cells = Some(Cells { shape: frame.clone(), cell_shape, cell_len, elems });
                }
                let c = cells.as_mut().expect("allocated");
                write_cell(c, offset, &v).map_err(|(code, m)| self.error(code, m, at))
            }
            State::Scan { frame, values, .. } => {
                let o = row_major_offset(index, frame).ok_or_else(|| self.bug("scan index outside its frame", at))?;
                values[o] = Some(v);
                Ok(())
            }
            State::Filter { .. } => Err(self.bug("a filter takes two values", at)),
            State::Fold { acc, fun, partial, fix, done } => {
                if *done {
                    return Ok(());
                }
                let prev = std::mem::replace(acc, Value::Scalar(Scalar::int(0)));
                let next = self.combine(fun, partial, prev, v, at)?;
                if let Some(x) = fix {
                    *done = next.identical(x);
                }
                *acc = next;
                Ok(())
            }
        }
    }

    /// `fun(partial…, acc, v)`: one step of a fold or scan.
    fn combine(&mut self, fun: &FoldFn, partial: &[Value], acc: Value, v: Value, at: Option<Span>) -> Res<Value> {
        let mut args: Vec<Value> = partial.to_vec();
        args.push(acc);
        args.push(v);
        match fun {
            FoldFn::Prim(p) => apply_prim(p, args, self.out).map_err(|e| self.op_error(e, at)),
            FoldFn::Call(g) => {
                let mut r = self.call(*g, args, at)?;
                if r.len() != 1 {
                    return Err(self.bug("a fold function returned several values", at));
                }
                r.pop().ok_or_else(|| self.bug("a fold function returned no value", at))
            }
            FoldFn::Lane { .. } => Err(self.bug("a lane of a fold over tuples combined alone", at)),
        }
    }

    /// Values of one shape stacked over a frame.
    fn over_frame(
        &self,
        frame: &[usize],
        items: Vec<Value>,
        cell: &[usize],
        base: crate::syntax::ast::BaseType,
        at: Option<Span>,
    ) -> Res<Value> {
        let mut shape = frame.to_vec();
        shape.extend_from_slice(cell);
        if items.is_empty() {
            let elems =
                Elems::with_capacity(base, 0).map_err(|e| self.op_error(crate::interp::ops::too_large(e), at))?;
            return Ok(Value::from_parts(shape, elems));
        }
        let stacked = prims::stack(items).map_err(|e| self.op_error(e, at))?;
        prims::reshape(&shape.iter().map(|&d| d as i64).collect::<Vec<_>>(), &stacked).map_err(|e| self.op_error(e, at))
    }

    fn alloc(&self, frame: &[usize], proto: &Value, at: Option<Span>) -> Res<Cells> {
        let cell_shape = proto.shape().to_vec();
        let cell_len = proto.len();
        let mut shape = frame.to_vec();
        shape.extend_from_slice(&cell_shape);
        let n =
            shape_size(&shape).ok_or_else(|| self.error(codes::ALLOCATION_TOO_LARGE, "array size overflows", at))?;
        let elems = prims::repeat(proto, n / cell_len.max(1), n).map_err(|e| self.op_error(e, at))?;
        Ok(Cells { shape, cell_shape, cell_len, elems })
    }

    fn finish(&mut self, st: State, at: Option<Span>) -> Res<Value> {
        match st {
            State::Gen { frame, default, cells, cell_ty } => {
                let cells = match cells {
                    Some(c) => c,
                    None => {
                        // Nothing was computed: the default, or zeros of the static cell type.
                        let proto = match (default, cell_ty) {
                            (Some(d), _) => d,
                            (None, Some(ty)) => match (ty.elem, ty.shape.extents()) {
                                (Elem::Base(b), Some(ext)) => {
                                    let n = ext.iter().product::<usize>();
                                    let elems = Elems::filled(Scalar::zero(b), n)
                                        .map_err(|e| self.op_error(crate::interp::ops::too_large(e), at))?;
                                    Value::from_parts(ext, elems)
                                }
                                _ => return Err(self.unknown_result_shape(at)),
                            },
                            (None, None) => return Err(self.unknown_result_shape(at)),
                        };
                        self.alloc(&frame, &proto, at)?
                    }
                };
                Ok(Value::from_parts(cells.shape, cells.elems))
            }
            State::Mod { array, cells, .. } => Ok(match cells {
                Some(c) => Value::from_parts(c.shape, c.elems),
                None => array,
            }),
            State::Fold { acc, .. } => Ok(acc),
            State::Scan { frame, values, neutral, fun, partial } => {
                let base = neutral
                    .base()
                    .ok_or_else(|| self.error(codes::RUNTIME_TYPE_MISMATCH, "cannot scan strings", at))?;
                let cell = neutral.shape().to_vec();
                let mut acc = neutral;
                let mut out = Vec::with_capacity(values.len());
                for v in values {
                    if let Some(v) = v {
                        acc = self.combine(&fun, &partial, acc, v, at)?;
                    }
                    out.push(acc.clone());
                }
                self.over_frame(&frame, out, &cell, base, at)
            }
            State::Filter { values, cell_ty, .. } => {
                let kept: Vec<Value> = values.into_iter().flatten().filter(|(k, _)| *k).map(|(_, v)| v).collect();
                let (base, cell) = match (kept.first(), &cell_ty) {
                    (Some(v), _) => (v.base(), v.shape().to_vec()),
                    (None, Some(t)) => match (t.elem, t.shape.extents()) {
                        (Elem::Base(b), Some(e)) => (Some(b), e),
                        _ => return Err(self.unknown_result_shape(at)),
                    },
                    (None, None) => return Err(self.unknown_result_shape(at)),
                };
                let base = base.ok_or_else(|| self.error(codes::RUNTIME_TYPE_MISMATCH, "cannot filter strings", at))?;
                let n = kept.len();
                self.over_frame(&[n], kept, &cell, base, at)
            }
        }
    }

    fn unknown_result_shape(&self, at: Option<Span>) -> RuntimeError {
        let mut e = self.error(
            codes::UNKNOWN_RESULT_SHAPE,
            "the shape of this with-loop's result is unknown: no element was computed, and the shape of the elements is only known when they are",
            at,
        );
        e.notes.push(
            "give the genarray a default element, or make the element shape independent of the index".to_string(),
        );
        e
    }

    fn generator(&mut self, frame: &Frame, part: &Part, at: Option<Span>) -> Res<Generator> {
        let vector = |this: &Self, v: ValueId, what: &str| -> Res<Vec<i64>> {
            let x = this.get(frame, v, at)?;
            match (&x, x.as_int_vec()) {
                (Value::Array(a), Some(e)) if a.shape.len() == 1 => Ok(e),
                _ => Err(this.error(
                    codes::BAD_GENERATOR_VALUE,
                    format!("the generator's {what} must be an int vector, not {}", describe_value(&x)),
                    at,
                )),
            }
        };
        let lo = vector(self, part.lower, "lower bound")?;
        let hi = vector(self, part.upper, "upper bound")?;
        let n = lo.len();
        let step = match part.step {
            Some(s) => vector(self, s, "step")?,
            None => vec![1; n],
        };
        let width = match part.width {
            Some(s) => vector(self, s, "width")?,
            None => vec![1; n],
        };
        for (what, v) in [("upper bound", &hi), ("step", &step), ("width", &width)] {
            if v.len() != n {
                return Err(self.error(
                    codes::BAD_GENERATOR_VALUE,
                    format!("the generator's {what} has {} components but the index has {n}", v.len()),
                    at,
                ));
            }
        }
        if let Some(s) = step.iter().find(|&&s| s <= 0) {
            return Err(self.error(
                codes::BAD_GENERATOR_VALUE,
                format!("generator step must be positive, got {s}"),
                at,
            ));
        }
        if let Some(w) = width.iter().find(|&&w| w <= 0) {
            return Err(self.error(
                codes::BAD_GENERATOR_VALUE,
                format!("generator width must be positive, got {w}"),
                at,
            ));
        }
        let mut coords = Vec::with_capacity(n);
        for d in 0..n {
            let mut c = Vec::new();
            let mut i = lo[d];
            while i < hi[d] {
                if (i - lo[d]) % step[d] < width[d] {
                    c.push(i);
                    if c.len() > val::MAX_ELEMENTS {
                        return Err(self.error(codes::ALLOCATION_TOO_LARGE, "generator has too many indices", at));
                    }
                    i += 1;
                } else {
                    i = lo[d] + ((i - lo[d]) / step[d] + 1) * step[d];
                }
            }
            coords.push(c);
        }
        Ok(Generator { coords })
    }
}

struct Generator {
    /// The covered coordinates per axis, ascending.
    coords: Vec<Vec<i64>>,
}

impl Generator {
    fn nonempty(&self) -> bool {
        self.coords.iter().all(|c| !c.is_empty())
    }
}

/// A result array under construction, addressed in whole cells.
struct Cells {
    shape: Vec<usize>,
    cell_shape: Vec<usize>,
    cell_len: usize,
    elems: Elems,
}

enum State {
    Gen { frame: Vec<usize>, default: Option<Value>, cells: Option<Cells>, cell_ty: Option<Ty> },
    Mod { frame: Vec<usize>, array: Value, cells: Option<Cells> },
    Fold { acc: Value, fun: FoldFn, partial: Vec<Value>, fix: Option<Value>, done: bool },
    Scan { frame: Vec<usize>, values: Vec<Option<Value>>, neutral: Value, fun: FoldFn, partial: Vec<Value> },
    Filter { frame: Vec<usize>, values: Vec<Option<(bool, Value)>>, cell_ty: Option<Ty> },
}

impl State {
    fn frame(&self) -> Option<&[usize]> {
        match self {
            State::Gen { frame, .. }
            | State::Mod { frame, .. }
            | State::Scan { frame, .. }
            | State::Filter { frame, .. } => Some(frame),
            State::Fold { .. } => None,
        }
    }

    fn done(&self) -> bool {
        matches!(self, State::Fold { done: true, .. })
    }
}

fn zero_like(v: &Value) -> Value {
    match v.base() {
        Some(b) => {
            let zero = Scalar::zero(b);
            if v.shape().is_empty() {
                Value::Scalar(zero)
            } else {
                Elems::filled(zero, v.len())
                    .map(|e| Value::from_parts(v.shape().to_vec(), e))
                    .unwrap_or(Value::Scalar(zero))
            }
        }
        None => v.clone(),
    }
}

fn write_cell(r: &mut Cells, offset: usize, v: &Value) -> Result<(), (Code, String)> {
    use crate::interp::shape_text as st;
    if v.shape() != r.cell_shape.as_slice() {
        return Err((
            codes::IRREGULAR_ARRAY,
            format!("with-loop elements differ in shape: {} here, {} elsewhere", st(v.shape()), st(&r.cell_shape)),
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

fn index_text(index: &[i64]) -> String {
    format!("[{}]", index.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(","))
}

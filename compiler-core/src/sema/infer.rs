//! Type and shape inference with specialisation (seed 003 ch. 3–4, seed 000).
//!
//! Abstract interpretation over the HIR, one *instance* (function × parameter types)
//! at a time, starting from every user function at its declared types and from the
//! shape hints. At each call the argument types decide:
//!
//! * if one candidate certainly applies and is certainly the most specific, the
//!   call is bound to an instance of it specialised to the argument types (subject
//!   to a cap per function, after which the declared-type instance is used);
//! * otherwise the call goes through a *wrapper* that picks the most specific
//!   instance at run time, and every candidate that might apply is specialised to
//!   what it might receive (Kreye's generic relevance).
//!
//! Known values (AKV) flow through primitives (constant folding with the run-time
//! semantics) and through `inline` functions (their bodies are re-interpreted with
//! the known arguments), so `shape(A) - 1` of an AKS `A` is a known vector and
//! `genarray(shape(A) - 1, …)` has a known shape.
//!
//! Errors that are certain whenever the code runs — no instance for the argument
//! types, element-wise operations on arrays of different known shapes, an index
//! longer than the array's rank, a condition that is not `bool` — are reported at
//! compile time; everything else stays a run-time check.
//!
//! Limits: loops and recursion are typed to a fixed point with widening (recursive
//! calls of an instance being inferred use its declared result types); values are
//! not tracked through with-loops.

use crate::{HashMap, HashSet};
use std::rc::Rc;

use super::hir::{self, Bound, Callee, Elem, Expr, ExprKind, FoldTarget, FunId, Prim, Program, Stmt, WithOp};
use super::ty::{Info, Shape, Ty};
use super::typed::{Instance, InstanceId, Reason, Remark, Target, Typed, Wrapper, WrapperId};
use crate::diagnostics::{self as codes, Diagnostic, Diagnostics};
use crate::interp::dispatch::{Bindings, match_pattern};
use crate::interp::value::Value;
use crate::span::{SourceMap, Span};
use crate::syntax::ast::{BaseType, Inline, Name, Rel};

/// At most this many instances come from the hints for one function.
const MAX_HINT_COMBINATIONS: usize = 64;

/// A shape hint: parameter `param` of entry function `function` has type `ty`.
#[derive(Clone, Debug, PartialEq)]
pub struct Hint {
    pub function: Name,
    pub param: Name,
    pub ty: Ty,
    /// Where the hint was written (a command-line argument), for errors.
    pub span: Option<Span>,
}

#[derive(Clone, Debug)]
pub struct InferOptions {
    /// Specialisations per function beyond its declared types (sac2c's -maxspec).
    pub max_specialisations: usize,
    pub hints: Vec<Hint>,
    /// The entry functions asked for (`--entry`, a request's `entry`): only
    /// they and the functions they may call are inferred, and only hints for
    /// those make instances (hints for the others are still checked against
    /// the declarations). Empty: every user function is an entry.
    pub entries: Vec<String>,
}

impl Default for InferOptions {
    fn default() -> Self {
        InferOptions { max_specialisations: 20, hints: Vec::new(), entries: Vec::new() }
    }
}

/// Infers types for every user function (or the entries asked for and what
/// they may call) and the hinted instances.
pub fn infer(program: &Program, sources: &SourceMap, options: &InferOptions, diags: &mut Diagnostics) -> Typed {
    let mut engine = Engine {
        p: program,
        sources,
        options,
        typed: Typed::default(),
        index: HashMap::default(),
        in_progress: HashSet::default(),
        specs: HashMap::default(),
        wrapper_index: HashMap::default(),
        diags,
        capped: HashSet::default(),
        inline_stack: Vec::new(),
        blame: Vec::new(),
        reported: HashSet::default(),
        speculative: 0,
    };
    engine.run();
    engine.finish()
}

struct Engine<'a> {
    p: &'a Program,
    sources: &'a SourceMap,
    options: &'a InferOptions,
    typed: Typed,
    index: HashMap<(FunId, Vec<Ty>), InstanceId>,
    in_progress: HashSet<InstanceId>,
    specs: HashMap<FunId, usize>,
    wrapper_index: HashMap<(Vec<FunId>, Vec<Option<Elem>>), WrapperId>,
    diags: &'a mut Diagnostics,
    capped: HashSet<FunId>,
    /// Functions whose bodies are being re-interpreted for known values.
    inline_stack: Vec<FunId>,
    /// User-code spans to blame for errors found in library code.
    blame: Vec<Span>,
    reported: HashSet<(Span, String)>,
    /// Inside a statically empty with-loop part typed only for its cells'
    /// type (`speculative_cells`): calls make no instances.
    speculative: u32,
}

/// The abstract state of one function body being interpreted.
struct Walk {
    env: Vec<Option<Info>>,
    /// Locals whose paths into the current point gave them different element
    /// types (an `if`'s branches, a loop's entry and its body): the merge's
    /// span and the two types. Reading one is an error; assigning it clears it.
    conflicts: HashMap<hir::LocalId, Conflict>,
    returns: Vec<Vec<Option<Info>>>,
    /// The instance whose tables this walk fills (`None` for value re-interpretation).
    record: Option<InstanceId>,
}

fn declared(ty: &hir::Type) -> Ty {
    Ty::new(ty.elem, Shape::of_spec(&ty.shape))
}

/// Whether overload `f`'s declared parameter types are strictly more
/// specific than `g`'s (each a subset, not all equal): a call both admit
/// runs `f` (seed 003's dispatch picks the function by its declaration,
/// then the function's most specific instance).
pub(crate) fn declared_more_specific(p: &Program, f: FunId, g: FunId) -> bool {
    if f == g {
        return false;
    }
    let (a, b) = (&p.function(f).params, &p.function(g).params);
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| declared(&x.ty).subset_of(&declared(&y.ty)))
        && !b.iter().zip(a).all(|(x, y)| declared(&x.ty).subset_of(&declared(&y.ty)))
}

fn int_scalar() -> Info {
    Info::of_type(Ty::new(Elem::Base(BaseType::Int), Shape::scalar()))
}

fn bool_scalar() -> Info {
    Info::of_type(Ty::new(Elem::Base(BaseType::Bool), Shape::scalar()))
}

fn int_vector(len: Option<usize>) -> Info {
    Info::of_type(Ty::new(
        Elem::Base(BaseType::Int),
        match len {
            Some(n) => Shape::known(&[n]),
            None => Shape::rank(1),
        },
    ))
}

/// The length of a vector-typed value, if known.
fn vector_len(i: &Info) -> Option<usize> {
    super::prim_ty::vector_len(&i.ty)
}

fn join_opt(a: &Option<Info>, b: &Option<Info>) -> Option<Info> {
    match (a, b) {
        (Some(x), Some(y)) if x.ty.elem == y.ty.elem => Some(x.join(y)),
        (Some(_), Some(_)) => None,
        (Some(x), None) | (None, Some(x)) => Some(x.clone()),
        (None, None) => None,
    }
}

/// Where two paths meet that gave a local different element types: the
/// merge's span and the two types.
type Conflict = (Span, Elem, Elem);

/// Joins `other` (the state at the end of another path) into `walk`'s
/// state where two paths meet at `span`; a local typed differently on the
/// two becomes unknown and is remembered as a conflict (an error if read).
/// Returns the locals that became conflicts.
fn merge_env(walk: &mut Walk, other: &[Option<Info>], span: Span) -> Vec<(hir::LocalId, Conflict)> {
    let mut conflicts = Vec::new();
    for (l, (e, o)) in walk.env.iter_mut().zip(other).enumerate() {
        if let (Some(x), Some(y)) = (&*e, o)
            && x.ty.elem != y.ty.elem
        {
            conflicts.push((hir::LocalId(l as u32), (span, y.ty.elem, x.ty.elem)));
        }
        *e = join_opt(e, o);
    }
    for (l, c) in &conflicts {
        walk.conflicts.entry(*l).or_insert(*c);
    }
    conflicts
}

/// Shorthand for building an instance symbol: `Det__i_3_3`.
fn mangle(name: &str, params: &[Ty]) -> String {
    let base = match name {
        "+" => "op_add".to_string(),
        "-" => "op_sub".to_string(),
        "*" => "op_mul".to_string(),
        "/" => "op_div".to_string(),
        "%" => "op_mod".to_string(),
        "==" => "op_eq".to_string(),
        "!=" => "op_ne".to_string(),
        "<" => "op_lt".to_string(),
        "<=" => "op_le".to_string(),
        ">" => "op_gt".to_string(),
        ">=" => "op_ge".to_string(),
        "++" => "op_plusplus".to_string(),
        "--" => "op_minusminus".to_string(),
        "!" => "op_not".to_string(),
        "~" => "op_bitnot".to_string(),
        "&" => "op_and".to_string(),
        "|" => "op_or".to_string(),
        "^" => "op_xor".to_string(),
        "<<" => "op_shl".to_string(),
        ">>" => "op_shr".to_string(),
        other => other.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect(),
    };
    let mut s = base;
    for p in params {
        s.push_str("__");
        s.push_str(match p.elem {
            Elem::Base(b) => match b {
                BaseType::Bool => "b",
                BaseType::Char => "c",
                BaseType::Byte => "by",
                BaseType::Short => "s",
                BaseType::Int => "i",
                BaseType::Long => "l",
                BaseType::LongLong => "ll",
                BaseType::UByte => "ub",
                BaseType::UShort => "us",
                BaseType::UInt => "ui",
                BaseType::ULong => "ul",
                BaseType::ULongLong => "ull",
                BaseType::Float => "f",
                BaseType::Double => "d",
            },
            Elem::String => "str",
        });
        match &p.shape {
            Shape::Fixed(d) => {
                for e in d {
                    s.push('_');
                    match e {
                        Some(k) => s.push_str(&k.to_string()),
                        None => s.push('X'),
                    }
                }
            }
            Shape::AtLeast(0) => s.push_str("_S"),
            Shape::AtLeast(n) => s.push_str(&format!("_P{n}")),
        }
    }
    s
}

impl<'a> Engine<'a> {
    fn run(&mut self) {
        // Every user function at its declared types; an entry wrapper per name.
        let mut names: Vec<Name> = self.p.user_names.keys().cloned().collect();
        names.sort();
        let entries = &self.options.entries;
        if !entries.is_empty() {
            names.retain(|name| entries.iter().any(|e| e == name.as_str()));
        }
        let reached = (!entries.is_empty()).then(|| self.reached_from(&names));
        for name in &names {
            let user = self.p.user_functions(name);
            if user.is_empty() {
                continue;
            }
            for &f in &user {
                let params = self.p.function(f).params.iter().map(|p| declared(&p.ty)).collect();
                self.instance(f, params, Reason::Declared);
            }
            let w = self.wrapper(&user.into(), &[], name.clone());
            self.typed.entries.insert(name.clone(), w);
        }
        // Hints for different parameters of one function combine into one
        // instance; several hints for the same parameter give one instance
        // each (the product over parameters: `f.a=T1 f.a=T2 f.b=U` makes
        // f(T1, U) and f(T2, U)).
        let hints = self.options.hints.clone();
        let mut functions: Vec<&Name> = Vec::new();
        for h in &hints {
            if !functions.contains(&&h.function) {
                functions.push(&h.function);
            }
        }
        for function in functions {
            let mut by_param: Vec<Vec<&Hint>> = Vec::new();
            for h in hints.iter().filter(|h| &h.function == function) {
                match by_param.iter_mut().find(|g| g[0].param == h.param) {
                    Some(g) => g.push(h),
                    None => by_param.push(vec![h]),
                }
            }
            let mut combos: Vec<Vec<&Hint>> = vec![Vec::new()];
            for group in &by_param {
                combos = combos
                    .iter()
                    .flat_map(|c| group.iter().map(move |h| c.iter().copied().chain([*h]).collect::<Vec<_>>()))
                    .take(MAX_HINT_COMBINATIONS)
                    .collect();
            }
            // A function the entries cannot call gets no instance: its
            // hints are only checked.
            let called = reached.as_ref().is_none_or(|r| self.p.user_functions(function).iter().any(|f| r.contains(f)));
            for combo in combos {
                self.apply_hints(&combo, called);
            }
        }
    }

    /// The functions the user functions named `names` may call, themselves
    /// included (followed through library functions too, whose call sites'
    /// candidates may name user functions).
    fn reached_from(&self, names: &[Name]) -> HashSet<FunId> {
        let mut seen: HashSet<FunId> = HashSet::default();
        let mut stack: Vec<FunId> = names.iter().flat_map(|n| self.p.user_functions(n)).collect();
        while let Some(f) = stack.pop() {
            if seen.insert(f) {
                super::analysis::called_functions(self.p.function(f), &mut |g| {
                    if !seen.contains(&g) {
                        stack.push(g);
                    }
                });
            }
        }
        seen
    }

    /// One instance for hints on distinct parameters of one function (with
    /// `create` false, only the check that some definition admits them).
    fn apply_hints(&mut self, hints: &[&Hint], create: bool) {
        let Some(first) = hints.first() else { return };
        let defs = self.p.user_functions(&first.function);
        let error = |engine: &mut Engine, msg: String| {
            let mut d = Diagnostic::error(codes::HINT_MISMATCH, msg);
            if let Some(s) = first.span {
                d = d.at(s, "");
            }
            engine.diags.push(d);
        };
        if defs.is_empty() {
            error(self, format!("the shape hint names `{}`, which the program does not define", first.function));
            return;
        }
        // Definitions with those parameters whose declared types admit the hints.
        let mut best: Option<(FunId, Vec<Ty>)> = None;
        'defs: for f in defs {
            let fun = self.p.function(f);
            let mut params: Vec<Ty> = fun.params.iter().map(|p| declared(&p.ty)).collect();
            for hint in hints {
                let Some(k) = fun.params.iter().position(|p| p.name == hint.param) else { continue 'defs };
                if !hint.ty.subset_of(&params[k]) {
                    continue 'defs;
                }
                params[k] = hint.ty.clone();
            }
            let better = match &best {
                None => true,
                Some((b, _)) => {
                    let bp = &self.p.function(*b).params;
                    fun.params.iter().zip(bp).all(|(x, y)| declared(&x.ty).subset_of(&declared(&y.ty)))
                }
            };
            if better {
                best = Some((f, params));
            }
        }
        match best {
            Some(_) if !create => {}
            Some((f, params)) => {
                let id = self.instance(f, params, Reason::Hint);
                if let Some(inst) = self.typed.instances.get_mut(id.0 as usize) {
                    inst.reason = Reason::Hint;
                }
            }
            None if hints.len() == 1 => error(
                self,
                format!(
                    "no definition of `{}` has a parameter `{}` that admits {}",
                    first.function, first.param, first.ty
                ),
            ),
            None => {
                let each: Vec<String> = hints.iter().map(|h| format!("`{}` as {}", h.param, h.ty)).collect();
                error(self, format!("no definition of `{}` admits {} together", first.function, each.join(", ")))
            }
        }
    }

    fn finish(mut self) -> Typed {
        // Wrappers dispatch to every instance of their candidates, most specific first.
        for w in 0..self.typed.wrappers.len() {
            let candidates = self.typed.wrappers[w].candidates.clone();
            let members: Vec<InstanceId> = (0..self.typed.instances.len() as u32)
                .map(InstanceId)
                .filter(|i| candidates.contains(&self.typed.instances[i.0 as usize].fun))
                .collect();
            let p = self.p;
            self.typed.wrappers[w].instances =
                most_specific_first(&self.typed.instances, members, |f, g| declared_more_specific(p, f, g));
            self.check_wrapper_results(w);
        }
        // Instances reachable from the entries.
        let mut seen = HashSet::default();
        let mut stack: Vec<InstanceId> = Vec::new();
        for w in self.typed.entries.values() {
            stack.extend(self.typed.wrappers[w.0 as usize].instances.iter().copied());
        }
        while let Some(i) = stack.pop() {
            if !seen.insert(i) {
                continue;
            }
            for t in self.typed.instances[i.0 as usize].calls.values() {
                match t {
                    Target::Instance(j) => stack.push(*j),
                    Target::Wrapper(w) => stack.extend(self.typed.wrappers[w.0 as usize].instances.iter().copied()),
                }
            }
        }
        let mut reachable: Vec<InstanceId> = seen.into_iter().collect();
        reachable.sort();
        self.typed.reachable = reachable;
        self.typed
    }

    // ------------------------------------------------------------ instances

    /// The instance of `fun` at `params`, inferred on first request.
    fn instance(&mut self, fun: FunId, params: Vec<Ty>, reason: Reason) -> InstanceId {
        let f = self.p.function(fun);
        let declared_params: Vec<Ty> = f.params.iter().map(|p| declared(&p.ty)).collect();
        let mut params = params;
        if f.intrinsic.is_some() {
            params = Vec::new();
        }
        let key = (fun, params.clone());
        if let Some(id) = self.index.get(&key) {
            return *id;
        }
        let specialised = f.intrinsic.is_none() && params != declared_params;
        // An instance at the declared types exists because the definition does.
        let reason = if specialised || reason == Reason::Hint { reason } else { Reason::Declared };
        if specialised {
            let n = self.specs.entry(fun).or_default();
            if *n >= self.options.max_specialisations {
                if self.capped.insert(fun) {
                    let span = match &reason {
                        Reason::CallSite(s) => Some(*s),
                        _ => None,
                    };
                    self.typed.remarks.push(Remark {
                        fun,
                        message: format!(
                            "`{}` reached its limit of {} specialisations; further calls use the instance for its declared types",
                            f.name, self.options.max_specialisations
                        ),
                        span,
                    });
                }
                return self.instance(fun, declared_params, reason);
            }
            *n += 1;
        }
        let id = InstanceId(self.typed.instances.len() as u32);
        let results = f.results.iter().map(declared).collect();
        let symbol = mangle(&f.name, &params);
        self.typed.instances.push(Instance {
            fun,
            params,
            results,
            locals: vec![None; f.locals.len()],
            calls: HashMap::default(),
            withs: HashMap::default(),
            reason,
            symbol,
            specialised,
            loops_entered: HashSet::default(),
            parts_skipped: HashSet::default(),
        });
        self.index.insert(key, id);
        if f.intrinsic.is_none() {
            self.infer_instance(id);
        }
        id
    }

    fn infer_instance(&mut self, id: InstanceId) {
        let inst = &self.typed.instances[id.0 as usize];
        let f = self.p.function(inst.fun);
        let params = inst.params.clone();
        let mut walk = Walk {
            env: vec![None; f.locals.len()],
            conflicts: HashMap::default(),
            returns: Vec::new(),
            record: Some(id),
        };
        for (p, ty) in f.params.iter().zip(&params) {
            walk.env[p.local.0 as usize] = Some(Info::of_type(ty.clone()));
        }
        self.bind_pattern_locals(f, &params, &mut walk);
        self.in_progress.insert(id);
        for c in &f.conditions {
            let i = self.expr(&mut walk, c);
            self.check_bool(&i, c.span, "a type-pattern condition");
        }
        self.stmts(&mut walk, &f.body);
        self.in_progress.remove(&id);
        // Results: what the returns yield, within the declared types.
        let declared_results: Vec<Ty> = f.results.iter().map(declared).collect();
        let mut results = declared_results.clone();
        if !walk.returns.is_empty() && f.intrinsic.is_none() {
            for (k, d) in declared_results.iter().enumerate() {
                let mut joined: Option<Info> = None;
                let mut all = true;
                for r in &walk.returns {
                    match r.get(k) {
                        Some(Some(i)) => joined = join_opt(&joined, &Some(i.clone())),
                        _ => all = false,
                    }
                }
                if let (true, Some(j)) = (all, joined) {
                    if j.ty.elem != d.elem {
                        let msg = format!("`{}` returns {} but is declared to return {}", f.name, j.ty, d);
                        self.report(codes::TYPE_MISMATCH, msg, f.name_span);
                    } else if let Some(m) = j.ty.shape.meet(&d.shape) {
                        results[k] = Ty::new(d.elem, m);
                    } else {
                        let msg = format!("`{}` returns {} but is declared to return {}", f.name, j.ty, d);
                        self.report(codes::STATIC_SHAPE_ERROR, msg, f.name_span);
                        // Point at the call that asked for this specialisation.
                        if let (Some(call), Some(last)) = (self.blame.last().copied(), self.diags_last_mut())
                            && call != f.name_span
                        {
                            last.secondary.push(crate::diagnostics::Label {
                                span: call,
                                message: "specialised for this call".into(),
                            });
                        }
                    }
                }
            }
        }
        self.typed.instances[id.0 as usize].results = results;
    }

    /// Pattern variables: known values where the parameter shapes are known.
    fn bind_pattern_locals(&self, f: &hir::Function, params: &[Ty], walk: &mut Walk) {
        let mut env = Bindings::default();
        for (p, ty) in f.params.iter().zip(params) {
            if let Some(extents) = ty.shape.extents() {
                match_pattern(&p.ty.shape, &extents, &mut env);
            }
        }
        for (name, local) in &f.pattern_locals {
            let is_vector = f.params.iter().any(|p| {
                matches!(&p.ty.shape, crate::syntax::ast::ShapeSpec::Dims(d) if d.iter().any(|x| matches!(x, crate::syntax::ast::DimPattern::Vector { name: Some(n), .. } if n == name)))
            });
            let info = match env.get(name) {
                Some(b) => Info::of_value(b.to_value()),
                None if is_vector => int_vector(None),
                None => int_scalar(),
            };
            walk.env[local.0 as usize] = Some(info);
        }
    }

    fn wrapper(&mut self, candidates: &Rc<[FunId]>, elems: &[Option<Elem>], name: Name) -> WrapperId {
        let key = (candidates.to_vec(), elems.to_vec());
        if let Some(w) = self.wrapper_index.get(&key) {
            return *w;
        }
        // Every candidate that might apply needs an instance for its declared types.
        for &c in candidates.iter() {
            let f = self.p.function(c);
            let ok = f.intrinsic.is_some()
                || (f.params.len() == elems.len() || elems.is_empty())
                    && f.params.iter().zip(elems).all(|(p, e)| e.is_none_or(|e| e == p.ty.elem));
            if ok {
                let params = f.params.iter().map(|p| declared(&p.ty)).collect();
                self.instance(c, params, Reason::Wrapper);
            }
        }
        let id = WrapperId(self.typed.wrappers.len() as u32);
        let suffix: String = elems
            .iter()
            .map(|e| match e {
                Some(Elem::Base(b)) => format!("_{}", b.name()),
                Some(Elem::String) => "_str".to_string(),
                None => String::new(),
            })
            .collect();
        let symbol = format!("{}__wrapper{suffix}", mangle(&name, &[]));
        self.typed.wrappers.push(Wrapper { name, candidates: candidates.clone(), instances: Vec::new(), symbol });
        self.wrapper_index.insert(key, id);
        id
    }

    // ------------------------------------------------------------ diagnostics

    fn diags_last_mut(&mut self) -> Option<&mut Diagnostic> {
        self.diags.last_mut()
    }

    /// A wrapper dispatches, per signature of argument element types, among
    /// instances that must agree on their results' element types (sac2c's
    /// rule for overloads that differ only in shape). A call's own check
    /// (E0305) sees only the overloads its argument shapes may reach; the
    /// wrapper also holds the instances other calls made, and lowering could
    /// not type a dispatch between results of different element types.
    fn check_wrapper_results(&mut self, w: usize) {
        // One such error is enough: a call's own says it better.
        if self.diags.iter().any(|d| d.code == codes::MIXED_RESULT_TYPES) {
            return;
        }
        let members = self.typed.wrappers[w].instances.clone();
        for (k, &a) in members.iter().enumerate() {
            for &b in &members[k + 1..] {
                let (x, y) = (&self.typed.instances[a.0 as usize], &self.typed.instances[b.0 as usize]);
                let same_args = x.params.iter().map(|t| t.elem).eq(y.params.iter().map(|t| t.elem));
                let same_results = x.results.iter().map(|t| t.elem).eq(y.results.iter().map(|t| t.elem));
                if !same_args || same_results || x.fun == y.fun {
                    continue;
                }
                let (fa, fb) = (self.p.function(x.fun), self.p.function(y.fun));
                let types = |r: &[Ty]| r.iter().map(|t| t.elem.to_string()).collect::<Vec<_>>().join(", ");
                let message = format!(
                    "`{}` returns {} but `{}` returns {}: a call of `{}` may choose between them at run time",
                    fa.signature(),
                    types(&x.results),
                    fb.signature(),
                    types(&y.results),
                    self.typed.wrappers[w].name
                );
                let span = fb.name_span;
                if self.reported.insert((span, message.clone())) {
                    self.diags.push(
                        Diagnostic::error(codes::MIXED_RESULT_TYPES, message)
                            .at(span, "")
                            .with_label(fa.name_span, "the other overload")
                            .with_hint("overloads that differ only in shape must return the same element types"),
                    );
                }
                return;
            }
        }
    }

    /// A generator's bounds, step and width, and a genarray's shape, are
    /// integer vectors: one of another rank or element type fails whenever the
    /// with-loop runs (the code generator cannot even form it). `what`: whose
    /// vector, as in "a generator's lower bound".
    fn check_int_vector(&mut self, i: &Info, span: Span, what: &str) {
        let code = if i.ty.elem != Elem::Base(BaseType::Int) {
            codes::TYPE_MISMATCH
        } else if i.ty.shape.rank_if_known().is_some_and(|r| r != 1) {
            codes::STATIC_SHAPE_ERROR
        } else {
            return;
        };
        self.report(code, format!("{what} is an int vector, not {}", i.ty), span);
    }

    /// A read of `local`, which the paths reaching it left with two element
    /// types (SaC gives a variable one type where paths meet).
    fn conflicting_local(&mut self, walk: &Walk, local: hir::LocalId, read: Span, merge: Span, a: Elem, b: Elem) {
        let Some(id) = walk.record else { return };
        let name = self.p.function(self.typed.instances[id.0 as usize].fun).locals[local.0 as usize].name.clone();
        let message = format!("`{name}` is {a} on one path to here and {b} on another");
        if !self.reported.insert((read, message.clone())) {
            return;
        }
        self.diags.push(
            Diagnostic::error(codes::TYPE_MISMATCH, message)
                .at(read, "read here")
                .with_label(merge, "the paths meet here")
                .with_hint(format!("give `{name}` one element type on every path (convert with `tod`, `toi`, …)")),
        );
    }

    fn report(&mut self, code: crate::diagnostics::Code, message: String, span: Span) {
        // Errors inside library code are the user's call's fault.
        let span = if self.sources.is_library(span) { self.blame.last().copied().unwrap_or(span) } else { span };
        if !self.reported.insert((span, message.clone())) {
            return;
        }
        let mut d = Diagnostic::error(code, message).at(span, "");
        if code == codes::STATIC_SHAPE_ERROR || code == codes::TYPE_MISMATCH {
            d = d.with_note("found at compile time: this fails whenever it runs");
        }
        self.diags.push(d);
    }

    // ------------------------------------------------------------ statements

    fn record_local(&mut self, walk: &Walk, local: hir::LocalId, info: &Option<Info>) {
        if let (Some(id), Some(i)) = (walk.record, info) {
            let slot = &mut self.typed.instances[id.0 as usize].locals[local.0 as usize];
            *slot = Some(match slot.take() {
                Some(t) if t.elem == i.ty.elem => Ty::new(t.elem, t.shape.join(&i.ty.shape)),
                _ => i.ty.clone(),
            });
        }
    }

    fn assign(&mut self, walk: &mut Walk, fun: &hir::Function, local: hir::LocalId, info: Option<Info>, span: Span) {
        let mut info = info;
        if let (Some(i), Some(decl)) = (&info, &fun.locals[local.0 as usize].declared) {
            let d = declared(decl);
            let name = &fun.locals[local.0 as usize].name;
            if i.ty.elem != d.elem {
                self.report(codes::TYPE_MISMATCH, format!("`{name}` is declared {d} but is assigned {}", i.ty), span);
            } else {
                match i.ty.shape.meet(&d.shape) {
                    Some(m) => info = Some(Info { ty: Ty::new(d.elem, m), value: i.value.clone() }),
                    None => self.report(
                        codes::STATIC_SHAPE_ERROR,
                        format!("`{name}` is declared {d} but is assigned {}", i.ty),
                        span,
                    ),
                }
            }
        }
        self.record_local(walk, local, &info);
        walk.env[local.0 as usize] = info;
    }

    fn stmts(&mut self, walk: &mut Walk, stmts: &'a [Stmt]) {
        for s in stmts {
            self.stmt(walk, s);
        }
    }

    /// A placeholder function for walks without an instance (value re-interpretation
    /// assigns without declared-type checks).
    fn no_decls(&self, walk: &Walk) -> Option<&'a hir::Function> {
        walk.record.map(|id| self.p.function(self.typed.instances[id.0 as usize].fun))
    }

    fn stmt(&mut self, walk: &mut Walk, s: &'a Stmt) {
        match s {
            Stmt::Assign { targets, value, span, .. } => {
                let infos =
                    if targets.len() == 1 { vec![self.expr(walk, value)] } else { self.expr_multi(walk, value) };
                for (k, t) in targets.iter().enumerate() {
                    walk.conflicts.remove(t);
                    let info = infos.get(k).cloned().flatten();
                    match self.no_decls(walk) {
                        Some(f) => self.assign(walk, f, *t, info, *span),
                        None => walk.env[t.0 as usize] = info,
                    }
                }
            }
            Stmt::If { cond, then_body, else_body, span } => {
                let c = self.expr(walk, cond);
                self.check_bool(&c, cond.span, "an `if` condition");
                match c.as_ref().and_then(|c| c.value.clone()) {
                    Some(Value::Scalar(crate::interp::value::Scalar::Bool(true))) => self.stmts(walk, then_body),
                    Some(Value::Scalar(crate::interp::value::Scalar::Bool(false))) => self.stmts(walk, else_body),
                    _ => {
                        let before = walk.env.clone();
                        self.stmts(walk, then_body);
                        let after_then = std::mem::replace(&mut walk.env, before);
                        self.stmts(walk, else_body);
                        merge_env(walk, &after_then, *span);
                    }
                }
            }
            Stmt::While { id: loop_id, cond, body, span } => {
                let c = self.expr(walk, cond);
                self.check_bool(&c, cond.span, "a loop condition");
                if matches!(
                    c.as_ref().and_then(|c| c.value.clone()),
                    Some(Value::Scalar(crate::interp::value::Scalar::Bool(false)))
                ) {
                    return;
                }
                if let Some(id) = walk.record {
                    self.typed.instances[id.0 as usize].loops_entered.insert(*loop_id);
                }
                self.fixpoint(walk, *span, |engine, walk| {
                    engine.stmts(walk, body);
                    let c = engine.expr(walk, cond);
                    engine.check_bool(&c, cond.span, "a loop condition");
                });
                // The condition also runs on the loop's entry values: its calls
                // are dispatched for the head's types (entry joined with every
                // round's), not only for what a round leaves (a variable whose
                // rank grows each round reached an instance for the larger
                // ranks with the entry's).
                self.expr(walk, cond);
            }
            Stmt::DoWhile { id: loop_id, body, cond, span } => {
                if let Some(id) = walk.record {
                    self.typed.instances[id.0 as usize].loops_entered.insert(*loop_id);
                }
                self.fixpoint(walk, *span, |engine, walk| {
                    engine.stmts(walk, body);
                    let c = engine.expr(walk, cond);
                    engine.check_bool(&c, cond.span, "a loop condition");
                });
            }
            Stmt::Return { values, .. } => {
                let infos = if values.len() == 1 {
                    self.expr_multi(walk, &values[0])
                } else {
                    values.iter().map(|v| self.expr(walk, v)).collect()
                };
                walk.returns.push(infos);
            }
            Stmt::Eval { expr, .. } => {
                self.expr_multi(walk, expr);
            }
        }
    }

    /// Runs `body` until the environment stops changing (joining each round's end
    /// state into the loop-head state; the lattice has finite height).
    fn fixpoint(&mut self, walk: &mut Walk, span: Span, mut body: impl FnMut(&mut Self, &mut Walk)) {
        // Locals typed differently at the loop's head stay so (an unknown
        // type would otherwise join with the next round's as if unreached).
        let mut sticky: HashMap<hir::LocalId, Conflict> = HashMap::default();
        for _ in 0..64 {
            let head = walk.env.clone();
            let head_conflicts = walk.conflicts.len();
            body(self, walk);
            sticky.extend(merge_env(walk, &head, span));
            for (l, c) in &sticky {
                walk.env[l.0 as usize] = None;
                walk.conflicts.entry(*l).or_insert(*c);
            }
            let changed = walk.env != head || walk.conflicts.len() != head_conflicts;
            if !changed {
                return;
            }
        }
    }

    fn check_bool(&mut self, c: &Option<Info>, span: Span, what: &str) {
        if let Some(c) = c {
            let ok = c.ty.elem == Elem::Base(BaseType::Bool) && c.ty.shape.overlaps(&Shape::scalar());
            if !ok {
                self.report(codes::TYPE_MISMATCH, format!("{what} must be a bool scalar, not {}", c.ty), span);
            }
        }
    }

    // ------------------------------------------------------------ expressions

    fn expr(&mut self, walk: &mut Walk, e: &'a Expr) -> Option<Info> {
        match &e.kind {
            ExprKind::Call { .. } | ExprKind::With(_) => {
                let mut v = self.expr_multi(walk, e);
                if v.len() == 1 { v.pop().flatten() } else { None }
            }
            ExprKind::Const(v) => Some(Info::of_value(v.clone())),
            ExprKind::Local(l) => {
                if let Some((at, a, b)) = walk.conflicts.get(l).copied() {
                    self.conflicting_local(walk, *l, e.span, at, a, b);
                }
                walk.env.get(l.0 as usize).cloned().flatten()
            }
            ExprKind::Prim { prim, args } => {
                let infos: Vec<Option<Info>> = args.iter().map(|a| self.expr(walk, a)).collect();
                self.prim(prim, &infos, e.span)
            }
            ExprKind::And(a, b) | ExprKind::Or(a, b) => {
                let x = self.expr(walk, a);
                self.check_bool(&x, a.span, "an operand of `&&`/`||`");
                let y = self.expr(walk, b);
                self.check_bool(&y, b.span, "an operand of `&&`/`||`");
                let is_and = matches!(e.kind, ExprKind::And(..));
                let value = match (x.and_then(|i| i.value), y.and_then(|i| i.value)) {
                    (
                        Some(Value::Scalar(crate::interp::value::Scalar::Bool(p))),
                        Some(Value::Scalar(crate::interp::value::Scalar::Bool(q))),
                    ) => Some(Value::Scalar(crate::interp::value::Scalar::Bool(if is_and { p && q } else { p || q }))),
                    _ => None,
                };
                Some(Info { ty: bool_scalar().ty, value })
            }
            ExprKind::Cond { cond, then_expr, else_expr } => {
                let c = self.expr(walk, cond);
                self.check_bool(&c, cond.span, "the condition of `?:`");
                match c.and_then(|c| c.value) {
                    Some(Value::Scalar(crate::interp::value::Scalar::Bool(true))) => self.expr(walk, then_expr),
                    Some(Value::Scalar(crate::interp::value::Scalar::Bool(false))) => self.expr(walk, else_expr),
                    _ => {
                        let a = self.expr(walk, then_expr);
                        let b = self.expr(walk, else_expr);
                        if let (Some(x), Some(y)) = (&a, &b)
                            && x.ty.elem != y.ty.elem
                        {
                            let msg = format!("the branches of `?:` have types {} and {}", x.ty, y.ty);
                            self.report(codes::TYPE_MISMATCH, msg, e.span);
                            return None;
                        }
                        join_opt(&a, &b)
                    }
                }
            }
            ExprKind::Array(elems) => {
                let infos: Vec<Option<Info>> = elems.iter().map(|x| self.expr(walk, x)).collect();
                self.array(&infos, e.span)
            }
            ExprKind::Cast { ty, expr } => {
                let inner = self.expr(walk, expr);
                let target = declared(ty);
                let inner = inner?;
                match inner.ty.shape.meet(&target.shape) {
                    Some(m) => {
                        let value = match (&inner.value, ty.elem) {
                            (Some(v), Elem::Base(b)) if Some(b) != v.base() => {
                                crate::interp::ops::elementwise_convert(v, b).ok()
                            }
                            (v, _) => v.clone(),
                        };
                        Some(Info { ty: Ty::new(target.elem, m), value })
                    }
                    None => {
                        self.report(
                            codes::STATIC_SHAPE_ERROR,
                            format!("cannot cast {} to {}", inner.ty, target),
                            e.span,
                        );
                        None
                    }
                }
            }
        }
    }

    fn expr_multi(&mut self, walk: &mut Walk, e: &'a Expr) -> Vec<Option<Info>> {
        match &e.kind {
            ExprKind::Call { callee, args } => {
                let infos: Vec<Option<Info>> = args.iter().map(|a| self.expr(walk, a)).collect();
                self.call(walk, callee, &infos, e.span)
            }
            ExprKind::With(w) => self.with_loop(walk, w),
            _ => vec![self.expr(walk, e)],
        }
    }

    fn array(&mut self, infos: &[Option<Info>], span: Span) -> Option<Info> {
        let n = infos.len();
        if n == 0 {
            return Some(Info::of_value(Value::int_vector(&[])));
        }
        let mut elem = None;
        let mut cell: Option<Shape> = None;
        for i in infos.iter().flatten() {
            match elem {
                None => elem = Some(i.ty.elem),
                Some(e) if e != i.ty.elem => {
                    self.report(
                        codes::TYPE_MISMATCH,
                        format!("array elements of different types: {e} and {}", i.ty.elem),
                        span,
                    );
                    return None;
                }
                _ => {}
            }
            cell = match cell {
                None => Some(i.ty.shape.clone()),
                Some(c) => match c.meet(&i.ty.shape) {
                    Some(m) => Some(m),
                    None => {
                        self.report(
                            codes::STATIC_SHAPE_ERROR,
                            format!("array elements of different shapes: {} and {}", c, i.ty.shape),
                            span,
                        );
                        return None;
                    }
                },
            };
        }
        let (elem, cell) = (elem?, cell?);
        if infos.iter().all(|i| i.as_ref().is_some_and(|i| i.value.is_some())) {
            let vals: Vec<Value> =
                infos.iter().map(|i| i.as_ref().and_then(|i| i.value.clone()).expect("checked")).collect();
            if let Ok(v) = crate::interp::stack_values(vals) {
                return Some(Info::of_value(v));
            }
        }
        Some(Info::of_type(Ty::new(elem, Shape::known(&[n]).concat(&cell))))
    }

    // ------------------------------------------------------------ calls

    fn call(&mut self, walk: &mut Walk, callee: &Callee, args: &[Option<Info>], span: Span) -> Vec<Option<Info>> {
        let first = self.p.function(callee.candidates[0]);
        if first.intrinsic.is_some() && self.speculative > 0 {
            return Vec::new();
        }
        if first.intrinsic.is_some() {
            // The one intrinsic, C's printf: its format comes first. (Without
            // one, later passes would find a call they cannot type.)
            let format = args.first().map(|a| a.as_ref().map(|i| i.ty.elem));
            if !matches!(format, Some(None | Some(Elem::String))) {
                let found = match format {
                    Some(Some(elem)) => format!("its first argument is of type {elem}"),
                    _ => "it has no arguments".to_string(),
                };
                self.diags.push(
                    Diagnostic::error(codes::TYPE_MISMATCH, format!("`{}` needs a format string first", callee.name))
                        .at(span, found)
                        .with_hint("write e.g. `printf(\"%d\\n\", x)`"),
                );
                return Vec::new();
            }
            let id = self.instance(callee.candidates[0], Vec::new(), Reason::Declared);
            self.record_call(walk, callee, Target::Instance(id));
            return Vec::new();
        }
        let n_results = first.results.len();
        let arg_tys: Option<Vec<Ty>> = args.iter().map(|a| a.as_ref().map(|i| i.ty.clone())).collect();
        let Some(arg_tys) = arg_tys else {
            // Unknown arguments (after an error): dispatch at run time.
            let elems: Vec<Option<Elem>> = args.iter().map(|a| a.as_ref().map(|i| i.ty.elem)).collect();
            let w = self.wrapper(&callee.candidates, &elems, callee.name.clone());
            self.record_call(walk, callee, Target::Wrapper(w));
            return vec![None; n_results];
        };
        let possible: Vec<FunId> = callee
            .candidates
            .iter()
            .copied()
            .filter(|&c| {
                let f = self.p.function(c);
                f.params
                    .iter()
                    .zip(&arg_tys)
                    .all(|(p, a)| p.ty.elem == a.elem && declared(&p.ty).shape.overlaps(&a.shape))
            })
            .collect();
        if self.speculative > 0 {
            // What the candidates declare they return: instances made here
            // could recurse without end (Kreye's det on its base cases).
            let mut joined: Vec<Option<Info>> = vec![None; n_results];
            for (i, &l) in possible.iter().enumerate() {
                for (k, r) in self.p.function(l).results.iter().enumerate().take(n_results) {
                    let r = Some(Info::of_type(declared(r)));
                    joined[k] = if i == 0 { r } else { join_opt(&joined[k], &r) };
                }
            }
            return joined;
        }
        if possible.is_empty() {
            let args_text: Vec<String> = arg_tys.iter().map(|t| t.to_string()).collect();
            let mut d = Diagnostic::error(
                codes::NO_INSTANCE,
                format!("no instance of `{}` accepts ({})", callee.name, args_text.join(", ")),
            );
            let at = if self.sources.is_library(span) { self.blame.last().copied().unwrap_or(span) } else { span };
            d = d.at(at, "");
            for (shown, c) in callee.candidates.iter().enumerate() {
                let f = self.p.function(*c);
                if shown == 5 {
                    d = d.with_note(format!("… and {} more", callee.candidates.len() - 5));
                    break;
                }
                d = d.with_note(format!("candidate: {}", f.signature()));
            }
            let both_scalar_numbers =
                arg_tys.len() == 2 && arg_tys.iter().all(|t| matches!(t.elem, Elem::Base(b) if b.is_numeric()));
            if both_scalar_numbers && arg_tys[0].elem != arg_tys[1].elem {
                d = d.with_hint("SaC has no implicit conversions: convert one side, e.g. with `tod(…)` or `toi(…)`");
            }
            if self.reported.insert((at, d.message.clone())) {
                self.diags.push(d);
            }
            return vec![None; n_results];
        }
        // A candidate that surely applies and is surely the most specific.
        let sure = possible.iter().copied().find(|&k| {
            let pk: Vec<Ty> = self.p.function(k).params.iter().map(|p| declared(&p.ty)).collect();
            let applies = arg_tys.iter().zip(&pk).all(|(a, p)| a.subset_of(p));
            applies
                && possible.iter().all(|&l| {
                    l == k || {
                        let pl: Vec<Ty> = self.p.function(l).params.iter().map(|p| declared(&p.ty)).collect();
                        pk.iter().zip(&pl).all(|(x, y)| x.subset_of(y))
                    }
                })
        });
        let blame_pushed = !self.sources.is_library(span);
        if blame_pushed {
            self.blame.push(span);
        }
        let result = match sure {
            Some(k) => {
                let id = self.instance(k, arg_tys.clone(), Reason::CallSite(span));
                self.record_call(walk, callee, Target::Instance(id));
                let results: Vec<Option<Info>> = self.typed.instances[id.0 as usize]
                    .results
                    .iter()
                    .map(|t| Some(Info::of_type(t.clone())))
                    .collect();
                // Known argument values may give known results through inline functions.
                match self.reinterpret(k, args) {
                    Some(refined) => refined
                        .into_iter()
                        .zip(results)
                        .map(|(r, d)| match (r, d) {
                            (Some(r), Some(d)) if r.ty.elem == d.ty.elem => Some(Info {
                                ty: Ty::new(d.ty.elem, r.ty.shape.meet(&d.ty.shape).unwrap_or(d.ty.shape.clone())),
                                value: r.value,
                            }),
                            (_, d) => d,
                        })
                        .collect(),
                    None => results,
                }
            }
            None => {
                let elems: Vec<Option<Elem>> = arg_tys.iter().map(|t| Some(t.elem)).collect();
                let w = self.wrapper(&callee.candidates, &elems, callee.name.clone());
                self.record_call(walk, callee, Target::Wrapper(w));
                // What each possible candidate would return for what it might receive.
                let mut joined: Vec<Option<Info>> = vec![None; n_results];
                let mut first_round = true;
                let mut result_elems: Vec<(FunId, Vec<Elem>)> = Vec::new();
                for &l in &possible {
                    let f = self.p.function(l);
                    let params: Vec<Ty> = f
                        .params
                        .iter()
                        .zip(&arg_tys)
                        .map(|(p, a)| {
                            let d = declared(&p.ty);
                            Ty::new(d.elem, a.shape.meet(&d.shape).unwrap_or(d.shape))
                        })
                        .collect();
                    let id = self.instance(l, params, Reason::Wrapper);
                    let res = self.typed.instances[id.0 as usize].results.clone();
                    result_elems.push((l, res.iter().map(|t| t.elem).collect()));
                    for (k, r) in res.into_iter().enumerate() {
                        if k < joined.len() {
                            let r = Some(Info::of_type(r));
                            joined[k] = if first_round { r } else { join_opt(&joined[k], &r) };
                        }
                    }
                    first_round = false;
                }
                if let Some((a, b)) = result_elems.iter().zip(result_elems.iter().skip(1)).find(|(a, b)| a.1 != b.1) {
                    let (fa, fb) = (self.p.function(a.0), self.p.function(b.0));
                    let types = |e: &[Elem]| e.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ");
                    let message = format!(
                        "this call of `{}` is dispatched at run time, but `{}` returns {} and `{}` returns {}",
                        callee.name,
                        fa.signature(),
                        types(&a.1),
                        fb.signature(),
                        types(&b.1)
                    );
                    self.report(codes::MIXED_RESULT_TYPES, message, span);
                    if let Some(d) = self.diags_last_mut()
                        && d.code == codes::MIXED_RESULT_TYPES
                    {
                        *d = d.clone().with_hint(
                                "overloads that differ only in shape must return the same element types; or make the argument's rank known statically",
                            );
                    }
                }
                joined
            }
        };
        if blame_pushed {
            self.blame.pop();
        }
        result
    }

    /// The types of a statically empty part's results, found by walking its
    /// body without recording anything, reporting anything or making
    /// instances: its errors cannot happen, but a genarray without a default
    /// that computes nothing still has cells of this type.
    fn speculative_cells(&mut self, walk: &Walk, part: &'a hir::WithPart, n_ops: usize) -> Vec<Option<Info>> {
        let mut dead =
            Walk { env: walk.env.clone(), conflicts: walk.conflicts.clone(), returns: Vec::new(), record: None };
        let diags_before = self.diags.len();
        let reported_before = self.reported.clone();
        self.speculative += 1;
        self.stmts(&mut dead, &part.body);
        let results: Vec<Option<Info>> = if part.results.len() == 1 && n_ops > 1 {
            self.expr_multi(&mut dead, &part.results[0])
        } else {
            part.results.iter().map(|r| self.expr(&mut dead, r)).collect()
        };
        self.speculative -= 1;
        // A body that does not type has no cell type (R0012 if it matters).
        let typed = self.diags.len() == diags_before;
        self.diags.truncate(diags_before);
        self.reported = reported_before;
        results.into_iter().map(|r| r.filter(|_| typed).map(|i| i.without_value())).collect()
    }

    fn record_call(&mut self, walk: &Walk, callee: &Callee, target: Target) {
        if let Some(id) = walk.record {
            self.typed.instances[id.0 as usize].calls.insert(callee.site, target);
        }
    }

    /// Re-interprets an `inline` function's body with known argument values, for
    /// known result values. `None` when no argument has a known value, or the
    /// function is not inline, or is already being re-interpreted.
    fn reinterpret(&mut self, fun: FunId, args: &[Option<Info>]) -> Option<Vec<Option<Info>>> {
        let f = self.p.function(fun);
        // Worth it when a value is known, or (for short functions such as `shape`)
        // when a shape is: the result may then be a known value.
        let has_value = args.iter().any(|a| a.as_ref().is_some_and(|i| i.value.is_some()));
        let has_shape =
            args.iter().any(|a| a.as_ref().is_some_and(|i| i.ty.shape.non_scalar() && i.ty.shape.extents().is_some()));
        if f.inline != Inline::Inline || !(has_value || (has_shape && f.body.len() <= 3)) {
            return None;
        }
        if self.inline_stack.len() >= 8 || self.inline_stack.contains(&fun) || !f.conditions.is_empty() {
            return None;
        }
        self.inline_stack.push(fun);
        let mut walk =
            Walk { env: vec![None; f.locals.len()], conflicts: HashMap::default(), returns: Vec::new(), record: None };
        for (p, a) in f.params.iter().zip(args) {
            walk.env[p.local.0 as usize] = a.clone();
        }
        let params: Vec<Ty> = args
            .iter()
            .map(|a| a.as_ref().map(|i| i.ty.clone()).unwrap_or(Ty::new(Elem::Base(BaseType::Int), Shape::AtLeast(0))))
            .collect();
        self.bind_pattern_locals(f, &params, &mut walk);
        self.stmts(&mut walk, &f.body);
        self.inline_stack.pop();
        let n = f.results.len();
        let mut out: Vec<Option<Info>> = vec![None; n];
        for (round, r) in walk.returns.iter().enumerate() {
            for (k, slot) in out.iter_mut().enumerate() {
                let v = r.get(k).cloned().flatten();
                *slot = if round == 0 || v.is_none() { v } else { join_opt(slot, &v) };
            }
        }
        Some(out)
    }

    // ------------------------------------------------------------ primitives

    fn prim(&mut self, prim: &Prim, args: &[Option<Info>], span: Span) -> Option<Info> {
        // Constant folding with the run-time semantics (but `_hide…_` exists to
        // stop the compiler from knowing).
        if !matches!(prim, Prim::Hide(_)) && args.iter().all(|a| a.as_ref().is_some_and(|i| i.value.is_some())) {
            let vals: Vec<Value> =
                args.iter().map(|a| a.as_ref().and_then(|i| i.value.clone()).expect("checked")).collect();
            // Bounded: a value too large to keep as known is never built.
            let folded = crate::interp::value::with_element_limit(super::ty::MAX_KNOWN_ELEMENTS, || {
                crate::interp::fold_prim(prim, vals)
            });
            if let Some(Ok(v)) = folded {
                return Some(Info::of_value(v));
            }
        }
        // `dim`, `shape` and `size` have known values when the shape is known.
        let first = args.first().cloned().flatten();
        match (prim, &first) {
            (Prim::Dim, Some(x)) => {
                if let Some(r) = x.ty.shape.rank_if_known() {
                    return Some(Info::of_value(Value::Scalar(crate::interp::value::Scalar::int(r as i64))));
                }
            }
            (Prim::Shape, Some(x)) => {
                if let Some(e) = x.ty.shape.extents() {
                    return Some(Info::of_value(Value::int_vector(&e.iter().map(|&d| d as i64).collect::<Vec<_>>())));
                }
            }
            (Prim::Size, Some(x)) => {
                if let Some(e) = x.ty.shape.extents() {
                    return Some(Info::of_value(Value::Scalar(crate::interp::value::Scalar::int(
                        e.iter().product::<usize>() as i64,
                    ))));
                }
            }
            _ => {}
        }
        let tys: Vec<Option<&Ty>> = args.iter().map(|a| a.as_ref().map(|i| &i.ty)).collect();
        let vals: Vec<Option<&Value>> = args.iter().map(|a| a.as_ref().and_then(|i| i.value.as_ref())).collect();
        match super::prim_ty::prim_type(prim, &tys, &vals) {
            Ok(t) => t.map(Info::of_type),
            Err(e) => {
                self.report(e.code, e.message, span);
                None
            }
        }
    }

    // ------------------------------------------------------------ with-loops

    fn with_loop(&mut self, walk: &mut Walk, w: &'a hir::With) -> Vec<Option<Info>> {
        // Operators first (they are evaluated before the partitions).
        enum Op {
            Gen { frame: Shape, default: Option<Info> },
            Mod { array: Option<Info> },
            Fold { neutral: Option<Info> },
        }
        let mut ops = Vec::new();
        for op in &w.ops {
            ops.push(match op {
                WithOp::Genarray { shape, default, .. } => {
                    let s = self.expr(walk, shape);
                    if let Some(i) = &s {
                        self.check_int_vector(i, shape.span, "a genarray's shape");
                    }
                    let frame = match &s {
                        Some(Info { value: Some(v), .. }) => match v.as_int_vec() {
                            Some(e) if e.iter().all(|&d| d >= 0) && v.rank() == 1 => {
                                Shape::known(&e.iter().map(|&d| d as usize).collect::<Vec<_>>())
                            }
                            _ => Shape::AtLeast(0),
                        },
                        Some(i) => match vector_len(i) {
                            Some(n) => Shape::rank(n),
                            None => Shape::AtLeast(0),
                        },
                        None => Shape::AtLeast(0),
                    };
                    let default = default.as_ref().and_then(|d| self.expr(walk, d));
                    Op::Gen { frame, default }
                }
                WithOp::Modarray { array, .. } => Op::Mod { array: self.expr(walk, array) },
                WithOp::Fold { neutral, fun, .. } | WithOp::FoldFix { neutral, fun, .. } => {
                    for p in &fun.partial {
                        self.expr(walk, p);
                    }
                    if let WithOp::FoldFix { fixpoint, .. } = op {
                        self.expr(walk, fixpoint);
                    }
                    Op::Fold { neutral: self.expr(walk, neutral) }
                }
            });
        }
        let frame_rank = ops.iter().find_map(|o| match o {
            Op::Gen { frame, .. } => frame.rank_if_known(),
            Op::Mod { array } => array.as_ref().and_then(|a| a.ty.shape.rank_if_known()),
            Op::Fold { .. } => None,
        });
        let gen_rank = ops.iter().find_map(|o| match o {
            Op::Gen { frame, .. } => frame.rank_if_known(),
            _ => None,
        });
        let mut cells: Vec<Option<Info>> = vec![None; ops.len()];
        // The cells of statically empty parts, for a genarray without a
        // default that no part computes.
        let mut dead_cells: Vec<Option<Info>> = vec![None; ops.len()];
        let wants_dead_cells = ops.iter().any(|o| matches!(o, Op::Gen { default: None, .. }));
        let mut any_part_ran = vec![false; ops.len()];
        for (part_number, part) in w.parts.iter().enumerate() {
            let mut bound_lens = Vec::new();
            let mut empty = false;
            let mut lo: Option<Vec<i64>> = None;
            let mut hi: Option<Vec<i64>> = None;
            for (b, is_lower) in [(part.lower.as_ref().map(|l| &l.0), true), (Some(&part.upper.1), false)] {
                if let Some(Bound::Expr(e)) = b {
                    let i = self.expr(walk, e);
                    if let Some(i) = &i {
                        self.check_int_vector(
                            i,
                            e.span,
                            if is_lower { "a generator's lower bound" } else { "a generator's upper bound" },
                        );
                        bound_lens.push(vector_len(i));
                        if let Some(v) = i.value.as_ref().and_then(|v| v.as_int_vec()) {
                            if is_lower { lo = Some(v) } else { hi = Some(v) }
                        }
                    }
                }
            }
            for e in part.step.iter().chain(&part.width) {
                if let Some(i) = self.expr(walk, e) {
                    self.check_int_vector(&i, e.span, "a generator's step or width");
                    bound_lens.push(vector_len(&i));
                }
            }
            // A generator that is statically empty never runs its body.
            if let (Some(l), Some(h)) = (&lo, &hi) {
                let lo_adj: Vec<i64> =
                    l.iter().map(|&x| if matches!(part.lower, Some((_, Rel::Lt))) { x + 1 } else { x }).collect();
                let hi_incl: Vec<i64> = h.iter().map(|&x| if part.upper.0 == Rel::Lt { x - 1 } else { x }).collect();
                empty = lo_adj.iter().zip(&hi_incl).any(|(a, b)| a > b);
            }
            let n = part
                .index_scalars
                .as_ref()
                .map(|s| s.len())
                .or_else(|| bound_lens.iter().flatten().next().copied())
                .or(frame_rank);
            // A genarray's indices are whole indices of its shape: a
            // generator of another length covers no index of it.
            if let (Some(n), Some(m)) = (n, gen_rank)
                && n != m
            {
                self.report(
                    codes::STATIC_SHAPE_ERROR,
                    format!(
                        "the generator's indices have {n} component{} but the genarray's shape has {m}",
                        if n == 1 { "" } else { "s" }
                    ),
                    part.generator_span,
                );
            }
            if let Some(v) = part.index_vector {
                let info = Some(int_vector(n));
                self.record_local(walk, v, &info);
                walk.env[v.0 as usize] = info;
            }
            if let Some(ss) = &part.index_scalars {
                for s in ss {
                    let info = Some(int_scalar());
                    self.record_local(walk, *s, &info);
                    walk.env[s.0 as usize] = info;
                }
            }
            if empty {
                if let Some(id) = walk.record {
                    self.typed.instances[id.0 as usize].parts_skipped.insert((w.id, part_number));
                }
                if wants_dead_cells {
                    let found = self.speculative_cells(walk, part, ops.len());
                    for (k, r) in found.into_iter().enumerate() {
                        dead_cells[k] = join_opt(&dead_cells[k], &r);
                    }
                }
                continue;
            }
            self.stmts(walk, &part.body);
            let results: Vec<Option<Info>> = if part.results.len() == 1 && ops.len() > 1 {
                self.expr_multi(walk, &part.results[0])
            } else {
                part.results.iter().map(|r| self.expr(walk, r)).collect()
            };
            for (k, r) in results.into_iter().enumerate().take(ops.len()) {
                let r = r.map(|i| i.without_value());
                if let (Some(prev), Some(new)) = (&cells[k], &r)
                    && prev.ty.elem != new.ty.elem
                {
                    self.report(
                        codes::TYPE_MISMATCH,
                        format!("with-loop partitions yield {} and {}", prev.ty, new.ty),
                        part.span,
                    );
                }
                cells[k] = if any_part_ran[k] { join_opt(&cells[k], &r) } else { r };
                any_part_ran[k] = true;
            }
        }
        // Results.
        let mut out = Vec::with_capacity(ops.len());
        let mut recorded = Vec::with_capacity(ops.len());
        for (k, (op, cell)) in ops.into_iter().zip(cells).enumerate() {
            match op {
                Op::Gen { frame, default } => {
                    let cell = match (&cell, &default) {
                        (Some(c), Some(d)) if c.ty.elem == d.ty.elem => Some(c.join(&d.without_value())),
                        (Some(c), Some(d)) => {
                            self.report(
                                codes::TYPE_MISMATCH,
                                format!("with-loop cells are {} but the default is {}", c.ty, d.ty),
                                w.span,
                            );
                            None
                        }
                        (None, Some(d)) => Some(d.without_value()),
                        // Zeros of the cell type a dead part would yield
                        // (seed 003 §4.3.2: no element computed, no default).
                        (None, None) => dead_cells[k].clone(),
                        (c, None) => c.clone(),
                    };
                    // Cells of unknown shape (nothing ran) may be scalars of the hinted type.
                    let cell_ty = cell.as_ref().map(|c| c.ty.clone());
                    recorded.push(cell_ty.clone());
                    let elem = cell_ty.as_ref().map(|c| c.elem).or(w.cell_hint.map(Elem::Base));
                    out.push(elem.map(|e| {
                        let cs = cell_ty.map(|c| c.shape).unwrap_or(Shape::AtLeast(0));
                        Info::of_type(Ty::new(e, frame.concat(&cs)))
                    }));
                }
                Op::Mod { array } => {
                    recorded.push(cell.as_ref().map(|c| c.ty.clone()));
                    if let (Some(a), Some(c)) = (&array, &cell)
                        && a.ty.elem != c.ty.elem
                    {
                        self.report(
                            codes::TYPE_MISMATCH,
                            format!("a modarray of {} gets cells of {}", a.ty, c.ty),
                            w.span,
                        );
                    }
                    out.push(array.map(|a| a.without_value()));
                }
                Op::Fold { neutral } => {
                    recorded.push(cell.as_ref().map(|c| c.ty.clone()));
                    let mut acc = neutral.map(|n| n.without_value());
                    if let (WithOp::Fold { fun, .. } | WithOp::FoldFix { fun, .. }, Some(cell)) = (&w.ops[k], &cell) {
                        // Fold to a fixed point of the accumulator's type.
                        for _ in 0..4 {
                            let mut args: Vec<Option<Info>> = fun.partial.iter().map(|p| self.expr(walk, p)).collect();
                            args.push(acc.clone());
                            args.push(Some(cell.clone()));
                            let r = match &fun.target {
                                FoldTarget::Call(callee) => {
                                    self.call(walk, callee, &args, fun.span).into_iter().next().flatten()
                                }
                                FoldTarget::Prim(p) => self.prim(p, &args, fun.span),
                            };
                            // The fold function's result is the next accumulator:
                            // of another element type, the fold cannot be typed.
                            if let (Some(a), Some(r)) = (&acc, &r)
                                && a.ty.elem != r.ty.elem
                            {
                                self.diags.push(
                                        Diagnostic::error(
                                            codes::TYPE_MISMATCH,
                                            format!(
                                                "the fold function returns {} but the accumulator is {}",
                                                r.ty.elem, a.ty.elem
                                            ),
                                        )
                                        .at(fun.span, "")
                                        .with_note("the fold function's result becomes the next accumulator, which starts as the neutral element")
                                        .with_hint("fold with a function of the neutral element's type, e.g. `+`, `*`, `max`"),
                                    );
                                break;
                            }
                            let next = join_opt(&acc, &r.map(|i| i.without_value()));
                            if next == acc {
                                break;
                            }
                            acc = next;
                        }
                    }
                    out.push(acc);
                }
            }
        }
        if let Some(id) = walk.record {
            self.typed.instances[id.0 as usize].withs.insert(w.id, recorded);
        }
        out
    }
}

/// `members` ordered so that every instance comes before those it is more
/// specific than: an instance of a function declared more specific than
/// another's (`fun_before`) first, else one whose parameter types are
/// subsets of the other's (a hint's `f(int[.,.])` at [2,3] after
/// `f(int[2,.])`, which a [2,3] argument runs), the lowest id first among
/// those that may come next. "More specific" is a partial order: a
/// comparison sort given it (with ids for the incomparable pairs) is not
/// given a total order, which Rust's sort may detect and panic on.
fn most_specific_first(
    instances: &[Instance],
    mut members: Vec<InstanceId>,
    fun_before: impl Fn(FunId, FunId) -> bool,
) -> Vec<InstanceId> {
    let more_specific = |a: InstanceId, b: InstanceId| {
        let (x, y) = (&instances[a.0 as usize], &instances[b.0 as usize]);
        if fun_before(x.fun, y.fun) {
            return true;
        }
        if fun_before(y.fun, x.fun) {
            return false;
        }
        let xs = x.params.iter().zip(&y.params).all(|(p, q)| p.subset_of(q));
        let ys = y.params.iter().zip(&x.params).all(|(p, q)| p.subset_of(q));
        xs && !ys
    };
    members.sort_unstable();
    let mut ordered = Vec::with_capacity(members.len());
    while !members.is_empty() {
        // Some member has none left more specific than it (the relation has
        // no cycles); if not, take the lowest id rather than loop.
        let next = members.iter().position(|&m| !members.iter().any(|&o| o != m && more_specific(o, m))).unwrap_or(0);
        ordered.push(members.remove(next));
    }
    ordered
}

#[cfg(test)]
mod ordering_tests {
    use super::*;

    fn instance(shape: Vec<Option<usize>>) -> Instance {
        Instance {
            fun: FunId(0),
            params: vec![Ty::new(Elem::Base(crate::syntax::ast::BaseType::Int), Shape::Fixed(shape))],
            results: Vec::new(),
            locals: Vec::new(),
            calls: HashMap::default(),
            withs: HashMap::default(),
            reason: Reason::Wrapper,
            symbol: String::new(),
            specialised: false,
            loops_entered: HashSet::default(),
            parts_skipped: HashSet::default(),
        }
    }

    /// int[2,.], int[3,.] and int[2,3]: the last is more specific than the
    /// first and the second is comparable with neither, so "more specific,
    /// else lower id" is a cycle (0 < 1 < 2 < 0), which a comparison sort
    /// may panic on (a mutated test program did).
    #[test]
    fn wrapper_instances_are_ordered_when_specificity_is_partial() {
        let instances =
            vec![instance(vec![Some(2), None]), instance(vec![Some(3), None]), instance(vec![Some(2), Some(3)])];
        let ids = vec![InstanceId(0), InstanceId(1), InstanceId(2)];
        let order = most_specific_first(&instances, ids, |_, _| false);
        assert_eq!(order, vec![InstanceId(1), InstanceId(2), InstanceId(0)]);
        let pos = |i: u32| order.iter().position(|x| x.0 == i).unwrap();
        assert!(pos(2) < pos(0), "int[2,3] must be tried before int[2,.]");
    }
}

//! Lowering the typed, specialised program to IR.
//!
//! Each reachable instance becomes a function; each wrapper becomes one function
//! per base-type signature that tests dim and shape in most-specific-first order
//! and calls the first instance that admits the arguments (seed 003 §4.2), ending
//! in a `fail`. HIR locals become SSA values (an `if` yields what its branches
//! assign, a loop carries what its body reassigns). A `return` inside a branch
//! takes the rest of the statement list into the branch that falls through;
//! inside a loop it sets a `done` flag carried by the loop, tested after it.
//!
//! Checks that the interpreter makes implicitly become explicit `check`
//! statements in front of selections, updates and element-wise operations, so
//! that later passes can prove them away. Arguments for parameters the callee never
//! reads are not evaluated (SaC does not evaluate dead code): a placeholder of the
//! parameter's type is passed instead.

use crate::{HashMap, HashSet};

use super::*;
use crate::diagnostics::{self as codes};
use crate::interp::ops::{BinOp, UnOp};
use crate::interp::value::{Elems, Scalar};
use crate::sema::hir::{self, Bound, Elem, ExprKind, FoldTarget, LocalId};
use crate::sema::prim_ty::prim_type;
use crate::sema::ty::Shape;
use crate::sema::typed::{InstanceId, Reason, Target, Typed, WrapperId};
use crate::span::SourceMap;
use crate::syntax::ast::{BaseType, Rel};

/// Lowers every instance reachable from the entries.
pub fn lower(program: &hir::Program, typed: &Typed, sources: &SourceMap) -> Module {
    let mut ml = ModuleLower {
        program,
        typed,
        sources,
        module: Module::default(),
        inst_func: HashMap::default(),
        wrapper_func: HashMap::default(),
        pending_wrappers: Vec::new(),
    };
    for &i in &typed.reachable {
        let inst = typed.instance(i);
        let f = program.function(inst.fun);
        if f.intrinsic.is_some() {
            // Built-in functions (printf) have no body: their calls lower to primitives.
            continue;
        }
        let id = FuncId(ml.module.functions.len() as u32);
        ml.module.functions.push(Function {
            name: inst.symbol.clone(),
            source_name: f.name.clone(),
            kind: FunctionKind::Instance,
            params: Vec::new(),
            results: inst.results.clone(),
            body: Block::default(),
            values: Vec::new(),
            inline: f.inline == crate::syntax::ast::Inline::Inline,
            noinline: f.inline == crate::syntax::ast::Inline::Noinline,
            cold: false,
            library: f.is_library(),
            specialises: None,
            span: f.name_span,
        });
        ml.inst_func.insert(i, id);
    }
    // Entries: one wrapper function per base-type signature of the entry's instances.
    let mut entries: Vec<(Name, WrapperId)> = typed.entries.iter().map(|(n, w)| (n.clone(), *w)).collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, w) in entries {
        let mut sigs: Vec<Vec<Elem>> = Vec::new();
        for i in &typed.wrapper(w).instances {
            let sig: Vec<Elem> = typed.instance(*i).params.iter().map(|t| t.elem).collect();
            if !sigs.contains(&sig) {
                sigs.push(sig);
            }
        }
        for sig in sigs {
            let f = ml.wrapper(w, &sig);
            ml.module.entries.push((name.clone(), f));
        }
        for i in &typed.wrapper(w).instances {
            if let Some(&f) = ml.inst_func.get(i)
                && !ml.module.variants.contains(&f)
                && !ml.module.function(f).library
            {
                ml.module.variants.push(f);
            }
        }
    }
    for &i in &typed.reachable {
        ml.lower_instance(i);
    }
    while let Some((w, sig, f)) = ml.pending_wrappers.pop() {
        ml.build_wrapper(w, &sig, f);
    }
    // Link names must be unique (the text form refers to functions by name);
    // different overloads can mangle alike (same types, different modules).
    let mut seen = HashSet::default();
    for f in &mut ml.module.functions {
        let base = f.name.clone();
        let mut k = 1;
        while !seen.insert(f.name.clone()) {
            k += 1;
            f.name = format!("{base}__{k}");
        }
    }
    // A call-site specialisation names the declared instance it narrows.
    let mut declared = HashMap::default();
    for &j in &typed.reachable {
        let other = typed.instance(j);
        if let (Reason::Declared, Some(&g)) = (&other.reason, ml.inst_func.get(&j)) {
            declared.entry(other.fun).or_insert(g);
        }
    }
    for &i in &typed.reachable {
        let inst = typed.instance(i);
        let (Reason::CallSite(_), true, Some(&fid)) = (&inst.reason, inst.specialised, ml.inst_func.get(&i)) else {
            continue;
        };
        if let Some(&g) = declared.get(&inst.fun) {
            let name = ml.module.functions[g.0 as usize].name.clone();
            ml.module.functions[fid.0 as usize].specialises = Some(name);
        }
    }
    ml.module
}

struct ModuleLower<'a> {
    program: &'a hir::Program,
    typed: &'a Typed,
    sources: &'a SourceMap,
    module: Module,
    inst_func: HashMap<InstanceId, FuncId>,
    wrapper_func: HashMap<(WrapperId, Vec<Elem>), FuncId>,
    pending_wrappers: Vec<(WrapperId, Vec<Elem>, FuncId)>,
}

impl ModuleLower<'_> {
    /// The wrapper function for `w` at base-type signature `sig` (created on demand).
    fn wrapper(&mut self, w: WrapperId, sig: &[Elem]) -> FuncId {
        if let Some(f) = self.wrapper_func.get(&(w, sig.to_vec())) {
            return *f;
        }
        let wrapper = self.typed.wrapper(w);
        let id = FuncId(self.module.functions.len() as u32);
        let suffix: String = sig.iter().map(|e| format!("_{e}")).collect();
        // Wrappers for known element types already carry them in their symbol.
        let suffix = if wrapper.symbol.ends_with(&suffix) { String::new() } else { suffix };
        let members = self.dispatch_members(w, sig);
        let results = members.first().map(|i| self.typed.instance(*i).results.clone()).unwrap_or_default();
        // Results: the join over the members.
        let mut joined = results.clone();
        for i in &members {
            for (j, r) in self.typed.instance(*i).results.iter().enumerate() {
                if let Some(t) = joined.get_mut(j)
                    && t.elem == r.elem
                {
                    t.shape = t.shape.join(&r.shape);
                }
            }
        }
        let library = members.first().is_some_and(|i| self.program.function(self.typed.instance(*i).fun).is_library());
        self.module.functions.push(Function {
            name: format!("{}{suffix}", wrapper.symbol),
            source_name: wrapper.name.clone(),
            kind: FunctionKind::Wrapper,
            params: Vec::new(),
            results: joined,
            body: Block::default(),
            values: Vec::new(),
            inline: false,
            noinline: false,
            cold: false,
            library,
            specialises: None,
            span: members.first().map_or(Span::new(crate::span::FileId(0), 0, 0), |i| {
                self.program.function(self.typed.instance(*i).fun).name_span
            }),
        });
        self.wrapper_func.insert((w, sig.to_vec()), id);
        self.pending_wrappers.push((w, sig.to_vec(), id));
        id
    }

    /// The instances wrapper `w` dispatches among for the element types
    /// `sig`, most specific first (inference's order).
    ///
    /// Every instance of a user function is among them, as seed 003 has it
    /// (specialisations "should" be dispatched: a generic caller that meets
    /// a specialised shape at run time runs the specialised code), until the
    /// optimiser finds a specialisation that only the dispatch still calls
    /// (`opt::retire`: its dispatched calls then run the declared instance,
    /// [`Function::specialises`]). A library
    /// function's specialisation for a call site's types
    /// ([`Reason::CallSite`]: `-` for `double[4000,4000]` where an AKS
    /// instance negates) is left out where the function's declared instance
    /// is a member too and covers its shapes: it is reached by static binding,
    /// where its static shapes pay (fusion and folding with the caller's
    /// code), while dispatched from generic code it runs the same loop as
    /// the declared instance, at the same speed. Dispatched, it was a second
    /// copy of the AKS loop inside every generic instance that inlined the
    /// wrapper (a quarter of `neg`'s LLVM time in the compile service).
    fn dispatch_members(&self, w: WrapperId, sig: &[Elem]) -> Vec<InstanceId> {
        let members: Vec<InstanceId> = self
            .typed
            .wrapper(w)
            .instances
            .iter()
            .copied()
            .filter(|i| self.typed.instance(*i).params.iter().map(|t| t.elem).eq(sig.iter().copied()))
            .collect();
        let covered = |i: InstanceId| {
            let inst = self.typed.instance(i);
            matches!(inst.reason, Reason::CallSite(_))
                && inst.specialised
                && self.program.function(inst.fun).is_library()
                && members.iter().any(|j| {
                    let other = self.typed.instance(*j);
                    other.fun == inst.fun && !other.specialised
                })
        };
        members.iter().copied().filter(|i| !covered(*i)).collect()
    }

    /// A dispatch chain: `if (fits inst1) inst1(args) else if … else fail`.
    fn build_wrapper(&mut self, w: WrapperId, sig: &[Elem], fid: FuncId) {
        let wrapper = self.typed.wrapper(w);
        let members = self.dispatch_members(w, sig);
        let span = self.module.functions[fid.0 as usize].span;
        let results = self.module.functions[fid.0 as usize].results.clone();
        let mut f = std::mem::replace(&mut self.module.functions[fid.0 as usize], placeholder());
        // Parameters: any shape of the signature's element types (callers pass
        // what they have; the dispatch tests decide).
        let param_tys: Vec<Ty> = sig.iter().map(|e| Ty::new(*e, Shape::AtLeast(0))).collect();
        f.params = param_tys.iter().map(|t| f.new_value(t.clone(), None)).collect();
        let params = f.params.clone();
        let mut fl = FnBuilder { f, span };
        // `members` keep the wrapper's order, most specific first (inference
        // orders them; leaving some out keeps that).
        // What the interpreter lists when no instance applies: the
        // arguments' types (filled in when it runs) and the candidates.
        let mut failure = format!("no instance of `{}` accepts ({{args}})", wrapper.name);
        for (listed, c) in wrapper.candidates.iter().enumerate() {
            if listed == 6 {
                failure.push_str(&format!("\n… and {} more", wrapper.candidates.len() - 6));
                break;
            }
            failure.push_str(&format!("\ncandidate: {}", self.program.function(*c).signature()));
        }
        let mut body = fl.dispatch(self, &members, &params, &results, &failure);
        // A wrapper is invisible in error locations: its failures are its caller's.
        set_blame(&mut body, Blame::Caller);
        fl.f.body = body;
        self.module.functions[fid.0 as usize] = fl.f;
    }

    fn lower_instance(&mut self, i: InstanceId) {
        let Some(&fid) = self.inst_func.get(&i) else { return };
        let inst = self.typed.instance(i);
        let src = self.program.function(inst.fun);
        let mut f = std::mem::replace(&mut self.module.functions[fid.0 as usize], placeholder());
        let mut env: Vec<Option<ValueId>> = vec![None; src.locals.len()];
        for (p, ty) in src.params.iter().zip(&inst.params) {
            let v = f.new_value(ty.clone(), Some(p.name.clone()));
            f.params.push(v);
            env[p.local.0 as usize] = Some(v);
        }
        let mut lw = FnLower {
            ml: self,
            inst: i,
            src,
            b: FnBuilder { f, span: src.span },
            env,
            loop_depth: 0,
            pattern_values: Vec::new(),
        };
        let mut stmts = Vec::new();
        lw.entry_checks(&mut stmts);
        let yields = lw.tail(&src.body, &mut stmts, Mode::Function);
        let mut f = lw.b.f;
        f.body = Block { stmts, yields };
        self.module.functions[fid.0 as usize] = f;
    }
}

/// Whether a branch's statements hold a failure (code inference found always
/// fails, or never reached).
fn always_fails(stmts: &[Stmt]) -> bool {
    stmts.iter().any(|s| matches!(s.op, Op::Fail { .. }))
}

fn set_blame(b: &mut Block, blame: Blame) {
    for s in &mut b.stmts {
        s.blame = blame;
        s.op.walk_blocks_mut(&mut |inner| set_blame(inner, blame));
    }
}

/// Placeholders with more elements than this are built by `genarray` at run
/// time (where they are never reached) instead of written out as constants:
/// a constant of a declared `double[4000,4000]` result had sixteen million
/// elements that every pass hashed, compared and copied (CSE took 7 s).
pub(crate) const MAX_PLACEHOLDER_CONSTANT: usize = 1024;

/// Statements defining `def` (of type `ty`) as the value standing in where a
/// failure leaves it undefined (a failure never yields): zeros, unknown
/// extents 0 ([`placeholder_value`]); a large static shape as
/// `genarray(shape, zero)`, whose constant form would be huge (see
/// [`MAX_PLACEHOLDER_CONSTANT`]; `simplify` folds no result that large).
/// `new_value` makes the helper values (the shape and the zero).
pub(crate) fn placeholder_stmts(
    new_value: &mut dyn FnMut(Ty) -> ValueId,
    def: ValueId,
    ty: &Ty,
    span: Span,
) -> Vec<Stmt> {
    if let (Elem::Base(b), Shape::Fixed(d)) = (&ty.elem, &ty.shape) {
        let extents: Option<Vec<i64>> = d.iter().map(|e| e.and_then(|e| i64::try_from(e).ok())).collect();
        let elements = d.iter().try_fold(1usize, |n, e| e.and_then(|e| n.checked_mul(e)));
        if let Some(extents) = extents.filter(|_| elements.is_none_or(|n| n > MAX_PLACEHOLDER_CONSTANT)) {
            let shape = Value::int_vector(&extents);
            let zero = Value::Scalar(Scalar::zero(*b));
            let (shape_v, zero_v) = (new_value(Ty::of_value(&shape)), new_value(Ty::of_value(&zero)));
            return vec![
                Stmt::new(vec![shape_v], Op::Const(shape), span),
                Stmt::new(vec![zero_v], Op::Const(zero), span),
                Stmt::new(vec![def], Op::prim(Prim::Genarray, vec![shape_v, zero_v]), span),
            ];
        }
    }
    vec![Stmt::new(vec![def], Op::Const(placeholder_value(ty)), span)]
}

/// The value standing in for one of type `ty` where a failure leaves it
/// undefined (a failure never yields): zeros, unknown extents 0.
fn placeholder_value(ty: &Ty) -> Value {
    let zero = match ty.elem {
        Elem::Base(b) => Scalar::zero(b),
        Elem::String => return Value::Str(std::sync::Arc::from(&b""[..])),
    };
    let shape: Vec<usize> = match &ty.shape {
        Shape::Fixed(d) => d.iter().map(|e| e.unwrap_or(0)).collect(),
        Shape::AtLeast(n) => vec![0; *n],
    };
    let n: usize = shape.iter().product();
    match Elems::filled(zero, n) {
        Ok(e) => Value::from_parts(shape, e),
        Err(_) => Value::Scalar(zero),
    }
}

fn placeholder() -> Function {
    Function {
        name: String::new(),
        source_name: Name::new(""),
        kind: FunctionKind::Instance,
        params: Vec::new(),
        results: Vec::new(),
        body: Block::default(),
        values: Vec::new(),
        inline: false,
        noinline: false,
        cold: false,
        library: false,
        specialises: None,
        span: Span::new(crate::span::FileId(0), 0, 0),
    }
}

/// Emits statements into a function under construction (shared by the L0
/// lowering).
pub(crate) struct FnBuilder {
    pub(crate) f: Function,
    pub(crate) span: Span,
}

impl FnBuilder {
    pub(crate) fn emit(&mut self, out: &mut Vec<Stmt>, op: Op, tys: Vec<Ty>, span: Span) -> Vec<ValueId> {
        let defs: Vec<ValueId> = tys.into_iter().map(|t| self.f.new_value(t, None)).collect();
        out.push(Stmt::new(defs.clone(), op, span));
        defs
    }

    pub(crate) fn emit1(&mut self, out: &mut Vec<Stmt>, op: Op, ty: Ty, span: Span) -> ValueId {
        self.emit(out, op, vec![ty], span)[0]
    }

    pub(crate) fn constant(&mut self, out: &mut Vec<Stmt>, v: Value, span: Span) -> ValueId {
        let ty = Ty::of_value(&v);
        self.emit1(out, Op::Const(v), ty, span)
    }

    pub(crate) fn ty(&self, v: ValueId) -> Ty {
        self.f.ty(v).clone()
    }

    /// A primitive, typed by the shared rules (or `fallback`).
    pub(crate) fn prim(
        &mut self,
        out: &mut Vec<Stmt>,
        prim: Prim,
        args: Vec<ValueId>,
        fallback: Ty,
        span: Span,
    ) -> ValueId {
        let tys: Vec<Ty> = args.iter().map(|a| self.ty(*a)).collect();
        let refs: Vec<Option<&Ty>> = tys.iter().map(Some).collect();
        let consts: Vec<Option<Value>> = args.iter().map(|a| self.const_of(out, *a)).collect();
        let vals: Vec<Option<&Value>> = consts.iter().map(|c| c.as_ref()).collect();
        let ty = prim_type(&prim, &refs, &vals).ok().flatten().unwrap_or(fallback);
        self.emit1(out, Op::prim(prim, args), ty, span)
    }

    /// The constant a value was defined as, when it was defined in `out`.
    fn const_of(&self, out: &[Stmt], v: ValueId) -> Option<Value> {
        out.iter().rev().find(|s| s.defs.contains(&v)).and_then(|s| match &s.op {
            Op::Const(c) => Some(c.clone()),
            _ => None,
        })
    }

    /// A value of type `ty` for arguments that are never read.
    fn placeholder_of(&mut self, out: &mut Vec<Stmt>, ty: &Ty, span: Span) -> ValueId {
        // The declared (possibly generic) type, not the constant's.
        let def = self.f.new_value(ty.clone(), None);
        let f = &mut self.f;
        out.extend(placeholder_stmts(&mut |t| f.new_value(t, None), def, ty, span));
        def
    }

    /// A branch that always fails (code inference never reached) yields
    /// placeholders typed like the other branch's values, so both agree.
    fn align_dead_branch(&mut self, then_block: &mut Block, else_block: &mut Block, span: Span) {
        let (dead, live) = match (always_fails(&then_block.stmts), always_fails(&else_block.stmts)) {
            (true, false) => (then_block, else_block),
            // Both dead: any agreeing types will do.
            (false, true) | (true, true) => (else_block, then_block),
            _ => return,
        };
        let tys: Vec<Ty> = live.yields.iter().map(|y| self.ty(*y)).collect();
        dead.yields = tys.iter().map(|t| self.placeholder_of(&mut dead.stmts, t, span)).collect();
    }

    pub(crate) fn check(
        &mut self,
        out: &mut Vec<Stmt>,
        check: Check,
        code: crate::diagnostics::Code,
        message: String,
        span: Span,
    ) {
        out.push(Stmt::new(Vec::new(), Op::Check(CheckOp { check, code, message }), span));
    }

    /// The dispatch chain of a wrapper.
    fn dispatch(
        &mut self,
        ml: &mut ModuleLower,
        members: &[InstanceId],
        params: &[ValueId],
        results: &[Ty],
        failure: &str,
    ) -> Block {
        let span = self.span;
        let mut stmts = Vec::new();
        let yields = self.dispatch_from(ml, members, params, results, failure, &mut stmts, span);
        Block { stmts, yields }
    }

    #[allow(clippy::too_many_arguments)]
    fn dispatch_from(
        &mut self,
        ml: &mut ModuleLower,
        members: &[InstanceId],
        params: &[ValueId],
        results: &[Ty],
        failure: &str,
        out: &mut Vec<Stmt>,
        span: Span,
    ) -> Vec<ValueId> {
        let Some((first, rest)) = members.split_first() else {
            let fail =
                Op::Fail { code: codes::NO_MATCHING_INSTANCE, message: failure.to_string(), args: params.to_vec() };
            out.push(Stmt::new(Vec::new(), fail, span));
            // A failure never yields; placeholders keep the block well-formed.
            return results.iter().map(|t| self.placeholder_of(out, t, span)).collect();
        };
        let inst = ml.typed.instance(*first);
        let callee = ml.inst_func[first];
        // The test: rank and known extents of every argument not statically inside.
        let mut conds: Vec<ValueId> = Vec::new();
        for (p, want) in params.iter().zip(&inst.params) {
            let have = self.ty(*p);
            if have.subset_of(want) {
                continue;
            }
            let bool_ty = Ty::new(Elem::Base(BaseType::Bool), Shape::scalar());
            let int_ty = Ty::new(Elem::Base(BaseType::Int), Shape::scalar());
            match &want.shape {
                Shape::AtLeast(n) => {
                    let d = self.prim(out, Prim::Dim, vec![*p], int_ty.clone(), span);
                    let k = self.constant(out, Value::Scalar(Scalar::int(*n as i64)), span);
                    conds.push(self.prim(out, Prim::Bin(BinOp::Ge), vec![d, k], bool_ty, span));
                }
                Shape::Fixed(dims) => {
                    let d = self.prim(out, Prim::Dim, vec![*p], int_ty.clone(), span);
                    let k = self.constant(out, Value::Scalar(Scalar::int(dims.len() as i64)), span);
                    let rank_ok = self.prim(out, Prim::Bin(BinOp::Eq), vec![d, k], bool_ty.clone(), span);
                    conds.push(rank_ok);
                    if dims.iter().any(|e| e.is_some()) {
                        // Extents are tested only when the rank fits (the shape
                        // vector may be shorter otherwise).
                        let mut inner = Vec::new();
                        let shp = self.prim(
                            &mut inner,
                            Prim::Shape,
                            vec![*p],
                            Ty::new(Elem::Base(BaseType::Int), Shape::rank(1)),
                            span,
                        );
                        let mut all: Option<ValueId> = None;
                        for (k, e) in dims.iter().enumerate() {
                            let Some(e) = e else { continue };
                            let idx = self.constant(&mut inner, Value::int_vector(&[k as i64]), span);
                            let ext = self.prim(&mut inner, Prim::Sel, vec![idx, shp], int_ty.clone(), span);
                            let want_e = self.constant(&mut inner, Value::Scalar(Scalar::int(*e as i64)), span);
                            let ok =
                                self.prim(&mut inner, Prim::Bin(BinOp::Eq), vec![ext, want_e], bool_ty.clone(), span);
                            all = Some(match all {
                                None => ok,
                                Some(prev) => {
                                    self.prim(&mut inner, Prim::Bin(BinOp::And), vec![prev, ok], bool_ty.clone(), span)
                                }
                            });
                        }
                        let inner_yield = all.expect("some extent is known");
                        let mut else_stmts = Vec::new();
                        let f2 = self.constant(&mut else_stmts, Value::Scalar(Scalar::Bool(false)), span);
                        let shapes_ok = self.emit1(
                            out,
                            Op::If {
                                cond: rank_ok,
                                then_block: Block { stmts: inner, yields: vec![inner_yield] },
                                else_block: Block { stmts: else_stmts, yields: vec![f2] },
                            },
                            bool_ty.clone(),
                            span,
                        );
                        conds.pop();
                        conds.push(shapes_ok);
                    }
                }
            }
        }
        // The call is located at the callee's declaration, where no call
        // written in the source is: wherever inlining copies this arm, its
        // call is known as a dispatched one (`opt::retire` retargets those
        // of specialisations no static call needs any more).
        let call_span = ml.program.function(inst.fun).name_span;
        let call = |this: &mut Self, out: &mut Vec<Stmt>| -> Vec<ValueId> {
            let res = inst.results.clone();
            this.emit(out, Op::Call { func: callee, args: params.to_vec() }, res, call_span)
        };
        if conds.is_empty() {
            return call(self, out);
        }
        let bool_ty = Ty::new(Elem::Base(BaseType::Bool), Shape::scalar());
        let cond = conds
            .into_iter()
            .reduce(|a, b| self.prim(out, Prim::Bin(BinOp::And), vec![a, b], bool_ty.clone(), span))
            .expect("non-empty");
        let mut then_stmts = Vec::new();
        let then_yields = call(self, &mut then_stmts);
        let mut else_stmts = Vec::new();
        let else_yields = self.dispatch_from(ml, rest, params, results, failure, &mut else_stmts, span);
        self.emit(
            out,
            Op::If {
                cond,
                then_block: Block { stmts: then_stmts, yields: then_yields },
                else_block: Block { stmts: else_stmts, yields: else_yields },
            },
            results.to_vec(),
            span,
        )
    }
}

/// What a `return` means where it appears.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The function body: yield the results.
    Function,
    /// Inside a loop body: set the `done` flag and the result variables.
    Loop,
}

/// Lowering of one instance's body.
struct FnLower<'m, 'a> {
    ml: &'m mut ModuleLower<'a>,
    inst: InstanceId,
    src: &'a hir::Function,
    b: FnBuilder,
    env: Vec<Option<ValueId>>,
    loop_depth: usize,
    /// The pattern variables bound at entry, with their values (results'
    /// patterns are checked against them).
    pattern_values: Vec<(Name, ValueId)>,
}

/// Extra loop-carried state for `return` inside loops: (done flag, result values).
struct ReturnState {
    done: ValueId,
    results: Vec<ValueId>,
    /// The loop's other carried locals and their types: every exit from the body
    /// yields their current values first.
    carried: Vec<(LocalId, Ty)>,
}

impl FnLower<'_, '_> {
    fn instance(&self) -> &crate::sema::typed::Instance {
        self.ml.typed.instance(self.inst)
    }

    /// `l`'s type as inference found it: `None` where no assignment was
    /// reached, or where assignments of different element types meet.
    fn inferred_ty(&self, l: LocalId) -> Option<Ty> {
        self.instance().locals.get(l.0 as usize).cloned().flatten()
    }

    /// Whether inference entered the loop `s`: one it never entered never
    /// runs (its condition is false on entry, known by inference, which is
    /// why evaluating it cannot fail either), and its body is not typed.
    fn loop_entered(&self, s: &hir::Stmt) -> bool {
        match s {
            hir::Stmt::While { id, .. } | hir::Stmt::DoWhile { id, .. } => self.instance().loops_entered.contains(id),
            _ => false,
        }
    }

    fn local_ty(&self, l: LocalId) -> Ty {
        self.inferred_ty(l).unwrap_or(Ty::new(Elem::Base(BaseType::Int), Shape::AtLeast(0)))
    }

    /// Pattern variables and conditions at entry (failures are the caller's).
    fn entry_checks(&mut self, out: &mut Vec<Stmt>) {
        let from = out.len();
        self.entry_checks_inner(out);
        for s in &mut out[from..] {
            s.blame = Blame::Caller;
            s.op.walk_blocks_mut(&mut |b| set_blame(b, Blame::Caller));
        }
    }

    fn entry_checks_inner(&mut self, out: &mut Vec<Stmt>) {
        let src = self.src;
        let span = src.name_span;
        if !src.pattern_locals.is_empty()
            || !src.params.iter().all(|p| crate::interp::dispatch::spec_is_plain(&p.ty.shape))
        {
            let params = self.b.f.params.clone();
            let specs = src.params.iter().map(|p| p.ty.shape.clone()).collect();
            let vars: Vec<Name> = src.pattern_locals.iter().map(|(n, _)| n.clone()).collect();
            let tys: Vec<Ty> = src.pattern_locals.iter().map(|(_, l)| self.local_ty(*l)).collect();
            let defs = self.b.emit(
                out,
                Op::Pattern {
                    args: params,
                    specs,
                    vars,
                    function: src.signature(),
                    labels: src.params.iter().map(|p| p.name.to_string()).collect(),
                    results: false,
                },
                tys,
                span,
            );
            for ((n, l), d) in src.pattern_locals.iter().zip(defs) {
                self.env[l.0 as usize] = Some(d);
                self.pattern_values.push((n.clone(), d));
            }
        }
        for c in &src.conditions {
            let v = self.expr(c, out);
            let text = self.ml.sources.snippet(c.span).to_string();
            let message = format!("condition `{text}` of `{}` does not hold", src.signature());
            self.b.check(out, Check::Assert(v), codes::CONDITION_FAILED, message, span);
        }
    }

    /// Lowers a statement list in tail position; returns what the block yields
    /// (the function's results in [`Mode::Function`]).
    fn tail(&mut self, stmts: &[hir::Stmt], out: &mut Vec<Stmt>, mode: Mode) -> Vec<ValueId> {
        self.tail_with(stmts, out, mode, None)
    }

    fn tail_with(
        &mut self,
        stmts: &[hir::Stmt],
        out: &mut Vec<Stmt>,
        mode: Mode,
        ret: Option<&ReturnState>,
    ) -> Vec<ValueId> {
        for (k, s) in stmts.iter().enumerate() {
            match s {
                hir::Stmt::Return { values, span } => {
                    let vals = self.return_values(values, out, *span);
                    return match (mode, ret) {
                        (Mode::Loop, Some(r)) => {
                            let t = self.b.constant(out, Value::Scalar(Scalar::Bool(true)), *span);
                            let mut y = self.carried_now(r);
                            y.push(t);
                            y.extend(vals);
                            y
                        }
                        _ => vals,
                    };
                }
                hir::Stmt::If { cond, then_body, else_body, span }
                    if contains_return(then_body) || contains_return(else_body) =>
                {
                    // The rest of the list continues inside both branches.
                    let rest = &stmts[k + 1..];
                    let c = self.condition(cond, out, "`if` condition");
                    let saved = self.env.clone();
                    let mut then_stmts = Vec::new();
                    let mut then_all: Vec<hir::Stmt> = then_body.clone();
                    then_all.extend_from_slice(rest);
                    let ty = self.yield_types(mode, ret);
                    let then_y = self.tail_with(&then_all, &mut then_stmts, mode, ret);
                    self.env = saved.clone();
                    let mut else_stmts = Vec::new();
                    let mut else_all: Vec<hir::Stmt> = else_body.clone();
                    else_all.extend_from_slice(rest);
                    let else_y = self.tail_with(&else_all, &mut else_stmts, mode, ret);
                    self.env = saved;
                    let op = Op::If {
                        cond: c,
                        then_block: Block { stmts: then_stmts, yields: then_y },
                        else_block: Block { stmts: else_stmts, yields: else_y },
                    };
                    return self.b.emit(out, op, ty, *span);
                }
                hir::Stmt::While { .. } | hir::Stmt::DoWhile { .. }
                    if contains_return_stmt(s) && self.loop_entered(s) =>
                {
                    // The loop carries a `done` flag and the results.
                    let span = stmt_span(s);
                    let results = self.yield_types(Mode::Function, None);
                    let state_done = self.b.constant(out, Value::Scalar(Scalar::Bool(false)), span);
                    let state_results: Vec<ValueId> =
                        results.iter().map(|t| self.b.placeholder_of(out, t, span)).collect();
                    let (done, vals) = self.lower_loop(s, out, Some((state_done, state_results)));
                    // After the loop: done ? results : rest of the list.
                    let rest = &stmts[k + 1..];
                    let ty = self.yield_types(mode, ret);
                    let mut then_stmts = Vec::new();
                    let then_y = match (mode, ret) {
                        (Mode::Loop, Some(r)) => {
                            let t = self.b.constant(&mut then_stmts, Value::Scalar(Scalar::Bool(true)), span);
                            let mut y = self.carried_now(r);
                            y.push(t);
                            y.extend(vals.iter().copied());
                            y
                        }
                        _ => vals.clone(),
                    };
                    let saved = self.env.clone();
                    let mut else_stmts = Vec::new();
                    let else_y = self.tail_with(rest, &mut else_stmts, mode, ret);
                    self.env = saved;
                    let op = Op::If {
                        cond: done,
                        then_block: Block { stmts: then_stmts, yields: then_y },
                        else_block: Block { stmts: else_stmts, yields: else_y },
                    };
                    return self.b.emit(out, op, ty, span);
                }
                other => self.stmt(other, out),
            }
        }
        // Falling off the end.
        match (mode, ret) {
            (Mode::Loop, Some(r)) => {
                // Not done: yield the flag false and the previous results.
                let span = self.src.span;
                let f = self.b.constant(out, Value::Scalar(Scalar::Bool(false)), span);
                let mut y = self.carried_now(r);
                y.push(f);
                y.extend(r.results.iter().copied());
                y
            }
            _ => {
                // A void function (or one that errs out): results are placeholders.
                let span = self.src.span;
                let tys = self.b.f.results.clone();
                tys.iter().map(|t| self.b.placeholder_of(out, t, span)).collect()
            }
        }
    }

    /// What a tail block yields: the results, or (in a loop) the carried locals,
    /// `done` and the results.
    fn yield_types(&self, mode: Mode, ret: Option<&ReturnState>) -> Vec<Ty> {
        let results = self.b.f.results.clone();
        match (mode, ret) {
            (Mode::Loop, Some(r)) => {
                let mut v: Vec<Ty> = r.carried.iter().map(|(_, t)| t.clone()).collect();
                v.push(Ty::new(Elem::Base(BaseType::Bool), Shape::scalar()));
                v.extend(results);
                v
            }
            _ => results,
        }
    }

    /// The current values of a loop's carried locals.
    fn carried_now(&mut self, r: &ReturnState) -> Vec<ValueId> {
        r.carried
            .iter()
            .map(|(l, _)| self.env[l.0 as usize].expect("carried locals are defined before the loop"))
            .collect()
    }

    fn return_values(&mut self, values: &[hir::Expr], out: &mut Vec<Stmt>, span: Span) -> Vec<ValueId> {
        let vals: Vec<ValueId> = if values.len() == 1 {
            self.expr_multi(&values[0], out)
        } else {
            values.iter().map(|v| self.expr(v, out)).collect()
        };
        // Declared result types the inferred ones do not imply are checked.
        let src = self.src;
        let at = if src.is_library() { span } else { src.name_span };
        let mut patterned: Vec<(ValueId, crate::syntax::ast::ShapeSpec, String)> = Vec::new();
        for (k, (v, decl)) in vals.iter().zip(&src.results).enumerate() {
            let ty = self.b.ty(*v);
            let declared = Ty::new(decl.elem, Shape::of_spec(&decl.shape));
            let plain = crate::interp::dispatch::spec_is_plain(&decl.shape);
            if !(plain && ty.subset_of(&declared)) {
                let what = if src.results.len() > 1 {
                    format!("result {} of `{}`", k + 1, src.name)
                } else {
                    format!("the result of `{}`", src.name)
                };
                self.b.check(
                    out,
                    Check::Conforms(*v, declared),
                    codes::TYPE_ASSERTION_FAILED,
                    format!("{what} is {{a}} but is declared {decl}"),
                    at,
                );
                // The shape class is checked above; the pattern (`int[n]`:
                // the same `n` as the arguments') here.
                if !plain {
                    patterned.push((*v, decl.shape.clone(), what));
                }
            }
        }
        if !patterned.is_empty() {
            let (vars, mut args): (Vec<Name>, Vec<ValueId>) = self.pattern_values.iter().cloned().unzip();
            args.extend(patterned.iter().map(|p| p.0));
            let specs = patterned.iter().map(|p| p.1.clone()).collect();
            let labels = patterned.into_iter().map(|p| p.2).collect();
            let op = Op::Pattern { args, specs, vars, function: src.signature(), labels, results: true };
            self.b.emit(out, op, Vec::new(), at);
        }
        vals
    }

    /// Lowers a condition. One not known to be a scalar (a `bool[*]` of
    /// hidden rank: inference accepts it) is checked to be one, as the
    /// interpreter does, before anything branches on it.
    fn condition(&mut self, e: &hir::Expr, out: &mut Vec<Stmt>, what: &str) -> ValueId {
        let c = self.expr(e, out);
        if !self.b.ty(c).shape.is_scalar() {
            self.b.check(
                out,
                Check::Conforms(c, Ty::new(Elem::Base(BaseType::Bool), Shape::scalar())),
                codes::RUNTIME_TYPE_MISMATCH,
                format!("the {what} must be a bool, not {{a}}"),
                e.span,
            );
        }
        c
    }

    fn stmt(&mut self, s: &hir::Stmt, out: &mut Vec<Stmt>) {
        match s {
            hir::Stmt::Assign { targets, value, live, span } => {
                if !*live {
                    return;
                }
                let vals = if targets.len() == 1 { vec![self.expr(value, out)] } else { self.expr_multi(value, out) };
                for (t, v) in targets.iter().zip(vals) {
                    self.assign(*t, v, out, *span);
                }
            }
            hir::Stmt::Eval { expr, .. } => {
                self.expr_multi(expr, out);
            }
            hir::Stmt::If { cond, then_body, else_body, span } => {
                let c = self.condition(cond, out, "`if` condition");
                let before = self.env.clone();
                let mut then_stmts = Vec::new();
                for t in then_body {
                    self.stmt(t, &mut then_stmts);
                }
                let after_then = std::mem::replace(&mut self.env, before.clone());
                let mut else_stmts = Vec::new();
                for t in else_body {
                    self.stmt(t, &mut else_stmts);
                }
                let after_else = std::mem::replace(&mut self.env, before.clone());
                // Locals both branches leave defined, and that changed, are
                // yielded; except where the two branches (neither failing) give
                // them different element types: inference has made sure such a
                // local is not read before it is assigned again.
                let some_branch_fails = always_fails(&then_stmts) || always_fails(&else_stmts);
                let mut merged: Vec<(usize, ValueId, ValueId)> = Vec::new();
                let mut clashing: Vec<usize> = Vec::new();
                for (l, (t, e)) in after_then.iter().zip(&after_else).enumerate() {
                    if let (Some(t), Some(e)) = (t, e)
                        && (Some(*t) != before[l] || Some(*e) != before[l])
                    {
                        if !some_branch_fails && self.b.ty(*t).elem != self.b.ty(*e).elem {
                            clashing.push(l);
                        } else {
                            merged.push((l, *t, *e));
                        }
                    }
                }
                let mut then_block =
                    Block { stmts: std::mem::take(&mut then_stmts), yields: merged.iter().map(|m| m.1).collect() };
                let mut else_block =
                    Block { stmts: std::mem::take(&mut else_stmts), yields: merged.iter().map(|m| m.2).collect() };
                self.b.align_dead_branch(&mut then_block, &mut else_block, *span);
                let tys: Vec<Ty> = merged
                    .iter()
                    .enumerate()
                    .map(|(k, (l, _, _))| {
                        let (a, b) = (self.b.ty(then_block.yields[k]), self.b.ty(else_block.yields[k]));
                        if a.elem == b.elem {
                            Ty::new(a.elem, a.shape.join(&b.shape))
                        } else {
                            self.local_ty(LocalId(*l as u32))
                        }
                    })
                    .collect();
                let op = Op::If { cond: c, then_block, else_block };
                let defs = self.b.emit(out, op, tys, *span);
                for ((l, _, _), d) in merged.iter().zip(defs) {
                    self.env[*l] = Some(d);
                }
                for l in clashing {
                    self.env[l] = None;
                }
            }
            hir::Stmt::While { .. } | hir::Stmt::DoWhile { .. } => {
                if self.loop_entered(s) {
                    self.lower_loop(s, out, None);
                }
            }
            hir::Stmt::Return { .. } => {
                // Handled by `tail`; a stray return here would be a lowering bug.
            }
        }
    }

    fn assign(&mut self, l: LocalId, v: ValueId, out: &mut Vec<Stmt>, span: Span) {
        let info = &self.src.locals[l.0 as usize];
        if let Some(decl) = &info.declared {
            let declared = Ty::new(decl.elem, Shape::of_spec(&decl.shape));
            let plain = crate::interp::dispatch::spec_is_plain(&decl.shape);
            if !(plain && self.b.ty(v).subset_of(&declared)) {
                self.b.check(
                    out,
                    Check::Conforms(v, declared),
                    codes::TYPE_ASSERTION_FAILED,
                    format!("`{}` is declared {decl} but is assigned {{a}}", info.name),
                    span,
                );
            }
        }
        if self.b.f.values[v.0 as usize].name.is_none() {
            self.b.f.values[v.0 as usize].name = Some(info.name.clone());
        }
        self.env[l.0 as usize] = Some(v);
    }

    /// Lowers a loop. With `ret`, the loop also carries a `done` flag and the
    /// results (for `return` inside the body); returns them after the loop.
    fn lower_loop(
        &mut self,
        s: &hir::Stmt,
        out: &mut Vec<Stmt>,
        ret: Option<(ValueId, Vec<ValueId>)>,
    ) -> (ValueId, Vec<ValueId>) {
        let (cond, body, test_first, span) = match s {
            hir::Stmt::While { cond, body, span, .. } => (cond, body, true, *span),
            hir::Stmt::DoWhile { body, cond, span, .. } => (cond, body, false, *span),
            _ => unreachable_loop(),
        };
        // Carried: locals the body (or condition) assigns that are defined before.
        let mut assigned = HashSet::default();
        collect_assigned(body, &mut assigned);
        // A local inference left untyped is not carried: either the body
        // never runs, or the local's types differ between the loop's entry and
        // its body, and then inference has made sure no one reads it after an
        // iteration (so its value before the loop stays).
        // A `do … while` body runs before the condition is first tested: the
        // locals it defines first are carried too (from a placeholder that is
        // never read), for the condition and the code after the loop.
        let mut carried: Vec<LocalId> = assigned
            .into_iter()
            .filter(|l| (!test_first || self.env[l.0 as usize].is_some()) && self.inferred_ty(*l).is_some())
            .collect();
        carried.sort();
        let mut init: Vec<ValueId> = Vec::with_capacity(carried.len());
        for l in &carried {
            let v = match self.env[l.0 as usize] {
                Some(v) => v,
                None => {
                    let ty = self.local_ty(*l);
                    self.b.placeholder_of(out, &ty, span)
                }
            };
            init.push(v);
        }
        let mut param_tys: Vec<Ty> = carried
            .iter()
            .zip(&init)
            .map(|(l, v)| {
                let a = self.b.ty(*v);
                let b = self.local_ty(*l);
                if a.elem == b.elem { Ty::new(a.elem, a.shape.join(&b.shape)) } else { b }
            })
            .collect();
        if let Some((done, results)) = &ret {
            init.push(*done);
            param_tys.push(Ty::new(Elem::Base(BaseType::Bool), Shape::scalar()));
            for r in results {
                init.push(*r);
                param_tys.push(self.b.ty(*r));
            }
        }
        let params: Vec<ValueId> = param_tys.iter().map(|t| self.b.f.new_value(t.clone(), None)).collect();
        for (l, p) in carried.iter().zip(&params) {
            self.b.f.values[p.0 as usize].name = Some(self.src.locals[l.0 as usize].name.clone());
            self.env[l.0 as usize] = Some(*p);
        }
        let n = carried.len();
        let ret_state = ret.as_ref().map(|_| ReturnState {
            done: params[n],
            results: params[n + 1..].to_vec(),
            carried: carried.iter().copied().zip(param_tys.iter().cloned()).collect(),
        });
        // Condition (with `done`, the loop also stops once it is set).
        let mut cond_stmts = Vec::new();
        let mut c = self.condition(cond, &mut cond_stmts, "loop condition");
        if let Some(r) = &ret_state {
            // `!done && cond`: the condition is not evaluated once `done` is set.
            cond_stmts.clear();
            let bool_ty = Ty::new(Elem::Base(BaseType::Bool), Shape::scalar());
            let not_done =
                self.b.emit1(&mut cond_stmts, Op::prim(Prim::Un(UnOp::Not), vec![r.done]), bool_ty.clone(), span);
            let mut then_stmts = Vec::new();
            let c2 = self.condition(cond, &mut then_stmts, "loop condition");
            let mut else_stmts = Vec::new();
            let f = self.b.constant(&mut else_stmts, Value::Scalar(Scalar::Bool(false)), span);
            let then_block = Block { stmts: then_stmts, yields: vec![c2] };
            let else_block = Block { stmts: else_stmts, yields: vec![f] };
            c = self.b.emit1(&mut cond_stmts, Op::If { cond: not_done, then_block, else_block }, bool_ty, span);
        }
        let saved_env = self.env.clone();
        let mut body_stmts = Vec::new();
        self.loop_depth += 1;
        let body_yields: Vec<ValueId> = match &ret_state {
            None => {
                for t in body {
                    self.stmt(t, &mut body_stmts);
                }
                carried.iter().map(|l| self.env[l.0 as usize].expect("carried")).collect()
            }
            // Every exit of the body's tail yields (carried…, done, results…).
            Some(r) => self.tail_with(body, &mut body_stmts, Mode::Loop, Some(r)),
        };
        self.loop_depth -= 1;
        self.env = saved_env;
        let op = Op::Loop {
            init,
            params: params.clone(),
            cond: Block { stmts: cond_stmts, yields: vec![c] },
            body: Block { stmts: body_stmts, yields: body_yields },
            test_first,
            tiled: false,
        };
        let defs = self.b.emit(out, op, param_tys, span);
        for (l, d) in carried.iter().zip(&defs) {
            self.env[l.0 as usize] = Some(*d);
        }
        match ret {
            Some(_) => (defs[n], defs[n + 1..].to_vec()),
            None => (defs.first().copied().unwrap_or(ValueId(0)), Vec::new()),
        }
    }

    // ------------------------------------------------------------ expressions

    fn expr(&mut self, e: &hir::Expr, out: &mut Vec<Stmt>) -> ValueId {
        let vals = self.expr_multi(e, out);
        match vals.first() {
            Some(v) => *v,
            None => {
                // A void call used as a value (rejected earlier); keep the IR valid.
                self.b.constant(out, Value::Scalar(Scalar::int(0)), e.span)
            }
        }
    }

    fn expr_multi(&mut self, e: &hir::Expr, out: &mut Vec<Stmt>) -> Vec<ValueId> {
        let span = e.span;
        match &e.kind {
            ExprKind::Const(v) => vec![self.b.constant(out, v.clone(), span)],
            ExprKind::Local(l) => vec![match self.env[l.0 as usize] {
                Some(v) => v,
                None => {
                    // Read of a local the resolver proved defined but this path did
                    // not define (dead code); any value of its type will do.
                    let ty = self.local_ty(*l);
                    self.b.placeholder_of(out, &ty, span)
                }
            }],
            ExprKind::Prim { prim, args } => {
                let vals: Vec<ValueId> = args.iter().map(|a| self.expr(a, out)).collect();
                vec![self.prim(prim, vals, out, span)]
            }
            ExprKind::Call { callee, args } => self.call(callee, args, out, span),
            ExprKind::And(a, b) | ExprKind::Or(a, b) => {
                let is_and = matches!(e.kind, ExprKind::And(..));
                let what = if is_and { "operand of `&&`" } else { "operand of `||`" };
                let x = self.condition(a, out, what);
                let bool_ty = Ty::new(Elem::Base(BaseType::Bool), Shape::scalar());
                let mut rhs = Vec::new();
                let y = self.condition(b, &mut rhs, what);
                let mut short = Vec::new();
                let k = self.b.constant(&mut short, Value::Scalar(Scalar::Bool(!is_and)), span);
                let (then_block, else_block) = if is_and {
                    (Block { stmts: rhs, yields: vec![y] }, Block { stmts: short, yields: vec![k] })
                } else {
                    (Block { stmts: short, yields: vec![k] }, Block { stmts: rhs, yields: vec![y] })
                };
                vec![self.b.emit1(out, Op::If { cond: x, then_block, else_block }, bool_ty, span)]
            }
            ExprKind::Cond { cond, then_expr, else_expr } => {
                let c = self.condition(cond, out, "condition of `?:`");
                let mut ts = Vec::new();
                let t = self.expr(then_expr, &mut ts);
                let mut es = Vec::new();
                let el = self.expr(else_expr, &mut es);
                let mut then_block = Block { stmts: ts, yields: vec![t] };
                let mut else_block = Block { stmts: es, yields: vec![el] };
                self.b.align_dead_branch(&mut then_block, &mut else_block, span);
                let (a, b) = (self.b.ty(then_block.yields[0]), self.b.ty(else_block.yields[0]));
                let ty = if a.elem == b.elem { Ty::new(a.elem, a.shape.join(&b.shape)) } else { a };
                let op = Op::If { cond: c, then_block, else_block };
                vec![self.b.emit1(out, op, ty, span)]
            }
            ExprKind::Array(elems) => {
                let vals: Vec<ValueId> = elems.iter().map(|x| self.expr(x, out)).collect();
                let tys: Vec<Ty> = vals.iter().map(|v| self.b.ty(*v)).collect();
                let elem = tys.first().map_or(Elem::Base(BaseType::Int), |t| t.elem);
                let mut cell = tys.first().map_or(Shape::scalar(), |t| t.shape.clone());
                for t in &tys[1.min(tys.len())..] {
                    cell = cell.meet(&t.shape).unwrap_or(cell.clone());
                }
                let ty = Ty::new(elem, Shape::known(&[vals.len()]).concat(&cell));
                vec![self.b.emit1(out, Op::Array(vals), ty, span)]
            }
            ExprKind::Cast { ty, expr } => {
                let v = self.expr(expr, out);
                let have = self.b.ty(v);
                let target = Ty::new(ty.elem, Shape::of_spec(&ty.shape));
                let v = match (ty.elem, have.elem) {
                    (Elem::Base(to), Elem::Base(from)) if to != from => {
                        let t = Ty::new(Elem::Base(to), have.shape.clone());
                        self.b.prim(out, Prim::Conv(to), vec![v], t, span)
                    }
                    _ => v,
                };
                if !self.b.ty(v).shape.subset_of(&target.shape) {
                    self.b.check(
                        out,
                        Check::Conforms(v, target),
                        codes::TYPE_ASSERTION_FAILED,
                        format!("cannot cast {{a}} to {ty}"),
                        span,
                    );
                }
                vec![v]
            }
            ExprKind::With(w) => self.with_loop(w, out),
        }
    }

    /// A primitive with its implicit checks made explicit.
    fn prim(&mut self, prim: &Prim, args: Vec<ValueId>, out: &mut Vec<Stmt>, span: Span) -> ValueId {
        let int_vec = Ty::new(Elem::Base(BaseType::Int), Shape::rank(1));
        match prim {
            Prim::Sel | Prim::Modarray => {
                let (index, array) = if *prim == Prim::Sel { (args[0], args[1]) } else { (args[1], args[0]) };
                let shape = self.b.prim(out, Prim::Shape, vec![array], int_vec, span);
                let what = if *prim == Prim::Sel { "selection" } else { "update" };
                self.b.check(out, Check::InBounds { index, shape }, codes::INDEX_OUT_OF_BOUNDS, what.into(), span);
            }
            Prim::Bin(op) => {
                let (a, b) = (self.b.ty(args[0]), self.b.ty(args[1]));
                let same_static_shape = a.shape.extents().is_some() && a.shape == b.shape;
                if !(a.shape.is_scalar() || b.shape.is_scalar() || same_static_shape) {
                    let message = format!("`{}` on arrays of shapes {{a}} and {{b}}", op.elementwise_symbol());
                    let sa = self.b.prim(out, Prim::Shape, vec![args[0]], int_vec.clone(), span);
                    let sb = self.b.prim(out, Prim::Shape, vec![args[1]], int_vec, span);
                    self.b.check(out, Check::SameShape(sa, sb), codes::SHAPE_MISMATCH, message, span);
                }
            }
            _ => {}
        }
        let fallback = Ty::new(self.args_elem(&args), Shape::AtLeast(0));
        self.b.prim(out, prim.clone(), args, fallback, span)
    }

    fn args_elem(&self, args: &[ValueId]) -> Elem {
        args.last().map_or(Elem::Base(BaseType::Int), |a| self.b.ty(*a).elem)
    }

    fn call(&mut self, callee: &hir::Callee, args: &[hir::Expr], out: &mut Vec<Stmt>, span: Span) -> Vec<ValueId> {
        let target = self.instance().calls.get(&callee.site).copied();
        let first = self.ml.program.function(callee.candidates[0]);
        // Whether the call reaches a built-in: by the instance inference
        // picked, as the overloads of a name may mix the built-in `printf`
        // with user functions (which may come first).
        let intrinsic = match target {
            Some(Target::Instance(i)) => self.ml.program.function(self.ml.typed.instance(i).fun).intrinsic.is_some(),
            _ => first.intrinsic.is_some(),
        };
        if intrinsic {
            // printf: a primitive with the format first.
            let vals: Vec<ValueId> = args.iter().map(|a| self.expr(a, out)).collect();
            if vals.first().is_none_or(|v| self.b.ty(*v).elem != Elem::String) {
                // Reached without a format string, where a user's overload of
                // `printf` did not take the arguments: a run-time error, as
                // the interpreter's; the values the call site expects (the
                // user's overload's results) are never read.
                let message = "`printf` needs a format string first".to_string();
                return self.failed_call(codes::RUNTIME_TYPE_MISMATCH, message, first, out, span);
            }
            let ty = Ty::new(Elem::Base(BaseType::Int), Shape::scalar());
            self.b.emit1(out, Op::prim(Prim::Printf, vals), ty, span);
            return Vec::new();
        }
        match target {
            Some(Target::Instance(i)) => {
                let func = self.ml.inst_func[&i];
                let inst = self.ml.typed.instance(i);
                let f = self.ml.program.function(inst.fun);
                let mut vals = Vec::new();
                for (k, a) in args.iter().enumerate() {
                    let unused = f.param_used.get(k) == Some(&false);
                    let pure = crate::sema::analysis::expr_pure(
                        a,
                        &self.ml.program.functions.iter().map(|f| f.pure).collect::<Vec<_>>(),
                    );
                    if unused && pure {
                        let ty = inst.params[k].clone();
                        vals.push(self.b.placeholder_of(out, &ty, a.span));
                    } else {
                        vals.push(self.expr(a, out));
                    }
                }
                let results = inst.results.clone();
                self.b.emit(out, Op::Call { func, args: vals }, results, span)
            }
            Some(Target::Wrapper(w)) => {
                let vals: Vec<ValueId> = args.iter().map(|a| self.expr(a, out)).collect();
                let sig: Vec<Elem> = vals.iter().map(|v| self.b.ty(*v).elem).collect();
                let func = self.ml.wrapper(w, &sig);
                let results = self.ml.module.functions[func.0 as usize].results.clone();
                self.b.emit(out, Op::Call { func, args: vals }, results, span)
            }
            None => {
                // Inference never reached this call (dead code); reaching it is a bug.
                let message = format!("call of `{}` reached no instance", callee.name);
                self.failed_call(codes::INTERNAL_ERROR, message, first, out, span)
            }
        }
    }

    /// A call that fails with `code` and `message` where it runs, and the
    /// values `callee`'s results would be, never read.
    fn failed_call(
        &mut self,
        code: crate::diagnostics::Code,
        message: String,
        callee: &hir::Function,
        out: &mut Vec<Stmt>,
        span: Span,
    ) -> Vec<ValueId> {
        out.push(Stmt::new(Vec::new(), Op::Fail { code, message, args: Vec::new() }, span));
        let tys: Vec<Ty> = callee.results.iter().map(|t| Ty::new(t.elem, Shape::of_spec(&t.shape))).collect();
        tys.iter().map(|t| self.b.placeholder_of(out, t, span)).collect()
    }

    fn bound(&mut self, b: &Bound, out: &mut Vec<Stmt>) -> Option<ValueId> {
        match b {
            Bound::Dot(_) => None,
            Bound::Expr(e) => Some(self.expr(e, out)),
        }
    }

    fn with_loop(&mut self, w: &hir::With, out: &mut Vec<Stmt>) -> Vec<ValueId> {
        let span = w.span;
        let int_vec = Ty::new(Elem::Base(BaseType::Int), Shape::rank(1));
        let int_ty = Ty::new(Elem::Base(BaseType::Int), Shape::scalar());
        // Operators first.
        let mut ops = Vec::new();
        let mut frame: Option<ValueId> = None;
        let mut gen_shapes = Vec::new();
        for op in &w.ops {
            ops.push(match op {
                hir::WithOp::Genarray { shape, default, .. } => {
                    let s = self.expr(shape, out);
                    frame.get_or_insert(s);
                    gen_shapes.push(s);
                    let d = default.as_ref().map(|d| self.expr(d, out));
                    WithOp::Genarray { shape: s, default: d }
                }
                hir::WithOp::Modarray { array, .. } => {
                    let a = self.expr(array, out);
                    if frame.is_none() {
                        frame = Some(self.b.prim(out, Prim::Shape, vec![a], int_vec.clone(), span));
                    }
                    WithOp::Modarray { array: a }
                }
                hir::WithOp::Fold { fun, neutral, .. } | hir::WithOp::FoldFix { fun, neutral, .. } => {
                    let partial: Vec<ValueId> = fun.partial.iter().map(|p| self.expr(p, out)).collect();
                    let n = self.expr(neutral, out);
                    let fixpoint = match op {
                        hir::WithOp::FoldFix { fixpoint, .. } => Some(self.expr(fixpoint, out)),
                        _ => None,
                    };
                    let f = match &fun.target {
                        FoldTarget::Prim(p) => FoldFn::Prim(p.clone()),
                        FoldTarget::Call(c) => match self.instance().calls.get(&c.site).copied() {
                            Some(Target::Instance(i)) => FoldFn::Call(self.ml.inst_func[&i]),
                            Some(Target::Wrapper(wr)) => {
                                let mut sig: Vec<Elem> = partial.iter().map(|v| self.b.ty(*v).elem).collect();
                                let e = self.b.ty(n).elem;
                                sig.push(e);
                                sig.push(e);
                                FoldFn::Call(self.ml.wrapper(wr, &sig))
                            }
                            None => FoldFn::Prim(Prim::Bin(BinOp::Add)),
                        },
                    };
                    WithOp::Fold { fun: f, partial, neutral: n, fixpoint }
                }
            });
        }
        let cells: Vec<Option<Ty>> = match self.instance().withs.get(&w.id) {
            Some(c) => c.clone(),
            None => vec![None; w.ops.len()],
        };
        let mut parts = Vec::new();
        for (part_number, p) in w.parts.iter().enumerate() {
            // A partition inference found empty never runs; its body is not typed.
            if self.instance().parts_skipped.contains(&(w.id, part_number)) {
                continue;
            }
            let lower = p.lower.as_ref().and_then(|(b, _)| self.bound(b, out));
            let upper = self.bound(&p.upper.1, out);
            let step = p.step.as_ref().map(|e| self.expr(e, out));
            let width = p.width.as_ref().map(|e| self.expr(e, out));
            // The index length: from the pattern, a bound, step/width, or the frame.
            let n_static = p.index_scalars.as_ref().map(|s| s.len());
            let len_source = lower.or(upper).or(step).or(width);
            if frame.is_none() && n_static.is_none() && len_source.is_none() {
                // `(. <= iv <= .)` in a fold: no bound, no result shape to
                // take the index length from (the interpreter's run-time error).
                let no = self.b.constant(out, Value::Scalar(Scalar::Bool(false)), p.span);
                let message = "cannot tell how long this generator's index is".to_string();
                self.b.check(out, Check::Assert(no), codes::BAD_GENERATOR_VALUE, message, p.span);
            }
            // How long vector `v` is (`shape(v)[0]`).
            let vector_len = |this: &mut Self, out: &mut Vec<Stmt>, v: ValueId| -> ValueId {
                let s = this.b.prim(out, Prim::Shape, vec![v], int_vec.clone(), span);
                let z = this.b.constant(out, Value::int_vector(&[0]), span);
                this.b.prim(out, Prim::Sel, vec![z, s], int_ty.clone(), span)
            };
            // The generator's index length, where a pattern or a vector sets
            // it (else it is the frame's).
            let index_len = |this: &mut Self, out: &mut Vec<Stmt>| -> Option<ValueId> {
                match (n_static, len_source) {
                    (Some(n), _) => Some(this.b.constant(out, Value::Scalar(Scalar::int(n as i64)), span)),
                    (None, Some(src)) => Some(vector_len(this, out, src)),
                    (None, None) => None,
                }
            };
            // A genarray's indices are whole indices of its shape; where
            // a length is known only at run time, checked there (the type
            // checker reported static mismatches).
            let static_len = |this: &Self, v: ValueId| this.b.ty(v).shape.extents().and_then(|e| e.first().copied());
            let static_index_len = n_static.or_else(|| len_source.and_then(|src| static_len(self, src)));
            for &g in &gen_shapes {
                if static_index_len.is_some() && static_len(self, g).is_some() {
                    continue;
                }
                let Some(generator_len) = index_len(self, out) else { continue };
                let frame_len = vector_len(self, out, g);
                let bool_ty = Ty::new(Elem::Base(BaseType::Bool), Shape::scalar());
                let same = self.b.prim(out, Prim::Bin(BinOp::Eq), vec![generator_len, frame_len], bool_ty, p.span);
                let message = crate::interp::GENERATOR_LENGTH_MISMATCH.to_string();
                self.b.check(out, Check::Assert(same), codes::BAD_GENERATOR_VALUE, message, p.generator_span);
            }
            let frame_prefix = |this: &mut Self, out: &mut Vec<Stmt>| -> ValueId {
                let f = frame.unwrap_or_else(|| this.b.constant(out, Value::int_vector(&[]), span));
                match index_len(this, out) {
                    Some(k) => this.b.prim(out, Prim::Take, vec![k, f], int_vec.clone(), span),
                    None => f,
                }
            };
            let zeros_like = |this: &mut Self, out: &mut Vec<Stmt>, v: ValueId| -> ValueId {
                let z = this.b.constant(out, Value::Scalar(Scalar::int(0)), span);
                this.b.prim(out, Prim::Bin(BinOp::Mul), vec![z, v], int_vec.clone(), span)
            };
            let add = |this: &mut Self, out: &mut Vec<Stmt>, v: ValueId, k: i64| -> ValueId {
                let c = this.b.constant(out, Value::Scalar(Scalar::int(k)), span);
                this.b.prim(out, Prim::Bin(BinOp::Add), vec![v, c], int_vec.clone(), span)
            };
            // Lower bound (inclusive).
            let lo = match (&p.lower, lower) {
                (Some((_, rel)), Some(l)) => {
                    if *rel == Rel::Lt {
                        add(self, out, l, 1)
                    } else {
                        l
                    }
                }
                (Some((Bound::Dot(_), rel)), None) => {
                    let shape_src = upper.unwrap_or_else(|| frame_prefix(self, out));
                    let z = zeros_like(self, out, shape_src);
                    if *rel == Rel::Lt { add(self, out, z, 1) } else { z }
                }
                _ => {
                    let shape_src = upper.unwrap_or_else(|| frame_prefix(self, out));
                    zeros_like(self, out, shape_src)
                }
            };
            // Upper bound (exclusive).
            let hi = match upper {
                Some(u) => {
                    if p.upper.0 == Rel::Le {
                        add(self, out, u, 1)
                    } else {
                        u
                    }
                }
                None => {
                    let f = frame_prefix(self, out);
                    if p.upper.0 == Rel::Le { f } else { add(self, out, f, -1) }
                }
            };
            // Body.
            let saved = self.env.clone();
            let index = p.index_vector.map(|l| {
                let ty = self.local_ty(l);
                let v = self.b.f.new_value(ty, Some(self.src.locals[l.0 as usize].name.clone()));
                self.env[l.0 as usize] = Some(v);
                v
            });
            let scalars = p.index_scalars.as_ref().map(|ls| {
                ls.iter()
                    .map(|l| {
                        let v = self.b.f.new_value(int_ty.clone(), Some(self.src.locals[l.0 as usize].name.clone()));
                        self.env[l.0 as usize] = Some(v);
                        v
                    })
                    .collect::<Vec<_>>()
            });
            let mut body = Vec::new();
            for s in &p.body {
                self.stmt(s, &mut body);
            }
            let result_spans: Vec<Span> =
                (0..w.ops.len()).map(|k| p.results.get(k).or(p.results.first()).map_or(p.span, |r| r.span)).collect();
            let yields: Vec<ValueId> = if p.results.len() == 1 && w.ops.len() > 1 {
                self.expr_multi(&p.results[0], &mut body)
            } else {
                p.results.iter().map(|r| self.expr(r, &mut body)).collect()
            };
            self.env = saved;
            parts.push(Part {
                lower: lo,
                upper: hi,
                step,
                width,
                index,
                scalars,
                offset: None,
                body: Block { stmts: body, yields },
                span: p.generator_span,
                result_spans,
            });
        }
        // Parts inference never reached (they fail) yield values typed like what
        // the operators expect.
        for part in &mut parts {
            if !part.body.stmts.iter().any(|s| matches!(s.op, Op::Fail { .. })) {
                continue;
            }
            for (k, op) in ops.iter().enumerate() {
                let want = cells.get(k).cloned().flatten().or_else(|| match op {
                    WithOp::Genarray { default: Some(d), .. } => Some(self.b.ty(*d)),
                    WithOp::Fold { neutral, .. } => Some(self.b.ty(*neutral)),
                    WithOp::Modarray { array } => Some(Ty::new(self.b.ty(*array).elem, Shape::AtLeast(0))),
                    _ => w.cell_hint.map(|b| Ty::new(Elem::Base(b), Shape::scalar())),
                });
                if let (Some(t), Some(y)) = (want, part.body.yields.get(k).copied())
                    && self.b.ty(y).elem != t.elem
                {
                    let p = self.b.placeholder_of(&mut part.body.stmts, &t, span);
                    part.body.yields[k] = p;
                }
            }
        }
        // Result types.
        let mut tys = Vec::new();
        for (k, op) in ops.iter().enumerate() {
            let cell = {
                let mut c: Option<Ty> = cells.get(k).cloned().flatten();
                for p in &parts {
                    if let Some(y) = p.body.yields.get(k) {
                        let t = self.b.ty(*y);
                        c = Some(match c {
                            Some(c) if c.elem == t.elem => Ty::new(c.elem, c.shape.join(&t.shape)),
                            Some(c) => c,
                            None => t,
                        });
                    }
                }
                c
            };
            tys.push(match op {
                WithOp::Genarray { shape, default } => {
                    let frame_shape = match self.b.const_of(out, *shape).and_then(|v| v.as_int_vec()) {
                        Some(e) if e.iter().all(|&d| d >= 0) => {
                            Shape::known(&e.iter().map(|&d| d as usize).collect::<Vec<_>>())
                        }
                        _ => match crate::sema::prim_ty::vector_len(&self.b.ty(*shape)) {
                            Some(n) => Shape::rank(n),
                            None => Shape::AtLeast(0),
                        },
                    };
                    let cell = cell.or_else(|| default.map(|d| self.b.ty(d)));
                    let elem =
                        cell.as_ref().map_or(w.cell_hint.map_or(Elem::Base(BaseType::Int), Elem::Base), |c| c.elem);
                    let cell_shape = match (&cell, default) {
                        (Some(c), Some(d)) => c.shape.join(&self.b.ty(*d).shape),
                        (Some(c), None) => c.shape.clone(),
                        (None, _) => Shape::AtLeast(0),
                    };
                    Ty::new(elem, frame_shape.concat(&cell_shape))
                }
                // SaC has no scans or filters; other front ends build them directly.
                WithOp::Scan { neutral, .. } => Ty::new(self.b.ty(*neutral).elem, Shape::AtLeast(0)),
                WithOp::Filter { .. } => {
                    Ty::new(cell.as_ref().map_or(Elem::Base(BaseType::Int), |c| c.elem), Shape::AtLeast(1))
                }
                WithOp::Modarray { array } => self.b.ty(*array),
                WithOp::Fold { neutral, .. } => {
                    let n = self.b.ty(*neutral);
                    match &cell {
                        Some(c) if c.elem == n.elem => Ty::new(n.elem, n.shape.join(&c.shape)),
                        _ => n,
                    }
                }
            });
        }
        let with = With { parts, ops, first_match: w.first_match, cells, reuse: vec![None; w.ops.len()] };
        self.b.emit(out, Op::With(Box::new(with)), tys, span)
    }
}

fn unreachable_loop() -> ! {
    unreachable!("lower_loop is only called on loops")
}

fn stmt_span(s: &hir::Stmt) -> Span {
    match s {
        hir::Stmt::Assign { span, .. }
        | hir::Stmt::If { span, .. }
        | hir::Stmt::While { span, .. }
        | hir::Stmt::DoWhile { span, .. }
        | hir::Stmt::Return { span, .. }
        | hir::Stmt::Eval { span, .. } => *span,
    }
}

fn contains_return(stmts: &[hir::Stmt]) -> bool {
    stmts.iter().any(contains_return_stmt)
}

fn contains_return_stmt(s: &hir::Stmt) -> bool {
    match s {
        hir::Stmt::Return { .. } => true,
        hir::Stmt::If { then_body, else_body, .. } => contains_return(then_body) || contains_return(else_body),
        hir::Stmt::While { body, .. } | hir::Stmt::DoWhile { body, .. } => contains_return(body),
        _ => false,
    }
}

/// Locals assigned by statements (not inside with-loop parts, whose locals are
/// their own).
fn collect_assigned(stmts: &[hir::Stmt], out: &mut HashSet<LocalId>) {
    for s in stmts {
        match s {
            hir::Stmt::Assign { targets, live: true, .. } => out.extend(targets.iter().copied()),
            hir::Stmt::If { then_body, else_body, .. } => {
                collect_assigned(then_body, out);
                collect_assigned(else_body, out);
            }
            hir::Stmt::While { body, .. } | hir::Stmt::DoWhile { body, .. } => collect_assigned(body, out),
            _ => {}
        }
    }
}

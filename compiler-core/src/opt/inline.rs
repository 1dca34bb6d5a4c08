//! # inline: function inlining and dead function removal
//!
//! Replaces a call by a copy of the callee's body when the callee is declared
//! `inline` (the whole library is), is a dispatch wrapper, or is small (at most
//! [`SMALL`] statements), and is not recursive. A dispatch wrapper keeps its
//! calls to exported variants (compiled as functions of their own anyway) and
//! to user instances bigger than [`TINY`]: a wrapper is where generic code
//! reaches a specialised instance at run time, and the instance is optimised
//! best as a function of its own, exactly as when a caller with static shapes
//! reaches it. Functions are visited callees first, so what a caller copies is
//! the callee as this round left it, whatever order the functions were created
//! in. A function that only forwards to another one calls it when the callee
//! stays a function of its own anyway (exported, or called from elsewhere
//! too): `det(double[10,10])` returning `Det(double[10,10])` would otherwise be
//! a second copy of the whole unrolled determinant. Inside a with-loop part
//! that stays a loop (`unroll` will not copy it per index), a call of an array
//! function that stays a function of its own anyway stays a call: copies of
//! `Det(double[9,9])` and every level below it in `Det(double[10,10])`'s loop
//! were a fifth of the bench suite's optimisation and LLVM code for no gain,
//! while the unrolled small levels, where the copies let CSE share minors,
//! still inline (counter `calls_kept_in_loops`). So does such a call that is
//! the whole of a block, its results yielded as they are: the arm of a
//! dispatch inlined into generic code, where a copy would have nothing to
//! fuse or fold with (counter `calls_kept_in_arms`). Afterwards, functions no
//! entry or exported variant reaches any more are removed (and `retire`,
//! the next pass, retires the specialisations only dispatch still calls).
//!
//! ```text
//! fn main() -> (int[3]) {                 fn main() -> (int[3]) {
//!   %0: int[3] = const [1, 2, 3]            %0: int[3] = const [1, 2, 3]
//!   %1: int[3] = call twice__i_3(%0)   ⇒    %2: int = const 2
//!   return %1                               %3: int[3] = prim mul(%0, %2)
//! }                                         return %3
//! fn twice__i_3(%0: int[3]) -> (int[3]) { }
//!   %1: int = const 2
//!   %2: int[3] = prim mul(%0, %1)
//!   return %2
//! }
//! ```
//!
//! Run-time errors of inlined library code stay reported at the user's call
//! (the statements' blame becomes the call site).
//!
//! Limits: recursive functions (and whole recursive cycles) are never inlined; a
//! caller does not grow beyond [`MAX_CALLER`] statements (a remark says so);
//! fold functions stay calls.

use crate::HashMap;

use super::util::{self, Cloner};
use super::{Pass, PassCx, RemarkKind};
use crate::ir::*;
use crate::sema::hir::Prim;

pub const PASS: Pass = Pass {
    name: "inline",
    description: "inline library, `inline`, wrapper and small functions; remove functions nothing calls",
    run,
};

/// Functions with at most this many statements are inlined even when not
/// declared `inline`.
pub const SMALL: usize = 40;
/// User instances with at most this many statements are inlined into dispatch
/// wrappers (a `Det(double[2,2])` base case); bigger ones are called.
pub const TINY: usize = 16;
/// Inlining stops when a caller would grow beyond this many statements.
pub const MAX_CALLER: usize = 20_000;

/// Per function: whether calls of it are inlined.
pub fn inlinable(m: &Module) -> Vec<bool> {
    inlinable_at(m, &sizes(m))
}

/// Every function's size in statements.
fn sizes(m: &Module) -> Vec<usize> {
    m.functions.iter().map(|f| util::size(&f.body)).collect()
}

/// [`inlinable`], with the functions' sizes at hand.
fn inlinable_at(m: &Module, sizes: &[usize]) -> Vec<bool> {
    let recursive = util::recursive_functions(m);
    m.functions
        .iter()
        .enumerate()
        .map(|(i, f)| {
            !recursive[i]
                && !f.noinline
                && !f.cold
                && (f.inline || f.library || f.kind == FunctionKind::Wrapper || sizes[i] <= SMALL)
        })
        .collect()
}

fn run(m: &mut Module, cx: &mut PassCx) {
    // Nothing calls these (e.g. instances for another entry's shape hints
    // when the request exports one entry): not worth optimising first.
    let mut removed = remove_dead_functions(m);
    let sizes = sizes(m);
    let inlinable = inlinable_at(m, &sizes);
    // What a wrapper calls rather than inlines: exported variants (compiled
    // as functions of their own anyway; a second copy would double the code
    // LLVM compiles) and user instances beyond a base case (inlined into the
    // wrapper they would be optimised inside the wrapper's size budget, not as
    // the specialised function the dispatch chose).
    let mut wrapper_calls: Vec<bool> = m
        .functions
        .iter()
        .zip(&sizes)
        .map(|(f, &size)| f.kind == FunctionKind::Instance && !f.inline && !f.library && size > TINY)
        .collect();
    for f in &m.variants {
        if let Some(e) = wrapper_calls.get_mut(f.0 as usize) {
            *e = true;
        }
    }
    // Functions that stay functions of their own: exported variants and user
    // instances called from more than one function. A caller that only
    // forwards to one of them (`det(double[10,10])` returning
    // `Det(double[10,10])`, which Det's wrapper also calls) calls it too: a
    // copy would be optimised and compiled twice for the saving of one call.
    let mut callers = vec![0usize; m.functions.len()];
    for f in &m.functions {
        for g in util::callees(f) {
            if let Some(n) = callers.get_mut(g.0 as usize) {
                *n += 1;
            }
        }
    }
    let shared: Vec<bool> = m
        .functions
        .iter()
        .enumerate()
        .map(|(g, f)| (callers[g] > 1 || m.variants.contains(&FuncId(g as u32))) && !f.inline && !f.library)
        .collect();
    // Functions of their own anyway that a with-loop which stays a loop
    // calls rather than inlines (see `Inliner::in_loop`).
    let kept_in_loops: Vec<bool> = m
        .functions
        .iter()
        .zip(shared.iter().zip(&sizes))
        .map(|(f, (&shared, &size))| shared && size > TINY && array_function(f))
        .collect();
    // Callees first: a caller then inlines the callee's body as this round
    // left it (already with its own callees inlined), whatever the order the
    // functions were created in.
    for i in util::callees_first(m) {
        let mut size = util::size(&m.functions[i].body);
        let mut subst: HashMap<ValueId, ValueId> = HashMap::default();
        let mut inlined = 0u64;
        let mut body = std::mem::take(&mut m.functions[i].body);
        let mut too_big: Vec<(String, Option<crate::span::Span>)> = Vec::new();
        let keep: &[bool] = if m.functions[i].kind == FunctionKind::Wrapper {
            &wrapper_calls
        } else if forwarder(&body) {
            &shared
        } else {
            &[]
        };
        let mut ctx = Inliner {
            module: m,
            caller: i,
            inlinable: &inlinable,
            keep,
            kept_in_loops: &kept_in_loops,
            known: HashMap::default(),
            in_loop: false,
            kept_in_loop: 0,
            kept_in_arm: 0,
            sources: cx.sources,
        };
        ctx.block(&mut body, &mut size, &mut subst, &mut inlined, &mut too_big);
        cx.observe("calls_kept_in_loops", ctx.kept_in_loop);
        cx.observe("calls_kept_in_arms", ctx.kept_in_arm);
        util::substitute(&mut body, &subst);
        m.functions[i].body = body;
        cx.count("calls_inlined", inlined);
        let caller = m.functions[i].name.clone();
        if inlined > 0 {
            cx.changed_function(&caller);
        }
        for (callee, span) in too_big {
            cx.remark(
                RemarkKind::Missed,
                &caller,
                span,
                format!("`{callee}` not inlined: `{caller}` would grow beyond {MAX_CALLER} statements"),
            );
        }
    }
    // Fold functions that are one primitive become that primitive.
    let mut prim_folds = 0;
    let as_prim: Vec<Option<crate::sema::hir::Prim>> = m.functions.iter().map(single_primitive).collect();
    for f in &mut m.functions {
        let before = prim_folds;
        f.body.walk_mut(&mut |s| {
            if let Op::With(w) = &mut s.op {
                for op in &mut w.ops {
                    if let WithOp::Fold { fun, .. } = op
                        && let FoldFn::Call(g) = fun
                        && let Some(Some(p)) = as_prim.get(g.0 as usize)
                    {
                        *fun = FoldFn::Prim(p.clone());
                        prim_folds += 1;
                    }
                }
            }
        });
        if prim_folds > before {
            cx.changed_function(&f.name);
        }
    }
    cx.count("fold_functions_inlined", prim_folds);
    removed += remove_dead_functions(m);
    if removed > 0 {
        cx.removed_functions();
    }
    cx.count("functions_removed", removed as u64);
}

struct Inliner<'a> {
    module: &'a mut Module,
    caller: usize,
    inlinable: &'a [bool],
    /// Callees this caller calls rather than inlines.
    keep: &'a [bool],
    /// Callees called rather than inlined inside with-loop parts that stay loops.
    kept_in_loops: &'a [bool],
    /// Integer values of the caller known so far (constants, extents of
    /// arrays of known shape, elements of them): its with-loops' bounds, read
    /// before later passes fold them (the first round sees `shape(a)[0]`
    /// through library calls, inlined just before).
    known: HashMap<ValueId, Vec<i64>>,
    /// Inside a with-loop part that `unroll` will not unroll (its generator
    /// is not constant or has more than [`super::unroll::MAX_INDICES`]
    /// indices). There a copy of an instance that stays a function of its own
    /// anyway (a dispatch wrapper reaches it, or it is exported) gains
    /// nothing over a call but the caller's size: Kreye's `Det(double[10,10])`
    /// held copies of every level down to the unrolled small ones, a fifth of
    /// the bench suite's LLVM code. Inside unrolled parts the copies are what
    /// lets CSE share the minors.
    in_loop: bool,
    /// Calls left in such loops.
    kept_in_loop: u64,
    /// Calls left as the one statement of a block (see `block`).
    kept_in_arm: u64,
    sources: &'a crate::span::SourceMap,
}

impl Inliner<'_> {
    fn block(
        &mut self,
        b: &mut Block,
        size: &mut usize,
        subst: &mut HashMap<ValueId, ValueId>,
        inlined: &mut u64,
        too_big: &mut Vec<(String, Option<crate::span::Span>)>,
    ) {
        let stmts = std::mem::take(&mut b.stmts);
        // A block that is one call, its results yielded as they are (the arm
        // of an inlined dispatch, `if (shape == [10, 10]) Det(a)`): a copy of
        // a callee that stays a function of its own anyway would have no
        // neighbours to fuse or fold with, only its own second copy to
        // optimise and compile (generic `det` held the whole of
        // `Det(double[10,10])` and `Det(double[9,9])` again).
        let sole_call = matches!(stmts.as_slice(), [s] if matches!(s.op, Op::Call { .. }) && b.yields == s.defs);
        let mut out = Vec::with_capacity(stmts.len());
        for mut s in stmts {
            s.op.map_operands(&mut |v| util::resolve(subst, v));
            self.learn(&s);
            if let Op::With(w) = &mut s.op {
                let around = self.in_loop;
                for p in &mut w.parts {
                    self.in_loop = !self.unrolled(p);
                    self.block(&mut p.body, size, subst, inlined, too_big);
                }
                self.in_loop = around;
            } else {
                s.op.walk_blocks_mut(&mut |inner| self.block(inner, size, subst, inlined, too_big));
            }
            let Op::Call { func, args } = &s.op else {
                out.push(s);
                continue;
            };
            let g = func.0 as usize;
            if g == self.caller
                || !self.inlinable.get(g).copied().unwrap_or(false)
                || self.keep.get(g).copied().unwrap_or(false)
            {
                out.push(s);
                continue;
            }
            if (self.in_loop || sole_call) && self.kept_in_loops.get(g).copied().unwrap_or(false) {
                if self.in_loop {
                    self.kept_in_loop += 1;
                } else {
                    self.kept_in_arm += 1;
                }
                out.push(s);
                continue;
            }
            let callee = self.module.functions[g].clone();
            let callee_size = util::size(&callee.body);
            if *size + callee_size > MAX_CALLER {
                if !too_big.iter().any(|(n, _)| *n == callee.name) {
                    too_big.push((callee.name.clone(), s.blame_span()));
                }
                out.push(s);
                continue;
            }
            *size += callee_size;
            let caller = &mut self.module.functions[self.caller];
            let mut cloner = Cloner { src: Some(&callee.values), map: HashMap::default() };
            // Arguments narrower in the callee (its instance was chosen for
            // their types) keep the callee's parameter types.
            let mut narrowed = Vec::new();
            for (p, a) in callee.params.iter().zip(args) {
                let (want, have) = (callee.ty(*p), caller.ty(*a).clone());
                if want.elem == have.elem && !have.subset_of(want) && want.subset_of(&have) {
                    let n = caller.new_value(want.clone(), callee.values[p.0 as usize].name.clone());
                    narrowed.push(Stmt { defs: vec![n], op: Op::Narrow(*a), span: s.span, blame: s.blame });
                    cloner.map.insert(*p, n);
                } else {
                    cloner.map.insert(*p, *a);
                }
            }
            out.extend(narrowed);
            let mut copy = cloner.block(caller, &callee.body);
            let call_blame = match s.blame {
                Blame::Caller => Blame::Caller,
                _ => s.blame_span().map_or(Blame::Caller, Blame::At),
            };
            reblame(&mut copy, call_blame, self.sources);
            for t in &copy.stmts {
                self.learn(t);
            }
            out.extend(copy.stmts);
            for (d, y) in s.defs.iter().zip(&copy.yields) {
                subst.insert(*d, *y);
            }
            *inlined += 1;
        }
        b.stmts = out;
    }
}

impl Inliner<'_> {
    /// Records what statement `s` tells of integer values (see `known`).
    fn learn(&mut self, s: &Stmt) {
        let caller = &self.module.functions[self.caller];
        let scalar = |v: &[i64]| (v.len() == 1).then(|| v[0]);
        let value = match &s.op {
            Op::Const(c) => c.as_int_vec(),
            Op::Array(elems) => elems
                .iter()
                .map(|e| self.known.get(e).filter(|_| caller.ty(*e).shape.is_scalar()).and_then(|v| scalar(v)))
                .collect(),
            Op::Prim { prim: Prim::Shape, args, .. } => {
                caller.ty(args[0]).shape.extents().map(|e| e.iter().map(|&x| x as i64).collect())
            }
            Op::Prim { prim: Prim::Sel | Prim::IdxSel, args, .. } if caller.ty(s.defs[0]).shape.is_scalar() => {
                match (self.known.get(&args[0]), self.known.get(&args[1])) {
                    (Some(k), Some(v)) => {
                        scalar(k).and_then(|k| usize::try_from(k).ok()).and_then(|k| v.get(k).copied()).map(|x| vec![x])
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        if let (Some(v), [d]) = (value, s.defs.as_slice()) {
            self.known.insert(*d, v);
        }
    }

    /// Whether `unroll` will copy part `p` per index: constant bounds, few indices.
    fn unrolled(&self, p: &Part) -> bool {
        let bound = |v: ValueId| self.known.get(&v).cloned();
        let (Some(lo), Some(hi)) = (bound(p.lower), bound(p.upper)) else { return false };
        let count = lo
            .iter()
            .zip(&hi)
            .try_fold(1usize, |n, (l, h)| n.checked_mul(usize::try_from(h.checked_sub(*l)?.max(0)).ok()?));
        lo.len() == hi.len() && count.is_some_and(|n| n <= super::unroll::MAX_INDICES)
    }
}

/// A function of arrays that computes with with-loops (not an element
/// function a with-loop applies per index, which is best inlined there).
fn array_function(f: &Function) -> bool {
    let mut loops = false;
    f.body.walk(&mut |s| loops |= matches!(s.op, Op::With(_)));
    loops && f.params.iter().any(|p| !f.ty(*p).shape.is_scalar())
}

/// A function body that is one call, its results returned as they are.
fn forwarder(body: &Block) -> bool {
    matches!(body.stmts.as_slice(), [s] if matches!(s.op, Op::Call { .. }) && body.yields == s.defs)
}

/// `return prim p(a, b)` of the two parameters in order: `p`.
fn single_primitive(f: &Function) -> Option<crate::sema::hir::Prim> {
    let [s] = f.body.stmts.as_slice() else { return None };
    let Op::Prim { prim, args, .. } = &s.op else { return None };
    let binary = matches!(prim, crate::sema::hir::Prim::Bin(_));
    (binary && f.params.len() == 2 && *args == f.params && f.body.yields == s.defs).then(|| prim.clone())
}

/// Inlined statements blamed on their caller, or in library code, are blamed
/// at the call they were inlined into.
fn reblame(b: &mut Block, call: Blame, sources: &crate::span::SourceMap) {
    for s in &mut b.stmts {
        let in_library = s.blame_span().is_some_and(|sp| sources.is_library(sp));
        if s.blame == Blame::Caller || in_library {
            s.blame = call;
        }
        s.op.walk_blocks_mut(&mut |inner| reblame(inner, call, sources));
    }
}

/// Removes functions that no entry reaches; returns how many.
pub fn remove_dead_functions(m: &mut Module) -> usize {
    let n = m.functions.len();
    let mut live = vec![false; n];
    let mut stack: Vec<usize> = m.entries.iter().map(|(_, f)| f.0 as usize).collect();
    stack.extend(m.variants.iter().map(|f| f.0 as usize));
    while let Some(f) = stack.pop() {
        if f >= n || live[f] {
            continue;
        }
        live[f] = true;
        stack.extend(util::callees(&m.functions[f]).into_iter().map(|g| g.0 as usize));
    }
    let removed = live.iter().filter(|l| !**l).count();
    if removed == 0 {
        return 0;
    }
    let mut new_id = vec![None; n];
    let mut kept = Vec::with_capacity(n - removed);
    for (i, f) in std::mem::take(&mut m.functions).into_iter().enumerate() {
        if live[i] {
            new_id[i] = Some(FuncId(kept.len() as u32));
            kept.push(f);
        }
    }
    let mut remap = |f: FuncId| new_id[f.0 as usize].expect("live functions only call live functions");
    for f in &mut kept {
        remap_calls(&mut f.body, &mut remap);
    }
    m.functions = kept;
    for (_, f) in &mut m.entries {
        *f = remap(*f);
    }
    for f in &mut m.variants {
        *f = remap(*f);
    }
    removed
}

pub(super) fn remap_calls(b: &mut Block, remap: &mut dyn FnMut(FuncId) -> FuncId) {
    for s in &mut b.stmts {
        match &mut s.op {
            Op::Call { func, .. } => *func = remap(*func),
            Op::With(w) => {
                for op in &mut w.ops {
                    if let WithOp::Fold { fun: FoldFn::Call(g) | FoldFn::Lane { func: g, .. }, .. }
                    | WithOp::Scan { fun: FoldFn::Call(g) | FoldFn::Lane { func: g, .. }, .. } = op
                    {
                        *g = remap(*g);
                    }
                }
            }
            _ => {}
        }
        s.op.walk_blocks_mut(&mut |inner| remap_calls(inner, &mut *remap));
    }
}

//! # dce: dead code elimination
//!
//! Removes computations whose results are never used: statements, operators of
//! with-loops, values `if`s yield and loops carry, and with-loop index bindings
//! nobody reads. Run backwards over each block with the set of values needed
//! later.
//!
//! ```text
//! %1: int[3] = with { … } genarray(%0)      (nothing reads %1: removed)
//! %2, %3 = with { … yield %a, %b } genarray(%0), fold(prim add, %z)
//!                                       ⇒  %3 = with { … yield %b } fold(prim add, %z)
//! ```
//!
//! What stays: statements without results (checks, printing, `if`s that only
//! raise errors), primitives and calls with effects, and `_error_`. A dead
//! computation is dropped with the checks inside it: SaC does not evaluate dead
//! code, so neither do we (see the pipeline documentation).
//!
//! Except for the check of its shape. The front ends lower only what the
//! program evaluates, so a producer that is dead here had its results read —
//! by what optimisation rewrote to read its shape operand instead
//! (`shape(genarray(s, x))` is `s`, and `sum(iota(n))` folds over `[n]`). Such a
//! `genarray` (with-loop operator or primitive) leaves `check extents(s)` in its
//! place, and a `reshape(s, x)` leaves `check reshape(s, shape(x))`, so that the
//! program fails as it would have (R0013, R0005); an array literal whose
//! elements' types do not prove them alike leaves `check same_shape` of
//! their shapes (R0007). Shapes known to be valid
//! (constants, `shape(y)`) need none; `simplify` and `bce` prove most others.
//!
//! ```text
//! %2: int[.] = with { … } genarray(%n1)         check extents(%n1) R0013 "genarray shape …"
//! %3: int = prim sel([0], %n1)            ⇒     %3: int = prim sel([0], %n1)
//! ```

use crate::HashSet;

use super::util;
use super::{Pass, PassCx};
use crate::ir::*;
use crate::sema::hir::{Elem, Prim};
use crate::sema::ty::{Shape, Ty};

pub const PASS: Pass =
    Pass { name: "dce", description: "dead code elimination (statements, with-loop operators, carried values)", run };

fn run(m: &mut Module, cx: &mut PassCx) {
    // What a call may do depends on its callee: every function, every round.
    let effectful = util::effectful_functions(m);
    cx.every_function(m, |f, cx| {
        let valid_shapes = valid_shapes(f);
        let mut body = std::mem::take(&mut f.body);
        let (removed, checks, new_values) = {
            let mut d = Dce::new(&effectful, f, &valid_shapes);
            d.block(&mut body);
            (d.removed, d.checks_left, d.new_values)
        };
        for ty in new_values {
            f.new_value(ty, None);
        }
        f.body = body;
        cx.count("statements_removed", removed);
        cx.count("shape_checks_left", checks);
    });
}

/// Shape vectors that hold no negative extent by how they are made: constants
/// and `shape(x)`.
fn valid_shapes(f: &Function) -> HashSet<ValueId> {
    fn walk(b: &Block, out: &mut HashSet<ValueId>) {
        for s in &b.stmts {
            let valid = match &s.op {
                Op::Const(v) => util::int_vec(v).is_some_and(|e| e.iter().all(|&x| x >= 0)),
                Op::Prim { prim: Prim::Shape, .. } => true,
                _ => false,
            };
            if valid {
                out.extend(s.defs.iter().copied());
            }
            s.op.walk_blocks(&mut |inner| walk(inner, out));
        }
    }
    let mut out = HashSet::default();
    walk(&f.body, &mut out);
    out
}

/// Keeps the entries whose flag in `live` is set.
fn keep_live<T>(v: &mut Vec<T>, live: &[bool]) {
    let mut k = 0;
    v.retain(|_| {
        k += 1;
        live.get(k - 1).copied().unwrap_or(true)
    });
}

struct Dce<'a> {
    effectful: &'a [bool],
    /// The function (its body taken out): the types of its values.
    f: &'a Function,
    valid_shapes: &'a HashSet<ValueId>,
    removed: u64,
    /// Shape checks left in place of dropped producers.
    checks_left: u64,
    /// The types of the values this walk defines (`shape(x)` for a reshape's
    /// check), numbered on from the function's.
    new_values: Vec<Ty>,
    /// Values needed by what runs later.
    live: HashSet<ValueId>,
}

impl<'a> Dce<'a> {
    fn new(effectful: &'a [bool], f: &'a Function, valid_shapes: &'a HashSet<ValueId>) -> Dce<'a> {
        Dce { effectful, f, valid_shapes, removed: 0, checks_left: 0, new_values: Vec::new(), live: HashSet::default() }
    }

    fn ty(&self, v: ValueId) -> &Ty {
        match (v.0 as usize).checked_sub(self.f.values.len()) {
            Some(k) => &self.new_values[k],
            None => self.f.ty(v),
        }
    }

    /// The checks of a producer's shape (see the module documentation) left
    /// where operator `k` of statement `s` (or its only result) is dropped, in
    /// program order.
    fn shape_checks(&mut self, s: &Stmt, k: usize) -> Vec<Stmt> {
        // Where the producer's errors pointed.
        let here = |op: Op, defs: Vec<ValueId>| Stmt { defs, op, span: s.span, blame: s.blame };
        // The message is the interpreter's for either form.
        let genarray = |shape: ValueId| {
            here(
                Op::Check(CheckOp {
                    check: Check::Extents(shape),
                    code: crate::diagnostics::INVALID_ARGUMENT,
                    message: "genarray shape has a negative extent {a}".to_string(),
                }),
                vec![],
            )
        };
        match &s.op {
            Op::With(w) => match w.ops.get(k) {
                Some(WithOp::Genarray { shape, .. }) if !self.valid_shapes.contains(shape) => {
                    vec![genarray(*shape)]
                }
                _ => vec![],
            },
            Op::Prim { prim: Prim::Genarray, args, .. } if !self.valid_shapes.contains(&args[0]) => {
                vec![genarray(args[0])]
            }
            Op::Prim { prim: Prim::Reshape, args, .. } => {
                let rank = self.ty(args[1]).shape.rank_if_known();
                let from_ty = Ty::new(
                    Elem::Base(crate::syntax::ast::BaseType::Int),
                    rank.map_or(Shape::rank(1), |r| Shape::known(&[r])),
                );
                let from = ValueId((self.f.values.len() + self.new_values.len()) as u32);
                self.new_values.push(from_ty);
                vec![
                    here(Op::prim(Prim::Shape, vec![args[1]]), vec![from]),
                    here(
                        Op::Check(CheckOp {
                            check: Check::Reshape { shape: args[0], from },
                            code: crate::diagnostics::BAD_RESHAPE,
                            message: "cannot reshape".to_string(),
                        }),
                        vec![],
                    ),
                ]
            }
            // An array literal's elements must agree in shape (R0007), which
            // static types prove for most.
            Op::Array(args) if args.len() > 1 => {
                let first = self.ty(args[0]).clone();
                let mut checks = Vec::new();
                let shape_of = |d: &mut Self, v: ValueId| {
                    let rank = d.ty(v).shape.rank_if_known();
                    let ty = Ty::new(
                        Elem::Base(crate::syntax::ast::BaseType::Int),
                        rank.map_or(Shape::rank(1), |r| Shape::known(&[r])),
                    );
                    let id = ValueId((d.f.values.len() + d.new_values.len()) as u32);
                    d.new_values.push(ty);
                    (here(Op::prim(Prim::Shape, vec![v]), vec![id]), id)
                };
                let mut first_shape = None;
                for (k, a) in args.iter().enumerate().skip(1) {
                    let t = self.ty(*a);
                    if t.shape.is_scalar() && first.shape.is_scalar() {
                        continue;
                    }
                    if let (Some(x), Some(y)) = (first.shape.extents(), t.shape.extents())
                        && x == y
                    {
                        continue;
                    }
                    let s0 = match first_shape {
                        Some(s) => s,
                        None => {
                            let (stmt, s) = shape_of(self, args[0]);
                            checks.push(stmt);
                            first_shape = Some(s);
                            s
                        }
                    };
                    let (stmt, sk) = shape_of(self, *a);
                    checks.push(stmt);
                    checks.push(here(
                        Op::Check(CheckOp {
                            check: Check::SameShape(s0, sk),
                            code: crate::diagnostics::IRREGULAR_ARRAY,
                            message: format!(
                                "array elements differ in shape: element 0 is {{a}}, element {k} is {{b}}"
                            ),
                        }),
                        vec![],
                    ));
                }
                checks
            }
            _ => vec![],
        }
    }

    /// Keeps `checks` (in program order) before what `kept` (reversed) holds.
    fn keep_checks(&mut self, checks: Vec<Stmt>, kept: &mut Vec<Stmt>) {
        for mut c in checks.into_iter().rev() {
            if matches!(c.op, Op::Check(_)) {
                self.checks_left += 1;
            }
            self.mark_uses(&mut c);
            kept.push(c);
        }
    }

    /// Whether the statement must run even if nothing reads its results.
    fn needed_anyway(&self, s: &Stmt) -> bool {
        if s.defs.is_empty() {
            // An `if` whose branches are left empty (their checks proven or
            // moved out) does nothing; any other statement without results
            // is there for what it does (a check, a print).
            if let Op::If { then_block, else_block, .. } = &s.op {
                return !(then_block.stmts.is_empty() && else_block.stmts.is_empty());
            }
            return true;
        }
        self.has_effect(&s.op)
    }

    fn has_effect(&self, op: &Op) -> bool {
        let mut effect = match op {
            Op::Prim { prim, .. } => prim.has_effect() || *prim == Prim::Error,
            Op::Call { func, .. } => self.effectful.get(func.0 as usize).copied().unwrap_or(true),
            Op::Pattern { .. } => true,
            Op::With(w) => w.ops.iter().any(|o| match o {
                WithOp::Fold { fun, .. } | WithOp::Scan { fun, .. } => {
                    fun.callee().is_some_and(|g| self.effectful.get(g.0 as usize).copied().unwrap_or(true))
                }
                _ => false,
            }),
            _ => false,
        };
        op.walk_blocks(&mut |b| {
            if !effect {
                effect = b.stmts.iter().any(|s| self.has_effect(&s.op));
            }
        });
        effect
    }

    fn block(&mut self, b: &mut Block) {
        self.live.extend(b.yields.iter().copied());
        let stmts = std::mem::take(&mut b.stmts);
        let mut kept: Vec<Stmt> = Vec::with_capacity(stmts.len());
        for mut s in stmts.into_iter().rev() {
            let any_live = s.defs.iter().any(|d| self.live.contains(d));
            if !any_live && !self.needed_anyway(&s) {
                self.removed += 1;
                let checks: Vec<Stmt> = (0..s.defs.len().max(1)).flat_map(|k| self.shape_checks(&s, k)).collect();
                self.keep_checks(checks, &mut kept);
                continue;
            }
            let checks = if !self.has_effect(&s.op) { self.prune(&mut s) } else { vec![] };
            self.mark_uses(&mut s);
            kept.push(s);
            self.keep_checks(checks, &mut kept);
        }
        kept.reverse();
        b.stmts = kept;
    }

    /// Drops the results of a multi-result statement that nobody reads;
    /// returns the shape checks of dropped `genarray` operators.
    fn prune(&mut self, s: &mut Stmt) -> Vec<Stmt> {
        let mut live: Vec<bool> = s.defs.iter().map(|d| self.live.contains(d)).collect();
        // The lanes of a fold over tuples stay or go together.
        if let Op::With(w) = &s.op {
            for k in 0..live.len().min(w.ops.len()) {
                let group = w.group(k);
                if group.len() > 1 && live[group.clone()].iter().any(|l| *l) {
                    live[group].iter_mut().for_each(|l| *l = true);
                }
            }
        }
        if live.iter().all(|l| *l) {
            return vec![];
        }
        let mut checks = Vec::new();
        if let Op::With(w) = &s.op
            && live.iter().any(|l| *l)
        {
            for k in (0..w.ops.len().min(live.len())).filter(|&k| !live[k]) {
                checks.extend(self.shape_checks(s, k));
            }
        }
        match &mut s.op {
            Op::If { then_block, else_block, .. } => {
                let keep =
                    |v: &Vec<ValueId>| v.iter().zip(&live).filter(|(_, l)| **l).map(|(x, _)| *x).collect::<Vec<_>>();
                then_block.yields = keep(&then_block.yields);
                else_block.yields = keep(&else_block.yields);
                s.defs = keep(&s.defs);
                self.removed += 1;
            }
            Op::With(w) if live.iter().any(|l| *l) => {
                let yield_live: Vec<bool> =
                    w.ops.iter().zip(&live).flat_map(|(o, l)| std::iter::repeat_n(*l, o.arity())).collect();
                let pick = |k: usize| live[k];
                let mut k = 0;
                w.ops.retain(|_| {
                    k += 1;
                    pick(k - 1)
                });
                keep_live(&mut w.cells, &live);
                keep_live(&mut w.reuse, &live);
                for p in &mut w.parts {
                    keep_live(&mut p.body.yields, &yield_live);
                    if p.result_spans.len() == live.len() {
                        keep_live(&mut p.result_spans, &live);
                    }
                }
                keep_live(&mut s.defs, &live);
                self.removed += 1;
            }
            _ => {}
        }
        checks
    }

    /// Marks what a kept statement reads as live, cleaning its nested blocks.
    fn mark_uses(&mut self, s: &mut Stmt) {
        match &mut s.op {
            Op::Loop { init, params, cond, body, .. } => {
                // Which carried values matter: read after the loop, or needed to
                // compute the condition or another value that matters.
                let mut live: Vec<bool> = s.defs.iter().map(|d| self.live.contains(d)).collect();
                if self.has_effect_block(cond) || self.has_effect_block(body) {
                    live.iter_mut().for_each(|l| *l = true);
                }
                loop {
                    let mut probe = Dce::new(self.effectful, self.f, self.valid_shapes);
                    let mut c = cond.clone();
                    probe.block(&mut c);
                    let mut bd = body.clone();
                    bd.yields = bd.yields.iter().zip(&live).filter(|(_, l)| **l).map(|(y, _)| *y).collect();
                    probe.block(&mut bd);
                    let mut grew = false;
                    for (k, p) in params.iter().enumerate() {
                        if !live[k] && probe.live.contains(p) {
                            live[k] = true;
                            grew = true;
                        }
                    }
                    if !grew {
                        break;
                    }
                }
                if live.iter().any(|l| !*l) {
                    let keep = |v: &Vec<ValueId>| {
                        v.iter().zip(&live).filter(|(_, l)| **l).map(|(x, _)| *x).collect::<Vec<_>>()
                    };
                    *init = keep(init);
                    *params = keep(params);
                    body.yields = keep(&body.yields);
                    s.defs = keep(&s.defs);
                    self.removed += 1;
                }
                self.block(cond);
                self.block(body);
                self.live.extend(init.iter().copied());
            }
            Op::With(w) => {
                for p in &mut w.parts {
                    self.block(&mut p.body);
                    // Index bindings nobody reads are not bound.
                    if p.index.is_some_and(|i| !self.live.contains(&i)) {
                        p.index = None;
                        self.removed += 1;
                    }
                    if p.scalars.as_ref().is_some_and(|ss| ss.iter().all(|x| !self.live.contains(x))) {
                        p.scalars = None;
                        self.removed += 1;
                    }
                    if p.offset.is_some_and(|o| !self.live.contains(&o)) {
                        p.offset = None;
                        self.removed += 1;
                    }
                }
                self.live.extend(s.op.operands());
            }
            Op::If { cond, then_block, else_block } => {
                self.live.insert(*cond);
                self.block(then_block);
                self.block(else_block);
            }
            other => self.live.extend(other.operands()),
        }
    }

    fn has_effect_block(&self, b: &Block) -> bool {
        b.stmts.iter().any(|s| self.has_effect(&s.op))
    }
}

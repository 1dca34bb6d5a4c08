//! # simplify: constant folding and propagation, shape algebra, copy propagation
//!
//! One walk over each function that
//!
//! * folds primitives on constants with the interpreter's own semantics
//!   (results up to [`MAX_FOLDED_ELEMENTS`] elements), and array literals of
//!   constants;
//! * answers `dim`, `shape` and `size` from static types, and — for generic code —
//!   from *symbolic array attributes* (seed 000): the shape of a with-loop result is
//!   its `genarray` shape operand, element-wise operations, `modarray` and
//!   conversions keep their argument's shape, so `shape(x)` becomes the value
//!   that holds it and equal shapes become the same value;
//! * removes checks it proves (equal shape values, constant indices inside static
//!   shapes, types that already conform, patterns that static shapes satisfy);
//! * resolves `if`s on constant conditions, forwards values that both branches
//!   yield, drops loop-carried values a loop never changes, and computes
//!   `a || b` / `a && b` without a branch when `b` is cheap and cannot fail;
//! * simplifies selections from array literals and fills, identities (`x + 0`,
//!   `x * 1` on integers, `!!b`, conversion to the same type), and trivial
//!   with-loops (no parts, empty parts, a part that copies its whole argument);
//! * refines value types from what it learns (a primitive's result type from its
//!   arguments' refined types; `a[iv]` with `iv` over `shape(a)` is an element
//!   even where `a`'s rank is unknown); `reshape` to an array's own shape is the
//!   array;
//! * decides `int` comparisons, `max`, `min`, `abs` and `mod` from the ranges of
//!   their operands ([`index::Known`]): extents are never negative, the
//!   conditions of the branches and `while` loops around a statement and the
//!   asserts before it bound values (`max(m, 1)` is `m` where `m >= 3`), and so
//!   do a with-loop part's constant bounds its index scalars (`j < 0` is false
//!   in a part from 0).
//!
//! ```text
//! %1: int[.] = prim shape(%0)                 %4: int[*] = with { … } genarray(%1)
//! %4: int[*] = with { … } genarray(%1)    ⇒   %5: int[.] = … uses %1 …
//! %5: int[.] = prim shape(%4)                 check same_shape(%1, %1)  (removed)
//! check same_shape(%1, %5)
//! ```
//!
//! Limits: the shape knowledge is intra-procedural and not carried around loops;
//! floating-point identities are not applied (`x + 0.0` is not `x` for `-0.0`).

use crate::HashMap;

use super::index::{self, Order};
use super::util;
use super::{Pass, PassCx};
use crate::interp::ops::{BinOp, UnOp};
use crate::interp::value::{Scalar, Value};
use crate::ir::*;
use crate::sema::hir::{Elem, Prim};
use crate::sema::prim_ty::prim_type;
use crate::sema::ty::{Shape, Ty};
use crate::span::Span;

pub const PASS: Pass = Pass {
    name: "simplify",
    description: "constant folding and propagation, shape algebra (symbolic array attributes), copy propagation, proven checks removed",
    run,
};

/// Constants are folded only up to this many elements (larger ones are cheaper
/// to compute than to store).
pub const MAX_FOLDED_ELEMENTS: usize = 1024;

fn run(m: &mut Module, cx: &mut PassCx) {
    cx.each_function(m, |f, cx| {
        let mut s = Simplify {
            consts: HashMap::default(),
            subst: HashMap::default(),
            defs: HashMap::default(),
            shape_src: HashMap::default(),
            unchecked_sels: Default::default(),
            depth: 0,
            facts: index::Facts::default(),
            counts: Counts::default(),
        };
        util::with_body(f, |f, body| {
            s.block_stmts(f, body);
            util::substitute(body, &s.subst);
        });
        let c = s.counts;
        cx.count("constants_folded", c.folded);
        cx.count("checks_removed", c.checks);
        cx.count("branches_resolved", c.branches);
        cx.count("copies_propagated", c.copies);
        cx.count("shapes_resolved", c.shapes);
        cx.count("types_refined", c.refined);
        cx.count("with_loops_simplified", c.withs);
        cx.count("short_circuits_flattened", c.flattened);
        cx.count("reshapes_removed", c.reshapes);
        cx.count("element_selections_found", c.elements);
        cx.count("decided_by_ranges", c.ranges);
        cx.count("loop_shapes_kept", c.loop_shapes);
    });
}

#[derive(Default, Clone, Copy)]
struct Counts {
    folded: u64,
    checks: u64,
    branches: u64,
    copies: u64,
    shapes: u64,
    refined: u64,
    withs: u64,
    /// `a || b` / `a && b` computed without a branch.
    flattened: u64,
    /// `reshape` to the shape the array has.
    reshapes: u64,
    /// Selections of unknown rank found to select an element.
    elements: u64,
    /// Comparisons, `max`/`min`, `abs` and `mod` decided by value ranges.
    ranges: u64,
    /// Loop-carried arrays whose shape, asked for in the loop, is the
    /// initial value's (counted while a `shape(p)` is there to replace).
    loop_shapes: u64,
}

/// What a value was defined as (what the rules look at).
#[derive(Clone, Debug)]
enum Def {
    Prim(Prim, Vec<ValueId>),
    Array(Vec<ValueId>),
}

/// Where a value's shape vector can be found.
#[derive(Clone, Debug, PartialEq)]
enum ShapeSrc {
    /// In this value (an int vector).
    Value(ValueId),
    /// The same as this other array's (whose shape is not held in a value).
    SameAs(ValueId),
    /// Concatenated tails of int vectors: `drop(k1, v1) ++ drop(k2, v2) ++ …`.
    /// The shape of a row (`sel([i], a)`: `drop(1, shape(a))`) and of an array of
    /// arrays (a with-loop or fill whose cells have an invariant shape).
    Pieces(std::rc::Rc<[(usize, ValueId)]>),
}

struct Simplify {
    consts: HashMap<ValueId, Value>,
    subst: HashMap<ValueId, ValueId>,
    defs: HashMap<ValueId, Def>,
    shape_src: HashMap<ValueId, ShapeSrc>,
    /// Selections proven in bounds (`sel … unchecked`): a selection from one
    /// of them may be merged into it without losing its error.
    unchecked_sels: crate::HashSet<ValueId>,
    /// How deep in nested blocks the walk is (0: the function body).
    depth: usize,
    /// What the conditions of enclosing branches and loops, and the asserts
    /// passed so far, establish here.
    facts: index::Facts,
    counts: Counts,
}

/// One extent of a shape, as [`Simplify::extents_of`] reads it.
#[derive(PartialEq)]
enum Extent {
    Const(i64),
    /// Component `k` of an int vector value (`sel([k], v)`, `v` built otherwise).
    Component(ValueId, usize),
    /// A scalar value.
    Value(ValueId),
}

/// `s` (a primitive) applied to other arguments.
fn with_args(s: &Stmt, args: Vec<ValueId>) -> Stmt {
    let mut t = s.clone();
    if let Op::Prim { args: a, .. } = &mut t.op {
        *a = args;
    }
    t
}

/// Statements replacing `s`, its run-time errors blamed where its were.
fn blamed(s: &Stmt, mut out: Vec<Stmt>) -> Vec<Stmt> {
    for o in &mut out {
        o.blame = s.blame;
    }
    out
}

fn pieces(ps: impl IntoIterator<Item = (usize, ValueId)>) -> std::rc::Rc<[(usize, ValueId)]> {
    ps.into_iter().collect()
}

/// What to do with a statement.
enum Action {
    Keep(Stmt),
    /// Drop it; its definitions were forwarded to other values.
    Forward,
    /// Drop it without replacement (a check proven to hold).
    Drop,
    /// Replace it by these statements (which define, or forward, its values).
    Splice(Vec<Stmt>),
}

impl super::index::Defs for Simplify {
    fn def(&self, v: ValueId) -> Option<super::index::Def> {
        if let Some(c) = self.consts.get(&v) {
            return Some(super::index::Def::Const(c.clone()));
        }
        Some(match self.defs.get(&v)? {
            Def::Prim(p, a) => super::index::Def::Prim(p.clone(), a.clone()),
            Def::Array(a) => super::index::Def::Array(a.clone()),
        })
    }
}

impl Simplify {
    fn resolve(&self, mut v: ValueId) -> ValueId {
        while let Some(n) = self.subst.get(&v) {
            v = *n;
        }
        v
    }

    fn konst(&self, v: ValueId) -> Option<&Value> {
        self.consts.get(&v)
    }

    fn block_in(&mut self, f: &mut Function, b: &mut Block) {
        let facts = self.facts.clone();
        self.depth += 1;
        self.block_stmts(f, b);
        self.depth -= 1;
        self.facts = facts;
    }

    /// A nested block where `cond == holds`.
    fn block_where(&mut self, f: &mut Function, b: &mut Block, cond: ValueId, holds: bool) {
        let facts = self.facts.clone();
        self.assume(f, cond, holds);
        self.block_in(f, b);
        self.facts = facts;
    }

    /// Records the constant bounds of part `p`'s index scalars for its body:
    /// `lo <= s` and `s <= hi - 1` (`j < 0` is false in a part from 0, as in
    /// a determinant's minors: `where(iv < pos, iv, iv + 1)` with `pos`'s
    /// column 0). Bounds that are not constant would be relations between
    /// two values, of which [`index::Facts`] keeps few, and the branch
    /// conditions inside the body need the room more.
    fn assume_part_bounds(&mut self, p: &Part) {
        let Some(scalars) = &p.scalars else { return };
        let constant = |v: ValueId| self.konst(v).and_then(util::int_vec).filter(|x| x.len() == scalars.len());
        let (lo, hi) = (constant(p.lower), constant(p.upper));
        for (d, &s) in scalars.iter().enumerate() {
            let x = index::Affine::atom(index::Atom { value: s, component: None });
            if let Some(lo) = &lo {
                self.facts.add(&x.plus(-lo[d]));
            }
            if let Some(hi) = &hi {
                self.facts.add(&x.scale(-1).plus(hi[d] - 1));
            }
        }
    }

    /// Records what `cond == holds` establishes for what follows.
    fn assume(&mut self, f: &Function, cond: ValueId, holds: bool) {
        let mut facts = self.facts.clone();
        {
            let reader = index::Reader::new(f, self);
            let known = index::Known { reader: &reader, facts: &self.facts };
            facts.assume(&reader, &known, cond, holds);
        }
        self.facts = facts;
    }

    fn block_stmts(&mut self, f: &mut Function, b: &mut Block) {
        let stmts = std::mem::take(&mut b.stmts);
        let mut out = Vec::with_capacity(stmts.len());
        for s in stmts {
            self.stmt(f, s, &mut out);
        }
        b.stmts = out;
        for y in &mut b.yields {
            *y = self.resolve(*y);
        }
    }

    fn forward(&mut self, f: &mut Function, defs: &[ValueId], to: &[ValueId]) {
        for (d, t) in defs.iter().zip(to) {
            let t = self.resolve(*t);
            if *d == t {
                continue;
            }
            // The replacement is the same value: it has both types.
            let (dt, tt) = (f.ty(*d).clone(), f.ty(t).clone());
            if dt.elem == tt.elem
                && let Some(m) = tt.shape.meet(&dt.shape)
                && m != tt.shape
            {
                f.values[t.0 as usize].ty.shape = m;
            }
            self.subst.insert(*d, t);
            if let Some(c) = self.consts.get(&t).cloned() {
                self.consts.insert(*d, c);
            }
        }
    }

    fn stmt(&mut self, f: &mut Function, mut s: Stmt, out: &mut Vec<Stmt>) {
        s.op.map_operands(&mut |v| self.resolve(v));
        // Nested blocks first (an `if` on a constant is resolved after its branches).
        match &mut s.op {
            Op::If { then_block, else_block, cond } => {
                let c = self.konst(*cond).and_then(|c| c.as_scalar());
                match c {
                    Some(Scalar::Bool(true)) => self.block_in(f, then_block),
                    Some(Scalar::Bool(false)) => self.block_in(f, else_block),
                    _ => {
                        let c = *cond;
                        self.block_where(f, then_block, c, true);
                        self.block_where(f, else_block, c, false);
                    }
                }
            }
            Op::Loop { .. } => {
                self.refine_loop(f, &s);
                self.loop_shapes(f, &s);
                if let Op::Loop { cond, body, test_first, .. } = &mut s.op {
                    self.block_in(f, cond);
                    // A `while` body runs where its condition held.
                    match (*test_first, cond.yields.first()) {
                        (true, Some(&c)) => self.block_where(f, body, c, true),
                        _ => self.block_in(f, body),
                    }
                }
            }
            Op::With(w) => {
                // A part's index vector has its bounds' length.
                for p in &w.parts {
                    if let Some(iv) = p.index {
                        let src = self.shape_src.get(&p.lower).cloned().unwrap_or(ShapeSrc::SameAs(p.lower));
                        self.shape_src.insert(iv, src);
                    }
                }
                // A part's body runs where its index scalars lie within its
                // bounds.
                for p in &mut w.parts {
                    let facts = self.facts.clone();
                    self.assume_part_bounds(p);
                    self.block_in(f, &mut p.body);
                    self.facts = facts;
                }
            }
            other => other.walk_blocks_mut(&mut |b| self.block_in(f, b)),
        }
        match self.rewrite(f, s) {
            Action::Keep(s) => {
                self.record(f, &s);
                // What follows an assert runs where it held.
                if let Op::Check(CheckOp { check: Check::Assert(c), .. }) = &s.op {
                    self.assume(f, *c, true);
                }
                out.push(s);
            }
            // The definitions were forwarded (`forward`) before.
            Action::Forward | Action::Drop => {}
            Action::Splice(stmts) => out.extend(stmts),
        }
    }

    /// Remembers constants, definitions and shapes, and refines types.
    fn record(&mut self, f: &mut Function, s: &Stmt) {
        match &s.op {
            Op::Const(c) => {
                self.consts.insert(s.defs[0], c.clone());
            }
            Op::Prim { prim, args, checked, .. } => {
                self.defs.insert(s.defs[0], Def::Prim(prim.clone(), args.clone()));
                if *prim == Prim::Sel && !checked {
                    self.unchecked_sels.insert(s.defs[0]);
                }
                self.refine_prim(f, prim, args, s.defs[0]);
                if *prim == Prim::Sel && !f.ty(s.defs[0]).shape.is_scalar() && self.full_selection(args[0], args[1]) {
                    self.refine(f, s.defs[0], &Shape::Fixed(Vec::new()));
                    self.counts.elements += 1;
                }
                let a0 = args.first().copied();
                let like = |a: ValueId| Some(self.shape_src.get(&a).cloned().unwrap_or(ShapeSrc::SameAs(a)));
                let src = match prim {
                    Prim::Modarray | Prim::IdxModarray | Prim::Un(_) | Prim::Conv(_) => a0.and_then(like),
                    Prim::Math(_) if args.len() == 1 => a0.and_then(like),
                    Prim::Bin(_) | Prim::Math(_) => {
                        let (x, y) = (args[0], args[1]);
                        // With scalar extension the result has the array's shape;
                        // two arrays have equal shapes (or the operation failed).
                        // An operand of unknown rank may be a scalar at run time
                        // (`int[*]`): only one of rank 1 or more gives its shape.
                        let array = |v: ValueId| f.ty(v).shape.min_rank() >= 1;
                        match (f.ty(x).shape.is_scalar(), f.ty(y).shape.is_scalar()) {
                            (true, _) => like(y),
                            (false, true) => like(x),
                            (false, false) => {
                                let src = |v: ValueId| array(v).then(|| like(v)).flatten();
                                match (src(x), src(y)) {
                                    (Some(a @ ShapeSrc::Value(_)), _) | (_, Some(a @ ShapeSrc::Value(_))) => Some(a),
                                    (Some(a), _) | (None, Some(a)) => Some(a),
                                    (None, None) => None,
                                }
                            }
                        }
                    }
                    Prim::Reshape => Some(ShapeSrc::Value(args[0])),
                    Prim::Genarray if f.ty(args[1]).shape.is_scalar() => Some(ShapeSrc::Value(args[0])),
                    Prim::Genarray => self
                        .pieces(args[1])
                        .map(|cell| ShapeSrc::Pieces(pieces([(0, args[0])].into_iter().chain(cell.iter().copied())))),
                    Prim::Sel => self.row_pieces(f, args[0], args[1]),
                    _ => None,
                };
                if let Some(src) = src {
                    self.shape_src.insert(s.defs[0], src);
                }
                // The first `shape(x)` of the function body holds `x`'s shape from
                // then on (a parameter's, say); inside nested blocks it would be out
                // of scope after them.
                if *prim == Prim::Shape && self.depth == 0 && !self.shape_src.contains_key(&args[0]) {
                    self.shape_src.insert(args[0], ShapeSrc::Value(s.defs[0]));
                }
            }
            Op::Array(args) => {
                self.defs.insert(s.defs[0], Def::Array(args.clone()));
                if let Some(cell) = met_shapes(args.iter().map(|a| &f.ty(*a).shape)) {
                    let shape = Shape::known(&[args.len()]).concat(&cell);
                    self.refine(f, s.defs[0], &shape);
                }
            }
            Op::With(w) => {
                for (k, op) in w.ops.iter().enumerate() {
                    let d = s.defs[k];
                    match op {
                        WithOp::Genarray { shape, default } => {
                            let cell_scalar = w.parts.iter().all(|p| f.ty(w.element_yield(p, k)).shape.is_scalar())
                                && default.is_none_or(|d| f.ty(d).shape.is_scalar())
                                && (!w.parts.is_empty()
                                    || default.is_some()
                                    || w.cells[k].as_ref().is_some_and(|c| c.shape.is_scalar()));
                            if cell_scalar {
                                self.shape_src.insert(d, ShapeSrc::Value(*shape));
                            } else if let Some(cell) = self.invariant_cell_pieces(f, w, k) {
                                let ps = pieces([(0, *shape)].into_iter().chain(cell.iter().copied()));
                                self.shape_src.insert(d, ShapeSrc::Pieces(ps));
                            }
                            // The frame's extents when constant, else its rank when the
                            // shape vector's length is known; then the cells'.
                            let frame = match self.konst(*shape).and_then(util::int_vec) {
                                Some(e) if e.iter().all(|&x| x >= 0) => {
                                    Some(Shape::known(&e.iter().map(|&x| x as usize).collect::<Vec<_>>()))
                                }
                                _ => crate::sema::prim_ty::vector_len(f.ty(*shape)).map(Shape::rank),
                            };
                            if let Some(frame) = frame
                                && let Some(cell) = genarray_cell(w, k, *default, |v| f.ty(v))
                            {
                                self.refine(f, d, &frame.concat(&cell));
                            }
                        }
                        WithOp::Modarray { array } => {
                            let src = self.shape_src.get(array).cloned().unwrap_or(ShapeSrc::SameAs(*array));
                            self.shape_src.insert(d, src);
                            let t = f.ty(*array).shape.clone();
                            self.refine(f, d, &t);
                        }
                        WithOp::Scan { shape, neutral, .. } => {
                            if f.ty(*neutral).shape.is_scalar() {
                                self.shape_src.insert(d, ShapeSrc::Value(*shape));
                            }
                        }
                        WithOp::Fold { .. } | WithOp::Filter { .. } => {}
                    }
                }
            }
            Op::If { then_block, else_block, .. } => {
                for (k, d) in s.defs.iter().enumerate() {
                    let (a, b) = (then_block.yields[k], else_block.yields[k]);
                    let (ta, tb) = (f.ty(a).clone(), f.ty(b).clone());
                    if ta.elem == tb.elem {
                        let joined = ta.shape.join(&tb.shape);
                        self.refine(f, *d, &joined);
                    }
                    if let (Some(x), Some(y)) = (self.shape_src.get(&a).cloned(), self.shape_src.get(&b).cloned())
                        && x == y
                    {
                        self.shape_src.insert(*d, x);
                    }
                }
            }
            _ => {}
        }
    }

    /// Narrows a loop's carried values to the most specific types that hold
    /// for the initial values and every iteration's (a loop carrying a
    /// `double[.,.]` through `cat`s and `take`s of generic library code was
    /// typed `double[+]`, so its whole body ran shape-generic): starting from
    /// the initial values' types, the body's types are inferred again
    /// ([`infer_block`]) and the carried types widened to include what the
    /// body yields, until they hold. The types found are committed for the
    /// parameters, the loop's results and the values the body defines.
    fn refine_loop(&mut self, f: &mut Function, s: &Stmt) {
        let Op::Loop { init, params, cond, body, .. } = &s.op else { return };
        let mut carried: Vec<Ty> = params
            .iter()
            .zip(init)
            .map(|(p, i)| {
                let (pt, it) = (f.ty(*p), f.ty(*i));
                match pt.shape.meet(&it.shape) {
                    Some(m) if pt.elem == it.elem => Ty::new(pt.elem, m),
                    _ => pt.clone(),
                }
            })
            .collect();
        if carried.iter().zip(params).all(|(t, p)| t == f.ty(*p)) {
            return;
        }
        const ROUNDS: usize = 4;
        for _ in 0..ROUNDS {
            let mut tys: HashMap<ValueId, Ty> = params.iter().copied().zip(carried.iter().cloned()).collect();
            infer_block(f, cond, &self.consts, &mut tys);
            infer_block(f, body, &self.consts, &mut tys);
            let mut stable = true;
            for (k, y) in body.yields.iter().enumerate() {
                let yt = tys.get(y).unwrap_or(f.ty(*y));
                let widened = carried[k].shape.join(&yt.shape);
                if widened != carried[k].shape {
                    carried[k].shape = widened.meet(&f.ty(params[k]).shape).unwrap_or(widened);
                    stable = false;
                }
            }
            if stable {
                for (k, p) in params.iter().enumerate() {
                    self.refine(f, *p, &carried[k].shape);
                    self.refine(f, s.defs[k], &carried[k].shape);
                }
                for (v, t) in tys {
                    self.refine(f, v, &t.shape);
                }
                return;
            }
        }
    }

    /// Seed 000's symbolic shapes through loops: a carried array whose every
    /// iteration yields an array shaped like it (itself, a `modarray` of it,
    /// element-wise operations on it, either branch of an `if`) keeps its
    /// initial value's shape, and so does the loop's result. Then `shape(row)`
    /// of a row updated in place per iteration is the initial row's shape
    /// vector, computed once before the loop instead of built every iteration.
    fn loop_shapes(&mut self, f: &Function, s: &Stmt) {
        let Op::Loop { init, params, body, .. } = &s.op else { return };
        if !params.iter().any(|p| !f.ty(*p).shape.is_scalar() && !self.shape_src.contains_key(p)) {
            return;
        }
        let defs = util::block_defs(body);
        for (k, (&p, &x)) in params.iter().zip(init).enumerate() {
            if f.ty(p).shape.is_scalar() || self.shape_src.contains_key(&p) {
                continue;
            }
            let Some(&y) = body.yields.get(k) else { continue };
            let src = self.shape_src.get(&x).cloned().unwrap_or(ShapeSrc::SameAs(x));
            let init_shape = match &src {
                ShapeSrc::Value(v) => Some(*v),
                _ => None,
            };
            if !util::shaped_like(f, &defs, y, p, init_shape) {
                // Or a `genarray` over the initial value's extents, computed
                // otherwise (a `cat` of the array's pieces): that vector, made
                // in the body, is the initial value's shape vector.
                let Some(sv) = init_shape else { continue };
                let made = {
                    let body_defs = index::BlockDefs::new(body, self);
                    let reader = index::Reader::new(f, &body_defs);
                    let made = reader.vector(sv).and_then(|e| util::genarray_of_extents(f, &reader, &defs, y, &e));
                    made.filter(|v| body_defs.inner.contains_key(v))
                };
                let Some(made) = made else { continue };
                self.subst.insert(made, sv);
                self.counts.shapes += 1;
            }
            let asked =
                defs.values().any(|(t, _)| matches!(&t.op, Op::Prim { prim: Prim::Shape, args, .. } if args[0] == p));
            if asked {
                self.counts.loop_shapes += 1;
            }
            self.shape_src.insert(p, src.clone());
            if let Some(&d) = s.defs.get(k) {
                self.shape_src.insert(d, src);
            }
        }
    }

    /// Whether `sel(iv, x)` selects an element, i.e. `iv` is as long as `x`'s rank
    /// (seed 000's symbolic attributes): `iv` ranges over a with-loop frame that
    /// is `shape(x)`, or the shape of an array known to have `x`'s rank. In
    /// shape-generic code (`bool[*] a; with { (. <= iv <= .) : a[iv]; }`) this
    /// makes `a[iv]` a scalar without knowing the rank.
    fn full_selection(&self, iv: ValueId, x: ValueId) -> bool {
        let (a, b) = (self.length_key(iv, 0), self.rank_key(x, 0));
        a.is_some() && a == b
    }

    /// A key equal for vectors of equal length: the array whose rank the length
    /// is, else the vector itself.
    fn length_key(&self, v: ValueId, depth: u32) -> Option<ValueId> {
        if depth > 16 {
            return None;
        }
        if let Some(Def::Prim(Prim::Shape, args)) = self.defs.get(&v) {
            return self.rank_key(args[0], depth + 1);
        }
        match self.shape_src.get(&v) {
            Some(ShapeSrc::SameAs(u)) if *u != v => self.length_key(*u, depth + 1),
            _ => Some(v),
        }
    }

    /// A key equal for arrays of equal rank ([`Self::length_key`]).
    fn rank_key(&self, x: ValueId, depth: u32) -> Option<ValueId> {
        if depth > 16 {
            return None;
        }
        match self.shape_src.get(&x) {
            // `x`'s shape is in `shape(x)` itself: `x` is the key.
            Some(ShapeSrc::Value(sv)) if matches!(self.defs.get(sv), Some(Def::Prim(Prim::Shape, a)) if a[0] == x) => {
                Some(x)
            }
            Some(ShapeSrc::Value(sv)) => self.length_key(*sv, depth + 1),
            Some(ShapeSrc::SameAs(y)) if *y != x => self.rank_key(*y, depth + 1),
            _ => Some(x),
        }
    }

    fn refine(&mut self, f: &mut Function, v: ValueId, shape: &Shape) {
        let cur = f.ty(v).shape.clone();
        if let Some(m) = cur.meet(shape)
            && m != cur
        {
            f.values[v.0 as usize].ty.shape = m;
            self.counts.refined += 1;
        }
    }

    fn refine_prim(&mut self, f: &mut Function, prim: &Prim, args: &[ValueId], d: ValueId) {
        let tys: Vec<Ty> = args.iter().map(|a| f.ty(*a).clone()).collect();
        let refs: Vec<Option<&Ty>> = tys.iter().map(Some).collect();
        let vals: Vec<Option<&Value>> = args.iter().map(|a| self.consts.get(a)).collect();
        if let Ok(Some(t)) = prim_type(prim, &refs, &vals)
            && t.elem == f.ty(d).elem
        {
            self.refine(f, d, &t.shape);
        }
    }

    fn rewrite(&mut self, f: &mut Function, s: Stmt) -> Action {
        match &s.op {
            Op::Prim { prim, args, .. } => self.rewrite_prim(f, &s, prim, args),
            Op::Array(args) => {
                if let Some(v) = self.rebuilt_vector(f, args, s.defs[0]) {
                    self.counts.copies += 1;
                    self.forward(f, &s.defs, &[v]);
                    return Action::Forward;
                }
                let vals: Option<Vec<Value>> = args.iter().map(|a| self.konst(*a).cloned()).collect();
                if let Some(vals) = vals {
                    let n: usize = vals.iter().map(|v| v.len()).sum();
                    if n <= MAX_FOLDED_ELEMENTS
                        && let Ok(v) = crate::interp::stack_values(vals)
                    {
                        return self.replace_by_const(f, s, v);
                    }
                }
                Action::Keep(s)
            }
            Op::If { cond, then_block, else_block } => {
                if let Some(Scalar::Bool(b)) = self.konst(*cond).and_then(|c| c.as_scalar()) {
                    let taken = if b { then_block.clone() } else { else_block.clone() };
                    self.counts.branches += 1;
                    // The taken branch was simplified (and recorded) already.
                    self.forward(f, &s.defs, &taken.yields);
                    return Action::Splice(taken.stmts);
                }
                if let Some(action) = self.short_circuit(f, &s, *cond, then_block, else_block) {
                    return action;
                }
                // Values both branches yield from outside the `if`.
                let inner = util::defined_in(then_block)
                    .into_iter()
                    .chain(util::defined_in(else_block))
                    .collect::<crate::HashSet<_>>();
                for (k, d) in s.defs.iter().enumerate() {
                    let (a, b) = (then_block.yields[k], else_block.yields[k]);
                    if a == b && !inner.contains(&a) && !self.subst.contains_key(d) {
                        self.forward(f, &[*d], &[a]);
                        self.counts.copies += 1;
                    }
                }
                Action::Keep(s)
            }
            Op::Loop { .. } => self.rewrite_loop(f, s),
            Op::Check(c) => self.rewrite_check(f, s.clone(), c),
            Op::Pattern { args, specs, vars, labels, results: true, .. } => {
                // A result check: gone when the variables are constants and
                // the results' shapes known, and they match.
                use crate::interp::dispatch::{Binding, Bindings, match_pattern};
                let given = args.len().saturating_sub(labels.len());
                let mut env = Bindings::default();
                for (name, a) in vars.iter().zip(&args[..given]) {
                    let Some(b) = self.konst(*a).and_then(Binding::of_value) else { return Action::Keep(s) };
                    env.insert(name.clone(), b);
                }
                let shapes: Option<Vec<Vec<usize>>> = args[given..].iter().map(|a| util::extents(f, *a)).collect();
                let Some(shapes) = shapes else { return Action::Keep(s) };
                if !specs.iter().zip(&shapes).all(|(spec, sh)| match_pattern(spec, sh, &mut env)) {
                    return Action::Keep(s);
                }
                self.counts.checks += 1;
                Action::Drop
            }
            Op::Pattern { args, specs, .. } => {
                let shapes: Option<Vec<Vec<usize>>> = args.iter().map(|a| util::extents(f, *a)).collect();
                let Some(shapes) = shapes else { return Action::Keep(s) };
                let mut env = crate::interp::dispatch::Bindings::default();
                let ok = specs
                    .iter()
                    .zip(&shapes)
                    .all(|(spec, sh)| crate::interp::dispatch::match_pattern(spec, sh, &mut env));
                let Op::Pattern { vars, .. } = &s.op else { return Action::Keep(s) };
                if !ok {
                    return Action::Keep(s);
                }
                let vals: Option<Vec<Value>> = vars.iter().map(|v| env.get(v).map(|b| b.to_value())).collect();
                let Some(vals) = vals else { return Action::Keep(s) };
                self.counts.checks += 1;
                let mut stmts = Vec::new();
                for (d, v) in s.defs.iter().zip(vals) {
                    self.consts.insert(*d, v.clone());
                    stmts.push(Stmt { defs: vec![*d], op: Op::Const(v), span: s.span, blame: s.blame });
                }
                Action::Splice(stmts)
            }
            Op::With(_) => self.rewrite_with(f, s),
            Op::Narrow(v) => {
                // Already that narrow: the value itself.
                if f.ty(*v).subset_of(f.ty(s.defs[0])) {
                    let v = *v;
                    self.counts.copies += 1;
                    self.forward(f, &s.defs, &[v]);
                    return Action::Forward;
                }
                Action::Keep(s)
            }
            _ => Action::Keep(s),
        }
    }

    /// `a || b` and `a && b` (lowered as `if a { true } else { b }` and
    /// `if a { b } else { false }`) where computing `b` is cheap and cannot fail:
    /// both sides evaluated and combined with `or`/`and`, so a with-loop over
    /// booleans has no branch per element (a data-dependent branch mispredicts
    /// about every other element on random data, and blocks vectorisation).
    fn short_circuit(
        &mut self,
        f: &mut Function,
        s: &Stmt,
        cond: ValueId,
        then_block: &Block,
        else_block: &Block,
    ) -> Option<Action> {
        const MOST_STATEMENTS: usize = 6;
        let bool_ty = Elem::Base(crate::syntax::ast::BaseType::Bool);
        if s.defs.len() != 1 || f.ty(s.defs[0]).elem != bool_ty || !f.ty(s.defs[0]).shape.is_scalar() {
            return None;
        }
        let is = |this: &Self, v: ValueId, b: bool| matches!(this.konst(v).and_then(|c| c.as_scalar()), Some(Scalar::Bool(x)) if x == b);
        let cheap = |b: &Block| {
            b.stmts.len() <= MOST_STATEMENTS
                && b.stmts.iter().all(|st| match &st.op {
                    Op::Const(_) => true,
                    // In bounds wherever the branch is (bounds-check elimination
                    // proves selections from index ranges, not branch conditions).
                    Op::Prim { prim: Prim::IdxSel | Prim::Sel, checked: false, .. } => true,
                    Op::Prim { .. } => !util::may_fail(&st.op),
                    _ => false,
                })
        };
        // The constant side holds nothing but constants (nothing dropped with it).
        let only_consts = |b: &Block| b.stmts.iter().all(|st| matches!(st.op, Op::Const(_)));
        let (op, rest) = if is(self, then_block.yields[0], true) && only_consts(then_block) && cheap(else_block) {
            (BinOp::Or, else_block)
        } else if is(self, else_block.yields[0], false) && only_consts(else_block) && cheap(then_block) {
            (BinOp::And, then_block)
        } else {
            return None;
        };
        self.counts.flattened += 1;
        let mut stmts = rest.stmts.clone();
        stmts.push(Stmt { op: Op::prim(Prim::Bin(op), vec![cond, rest.yields[0]]), ..s.clone() });
        Some(Action::Splice(stmts))
    }

    fn replace_by_const(&mut self, f: &mut Function, s: Stmt, v: Value) -> Action {
        self.counts.folded += 1;
        let d = s.defs[0];
        let t = Ty::of_value(&v);
        if t.elem == f.ty(d).elem {
            let cur = f.ty(d).shape.clone();
            if let Some(m) = cur.meet(&t.shape) {
                f.values[d.0 as usize].ty.shape = m;
            }
        }
        self.consts.insert(d, v.clone());
        Action::Splice(vec![Stmt { defs: vec![d], op: Op::Const(v), span: s.span, blame: s.blame }])
    }

    fn rewrite_prim(&mut self, f: &mut Function, s: &Stmt, prim: &Prim, args: &[ValueId]) -> Action {
        let d = s.defs[0];
        // Constant arguments: fold with the run-time semantics.
        if !prim.has_effect() && !matches!(prim, Prim::Error | Prim::Hide(_)) {
            let vals: Option<Vec<Value>> = args.iter().map(|a| self.konst(*a).cloned()).collect();
            if let Some(vals) = vals {
                // Bounded: a result too large to keep is never built.
                let folded = crate::interp::value::with_element_limit(MAX_FOLDED_ELEMENTS, || {
                    crate::interp::fold_prim(prim, vals)
                });
                if let Some(Ok(v)) = folded {
                    let elem_ok = match (f.ty(d).elem, v.base()) {
                        (Elem::Base(b), Some(vb)) => b == vb,
                        (Elem::String, None) => true,
                        _ => false,
                    };
                    if elem_ok && v.len() <= MAX_FOLDED_ELEMENTS {
                        return self.replace_by_const(f, s.clone(), v);
                    }
                }
            }
        }
        // Shape algebra.
        match prim {
            // `reshape(s, x)` to the shape `x` has: `x` (no copy).
            Prim::Reshape => {
                let x = args[1];
                let same = match (self.konst(args[0]).and_then(Value::as_int_vec), util::extents(f, x)) {
                    (Some(sv), Some(e)) => sv.len() == e.len() && sv.iter().zip(&e).all(|(&a, &b)| a == b as i64),
                    _ => false,
                };
                if same && f.ty(x).subset_of(f.ty(d)) {
                    self.counts.reshapes += 1;
                    self.forward(f, &[d], &[x]);
                    return Action::Forward;
                }
            }
            Prim::Dim => {
                let x = args[0];
                let rank = f.ty(x).shape.rank_if_known().or_else(|| match self.shape_src.get(&x) {
                    Some(ShapeSrc::Value(sv)) => crate::sema::prim_ty::vector_len(f.ty(*sv)),
                    Some(ShapeSrc::SameAs(y)) => f.ty(*y).shape.rank_if_known(),
                    Some(ShapeSrc::Pieces(ps)) => ps
                        .iter()
                        .map(|(k, v)| crate::sema::prim_ty::vector_len(f.ty(*v)).and_then(|n| n.checked_sub(*k)))
                        .sum(),
                    None => None,
                });
                if let Some(r) = rank {
                    self.counts.shapes += 1;
                    return self.replace_by_const(f, s.clone(), Value::Scalar(Scalar::int(r as i64)));
                }
            }
            Prim::Shape => {
                let x = args[0];
                if let Some(e) = util::extents(f, x) {
                    self.counts.shapes += 1;
                    let v = Value::int_vector(&e.iter().map(|&d| d as i64).collect::<Vec<_>>());
                    return self.replace_by_const(f, s.clone(), v);
                }
                match self.shape_src.get(&x).cloned() {
                    Some(ShapeSrc::Value(sv)) => {
                        let sv = self.resolve(sv);
                        if sv != d {
                            self.counts.shapes += 1;
                            self.forward(f, &[d], &[sv]);
                            return Action::Forward;
                        }
                    }
                    // `shape(x)` for `x` shaped like `y`: `shape(y)` (equal shapes
                    // become one value after CSE).
                    Some(ShapeSrc::SameAs(y)) if y != x => {
                        if let Some(e) = util::extents(f, y) {
                            self.counts.shapes += 1;
                            let v = Value::int_vector(&e.iter().map(|&d| d as i64).collect::<Vec<_>>());
                            return self.replace_by_const(f, s.clone(), v);
                        }
                        self.counts.shapes += 1;
                        let mut t = s.clone();
                        t.op = Op::prim(Prim::Shape, vec![y]);
                        return Action::Keep(t);
                    }
                    _ => {}
                }
                if let Some(ShapeSrc::Pieces(ps)) = self.shape_src.get(&x).cloned() {
                    self.counts.shapes += 1;
                    return self.materialise(f, s, &ps);
                }
                if let Some(stmts) = self.shape_of_sel(f, s, x) {
                    self.counts.shapes += 1;
                    return Action::Splice(stmts);
                }
            }
            Prim::Cat => {
                // Vectors written out, concatenated: one vector written out (index
                // bounds built by with-loop scalarisation compare with the producer's).
                let written = |v: ValueId| {
                    matches!(self.defs.get(&v), Some(Def::Array(_)))
                        || self.konst(v).is_some()
                        || crate::sema::prim_ty::vector_len(f.ty(v)).is_some_and(|n| n <= 8)
                };
                if args.len() == 2
                    && args.iter().all(|a| written(*a))
                    && crate::sema::prim_ty::vector_len(f.ty(d)).is_some()
                {
                    let mut out = Vec::new();
                    let a = self.index_components(f, args[0], &mut out, s.span);
                    let b = self.index_components(f, args[1], &mut out, s.span);
                    if let (Some(mut a), Some(b)) = (a, b) {
                        a.extend(b);
                        self.counts.folded += 1;
                        out.push(Stmt { defs: vec![d], op: Op::Array(a), span: s.span, blame: s.blame });
                        return Action::Splice(out);
                    }
                }
            }
            // `0 * shp` (a generator's lower bound in library code) of a known
            // shape: zeros.
            Prim::Bin(BinOp::Mul)
                if f.ty(d).elem == Elem::Base(crate::syntax::ast::BaseType::Int)
                    && args.iter().any(|a| self.is_int_const(*a, 0)) =>
            {
                match util::extents(f, d).as_deref() {
                    Some([]) => return self.replace_by_const(f, s.clone(), Value::Scalar(Scalar::int(0))),
                    Some([n]) if *n <= MAX_FOLDED_ELEMENTS => {
                        return self.replace_by_const(f, s.clone(), Value::int_vector(&vec![0; *n]));
                    }
                    _ => {}
                }
            }
            // One element of a vector written out replaced: the vector written
            // out (`[0, 0]` with `c` on axis 0 is `[c, 0]`).
            Prim::IdxModarray if f.ty(args[2]).shape.is_scalar() && f.ty(args[2]).elem == f.ty(args[0]).elem => {
                let written = matches!(self.defs.get(&args[0]), Some(Def::Array(_))) || self.konst(args[0]).is_some();
                let at = self.konst(args[1]).and_then(util::int_scalar);
                if let (true, Some(at), Some(n)) = (written, at, crate::sema::prim_ty::vector_len(f.ty(args[0])))
                    && (0..n as i64).contains(&at)
                {
                    let mut out = Vec::new();
                    if let Some(mut elems) = self.index_components(f, args[0], &mut out, s.span) {
                        elems[at as usize] = args[2];
                        self.counts.folded += 1;
                        out.push(Stmt { defs: vec![d], op: Op::Array(elems), span: s.span, blame: s.blame });
                        return Action::Splice(out);
                    }
                }
            }
            Prim::Take | Prim::Drop => {
                // `drop(1, [a, b, c])` is `[b, c]`: shape vectors written out stay so.
                if let (Some(n), Some(Def::Array(elems))) =
                    (self.konst(args[0]).and_then(util::int_scalar), self.defs.get(&args[1]).cloned())
                {
                    let n = usize::try_from(n).ok().filter(|&n| n <= elems.len());
                    if let Some(n) = n {
                        let kept = if *prim == Prim::Take { &elems[..n] } else { &elems[n..] };
                        if !kept.is_empty() {
                            self.counts.folded += 1;
                            let mut t = s.clone();
                            t.op = Op::Array(kept.to_vec());
                            return Action::Keep(t);
                        }
                    }
                }
                // `drop(1, shape(a))` of an `int[2]`: `[shape(a)[1]]`, whose component
                // selections cannot fail (so they move out of loops, and bounds read them).
                let count = self.konst(args[0]).and_then(util::int_scalar);
                let len = crate::sema::prim_ty::vector_len(f.ty(args[1]));
                let int_vector = f.ty(args[1]).elem == util::int_ty().elem;
                if let (Some(c), Some(len), true) = (count, len, int_vector)
                    && let Some(c) = usize::try_from(c).ok().filter(|&c| c <= len)
                {
                    let range = if *prim == Prim::Take { 0..c } else { c..len };
                    if !range.is_empty() {
                        self.counts.folded += 1;
                        let mut out = Vec::new();
                        let comps: Vec<ValueId> =
                            range.map(|k| util::emit_component(f, &mut out, args[1], k, s.span)).collect();
                        for t in &mut out {
                            t.blame = s.blame;
                        }
                        out.push(Stmt { defs: vec![d], op: Op::Array(comps), span: s.span, blame: s.blame });
                        return Action::Splice(out);
                    }
                }
            }
            Prim::Size => {
                if let Some(e) = util::extents(f, args[0]) {
                    self.counts.shapes += 1;
                    return self.replace_by_const(
                        f,
                        s.clone(),
                        Value::Scalar(Scalar::int(e.iter().product::<usize>() as i64)),
                    );
                }
            }
            Prim::Vect2Offset => {
                // The offset of an index written out, in a shape of known extents:
                // scalar arithmetic (`[i, j]` in `[m, 6]`: `i * 6 + j`).
                if let (Some(Def::Array(elems)), Some(shape)) =
                    (self.defs.get(&args[1]).cloned(), self.konst(args[0]).and_then(util::int_vec))
                    && elems.len() == shape.len()
                    && !elems.is_empty()
                {
                    let mut stmts = Vec::new();
                    let int = util::int_ty();
                    let mut acc: Option<ValueId> = None;
                    let mut stride: i64 = 1;
                    for (k, e) in elems.iter().enumerate().rev() {
                        let term = if stride == 1 {
                            *e
                        } else {
                            let c = util::emit_const(f, &mut stmts, Value::Scalar(Scalar::int(stride)), s.span);
                            util::emit_prim(f, &mut stmts, Prim::Bin(BinOp::Mul), vec![*e, c], int.clone(), s.span)
                        };
                        acc = Some(match acc {
                            None => term,
                            Some(x) => util::emit_prim(
                                f,
                                &mut stmts,
                                Prim::Bin(BinOp::Add),
                                vec![term, x],
                                int.clone(),
                                s.span,
                            ),
                        });
                        stride = stride.saturating_mul(shape[k]);
                    }
                    for t in &mut stmts {
                        t.blame = s.blame;
                    }
                    self.counts.folded += 1;
                    let x = acc.expect("non-empty");
                    self.forward(f, &[d], &[x]);
                    return Action::Splice(stmts);
                }
            }
            Prim::Sel => {
                if let Some(a) = self.select(f, args[0], args[1]) {
                    self.counts.folded += 1;
                    self.forward(f, &[d], &[a]);
                    return Action::Forward;
                }
                if let Some(stmts) = self.sel_into_fill(f, s, args) {
                    self.counts.folded += 1;
                    return Action::Splice(stmts);
                }
                if let Some(stmts) = self.sel_of_sel(f, s, args) {
                    self.counts.folded += 1;
                    return Action::Splice(stmts);
                }
            }
            _ => {}
        }
        if let Some(action) = self.by_range(f, s, prim, args) {
            self.counts.ranges += 1;
            return action;
        }
        // `x == x` on integers and booleans (not floats: NaN).
        if let Prim::Bin(op) = prim {
            let exact = matches!(f.ty(args[0]).elem, Elem::Base(b) if b.is_integer() || b == crate::syntax::ast::BaseType::Bool);
            if args.len() == 2 && args[0] == args[1] && exact && f.ty(args[0]).shape.is_scalar() {
                let answer = match op {
                    BinOp::Eq | BinOp::Le | BinOp::Ge => Some(true),
                    BinOp::Ne | BinOp::Lt | BinOp::Gt => Some(false),
                    _ => None,
                };
                if let Some(b) = answer {
                    return self.replace_by_const(f, s.clone(), Value::Scalar(Scalar::Bool(b)));
                }
            }
        }
        // Integer index arithmetic that cancels out (`(i - 1) + 1`), and index
        // vectors rebuilt from their own components (`[iv[0], iv[1]]`).
        if let Some(x) = self.affine_copy(f, prim, args, d) {
            self.counts.copies += 1;
            self.forward(f, &[d], &[x]);
            return Action::Forward;
        }
        // Index vectors plus chains of constant offsets: one offset, or none.
        if let Some(action) = self.affine_index(f, s, prim, args) {
            return action;
        }
        // Identities (integers and booleans only: exact, and types are kept).
        if let Some(x) = self.identity(f, prim, args)
            && f.ty(x).elem == f.ty(d).elem
            && f.ty(x).shape.subset_of(&f.ty(d).shape)
        {
            self.counts.copies += 1;
            self.forward(f, &[d], &[x]);
            return Action::Forward;
        }
        Action::Keep(s.clone())
    }

    /// `int` comparisons, `max`, `min`, `abs` and `mod` decided by the ranges
    /// of their operands ([`index::Known`]: extents are never negative, and the
    /// conditions of enclosing branches and loops and the asserts before bound
    /// values): `m - 1 >= 1` is `true` where `m >= 3`, `max(m, 1)` is `m`,
    /// `abs(m - 2)` is `m - 2`, `aplmod(1, m)` is `1` and `aplmod(-1, m)` is
    /// `m - 1`. Operands computed by arithmetic must be known not to wrap.
    fn by_range(&mut self, f: &mut Function, s: &Stmt, prim: &Prim, args: &[ValueId]) -> Option<Action> {
        enum Answer {
            Bool(bool),
            Same(ValueId),
            Negated(ValueId),
            Sum(ValueId, ValueId),
        }
        let d = s.defs[0];
        if let Some(bits) = self.compare_vectors(f, prim, args) {
            let n = bits.len();
            let v = Value::from_parts(vec![n], crate::interp::value::Elems::Bool(bits));
            return Some(self.replace_by_const(f, s.clone(), v));
        }
        let answer = {
            let reader = index::Reader::new(f, self);
            if !args.iter().all(|a| reader.is_int_scalar(*a)) {
                return None;
            }
            let known = index::Known { reader: &reader, facts: &self.facts };
            let exact = |a: &index::Affine| index::exact(a, &known);
            let x = reader.scalar(args[0]);
            if !exact(&x) {
                return None;
            }
            match prim {
                Prim::Bin(op) if args.len() == 2 => {
                    let y = reader.scalar(args[1]);
                    if !exact(&y) {
                        return None;
                    }
                    let (lo, hi) = known.compare(&x, &y);
                    let at_least = |k: i64| lo.is_some_and(|l| l >= k);
                    let at_most = |k: i64| hi.is_some_and(|h| h <= k);
                    let decided = |yes: bool, no: bool| {
                        if yes {
                            Some(true)
                        } else if no {
                            Some(false)
                        } else {
                            None
                        }
                    };
                    match op {
                        BinOp::Lt => decided(at_most(-1), at_least(0)).map(Answer::Bool),
                        BinOp::Le => decided(at_most(0), at_least(1)).map(Answer::Bool),
                        BinOp::Gt => decided(at_least(1), at_most(0)).map(Answer::Bool),
                        BinOp::Ge => decided(at_least(0), at_most(-1)).map(Answer::Bool),
                        BinOp::Eq => decided(at_least(0) && at_most(0), at_least(1) || at_most(-1)).map(Answer::Bool),
                        BinOp::Ne => decided(at_least(1) || at_most(-1), at_least(0) && at_most(0)).map(Answer::Bool),
                        BinOp::Max if at_least(0) => Some(Answer::Same(args[0])),
                        BinOp::Max if at_most(0) => Some(Answer::Same(args[1])),
                        BinOp::Min if at_most(0) => Some(Answer::Same(args[0])),
                        BinOp::Min if at_least(0) => Some(Answer::Same(args[1])),
                        BinOp::Mod | BinOp::AplMod => {
                            let (xl, xh) = known.range(&x);
                            // y - x >= 1 and x >= 0: x itself; APL's mod of -y <= x < 0 (y > 0): x + y.
                            let below_y = known.range(&y.sub(&x)).0.is_some_and(|l| l >= 1);
                            let above_minus_y = known.range(&y.add(&x)).0.is_some_and(|l| l >= 0);
                            let y_positive = known.range(&y).0.is_some_and(|l| l >= 1);
                            if xl.is_some_and(|l| l >= 0) && below_y {
                                Some(Answer::Same(args[0]))
                            } else if *op == BinOp::AplMod
                                && xh.is_some_and(|h| h <= -1)
                                && above_minus_y
                                && y_positive
                                && exact(&x.add(&y))
                            {
                                Some(Answer::Sum(args[0], args[1]))
                            } else {
                                None
                            }
                        }
                        _ => None,
                    }
                }
                Prim::Un(UnOp::Abs) => match known.range(&x) {
                    (Some(lo), _) if lo >= 0 => Some(Answer::Same(args[0])),
                    (_, Some(hi)) if hi <= 0 && exact(&x.scale(-1)) => Some(Answer::Negated(args[0])),
                    _ => None,
                },
                _ => None,
            }
        }?;
        match answer {
            Answer::Bool(b) => Some(self.replace_by_const(f, s.clone(), Value::Scalar(Scalar::Bool(b)))),
            Answer::Same(v) => {
                self.forward(f, &[d], &[v]);
                Some(Action::Forward)
            }
            Answer::Negated(v) => {
                let mut t = s.clone();
                t.op = Op::prim(Prim::Un(UnOp::Neg), vec![v]);
                Some(Action::Keep(t))
            }
            Answer::Sum(a, b) => {
                let mut t = s.clone();
                t.op = Op::prim(Prim::Bin(BinOp::Add), vec![a, b]);
                Some(Action::Keep(t))
            }
        }
    }

    /// A comparison of int vectors of known length (or a vector and a scalar)
    /// decided component by component by ranges (the library's `take` and
    /// `drop` test `[1, 0] <= shape(a)`): the bools, when every one is decided.
    fn compare_vectors(&self, f: &Function, prim: &Prim, args: &[ValueId]) -> Option<Vec<bool>> {
        let Prim::Bin(op @ (BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge)) = prim else { return None };
        if args.len() != 2 {
            return None;
        }
        let reader = index::Reader::new(f, self);
        let n = crate::sema::prim_ty::vector_len(f.ty(args[0]))
            .or_else(|| crate::sema::prim_ty::vector_len(f.ty(args[1])))?;
        let side = |x: ValueId| -> Option<Vec<index::Affine>> {
            if reader.is_int_scalar(x) {
                Some(vec![reader.scalar(x); n])
            } else {
                reader.vector(x).filter(|c| c.len() == n)
            }
        };
        if f.ty(args[0]).elem != util::int_ty().elem || f.ty(args[1]).elem != util::int_ty().elem {
            return None;
        }
        let (xs, ys) = (side(args[0])?, side(args[1])?);
        let known = index::Known { reader: &reader, facts: &self.facts };
        xs.iter()
            .zip(&ys)
            .map(|(x, y)| {
                if !index::exact(x, &known) || !index::exact(y, &known) {
                    return None;
                }
                let (lo, hi) = known.compare(x, y);
                let (at_least, at_most) = (|k: i64| lo.is_some_and(|l| l >= k), |k: i64| hi.is_some_and(|h| h <= k));
                match op {
                    BinOp::Lt if at_most(-1) => Some(true),
                    BinOp::Lt if at_least(0) => Some(false),
                    BinOp::Le if at_most(0) => Some(true),
                    BinOp::Le if at_least(1) => Some(false),
                    BinOp::Gt if at_least(1) => Some(true),
                    BinOp::Gt if at_most(0) => Some(false),
                    BinOp::Ge if at_least(0) => Some(true),
                    BinOp::Ge if at_most(-1) => Some(false),
                    _ => None,
                }
            })
            .collect()
    }

    /// An int scalar `a ± c ± …` that is some existing scalar value.
    fn affine_copy(&self, f: &Function, prim: &Prim, args: &[ValueId], d: ValueId) -> Option<ValueId> {
        let Prim::Bin(op @ (BinOp::Add | BinOp::Sub)) = prim else { return None };
        let int = Ty::new(Elem::Base(crate::syntax::ast::BaseType::Int), Shape::scalar());
        if *f.ty(d) != int || args.iter().any(|a| *f.ty(*a) != int) {
            return None;
        }
        let reader = super::index::Reader::new(f, self);
        let (x, y) = (reader.scalar(args[0]), reader.scalar(args[1]));
        let a = if *op == BinOp::Add { x.add(&y) } else { x.sub(&y) };
        match (a.terms.len(), a.terms.iter().next(), a.c) {
            (1, Some((atom, 1)), 0) if atom.component.is_none() && atom.value != d => Some(atom.value),
            _ => None,
        }
    }

    /// `(iv - c1) + c2` on int vectors: `iv + (c2 - c1)`, or `iv` itself.
    fn affine_index(&mut self, f: &mut Function, s: &Stmt, prim: &Prim, args: &[ValueId]) -> Option<Action> {
        let Prim::Bin(op @ (BinOp::Add | BinOp::Sub)) = prim else { return None };
        let d = s.defs[0];
        let n = crate::sema::prim_ty::vector_len(f.ty(d))?;
        if f.ty(d).elem != Elem::Base(crate::syntax::ast::BaseType::Int) {
            return None;
        }
        let (comps, base) = {
            let reader = super::index::Reader::new(f, self);
            let side = |x: ValueId| -> Option<Vec<super::index::Affine>> {
                if f.ty(x).shape.is_scalar() {
                    Some(vec![reader.scalar(x); n])
                } else {
                    reader.vector(x).filter(|c| c.len() == n)
                }
            };
            let (a, b) = (side(args[0])?, side(args[1])?);
            let comps: Vec<super::index::Affine> =
                a.iter().zip(&b).map(|(x, y)| if *op == BinOp::Add { x.add(y) } else { x.sub(y) }).collect();
            // Every component: component k of one vector, plus a constant.
            let mut base: Option<ValueId> = None;
            for (k, c) in comps.iter().enumerate() {
                let (1, Some((atom, 1))) = (c.terms.len(), c.terms.iter().next()) else { return None };
                if atom.component != Some(k) || base.is_some_and(|b| b != atom.value) {
                    return None;
                }
                base = Some(atom.value);
            }
            (comps, base?)
        };
        if crate::sema::prim_ty::vector_len(f.ty(base)) != Some(n) || base == d {
            return None;
        }
        let offsets: Vec<i64> = comps.iter().map(|c| c.c).collect();
        if offsets.iter().all(|&c| c == 0) {
            self.counts.copies += 1;
            self.forward(f, &[d], &[base]);
            return Some(Action::Forward);
        }
        // Already `base ± constant`?
        if args[0] == base && self.konst(args[1]).is_some() {
            return None;
        }
        self.counts.folded += 1;
        let c = Value::int_vector(&offsets);
        let cv = f.new_value(Ty::of_value(&c), None);
        self.consts.insert(cv, c.clone());
        let konst = Stmt { defs: vec![cv], op: Op::Const(c), span: s.span, blame: s.blame };
        let add =
            Stmt { defs: vec![d], op: Op::prim(Prim::Bin(BinOp::Add), vec![base, cv]), span: s.span, blame: s.blame };
        self.defs.insert(d, Def::Prim(Prim::Bin(BinOp::Add), vec![base, cv]));
        Some(Action::Splice(vec![konst, add]))
    }

    /// `[v[0], v[1], …]`: the vector `v` itself.
    fn rebuilt_vector(&self, f: &Function, elems: &[ValueId], d: ValueId) -> Option<ValueId> {
        let reader = super::index::Reader::new(f, self);
        let mut source: Option<ValueId> = None;
        for (k, e) in elems.iter().enumerate() {
            let a = reader.scalar(*e);
            let (1, Some((atom, 1)), 0) = (a.terms.len(), a.terms.iter().next(), a.c) else { return None };
            if atom.component != Some(k) || source.is_some_and(|s| s != atom.value) {
                return None;
            }
            source = Some(atom.value);
        }
        let v = source?;
        let same_type = f.ty(v).elem == f.ty(d).elem && crate::sema::prim_ty::vector_len(f.ty(v)) == Some(elems.len());
        (same_type && v != d).then_some(v)
    }

    /// The components of an index (a scalar, or an int vector written out or
    /// constant), as scalar values; constants are emitted into `out`.
    fn index_components(&self, f: &mut Function, v: ValueId, out: &mut Vec<Stmt>, span: Span) -> Option<Vec<ValueId>> {
        let int = util::int_ty();
        if *f.ty(v) == int {
            return Some(vec![v]);
        }
        if let Some(c) = self.konst(v).and_then(util::int_vec) {
            return Some(
                c.into_iter().map(|x| util::emit_const(f, out, Value::Scalar(Scalar::int(x)), span)).collect(),
            );
        }
        match self.defs.get(&v) {
            Some(Def::Array(elems)) if elems.iter().all(|e| *f.ty(*e) == int) => Some(elems.clone()),
            // A short int vector (a shape): its components selected.
            _ => {
                let n = crate::sema::prim_ty::vector_len(f.ty(v)).filter(|&n| n <= 8)?;
                if f.ty(v).elem != int.elem {
                    return None;
                }
                Some((0..n).map(|k| util::emit_component(f, out, v, k, span)).collect())
            }
        }
    }

    /// `sel(jv, sel(iv, a))`, the inner selection proven in bounds: `sel(iv ++ jv, a)`.
    /// A row taken out of an array and then indexed (L0's `a[i]` as a map's
    /// argument, then `r[j]` in the lambda) becomes one selection from `a`, which
    /// with-loop folding and bounds-check elimination understand.
    fn sel_of_sel(&self, f: &mut Function, s: &Stmt, args: &[ValueId]) -> Option<Vec<Stmt>> {
        let (jv, inner) = (args[0], args[1]);
        if !self.unchecked_sels.contains(&inner) {
            return None;
        }
        let Some(Def::Prim(Prim::Sel, inner_args)) = self.defs.get(&inner) else { return None };
        let (iv, a) = (inner_args[0], inner_args[1]);
        let mut out = Vec::new();
        let mut comps = self.index_components(f, iv, &mut out, s.span)?;
        comps.extend(self.index_components(f, jv, &mut out, s.span)?);
        let idx = f.new_value(util::int_vec_ty(Some(comps.len())), None);
        out.push(Stmt::new(vec![idx], Op::Array(comps), s.span));
        out.push(with_args(s, vec![idx, a]));
        Some(blamed(s, out))
    }

    /// A value's shape as pieces, where it is held in values.
    fn pieces(&self, v: ValueId) -> Option<std::rc::Rc<[(usize, ValueId)]>> {
        match self.shape_src.get(&v)? {
            ShapeSrc::Value(sv) => Some(pieces([(0, self.resolve(*sv))])),
            ShapeSrc::Pieces(ps) => Some(ps.clone()),
            ShapeSrc::SameAs(y) if *y != v => self.pieces(*y),
            ShapeSrc::SameAs(_) => None,
        }
    }

    /// The shape of `sel(iv, a)` as pieces: `a`'s with `len(iv)` leading extents dropped.
    fn row_pieces(&self, f: &Function, iv: ValueId, a: ValueId) -> Option<ShapeSrc> {
        let mut k = if f.ty(iv).shape.is_scalar() { 1 } else { crate::sema::prim_ty::vector_len(f.ty(iv))? };
        let ps = self.pieces(a)?;
        let mut out = Vec::new();
        for (i, &(d, v)) in ps.iter().enumerate() {
            if k == 0 {
                out.push((d, v));
                continue;
            }
            match crate::sema::prim_ty::vector_len(f.ty(v)) {
                Some(n) if d + k >= n => k -= n.saturating_sub(d),
                Some(_) => {
                    out.push((d + k, v));
                    k = 0;
                }
                // A tail of unknown length: only the last piece may be cut blind.
                None if i + 1 == ps.len() => {
                    out.push((d + k, v));
                    k = 0;
                }
                None => return None,
            }
        }
        (k == 0).then(|| ShapeSrc::Pieces(pieces(out)))
    }

    /// The shape of operator `k`'s cells, when every part yields cells whose
    /// shape pieces are the same values, defined outside the with-loop.
    fn invariant_cell_pieces(&self, f: &Function, w: &With, k: usize) -> Option<std::rc::Rc<[(usize, ValueId)]>> {
        let mut inside = crate::HashSet::default();
        for p in &w.parts {
            inside.extend(util::defined_in(&p.body));
            inside.extend(p.index);
            inside.extend(p.scalars.iter().flatten().copied());
            inside.extend(p.offset);
        }
        let mut found: Option<std::rc::Rc<[(usize, ValueId)]>> = None;
        for p in &w.parts {
            let ps = self.pieces(w.element_yield(p, k))?;
            if ps.iter().any(|(_, v)| inside.contains(v)) || found.as_ref().is_some_and(|f| *f != ps) {
                return None;
            }
            found = Some(ps);
        }
        // Where no index runs the cells are the default's: it must have the
        // same shape (`genarray([n], d)` with `n = 0` has `d`'s cells).
        if let WithOp::Genarray { default: Some(d), .. } = &w.ops[k]
            && let Some(found) = &found
        {
            let same = self.pieces(*d).is_some_and(|ps| {
                ps == *found || self.extents_of(f, &ps).is_some_and(|x| Some(x) == self.extents_of(f, found))
            });
            if !same {
                return None;
            }
        }
        found
    }

    /// The extents a shape given as pieces lists, where every piece has a
    /// known length: two lists alike are equal shapes.
    fn extents_of(&self, f: &Function, ps: &[(usize, ValueId)]) -> Option<Vec<Extent>> {
        let mut out = Vec::new();
        for &(d, v) in ps {
            let v = self.resolve(v);
            let n = crate::sema::prim_ty::vector_len(f.ty(v))?;
            for j in d..n {
                let extent = match (self.konst(v).and_then(util::int_vec), self.defs.get(&v)) {
                    (Some(c), _) => Extent::Const(c[j]),
                    (None, Some(Def::Array(items))) => {
                        let x = self.resolve(*items.get(j)?);
                        match (self.konst(x).and_then(util::int_scalar), self.defs.get(&x)) {
                            (Some(c), _) => Extent::Const(c),
                            (None, Some(Def::Prim(Prim::Sel, a))) if a.len() == 2 => {
                                match self.konst(a[0]).and_then(util::int_vec).as_deref() {
                                    Some(&[c]) if c >= 0 => Extent::Component(self.resolve(a[1]), c as usize),
                                    _ => Extent::Value(x),
                                }
                            }
                            _ => Extent::Value(x),
                        }
                    }
                    _ => Extent::Component(v, j),
                };
                out.push(extent);
            }
        }
        Some(out)
    }

    /// `s` (a `shape`) replaced by the shape given as pieces.
    fn materialise(&mut self, f: &mut Function, s: &Stmt, ps: &[(usize, ValueId)]) -> Action {
        let d = s.defs[0];
        if ps.is_empty() {
            return self.replace_by_const(f, s.clone(), Value::int_vector(&[]));
        }
        if let [(0, v)] = ps {
            self.forward(f, &[d], &[*v]);
            return Action::Forward;
        }
        let mut out = Vec::new();
        let mut comps = Vec::new();
        for &(k, v) in ps {
            match self.index_components(f, v, &mut out, s.span) {
                Some(c) if c.len() >= k => comps.extend_from_slice(&c[k..]),
                _ => {
                    comps.clear();
                    break;
                }
            }
        }
        let done = |out: &mut Vec<Stmt>, op: Op| {
            out.push(Stmt::new(vec![d], op, s.span));
            Action::Splice(blamed(s, std::mem::take(out)))
        };
        if !comps.is_empty() {
            return done(&mut out, Op::Array(comps));
        }
        out.clear();
        let mut vectors = Vec::new();
        for (i, &(k, v)) in ps.iter().enumerate() {
            if k == 0 {
                vectors.push(v);
                continue;
            }
            let kc = util::emit_const(f, &mut out, Value::Scalar(Scalar::int(k as i64)), s.span);
            if ps.len() == 1 && i == 0 {
                return done(&mut out, Op::prim(Prim::Drop, vec![kc, v]));
            }
            let len = crate::sema::prim_ty::vector_len(f.ty(v)).map(|n| n.saturating_sub(k));
            vectors.push(util::emit_prim(f, &mut out, Prim::Drop, vec![kc, v], util::int_vec_ty(len), s.span));
        }
        let mut acc = vectors[0];
        for &v in &vectors[1..vectors.len() - 1] {
            acc = util::emit_prim(f, &mut out, Prim::Cat, vec![acc, v], util::int_vec_ty(None), s.span);
        }
        let last = *vectors.last().expect("two pieces or more");
        done(&mut out, Op::prim(Prim::Cat, vec![acc, last]))
    }

    /// `sel(iv, genarray(shp, v))` with `iv` longer than `shp`: `sel(drop(len(shp), iv), v)`
    /// (an element of a replicated row is an element of the row).
    fn sel_into_fill(&self, f: &mut Function, s: &Stmt, args: &[ValueId]) -> Option<Vec<Stmt>> {
        let (iv, a) = (args[0], args[1]);
        let Some(Def::Prim(Prim::Genarray, gargs)) = self.defs.get(&a) else { return None };
        let n = crate::sema::prim_ty::vector_len(f.ty(gargs[0]))?;
        let len = crate::sema::prim_ty::vector_len(f.ty(iv))?;
        if len <= n {
            return None;
        }
        let mut out = Vec::new();
        let rest = match self.index_components(f, iv, &mut out, s.span) {
            Some(c) => {
                let r = f.new_value(util::int_vec_ty(Some(len - n)), None);
                out.push(Stmt::new(vec![r], Op::Array(c[n..].to_vec()), s.span));
                r
            }
            None => {
                let nc = util::emit_const(f, &mut out, Value::Scalar(Scalar::int(n as i64)), s.span);
                util::emit_prim(f, &mut out, Prim::Drop, vec![nc, iv], util::int_vec_ty(Some(len - n)), s.span)
            }
        };
        out.push(with_args(s, vec![rest, gargs[1]]));
        Some(blamed(s, out))
    }

    /// `shape(sel(iv, a))` is `drop(len(iv), shape(a))` where `a`'s shape is
    /// held nowhere yet (where it is, the selection's shape pieces answer);
    /// `shape(a)` then simplifies on its own.
    fn shape_of_sel(&self, f: &mut Function, s: &Stmt, x: ValueId) -> Option<Vec<Stmt>> {
        let Some(Def::Prim(Prim::Sel, sel_args)) = self.defs.get(&x) else { return None };
        let (iv, a) = (sel_args[0], sel_args[1]);
        let k = if f.ty(iv).shape.is_scalar() { 1 } else { crate::sema::prim_ty::vector_len(f.ty(iv))? };
        let mut out = Vec::new();
        let shape_a =
            util::emit_prim(f, &mut out, Prim::Shape, vec![a], util::int_vec_ty(f.ty(a).shape.rank_if_known()), s.span);
        let kc = util::emit_const(f, &mut out, Value::Scalar(Scalar::int(k as i64)), s.span);
        out.push(Stmt::new(s.defs.clone(), Op::prim(Prim::Drop, vec![kc, shape_a]), s.span));
        Some(blamed(s, out))
    }

    /// `sel(idx, a)` answered without selecting: an element of an array literal
    /// or of a fill.
    fn select(&self, f: &Function, idx: ValueId, a: ValueId) -> Option<ValueId> {
        // Any full index into a fill selects the fill value (L0's `replicate(n, v)[i]`
        // is `v`); a failing index was reported by the check in front of it.
        if let Some(Def::Prim(Prim::Genarray, gargs)) = self.defs.get(&a) {
            let full = crate::sema::prim_ty::vector_len(f.ty(idx));
            if full.is_some() && full == crate::sema::prim_ty::vector_len(f.ty(gargs[0])) {
                return Some(gargs[1]);
            }
        }
        let index: Vec<i64> = match self.konst(idx)? {
            Value::Scalar(Scalar::Int(_, i)) => vec![*i],
            v => util::int_vec(v)?,
        };
        let mut cur = a;
        let mut rest: &[i64] = &index;
        while let Some((&k, tail)) = rest.split_first() {
            match self.defs.get(&cur)? {
                Def::Array(elems) => {
                    let e = usize::try_from(k).ok().and_then(|k| elems.get(k))?;
                    cur = *e;
                    rest = tail;
                }
                Def::Prim(Prim::Genarray, gargs) => {
                    let frame = self.konst(gargs[0]).and_then(util::int_vec)?;
                    if rest.len() != frame.len() || rest.iter().zip(&frame).any(|(i, n)| *i < 0 || i >= n) {
                        return None;
                    }
                    cur = gargs[1];
                    rest = &[];
                }
                _ => return None,
            }
        }
        // The selected value must have the statement's type family.
        let _ = f;
        Some(cur)
    }

    fn is_int_const(&self, v: ValueId, want: i64) -> bool {
        matches!(self.konst(v), Some(Value::Scalar(Scalar::Int(_, x))) if *x == want)
    }

    fn is_bool_const(&self, v: ValueId, want: bool) -> bool {
        matches!(self.konst(v), Some(Value::Scalar(Scalar::Bool(x))) if *x == want)
    }

    fn identity(&self, f: &Function, prim: &Prim, args: &[ValueId]) -> Option<ValueId> {
        let int_like = |v: ValueId| matches!(f.ty(v).elem, Elem::Base(b) if b.is_integer());
        match prim {
            Prim::Bin(BinOp::Add) if int_like(args[0]) => {
                if self.is_int_const(args[1], 0) {
                    return Some(args[0]);
                }
                if self.is_int_const(args[0], 0) {
                    return Some(args[1]);
                }
                None
            }
            Prim::Bin(BinOp::Sub) if int_like(args[0]) && self.is_int_const(args[1], 0) => Some(args[0]),
            Prim::Bin(BinOp::Mul) if int_like(args[0]) => {
                if self.is_int_const(args[1], 1) {
                    return Some(args[0]);
                }
                if self.is_int_const(args[0], 1) {
                    return Some(args[1]);
                }
                None
            }
            Prim::Bin(BinOp::Div) if int_like(args[0]) && self.is_int_const(args[1], 1) => Some(args[0]),
            Prim::Bin(BinOp::And) => {
                if self.is_bool_const(args[1], true) {
                    return Some(args[0]);
                }
                if self.is_bool_const(args[0], true) {
                    return Some(args[1]);
                }
                None
            }
            Prim::Bin(BinOp::Or) => {
                if self.is_bool_const(args[1], false) {
                    return Some(args[0]);
                }
                if self.is_bool_const(args[0], false) {
                    return Some(args[1]);
                }
                None
            }
            Prim::Un(UnOp::Not) => match self.defs.get(&args[0]) {
                Some(Def::Prim(Prim::Un(UnOp::Not), inner)) => Some(inner[0]),
                _ => None,
            },
            Prim::Conv(b) if f.ty(args[0]).elem == Elem::Base(*b) => Some(args[0]),
            // A tensor comprehension's frame from one selection per axis:
            // min(v, v) is v.
            Prim::MinVectors | Prim::MaxVectors if args.iter().all(|a| *a == args[0]) => Some(args[0]),
            Prim::Bin(BinOp::Min | BinOp::Max) if args[0] == args[1] => Some(args[0]),
            Prim::Take => {
                let n = self.konst(args[0]).and_then(util::int_scalar)?;
                let len = crate::sema::prim_ty::vector_len(f.ty(args[1]))?;
                (n == len as i64).then_some(args[1])
            }
            Prim::Drop if self.is_int_const(args[0], 0) && f.ty(args[1]).shape.rank_if_known() == Some(1) => {
                Some(args[1])
            }
            Prim::Cat => {
                if crate::sema::prim_ty::vector_len(f.ty(args[1])) == Some(0)
                    && f.ty(args[0]).shape.rank_if_known() == Some(1)
                {
                    return Some(args[0]);
                }
                if crate::sema::prim_ty::vector_len(f.ty(args[0])) == Some(0)
                    && f.ty(args[1]).shape.rank_if_known() == Some(1)
                {
                    return Some(args[1]);
                }
                None
            }
            _ => None,
        }
    }

    fn rewrite_check(&mut self, f: &mut Function, s: Stmt, c: &CheckOp) -> Action {
        let holds = match &c.check {
            Check::SameShape(a, b) => {
                a == b
                    || match (self.konst(*a).and_then(util::int_vec), self.konst(*b).and_then(util::int_vec)) {
                        (Some(x), Some(y)) => x.is_empty() || y.is_empty() || x == y,
                        _ => {
                            let empty = |v: ValueId| crate::sema::prim_ty::vector_len(f.ty(v)) == Some(0);
                            empty(*a) || empty(*b)
                        }
                    }
            }
            Check::InBounds { index, shape } => {
                let idx = match self.konst(*index) {
                    Some(Value::Scalar(Scalar::Int(_, i))) => Some(vec![*i]),
                    Some(v) => util::int_vec(v),
                    None => None,
                };
                match (idx, self.konst(*shape).and_then(util::int_vec)) {
                    (Some(i), Some(sh)) => i.len() <= sh.len() && i.iter().zip(&sh).all(|(x, n)| *x >= 0 && x < n),
                    _ => false,
                }
            }
            Check::Assert(v) => self.is_bool_const(*v, true),
            Check::Conforms(v, ty) => f.ty(*v).subset_of(ty),
            Check::Extents(v) => {
                self.konst(*v).and_then(util::int_vec).is_some_and(|e| e.iter().all(|&x| x >= 0))
                    || matches!(self.defs.get(v), Some(Def::Prim(Prim::Shape, _)))
            }
            Check::Reshape { shape, from } => {
                let vector = |v: ValueId| self.konst(v).and_then(util::int_vec);
                match (vector(*shape), vector(*from)) {
                    (Some(s), Some(x)) => {
                        let x: Vec<usize> = x.iter().map(|&d| d.max(0) as usize).collect();
                        crate::interp::prims::reshape_error(&s, &x).is_none()
                    }
                    _ => shape == from,
                }
            }
        };
        if holds {
            self.counts.checks += 1;
            Action::Drop
        } else {
            Action::Keep(s)
        }
    }

    fn rewrite_loop(&mut self, f: &mut Function, mut s: Stmt) -> Action {
        let Op::Loop { init, params, cond, body, test_first, .. } = &mut s.op else { return Action::Keep(s) };
        // A `while` whose condition is constantly false never runs.
        if *test_first
            && cond.stmts.iter().all(|t| !util::may_fail(&t.op))
            && let Some(c) = cond.yields.first()
            && self.is_bool_const(*c, false)
        {
            let init = init.clone();
            self.counts.branches += 1;
            self.forward(f, &s.defs, &init);
            return Action::Forward;
        }
        // Carried values the body never changes are the initial values.
        let mut keep = Vec::new();
        let mut dropped = false;
        for k in 0..params.len() {
            if body.yields[k] == params[k] {
                let (p, i, d) = (params[k], init[k], s.defs[k]);
                self.subst.insert(p, i);
                self.forward(f, &[d], &[i]);
                dropped = true;
                self.counts.copies += 1;
            } else {
                keep.push(k);
            }
        }
        if dropped {
            let pick = |v: &Vec<ValueId>| keep.iter().map(|&k| v[k]).collect::<Vec<_>>();
            *init = pick(init);
            *params = pick(params);
            body.yields = pick(&body.yields);
            s.defs = pick(&s.defs);
            // The dropped parameters are read through the substitution.
            util::substitute(cond, &self.subst);
            util::substitute(body, &self.subst);
        }
        Action::Keep(s)
    }

    fn rewrite_with(&mut self, f: &mut Function, mut s: Stmt) -> Action {
        let Op::With(w) = &mut s.op else { return Action::Keep(s) };
        // Parts with constant, empty index sets contribute nothing.
        let before = w.parts.len();
        let consts = &self.consts;
        w.parts.retain(|p| {
            let lo = consts.get(&p.lower).and_then(util::int_vec);
            let hi = consts.get(&p.upper).and_then(util::int_vec);
            !matches!((lo, hi), (Some(l), Some(h)) if l.len() == h.len() && l.iter().zip(&h).any(|(a, b)| a >= b))
        });
        if w.parts.len() != before {
            self.counts.withs += (before - w.parts.len()) as u64;
        }
        if !w.parts.is_empty() {
            // A single genarray/modarray part copying the whole of an array of the
            // frame's shape: the with-loop is that array.
            if let (1, [op]) = (w.parts.len(), w.ops.as_slice())
                && let Some(a) = self.copy_of(f, w, op)
            {
                self.counts.withs += 1;
                self.forward(f, &s.defs, &[a]);
                return Action::Forward;
            }
            return Action::Keep(s);
        }
        // No parts: the operators' results are known without iterating.
        let mut stmts = Vec::new();
        let mut results = Vec::new();
        for (k, op) in w.ops.iter().enumerate() {
            let r = match op {
                WithOp::Modarray { array } => *array,
                WithOp::Fold { neutral, .. } => *neutral,
                WithOp::Scan { .. } | WithOp::Filter { .. } => return Action::Keep(s),
                WithOp::Genarray { shape, default } => {
                    let fill = match default {
                        Some(d) => *d,
                        None => match w.cells[k].as_ref().and_then(|c| c.shape.extents().map(|e| (c.elem, e))) {
                            Some((Elem::Base(b), e)) => {
                                let n: usize = e.iter().product();
                                let Ok(elems) = crate::interp::value::Elems::filled(Scalar::zero(b), n) else {
                                    return Action::Keep(s);
                                };
                                util::emit_const(f, &mut stmts, Value::from_parts(e, elems), s.span)
                            }
                            _ => return Action::Keep(s),
                        },
                    };
                    let ty = f.ty(s.defs[k]).clone();
                    let v = f.new_value(ty, None);
                    stmts.push(Stmt {
                        defs: vec![v],
                        op: Op::prim(Prim::Genarray, vec![*shape, fill]),
                        span: s.span,
                        blame: s.blame,
                    });
                    v
                }
            };
            results.push(r);
        }
        self.counts.withs += 1;
        self.forward(f, &s.defs, &results);
        for t in &stmts {
            self.record(f, t);
        }
        Action::Splice(stmts)
    }

    /// `with (0 <= iv < shape(a)) : a[iv]` (genarray over `shape(a)` or modarray of
    /// anything of `a`'s shape): the array `a` itself.
    fn copy_of(&self, f: &Function, w: &With, op: &WithOp) -> Option<ValueId> {
        let p = &w.parts[0];
        if p.step.is_some() || p.width.is_some() || p.body.yields.len() != 1 {
            return None;
        }
        let y = p.body.yields[0];
        let iv = p.index?;
        // The yield must be `sel(iv, a)` with `a` from outside.
        let a = p.body.stmts.iter().find_map(|t| match &t.op {
            Op::Prim { prim: Prim::Sel, args, .. } if t.defs[0] == y && args[0] == iv => Some(args[1]),
            _ => None,
        })?;
        if util::defined_in(&p.body).contains(&a) {
            return None;
        }
        // Every other statement in the part must be removable (checks on iv are
        // proven by the bounds below).
        let frame: Vec<i64> = match op {
            WithOp::Genarray { shape, .. } => self.konst(*shape).and_then(util::int_vec)?,
            WithOp::Modarray { array } => util::extents(f, *array)?.iter().map(|&e| e as i64).collect(),
            WithOp::Fold { .. } | WithOp::Scan { .. } | WithOp::Filter { .. } => return None,
        };
        let lo = self.konst(p.lower).and_then(util::int_vec)?;
        let hi = self.konst(p.upper).and_then(util::int_vec)?;
        let a_shape: Vec<i64> = util::extents(f, a)?.iter().map(|&e| e as i64).collect();
        let whole = lo.iter().all(|&l| l == 0) && hi == frame && a_shape == frame;
        let only_checks = p.body.stmts.iter().all(|t| match &t.op {
            Op::Prim { prim: Prim::Sel, .. } => t.defs[0] == y,
            Op::Prim { prim: Prim::Shape, .. } | Op::Const(_) => true,
            Op::Check(CheckOp { check: Check::InBounds { index, .. }, .. }) => *index == iv,
            _ => false,
        });
        (whole && only_checks && f.ty(a).elem == f.ty(y).elem).then_some(a)
    }
}

/// The cell shape of a `genarray` operator: what every part yields and the
/// default, met; `None` when nothing says.
fn genarray_cell<'t>(w: &With, k: usize, default: Option<ValueId>, ty: impl Fn(ValueId) -> &'t Ty) -> Option<Shape> {
    let yields = w.parts.iter().map(|p| &ty(w.element_yield(p, k)).shape);
    met_shapes(default.map(|d| &ty(d).shape).into_iter().chain(yields))
        .or_else(|| w.cells[k].as_ref().map(|c| c.shape.clone()))
}

/// The meet of shapes (a shape that does not meet the others is left out);
/// `None` for none.
fn met_shapes<'s>(shapes: impl IntoIterator<Item = &'s Shape>) -> Option<Shape> {
    shapes.into_iter().fold(None, |acc, t| {
        Some(match acc {
            Some(c) => c.meet(t).unwrap_or(c),
            None => t.clone(),
        })
    })
}

/// The types of the values `b` defines when some values (in `tys`) have
/// narrower types than their declared ones: primitives' result types again
/// from their arguments', array literals, `genarray` frames of known rank,
/// `modarray`s and `if` joins. Adds to `tys` the types that come out
/// narrower than declared. Nested loops keep their declared types.
fn infer_block(f: &Function, b: &Block, consts: &HashMap<ValueId, Value>, tys: &mut HashMap<ValueId, Ty>) {
    fn ty<'t>(f: &'t Function, tys: &'t HashMap<ValueId, Ty>, v: ValueId) -> &'t Ty {
        tys.get(&v).unwrap_or(f.ty(v))
    }
    fn narrow(f: &Function, tys: &mut HashMap<ValueId, Ty>, d: ValueId, shape: &Shape) {
        let declared = ty(f, tys, d).clone();
        if let Some(m) = declared.shape.meet(shape)
            && m != declared.shape
        {
            tys.insert(d, Ty::new(declared.elem, m));
        }
    }
    for s in &b.stmts {
        match &s.op {
            Op::Prim { prim, args, .. } => {
                let arg_tys: Vec<Option<&Ty>> = args.iter().map(|a| Some(ty(f, tys, *a))).collect();
                let vals: Vec<Option<&Value>> = args.iter().map(|a| consts.get(a)).collect();
                if let Ok(Some(t)) = prim_type(prim, &arg_tys, &vals)
                    && t.elem == f.ty(s.defs[0]).elem
                {
                    narrow(f, tys, s.defs[0], &t.shape);
                }
            }
            Op::Array(args) => {
                if let Some(cell) = met_shapes(args.iter().map(|a| &ty(f, tys, *a).shape)) {
                    narrow(f, tys, s.defs[0], &Shape::known(&[args.len()]).concat(&cell));
                }
            }
            Op::If { then_block, else_block, .. } => {
                infer_block(f, then_block, consts, tys);
                infer_block(f, else_block, consts, tys);
                for (k, d) in s.defs.iter().enumerate() {
                    let (a, b) = (ty(f, tys, then_block.yields[k]), ty(f, tys, else_block.yields[k]));
                    if a.elem == b.elem {
                        let joined = a.shape.join(&b.shape);
                        narrow(f, tys, *d, &joined);
                    }
                }
            }
            Op::With(w) => {
                for p in &w.parts {
                    infer_block(f, &p.body, consts, tys);
                }
                for (k, op) in w.ops.iter().enumerate() {
                    let d = s.defs[k];
                    match op {
                        WithOp::Genarray { shape, default } => {
                            let Some(n) = crate::sema::prim_ty::vector_len(ty(f, tys, *shape)) else { continue };
                            if let Some(cell) = genarray_cell(w, k, *default, |v| ty(f, tys, v)) {
                                narrow(f, tys, d, &Shape::rank(n).concat(&cell));
                            }
                        }
                        WithOp::Modarray { array } => {
                            let t = ty(f, tys, *array).shape.clone();
                            narrow(f, tys, d, &t);
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
}

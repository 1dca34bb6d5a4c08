//! Index arithmetic for with-loop transformations: affine expressions over
//! symbols, index boxes, and reading them off the IR.
//!
//! A bound component is an [`Affine`] expression `c + Σ k·atom` whose atoms are
//! int scalars of the program, or components of int vectors (`shape(a)[1]`).
//! Constant bounds are affine expressions without atoms. Two bounds compare when
//! their difference is constant, or when what is known of the atoms ([`Order`])
//! bounds the difference: array extents are never negative, and the conditions
//! of enclosing branches and loops give ranges ([`Facts`], [`Known`]: `n >= 3`
//! orders `1` and `n - 1`). Otherwise the order is unknown and callers give up.
//! So everything here works for static shapes and, as far as the symbols cancel
//! or are bounded, for generic code (seed 000's symbolic attributes, with equal
//! shapes as equal values).
//!
//! Like the rest of the optimiser, the arithmetic here is over the integers:
//! index and extent expressions are assumed not to wrap around.

use crate::HashMap;
use std::collections::BTreeMap;

use crate::interp::ops::BinOp;
use crate::interp::value::{Scalar, Value};
use crate::ir::*;
use crate::sema::hir::Prim;
use crate::span::Span;

use super::util;

/// An int scalar value, or component `k` of an int vector value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Atom {
    pub value: ValueId,
    pub component: Option<usize>,
}

/// `c + Σ coefficient·atom`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Affine {
    pub terms: BTreeMap<Atom, i64>,
    pub c: i64,
}

impl Affine {
    pub fn constant(c: i64) -> Affine {
        Affine { terms: BTreeMap::new(), c }
    }

    pub fn atom(a: Atom) -> Affine {
        let mut terms = BTreeMap::new();
        terms.insert(a, 1);
        Affine { terms, c: 0 }
    }

    pub fn as_const(&self) -> Option<i64> {
        self.terms.is_empty().then_some(self.c)
    }

    pub fn add(&self, o: &Affine) -> Affine {
        let mut r = self.clone();
        r.c = r.c.saturating_add(o.c);
        for (a, k) in &o.terms {
            let e = r.terms.entry(*a).or_insert(0);
            *e += k;
            if *e == 0 {
                r.terms.remove(a);
            }
        }
        r
    }

    pub fn scale(&self, k: i64) -> Affine {
        if k == 0 {
            return Affine::constant(0);
        }
        Affine { terms: self.terms.iter().map(|(a, x)| (*a, x * k)).collect(), c: self.c.saturating_mul(k) }
    }

    pub fn sub(&self, o: &Affine) -> Affine {
        self.add(&o.scale(-1))
    }

    pub fn plus(&self, c: i64) -> Affine {
        let mut r = self.clone();
        r.c = r.c.saturating_add(c);
        r
    }

    /// `self - o` when it is a constant.
    pub fn minus(&self, o: &Affine) -> Option<i64> {
        self.sub(o).as_const()
    }

    /// The smaller of two bounds, when their order is known.
    pub fn min(&self, o: &Affine) -> Option<Affine> {
        self.min_in(o, &CONSTANT)
    }

    pub fn max(&self, o: &Affine) -> Option<Affine> {
        self.max_in(o, &CONSTANT)
    }

    /// The smaller of two bounds, when `ord` tells their order.
    pub fn min_in(&self, o: &Affine, ord: &dyn Order) -> Option<Affine> {
        match ord.compare(self, o) {
            (_, Some(hi)) if hi <= 0 => Some(self.clone()),
            (Some(lo), _) if lo >= 0 => Some(o.clone()),
            _ => None,
        }
    }

    /// The larger of two bounds, when `ord` tells their order.
    pub fn max_in(&self, o: &Affine, ord: &dyn Order) -> Option<Affine> {
        match ord.compare(self, o) {
            (Some(lo), _) if lo >= 0 => Some(self.clone()),
            (_, Some(hi)) if hi <= 0 => Some(o.clone()),
            _ => None,
        }
    }
}

/// An integer range: the least and greatest value, where bounded.
pub type Range = (Option<i64>, Option<i64>);

/// What is known of the atoms of affine expressions where they are used.
pub trait Order {
    /// The least and greatest value `atom` can have.
    fn atom_range(&self, atom: &Atom) -> Range;

    /// The least and greatest value of `a` (interval arithmetic over its atoms).
    fn range(&self, a: &Affine) -> Range {
        let (mut lo, mut hi) = (Some(a.c), Some(a.c));
        for (atom, &k) in &a.terms {
            let (l, h) = self.atom_range(atom);
            let (l, h) = if k >= 0 { (l, h) } else { (h, l) };
            lo = lo.zip(l).and_then(|(x, l)| x.checked_add(l.checked_mul(k)?));
            hi = hi.zip(h).and_then(|(x, h)| x.checked_add(h.checked_mul(k)?));
        }
        (lo, hi)
    }

    /// The range of `a - b`: a single value when the difference is constant.
    fn compare(&self, a: &Affine, b: &Affine) -> Range {
        let d = a.sub(b);
        match d.as_const() {
            Some(c) => (Some(c), Some(c)),
            None => self.range(&d),
        }
    }
}

/// Whether every value of the range is `> x` (`Some(false)`: none is; `None`: unknown).
pub fn above(r: Range, x: i64) -> Option<bool> {
    match r {
        (Some(lo), _) if lo > x => Some(true),
        (_, Some(hi)) if hi <= x => Some(false),
        _ => None,
    }
}

/// Nothing known of any atom: bounds compare only when their difference is constant.
#[derive(Clone, Copy, Debug)]
pub struct Constant;

pub const CONSTANT: Constant = Constant;

impl Order for Constant {
    fn atom_range(&self, _: &Atom) -> Range {
        (None, None)
    }
}

/// Ranges of atoms established by conditions: `n >= 3` where the code runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    ranges: BTreeMap<Atom, Range>,
    /// Facts `d >= 0` over several atoms (`n - m >= 0`: one extent is at
    /// least another), at most [`MAX_RELATIONS`].
    relations: Vec<Affine>,
}

/// Relations between several atoms kept per [`Facts`].
pub const MAX_RELATIONS: usize = 16;

impl Facts {
    /// Records that `d >= 0`: a range for its atom when `d` is one atom times a
    /// coefficient plus a constant, else a relation.
    pub fn add(&mut self, d: &Affine) {
        if d.terms.len() > 1 {
            if !self.relations.contains(d) && self.relations.len() < MAX_RELATIONS {
                self.relations.push(d.clone());
            }
            return;
        }
        let mut terms = d.terms.iter();
        let (Some((atom, &k)), None) = (terms.next(), terms.next()) else { return };
        // k·x + c >= 0: x >= ceil(-c / k) for k > 0, x <= floor(c / -k) for k < 0.
        let bound = if k > 0 { (Some(div_ceil(-d.c, k)), None) } else { (None, Some(div_floor(d.c, -k))) };
        let e = self.ranges.entry(*atom).or_insert((None, None));
        *e = meet(*e, bound);
    }

    /// Records what `cond == holds` establishes ([`conditions`]), judged with
    /// what `ord` knows already.
    pub fn assume(&mut self, r: &Reader, ord: &dyn Order, cond: ValueId, holds: bool) {
        let mut ds = Vec::new();
        conditions(r, ord, cond, holds, &mut ds, 0);
        for d in &ds {
            self.add(d);
        }
    }

    pub fn get(&self, atom: &Atom) -> Range {
        self.ranges.get(atom).copied().unwrap_or((None, None))
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty() && self.relations.is_empty()
    }

    /// The relations over several atoms (each `>= 0`).
    pub fn relations(&self) -> &[Affine] {
        &self.relations
    }

    /// Every atom with a known range.
    pub fn atoms(&self) -> impl Iterator<Item = (&Atom, &Range)> {
        self.ranges.iter()
    }
}

fn div_floor(a: i64, b: i64) -> i64 {
    let q = a / b;
    if (a % b != 0) && ((a < 0) != (b < 0)) { q - 1 } else { q }
}

fn div_ceil(a: i64, b: i64) -> i64 {
    -div_floor(-a, b)
}

/// The intersection of two ranges.
pub fn meet(a: Range, b: Range) -> Range {
    let lo = match (a.0, b.0) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    };
    let hi = match (a.1, b.1) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    };
    (lo, hi)
}

/// The facts `cond == holds` establishes, each an affine expression known to
/// be `>= 0`: comparisons of int scalars, through `&&` (when it holds), `||`
/// (when it fails), `!` and `all([…])` of comparisons written out. A compared
/// operand computed by arithmetic must not wrap around ([`exact`]).
pub fn conditions(r: &Reader, ord: &dyn Order, cond: ValueId, holds: bool, out: &mut Vec<Affine>, depth: usize) {
    if depth > 16 {
        return;
    }
    match r.defs.def(cond) {
        Some(Def::Prim(Prim::Bin(op), a)) if a.len() == 2 && r.is_int_scalar(a[0]) && r.is_int_scalar(a[1]) => {
            let (x, y) = (r.scalar(a[0]), r.scalar(a[1]));
            if !exact(&x, ord) || !exact(&y, ord) {
                return;
            }
            // Normalised to `x >= y`, `x > y` or `x == y`.
            let op = if holds {
                op
            } else {
                match op {
                    BinOp::Lt => BinOp::Ge,
                    BinOp::Le => BinOp::Gt,
                    BinOp::Gt => BinOp::Le,
                    BinOp::Ge => BinOp::Lt,
                    BinOp::Ne => BinOp::Eq,
                    _ => return,
                }
            };
            match op {
                BinOp::Ge => out.push(x.sub(&y)),
                BinOp::Gt => out.push(x.sub(&y).plus(-1)),
                BinOp::Le => out.push(y.sub(&x)),
                BinOp::Lt => out.push(y.sub(&x).plus(-1)),
                BinOp::Eq => {
                    out.push(x.sub(&y));
                    out.push(y.sub(&x));
                }
                _ => {}
            }
        }
        Some(Def::Prim(Prim::Bin(BinOp::And), a)) if holds && a.len() == 2 => {
            conditions(r, ord, a[0], true, out, depth + 1);
            conditions(r, ord, a[1], true, out, depth + 1);
        }
        Some(Def::Prim(Prim::Bin(BinOp::Or), a)) if !holds && a.len() == 2 => {
            conditions(r, ord, a[0], false, out, depth + 1);
            conditions(r, ord, a[1], false, out, depth + 1);
        }
        Some(Def::Prim(Prim::Un(crate::interp::ops::UnOp::Not), a)) if a.len() == 1 => {
            conditions(r, ord, a[0], !holds, out, depth + 1)
        }
        Some(Def::Prim(Prim::All, a)) if holds && a.len() == 1 => {
            if let Some(Def::Array(items)) = r.defs.def(a[0]) {
                for c in items {
                    conditions(r, ord, c, true, out, depth + 1);
                }
            }
        }
        _ => {}
    }
}

/// Whether the `int` value read as `a` is `a` exactly: a constant or a value
/// itself, or arithmetic whose result `ord` knows to fit in an `int` (`int`
/// arithmetic wraps around; as long as the true result fits, the wrapped one
/// is the same).
pub fn exact(a: &Affine, ord: &dyn Order) -> bool {
    plain(a) || fits_int(ord.range(a))
}

/// A constant, or one atom itself: read as its value whatever it is.
fn plain(a: &Affine) -> bool {
    a.terms.is_empty() || (a.c == 0 && a.terms.len() == 1 && a.terms.values().all(|&k| k == 1))
}

/// Whether every value of the range fits an `int`.
fn fits_int(r: Range) -> bool {
    matches!(r, (Some(lo), Some(hi)) if lo >= i32::MIN as i64 && hi <= i32::MAX as i64)
}

/// What is known where some code runs: the [`Facts`] of its conditions, and
/// what the atoms' definitions tell — extents (components of `shape(x)`) are
/// never negative, `max(x, 1) >= 1`, `abs(x) >= 0`, `aplmod(x, m)` lies in
/// `[0, m)` for positive `m`, a `bool` converted to `int` is 0 or 1.
pub struct Known<'a> {
    pub reader: &'a Reader<'a>,
    pub facts: &'a Facts,
}

impl std::fmt::Debug for Known<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Known").field("facts", self.facts).finish()
    }
}

impl Known<'_> {
    fn atom_range_depth(&self, atom: &Atom, depth: usize) -> Range {
        let from_facts = self.facts.get(atom);
        if depth > 8 {
            return from_facts;
        }
        let r = self.reader;
        // An operand's range, where its reading is its value: `int`
        // arithmetic wraps, so `n + 1` read as an affine expression is the
        // operand only where the result fits an `int` (`max(n + 1, 0)` is 0
        // for `n = 2147483647`).
        let scalar = |v: ValueId| self.exact_range(&r.scalar(v), depth + 1);
        let from_def = match (atom.component, r.defs.def(atom.value)) {
            // Extents of arrays: `int`s, never negative.
            (Some(_), Some(Def::Prim(Prim::Shape, _))) => (Some(0), Some(i32::MAX as i64)),
            (None, Some(Def::Prim(Prim::Bin(op), a)))
                if a.len() == 2 && r.is_int_scalar(a[0]) && r.is_int_scalar(a[1]) =>
            {
                let (x, y) = (scalar(a[0]), scalar(a[1]));
                match op {
                    BinOp::Max => (max_opt(x.0, y.0, true), x.1.zip(y.1).map(|(p, q)| p.max(q))),
                    BinOp::Min => (x.0.zip(y.0).map(|(p, q)| p.min(q)), max_opt(x.1, y.1, false)),
                    // APL's mod takes the divisor's sign: in [0, m) for m > 0.
                    BinOp::AplMod if y.0.is_some_and(|l| l > 0) => (Some(0), y.1.map(|h| h - 1)),
                    BinOp::Mod if x.0.is_some_and(|l| l >= 0) && y.0.is_some_and(|l| l > 0) => {
                        (Some(0), y.1.map(|h| h - 1))
                    }
                    _ => (None, None),
                }
            }
            (None, Some(Def::Prim(Prim::Un(crate::interp::ops::UnOp::Abs), a))) if r.is_int_scalar(a[0]) => {
                let (l, h) = scalar(a[0]);
                let hi = match (l, h) {
                    (Some(l), Some(h)) => Some(l.saturating_abs().max(h.saturating_abs())),
                    _ => None,
                };
                // `abs` of the least `int` is that `int` (it wraps): never
                // negative only where the operand cannot be it.
                let lo = match (l, h) {
                    (Some(l), _) if l <= i32::MIN as i64 => None,
                    (None, _) => None,
                    (Some(l), _) if l >= 0 => Some(l),
                    (_, Some(h)) if h <= 0 => Some(h.saturating_neg()),
                    _ => Some(0),
                };
                (lo, hi)
            }
            (None, Some(Def::Prim(Prim::Conv(crate::syntax::ast::BaseType::Int), a)))
                if r.ty(a[0]).elem == crate::sema::hir::Elem::Base(crate::syntax::ast::BaseType::Bool) =>
            {
                (Some(0), Some(1))
            }
            _ => (None, None),
        };
        meet(from_facts, from_def)
    }

    /// The range of `a` where reading it as an affine expression gives the
    /// value `int` arithmetic computes ([`exact`]); unknown elsewhere.
    fn exact_range(&self, a: &Affine, depth: usize) -> Range {
        let range = self.range_depth(a, depth);
        if plain(a) || fits_int(range) { range } else { (None, None) }
    }

    fn range_depth(&self, a: &Affine, depth: usize) -> Range {
        let (mut lo, mut hi) = (Some(a.c), Some(a.c));
        for (atom, &k) in &a.terms {
            let (l, h) = self.atom_range_depth(atom, depth);
            let (l, h) = if k >= 0 { (l, h) } else { (h, l) };
            lo = lo.zip(l).and_then(|(x, l)| x.checked_add(l.checked_mul(k)?));
            hi = hi.zip(h).and_then(|(x, h)| x.checked_add(h.checked_mul(k)?));
        }
        // A relation `r >= 0` that cancels terms of `a`: `a >= a - r` and `a <= a + r`.
        if depth < 2 {
            let mut relations: Vec<Affine> = self.facts.relations().to_vec();
            for atom in a.terms.keys() {
                relations.extend(self.def_relations(atom, depth));
            }
            for r in &relations {
                let less = a.sub(r);
                if less.terms.len() < a.terms.len() {
                    let (l, _) = self.range_depth(&less, depth + 1);
                    lo = max_opt(lo, l, true);
                }
                let more = a.add(r);
                if more.terms.len() < a.terms.len() {
                    let (_, h) = self.range_depth(&more, depth + 1);
                    hi = max_opt(hi, h, false);
                }
            }
        }
        (lo, hi)
    }
}

/// The larger (`larger`) or smaller of two optional bounds where one missing
/// bound does not matter: a lower bound of `max(x, y)` is either's lower bound.
fn max_opt(a: Option<i64>, b: Option<i64>, larger: bool) -> Option<i64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if larger { x.max(y) } else { x.min(y) }),
        (x, y) => x.or(y),
    }
}

impl Known<'_> {
    /// Relations (each `>= 0`) that an atom's definition establishes with
    /// others: a component of `min_vectors(a, b, …)` (a tensor comprehension's
    /// frame) is at most the same component of each argument, of
    /// `max_vectors` at least; `min(x, y)` is at most `x` and `y`, `max` at least.
    fn def_relations(&self, atom: &Atom, depth: usize) -> Vec<Affine> {
        let r = self.reader;
        let me = Affine::atom(*atom);
        let mut out = Vec::new();
        match (atom.component, r.defs.def(atom.value)) {
            (Some(k), Some(Def::Prim(prim @ (Prim::MinVectors | Prim::MaxVectors), args))) => {
                for v in args {
                    let Some(c) = r.vector(v).and_then(|c| c.get(k).cloned()) else { continue };
                    out.push(if prim == Prim::MinVectors { c.sub(&me) } else { me.sub(&c) });
                }
            }
            (None, Some(Def::Prim(Prim::Bin(op @ (BinOp::Min | BinOp::Max)), args)))
                if args.len() == 2 && args.iter().all(|x| r.is_int_scalar(*x)) =>
            {
                for x in args {
                    // Only an operand read as its value (`n + 1` may wrap).
                    let c = r.scalar(x);
                    if !plain(&c) && !fits_int(self.range_depth(&c, depth + 1)) {
                        continue;
                    }
                    out.push(if op == BinOp::Min { c.sub(&me) } else { me.sub(&c) });
                }
            }
            _ => {}
        }
        out
    }
}

impl Order for Known<'_> {
    fn atom_range(&self, atom: &Atom) -> Range {
        self.atom_range_depth(atom, 0)
    }

    fn range(&self, a: &Affine) -> Range {
        self.range_depth(a, 0)
    }
}

/// A dense box `lo <= iv < hi` of index vectors.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IndexBox {
    pub lo: Vec<Affine>,
    pub hi: Vec<Affine>,
}

impl IndexBox {
    pub fn rank(&self) -> usize {
        self.lo.len()
    }

    /// `Some(true)`: no index; `Some(false)`: at least one; `None`: unknown.
    pub fn is_empty(&self) -> Option<bool> {
        self.is_empty_in(&CONSTANT)
    }

    /// [`IndexBox::is_empty`], with what `ord` knows.
    pub fn is_empty_in(&self, ord: &dyn Order) -> Option<bool> {
        let mut all_nonempty = true;
        for (l, h) in self.lo.iter().zip(&self.hi) {
            match above(ord.compare(h, l), 0) {
                Some(false) => return Some(true),
                Some(true) => {}
                None => all_nonempty = false,
            }
        }
        if all_nonempty { Some(false) } else { None }
    }

    /// The number of indices, when constant.
    pub fn count(&self) -> Option<u128> {
        let mut n: u128 = 1;
        for (l, h) in self.lo.iter().zip(&self.hi) {
            n = n.saturating_mul(h.minus(l)?.max(0) as u128);
        }
        Some(n)
    }

    /// The intersection, when the order of the bounds involved is known.
    pub fn intersect(&self, o: &IndexBox) -> Option<IndexBox> {
        self.intersect_in(o, &CONSTANT)
    }

    /// [`IndexBox::intersect`], with what `ord` knows.
    pub fn intersect_in(&self, o: &IndexBox, ord: &dyn Order) -> Option<IndexBox> {
        let mut lo = Vec::with_capacity(self.rank());
        let mut hi = Vec::with_capacity(self.rank());
        for d in 0..self.rank() {
            lo.push(self.lo[d].max_in(&o.lo[d], ord)?);
            hi.push(self.hi[d].min_in(&o.hi[d], ord)?);
        }
        Some(IndexBox { lo, hi })
    }

    /// Whether `self` lies inside `o` (`None`: unknown). Empty boxes are inside anything.
    pub fn inside(&self, o: &IndexBox) -> Option<bool> {
        self.inside_in(o, &CONSTANT)
    }

    /// [`IndexBox::inside`], with what `ord` knows.
    pub fn inside_in(&self, o: &IndexBox, ord: &dyn Order) -> Option<bool> {
        if self.is_empty_in(ord) == Some(true) {
            return Some(true);
        }
        let mut all = true;
        for d in 0..self.rank() {
            let lo_ok = above(ord.compare(&self.lo[d], &o.lo[d]), -1);
            let hi_ok = above(ord.compare(&o.hi[d], &self.hi[d]), -1);
            match (lo_ok, hi_ok) {
                (Some(true), Some(true)) => {}
                (Some(false), _) | (_, Some(false)) => {
                    // Outside on this axis, unless the box is empty (unknown).
                    return if self.is_empty_in(ord) == Some(false) { Some(false) } else { None };
                }
                _ => all = false,
            }
        }
        if all { Some(true) } else { None }
    }

    /// `self` minus `o` as disjoint boxes (slabs axis by axis), when the order of
    /// the bounds is known. Pieces known to be empty are left out; pieces whose
    /// emptiness is unknown are sub-boxes of `self` and harmless when empty.
    pub fn subtract(&self, o: &IndexBox) -> Option<Vec<IndexBox>> {
        self.subtract_in(o, &CONSTANT)
    }

    /// [`IndexBox::subtract`], with what `ord` knows.
    pub fn subtract_in(&self, o: &IndexBox, ord: &dyn Order) -> Option<Vec<IndexBox>> {
        if self.inside_in(o, ord) == Some(true) {
            return Some(Vec::new());
        }
        let cut = self.intersect_in(o, ord)?;
        for d in 0..self.rank() {
            match above(ord.compare(&cut.hi[d], &cut.lo[d]), 0) {
                None => return None,
                Some(false) => return Some(vec![self.clone()]),
                Some(true) => {}
            }
        }
        let mut out = Vec::new();
        let mut rest = self.clone();
        for d in 0..self.rank() {
            let mut below = rest.clone();
            below.hi[d] = cut.lo[d].clone();
            let mut over = rest.clone();
            over.lo[d] = cut.hi[d].clone();
            // A piece not known to be empty stays, whether or not it is
            // known to hold indices (one of unknown width, `[0, m - 3)`
            // where only `m >= 3` is known, may).
            for piece in [below, over] {
                if piece.is_empty_in(ord) != Some(true) {
                    out.push(piece);
                }
            }
            rest.lo[d] = cut.lo[d].clone();
            rest.hi[d] = cut.hi[d].clone();
        }
        Some(out)
    }

    /// `self` minus each of `others`.
    pub fn subtract_all(&self, others: &[IndexBox]) -> Option<Vec<IndexBox>> {
        self.subtract_all_in(others, &CONSTANT)
    }

    /// [`IndexBox::subtract_all`], with what `ord` knows.
    pub fn subtract_all_in(&self, others: &[IndexBox], ord: &dyn Order) -> Option<Vec<IndexBox>> {
        let mut pieces = vec![self.clone()];
        for o in others {
            let mut next = Vec::new();
            for p in &pieces {
                next.extend(p.subtract_in(o, ord)?);
            }
            pieces = next;
        }
        Some(pieces)
    }
}

/// What the interpretation of values looks at: their definitions.
#[derive(Clone, Debug)]
pub enum Def {
    Const(Value),
    Prim(Prim, Vec<ValueId>),
    Array(Vec<ValueId>),
}

/// Definitions of every constant, primitive and array literal in a function.
pub fn defs(f: &Function) -> HashMap<ValueId, Def> {
    // Sized for every value the function has made (most are such definitions):
    // grown from empty, the map rehashed a dozen times per call.
    let mut out = HashMap::with_capacity_and_hasher(f.values.len(), Default::default());
    add_defs(&f.body, &mut out);
    out
}

/// Definitions made in a block (nested ones too), looked up before those of
/// `outer`: a loop body's, while a pass walking the function has only
/// reached the loop.
pub struct BlockDefs<'a> {
    pub inner: HashMap<ValueId, Def>,
    pub outer: &'a dyn Defs,
}

impl std::fmt::Debug for BlockDefs<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockDefs").field("inner", &self.inner.len()).finish()
    }
}

impl<'a> BlockDefs<'a> {
    pub fn new(b: &Block, outer: &'a dyn Defs) -> BlockDefs<'a> {
        let mut inner = HashMap::default();
        add_defs(b, &mut inner);
        BlockDefs { inner, outer }
    }
}

impl Defs for BlockDefs<'_> {
    fn def(&self, v: ValueId) -> Option<Def> {
        self.inner.get(&v).cloned().or_else(|| self.outer.def(v))
    }
}

/// Adds the definitions of `b`'s statements (nested ones too) to `out`.
fn add_defs(b: &Block, out: &mut HashMap<ValueId, Def>) {
    b.walk(&mut |s| match &s.op {
        Op::Const(c) => {
            out.insert(s.defs[0], Def::Const(c.clone()));
        }
        Op::Prim { prim, args, .. } => {
            out.insert(s.defs[0], Def::Prim(prim.clone(), args.clone()));
        }
        Op::Array(args) => {
            out.insert(s.defs[0], Def::Array(args.clone()));
        }
        _ => {}
    });
}

/// Where the reader looks up definitions.
pub trait Defs {
    fn def(&self, v: ValueId) -> Option<Def>;
}

impl Defs for HashMap<ValueId, Def> {
    fn def(&self, v: ValueId) -> Option<Def> {
        self.get(&v).cloned()
    }
}

/// Reads values as affine expressions.
pub struct Reader<'a> {
    /// The function's value table (for types).
    pub values: &'a [ValueData],
    pub defs: &'a dyn Defs,
}

impl std::fmt::Debug for Reader<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader").field("values", &self.values.len()).finish()
    }
}

impl<'a> Reader<'a> {
    pub fn new(f: &'a Function, defs: &'a dyn Defs) -> Reader<'a> {
        Reader { values: &f.values, defs }
    }

    pub fn ty(&self, v: ValueId) -> &crate::sema::ty::Ty {
        &self.values[v.0 as usize].ty
    }

    fn int_const(&self, v: ValueId) -> Option<i64> {
        match self.defs.def(v)? {
            Def::Const(Value::Scalar(Scalar::Int(crate::syntax::ast::BaseType::Int, x))) => Some(x),
            _ => None,
        }
    }

    /// An int scalar value as an affine expression (an atom if nothing better).
    pub fn scalar(&self, v: ValueId) -> Affine {
        self.scalar_depth(v, 0)
    }

    fn scalar_depth(&self, v: ValueId, depth: usize) -> Affine {
        let atom = || Affine::atom(Atom { value: v, component: None });
        if depth > 64 {
            return atom();
        }
        if let Some(c) = self.int_const(v) {
            return Affine::constant(c);
        }
        match self.defs.def(v) {
            Some(Def::Prim(Prim::Bin(op), args)) if self.is_int_scalar(args[0]) && self.is_int_scalar(args[1]) => {
                let (a, b) = (self.scalar_depth(args[0], depth + 1), self.scalar_depth(args[1], depth + 1));
                match op {
                    BinOp::Add => a.add(&b),
                    BinOp::Sub => a.sub(&b),
                    BinOp::Mul => match (a.as_const(), b.as_const()) {
                        (Some(k), _) => b.scale(k),
                        (_, Some(k)) => a.scale(k),
                        _ => atom(),
                    },
                    _ => atom(),
                }
            }
            Some(Def::Prim(prim @ (Prim::Sel | Prim::IdxSel), args)) => {
                // `sel([k], v)`, or `idx_sel(k, v)` (the offset of a vector's component is its index).
                let k = match (prim, self.defs.def(args[0])) {
                    (Prim::Sel, Some(Def::Const(c))) => util::int_vec(&c).filter(|x| x.len() == 1).map(|x| x[0]),
                    (_, Some(Def::Const(c))) => util::int_scalar(&c),
                    _ => None,
                };
                match (k, self.vector_depth(args[1], depth + 1)) {
                    (Some(k), Some(comps)) if k >= 0 && (k as usize) < comps.len() => comps[k as usize].clone(),
                    _ => atom(),
                }
            }
            _ => atom(),
        }
    }

    pub fn is_int_scalar(&self, v: ValueId) -> bool {
        let t = self.ty(v);
        t.shape.is_scalar() && t.elem == crate::sema::hir::Elem::Base(crate::syntax::ast::BaseType::Int)
    }

    fn is_int_vector(&self, v: ValueId) -> Option<usize> {
        let t = self.ty(v);
        if t.elem != crate::sema::hir::Elem::Base(crate::syntax::ast::BaseType::Int) {
            return None;
        }
        crate::sema::prim_ty::vector_len(t)
    }

    /// An int vector of statically known length as affine components.
    pub fn vector(&self, v: ValueId) -> Option<Vec<Affine>> {
        self.vector_depth(v, 0)
    }

    fn vector_depth(&self, v: ValueId, depth: usize) -> Option<Vec<Affine>> {
        let n = self.is_int_vector(v)?;
        let atoms = || (0..n).map(|k| Affine::atom(Atom { value: v, component: Some(k) })).collect::<Vec<_>>();
        if depth > 64 {
            return Some(atoms());
        }
        match self.defs.def(v) {
            Some(Def::Const(c)) => Some(util::int_vec(&c)?.into_iter().map(Affine::constant).collect()),
            Some(Def::Array(elems)) => {
                if elems.len() != n || !elems.iter().all(|e| self.is_int_scalar(*e)) {
                    return Some(atoms());
                }
                Some(elems.iter().map(|e| self.scalar_depth(*e, depth + 1)).collect())
            }
            Some(Def::Prim(Prim::Modarray, args)) if self.is_int_scalar(args[2]) => {
                // `v` with one component replaced (`_set(v, k, x)` in the library).
                let k = match self.defs.def(args[1]) {
                    Some(Def::Const(c)) => util::int_vec(&c).filter(|x| x.len() == 1).map(|x| x[0]),
                    _ => None,
                };
                let mut comps = self.vector_depth(args[0], depth + 1)?;
                match k {
                    Some(k) if k >= 0 && (k as usize) < comps.len() => {
                        comps[k as usize] = self.scalar_depth(args[2], depth + 1);
                        Some(comps)
                    }
                    _ => Some(atoms()),
                }
            }
            Some(Def::Prim(prim @ (Prim::Take | Prim::Drop), args)) => {
                // `drop(1, shape(a))`: the components past the first.
                let count = match self.defs.def(args[0]) {
                    Some(Def::Const(c)) => util::int_scalar(&c),
                    _ => None,
                };
                let whole = self.vector_depth(args[1], depth + 1);
                match (count, whole) {
                    (Some(c), Some(comps)) if c >= 0 && c as usize <= comps.len() => {
                        let kept = if prim == Prim::Take { &comps[..c as usize] } else { &comps[c as usize..] };
                        if kept.len() == n { Some(kept.to_vec()) } else { Some(atoms()) }
                    }
                    _ => Some(atoms()),
                }
            }
            Some(Def::Prim(Prim::Bin(op), args)) if matches!(op, BinOp::Add | BinOp::Sub | BinOp::Mul) => {
                let side = |x: ValueId| -> Option<Vec<Affine>> {
                    if self.is_int_scalar(x) {
                        Some(vec![self.scalar_depth(x, depth + 1); n])
                    } else {
                        self.vector_depth(x, depth + 1).filter(|c| c.len() == n)
                    }
                };
                let (Some(a), Some(b)) = (side(args[0]), side(args[1])) else { return Some(atoms()) };
                let r: Option<Vec<Affine>> = a
                    .iter()
                    .zip(&b)
                    .map(|(x, y)| match op {
                        BinOp::Add => Some(x.add(y)),
                        BinOp::Sub => Some(x.sub(y)),
                        _ => match (x.as_const(), y.as_const()) {
                            (Some(k), _) => Some(y.scale(k)),
                            (_, Some(k)) => Some(x.scale(k)),
                            _ => None,
                        },
                    })
                    .collect();
                Some(r.unwrap_or_else(atoms))
            }
            _ => Some(atoms()),
        }
    }
}

/// Appends statements computing the affine scalar `a`; returns its value.
pub fn emit_scalar(f: &mut Function, out: &mut Vec<Stmt>, a: &Affine, span: Span) -> ValueId {
    let int = util::int_ty();
    let mut acc: Option<ValueId> = None;
    for (atom, k) in &a.terms {
        let base = match atom.component {
            None => atom.value,
            Some(c) => {
                let idx = util::emit_const(f, out, Value::int_vector(&[c as i64]), span);
                util::emit_prim(f, out, Prim::Sel, vec![idx, atom.value], int.clone(), span)
            }
        };
        let term = if *k == 1 {
            base
        } else {
            let kv = util::emit_const(f, out, Value::Scalar(Scalar::int(*k)), span);
            util::emit_prim(f, out, Prim::Bin(BinOp::Mul), vec![kv, base], int.clone(), span)
        };
        acc = Some(match acc {
            None => term,
            Some(x) => util::emit_prim(f, out, Prim::Bin(BinOp::Add), vec![x, term], int.clone(), span),
        });
    }
    match acc {
        None => util::emit_const(f, out, Value::Scalar(Scalar::int(a.c)), span),
        Some(x) if a.c == 0 => x,
        Some(x) => {
            let c = util::emit_const(f, out, Value::Scalar(Scalar::int(a.c)), span);
            util::emit_prim(f, out, Prim::Bin(BinOp::Add), vec![x, c], int, span)
        }
    }
}

/// Appends statements computing the vector of affine components; returns it.
pub fn emit_vector(f: &mut Function, out: &mut Vec<Stmt>, comps: &[Affine], span: Span) -> ValueId {
    if let Some(c) = comps.iter().map(Affine::as_const).collect::<Option<Vec<i64>>>() {
        return util::emit_const(f, out, Value::int_vector(&c), span);
    }
    let scalars: Vec<ValueId> = comps.iter().map(|a| emit_scalar(f, out, a, span)).collect();
    let v = f.new_value(util::int_vec_ty(Some(comps.len())), None);
    out.push(Stmt::new(vec![v], Op::Array(scalars), span));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cbox(lo: &[i64], hi: &[i64]) -> IndexBox {
        IndexBox {
            lo: lo.iter().map(|&c| Affine::constant(c)).collect(),
            hi: hi.iter().map(|&c| Affine::constant(c)).collect(),
        }
    }

    fn points(b: &IndexBox) -> Vec<Vec<i64>> {
        let lo: Vec<i64> = b.lo.iter().map(|a| a.as_const().unwrap()).collect();
        let hi: Vec<i64> = b.hi.iter().map(|a| a.as_const().unwrap()).collect();
        let mut out = vec![vec![]];
        for d in 0..lo.len() {
            let mut next = Vec::new();
            for p in &out {
                for i in lo[d]..hi[d] {
                    let mut q = p.clone();
                    q.push(i);
                    next.push(q);
                }
            }
            out = next;
        }
        out
    }

    #[test]
    fn subtraction_is_exact_and_disjoint() {
        let cases = [
            (cbox(&[0, 0], &[5, 6]), cbox(&[1, 1], &[4, 5])),
            (cbox(&[0, 0], &[5, 6]), cbox(&[-3, 2], &[2, 9])),
            (cbox(&[0], &[80]), cbox(&[20], &[40])),
            (cbox(&[0, 0, 0], &[3, 3, 3]), cbox(&[1, 0, 1], &[2, 3, 2])),
            (cbox(&[0, 0], &[4, 4]), cbox(&[5, 5], &[6, 6])),
        ];
        for (a, b) in cases {
            let pieces = a.subtract(&b).expect("constant boxes");
            let mut got: Vec<Vec<i64>> = pieces.iter().flat_map(points).collect();
            let n = got.len();
            got.sort();
            got.dedup();
            assert_eq!(n, got.len(), "pieces overlap");
            let bp = points(&b);
            let mut want: Vec<Vec<i64>> = points(&a).into_iter().filter(|p| !bp.contains(p)).collect();
            want.sort();
            assert_eq!(got, want);
        }
    }

    #[test]
    fn symbolic_bounds_compare_when_they_differ_by_a_constant() {
        let n = Affine::atom(Atom { value: ValueId(7), component: Some(1) });
        let m = Affine::atom(Atom { value: ValueId(9), component: None });
        assert_eq!(n.plus(-1).minus(&n), Some(-1));
        assert_eq!(n.minus(&m), None);
        let whole = IndexBox { lo: vec![Affine::constant(0)], hi: vec![n.clone()] };
        let inner = IndexBox { lo: vec![Affine::constant(1)], hi: vec![n.plus(-1)] };
        assert_eq!(inner.inside(&whole), Some(true));
        // Whether the inner box is empty (n <= 2) is not known: the pieces
        // around it cannot be told, and subtraction gives up.
        assert_eq!(whole.subtract(&inner), None);
        assert_eq!(whole.subtract(&whole), Some(vec![]));
        let left = IndexBox { lo: vec![Affine::constant(0)], hi: vec![Affine::constant(1)] };
        assert_eq!(left.subtract(&whole), None);
    }

    /// Ranges of atoms, given directly.
    struct Given(Vec<(Atom, Range)>);

    impl Order for Given {
        fn atom_range(&self, atom: &Atom) -> Range {
            self.0.iter().find(|(a, _)| a == atom).map_or((None, None), |(_, r)| *r)
        }
    }

    #[test]
    fn facts_bound_single_atoms() {
        let m = Atom { value: ValueId(3), component: None };
        let mut facts = Facts::default();
        // 2m - 5 >= 0: m >= 3; -m + 10 >= 0: m <= 10; m - n >= 0 is not kept.
        facts.add(&Affine::atom(m).scale(2).plus(-5));
        facts.add(&Affine::atom(m).scale(-1).plus(10));
        facts.add(&Affine::atom(m).sub(&Affine::atom(Atom { value: ValueId(4), component: None })));
        assert_eq!(facts.get(&m), (Some(3), Some(10)));
        assert_eq!(facts.atoms().count(), 1);
    }

    #[test]
    fn ranges_order_symbolic_bounds() {
        let n = Atom { value: ValueId(7), component: Some(1) };
        let na = Affine::atom(n);
        let whole = IndexBox { lo: vec![Affine::constant(0)], hi: vec![na.clone()] };
        let inner = IndexBox { lo: vec![Affine::constant(1)], hi: vec![na.plus(-1)] };
        // Without a range for n, the pieces around the inner box cannot be told.
        assert_eq!(whole.subtract(&inner), None);
        // With n >= 3 (a non-empty inner box) they can: [0, 1) and [n - 1, n).
        let ord = Given(vec![(n, (Some(3), None))]);
        let pieces = whole.subtract_in(&inner, &ord).expect("ordered");
        assert_eq!(
            pieces,
            vec![
                IndexBox { lo: vec![Affine::constant(0)], hi: vec![Affine::constant(1)] },
                IndexBox { lo: vec![na.plus(-1)], hi: vec![na.clone()] },
            ]
        );
        // A box at the end whose rest may or may not hold indices (n >= 3:
        // [0, n - 3) is empty for n = 3): that piece stays.
        let end = IndexBox { lo: vec![na.plus(-3)], hi: vec![na.clone()] };
        assert_eq!(
            whole.subtract_in(&end, &ord),
            Some(vec![IndexBox { lo: vec![Affine::constant(0)], hi: vec![na.plus(-3)] }])
        );
        assert_eq!(inner.is_empty_in(&Given(vec![(n, (Some(2), None))])), None);
        assert_eq!(inner.is_empty_in(&ord), Some(false));
        assert_eq!(inner.is_empty_in(&Given(vec![(n, (None, Some(2)))])), Some(true));
        assert_eq!(Affine::constant(1).max_in(&na.plus(-1), &ord), Some(na.plus(-1)));
        assert_eq!(ord.range(&na.scale(-2).plus(1)), (None, Some(-5)));
    }

    #[test]
    fn exactness_needs_a_result_that_fits_an_int() {
        let n = Atom { value: ValueId(7), component: Some(1) };
        let ord = Given(vec![(n, (Some(0), Some(i32::MAX as i64)))]);
        assert!(exact(&Affine::atom(n), &CONSTANT));
        assert!(exact(&Affine::atom(n).plus(-1), &ord));
        assert!(!exact(&Affine::atom(n).plus(1), &ord));
        assert!(!exact(&Affine::atom(n).plus(-1), &CONSTANT));
    }
}

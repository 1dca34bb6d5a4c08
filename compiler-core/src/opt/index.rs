//! Index arithmetic for with-loop transformations: affine expressions over
//! symbols, index boxes, and reading them off the IR.
//!
//! A bound component is an [`Affine`] expression `c + Σ k·atom` whose atoms are
//! int scalars of the program, or components of int vectors (`shape(a)[1]`).
//! Constant bounds are affine expressions without atoms. Two bounds compare when
//! their difference is constant; otherwise the order is unknown and callers
//! give up. So everything here works for static shapes and, as far as the
//! symbols cancel, for generic code (seed 000's symbolic attributes, with
//! equal shapes as equal values).

use std::collections::{BTreeMap, HashMap};

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
        let d = self.minus(o)?;
        Some(if d <= 0 { self.clone() } else { o.clone() })
    }

    pub fn max(&self, o: &Affine) -> Option<Affine> {
        let d = self.minus(o)?;
        Some(if d >= 0 { self.clone() } else { o.clone() })
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
        let mut all_nonempty = true;
        for (l, h) in self.lo.iter().zip(&self.hi) {
            match h.minus(l) {
                Some(d) if d <= 0 => return Some(true),
                Some(_) => {}
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
        let mut lo = Vec::with_capacity(self.rank());
        let mut hi = Vec::with_capacity(self.rank());
        for d in 0..self.rank() {
            lo.push(self.lo[d].max(&o.lo[d])?);
            hi.push(self.hi[d].min(&o.hi[d])?);
        }
        Some(IndexBox { lo, hi })
    }

    /// Whether `self` lies inside `o` (`None`: unknown). Empty boxes are inside anything.
    pub fn inside(&self, o: &IndexBox) -> Option<bool> {
        if self.is_empty() == Some(true) {
            return Some(true);
        }
        let mut all = true;
        for d in 0..self.rank() {
            let lo_ok = self.lo[d].minus(&o.lo[d]).map(|x| x >= 0);
            let hi_ok = o.hi[d].minus(&self.hi[d]).map(|x| x >= 0);
            match (lo_ok, hi_ok) {
                (Some(true), Some(true)) => {}
                (Some(false), _) | (_, Some(false)) => {
                    // Outside on this axis, unless the box is empty (unknown).
                    return if self.is_empty() == Some(false) { Some(false) } else { None };
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
        if self.inside(o) == Some(true) {
            return Some(Vec::new());
        }
        let cut = self.intersect(o)?;
        for d in 0..self.rank() {
            match cut.hi[d].minus(&cut.lo[d]) {
                None => return None,
                Some(x) if x <= 0 => return Some(vec![self.clone()]),
                Some(_) => {}
            }
        }
        let mut out = Vec::new();
        let mut rest = self.clone();
        for d in 0..self.rank() {
            let mut below = rest.clone();
            below.hi[d] = cut.lo[d].clone();
            let mut above = rest.clone();
            above.lo[d] = cut.hi[d].clone();
            for piece in [below, above] {
                if piece.hi[d].minus(&piece.lo[d]).is_some_and(|x| x > 0) && piece.is_empty() != Some(true) {
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
        let mut pieces = vec![self.clone()];
        for o in others {
            let mut next = Vec::new();
            for p in &pieces {
                next.extend(p.subtract(o)?);
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
    let mut out = HashMap::new();
    f.body.walk(&mut |s| match &s.op {
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
    out
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
}

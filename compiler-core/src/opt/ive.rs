//! # ive: index vector elimination (seed 001)
//!
//! Inside with-loops and loops, a selection `sel(iv, a)` becomes
//! `idx_sel(vect2offset(shape(a), iv), a)` (SPLIT). When `iv` is the with-loop's
//! own index and `a` has the shape of the with-loop's result, the offset is the
//! one the with-loop writes to: the part binds it (`idxwith`, seed 001's REUSE of
//! the write offset). When the index is the with-loop's index plus an offset
//! vector `c`, the offset is the write offset plus `vect2offset(shape(a), c)`
//! (SOC), which does not depend on the index and moves out of the loop (`licm`).
//! Offsets of the same index into arrays of the same shape are the same value
//! after CSE (REUSE). Updates `modarray(a, iv, v)` of single elements become
//! `idx_modarray(a, offset, v)` likewise. Index vectors that nothing needs any
//! more are not built at all (`dce` unbinds them).
//!
//! ```text
//! part … index %iv {                      part … index %iv offset %o {
//!   %j = prim sub(%iv, [1, 0])              %c = prim vect2offset([5, 6], [-1, 0])   (hoisted)
//!   %x = prim sel(%j, %a)            ⇒      %k = prim add(%o, %c)
//!   %y = prim sel(%iv, %b)                  %x = prim idx_sel(%k, %a)
//!                                           %y = prim idx_sel(%o, %b)
//! ```
//!
//! SOC needs no overflow proof here: the selected index is in bounds (checked or
//! proven), so both offsets lie in `[0, size)` and their difference fits.
//! Limits: only selections of single elements (index length = rank, both known
//! statically); the write offset is reused only for with-loops whose index
//! covers their whole result (scalar cells).

use crate::HashMap;

use super::index::{self, Affine, Atom, Reader};
use super::util;
use super::{Pass, PassCx};
use crate::interp::ops::BinOp;
use crate::ir::*;
use crate::sema::hir::{Elem, Prim};
use crate::syntax::ast::BaseType;

pub const PASS: Pass = Pass {
    name: "ive",
    description: "index vector elimination: selections by offsets, reusing the with-loop's write offset",
    run,
};

fn run(m: &mut Module, cx: &mut PassCx) {
    cx.each_function(m, |f, cx| {
        let defs = index::defs(f);
        let shapes = util::shape_values(f);
        // The reader sees the values as they were before this rewrite.
        let values = f.values.clone();
        let reader = Reader { values: &values, defs: &defs };
        let mut ive = Ive { reader: &reader, shapes: &shapes, enclosing: Vec::new(), counts: Counts::default() };
        util::with_body(f, |f, body| ive.block(f, body));
        cx.count("index_components_scalarised", ive.counts.components);
        cx.count("selections_to_offsets", ive.counts.split);
        cx.count("write_offsets_reused", ive.counts.reused);
        cx.count("offsets_split", ive.counts.soc);
    });
}

#[derive(Default)]
struct Counts {
    components: u64,
    split: u64,
    reused: u64,
    soc: u64,
}

/// A with-loop part (or loop) the walk is inside.
struct Enclosing {
    /// The part's index components, by atom.
    atoms: HashMap<Atom, usize>,
    /// The shape the part writes (its index covers it), if known.
    frame: Option<Vec<Affine>>,
    /// The part's write offset, once something needs it.
    offset: Option<ValueId>,
    /// Loops have no write offset.
    is_part: bool,
    /// The part's index vector and its length.
    index: Option<(ValueId, usize)>,
    /// The part's index components, once something needs them.
    scalars: Option<Vec<ValueId>>,
    /// For a dense part over all of its result's frame `[0, s)` whose length
    /// may be unknown (rank-generic code): its index vector and `s`.
    whole: Option<(ValueId, ValueId)>,
}

fn same(a: &[Affine], b: &[Affine]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.minus(y) == Some(0))
}

struct Ive<'a> {
    reader: &'a Reader<'a>,
    shapes: &'a HashMap<ValueId, ValueId>,
    enclosing: Vec<Enclosing>,
    counts: Counts,
}

impl Ive<'_> {
    fn shape_of(&self, a: ValueId) -> Option<Vec<Affine>> {
        if let Some(e) = self.reader.ty(a).shape.extents() {
            return Some(e.iter().map(|&x| Affine::constant(x as i64)).collect());
        }
        self.reader.vector(*self.shapes.get(&a)?)
    }

    fn block(&mut self, f: &mut Function, b: &mut Block) {
        let stmts = std::mem::take(&mut b.stmts);
        let mut out = Vec::with_capacity(stmts.len());
        for mut s in stmts {
            match &mut s.op {
                Op::With(w) => {
                    // The write offset is into the first operator's frame that has one.
                    let frame: Option<Vec<Affine>> = w
                        .ops
                        .iter()
                        .find_map(|op| match op {
                            WithOp::Modarray { array } => Some(self.shape_of(*array)),
                            other => other.frame_operand().map(|s| self.reader.vector(s)),
                        })
                        .flatten();
                    // The frame's shape value (rank-generic REUSE compares
                    // values): of the same first operator with a frame, none
                    // where its shape value is not known (a later operator's
                    // frame may differ).
                    let frame_value: Option<ValueId> = w
                        .ops
                        .iter()
                        .find_map(|op| match op {
                            WithOp::Modarray { array } => Some(self.shapes.get(array).copied()),
                            other => other.frame_operand().map(Some),
                        })
                        .flatten();
                    for p in &mut w.parts {
                        let n = self.reader.vector(p.lower).map(|v| v.len());
                        let dense = p.step.is_none() && p.width.is_none();
                        let whole = match (p.index, frame_value) {
                            (Some(iv), Some(fv))
                                if dense
                                    && util::zero_lower(self.reader.defs, p)
                                    && util::same_shape_value(self.reader.defs, p.upper, fv) =>
                            {
                                Some((iv, p.upper))
                            }
                            _ => None,
                        };
                        // The write offset is the index's offset in the result
                        // only when the index covers the whole frame.
                        let frame = frame.clone().filter(|fr| Some(fr.len()) == n);
                        let mut atoms = HashMap::default();
                        if let Some(iv) = p.index {
                            for c in 0..n.unwrap_or(0) {
                                atoms.insert(Atom { value: iv, component: Some(c) }, c);
                            }
                        }
                        if let Some(ss) = &p.scalars {
                            for (c, x) in ss.iter().enumerate() {
                                atoms.insert(Atom { value: *x, component: None }, c);
                            }
                        }
                        let index = p.index.zip(n);
                        self.enclosing.push(Enclosing {
                            atoms,
                            frame,
                            offset: p.offset,
                            is_part: true,
                            index,
                            scalars: p.scalars.clone(),
                            whole,
                        });
                        self.block(f, &mut p.body);
                        let e = self.enclosing.pop().expect("pushed");
                        p.offset = e.offset;
                        p.scalars = e.scalars;
                    }
                }
                Op::Loop { cond, body, .. } => {
                    self.enclosing.push(Enclosing {
                        atoms: HashMap::default(),
                        frame: None,
                        offset: None,
                        is_part: false,
                        index: None,
                        scalars: None,
                        whole: None,
                    });
                    self.block(f, cond);
                    self.block(f, body);
                    self.enclosing.pop();
                }
                other => other.walk_blocks_mut(&mut |inner| self.block(f, inner)),
            }
            if !self.enclosing.is_empty() {
                if let Some(rewritten) = self.index_arithmetic(f, &s, &mut out) {
                    out.push(rewritten);
                    continue;
                }
                if let Some(rewritten) = self.selection(f, &s, &mut out) {
                    out.push(rewritten);
                    continue;
                }
            }
            out.push(s);
        }
        b.stmts = out;
    }

    /// A component of an enclosing part's index vector: the part's scalar.
    fn component(&mut self, f: &mut Function, s: &Stmt) -> Option<ValueId> {
        let Op::Prim { prim: Prim::Sel, args, .. } = &s.op else { return None };
        let k = match self.reader.defs.def(args[0]) {
            Some(index::Def::Const(c)) => util::int_vec(&c).filter(|v| v.len() == 1)?[0],
            _ => return None,
        };
        let encl = self.enclosing.iter_mut().rev().find(|e| e.index.is_some_and(|(iv, _)| iv == args[1]))?;
        let (_, n) = encl.index?;
        if k < 0 || k as usize >= n {
            return None;
        }
        let scalars = encl.scalars.get_or_insert_with(|| (0..n).map(|_| f.new_value(util::int_ty(), None)).collect());
        Some(scalars[k as usize])
    }

    /// The offset form of a selection or element update, if it is one.
    fn selection(&mut self, f: &mut Function, s: &Stmt, out: &mut Vec<Stmt>) -> Option<Stmt> {
        if let Some(x) = self.component(f, s) {
            // `iv[k]` is the part's k-th index scalar: the statement forwards it
            // (through an identity that simplification removes).
            self.counts.components += 1;
            let zero = util::emit_const(
                f,
                out,
                crate::interp::value::Value::Scalar(crate::interp::value::Scalar::int(0)),
                s.span,
            );
            return Some(Stmt {
                defs: s.defs.clone(),
                op: Op::prim(Prim::Bin(BinOp::Add), vec![x, zero]),
                span: s.span,
                blame: s.blame,
            });
        }
        let Op::Prim { prim: prim @ (Prim::Sel | Prim::Modarray), args, .. } = &s.op else {
            return None;
        };
        let (idx, array) = if *prim == Prim::Sel { (args[0], args[1]) } else { (args[1], args[0]) };
        if let Some(offset) = self.whole_offset(f, s, idx, array) {
            self.counts.split += 1;
            self.counts.reused += 1;
            return Some(offset_form(s, offset));
        }
        let rank = self.reader.ty(array).shape.rank_if_known()?;
        let n = crate::sema::prim_ty::vector_len(self.reader.ty(idx))?;
        let scalar_value = *prim == Prim::Sel || self.reader.ty(args[2]).shape.is_scalar();
        if rank != n || rank == 0 || !scalar_value || self.reader.ty(idx).elem != Elem::Base(BaseType::Int) {
            return None;
        }
        let span = s.span;
        let mut pre = Vec::new();
        let int = util::int_ty();
        let shape_value = |f: &mut Function, pre: &mut Vec<Stmt>| {
            util::emit_prim(f, pre, Prim::Shape, vec![array], util::int_vec_ty(Some(rank)), span)
        };
        // REUSE / SOC: the part's index plus an offset, into an array of the part's shape.
        let plus = self.index_plus_offset(idx, array);
        let offset = match plus {
            Some(plus) => {
                let encl = self.enclosing.last_mut().expect("inside");
                let base = *encl.offset.get_or_insert_with(|| f.new_value(int.clone(), None));
                if plus.iter().all(|o| o.as_const() == Some(0)) {
                    self.counts.reused += 1;
                    base
                } else {
                    self.counts.soc += 1;
                    let shape = shape_value(f, &mut pre);
                    let cv = index::emit_vector(f, &mut pre, &plus, span);
                    let co = util::emit_prim(f, &mut pre, Prim::Vect2Offset, vec![shape, cv], int.clone(), span);
                    util::emit_prim(f, &mut pre, Prim::Bin(BinOp::Add), vec![base, co], int, span)
                }
            }
            None => {
                let shape = shape_value(f, &mut pre);
                // The part's own index (a fold has no write offset): its offset
                // from the part's index scalars, so the vector is never built.
                let idx = self.part_index_scalars(f, idx, rank).map_or(idx, |ss| {
                    let v = f.new_value(util::int_vec_ty(Some(rank)), None);
                    pre.push(Stmt::new(vec![v], Op::Array(ss), span));
                    v
                });
                util::emit_prim(f, &mut pre, Prim::Vect2Offset, vec![shape, idx], int, span)
            }
        };
        self.counts.split += 1;
        for t in &mut pre {
            t.blame = s.blame;
        }
        out.extend(pre);
        Some(offset_form(s, offset))
    }

    /// Rank-generic REUSE: `sel(iv, a)` (or an update at `iv`) where `iv` is
    /// the innermost part's index over all of its frame `[0, s)` and `a` has
    /// shape `s` too: the element at the part's write offset, whatever the
    /// rank (seed 000's generic code as fast as specialised code).
    fn whole_offset(&mut self, f: &mut Function, s: &Stmt, idx: ValueId, array: ValueId) -> Option<ValueId> {
        let scalar_elem = match &s.op {
            Op::Prim { prim: Prim::Sel, .. } => self.reader.ty(s.defs[0]).shape.is_scalar(),
            Op::Prim { args, .. } => self.reader.ty(args[2]).shape.is_scalar(),
            _ => false,
        };
        let encl = self.enclosing.last_mut()?;
        let (iv, upper) = encl.whole?;
        let shape = *self.shapes.get(&array)?;
        if !scalar_elem || !encl.is_part || iv != idx || !util::same_shape_value(self.reader.defs, upper, shape) {
            return None;
        }
        Some(*encl.offset.get_or_insert_with(|| f.new_value(util::int_ty(), None)))
    }

    /// `iv ± v` on the innermost part's index vector and a vector written out
    /// (or a scalar): the vector of the components' sums, `[i ± v0, j ± v1]`,
    /// so no vector is built per index (generic library code shifts its index
    /// by a bound only known at run time: `rotate`'s `iv - [c, 0]`).
    fn index_arithmetic(&mut self, f: &mut Function, s: &Stmt, out: &mut Vec<Stmt>) -> Option<Stmt> {
        let Op::Prim { prim: Prim::Bin(op @ (BinOp::Add | BinOp::Sub)), args, .. } = &s.op else { return None };
        let d = s.defs[0];
        if self.reader.ty(d).elem != Elem::Base(BaseType::Int) {
            return None;
        }
        let n = crate::sema::prim_ty::vector_len(self.reader.ty(d))?;
        let start = out.len();
        let encl = self.enclosing.last()?;
        let (iv, _) = encl.index.filter(|(iv, len)| *len == n && args.contains(iv))?;
        let other = if args[0] == iv { args[1] } else { args[0] };
        let int_scalar = |v: &ValueId| {
            let t = self.reader.ty(*v);
            t.shape.is_scalar() && t.elem == Elem::Base(BaseType::Int)
        };
        let comps: Vec<ValueId> = if self.reader.ty(other).shape.is_scalar() {
            vec![other; n]
        } else {
            match self.reader.defs.def(other)? {
                index::Def::Array(elems) if elems.len() == n && elems.iter().all(int_scalar) => elems.clone(),
                index::Def::Const(c) => {
                    let v = util::int_vec(&c).filter(|v| v.len() == n)?;
                    v.into_iter()
                        .map(|x| {
                            util::emit_const(
                                f,
                                out,
                                crate::interp::value::Value::Scalar(crate::interp::value::Scalar::int(x)),
                                s.span,
                            )
                        })
                        .collect()
                }
                _ => return None,
            }
        };
        let scalars = self.part_index_scalars(f, iv, n)?;
        let mut elems = Vec::with_capacity(n);
        for (k, c) in comps.into_iter().enumerate() {
            let pair = if args[0] == iv { vec![scalars[k], c] } else { vec![c, scalars[k]] };
            elems.push(util::emit_prim(f, out, Prim::Bin(*op), pair, util::int_ty(), s.span));
        }
        for t in &mut out[start..] {
            t.blame = s.blame;
        }
        Some(Stmt { defs: s.defs.clone(), op: Op::Array(elems), span: s.span, blame: s.blame })
    }

    /// When `idx` is the innermost enclosing part's index vector (of length
    /// `n`): the part's index scalars (bound from now on).
    fn part_index_scalars(&mut self, f: &mut Function, idx: ValueId, n: usize) -> Option<Vec<ValueId>> {
        let encl = self.enclosing.last_mut()?;
        if !encl.is_part || encl.index != Some((idx, n)) {
            return None;
        }
        self.counts.components += 1;
        Some(encl.scalars.get_or_insert_with(|| (0..n).map(|_| f.new_value(util::int_ty(), None)).collect()).clone())
    }

    /// `idx = part index + c` with `array` shaped like the part's result: `c`.
    fn index_plus_offset(&self, idx: ValueId, array: ValueId) -> Option<Vec<Affine>> {
        let encl = self.enclosing.last()?;
        if !encl.is_part {
            return None;
        }
        let frame = encl.frame.as_ref()?;
        let shape = self.shape_of(array)?;
        if !same(&shape, frame) {
            return None;
        }
        let comps = self.reader.vector(idx)?;
        if comps.len() != frame.len() {
            return None;
        }
        let mut plus = Vec::with_capacity(comps.len());
        for (k, c) in comps.iter().enumerate() {
            let mut hit = None;
            for (a, coeff) in &c.terms {
                match encl.atoms.get(a) {
                    Some(ax) if *ax == k && *coeff == 1 && hit.is_none() => hit = Some(*a),
                    Some(_) => return None,
                    None => {}
                }
            }
            let mut o = c.clone();
            o.terms.remove(&hit?);
            plus.push(o);
        }
        Some(plus)
    }
}

/// A selection or element update `s` (`sel(iv, a)`, `modarray(a, iv, v)`) as
/// its offset form at `offset`: `idx_sel(offset, a)`, `idx_modarray(a, offset, v)`.
fn offset_form(s: &Stmt, offset: ValueId) -> Stmt {
    let op = match &s.op {
        Op::Prim { prim: Prim::Sel, args, checked, .. } => {
            Op::Prim { prim: Prim::IdxSel, args: vec![offset, args[1]], checked: *checked, in_place: false }
        }
        Op::Prim { args, checked, in_place, .. } => Op::Prim {
            prim: Prim::IdxModarray,
            args: vec![args[0], offset, args[2]],
            checked: *checked,
            in_place: *in_place,
        },
        other => other.clone(),
    };
    Stmt { defs: s.defs.clone(), op, span: s.span, blame: s.blame }
}

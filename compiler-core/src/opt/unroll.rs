//! # unroll: with-loop unrolling of tiny generators
//!
//! A with-loop whose index set is constant and has at most [`MAX_INDICES`]
//! indices becomes straight-line code: each part body copied once per index with
//! the index as a constant. `genarray` results covering their whole (constant)
//! frame with scalar cells become array literals; otherwise the result starts as
//! the default (or the `modarray` argument) and is updated index by index; folds
//! become a chain of applications of the fold function.
//!
//! ```text
//! %3: bool = with {                                %a: int[1] = const [0]
//!   part lower [0] upper [2] index %i {      ⇒     … body with %i = [0] … %x0
//!     … %x …                                       %b: int[1] = const [1]
//!   }                                              … body with %i = [1] … %x1
//! } fold(prim and, %t)                             %y0 = prim and(%t, %x0)
//!                                                  %3 = prim and(%y0, %x1)
//! ```
//!
//! Constant folding then usually finishes the job (shape comparisons in library
//! code, small index computations). Limits: at most [`MAX_COPIED`] statements are
//! copied (nested with-loops would multiply otherwise). Folds inside with-loop
//! parts whose bodies are straight-line (no with-loops, loops or calls) and
//! small (at most [`MAX_FOLD_BODY`] statements) are unrolled up to
//! [`MAX_FOLD_INDICES`] indices and [`MAX_FOLD_COPIED`] statements: the weighted
//! sum over a stencil's 27 offsets (`with { ([0,0,0] <= o < [3,3,3]) : c[…] *
//! u[iv + o - 1]; } : fold(+, 0.0)`) becomes 27 multiply-adds with constant
//! weights and offsets, combined in the fold's own index order; `foldfix` (it stops early) and
//! with-loops whose generators are not constant or leave their frame stay, and
//! so do arrays other with-loops select from (folding them is better).

use crate::{HashMap, HashSet};

use super::util::{self, Cloner};
use super::{Pass, PassCx};
use crate::interp::value::{Elems, Scalar, Value};
use crate::ir::*;
use crate::sema::hir::{Elem, Prim};
use crate::sema::ty::{Shape, Ty};

pub const PASS: Pass =
    Pass { name: "unroll", description: "with-loops over at most 8 constant indices become straight-line code", run };

/// The most indices a with-loop may have to be unrolled.
pub const MAX_INDICES: usize = 8;
/// The most statements unrolling may copy (indices times body size), so that
/// nested with-loops do not multiply code. Large enough for a level of
/// Kreye's determinant whose inner levels are already unrolled (a `[5,5]` fold
/// over unrolled `[4,4]` minors): once unrolled, CSE computes each shared minor
/// once, an O(n·2ⁿ) expansion instead of O(n!).
pub const MAX_COPIED: usize = 800;
/// [`MAX_INDICES`] for folds of straight-line bodies.
pub const MAX_FOLD_INDICES: usize = 64;
/// [`MAX_COPIED`] for folds of straight-line bodies.
pub const MAX_FOLD_COPIED: usize = 768;
/// The largest body (statements per index) of such a fold: many indices of a
/// small body (a stencil's weighted terms), not large bodies (recursion that
/// inlining flattened, Kreye's determinant) whose copies only cost compile time.
pub const MAX_FOLD_BODY: usize = 40;

fn run(m: &mut Module, cx: &mut PassCx) {
    cx.each_function(m, |f, cx| {
        let consts = util::constants(f);
        // Arrays other with-loops select from are left to folding.
        let mut selected = HashSet::default();
        f.body.walk(&mut |s| {
            if let Op::With(w) = &s.op {
                for p in &w.parts {
                    p.body.walk(&mut |t| {
                        if let Op::Prim { prim: Prim::Sel, args, .. } = &t.op {
                            selected.insert(args[1]);
                        }
                    });
                }
            }
        });
        let n = util::with_body(f, |f, b| block(f, b, &consts, &selected, false));
        cx.count("with_loops_unrolled", n);
    });
}

/// `in_part`: the block runs per index of an enclosing with-loop.
fn block(
    f: &mut Function,
    b: &mut Block,
    consts: &HashMap<ValueId, Value>,
    selected: &HashSet<ValueId>,
    in_part: bool,
) -> u64 {
    let mut n = 0;
    let stmts = std::mem::take(&mut b.stmts);
    let mut out = Vec::with_capacity(stmts.len());
    for mut s in stmts {
        let inner_in_part = in_part || matches!(s.op, Op::With(_));
        s.op.walk_blocks_mut(&mut |inner| n += block(f, inner, consts, selected, inner_in_part));
        if s.defs.iter().any(|d| selected.contains(d)) {
            out.push(s);
            continue;
        }
        match unroll(f, &s, consts, in_part) {
            Some(stmts) => {
                out.extend(stmts);
                n += 1;
            }
            None => out.push(s),
        }
    }
    b.stmts = out;
    n
}

/// The indices of a constant generator, in order (`None`: not constant or too many).
fn indices(p: &Part, consts: &HashMap<ValueId, Value>, max: usize) -> Option<Vec<Vec<i64>>> {
    let get = |v: Option<ValueId>| v.map(|x| consts.get(&x).and_then(util::int_vec));
    let lo = consts.get(&p.lower).and_then(util::int_vec)?;
    let hi = consts.get(&p.upper).and_then(util::int_vec)?;
    let n = lo.len();
    let step = match get(p.step) {
        Some(v) => v?,
        None => vec![1; n],
    };
    let width = match get(p.width) {
        Some(v) => v?,
        None => vec![1; n],
    };
    if hi.len() != n || step.len() != n || width.len() != n || step.iter().chain(&width).any(|&x| x <= 0) {
        return None;
    }
    let mut axes: Vec<Vec<i64>> = Vec::with_capacity(n);
    for d in 0..n {
        // Block by block (`[0] <= iv < [2000000000] step [1000000000]` has
        // two indices: walking every integer took seconds).
        let mut c = Vec::new();
        let mut start = lo[d];
        while start < hi[d] {
            for i in (start..start + width[d].min(step[d])).take_while(|&i| i < hi[d]) {
                c.push(i);
                if c.len() > max {
                    return None;
                }
            }
            start += step[d];
        }
        axes.push(c);
    }
    let mut out: Vec<Vec<i64>> = vec![Vec::new()];
    for axis in &axes {
        let mut next = Vec::new();
        for p in &out {
            for i in axis {
                let mut q = p.clone();
                q.push(*i);
                next.push(q);
            }
        }
        out = next;
        if out.len() > max {
            return None;
        }
    }
    if axes.iter().any(|a| a.is_empty()) {
        out.clear();
    }
    Some(out)
}

fn unroll(f: &mut Function, s: &Stmt, consts: &HashMap<ValueId, Value>, in_part: bool) -> Option<Vec<Stmt>> {
    let Op::With(w) = &s.op else { return None };
    let straight_fold = in_part
        && w.parts.iter().all(|p| util::size(&p.body) <= MAX_FOLD_BODY)
        && w.ops.iter().all(|op| matches!(op, WithOp::Fold { fixpoint: None, .. }))
        && w.parts.iter().all(|p| {
            let mut straight = true;
            p.body.walk(&mut |t| straight &= !matches!(t.op, Op::With(_) | Op::Loop { .. } | Op::Call { .. }));
            straight
        });
    let (max_indices, max_copied) =
        if straight_fold { (MAX_FOLD_INDICES, MAX_FOLD_COPIED) } else { (MAX_INDICES, MAX_COPIED) };
    let mut all: Vec<(usize, Vec<i64>)> = Vec::new();
    for (k, p) in w.parts.iter().enumerate() {
        if p.offset.is_some() {
            return None;
        }
        for iv in indices(p, consts, max_indices)? {
            all.push((k, iv));
        }
    }
    if all.is_empty() || all.len() > max_indices {
        return None;
    }
    let copied: usize = all.iter().map(|(k, _)| util::size(&w.parts[*k].body) + 1).sum();
    if copied > max_copied {
        return None;
    }
    // Frames (genarray shapes, modarray arguments) must be constant and hold
    // every index.
    for op in &w.ops {
        let frame: Vec<i64> = match op {
            WithOp::Genarray { shape, .. } => consts.get(shape).and_then(util::int_vec)?,
            WithOp::Modarray { array } => util::extents(f, *array)?.iter().map(|&e| e as i64).collect(),
            WithOp::Fold { fixpoint: Some(_), .. } | WithOp::Scan { .. } | WithOp::Filter { .. } => return None,
            WithOp::Fold { .. } => continue,
        };
        if all.iter().any(|(_, iv)| iv.len() > frame.len() || iv.iter().zip(&frame).any(|(i, e)| *i < 0 || i >= e)) {
            return None;
        }
        if frame.iter().any(|&e| e < 0) {
            return None;
        }
    }
    let span = s.span;
    let mut out: Vec<Stmt> = Vec::new();
    // First match: later covering of an index is skipped.
    let mut seen: Vec<Vec<i64>> = Vec::new();
    let mut values: Vec<(Vec<i64>, Vec<ValueId>)> = Vec::new();
    for (k, iv) in &all {
        if w.first_match && seen.contains(iv) {
            continue;
        }
        seen.push(iv.clone());
        let p = &w.parts[*k];
        let mut cl = Cloner { src: None, map: HashMap::default() };
        if let Some(i) = p.index {
            let c = util::emit_const(f, &mut out, Value::int_vector(iv), span);
            cl.map.insert(i, c);
        }
        if let Some(ss) = &p.scalars {
            for (x, i) in ss.iter().zip(iv) {
                let c = util::emit_const(f, &mut out, Value::Scalar(Scalar::int(*i)), span);
                cl.map.insert(*x, c);
            }
        }
        let copy = cl.block(f, &p.body);
        out.extend(copy.stmts);
        values.push((iv.clone(), copy.yields));
    }
    // The accumulators of the fold over tuples being unrolled (one per lane).
    let mut lane_results: Vec<ValueId> = Vec::new();
    for (k, op) in w.ops.iter().enumerate() {
        let d = s.defs[k];
        let ty = f.ty(d).clone();
        let result = match op {
            WithOp::Fold { fun: FoldFn::Lane { func, lane, .. }, partial, .. } => {
                if *lane == 0 {
                    let group = w.group(k);
                    let mut accs: Vec<ValueId> = Vec::with_capacity(group.len());
                    for j in group.clone() {
                        let WithOp::Fold { neutral, .. } = &w.ops[j] else { return None };
                        accs.push(*neutral);
                    }
                    for (_, ys) in &values {
                        let mut args = partial.clone();
                        args.extend(&accs);
                        args.extend(group.clone().map(|j| ys[j]));
                        let next: Vec<ValueId> =
                            group.clone().map(|j| f.new_value(f.ty(s.defs[j]).clone(), None)).collect();
                        out.push(Stmt { defs: next.clone(), op: Op::Call { func: *func, args }, span, blame: s.blame });
                        accs = next;
                    }
                    lane_results = accs;
                }
                *lane_results.get(*lane)?
            }
            WithOp::Fold { fun, partial, neutral, .. } => {
                let mut acc = *neutral;
                for (_, ys) in &values {
                    let mut args = partial.clone();
                    args.push(acc);
                    args.push(ys[k]);
                    let next = f.new_value(ty.clone(), None);
                    let op = match fun {
                        FoldFn::Prim(p) => Op::prim(p.clone(), args),
                        FoldFn::Call(g) | FoldFn::Lane { func: g, .. } => Op::Call { func: *g, args },
                    };
                    out.push(Stmt { defs: vec![next], op, span, blame: s.blame });
                    acc = next;
                }
                acc
            }
            WithOp::Genarray { shape, default } => {
                let frame = consts.get(shape).and_then(util::int_vec)?;
                let cells_scalar = values.iter().all(|(_, ys)| f.ty(ys[k]).shape.is_scalar());
                let total: i64 = frame.iter().product();
                let covered_all = cells_scalar && !frame.is_empty() && total as usize == values.len() && {
                    let mut idx: Vec<&Vec<i64>> = values.iter().map(|(iv, _)| iv).collect();
                    idx.sort();
                    idx.dedup();
                    idx.len() == values.len() && idx.iter().all(|iv| iv.len() == frame.len())
                };
                if covered_all {
                    literal(f, &mut out, &frame, &values, k, &ty, s)
                } else if !cells_fit(f, &values, k, &[&ty.shape], default.and_then(|d| f.ty(d).shape.extents())) {
                    return None;
                } else {
                    // Start from the default everywhere, then write each cell.
                    let fill = match default {
                        Some(dv) => *dv,
                        None => {
                            let cell = w
                                .cells
                                .get(k)
                                .cloned()
                                .flatten()
                                .or_else(|| values.first().map(|(_, ys)| f.ty(ys[k]).clone()))?;
                            let (Elem::Base(b), Some(ext)) = (cell.elem, cell.shape.extents()) else { return None };
                            let n: usize = ext.iter().product();
                            let elems = Elems::filled(Scalar::zero(b), n).ok()?;
                            util::emit_const(f, &mut out, Value::from_parts(ext, elems), span)
                        }
                    };
                    let mut acc = f.new_value(ty.clone(), None);
                    out.push(Stmt {
                        defs: vec![acc],
                        op: Op::prim(Prim::Genarray, vec![*shape, fill]),
                        span,
                        blame: s.blame,
                    });
                    acc = write_cells(f, &mut out, acc, &values, k, &ty, s);
                    acc
                }
            }
            WithOp::Modarray { array } => {
                if !cells_fit(f, &values, k, &[&ty.shape, &f.ty(*array).shape.clone()], None) {
                    return None;
                }
                write_cells(f, &mut out, *array, &values, k, &ty, s)
            }
            // Not unrolled (see above).
            WithOp::Scan { .. } | WithOp::Filter { .. } => return None,
        };
        // The statement's value is the unrolled result, which the last
        // statement of `out` defining it now defines under the old name.
        if !rename(&mut out, result, d) {
            return None;
        }
    }
    Some(out)
}

/// Makes the statement in `out` that defines `result` define `d` instead;
/// false when `result` is not defined there or is read there.
fn rename(out: &mut [Stmt], result: ValueId, d: ValueId) -> bool {
    let read = out.iter().any(|s| {
        s.op.operands().contains(&result) || {
            let mut inner = false;
            s.op.walk_blocks(&mut |b| b.walk(&mut |t| inner |= t.op.operands().contains(&result)));
            inner
        }
    });
    if read {
        return false;
    }
    for s in out.iter_mut().rev() {
        if let Some(pos) = s.defs.iter().position(|x| *x == result) {
            s.defs[pos] = d;
            return true;
        }
    }
    false
}

/// Whether every cell value certainly has the shape of the result's cells
/// (their types say so). The cells' shape: from `wholes`, shapes the result is
/// known to have (its type's, the `modarray` argument's), the first whose
/// cells' extents are all known, else `default_cell` (the default's).
/// Updates that might fail stay a with-loop: its error (R0007 at the cell)
/// would become another (R0002 at the with-loop).
fn cells_fit(
    f: &Function,
    values: &[(Vec<i64>, Vec<ValueId>)],
    k: usize,
    wholes: &[&Shape],
    default_cell: Option<Vec<usize>>,
) -> bool {
    let Some(frame) = values.first().map(|(iv, _)| iv.len()) else { return true };
    let known_cell = |whole: &&Shape| match whole {
        Shape::Fixed(d) if d.len() >= frame => d[frame..].iter().copied().collect::<Option<Vec<usize>>>(),
        _ => None,
    };
    let Some(cell) = wholes.iter().find_map(known_cell).or(default_cell) else { return false };
    values.iter().all(|(iv, ys)| iv.len() == frame && f.ty(ys[k]).shape.extents().as_ref() == Some(&cell))
}

fn write_cells(
    f: &mut Function,
    out: &mut Vec<Stmt>,
    start: ValueId,
    values: &[(Vec<i64>, Vec<ValueId>)],
    k: usize,
    ty: &Ty,
    s: &Stmt,
) -> ValueId {
    let mut acc = start;
    for (iv, ys) in values {
        let idx = util::emit_const(f, out, Value::int_vector(iv), s.span);
        let next = f.new_value(ty.clone(), None);
        out.push(Stmt {
            defs: vec![next],
            op: Op::prim(Prim::Modarray, vec![acc, idx, ys[k]]),
            span: s.span,
            blame: s.blame,
        });
        acc = next;
    }
    acc
}

/// A (nested) array literal of the cells in row-major order.
fn literal(
    f: &mut Function,
    out: &mut Vec<Stmt>,
    frame: &[i64],
    values: &[(Vec<i64>, Vec<ValueId>)],
    k: usize,
    ty: &Ty,
    s: &Stmt,
) -> ValueId {
    let lit = Literal { frame, values, k, ty, s };
    lit.build(f, out, &mut Vec::new())
}

/// What a nested literal is built from.
struct Literal<'a> {
    frame: &'a [i64],
    values: &'a [(Vec<i64>, Vec<ValueId>)],
    k: usize,
    ty: &'a Ty,
    s: &'a Stmt,
}

impl Literal<'_> {
    fn build(&self, f: &mut Function, out: &mut Vec<Stmt>, prefix: &mut Vec<i64>) -> ValueId {
        if prefix.len() == self.frame.len() {
            return self
                .values
                .iter()
                .find(|(iv, _)| iv == prefix)
                .map(|(_, ys)| ys[self.k])
                .expect("every index is covered");
        }
        let d = prefix.len();
        let mut elems = Vec::new();
        for i in 0..self.frame[d] {
            prefix.push(i);
            elems.push(self.build(f, out, prefix));
            prefix.pop();
        }
        let sub = Ty::new(self.ty.elem, self.ty.shape.drop_axes(d));
        let v = f.new_value(sub, None);
        out.push(Stmt { defs: vec![v], op: Op::Array(elems), span: self.s.span, blame: self.s.blame });
        v
    }
}

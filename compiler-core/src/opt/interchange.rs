//! # interchange: a fold inside a with-loop runs along the with-loop's last axis
//!
//! A `genarray` with-loop whose elements are each a fold over `k` (matrix
//! multiplication: `c[i, j] = fold(+, 0, a[i, k] * b[k, j])`) computes every
//! element's fold on its own: the innermost loop is the fold's, a chain of
//! dependent additions over a column of `b`. Interchanging the fold's loop with
//! the with-loop's last axis makes the innermost loop run over `j`: each row of
//! the result is an accumulator row that every `k` updates in place, reading a
//! row of `b` — independent, contiguous, vectorisable.
//!
//! ```text
//! c = with {                                   c = with {
//!   part [0,0] <= [i,j] < [m,n] {                part [0] <= [i] < [m] {
//!     x = with {                                   r0 = genarray([n], 0.0)
//!       part [0] <= [k] < [l] {          ⇒         r, _ = loop (r = r0, k = 0) while k < l {
//!         yield a[i,k] * b[k,j]                      r' = with { part [0] <= [j] < [n] {
//!       }                                                   yield r[j] + a[i,k] * b[k,j] }
//!     } fold(+, 0.0)                                      } modarray(r)
//!     yield x                                        yield r', k + 1
//!   }                                              }
//! } genarray([m, n])                               yield r
//!                                                } } genarray([m], genarray([n], 0.0))
//! ```
//!
//! Every element still combines its values in the order of `k`, starting from
//! the neutral element: the result is exactly the same, for any fold function
//! (floating-point `+` included). Only the order in which *different*
//! elements' steps run changes, so the fold's body must not fail or print.
//!
//! It runs in the lowering stage, once with-loop folding is done: an
//! interchanged with-loop no longer folds its producers (P1's replicated
//! rows must be folded away first).
//!
//! Limits: one part over the whole last axis of the frame (rows are whole);
//! the part's other statements must not depend on the last index or fail;
//! the fold has one part over one axis and a primitive function that cannot
//! fail; both loops must be long enough to be worth it (or of unknown length).

use crate::HashMap;

use super::index::{self, Reader};
use super::util::{self, Cloner};
use super::{Pass, PassCx, RemarkKind};
use crate::interp::ops::BinOp;
use crate::interp::value::{Scalar, Value};
use crate::ir::*;
use crate::sema::hir::{Elem, Prim};
use crate::sema::ty::{Shape, Ty};
use crate::span::Span;

pub const PASS: Pass = Pass {
    name: "interchange",
    description: "a fold inside a with-loop runs along its last axis: rows accumulate in place, vectorisable",
    run,
};

/// Rows (the last axis) shorter than this are not worth a loop of their own.
const MIN_ROW: i64 = 16;
/// Folds shorter than this are left alone (`unroll` takes the shortest).
const MIN_FOLD: i64 = 8;

fn run(m: &mut Module, cx: &mut PassCx) {
    cx.each_function(m, |f, cx| {
        let mut done = Vec::new();
        loop {
            let defs = index::defs(f);
            let found = {
                let reader = Reader::new(f, &defs);
                let mut found = None;
                find(&f.body, &reader, &mut found);
                found
            };
            let Some(target) = found else { break };
            let span = target.span;
            util::with_body(f, |f, body| apply(f, body, &target));
            done.push(span);
        }
        for span in &done {
            cx.remark(
                RemarkKind::Applied,
                &f.name,
                Some(*span),
                "the fold runs along the with-loop's last axis: each row accumulates in place, in the fold's order",
            );
        }
        cx.count("folds_interchanged", done.len() as u64);
    });
}

/// A with-loop to interchange: its result, where it is, and which of its
/// part's statements select components of the index vector (which one).
struct Target {
    result: ValueId,
    span: Span,
    components: Vec<(ValueId, usize)>,
}

fn find(b: &Block, r: &Reader, found: &mut Option<Target>) {
    for s in &b.stmts {
        if found.is_some() {
            return;
        }
        if let Some(components) = qualifies(s, r) {
            *found = Some(Target { result: s.defs[0], span: s.blame_span().unwrap_or(s.span), components });
            return;
        }
        s.op.walk_blocks(&mut |inner| find(inner, r, found));
    }
}

/// Whether a statement can fail (or print) at run time: unchecked selections
/// cannot.
fn can_fail(s: &Stmt) -> bool {
    match &s.op {
        Op::Const(_) | Op::Array(_) | Op::Narrow(_) => false,
        Op::Prim { prim: Prim::Sel | Prim::IdxSel, checked: false, .. } => false,
        Op::Prim { prim, .. } => util::prim_may_fail(prim) || prim.has_effect(),
        _ => true,
    }
}

/// The fold statement a part's body ends with and yields, when the body is
/// only that fold and statements before it.
fn the_fold(p: &Part) -> Option<&Stmt> {
    let last = p.body.stmts.last()?;
    (p.body.yields.len() == 1 && last.defs.first() == Some(&p.body.yields[0]) && matches!(last.op, Op::With(_)))
        .then_some(last)
}

/// The index-vector components a qualifying with-loop's part selects, or
/// `None` when the with-loop does not qualify.
pub(super) fn qualifies(s: &Stmt, r: &Reader) -> Option<Vec<(ValueId, usize)>> {
    let Op::With(w) = &s.op else { return None };
    let ([p], [WithOp::Genarray { shape, .. }]) = (w.parts.as_slice(), w.ops.as_slice()) else { return None };
    // A with-loop that already takes over a buffer (`snapshot` decided it)
    // may read the rows it writes when each row starts: it must keep running
    // row by row (and `tile` must not change its loops either).
    if p.step.is_some() || p.width.is_some() || p.offset.is_some() || w.reuse.iter().any(Option::is_some) {
        return None;
    }
    let (Some(lo), Some(hi), Some(frame)) = (r.vector(p.lower), r.vector(p.upper), r.vector(*shape)) else {
        return None;
    };
    let n = lo.len();
    if n < 2 || hi.len() != n || frame.len() != n {
        return None;
    }
    // Whole rows: the last axis runs over all of the frame's last extent.
    if lo[n - 1].as_const() != Some(0) || hi[n - 1].minus(&frame[n - 1]) != Some(0) {
        return None;
    }
    if hi[n - 1].as_const().is_some_and(|c| c < MIN_ROW) {
        return None;
    }
    let fold_stmt = the_fold(p)?;
    let Op::With(fw) = &fold_stmt.op else { return None };
    let ([q], [WithOp::Fold { fun: FoldFn::Prim(fun), fixpoint: None, .. }]) = (fw.parts.as_slice(), fw.ops.as_slice())
    else {
        return None;
    };
    if util::prim_may_fail(fun) || !r.ty(fold_stmt.defs[0]).shape.is_scalar() {
        return None;
    }
    if q.step.is_some() || q.width.is_some() || q.offset.is_some() {
        return None;
    }
    let (Some(klo), Some(khi)) = (r.vector(q.lower), r.vector(q.upper)) else { return None };
    if klo.len() != 1 || khi.len() != 1 || khi[0].minus(&klo[0]).is_some_and(|c| c < MIN_FOLD) {
        return None;
    }
    if q.body.stmts.iter().any(can_fail) {
        return None;
    }
    // The last index: what may only be used inside the fold.
    let mut last: Vec<ValueId> = p.index.into_iter().collect();
    if let Some(ss) = &p.scalars {
        last.push(ss[n - 1]);
    }
    // The part's other statements run once per row: they must not read the
    // last index (nor fail, now that they run even for an empty row); the
    // index vector's components are the indices themselves.
    let mut components = Vec::new();
    for t in &p.body.stmts[..p.body.stmts.len() - 1] {
        match index_component(t, p, r) {
            Some(c) => {
                if c == n - 1 {
                    last.extend(t.defs.iter().copied());
                }
                components.push((t.defs[0], c));
            }
            None if can_fail(t) || util::free_uses(t).iter().any(|v| last.contains(v)) => return None,
            None => {}
        }
    }
    (!fold_stmt.op.operands().iter().any(|v| last.contains(v))).then_some(components)
}

/// `sel([c], iv)` of the part's index vector: which component.
fn index_component(t: &Stmt, p: &Part, r: &Reader) -> Option<usize> {
    let Op::Prim { prim: Prim::Sel, args, .. } = &t.op else { return None };
    if p.index != Some(args[1]) {
        return None;
    }
    match r.defs.def(args[0])? {
        index::Def::Const(c) => util::int_vec(&c).filter(|v| v.len() == 1).and_then(|v| usize::try_from(v[0]).ok()),
        _ => None,
    }
}

fn apply(f: &mut Function, body: &mut Block, t: &Target) {
    edit(body, t.result, &mut |stmts: &mut Vec<Stmt>, at: usize| {
        let s = stmts[at].clone();
        let Some(new) = rewrite(f, &s, &t.components) else { return };
        stmts.splice(at..=at, new);
    });
}

/// Finds the statement defining `v` (at any depth) and lets `g` edit its block.
pub(super) fn edit(b: &mut Block, v: ValueId, g: &mut dyn FnMut(&mut Vec<Stmt>, usize)) -> bool {
    if let Some(at) = b.stmts.iter().position(|s| s.defs.contains(&v)) {
        g(&mut b.stmts, at);
        return true;
    }
    for s in &mut b.stmts {
        let mut done = false;
        s.op.walk_blocks_mut(&mut |inner| done = done || edit(inner, v, g));
        if done {
            return true;
        }
    }
    false
}

/// The interchanged statements replacing `s` (see the module documentation).
fn rewrite(f: &mut Function, s: &Stmt, components: &[(ValueId, usize)]) -> Option<Vec<Stmt>> {
    let Op::With(w) = &s.op else { return None };
    let ([p], [WithOp::Genarray { shape, default }]) = (w.parts.as_slice(), w.ops.as_slice()) else { return None };
    let fold_stmt = the_fold(p)?;
    let Op::With(fw) = &fold_stmt.op else { return None };
    let ([q], [WithOp::Fold { fun: FoldFn::Prim(fun), partial, neutral, .. }]) =
        (fw.parts.as_slice(), fw.ops.as_slice())
    else {
        return None;
    };
    let span = s.span;
    let elem = f.ty(fold_stmt.defs[0]).elem;
    let Elem::Base(base) = elem else { return None };
    let n = crate::sema::prim_ty::vector_len(f.ty(p.lower))?;
    let mut out = Vec::new();
    // Before the with-loop: the row length, the outer frame and bounds, the default row.
    let row_len = util::emit_component(f, &mut out, *shape, n - 1, span);
    let row_shape = f.new_value(util::int_vec_ty(Some(1)), None);
    out.push(Stmt::new(vec![row_shape], Op::Array(vec![row_len]), span));
    let keep = util::emit_const(f, &mut out, Value::Scalar(Scalar::int(n as i64 - 1)), span);
    let outer_ty = util::int_vec_ty(Some(n - 1));
    let outer_shape = util::emit_prim(f, &mut out, Prim::Take, vec![keep, *shape], outer_ty.clone(), span);
    let outer_lo = util::emit_prim(f, &mut out, Prim::Take, vec![keep, p.lower], outer_ty.clone(), span);
    let outer_hi = util::emit_prim(f, &mut out, Prim::Take, vec![keep, p.upper], outer_ty, span);
    let row_extent = util::extents(f, s.defs[0]).and_then(|e| e.last().copied());
    let row_ty = Ty::new(elem, row_extent.map_or(Shape::rank(1), |e| Shape::known(&[e])));
    let fill = match default {
        Some(d) => *d,
        None => util::emit_const(f, &mut out, Value::Scalar(Scalar::zero(base)), span),
    };
    let default_row = util::emit_prim(f, &mut out, Prim::Genarray, vec![row_shape, fill], row_ty.clone(), span);

    // The new part, over all axes but the last.
    let mut cl = Cloner { src: None, map: HashMap::default() };
    let outer_scalars: Vec<ValueId> = (0..n - 1).map(|_| f.new_value(util::int_ty(), None)).collect();
    let mut part_body = Vec::new();
    if let Some(ss) = &p.scalars {
        for (old, new) in ss.iter().zip(&outer_scalars) {
            cl.map.insert(*old, *new);
        }
    }
    // The index vector's components are the new part's indices (the last one
    // is the row's index, below); the other statements are copied.
    let mut last_components = Vec::new();
    let mut pre = Block::default();
    for t in &p.body.stmts[..p.body.stmts.len() - 1] {
        match components.iter().find(|(d, _)| t.defs.first() == Some(d)) {
            Some((d, c)) if c + 1 < n => {
                cl.map.insert(*d, outer_scalars[*c]);
            }
            Some((d, _)) => last_components.push(*d),
            None => pre.stmts.push(t.clone()),
        }
    }
    part_body.extend(cl.block(f, &pre).stmts);
    let neutral = cl.map.get(neutral).copied().unwrap_or(*neutral);
    let partial: Vec<ValueId> = partial.iter().map(|v| cl.map.get(v).copied().unwrap_or(*v)).collect();
    let k_lo = cl.map.get(&q.lower).copied().unwrap_or(q.lower);
    let k_hi = cl.map.get(&q.upper).copied().unwrap_or(q.upper);
    let row0 = util::emit_prim(f, &mut part_body, Prim::Genarray, vec![row_shape, neutral], row_ty.clone(), span);
    let k0 = util::emit_component(f, &mut part_body, k_lo, 0, span);
    let k_end = util::emit_component(f, &mut part_body, k_hi, 0, span);

    // The loop over k carrying the row.
    let r = f.new_value(row_ty.clone(), None);
    let k_name = q.scalars.as_ref().and_then(|ks| f.values[ks[0].0 as usize].name.clone());
    let k = f.new_value(util::int_ty(), k_name);
    let mut cond = Vec::new();
    let more = util::emit_prim(f, &mut cond, Prim::Bin(BinOp::Lt), vec![k, k_end], util::bool_ty(), span);
    let mut loop_body = Vec::new();

    // The with-loop over the row: the fold's body at (outer…, j, k), combined into r[j].
    let j = f.new_value(util::int_ty(), p.scalars.as_ref().and_then(|ss| f.values[ss[n - 1].0 as usize].name.clone()));
    let mut inner = Vec::new();
    if let Some(ss) = &p.scalars {
        cl.map.insert(ss[n - 1], j);
    }
    for c in last_components {
        cl.map.insert(c, j);
    }
    if let Some(iv) = p.index {
        let mut comps = outer_scalars.clone();
        comps.push(j);
        let v = f.new_value(f.ty(iv).clone(), None);
        inner.push(Stmt::new(vec![v], Op::Array(comps), span));
        cl.map.insert(iv, v);
    }
    if let Some(ks) = &q.scalars {
        cl.map.insert(ks[0], k);
    }
    if let Some(kv) = q.index {
        let v = f.new_value(f.ty(kv).clone(), None);
        inner.push(Stmt::new(vec![v], Op::Array(vec![k]), span));
        cl.map.insert(kv, v);
    }
    // The fold body's statements that do not read the last index run once per
    // `k`, before the row's with-loop (they cannot fail: see `qualifies`).
    let step = cl.block(f, &q.body);
    let mut per_row: crate::HashSet<ValueId> = [j].into_iter().collect();
    per_row.extend(p.index.and_then(|iv| cl.map.get(&iv).copied()));
    for t in step.stmts {
        if util::free_uses(&t).iter().any(|v| per_row.contains(v)) {
            per_row.extend(t.defs.iter().copied());
            inner.push(t);
        } else {
            loop_body.push(t);
        }
    }
    let x = *step.yields.first()?;
    let jv = f.new_value(util::int_vec_ty(Some(1)), None);
    inner.push(Stmt::new(vec![jv], Op::Array(vec![j]), span));
    let acc = f.new_value(Ty::new(elem, Shape::scalar()), None);
    inner.push(Stmt::new(
        vec![acc],
        Op::Prim { prim: Prim::Sel, args: vec![jv, r], checked: false, in_place: false },
        span,
    ));
    let mut args = partial;
    args.push(acc);
    args.push(x);
    let next = util::emit_prim(f, &mut inner, fun.clone(), args, Ty::new(elem, Shape::scalar()), span);
    let zero = util::emit_const(f, &mut loop_body, Value::int_vector(&[0]), span);
    // Over the row's own shape (always `[n]`): the row is then visibly read
    // where it is written, so it is updated in place and its offsets are the
    // with-loop's, also where `n` is not a constant.
    let r_shape = util::emit_prim(f, &mut loop_body, Prim::Shape, vec![r], util::int_vec_ty(Some(1)), span);
    let row_part = Part {
        lower: zero,
        upper: r_shape,
        step: None,
        width: None,
        index: None,
        scalars: Some(vec![j]),
        offset: None,
        body: Block { stmts: inner, yields: vec![next] },
        span: q.span,
        result_spans: q.result_spans.clone(),
    };
    let updated = f.new_value(row_ty.clone(), None);
    loop_body.push(Stmt {
        defs: vec![updated],
        op: Op::With(Box::new(With {
            parts: vec![row_part],
            ops: vec![WithOp::Modarray { array: r }],
            first_match: false,
            cells: vec![None],
            reuse: vec![None],
        })),
        span: fold_stmt.span,
        blame: fold_stmt.blame,
    });
    let one = util::emit_const(f, &mut loop_body, Value::Scalar(Scalar::int(1)), span);
    let k_next = util::emit_prim(f, &mut loop_body, Prim::Bin(BinOp::Add), vec![k, one], util::int_ty(), span);
    let row = f.new_value(row_ty, None);
    let k_final = f.new_value(util::int_ty(), None);
    part_body.push(Stmt {
        defs: vec![row, k_final],
        op: Op::Loop {
            init: vec![row0, k0],
            params: vec![r, k],
            cond: Block { stmts: cond, yields: vec![more] },
            body: Block { stmts: loop_body, yields: vec![updated, k_next] },
            test_first: true,
            tiled: false,
        },
        span: fold_stmt.span,
        blame: fold_stmt.blame,
    });
    let new_part = Part {
        lower: outer_lo,
        upper: outer_hi,
        step: None,
        width: None,
        index: None,
        scalars: Some(outer_scalars),
        offset: None,
        body: Block { stmts: part_body, yields: vec![row] },
        span: p.span,
        result_spans: p.result_spans.clone(),
    };
    out.push(Stmt {
        defs: s.defs.clone(),
        op: Op::With(Box::new(With {
            parts: vec![new_part],
            ops: vec![WithOp::Genarray { shape: outer_shape, default: Some(default_row) }],
            first_match: w.first_match,
            cells: vec![None],
            reuse: vec![None],
        })),
        span,
        blame: s.blame,
    });
    Some(out)
}

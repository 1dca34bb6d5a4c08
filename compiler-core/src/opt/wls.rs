//! # wls: with-loop scalarisation
//!
//! A `genarray` with-loop whose parts each compute their (array) element with an
//! inner `genarray` with-loop of a fixed shape becomes one with-loop over the
//! concatenated index space, computing scalars: the inner with-loop's parts
//! become parts of the outer one with concatenated bounds. No intermediate cell
//! arrays are built.
//!
//! ```text
//! %r = with {                                     %r = with {
//!   part [0] .. [n] index %i {                      part [0, 0] .. [n, 3] index %k {
//!     %c = with {                          ⇒          %i = take(1, %k); %j = drop(1, %k)
//!       part [0] .. [3] index %j { … yield %x }       … yield %x
//!     } genarray([3], %z)                           }
//!     yield %c                                    } genarray([n, 3], %z)
//!   }
//! } genarray([n])
//! ```
//!
//! Conditions: the outer with-loop has one `genarray` operator whose parts cover
//! its whole frame (so the inner default also stands for what no part
//! computes); each outer part yields an inner single-`genarray` with-loop
//! defined in it (not a tensor comprehension's, whose first covering part
//! wins where the outer with-loop's last would), used for nothing else, with bounds and shape not depending on
//! the outer index and equal across parts; apart from that with-loop, an outer
//! part computes at most a few cheap scalars (they are recomputed per inner
//! index); the outer default's shape, if there is one, is known to be the
//! inner shape (its type's extents, or the `genarray` that builds it), and so
//! are the result type's known cell extents (else the with-loop fails with
//! R0007, which the scalarised one would not); steps and widths are not
//! supported.

use crate::HashMap;

use super::index::{self, Affine, IndexBox, Reader};
use super::util::{self, Cloner};
use super::{Pass, PassCx};
use crate::interp::value::Value;
use crate::ir::*;
use crate::sema::hir::Prim;
use crate::sema::ty::{Shape, Ty};

pub const PASS: Pass = Pass {
    name: "wls",
    description: "with-loop scalarisation: nested genarray with-loops become one over the concatenated index space",
    run,
};

/// Statements an outer part may have besides its inner with-loop.
const CHEAP: usize = 6;

fn run(m: &mut Module, cx: &mut PassCx) {
    cx.each_function(m, |f, cx| {
        let mut n = 0;
        loop {
            let defs = index::defs(f);
            let values = f.values.clone();
            let reader = Reader { values: &values, defs: &defs };
            let Some(target) = find(&f.body, &reader) else { break };
            util::with_body(f, |f, body| apply(f, body, &target));
            n += 1;
        }
        cx.count("with_loops_scalarised", n);
    });
}

struct Target {
    /// The outer with-loop's result.
    outer: ValueId,
    /// The combined frame.
    frame: Vec<Affine>,
    /// The outer index length.
    outer_n: usize,
}

fn find(b: &Block, reader: &Reader) -> Option<Target> {
    let mut found = None;
    b.walk(&mut |s| {
        if found.is_none() {
            found = candidate(s, reader);
        }
    });
    found
}

fn inner_with(p: &Part) -> Option<(&Stmt, &With)> {
    let y = *p.body.yields.first()?;
    let s = p.body.stmts.iter().find(|s| s.defs.first() == Some(&y))?;
    match &s.op {
        // Not a tensor comprehension's (`first_match`: its first covering
        // part wins; spliced into the outer with-loop, the last would).
        Op::With(w) if w.ops.len() == 1 && matches!(w.ops[0], WithOp::Genarray { .. }) && !w.first_match => {
            Some((s, w))
        }
        _ => None,
    }
}

fn candidate(s: &Stmt, reader: &Reader) -> Option<Target> {
    let Op::With(w) = &s.op else { return None };
    let [WithOp::Genarray { shape, default: outer_default }] = w.ops.as_slice() else { return None };
    if w.first_match || w.parts.is_empty() {
        return None;
    }
    let outer_frame = reader.vector(*shape)?;
    let n = outer_frame.len();
    // Parts cover the frame.
    let mut boxes = Vec::new();
    for p in &w.parts {
        if p.step.is_some() || p.width.is_some() || p.offset.is_some() {
            return None;
        }
        let lo = reader.vector(p.lower)?;
        let hi = reader.vector(p.upper)?;
        if lo.len() != n || hi.len() != n {
            return None;
        }
        boxes.push(IndexBox { lo, hi });
    }
    let frame_box = IndexBox { lo: vec![Affine::constant(0); n], hi: outer_frame.clone() };
    if frame_box.subtract_all(&boxes)?.iter().any(|b| b.is_empty() != Some(true)) {
        return None;
    }
    // Disjoint parts (an overlap would let a later part's inner default win).
    for i in 0..boxes.len() {
        for j in i + 1..boxes.len() {
            if boxes[i].intersect(&boxes[j])?.is_empty() != Some(true) {
                return None;
            }
        }
    }
    let mut inner_shape: Option<Vec<Affine>> = None;
    let mut inner_default: Option<Option<ValueId>> = None;
    for p in &w.parts {
        let (inner_stmt, inner) = inner_with(p)?;
        let WithOp::Genarray { shape: ishape, default } = &inner.ops[0] else { return None };
        let ish = reader.vector(*ishape)?;
        match &inner_shape {
            None => inner_shape = Some(ish.clone()),
            Some(x) if x.len() == ish.len() && x.iter().zip(&ish).all(|(a, b)| a.minus(b) == Some(0)) => {}
            _ => return None,
        }
        match &inner_default {
            None => inner_default = Some(*default),
            Some(d) if d == default => {}
            _ => return None,
        }
        if default.is_some_and(|d| !reader.ty(d).shape.is_scalar()) {
            return None;
        }
        // The inner with-loop's bounds, shape and default may not depend on the
        // outer part.
        let mut bound = util::defined_in(&p.body);
        bound.extend(p.index);
        bound.extend(p.scalars.iter().flatten().copied());
        if inner_stmt.op.operands().iter().any(|v| bound.contains(v)) {
            return None;
        }
        for ip in &inner.parts {
            if ip.step.is_some()
                || ip.width.is_some()
                || ip.offset.is_some()
                || !reader.ty(ip.body.yields[0]).shape.is_scalar()
            {
                return None;
            }
        }
        // The result is used only as the yield; little else is computed.
        let result = inner_stmt.defs[0];
        let other_uses = p
            .body
            .stmts
            .iter()
            .filter(|t| t.defs.first() != Some(&result))
            .any(|t| util::free_uses(t).contains(&result));
        if other_uses || p.body.stmts.len() > CHEAP + 1 {
            return None;
        }
        if p.body.stmts.iter().any(|t| {
            !std::ptr::eq(t, inner_stmt) && (util::may_fail(&t.op) || matches!(t.op, Op::With(_) | Op::Loop { .. }))
        }) {
            return None;
        }
    }
    // The outer cells' shape, where known (the result's type, the outer
    // default's), must be the inner with-loop's: else the with-loop fails
    // (R0007), which the scalarised one would not.
    let inner_shape = inner_shape?;
    let mut cells: Vec<Vec<Option<usize>>> = Vec::new();
    if let Shape::Fixed(d) = &reader.ty(s.defs[0]).shape
        && d.len() == n + inner_shape.len()
    {
        cells.push(d[n..].to_vec());
    }
    for cell in &cells {
        for (c, i) in cell.iter().zip(&inner_shape) {
            if c.is_some_and(|c| i.as_const() != Some(c as i64)) {
                return None;
            }
        }
    }
    if let Some(d) = outer_default {
        let same = default_shape(reader, *d).is_some_and(|ds| {
            ds.len() == inner_shape.len() && ds.iter().zip(&inner_shape).all(|(a, b)| a.minus(b) == Some(0))
        });
        if !same {
            return None;
        }
    }
    let mut frame = outer_frame;
    frame.extend(inner_shape);
    Some(Target { outer: s.defs[0], frame, outer_n: n })
}

/// The shape of a with-loop's default cell: its type's extents, or the shape a
/// `genarray(shape, x)` builds it with (L0's maps: `genarray([m], 0.0)`).
fn default_shape(reader: &Reader, d: ValueId) -> Option<Vec<Affine>> {
    if let Some(ext) = reader.ty(d).shape.extents() {
        return Some(ext.iter().map(|&e| Affine::constant(e as i64)).collect());
    }
    match reader.defs.def(d)? {
        index::Def::Prim(Prim::Genarray, args) => reader.vector(*args.first()?),
        _ => None,
    }
}

fn apply(f: &mut Function, body: &mut Block, t: &Target) {
    edit(body, t.outer, &mut |stmts: &mut Vec<Stmt>, at: usize| {
        let span = stmts[at].span;
        let mut pre = Vec::new();
        let Op::With(w) = &mut stmts[at].op else { return };
        let outer_parts = std::mem::take(&mut w.parts);
        let outer_n = t.outer_n;
        let mut parts = Vec::new();
        let mut default = None;
        // The cells are now the inner with-loop's scalars (an empty frame still
        // knows their type).
        let mut cell = None;
        for p in outer_parts {
            let Some((inner_stmt, inner)) = inner_with(&p).map(|(s, w)| (s.clone(), w.clone())) else { return };
            if let WithOp::Genarray { default: d, .. } = &inner.ops[0] {
                default = *d;
            }
            if let Some(ip) = inner.parts.first() {
                cell = Some(Ty::new(f.ty(ip.body.yields[0]).elem, Shape::scalar()));
            }
            for ip in &inner.parts {
                // Concatenated bounds.
                let lower = util::emit_prim(
                    f,
                    &mut pre,
                    Prim::Cat,
                    vec![p.lower, ip.lower],
                    util::int_vec_ty(Some(t.frame.len())),
                    span,
                );
                let upper = util::emit_prim(
                    f,
                    &mut pre,
                    Prim::Cat,
                    vec![p.upper, ip.upper],
                    util::int_vec_ty(Some(t.frame.len())),
                    span,
                );
                let iv = f.new_value(util::int_vec_ty(Some(t.frame.len())), None);
                let mut stmts_out = Vec::new();
                let mut cl = Cloner { src: None, map: HashMap::default() };
                // The outer index: the first components; the inner: the rest.
                if let Some(oi) = p.index {
                    let k = util::emit_const(
                        f,
                        &mut stmts_out,
                        Value::Scalar(crate::interp::value::Scalar::int(outer_n as i64)),
                        span,
                    );
                    let v = util::emit_prim(
                        f,
                        &mut stmts_out,
                        Prim::Take,
                        vec![k, iv],
                        util::int_vec_ty(Some(outer_n)),
                        span,
                    );
                    cl.map.insert(oi, v);
                }
                if let Some(ss) = &p.scalars {
                    for (c, x) in ss.iter().enumerate() {
                        let kv = util::emit_const(f, &mut stmts_out, Value::int_vector(&[c as i64]), span);
                        let v = util::emit_prim(f, &mut stmts_out, Prim::Sel, vec![kv, iv], util::int_ty(), span);
                        cl.map.insert(*x, v);
                    }
                }
                let inner_n = t.frame.len() - outer_n;
                if let Some(ii) = ip.index {
                    let k = util::emit_const(
                        f,
                        &mut stmts_out,
                        Value::Scalar(crate::interp::value::Scalar::int(outer_n as i64)),
                        span,
                    );
                    let v = util::emit_prim(
                        f,
                        &mut stmts_out,
                        Prim::Drop,
                        vec![k, iv],
                        util::int_vec_ty(Some(inner_n)),
                        span,
                    );
                    cl.map.insert(ii, v);
                }
                if let Some(ss) = &ip.scalars {
                    for (c, x) in ss.iter().enumerate() {
                        let kv = util::emit_const(f, &mut stmts_out, Value::int_vector(&[(outer_n + c) as i64]), span);
                        let v = util::emit_prim(f, &mut stmts_out, Prim::Sel, vec![kv, iv], util::int_ty(), span);
                        cl.map.insert(*x, v);
                    }
                }
                // The outer part's other statements, then the inner part's body.
                let outer_rest = Block {
                    stmts: p.body.stmts.iter().filter(|s| s.defs.first() != inner_stmt.defs.first()).cloned().collect(),
                    yields: Vec::new(),
                };
                let rest = cl.block(f, &outer_rest);
                stmts_out.extend(rest.stmts);
                let inner_body = cl.block(f, &ip.body);
                stmts_out.extend(inner_body.stmts);
                parts.push(Part {
                    lower,
                    upper,
                    step: None,
                    width: None,
                    index: Some(iv),
                    scalars: None,
                    offset: None,
                    body: Block { stmts: stmts_out, yields: inner_body.yields },
                    span: ip.span,
                    result_spans: ip.result_spans.clone(),
                });
            }
        }
        let frame = index::emit_vector(f, &mut pre, &t.frame, span);
        let Op::With(w) = &mut stmts[at].op else { return };
        w.parts = parts;
        let elem = w.cells[0].as_ref().map(|c| Ty::new(c.elem, Shape::scalar()));
        w.ops[0] = WithOp::Genarray { shape: frame, default };
        if let Some(c) = cell.or(elem) {
            w.cells[0] = Some(c);
        }
        stmts.splice(at..at, pre);
    });
}

fn edit(b: &mut Block, def: ValueId, f: &mut dyn FnMut(&mut Vec<Stmt>, usize)) -> bool {
    if let Some(at) = b.stmts.iter().position(|s| s.defs.first() == Some(&def)) {
        f(&mut b.stmts, at);
        return true;
    }
    for s in &mut b.stmts {
        let mut done = false;
        s.op.walk_blocks_mut(&mut |inner| {
            if !done {
                done = edit(inner, def, f);
            }
        });
        if done {
            return true;
        }
    }
    false
}

//! # snapshot: copy the slices a with-loop reads across its index space
//!
//! A with-loop computing the next version of an array `a` that it reads for
//! the last time can write into `a`'s buffer (`reuse`) only when it reads `a`
//! at nothing but the index it writes: any other element it reads may already
//! have been overwritten. A Floyd–Warshall step reads row `k` and column `k`
//! beside `d[i, j]`. Copying row `k` (n elements) first, and reading
//! `d[i, k]` when row `i` starts, before any of its cells is written, leaves
//! no read that a write can overtake, so the step updates `d` in place instead
//! of streaming a second n×n buffer (seed 004's in-place updates, for a
//! with-loop whose reads cross its own writes).
//!
//! ```text
//!                                            %r = with { part %lo1 <= [%t] < %hi1 {
//! %d2 = with {                                      %x = prim sel([%k, %t], %d) … } } genarray(%hi1)
//!   part [0, 0] <= [%i, %j] < %s {           %d2 = with {
//!     %x = prim sel([%i, %j], %d)      ⇒       part [0, 0] <= [%i, %j] < %s {
//!     %y = prim sel([%i, %k], %d)                %x = prim sel([%i, %j], %d)
//!     %z = prim sel([%k, %j], %d) …              %y = prim sel([%i, %k], %d)
//!   } } genarray(%s)                             %z = prim sel([%j], %r) …
//!                                              } } genarray(%s) reuse %d
//! ```
//!
//! (`%lo1`/`%hi1`: the part's bounds on axis 1.) A read at `[i, outer…]`,
//! `i` the index on axis 0 of the with-loop's only part, is such a
//! *row read*: the pass sets `reuse` itself (the `reuse` pass takes reads at
//! the written index only), and the back end reads it when row `i` starts
//! (`codegen`'s `emit::withloop`, the row reads of a part). A row is always
//! computed as a whole, by one thread, and only its own cells write
//! `a[i, …]`. Copying the column instead had one thread read a cache line of
//! every row just before the others wrote theirs, at every step (floyd 512 on
//! two threads: 1.5x instead of 2x its one-thread speed). Any other read gets
//! a snapshot: a with-loop copying the slice before it.
//!
//! It applies to a with-loop with one array result — a `modarray`, or a
//! `genarray` of scalar cells — whose buffer candidate (the array `reuse`
//! would pick) is dead afterwards, when every other read of it is a selection
//! of one element at the top of a part body that bounds-check elimination
//! proved in bounds (the body checks nothing), whose index components are the
//! part's index scalars or components of its index vector (each at most once,
//! on fewer axes than the frame has: the slice is smaller than the array) or
//! values defined outside the with-loop. The snapshot spans the part's range
//! on those axes (lower indices stay zero) and is empty when the part is, so
//! it reads exactly the elements the with-loop would read and cannot fail.
//!
//! Limits: parts with a step or width, reads under a conditional, reads at
//! other expressions of the index (`a[i - 1, j]`: a stencil, which keeps
//! writing a fresh buffer) and frames of fewer than [`MIN_FRAME`] elements
//! leave the with-loop as it is; row reads need the with-loop to have one part
//! (a second part could have written the row already) and the row's index as
//! the read's first component (`a[[k, i]]` reads row `k`, which rows before
//! it have written). The copies pay off
//! only when `reuse` then takes the buffer (it runs later in the same stage,
//! and with it switched off this pass does nothing; a caller still holding the
//! array makes the back end copy anyway).

use crate::HashSet;

use super::index::{self, Def, Reader};
use super::reuse;
use super::util;
use super::{Pass, PassCx, RemarkKind};
use crate::interp::ops::BinOp;
use crate::interp::value::{Scalar, Value};
use crate::ir::*;
use crate::sema::hir::Prim;
use crate::sema::ty::{Shape, Ty};
use crate::span::Span;

pub const PASS: Pass = Pass {
    name: "snapshot",
    description: "slices a with-loop reads across its index space are copied first, so it can update its array in place",
    run,
};

/// Frames smaller than this keep writing a fresh buffer: the copies and their
/// allocations would cost about what reusing the buffer saves.
pub const MIN_FRAME: usize = 256;

fn run(m: &mut Module, cx: &mut PassCx) {
    // The copies only pay for themselves when the buffer is then taken over.
    if !cx.options.enabled(reuse::PASS.name) {
        return;
    }
    cx.each_function(m, |f, cx| {
        let facts = Facts { defs: index::defs(f), shapes: util::shape_values(f), constants: reuse::constant_values(f) };
        let params: HashSet<ValueId> = f.params.iter().copied().collect();
        let mut applied: Vec<(Span, String, usize, usize)> = Vec::new();
        util::with_body(f, |f, body| block(f, body, &params, &facts, &mut applied));
        for (span, message, slices, rows) in applied {
            cx.count("slices_copied", slices as u64);
            cx.count("row_reads_first", rows as u64);
            // With row reads this pass gave the result its buffer (`reuse`
            // counts the others under the same name).
            cx.count("buffers_reused", u64::from(rows > 0));
            cx.remark(RemarkKind::Applied, &f.name, Some(span), message);
        }
    });
}

/// What the walk looks things up in (computed before any change).
struct Facts {
    defs: crate::HashMap<ValueId, Def>,
    shapes: crate::HashMap<ValueId, ValueId>,
    constants: HashSet<ValueId>,
}

/// `outer_local`: values the block may consume besides its own (see `reuse`).
fn block(
    f: &mut Function,
    b: &mut Block,
    outer_local: &HashSet<ValueId>,
    facts: &Facts,
    applied: &mut Vec<(Span, String, usize, usize)>,
) {
    let last_use = reuse::last_uses(b);
    let mut local = outer_local.clone();
    for (k, mut s) in std::mem::take(&mut b.stmts).into_iter().enumerate() {
        if let Op::With(w) = &mut s.op {
            let dead_after = |a: ValueId| reuse::consumable(a, k, &local, &last_use, &facts.constants);
            let plan = plan(w, &Reader::new(f, &facts.defs), &facts.shapes, dead_after);
            if let Some(plan) = plan {
                let name = f.values[plan.array.0 as usize].name.clone();
                let what = name.map_or("the array".to_string(), |n| format!("`{n}`"));
                let (slices, rows) = (plan.reads.len(), plan.row_reads);
                apply(f, w, &plan, &mut b.stmts);
                let mut done = Vec::new();
                if slices > 0 {
                    let s = if slices == 1 { "" } else { "s" };
                    done.push(format!("copied {slices} slice{s} of {what} read across the index space first"));
                }
                if rows > 0 {
                    // Nothing else would let the result take the buffer:
                    // `reuse` accepts reads at the written index only.
                    w.reuse[plan.op] = Some(plan.array);
                    let s = if rows == 1 { "" } else { "s" };
                    done.push(format!("reads {rows} element{s} of each row of {what} when the row starts"));
                }
                let message = format!("{}, so the result can take over its buffer", done.join(" and "));
                applied.push((s.span, message, slices, rows));
            }
        }
        match &mut s.op {
            Op::Loop { params, cond, body, .. } => {
                let carried: HashSet<ValueId> = params.iter().copied().collect();
                block(f, cond, &HashSet::default(), facts, applied);
                block(f, body, &carried, facts, applied);
            }
            other => other.walk_blocks_mut(&mut |inner| block(f, inner, &HashSet::default(), facts, applied)),
        }
        local.extend(s.defs.iter().copied());
        b.stmts.push(s);
    }
}

/// One component of a snapshot read's index.
#[derive(Clone, Copy, Debug)]
enum Component {
    /// The part's index scalar on this axis of the frame.
    Index(usize),
    /// A value defined before the with-loop.
    Outer(ValueId),
}

#[derive(Debug)]
struct SliceRead {
    part: usize,
    /// The statement's position in the part body.
    stmt: usize,
    index: Vec<Component>,
    /// The frame axes whose index components the read uses, ascending (the
    /// snapshot's axes), with the component the read has for each.
    axes: Vec<(usize, ValueId)>,
    frame_rank: usize,
    /// Every bound of the part is a constant and the part is not empty: the
    /// snapshot needs no emptiness test, and these are its extents.
    static_extents: Option<Vec<usize>>,
}

#[derive(Debug)]
struct Plan {
    array: ValueId,
    /// The operator whose result takes over `array`'s buffer.
    op: usize,
    /// The reads served by snapshots.
    reads: Vec<SliceRead>,
    /// Reads left in place because they read the row being computed (see
    /// [`row_read`]).
    row_reads: usize,
}

fn plan(
    w: &With,
    reader: &Reader,
    shapes: &crate::HashMap<ValueId, ValueId>,
    dead_after: impl Fn(ValueId) -> bool,
) -> Option<Plan> {
    let producing: Vec<usize> = (0..w.ops.len()).filter(|&k| !matches!(w.ops[k], WithOp::Fold { .. })).collect();
    let [k] = producing[..] else { return None };
    let a = reuse::candidates(w, reader, shapes)[k]?;
    if w.reuse[k].is_some() || !dead_after(a) || reuse::other_operand(w, k, a) {
        return None;
    }
    let rank = reader.ty(a).shape.rank_if_known()?;
    if reader.ty(a).shape.extents().is_some_and(|e| e.iter().product::<usize>() < MIN_FRAME) {
        return None;
    }
    let mut inside: HashSet<ValueId> = HashSet::default();
    for p in &w.parts {
        inside.extend(util::defined_in(&p.body));
        inside.extend(p.index.iter().chain(p.offset.iter()).chain(p.scalars.iter().flatten()).copied());
    }
    let mut reads = Vec::new();
    let mut row_reads = 0;
    for (pi, p) in w.parts.iter().enumerate() {
        // A selection is unchecked when bounds-check elimination proved it in
        // bounds, or when a check before it (in the body) guards it: then a
        // snapshot taken before the with-loop would read out of bounds.
        let mut checked = false;
        p.body.walk(&mut |s| checked |= matches!(s.op, Op::Check(_)));
        if checked || p.body.yields.contains(&a) {
            return None;
        }
        for (si, s) in p.body.stmts.iter().enumerate() {
            if !util::free_uses(s).contains(&a) {
                continue;
            }
            match &s.op {
                Op::Prim { prim: Prim::Shape | Prim::Dim | Prim::Size, .. } => {}
                Op::Prim { prim: Prim::Sel | Prim::IdxSel, .. } if reuse::at_written_index(p, &s.op, reader) => {}
                Op::Prim { prim: Prim::Sel, args, checked: false, .. } if args[1] == a => {
                    let read = slice_read(p, pi, si, args[0], rank, &inside, reader)?;
                    if row_read(w, &read) {
                        row_reads += 1;
                    } else {
                        reads.push(read);
                    }
                }
                _ => return None,
            }
        }
    }
    (!reads.is_empty() || row_reads > 0).then_some(Plan { array: a, op: k, reads, row_reads })
}

/// Whether a read is left in place, for the back end to make when the row it
/// reads starts: it reads the with-loop's only part at `[i, outer…]`, `i` the
/// part's index on axis 0 (its scalar or its index vector's component). A row
/// (all indices with one `i`) is computed as a whole (the outermost loop runs
/// over `i`, and threads split that loop), and only its own cells write
/// `a[i, …]`, so before the first of them `a[i, …]` still holds the old
/// elements. Copying a column instead made one thread read every row just
/// before the others wrote theirs (a Floyd–Warshall step's column `k`), moving
/// a cache line of each row between cores at every step.
fn row_read(w: &With, read: &SliceRead) -> bool {
    // `i` must be the read's first component (`a[[k, i]]` reads row `k`,
    // which another row's cells may already have written).
    w.parts.len() == 1
        && read.frame_rank >= 2
        && matches!(read.axes[..], [(0, _)])
        && matches!(read.index.first(), Some(Component::Index(0)))
}

/// A read `sel(index, a)` in part `p` that a snapshot can serve, if it is one.
fn slice_read(
    p: &Part,
    part: usize,
    stmt: usize,
    index: ValueId,
    rank: usize,
    inside: &HashSet<ValueId>,
    reader: &Reader,
) -> Option<SliceRead> {
    let Some(Def::Array(components)) = reader.defs.def(index) else { return None };
    if components.len() != rank || p.step.is_some() || p.width.is_some() {
        return None;
    }
    // The frame axis of an index component: a scalar the part binds, or a
    // component of the index vector it binds.
    let axis_of = |v: ValueId| -> Option<usize> {
        if let Some(q) = p.scalars.as_ref().and_then(|s| s.iter().position(|&x| x == v)) {
            return Some(q);
        }
        let Some(Def::Prim(Prim::Sel, args)) = reader.defs.def(v) else { return None };
        let Some(Def::Const(c)) = reader.defs.def(args[0]) else { return None };
        match util::int_vec(&c).as_deref() {
            Some(&[q]) if p.index == Some(args[1]) && (0..rank as i64).contains(&q) => Some(q as usize),
            _ => None,
        }
    };
    let mut axes: Vec<(usize, ValueId)> = Vec::new();
    let mut comps = Vec::new();
    for v in components {
        if let Some(q) = axis_of(v) {
            if axes.iter().any(|&(x, _)| x == q) {
                return None;
            }
            axes.push((q, v));
            comps.push(Component::Index(q));
        } else if inside.contains(&v) {
            return None;
        } else {
            comps.push(Component::Outer(v));
        }
    }
    if axes.is_empty() || axes.len() >= rank {
        return None;
    }
    axes.sort_unstable_by_key(|&(q, _)| q);
    let bounds = |v: ValueId| reader.vector(v)?.iter().map(|c| c.as_const()).collect::<Option<Vec<i64>>>();
    let static_extents = match (bounds(p.lower), bounds(p.upper)) {
        (Some(lo), Some(hi)) if lo.iter().zip(&hi).all(|(l, h)| l < h) => {
            Some(axes.iter().map(|&(q, _)| hi[q] as usize).collect())
        }
        _ => None,
    };
    Some(SliceRead { part, stmt, index: comps, axes, frame_rank: rank, static_extents })
}

/// Builds the snapshots before the with-loop (into `out`) and points the reads
/// at them.
fn apply(f: &mut Function, w: &mut With, plan: &Plan, out: &mut Vec<Stmt>) {
    let elem = f.ty(plan.array).elem;
    // Later statements first, so earlier positions stay valid.
    let mut order: Vec<&SliceRead> = plan.reads.iter().collect();
    order.sort_by_key(|r| std::cmp::Reverse((r.part, r.stmt)));
    for read in order {
        let p = &w.parts[read.part];
        let (lower, upper) = (p.lower, p.upper);
        let old = &p.body.stmts[read.stmt];
        let (span, blame, cell) = (old.span, old.blame, old.defs[0]);
        let m = read.axes.len();
        let (lo, hi) = snapshot_bounds(f, out, lower, upper, read, span);
        let lo_vec = emit_array(f, out, lo, util::int_vec_ty(Some(m)), span);
        let hi_vec = emit_array(f, out, hi, util::int_vec_ty(Some(m)), span);
        // The snapshot: its index scalars stand for the part's on its axes.
        let ts: Vec<ValueId> = read
            .axes
            .iter()
            .map(|&(_, v)| {
                let name = f.values[v.0 as usize].name.clone();
                f.new_value(util::int_ty(), name)
            })
            .collect();
        let mut body = Vec::new();
        let index: Vec<ValueId> = read
            .index
            .iter()
            .map(|c| match *c {
                Component::Index(q) => ts[read.axes.iter().position(|&(x, _)| x == q).unwrap_or(0)],
                Component::Outer(v) => v,
            })
            .collect();
        let full_index = emit_array(f, &mut body, index.clone(), util::int_vec_ty(Some(index.len())), span);
        let cell_ty = f.ty(cell).clone();
        let x = f.new_value(cell_ty.clone(), None);
        body.push(Stmt { defs: vec![x], op: sel(full_index, plan.array), span, blame });
        let shape = match &read.static_extents {
            Some(e) => Shape::known(e),
            None => Shape::rank(m),
        };
        let snapshot = f.new_value(Ty::new(elem, shape), None);
        out.push(Stmt {
            defs: vec![snapshot],
            op: Op::With(Box::new(With {
                parts: vec![Part {
                    lower: lo_vec,
                    upper: hi_vec,
                    step: None,
                    width: None,
                    index: None,
                    scalars: Some(ts),
                    offset: None,
                    body: Block { stmts: body, yields: vec![x] },
                    span,
                    result_spans: vec![span],
                }],
                ops: vec![WithOp::Genarray { shape: hi_vec, default: None }],
                first_match: false,
                // Empty snapshots have scalar cells too.
                cells: vec![Some(cell_ty)],
                reuse: vec![None],
            })),
            span,
            blame,
        });
        // The read: the part's index components on the snapshot's axes.
        let p = &mut w.parts[read.part];
        let slice_index = f.new_value(util::int_vec_ty(Some(m)), None);
        let slice_op = Op::Array(read.axes.iter().map(|&(_, v)| v).collect());
        p.body.stmts[read.stmt].op = sel(slice_index, snapshot);
        p.body.stmts.insert(read.stmt, Stmt { defs: vec![slice_index], op: slice_op, span, blame });
    }
}

/// `sel(index, array)`, proved in bounds.
fn sel(index: ValueId, array: ValueId) -> Op {
    Op::Prim { prim: Prim::Sel, args: vec![index, array], checked: false, in_place: false }
}

fn emit_array(f: &mut Function, out: &mut Vec<Stmt>, items: Vec<ValueId>, ty: Ty, span: Span) -> ValueId {
    let v = f.new_value(ty, None);
    out.push(Stmt::new(vec![v], Op::Array(items), span));
    v
}

/// The snapshot's generator bounds, one per axis: the part's, or zeros when
/// the part may be empty and is (then the with-loop reads nothing, and an
/// outer index component need not be in bounds).
fn snapshot_bounds(
    f: &mut Function,
    out: &mut Vec<Stmt>,
    lower: ValueId,
    upper: ValueId,
    read: &SliceRead,
    span: Span,
) -> (Vec<ValueId>, Vec<ValueId>) {
    if read.static_extents.is_some() {
        let lo = read.axes.iter().map(|&(q, _)| util::emit_component(f, out, lower, q, span)).collect();
        let hi = read.axes.iter().map(|&(q, _)| util::emit_component(f, out, upper, q, span)).collect();
        return (lo, hi);
    }
    let mut bounds = Vec::new();
    let mut nonempty = None;
    for r in 0..read.frame_rank {
        let l = util::emit_component(f, out, lower, r, span);
        let h = util::emit_component(f, out, upper, r, span);
        bounds.push((l, h));
        let lt = util::emit_prim(f, out, Prim::Bin(BinOp::Lt), vec![l, h], util::bool_ty(), span);
        nonempty = Some(match nonempty {
            None => lt,
            Some(c) => util::emit_prim(f, out, Prim::Bin(BinOp::And), vec![c, lt], util::bool_ty(), span),
        });
    }
    let lo: Vec<ValueId> = read.axes.iter().map(|&(q, _)| bounds[q].0).collect();
    let hi: Vec<ValueId> = read.axes.iter().map(|&(q, _)| bounds[q].1).collect();
    let Some(cond) = nonempty else { return (lo, hi) };
    let zero = util::emit_const(f, out, Value::Scalar(Scalar::int(0)), span);
    let mut defs = Vec::new();
    let mut yields = Vec::new();
    for &v in lo.iter().chain(&hi) {
        defs.push(f.new_value(util::int_ty(), None));
        yields.push(v);
    }
    let empty = vec![zero; yields.len()];
    out.push(Stmt::new(
        defs.clone(),
        Op::If {
            cond,
            then_block: Block { stmts: Vec::new(), yields },
            else_block: Block { stmts: Vec::new(), yields: empty },
        },
        span,
    ));
    let m = lo.len();
    (defs[..m].to_vec(), defs[m..].to_vec())
}

//! # reuse: memory reuse and updates in place
//!
//! Reference-count inference at compile time (seed 003 §3.4): an array whose
//! value is read for the last time by a with-loop or an element update can lend
//! its buffer to the result.
//!
//! * A `modarray(a)` with-loop, or a `genarray` with-loop over `a`'s shape and
//!   element type that one part covers (the back end clears the cells no part
//!   writes before the parts run), reuses `a` (`reuse %a`) when `a` is dead afterwards and the
//!   with-loop reads `a` only at the index it writes, in parts proven not to
//!   overlap where there are several (so no element is read after
//!   it has been overwritten; `snapshot` copies what it reads elsewhere first,
//!   and itself gives the buffer to a with-loop whose other reads stay in the
//!   row being computed, which the back end reads when the row starts).
//!   `a`'s shape is known from `util::shape_values`, loop-carried arrays that
//!   keep their shape included.
//! * An element update `modarray(a, iv, v)` / `idx_modarray(a, off, v)` writes
//!   in place (`in_place`) when `a` is dead afterwards — the typical
//!   `a[i] = x` in a loop, whose array is a loop-carried value.
//!
//! ```text
//! %r = with { part … offset %o {                  %r = with { part … offset %o {
//!        %x = prim idx_sel(%o, %a) …       ⇒             %x = prim idx_sel(%o, %a) …
//!      } } genarray(%s)                               } } genarray(%s) reuse %a
//! ```
//!
//! "Dead afterwards" is decided per block: no later statement or yield reads
//! the value, and the value is defined in the same block (or is a parameter of
//! the function, for the function body), so a loop does not reuse a buffer it
//! reads again in its next iteration. The back end still checks the buffer's
//! reference count at run time (a caller may hold it too); the IR interpreter
//! forgets a consumed value, so a wrong claim shows up as a compiler bug.
//! Limits: aliases through `if` results and calls are not tracked, so those
//! stay copies.

use crate::HashSet;

use super::index::{self, Reader};
use super::util;
use super::{Pass, PassCx};
use crate::ir::*;
use crate::sema::hir::Prim;

pub const PASS: Pass = Pass {
    name: "reuse",
    description: "memory reuse: with-loop results take over dead argument buffers; element updates in place",
    run,
};

fn run(m: &mut Module, cx: &mut PassCx) {
    cx.each_function(m, |f, cx| {
        let defs = index::defs(f);
        let values = f.values.clone();
        let reader = Reader { values: &values, defs: &defs };
        let shapes = util::shape_values(f);
        let mut counts = (0u64, 0u64);
        let params: HashSet<ValueId> = f.params.iter().copied().collect();
        let constants = constant_values(f);
        let cx2 = Cx { reader: &reader, shapes: &shapes, constants: &constants };
        block(&mut f.body, &params, &cx2, &mut counts);
        cx.count("buffers_reused", counts.0);
        cx.count("updates_in_place", counts.1);
    });
}

/// Values defined by constants: static data, never written.
pub(super) fn constant_values(f: &Function) -> HashSet<ValueId> {
    let mut constants = HashSet::default();
    f.body.walk(&mut |s| {
        if matches!(s.op, Op::Const(_)) {
            constants.extend(s.defs.iter().copied());
        }
    });
    constants
}

/// What the walk looks things up in.
struct Cx<'a> {
    reader: &'a Reader<'a>,
    shapes: &'a crate::HashMap<ValueId, ValueId>,
    constants: &'a HashSet<ValueId>,
}

/// `outer_local`: values the block may consume besides its own (for the
/// function body, the parameters; for loop bodies, the loop's parameters).
fn block(b: &mut Block, outer_local: &HashSet<ValueId>, cx: &Cx, counts: &mut (u64, u64)) {
    let (reader, shapes) = (cx.reader, cx.shapes);
    let mut local: HashSet<ValueId> = outer_local.clone();
    let last_use = last_uses(b);
    for k in 0..b.stmts.len() {
        let dead_after = |v: ValueId, local: &HashSet<ValueId>| consumable(v, k, local, &last_use, cx.constants);
        let s = &mut b.stmts[k];
        match &mut s.op {
            Op::Prim { prim: Prim::Modarray | Prim::IdxModarray, args, in_place, .. }
                if !*in_place && dead_after(args[0], &local) && !args[1..].contains(&args[0]) =>
            {
                *in_place = true;
                counts.1 += 1;
            }
            // One result array per with-loop (a part's write offset is into it).
            Op::With(w) if w.ops.iter().filter(|o| !matches!(o, WithOp::Fold { .. })).count() == 1 => {
                let candidates = candidates(w, reader, shapes);
                let mut taken: HashSet<ValueId> = HashSet::default();
                for (k2, cand) in candidates.into_iter().enumerate() {
                    let Some(a) = cand else { continue };
                    if w.reuse[k2].is_some() || taken.contains(&a) || !dead_after(a, &local) {
                        continue;
                    }
                    if !read_only_at_written_index(w, a, reader) {
                        continue;
                    }
                    if other_operand(w, k2, a) {
                        continue;
                    }
                    w.reuse[k2] = Some(a);
                    taken.insert(a);
                    counts.0 += 1;
                }
            }
            _ => {}
        }
        // Nested blocks: their own locals.
        match &mut s.op {
            Op::Loop { params, cond, body, .. } => {
                let ps: HashSet<ValueId> = params.iter().copied().collect();
                block(cond, &HashSet::default(), cx, counts);
                block(body, &ps, cx, counts);
            }
            other => other.walk_blocks_mut(&mut |inner| block(inner, &HashSet::default(), cx, counts)),
        }
        local.extend(b.stmts[k].defs.iter().copied());
    }
}

/// Where each value a block reads is read last: the position of the last
/// statement reading it, or the number of statements when the block yields
/// it. A value is dead after statement `k` when it is absent or at most `k`.
pub(super) fn last_uses(b: &Block) -> crate::HashMap<ValueId, usize> {
    let mut last = crate::HashMap::default();
    for (k, s) in b.stmts.iter().enumerate() {
        util::for_each_free_use(s, &mut |v| {
            last.insert(v, k);
        });
    }
    for &y in &b.yields {
        last.insert(y, b.stmts.len());
    }
    last
}

/// Whether statement `k` of a block may consume `v`: `v` is the block's own
/// (`local`), not read after the statement ([`last_uses`]), and not a constant.
pub(super) fn consumable(
    v: ValueId,
    k: usize,
    local: &HashSet<ValueId>,
    last_use: &crate::HashMap<ValueId, usize>,
    constants: &HashSet<ValueId>,
) -> bool {
    local.contains(&v) && last_use.get(&v).is_none_or(|&u| u <= k) && !constants.contains(&v)
}

/// Whether a selection reads a part's own index: `idx_sel(offset, _)`, or
/// `sel(iv, _)` with the part's index vector or the vector of its index
/// scalars (before index vector elimination).
pub fn at_written_index(p: &Part, op: &Op, reader: &Reader) -> bool {
    match op {
        Op::Prim { prim: Prim::IdxSel, args, .. } => p.offset.is_some() && Some(args[0]) == p.offset,
        Op::Prim { prim: Prim::Sel, args, .. } => {
            Some(args[0]) == p.index
                || matches!((reader.defs.def(args[0]), &p.scalars),
                    (Some(index::Def::Array(c)), Some(s)) if c == *s)
        }
        _ => false,
    }
}

/// Per operator of a with-loop, the array whose buffer its result could take
/// over: a `modarray`'s array, or for a `genarray` of scalar cells an array of
/// its shape and element type that it reads at its own index.
pub(super) fn candidates(w: &With, reader: &Reader, shapes: &crate::HashMap<ValueId, ValueId>) -> Vec<Option<ValueId>> {
    w.ops
        .iter()
        .enumerate()
        .map(|(k, op)| match op {
            WithOp::Modarray { array } => Some(*array),
            WithOp::Genarray { shape, .. } => genarray_candidate(w, k, *shape, reader, shapes),
            WithOp::Fold { .. } | WithOp::Scan { .. } | WithOp::Filter { .. } => None,
        })
        .collect()
}

/// Whether `a` is an operand of the with-loop other than as operator `k`'s
/// modarray array.
pub(super) fn other_operand(w: &With, k: usize, a: ValueId) -> bool {
    w.ops.iter().enumerate().any(|(j, op)| match op {
        WithOp::Modarray { array } => j != k && *array == a,
        WithOp::Genarray { shape, default } => *shape == a || *default == Some(a),
        WithOp::Fold { partial, neutral, fixpoint, .. } => {
            partial.contains(&a) || *neutral == a || *fixpoint == Some(a)
        }
        WithOp::Scan { shape, partial, neutral, .. } => *shape == a || partial.contains(&a) || *neutral == a,
        WithOp::Filter { shape } => *shape == a,
    })
}

/// For a genarray operator with scalar cells: an array of the same shape and
/// element type it could write into.
fn genarray_candidate(
    w: &With,
    k: usize,
    shape: ValueId,
    reader: &Reader,
    shapes: &crate::HashMap<ValueId, ValueId>,
) -> Option<ValueId> {
    let frame = reader.vector(shape)?;
    // The parts must write every cell: the back end zeroes (or fills with the
    // default) the cells no part writes before the parts run, which in a
    // taken-over buffer would also clear the elements the body still reads.
    // One part from zero to the frame's shape (the same value, or equal
    // constants): the test code generation makes (`covers_frame`).
    let consts = |v: ValueId| reader.vector(v)?.iter().map(|x| x.as_const()).collect::<Option<Vec<i64>>>();
    let whole = |p: &Part| {
        p.step.is_none()
            && p.width.is_none()
            && consts(p.lower).is_some_and(|l| l.iter().all(|&x| x == 0))
            && (p.upper == shape || consts(p.upper).is_some_and(|u| Some(u) == consts(shape)))
    };
    if !w.parts.iter().any(whole) {
        return None;
    }
    let elem = w.parts.first().map(|p| reader.ty(w.element_yield(p, k)).elem)?;
    if !w.parts.iter().all(|p| reader.ty(w.element_yield(p, k)).shape.is_scalar()) {
        return None;
    }
    // Arrays the with-loop reads at its own index.
    let mut found = None;
    for p in &w.parts {
        p.body.walk(&mut |s| {
            if found.is_some() {
                return;
            }
            let a = match &s.op {
                Op::Prim { prim: Prim::IdxSel | Prim::Sel, args, .. } if at_written_index(p, &s.op, reader) => args[1],
                _ => return,
            };
            // A rank-0 frame's "array of its shape" may be a scalar, which has
            // no buffer (the back end keeps scalars as plain values).
            if reader.ty(a).elem != elem || reader.ty(a).shape.is_scalar() {
                return;
            }
            let shape_of = match reader.ty(a).shape.extents() {
                Some(e) => Some(e.iter().map(|&x| index::Affine::constant(x as i64)).collect::<Vec<_>>()),
                None => shapes.get(&a).and_then(|s| reader.vector(*s)),
            };
            if shape_of
                .is_some_and(|sh| sh.len() == frame.len() && sh.iter().zip(&frame).all(|(x, y)| x.minus(y) == Some(0)))
            {
                found = Some(a);
            }
        });
    }
    found
}

/// Whether every read of `a` inside the with-loop is at the index being
/// written, and written by no other part: parts may overlap (the later one
/// wins), and a part reading `a[iv]` after another wrote `iv` into the shared
/// buffer would read the new element.
fn read_only_at_written_index(w: &With, a: ValueId, reader: &Reader) -> bool {
    let reads_a = |p: &Part| {
        let mut found = false;
        p.body.walk(&mut |s| found |= s.op.operands().contains(&a));
        found
    };
    if w.parts.len() > 1 && w.parts.iter().any(reads_a) && !parts_disjoint(w, reader) {
        return false;
    }
    w.parts.iter().all(|p| {
        let mut ok = true;
        p.body.walk(&mut |s| {
            if !s.op.operands().contains(&a) {
                return;
            }
            ok &= match &s.op {
                Op::Prim { prim: Prim::IdxSel | Prim::Sel, args, .. } => {
                    args[1] == a && at_written_index(p, &s.op, reader)
                }
                Op::Prim { prim: Prim::Shape | Prim::Dim | Prim::Size, .. } => true,
                _ => false,
            };
        });
        ok
    })
}

/// Whether no two parts of `w` share an index (their boxes, steps and widths
/// aside, are proven apart along some axis).
fn parts_disjoint(w: &With, reader: &Reader) -> bool {
    use index::Order as _;
    let facts = index::Facts::default();
    let known = index::Known { reader, facts: &facts };
    let boxes: Option<Vec<(Vec<index::Affine>, Vec<index::Affine>)>> =
        w.parts.iter().map(|p| Some((reader.vector(p.lower)?, reader.vector(p.upper)?))).collect();
    let Some(boxes) = boxes else { return false };
    // `x <= y` for certain.
    let at_most = |x: &index::Affine, y: &index::Affine| known.range(&y.sub(x)).0.is_some_and(|lo| lo >= 0);
    boxes.iter().enumerate().all(|(i, (lo_i, hi_i))| {
        boxes[i + 1..].iter().all(|(lo_j, hi_j)| {
            lo_i.len() == lo_j.len()
                && (0..lo_i.len()).any(|d| {
                    at_most(&hi_i[d], &lo_j[d])
                        || at_most(&hi_j[d], &lo_i[d])
                        || at_most(&hi_i[d], &lo_i[d])
                        || at_most(&hi_j[d], &lo_j[d])
                })
        })
    })
}

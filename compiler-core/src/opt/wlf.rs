//! # wlf: with-loop folding (seed 002)
//!
//! A with-loop `C` that selects elements of an array `B` computed by an earlier
//! with-loop (`B[iv + c]`) computes them itself instead: the selection is
//! replaced by the expression of the part of `B` the index falls into. When the
//! index can fall into several parts of `B` (or its default or, for `modarray`,
//! the unchanged elements), the part of `C` is split into the preimages of `B`'s
//! partition — exactly seed 002's Fig. 4 step. `B` then dies (dead code
//! elimination removes it). A `modarray(B)` consumer is first turned into a
//! `genarray` whose remaining elements are explicit parts reading `B`, so those
//! fold too (seed 002's `internal_with`). Afterwards, adjacent parts of a
//! with-loop whose bodies are the same are merged back into one.
//!
//! The 80-element example of seed 002:
//!
//! ```text
//! B = with { ([0] <= i < [40]) : A[i] + 3; } : modarray(A)
//! C = with { ([20] <= j < [80]) : B[j] + B[j - 10]; } : modarray(B)
//!   ⇒
//! C = with { ([0]  <= j < [20]) : A[j] + 3;
//!            ([20] <= j < [40]) : (A[j] + 3) + (A[j - 10] + 3);
//!            ([40] <= j < [50]) : A[j] + (A[j - 10] + 3);
//!            ([50] <= j < [80]) : A[j] + A[j - 10]; } : genarray([80])
//! ```
//!
//! Conditions, each reported as a missed remark when it fails:
//! * the index is affine in the consumer's index — per component `j_a + o` or an
//!   invariant `o`, where `o` may be symbolic (seed 002's linear projections with
//!   factor 1); when the index length is not known statically (rank-generic
//!   code), only the identity: a one-part producer over all of its frame
//!   `[0, s)`, selected at the consumer's own index over `[0, s)` (seed 000's
//!   `implies = disj(bneg(a), b)` on `bool[*]`);
//! * `B`'s parts are dense boxes, and the bounds involved compare (constants, or
//!   symbolic bounds that differ by constants, as `shape(a)` and `shape(a) - 1`,
//!   or whose order the conditions around the consumer tell: `1` and `m - 1`
//!   where `m >= 3`, see [`super::version`]);
//! * every index of the consumer's part selects inside `B` (otherwise the
//!   selection must stay to fail, or to be guarded by a conditional);
//! * no work is duplicated: either `B`'s parts are cheap (a few scalar
//!   operations), or `B` is read once per consumer element, by this consumer
//!   only, touching each of its elements at most once (seed 002 §5's criterion);
//! * splitting a fold consumer changes the order it combines elements in, so it is
//!   only done for exactly associative and commutative folds (integer `+`, `*`,
//!   `min`, `max`, logical and bitwise operators).

use crate::{HashMap, HashSet};
use std::borrow::Cow;

use super::index::{self, Affine, Atom, Def, IndexBox, Known, Order, Reader};
use super::util::{self, Cloner};
use super::{Pass, PassCx, RemarkKind};
use crate::interp::ops::BinOp;
use crate::interp::value::{Scalar, Value};
use crate::ir::*;
use crate::sema::hir::{Elem, Prim};
use crate::sema::ty::Shape;
use crate::span::Span;

pub const PASS: Pass = Pass {
    name: "wlf",
    description: "with-loop folding: selections from with-loop results replaced by their element expressions, splitting index sets",
    run,
};

/// Folds per function and run (a guard against blow-up).
const MAX_FOLDS: usize = 512;
/// A producer part with at most this many statements (and no loops, calls or
/// with-loops) is cheap: recomputing its element costs about as much as storing
/// and loading it.
const CHEAP: usize = 12;
/// A with-loop is not split into more parts than this.
const MAX_PARTS: usize = 256;

fn run(m: &mut Module, cx: &mut PassCx) {
    cx.each_function(m, |f, cx| {
        let mut folds = 0;
        let mut normalised = 0;
        let mut misses: Vec<(Option<Span>, String)> = Vec::new();
        while folds < MAX_FOLDS {
            if normalise_modarray_consumer(f) {
                normalised += 1;
                continue;
            }
            let applied = fold_batch(f, &mut misses, MAX_FOLDS - folds);
            if applied.is_empty() {
                break;
            }
            folds += applied.len();
            let name = f.name.clone();
            for (span, msg) in applied {
                cx.remark(RemarkKind::Applied, &name, span, msg);
            }
        }
        let mut consts = util::constants(f);
        let merged = util::with_body(f, |f, body| merge_parts_block(f, body, &mut consts));
        let name = f.name.clone();
        for (span, msg) in misses {
            cx.remark(RemarkKind::Missed, &name, span, msg);
        }
        cx.count("with_loops_folded", folds as u64);
        cx.count("modarray_consumers_expanded", normalised as u64);
        cx.count("parts_merged", merged as u64);
    });
}

/// What an element of the producer is, per region of its index space.
#[derive(Clone, Debug)]
enum Source {
    /// Part `k`'s body.
    Part(usize),
    /// The genarray default (or zero).
    Default,
    /// The modarray argument's element.
    Unchanged(ValueId),
}

/// A producer with-loop, seen from one of its results. Planning borrows the
/// with-loop (most plans fail, and producers can be large); a plan that
/// succeeds owns a copy, since folds rewrite the function before it is applied.
#[derive(Clone)]
struct Producer<'a> {
    with: Cow<'a, With>,
    /// Which operator makes the result.
    op: usize,
    /// The index space (the first `n` axes of the frame).
    frame: IndexBox,
    /// Disjoint regions covering the frame, and what each computes.
    regions: Vec<(IndexBox, Source)>,
    cheap: bool,
}

impl Producer<'_> {
    fn owned(self) -> Producer<'static> {
        let Producer { with, op, frame, regions, cheap } = self;
        Producer { with: Cow::Owned(with.into_owned()), op, frame, regions, cheap }
    }
}

/// A selection `sel(idx, B)` inside a consumer's part.
#[derive(Clone, Debug)]
struct Reference {
    consumer: ValueId,
    part: usize,
    def: ValueId,
    idx: ValueId,
    array: ValueId,
    span: Span,
    consumer_span: Span,
}

/// Per component of the index: the consumer axis it moves with (if any) and
/// the offset.
type Projection = Vec<(Option<usize>, Affine)>;

fn producer<'a>(f: &Function, stmt: &'a Stmt, op: usize, r: &Reader, ord: &dyn Order) -> Result<Producer<'a>, String> {
    let Op::With(w) = &stmt.op else { return Err("not a with-loop".into()) };
    let n = match w.parts.first() {
        Some(p) => r.vector(p.lower).map(|v| v.len()).ok_or("its index length is not known statically")?,
        None => return Err("it has no parts".into()),
    };
    let frame_vec: Vec<Affine> = match &w.ops[op] {
        WithOp::Genarray { shape, .. } => r.vector(*shape).ok_or("its shape's length is not known statically")?,
        WithOp::Modarray { array } => match util::extents(f, *array) {
            Some(e) => e.iter().map(|&x| Affine::constant(x as i64)).collect(),
            None => return Err("the shape of the array it modifies is not known statically".into()),
        },
        WithOp::Fold { .. } => return Err("it is a fold".into()),
        WithOp::Scan { .. } | WithOp::Filter { .. } => return Err("it is a scan or filter".into()),
    };
    if frame_vec.len() < n {
        return Err("its index is longer than its result's rank".into());
    }
    let frame = IndexBox { lo: vec![Affine::constant(0); n], hi: frame_vec[..n].to_vec() };
    let mut boxes = Vec::new();
    for p in &w.parts {
        let dense = |v: Option<ValueId>| {
            v.is_none_or(|x| r.vector(x).is_some_and(|c| c.iter().all(|a| a.as_const() == Some(1))))
        };
        if !dense(p.step) || !dense(p.width) {
            return Err("it has a part with step or width".into());
        }
        let lo = r.vector(p.lower).filter(|v| v.len() == n).ok_or("its bounds are not known")?;
        let hi = r.vector(p.upper).filter(|v| v.len() == n).ok_or("its bounds are not known")?;
        let b = IndexBox { lo, hi };
        if b.inside_in(&frame, ord) != Some(true) {
            return Err("a part's generator may exceed its result".into());
        }
        boxes.push(b);
    }
    let mut regions = Vec::new();
    for (k, b) in boxes.iter().enumerate() {
        let others: Vec<IndexBox> = if w.first_match { boxes[..k].to_vec() } else { boxes[k + 1..].to_vec() };
        let pieces = b.subtract_all_in(&others, ord).ok_or("the order of its parts' bounds is not known")?;
        regions.extend(pieces.into_iter().map(|p| (p, Source::Part(k))));
    }
    let rest = frame.subtract_all_in(&boxes, ord).ok_or("the order of its bounds is not known")?;
    let src = match &w.ops[op] {
        WithOp::Modarray { array } => Source::Unchanged(*array),
        _ => Source::Default,
    };
    regions.extend(rest.into_iter().map(|p| (p, src.clone())));
    let cheap = w.parts.iter().all(cheap_part);
    Ok(Producer { with: Cow::Borrowed(&**w), op, frame, regions, cheap })
}

/// A few scalar operations: recomputing its element costs about as much as
/// storing and loading it.
fn cheap_part(p: &Part) -> bool {
    util::size(&p.body) <= CHEAP && {
        let mut simple = true;
        p.body.walk(&mut |s| simple &= !matches!(s.op, Op::With(_) | Op::Loop { .. } | Op::Call { .. }));
        simple
    }
}

/// Exactly associative and commutative folds (their order does not matter).
fn exact_fold(f: &Function, op: &WithOp) -> bool {
    match op {
        WithOp::Fold { fun: FoldFn::Prim(Prim::Bin(b)), neutral, .. } => {
            let integral = matches!(f.ty(*neutral).elem, Elem::Base(t) if t.is_integer() || t == crate::syntax::ast::BaseType::Bool);
            match b {
                BinOp::And | BinOp::Or => true,
                // Floats' `min`/`max` depend on the order where a NaN is
                // met (`min(1, nan)` is nan, `min(nan, 1)` is 1).
                BinOp::Min | BinOp::Max | BinOp::Add | BinOp::Mul | BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor => {
                    integral
                }
                _ => false,
            }
        }
        WithOp::Fold { .. } => false,
        // Scans and filters traverse their frame in order, whatever the parts.
        _ => true,
    }
}

/// The axis of `p`'s index space that `atom` (a component of its index vector,
/// or one of its scalar indices) runs along.
fn axis_of(p: &Part, atom: &Atom) -> Option<usize> {
    match atom.component {
        Some(k) if p.index == Some(atom.value) => Some(k),
        None => p.scalars.as_ref()?.iter().position(|s| *s == atom.value),
        _ => None,
    }
}

/// The index atoms of a part, `length` components long, and their axes: its
/// index vector's components and its scalars.
fn index_atoms(p: &Part, length: usize) -> HashMap<Atom, usize> {
    let mut out = HashMap::default();
    if let Some(iv) = p.index {
        for k in 0..length {
            out.insert(Atom { value: iv, component: Some(k) }, k);
        }
    }
    if let Some(ss) = &p.scalars {
        for (k, s) in ss.iter().enumerate() {
            out.insert(Atom { value: *s, component: None }, k);
        }
    }
    out
}

fn projection(r: &Reader, idx: ValueId, part: &Part) -> Result<Projection, String> {
    let comps = r.vector(idx).ok_or("the index's length is not known statically")?;
    let mut out = Vec::with_capacity(comps.len());
    for c in comps {
        let mut axis = None;
        let mut offset = c.clone();
        for (a, k) in &c.terms {
            if let Some(ax) = axis_of(part, a) {
                if *k != 1 || axis.is_some() {
                    return Err("the index is not the consumer's index plus an offset".into());
                }
                axis = Some(ax);
                offset.terms.remove(a);
            }
        }
        out.push((axis, offset));
    }
    Ok(out)
}

/// What holds where a consumer part runs: the ranges of the indices of the
/// with-loop parts around it, equalities that checks before it assert
/// (L0's zip-size certificates, `assert(n == m)`, also when hoisted with the
/// guard `lower >= upper || n == m` of a part that is running), and the
/// ranges the conditions of the branches and loops around it establish
/// (`m >= 3` in a version for large arrays, see [`super::version`]).
#[derive(Default)]
struct Context {
    ranges: HashMap<Atom, (Affine, Affine)>,
    /// `atom := affine`, applied in order.
    subst: Vec<(Atom, Affine)>,
    facts: index::Facts,
}

/// Where the walk to a consumer found it: what it collected on the way.
#[derive(Default)]
struct Path {
    asserts: Vec<ValueId>,
    /// Conditions of the branches and loops around the consumer, and whether
    /// they hold there.
    conditions: Vec<(ValueId, bool)>,
    parts: Vec<(Vec<Affine>, Vec<Affine>)>,
}

impl Context {
    fn at(r: &Reader, body: &Block, consumer: ValueId, part: usize) -> Context {
        let mut ctx = Context::default();
        let mut path = Path::default();
        if !find_context(r, body, consumer, part, &mut path, &mut ctx.ranges) {
            return Context::default();
        }
        for (c, holds) in &path.conditions {
            let mut facts = ctx.facts.clone();
            facts.assume(r, &Known { reader: r, facts: &ctx.facts }, *c, *holds);
            ctx.facts = facts;
        }
        let Path { asserts, parts, .. } = path;
        for c in asserts {
            let mut disjuncts = Vec::new();
            or_terms(r, c, &mut disjuncts, 0);
            // Guards `lower >= upper` of a running part are false.
            disjuncts.retain(|d| match r.defs.def(*d) {
                Some(Def::Prim(Prim::Bin(BinOp::Ge), a)) if a.len() == 2 => {
                    let (l, u) = (r.scalar(a[0]), r.scalar(a[1]));
                    !parts.iter().any(|(lo, hi)| lo.iter().zip(hi).any(|(x, y)| *x == l && *y == u))
                }
                _ => true,
            });
            let [d] = disjuncts[..] else { continue };
            let Some(Def::Prim(Prim::Bin(BinOp::Eq), a)) = r.defs.def(d) else { continue };
            if a.len() != 2 || !r.is_int_scalar(a[0]) || !r.is_int_scalar(a[1]) {
                continue;
            }
            let diff = ctx.canon(&r.scalar(a[0]).sub(&r.scalar(a[1])));
            // Solve for the last atom with a unit coefficient.
            let Some((&t, &k)) = diff.terms.iter().rev().find(|(_, k)| k.abs() == 1) else { continue };
            let repl = diff.sub(&Affine::atom(t).scale(k)).scale(-k);
            ctx.subst.push((t, repl));
        }
        ctx
    }

    fn canon(&self, a: &Affine) -> Affine {
        let mut a = a.clone();
        for (t, repl) in &self.subst {
            if let Some(&k) = a.terms.get(t) {
                a = a.sub(&Affine::atom(*t).scale(k)).add(&repl.scale(k));
            }
        }
        a
    }

    fn canon_box(&self, b: &IndexBox) -> IndexBox {
        IndexBox { lo: b.lo.iter().map(|x| self.canon(x)).collect(), hi: b.hi.iter().map(|x| self.canon(x)).collect() }
    }

    /// What is known of the atoms where the consumer runs.
    fn order<'a>(&'a self, r: &'a Reader<'a>) -> Known<'a> {
        Known { reader: r, facts: &self.facts }
    }

    /// The lowest and highest value of an invariant index component.
    fn range(&self, off: &Affine) -> Option<(Affine, Affine)> {
        let (mut lo, mut hi) = (off.clone(), off.clone());
        for (atom, k) in &off.terms {
            let Some((l, h)) = self.ranges.get(atom) else { continue };
            let (l, h) = (self.canon(l), self.canon(&h.plus(-1)));
            let drop = Affine::atom(*atom).scale(*k);
            match *k {
                1 => {
                    lo = lo.sub(&drop).add(&l);
                    hi = hi.sub(&drop).add(&h);
                }
                -1 => {
                    lo = lo.sub(&drop).sub(&h);
                    hi = hi.sub(&drop).sub(&l);
                }
                _ => return None,
            }
        }
        Some((lo, hi))
    }
}

/// The disjuncts of a chain of `||`.
fn or_terms(r: &Reader, c: ValueId, out: &mut Vec<ValueId>, depth: usize) {
    match r.defs.def(c) {
        Some(Def::Prim(Prim::Bin(BinOp::Or), a)) if a.len() == 2 && depth < 16 => {
            or_terms(r, a[0], out, depth + 1);
            or_terms(r, a[1], out, depth + 1);
        }
        _ => out.push(c),
    }
}

/// Walks to the consumer, collecting the asserts before it (in its block and
/// the blocks around it), the conditions of the branches and loops around it,
/// the bounds of the parts around it (its own part included) and the ranges
/// of their index atoms (its own part's excluded).
fn find_context(
    r: &Reader,
    b: &Block,
    consumer: ValueId,
    part: usize,
    path: &mut Path,
    ranges: &mut HashMap<Atom, (Affine, Affine)>,
) -> bool {
    let before = path.asserts.len();
    for s in &b.stmts {
        if s.defs.first() == Some(&consumer) {
            if let Op::With(w) = &s.op
                && let Some(p) = w.parts.get(part)
                && let (Some(lo), Some(hi)) = (r.vector(p.lower), r.vector(p.upper))
            {
                path.parts.push((lo, hi));
            }
            return true;
        }
        match &s.op {
            Op::Check(CheckOp { check: Check::Assert(c), .. }) => path.asserts.push(*c),
            Op::With(w) => {
                for p in &w.parts {
                    // Only the part on the way to the consumer is read (most are not).
                    if !find_context(r, &p.body, consumer, part, path, ranges) {
                        continue;
                    }
                    if let (Some(lo), Some(hi)) = (r.vector(p.lower), r.vector(p.upper)) {
                        for (atom, axis) in index_atoms(p, lo.len()) {
                            if let (Some(l), Some(h)) = (lo.get(axis), hi.get(axis)) {
                                ranges.insert(atom, (l.clone(), h.clone()));
                            }
                        }
                        path.parts.push((lo, hi));
                    }
                    return true;
                }
            }
            Op::If { cond, then_block, else_block } => {
                for (branch, holds) in [(then_block, true), (else_block, false)] {
                    if find_context(r, branch, consumer, part, path, ranges) {
                        path.conditions.push((*cond, holds));
                        return true;
                    }
                }
            }
            Op::Loop { cond, body, test_first, .. } => {
                if find_context(r, cond, consumer, part, path, ranges) {
                    return true;
                }
                if find_context(r, body, consumer, part, path, ranges) {
                    // A `while` body runs where its condition held.
                    if let (true, Some(c)) = (*test_first, cond.yields.first()) {
                        path.conditions.push((*c, true));
                    }
                    return true;
                }
            }
            _ => {
                let mut found = false;
                s.op.walk_blocks(&mut |inner| {
                    found = found || find_context(r, inner, consumer, part, path, ranges);
                });
                if found {
                    return true;
                }
            }
        }
    }
    path.asserts.truncate(before);
    false
}

/// The consumer indices (inside `cbox`) whose projected index lies in
/// `target`: `Some(None)` where none does (an invariant component outside
/// it: even a rank-0 consumer's one index maps elsewhere), `None` where the
/// order of the bounds is not known.
fn preimage(
    proj: &Projection,
    target: &IndexBox,
    cbox: &IndexBox,
    ctx: &Context,
    r: &Reader,
) -> Option<Option<IndexBox>> {
    let ord = ctx.order(r);
    let mut out = cbox.clone();
    for (k, (axis, off)) in proj.iter().enumerate() {
        match axis {
            Some(a) => {
                if *a >= out.rank() {
                    return None;
                }
                let lo = target.lo[k].sub(off);
                let hi = target.hi[k].sub(off);
                out.lo[*a] = out.lo[*a].max_in(&lo, &ord)?;
                out.hi[*a] = out.hi[*a].min_in(&hi, &ord)?;
            }
            None => {
                // An invariant component: a constant, or moving with enclosing parts' indices.
                let (lo, hi) = ctx.range(off)?;
                let inside = index::above(ord.compare(&lo, &target.lo[k]), -1)?
                    && index::above(ord.compare(&target.hi[k], &hi), 0)?;
                let outside = index::above(ord.compare(&target.lo[k], &hi), 0) == Some(true)
                    || index::above(ord.compare(&lo, &target.hi[k]), -1) == Some(true);
                if !inside && !outside {
                    return None;
                }
                if !inside {
                    return Some(None);
                }
            }
        }
    }
    Some(Some(out))
}

/// Folds the selections that can be folded, as many per analysis as touch
/// separate parts of the function, at most `limit`. Returns the remarks.
///
/// Why batches: unrolled stencils leave hundreds of tiny independent
/// with-loops (`iv + o - 1` per offset); re-analysing the whole function after
/// each fold made folding quadratic in their number. Folds in one batch have
/// disjoint consumers (neither inside the other) and distinct producers that
/// no other fold of the batch rewrites, so every plan stays valid while the
/// others are applied: a fold only rewrites its consumer's statement.
fn fold_batch(f: &mut Function, misses: &mut Vec<(Option<Span>, String)>, limit: usize) -> Vec<(Option<Span>, String)> {
    let defs = index::defs(f);
    let uses = util::use_counts(f);
    let reader = Reader::new(f, &defs);
    // Producers: with-loop results by value.
    let mut producers: HashMap<ValueId, usize> = HashMap::default();
    f.body.walk(&mut |s| {
        if let Op::With(w) = &s.op {
            for (k, op) in w.ops.iter().enumerate() {
                if matches!(op, WithOp::Genarray { .. } | WithOp::Modarray { .. }) {
                    producers.insert(s.defs[k], k);
                }
            }
        }
    });
    if producers.is_empty() {
        return Vec::new();
    }
    // References, consumer by consumer.
    let mut refs: Vec<Reference> = Vec::new();
    f.body.walk(&mut |s| {
        if let Op::With(w) = &s.op {
            for (pi, p) in w.parts.iter().enumerate() {
                p.body.walk(&mut |t| {
                    if let Op::Prim { prim: Prim::Sel, args, .. } = &t.op
                        && producers.contains_key(&args[1])
                        && !s.defs.contains(&args[1])
                    {
                        refs.push(Reference {
                            consumer: s.defs[0],
                            part: pi,
                            def: t.defs[0],
                            idx: args[0],
                            array: args[1],
                            span: t.blame_span().unwrap_or(t.span),
                            consumer_span: s.blame_span().unwrap_or(s.span),
                        });
                    }
                });
            }
        }
    });
    let layout = Layout::of(&f.body);
    let holds = |x: ValueId, v: ValueId| layout.holds(x, v);
    // Consumers reading each producer.
    let mut consumers_of: HashMap<ValueId, HashSet<ValueId>> = HashMap::default();
    for r in &refs {
        consumers_of.entry(r.array).or_default().insert(r.consumer);
    }
    let mut batch: Vec<(Reference, Plan)> = Vec::new();
    let mut seen = Seen::default();
    for r in refs {
        if batch.len() >= limit {
            break;
        }
        let clashes = batch.iter().any(|(b, _)| {
            // Separate consumers: neither inside the other, nor holding the other's producer.
            b.consumer != r.consumer
                && (b.array == r.array
                    || holds(b.consumer, r.consumer)
                    || holds(b.consumer, r.array)
                    || holds(r.consumer, b.consumer)
                    || holds(r.consumer, b.array))
        });
        if clashes {
            continue;
        }
        let op = producers[&r.array];
        let Some(pstmt) = layout.stmt(r.array) else { continue };
        let Some(Op::With(consumer)) = layout.stmt(r.consumer).map(|s| &s.op) else { continue };
        match plan(f, &reader, &r, pstmt, op, consumer, &uses, &consumers_of, &mut seen) {
            Ok(p) => {
                // Whole folds into one consumer only replace their own selection.
                let shares_consumer = batch.iter().any(|(b, bp)| {
                    b.consumer == r.consumer
                        && !(bp.whole
                            && p.whole
                            && !holds(b.array, r.def)
                            && !holds(r.array, b.def)
                            && (b.array == r.array || (!holds(b.array, r.array) && !holds(r.array, b.array))))
                });
                if !shares_consumer {
                    batch.push((r, p));
                }
            }
            Err(why) => {
                let name = f.values[r.array.0 as usize]
                    .name
                    .as_ref()
                    .map_or_else(|| "an array".to_string(), |n| format!("`{n}`"));
                let msg = format!("{name} not folded into this with-loop: {why}");
                let at = Some(r.span);
                if !misses.iter().any(|(s, m)| *s == at && *m == msg) {
                    misses.push((at, msg));
                }
            }
        }
    }
    let mut applied = Vec::new();
    for (r, plan) in batch {
        let name = f.values[r.array.0 as usize]
            .name
            .as_ref()
            .map_or_else(|| "a with-loop result".to_string(), |n| format!("`{n}`"));
        let pieces = plan.regions.len();
        apply(f, &r, plan);
        let msg = if pieces == 1 {
            format!("folded {name} into this with-loop")
        } else {
            format!("folded {name} into this with-loop, splitting its index set into {pieces} parts")
        };
        applied.push((Some(r.consumer_span), msg));
    }
    applied
}

/// Where values are defined: every statement (nested ones too) by the values
/// it defines, numbered in pre-order, so a statement's nested statements are
/// the numbers between its own and the end of its extent.
struct Layout<'a> {
    /// Per value: the number of the statement defining it, and the statement.
    at: HashMap<ValueId, (usize, &'a Stmt)>,
    /// Per with-loop result: the numbers of its statement and of what it holds.
    extent: HashMap<ValueId, (usize, usize)>,
}

impl<'a> Layout<'a> {
    fn of(body: &'a Block) -> Layout<'a> {
        fn number<'a>(b: &'a Block, next: &mut usize, l: &mut Layout<'a>) {
            for s in &b.stmts {
                let start = *next;
                *next += 1;
                for d in &s.defs {
                    l.at.insert(*d, (start, s));
                }
                s.op.walk_blocks(&mut |inner| number(inner, next, l));
                if matches!(s.op, Op::With(_)) {
                    for d in &s.defs {
                        l.extent.insert(*d, (start, *next));
                    }
                }
            }
        }
        let mut l = Layout { at: HashMap::default(), extent: HashMap::default() };
        number(body, &mut 0, &mut l);
        l
    }

    /// The statement defining `v`.
    fn stmt(&self, v: ValueId) -> Option<&'a Stmt> {
        self.at.get(&v).map(|(_, s)| *s)
    }

    /// Whether the with-loop statement defining `x` is, or holds, the definition of `v`.
    fn holds(&self, x: ValueId, v: ValueId) -> bool {
        match (self.extent.get(&x), self.at.get(&v)) {
            (Some((start, end)), Some((at, _))) => (*start..*end).contains(at),
            _ => false,
        }
    }
}

/// What planning the references of one batch shares: a consumer part reads
/// the same producer many times (a determinant's minor is read once per
/// element of the next), and what holds in the part and what the producer
/// computes where are the same for every one of those reads.
#[derive(Default)]
struct Seen<'a> {
    /// What holds in a consumer part (finding it walks the function).
    contexts: HashMap<(ValueId, usize), Context>,
    /// Per producer, consumer and part: the producer's regions as the part's
    /// context orders and canonicalises them, or why it cannot be folded.
    producers: HashMap<(ValueId, ValueId, usize), Result<Producer<'a>, String>>,
    /// A consumer part's bounds, canonicalised.
    bounds: HashMap<(ValueId, usize), Result<IndexBox, String>>,
    /// Whether a producer prints: its with-loop walked once, not once per read.
    prints: HashMap<ValueId, bool>,
    /// Per consumer and producer: the producer's selections in each of the
    /// consumer's parts, counted once, not once per read (an unrolled
    /// determinant level's part reads its minor hundreds of times).
    reads: HashMap<(ValueId, ValueId), Vec<usize>>,
}

/// How a reference is folded: the consumer part's pieces and what each reads.
struct Plan {
    regions: Vec<(IndexBox, Source)>,
    producer: Producer<'static>,
    /// The consumer part stays whole (no split): its bounds, step and width stay.
    whole: bool,
    /// Index components past the producer's frame: they select inside its cell.
    tail: usize,
}

#[allow(clippy::too_many_arguments)]
fn plan<'a>(
    f: &Function,
    r: &Reader,
    rf: &Reference,
    pstmt: &'a Stmt,
    op: usize,
    consumer: &With,
    uses: &[u32],
    consumers_of: &HashMap<ValueId, HashSet<ValueId>>,
    seen: &mut Seen<'a>,
) -> Result<Plan, String> {
    let prints = *seen.prints.entry(rf.array).or_insert_with(|| {
        let mut effect = false;
        pstmt.op.walk_blocks(&mut |b| {
            b.walk(&mut |s| effect |= matches!(&s.op, Op::Prim { prim, .. } if prim.has_effect()))
        });
        effect
    });
    if prints {
        return Err("it prints".into());
    }
    let reads = {
        let per_part = seen
            .reads
            .entry((rf.consumer, rf.array))
            .or_insert_with(|| consumer.parts.iter().map(|p| count_refs(&p.body, rf.array)).collect());
        Reads { here: per_part[rf.part], consumer: per_part.iter().sum() }
    };
    let static_length = match &pstmt.op {
        Op::With(w) => w.parts.first().is_some_and(|p| r.vector(p.lower).is_some()),
        _ => false,
    };
    if !static_length {
        let prod = whole_plan(r, rf, pstmt, op, consumer)?;
        no_duplicated_work(&prod, rf, reads, uses, consumers_of, true)?;
        let regions = prod.regions.clone();
        return Ok(Plan { regions, producer: prod.owned(), whole: true, tail: 0 });
    }
    // What holds where the part runs: enclosing indices' ranges, asserted
    // equalities, conditions of enclosing branches.
    let ctx =
        &*seen.contexts.entry((rf.consumer, rf.part)).or_insert_with(|| Context::at(r, &f.body, rf.consumer, rf.part));
    // Borrowed: most plans fail, and only a plan that succeeds copies it.
    let prod = seen
        .producers
        .entry((rf.array, rf.consumer, rf.part))
        .or_insert_with(|| {
            let mut prod = producer(f, pstmt, op, r, &ctx.order(r))?;
            prod.frame = ctx.canon_box(&prod.frame);
            for (b, _) in &mut prod.regions {
                *b = ctx.canon_box(b);
            }
            Ok(prod)
        })
        .as_ref()
        .map_err(String::clone)?;
    let part = &consumer.parts[rf.part];
    let n = prod.frame.rank();
    let mut proj = projection(r, rf.idx, part)?;
    if proj.len() < n {
        return Err("the selection does not pick one element of its index space".into());
    }
    // A longer index selects inside a cell (`ar[i, j, k]` of `ar = map(replin(N), a)`):
    // the cell is computed, then indexed by the rest. Only for cells that are
    // views — rows of arrays and fills of them — which simplification turns
    // into one selection instead of building the cell per element.
    let tail = proj.len() - n;
    if tail > 0 {
        if !prod.with.parts.iter().all(|p| cell_is_view(r, &p.body, prod.with.element_yield(p, prod.op), 0)) {
            return Err("its cells are arrays it computes, and the selection picks inside one".into());
        }
        if !matches!(prod.with.ops[prod.op], WithOp::Genarray { default: None, .. }) {
            return Err("its cells are arrays and it has a default or is a modarray".into());
        }
        proj.truncate(n);
    }
    let cbox = seen
        .bounds
        .entry((rf.consumer, rf.part))
        .or_insert_with(|| {
            let clo = r.vector(part.lower).ok_or("the consumer's bounds are not known")?;
            let chi =
                r.vector(part.upper).filter(|v| v.len() == clo.len()).ok_or("the consumer's bounds are not known")?;
            Ok(ctx.canon_box(&IndexBox { lo: clo, hi: chi }))
        })
        .as_ref()
        .map_err(String::clone)?;
    let m = cbox.rank();
    let proj: Projection = proj.into_iter().map(|(a, off)| (a, ctx.canon(&off))).collect();
    if proj.iter().any(|(a, _)| a.is_some_and(|a| a >= m)) {
        return Err("the index uses components the consumer's index does not have".into());
    }
    // Every consumer index must select inside the producer.
    let whole_pre = preimage(&proj, &prod.frame, cbox, ctx, r).ok_or("the order of the bounds is not known")?;
    if whole_pre.is_none_or(|whole_pre| cbox.inside_in(&whole_pre, &ctx.order(r)) != Some(true)) {
        return Err("the selection may fall outside it (it must stay to fail, or is guarded by a condition)".into());
    }
    let mut regions = Vec::new();
    for (b, src) in &prod.regions {
        let pre = preimage(&proj, b, cbox, ctx, r).ok_or("the order of the bounds is not known")?;
        if let Some(pre) = pre
            && pre.is_empty_in(&ctx.order(r)) != Some(true)
        {
            regions.push((pre, src.clone()));
        }
    }
    if regions.is_empty() {
        return Err("the consumer's part is empty".into());
    }
    let whole = regions.len() == 1;
    if !whole && !ctx.subst.is_empty() {
        // Split bounds are computed before the with-loop, where asserted
        // equalities need not hold (an empty part's guard).
        return Err("splitting it would rely on asserted sizes".into());
    }
    if !whole {
        // Split bounds are computed before the with-loop: an offset along the
        // consumer's axes must not read what its part computes
        // (`b[iv + [t]]`, `t` from the part's body).
        let inside = util::defined_in(&part.body);
        let reads_part =
            proj.iter().any(|(axis, off)| axis.is_some() && off.terms.keys().any(|a| inside.contains(&a.value)));
        if reads_part {
            return Err("the selection's offset is computed in the consumer's part, and splitting it would need it before the with-loop".into());
        }
        let dense = part.step.is_none() && part.width.is_none();
        if !dense {
            return Err("the consumer's part has a step or width and would have to be split".into());
        }
        if !consumer.ops.iter().all(|o| exact_fold(f, o)) {
            return Err("splitting would change the order the fold combines elements in".into());
        }
        if consumer.parts.len() + regions.len() > MAX_PARTS {
            return Err(format!("the consumer would have more than {MAX_PARTS} parts"));
        }
    }
    let used_axes: HashSet<usize> = proj.iter().filter_map(|(a, _)| *a).collect();
    no_duplicated_work(prod, rf, reads, uses, consumers_of, used_axes.len() == m)?;
    Ok(Plan { regions, producer: prod.clone().owned(), whole, tail })
}

/// A producer's selections in the consumer part of a reference, and in the
/// whole consumer.
#[derive(Clone, Copy)]
struct Reads {
    here: usize,
    consumer: usize,
}

/// Folding must not compute a producer's element more often than the producer
/// did (unless its parts are cheap): seed 002 §5's criterion.
fn no_duplicated_work(
    prod: &Producer,
    rf: &Reference,
    reads: Reads,
    uses: &[u32],
    consumers_of: &HashMap<ValueId, HashSet<ValueId>>,
    every_axis_used: bool,
) -> Result<(), String> {
    if prod.cheap {
        return Ok(());
    }
    let refs_here = reads.here;
    let total_uses = uses[rf.array.0 as usize] as usize;
    if consumers_of.get(&rf.array).is_some_and(|c| c.len() > 1) {
        return Err(
            "it has several consumers, each would compute its elements again (fusing them first avoids that)".into()
        );
    }
    if refs_here > 1 {
        return Err(format!(
            "it is read {refs_here} times per element here, so its elements would be computed {refs_here} times"
        ));
    }
    if total_uses > reads.consumer {
        return Err("it is also used elsewhere, so its elements would be computed twice".into());
    }
    if !every_axis_used {
        return Err("the same element would be computed for several consumer indices".into());
    }
    Ok(())
}

/// Rank-generic folding (index lengths unknown, seed 000's case): the producer
/// is one dense part over all of its frame `[0, s)`, and the consumer part
/// selects it at its own index `iv`, ranging over `[0, s)` for the same `s`.
/// Then every selection hits the producer's part at `iv` — the identity
/// projection, whatever the rank.
fn whole_plan<'a>(
    r: &Reader,
    rf: &Reference,
    pstmt: &'a Stmt,
    op: usize,
    consumer: &With,
) -> Result<Producer<'a>, String> {
    let Op::With(w) = &pstmt.op else { return Err("not a with-loop".into()) };
    let WithOp::Genarray { shape, .. } = &w.ops[op] else {
        return Err("its index length is not known statically, and it is not a genarray".into());
    };
    let [p] = &w.parts[..] else {
        return Err("its index length is not known statically, and it has several parts".into());
    };
    let whole = |q: &Part| util::zero_lower(r.defs, q) && util::same_shape_value(r.defs, q.upper, *shape);
    if p.step.is_some() || p.width.is_some() || !whole(p) {
        return Err("its index length is not known statically, and its part does not cover its frame".into());
    }
    let cp = &consumer.parts[rf.part];
    if cp.index != Some(rf.idx) || !whole(cp) {
        return Err("its index length is not known statically, and the consumer does not select it at its own \
                    index over the same shape"
            .into());
    }
    let cheap = cheap_part(p);
    let none = IndexBox { lo: Vec::new(), hi: Vec::new() };
    Ok(Producer { with: Cow::Borrowed(&**w), op, frame: none.clone(), regions: vec![(none, Source::Part(0))], cheap })
}

/// Whether a cell a producer part yields is a view: a value from outside the
/// part, a selection from one, or a fill of one (cheap to index into).
fn cell_is_view(r: &Reader, body: &Block, v: ValueId, depth: usize) -> bool {
    let inside = body.stmts.iter().any(|s| s.defs.contains(&v));
    if !inside {
        return true;
    }
    if depth > 4 {
        return false;
    }
    match r.defs.def(v) {
        Some(index::Def::Prim(Prim::Sel, a)) => cell_is_view(r, body, a[1], depth + 1),
        Some(index::Def::Prim(Prim::Genarray, a)) => cell_is_view(r, body, a[1], depth + 1),
        _ => false,
    }
}

fn count_refs(b: &Block, array: ValueId) -> usize {
    let mut n = 0;
    b.walk(&mut |s| {
        if let Op::Prim { prim: Prim::Sel, args, .. } = &s.op
            && args[1] == array
        {
            n += 1;
        }
    });
    n
}

/// Rewrites the consumer according to the plan.
fn apply(f: &mut Function, rf: &Reference, plan: Plan) {
    util::with_body(f, |f, body| {
        let done = edit_stmt(body, rf.consumer, &mut |stmts: &mut Vec<Stmt>, at: usize| {
            let span = stmts[at].span;
            let mut pre = Vec::new();
            let Op::With(w) = &mut stmts[at].op else { return };
            if plan.whole {
                // One region: the part stays, only the reference changes.
                let (_, src) = &plan.regions[0];
                substitute_reference(f, &mut w.parts[rf.part].body, rf.def, src, &plan, &HashMap::default());
                return;
            }
            let original = w.parts[rf.part].clone();
            let mut new_parts = Vec::new();
            for (region, src) in &plan.regions {
                let lower = index::emit_vector(f, &mut pre, &region.lo, span);
                let upper = index::emit_vector(f, &mut pre, &region.hi, span);
                let (mut part, map) = clone_part(f, &original, lower, upper);
                // The reference in this copy; the producer may itself live in the
                // consumer's part, so what it reads is renamed like the copy.
                let ref_def = map.get(&rf.def).copied().unwrap_or(rf.def);
                substitute_reference(f, &mut part.body, ref_def, src, &plan, &map);
                new_parts.push(part);
            }
            w.parts.splice(rf.part..=rf.part, new_parts);
            stmts.splice(at..at, pre);
        });
        debug_assert!(done, "the consumer was found before");
    });
}

/// Calls `edit` with the statement list holding the statement that defines
/// `def` first, and its position. Returns whether it was found.
fn edit_stmt(b: &mut Block, def: ValueId, edit: &mut dyn FnMut(&mut Vec<Stmt>, usize)) -> bool {
    if let Some(at) = b.stmts.iter().position(|s| s.defs.first() == Some(&def)) {
        edit(&mut b.stmts, at);
        return true;
    }
    for s in &mut b.stmts {
        let mut found = false;
        s.op.walk_blocks_mut(&mut |inner| {
            if !found {
                found = edit_stmt(inner, def, edit);
            }
        });
        if found {
            return true;
        }
    }
    false
}

/// A copy of a part with fresh values and the given (dense) bounds, and the map
/// from the original's values to the copy's.
fn clone_part(f: &mut Function, p: &Part, lower: ValueId, upper: ValueId) -> (Part, HashMap<ValueId, ValueId>) {
    let mut cl = Cloner { src: None, map: HashMap::default() };
    let fresh = |f: &mut Function, v: ValueId, cl: &mut Cloner| {
        let d = f.values[v.0 as usize].clone();
        let n = f.new_value(d.ty, d.name);
        cl.map.insert(v, n);
        n
    };
    let index = p.index.map(|i| fresh(f, i, &mut cl));
    let scalars = p.scalars.as_ref().map(|ss| ss.iter().map(|s| fresh(f, *s, &mut cl)).collect());
    let offset = p.offset.map(|o| fresh(f, o, &mut cl));
    let body = cl.block(f, &p.body);
    let copy = Part {
        lower,
        upper,
        step: None,
        width: None,
        index,
        scalars,
        offset,
        body,
        span: p.span,
        result_spans: p.result_spans.clone(),
    };
    (copy, cl.map)
}

/// Replaces the statement defining `ref_def` (a selection) by what the producer
/// computes there.
fn substitute_reference(
    f: &mut Function,
    body: &mut Block,
    ref_def: ValueId,
    src: &Source,
    plan: &Plan,
    renamed: &HashMap<ValueId, ValueId>,
) {
    let prod = &plan.producer;
    let rename = |v: ValueId| renamed.get(&v).copied().unwrap_or(v);
    let mut forward: Option<(ValueId, ValueId)> = None;
    edit_stmt(body, ref_def, &mut |stmts: &mut Vec<Stmt>, at: usize| {
        let s = stmts[at].clone();
        let Op::Prim { args, .. } = &s.op else { return };
        let full_idx = args[0];
        let span = s.span;
        let mut out: Vec<Stmt> = Vec::new();
        // The producer's index and, for a longer index, the rest (into the cell).
        let (idx, rest) = if plan.tail > 0 {
            let n = prod.frame.rank();
            let nv = util::emit_const(f, &mut out, Value::Scalar(Scalar::int(n as i64)), span);
            let head = util::emit_prim(f, &mut out, Prim::Take, vec![nv, full_idx], util::int_vec_ty(Some(n)), span);
            let rest =
                util::emit_prim(f, &mut out, Prim::Drop, vec![nv, full_idx], util::int_vec_ty(Some(plan.tail)), span);
            (head, Some(rest))
        } else {
            (full_idx, None)
        };
        match src {
            Source::Part(k) => {
                let p = &prod.with.parts[*k];
                let mut cl = Cloner { src: None, map: renamed.clone() };
                if let Some(iv) = p.index {
                    cl.map.insert(iv, idx);
                }
                if let Some(ss) = &p.scalars {
                    for (c, sv) in ss.iter().enumerate() {
                        let kv = util::emit_const(f, &mut out, Value::int_vector(&[c as i64]), span);
                        let x = util::emit_prim(f, &mut out, Prim::Sel, vec![kv, idx], util::int_ty(), span);
                        cl.map.insert(*sv, x);
                    }
                }
                let copy = cl.block(f, &p.body);
                out.extend(copy.stmts);
                let cell = copy.yields[prod.with.yield_index(prod.op)];
                let elem = match rest {
                    Some(rest) => {
                        let ty = f.ty(s.defs[0]).clone();
                        util::emit_prim(f, &mut out, Prim::Sel, vec![rest, cell], ty, span)
                    }
                    None => cell,
                };
                if !define_as(f, &mut out, elem, s.defs[0]) {
                    forward = Some((s.defs[0], elem));
                }
            }
            Source::Default => {
                let WithOp::Genarray { default, .. } = &prod.with.ops[prod.op] else { return };
                // The implicit default is a cell of zeros: `Some(cell)`, or
                // `None` where the selection picks a scalar of it (all zero).
                let v = match default {
                    Some(d) => Some(rename(*d)),
                    None => {
                        let zero = match f.ty(s.defs[0]).elem {
                            Elem::Base(b) => Scalar::zero(b),
                            Elem::String => return,
                        };
                        let cell = prod.with.cells.get(prod.op).cloned().flatten();
                        let picks_scalar = f.ty(s.defs[0]).shape.rank_if_known() == Some(0);
                        match cell.as_ref().and_then(|c| c.shape.extents()) {
                            Some(e) if !e.is_empty() => {
                                let n: usize = e.iter().product();
                                let Ok(elems) = crate::interp::value::Elems::filled(zero, n) else { return };
                                Some(util::emit_const(f, &mut out, Value::from_parts(e, elems), span))
                            }
                            Some(_) => Some(util::emit_const(f, &mut out, Value::Scalar(zero), span)),
                            // A cell of a shape known only at run time: a
                            // scalar of it is zero; a whole cell or a row of
                            // it would need that shape (the selection stays).
                            None if picks_scalar => {
                                forward = Some((s.defs[0], util::emit_const(f, &mut out, Value::Scalar(zero), span)));
                                None
                            }
                            None if cell.is_none() && rest.is_none() => {
                                Some(util::emit_const(f, &mut out, Value::Scalar(zero), span))
                            }
                            None => return,
                        }
                    }
                };
                if let Some(v) = v {
                    let v = match rest {
                        Some(rest) => {
                            let ty = f.ty(s.defs[0]).clone();
                            util::emit_prim(f, &mut out, Prim::Sel, vec![rest, v], ty, span)
                        }
                        None => v,
                    };
                    forward = Some((s.defs[0], v));
                }
            }
            Source::Unchanged(a) => {
                let ty = f.ty(s.defs[0]).clone();
                let v = util::emit_prim(f, &mut out, Prim::Sel, vec![full_idx, rename(*a)], ty, span);
                forward = Some((s.defs[0], v));
            }
        }
        for t in &mut out {
            if t.blame == Blame::Here && !matches!(src, Source::Part(_)) {
                t.blame = s.blame;
            }
        }
        stmts.splice(at..=at, out);
    });
    if let Some((from, to)) = forward {
        // The copied value has the reference's type (it is the same element).
        refine_to_meet(f, to, from);
        let mut map = HashMap::default();
        map.insert(from, to);
        util::substitute(body, &map);
    }
}

/// Makes the statement of `stmts` that defines `elem` define `reference`
/// instead (its uses among `stmts` follow), so that the reference's uses need
/// not be rewritten: forwarding walked the whole consumer part per fold, and
/// a part can read a producer hundreds of times. `false` when `elem` is
/// defined elsewhere (an invariant the producer yields).
fn define_as(f: &mut Function, stmts: &mut Vec<Stmt>, elem: ValueId, reference: ValueId) -> bool {
    let Some(at) = stmts.iter().position(|t| t.defs.contains(&elem)) else { return false };
    for d in &mut stmts[at].defs {
        if *d == elem {
            *d = reference;
        }
    }
    let mut after = Block { stmts: stmts.split_off(at + 1), yields: Vec::new() };
    let mut map = HashMap::default();
    map.insert(elem, reference);
    util::substitute(&mut after, &map);
    stmts.append(&mut after.stmts);
    // The element's type may be more precise than the selection's.
    refine_to_meet(f, reference, elem);
    true
}

/// Gives `v` the meet of its shape and `other`'s: two values of one element.
fn refine_to_meet(f: &mut Function, v: ValueId, other: ValueId) {
    let (vt, ot) = (f.ty(v), f.ty(other));
    if vt.elem == ot.elem
        && let Some(m) = vt.shape.meet(&ot.shape)
    {
        f.values[v.0 as usize].ty.shape = m;
    }
}

/// Turns `modarray(B)` consumers of with-loop results `B` into `genarray`s whose
/// untouched elements are parts reading `B` (so they fold). Returns whether it
/// changed something.
fn normalise_modarray_consumer(f: &mut Function) -> bool {
    let defs = index::defs(f);
    let reader = Reader::new(f, &defs);
    let mut with_results: HashSet<ValueId> = HashSet::default();
    f.body.walk(&mut |s| {
        if matches!(s.op, Op::With(_)) {
            with_results.extend(s.defs.iter().copied());
        }
    });
    // Find a candidate: a single-operator modarray of a with-loop result with
    // dense parts and a static shape.
    let mut target: Option<(ValueId, Vec<IndexBox>, IndexBox)> = None;
    f.body.walk(&mut |s| {
        if target.is_some() {
            return;
        }
        let Op::With(w) = &s.op else { return };
        let [WithOp::Modarray { array }] = w.ops.as_slice() else { return };
        if !with_results.contains(array) || w.parts.is_empty() || w.first_match {
            return;
        }
        let Some(ext) = util::extents(f, *array) else { return };
        let mut boxes = Vec::new();
        for p in &w.parts {
            if p.step.is_some() || p.width.is_some() {
                return;
            }
            let (Some(lo), Some(hi)) = (reader.vector(p.lower), reader.vector(p.upper)) else { return };
            if lo.len() != hi.len() || lo.len() > ext.len() {
                return;
            }
            boxes.push(IndexBox { lo, hi });
        }
        let n = boxes[0].rank();
        if boxes.iter().any(|b| b.rank() != n) {
            return;
        }
        let frame = IndexBox {
            lo: vec![Affine::constant(0); n],
            hi: ext[..n].iter().map(|&e| Affine::constant(e as i64)).collect(),
        };
        if boxes.iter().any(|b| b.inside(&frame) != Some(true)) {
            return;
        }
        target = Some((s.defs[0], boxes, frame));
    });
    let Some((def, boxes, frame)) = target else { return false };
    let Some(rest) = frame.subtract_all(&boxes) else { return false };
    util::with_body(f, |f, body| {
        edit_stmt(body, def, &mut |stmts: &mut Vec<Stmt>, at: usize| {
            let span = stmts[at].span;
            let mut pre = Vec::new();
            let Op::With(w) = &mut stmts[at].op else { return };
            let WithOp::Modarray { array } = w.ops[0] else { return };
            let frame_ext: Vec<i64> = frame.hi.iter().filter_map(Affine::as_const).collect();
            let full_ext: Vec<i64> = util::extents(f, array).unwrap_or_default().iter().map(|&e| e as i64).collect();
            let shape = util::emit_const(f, &mut pre, Value::int_vector(&frame_ext), span);
            let cell_ty = f.ty(def).clone();
            let n = frame_ext.len();
            let cell_shape = Shape::known(&full_ext[n..].iter().map(|&e| e as usize).collect::<Vec<_>>());
            let cell = crate::sema::ty::Ty::new(cell_ty.elem, cell_shape.clone());
            for b in rest.iter() {
                let lower = index::emit_vector(f, &mut pre, &b.lo, span);
                let upper = index::emit_vector(f, &mut pre, &b.hi, span);
                let iv = f.new_value(util::int_vec_ty(Some(n)), None);
                let v = f.new_value(cell.clone(), None);
                let sel =
                    Stmt { defs: vec![v], op: Op::prim(Prim::Sel, vec![iv, array]), span, blame: stmts[at].blame };
                let Op::With(w) = &mut stmts[at].op else { return };
                w.parts.push(Part {
                    lower,
                    upper,
                    step: None,
                    width: None,
                    index: Some(iv),
                    scalars: None,
                    offset: None,
                    body: Block { stmts: vec![sel], yields: vec![v] },
                    span,
                    result_spans: vec![span],
                });
            }
            let Op::With(w) = &mut stmts[at].op else { return };
            w.ops[0] = WithOp::Genarray { shape, default: None };
            w.cells[0] = Some(cell);
            stmts.splice(at..at, pre);
        });
    });
    true
}

/// Merges adjacent parts with the same body (up to renaming) in every
/// with-loop whose parts are constant boxes. Returns how many merges.
fn merge_parts_block(f: &mut Function, b: &mut Block, consts: &mut HashMap<ValueId, Value>) -> usize {
    let mut merged = 0;
    let stmts = std::mem::take(&mut b.stmts);
    let mut out = Vec::with_capacity(stmts.len());
    for mut s in stmts {
        s.op.walk_blocks_mut(&mut |inner| merged += merge_parts_block(f, inner, consts));
        let span = s.span;
        if let Op::With(w) = &mut s.op {
            let exact = w.ops.iter().all(|o| exact_fold(f, o));
            loop {
                let boxes: Option<Vec<(Vec<i64>, Vec<i64>)>> = w
                    .parts
                    .iter()
                    .map(|p| {
                        if p.step.is_some() || p.width.is_some() {
                            return None;
                        }
                        let lo = consts.get(&p.lower).and_then(util::int_vec)?;
                        let hi = consts.get(&p.upper).and_then(util::int_vec)?;
                        Some((lo, hi))
                    })
                    .collect();
                let Some(boxes) = boxes else { break };
                if !disjoint(&boxes) {
                    break;
                }
                let mut found = None;
                'search: for i in 0..w.parts.len() {
                    for j in i + 1..w.parts.len() {
                        // Without exactly associative folds, only consecutive parts
                        // adjacent along the first axis keep the element order.
                        if !exact && j != i + 1 {
                            continue;
                        }
                        if let Some(axis) = adjacent(&boxes[i], &boxes[j])
                            && (exact || axis == 0)
                            && same_body(f, &w.parts[i], &w.parts[j])
                        {
                            found = Some((i, j));
                            break 'search;
                        }
                    }
                }
                let Some((i, j)) = found else { break };
                let lo: Vec<i64> = boxes[i].0.iter().zip(&boxes[j].0).map(|(x, y)| *x.min(y)).collect();
                let hi: Vec<i64> = boxes[i].1.iter().zip(&boxes[j].1).map(|(x, y)| *x.max(y)).collect();
                let lower = util::emit_const(f, &mut out, Value::int_vector(&lo), span);
                let upper = util::emit_const(f, &mut out, Value::int_vector(&hi), span);
                consts.insert(lower, Value::int_vector(&lo));
                consts.insert(upper, Value::int_vector(&hi));
                w.parts[i].lower = lower;
                w.parts[i].upper = upper;
                w.parts.remove(j);
                merged += 1;
            }
        }
        out.push(s);
    }
    b.stmts = out;
    merged
}

/// Whether constant boxes are pairwise disjoint.
fn disjoint(boxes: &[(Vec<i64>, Vec<i64>)]) -> bool {
    for i in 0..boxes.len() {
        for j in i + 1..boxes.len() {
            let (a, b) = (&boxes[i], &boxes[j]);
            let empty = |x: &(Vec<i64>, Vec<i64>)| x.0.iter().zip(&x.1).any(|(l, h)| l >= h);
            let overlap =
                a.0.iter().zip(&a.1).zip(b.0.iter().zip(&b.1)).all(|((al, ah), (bl, bh))| al.max(bl) < ah.min(bh));
            if overlap && !empty(a) && !empty(b) {
                return false;
            }
        }
    }
    true
}

/// The axis along which two boxes touch and together form a box.
fn adjacent(a: &(Vec<i64>, Vec<i64>), b: &(Vec<i64>, Vec<i64>)) -> Option<usize> {
    let n = a.0.len();
    let mut axis = None;
    for d in 0..n {
        if a.0[d] == b.0[d] && a.1[d] == b.1[d] {
            continue;
        }
        if axis.is_some() {
            return None;
        }
        if a.1[d] == b.0[d] || b.1[d] == a.0[d] {
            axis = Some(d);
        } else {
            return None;
        }
    }
    axis
}

/// Whether two parts compute the same thing (bodies equal up to renaming).
fn same_body(f: &Function, a: &Part, b: &Part) -> bool {
    let mut map: HashMap<ValueId, ValueId> = HashMap::default();
    match (a.index, b.index) {
        (Some(x), Some(y)) => {
            map.insert(x, y);
        }
        (None, None) => {}
        _ => return false,
    }
    match (&a.scalars, &b.scalars) {
        (Some(x), Some(y)) if x.len() == y.len() => map.extend(x.iter().copied().zip(y.iter().copied())),
        (None, None) => {}
        _ => return false,
    }
    if a.offset.is_some() || b.offset.is_some() {
        return false;
    }
    util::alpha_eq_block(f, &a.body, &b.body, &mut map)
}

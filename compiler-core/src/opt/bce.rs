//! # bce: bounds-check elimination
//!
//! A selection inside a with-loop part is in bounds for every index of the part
//! when its index is the part's index plus an offset and the part's bounds,
//! moved by the offset, lie inside the array's shape (seed 004's certificates,
//! proven by the generator instead of checked per element). Such `in_bounds`
//! checks are removed, and the selections and updates they guard are marked
//! `unchecked` (the IR interpreter treats a failing unchecked selection as a
//! compiler bug, so a wrong proof cannot go unnoticed in the tests). An update
//! is marked only when its value's type also shows the shape of the array's
//! cells (the flag stands for that check too): `a[i] = row` of unknown extents
//! keeps its check.
//!
//! ```text
//! %8 = with {                                   %8 = with {
//!   part lower [1] upper [9] index %i {           part lower [1] upper [9] index %i {
//!     %j = prim sub(%i, [1])                        %j = prim sub(%i, [1])
//!     check in_bounds(%j, [10]) R0001    ⇒          %x = prim sel(%j, %a) unchecked
//!     %x = prim sel(%j, %a)                         …
//! ```
//!
//! Shapes may be symbolic: `shape(a) - 1` against `shape(a)` compares. Proofs
//! also use constant indices outside with-loops, and the counters of `for`
//! loops: a loop-carried int that starts at `lo`, never decreases (`k = k + c`,
//! `c >= 0`) and is tested by `k < hi` (or `k <= hi - 1`) before every iteration
//! lies in `[lo, hi)` in the body, like a with-loop index (Floyd–Warshall's
//! `d[[i, k]]`). In rank-generic code, whose index vectors have no known
//! length, a part over `[0, s)` (lower bound `0 * s`) proves its index inside
//! `s` and inside every array whose shape is `s`: `shape(a)`, `reshape(s, x)`,
//! a genarray over `s` (seed 000's `iv` over `shape(a)` selecting in `a`).
//! A check that cannot be proven but whose unproven components do not change
//! in its part (`d[[i, k]]` when `k` may exceed the width of a loop-carried
//! `d`) fails at all of the part's indices or at none: it is *narrowed* to check
//! the index at the part's first element (`[lower_i, k]`, the same failure and
//! message), and the selections it guards are unchecked. Invariant checks are
//! moved out of loops and parts by `licm`. Index components are affine in
//! the part's indices, with any factors (`n - 1 - i` reverses). Limits: a
//! component chosen by a conditional (`where(iv < pos, iv, iv + 1)` in
//! Kreye's `elim`) lies between the extremes of its choices, but the
//! conditions themselves (`i > 0 ? a[i-1] : 0`) are not used. Bounds that do
//! not cancel compare by ranges ([`index::Known`]): `[0, 1)` lies inside an
//! extent `m` where an enclosing branch established `m >= 3`.

use crate::HashMap;

use super::index::{self, Affine, Atom, Def, Known, Order, Reader};
use super::{Pass, PassCx, util};
use crate::ir::*;
use crate::sema::hir::Prim;

pub const PASS: Pass = Pass {
    name: "bce",
    description: "bounds checks proven by with-loop generator bounds are removed, selections marked unchecked",
    run,
};

fn run(m: &mut Module, cx: &mut PassCx) {
    cx.each_function(m, |f, cx| {
        let defs = index::defs(f);
        let shapes = Shapes::of(f);
        let choices = choices(f);
        // Proven checks by statement (their address while the body is
        // unchanged): two checks of one index and shape may be proven in one
        // place (a branch's condition) and not in another (after the branch).
        let mut proven_checks: crate::HashSet<*const Stmt> = crate::HashSet::default();
        let mut proven_prims: Vec<ValueId> = Vec::new();
        let mut narrowed: Vec<Narrowed> = Vec::new();
        {
            let reader = Reader::new(f, &defs);
            let mut ranges: Ranges = Vec::new();
            let mut facts = Vec::new();
            let mut w = Walk {
                reader: &reader,
                shapes: &shapes,
                choices: &choices,
                whole: Vec::new(),
                parts: Vec::new(),
                guards: Vec::new(),
                checked: Vec::new(),
                known: index::Facts::default(),
                checks: &mut proven_checks,
                prims: &mut proven_prims,
                narrowed: &mut narrowed,
            };
            w.block(&f.body, &mut ranges, &mut facts);
        }
        let mut removed = 0;
        let mut unchecked = 0;
        rewrite(&mut f.body, &proven_checks, &proven_prims, &mut removed, &mut unchecked);
        let narrowed_count =
            if narrowed.is_empty() { 0 } else { util::with_body(f, |f, body| narrow(f, body, None, &narrowed)) };
        cx.count("checks_removed", removed);
        cx.count("selections_unchecked", unchecked);
        cx.count("checks_narrowed", narrowed_count);
    });
}

/// Where array shapes come from: `shape` values, and genarray with-loops
/// (their frame, then their cells' shape).
struct Shapes {
    values: HashMap<ValueId, ValueId>,
    /// A genarray with-loop result: its frame shape and the cells its parts yield.
    withs: HashMap<ValueId, (ValueId, Vec<ValueId>)>,
}

impl Shapes {
    fn of(f: &Function) -> Shapes {
        let mut withs = HashMap::default();
        f.body.walk(&mut |s| {
            if let Op::With(w) = &s.op {
                for (k, op) in w.ops.iter().enumerate() {
                    if let WithOp::Genarray { shape, .. } = op {
                        let cells = w.parts.iter().map(|p| w.element_yield(p, k)).collect();
                        withs.insert(s.defs[k], (*shape, cells));
                    }
                }
            }
        });
        Shapes { values: super::util::shape_values(f), withs }
    }

    /// The shape of an array as affine components, or a prefix of it (what a
    /// partial index needs): `sel(iv, a)` has `a`'s shape less `len(iv)`
    /// extents; a fill or with-loop of arrays, its frame then its cells' shape.
    fn of_array(&self, reader: &Reader, a: ValueId, depth: usize) -> Option<Vec<Affine>> {
        if let Some(e) = reader.ty(a).shape.extents() {
            return Some(e.iter().map(|&x| Affine::constant(x as i64)).collect());
        }
        if let Some(v) = self.values.get(&a).and_then(|sv| reader.vector(*sv)) {
            return Some(v);
        }
        if depth > 8 {
            return None;
        }
        let cells = |frame: Vec<Affine>, cell: Option<Vec<Affine>>| {
            let mut out = frame;
            out.extend(cell.unwrap_or_default());
            out
        };
        if let Some((shape, yields)) = self.withs.get(&a) {
            let frame = reader.vector(*shape)?;
            // Every cell has the same shape; a prefix all parts agree on is it.
            let mut common: Option<Vec<Affine>> = None;
            for y in yields {
                let c = self.of_array(reader, *y, depth + 1).unwrap_or_default();
                common = Some(match common {
                    None => c,
                    Some(prev) => prev.into_iter().zip(c).take_while(|(x, y)| x == y).map(|(x, _)| x).collect(),
                });
            }
            return Some(cells(frame, common));
        }
        match reader.defs.def(a)? {
            Def::Prim(Prim::Genarray, args) => {
                Some(cells(reader.vector(args[0])?, self.of_array(reader, args[1], depth + 1)))
            }
            Def::Prim(Prim::Sel, args) => {
                let k = if reader.ty(args[0]).shape.is_scalar() {
                    1
                } else {
                    crate::sema::prim_ty::vector_len(reader.ty(args[0]))?
                };
                let whole = self.of_array(reader, args[1], depth + 1)?;
                (whole.len() > k).then(|| whole[k..].to_vec())
            }
            _ => None,
        }
    }
}

/// Equalities asserted by dominating checks (`assert(n == m)`: L0's zip and
/// size certificates), as differences that are zero.
type Facts = Vec<Affine>;

/// `d` is positive, given the facts (each used at most once, when it removes a term).
fn positive(d: &Affine, facts: &Facts) -> bool {
    let mut d = d.clone();
    for zero in facts {
        if d.as_const().is_some() {
            break;
        }
        for cand in [d.sub(zero), d.add(zero)] {
            if cand.terms.len() < d.terms.len() {
                d = cand;
                break;
            }
        }
    }
    d.as_const().is_some_and(|x| x > 0)
}

/// Int scalars chosen by a conditional (`i < k ? i : i + 1`, what `where`
/// leaves): the values its branches yield.
type Choices = HashMap<ValueId, [ValueId; 2]>;

fn choices(f: &Function) -> Choices {
    let mut out = HashMap::default();
    f.body.walk(&mut |s| {
        if let Op::If { then_block, else_block, .. } = &s.op {
            for (k, d) in s.defs.iter().enumerate() {
                if let (Some(t), Some(e)) = (then_block.yields.get(k), else_block.yields.get(k)) {
                    out.insert(*d, [*t, *e]);
                }
            }
        }
    });
    out
}

/// Whether `idx` lies inside `shape` for every index of the enclosing parts.
/// `checked` holds what earlier checks in scope established (each index
/// component of an `in_bounds` check that passed lies in its extent): a
/// component is tried with the enclosing parts' and loops' ranges first, then
/// with those facts on top.
#[allow(clippy::too_many_arguments)]
fn proven(
    reader: &Reader,
    ranges: &Ranges,
    checked: &Ranges,
    choices: &Choices,
    facts: &Facts,
    known: &index::Facts,
    idx: ValueId,
    shape: &[Affine],
) -> bool {
    let comps: Vec<Affine> = match reader.ty(idx).shape.is_scalar() {
        true => vec![reader.scalar(idx)],
        false => match reader.vector(idx) {
            Some(c) => c,
            None => return false,
        },
    };
    if comps.len() > shape.len() {
        return false;
    }
    let inside = |ranges: &Ranges, c: &Affine, n: &Affine| {
        let Some((lo, hi)) = extremes(reader, ranges, choices, c, 0) else { return false };
        // Remaining atoms must cancel against the shape, or be bounded by what is known.
        within(reader, facts, known, &lo, &n.sub(&hi))
    };
    comps.iter().zip(shape).all(|(c, n)| {
        inside(ranges, c, n)
            || (!checked.is_empty() && {
                let mut with_checks = ranges.clone();
                with_checks.extend(checked.iter().cloned());
                inside(&with_checks, c, n)
            })
    })
}

/// Whether `lo >= 0` and `room > 0`: constants, or bounded by what `known`
/// (and extents, never negative) tell, `room` also by asserted equalities.
fn within(reader: &Reader, facts: &Facts, known: &index::Facts, lo: &Affine, room: &Affine) -> bool {
    let ord = Known { reader, facts: known };
    let lo_ok = lo.as_const().is_some_and(|x| x >= 0) || ord.range(lo).0.is_some_and(|x| x >= 0);
    lo_ok && (positive(room, facts) || ord.range(room).0.is_some_and(|x| x >= 1))
}

/// The lowest and highest value of an index component over the enclosing
/// parts; a component chosen by a conditional takes the extremes of both
/// choices (when they compare).
fn extremes(reader: &Reader, ranges: &Ranges, choices: &Choices, c: &Affine, depth: usize) -> Option<(Affine, Affine)> {
    let chosen = c.terms.iter().find_map(|(atom, k)| match atom.component {
        None => choices.get(&atom.value).map(|alts| (*atom, *k, *alts)),
        Some(_) => None,
    });
    if let Some((atom, k, alts)) = chosen.filter(|_| depth < 4) {
        let rest = c.sub(&Affine::atom(atom).scale(k));
        let mut out: Option<(Affine, Affine)> = None;
        for alt in alts {
            if !reader.is_int_scalar(alt) {
                return None;
            }
            let (l, h) = extremes(reader, ranges, choices, &rest.add(&reader.scalar(alt).scale(k)), depth + 1)?;
            out = Some(match out {
                None => (l, h),
                Some((l0, h0)) => (l0.min(&l)?, h0.max(&h)?),
            });
        }
        return out;
    }
    let (mut lo, mut hi) = (c.clone(), c.clone());
    for (atom, k) in &c.terms {
        let Some((bounds, axis)) = ranges.iter().rev().find_map(|(atoms, b)| atoms.get(atom).map(|ax| (b, *ax))) else {
            continue;
        };
        let (l, h) = bounds.get(axis)?;
        // k * atom for atom in [l, h - 1]: the ends swap when k is negative
        // (`b[[n - 1 - k, j]]`, a reversal).
        let (first, last) = if *k >= 0 { (l.clone(), h.plus(-1)) } else { (h.plus(-1), l.clone()) };
        let without = Affine::atom(*atom).scale(*k);
        lo = lo.sub(&without).add(&first.scale(*k));
        hi = hi.sub(&without).add(&last.scale(*k));
    }
    Some((lo, hi))
}

/// Per enclosing part: its index atoms (→ axis) and bounds per axis.
type Ranges = Vec<(HashMap<Atom, usize>, Vec<(Affine, Affine)>)>;

struct Walk<'a, 'r> {
    reader: &'a Reader<'r>,
    shapes: &'a Shapes,
    choices: &'a Choices,
    /// Enclosing parts whose index vector ranges over all of `[0, upper)`:
    /// (index vector, upper). What proves rank-generic selections, whose
    /// index length is unknown (seed 000: `iv` over `shape(a)` selects in `a`).
    whole: Vec<(ValueId, ValueId)>,
    /// Enclosing with-loop parts, innermost last.
    parts: Vec<PartScope<'r>>,
    /// `in_bounds(index, shape)` checks that dominate what follows in their block.
    guards: Vec<(ValueId, ValueId)>,
    /// The ranges those checks establish for single-atom index components.
    checked: Ranges,
    /// What the conditions of enclosing branches and loops establish.
    known: index::Facts,
    checks: &'a mut crate::HashSet<*const Stmt>,
    prims: &'a mut Vec<ValueId>,
    narrowed: &'a mut Vec<Narrowed>,
}

/// A with-loop part seen from inside: what narrowing a check needs.
struct PartScope<'r> {
    part: &'r Part,
    /// Its first index binder: which part.
    key: ValueId,
    /// Its index atoms and their axes.
    atoms: HashMap<Atom, usize>,
    /// Everything defined (or bound) inside it, collected when a check
    /// first needs it (most parts have none to narrow).
    inner: std::cell::OnceCell<crate::HashSet<ValueId>>,
}

impl PartScope<'_> {
    fn inner(&self) -> &crate::HashSet<ValueId> {
        self.inner.get_or_init(|| {
            let p = self.part;
            let mut inner = util::defined_in(&p.body);
            inner.extend(p.index);
            inner.extend(p.scalars.iter().flatten());
            inner.extend(p.offset);
            inner
        })
    }
}

/// A part's first index binder (index vector, scalar or offset), which
/// names it: the key of [`Narrowed::part`].
fn part_key(p: &Part) -> Option<ValueId> {
    p.index.or_else(|| p.scalars.as_ref().and_then(|s| s.first().copied())).or(p.offset)
}

/// A check `in_bounds(index, shape)` in the part keyed `part` whose index,
/// at the part's first element, is `at_first`: see [`Walk::narrow`].
struct Narrowed {
    part: ValueId,
    index: ValueId,
    shape: ValueId,
    at_first: Vec<Affine>,
}

impl<'r> Walk<'_, 'r> {
    fn block(&mut self, b: &'r Block, ranges: &mut Ranges, facts: &mut Facts) {
        let facts_before = facts.len();
        let guards_before = self.guards.len();
        let checked_before = self.checked.len();
        let reader = self.reader;
        for s in &b.stmts {
            match &s.op {
                Op::Check(CheckOp { check: Check::InBounds { index, shape }, .. }) => {
                    if self.whole_index(*index, *shape) {
                        self.checks.insert(s);
                    } else if let Some(comps) = reader.vector(*shape) {
                        if proven(reader, ranges, &self.checked, self.choices, facts, &self.known, *index, &comps) {
                            self.checks.insert(s);
                        } else {
                            self.narrow(ranges, facts, *index, *shape, &comps);
                        }
                    }
                    self.guards.push((*index, *shape));
                    // From here on (in this block) each single-atom component `a + c`
                    // of the index lies in `[-c, shape_j - c)`.
                    if let (Some(idx), Some(bounds)) = (reader.vector(*index), reader.vector(*shape)) {
                        let mut atoms = HashMap::default();
                        let mut ranges_here = Vec::new();
                        for (c, n) in idx.iter().zip(&bounds) {
                            let [(atom, 1)] = c.terms.iter().map(|(a, k)| (*a, *k)).collect::<Vec<_>>()[..] else {
                                continue;
                            };
                            atoms.insert(atom, ranges_here.len());
                            ranges_here.push((Affine::constant(-c.c), n.plus(-c.c)));
                        }
                        if !atoms.is_empty() {
                            self.checked.push((atoms, ranges_here));
                        }
                    }
                }
                Op::Check(CheckOp { check: Check::Extents(v), .. }) => {
                    // Every extent of a shape vector at least 0 over the
                    // enclosing parts (a dropped `genarray`'s check).
                    let ord = Known { reader, facts: &self.known };
                    let nonnegative = |c: &Affine| {
                        extremes(reader, ranges, self.choices, c, 0).is_some_and(|(lo, _)| {
                            lo.as_const().is_some_and(|x| x >= 0) || ord.range(&lo).0.is_some_and(|x| x >= 0)
                        })
                    };
                    if reader.vector(*v).is_some_and(|comps| comps.iter().all(nonnegative)) {
                        self.checks.insert(s);
                    }
                }
                Op::Check(CheckOp { check: Check::SameShape(a, b), .. }) => {
                    // From here on (in this block) the shapes are equal, component by
                    // component: a passed check of vectors of one known length (the
                    // alternative, one of them `[]`, needs length 0).
                    if let (Some(x), Some(y)) = (reader.vector(*a), reader.vector(*b))
                        && x.len() == y.len()
                        && !x.is_empty()
                    {
                        facts.extend(x.iter().zip(&y).map(|(p, q)| p.sub(q)).filter(|d| !d.terms.is_empty()));
                    }
                }
                Op::Check(CheckOp { check: Check::Assert(c), .. }) => {
                    // From here on (in this block) `x == y`.
                    if let Some(Def::Prim(Prim::Bin(crate::interp::ops::BinOp::Eq), args)) = reader.defs.def(*c)
                        && args.len() == 2
                        && reader.is_int_scalar(args[0])
                        && reader.is_int_scalar(args[1])
                    {
                        facts.push(reader.scalar(args[0]).sub(&reader.scalar(args[1])));
                    }
                }
                Op::Prim { prim: Prim::Sel | Prim::Modarray, args, checked: true, .. } => {
                    let (idx, array) = if matches!(s.op, Op::Prim { prim: Prim::Sel, .. }) {
                        (args[0], args[1])
                    } else {
                        (args[1], args[0])
                    };
                    let whole = self.shapes.values.get(&array).is_some_and(|sv| self.whole_index(idx, *sv));
                    // Checked just before by `in_bounds(idx, shape(array))`.
                    let guarded = self.shapes.values.get(&array).is_some_and(|sv| {
                        self.guards
                            .iter()
                            .any(|(gi, gs)| *gi == idx && super::util::same_shape_value(self.reader.defs, *gs, *sv))
                    });
                    // An update's flag also stands for its value having the
                    // shape of the array's cells: that must be certain too.
                    let fits =
                        matches!(s.op, Op::Prim { prim: Prim::Sel, .. }) || value_fits(reader, array, idx, args[2]);
                    if fits && (whole || guarded) {
                        self.prims.push(s.defs[0]);
                    } else if fits
                        && let Some(comps) = self.shapes.of_array(reader, array, 0)
                        && reader.ty(idx).shape.rank_if_known().is_some_and(|r| r <= 1)
                        && proven(reader, ranges, &self.checked, self.choices, facts, &self.known, idx, &comps)
                    {
                        self.prims.push(s.defs[0]);
                    }
                }
                Op::Loop { init, params, cond, body, test_first: true, .. } => {
                    self.block(cond, ranges, facts);
                    let known = Known { reader, facts: &self.known };
                    ranges.push(counters(reader, &known, init, params, cond, body));
                    let known = self.known.clone();
                    if let Some(c) = cond.yields.first() {
                        self.assume(*c, true);
                    }
                    self.block(body, ranges, facts);
                    self.known = known;
                    ranges.pop();
                    continue;
                }
                Op::If { cond, then_block, else_block } => {
                    for (branch, holds) in [(then_block, true), (else_block, false)] {
                        let known = self.known.clone();
                        self.assume(*cond, holds);
                        self.block(branch, ranges, facts);
                        self.known = known;
                    }
                    continue;
                }
                Op::With(w) => {
                    for p in &w.parts {
                        let bounds = match (reader.vector(p.lower), reader.vector(p.upper)) {
                            (Some(l), Some(h)) if l.len() == h.len() => l.into_iter().zip(h).collect::<Vec<_>>(),
                            _ => Vec::new(),
                        };
                        let mut atoms = HashMap::default();
                        if let Some(iv) = p.index {
                            for k in 0..bounds.len() {
                                atoms.insert(Atom { value: iv, component: Some(k) }, k);
                            }
                        }
                        if let Some(ss) = &p.scalars {
                            for (k, x) in ss.iter().enumerate() {
                                atoms.insert(Atom { value: *x, component: None }, k);
                            }
                        }
                        let key = part_key(p);
                        if let Some(key) = key {
                            let inner = std::cell::OnceCell::new();
                            self.parts.push(PartScope { part: p, key, atoms: atoms.clone(), inner });
                        }
                        ranges.push((atoms, bounds));
                        let whole = p.index.filter(|_| super::util::zero_lower(self.reader.defs, p));
                        if let Some(iv) = whole {
                            self.whole.push((iv, p.upper));
                        }
                        self.block(&p.body, ranges, facts);
                        if whole.is_some() {
                            self.whole.pop();
                        }
                        ranges.pop();
                        if key.is_some() {
                            self.parts.pop();
                        }
                    }
                    continue;
                }
                _ => {}
            }
            s.op.walk_blocks(&mut |inner| self.block(inner, ranges, facts));
        }
        facts.truncate(facts_before);
        self.guards.truncate(guards_before);
        self.checked.truncate(checked_before);
    }

    /// A check in a part whose index components are either proven in bounds
    /// for every index of the part or do not change in it (Floyd–Warshall's
    /// `d[[i, k]]`: `i` runs over `shape(d)[0]`, `k` is the loop's counter):
    /// per element it fails at all of the part's indices or at none. It is
    /// rewritten to check the index of the part's first element instead —
    /// the same failure, with the same index in its message — which no longer
    /// depends on the part, so `licm` moves it out (guarded by the part being
    /// non-empty).
    fn narrow(&mut self, ranges: &Ranges, facts: &Facts, index: ValueId, shape: ValueId, shape_comps: &[Affine]) {
        let reader = self.reader;
        let Some(part) = self.parts.last() else { return };
        let Some(lower) = reader.vector(part.part.lower) else { return };
        let Some(comps) = reader.vector(index) else { return };
        if comps.len() > shape_comps.len() || part.inner().contains(&shape) {
            return;
        }
        let mut moves = false;
        let mut at_first = Vec::with_capacity(comps.len());
        for (c, n) in comps.iter().zip(shape_comps) {
            let own: Vec<(Atom, usize)> =
                c.terms.keys().filter_map(|a| part.atoms.get(a).map(|axis| (*a, *axis))).collect();
            if c.terms.keys().any(|a| !part.atoms.contains_key(a) && part.inner().contains(&a.value)) {
                return;
            }
            if own.is_empty() {
                at_first.push(c.clone());
                continue;
            }
            let Some((lo, hi)) = extremes(reader, ranges, self.choices, c, 0) else { return };
            if !within(reader, facts, &self.known, &lo, &n.sub(&hi)) {
                return;
            }
            moves = true;
            let mut first = c.clone();
            for (atom, axis) in own {
                let Some(l) = lower.get(axis) else { return };
                let k = first.terms.remove(&atom).unwrap_or(0);
                first = first.add(&l.scale(k));
            }
            at_first.push(first);
        }
        if moves {
            self.narrowed.push(Narrowed { part: part.key, index, shape, at_first });
        }
    }

    /// Records what `cond == holds` establishes (for the block about to be walked).
    fn assume(&mut self, cond: ValueId, holds: bool) {
        let mut known = self.known.clone();
        known.assume(self.reader, &Known { reader: self.reader, facts: &self.known }, cond, holds);
        self.known = known;
    }

    /// Whether `idx` is the index vector of an enclosing part over `[0, s)`
    /// for a shape value equal to `shape`.
    fn whole_index(&self, idx: ValueId, shape: ValueId) -> bool {
        self.whole
            .iter()
            .any(|(iv, upper)| *iv == idx && super::util::same_shape_value(self.reader.defs, *upper, shape))
    }
}

/// The counters of a loop tested before every iteration, with their ranges
/// in the body (see the module docs), as one range entry. `int` arithmetic
/// wraps: a counter's range is `[start, limit)` only where its start and
/// limit are read as their values and no step from below the limit goes
/// past the largest `int` (`k = k + 2147483647` from 1 wraps to a negative
/// `k` that still passes `k < n`); `known`: what holds at the loop.
fn counters(
    reader: &Reader,
    known: &Known,
    init: &[ValueId],
    params: &[ValueId],
    cond: &Block,
    body: &Block,
) -> (HashMap<Atom, usize>, Vec<(Affine, Affine)>) {
    let mut atoms = HashMap::default();
    let mut bounds = Vec::new();
    // `cond` yields `p < hi` (or `p <= x`, i.e. `p < x + 1`) for one counter `p`.
    let Some(&test) = cond.yields.first() else { return (atoms, bounds) };
    let Some(Def::Prim(Prim::Bin(op), args)) = reader.defs.def(test) else { return (atoms, bounds) };
    let extra = match op {
        crate::interp::ops::BinOp::Lt => 0,
        crate::interp::ops::BinOp::Le => 1,
        _ => return (atoms, bounds),
    };
    if args.len() != 2 || !reader.is_int_scalar(args[0]) || !reader.is_int_scalar(args[1]) {
        return (atoms, bounds);
    }
    let (tested, base) = (reader.scalar(args[0]), reader.scalar(args[1]));
    if !index::exact(&base, known) {
        return (atoms, bounds);
    }
    let limit = base.plus(extra);
    // The largest value the test lets through (an `int`: at most i32::MAX).
    let largest = known.range(&base).1.unwrap_or(i32::MAX as i64).min(i32::MAX as i64) + extra - 1;
    for (k, &p) in params.iter().enumerate() {
        let atom = Atom { value: p, component: None };
        if !reader.is_int_scalar(p) || tested != Affine::atom(atom) {
            continue;
        }
        let (Some(&start), Some(&next)) = (init.get(k), body.yields.get(k)) else { continue };
        let step = reader.scalar(next).minus(&Affine::atom(atom));
        let Some(step) = step.filter(|c| *c >= 0) else { continue };
        if !reader.is_int_scalar(start) || !index::exact(&reader.scalar(start), known) {
            continue;
        }
        if largest + step > i32::MAX as i64 {
            continue;
        }
        atoms.insert(atom, bounds.len());
        bounds.push((reader.scalar(start), limit.clone()));
    }
    (atoms, bounds)
}

/// Rewrites the checks [`Walk::narrow`] chose to check their index at the
/// first element of their part. Returns how many.
fn narrow(f: &mut Function, b: &mut Block, part: Option<ValueId>, narrowed: &[Narrowed]) -> u64 {
    let mut count = 0;
    let stmts = std::mem::take(&mut b.stmts);
    let mut out = Vec::with_capacity(stmts.len());
    for mut s in stmts {
        if let Op::Check(CheckOp { check: Check::InBounds { index, shape }, .. }) = &mut s.op {
            let hit = narrowed.iter().find(|n| Some(n.part) == part && n.index == *index && n.shape == *shape);
            if let Some(n) = hit {
                let mut pre = Vec::new();
                *index = index::emit_vector(f, &mut pre, &n.at_first, s.span);
                for p in &mut pre {
                    p.blame = s.blame;
                }
                out.extend(pre);
                count += 1;
            }
        }
        match &mut s.op {
            Op::With(w) => {
                for p in &mut w.parts {
                    let key = part_key(p);
                    count += narrow(f, &mut p.body, key, narrowed);
                }
            }
            op => op.walk_blocks_mut(&mut |inner| count += narrow(f, inner, part, narrowed)),
        }
        out.push(s);
    }
    b.stmts = out;
    count
}

/// Removes the proven checks (`checks`: their statements' addresses, taken
/// before anything moved: `retain` looks at each statement where it was, and
/// nested blocks' statements stay where they are) and unchecks `prims`.
fn rewrite(
    b: &mut Block,
    checks: &crate::HashSet<*const Stmt>,
    prims: &[ValueId],
    removed: &mut u64,
    unchecked: &mut u64,
) {
    b.stmts.retain(|s| match &s.op {
        Op::Check(CheckOp { check: Check::InBounds { .. } | Check::Extents(_), .. })
            if checks.contains(&(s as *const Stmt)) =>
        {
            *removed += 1;
            false
        }
        _ => true,
    });
    for s in &mut b.stmts {
        if let Op::Prim { checked, .. } = &mut s.op
            && *checked
            && s.defs.first().is_some_and(|d| prims.contains(d))
        {
            *checked = false;
            *unchecked += 1;
        }
        s.op.walk_blocks_mut(&mut |inner| rewrite(inner, checks, prims, removed, unchecked));
    }
}

/// Whether the value `value` of `modarray(array, idx, value)` certainly has
/// the shape of the array's cells at `idx` (its types say so).
fn value_fits(reader: &Reader, array: ValueId, idx: ValueId, value: ValueId) -> bool {
    use crate::sema::ty::Shape;
    let Shape::Fixed(dims) = &reader.ty(array).shape else { return false };
    let depth = match &reader.ty(idx).shape {
        Shape::Fixed(d) if d.is_empty() => 1,
        Shape::Fixed(d) if d.len() == 1 => match d[0] {
            Some(k) => k,
            None => return false,
        },
        _ => return false,
    };
    let Shape::Fixed(cell) = &reader.ty(value).shape else { return false };
    depth <= dims.len()
        && dims[depth..].len() == cell.len()
        && dims[depth..].iter().zip(cell).all(|(a, v)| a.is_some() && a == v)
}

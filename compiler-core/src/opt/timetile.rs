//! # timetile: a loop of stencil steps may run in time tiles
//!
//! An iterated stencil (seed 002's relaxation, a smoothing sweep) reads and
//! writes its whole array once per step: on arrays larger than the caches
//! each step streams from memory, and a second thread gains little (the
//! memory bus is what both wait for). Where each step only reads the array
//! at fixed offsets near the written index, the steps can run *in time
//! tiles*: a band of rows takes several steps while it stays in the cache,
//! recomputing the few rows at its edges that its neighbours' bands also
//! compute (overlapped tiling), so the array crosses the memory bus once
//! per tile of steps instead of once per step, and the bands run on
//! different threads without waiting for each other.
//!
//! This pass finds such loops and marks them `tiled`; the back end decides
//! at run time how many steps a tile takes (from the rows' size, the
//! stencil's reach and the steps left; one step at a time where the array
//! fits the caches anyway) and runs them. The values are exactly those of
//! the loop run step by step: every element is computed from the same
//! inputs by the same code.
//!
//! ```text
//! %r, %k9 = loop while init(%a0, %0)                 %r, %k9 = loop while tiled init(%a0, %0)
//!     params(%a: double[2000,2000], %k: int) cond {       params(%a: double[2000,2000], %k: int) cond {
//!   %c = prim lt(%k, %n)                           ⇒    (the same)
//!   yield %c
//! } body {                                           } body {
//!   %b = with {                                        (the same)
//!     part lower %lo upper %hi offset %o: int {
//!       %o1 = prim add(%o, %m2000)
//!       %x = prim idx_sel(%o1, %a) unchecked
//!       …
//!   } modarray(%a) cell double
//!   %k1 = prim add(%k, %one)
//!   yield %b, %k1
//! }
//! ```
//!
//! A loop qualifies ([`stencil`]) when it is a `while` over two values, the
//! array and a counter that goes up by one to a bound defined outside; its
//! body is one with-loop followed by the counter's step; the with-loop is a
//! `modarray` of the array with one dense part over flat offsets (index
//! vector elimination's `offset`), whose body cannot fail (selections proved
//! in bounds, no integer division, no call, no nested loop or with-loop)
//! and reads the array only at the offset shifted by constants or by
//! offsets of constant indices in its shape (`vect2offset(shape(a), [-1, 0])`:
//! generic code's neighbours, a row each way whatever the extents), and does
//! not read the counter (a tile's steps share one copy of the step's
//! environment: `… + k` would read the first step's `k`). The
//! rows a step reads either side follow from those (a constant shift of `k`
//! elements in rows of `n` counts as `k / n` rows, rounded up). Counter
//! `loops_tiled`, a remark per loop.
//!
//! A step that builds the array anew, its border in parts of their own that
//! copy the array (seed 002's APL relaxation once folded: a `genarray` of the
//! array's shape with five parts, four of them its border rows and columns),
//! is that array modified: where the parts are boxes that cover the shape
//! exactly and the step is then a stencil as above, the copying parts go and
//! the `genarray` becomes a `modarray` of the array (counter
//! `border_parts_dropped`). Boxes may be symbolic (generic code's `[1, 0]`
//! to `[m - 1, 1]`) where what is known of the extents orders their bounds:
//! the conditions of the branches and loops around the loop (the APL
//! relaxation's generic loop, once `unswitch` has taken it out of its version
//! for extents of at least 3).
//!
//! Limits: one computing part; boxes whose bounds the conditions around do
//! not order keep the `genarray` (and the loop untiled); tiles are bands of
//! the outermost axis, so a step over few large rows (a 128^3 grid's planes)
//! gets few or no steps per tile.

use crate::HashMap;
use crate::interp::ops::BinOp;
use crate::ir::*;
use crate::sema::hir::{Elem, Prim};
use crate::span::Span;
use crate::syntax::ast::BaseType;

use super::{Pass, PassCx, RemarkKind, index, util};

pub const PASS: Pass = Pass {
    name: "timetile",
    description: "loops of stencil steps over one array may run in time tiles (several steps per band of rows while it is cached)",
    run,
};

/// A loop whose steps may run in time tiles, as [`stencil`] found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stencil {
    /// The loop parameter holding the array, and the counter.
    pub array: usize,
    pub counter: usize,
    /// The counter's bound (the loop runs while `counter < bound`).
    pub bound: ValueId,
    /// Rows of the outermost axis a step reads on either side of the row it
    /// writes.
    pub reach: usize,
    /// Elements per row of the outermost axis, where the shape is known.
    pub row_elems: Option<usize>,
}

/// What [`stencil`] reads of a function's definitions.
#[derive(Debug, Default)]
pub struct Facts {
    ints: HashMap<ValueId, i64>,
    vecs: HashMap<ValueId, Vec<i64>>,
    /// `vect2offset(shp, c)` of a constant index `c`: `shp` and `c`.
    offsets: HashMap<ValueId, (ValueId, Vec<i64>)>,
    /// `shape(x)`: `x`.
    shapes: HashMap<ValueId, ValueId>,
}

impl Facts {
    pub fn of(f: &Function) -> Facts {
        let mut facts = Facts::default();
        for (v, c) in util::constants(f) {
            if let Some(x) = util::int_scalar(&c) {
                facts.ints.insert(v, x);
            } else if let Some(x) = util::int_vec(&c) {
                facts.vecs.insert(v, x);
            }
        }
        let mut offsets = Vec::new();
        f.body.walk(&mut |s| match &s.op {
            Op::Prim { prim: Prim::Vect2Offset, args, .. } if args.len() == 2 => {
                offsets.push((s.defs[0], args[0], args[1]))
            }
            Op::Prim { prim: Prim::Shape, args, .. } if args.len() == 1 => {
                facts.shapes.insert(s.defs[0], args[0]);
            }
            _ => {}
        });
        for (v, shp, c) in offsets {
            if let Some(c) = facts.vecs.get(&c).cloned() {
                facts.offsets.insert(v, (shp, c));
            }
        }
        facts
    }
}

fn run(m: &mut Module, cx: &mut PassCx) {
    cx.each_function(m, |f, cx| {
        // Most functions have no loop left to mark: no walk for their facts.
        let mut loops = false;
        f.body.walk(&mut |s| loops |= matches!(s.op, Op::Loop { tiled: false, .. }));
        if !loops {
            return;
        }
        let facts = Facts::of(f);
        // A step that builds the array anew, copying its border in parts of
        // their own, is the array modified (where that makes it a stencil).
        let defs = index::defs(f);
        let made_modarray = util::with_body(f, |f, body| {
            let f: &Function = f;
            let reader = index::Reader::new(f, &defs);
            drop_border_parts(f, &facts, &reader, body, &mut Vec::new())
        });
        cx.count("border_parts_dropped", made_modarray);
        let mut found: Vec<(ValueId, Span, Stencil)> = Vec::new();
        f.body.walk(&mut |s| {
            if let Op::Loop { tiled: false, .. } = s.op
                && let Some(st) = stencil(f, &facts, s)
            {
                found.push((s.defs[0], s.span, st));
            }
        });
        if found.is_empty() {
            return;
        }
        f.body.walk_mut(&mut |s| {
            if let Op::Loop { tiled, .. } = &mut s.op
                && found.iter().any(|(d, ..)| s.defs.first() == Some(d))
            {
                *tiled = true;
            }
        });
        cx.count("loops_tiled", found.len() as u64);
        let name = f.name.clone();
        for (_, span, st) in &found {
            cx.remark(
                RemarkKind::Applied,
                &name,
                Some(*span),
                format!(
                    "the steps of this loop may run in time tiles: each step reads {} row{}{} on either side",
                    st.reach,
                    if st.reach == 1 { "" } else { "s" },
                    match st.row_elems {
                        Some(1) => " of 1 element".to_string(),
                        Some(n) => format!(" of {n} elements"),
                        None => String::new(),
                    },
                ),
            );
        }
        cx.changed_function(&name);
    });
}

/// The loop `s` of `f` as a stencil whose steps may run in time tiles (see
/// the module documentation); `facts` are `f`'s ([`Facts::of`]).
pub fn stencil(f: &Function, facts: &Facts, s: &Stmt) -> Option<Stencil> {
    let const_int = |v: ValueId| facts.ints.get(&v).copied();
    let Op::Loop { init, params, cond, body, test_first: true, .. } = &s.op else { return None };
    if params.len() != 2 || cond.stmts.len() != 1 || body.stmts.len() != 2 {
        return None;
    }
    // The condition: `counter < bound`, the bound from outside the loop.
    let c = &cond.stmts[0];
    let Op::Prim { prim: Prim::Bin(BinOp::Lt), args, .. } = &c.op else { return None };
    if cond.yields.as_slice() != c.defs.as_slice() {
        return None;
    }
    let (counter_v, bound) = (args[0], args[1]);
    let counter = params.iter().position(|p| *p == counter_v)?;
    let array = 1 - counter;
    let a = params[array];
    if params.contains(&bound) || defines(body, bound) {
        return None;
    }
    // The body: the step of the array, then the counter's.
    let (step, next) = (&body.stmts[0], &body.stmts[1]);
    let Op::Prim { prim: Prim::Bin(BinOp::Add), args, .. } = &next.op else { return None };
    if args[0] != counter_v || const_int(args[1]) != Some(1) {
        return None;
    }
    if body.yields[counter] != next.defs[0] || body.yields[array] != *step.defs.first()? {
        return None;
    }
    let Op::With(w) = &step.op else { return None };
    if w.first_match || w.parts.len() != 1 || w.ops.as_slice() != [WithOp::Modarray { array: a }] {
        return None;
    }
    // The steps of a tile run on one copy of the step's environment: a step
    // reading the counter (`… + k`) would see the first step's.
    if util::free_uses(step).contains(&counter_v) {
        return None;
    }
    let part = &w.parts[0];
    if part.step.is_some() || part.width.is_some() {
        return None;
    }
    let offset = part.offset?;
    // An index of every axis; rows of the outermost one, of known length
    // where the shape is known.
    let rank = f.ty(a).shape.rank_if_known().filter(|r| *r >= 1)?;
    if f.ty(part.lower).shape.extents() != Some(vec![rank]) {
        return None;
    }
    let extents = f.ty(a).shape.extents();
    let rows = extents.as_ref().map(|e| e[0]);
    let row_elems = extents.as_ref().map(|e| e[1..].iter().product::<usize>());
    if rows == Some(0) || row_elems == Some(0) {
        return None;
    }
    // A shift of the offset by `vect2offset(shape(a), c)`: by `c[0]` rows
    // (the selection is in bounds, so the other components stay in their
    // row); by a constant: by that many elements.
    let init_a = init[array];
    let term = |v: ValueId| -> Option<Shift> {
        if let Some(c) = const_int(v) {
            return Some(Shift { rows: 0, elems: c.unsigned_abs() });
        }
        let (shp, c) = facts.offsets.get(&v)?;
        let of = *facts.shapes.get(shp)?;
        (c.len() == rank && (of == a || of == init_a)).then(|| Shift { rows: c[0].unsigned_abs(), elems: 0 })
    };
    // The part's body: nothing that can fail, the array read only at the
    // offset shifted so.
    let mut shifts: HashMap<ValueId, Shift> = HashMap::default();
    shifts.insert(offset, Shift::default());
    let mut reach = Shift::default();
    for t in &part.body.stmts {
        match &t.op {
            Op::Const(_) => {}
            Op::Prim { prim: Prim::IdxSel, args, checked, .. } => {
                if *checked || args[0] == a {
                    return None;
                }
                if args[1] == a {
                    let sh = shifts.get(&args[0])?;
                    reach = Shift { rows: reach.rows.max(sh.rows), elems: reach.elems.max(sh.elems) };
                }
            }
            Op::Prim { prim, args, .. } => {
                if args.contains(&a) || prim.has_effect() {
                    return None;
                }
                let float_div = matches!(prim, Prim::Bin(BinOp::Div))
                    && matches!(f.ty(t.defs[0]).elem, Elem::Base(BaseType::Double | BaseType::Float));
                if util::prim_may_fail(prim) && !float_div {
                    return None;
                }
                // The offset plus or minus shifts.
                let shift = match (prim, args.as_slice()) {
                    (Prim::Bin(BinOp::Add | BinOp::Sub), [x, y]) => shifts
                        .get(x)
                        .copied()
                        .zip(term(*y))
                        .map(|(s, t)| Shift { rows: s.rows + t.rows, elems: s.elems + t.elems }),
                    _ => None,
                };
                if let Some(sh) = shift {
                    shifts.insert(t.defs[0], sh);
                }
            }
            _ => return None,
        }
    }
    if part.body.yields.contains(&a) {
        return None;
    }
    // Elements count as rows where rows have a known length.
    let reach = match row_elems {
        Some(n) => reach.rows + reach.elems.div_ceil(n as u64),
        None if reach.elems == 0 => reach.rows,
        None => return None,
    } as usize;
    // A step that reads rows beyond the array's own is no stencil of it.
    if rows.is_some_and(|r| reach >= r) {
        return None;
    }
    Some(Stencil { array, counter, bound, reach, row_elems })
}

/// How far a value shifts an offset: whole rows, and elements.
#[derive(Clone, Copy, Debug, Default)]
struct Shift {
    rows: u64,
    elems: u64,
}

/// Whether a loop body starts with a `genarray` with-loop (what
/// [`copies_to_modarray`] may change), so that other loops are not copied.
fn starts_with_genarray(body: &Block) -> bool {
    matches!(body.stmts.first().map(|t| &t.op), Some(Op::With(w)) if matches!(w.ops.as_slice(), [WithOp::Genarray { .. }]))
}

/// Rewrites the loops in `b` (nested ones too) whose steps become stencils
/// once their border parts go ([`copies_to_modarray`]); `conds`: the
/// conditions of the branches and loops around `b`, and whether they hold
/// there. Returns how many loops changed.
fn drop_border_parts(
    f: &Function,
    facts: &Facts,
    reader: &index::Reader,
    b: &mut Block,
    conds: &mut Vec<(ValueId, bool)>,
) -> u64 {
    let mut n = 0;
    for s in &mut b.stmts {
        if let Op::Loop { tiled: false, body, .. } = &s.op
            && starts_with_genarray(body)
            && stencil(f, facts, s).is_none()
        {
            // What the conditions around the loop establish (`m >= 3`, say).
            let mut known_facts = index::Facts::default();
            for (c, holds) in conds.iter() {
                let mut next = known_facts.clone();
                next.assume(reader, &index::Known { reader, facts: &known_facts }, *c, *holds);
                known_facts = next;
            }
            let known = index::Known { reader, facts: &known_facts };
            // Changed on a copy, kept only if it is then a stencil.
            let mut copy = s.clone();
            if copies_to_modarray(f, facts, &known, &mut copy) && stencil(f, facts, &copy).is_some() {
                *s = copy;
                n += 1;
                continue;
            }
        }
        match &mut s.op {
            Op::If { cond, then_block, else_block } => {
                for (block, holds) in [(then_block, true), (else_block, false)] {
                    conds.push((*cond, holds));
                    n += drop_border_parts(f, facts, reader, block, conds);
                    conds.pop();
                }
            }
            Op::Loop { cond, body, test_first, .. } => {
                let c = cond.yields.first().copied().filter(|_| *test_first);
                conds.extend(c.map(|c| (c, true)));
                n += drop_border_parts(f, facts, reader, body, conds);
                if c.is_some() {
                    conds.pop();
                }
            }
            op => op.walk_blocks_mut(&mut |inner| n += drop_border_parts(f, facts, reader, inner, conds)),
        }
    }
    n
}

/// Makes the step of the loop `s` a `modarray` of its array `a` where it is a
/// `genarray` of `a`'s shape whose parts cover it exactly and, but one or
/// more, copy `a` at their index (`idx_sel(offset, a)`): the shape of seed
/// 002's APL relaxation once folded, its border rows and columns parts of
/// their own. Those parts go (a `modarray` copies what no part computes);
/// `false` where nothing changed. The shape is `a`'s known extents or
/// `shape(a)` (of the array or of the loop's initial value, which a step
/// keeps: it is a stencil of it); bounds may be symbolic where what `known`
/// tells orders them (generic code in a version for extents of at least 3).
fn copies_to_modarray(f: &Function, facts: &Facts, known: &index::Known, s: &mut Stmt) -> bool {
    let Op::Loop { init, params, body, .. } = &mut s.op else { return false };
    let Some(step) = body.stmts.first_mut() else { return false };
    let Some(result) = step.defs.first().copied() else { return false };
    let Some(array) = body.yields.iter().position(|y| *y == result) else { return false };
    let (Some(&a), Some(&init_a)) = (params.get(array), init.get(array)) else { return false };
    let Op::With(w) = &mut step.op else { return false };
    let [WithOp::Genarray { shape, .. }] = w.ops.as_slice() else { return false };
    if w.first_match {
        return false;
    }
    let Some(rank) = f.ty(a).shape.rank_if_known() else { return false };
    let extents = f.ty(a).shape.extents().map(|e| e.iter().map(|x| *x as i64).collect::<Vec<_>>());
    let of_array = facts.shapes.get(shape).is_some_and(|x| *x == a || *x == init_a);
    let constant = extents.is_some() && facts.vecs.get(shape) == extents.as_ref();
    let Some(frame_hi) = known.reader.vector(*shape).filter(|v| v.len() == rank && (of_array || constant)) else {
        return false;
    };
    let frame = index::IndexBox { lo: vec![index::Affine::constant(0); rank], hi: frame_hi };
    // Boxes inside the frame, disjoint, covering it.
    let mut boxes = Vec::new();
    for p in &w.parts {
        let (Some(lo), Some(hi)) = (known.reader.vector(p.lower), known.reader.vector(p.upper)) else { return false };
        if p.step.is_some() || p.width.is_some() || lo.len() != rank || hi.len() != rank {
            return false;
        }
        boxes.push(index::IndexBox { lo, hi });
    }
    let inside = boxes.iter().all(|x| x.inside_in(&frame, known) == Some(true));
    let empty = |x: &index::IndexBox| x.is_empty_in(known) == Some(true);
    let disjoint = (0..boxes.len())
        .all(|i| (i + 1..boxes.len()).all(|j| boxes[i].intersect_in(&boxes[j], known).is_some_and(|x| empty(&x))));
    let covered = frame.subtract_all_in(&boxes, known).is_some_and(|rest| rest.iter().all(empty));
    if !inside || !disjoint || !covered {
        return false;
    }
    let copies = |p: &Part| match (p.offset, p.body.stmts.as_slice()) {
        (Some(o), [t]) => {
            matches!(&t.op, Op::Prim { prim: Prim::IdxSel, args, .. } if args.as_slice() == [o, a])
                && p.body.yields.as_slice() == t.defs.as_slice()
        }
        _ => false,
    };
    let kept = w.parts.iter().filter(|p| !copies(p)).count();
    if kept == 0 || kept == w.parts.len() {
        return false;
    }
    w.parts.retain(|p| !copies(p));
    w.ops = vec![WithOp::Modarray { array: a }];
    true
}

/// Whether `b` (nested blocks included) defines `v`.
fn defines(b: &Block, v: ValueId) -> bool {
    let mut found = false;
    b.walk(&mut |s| found |= s.defs.contains(&v));
    found
}

#[cfg(test)]
mod tests {
    use crate::ir::{parse, print};
    use crate::opt::{self, PipelineOptions};
    use crate::span::{FileKind, SourceMap, Span};

    /// The relaxation's interior part on a 6x5 array (its lower bound `%7`).
    const INTERIOR: &str = "      part lower %7 upper %40 offset %59: int {
        %63: int = prim add(%59, %62)
        %43: double = prim idx_sel(%63, %3) unchecked
        %67: int = prim add(%59, %66)
        %46: double = prim idx_sel(%67, %3) unchecked
        %47: double = prim add(%43, %46)
        %71: int = prim add(%59, %70)
        %50: double = prim idx_sel(%71, %3) unchecked
        %51: double = prim add(%47, %50)
        %75: int = prim add(%59, %9)
        %54: double = prim idx_sel(%75, %3) unchecked
        %55: double = prim add(%51, %54)
        %56: double = prim mul(%13, %55)
        yield %56
      }
";

    /// Seed 002's relaxation on a 6x5 array, as the pipeline leaves it
    /// before this pass (`STEP` stands for the counter's step, `INTERIOR`
    /// for [`INTERIOR`]).
    const RELAX: &str = "fn main(%0#a: double[6,5], %1#iters: int) -> (double[6,5])  [instance main]
{
  %2#k: int = const 0
  %7: int[2] = const [1, 1]
  %9: int = const 1
  %8: int = const 2
  %40: int[2] = const [5, 4]
  %13: double = const 0.25
  %62: int = const -5
  %66: int = const 5
  %70: int = const -1
  %36: double[6,5], %37: int = loop while init(%0, %2) params(%3#a: double[6,5], %4#k: int) cond {
    %38: bool = prim lt(%4, %1)
    yield %38
  } body {
    %34#a: double[6,5] = with {
INTERIOR    } modarray(%3) cell double
    %58: int = prim add(%4, STEP)
    yield %34, %58
  }
  return %36
}

entry main = main
";

    /// [`RELAX`] with its counter's step.
    fn relax(step: &str) -> String {
        RELAX.replace("INTERIOR", INTERIOR).replace("STEP", step)
    }

    /// The module after this pass alone: its text, and its remarks.
    fn tiled(text: &str) -> (String, Vec<String>) {
        let mut sources = SourceMap::new();
        let file = sources.add("test.ir", text, FileKind::User);
        let mut m = parse::parse_module(text, Span::new(file, 0, 0)).expect("parses");
        let options = PipelineOptions { verify: true, ..PipelineOptions::only(&["timetile"]) };
        let outcome = opt::optimise(&mut m, &sources, &options).expect("optimises");
        let text = print::module_text(&m);
        // The text form, `tiled` included, reads back.
        let again = print::module_text(&parse::parse_module(&text, Span::new(file, 0, 0)).expect("reads back"));
        assert_eq!(again, text);
        (text, outcome.remarks.iter().filter(|r| r.pass == "timetile").map(|r| r.message.clone()).collect())
    }

    #[test]
    fn a_loop_of_stencil_steps_is_marked_tiled() {
        let (text, remarks) = tiled(&relax("%9"));
        assert!(text.contains("loop while tiled init("), "{text}");
        assert_eq!(
            remarks,
            ["the steps of this loop may run in time tiles: each step reads 1 row of 5 elements on either side"]
        );
    }

    /// Seed 002's APL relaxation on a 6x5 array once folded: the border's
    /// rows and columns are parts that copy the array (`STEP` stands for the
    /// loop body, [`apl_step`]; `INTERIOR` for [`INTERIOR`], whose lower
    /// bound `%7` is `%8` to leave a row out).
    const RELAX_APL: &str = "fn main(%0#a: double[6,5], %1#iters: int) -> (double[6,5])  [instance main]
{
  %2#it: int = const 0
  %74: int[2] = const [6, 5]
  %9: int = const 1
  %13: double = const 0.25
  %98: int[2] = const [0, 0]
  %101: int[2] = const [1, 0]
  %107: int[2] = const [5, 0]
  %108: double = const 0.0
  %113: int[2] = const [1, 5]
  %154: int[2] = const [5, 5]
  %41: int[2] = const [5, 1]
  %151: int[2] = const [1, 4]
  %7: int[2] = const [1, 1]
  %8: int[2] = const [2, 1]
  %40: int[2] = const [5, 4]
  %62: int = const -5
  %66: int = const 5
  %70: int = const -1
  %171: double[6,5], %72: int = loop while init(%0, %2) params(%3#a: double[6,5], %4#it: int) cond {
    %73: bool = prim lt(%4, %1)
    yield %73
  } body {
STEP  }
  return %171
}

entry main = main
";

    /// The APL relaxation's loop body once folded: a `genarray` of `shape`
    /// (its element type `ty`) whose border parts copy `%3`, then the
    /// counter's step; each line indented by `pad` (`INTERIOR` stands for
    /// [`INTERIOR`], the interior part, indented as the relaxation's).
    fn apl_step(ty: &str, shape: &str, pad: &str) -> String {
        let text = format!(
            "%882: {ty} = with {{
  part lower %98 upper %113 offset %1561: int {{
    %877: double = prim idx_sel(%1561, %3) unchecked
    yield %877
  }}
  part lower %101 upper %41 offset %1562: int {{
    %1034: double = prim idx_sel(%1562, %3) unchecked
    yield %1034
  }}
INTERIOR  part lower %151 upper %154 offset %1598: int {{
    %1049: double = prim idx_sel(%1598, %3) unchecked
    yield %1049
  }}
  part lower %107 upper {shape} offset %1599: int {{
    %1000: double = prim idx_sel(%1599, %3) unchecked
    yield %1000
  }}
}} genarray({shape}, %108) cell double
%884: int = prim add(%4, %9)
yield %882, %884
"
        );
        text.lines()
            .map(|l| match l.strip_prefix("INTERIOR") {
                Some(rest) => format!("INTERIOR{pad}{rest}\n"),
                None => format!("{pad}{l}\n"),
            })
            .collect()
    }

    #[test]
    fn a_step_whose_border_parts_copy_the_array_becomes_a_modarray_and_is_tiled() {
        let relax_apl = RELAX_APL.replace("STEP", &apl_step("double[6,5]", "%74", "    "));
        let (text, remarks) = tiled(&relax_apl.replace("INTERIOR", INTERIOR));
        assert!(text.contains("loop while tiled init("), "{text}");
        assert!(text.contains("} modarray(%3) cell double"), "{text}");
        assert_eq!(text.matches("part lower").count(), 1, "{text}");
        assert_eq!(remarks.len(), 1);
        // Parts that leave a row of the shape to the default do not cover it:
        // nothing changes.
        let (text, remarks) = tiled(&relax_apl.replace("INTERIOR", &INTERIOR.replace("lower %7", "lower %8")));
        assert!(!text.contains("tiled") && text.contains("genarray(%74, %108)"), "{text}");
        assert!(remarks.is_empty());
    }

    /// The relaxation's generic instance: offsets of the neighbours from
    /// the shape `shp` (`%6` is the array's, `%5` another).
    fn relax_generic(shp: &str) -> String {
        relax("%9")
            .replace("double[6,5]", "double[.,.]")
            .replace(
                "%40: int[2] = const [5, 4]",
                "%6: int[2] = prim shape(%0)\n  %5: int[2] = const [9, 9]\n  %40: int[2] = prim sub(%6, %9)",
            )
            .replace("%62: int = const -5", &format!("%61: int[2] = const [-1, 0]\n  %62: int = prim vect2offset({shp}, %61)"))
            .replace("%66: int = const 5", "%65: int[2] = const [1, 0]\n  %66: int = prim vect2offset(%6, %65)")
            .replace(
                "%70: int = const -1",
                "%69: int[2] = const [0, -1]\n  %70: int = prim vect2offset(%6, %69)\n  %73: int[2] = const [0, 1]\n  %74: int = prim vect2offset(%6, %73)",
            )
            .replace("%75: int = prim add(%59, %9)", "%75: int = prim add(%59, %74)")
    }

    #[test]
    fn generic_code_is_tiled_by_the_rows_its_offsets_skip() {
        let (text, remarks) = tiled(&relax_generic("%6"));
        assert!(text.contains("loop while tiled init("), "{text}");
        assert_eq!(remarks, ["the steps of this loop may run in time tiles: each step reads 1 row on either side"]);
        // An offset in some other shape says nothing of the array's rows.
        let (text, remarks) = tiled(&relax_generic("%5"));
        assert!(!text.contains("tiled") && remarks.is_empty(), "{text}");
    }

    /// Seed 002's APL relaxation's generic loop once `unswitch` has taken it
    /// out of its version for extents of at least `MIN` (the guard around
    /// it): the border's parts have symbolic bounds, `m - 1` and `n - 1`
    /// (`STEP` stands for the loop body, [`apl_step`]).
    const RELAX_APL_GENERIC: &str = "fn main(%0#a: double[.,.], %1#iters: int) -> (double[.,.])  [instance main]
{
  %2#it: int = const 0
  %9: int = const 1
  %17: int = const -1
  %90: int = const MIN
  %13: double = const 0.25
  %98: int[2] = const [0, 0]
  %101: int[2] = const [1, 0]
  %7: int[2] = const [1, 1]
  %108: double = const 0.0
  %6: int[2] = prim shape(%0)
  %91: int[1] = const [0]
  %92: int[1] = const [1]
  %93: int = prim sel(%91, %6) unchecked
  %94: int = prim sel(%92, %6) unchecked
  %95: bool = prim ge(%93, %90)
  %96: bool = prim ge(%94, %90)
  %97: bool = prim and(%95, %96)
  %171: double[.,.] = if %97 {
    %110: int = prim add(%93, %17)
    %111: int = prim add(%94, %17)
    %113: int[2] = array [%9, %94]
    %41: int[2] = array [%110, %9]
    %40: int[2] = array [%110, %111]
    %151: int[2] = array [%9, %111]
    %154: int[2] = array [%110, %94]
    %107: int[2] = array [%110, %2]
    %61: int[2] = const [-1, 0]
    %62: int = prim vect2offset(%6, %61)
    %65: int[2] = const [1, 0]
    %66: int = prim vect2offset(%6, %65)
    %69: int[2] = const [0, -1]
    %70: int = prim vect2offset(%6, %69)
    %73: int[2] = const [0, 1]
    %74: int = prim vect2offset(%6, %73)
    %172: double[.,.], %72: int = loop while init(%0, %2) params(%3#a: double[.,.], %4#it: int) cond {
      %173: bool = prim lt(%4, %1)
      yield %173
    } body {
STEP    }
    yield %172
  } else {
    yield %0
  }
  return %171
}

entry main = main
";

    #[test]
    fn generic_border_parts_are_dropped_where_the_conditions_around_order_their_bounds() {
        let interior = INTERIOR.replace("%75: int = prim add(%59, %9)", "%75: int = prim add(%59, %74)");
        let text = RELAX_APL_GENERIC
            .replace("STEP", &apl_step("double[.,.]", "%6", "      "))
            .replace("INTERIOR", &interior.replace("\n      ", "\n        "));
        let (out, remarks) = tiled(&text.replace("MIN", "3"));
        assert!(out.contains("loop while tiled init("), "{out}");
        assert!(out.contains("} modarray(%3) cell double"), "{out}");
        assert_eq!(out.matches("part lower").count(), 1, "{out}");
        assert_eq!(remarks, ["the steps of this loop may run in time tiles: each step reads 1 row on either side"]);
        // Extents of at least 1 do not order `1` and `m - 1`: the parts may
        // overlap, so nothing changes.
        let (out, remarks) = tiled(&text.replace("MIN", "1"));
        assert!(!out.contains("tiled") && out.contains("genarray(%6, %108)"), "{out}");
        assert!(remarks.is_empty());
    }

    #[test]
    fn loops_that_are_not_unit_steps_of_an_infallible_stencil_are_not() {
        // A counter stepping by two; a selection not proved in bounds; the
        // array read at an index that is not the offset plus a constant.
        for text in [
            relax("%8"),
            relax("%9").replace("idx_sel(%67, %3) unchecked", "idx_sel(%67, %3)"),
            relax("%9").replace("%67: int = prim add(%59, %66)", "%67: int = prim mul(%59, %66)"),
        ] {
            let (out, remarks) = tiled(&text);
            assert!(!out.contains("tiled"), "{out}");
            assert!(remarks.is_empty());
        }
    }
}

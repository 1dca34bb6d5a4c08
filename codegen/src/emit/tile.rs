//! Register tiles: a part whose generator has `step` = `width` = a tile on its
//! last two axes (what `compiler_core::opt::tile` gives a fold inside a
//! two-dimensional with-loop) runs each full tile as one loop over the fold's
//! index with an accumulator per element of the tile:
//!
//! ```text
//! for each tile (r0, c0):                       // the outer loops
//!   if the tile is full:
//!     acc[ii][jj] = neutral
//!     for k in lo..hi:
//!       for ii, jj: acc[ii][jj] = acc[ii][jj] + body(r0 + ii, c0 + jj, k)
//!     for ii, jj: c[r0 + ii, c0 + jj] = acc[ii][jj]
//!   else (an edge): row by row, a tile of one row and the tile's columns
//!     whose lanes past the part are masked off (lanes form);
//!     the indices one by one (scalar form)
//! ```
//!
//! Where the part's bounds are constants that the tile divides, every tile is
//! full and there is no edge code at all.
//!
//! Two forms of the full tile:
//! - **Lanes** ([`Emitter::jam_lanes`]), when [`Emitter::lane_plan`] can
//!   classify every value of the body as the same along a row of the tile, an
//!   integer growing by a constant step along it, or a floating-point vector
//!   (elements read side by side, arithmetic on them): each row of the tile is
//!   one `<cols x double>` accumulator and the body is emitted once per row.
//!   For matrix multiplication, per `k`: one `b` row segment loaded as a
//!   vector, one `a` element per row broadcast, `rows` vector multiply-adds.
//!   Small IR: LLVM compiles it in a fraction of the time of the other form.
//! - **Scalar copies** ([`Emitter::jam`]) otherwise: one copy of the body per
//!   element, accumulators in stack slots (registers after SROA): independent
//!   scalar chains. LLVM's SLP vectoriser, which could pack them, packs
//!   nothing in our pipeline (`configure_llvm`: it cost compile time, and the
//!   bench's tiles came out the same without it).
//!
//! **Panels.** Where the lanes form's fold body selects vectors that do not
//! depend on the tile's row (matrix multiplication's `b[k, j]`: every row tile
//! of a column reads the same panel of `b`), the part runs its column tiles
//! outside its row tiles and, per full column tile, first copies those
//! vectors for every `k` into a contiguous buffer ([`Emitter::open_panel`],
//! [`Emitter::pack_panel`]) that the full tiles then read:
//!
//! ```text
//! for each column tile c0:
//!   if full: for k: panel[k] = b[k, c0 .. c0 + cols]     // once per column tile
//!   for each row tile r0: the tile as above, b's vector from panel[k]
//! ```
//!
//! Unpacked, every row tile streamed the column's panel from `b`'s rows, a
//! whole row apart — for extents that are multiples of 512 all in a few cache
//! sets; packed, it stays in L2 (a 1024x1024 product: 107 ms -> 27 ms).
//!
//! Both run each element's fold in the order of `k` from the neutral element
//! (never reassociated), exactly as the untiled code with exact folds; by
//! default the lanes form lets LLVM fuse a `+` fold's `acc + x * y` into one
//! FMA (one rounding instead of two).
//!
//! Only parts whose bodies are scalar straight-line code before the fold and
//! inside it, and whose fold is one primitive over one axis, are tiled (the
//! conditions [`Emitter::jam_tile`] checks); any other part with such a
//! generator runs index by index. A tiled part that may run in parallel is
//! emitted once, in its chunk function, which the inline path calls too
//! (`parallel.rs`).

use compiler_core::{HashMap, HashSet};

use compiler_core::interp::ops::{BinOp, UnOp};
use compiler_core::ir::{FoldFn, Op, Part, Stmt, ValueId, WithOp};
use compiler_core::sema::hir::Prim;
use compiler_core::syntax::ast::BaseType;
use inkwell::types::VectorType;
use inkwell::values::{BasicValue, BasicValueEnum, IntValue, PointerValue, VectorValue};
use inkwell::{FloatPredicate, IntPredicate};

use super::withloop::{Frame, Index, OpState, OpenLoop, PartCx, Result as GenResult};
use super::{Emitter, Fx, R, base, scalar_repr};
use crate::CodegenError;

/// A part's tile: rows and columns.
pub(crate) type Tile = (usize, usize);

/// The most elements a tile may have (each is a copy of the fold's body).
const MAX_TILE: usize = 256;

impl<'ctx, 'a> Emitter<'ctx, 'a> {
    /// The tile a part of rank `n` runs in, when it qualifies (see the module
    /// documentation).
    pub(crate) fn jam_tile(
        &self,
        fx: &Fx<'ctx, 'a>,
        pcx: &PartCx<'ctx, 'a>,
        states: &[OpState<'ctx, 'a>],
        n: usize,
    ) -> Option<Tile> {
        let (w, part) = (pcx.w, pcx.part);
        if n < 2 || pcx.mask.is_some() || pcx.end.is_some() || part.index.is_some() || w.ops.len() != 1 {
            return None;
        }
        let [OpState::Gen { result: GenResult::Eager { .. }, cell_static: Some(cell), .. }] = states else {
            return None;
        };
        if !cell.is_empty() {
            return None;
        }
        let (step, width) = (const_ints(fx, part.step)?, const_ints(fx, part.width)?);
        if step != width || step.len() != n {
            return None;
        }
        let (rows, cols) = (usize::try_from(step[n - 2]).ok()?, usize::try_from(step[n - 1]).ok()?);
        if rows * cols < 2 || rows * cols > MAX_TILE {
            return None;
        }
        let (fold_stmt, pre) = part.body.stmts.split_last()?;
        if part.body.yields.as_slice() != fold_stmt.defs.as_slice() || fold_stmt.defs.len() != 1 {
            return None;
        }
        let Op::With(fw) = &fold_stmt.op else { return None };
        let ([q], [WithOp::Fold { fun: FoldFn::Prim(_), partial, neutral, fixpoint: None }]) =
            (fw.parts.as_slice(), fw.ops.as_slice())
        else {
            return None;
        };
        if !partial.is_empty() || q.step.is_some() || q.width.is_some() || q.index.is_some() || q.offset.is_some() {
            return None;
        }
        if q.scalars.as_ref().is_some_and(|ss| ss.len() != 1) || q.body.yields.len() != 1 {
            return None;
        }
        // The fold's bounds and neutral element are the same for every element.
        let local: HashSet<ValueId> = pre.iter().flat_map(|s| s.defs.iter().copied()).collect();
        if [q.lower, q.upper, *neutral].iter().any(|v| local.contains(v)) {
            return None;
        }
        if !scalar_repr(fx.irf.ty(fold_stmt.defs[0])) {
            return None;
        }
        pre.iter().chain(&q.body.stmts).all(|s| self.jammable(fx, s)).then_some((rows, cols))
    }

    /// A statement a tile may copy: scalar, cannot fail, no effect (or an
    /// index vector that is never built).
    fn jammable(&self, fx: &Fx<'ctx, 'a>, s: &Stmt) -> bool {
        let scalars = s.defs.iter().all(|d| scalar_repr(fx.irf.ty(*d)));
        match &s.op {
            Op::Const(_) => scalars,
            Op::Prim { prim: Prim::Sel | Prim::IdxSel, checked, .. } => scalars && !checked,
            Op::Prim { prim, .. } => scalars && !prim.has_effect() && !compiler_core::opt::util::prim_may_fail(prim),
            Op::Array(_) => s.defs.iter().all(|d| fx.virt.contains(d)),
            _ => false,
        }
    }

    /// Emits one full tile at `(r0, c0)` of a part [`Self::jam_tile`]
    /// accepted; `outer`: the indices of the axes before the tile's.
    #[allow(clippy::too_many_arguments)]
    fn jam(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        pcx: &PartCx<'ctx, 'a>,
        states: &[OpState<'ctx, 'a>],
        outer: &[IntValue<'ctx>],
        r0: IntValue<'ctx>,
        c0: IntValue<'ctx>,
        (rows, cols): Tile,
    ) -> R<()> {
        let part = pcx.part;
        let TileFold { frame, elem, data, pre, fold, q, fun, neutral } = tile_fold(pcx, states)?;
        let ty = fx.irf.ty(fold).clone();
        let yty = fx.irf.ty(q.body.yields[0]).clone();
        let llty = self.value_ty(&ty);
        let start = self.value(fx, neutral)?;
        // Per element: its offset, what the statements before the fold bound,
        // and its accumulator.
        let mut elems = Vec::with_capacity(rows * cols);
        for ii in 0..rows {
            for jj in 0..cols {
                let i = self.b.build_int_add(r0, self.const_i64(ii as i64), "ti")?;
                let j = self.b.build_int_add(c0, self.const_i64(jj as i64), "tj")?;
                let off = self.bind_element(fx, part, &frame, outer, i, j)?;
                for s in pre {
                    self.stmt(fx, s, &HashSet::default())?;
                }
                let bound = self.snapshot(fx, part.scalars.iter().flatten().chain(&part.offset).copied(), pre);
                let slot = self.alloca(fx, llty, "tile.acc")?;
                self.b.build_store(slot, start)?;
                elems.push((off, bound, slot));
            }
        }
        // The fold's loop, every element's step in turn.
        let (l, k) = self.open_fold_loop(fx, q)?;
        let k_narrow = self.as_int(k)?;
        let loc = fx.loc;
        for (_, bound, slot) in &elems {
            rebind(fx, bound, q, k, k_narrow);
            for s in &q.body.stmts {
                self.stmt(fx, s, &HashSet::default())?;
            }
            let y = *fx
                .vals
                .get(&q.body.yields[0])
                .ok_or_else(|| CodegenError::Bug("a register tile's fold yields nothing".into()))?;
            // In order, never reassociated: the tile is the parallelism, and
            // reassociable steps invite LLVM to vectorise along `k` instead.
            let exact = std::mem::replace(&mut self.exact_folds, true);
            let stepped = self.fold_step(fx, *slot, &ty, fun, &[], None, None, y, &yty, loc);
            self.exact_folds = exact;
            stepped?;
        }
        self.close_loop(l)?;
        for (off, _, slot) in &elems {
            let acc = self.b.build_load(llty, *slot, "tile.result")?;
            self.store_elem(data, *off, elem, acc)?;
        }
        Ok(())
    }

    /// Binds the part's index scalars and offset for the element at `outer ++
    /// [i, j]`; returns its offset in the result.
    fn bind_element(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        part: &Part,
        frame: &Frame<'ctx>,
        outer: &[IntValue<'ctx>],
        i: IntValue<'ctx>,
        j: IntValue<'ctx>,
    ) -> R<IntValue<'ctx>> {
        let mut idx = outer.to_vec();
        idx.extend([i, j]);
        let off = self.frame_offset(fx, &Index::Static(idx.clone()), frame)?;
        for (sv, x) in part.scalars.iter().flatten().zip(&idx).chain(part.offset.as_ref().zip(Some(&off))) {
            let narrow = self.as_int(*x)?;
            fx.vals.insert(*sv, narrow.into());
            fx.wide.insert(*sv, *x);
        }
        Ok(off)
    }

    /// Opens the loop over the fold's index (`q`'s bounds, one axis).
    fn open_fold_loop(&mut self, fx: &Fx<'ctx, 'a>, q: &Part) -> R<(OpenLoop<'ctx>, IntValue<'ctx>)> {
        let (lo, hi) = self.fold_bounds(fx, q)?;
        self.open_loop(fx, lo, hi)
    }

    /// The fold's bounds (`q`'s, one axis).
    fn fold_bounds(&mut self, fx: &Fx<'ctx, 'a>, q: &Part) -> R<(IntValue<'ctx>, IntValue<'ctx>)> {
        let mut bound = |v: ValueId| -> R<IntValue<'ctx>> {
            let p = self.value(fx, v)?.into_pointer_value();
            self.int_elem(p, fx.irf.ty(v), self.const_i64(0))
        };
        Ok((bound(q.lower)?, bound(q.upper)?))
    }

    /// The bindings of `index` and of what `stmts` define, with their exact
    /// `i64`s where they have them.
    fn snapshot(&self, fx: &Fx<'ctx, 'a>, index: impl Iterator<Item = ValueId>, stmts: &[Stmt]) -> Bound<'ctx> {
        index
            .chain(stmts.iter().flat_map(|s| s.defs.iter().copied()))
            .filter_map(|v| fx.vals.get(&v).map(|x| (v, *x, fx.wide.get(&v).copied())))
            .collect()
    }

    /// One tile of a part [`Self::jam_tile`] accepted: its rows and columns
    /// (`start..stop`, clipped to the part's bounds) and `outer`, the indices
    /// of the axes before them. A full tile runs jammed; a partial one (at the
    /// part's far edges) as narrower tiles (see [`Self::edge_lanes`]), or
    /// index by index where the body cannot run as lanes. `partial`: whether
    /// the rows / columns may end in a partial tile (not when the bounds are
    /// known and the tile divides them: then there is no edge code at all).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn tile(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        pcx: &PartCx<'ctx, 'a>,
        states: &mut [OpState<'ctx, 'a>],
        plan: Option<&LanePlan>,
        panel: Option<&Panel<'ctx>>,
        outer: &[IntValue<'ctx>],
        (r0, r_stop): (IntValue<'ctx>, IntValue<'ctx>),
        (c0, c_stop): (IntValue<'ctx>, IntValue<'ctx>),
        t @ (rows, cols): Tile,
        partial: [bool; 2],
    ) -> R<()> {
        let jam_full = |e: &mut Self, fx: &mut Fx<'ctx, 'a>, states: &[OpState<'ctx, 'a>]| match plan {
            Some(plan) => e.jam_lanes(fx, pcx, states, plan, panel, outer, r0, c0, t, None),
            None => e.jam(fx, pcx, states, outer, r0, c0, t),
        };
        if partial == [false, false] {
            return jam_full(self, fx, states);
        }
        let rn = self.b.build_int_sub(r_stop, r0, "trows")?;
        let cn = self.b.build_int_sub(c_stop, c0, "tcols")?;
        let rf = self.b.build_int_compare(IntPredicate::EQ, rn, self.const_i64(rows as i64), "rfull")?;
        let cf = self.b.build_int_compare(IntPredicate::EQ, cn, self.const_i64(cols as i64), "cfull")?;
        let full = self.b.build_and(rf, cf, "full")?;
        let jam_bb = self.ctx.append_basic_block(fx.func, "tile.full");
        let edge_bb = self.ctx.append_basic_block(fx.func, "tile.edge");
        let join_bb = self.ctx.append_basic_block(fx.func, "tile.next");
        self.b.build_conditional_branch(full, jam_bb, edge_bb)?;
        self.b.position_at_end(jam_bb);
        jam_full(self, fx, states)?;
        self.b.build_unconditional_branch(join_bb)?;
        self.b.position_at_end(edge_bb);
        match plan {
            Some(plan) => {
                let (lr, i) = self.open_loop(fx, r0, r_stop)?;
                self.edge_lanes(fx, pcx, states, plan, outer, i, (c0, c_stop), cols)?;
                self.close_loop(lr)?;
                self.b.build_unconditional_branch(join_bb)?;
            }
            None => {
                let (lr, i) = self.open_loop(fx, r0, r_stop)?;
                let (lc, j) = self.open_loop(fx, c0, c_stop)?;
                let mut idx = outer.to_vec();
                idx.extend([i, j]);
                self.iteration(fx, pcx, states, &Index::Static(idx))?;
                self.close_loop(lc)?;
                self.close_loop(lr)?;
                self.b.build_unconditional_branch(join_bb)?;
            }
        }
        self.b.position_at_end(join_bb);
        Ok(())
    }

    /// The columns `c0..c_stop` (at most `cols`) of row `r` as a one-row
    /// lane tile whose lanes past `c_stop` are masked off: its vector reads
    /// and its store are LLVM's masked loads and stores, so it neither reads
    /// nor writes past the part (the masked-off lanes compute on zeros:
    /// floating-point arithmetic, which never traps). The tile has `cols`
    /// lanes, or a quarter of them (at least 4) when no more columns are
    /// left: one register of the target instead of four where the edge is
    /// narrow (1000x1000 with 32 columns: 8 left, 6% of the product's time
    /// with all 32 lanes). A matrix whose extent the tile does not divide so
    /// runs its edges as vector code too (index by index, an edge column of a
    /// product reads a column of `b`, a row's stride per step: 10-15% of the
    /// whole product's time at 1020x1020), in two copies of the body: the
    /// tiles of decreasing width this replaced (32, 16, 8, 4 columns, then
    /// one at a time) were five, and LLVM's time grows with every copy (a
    /// generic matrix product's LLVM time: 40 -> 26 ms).
    #[allow(clippy::too_many_arguments)]
    fn edge_lanes(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        pcx: &PartCx<'ctx, 'a>,
        states: &[OpState<'ctx, 'a>],
        plan: &LanePlan,
        outer: &[IntValue<'ctx>],
        r: IntValue<'ctx>,
        (c0, c_stop): (IntValue<'ctx>, IntValue<'ctx>),
        cols: usize,
    ) -> R<()> {
        let left = self.b.build_int_sub(c_stop, c0, "tleft")?;
        let narrow = (cols / 4).max(MIN_EDGE_LANES);
        if narrow >= cols {
            let mask = self.lane_mask(left, cols)?;
            return self.jam_lanes(fx, pcx, states, plan, None, outer, r, c0, (1, cols), Some(mask));
        }
        let few = self.b.build_int_compare(IntPredicate::SLE, left, self.const_i64(narrow as i64), "tfew")?;
        let narrow_bb = self.ctx.append_basic_block(fx.func, "tile.edge.narrow");
        let wide_bb = self.ctx.append_basic_block(fx.func, "tile.edge.wide");
        let done_bb = self.ctx.append_basic_block(fx.func, "tile.edge.done");
        self.b.build_conditional_branch(few, narrow_bb, wide_bb)?;
        for (bb, width) in [(narrow_bb, narrow), (wide_bb, cols)] {
            self.b.position_at_end(bb);
            let mask = self.lane_mask(left, width)?;
            self.jam_lanes(fx, pcx, states, plan, None, outer, r, c0, (1, width), Some(mask))?;
            self.b.build_unconditional_branch(done_bb)?;
        }
        self.b.position_at_end(done_bb);
        Ok(())
    }

    /// The first `left` of `lanes` lanes (`left` may exceed `lanes`).
    fn lane_mask(&mut self, left: IntValue<'ctx>, lanes: usize) -> R<VectorValue<'ctx>> {
        let lanes = u32::try_from(lanes).map_err(|_| CodegenError::Bug("a register tile: too many columns".into()))?;
        let left = self.splat(left.into(), lanes)?;
        let steps: Vec<_> = (0..lanes).map(|l| self.i64().const_int(u64::from(l), false)).collect();
        let steps = VectorType::const_vector(&steps);
        Ok(self.b.build_int_compare(IntPredicate::SLT, steps, left, "tmask")?)
    }
}

/// The narrowest masked edge tile [`Emitter::edge_lanes`] runs.
const MIN_EDGE_LANES: usize = 4;

/// The buffer a tiled part copies its column tiles' panels to
/// ([`Emitter::open_panel`]): per step of the fold, `loads.len()` vectors of
/// `cols` elements side by side.
pub(crate) struct Panel<'ctx> {
    /// The fold-body selections whose values the buffer holds, in order.
    loads: Vec<ValueId>,
    /// The buffer (an array of the runtime's, released after the part).
    pub array: PointerValue<'ctx>,
    data: PointerValue<'ctx>,
    /// The fold's first index.
    lo: IntValue<'ctx>,
    cols: usize,
    elem: BaseType,
}

impl<'ctx, 'a> Emitter<'ctx, 'a> {
    /// Whether the part of static index length `n` runs in register tiles
    /// that pack panels (see [`Self::open_panel`]): its nest then runs its
    /// column tiles outermost, and threads split it on columns
    /// (`parallel::chunked_axis`).
    pub(crate) fn packs_panels(
        &self,
        fx: &Fx<'ctx, 'a>,
        pcx: &PartCx<'ctx, 'a>,
        states: &[OpState<'ctx, 'a>],
        n: usize,
    ) -> bool {
        let Some(tile) = self.jam_tile(fx, pcx, states, n) else { return false };
        let Some(plan) = self.lane_plan(fx, pcx, states, tile) else { return false };
        panel_loads(pcx, states, &plan).is_ok_and(|loads| !loads.is_empty())
    }

    /// The selections of a lane-planned tile's fold body that read vectors
    /// which do not depend on the tile's row (for matrix multiplication,
    /// `b[k, j]`): every row tile of a column reads the same ones, so they
    /// are worth packing. None: no such selection; else the panel buffer,
    /// allocated (for the fold's whole extent) before the part's loops.
    ///
    /// Why: unpacked, every row tile streams a column tile's panel of `b`
    /// from far away — rows of `b` a whole row apart, which for extents that
    /// are multiples of 512 fall into the same few cache sets (a 512x512
    /// product ran at 8 ms, 1024x1024 at 107); packed and reused by all row
    /// tiles, the panel stays in L2.
    pub(crate) fn open_panel(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        pcx: &PartCx<'ctx, 'a>,
        states: &[OpState<'ctx, 'a>],
        plan: &LanePlan,
        cols: usize,
    ) -> R<Option<Panel<'ctx>>> {
        let TileFold { q, elem, .. } = tile_fold(pcx, states)?;
        let loads = panel_loads(pcx, states, plan)?;
        if loads.is_empty() {
            return Ok(None);
        }
        let (lo, hi) = self.fold_bounds(fx, q)?;
        let steps = self.b.build_int_sub(hi, lo, "psteps")?;
        let positive = self.b.build_int_compare(IntPredicate::SGT, steps, self.const_i64(0), "ppos")?;
        let steps = self.b.build_select(positive, steps, self.const_i64(0), "psteps")?.into_int_value();
        let per_step = self.const_i64((loads.len() * cols) as i64);
        let count = self.b.build_int_mul(steps, per_step, "pcount")?;
        let shape = self.i64_buffer(fx, 1, "pshape")?;
        self.b.build_store(shape, count)?;
        let array = self.alloc_array(fx, elem, self.const_i64(1), shape)?;
        let data = self.data_ptr(array)?;
        Ok(Some(Panel { loads, array, data, lo, cols, elem }))
    }

    /// Copies the panel of the column tile `c0..c_stop` (when it is a full
    /// one, and `rows`: some row tile will read it) to `panel`'s buffer:
    /// the fold body's statements that do not depend on the row, run at
    /// `row` (any row of the part) for every step of the fold.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn pack_panel(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        pcx: &PartCx<'ctx, 'a>,
        states: &[OpState<'ctx, 'a>],
        plan: &LanePlan,
        panel: &Panel<'ctx>,
        outer: &[IntValue<'ctx>],
        row: IntValue<'ctx>,
        (c0, c_stop): (IntValue<'ctx>, IntValue<'ctx>),
        rows: IntValue<'ctx>,
    ) -> R<()> {
        let TileFold { frame, pre, q, .. } = tile_fold(pcx, states)?;
        let part = pcx.part;
        let lanes = panel.cols as u32;
        let cn = self.b.build_int_sub(c_stop, c0, "pcols")?;
        let full = self.b.build_int_compare(IntPredicate::EQ, cn, self.const_i64(panel.cols as i64), "pfull")?;
        let go = self.b.build_and(full, rows, "pack")?;
        let pack_bb = self.ctx.append_basic_block(fx.func, "panel.pack");
        let done_bb = self.ctx.append_basic_block(fx.func, "panel.done");
        self.b.build_conditional_branch(go, pack_bb, done_bb)?;
        self.b.position_at_end(pack_bb);
        self.bind_element(fx, part, &frame, outer, row, c0)?;
        let mut vectors = HashMap::default();
        for s in pre {
            self.lane_stmt(fx, plan, &mut vectors, s, lanes, None)?;
        }
        let bound = self.snapshot(fx, part.scalars.iter().flatten().chain(&part.offset).copied(), pre);
        let (l, k) = self.open_fold_loop(fx, q)?;
        let k_narrow = self.as_int(k)?;
        rebind(fx, &bound, q, k, k_narrow);
        // What the panel's selections need (none of it depends on the row).
        let mut needed: HashSet<ValueId> = panel.loads.iter().copied().collect();
        let mut cone = Vec::new();
        for s in q.body.stmts.iter().rev() {
            if s.defs.iter().any(|d| needed.contains(d)) {
                needed.extend(s.op.operands());
                cone.push(s);
            }
        }
        for s in cone.into_iter().rev() {
            self.lane_stmt(fx, plan, &mut vectors, s, lanes, None)?;
        }
        for (at, load) in panel.loads.iter().enumerate() {
            let x = *vectors.get(load).ok_or_else(|| CodegenError::Bug("a panel load is no vector".into()))?;
            let p = self.panel_slot(panel, k, at)?;
            let st = self.b.build_store(p, x)?;
            st.set_alignment(elem_align(panel.elem)).map_err(|e| CodegenError::Bug(format!("alignment: {e}")))?;
        }
        self.close_loop(l)?;
        self.b.build_unconditional_branch(done_bb)?;
        self.b.position_at_end(done_bb);
        Ok(())
    }

    /// Where the panel holds selection `at`'s vector for fold step `k`.
    fn panel_slot(&mut self, panel: &Panel<'ctx>, k: IntValue<'ctx>, at: usize) -> R<PointerValue<'ctx>> {
        let step = self.b.build_int_sub(k, panel.lo, "pstep")?;
        let per_step = self.const_i64((panel.loads.len() * panel.cols) as i64);
        let base = self.b.build_int_mul(step, per_step, "pbase")?;
        let off = self.b.build_int_add(base, self.const_i64((at * panel.cols) as i64), "poff")?;
        self.gep(self.mem_ty(panel.elem), panel.data, &[off], "panel")
    }

    /// Selection `at`'s vector for fold step `k`, from the panel.
    fn panel_row(
        &mut self,
        panel: &Panel<'ctx>,
        k: IntValue<'ctx>,
        at: usize,
        vty: inkwell::types::VectorType<'ctx>,
    ) -> R<VectorValue<'ctx>> {
        let p = self.panel_slot(panel, k, at)?;
        let x = self.b.build_load(vty, p, "panel.row")?;
        if let Some(i) = x.as_instruction_value() {
            i.set_alignment(elem_align(panel.elem)).map_err(|e| CodegenError::Bug(format!("alignment: {e}")))?;
        }
        Ok(x.into_vector_value())
    }
}

/// How a value of a tiled part varies along the tile's columns (the lanes of
/// [`Emitter::jam_lanes`]'s vectors).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Lanes {
    /// The same in every column: a scalar.
    Same,
    /// An integer that grows by this much from one column to the next: the
    /// scalar of the first column stands for all of them.
    Step(i64),
    /// An index vector (never built) whose components grow by these.
    Index(Vec<i64>),
    /// A floating-point value per column: a vector.
    Vector,
}

/// What [`Emitter::lane_plan`] found: the class of every value the part's
/// statements define (a value defined outside is [`Lanes::Same`]).
pub(crate) type LanePlan = HashMap<ValueId, Lanes>;

impl<'ctx, 'a> Emitter<'ctx, 'a> {
    /// Whether a tile [`Self::jam_tile`] accepted can run its columns as the
    /// lanes of vectors: every value the body computes is the same across the
    /// columns, an integer growing by a constant step, or a floating-point
    /// value made from elements the columns read side by side (an `idx_sel`
    /// at an offset of step 1) and arithmetic on them; the fold is `+` or `*`
    /// on the same floating-point type. None when something else appears
    /// (the tile then runs as scalar copies, [`Self::jam`]).
    pub(crate) fn lane_plan(
        &self,
        fx: &Fx<'ctx, 'a>,
        pcx: &PartCx<'ctx, 'a>,
        states: &[OpState<'ctx, 'a>],
        _tile: Tile,
    ) -> Option<LanePlan> {
        let part = pcx.part;
        let [OpState::Gen { elem, .. }] = states else { return None };
        let (fold_stmt, pre) = part.body.stmts.split_last()?;
        let Op::With(fw) = &fold_stmt.op else { return None };
        let (q, WithOp::Fold { fun: FoldFn::Prim(Prim::Bin(BinOp::Add | BinOp::Mul)), .. }) =
            (fw.parts.first()?, fw.ops.first()?)
        else {
            return None;
        };
        let real = base(fx.irf.ty(fold_stmt.defs[0]));
        if !real.is_real() || *elem != real {
            return None;
        }
        let scalars = part.scalars.as_ref()?;
        let (column, rest) = scalars.split_last()?;
        let mut plan = LanePlan::default();
        plan.insert(*column, Lanes::Step(1));
        for v in rest.iter().chain(q.scalars.iter().flatten()) {
            plan.insert(*v, Lanes::Same);
        }
        if let Some(o) = part.offset {
            plan.insert(o, Lanes::Step(1));
        }
        for s in pre.iter().chain(&q.body.stmts) {
            let class = self.lane_class(fx, &plan, s, real)?;
            for d in &s.defs {
                plan.insert(*d, class.clone());
            }
        }
        match plan.get(&q.body.yields[0]) {
            None | Some(Lanes::Same | Lanes::Vector) => Some(plan),
            Some(_) => None,
        }
    }

    /// The class of what statement `s` defines, given its operands' (see
    /// [`Lanes`]); None when the lanes cannot express it. `real`: the one
    /// floating-point type vectors may hold.
    fn lane_class(&self, fx: &Fx<'ctx, 'a>, plan: &LanePlan, s: &Stmt, real: BaseType) -> Option<Lanes> {
        let class = |v: &ValueId| plan.get(v).cloned().unwrap_or(Lanes::Same);
        let args = s.op.operands();
        if args.iter().all(|a| class(a) == Lanes::Same) {
            return Some(Lanes::Same);
        }
        let step = |v: &ValueId| match class(v) {
            Lanes::Same => Some(0),
            Lanes::Step(k) => Some(k),
            _ => None,
        };
        let same_or_vector = |v: &ValueId| matches!(class(v), Lanes::Same | Lanes::Vector);
        let [d] = s.defs.as_slice() else { return None };
        let dty = base(fx.irf.ty(*d));
        let stepped = |k: i64| Some(if k == 0 { Lanes::Same } else { Lanes::Step(k) });
        match &s.op {
            Op::Array(elems) if fx.virt.contains(d) => {
                Some(Lanes::Index(elems.iter().map(step).collect::<Option<_>>()?))
            }
            Op::Prim { prim: Prim::Vect2Offset, args, .. } => {
                let Lanes::Index(steps) = class(&args[1]) else { return None };
                // offset = sum of index[d] * (the extents after d): a column
                // step on an axis before the last needs those extents known.
                let shape = fx.consts.get(&args[0]).and_then(|c| c.as_int_vec());
                let mut k = 0i64;
                for (axis, st) in steps.iter().enumerate() {
                    if *st == 0 {
                        continue;
                    }
                    let after: i64 = if axis + 1 == steps.len() {
                        1
                    } else {
                        shape.as_ref()?.get(axis + 1..)?.iter().try_fold(1i64, |p, x| p.checked_mul(*x))?
                    };
                    k = k.checked_add(st.checked_mul(after)?)?;
                }
                stepped(k)
            }
            Op::Prim { prim: Prim::Bin(op @ (BinOp::Add | BinOp::Sub | BinOp::Mul)), args, .. }
                if dty == BaseType::Int =>
            {
                let (x, y) = (step(&args[0])?, step(&args[1])?);
                let konst = |v: &ValueId| fx.consts.get(v).and_then(|c| c.as_scalar()).and_then(|c| c.as_i64());
                match op {
                    BinOp::Add => stepped(x.checked_add(y)?),
                    BinOp::Sub => stepped(x.checked_sub(y)?),
                    _ if y == 0 => stepped(x.checked_mul(konst(&args[1])?)?),
                    _ if x == 0 => stepped(y.checked_mul(konst(&args[0])?)?),
                    _ => None,
                }
            }
            Op::Prim { prim: Prim::IdxSel, args, checked: false, .. } => {
                let ok = step(&args[0]) == Some(1) && class(&args[1]) == Lanes::Same && dty == real;
                ok.then_some(Lanes::Vector)
            }
            Op::Prim {
                prim: Prim::Bin(BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Min | BinOp::Max),
                args,
                ..
            }
            | Op::Prim { prim: Prim::Un(UnOp::Neg), args, .. } => {
                let ok = dty == real && args.iter().all(|a| same_or_vector(a) && base(fx.irf.ty(*a)) == real);
                ok.then_some(Lanes::Vector)
            }
            _ => None,
        }
    }

    /// A full tile as vectors: each row of the tile is one vector of `cols`
    /// lanes (LLVM splits it into the target's registers), the body emitted
    /// once per row with the column index at the tile's first column; values
    /// that vary along the row become vectors as [`Self::lane_plan`] found.
    /// The same arithmetic as [`Self::jam`] per element, in the same order.
    #[allow(clippy::too_many_arguments)]
    fn jam_lanes(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        pcx: &PartCx<'ctx, 'a>,
        states: &[OpState<'ctx, 'a>],
        plan: &LanePlan,
        panel: Option<&Panel<'ctx>>,
        outer: &[IntValue<'ctx>],
        r0: IntValue<'ctx>,
        c0: IntValue<'ctx>,
        (rows, cols): Tile,
        mask: Option<VectorValue<'ctx>>,
    ) -> R<()> {
        let part = pcx.part;
        let bug = |what: &str| CodegenError::Bug(format!("a register tile: {what}"));
        let TileFold { frame, elem, data, pre, q, fun, neutral, .. } = tile_fold(pcx, states)?;
        let FoldFn::Prim(Prim::Bin(fold_op)) = *fun else { return Err(bug("not a binary primitive fold")) };
        let lanes = u32::try_from(cols).map_err(|_| bug("too many columns"))?;
        let vty = self.mem_ty(elem).into_float_type().vec_type(lanes);
        let start = self.value(fx, neutral)?;
        let start = self.splat(start, lanes)?;
        let mut row_state = Vec::with_capacity(rows);
        for ii in 0..rows {
            let i = self.b.build_int_add(r0, self.const_i64(ii as i64), "ti")?;
            let off = self.bind_element(fx, part, &frame, outer, i, c0)?;
            let mut vectors = HashMap::default();
            for s in pre {
                self.lane_stmt(fx, plan, &mut vectors, s, lanes, mask)?;
            }
            let bound = self.snapshot(fx, part.scalars.iter().flatten().chain(&part.offset).copied(), pre);
            let slot = self.alloca(fx, vty.into(), "tile.acc")?;
            self.b.build_store(slot, start)?;
            row_state.push((off, bound, vectors, slot));
        }
        let (l, k) = self.open_fold_loop(fx, q)?;
        let k_narrow = self.as_int(k)?;
        for (_, bound, row_vectors, slot) in &row_state {
            rebind(fx, bound, q, k, k_narrow);
            let mut vectors = row_vectors.clone();
            for s in &q.body.stmts {
                match panel.and_then(|p| Some((p, p.loads.iter().position(|l| s.defs.first() == Some(l))?))) {
                    Some((p, at)) => {
                        let x = self.panel_row(p, k, at, vty)?;
                        vectors.insert(s.defs[0], x);
                    }
                    None => self.lane_stmt(fx, plan, &mut vectors, s, lanes, mask)?,
                }
            }
            let y = self.lane_value(fx, &vectors, q.body.yields[0], lanes)?;
            let acc = self.b.build_load(vty, *slot, "acc")?.into_vector_value();
            // `acc op y`, lane by lane: each element's fold in the order of `k`.
            let next = self.vector_bin(fold_op, acc, y)?;
            if !self.exact_folds && fold_op == BinOp::Add {
                // `acc + x * y` may become one FMA (the default leaves a
                // fold's rounding open, as gcc -O3 contracts C's): twice the
                // multiply-adds per cycle where FMA shares the adders' ports.
                const ALLOW_CONTRACT: u32 = 32;
                for v in [y, next] {
                    if let Some(i) = v.as_instruction_value()
                        && matches!(
                            i.get_opcode(),
                            inkwell::values::InstructionOpcode::FMul | inkwell::values::InstructionOpcode::FAdd
                        )
                    {
                        i.set_fast_math_flags(ALLOW_CONTRACT);
                    }
                }
            }
            self.b.build_store(*slot, next)?;
        }
        self.close_loop(l)?;
        for (off, _, _, slot) in &row_state {
            let acc = self.b.build_load(vty, *slot, "tile.result")?;
            let p = self.gep(self.mem_ty(elem), data, &[*off], "tile.row")?;
            if let Some(mask) = mask {
                let store = self.intrinsic("llvm.masked.store", &[vty.into(), self.ptr().into()])?;
                let align = self.i32().const_int(u64::from(elem_align(elem)), false);
                self.call(store, &[acc.into(), p.into(), align.into(), mask.into()])?;
                continue;
            }
            let st = self.b.build_store(p, acc)?;
            st.set_alignment(elem_align(elem)).map_err(|e| CodegenError::Bug(format!("alignment: {e}")))?;
            self.tag_elem(Some(st), elem)?;
        }
        Ok(())
    }

    /// One statement of a lane-planned tile: a vector operation where the plan
    /// says so, else the scalar statement (at the first column). `mask`: the
    /// lanes an edge tile may read (its vector reads are masked loads, zero
    /// in the other lanes).
    fn lane_stmt(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        plan: &LanePlan,
        vectors: &mut HashMap<ValueId, VectorValue<'ctx>>,
        s: &'a Stmt,
        lanes: u32,
        mask: Option<VectorValue<'ctx>>,
    ) -> R<()> {
        let bug = |what: &str| CodegenError::Bug(format!("a lane-planned tile: {what}"));
        let vector = s.defs.first().is_some_and(|d| plan.get(d) == Some(&Lanes::Vector));
        if !vector {
            return self.stmt(fx, s, &HashSet::default());
        }
        let Op::Prim { prim, args, .. } = &s.op else { return Err(bug("a vector statement that is no primitive")) };
        let d = s.defs[0];
        let b = base(fx.irf.ty(d));
        let v = match prim {
            Prim::IdxSel => {
                let off = self.index_i64(fx, args[0])?;
                let data = match fx.data.get(&args[1]) {
                    Some(p) => *p,
                    None => {
                        let a = self.value(fx, args[1])?.into_pointer_value();
                        self.data_ptr(a)?
                    }
                };
                let p = self.gep(self.mem_ty(b), data, &[off], "lanes")?;
                let vty = self.mem_ty(b).into_float_type().vec_type(lanes);
                if let Some(mask) = mask {
                    let load = self.intrinsic("llvm.masked.load", &[vty.into(), self.ptr().into()])?;
                    let align = self.i32().const_int(u64::from(elem_align(b)), false);
                    let x = self
                        .call(load, &[p.into(), align.into(), mask.into(), vty.const_zero().into()])?
                        .ok_or_else(|| bug("a masked load without a value"))?;
                    vectors.insert(s.defs[0], x.into_vector_value());
                    return Ok(());
                }
                let x = self.b.build_load(vty, p, "lanes")?;
                let inst = x.as_instruction_value();
                if let Some(i) = inst {
                    i.set_alignment(elem_align(b)).map_err(|e| CodegenError::Bug(format!("alignment: {e}")))?;
                }
                self.tag_elem(inst, b)?;
                x.into_vector_value()
            }
            Prim::Bin(op) => {
                let x = self.lane_value(fx, vectors, args[0], lanes)?;
                let y = self.lane_value(fx, vectors, args[1], lanes)?;
                self.vector_bin(*op, x, y)?
            }
            Prim::Un(UnOp::Neg) => {
                let x = self.lane_value(fx, vectors, args[0], lanes)?;
                self.b.build_float_neg(x, "fneg")?
            }
            _ => return Err(bug("an unplanned primitive")),
        };
        vectors.insert(d, v);
        Ok(())
    }

    /// Value `v` as a vector of `lanes`: its vector, or its scalar in every lane.
    fn lane_value(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        vectors: &HashMap<ValueId, VectorValue<'ctx>>,
        v: ValueId,
        lanes: u32,
    ) -> R<VectorValue<'ctx>> {
        match vectors.get(&v) {
            Some(x) => Ok(*x),
            None => {
                let x = self.value(fx, v)?;
                self.splat(x, lanes)
            }
        }
    }

    /// `x` (a floating-point value or an integer) in every one of `lanes` lanes.
    fn splat(&mut self, x: BasicValueEnum<'ctx>, lanes: u32) -> R<VectorValue<'ctx>> {
        let vty = match x {
            BasicValueEnum::IntValue(i) => i.get_type().vec_type(lanes),
            _ => x.into_float_value().get_type().vec_type(lanes),
        };
        let one = self.b.build_insert_element(vty.get_poison(), x, self.i32().const_zero(), "splat")?;
        let mask = self.i32().vec_type(lanes).const_zero();
        Ok(self.b.build_shuffle_vector(one, vty.get_poison(), mask, "splat")?)
    }

    /// `x op y` lane by lane, as [`Self::scalar_bin`] on each pair of
    /// floating-point lanes.
    fn vector_bin(&mut self, op: BinOp, x: VectorValue<'ctx>, y: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        let bld = &self.b;
        Ok(match op {
            BinOp::Add => bld.build_float_add(x, y, "vfadd")?,
            BinOp::Sub => bld.build_float_sub(x, y, "vfsub")?,
            BinOp::Mul => bld.build_float_mul(x, y, "vfmul")?,
            BinOp::Div => bld.build_float_div(x, y, "vfdiv")?,
            BinOp::Min => {
                let lt = bld.build_float_compare(FloatPredicate::OLT, x, y, "lt")?;
                bld.build_select(lt, x, y, "vfmin")?.into_vector_value()
            }
            BinOp::Max => {
                let gt = bld.build_float_compare(FloatPredicate::OGT, x, y, "gt")?;
                bld.build_select(gt, x, y, "vfmax")?.into_vector_value()
            }
            other => return Err(CodegenError::Bug(format!("`{}` on vector lanes", other.symbol()))),
        })
    }
}

/// An integer vector the IR knows as a constant (the IR's: a thread's chunk
/// function loads even constant bounds from its environment).
fn const_ints(fx: &Fx<'_, '_>, v: Option<ValueId>) -> Option<Vec<i64>> {
    v.and_then(|v| fx.consts.get(&v).and_then(|c| c.as_int_vec()))
}

/// Whether the rows / columns of a tiled part of rank `n` may end in a
/// partial tile: unless the axis's extent is known and a multiple of the
/// tile's.
pub(crate) fn partial_tiles(fx: &Fx<'_, '_>, part: &Part, n: usize) -> [bool; 2] {
    let bounds = (const_ints(fx, Some(part.lower)), const_ints(fx, Some(part.upper)), const_ints(fx, part.step));
    [n - 2, n - 1].map(|d| match &bounds {
        (Some(lo), Some(hi), Some(step)) if step[d] > 0 => (hi[d] - lo[d]).rem_euclid(step[d]) != 0,
        _ => true,
    })
}

/// What the tile emitters read of a part [`Emitter::jam_tile`] accepted.
struct TileFold<'ctx, 'a> {
    frame: Frame<'ctx>,
    elem: BaseType,
    data: PointerValue<'ctx>,
    /// The part's statements before the fold.
    pre: &'a [Stmt],
    /// What the fold defines.
    fold: ValueId,
    /// The fold's part.
    q: &'a Part,
    fun: &'a FoldFn,
    neutral: ValueId,
}

fn tile_fold<'ctx, 'a>(pcx: &PartCx<'ctx, 'a>, states: &[OpState<'ctx, 'a>]) -> R<TileFold<'ctx, 'a>> {
    let bug = |what: &str| CodegenError::Bug(format!("a register tile: {what}"));
    let [OpState::Gen { frame, elem, result: GenResult::Eager { data, .. }, .. }] = states else {
        return Err(bug("not one genarray"));
    };
    let (fold_stmt, pre) = pcx.part.body.stmts.split_last().ok_or_else(|| bug("no fold"))?;
    let Op::With(fw) = &fold_stmt.op else { return Err(bug("no fold")) };
    let (Some(q), Some(WithOp::Fold { fun, neutral, .. })) = (fw.parts.first(), fw.ops.first()) else {
        return Err(bug("no fold"));
    };
    Ok(TileFold {
        frame: frame.clone(),
        elem: *elem,
        data: *data,
        pre,
        fold: fold_stmt.defs[0],
        q,
        fun,
        neutral: *neutral,
    })
}

/// The selections of a lane-planned tile's fold body that [`Emitter::open_panel`]
/// packs: vectors read side by side that do not depend on the tile's row.
fn panel_loads(pcx: &PartCx<'_, '_>, states: &[OpState<'_, '_>], plan: &LanePlan) -> R<Vec<ValueId>> {
    let TileFold { pre, q, .. } = tile_fold(pcx, states)?;
    let part = pcx.part;
    let Some(scalars) = &part.scalars else { return Ok(Vec::new()) };
    let [.., row, _] = scalars.as_slice() else { return Ok(Vec::new()) };
    // Values that depend on the row.
    let mut by_row: HashSet<ValueId> = [*row].into_iter().chain(part.offset).collect();
    let mut loads = Vec::new();
    for (in_fold, s) in pre.iter().map(|s| (false, s)).chain(q.body.stmts.iter().map(|s| (true, s))) {
        if s.op.operands().iter().any(|v| by_row.contains(v)) {
            by_row.extend(s.defs.iter().copied());
        } else if in_fold
            && matches!(s.op, Op::Prim { prim: Prim::IdxSel, .. })
            && plan.get(&s.defs[0]) == Some(&Lanes::Vector)
        {
            loads.push(s.defs[0]);
        }
    }
    Ok(loads)
}

/// Restores an element's bindings (`bound`, from [`Emitter::snapshot`]) and
/// binds the fold's index `k` for its step.
fn rebind<'ctx>(fx: &mut Fx<'ctx, '_>, bound: &Bound<'ctx>, q: &Part, k: IntValue<'ctx>, k_narrow: IntValue<'ctx>) {
    for (v, x, wide) in bound {
        fx.vals.insert(*v, *x);
        if let Some(wv) = wide {
            fx.wide.insert(*v, *wv);
        }
    }
    if let Some(ss) = &q.scalars {
        fx.vals.insert(ss[0], k_narrow.into());
        fx.wide.insert(ss[0], k);
    }
}

/// Bindings saved by [`Emitter::snapshot`]: value, its code, its exact `i64`.
type Bound<'ctx> = Vec<(ValueId, BasicValueEnum<'ctx>, Option<IntValue<'ctx>>)>;

/// The alignment of an element of base type `b` (a tile's float or double):
/// its width.
fn elem_align(b: BaseType) -> u32 {
    super::elem_bytes(b) as u32
}

//! Register tiles: a part whose generator has `step` = `width` = a tile on its
//! last two axes (what `compiler_core::opt::tile` gives a fold inside a
//! two-dimensional with-loop) runs each full tile as one loop over the fold's
//! index with an accumulator per element of the tile:
//!
//! ```text
//! for each tile (r0, c0):                       // the outer loops
//!   if the tile is full:
//!     acc[ii][jj] = neutral                     // stack slots: registers after SROA
//!     for k in lo..hi:
//!       for ii, jj: acc[ii][jj] = acc[ii][jj] + body(r0 + ii, c0 + jj, k)
//!     for ii, jj: c[r0 + ii, c0 + jj] = acc[ii][jj]
//!   else: the tile's indices one by one, as any part
//! ```
//!
//! The copies of the body are straight-line scalar code, so LLVM's SLP
//! vectoriser turns the accumulators into vector registers and each value the
//! body loads serves a row or a column of the tile. Every accumulator folds in
//! the order of `k` from the neutral element, exactly as the untiled code.
//!
//! Only parts whose bodies are scalar straight-line code before the fold and
//! inside it, and whose fold is one primitive over one axis, are tiled (the
//! conditions [`Emitter::jam_tile`] checks); any other part with such a
//! generator runs index by index.

use compiler_core::HashSet;

use compiler_core::ir::{FoldFn, Op, Stmt, ValueId, WithOp};
use compiler_core::sema::hir::Prim;
use inkwell::IntPredicate;
use inkwell::values::{BasicValueEnum, IntValue};

use super::withloop::{Index, OpState, PartCx, Result as GenResult};
use super::{Emitter, Fx, R, scalar_repr};
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
        let ints = |v: Option<ValueId>| v.and_then(|v| fx.consts.get(&v).and_then(|c| c.as_int_vec()));
        let (step, width) = (ints(part.step)?, ints(part.width)?);
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
        let bug = |what: &str| CodegenError::Bug(format!("a register tile: {what}"));
        let [OpState::Gen { frame, elem, result: GenResult::Eager { data, .. }, .. }] = states else {
            return Err(bug("not one genarray"));
        };
        let (frame, elem, data) = (frame.clone(), *elem, *data);
        let (fold_stmt, pre) = part.body.stmts.split_last().ok_or_else(|| bug("no fold"))?;
        let Op::With(fw) = &fold_stmt.op else { return Err(bug("no fold")) };
        let (q, WithOp::Fold { fun, neutral, .. }) = (&fw.parts[0], &fw.ops[0]) else {
            return Err(bug("no fold"));
        };
        let ty = fx.irf.ty(fold_stmt.defs[0]).clone();
        let yty = fx.irf.ty(q.body.yields[0]).clone();
        let llty = self.value_ty(&ty);
        let start = self.value(fx, *neutral)?;
        // Per element: its offset, what the statements before the fold bound,
        // and its accumulator.
        let mut elems = Vec::with_capacity(rows * cols);
        for ii in 0..rows {
            for jj in 0..cols {
                let i = self.b.build_int_add(r0, self.const_i64(ii as i64), "ti")?;
                let j = self.b.build_int_add(c0, self.const_i64(jj as i64), "tj")?;
                let mut idx = outer.to_vec();
                idx.extend([i, j]);
                let index = Index::Static(idx.clone());
                let off = self.frame_offset(fx, &index, &frame)?;
                if let Some(ss) = &part.scalars {
                    for (sv, x) in ss.iter().zip(&idx) {
                        let narrow = self.as_int(*x)?;
                        fx.vals.insert(*sv, narrow.into());
                        fx.wide.insert(*sv, *x);
                    }
                }
                if let Some(o) = part.offset {
                    let narrow = self.as_int(off)?;
                    fx.vals.insert(o, narrow.into());
                    fx.wide.insert(o, off);
                }
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
        let lo = self.value(fx, q.lower)?.into_pointer_value();
        let hi = self.value(fx, q.upper)?.into_pointer_value();
        let lty = fx.irf.ty(q.lower).clone();
        let uty = fx.irf.ty(q.upper).clone();
        let lo = self.int_elem(lo, &lty, self.const_i64(0))?;
        let hi = self.int_elem(hi, &uty, self.const_i64(0))?;
        let (l, k) = self.open_loop(fx, lo, hi)?;
        let k_narrow = self.as_int(k)?;
        let loc = fx.loc;
        for (_, bound, slot) in &elems {
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
            for s in &q.body.stmts {
                self.stmt(fx, s, &HashSet::default())?;
            }
            let y = *fx.vals.get(&q.body.yields[0]).ok_or_else(|| bug("the fold yields nothing"))?;
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

    /// The bindings of `index` and of what `stmts` define, with their exact
    /// `i64`s where they have them.
    fn snapshot(
        &self,
        fx: &Fx<'ctx, 'a>,
        index: impl Iterator<Item = ValueId>,
        stmts: &[Stmt],
    ) -> Vec<(ValueId, BasicValueEnum<'ctx>, Option<IntValue<'ctx>>)> {
        index
            .chain(stmts.iter().flat_map(|s| s.defs.iter().copied()))
            .filter_map(|v| fx.vals.get(&v).map(|x| (v, *x, fx.wide.get(&v).copied())))
            .collect()
    }

    /// One tile of a part [`Self::jam_tile`] accepted: its rows and columns
    /// (`start..stop`, clipped to the part's bounds) and `outer`, the indices
    /// of the axes before them. A full tile runs jammed, a partial one index
    /// by index.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn tile(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        pcx: &PartCx<'ctx, 'a>,
        states: &mut [OpState<'ctx, 'a>],
        outer: &[IntValue<'ctx>],
        (r0, r_stop): (IntValue<'ctx>, IntValue<'ctx>),
        (c0, c_stop): (IntValue<'ctx>, IntValue<'ctx>),
        t @ (rows, cols): Tile,
    ) -> R<()> {
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
        self.jam(fx, pcx, states, outer, r0, c0, t)?;
        self.b.build_unconditional_branch(join_bb)?;
        self.b.position_at_end(edge_bb);
        let (lr, i) = self.open_loop(fx, r0, r_stop)?;
        let (lc, j) = self.open_loop(fx, c0, c_stop)?;
        let mut idx = outer.to_vec();
        idx.extend([i, j]);
        self.iteration(fx, pcx, states, &Index::Static(idx))?;
        self.close_loop(lc)?;
        self.close_loop(lr)?;
        self.b.build_unconditional_branch(join_bb)?;
        self.b.position_at_end(join_bb);
        Ok(())
    }
}

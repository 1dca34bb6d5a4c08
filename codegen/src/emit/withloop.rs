//! With-loops as loop nests.
//!
//! A with-loop runs its parts in order; each part's generator becomes a loop
//! nest, one loop per axis (two for a strided axis: blocks of `step`, `width`
//! indices each), innermost axis fastest, so a part over a dense range is a
//! plain counted loop LLVM can vectorise. The body runs once per index with the
//! index bound as scalars, a vector and/or the row-major offset (seed 001), and
//! its values are written into the results or combined into the folds:
//!
//! ```text
//! %r = with { part [0] <= iv < [n]        for (i = 0; i < n; i++) {
//!        scalars [%i] offset %o {      ⇒      o = i;  x = a[o] * 2.0;
//!        %x = … } } genarray([n])              r->data[o] = x;  }
//! ```
//!
//! Results are allocated before the loops when the cells' shape is known
//! (statically, or from the default); otherwise at the first cell, as the
//! interpreter does. `modarray` results copy their array unless it can be
//! updated in place; `genarray` results may take over a dead argument's buffer
//! (`reuse`), both only when the reference count says no one else holds it.
//!
//! Generators whose length is only known at run time (shape-generic code) run
//! as an odometer over index buffers instead of a loop nest. A flat part
//! (`compiler_core::opt::util::flat_part`: over all of its frame, reading
//! only its offset) runs as one loop over the offsets instead, whatever its
//! generator's length ([`runs_flat`]).
//!
//! Scans and filters (L0) only store what each index yields while the parts
//! run; their result comes from one pass over the frame in row-major order
//! afterwards (`scan.rs`).
//!
//! Parallel with-loops: when the parts' bodies are pure and call no functions,
//! the results are allocated up front, and every fold combines with a
//! primitive that has a known identity, each part's loop nest is outlined
//! into a chunk function and the runtime splits its outermost axis over threads
//! (`parallel.rs` in the runtime). Chunk 0 starts each fold from its neutral
//! element, the others from the operation's identity, and the partial results
//! are combined in chunk order, so one thread computes exactly what the
//! interpreter does; several threads reassociate floating-point folds. A
//! parallel part that writes and reads more than the caches hold stores its
//! cells non-temporally (`parallel.rs`, `Emitter::part_streams`); its
//! innermost loop runs up to a 64-byte boundary of its result first, then
//! on from there with the stores aligned ([`Emitter::aligned_innermost`]).
//!
//! ```text
//! for (i = 1; i < 1999; i++) {                  // a 2000x2000 relaxation
//!   for (j = 1; j < 1 + gap(i); j++) b[i][j] = …;              // up to 64 B
//!   assume(&b[i][1 + gap(i)] % 64 == 0);
//!   for (j = 1 + gap(i); j < 1999; j++) b[i][j] = …;   // movntpd, aligned
//! }
//! ```

use compiler_core::HashSet;

use compiler_core::interp::ops::BinOp;
use compiler_core::ir::{FoldFn, Op, Part, Stmt, ValueId, With, WithOp};
use compiler_core::sema::hir::Prim;
use compiler_core::sema::ty::Ty;
use compiler_core::span::Span;
use compiler_core::syntax::ast::BaseType;
use inkwell::IntPredicate;
use inkwell::basic_block::BasicBlock;
use inkwell::values::{BasicValue, BasicValueEnum, IntValue, PhiValue, PointerValue};

use super::ops::{Ew, static_extent, static_rank};
use super::scan::{FilterState, ScanState};
use super::{Emitter, Fx, R, Trips, base, elem_code, scalar_repr};
use crate::CodegenError;
use crate::rt;

/// The frame of an operator: its extents as `i64`s.
#[derive(Clone)]
pub(crate) struct Frame<'ctx> {
    /// Number of axes.
    pub len: IntValue<'ctx>,
    /// The extents in memory.
    pub buf: PointerValue<'ctx>,
    /// The extents as values, when the number of axes is static.
    pub ext: Option<Vec<IntValue<'ctx>>>,
}

/// Where a genarray's result lives.
#[derive(Clone, Copy)]
pub(crate) enum Result<'ctx> {
    /// Allocated before the loops.
    Eager { arr: PointerValue<'ctx>, data: PointerValue<'ctx>, cell_len: IntValue<'ctx> },
    /// Allocated at the first cell; the slot holds the array or null.
    Lazy { slot: PointerValue<'ctx> },
}

/// Per operator, what the loop body writes to or combines into.
pub(crate) enum OpState<'ctx, 'a> {
    Gen {
        frame: Frame<'ctx>,
        elem: BaseType,
        result: Result<'ctx>,
        /// The static shape of every cell (writes need no shape check).
        cell_static: Option<Vec<usize>>,
        /// The cell type for a with-loop that computes no cell.
        cell_ty: Option<Ty>,
        default: Option<(BasicValueEnum<'ctx>, Ty)>,
    },
    Mod {
        frame: Frame<'ctx>,
        elem: BaseType,
        arr: PointerValue<'ctx>,
        data: PointerValue<'ctx>,
        array_ty: Ty,
    },
    Fold {
        /// A stack slot holding the accumulator (owned).
        slot: PointerValue<'ctx>,
        ty: Ty,
        fun: &'a FoldFn,
        partial: Vec<(BasicValueEnum<'ctx>, Ty)>,
        fix: Option<(BasicValueEnum<'ctx>, Ty)>,
        /// A stack slot: the fixpoint was reached.
        done: Option<PointerValue<'ctx>>,
    },
    Scan(Box<ScanState<'ctx, 'a>>),
    Filter(Box<FilterState<'ctx>>),
}

impl<'ctx> OpState<'ctx, '_> {
    fn frame(&self) -> Option<&Frame<'ctx>> {
        match self {
            OpState::Gen { frame, .. } | OpState::Mod { frame, .. } => Some(frame),
            OpState::Scan(st) => Some(&st.frame),
            OpState::Filter(st) => Some(&st.frame),
            OpState::Fold { .. } => None,
        }
    }
}

/// An index: its components as values (static length) or in a buffer.
#[derive(Clone)]
pub(crate) enum Index<'ctx> {
    Static(Vec<IntValue<'ctx>>),
    Dynamic {
        buf: PointerValue<'ctx>,
        n: IntValue<'ctx>,
    },
    /// A flat part's row-major offset (see [`compiler_core::opt::util::flat_part`]).
    Flat(IntValue<'ctx>),
}

/// An open counted loop (see [`Emitter::open_loop`]).
pub(crate) struct OpenLoop<'ctx> {
    phi: PhiValue<'ctx>,
    hi: IntValue<'ctx>,
    body: BasicBlock<'ctx>,
    exit: BasicBlock<'ctx>,
}

/// From here to the end of the with-loop, the body's reads of `array` read
/// the result `arr` (whose elements are `data`) instead; `reads_of_result`
/// keeps what to restore.
fn read_result_for<'ctx>(
    fx: &mut Fx<'ctx, '_>,
    reads_of_result: &mut Vec<(ValueId, Option<BasicValueEnum<'ctx>>)>,
    array: ValueId,
    arr: PointerValue<'ctx>,
    data: PointerValue<'ctx>,
) {
    reads_of_result.push((array, fx.vals.get(&array).copied()));
    fx.vals.insert(array, arr.into());
    fx.data.insert(array, data);
}

/// A generator's vectors, loaded.
pub(crate) struct Generator<'ctx> {
    pub lo: Vec<IntValue<'ctx>>,
    pub hi: Vec<IntValue<'ctx>>,
    pub step: Vec<IntValue<'ctx>>,
    pub width: Vec<IntValue<'ctx>>,
    /// Per axis: every index between the bounds is covered.
    pub dense: Vec<bool>,
}

/// Everything one iteration of a part needs.
pub(crate) struct PartCx<'ctx, 'a> {
    pub w: &'a With,
    pub part: &'a Part,
    pub s: &'a Stmt,
    /// Where the index vector lives across iterations (a stack slot).
    pub iv_slot: Option<PointerValue<'ctx>>,
    /// `first_match`: covered indices of the primary frame.
    pub mask: Option<PointerValue<'ctx>>,
    /// Where a fixpoint fold that is done jumps to.
    pub end: Option<BasicBlock<'ctx>>,
    /// The part runs in a chunk function whose stores stream past the caches
    /// (`parallel.rs`, `Emitter::part_streams`): its innermost loop starts on
    /// a 64-byte boundary of its one result ([`Emitter::aligned_innermost`]).
    pub stream: bool,
}

impl<'ctx, 'a> Emitter<'ctx, 'a> {
    /// Opens `for i in lo..hi`; the builder is in the loop body; returns `i`.
    pub fn open_loop(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        lo: IntValue<'ctx>,
        hi: IntValue<'ctx>,
    ) -> R<(OpenLoop<'ctx>, IntValue<'ctx>)> {
        let pre = self.b.get_insert_block().ok_or_else(|| CodegenError::Bug("no insert block".into()))?;
        let body = self.ctx.append_basic_block(fx.func, "wl.loop");
        let exit = self.ctx.append_basic_block(fx.func, "wl.exit");
        let nonempty = self.b.build_int_compare(IntPredicate::SLT, lo, hi, "nonempty")?;
        self.b.build_conditional_branch(nonempty, body, exit)?;
        self.b.position_at_end(body);
        let phi = self.b.build_phi(self.i64(), "i")?;
        phi.add_incoming(&[(&lo, pre)]);
        let i = phi.as_basic_value().into_int_value();
        Ok((OpenLoop { phi, hi, body, exit }, i))
    }

    /// Closes a loop [`Self::open_loop`] opened; the builder continues after it.
    pub fn close_loop(&mut self, l: OpenLoop<'ctx>) -> R<()> {
        let i = l.phi.as_basic_value().into_int_value();
        let next = self.b.build_int_add(i, self.const_i64(1), "i.next")?;
        let more = self.b.build_int_compare(IntPredicate::SLT, next, l.hi, "more")?;
        let latch = self.b.get_insert_block().ok_or_else(|| CodegenError::Bug("no insert block".into()))?;
        l.phi.add_incoming(&[(&next, latch)]);
        let back = self.b.build_conditional_branch(more, l.body, l.exit)?;
        self.loop_hints(back);
        self.b.position_at_end(l.exit);
        Ok(())
    }

    /// Where errors about a part of statement `s` (its generator, its cells)
    /// are reported: at `inner` when it is user code and the statement is
    /// blamed where it stands, else where the statement's errors go.
    pub fn sub_loc(&mut self, s: &Stmt, inner: Span, stmt_loc: PointerValue<'ctx>) -> PointerValue<'ctx> {
        if stmt_loc.is_null() || s.blame_span().is_none() || self.sources.is_library(inner) {
            stmt_loc
        } else {
            self.loc(Some(inner))
        }
    }

    /// A fresh array of `frame` cells of shape `cell_shape` (zero-filled when
    /// `zero`), failing on allocation errors.
    pub(super) fn alloc_frame(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        elem: BaseType,
        frame: &Frame<'ctx>,
        cell_rank: IntValue<'ctx>,
        cell_shape: PointerValue<'ctx>,
        zero: bool,
    ) -> R<PointerValue<'ctx>> {
        let code = self.i32().const_int(elem_code(elem), false);
        let a = self
            .call(
                self.rt.alloc_frame,
                &[
                    fx.ctxp.into(),
                    code.into(),
                    frame.len.into(),
                    frame.buf.into(),
                    cell_rank.into(),
                    cell_shape.into(),
                    self.i32().const_int(zero as u64, false).into(),
                ],
            )?
            .ok_or_else(|| CodegenError::Bug("alloc".into()))?
            .into_pointer_value();
        self.check_error(fx)?;
        Ok(a)
    }

    /// Fails with a message template over two numbers when `bad` holds.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fail_ints_if(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        bad: IntValue<'ctx>,
        loc: PointerValue<'ctx>,
        code: &str,
        template: &str,
        a: IntValue<'ctx>,
        b: IntValue<'ctx>,
    ) -> R<()> {
        if bad.get_zero_extended_constant() == Some(0) {
            return Ok(());
        }
        let fail = self.ctx.append_basic_block(fx.func, "wl.bad");
        let ok = self.ctx.append_basic_block(fx.func, "wl.ok");
        self.b.build_conditional_branch(bad, fail, ok)?;
        self.b.position_at_end(fail);
        let code = self.cstring(code);
        let template = self.cstring(template);
        self.call(self.rt.fail_ints, &[fx.ctxp.into(), loc.into(), code.into(), template.into(), a.into(), b.into()])?;
        self.b.build_unconditional_branch(fx.fail_bb)?;
        self.b.position_at_end(ok);
        Ok(())
    }

    /// A scratch buffer of `n` `i64`s on the heap (a runtime array the caller
    /// drops with `wl_dec`); returns the array and its data.
    fn scratch(&mut self, fx: &Fx<'ctx, 'a>, n: IntValue<'ctx>) -> R<(PointerValue<'ctx>, PointerValue<'ctx>)> {
        let shape = self.i64_buffer(fx, 1, "scratch.shape")?;
        self.b.build_store(shape, n)?;
        let arr = self.alloc_array(fx, BaseType::Long, self.const_i64(1), shape)?;
        let data = self.data_ptr(arr)?;
        Ok((arr, data))
    }

    pub(crate) fn buf_get(&mut self, buf: PointerValue<'ctx>, i: IntValue<'ctx>) -> R<IntValue<'ctx>> {
        let p = self.gep(self.i64(), buf, &[i], "bufp")?;
        Ok(self.b.build_load(self.i64(), p, "buf")?.into_int_value())
    }

    pub(crate) fn buf_set(&mut self, buf: PointerValue<'ctx>, i: IntValue<'ctx>, v: IntValue<'ctx>) -> R<()> {
        let p = self.gep(self.i64(), buf, &[i], "bufp")?;
        self.b.build_store(p, v)?;
        Ok(())
    }

    /// The frame a shape vector describes (failing on negative extents).
    pub(super) fn shape_frame(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        shape: ValueId,
        loc: PointerValue<'ctx>,
        what: &str,
        scratch: &mut Vec<PointerValue<'ctx>>,
    ) -> R<Frame<'ctx>> {
        let sty = fx.irf.ty(shape).clone();
        let sv = self.value(fx, shape)?.into_pointer_value();
        let len = self.vec_len(sv, &sty)?;
        let template = format!("{what} shape has a negative extent {{a}}");
        match static_extent(&sty, 0) {
            Some(k) => {
                let buf = self.i64_buffer(fx, k as u32, "frame")?;
                let mut ext = Vec::with_capacity(k);
                for d in 0..k {
                    let e = self.int_elem(sv, &sty, self.const_i64(d as i64))?;
                    let neg = self.b.build_int_compare(IntPredicate::SLT, e, self.const_i64(0), "neg")?;
                    self.fail_ints_if(fx, neg, loc, "R0013", &template, e, e)?;
                    self.buf_set(buf, self.const_i64(d as i64), e)?;
                    ext.push(e);
                }
                Ok(Frame { len, buf, ext: Some(ext) })
            }
            None => {
                let (arr, buf) = self.scratch(fx, len)?;
                scratch.push(arr);
                self.for_range(fx, Trips::Few, self.const_i64(0), len, &mut |e, fx, d| {
                    let x = e.int_elem(sv, &sty, d)?;
                    let neg = e.b.build_int_compare(IntPredicate::SLT, x, e.const_i64(0), "neg")?;
                    e.fail_ints_if(fx, neg, loc, "R0013", &template, x, x)?;
                    e.buf_set(buf, d, x)
                })?;
                Ok(Frame { len, buf, ext: None })
            }
        }
    }

    /// The frame of an array: its shape.
    fn array_frame(&mut self, a: PointerValue<'ctx>, ty: &Ty) -> R<Frame<'ctx>> {
        let len = self.rank_of(a, ty)?;
        let buf = self.shape_ptr(a)?;
        let ext = match static_rank(ty) {
            Some(r) => Some((0..r).map(|d| self.extent_of(a, ty, d)).collect::<R<Vec<_>>>()?),
            None => None,
        };
        Ok(Frame { len, buf, ext })
    }

    /// The product of a frame's extents from axis `from` on.
    pub(super) fn frame_product(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        f: &Frame<'ctx>,
        from: IntValue<'ctx>,
    ) -> R<IntValue<'ctx>> {
        if let (Some(ext), Some(k)) = (&f.ext, from.get_zero_extended_constant()) {
            let mut p = self.const_i64(1);
            for e in ext.iter().skip(k as usize) {
                p = self.b.build_int_mul(p, *e, "prod")?;
            }
            return Ok(p);
        }
        let buf = f.buf;
        self.product_range(fx, from, f.len, &mut |e, d| e.buf_get(buf, d))
    }

    /// The row-major cell number of `index` over the first axes of `f`.
    pub(crate) fn frame_offset(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        index: &Index<'ctx>,
        f: &Frame<'ctx>,
    ) -> R<IntValue<'ctx>> {
        match index {
            Index::Flat(o) => Ok(*o),
            Index::Static(idx) => {
                let mut off = self.const_i64(0);
                for (d, i) in idx.iter().enumerate() {
                    let ext = match &f.ext {
                        Some(ext) if d < ext.len() => ext[d],
                        _ => self.buf_get(f.buf, self.const_i64(d as i64))?,
                    };
                    let scaled = self.b.build_int_mul(off, ext, "off")?;
                    off = self.b.build_int_add(scaled, *i, "off")?;
                }
                Ok(off)
            }
            Index::Dynamic { buf, n } => {
                let acc = self.alloca(fx, self.i64().into(), "off")?;
                self.b.build_store(acc, self.const_i64(0))?;
                let (ib, fb) = (*buf, f.buf);
                self.for_range(fx, Trips::Few, self.const_i64(0), *n, &mut |e, _fx, d| {
                    let i = e.buf_get(ib, d)?;
                    let x = e.buf_get(fb, d)?;
                    let off = e.b.build_load(e.i64(), acc, "off")?.into_int_value();
                    let scaled = e.b.build_int_mul(off, x, "off")?;
                    let next = e.b.build_int_add(scaled, i, "off")?;
                    e.b.build_store(acc, next)?;
                    Ok(())
                })?;
                Ok(self.b.build_load(self.i64(), acc, "off")?.into_int_value())
            }
        }
    }

    /// Whether some part of `w` densely covers all of the frame `shape`
    /// describes (then a genarray needs no default fill, a scan no marks of
    /// the indices covered).
    pub(super) fn covers_frame(&self, fx: &Fx<'ctx, 'a>, w: &With, shape: ValueId) -> bool {
        let ints = |v: ValueId| fx.consts.get(&v).and_then(|c| c.as_int_vec());
        let dense = |p: &compiler_core::ir::Part| dense_part(fx, p);
        let one_part_covers = w.parts.iter().any(|p| {
            let zero_lower = ints(p.lower).is_some_and(|l| l.iter().all(|&x| x == 0));
            let full_upper = p.upper == shape || matches!((ints(p.upper), ints(shape)), (Some(a), Some(b)) if a == b);
            zero_lower && full_upper && dense(p)
        });
        if one_part_covers {
            return true;
        }
        // Dense parts with constant bounds (what folding leaves of a composed
        // stencil: border strips around an interior) may tile the frame together.
        let Some(frame) = ints(shape) else { return false };
        let boxes: Option<Vec<(Vec<i64>, Vec<i64>)>> =
            w.parts.iter().map(|p| if dense(p) { Some((ints(p.lower)?, ints(p.upper)?)) } else { None }).collect();
        boxes.is_some_and(|b| compiler_core::opt::util::boxes_cover(&b, &frame))
    }

    // ------------------------------------------------------------ the with-loop

    pub fn with_loop(&mut self, fx: &mut Fx<'ctx, 'a>, s: &'a Stmt, w: &'a With, moved: &HashSet<ValueId>) -> R<()> {
        let loc = fx.loc;
        let mut scratch: Vec<PointerValue<'ctx>> = Vec::new();
        let mut states: Vec<OpState<'ctx, 'a>> = Vec::with_capacity(w.ops.len());
        // Arrays updated in place whose reads in the body read the result instead (restored after).
        let mut reads_of_result: Vec<(ValueId, Option<BasicValueEnum<'ctx>>)> = Vec::new();
        for (k, op) in w.ops.iter().enumerate() {
            let d = s.defs[k];
            let dty = fx.irf.ty(d).clone();
            match op {
                WithOp::Genarray { shape, default } => {
                    let frame = self.shape_frame(fx, *shape, loc, "genarray", &mut scratch)?;
                    let elem = base(&dty);
                    let default = match default {
                        Some(v) => Some((self.value(fx, *v)?, fx.irf.ty(*v).clone())),
                        None => None,
                    };
                    let cell_static = self.static_cell(fx, w, k, default.as_ref().map(|(_, t)| t));
                    let result =
                        if cell_static.is_some() || default.is_some() {
                            let full = self.covers_frame(fx, w, *shape);
                            // The body reads the array it may take over only where it
                            // writes (the reuse pass checked). Reading the result
                            // instead — the same buffer, or a copy when it was shared —
                            // LLVM sees one buffer read and written at one index and
                            // vectorises without an overlap test, which the shared
                            // buffer would fail. Not for parameters: an entry point's
                            // arguments are the caller's, and copying them first would
                            // double the traffic of every call.
                            let reads_result =
                                w.reuse.get(k).copied().flatten().filter(|r| {
                                    full && cell_static.as_deref() == Some(&[]) && !fx.irf.params.contains(r)
                                });
                            let result = self.genarray_result(
                                fx,
                                w,
                                k,
                                &frame,
                                elem,
                                cell_static.as_deref(),
                                default.as_ref(),
                                (full, reads_result.is_some()),
                                moved,
                            )?;
                            if let (Some(r), Result::Eager { arr, data, .. }) = (reads_result, &result) {
                                read_result_for(fx, &mut reads_of_result, r, *arr, *data);
                            }
                            result
                        } else {
                            let slot = self.alloca(fx, self.ptr().into(), "wl.result")?;
                            self.b.build_store(slot, self.ptr().const_null())?;
                            Result::Lazy { slot }
                        };
                    states.push(OpState::Gen {
                        frame,
                        elem,
                        result,
                        cell_static,
                        cell_ty: w.cells.get(k).cloned().flatten(),
                        default,
                    });
                }
                WithOp::Modarray { array } => {
                    let aty = fx.irf.ty(*array).clone();
                    if scalar_repr(&aty) {
                        // A scalar is a rank-0 array of one element, the empty
                        // index's: the with-loop updates a box of its own, and
                        // its result is the box's element where the result is
                        // typed as a scalar (unboxed below), else the box.
                        let x = self.value(fx, *array)?;
                        let boxed = self.box_scalar(fx, x, base(&aty))?.into_pointer_value();
                        let frame = self.array_frame(boxed, &aty)?;
                        let data = self.data_ptr(boxed)?;
                        states.push(OpState::Mod { frame, elem: base(&aty), arr: boxed, data, array_ty: aty });
                        continue;
                    }
                    let a = self.value(fx, *array)?.into_pointer_value();
                    let frame = self.array_frame(a, &aty)?;
                    let arr = if w.reuse.get(k).copied().flatten() == Some(*array) {
                        let x = self.take(fx, *array, moved)?;
                        self.call(self.rt.unique, &[fx.ctxp.into(), x.into()])?
                    } else if let [part] = &w.parts[..]
                        && part.step.is_none()
                        && part.width.is_none()
                    {
                        // The part overwrites its box: copy only the rest.
                        let lo = self.value(fx, part.lower)?;
                        let hi = self.value(fx, part.upper)?;
                        self.call(self.rt.copy_outside, &[fx.ctxp.into(), a.into(), lo.into(), hi.into()])?
                    } else {
                        self.call(self.rt.copy, &[fx.ctxp.into(), a.into()])?
                    }
                    .ok_or_else(|| CodegenError::Bug("copy".into()))?
                    .into_pointer_value();
                    self.check_error(fx)?;
                    // The copy's shape is the array's: keep reading extents from `a`
                    // (the static ones are constants), but the frame buffer is the copy's.
                    let frame = Frame { buf: self.shape_ptr(arr)?, ..frame };
                    let data = self.data_ptr(arr)?;
                    if w.reuse.get(k).copied().flatten() == Some(*array) {
                        // The body reads the array it updates in place only where it
                        // writes (the reuse pass checked): it reads the result, the
                        // same buffer (or, when it was shared, a copy not yet written
                        // there). LLVM then sees one buffer read and written at one
                        // index, and vectorises without checking for overlap.
                        read_result_for(fx, &mut reads_of_result, *array, arr, data);
                    }
                    states.push(OpState::Mod { frame, elem: base(&aty), arr, data, array_ty: aty });
                }
                WithOp::Fold { fun, partial, neutral, fixpoint } => {
                    let nty = fx.irf.ty(*neutral).clone();
                    let n = self.value(fx, *neutral)?;
                    let mut temps = Vec::new();
                    let init = self.borrowed_to(fx, n, &nty, &dty, &mut temps)?;
                    if temps.is_empty() && self.counted(&dty) {
                        self.inc(init)?;
                    }
                    let slot = self.alloca(fx, self.value_ty(&dty), "wl.acc")?;
                    self.b.build_store(slot, init)?;
                    let partial = self.typed_values(fx, partial)?;
                    let (fix, done) = match fixpoint {
                        Some(x) => {
                            let xv = (self.value(fx, *x)?, fx.irf.ty(*x).clone());
                            let done = self.alloca(fx, self.ctx.bool_type().into(), "wl.done")?;
                            let same = self.identical(fx, init, &dty, xv.0, &xv.1)?;
                            self.b.build_store(done, same)?;
                            (Some(xv), Some(done))
                        }
                        None => (None, None),
                    };
                    states.push(OpState::Fold { slot, ty: dty, fun, partial, fix, done });
                }
                WithOp::Scan { shape, fun, partial, neutral } => {
                    let st = self.scan_state(fx, w, k, *shape, fun, partial, *neutral, dty, &mut scratch)?;
                    states.push(OpState::Scan(Box::new(st)));
                }
                WithOp::Filter { shape } => {
                    let st = self.filter_state(fx, w, k, *shape, &dty, &mut scratch)?;
                    states.push(OpState::Filter(Box::new(st)));
                }
            }
        }
        let all_fix = !states.is_empty() && states.iter().all(|st| matches!(st, OpState::Fold { done: Some(_), .. }));
        let end = self.ctx.append_basic_block(fx.func, "wl.end");
        // first_match: which indices of the primary frame a part already covered.
        let mut mask = None;
        if w.first_match
            && w.parts.len() > 1
            && let Some(f) = states.iter().find_map(|st| st.frame()).cloned()
        {
            let size = self.frame_product(fx, &f, self.const_i64(0))?;
            let m = self
                .call(self.rt.calloc, &[size.into(), self.const_i64(1).into()])?
                .ok_or_else(|| CodegenError::Bug("calloc".into()))?
                .into_pointer_value();
            mask = Some(m);
        }
        // Fixpoint folds whose neutral element is already their fixpoint run
        // no body at all (a body that would fail must not).
        if all_fix {
            let mut all: Option<IntValue<'ctx>> = None;
            for st in &states {
                if let OpState::Fold { done: Some(d), .. } = st {
                    let v = self.b.build_load(self.ctx.bool_type(), *d, "wl.done0")?.into_int_value();
                    all = Some(match all {
                        None => v,
                        Some(a) => self.b.build_and(a, v, "wl.alldone")?,
                    });
                }
            }
            if let Some(all) = all {
                let parts = self.ctx.append_basic_block(fx.func, "wl.parts");
                self.b.build_conditional_branch(all, end, parts)?;
                self.b.position_at_end(parts);
            }
        }
        // Cold code (see `compiler_core::ir::Function::cold`) gets no chunk functions.
        let parallel = self.parallel && !fx.irf.cold && self.parallel_eligible(fx, w, &states);
        let outer_fail = fx.fail_bb;
        fx.fail_bb = self.partial_results_cleanup(fx, &states, &scratch, mask, outer_fail)?;
        for part in &w.parts {
            if parallel
                && !self.statically_small(fx, part)
                && !self.nested_in_chunk(fx, part)
                && !self.never_splits(fx, part, &states, w, s)
            {
                self.parallel_part(fx, s, w, part, &mut states)?;
                continue;
            }
            let iv_slot = if part.index.is_some() { Some(self.alloca(fx, self.ptr().into(), "wl.iv")?) } else { None };
            let pcx = PartCx { w, part, s, iv_slot, mask, end: if all_fix { Some(end) } else { None }, stream: false };
            self.part(fx, &pcx, &mut states)?;
        }
        fx.fail_bb = outer_fail;
        self.b.build_unconditional_branch(end)?;
        self.b.position_at_end(end);
        for (array, before) in reads_of_result {
            fx.data.remove(&array);
            match before {
                Some(x) => fx.vals.insert(array, x),
                None => fx.vals.remove(&array),
            };
        }
        if let Some(m) = mask {
            self.call(self.rt.free, &[m.into()])?;
        }
        // The results (scans and filters make their pass over the frame here;
        // scans over tuples, one pass for all their lanes).
        let mut lane_results: Vec<BasicValueEnum<'ctx>> = Vec::new();
        for (k, st) in states.iter().enumerate() {
            let d = s.defs[k];
            if let OpState::Scan(first) = st
                && let FoldFn::Lane { lane, lanes, .. } = first.fun
            {
                if *lane == 0 {
                    let group: Vec<&ScanState<'ctx, 'a>> = states[k..(k + lanes).min(states.len())]
                        .iter()
                        .filter_map(|st| if let OpState::Scan(x) = st { Some(&**x) } else { None })
                        .collect();
                    lane_results = self.scan_finish_lanes(fx, &group)?;
                }
                let x = *lane_results.get(*lane).ok_or_else(|| CodegenError::Bug("a scan lane's result".into()))?;
                fx.vals.insert(d, x);
                continue;
            }
            let x: BasicValueEnum<'ctx> = match st {
                OpState::Gen { result: Result::Eager { arr, .. }, .. } => (*arr).into(),
                OpState::Gen { result: Result::Lazy { slot }, frame, elem, cell_ty, .. } => {
                    self.lazy_finish(fx, *slot, frame, *elem, cell_ty.as_ref(), loc)?.into()
                }
                // Over a scalar: the box's element, unless the result is typed
                // as an array (`int[*]` where inference left it generic), which
                // the box is (a rank-0 array).
                OpState::Mod { arr, array_ty, elem, .. } if scalar_repr(array_ty) && scalar_repr(fx.irf.ty(d)) => {
                    let x = self.unbox(fx, (*arr).into(), *elem)?;
                    self.dec((*arr).into())?;
                    x
                }
                OpState::Mod { arr, .. } => (*arr).into(),
                OpState::Fold { slot, ty, .. } => self.b.build_load(self.value_ty(ty), *slot, "acc")?,
                OpState::Scan(st) => self.scan_finish(fx, st)?,
                OpState::Filter(st) => self.filter_finish(fx, st)?,
            };
            fx.vals.insert(d, x);
        }
        // Only now: frames of run-time length (and scans' and filters'
        // stores) live in scratch arrays that the results above still read.
        for a in scratch.drain(..) {
            self.dec(a.into())?;
        }
        Ok(())
    }

    /// The statically known shape of genarray `k`'s cells, if every part's
    /// cell and the default have the same known shape.
    fn static_cell(&self, fx: &Fx<'ctx, 'a>, w: &With, k: usize, default: Option<&Ty>) -> Option<Vec<usize>> {
        let mut shape: Option<Vec<usize>> = None;
        let mut tys: Vec<&Ty> = w.parts.iter().map(|p| fx.irf.ty(w.element_yield(p, k))).collect();
        tys.extend(default);
        if tys.is_empty() {
            return w.cells.get(k).cloned().flatten().and_then(|t| t.shape.extents());
        }
        for t in tys {
            let e = t.shape.extents()?;
            match &shape {
                Some(s) if *s != e => return None,
                _ => shape = Some(e),
            }
        }
        shape
    }

    /// Allocates (or takes over) a genarray's result before the loops, filled
    /// with the default or zeros unless a part covers every index (`full`).
    /// `copy_shared`: a buffer to take over that is shared is copied, not
    /// replaced by a fresh one (the body reads the result for it).
    #[allow(clippy::too_many_arguments)]
    fn genarray_result(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        w: &With,
        k: usize,
        frame: &Frame<'ctx>,
        elem: BaseType,
        cell_static: Option<&[usize]>,
        default: Option<&(BasicValueEnum<'ctx>, Ty)>,
        (full, copy_shared): (bool, bool),
        moved: &HashSet<ValueId>,
    ) -> R<Result<'ctx>> {
        // The cell shape: static, or the default's.
        let (cell_rank, cell_shape, cell_len) = match (cell_static, default) {
            (Some(c), _) => {
                let buf = self.i64_buffer(fx, c.len() as u32, "cell")?;
                for (i, e) in c.iter().enumerate() {
                    self.buf_set(buf, self.const_i64(i as i64), self.const_i64(*e as i64))?;
                }
                (self.const_i64(c.len() as i64), buf, self.const_i64(c.iter().product::<usize>() as i64))
            }
            (None, Some((v, t))) if !scalar_repr(t) => {
                let p = v.into_pointer_value();
                (self.rank(p)?, self.shape_ptr(p)?, self.size(p)?)
            }
            _ => (self.const_i64(0), self.i64_buffer(fx, 1, "cell")?, self.const_i64(1)),
        };
        let frame_size = self.frame_product(fx, frame, self.const_i64(0))?;
        let total = self.b.build_int_mul(frame_size, cell_len, "total")?;
        let zero = !full && default.is_none();
        let code = self.i32().const_int(elem_code(elem), false);
        let fresh = |this: &mut Self| this.alloc_frame(fx, elem, frame, cell_rank, cell_shape, zero);
        let arr = match w.reuse.get(k).copied().flatten() {
            Some(r) => {
                let x = self.take(fx, r, moved)?.into_pointer_value();
                let ok = self
                    .call(
                        self.rt.reusable,
                        &[
                            x.into(),
                            code.into(),
                            frame.len.into(),
                            frame.buf.into(),
                            cell_rank.into(),
                            cell_shape.into(),
                        ],
                    )?
                    .ok_or_else(|| CodegenError::Bug("reusable".into()))?
                    .into_int_value();
                let reuse = self.b.build_int_compare(IntPredicate::NE, ok, self.i32().const_zero(), "reuse")?;
                let take_bb = self.ctx.append_basic_block(fx.func, "reuse.take");
                let new_bb = self.ctx.append_basic_block(fx.func, "reuse.new");
                let join = self.ctx.append_basic_block(fx.func, "reuse.join");
                self.b.build_conditional_branch(reuse, take_bb, new_bb)?;
                self.b.position_at_end(take_bb);
                self.b.build_unconditional_branch(join)?;
                self.b.position_at_end(new_bb);
                let a = if copy_shared {
                    let a = self
                        .call(self.rt.copy, &[fx.ctxp.into(), x.into()])?
                        .ok_or_else(|| CodegenError::Bug("copy".into()))?
                        .into_pointer_value();
                    self.dec(x.into())?;
                    self.check_error(fx)?;
                    a
                } else {
                    self.dec(x.into())?;
                    fresh(self)?
                };
                let new_end = self.b.get_insert_block().ok_or_else(|| CodegenError::Bug("no block".into()))?;
                self.b.build_unconditional_branch(join)?;
                self.b.position_at_end(join);
                let phi = self.b.build_phi(self.ptr(), "result")?;
                phi.add_incoming(&[(&x, take_bb), (&a, new_end)]);
                let arr = phi.as_basic_value().into_pointer_value();
                if !full && default.is_none() {
                    // A reused buffer still holds the argument's elements.
                    let data = self.data_ptr(arr)?;
                    let bytes = self.b.build_int_mul(total, self.const_i64(super::elem_bytes(elem) as i64), "bytes")?;
                    self.b
                        .build_memset(data, 1, self.ctx.i8_type().const_zero(), bytes)
                        .map_err(|e| CodegenError::Bug(format!("memset: {e}")))?;
                }
                arr
            }
            None => fresh(self)?,
        };
        if let (false, Some((v, t))) = (full, default) {
            let (cell, bits) = if scalar_repr(t) {
                (self.ptr().const_null(), self.bits_of(*v, base(t))?)
            } else {
                (v.into_pointer_value(), self.const_i64(0))
            };
            if !w.parts.is_empty() && w.parts.len() <= 16 && w.parts.iter().all(|p| dense_part(fx, p)) {
                // Bounds known only at run time: the runtime skips the fill
                // when the parts tile the frame.
                let n = w.parts.len() as u32;
                let lowers = self.alloca(fx, self.ptr().array_type(n).into(), "lowers")?;
                let uppers = self.alloca(fx, self.ptr().array_type(n).into(), "uppers")?;
                for (i, p) in w.parts.iter().enumerate() {
                    let at = self.const_i64(i as i64);
                    let lo = self.value(fx, p.lower)?;
                    let hi = self.value(fx, p.upper)?;
                    let lp = self.gep(self.ptr(), lowers, &[at], "lower")?;
                    self.b.build_store(lp, lo)?;
                    let hp = self.gep(self.ptr(), uppers, &[at], "upper")?;
                    self.b.build_store(hp, hi)?;
                }
                let parts = self.const_i64(n as i64);
                self.call(
                    self.rt.fill_uncovered,
                    &[fx.ctxp.into(), arr.into(), cell.into(), bits.into(), parts.into(), lowers.into(), uppers.into()],
                )?;
            } else {
                self.call(self.rt.fill, &[fx.ctxp.into(), arr.into(), cell.into(), bits.into()])?;
            }
        }
        let data = self.data_ptr(arr)?;
        Ok(Result::Eager { arr, data, cell_len })
    }

    /// Where a failure in a with-loop's parts goes: a block that releases
    /// the results being built (genarray and modarray arrays, counted fold
    /// accumulators), the scratch arrays and the coverage mask, then goes on
    /// to `outer`.
    fn partial_results_cleanup(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        states: &[OpState<'ctx, 'a>],
        scratch: &[PointerValue<'ctx>],
        mask: Option<PointerValue<'ctx>>,
        outer: BasicBlock<'ctx>,
    ) -> R<BasicBlock<'ctx>> {
        let holds = |st: &OpState<'ctx, 'a>| match st {
            OpState::Gen { .. } | OpState::Mod { .. } => true,
            OpState::Fold { ty, .. } => self.counted(ty),
            _ => false,
        };
        if !states.iter().any(holds) && scratch.is_empty() && mask.is_none() {
            return Ok(outer);
        }
        let here = self.b.get_insert_block().ok_or_else(|| CodegenError::Bug("no block".into()))?;
        let cleanup = self.ctx.append_basic_block(fx.func, "wl.fail.release");
        self.b.position_at_end(cleanup);
        for st in states {
            match st {
                OpState::Gen { result: Result::Eager { arr, .. }, .. } | OpState::Mod { arr, .. } => {
                    self.dec((*arr).into())?;
                }
                OpState::Gen { result: Result::Lazy { slot }, .. } => {
                    let arr = self.b.build_load(self.ptr(), *slot, "partial")?;
                    self.dec(arr)?;
                }
                OpState::Fold { slot, ty, .. } if self.counted(ty) => {
                    let acc = self.b.build_load(self.value_ty(ty), *slot, "partial")?;
                    self.dec(acc)?;
                }
                _ => {}
            }
        }
        for a in scratch {
            self.dec((*a).into())?;
        }
        if let Some(m) = mask {
            self.call(self.rt.free, &[m.into()])?;
        }
        self.b.build_unconditional_branch(outer)?;
        self.b.position_at_end(here);
        Ok(cleanup)
    }

    /// A lazily allocated genarray after the loops: allocated now if no cell
    /// was computed (from the static cell type), else R0012.
    fn lazy_finish(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        slot: PointerValue<'ctx>,
        frame: &Frame<'ctx>,
        elem: BaseType,
        cell_ty: Option<&Ty>,
        loc: PointerValue<'ctx>,
    ) -> R<PointerValue<'ctx>> {
        let r = self.b.build_load(self.ptr(), slot, "result")?.into_pointer_value();
        let none = self.b.build_is_null(r, "none")?;
        let have = self.b.get_insert_block().ok_or_else(|| CodegenError::Bug("no block".into()))?;
        let alloc_bb = self.ctx.append_basic_block(fx.func, "wl.empty");
        let join = self.ctx.append_basic_block(fx.func, "wl.done");
        self.b.build_conditional_branch(none, alloc_bb, join)?;
        self.b.position_at_end(alloc_bb);
        let ext = cell_ty.and_then(|t| t.shape.extents());
        let a = match ext {
            Some(c) => {
                let buf = self.i64_buffer(fx, c.len() as u32, "cell")?;
                for (i, e) in c.iter().enumerate() {
                    self.buf_set(buf, self.const_i64(i as i64), self.const_i64(*e as i64))?;
                }
                self.alloc_frame(fx, elem, frame, self.const_i64(c.len() as i64), buf, true)?
            }
            None => {
                self.fail_now(
                    fx,
                    loc,
                    "R0012",
                    "the shape of this with-loop's result is unknown: no element was computed, and the shape of the elements is only known when they are",
                )?;
                self.ptr().const_null()
            }
        };
        let from = self.b.get_insert_block().ok_or_else(|| CodegenError::Bug("no block".into()))?;
        self.b.build_unconditional_branch(join)?;
        self.b.position_at_end(join);
        let phi = self.b.build_phi(self.ptr(), "result")?;
        phi.add_incoming(&[(&r, have), (&a, from)]);
        Ok(phi.as_basic_value().into_pointer_value())
    }

    /// Whether two values are identical (a fixpoint test), as an `i1`.
    fn identical(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        a: BasicValueEnum<'ctx>,
        at: &Ty,
        b: BasicValueEnum<'ctx>,
        bt: &Ty,
    ) -> R<IntValue<'ctx>> {
        match (scalar_repr(at), scalar_repr(bt)) {
            (true, true) => {
                let (x, y) = (self.bits_of(a, base(at))?, self.bits_of(b, base(bt))?);
                Ok(self.b.build_int_compare(IntPredicate::EQ, x, y, "same")?)
            }
            _ => {
                let mut temps = Vec::new();
                let any = Ty { elem: at.elem, shape: compiler_core::sema::ty::Shape::AtLeast(0) };
                let x = self.borrowed_to(fx, a, at, &any, &mut temps)?;
                let y = self.borrowed_to(fx, b, bt, &any, &mut temps)?;
                let r = self
                    .call(self.rt.identical, &[x.into(), y.into()])?
                    .ok_or_else(|| CodegenError::Bug("identical".into()))?
                    .into_int_value();
                for t in temps {
                    self.dec(t)?;
                }
                Ok(self.b.build_int_compare(IntPredicate::NE, r, self.i32().const_zero(), "same")?)
            }
        }
    }

    // ------------------------------------------------------------ parts

    /// One part: its generator checked, then its loop nest.
    pub(crate) fn part(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        pcx: &PartCx<'ctx, 'a>,
        states: &mut [OpState<'ctx, 'a>],
    ) -> R<()> {
        self.part_range(fx, pcx, states, None)
    }

    /// [`Self::part`]; with `outer`, only iterations `lo..hi` of the outermost
    /// loop run (a chunk of a parallel part; the index length is static).
    pub(crate) fn part_range(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        pcx: &PartCx<'ctx, 'a>,
        states: &mut [OpState<'ctx, 'a>],
        outer: Option<(IntValue<'ctx>, IntValue<'ctx>)>,
    ) -> R<()> {
        let part = pcx.part;
        let stmt_loc = fx.loc;
        let ploc = self.sub_loc(pcx.s, part.span, stmt_loc);
        let lty = fx.irf.ty(part.lower).clone();
        let n_static = part.scalars.as_ref().map(Vec::len).or_else(|| static_extent(&lty, 0));
        if let Some(iv_slot) = pcx.iv_slot {
            // One index vector per part, rewritten per index (copied first if
            // the body kept a reference to it).
            let len = match n_static {
                Some(n) => self.const_i64(n as i64),
                None => {
                    let l = self.value(fx, part.lower)?.into_pointer_value();
                    self.vec_len(l, &lty)?
                }
            };
            let shape = self.i64_buffer(fx, 1, "iv.shape")?;
            self.b.build_store(shape, len)?;
            let iv = self.alloc_array(fx, BaseType::Int, self.const_i64(1), shape)?;
            self.b.build_store(iv_slot, iv)?;
        }
        match n_static {
            _ if runs_flat(fx, pcx.w, part, n_static) => {
                let total = self.flat_count(fx, part)?;
                let (lo, hi) = outer.unwrap_or((self.const_i64(0), total));
                match streamed_result(pcx, states) {
                    Some(out) => self.aligned_innermost(fx, pcx, states, None, lo, hi, out)?,
                    None => {
                        let (l, o) = self.open_loop(fx, lo, hi)?;
                        self.iteration(fx, pcx, states, &Index::Flat(o))?;
                        self.close_loop(l)?;
                    }
                }
            }
            Some(n) => self.static_part(fx, pcx, states, n, ploc, outer)?,
            None => self.dynamic_part(fx, pcx, states, ploc)?,
        }
        if let Some(iv_slot) = pcx.iv_slot {
            let iv = self.b.build_load(self.ptr(), iv_slot, "iv")?;
            self.dec(iv)?;
        }
        Ok(())
    }

    /// The number of iterations of a flat part ([`runs_flat`]): the product of its upper
    /// bound's components (none negative, or the part is empty).
    pub(crate) fn flat_count(&mut self, fx: &mut Fx<'ctx, 'a>, part: &Part) -> R<IntValue<'ctx>> {
        let uty = fx.irf.ty(part.upper).clone();
        let uv = self.value(fx, part.upper)?.into_pointer_value();
        let len = self.vec_len(uv, &uty)?;
        self.product_range(fx, self.const_i64(0), len, &mut |e, d| {
            let x = e.int_elem(uv, &uty, d)?;
            let neg = e.b.build_int_compare(IntPredicate::SLT, x, e.const_i64(0), "neg")?;
            Ok(e.b.build_select(neg, e.const_i64(0), x, "ext")?.into_int_value())
        })
    }

    /// Loads a generator of static length `n`.
    pub(crate) fn load_generator(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        part: &Part,
        n: usize,
        ploc: PointerValue<'ctx>,
    ) -> R<Generator<'ctx>> {
        let mut vectors: Vec<Vec<IntValue<'ctx>>> = Vec::new();
        let mut given = Vec::new();
        for (what, v) in [
            ("lower bound", Some(part.lower)),
            ("upper bound", Some(part.upper)),
            ("step", part.step),
            ("width", part.width),
        ] {
            let Some(v) = v else {
                given.push(false);
                vectors.push(vec![self.const_i64(1); n]);
                continue;
            };
            given.push(true);
            let ty = fx.irf.ty(v).clone();
            let p = self.value(fx, v)?.into_pointer_value();
            if static_extent(&ty, 0) != Some(n) {
                let len = self.vec_len(p, &ty)?;
                let bad = self.b.build_int_compare(IntPredicate::NE, len, self.const_i64(n as i64), "badlen")?;
                let template = format!("the generator's {what} has {{a}} components but the index has {{b}}");
                self.fail_ints_if(fx, bad, ploc, "R0006", &template, len, self.const_i64(n as i64))?;
            }
            let mut comps = Vec::with_capacity(n);
            for d in 0..n {
                comps.push(self.int_elem(p, &ty, self.const_i64(d as i64))?);
            }
            vectors.push(comps);
        }
        let ints = |v: Option<ValueId>| v.and_then(|v| fx.consts.get(&v).and_then(|c| c.as_int_vec()));
        let (steps_c, widths_c) = (ints(part.step), ints(part.width));
        let dense: Vec<bool> = (0..n)
            .map(|d| {
                let st = if given[2] { steps_c.as_ref().and_then(|v| v.get(d).copied()) } else { Some(1) };
                let wd = if given[3] { widths_c.as_ref().and_then(|v| v.get(d).copied()) } else { Some(1) };
                matches!((st, wd), (Some(s), Some(w)) if s >= 1 && w >= s)
            })
            .collect();
        for (k, what) in [(2usize, "step"), (3, "width")] {
            if !given[k] {
                continue;
            }
            for &x in vectors[k].iter().take(n) {
                let bad = self.b.build_int_compare(IntPredicate::SLE, x, self.const_i64(0), "nonpos")?;
                let template = format!("generator {what} must be positive, got {{a}}");
                self.fail_ints_if(fx, bad, ploc, "R0006", &template, x, x)?;
            }
        }
        let width = vectors.pop().unwrap_or_default();
        let step = vectors.pop().unwrap_or_default();
        let hi = vectors.pop().unwrap_or_default();
        let lo = vectors.pop().unwrap_or_default();
        Ok(Generator { lo, hi, step, width, dense })
    }

    /// The last covered coordinate of axis `d` (for a non-empty axis).
    fn last_coord(&mut self, g: &Generator<'ctx>, d: usize) -> R<IntValue<'ctx>> {
        let one = self.const_i64(1);
        let top = self.b.build_int_sub(g.hi[d], one, "top")?;
        if g.dense[d] {
            return Ok(top);
        }
        let k = self.b.build_int_sub(top, g.lo[d], "k")?;
        let q = self.b.build_int_signed_div(k, g.step[d], "q")?;
        let r = self.b.build_int_signed_rem(k, g.step[d], "r")?;
        let wm1 = self.b.build_int_sub(g.width[d], one, "wm1")?;
        let lt = self.b.build_int_compare(IntPredicate::SLT, r, wm1, "lt")?;
        let m = self.b.build_select(lt, r, wm1, "m")?.into_int_value();
        let qs = self.b.build_int_mul(q, g.step[d], "qs")?;
        let base = self.b.build_int_add(g.lo[d], qs, "base")?;
        Ok(self.b.build_int_add(base, m, "last")?)
    }

    /// Fails when a non-empty generator reaches outside a frame.
    fn check_frames_static(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        g: &Generator<'ctx>,
        states: &[OpState<'ctx, 'a>],
        ploc: PointerValue<'ctx>,
    ) -> R<()> {
        let n = g.lo.len();
        let frames: Vec<Frame<'ctx>> = states.iter().filter_map(|s| s.frame()).cloned().collect();
        if frames.is_empty() {
            return Ok(());
        }
        let after = self.when_nonempty(fx, g, 0..n, "gen.check", "gen.ok")?;
        let corner = self.i64_buffer(fx, n.max(1) as u32, "corner")?;
        let mut lasts = Vec::with_capacity(n);
        for d in 0..n {
            let l = self.last_coord(g, d)?;
            self.buf_set(corner, self.const_i64(d as i64), l)?;
            lasts.push(l);
        }
        for f in &frames {
            let mut bad = self.ctx.bool_type().const_zero();
            for d in 0..n {
                let neg = self.b.build_int_compare(IntPredicate::SLT, g.lo[d], self.const_i64(0), "neg")?;
                bad = self.b.build_or(bad, neg, "bad")?;
                let (beyond, ext) = match &f.ext {
                    Some(ext) if d < ext.len() => (self.ctx.bool_type().const_zero(), ext[d]),
                    Some(_) => (self.ctx.bool_type().const_int(1, false), self.const_i64(0)),
                    None => {
                        let di = self.const_i64(d as i64);
                        let beyond = self.b.build_int_compare(IntPredicate::SGE, di, f.len, "beyond")?;
                        let safe = self.b.build_select(beyond, self.const_i64(0), di, "safe")?.into_int_value();
                        (beyond, self.buf_get(f.buf, safe)?)
                    }
                };
                bad = self.b.build_or(bad, beyond, "bad")?;
                let over = self.b.build_int_compare(IntPredicate::SGE, lasts[d], ext, "over")?;
                bad = self.b.build_or(bad, over, "bad")?;
            }
            let fail = self.ctx.append_basic_block(fx.func, "gen.bad");
            let ok = self.ctx.append_basic_block(fx.func, "gen.fine");
            self.b.build_conditional_branch(bad, fail, ok)?;
            self.b.position_at_end(fail);
            self.fail_outside(fx, corner, self.const_i64(n as i64), f, ploc)?;
            self.b.position_at_end(ok);
        }
        self.b.build_unconditional_branch(after)?;
        self.b.position_at_end(after);
        Ok(())
    }

    fn fail_outside(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        corner: PointerValue<'ctx>,
        n: IntValue<'ctx>,
        f: &Frame<'ctx>,
        ploc: PointerValue<'ctx>,
    ) -> R<()> {
        let code = self.cstring("R0006");
        let template = self.cstring("generator covers index {a} outside the result shape {b}");
        self.call(
            self.rt.fail_vectors,
            &[
                fx.ctxp.into(),
                ploc.into(),
                code.into(),
                template.into(),
                corner.into(),
                n.into(),
                f.buf.into(),
                f.len.into(),
            ],
        )?;
        self.b.build_unconditional_branch(fx.fail_bb)?;
        Ok(())
    }

    /// A part whose index length is static: a loop nest.
    fn static_part(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        pcx: &PartCx<'ctx, 'a>,
        states: &mut [OpState<'ctx, 'a>],
        n: usize,
        ploc: PointerValue<'ctx>,
        outer: Option<(IntValue<'ctx>, IntValue<'ctx>)>,
    ) -> R<()> {
        let g = self.load_generator(fx, pcx.part, n, ploc)?;
        self.check_frames_static(fx, &g, states, ploc)?;
        let rows = row_reads(fx, pcx.w, pcx.part)?;
        let tile = if rows.is_empty() { self.jam_tile(fx, pcx, states, n) } else { None };
        let plan = tile.and_then(|t| self.lane_plan(fx, pcx, states, t));
        // A lane-planned tile whose columns read a panel of another array
        // (matrix multiplication's `b[k, j]`) runs its column tiles outside
        // its row tiles and copies each column tile's panel to a contiguous
        // buffer first (`tile.rs`, [`Self::pack_panel`]).
        let panel = match (tile, &plan) {
            (Some((_, cols)), Some(plan)) => self.open_panel(fx, pcx, states, plan, cols)?,
            _ => None,
        };
        let mut open = Vec::new();
        let mut idx = Vec::with_capacity(n);
        // A register tile: loops over the tiles, then each tile (`tile.rs`).
        let mut tiles = [None; 2];
        let mut order: Vec<usize> = (0..n).collect();
        if panel.is_some() {
            order.swap(n - 2, n - 1);
        }
        // A thread's chunk is a range of the nest's outermost loop.
        let chunked = super::parallel::chunked_axis(n, panel.is_some());
        // A streaming part's innermost range, its loop left to `aligned_innermost`.
        let streamed = streamed_result(pcx, states);
        let mut innermost = None;
        // Row reads run when a row starts, and only when the row has cells:
        // the selection was proved in bounds for the body, which an empty
        // inner range never runs (a 5x0 array's column k does not exist).
        let after_rows = if rows.is_empty() {
            None
        } else {
            if !g.dense[0] || n < 2 || chunked != 0 {
                return Err(CodegenError::Bug("row reads in a part that does not run row by row".into()));
            }
            Some(self.when_nonempty(fx, &g, 1..n, "rows", "rows.end")?)
        };
        for d in order {
            let chunk = if d == chunked { outer } else { None };
            if tile.is_some() && d >= n - 2 {
                // A thread's chunk counts indices (the axis is dense): its
                // tiles are those starting inside it.
                let chunk = match chunk {
                    Some((a, b)) => Some((self.blocks_upto(a, g.step[d])?, self.blocks_upto(b, g.step[d])?)),
                    None => None,
                };
                if d == n - 2
                    && let (Some(panel), Some(plan), Some((c0, c_stop))) = (&panel, &plan, tiles[1])
                {
                    // Rows to come (the chunk's or the part's): the panel
                    // is read only where the product reads it.
                    let (first, last) = match chunk {
                        Some(c) => c,
                        None => (g.lo[d], g.hi[d]),
                    };
                    let rows = self.b.build_int_compare(IntPredicate::SLT, first, last, "rows")?;
                    self.pack_panel(fx, pcx, states, plan, panel, &idx, g.lo[d], (c0, c_stop), rows)?;
                }
                let (lb, start, stop) = self.open_blocks(fx, &g, d, chunk)?;
                open.push(lb);
                tiles[d + 2 - n] = Some((start, stop));
            } else if g.dense[d] {
                let (lo, hi) = match chunk {
                    Some((a, b)) => {
                        (self.b.build_int_add(g.lo[d], a, "clo")?, self.b.build_int_add(g.lo[d], b, "chi")?)
                    }
                    None => (g.lo[d], g.hi[d]),
                };
                if d == n - 1 && tile.is_none() && streamed.is_some() {
                    innermost = Some((lo, hi));
                    continue;
                }
                let (l, i) = self.open_loop(fx, lo, hi)?;
                open.push(l);
                idx.push(i);
                if d == 0 && !rows.is_empty() {
                    self.row_start(fx, pcx.part, i, &rows)?;
                }
            } else {
                let (lb, start, stop) = self.open_blocks(fx, &g, d, chunk)?;
                let (li, i) = self.open_loop(fx, start, stop)?;
                open.push(lb);
                open.push(li);
                idx.push(i);
            }
        }
        match (tile, tiles, innermost.zip(streamed)) {
            (Some(t), [Some(rows), Some(cols)], _) => {
                let partial = super::tile::partial_tiles(fx, pcx.part, n);
                self.tile(fx, pcx, states, plan.as_ref(), panel.as_ref(), &idx, rows, cols, t, partial)?
            }
            (_, _, Some(((lo, hi), out))) => self.aligned_innermost(fx, pcx, states, Some(&idx), lo, hi, out)?,
            _ => self.iteration(fx, pcx, states, &Index::Static(idx))?,
        }
        while let Some(l) = open.pop() {
            self.close_loop(l)?;
        }
        if let Some(after) = after_rows {
            self.b.build_unconditional_branch(after)?;
            self.b.position_at_end(after);
            for st in &rows {
                fx.hoisted.remove(&st.defs[0]);
            }
        }
        if let Some(panel) = panel {
            self.call(self.rt.dec, &[panel.array.into()])?;
        }
        Ok(())
    }

    /// The innermost loop of a streaming part ([`PartCx::stream`]): indices
    /// `lo..hi` after the outer ones, `outer` (`None`: a flat part's offsets),
    /// whose cells go to `out`'s data, elements of its width. The body runs
    /// up to the first index whose cell starts on a 64-byte boundary of the
    /// data, then from there with LLVM told so ([`Emitter::aligned_range`],
    /// as a streaming flat loop's chunk): the vectorised stores become
    /// aligned ones, which stay whole vectors once made non-temporal. The
    /// body is emitted twice; its values are re-emitted in the second copy,
    /// so nothing of the first is used there.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn aligned_innermost(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        pcx: &PartCx<'ctx, 'a>,
        states: &mut [OpState<'ctx, 'a>],
        outer: Option<&[IntValue<'ctx>]>,
        lo: IntValue<'ctx>,
        hi: IntValue<'ctx>,
        (data, bytes): (PointerValue<'ctx>, u64),
    ) -> R<()> {
        let index_at = |i: IntValue<'ctx>| match outer {
            Some(outer) => Index::Static(outer.iter().copied().chain([i]).collect()),
            None => Index::Flat(i),
        };
        let frame =
            states[0].frame().cloned().ok_or_else(|| CodegenError::Bug("a streamed part without a frame".into()))?;
        let first = self.frame_offset(fx, &index_at(lo), &frame)?;
        self.aligned_range(fx, lo, hi, (data, first, bytes), &mut |e, fx, i| e.iteration(fx, pcx, states, &index_at(i)))
    }

    /// Continues in a new block `then` that runs only when the generator's
    /// ranges on `axes` are all non-empty; returns the block `after` both
    /// ways meet in (the caller branches there when done).
    fn when_nonempty(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        g: &Generator<'ctx>,
        axes: std::ops::Range<usize>,
        then: &str,
        after: &str,
    ) -> R<BasicBlock<'ctx>> {
        let mut nonempty = self.ctx.bool_type().const_int(1, false);
        for d in axes {
            let ne = self.b.build_int_compare(IntPredicate::SLT, g.lo[d], g.hi[d], "ne")?;
            nonempty = self.b.build_and(nonempty, ne, "nonempty")?;
        }
        let then_bb = self.ctx.append_basic_block(fx.func, then);
        let after_bb = self.ctx.append_basic_block(fx.func, after);
        self.b.build_conditional_branch(nonempty, then_bb, after_bb)?;
        self.b.position_at_end(then_bb);
        Ok(after_bb)
    }

    /// Runs a part's row reads ([`row_reads`]) where row `i` starts, before
    /// any of its cells is written; the body then skips them.
    fn row_start(&mut self, fx: &mut Fx<'ctx, 'a>, part: &'a Part, i: IntValue<'ctx>, rows: &[&'a Stmt]) -> R<()> {
        let x = self.as_int(i)?;
        if let Some(&row) = part.scalars.as_ref().and_then(|s| s.first()) {
            fx.vals.insert(row, x.into());
            fx.wide.insert(row, i);
        }
        let none = HashSet::default();
        for st in rows {
            if row_index(fx, part, st) {
                fx.vals.insert(st.defs[0], x.into());
                fx.wide.insert(st.defs[0], i);
            } else {
                self.stmt(fx, st, &none)?;
            }
            fx.hoisted.insert(st.defs[0]);
        }
        Ok(())
    }

    /// Opens the loop over the blocks of strided axis `d` (`step` indices
    /// each, the first `width` covered): all of them, or `chunk`'s. Returns
    /// the loop and the block's covered range, clipped to the generator.
    fn open_blocks(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        g: &Generator<'ctx>,
        d: usize,
        chunk: Option<(IntValue<'ctx>, IntValue<'ctx>)>,
    ) -> R<(OpenLoop<'ctx>, IntValue<'ctx>, IntValue<'ctx>)> {
        let (first, last) = match chunk {
            Some(c) => c,
            None => {
                let span = self.b.build_int_sub(g.hi[d], g.lo[d], "span")?;
                (self.const_i64(0), self.blocks_upto(span, g.step[d])?)
            }
        };
        let (lb, k) = self.open_loop(fx, first, last)?;
        let off = self.b.build_int_mul(k, g.step[d], "boff")?;
        let start = self.b.build_int_add(g.lo[d], off, "start")?;
        let stop = self.b.build_int_add(start, g.width[d], "stop")?;
        let lt = self.b.build_int_compare(IntPredicate::SLT, stop, g.hi[d], "lt")?;
        let stop = self.b.build_select(lt, stop, g.hi[d], "stop")?.into_int_value();
        Ok((lb, start, stop))
    }

    /// How many blocks of `step` start before `x` (`x` >= 0): `ceil(x / step)`.
    fn blocks_upto(&mut self, x: IntValue<'ctx>, step: IntValue<'ctx>) -> R<IntValue<'ctx>> {
        let sm1 = self.b.build_int_sub(step, self.const_i64(1), "sm1")?;
        let padded = self.b.build_int_add(x, sm1, "padded")?;
        Ok(self.b.build_int_signed_div(padded, step, "blocks")?)
    }

    /// A part whose index length is only known at run time: an odometer over
    /// index buffers.
    fn dynamic_part(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        pcx: &PartCx<'ctx, 'a>,
        states: &mut [OpState<'ctx, 'a>],
        ploc: PointerValue<'ctx>,
    ) -> R<()> {
        let part = pcx.part;
        if !row_reads(fx, pcx.w, part)?.is_empty() {
            return Err(CodegenError::Bug("row reads in a part of unknown rank".into()));
        }
        let lty = fx.irf.ty(part.lower).clone();
        let lower = self.value(fx, part.lower)?.into_pointer_value();
        let n = self.vec_len(lower, &lty)?;
        // Six buffers of n: lower, upper, step, width, index, last.
        let six = self.b.build_int_mul(n, self.const_i64(6), "six")?;
        let (scratch, buf) = self.scratch(fx, six)?;
        let at = |this: &mut Self, k: i64| -> R<PointerValue<'ctx>> {
            let o = this.b.build_int_mul(n, this.const_i64(k), "o")?;
            this.gep(this.i64(), buf, &[o], "part")
        };
        let (lo, hi, st, wd, ix, last) =
            (at(self, 0)?, at(self, 1)?, at(self, 2)?, at(self, 3)?, at(self, 4)?, at(self, 5)?);
        for (what, v, dst, default) in [
            ("lower bound", Some(part.lower), lo, 0),
            ("upper bound", Some(part.upper), hi, 0),
            ("step", part.step, st, 1),
            ("width", part.width, wd, 1),
        ] {
            match v {
                Some(v) => {
                    let ty = fx.irf.ty(v).clone();
                    let p = self.value(fx, v)?.into_pointer_value();
                    let len = self.vec_len(p, &ty)?;
                    let bad = self.b.build_int_compare(IntPredicate::NE, len, n, "badlen")?;
                    let template = format!("the generator's {what} has {{a}} components but the index has {{b}}");
                    self.fail_ints_if(fx, bad, ploc, "R0006", &template, len, n)?;
                    self.for_range(fx, Trips::Few, self.const_i64(0), n, &mut |e, fx, d| {
                        let x = e.int_elem(p, &ty, d)?;
                        if what == "step" || what == "width" {
                            let bad = e.b.build_int_compare(IntPredicate::SLE, x, e.const_i64(0), "nonpos")?;
                            let template = format!("generator {what} must be positive, got {{a}}");
                            e.fail_ints_if(fx, bad, ploc, "R0006", &template, x, x)?;
                        }
                        e.buf_set(dst, d, x)
                    })?;
                }
                None => {
                    self.for_range(fx, Trips::Few, self.const_i64(0), n, &mut |e, _fx, d| {
                        e.buf_set(dst, d, e.const_i64(default))
                    })?;
                }
            }
        }
        // Non-empty? Then every frame must contain the last corner.
        let empty = self.alloca(fx, self.ctx.bool_type().into(), "empty")?;
        self.b.build_store(empty, self.ctx.bool_type().const_zero())?;
        self.for_range(fx, Trips::Few, self.const_i64(0), n, &mut |e, _fx, d| {
            let (l, h, s, w) = (e.buf_get(lo, d)?, e.buf_get(hi, d)?, e.buf_get(st, d)?, e.buf_get(wd, d)?);
            let ge = e.b.build_int_compare(IntPredicate::SGE, l, h, "ge")?;
            let old = e.b.build_load(e.ctx.bool_type(), empty, "e")?.into_int_value();
            let now = e.b.build_or(old, ge, "e")?;
            e.b.build_store(empty, now)?;
            // last = lo + q*step + min(r, width-1), k = hi-1-lo (meaningful when non-empty).
            let top = e.b.build_int_sub(h, e.const_i64(1), "top")?;
            let k = e.b.build_int_sub(top, l, "k")?;
            let q = e.b.build_int_signed_div(k, s, "q")?;
            let r = e.b.build_int_signed_rem(k, s, "r")?;
            let wm1 = e.b.build_int_sub(w, e.const_i64(1), "wm1")?;
            let lt = e.b.build_int_compare(IntPredicate::SLT, r, wm1, "lt")?;
            let m = e.b.build_select(lt, r, wm1, "m")?.into_int_value();
            let qs = e.b.build_int_mul(q, s, "qs")?;
            let b0 = e.b.build_int_add(l, qs, "b0")?;
            let lastv = e.b.build_int_add(b0, m, "last")?;
            e.buf_set(last, d, lastv)?;
            e.buf_set(ix, d, l)
        })?;
        let is_empty = self.b.build_load(self.ctx.bool_type(), empty, "isempty")?.into_int_value();
        let body_bb = self.ctx.append_basic_block(fx.func, "odo.check");
        let done_bb = self.ctx.append_basic_block(fx.func, "odo.done");
        self.b.build_conditional_branch(is_empty, done_bb, body_bb)?;
        self.b.position_at_end(body_bb);
        let frames: Vec<Frame<'ctx>> = states.iter().filter_map(|s| s.frame()).cloned().collect();
        for f in &frames {
            let bad = self.alloca(fx, self.ctx.bool_type().into(), "bad")?;
            self.b.build_store(bad, self.ctx.bool_type().const_zero())?;
            let fc = f.clone();
            self.for_range(fx, Trips::Few, self.const_i64(0), n, &mut |e, _fx, d| {
                let l = e.buf_get(lo, d)?;
                let la = e.buf_get(last, d)?;
                let neg = e.b.build_int_compare(IntPredicate::SLT, l, e.const_i64(0), "neg")?;
                let beyond = e.b.build_int_compare(IntPredicate::SGE, d, fc.len, "beyond")?;
                let safe = e.b.build_select(beyond, e.const_i64(0), d, "safe")?.into_int_value();
                let ext = e.buf_get(fc.buf, safe)?;
                let over = e.b.build_int_compare(IntPredicate::SGE, la, ext, "over")?;
                let old = e.b.build_load(e.ctx.bool_type(), bad, "b")?.into_int_value();
                let x = e.b.build_or(old, neg, "b")?;
                let x = e.b.build_or(x, beyond, "b")?;
                let x = e.b.build_or(x, over, "b")?;
                e.b.build_store(bad, x)?;
                Ok(())
            })?;
            let is_bad = self.b.build_load(self.ctx.bool_type(), bad, "isbad")?.into_int_value();
            let fail = self.ctx.append_basic_block(fx.func, "gen.bad");
            let ok = self.ctx.append_basic_block(fx.func, "gen.fine");
            self.b.build_conditional_branch(is_bad, fail, ok)?;
            self.b.position_at_end(fail);
            self.fail_outside(fx, last, n, f, ploc)?;
            self.b.position_at_end(ok);
        }
        // The odometer: body, then advance the last axis, carrying leftwards.
        let head = self.ctx.append_basic_block(fx.func, "odo.body");
        self.b.build_unconditional_branch(head)?;
        self.b.position_at_end(head);
        self.iteration(fx, pcx, states, &Index::Dynamic { buf: ix, n })?;
        let axis = self.alloca(fx, self.i64().into(), "axis")?;
        let nm1 = self.b.build_int_sub(n, self.const_i64(1), "nm1")?;
        self.b.build_store(axis, nm1)?;
        let adv = self.ctx.append_basic_block(fx.func, "odo.advance");
        self.b.build_unconditional_branch(adv)?;
        self.b.position_at_end(adv);
        let d = self.b.build_load(self.i64(), axis, "d")?.into_int_value();
        let finished = self.b.build_int_compare(IntPredicate::SLT, d, self.const_i64(0), "finished")?;
        let step_bb = self.ctx.append_basic_block(fx.func, "odo.step");
        self.b.build_conditional_branch(finished, done_bb, step_bb)?;
        self.b.position_at_end(step_bb);
        let (i, l, h, s, w) = (
            self.buf_get(ix, d)?,
            self.buf_get(lo, d)?,
            self.buf_get(hi, d)?,
            self.buf_get(st, d)?,
            self.buf_get(wd, d)?,
        );
        let next = self.b.build_int_add(i, self.const_i64(1), "next")?;
        // Skip the gap between blocks of `width` indices.
        let rel = self.b.build_int_sub(next, l, "rel")?;
        let r = self.b.build_int_signed_rem(rel, s, "r")?;
        let in_block = self.b.build_int_compare(IntPredicate::SLT, r, w, "inblock")?;
        let q = self.b.build_int_signed_div(rel, s, "q")?;
        let q1 = self.b.build_int_add(q, self.const_i64(1), "q1")?;
        let jump = self.b.build_int_mul(q1, s, "jump")?;
        let jumped = self.b.build_int_add(l, jump, "jumped")?;
        let next = self.b.build_select(in_block, next, jumped, "next")?.into_int_value();
        let more = self.b.build_int_compare(IntPredicate::SLT, next, h, "more")?;
        let store_bb = self.ctx.append_basic_block(fx.func, "odo.more");
        let carry_bb = self.ctx.append_basic_block(fx.func, "odo.carry");
        self.b.build_conditional_branch(more, store_bb, carry_bb)?;
        self.b.position_at_end(store_bb);
        self.buf_set(ix, d, next)?;
        self.b.build_unconditional_branch(head)?;
        self.b.position_at_end(carry_bb);
        self.buf_set(ix, d, l)?;
        let dm1 = self.b.build_int_sub(d, self.const_i64(1), "dm1")?;
        self.b.build_store(axis, dm1)?;
        self.b.build_unconditional_branch(adv)?;
        self.b.position_at_end(done_bb);
        self.dec(scratch.into())?;
        Ok(())
    }

    /// One index of a part: bind the index, run the body, write or combine.
    pub(crate) fn iteration(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        pcx: &PartCx<'ctx, 'a>,
        states: &mut [OpState<'ctx, 'a>],
        index: &Index<'ctx>,
    ) -> R<()> {
        let (w, part, s) = (pcx.w, pcx.part, pcx.s);
        let stmt_loc = fx.loc;
        let next = self.ctx.append_basic_block(fx.func, "wl.next");
        // The offset in each operator's frame (the first one's is the part's).
        let mut offsets: Vec<Option<IntValue<'ctx>>> = Vec::with_capacity(states.len());
        let mut primary: Option<IntValue<'ctx>> = None;
        for st in states.iter() {
            let off = match st.frame() {
                Some(f) => {
                    let f = f.clone();
                    Some(self.frame_offset(fx, index, &f)?)
                }
                None => None,
            };
            if primary.is_none() {
                primary = off;
            }
            offsets.push(off);
        }
        if let (Some(mask), Some(off)) = (pcx.mask, primary) {
            let p = self.gep(self.ctx.i8_type(), mask, &[off], "covered")?;
            let c = self.b.build_load(self.ctx.i8_type(), p, "c")?.into_int_value();
            let taken = self.b.build_int_compare(IntPredicate::NE, c, self.ctx.i8_type().const_zero(), "taken")?;
            let fresh = self.ctx.append_basic_block(fx.func, "wl.fresh");
            self.b.build_conditional_branch(taken, next, fresh)?;
            self.b.position_at_end(fresh);
            self.b.build_store(p, self.ctx.i8_type().const_int(1, false))?;
        }
        if let (Some(iv), Some(slot)) = (part.index, pcx.iv_slot) {
            let cur = self.b.build_load(self.ptr(), slot, "iv")?.into_pointer_value();
            let rc_p = self.gep(self.ctx.i8_type(), cur, &[self.const_i64(rt::ARR_RC as i64)], "rcp")?;
            let rc = self.b.build_load(self.i64(), rc_p, "rc")?.into_int_value();
            let shared = self.b.build_int_compare(IntPredicate::NE, rc, self.const_i64(1), "shared")?;
            let copy_bb = self.ctx.append_basic_block(fx.func, "iv.copy");
            let write_bb = self.ctx.append_basic_block(fx.func, "iv.write");
            let from = self.b.get_insert_block().ok_or_else(|| CodegenError::Bug("no block".into()))?;
            self.b.build_conditional_branch(shared, copy_bb, write_bb)?;
            self.b.position_at_end(copy_bb);
            let copied = self
                .call(self.rt.unique, &[fx.ctxp.into(), cur.into()])?
                .ok_or_else(|| CodegenError::Bug("unique".into()))?
                .into_pointer_value();
            self.check_error(fx)?;
            self.b.build_store(slot, copied)?;
            let copy_end = self.b.get_insert_block().ok_or_else(|| CodegenError::Bug("no block".into()))?;
            self.b.build_unconditional_branch(write_bb)?;
            self.b.position_at_end(write_bb);
            let phi = self.b.build_phi(self.ptr(), "iv")?;
            phi.add_incoming(&[(&cur, from), (&copied, copy_end)]);
            let ivp = phi.as_basic_value().into_pointer_value();
            let data = self.data_ptr(ivp)?;
            match index {
                Index::Static(idx) => {
                    for (d, i) in idx.iter().enumerate() {
                        let x = self.as_int(*i)?;
                        self.store_elem(data, self.const_i64(d as i64), BaseType::Int, x.into())?;
                    }
                }
                Index::Dynamic { buf, n } => {
                    let b = *buf;
                    self.for_range(fx, Trips::Few, self.const_i64(0), *n, &mut |e, _fx, d| {
                        let i = e.buf_get(b, d)?;
                        let x = e.as_int(i)?;
                        e.store_elem(data, d, BaseType::Int, x.into())
                    })?;
                }
                Index::Flat(_) => return Err(CodegenError::Bug("an index vector in a flat part".into())),
            }
            fx.vals.insert(iv, ivp.into());
        }
        if let Some(ss) = &part.scalars {
            for (d, sv) in ss.iter().enumerate() {
                let i = match index {
                    Index::Static(idx) => idx[d],
                    Index::Dynamic { buf, .. } => self.buf_get(*buf, self.const_i64(d as i64))?,
                    Index::Flat(_) => return Err(CodegenError::Bug("index scalars in a flat part".into())),
                };
                let x = self.as_int(i)?;
                fx.vals.insert(*sv, x.into());
                fx.wide.insert(*sv, i);
            }
        }
        if let Some(o) = part.offset {
            match primary {
                Some(off) => {
                    let x = self.as_int(off)?;
                    fx.vals.insert(o, x.into());
                    fx.wide.insert(o, off);
                }
                None => return Err(CodegenError::Bug("a with-loop offset without a result frame".into())),
            }
        }
        let ys = self.block(fx, &part.body, &[])?;
        let n_index = match index {
            Index::Static(idx) => self.const_i64(idx.len() as i64),
            Index::Dynamic { n, .. } => *n,
            // Only modarray results use it, and a flat part has none.
            Index::Flat(_) => self.const_i64(1),
        };
        for (k, st) in states.iter_mut().enumerate() {
            let yi = w.yield_index(k);
            let (y, yv) = (ys[yi], part.body.yields[yi]);
            let yty = fx.irf.ty(yv).clone();
            let rloc = match part.result_spans.get(k) {
                Some(sp) => self.sub_loc(s, *sp, stmt_loc),
                None => stmt_loc,
            };
            match st {
                OpState::Gen { frame, elem, result, cell_static, .. } => {
                    let off = offsets[k].ok_or_else(|| CodegenError::Bug("genarray without a frame".into()))?;
                    let frame = frame.clone();
                    self.write_gen(fx, result, &frame, *elem, cell_static.as_deref(), off, y, &yty, rloc)?;
                }
                OpState::Mod { frame, elem, arr, data, array_ty } => {
                    let off = offsets[k].ok_or_else(|| CodegenError::Bug("modarray without a frame".into()))?;
                    let full_index = match (static_rank(array_ty), index) {
                        (Some(r), Index::Static(idx)) => Some(r == idx.len()),
                        _ => None,
                    };
                    if scalar_repr(&yty) && full_index == Some(true) {
                        self.store_elem(*data, off, *elem, y)?;
                    } else {
                        let _ = frame;
                        self.write_cell_checked(fx, *arr, off, y, &yty, n_index, rloc)?;
                    }
                }
                // Lanes of a fold over tuples combine together, below.
                OpState::Fold { fun: FoldFn::Lane { .. }, .. } => {}
                OpState::Fold { slot, ty, fun, partial, fix, done } => {
                    let (slot, ty, fun, partial, fix, done) =
                        (*slot, ty.clone(), *fun, partial.clone(), fix.clone(), *done);
                    self.fold_step(fx, slot, &ty, fun, &partial, fix.as_ref(), done, y, &yty, rloc)?;
                }
                OpState::Scan(st) => {
                    let off = offsets[k].ok_or_else(|| CodegenError::Bug("scan without a frame".into()))?;
                    self.scan_yield(fx, st, off, y, &yty)?;
                }
                OpState::Filter(st) => {
                    let off = offsets[k].ok_or_else(|| CodegenError::Bug("filter without a frame".into()))?;
                    // A filter yields its flag, then its value.
                    let (v, vv) = (ys[yi + 1], part.body.yields[yi + 1]);
                    let vty = fx.irf.ty(vv).clone();
                    self.filter_yield(fx, st, off, y, &yty, v, &vty)?;
                }
            }
        }
        self.fold_lanes(fx, w, part, states, &ys, stmt_loc)?;
        if let Some(end) = pcx.end {
            let mut all = self.ctx.bool_type().const_int(1, false);
            for st in states.iter() {
                if let OpState::Fold { done: Some(d), .. } = st {
                    let x = self.b.build_load(self.ctx.bool_type(), *d, "done")?.into_int_value();
                    all = self.b.build_and(all, x, "all")?;
                }
            }
            self.b.build_conditional_branch(all, end, next)?;
        } else {
            self.b.build_unconditional_branch(next)?;
        }
        self.b.position_at_end(next);
        Ok(())
    }

    /// Writes a genarray cell.
    #[allow(clippy::too_many_arguments)]
    fn write_gen(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        result: &Result<'ctx>,
        frame: &Frame<'ctx>,
        elem: BaseType,
        cell_static: Option<&[usize]>,
        off: IntValue<'ctx>,
        y: BasicValueEnum<'ctx>,
        yty: &Ty,
        rloc: PointerValue<'ctx>,
    ) -> R<()> {
        match result {
            Result::Eager { arr, data, cell_len } => {
                if scalar_repr(yty) && cell_static == Some(&[]) {
                    return self.store_elem(*data, off, elem, y);
                }
                if !scalar_repr(yty) && cell_static.is_some() && yty.shape.extents().as_deref() == cell_static {
                    let start = self.b.build_int_mul(off, *cell_len, "start")?;
                    let yp = y.into_pointer_value();
                    self.copy_elems(yp, self.const_i64(0), *arr, start, *cell_len, elem)?;
                    return self.dec(y);
                }
                self.write_cell_checked(fx, *arr, off, y, yty, frame.len, rloc)
            }
            Result::Lazy { slot } => {
                let cur = self.b.build_load(self.ptr(), *slot, "result")?.into_pointer_value();
                let none = self.b.build_is_null(cur, "none")?;
                let alloc_bb = self.ctx.append_basic_block(fx.func, "wl.first");
                let write_bb = self.ctx.append_basic_block(fx.func, "wl.write");
                self.b.build_conditional_branch(none, alloc_bb, write_bb)?;
                self.b.position_at_end(alloc_bb);
                let (cell_rank, cell_shape) = if scalar_repr(yty) {
                    (self.const_i64(0), self.i64_buffer(fx, 1, "cell")?)
                } else {
                    let p = y.into_pointer_value();
                    (self.rank(p)?, self.shape_ptr(p)?)
                };
                let a = self.alloc_frame(fx, elem, frame, cell_rank, cell_shape, true)?;
                self.b.build_store(*slot, a)?;
                self.b.build_unconditional_branch(write_bb)?;
                self.b.position_at_end(write_bb);
                let arr = self.b.build_load(self.ptr(), *slot, "result")?.into_pointer_value();
                self.write_cell_checked(fx, arr, off, y, yty, frame.len, rloc)
            }
        }
    }

    /// Writes a cell through the runtime (which checks its shape), then drops
    /// the cell.
    #[allow(clippy::too_many_arguments)]
    fn write_cell_checked(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        arr: PointerValue<'ctx>,
        off: IntValue<'ctx>,
        y: BasicValueEnum<'ctx>,
        yty: &Ty,
        frame_len: IntValue<'ctx>,
        rloc: PointerValue<'ctx>,
    ) -> R<()> {
        let any = Ty { elem: yty.elem, shape: compiler_core::sema::ty::Shape::AtLeast(0) };
        let cell = self.owned_to(fx, y, yty, &any)?;
        let r = self
            .call(
                self.rt.write_cell,
                &[
                    fx.ctxp.into(),
                    rloc.into(),
                    arr.into(),
                    off.into(),
                    cell.into(),
                    frame_len.into(),
                    self.i32().const_zero().into(),
                ],
            )?
            .ok_or_else(|| CodegenError::Bug("write_cell".into()))?
            .into_int_value();
        self.dec(cell)?;
        let failed = self.b.build_int_compare(IntPredicate::NE, r, self.i32().const_zero(), "failed")?;
        let cont = self.ctx.append_basic_block(fx.func, "ok");
        self.b.build_conditional_branch(failed, fx.fail_bb, cont)?;
        self.b.position_at_end(cont);
        Ok(())
    }

    /// One step of every fold over tuples among `states`: each group's
    /// accumulators and values (`ys`, what the part yielded) go to one call of
    /// its function, which returns the new accumulators.
    fn fold_lanes(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        w: &'a With,
        part: &'a Part,
        states: &[OpState<'ctx, 'a>],
        ys: &[BasicValueEnum<'ctx>],
        loc: PointerValue<'ctx>,
    ) -> R<()> {
        let mut k = 0;
        while k < states.len() {
            let OpState::Fold { fun: FoldFn::Lane { func, lanes, .. }, partial, .. } = &states[k] else {
                k += 1;
                continue;
            };
            let (func, lanes) = (*func, *lanes);
            let mut args = partial.clone();
            let mut accs = Vec::with_capacity(lanes);
            let mut values = Vec::with_capacity(lanes);
            for j in k..k + lanes {
                let Some(OpState::Fold { slot, ty, .. }) = states.get(j) else {
                    return Err(CodegenError::Bug("a fold over tuples lacks a lane".into()));
                };
                let acc = self.b.build_load(self.value_ty(ty), *slot, "acc")?;
                accs.push((*slot, acc, ty.clone()));
                let yi = w.yield_index(j);
                values.push((ys[yi], fx.irf.ty(part.body.yields[yi]).clone()));
            }
            args.extend(accs.iter().map(|(_, acc, ty)| (*acc, ty.clone())));
            args.extend(values.iter().cloned());
            let saved = fx.loc;
            fx.loc = loc;
            let results = self.call_function(fx, func, &args)?;
            fx.loc = saved;
            let callee = &self.ir.functions[func.0 as usize];
            if results.len() != lanes || callee.results.len() != lanes {
                return Err(CodegenError::Bug("a fold function over tuples returns the wrong number of values".into()));
            }
            let rtys = callee.results.clone();
            for (((slot, acc, ty), (y, yty)), (r, rty)) in
                accs.into_iter().zip(values).zip(results.into_iter().zip(rtys))
            {
                let next = self.owned_to(fx, r, &rty, &ty)?;
                if self.counted(&ty) {
                    self.dec(acc)?;
                }
                if self.counted(&yty) {
                    self.dec(y)?;
                }
                self.b.build_store(slot, next)?;
            }
            k += lanes;
        }
        Ok(())
    }

    /// One step of a fold: `acc = fun(partial…, acc, y)` (unless done).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn fold_step(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        slot: PointerValue<'ctx>,
        ty: &Ty,
        fun: &FoldFn,
        partial: &[(BasicValueEnum<'ctx>, Ty)],
        fix: Option<&(BasicValueEnum<'ctx>, Ty)>,
        done: Option<PointerValue<'ctx>>,
        y: BasicValueEnum<'ctx>,
        yty: &Ty,
        rloc: PointerValue<'ctx>,
    ) -> R<()> {
        let skip = if let Some(d) = done {
            let is_done = self.b.build_load(self.ctx.bool_type(), d, "done")?.into_int_value();
            let step_bb = self.ctx.append_basic_block(fx.func, "fold.step");
            let skip_bb = self.ctx.append_basic_block(fx.func, "fold.skip");
            self.b.build_conditional_branch(is_done, skip_bb, step_bb)?;
            self.b.position_at_end(step_bb);
            Some(skip_bb)
        } else {
            None
        };
        let acc = self.b.build_load(self.value_ty(ty), slot, "acc")?;
        let saved = fx.loc;
        fx.loc = rloc;
        let next = self.combine(fx, fun, partial, acc, ty, y, yty)?;
        fx.loc = saved;
        // SaC leaves a fold's order open: unless exact folds are asked for,
        // LLVM may reassociate `+` and `*` on floats (and so vectorise the
        // loop with partial accumulators).
        let reassociable = matches!(fun, FoldFn::Prim(Prim::Bin(BinOp::Add | BinOp::Mul)))
            && matches!(base(ty), BaseType::Float | BaseType::Double)
            && scalar_repr(ty);
        if reassociable
            && !self.exact_folds
            && let Some(i) = next.as_instruction_value()
        {
            const ALLOW_REASSOC: u32 = 1;
            i.set_fast_math_flags(ALLOW_REASSOC);
        }
        if self.counted(ty) {
            self.dec(acc)?;
        }
        if self.counted(yty) {
            self.dec(y)?;
        }
        self.b.build_store(slot, next)?;
        if let (Some((xv, xt)), Some(d)) = (fix, done) {
            let same = self.identical(fx, next, ty, *xv, xt)?;
            self.b.build_store(d, same)?;
        }
        if let Some(skip_bb) = skip {
            self.b.build_unconditional_branch(skip_bb)?;
            self.b.position_at_end(skip_bb);
        }
        Ok(())
    }

    /// `fun(partial…, acc, y)` as a value of type `ty` (owned).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn combine(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        fun: &FoldFn,
        partial: &[(BasicValueEnum<'ctx>, Ty)],
        acc: BasicValueEnum<'ctx>,
        ty: &Ty,
        y: BasicValueEnum<'ctx>,
        yty: &Ty,
    ) -> R<BasicValueEnum<'ctx>> {
        match fun {
            FoldFn::Prim(p) => {
                let ew = match p {
                    Prim::Bin(op) => Some(Ew::Bin(*op)),
                    Prim::Math(f) => Some(Ew::Math(*f)),
                    _ => None,
                };
                let mut args: Vec<(BasicValueEnum<'ctx>, Ty)> = partial.to_vec();
                args.push((acc, ty.clone()));
                args.push((y, yty.clone()));
                match ew {
                    Some(op) if partial.is_empty() => {
                        if scalar_repr(ty) && !scalar_repr(yty) {
                            // A scalar accumulator: the element is a scalar too.
                            let yv = self.unbox(fx, y, base(ty))?;
                            args[1] = (yv, ty.clone());
                        }
                        self.elementwise_vals(fx, op, &args, ty)
                    }
                    _ => self.prim_generic_vals(fx, p, &args, ty),
                }
            }
            FoldFn::Lane { .. } => Err(CodegenError::Bug("a lane of a fold over tuples combined alone".into())),
            FoldFn::Call(g) => {
                let mut args: Vec<(BasicValueEnum<'ctx>, Ty)> = partial.to_vec();
                args.push((acc, ty.clone()));
                args.push((y, yty.clone()));
                let mut r = self.call_function(fx, *g, &args)?;
                let callee = &self.ir.functions[g.0 as usize];
                let rty = callee
                    .results
                    .first()
                    .cloned()
                    .ok_or_else(|| CodegenError::Bug("fold function without a result".into()))?;
                let x = r.pop().ok_or_else(|| CodegenError::Bug("fold function without a result".into()))?;
                self.owned_to(fx, x, &rty, ty)
            }
        }
    }

    /// Whether a fold's operation is a primitive with a known identity (the
    /// start of every chunk but the first in a parallel fold).
    pub(crate) fn fold_identity(fun: &FoldFn, b: BaseType) -> Option<compiler_core::interp::value::Scalar> {
        use compiler_core::interp::value::Scalar;
        let FoldFn::Prim(Prim::Bin(op)) = fun else { return None };
        let int = |v: i64| Scalar::Int(b, v);
        Some(match (op, b) {
            (BinOp::Add, BaseType::Float) => Scalar::Float(-0.0),
            (BinOp::Add, BaseType::Double) => Scalar::Double(-0.0),
            (BinOp::Mul, BaseType::Float) => Scalar::Float(1.0),
            (BinOp::Mul, BaseType::Double) => Scalar::Double(1.0),
            (BinOp::Min, BaseType::Double) => Scalar::Double(f64::INFINITY),
            (BinOp::Max, BaseType::Double) => Scalar::Double(f64::NEG_INFINITY),
            (BinOp::Min, BaseType::Float) => Scalar::Float(f32::INFINITY),
            (BinOp::Max, BaseType::Float) => Scalar::Float(f32::NEG_INFINITY),
            (BinOp::And | BinOp::BitAnd, BaseType::Bool) => Scalar::Bool(true),
            (BinOp::Or | BinOp::BitOr | BinOp::BitXor, BaseType::Bool) => Scalar::Bool(false),
            (BinOp::Add | BinOp::BitOr | BinOp::BitXor, t) if t.is_integer() => int(0),
            (BinOp::Mul, t) if t.is_integer() => int(1),
            (BinOp::BitAnd, t) if t.is_integer() => int(compiler_core::interp::value::wrap_int(t, -1)),
            (BinOp::Min, t) if t.is_integer() => int(int_max(t)),
            (BinOp::Max, t) if t.is_integer() => int(int_min(t)),
            _ => return None,
        })
    }
}

fn int_max(t: BaseType) -> i64 {
    match t {
        BaseType::Byte => i8::MAX as i64,
        BaseType::Short => i16::MAX as i64,
        BaseType::Int => i32::MAX as i64,
        BaseType::UByte => u8::MAX as i64,
        BaseType::UShort => u16::MAX as i64,
        BaseType::UInt => u32::MAX as i64,
        BaseType::ULong | BaseType::ULongLong => -1,
        _ => i64::MAX,
    }
}

fn int_min(t: BaseType) -> i64 {
    match t {
        BaseType::Byte => i8::MIN as i64,
        BaseType::Short => i16::MIN as i64,
        BaseType::Int => i32::MIN as i64,
        BaseType::UByte | BaseType::UShort | BaseType::UInt | BaseType::ULong | BaseType::ULongLong => 0,
        _ => i64::MIN,
    }
}

/// The data and element width of the one result a streaming part
/// ([`PartCx::stream`]) writes; `None` for any other part.
fn streamed_result<'ctx>(pcx: &PartCx<'ctx, '_>, states: &[OpState<'ctx, '_>]) -> Option<(PointerValue<'ctx>, u64)> {
    if !pcx.stream {
        return None;
    }
    match states {
        [OpState::Gen { result: Result::Eager { data, .. }, elem, .. }] | [OpState::Mod { data, elem, .. }] => {
            Some((*data, super::elem_bytes(*elem)))
        }
        _ => None,
    }
}

/// A part's *row reads*, in body order, with the statements they need: the
/// selections of an array whose buffer the with-loop takes over (`reuse`)
/// anywhere but at the written index. `compiler_core::opt::snapshot` leaves
/// only reads at `[i, outer…]` (`i` the index on axis 0 of the with-loop's
/// only part), which must run when row `i` starts, before its cells
/// overwrite what they read (`static_part` runs them there). Anything else
/// reading the buffer across the index space is a compiler bug: the
/// with-loop would read elements it already overwrote.
fn row_reads<'a>(fx: &Fx<'_, 'a>, w: &'a With, part: &'a Part) -> R<Vec<&'a Stmt>> {
    use compiler_core::opt::index::Reader;
    let reused: Vec<ValueId> = w.reuse.iter().flatten().copied().collect();
    if reused.is_empty() {
        return Ok(Vec::new());
    }
    let reader = Reader::new(fx.irf, &*fx.defs);
    let at: compiler_core::HashMap<ValueId, usize> =
        part.body.stmts.iter().enumerate().flat_map(|(k, st)| st.defs.iter().map(move |d| (*d, k))).collect();
    let bug = |what: &str| Err(CodegenError::Bug(format!("a with-loop reads the buffer it takes over {what}")));
    // How a statement uses a reused buffer: `Some(true)` reads it across the
    // index space, `Some(false)` in a way that is always safe.
    let across = |st: &Stmt| -> Option<bool> {
        if !st.op.operands().iter().any(|v| reused.contains(v)) {
            return Some(false);
        }
        match &st.op {
            Op::Prim { prim: Prim::Shape | Prim::Dim | Prim::Size, .. } => Some(false),
            Op::Prim { prim: Prim::Sel | Prim::IdxSel, .. }
                if compiler_core::opt::reuse::at_written_index(part, &st.op, &reader) =>
            {
                Some(false)
            }
            Op::Prim { prim: Prim::Sel | Prim::IdxSel, args, checked: false, .. } if reused.contains(&args[1]) => {
                Some(true)
            }
            _ => None,
        }
    };
    let mut needed: Vec<bool> = vec![false; part.body.stmts.len()];
    let mut work: Vec<usize> = Vec::new();
    let mut stray = false;
    for (k, st) in part.body.stmts.iter().enumerate() {
        match across(st) {
            Some(true) => {
                needed[k] = true;
                work.push(k);
            }
            Some(false) => {}
            None => stray = true,
        }
        // Nested statements (as `reuse` checks them) may only read safely.
        st.op.walk_blocks(&mut |b| b.walk(&mut |inner| stray |= across(inner) != Some(false)));
    }
    if stray {
        return bug("other than by selections at the top of the part");
    }
    // What the reads need from the body: the row's index scalar, values from
    // outside and pure scalar arithmetic on them.
    let elsewhere: Vec<ValueId> =
        part.scalars.iter().flatten().skip(1).copied().chain(part.index).chain(part.offset).collect();
    while let Some(k) = work.pop() {
        let st = &part.body.stmts[k];
        if row_index(fx, part, st) {
            continue;
        }
        let pure = match &st.op {
            Op::Const(_) => true,
            // An index never allocated (read in place, or built in the frame).
            Op::Array(_) => fx.virt.contains(&st.defs[0]) || fx.stack.contains(&st.defs[0]),
            Op::Prim { prim: Prim::Sel | Prim::IdxSel, checked: false, .. } => scalar_repr(fx.irf.ty(st.defs[0])),
            Op::Prim { prim: Prim::Bin(BinOp::Add | BinOp::Sub | BinOp::Mul), args, .. } => {
                args.iter().all(|a| scalar_repr(fx.irf.ty(*a)))
            }
            // An offset in the array (its shape and an index built in place).
            Op::Prim { prim: Prim::Vect2Offset, .. } => true,
            _ => false,
        };
        if !pure || st.defs.len() != 1 {
            return bug("at an index it cannot read before the row starts");
        }
        for v in st.op.operands() {
            if elsewhere.contains(&v) {
                return bug("at an index that depends on more than the row");
            }
            if let Some(&j) = at.get(&v)
                && !needed[j]
            {
                needed[j] = true;
                work.push(j);
            }
        }
    }
    Ok(part.body.stmts.iter().zip(&needed).filter(|(_, n)| **n).map(|(st, _)| st).collect())
}

/// Whether `st` selects component 0 of `part`'s index vector (the row's index).
fn row_index(fx: &Fx<'_, '_>, part: &Part, st: &Stmt) -> bool {
    use compiler_core::opt::index::Def;
    let Op::Prim { prim: Prim::Sel, args, .. } = &st.op else { return false };
    part.index == Some(args[1])
        && matches!(fx.defs.get(&args[0]), Some(Def::Const(c))
            if compiler_core::opt::util::int_vec(c).as_deref() == Some(&[0]))
}

/// Whether a part writes every index between its bounds (no step or width
/// other than 1).
pub(crate) fn dense_part(fx: &Fx<'_, '_>, p: &compiler_core::ir::Part) -> bool {
    let ones = |v: ValueId| fx.consts.get(&v).and_then(|c| c.as_int_vec()).is_some_and(|v| v.iter().all(|&x| x == 1));
    p.step.is_none_or(ones) && p.width.is_none_or(ones)
}

/// Whether `part` (of index length `n_static` where that is static) runs as
/// one loop over its frame's row-major offsets: a flat part
/// (`compiler_core::opt::util::flat_part`) of run-time length, where the
/// alternative is an odometer, and one of static length 2 or more, where it
/// is a loop nest whose inner loop restarts every row (a 4000x4000
/// `!a | b` on bools, in rows of 4000 0.82-0.86 ms, C's one loop 0.76 ms:
/// flat, 0.92-0.97x the time on one thread of a Zen 5, 0.89-0.95x on two).
pub(crate) fn runs_flat(fx: &Fx<'_, '_>, w: &With, part: &Part, n_static: Option<usize>) -> bool {
    n_static.is_none_or(|n| n >= 2) && compiler_core::opt::util::flat_part(&*fx.defs, w, part)
}

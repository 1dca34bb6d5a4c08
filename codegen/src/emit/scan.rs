//! Scans and filters (L0's `scan` and `filter`) in with-loops.
//!
//! Both traverse their frame in row-major order whatever the parts are, while
//! the parts run one after the other, each in its own index order. So, as the
//! interpreter does, the loop nests only *store* what each index yields (an
//! index covered by several parts keeps the last part's value, or the first's
//! with `first_match`, whose mask skips the others), and one sequential pass
//! over the frame afterwards scans or compacts. The pass never runs in
//! parallel: `parallel_eligible` turns such with-loops down.
//!
//! Scalars (values, neutral element and result cells all statically scalar)
//! are stored unboxed in an array of the frame's size:
//!
//! * a scan writes its values into its result (or, when they have another
//!   element type than the accumulator, into a scratch array), marks the
//!   covered indices (no mark when a part covers the whole frame densely), and
//!   the pass replaces each value by the accumulator;
//! * a filter writes into a vector of the frame's size; with one part, whose
//!   loop nest visits indices in row-major order, a kept value goes straight
//!   to the next free place, otherwise values go to their index, flags to a
//!   mask, and the pass compacts in place. The vector is then cut to the
//!   number of values kept (`wl_take_cells`).
//!
//! Anything else (array cells, or values whose static type is not scalar) is
//! stored boxed: one owned array per index, null where none. The scan's pass
//! then replaces each slot by the accumulator there, the filter's compacts the
//! kept values, and `wl_stack_frame` lays the cells over the result's frame
//! with the interpreter's shape and type checks and messages.
//!
//! The combining function runs in the pass, after every part's body, as in the
//! interpreter, so errors and output come in the same order.

use compiler_core::ir::{FoldFn, ValueId, With};
use compiler_core::sema::hir::Elem;
use compiler_core::sema::ty::{Shape, Ty};
use compiler_core::syntax::ast::BaseType;
use inkwell::IntPredicate;
use inkwell::values::{BasicValueEnum, IntValue, PointerValue};

use super::withloop::Frame;
use super::{Emitter, Fx, R, Trips, base, elem_code, scalar_repr};
use crate::CodegenError;

/// The message of R0012 (the interpreter's).
const UNKNOWN_RESULT_SHAPE: &str = "the shape of this with-loop's result is unknown: no element was computed, and the shape of the elements is only known when they are";

/// A type of any shape with this element type (values as runtime arrays).
fn any_shape(elem: Elem) -> Ty {
    Ty { elem, shape: Shape::AtLeast(0) }
}

fn scalar_of(b: BaseType) -> Ty {
    Ty { elem: Elem::Base(b), shape: Shape::scalar() }
}

/// Where a scan keeps what the parts yield until its pass.
pub(crate) enum ScanStore<'ctx> {
    Scalars {
        /// The result array and its elements.
        result: PointerValue<'ctx>,
        data: PointerValue<'ctx>,
        /// Element `o`: the value at index `o` (`data` itself when the values
        /// have the result's element type).
        values: PointerValue<'ctx>,
        yelem: BaseType,
        /// Byte `o`: a part covered index `o` (none: a part covers every index).
        covered: Option<PointerValue<'ctx>>,
    },
    /// Slot `o`: the value at index `o` as an owned array, null where none.
    Boxed { slots: PointerValue<'ctx>, yty: Ty },
}

pub(crate) struct ScanState<'ctx, 'a> {
    pub frame: Frame<'ctx>,
    size: IntValue<'ctx>,
    pub fun: &'a FoldFn,
    partial: Vec<(BasicValueEnum<'ctx>, Ty)>,
    neutral: (BasicValueEnum<'ctx>, Ty),
    /// The result's type.
    ty: Ty,
    store: ScanStore<'ctx>,
}

/// How a scalar filter knows which values it keeps.
pub(crate) enum Kept<'ctx> {
    /// One part: a stack slot counting the values kept so far, which fill
    /// the result from the front.
    Count(PointerValue<'ctx>),
    /// Several parts: byte `o` is index `o`'s flag; values wait at their index.
    Flags(PointerValue<'ctx>),
}

pub(crate) enum FilterStore<'ctx> {
    /// A vector of the frame's size holding the values.
    Scalars { result: PointerValue<'ctx>, data: PointerValue<'ctx>, kept: Kept<'ctx> },
    /// Slot `o`: the value at index `o` as an owned array when its flag was
    /// true, else null.
    Boxed { slots: PointerValue<'ctx> },
}

pub(crate) struct FilterState<'ctx> {
    pub frame: Frame<'ctx>,
    size: IntValue<'ctx>,
    elem: BaseType,
    store: FilterStore<'ctx>,
    /// The cells' shape when nothing is kept (the operator's `cell` type);
    /// none: an empty result's shape is unknown (R0012, as in the interpreter).
    empty_cell: Option<Vec<usize>>,
}

impl<'ctx, 'a> Emitter<'ctx, 'a> {
    /// A scratch array of one cell of `elem` per index of `frame` (zeroed when
    /// `zero`), dropped with the with-loop's other scratch arrays; returns its
    /// elements.
    fn frame_scratch(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        elem: BaseType,
        frame: &Frame<'ctx>,
        zero: bool,
        scratch: &mut Vec<PointerValue<'ctx>>,
    ) -> R<PointerValue<'ctx>> {
        let none = self.i64_buffer(fx, 1, "cell")?;
        let a = self.alloc_frame(fx, elem, frame, self.const_i64(0), none, zero)?;
        scratch.push(a);
        self.data_ptr(a)
    }

    /// Prepares scan operator `k` of `w` (before the parts run).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn scan_state(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        w: &'a With,
        k: usize,
        shape: ValueId,
        fun: &'a FoldFn,
        partial: &[ValueId],
        neutral: ValueId,
        ty: Ty,
        scratch: &mut Vec<PointerValue<'ctx>>,
    ) -> R<ScanState<'ctx, 'a>> {
        let loc = fx.loc;
        let frame = self.shape_frame(fx, shape, loc, "scan", scratch)?;
        let size = self.frame_product(fx, &frame, self.const_i64(0))?;
        let nty = fx.irf.ty(neutral).clone();
        let elem = base(&ty);
        let ytys: Vec<Ty> = w.parts.iter().map(|p| fx.irf.ty(w.element_yield(p, k)).clone()).collect();
        let yelem = ytys.first().map_or(elem, base);
        let scalars = scalar_repr(&nty)
            && base(&nty) == elem
            && ty.elem != Elem::String
            && ytys.iter().all(|t| scalar_repr(t) && base(t) == yelem);
        let store = if scalars {
            let none = self.i64_buffer(fx, 1, "cell")?;
            let result = self.alloc_frame(fx, elem, &frame, self.const_i64(0), none, false)?;
            let data = self.data_ptr(result)?;
            let values = if yelem == elem { data } else { self.frame_scratch(fx, yelem, &frame, false, scratch)? };
            let covered = if self.covers_frame(fx, w, shape) {
                None
            } else {
                Some(self.frame_scratch(fx, BaseType::Bool, &frame, true, scratch)?)
            };
            ScanStore::Scalars { result, data, values, yelem, covered }
        } else {
            // One element type for every value: the combining code is
            // generated once, for all of them.
            let yelem = ytys.first().map_or(ty.elem, |t| t.elem);
            if ty.elem == Elem::String || ytys.iter().any(|t| t.elem != yelem) {
                return Err(CodegenError::Unsupported(
                    "a scan whose parts yield values of different element types (or strings)".into(),
                ));
            }
            let slots = self.frame_scratch(fx, BaseType::Long, &frame, true, scratch)?;
            ScanStore::Boxed { slots, yty: any_shape(yelem) }
        };
        let partial = self.typed_values(fx, partial)?;
        let neutral = (self.value(fx, neutral)?, nty);
        Ok(ScanState { frame, size, fun, partial, neutral, ty, store })
    }

    /// Stores what index `off` of a part yields for a scan (`y`, owned).
    pub(crate) fn scan_yield(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        st: &ScanState<'ctx, 'a>,
        off: IntValue<'ctx>,
        y: BasicValueEnum<'ctx>,
        yty: &Ty,
    ) -> R<()> {
        match &st.store {
            ScanStore::Scalars { values, yelem, covered, .. } => {
                self.store_elem(*values, off, *yelem, y)?;
                if let Some(c) = covered {
                    self.store_elem(*c, off, BaseType::Bool, self.ctx.bool_type().const_int(1, false).into())?;
                }
                Ok(())
            }
            ScanStore::Boxed { slots, .. } => self.put_slot(fx, *slots, off, y, yty),
        }
    }

    /// In a scan's pass: a `scan.join` block, and, where `covered` says index
    /// `i` was not covered by any part, a branch straight to it (the builder
    /// is left where a covered index's step goes).
    fn skip_uncovered(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        covered: Option<PointerValue<'ctx>>,
        i: IntValue<'ctx>,
    ) -> R<inkwell::basic_block::BasicBlock<'ctx>> {
        let join = self.ctx.append_basic_block(fx.func, "scan.join");
        if let Some(c) = covered {
            let hit = self.load_elem(c, i, BaseType::Bool)?.into_int_value();
            let step = self.ctx.append_basic_block(fx.func, "scan.step");
            self.b.build_conditional_branch(hit, step, join)?;
            self.b.position_at_end(step);
        }
        Ok(join)
    }

    /// The scan's pass over its frame; returns the result (owned, in the
    /// representation of the operator's type).
    pub(crate) fn scan_finish(&mut self, fx: &mut Fx<'ctx, 'a>, st: &ScanState<'ctx, 'a>) -> R<BasicValueEnum<'ctx>> {
        let elem = base(&st.ty);
        let any = any_shape(st.ty.elem);
        let (fun, partial) = (st.fun, st.partial.clone());
        match &st.store {
            ScanStore::Scalars { result, data, values, yelem, covered } => {
                let (data, values, yelem, covered) = (*data, *values, *yelem, *covered);
                let acc_ty = scalar_of(elem);
                let yty = scalar_of(yelem);
                let slot = self.alloca(fx, self.scalar_ty(elem), "scan.acc")?;
                self.b.build_store(slot, st.neutral.0)?;
                self.for_range(fx, Trips::Many, self.const_i64(0), st.size, &mut |e, fx, i| {
                    let join = e.skip_uncovered(fx, covered, i)?;
                    let y = e.load_elem(values, i, yelem)?;
                    let acc = e.b.build_load(e.scalar_ty(elem), slot, "acc")?;
                    let next = e.combine(fx, fun, &partial, acc, &acc_ty, y, &yty)?;
                    e.b.build_store(slot, next)?;
                    e.b.build_unconditional_branch(join)?;
                    e.b.position_at_end(join);
                    let acc = e.b.build_load(e.scalar_ty(elem), slot, "acc")?;
                    e.store_elem(data, i, elem, acc)
                })?;
                self.owned_to(fx, (*result).into(), &any, &st.ty)
            }
            ScanStore::Boxed { slots, yty } => {
                let (slots, yty) = (*slots, yty.clone());
                let (nv, nty) = st.neutral.clone();
                let mut temps = Vec::new();
                let init = self.borrowed_to(fx, nv, &nty, &any, &mut temps)?;
                if temps.is_empty() {
                    self.inc(init)?;
                }
                let slot = self.alloca(fx, self.ptr().into(), "scan.acc")?;
                self.b.build_store(slot, init)?;
                self.for_range(fx, Trips::Many, self.const_i64(0), st.size, &mut |e, fx, i| {
                    let p = e.gep(e.ptr(), slots, &[i], "slot")?;
                    let y = e.b.build_load(e.ptr(), p, "y")?.into_pointer_value();
                    let none = e.b.build_is_null(y, "none")?;
                    let step = e.ctx.append_basic_block(fx.func, "scan.step");
                    let join = e.ctx.append_basic_block(fx.func, "scan.join");
                    e.b.build_conditional_branch(none, join, step)?;
                    e.b.position_at_end(step);
                    let acc = e.b.build_load(e.ptr(), slot, "acc")?;
                    let next = e.combine(fx, fun, &partial, acc, &any, y.into(), &yty)?;
                    e.dec(acc)?;
                    e.dec(y.into())?;
                    e.b.build_store(slot, next)?;
                    e.b.build_unconditional_branch(join)?;
                    e.b.position_at_end(join);
                    // The slot now holds the accumulator at this index.
                    let acc = e.b.build_load(e.ptr(), slot, "acc")?;
                    e.inc(acc)?;
                    e.b.build_store(p, acc)?;
                    Ok(())
                })?;
                let acc = self.b.build_load(self.ptr(), slot, "acc")?;
                self.dec(acc)?;
                // The interpreter lays the accumulators over the frame with
                // the neutral element's shape as the cell shape.
                let (cell_rank, cell_shape) = if scalar_repr(&nty) {
                    (self.const_i64(0), self.i64_buffer(fx, 1, "cell")?)
                } else {
                    let p = nv.into_pointer_value();
                    (self.rank(p)?, self.shape_ptr(p)?)
                };
                let frame = st.frame.clone();
                let r = self.stack_frame(fx, elem, st.size, slots, &frame, cell_rank, cell_shape)?;
                self.owned_to(fx, r.into(), &any, &st.ty)
            }
        }
    }

    /// The pass over the frame of a scan over tuples (`group`: its lanes, in
    /// order): at every covered index, one call of the lanes' function with
    /// every accumulator and value; returns each lane's result. Lanes of
    /// scalars only (the compiled code's limitation; the interpreter scans
    /// tuples of arrays too).
    pub(crate) fn scan_finish_lanes(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        group: &[&ScanState<'ctx, 'a>],
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        let Some(first) = group.first() else { return Ok(Vec::new()) };
        let FoldFn::Lane { func, lanes, .. } = first.fun else {
            return Err(CodegenError::Bug("a scan over tuples without lanes".into()));
        };
        if group.len() != *lanes {
            return Err(CodegenError::Bug("a scan over tuples lacks lanes".into()));
        }
        let func = *func;
        struct Lane<'ctx> {
            data: PointerValue<'ctx>,
            values: PointerValue<'ctx>,
            elem: BaseType,
            yelem: BaseType,
            slot: PointerValue<'ctx>,
        }
        let mut ls = Vec::with_capacity(group.len());
        for st in group {
            let ScanStore::Scalars { data, values, yelem, .. } = &st.store else {
                return Err(CodegenError::Unsupported("a scan over tuples whose elements are arrays".into()));
            };
            let elem = base(&st.ty);
            let slot = self.alloca(fx, self.scalar_ty(elem), "scan.acc")?;
            self.b.build_store(slot, st.neutral.0)?;
            ls.push(Lane { data: *data, values: *values, elem, yelem: *yelem, slot });
        }
        // Every lane has the same parts, so the same covered indices.
        let covered = match &first.store {
            ScanStore::Scalars { covered, .. } => *covered,
            ScanStore::Boxed { .. } => None,
        };
        let partial = first.partial.clone();
        let callee = &self.ir.functions[func.0 as usize];
        let rtys = callee.results.clone();
        self.for_range(fx, Trips::Many, self.const_i64(0), first.size, &mut |e, fx, i| {
            let join = e.skip_uncovered(fx, covered, i)?;
            let mut args = partial.clone();
            for l in &ls {
                let acc = e.b.build_load(e.scalar_ty(l.elem), l.slot, "acc")?;
                args.push((acc, scalar_of(l.elem)));
            }
            for l in &ls {
                args.push((e.load_elem(l.values, i, l.yelem)?, scalar_of(l.yelem)));
            }
            let results = e.call_function(fx, func, &args)?;
            for ((l, r), rty) in ls.iter().zip(results).zip(&rtys) {
                let next = e.owned_to(fx, r, rty, &scalar_of(l.elem))?;
                e.b.build_store(l.slot, next)?;
            }
            e.b.build_unconditional_branch(join)?;
            e.b.position_at_end(join);
            for l in &ls {
                let acc = e.b.build_load(e.scalar_ty(l.elem), l.slot, "acc")?;
                e.store_elem(l.data, i, l.elem, acc)?;
            }
            Ok(())
        })?;
        let mut out = Vec::with_capacity(group.len());
        for st in group {
            let ScanStore::Scalars { result, .. } = &st.store else { continue };
            out.push(self.owned_to(fx, (*result).into(), &any_shape(st.ty.elem), &st.ty)?);
        }
        Ok(out)
    }

    /// Prepares filter operator `k` of `w` (before the parts run).
    pub(crate) fn filter_state(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        w: &'a With,
        k: usize,
        shape: ValueId,
        ty: &Ty,
        scratch: &mut Vec<PointerValue<'ctx>>,
    ) -> R<FilterState<'ctx>> {
        let loc = fx.loc;
        let frame = self.shape_frame(fx, shape, loc, "filter", scratch)?;
        let size = self.frame_product(fx, &frame, self.const_i64(0))?;
        let elem = base(ty);
        let flag_at = w.yield_index(k);
        for p in &w.parts {
            if fx.irf.ty(p.body.yields[flag_at]).elem != Elem::Base(BaseType::Bool) {
                return Err(CodegenError::Unsupported("a filter whose flag is not a bool".into()));
            }
        }
        let ytys: Vec<Ty> = w.parts.iter().map(|p| fx.irf.ty(w.element_yield(p, k)).clone()).collect();
        if ty.elem == Elem::String || ytys.iter().any(|t| t.elem != ty.elem) {
            return Err(CodegenError::Unsupported(
                "a filter whose values' element type is not its result's (or strings)".into(),
            ));
        }
        let empty_cell = w.cells.get(k).cloned().flatten().and_then(|t| t.shape.extents());
        let scalars = ytys.iter().all(scalar_repr) && empty_cell.as_deref().is_none_or(<[usize]>::is_empty);
        let store = if scalars {
            let shape_buf = self.i64_buffer(fx, 1, "filter.shape")?;
            self.b.build_store(shape_buf, size)?;
            let result = self.alloc_array(fx, elem, self.const_i64(1), shape_buf)?;
            let data = self.data_ptr(result)?;
            let kept = if w.parts.len() == 1 {
                let count = self.alloca(fx, self.i64().into(), "filter.count")?;
                self.b.build_store(count, self.const_i64(0))?;
                Kept::Count(count)
            } else {
                Kept::Flags(self.frame_scratch(fx, BaseType::Bool, &frame, true, scratch)?)
            };
            FilterStore::Scalars { result, data, kept }
        } else {
            FilterStore::Boxed { slots: self.frame_scratch(fx, BaseType::Long, &frame, true, scratch)? }
        };
        Ok(FilterState { frame, size, elem, store, empty_cell })
    }

    /// Stores what index `off` of a part yields for a filter: its flag and
    /// value (both owned).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn filter_yield(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        st: &FilterState<'ctx>,
        off: IntValue<'ctx>,
        flag: BasicValueEnum<'ctx>,
        fty: &Ty,
        y: BasicValueEnum<'ctx>,
        yty: &Ty,
    ) -> R<()> {
        let flag = if scalar_repr(fty) {
            flag.into_int_value()
        } else {
            let f = self.unbox(fx, flag, BaseType::Bool)?;
            self.dec(flag)?;
            f.into_int_value()
        };
        match &st.store {
            FilterStore::Scalars { data, kept: Kept::Count(count), .. } => {
                // The value goes to the next free place whatever its flag (in
                // bounds: fewer values were kept than indices visited before
                // this one); only a true flag claims the place.
                let n = self.b.build_load(self.i64(), *count, "kept")?.into_int_value();
                self.store_elem(*data, n, st.elem, y)?;
                let one = self.b.build_int_z_extend(flag, self.i64(), "one")?;
                let next = self.b.build_int_add(n, one, "kept")?;
                self.b.build_store(*count, next)?;
                Ok(())
            }
            FilterStore::Scalars { data, kept: Kept::Flags(flags), .. } => {
                self.store_elem(*data, off, st.elem, y)?;
                self.store_elem(*flags, off, BaseType::Bool, flag.into())
            }
            FilterStore::Boxed { slots } => {
                let any = any_shape(yty.elem);
                let cell = self.owned_to(fx, y, yty, &any)?.into_pointer_value();
                let null = self.ptr().const_null();
                let keep = self.b.build_select(flag, cell, null, "keep")?;
                let drop = self.b.build_select(flag, null, cell, "drop")?;
                self.dec(drop)?;
                self.put_slot(fx, *slots, off, keep, &any)
            }
        }
    }

    /// The filter's pass: the kept values, in row-major order of the frame.
    pub(crate) fn filter_finish(&mut self, fx: &mut Fx<'ctx, 'a>, st: &FilterState<'ctx>) -> R<BasicValueEnum<'ctx>> {
        let loc = fx.loc;
        let elem = st.elem;
        match &st.store {
            FilterStore::Scalars { result, data, kept } => {
                let n = match kept {
                    Kept::Count(count) => self.b.build_load(self.i64(), *count, "kept")?.into_int_value(),
                    Kept::Flags(flags) => {
                        let (data, flags) = (*data, *flags);
                        self.compact(fx, st.size, &mut |e, i, n| {
                            // Moves element `i` to `n` (n <= i) whatever its
                            // flag; a false flag leaves the place free.
                            let x = e.load_elem(data, i, elem)?;
                            e.store_elem(data, n, elem, x)?;
                            Ok(e.load_elem(flags, i, BaseType::Bool)?.into_int_value())
                        })?
                    }
                };
                if st.empty_cell.is_none() {
                    let none = self.b.build_int_compare(IntPredicate::EQ, n, self.const_i64(0), "none")?;
                    self.fail_if(fx, none, loc, "R0012", UNKNOWN_RESULT_SHAPE)?;
                }
                let r = self
                    .call(self.rt.take_cells, &[fx.ctxp.into(), (*result).into(), n.into()])?
                    .ok_or_else(|| CodegenError::Bug("take_cells".into()))?;
                self.check_error(fx)?;
                Ok(r)
            }
            FilterStore::Boxed { slots } => {
                let slots = *slots;
                let n = self.compact(fx, st.size, &mut |e, i, n| {
                    let p = e.gep(e.ptr(), slots, &[i], "slot")?;
                    let x = e.b.build_load(e.ptr(), p, "x")?.into_pointer_value();
                    let q = e.gep(e.ptr(), slots, &[n], "slot")?;
                    e.b.build_store(q, x)?;
                    Ok(e.b.build_is_not_null(x, "kept")?)
                })?;
                let frame_buf = self.i64_buffer(fx, 1, "filter.frame")?;
                self.b.build_store(frame_buf, n)?;
                let frame = Frame { len: self.const_i64(1), buf: frame_buf, ext: Some(vec![n]) };
                // The cells' shape is the first kept value's; the static cell
                // type's only when nothing is kept (the interpreter's rule).
                let (rank, cell) = match &st.empty_cell {
                    Some(c) => {
                        let buf = self.i64_buffer(fx, c.len() as u32, "cell")?;
                        for (d, e) in c.iter().enumerate() {
                            self.buf_set(buf, self.const_i64(d as i64), self.const_i64(*e as i64))?;
                        }
                        let some = self.b.build_int_compare(IntPredicate::SGT, n, self.const_i64(0), "some")?;
                        let r =
                            self.b.build_select(some, self.const_i64(-1), self.const_i64(c.len() as i64), "rank")?;
                        (r.into_int_value(), buf)
                    }
                    None => (self.const_i64(-1), self.i64_buffer(fx, 1, "cell")?),
                };
                let r = self.stack_frame(fx, elem, n, slots, &frame, rank, cell)?;
                Ok(r.into())
            }
        }
    }

    /// A compaction pass over `0..size`: `body(i, n)` moves element `i` to
    /// place `n` and says whether it is kept; returns how many were.
    fn compact(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        size: IntValue<'ctx>,
        body: &mut dyn FnMut(&mut Self, IntValue<'ctx>, IntValue<'ctx>) -> R<IntValue<'ctx>>,
    ) -> R<IntValue<'ctx>> {
        let count = self.alloca(fx, self.i64().into(), "kept")?;
        self.b.build_store(count, self.const_i64(0))?;
        self.for_range(fx, Trips::Many, self.const_i64(0), size, &mut |e, _fx, i| {
            let n = e.b.build_load(e.i64(), count, "n")?.into_int_value();
            let kept = body(e, i, n)?;
            let one = e.b.build_int_z_extend(kept, e.i64(), "one")?;
            let next = e.b.build_int_add(n, one, "n")?;
            e.b.build_store(count, next)?;
            Ok(())
        })?;
        Ok(self.b.build_load(self.i64(), count, "kept")?.into_int_value())
    }

    /// Puts an owned value (or null) into slot `off`, dropping what an earlier
    /// part left there (the last covering part wins).
    fn put_slot(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        slots: PointerValue<'ctx>,
        off: IntValue<'ctx>,
        y: BasicValueEnum<'ctx>,
        yty: &Ty,
    ) -> R<()> {
        let any = any_shape(yty.elem);
        let cell = self.owned_to(fx, y, yty, &any)?;
        let p = self.gep(self.ptr(), slots, &[off], "slot")?;
        let old = self.b.build_load(self.ptr(), p, "old")?;
        self.dec(old)?;
        self.b.build_store(p, cell)?;
        Ok(())
    }

    /// `wl_stack_frame` over `n` slots (consumed); the new array, failing on errors.
    #[allow(clippy::too_many_arguments)]
    fn stack_frame(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        elem: BaseType,
        n: IntValue<'ctx>,
        slots: PointerValue<'ctx>,
        frame: &Frame<'ctx>,
        cell_rank: IntValue<'ctx>,
        cell_shape: PointerValue<'ctx>,
    ) -> R<PointerValue<'ctx>> {
        let code = self.i32().const_int(elem_code(elem), false);
        let r = self
            .call(
                self.rt.stack_frame,
                &[
                    fx.ctxp.into(),
                    fx.loc.into(),
                    code.into(),
                    n.into(),
                    slots.into(),
                    frame.len.into(),
                    frame.buf.into(),
                    cell_rank.into(),
                    cell_shape.into(),
                ],
            )?
            .ok_or_else(|| CodegenError::Bug("stack_frame".into()))?
            .into_pointer_value();
        self.check_error(fx)?;
        Ok(r)
    }
}

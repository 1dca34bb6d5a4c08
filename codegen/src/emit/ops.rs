//! Statements: one IR op at a time.
//!
//! Fast paths emit inline code where the types say enough: scalar arithmetic,
//! element-wise operations, selection and update by index vector or offset,
//! `dim`/`shape`/`size`, array literals of scalars, calls, conditionals and
//! loops. Everything else (structural primitives such as `reshape` or `cat`,
//! printing, operations whose operands' ranks are unknown in ways the fast
//! paths do not cover) calls the runtime's generic primitive, which applies the
//! reference interpreter's implementation.

use compiler_core::HashSet;

use compiler_core::interp::ops::{BinOp, UnOp};
use compiler_core::ir::{Check, CheckOp, Op, Stmt, ValueId};
use compiler_core::sema::hir::{Elem, MathFn, Prim};
use compiler_core::sema::ty::{Shape, Ty};
use compiler_core::syntax::ast::BaseType;
use inkwell::IntPredicate;
use inkwell::values::{BasicValue, BasicValueEnum, IntValue, PointerValue};

use super::{Emitter, Fx, R, Trips, base, elem_bytes, elem_code, scalar_repr, signed};
use crate::CodegenError;
use crate::rt;

/// An element-wise operation.
#[derive(Clone, Copy)]
pub(crate) enum Ew {
    Bin(BinOp),
    Un(UnOp),
    Conv(BaseType),
    Math(MathFn),
}

impl Ew {
    fn result_base(self, operand: BaseType) -> BaseType {
        match self {
            Ew::Bin(op) => op.result_base(operand),
            Ew::Conv(to) => to,
            Ew::Math(MathFn::IsNan | MathFn::IsInf) => BaseType::Bool,
            _ => operand,
        }
    }
}

/// The statically known rank of a type.
pub(crate) fn static_rank(ty: &Ty) -> Option<usize> {
    ty.shape.rank_if_known()
}

/// The statically known extent `d` of a type.
pub(crate) fn static_extent(ty: &Ty, d: usize) -> Option<usize> {
    match &ty.shape {
        Shape::Fixed(dims) => dims.get(d).copied().flatten(),
        Shape::AtLeast(_) => None,
    }
}

impl<'ctx, 'a> Emitter<'ctx, 'a> {
    /// Emits one statement. `moved`: values it consumes that die here (their
    /// reference moves into it).
    pub fn stmt(&mut self, fx: &mut Fx<'ctx, 'a>, s: &'a Stmt, moved: &HashSet<ValueId>) -> R<()> {
        fx.loc = self.stmt_loc(s);
        match &s.op {
            Op::Const(v) => {
                let d = s.defs[0];
                let ty = fx.irf.ty(d);
                let x: BasicValueEnum<'ctx> = match v {
                    compiler_core::interp::value::Value::Str(bytes) => self.string_const(bytes).into(),
                    compiler_core::interp::value::Value::Scalar(sc) if scalar_repr(ty) => self.scalar_const(*sc),
                    other => self.array_const(other)?.into(),
                };
                fx.vals.insert(d, x);
            }
            Op::Prim { prim, args, checked, in_place } => {
                let d = s.defs[0];
                let x = self.prim(fx, prim, args, *checked, *in_place, moved, d)?;
                fx.vals.insert(d, x);
            }
            Op::Call { func, args } => self.call_op(fx, s, *func, args)?,
            Op::Array(elems) if fx.virt.contains(&s.defs[0]) => {
                // Never built: its users read the elements (null stands in for
                // reference counting, which ignores it).
                fx.comps.insert(s.defs[0], elems.clone());
                fx.vals.insert(s.defs[0], self.ptr().const_null().into());
            }
            Op::Array(elems) => {
                let d = s.defs[0];
                let x = self.array_literal(fx, elems, d)?;
                fx.vals.insert(d, x);
            }
            Op::If { cond, then_block, else_block } => self.if_op(fx, s, *cond, then_block, else_block)?,
            Op::Loop { init, params, cond, body, test_first, tiled } => {
                self.loop_op(fx, s, init, params, cond, body, *test_first, *tiled, moved)?
            }
            Op::With(w) => self.with_loop(fx, s, w, moved)?,
            Op::Check(c) => self.check_op(fx, c)?,
            Op::Fail { code, message, args } if args.is_empty() => {
                let loc = fx.loc;
                self.fail_now(fx, loc, code.id, message)?;
            }
            Op::Fail { code, message, args } => {
                let buf = self.args_buffer(fx, args)?;
                let (code, message) = (self.cstring(code.id), self.cstring(message));
                let n = self.const_i64(args.len() as i64);
                let loc = fx.loc;
                self.call(
                    self.rt.fail_args,
                    &[fx.ctxp.into(), loc.into(), code.into(), message.into(), n.into(), buf.into()],
                )?;
                self.goto_fail(fx)?;
            }
            Op::Narrow(v) => {
                let d = s.defs[0];
                let x = self.value(fx, *v)?;
                let mut temps = Vec::new();
                let y = self.borrowed_to(fx, x, fx.irf.ty(*v), fx.irf.ty(d), &mut temps)?;
                // A narrowed parameter borrows as the parameter does.
                if temps.is_empty() && self.counted(fx.irf.ty(d)) && !fx.borrowed.contains(&d) {
                    self.inc(y)?;
                }
                fx.vals.insert(d, y);
            }
            Op::Pattern { .. } => self.pattern_op(fx, s)?,
        }
        // Dead code may carry types that do not fit its values (inference gives
        // code that never runs no types, and dispatch keeps branches whose
        // conditions are false). Such a value becomes undefined, and reaching
        // it a compiler bug (B0001) rather than a crash.
        for d in &s.defs {
            let dty = fx.irf.ty(*d).clone();
            let want = self.value_ty(&dty);
            if let Some(x) = fx.vals.get(d).copied() {
                if x.is_pointer_value() && scalar_repr(&dty) && dty.elem != Elem::String {
                    // An array the types say is a scalar (an operand typed
                    // `int[*]` that a check proved scalar): its element.
                    let y = self.unbox(fx, x, base(&dty))?;
                    self.dec(x)?;
                    fx.vals.insert(*d, y);
                } else if x.get_type() != want {
                    let loc = fx.loc;
                    let msg = format!(
                        "%{} of type {} is represented as {} (a compiler bug)",
                        d.0,
                        fx.irf.ty(*d),
                        x.get_type()
                    );
                    self.fail_now(fx, loc, "B0001", &msg)?;
                    fx.vals.insert(*d, super::undef(want));
                }
            }
        }
        Ok(())
    }

    // ------------------------------------------------------------ conversions

    /// An owned value in another representation: a scalar boxed into a new
    /// rank-0 array, or an array's element 0 (the array's reference dropped).
    pub fn owned_to(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        v: BasicValueEnum<'ctx>,
        from: &Ty,
        to: &Ty,
    ) -> R<BasicValueEnum<'ctx>> {
        if super::is_undef(v) {
            // A yield of code that never runs.
            return Ok(super::undef(self.value_ty(to)));
        }
        match (scalar_repr(from), scalar_repr(to)) {
            (true, false) if to.elem != Elem::String => self.box_scalar(fx, v, base(from)),
            (false, true) if from.elem != Elem::String => {
                let x = self.unbox(fx, v, base(to))?;
                self.dec(v)?;
                Ok(x)
            }
            _ => Ok(v),
        }
    }

    /// A borrowed value in another representation; boxes it makes go to
    /// `temps` (the caller drops them after the use).
    pub fn borrowed_to(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        v: BasicValueEnum<'ctx>,
        from: &Ty,
        to: &Ty,
        temps: &mut Vec<BasicValueEnum<'ctx>>,
    ) -> R<BasicValueEnum<'ctx>> {
        match (scalar_repr(from), scalar_repr(to)) {
            (true, false) if to.elem != Elem::String => {
                let b = self.box_scalar(fx, v, base(from))?;
                temps.push(b);
                Ok(b)
            }
            (false, true) if from.elem != Elem::String => self.unbox(fx, v, base(to)),
            _ => Ok(v),
        }
    }

    /// A value the statement consumes: its reference moves in when it dies
    /// here, else the statement takes a new one.
    pub fn take(&mut self, fx: &Fx<'ctx, 'a>, v: ValueId, moved: &HashSet<ValueId>) -> R<BasicValueEnum<'ctx>> {
        let x = self.value(fx, v)?;
        if self.counted(fx.irf.ty(v)) && !moved.contains(&v) {
            self.inc(x)?;
        }
        Ok(x)
    }

    /// A scalar result in the representation of `d`'s type.
    fn scalar_result(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        x: BasicValueEnum<'ctx>,
        b: BaseType,
        d: ValueId,
    ) -> R<BasicValueEnum<'ctx>> {
        if scalar_repr(fx.irf.ty(d)) { Ok(x) } else { self.box_scalar(fx, x, b) }
    }

    // ------------------------------------------------------------ array facts

    /// The rank of an array value (a constant when its type knows it).
    pub fn rank_of(&mut self, a: PointerValue<'ctx>, ty: &Ty) -> R<IntValue<'ctx>> {
        match static_rank(ty) {
            Some(r) => Ok(self.const_i64(r as i64)),
            None => self.rank(a),
        }
    }

    /// Extent `d` of an array value (a constant when its type knows it).
    pub fn extent_of(&mut self, a: PointerValue<'ctx>, ty: &Ty, d: usize) -> R<IntValue<'ctx>> {
        match static_extent(ty, d) {
            Some(e) => Ok(self.const_i64(e as i64)),
            None => self.extent(a, self.const_i64(d as i64)),
        }
    }

    /// The number of elements of an array value.
    pub fn size_of(&mut self, a: PointerValue<'ctx>, ty: &Ty) -> R<IntValue<'ctx>> {
        match ty.shape.extents() {
            Some(e) => Ok(self.const_i64(e.iter().product::<usize>() as i64)),
            None => self.size(a),
        }
    }

    /// The length of a vector (rank-1 array) value.
    pub fn vec_len(&mut self, v: PointerValue<'ctx>, ty: &Ty) -> R<IntValue<'ctx>> {
        match static_extent(ty, 0) {
            Some(e) => Ok(self.const_i64(e as i64)),
            None => self.size(v),
        }
    }

    /// Element `i` of an integer array as an `i64`.
    pub fn int_elem(&mut self, v: PointerValue<'ctx>, ty: &Ty, i: IntValue<'ctx>) -> R<IntValue<'ctx>> {
        let b = base(ty);
        let data = self.data_ptr(v)?;
        let x = self.load_elem(data, i, b)?.into_int_value();
        self.widen(x, b)
    }

    /// An integer scalar as an `i64` (sign- or zero-extended by its type).
    pub fn widen(&mut self, x: IntValue<'ctx>, b: BaseType) -> R<IntValue<'ctx>> {
        let i64t = self.i64();
        if x.get_type().get_bit_width() == 64 {
            return Ok(x);
        }
        Ok(if signed(b) || b == BaseType::Char {
            self.b.build_int_s_extend(x, i64t, "wide")?
        } else {
            self.b.build_int_z_extend(x, i64t, "wide")?
        })
    }

    /// An `i64` as an `int` scalar (wrapping, as the interpreter's `Scalar::int`).
    pub fn as_int(&mut self, x: IntValue<'ctx>) -> R<IntValue<'ctx>> {
        Ok(self.b.build_int_truncate_or_bit_cast(x, self.i32(), "int")?)
    }

    /// The product of `factor(d)` for `d` in `lo..hi` (1 when empty), as an
    /// `i64`: over an array's axes (a scalar loop).
    pub fn product_range(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        lo: IntValue<'ctx>,
        hi: IntValue<'ctx>,
        factor: &mut dyn FnMut(&mut Self, IntValue<'ctx>) -> R<IntValue<'ctx>>,
    ) -> R<IntValue<'ctx>> {
        let acc = self.alloca(fx, self.i64().into(), "prod")?;
        self.b.build_store(acc, self.const_i64(1))?;
        self.for_range(fx, Trips::Few, lo, hi, &mut |e, _fx, d| {
            let x = factor(e, d)?;
            let p = e.b.build_load(e.i64(), acc, "prod")?.into_int_value();
            let p = e.b.build_int_mul(p, x, "prod")?;
            e.b.build_store(acc, p)?;
            Ok(())
        })?;
        Ok(self.b.build_load(self.i64(), acc, "prod")?.into_int_value())
    }

    /// `for i in lo..hi { body(i) }`, `trips` saying whether LLVM may
    /// vectorise and interleave it.
    pub fn for_range(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        trips: Trips,
        lo: IntValue<'ctx>,
        hi: IntValue<'ctx>,
        body: &mut dyn FnMut(&mut Self, &mut Fx<'ctx, 'a>, IntValue<'ctx>) -> R<()>,
    ) -> R<()> {
        let pre = self.b.get_insert_block().ok_or_else(|| CodegenError::Bug("no insert block".into()))?;
        let loop_bb = self.ctx.append_basic_block(fx.func, "loop");
        let exit_bb = self.ctx.append_basic_block(fx.func, "loop.exit");
        let nonempty = self.b.build_int_compare(IntPredicate::SLT, lo, hi, "nonempty")?;
        self.b.build_conditional_branch(nonempty, loop_bb, exit_bb)?;
        self.b.position_at_end(loop_bb);
        let phi = self.b.build_phi(self.i64(), "i")?;
        phi.add_incoming(&[(&lo, pre)]);
        let i = phi.as_basic_value().into_int_value();
        body(self, fx, i)?;
        let next = self.b.build_int_add(i, self.const_i64(1), "i.next")?;
        let more = self.b.build_int_compare(IntPredicate::SLT, next, hi, "more")?;
        let latch = self.b.get_insert_block().ok_or_else(|| CodegenError::Bug("no insert block".into()))?;
        phi.add_incoming(&[(&next, latch)]);
        let back = self.b.build_conditional_branch(more, loop_bb, exit_bb)?;
        match trips {
            Trips::Few => self.small_loop_hints(back),
            Trips::Many => self.loop_hints(back),
        }
        self.b.position_at_end(exit_bb);
        Ok(())
    }

    // ------------------------------------------------------------ primitives

    #[allow(clippy::too_many_arguments)]
    fn prim(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        prim: &'a Prim,
        args: &[ValueId],
        checked: bool,
        in_place: bool,
        moved: &HashSet<ValueId>,
        d: ValueId,
    ) -> R<BasicValueEnum<'ctx>> {
        if let Prim::Bin(op @ (BinOp::Add | BinOp::Sub)) = prim
            && let Some(x) = self.wide_sum(fx, *op, args, d)?
        {
            return Ok(x);
        }
        let ty = |v: ValueId| fx.irf.ty(v);
        let all_arrays_known = args.iter().all(|a| ty(*a).elem != Elem::String);
        match prim {
            Prim::Bin(op) if all_arrays_known => self.elementwise(fx, Ew::Bin(*op), args, d),
            Prim::Un(op) if all_arrays_known => self.elementwise(fx, Ew::Un(*op), args, d),
            Prim::Conv(to) if all_arrays_known => self.elementwise(fx, Ew::Conv(*to), args, d),
            Prim::Math(f) if all_arrays_known => self.elementwise(fx, Ew::Math(*f), args, d),
            Prim::Dim | Prim::Size if ty(args[0]).elem != Elem::String => {
                let a = args[0];
                let x = if scalar_repr(ty(a)) {
                    self.const_i64(if *prim == Prim::Dim { 0 } else { 1 })
                } else {
                    let p = self.value(fx, a)?.into_pointer_value();
                    let t = ty(a).clone();
                    if *prim == Prim::Dim { self.rank_of(p, &t)? } else { self.size_of(p, &t)? }
                };
                let x = self.as_int(x)?;
                self.scalar_result(fx, x.into(), BaseType::Int, d)
            }
            Prim::Shape if fx.shape_views.contains_key(&d) => {
                // Never built: its selections read `args[0]`'s descriptor
                // (null stands in for reference counting, which ignores it).
                Ok(self.ptr().const_null().into())
            }
            Prim::Sel if fx.shape_views.contains_key(&args[1]) => {
                let a = fx.shape_views[&args[1]];
                let k = fx.consts.get(&args[0]).and_then(|c| c.as_int_vec()).and_then(|k| k.first().copied());
                let k = k.ok_or_else(|| CodegenError::Bug("an extent read at a non-constant index".into()))?;
                let p = self.value(fx, a)?.into_pointer_value();
                let aty = ty(a).clone();
                if checked && static_rank(&aty).is_none_or(|r| k < 0 || k as usize >= r) {
                    // Out of bounds unless `k` < rank; the failure (cold) builds
                    // the vector for the interpreter's message.
                    let rank = self.rank_of(p, &aty)?;
                    let bad = self.b.build_int_compare(IntPredicate::UGE, self.const_i64(k), rank, "oob")?;
                    let iv = self.value(fx, args[0])?;
                    let loc = fx.loc;
                    self.failing_when(fx, bad, &mut |e| {
                        let shape = e
                            .call(e.rt.shape_vector, &[fx.ctxp.into(), p.into()])?
                            .ok_or_else(|| CodegenError::Bug("shape".into()))?;
                        let no = e.i32().const_zero();
                        let at =
                            [fx.ctxp.into(), loc.into(), iv.into(), e.const_i64(0).into(), shape.into(), no.into()];
                        e.call(e.rt.fail_index, &at)?;
                        Ok(())
                    })?;
                }
                let e = self.extent_of(p, &aty, k as usize)?;
                let e = self.as_int(e)?;
                self.scalar_result(fx, e.into(), BaseType::Int, d)
            }
            Prim::Shape if fx.stack.contains(&d) => {
                // In the frame (`stack_vectors`): the extents, from the descriptor.
                let aty = ty(args[0]).clone();
                let n = static_extent(ty(d), 0)
                    .ok_or_else(|| CodegenError::Bug("a stack shape of unknown length".into()))?;
                let a = self.value(fx, args[0])?.into_pointer_value();
                let (out, data) = self.stack_vector(fx, n)?;
                for k in 0..n {
                    let e = self.extent_of(a, &aty, k)?;
                    let x = self.as_int(e)?;
                    self.store_elem(data, self.const_i64(k as i64), BaseType::Int, x.into())?;
                }
                Ok(out.into())
            }
            Prim::Shape if !scalar_repr(ty(args[0])) && ty(args[0]).elem != Elem::String => {
                let a = self.value(fx, args[0])?;
                let r = self.call(self.rt.shape_vector, &[fx.ctxp.into(), a.into()])?;
                self.check_error(fx)?;
                r.ok_or_else(|| CodegenError::Bug("shape".into()))
            }
            Prim::Sel if !scalar_repr(ty(args[1])) && ty(args[0]).elem != Elem::String => {
                self.sel(fx, args, checked, d)
            }
            Prim::Modarray if !scalar_repr(ty(args[0])) => self.modarray(fx, args, checked, in_place, moved),
            Prim::IdxSel if !scalar_repr(ty(args[1])) && scalar_repr(ty(args[0])) => self.idx_sel(fx, args, checked, d),
            Prim::IdxModarray if !scalar_repr(ty(args[0])) && scalar_repr(ty(args[1])) && scalar_repr(ty(args[2])) => {
                self.idx_modarray(fx, args, checked, in_place, moved)
            }
            Prim::Vect2Offset if !scalar_repr(ty(args[0])) && !scalar_repr(ty(args[1])) => {
                // The exact offset (an `i64`) addresses memory; a truncated `int`
                // sign-extended again would hide from LLVM that it is affine.
                let (wide, extents) = self.vect2offset(fx, args)?;
                fx.wide.insert(d, wide);
                if let (Some(extents), Some(index)) = (extents, fx.consts.get(&args[1]).and_then(|c| c.as_int_vec())) {
                    // A chunk function recomputes it as a plain `int` (not a boxed `int[*]`).
                    if index.len() == extents.len() && !index.is_empty() && scalar_repr(ty(d)) {
                        fx.offset_extents.insert(d, (args[0], extents[1..].to_vec(), index));
                    }
                }
                let x = self.as_int(wide)?;
                self.scalar_result(fx, x.into(), BaseType::Int, d)
            }
            Prim::MatMul if !scalar_repr(ty(args[0])) && !scalar_repr(ty(args[1])) && !scalar_repr(ty(d)) => {
                self.matmul(fx, args)
            }
            Prim::Reshape
                if !scalar_repr(ty(args[0]))
                    && !scalar_repr(ty(args[1]))
                    && !scalar_repr(ty(d))
                    && ty(args[1]).elem != Elem::String =>
            {
                // Inline, not through the interpreter's values: the same array
                // when the shape does not change, else one copy of the bytes.
                let shp = self.value(fx, args[0])?;
                let a = self.value(fx, args[1])?;
                let loc = fx.loc;
                let r = self
                    .call(self.rt.reshape, &[fx.ctxp.into(), loc.into(), shp.into(), a.into()])?
                    .ok_or_else(|| CodegenError::Bug("wl_reshape".into()))?;
                self.check_error(fx)?;
                Ok(r)
            }
            Prim::Hide(_) => {
                // `_hideShape_SxA_(0, a)`: the value is the last argument.
                let a = *args.last().ok_or_else(|| CodegenError::Bug("hide without arguments".into()))?;
                let x = self.value(fx, a)?;
                let mut temps = Vec::new();
                let y = self.borrowed_to(fx, x, ty(a), ty(d), &mut temps)?;
                if temps.is_empty() && self.counted(ty(d)) {
                    self.inc(y)?;
                }
                // A hidden scalar is unknown to LLVM too (sac2c's primitive
                // blocks constant folding): through a volatile slot, so that
                // `0.0 / 0.0` divides at run time (x86 gives -nan, LLVM's
                // folding nan) as the interpreter's does.
                if matches!(y, BasicValueEnum::IntValue(_) | BasicValueEnum::FloatValue(_)) {
                    let slot = self.alloca(fx, y.get_type(), "hidden")?;
                    let store = self.b.build_store(slot, y)?;
                    store.set_volatile(true).map_err(|e| CodegenError::Bug(e.to_string()))?;
                    let load = self.b.build_load(y.get_type(), slot, "hidden")?;
                    if let Some(i) = load.as_instruction_value() {
                        i.set_volatile(true).map_err(|e| CodegenError::Bug(e.to_string()))?;
                    }
                    return Ok(load);
                }
                Ok(y)
            }
            _ => self.prim_generic(fx, prim, args, d),
        }
    }

    /// `matmul(a, b, frame, upper)` (the `gemm` pass's): a new `frame[0] ×
    /// frame[1]` array of doubles filled by the runtime's blocked product
    /// (`wl_gemm_f64`), its multiply-adds fused unless folds are exact.
    fn matmul(&mut self, fx: &mut Fx<'ctx, 'a>, args: &[ValueId]) -> R<BasicValueEnum<'ctx>> {
        let (aty, bty) = (fx.irf.ty(args[0]).clone(), fx.irf.ty(args[1]).clone());
        let a = self.value(fx, args[0])?.into_pointer_value();
        let b = self.value(fx, args[1])?.into_pointer_value();
        let m = self.int_component(fx, args[2], 0)?;
        let n = self.int_component(fx, args[2], 1)?;
        let l = self.int_component(fx, args[3], 0)?;
        let lda = self.extent_of(a, &aty, 1)?;
        let ldb = self.extent_of(b, &bty, 1)?;
        let shape = self.i64_buffer(fx, 2, "shape")?;
        for (k, e) in [m, n].into_iter().enumerate() {
            let p = self.gep(self.i64(), shape, &[self.const_i64(k as i64)], "ext")?;
            self.b.build_store(p, e)?;
        }
        let out = self.alloc_array(fx, BaseType::Double, self.const_i64(2), shape)?;
        let (ad, bd, cd) = (self.data_ptr(a)?, self.data_ptr(b)?, self.data_ptr(out)?);
        let fused = self.i32().const_int(u64::from(!self.exact_folds), false);
        let call = [
            fx.ctxp.into(),
            m.into(),
            n.into(),
            l.into(),
            ad.into(),
            lda.into(),
            bd.into(),
            ldb.into(),
            cd.into(),
            fused.into(),
        ];
        self.call(self.rt.gemm_f64, &call)?;
        self.check_error(fx)?;
        Ok(out.into())
    }

    /// Component `k` of int vector `v` as an `i64`: a constant, or read from
    /// the vector's elements.
    fn int_component(&mut self, fx: &Fx<'ctx, 'a>, v: ValueId, k: usize) -> R<IntValue<'ctx>> {
        if let Some(c) = fx.consts.get(&v).and_then(|c| c.as_int_vec()).and_then(|c| c.get(k).copied()) {
            return Ok(self.const_i64(c));
        }
        let p = self.value(fx, v)?.into_pointer_value();
        let ty = fx.irf.ty(v).clone();
        self.int_elem(p, &ty, self.const_i64(k as i64))
    }

    /// `x + y` / `x - y` on `int` scalars where one operand is an offset or
    /// index component with an exact `i64` form (see [`Fx::wide`]) and the
    /// other small (a constant below 2^24, an array's extent, such a value
    /// less another, a wide form): computed in `i64` (`nsw`: far from
    /// overflowing), recorded as `d`'s wide form, and truncated for its `int`
    /// value (the same bits as the wrapping `i32` operation, as long as the
    /// exact sum fits an `int`, which indices into arrays of fewer than 2^31
    /// elements shifted by such values do).
    fn wide_sum(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        op: BinOp,
        args: &[ValueId],
        d: ValueId,
    ) -> R<Option<BasicValueEnum<'ctx>>> {
        let is_int = |v: ValueId| {
            let t = fx.irf.ty(v);
            scalar_repr(t) && t.elem == Elem::Base(BaseType::Int)
        };
        if args.len() != 2 || !is_int(d) || !args.iter().all(|a| is_int(*a)) {
            return Ok(None);
        }
        if !args.iter().any(|a| fx.wide.contains_key(a)) {
            return Ok(None);
        }
        // The exact sum is the `int` the program computes only where it
        // fits: the other operand must be small (a constant below 2^24, an
        // extent of an array, another such sum), not any `int` (`i + n` with
        // `n = 2147483647` twice wraps back to `i`, and the exact sum read 2^32
        // elements away).
        fn bounded(fx: &Fx<'_, '_>, v: ValueId, depth: usize) -> bool {
            use compiler_core::opt::index::Def;
            if fx.wide.contains_key(&v) {
                return true;
            }
            let small = |c: &compiler_core::interp::value::Value| {
                c.as_int_vec().is_some_and(|c| c.len() == 1 && c[0].abs() < 1 << 24)
            };
            if let Some(c) = fx.consts.get(&v) {
                return small(c);
            }
            match fx.defs.get(&v) {
                Some(Def::Const(c)) => small(c),
                Some(Def::Prim(Prim::Sel | Prim::IdxSel, a)) if a.len() == 2 => {
                    matches!(fx.defs.get(&a[1]), Some(Def::Prim(Prim::Shape, _))) || fx.shape_views.contains_key(&a[1])
                }
                Some(Def::Prim(Prim::Dim | Prim::Size, _)) => true,
                // An extent less a constant (`n - 1`), and the like.
                Some(Def::Prim(Prim::Bin(BinOp::Add | BinOp::Sub), a)) if a.len() == 2 && depth < 2 => {
                    a.iter().all(|x| bounded(fx, *x, depth + 1))
                }
                Some(Def::Prim(Prim::Un(UnOp::Neg), a)) if a.len() == 1 && depth < 2 => bounded(fx, a[0], depth + 1),
                _ => false,
            }
        }
        if !args.iter().all(|a| bounded(fx, *a, 0)) {
            return Ok(None);
        }
        let x = self.index_i64(fx, args[0])?;
        let y = self.index_i64(fx, args[1])?;
        let w = match op {
            BinOp::Add => self.b.build_int_nsw_add(x, y, "woff")?,
            _ => self.b.build_int_nsw_sub(x, y, "woff")?,
        };
        fx.wide.insert(d, w);
        Ok(Some(self.as_int(w)?.into()))
    }

    /// An integer scalar used as an offset or index component, as an `i64`:
    /// its exact wide form when it has one, else sign- or zero-extended.
    pub fn index_i64(&mut self, fx: &Fx<'ctx, 'a>, v: ValueId) -> R<IntValue<'ctx>> {
        if let Some(w) = fx.wide.get(&v) {
            return Ok(*w);
        }
        let x = self.value(fx, v)?.into_int_value();
        self.widen(x, base(fx.irf.ty(v)))
    }

    /// Any primitive through the runtime (the interpreter's implementation).
    fn prim_generic(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        prim: &Prim,
        args: &[ValueId],
        d: ValueId,
    ) -> R<BasicValueEnum<'ctx>> {
        let vals = self.typed_values(fx, args)?;
        let dty = fx.irf.ty(d).clone();
        self.prim_generic_vals(fx, prim, &vals, &dty)
    }

    /// Values with their types.
    pub fn typed_values(&self, fx: &Fx<'ctx, 'a>, args: &[ValueId]) -> R<Vec<(BasicValueEnum<'ctx>, Ty)>> {
        args.iter().map(|a| Ok((self.value(fx, *a)?, fx.irf.ty(*a).clone()))).collect()
    }

    /// [`Self::prim_generic`] on values: the result has type `dty`'s representation.
    pub fn prim_generic_vals(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        prim: &Prim,
        args: &[(BasicValueEnum<'ctx>, Ty)],
        dty: &Ty,
    ) -> R<BasicValueEnum<'ctx>> {
        let buf = self.args_buffer_vals(fx, args)?;
        let out = self.alloca(fx, self.rt.arg.into(), "out")?;
        let name = self.cstring(&compiler_core::ir::print::prim_name(prim));
        let boxed = self.i32().const_int((!scalar_repr(dty)) as u64, false);
        let n = self.const_i64(args.len() as i64);
        let loc = fx.loc;
        let r = self
            .call(
                self.rt.prim,
                &[fx.ctxp.into(), loc.into(), name.into(), n.into(), buf.into(), out.into(), boxed.into()],
            )?
            .ok_or_else(|| CodegenError::Bug("wl_prim".into()))?
            .into_int_value();
        let failed = self.b.build_int_compare(IntPredicate::NE, r, self.i32().const_zero(), "failed")?;
        let cont = self.ctx.append_basic_block(fx.func, "ok");
        self.b.build_conditional_branch(failed, fx.fail_bb, cont)?;
        self.b.position_at_end(cont);
        self.read_arg(out, dty)
    }

    /// Reads a `WlArg` the runtime wrote as a value of type `ty`.
    pub fn read_arg(&mut self, arg: PointerValue<'ctx>, ty: &Ty) -> R<BasicValueEnum<'ctx>> {
        if scalar_repr(ty) {
            let p = self.b.build_struct_gep(self.rt.arg, arg, 2, "bits")?;
            let bits = self.b.build_load(self.i64(), p, "bits")?.into_int_value();
            self.scalar_from_bits(bits, base(ty))
        } else {
            let p = self.b.build_struct_gep(self.rt.arg, arg, 3, "ptr")?;
            Ok(self.b.build_load(self.ptr(), p, "arr")?)
        }
    }

    /// A stack buffer of `WlArg`s describing `args` (borrowed).
    pub fn args_buffer(&mut self, fx: &Fx<'ctx, 'a>, args: &[ValueId]) -> R<PointerValue<'ctx>> {
        let vals = self.typed_values(fx, args)?;
        self.args_buffer_vals(fx, &vals)
    }

    /// [`Self::args_buffer`] on values.
    pub fn args_buffer_vals(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        args: &[(BasicValueEnum<'ctx>, Ty)],
    ) -> R<PointerValue<'ctx>> {
        let n = args.len().max(1) as u32;
        let buf = self.alloca(fx, self.rt.arg.array_type(n).into(), "args")?;
        for (k, (x, ty)) in args.iter().enumerate() {
            let slot = self.gep(self.rt.arg, buf, &[self.const_i64(k as i64)], "arg")?;
            self.write_arg(slot, *x, ty)?;
        }
        Ok(buf)
    }

    /// Fills one `WlArg`.
    pub fn write_arg(&mut self, slot: PointerValue<'ctx>, x: BasicValueEnum<'ctx>, ty: &Ty) -> R<()> {
        let i32t = self.i32();
        let (kind, elem, bits, ptr): (u64, u64, IntValue<'ctx>, PointerValue<'ctx>) = if ty.elem == Elem::String {
            let p = x.into_pointer_value();
            let len = self.b.build_load(self.i64(), p, "len")?.into_int_value();
            let bytes = self.gep(self.ctx.i8_type(), p, &[self.const_i64(8)], "bytes")?;
            (rt::ARG_STRING, 0, len, bytes)
        } else if scalar_repr(ty) {
            let b = base(ty);
            let bits = self.bits_of(x, b)?;
            (rt::ARG_SCALAR, elem_code(b), bits, self.ptr().const_null())
        } else {
            (rt::ARG_ARRAY, elem_code(base(ty)), self.i64().const_zero(), x.into_pointer_value())
        };
        let fields: [(u32, BasicValueEnum<'ctx>); 4] = [
            (0, i32t.const_int(kind, false).into()),
            (1, i32t.const_int(elem, false).into()),
            (2, bits.into()),
            (3, ptr.into()),
        ];
        for (i, v) in fields {
            let p = self.b.build_struct_gep(self.rt.arg, slot, i, "field")?;
            self.b.build_store(p, v)?;
        }
        Ok(())
    }

    /// An element-wise operation with scalar extension (loops over arrays).
    fn elementwise(&mut self, fx: &mut Fx<'ctx, 'a>, op: Ew, args: &[ValueId], d: ValueId) -> R<BasicValueEnum<'ctx>> {
        let vals = self.typed_values(fx, args)?;
        let dty = fx.irf.ty(d).clone();
        let in_frame = fx.stack.contains(&d);
        self.elementwise_into(fx, op, &vals, &dty, in_frame)
    }

    /// An element-wise operation on values; the result has `dty`'s representation.
    pub fn elementwise_vals(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        op: Ew,
        args: &[(BasicValueEnum<'ctx>, Ty)],
        dty: &Ty,
    ) -> R<BasicValueEnum<'ctx>> {
        self.elementwise_into(fx, op, args, dty, false)
    }

    /// [`Self::elementwise_vals`]; `in_frame`: the result is a stack vector
    /// (`stack_vectors`: an `int` vector of static length).
    fn elementwise_into(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        op: Ew,
        args: &[(BasicValueEnum<'ctx>, Ty)],
        dty: &Ty,
        in_frame: bool,
    ) -> R<BasicValueEnum<'ctx>> {
        let mut tys: Vec<Ty> = args.iter().map(|(_, t)| t.clone()).collect();
        let mut vals: Vec<BasicValueEnum<'ctx>> = args.iter().map(|(v, _)| *v).collect();
        if scalar_repr(dty) {
            // A scalar result: every operand is a scalar at run time, whatever
            // its static type says.
            for (v, t) in vals.iter_mut().zip(tys.iter_mut()) {
                if !scalar_repr(t) {
                    *v = self.unbox(fx, *v, base(t))?;
                    *t = Ty { elem: t.elem, shape: Shape::scalar() };
                }
            }
        }
        let operand = base(&tys[0]);
        let rb = op.result_base(operand);
        let loc = fx.loc;
        if tys.iter().all(scalar_repr) {
            let x = self.scalar_op(fx, op, operand, &vals, loc)?;
            return if scalar_repr(dty) { Ok(x) } else { self.box_scalar(fx, x, rb) };
        }
        // The operand whose shape the result takes: the first array of rank > 0.
        let arrays: Vec<usize> = (0..args.len()).filter(|k| !scalar_repr(&tys[*k])).collect();
        let mut source = vals[arrays[0]].into_pointer_value();
        if arrays.len() == 2 {
            let (x, y) = (vals[arrays[0]].into_pointer_value(), vals[arrays[1]].into_pointer_value());
            let differ = self
                .call(self.rt.shapes_differ, &[x.into(), y.into()])?
                .ok_or_else(|| CodegenError::Bug("shapes".into()))?;
            let differ = self.b.build_int_compare(
                IntPredicate::NE,
                differ.into_int_value(),
                self.i32().const_zero(),
                "differ",
            )?;
            let bad = self.ctx.append_basic_block(fx.func, "shape.bad");
            let ok = self.ctx.append_basic_block(fx.func, "shape.ok");
            self.b.build_conditional_branch(differ, bad, ok)?;
            self.b.position_at_end(bad);
            let template = match op {
                Ew::Bin(o) => format!("`{}` on arrays of shapes {{a}} and {{b}}", o.elementwise_symbol()),
                _ => "arrays of shapes {a} and {b}".to_string(),
            };
            let code = self.cstring("R0002");
            let template = self.cstring(&template);
            self.call(
                self.rt.fail_shapes,
                &[
                    fx.ctxp.into(),
                    loc.into(),
                    code.into(),
                    template.into(),
                    x.into(),
                    y.into(),
                    self.i32().const_zero().into(),
                ],
            )?;
            self.b.build_unconditional_branch(fx.fail_bb)?;
            self.b.position_at_end(ok);
            if static_rank(&tys[arrays[0]]).is_none_or(|r| r == 0) {
                let rank = self.rank(x)?;
                let scalar_x = self.b.build_int_compare(IntPredicate::EQ, rank, self.const_i64(0), "x0")?;
                source = self.b.build_select(scalar_x, y, x, "source")?.into_pointer_value();
            }
        }
        let source_ty = tys[arrays[0]].clone();
        let rank = self.rank(source)?;
        let shape = self.shape_ptr(source)?;
        let stack_len = static_extent(dty, 0).filter(|_| in_frame && rb == BaseType::Int);
        let result = match stack_len {
            Some(n) => self.stack_vector(fx, n)?.0,
            None => self.alloc_array(fx, rb, rank, shape)?,
        };
        let n = if arrays.len() == 1 { self.size_of(source, &source_ty)? } else { self.size(result)? };
        // Per operand: data and stride (0 for rank-0 arrays: scalar extension).
        let mut access: Vec<Option<(PointerValue<'ctx>, IntValue<'ctx>)>> = Vec::new();
        for (k, t) in tys.iter().enumerate() {
            if scalar_repr(t) {
                access.push(None);
                continue;
            }
            let p = vals[k].into_pointer_value();
            let data = self.data_ptr(p)?;
            let stride = match static_rank(t) {
                Some(r) if r > 0 => self.const_i64(1),
                _ if arrays.len() == 1 => self.const_i64(1),
                _ => {
                    let r = self.rank(p)?;
                    let nz = self.b.build_int_compare(IntPredicate::NE, r, self.const_i64(0), "nz")?;
                    self.b.build_int_z_extend(nz, self.i64(), "stride")?
                }
            };
            access.push(Some((data, stride)));
        }
        let out = self.data_ptr(result)?;
        // What the loop reads: the result's data, then per operand its value
        // (a scalar) or its data and stride.
        let mut caps: Vec<BasicValueEnum<'ctx>> = vec![out.into()];
        for (k, acc) in access.iter().enumerate() {
            match acc {
                None => caps.push(vals[k]),
                Some((data, stride)) => caps.extend::<[BasicValueEnum<'ctx>; 2]>([(*data).into(), (*stride).into()]),
            }
        }
        let static_n = dty.shape.extents().map(|e| e.iter().product::<usize>() as i64);
        let scalars: Vec<bool> = access.iter().map(Option::is_none).collect();
        self.flat_loop(fx, n, static_n, &caps, super::elem_bytes(rb), &mut |e, fx, caps, i| {
            let out = caps[0].into_pointer_value();
            let mut xs = Vec::with_capacity(scalars.len());
            let mut at = 1;
            for scalar in &scalars {
                if *scalar {
                    xs.push(caps[at]);
                    at += 1;
                } else {
                    let (data, stride) = (caps[at].into_pointer_value(), caps[at + 1].into_int_value());
                    let offset = e.b.build_int_mul(i, stride, "at")?;
                    xs.push(e.load_elem(data, offset, operand)?);
                    at += 2;
                }
            }
            let r = e.scalar_op(fx, op, operand, &xs, loc)?;
            e.store_elem(out, i, rb, r)
        })?;
        Ok(result.into())
    }

    pub fn scalar_op(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        op: Ew,
        b: BaseType,
        xs: &[BasicValueEnum<'ctx>],
        loc: PointerValue<'ctx>,
    ) -> R<BasicValueEnum<'ctx>> {
        match op {
            Ew::Bin(o) => self.scalar_bin(fx, o, b, xs[0], xs[1], loc),
            Ew::Un(o) => self.scalar_un(o, b, xs[0]),
            Ew::Conv(to) => self.scalar_conv(b, to, xs[0]),
            Ew::Math(f) => self.scalar_math(f, b, xs[0], xs.get(1).copied()),
        }
    }

    /// The row-major cell number of a prefix index into `a`, checked when
    /// `checked` (R0001 with the interpreter's message); also returns the
    /// number of index components.
    fn index_offset(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        iv: ValueId,
        a: PointerValue<'ctx>,
        aty: &Ty,
        checked: bool,
    ) -> R<(IntValue<'ctx>, IntValue<'ctx>)> {
        let ity = fx.irf.ty(iv).clone();
        let ix = self.value(fx, iv)?;
        let loc = fx.loc;
        let rank = self.rank_of(a, aty)?;
        if scalar_repr(&ity) {
            let i = self.widen(ix.into_int_value(), base(&ity))?;
            if checked {
                let ext = self.extent_of(a, aty, 0)?;
                let no_axis = self.b.build_int_compare(IntPredicate::EQ, rank, self.const_i64(0), "noaxis")?;
                let out = self.b.build_int_compare(IntPredicate::UGE, i, ext, "oob")?;
                let bad = self.b.build_or(no_axis, out, "bad")?;
                self.index_failure(fx, bad, None, i, a, false, loc)?;
            }
            return Ok((i, self.const_i64(1)));
        }
        let ivp = ix.into_pointer_value();
        let n = self.vec_len(ivp, &ity)?;
        if checked {
            let too_long = self.b.build_int_compare(IntPredicate::SGT, n, rank, "toolong")?;
            self.index_failure(fx, too_long, Some(ivp), self.const_i64(0), a, false, loc)?;
        }
        let data = self.data_ptr(ivp)?;
        let b = base(&ity);
        match (static_extent(&ity, 0), static_rank(aty)) {
            (Some(k), _) if k <= 8 => {
                let mut off = self.const_i64(0);
                for dd in 0..k {
                    let i = self.load_elem(data, self.const_i64(dd as i64), b)?.into_int_value();
                    let i = self.widen(i, b)?;
                    let ext = self.extent_of(a, aty, dd)?;
                    if checked {
                        let out = self.b.build_int_compare(IntPredicate::UGE, i, ext, "oob")?;
                        self.index_failure(fx, out, Some(ivp), self.const_i64(0), a, false, loc)?;
                    }
                    let scaled = self.b.build_int_mul(off, ext, "off")?;
                    off = self.b.build_int_add(scaled, i, "off")?;
                }
                Ok((off, n))
            }
            _ => {
                let acc = self.alloca(fx, self.i64().into(), "off")?;
                self.b.build_store(acc, self.const_i64(0))?;
                let aty2 = aty.clone();
                self.for_range(fx, Trips::Few, self.const_i64(0), n, &mut |e, fx, dd| {
                    let i = e.load_elem(data, dd, b)?.into_int_value();
                    let i = e.widen(i, b)?;
                    let ext = match static_rank(&aty2) {
                        Some(_) => e.extent(a, dd)?,
                        None => e.extent(a, dd)?,
                    };
                    if checked {
                        let out = e.b.build_int_compare(IntPredicate::UGE, i, ext, "oob")?;
                        e.index_failure(fx, out, Some(ivp), e.const_i64(0), a, false, loc)?;
                    }
                    let off = e.b.build_load(e.i64(), acc, "off")?.into_int_value();
                    let scaled = e.b.build_int_mul(off, ext, "off")?;
                    let next = e.b.build_int_add(scaled, i, "off")?;
                    e.b.build_store(acc, next)?;
                    Ok(())
                })?;
                Ok((self.b.build_load(self.i64(), acc, "off")?.into_int_value(), n))
            }
        }
    }

    /// Fails with R0001 (the interpreter's message) when `bad` holds.
    #[allow(clippy::too_many_arguments)]
    fn index_failure(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        bad: IntValue<'ctx>,
        iv: Option<PointerValue<'ctx>>,
        scalar: IntValue<'ctx>,
        shape_of: PointerValue<'ctx>,
        shape_is_vector: bool,
        loc: PointerValue<'ctx>,
    ) -> R<()> {
        self.failing_when(fx, bad, &mut |e| {
            let ivp = iv.unwrap_or(e.ptr().const_null());
            let vec_flag = e.i32().const_int(shape_is_vector as u64, false);
            e.call(
                e.rt.fail_index,
                &[fx.ctxp.into(), loc.into(), ivp.into(), scalar.into(), shape_of.into(), vec_flag.into()],
            )?;
            Ok(())
        })
    }

    /// When `bad`: `fail` (which records the error; emitted in a block of
    /// its own, so it may build what only the message needs), then the
    /// function returns; code continues after the test otherwise.
    fn failing_when(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        bad: IntValue<'ctx>,
        fail: &mut dyn FnMut(&mut Self) -> R<()>,
    ) -> R<()> {
        let fail_bb = self.ctx.append_basic_block(fx.func, "oob");
        let ok = self.ctx.append_basic_block(fx.func, "inb");
        self.b.build_conditional_branch(bad, fail_bb, ok)?;
        self.b.position_at_end(fail_bb);
        fail(self)?;
        self.b.build_unconditional_branch(fx.fail_bb)?;
        self.b.position_at_end(ok);
        Ok(())
    }

    /// The number of elements in the cells of `a` below a prefix of `n` axes.
    fn cell_len(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        a: PointerValue<'ctx>,
        aty: &Ty,
        n: IntValue<'ctx>,
    ) -> R<IntValue<'ctx>> {
        if let (Some(k), Some(ext)) = (n.get_sign_extended_constant(), aty.shape.extents()) {
            return Ok(self.const_i64(ext.iter().skip(k.max(0) as usize).product::<usize>() as i64));
        }
        let rank = self.rank_of(a, aty)?;
        self.product_range(fx, n, rank, &mut |e, d| e.extent(a, d))
    }

    /// `a[iv]`: an element, or a new array holding the cell.
    fn sel(&mut self, fx: &mut Fx<'ctx, 'a>, args: &[ValueId], checked: bool, d: ValueId) -> R<BasicValueEnum<'ctx>> {
        let aty = fx.irf.ty(args[1]).clone();
        let a = self.value(fx, args[1])?.into_pointer_value();
        let (cell_no, n) = self.index_offset(fx, args[0], a, &aty, checked)?;
        let b = base(&aty);
        let dty = fx.irf.ty(d).clone();
        if scalar_repr(&dty) {
            let data = self.data_ptr(a)?;
            return self.load_elem(data, cell_no, b);
        }
        let cell_len = self.cell_len(fx, a, &aty, n)?;
        let rank = self.rank_of(a, &aty)?;
        let cell_rank = self.b.build_int_sub(rank, n, "cellrank")?;
        let shape = self.shape_ptr(a)?;
        let cell_shape = self.gep(self.i64(), shape, &[n], "cellshape")?;
        let out = self.alloc_array(fx, b, cell_rank, cell_shape)?;
        let start = self.b.build_int_mul(cell_no, cell_len, "start")?;
        self.copy_elems(a, start, out, self.const_i64(0), cell_len, b)?;
        Ok(out.into())
    }

    /// Copies `n` elements of type `b` from `src` at `from` to `dst` at `to`.
    pub fn copy_elems(
        &mut self,
        src: PointerValue<'ctx>,
        from: IntValue<'ctx>,
        dst: PointerValue<'ctx>,
        to: IntValue<'ctx>,
        n: IntValue<'ctx>,
        b: BaseType,
    ) -> R<()> {
        let mem = self.mem_ty(b);
        let sd = self.data_ptr(src)?;
        let dd = self.data_ptr(dst)?;
        let sp = self.gep(mem, sd, &[from], "src")?;
        let dp = self.gep(mem, dd, &[to], "dst")?;
        let bytes = self.b.build_int_mul(n, self.const_i64(elem_bytes(b) as i64), "bytes")?;
        self.b.build_memcpy(dp, 1, sp, 1, bytes).map_err(|e| CodegenError::Bug(format!("memcpy: {e}")))?;
        Ok(())
    }

    /// `modarray(a, iv, v)`: a copy of `a` (or `a` itself, updated in place when
    /// this is its last use and no one else holds it) with the cell at `iv`
    /// replaced.
    fn modarray(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        args: &[ValueId],
        checked: bool,
        in_place: bool,
        moved: &HashSet<ValueId>,
    ) -> R<BasicValueEnum<'ctx>> {
        let aty = fx.irf.ty(args[0]).clone();
        let vty = fx.irf.ty(args[2]).clone();
        let a = self.value(fx, args[0])?.into_pointer_value();
        let (cell_no, n) = self.index_offset(fx, args[1], a, &aty, checked)?;
        let b = base(&aty);
        let loc = fx.loc;
        let v = self.value(fx, args[2])?;
        if scalar_repr(&vty) {
            // A scalar needs a full index.
            let rank = self.rank_of(a, &aty)?;
            let partial = self.b.build_int_compare(IntPredicate::NE, n, rank, "partial")?;
            if partial.get_zero_extended_constant() != Some(0) {
                let bad = self.ctx.append_basic_block(fx.func, "cell.bad");
                let ok = self.ctx.append_basic_block(fx.func, "cell.ok");
                self.b.build_conditional_branch(partial, bad, ok)?;
                self.b.position_at_end(bad);
                self.fail_cell_shape(fx, a, n, loc)?;
                self.b.position_at_end(ok);
            }
        }
        let result = self.writable_copy(fx, args[0], in_place, moved)?;
        if scalar_repr(&vty) {
            let data = self.data_ptr(result)?;
            self.store_elem(data, cell_no, b, v)?;
        } else {
            let r = self
                .call(
                    self.rt.write_cell,
                    &[
                        fx.ctxp.into(),
                        loc.into(),
                        result.into(),
                        cell_no.into(),
                        v.into(),
                        n.into(),
                        self.i32().const_int(1, false).into(),
                    ],
                )?
                .ok_or_else(|| CodegenError::Bug("write_cell".into()))?;
            let failed =
                self.b.build_int_compare(IntPredicate::NE, r.into_int_value(), self.i32().const_zero(), "failed")?;
            let cont = self.ctx.append_basic_block(fx.func, "ok");
            self.b.build_conditional_branch(failed, fx.fail_bb, cont)?;
            self.b.position_at_end(cont);
        }
        Ok(result.into())
    }

    /// R0002 for a scalar written where the array has cells of a larger shape.
    fn fail_cell_shape(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        a: PointerValue<'ctx>,
        n: IntValue<'ctx>,
        loc: PointerValue<'ctx>,
    ) -> R<()> {
        // The cell's shape is the tail of `a`'s shape; the runtime formats it
        // from a one-off header over the same extents.
        let rank = self.rank(a)?;
        let tail = self.b.build_int_sub(rank, n, "tail")?;
        let shape = self.shape_ptr(a)?;
        let tail_shape = self.gep(self.i64(), shape, &[n], "tailshape")?;
        let code = self.cstring("R0002");
        let template = self.cstring("cannot put a value of shape [] where the array has cells of shape {b}");
        let empty = self.i64_buffer(fx, 1, "empty")?;
        self.call(
            self.rt.fail_vectors,
            &[
                fx.ctxp.into(),
                loc.into(),
                code.into(),
                template.into(),
                empty.into(),
                self.const_i64(0).into(),
                tail_shape.into(),
                tail.into(),
            ],
        )?;
        self.b.build_unconditional_branch(fx.fail_bb)?;
        Ok(())
    }

    /// The array an update writes into: the argument itself when the update
    /// may happen in place and its count is 1, else a copy.
    fn writable_copy(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        a: ValueId,
        in_place: bool,
        moved: &HashSet<ValueId>,
    ) -> R<PointerValue<'ctx>> {
        let r = if in_place {
            let x = self.take(fx, a, moved)?;
            self.call(self.rt.unique, &[fx.ctxp.into(), x.into()])?
        } else {
            let x = self.value(fx, a)?;
            self.call(self.rt.copy, &[fx.ctxp.into(), x.into()])?
        };
        let r = r.ok_or_else(|| CodegenError::Bug("copy".into()))?.into_pointer_value();
        self.check_error(fx)?;
        Ok(r)
    }

    fn idx_sel(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        args: &[ValueId],
        checked: bool,
        d: ValueId,
    ) -> R<BasicValueEnum<'ctx>> {
        let aty = fx.irf.ty(args[1]).clone();
        let a = self.value(fx, args[1])?.into_pointer_value();
        let off = self.index_i64(fx, args[0])?;
        if checked {
            self.offset_check(fx, a, &aty, off, "offset {a} is outside an array of {b} elements")?;
        }
        let data = match fx.data.get(&args[1]) {
            Some(p) => *p,
            None => self.data_ptr(a)?,
        };
        let x = self.load_elem(data, off, base(&aty))?;
        self.scalar_result(fx, x, base(&aty), d)
    }

    fn offset_check(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        a: PointerValue<'ctx>,
        aty: &Ty,
        off: IntValue<'ctx>,
        template: &str,
    ) -> R<()> {
        let size = self.size_of(a, aty)?;
        let out = self.b.build_int_compare(IntPredicate::UGE, off, size, "oob")?;
        let loc = fx.loc;
        self.failing_when(fx, out, &mut |e| {
            let code = e.cstring("R0001");
            let template = e.cstring(template);
            e.call(
                e.rt.fail_ints,
                &[fx.ctxp.into(), loc.into(), code.into(), template.into(), off.into(), size.into()],
            )?;
            Ok(())
        })
    }

    fn idx_modarray(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        args: &[ValueId],
        checked: bool,
        in_place: bool,
        moved: &HashSet<ValueId>,
    ) -> R<BasicValueEnum<'ctx>> {
        let aty = fx.irf.ty(args[0]).clone();
        let a = self.value(fx, args[0])?.into_pointer_value();
        let off = self.index_i64(fx, args[1])?;
        if checked {
            self.offset_check(
                fx,
                a,
                &aty,
                off,
                "offset {a} is outside an array of {b} elements (or the types differ)",
            )?;
        }
        let v = self.value(fx, args[2])?;
        let result = self.writable_copy(fx, args[0], in_place, moved)?;
        let data = self.data_ptr(result)?;
        self.store_elem(data, off, base(&aty), v)?;
        Ok(result.into())
    }

    /// `_vect2offset_(shp, iv)`: the linear formula, unchecked except for equal
    /// lengths, as an exact `i64` (the `int` value the IR sees wraps); with
    /// the extents of `shp` it read, where its length is static.
    fn vect2offset(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        args: &[ValueId],
    ) -> R<(IntValue<'ctx>, Option<Vec<IntValue<'ctx>>>)> {
        let sty = fx.irf.ty(args[0]).clone();
        let ity = fx.irf.ty(args[1]).clone();
        if let Some(elems) = fx.comps.get(&args[1]).cloned() {
            let shp = self.value(fx, args[0])?.into_pointer_value();
            let ns = self.vec_len(shp, &sty)?;
            let differ =
                self.b.build_int_compare(IntPredicate::NE, ns, self.const_i64(elems.len() as i64), "differ")?;
            if differ.get_zero_extended_constant() != Some(0) {
                let loc = fx.loc;
                self.fail_if(fx, differ, loc, "R0001", "the index and the shape have different lengths")?;
            }
            let mut off = self.const_i64(0);
            for (dd, e) in elems.iter().enumerate() {
                let ext = self.int_elem(shp, &sty, self.const_i64(dd as i64))?;
                let i = self.index_i64(fx, *e)?;
                let scaled = self.b.build_int_mul(off, ext, "off")?;
                off = self.b.build_int_add(scaled, i, "off")?;
            }
            return Ok((off, None));
        }
        let shp = self.value(fx, args[0])?.into_pointer_value();
        let iv = self.value(fx, args[1])?.into_pointer_value();
        let ns = self.vec_len(shp, &sty)?;
        let ni = self.vec_len(iv, &ity)?;
        let differ = self.b.build_int_compare(IntPredicate::NE, ns, ni, "differ")?;
        if differ.get_zero_extended_constant() != Some(0) {
            let loc = fx.loc;
            self.fail_if(fx, differ, loc, "R0001", "the index and the shape have different lengths")?;
        }
        let mut read = None;
        let off = match static_extent(&sty, 0) {
            Some(k) if k <= 8 => {
                let mut off = self.const_i64(0);
                let extents = read.insert(Vec::with_capacity(k));
                for dd in 0..k {
                    let at = self.const_i64(dd as i64);
                    let ext = self.int_elem(shp, &sty, at)?;
                    extents.push(ext);
                    let i = self.int_elem(iv, &ity, at)?;
                    let scaled = self.b.build_int_mul(off, ext, "off")?;
                    off = self.b.build_int_add(scaled, i, "off")?;
                }
                off
            }
            _ => {
                let acc = self.alloca(fx, self.i64().into(), "off")?;
                self.b.build_store(acc, self.const_i64(0))?;
                self.for_range(fx, Trips::Few, self.const_i64(0), ns, &mut |e, _fx, dd| {
                    let ext = e.int_elem(shp, &sty, dd)?;
                    let i = e.int_elem(iv, &ity, dd)?;
                    let off = e.b.build_load(e.i64(), acc, "off")?.into_int_value();
                    let scaled = e.b.build_int_mul(off, ext, "off")?;
                    let next = e.b.build_int_add(scaled, i, "off")?;
                    e.b.build_store(acc, next)?;
                    Ok(())
                })?;
                self.b.build_load(self.i64(), acc, "off")?.into_int_value()
            }
        };
        Ok((off, read))
    }

    // ------------------------------------------------------------ literals

    fn array_literal(&mut self, fx: &mut Fx<'ctx, 'a>, elems: &[ValueId], d: ValueId) -> R<BasicValueEnum<'ctx>> {
        let tys: Vec<Ty> = elems.iter().map(|e| fx.irf.ty(*e).clone()).collect();
        let first = tys.first();
        let same_base = first.is_some_and(|f| f.elem != Elem::String && tys.iter().all(|t| t.elem == f.elem));
        if same_base && tys.iter().all(scalar_repr) && fx.stack.contains(&d) {
            let (out, data) = self.stack_vector(fx, elems.len())?;
            for (k, e) in elems.iter().enumerate() {
                let x = self.value(fx, *e)?;
                self.store_elem(data, self.const_i64(k as i64), BaseType::Int, x)?;
            }
            return Ok(out.into());
        }
        if same_base && tys.iter().all(scalar_repr) {
            let b = base(&tys[0]);
            let shape = self.i64_buffer(fx, 1, "shape")?;
            self.b.build_store(shape, self.const_i64(elems.len() as i64))?;
            let out = self.alloc_array(fx, b, self.const_i64(1), shape)?;
            let data = self.data_ptr(out)?;
            for (k, e) in elems.iter().enumerate() {
                let x = self.value(fx, *e)?;
                self.store_elem(data, self.const_i64(k as i64), b, x)?;
            }
            return Ok(out.into());
        }
        let cell = first.and_then(|f| f.shape.extents());
        if same_base && cell.is_some() && tys.iter().all(|t| t.shape.extents() == cell) {
            let cell = cell.unwrap_or_default();
            let b = base(&tys[0]);
            let cell_len = cell.iter().product::<usize>() as i64;
            let shape = self.i64_buffer(fx, (cell.len() + 1) as u32, "shape")?;
            let mut extents = vec![elems.len()];
            extents.extend(&cell);
            for (k, e) in extents.iter().enumerate() {
                let p = self.gep(self.i64(), shape, &[self.const_i64(k as i64)], "ext")?;
                self.b.build_store(p, self.const_i64(*e as i64))?;
            }
            let out = self.alloc_array(fx, b, self.const_i64(extents.len() as i64), shape)?;
            for (k, e) in elems.iter().enumerate() {
                let x = self.value(fx, *e)?.into_pointer_value();
                let to = self.const_i64(k as i64 * cell_len);
                self.copy_elems(x, self.const_i64(0), out, to, self.const_i64(cell_len), b)?;
            }
            return Ok(out.into());
        }
        let buf = self.args_buffer(fx, elems)?;
        let out = self.alloca(fx, self.rt.arg.into(), "out")?;
        let n = self.const_i64(elems.len() as i64);
        let loc = fx.loc;
        let r = self
            .call(self.rt.stack, &[fx.ctxp.into(), loc.into(), n.into(), buf.into(), out.into()])?
            .ok_or_else(|| CodegenError::Bug("wl_stack".into()))?;
        let failed =
            self.b.build_int_compare(IntPredicate::NE, r.into_int_value(), self.i32().const_zero(), "failed")?;
        let cont = self.ctx.append_basic_block(fx.func, "ok");
        self.b.build_conditional_branch(failed, fx.fail_bb, cont)?;
        self.b.position_at_end(cont);
        let dty = fx.irf.ty(d).clone();
        self.read_arg(out, &dty)
    }

    // ------------------------------------------------------------ calls

    fn call_op(&mut self, fx: &mut Fx<'ctx, 'a>, s: &Stmt, func: compiler_core::ir::FuncId, args: &[ValueId]) -> R<()> {
        let vals = self.typed_values(fx, args)?;
        let results = self.call_function(fx, func, &vals)?;
        let callee: &'a compiler_core::ir::Function = &self.ir.functions[func.0 as usize];
        for ((x, r), d) in results.into_iter().zip(&callee.results).zip(&s.defs) {
            let y = self.owned_to(fx, x, r, fx.irf.ty(*d))?;
            fx.vals.insert(*d, y);
        }
        Ok(())
    }

    /// Calls IR function `func` on borrowed arguments at the current location;
    /// returns its results (owned, in the callee's result types).
    pub fn call_function(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        func: compiler_core::ir::FuncId,
        args: &[(BasicValueEnum<'ctx>, Ty)],
    ) -> R<Vec<BasicValueEnum<'ctx>>> {
        let callee: &'a compiler_core::ir::Function = &self.ir.functions[func.0 as usize];
        let fv = self.funcs[func.0 as usize];
        let mut temps = Vec::new();
        let mut call_args: Vec<inkwell::values::BasicMetadataValueEnum<'ctx>> = vec![fx.ctxp.into()];
        let mut outs = Vec::new();
        for r in &callee.results {
            let slot = self.alloca(fx, self.value_ty(r), "res")?;
            outs.push(slot);
            call_args.push(slot.into());
        }
        for ((x, t), p) in args.iter().zip(&callee.params) {
            let y = self.borrowed_to(fx, *x, t, callee.ty(*p), &mut temps)?;
            call_args.push(y.into());
        }
        let loc = fx.loc;
        let user_site = !loc.is_null();
        // Depth: a recursion error instead of a stack overflow. A dispatch
        // wrapper's call of the instance it chose is part of the one call the
        // program made (as in the interpreter), so it does not count; nor
        // does a call of a library function (an operator, `shape`, …), which
        // never recurses and is usually inlined: counted, the limit was met
        // at such a call in code left unoptimised (`--passes none`), and the
        // error blamed `+` "calling itself" where the interpreter blames the
        // user function that recursed. The stack check below still guards it.
        let counted = fx.irf.kind != compiler_core::ir::FunctionKind::Wrapper && !callee.library;
        let depth_p = self.ctx_field(fx, rt::CTX_DEPTH)?;
        let name = self.cstring(callee.source_name.as_ref());
        let mut depth = None;
        if counted {
            let max_p = self.ctx_field(fx, rt::CTX_MAX_DEPTH)?;
            let current = self.b.build_load(self.i32(), depth_p, "depth")?.into_int_value();
            let max = self.b.build_load(self.i32(), max_p, "max")?.into_int_value();
            let deeper = self.b.build_int_add(current, self.i32().const_int(1, false), "deeper")?;
            let too_deep = self.b.build_int_compare(IntPredicate::SGT, deeper, max, "toodeep")?;
            self.failing_when(fx, too_deep, &mut |e| {
                e.call(e.rt.fail_depth, &[fx.ctxp.into(), loc.into(), name.into()])?;
                Ok(())
            })?;
            self.b.build_store(depth_p, deeper)?;
            depth = Some(current);
        }
        // Stack: whatever the frames' size, a call below the context's floor
        // (`WlCtx::stack_floor`, 0 outside calls from C) fails instead of
        // overflowing the thread's stack; also for a wrapper's calls, which
        // the depth does not count.
        let floor_p = self.ctx_field(fx, rt::CTX_STACK_FLOOR)?;
        let floor = self.b.build_load(self.i64(), floor_p, "floor")?.into_int_value();
        let sp = self.call_intrinsic("llvm.stacksave", &[self.ptr().into()], &[])?.into_pointer_value();
        let sp = self.b.build_ptr_to_int(sp, self.i64(), "sp")?;
        let low = self.b.build_int_compare(IntPredicate::ULT, sp, floor, "stack.low")?;
        self.failing_when(fx, low, &mut |e| {
            e.call(e.rt.fail_stack, &[fx.ctxp.into(), loc.into(), name.into()])?;
            Ok(())
        })?;
        let site_p = self.ctx_field(fx, rt::CTX_SITE)?;
        let old_site = if user_site {
            let old = self.b.build_load(self.ptr(), site_p, "site")?;
            self.b.build_store(site_p, loc)?;
            Some(old)
        } else {
            None
        };
        self.b.build_call(fv, &call_args, "")?;
        if let Some(old) = old_site {
            self.b.build_store(site_p, old)?;
        }
        if let Some(depth) = depth {
            self.b.build_store(depth_p, depth)?;
        }
        for t in temps {
            self.dec(t)?;
        }
        self.check_error(fx)?;
        let mut results = Vec::with_capacity(outs.len());
        for (slot, r) in outs.iter().zip(&callee.results) {
            results.push(self.b.build_load(self.value_ty(r), *slot, "r")?);
        }
        Ok(results)
    }

    /// A pointer to a field of the context.
    pub fn ctx_field(&mut self, fx: &Fx<'ctx, 'a>, offset: u64) -> R<PointerValue<'ctx>> {
        self.gep(self.ctx.i8_type(), fx.ctxp, &[self.const_i64(offset as i64)], "ctxf")
    }

    // ------------------------------------------------------------ control flow

    /// A condition as an `i1`.
    fn condition(&mut self, fx: &Fx<'ctx, 'a>, v: BasicValueEnum<'ctx>, ty: &Ty) -> R<IntValue<'ctx>> {
        Ok(if scalar_repr(ty) { v.into_int_value() } else { self.unbox(fx, v, BaseType::Bool)?.into_int_value() })
    }

    fn if_op(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        s: &'a Stmt,
        cond: ValueId,
        then_block: &'a compiler_core::ir::Block,
        else_block: &'a compiler_core::ir::Block,
    ) -> R<()> {
        let c = self.value(fx, cond)?;
        let cty = fx.irf.ty(cond).clone();
        let c = self.condition(fx, c, &cty)?;
        let then_bb = self.ctx.append_basic_block(fx.func, "then");
        let else_bb = self.ctx.append_basic_block(fx.func, "else");
        let merge = self.ctx.append_basic_block(fx.func, "endif");
        self.b.build_conditional_branch(c, then_bb, else_bb)?;
        let mut incoming = Vec::new();
        for (bb, blk) in [(then_bb, then_block), (else_bb, else_block)] {
            self.b.position_at_end(bb);
            let ys = self.block(fx, blk, &[])?;
            let mut converted = Vec::with_capacity(ys.len());
            for ((y, yv), d) in ys.iter().zip(&blk.yields).zip(&s.defs) {
                let from = fx.irf.ty(*yv).clone();
                converted.push(self.owned_to(fx, *y, &from, fx.irf.ty(*d))?);
            }
            let end = self.b.get_insert_block().ok_or_else(|| CodegenError::Bug("no block".into()))?;
            self.b.build_unconditional_branch(merge)?;
            incoming.push((converted, end));
        }
        self.b.position_at_end(merge);
        for (k, d) in s.defs.iter().enumerate() {
            let ty = self.value_ty(fx.irf.ty(*d));
            let phi = self.b.build_phi(ty, "if")?;
            for (vals, bb) in &incoming {
                phi.add_incoming(&[(&vals[k], *bb)]);
            }
            fx.vals.insert(*d, phi.as_basic_value());
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn loop_op(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        s: &'a Stmt,
        init: &[ValueId],
        params: &'a [ValueId],
        cond: &'a compiler_core::ir::Block,
        body: &'a compiler_core::ir::Block,
        test_first: bool,
        tiled: bool,
        moved: &HashSet<ValueId>,
    ) -> R<()> {
        // A loop of stencil steps the runtime may run in time tiles (see
        // `TimeTile`); checked again, as the pass found it.
        let stencil = if tiled {
            let facts = compiler_core::opt::timetile::Facts::of(fx.irf);
            compiler_core::opt::timetile::stencil(fx.irf, &facts, s)
        } else {
            None
        };
        let mut start = Vec::with_capacity(init.len());
        for (i, p) in init.iter().zip(params) {
            let x = self.take(fx, *i, moved)?;
            let from = fx.irf.ty(*i).clone();
            start.push(self.owned_to(fx, x, &from, fx.irf.ty(*p))?);
        }
        let pre = self.b.get_insert_block().ok_or_else(|| CodegenError::Bug("no block".into()))?;
        let head = self.ctx.append_basic_block(fx.func, "loop.head");
        let body_bb = self.ctx.append_basic_block(fx.func, "loop.body");
        let exit = self.ctx.append_basic_block(fx.func, "loop.exit");
        self.b.build_unconditional_branch(head)?;
        self.b.position_at_end(head);
        let mut phis = Vec::new();
        for (p, x) in params.iter().zip(&start) {
            let phi = self.b.build_phi(self.value_ty(fx.irf.ty(*p)), "carried")?;
            phi.add_incoming(&[(x, pre)]);
            fx.vals.insert(*p, phi.as_basic_value());
            phis.push(phi);
        }
        if test_first {
            let carried: Vec<BasicValueEnum<'ctx>> = phis.iter().map(|p| p.as_basic_value()).collect();
            let c = self.loop_condition(fx, cond, params, &carried)?;
            self.b.build_conditional_branch(c, body_bb, exit)?;
        } else {
            self.b.build_unconditional_branch(body_bb)?;
        }
        self.b.position_at_end(body_bb);
        let outer_tile = fx.time_tile.take();
        let mut steps_ran = None;
        if let Some(st) = stencil {
            let k = self.value(fx, params[st.counter])?.into_int_value();
            let bound = self.value(fx, st.bound)?.into_int_value();
            let i64t = self.i64();
            let left = self.b.build_int_sub(
                self.b.build_int_s_extend_or_bit_cast(bound, i64t, "bound")?,
                self.b.build_int_s_extend_or_bit_cast(k, i64t, "k")?,
                "steps.left",
            )?;
            let steps = self.alloca(fx, i64t.into(), "steps")?;
            self.b.build_store(steps, self.const_i64(1))?;
            steps_ran = Some(steps);
            fx.time_tile = Some(super::TimeTile {
                with: body.stmts[0].defs[0],
                array: params[st.array],
                remaining: left,
                steps,
                reach: st.reach,
            });
        }
        let ys = self.block(fx, body, params)?;
        fx.time_tile = outer_tile;
        let mut next = Vec::with_capacity(ys.len());
        for ((y, yv), p) in ys.iter().zip(&body.yields).zip(params) {
            let from = fx.irf.ty(*yv).clone();
            next.push(self.owned_to(fx, *y, &from, fx.irf.ty(*p))?);
        }
        // The counter goes up by the steps the with-loop ran.
        if let (Some(st), Some(steps)) = (stencil, steps_ran) {
            let k = self.value(fx, params[st.counter])?.into_int_value();
            let ran = self.b.build_load(self.i64(), steps, "steps.ran")?.into_int_value();
            let ran = self.b.build_int_truncate_or_bit_cast(ran, k.get_type(), "steps.ran")?;
            next[st.counter] = self.b.build_int_add(k, ran, "k.next")?.into();
        }
        if test_first {
            let latch = self.b.get_insert_block().ok_or_else(|| CodegenError::Bug("no block".into()))?;
            for (phi, x) in phis.iter().zip(&next) {
                phi.add_incoming(&[(x, latch)]);
            }
            self.b.build_unconditional_branch(head)?;
            self.b.position_at_end(exit);
            for (d, phi) in s.defs.iter().zip(&phis) {
                fx.vals.insert(*d, phi.as_basic_value());
            }
        } else {
            for (p, x) in params.iter().zip(&next) {
                fx.vals.insert(*p, *x);
            }
            let c = self.loop_condition(fx, cond, params, &next)?;
            let latch = self.b.get_insert_block().ok_or_else(|| CodegenError::Bug("no block".into()))?;
            for (phi, x) in phis.iter().zip(&next) {
                phi.add_incoming(&[(x, latch)]);
            }
            self.b.build_conditional_branch(c, head, exit)?;
            self.b.position_at_end(exit);
            for (d, x) in s.defs.iter().zip(&next) {
                fx.vals.insert(*d, *x);
            }
        }
        Ok(())
    }

    /// A loop's condition on the carried values: where it fails, the
    /// carried arrays (the loop owns them) are released.
    fn loop_condition(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        cond: &'a compiler_core::ir::Block,
        params: &[ValueId],
        carried: &[BasicValueEnum<'ctx>],
    ) -> R<IntValue<'ctx>> {
        let owned: Vec<BasicValueEnum<'ctx>> = params
            .iter()
            .zip(carried)
            .filter(|(p, _)| self.counted(fx.irf.ty(**p)) && !fx.borrowed.contains(*p))
            .map(|(_, x)| *x)
            .collect();
        let outer = fx.fail_bb;
        fx.fail_bb = self.release_then(fx, &owned, outer)?;
        let c = self.block(fx, cond, &[]);
        fx.fail_bb = outer;
        let cty = fx.irf.ty(cond.yields[0]).clone();
        self.condition(fx, c?[0], &cty)
    }

    // ------------------------------------------------------------ checks

    fn check_op(&mut self, fx: &mut Fx<'ctx, 'a>, c: &CheckOp) -> R<()> {
        let loc = fx.loc;
        match &c.check {
            Check::SameShape(x, y) => {
                let (xv, yv) = (self.value(fx, *x)?.into_pointer_value(), self.value(fx, *y)?.into_pointer_value());
                let (xt, yt) = (fx.irf.ty(*x).clone(), fx.irf.ty(*y).clone());
                let nx = self.vec_len(xv, &xt)?;
                let ny = self.vec_len(yv, &yt)?;
                // Both non-empty and different.
                let zero = self.const_i64(0);
                let xe = self.b.build_int_compare(IntPredicate::EQ, nx, zero, "xe")?;
                let ye = self.b.build_int_compare(IntPredicate::EQ, ny, zero, "ye")?;
                let either = self.b.build_or(xe, ye, "either")?;
                let differ_len = self.b.build_int_compare(IntPredicate::NE, nx, ny, "dl")?;
                let flag = self.alloca(fx, self.ctx.bool_type().into(), "differ")?;
                self.b.build_store(flag, differ_len)?;
                let same_len = self.b.build_not(differ_len, "sl")?;
                let compare = self.ctx.append_basic_block(fx.func, "cmp");
                let decide = self.ctx.append_basic_block(fx.func, "decide");
                self.b.build_conditional_branch(same_len, compare, decide)?;
                self.b.position_at_end(compare);
                self.for_range(fx, Trips::Few, zero, nx, &mut |e, _fx, i| {
                    let a = e.int_elem(xv, &xt, i)?;
                    let b = e.int_elem(yv, &yt, i)?;
                    let ne = e.b.build_int_compare(IntPredicate::NE, a, b, "ne")?;
                    let old = e.b.build_load(e.ctx.bool_type(), flag, "f")?.into_int_value();
                    let now = e.b.build_or(old, ne, "f")?;
                    e.b.build_store(flag, now)?;
                    Ok(())
                })?;
                self.b.build_unconditional_branch(decide)?;
                self.b.position_at_end(decide);
                let differ = self.b.build_load(self.ctx.bool_type(), flag, "differ")?.into_int_value();
                let ok_anyway = either;
                let not_ok = self.b.build_not(ok_anyway, "nok")?;
                let bad_cond = self.b.build_and(differ, not_ok, "bad")?;
                let bad = self.ctx.append_basic_block(fx.func, "shape.bad");
                let ok = self.ctx.append_basic_block(fx.func, "shape.ok");
                self.b.build_conditional_branch(bad_cond, bad, ok)?;
                self.b.position_at_end(bad);
                let code = self.cstring(c.code.id);
                let template = self.cstring(&c.message);
                self.call(
                    self.rt.fail_shapes,
                    &[
                        fx.ctxp.into(),
                        loc.into(),
                        code.into(),
                        template.into(),
                        xv.into(),
                        yv.into(),
                        self.i32().const_int(1, false).into(),
                    ],
                )?;
                self.b.build_unconditional_branch(fx.fail_bb)?;
                self.b.position_at_end(ok);
            }
            Check::InBounds { index, shape } => {
                let ity = fx.irf.ty(*index).clone();
                let sty = fx.irf.ty(*shape).clone();
                let sv = self.value(fx, *shape)?.into_pointer_value();
                let iv = self.value(fx, *index)?;
                let n_shape = self.vec_len(sv, &sty)?;
                if scalar_repr(&ity) {
                    let i = self.widen(iv.into_int_value(), base(&ity))?;
                    let empty = self.b.build_int_compare(IntPredicate::EQ, n_shape, self.const_i64(0), "empty")?;
                    let bad = self.ctx.append_basic_block(fx.func, "ib.bad");
                    let test = self.ctx.append_basic_block(fx.func, "ib.test");
                    let ok = self.ctx.append_basic_block(fx.func, "ib.ok");
                    self.b.build_conditional_branch(empty, bad, test)?;
                    self.b.position_at_end(test);
                    let ext = self.int_elem(sv, &sty, self.const_i64(0))?;
                    let out = self.b.build_int_compare(IntPredicate::UGE, i, ext, "oob")?;
                    self.b.build_conditional_branch(out, bad, ok)?;
                    self.b.position_at_end(bad);
                    self.call(
                        self.rt.fail_index,
                        &[
                            fx.ctxp.into(),
                            loc.into(),
                            self.ptr().const_null().into(),
                            i.into(),
                            sv.into(),
                            self.i32().const_int(1, false).into(),
                        ],
                    )?;
                    self.b.build_unconditional_branch(fx.fail_bb)?;
                    self.b.position_at_end(ok);
                } else if let Some(elems) = fx.comps.get(index).cloned() {
                    // A virtual index vector: compare its elements; build it
                    // only for the error message.
                    let n = self.const_i64(elems.len() as i64);
                    let mut bad = self.b.build_int_compare(IntPredicate::SGT, n, n_shape, "toolong")?;
                    for (d, e) in elems.iter().enumerate() {
                        let i = self.index_i64(fx, *e)?;
                        let at = self.const_i64(d as i64);
                        let inside = self.b.build_int_compare(IntPredicate::SLT, at, n_shape, "inside")?;
                        let safe = self.b.build_select(inside, at, self.const_i64(0), "safe")?.into_int_value();
                        let ext = self.int_elem(sv, &sty, safe)?;
                        let out = self.b.build_int_compare(IntPredicate::UGE, i, ext, "oob")?;
                        bad = self.b.build_or(bad, out, "bad")?;
                    }
                    let fail = self.ctx.append_basic_block(fx.func, "ib.bad");
                    let ok = self.ctx.append_basic_block(fx.func, "ib.ok");
                    self.b.build_conditional_branch(bad, fail, ok)?;
                    self.b.position_at_end(fail);
                    let ivp = self.array_literal(fx, &elems, *index)?.into_pointer_value();
                    let yes = self.ctx.bool_type().const_int(1, false);
                    self.index_failure(fx, yes, Some(ivp), self.const_i64(0), sv, true, loc)?;
                    self.b.build_unconditional_branch(ok)?;
                    self.b.position_at_end(ok);
                } else {
                    let ivp = iv.into_pointer_value();
                    let n = self.vec_len(ivp, &ity)?;
                    let too_long = self.b.build_int_compare(IntPredicate::SGT, n, n_shape, "toolong")?;
                    self.index_failure(fx, too_long, Some(ivp), self.const_i64(0), sv, true, loc)?;
                    self.for_range(fx, Trips::Few, self.const_i64(0), n, &mut |e, fx, d| {
                        let i = e.int_elem(ivp, &ity, d)?;
                        let ext = e.int_elem(sv, &sty, d)?;
                        let out = e.b.build_int_compare(IntPredicate::UGE, i, ext, "oob")?;
                        e.index_failure(fx, out, Some(ivp), e.const_i64(0), sv, true, loc)
                    })?;
                }
            }
            Check::Assert(v) => {
                let x = self.value(fx, *v)?;
                let ty = fx.irf.ty(*v).clone();
                let ok = self.condition(fx, x, &ty)?;
                let bad = self.b.build_not(ok, "bad")?;
                self.fail_if(fx, bad, loc, c.code.id, &c.message)?;
            }
            Check::Conforms(v, want) => {
                let have = fx.irf.ty(*v).clone();
                let x = self.value(fx, *v)?;
                self.conforms(fx, x, &have, want, c, loc)?;
            }
            Check::Extents(v) => {
                let sty = fx.irf.ty(*v).clone();
                let sv = self.value(fx, *v)?.into_pointer_value();
                let len = self.vec_len(sv, &sty)?;
                self.for_range(fx, Trips::Few, self.const_i64(0), len, &mut |e, fx, d| {
                    let x = e.int_elem(sv, &sty, d)?;
                    let neg = e.b.build_int_compare(IntPredicate::SLT, x, e.const_i64(0), "neg")?;
                    e.fail_ints_if(fx, neg, loc, c.code.id, &c.message, x, x)
                })?;
            }
            Check::Reshape { shape, from } => {
                let (sv, fv) = (self.value(fx, *shape)?, self.value(fx, *from)?);
                self.call(self.rt.check_reshape, &[fx.ctxp.into(), loc.into(), sv.into(), fv.into()])?;
                self.check_error(fx)?;
            }
        }
        Ok(())
    }

    /// Fails with the check's error unless the value has type `want`.
    fn conforms(
        &mut self,
        fx: &mut Fx<'ctx, 'a>,
        x: BasicValueEnum<'ctx>,
        have: &Ty,
        want: &Ty,
        c: &CheckOp,
        loc: PointerValue<'ctx>,
    ) -> R<()> {
        if have.elem == Elem::String || want.elem != have.elem {
            if want.elem != have.elem {
                let msg = c.message.replace("{a}", &have.elem.to_string()).replace("{b}", "");
                return self.fail_now(fx, loc, c.code.id, &msg);
            }
            return Ok(());
        }
        if scalar_repr(have) {
            if !want.shape.contains(&[]) {
                let msg = c.message.replace("{a}", &have.elem.to_string()).replace("{b}", "");
                return self.fail_now(fx, loc, c.code.id, &msg);
            }
            return Ok(());
        }
        let a = x.into_pointer_value();
        let rank = self.rank(a)?;
        let bad = match &want.shape {
            Shape::AtLeast(n) => self.b.build_int_compare(IntPredicate::SLT, rank, self.const_i64(*n as i64), "bad")?,
            Shape::Fixed(dims) => {
                let mut bad =
                    self.b.build_int_compare(IntPredicate::NE, rank, self.const_i64(dims.len() as i64), "bad")?;
                if dims.iter().any(Option::is_some) {
                    // Extents are only read when the rank is right.
                    let test = self.ctx.append_basic_block(fx.func, "conf.ext");
                    let join = self.ctx.append_basic_block(fx.func, "conf.join");
                    let from = self.b.get_insert_block().ok_or_else(|| CodegenError::Bug("no block".into()))?;
                    self.b.build_conditional_branch(bad, join, test)?;
                    self.b.position_at_end(test);
                    let mut ext_bad = self.ctx.bool_type().const_zero();
                    for (k, dim) in dims.iter().enumerate() {
                        if let Some(e) = dim {
                            let got = self.extent(a, self.const_i64(k as i64))?;
                            let ne =
                                self.b.build_int_compare(IntPredicate::NE, got, self.const_i64(*e as i64), "ne")?;
                            ext_bad = self.b.build_or(ext_bad, ne, "eb")?;
                        }
                    }
                    let test_end = self.b.get_insert_block().ok_or_else(|| CodegenError::Bug("no block".into()))?;
                    self.b.build_unconditional_branch(join)?;
                    self.b.position_at_end(join);
                    let phi = self.b.build_phi(self.ctx.bool_type(), "bad")?;
                    phi.add_incoming(&[(&self.ctx.bool_type().const_int(1, false), from), (&ext_bad, test_end)]);
                    bad = phi.as_basic_value().into_int_value();
                }
                bad
            }
        };
        let fail = self.ctx.append_basic_block(fx.func, "conf.bad");
        let ok = self.ctx.append_basic_block(fx.func, "conf.ok");
        self.b.build_conditional_branch(bad, fail, ok)?;
        self.b.position_at_end(fail);
        let code = self.cstring(c.code.id);
        let template = self.cstring(&c.message.replace("{b}", ""));
        let elem = self.i32().const_int(elem_code(base(have)), false);
        self.call(
            self.rt.fail_type,
            &[fx.ctxp.into(), loc.into(), code.into(), template.into(), elem.into(), a.into()],
        )?;
        self.b.build_unconditional_branch(fx.fail_bb)?;
        self.b.position_at_end(ok);
        Ok(())
    }

    // ------------------------------------------------------------ patterns

    /// `s` is an `Op::Pattern`.
    fn pattern_op(&mut self, fx: &mut Fx<'ctx, 'a>, s: &Stmt) -> R<()> {
        let Op::Pattern { args, specs, vars, function, labels, results } = &s.op else {
            return Err(CodegenError::Bug("pattern_op on another op".into()));
        };
        let results = *results;
        let buf = self.args_buffer(fx, args)?;
        let out = self.alloca(fx, self.rt.arg.array_type(vars.len().max(1) as u32).into(), "vars")?;
        let spec_texts: Vec<String> = specs.iter().map(compiler_core::ir::print::spec_text).collect();
        // A result check (see `Op::Pattern`): the variables' values, then the results.
        let first_result = if results { args.len().saturating_sub(labels.len()) } else { args.len() };
        let checked = if results { &args[first_result..] } else { args };
        let type_texts: Vec<String> = checked
            .iter()
            .zip(specs)
            .map(|(a, spec)| {
                compiler_core::sema::hir::Type { elem: fx.irf.ty(*a).elem, shape: spec.clone() }.to_string()
            })
            .collect();
        // Arguments by their parameters' names; results by what they are.
        let names: Vec<String> = if results {
            labels.to_vec()
        } else {
            args.iter()
                .enumerate()
                .map(|(k, a)| match labels.get(k) {
                    Some(l) => l.clone(),
                    None => fx.irf.values[a.0 as usize]
                        .name
                        .as_ref()
                        .map_or_else(|| format!("#{}", k + 1), |n| n.to_string()),
                })
                .collect()
        };
        let var_names: Vec<String> = vars.iter().map(|v| v.to_string()).collect();
        let fname = self.cstring(function);
        let specs_c = self.cstring(&spec_texts.join(";"));
        let types_c = self.cstring(&type_texts.join(";"));
        let names_c = self.cstring(&names.join(";"));
        let vars_c = self.cstring(&var_names.join(";"));
        let n = self.const_i64(args.len() as i64);
        let first_result = self.const_i64(first_result as i64);
        let loc = fx.loc;
        let r = self
            .call(
                self.rt.pattern,
                &[
                    fx.ctxp.into(),
                    loc.into(),
                    fname.into(),
                    specs_c.into(),
                    types_c.into(),
                    names_c.into(),
                    vars_c.into(),
                    n.into(),
                    first_result.into(),
                    buf.into(),
                    out.into(),
                ],
            )?
            .ok_or_else(|| CodegenError::Bug("wl_pattern".into()))?;
        let failed =
            self.b.build_int_compare(IntPredicate::NE, r.into_int_value(), self.i32().const_zero(), "failed")?;
        let cont = self.ctx.append_basic_block(fx.func, "ok");
        self.b.build_conditional_branch(failed, fx.fail_bb, cont)?;
        self.b.position_at_end(cont);
        // `wl_pattern` gives a scalar variable as its bits and as a rank-0
        // array: a scalar-typed variable reads the bits and releases the array.
        for (k, d) in s.defs.iter().enumerate() {
            let slot = self.gep(self.rt.arg, out, &[self.const_i64(k as i64)], "var")?;
            let ty = fx.irf.ty(*d).clone();
            let x = self.read_arg(slot, &ty)?;
            if scalar_repr(&ty) {
                let p = self.b.build_struct_gep(self.rt.arg, slot, 3, "ptr")?;
                let boxed = self.b.build_load(self.ptr(), p, "boxed")?;
                self.dec(boxed)?;
            }
            fx.vals.insert(*d, x);
        }
        Ok(())
    }
}

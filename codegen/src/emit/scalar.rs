//! Scalar arithmetic with the reference interpreter's semantics
//! (`compiler_core::interp::ops`), bit for bit:
//!
//! * integers wrap at their width; `/` and `%` truncate and report division by
//!   zero (R0003); `MIN / -1` wraps instead of trapping; `mod` is APL's;
//! * shifts take the amount modulo 64 and work on the 64-bit value, then wrap;
//! * unsigned types compare, divide and convert unsigned; `char` and `bool`
//!   compare unsigned;
//! * floating point is IEEE; `min`/`max` are `x < y ? x : y` / `x > y ? x : y`;
//! * conversions go through a saturating 64-bit integer like Rust's `as`;
//! * math functions call the C library (the interpreter's are the same calls),
//!   except the inverse hyperbolic functions, whose Rust implementations differ
//!   from C's and are called in the runtime.
//!
//! Everything here is branch-free except the division-by-zero test, so loops of
//! scalar code vectorise.

use compiler_core::interp::ops::{BinOp, UnOp};
use compiler_core::sema::hir::MathFn;
use compiler_core::syntax::ast::BaseType;
use inkwell::intrinsics::Intrinsic;
use inkwell::types::BasicTypeEnum;
use inkwell::values::{BasicValueEnum, FloatValue, IntValue, PointerValue};
use inkwell::{FloatPredicate, IntPredicate};

use super::{Emitter, Fx, R, signed};
use crate::CodegenError;

fn unsigned_cmp(b: BaseType) -> bool {
    !signed(b)
}

impl<'ctx, 'a> Emitter<'ctx, 'a> {
    /// Records error `code` with a fixed message at `loc` and leaves the function
    /// when `failed` holds.
    pub fn fail_if(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        failed: IntValue<'ctx>,
        loc: PointerValue<'ctx>,
        code: &str,
        message: &str,
    ) -> R<()> {
        let bad = self.ctx.append_basic_block(fx.func, "fail.here");
        let ok = self.ctx.append_basic_block(fx.func, "ok");
        self.b.build_conditional_branch(failed, bad, ok)?;
        self.b.position_at_end(bad);
        self.record_fail(fx, loc, code, message)?;
        self.b.build_unconditional_branch(fx.fail_bb)?;
        self.b.position_at_end(ok);
        Ok(())
    }

    /// Records an error and leaves the function (the builder ends up in an
    /// unreachable block).
    pub fn fail_now(&mut self, fx: &Fx<'ctx, 'a>, loc: PointerValue<'ctx>, code: &str, message: &str) -> R<()> {
        self.record_fail(fx, loc, code, message)?;
        self.goto_fail(fx)
    }

    /// Records an error (the caller then leaves the function).
    pub fn record_fail(&mut self, fx: &Fx<'ctx, 'a>, loc: PointerValue<'ctx>, code: &str, message: &str) -> R<()> {
        let code = self.cstring(code);
        let message = self.cstring(message);
        self.call(self.rt.fail, &[fx.ctxp.into(), loc.into(), code.into(), message.into()])?;
        Ok(())
    }

    pub(crate) fn intrinsic(
        &self,
        name: &str,
        types: &[BasicTypeEnum<'ctx>],
    ) -> R<inkwell::values::FunctionValue<'ctx>> {
        Intrinsic::find(name)
            .and_then(|i| i.get_declaration(&self.module, types))
            .ok_or_else(|| CodegenError::Bug(format!("LLVM intrinsic {name}")))
    }

    pub(crate) fn call_intrinsic(
        &mut self,
        name: &str,
        types: &[BasicTypeEnum<'ctx>],
        args: &[BasicValueEnum<'ctx>],
    ) -> R<BasicValueEnum<'ctx>> {
        let f = self.intrinsic(name, types)?;
        let args: Vec<_> = args.iter().map(|a| (*a).into()).collect();
        self.call(f, &args)?.ok_or_else(|| CodegenError::Bug(format!("{name} returns nothing")))
    }

    /// A C library function on floats (`sin`, `sinf`).
    fn call_libm(&mut self, name: &str, b: BaseType, args: &[BasicValueEnum<'ctx>]) -> R<BasicValueEnum<'ctx>> {
        let fty = self.scalar_ty(b).into_float_type();
        let name = if b == BaseType::Float { format!("{name}f") } else { name.to_string() };
        let f = match self.module.get_function(&name) {
            Some(f) => f,
            None => {
                let params: Vec<_> = args.iter().map(|_| fty.into()).collect();
                self.module.add_function(&name, fty.fn_type(&params, false), Some(inkwell::module::Linkage::External))
            }
        };
        let args: Vec<_> = args.iter().map(|a| (*a).into()).collect();
        self.call(f, &args)?.ok_or_else(|| CodegenError::Bug(format!("{name} returns nothing")))
    }

    /// `x op y` on scalars of base type `b`.
    pub fn scalar_bin(
        &mut self,
        fx: &Fx<'ctx, 'a>,
        op: BinOp,
        b: BaseType,
        x: BasicValueEnum<'ctx>,
        y: BasicValueEnum<'ctx>,
        loc: PointerValue<'ctx>,
    ) -> R<BasicValueEnum<'ctx>> {
        if b.is_real() {
            return self.float_bin(op, x.into_float_value(), y.into_float_value());
        }
        let (x, y) = (x.into_int_value(), y.into_int_value());
        let ity = x.get_type();
        let bld = &self.b;
        let cmp = |p: IntPredicate, q: IntPredicate| if unsigned_cmp(b) { q } else { p };
        let r: IntValue<'ctx> = match op {
            BinOp::Add => bld.build_int_add(x, y, "add")?,
            BinOp::Sub => bld.build_int_sub(x, y, "sub")?,
            BinOp::Mul => bld.build_int_mul(x, y, "mul")?,
            BinOp::Div | BinOp::Mod => {
                let zero = self.b.build_int_compare(IntPredicate::EQ, y, ity.const_zero(), "zero")?;
                let what = if op == BinOp::Div { "integer division by zero" } else { "integer remainder by zero" };
                self.fail_if(fx, zero, loc, "R0003", what)?;
                if signed(b) {
                    // MIN / -1 wraps (to MIN; the remainder is 0) instead of trapping.
                    let minus1 = self.b.build_int_compare(IntPredicate::EQ, y, ity.const_all_ones(), "m1")?;
                    let safe = self.b.build_select(minus1, ity.const_int(1, false), y, "y")?.into_int_value();
                    if op == BinOp::Div {
                        let q = self.b.build_int_signed_div(x, safe, "div")?;
                        let neg = self.b.build_int_neg(x, "neg")?;
                        self.b.build_select(minus1, neg, q, "div")?.into_int_value()
                    } else {
                        let r = self.b.build_int_signed_rem(x, safe, "rem")?;
                        self.b.build_select(minus1, ity.const_zero(), r, "rem")?.into_int_value()
                    }
                } else if op == BinOp::Div {
                    self.b.build_int_unsigned_div(x, y, "div")?
                } else {
                    self.b.build_int_unsigned_rem(x, y, "rem")?
                }
            }
            BinOp::AplMod => {
                let zero = self.b.build_int_compare(IntPredicate::EQ, y, ity.const_zero(), "zero")?;
                if signed(b) {
                    let minus1 = self.b.build_int_compare(IntPredicate::EQ, y, ity.const_all_ones(), "m1")?;
                    let odd = self.b.build_or(zero, minus1, "odd")?;
                    let safe = self.b.build_select(odd, ity.const_int(1, false), y, "y")?.into_int_value();
                    let r = self.b.build_int_signed_rem(x, safe, "rem")?;
                    let r = self.b.build_select(minus1, ity.const_zero(), r, "rem")?.into_int_value();
                    let nonzero = self.b.build_int_compare(IntPredicate::NE, r, ity.const_zero(), "nz")?;
                    let rneg = self.b.build_int_compare(IntPredicate::SLT, r, ity.const_zero(), "rneg")?;
                    let yneg = self.b.build_int_compare(IntPredicate::SLT, y, ity.const_zero(), "yneg")?;
                    let differ = self.b.build_xor(rneg, yneg, "differ")?;
                    let adjust = self.b.build_and(nonzero, differ, "adjust")?;
                    let sum = self.b.build_int_add(r, y, "adj")?;
                    let m = self.b.build_select(adjust, sum, r, "mod")?.into_int_value();
                    self.b.build_select(zero, x, m, "mod")?.into_int_value()
                } else {
                    let safe = self.b.build_select(zero, ity.const_int(1, false), y, "y")?.into_int_value();
                    let r = self.b.build_int_unsigned_rem(x, safe, "rem")?;
                    self.b.build_select(zero, x, r, "mod")?.into_int_value()
                }
            }
            BinOp::Min => {
                let lt = bld.build_int_compare(cmp(IntPredicate::SLT, IntPredicate::ULT), x, y, "lt")?;
                bld.build_select(lt, x, y, "min")?.into_int_value()
            }
            BinOp::Max => {
                let gt = bld.build_int_compare(cmp(IntPredicate::SGT, IntPredicate::UGT), x, y, "gt")?;
                bld.build_select(gt, x, y, "max")?.into_int_value()
            }
            BinOp::Eq => bld.build_int_compare(IntPredicate::EQ, x, y, "eq")?,
            BinOp::Ne => bld.build_int_compare(IntPredicate::NE, x, y, "ne")?,
            BinOp::Lt => bld.build_int_compare(cmp(IntPredicate::SLT, IntPredicate::ULT), x, y, "lt")?,
            BinOp::Le => bld.build_int_compare(cmp(IntPredicate::SLE, IntPredicate::ULE), x, y, "le")?,
            BinOp::Gt => bld.build_int_compare(cmp(IntPredicate::SGT, IntPredicate::UGT), x, y, "gt")?,
            BinOp::Ge => bld.build_int_compare(cmp(IntPredicate::SGE, IntPredicate::UGE), x, y, "ge")?,
            BinOp::And | BinOp::BitAnd => bld.build_and(x, y, "and")?,
            BinOp::Or | BinOp::BitOr => bld.build_or(x, y, "or")?,
            BinOp::BitXor => bld.build_xor(x, y, "xor")?,
            BinOp::Shl | BinOp::Shr => {
                // On the 64-bit value, the amount modulo 64, then wrapped.
                let i64t = self.i64();
                let wide = |v: IntValue<'ctx>| -> R<IntValue<'ctx>> {
                    Ok(if ity.get_bit_width() == 64 {
                        v
                    } else if signed(b) {
                        self.b.build_int_s_extend(v, i64t, "wide")?
                    } else {
                        self.b.build_int_z_extend(v, i64t, "wide")?
                    })
                };
                let xw = wide(x)?;
                let yw = wide(y)?;
                let amount = self.b.build_and(yw, i64t.const_int(63, false), "amount")?;
                let r = match op {
                    BinOp::Shl => self.b.build_left_shift(xw, amount, "shl")?,
                    _ => self.b.build_right_shift(xw, amount, signed(b), "shr")?,
                };
                if ity.get_bit_width() == 64 { r } else { self.b.build_int_truncate(r, ity, "shift")? }
            }
        };
        Ok(r.into())
    }

    fn float_bin(&mut self, op: BinOp, x: FloatValue<'ctx>, y: FloatValue<'ctx>) -> R<BasicValueEnum<'ctx>> {
        let bld = &self.b;
        Ok(match op {
            BinOp::Add => bld.build_float_add(x, y, "fadd")?.into(),
            BinOp::Sub => bld.build_float_sub(x, y, "fsub")?.into(),
            BinOp::Mul => bld.build_float_mul(x, y, "fmul")?.into(),
            BinOp::Div => bld.build_float_div(x, y, "fdiv")?.into(),
            BinOp::Min => {
                let lt = bld.build_float_compare(FloatPredicate::OLT, x, y, "lt")?;
                bld.build_select(lt, x, y, "fmin")?
            }
            BinOp::Max => {
                let gt = bld.build_float_compare(FloatPredicate::OGT, x, y, "gt")?;
                bld.build_select(gt, x, y, "fmax")?
            }
            BinOp::Eq => bld.build_float_compare(FloatPredicate::OEQ, x, y, "eq")?.into(),
            BinOp::Ne => bld.build_float_compare(FloatPredicate::UNE, x, y, "ne")?.into(),
            BinOp::Lt => bld.build_float_compare(FloatPredicate::OLT, x, y, "lt")?.into(),
            BinOp::Le => bld.build_float_compare(FloatPredicate::OLE, x, y, "le")?.into(),
            BinOp::Gt => bld.build_float_compare(FloatPredicate::OGT, x, y, "gt")?.into(),
            BinOp::Ge => bld.build_float_compare(FloatPredicate::OGE, x, y, "ge")?.into(),
            other => {
                return Err(CodegenError::Bug(format!(
                    "`{}` on floating point reached code generation",
                    other.symbol()
                )));
            }
        })
    }

    /// `op x` on a scalar of base type `b`.
    pub fn scalar_un(&mut self, op: UnOp, b: BaseType, x: BasicValueEnum<'ctx>) -> R<BasicValueEnum<'ctx>> {
        if b.is_real() {
            let x = x.into_float_value();
            return Ok(match op {
                UnOp::Neg => self.b.build_float_neg(x, "fneg")?.into(),
                UnOp::Abs => {
                    let neg = self.b.build_float_compare(FloatPredicate::OLT, x, x.get_type().const_zero(), "neg")?;
                    let minus = self.b.build_float_neg(x, "fneg")?;
                    self.b.build_select(neg, minus, x, "fabs")?
                }
                other => return Err(CodegenError::Bug(format!("`{}` on floating point", other.symbol()))),
            });
        }
        let x = x.into_int_value();
        let ity = x.get_type();
        Ok(match op {
            UnOp::Neg => self.b.build_int_neg(x, "neg")?.into(),
            UnOp::Abs if signed(b) => {
                let neg = self.b.build_int_compare(IntPredicate::SLT, x, ity.const_zero(), "neg")?;
                let minus = self.b.build_int_neg(x, "neg")?;
                self.b.build_select(neg, minus, x, "abs")?
            }
            UnOp::Abs => x.into(),
            UnOp::Not | UnOp::BitNot => self.b.build_not(x, "not")?.into(),
        })
    }

    /// The C cast `(to) x` as the interpreter does it.
    pub fn scalar_conv(&mut self, from: BaseType, to: BaseType, x: BasicValueEnum<'ctx>) -> R<BasicValueEnum<'ctx>> {
        if from == to {
            return Ok(x);
        }
        let i64t = self.i64();
        let u64_type = |t: BaseType| matches!(t, BaseType::ULong | BaseType::ULongLong);
        // The value as the interpreter's wide integer.
        let as_i64 = |this: &mut Self| -> R<IntValue<'ctx>> {
            Ok(match from {
                BaseType::Float | BaseType::Double => {
                    let ft = this.scalar_ty(from);
                    this.call_intrinsic("llvm.fptosi.sat", &[i64t.into(), ft], &[x])?.into_int_value()
                }
                BaseType::Bool => this.b.build_int_z_extend(x.into_int_value(), i64t, "wide")?,
                BaseType::Char => this.b.build_int_s_extend(x.into_int_value(), i64t, "wide")?,
                t if t.is_signed() => this.b.build_int_s_extend_or_bit_cast(x.into_int_value(), i64t, "wide")?,
                _ => this.b.build_int_z_extend_or_bit_cast(x.into_int_value(), i64t, "wide")?,
            })
        };
        Ok(match to {
            BaseType::Bool => {
                let w = as_i64(self)?;
                self.b.build_int_compare(IntPredicate::NE, w, i64t.const_zero(), "bool")?.into()
            }
            BaseType::Float | BaseType::Double => {
                let ft = self.scalar_ty(to).into_float_type();
                match from {
                    BaseType::Float | BaseType::Double => {
                        self.b.build_float_cast(x.into_float_value(), ft, "fconv")?.into()
                    }
                    t if u64_type(t) => self.b.build_unsigned_int_to_float(x.into_int_value(), ft, "uitofp")?.into(),
                    _ => {
                        let w = as_i64(self)?;
                        self.b.build_signed_int_to_float(w, ft, "sitofp")?.into()
                    }
                }
            }
            t => {
                let ity = self.scalar_ty(t).into_int_type();
                let w = if u64_type(t) && from.is_real() {
                    let ft = self.scalar_ty(from);
                    self.call_intrinsic("llvm.fptoui.sat", &[i64t.into(), ft], &[x])?.into_int_value()
                } else {
                    as_i64(self)?
                };
                self.b.build_int_truncate_or_bit_cast(w, ity, "conv")?.into()
            }
        })
    }

    /// A C math function of `x` (and `y`) of base type `b` (`float` or `double`).
    pub fn scalar_math(
        &mut self,
        f: MathFn,
        b: BaseType,
        x: BasicValueEnum<'ctx>,
        y: Option<BasicValueEnum<'ctx>>,
    ) -> R<BasicValueEnum<'ctx>> {
        let ft = self.scalar_ty(b);
        let y = || y.ok_or_else(|| CodegenError::Bug(format!("{f:?} without its second argument")));
        let intr = |this: &mut Self, name: &str, args: &[BasicValueEnum<'ctx>]| this.call_intrinsic(name, &[ft], args);
        Ok(match f {
            MathFn::Sqrt => intr(self, "llvm.sqrt", &[x])?,
            MathFn::Floor => intr(self, "llvm.floor", &[x])?,
            MathFn::Ceil => intr(self, "llvm.ceil", &[x])?,
            MathFn::Trunc => intr(self, "llvm.trunc", &[x])?,
            MathFn::Round => intr(self, "llvm.round", &[x])?,
            MathFn::Rint => intr(self, "llvm.roundeven", &[x])?,
            MathFn::Fabs => intr(self, "llvm.fabs", &[x])?,
            MathFn::Copysign => intr(self, "llvm.copysign", &[x, y()?])?,
            MathFn::Pow => intr(self, "llvm.pow", &[x, y()?])?,
            MathFn::Exp => intr(self, "llvm.exp", &[x])?,
            MathFn::Log => intr(self, "llvm.log", &[x])?,
            MathFn::Log10 => intr(self, "llvm.log10", &[x])?,
            MathFn::Log2 => intr(self, "llvm.log2", &[x])?,
            MathFn::Sin => intr(self, "llvm.sin", &[x])?,
            MathFn::Cos => intr(self, "llvm.cos", &[x])?,
            MathFn::Fmod => self.b.build_float_rem(x.into_float_value(), y()?.into_float_value(), "fmod")?.into(),
            MathFn::Cbrt => self.call_libm("cbrt", b, &[x])?,
            MathFn::Expm1 => self.call_libm("expm1", b, &[x])?,
            MathFn::Log1p => self.call_libm("log1p", b, &[x])?,
            MathFn::Tan => self.call_libm("tan", b, &[x])?,
            MathFn::Asin => self.call_libm("asin", b, &[x])?,
            MathFn::Acos => self.call_libm("acos", b, &[x])?,
            MathFn::Atan => self.call_libm("atan", b, &[x])?,
            MathFn::Sinh => self.call_libm("sinh", b, &[x])?,
            MathFn::Cosh => self.call_libm("cosh", b, &[x])?,
            MathFn::Tanh => self.call_libm("tanh", b, &[x])?,
            MathFn::Atan2 => self.call_libm("atan2", b, &[x, y()?])?,
            MathFn::Hypot => self.call_libm("hypot", b, &[x, y()?])?,
            MathFn::Asinh | MathFn::Acosh | MathFn::Atanh => {
                let which = match f {
                    MathFn::Asinh => 0,
                    MathFn::Acosh => 1,
                    _ => 2,
                };
                let func = if b == BaseType::Float { self.rt.math_f32 } else { self.rt.math_f64 };
                let code = self.i32().const_int(which, false);
                self.call(func, &[code.into(), x.into()])?.ok_or_else(|| CodegenError::Bug("wl_math".into()))?
            }
            MathFn::IsNan => {
                let xv = x.into_float_value();
                self.b.build_float_compare(FloatPredicate::UNO, xv, xv, "isnan")?.into()
            }
            MathFn::IsInf => {
                let a = intr(self, "llvm.fabs", &[x])?.into_float_value();
                let inf = ft.into_float_type().const_float(f64::INFINITY);
                self.b.build_float_compare(FloatPredicate::OEQ, a, inf, "isinf")?.into()
            }
        })
    }
}

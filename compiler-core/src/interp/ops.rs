//! Scalar operations with C semantics, and their element-wise extension to arrays.
//!
//! Integer arithmetic wraps to the width of the type; `/` truncates toward zero and
//! `%` is the C remainder (both report division by zero); `mod` (`_aplmod_`) is the
//! APL modulo, whose non-zero result has the sign of the divisor and with `x mod 0 = x`.
//! Floating point is IEEE (`1.0/0.0` is infinity). Binary operations need equal base
//! types: SaC has no implicit conversions.

use super::value::{Array, Elems, Scalar, Value, is_u64, wrap_int};
use crate::diagnostics::{self as codes, Code};
use crate::sema::hir::MathFn;
use crate::syntax::ast::BaseType;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    /// C `%`.
    Mod,
    /// APL modulo.
    AplMod,
    Min,
    Max,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
    BitAnd,
    BitOr,
    BitXor,
    Shl,
    Shr,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnOp {
    Neg,
    Not,
    BitNot,
    Abs,
}

impl BinOp {
    /// The operator as it applies to arrays, element by element: `&` and `|`
    /// for the logical ones (SaC's `&&` and `||` take scalars only).
    pub fn elementwise_symbol(self) -> &'static str {
        match self {
            BinOp::And => "&",
            BinOp::Or => "|",
            other => other.symbol(),
        }
    }

    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Mod => "%",
            BinOp::AplMod => "mod",
            BinOp::Min => "min",
            BinOp::Max => "max",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::And => "&&",
            BinOp::Or => "||",
            BinOp::BitAnd => "&",
            BinOp::BitOr => "|",
            BinOp::BitXor => "^",
            BinOp::Shl => "<<",
            BinOp::Shr => ">>",
        }
    }

    pub fn is_comparison(self) -> bool {
        matches!(self, BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge)
    }

    /// Whether the operation is defined on this base type.
    pub fn accepts(self, base: BaseType) -> bool {
        match self {
            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Min | BinOp::Max => base.is_numeric(),
            BinOp::Mod | BinOp::AplMod | BinOp::Shl | BinOp::Shr => base.is_integer(),
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => true,
            BinOp::And | BinOp::Or => base == BaseType::Bool,
            BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor => base.is_integer() || base == BaseType::Bool,
        }
    }

    pub fn result_base(self, operand: BaseType) -> BaseType {
        if self.is_comparison() { BaseType::Bool } else { operand }
    }
}

impl UnOp {
    pub fn symbol(self) -> &'static str {
        match self {
            UnOp::Neg => "-",
            UnOp::Not => "!",
            UnOp::BitNot => "~",
            UnOp::Abs => "abs",
        }
    }

    pub fn accepts(self, base: BaseType) -> bool {
        match self {
            UnOp::Neg | UnOp::Abs => base.is_numeric(),
            UnOp::Not => base == BaseType::Bool,
            UnOp::BitNot => base.is_integer(),
        }
    }
}

/// A failed operation: code and message; the interpreter adds the location.
#[derive(Clone, Debug, PartialEq)]
pub struct OpError {
    pub code: Code,
    pub message: String,
}

impl OpError {
    pub fn new(code: Code, message: impl Into<String>) -> OpError {
        OpError { code, message: message.into() }
    }
}

pub type OpResult<T> = Result<T, OpError>;

fn type_error(op: &str, a: BaseType, b: Option<BaseType>) -> OpError {
    let message = match b {
        Some(b) if b != a => format!("`{op}` needs operands of the same type, got {a} and {b}"),
        _ => format!("`{op}` is not defined on {a}"),
    };
    OpError::new(codes::RUNTIME_TYPE_MISMATCH, message)
}

fn cmp_int(ty: BaseType, x: i64, y: i64) -> std::cmp::Ordering {
    if is_u64(ty) { (x as u64).cmp(&(y as u64)) } else { x.cmp(&y) }
}

fn int_binop(op: BinOp, ty: BaseType, x: i64, y: i64) -> OpResult<Scalar> {
    use std::cmp::Ordering::*;
    let u = is_u64(ty);
    let w = |v: i64| Ok(Scalar::Int(ty, wrap_int(ty, v)));
    let b = |v: bool| Ok(Scalar::Bool(v));
    match op {
        BinOp::Add => w(x.wrapping_add(y)),
        BinOp::Sub => w(x.wrapping_sub(y)),
        BinOp::Mul => w(x.wrapping_mul(y)),
        BinOp::Div | BinOp::Mod if y == 0 => Err(OpError::new(
            codes::DIVISION_BY_ZERO,
            format!("integer {} by zero", if op == BinOp::Div { "division" } else { "remainder" }),
        )),
        BinOp::Div => w(if u { ((x as u64) / (y as u64)) as i64 } else { x.wrapping_div(y) }),
        BinOp::Mod => w(if u { ((x as u64) % (y as u64)) as i64 } else { x.wrapping_rem(y) }),
        BinOp::AplMod => {
            if y == 0 {
                return w(x);
            }
            if u || !ty.is_signed() {
                return w(if u { ((x as u64) % (y as u64)) as i64 } else { x % y });
            }
            let r = x.wrapping_rem(y);
            w(if r != 0 && ((r < 0) != (y < 0)) { r + y } else { r })
        }
        BinOp::Min => w(if cmp_int(ty, x, y) == Less { x } else { y }),
        BinOp::Max => w(if cmp_int(ty, x, y) == Greater { x } else { y }),
        BinOp::Eq => b(x == y),
        BinOp::Ne => b(x != y),
        BinOp::Lt => b(cmp_int(ty, x, y) == Less),
        BinOp::Le => b(cmp_int(ty, x, y) != Greater),
        BinOp::Gt => b(cmp_int(ty, x, y) == Greater),
        BinOp::Ge => b(cmp_int(ty, x, y) != Less),
        BinOp::BitAnd => w(x & y),
        BinOp::BitOr => w(x | y),
        BinOp::BitXor => w(x ^ y),
        BinOp::Shl => w(x.wrapping_shl((y & 63) as u32)),
        BinOp::Shr => w(if ty.is_signed() { x.wrapping_shr((y & 63) as u32) } else { ((x as u64) >> (y & 63)) as i64 }),
        BinOp::And | BinOp::Or => Err(type_error(op.symbol(), ty, None)),
    }
}

macro_rules! real_binop {
    ($op:expr, $x:expr, $y:expr, $wrap:path) => {{
        let (x, y) = ($x, $y);
        match $op {
            BinOp::Add => Ok($wrap(x + y)),
            BinOp::Sub => Ok($wrap(x - y)),
            BinOp::Mul => Ok($wrap(x * y)),
            BinOp::Div => Ok($wrap(x / y)),
            BinOp::Min => Ok($wrap(if x < y { x } else { y })),
            BinOp::Max => Ok($wrap(if x > y { x } else { y })),
            BinOp::Eq => Ok(Scalar::Bool(x == y)),
            BinOp::Ne => Ok(Scalar::Bool(x != y)),
            BinOp::Lt => Ok(Scalar::Bool(x < y)),
            BinOp::Le => Ok(Scalar::Bool(x <= y)),
            BinOp::Gt => Ok(Scalar::Bool(x > y)),
            BinOp::Ge => Ok(Scalar::Bool(x >= y)),
            _ => Err(type_error($op.symbol(), $wrap(x).base(), None)),
        }
    }};
}

/// `a op b` on scalars of the same base type.
pub fn scalar_binop(op: BinOp, a: Scalar, b: Scalar) -> OpResult<Scalar> {
    match (a, b) {
        (Scalar::Int(t, x), Scalar::Int(u, y)) if t == u => int_binop(op, t, x, y),
        (Scalar::Double(x), Scalar::Double(y)) => real_binop!(op, x, y, Scalar::Double),
        (Scalar::Float(x), Scalar::Float(y)) => real_binop!(op, x, y, Scalar::Float),
        (Scalar::Bool(x), Scalar::Bool(y)) => Ok(Scalar::Bool(match op {
            BinOp::Eq => x == y,
            BinOp::Ne => x != y,
            BinOp::Lt => !x & y,
            BinOp::Le => x <= y,
            BinOp::Gt => x & !y,
            BinOp::Ge => x >= y,
            BinOp::And | BinOp::BitAnd => x & y,
            BinOp::Or | BinOp::BitOr => x | y,
            BinOp::BitXor => x ^ y,
            _ => return Err(type_error(op.symbol(), BaseType::Bool, None)),
        })),
        (Scalar::Char(x), Scalar::Char(y)) if op.is_comparison() => Ok(Scalar::Bool(match op {
            BinOp::Eq => x == y,
            BinOp::Ne => x != y,
            BinOp::Lt => x < y,
            BinOp::Le => x <= y,
            BinOp::Gt => x > y,
            _ => x >= y,
        })),
        _ => Err(type_error(op.symbol(), a.base(), Some(b.base()))),
    }
}

pub fn scalar_unop(op: UnOp, a: Scalar) -> OpResult<Scalar> {
    match (op, a) {
        (UnOp::Neg, Scalar::Int(t, x)) => Ok(Scalar::Int(t, wrap_int(t, x.wrapping_neg()))),
        (UnOp::Neg, Scalar::Double(x)) => Ok(Scalar::Double(-x)),
        (UnOp::Neg, Scalar::Float(x)) => Ok(Scalar::Float(-x)),
        (UnOp::Abs, Scalar::Int(t, x)) => {
            Ok(Scalar::Int(t, if t.is_signed() && x < 0 { wrap_int(t, x.wrapping_neg()) } else { x }))
        }
        (UnOp::Abs, Scalar::Double(x)) => Ok(Scalar::Double(if x < 0.0 { -x } else { x })),
        (UnOp::Abs, Scalar::Float(x)) => Ok(Scalar::Float(if x < 0.0 { -x } else { x })),
        (UnOp::Not, Scalar::Bool(x)) => Ok(Scalar::Bool(!x)),
        (UnOp::BitNot, Scalar::Int(t, x)) => Ok(Scalar::Int(t, wrap_int(t, !x))),
        _ => Err(type_error(op.symbol(), a.base(), None)),
    }
}

/// The C cast `(to) a` (SaC's `toi`, `tod`, …). Bool conversion truncates to an
/// integer first and tests for non-zero, as sac2c does.
pub fn convert(a: Scalar, to: BaseType) -> Scalar {
    // Widest exact intermediate forms.
    let as_i64 = |s: Scalar| -> i64 {
        match s {
            Scalar::Bool(b) => b as i64,
            Scalar::Char(c) => c as i8 as i64,
            Scalar::Int(_, v) => v,
            Scalar::Float(f) => f as i64,
            Scalar::Double(d) => d as i64,
        }
    };
    match to {
        BaseType::Bool => Scalar::Bool(as_i64(a) != 0),
        BaseType::Char => Scalar::Char(as_i64(a) as u8),
        BaseType::Float => Scalar::Float(match a {
            Scalar::Int(t, v) if is_u64(t) => v as u64 as f32,
            Scalar::Double(d) => d as f32,
            Scalar::Float(f) => f,
            other => as_i64(other) as f32,
        }),
        BaseType::Double => Scalar::Double(match a {
            Scalar::Int(t, v) if is_u64(t) => v as u64 as f64,
            Scalar::Double(d) => d,
            Scalar::Float(f) => f as f64,
            other => as_i64(other) as f64,
        }),
        t => {
            let v = match a {
                Scalar::Double(d) if is_u64(t) => d as u64 as i64,
                Scalar::Float(f) if is_u64(t) => f as u64 as i64,
                other => as_i64(other),
            };
            Scalar::Int(t, wrap_int(t, v))
        }
    }
}

/// A C math function on a `float` or `double` scalar (`float` computes in single
/// precision, like C's `sinf`).
pub fn scalar_math(f: MathFn, a: Scalar, b: Option<Scalar>) -> OpResult<Scalar> {
    macro_rules! apply {
        ($x:expr, $y:expr, $t:ty, $wrap:path) => {{
            let x: $t = $x;
            let y: $t = $y;
            let r: $t = match f {
                MathFn::Sqrt => x.sqrt(),
                MathFn::Cbrt => x.cbrt(),
                MathFn::Exp => x.exp(),
                MathFn::Expm1 => x.exp_m1(),
                MathFn::Log => x.ln(),
                MathFn::Log10 => x.log10(),
                MathFn::Log2 => x.log2(),
                MathFn::Log1p => x.ln_1p(),
                MathFn::Sin => x.sin(),
                MathFn::Cos => x.cos(),
                MathFn::Tan => x.tan(),
                MathFn::Asin => x.asin(),
                MathFn::Acos => x.acos(),
                MathFn::Atan => x.atan(),
                MathFn::Sinh => x.sinh(),
                MathFn::Cosh => x.cosh(),
                MathFn::Tanh => x.tanh(),
                MathFn::Asinh => x.asinh(),
                MathFn::Acosh => x.acosh(),
                MathFn::Atanh => x.atanh(),
                MathFn::Floor => x.floor(),
                MathFn::Ceil => x.ceil(),
                MathFn::Round => x.round(),
                MathFn::Trunc => x.trunc(),
                MathFn::Rint => x.round_ties_even(),
                MathFn::Fabs => x.abs(),
                MathFn::Pow => x.powf(y),
                MathFn::Atan2 => x.atan2(y),
                MathFn::Fmod => x % y,
                MathFn::Hypot => x.hypot(y),
                MathFn::Copysign => x.copysign(y),
                MathFn::IsNan => return Ok(Scalar::Bool(x.is_nan())),
                MathFn::IsInf => return Ok(Scalar::Bool(x.is_infinite())),
            };
            Ok($wrap(r))
        }};
    }
    match (a, b) {
        (Scalar::Double(x), None) => apply!(x, 0.0, f64, Scalar::Double),
        (Scalar::Double(x), Some(Scalar::Double(y))) => apply!(x, y, f64, Scalar::Double),
        (Scalar::Float(x), None) => apply!(x, 0.0, f32, Scalar::Float),
        (Scalar::Float(x), Some(Scalar::Float(y))) => apply!(x, y, f32, Scalar::Float),
        (a, b) => Err(OpError::new(
            codes::RUNTIME_TYPE_MISMATCH,
            match b {
                Some(b) if b.base() != a.base() => {
                    format!("`{f:?}` needs arguments of the same type, got {} and {}", a.base(), b.base())
                }
                _ => format!("`{}` is defined on float and double, not {}", format!("{f:?}").to_lowercase(), a.base()),
            },
        )),
    }
}

/// [`scalar_math`] with scalar extension.
pub fn elementwise_math(f: MathFn, args: &[Value]) -> OpResult<Value> {
    let first = args.first().ok_or_else(internal)?;
    let result_base = match f {
        MathFn::IsNan | MathFn::IsInf => BaseType::Bool,
        _ => first.base().unwrap_or(BaseType::Double),
    };
    let shape = args.iter().find(|a| a.rank() > 0).map(|a| a.shape().to_vec());
    let Some(shape) = shape else {
        let b = args.get(1).and_then(Value::as_scalar);
        let a = first.as_scalar().ok_or_else(|| OpError::new(codes::RUNTIME_TYPE_MISMATCH, "math on a string"))?;
        return Ok(Value::Scalar(scalar_math(f, a, b)?));
    };
    for a in args {
        if a.rank() > 0 && a.shape() != shape.as_slice() {
            return Err(OpError::new(
                codes::SHAPE_MISMATCH,
                format!("arrays of shapes {} and {}", shape_text(&shape), shape_text(a.shape())),
            ));
        }
    }
    let n = shape.iter().product::<usize>();
    let mut out = Elems::with_capacity(result_base, n).map_err(too_large)?;
    for i in 0..n {
        let get = |v: &Value| if v.rank() == 0 { v.elem(0) } else { v.elem(i) };
        let a = get(first).ok_or_else(internal)?;
        let b = match args.get(1) {
            Some(v) => Some(get(v).ok_or_else(internal)?),
            None => None,
        };
        out.push(scalar_math(f, a, b)?);
    }
    Ok(Value::from_parts(shape, out))
}

fn shape_text(shape: &[usize]) -> String {
    format!("[{}]", shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(","))
}

/// Applies `f` to every element, building an array of base type `result`.
pub fn map_elems(a: &Array, result: BaseType, f: impl Fn(Scalar) -> OpResult<Scalar>) -> OpResult<Value> {
    let n = a.elems.len();
    let mut out = Elems::with_capacity(result, n).map_err(too_large)?;
    for i in 0..n {
        let x = a.elems.get(i).ok_or_else(internal)?;
        if !out.push(f(x)?) {
            return Err(internal());
        }
    }
    Ok(Value::Array(Arc::new(Array { shape: a.shape.clone(), elems: out })))
}

pub fn too_large(e: super::value::TooLarge) -> OpError {
    OpError::new(
        codes::ALLOCATION_TOO_LARGE,
        match e.elements {
            Some(n) => format!("cannot allocate an array of {n} elements"),
            None => "array size overflows".to_string(),
        },
    )
}

fn internal() -> OpError {
    OpError::new(codes::INTERNAL_ERROR, "element access out of range in the interpreter")
}

/// `a op b` with scalar extension; arrays must have equal shapes.
pub fn elementwise_binop(op: BinOp, a: &Value, b: &Value) -> OpResult<Value> {
    let (Some(ta), Some(tb)) = (a.base(), b.base()) else {
        return Err(OpError::new(codes::RUNTIME_TYPE_MISMATCH, format!("`{}` is not defined on strings", op.symbol())));
    };
    if ta != tb || !op.accepts(ta) {
        return Err(type_error(op.symbol(), ta, Some(tb)));
    }
    let rb = op.result_base(ta);
    match (a, b) {
        (Value::Scalar(x), Value::Scalar(y)) => Ok(Value::Scalar(scalar_binop(op, *x, *y)?)),
        (Value::Array(x), Value::Scalar(y)) => map_elems(x, rb, |e| scalar_binop(op, e, *y)),
        (Value::Scalar(x), Value::Array(y)) => map_elems(y, rb, |e| scalar_binop(op, *x, e)),
        (Value::Array(x), Value::Array(y)) => {
            if x.shape != y.shape {
                return Err(OpError::new(
                    codes::SHAPE_MISMATCH,
                    format!(
                        "`{}` on arrays of shapes {} and {}",
                        op.elementwise_symbol(),
                        shape_text(&x.shape),
                        shape_text(&y.shape)
                    ),
                ));
            }
            let n = x.elems.len();
            let mut out = Elems::with_capacity(rb, n).map_err(too_large)?;
            for i in 0..n {
                let r = scalar_binop(op, x.elems.get(i).ok_or_else(internal)?, y.elems.get(i).ok_or_else(internal)?)?;
                out.push(r);
            }
            Ok(Value::Array(Arc::new(Array { shape: x.shape.clone(), elems: out })))
        }
        _ => Err(internal()),
    }
}

pub fn elementwise_unop(op: UnOp, a: &Value) -> OpResult<Value> {
    match a {
        Value::Scalar(x) => Ok(Value::Scalar(scalar_unop(op, *x)?)),
        Value::Array(x) => {
            if !op.accepts(x.elems.base()) {
                return Err(type_error(op.symbol(), x.elems.base(), None));
            }
            map_elems(x, x.elems.base(), |e| scalar_unop(op, e))
        }
        Value::Str(_) => {
            Err(OpError::new(codes::RUNTIME_TYPE_MISMATCH, format!("`{}` is not defined on strings", op.symbol())))
        }
    }
}

pub fn elementwise_convert(a: &Value, to: BaseType) -> OpResult<Value> {
    match a {
        Value::Scalar(x) => Ok(Value::Scalar(convert(*x, to))),
        Value::Array(x) => map_elems(x, to, |e| Ok(convert(e, to))),
        Value::Str(_) => Err(OpError::new(codes::RUNTIME_TYPE_MISMATCH, "strings cannot be converted to numbers")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn i(v: i64) -> Scalar {
        Scalar::int(v)
    }

    #[test]
    fn c_division_and_apl_modulo() {
        assert_eq!(scalar_binop(BinOp::Div, i(-7), i(2)), Ok(i(-3)));
        assert_eq!(scalar_binop(BinOp::Mod, i(-7), i(3)), Ok(i(-1)));
        assert_eq!(scalar_binop(BinOp::AplMod, i(-7), i(3)), Ok(i(2)));
        assert_eq!(scalar_binop(BinOp::AplMod, i(7), i(-3)), Ok(i(-2)));
        assert_eq!(scalar_binop(BinOp::AplMod, i(3), i(-2)), Ok(i(-1)));
        assert_eq!(scalar_binop(BinOp::AplMod, i(5), i(0)), Ok(i(5)));
        assert_eq!(scalar_binop(BinOp::Div, i(1), i(0)).unwrap_err().code, codes::DIVISION_BY_ZERO);
    }

    #[test]
    fn int_wraps_at_32_bits() {
        assert_eq!(scalar_binop(BinOp::Add, i(i32::MAX as i64), i(1)), Ok(i(i32::MIN as i64)));
        let ul = Scalar::Int(BaseType::ULong, -1); // u64::MAX
        assert_eq!(scalar_binop(BinOp::Gt, ul, Scalar::Int(BaseType::ULong, 1)), Ok(Scalar::Bool(true)));
    }

    #[test]
    fn mixed_types_are_errors() {
        assert!(scalar_binop(BinOp::Add, i(1), Scalar::Double(1.0)).is_err());
        assert!(scalar_binop(BinOp::Mod, Scalar::Double(1.0), Scalar::Double(1.0)).is_err());
    }

    #[test]
    fn conversions_truncate_like_c() {
        assert_eq!(convert(Scalar::Double(-2.7), BaseType::Int), i(-2));
        assert_eq!(convert(Scalar::Bool(true), BaseType::Double), Scalar::Double(1.0));
        assert_eq!(convert(Scalar::Double(0.5), BaseType::Bool), Scalar::Bool(false));
        assert_eq!(convert(i(300), BaseType::UByte), Scalar::Int(BaseType::UByte, 44));
    }

    #[test]
    fn elementwise_extension_and_shape_checks() {
        let v = Value::int_vector(&[1, 2, 3]);
        let r = elementwise_binop(BinOp::Sub, &v, &Value::Scalar(i(1))).unwrap();
        assert_eq!(r, Value::int_vector(&[0, 1, 2]));
        let w = Value::int_vector(&[1, 2, 3, 4]);
        assert_eq!(elementwise_binop(BinOp::Add, &v, &w).unwrap_err().code, codes::SHAPE_MISMATCH);
    }
}

//! The resolved program: what name resolution produces and the interpreter runs.
//!
//! Compared with the AST: names are resolved (variables to [`LocalId`] slots of their
//! function, calls to the overload set they can reach, `_prim_` names to [`Prim`]),
//! sugar is gone (operators are calls, `a[iv] = e` is a `modarray` call, `for` is
//! `while`, tensor comprehensions are with-loops), typedefs are expanded, and each
//! assignment knows whether its value is ever used.
//!
//! Functions live in one arena ([`Program::functions`]) addressed by [`FunId`]; user
//! functions and the library functions they reach are resolved, the rest of the
//! library stays as signatures only.

use std::rc::Rc;

use crate::interp::ops::{BinOp, UnOp};
use crate::interp::value::Value;
use crate::span::Span;
use crate::syntax::ast::{BaseType, Inline, Name, Rel, ShapeSpec};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FunId(pub u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LocalId(pub u32);

/// Identifies a call site, for the interpreter's dispatch cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SiteId(pub u32);

/// Identifies a with-loop (types of its cells are recorded per instance).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WithId(pub u32);

/// Identifies a `while`, `do`/`while` or `for` loop (inference records per
/// instance which loops it entered; the loops of one macro expansion share a
/// span, so spans cannot tell them apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LoopId(pub u32);

/// Element type of a resolved type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elem {
    Base(BaseType),
    /// Only as `printf` formats and similar.
    String,
}

impl std::fmt::Display for Elem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Elem::Base(b) => write!(f, "{b}"),
            Elem::String => f.write_str("string"),
        }
    }
}

/// A type with typedefs expanded.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Type {
    pub elem: Elem,
    pub shape: ShapeSpec,
}

impl std::fmt::Display for Type {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::syntax::ast::{DimCount, DimPattern};
        write!(f, "{}", self.elem)?;
        match &self.shape {
            ShapeSpec::Scalar => Ok(()),
            ShapeSpec::Any => f.write_str("[*]"),
            ShapeSpec::NonScalar => f.write_str("[+]"),
            ShapeSpec::Dims(dims) => {
                let parts: Vec<String> = dims
                    .iter()
                    .map(|d| match d {
                        DimPattern::Known(k) => k.to_string(),
                        DimPattern::Dot => ".".into(),
                        DimPattern::Var(n) => n.to_string(),
                        DimPattern::Plus => "+".into(),
                        DimPattern::Star => "*".into(),
                        DimPattern::Vector { count, name } => {
                            let c = match count {
                                DimCount::Known(k) => k.to_string(),
                                DimCount::Var(v) => v.to_string(),
                                DimCount::Anonymous => "_".into(),
                                DimCount::AtLeast(v, k) => format!("{v}>{}", k - 1),
                            };
                            format!("{c}:{}", name.as_deref().unwrap_or("_"))
                        }
                    })
                    .collect();
                write!(f, "[{}]", parts.join(","))
            }
        }
    }
}

#[derive(Clone, Debug)]
pub struct Param {
    pub name: Name,
    pub local: LocalId,
    pub ty: Type,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct LocalInfo {
    pub name: Name,
    pub span: Span,
    /// From a declaration `int[3] x;`: values assigned must conform.
    pub declared: Option<Type>,
}

/// Functions implemented by the interpreter rather than in SaC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intrinsic {
    /// `printf(format, ...)`
    Printf,
}

#[derive(Clone, Debug)]
pub struct Function {
    pub name: Name,
    /// The library module that defines it; `None` for the user's program.
    pub module: Option<Name>,
    pub span: Span,
    pub name_span: Span,
    pub inline: Inline,
    pub params: Vec<Param>,
    pub results: Vec<Type>,
    /// Type-pattern variables (`n` in `int[n]`), bound on entry.
    pub pattern_locals: Vec<(Name, LocalId)>,
    /// Type-pattern conditions, checked on entry after binding.
    pub conditions: Vec<Expr>,
    pub body: Vec<Stmt>,
    pub locals: Vec<LocalInfo>,
    /// Set once the body has been resolved.
    pub resolved: bool,
    /// No observable effect other than its results (no printing).
    pub pure: bool,
    /// Whether each parameter is read at all (unused arguments are not evaluated).
    pub param_used: Vec<bool>,
    pub intrinsic: Option<Intrinsic>,
}

impl Function {
    pub fn is_library(&self) -> bool {
        self.module.is_some()
    }

    /// `name(type, type)` for messages.
    pub fn signature(&self) -> String {
        let params: Vec<String> = self.params.iter().map(|p| p.ty.to_string()).collect();
        match self.intrinsic {
            Some(_) => format!("{}(...)", self.name),
            None => format!("{}({})", self.name, params.join(", ")),
        }
    }
}

#[derive(Clone, Debug)]
pub enum Stmt {
    Assign {
        targets: Vec<LocalId>,
        value: Expr,
        live: bool,
        span: Span,
    },
    If {
        cond: Expr,
        then_body: Vec<Stmt>,
        else_body: Vec<Stmt>,
        span: Span,
    },
    While {
        id: LoopId,
        cond: Expr,
        body: Vec<Stmt>,
        span: Span,
    },
    DoWhile {
        id: LoopId,
        body: Vec<Stmt>,
        cond: Expr,
        span: Span,
    },
    Return {
        values: Vec<Expr>,
        span: Span,
    },
    /// An expression evaluated for its effect (`print(a);`).
    Eval {
        expr: Expr,
        span: Span,
    },
}

#[derive(Clone, Debug)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

/// A resolved call target: every instance of the name (with this arity) that the
/// call site can see. The most specific applicable one is chosen per call.
#[derive(Clone, Debug)]
pub struct Callee {
    pub name: Name,
    pub candidates: Rc<[FunId]>,
    pub site: SiteId,
}

#[derive(Clone, Debug)]
pub enum ExprKind {
    Const(Value),
    Local(LocalId),
    Call {
        callee: Callee,
        args: Vec<Expr>,
    },
    Prim {
        prim: Prim,
        args: Vec<Expr>,
    },
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Cond {
        cond: Box<Expr>,
        then_expr: Box<Expr>,
        else_expr: Box<Expr>,
    },
    /// `[a, b, c]`: elements of equal shape and type.
    Array(Vec<Expr>),
    With(Box<With>),
    /// `(T) e`: convert the base type like C, then check the shape against `T`.
    Cast {
        ty: Type,
        expr: Box<Expr>,
    },
}

/// A with-loop: partitions of an index space, one value per operator each.
#[derive(Clone, Debug)]
pub struct With {
    pub id: WithId,
    pub parts: Vec<WithPart>,
    pub ops: Vec<WithOp>,
    pub span: Span,
    /// Element type of cells, when it can be read off the source (used only when
    /// no element is computed and no default is given).
    pub cell_hint: Option<BaseType>,
    /// Parts are tried in order and the first that covers an index wins (tensor
    /// comprehensions); otherwise later parts overwrite earlier ones (with-loops).
    pub first_match: bool,
}

#[derive(Clone, Debug)]
pub enum Bound {
    /// `.`
    Dot(Span),
    Expr(Expr),
}

#[derive(Clone, Debug)]
pub struct WithPart {
    pub lower: Option<(Bound, Rel)>,
    pub upper: (Rel, Bound),
    pub step: Option<Expr>,
    pub width: Option<Expr>,
    /// `iv` in `(lb <= iv < ub)`.
    pub index_vector: Option<LocalId>,
    /// `[i, j]` in `(lb <= [i, j] < ub)`.
    pub index_scalars: Option<Vec<LocalId>>,
    pub body: Vec<Stmt>,
    pub results: Vec<Expr>,
    pub generator_span: Span,
    pub span: Span,
}

/// What a fold combines with: a function's overload set or a primitive.
#[derive(Clone, Debug)]
pub enum FoldTarget {
    Call(Callee),
    Prim(Prim),
}

#[derive(Clone, Debug)]
pub struct FoldFun {
    pub target: FoldTarget,
    /// Leading arguments of a partially applied fold function.
    pub partial: Vec<Expr>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum WithOp {
    Genarray { shape: Expr, default: Option<Expr>, span: Span },
    Modarray { array: Expr, span: Span },
    Fold { fun: FoldFun, neutral: Expr, span: Span },
    FoldFix { fun: FoldFun, neutral: Expr, fixpoint: Expr, span: Span },
}

impl WithOp {
    pub fn span(&self) -> Span {
        match self {
            WithOp::Genarray { span, .. }
            | WithOp::Modarray { span, .. }
            | WithOp::Fold { span, .. }
            | WithOp::FoldFix { span, .. } => *span,
        }
    }
}

/// What a `_hide…_` primitive makes the compiler forget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Hidden {
    Value,
    Shape,
    Dim,
}

/// One axis of a selection with free axes (`a[[., i, ...]]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DotKind {
    /// An index component (taken from the argument list in order).
    Index,
    /// `.`: one free axis.
    Dot,
    /// `...`: the free axes left over.
    Ellipsis,
}

/// Primitive operations, implemented by the interpreter (and later by code
/// generation). Arithmetic works element-wise on any shapes with scalar extension.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Prim {
    Bin(BinOp),
    Un(UnOp),
    Conv(BaseType),
    /// `_dim_A_`
    Dim,
    /// `_shape_A_`
    Shape,
    /// `_size_A_`
    Size,
    /// `_sel_VxA_(iv, a)`: element or sub-array at a prefix index.
    Sel,
    /// `_modarray_AxVxS_(a, iv, v)` / `_modarray_AxVxA_`.
    Modarray,
    /// `_reshape_VxA_(shp, a)`
    Reshape,
    /// `_genarray_VxA_(shp, v)`: `shp ++ shape(v)` copies of `v`.
    Genarray,
    /// `_cat_VxV_(a, b)`: concatenation along the first axis.
    Cat,
    /// `_take_SxV_(n, v)`
    Take,
    /// `_drop_SxV_(n, v)`
    Drop,
    /// `_hideValue_SxA_`, `_hideShape_SxA_`, `_hideDim_SxA_`: identity at run time;
    /// statically they forget the value, the shape, or the rank.
    Hide(Hidden),
    /// `_vect2offset_(shp, iv)`: row-major offset of the index `iv` in shape `shp`.
    Vect2Offset,
    /// `_idx_sel_(off, a)`: the element at row-major offset `off`.
    IdxSel,
    /// `_idx_modarray_AxSxS_(a, off, v)`: `a` with the element at offset `off` replaced.
    IdxModarray,
    /// `matmul(a, b, shp, upper)`: the matrix product of the rows and columns
    /// `shp` (`int[2]`) selects, over `k < upper` (`int[1]`):
    /// `c[i, j] = fold(+, 0.0, a[i, k] * b[k, j])`, each fold in the order of
    /// `k` from 0.0 (`a`, `b`: `double` matrices). Not in the language: the
    /// `gemm` pass makes it of a with-loop that computes exactly that.
    MatMul,
    /// `_all_V_(bv)`: whether every element of a bool vector is true.
    All,
    /// Selection with free axes; the first argument is the array, then the indices.
    DotSelect(std::sync::Arc<[DotKind]>),
    /// Rearranges `tmp` (frame axes ++ cell axes) so that cell axes sit where a
    /// tensor comprehension's frame pattern puts its dots.
    FrameArrange(std::sync::Arc<[DotKind]>),
    /// Shape of a tensor comprehension part inferred from selections: the minimum,
    /// component-wise, of the argument vectors.
    MinVectors,
    /// Component-wise maximum of vectors (frame shape of a multi-part comprehension).
    MaxVectors,
    /// `_print_S_`: StdIO's scalar print.
    PrintScalar,
    /// `_print_A_`: StdIO's array print.
    PrintArray,
    /// `_show_S_`: value and newline, no header.
    Show,
    /// `_puts_`: string and newline.
    Puts,
    /// `_error_`: raises a run-time error with the given message (library checks).
    Error,
    /// `printf(format, args…)`: C's formatted print (the IR's form of the
    /// `printf` intrinsic; yields 0).
    Printf,
    /// `_sqrt_S_`, `_pow_SxS_`, …: C math functions on `float`/`double`, element-wise.
    Math(MathFn),
}

/// The math functions of C's `<math.h>` that SaC's `Math` module exposes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MathFn {
    Sqrt,
    Cbrt,
    Exp,
    Expm1,
    Log,
    Log10,
    Log2,
    Log1p,
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Tanh,
    Asinh,
    Acosh,
    Atanh,
    Floor,
    Ceil,
    Round,
    Trunc,
    Rint,
    Fabs,
    Pow,
    Atan2,
    Fmod,
    Hypot,
    Copysign,
    IsNan,
    IsInf,
}

impl MathFn {
    pub fn arity(self) -> usize {
        match self {
            MathFn::Pow | MathFn::Atan2 | MathFn::Fmod | MathFn::Hypot | MathFn::Copysign => 2,
            _ => 1,
        }
    }

    pub fn from_name(name: &str) -> Option<MathFn> {
        use MathFn::*;
        Some(match name {
            "sqrt" => Sqrt,
            "cbrt" => Cbrt,
            "exp" => Exp,
            "expm1" => Expm1,
            "log" => Log,
            "log10" => Log10,
            "log2" => Log2,
            "log1p" => Log1p,
            "sin" => Sin,
            "cos" => Cos,
            "tan" => Tan,
            "asin" => Asin,
            "acos" => Acos,
            "atan" => Atan,
            "sinh" => Sinh,
            "cosh" => Cosh,
            "tanh" => Tanh,
            "asinh" => Asinh,
            "acosh" => Acosh,
            "atanh" => Atanh,
            "floor" => Floor,
            "ceil" => Ceil,
            "round" => Round,
            "trunc" => Trunc,
            "rint" => Rint,
            "fabs" => Fabs,
            "pow" => Pow,
            "atan2" => Atan2,
            "fmod" => Fmod,
            "hypot" => Hypot,
            "copysign" => Copysign,
            "isnan" => IsNan,
            "isinf" => IsInf,
            _ => return None,
        })
    }
}

impl Prim {
    /// Whether evaluating it can be observed other than through its result.
    pub fn has_effect(&self) -> bool {
        matches!(self, Prim::PrintScalar | Prim::PrintArray | Prim::Show | Prim::Puts | Prim::Printf)
    }
}

/// A resolved program.
#[derive(Clone, Debug, Default)]
pub struct Program {
    /// Every function, library stubs first. Shared (`Rc`): a compile starts
    /// from the library's stubs as made once per thread, and only the
    /// functions it resolves or changes are copied (`Rc::make_mut`); cloning
    /// the thousands of stubs for every compile was a sixth of a trivial
    /// program's compile in the service.
    pub functions: Vec<Rc<Function>>,
    /// User-visible overload sets by name (entry points are looked up here).
    pub user_names: crate::HashMap<Name, Vec<FunId>>,
    pub n_sites: u32,
    pub n_withs: u32,
}

impl Program {
    pub fn function(&self, id: FunId) -> &Function {
        &self.functions[id.0 as usize]
    }

    /// User-defined functions named `name`.
    pub fn user_functions(&self, name: &str) -> Vec<FunId> {
        self.user_names
            .get(name)
            .map(|ids| ids.iter().copied().filter(|id| !self.function(*id).is_library()).collect())
            .unwrap_or_default()
    }
}

//! The untyped syntax tree, as close to the source as is useful.
//!
//! Every node has a span. Sugar is kept (selection `a[i,j]`, `x += e`, `a[iv] = e`,
//! operators, tensor comprehensions) and removed later by name resolution, so tools
//! can still point at what the user wrote. The two with-loop syntaxes (the papers'
//! `with (gen) { … } genarray(shp, e)` and modern `with { (gen) : e; } : genarray(shp)`)
//! are normalised into one [`WithLoop`] shape here, because they mean the same thing.

use smol_str::SmolStr;

use crate::span::Span;

pub type Name = SmolStr;

/// A whole source file after preprocessing.
#[derive(Clone, Debug, Default)]
pub struct SourceModule {
    pub items: Vec<Item>,
}

#[derive(Clone, Debug)]
pub enum Item {
    Function(FunDef),
    Typedef(Typedef),
    Import(Import),
    /// `module M;` / `class C;`: the file is a library module.
    ModuleHeader {
        name: Name,
        span: Span,
    },
    /// `export all;`, `export {f};`, `provide {...};`: accepted; a program exports everything.
    Export {
        span: Span,
    },
    /// `specialize int[3] f(int[3] a);`: asks for an instance.
    Specialize(Specialize),
    /// Something we parse but do not support (objects, classes, externals).
    Unsupported {
        what: String,
        span: Span,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inline {
    Default,
    Inline,
    Noinline,
}

#[derive(Clone, Debug)]
pub struct FunDef {
    pub name: Name,
    pub name_span: Span,
    /// `M::f` definitions are not SaC; kept for error messages.
    pub inline: Inline,
    /// Empty for `void`.
    pub results: Vec<TypeExpr>,
    pub params: Vec<Param>,
    /// Type-pattern conditions after `|`.
    pub conditions: Vec<Expr>,
    pub body: Block,
    /// The function is named by an operator (`+`, `++`, `<=`, …).
    pub is_operator: bool,
    /// Parsing its definition reported errors (later phases then avoid
    /// follow-on complaints such as a missing `return`).
    pub syntax_errors: bool,
    /// Names from a malformed type pattern (not reported again as unknown).
    pub lost_names: Vec<Name>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct Param {
    pub ty: TypeExpr,
    pub name: Name,
    pub name_span: Span,
    /// `T &x` reference parameter (objects; not supported, kept for diagnostics).
    pub by_ref: bool,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct Typedef {
    pub name: Name,
    pub ty: TypeExpr,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImportKind {
    Use,
    Import,
}

#[derive(Clone, Debug)]
pub enum ImportSelection {
    All,
    AllExcept(Vec<(Name, Span)>),
    Only(Vec<(Name, Span)>),
}

#[derive(Clone, Debug)]
pub struct Import {
    pub kind: ImportKind,
    pub module: Name,
    pub module_span: Span,
    pub selection: ImportSelection,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct Specialize {
    pub name: Name,
    pub results: Vec<TypeExpr>,
    pub params: Vec<TypeExpr>,
    pub span: Span,
}

/// The element types of SaC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BaseType {
    Bool,
    Char,
    Byte,
    Short,
    Int,
    Long,
    LongLong,
    UByte,
    UShort,
    UInt,
    ULong,
    ULongLong,
    Float,
    Double,
}

impl BaseType {
    pub const ALL: [BaseType; 14] = [
        BaseType::Bool,
        BaseType::Char,
        BaseType::Byte,
        BaseType::Short,
        BaseType::Int,
        BaseType::Long,
        BaseType::LongLong,
        BaseType::UByte,
        BaseType::UShort,
        BaseType::UInt,
        BaseType::ULong,
        BaseType::ULongLong,
        BaseType::Float,
        BaseType::Double,
    ];

    pub fn from_name(name: &str) -> Option<BaseType> {
        Some(match name {
            "bool" => BaseType::Bool,
            "char" => BaseType::Char,
            "byte" => BaseType::Byte,
            "short" => BaseType::Short,
            "int" => BaseType::Int,
            "long" => BaseType::Long,
            "longlong" => BaseType::LongLong,
            "ubyte" => BaseType::UByte,
            "ushort" => BaseType::UShort,
            "uint" => BaseType::UInt,
            "ulong" => BaseType::ULong,
            "ulonglong" => BaseType::ULongLong,
            "float" => BaseType::Float,
            "double" => BaseType::Double,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            BaseType::Bool => "bool",
            BaseType::Char => "char",
            BaseType::Byte => "byte",
            BaseType::Short => "short",
            BaseType::Int => "int",
            BaseType::Long => "long",
            BaseType::LongLong => "longlong",
            BaseType::UByte => "ubyte",
            BaseType::UShort => "ushort",
            BaseType::UInt => "uint",
            BaseType::ULong => "ulong",
            BaseType::ULongLong => "ulonglong",
            BaseType::Float => "float",
            BaseType::Double => "double",
        }
    }

    pub fn is_integer(self) -> bool {
        !matches!(self, BaseType::Bool | BaseType::Char | BaseType::Float | BaseType::Double)
    }

    pub fn is_real(self) -> bool {
        matches!(self, BaseType::Float | BaseType::Double)
    }

    pub fn is_numeric(self) -> bool {
        self.is_integer() || self.is_real()
    }

    pub fn is_signed(self) -> bool {
        matches!(
            self,
            BaseType::Byte
                | BaseType::Short
                | BaseType::Int
                | BaseType::Long
                | BaseType::LongLong
                | BaseType::Float
                | BaseType::Double
        )
    }
}

impl std::fmt::Display for BaseType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The element type named in a type: a built-in base type, a typedef name, or the
/// special types `void` and `string`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TypeName {
    Base(BaseType),
    Named(Name),
    Void,
    String,
}

/// A type as written: element type plus shape specification.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TypeExpr {
    pub name: TypeName,
    pub shape: ShapeSpec,
    pub span: Span,
}

/// The part of a type in brackets.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ShapeSpec {
    /// No brackets (or `[]`): a scalar.
    Scalar,
    /// `[*]`: any rank (AUD).
    Any,
    /// `[+]`: rank at least one (AUD).
    NonScalar,
    /// A list of dimension patterns: `[3,4]`, `[.,.]`, `[n,m]`, `[n:shp]`, `[+,n]`, …
    Dims(Vec<DimPattern>),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DimPattern {
    /// A known extent, `3`.
    Known(i64),
    /// An unknown extent, `.`.
    Dot,
    /// An extent bound to (or checked against) a variable, `n`.
    Var(Name),
    /// One or more dimensions, `+`.
    Plus,
    /// Zero or more dimensions, `*`.
    Star,
    /// `count:name` — `count` dimensions whose extents form the vector `name`
    /// (`_` leaves it unnamed).
    Vector { count: DimCount, name: Option<Name> },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DimCount {
    Known(i64),
    Var(Name),
    /// `_`: any number of dimensions.
    Anonymous,
    /// `d>0` and the like: a variable with a lower bound.
    AtLeast(Name, i64),
}

impl ShapeSpec {
    pub fn is_scalar(&self) -> bool {
        matches!(self, ShapeSpec::Scalar)
    }
}

#[derive(Clone, Debug)]
pub struct Block {
    pub stmts: Vec<Stmt>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
}

/// A target on the left of `=`.
#[derive(Clone, Debug)]
pub struct Target {
    pub name: Name,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum StmtKind {
    /// `int[3] a, b;`
    Decl {
        ty: TypeExpr,
        names: Vec<Target>,
    },
    /// `a = e;`, `a, b = f(x);`
    Assign {
        targets: Vec<Target>,
        value: Expr,
    },
    /// `a[iv] = e;`, `a[i,j] op= e;`, `a[i]++;` (op is `None` for plain `=`).
    IndexAssign {
        target: Target,
        index: Vec<Expr>,
        op: Option<Name>,
        value: Expr,
    },
    /// `x += e;` (the op is `+`).
    OpAssign {
        target: Target,
        op: Name,
        value: Expr,
    },
    /// `x++;`, `--x;` (op is `++` or `--`).
    Step {
        target: Target,
        op: Name,
        op_span: Span,
    },
    /// `a[i]++;`, `--a[iv];`
    IndexStep {
        target: Target,
        index: Vec<Expr>,
        op: Name,
        op_span: Span,
    },
    If {
        cond: Expr,
        then_branch: Block,
        else_branch: Option<Block>,
    },
    For {
        init: Vec<Stmt>,
        cond: Option<Expr>,
        step: Vec<Stmt>,
        body: Block,
    },
    While {
        cond: Expr,
        body: Block,
    },
    DoWhile {
        body: Block,
        cond: Expr,
    },
    Return {
        values: Vec<Expr>,
    },
    /// A call (or with-loop) evaluated for its effect: `print(a);`
    Expr(Expr),
    /// Something that did not parse; an error has been reported.
    Error,
}

#[derive(Clone, Debug)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

/// A function name in a call, possibly qualified (`Array::sum`).
#[derive(Clone, Debug)]
pub struct FunRef {
    pub module: Option<Name>,
    pub name: Name,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Literal {
    /// Integer literal with its type from the suffix (`int` by default).
    Int(i128, BaseType),
    /// Real literal with its type (`double` by default, `f` makes `float`).
    Real(f64, BaseType),
    Bool(bool),
    Char(u8),
}

#[derive(Clone, Debug)]
pub enum ExprKind {
    Lit(Literal),
    Str(Vec<u8>),
    Var(Name),
    Call {
        fun: FunRef,
        args: Vec<Expr>,
    },
    /// `a op b` for every infix operator except `&&` and `||`.
    Binary {
        op: Name,
        op_span: Span,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    /// Prefix `-x`, `!x`, `~x`, `++x`, `--x`, `+x`.
    Unary {
        op: Name,
        op_span: Span,
        operand: Box<Expr>,
    },
    /// `a && b` (short-circuit).
    And(Box<Expr>, Box<Expr>),
    /// `a || b` (short-circuit).
    Or(Box<Expr>, Box<Expr>),
    Cond {
        cond: Box<Expr>,
        then_expr: Box<Expr>,
        else_expr: Box<Expr>,
    },
    /// `[a, b, c]`; `[]` is the empty vector.
    Array(Vec<Expr>),
    /// `a[e]` (one index: scalar or index vector) and `a[i,j]` (components).
    Select {
        array: Box<Expr>,
        index: Vec<Expr>,
    },
    /// `a[[., i, ...]]`: selection with free axes.
    DotSelect {
        array: Box<Expr>,
        index: Vec<DotIndex>,
    },
    With(Box<WithLoop>),
    Tensor(Box<TensorComprehension>),
    /// `(type) e`
    Cast {
        ty: TypeExpr,
        expr: Box<Expr>,
    },
    /// Parse error placeholder; an error has been reported.
    Error,
}

#[derive(Clone, Debug)]
pub enum DotIndex {
    Expr(Expr),
    /// `.`: keep this axis.
    Dot(Span),
    /// `...`: keep any number of axes.
    Ellipsis(Span),
}

/// A with-loop in either syntax.
#[derive(Clone, Debug)]
pub struct WithLoop {
    pub parts: Vec<Part>,
    pub ops: Vec<WithOp>,
    pub syntax: WithSyntax,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WithSyntax {
    /// `with { (gen) : e; } : op`
    Modern,
    /// `with (gen) { … } op(…, e)` as in the papers.
    Classic,
}

/// One partition: a generator, local assignments, and one result per operator.
#[derive(Clone, Debug)]
pub struct Part {
    pub generator: Generator,
    pub body: Vec<Stmt>,
    pub results: Vec<Expr>,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rel {
    /// `<`
    Lt,
    /// `<=`
    Le,
}

#[derive(Clone, Debug)]
pub enum Bound {
    /// `.`: the lowest or highest legal index.
    Dot(Span),
    Expr(Expr),
}

impl Bound {
    pub fn span(&self) -> Span {
        match self {
            Bound::Dot(s) => *s,
            Bound::Expr(e) => e.span,
        }
    }
}

/// How the index is named: `iv`, `[i,j]`, or `iv=[i,j]`.
#[derive(Clone, Debug)]
pub struct IndexPattern {
    pub vector: Option<Target>,
    pub scalars: Option<Vec<Target>>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct Generator {
    /// `None` when the lower bound is omitted (`(iv < ub)`): all zeros.
    pub lower: Option<(Bound, Rel)>,
    pub index: IndexPattern,
    pub upper: (Rel, Bound),
    pub step: Option<Expr>,
    pub width: Option<Expr>,
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

/// The folding function: an operator or a (possibly qualified) function name,
/// optionally partially applied to leading arguments (`fold(f(k), 0)`).
#[derive(Clone, Debug)]
pub struct FoldFun {
    pub fun: FunRef,
    pub partial_args: Vec<Expr>,
}

/// `{ iv -> e | lb <= iv < ub; … }`
#[derive(Clone, Debug)]
pub struct TensorComprehension {
    pub parts: Vec<TensorPart>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum FrameElem {
    Var(Target),
    /// `.`: one cell axis.
    Dot(Span),
    /// `...`: the remaining cell axes.
    Ellipsis(Span),
}

#[derive(Clone, Debug)]
pub enum TensorPattern {
    /// `iv -> …`
    Vector(Target),
    /// `[i, ., j] -> …`
    Elems(Vec<FrameElem>),
}

#[derive(Clone, Debug)]
pub struct TensorPart {
    pub pattern: TensorPattern,
    pub body: Expr,
    /// The constraint after `|`, with the index in the position the user wrote it.
    pub lower: Option<(Expr, Rel)>,
    pub upper: Option<(Rel, Expr)>,
    pub step: Option<Expr>,
    pub width: Option<Expr>,
    pub span: Span,
}

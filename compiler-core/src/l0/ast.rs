//! The L0 abstract syntax tree: close to the source (seed 004 Fig. 2 and the
//! language reference, §2.3). Tuples, arrays of tuples, `zip` and curried SOAC
//! arguments are still here; the lowering removes them.

use crate::span::Span;
use crate::syntax::ast::Name;

/// L0's types. `[[int]]` is `Array(Array(Int))`; only the outermost array of a
/// value's type carries meaningful uniqueness (`*[[int]]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Type {
    Int,
    Real,
    Bool,
    Char,
    Tuple(Vec<Type>),
    Array(Box<Type>, Uniqueness),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Uniqueness {
    Nonunique,
    Unique,
}

impl Type {
    pub fn array(elem: Type, unique: Uniqueness) -> Type {
        Type::Array(Box::new(elem), unique)
    }

    /// The number of array dimensions before the element type.
    pub fn rank(&self) -> usize {
        match self {
            Type::Array(e, _) => 1 + e.rank(),
            _ => 0,
        }
    }

    /// Whether this is a unique array.
    pub fn is_unique(&self) -> bool {
        matches!(self, Type::Array(_, Uniqueness::Unique))
    }

    /// The same type with every array non-unique: what equality of types
    /// compares (unique is a subtype of non-unique).
    pub fn shape_of(&self) -> Type {
        match self {
            Type::Array(e, _) => Type::array(e.shape_of(), Uniqueness::Nonunique),
            Type::Tuple(ts) => Type::Tuple(ts.iter().map(Type::shape_of).collect()),
            t => t.clone(),
        }
    }

    /// The same type, outermost array unique or not.
    pub fn with_uniqueness(&self, u: Uniqueness) -> Type {
        match self {
            Type::Array(e, _) => Type::Array(e.clone(), u),
            Type::Tuple(ts) => Type::Tuple(ts.iter().map(|t| t.with_uniqueness(u)).collect()),
            t => t.clone(),
        }
    }

    /// Whether a value of type `self` may be used where `want` is expected:
    /// equal up to uniqueness, and unique where `want` is.
    pub fn fits(&self, want: &Type) -> bool {
        match (self, want) {
            (Type::Array(a, ua), Type::Array(b, ub)) => {
                (*ub == Uniqueness::Nonunique || *ua == Uniqueness::Unique) && a.shape_of() == b.shape_of()
            }
            (Type::Tuple(a), Type::Tuple(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.fits(y)),
            (a, b) => a == b,
        }
    }

    /// The leaves of the type, tuples flattened (a tuple of arrays of tuples
    /// flattens through the arrays: `[{int,real}]` has two leaves `[int]`, `[real]`).
    pub fn leaves(&self) -> Vec<Type> {
        match self {
            Type::Tuple(ts) => ts.iter().flat_map(Type::leaves).collect(),
            Type::Array(e, u) => e.leaves().into_iter().map(|l| Type::Array(Box::new(l), *u)).collect(),
            t => vec![t.clone()],
        }
    }

    /// The element type of an array type.
    pub fn elem(&self) -> Option<&Type> {
        match self {
            Type::Array(e, _) => Some(e),
            _ => None,
        }
    }

    pub fn is_numeric(&self) -> bool {
        matches!(self, Type::Int | Type::Real)
    }
}

impl std::fmt::Display for Type {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Type::Int => f.write_str("int"),
            Type::Real => f.write_str("real"),
            Type::Bool => f.write_str("bool"),
            Type::Char => f.write_str("char"),
            Type::Tuple(ts) => {
                f.write_str("{")?;
                for (i, t) in ts.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{t}")?;
                }
                f.write_str("}")
            }
            Type::Array(e, u) => {
                if *u == Uniqueness::Unique {
                    f.write_str("*")?;
                }
                write!(f, "[{e}]")
            }
        }
    }
}

/// The variable an indexed expression other than a variable is bound to
/// (`iota(n)[0]` is `let 0indexed = iota(n) in 0indexed[0]`): no program can
/// write the name (it starts with a digit), the IR's text form can.
pub const INDEXED: &str = "0indexed";

#[derive(Clone, Debug)]
pub struct Program {
    pub functions: Vec<FunDef>,
    /// Functions whose header parsed but whose body has a syntax error
    /// (reported): their calls are checked against the header, so that they
    /// do not say "unknown function".
    pub unparsed: Vec<FunHeader>,
}

impl Program {
    /// Every function's name, name span, parameters and result, those whose
    /// body did not parse among them, in no particular order.
    pub fn headers(&self) -> impl Iterator<Item = (&Name, Span, &[Param], &Type)> {
        let parsed = self.functions.iter().map(|f| (&f.name, f.name_span, f.params.as_slice(), &f.ret));
        parsed.chain(self.unparsed.iter().map(|f| (&f.name, f.name_span, f.params.as_slice(), &f.ret)))
    }
}

/// What a call of a function needs: its name, parameters and result type.
#[derive(Clone, Debug)]
pub struct FunHeader {
    pub name: Name,
    pub name_span: Span,
    pub ret: Type,
    pub params: Vec<Param>,
}

#[derive(Clone, Debug)]
pub struct FunDef {
    pub name: Name,
    pub name_span: Span,
    pub ret: Type,
    pub ret_span: Span,
    pub params: Vec<Param>,
    pub body: Expr,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct Param {
    pub ty: Type,
    pub name: Name,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Pow,
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

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Mod => "%",
            BinOp::Pow => "pow",
            BinOp::Eq => "=",
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
}

#[derive(Clone, Debug)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Soac {
    Map,
    Reduce,
    Scan,
    Filter,
}

impl Soac {
    pub fn name(self) -> &'static str {
        match self {
            Soac::Map => "map",
            Soac::Reduce => "reduce",
            Soac::Scan => "scan",
            Soac::Filter => "filter",
        }
    }
}

#[derive(Clone, Debug)]
pub enum ExprKind {
    Int(i64),
    Real(f64),
    Bool(bool),
    Char(char),
    Var(Name),
    Tuple(Vec<Expr>),
    Array(Vec<Expr>),
    Bin(BinOp, Box<Expr>, Box<Expr>),
    Neg(Box<Expr>),
    Not(Box<Expr>),
    If(Box<Expr>, Box<Expr>, Box<Expr>),
    /// `v[e1, …, en]`: only variables are indexed (the parser binds another
    /// expression indexed to [`INDEXED`]).
    Index {
        array: Name,
        array_span: Span,
        indices: Vec<Expr>,
    },
    /// A call of a user function or a built-in (`iota`, `size`, `sqrt`, …).
    Call {
        fun: Name,
        fun_span: Span,
        args: Vec<Expr>,
    },
    Let {
        pat: Pat,
        value: Box<Expr>,
        body: Box<Expr>,
    },
    /// `let dest = src with [indices] <- value in body` (and `let dest[indices] = value in body`).
    LetWith {
        dest: Name,
        dest_span: Span,
        src: Name,
        src_span: Span,
        indices: Vec<Expr>,
        value: Box<Expr>,
        body: Box<Expr>,
    },
    /// `loop (pat = init) = for var < bound do body in rest`; without `= init`
    /// the pattern's variables start from their current values.
    Loop {
        pat: Pat,
        init: Option<Box<Expr>>,
        var: Name,
        var_span: Span,
        bound: Box<Expr>,
        body: Box<Expr>,
        rest: Box<Expr>,
    },
    Soac {
        soac: Soac,
        fun: FnArg,
        args: Vec<Expr>,
    },
}

/// The function argument of a SOAC.
#[derive(Clone, Debug)]
pub enum FnArg {
    /// `f` or `f(e1, …)` (curried: the SOAC supplies the remaining arguments).
    Named { name: Name, span: Span, curried: Vec<Expr> },
    /// `fn t (t1 p1, …) => e`
    Lambda { ret: Type, params: Vec<Param>, body: Box<Expr>, span: Span },
    /// `op +` or `op +(e)` (the section's left operand given).
    Op { op: BinOp, left: Option<Box<Expr>>, span: Span },
}

impl FnArg {
    pub fn span(&self) -> Span {
        match self {
            FnArg::Named { span, .. } | FnArg::Lambda { span, .. } | FnArg::Op { span, .. } => *span,
        }
    }
}

#[derive(Clone, Debug)]
pub enum Pat {
    Id(Name, Span),
    Tuple(Vec<Pat>, Span),
}

impl Pat {
    pub fn span(&self) -> Span {
        match self {
            Pat::Id(_, s) | Pat::Tuple(_, s) => *s,
        }
    }

    /// The names bound, left to right.
    pub fn names(&self) -> Vec<(Name, Span)> {
        match self {
            Pat::Id(n, s) => vec![(n.clone(), *s)],
            Pat::Tuple(ps, _) => ps.iter().flat_map(Pat::names).collect(),
        }
    }
}

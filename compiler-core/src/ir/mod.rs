//! The optimising IR: one structured SSA form for SaC (and later L0).
//!
//! # Shape
//!
//! A [`Module`] holds [`Function`]s. A function has parameters, a body [`Block`]
//! and result types. A block is a sequence of [`Stmt`]s followed by the values it
//! *yields*: a function body yields its results, an `if` branch its values, a loop
//! body its next loop-carried values, a with-loop part one value per operator.
//! Each statement applies one [`Op`] and defines zero or more values.
//!
//! Every value is defined exactly once (SSA) and carries a static [`Ty`]
//! (element type and shape class, see [`crate::sema::ty`]). Values live in one
//! arena per function ([`ValueId`] indexes [`Function::values`]).
//!
//! # Scope and evaluation order
//!
//! A value is visible after its definition in its own block and in every block
//! nested inside the rest of that block (lexical scoping, as in SaC). Statements
//! run in order; an op's operands are evaluated before it. There is no
//! unstructured control flow: `if` and loops are ops with nested blocks. Ops other
//! than [`Op::Call`], [`Op::Check`] and effectful primitives (printing) are pure,
//! so a statement whose values are unused may be dropped, and identical pure
//! statements may be merged.
//!
//! # With-loops
//!
//! [`With`] is the generalised with-loop of seed 002 (`internal_with`): a list of
//! [`Part`]s, each an index set given by a generator — the vectors `lower`
//! (inclusive), `upper` (exclusive), `step` and `width`, all of the same length
//! `n`; index `iv` is in the set iff `lower <= iv < upper` and
//! `(iv - lower) mod step < width` component-wise — and a body block yielding one
//! value per operator ([`WithOp`]) for that index. A part binds its index as a
//! vector value (`index`) and/or its components as scalars (`scalars`), and may
//! bind `offset`, the row-major offset of the index in the result's frame (seed
//! 001's `idxwith`). Operators:
//!
//! * `genarray(shape, default)`: result of shape `shape ++ shape(cell)`; an index
//!   covered by several parts takes the value of the *last* covering part (or the
//!   *first*, when `first_match` is set: tensor comprehensions); uncovered indices
//!   take `default` (or zero of the cell type when there is none).
//! * `modarray(array)`: like genarray over `shape(array)`, uncovered indices keep
//!   `array`'s elements.
//! * `fold(f, neutral)`: combines the values of all covered indices, in index
//!   order per part and parts in order, starting from `neutral`;
//!   `foldfix(f, neutral, fix)` stops once the accumulator equals `fix`. A fold
//!   whose body computes the values it combines is a map–reduce (L0's `redomap`).
//! * `scan(shape, f, neutral)`: visits the indices of `shape` in row-major order,
//!   combining the value yielded at each covered index into an accumulator that
//!   starts at `neutral`; the result at every index is the accumulator there
//!   (uncovered indices leave it unchanged). L0's `scan`.
//! * Folds and scans over tuples: consecutive `fold`s (or `scan`s) whose
//!   functions are the lanes of one function ([`FoldFn::Lane`]) keep one
//!   accumulator each and combine them together, with one call per index.
//! * `filter(shape)`: takes two yields per part, a `bool` flag and a value; the
//!   result is the vector of the values whose flag is true, in row-major order of
//!   `shape`. L0's `filter`.
//!
//! Scans and filters traverse their frame in row-major order whatever the parts
//! are, so splitting or reordering parts does not change them; folds combine in
//! part order, so only exactly associative folds may be split.
//!
//! With every part dense (step = width = 1) and the parts plus the complement
//! known statically, a with-loop is exactly seed 002's partition of the index
//! space; with-loop folding works on that form.
//!
//! # Checks
//!
//! [`Op::Check`] raises the run-time error it describes when its condition is
//! false; primitives may assume what checks before them establish. Checks carry
//! the code, message and source location of the error. Bounds-check elimination
//! removes checks that generator bounds prove, and hoists loop-invariant ones.
//!
//! # Source locations
//!
//! Every statement has the span of the source it came from and a [`Blame`]: where
//! its run-time errors are reported. Errors in library code are reported at the
//! user's call that led there; errors of statements marked [`Blame::Caller`]
//! (argument patterns, `where` conditions, dispatch wrappers) at the call of their
//! function. Inlining keeps this: inlined library statements are blamed at the
//! call they were inlined into.
//!
//! # Text form
//!
//! [`print`] writes a module as text and [`parse`] reads it back; printing the
//! parsed text gives the same text (spans are not part of the text). [`verify`]
//! checks the invariants listed in its module documentation.

pub mod exports;
pub mod interp;
pub mod lower;
pub mod parse;
pub mod print;
pub mod verify;

#[cfg(test)]
mod tests;

use crate::interp::value::Value;
use crate::sema::hir::Prim;
use crate::sema::ty::Ty;
use crate::span::Span;
use crate::syntax::ast::Name;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FuncId(pub u32);

#[derive(Clone, Debug, PartialEq)]
pub struct ValueData {
    pub ty: Ty,
    /// The source variable it came from, for readable IR and messages.
    pub name: Option<Name>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FunctionKind {
    /// An instance of a source function.
    Instance,
    /// A dispatch wrapper: picks an instance on dim and shape.
    Wrapper,
}

#[derive(Clone, Debug)]
pub struct Function {
    /// Link name (`Det__i_3_3`).
    pub name: String,
    /// The function's name in the source (`Det`).
    pub source_name: Name,
    pub kind: FunctionKind,
    pub params: Vec<ValueId>,
    pub results: Vec<Ty>,
    pub body: Block,
    pub values: Vec<ValueData>,
    /// Declared `inline` (library functions are).
    pub inline: bool,
    /// Declared `noinline`: never inlined.
    pub noinline: bool,
    /// Rarely run (the original code beside a version for large arrays, see
    /// `opt::version`): compiled for size and speed of compilation, not of
    /// execution. Never inlined.
    pub cold: bool,
    /// Comes from library code.
    pub library: bool,
    /// For an instance specialised for the argument types at a call site
    /// (`Det__d_7_7`), the link name of the declared instance it narrows
    /// (`Det__d_X_X`): a call that dispatch reached it by may call that one
    /// instead (see `opt::retire`). `None` for
    /// declared and hinted instances, wrappers and everything else.
    pub specialises: Option<String>,
    pub span: Span,
}

impl Function {
    pub fn ty(&self, v: ValueId) -> &Ty {
        &self.values[v.0 as usize].ty
    }

    pub fn new_value(&mut self, ty: Ty, name: Option<Name>) -> ValueId {
        let id = ValueId(self.values.len() as u32);
        self.values.push(ValueData { ty, name });
        id
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Block {
    pub stmts: Vec<Stmt>,
    pub yields: Vec<ValueId>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Stmt {
    pub defs: Vec<ValueId>,
    pub op: Op,
    pub span: Span,
    pub blame: Blame,
}

/// Where a statement's run-time errors (and remarks) are reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blame {
    /// At the statement's own span (or, in library code, the user's call into it).
    Here,
    /// At this span: a statement inlined from library code or blamed on its caller.
    At(Span),
    /// At the call of the enclosing function.
    Caller,
}

impl Stmt {
    pub fn new(defs: Vec<ValueId>, op: Op, span: Span) -> Stmt {
        Stmt { defs, op, span, blame: Blame::Here }
    }

    /// Where errors about this statement point; `None`: at the caller.
    pub fn blame_span(&self) -> Option<Span> {
        match self.blame {
            Blame::Here => Some(self.span),
            Blame::At(s) => Some(s),
            Blame::Caller => None,
        }
    }
}

/// Function called by a with-loop fold.
#[derive(Clone, Debug, PartialEq)]
pub enum FoldFn {
    Prim(Prim),
    Call(FuncId),
    /// One accumulator of a fold over tuples (L0's `reduce` and `scan` of
    /// tuples): the `lanes` consecutive operators of a with-loop whose
    /// functions are lanes `0..lanes` of the same `func` combine together —
    /// `func(partial…, acc_0, …, acc_{n-1}, x_0, …, x_{n-1})` returns the `n`
    /// new accumulators. All lanes are folds, or all are scans over one
    /// shape, with the same partial arguments.
    Lane {
        func: FuncId,
        lane: usize,
        lanes: usize,
    },
}

impl FoldFn {
    /// The function it calls, if any.
    pub fn callee(&self) -> Option<FuncId> {
        match self {
            FoldFn::Prim(_) => None,
            FoldFn::Call(f) | FoldFn::Lane { func: f, .. } => Some(*f),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum WithOp {
    Genarray { shape: ValueId, default: Option<ValueId> },
    Modarray { array: ValueId },
    Fold { fun: FoldFn, partial: Vec<ValueId>, neutral: ValueId, fixpoint: Option<ValueId> },
    Scan { shape: ValueId, fun: FoldFn, partial: Vec<ValueId>, neutral: ValueId },
    Filter { shape: ValueId },
}

impl WithOp {
    /// How many values a part yields for this operator.
    pub fn arity(&self) -> usize {
        match self {
            WithOp::Filter { .. } => 2,
            _ => 1,
        }
    }

    /// The shape value of the index space the operator lays its result over
    /// (for `modarray`, its array: the frame is that array's shape).
    pub fn frame_operand(&self) -> Option<ValueId> {
        match self {
            WithOp::Genarray { shape, .. } | WithOp::Scan { shape, .. } | WithOp::Filter { shape } => Some(*shape),
            WithOp::Modarray { array } => Some(*array),
            WithOp::Fold { .. } => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Part {
    pub lower: ValueId,
    pub upper: ValueId,
    pub step: Option<ValueId>,
    pub width: Option<ValueId>,
    /// The index vector, if the body uses it.
    pub index: Option<ValueId>,
    /// The index components, if the body uses them.
    pub scalars: Option<Vec<ValueId>>,
    /// Row-major offset of the index in the frame (index vector elimination).
    pub offset: Option<ValueId>,
    pub body: Block,
    /// The generator's span (bad bounds are reported here).
    pub span: Span,
    /// Per operator, the span of the expression whose value the part yields
    /// (cells of the wrong shape or type are reported here).
    pub result_spans: Vec<Span>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct With {
    pub parts: Vec<Part>,
    pub ops: Vec<WithOp>,
    /// Tensor comprehensions: the first covering part wins.
    pub first_match: bool,
    /// Cell types for genarray operators whose cells are never computed.
    pub cells: Vec<Option<Ty>>,
    /// Memory reuse: per operator, an argument whose buffer the result may take
    /// over: it is dead afterwards and read only at the written index, or (row
    /// reads, `opt::snapshot`) by the only part at `[i, outer…]`, `i` its index
    /// scalar on axis 0, which the back end reads when row `i` starts.
    pub reuse: Vec<Option<ValueId>>,
}

impl With {
    /// The operators `k` combines with (`k..k + 1`, or the lanes of its tuple fold).
    pub fn group(&self, k: usize) -> std::ops::Range<usize> {
        match &self.ops[k] {
            WithOp::Fold { fun: FoldFn::Lane { lane, lanes, .. }, .. }
            | WithOp::Scan { fun: FoldFn::Lane { lane, lanes, .. }, .. } => {
                let start = k.saturating_sub(*lane);
                start..(start + lanes).min(self.ops.len())
            }
            _ => k..k + 1,
        }
    }

    /// Where operator `k`'s values start among a part's yields.
    pub fn yield_index(&self, k: usize) -> usize {
        self.ops[..k].iter().map(WithOp::arity).sum()
    }

    /// How many values each part yields.
    pub fn yields_per_part(&self) -> usize {
        self.ops.iter().map(WithOp::arity).sum()
    }

    /// The value part bodies yield as operator `k`'s element (the value, for a
    /// filter, not its flag).
    pub fn element_yield(&self, part: &Part, k: usize) -> ValueId {
        let i = self.yield_index(k) + self.ops[k].arity() - 1;
        part.body.yields[i]
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Check {
    /// Two shape vectors are equal, or one is `[]` (element-wise operations with
    /// scalar extension). Checks take shapes, not arrays, so that they do not keep
    /// arrays alive that optimisation would otherwise remove.
    SameShape(ValueId, ValueId),
    /// An index (vector, or scalar for one component) lies inside an array of
    /// shape `shape`.
    InBounds { index: ValueId, shape: ValueId },
    /// A bool value is true.
    Assert(ValueId),
    /// A value has a type (declared variables, results, casts).
    Conforms(ValueId, Ty),
    /// A shape vector has no negative extent: the check of a `genarray` (with-loop
    /// or primitive) whose result was dropped after its shape was read, so that the
    /// program fails as the producer would have. The message has `{a}` for the
    /// extent.
    Extents(ValueId),
    /// `reshape(shape, x)` is possible: `shape` has no negative extent and as many
    /// elements as `from`, the shape of `x` (what a dropped `reshape` checked). The
    /// message is the interpreter's (`interp::prims::reshape_error`).
    Reshape { shape: ValueId, from: ValueId },
}

#[derive(Clone, Debug, PartialEq)]
pub struct CheckOp {
    pub check: Check,
    pub code: crate::diagnostics::Code,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    Const(Value),
    /// A primitive. `checked` is false when bounds-check elimination proved the
    /// selection or update in bounds. `in_place`: an update (`modarray`,
    /// `idx_modarray`) may write into its array argument's buffer, which is dead
    /// afterwards (the back end still checks its reference count).
    Prim {
        prim: Prim,
        args: Vec<ValueId>,
        checked: bool,
        in_place: bool,
    },
    Call {
        func: FuncId,
        args: Vec<ValueId>,
    },
    /// `[a, b, c]`: values of equal shape stacked along a new first axis.
    Array(Vec<ValueId>),
    If {
        cond: ValueId,
        then_block: Block,
        else_block: Block,
    },
    /// A loop with carried values. `params` take `init` first, then what `body`
    /// yields; `cond` (a block yielding one bool, seeing `params`) is tested before
    /// each iteration (`while`) or after it (`do-while`). The statement defines the
    /// final values of `params`.
    Loop {
        init: Vec<ValueId>,
        params: Vec<ValueId>,
        cond: Block,
        body: Block,
        test_first: bool,
        /// The back end may run the steps in time tiles (`opt::timetile`: a
        /// loop of stencil steps over one array); the values are the same.
        tiled: bool,
    },
    With(Box<With>),
    Check(CheckOp),
    /// An unconditional run-time error (a wrapper finding no instance).
    /// `{args}` in the message stands for the types `args` have when it
    /// runs (`int, double[3]`); lines after the first are notes (see
    /// [`fail_message`]).
    Fail {
        code: crate::diagnostics::Code,
        message: String,
        args: Vec<ValueId>,
    },
    /// The same value, known to have the (narrower) type of the statement's
    /// definition: what a dispatch test established (after inlining an
    /// instance into its wrapper). A value that does not fit is a compiler bug.
    Narrow(ValueId),
    /// Matches the arguments' shapes against a function's type patterns
    /// (`int[n,n] a, int[n] b`), failing with R0014 when they disagree, and defines
    /// the pattern variables (`vars`, int scalars or int vectors) in order.
    /// `labels` name the checked values in messages (the parameters' names:
    /// inlined, the arguments are the caller's values).
    ///
    /// With `results`, it checks a function's results against the patterns of
    /// its result types (`int[n] f(int[n] a)`) once the body has computed
    /// them, and defines nothing: the first `vars.len()` arguments are the
    /// variables' values (bound at entry; not the parameters, which would stay
    /// alive to the end and block reuse), the rest the results, one per spec
    /// and label ("the result of `f`"); a mismatch is R0011.
    Pattern {
        args: Vec<ValueId>,
        specs: Vec<crate::syntax::ast::ShapeSpec>,
        vars: Vec<Name>,
        function: String,
        labels: Vec<String>,
        results: bool,
    },
}

#[derive(Clone, Debug, Default)]
pub struct Module {
    pub functions: Vec<Function>,
    /// Entry points: source name → the function to call (its wrapper).
    pub entries: Vec<(Name, FuncId)>,
    /// Specialised instances of entry functions that compiled code exports
    /// as symbols of their own (besides the entries' dispatch wrappers); like
    /// entries, they are never removed.
    pub variants: Vec<FuncId>,
}

impl Module {
    pub fn function(&self, f: FuncId) -> &Function {
        &self.functions[f.0 as usize]
    }

    pub fn entry(&self, name: &str) -> Option<FuncId> {
        self.entries.iter().find(|(n, _)| n == name).map(|(_, f)| *f)
    }
}

impl Block {
    /// Calls `f` on every statement, nested ones included (pre-order).
    pub fn walk(&self, f: &mut dyn FnMut(&Stmt)) {
        for s in &self.stmts {
            f(s);
            s.op.walk_blocks(&mut |b| b.walk(f));
        }
    }
}

impl Block {
    /// [`Block::walk`] that does not enter with-loops: their statements
    /// are visited, the bodies of their parts are not.
    pub fn walk_outside_withs(&self, f: &mut dyn FnMut(&Stmt)) {
        for s in &self.stmts {
            f(s);
            if !matches!(s.op, Op::With(_)) {
                s.op.walk_blocks(&mut |b| b.walk_outside_withs(f));
            }
        }
    }

    /// Calls `f` on every statement, nested ones included (pre-order), mutably.
    pub fn walk_mut(&mut self, f: &mut dyn FnMut(&mut Stmt)) {
        for s in &mut self.stmts {
            f(s);
            s.op.walk_blocks_mut(&mut |b| b.walk_mut(f));
        }
    }
}

impl Op {
    /// A checked primitive, not in place.
    pub fn prim(prim: Prim, args: Vec<ValueId>) -> Op {
        Op::Prim { prim, args, checked: true, in_place: false }
    }

    /// The values this op reads directly (not inside its nested blocks).
    pub fn operands(&self) -> Vec<ValueId> {
        let mut v = Vec::new();
        self.for_each_operand(&mut |x| v.push(x));
        v
    }

    /// Calls `f` on each value this op reads directly, in [`Op::operands`]'s
    /// order, without collecting them (for passes that visit every statement).
    pub fn for_each_operand(&self, f: &mut dyn FnMut(ValueId)) {
        match self {
            Op::Const(_) => {}
            Op::Narrow(v) | Op::If { cond: v, .. } => f(*v),
            Op::Prim { args, .. }
            | Op::Call { args, .. }
            | Op::Array(args)
            | Op::Pattern { args, .. }
            | Op::Fail { args, .. } => args.iter().for_each(|a| f(*a)),
            Op::Loop { init, .. } => init.iter().for_each(|a| f(*a)),
            Op::Check(c) => match &c.check {
                Check::SameShape(a, b)
                | Check::InBounds { index: a, shape: b }
                | Check::Reshape { shape: a, from: b } => {
                    f(*a);
                    f(*b);
                }
                Check::Assert(v) | Check::Conforms(v, _) | Check::Extents(v) => f(*v),
            },
            Op::With(w) => {
                for op in &w.ops {
                    match op {
                        WithOp::Genarray { shape, default } => {
                            f(*shape);
                            default.iter().for_each(|d| f(*d));
                        }
                        WithOp::Modarray { array } => f(*array),
                        WithOp::Scan { shape, partial, neutral, .. } => {
                            f(*shape);
                            partial.iter().for_each(|p| f(*p));
                            f(*neutral);
                        }
                        WithOp::Filter { shape } => f(*shape),
                        WithOp::Fold { partial, neutral, fixpoint, .. } => {
                            partial.iter().for_each(|p| f(*p));
                            f(*neutral);
                            fixpoint.iter().for_each(|p| f(*p));
                        }
                    }
                }
                for p in &w.parts {
                    f(p.lower);
                    f(p.upper);
                    p.step.iter().for_each(|x| f(*x));
                    p.width.iter().for_each(|x| f(*x));
                }
                w.reuse.iter().flatten().for_each(|r| f(*r));
            }
        }
    }

    /// Rewrites the values this op reads directly.
    pub fn map_operands(&mut self, f: &mut dyn FnMut(ValueId) -> ValueId) {
        match self {
            Op::Const(_) => {}
            Op::Fail { args, .. } => args.iter_mut().for_each(|a| *a = f(*a)),
            Op::Narrow(v) => *v = f(*v),
            Op::Prim { args, .. } | Op::Call { args, .. } | Op::Array(args) => args.iter_mut().for_each(|a| *a = f(*a)),
            Op::If { cond, .. } => *cond = f(*cond),
            Op::Loop { init, .. } => init.iter_mut().for_each(|a| *a = f(*a)),
            Op::Pattern { args, .. } => args.iter_mut().for_each(|a| *a = f(*a)),
            Op::Check(c) => match &mut c.check {
                Check::SameShape(a, b) => {
                    *a = f(*a);
                    *b = f(*b);
                }
                Check::InBounds { index, shape } => {
                    *index = f(*index);
                    *shape = f(*shape);
                }
                Check::Reshape { shape, from } => {
                    *shape = f(*shape);
                    *from = f(*from);
                }
                Check::Assert(v) | Check::Conforms(v, _) | Check::Extents(v) => *v = f(*v),
            },
            Op::With(w) => {
                for op in &mut w.ops {
                    match op {
                        WithOp::Genarray { shape, default } => {
                            *shape = f(*shape);
                            if let Some(d) = default {
                                *d = f(*d);
                            }
                        }
                        WithOp::Modarray { array } => *array = f(*array),
                        WithOp::Scan { shape, partial, neutral, .. } => {
                            *shape = f(*shape);
                            partial.iter_mut().for_each(|a| *a = f(*a));
                            *neutral = f(*neutral);
                        }
                        WithOp::Filter { shape } => *shape = f(*shape),
                        WithOp::Fold { partial, neutral, fixpoint, .. } => {
                            partial.iter_mut().for_each(|a| *a = f(*a));
                            *neutral = f(*neutral);
                            if let Some(x) = fixpoint {
                                *x = f(*x);
                            }
                        }
                    }
                }
                for p in &mut w.parts {
                    p.lower = f(p.lower);
                    p.upper = f(p.upper);
                    if let Some(s) = &mut p.step {
                        *s = f(*s);
                    }
                    if let Some(x) = &mut p.width {
                        *x = f(*x);
                    }
                }
                for r in w.reuse.iter_mut().flatten() {
                    *r = f(*r);
                }
            }
        }
    }

    /// Calls `f` on each nested block.
    pub fn walk_blocks<'a>(&'a self, f: &mut dyn FnMut(&'a Block)) {
        match self {
            Op::If { then_block, else_block, .. } => {
                f(then_block);
                f(else_block);
            }
            Op::Loop { cond, body, .. } => {
                f(cond);
                f(body);
            }
            Op::With(w) => w.parts.iter().for_each(|p| f(&p.body)),
            _ => {}
        }
    }

    pub fn walk_blocks_mut(&mut self, f: &mut dyn FnMut(&mut Block)) {
        match self {
            Op::If { then_block, else_block, .. } => {
                f(then_block);
                f(else_block);
            }
            Op::Loop { cond, body, .. } => {
                f(cond);
                f(body);
            }
            Op::With(w) => w.parts.iter_mut().for_each(|p| f(&mut p.body)),
            _ => {}
        }
    }

    /// Values bound by the op for its nested blocks (loop params, part indices).
    pub fn bound_values(&self) -> Vec<ValueId> {
        match self {
            Op::Loop { params, .. } => params.clone(),
            Op::With(w) => {
                let mut v = Vec::new();
                for p in &w.parts {
                    v.extend(p.index);
                    v.extend(p.scalars.iter().flatten());
                    v.extend(p.offset);
                }
                v
            }
            _ => Vec::new(),
        }
    }

    /// Whether removing the statement (when its values are unused) is safe.
    pub fn is_pure(&self) -> bool {
        match self {
            Op::Call { .. } | Op::Check(_) | Op::Fail { .. } | Op::Pattern { .. } => false,
            Op::Prim { prim, .. } => !prim.has_effect() && !matches!(prim, Prim::Error),
            Op::If { then_block, else_block, .. } => block_pure(then_block) && block_pure(else_block),
            Op::Loop { cond, body, .. } => block_pure(cond) && block_pure(body),
            Op::With(w) => {
                w.parts.iter().all(|p| block_pure(&p.body))
                    && w.ops.iter().all(|o| match o {
                        WithOp::Fold { fun, .. } | WithOp::Scan { fun, .. } => fun.callee().is_none(),
                        _ => true,
                    })
            }
            _ => true,
        }
    }
}

/// Whether every statement in the block (recursively) is pure. Pure code may still
/// fail (an out-of-bounds selection), but dead pure code need not run: SaC does
/// not evaluate what is never used.
pub fn block_pure(b: &Block) -> bool {
    b.stmts.iter().all(|s| s.op.is_pure() || matches!(s.op, Op::Check(_)))
}

/// An [`Op::Fail`]'s error as it runs: `template` with `{args}` replaced by
/// the arguments' types (`described`), split into the message (the first
/// line) and notes (the other lines). The interpreter and compiled code
/// (whose runtime fills in `{args}`) both report it this way.
pub fn fail_message(template: &str, described: &[String]) -> (String, Vec<String>) {
    message_and_notes(&template.replace("{args}", &described.join(", ")))
}

/// An error's text split into its message (the first line) and notes (the
/// other lines), as compiled code records a failure's notes.
pub fn message_and_notes(text: &str) -> (String, Vec<String>) {
    let mut lines = text.lines().map(str::to_string);
    let message = lines.next().unwrap_or_default();
    (message, lines.collect())
}

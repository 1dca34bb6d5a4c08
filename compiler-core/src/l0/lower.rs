//! Lowering checked L0 to the shared IR (seed 004 ch. 4's external→internal
//! conversion, straight to with-loops).
//!
//! * **Tuples disappear**: every value is a list of IR values, one per leaf of its
//!   type ([`Type::leaves`]); an array of tuples is a tuple of arrays, `zip` and
//!   `unzip` only regroup leaves, a tuple pattern splits the list. Function
//!   parameters and results are flattened the same way, so tuple shimming needs
//!   no code.
//! * **SOACs become with-loops** over `[0] <= [i] < [n]`: `map` a `genarray`
//!   per result leaf, `filter` a `filter` per leaf (each yields the predicate
//!   and the element; where elements are arrays, one `filter` of the indices
//!   kept and a `genarray` per leaf gathering those rows, so that a filter
//!   keeping none still has rows of the input's shape), `reduce` a `fold`,
//!   `scan` a `scan`. A lambda is inlined
//!   into the part body; a named function is called there; `op ⊙` is the
//!   primitive. Operators of `reduce`/`scan` that are lambdas become functions of
//!   their own (`f__lambda1`), their free variables passed as the fold's partial
//!   arguments. Over tuples, a `reduce`/`scan` keeps one accumulator per leaf:
//!   one fold (or scan) operator per leaf, the lanes of one function
//!   ([`FoldFn::Lane`]), combined by one call per element.
//! * **Empty maps keep their rows' shape**: a size analysis (seed 004 §9.1.1)
//!   computes the extents of what a map's function returns before the map, and
//!   the map's `genarray` gets a default row of that shape ([`FnLower::cell_defaults`]).
//! * **Certificates are checks**: indexing, let-with, `split` and the zip-size
//!   conditions become `check` statements before what they guard, which
//!   bounds-check elimination removes where generators prove them and hoisting
//!   moves out of loops (seed 004 §4.2's `assert` and `<c>e`).
//! * **let-with is an element update** (`modarray(a, iv, v)`): the uniqueness
//!   checker proved the source dead afterwards, so the memory-reuse pass marks
//!   it in place and no copy is made.
//! * `loop (p = e) = for i < n do b in r` is an IR loop carrying `p`'s leaves
//!   and `i`; `iota`, `replicate`, `transpose`, `split` and `concat` are
//!   with-loops or primitives.

use crate::HashMap;

use super::ast::*;
use super::check::{Checked, math_builtin};
use crate::diagnostics::{self as codes, Diagnostic};
use crate::interp::ops::{BinOp as IrBin, UnOp};
use crate::interp::value::{Scalar, Value};
use crate::ir::lower::FnBuilder;
use crate::ir::{Block, Check, FoldFn, FuncId, Function, FunctionKind, Module, Op, Part, Stmt, ValueId, With, WithOp};
use crate::sema::hir::{Elem, MathFn, Prim};
use crate::sema::ty::{Shape, Ty};
use crate::span::Span;
use crate::syntax::ast::{BaseType, Name};

/// The IR type of a leaf type (no tuples).
pub fn leaf_ty(t: &Type) -> Ty {
    let mut base = t;
    let mut rank = 0;
    while let Type::Array(e, _) = base {
        base = e;
        rank += 1;
    }
    let b = match base {
        Type::Int => BaseType::Int,
        Type::Real => BaseType::Double,
        Type::Bool => BaseType::Bool,
        Type::Char => BaseType::Char,
        // Leaves have no tuples.
        Type::Tuple(_) | Type::Array(..) => BaseType::Int,
    };
    Ty::new(Elem::Base(b), Shape::rank(rank))
}

fn leaf_tys(t: &Type) -> Vec<Ty> {
    t.leaves().iter().map(leaf_ty).collect()
}

/// The tuples inside arrays of `t`: the range of its leaves each covers and
/// the number of array dimensions around it (which those leaves share).
/// Returns the number of leaves of `t`.
fn tuple_groups(t: &Type, depth: usize, first: usize, out: &mut Vec<(std::ops::Range<usize>, usize)>) -> usize {
    match t {
        Type::Tuple(ts) => {
            let mut n = 0;
            for c in ts {
                n += tuple_groups(c, depth, first + n, out);
            }
            if depth > 0 && n > 1 {
                out.push((first..first + n, depth));
            }
            n
        }
        Type::Array(e, _) => tuple_groups(e, depth + 1, first, out),
        _ => 1,
    }
}

fn int_ty() -> Ty {
    Ty::new(Elem::Base(BaseType::Int), Shape::scalar())
}

fn int_vec(n: usize) -> Ty {
    Ty::new(Elem::Base(BaseType::Int), Shape::Fixed(vec![Some(n)]))
}

/// Lowers a checked program. `entries` are the functions to export (each must
/// exist). A construct the IR cannot express yet is reported as `L0001`.
pub fn lower(program: &Program, checked: &Checked, entries: &[Name]) -> Result<Module, Vec<Diagnostic>> {
    let mut ml = ModuleLower {
        program,
        checked,
        module: Module::default(),
        funcs: HashMap::default(),
        errors: Vec::new(),
        lambdas: 0,
        entries,
    };
    for f in &program.functions {
        let id = FuncId(ml.module.functions.len() as u32);
        let mut results = Vec::new();
        results.extend(leaf_tys(&f.ret));
        ml.module.functions.push(Function {
            name: f.name.to_string(),
            source_name: f.name.clone(),
            kind: FunctionKind::Instance,
            params: Vec::new(),
            results,
            body: Block::default(),
            values: Vec::new(),
            inline: false,
            noinline: false,
            cold: false,
            library: false,
            specialises: None,
            span: f.name_span,
        });
        ml.funcs.insert(f.name.clone(), (id, f.params.iter().map(|p| p.ty.clone()).collect(), f.ret.clone()));
    }
    for (k, f) in program.functions.iter().enumerate() {
        ml.function(FuncId(k as u32), f);
    }
    for e in entries {
        if let Some((id, ..)) = ml.funcs.get(e) {
            ml.module.entries.push((e.clone(), *id));
        }
    }
    if ml.errors.is_empty() { Ok(ml.module) } else { Err(ml.errors) }
}

struct ModuleLower<'a> {
    program: &'a Program,
    checked: &'a Checked,
    module: Module,
    funcs: HashMap<Name, (FuncId, Vec<Type>, Type)>,
    errors: Vec<Diagnostic>,
    lambdas: usize,
    entries: &'a [Name],
}

impl ModuleLower<'_> {
    fn function(&mut self, id: FuncId, f: &FunDef) {
        let template = self.module.functions[id.0 as usize].clone();
        let span = template.span;
        let self_is_entry = self.entries.contains(&f.name);
        let mut fl = FnLower { ml: self, b: FnBuilder { f: template, span }, env: Vec::new(), in_callee: 0 };
        for p in &f.params {
            let vals: Vec<ValueId> =
                leaf_tys(&p.ty).into_iter().map(|t| fl.b.f.new_value(t, Some(p.name.clone()))).collect();
            fl.b.f.params.extend(vals.iter().copied());
            fl.env.push((p.name.clone(), vals, p.ty.clone()));
        }
        let mut out = Vec::new();
        if self_is_entry {
            for (p, k) in f.params.iter().zip(0..) {
                let vals = fl.env[k].1.clone();
                fl.tuple_components_agree(&mut out, p, &vals);
            }
        }
        let yields = fl.expr(&f.body, &mut out);
        fl.b.f.body = Block { stmts: out, yields };
        let built = fl.b.f;
        self.module.functions[id.0 as usize] = built;
    }
}

struct FnLower<'m, 'a> {
    ml: &'m mut ModuleLower<'a>,
    b: FnBuilder,
    /// Variables in scope: name, leaf values, type.
    env: Vec<(Name, Vec<ValueId>, Type)>,
    /// How many named functions' bodies the size analysis is inside: their
    /// variables are never those of `env` (which is the map's scope).
    in_callee: usize,
}

/// How a SOAC's function is applied to one element.
enum Apply<'e> {
    Call(FuncId, Vec<ValueId>),
    Math(Prim),
    Lambda(&'e [Param], &'e Expr),
    Op(BinOp, Option<ValueId>),
}

impl FnLower<'_, '_> {
    fn ty_of(&self, e: &Expr) -> Type {
        self.ml.checked.ty(e).clone()
    }

    fn int(&mut self, out: &mut Vec<Stmt>, v: i64, span: Span) -> ValueId {
        self.b.constant(out, Value::Scalar(Scalar::int(v)), span)
    }

    fn bin(&mut self, out: &mut Vec<Stmt>, op: IrBin, a: ValueId, b: ValueId, span: Span) -> ValueId {
        let fallback = self.b.f.ty(a).clone();
        self.b.prim(out, Prim::Bin(op), vec![a, b], fallback, span)
    }

    fn vector(&mut self, out: &mut Vec<Stmt>, items: Vec<ValueId>, span: Span) -> ValueId {
        let n = items.len();
        self.b.emit1(out, Op::Array(items), int_vec(n), span)
    }

    /// `shape(a)[k]`.
    fn extent(&mut self, out: &mut Vec<Stmt>, a: ValueId, k: usize, span: Span) -> ValueId {
        let rank = self.b.f.ty(a).shape.rank_if_known().unwrap_or(k + 1);
        let shape = self.b.prim(out, Prim::Shape, vec![a], int_vec(rank), span);
        let idx = self.b.constant(out, Value::int_vector(&[k as i64]), span);
        self.b.prim(out, Prim::Sel, vec![idx, shape], int_ty(), span)
    }

    /// At an entry, the components of an array of tuples (separate arrays in
    /// the IR and the C ABI) must agree in the extents of the arrays around
    /// the tuple: `[{real, int}] ps` arrives as a `[real]` and an `[int]` of
    /// one length. Inside the program such arrays are built whole.
    fn tuple_components_agree(&mut self, out: &mut Vec<Stmt>, p: &Param, leaves: &[ValueId]) {
        let mut groups = Vec::new();
        tuple_groups(&p.ty, 0, 0, &mut groups);
        for (range, depth) in groups {
            let prefix = |fl: &mut Self, out: &mut Vec<Stmt>, v: ValueId| {
                let extents: Vec<ValueId> = (0..depth).map(|k| fl.extent(out, v, k, p.span)).collect();
                fl.vector(out, extents, p.span)
            };
            let first = prefix(self, out, leaves[range.start]);
            for &other in &leaves[range.start + 1..range.end] {
                let other = prefix(self, out, other);
                self.b.check(
                    out,
                    Check::SameShape(first, other),
                    codes::SHAPE_MISMATCH,
                    format!("the components of `{}`, an array of tuples, differ in size ({{a}} and {{b}})", p.name),
                    p.span,
                );
            }
        }
    }

    fn lookup(&self, name: &str) -> Option<(Vec<ValueId>, Type)> {
        self.env.iter().rev().find(|(n, ..)| n == name).map(|(_, v, t)| (v.clone(), t.clone()))
    }

    fn limitation(&mut self, span: Span, what: &str) {
        self.ml.errors.push(
            Diagnostic::error(codes::UNSUPPORTED, format!("withloop cannot compile this L0 construct yet: {what}"))
                .at(span, ""),
        );
    }

    /// The type of the variables a pattern names, in its structure.
    fn pat_ty(&self, pat: &Pat) -> Type {
        match pat {
            Pat::Id(n, _) => self.lookup(n).map_or(Type::Int, |(_, t)| t),
            Pat::Tuple(ps, _) => Type::Tuple(ps.iter().map(|p| self.pat_ty(p)).collect()),
        }
    }

    fn bind_pat(&mut self, pat: &Pat, vals: &[ValueId], ty: &Type) {
        match pat {
            Pat::Id(n, _) => {
                for v in vals {
                    if self.b.f.values[v.0 as usize].name.is_none() {
                        self.b.f.values[v.0 as usize].name = Some(n.clone());
                    }
                }
                self.env.push((n.clone(), vals.to_vec(), ty.clone()));
            }
            Pat::Tuple(ps, _) => {
                let Type::Tuple(ts) = ty else { return };
                let mut at = 0;
                for (p, t) in ps.iter().zip(ts) {
                    let n = t.leaves().len();
                    self.bind_pat(p, &vals[at..at + n], t);
                    at += n;
                }
            }
        }
    }

    fn expr(&mut self, e: &Expr, out: &mut Vec<Stmt>) -> Vec<ValueId> {
        let span = e.span;
        match &e.kind {
            ExprKind::Int(v) => vec![self.int(out, *v, span)],
            ExprKind::Real(v) => vec![self.b.constant(out, Value::Scalar(Scalar::Double(*v)), span)],
            ExprKind::Bool(b) => vec![self.b.constant(out, Value::Scalar(Scalar::Bool(*b)), span)],
            ExprKind::Char(c) => vec![self.b.constant(out, Value::Scalar(Scalar::Char(*c as u32 as u8)), span)],
            ExprKind::Var(n) => self.lookup(n).map(|(v, _)| v).unwrap_or_default(),
            ExprKind::Tuple(items) => items.iter().flat_map(|i| self.expr(i, out)).collect(),
            ExprKind::Array(items) => {
                let ty = self.ty_of(e);
                let lowered: Vec<Vec<ValueId>> = items.iter().map(|i| self.expr(i, out)).collect();
                leaf_tys(&ty)
                    .into_iter()
                    .enumerate()
                    .map(|(k, t)| {
                        let row: Vec<ValueId> = lowered.iter().map(|l| l[k]).collect();
                        let inner = self.b.f.ty(row[0]).shape.clone();
                        let shape = Shape::Fixed(vec![Some(row.len())]).concat(&inner);
                        self.b.emit1(out, Op::Array(row), Ty::new(t.elem, shape), span)
                    })
                    .collect()
            }
            ExprKind::Bin(op, a, b) => {
                let x = self.expr(a, out)[0];
                let y = self.expr(b, out)[0];
                vec![self.binop(out, *op, x, y, span)]
            }
            ExprKind::Neg(a) => {
                let x = self.expr(a, out)[0];
                let t = self.b.f.ty(x).clone();
                vec![self.b.prim(out, Prim::Un(UnOp::Neg), vec![x], t, span)]
            }
            ExprKind::Not(a) => {
                let x = self.expr(a, out)[0];
                let t = self.b.f.ty(x).clone();
                vec![self.b.prim(out, Prim::Un(UnOp::Not), vec![x], t, span)]
            }
            ExprKind::If(c, t, f) => {
                let cond = self.expr(c, out)[0];
                let ty = self.ty_of(e);
                let mark = self.env.len();
                let mut tb = Vec::new();
                let ty_yields = self.expr(t, &mut tb);
                self.env.truncate(mark);
                let mut fb = Vec::new();
                let f_yields = self.expr(f, &mut fb);
                self.env.truncate(mark);
                self.b.emit(
                    out,
                    Op::If {
                        cond,
                        then_block: Block { stmts: tb, yields: ty_yields },
                        else_block: Block { stmts: fb, yields: f_yields },
                    },
                    leaf_tys(&ty),
                    span,
                )
            }
            ExprKind::Index { array, array_span, indices } => {
                let Some((leaves, _)) = self.lookup(array) else { return Vec::new() };
                let idx: Vec<ValueId> = indices.iter().map(|i| self.expr(i, out)[0]).collect();
                let iv = self.vector(out, idx, span);
                let ty = self.ty_of(e);
                self.select(out, &leaves, iv, &ty, *array_span, span)
            }
            ExprKind::Call { fun, args, .. } => self.call(e, fun, args, out),
            ExprKind::Let { pat, value, body } => {
                let v = self.expr(value, out);
                let ty = self.ty_of(value);
                let mark = self.env.len();
                self.bind_pat(pat, &v, &ty);
                let r = self.expr(body, out);
                self.env.truncate(mark);
                r
            }
            ExprKind::LetWith { dest, dest_span, src, src_span, indices, value, body } => {
                let Some((leaves, ty)) = self.lookup(src) else { return Vec::new() };
                let idx: Vec<ValueId> = indices.iter().map(|i| self.expr(i, out)[0]).collect();
                let v = self.expr(value, out);
                let iv = self.vector(out, idx, *src_span);
                let shape = self.b.prim(out, Prim::Shape, vec![leaves[0]], int_vec(self.rank(leaves[0])), *src_span);
                self.b.check(
                    out,
                    Check::InBounds { index: iv, shape },
                    codes::INDEX_OUT_OF_BOUNDS,
                    "update".into(),
                    span.to(*dest_span),
                );
                let mut new = Vec::new();
                for (a, x) in leaves.iter().zip(&v) {
                    let t = self.b.f.ty(*a).clone();
                    new.push(self.b.prim(out, Prim::Modarray, vec![*a, iv, *x], t, span));
                }
                let mark = self.env.len();
                self.bind_pat(&Pat::Id(dest.clone(), *dest_span), &new, &ty);
                let r = self.expr(body, out);
                self.env.truncate(mark);
                r
            }
            ExprKind::Loop { pat, init, var, var_span, bound, body, rest } => {
                let init_vals = match init {
                    Some(i) => self.expr(i, out),
                    None => pat
                        .names()
                        .iter()
                        .flat_map(|(n, _)| self.lookup(n).map(|(v, _)| v).unwrap_or_default())
                        .collect(),
                };
                let init_ty = match init {
                    Some(i) => self.ty_of(i),
                    // The short form starts from the variables' values, in
                    // the pattern's structure (`{x}` is a one-tuple).
                    None => self.pat_ty(pat),
                };
                let n = self.expr(bound, out)[0];
                let zero = self.int(out, 0, *var_span);
                let mut init_all = init_vals.clone();
                init_all.push(zero);
                let params: Vec<ValueId> = init_all
                    .iter()
                    .map(|v| {
                        let t = self.b.f.ty(*v).clone();
                        // Loop-carried arrays keep their rank; extents may change.
                        let t = Ty::new(
                            t.elem,
                            match t.shape.rank_if_known() {
                                Some(r) => Shape::rank(r),
                                None => t.shape,
                            },
                        );
                        self.b.f.new_value(t, None)
                    })
                    .collect();
                let i = *params.last().expect("counter");
                self.b.f.values[i.0 as usize].name = Some(var.clone());
                let mut cond = Vec::new();
                let c = self.bin(&mut cond, IrBin::Lt, i, n, *var_span);
                let mark = self.env.len();
                self.bind_pat(pat, &params[..params.len() - 1], &init_ty);
                self.env.push((var.clone(), vec![i], Type::Int));
                let mut b = Vec::new();
                let mut yields = self.expr(body, &mut b);
                let one = self.int(&mut b, 1, *var_span);
                let next = self.bin(&mut b, IrBin::Add, i, one, *var_span);
                yields.push(next);
                self.env.truncate(mark);
                let tys: Vec<Ty> = params.iter().map(|p| self.b.f.ty(*p).clone()).collect();
                let finals = self.b.emit(
                    out,
                    Op::Loop {
                        init: init_all,
                        params,
                        cond: Block { stmts: cond, yields: vec![c] },
                        body: Block { stmts: b, yields },
                        test_first: true,
                        tiled: false,
                    },
                    tys,
                    span,
                );
                let mark = self.env.len();
                self.bind_pat(pat, &finals[..finals.len() - 1], &init_ty);
                let r = self.expr(rest, out);
                self.env.truncate(mark);
                r
            }
            ExprKind::Soac { soac, fun, args } => self.soac(e, *soac, fun, args, out),
        }
    }

    fn rank(&self, v: ValueId) -> usize {
        self.b.f.ty(v).shape.rank_if_known().unwrap_or(1)
    }

    /// `a[iv]` on every leaf, after one bounds check.
    fn select(
        &mut self,
        out: &mut Vec<Stmt>,
        leaves: &[ValueId],
        iv: ValueId,
        ty: &Type,
        at: Span,
        span: Span,
    ) -> Vec<ValueId> {
        let shape = self.b.prim(out, Prim::Shape, vec![leaves[0]], int_vec(self.rank(leaves[0])), at);
        self.b.check(out, Check::InBounds { index: iv, shape }, codes::INDEX_OUT_OF_BOUNDS, "selection".into(), span);
        leaves.iter().zip(leaf_tys(ty)).map(|(a, t)| self.b.prim(out, Prim::Sel, vec![iv, *a], t, span)).collect()
    }

    fn binop(&mut self, out: &mut Vec<Stmt>, op: BinOp, x: ValueId, y: ValueId, span: Span) -> ValueId {
        let ir = match op {
            BinOp::Add => IrBin::Add,
            BinOp::Sub => IrBin::Sub,
            BinOp::Mul => IrBin::Mul,
            BinOp::Div => IrBin::Div,
            // Seed 004 gives `%` to reals too: C's `fmod` (the result has the
            // dividend's sign, as `%` on ints).
            BinOp::Mod if self.b.f.ty(x).elem == Elem::Base(BaseType::Double) => {
                let t = self.b.f.ty(x).clone();
                return self.b.prim(out, Prim::Math(MathFn::Fmod), vec![x, y], t, span);
            }
            BinOp::Mod => IrBin::Mod,
            BinOp::Eq => IrBin::Eq,
            BinOp::Ne => IrBin::Ne,
            BinOp::Lt => IrBin::Lt,
            BinOp::Le => IrBin::Le,
            BinOp::Gt => IrBin::Gt,
            BinOp::Ge => IrBin::Ge,
            BinOp::And => IrBin::And,
            BinOp::Or => IrBin::Or,
            BinOp::BitAnd => IrBin::BitAnd,
            BinOp::BitOr => IrBin::BitOr,
            BinOp::BitXor => IrBin::BitXor,
            BinOp::Shl => IrBin::Shl,
            BinOp::Shr => IrBin::Shr,
            BinOp::Pow => {
                let t = self.b.f.ty(x).clone();
                if t.elem == Elem::Base(BaseType::Double) {
                    return self.b.prim(out, Prim::Math(MathFn::Pow), vec![x, y], t, span);
                }
                // Integer power through doubles, exact for results below 2^53.
                let dt = Ty::new(Elem::Base(BaseType::Double), Shape::scalar());
                let xd = self.b.prim(out, Prim::Conv(BaseType::Double), vec![x], dt.clone(), span);
                let yd = self.b.prim(out, Prim::Conv(BaseType::Double), vec![y], dt.clone(), span);
                let p = self.b.prim(out, Prim::Math(MathFn::Pow), vec![xd, yd], dt, span);
                return self.b.prim(out, Prim::Conv(BaseType::Int), vec![p], t, span);
            }
        };
        self.bin(out, ir, x, y, span)
    }

    fn call(&mut self, e: &Expr, fun: &Name, args: &[Expr], out: &mut Vec<Stmt>) -> Vec<ValueId> {
        let span = e.span;
        if let Some((id, _, ret)) = self.ml.funcs.get(fun).cloned() {
            let vals: Vec<ValueId> = args.iter().flat_map(|a| self.expr(a, out)).collect();
            return self.b.emit(out, Op::Call { func: id, args: vals }, leaf_tys(&ret), span);
        }
        if let Some((_, ret)) = math_builtin(fun) {
            let x = self.expr(&args[0], out)[0];
            let prim = math_prim(fun);
            return vec![self.b.prim(out, prim, vec![x], leaf_ty(&ret), span)];
        }
        let ty = self.ty_of(e);
        match fun.as_str() {
            "abs" => {
                let x = self.expr(&args[0], out)[0];
                let t = self.b.f.ty(x).clone();
                vec![self.b.prim(out, Prim::Un(UnOp::Abs), vec![x], t, span)]
            }
            "iota" => {
                let n = self.expr(&args[0], out)[0];
                let (_, lo, hi) = self.frame(out, n, span);
                let i = self.b.f.new_value(int_ty(), Some(Name::new("i")));
                let part = dense_part(lo, hi, vec![i], Block { stmts: Vec::new(), yields: vec![i] }, 1, span);
                let w = with_loop(vec![part], vec![WithOp::Genarray { shape: hi, default: None }]);
                self.b.emit(
                    out,
                    Op::With(Box::new(scalar_cells(&self.b, w))),
                    vec![Ty::new(Elem::Base(BaseType::Int), Shape::rank(1))],
                    span,
                )
            }
            "replicate" => {
                let n = self.expr(&args[0], out)[0];
                let v = self.expr(&args[1], out);
                let shp = self.vector(out, vec![n], span);
                v.iter()
                    .zip(leaf_tys(&ty))
                    .map(|(x, t)| self.b.prim(out, Prim::Genarray, vec![shp, *x], t, span))
                    .collect()
            }
            "size" => {
                let (k, a) = if args.len() == 2 { (static_int(&args[0]), &args[1]) } else { (0, &args[0]) };
                let leaves = self.expr(a, out);
                vec![self.extent(out, leaves[0], k as usize, span)]
            }
            "reshape" => {
                let dims: Vec<&Expr> = match &args[0].kind {
                    ExprKind::Tuple(items) => items.iter().collect(),
                    _ => vec![&args[0]],
                };
                let ds: Vec<ValueId> = dims.iter().map(|d| self.expr(d, out)[0]).collect();
                let outer = self.ty_of(&args[1]).rank();
                let leaves = self.expr(&args[1], out);
                let shp = self.vector(out, ds.clone(), span);
                let mut res = Vec::new();
                for (a, t) in leaves.iter().zip(leaf_tys(&ty)) {
                    let r = self.rank(*a);
                    let target = if r > outer {
                        // Inner dimensions of an array-of-tuples component stay.
                        let s = self.b.prim(out, Prim::Shape, vec![*a], int_vec(r), span);
                        let k = self.int(out, outer as i64, span);
                        let inner = self.b.prim(out, Prim::Drop, vec![k, s], int_vec(r - outer), span);
                        self.b.prim(out, Prim::Cat, vec![shp, inner], int_vec(ds.len() + r - outer), span)
                    } else {
                        shp
                    };
                    res.push(self.b.prim(out, Prim::Reshape, vec![target, *a], t, span));
                }
                res
            }
            "transpose" => {
                let (k, n, a) = if args.len() == 3 {
                    (static_int(&args[0]), static_int(&args[1]), &args[2])
                } else {
                    (0, 1, &args[0])
                };
                let leaves = self.expr(a, out);
                leaves.iter().map(|x| self.transpose(out, *x, k as usize, n, span)).collect()
            }
            "split" => {
                let n = self.expr(&args[0], out)[0];
                let leaves = self.expr(&args[1], out);
                let size = self.extent(out, leaves[0], 0, span);
                let zero = self.int(out, 0, span);
                let ge = self.bin(out, IrBin::Ge, n, zero, span);
                let le = self.bin(out, IrBin::Le, n, size, span);
                let ok = self.bin(out, IrBin::And, ge, le, span);
                self.b.check(
                    out,
                    Check::Assert(ok),
                    codes::INDEX_OUT_OF_BOUNDS,
                    "split point outside the array".into(),
                    span,
                );
                let rest = self.bin(out, IrBin::Sub, size, n, span);
                let first: Vec<ValueId> = leaves.iter().map(|a| self.slice(out, *a, zero, n, span)).collect();
                let second: Vec<ValueId> = leaves.iter().map(|a| self.slice(out, *a, n, rest, span)).collect();
                [first, second].concat()
            }
            "concat" => {
                let a = self.expr(&args[0], out);
                let b = self.expr(&args[1], out);
                a.iter().zip(&b).map(|(x, y)| self.concat(out, *x, *y, span)).collect()
            }
            "zip" => {
                let mut leaves = Vec::new();
                let mut first = None;
                for a in args {
                    let l = self.expr(a, out);
                    let size = self.extent(out, l[0], 0, a.span);
                    match first {
                        None => first = Some(size),
                        Some(f) => self.same_size(out, f, size, a.span, "`zip`"),
                    }
                    leaves.extend(l);
                }
                leaves
            }
            "unzip" => self.expr(&args[0], out),
            // Values are immutable in the IR: a copy is the same value, and an
            // update of it copies or not by the reference count at run time.
            "copy" => self.expr(&args[0], out),
            _ => Vec::new(),
        }
    }

    fn same_size(&mut self, out: &mut Vec<Stmt>, a: ValueId, b: ValueId, span: Span, what: &str) {
        let eq = self.bin(out, IrBin::Eq, a, b, span);
        self.b.check(
            out,
            Check::Assert(eq),
            codes::SHAPE_MISMATCH,
            format!("the arrays of {what} differ in their outer size"),
            span,
        );
    }

    /// `[0] <= [i] < [n]`: (index vector type, lower, upper).
    fn frame(&mut self, out: &mut Vec<Stmt>, n: ValueId, span: Span) -> (Ty, ValueId, ValueId) {
        let lo = self.b.constant(out, Value::int_vector(&[0]), span);
        let hi = self.vector(out, vec![n], span);
        (int_vec(1), lo, hi)
    }

    /// The default cell of a with-loop of `a`'s rows (`genarray(drop(1,
    /// shape(a)), 0)`, none for a vector): with no rows (`split(0, m)`) the
    /// result still has rows of `a`'s shape.
    fn row_default(&mut self, out: &mut Vec<Stmt>, a: ValueId, span: Span) -> Option<ValueId> {
        let rank = self.rank(a);
        let Elem::Base(base) = self.b.f.ty(a).elem else { return None };
        if rank <= 1 {
            return None;
        }
        let sa = self.b.prim(out, Prim::Shape, vec![a], int_vec(rank), span);
        let one = self.int(out, 1, span);
        let cell = self.b.prim(out, Prim::Drop, vec![one, sa], int_vec(rank - 1), span);
        let zero = self.b.constant(out, Value::Scalar(Scalar::zero(base)), span);
        Some(self.b.prim(out, Prim::Genarray, vec![cell, zero], Ty::new(Elem::Base(base), Shape::rank(rank - 1)), span))
    }

    /// The rows of `a` at the `count` indices of `kept`, in order.
    fn gather(&mut self, out: &mut Vec<Stmt>, a: ValueId, kept: ValueId, count: ValueId, span: Span) -> ValueId {
        self.rows(out, a, count, span, |fl, body, k| {
            let kv = fl.vector(body, vec![k], span);
            fl.b.prim(body, Prim::Sel, vec![kv, kept], int_ty(), span)
        })
    }

    /// Rows `from … from + len` of `a`.
    fn slice(&mut self, out: &mut Vec<Stmt>, a: ValueId, from: ValueId, len: ValueId, span: Span) -> ValueId {
        self.rows(out, a, len, span, |fl, body, i| fl.bin(body, IrBin::Add, i, from, span))
    }

    /// `len` rows of `a`, the `k`-th being row `row(k)` (a with-loop with
    /// `a`'s default row, so that no rows still have `a`'s row shape).
    fn rows(
        &mut self,
        out: &mut Vec<Stmt>,
        a: ValueId,
        len: ValueId,
        span: Span,
        row: impl FnOnce(&mut Self, &mut Vec<Stmt>, ValueId) -> ValueId,
    ) -> ValueId {
        let (_, lo, hi) = self.frame(out, len, span);
        let k = self.b.f.new_value(int_ty(), None);
        let mut body = Vec::new();
        let j = row(self, &mut body, k);
        let jv = self.vector(&mut body, vec![j], span);
        let rank = self.rank(a);
        let cell_ty = Ty::new(self.b.f.ty(a).elem, Shape::rank(rank - 1));
        let x = self.b.prim(&mut body, Prim::Sel, vec![jv, a], cell_ty, span);
        let t = Ty::new(self.b.f.ty(a).elem, Shape::rank(rank));
        let part = dense_part(lo, hi, vec![k], Block { stmts: body, yields: vec![x] }, 1, span);
        let default = self.row_default(out, a, span);
        let w = with_loop(vec![part], vec![WithOp::Genarray { shape: hi, default }]);
        self.b.emit1(out, Op::With(Box::new(scalar_cells(&self.b, w))), t, span)
    }

    fn concat(&mut self, out: &mut Vec<Stmt>, a: ValueId, b: ValueId, span: Span) -> ValueId {
        let rank = self.rank(a);
        let elem = self.b.f.ty(a).elem;
        if rank > 1 {
            let sa = self.b.prim(out, Prim::Shape, vec![a], int_vec(rank), span);
            let sb = self.b.prim(out, Prim::Shape, vec![b], int_vec(rank), span);
            let one = self.int(out, 1, span);
            let ia = self.b.prim(out, Prim::Drop, vec![one, sa], int_vec(rank - 1), span);
            let ib = self.b.prim(out, Prim::Drop, vec![one, sb], int_vec(rank - 1), span);
            self.b.check(
                out,
                Check::SameShape(ia, ib),
                codes::SHAPE_MISMATCH,
                "`concat` of arrays whose rows differ in shape ({a} and {b})".into(),
                span,
            );
        }
        let na = self.extent(out, a, 0, span);
        let nb = self.extent(out, b, 0, span);
        let n = self.bin(out, IrBin::Add, na, nb, span);
        let lo0 = self.b.constant(out, Value::int_vector(&[0]), span);
        let mid = self.vector(out, vec![na], span);
        let hi = self.vector(out, vec![n], span);
        let cell_ty = Ty::new(elem, Shape::rank(rank - 1));
        let mut parts = Vec::new();
        for (src, lo, up, shift) in [(a, lo0, mid, None), (b, mid, hi, Some(na))] {
            let i = self.b.f.new_value(int_ty(), None);
            let mut body = Vec::new();
            let j = match shift {
                Some(s) => self.bin(&mut body, IrBin::Sub, i, s, span),
                None => i,
            };
            let jv = self.vector(&mut body, vec![j], span);
            let x = self.b.prim(&mut body, Prim::Sel, vec![jv, src], cell_ty.clone(), span);
            parts.push(dense_part(lo, up, vec![i], Block { stmts: body, yields: vec![x] }, 1, span));
        }
        let default = self.row_default(out, a, span);
        let w = with_loop(parts, vec![WithOp::Genarray { shape: hi, default }]);
        self.b.emit1(out, Op::With(Box::new(scalar_cells(&self.b, w))), Ty::new(elem, Shape::rank(rank)), span)
    }

    /// `transpose(k, n, a)`: dimension `k` moves `n` places inward.
    fn transpose(&mut self, out: &mut Vec<Stmt>, a: ValueId, k: usize, n: i64, span: Span) -> ValueId {
        let rank = self.rank(a);
        let mut order: Vec<usize> = (0..rank).collect();
        let d = order.remove(k);
        order.insert((k as i64 + n) as usize, d);
        // Result axis p is source axis order[p].
        let sa = self.b.prim(out, Prim::Shape, vec![a], int_vec(rank), span);
        let mut ext = Vec::new();
        for &src in &order {
            let idx = self.b.constant(out, Value::int_vector(&[src as i64]), span);
            ext.push(self.b.prim(out, Prim::Sel, vec![idx, sa], int_ty(), span));
        }
        let shape = self.vector(out, ext, span);
        let lo = self.b.constant(out, Value::int_vector(&vec![0; rank]), span);
        let scalars: Vec<ValueId> = (0..rank).map(|_| self.b.f.new_value(int_ty(), None)).collect();
        let mut src_idx = vec![scalars[0]; rank];
        for (p, &src) in order.iter().enumerate() {
            src_idx[src] = scalars[p];
        }
        let mut body = Vec::new();
        let iv = self.vector(&mut body, src_idx, span);
        let elem = self.b.f.ty(a).elem;
        let x = self.b.prim(&mut body, Prim::Sel, vec![iv, a], Ty::new(elem, Shape::scalar()), span);
        let part = dense_part(lo, shape, scalars, Block { stmts: body, yields: vec![x] }, 1, span);
        let w = with_loop(vec![part], vec![WithOp::Genarray { shape, default: None }]);
        self.b.emit1(out, Op::With(Box::new(scalar_cells(&self.b, w))), Ty::new(elem, Shape::rank(rank)), span)
    }

    /// How the SOAC's function is applied; curried arguments are evaluated here.
    fn applier<'e>(&mut self, fun: &'e FnArg, out: &mut Vec<Stmt>) -> Apply<'e> {
        match fun {
            FnArg::Named { name, curried, .. } => {
                let vals: Vec<ValueId> = curried.iter().flat_map(|c| self.expr(c, out)).collect();
                match self.ml.funcs.get(name) {
                    Some((id, ..)) => Apply::Call(*id, vals),
                    None => Apply::Math(math_prim(name)),
                }
            }
            FnArg::Lambda { params, body, .. } => Apply::Lambda(params, body),
            FnArg::Op { op, left, .. } => {
                let l = left.as_ref().map(|l| self.expr(l, out)[0]);
                Apply::Op(*op, l)
            }
        }
    }

    /// Applies the function to `args` (leaves) inside a part body.
    fn apply(&mut self, how: &Apply, args: &[ValueId], ret: &Type, body: &mut Vec<Stmt>, span: Span) -> Vec<ValueId> {
        match how {
            Apply::Call(id, curried) => {
                let mut all = curried.clone();
                all.extend_from_slice(args);
                self.b.emit(body, Op::Call { func: *id, args: all }, leaf_tys(ret), span)
            }
            Apply::Math(prim) => vec![self.b.prim(body, prim.clone(), args.to_vec(), leaf_ty(ret), span)],
            Apply::Op(op, left) => {
                let (x, y) = match left {
                    Some(l) => (*l, args[0]),
                    None => (args[0], args[1]),
                };
                vec![self.binop(body, *op, x, y, span)]
            }
            Apply::Lambda(params, lbody) => {
                let mark = self.env.len();
                let mut at = 0;
                for p in params.iter() {
                    let n = p.ty.leaves().len();
                    self.env.push((p.name.clone(), args[at..at + n].to_vec(), p.ty.clone()));
                    at += n;
                }
                let r = self.expr(lbody, body);
                self.env.truncate(mark);
                r
            }
        }
    }

    /// The fold function of `reduce`/`scan`: a primitive, a function, or a
    /// lambda lifted into a function of its own (free variables first);
    /// `real` says the elements are `real`s (`op %` is then `fmod`).
    fn fold_fn(&mut self, fun: &FnArg, real: bool, out: &mut Vec<Stmt>, span: Span) -> Option<(FoldFn, Vec<ValueId>)> {
        match fun {
            FnArg::Op { op: BinOp::Mod, left: None, .. } if real => {
                Some((FoldFn::Prim(Prim::Math(MathFn::Fmod)), Vec::new()))
            }
            FnArg::Op { op, left: None, .. } => {
                let ir = match op {
                    BinOp::Add => IrBin::Add,
                    BinOp::Mul => IrBin::Mul,
                    BinOp::Sub => IrBin::Sub,
                    BinOp::Div => IrBin::Div,
                    BinOp::And => IrBin::And,
                    BinOp::Or => IrBin::Or,
                    BinOp::BitAnd => IrBin::BitAnd,
                    BinOp::BitOr => IrBin::BitOr,
                    BinOp::BitXor => IrBin::BitXor,
                    BinOp::Mod => IrBin::Mod,
                    _ => {
                        self.limitation(span, &format!("`op {}` as a reduction operator", op.symbol()));
                        return None;
                    }
                };
                Some((FoldFn::Prim(Prim::Bin(ir)), Vec::new()))
            }
            FnArg::Op { .. } => {
                self.limitation(span, "a curried operator section as a reduction operator");
                None
            }
            FnArg::Named { name, curried, .. } => {
                let partial: Vec<ValueId> = curried.iter().flat_map(|c| self.expr(c, out)).collect();
                match self.ml.funcs.get(name) {
                    Some((id, ..)) => Some((FoldFn::Call(*id), partial)),
                    None => {
                        self.limitation(span, &format!("`{name}` as a reduction operator"));
                        None
                    }
                }
            }
            FnArg::Lambda { ret, params, body, span: lspan } => {
                // Lift: free variables of the body become leading parameters.
                let mut names = Vec::new();
                free_names(body, &mut names);
                let captured: Vec<(Name, Vec<ValueId>, Type)> = self
                    .env
                    .iter()
                    .rev()
                    .filter(|(n, ..)| names.contains(n) && !params.iter().any(|p| p.name == *n))
                    .fold(Vec::<(Name, Vec<ValueId>, Type)>::new(), |mut acc, x| {
                        if !acc.iter().any(|(n, ..)| *n == x.0) {
                            acc.push(x.clone());
                        }
                        acc
                    });
                self.ml.lambdas += 1;
                let fname = format!("{}__lambda{}", self.b.f.name, self.ml.lambdas);
                let id = FuncId(self.ml.module.functions.len() as u32);
                let mut lf = Function {
                    name: fname.clone(),
                    source_name: Name::new(&fname),
                    kind: FunctionKind::Instance,
                    params: Vec::new(),
                    results: leaf_tys(ret),
                    body: Block::default(),
                    values: Vec::new(),
                    inline: true,
                    noinline: false,
                    cold: false,
                    library: false,
                    specialises: None,
                    span: *lspan,
                };
                let mut env = Vec::new();
                for (n, _, t) in &captured {
                    let vals: Vec<ValueId> =
                        leaf_tys(t).into_iter().map(|ty| lf.new_value(ty, Some(n.clone()))).collect();
                    lf.params.extend(vals.iter().copied());
                    env.push((n.clone(), vals, t.clone()));
                }
                for p in params {
                    let vals: Vec<ValueId> =
                        leaf_tys(&p.ty).into_iter().map(|ty| lf.new_value(ty, Some(p.name.clone()))).collect();
                    lf.params.extend(vals.iter().copied());
                    env.push((p.name.clone(), vals, p.ty.clone()));
                }
                // Placeholder until built, so nested lambdas get later ids.
                self.ml.module.functions.push(lf.clone());
                let mut inner = FnLower { ml: &mut *self.ml, b: FnBuilder { f: lf, span: *lspan }, env, in_callee: 0 };
                let mut stmts = Vec::new();
                let yields = inner.expr(body, &mut stmts);
                inner.b.f.body = Block { stmts, yields };
                let built = inner.b.f;
                self.ml.module.functions[id.0 as usize] = built;
                let partial: Vec<ValueId> = captured.iter().flat_map(|(_, v, _)| v.clone()).collect();
                Some((FoldFn::Call(id), partial))
            }
        }
    }

    fn soac(&mut self, e: &Expr, soac: Soac, fun: &FnArg, args: &[Expr], out: &mut Vec<Stmt>) -> Vec<ValueId> {
        let span = e.span;
        let ty = self.ty_of(e);
        let (neutral, arrays) = match soac {
            Soac::Map | Soac::Filter => (None, args),
            Soac::Reduce | Soac::Scan => (Some(&args[0]), &args[1..]),
        };
        let neutral_vals = neutral.map(|n| self.expr(n, out));
        let mut inputs = Vec::new();
        let mut n = None;
        for a in arrays {
            let l = self.expr(a, out);
            let size = self.extent(out, l[0], 0, a.span);
            match n {
                None => n = Some(size),
                Some(f) => self.same_size(out, f, size, a.span, &format!("`{}`", soac.name())),
            }
            inputs.extend(l);
        }
        let Some(n) = n else { return Vec::new() };
        let (_, lo, hi) = self.frame(out, n, span);
        let i = self.b.f.new_value(int_ty(), Some(Name::new("i")));
        // Rows of the inputs at `i`.
        let mut body = Vec::new();
        let iv = self.vector(&mut body, vec![i], span);
        let rows: Vec<ValueId> = inputs
            .iter()
            .map(|a| {
                let t = self.b.f.ty(*a).clone();
                let cell = Ty::new(t.elem, Shape::rank(t.shape.rank_if_known().unwrap_or(1).saturating_sub(1)));
                self.b.prim(&mut body, Prim::Sel, vec![iv, *a], cell, span)
            })
            .collect();
        let part = |stmts: Vec<Stmt>, yields: Vec<ValueId>, k: usize| {
            dense_part(lo, hi, vec![i], Block { stmts, yields }, k, span)
        };
        match soac {
            Soac::Map => {
                let how = self.applier(fun, out);
                let ret = ty.elem().cloned().unwrap_or(Type::Int);
                let cells = self.apply(&how, &rows, &ret, &mut body, fun.span());
                let tys = leaf_tys(&ty);
                // Array cells: their shape computed before the map where the size
                // analysis can, so that an empty map still has a shape.
                let defaults = self.cell_defaults(fun, &inputs, &ret, out, span);
                let ops: Vec<WithOp> = (0..cells.len())
                    .map(|k| WithOp::Genarray { shape: hi, default: defaults.get(k).copied().flatten() })
                    .collect();
                let k = ops.len();
                let w = with_loop(vec![part(body, cells, k)], ops);
                self.b.emit(out, Op::With(Box::new(scalar_cells(&self.b, w))), tys, span)
            }
            Soac::Filter => {
                let how = self.applier(fun, out);
                let flag = self.apply(&how, &rows, &Type::Bool, &mut body, fun.span())[0];
                if rows.iter().any(|r| !self.b.f.ty(*r).shape.is_scalar()) {
                    // Rows that are arrays: the indices kept, then the rows
                    // gathered. A filter of the rows themselves would not know
                    // their shape when it keeps none.
                    let w = with_loop(vec![part(body, vec![flag, i], 1)], vec![WithOp::Filter { shape: hi }]);
                    let kept_ty = Ty::new(Elem::Base(BaseType::Int), Shape::rank(1));
                    let kept = self.b.emit1(out, Op::With(Box::new(scalar_cells(&self.b, w))), kept_ty, span);
                    let count = self.extent(out, kept, 0, span);
                    return inputs.iter().map(|a| self.gather(out, *a, kept, count, span)).collect();
                }
                let mut yields = Vec::new();
                for r in &rows {
                    yields.push(flag);
                    yields.push(*r);
                }
                let ops: Vec<WithOp> = rows.iter().map(|_| WithOp::Filter { shape: hi }).collect();
                let k = ops.len();
                let w = with_loop(vec![part(body, yields, k)], ops);
                self.b.emit(out, Op::With(Box::new(scalar_cells(&self.b, w))), leaf_tys(&ty), span)
            }
            Soac::Reduce | Soac::Scan => {
                let unknown = |me: &mut Self| leaf_tys(&ty).into_iter().map(|t| me.b.f.new_value(t, None)).collect();
                let real = neutral_vals
                    .as_ref()
                    .and_then(|n| n.first())
                    .is_some_and(|v| self.b.f.ty(*v).elem == Elem::Base(BaseType::Double));
                let Some((fold, partial)) = self.fold_fn(fun, real, out, fun.span()) else { return unknown(self) };
                let neutral = neutral_vals.unwrap_or_default();
                let lanes = rows.len();
                if neutral.len() != lanes {
                    self.limitation(span, "a neutral element whose tuple differs from the elements'");
                    return unknown(self);
                }
                // Over tuples: one accumulator per leaf, combined by one call
                // of the operator (the lanes of one fold function).
                let lane = |j: usize| match (&fold, lanes) {
                    (_, 1) => Some(fold.clone()),
                    (FoldFn::Call(func), _) => Some(FoldFn::Lane { func: *func, lane: j, lanes }),
                    _ => None,
                };
                let mut ops = Vec::with_capacity(lanes);
                for (j, n) in neutral.iter().enumerate() {
                    let Some(fun) = lane(j) else {
                        self.limitation(
                            span,
                            &format!("an operator section as the operator of `{}` over tuples", soac.name()),
                        );
                        return unknown(self);
                    };
                    let partial = partial.clone();
                    ops.push(if soac == Soac::Reduce {
                        WithOp::Fold { fun, partial, neutral: *n, fixpoint: None }
                    } else {
                        WithOp::Scan { shape: hi, fun, partial, neutral: *n }
                    });
                }
                let w = with_loop(vec![part(body, rows, lanes)], ops);
                self.b.emit(out, Op::With(Box::new(scalar_cells(&self.b, w))), leaf_tys(&ty), span)
            }
        }
    }
}

/// What the size analysis knows of a variable inside a map's function: per
/// leaf of its type, its extents as values computed before the map (none:
/// unknown), and for an `int`, its value when that is computed before the map.
#[derive(Clone, Debug)]
struct Known {
    leaves: Vec<Option<Vec<ValueId>>>,
    int: Option<ValueId>,
}

impl Known {
    fn shapes(leaves: Vec<Option<Vec<ValueId>>>) -> Known {
        Known { leaves, int: None }
    }

    fn scalar(int: Option<ValueId>) -> Known {
        Known { leaves: vec![Some(Vec::new())], int }
    }

    /// One `Known` per leaf (what [`bind_params`] takes).
    fn per_leaf(self) -> Vec<Known> {
        let single = self.leaves.len() == 1;
        let int = self.int;
        self.leaves.into_iter().map(|l| Known { leaves: vec![l], int: if single { int } else { None } }).collect()
    }
}

/// How deep the size analysis follows calls of named functions.
const SIZE_DEPTH: usize = 4;

/// The size analysis of seed 004 §9.1.1, for the cells of a `map`: the extents
/// of what the map's function returns, as values computed *before* the map
/// from the input arrays' extents (a parameter is a row of its array) and
/// from variables around it, following `iota`, `replicate`, `size`,
/// `reshape`, `transpose`, `concat`, `split`, `zip`, indexing, `let`, `if`
/// and nested SOACs. With the extents known, the map's `genarray` gets a
/// default cell of that shape: a map over an empty array still has its
/// rows' shape (`map(fn [int] (int x) => replicate(3, x), iota(0))` is a
/// `[0][3]`); where they are not known, an empty map's shape is (R0012).
/// Only arithmetic and extents are computed early: they cannot fail, and the
/// default row's extents are clamped at 0 (a negative one belongs to a
/// function that fails when applied, which an empty map never does).
impl FnLower<'_, '_> {
    /// Per result leaf of `fun` applied to rows of `inputs`: a default cell
    /// for array leaves whose shape the analysis finds.
    fn cell_defaults(
        &mut self,
        fun: &FnArg,
        inputs: &[ValueId],
        ret: &Type,
        out: &mut Vec<Stmt>,
        span: Span,
    ) -> Vec<Option<ValueId>> {
        let leaves = ret.leaves();
        if leaves.iter().all(|t| t.rank() == 0) {
            return vec![None; leaves.len()];
        }
        let rows: Vec<Known> = inputs
            .iter()
            .map(|a| {
                let r = self.rank(*a);
                let ext: Vec<ValueId> = (1..r).map(|k| self.extent(out, *a, k, span)).collect();
                Known::shapes(vec![Some(ext)])
            })
            .collect();
        let shapes = self.fn_shapes(fun, rows, &[], out, span, 0);
        leaves
            .iter()
            .enumerate()
            .map(|(k, t)| {
                let ext = shapes.as_ref()?.get(k)?.clone()?;
                if t.rank() == 0 || ext.len() != t.rank() {
                    return None;
                }
                // A negative extent means the function fails wherever it
                // runs; the default row must not fail where it does not run
                // (an empty map), so its extents are at least 0.
                let zero = self.int(out, 0, span);
                let ext = ext.into_iter().map(|e| self.bin(out, IrBin::Max, e, zero, span)).collect();
                let shp = self.vector(out, ext, span);
                let mut base = t;
                while let Type::Array(e, _) = base {
                    base = e;
                }
                let zero = match base {
                    Type::Real => Value::Scalar(Scalar::Double(0.0)),
                    Type::Bool => Value::Scalar(Scalar::Bool(false)),
                    Type::Char => Value::Scalar(Scalar::Char(0)),
                    _ => Value::Scalar(Scalar::int(0)),
                };
                let z = self.b.constant(out, zero, span);
                Some(self.b.prim(out, Prim::Genarray, vec![shp, z], leaf_ty(t), span))
            })
            .collect()
    }

    /// The extents of what `fun` returns for arguments known as `args` (one
    /// per leaf of the SOAC's inputs, in order); `around` holds what is
    /// known of the variables where `fun` is written (a lambda sees them).
    fn fn_shapes(
        &mut self,
        fun: &FnArg,
        args: Vec<Known>,
        around: &[(Name, Known)],
        out: &mut Vec<Stmt>,
        span: Span,
        depth: usize,
    ) -> Option<Vec<Option<Vec<ValueId>>>> {
        match fun {
            FnArg::Op { .. } => Some(vec![Some(Vec::new())]),
            FnArg::Lambda { params, body, .. } => {
                let env = [around.to_vec(), bind_params(params, args)?].concat();
                self.shapes(body, &env, out, span, depth).map(|k| k.leaves)
            }
            FnArg::Named { name, curried, .. } => {
                if math_builtin(name).is_some() {
                    return Some(vec![Some(Vec::new())]);
                }
                let program = self.ml.program;
                let f = program.functions.iter().find(|f| f.name == *name)?;
                if f.ret.leaves().iter().all(|t| t.rank() == 0) {
                    return Some(vec![Some(Vec::new()); f.ret.leaves().len()]);
                }
                if depth >= SIZE_DEPTH {
                    return None;
                }
                let mut all = Vec::new();
                // Curried arguments are evaluated where the SOAC is (calls
                // in them are not followed).
                for c in curried {
                    all.extend(self.shapes(c, around, out, span, SIZE_DEPTH)?.per_leaf());
                }
                all.extend(args);
                let env = bind_params(&f.params, all)?;
                self.in_callee += 1;
                let found = self.shapes(&f.body, &env, out, span, depth + 1).map(|k| k.leaves);
                self.in_callee -= 1;
                found
            }
        }
    }

    /// The extents of `e`'s leaves (and its value, for an `int` computed from
    /// what is known), where `env` holds the map function's variables.
    fn shapes(
        &mut self,
        e: &Expr,
        env: &[(Name, Known)],
        out: &mut Vec<Stmt>,
        span: Span,
        depth: usize,
    ) -> Option<Known> {
        let ty = self.ml.checked.try_ty(e)?.clone();
        if ty.leaves().iter().all(|t| t.rank() == 0) && !matches!(ty, Type::Int) {
            return Some(Known::shapes(vec![Some(Vec::new()); ty.leaves().len()]));
        }
        match &e.kind {
            ExprKind::Int(v) => Some(Known::scalar(Some(self.int(out, *v, span)))),
            ExprKind::Var(n) => self.known_var(n, env, out, span),
            ExprKind::Bin(op, a, b) if matches!(ty, Type::Int) => {
                let ir = match op {
                    BinOp::Add => IrBin::Add,
                    BinOp::Sub => IrBin::Sub,
                    BinOp::Mul => IrBin::Mul,
                    _ => return Some(Known::scalar(None)),
                };
                let x = self.shapes(a, env, out, span, depth)?.int;
                let y = self.shapes(b, env, out, span, depth)?.int;
                Some(Known::scalar(x.zip(y).map(|(x, y)| self.bin(out, ir, x, y, span))))
            }
            ExprKind::Tuple(items) => {
                let mut leaves = Vec::new();
                for i in items {
                    leaves.extend(self.shapes(i, env, out, span, depth)?.leaves);
                }
                Some(Known::shapes(leaves))
            }
            ExprKind::Array(items) => {
                let first = self.shapes(items.first()?, env, out, span, depth)?;
                let n = self.int(out, items.len() as i64, span);
                Some(Known::shapes(first.leaves.into_iter().map(|l| l.map(|x| [vec![n], x].concat())).collect()))
            }
            ExprKind::If(_, a, b) => {
                // What both branches agree on: which one runs depends on the
                // data (`if x > 100 then replicate(2, x) else replicate(3, x)`
                // has rows of 3 where no x is above 100).
                let ka = self.shapes(a, env, out, span, depth)?;
                let kb = self.shapes(b, env, out, span, depth)?;
                let konst = |v: ValueId| {
                    out.iter().find(|s| s.defs.first() == Some(&v)).and_then(|s| match &s.op {
                        Op::Const(c) => Some(c.clone()),
                        _ => None,
                    })
                };
                let same = |x: ValueId, y: ValueId| x == y || konst(x).is_some_and(|c| Some(c) == konst(y));
                let leaves = ka
                    .leaves
                    .into_iter()
                    .zip(kb.leaves)
                    .map(|(x, y)| match (x, y) {
                        (Some(x), Some(y)) if x.len() == y.len() && x.iter().zip(&y).all(|(p, q)| same(*p, *q)) => {
                            Some(x)
                        }
                        _ => None,
                    })
                    .collect();
                let int = ka.int.zip(kb.int).filter(|(x, y)| same(*x, *y)).map(|(x, _)| x);
                Some(Known { leaves, int })
            }
            ExprKind::Index { array, indices, .. } => {
                let whole = self.known_var(array, env, out, span)?;
                let n = indices.len();
                Some(Known::shapes(
                    whole.leaves.into_iter().map(|l| l.and_then(|x| x.get(n..).map(<[ValueId]>::to_vec))).collect(),
                ))
            }
            ExprKind::Let { pat, value, body } => {
                let v = self.shapes(value, env, out, span, depth)?;
                let vty = self.ml.checked.try_ty(value)?.clone();
                let mut inner = env.to_vec();
                bind_pat_known(pat, v, &vty, &mut inner)?;
                self.shapes(body, &inner, out, span, depth)
            }
            ExprKind::LetWith { dest, src, body, .. } => {
                let k = self.known_var(src, env, out, span)?;
                let mut inner = env.to_vec();
                inner.push((dest.clone(), k));
                self.shapes(body, &inner, out, span, depth)
            }
            ExprKind::Call { fun, args, .. } => self.call_shapes(fun, args, env, out, span, depth),
            ExprKind::Soac { soac, fun, args } => {
                let (neutral, arrays) = match soac {
                    Soac::Map | Soac::Filter => (None, &args[..]),
                    Soac::Reduce | Soac::Scan => (Some(&args[0]), &args[1..]),
                };
                let mut rows = Vec::new();
                let mut n = None;
                for a in arrays {
                    let k = self.shapes(a, env, out, span, depth)?;
                    for l in k.leaves {
                        let l = l?;
                        n = n.or_else(|| l.first().copied());
                        rows.push(Known::shapes(vec![Some(l.get(1..)?.to_vec())]));
                    }
                }
                match soac {
                    Soac::Map => {
                        let n = n?;
                        let cells = self.fn_shapes(fun, rows, env, out, span, depth)?;
                        Some(Known::shapes(cells.into_iter().map(|c| c.map(|x| [vec![n], x].concat())).collect()))
                    }
                    Soac::Reduce => self.shapes(neutral?, env, out, span, depth),
                    Soac::Scan => {
                        let n = n?;
                        let cell = self.shapes(neutral?, env, out, span, depth)?;
                        Some(Known::shapes(cell.leaves.into_iter().map(|c| c.map(|x| [vec![n], x].concat())).collect()))
                    }
                    // How many elements a filter keeps depends on them.
                    Soac::Filter => None,
                }
            }
            _ if matches!(ty, Type::Int) => Some(Known::scalar(None)),
            // One unknown per leaf (a `loop` may yield a tuple).
            _ => Some(Known::shapes(vec![None; ty.leaves().len()])),
        }
    }

    /// A variable: one of the map function's (`env`), or one from around the
    /// map, whose extents (and value, for an `int`) are computed before it.
    fn known_var(&mut self, n: &Name, env: &[(Name, Known)], out: &mut Vec<Stmt>, span: Span) -> Option<Known> {
        if let Some((_, k)) = env.iter().rev().find(|(m, _)| m == n) {
            return Some(k.clone());
        }
        if self.in_callee > 0 {
            return None;
        }
        let (leaves, t) = self.lookup(n)?;
        if matches!(t, Type::Int) {
            return Some(Known::scalar(Some(leaves[0])));
        }
        let ext = leaves
            .iter()
            .map(|a| {
                let r = self.rank(*a);
                Some((0..r).map(|k| self.extent(out, *a, k, span)).collect())
            })
            .collect();
        Some(Known::shapes(ext))
    }

    fn call_shapes(
        &mut self,
        fun: &Name,
        args: &[Expr],
        env: &[(Name, Known)],
        out: &mut Vec<Stmt>,
        span: Span,
        depth: usize,
    ) -> Option<Known> {
        let arg = |me: &mut Self, out: &mut Vec<Stmt>, k: usize| me.shapes(args.get(k)?, env, out, span, depth);
        let first = |k: Known| k.leaves.into_iter().next().flatten();
        match fun.as_str() {
            "iota" => {
                let n = arg(self, out, 0)?.int?;
                Some(Known::shapes(vec![Some(vec![n])]))
            }
            "replicate" => {
                let n = arg(self, out, 0)?.int?;
                let v = arg(self, out, 1)?;
                Some(Known::shapes(v.leaves.into_iter().map(|l| l.map(|x| [vec![n], x].concat())).collect()))
            }
            "size" => {
                let (k, a) = if args.len() == 2 { (static_int(&args[0]), 1) } else { (0, 0) };
                let ext = first(arg(self, out, a)?)?;
                Some(Known::scalar(ext.get(usize::try_from(k).ok()?).copied()))
            }
            "copy" | "unzip" => arg(self, out, 0),
            "zip" => {
                let mut leaves = Vec::new();
                for k in 0..args.len() {
                    leaves.extend(arg(self, out, k)?.leaves);
                }
                Some(Known::shapes(leaves))
            }
            "reshape" => {
                let dims: Vec<&Expr> = match &args.first()?.kind {
                    ExprKind::Tuple(items) => items.iter().collect(),
                    _ => vec![args.first()?],
                };
                let mut ds = Vec::new();
                for d in dims {
                    ds.push(self.shapes(d, env, out, span, depth)?.int?);
                }
                let x = arg(self, out, 1)?;
                let outer = self.ml.checked.try_ty(args.get(1)?)?.rank();
                Some(Known::shapes(
                    x.leaves
                        .into_iter()
                        .map(|l| l.and_then(|e| Some([ds.clone(), e.get(outer..)?.to_vec()].concat())))
                        .collect(),
                ))
            }
            "transpose" => {
                let (k, n, a) =
                    if args.len() == 3 { (static_int(&args[0]), static_int(&args[1]), 2) } else { (0, 1, 0) };
                let x = arg(self, out, a)?;
                let (k, n) = (usize::try_from(k).ok()?, n);
                Some(Known::shapes(
                    x.leaves
                        .into_iter()
                        .map(|l| {
                            let mut e = l?;
                            let to = usize::try_from(k as i64 + n).ok()?;
                            if k >= e.len() || to >= e.len() {
                                return None;
                            }
                            let d = e.remove(k);
                            e.insert(to, d);
                            Some(e)
                        })
                        .collect(),
                ))
            }
            "concat" => {
                let a = arg(self, out, 0)?;
                let b = arg(self, out, 1)?;
                let mut leaves = Vec::new();
                for (x, y) in a.leaves.into_iter().zip(b.leaves) {
                    leaves.push(match (x, y) {
                        (Some(x), Some(y)) if !x.is_empty() && !y.is_empty() => {
                            let n = self.bin(out, IrBin::Add, x[0], y[0], span);
                            Some([vec![n], x[1..].to_vec()].concat())
                        }
                        _ => None,
                    });
                }
                Some(Known::shapes(leaves))
            }
            "split" => {
                let n = arg(self, out, 0)?.int?;
                let x = arg(self, out, 1)?;
                let mut front = Vec::new();
                let mut back = Vec::new();
                for l in x.leaves {
                    match l {
                        Some(e) if !e.is_empty() => {
                            let rest = self.bin(out, IrBin::Sub, e[0], n, span);
                            front.push(Some([vec![n], e[1..].to_vec()].concat()));
                            back.push(Some([vec![rest], e[1..].to_vec()].concat()));
                        }
                        _ => {
                            front.push(None);
                            back.push(None);
                        }
                    }
                }
                front.extend(back);
                Some(Known::shapes(front))
            }
            _ => {
                // A user function returning arrays: its body with its parameters known.
                if depth >= SIZE_DEPTH {
                    return None;
                }
                let program = self.ml.program;
                let f = program.functions.iter().find(|f| f.name == *fun)?;
                let mut known = Vec::new();
                for k in 0..args.len() {
                    known.extend(arg(self, out, k)?.per_leaf());
                }
                let inner = bind_params(&f.params, known)?;
                self.in_callee += 1;
                let found = self.shapes(&f.body, &inner, out, span, depth + 1);
                self.in_callee -= 1;
                found
            }
        }
    }
}

/// A function's parameters bound to what is known of their arguments (one
/// `Known` per leaf of the parameters' types, in order).
fn bind_params(params: &[Param], args: Vec<Known>) -> Option<Vec<(Name, Known)>> {
    let mut args = args.into_iter();
    let mut env = Vec::new();
    for p in params {
        let n = p.ty.leaves().len();
        let mut leaves = Vec::with_capacity(n);
        let mut int = None;
        for _ in 0..n {
            let k = args.next()?;
            int = k.int;
            leaves.extend(k.leaves);
        }
        env.push((p.name.clone(), Known { leaves, int: if n == 1 { int } else { None } }));
    }
    Some(env)
}

/// A `let` pattern bound to what is known of its value.
fn bind_pat_known(pat: &Pat, k: Known, ty: &Type, env: &mut Vec<(Name, Known)>) -> Option<()> {
    match pat {
        Pat::Id(n, _) => env.push((n.clone(), k)),
        Pat::Tuple(ps, _) => {
            let Type::Tuple(ts) = ty else { return None };
            let mut leaves = k.leaves.into_iter();
            for (p, t) in ps.iter().zip(ts) {
                let n = t.leaves().len();
                let part: Vec<Option<Vec<ValueId>>> = leaves.by_ref().take(n).collect();
                let int = None;
                bind_pat_known(p, Known { leaves: part, int }, t, env)?;
            }
        }
    }
    Some(())
}

/// A dense part `lo <= [i…] < hi` binding its index components as `scalars`,
/// yielding for `ops` operators.
fn dense_part(lower: ValueId, upper: ValueId, scalars: Vec<ValueId>, body: Block, ops: usize, span: Span) -> Part {
    Part {
        lower,
        upper,
        step: None,
        width: None,
        index: None,
        scalars: Some(scalars),
        offset: None,
        body,
        span,
        result_spans: vec![span; ops],
    }
}

/// `w` with the cell types of its `genarray` and `filter` operators recorded
/// where they are scalars: an empty map or filter still has a known shape
/// (`[0]`), which its elements would otherwise tell.
fn scalar_cells(b: &FnBuilder, mut w: With) -> With {
    let Some(p) = w.parts.first() else { return w };
    for k in 0..w.ops.len() {
        if matches!(w.ops[k], WithOp::Genarray { .. } | WithOp::Filter { .. }) && w.cells[k].is_none() {
            let t = b.ty(w.element_yield(p, k));
            if t.shape.is_scalar() {
                w.cells[k] = Some(t);
            }
        }
    }
    w
}

/// A with-loop of these parts and operators (no buffer reuse decided yet).
fn with_loop(parts: Vec<Part>, ops: Vec<WithOp>) -> With {
    let n = ops.len();
    With { parts, ops, first_match: false, cells: vec![None; n], reuse: vec![None; n] }
}

fn static_int(e: &Expr) -> i64 {
    match &e.kind {
        ExprKind::Int(v) => *v,
        ExprKind::Neg(x) => -static_int(x),
        _ => 0,
    }
}

fn math_prim(name: &str) -> Prim {
    match name {
        "toReal" | "toFloat" => Prim::Conv(BaseType::Double),
        "trunc" | "toInt" => Prim::Conv(BaseType::Int),
        other => Prim::Math(MathFn::from_name(other).unwrap_or(MathFn::Sqrt)),
    }
}

/// Every variable name an expression mentions (over-approximates its free
/// variables; capturing a shadowed name only adds an unused parameter).
fn free_names(e: &Expr, out: &mut Vec<Name>) {
    let mut add = |n: &Name| {
        if !out.contains(n) {
            out.push(n.clone());
        }
    };
    match &e.kind {
        ExprKind::Var(n) => add(n),
        ExprKind::Index { array, indices, .. } => {
            add(array);
            indices.iter().for_each(|i| free_names(i, out));
        }
        ExprKind::LetWith { src, indices, value, body, .. } => {
            add(src);
            indices.iter().for_each(|i| free_names(i, out));
            free_names(value, out);
            free_names(body, out);
        }
        ExprKind::Loop { pat, init, bound, body, rest, .. } => {
            if init.is_none() {
                for (n, _) in pat.names() {
                    if !out.contains(&n) {
                        out.push(n);
                    }
                }
            }
            for x in init.iter().map(|b| &**b).chain([&**bound, &**body, &**rest]) {
                free_names(x, out);
            }
        }
        ExprKind::Tuple(items) | ExprKind::Array(items) | ExprKind::Call { args: items, .. } => {
            items.iter().for_each(|i| free_names(i, out))
        }
        ExprKind::Bin(_, a, b) => {
            free_names(a, out);
            free_names(b, out);
        }
        ExprKind::Neg(a) | ExprKind::Not(a) => free_names(a, out),
        ExprKind::If(a, b, c) => {
            free_names(a, out);
            free_names(b, out);
            free_names(c, out);
        }
        ExprKind::Let { value, body, .. } => {
            free_names(value, out);
            free_names(body, out);
        }
        ExprKind::Soac { fun, args, .. } => {
            match fun {
                FnArg::Named { curried, .. } => curried.iter().for_each(|c| free_names(c, out)),
                FnArg::Lambda { body, .. } => free_names(body, out),
                FnArg::Op { left, .. } => left.iter().for_each(|l| free_names(l, out)),
            }
            args.iter().for_each(|a| free_names(a, out));
        }
        ExprKind::Int(_) | ExprKind::Real(_) | ExprKind::Bool(_) | ExprKind::Char(_) => {}
    }
}

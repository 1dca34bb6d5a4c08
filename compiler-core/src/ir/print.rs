//! The IR's text form.
//!
//! ```text
//! fn Det__i_3_3(%0#A: int[3,3]) -> int  [instance Det]
//! {
//!   %1: int[2] = const [3, 3]
//!   %2: int[2] = prim sub(%1, %3)
//!   %4: int[3,3] = with {
//!     part lower %5 upper %6 index %7#iv: int[2] {
//!       %8: int = prim sel(%7, %0)
//!       yield %8
//!     }
//!   } genarray(%9)
//!   check in_bounds(%7, %0) R0001 "index out of bounds"
//!   return %4
//! }
//! entry Det = Det__wrapper
//! ```
//!
//! Types print exactly (`[+3]` is "at least 3 axes"), constants in SaC syntax
//! (`inf`/`nan` for non-finite reals), primitives by the names of [`prim_name`].

use std::fmt::Write;

use super::*;
use crate::interp::format::value_literal;
use crate::interp::ops::{BinOp, UnOp};
use crate::sema::hir::{DotKind, Elem, Hidden, MathFn};
use crate::sema::ty::Shape;
use crate::syntax::ast::BaseType;

pub fn type_text(ty: &Ty) -> String {
    let shape = match &ty.shape {
        Shape::Fixed(d) if d.is_empty() => String::new(),
        Shape::Fixed(d) => format!(
            "[{}]",
            d.iter().map(|e| e.map_or(".".to_string(), |e| e.to_string())).collect::<Vec<_>>().join(",")
        ),
        Shape::AtLeast(0) => "[*]".to_string(),
        Shape::AtLeast(1) => "[+]".to_string(),
        Shape::AtLeast(n) => format!("[+{n}]"),
    };
    format!("{}{shape}", ty.elem)
}

fn dot_code(kinds: &[DotKind]) -> String {
    kinds
        .iter()
        .map(|k| match k {
            DotKind::Index => 'i',
            DotKind::Dot => 'd',
            DotKind::Ellipsis => 'e',
        })
        .collect()
}

/// The text name of a primitive (bijective with [`super::parse::prim_from_name`]).
pub fn prim_name(p: &Prim) -> String {
    match p {
        Prim::Bin(op) => match op {
            BinOp::Add => "add",
            BinOp::Sub => "sub",
            BinOp::Mul => "mul",
            BinOp::Div => "div",
            BinOp::Mod => "mod",
            BinOp::AplMod => "aplmod",
            BinOp::Min => "min",
            BinOp::Max => "max",
            BinOp::Eq => "eq",
            BinOp::Ne => "neq",
            BinOp::Lt => "lt",
            BinOp::Le => "le",
            BinOp::Gt => "gt",
            BinOp::Ge => "ge",
            BinOp::And => "and",
            BinOp::Or => "or",
            BinOp::BitAnd => "bitand",
            BinOp::BitOr => "bitor",
            BinOp::BitXor => "bitxor",
            BinOp::Shl => "shl",
            BinOp::Shr => "shr",
        }
        .to_string(),
        Prim::Un(op) => match op {
            UnOp::Neg => "neg",
            UnOp::Not => "not",
            UnOp::BitNot => "bitnot",
            UnOp::Abs => "abs",
        }
        .to_string(),
        Prim::Conv(b) => format!("to_{}", b.name()),
        Prim::Math(f) => format!("math_{}", format!("{f:?}").to_lowercase()),
        Prim::Dim => "dim".into(),
        Prim::Shape => "shape".into(),
        Prim::Size => "size".into(),
        Prim::Sel => "sel".into(),
        Prim::Modarray => "modarray".into(),
        Prim::Reshape => "reshape".into(),
        Prim::Genarray => "genarray".into(),
        Prim::Cat => "cat".into(),
        Prim::Take => "take".into(),
        Prim::Drop => "drop".into(),
        Prim::Hide(h) => match h {
            Hidden::Value => "hide_value",
            Hidden::Shape => "hide_shape",
            Hidden::Dim => "hide_dim",
        }
        .into(),
        Prim::Vect2Offset => "vect2offset".into(),
        Prim::IdxSel => "idx_sel".into(),
        Prim::IdxModarray => "idx_modarray".into(),
        Prim::MatMul => "matmul".into(),
        Prim::All => "all".into(),
        Prim::DotSelect(k) => format!("dotsel_{}", dot_code(k)),
        Prim::FrameArrange(k) => format!("arrange_{}", dot_code(k)),
        Prim::MinVectors => "min_vectors".into(),
        Prim::MaxVectors => "max_vectors".into(),
        Prim::PrintScalar => "print_scalar".into(),
        Prim::PrintArray => "print_array".into(),
        Prim::Show => "show".into(),
        Prim::Puts => "puts".into(),
        Prim::Printf => "printf".into(),
        Prim::Error => "error".into(),
    }
}

/// A shape pattern as written in SaC (`[n,.,d:shp]`), `[]` for a scalar.
pub fn spec_text(spec: &crate::syntax::ast::ShapeSpec) -> String {
    let ty = crate::sema::hir::Type { elem: Elem::Base(BaseType::Int), shape: spec.clone() };
    let text = ty.to_string();
    let shape = text.strip_prefix("int").unwrap_or("");
    if shape.is_empty() { "[]".to_string() } else { shape.to_string() }
}

/// Every math function, for parsing names back.
pub const MATH_FNS: &[MathFn] = &[
    MathFn::Sqrt,
    MathFn::Cbrt,
    MathFn::Exp,
    MathFn::Expm1,
    MathFn::Log,
    MathFn::Log10,
    MathFn::Log2,
    MathFn::Log1p,
    MathFn::Sin,
    MathFn::Cos,
    MathFn::Tan,
    MathFn::Asin,
    MathFn::Acos,
    MathFn::Atan,
    MathFn::Sinh,
    MathFn::Cosh,
    MathFn::Tanh,
    MathFn::Asinh,
    MathFn::Acosh,
    MathFn::Atanh,
    MathFn::Floor,
    MathFn::Ceil,
    MathFn::Round,
    MathFn::Trunc,
    MathFn::Rint,
    MathFn::Fabs,
    MathFn::Pow,
    MathFn::Atan2,
    MathFn::Fmod,
    MathFn::Hypot,
    MathFn::Copysign,
    MathFn::IsNan,
    MathFn::IsInf,
];

pub fn const_text(v: &Value) -> String {
    use crate::interp::value::Scalar;
    // A NaN's sign shows in printf's `-nan`: constants of either sign are
    // different constants (CSE keys them by this text).
    match v {
        Value::Scalar(Scalar::Double(d)) if d.is_nan() && d.is_sign_negative() => return "-nan".to_string(),
        Value::Scalar(Scalar::Float(f)) if f.is_nan() && f.is_sign_negative() => return "-nanf".to_string(),
        _ => {}
    }
    // Non-finite floats need a marker to read back as float, not double.
    if let Value::Scalar(crate::interp::value::Scalar::Float(f)) = v
        && !f.is_finite()
    {
        return format!("{}f", value_literal(&Value::Scalar(crate::interp::value::Scalar::Double(*f as f64))));
    }
    let _ = (Elem::Base(BaseType::Int), 0);
    value_literal(v)
}

struct Printer<'a> {
    module: &'a Module,
    f: &'a Function,
    out: String,
}

impl Printer<'_> {
    fn v(&self, v: ValueId) -> String {
        format!("%{}", v.0)
    }

    fn def(&self, v: ValueId) -> String {
        let data = &self.f.values[v.0 as usize];
        match &data.name {
            Some(n) => format!("%{}#{}: {}", v.0, n, type_text(&data.ty)),
            None => format!("%{}: {}", v.0, type_text(&data.ty)),
        }
    }

    /// A fold's or scan's function: `prim add`, `call f`, `lane 0 of 2 call f`.
    fn fold_fn(&self, fun: &FoldFn) -> String {
        match fun {
            FoldFn::Prim(p) => format!("prim {}", prim_name(p)),
            FoldFn::Call(f) => format!("call {}", self.module.function(*f).name),
            FoldFn::Lane { func, lane, lanes } => {
                format!("lane {lane} of {lanes} call {}", self.module.function(*func).name)
            }
        }
    }

    fn list(&self, vs: &[ValueId]) -> String {
        vs.iter().map(|v| self.v(*v)).collect::<Vec<_>>().join(", ")
    }

    fn indent(&mut self, depth: usize) {
        for _ in 0..depth {
            self.out.push_str("  ");
        }
    }

    fn block(&mut self, b: &Block, depth: usize) {
        for s in &b.stmts {
            self.stmt(s, depth);
        }
        self.indent(depth);
        if b.yields.is_empty() {
            self.out.push_str("yield\n");
        } else {
            let y = self.list(&b.yields);
            writeln!(self.out, "yield {y}").ok();
        }
    }

    fn stmt(&mut self, s: &Stmt, depth: usize) {
        self.indent(depth);
        if !s.defs.is_empty() {
            let defs: Vec<String> = s.defs.iter().map(|d| self.def(*d)).collect();
            write!(self.out, "{} = ", defs.join(", ")).ok();
        }
        match &s.op {
            Op::Const(v) => writeln!(self.out, "const {}", const_text(v)).ok(),
            Op::Prim { prim, args, checked, in_place } => {
                let mark = match (*checked, *in_place) {
                    (true, false) => "",
                    (false, false) => " unchecked",
                    (true, true) => " in_place",
                    (false, true) => " unchecked in_place",
                };
                writeln!(self.out, "prim {}({}){mark}", prim_name(prim), self.list(args)).ok()
            }
            Op::Call { func, args } => {
                writeln!(self.out, "call {}({})", self.module.function(*func).name, self.list(args)).ok()
            }
            Op::Array(args) => writeln!(self.out, "array [{}]", self.list(args)).ok(),
            Op::Pattern { args, specs, vars, function, labels, results } => {
                let specs: Vec<String> = specs.iter().map(spec_text).collect();
                let vars: Vec<String> = vars.iter().map(|v| v.to_string()).collect();
                let mode = if *results { " results" } else { "" };
                let labels: String = labels.iter().map(|l| format!(" {l:?}")).collect();
                writeln!(
                    self.out,
                    "pattern {function:?} ({}) [{}] vars [{}]{mode}{labels}",
                    self.list(args),
                    specs.join("; "),
                    vars.join(", ")
                )
                .ok()
            }
            Op::Fail { code, message, args } if args.is_empty() => {
                writeln!(self.out, "fail {} {:?}", code.id, message).ok()
            }
            Op::Fail { code, message, args } => {
                writeln!(self.out, "fail {} {:?} ({})", code.id, message, self.list(args)).ok()
            }
            Op::Narrow(v) => writeln!(self.out, "narrow {}", self.v(*v)).ok(),
            Op::Check(c) => {
                let what = match &c.check {
                    Check::SameShape(a, b) => format!("same_shape({}, {})", self.v(*a), self.v(*b)),
                    Check::InBounds { index, shape } => format!("in_bounds({}, {})", self.v(*index), self.v(*shape)),
                    Check::Assert(v) => format!("assert({})", self.v(*v)),
                    Check::Conforms(v, ty) => format!("conforms({}, {})", self.v(*v), type_text(ty)),
                    Check::Extents(v) => format!("extents({})", self.v(*v)),
                    Check::Reshape { shape, from } => format!("reshape({}, {})", self.v(*shape), self.v(*from)),
                };
                writeln!(self.out, "check {what} {} {:?}", c.code.id, c.message).ok()
            }
            Op::If { cond, then_block, else_block } => {
                writeln!(self.out, "if {} {{", self.v(*cond)).ok();
                self.block(then_block, depth + 1);
                self.indent(depth);
                self.out.push_str("} else {\n");
                self.block(else_block, depth + 1);
                self.indent(depth);
                self.out.push_str("}\n");
                None
            }
            Op::Loop { init, params, cond, body, test_first, tiled } => {
                let params: Vec<String> = params.iter().map(|p| self.def(*p)).collect();
                writeln!(
                    self.out,
                    "loop {}{} init({}) params({}) cond {{",
                    if *test_first { "while" } else { "do" },
                    if *tiled { " tiled" } else { "" },
                    self.list(init),
                    params.join(", ")
                )
                .ok();
                self.block(cond, depth + 1);
                self.indent(depth);
                self.out.push_str("} body {\n");
                self.block(body, depth + 1);
                self.indent(depth);
                self.out.push_str("}\n");
                None
            }
            Op::With(w) => {
                writeln!(self.out, "with{} {{", if w.first_match { " first_match" } else { "" }).ok();
                for p in &w.parts {
                    self.indent(depth + 1);
                    write!(self.out, "part lower {} upper {}", self.v(p.lower), self.v(p.upper)).ok();
                    if let Some(s) = p.step {
                        write!(self.out, " step {}", self.v(s)).ok();
                    }
                    if let Some(x) = p.width {
                        write!(self.out, " width {}", self.v(x)).ok();
                    }
                    if let Some(i) = p.index {
                        write!(self.out, " index {}", self.def(i)).ok();
                    }
                    if let Some(ss) = &p.scalars {
                        let d: Vec<String> = ss.iter().map(|s| self.def(*s)).collect();
                        write!(self.out, " scalars [{}]", d.join(", ")).ok();
                    }
                    if let Some(o) = p.offset {
                        write!(self.out, " offset {}", self.def(o)).ok();
                    }
                    self.out.push_str(" {\n");
                    self.block(&p.body, depth + 2);
                    self.indent(depth + 1);
                    self.out.push_str("}\n");
                }
                self.indent(depth);
                let ops: Vec<String> = w
                    .ops
                    .iter()
                    .enumerate()
                    .map(|(k, op)| {
                        let mut s = match op {
                            WithOp::Genarray { shape, default } => match default {
                                Some(d) => format!("genarray({}, {})", self.v(*shape), self.v(*d)),
                                None => format!("genarray({})", self.v(*shape)),
                            },
                            WithOp::Modarray { array } => format!("modarray({})", self.v(*array)),
                            WithOp::Filter { shape } => format!("filter({})", self.v(*shape)),
                            WithOp::Scan { shape, fun, partial, neutral } => {
                                let f = self.fold_fn(fun);
                                let partial = if partial.is_empty() {
                                    String::new()
                                } else {
                                    format!(" partial({})", self.list(partial))
                                };
                                format!("scan({}, {f}{partial}, {})", self.v(*shape), self.v(*neutral))
                            }
                            WithOp::Fold { fun, partial, neutral, fixpoint } => {
                                let f = self.fold_fn(fun);
                                let partial = if partial.is_empty() {
                                    String::new()
                                } else {
                                    format!(" partial({})", self.list(partial))
                                };
                                match fixpoint {
                                    Some(x) => format!("foldfix({f}{partial}, {}, {})", self.v(*neutral), self.v(*x)),
                                    None => format!("fold({f}{partial}, {})", self.v(*neutral)),
                                }
                            }
                        };
                        if let Some(Some(c)) = w.cells.get(k) {
                            write!(s, " cell {}", type_text(c)).ok();
                        }
                        if let Some(Some(r)) = w.reuse.get(k) {
                            write!(s, " reuse {}", self.v(*r)).ok();
                        }
                        s
                    })
                    .collect();
                writeln!(self.out, "}} {}", ops.join(", ")).ok()
            }
        };
    }
}

/// Writes one function.
pub fn function_text(module: &Module, f: &Function) -> String {
    let mut p = Printer { module, f, out: String::new() };
    let params: Vec<String> = f.params.iter().map(|v| p.def(*v)).collect();
    let results: Vec<String> = f.results.iter().map(type_text).collect();
    let kind = match f.kind {
        FunctionKind::Instance => "instance",
        FunctionKind::Wrapper => "wrapper",
    };
    let mut attrs = vec![format!("{kind} {}", f.source_name)];
    if f.noinline {
        attrs.push("noinline".into());
    }
    if f.cold {
        attrs.push("cold".into());
    }
    if f.inline {
        attrs.push("inline".into());
    }
    if f.library {
        attrs.push("library".into());
    }
    if let Some(g) = &f.specialises {
        attrs.push(format!("specialises {g}"));
    }
    writeln!(p.out, "fn {}({}) -> ({})  [{}]\n{{", f.name, params.join(", "), results.join(", "), attrs.join(", "))
        .ok();
    for s in &f.body.stmts {
        p.stmt(s, 1);
    }
    p.indent(1);
    writeln!(p.out, "return {}", p.list(&f.body.yields)).ok();
    p.out.push_str("}\n");
    p.out
}

/// Writes a whole module.
pub fn module_text(module: &Module) -> String {
    let mut out = String::new();
    for f in &module.functions {
        out.push_str(&function_text(module, f));
        out.push('\n');
    }
    for (name, f) in &module.entries {
        writeln!(out, "entry {name} = {}", module.function(*f).name).ok();
    }
    for f in &module.variants {
        writeln!(out, "variant {}", module.function(*f).name).ok();
    }
    out
}

/// A summary of the with-loops of every function that has some, for structure
/// tests and the playground:
///
/// ```text
/// fn relax__d_5_6: 1 with-loop
///   genarray [5,6]: 5 parts [0,0]..[1,6] [1,0]..[4,1] [1,1]..[4,5] [1,5]..[4,6] [4,0]..[5,6]; 0 checks
/// ```
///
/// Bounds print when constant (`?` otherwise); nested with-loops are indented
/// under the one containing them.
pub fn structure_text(module: &Module) -> String {
    let mut out = String::new();
    for f in &module.functions {
        let consts = constants(&f.body);
        let mut lines = Vec::new();
        let mut count = 0;
        structure_block(&f.body, &consts, 1, &mut lines, &mut count);
        if count > 0 {
            writeln!(out, "fn {}: {count} with-loop{}", f.name, if count == 1 { "" } else { "s" }).ok();
            for l in lines {
                writeln!(out, "{l}").ok();
            }
        }
    }
    out
}

fn constants(b: &Block) -> crate::HashMap<ValueId, Value> {
    let mut out = crate::HashMap::default();
    b.walk(&mut |s| {
        if let Op::Const(c) = &s.op {
            out.insert(s.defs[0], c.clone());
        }
    });
    out
}

fn structure_block(
    b: &Block,
    consts: &crate::HashMap<ValueId, Value>,
    depth: usize,
    lines: &mut Vec<String>,
    count: &mut usize,
) {
    let vec_text = |v: ValueId| -> String {
        match consts.get(&v).and_then(|c| c.as_int_vec().filter(|_| c.rank() == 1)) {
            Some(x) => format!("[{}]", x.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",")),
            None => "?".to_string(),
        }
    };
    for s in &b.stmts {
        match &s.op {
            Op::With(w) => {
                *count += 1;
                let ops: Vec<String> = w
                    .ops
                    .iter()
                    .map(|op| match op {
                        WithOp::Genarray { shape, .. } => format!("genarray {}", vec_text(*shape)),
                        WithOp::Modarray { .. } => "modarray".to_string(),
                        WithOp::Fold { fun, .. } => match fun {
                            FoldFn::Prim(p) => format!("fold {}", prim_name(p)),
                            FoldFn::Call(_) => "fold call".to_string(),
                            FoldFn::Lane { lane, lanes, .. } => format!("fold lane {lane} of {lanes}"),
                        },
                        WithOp::Scan { shape, fun, .. } => match fun {
                            FoldFn::Prim(p) => format!("scan {} {}", prim_name(p), vec_text(*shape)),
                            FoldFn::Call(_) => format!("scan call {}", vec_text(*shape)),
                            FoldFn::Lane { lane, lanes, .. } => {
                                format!("scan lane {lane} of {lanes} {}", vec_text(*shape))
                            }
                        },
                        WithOp::Filter { shape } => format!("filter {}", vec_text(*shape)),
                    })
                    .collect();
                let parts: Vec<String> =
                    w.parts.iter().map(|p| format!("{}..{}", vec_text(p.lower), vec_text(p.upper))).collect();
                let mut checks = 0;
                for p in &w.parts {
                    p.body.walk(&mut |t| {
                        if matches!(t.op, Op::Check(_)) {
                            checks += 1;
                        }
                    });
                }
                lines.push(format!(
                    "{}{}: {} part{} {}; {checks} check{}",
                    "  ".repeat(depth),
                    ops.join(", "),
                    w.parts.len(),
                    if w.parts.len() == 1 { "" } else { "s" },
                    parts.join(" "),
                    if checks == 1 { "" } else { "s" }
                ));
                for p in &w.parts {
                    structure_block(&p.body, consts, depth + 1, lines, count);
                }
            }
            other => other.walk_blocks(&mut |inner| structure_block(inner, consts, depth, lines, count)),
        }
    }
}

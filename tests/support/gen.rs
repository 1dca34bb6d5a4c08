//! Random well-typed SaC programs, for property and differential tests.
//!
//! Expressions are built top-down for a requested concrete type (element type and
//! shape), so every selection is in bounds and every element-wise operation gets
//! equal shapes by construction; the *declared* parameter types vary between AKS,
//! AKD and AUD so that inference, specialisation and dispatch all get exercised.
//! Programs are deterministic functions of the seed.

use std::fmt::Write;

/// xorshift64*.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { (self.next() % n as u64) as usize }
    }

    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as usize) as i64
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    Int,
    Double,
}

impl Elem {
    fn name(self) -> &'static str {
        match self {
            Elem::Int => "int",
            Elem::Double => "double",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ty {
    pub elem: Elem,
    pub shape: Vec<usize>,
}

impl Ty {
    fn rank(&self) -> usize {
        self.shape.len()
    }
}

/// A generated program with its entry function's arguments.
#[derive(Clone, Debug)]
pub struct Program {
    pub source: String,
    pub entry: String,
    /// Arguments in SaC syntax.
    pub args: Vec<String>,
    /// The entry's parameter names and exact types (for hints).
    pub params: Vec<(String, Ty)>,
    /// The entry's declared parameter types, as written.
    pub declared: Vec<String>,
}

struct Var {
    name: String,
    ty: Ty,
}

pub struct Gen {
    rng: Rng,
    vars: Vec<Var>,
    helpers: String,
    n_helpers: usize,
    fresh: usize,
}

fn shape_text(shape: &[usize]) -> String {
    format!("[{}]", shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "))
}

impl Gen {
    pub fn new(seed: u64) -> Gen {
        Gen { rng: Rng::new(seed), vars: Vec::new(), helpers: String::new(), n_helpers: 0, fresh: 0 }
    }

    fn fresh(&mut self, prefix: &str) -> String {
        self.fresh += 1;
        format!("{prefix}{}", self.fresh)
    }

    fn random_shape(&mut self, max_rank: usize) -> Vec<usize> {
        let rank = self.rng.below(max_rank + 1);
        (0..rank).map(|_| 1 + self.rng.below(4)).collect()
    }

    fn elem(&mut self) -> Elem {
        if self.rng.chance(60) { Elem::Int } else { Elem::Double }
    }

    fn scalar_literal(&mut self, elem: Elem) -> String {
        match elem {
            Elem::Int => self.rng.range(-9, 9).to_string(),
            Elem::Double => format!("{}.{}", self.rng.range(-9, 9), self.rng.below(10)),
        }
    }

    /// A value of `ty` in SaC literal syntax (for arguments).
    pub fn value_literal(&mut self, ty: &Ty) -> String {
        fn build(g: &mut Gen, elem: Elem, shape: &[usize]) -> String {
            match shape.split_first() {
                None => g.scalar_literal(elem),
                Some((n, rest)) => {
                    let parts: Vec<String> = (0..*n).map(|_| build(g, elem, rest)).collect();
                    format!("[{}]", parts.join(", "))
                }
            }
        }
        build(self, ty.elem, &ty.shape)
    }

    /// A declared type admitting `ty`: exact, known rank, `[+]` or `[*]`.
    fn declared(&mut self, ty: &Ty) -> String {
        let e = ty.elem.name();
        match (self.rng.below(4), ty.rank()) {
            (_, 0) if self.rng.chance(70) => e.to_string(),
            (0, _) => {
                format!("{e}{}", if ty.rank() == 0 { String::new() } else { shape_text(&ty.shape).replace(' ', "") })
            }
            (1, r) if r > 0 => format!("{e}[{}]", vec!["."; r].join(",")),
            (2, r) if r > 0 => format!("{e}[+]"),
            _ => format!("{e}[*]"),
        }
    }

    /// An expression of exactly type `ty`.
    fn expr(&mut self, ty: &Ty, depth: usize) -> String {
        let candidates: Vec<String> = self.vars.iter().filter(|v| v.ty == *ty).map(|v| v.name.clone()).collect();
        if depth == 0 || self.rng.chance(15) {
            if !candidates.is_empty() && self.rng.chance(70) {
                return candidates[self.rng.below(candidates.len())].clone();
            }
            return self.literal(ty);
        }
        let d = depth - 1;
        match self.rng.below(16) {
            0 | 1 => {
                let ops: &[&str] = match ty.elem {
                    Elem::Int => &["+", "-", "*"],
                    Elem::Double => &["+", "-", "*", "/"],
                };
                let op = ops[self.rng.below(ops.len())];
                format!("({} {op} {})", self.expr(ty, d), self.expr(ty, d))
            }
            2 => {
                let scalar = Ty { elem: ty.elem, shape: vec![] };
                if self.rng.chance(50) {
                    format!("({} * {})", self.expr(&scalar, d), self.expr(ty, d))
                } else {
                    format!("({} + {})", self.expr(ty, d), self.expr(&scalar, d))
                }
            }
            3 => {
                let f = ["min", "max"][self.rng.below(2)];
                format!("{f}({}, {})", self.expr(ty, d), self.expr(ty, d))
            }
            4 => format!("abs({})", self.expr(ty, d)),
            5 => {
                let other =
                    Ty { elem: if ty.elem == Elem::Int { Elem::Double } else { Elem::Int }, shape: ty.shape.clone() };
                let conv = if ty.elem == Elem::Int { "toi" } else { "tod" };
                format!("{conv}({})", self.expr(&other, d))
            }
            6 if ty.rank() > 0 => self.genarray(ty, d),
            7 if ty.rank() > 0 => self.modarray(ty, d),
            8 if ty.rank() == 0 => self.reduction(ty, d),
            9 if ty.rank() > 0 => self.take_or_drop(ty, d),
            10 if ty.rank() == 2 && ty.shape[0] != ty.shape[1] || ty.rank() == 2 && self.rng.chance(50) => {
                let t = Ty { elem: ty.elem, shape: vec![ty.shape[1], ty.shape[0]] };
                format!("transpose({})", self.expr(&t, d))
            }
            11 if ty.rank() > 0 => {
                let axis = self.rng.below(ty.rank());
                let n = self.rng.range(-3, 3);
                if self.rng.chance(50) {
                    format!("rotate({axis}, {n}, {})", self.expr(ty, d))
                } else {
                    format!("reverse({})", self.expr(ty, d))
                }
            }
            12 => {
                let a = Ty { elem: Elem::Int, shape: vec![] };
                let rel = ["<", "<=", ">", "==", "!="][self.rng.below(5)];
                format!(
                    "({} {rel} {} ? {} : {})",
                    self.expr(&a, d.min(1)),
                    self.expr(&a, d.min(1)),
                    self.expr(ty, d),
                    self.expr(ty, d)
                )
            }
            13 => self.helper_call(ty, d),
            14 if ty.rank() == 0 => self.selection(ty, d),
            15 if ty.rank() == 0 && ty.elem == Elem::Int => {
                // A shape component of some array.
                let shape = self.random_shape(3);
                if shape.is_empty() {
                    return self.literal(ty);
                }
                let t = Ty { elem: self.elem(), shape: shape.clone() };
                let k = self.rng.below(shape.len());
                format!("shape({})[{k}]", self.expr(&t, d.min(1)))
            }
            _ => {
                if !candidates.is_empty() {
                    candidates[self.rng.below(candidates.len())].clone()
                } else {
                    self.literal(ty)
                }
            }
        }
    }

    fn literal(&mut self, ty: &Ty) -> String {
        if ty.rank() == 0 {
            return self.scalar_literal(ty.elem);
        }
        let n: usize = ty.shape.iter().product();
        if n <= 6 && self.rng.chance(50) {
            return self.value_literal(ty);
        }
        let fill = self.scalar_literal(ty.elem);
        if self.rng.chance(50) {
            format!("genarray({}, {fill})", shape_text(&ty.shape))
        } else {
            let conv = if ty.elem == Elem::Int { "" } else { "tod" };
            format!("reshape({}, {conv}(iota({n}) - {}))", shape_text(&ty.shape), self.rng.below(5))
        }
    }

    /// `with { (gen) : body } : genarray(shape, default)` with one or two partitions.
    fn genarray(&mut self, ty: &Ty, d: usize) -> String {
        let rank = ty.rank();
        let iv = self.fresh("iv");
        let cell = Ty { elem: ty.elem, shape: vec![] };
        // The body may select from arrays of the same shape at iv.
        let same: Vec<String> = self.vars.iter().filter(|v| v.ty == *ty).map(|v| v.name.clone()).collect();
        let body = {
            let base = self.expr(&cell, d.min(2));
            let mut parts = vec![base];
            if let Some(x) = same.first() {
                parts.push(format!("{x}[{iv}]"));
            }
            let comp = self.rng.below(rank);
            let conv = if ty.elem == Elem::Int { String::new() } else { "tod".into() };
            parts.push(format!("{conv}({iv}[{comp}])"));
            let k = self.rng.below(parts.len());
            let j = self.rng.below(parts.len());
            format!("{} + {}", parts[k], parts[j])
        };
        let default = self.scalar_literal(ty.elem);
        let (lo, hi): (Vec<usize>, Vec<usize>) = ty
            .shape
            .iter()
            .map(|&e| {
                let a = self.rng.below(e);
                let b = a + 1 + self.rng.below(e - a);
                (a, b)
            })
            .unzip();
        let generator = match self.rng.below(4) {
            0 => format!("(. <= {iv} <= .)"),
            1 => format!("({} <= {iv} < {})", shape_text(&lo), shape_text(&hi)),
            2 => {
                let step: Vec<usize> = ty.shape.iter().map(|_| 1 + self.rng.below(2)).collect();
                format!("({} <= {iv} < {} step {})", shape_text(&lo), shape_text(&hi), shape_text(&step))
            }
            _ => format!("(. <= {iv} < {})", shape_text(&hi)),
        };
        format!("with {{ {generator} : {body}; }} : genarray({}, {default})", shape_text(&ty.shape))
    }

    fn modarray(&mut self, ty: &Ty, d: usize) -> String {
        let iv = self.fresh("iv");
        let base = self.expr(ty, d);
        let cell = Ty { elem: ty.elem, shape: vec![] };
        let v = self.expr(&cell, d.min(1));
        let lo: Vec<usize> = ty.shape.iter().map(|&e| self.rng.below(e)).collect();
        format!("with {{ ({} <= {iv} < {}) : {v}; }} : modarray({base})", shape_text(&lo), shape_text(&ty.shape))
    }

    fn reduction(&mut self, ty: &Ty, d: usize) -> String {
        let shape = {
            let mut s = self.random_shape(3);
            if s.is_empty() {
                s.push(3);
            }
            s
        };
        let src = Ty { elem: ty.elem, shape };
        let x = self.expr(&src, d);
        match self.rng.below(4) {
            0 => format!("sum({x})"),
            1 => format!("maxval({x})"),
            2 => format!("minval({x})"),
            _ => {
                let iv = self.fresh("iv");
                format!(
                    "with {{ (0 * shape({x}) <= {iv} < shape({x})) : {x}[{iv}]; }} : fold(+, {})",
                    if ty.elem == Elem::Int { "0" } else { "0.0" }
                )
            }
        }
    }

    fn take_or_drop(&mut self, ty: &Ty, d: usize) -> String {
        let extra = 1 + self.rng.below(3);
        let mut src = ty.clone();
        src.shape[0] += extra;
        let x = self.expr(&src, d);
        let n = ty.shape[0] as i64;
        match self.rng.below(4) {
            0 => format!("take([{n}], {x})"),
            1 => format!("take([{}], {x})", -n),
            2 => format!("drop([{extra}], {x})"),
            _ => format!("drop([{}], {x})", -(extra as i64)),
        }
    }

    fn selection(&mut self, ty: &Ty, d: usize) -> String {
        let mut shape = self.random_shape(3);
        if shape.is_empty() {
            shape.push(2);
        }
        let src = Ty { elem: ty.elem, shape: shape.clone() };
        let x = self.expr(&src, d);
        let idx: Vec<String> = shape.iter().map(|&e| self.rng.below(e).to_string()).collect();
        format!("({x})[[{}]]", idx.join(", "))
    }

    /// A call of a (new) helper function whose declared parameter types vary.
    fn helper_call(&mut self, ty: &Ty, d: usize) -> String {
        self.n_helpers += 1;
        let name = format!("h{}", self.n_helpers);
        let param = self.declared(ty);
        let result = self.declared(ty);
        let scalar = Ty { elem: ty.elem, shape: vec![] };
        let k = self.scalar_literal(ty.elem);
        let body = match self.rng.below(3) {
            0 => format!("return x + {k};"),
            1 => format!("y = x * {k};\n  return y - x;"),
            _ => {
                // Overloaded on rank: a scalar instance and a generic one.
                let _ = &scalar;
                "return x;".to_string()
            }
        };
        writeln!(self.helpers, "{result} {name}({param} x)\n{{\n  {body}\n}}\n").ok();
        if self.rng.chance(30) && param != ty.elem.name() {
            // A more specific scalar instance, chosen at run time when x is a scalar.
            let e = ty.elem.name();
            writeln!(self.helpers, "{e} {name}({e} x)\n{{\n  return x;\n}}\n").ok();
        }
        format!("{name}({})", self.expr(ty, d))
    }

    /// Generates a whole program.
    pub fn program(&mut self) -> Program {
        let n_params = 1 + self.rng.below(3);
        let mut params = Vec::new();
        let mut args = Vec::new();
        let mut decls = Vec::new();
        let mut declared = Vec::new();
        for k in 0..n_params {
            let ty = Ty { elem: self.elem(), shape: self.random_shape(3) };
            let name = format!("p{k}");
            args.push(self.value_literal(&ty));
            let d = self.declared(&ty);
            decls.push(format!("{d} {name}"));
            declared.push(d);
            self.vars.push(Var { name: name.clone(), ty: ty.clone() });
            params.push((name, ty));
        }
        let mut body = String::new();
        let n_stmts = 2 + self.rng.below(4);
        for _ in 0..n_stmts {
            let ty = Ty { elem: self.elem(), shape: self.random_shape(3) };
            let name = self.fresh("v");
            match self.rng.below(5) {
                0 => {
                    // Both branches assign the same type.
                    let c = self.expr(&Ty { elem: Elem::Int, shape: vec![] }, 1);
                    let a = self.expr(&ty, 3);
                    let b = self.expr(&ty, 3);
                    writeln!(body, "  if ({c} > 0) {{ {name} = {a}; }} else {{ {name} = {b}; }}").ok();
                }
                1 => {
                    let init = self.expr(&ty, 2);
                    let step = self.expr(&ty, 2);
                    let n = self.rng.below(4);
                    writeln!(body, "  {name} = {init};\n  for (i = 0; i < {n}; i++) {{ {name} = {name} + {step}; }}")
                        .ok();
                }
                _ => {
                    let e = self.expr(&ty, 4);
                    writeln!(body, "  {name} = {e};").ok();
                }
            }
            self.vars.push(Var { name, ty });
        }
        // Return a few of the variables.
        let k = 1 + self.rng.below(3.min(self.vars.len()));
        let mut results = Vec::new();
        let mut rtypes = Vec::new();
        for _ in 0..k {
            let v = &self.vars[self.rng.below(self.vars.len())];
            results.push(v.name.clone());
            rtypes.push(v.ty.clone());
        }
        let rdecls: Vec<String> = rtypes.iter().map(|t| self.declared(t)).collect();
        let source = format!(
            "use Array: all;\nuse StdIO: all;\n\n{}{} f({})\n{{\n{body}  return ({});\n}}\n",
            self.helpers,
            rdecls.join(", "),
            decls.join(", "),
            results.join(", ")
        );
        Program { source, entry: "f".into(), args, params, declared }
    }
}

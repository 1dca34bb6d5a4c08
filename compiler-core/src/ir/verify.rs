//! The IR verifier: the contract every pass must keep. Checked after every pass in
//! tests and debug builds; a failure names the pass and is a compiler bug.
//!
//! 1. Every value is defined exactly once (parameters, statement results, loop
//!    parameters, with-loop part indices).
//! 2. Every operand is in scope: defined earlier in the same block or in an
//!    enclosing one (lexical scoping), or a parameter.
//! 3. Counts agree: a function body yields its result count; `if` branches yield
//!    as many values as the statement defines; a loop's `init`, `params`, body
//!    yields and definitions have one length and its condition yields one value;
//!    each with-loop part yields one value per operator; a call defines as many
//!    values as its callee returns and passes as many as it takes; constants,
//!    primitives, arrays and `hide` define one value; checks and failures none.
//! 4. Element types flow: `if` branches, loop bodies and with-loop folds yield the
//!    element types of what they define; conditions are `bool`.
//! 5. Calls and entries name functions of the module.
//! 6. The lanes of a fold or scan over tuples ([`FoldFn::Lane`]) are
//!    consecutive operators numbered `0..lanes` of one function, all folds
//!    without fixpoint or all scans, with the same partial arguments; the
//!    function takes the partial arguments and two values per lane and
//!    returns one per lane.

use crate::HashSet;

use super::*;
use crate::sema::hir::Elem;
use crate::syntax::ast::BaseType;

struct Verifier<'a> {
    module: &'a Module,
    f: &'a Function,
    defined: HashSet<ValueId>,
    scope: Vec<HashSet<ValueId>>,
    errors: Vec<String>,
}

impl Verifier<'_> {
    fn err(&mut self, msg: String) {
        if self.errors.len() < 20 {
            self.errors.push(format!("in `{}`: {msg}", self.f.name));
        }
    }

    fn define(&mut self, v: ValueId) {
        if v.0 as usize >= self.f.values.len() {
            self.err(format!("%{} is outside the value table", v.0));
            return;
        }
        if !self.defined.insert(v) {
            self.err(format!("%{} is defined twice", v.0));
        }
        if let Some(top) = self.scope.last_mut() {
            top.insert(v);
        }
    }

    fn use_(&mut self, v: ValueId, what: &str) {
        if !self.scope.iter().any(|s| s.contains(&v)) {
            self.err(format!("{what} uses %{}, which is not in scope", v.0));
        }
    }

    fn elem(&self, v: ValueId) -> Option<Elem> {
        self.f.values.get(v.0 as usize).map(|d| d.ty.elem)
    }

    fn block(&mut self, b: &Block, expect: Option<usize>, what: &str) {
        self.scope.push(HashSet::default());
        for s in &b.stmts {
            self.stmt(s);
        }
        for y in &b.yields {
            self.use_(*y, &format!("the yield of {what}"));
        }
        if let Some(n) = expect
            && b.yields.len() != n
        {
            self.err(format!("{what} yields {} value(s), expected {n}", b.yields.len()));
        }
        self.scope.pop();
    }

    fn stmt(&mut self, s: &Stmt) {
        let name = format!("`{}`", op_name(&s.op));
        for v in s.op.operands() {
            self.use_(v, &name);
        }
        let n_defs = s.defs.len();
        let expected = match &s.op {
            Op::Const(_) | Op::Prim { .. } | Op::Array(_) | Op::Narrow(_) => Some(1),
            Op::Pattern { vars, results, .. } => Some(if *results { 0 } else { vars.len() }),
            Op::Check(_) | Op::Fail { .. } => Some(0),
            Op::Call { func, args } => match self.module.functions.get(func.0 as usize) {
                Some(callee) => {
                    if callee.params.len() != args.len() {
                        self.err(format!(
                            "call of `{}` passes {} argument(s), it takes {}",
                            callee.name,
                            args.len(),
                            callee.params.len()
                        ));
                    }
                    Some(callee.results.len())
                }
                None => {
                    self.err(format!("call of unknown function #{}", func.0));
                    None
                }
            },
            Op::If { .. } => None,
            Op::Loop { init, params, .. } => {
                if init.len() != params.len() {
                    self.err(format!("loop has {} initial values for {} parameters", init.len(), params.len()));
                }
                Some(params.len())
            }
            Op::With(w) => Some(w.ops.len()),
        };
        if let Some(e) = expected
            && e != n_defs
        {
            self.err(format!("{name} defines {n_defs} value(s), expected {e}"));
        }
        // Nested blocks and bound values.
        match &s.op {
            Op::If { cond, then_block, else_block } => {
                if self.elem(*cond) != Some(Elem::Base(BaseType::Bool)) {
                    self.err(format!("`if` condition %{} is not bool", cond.0));
                }
                self.block(then_block, Some(n_defs), "a then-branch");
                self.block(else_block, Some(n_defs), "an else-branch");
                for (k, d) in s.defs.iter().enumerate() {
                    for b in [then_block, else_block] {
                        if let Some(y) = b.yields.get(k)
                            && self.elem(*y) != self.elem(*d)
                        {
                            self.err(format!("an `if` branch yields %{} of another element type than %{}", y.0, d.0));
                        }
                    }
                }
            }
            Op::Loop { params, cond, body, init, .. } => {
                self.scope.push(HashSet::default());
                for p in params {
                    self.define(*p);
                }
                for (i, p) in init.iter().zip(params) {
                    if self.elem(*i) != self.elem(*p) {
                        self.err(format!(
                            "loop parameter %{} and its initial value %{} differ in element type",
                            p.0, i.0
                        ));
                    }
                }
                self.block(cond, Some(1), "a loop condition");
                if let Some(c) = cond.yields.first()
                    && self.elem(*c) != Some(Elem::Base(BaseType::Bool))
                {
                    self.err(format!("loop condition %{} is not bool", c.0));
                }
                self.block(body, Some(params.len()), "a loop body");
                self.scope.pop();
            }
            Op::With(w) => {
                if w.cells.len() != w.ops.len() || w.reuse.len() != w.ops.len() {
                    self.err("with-loop cell and reuse lists must have one entry per operator".into());
                }
                self.lanes(w);
                for p in &w.parts {
                    self.scope.push(HashSet::default());
                    for v in p.index.iter().chain(p.scalars.iter().flatten()).chain(p.offset.iter()) {
                        self.define(*v);
                    }
                    self.block(&p.body, Some(w.yields_per_part()), "a with-loop part");
                    self.scope.pop();
                }
            }
            _ => {}
        }
        for d in &s.defs {
            self.define(*d);
        }
    }
}

impl Verifier<'_> {
    /// Invariant 6: the lanes of folds and scans over tuples.
    fn lanes(&mut self, w: &With) {
        let lane_of = |op: &WithOp| match op {
            WithOp::Fold { fun: FoldFn::Lane { func, lane, lanes }, partial, fixpoint, .. } => {
                Some((*func, *lane, *lanes, partial.clone(), fixpoint.is_none(), true))
            }
            WithOp::Scan { fun: FoldFn::Lane { func, lane, lanes }, partial, .. } => {
                Some((*func, *lane, *lanes, partial.clone(), true, false))
            }
            _ => None,
        };
        let mut k = 0;
        while k < w.ops.len() {
            let Some((func, lane, lanes, partial, no_fix, is_fold)) = lane_of(&w.ops[k]) else {
                k += 1;
                continue;
            };
            if lane != 0 || lanes == 0 || k + lanes > w.ops.len() {
                self.err(format!("with-loop operator {k} is lane {lane} of {lanes}, not the first of a group"));
                return;
            }
            for j in 0..lanes {
                match lane_of(&w.ops[k + j]) {
                    Some((g, l, n, p, nf, fold))
                        if g == func && l == j && n == lanes && p == partial && nf && fold == is_fold => {}
                    _ => self.err(format!("with-loop operator {} is not lane {j} of the group at {k}", k + j)),
                }
            }
            if !no_fix {
                self.err(format!("the fold over tuples at operator {k} has a fixpoint"));
            }
            match self.module.functions.get(func.0 as usize) {
                Some(g) if g.params.len() == partial.len() + 2 * lanes && g.results.len() == lanes => {}
                Some(g) => self.err(format!(
                    "fold function `{}` of {lanes} lanes takes {} values and returns {}",
                    g.name,
                    g.params.len(),
                    g.results.len()
                )),
                None => self.err(format!("fold function {} does not exist", func.0)),
            }
            k += lanes;
        }
    }
}

fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Const(_) => "const",
        Op::Prim { .. } => "prim",
        Op::Call { .. } => "call",
        Op::Array(_) => "array",
        Op::If { .. } => "if",
        Op::Loop { .. } => "loop",
        Op::With(_) => "with",
        Op::Check(_) => "check",
        Op::Fail { .. } => "fail",
        Op::Narrow(_) => "narrow",
        Op::Pattern { .. } => "pattern",
    }
}

/// Checks a whole module; returns every problem found.
pub fn verify(module: &Module) -> Result<(), Vec<String>> {
    let mut errors = Vec::new();
    for f in &module.functions {
        let mut v =
            Verifier { module, f, defined: HashSet::default(), scope: vec![HashSet::default()], errors: Vec::new() };
        for p in &f.params {
            v.define(*p);
        }
        v.block(&f.body, Some(f.results.len()), "the function body");
        errors.extend(v.errors);
    }
    for (name, f) in &module.entries {
        if module.functions.get(f.0 as usize).is_none() {
            errors.push(format!("entry `{name}` names no function"));
        }
    }
    for f in &module.variants {
        if module.functions.get(f.0 as usize).is_none() {
            errors.push(format!("variant {} names no function", f.0));
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(errors) }
}

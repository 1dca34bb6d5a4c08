//! # cse: common subexpression elimination
//!
//! Value numbering over the structured IR: a constant, primitive, array literal
//! or check identical to one that has already run (earlier in the same block, or
//! in an enclosing one) is replaced by it. Operands of commutative primitives are
//! put in a canonical order first.
//!
//! ```text
//! %3: int[.] = prim shape(%0)             %3: int[.] = prim shape(%0)
//! %4: int[.] = prim shape(%0)        ⇒    check same_shape(%3, %3) …
//! check same_shape(%3, %4) …
//! ```
//!
//! Merging is safe for primitives that can fail: the earlier one, which
//! dominates, fails first and identically. Conditionals whose branches only
//! yield (selects) merge like primitives. Limits: with-loops, loops, calls and
//! other conditionals are not merged; in-place updates never are (each
//! consumes its argument).

use crate::HashMap;

use super::util;
use super::{Pass, PassCx};
use crate::interp::ops::BinOp;
use crate::ir::print::{const_text, type_text};
use crate::ir::*;
use crate::sema::hir::Prim;
use crate::sema::ty::Ty;

pub const PASS: Pass = Pass { name: "cse", description: "common subexpression elimination (values and checks)", run };

fn run(m: &mut Module, cx: &mut PassCx) {
    cx.each_function(m, |f, cx| {
        let mut cse = Cse { scopes: vec![HashMap::default()], subst: HashMap::default(), merged: 0 };
        util::with_body(f, |f, body| {
            cse.block(f, body);
            util::substitute(body, &cse.subst);
        });
        cx.count("expressions_merged", cse.merged);
    });
}

/// What makes two statements compute the same. Structural rather than text:
/// the keys of every statement of every round were formatted strings, a
/// tenth of the optimiser's allocations.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    /// Constants by type and text (values hold floating-point numbers).
    Const(String),
    /// A primitive and its result type (`hide` gives equal values different types).
    Prim(Prim, Ty, Vec<ValueId>),
    Narrow(Ty, ValueId),
    Array(Vec<ValueId>),
    Check(CheckKey, Vec<ValueId>),
    /// A conditional whose branches only yield values (a select).
    Select(ValueId, Vec<ValueId>, Vec<ValueId>, Vec<Ty>),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum CheckKey {
    SameShape,
    InBounds,
    Assert,
    Conforms(Ty),
    Extents,
    Reshape,
}

struct Cse {
    scopes: Vec<HashMap<Key, Vec<ValueId>>>,
    subst: HashMap<ValueId, ValueId>,
    merged: u64,
}

impl Cse {
    fn lookup(&self, k: &Key) -> Option<&Vec<ValueId>> {
        self.scopes.iter().rev().find_map(|s| s.get(k))
    }

    fn resolve(&self, mut v: ValueId) -> ValueId {
        while let Some(n) = self.subst.get(&v) {
            v = *n;
        }
        v
    }

    fn block(&mut self, f: &Function, b: &mut Block) {
        let stmts = std::mem::take(&mut b.stmts);
        let mut out = Vec::with_capacity(stmts.len());
        for mut s in stmts {
            s.op.map_operands(&mut |v| self.resolve(v));
            s.op.walk_blocks_mut(&mut |inner| {
                self.scopes.push(HashMap::default());
                self.block(f, inner);
                self.scopes.pop();
            });
            match key(f, &s) {
                Some(k) => match self.lookup(&k) {
                    Some(prev) => {
                        for (d, p) in s.defs.iter().zip(prev.clone()) {
                            self.subst.insert(*d, p);
                        }
                        self.merged += 1;
                    }
                    None => {
                        self.scopes.last_mut().expect("a scope").insert(k, s.defs.clone());
                        out.push(s);
                    }
                },
                None => out.push(s),
            }
        }
        b.stmts = out;
        for y in &mut b.yields {
            *y = self.resolve(*y);
        }
    }
}

fn commutative(op: BinOp) -> bool {
    matches!(
        op,
        BinOp::Add
            | BinOp::Mul
            | BinOp::Eq
            | BinOp::Ne
            | BinOp::And
            | BinOp::Or
            | BinOp::Min
            | BinOp::Max
            | BinOp::BitAnd
            | BinOp::BitOr
            | BinOp::BitXor
    )
}

fn key(f: &Function, s: &Stmt) -> Option<Key> {
    match &s.op {
        Op::Const(c) => Some(Key::Const(format!("{} {}", type_text(f.ty(s.defs[0])), const_text(c)))),
        Op::Prim { prim, args, in_place: false, .. } if !prim.has_effect() && *prim != Prim::Error => {
            let mut args = args.clone();
            if let Prim::Bin(op) = prim
                && commutative(*op)
            {
                args.sort();
            }
            Some(Key::Prim(prim.clone(), f.ty(s.defs[0]).clone(), args))
        }
        Op::Array(args) => Some(Key::Array(args.clone())),
        // Inlined index computations (`where(iv < pos, iv, iv + 1)`) leave
        // the same choice between two values in many places.
        Op::If { cond, then_block, else_block } if then_block.stmts.is_empty() && else_block.stmts.is_empty() => {
            Some(Key::Select(
                *cond,
                then_block.yields.clone(),
                else_block.yields.clone(),
                s.defs.iter().map(|d| f.ty(*d).clone()).collect(),
            ))
        }
        Op::Narrow(v) => Some(Key::Narrow(f.ty(s.defs[0]).clone(), *v)),
        Op::Check(c) => {
            let (kind, vals) = match &c.check {
                Check::SameShape(a, b) => (CheckKey::SameShape, vec![*a, *b]),
                Check::InBounds { index, shape } => (CheckKey::InBounds, vec![*index, *shape]),
                Check::Assert(v) => (CheckKey::Assert, vec![*v]),
                Check::Conforms(v, t) => (CheckKey::Conforms(t.clone()), vec![*v]),
                Check::Extents(v) => (CheckKey::Extents, vec![*v]),
                Check::Reshape { shape, from } => (CheckKey::Reshape, vec![*shape, *from]),
            };
            // A check identical to one that passed cannot fail, whatever it says.
            Some(Key::Check(kind, vals))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use crate::HashSet;
    use crate::ir::print::module_text;
    use crate::opt::{PassCx, PipelineOptions};

    /// Two choices between the same values on the same condition (what
    /// inlining `where(iv < pos, iv, iv + 1)` twice leaves) become one; a
    /// conditional with statements in a branch stays.
    const SELECTS: &str = "fn f(%0#i: int, %1#p: int) -> (int)  [instance f]
{
  %2: int = const 1
  %3: bool = prim lt(%0, %1)
  %4: int = prim add(%0, %2)
  %5: int = if %3 {
    yield %0
  } else {
    yield %4
  }
  %6: int = if %3 {
    yield %0
  } else {
    yield %4
  }
  %7: int = if %3 {
    %9: int = prim mul(%0, %0)
    yield %9
  } else {
    yield %4
  }
  %8: int = prim add(%5, %6)
  %10: int = prim add(%8, %7)
  return %10
}

entry f = f
";

    #[test]
    fn conditionals_that_only_choose_between_values_are_merged() {
        let (sources, mut m) = crate::opt::tests::parsed("selects.ir", SELECTS);
        let options = PipelineOptions::default();
        let stable = HashSet::default();
        let mut cx = PassCx::new("cse", &sources, &options, &stable);
        super::run(&mut m, &mut cx);
        let text = module_text(&m);
        assert_eq!(text.matches(" = if %3 {").count(), 2, "{text}");
        assert!(text.contains("prim add(%5, %5)"), "{text}");
        assert_eq!(cx.counters.get("expressions_merged"), Some(&1), "{text}");
    }
}

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
//! dominates, fails first and identically. Limits: with-loops, loops and calls
//! are not merged; in-place updates never are (each consumes its argument).

use crate::HashMap;

use super::util;
use super::{Pass, PassCx};
use crate::interp::ops::BinOp;
use crate::ir::print::{const_text, prim_name, type_text};
use crate::ir::*;
use crate::sema::hir::Prim;

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

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    Const(String),
    Prim(String, Vec<ValueId>),
    Array(Vec<ValueId>),
    Check(String, Vec<ValueId>),
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
            if let Prim::Bin(op) = prim {
                if commutative(*op) {
                    args.sort();
                }
            }
            // The result type is part of the key: `hide` gives equal values different types.
            Some(Key::Prim(format!("{} {}", prim_name(prim), type_text(f.ty(s.defs[0]))), args))
        }
        Op::Array(args) => Some(Key::Array(args.clone())),
        Op::Narrow(v) => Some(Key::Prim(format!("narrow {}", type_text(f.ty(s.defs[0]))), vec![*v])),
        Op::Check(c) => {
            let (kind, vals) = match &c.check {
                Check::SameShape(a, b) => ("same_shape".to_string(), vec![*a, *b]),
                Check::InBounds { index, shape } => ("in_bounds".to_string(), vec![*index, *shape]),
                Check::Assert(v) => ("assert".to_string(), vec![*v]),
                Check::Conforms(v, t) => (format!("conforms {}", type_text(t)), vec![*v]),
            };
            // A check identical to one that passed cannot fail, whatever it says.
            Some(Key::Check(kind, vals))
        }
        _ => None,
    }
}

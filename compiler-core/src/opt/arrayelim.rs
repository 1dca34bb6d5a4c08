//! # arrayelim: array elimination of small constant-size arrays
//!
//! Element-wise operations on short vectors written out element by element
//! (`[a, b] + [c, d]`, `[i, j] - 1`) become vectors of scalar operations
//! (`[a + c, b + d]`). Selections of constant positions from array literals are
//! then answered without the array (`simplify`), and the arrays themselves die.
//! Index arithmetic in loops and with-loops is the typical case.
//!
//! ```text
//! %v: int[2] = array [%i, %j]               %a: int = prim sub(%i, %1)
//! %w: int[2] = prim sub(%v, %1)       ⇒     %b: int = prim sub(%j, %1)
//! %x: int = prim sel([0], %w)               %w: int[2] = array [%a, %b]
//!                                           (%x is %a after simplify)
//! ```
//!
//! Limits: vectors of at most [`MAX_ELEMENTS`] scalars whose elements are known
//! as values (array literals); operations that can fail (division) stay whole,
//! so their errors keep their order.

use crate::HashMap;

use super::util;
use super::{Pass, PassCx};
use crate::ir::*;
use crate::sema::hir::Prim;
use crate::sema::ty::{Shape, Ty};

pub const PASS: Pass = Pass {
    name: "arrayelim",
    description: "element-wise operations on short array literals become scalar operations",
    run,
};

pub const MAX_ELEMENTS: usize = 4;

fn run(m: &mut Module, cx: &mut PassCx) {
    cx.each_function(m, |f, cx| {
        let mut literals: HashMap<ValueId, Vec<ValueId>> = HashMap::default();
        f.body.walk(&mut |s| {
            if let Op::Array(elems) = &s.op
                && elems.len() <= MAX_ELEMENTS
            {
                literals.insert(s.defs[0], elems.clone());
            }
        });
        if literals.is_empty() {
            return;
        }
        let n = util::with_body(f, |f, b| block(f, b, &mut literals));
        cx.count("arrays_scalarised", n);
    });
}

fn block(f: &mut Function, b: &mut Block, literals: &mut HashMap<ValueId, Vec<ValueId>>) -> u64 {
    let mut n = 0;
    let stmts = std::mem::take(&mut b.stmts);
    let mut out = Vec::with_capacity(stmts.len());
    for mut s in stmts {
        s.op.walk_blocks_mut(&mut |inner| n += block(f, inner, literals));
        let Op::Prim { prim, args, .. } = &s.op else {
            out.push(s);
            continue;
        };
        let elementwise = matches!(prim, Prim::Bin(_) | Prim::Un(_) | Prim::Conv(_) | Prim::Math(_));
        if !elementwise || util::prim_may_fail(prim) {
            out.push(s);
            continue;
        }
        let d = s.defs[0];
        let Some(len) = crate::sema::prim_ty::vector_len(f.ty(d)) else {
            out.push(s);
            continue;
        };
        // Every argument a scalar or a literal of that length with scalar elements.
        let parts: Option<Vec<Vec<ValueId>>> = args
            .iter()
            .map(|a| {
                if f.ty(*a).shape.is_scalar() {
                    Some(vec![*a; len])
                } else {
                    literals.get(a).filter(|e| e.len() == len && e.iter().all(|x| f.ty(*x).shape.is_scalar())).cloned()
                }
            })
            .collect();
        let Some(parts) = parts else {
            out.push(s);
            continue;
        };
        if parts.iter().all(|p| args.iter().any(|a| f.ty(*a).shape.is_scalar() && p.iter().all(|x| x == a))) {
            // Only scalars: not a vector operation.
            out.push(s);
            continue;
        }
        let prim = prim.clone();
        let elem_ty = Ty::new(f.ty(d).elem, Shape::scalar());
        let mut elems = Vec::with_capacity(len);
        for k in 0..len {
            let e = f.new_value(elem_ty.clone(), None);
            let a: Vec<ValueId> = parts.iter().map(|p| p[k]).collect();
            out.push(Stmt { defs: vec![e], op: Op::prim(prim.clone(), a), span: s.span, blame: s.blame });
            elems.push(e);
        }
        literals.insert(d, elems.clone());
        out.push(Stmt { defs: vec![d], op: Op::Array(elems), span: s.span, blame: s.blame });
        n += 1;
    }
    b.stmts = out;
    n
}

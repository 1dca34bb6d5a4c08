//! # elementwise: element-wise primitives on arrays become with-loops
//!
//! The library implements some element-wise operations on whole arrays directly
//! with primitives (`_add_VxV_`, `_not_V_`, `_tod_A_`, math functions). Written as
//! with-loops they take part in folding and fusion like every other array
//! operation (seed 002's point: the with-loop is the only array construct the
//! optimiser needs to know).
//!
//! ```text
//! %5: double[5,6] = prim add(%3, %4)
//!   ⇒
//! %5: double[5,6] = with {
//!   part lower %z upper %s index %i: int[2] {
//!     %a: double = prim sel(%i, %3)
//!     %b: double = prim sel(%i, %4)
//!     %c: double = prim add(%a, %b)
//!     yield %c
//!   }
//! } genarray(%s, %zero)
//! ```
//!
//! `%s` is the shape of an array argument; scalar arguments are used as they
//! are. Only operations that can then fold are expanded: an argument comes from
//! a with-loop or another such operation, or the result is selected from inside
//! a with-loop or feeds another such operation. Index arithmetic on small
//! vectors (`iv - lo`) stays primitive. Limits: only results of known rank (the
//! index length must be static); arrays of unknown rank stay primitives (the
//! back end loops over them flat). The shape check that guards a binary
//! operation stays in front of it.

use crate::HashSet;

use super::util;
use super::{Pass, PassCx};
use crate::interp::value::{Scalar, Value};
use crate::ir::*;
use crate::sema::hir::{Elem, Prim};
use crate::sema::ty::{Shape, Ty};

pub const PASS: Pass = Pass {
    name: "elementwise",
    description: "element-wise primitives on arrays become with-loops, so they fold and fuse",
    run,
};

fn run(m: &mut Module, cx: &mut PassCx) {
    cx.each_function(m, |f, cx| {
        let wanted = candidates(f);
        let n = util::with_body(f, |f, b| block(f, b, &wanted));
        cx.count("primitives_expanded", n);
    });
}

/// Element-wise array primitives worth expanding (see the module docs).
fn candidates(f: &Function) -> HashSet<ValueId> {
    let array_prim =
        |s: &Stmt| matches!(&s.op, Op::Prim { prim, .. } if elementwise(prim)) && f.ty(s.defs[0]).shape.non_scalar();
    let mut produced = HashSet::default();
    let mut selected = HashSet::default();
    let mut prims: Vec<(ValueId, Vec<ValueId>)> = Vec::new();
    f.body.walk(&mut |s| match &s.op {
        Op::With(w) => {
            produced.extend(s.defs.iter().copied());
            for p in &w.parts {
                p.body.walk(&mut |t| {
                    if let Op::Prim { prim: Prim::Sel, args, .. } = &t.op {
                        selected.insert(args[1]);
                    }
                });
            }
        }
        Op::Prim { args, .. } if array_prim(s) => {
            prims.push((s.defs[0], args.iter().copied().filter(|a| f.ty(*a).shape.non_scalar()).collect()));
        }
        _ => {}
    });
    let mut wanted: HashSet<ValueId> = HashSet::default();
    loop {
        let mut grew = false;
        for (d, args) in &prims {
            if wanted.contains(d) {
                continue;
            }
            // Fed by a with-loop or an expanded operation, or feeding a with-loop
            // or another element-wise operation (a chain fuses as a whole).
            let from = args.iter().any(|a| produced.contains(a) || wanted.contains(a));
            let into = selected.contains(d) || prims.iter().any(|(e, xs)| e != d && xs.contains(d));
            if from || into {
                wanted.insert(*d);
                grew = true;
            }
        }
        if !grew {
            return wanted;
        }
    }
}

fn elementwise(p: &Prim) -> bool {
    matches!(p, Prim::Bin(_) | Prim::Un(_) | Prim::Conv(_) | Prim::Math(_))
}

fn block(f: &mut Function, b: &mut Block, wanted: &HashSet<ValueId>) -> u64 {
    let mut n = 0;
    let stmts = std::mem::take(&mut b.stmts);
    let mut out = Vec::with_capacity(stmts.len());
    for mut s in stmts {
        s.op.walk_blocks_mut(&mut |inner| n += block(f, inner, wanted));
        let Op::Prim { prim, args, .. } = &s.op else {
            out.push(s);
            continue;
        };
        if !elementwise(prim) || !wanted.contains(&s.defs[0]) {
            out.push(s);
            continue;
        }
        let d = s.defs[0];
        let result = f.ty(d).clone();
        let rank = match result.shape.rank_if_known() {
            Some(r) if r > 0 => r,
            _ => {
                out.push(s);
                continue;
            }
        };
        let Elem::Base(rb) = result.elem else {
            out.push(s);
            continue;
        };
        // Every argument is a scalar or an array of the result's rank (an
        // argument of unknown rank could be either at run time).
        if !args.iter().all(|a| matches!(f.ty(*a).shape.rank_if_known(), Some(r) if r == 0 || r == rank)) {
            out.push(s);
            continue;
        }
        // The array argument that gives the shape.
        let Some(&shaped) = args.iter().find(|a| f.ty(**a).shape.rank_if_known() == Some(rank)) else {
            out.push(s);
            continue;
        };
        let (prim, args) = (prim.clone(), args.clone());
        let span = s.span;
        let mut pre = Vec::new();
        let shape = util::emit_prim(f, &mut pre, Prim::Shape, vec![shaped], util::int_vec_ty(Some(rank)), span);
        let lower = util::emit_const(f, &mut pre, Value::int_vector(&vec![0; rank]), span);
        let zero = util::emit_const(f, &mut pre, Value::Scalar(Scalar::zero(rb)), span);
        let iv = f.new_value(util::int_vec_ty(Some(rank)), None);
        let mut body = Vec::new();
        let mut elems = Vec::new();
        for a in &args {
            let t = f.ty(*a).clone();
            if t.shape.is_scalar() {
                elems.push(*a);
            } else {
                let e = Ty::new(t.elem, Shape::scalar());
                let v = f.new_value(e, None);
                body.push(Stmt {
                    defs: vec![v],
                    op: Op::Prim { prim: Prim::Sel, args: vec![iv, *a], checked: true, in_place: false },
                    span,
                    blame: s.blame,
                });
                elems.push(v);
            }
        }
        let r = f.new_value(Ty::new(result.elem, Shape::scalar()), None);
        body.push(Stmt { defs: vec![r], op: Op::prim(prim, elems), span, blame: s.blame });
        let with = With {
            parts: vec![Part {
                lower,
                upper: shape,
                step: None,
                width: None,
                index: Some(iv),
                scalars: None,
                offset: None,
                body: Block { stmts: body, yields: vec![r] },
                span,
                result_spans: vec![span],
            }],
            ops: vec![WithOp::Genarray { shape, default: Some(zero) }],
            first_match: false,
            cells: vec![Some(Ty::new(result.elem, Shape::scalar()))],
            reuse: vec![None],
        };
        for t in &mut pre {
            t.blame = s.blame;
        }
        out.extend(pre);
        out.push(Stmt { defs: vec![d], op: Op::With(Box::new(with)), span, blame: s.blame });
        n += 1;
    }
    b.stmts = out;
    n
}

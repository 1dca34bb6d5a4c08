//! # gemm: matrix products run as one blocked product
//!
//! A matrix product written as SaC writes it (`c[i, j] = fold(+, 0.0,
//! a[i, k] * b[k, j])`, a genarray with-loop over `[i, j]` whose cell is a
//! fold over `k`) is compiled, element by element, into loops however it is
//! tiled; the fastest products keep a block of results in vector registers
//! while they stream copies of `a` and `b` laid out for it (packing), blocked
//! for the caches — code that depends on the machine more than on the
//! program. This pass recognises the with-loop and replaces it with the
//! primitive `matmul`, which code generation runs as one call of the
//! runtime's blocked product (`wl_gemm_f64`, `runtime/src/gemm.rs`):
//!
//! ```text
//! c = with {                                         u = [l]
//!   part [0,0] <= [i,j] < [m,n] {               ⇒    c = prim matmul(a, b, [m,n], u)
//!     x = with {
//!       part [0] <= [k] < [l] {
//!         y = a[[i,k]] * b[[k,j]]   (selections proved in bounds)
//!       }
//!     } fold(+, 0.0)
//!     yield x
//!   }
//! } genarray([m,n])
//! ```
//!
//! Every element is still its fold in the order of `k` from 0.0: the
//! runtime's multiply-adds are fused (one rounding) as a register tile's are
//! (`tile`), and with exact folds a multiplication and an addition, as the
//! interpreter computes them — so the results are the with-loop's own, bit
//! for bit. The selections must be unchecked (bounds-check elimination
//! proved them, or `version` guards them), so the primitive cannot fail.
//!
//! Which products, the code generator says (`PipelineOptions::matrix_products`,
//! from `codegen::matrix_products`): all of them on targets with AVX2 and FMA
//! but not AVX-512, where the runtime's 6x8 tiles ran 1.08-1.18x faster than
//! the 4x8 register tiles on 1024x1024 products, one and two threads; with
//! AVX-512 only those whose extents are not constants (`Dynamic`: generic
//! code), as the 4x32 register tiles there ran 1.05-1.11x faster than the
//! runtime's 12x16 ones — a product of known shape keeps its tiles (an
//! `analysis` remark says so). A product compiles much cheaper than its
//! tiles: no tile code to optimise (matmul for `--cpu haswell`: 42 -> 27 ms;
//! the compile service for an AVX-512 host, with the generic instance's
//! product: 60 -> 34 ms).
//!
//! Limits: `double` elements only; the part must cover the whole frame
//! (lower bound 0, upper bound the genarray's shape), without step or width;
//! the fold's bound may not depend on `i` or `j` (no triangular products);
//! the operands are whole matrices (`a[i, k]` and `b[k, j]`, not a selection
//! of a sub-expression, a transposed read `b[j, k]` or an offset `a[i + 1,
//! k]`); the fold's body holds the two selections, their product and index
//! arithmetic, nothing else.

use super::index::{self, Affine, Atom, Def, Reader};
use super::interchange;
use super::util;
use super::{MatrixProducts, Pass, PassCx, RemarkKind};
use crate::HashSet;
use crate::interp::ops::BinOp;
use crate::interp::value::{Scalar, Value};
use crate::ir::*;
use crate::sema::hir::{Elem, Prim};
use crate::span::Span;
use crate::syntax::ast::BaseType;

pub const PASS: Pass = Pass {
    name: "gemm",
    description: "a with-loop that is a matrix product runs as the runtime's blocked product",
    run,
};

/// A with-loop found to be a product: its result, operands, frame and fold bound.
struct Product {
    result: ValueId,
    a: ValueId,
    b: ValueId,
    frame: ValueId,
    upper: Vec<Affine>,
    /// The frame and the fold's bound are constants.
    known_extents: bool,
    span: Span,
}

fn run(m: &mut Module, cx: &mut PassCx) {
    let mode = cx.options.matrix_products;
    if mode == MatrixProducts::None {
        return;
    }
    cx.each_function(m, |f, cx| {
        let found = {
            let defs = index::defs(f);
            let reader = Reader::new(f, &defs);
            let mut found = Vec::new();
            find(&f.body, &reader, &mut found);
            found
        };
        let (found, kept): (Vec<Product>, Vec<Product>) =
            found.into_iter().partition(|p| mode == MatrixProducts::All || !p.known_extents);
        for p in &kept {
            cx.remark(
                RemarkKind::Analysis,
                &f.name,
                Some(p.span),
                "a matrix product of known extents: it keeps its register tiles (faster on this target); generic code runs the runtime's blocked product",
            );
        }
        for p in &found {
            util::with_body(f, |f, body| {
                interchange::edit(body, p.result, &mut |stmts: &mut Vec<Stmt>, at: usize| {
                    let mut out = Vec::new();
                    let upper = index::emit_vector(f, &mut out, &p.upper, p.span);
                    stmts[at].op = Op::Prim {
                        prim: Prim::MatMul,
                        args: vec![p.a, p.b, p.frame, upper],
                        checked: false,
                        in_place: false,
                    };
                    stmts.splice(at..at, out);
                });
            });
            cx.remark(
                RemarkKind::Applied,
                &f.name,
                Some(p.span),
                "the with-loop is a matrix product: it runs as the runtime's blocked product, each element in the order of its fold",
            );
        }
        cx.count("matrix_products", found.len() as u64);
    });
}

fn find(b: &Block, r: &Reader, found: &mut Vec<Product>) {
    for s in &b.stmts {
        if let Some(p) = product(s, r) {
            found.push(p);
            continue;
        }
        s.op.walk_blocks(&mut |inner| find(inner, r, found));
    }
}

/// `s` as a product, if it is one (see the module documentation).
fn product(s: &Stmt, r: &Reader) -> Option<Product> {
    let Op::With(w) = &s.op else { return None };
    let ([p], [WithOp::Genarray { shape, .. }]) = (w.parts.as_slice(), w.ops.as_slice()) else { return None };
    let result = *s.defs.first()?;
    let is_double_matrix = |v: ValueId| {
        let t = r.ty(v);
        t.elem == Elem::Base(BaseType::Double) && t.shape.rank_if_known() == Some(2)
    };
    if p.step.is_some() || p.width.is_some() || !is_double_matrix(result) {
        return None;
    }
    let frame = r.vector(*shape).filter(|v| v.len() == 2)?;
    let zeros = |v: ValueId| r.vector(v).is_some_and(|c| c.iter().all(|x| x.as_const() == Some(0)));
    if !zeros(p.lower) || r.vector(p.upper)? != frame {
        return None;
    }
    let &[i, j] = p.scalars.as_deref()? else { return None };
    let (fold_stmt, pre) = p.body.stmts.split_last()?;
    if p.body.yields != fold_stmt.defs || !pre.iter().all(|t| index_only(t, r)) {
        return None;
    }
    let Op::With(fw) = &fold_stmt.op else { return None };
    let ([q], [WithOp::Fold { fun: FoldFn::Prim(Prim::Bin(BinOp::Add)), partial, neutral, fixpoint: None }]) =
        (fw.parts.as_slice(), fw.ops.as_slice())
    else {
        return None;
    };
    let zero = matches!(r.defs.def(*neutral), Some(Def::Const(Value::Scalar(Scalar::Double(x)))) if x.to_bits() == 0);
    if !partial.is_empty() || !zero || q.step.is_some() || q.width.is_some() || !zeros(q.lower) {
        return None;
    }
    let &[k] = q.scalars.as_deref()? else { return None };
    let upper = r.vector(q.upper).filter(|v| v.len() == 1)?;
    // The bound is computed again before the with-loop: from values defined
    // outside it only.
    let inside = defined_inside(s);
    if upper.iter().flat_map(|c| c.terms.keys()).any(|atom| inside.contains(&atom.value)) {
        return None;
    }
    let [y] = q.body.yields.as_slice() else { return None };
    let mut selections = Vec::new();
    let mut factors = None;
    for t in &q.body.stmts {
        match &t.op {
            Op::Prim { prim: Prim::Sel, args, checked: false, .. } if args.len() == 2 => {
                selections.push((t.defs[0], args[0], args[1]));
            }
            Op::Prim { prim: Prim::Bin(BinOp::Mul), args, .. } if t.defs == [*y] && args.len() == 2 => {
                factors = Some((args[0], args[1]));
            }
            _ if index_only(t, r) => {}
            _ => return None,
        }
    }
    let (x1, x2) = factors?;
    let read = |x: ValueId| selections.iter().find(|(d, ..)| *d == x).map(|&(_, iv, arr)| (iv, arr));
    let ((iv1, arr1), (iv2, arr2)) = (read(x1)?, read(x2)?);
    if selections.len() != 2 || r.ty(*y).elem != Elem::Base(BaseType::Double) {
        return None;
    }
    let scalar = |v: ValueId| Affine::atom(Atom { value: v, component: None });
    let at = |iv: ValueId, rows: ValueId, cols: ValueId| r.vector(iv) == Some(vec![scalar(rows), scalar(cols)]);
    // `a[i, k] * b[k, j]` or `b[k, j] * a[i, k]`: the same multiply-add.
    let (a, b) = if at(iv1, i, k) && at(iv2, k, j) {
        (arr1, arr2)
    } else if at(iv2, i, k) && at(iv1, k, j) {
        (arr2, arr1)
    } else {
        return None;
    };
    if !is_double_matrix(a) || !is_double_matrix(b) || inside.contains(&a) || inside.contains(&b) {
        return None;
    }
    let known_extents = frame.iter().chain(&upper).all(|e| e.as_const().is_some());
    Some(Product { result, a, b, frame: *shape, upper, known_extents, span: s.blame_span().unwrap_or(s.span) })
}

/// Index arithmetic (or a scalar constant): a constant, an array of ints,
/// or a primitive without effects on ints.
fn index_only(t: &Stmt, r: &Reader) -> bool {
    let ints = |v: &ValueId| r.ty(*v).elem == Elem::Base(BaseType::Int);
    match &t.op {
        Op::Const(_) => t.defs.iter().all(|d| r.ty(*d).shape.is_scalar() || ints(d)),
        Op::Array(elems) => elems.iter().all(ints),
        Op::Prim { prim, .. } => !prim.has_effect() && t.defs.iter().all(ints),
        _ => false,
    }
}

/// The values a statement binds and its nested blocks define.
fn defined_inside(s: &Stmt) -> HashSet<ValueId> {
    let mut inside: HashSet<ValueId> = s.op.bound_values().into_iter().collect();
    s.op.walk_blocks(&mut |b| inside.extend(util::defined_in(b)));
    inside
}

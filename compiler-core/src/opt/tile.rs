//! # tile: register tiles for folds inside two-dimensional with-loops
//!
//! Matrix multiplication written as SaC writes it (`c[i, j] = fold(+, 0,
//! a[i, k] * b[k, j])`) computes each element's fold on its own. `interchange`
//! turns that into row updates (vectorised, but every step loads and stores a
//! row of the result); what fast matrix code does instead is keep a small
//! block of results — a *register tile*, say 4 rows by 32 columns — in
//! registers while `k` runs, so every value of `a` and `b` read is used by
//! several multiply-adds and nothing is stored until the tile is done.
//!
//! This pass makes that decision on the IR and leaves its execution to code
//! generation: it gives the with-loop's part the generator `step` = `width` =
//! the tile (`[1, …, 1, rows, cols]`), which covers exactly the same indices.
//! The code generator then runs every *full* tile of such a part as one loop
//! over the fold's index with `rows × cols` accumulators (a jammed loop that
//! LLVM's SLP vectoriser turns into vector registers), and the partial tiles
//! at the edges as narrower tiles of one row (or index by index).
//!
//! ```text
//! c = with {                                 c = with {
//!   part [0,0] <= [i,j] < [m,n] {      ⇒       part [0,0] <= [i,j] < [m,n] step [4,32] width [4,32] {
//!     x = with { [0] <= [k] < [l] :              …the same body…
//!           a[i,k] * b[k,j] } fold(+, 0.0)     }
//!     yield x                                } genarray([m,n])
//!   }
//! } genarray([m,n])
//! ```
//!
//! Every element still folds its values in the order of `k`, from the neutral
//! element: the results are exactly those of the untiled code. Only the order
//! in which different elements are computed changes, so — as for
//! `interchange`, which the tiled with-loop no longer qualifies for — the body
//! must not fail or print.
//!
//! The tile comes with the pipeline's options (`register_tile`): the driver
//! asks the code generator for one that suits the target (a tile of doubles
//! only pays where there are enough vector registers for it: 4x32 with
//! AVX-512, 4x8 with AVX2; a tile that spills is much slower than
//! `interchange`'s rows). Without one, the pass does nothing.
//!
//! Limits: the elements must be `double`s; the fold's body must be
//! straight-line (no with-loops, loops, conditionals or calls) and at most
//! [`MAX_FOLD_BODY`] statements; the part's statements other than the fold,
//! and the fold's body, may build index vectors only to select with them
//! (index vector elimination removes those; the code generator tiles only
//! bodies of scalars); the frame's last two extents must be at least the
//! tile's when they are known.

use super::index::{self, Reader};
use super::interchange;
use super::util;
use super::{Pass, PassCx, RemarkKind};
use crate::interp::value::Value;
use crate::ir::*;
use crate::sema::hir::Elem;
use crate::syntax::ast::BaseType;

pub const PASS: Pass = Pass {
    name: "tile",
    description: "a fold inside a 2-D with-loop runs in register tiles: blocks of results stay in registers",
    run,
};

/// The most statements a tiled fold's body may have (it is copied once per
/// element of the tile).
pub const MAX_FOLD_BODY: usize = 16;

fn run(m: &mut Module, cx: &mut PassCx) {
    let Some([rows, cols]) = cx.options.register_tile else { return };
    cx.each_function(m, |f, cx| {
        let targets = {
            let defs = index::defs(f);
            let reader = Reader::new(f, &defs);
            let mut found = Vec::new();
            find(&f.body, &reader, [rows, cols], &mut found);
            found
        };
        for (result, span) in &targets {
            util::with_body(f, |f, body| {
                interchange::edit(body, *result, &mut |stmts: &mut Vec<Stmt>, at: usize| {
                    let Op::With(w) = &stmts[at].op else { return };
                    let Some(n) = crate::sema::prim_ty::vector_len(f.ty(w.parts[0].lower)) else { return };
                    let mut tile = vec![1i64; n];
                    tile[n - 2] = rows;
                    tile[n - 1] = cols;
                    let mut out = Vec::new();
                    let step = util::emit_const(f, &mut out, Value::int_vector(&tile), *span);
                    if let Op::With(w) = &mut stmts[at].op {
                        w.parts[0].step = Some(step);
                        w.parts[0].width = Some(step);
                    }
                    stmts.splice(at..at, out);
                });
            });
            cx.remark(
                RemarkKind::Applied,
                &f.name,
                Some(*span),
                format!("the fold runs in register tiles of {rows}x{cols} results, each in the order of its fold"),
            );
        }
        cx.count("folds_tiled", targets.len() as u64);
    });
}

fn find(b: &Block, r: &Reader, tile: [i64; 2], found: &mut Vec<(ValueId, crate::span::Span)>) {
    for s in &b.stmts {
        if tileable(s, r, tile) {
            found.push((s.defs[0], s.blame_span().unwrap_or(s.span)));
            continue;
        }
        s.op.walk_blocks(&mut |inner| find(inner, r, tile, found));
    }
}

/// Whether `s` is a with-loop `interchange` would take whose fold suits a
/// register tile.
fn tileable(s: &Stmt, r: &Reader, [rows, cols]: [i64; 2]) -> bool {
    if interchange::qualifies(s, r).is_none() {
        return false;
    }
    let Op::With(w) = &s.op else { return false };
    let ([p], [WithOp::Genarray { shape, .. }]) = (w.parts.as_slice(), w.ops.as_slice()) else { return false };
    let Some(frame) = r.vector(*shape) else { return false };
    let n = frame.len();
    if n < 2 || [(n - 2, rows), (n - 1, cols)].iter().any(|(d, t)| frame[*d].as_const().is_some_and(|e| e < *t)) {
        return false;
    }
    let Some(fold_stmt) = p.body.stmts.last() else { return false };
    let Op::With(fw) = &fold_stmt.op else { return false };
    let [q] = fw.parts.as_slice() else { return false };
    if r.ty(fold_stmt.defs[0]).elem != Elem::Base(BaseType::Double) || q.body.stmts.len() > MAX_FOLD_BODY {
        return false;
    }
    let pre = &p.body.stmts[..p.body.stmts.len() - 1];
    pre.iter().chain(&q.body.stmts).all(|t| straight_scalar(t, r))
}

/// A statement of a tileable body: a constant or primitive whose results are
/// scalars, or an index vector built for selections.
fn straight_scalar(t: &Stmt, r: &Reader) -> bool {
    match &t.op {
        Op::Const(_) => t.defs.iter().all(|d| r.ty(*d).shape.is_scalar()),
        Op::Prim { prim, .. } => !prim.has_effect() && t.defs.iter().all(|d| r.ty(*d).shape.is_scalar()),
        Op::Array(elems) => elems.iter().all(|e| r.ty(*e).shape.is_scalar()),
        _ => false,
    }
}

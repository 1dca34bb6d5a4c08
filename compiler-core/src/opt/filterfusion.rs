//! # filterfusion: a filter fused into the fold or filter that consumes it
//!
//! A `filter` with-loop's result has a length known only once it has run, so
//! with-loop folding (which maps consumer indices to producer indices) cannot
//! fold it. When the only reader is a with-loop over exactly the filter's
//! result (`[0] .. shape(F)`) that uses its index only to select `F`'s
//! elements, the consumer runs over the filter's index set instead, its body
//! guarded by the filter's flag (seed 004 §7.1: filter–reduce and
//! filter–filter fusion):
//!
//! ```text
//! %f = with { part [0] .. %n index %i { … yield %keep, %x } } filter(%n)
//! %m = prim shape(%f)
//! %s = with { part [0] .. %m index %j {              %s = with { part [0] .. %n index %i {
//!        %e = prim sel(%j, %f)               ⇒              … %r = if %keep { …(%x) yield %y }
//!        … yield %y } } fold(prim add, %z)                           else { yield %z }
//!                                                             yield %r } } fold(prim add, %z)
//! ```
//!
//! A fold then combines its neutral element for every dropped element (which
//! changes nothing, the neutral element being neutral — as L0's `reduce` and
//! SaC's `fold` require); a filter keeps an element when both flags are true
//! (the second computed only for kept elements, like the thesis's `if c1 then c2
//! else False`). The consumer's body runs only for kept elements, so it fails
//! where it failed before.
//!
//! Limits: one part each, dense, in one block; scalar elements; the consumer's
//! index used for nothing but `sel(…, F)`; `F` (and its `shape`) read by that
//! consumer only; the fold a primitive operator whose neutral element is a
//! constant right identity of it (`+` 0, `*` 1, …): any other (`reduce(op +,
//! 64, …)`, a variable, `%` 1000, a function) is not fused, so a program
//! breaking the contract still computes what the interpreter computes.

use crate::HashSet;

use super::util::{self, Cloner};
use super::{Pass, PassCx, RemarkKind};
use crate::interp::value::{Scalar, Value};
use crate::ir::*;
use crate::sema::hir::{Elem, Prim};
use crate::span::Span;

pub const PASS: Pass = Pass {
    name: "filterfusion",
    description: "a filter's result read by one fold or filter: one loop over the filter's index set",
    run,
};

/// Fusions per function and run (a guard).
const MAX_FUSIONS: usize = 64;

fn run(m: &mut Module, cx: &mut PassCx) {
    cx.each_function(m, |f, cx| {
        let mut n = 0;
        while n < MAX_FUSIONS {
            let Some(t) = find(f) else { break };
            let span = t.span;
            util::with_body(f, |f, body| apply(f, body, &t));
            n += 1;
            let name = f.name.clone();
            cx.remark(RemarkKind::Applied, &name, Some(span), "fused a filter into this with-loop");
        }
        cx.count("filters_fused", n as u64);
    });
}

/// A filter `producer` and the with-loop `consumer` reading it.
struct Target {
    producer: ValueId,
    consumer: ValueId,
    /// The consumer's selections of the producer's elements.
    sels: HashSet<ValueId>,
    /// Index vectors built from the consumer's index for those selections.
    index_arrays: HashSet<ValueId>,
    span: Span,
}

fn find(f: &Function) -> Option<Target> {
    let uses = util::use_counts(f);
    let consts = util::constants(f);
    find_block(f, &f.body, &uses, &consts)
}

fn find_block(f: &Function, b: &Block, uses: &[u32], consts: &crate::HashMap<ValueId, Value>) -> Option<Target> {
    if let Some(t) = find_in(f, b, uses, consts) {
        return Some(t);
    }
    let mut found = None;
    for s in &b.stmts {
        s.op.walk_blocks(&mut |inner| {
            if found.is_none() {
                found = find_block(f, inner, uses, consts);
            }
        });
        if found.is_some() {
            break;
        }
    }
    found
}

fn find_in(f: &Function, b: &Block, uses: &[u32], consts: &crate::HashMap<ValueId, Value>) -> Option<Target> {
    for (i, s) in b.stmts.iter().enumerate() {
        let Op::With(w) = &s.op else { continue };
        if !matches!(w.ops[..], [WithOp::Filter { .. }]) || !single_dense(w) {
            continue;
        }
        let producer = s.defs[0];
        if f.ty(producer).shape.rank_if_known() != Some(1) {
            continue;
        }
        // `shape(F)` statements: the consumer's bounds.
        let shapes: Vec<ValueId> = b.stmts[i + 1..]
            .iter()
            .filter(|t| matches!(&t.op, Op::Prim { prim: Prim::Shape, args, .. } if args[0] == producer))
            .map(|t| t.defs[0])
            .collect();
        for c in &b.stmts[i + 1..] {
            if let Some(t) = consumer(f, c, producer, &shapes, uses, consts) {
                return Some(t);
            }
        }
    }
    None
}

fn single_dense(w: &With) -> bool {
    matches!(&w.parts[..], [p] if p.step.is_none() && p.width.is_none() && p.offset.is_none())
}

fn consumer(
    f: &Function,
    c: &Stmt,
    producer: ValueId,
    shapes: &[ValueId],
    uses: &[u32],
    consts: &crate::HashMap<ValueId, Value>,
) -> Option<Target> {
    let Op::With(w) = &c.op else { return None };
    let fold_or_filter = matches!(w.ops[..], [WithOp::Fold { .. }] | [WithOp::Filter { .. }]);
    if !fold_or_filter || !single_dense(w) {
        return None;
    }
    if let [WithOp::Fold { fun, neutral, .. }] = &w.ops[..] {
        let identity = match fun {
            FoldFn::Prim(Prim::Bin(op)) => consts.get(neutral).is_some_and(|z| acts_as_identity(*op, z)),
            _ => false,
        };
        if !identity {
            return None;
        }
    }
    let p = &w.parts[0];
    let zero = consts.get(&p.lower).and_then(util::int_vec).is_some_and(|v| v == [0]);
    if !zero || !shapes.contains(&p.upper) {
        return None;
    }
    // The shape is read by this consumer only (its bounds, a filter's frame).
    let in_consumer = util::free_uses(c);
    let operand_uses = c.op.operands().iter().filter(|v| **v == p.upper).count();
    if uses[p.upper.0 as usize] as usize != operand_uses || !in_consumer.contains(&p.upper) {
        return None;
    }
    // The index is used only to select elements of the producer.
    let mut index_vals: HashSet<ValueId> = p.index.into_iter().chain(p.scalars.iter().flatten().copied()).collect();
    let mut index_arrays = HashSet::default();
    let mut sels = HashSet::default();
    for t in &p.body.stmts {
        match &t.op {
            Op::Array(a) if a.len() == 1 && p.scalars.as_ref().is_some_and(|s| s[0] == a[0]) => {
                index_arrays.insert(t.defs[0]);
                index_vals.insert(t.defs[0]);
            }
            Op::Prim { prim: Prim::Sel, args, .. } if args[1] == producer && index_vals.contains(&args[0]) => {
                if !f.ty(t.defs[0]).shape.is_scalar() {
                    return None;
                }
                sels.insert(t.defs[0]);
            }
            _ => {
                if util::free_uses(t).iter().any(|v| index_vals.contains(v) || *v == producer) {
                    return None;
                }
            }
        }
    }
    if sels.is_empty() || p.body.yields.iter().any(|y| index_vals.contains(y) || *y == producer) {
        return None;
    }
    // Nothing else reads the producer.
    let shape_uses = shapes.len();
    if uses[producer.0 as usize] as usize != sels.len() + shape_uses {
        return None;
    }
    // A fused filter needs a placeholder element for dropped ones.
    if let [WithOp::Filter { .. }] = w.ops[..] {
        let v = p.body.yields[1];
        if !f.ty(v).shape.is_scalar() || !matches!(f.ty(v).elem, Elem::Base(_)) {
            return None;
        }
    }
    Some(Target { producer, consumer: c.defs[0], sels, index_arrays, span: c.blame_span().unwrap_or(c.span) })
}

/// Whether folding `z` into an accumulator leaves it unchanged: `z` is a
/// right identity of the operator (`+`/`-` 0, `*`/`/` 1, `|`/`^`/shifts 0 on
/// integers, `||` false, `&&` true). The fused fold combines the neutral element for
/// every dropped element; a program whose "neutral" element is not one (L0's
/// `reduce(op +, 64, …)`, `reduce(op /, 0, …)`) breaks the contract of
/// `reduce` and `fold`, and is left unfused so it computes what the
/// interpreter computes (it gave 64 more per dropped element, or divided by
/// zero).
fn acts_as_identity(op: crate::interp::ops::BinOp, z: &Value) -> bool {
    use crate::interp::ops::BinOp::*;
    let Value::Scalar(z) = z else { return false };
    // `acc op z == acc` for every accumulator: the right identities, exactly
    // (a few probes once let `x % 1000` pass, which changes 3000).
    let (zero, one) = match *z {
        Scalar::Int(_, v) => (v == 0, v == 1),
        Scalar::Float(v) => (v == 0.0, v == 1.0),
        Scalar::Double(v) => (v == 0.0, v == 1.0),
        Scalar::Bool(b) => return matches!((op, b), (Or | BitOr | BitXor, false) | (And | BitAnd, true)),
        Scalar::Char(_) => return false,
    };
    let int = matches!(z, Scalar::Int(..));
    match op {
        // `acc + 0.0` is `acc` (never -0.0: the accumulator starts at 0.0).
        Add | Sub => zero,
        Mul | Div => one,
        BitOr | BitXor | Shl | Shr => int && zero,
        _ => false,
    }
}

fn apply(f: &mut Function, body: &mut Block, t: &Target) {
    let Some(prod) = find_with(body, t.producer) else { return };
    edit(body, t.consumer, f, &mut |f, s| {
        let Op::With(w) = &mut s.op else { return };
        let span = s.span;
        let cons_part = w.parts[0].clone();
        // The producer's part, fresh.
        let mut cl = Cloner::default();
        let ppart = &prod.parts[0];
        let index = ppart.index.map(|i| fresh(f, &mut cl, i));
        let scalars = ppart.scalars.as_ref().map(|ss| ss.iter().map(|x| fresh(f, &mut cl, *x)).collect());
        let pbody = cl.block(f, &ppart.body);
        let (keep, elem) = (pbody.yields[0], pbody.yields[1]);
        // The consumer's body without the selections, which become the element.
        let mut cbody = cons_part.body.clone();
        cbody.stmts.retain(|x| !x.defs.iter().any(|d| t.sels.contains(d) || t.index_arrays.contains(d)));
        let mut cl2 = Cloner::default();
        for sel in &t.sels {
            cl2.map.insert(*sel, elem);
        }
        let then_block = cl2.block(f, &cbody);
        let mut else_block = Block::default();
        let mut stmts = pbody.stmts;
        let yields = match &w.ops[0] {
            WithOp::Fold { neutral, .. } => {
                else_block.yields.push(*neutral);
                let r = f.new_value(f.ty(then_block.yields[0]).clone(), None);
                stmts.push(Stmt::new(vec![r], Op::If { cond: keep, then_block, else_block }, span));
                vec![r]
            }
            WithOp::Filter { .. } => {
                let v = then_block.yields[1];
                let Elem::Base(base) = f.ty(v).elem else { return };
                let no = util::emit_const(f, &mut else_block.stmts, Value::Scalar(Scalar::Bool(false)), span);
                let zero = util::emit_const(f, &mut else_block.stmts, Value::Scalar(Scalar::zero(base)), span);
                else_block.yields = vec![no, zero];
                let kept = f.new_value(util::bool_ty(), None);
                let r = f.new_value(f.ty(v).clone(), None);
                stmts.push(Stmt::new(vec![kept, r], Op::If { cond: keep, then_block, else_block }, span));
                vec![kept, r]
            }
            _ => return,
        };
        if let WithOp::Filter { shape } = &mut w.ops[0] {
            let WithOp::Filter { shape: pshape } = prod.ops[0] else { return };
            *shape = pshape;
        }
        w.parts[0] = Part {
            lower: ppart.lower,
            upper: ppart.upper,
            step: None,
            width: None,
            index,
            scalars,
            offset: None,
            body: Block { stmts, yields },
            span: cons_part.span,
            result_spans: cons_part.result_spans.clone(),
        };
    });
}

/// Calls `g` on the statement defining `def`.
fn edit(b: &mut Block, def: ValueId, f: &mut Function, g: &mut dyn FnMut(&mut Function, &mut Stmt)) -> bool {
    for s in &mut b.stmts {
        if s.defs.first() == Some(&def) {
            g(f, s);
            return true;
        }
        let mut done = false;
        s.op.walk_blocks_mut(&mut |inner| {
            if !done {
                done = edit(inner, def, f, g);
            }
        });
        if done {
            return true;
        }
    }
    false
}

fn fresh(f: &mut Function, cl: &mut Cloner, v: ValueId) -> ValueId {
    let d = f.values[v.0 as usize].clone();
    let n = f.new_value(d.ty, d.name);
    cl.map.insert(v, n);
    n
}

fn find_with(b: &Block, def: ValueId) -> Option<With> {
    let mut found = None;
    b.walk(&mut |s| {
        if found.is_none()
            && s.defs.first() == Some(&def)
            && let Op::With(w) = &s.op
        {
            found = Some((**w).clone());
        }
    });
    found
}

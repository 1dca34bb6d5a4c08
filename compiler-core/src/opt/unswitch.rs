//! # unswitch: a branch in a loop decided once, by shapes the loop keeps
//!
//! `version` splits a generic loop body into a fast path for extents above a
//! threshold and the original code (`if %c { … } else { call …original1 }`).
//! Its condition reads only the extents of the array the loop carries, and
//! the fast path yields an array of that same shape, so once the condition
//! holds it holds for every later iteration. This pass decides it before the
//! loop: where it holds, a copy of the loop without the branch runs (its
//! body is the fast path alone, so later passes see a plain loop of one
//! with-loop, which `timetile` can mark); elsewhere the original loop runs,
//! moved into a cold function of its own.
//!
//! ```text
//! %r = loop while init(%a0) params(%a) {     %s0 = prim shape(%a0)
//!   %s = prim shape(%a)                      %c0 = (the condition, of %s0)
//!   %c = (a condition of %s)           ⇒     %r = if %c0 {
//!   %x = if %c {                               loop while init(%a0) params(%a') {
//!     %y = with { … } genarray(%s, 0.0)          %s' = prim shape(%a')
//!     yield %y                                   %y' = with { … } genarray(%s', 0.0)
//!   } else {                                     yield %y'
//!     %z = call f__original1(%a)               }
//!     yield %z                               } else {
//!   }                                          call f__unswitched1(%a0)   (the original loop, cold)
//!   yield %x                                 }
//! }
//! ```
//!
//! Why it is right: the condition in iteration `i` is the condition of the
//! shape of the carried array there; in the copy every iteration yields an
//! array shaped like the one it got (`util::shaped_like`), so that shape is
//! the initial value's in every iteration, and the condition is the one
//! computed before the loop. The statements computing it cannot fail and
//! have no effect (shapes, their components, comparisons), so computing
//! them once more before a loop that may not run changes nothing.
//!
//! Limits: a branch at the top level of the loop body whose `else` is a
//! call of original code `version` moved out (a cold function), its condition
//! computed at the top level from values defined outside the loop, the
//! shapes (and ranks) of carried arrays that the copy keeps, and carried
//! values no iteration changes; one branch per loop and round; the original
//! loop must be movable into a function (nothing in it blamed on the
//! enclosing function's caller).

use std::collections::BTreeSet;

use crate::{HashMap, HashSet};

use super::util::{self, Cloner};
use super::{Pass, PassCx, RemarkKind, index, licm, version};
use crate::ir::*;
use crate::sema::hir::Prim;
use crate::span::Span;

pub const PASS: Pass = Pass {
    name: "unswitch",
    description: "a branch in a loop whose condition reads only shapes the loop keeps is decided once, before the loop",
    run,
};

fn run(m: &mut Module, cx: &mut PassCx) {
    let mut outlined: Vec<Function> = Vec::new();
    let mut names: HashSet<String> = m.functions.iter().map(|g| g.name.clone()).collect();
    for i in 0..m.functions.len() {
        // The original loops moved out are not unswitched again.
        if m.functions[i].cold {
            continue;
        }
        let mut has_loop_branch = false;
        m.functions[i].body.walk(&mut |s| {
            if let Op::Loop { body, .. } = &s.op {
                has_loop_branch |= body.stmts.iter().any(|t| matches!(t.op, Op::If { .. }));
            }
        });
        if !has_loop_branch {
            continue;
        }
        let first_id = (m.functions.len() + outlined.len()) as u32;
        let cold: HashSet<FuncId> =
            (0..m.functions.len()).filter(|&k| m.functions[k].cold).map(|k| FuncId(k as u32)).collect();
        let f = &mut m.functions[i];
        let defs = index::defs(f);
        let consts = util::constants(f);
        let mut cx_f = Outlined { first_id, cold, functions: Vec::new(), done: Vec::new(), names: &mut names };
        util::with_body(f, |f, body| visit(f, &defs, &consts, body, &mut cx_f));
        let name = f.name.clone();
        for span in &cx_f.done {
            cx.remark(
                RemarkKind::Applied,
                &name,
                Some(*span),
                "a branch in this loop is decided before it: its condition reads only shapes the loop keeps, so the loop \
                 runs without it where it holds (the original loop elsewhere)",
            );
        }
        cx.count("loops_unswitched", cx_f.done.len() as u64);
        if !cx_f.done.is_empty() {
            cx.changed_function(&name);
        }
        outlined.extend(cx_f.functions);
    }
    m.functions.extend(outlined);
}

/// The original loops moved into cold functions (numbered from `first_id`
/// as they will be added), and where loops were unswitched.
struct Outlined<'a> {
    first_id: u32,
    /// The module's function names, those of `functions` included.
    names: &'a mut HashSet<String>,
    /// The module's cold functions (the original code `version` moved out).
    cold: HashSet<FuncId>,
    functions: Vec<Function>,
    done: Vec<Span>,
}

type Consts = HashMap<ValueId, crate::interp::value::Value>;

/// Unswitches the loops of `b`, or else looks inside them.
fn visit(f: &mut Function, defs: &HashMap<ValueId, index::Def>, consts: &Consts, b: &mut Block, out: &mut Outlined) {
    let mut j = 0;
    while j < b.stmts.len() {
        if matches!(b.stmts[j].op, Op::Loop { .. })
            && let Some((guard, stmt)) = unswitch(f, defs, consts, &b.stmts[j], &b.stmts[..j], out)
        {
            out.done.push(b.stmts[j].span);
            let n = guard.len();
            b.stmts.splice(j..=j, guard.into_iter().chain(std::iter::once(stmt)));
            j += n + 1;
            continue;
        }
        b.stmts[j].op.walk_blocks_mut(&mut |inner| visit(f, defs, consts, inner, out));
        j += 1;
    }
}

/// The statements that compute the guard before the loop `s`, and what
/// replaces `s`: `if guard { loop without the branch } else { call of the
/// original loop }`. `before`: the statements before `s` in its block.
fn unswitch(
    f: &mut Function,
    defs: &HashMap<ValueId, index::Def>,
    consts: &Consts,
    s: &Stmt,
    before: &[Stmt],
    out: &mut Outlined,
) -> Option<(Vec<Stmt>, Stmt)> {
    let Op::Loop { init, params, body, .. } = &s.op else { return None };
    let position: HashMap<ValueId, usize> =
        body.stmts.iter().enumerate().flat_map(|(i, t)| t.defs.iter().map(move |d| (*d, i))).collect();
    let param_index = |v: ValueId| params.iter().position(|p| *p == v);
    for (j, t) in body.stmts.iter().enumerate() {
        // A fast path beside the original code, which runs rarely (`version`'s
        // split): the loop of the fast path is the one worth having.
        let Op::If { cond, then_block, else_block } = &t.op else { continue };
        let rare = matches!(else_block.stmts.as_slice(), [c] if matches!(&c.op, Op::Call { func, .. } if out.cold.contains(func)));
        if !rare {
            continue;
        }
        let Some(slice) = condition_slice(f, consts, body, &position, &param_index, *cond, j) else { continue };
        // The loop with the branch replaced by its `then` block.
        let mut fast = s.clone();
        let Op::Loop { body: fast_body, .. } = &mut fast.op else { unreachable!() };
        let rename: HashMap<ValueId, ValueId> = t.defs.iter().copied().zip(then_block.yields.iter().copied()).collect();
        let rest: Vec<Stmt> = fast_body.stmts.drain(j..).skip(1).collect();
        fast_body.stmts.extend(then_block.stmts.iter().cloned());
        fast_body.stmts.extend(rest);
        // Uses of the branch's results, nested ones too, read its `then` yields.
        util::substitute(fast_body, &rename);
        // The shapes the condition reads stay the initial values' in the copy.
        let body_defs = util::block_defs(fast_body);
        let reader = index::Reader::new(f, defs);
        let keeps =
            slice.shapes_of.iter().all(|&k| keeps_shape(f, &reader, &body_defs, fast_body.yields[k], params[k]));
        let unchanged = slice.unchanged.iter().all(|&k| fast_body.yields[k] == params[k]);

        if !keeps || !unchanged {
            continue;
        }
        // The original loop, moved out (cold); without that, nothing changes.
        let id = FuncId(out.first_id + out.functions.len() as u32);
        let name = util::fresh_function_name(out.names, &format!("{}__unswitched", f.name));
        let original = Block { stmts: vec![s.clone()], yields: s.defs.clone() };
        let (g, call) = version::outline(f, &original, before, defs, id, name, s.span)?;
        out.functions.push(g);
        // The guard: the condition's statements on the initial values.
        let mut cl = Cloner::default();
        for &k in slice.shapes_of.iter().chain(&slice.unchanged) {
            cl.map.insert(params[k], init[k]);
        }
        let guard: Vec<Stmt> = slice.stmts.iter().map(|&i| cl.stmt(f, &body.stmts[i])).collect();
        let guard_value = cl.map.get(cond).copied().unwrap_or(*cond);
        // In the copy, a kept shape is the initial value's throughout: its
        // `shape(p)` reads the guard's `shape(init)`, so what the guard
        // establishes (`m >= 3`) speaks of the extents the body uses.
        let mut initial_shape: HashMap<ValueId, ValueId> = HashMap::default();
        for &i in &slice.stmts {
            if let Op::Prim { prim: Prim::Shape, args, .. } = &body.stmts[i].op
                && let Some(k) = param_index(args[0])
                && slice.shapes_of.contains(&k)
            {
                initial_shape.insert(args[0], cl.map[&body.stmts[i].defs[0]]);
            }
        }
        let mut reads_initial: HashMap<ValueId, ValueId> = HashMap::default();
        fast_body.walk(&mut |t| {
            if let Op::Prim { prim: Prim::Shape, args, .. } = &t.op
                && let Some(&g) = initial_shape.get(&args[0])
            {
                reads_initial.insert(t.defs[0], g);
            }
        });
        util::substitute(fast_body, &reads_initial);
        // The copy gets values of its own (the original is in the cold function now).
        let fast = Cloner::default().stmt(f, &fast);
        let then_block = Block { yields: fast.defs.clone(), stmts: vec![fast] };
        let stmt = Stmt {
            defs: s.defs.clone(),
            op: Op::If { cond: guard_value, then_block, else_block: call },
            span: s.span,
            blame: s.blame,
        };
        return Some((guard, stmt));
    }
    None
}

/// Whether `y`, what a loop body (`defs`: its statements) yields for the
/// carried array `p`, has `p`'s shape: it is made from `p` by operations
/// that keep shapes ([`util::shaped_like`]), or it is a `genarray` of scalar
/// cells over the extents of `shape(p)`, computed otherwise
/// ([`util::genarray_of_extents`]).
fn keeps_shape(
    f: &Function,
    reader: &index::Reader,
    defs: &HashMap<ValueId, (&Stmt, usize)>,
    y: ValueId,
    p: ValueId,
) -> bool {
    util::shaped_like(f, defs, y, p, None)
        || defs.values().any(|(s, _)| {
            matches!(&s.op, Op::Prim { prim: Prim::Shape, args, .. } if args[0] == p)
                && reader.vector(s.defs[0]).is_some_and(|e| util::genarray_of_extents(f, reader, defs, y, &e).is_some())
        })
}

/// The statements of a loop body that compute a branch's condition.
struct Slice {
    /// Their positions in the body, in order.
    stmts: Vec<usize>,
    /// Carried values whose shape (or rank) they read.
    shapes_of: BTreeSet<usize>,
    /// Carried values they read as they are.
    unchanged: BTreeSet<usize>,
}

/// The statements before position `j` of `body` that `cond` depends on,
/// when they can neither fail nor have an effect and read of the loop's
/// carried values only shapes, ranks and values no iteration changes
/// (checked by the caller) — else `None`.
fn condition_slice(
    f: &Function,
    consts: &Consts,
    body: &Block,
    position: &HashMap<ValueId, usize>,
    param_index: &dyn Fn(ValueId) -> Option<usize>,
    cond: ValueId,
    j: usize,
) -> Option<Slice> {
    let mut slice = Slice { stmts: Vec::new(), shapes_of: BTreeSet::new(), unchanged: BTreeSet::new() };
    let mut seen: BTreeSet<usize> = BTreeSet::new();
    let mut work = vec![cond];
    let nested = util::defined_in(body);
    while let Some(v) = work.pop() {
        if let Some(k) = param_index(v) {
            slice.unchanged.insert(k);
            continue;
        }
        let Some(&i) = position.get(&v) else {
            // Defined outside the loop (a value nested in the body is not one
            // of its top-level statements').
            if nested.contains(&v) {
                return None;
            }
            continue;
        };
        if i >= j {
            return None;
        }
        if !seen.insert(i) {
            continue;
        }
        let t = &body.stmts[i];
        let total = match &t.op {
            Op::Const(_) | Op::Array(_) => true,
            Op::Prim { prim: Prim::Sel | Prim::IdxSel, .. } => licm::component_of_vector(f, consts, &t.op),
            Op::Prim { prim, .. } => !util::prim_may_fail(prim) && !prim.has_effect(),
            _ => false,
        };
        if !total {
            return None;
        }
        match &t.op {
            Op::Prim { prim: Prim::Shape | Prim::Dim, args, .. } if param_index(args[0]).is_some() => {
                slice.shapes_of.insert(param_index(args[0])?);
            }
            op => work.extend(op.operands()),
        }
    }
    slice.stmts = seen.into_iter().collect();
    Some(slice)
}

#[cfg(test)]
mod tests {
    use crate::ir::{parse, print};
    use crate::opt::{self, PipelineOptions};
    use crate::span::{FileKind, SourceMap, Span};

    /// A generic loop whose body branches on its carried array's extents;
    /// the fast path yields an array of the array's shape (`FAST` stands for
    /// its `genarray` shape, `%5` keeps the shape).
    const LOOP: &str = "fn main(%0#a: double[.,.], %1#n: int) -> (double[.,.])  [instance main]
{
  %2: int = const 0
  %3: int = const 1
  %4: int = const 3
  %9: double = const 2.0
  %30: int[2] = const [0, 0]
  %20: double[.,.], %21: int = loop while init(%0, %2) params(%10#a: double[.,.], %11#k: int) cond {
    %12: bool = prim lt(%11, %1)
    yield %12
  } body {
    %5: int[2] = prim shape(%10)
    %6: int = prim idx_sel(%2, %5) unchecked
    %7: bool = prim ge(%6, %4)
    %13: double[.,.] = if %7 {
      %14: double[.,.] = with {
        part lower %30 upper FAST index %15: int[2] {
          %16: double = prim idx_sel(%15, %10) unchecked
          %17: double = prim mul(%16, %9)
          yield %17
        }
      } genarray(FAST, %9) cell double
      yield %14
    } else {
      %18: double[.,.] = call orig(%10)
      yield %18
    }
    %19: int = prim add(%11, %3)
    yield %13, %19
  }
  return %20
}

fn orig(%0#a: double[.,.]) -> (double[.,.])  [instance main, noinline, cold]
{
  %1: double = const 2.0
  %2: double[.,.] = prim mul(%0, %1)
  return %2
}

entry main = main
";

    fn unswitched(text: &str) -> (String, Vec<String>) {
        let mut sources = SourceMap::new();
        let file = sources.add("test.ir", text, FileKind::User);
        let mut m = parse::parse_module(text, Span::new(file, 0, 0)).expect("parses");
        let options = PipelineOptions { verify: true, ..PipelineOptions::only(&["unswitch"]) };
        let outcome = opt::optimise(&mut m, &sources, &options).expect("optimises");
        let text = print::module_text(&m);
        (text, outcome.remarks.iter().filter(|r| r.pass == "unswitch").map(|r| r.message.clone()).collect())
    }

    #[test]
    fn a_branch_on_kept_extents_is_decided_before_the_loop() {
        // A with-loop after the branch reads its result (the verifier checks
        // that the copy reads the `then` yield, nested uses included).
        let after = "    %22: double[.,.] = with {
      part lower %30 upper %5 index %23: int[2] {
        %24: double = prim sel(%23, %13) unchecked
        yield %24
      }
    } genarray(%5, %9) cell double
    %19: int = prim add(%11, %3)
    yield %22, %19";
        let text = LOOP.replace("FAST", "%5").replace("    %19: int = prim add(%11, %3)\n    yield %13, %19", after);
        assert!(text.contains("%22"));
        let (text, remarks) = unswitched(&text);
        assert_eq!(remarks.len(), 1, "{text}");
        // The guard reads the initial array's shape; the copy has no branch.
        assert!(text.contains("prim shape(%0)"), "{text}");
        let main = text.split("fn main__unswitched1").next().unwrap();
        assert_eq!(main.matches("loop while").count(), 1, "{main}");
        assert!(!main.contains("call orig") && main.contains("call main__unswitched1"), "{main}");
        // The original loop, branch and all, is a cold function.
        let cold = text.split("fn main__unswitched1").nth(1).expect("the original loop moved out");
        assert!(cold.contains("cold]") && cold.contains("loop while") && cold.contains("if %"), "{cold}");
    }

    #[test]
    fn a_branch_the_fast_path_may_change_is_left() {
        // The fast path's result has some other shape: the condition may
        // change from one iteration to the next.
        let other = LOOP.replace("FAST", "%8").replace(
            "    %7: bool = prim ge(%6, %4)\n",
            "    %7: bool = prim ge(%6, %4)\n    %8: int[2] = array [%6, %6]\n",
        );
        let (text, remarks) = unswitched(&other);
        assert!(remarks.is_empty() && !text.contains("unswitched"), "{text}");
        // A condition that reads the counter changes too.
        let counter = LOOP.replace("FAST", "%5").replace("prim ge(%6, %4)", "prim ge(%11, %4)");
        let (text, remarks) = unswitched(&counter);
        assert!(remarks.is_empty() && !text.contains("unswitched"), "{text}");
        // A branch whose other side is not original code moved out (cold)
        // is the program's own: both sides may run often.
        let plain = LOOP.replace("FAST", "%5").replace("noinline, cold]", "noinline]");
        let (text, remarks) = unswitched(&plain);
        assert!(remarks.is_empty() && !text.contains("unswitched"), "{text}");
    }
}

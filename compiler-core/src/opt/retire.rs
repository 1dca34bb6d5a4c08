//! # retire: specialisations that only dispatch still calls leave the dispatch
//!
//! A call-site specialisation (`Det(double[7,7])`, made for the recursive call
//! in `Det(double[8,8])`) is a dispatch target too: a generic caller that
//! meets a 7x7 matrix at run time runs it (seed 003: specialisations "should"
//! be dispatched). Once `inline` has copied every static call of it (the
//! unrolled 8x8 level holds it, where CSE shares the minors), the function
//! exists for the dispatch alone: behind a 10x10 hint, `Det(double[7,7])`
//! down to `[3,3]` were whole unrolled determinants optimised and compiled a
//! second time, half of the compile service's `det` (432 -> 218 ms without
//! them). This pass points such a function's dispatched calls at the declared
//! instance it narrows ([`Function::specialises`], which accepts every shape
//! it did) and removes it. Dispatched calls are a wrapper's arms and their
//! copies inlined elsewhere: `ir::lower` locates them at the callee's
//! declaration, where no call written in the source is.
//!
//! ```text
//! fn Det__wrapper(%0: double[*]) -> (double) {       fn Det__wrapper(%0: double[*]) -> (double) {
//!   …                                                   …
//!   %5: double = if %fits_7x7 {                         %5: double = if %fits_7x7 {
//!     %6: double = call Det__d_7_7(%0)         ⇒          %6: double = call Det__d_X_X(%0)
//!     yield %6                                            yield %6
//!   } else { … call Det__d_X_X(%0) … }                  } else { … call Det__d_X_X(%0) … }
//! }                                                   }
//! fn Det__d_7_7(…)  [specialises Det__d_X_X]        (removed: nothing else called it)
//! ```
//!
//! Kept as targets: hinted and exported instances, specialisations some
//! static call still calls (`Det(double[9,9])`, called from the 10x10
//! level's loop), specialisations used as fold functions, and those whose
//! declared instance's results would not fit where the call's go. Counter
//! `dispatch_targets_generalised`, a remark per function.
//!
//! Limits: a generic call at the shape of a retired specialisation runs the
//! generic code. Behind a 10x10 hint with `det` exported, a 7x7 determinant
//! through the generic entry took 0.32 ms instead of 0.004 (9x9 and 8x8 stay
//! targets); when the hinted chain is inlined into its only caller (`main`
//! exported alone), every level is retired and a 9x9 generic call runs the
//! generic code too. `--disable retire` keeps every specialisation a
//! dispatch target. IR read back from its text form has no spans, so every
//! call there looks dispatched: a specialisation's static calls then run the
//! declared instance too (slower, same results).

use crate::HashMap;

use super::{Pass, PassCx, RemarkKind};
use crate::ir::*;

pub const PASS: Pass = Pass {
    name: "retire",
    description: "call-site specialisations that only dispatch still calls stop being dispatch targets (their calls run the declared instance)",
    run,
};

fn run(m: &mut Module, cx: &mut PassCx) {
    let n = m.functions.len();
    let by_name: HashMap<&str, usize> = m.functions.iter().enumerate().map(|(i, f)| (f.name.as_str(), i)).collect();
    // Per function: the declared instance its calls go to instead, while
    // every use of it seen is a dispatched call.
    let mut general: Vec<Option<usize>> = m
        .functions
        .iter()
        .enumerate()
        .map(|(i, f)| f.specialises.as_deref().and_then(|g| by_name.get(g).copied()).filter(|g| *g != i))
        .collect();
    for (_, f) in &m.entries {
        general[f.0 as usize] = None;
    }
    for f in &m.variants {
        general[f.0 as usize] = None;
    }
    // Most programs have no such specialisation: no walk of every body each round.
    if general.iter().all(Option::is_none) {
        return;
    }
    let mut called = vec![false; n];
    for caller in &m.functions {
        caller.body.walk(&mut |s| match &s.op {
            Op::Call { func, .. } => {
                let g = func.0 as usize;
                called[g] = true;
                let Some(t) = general[g] else { return };
                let (callee, target) = (&m.functions[g], &m.functions[t]);
                // Dispatch arms call at the callee's declaration (`ir::lower`),
                // calls written in the source at the call.
                let dispatched = s.span == callee.span;
                // The declared instance's results must fit where the call's go.
                let fits = s.defs.len() == target.results.len()
                    && s.defs.iter().zip(&target.results).all(|(d, r)| r.subset_of(caller.ty(*d)));
                if !(dispatched && fits) {
                    general[g] = None;
                }
            }
            Op::With(w) => {
                for op in &w.ops {
                    if let WithOp::Fold { fun: FoldFn::Call(g) | FoldFn::Lane { func: g, .. }, .. }
                    | WithOp::Scan { fun: FoldFn::Call(g) | FoldFn::Lane { func: g, .. }, .. } = op
                    {
                        general[g.0 as usize] = None;
                    }
                }
            }
            _ => {}
        });
    }
    let retarget: Vec<Option<usize>> = general.iter().zip(&called).map(|(t, c)| t.filter(|_| *c)).collect();
    if retarget.iter().all(Option::is_none) {
        return;
    }
    let mut calls = vec![0u64; n];
    for f in &mut m.functions {
        let mut changed = false;
        f.body.walk_mut(&mut |s| {
            if let Op::Call { func, .. } = &mut s.op
                && let Some(t) = retarget[func.0 as usize]
            {
                calls[func.0 as usize] += 1;
                *func = FuncId(t as u32);
                changed = true;
            }
        });
        if changed {
            cx.changed_function(&f.name);
        }
    }
    for (g, t) in retarget.iter().enumerate() {
        let Some(t) = t else { continue };
        let (f, target) = (&m.functions[g], &m.functions[*t]);
        let plural = if calls[g] == 1 { "" } else { "s" };
        cx.remark(
            RemarkKind::Applied,
            &f.name,
            Some(f.span),
            format!(
                "`{}` is no longer a dispatch target: every static call of it was inlined; its {} dispatched call{plural} run `{}`",
                f.name, calls[g], target.name
            ),
        );
        cx.count("dispatch_targets_generalised", 1);
    }
    let removed = super::inline::remove_dead_functions(m);
    if removed > 0 {
        cx.removed_functions();
    }
    cx.count("functions_removed", removed as u64);
}

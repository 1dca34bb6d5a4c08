//! # merge: identical functions become one
//!
//! Functions that compute the same thing the same way — equal up to the
//! numbering of their values: same parameters and results, statements,
//! locations and names — are one function: calls of the others call it, and
//! the others are dropped. The typical case is a dispatch wrapper built twice:
//! once as an exported entry (`Det`, which every function of a file is when no
//! entry is named) and once for the calls in the program, each the same
//! dispatch chain; without merging, both were optimised and compiled.
//!
//! ```text
//! fn Det__wrapper_double(%0: double[*]) -> (double)  [wrapper Det]     fn Det__wrapper_double(…)  [wrapper Det]
//! { … dispatch … }                                                     { … dispatch … }
//! fn Det__wrapper_double__2(%0: double[*]) -> (double)  [wrapper Det] ⇒
//! { … the same dispatch … }                                            fn det__d_S(%0#a: double[*]) …
//! fn det__d_S(%0#a: double[*]) …                                       { %1 = call Det__wrapper_double(%0) … }
//! { %1 = call Det__wrapper_double__2(%0) … }
//! ```
//!
//! The function kept is an exported one where the group has one (its symbol
//! must exist), else the first. Constants compare by their text, so `0.0`
//! and `-0.0` differ (as numbers they are equal). Limits: functions that differ only in the
//! names of their variables, or that call different but identical functions,
//! stay apart (the latter merge a round later, once their callees have); two
//! exported functions are both kept.

use crate::HashMap;

use super::util::{self, Cloner};
use super::{Pass, PassCx};
use crate::ir::*;

pub const PASS: Pass = Pass { name: "merge", description: "identical functions merged into one", run };

fn run(m: &mut Module, cx: &mut PassCx) {
    let exported: Vec<bool> = (0..m.functions.len())
        .map(|i| {
            let id = FuncId(i as u32);
            m.entries.iter().any(|(_, f)| *f == id) || m.variants.contains(&id)
        })
        .collect();
    // Candidates share a signature and a size; only they are compared.
    let mut groups: HashMap<(String, usize), Vec<usize>> = HashMap::default();
    for (i, f) in m.functions.iter().enumerate() {
        groups.entry((signature(f), util::size(&f.body))).or_default().push(i);
    }
    let mut replace: HashMap<FuncId, FuncId> = HashMap::default();
    for members in groups.values().filter(|g| g.len() > 1) {
        let canon: Vec<(Function, Vec<String>)> = members
            .iter()
            .map(|&i| {
                let f = canonical(&m.functions[i]);
                let constants = constant_texts(&f);
                (f, constants)
            })
            .collect();
        let mut classes: Vec<Vec<usize>> = Vec::new();
        for (k, f) in canon.iter().enumerate() {
            match classes.iter_mut().find(|c| same(&canon[c[0]], f)) {
                Some(c) => c.push(k),
                None => classes.push(vec![k]),
            }
        }
        for class in classes.iter().filter(|c| c.len() > 1) {
            let ids: Vec<usize> = class.iter().map(|&k| members[k]).collect();
            let keep = ids.iter().copied().find(|&i| exported[i]).unwrap_or(ids[0]);
            for &i in ids.iter().filter(|&&i| i != keep && !exported[i]) {
                replace.insert(FuncId(i as u32), FuncId(keep as u32));
            }
        }
    }
    if replace.is_empty() {
        return;
    }
    let merged = replace.len();
    for f in &mut m.functions {
        let mut calls_changed = false;
        super::inline::remap_calls(&mut f.body, &mut |g| {
            let to = replace.get(&g).copied().unwrap_or(g);
            calls_changed |= to != g;
            to
        });
        if calls_changed {
            cx.changed_function(&f.name);
        }
    }
    // The merged-away functions are called no more.
    super::inline::remove_dead_functions(m);
    cx.removed_functions();
    cx.count("functions_merged", merged as u64);
}

/// What a function looks like from outside, as text.
fn signature(f: &Function) -> String {
    let params: Vec<String> = f.params.iter().map(|p| print::type_text(f.ty(*p))).collect();
    let results: Vec<String> = f.results.iter().map(print::type_text).collect();
    format!("{:?} {} ({}) -> ({})", f.kind, f.source_name, params.join(", "), results.join(", "))
}

/// `f` with its values numbered in the order they are defined (parameters
/// first), so two copies built apart compare equal.
fn canonical(f: &Function) -> Function {
    let mut out = Function {
        name: f.name.clone(),
        source_name: f.source_name.clone(),
        kind: f.kind,
        params: Vec::new(),
        results: f.results.clone(),
        body: Block::default(),
        values: Vec::new(),
        inline: f.inline,
        noinline: f.noinline,
        cold: f.cold,
        library: f.library,
        specialises: f.specialises.clone(),
        span: f.span,
    };
    let mut cloner = Cloner { src: Some(&f.values), map: HashMap::default() };
    for p in &f.params {
        let data = &f.values[p.0 as usize];
        let n = out.new_value(data.ty.clone(), data.name.clone());
        cloner.map.insert(*p, n);
        out.params.push(n);
    }
    out.body = cloner.block(&mut out, &f.body);
    out
}

/// Two canonical functions with their constants' texts.
fn same((a, a_constants): &(Function, Vec<String>), (b, b_constants): &(Function, Vec<String>)) -> bool {
    a.params == b.params
        && a.results == b.results
        && a.body == b.body
        && a_constants == b_constants
        && a.values == b.values
        && a.kind == b.kind
        && a.source_name == b.source_name
        && (a.inline, a.noinline, a.cold, a.library) == (b.inline, b.noinline, b.cold, b.library)
        && a.span == b.span
}

/// The function's constants as text, in order. Derived equality on a body
/// compares floats as numbers, so `0.0` equals `-0.0` (and `1.0 / x` gives
/// `inf` for one, `-inf` for the other); the text tells them apart.
fn constant_texts(f: &Function) -> Vec<String> {
    let mut out = Vec::new();
    f.body.walk(&mut |s| {
        if let Op::Const(c) = &s.op {
            out.push(print::const_text(c));
        }
    });
    out
}

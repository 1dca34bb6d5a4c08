//! The optimisation report: what the compiler made of a program, as JSON with a
//! stable schema ([`SCHEMA`]) and as text.
//!
//! ```json
//! {
//!   "schema": "withloop.optimisation-report/1",
//!   "file": "relax.sac",
//!   "variants": [{ "function": "relax", "params": ["double[5,6]"], "results": ["double[5,6]"],
//!                  "symbol": "relax__d_5_6", "c_symbol": "wl_relax__d_5_6", "reason": "call_site",
//!                  "at": { "file": "relax.sac", "line": 40, "column": 12 }, "library": false }],
//!   "stages": [{ "name": "array", "rounds": 4 }],
//!   "passes": [{ "name": "wlf", "description": "…", "enabled": true, "runs": 4,
//!                "time_us": 812, "counters": { "with_loops_folded": 14 } }],
//!   "totals": { "with_loops_folded": 14, "functions_specialised": 3 },
//!   "remarks": [{ "pass": "wlf", "kind": "applied", "function": "relax__d_5_6",
//!                 "message": "folded `B` into this with-loop", "at": { … } }]
//! }
//! ```
//!
//! Fields are only ever added to this schema; a change in meaning gets a new
//! schema name. `time_us` is absent when timing is off. `at` is absent for
//! remarks about library code (or without a location). Reasons are `declared`,
//! `hint`, `call_site` and `wrapper`; remark kinds `applied`, `missed` and
//! `analysis`. `totals` sums each counter over all passes, plus
//! `functions_specialised` (instances narrower than their declared types).

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Outcome, RemarkKind};
use crate::sema::hir::Program;
use crate::sema::typed::{Reason, Typed};
use crate::span::{SourceMap, Span};

pub const SCHEMA: &str = "withloop.optimisation-report/1";

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Location {
    pub file: String,
    pub line: usize,
    pub column: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct Variant {
    pub function: String,
    pub params: Vec<String>,
    pub results: Vec<String>,
    pub symbol: String,
    /// The C symbol compiled code exports for this variant (user functions).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub c_symbol: Option<String>,
    pub reason: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<Location>,
    pub library: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct StageEntry {
    pub name: &'static str,
    pub rounds: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct PassEntry {
    pub name: &'static str,
    pub description: &'static str,
    pub enabled: bool,
    pub runs: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_us: Option<u64>,
    pub counters: BTreeMap<&'static str, u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct RemarkEntry {
    pub pass: &'static str,
    pub kind: &'static str,
    pub function: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<Location>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub schema: &'static str,
    pub file: String,
    pub variants: Vec<Variant>,
    pub stages: Vec<StageEntry>,
    pub passes: Vec<PassEntry>,
    pub totals: BTreeMap<&'static str, u64>,
    pub remarks: Vec<RemarkEntry>,
}

fn location(sources: &SourceMap, span: Span) -> Option<Location> {
    if sources.is_library(span) {
        return None;
    }
    let f = sources.get(span.file);
    let (line, column) = f.line_col(span.start);
    Some(Location { file: f.name.to_string(), line, column })
}

/// Lists the entries of a module that was not built from a typed SaC program
/// (L0's functions have one instance each: their declared types).
pub fn add_module_entries(report: &mut Report, module: &crate::ir::Module, sources: &SourceMap) {
    for (name, f) in &module.entries {
        let func = module.function(*f);
        report.variants.push(Variant {
            function: name.to_string(),
            params: func.params.iter().map(|p| func.ty(*p).to_string()).collect(),
            results: func.results.iter().map(|t| t.to_string()).collect(),
            symbol: func.name.clone(),
            c_symbol: Some(crate::ir::exports::c_symbol(&func.name)),
            reason: "declared",
            at: location(sources, func.span),
            library: false,
        });
    }
}

/// Takes the C symbol away from the variants `module` does not export (an
/// instance of a function that is not an entry, or one left out with the
/// entries' generic code): the report then lists what a caller can link.
pub fn keep_exported_symbols(report: &mut Report, module: &crate::ir::Module) {
    let exported: crate::HashSet<String> = crate::ir::exports::exports(module).into_iter().map(|e| e.symbol).collect();
    for v in &mut report.variants {
        if v.c_symbol.as_ref().is_some_and(|s| !exported.contains(s)) {
            v.c_symbol = None;
        }
    }
}

/// Builds the report. `library`: include library instances and remarks about
/// library functions.
pub fn build(
    file: &str,
    outcome: &Outcome,
    program: &Program,
    typed: &Typed,
    sources: &SourceMap,
    library: bool,
    timing: bool,
) -> Report {
    let mut variants = Vec::new();
    let mut order = typed.reachable.clone();
    order.sort_by_key(|id| {
        let inst = typed.instance(*id);
        (inst.fun, inst.specialised, *id)
    });
    let mut specialised = 0;
    for id in order {
        let inst = typed.instance(id);
        let f = program.function(inst.fun);
        if f.intrinsic.is_some() {
            continue;
        }
        if inst.specialised {
            specialised += 1;
        }
        if f.is_library() && !library {
            continue;
        }
        let (reason, at) = match &inst.reason {
            Reason::Declared => ("declared", location(sources, f.name_span)),
            Reason::Hint => ("hint", None),
            Reason::CallSite(s) => ("call_site", location(sources, *s)),
            Reason::Wrapper => ("wrapper", None),
        };
        variants.push(Variant {
            function: f.name.to_string(),
            params: inst.params.iter().map(|t| t.to_string()).collect(),
            results: inst.results.iter().map(|t| t.to_string()).collect(),
            symbol: inst.symbol.clone(),
            c_symbol: (!f.is_library()).then(|| crate::ir::exports::c_symbol(&inst.symbol)),
            reason,
            at,
            library: f.is_library(),
        });
    }
    let mut totals: BTreeMap<&'static str, u64> = BTreeMap::new();
    let passes = outcome
        .passes
        .iter()
        .map(|p| {
            for (k, v) in &p.counters {
                *totals.entry(k).or_default() += v;
            }
            PassEntry {
                name: p.name,
                description: p.description,
                enabled: p.enabled,
                runs: p.runs,
                time_us: timing.then_some(p.time.as_micros() as u64),
                counters: p.counters.clone(),
            }
        })
        .collect();
    totals.insert("functions_specialised", specialised);
    let mut remarks: Vec<RemarkEntry> = Vec::new();
    for r in &typed.remarks {
        if library || !program.function(r.fun).is_library() {
            remarks.push(RemarkEntry {
                pass: "specialise",
                kind: RemarkKind::Analysis.name(),
                function: program.function(r.fun).name.to_string(),
                message: r.message.clone(),
                at: r.span.and_then(|s| location(sources, s)),
            });
        }
    }
    for r in &outcome.remarks {
        if r.span.is_none() && !library && r.kind != RemarkKind::Analysis {
            // Remarks about library code only, unless asked for.
            continue;
        }
        remarks.push(RemarkEntry {
            pass: r.pass,
            kind: r.kind.name(),
            function: r.function.clone(),
            message: r.message.clone(),
            at: r.span.and_then(|s| location(sources, s)),
        });
    }
    Report {
        schema: SCHEMA,
        file: file.to_string(),
        variants,
        stages: outcome.rounds.iter().map(|(n, r)| StageEntry { name: n, rounds: *r }).collect(),
        passes,
        totals,
        remarks,
    }
}

impl Report {
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// The readable form.
    pub fn to_text(&self) -> String {
        let mut out = format!("optimisation report for {}\n", self.file);
        out.push_str("\nvariants:\n");
        for v in &self.variants {
            let at = v.at.as_ref().map_or(String::new(), |l| format!(" at {}:{}:{}", l.file, l.line, l.column));
            let results = if v.results.is_empty() { "void".to_string() } else { v.results.join(", ") };
            out.push_str(&format!(
                "  {}({}) -> {}  [{}]  {}{}\n",
                v.function,
                v.params.join(", "),
                results,
                v.c_symbol.as_ref().map_or(v.symbol.clone(), |c| format!("{}, {c}", v.symbol)),
                v.reason.replace('_', " "),
                at
            ));
        }
        out.push_str("\npasses:\n");
        for p in &self.passes {
            if !p.enabled {
                out.push_str(&format!("  {:<12} off\n", p.name));
                continue;
            }
            let counters: Vec<String> = p.counters.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let time = p.time_us.map_or(String::new(), |t| format!(" {:>8.3}ms", t as f64 / 1000.0));
            let line = format!("  {:<12} {:>2} runs{}  {}", p.name, p.runs, time, counters.join(" "));
            out.push_str(line.trim_end());
            out.push('\n');
        }
        let stages: Vec<String> = self.stages.iter().map(|s| format!("{} {} round(s)", s.name, s.rounds)).collect();
        out.push_str(&format!("  ({})\n", stages.join(", ")));
        out.push_str("\ntotals:\n");
        for (k, v) in &self.totals {
            out.push_str(&format!("  {k}: {v}\n"));
        }
        if !self.remarks.is_empty() {
            out.push_str("\nremarks:\n");
            for r in &self.remarks {
                let at = r.at.as_ref().map_or(String::new(), |l| format!("{}:{}:{}: ", l.file, l.line, l.column));
                out.push_str(&format!("  {at}{} {} [{}]: {}\n", r.pass, r.kind, r.function, r.message));
            }
        }
        out
    }
}

//! The L0 front end (seed 004, Futhark's ancestor): parsing, type and uniqueness
//! checking, and lowering to the shared IR, after which L0 programs take the
//! same passes, interpreter, back end and cache as SaC.
//!
//! ```text
//! source ──parse──▶ ast::Program ──check──▶ types + uniqueness ──lower──▶ ir::Module
//!         parse.rs                check.rs                     lower.rs
//! ```
//!
//! The reference semantics of an L0 program is its lowered, unoptimised IR run
//! by the IR interpreter: every pass and the back end are tested against it.

pub mod ast;
pub mod check;
pub mod lower;
pub mod parse;

use crate::diagnostics::{Diagnostic, Diagnostics};
use crate::ir::Module;
use crate::span::{FileId, SourceMap};
use crate::syntax::ast::Name;

/// Everything the L0 front end produced for one file.
#[derive(Debug)]
pub struct L0 {
    pub program: ast::Program,
    /// The lowered program; `None` when there were errors.
    pub module: Option<Module>,
    pub diagnostics: Vec<Diagnostic>,
}

/// Parses, checks and lowers `file`. `entries` name the functions compiled
/// code exports; empty means `main` if there is one, else every function.
pub fn compile(sources: &SourceMap, file: FileId, entries: &[String]) -> L0 {
    let mut diags = Diagnostics::new();
    let text = sources.get(file).text.clone();
    let program = parse::parse_program(file, &text, &mut diags);
    let checked = check::check(&program, &mut diags);
    // A function whose body did not parse is defined (its error is reported).
    let names: Vec<&str> = program.headers().map(|(name, ..)| name.as_str()).collect();
    if let Some(unknown) = entries.iter().find(|e| !names.contains(&e.as_str())) {
        diags.push(crate::driver::unknown_entry(&sources.get(file).name, unknown, names));
    }
    if diags.has_errors() {
        return L0 { program, module: None, diagnostics: diags.into_sorted() };
    }
    let names: Vec<Name> = if !entries.is_empty() {
        entries.iter().map(Name::new).collect()
    } else if program.functions.iter().any(|f| f.name == "main") {
        vec![Name::new("main")]
    } else {
        program.functions.iter().map(|f| f.name.clone()).collect()
    };
    match lower::lower(&program, &checked, &names) {
        Ok(module) => L0 { program, module: Some(module), diagnostics: diags.into_sorted() },
        Err(errors) => {
            for e in errors {
                diags.push(e);
            }
            L0 { program, module: None, diagnostics: diags.into_sorted() }
        }
    }
}

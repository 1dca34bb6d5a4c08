//! The SaC library: the implicit prelude and the modules a program can `use`.
//!
//! Written in SaC (the `.sac` files next to this module), generated per element
//! type with the C preprocessor, parsed once per process and shared by every
//! compilation. Library files always occupy the first [`SourceMap`] entries of a
//! session, so the cached syntax trees' spans are valid in every session.
//!
//! | module | contents |
//! |---|---|
//! | `Prelude` (implicit) | `sel`, `zero`, `one`, `eq`, unary `++`/`--` on `int`, `prod` on `int[.]` |
//! | `ScalarArith`, `ArrayArith` (implicit) | every operator and conversion, element-wise on arrays |
//! | `ArrayBasics` (implicit) | `dim`, `shape`, `size`, `reshape`, `genarray`, `modarray`, `iota` |
//! | `ArrayReduce` | `sum`, `prod`, `minval`, `maxval`, `any`, `all` |
//! | `ArrayTransform` | `take`, `drop`, `++`, `cat`, `reverse`, `rotate`, `shift`, `transpose`, `tile`, `where`, `matmul` |
//! | `Array` | all of the above |
//! | `ScalarIO`, `ArrayIO`, `TermFile`, `StdIO` | `print`, `show`, `printf`, `puts` |
//! | `Math`, `MathArray` | `sqrt`, `exp`, `log`, `sin`, …, `pow`, `floor`, `ceil`, … |
//! | `Constants` | `minint()`, `maxint()`, `mindouble()`, … |
//!
//! The operators and basics are implicit (unless `--noprelude`) because the papers
//! treat them as built-in; sac2c programs that `use Array: all;` see the same.

use std::sync::OnceLock;

use crate::diagnostics::Diagnostics;
use crate::span::{FileKind, SourceMap};
use crate::syntax::ast::SourceModule;
use crate::syntax::cpp::{NoIncludes, PpOptions, preprocess};
use crate::syntax::parser::parse_module;

/// Library source files: (module name, file name, text).
const FILES: &[(&str, &str, &str)] = &[
    ("Prelude", "<library>/prelude.sac", include_str!("prelude.sac")),
    ("ScalarArith", "<library>/scalararith.sac", include_str!("scalararith.sac")),
    ("ArrayArith", "<library>/arrayarith.sac", include_str!("arrayarith.sac")),
    ("ArrayBasics", "<library>/arraybasics.sac", include_str!("arraybasics.sac")),
    ("ArrayReduce", "<library>/arrayreduce.sac", include_str!("arrayreduce.sac")),
    ("ArrayTransform", "<library>/arraytransform.sac", include_str!("arraytransform.sac")),
    ("ScalarIO", "<library>/scalario.sac", include_str!("scalario.sac")),
    ("ArrayIO", "<library>/arrayio.sac", include_str!("arrayio.sac")),
    ("TermFile", "<library>/termfile.sac", include_str!("termfile.sac")),
    ("Math", "<library>/math.sac", include_str!("math.sac")),
    ("MathArray", "<library>/matharray.sac", include_str!("matharray.sac")),
    ("Constants", "<library>/constants.sac", include_str!("constants.sac")),
];

/// Shared definitions every library file includes.
const COMMON: &str = include_str!("common.h");

/// Modules the prelude makes visible without a `use`.
pub const PRELUDE_MODULES: &[&str] = &["Prelude", "ScalarArith", "ArrayArith", "ArrayBasics"];

/// Modules (one per file, plus the intrinsic-only `TermFile`) that a `use M` brings in.
pub fn expand_module(name: &str) -> Option<&'static [&'static str]> {
    Some(match name {
        "Array" => &["ScalarArith", "ArrayArith", "ArrayBasics", "ArrayReduce", "ArrayTransform"],
        "StdIO" => &["ScalarIO", "ArrayIO", "TermFile"],
        "Math" => &["Math", "MathArray"],
        "Numerical" => &["Math", "MathArray"],
        "Structures" => &["ScalarArith", "ArrayArith", "ArrayBasics", "ArrayReduce", "ArrayTransform"],
        "Prelude" => &["Prelude"],
        "ScalarArith" => &["ScalarArith"],
        "ArrayArith" => &["ScalarArith", "ArrayArith"],
        "ArrayBasics" => &["ArrayBasics"],
        "ArrayReduce" => &["ArrayReduce"],
        "ArrayTransform" => &["ArrayTransform"],
        "ScalarIO" => &["ScalarIO"],
        "ArrayIO" => &["ArrayIO"],
        "TermFile" => &["TermFile"],
        "MathArray" => &["MathArray"],
        "Constants" => &["Constants"],
        _ => return None,
    })
}

/// Every module name a program may `use`, for error messages.
pub const KNOWN_MODULES: &[&str] = &[
    "Array",
    "StdIO",
    "Math",
    "Numerical",
    "Structures",
    "ScalarArith",
    "ArrayArith",
    "ArrayBasics",
    "ArrayReduce",
    "ArrayTransform",
    "ScalarIO",
    "ArrayIO",
    "TermFile",
    "MathArray",
    "Constants",
];

/// Functions implemented by the interpreter, with the module that provides them.
pub const INTRINSICS: &[(&str, &str)] = &[("TermFile", "printf")];

/// The parsed library.
#[derive(Debug)]
pub struct Library {
    /// (module name, syntax tree) per file, in [`FILES`] order.
    pub modules: Vec<(&'static str, SourceModule)>,
    /// Problems found while parsing the library (a bug in withloop if not empty).
    pub diagnostics: Diagnostics,
}

/// Adds the library files to a fresh source map, in the fixed order the cached
/// syntax trees expect. Must be the first thing added to `sources`.
pub fn add_library_sources(sources: &mut SourceMap) {
    debug_assert_eq!(sources.files().count(), 0, "library files must come first");
    for (_, name, text) in FILES {
        sources.add(*name, format!("{COMMON}\n{text}"), FileKind::Library);
    }
}

/// The library, parsed on first use: its files are preprocessed and parsed
/// on two threads (a third of a one-kernel compile by the command-line tool
/// was this, on one thread; the files are independent).
pub fn library() -> &'static Library {
    static LIBRARY: OnceLock<Library> = OnceLock::new();
    LIBRARY.get_or_init(|| {
        let parsed: Vec<std::sync::OnceLock<(SourceModule, Diagnostics)>> =
            FILES.iter().map(|_| std::sync::OnceLock::new()).collect();
        // Largest first (their macros generate most of the library), each to
        // whichever thread is free.
        let next = std::sync::atomic::AtomicUsize::new(0);
        let work = || {
            let mut sources = SourceMap::new();
            add_library_sources(&mut sources);
            loop {
                let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&file) = BY_COST.get(k) else { break };
                let mut diagnostics = Diagnostics::new();
                let id = crate::span::FileId(file as u32);
                let tokens = preprocess(&mut sources, id, &NoIncludes, &PpOptions::default(), &mut diagnostics);
                let module = parse_module(&tokens, &mut diagnostics);
                let _ = parsed[file].set((module, diagnostics));
            }
        };
        std::thread::scope(|scope| {
            // Without a second thread (none can be started), this one parses all.
            let helper = std::thread::Builder::new().spawn_scoped(scope, work);
            work();
            if let Ok(h) = helper {
                let _ = h.join();
            }
        });
        let mut diagnostics = Diagnostics::new();
        let mut modules = Vec::with_capacity(FILES.len());
        for ((module, _, _), cell) in FILES.iter().zip(parsed) {
            let (tree, diags) = cell.into_inner().expect("every library file is parsed");
            diagnostics.extend(diags);
            modules.push((*module, tree));
        }
        Library { modules, diagnostics }
    })
}

/// Indexes into [`FILES`], the most expensive to preprocess and parse first.
const BY_COST: [usize; 12] = [5, 2, 1, 0, 9, 3, 4, 10, 7, 6, 11, 8];

#[cfg(test)]
mod tests {
    #[test]
    fn every_library_file_is_parsed_once() {
        let mut order = super::BY_COST.to_vec();
        order.sort_unstable();
        assert_eq!(order, (0..super::FILES.len()).collect::<Vec<_>>());
    }

    #[test]
    fn library_parses_cleanly() {
        let lib = super::library();
        let sources = {
            let mut s = crate::span::SourceMap::new();
            super::add_library_sources(&mut s);
            s
        };
        let text = crate::diagnostics::render::render_all(&sources, lib.diagnostics.iter());
        assert!(lib.diagnostics.is_empty(), "{text}");
    }
}

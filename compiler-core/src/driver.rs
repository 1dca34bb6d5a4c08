//! One entry point per phase sequence, shared by the CLI, the test harness and
//! (later) the service.

use crate::HashSet;
use crate::diagnostics::{self as codes, Diagnostic, Diagnostics};
use crate::interp::value::{Scalar, Value};
use crate::library;
use crate::sema::hir::Elem;
use crate::sema::infer::{self, Hint, InferOptions};
use crate::sema::ty::{Shape, Ty};
use crate::sema::typed::{Reason, Typed};
use crate::sema::{self, ResolveOptions, hir::Program};
use crate::span::{FileId, FileKind, SourceMap, Span};
use crate::syntax::ast::{self, ExprKind, Literal};
use crate::syntax::cpp::{PpOptions, SourceLoader, preprocess};
use crate::syntax::lexer::lex;
use crate::syntax::parser::{parse_expression, parse_module};

/// The source language.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Language {
    #[default]
    Sac,
    /// seed 004's L0 (see [`crate::l0`]).
    L0,
}

impl Language {
    /// By file extension: `.l0` is L0, anything else SaC.
    pub fn of_file(name: &str) -> Language {
        if name.ends_with(".l0") { Language::L0 } else { Language::Sac }
    }
}

/// Options for the front end, mirroring sac2c's driver flags.
#[derive(Clone, Debug, Default)]
pub struct FrontendOptions {
    /// The source language; `None`: by the file name's extension.
    pub language: Option<Language>,
    /// L0: the functions compiled code exports (default `main`, or every
    /// function of a program without `main`). SaC exports its entry functions.
    pub entries: Vec<String>,
    /// `-D NAME[=VALUE]`
    pub defines: Vec<String>,
    /// `-I DIR`
    pub include_dirs: Vec<String>,
    /// `--noprelude`
    pub no_prelude: bool,
    /// Shape hints, `FUNCTION.PARAM=TYPE` (e.g. `main.a=double[100,100]`).
    pub shape_hints: Vec<String>,
    /// Specialisations per function (default 20, like sac2c's -maxspec).
    pub max_specialisations: Option<usize>,
}

/// The front end's result: the sources seen, the resolved program, and every
/// diagnostic (sorted by position).
#[derive(Debug)]
pub struct Frontend {
    pub sources: SourceMap,
    pub main_file: FileId,
    pub module: ast::SourceModule,
    pub program: Program,
    /// The typed, specialised program (empty when resolution failed).
    pub typed: Typed,
    /// L0 only: the lowered program (SaC is lowered from `program` and `typed`).
    pub l0: Option<crate::ir::Module>,
    pub language: Language,
    pub diagnostics: Vec<Diagnostic>,
}

impl Frontend {
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }
}

/// Preprocesses, parses and resolves one source file.
pub fn frontend(name: &str, text: &str, loader: &dyn SourceLoader, options: &FrontendOptions) -> Frontend {
    let language = options.language.unwrap_or_else(|| Language::of_file(name));
    if language == Language::L0 {
        let mut sources = SourceMap::new();
        let main_file = sources.add(name, text, FileKind::User);
        let mut l0 = crate::l0::compile(&sources, main_file, &options.entries);
        if !options.shape_hints.is_empty() {
            l0.diagnostics.push(
                Diagnostic::error(codes::UNSUPPORTED, "shape hints apply to SaC programs; L0's types fix every rank")
                    .with_hint("leave out `--shape` for L0 sources"),
            );
        }
        return Frontend {
            sources,
            main_file,
            module: ast::SourceModule::default(),
            program: Program::default(),
            typed: Typed::default(),
            l0: l0.module,
            language,
            diagnostics: l0.diagnostics,
        };
    }
    let mut sources = SourceMap::new();
    library::add_library_sources(&mut sources);
    let main_file = sources.add(name, text, FileKind::User);
    let mut diagnostics = Diagnostics::new();
    let pp = PpOptions { defines: options.defines.clone(), include_dirs: options.include_dirs.clone() };
    let tokens = preprocess(&mut sources, main_file, loader, &pp, &mut diagnostics);
    let module = parse_module(&tokens, &mut diagnostics);
    let resolve = ResolveOptions { prelude: !options.no_prelude, entries: options.entries.clone() };
    let program = sema::resolve_program(&module, &resolve, &mut diagnostics);
    let mut hints = Vec::new();
    for h in &options.shape_hints {
        match parse_hint(&mut sources, h) {
            Ok(hint) => hints.push(hint),
            Err(d) => diagnostics.push(*d),
        }
    }
    // Entries asked for are looked up before inference, which starts from them.
    if let Some(unknown) = options.entries.iter().find(|e| program.user_functions(e).is_empty()) {
        let names =
            program.user_names.keys().map(|n| n.as_str()).filter(|n| !program.user_functions(n).is_empty()).collect();
        diagnostics.push(unknown_entry(name, unknown, names));
    }
    // Types are inferred only for programs that resolved: otherwise most type
    // errors would be consequences of the errors already reported.
    let typed = if diagnostics.has_errors() {
        Typed::default()
    } else {
        let infer_options = InferOptions {
            max_specialisations: options.max_specialisations.unwrap_or(InferOptions::default().max_specialisations),
            hints,
            entries: options.entries.clone(),
        };
        infer::infer(&program, &sources, &infer_options, &mut diagnostics)
    };
    let lib = library::library();
    if !lib.diagnostics.is_empty() {
        diagnostics.push(
            Diagnostic::error(codes::INTERNAL_ERROR, "withloop's library does not compile")
                .with_note("this is a bug in withloop; please report it"),
        );
    }
    Frontend { sources, main_file, module, program, typed, l0: None, language, diagnostics: diagnostics.into_sorted() }
}

/// Parses a shape hint `FUNCTION.PARAM=TYPE`, e.g. `main.a=double[100,100]`,
/// `f.x=int[.,.]`, `g.v=float[*]`.
pub fn parse_hint(sources: &mut SourceMap, text: &str) -> Result<Hint, Box<Diagnostic>> {
    let file = sources.add(format!("<--shape {text}>"), text, FileKind::CommandLine);
    let whole = Span::new(file, 0, text.len());
    let bad = |msg: &str| {
        Box::new(
            Diagnostic::error(codes::HINT_MISMATCH, format!("cannot read the shape hint `{text}`: {msg}"))
                .at(whole, "")
                .with_hint("write FUNCTION.PARAMETER=TYPE, e.g. `main.a=double[100,100]` or `f.x=int[.,.]`"),
        )
    };
    let (target, ty_text) = text.split_once('=').ok_or_else(|| bad("no `=`"))?;
    let (function, param) =
        target.trim().rsplit_once('.').ok_or_else(|| bad("no `.` between function and parameter"))?;
    if function.is_empty() || param.is_empty() {
        return Err(bad("empty function or parameter name"));
    }
    let ty_start = text.len() - ty_text.len();
    let mut diagnostics = Diagnostics::new();
    let mut tokens = lex(file, text, &mut diagnostics);
    tokens.retain(|t| t.span.start as usize >= ty_start);
    tokens.push(crate::syntax::token::Token {
        kind: crate::syntax::token::TokenKind::Eof,
        text: Default::default(),
        span: Span::new(file, text.len(), text.len()),
        line_start: true,
        space_before: true,
    });
    let ty = crate::syntax::parser::parse_type_expr(&tokens, &mut diagnostics);
    if let Some(d) = diagnostics.into_sorted().into_iter().next() {
        return Err(Box::new(d));
    }
    let ty = ty.ok_or_else(|| bad("not a type"))?;
    let elem = match &ty.name {
        ast::TypeName::Base(b) => Elem::Base(*b),
        _ => return Err(bad("the element type must be a base type such as int or double")),
    };
    Ok(Hint {
        function: function.trim().into(),
        param: param.trim().into(),
        ty: Ty::new(elem, Shape::of_spec(&ty.shape)),
        span: Some(whole),
    })
}

/// The instances and wrappers of a typed program, one per line, for `withloop
/// check --instances` and the report.
pub fn instances_text(program: &Program, typed: &Typed, sources: &SourceMap, all: bool) -> String {
    let mut out = String::new();
    // By definition (source order), the declared-type instance first.
    let mut order: Vec<_> = typed.reachable.clone();
    order.sort_by_key(|id| {
        let inst = typed.instance(*id);
        (inst.fun, inst.specialised, *id)
    });
    for &id in &order {
        let inst = typed.instance(id);
        let f = program.function(inst.fun);
        if f.is_library() && !all {
            continue;
        }
        let params: Vec<String> = inst.params.iter().map(|t| t.to_string()).collect();
        let results: Vec<String> = inst.results.iter().map(|t| t.to_string()).collect();
        let why = match &inst.reason {
            Reason::Declared => "declared types".to_string(),
            Reason::Hint => "shape hint".to_string(),
            Reason::CallSite(s) => format!("call at {}", sources.location(*s)),
            Reason::Wrapper => "run-time dispatch".to_string(),
        };
        let results = if results.is_empty() { "void".to_string() } else { results.join(", ") };
        out.push_str(&format!("{}({}) -> {}  [{}]  {}\n", f.name, params.join(", "), results, inst.symbol, why));
    }
    for r in &typed.remarks {
        if all || !program.function(r.fun).is_library() {
            out.push_str(&format!("remark: {}\n", r.message));
        }
    }
    out
}

/// Parses a command-line argument value written in SaC constant syntax: literals,
/// nested array literals, `reshape([..], [..])`, `genarray([..], v)`.
pub fn parse_value(sources: &mut SourceMap, text: &str) -> Result<Value, Box<Diagnostic>> {
    let file = sources.add(format!("<--arg {text}>"), text, FileKind::CommandLine);
    let mut diagnostics = Diagnostics::new();
    let mut tokens = lex(file, text, &mut diagnostics);
    let end = Span::new(file, text.len(), text.len());
    tokens.push(crate::syntax::token::Token {
        kind: crate::syntax::token::TokenKind::Eof,
        text: Default::default(),
        span: end,
        line_start: true,
        space_before: true,
    });
    let expr = parse_expression(&tokens, &mut diagnostics);
    if let Some(d) = diagnostics.into_sorted().into_iter().next() {
        return Err(Box::new(d));
    }
    constant(&expr)
}

fn constant(e: &ast::Expr) -> Result<Value, Box<Diagnostic>> {
    let not_constant = || {
        Box::new(
            Diagnostic::error(codes::INVALID_ARGUMENT, "an argument must be a constant")
                .at(e.span, "")
                .with_hint("write literals such as `3`, `2.5`, `[[1, 2], [3, 4]]` or `reshape([2, 2], [1, 2, 3, 4])`"),
        )
    };
    match &e.kind {
        ExprKind::Lit(Literal::Int(v, ty)) => {
            Ok(Value::Scalar(Scalar::Int(*ty, crate::interp::value::wrap_int(*ty, *v as i64))))
        }
        ExprKind::Lit(Literal::Real(v, ast::BaseType::Float)) => Ok(Value::Scalar(Scalar::Float(*v as f32))),
        ExprKind::Lit(Literal::Real(v, _)) => Ok(Value::Scalar(Scalar::Double(*v))),
        ExprKind::Lit(Literal::Bool(b)) => Ok(Value::Scalar(Scalar::Bool(*b))),
        ExprKind::Lit(Literal::Char(c)) => Ok(Value::Scalar(Scalar::Char(*c))),
        ExprKind::Array(elems) => {
            let vals = elems.iter().map(constant).collect::<Result<Vec<_>, _>>()?;
            crate::interp::stack_values(vals)
                .map_err(|m| Box::new(Diagnostic::error(codes::INVALID_ARGUMENT, m).at(e.span, "")))
        }
        ExprKind::Call { fun, args } if args.len() == 2 && (fun.name == "reshape" || fun.name == "genarray") => {
            let a = constant(&args[0])?;
            let b = constant(&args[1])?;
            crate::interp::build_constant(&fun.name, &a, &b)
                .map_err(|m| Box::new(Diagnostic::error(codes::INVALID_ARGUMENT, m).at(e.span, "")))
        }
        _ => Err(not_constant()),
    }
}

/// The error for an entry point `file` does not define, naming the functions it does.
pub(crate) fn unknown_entry(file: &str, unknown: &str, mut names: Vec<&str>) -> Diagnostic {
    names.sort();
    Diagnostic::error(
        codes::UNKNOWN_FUNCTION,
        format!("`{file}` defines no function `{unknown}` to export as an entry point"),
    )
    .with_note(format!("its functions are: {}", names.join(", ")))
}

/// Keeps only `entries` as the module's exported entry points (and their
/// variants); the optimiser's dead-function removal then drops what they do
/// not call. Empty `entries`: every entry stays. A name the module does not
/// export is an error naming the ones it does.
pub fn select_entries(module: &mut crate::ir::Module, entries: &[String], file: &str) -> Result<(), Box<Diagnostic>> {
    if entries.is_empty() {
        return Ok(());
    }
    if let Some(unknown) = entries.iter().find(|e| module.entry(e).is_none()) {
        let names = module.entries.iter().map(|(n, _)| n.as_str()).collect();
        return Err(Box::new(unknown_entry(file, unknown, names)));
    }
    module.entries.retain(|(name, _)| entries.iter().any(|e| e == name.as_str()));
    let functions = &module.functions;
    module.variants.retain(|f| entries.iter().any(|e| *e == functions[f.0 as usize].source_name.as_str()));
    Ok(())
}

/// Leaves the generic code of the entries out, as JAX's `jit` compiles one
/// shape at a time: an entry with shape hints dispatches among its hinted instances only, and
/// arguments none of them accepts fail at run time (R0004, at the entry)
/// instead of running generic code. The entries' other instances are no longer
/// exported variants, so the optimiser removes them unless code that is kept
/// calls them (a recursive instance, say). An entry without hints keeps its
/// generic code: there is nothing else to run. Calls inside the program still
/// dispatch among every instance: only the exported entry point is narrowed
/// (a copy of its dispatch wrapper). Returns the entries narrowed.
pub fn leave_out_generic(module: &mut crate::ir::Module, typed: &Typed) -> Vec<String> {
    use crate::ir::{FuncId, FunctionKind, Op};
    let hinted: HashSet<&str> =
        typed.instances.iter().filter(|i| i.reason == Reason::Hint).map(|i| i.symbol.as_str()).collect();
    let mut narrowed = Vec::new();
    for k in 0..module.entries.len() {
        let (name, wrapper) = module.entries[k].clone();
        let instance_of_entry = |f: FuncId, module: &crate::ir::Module| {
            let g = module.function(f);
            g.kind == FunctionKind::Instance && g.source_name == name
        };
        // The entry's instances its wrapper calls, split by hint.
        let mut called: Vec<FuncId> = Vec::new();
        module.function(wrapper).body.walk(&mut |s| {
            if let Op::Call { func, .. } = &s.op
                && instance_of_entry(*func, module)
                && !called.contains(func)
            {
                called.push(*func);
            }
        });
        let (kept, dropped): (Vec<FuncId>, Vec<FuncId>) =
            called.iter().partition(|f| hinted.contains(module.function(**f).name.as_str()));
        if kept.is_empty() || dropped.is_empty() {
            continue;
        }
        // The copy keeps the wrapper's link name (the entry's C symbol may be
        // spelt from it); the original, for calls inside the program, is renamed.
        let mut entry = module.function(wrapper).clone();
        module.functions[wrapper.0 as usize].name = format!("{}__all", entry.name);
        let hints: Vec<&str> = kept.iter().map(|f| module.function(*f).name.as_str()).collect();
        let message = format!(
            "`{name}` was compiled for its shape hints only ({}), without generic code; no hinted instance accepts these arguments",
            hints.join(", ")
        );
        let mut body = std::mem::take(&mut entry.body);
        fail_calls(&mut body, &dropped, &message, &mut entry);
        entry.body = body;
        let id = FuncId(module.functions.len() as u32);
        module.functions.push(entry);
        module.entries[k].1 = id;
        module.variants.retain(|f| !dropped.contains(f));
        narrowed.push(name.to_string());
    }
    narrowed
}

/// `block` with each call of a `dropped` function replaced by a failure
/// (`message`) and placeholders for what the call defined.
fn fail_calls(block: &mut crate::ir::Block, dropped: &[crate::ir::FuncId], message: &str, f: &mut crate::ir::Function) {
    use crate::ir::{Op, Stmt};
    let mut out = Vec::with_capacity(block.stmts.len());
    for mut s in std::mem::take(&mut block.stmts) {
        if let Op::Call { func, .. } = &s.op
            && dropped.contains(func)
        {
            let fail = Op::Fail { code: codes::NO_MATCHING_INSTANCE, message: message.to_string(), args: Vec::new() };
            let mut failure = Stmt::new(Vec::new(), fail, s.span);
            failure.blame = s.blame;
            out.push(failure);
            // A failure never yields; placeholders keep the block well-formed.
            for d in &s.defs {
                let ty = f.ty(*d).clone();
                let stand_in = crate::ir::lower::placeholder_stmts(&mut |t| f.new_value(t, None), *d, &ty, s.span);
                out.extend(stand_in.into_iter().map(|mut c| {
                    c.blame = s.blame;
                    c
                }));
            }
            continue;
        }
        s.op.walk_blocks_mut(&mut |b| fail_calls(b, dropped, message, f));
        out.push(s);
    }
    block.stmts = out;
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::syntax::cpp::MemoryLoader;

    const PROGRAM: &str = "int g(int x) { return x + 1; }\n\
                           int f(int[.] a) { return g(a[0]); }\n\
                           int h(int[.] a) { return a[0] * 2; }\n";

    fn checked(entries: &[&str], hints: &[&str]) -> Frontend {
        let options = FrontendOptions {
            entries: entries.iter().map(|e| e.to_string()).collect(),
            shape_hints: hints.iter().map(|h| h.to_string()).collect(),
            ..Default::default()
        };
        frontend("entries.sac", PROGRAM, &MemoryLoader::default(), &options)
    }

    /// The symbols of the user functions' instances inferred.
    fn symbols(fe: &Frontend) -> Vec<&str> {
        let mut s: Vec<&str> = fe
            .typed
            .instances
            .iter()
            .filter(|i| !fe.program.function(i.fun).is_library())
            .map(|i| i.symbol.as_str())
            .collect();
        s.sort();
        s
    }

    #[test]
    fn entries_infer_only_what_they_call() {
        let fe = checked(&["f"], &["f.a=int[3]", "h.a=int[4]"]);
        assert!(!fe.has_errors(), "{:?}", fe.diagnostics);
        assert_eq!(symbols(&fe), ["f__i_3", "f__i_X", "g__i"]);
        assert_eq!(fe.typed.entries.keys().map(|n| n.as_str()).collect::<Vec<_>>(), ["f"]);
        // Without entries, every function and every hint.
        let fe = checked(&[], &["f.a=int[3]", "h.a=int[4]"]);
        assert_eq!(symbols(&fe), ["f__i_3", "f__i_X", "g__i", "h__i_4", "h__i_X"]);
    }

    #[test]
    fn hints_for_functions_the_entries_do_not_call_are_still_checked() {
        let fe = checked(&["f"], &["h.a=double[4]"]);
        let errors: Vec<&str> = fe.diagnostics.iter().filter(|d| d.is_error()).map(|d| d.message.as_str()).collect();
        assert_eq!(errors, ["no definition of `h` has a parameter `a` that admits double[4]"]);
        let fe = checked(&["f"], &["nothing.a=int[4]"]);
        assert!(
            fe.diagnostics.iter().any(|d| d.message.contains("names `nothing`, which the program does not define"))
        );
    }

    #[test]
    fn entries_resolve_the_library_code_they_reach_and_every_user_function() {
        let resolved = |fe: &Frontend, name: &str| {
            fe.program.functions.iter().filter(|f| f.is_library() && f.resolved && f.name.as_str() == name).count()
        };
        // `f` reaches `+` (through `g`), only `h` calls `*`.
        let fe = checked(&["f"], &[]);
        assert!(resolved(&fe, "+") > 0, "the library's `+` is resolved");
        assert_eq!(resolved(&fe, "*"), 0, "the library's `*`, which only `h` calls, is not");
        assert!(fe.program.functions.iter().filter(|f| !f.is_library()).all(|f| f.resolved), "user functions are");
        let fe = checked(&[], &[]);
        assert!(resolved(&fe, "*") > 0, "without entries, what any function calls is resolved");
        // Errors in user functions the entries do not call are still reported.
        let options = FrontendOptions { entries: vec!["f".to_string()], ..Default::default() };
        let broken = format!("{PROGRAM}int k(int x) {{ return y; }}\n");
        let fe = frontend("entries.sac", &broken, &MemoryLoader::default(), &options);
        assert!(fe.diagnostics.iter().any(|d| d.is_error() && d.message.contains("`y`")), "{:?}", fe.diagnostics);
    }

    #[test]
    fn an_unknown_entry_is_an_error_naming_the_functions() {
        let fe = checked(&["f", "nothing"], &[]);
        let d = fe.diagnostics.iter().find(|d| d.is_error()).expect("an error");
        assert_eq!(d.code, codes::UNKNOWN_FUNCTION);
        assert_eq!(d.message, "`entries.sac` defines no function `nothing` to export as an entry point");
        assert_eq!(d.notes, ["its functions are: f, g, h"]);
    }

    #[test]
    fn binary_concatenation_without_array_says_where_it_is() {
        let source = "int[.] main() { return [1] ++ [2]; }";
        let fe = frontend("cat.sac", source, &MemoryLoader::default(), &FrontendOptions::default());
        let d = fe.diagnostics.iter().find(|d| d.is_error()).expect("an error");
        assert_eq!(d.code, codes::WRONG_ARITY);
        assert_eq!(d.hint.as_deref(), Some("more instances of `++` come from module `Array`: add `use Array: all;`"));
    }

    /// Runs entry `f` of `module` in the IR interpreter on an int vector.
    fn run_f(
        module: &crate::ir::Module,
        sources: &SourceMap,
        arg: &[i64],
    ) -> Result<Vec<Value>, (codes::Code, String)> {
        let run = crate::ir::interp::run(
            module,
            sources,
            "f",
            vec![Value::int_vector(arg)],
            crate::interp::RunOptions::default(),
            &mut |_| {},
        );
        run.expect("`f` is an entry").map_err(|e| (e.code, e.message))
    }

    #[test]
    fn leaving_out_generic_code_keeps_the_hinted_instances_only() {
        let fe = checked(&["f"], &["f.a=int[3]"]);
        assert!(!fe.has_errors(), "{:?}", fe.diagnostics);
        let mut module = crate::ir::lower::lower(&fe.program, &fe.typed, &fe.sources);
        select_entries(&mut module, &["f".to_string()], "entries.sac").expect("f is an entry");
        let variants = |m: &crate::ir::Module| -> Vec<String> {
            m.variants.iter().map(|v| m.function(*v).name.clone()).collect::<Vec<_>>()
        };
        assert_eq!(variants(&module), ["f__i_3", "f__i_X"]);
        assert_eq!(leave_out_generic(&mut module, &fe.typed), ["f"]);
        crate::ir::verify::verify(&module).expect("the narrowed module verifies");
        assert_eq!(variants(&module), ["f__i_3"]);
        let symbols: Vec<String> = crate::ir::exports::exports(&module).into_iter().map(|e| e.symbol).collect();
        assert_eq!(symbols, ["wl_f", "wl_f__i_3"], "the entry keeps its C symbol");
        // The optimiser removes the generic instance, which nothing calls now.
        let mut optimised = module.clone();
        crate::opt::optimise(&mut optimised, &fe.sources, &crate::opt::PipelineOptions::default())
            .expect("the pipeline keeps the IR well-formed");
        assert!(!optimised.functions.iter().any(|g| g.name == "f__i_X"), "the generic instance is gone");
        for m in [&module, &optimised] {
            // The hinted shape runs; any other fails at the entry.
            assert_eq!(run_f(m, &fe.sources, &[4, 5, 6]), Ok(vec![Value::Scalar(Scalar::int(5))]));
            let (code, message) = run_f(m, &fe.sources, &[4, 5]).expect_err("int[2] has no instance");
            assert_eq!(code, codes::NO_MATCHING_INSTANCE);
            assert!(message.contains("`f` was compiled for its shape hints only (f__i_3)"), "{message}");
        }
    }

    #[test]
    fn placeholders_of_large_static_shapes_are_not_written_out_as_constants() {
        // The dispatch wrapper of an AKS-declared function, and an entry left
        // without its generic code, stand in a zero array where a failure
        // leaves the result undefined: as a nine-million-element constant it
        // cost every pass seconds.
        let source = "double[3000,3000] neg(double[3000,3000] a) { return -a; }\n\
                      double[3000,3000] twice(double[.,.] a) { return 2.0 * a; }\n";
        let options =
            FrontendOptions { shape_hints: vec!["twice.a=double[3000,3000]".to_string()], ..Default::default() };
        let fe = frontend("large.sac", source, &MemoryLoader::default(), &options);
        assert!(!fe.has_errors(), "{:?}", fe.diagnostics);
        let mut module = crate::ir::lower::lower(&fe.program, &fe.typed, &fe.sources);
        assert_eq!(leave_out_generic(&mut module, &fe.typed), ["twice"]);
        crate::ir::verify::verify(&module).expect("the module verifies");
        let mut genarrays = 0;
        for f in &module.functions {
            f.body.walk(&mut |s| match &s.op {
                crate::ir::Op::Const(v) => {
                    assert!(
                        v.len() <= crate::ir::lower::MAX_PLACEHOLDER_CONSTANT,
                        "{}: a constant of {}",
                        f.name,
                        v.len()
                    )
                }
                crate::ir::Op::Prim { prim: crate::sema::hir::Prim::Genarray, .. } => genarrays += 1,
                _ => {}
            });
        }
        assert!(genarrays >= 2, "both stand-ins are built by genarray ({genarrays})");
        let mut optimised = module.clone();
        crate::opt::optimise(&mut optimised, &fe.sources, &crate::opt::PipelineOptions::default())
            .expect("the pipeline keeps the IR well-formed");
    }

    #[test]
    fn an_entry_without_hints_keeps_its_generic_code() {
        let fe = checked(&["f"], &[]);
        let mut module = crate::ir::lower::lower(&fe.program, &fe.typed, &fe.sources);
        select_entries(&mut module, &["f".to_string()], "entries.sac").expect("f is an entry");
        let before = module.functions.len();
        assert!(leave_out_generic(&mut module, &fe.typed).is_empty());
        assert_eq!(module.functions.len(), before);
        assert_eq!(run_f(&module, &fe.sources, &[4, 5]), Ok(vec![Value::Scalar(Scalar::int(5))]));
    }
}

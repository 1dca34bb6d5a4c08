//! One entry point per phase sequence, shared by the CLI, the test harness and
//! (later) the service.

use crate::diagnostics::{self as codes, Diagnostic, Diagnostics};
use crate::interp::value::{Scalar, Value};
use crate::library;
use crate::sema::{self, ResolveOptions, hir::Program};
use crate::span::{FileId, FileKind, SourceMap, Span};
use crate::syntax::ast::{self, ExprKind, Literal};
use crate::syntax::cpp::{PpOptions, SourceLoader, preprocess};
use crate::syntax::lexer::lex;
use crate::syntax::parser::{parse_expression, parse_module};

/// Options for the front end, mirroring sac2c's driver flags.
#[derive(Clone, Debug, Default)]
pub struct FrontendOptions {
    /// `-D NAME[=VALUE]`
    pub defines: Vec<String>,
    /// `-I DIR`
    pub include_dirs: Vec<String>,
    /// `--noprelude`
    pub no_prelude: bool,
}

/// The front end's result: the sources seen, the resolved program, and every
/// diagnostic (sorted by position).
#[derive(Debug)]
pub struct Frontend {
    pub sources: SourceMap,
    pub main_file: FileId,
    pub module: ast::SourceModule,
    pub program: Program,
    pub diagnostics: Vec<Diagnostic>,
}

impl Frontend {
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }
}

/// Preprocesses, parses and resolves one source file.
pub fn frontend(name: &str, text: &str, loader: &dyn SourceLoader, options: &FrontendOptions) -> Frontend {
    let mut sources = SourceMap::new();
    library::add_library_sources(&mut sources);
    let main_file = sources.add(name, text, FileKind::User);
    let mut diagnostics = Diagnostics::new();
    let pp = PpOptions { defines: options.defines.clone(), include_dirs: options.include_dirs.clone() };
    let tokens = preprocess(&mut sources, main_file, loader, &pp, &mut diagnostics);
    let module = parse_module(&tokens, &mut diagnostics);
    let program = sema::resolve_program(&module, &ResolveOptions { prelude: !options.no_prelude }, &mut diagnostics);
    let lib = library::library();
    if !lib.diagnostics.is_empty() {
        diagnostics.push(
            Diagnostic::error(codes::INTERNAL_ERROR, "withloop's library does not compile")
                .with_note("this is a bug in withloop; please report it"),
        );
    }
    Frontend { sources, main_file, module, program, diagnostics: diagnostics.into_sorted() }
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

//! Recursive-descent parser from preprocessed tokens to the [`ast`](super::ast).
//!
//! The parser never stops at the first error and never panics: a malformed construct
//! is reported, replaced by an `Error` node, and parsing resumes at the next statement
//! or definition. Nesting is capped ([`MAX_DEPTH`]) so hostile input cannot overflow
//! the stack.
//!
//! Operator precedence follows sac2c's `parser.c` (lowest first): `?:`, `||`, `&&`,
//! `|`, `^`, `&`, `== !=`, `< <= > >=`, binary `++`, `<< >>`, `+ -`, `* / %`, prefix
//! operators and casts, then selection. Inside generators `<` and `<=` are not
//! operators, and inside a tensor-comprehension body `|` ends the body.

mod expr;
mod stmt;

use crate::HashSet;

use super::ast::*;
use super::token::{Token, TokenKind};
use crate::diagnostics::{self as codes, Diagnostic, Diagnostics};
use crate::span::Span;

/// Deepest nesting of statements and expressions the parser descends into.
pub const MAX_DEPTH: usize = 256;

/// Deepest expression tree: nesting plus the links of chains the parser
/// builds in a loop, each of which wraps the expression so far one level
/// deeper (`a - b - c` is `(a - b) - c`; `a[i][j]` is `(a[i])[j]`). Name
/// resolution, type inference, lowering and the interpreter recurse over
/// expression trees: a chain of 3000 subtractions overflowed the CLI's 8 MiB
/// stack in name resolution (the compile service's 256 MiB threads, by the
/// same measure, at about 100000).
pub const MAX_EXPR_DEPTH: usize = 1024;

/// Parses a whole token stream (which must end with `Eof`).
pub fn parse_module(tokens: &[Token], diagnostics: &mut Diagnostics) -> SourceModule {
    let mut parser = Parser::new(tokens, diagnostics);
    let mut items = Vec::new();
    while !parser.at_eof() {
        let before = parser.pos;
        if let Some(item) = parser.item() {
            items.push(item);
        }
        if parser.pos == before {
            parser.bump();
        }
    }
    SourceModule { items }
}

/// Parses a single expression, e.g. a `--arg` value; reports trailing tokens.
pub fn parse_expression(tokens: &[Token], diagnostics: &mut Diagnostics) -> Expr {
    let mut parser = Parser::new(tokens, diagnostics);
    let e = parser.expr();
    if !parser.at_eof() {
        let t = parser.peek().clone();
        parser.error_at(
            Diagnostic::error(codes::UNEXPECTED_TOKEN, format!("unexpected {} after the expression", t.describe()))
                .at(t.span, ""),
        );
    }
    e
}

/// Parses a type such as `double[100,100]` or `int[*]` (shape hints use this).
pub fn parse_type_expr(tokens: &[Token], diagnostics: &mut Diagnostics) -> Option<TypeExpr> {
    let mut parser = Parser::new(tokens, diagnostics);
    let ty = parser.type_expr()?;
    if !parser.at_eof() {
        let t = parser.peek().clone();
        parser.error_at(
            Diagnostic::error(codes::UNEXPECTED_TOKEN, format!("unexpected {} after the type", t.describe()))
                .at(t.span, ""),
        );
        return None;
    }
    Some(ty)
}

struct Parser<'a> {
    tokens: &'a [Token],
    pos: usize,
    diags: &'a mut Diagnostics,
    typedefs: HashSet<Name>,
    depth: usize,
    /// Links of the chains being parsed ([`MAX_EXPR_DEPTH`]).
    links: usize,
    /// Inside a tensor-comprehension body, `|` ends the body.
    no_pipe: bool,
    /// Reported "nested too deeply" already.
    depth_reported: bool,
    /// Token index of the last reported error.
    last_error_pos: Option<usize>,
    /// An error was reported since this flag was last cleared (per definition).
    errors_here: bool,
    /// Identifiers of malformed type patterns in the current definition.
    lost_names: Vec<Name>,
}

/// Words that are never type or variable names.
const KEYWORDS: &[&str] = &[
    "if",
    "else",
    "for",
    "while",
    "do",
    "return",
    "with",
    "use",
    "import",
    "typedef",
    "module",
    "class",
    "export",
    "provide",
    "specialize",
    "external",
    "inline",
    "noinline",
    "break",
    "continue",
    "goto",
    "genarray",
    "modarray",
    "fold",
    "foldfix",
    "step",
    "width",
    "all",
    "except",
    "true",
    "false",
];

/// Names that start a statement or definition, used to resynchronise after errors.
const ITEM_STARTS: &[&str] = &[
    "inline",
    "noinline",
    "use",
    "import",
    "typedef",
    "module",
    "class",
    "export",
    "provide",
    "specialize",
    "external",
    "void",
];

impl<'a> Parser<'a> {
    fn new(tokens: &'a [Token], diags: &'a mut Diagnostics) -> Parser<'a> {
        // Typedef names must be known before their first use to parse casts and
        // declarations, so collect them up front.
        let mut typedefs = HashSet::default();
        for (i, t) in tokens.iter().enumerate() {
            if t.is("typedef") {
                // typedef TYPE NAME ; — the name is the identifier before the `;`.
                let window = &tokens[i..tokens.len().min(i + 64)];
                if let Some(semi) = window.iter().position(|t| t.is_punct(";"))
                    && let Some(name) = window.get(semi.wrapping_sub(1)).filter(|t| t.is_ident())
                {
                    typedefs.insert(name.text.clone());
                }
            }
        }
        Parser {
            tokens,
            pos: 0,
            diags,
            typedefs,
            depth: 0,
            links: 0,
            no_pipe: false,
            depth_reported: false,
            last_error_pos: None,
            errors_here: false,
            lost_names: Vec::new(),
        }
    }

    // ------------------------------------------------------------ token helpers

    fn peek(&self) -> &Token {
        self.nth(0)
    }

    fn nth(&self, n: usize) -> &Token {
        let last = self.tokens.len().saturating_sub(1);
        &self.tokens[(self.pos + n).min(last)]
    }

    fn at_eof(&self) -> bool {
        self.peek().is_eof()
    }

    /// The current token, and moves past it (not past the end). A reference:
    /// a clone per token was a tenth of parsing the library.
    fn bump(&mut self) -> &'a Token {
        let tokens: &'a [Token] = self.tokens;
        let t = &tokens[self.pos.min(tokens.len().saturating_sub(1))];
        if !t.is_eof() {
            self.pos += 1;
        }
        t
    }

    fn at(&self, text: &str) -> bool {
        self.peek().is(text)
    }

    fn eat(&mut self, text: &str) -> bool {
        if self.at(text) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn prev_span(&self) -> Span {
        if self.pos == 0 { self.peek().span } else { self.tokens[self.pos - 1].span }
    }

    fn error_at(&mut self, diagnostic: Diagnostic) {
        self.errors_here = true;
        self.last_error_pos = Some(self.pos);
        self.diags.push(diagnostic);
    }

    /// Reports "expected X, found Y" at the current token.
    fn error_expected(&mut self, what: &str) {
        // A second complaint about the token that already caused an error is noise.
        if self.last_error_pos == Some(self.pos) {
            return;
        }
        let t = self.peek().clone();
        // After an invalid token the lexer's own message says more.
        if let TokenKind::Invalid(d) = &t.kind {
            // Already reported by the preprocessor.
            let d = (**d).clone();
            self.error_at(d);
            return;
        }
        let span = if t.is_eof() { self.prev_span().end_point() } else { t.span };
        self.error_at(
            Diagnostic::error(codes::UNEXPECTED_TOKEN, format!("expected {what}, found {}", t.describe()))
                .at(span, format!("expected {what}")),
        );
    }

    fn expect(&mut self, text: &str) -> bool {
        if self.eat(text) {
            return true;
        }
        self.error_expected(&format!("`{text}`"));
        false
    }

    fn ident(&mut self, what: &str) -> Option<Target> {
        if self.peek().is_ident() {
            let t = self.bump();
            Some(Target { name: t.text.clone(), span: t.span })
        } else {
            let t = self.peek().clone();
            let span = if t.is_eof() { self.prev_span().end_point() } else { t.span };
            self.error_at(
                Diagnostic::error(codes::EXPECTED_IDENTIFIER, format!("expected {what}, found {}", t.describe()))
                    .at(span, format!("expected {what}")),
            );
            None
        }
    }

    /// Skips tokens up to and including the next `;` at this nesting level, or up to
    /// (not including) an unbalanced `}`.
    fn recover_statement(&mut self) {
        let mut depth = 0i32;
        while !self.at_eof() {
            let t = self.peek();
            if t.is_punct("(") || t.is_punct("[") || t.is_punct("{") {
                depth += 1;
            } else if t.is_punct(")") || t.is_punct("]") {
                depth -= 1;
            } else if t.is_punct("}") {
                if depth <= 0 {
                    return;
                }
                depth -= 1;
            } else if t.is_punct(";") && depth <= 0 {
                self.bump();
                return;
            }
            self.bump();
        }
    }

    /// Skips to the start of the next top-level definition.
    fn recover_item(&mut self) {
        let mut depth = 0i32;
        while !self.at_eof() {
            let t = self.peek();
            if t.is_punct("{") {
                depth += 1;
            } else if t.is_punct("}") {
                depth -= 1;
                if depth <= 0 {
                    self.bump();
                    return;
                }
            } else if t.is_punct(";") && depth <= 0 {
                self.bump();
                return;
            } else if depth <= 0 && t.line_start && (ITEM_STARTS.contains(&t.text.as_str()) || self.starts_type()) {
                return;
            }
            self.bump();
        }
    }

    fn enter(&mut self) -> bool {
        self.depth += 1;
        if self.depth > MAX_DEPTH || self.depth + self.links > MAX_EXPR_DEPTH {
            self.too_deep();
            return false;
        }
        true
    }

    /// One more link of a chain (an operator applied to the expression so
    /// far, a selection from it): `false` when the expression would be
    /// deeper than [`MAX_EXPR_DEPTH`] (reported once). The caller gives its
    /// links back when the chain ends (`self.links -= n`).
    fn link(&mut self) -> bool {
        if self.depth + self.links >= MAX_EXPR_DEPTH {
            self.too_deep();
            return false;
        }
        self.links += 1;
        true
    }

    /// Parses with `f` what a chain too deep goes on with, which is read but
    /// not kept: its own operands nest only as deep as they do themselves
    /// (and parse without further errors where they are well formed).
    fn discarded<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> T {
        let links = std::mem::take(&mut self.links);
        let kept = f(self);
        self.links = links;
        kept
    }

    fn too_deep(&mut self) {
        if self.depth_reported {
            return;
        }
        self.depth_reported = true;
        let span = self.peek().span;
        let message = if self.depth > MAX_DEPTH {
            format!("nested more than {MAX_DEPTH} levels deep")
        } else {
            format!("expression more than {MAX_EXPR_DEPTH} levels deep")
        };
        let mut d = Diagnostic::error(codes::NESTING_TOO_DEEP, message)
            .at(span, "here")
            .with_hint("split the expression into several assignments");
        if self.links > 0 {
            d = d.with_note("each operator of a chain such as `a - b - c` (and each selection of `a[i][j]`) nests the expression so far one level deeper");
        }
        self.error_at(d);
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    // ------------------------------------------------------------ types

    fn is_type_name(&self, t: &Token) -> bool {
        t.is_ident()
            && (BaseType::from_name(&t.text).is_some()
                || t.text == "void"
                || t.text == "string"
                || self.typedefs.contains(&t.text))
    }

    fn starts_type(&self) -> bool {
        self.is_type_name(self.peek())
    }

    /// Whether the tokens ahead read `TYPE NAME` (a declaration), also for type
    /// names nobody defined (so that they are reported as unknown types).
    fn declaration_ahead(&self) -> bool {
        let t = self.peek();
        if !t.is_ident() || KEYWORDS.contains(&t.text.as_str()) {
            return false;
        }
        let mut k = 1;
        if self.nth(1).is_punct("[") {
            let mut depth = 0;
            loop {
                let t = self.nth(k);
                if t.is_eof() {
                    return false;
                }
                if t.is_punct("[") {
                    depth += 1;
                } else if t.is_punct("]") {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                k += 1;
            }
            k += 1;
        }
        let name = self.nth(k);
        let after = self.nth(k + 1);
        let name_ok = name.is_ident() && !KEYWORDS.contains(&name.text.as_str());
        // `a[i] = …` is an assignment, not a declaration: a declared name follows the type.
        name_ok && (after.is_punct(";") || after.is_punct(",") || after.is_punct("=")) && !after.is_punct("==")
    }

    /// A type where the grammar requires one: an unknown name is taken as a type
    /// name (and reported as unknown later), not as a syntax error.
    fn type_expr_lenient(&mut self) -> Option<TypeExpr> {
        let t = self.peek().clone();
        if t.is_ident() && !self.is_type_name(&t) && !KEYWORDS.contains(&t.text.as_str()) {
            self.bump();
            let mut span = t.span;
            let mut shape = ShapeSpec::Scalar;
            if self.at("[") {
                self.bump();
                shape = self.shape_spec();
                span = span.to(self.peek().span);
                self.expect("]");
            }
            return Some(TypeExpr { name: TypeName::Named(t.text.clone()), shape, span });
        }
        self.type_expr()
    }

    fn type_expr(&mut self) -> Option<TypeExpr> {
        let t = self.peek().clone();
        if !self.is_type_name(&t) {
            let span = if t.is_eof() { self.prev_span().end_point() } else { t.span };
            self.error_at(
                Diagnostic::error(codes::EXPECTED_TYPE, format!("expected a type, found {}", t.describe()))
                    .at(span, "expected a type"),
            );
            return None;
        }
        self.bump();
        let name = match BaseType::from_name(&t.text) {
            Some(b) => TypeName::Base(b),
            None if t.text == "void" => TypeName::Void,
            None if t.text == "string" => TypeName::String,
            None => TypeName::Named(t.text.clone()),
        };
        let mut span = t.span;
        let mut shape = ShapeSpec::Scalar;
        if self.at("[") {
            self.bump();
            shape = self.shape_spec();
            span = span.to(self.peek().span);
            self.expect("]");
        }
        Some(TypeExpr { name, shape, span })
    }

    /// The part of a type between `[` and `]`. A malformed pattern is reported, its
    /// tokens skipped, and `[*]` assumed, so the definition survives.
    fn shape_spec(&mut self) -> ShapeSpec {
        let start = self.pos;
        match self.shape_spec_inner() {
            Some(s) => s,
            None => {
                // Remember the names the broken pattern would have bound.
                let mut k = start;
                while k < self.tokens.len() && !self.tokens[k].is_punct("]") && !self.tokens[k].is_eof() {
                    if self.tokens[k].is_ident() {
                        self.lost_names.push(self.tokens[k].text.clone());
                    }
                    k += 1;
                }
                let mut depth = 0usize;
                while !self.at_eof() {
                    if self.at("[") {
                        depth += 1;
                    } else if self.at("]") {
                        if depth == 0 {
                            break;
                        }
                        depth -= 1;
                    } else if self.at(")") || self.at("{") || self.at(";") {
                        break;
                    }
                    self.bump();
                }
                ShapeSpec::Any
            }
        }
    }

    fn shape_spec_inner(&mut self) -> Option<ShapeSpec> {
        if self.at("]") {
            return Some(ShapeSpec::Scalar);
        }
        if self.at("*") && self.nth(1).is_punct("]") {
            self.bump();
            return Some(ShapeSpec::Any);
        }
        if self.at("+") && self.nth(1).is_punct("]") {
            self.bump();
            return Some(ShapeSpec::NonScalar);
        }
        let mut dims = Vec::new();
        loop {
            let t = self.peek().clone();
            let dim = if t.is_punct(".") {
                self.bump();
                DimPattern::Dot
            } else if t.is_punct("+") {
                self.bump();
                DimPattern::Plus
            } else if t.is_punct("*") {
                self.bump();
                DimPattern::Star
            } else if t.kind == TokenKind::Int || t.is_ident() {
                self.bump();
                let count = if t.kind == TokenKind::Int {
                    match parse_int_literal(&t.text) {
                        Some((v, _)) if v <= i64::MAX as i128 => DimCount::Known(v as i64),
                        _ => {
                            self.error_at(
                                Diagnostic::error(
                                    codes::BAD_TYPE_PATTERN,
                                    format!("`{}` is not a valid extent", t.text),
                                )
                                .at(t.span, ""),
                            );
                            DimCount::Known(0)
                        }
                    }
                } else if t.text == "_" {
                    DimCount::Anonymous
                } else if self.at(">") {
                    // d>0:shp
                    self.bump();
                    let bound = self.peek().clone();
                    let Some((v, _)) = (bound.kind == TokenKind::Int).then(|| parse_int_literal(&bound.text)).flatten()
                    else {
                        self.error_at(
                            Diagnostic::error(codes::BAD_TYPE_PATTERN, "expected a number after `>` in a type pattern")
                                .at(bound.span, ""),
                        );
                        return None;
                    };
                    self.bump();
                    DimCount::AtLeast(t.text.clone(), v as i64 + 1)
                } else {
                    DimCount::Var(t.text.clone())
                };
                if self.eat(":") {
                    let name_tok = self.peek().clone();
                    if !name_tok.is_ident() {
                        let span = name_tok.span;
                        self.error_at(
                            Diagnostic::error(
                                codes::BAD_TYPE_PATTERN,
                                format!(
                                    "expected a name for the shape vector after `:`, found {}",
                                    name_tok.describe()
                                ),
                            )
                            .at(span, "")
                            .with_hint("write e.g. `int[n:shp]`, or `int[n:_]` to leave it unnamed"),
                        );
                        return None;
                    }
                    self.bump();
                    let name = (name_tok.text != "_").then(|| name_tok.text.clone());
                    DimPattern::Vector { count, name }
                } else {
                    match count {
                        DimCount::Known(k) => DimPattern::Known(k),
                        DimCount::Var(v) => DimPattern::Var(v),
                        DimCount::Anonymous => DimPattern::Dot,
                        DimCount::AtLeast(..) => {
                            self.error_at(
                                Diagnostic::error(
                                    codes::BAD_TYPE_PATTERN,
                                    "a constrained count needs `:name` after it",
                                )
                                .at(t.span, "")
                                .with_hint("write e.g. `int[d>0:shp]`"),
                            );
                            return None;
                        }
                    }
                }
            } else {
                let t = self.peek().clone();
                self.error_at(
                    Diagnostic::error(codes::BAD_TYPE_PATTERN, format!("expected an extent, found {}", t.describe()))
                        .at(t.span, "")
                        .with_hint("extents are `3`, `.`, `n`, `n:shp`, `+` or `*`"),
                );
                return None;
            };
            dims.push(dim);
            if !self.eat(",") {
                break;
            }
        }
        Some(ShapeSpec::Dims(dims))
    }

    // ------------------------------------------------------------ items

    fn item(&mut self) -> Option<Item> {
        let t = self.peek().clone();
        match t.text.as_str() {
            "use" | "import" if t.is_ident() => self.import(),
            "module" | "class" if t.is_ident() => {
                self.bump();
                let name = self.ident("a module name")?;
                self.expect(";");
                Some(Item::ModuleHeader { name: name.name, span: t.span.to(name.span) })
            }
            "export" | "provide" if t.is_ident() => {
                self.recover_statement();
                Some(Item::Export { span: t.span })
            }
            "typedef" if t.is_ident() => self.typedef(),
            "specialize" if t.is_ident() => self.specialize(),
            "external" | "objdef" | "classtype" | "struct" if t.is_ident() => {
                let start = self.pos;
                self.recover_item();
                let end = self.prev_span();
                let span = t.span.to(end);
                let _ = start;
                Some(Item::Unsupported { what: format!("`{}` declarations", t.text), span })
            }
            _ if t.is("inline") || t.is("noinline") || self.starts_type() || self.function_ahead() => self.function(),
            _ => {
                let span = if t.is_eof() { self.prev_span() } else { t.span };
                let mut d = Diagnostic::error(
                    codes::BAD_ITEM,
                    format!("expected a function definition, found {}", t.describe()),
                )
                .at(span, "");
                if t.is_ident() && self.nth(1).is_punct("(") {
                    d = d.with_hint(format!(
                        "a function definition starts with its result type, e.g. `int {}(int x) {{ … }}`",
                        t.text
                    ));
                } else if t.is_ident() && (self.nth(1).is_punct("=") || self.nth(1).is_punct("[")) {
                    d = d.with_hint("statements belong inside a function body, e.g. `int main() { … }`");
                }
                self.error_at(d);
                self.recover_item();
                None
            }
        }
    }

    fn import(&mut self) -> Option<Item> {
        let kw = self.bump();
        let kind = if kw.text == "use" { ImportKind::Use } else { ImportKind::Import };
        let module = self.ident("a module name")?;
        if !self.expect(":") {
            self.recover_statement();
            return None;
        }
        let selection = if self.eat("all") {
            if self.eat("except") { ImportSelection::AllExcept(self.name_set()?) } else { ImportSelection::All }
        } else if self.at("{") {
            ImportSelection::Only(self.name_set()?)
        } else {
            self.error_expected("`all` or `{ names }`");
            self.recover_statement();
            return None;
        };
        let end = self.peek().span;
        self.expect(";");
        Some(Item::Import(Import {
            kind,
            module: module.name,
            module_span: module.span,
            selection,
            span: kw.span.to(end),
        }))
    }

    /// `{ a, +, b }`: names or operator symbols.
    fn name_set(&mut self) -> Option<Vec<(Name, Span)>> {
        if !self.expect("{") {
            self.recover_statement();
            return None;
        }
        let mut names = Vec::new();
        while !self.at("}") && !self.at_eof() {
            let t = self.bump();
            if matches!(t.kind, TokenKind::Ident | TokenKind::Punct) && !t.is_punct(",") {
                names.push((t.text.clone(), t.span));
            }
            if !self.eat(",") {
                break;
            }
        }
        self.expect("}");
        Some(names)
    }

    fn typedef(&mut self) -> Option<Item> {
        let kw = self.bump();
        let ty = self.type_expr();
        let name = self.ident("the new type's name");
        let end = self.peek().span;
        self.expect(";");
        match (ty, name) {
            (Some(ty), Some(name)) => Some(Item::Typedef(Typedef { name: name.name, ty, span: kw.span.to(end) })),
            _ => {
                self.recover_statement();
                None
            }
        }
    }

    fn specialize(&mut self) -> Option<Item> {
        let kw = self.bump();
        let mut results = Vec::new();
        loop {
            results.push(self.type_expr()?);
            if !self.eat(",") {
                break;
            }
        }
        let name = self.fun_name()?;
        self.expect("(");
        let mut params = Vec::new();
        while !self.at(")") && !self.at_eof() {
            params.push(self.type_expr()?);
            if self.peek().is_ident() {
                self.bump();
            }
            if !self.eat(",") {
                break;
            }
        }
        self.expect(")");
        let end = self.peek().span;
        self.expect(";");
        Some(Item::Specialize(Specialize { name: name.0, results, params, span: kw.span.to(end) }))
    }

    /// A function name: an identifier or an operator symbol.
    fn fun_name(&mut self) -> Option<(Name, Span, bool)> {
        let t = self.peek().clone();
        // The papers write operator names in parentheses: `int[.] (++) (int[.] a, …)`.
        if t.is_punct("(")
            && self.nth(1).kind == TokenKind::Punct
            && is_operator_symbol(&self.nth(1).text)
            && self.nth(2).is_punct(")")
        {
            self.bump();
            let op = self.bump();
            self.bump();
            return Some((op.text.clone(), op.span, true));
        }
        if t.is_ident() {
            self.bump();
            return Some((t.text, t.span, false));
        }
        if t.kind == TokenKind::Punct && is_operator_symbol(&t.text) {
            self.bump();
            return Some((t.text, t.span, true));
        }
        self.error_expected("a function name");
        None
    }

    /// `NAME NAME (` or `NAME[...] NAME (`: a definition whose result type is unknown.
    fn function_ahead(&self) -> bool {
        if !self.peek().is_ident() || KEYWORDS.contains(&self.peek().text.as_str()) {
            return false;
        }
        let mut k = 1;
        if self.nth(1).is_punct("[") {
            while !self.nth(k).is_punct("]") && !self.nth(k).is_eof() && k < 64 {
                k += 1;
            }
            k += 1;
        }
        let name = self.nth(k);
        (name.is_ident() || (name.kind == TokenKind::Punct && is_operator_symbol(&name.text)))
            && self.nth(k + 1).is_punct("(")
            || (name.is_punct("(") && self.nth(k + 2).is_punct(")") && self.nth(k + 3).is_punct("("))
    }

    fn function(&mut self) -> Option<Item> {
        self.errors_here = false;
        self.lost_names.clear();
        let start = self.peek().span;
        let inline = if self.eat("inline") {
            Inline::Inline
        } else if self.eat("noinline") {
            Inline::Noinline
        } else {
            Inline::Default
        };
        let mut results = Vec::new();
        loop {
            let Some(ty) = self.type_expr_lenient() else {
                self.recover_item();
                return None;
            };
            if ty.name != TypeName::Void {
                results.push(ty);
            }
            if !self.eat(",") {
                break;
            }
        }
        let Some((name, name_span, is_operator)) = self.fun_name() else {
            self.recover_item();
            return None;
        };
        if !self.at("(") {
            // `int x;` at the top level is a global, which SaC does not have.
            let mut d = Diagnostic::error(codes::BAD_ITEM, format!("expected `(` after the function name `{name}`"))
                .at(self.peek().span, "expected `(`");
            if self.at(";") || self.at("=") {
                d = d.with_note("SaC has no global variables; use a `#define` or a function returning the value");
            }
            self.error_at(d);
            self.recover_item();
            return None;
        }
        self.bump();
        let mut params: Vec<Param> = Vec::new();
        if self.at("void") && self.nth(1).is_punct(")") {
            self.bump();
        }
        while !self.at(")") && !self.at_eof() {
            let Some(ty) = self.type_expr_lenient() else {
                self.recover_item();
                return None;
            };
            let by_ref = self.eat("&");
            let Some(pname) = self.ident("a parameter name") else {
                self.recover_item();
                return None;
            };
            let span = ty.span.to(pname.span);
            params.push(Param { ty, name: pname.name, name_span: pname.span, by_ref, span });
            if !self.eat(",") {
                break;
            }
        }
        if !self.expect(")") {
            self.recover_item();
            return None;
        }
        let mut conditions = Vec::new();
        if self.eat("|") {
            loop {
                conditions.push(self.expr_no_pipe_level());
                if !self.eat(",") {
                    break;
                }
            }
        }
        if !self.at("{") {
            self.error_expected("`{` to start the function body");
            self.recover_item();
            return None;
        }
        let body = self.block();
        let span = start.to(body.span);
        let syntax_errors = self.errors_here;
        let lost_names = std::mem::take(&mut self.lost_names);
        Some(Item::Function(FunDef {
            name,
            name_span,
            inline,
            results,
            params,
            conditions,
            body,
            is_operator,
            syntax_errors,
            lost_names,
            span,
        }))
    }

    /// A condition expression in `| a > 0, …`: a full expression, but `,` separates.
    fn expr_no_pipe_level(&mut self) -> Expr {
        self.expr()
    }
}

/// Operator symbols that can name a function.
pub fn is_operator_symbol(text: &str) -> bool {
    matches!(
        text,
        "+" | "-"
            | "*"
            | "/"
            | "%"
            | "=="
            | "!="
            | "<"
            | "<="
            | ">"
            | ">="
            | "++"
            | "--"
            | "!"
            | "~"
            | "&"
            | "|"
            | "^"
            | "<<"
            | ">>"
            | "&&"
            | "||"
    )
}

/// Parses an integer literal's text into its value and type (suffix decides).
pub fn parse_int_literal(text: &str) -> Option<(i128, LiteralType)> {
    let (digits, suffix, radix) = if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        let split = hex.find(|c: char| !c.is_ascii_hexdigit()).unwrap_or(hex.len());
        (&hex[..split], &hex[split..], 16)
    } else {
        let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
        (&text[..split], &text[split..], 10)
    };
    if digits.is_empty() {
        return None;
    }
    let value = i128::from_str_radix(digits, radix).ok()?;
    let ty = match suffix.to_ascii_lowercase().as_str() {
        "" | "i" => LiteralType::Base(BaseType::Int),
        "b" => LiteralType::Base(BaseType::Byte),
        "s" => LiteralType::Base(BaseType::Short),
        "l" => LiteralType::Base(BaseType::Long),
        "ll" => LiteralType::Base(BaseType::LongLong),
        "ub" => LiteralType::Base(BaseType::UByte),
        "us" => LiteralType::Base(BaseType::UShort),
        "u" | "ui" => LiteralType::Base(BaseType::UInt),
        "ul" => LiteralType::Base(BaseType::ULong),
        "ull" => LiteralType::Base(BaseType::ULongLong),
        "d" => LiteralType::Real(BaseType::Double),
        "f" => LiteralType::Real(BaseType::Float),
        _ => return None,
    };
    Some((value, ty))
}

/// What an integer literal's suffix makes of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LiteralType {
    Base(BaseType),
    /// `1d`, `2f`: an integer written as a real literal.
    Real(BaseType),
}

/// Parses a real literal's text (decimal or hex float, optional `f`/`d` suffix).
pub fn parse_real_literal(text: &str) -> Option<(f64, BaseType)> {
    let (body, ty) =
        if let Some(b) = text.strip_suffix(['f', 'F']).filter(|_| !is_hex(text) || text.contains(['p', 'P'])) {
            (b, BaseType::Float)
        } else if let Some(b) = text.strip_suffix(['d', 'D']).filter(|_| !is_hex(text)) {
            (b, BaseType::Double)
        } else {
            (text, BaseType::Double)
        };
    let value = if is_hex(body) { parse_hex_float(body)? } else { body.parse::<f64>().ok()? };
    Some((value, ty))
}

fn is_hex(text: &str) -> bool {
    text.starts_with("0x") || text.starts_with("0X")
}

fn parse_hex_float(text: &str) -> Option<f64> {
    let body = &text[2..];
    let (mantissa, exponent) = match body.find(['p', 'P']) {
        Some(i) => (&body[..i], body[i + 1..].parse::<i32>().ok()?),
        None => (body, 0),
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut value = 0f64;
    for c in int_part.chars() {
        value = value * 16.0 + c.to_digit(16)? as f64;
    }
    let mut scale = 1.0 / 16.0;
    for c in frac_part.chars() {
        value += c.to_digit(16)? as f64 * scale;
        scale /= 16.0;
    }
    Some(value * 2f64.powi(exponent))
}

#[cfg(test)]
mod tests;

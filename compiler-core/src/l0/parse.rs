//! L0's lexer and parser (seed 004 §2: Fig. 2 and the language reference).
//!
//! Comments run from `//` to the end of the line; layout carries no meaning. `let`,
//! `if`, `loop` and `fn` extend as far to the right as possible. A syntax error
//! skips to the next `fun`, so every function is checked.
//!
//! `<-` is read as two tokens (`<` then `-` right after it) so that `x < -1`
//! stays a comparison; only a let-with asks for the pair.

use super::ast::*;
use crate::diagnostics::{self as codes, Diagnostic, Diagnostics};
use crate::span::{FileId, Span};
use crate::syntax::ast::Name;

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(Name),
    Int(i64),
    Real(f64),
    Char(char),
    Str(String),
    /// Punctuation and operators.
    P(&'static str),
    Eof,
}

#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
    span: Span,
}

const PUNCT: &[&str] = &[
    "=>", "==", "!=", "<=", ">=", "<<", ">>", "&&", "||", "(", ")", "[", "]", "{", "}", ",", "=", "<", ">", "+", "-",
    "*", "/", "%", "&", "|", "^", "!",
];

fn lex(file: FileId, text: &str, diags: &mut Diagnostics) -> Vec<Token> {
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    let span = |a: usize, b: usize| Span::new(file, a, b);
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if text[i..].starts_with("//") {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        let start = i;
        if c.is_ascii_alphabetic() || c == b'_' {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            out.push(Token { tok: Tok::Ident(Name::new(&text[start..i])), span: span(start, i) });
            continue;
        }
        // Haskell's hexadecimal and octal integers: `0x1F`, `0o17`.
        let radix = match bytes.get(i + 1) {
            Some(b'x' | b'X') if c == b'0' => 16,
            Some(b'o' | b'O') if c == b'0' => 8,
            _ => 10,
        };
        if radix != 10 && bytes.get(i + 2).is_some_and(|d| (*d as char).is_digit(radix)) {
            i += 2;
            while i < bytes.len() && (bytes[i] as char).is_digit(radix) {
                i += 1;
            }
            let v = i64::from_str_radix(&text[start + 2..i], radix).ok().filter(|v| *v <= i32::MAX as i64 + 1);
            match v {
                Some(v) => out.push(Token { tok: Tok::Int(v), span: span(start, i) }),
                None => diags.push(
                    Diagnostic::error(codes::BAD_NUMBER, format!("cannot read the number `{}`", &text[start..i]))
                        .at(span(start, i), "L0's `int` holds 32 bits"),
                ),
            }
            continue;
        }
        if c.is_ascii_digit() {
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            let mut real = false;
            if i + 1 < bytes.len() && bytes[i] == b'.' && bytes[i + 1].is_ascii_digit() {
                real = true;
                i += 1;
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
            }
            if i < bytes.len() && (bytes[i] == b'e' || bytes[i] == b'E') {
                let mut j = i + 1;
                if j < bytes.len() && (bytes[j] == b'+' || bytes[j] == b'-') {
                    j += 1;
                }
                if j < bytes.len() && bytes[j].is_ascii_digit() {
                    real = true;
                    i = j;
                    while i < bytes.len() && bytes[i].is_ascii_digit() {
                        i += 1;
                    }
                }
            }
            let s = &text[start..i];
            let tok = if real {
                s.parse().ok().map(Tok::Real)
            } else {
                s.parse::<i64>().ok().filter(|v| *v <= i32::MAX as i64 + 1).map(Tok::Int)
            };
            match tok {
                Some(t) => out.push(Token { tok: t, span: span(start, i) }),
                None => diags.push(
                    Diagnostic::error(codes::BAD_NUMBER, format!("cannot read the number `{s}`"))
                        .at(span(start, i), "L0's `int` holds 32 bits"),
                ),
            }
            continue;
        }
        if c == b'\'' || c == b'"' {
            let quote = c;
            i += 1;
            let mut chars = String::new();
            let mut ok = false;
            // An escape or character already reported: the literal still
            // becomes a token, so that parsing goes on without more errors.
            let mut reported = false;
            while i < bytes.len() && bytes[i] != b'\n' {
                let ch = text[i..].chars().next().unwrap_or('\0');
                if ch as u32 == quote as u32 {
                    i += 1;
                    ok = true;
                    break;
                }
                if ch == '\\' {
                    let (v, len) = haskell_escape(&text[i + 1..]);
                    let at = span(i, i + 1 + len);
                    let wrong = match v {
                        Escape::Char(v) if v <= 255 => {
                            chars.push(char::from(v as u8));
                            None
                        }
                        Escape::Empty if quote == b'"' => None,
                        Escape::Char(v) => Some(
                            Diagnostic::error(
                                codes::BAD_ESCAPE,
                                format!("the escape `{}` is {v}", &text[i..i + 1 + len]),
                            )
                            .at(at, "L0's `char` holds one byte (0 to 255)"),
                        ),
                        Escape::Empty | Escape::Unknown => Some(
                            Diagnostic::error(codes::BAD_ESCAPE, format!("unknown escape `{}`", &text[i..i + 1 + len]))
                                .at(at, "escapes are Haskell's: \\n \\t \\65 \\x41 \\o101 \\a \\& …"),
                        ),
                    };
                    if let Some(d) = wrong {
                        reported = true;
                        diags.push(d);
                    }
                    i += 1 + len;
                    continue;
                }
                if ch as u32 > 255 {
                    reported = true;
                    diags.push(
                        Diagnostic::error(
                            codes::BAD_CHAR_LITERAL,
                            format!("`{ch}` (U+{:04X}) does not fit L0's `char`", ch as u32),
                        )
                        .at(span(i, i + ch.len_utf8()), "a `char` holds one byte (0 to 255)"),
                    );
                }
                chars.push(ch);
                i += ch.len_utf8();
            }
            if !ok {
                let code = if quote == b'"' { codes::UNTERMINATED_STRING } else { codes::BAD_CHAR_LITERAL };
                diags.push(Diagnostic::error(code, "literal without its closing quote").at(span(start, i), ""));
                continue;
            }
            if quote == b'"' {
                out.push(Token { tok: Tok::Str(chars), span: span(start, i) });
            } else {
                let mut it = chars.chars();
                match (it.next(), it.next()) {
                    _ if reported => out.push(Token { tok: Tok::Char('\0'), span: span(start, i) }),
                    (Some(ch), None) => out.push(Token { tok: Tok::Char(ch), span: span(start, i) }),
                    _ => diags.push(
                        Diagnostic::error(codes::BAD_CHAR_LITERAL, "a character literal holds exactly one character")
                            .at(span(start, i), ""),
                    ),
                }
            }
            continue;
        }
        match PUNCT.iter().find(|p| text[i..].starts_with(**p)) {
            Some(p) => {
                i += p.len();
                out.push(Token { tok: Tok::P(p), span: span(start, i) });
            }
            None => {
                let ch = text[i..].chars().next().unwrap_or('?');
                diags.push(
                    Diagnostic::error(codes::UNEXPECTED_CHAR, format!("unexpected character `{ch}`"))
                        .at(span(i, i + ch.len_utf8()), ""),
                );
                i += ch.len_utf8();
            }
        }
    }
    out.push(Token { tok: Tok::Eof, span: span(text.len(), text.len()) });
    out
}

/// Words that cannot name variables or functions.
pub const KEYWORDS: &[&str] = &[
    "fun", "let", "in", "if", "then", "else", "loop", "for", "do", "with", "fn", "op", "not", "true", "false", "int",
    "real", "bool", "char", "pow", "map", "reduce", "scan", "filter",
];

struct Parser<'d> {
    toks: Vec<Token>,
    pos: usize,
    diags: &'d mut Diagnostics,
    /// Nesting ([`MAX_DEPTH`]).
    depth: usize,
    /// Operators of the left-associative chains being parsed ([`MAX_EXPR_DEPTH`]).
    links: usize,
    /// The position of an integer literal right after a unary minus: the
    /// one place `2147483648` may be written (as `-2147483648`).
    negated_literal: Option<usize>,
}

/// A syntax error was reported; the caller skips to the next function.
struct Bail;

type P<T> = Result<T, Bail>;

const MAX_DEPTH: usize = 400;

/// Deepest expression tree: nesting plus the operators of left-associative
/// chains (`x - 1 - 1 - …`, each nesting the expression so far one level
/// deeper), which later stages recurse over (a chain of 20000 overflowed the
/// CLI's stack); SaC's bound, as both run on the same stacks.
const MAX_EXPR_DEPTH: usize = crate::syntax::parser::MAX_EXPR_DEPTH;

/// Parses an L0 program. Functions with syntax errors are left out (the errors
/// are reported; their headers, where those parsed, are kept in
/// [`Program::unparsed`]); the rest are returned.
pub fn parse_program(file: FileId, text: &str, diags: &mut Diagnostics) -> Program {
    let toks = lex(file, text, diags);
    let mut p = Parser { toks, pos: 0, diags, depth: 0, links: 0, negated_literal: None };
    let mut functions = Vec::new();
    let mut unparsed = Vec::new();
    while p.peek() != &Tok::Eof {
        if p.is_word("fun") {
            let mut header = None;
            match p.fundef(&mut header) {
                Ok(f) => functions.push(f),
                Err(Bail) => {
                    unparsed.extend(header);
                    // A bail leaves the nesting it was in: the next function starts afresh.
                    p.depth = 0;
                    p.links = 0;
                    p.skip_to_fun();
                }
            }
        } else {
            let span = p.span();
            p.diags.push(
                Diagnostic::error(codes::BAD_ITEM, format!("expected `fun`, found {}", p.describe()))
                    .at(span, "a program is a sequence of `fun` definitions"),
            );
            p.pos += 1;
            p.skip_to_fun();
        }
    }
    Program { functions, unparsed }
}

impl Parser<'_> {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos].tok
    }

    fn peek_at(&self, k: usize) -> &Tok {
        &self.toks[(self.pos + k).min(self.toks.len() - 1)].tok
    }

    fn span(&self) -> Span {
        self.toks[self.pos].span
    }

    fn prev_span(&self) -> Span {
        self.toks[self.pos.saturating_sub(1)].span
    }

    fn bump(&mut self) -> Token {
        let t = self.toks[self.pos].clone();
        if self.pos + 1 < self.toks.len() {
            self.pos += 1;
        }
        t
    }

    fn is_word(&self, w: &str) -> bool {
        matches!(self.peek(), Tok::Ident(n) if n == w)
    }

    fn is_p(&self, p: &str) -> bool {
        matches!(self.peek(), Tok::P(q) if *q == p)
    }

    fn eat_p(&mut self, p: &str) -> bool {
        if self.is_p(p) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn eat_word(&mut self, w: &str) -> bool {
        if self.is_word(w) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn describe(&self) -> String {
        match self.peek() {
            Tok::Ident(n) => format!("`{n}`"),
            Tok::Int(v) => format!("`{v}`"),
            Tok::Real(v) => format!("`{v}`"),
            Tok::Char(c) => format!("`{c:?}`"),
            Tok::Str(s) => format!("{s:?}"),
            Tok::P(p) => format!("`{p}`"),
            Tok::Eof => "the end of the file".into(),
        }
    }

    fn error<T>(&mut self, code: crate::diagnostics::Code, what: &str) -> P<T> {
        let span = self.span();
        let msg = format!("expected {what}, found {}", self.describe());
        self.diags.push(Diagnostic::error(code, msg).at(span, ""));
        Err(Bail)
    }

    fn expect_p(&mut self, p: &str) -> P<Span> {
        if self.is_p(p) { Ok(self.bump().span) } else { self.error(codes::UNEXPECTED_TOKEN, &format!("`{p}`")) }
    }

    fn expect_word(&mut self, w: &str) -> P<Span> {
        if self.is_word(w) { Ok(self.bump().span) } else { self.error(codes::UNEXPECTED_TOKEN, &format!("`{w}`")) }
    }

    fn ident(&mut self) -> P<(Name, Span)> {
        match self.peek().clone() {
            Tok::Ident(n) if !KEYWORDS.contains(&n.as_str()) => {
                let t = self.bump();
                Ok((n, t.span))
            }
            _ => self.error(codes::EXPECTED_IDENTIFIER, "a name"),
        }
    }

    fn skip_to_fun(&mut self) {
        while self.peek() != &Tok::Eof && !self.is_word("fun") {
            self.bump();
        }
    }

    /// A function definition; `header` gets its header once that is read
    /// (what is left of a function whose body has a syntax error).
    fn fundef(&mut self, header: &mut Option<FunHeader>) -> P<FunDef> {
        let start = self.expect_word("fun")?;
        let ret_start = self.span();
        let ret = self.ty()?;
        let ret_span = ret_start.to(self.prev_span());
        let (name, name_span) = self.ident()?;
        self.expect_p("(")?;
        let params = self.params()?;
        *header = Some(FunHeader { name: name.clone(), name_span, ret: ret.clone(), params: params.clone() });
        self.expect_p("=")?;
        let body = self.expr()?;
        Ok(FunDef { name, name_span, ret, ret_span, params, span: start.to(body.span), body })
    }

    /// `t1 v1, …, tn vn )` (the opening parenthesis already read).
    fn params(&mut self) -> P<Vec<Param>> {
        let mut params = Vec::new();
        if self.eat_p(")") {
            return Ok(params);
        }
        loop {
            let start = self.span();
            let ty = self.ty()?;
            if self.is_p("{") {
                let at = self.span();
                self.diags.push(
                    Diagnostic::error(codes::UNEXPECTED_TOKEN, "a parameter cannot be a tuple pattern")
                        .at(at, "")
                        .with_hint("take a tuple parameter `{t1, t2} p` and split it with `let {x, y} = p in …`"),
                );
                return Err(Bail);
            }
            let (name, span) = self.ident()?;
            params.push(Param { ty, name, span: start.to(span) });
            if self.eat_p(")") {
                return Ok(params);
            }
            self.expect_p(",")?;
        }
    }

    fn ty(&mut self) -> P<Type> {
        if self.eat_p("*") {
            self.expect_p("[")?;
            let e = self.ty()?;
            self.expect_p("]")?;
            return Ok(Type::array(e, Uniqueness::Unique));
        }
        if self.eat_p("[") {
            let e = self.ty()?;
            self.expect_p("]")?;
            return Ok(Type::array(e, Uniqueness::Nonunique));
        }
        if self.eat_p("{") {
            let mut ts = Vec::new();
            if self.eat_p("}") {
                return Ok(Type::Tuple(ts));
            }
            loop {
                ts.push(self.ty()?);
                if self.eat_p("}") {
                    return Ok(Type::Tuple(ts));
                }
                self.expect_p(",")?;
            }
        }
        let t = match self.peek() {
            Tok::Ident(n) if n == "int" => Type::Int,
            Tok::Ident(n) if n == "real" => Type::Real,
            Tok::Ident(n) if n == "bool" => Type::Bool,
            Tok::Ident(n) if n == "char" => Type::Char,
            _ => {
                return self
                    .error(codes::EXPECTED_TYPE, "a type (`int`, `real`, `bool`, `char`, `[t]`, `*[t]`, `{t, …}`)");
            }
        };
        self.bump();
        Ok(t)
    }

    fn expr(&mut self) -> P<Expr> {
        self.binary_at(0)
    }

    fn binop(&self) -> Option<(BinOp, u8)> {
        let op = match self.peek() {
            Tok::P(p) => match *p {
                "||" => (BinOp::Or, 1),
                "&&" => (BinOp::And, 2),
                "=" | "==" => (BinOp::Eq, 3),
                "!=" => (BinOp::Ne, 3),
                "<" => (BinOp::Lt, 3),
                "<=" => (BinOp::Le, 3),
                ">" => (BinOp::Gt, 3),
                ">=" => (BinOp::Ge, 3),
                "|" => (BinOp::BitOr, 4),
                "^" => (BinOp::BitXor, 5),
                "&" => (BinOp::BitAnd, 6),
                "<<" => (BinOp::Shl, 7),
                ">>" => (BinOp::Shr, 7),
                "+" => (BinOp::Add, 8),
                "-" => (BinOp::Sub, 8),
                "*" => (BinOp::Mul, 9),
                "/" => (BinOp::Div, 9),
                "%" => (BinOp::Mod, 9),
                _ => return None,
            },
            Tok::Ident(n) if n == "pow" => (BinOp::Pow, 10),
            _ => return None,
        };
        Some(op)
    }

    /// Precedence climbing; `pow` is right-associative, the rest left.
    fn binary(&mut self, min: u8) -> P<Expr> {
        let mut lhs = self.unary()?;
        let start = self.links;
        while let Some((op, prec)) = self.binop() {
            if prec <= min {
                break;
            }
            if self.depth + self.links >= MAX_EXPR_DEPTH {
                return Err(self.too_deep());
            }
            // What follows in the chain, right operands included, is one
            // level deeper.
            self.links += 1;
            self.bump();
            let next = if op == BinOp::Pow { prec - 1 } else { prec };
            let rhs = self.binary_at(next)?;
            let span = lhs.span.to(rhs.span);
            lhs = Expr { kind: ExprKind::Bin(op, Box::new(lhs), Box::new(rhs)), span };
        }
        self.links = start;
        Ok(lhs)
    }

    /// [`Self::binary`] with a bound on nesting, so deep input cannot overflow the stack.
    fn binary_at(&mut self, min: u8) -> P<Expr> {
        self.depth += 1;
        if self.depth > MAX_DEPTH || self.depth + self.links > MAX_EXPR_DEPTH {
            return Err(self.too_deep());
        }
        let r = self.binary(min);
        self.depth -= 1;
        r
    }

    /// Reports an expression nested beyond [`MAX_DEPTH`] or deeper than
    /// [`MAX_EXPR_DEPTH`] (at the next token).
    fn too_deep(&mut self) -> Bail {
        let span = self.span();
        let d = if self.depth > MAX_DEPTH {
            Diagnostic::error(codes::NESTING_TOO_DEEP, "expression nested too deeply")
                .at(span, "")
                .with_note(format!(
                    "each `let … in` body, `if` branch, lambda, parenthesis and argument nests one level; L0 allows {MAX_DEPTH}"
                ))
                .with_hint("move part of the computation into a function of its own")
        } else {
            Diagnostic::error(codes::NESTING_TOO_DEEP, format!("expression more than {MAX_EXPR_DEPTH} levels deep"))
                .at(span, "")
                .with_note("each operator of a chain such as `a - b - c` nests the expression so far one level deeper")
                .with_hint("split the expression with `let`")
        };
        self.diags.push(d);
        Bail
    }

    fn unary(&mut self) -> P<Expr> {
        let start = self.span();
        if self.eat_p("-") {
            self.negated_literal = Some(self.pos);
            let e = self.binary_at(9)?;
            let span = start.to(e.span);
            return Ok(Expr { kind: ExprKind::Neg(Box::new(e)), span });
        }
        if self.eat_word("not") || self.eat_p("!") {
            let e = self.binary_at(9)?;
            let span = start.to(e.span);
            return Ok(Expr { kind: ExprKind::Not(Box::new(e)), span });
        }
        self.primary()
    }

    fn list(&mut self, close: &str) -> P<Vec<Expr>> {
        let mut v = Vec::new();
        if self.eat_p(close) {
            return Ok(v);
        }
        loop {
            v.push(self.expr()?);
            if self.eat_p(close) {
                return Ok(v);
            }
            self.expect_p(",")?;
        }
    }

    /// A primary expression and the indices after it. Seed 004 indexes
    /// variables only; another expression indexed (`iota(n)[0]`,
    /// `a[i][j]`, as Futhark allows) is bound to a variable first:
    /// `let 0indexed = iota(n) in 0indexed[0]` ([`INDEXED`], a name no
    /// program can write).
    fn primary(&mut self) -> P<Expr> {
        let mut e = self.primary_alone()?;
        while self.is_p("[") {
            self.bump();
            let indices = self.list("]")?;
            let span = e.span.to(self.prev_span());
            let name = Name::new(INDEXED);
            let index = Expr { kind: ExprKind::Index { array: name.clone(), array_span: e.span, indices }, span };
            let pat = Pat::Id(name, e.span);
            e = Expr { kind: ExprKind::Let { pat, value: Box::new(e), body: Box::new(index) }, span };
        }
        Ok(e)
    }

    fn primary_alone(&mut self) -> P<Expr> {
        let start = self.span();
        let tok = self.peek().clone();
        let kind = match tok {
            Tok::Int(v) => {
                if v > i64::from(i32::MAX) && self.negated_literal != Some(self.pos) {
                    self.diags.push(
                        Diagnostic::error(codes::BAD_NUMBER, format!("the number `{v}` does not fit in an `int`"))
                            .at(start, "L0's `int` holds 32 bits: at most 2147483647")
                            .with_hint("only `-2147483648` may be written with 2147483648"),
                    );
                }
                self.bump();
                ExprKind::Int(v)
            }
            Tok::Real(v) => {
                self.bump();
                ExprKind::Real(v)
            }
            Tok::Char(c) => {
                self.bump();
                ExprKind::Char(c)
            }
            Tok::Str(s) => {
                self.bump();
                let chars = s.chars().map(|c| Expr { kind: ExprKind::Char(c), span: start }).collect();
                ExprKind::Array(chars)
            }
            Tok::P("(") => {
                self.bump();
                let e = self.expr()?;
                if self.eat_p(",") {
                    // `(e1, …, en)`: the shape argument of `reshape`.
                    let mut items = vec![e];
                    items.extend(self.list(")")?);
                    ExprKind::Tuple(items)
                } else {
                    let end = self.expect_p(")")?;
                    return Ok(Expr { kind: e.kind, span: start.to(end) });
                }
            }
            Tok::P("{") => {
                self.bump();
                ExprKind::Tuple(self.list("}")?)
            }
            Tok::P("[") => {
                self.bump();
                ExprKind::Array(self.list("]")?)
            }
            Tok::Ident(w) => match w.as_str() {
                "true" => {
                    self.bump();
                    ExprKind::Bool(true)
                }
                "false" => {
                    self.bump();
                    ExprKind::Bool(false)
                }
                "if" => {
                    self.bump();
                    let c = self.expr()?;
                    self.expect_word("then")?;
                    let t = self.expr()?;
                    self.expect_word("else")?;
                    let e = self.expr()?;
                    let span = start.to(e.span);
                    return Ok(Expr { kind: ExprKind::If(Box::new(c), Box::new(t), Box::new(e)), span });
                }
                "let" => return self.let_expr(),
                "loop" => return self.loop_expr(),
                "map" | "reduce" | "scan" | "filter" => return self.soac(),
                w if KEYWORDS.contains(&w) => return self.error(codes::EXPECTED_EXPRESSION, "an expression"),
                _ => {
                    let (name, span) = self.ident()?;
                    if self.is_p("[") {
                        self.bump();
                        let indices = self.list("]")?;
                        ExprKind::Index { array: name, array_span: span, indices }
                    } else if self.is_p("(") {
                        self.bump();
                        let args = self.list(")")?;
                        ExprKind::Call { fun: name, fun_span: span, args }
                    } else {
                        ExprKind::Var(name)
                    }
                }
            },
            _ => return self.error(codes::EXPECTED_EXPRESSION, "an expression"),
        };
        Ok(Expr { kind, span: start.to(self.prev_span()) })
    }

    fn pat(&mut self) -> P<Pat> {
        let start = self.span();
        if self.eat_p("{") {
            let mut ps = Vec::new();
            if !self.eat_p("}") {
                loop {
                    // `{rows, }` (seed 004 Fig. 46a) leaves a component unnamed.
                    if self.is_p("}") {
                        let s = self.span();
                        ps.push(Pat::Id(Name::new("_"), s));
                        self.bump();
                        break;
                    }
                    ps.push(self.pat()?);
                    if self.eat_p("}") {
                        break;
                    }
                    self.expect_p(",")?;
                }
            }
            return Ok(Pat::Tuple(ps, start.to(self.prev_span())));
        }
        let (n, s) = self.ident()?;
        Ok(Pat::Id(n, s))
    }

    fn let_expr(&mut self) -> P<Expr> {
        let start = self.expect_word("let")?;
        // `let v[i] = e in b` is `let v = v with [i] <- e in b`.
        if matches!(self.peek(), Tok::Ident(_)) && matches!(self.peek_at(1), Tok::P("[")) {
            let (name, span) = self.ident()?;
            self.expect_p("[")?;
            let indices = self.list("]")?;
            self.expect_p("=")?;
            return self.let_with_rest(start, (name.clone(), span), (name, span), indices);
        }
        let pat = self.pat()?;
        self.expect_p("=")?;
        // `let b = a with [i] <- v in …`
        if let (Pat::Id(dest, dest_span), Tok::Ident(src), Tok::Ident(w)) =
            (&pat, self.peek().clone(), self.peek_at(1).clone())
            && w == "with"
            && !KEYWORDS.contains(&src.as_str())
        {
            let src_span = self.bump().span;
            self.bump();
            self.expect_p("[")?;
            let indices = self.list("]")?;
            let lt = self.expect_p("<")?;
            let minus = self.span();
            if !self.is_p("-") || minus.start != lt.end {
                return self.error(codes::UNEXPECTED_TOKEN, "`<-`");
            }
            self.bump();
            return self.let_with_rest(start, (dest.clone(), *dest_span), (src, src_span), indices);
        }
        let value = self.expr()?;
        self.expect_word("in")?;
        let body = self.expr()?;
        let span = start.to(body.span);
        Ok(Expr { kind: ExprKind::Let { pat, value: Box::new(value), body: Box::new(body) }, span })
    }

    /// A let-with's new value and body, after its `<-` (or `=`).
    fn let_with_rest(&mut self, start: Span, dest: (Name, Span), src: (Name, Span), indices: Vec<Expr>) -> P<Expr> {
        let value = self.expr()?;
        self.expect_word("in")?;
        let body = self.expr()?;
        let span = start.to(body.span);
        let kind = ExprKind::LetWith {
            dest: dest.0,
            dest_span: dest.1,
            src: src.0,
            src_span: src.1,
            indices,
            value: Box::new(value),
            body: Box::new(body),
        };
        Ok(Expr { kind, span })
    }

    fn loop_expr(&mut self) -> P<Expr> {
        let start = self.expect_word("loop")?;
        self.expect_p("(")?;
        let pat = self.pat()?;
        let init = if self.eat_p("=") { Some(Box::new(self.expr()?)) } else { None };
        self.expect_p(")")?;
        self.expect_p("=")?;
        self.expect_word("for")?;
        let (var, var_span) = self.ident()?;
        self.expect_p("<")?;
        let bound = self.expr()?;
        self.expect_word("do")?;
        let body = self.expr()?;
        self.expect_word("in")?;
        let rest = self.expr()?;
        let span = start.to(rest.span);
        Ok(Expr {
            kind: ExprKind::Loop {
                pat,
                init,
                var,
                var_span,
                bound: Box::new(bound),
                body: Box::new(body),
                rest: Box::new(rest),
            },
            span,
        })
    }

    fn soac(&mut self) -> P<Expr> {
        let start = self.span();
        let soac = match self.bump().tok {
            Tok::Ident(n) if n == "map" => Soac::Map,
            Tok::Ident(n) if n == "reduce" => Soac::Reduce,
            Tok::Ident(n) if n == "scan" => Soac::Scan,
            _ => Soac::Filter,
        };
        self.expect_p("(")?;
        let fun = self.fn_arg()?;
        let mut args = Vec::new();
        while self.eat_p(",") {
            args.push(self.expr()?);
        }
        let end = self.expect_p(")")?;
        Ok(Expr { kind: ExprKind::Soac { soac, fun, args }, span: start.to(end) })
    }

    fn fn_arg(&mut self) -> P<FnArg> {
        let start = self.span();
        if self.eat_word("fn") {
            let ret = self.ty()?;
            self.expect_p("(")?;
            let params = self.params()?;
            self.expect_p("=>")?;
            let body = self.expr()?;
            let span = start.to(body.span);
            return Ok(FnArg::Lambda { ret, params, body: Box::new(body), span });
        }
        if self.eat_word("op") {
            let Some((op, _)) = self.binop() else {
                return self.error(codes::UNEXPECTED_TOKEN, "an operator after `op`");
            };
            self.bump();
            let left = if self.eat_p("(") {
                let e = self.expr()?;
                self.expect_p(")")?;
                Some(Box::new(e))
            } else {
                None
            };
            return Ok(FnArg::Op { op, left, span: start.to(self.prev_span()) });
        }
        let (name, span) = self.ident()?;
        let curried = if self.eat_p("(") { self.list(")")? } else { Vec::new() };
        Ok(FnArg::Named { name, span: span.to(self.prev_span()), curried })
    }
}

/// What a Haskell escape (the text after its backslash) stands for.
enum Escape {
    Char(u32),
    /// `\&`: nothing (it separates a numeric escape from a digit in strings).
    Empty,
    Unknown,
}

/// Reads a Haskell escape from `rest` (the text after the backslash): its
/// value and its length in bytes. Numeric escapes are decimal (`\65`),
/// hexadecimal (`\x41`) or octal (`\o101`); the single-letter ones are C's.
/// Haskell's names of the ASCII control characters, by code (then `SP`, 32,
/// and `DEL`, 127).
const ASCII_NAMES: [&str; 34] = [
    "NUL", "SOH", "STX", "ETX", "EOT", "ENQ", "ACK", "BEL", "BS", "HT", "LF", "VT", "FF", "CR", "SO", "SI", "DLE",
    "DC1", "DC2", "DC3", "DC4", "NAK", "SYN", "ETB", "CAN", "EM", "SUB", "ESC", "FS", "GS", "RS", "US", "SP", "DEL",
];

fn haskell_escape(rest: &str) -> (Escape, usize) {
    let Some(first) = rest.chars().next() else { return (Escape::Unknown, 0) };
    let digits = |from: usize, radix: u32| {
        let n = rest[from..].chars().take_while(|c| c.is_digit(radix)).count();
        let v = u32::from_str_radix(&rest[from..from + n], radix).unwrap_or(u32::MAX);
        (n, v)
    };
    match first {
        'x' | 'o' => {
            let (n, v) = digits(1, if first == 'x' { 16 } else { 8 });
            if n == 0 { (Escape::Unknown, 1) } else { (Escape::Char(v), 1 + n) }
        }
        '0'..='9' => {
            let (n, v) = digits(0, 10);
            (Escape::Char(v), n)
        }
        '&' => (Escape::Empty, 1),
        // Control characters: `\^A` is 1, `\^@` 0, `\^_` 31.
        '^' => match rest[1..].chars().next() {
            Some(c @ '@'..='_') => (Escape::Char(c as u32 - 64), 2),
            _ => (Escape::Unknown, 1),
        },
        // ASCII's names, the longest that matches (`\SOH` before `\SO`).
        'A'..='Z' => match ASCII_NAMES
            .iter()
            .enumerate()
            .filter(|(_, name)| rest.starts_with(**name))
            .max_by_key(|(_, name)| name.len())
        {
            Some((code, name)) => (Escape::Char(if *name == "DEL" { 127 } else { code as u32 }), name.len()),
            None => (Escape::Unknown, 1),
        },
        c => {
            let v = match c {
                'a' => 7,
                'b' => 8,
                'f' => 12,
                'n' => 10,
                'r' => 13,
                't' => 9,
                'v' => 11,
                '\\' | '\'' | '"' => c as u32,
                _ => return (Escape::Unknown, c.len_utf8()),
            };
            (Escape::Char(v), 1)
        }
    }
}

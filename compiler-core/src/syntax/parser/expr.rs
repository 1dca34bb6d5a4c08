//! Expressions, with-loops and tensor comprehensions.

use super::{LiteralType, Parser, is_operator_symbol, parse_int_literal, parse_real_literal};
use crate::diagnostics::{self as codes, Diagnostic};
use crate::span::Span;
use crate::syntax::ast::*;
use crate::syntax::lexer::unescape;
use crate::syntax::token::TokenKind;

/// Binding power of infix operators (higher binds tighter); `None` if not infix.
fn infix_precedence(op: &str) -> Option<u8> {
    Some(match op {
        "||" => 1,
        "&&" => 2,
        "|" => 3,
        "^" => 4,
        "&" => 5,
        "==" | "!=" => 6,
        "<" | "<=" | ">" | ">=" => 7,
        "++" => 8,
        "<<" | ">>" => 9,
        "+" | "-" => 10,
        "*" | "/" | "%" => 11,
        _ => return None,
    })
}

/// The span of an escape sequence starting `at` bytes into a literal's body.
fn escape_span(literal: Span, at: usize) -> Span {
    let start = literal.start as usize + 1 + at;
    Span::new(literal.file, start, (start + 2).min(literal.end as usize))
}

/// Generator bounds are parsed above the relational level so `<`/`<=` stay free.
const BOUND_PRECEDENCE: u8 = 8;

impl Parser<'_> {
    pub(super) fn expr(&mut self) -> Expr {
        if !self.enter() {
            self.leave();
            let span = self.peek().span;
            self.skip_expression();
            return Expr { kind: ExprKind::Error, span };
        }
        let e = self.ternary();
        self.leave();
        e
    }

    /// After an expression too deep to parse (reported once): skips its
    /// tokens, brackets and all, up to what ends it where it started (`)`,
    /// `]`, `}`, `;` or `,` outside brackets), so that the construct around
    /// it goes on without errors that only follow from this one (an `else
    /// if` chain 3000 long gave 274).
    fn skip_expression(&mut self) {
        let mut open = 0usize;
        while !self.at_eof() {
            let t = self.peek();
            if t.kind == TokenKind::Punct {
                match t.text.as_str() {
                    "(" | "[" | "{" => open += 1,
                    ")" | "]" | "}" if open == 0 => return,
                    ")" | "]" | "}" => open -= 1,
                    ";" | "," if open == 0 => return,
                    _ => {}
                }
            }
            self.bump();
        }
    }

    fn error_expr(&self, span: Span) -> Expr {
        Expr { kind: ExprKind::Error, span }
    }

    fn ternary(&mut self) -> Expr {
        let cond = self.binary(1);
        if !self.at("?") {
            return cond;
        }
        self.bump();
        let then_expr = self.expr();
        self.expect(":");
        let else_expr = self.expr();
        let span = cond.span.to(else_expr.span);
        Expr {
            kind: ExprKind::Cond {
                cond: Box::new(cond),
                then_expr: Box::new(then_expr),
                else_expr: Box::new(else_expr),
            },
            span,
        }
    }

    /// Precedence climbing over the infix operators with binding power ≥ `min`.
    pub(super) fn binary(&mut self, min: u8) -> Expr {
        let mut lhs = self.unary();
        let mut links = 0;
        loop {
            let t = self.peek().clone();
            if t.kind != TokenKind::Punct {
                break;
            }
            let Some(prec) = infix_precedence(&t.text) else {
                break;
            };
            if prec < min || (self.no_pipe && t.text == "|") {
                break;
            }
            // `x++` followed by something that cannot start an expression is a
            // postfix increment, which only exists as a statement.
            if t.text == "++" && !self.can_start_expr_at(1) {
                break;
            }
            self.bump();
            if !self.link() {
                // Too deep (reported once): the rest of the chain is read, not kept.
                let rhs = self.discarded(|p| p.binary(prec + 1));
                lhs = self.error_expr(lhs.span.to(rhs.span));
                continue;
            }
            links += 1;
            let rhs = self.binary(prec + 1);
            let span = lhs.span.to(rhs.span);
            lhs = match t.text.as_str() {
                "&&" => Expr { kind: ExprKind::And(Box::new(lhs), Box::new(rhs)), span },
                "||" => Expr { kind: ExprKind::Or(Box::new(lhs), Box::new(rhs)), span },
                _ => Expr {
                    kind: ExprKind::Binary {
                        op: t.text.clone(),
                        op_span: t.span,
                        lhs: Box::new(lhs),
                        rhs: Box::new(rhs),
                    },
                    span,
                },
            };
        }
        self.links -= links;
        lhs
    }

    fn unary(&mut self) -> Expr {
        let t = self.peek().clone();
        if t.kind == TokenKind::Punct && matches!(t.text.as_str(), "-" | "+" | "!" | "~" | "++" | "--") {
            self.bump();
            if !self.enter() {
                self.leave();
                return self.error_expr(t.span);
            }
            let operand = self.unary();
            self.leave();
            let span = t.span.to(operand.span);
            // Fold `-literal` so that the most negative integer is expressible.
            if t.text == "-" {
                match operand.kind {
                    ExprKind::Lit(Literal::Int(v, ty)) => {
                        return Expr { kind: ExprKind::Lit(Literal::Int(-v, ty)), span };
                    }
                    ExprKind::Lit(Literal::Real(v, ty)) => {
                        return Expr { kind: ExprKind::Lit(Literal::Real(-v, ty)), span };
                    }
                    _ => {}
                }
            }
            if t.text == "+" {
                return Expr { span, ..operand };
            }
            return Expr {
                kind: ExprKind::Unary { op: t.text.clone(), op_span: t.span, operand: Box::new(operand) },
                span,
            };
        }
        if t.is_punct("(") && self.cast_ahead() {
            self.bump();
            let ty = self.type_expr();
            self.expect(")");
            // A cast nests its operand as a prefix operator does.
            if !self.enter() {
                self.leave();
                return self.error_expr(t.span);
            }
            let operand = self.unary();
            self.leave();
            let span = t.span.to(operand.span);
            return match ty {
                Some(ty) => Expr { kind: ExprKind::Cast { ty, expr: Box::new(operand) }, span },
                None => self.error_expr(span),
            };
        }
        self.postfix()
    }

    /// `(` type `)` followed by an operand.
    fn cast_ahead(&self) -> bool {
        if !self.is_type_name(self.nth(1)) {
            return false;
        }
        // Find the `)` closing the type.
        let mut k = 2;
        if self.nth(k).is_punct("[") {
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
                        k += 1;
                        break;
                    }
                }
                k += 1;
            }
        }
        self.nth(k).is_punct(")") && self.can_start_expr_at(k + 1)
    }

    fn postfix(&mut self) -> Expr {
        let mut e = self.primary();
        let mut links = 0;
        while self.at("[") {
            let open = self.peek().span;
            let deeper = self.link();
            let items = if deeper { self.index_items() } else { self.discarded(Self::index_items) };
            let close = self.prev_span();
            let span = e.span.to(close);
            if !deeper {
                // Too deep (reported once): the selection is read, not kept.
                e = self.error_expr(span);
                continue;
            }
            links += 1;
            let has_dots = items.iter().any(|i| !matches!(i, DotIndex::Expr(_)));
            if has_dots {
                e = Expr { kind: ExprKind::DotSelect { array: Box::new(e), index: items }, span };
            } else {
                let index: Vec<Expr> = items
                    .into_iter()
                    .map(|i| match i {
                        DotIndex::Expr(x) => x,
                        DotIndex::Dot(s) | DotIndex::Ellipsis(s) => Expr { kind: ExprKind::Error, span: s },
                    })
                    .collect();
                if index.is_empty() {
                    self.error_at(
                        Diagnostic::error(codes::EXPECTED_EXPRESSION, "empty selection `a[]`")
                            .at(open.to(close), "")
                            .with_hint("select everything with `a[[]]`"),
                    );
                }
                e = Expr { kind: ExprKind::Select { array: Box::new(e), index }, span };
            }
        }
        self.links -= links;
        e
    }

    /// `[ item, … ]` after an array: items are expressions, `.` or `...`; a single
    /// vector literal containing dots (`[[., 1]]`) is unpacked into its items.
    fn index_items(&mut self) -> Vec<DotIndex> {
        self.expect("[");
        let mut items = Vec::new();
        // `a[[ … ]]` with dots inside the inner literal.
        if self.at("[") && self.inner_literal_has_dots() {
            self.bump();
            while !self.at("]") && !self.at_eof() {
                items.push(self.index_item());
                if !self.eat(",") {
                    break;
                }
            }
            self.expect("]");
            self.expect("]");
            return items;
        }
        while !self.at("]") && !self.at_eof() {
            items.push(self.index_item());
            if !self.eat(",") {
                break;
            }
        }
        self.expect("]");
        items
    }

    /// The index of an assignment target `a[i, j] = …` (no dots allowed).
    pub(super) fn index_list(&mut self) -> Vec<Expr> {
        let items = self.index_items();
        let mut index = Vec::new();
        for item in items {
            match item {
                DotIndex::Expr(e) => index.push(e),
                DotIndex::Dot(span) | DotIndex::Ellipsis(span) => self.error_at(
                    Diagnostic::error(codes::BAD_DOT_SELECTION, "free axes cannot be assigned to")
                        .at(span, "")
                        .with_hint("assign a whole sub-array with a shorter index, `a[[i]] = row;`"),
                ),
            }
        }
        index
    }

    fn index_item(&mut self) -> DotIndex {
        let t = self.peek().clone();
        if t.is_punct(".") && (self.nth(1).is_punct(",") || self.nth(1).is_punct("]")) {
            self.bump();
            return DotIndex::Dot(t.span);
        }
        if t.is_punct("...") {
            self.bump();
            return DotIndex::Ellipsis(t.span);
        }
        DotIndex::Expr(self.expr())
    }

    /// At `[`: does this literal contain a top-level `.` or `...` element, and is it
    /// the only thing in the enclosing brackets?
    fn inner_literal_has_dots(&self) -> bool {
        let mut depth = 0usize;
        let mut k = 0;
        let mut dots = false;
        loop {
            let t = self.nth(k);
            if t.is_eof() {
                return false;
            }
            if t.is_punct("[") || t.is_punct("(") {
                depth += 1;
            } else if t.is_punct("]") || t.is_punct(")") {
                depth -= 1;
                if depth == 0 {
                    return dots && self.nth(k + 1).is_punct("]");
                }
            } else if depth == 1
                && (t.is_punct("...")
                    || (t.is_punct(".") && {
                        let n = self.nth(k + 1);
                        n.is_punct(",") || n.is_punct("]")
                    }))
            {
                dots = true;
            }
            k += 1;
        }
    }

    /// `(a, b, …)` argument list; the `(` is current.
    pub(super) fn arguments(&mut self) -> Vec<Expr> {
        self.expect("(");
        let mut args = Vec::new();
        while !self.at(")") && !self.at_eof() {
            args.push(self.expr());
            if !self.eat(",") {
                break;
            }
        }
        self.expect(")");
        args
    }

    fn primary(&mut self) -> Expr {
        let t = self.peek().clone();
        match &t.kind {
            TokenKind::Int => {
                self.bump();
                match parse_int_literal(&t.text) {
                    Some((v, LiteralType::Base(ty))) => Expr { kind: ExprKind::Lit(Literal::Int(v, ty)), span: t.span },
                    Some((v, LiteralType::Real(ty))) => {
                        Expr { kind: ExprKind::Lit(Literal::Real(v as f64, ty)), span: t.span }
                    }
                    None => {
                        self.error_at(
                            Diagnostic::error(codes::BAD_NUMBER, format!("invalid number `{}`", t.text))
                                .at(t.span, "")
                                .with_hint("integer suffixes are b s i l ll ub us ui ul ull; `d` and `f` make reals"),
                        );
                        self.error_expr(t.span)
                    }
                }
            }
            TokenKind::Float => {
                self.bump();
                match parse_real_literal(&t.text) {
                    Some((v, ty)) => Expr { kind: ExprKind::Lit(Literal::Real(v, ty)), span: t.span },
                    None => {
                        self.error_at(
                            Diagnostic::error(codes::BAD_NUMBER, format!("invalid number `{}`", t.text)).at(t.span, ""),
                        );
                        self.error_expr(t.span)
                    }
                }
            }
            TokenKind::Char => {
                self.bump();
                let body = &t.text[1..t.text.len() - 1];
                match unescape(body).map_err(|(at, why)| (escape_span(t.span, at), why)) {
                    Ok(bytes) if bytes.len() == 1 => {
                        Expr { kind: ExprKind::Lit(Literal::Char(bytes[0])), span: t.span }
                    }
                    Ok(_) => {
                        self.error_at(
                            Diagnostic::error(
                                codes::BAD_CHAR_LITERAL,
                                "a character literal holds exactly one character",
                            )
                            .at(t.span, ""),
                        );
                        self.error_expr(t.span)
                    }
                    Err((at, why)) => {
                        self.error_at(Diagnostic::error(codes::BAD_ESCAPE, why).at(at, ""));
                        self.error_expr(t.span)
                    }
                }
            }
            TokenKind::Str => {
                self.bump();
                let mut span = t.span;
                let mut bytes = Vec::new();
                let mut push = |this: &mut Self, text: &str, sp: Span| match unescape(&text[1..text.len() - 1]) {
                    Ok(b) => bytes.extend(b),
                    Err((at, why)) => {
                        this.error_at(Diagnostic::error(codes::BAD_ESCAPE, why).at(escape_span(sp, at), ""))
                    }
                };
                push(self, &t.text, t.span);
                // Adjacent string literals concatenate, as in C.
                while self.peek().kind == TokenKind::Str {
                    let n = self.bump();
                    span = span.to(n.span);
                    push(self, &n.text, n.span);
                }
                Expr { kind: ExprKind::Str(bytes), span }
            }
            TokenKind::Ident => self.identifier_expr(),
            TokenKind::Punct => match t.text.as_str() {
                "(" => {
                    self.bump();
                    let e = self.expr();
                    if self.at(",") {
                        self.error_at(
                            Diagnostic::error(codes::UNEXPECTED_TOKEN, "a parenthesised list is not a value here")
                                .at(self.peek().span, "")
                                .with_hint("several values can only be returned or bound: `a, b = f(x);`"),
                        );
                        self.recover_paren();
                        return self.error_expr(t.span);
                    }
                    self.expect(")");
                    // Keep the inner span: errors about a call or operator then point at
                    // it rather than at the parenthesis.
                    e
                }
                "[" => self.array_literal(),
                "{" => self.tensor_comprehension(),
                _ if is_operator_symbol(&t.text) && self.nth(1).is_punct("(") => {
                    // An operator applied like a function: `+(a, b)`.
                    self.bump();
                    let args = self.arguments();
                    let span = t.span.to(self.prev_span());
                    Expr {
                        kind: ExprKind::Call { fun: FunRef { module: None, name: t.text.clone(), span: t.span }, args },
                        span,
                    }
                }
                _ => {
                    self.report_expected_expression();
                    self.error_expr(t.span)
                }
            },
            TokenKind::Invalid(d) => {
                // Reported by the preprocessor; recorded here so the parser does not
                // add complaints about the same spot. A stray character is skipped,
                // as C compilers do, and the operand after it parsed.
                let d = (**d).clone();
                let stray = d.code == codes::UNEXPECTED_CHAR;
                self.error_at(d);
                self.bump();
                if stray && self.can_start_expr_at(0) {
                    return self.primary();
                }
                self.error_expr(t.span)
            }
            TokenKind::Eof => {
                self.report_expected_expression();
                self.error_expr(self.prev_span().end_point())
            }
        }
    }

    fn report_expected_expression(&mut self) {
        let t = self.peek().clone();
        let span = if t.is_eof() { self.prev_span().end_point() } else { t.span };
        self.error_at(
            Diagnostic::error(codes::EXPECTED_EXPRESSION, format!("expected an expression, found {}", t.describe()))
                .at(span, "expected an expression"),
        );
    }

    fn recover_paren(&mut self) {
        let mut depth = 1usize;
        while !self.at_eof() {
            let t = self.bump();
            if t.is_punct("(") {
                depth += 1;
            } else if t.is_punct(")") {
                depth -= 1;
                if depth == 0 {
                    return;
                }
            }
        }
    }

    fn identifier_expr(&mut self) -> Expr {
        let t = self.bump();
        match t.text.as_str() {
            "true" => {
                return Expr { kind: ExprKind::Lit(Literal::Bool(true)), span: t.span };
            }
            "false" => {
                return Expr { kind: ExprKind::Lit(Literal::Bool(false)), span: t.span };
            }
            "with" => return self.with_loop(t.span),
            _ => {}
        }
        let mut fun = FunRef { module: None, name: t.text.clone(), span: t.span };
        if self.at("::") {
            self.bump();
            let n = self.peek().clone();
            if n.is_ident() || (n.kind == TokenKind::Punct && is_operator_symbol(&n.text)) {
                self.bump();
                fun = FunRef { module: Some(t.text.clone()), name: n.text.clone(), span: t.span.to(n.span) };
            } else {
                self.error_expected("a function name after `::`");
                return self.error_expr(t.span);
            }
            if !self.at("(") {
                self.error_expected("`(` after a qualified function name");
                return self.error_expr(fun.span);
            }
        }
        if self.at("(") {
            let args = self.arguments();
            let span = fun.span.to(self.prev_span());
            return Expr { kind: ExprKind::Call { fun, args }, span };
        }
        Expr { kind: ExprKind::Var(t.text.clone()), span: t.span }
    }

    fn array_literal(&mut self) -> Expr {
        let open = self.bump().span;
        let mut elems = Vec::new();
        while !self.at("]") && !self.at_eof() {
            if self.at(".") || self.at("...") {
                let t = self.bump();
                self.error_at(
                    Diagnostic::error(
                        codes::BAD_DOT_SELECTION,
                        format!("`{}` is only allowed in a selection index", t.text),
                    )
                    .at(t.span, "")
                    .with_hint("write `a[[., 1]]` to select along free axes"),
                );
                elems.push(self.error_expr(t.span));
            } else {
                elems.push(self.expr());
            }
            if !self.eat(",") {
                break;
            }
        }
        let close = self.peek().span;
        self.expect("]");
        Expr { kind: ExprKind::Array(elems), span: open.to(close) }
    }

    // ------------------------------------------------------------ with-loops

    fn with_loop(&mut self, start: Span) -> Expr {
        if self.at("{") {
            self.modern_with(start)
        } else if self.at("(") {
            self.classic_with(start)
        } else {
            self.error_expected("`{` or `(` after `with`");
            self.error_expr(start)
        }
    }

    /// `with { (gen) [{ … }] : e; … } : op`
    fn modern_with(&mut self, start: Span) -> Expr {
        self.bump();
        let mut parts = Vec::new();
        while !self.at("}") && !self.at_eof() {
            let before = self.pos;
            let part_start = self.peek().span;
            let Some(generator) = self.generator() else {
                self.recover_statement();
                if self.pos == before {
                    self.bump();
                }
                continue;
            };
            let body = if self.at("{") { self.block().stmts } else { Vec::new() };
            if !self.expect(":") {
                self.recover_statement();
                continue;
            }
            let results = self.expr_list_maybe_parenthesized();
            let span = part_start.to(self.prev_span());
            self.expect(";");
            parts.push(Part { generator, body, results, span });
        }
        self.expect("}");
        if !self.expect(":") {
            return self.error_expr(start);
        }
        let ops = self.with_ops();
        let span = start.to(self.prev_span());
        if ops.is_empty() {
            return self.error_expr(span);
        }
        for part in &parts {
            if part.results.len() != ops.len() {
                self.error_at(
                    Diagnostic::error(
                        codes::BAD_WITH_LOOP,
                        format!(
                            "this partition yields {} value(s) but the with-loop has {} operator(s)",
                            part.results.len(),
                            ops.len()
                        ),
                    )
                    .at(part.span, "")
                    .with_hint("a multi-operator with-loop yields one value per operator: `: (e1, e2);`"),
                );
            }
        }
        Expr { kind: ExprKind::With(Box::new(WithLoop { parts, ops, syntax: WithSyntax::Modern, span })), span }
    }

    /// `op` or `(op, op, …)`, and also `void`.
    fn with_ops(&mut self) -> Vec<WithOp> {
        if self.at("(") {
            self.bump();
            let mut ops = Vec::new();
            loop {
                match self.with_op() {
                    Some((op, extra)) => {
                        if !extra.is_empty() {
                            self.report_classic_op_in_modern(&op);
                        }
                        ops.push(op)
                    }
                    None => {
                        self.recover_paren();
                        return Vec::new();
                    }
                }
                if !self.eat(",") {
                    break;
                }
            }
            self.expect(")");
            return ops;
        }
        match self.with_op() {
            Some((op, extra)) => {
                if !extra.is_empty() {
                    self.report_classic_op_in_modern(&op);
                }
                vec![op]
            }
            None => Vec::new(),
        }
    }

    fn report_classic_op_in_modern(&mut self, op: &WithOp) {
        self.error_at(
            Diagnostic::error(codes::BAD_WITH_LOOP, "too many arguments for a with-loop operator")
                .at(op.span(), "")
                .with_hint("modern syntax: `genarray(shape, default)`, `modarray(array)`, `fold(fun, neutral)`"),
        );
    }

    /// Parses one operator. Returns it with any extra trailing arguments (the classic
    /// syntax passes the body expression as the last argument).
    fn with_op(&mut self) -> Option<(WithOp, Vec<Expr>)> {
        let t = self.peek().clone();
        let name = t.text.as_str();
        if !t.is_ident() || !matches!(name, "genarray" | "modarray" | "fold" | "foldfix" | "propagate" | "void") {
            self.error_expected("`genarray`, `modarray`, `fold` or `foldfix`");
            return None;
        }
        self.bump();
        if matches!(name, "propagate" | "void") {
            self.error_at(
                Diagnostic::error(codes::UNSUPPORTED, format!("`{name}` with-loops are not supported"))
                    .at(t.span, "")
                    .with_note("they exist for SaC's object system, which withloop does not implement"),
            );
            if self.at("(") {
                self.arguments();
            }
            return None;
        }
        if !self.expect("(") {
            return None;
        }
        let result = match name {
            "genarray" => {
                let shape = self.expr();
                let mut rest = Vec::new();
                while self.eat(",") {
                    rest.push(self.expr());
                }
                let default = if rest.is_empty() { None } else { Some(rest.remove(0)) };
                (WithOp::Genarray { shape, default, span: t.span }, rest)
            }
            "modarray" => {
                let array = self.expr();
                let mut rest = Vec::new();
                while self.eat(",") {
                    rest.push(self.expr());
                }
                (WithOp::Modarray { array, span: t.span }, rest)
            }
            _ => {
                let fun = self.fold_fun()?;
                self.expect(",");
                let neutral = self.expr();
                let mut rest = Vec::new();
                while self.eat(",") {
                    rest.push(self.expr());
                }
                if name == "foldfix" {
                    if rest.is_empty() {
                        self.error_expected("the fix-point value of `foldfix`");
                        return None;
                    }
                    let fixpoint = rest.remove(0);
                    (WithOp::FoldFix { fun, neutral, fixpoint, span: t.span }, rest)
                } else {
                    (WithOp::Fold { fun, neutral, span: t.span }, rest)
                }
            }
        };
        let end = self.peek().span;
        self.expect(")");
        let (mut op, rest) = result;
        match &mut op {
            WithOp::Genarray { span, .. }
            | WithOp::Modarray { span, .. }
            | WithOp::Fold { span, .. }
            | WithOp::FoldFix { span, .. } => *span = t.span.to(end),
        }
        Some((op, rest))
    }

    /// The function of a fold: `+`, `add`, `Array::add`, `f(k)` (partially applied).
    fn fold_fun(&mut self) -> Option<FoldFun> {
        let t = self.peek().clone();
        if t.kind == TokenKind::Punct && is_operator_symbol(&t.text) {
            self.bump();
            return Some(FoldFun {
                fun: FunRef { module: None, name: t.text.clone(), span: t.span },
                partial_args: Vec::new(),
            });
        }
        if !t.is_ident() {
            self.error_expected("a fold function (an operator or a function name)");
            return None;
        }
        self.bump();
        let mut fun = FunRef { module: None, name: t.text.clone(), span: t.span };
        if self.eat("::") {
            let n = self.bump();
            fun = FunRef { module: Some(t.text.clone()), name: n.text.clone(), span: t.span.to(n.span) };
        }
        let partial_args = if self.at("(") { self.arguments() } else { Vec::new() };
        Some(FoldFun { fun, partial_args })
    }

    /// `with (gen) [{ … [return(e);] }] [: e] … op(…)` — the papers' syntax, also
    /// with several partitions as in seed 000's SaC_mini.
    fn classic_with(&mut self, start: Span) -> Expr {
        struct RawPart {
            generator: Generator,
            body: Vec<Stmt>,
            result: Option<Vec<Expr>>,
            span: Span,
        }
        let mut raw = Vec::new();
        let mut inner_op = None;
        while self.at("(") {
            let part_start = self.peek().span;
            let Some((generator, op_inside)) = self.generator_inner(raw.is_empty()) else {
                self.recover_statement();
                return self.error_expr(start);
            };
            if op_inside {
                inner_op = self.with_op();
                self.expect(")");
                raw.push(RawPart { generator, body: Vec::new(), result: None, span: part_start.to(self.prev_span()) });
                break;
            }
            let mut body = Vec::new();
            let mut result = None;
            if self.at("{") {
                let block = self.block();
                body = block.stmts;
                // `{ …; return(e); }` names the partition's value.
                if let Some(Stmt { kind: StmtKind::Return { .. }, .. }) = body.last()
                    && let Some(Stmt { kind: StmtKind::Return { values }, .. }) = body.pop()
                {
                    result = Some(values);
                }
            }
            if self.eat(":") {
                result = Some(self.expr_list_maybe_parenthesized());
            }
            raw.push(RawPart { generator, body, result, span: part_start.to(self.prev_span()) });
        }
        let op = match inner_op {
            Some(op) => Some(op),
            None => self.with_op(),
        };
        let Some((op, extra)) = op else {
            return self.error_expr(start);
        };
        let span = start.to(self.prev_span());
        let explicit = raw.iter().any(|p| p.result.is_some());
        let mut ops = vec![op];
        let mut parts = Vec::new();
        if explicit {
            // Results come from the partitions; the operator has modern arguments.
            if !extra.is_empty() {
                self.report_classic_op_in_modern(&ops[0]);
            }
            for p in raw {
                let results = match p.result {
                    Some(r) => r,
                    None => {
                        self.error_at(
                            Diagnostic::error(codes::BAD_WITH_LOOP, "this partition has no value")
                                .at(p.span, "")
                                .with_hint("end it with `: expr` like the other partitions"),
                        );
                        vec![self.error_expr(p.span)]
                    }
                };
                parts.push(Part { generator: p.generator, body: p.body, results, span: p.span });
            }
        } else {
            // The papers' form: the operator's last argument is the body value.
            let body_value = match (&mut ops[0], extra) {
                (WithOp::Genarray { default, .. }, extra) if extra.is_empty() => default.take(),
                (WithOp::Genarray { .. }, mut extra) => Some(extra.remove(0)),
                (WithOp::Modarray { span, .. }, mut extra) => {
                    // modarray(A, iv, e): `iv` must be the generator's index.
                    if extra.len() == 2 {
                        let iv = extra.remove(0);
                        if let (ExprKind::Var(n), Some(p)) = (&iv.kind, raw.first()) {
                            let matches = p.generator.index.vector.as_ref().is_some_and(|v| &v.name == n);
                            if !matches {
                                self.error_at(
                                    Diagnostic::error(
                                        codes::MODARRAY_INDEX_MISMATCH,
                                        format!("`modarray` names index `{n}` but the generator's index differs"),
                                    )
                                    .at(iv.span, "")
                                    .with_label(p.generator.index.span, "generator index"),
                                );
                            }
                        }
                        Some(extra.remove(0))
                    } else {
                        self.error_at(
                            Diagnostic::error(codes::BAD_WITH_LOOP, "classic `modarray` takes (array, index, value)")
                                .at(*span, ""),
                        );
                        None
                    }
                }
                (WithOp::Fold { .. } | WithOp::FoldFix { .. }, mut extra) if !extra.is_empty() => Some(extra.remove(0)),
                (op, _) => {
                    let sp = op.span();
                    self.error_at(
                        Diagnostic::error(codes::BAD_WITH_LOOP, "with-loop has no body value").at(sp, "").with_hint(
                            "classic syntax passes it last: `fold(+, 0, value)`; modern syntax: `(gen) : value;`",
                        ),
                    );
                    None
                }
            };
            let Some(value) = body_value else {
                return self.error_expr(span);
            };
            // Every partition of a classic loop shares the one body value.
            for p in raw {
                parts.push(Part { generator: p.generator, body: p.body, results: vec![value.clone()], span: p.span });
            }
        }
        let syntax = WithSyntax::Classic;
        ops.truncate(1);
        Expr { kind: ExprKind::With(Box::new(WithLoop { parts, ops, syntax, span })), span }
    }

    /// `( lb REL idx REL ub [step s [width w]] )` or `( idx REL ub … )`.
    fn generator(&mut self) -> Option<Generator> {
        self.generator_inner(false).map(|(g, _)| g)
    }

    /// Parses `( … )`. With `allow_inner_op`, also seed 002's form where the
    /// operation sits inside the parentheses, `with( lb <= iv <= ub  modarray(…) )`:
    /// then the `)` is left for the caller and `true` is returned.
    fn generator_inner(&mut self, allow_inner_op: bool) -> Option<(Generator, bool)> {
        let open = self.peek().span;
        if !self.expect("(") {
            return None;
        }
        let first = self.bound();
        let (lower, index, upper) = if self.at("=") {
            // (iv=[i,j] < ub): no lower bound.
            let index = self.finish_index_pattern(first)?;
            let rel = self.rel()?;
            let upper = self.bound();
            (None, index, (rel, upper))
        } else {
            let rel1 = self.rel()?;
            let second = self.bound();
            if self.at("<") || self.at("<=") {
                let rel2 = self.rel()?;
                let upper = self.bound();
                let index = self.index_pattern_from(second)?;
                (Some((first, rel1)), index, (rel2, upper))
            } else if self.at("=") {
                // (lb <= iv=[i,j] < ub)
                let index = self.finish_index_pattern(second)?;
                let rel2 = self.rel()?;
                let upper = self.bound();
                (Some((first, rel1)), index, (rel2, upper))
            } else {
                let index = self.index_pattern_from(first)?;
                (None, index, (rel1, second))
            }
        };
        let mut step = None;
        let mut width = None;
        if self.eat("step") {
            step = Some(self.binary(BOUND_PRECEDENCE));
            if self.eat("width") {
                width = Some(self.binary(BOUND_PRECEDENCE));
            }
        }
        if allow_inner_op
            && self.peek().is_ident()
            && matches!(self.peek().text.as_str(), "genarray" | "modarray" | "fold" | "foldfix")
        {
            let span = open.to(self.prev_span());
            return Some((Generator { lower, index, upper, step, width, span }, true));
        }
        let close = self.peek().span;
        if !self.expect(")") {
            return None;
        }
        Some((Generator { lower, index, upper, step, width, span: open.to(close) }, false))
    }

    fn bound(&mut self) -> Bound {
        let t = self.peek().clone();
        if t.is_punct(".") {
            self.bump();
            return Bound::Dot(t.span);
        }
        Bound::Expr(self.binary(BOUND_PRECEDENCE))
    }

    fn rel(&mut self) -> Option<Rel> {
        if self.eat("<=") {
            Some(Rel::Le)
        } else if self.eat("<") {
            Some(Rel::Lt)
        } else {
            self.error_expected("`<` or `<=` in the generator");
            None
        }
    }

    /// Converts a parsed bound into an index pattern: `iv` or `[i, j]`.
    fn index_pattern_from(&mut self, bound: Bound) -> Option<IndexPattern> {
        match bound {
            Bound::Expr(Expr { kind: ExprKind::Var(name), span }) => {
                Some(IndexPattern { vector: Some(Target { name, span }), scalars: None, span })
            }
            Bound::Expr(Expr { kind: ExprKind::Array(elems), span }) => {
                let mut scalars = Vec::new();
                for e in elems {
                    match e.kind {
                        ExprKind::Var(name) => scalars.push(Target { name, span: e.span }),
                        _ => {
                            self.error_at(
                                Diagnostic::error(codes::BAD_GENERATOR, "index components must be variable names")
                                    .at(e.span, "not a name"),
                            );
                            return None;
                        }
                    }
                }
                Some(IndexPattern { vector: None, scalars: Some(scalars), span })
            }
            other => {
                self.error_at(
                    Diagnostic::error(codes::BAD_GENERATOR, "expected the index variable (`iv` or `[i, j]`)")
                        .at(other.span(), "")
                        .with_hint("a generator reads `(lower <= iv < upper)`"),
                );
                None
            }
        }
    }

    /// `iv = [i, j]`, with `iv` already parsed and `=` current.
    fn finish_index_pattern(&mut self, vector: Bound) -> Option<IndexPattern> {
        let vector = self.index_pattern_from(vector)?;
        self.expect("=");
        let scalars_expr = self.array_literal();
        let scalars = self.index_pattern_from(Bound::Expr(scalars_expr))?;
        let span = vector.span.to(scalars.span);
        Some(IndexPattern { vector: vector.vector, scalars: scalars.scalars, span })
    }

    // ------------------------------------------------------------ tensor comprehensions

    /// `{ pattern -> body [| constraint]; … }`
    fn tensor_comprehension(&mut self) -> Expr {
        let open = self.bump().span;
        let mut parts = Vec::new();
        while !self.at("}") && !self.at_eof() {
            let before = self.pos;
            match self.tensor_part() {
                Some(p) => parts.push(p),
                None => {
                    while !self.at("}") && !self.at(";") && !self.at_eof() {
                        self.bump();
                    }
                }
            }
            if !self.eat(";") {
                break;
            }
            if self.pos == before {
                self.bump();
            }
        }
        let close = self.peek().span;
        self.expect("}");
        let span = open.to(close);
        if parts.is_empty() {
            self.error_at(
                Diagnostic::error(codes::BAD_TENSOR_COMPREHENSION, "empty tensor comprehension")
                    .at(span, "")
                    .with_hint("write `{ iv -> expr }`"),
            );
            return self.error_expr(span);
        }
        Expr { kind: ExprKind::Tensor(Box::new(TensorComprehension { parts, span })), span }
    }

    fn tensor_part(&mut self) -> Option<TensorPart> {
        let start = self.peek().span;
        let pattern = if self.at("[") {
            self.bump();
            let mut elems = Vec::new();
            while !self.at("]") && !self.at_eof() {
                let t = self.bump();
                if t.is_punct(".") {
                    elems.push(FrameElem::Dot(t.span));
                } else if t.is_punct("...") {
                    elems.push(FrameElem::Ellipsis(t.span));
                } else if t.is_ident() {
                    elems.push(FrameElem::Var(Target { name: t.text.clone(), span: t.span }));
                } else {
                    self.error_at(
                        Diagnostic::error(codes::BAD_TENSOR_COMPREHENSION, "expected an index name, `.` or `...`")
                            .at(t.span, ""),
                    );
                    return None;
                }
                if !self.eat(",") {
                    break;
                }
            }
            self.expect("]");
            TensorPattern::Elems(elems)
        } else {
            let target = self.ident("the index (`iv` or `[i, j]`)")?;
            TensorPattern::Vector(target)
        };
        if !self.expect("->") {
            return None;
        }
        let saved = self.no_pipe;
        self.no_pipe = true;
        let body = self.expr();
        self.no_pipe = saved;
        let mut part = TensorPart { pattern, body, lower: None, upper: None, step: None, width: None, span: start };
        if self.eat("|") {
            let first = self.binary(BOUND_PRECEDENCE);
            let rel1 = self.rel()?;
            let second = self.binary(BOUND_PRECEDENCE);
            if self.at("<") || self.at("<=") {
                let rel2 = self.rel()?;
                let third = self.binary(BOUND_PRECEDENCE);
                // The middle term is the index, written again.
                part.lower = Some((first, rel1));
                part.upper = Some((rel2, third));
                drop(second);
            } else {
                // The first term is the index, written again.
                part.upper = Some((rel1, second));
                drop(first);
            }
            if self.eat("step") {
                part.step = Some(self.binary(BOUND_PRECEDENCE));
                if self.eat("width") {
                    part.width = Some(self.binary(BOUND_PRECEDENCE));
                }
            }
        }
        part.span = start.to(self.prev_span());
        Some(part)
    }
}

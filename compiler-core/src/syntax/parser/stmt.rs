//! Statements and blocks.

use super::Parser;
use crate::diagnostics::{self as codes, Diagnostic};
use crate::syntax::ast::*;

const ASSIGN_OPS: &[&str] = &["+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="];

impl Parser<'_> {
    /// `{ stmt* }`
    pub(super) fn block(&mut self) -> Block {
        let open = self.peek().span;
        if !self.expect("{") {
            return Block { stmts: Vec::new(), span: open };
        }
        let stmts = self.statements_until_brace();
        let close = self.peek().span;
        self.expect("}");
        Block { stmts, span: open.to(close) }
    }

    pub(super) fn statements_until_brace(&mut self) -> Vec<Stmt> {
        let mut stmts = Vec::new();
        while !self.at("}") && !self.at_eof() {
            let before = self.pos;
            self.statement_into(&mut stmts);
            if self.pos == before {
                // Never loop without progress.
                self.bump();
            }
        }
        stmts
    }

    /// A statement or a braced block, as the body of `if`/`for`/`while`.
    fn branch(&mut self) -> Block {
        if self.at("{") {
            return self.block();
        }
        let start = self.peek().span;
        let mut stmts = Vec::new();
        self.statement_into(&mut stmts);
        Block { stmts, span: start.to(self.prev_span()) }
    }

    /// Parses one statement (a declaration with several names or a nested block can
    /// produce several) and appends it.
    pub(super) fn statement_into(&mut self, out: &mut Vec<Stmt>) {
        if !self.enter() {
            self.leave();
            self.recover_statement();
            return;
        }
        self.statement_inner(out);
        self.leave();
    }

    fn statement_inner(&mut self, out: &mut Vec<Stmt>) {
        let t = self.peek().clone();
        let start = t.span;
        if t.is_ident() {
            match t.text.as_str() {
                "if" => return out.push(self.if_stmt()),
                "for" => return out.push(self.for_stmt()),
                "while" => {
                    self.bump();
                    self.expect("(");
                    let cond = self.expr();
                    self.expect(")");
                    let body = self.branch();
                    let span = start.to(body.span);
                    return out.push(Stmt { kind: StmtKind::While { cond, body }, span });
                }
                "do" => {
                    self.bump();
                    let body = self.branch();
                    self.expect("while");
                    self.expect("(");
                    let cond = self.expr();
                    self.expect(")");
                    let end = self.peek().span;
                    self.expect(";");
                    return out.push(Stmt { kind: StmtKind::DoWhile { body, cond }, span: start.to(end) });
                }
                "return" => return out.push(self.return_stmt()),
                "break" | "continue" | "goto" => {
                    self.error_at(
                        Diagnostic::error(codes::UNEXPECTED_TOKEN, format!("SaC has no `{}`", t.text))
                            .at(t.span, "")
                            .with_hint("loops end through their condition; restructure with a flag variable"),
                    );
                    self.recover_statement();
                    return out.push(Stmt { kind: StmtKind::Error, span: start });
                }
                _ => {}
            }
            if self.declaration_ahead() {
                return self.declaration(out);
            }
        }
        if t.is_punct("{") {
            // A nested block just groups statements.
            let block = self.block();
            out.extend(block.stmts);
            return;
        }
        if t.is_punct(";") {
            self.bump();
            return;
        }
        let stmt = self.simple_statement(true);
        out.push(stmt);
    }

    fn declaration(&mut self, out: &mut Vec<Stmt>) {
        let start = self.peek().span;
        let Some(ty) = self.type_expr_lenient() else {
            self.recover_statement();
            return;
        };
        let mut names = Vec::new();
        let mut inits = Vec::new();
        loop {
            let Some(name) = self.ident("a variable name") else {
                self.recover_statement();
                return;
            };
            if self.at("=") && !self.at("==") {
                // C-style `int x = 0;`: a declaration plus an assignment.
                self.bump();
                let value = self.expr();
                let span = name.span.to(value.span);
                inits.push(Stmt { kind: StmtKind::Assign { targets: vec![name.clone()], value }, span });
            }
            names.push(name);
            if !self.eat(",") {
                break;
            }
        }
        let end = self.peek().span;
        self.expect(";");
        out.push(Stmt { kind: StmtKind::Decl { ty, names }, span: start.to(end) });
        out.extend(inits);
    }

    /// An assignment, step or expression statement; with `terminated`, also the `;`.
    pub(super) fn simple_statement(&mut self, terminated: bool) -> Stmt {
        let start = self.peek().span;
        let kind = self.simple_statement_kind();
        let end = self.prev_span();
        if matches!(kind, StmtKind::Error) {
            if terminated {
                self.recover_statement();
            }
            return Stmt { kind, span: start };
        }
        // A missing `;` at a line break most likely just ends the statement: do not
        // skip the next line looking for one.
        if terminated && !self.expect(";") && !self.peek().line_start {
            self.recover_statement();
        }
        Stmt { kind, span: start.to(end) }
    }

    fn simple_statement_kind(&mut self) -> StmtKind {
        let t = self.peek().clone();
        // ++x; --x; ++a[i];
        if (t.is_punct("++") || t.is_punct("--")) && self.nth(1).is_ident() {
            self.bump();
            let target = self.ident("a variable").expect("checked");
            if self.at("[") {
                let index = self.index_list();
                return StmtKind::IndexStep { target, index, op: t.text.clone(), op_span: t.span };
            }
            return StmtKind::Step { target, op: t.text.clone(), op_span: t.span };
        }
        if t.is_ident() {
            let next = self.nth(1).clone();
            // a, b = …
            if next.is_punct(",") && self.looks_like_multi_assign() {
                let mut targets = Vec::new();
                loop {
                    match self.ident("a variable") {
                        Some(n) => targets.push(n),
                        None => return StmtKind::Error,
                    }
                    if !self.eat(",") {
                        break;
                    }
                }
                if !self.expect("=") {
                    return StmtKind::Error;
                }
                let value = self.expr();
                return StmtKind::Assign { targets, value };
            }
            if next.is_punct("=") {
                let target = self.ident("a variable").expect("checked");
                self.bump();
                let value = self.expr();
                return StmtKind::Assign { targets: vec![target], value };
            }
            if next.kind == crate::syntax::token::TokenKind::Punct && ASSIGN_OPS.contains(&next.text.as_str()) {
                let target = self.ident("a variable").expect("checked");
                let op = self.bump();
                let value = self.expr();
                return StmtKind::OpAssign { target, op: op.text.trim_end_matches('=').into(), value };
            }
            if (next.is_punct("++") || next.is_punct("--")) && !self.can_start_expr_at(2) {
                let target = self.ident("a variable").expect("checked");
                let op = self.bump();
                return StmtKind::Step { target, op: op.text.clone(), op_span: op.span };
            }
            if next.is_punct("[")
                && let Some(close) = self.matching_bracket(1)
            {
                let after = self.nth(close + 1).clone();
                let is_assign = after.is_punct("=")
                    || (after.kind == crate::syntax::token::TokenKind::Punct
                        && ASSIGN_OPS.contains(&after.text.as_str()))
                    || ((after.is_punct("++") || after.is_punct("--")) && !self.can_start_expr_at(close + 2));
                if is_assign {
                    let target = self.ident("a variable").expect("checked");
                    let index = self.index_list();
                    let op = self.bump();
                    if op.is_punct("++") || op.is_punct("--") {
                        return StmtKind::IndexStep { target, index, op: op.text.clone(), op_span: op.span };
                    }
                    let value = self.expr();
                    let op = if op.is_punct("=") { None } else { Some(op.text.trim_end_matches('=').into()) };
                    return StmtKind::IndexAssign { target, index, op, value };
                }
            }
        }
        let e = self.expr();
        if matches!(e.kind, ExprKind::Error) {
            return StmtKind::Error;
        }
        if self.at("=") {
            self.error_at(
                Diagnostic::error(codes::BAD_ASSIGN_TARGET, "only variables and `a[index]` can be assigned to")
                    .at(e.span, "cannot assign to this"),
            );
            return StmtKind::Error;
        }
        StmtKind::Expr(e)
    }

    /// `a, b, c =` (not `f(a, b)` or other expression statements).
    fn looks_like_multi_assign(&self) -> bool {
        let mut k = 0;
        loop {
            if !self.nth(k).is_ident() {
                return false;
            }
            let sep = self.nth(k + 1);
            if sep.is_punct("=") {
                return true;
            }
            if !sep.is_punct(",") {
                return false;
            }
            k += 2;
        }
    }

    /// Offset (from the current token) of the `]` matching the `[` at `open`.
    fn matching_bracket(&self, open: usize) -> Option<usize> {
        let mut depth = 0usize;
        let mut k = open;
        loop {
            let t = self.nth(k);
            if t.is_eof() {
                return None;
            }
            if t.is_punct("[") || t.is_punct("(") || t.is_punct("{") {
                depth += 1;
            } else if t.is_punct("]") || t.is_punct(")") || t.is_punct("}") {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(k);
                }
            }
            k += 1;
        }
    }

    pub(super) fn can_start_expr_at(&self, n: usize) -> bool {
        let t = self.nth(n);
        use crate::syntax::token::TokenKind::*;
        match &t.kind {
            Ident | Int | Float | Char | Str => !matches!(t.text.as_str(), "else"),
            Punct => matches!(t.text.as_str(), "(" | "[" | "{" | "-" | "+" | "!" | "~" | "++" | "--"),
            _ => false,
        }
    }

    fn if_stmt(&mut self) -> Stmt {
        let start = self.bump().span;
        self.expect("(");
        let cond = self.expr();
        self.expect(")");
        let then_branch = self.branch();
        let mut span = start.to(then_branch.span);
        let else_branch = if self.eat("else") {
            let b = self.branch();
            span = span.to(b.span);
            Some(b)
        } else {
            None
        };
        Stmt { kind: StmtKind::If { cond, then_branch, else_branch }, span }
    }

    fn for_stmt(&mut self) -> Stmt {
        let start = self.bump().span;
        if !self.expect("(") {
            self.recover_statement();
            return Stmt { kind: StmtKind::Error, span: start };
        }
        let mut init = Vec::new();
        if self.starts_type() && self.nth(1).is_ident() {
            // for (int i = 0; …)
            self.declaration(&mut init);
        } else {
            while !self.at(";") && !self.at_eof() {
                init.push(self.simple_statement(false));
                if !self.eat(",") {
                    break;
                }
            }
            self.expect(";");
        }
        let cond = if self.at(";") { None } else { Some(self.expr()) };
        self.expect(";");
        let mut step = Vec::new();
        while !self.at(")") && !self.at_eof() {
            step.push(self.simple_statement(false));
            if !self.eat(",") {
                break;
            }
        }
        self.expect(")");
        let body = self.branch();
        let span = start.to(body.span);
        Stmt { kind: StmtKind::For { init, cond, step, body }, span }
    }

    fn return_stmt(&mut self) -> Stmt {
        let start = self.bump().span;
        let mut values = Vec::new();
        if !self.at(";") {
            values = self.expr_list_maybe_parenthesized();
        }
        let end = self.peek().span;
        if !self.expect(";") && !self.peek().line_start {
            self.recover_statement();
        }
        Stmt { kind: StmtKind::Return { values }, span: start.to(end) }
    }

    /// `e`, `e1, e2`, or `(e1, e2)` (a parenthesised list with at least one comma).
    pub(super) fn expr_list_maybe_parenthesized(&mut self) -> Vec<Expr> {
        if self.at("(") && self.parenthesized_list_ahead() {
            self.bump();
            let mut values = Vec::new();
            loop {
                values.push(self.expr());
                if !self.eat(",") {
                    break;
                }
            }
            self.expect(")");
            return values;
        }
        let mut values = vec![self.expr()];
        while self.eat(",") {
            values.push(self.expr());
        }
        values
    }

    /// Whether the `(` at the current position encloses a top-level comma.
    pub(super) fn parenthesized_list_ahead(&self) -> bool {
        let mut depth = 0usize;
        let mut k = 0;
        loop {
            let t = self.nth(k);
            if t.is_eof() {
                return false;
            }
            if t.is_punct("(") || t.is_punct("[") || t.is_punct("{") {
                depth += 1;
            } else if t.is_punct(")") || t.is_punct("]") || t.is_punct("}") {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return false;
                }
            } else if t.is_punct(",") && depth == 1 {
                return true;
            }
            k += 1;
        }
    }
}

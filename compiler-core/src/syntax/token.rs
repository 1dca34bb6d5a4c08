//! Tokens shared by the lexer, the preprocessor and the parser.

use smol_str::SmolStr;

use crate::diagnostics::Diagnostic;
use crate::span::Span;

#[derive(Clone, Debug, PartialEq)]
pub enum TokenKind {
    /// Identifiers and keywords; keywords are recognised by the parser from the text,
    /// so the preprocessor can treat them like any other name.
    Ident,
    /// Integer literal, suffix included (`42`, `0x1F`, `10ul`, `1d`).
    Int,
    /// Real literal, suffix included (`2.5`, `1e-10`, `1.5f`, `0x1p-53`).
    Float,
    /// Character literal with its quotes.
    Char,
    /// String literal with its quotes.
    Str,
    /// Operators and punctuation, the text says which.
    Punct,
    /// Text the lexer could not make sense of; reported only where it is compiled,
    /// so that e.g. an apostrophe inside `#if 0` is harmless.
    Invalid(Box<Diagnostic>),
    /// End of the token stream.
    Eof,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    pub kind: TokenKind,
    pub text: SmolStr,
    pub span: Span,
    /// First token on its logical line (after backslash-newline splicing).
    pub line_start: bool,
    /// Whitespace or a comment precedes the token.
    pub space_before: bool,
}

impl Token {
    pub fn is(&self, text: &str) -> bool {
        matches!(self.kind, TokenKind::Punct | TokenKind::Ident) && self.text == text
    }

    pub fn is_punct(&self, text: &str) -> bool {
        self.kind == TokenKind::Punct && self.text == text
    }

    pub fn is_ident(&self) -> bool {
        self.kind == TokenKind::Ident
    }

    pub fn is_eof(&self) -> bool {
        self.kind == TokenKind::Eof
    }

    /// How the token is shown in "expected X, found Y" messages.
    pub fn describe(&self) -> String {
        match &self.kind {
            TokenKind::Eof => "end of file".to_string(),
            TokenKind::Ident => format!("`{}`", self.text),
            TokenKind::Int | TokenKind::Float => format!("number `{}`", self.text),
            TokenKind::Char => format!("character {}", self.text),
            TokenKind::Str => "string literal".to_string(),
            TokenKind::Punct => format!("`{}`", self.text),
            TokenKind::Invalid(_) => format!("invalid text `{}`", self.text),
        }
    }
}

//! Turns source text into [`Token`]s.
//!
//! The lexer never fails: text it cannot classify becomes an [`TokenKind::Invalid`]
//! token that carries its diagnostic, and the preprocessor decides whether that text
//! is live. Only an unterminated block comment is reported directly, because it
//! swallows the rest of the file whatever the preprocessor would do.
//!
//! Backslash-newline pairs are spliced out (they count as whitespace), and each token
//! records whether it starts a logical line, which is all the preprocessor needs to
//! find directives.

use smol_str::SmolStr;

use super::token::{Token, TokenKind};
use crate::diagnostics::{self as codes, Diagnostic, Diagnostics};
use crate::span::{FileId, Span};

/// Punctuators, longest first so that the first match is the longest.
const PUNCTUATORS: &[&str] = &[
    "...", "<<=", ">>=", "::", "->", "++", "--", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "==", "!=", "<=",
    ">=", "<<", ">>", "&&", "||", "##", "(", ")", "[", "]", "{", "}", ",", ";", ":", ".", "?", "=", "<", ">", "+", "-",
    "*", "/", "%", "&", "|", "^", "!", "~", "#",
];

pub fn lex(file: FileId, text: &str, diagnostics: &mut Diagnostics) -> Vec<Token> {
    let mut lexer =
        Lexer { file, bytes: text.as_bytes(), text, pos: 0, tokens: Vec::new(), line_start: true, space: false };
    lexer.run(diagnostics);
    lexer.tokens
}

struct Lexer<'a> {
    file: FileId,
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    tokens: Vec<Token>,
    line_start: bool,
    space: bool,
}

impl Lexer<'_> {
    fn peek(&self, ahead: usize) -> u8 {
        self.bytes.get(self.pos + ahead).copied().unwrap_or(0)
    }

    fn span(&self, start: usize) -> Span {
        Span::new(self.file, start, self.pos)
    }

    fn push(&mut self, kind: TokenKind, start: usize) {
        let text = SmolStr::new(&self.text[start..self.pos]);
        self.tokens.push(Token {
            kind,
            text,
            span: self.span(start),
            line_start: self.line_start,
            space_before: self.space,
        });
        self.line_start = false;
        self.space = false;
    }

    fn invalid(&mut self, start: usize, diagnostic: Diagnostic) {
        let span = self.span(start);
        self.push(TokenKind::Invalid(Box::new(diagnostic.at(span, ""))), start);
    }

    fn run(&mut self, diagnostics: &mut Diagnostics) {
        while self.pos < self.bytes.len() {
            let c = self.peek(0);
            match c {
                b'\n' => {
                    self.pos += 1;
                    self.line_start = true;
                    self.space = true;
                }
                b' ' | b'\t' | b'\r' | b'\x0c' | b'\x0b' => {
                    self.pos += 1;
                    self.space = true;
                }
                b'\\' if self.peek(1) == b'\n' => {
                    self.pos += 2;
                    self.space = true;
                }
                b'\\' if self.peek(1) == b'\r' && self.peek(2) == b'\n' => {
                    self.pos += 3;
                    self.space = true;
                }
                b'/' if self.peek(1) == b'/' => {
                    // A line comment ends at the newline, unless it is spliced away.
                    while self.pos < self.bytes.len() {
                        if self.peek(0) == b'\\' && self.peek(1) == b'\n' {
                            self.pos += 2;
                        } else if self.peek(0) == b'\n' {
                            break;
                        } else {
                            self.pos += 1;
                        }
                    }
                    self.space = true;
                }
                b'/' if self.peek(1) == b'*' => {
                    let start = self.pos;
                    self.pos += 2;
                    loop {
                        if self.pos >= self.bytes.len() {
                            diagnostics.push(
                                Diagnostic::error(codes::UNTERMINATED_COMMENT, "unterminated block comment")
                                    .at(Span::new(self.file, start, start + 2), "comment starts here")
                                    .with_hint("close it with `*/`"),
                            );
                            break;
                        }
                        if self.peek(0) == b'*' && self.peek(1) == b'/' {
                            self.pos += 2;
                            break;
                        }
                        if self.peek(0) == b'\n' {
                            // A newline inside a comment still ends the logical line.
                            self.line_start = true;
                        }
                        self.pos += 1;
                    }
                    self.space = true;
                }
                b'0'..=b'9' => self.number(),
                b'.' if self.peek(1).is_ascii_digit() => self.number(),
                b'a'..=b'z' | b'A'..=b'Z' | b'_' => {
                    let start = self.pos;
                    while matches!(self.peek(0), b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_') {
                        self.pos += 1;
                    }
                    self.push(TokenKind::Ident, start);
                }
                b'"' => self.string(),
                b'\'' => self.char_literal(),
                _ => {
                    let start = self.pos;
                    if let Some(p) = PUNCTUATORS.iter().find(|p| self.bytes[self.pos..].starts_with(p.as_bytes())) {
                        self.pos += p.len();
                        self.push(TokenKind::Punct, start);
                    } else {
                        // Skip one whole UTF-8 character.
                        let ch = self.text[self.pos..].chars().next().unwrap_or('\u{fffd}');
                        self.pos += ch.len_utf8().max(1);
                        self.invalid(
                            start,
                            Diagnostic::error(
                                codes::UNEXPECTED_CHAR,
                                format!("unexpected character `{}`", ch.escape_default()),
                            ),
                        );
                    }
                }
            }
        }
    }

    fn number(&mut self) {
        let start = self.pos;
        let mut is_float = false;
        if self.peek(0) == b'0' && matches!(self.peek(1), b'x' | b'X') {
            self.pos += 2;
            while self.peek(0).is_ascii_hexdigit() {
                self.pos += 1;
            }
            if self.peek(0) == b'.' && self.peek(1) != b'.' {
                is_float = true;
                self.pos += 1;
                while self.peek(0).is_ascii_hexdigit() {
                    self.pos += 1;
                }
            }
            if matches!(self.peek(0), b'p' | b'P') {
                is_float = true;
                self.pos += 1;
                if matches!(self.peek(0), b'+' | b'-') {
                    self.pos += 1;
                }
                while self.peek(0).is_ascii_digit() {
                    self.pos += 1;
                }
            }
        } else {
            while self.peek(0).is_ascii_digit() {
                self.pos += 1;
            }
            // `1.` is a real literal, but `1...` is `1` followed by an ellipsis.
            if self.peek(0) == b'.' && self.peek(1) != b'.' {
                is_float = true;
                self.pos += 1;
                while self.peek(0).is_ascii_digit() {
                    self.pos += 1;
                }
            }
            if matches!(self.peek(0), b'e' | b'E')
                && (self.peek(1).is_ascii_digit()
                    || (matches!(self.peek(1), b'+' | b'-') && self.peek(2).is_ascii_digit()))
            {
                is_float = true;
                self.pos += 2;
                while self.peek(0).is_ascii_digit() {
                    self.pos += 1;
                }
            }
        }
        // Suffix letters (validated by the parser, which knows what they mean).
        while matches!(self.peek(0), b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_') {
            self.pos += 1;
        }
        self.push(if is_float { TokenKind::Float } else { TokenKind::Int }, start);
    }

    fn string(&mut self) {
        let start = self.pos;
        self.pos += 1;
        loop {
            match self.peek(0) {
                b'"' => {
                    self.pos += 1;
                    self.push(TokenKind::Str, start);
                    return;
                }
                b'\\' if self.peek(1) != 0 && self.peek(1) != b'\n' => self.pos += 2,
                b'\\' if self.peek(1) == b'\n' => self.pos += 2,
                b'\n' | 0 if self.pos >= self.bytes.len() || self.peek(0) == b'\n' => {
                    self.invalid(
                        start,
                        Diagnostic::error(codes::UNTERMINATED_STRING, "unterminated string literal")
                            .with_hint("strings end with `\"` on the same line"),
                    );
                    return;
                }
                _ => self.pos += 1,
            }
        }
    }

    fn char_literal(&mut self) {
        let start = self.pos;
        self.pos += 1;
        loop {
            match self.peek(0) {
                b'\'' => {
                    self.pos += 1;
                    if self.pos - start == 2 {
                        self.invalid(start, Diagnostic::error(codes::BAD_CHAR_LITERAL, "empty character literal"));
                    } else {
                        self.push(TokenKind::Char, start);
                    }
                    return;
                }
                b'\\' if self.peek(1) != b'\n' && self.pos + 1 < self.bytes.len() => self.pos += 2,
                _ if self.pos >= self.bytes.len() || self.peek(0) == b'\n' => {
                    self.invalid(start, Diagnostic::error(codes::BAD_CHAR_LITERAL, "unterminated character literal"));
                    return;
                }
                _ => self.pos += 1,
            }
        }
    }
}

/// Decodes the escapes of a string or character literal body (without quotes).
/// Returns the bytes, or the byte offset and a description of the first bad escape.
pub fn unescape(body: &str) -> Result<Vec<u8>, (usize, String)> {
    let bytes = body.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b != b'\\' {
            out.push(b);
            i += 1;
            continue;
        }
        let escape_at = i;
        let Some(&e) = bytes.get(i + 1) else {
            return Err((escape_at, "a backslash ends the literal".to_string()));
        };
        i += 2;
        let value = match e {
            b'n' => b'\n',
            b't' => b'\t',
            b'r' => b'\r',
            b'0'..=b'7' => {
                let mut v: u32 = (e - b'0') as u32;
                let mut n = 1;
                while n < 3 && i < bytes.len() && (b'0'..=b'7').contains(&bytes[i]) {
                    v = v * 8 + (bytes[i] - b'0') as u32;
                    i += 1;
                    n += 1;
                }
                if v > 255 {
                    return Err((escape_at, format!("octal escape `\\{:o}` is larger than a byte", v)));
                }
                v as u8
            }
            b'x' => {
                let mut v: u32 = 0;
                let mut n = 0;
                while i < bytes.len() && bytes[i].is_ascii_hexdigit() {
                    v = v.saturating_mul(16) + (bytes[i] as char).to_digit(16).unwrap_or(0);
                    i += 1;
                    n += 1;
                }
                if n == 0 || v > 255 {
                    return Err((escape_at, "`\\x` needs one or two hex digits".to_string()));
                }
                v as u8
            }
            b'a' => 7,
            b'b' => 8,
            b'f' => 12,
            b'v' => 11,
            b'\\' => b'\\',
            b'\'' => b'\'',
            b'"' => b'"',
            b'?' => b'?',
            b'\n' => continue,
            other => return Err((escape_at, format!("unknown escape `\\{}`", other as char))),
        };
        out.push(value);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<(String, bool)> {
        let mut d = Diagnostics::new();
        lex(FileId(0), src, &mut d)
            .into_iter()
            .map(|t| (t.text.to_string(), matches!(t.kind, TokenKind::Invalid(_))))
            .collect()
    }

    #[test]
    fn punctuators_take_the_longest_match() {
        let toks: Vec<String> = kinds("a<<=b...c::d->e ++ += ##").into_iter().map(|t| t.0).collect();
        assert_eq!(toks, ["a", "<<=", "b", "...", "c", "::", "d", "->", "e", "++", "+=", "##"]);
    }

    #[test]
    fn numbers_keep_suffixes_and_stop_before_ellipsis() {
        let toks: Vec<String> =
            kinds("1 2.5 1e-10 10ul 1d 1.5f 0x1F 0x1p-53 1...2 .5").into_iter().map(|t| t.0).collect();
        assert_eq!(toks, ["1", "2.5", "1e-10", "10ul", "1d", "1.5f", "0x1F", "0x1p-53", "1", "...", "2", ".5"]);
    }

    #[test]
    fn comments_and_splices_are_whitespace() {
        let mut d = Diagnostics::new();
        let toks = lex(FileId(0), "a // x\n#define X \\\n 1\n/* y\n */ b", &mut d);
        let texts: Vec<&str> = toks.iter().map(|t| t.text.as_str()).collect();
        assert_eq!(texts, ["a", "#", "define", "X", "1", "b"]);
        let starts: Vec<bool> = toks.iter().map(|t| t.line_start).collect();
        assert_eq!(starts, [true, true, false, false, false, true]);
        assert!(d.is_empty());
    }

    #[test]
    fn bad_text_becomes_invalid_tokens_not_errors() {
        let mut d = Diagnostics::new();
        let toks = lex(FileId(0), "don't\n@ \"abc", &mut d);
        assert!(d.is_empty());
        assert_eq!(toks.iter().filter(|t| matches!(t.kind, TokenKind::Invalid(_))).count(), 3);
    }

    #[test]
    fn unterminated_comment_is_reported() {
        let mut d = Diagnostics::new();
        lex(FileId(0), "a /* b", &mut d);
        assert_eq!(d.iter().next().map(|d| d.code.id), Some("E0001"));
    }

    #[test]
    fn escapes_decode() {
        assert_eq!(unescape(r"a\n\t\x41\101\\").unwrap(), b"a\n\tAA\\");
        assert!(unescape(r"\q").is_err());
    }
}

//! Diagnostics as plain data.
//!
//! A [`Diagnostic`] has a stable [`Code`], a severity, a message, a primary label (span +
//! text), secondary labels, notes and an optional hint. Nothing here knows how to print
//! itself to a terminal except [`render`], which is the single place that uses
//! `codespan-reporting`; the server and the CLI both go through it.
//!
//! Codes are grouped by letter, which also gives the [`ErrorClass`]:
//! `E` user errors found at compile time, `R` user errors found at run time,
//! `W` warnings, `L` compiler limitations, `B` compiler bugs.
//! Every code is listed in `docs/errors.md` (a test keeps the two in sync).

mod codes;
pub mod render;

pub use codes::*;

use crate::span::Span;

/// A stable diagnostic code such as `E0101`, with a one-line title for the error index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Code {
    pub id: &'static str,
    pub title: &'static str,
}

/// Whose fault a failure is: the three error classes every caller can rely on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// The program is wrong (compile time or run time).
    User,
    /// The program is fine but uses something withloop does not support (yet).
    Limitation,
    /// withloop itself is wrong.
    Bug,
}

impl Code {
    pub fn class(self) -> ErrorClass {
        match self.id.as_bytes().first() {
            Some(b'L') => ErrorClass::Limitation,
            Some(b'B') => ErrorClass::Bug,
            _ => ErrorClass::User,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Note,
    Warning,
    Error,
}

/// A span with an explanatory message.
#[derive(Clone, Debug, PartialEq)]
pub struct Label {
    pub span: Span,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostic {
    pub code: Code,
    pub severity: Severity,
    pub message: String,
    pub primary: Option<Label>,
    pub secondary: Vec<Label>,
    pub notes: Vec<String>,
    pub hint: Option<String>,
}

impl Diagnostic {
    pub fn error(code: Code, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            code,
            severity: Severity::Error,
            message: message.into(),
            primary: None,
            secondary: Vec::new(),
            notes: Vec::new(),
            hint: None,
        }
    }

    pub fn warning(code: Code, message: impl Into<String>) -> Diagnostic {
        Diagnostic { severity: Severity::Warning, ..Diagnostic::error(code, message) }
    }

    /// Sets the primary location; `label` may be empty.
    pub fn at(mut self, span: Span, label: impl Into<String>) -> Diagnostic {
        self.primary = Some(Label { span, message: label.into() });
        self
    }

    pub fn with_label(mut self, span: Span, label: impl Into<String>) -> Diagnostic {
        self.secondary.push(Label { span, message: label.into() });
        self
    }

    pub fn with_note(mut self, note: impl Into<String>) -> Diagnostic {
        self.notes.push(note.into());
        self
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Diagnostic {
        self.hint = Some(hint.into());
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    pub fn span(&self) -> Option<Span> {
        self.primary.as_ref().map(|l| l.span)
    }
}

/// Diagnostics collected by a phase; phases push and keep going.
#[derive(Clone, Debug, Default)]
pub struct Diagnostics {
    list: Vec<Diagnostic>,
}

impl Diagnostics {
    pub fn new() -> Diagnostics {
        Diagnostics::default()
    }

    pub fn push(&mut self, diagnostic: Diagnostic) {
        // The same error reported twice at the same place (e.g. from a macro used in
        // several spots that all map to one span) is noise.
        if !self
            .list
            .iter()
            .any(|d| d.code == diagnostic.code && d.primary == diagnostic.primary && d.message == diagnostic.message)
        {
            self.list.push(diagnostic);
        }
    }

    pub fn extend(&mut self, other: impl IntoIterator<Item = Diagnostic>) {
        for d in other {
            self.push(d);
        }
    }

    pub fn has_errors(&self) -> bool {
        self.list.iter().any(Diagnostic::is_error)
    }

    pub fn error_count(&self) -> usize {
        self.list.iter().filter(|d| d.is_error()).count()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Diagnostic> {
        self.list.iter()
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Drops what was pushed after the first `len` (a speculative walk's).
    pub fn truncate(&mut self, len: usize) {
        self.list.truncate(len);
    }

    /// The most recently added diagnostic (to attach a label to it).
    pub fn last_mut(&mut self) -> Option<&mut Diagnostic> {
        self.list.last_mut()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Sorted by file and position, errors before warnings at the same place.
    pub fn into_sorted(mut self) -> Vec<Diagnostic> {
        self.list.sort_by_key(|d| {
            let (f, s) = d.span().map(|s| (s.file.0, s.start)).unwrap_or((u32::MAX, 0));
            (f, s, std::cmp::Reverse(d.severity))
        });
        self.list
    }
}

impl IntoIterator for Diagnostics {
    type Item = Diagnostic;
    type IntoIter = std::vec::IntoIter<Diagnostic>;
    fn into_iter(self) -> Self::IntoIter {
        self.list.into_iter()
    }
}

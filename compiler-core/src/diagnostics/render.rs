//! Rendering diagnostics as rustc-style text with `codespan-reporting`.

use codespan_reporting::diagnostic as cs;
use codespan_reporting::files::{Error as FilesError, Files};
use codespan_reporting::term;

use super::{Diagnostic, Severity};
use crate::span::{FileId, SourceMap};

impl<'a> Files<'a> for SourceMap {
    type FileId = FileId;
    type Name = &'a str;
    type Source = &'a str;

    fn name(&'a self, id: FileId) -> Result<&'a str, FilesError> {
        Ok(self.get(id).name.as_str())
    }

    fn source(&'a self, id: FileId) -> Result<&'a str, FilesError> {
        Ok(self.get(id).text.as_str())
    }

    fn line_index(&'a self, id: FileId, byte_index: usize) -> Result<usize, FilesError> {
        Ok(self.get(id).line_col(byte_index as u32).0 - 1)
    }

    fn line_range(&'a self, id: FileId, line_index: usize) -> Result<std::ops::Range<usize>, FilesError> {
        let text = &self.get(id).text;
        let starts = codespan_reporting::files::line_starts(text).collect::<Vec<_>>();
        let start = *starts.get(line_index).ok_or(FilesError::LineTooLarge { given: line_index, max: starts.len() })?;
        let end = starts.get(line_index + 1).copied().unwrap_or(text.len());
        Ok(start..end)
    }
}

fn to_codespan(diagnostic: &Diagnostic) -> cs::Diagnostic<FileId> {
    let severity = match diagnostic.severity {
        Severity::Error => cs::Severity::Error,
        Severity::Warning => cs::Severity::Warning,
        Severity::Note => cs::Severity::Note,
    };
    let mut labels = Vec::new();
    if let Some(primary) = &diagnostic.primary {
        labels.push(
            cs::Label::primary(primary.span.file, primary.span.start as usize..primary.span.end as usize)
                .with_message(primary.message.clone()),
        );
    }
    for label in &diagnostic.secondary {
        labels.push(
            cs::Label::secondary(label.span.file, label.span.start as usize..label.span.end as usize)
                .with_message(label.message.clone()),
        );
    }
    let mut notes = diagnostic.notes.clone();
    if let Some(hint) = &diagnostic.hint {
        notes.push(format!("hint: {hint}"));
    }
    cs::Diagnostic::new(severity)
        .with_code(diagnostic.code.id)
        .with_message(diagnostic.message.clone())
        .with_labels(labels)
        .with_notes(notes)
}

/// Renders one diagnostic as plain text (no colour), the way rustc prints errors.
pub fn render(sources: &SourceMap, diagnostic: &Diagnostic) -> String {
    let config = term::Config::default();
    match term::emit_into_string(&config, sources, &to_codespan(diagnostic)) {
        Ok(text) => text,
        // A span outside its file is our bug; still show the message.
        Err(_) => format!("{}[{}]: {}\n", severity_word(diagnostic.severity), diagnostic.code.id, diagnostic.message),
    }
}

/// Renders several diagnostics, separated the way rustc separates them.
pub fn render_all<'a>(sources: &SourceMap, diagnostics: impl IntoIterator<Item = &'a Diagnostic>) -> String {
    let mut out = String::new();
    for d in diagnostics {
        out.push_str(&render(sources, d));
    }
    out
}

fn severity_word(severity: Severity) -> &'static str {
    match severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Note => "note",
    }
}

/// One-line form: `file:line:col: error[E0101]: message`.
pub fn render_short(sources: &SourceMap, diagnostic: &Diagnostic) -> String {
    let location = diagnostic.span().map(|s| sources.location(s) + ": ").unwrap_or_default();
    format!("{location}{}[{}]: {}", severity_word(diagnostic.severity), diagnostic.code.id, diagnostic.message)
}

//! Source files and byte spans.
//!
//! Every token, AST node and diagnostic carries a [`Span`]: a file and a half-open byte
//! range in that file's *original* text. The preprocessor keeps spans pointing into the
//! file a token came from (macro expansions point at the macro's use), so diagnostics
//! always show text the user wrote.

use smol_str::SmolStr;

/// Index of a file in a [`SourceMap`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId(pub u32);

/// A half-open byte range `start..end` in one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Span {
    pub file: FileId,
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub fn new(file: FileId, start: usize, end: usize) -> Span {
        Span { file, start: start as u32, end: end.max(start) as u32 }
    }

    /// The smallest span covering both `self` and `other` (same file), else `self`.
    pub fn to(self, other: Span) -> Span {
        if self.file != other.file {
            return self;
        }
        Span { file: self.file, start: self.start.min(other.start), end: self.end.max(other.end) }
    }

    /// An empty span at the end of `self`.
    pub fn end_point(self) -> Span {
        Span { file: self.file, start: self.end, end: self.end }
    }
}

/// Where a file came from; decides how diagnostics and run-time errors treat it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// Text the user submitted (or included from their own files).
    User,
    /// Part of withloop's prelude / standard modules, written in SaC.
    Library,
    /// Command-line material such as `--arg` values or `-D` definitions.
    CommandLine,
}

/// One source text.
#[derive(Clone, Debug)]
pub struct SourceFile {
    pub name: SmolStr,
    pub text: String,
    pub kind: FileKind,
    line_starts: Vec<u32>,
}

impl SourceFile {
    fn new(name: SmolStr, text: String, kind: FileKind) -> SourceFile {
        let mut line_starts = vec![0u32];
        for (i, b) in text.bytes().enumerate() {
            if b == b'\n' {
                line_starts.push(i as u32 + 1);
            }
        }
        SourceFile { name, text, kind, line_starts }
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub fn line_col(&self, offset: u32) -> (usize, usize) {
        let line_idx = match self.line_starts.binary_search(&offset) {
            Ok(i) => i,
            Err(i) => i - 1,
        };
        let line_start = self.line_starts[line_idx] as usize;
        let offset = (offset as usize).min(self.text.len());
        let col = self.text.get(line_start..offset).map(|s| s.chars().count()).unwrap_or(offset - line_start);
        (line_idx + 1, col + 1)
    }
}

/// All files taking part in one compilation.
#[derive(Clone, Debug, Default)]
pub struct SourceMap {
    files: Vec<SourceFile>,
}

impl SourceMap {
    pub fn new() -> SourceMap {
        SourceMap::default()
    }

    pub fn add(&mut self, name: impl Into<SmolStr>, text: impl Into<String>, kind: FileKind) -> FileId {
        let id = FileId(self.files.len() as u32);
        self.files.push(SourceFile::new(name.into(), text.into(), kind));
        id
    }

    pub fn get(&self, id: FileId) -> &SourceFile {
        &self.files[id.0 as usize]
    }

    pub fn files(&self) -> impl Iterator<Item = (FileId, &SourceFile)> {
        self.files.iter().enumerate().map(|(i, f)| (FileId(i as u32), f))
    }

    pub fn find(&self, name: &str) -> Option<FileId> {
        self.files.iter().position(|f| f.name == name).map(|i| FileId(i as u32))
    }

    /// `file:line:col` of the start of a span.
    pub fn location(&self, span: Span) -> String {
        let file = self.get(span.file);
        let (line, col) = file.line_col(span.start);
        format!("{}:{}:{}", file.name, line, col)
    }

    /// The source text a span covers.
    pub fn snippet(&self, span: Span) -> &str {
        let text = &self.get(span.file).text;
        text.get(span.start as usize..span.end as usize).unwrap_or("")
    }

    pub fn is_library(&self, span: Span) -> bool {
        self.get(span.file).kind == FileKind::Library
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_characters_from_one() {
        let mut map = SourceMap::new();
        let id = map.add("a.sac", "ab\ncdé\nx", FileKind::User);
        let file = map.get(id);
        assert_eq!(file.line_col(0), (1, 1));
        assert_eq!(file.line_col(3), (2, 1));
        assert_eq!(file.line_col(8), (3, 1));
        assert_eq!(map.location(Span::new(id, 4, 5)), "a.sac:2:2");
    }
}

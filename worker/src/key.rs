//! Cache keys: a BLAKE3 hash over a versioned, readable tuple of everything a
//! compilation's output depends on.
//!
//! The tuple ([`KeyComponents`]) is stored beside every cached compilation and
//! returned by `GET /v1/compilations/{key}`, so "why did this miss?" is answered
//! by comparing two tuples. Its canonical JSON (fields in declaration order,
//! maps sorted, lists sorted and deduplicated where order does not matter) is
//! what is hashed:
//!
//! | component  | what it holds |
//! |------------|---------------|
//! | `format`   | [`CACHE_FORMAT`], bumped when the tuple or the stored layout changes |
//! | `compiler` | crate version and git commit of the server (`withloop 0.1.0 (3f2a…)`) |
//! | `language` | `sac` or `l0` |
//! | `file_name`| the source's name (it appears in diagnostics and reports) |
//! | `source`   | BLAKE3 of the normalised source |
//! | `includes` | include file name → BLAKE3 of its normalised text |
//! | `entries`  | exported entry functions, sorted (empty: all) |
//! | `shapes`   | shape hints in canonical form (`main.a=double[100,100]`), sorted |
//! | `options`  | every option by name, sorted, defaults written out |
//! | `target`   | triple, CPU and CPU features code is generated for |
//! | `emit`     | artifact kinds, sorted |
//!
//! Normalising a source only removes differences that cannot change any output:
//! `\r\n` becomes `\n`, and trailing spaces and tabs at line ends and blank lines
//! at the end of the file go (line and column numbers stay the same) — except
//! blanks after a backslash, which would make it a line continuation.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Version of the key tuple and of the stored layout.
pub const CACHE_FORMAT: u32 = 1;

/// The compiler's build identity: crate version and git commit.
pub fn compiler_id() -> String {
    format!("withloop {} ({})", env!("CARGO_PKG_VERSION"), env!("WITHLOOP_GIT_HASH"))
}

/// The code generation target.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TargetComponents {
    pub triple: String,
    pub cpu: String,
    pub features: String,
}

/// Everything a compilation's output depends on (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct KeyComponents {
    pub format: u32,
    pub compiler: String,
    pub language: String,
    pub file_name: String,
    pub source: String,
    pub includes: BTreeMap<String, String>,
    pub entries: Vec<String>,
    pub shapes: Vec<String>,
    pub options: BTreeMap<String, String>,
    pub target: TargetComponents,
    pub emit: Vec<String>,
}

impl KeyComponents {
    /// The cache key: BLAKE3 of the canonical JSON, in hex.
    pub fn key(&self) -> String {
        let json = serde_json::to_string(self).unwrap_or_default();
        blake3::hash(json.as_bytes()).to_hex().to_string()
    }

    /// The names of the components where `self` and `other` differ.
    pub fn differences(&self, other: &KeyComponents) -> Vec<&'static str> {
        let mut out = Vec::new();
        let mut check = |name: &'static str, same: bool| {
            if !same {
                out.push(name);
            }
        };
        check("format", self.format == other.format);
        check("compiler", self.compiler == other.compiler);
        check("language", self.language == other.language);
        check("file_name", self.file_name == other.file_name);
        check("source", self.source == other.source);
        check("includes", self.includes == other.includes);
        check("entries", self.entries == other.entries);
        check("shapes", self.shapes == other.shapes);
        check("options", self.options == other.options);
        check("target", self.target == other.target);
        check("emit", self.emit == other.emit);
        out
    }
}

/// The source as it is hashed and compiled (see the module docs).
pub fn normalise_source(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 1);
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let trimmed = line.trim_end_matches([' ', '\t']);
        // A backslash before blanks is no line continuation; without them it
        // would be one (the program would change).
        out.push_str(if trimmed.ends_with('\\') { line } else { trimmed });
        out.push('\n');
    }
    let kept = out.trim_end_matches('\n').len();
    out.truncate(kept);
    out.push('\n');
    out
}

/// BLAKE3 of `bytes`, in hex.
pub fn content_hash(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

/// Whether `text` looks like a key (64 lowercase hex digits).
pub fn is_key(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalising_keeps_positions_and_drops_invisible_differences() {
        assert_eq!(normalise_source("int x; \r\nint y;\t\n\n\n"), "int x;\nint y;\n");
        assert_eq!(normalise_source("a"), "a\n");
        assert_eq!(normalise_source("a\n  b"), "a\n  b\n");
        // `\` before blanks is a stray character (E0005); without the blanks, a
        // line continuation: they stay.
        assert_eq!(normalise_source("#define N 1 \\ \n+ 2\\\n"), "#define N 1 \\ \n+ 2\\\n");
    }

    #[test]
    fn keys_differ_by_component_and_name_the_difference() {
        let a = KeyComponents {
            format: CACHE_FORMAT,
            compiler: compiler_id(),
            language: "sac".into(),
            file_name: "p.sac".into(),
            source: content_hash(b"x"),
            includes: BTreeMap::new(),
            entries: vec![],
            shapes: vec![],
            options: BTreeMap::from([("opt_level".to_string(), "3".to_string())]),
            target: TargetComponents { triple: "x86_64".into(), cpu: "generic".into(), features: String::new() },
            emit: vec!["report".into()],
        };
        let mut b = a.clone();
        assert_eq!(a.key(), b.key());
        assert!(is_key(&a.key()));
        b.shapes.push("main.a=int[3]".into());
        assert_ne!(a.key(), b.key());
        assert_eq!(a.differences(&b), vec!["shapes"]);
    }
}

//! Repository hygiene checked by `cargo test`.

use std::path::Path;

use compiler_core::diagnostics::ALL_CODES;

#[test]
fn error_index_lists_every_code() {
    let index = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/errors.md"))
        .expect("docs/errors.md");
    let documented: Vec<&str> =
        index.lines().filter_map(|l| l.strip_prefix("## ")).filter_map(|l| l.split(':').next()).collect();
    for code in ALL_CODES {
        let heading = format!("## {}: {}", code.id, code.title);
        assert!(index.contains(&heading), "docs/errors.md lacks `{heading}`");
    }
    for id in documented {
        assert!(ALL_CODES.iter().any(|c| c.id == id), "docs/errors.md documents {id}, which the registry lacks");
    }
    let mut ids: Vec<&str> = ALL_CODES.iter().map(|c| c.id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), ALL_CODES.len(), "duplicate diagnostic codes");
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn every_module_starts_with_a_doc_comment() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for krate in ["compiler-core/src", "cli/src", "tests"] {
        rust_files(&root.join(krate), &mut files);
    }
    let missing: Vec<String> = files
        .iter()
        .filter(|p| {
            let text = std::fs::read_to_string(p).unwrap_or_default();
            !text.trim_start().starts_with("//!")
        })
        .map(|p| p.display().to_string())
        .collect();
    assert!(missing.is_empty(), "modules without a `//!` doc comment: {missing:?}");
}

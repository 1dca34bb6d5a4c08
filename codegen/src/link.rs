//! Linking objects into shared libraries and executables with the system `cc`.
//!
//! Compiled code needs the runtime, `libwithloop_rt.a` (the `withloop-rt`
//! crate built as a static library). It is looked for in `$WITHLOOP_RT_LIB`
//! (the file), then beside the running executable and one directory up (where
//! cargo puts it for `target/<profile>/withloop` and for test binaries in
//! `target/<profile>/deps`), the newest of cargo's copies there. The C compiler is `$CC`, else `cc`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::CodegenError;

const RUNTIME_FILE: &str = "libwithloop_rt.a";

/// What [`link`] makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkKind {
    SharedLibrary,
    Executable,
}

/// The runtime static library.
pub fn runtime_library() -> Result<PathBuf, CodegenError> {
    if let Some(p) = std::env::var_os("WITHLOOP_RT_LIB") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(CodegenError::Llvm(format!("WITHLOOP_RT_LIB names `{}`, which is not a file", p.display())))
        };
    }
    let exe = std::env::current_exe().map_err(|e| CodegenError::Llvm(format!("locating the runtime: {e}")))?;
    if let Some(found) = near_executable(&exe, |d| {
        // The newer of cargo's copy beside the binaries and its build in
        // `deps/`: `cargo test` rebuilds the latter only, and a stale copy
        // lacks the runtime functions newer code calls.
        let beside = Some(d.join(RUNTIME_FILE)).filter(|c| c.is_file());
        [beside, newest_in(&d.join("deps"))].into_iter().flatten().max_by_key(|p| modified(p))
    }) {
        return Ok(found);
    }
    Err(CodegenError::Llvm(format!(
        "the runtime library `{RUNTIME_FILE}` is not beside `{}`; build it with `cargo build -p withloop-rt` \
         or point WITHLOOP_RT_LIB at it",
        exe.display()
    )))
}

/// The first thing `find` finds in the directory of `exe` or the one above it
/// (where cargo puts binaries, and test binaries in `deps/`).
pub fn near_executable(exe: &Path, find: impl Fn(&Path) -> Option<PathBuf>) -> Option<PathBuf> {
    let beside = exe.parent()?;
    find(beside).or_else(|| beside.parent().and_then(&find))
}

fn modified(p: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(p).ok()?.modified().ok()
}

/// The most recently built `libwithloop_rt-<hash>.a` in cargo's `deps`.
fn newest_in(deps: &Path) -> Option<PathBuf> {
    let entries = std::fs::read_dir(deps).ok()?;
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("libwithloop_rt-") && name.ends_with(".a")
        })
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .max()
        .map(|(_, p)| p)
}

/// Links `object` (bytes of a relocatable object) with the runtime into
/// `out`.
pub fn link(object: &[u8], kind: LinkKind, out: &Path) -> Result<(), CodegenError> {
    let runtime = runtime_library()?;
    let dir = tempdir()?;
    let obj = dir.join("program.o");
    std::fs::write(&obj, object).map_err(|e| CodegenError::Llvm(format!("writing `{}`: {e}", obj.display())))?;
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let mut cmd = Command::new(&cc);
    if kind == LinkKind::SharedLibrary {
        cmd.arg("-shared");
    }
    // Unused runtime code and the runtime's debug information stay out.
    cmd.arg("-o").arg(out).arg(&obj).arg(&runtime).args(["-Wl,--gc-sections", "-Wl,-S"]);
    // What the Rust standard library in the runtime needs.
    cmd.args(["-lpthread", "-ldl", "-lm", "-lgcc_s", "-lc"]);
    // Vectorised math calls glibc's libmvec (crate::vecmath).
    if object.windows(4).any(|w| w == b"_ZGV") {
        cmd.arg("-lmvec");
    }
    let result = cmd.output();
    let _ = std::fs::remove_dir_all(&dir);
    let output = result.map_err(|e| CodegenError::Llvm(format!("running the C compiler `{cc}`: {e}")))?;
    if !output.status.success() {
        return Err(CodegenError::Llvm(format!(
            "linking with `{cc}` failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    Ok(())
}

/// One relocatable object holding all of `objects`: the parts of a module
/// compiled on several threads. Merged in process ([`crate::elf::merge`]),
/// else by the C compiler (`cc -r`, for objects the merger does not read);
/// `None` when neither can (the caller then compiles in one part).
pub fn relocatable(objects: &[Vec<u8>]) -> Option<Vec<u8>> {
    crate::elf::merge(objects).ok().or_else(|| system_relocatable(objects))
}

/// [`relocatable`] by `cc -r`.
fn system_relocatable(objects: &[Vec<u8>]) -> Option<Vec<u8>> {
    let dir = tempdir().ok()?;
    let merged = (|| {
        let mut inputs = Vec::with_capacity(objects.len());
        for (k, o) in objects.iter().enumerate() {
            let p = dir.join(format!("part{k}.o"));
            std::fs::write(&p, o).ok()?;
            inputs.push(p);
        }
        let out = dir.join("merged.o");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
        let status = Command::new(&cc).args(["-r", "-nostdlib", "-o"]).arg(&out).args(&inputs).output().ok()?;
        if !status.status.success() {
            return None;
        }
        std::fs::read(&out).ok()
    })();
    let _ = std::fs::remove_dir_all(&dir);
    merged
}

/// [`link`] into a temporary file, returning its bytes (for callers that keep
/// outputs in memory, such as the compile service's cache).
pub fn link_bytes(object: &[u8], kind: LinkKind) -> Result<Vec<u8>, CodegenError> {
    let dir = tempdir()?;
    let out = dir.join("output");
    let result = link(object, kind, &out).and_then(|()| {
        std::fs::read(&out).map_err(|e| CodegenError::Llvm(format!("reading `{}`: {e}", out.display())))
    });
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// A fresh private directory under the system's temporary directory.
fn tempdir() -> Result<PathBuf, CodegenError> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let base = std::env::temp_dir();
    for _ in 0..100 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let p = base.join(format!("withloop-link-{}-{n}", std::process::id()));
        match std::fs::create_dir(&p) {
            Ok(()) => return Ok(p),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(CodegenError::Llvm(format!("creating a temporary directory: {e}"))),
        }
    }
    Err(CodegenError::Llvm("no free temporary directory name".into()))
}

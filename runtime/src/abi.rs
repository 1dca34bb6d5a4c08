//! The C ABI's side of the runtime: array descriptors, contexts and error
//! accessors for C callers of compiled code (see `codegen::abi` for the
//! exported functions and the generated header, which declares these).
//!
//! An array crosses the boundary as a [`WlArrayDesc`]. Arguments are borrowed:
//! compiled code wraps the caller's buffer without copying and never writes
//! it (an update copies first). Results are owned by the caller, who releases
//! each with [`wl_array_release`].

use std::ffi::{c_char, c_void};

use crate::array::{WlArray, wl_copy, wl_dec, wl_wrap};
use crate::error::{WlCtx, WlLoc, set_error};

/// An array at the C boundary: row-major elements, rank and extents.
#[repr(C)]
#[derive(Debug)]
pub struct WlArrayDesc {
    /// The first element (the element type is the parameter's).
    pub data: *mut c_void,
    pub rank: i64,
    /// `rank` extents.
    pub shape: *mut i64,
    /// For results: the runtime array that owns `data` and `shape` (release it
    /// with [`wl_array_release`]); ignored in arguments.
    pub owner: *mut c_void,
}

/// An argument array for compiled code: the caller's buffer, checked against
/// the parameter's type. `want_rank`: the rank the type requires, or `-(n+1)`
/// for "at least n" (`-1` for `[*]`, `-2` for `[+]`); `want_shape`: `want_rank` extents,
/// `-1` where any extent is allowed (null: none are fixed). Returns null after
/// recording an error. The array is a view: release it with `wl_unwrap`.
///
/// # Safety
/// `ctx` is valid; `desc` is null or points to a descriptor whose `shape` has
/// `rank` extents and whose `data` holds their product elements of `elem`;
/// `want_shape` is null or has `want_rank` entries; strings NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_abi_array_in(
    ctx: *mut WlCtx,
    loc: *const WlLoc,
    elem: i32,
    desc: *const WlArrayDesc,
    want_rank: i64,
    want_shape: *const i64,
    parameter: *const c_char,
) -> *mut WlArray {
    let name = unsafe { crate::error::text(parameter) };
    // R0013: a malformed descriptor; R0004: a well-formed array the
    // function's type does not admit.
    let fail_code = |code: &str, message: String| {
        unsafe { set_error(ctx, loc, code, &message) };
        std::ptr::null_mut()
    };
    let fail = |message: String| fail_code("R0013", message);
    let mismatch = |message: String| fail_code("R0004", message);
    if desc.is_null() {
        return fail(format!("argument `{name}`: the array descriptor is null"));
    }
    let d = unsafe { &*desc };
    if d.rank < 0 || (d.rank > 0 && d.shape.is_null()) {
        return fail(format!("argument `{name}`: rank {} without extents", d.rank));
    }
    let extents: &[i64] =
        if d.rank == 0 { &[] } else { unsafe { std::slice::from_raw_parts(d.shape, d.rank as usize) } };
    let shown = || format!("[{}]", extents.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(","));
    if let Some(e) = extents.iter().find(|e| **e < 0) {
        return fail(format!("argument `{name}`: negative extent {e} in shape {}", shown()));
    }
    // `shape(a)` is an int vector: an extent must be an `int`.
    if let Some(e) = extents.iter().find(|e| **e > i32::MAX as i64) {
        return fail(format!("argument `{name}`: extent {e} in shape {} is larger than an int holds", shown()));
    }
    let size = extents.iter().try_fold(1i64, |acc, e| acc.checked_mul(*e));
    if size.is_none() {
        return fail(format!("argument `{name}`: shape {} has too many elements", shown()));
    }
    if size != Some(0) && d.data.is_null() {
        return fail(format!("argument `{name}`: the data pointer is null"));
    }
    if want_rank < 0 {
        let least = -(want_rank + 1);
        if d.rank < least {
            return mismatch(format!("argument `{name}` must have rank {least} or more, not {}", d.rank));
        }
    } else if want_rank != d.rank {
        return mismatch(format!("argument `{name}` must have rank {want_rank}, not {} (shape {})", d.rank, shown()));
    } else if !want_shape.is_null() {
        let want = unsafe { std::slice::from_raw_parts(want_shape, want_rank as usize) };
        if want.iter().zip(extents).any(|(w, e)| *w >= 0 && w != e) {
            let expected = want
                .iter()
                .map(|w| if *w >= 0 { w.to_string() } else { ".".to_string() })
                .collect::<Vec<_>>()
                .join(",");
            return mismatch(format!("argument `{name}` must have shape [{expected}], not {}", shown()));
        }
    }
    let data =
        if d.data.is_null() { std::ptr::NonNull::<u64>::dangling().as_ptr() as *mut u8 } else { d.data as *mut u8 };
    let a = unsafe { wl_wrap(ctx, elem, data, d.rank, d.shape) };
    if a.is_null() {
        return fail(format!("argument `{name}`: out of memory"));
    }
    a
}

/// Hands a result array to the caller through `desc` (taking over the
/// reference). Arrays the runtime does not own (constants, the caller's own
/// argument buffers returned unchanged) are copied, so every result can be
/// released the same way; so is an array that holds other references too
/// (`return (b, b)`: each result the caller gets is its own to write).
///
/// # Safety
/// `ctx` and `a` valid; `desc` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_abi_array_out(ctx: *mut WlCtx, a: *mut WlArray, desc: *mut WlArrayDesc) -> i32 {
    let rc = unsafe { (*a).rc.load(std::sync::atomic::Ordering::Acquire) };
    let owned = if rc == 1 {
        a
    } else {
        let c = unsafe { wl_copy(ctx, a) };
        if c.is_null() {
            return 1;
        }
        if rc > 1 {
            // The copy takes this result's reference.
            unsafe { wl_dec(a) };
        }
        c
    };
    unsafe {
        let arr = &mut *owned;
        (*desc).data = arr.data as *mut c_void;
        (*desc).rank = arr.rank;
        (*desc).shape = arr.shape_mut().as_mut_ptr();
        (*desc).owner = owned as *mut c_void;
    }
    0
}

/// Releases a result array; the descriptor is cleared. Null and cleared
/// descriptors are ignored.
///
/// # Safety
/// `desc` is null or a descriptor a compiled function filled as a result.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_array_release(desc: *mut WlArrayDesc) {
    if desc.is_null() {
        return;
    }
    let d = unsafe { &mut *desc };
    if !d.owner.is_null() {
        unsafe { wl_dec(d.owner as *mut WlArray) };
    }
    d.owner = std::ptr::null_mut();
    d.data = std::ptr::null_mut();
    d.shape = std::ptr::null_mut();
    d.rank = 0;
}

/// Resets a context's error before a call from C.
///
/// # Safety
/// `ctx` is valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_ctx_clear(ctx: *mut WlCtx) {
    let c = unsafe { &mut *ctx };
    c.error = 0;
    c.depth = 0;
    c.loc = std::ptr::null();
    c.code = [0; 8];
    c.message[0] = 0;
    c.stack_floor = crate::error::stack_floor();
}

/// Sets how many threads parallel with-loops use (0: `WITHLOOP_THREADS` or
/// the machine's cores). A null context is ignored.
///
/// # Safety
/// `ctx` is null or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_ctx_set_threads(ctx: *mut WlCtx, threads: i32) {
    if let Some(c) = unsafe { ctx.as_mut() } {
        c.threads = threads.max(0);
    }
}

/// Sets the smallest with-loop part, in iterations, that is split over
/// threads (default `WITHLOOP_PARALLEL_MIN` or 32768). A null context is
/// ignored.
///
/// # Safety
/// `ctx` is null or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_ctx_set_parallel_min(ctx: *mut WlCtx, iterations: i64) {
    if let Some(c) = unsafe { ctx.as_mut() } {
        c.parallel_min = iterations.max(1);
    }
}

/// Sets the footprint, in bytes written and read, from which a with-loop
/// step of a loop stores past the caches (default `WITHLOOP_STREAM_MIN`, or
/// a third of the machine's last-level cache, at least 40 MiB, at most 100
/// MiB). A null context is ignored.
///
/// # Safety
/// `ctx` is null or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_ctx_set_stream_min(ctx: *mut WlCtx, bytes: i64) {
    if let Some(c) = unsafe { ctx.as_mut() } {
        c.stream_min = bytes.max(0);
    }
}

/// What the error accessors say of a null context (calls with one return -1
/// and record nothing).
const NO_CONTEXT: &std::ffi::CStr = c"";

/// The last error's code (`"R0001"`), or an empty string (also for a null
/// context).
///
/// # Safety
/// `ctx` is null or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_error_code(ctx: *const WlCtx) -> *const c_char {
    match unsafe { ctx.as_ref() } {
        Some(c) => c.code.as_ptr() as *const c_char,
        None => NO_CONTEXT.as_ptr(),
    }
}

/// The last error's message, or an empty string (also for a null context).
///
/// # Safety
/// `ctx` is null or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_error_message(ctx: *const WlCtx) -> *const c_char {
    match unsafe { ctx.as_ref() } {
        Some(c) => c.message.as_ptr() as *const c_char,
        None => NO_CONTEXT.as_ptr(),
    }
}

/// Where the last error happened: the source file's name (null when unknown),
/// with its line and column written through the pointers (each may be null;
/// 0 and null for a null context).
///
/// # Safety
/// `ctx` is null or valid; `line`, `column` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_error_location(ctx: *const WlCtx, line: *mut i32, column: *mut i32) -> *const c_char {
    let (file, l, col) = match unsafe { ctx.as_ref() } {
        Some(c) if c.error != 0 && !c.loc.is_null() => {
            let loc = unsafe { &*c.loc };
            (loc.file, loc.line, loc.column)
        }
        _ => (std::ptr::null(), 0, 0),
    };
    unsafe {
        if !line.is_null() {
            *line = l;
        }
        if !column.is_null() {
            *column = col;
        }
    }
    file
}

#[cfg(test)]
mod tests {
    /// Every C function the runtime defines is one no export may take
    /// (`compiler_core::ir::exports::RUNTIME_SYMBOLS`): a SaC function `inc`
    /// exported as `wl_inc` once bound its callers to the runtime's `wl_inc`.
    #[test]
    fn exports_avoid_every_runtime_symbol() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut defined = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            for (k, _) in text.match_indices("extern \"C\" fn wl_") {
                let name: String = text[k + "extern \"C\" fn ".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                defined.push(name);
            }
        }
        assert!(defined.len() > 40, "{defined:?}");
        let listed = compiler_core::ir::exports::RUNTIME_SYMBOLS;
        for name in &defined {
            assert!(listed.contains(&name.as_str()), "{name} is missing from RUNTIME_SYMBOLS");
        }
        for name in listed {
            assert!(defined.iter().any(|d| d == name), "{name} is in RUNTIME_SYMBOLS but not in the runtime");
        }
    }
}

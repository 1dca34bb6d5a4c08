//! The context compiled code threads through every call: the first run-time
//! error, where it happened, the current call site, and where output goes.

use std::ffi::{CStr, c_char, c_void};

use crate::array::WlArray;

/// A source location, as compiled code embeds them (one constant per place
/// that can fail).
#[repr(C)]
#[derive(Debug)]
pub struct WlLoc {
    /// The file's name (NUL-terminated).
    pub file: *const c_char,
    pub line: i32,
    pub column: i32,
    /// The span in the compiler's source map (for tools that map back).
    pub file_id: i32,
    pub start: i32,
    pub end: i32,
}

/// Where output goes: `write(user, bytes, len)`.
pub type WlWrite = unsafe extern "C" fn(*mut c_void, *const u8, usize);

/// The context. Compiled code reads `error` after every call, stores `site`
/// around calls and counts `depth`; the rest is the runtime's. The fields
/// compiled code touches come first, at fixed offsets (`codegen::rt`).
#[repr(C)]
#[derive(Debug)]
pub struct WlCtx {
    /// Non-zero once an error happened (offset 0).
    pub error: i32,
    /// Nested calls of compiled functions (offset 4).
    pub depth: i32,
    /// The call site errors of callee-blamed checks are reported at (offset 8).
    pub site: *const WlLoc,
    /// The location of the error (offset 16).
    pub loc: *const WlLoc,
    /// The most nested calls before a recursion error (offset 24).
    pub max_depth: i32,
    /// Threads for parallel with-loops (0: the machine's, or `WITHLOOP_THREADS`).
    pub threads: i32,
    /// Elements below which a with-loop runs on one thread.
    pub parallel_min: i64,
    /// The most elements one array may have.
    pub max_elements: i64,
    /// The error's code (`R0001`), NUL-terminated.
    pub code: [u8; 8],
    /// Its message, NUL-terminated (truncated to fit).
    pub message: [u8; 1024],
    pub write: Option<WlWrite>,
    pub write_user: *mut c_void,
    /// Elements copied into new arrays by `wl_copy` (an update that could not
    /// be made in place copies its array): what tests of in-place updates count.
    pub copied: i64,
    /// The lowest stack address calls may reach (0: no limit), set by
    /// [`crate::wl_ctx_clear`] at each call from C ([`stack_floor`]).
    /// Compiled code checks it before every call of a compiled function, so
    /// deep recursion ends in an error, not a crash, whatever its frames' size.
    pub stack_floor: usize,
    /// The footprint, in bytes written and read, from which a with-loop part
    /// that is a step of a loop stores past the caches (compiled code reads
    /// it where it picks a part's streaming copy; [`default_stream_min`]).
    pub stream_min: i64,
}

/// Stack kept free below the floor (at most; a quarter of a smaller stack):
/// the frames of the last compiled function and of the runtime functions it
/// calls (reporting an error formats its message) run there.
const STACK_MARGIN: usize = 256 << 10;

/// The stack a call from C may use where the thread's stack cannot be
/// asked for: a thread of Rust's default 2 MiB has this much left below a
/// host's own frames.
const STACK_BUDGET: usize = 1 << 20;

/// The floor for calls made from the caller's frame: a margin above the
/// low end of this thread's stack where the system tells it, else
/// [`STACK_BUDGET`] below this function's frame (which stands for the
/// caller's position).
pub fn stack_floor() -> usize {
    let marker = 0u8;
    let here = std::hint::black_box(&marker) as *const u8 as usize;
    match thread_stack() {
        Some((low, size)) if low < here => (low + STACK_MARGIN.min(size / 4)).min(here),
        _ => here.saturating_sub(STACK_BUDGET),
    }
}

/// This thread's stack, its low end and size (Linux with glibc:
/// `pthread_getattr_np`), asked once per thread.
fn thread_stack() -> Option<(usize, usize)> {
    thread_local! {
        static LOW: std::cell::Cell<Option<Option<(usize, usize)>>> = const { std::cell::Cell::new(None) };
    }
    LOW.try_with(|low| match low.get() {
        Some(known) => known,
        None => {
            let asked = ask_stack();
            low.set(Some(asked));
            asked
        }
    })
    .ok()
    .flatten()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn ask_stack() -> Option<(usize, usize)> {
    // `pthread_attr_t` is at most 64 bytes on glibc's targets; the buffer is larger.
    type Attr = [u64; 16];
    unsafe extern "C" {
        fn pthread_self() -> usize;
        fn pthread_getattr_np(thread: usize, attr: *mut Attr) -> i32;
        fn pthread_attr_getstack(attr: *const Attr, addr: *mut *mut c_void, size: *mut usize) -> i32;
        fn pthread_attr_destroy(attr: *mut Attr) -> i32;
    }
    let mut attr: Attr = [0; 16];
    // SAFETY: `attr` is large enough and destroyed after a successful init.
    unsafe {
        if pthread_getattr_np(pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut c_void = std::ptr::null_mut();
        let mut size = 0usize;
        let ok = pthread_attr_getstack(&attr, &mut addr, &mut size) == 0;
        pthread_attr_destroy(&mut attr);
        (ok && !addr.is_null() && size > 0).then_some((addr as usize, size))
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn ask_stack() -> Option<(usize, usize)> {
    None
}

/// The smallest with-loop part (in iterations) split over threads:
/// `WITHLOOP_PARALLEL_MIN`, else 32768.
fn default_parallel_min() -> i64 {
    static MIN: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *MIN.get_or_init(|| env_int("WITHLOOP_PARALLEL_MIN").unwrap_or(1 << 15).max(1))
}

/// The integer environment variable `name`, if set to one (spaces around
/// it allowed).
pub(crate) fn env_int(name: &str) -> Option<i64> {
    int_setting(&std::env::var(name).ok()?)
}

/// A setting's text read as an integer, if it is one.
fn int_setting(text: &str) -> Option<i64> {
    text.trim().parse::<i64>().ok()
}

/// The smallest footprint that streams, whatever the machine: more than one
/// Zen core complex's last-level cache (32 MiB) holds, by a margin. Measured
/// on a Zen 3 (32 MiB L3), one and two threads: a 27-point stencil over 128³
/// doubles (16 MiB read, 16 MiB written, the next step reading it) ran
/// 1.2-1.3x slower streaming, as its arrays stay mostly cached without;
/// logical implication of two 4000x4000 boolean arrays (48 MB) 0.77-0.84x
/// the time, a 2000x2000 relaxation (64 MB) 0.81-0.91x. Code generation
/// decides parts run once by this bound (their results are not read back
/// soon); loop steps by the context's [`WlCtx::stream_min`].
pub const STREAM_MIN_FOOTPRINT: i64 = 40 << 20;

/// The largest default bound ([`WlCtx::stream_min`]), however large the
/// last-level cache the machine reports: a guest's share of a large server's
/// cache is smaller than a third of it. On the Emerald Rapids guest below
/// (300 MiB L3 reported) the crossover lay between 85 and 144 MB; on a
/// Sapphire/Emerald Rapids guest reporting 480 MiB (session 53, where a third
/// of it, 160 MiB, was the bound) as well: cached, relaxation steps over
/// 2400x2400 doubles (92 MB) took 0.89x the time they took streaming on one
/// thread, 0.78x on two; over 2700x2700 (117 MB) 1.07x on one, 0.85x on
/// two; over 3000x3000 (144 MB) 1.11x on one, 1.0x on two.
pub const STREAM_MIN_MAX: i64 = 100 << 20;

/// The footprint from which a step of a loop streams its stores:
/// `WITHLOOP_STREAM_MIN` (bytes), else a third of the last-level cache, at
/// least [`STREAM_MIN_FOOTPRINT`] and at most [`STREAM_MIN_MAX`]. A step's
/// arrays that stay cached are read from the cache by the next step;
/// streamed, from memory. On an Emerald
/// Rapids guest (300 MiB L3 shared with other guests; two vCPUs), relaxation
/// steps over 2000x2000 doubles (64 MB) ran 0.76-0.87x the time without
/// streaming, over 2300x2300 (85 MB) 0.84x on two threads and 0.94-0.98x on
/// one, over 2600x2600 (108 MB) 0.85x on two threads but 1.2x on one, over
/// 3000x3000 (144 MB) 1.17-1.23x: the guest's share of the cache is about a
/// third of it.
fn default_stream_min() -> i64 {
    static MIN: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *MIN.get_or_init(|| {
        env_int("WITHLOOP_STREAM_MIN")
            .unwrap_or_else(|| {
                last_level_cache().map_or(0, |bytes| bytes / 3).clamp(STREAM_MIN_FOOTPRINT, STREAM_MIN_MAX)
            })
            .max(0)
    })
}

/// The size of the machine's last-level cache, as Linux describes CPU 0's
/// caches (`/sys/devices/system/cpu/cpu0/cache/index*/`: `level`, `type`,
/// `size` such as `32768K`).
fn last_level_cache() -> Option<i64> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    let mut best: Option<(u32, i64)> = None;
    for entry in dir.flatten() {
        let path = entry.path();
        let read = |name: &str| std::fs::read_to_string(path.join(name)).ok().map(|s| s.trim().to_string());
        if read("type").as_deref() == Some("Instruction") {
            continue;
        }
        let (Some(level), Some(size)) = (read("level").and_then(|l| l.parse::<u32>().ok()), read("size")) else {
            continue;
        };
        let Some(bytes) = cache_size_bytes(&size) else { continue };
        if best.is_none_or(|(l, _)| level > l) {
            best = Some((level, bytes));
        }
    }
    best.map(|(_, bytes)| bytes)
}

/// `32768K`, `1M`, `512` (bytes) as bytes.
fn cache_size_bytes(text: &str) -> Option<i64> {
    let (digits, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => text.split_at(i),
        None => (text, ""),
    };
    let n = digits.parse::<i64>().ok()?;
    let scale = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(scale)
}

impl Default for WlCtx {
    fn default() -> Self {
        WlCtx {
            error: 0,
            depth: 0,
            site: std::ptr::null(),
            loc: std::ptr::null(),
            max_depth: 10_000,
            threads: 0,
            parallel_min: default_parallel_min(),
            max_elements: compiler_core::interp::value::MAX_ELEMENTS as i64,
            code: [0; 8],
            message: [0; 1024],
            write: None,
            write_user: std::ptr::null_mut(),
            copied: 0,
            stack_floor: 0,
            stream_min: default_stream_min(),
        }
    }
}

impl WlCtx {
    /// The error's code and message, if one happened.
    pub fn error(&self) -> Option<(String, String)> {
        if self.error == 0 {
            return None;
        }
        let cstr = |b: &[u8]| {
            let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
            String::from_utf8_lossy(&b[..n]).into_owned()
        };
        Some((cstr(&self.code), cstr(&self.message)))
    }
}

/// Records an error unless one is recorded already. `loc` null: at the current
/// call site.
///
/// # Safety
/// `ctx` is a valid context or null; `loc` a valid location or null.
pub unsafe fn set_error(ctx: *mut WlCtx, loc: *const WlLoc, code: &str, message: &str) {
    if ctx.is_null() {
        return;
    }
    // SAFETY: valid context.
    let c = unsafe { &mut *ctx };
    if c.error != 0 {
        return;
    }
    c.error = 1;
    c.loc = if loc.is_null() { c.site } else { loc };
    let code = code.as_bytes();
    let n = code.len().min(7);
    c.code = [0; 8];
    c.code[..n].copy_from_slice(&code[..n]);
    let msg = message.as_bytes();
    let n = msg.len().min(c.message.len() - 1);
    c.message[..n].copy_from_slice(&msg[..n]);
    c.message[n] = 0;
}

/// # Safety
/// `p` is null or NUL-terminated.
pub(crate) unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// A new context (for C callers and executables), freed with [`wl_ctx_free`].
#[unsafe(no_mangle)]
pub extern "C" fn wl_ctx_new() -> *mut WlCtx {
    Box::into_raw(Box::default())
}

/// # Safety
/// `ctx` came from [`wl_ctx_new`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_ctx_free(ctx: *mut WlCtx) {
    if !ctx.is_null() {
        drop(unsafe { Box::from_raw(ctx) });
    }
}

/// An error with a fixed message.
///
/// # Safety
/// Pointers valid or null; strings NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_fail(ctx: *mut WlCtx, loc: *const WlLoc, code: *const c_char, message: *const c_char) {
    unsafe { set_error(ctx, loc, &text(code), &text(message)) };
}

fn vec_text(v: &[i64]) -> String {
    format!("[{}]", v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(","))
}

/// The components of an index operand: an int vector, or (`iv` null) the
/// scalar `scalar`.
///
/// # Safety
/// `iv` is null or a valid int vector.
pub(crate) unsafe fn index_components(iv: *const WlArray, scalar: i64) -> Vec<i64> {
    if iv.is_null() {
        return vec![scalar];
    }
    let a = unsafe { &*iv };
    (0..a.size as usize).map(|i| crate::values::element(a, i).as_i64().unwrap_or(0)).collect()
}

/// The elements of an int vector.
///
/// # Safety
/// `v` is a valid array.
pub(crate) unsafe fn int_elements(v: *const WlArray) -> Vec<i64> {
    let a = unsafe { &*v };
    (0..a.size as usize).map(|i| crate::values::element(a, i).as_i64().unwrap_or(0)).collect()
}

/// An index out of bounds (R0001), with the reference interpreter's message:
/// index `iv` (or the scalar `scalar` when `iv` is null) into `shape_of`'s
/// shape, or, when `shape_is_vector` is set, into the shape `shape_of` holds.
///
/// # Safety
/// Valid context and arrays (`iv` may be null).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_fail_index(
    ctx: *mut WlCtx,
    loc: *const WlLoc,
    iv: *const WlArray,
    scalar: i64,
    shape_of: *const WlArray,
    shape_is_vector: i32,
) {
    let idx = unsafe { index_components(iv, scalar) };
    let shp: Vec<i64> =
        if shape_is_vector != 0 { unsafe { int_elements(shape_of) } } else { unsafe { (*shape_of).shape().to_vec() } };
    let shape_usize: Vec<usize> = shp.iter().map(|&d| d.max(0) as usize).collect();
    let message = match compiler_core::interp::prims::check_index(&idx, &shape_usize) {
        Err(e) => e.message,
        Ok(_) => format!("index {} is out of bounds for shape {}", vec_text(&idx), vec_text(&shp)),
    };
    unsafe { set_error(ctx, loc, "R0001", &message) };
}

/// An error whose message template has `{a}` and `{b}` for two shapes: the
/// shapes of arrays `a` and `b`, or, when `vectors` is set, the int vectors
/// they are.
///
/// # Safety
/// Valid context and arrays; strings NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_fail_shapes(
    ctx: *mut WlCtx,
    loc: *const WlLoc,
    code: *const c_char,
    template: *const c_char,
    a: *const WlArray,
    b: *const WlArray,
    vectors: i32,
) {
    let shape = |x: *const WlArray| unsafe { if vectors != 0 { int_elements(x) } else { (*x).shape().to_vec() } };
    let (sa, sb) = (vec_text(&shape(a)), vec_text(&shape(b)));
    let message = unsafe { text(template) }.replace("{a}", &sa).replace("{b}", &sb);
    unsafe { set_error(ctx, loc, &text(code), &message) };
}

/// An error whose message template has `{a}` and `{b}` for two vectors of
/// `i64`s (generator corners and frames).
///
/// # Safety
/// `a`, `b` hold `na`, `nb` values; strings NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_fail_vectors(
    ctx: *mut WlCtx,
    loc: *const WlLoc,
    code: *const c_char,
    template: *const c_char,
    a: *const i64,
    na: i64,
    b: *const i64,
    nb: i64,
) {
    let (sa, sb) = unsafe { (vec_text(slice(a, na)), vec_text(slice(b, nb))) };
    let message = unsafe { text(template) }.replace("{a}", &sa).replace("{b}", &sb);
    unsafe { set_error(ctx, loc, &text(code), &message) };
}

/// An error whose message template has `{a}` for a number and `{b}` for a
/// second one.
///
/// # Safety
/// Valid context; strings NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_fail_ints(
    ctx: *mut WlCtx,
    loc: *const WlLoc,
    code: *const c_char,
    template: *const c_char,
    a: i64,
    b: i64,
) {
    let message = unsafe { text(template) }.replace("{a}", &a.to_string()).replace("{b}", &b.to_string());
    unsafe { set_error(ctx, loc, &text(code), &message) };
}

/// A value's type as messages name it: `int[3]`, or `int` for a scalar
/// (`array` null or of rank 0) of element type `elem`.
///
/// # Safety
/// `array` is null or a valid array.
unsafe fn type_text(elem: i32, array: *const WlArray) -> String {
    if array.is_null() || unsafe { (*array).rank } == 0 {
        return crate::array::base_of(elem).to_string();
    }
    let a = unsafe { &*array };
    format!("{}{}", a.base(), vec_text(a.shape()))
}

/// An error whose message template has `{a}` for a value's type (`int[3]`,
/// or `int` for a scalar).
///
/// # Safety
/// `array` null (a scalar of type `elem`) or a valid array.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_fail_type(
    ctx: *mut WlCtx,
    loc: *const WlLoc,
    code: *const c_char,
    template: *const c_char,
    elem: i32,
    array: *const WlArray,
) {
    let described = unsafe { type_text(elem, array) };
    let message = unsafe { text(template) }.replace("{a}", &described);
    unsafe { set_error(ctx, loc, &text(code), &message) };
}

/// An `Op::Fail` whose message template has `{args}` for the types of the
/// `n` values in `args` (`int, double[3]`; see `compiler_core::ir::fail_message`).
///
/// # Safety
/// `args` holds `n` values (or `n` is 0); strings are NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_fail_args(
    ctx: *mut WlCtx,
    loc: *const WlLoc,
    code: *const c_char,
    template: *const c_char,
    n: i64,
    args: *const crate::values::WlArg,
) {
    let args: &[crate::values::WlArg] =
        if n <= 0 || args.is_null() { &[] } else { unsafe { std::slice::from_raw_parts(args, n as usize) } };
    let described: Vec<String> = args
        .iter()
        .map(|a| match a.kind {
            crate::values::ARG_STRING => "string".to_string(),
            crate::values::ARG_ARRAY => unsafe { type_text(a.elem, a.ptr as *const WlArray) },
            _ => crate::array::base_of(a.elem).to_string(),
        })
        .collect();
    let full = unsafe { text(template) }.replace("{args}", &described.join(", "));
    unsafe { set_error(ctx, loc, &text(code), &full) };
}

/// A recursion deeper than the context allows (R0009).
///
/// # Safety
/// Valid context; `function` NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_fail_depth(ctx: *mut WlCtx, loc: *const WlLoc, function: *const c_char) {
    let max = unsafe { (*ctx).max_depth };
    let message = format!("more than {max} nested calls: `{}` keeps calling itself", unsafe { text(function) });
    unsafe { set_error(ctx, loc, "R0009", &message) };
}

/// Records that a call found the stack nearly used up ([`WlCtx::stack_floor`]).
///
/// # Safety
/// `ctx` is valid; `function` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_fail_stack(ctx: *mut WlCtx, loc: *const WlLoc, function: *const c_char) {
    let message = format!("nested calls used up the thread's stack: `{}` calls too deeply", unsafe { text(function) });
    unsafe { set_error(ctx, loc, "R0009", &message) };
}

/// # Safety
/// `p` holds `n` values (or `n` is 0).
pub(crate) unsafe fn slice<'a>(p: *const i64, n: i64) -> &'a [i64] {
    if n <= 0 || p.is_null() { &[] } else { unsafe { std::slice::from_raw_parts(p, n as usize) } }
}

/// Prints the recorded error (if any) to standard error as
/// `file:line:col: error[CODE]: message` (then `  = note` lines); returns 2
/// after an error, else 0.
///
/// # Safety
/// `ctx` is valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_report(ctx: *mut WlCtx) -> i32 {
    let c = unsafe { &*ctx };
    let Some((code, message)) = c.error() else { return 0 };
    let place = if c.loc.is_null() {
        String::new()
    } else {
        let l = unsafe { &*c.loc };
        format!("{}:{}:{}: ", unsafe { text(l.file) }, l.line, l.column)
    };
    // Lines after the first are notes (`wl_fail_args`).
    let mut lines = message.lines();
    eprintln!("{place}error[{code}]: {}", lines.next().unwrap_or_default());
    for note in lines {
        eprintln!("  = {note}");
    }
    2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_settings_may_have_spaces_around_them() {
        for (value, read) in [(" 2 ", Some(2)), ("3", Some(3)), ("-1", Some(-1)), ("two", None), ("", None)] {
            assert_eq!(int_setting(value), read, "{value:?}");
        }
    }

    #[test]
    fn cache_sizes_read_as_linux_writes_them() {
        assert_eq!(cache_size_bytes("32768K"), Some(32 << 20));
        assert_eq!(cache_size_bytes("307200K"), Some(300 << 20));
        assert_eq!(cache_size_bytes("1M"), Some(1 << 20));
        assert_eq!(cache_size_bytes("512"), Some(512));
        assert_eq!(cache_size_bytes("12 K"), None);
        assert_eq!(cache_size_bytes("K"), None);
    }

    #[test]
    fn loop_steps_stream_from_a_bound_between_the_fixed_ones() {
        assert!(WlCtx::default().stream_min >= 0);
        if std::env::var_os("WITHLOOP_STREAM_MIN").is_none() {
            let bound = WlCtx::default().stream_min;
            assert!((STREAM_MIN_FOOTPRINT..=STREAM_MIN_MAX).contains(&bound), "{bound}");
        }
    }
}

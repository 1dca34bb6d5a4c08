//! Running compiled code in-process: what `withloop run` does by default.
//!
//! The program is compiled for the host CPU, JIT-linked by LLVM's MCJIT
//! against this process's copy of the runtime, and called through a
//! trampoline that takes and returns values as the runtime's `WlArg`s. The
//! arguments and results are the interpreter's [`Value`]s, so the test harness
//! compares native and interpreted runs value for value.

// Calling JIT-compiled code and exchanging raw values with the runtime.
#![allow(unsafe_code)]

use std::ffi::c_void;

use compiler_core::diagnostics::{ALL_CODES, INTERNAL_ERROR, NO_MATCHING_INSTANCE};
use compiler_core::interp::value::Value;
use compiler_core::interp::{RuntimeError, describe_value};
use compiler_core::ir::{FuncId, Module};
use compiler_core::sema::hir::Elem;
use compiler_core::span::{FileId, SourceMap, Span};
use inkwell::context::Context;
use withloop_rt::{ARG_ARRAY, ARG_SCALAR, ARG_STRING, WlArg, WlCtx, WlLoc};

use crate::emit::scalar_repr;
use crate::rt::Rt;
use crate::{CodegenError, Options};

/// Why a native run did not return values.
#[derive(Debug)]
pub enum RunError {
    /// The module has no entry of that name.
    UnknownEntry(String),
    /// The program could not be compiled.
    Codegen(CodegenError),
    /// The program failed at run time.
    Runtime(RuntimeError),
}

impl From<CodegenError> for RunError {
    fn from(e: CodegenError) -> Self {
        RunError::Codegen(e)
    }
}

/// Where program output goes while compiled code runs.
struct Sink<'o> {
    out: &'o mut dyn FnMut(&[u8]),
}

unsafe extern "C" fn write_sink(user: *mut c_void, bytes: *const u8, len: usize) {
    // SAFETY: `user` is the `Sink` `run` passes, alive for the call.
    let sink = unsafe { &mut *(user as *mut Sink<'_>) };
    let data = if len == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(bytes, len) } };
    (sink.out)(data);
}

/// The entry function for arguments of these types: one per element-type
/// signature (as the IR interpreter picks).
pub fn choose_entry(module: &Module, entry: &str, args: &[Value]) -> Option<Result<FuncId, RuntimeError>> {
    let candidates: Vec<FuncId> = module.entries.iter().filter(|(n, _)| n == entry).map(|(_, f)| *f).collect();
    let first = *candidates.first()?;
    let chosen = candidates.iter().copied().find(|f| {
        let func = module.function(*f);
        func.params.len() == args.len()
            && func.params.iter().zip(args).all(|(p, a)| match (func.ty(*p).elem, a) {
                (Elem::String, Value::Str(_)) => true,
                (Elem::Base(b), v) => v.base() == Some(b),
                _ => false,
            })
    });
    Some(chosen.ok_or_else(|| {
        let types: Vec<String> = args.iter().map(describe_value).collect();
        RuntimeError {
            code: NO_MATCHING_INSTANCE,
            message: format!("no instance of `{entry}` accepts ({})", types.join(", ")),
            span: module.function(first).span,
            notes: Vec::new(),
            trace: Vec::new(),
        }
    }))
}

/// Compiles `module` and runs entry `entry` on `args` natively; program output
/// goes to `out`.
pub fn run(
    module: &Module,
    sources: &SourceMap,
    entry: &str,
    args: Vec<Value>,
    options: &Options,
    max_elements: Option<i64>,
    out: &mut dyn FnMut(&[u8]),
) -> Result<Vec<Value>, RunError> {
    run_counted(module, sources, entry, args, options, max_elements, out).map(|(values, _)| values)
}

/// What a native run did besides its results.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunCounts {
    /// Elements copied because an array was not updated in place (`wl_copy`).
    pub elements_copied: i64,
}

/// [`run`], also counting what the run did.
pub fn run_counted(
    module: &Module,
    sources: &SourceMap,
    entry: &str,
    args: Vec<Value>,
    options: &Options,
    max_elements: Option<i64>,
    out: &mut dyn FnMut(&[u8]),
) -> Result<(Vec<Value>, RunCounts), RunError> {
    let fid = match choose_entry(module, entry, &args) {
        None => return Err(RunError::UnknownEntry(entry.to_string())),
        Some(Err(e)) => return Err(RunError::Runtime(e)),
        Some(Ok(f)) => f,
    };
    let func = module.function(fid);
    // A compiled function trusts its parameter types; check them here.
    for (p, a) in func.params.iter().zip(&args) {
        let ty = func.ty(*p);
        // An array argument of an admitted shape is fine even where the
        // interpreter's value is a scalar of rank 0 (and vice versa).
        let fits_array =
            ty.elem != Elem::String && a.base().is_some() && !scalar_repr(ty) && ty.shape.contains(a.shape());
        if !ty.admits(a) && !fits_array {
            return Err(RunError::Runtime(RuntimeError {
                code: NO_MATCHING_INSTANCE,
                message: format!("`{entry}` takes {ty}, not {}", describe_value(a)),
                span: func.span,
                notes: Vec::new(),
                trace: Vec::new(),
            }));
        }
    }
    let spec = crate::target_spec(options);
    let ctx = Context::create();
    let mut e = crate::emitter(&ctx, module, sources, options, crate::emit::Facts::of(module));
    e.functions()?;
    e.trampoline(fid.0 as usize, "wl.entry")?;
    let (llmod, tm) = e.finish(&spec, options)?;
    // The program's calls resolve against this process: libmvec must be loaded to be used.
    let options = &Options { vector_math: options.vector_math && crate::vecmath::available(), ..options.clone() };
    crate::emit::optimise(&llmod, &tm, options)?;
    let engine = llmod
        .create_jit_execution_engine(options_level(options))
        .map_err(|e| CodegenError::Llvm(format!("JIT: {}", e.to_string_lossy())))?;
    for (name, addr) in Rt::symbols() {
        if let Some(f) = llmod.get_function(name) {
            engine.add_global_mapping(&f, addr);
        }
    }
    let addr = engine.get_function_address("wl.entry").map_err(|e| CodegenError::Llvm(format!("JIT: {e:?}")))?;
    type Trampoline = unsafe extern "C" fn(*mut WlCtx, *const WlArg, *mut WlArg);
    // SAFETY: the trampoline has this signature (emit::Emitter::trampoline).
    let trampoline: Trampoline = unsafe { std::mem::transmute::<usize, Trampoline>(addr) };

    let mut sink = Sink { out };
    let mut wctx = Box::new(WlCtx::default());
    wctx.write = Some(write_sink);
    wctx.write_user = &mut sink as *mut Sink<'_> as *mut c_void;
    if let Some(m) = max_elements {
        wctx.max_elements = m;
    }
    if let Some(t) = options.threads {
        wctx.threads = t.min(i32::MAX as u32) as i32;
    }
    if let Some(m) = options.parallel_min {
        wctx.parallel_min = m;
    }
    if let Some(m) = options.stream_min {
        wctx.stream_min = m;
    }
    // Calls stop short of this thread's stack end (a recursion error, not a crash).
    wctx.stack_floor = withloop_rt::stack_floor();
    let c: *mut WlCtx = &mut *wctx;
    let mut owned_args: Vec<*mut withloop_rt::WlArray> = Vec::new();
    let mut strings: Vec<Vec<u8>> = Vec::new();
    let mut wargs: Vec<WlArg> = Vec::with_capacity(args.len());
    for (p, a) in func.params.iter().zip(&args) {
        let ty = func.ty(*p);
        let arg = match a {
            Value::Str(s) => {
                strings.push(s.to_vec());
                let bytes = strings.last().map_or(std::ptr::null(), |b| b.as_ptr());
                WlArg { kind: ARG_STRING, elem: 0, bits: s.len() as u64, ptr: bytes as *mut c_void }
            }
            Value::Scalar(sc) if scalar_repr(ty) => WlArg::scalar(*sc),
            v => {
                // SAFETY: the context is valid.
                let arr = unsafe { withloop_rt::value_to_array(c, v) };
                if arr.is_null() {
                    break;
                }
                owned_args.push(arr);
                WlArg { kind: ARG_ARRAY, elem: 0, bits: 0, ptr: arr as *mut c_void }
            }
        };
        wargs.push(arg);
    }
    let mut results = vec![WlArg { kind: ARG_SCALAR, elem: 0, bits: 0, ptr: std::ptr::null_mut() }; func.results.len()];
    if wctx.error == 0 {
        // SAFETY: arguments match the entry's parameters (checked above).
        unsafe { trampoline(c, wargs.as_ptr(), results.as_mut_ptr()) };
    }
    for a in owned_args {
        // SAFETY: made by value_to_array; the callee only borrowed them.
        unsafe { withloop_rt::wl_dec(a) };
    }
    if let Some((code, message)) = wctx.error() {
        // SAFETY: locations are constants of the compiled module, alive until
        // `engine` is dropped below.
        let loc = unsafe { wctx.loc.as_ref() };
        return Err(RunError::Runtime(runtime_error(&code, message, loc, func.span)));
    }
    let mut values = Vec::with_capacity(results.len());
    for (r, ty) in results.iter().zip(&func.results) {
        // SAFETY: the trampoline wrote every result.
        values.push(unsafe { withloop_rt::arg_to_value(r) });
        if r.kind == ARG_ARRAY {
            unsafe { withloop_rt::wl_dec(r.ptr as *mut withloop_rt::WlArray) };
        }
        let _ = ty;
    }
    drop(engine);
    Ok((values, RunCounts { elements_copied: wctx.copied }))
}

fn options_level(options: &Options) -> inkwell::OptimizationLevel {
    match options.opt_level {
        0 => inkwell::OptimizationLevel::None,
        1 => inkwell::OptimizationLevel::Less,
        2 => inkwell::OptimizationLevel::Default,
        _ => inkwell::OptimizationLevel::Aggressive,
    }
}

/// A run-time error of compiled code as the interpreter reports them: the
/// message's first line, its other lines as notes (`ir::message_and_notes`).
pub fn runtime_error(code: &str, message: String, loc: Option<&WlLoc>, fallback: Span) -> RuntimeError {
    let code = ALL_CODES.iter().copied().find(|c| c.id == code).unwrap_or(INTERNAL_ERROR);
    let span = match loc {
        None => fallback,
        Some(l) => Span::new(FileId(l.file_id as u32), l.start as usize, l.end as usize),
    };
    let (message, notes) = compiler_core::ir::message_and_notes(&message);
    RuntimeError { code, message, span, notes, trace: Vec::new() }
}

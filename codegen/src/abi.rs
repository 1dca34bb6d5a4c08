//! The C ABI of compiled code, and the header that declares it.
//!
//! Every export ([`compiler_core::ir::exports`]: each entry's dispatch
//! wrapper and each specialised instance) becomes one C function:
//!
//! ```c
//! int32_t wl_scale(wl_ctx *ctx, const wl_array *m, double s, wl_array *result0);
//! ```
//!
//! - `ctx` comes from `wl_ctx_new()` and may be reused for any number of calls
//!   (one thread at a time); it carries the error of the last call and the
//!   thread count for parallel with-loops.
//! - Parameters in source order: scalars (rank-0 types) as C scalars, arrays as
//!   `const wl_array *` descriptors (data, rank, shape) that the function
//!   borrows. The descriptor's rank and shape are checked against the
//!   parameter's type (`R0004` when they do not fit, `R0013` when the
//!   descriptor is malformed); the element type is the C type in the header.
//!   L0's tuples are flattened to their components, an array of tuples to
//!   one array per component (`[{real, int}] ps` is `ps` and `ps_`, as the
//!   header names them), which must agree in the extents around the tuple
//!   (`R0002` otherwise).
//! - Results follow, as out-parameters: `T *` for scalars, `wl_array *` for
//!   arrays, which the caller owns and releases with `wl_array_release`.
//! - The return value is 0 on success and 1 after a run-time error (out of
//!   bounds, shape mismatch, allocation …): nothing is written to the results
//!   and `wl_error_code`, `wl_error_message` and `wl_error_location` describe
//!   the error with its place in the source. Compiled code never aborts its
//!   host. A null `ctx` returns -1.
//!
//! Functions with string parameters or results are not exported (the header
//! lists them in a comment).

use compiler_core::ir::exports::{Export, ExportKind, exports};
use compiler_core::ir::{Function, Module as IrModule};
use compiler_core::sema::hir::Elem;
use compiler_core::sema::ty::{Shape, Ty};
use compiler_core::syntax::ast::BaseType;
use inkwell::module::Linkage;
use inkwell::types::BasicMetadataTypeEnum;
use inkwell::values::{BasicMetadataValueEnum, BasicValueEnum, PointerValue};

use crate::CodegenError;
use crate::emit::{Emitter, base, elem_code, scalar_repr};

type R<T> = Result<T, CodegenError>;

/// The C type of an element.
pub fn c_type(b: BaseType) -> &'static str {
    match b {
        BaseType::Bool => "bool",
        BaseType::Char => "char",
        BaseType::Byte => "int8_t",
        BaseType::Short => "int16_t",
        BaseType::Int => "int32_t",
        BaseType::Long | BaseType::LongLong => "int64_t",
        BaseType::UByte => "uint8_t",
        BaseType::UShort => "uint16_t",
        BaseType::UInt => "uint32_t",
        BaseType::ULong | BaseType::ULongLong => "uint64_t",
        BaseType::Float => "float",
        BaseType::Double => "double",
    }
}

/// Why a function cannot be called through the C ABI, if it cannot.
pub fn not_exportable(f: &Function) -> Option<&'static str> {
    let strings =
        f.params.iter().any(|p| f.ty(*p).elem == Elem::String) || f.results.iter().any(|t| t.elem == Elem::String);
    strings.then_some("strings cross the C ABI only as program output")
}

/// The exports of `module` that have a C function.
pub fn c_exports(module: &IrModule) -> Vec<Export> {
    exports(module).into_iter().filter(|e| not_exportable(module.function(e.func)).is_none()).collect()
}

/// Names a parameter may not have in the header: the keywords of C (to C23)
/// and C++, the types and macros the header (or a C program including it)
/// names, and `ctx`, the first parameter. One of them gets `_` appended.
const C_RESERVED: &[&str] = &[
    // C89 to C23.
    "auto",
    "break",
    "case",
    "char",
    "const",
    "continue",
    "default",
    "do",
    "double",
    "else",
    "enum",
    "extern",
    "float",
    "for",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "register",
    "restrict",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "typedef",
    "union",
    "unsigned",
    "void",
    "volatile",
    "while",
    "bool",
    "true",
    "false",
    "alignas",
    "alignof",
    "constexpr",
    "nullptr",
    "static_assert",
    "thread_local",
    "typeof",
    "typeof_unqual",
    "asm",
    "fortran",
    // C++.
    "and",
    "and_eq",
    "bitand",
    "bitor",
    "catch",
    "char8_t",
    "char16_t",
    "char32_t",
    "class",
    "compl",
    "concept",
    "const_cast",
    "consteval",
    "constinit",
    "co_await",
    "co_return",
    "co_yield",
    "decltype",
    "delete",
    "dynamic_cast",
    "explicit",
    "export",
    "friend",
    "mutable",
    "namespace",
    "new",
    "noexcept",
    "not",
    "not_eq",
    "operator",
    "or",
    "or_eq",
    "private",
    "protected",
    "public",
    "reinterpret_cast",
    "requires",
    "static_cast",
    "template",
    "this",
    "throw",
    "try",
    "typeid",
    "typename",
    "using",
    "virtual",
    "wchar_t",
    "xor",
    "xor_eq",
    // Types and macros of <stdint.h>, <stdbool.h>, <stddef.h>, <errno.h>, <assert.h> and the header.
    "int8_t",
    "int16_t",
    "int32_t",
    "int64_t",
    "uint8_t",
    "uint16_t",
    "uint32_t",
    "uint64_t",
    "intptr_t",
    "uintptr_t",
    "intmax_t",
    "uintmax_t",
    "size_t",
    "ptrdiff_t",
    "NULL",
    "errno",
    "assert",
    "offsetof",
    "wl_array",
    "wl_ctx",
    "ctx",
];

/// The C-level signature of an export: parameter names and types. An entry's
/// wrapper takes `[*]` in the IR; at the C boundary each parameter has the
/// most general type its instances declare (so `double s` stays a scalar and
/// `double[.,.] m` a matrix), and names come from the instances.
struct Signature {
    names: Vec<String>,
    params: Vec<Ty>,
}

fn signature(module: &IrModule, e: &Export) -> Signature {
    let f = module.function(e.func);
    let mut params: Vec<Ty> = f.params.iter().map(|p| f.ty(*p).clone()).collect();
    let mut raw: Vec<Option<String>> =
        f.params.iter().map(|p| f.values[p.0 as usize].name.as_ref().map(|n| n.to_string())).collect();
    if e.kind == ExportKind::Entry {
        let members: Vec<&Function> = module
            .variants
            .iter()
            .map(|v| module.function(*v))
            .filter(|v| {
                v.source_name == f.source_name
                    && v.params.len() == f.params.len()
                    && v.params.iter().zip(&params).all(|(p, t)| v.ty(*p).elem == t.elem)
            })
            .collect();
        if let Some(first) = members.first() {
            for (i, t) in params.iter_mut().enumerate() {
                let mut shape = first.ty(first.params[i]).shape.clone();
                for m in &members[1..] {
                    shape = shape.join(&m.ty(m.params[i]).shape);
                }
                t.shape = shape;
                raw[i] = first.values[first.params[i].0 as usize].name.as_ref().map(|n| n.to_string());
            }
        }
    }
    Signature { names: c_names(&raw), params }
}

fn c_names(raw: &[Option<String>]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for (i, r) in raw.iter().enumerate() {
        let raw = r.clone().unwrap_or_default();
        let mut n: String = raw.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
        if n.is_empty() || n.starts_with(|c: char| c.is_ascii_digit()) {
            n = format!("arg{i}");
        }
        // Names C reserves for itself (`_Bool`, `__x`).
        if n.starts_with("__") || (n.starts_with('_') && n[1..].starts_with(|c: char| c.is_ascii_uppercase())) {
            n = format!("arg{n}");
        }
        if C_RESERVED.contains(&n.as_str()) || n.starts_with("result") {
            n.push('_');
        }
        while names.contains(&n) {
            n.push('_');
        }
        names.push(n);
    }
    names
}

/// The C declaration of an export (without the trailing `;`).
fn declaration(f: &Function, sig: &Signature, symbol: &str) -> String {
    let mut parts = vec!["wl_ctx *ctx".to_string()];
    for (ty, name) in sig.params.iter().zip(&sig.names) {
        if scalar_repr(ty) {
            parts.push(format!("{} {name}", c_type(base(ty))));
        } else {
            parts.push(format!("const wl_array *{name} /* {ty} */"));
        }
    }
    for (i, ty) in f.results.iter().enumerate() {
        if scalar_repr(ty) {
            parts.push(format!("{} *result{i}", c_type(base(ty))));
        } else {
            parts.push(format!("wl_array *result{i} /* {ty} */"));
        }
    }
    format!("int32_t {symbol}({})", parts.join(", "))
}

/// The runtime part of every header (guarded, so headers of several programs
/// can be included together).
const RUNTIME_API: &str = r#"#ifndef WITHLOOP_RUNTIME_API
#define WITHLOOP_RUNTIME_API
/* A call context: the last error and the thread count. One thread at a time. */
typedef struct wl_ctx wl_ctx;

/* An array: row-major elements, rank and extents. Arguments are borrowed;
   results are owned by the caller (`owner`) and released with wl_array_release. */
typedef struct wl_array {
  void *data;
  int64_t rank;
  int64_t *shape;
  void *owner;
} wl_array;

wl_ctx *wl_ctx_new(void);
void wl_ctx_free(wl_ctx *ctx);
/* Threads for parallel with-loops (0: $WITHLOOP_THREADS or every core). */
void wl_ctx_set_threads(wl_ctx *ctx, int32_t threads);
/* The smallest with-loop part, in iterations, split over threads (default $WITHLOOP_PARALLEL_MIN or 32768). */
void wl_ctx_set_parallel_min(wl_ctx *ctx, int64_t iterations);
/* Bytes written and read from which a with-loop step of a loop stores past the caches
   (default $WITHLOOP_STREAM_MIN, or a third of the last-level cache, at least 40 MiB,
   at most 100 MiB). */
void wl_ctx_set_stream_min(wl_ctx *ctx, int64_t bytes);
/* After a call returned non-zero: the error's code ("R0001"), message (lines after
   the first are notes, e.g. the candidates of a call no instance accepts) and place. */
const char *wl_error_code(const wl_ctx *ctx);
const char *wl_error_message(const wl_ctx *ctx);
const char *wl_error_location(const wl_ctx *ctx, int32_t *line, int32_t *column);
void wl_array_release(wl_array *array);
#endif
"#;

/// The C header for `module`'s exports; `source` names the program.
pub fn header(module: &IrModule, source: &str) -> String {
    let stem: String = std::path::Path::new(source)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' })
        .collect();
    let guard = format!("WITHLOOP_{stem}_H");
    let mut out = format!(
        "/* Generated by withloop {} from {source}; do not edit.\n   \
         Every function returns 0 on success, 1 after a run-time error (see wl_error_message),\n   \
         -1 for a null context. Link with the shared library or object withloop made. */\n\
         #ifndef {guard}\n#define {guard}\n\n#include <stdbool.h>\n#include <stdint.h>\n\n\
         #ifdef __cplusplus\nextern \"C\" {{\n#endif\n\n{RUNTIME_API}\n",
        env!("CARGO_PKG_VERSION")
    );
    for e in exports(module) {
        let f = module.function(e.func);
        let sig = signature(module, &e);
        let params: Vec<String> = sig.params.iter().map(|t| t.to_string()).collect();
        let results: Vec<String> = f.results.iter().map(|t| t.to_string()).collect();
        let what = match e.kind {
            ExportKind::Entry => "any arguments the source types admit; dispatches to the best instance",
            ExportKind::Variant => "this instance's argument types only",
        };
        out.push_str(&format!("/* {}({}) -> ({}): {what} */\n", f.source_name, params.join(", "), results.join(", ")));
        match not_exportable(f) {
            Some(why) => out.push_str(&format!("/* not exported: {why} */\n\n")),
            None => out.push_str(&format!("{};\n\n", declaration(f, &sig, &e.symbol))),
        }
    }
    out.push_str("#ifdef __cplusplus\n}\n#endif\n\n#endif\n");
    out
}

/// What a parameter's type requires of a descriptor: the rank (`-(n+1)` for
/// "at least n") and the extents (`-1` where any).
fn requirement(ty: &Ty) -> (i64, Option<Vec<i64>>) {
    match &ty.shape {
        Shape::AtLeast(n) => (-(*n as i64) - 1, None),
        Shape::Fixed(d) => {
            let extents: Vec<i64> = d.iter().map(|e| e.map_or(-1, |x| x as i64)).collect();
            let fixed = extents.iter().any(|e| *e >= 0);
            (d.len() as i64, fixed.then_some(extents))
        }
    }
}

impl<'ctx, 'a> Emitter<'ctx, 'a> {
    /// Emits the C function of every export.
    pub fn exports(&mut self) -> R<()> {
        for e in c_exports(self.ir) {
            // In a partitioned compile, an export goes with its function.
            if !self.owns(e.func.0 as usize) {
                continue;
            }
            let sig = signature(self.ir, &e);
            self.export(e.func.0 as usize, &e.symbol, &sig)?;
        }
        Ok(())
    }

    /// `int32_t symbol(ctx, params…, results…)` around IR function `k`.
    fn export(&mut self, k: usize, symbol: &str, sig: &Signature) -> R<()> {
        let irf: &'a Function = &self.ir.functions[k];
        let p = self.ptr();
        let i32t = self.i32();
        let mut params: Vec<BasicMetadataTypeEnum<'ctx>> = vec![p.into()];
        for ty in &sig.params {
            params.push(if scalar_repr(ty) { self.c_scalar_ty(base(ty)).into() } else { p.into() });
        }
        params.extend(irf.results.iter().map(|_| BasicMetadataTypeEnum::from(p)));
        let fn_ty = i32t.fn_type(&params, false);
        let fx = self.wrapper_fx(symbol, fn_ty, Linkage::External, Some(i32t.const_int(1, false).into()), irf)?;
        let func = fx.func;
        // Glue run once per call from C: wrapping descriptors, one call, unwrapping
        // results. Optimising it cost LLVM time and gained nothing measurable
        // (optimising the C functions of a kernel's variants was 1-10% of
        // LLVM's instructions for its compile, `bench/ab/compile_cost.py`:
        // det 1%, dot 10%). An instance whose
        // body is an endless loop without effects is inferred `noreturn` and
        // `memory(none)`, and the code generator drops an unoptimised caller's
        // call of such a function (the C function returned at once instead of
        // looping): `emit::keep_unoptimised_calls` takes those facts back
        // once LLVM's pipeline has used them.
        self.unoptimised(func, false);
        let nth = |i: usize| func.get_nth_param(i as u32).ok_or_else(|| CodegenError::Bug("export parameter".into()));

        // A null context cannot carry an error: return -1 at once.
        let ctx_null = self.b.build_is_null(fx.ctxp, "no_ctx")?;
        let go = self.ctx.append_basic_block(func, "go");
        let refuse = self.ctx.append_basic_block(func, "refuse");
        self.b.build_conditional_branch(ctx_null, refuse, go)?;
        self.b.position_at_end(refuse);
        self.b.build_return(Some(&i32t.const_all_ones()))?;
        self.b.position_at_end(go);

        self.call(self.rt.ctx_clear, &[fx.ctxp.into()])?;
        let site = self.loc(Some(irf.span));
        let site_p = self.ctx_field(&fx, crate::rt::CTX_SITE)?;
        self.b.build_store(site_p, site)?;
        // Nowhere to put a result: an error before anything runs.
        for j in 0..irf.results.len() {
            let out = nth(1 + irf.params.len() + j)?.into_pointer_value();
            let missing = self.b.build_is_null(out, "no_out")?;
            self.fail_if(&fx, missing, site, "R0013", &format!("result{j}: the result pointer is null"))?;
        }

        // Argument arrays are views of the caller's buffers, released on every
        // way out (the failure block unwraps whatever was wrapped).
        let names = &sig.names;
        // (slot, release): argument views and boxed scalars, released on every way out.
        let mut views: Vec<(PointerValue<'ctx>, inkwell::values::FunctionValue<'ctx>)> = Vec::new();
        let mut call_args: Vec<BasicMetadataValueEnum<'ctx>> = vec![fx.ctxp.into()];
        let mut outs = Vec::new();
        for r in &irf.results {
            let slot = self.alloca(&fx, self.value_ty(r), "res")?;
            outs.push(slot);
            call_args.push(slot.into());
        }
        let mut inputs: Vec<BasicMetadataValueEnum<'ctx>> = Vec::new();
        for (i, prm) in irf.params.iter().enumerate() {
            let ty = sig.params[i].clone();
            let arg = nth(1 + i)?;
            if scalar_repr(&ty) {
                let x = self.c_scalar_in(arg, base(&ty))?;
                if scalar_repr(irf.ty(*prm)) {
                    inputs.push(x.into());
                } else {
                    // A wrapper's `[*]` parameter: a rank-0 array.
                    let bits = self.bits_of(x, base(&ty))?;
                    let elem = i32t.const_int(elem_code(base(&ty)), false);
                    let a = self
                        .call(self.rt.boxed, &[fx.ctxp.into(), elem.into(), bits.into()])?
                        .ok_or_else(|| CodegenError::Bug("box".into()))?;
                    let slot = self.null_slot(&fx)?;
                    self.b.build_store(slot, a)?;
                    views.push((slot, self.rt.dec));
                    self.check_error(&fx)?;
                    inputs.push(a.into());
                }
                continue;
            }
            let view = self.null_slot(&fx)?;
            views.push((view, self.rt.unwrap));
            let (rank, extents) = requirement(&ty);
            let want_shape = match extents {
                Some(ex) => self.i64_global(&ex),
                None => p.const_null(),
            };
            let pname = self.cstring(&names[i]);
            let elem = i32t.const_int(elem_code(base(&ty)), false);
            let a = self
                .call(
                    self.rt.abi_array_in,
                    &[
                        fx.ctxp.into(),
                        site.into(),
                        elem.into(),
                        arg.into(),
                        self.const_i64(rank).into(),
                        want_shape.into(),
                        pname.into(),
                    ],
                )?
                .ok_or_else(|| CodegenError::Bug("abi_array_in".into()))?;
            self.b.build_store(view, a)?;
            self.check_error(&fx)?;
            inputs.push(a.into());
        }
        call_args.extend(inputs);
        self.b.build_call(self.funcs[k], &call_args, "")?;
        self.check_error(&fx)?;
        for (j, (slot, ty)) in outs.iter().zip(&irf.results).enumerate() {
            let x = self.b.build_load(self.value_ty(ty), *slot, "r")?;
            let out = nth(1 + irf.params.len() + j)?.into_pointer_value();
            if scalar_repr(ty) {
                let c = self.c_scalar_out(x, base(ty))?;
                self.b.build_store(out, c)?;
            } else {
                self.call(self.rt.abi_array_out, &[fx.ctxp.into(), x.into(), out.into()])?;
                self.check_error(&fx)?;
            }
        }
        self.release_slots(&views)?;
        self.b.build_return(Some(&i32t.const_zero()))?;
        // The failure exit: release the views, then return 1.
        if let Some(ret) = fx.fail_bb.get_terminator() {
            self.b.position_before(&ret);
            self.release_slots(&views)?;
        }
        Ok(())
    }

    /// `int main(void)` for an executable: runs the program's `main` with a
    /// fresh context; a run-time error is reported on standard error (with
    /// its source location) and the exit status is 2; otherwise the status is
    /// `main`'s result.
    pub fn executable_main(&mut self) -> R<()> {
        let Some(k) = self.ir.entry("main").map(|f| f.0 as usize) else {
            return Err(CodegenError::Unsupported("an executable without a `main` function".into()));
        };
        let irf: &'a Function = &self.ir.functions[k];
        let int_result = irf.params.is_empty()
            && irf.results.len() == 1
            && scalar_repr(&irf.results[0])
            && irf.results[0].elem == Elem::Base(BaseType::Int);
        if !int_result {
            return Err(CodegenError::Unsupported(format!(
                "an executable whose `main` is not `int main()` (it is {}({}) -> ({}))",
                irf.source_name,
                irf.params.iter().map(|p| irf.ty(*p).to_string()).collect::<Vec<_>>().join(", "),
                irf.results.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ")
            )));
        }
        let i32t = self.i32();
        let fn_ty = i32t.fn_type(&[], false);
        let func = self.module.add_function("main", fn_ty, Some(Linkage::External));
        let bb = self.ctx.append_basic_block(func, "entry");
        self.b.position_at_end(bb);
        let ctxp = self.call(self.rt.ctx_new, &[])?.ok_or_else(|| CodegenError::Bug("ctx_new".into()))?;
        let site = self.loc(Some(irf.span));
        let site_p = self.gep(
            self.ctx.i8_type(),
            ctxp.into_pointer_value(),
            &[self.const_i64(crate::rt::CTX_SITE as i64)],
            "site",
        )?;
        self.b.build_store(site_p, site)?;
        let slot = self.b.build_alloca(i32t, "status")?;
        self.b.build_call(self.funcs[k], &[ctxp.into(), slot.into()], "")?;
        let failed = self.call(self.rt.report, &[ctxp.into()])?.ok_or_else(|| CodegenError::Bug("report".into()))?;
        let status = self.b.build_load(i32t, slot, "status")?.into_int_value();
        let is_failed = self.b.build_int_compare(
            inkwell::IntPredicate::NE,
            failed.into_int_value(),
            i32t.const_zero(),
            "failed",
        )?;
        let code = self.b.build_select(is_failed, failed.into_int_value(), status, "code")?;
        self.call(self.rt.ctx_free, &[ctxp.into()])?;
        self.b.build_return(Some(&code))?;
        Ok(())
    }

    /// Calls each slot's release function on what the slot holds (null-safe).
    fn release_slots(&mut self, slots: &[(PointerValue<'ctx>, inkwell::values::FunctionValue<'ctx>)]) -> R<()> {
        for (slot, release) in slots {
            let a = self.b.build_load(self.ptr(), *slot, "held")?;
            self.call(*release, &[a.into()])?;
        }
        Ok(())
    }

    /// A pointer slot that holds null from the function's start (its store
    /// sits in the entry block, before any exit).
    fn null_slot(&mut self, fx: &crate::emit::Fx<'ctx, 'a>) -> R<PointerValue<'ctx>> {
        let slot = self.alloca(fx, self.ptr().into(), "slot")?;
        let here = self.b.get_insert_block();
        match fx.entry_bb.get_terminator() {
            Some(t) => self.b.position_before(&t),
            None => self.b.position_at_end(fx.entry_bb),
        }
        self.b.build_store(slot, self.ptr().const_null())?;
        if let Some(h) = here {
            self.b.position_at_end(h);
        }
        Ok(slot)
    }

    /// The LLVM type a C caller passes for a scalar (`bool` as a byte).
    fn c_scalar_ty(&self, b: BaseType) -> inkwell::types::BasicTypeEnum<'ctx> {
        match b {
            BaseType::Bool => self.ctx.i8_type().into(),
            other => self.scalar_ty(other),
        }
    }

    fn c_scalar_in(&mut self, v: BasicValueEnum<'ctx>, b: BaseType) -> R<BasicValueEnum<'ctx>> {
        Ok(match b {
            BaseType::Bool => self
                .b
                .build_int_compare(
                    inkwell::IntPredicate::NE,
                    v.into_int_value(),
                    self.ctx.i8_type().const_zero(),
                    "bool",
                )?
                .into(),
            _ => v,
        })
    }

    fn c_scalar_out(&mut self, v: BasicValueEnum<'ctx>, b: BaseType) -> R<BasicValueEnum<'ctx>> {
        Ok(match b {
            BaseType::Bool => self.b.build_int_z_extend(v.into_int_value(), self.ctx.i8_type(), "byte")?.into(),
            _ => v,
        })
    }
}

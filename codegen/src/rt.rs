//! The runtime (`withloop-rt`) as compiled code sees it: the layouts of its
//! structures and the declarations of its functions, and, for the JIT, where
//! each function lives in this process.

use inkwell::AddressSpace;
use inkwell::context::Context;
use inkwell::module::{Linkage, Module};
use inkwell::types::{BasicMetadataTypeEnum, BasicType, BasicTypeEnum, StructType};
use inkwell::values::FunctionValue;

/// Byte offsets into `WlCtx` that compiled code uses.
pub const CTX_DEPTH: u64 = 4;
pub const CTX_SITE: u64 = 8;
pub const CTX_MAX_DEPTH: u64 = 24;
pub const CTX_PARALLEL_MIN: u64 = 32;
pub const CTX_STACK_FLOOR: u64 = std::mem::offset_of!(withloop_rt::WlCtx, stack_floor) as u64;
pub const CTX_STREAM_MIN: u64 = std::mem::offset_of!(withloop_rt::WlCtx, stream_min) as u64;
/// Byte offsets into `WlArray`.
pub const ARR_RC: u64 = 0;
pub const ARR_RANK: u64 = 8;
pub const ARR_SIZE: u64 = 16;
pub const ARR_DATA: u64 = 24;
pub const ARR_SHAPE: u64 = 40;
/// `WlArg` kinds.
pub const ARG_SCALAR: u64 = 0;
pub const ARG_ARRAY: u64 = 1;
pub const ARG_STRING: u64 = 2;

/// Parameter and result kinds of runtime functions, for the table below.
#[derive(Clone, Copy)]
enum K {
    P,
    I32,
    I64,
    F32,
    F64,
}

macro_rules! runtime {
    ($( $field:ident = $name:literal ( $($p:ident),* ) $(-> $r:ident)? ; )*) => {
        /// Runtime functions and types in one LLVM module.
        #[derive(Debug, Clone, Copy)]
        pub struct Rt<'ctx> {
            /// `WlArg`: `{ i32 kind, i32 elem, i64 bits, ptr }`.
            pub arg: StructType<'ctx>,
            /// `WlLoc`: `{ ptr file, i32 line, i32 column, i32 file_id, i32 start, i32 end }`.
            pub loc: StructType<'ctx>,
            $( pub $field: FunctionValue<'ctx>, )*
        }

        impl<'ctx> Rt<'ctx> {
            pub fn declare(ctx: &'ctx Context, m: &Module<'ctx>) -> Rt<'ctx> {
                let ptr = ctx.ptr_type(AddressSpace::default());
                let ty = |k: K| -> BasicTypeEnum<'ctx> {
                    match k {
                        K::P => ptr.into(),
                        K::I32 => ctx.i32_type().into(),
                        K::I64 => ctx.i64_type().into(),
                        K::F32 => ctx.f32_type().into(),
                        K::F64 => ctx.f64_type().into(),
                    }
                };
                let decl = |name: &str, ret: Option<K>, params: &[K]| {
                    if let Some(f) = m.get_function(name) {
                        return f;
                    }
                    let params: Vec<BasicMetadataTypeEnum<'ctx>> = params.iter().map(|k| ty(*k).into()).collect();
                    let fty = match ret {
                        Some(r) => ty(r).fn_type(&params, false),
                        None => ctx.void_type().fn_type(&params, false),
                    };
                    m.add_function(name, fty, Some(Linkage::External))
                };
                let i32t = ctx.i32_type();
                Rt {
                    arg: ctx.struct_type(&[i32t.into(), i32t.into(), ctx.i64_type().into(), ptr.into()], false),
                    loc: ctx.struct_type(
                        &[ptr.into(), i32t.into(), i32t.into(), i32t.into(), i32t.into(), i32t.into()],
                        false,
                    ),
                    $( $field: decl($name, runtime!(@ret $($r)?), &[$(K::$p),*]), )*
                }
            }

            /// Every runtime function with its address in this process (for the JIT).
            pub fn symbols() -> Vec<(&'static str, usize)> {
                vec![ $( ($name, runtime!(@addr $field)), )* ]
            }
        }
    };
    (@ret) => { None };
    (@ret $r:ident) => { Some(K::$r) };
    (@addr calloc) => { libc_calloc as *const () as usize };
    (@addr free) => { libc_free as *const () as usize };
    (@addr $field:ident) => { paste_addr!($field) };
}

// The JIT resolves runtime symbols to this process's copies (the crate is
// linked in); C library symbols resolve through the process itself.
#[allow(unsafe_code)]
unsafe extern "C" {
    #[link_name = "calloc"]
    fn libc_calloc(n: usize, size: usize) -> *mut u8;
    #[link_name = "free"]
    fn libc_free(p: *mut u8);
}

macro_rules! paste_addr {
    (alloc) => {
        withloop_rt::wl_alloc as *const () as usize
    };
    (inc) => {
        withloop_rt::wl_inc as *const () as usize
    };
    (dec) => {
        withloop_rt::wl_dec as *const () as usize
    };
    (copy) => {
        withloop_rt::wl_copy as *const () as usize
    };
    (copy_outside) => {
        withloop_rt::wl_copy_outside as *const () as usize
    };
    (unique) => {
        withloop_rt::wl_unique as *const () as usize
    };
    (fail) => {
        withloop_rt::wl_fail as *const () as usize
    };
    (fail_index) => {
        withloop_rt::wl_fail_index as *const () as usize
    };
    (fail_shapes) => {
        withloop_rt::wl_fail_shapes as *const () as usize
    };
    (fail_vectors) => {
        withloop_rt::wl_fail_vectors as *const () as usize
    };
    (fail_ints) => {
        withloop_rt::wl_fail_ints as *const () as usize
    };
    (fail_depth) => {
        withloop_rt::wl_fail_depth as *const () as usize
    };
    (fail_stack) => {
        withloop_rt::wl_fail_stack as *const () as usize
    };
    (fail_args) => {
        withloop_rt::wl_fail_args as *const () as usize
    };
    (fail_type) => {
        withloop_rt::wl_fail_type as *const () as usize
    };
    (prim) => {
        withloop_rt::wl_prim as *const () as usize
    };
    (stack) => {
        withloop_rt::wl_stack as *const () as usize
    };
    (boxed) => {
        withloop_rt::wl_box as *const () as usize
    };
    (pattern) => {
        withloop_rt::wl_pattern as *const () as usize
    };
    (parallel_chunks) => {
        withloop_rt::wl_parallel_chunks as *const () as usize
    };
    (parallel_for) => {
        withloop_rt::wl_parallel_for as *const () as usize
    };
    (time_tiled) => {
        withloop_rt::wl_time_tiled as *const () as usize
    };
    (gemm_f64) => {
        withloop_rt::wl_gemm_f64 as *const () as usize
    };
    (ctx_new) => {
        withloop_rt::wl_ctx_new as *const () as usize
    };
    (ctx_free) => {
        withloop_rt::wl_ctx_free as *const () as usize
    };
    (report) => {
        withloop_rt::wl_report as *const () as usize
    };
    (shapes_differ) => {
        withloop_rt::wl_shapes_differ as *const () as usize
    };
    (alloc_frame) => {
        withloop_rt::wl_alloc_frame as *const () as usize
    };
    (fill_uncovered) => {
        withloop_rt::wl_fill_uncovered as *const () as usize
    };
    (fill) => {
        withloop_rt::wl_fill as *const () as usize
    };
    (reusable) => {
        withloop_rt::wl_reusable as *const () as usize
    };
    (write_cell) => {
        withloop_rt::wl_write_cell as *const () as usize
    };
    (identical) => {
        withloop_rt::wl_identical as *const () as usize
    };
    (shape_vector) => {
        withloop_rt::wl_shape_vector as *const () as usize
    };
    (math_f64) => {
        withloop_rt::wl_math_f64 as *const () as usize
    };
    (abi_array_in) => {
        withloop_rt::wl_abi_array_in as *const () as usize
    };
    (abi_array_out) => {
        withloop_rt::wl_abi_array_out as *const () as usize
    };
    (unwrap) => {
        withloop_rt::wl_unwrap as *const () as usize
    };
    (ctx_clear) => {
        withloop_rt::wl_ctx_clear as *const () as usize
    };
    (math_f32) => {
        withloop_rt::wl_math_f32 as *const () as usize
    };
    (stack_frame) => {
        withloop_rt::wl_stack_frame as *const () as usize
    };
    (take_cells) => {
        withloop_rt::wl_take_cells as *const () as usize
    };
    (reshape) => {
        withloop_rt::wl_reshape as *const () as usize
    };
    (check_reshape) => {
        withloop_rt::wl_check_reshape as *const () as usize
    };
}

runtime! {
    alloc = "wl_alloc"(P, I32, I64, P) -> P;
    inc = "wl_inc"(P);
    dec = "wl_dec"(P);
    copy = "wl_copy"(P, P) -> P;
    copy_outside = "wl_copy_outside"(P, P, P, P) -> P;
    unique = "wl_unique"(P, P) -> P;
    fail = "wl_fail"(P, P, P, P);
    fail_index = "wl_fail_index"(P, P, P, I64, P, I32);
    fail_shapes = "wl_fail_shapes"(P, P, P, P, P, P, I32);
    fail_vectors = "wl_fail_vectors"(P, P, P, P, P, I64, P, I64);
    fail_ints = "wl_fail_ints"(P, P, P, P, I64, I64);
    fail_depth = "wl_fail_depth"(P, P, P);
    fail_stack = "wl_fail_stack"(P, P, P);
    fail_type = "wl_fail_type"(P, P, P, P, I32, P);
    fail_args = "wl_fail_args"(P, P, P, P, I64, P);
    prim = "wl_prim"(P, P, P, I64, P, P, I32) -> I32;
    stack = "wl_stack"(P, P, I64, P, P) -> I32;
    boxed = "wl_box"(P, I32, I64) -> P;
    pattern = "wl_pattern"(P, P, P, P, P, P, P, I64, I64, P, P) -> I32;
    parallel_chunks = "wl_parallel_chunks"(P, I64, I64) -> I64;
    parallel_for = "wl_parallel_for"(P, I64, I64, P, P);
    time_tiled = "wl_time_tiled"(P, P, P, P, I64, P, P, P, P, P, I64, I64, I64) -> I64;
    gemm_f64 = "wl_gemm_f64"(P, I64, I64, I64, P, I64, P, I64, P, I32);
    ctx_new = "wl_ctx_new"() -> P;
    ctx_free = "wl_ctx_free"(P);
    report = "wl_report"(P) -> I32;
    shapes_differ = "wl_shapes_differ"(P, P) -> I32;
    alloc_frame = "wl_alloc_frame"(P, I32, I64, P, I64, P, I32) -> P;
    fill = "wl_fill"(P, P, P, I64);
    fill_uncovered = "wl_fill_uncovered"(P, P, P, I64, I64, P, P);
    reusable = "wl_reusable"(P, I32, I64, P, I64, P) -> I32;
    write_cell = "wl_write_cell"(P, P, P, I64, P, I64, I32) -> I32;
    identical = "wl_identical"(P, P) -> I32;
    shape_vector = "wl_shape_vector"(P, P) -> P;
    math_f64 = "wl_math_f64"(I32, F64) -> F64;
    math_f32 = "wl_math_f32"(I32, F32) -> F32;
    abi_array_in = "wl_abi_array_in"(P, P, I32, P, I64, P, P) -> P;
    abi_array_out = "wl_abi_array_out"(P, P, P) -> I32;
    unwrap = "wl_unwrap"(P);
    ctx_clear = "wl_ctx_clear"(P);
    stack_frame = "wl_stack_frame"(P, P, I32, I64, P, I64, P, I64, P) -> P;
    take_cells = "wl_take_cells"(P, P, I64) -> P;
    reshape = "wl_reshape"(P, P, P, P) -> P;
    check_reshape = "wl_check_reshape"(P, P, P, P);
    calloc = "calloc"(I64, I64) -> P;
    free = "free"(P);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_match_the_runtime_structures() {
        use std::mem::offset_of;
        use withloop_rt::{WlArray, WlCtx};
        assert_eq!(offset_of!(WlCtx, depth) as u64, CTX_DEPTH);
        assert_eq!(offset_of!(WlCtx, site) as u64, CTX_SITE);
        assert_eq!(offset_of!(WlCtx, max_depth) as u64, CTX_MAX_DEPTH);
        assert_eq!(offset_of!(WlCtx, parallel_min) as u64, CTX_PARALLEL_MIN);
        assert_eq!(offset_of!(WlArray, rc) as u64, ARR_RC);
        assert_eq!(offset_of!(WlArray, rank) as u64, ARR_RANK);
        assert_eq!(offset_of!(WlArray, size) as u64, ARR_SIZE);
        assert_eq!(offset_of!(WlArray, data) as u64, ARR_DATA);
    }
}

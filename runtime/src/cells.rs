//! Helpers for the slower paths of compiled with-loops and element-wise
//! operations: cells of shapes known only at run time, defaults, fixpoints,
//! and shape vectors.

use compiler_core::interp::shape_text;

use crate::array::{WlArray, wl_alloc};
use crate::error::{WlCtx, WlLoc, set_error, slice};
use crate::values::{array_to_value, element, scalar_from_bits, set_element};

fn shape_usize(s: &[i64]) -> Vec<usize> {
    s.iter().map(|&d| d.max(0) as usize).collect()
}

/// 1 when both arrays have rank > 0 and their shapes differ (element-wise
/// operations extend rank-0 operands).
///
/// # Safety
/// Valid arrays.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_shapes_differ(a: *const WlArray, b: *const WlArray) -> i32 {
    let (a, b) = unsafe { (&*a, &*b) };
    (a.rank > 0 && b.rank > 0 && a.shape() != b.shape()) as i32
}

/// A new array of shape `frame ++ cell`, filled with zeros when `zero` is set.
///
/// # Safety
/// `frame` holds `frame_len` extents and `cell` `cell_rank`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_alloc_frame(
    ctx: *mut WlCtx,
    elem: i32,
    frame_len: i64,
    frame: *const i64,
    cell_rank: i64,
    cell: *const i64,
    zero: i32,
) -> *mut WlArray {
    let mut shape = unsafe { slice(frame, frame_len) }.to_vec();
    shape.extend_from_slice(unsafe { slice(cell, cell_rank) });
    let a = unsafe { wl_alloc(ctx, elem, shape.len() as i64, shape.as_ptr()) };
    if !a.is_null() && zero != 0 {
        let bytes = unsafe { (*a).size as usize * (*a).esize as usize };
        unsafe { std::ptr::write_bytes((*a).data, 0, bytes) };
    }
    a
}

/// Whether a with-loop may take over `a`'s buffer for a result of element
/// type `elem` and shape `frame ++ cell`: no one else holds it, and type and
/// shape agree.
///
/// # Safety
/// Valid array; `frame` holds `frame_len` extents and `cell` `cell_rank`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_reusable(
    a: *const WlArray,
    elem: i32,
    frame_len: i64,
    frame: *const i64,
    cell_rank: i64,
    cell: *const i64,
) -> i32 {
    let arr = unsafe { &*a };
    if arr.rc.load(std::sync::atomic::Ordering::Acquire) != 1 || arr.elem != elem {
        return 0;
    }
    let mut shape = unsafe { slice(frame, frame_len) }.to_vec();
    shape.extend_from_slice(unsafe { slice(cell, cell_rank) });
    (arr.shape() == shape.as_slice()) as i32
}

/// Fills every cell of `result` with the array `cell`, or (`cell` null) every
/// element with the scalar `bits`.
///
/// # Safety
/// `result` is a writable array whose cells have `cell`'s size.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_fill(result: *mut WlArray, cell: *const WlArray, bits: u64) {
    let r = unsafe { &*result };
    let n = r.size as usize;
    if cell.is_null() {
        let s = scalar_from_bits(r.elem, bits);
        for i in 0..n {
            unsafe { set_element(result, i, s) };
        }
        return;
    }
    let c = unsafe { &*cell };
    let bytes = c.bytes();
    if bytes.is_empty() {
        return;
    }
    let total = n * r.esize as usize;
    let mut at = 0;
    while at + bytes.len() <= total {
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), r.data.add(at), bytes.len()) };
        at += bytes.len();
    }
}

/// Writes `cell` as cell number `offset` of `result` (whose first `frame_len`
/// axes are the frame), after checking its shape; returns 1 after recording
/// an error: R0007 for a with-loop (`update` 0), R0002 for an element update
/// (`update` 1), with the interpreter's messages.
///
/// # Safety
/// Valid context and arrays; `result` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_write_cell(
    ctx: *mut WlCtx,
    loc: *const WlLoc,
    result: *mut WlArray,
    offset: i64,
    cell: *const WlArray,
    frame_len: i64,
    update: i32,
) -> i32 {
    let (r, c) = unsafe { (&*result, &*cell) };
    let fl = (frame_len.max(0) as usize).min(r.shape().len());
    let want = &r.shape()[fl..];
    if c.shape() != want && update != 0 {
        let message = format!(
            "cannot put a value of shape {} where the array has cells of shape {}",
            shape_text(&shape_usize(c.shape())),
            shape_text(&shape_usize(want))
        );
        unsafe { set_error(ctx, loc, "R0002", &message) };
        return 1;
    }
    if c.shape() != want {
        let message = format!(
            "with-loop elements differ in shape: {} here, {} elsewhere",
            shape_text(&shape_usize(c.shape())),
            shape_text(&shape_usize(want))
        );
        unsafe { set_error(ctx, loc, "R0007", &message) };
        return 1;
    }
    let bytes = c.bytes();
    let at = offset.max(0) as usize * bytes.len();
    if at + bytes.len() <= r.size as usize * r.esize as usize {
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), r.data.add(at), bytes.len()) };
    }
    0
}

/// Whether two arrays are identical: same shape, same type, same elements bit
/// for bit (a fold's fixpoint test).
///
/// # Safety
/// Valid arrays.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_identical(a: *const WlArray, b: *const WlArray) -> i32 {
    let (a, b) = unsafe { (&*a, &*b) };
    (a.shape() == b.shape() && a.elem == b.elem && a.bytes() == b.bytes()) as i32
}

/// `shape(a)` as a new int vector.
///
/// # Safety
/// Valid context and array.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_shape_vector(ctx: *mut WlCtx, a: *const WlArray) -> *mut WlArray {
    let shape = unsafe { (*a).shape().to_vec() };
    let n = shape.len() as i64;
    let out = unsafe { wl_alloc(ctx, crate::array::code_of(compiler_core::syntax::ast::BaseType::Int), 1, &n) };
    if !out.is_null() {
        for (i, d) in shape.iter().enumerate() {
            unsafe { set_element(out, i, compiler_core::interp::value::Scalar::int(*d)) };
        }
    }
    out
}

/// Inverse hyperbolic functions as the interpreter computes them (Rust's,
/// which differ from C's in the last bits): 0 `asinh`, 1 `acosh`, 2 `atanh`.
#[unsafe(no_mangle)]
pub extern "C" fn wl_math_f64(which: i32, x: f64) -> f64 {
    match which {
        0 => x.asinh(),
        1 => x.acosh(),
        _ => x.atanh(),
    }
}

/// [`wl_math_f64`] in single precision.
#[unsafe(no_mangle)]
pub extern "C" fn wl_math_f32(which: i32, x: f32) -> f32 {
    match which {
        0 => x.asinh(),
        1 => x.acosh(),
        _ => x.atanh(),
    }
}

/// The array as the interpreter's value text (for debugging compiled code).
///
/// # Safety
/// Valid array.
pub unsafe fn describe(a: *const WlArray) -> String {
    compiler_core::interp::format::value_literal(&array_to_value(unsafe { &*a }))
}

/// Element `i` as bits (for tests).
///
/// # Safety
/// Valid array with more than `i` elements.
pub unsafe fn element_bits(a: *const WlArray, i: usize) -> u64 {
    crate::values::scalar_bits(element(unsafe { &*a }, i)).1
}

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
    let (frame, cell) = unsafe { (slice(frame, frame_len), slice(cell, cell_rank)) };
    // The shape on the stack: recursive code (a determinant's minors) allocates
    // many small arrays, and a heap vector per allocation was a third of it.
    let rank = frame.len() + cell.len();
    let mut small = [0i64; 16];
    let mut large = Vec::new();
    let shape: &mut [i64] = if rank <= small.len() {
        &mut small[..rank]
    } else {
        large.resize(rank, 0);
        &mut large
    };
    crate::array::write_extents(&mut shape[..frame.len()], frame);
    crate::array::write_extents(&mut shape[frame.len()..], cell);
    let a = unsafe { wl_alloc(ctx, elem, rank as i64, shape.as_ptr()) };
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
        if n == 0 {
            return;
        }
        // One element written, then copied in doubling runs.
        let s = scalar_from_bits(r.elem, bits);
        unsafe { set_element(result, 0, s) };
        let total = n * r.esize as usize;
        let mut done = r.esize as usize;
        while done < total {
            let run = done.min(total - done);
            // SAFETY: both ranges lie inside the data; they do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(r.data, r.data.add(done), run) };
            done += run;
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

/// [`wl_fill`] unless the boxes `lowers[k] <= iv < uppers[k]` (int vectors,
/// `parts` of each) tile `result`'s first `len(lowers[0])` axes: a
/// `genarray`'s default is only needed where no part writes (a `cat` of
/// arrays of run-time shapes is two parts that cover the frame).
///
/// # Safety
/// As [`wl_fill`]; `lowers` and `uppers` hold `parts` valid int vectors.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_fill_uncovered(
    result: *mut WlArray,
    cell: *const WlArray,
    bits: u64,
    parts: i64,
    lowers: *const *const WlArray,
    uppers: *const *const WlArray,
) {
    let r = unsafe { &*result };
    let parts = parts.max(0) as usize;
    let boxes: Vec<(Vec<i64>, Vec<i64>)> = (0..parts)
        .map(|k| unsafe { (crate::error::int_elements(*lowers.add(k)), crate::error::int_elements(*uppers.add(k))) })
        .collect();
    let n = boxes.first().map_or(0, |(l, _)| l.len());
    if parts > 0 && n <= r.shape().len() && compiler_core::opt::util::boxes_cover(&boxes, &r.shape()[..n]) {
        return;
    }
    unsafe { wl_fill(result, cell, bits) };
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

/// The message of R0012 (as the interpreter words it).
const UNKNOWN_RESULT_SHAPE: &str = "the shape of this with-loop's result is unknown: no element was computed, and the shape of the elements is only known when they are";

/// `n` cells stacked over a frame, as the interpreter builds a scan's or a
/// generic filter's result: an array of shape `frame ++ cell` whose cell `k`
/// (row-major) is `cells[k]`. `cell_rank < 0` means the cells' shape is the
/// first cell's; with no cells that shape is unknown (R0012). Cells whose
/// shape or type is not the expected one take the interpreter's own path
/// (`stack`, then `reshape` to the result's shape), so odd programs get its
/// results and errors. Consumes the cells' references, also on error; returns
/// null after recording an error.
///
/// # Safety
/// Valid context; `cells` holds `n` valid arrays, `frame` `frame_len` extents
/// and `cell` `cell_rank` (when not negative).
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn wl_stack_frame(
    ctx: *mut WlCtx,
    loc: *const WlLoc,
    elem: i32,
    n: i64,
    cells: *const *mut WlArray,
    frame_len: i64,
    frame: *const i64,
    cell_rank: i64,
    cell: *const i64,
) -> *mut WlArray {
    let cells: &[*mut WlArray] =
        if n <= 0 || cells.is_null() { &[] } else { unsafe { std::slice::from_raw_parts(cells, n as usize) } };
    let out = unsafe { stack_frame(ctx, loc, elem, cells, slice(frame, frame_len), cell_rank, cell) };
    for c in cells {
        unsafe { crate::array::wl_dec(*c) };
    }
    out
}

unsafe fn stack_frame(
    ctx: *mut WlCtx,
    loc: *const WlLoc,
    elem: i32,
    cells: &[*mut WlArray],
    frame: &[i64],
    cell_rank: i64,
    cell: *const i64,
) -> *mut WlArray {
    let cell_shape: Vec<i64> = match cells.first() {
        _ if cell_rank >= 0 => unsafe { slice(cell, cell_rank) }.to_vec(),
        Some(first) => unsafe { (**first).shape() }.to_vec(),
        None => {
            unsafe { set_error(ctx, loc, "R0012", UNKNOWN_RESULT_SHAPE) };
            return std::ptr::null_mut();
        }
    };
    let mut shape = frame.to_vec();
    shape.extend_from_slice(&cell_shape);
    let regular = cells.iter().all(|c| unsafe { (**c).shape() == cell_shape.as_slice() && (**c).elem == elem });
    let cell_count: i64 = frame.iter().product();
    if regular && cell_count == cells.len() as i64 {
        let out = unsafe { wl_alloc(ctx, elem, shape.len() as i64, shape.as_ptr()) };
        if out.is_null() {
            return out;
        }
        let mut at = 0;
        for c in cells {
            let bytes = unsafe { (**c).bytes() };
            // SAFETY: `out` holds `cells.len()` cells of this many bytes.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), (*out).data.add(at), bytes.len()) };
            at += bytes.len();
        }
        return out;
    }
    let values: Vec<_> = cells.iter().map(|c| array_to_value(unsafe { &**c })).collect();
    let stacked =
        compiler_core::interp::prims::stack(values).and_then(|s| compiler_core::interp::prims::reshape(&shape, &s));
    match stacked {
        Ok(v) => unsafe { crate::values::value_to_array(ctx, &v) },
        Err(e) => {
            unsafe { set_error(ctx, loc, e.code.id, &e.message) };
            std::ptr::null_mut()
        }
    }
}

/// The first `n` cells (along axis 0) of `a`, whose first extent is at least
/// `n`: `a` itself when `n` is its first extent, else a copy (a filter's
/// result is allocated for every index of its frame and cut to the values it
/// kept; an array's block cannot shrink in place, its size determines how it
/// is freed). Consumes `a`'s reference; null after recording an error.
///
/// # Safety
/// Valid context; `a` a valid array of rank ≥ 1 whose reference the caller owns.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_take_cells(ctx: *mut WlCtx, a: *mut WlArray, n: i64) -> *mut WlArray {
    let arr = unsafe { &*a };
    let Some(&m) = arr.shape().first() else { return a };
    if n == m {
        return a;
    }
    let mut shape = arr.shape().to_vec();
    shape[0] = n.clamp(0, m);
    let out = unsafe { wl_alloc(ctx, arr.elem, arr.rank, shape.as_ptr()) };
    if !out.is_null() {
        let bytes = unsafe { (*out).size as usize * (*out).esize as usize };
        // SAFETY: both hold at least `bytes` bytes (`out` is a prefix of `a`).
        unsafe { std::ptr::copy_nonoverlapping(arr.data, (*out).data, bytes) };
    }
    unsafe { crate::array::wl_dec(a) };
    out
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
    // SAFETY: a valid array; `out` is a fresh one, never `a`.
    let shape = unsafe { (*a).shape() };
    let n = shape.len() as i64;
    let out = unsafe { wl_alloc(ctx, crate::array::code_of(compiler_core::syntax::ast::BaseType::Int), 1, &n) };
    if !out.is_null() {
        // `int` elements: the low 32 bits, as `set_element` stores them.
        let data = unsafe { (*out).data } as *mut i32;
        for (i, d) in shape.iter().enumerate() {
            unsafe { data.add(i).write(*d as i32) };
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

/// `reshape(shp, a)`: `a` itself (one more reference) when it already has
/// that shape, which shape-generic code meets often (`reshape(shape(a), b)`
/// to align two arguments), else a new array with `a`'s elements; null after
/// recording the interpreter's error when the sizes differ.
///
/// # Safety
/// Valid context, location, int vector `shp` and array `a`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_reshape(
    ctx: *mut WlCtx,
    loc: *const WlLoc,
    shp: *const WlArray,
    a: *mut WlArray,
) -> *mut WlArray {
    let (shp, arr) = unsafe { (&*shp, &*a) };
    let extents: Vec<i64> = (0..shp.size as usize).map(|i| element(shp, i).as_i64().unwrap_or(0)).collect();
    if extents.as_slice() == arr.shape() {
        unsafe { crate::array::wl_inc(a) };
        return a;
    }
    let size = extents.iter().try_fold(1i64, |n, &d| if d < 0 { None } else { n.checked_mul(d) });
    if size != Some(arr.size) {
        // The interpreter's message (the cold path).
        let e = compiler_core::interp::prims::reshape(&extents, &array_to_value(arr)).err().map_or_else(
            || ("R0005".to_string(), "reshape failed".to_string()),
            |e| (e.code.id.to_string(), e.message),
        );
        unsafe { set_error(ctx, loc, &e.0, &e.1) };
        return std::ptr::null_mut();
    }
    let out = unsafe { wl_alloc(ctx, arr.elem, extents.len() as i64, extents.as_ptr()) };
    if !out.is_null() {
        let bytes = arr.bytes();
        // SAFETY: `out` holds as many elements of the same type.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), (*out).data, bytes.len()) };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::array::wl_dec;

    #[test]
    fn frames_get_frame_then_cell_extents_short_and_long() {
        let double = crate::array::code_of(compiler_core::syntax::ast::BaseType::Double);
        for (frame, cell) in [(vec![2i64, 3], vec![4i64]), (vec![1; 10], vec![2; 9])] {
            // SAFETY: the slices hold the extents passed; the array is released.
            unsafe {
                let a = wl_alloc_frame(
                    std::ptr::null_mut(),
                    double,
                    frame.len() as i64,
                    frame.as_ptr(),
                    cell.len() as i64,
                    cell.as_ptr(),
                    1,
                );
                assert!(!a.is_null());
                let want: Vec<i64> = frame.iter().chain(&cell).copied().collect();
                assert_eq!((*a).shape(), &want[..]);
                assert_eq!((*a).size, want.iter().product::<i64>());
                let bytes = std::slice::from_raw_parts((*a).data, (*a).size as usize * 8);
                assert!(bytes.iter().all(|&b| b == 0), "zeroed");
                wl_dec(a);
            }
        }
    }
}

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

/// A new array of shape `frame ++ cell`, filled with zeros when `zero` is set
/// (over the context's threads, [`crate::bulk`]).
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
        // SAFETY: a fresh array of `bytes` bytes; over the context's threads.
        unsafe { crate::bulk::write_all(ctx, (*a).data, bytes, (*a).size, crate::bulk::Source::Fill(&[0])) };
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

/// The bytes a default puts in each element (a scalar's) or each cell (an
/// array's, `cell`); `None` when there are none to put.
///
/// # Safety
/// `result` is a writable array; `cell` valid or null.
unsafe fn default_pattern(result: *mut WlArray, cell: *const WlArray, bits: u64) -> Option<Vec<u8>> {
    let r = unsafe { &*result };
    if r.size == 0 {
        return None;
    }
    if cell.is_null() {
        // The scalar as the array holds it: written as element 0, read back.
        unsafe { set_element(result, 0, scalar_from_bits(r.elem, bits)) };
        return Some(r.bytes()[..r.esize as usize].to_vec());
    }
    let bytes = unsafe { (*cell).bytes() };
    (!bytes.is_empty()).then(|| bytes.to_vec())
}

/// Fills every cell of `result` with the array `cell`, or (`cell` null) every
/// element with the scalar `bits`, over the context's threads
/// ([`crate::bulk`]). A cell whose size does not divide the array's leaves
/// the last partial cell unwritten.
///
/// # Safety
/// `result` is a writable array whose cells have `cell`'s size; `ctx` valid
/// or null.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_fill(ctx: *mut WlCtx, result: *mut WlArray, cell: *const WlArray, bits: u64) {
    if let Some(pattern) = unsafe { default_pattern(result, cell, bits) } {
        unsafe { fill_whole(ctx, &*result, &pattern) };
    }
}

/// Every whole copy of `pattern` that fits in `r`'s data, over the context's threads.
///
/// # Safety
/// `r` is a writable array; `ctx` valid or null.
unsafe fn fill_whole(ctx: *mut WlCtx, r: &WlArray, pattern: &[u8]) {
    let total = r.size as usize * r.esize as usize;
    let len = total - total % pattern.len();
    // SAFETY: `len` bytes of whole patterns inside the data.
    unsafe { crate::bulk::write_all(ctx, r.data, len, r.size, crate::bulk::Source::Fill(pattern)) };
}

/// [`wl_fill`] where no part writes: nothing when the boxes `lowers[k] <= iv
/// < uppers[k]` (int vectors, `parts` of each) tile `result`'s first
/// `len(lowers[0])` axes (a `cat` of arrays of run-time shapes is two parts
/// that cover the frame), only outside the box when there is one part (a
/// stencil's `genarray` with a default border: the border, not the whole
/// array, rows over the threads), else everywhere.
///
/// # Safety
/// As [`wl_fill`]; `lowers` and `uppers` hold `parts` valid int vectors.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_fill_uncovered(
    ctx: *mut WlCtx,
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
    let shape = r.shape();
    let n = boxes.first().map_or(0, |(l, _)| l.len());
    if parts > 0 && n <= shape.len() && compiler_core::opt::util::boxes_cover(&boxes, &shape[..n]) {
        return;
    }
    let Some(pattern) = (unsafe { default_pattern(result, cell, bits) }) else { return };
    if let [(lo, hi)] = boxes.as_slice() {
        let fill = crate::bulk::Source::Fill(&pattern);
        let job = crate::bulk::Outside::clamped(r.data, shape, lo, hi, r.esize as usize, fill);
        // A cell default whose size is not the box's cells' is written whole.
        if let Some(job) = job.filter(|j| j.cell_bytes() % pattern.len() == 0) {
            // SAFETY: the data holds the shape; the box is clamped into it.
            unsafe { crate::bulk::write_outside(ctx, &job, r.size) };
            return;
        }
    }
    unsafe { fill_whole(ctx, r, &pattern) };
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

/// `check reshape(shp, from)`: records the interpreter's error unless an array
/// of shape `from` can be reshaped to `shp` (what a `reshape` whose result was
/// dropped would have checked). Both are int vectors.
///
/// # Safety
/// Valid context, location and int vectors.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_check_reshape(
    ctx: *mut WlCtx,
    loc: *const WlLoc,
    shp: *const WlArray,
    from: *const WlArray,
) {
    let (shp, from) = unsafe { (crate::error::int_elements(shp), crate::error::int_elements(from)) };
    let from: Vec<usize> = from.iter().map(|&d| d.max(0) as usize).collect();
    if let Some(e) = compiler_core::interp::prims::reshape_error(&shp, &from) {
        unsafe { set_error(ctx, loc, e.code.id, &e.message) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::array::tests::{index_of, ints};
    use crate::array::{code_of, wl_dec};
    use compiler_core::interp::value::Scalar;
    use compiler_core::syntax::ast::BaseType;

    /// A fresh array of `shape` whose every element is `x`.
    fn filled(ctx: *mut WlCtx, elem: BaseType, shape: &[i64], x: Scalar) -> *mut WlArray {
        let a = unsafe { wl_alloc(ctx, code_of(elem), shape.len() as i64, shape.as_ptr()) };
        for i in 0..shape.iter().product::<i64>() as usize {
            unsafe { set_element(a, i, x) };
        }
        a
    }

    /// Whether index `iv` lies in the box `lo <= iv < hi` over its leading axes.
    fn in_box(iv: &[i64], lo: &[i64], hi: &[i64]) -> bool {
        lo.iter().zip(hi).zip(iv).all(|((l, h), i)| l <= i && i < h)
    }

    /// A `genarray` default with one part goes everywhere outside the part's
    /// box and nowhere inside it, on one thread and on three (rows split,
    /// chunk edges inside and outside the box), for a scalar default of two
    /// element sizes, a box over the leading axes only, and a cell default;
    /// with two parts it goes everywhere unless they tile the frame.
    #[test]
    fn fill_uncovered_writes_outside_the_parts_only() {
        for (threads, parallel_min) in [(1, i64::MAX), (3, 1)] {
            let mut ctx = WlCtx { threads, parallel_min, ..WlCtx::default() };
            let ctx: *mut WlCtx = &mut ctx;
            let d = |x: f64| Scalar::Double(x);
            let int = |x: i64| Scalar::Int(BaseType::Int, x);
            // (element type, shape, the parts' boxes, a cell default's elements (none: a scalar default), sentinel)
            type Case = (BaseType, Vec<i64>, Vec<(Vec<i64>, Vec<i64>)>, Option<Vec<f64>>, Scalar);
            let cases: Vec<Case> = vec![
                (BaseType::Double, vec![5, 6, 7], vec![(vec![1, 1, 1], vec![4, 5, 6])], None, d(-1.0)),
                (BaseType::Int, vec![9, 4, 3], vec![(vec![2, 1], vec![7, 3])], None, int(-1)),
                (
                    BaseType::Double,
                    vec![6, 3, 2],
                    vec![(vec![1], vec![5])],
                    Some(vec![1.5, 2.5, 3.5, 4.5, 5.5, 6.5]),
                    d(-1.0),
                ),
                (BaseType::Double, vec![4, 5], vec![(vec![0, 0], vec![2, 5]), (vec![2, 0], vec![4, 4])], None, d(-1.0)),
                (BaseType::Double, vec![4, 5], vec![(vec![0, 0], vec![2, 5]), (vec![2, 0], vec![4, 5])], None, d(-1.0)),
            ];
            for (elem, shape, boxes, cell_default, sentinel) in cases {
                let r = filled(ctx, elem, &shape, sentinel);
                let (cell, bits, default_at): (*mut WlArray, u64, Box<dyn Fn(usize) -> Scalar>) = match &cell_default {
                    Some(xs) => {
                        let c = filled(ctx, elem, &shape[1..], d(0.0));
                        for (k, x) in xs.iter().enumerate() {
                            unsafe { set_element(c, k, d(*x)) };
                        }
                        let xs = xs.clone();
                        (c, 0, Box::new(move |k| d(xs[k % xs.len()])))
                    }
                    None if elem == BaseType::Double => {
                        (std::ptr::null_mut(), 7.25f64.to_bits(), Box::new(move |_| d(7.25)))
                    }
                    None => (std::ptr::null_mut(), 7, Box::new(move |_| int(7))),
                };
                let lowers: Vec<*const WlArray> = boxes.iter().map(|(l, _)| ints(ctx, l) as *const _).collect();
                let uppers: Vec<*const WlArray> = boxes.iter().map(|(_, h)| ints(ctx, h) as *const _).collect();
                unsafe {
                    wl_fill_uncovered(ctx, r, cell, bits, boxes.len() as i64, lowers.as_ptr(), uppers.as_ptr());
                }
                let tiled = boxes.len() == 2 && boxes[1].1 == [4, 5];
                for i in 0..shape.iter().product::<i64>() {
                    let iv = index_of(i, &shape);
                    let written = !tiled && (boxes.len() > 1 || !in_box(&iv, &boxes[0].0, &boxes[0].1));
                    let want = if written { default_at(i as usize) } else { sentinel };
                    let got = unsafe { element(&*r, i as usize) };
                    assert_eq!(got, want, "{threads} thread(s), shape {shape:?}, boxes {boxes:?}, at {iv:?}");
                }
                unsafe {
                    wl_dec(r);
                    if !cell.is_null() {
                        wl_dec(cell);
                    }
                    for a in lowers.iter().chain(&uppers) {
                        wl_dec(*a as *mut WlArray);
                    }
                }
            }
        }
    }

    /// A fill and a copy of an array of many blocks, split over three
    /// threads, write every element (the last block a partial one).
    #[test]
    fn fill_and_copy_of_many_blocks_write_everything() {
        let mut ctx = WlCtx { threads: 3, parallel_min: 1, ..WlCtx::default() };
        let ctx: *mut WlCtx = &mut ctx;
        let shape = [100_003i64];
        let r = filled(ctx, BaseType::Double, &shape, Scalar::Double(-1.0));
        unsafe { wl_fill(ctx, r, std::ptr::null(), 0.5f64.to_bits()) };
        for i in 0..shape[0] as usize {
            assert_eq!(unsafe { element(&*r, i) }, Scalar::Double(0.5), "fill, element {i}");
            unsafe { set_element(r, i, Scalar::Double(i as f64)) };
        }
        let copy = unsafe { crate::array::wl_copy(ctx, r) };
        for i in 0..shape[0] as usize {
            assert_eq!(unsafe { element(&*copy, i) }, Scalar::Double(i as f64), "copy, element {i}");
        }
        unsafe {
            wl_dec(r);
            wl_dec(copy);
        }
    }

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

//! Arrays: layout, allocation, reference counting.

use std::alloc::{Layout, alloc, dealloc};
use std::sync::atomic::{AtomicI64, Ordering};

use compiler_core::syntax::ast::BaseType;

use crate::error::{WlCtx, set_error};

/// An array. The shape follows the header (`rank` entries); for arrays the
/// runtime allocates, the data follows the shape, 64-byte aligned, in the same
/// allocation.
#[repr(C)]
#[derive(Debug)]
pub struct WlArray {
    /// References; negative: not owned by the runtime (never freed or written).
    pub rc: AtomicI64,
    pub rank: i64,
    /// Number of elements.
    pub size: i64,
    pub data: *mut u8,
    /// Element type: the index of the base type in [`BaseType::ALL`].
    pub elem: i32,
    /// Bytes per element.
    pub esize: i32,
    shape: [i64; 0],
}

/// The size of the header before the shape.
pub const HEADER_BYTES: usize = 40;
pub(crate) const DATA_ALIGN: usize = 64;

/// The element type with this code.
pub fn base_of(code: i32) -> BaseType {
    BaseType::ALL.get(code as usize).copied().unwrap_or(BaseType::Int)
}

/// The code of an element type (its position in [`BaseType::ALL`]).
pub fn code_of(b: BaseType) -> i32 {
    BaseType::ALL.iter().position(|x| *x == b).unwrap_or(4) as i32
}

/// Bytes per element of a base type.
pub fn elem_bytes(b: BaseType) -> usize {
    match b {
        BaseType::Bool | BaseType::Char | BaseType::Byte | BaseType::UByte => 1,
        BaseType::Short | BaseType::UShort => 2,
        BaseType::Int | BaseType::UInt | BaseType::Float => 4,
        _ => 8,
    }
}

impl WlArray {
    pub fn shape(&self) -> &[i64] {
        // SAFETY: every WlArray is created with `rank` shape entries after the header.
        unsafe { std::slice::from_raw_parts(self.shape.as_ptr(), self.rank as usize) }
    }

    pub fn shape_mut(&mut self) -> &mut [i64] {
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts_mut(self.shape.as_mut_ptr(), self.rank as usize) }
    }

    pub fn base(&self) -> BaseType {
        base_of(self.elem)
    }

    pub fn bytes(&self) -> &[u8] {
        if self.size == 0 || self.data.is_null() {
            return &[];
        }
        // SAFETY: data holds size * esize bytes.
        unsafe { std::slice::from_raw_parts(self.data, self.size as usize * self.esize as usize) }
    }

    /// Whether the runtime owns it (and may free or reuse it).
    pub fn owned(&self) -> bool {
        self.rc.load(Ordering::Relaxed) >= 0
    }
}

fn layout(rank: usize, bytes: usize) -> Option<(Layout, usize)> {
    // At least one shape slot, so that reading extent 0 of a scalar is harmless.
    let header = HEADER_BYTES + 8 * rank.max(1);
    let data_at = header.div_ceil(DATA_ALIGN) * DATA_ALIGN;
    let total = data_at.checked_add(bytes)?;
    Some((Layout::from_size_align(total.max(1), DATA_ALIGN).ok()?, data_at))
}

/// A new array with count 1 and uninitialised elements, or null (and an error
/// in `ctx`) when it would be too large.
///
/// # Safety
/// `shape` points to `rank` extents; `ctx` is a valid context or null.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_alloc(ctx: *mut WlCtx, elem: i32, rank: i64, shape: *const i64) -> *mut WlArray {
    let base = base_of(elem);
    let esize = elem_bytes(base);
    let rank_u = rank.max(0) as usize;
    // SAFETY: the caller passes `rank` extents.
    let extents: &[i64] = if rank_u == 0 { &[] } else { unsafe { std::slice::from_raw_parts(shape, rank_u) } };
    let mut size: i64 = 1;
    for &e in extents {
        if e < 0 {
            unsafe { set_error(ctx, std::ptr::null(), "R0010", &format!("an array extent is negative ({e})")) };
            return std::ptr::null_mut();
        }
        size = match size.checked_mul(e) {
            Some(s) => s,
            None => {
                unsafe { set_error(ctx, std::ptr::null(), "R0010", "array size overflows") };
                return std::ptr::null_mut();
            }
        };
    }
    let limit =
        if ctx.is_null() { compiler_core::interp::value::MAX_ELEMENTS as i64 } else { unsafe { (*ctx).max_elements } };
    if size > limit {
        unsafe { set_error(ctx, std::ptr::null(), "R0010", &format!("cannot allocate an array of {size} elements")) };
        return std::ptr::null_mut();
    }
    let Some((lay, data_at)) = (size as usize).checked_mul(esize).and_then(|b| layout(rank_u, b)) else {
        unsafe { set_error(ctx, std::ptr::null(), "R0010", "array size overflows") };
        return std::ptr::null_mut();
    };
    // SAFETY: the layout is non-zero sized.
    let p = crate::blocks::take(lay).unwrap_or_else(|| crate::blocks::fresh(lay));
    if p.is_null() {
        unsafe { set_error(ctx, std::ptr::null(), "R0010", &format!("out of memory for an array of {size} elements")) };
        return std::ptr::null_mut();
    }
    let a = p as *mut WlArray;
    // SAFETY: p is a fresh allocation large enough for the header, shape and data.
    unsafe {
        a.write(WlArray {
            rc: AtomicI64::new(1),
            rank,
            size,
            data: p.add(data_at),
            elem,
            esize: esize as i32,
            shape: [],
        });
        write_extents((*a).shape_mut(), extents);
    }
    a
}

/// `dst.copy_from_slice(src)` (equal lengths) as single stores: a copy of a
/// length known only at run time becomes a `memcpy` call, which for the usual
/// one to three extents cost more than the rest of the allocation (Kreye's
/// determinant allocates a minor per call: a tenth of its time went to
/// `memcpy`). Volatile stores keep the compiler from turning the loop back
/// into the call.
pub(crate) fn write_extents(dst: &mut [i64], src: &[i64]) {
    for (d, s) in dst.iter_mut().zip(src) {
        // SAFETY: `d` is a valid, aligned, exclusive reference.
        unsafe { std::ptr::write_volatile(d, *s) };
    }
}

/// One more reference.
///
/// # Safety
/// `a` is a valid array or null.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_inc(a: *mut WlArray) {
    if a.is_null() {
        return;
    }
    // SAFETY: valid array.
    let rc = unsafe { &(*a).rc };
    if rc.load(Ordering::Relaxed) >= 0 {
        rc.fetch_add(1, Ordering::Relaxed);
    }
}

/// One reference fewer; frees the array with the last one.
///
/// # Safety
/// `a` is a valid array or null, and the caller owns one reference.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_dec(a: *mut WlArray) {
    if a.is_null() {
        return;
    }
    // SAFETY: valid array.
    let arr = unsafe { &*a };
    let rc = arr.rc.load(Ordering::Acquire);
    if rc < 0 {
        return;
    }
    // The last reference, ours: no other thread holds one to change the count
    // meanwhile, so the array is freed without an atomic read-modify-write
    // (most arrays die with one reference, and a locked decrement per array
    // was a fifth of the time of code that makes many small ones: the
    // generic determinant's minors).
    if rc == 1 || arr.rc.fetch_sub(1, Ordering::AcqRel) == 1 {
        let bytes = arr.size as usize * arr.esize as usize;
        if let Some((lay, _)) = layout(arr.rank as usize, bytes) {
            // SAFETY: allocated by wl_alloc with this layout; kept or freed.
            unsafe { crate::blocks::give(a as *mut u8, lay) };
        }
    }
}

/// A copy with count 1.
///
/// # Safety
/// `a` is a valid array; `ctx` a valid context.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_copy(ctx: *mut WlCtx, a: *const WlArray) -> *mut WlArray {
    // SAFETY: valid array.
    let src = unsafe { &*a };
    let out = unsafe { wl_alloc(ctx, src.elem, src.rank, src.shape().as_ptr()) };
    if !out.is_null() {
        let bytes = src.bytes();
        // SAFETY: out holds as many bytes; ctx is valid (or null).
        unsafe {
            let source = crate::bulk::Source::Copy(bytes.as_ptr());
            crate::bulk::write_all(ctx, (*out).data, bytes.len(), src.size, source);
            if let Some(c) = ctx.as_mut() {
                c.copied += src.size;
            }
        }
    }
    out
}

/// A new array of `a`'s shape holding `a`'s elements everywhere except in the
/// box `lower <= iv < upper` over its leading `len(lower)` axes, which is left
/// uninitialised: a `modarray` with-loop whose one dense part writes that box
/// copies only the rest (for a stencil, the border instead of the whole
/// array). Bounds are clamped to the shape (the with-loop reports bad ones).
/// The rows are copied over the context's threads ([`crate::bulk`]).
///
/// # Safety
/// `a` is a valid array; `lower` and `upper` valid int vectors of equal
/// length at most `a`'s rank; `ctx` a valid context (or null: one thread).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_copy_outside(
    ctx: *mut WlCtx,
    a: *const WlArray,
    lower: *const WlArray,
    upper: *const WlArray,
) -> *mut WlArray {
    // SAFETY: valid arrays.
    let src = unsafe { &*a };
    let (lo, hi) = unsafe { (crate::error::int_elements(lower), crate::error::int_elements(upper)) };
    let shape = src.shape();
    if lo.len() != hi.len() || lo.len() > shape.len() {
        return unsafe { wl_copy(ctx, a) };
    }
    let out = unsafe { wl_alloc(ctx, src.elem, src.rank, shape.as_ptr()) };
    if out.is_null() || src.size == 0 {
        return out;
    }
    // SAFETY: `out` is a fresh array of the same shape and element size.
    let source = crate::bulk::Source::Copy(src.data);
    let Some(job) = crate::bulk::Outside::clamped(unsafe { (*out).data }, shape, &lo, &hi, src.esize as usize, source)
    else {
        // No bounds: the box is the one cell, the whole array.
        return out;
    };
    // SAFETY: both buffers hold the shape; the box is clamped into it.
    unsafe { crate::bulk::write_outside(ctx, &job, src.size) };
    out
}

/// An array the caller may write into: `a` itself when this is its only
/// reference, else a copy (and `a`'s reference is given up). Consumes `a`.
///
/// # Safety
/// `a` is a valid array whose reference the caller owns.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_unique(ctx: *mut WlCtx, a: *mut WlArray) -> *mut WlArray {
    // SAFETY: valid array.
    if unsafe { (*a).rc.load(Ordering::Acquire) } == 1 {
        return a;
    }
    let out = unsafe { wl_copy(ctx, a) };
    unsafe { wl_dec(a) };
    out
}

/// A header (not owned: count -1) for data a C caller owns; free it with
/// [`wl_unwrap`] once the call returns.
///
/// # Safety
/// `shape` holds `rank` extents; `data` holds their product of elements.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_wrap(
    ctx: *mut WlCtx,
    elem: i32,
    data: *mut u8,
    rank: i64,
    shape: *const i64,
) -> *mut WlArray {
    let rank_u = rank.max(0) as usize;
    // SAFETY: the caller passes `rank` extents.
    let extents: &[i64] = if rank_u == 0 { &[] } else { unsafe { std::slice::from_raw_parts(shape, rank_u) } };
    if extents.iter().any(|&e| e < 0) {
        unsafe { set_error(ctx, std::ptr::null(), "R0004", "an argument has a negative extent") };
        return std::ptr::null_mut();
    }
    let size = extents.iter().product::<i64>();
    let Some((lay, _)) = layout(rank_u, 0) else { return std::ptr::null_mut() };
    // SAFETY: non-zero layout.
    let p = unsafe { alloc(lay) } as *mut WlArray;
    if p.is_null() {
        return p;
    }
    let esize = elem_bytes(base_of(elem)) as i32;
    // SAFETY: fresh allocation for a header and shape.
    unsafe {
        p.write(WlArray { rc: AtomicI64::new(-1), rank, size, data, elem, esize, shape: [] });
        (*p).shape_mut().copy_from_slice(extents);
    }
    p
}

/// Frees a header made by [`wl_wrap`] (not the caller's data).
///
/// # Safety
/// `a` was returned by [`wl_wrap`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_unwrap(a: *mut WlArray) {
    if a.is_null() {
        return;
    }
    // SAFETY: made by wl_wrap with this layout.
    unsafe {
        if let Some((lay, _)) = layout((*a).rank as usize, 0) {
            dealloc(a as *mut u8, lay);
        }
    }
}

/// The reference count (for tests).
///
/// # Safety
/// `a` is a valid array.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_refcount(a: *const WlArray) -> i64 {
    unsafe { (*a).rc.load(Ordering::Relaxed) }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::values::{element, set_element};
    use compiler_core::interp::value::Scalar;
    use compiler_core::syntax::ast::BaseType;

    /// An array of `shape` whose element `i` is `i` (`elem`), owned by the test.
    fn numbered(ctx: *mut WlCtx, elem: BaseType, shape: &[i64]) -> *mut WlArray {
        let a = unsafe { wl_alloc(ctx, code_of(elem), shape.len() as i64, shape.as_ptr()) };
        for i in 0..shape.iter().product::<i64>() as usize {
            let s =
                if elem == BaseType::Double { Scalar::Double(i as f64) } else { Scalar::Int(BaseType::Int, i as i64) };
            unsafe { set_element(a, i, s) };
        }
        a
    }

    /// An int vector of `xs`, owned by the test.
    pub(crate) fn ints(ctx: *mut WlCtx, xs: &[i64]) -> *mut WlArray {
        let a = unsafe { wl_alloc(ctx, code_of(BaseType::Int), 1, &(xs.len() as i64)) };
        for (i, &x) in xs.iter().enumerate() {
            unsafe { set_element(a, i, Scalar::Int(BaseType::Int, x)) };
        }
        a
    }

    /// The index of element `i` of `shape` (row-major).
    pub(crate) fn index_of(mut i: i64, shape: &[i64]) -> Vec<i64> {
        let mut iv = vec![0; shape.len()];
        for d in (0..shape.len()).rev() {
            iv[d] = i % shape[d];
            i /= shape[d];
        }
        iv
    }

    /// Every element outside the box is the source's, on one thread and split
    /// over rows on several (chunk edges inside and outside the box), for a
    /// box over all axes and one over the leading axes only.
    #[test]
    fn copy_outside_copies_the_border_on_one_thread_and_several() {
        for (threads, parallel_min) in [(1, i64::MAX), (3, 1)] {
            let mut ctx = WlCtx { threads, parallel_min, ..WlCtx::default() };
            let ctx: *mut WlCtx = &mut ctx;
            for (elem, shape, lower, upper) in [
                (BaseType::Double, vec![5, 6, 7], vec![1, 1, 1], vec![4, 5, 6]),
                (BaseType::Double, vec![9, 4, 3], vec![2, 1], vec![7, 3]),
                (BaseType::Int, vec![6, 5], vec![0, 2], vec![6, 3]),
            ] {
                let src = numbered(ctx, elem, &shape);
                let (lo, hi) = (ints(ctx, &lower), ints(ctx, &upper));
                let out = unsafe { wl_copy_outside(ctx, src, lo, hi) };
                let n: i64 = shape.iter().product();
                let mut outside = 0;
                for i in 0..n as usize {
                    let iv = index_of(i as i64, &shape);
                    let inside = (0..lower.len()).all(|d| lower[d] <= iv[d] && iv[d] < upper[d]);
                    if !inside {
                        outside += 1;
                        let (got, want) = unsafe { (element(&*out, i), element(&*src, i)) };
                        assert_eq!(got, want, "{shape:?} at {iv:?}, {threads} thread(s)");
                    }
                }
                assert!(outside > 0);
                unsafe {
                    for a in [src, lo, hi, out] {
                        wl_dec(a);
                    }
                }
            }
        }
    }
}

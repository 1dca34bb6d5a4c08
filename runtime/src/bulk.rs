//! Bulk writes of a with-loop's result before its parts run: a copy of the
//! argument array (`modarray`), or the `genarray` default in every cell, and
//! both only outside the box a dense part is about to write. They are
//! memory-bound and were serial: the rows (or, without a box, blocks of
//! bytes) are split over the context's threads by the with-loop's own rule
//! ([`crate::parallel::wl_parallel_chunks`]), each thread writing roughly the
//! rows its part of the with-loop writes after.

use std::ffi::c_void;

use crate::error::WlCtx;

/// Where the bytes a bulk write puts come from.
#[derive(Clone, Copy)]
pub(crate) enum Source<'a> {
    /// The same offset of another buffer as large.
    Copy(*const u8),
    /// One element's (or cell's) bytes, again and again from the offset
    /// (which is a multiple of its length).
    Fill(&'a [u8]),
}

impl Source<'_> {
    /// Puts `len` bytes at `dst + at`.
    ///
    /// # Safety
    /// `at..at + len` lies inside `dst`'s buffer (and the source's, for a
    /// copy); for a fill, `at` and `len` are multiples of the pattern's length.
    unsafe fn put(self, dst: *mut u8, at: usize, len: usize) {
        unsafe {
            match self {
                Source::Copy(src) => copy_bytes(src.add(at), dst.add(at), len),
                Source::Fill(pattern) => fill_bytes(dst.add(at), len, pattern),
            }
        }
    }
}

/// Bytes per block of a write without a box: small enough for two threads
/// to share a few megabytes evenly, large enough that a block costs far more
/// than claiming it.
const BLOCK: usize = 1 << 16;

/// Writes `len` bytes at `dst` (an array of `elements` elements) from
/// `source`, in blocks over the context's threads (null context: one).
///
/// # Safety
/// `dst` (and a copy's source) hold `len` bytes; a fill's pattern divides
/// `len`; `ctx` is valid or null.
pub(crate) unsafe fn write_all(ctx: *mut WlCtx, dst: *mut u8, len: usize, elements: i64, source: Source<'_>) {
    let unit = match source {
        Source::Copy(_) => 1,
        Source::Fill(pattern) => pattern.len().max(1),
    };
    let block = (BLOCK / unit).max(1) * unit;
    let job = Blocks { dst, len, block, source };
    let blocks = len.div_ceil(block) as i64;
    // SAFETY: `job` outlives the calls; chunks write disjoint blocks.
    unsafe { split(ctx, blocks, elements, write_blocks, &job as *const Blocks as *mut c_void) };
}

/// Runs `f` over `0..outer` (of an array of `elements` elements) in chunks
/// over the context's threads, as a with-loop of that size would be split;
/// on this thread alone with a null context or below the threshold.
///
/// # Safety
/// As [`crate::parallel::wl_parallel_for`]; `ctx` valid or null.
unsafe fn split(ctx: *mut WlCtx, outer: i64, elements: i64, f: crate::parallel::WlChunkFn, env: *mut c_void) {
    unsafe {
        let chunks = if ctx.is_null() { 1 } else { crate::parallel::wl_parallel_chunks(ctx, outer, elements) };
        if chunks <= 1 {
            f(ctx, env, 0, 0, outer);
        } else {
            crate::parallel::wl_parallel_for(ctx, outer, chunks, f, env);
        }
    }
}

/// What [`write_blocks`] writes: `len` bytes at `dst`, in blocks of `block`.
struct Blocks<'a> {
    dst: *mut u8,
    len: usize,
    block: usize,
    source: Source<'a>,
}

/// Writes blocks `lo..hi` of a [`Blocks`] (a [`crate::parallel::WlChunkFn`]).
///
/// # Safety
/// `env` points to a live [`Blocks`].
unsafe extern "C" fn write_blocks(_: *mut WlCtx, env: *mut c_void, _: i64, lo: i64, hi: i64) {
    // SAFETY: as the caller promises.
    let job = unsafe { &*(env as *const Blocks) };
    let start = lo as usize * job.block;
    let end = (hi as usize * job.block).min(job.len);
    if start < end {
        // SAFETY: inside the buffer; `start` is a multiple of the block, itself
        // a multiple of a fill's pattern, and so is `end` (or the length).
        unsafe { job.source.put(job.dst, start, end - start) };
    }
}

/// A box `lo <= iv < hi` over the leading `shape.len()` axes of an array
/// whose elements below those axes take `cell` bytes each.
pub(crate) struct Outside<'a> {
    dst: *mut u8,
    shape: Vec<usize>,
    box_lo: Vec<usize>,
    box_hi: Vec<usize>,
    cell: usize,
    source: Source<'a>,
}

impl<'a> Outside<'a> {
    /// The box `lower <= iv < upper` over the leading `lower.len()` axes of
    /// an array of `shape` with `esize`-byte elements at `dst`, clamped into
    /// the shape (a with-loop reports bad bounds itself); `None` when the
    /// bounds are not that (of different lengths, longer than the rank, or
    /// empty: the box is then the whole array, one cell).
    pub fn clamped(
        dst: *mut u8,
        shape: &[i64],
        lower: &[i64],
        upper: &[i64],
        esize: usize,
        source: Source<'a>,
    ) -> Option<Self> {
        let k = lower.len();
        if k == 0 || upper.len() != k || k > shape.len() {
            return None;
        }
        let extent = |d: usize| shape[d].max(0) as usize;
        let box_lo: Vec<usize> = (0..k).map(|d| (lower[d].max(0) as usize).min(extent(d))).collect();
        let box_hi: Vec<usize> = (0..k).map(|d| (upper[d].max(0) as usize).min(extent(d)).max(box_lo[d])).collect();
        let cell = shape[k..].iter().map(|&e| e.max(0) as usize).product::<usize>() * esize;
        Some(Outside { dst, shape: (0..k).map(extent).collect(), box_lo, box_hi, cell, source })
    }

    /// The bytes of one index of the box's axes (what lies below them).
    pub fn cell_bytes(&self) -> usize {
        self.cell
    }
}

/// Writes every cell of `job.dst` outside the box from its source, the rows
/// (the leading `shape.len() - 1` axes) over the context's threads. A
/// stencil's border is a few elements at each end of every row, each on a
/// cache line of its own, so the write is bound by misses, not bytes (mg3's
/// 128^3 border copy: a sixth of its one-thread time, all of it serial
/// before; two threads 14.3-16.5 -> 12.1-12.8 ms).
///
/// # Safety
/// `job.dst` (and a copy's source) hold the whole shape; the box lies inside
/// it (`box_lo[d] <= box_hi[d] <= shape[d]`) and has at least one axis; a
/// fill's pattern divides `cell`; `ctx` is valid or null.
pub(crate) unsafe fn write_outside(ctx: *mut WlCtx, job: &Outside<'_>, elements: i64) {
    let k = job.shape.len();
    let rows: usize = job.shape[..k - 1].iter().product();
    // SAFETY: `job` outlives the calls; chunks write disjoint rows.
    unsafe { split(ctx, rows as i64, elements, outside_rows, job as *const Outside as *mut c_void) };
}

/// Writes rows `lo..hi` of an [`Outside`] (a [`crate::parallel::WlChunkFn`]).
///
/// # Safety
/// `env` points to a live [`Outside`] as [`write_outside`] asks.
unsafe extern "C" fn outside_rows(_: *mut WlCtx, env: *mut c_void, _: i64, lo: i64, hi: i64) {
    // SAFETY: as the caller promises.
    let job = unsafe { &*(env as *const Outside) };
    let k = job.shape.len();
    let row_bytes = job.shape[k - 1] * job.cell;
    let (l, h) = (job.box_lo[k - 1] * job.cell, job.box_hi[k - 1] * job.cell);
    // The row's index over the leading axes, from `lo`.
    let mut prefix = vec![0usize; k - 1];
    let mut rest = lo as usize;
    for d in (0..k - 1).rev() {
        prefix[d] = rest % job.shape[d];
        rest /= job.shape[d];
    }
    for row in lo as usize..hi as usize {
        let at = row * row_bytes;
        let inside = (0..k - 1).all(|d| job.box_lo[d] <= prefix[d] && prefix[d] < job.box_hi[d]);
        // SAFETY: `at..at + row_bytes` is a row of the shape; `l` and `h`
        // are multiples of the cell.
        unsafe {
            if inside {
                job.source.put(job.dst, at, l);
                job.source.put(job.dst, at + h, row_bytes - h);
            } else {
                job.source.put(job.dst, at, row_bytes);
            }
        }
        for d in (0..k - 1).rev() {
            prefix[d] += 1;
            if prefix[d] < job.shape[d] {
                break;
            }
            prefix[d] = 0;
        }
    }
}

/// `len` bytes from `src` to `dst`: a border's few elements word by word
/// (a `memcpy` call per row end cost more than the copy), longer runs by
/// `memcpy`.
///
/// # Safety
/// Both ranges are valid and do not overlap.
pub(crate) unsafe fn copy_bytes(src: *const u8, dst: *mut u8, len: usize) {
    unsafe {
        if len <= 64 && len.is_multiple_of(8) {
            for w in 0..len / 8 {
                let x = (src.add(8 * w) as *const u64).read_unaligned();
                (dst.add(8 * w) as *mut u64).write_unaligned(x);
            }
        } else {
            std::ptr::copy_nonoverlapping(src, dst, len);
        }
    }
}

/// `pattern` again and again over `len` bytes at `dst`: one repeated byte
/// (a zero default) by `memset`, a pattern of up to eight bytes as words,
/// longer ones written once and then copied in doubling runs.
///
/// # Safety
/// `dst` holds `len` bytes, a multiple of the pattern's length.
unsafe fn fill_bytes(dst: *mut u8, len: usize, pattern: &[u8]) {
    let Some(&first) = pattern.first() else { return };
    unsafe {
        if pattern.iter().all(|b| *b == first) {
            std::ptr::write_bytes(dst, first, len);
        } else if 8 % pattern.len() == 0 {
            let mut word = [0u8; 8];
            for (i, b) in word.iter_mut().enumerate() {
                *b = pattern[i % pattern.len()];
            }
            let word = u64::from_ne_bytes(word);
            for w in 0..len / 8 {
                (dst.add(8 * w) as *mut u64).write_unaligned(word);
            }
            // The tail: fewer than eight bytes, whole patterns.
            let done = len / 8 * 8;
            std::ptr::copy_nonoverlapping(word.to_ne_bytes().as_ptr(), dst.add(done), len - done);
        } else {
            let first_run = pattern.len().min(len);
            std::ptr::copy_nonoverlapping(pattern.as_ptr(), dst, first_run);
            let mut done = first_run;
            while done < len {
                let run = done.min(len - done);
                // SAFETY: `0..run` and `done..done + run` do not overlap.
                std::ptr::copy_nonoverlapping(dst, dst.add(done), run);
                done += run;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every fill path (one byte, words with a tail, doubling runs) writes
    /// the pattern from the first byte to the last and nothing after.
    #[test]
    fn fill_bytes_repeats_the_pattern_exactly() {
        for pattern in [vec![0u8; 8], vec![7u8], vec![1, 2], vec![1, 2, 3, 4], vec![9, 8, 7], (1..=24).collect()] {
            for count in [0, 1, 2, 3, 5, 17, 100] {
                let len = count * pattern.len();
                let mut buf = vec![0xeeu8; len + 3];
                unsafe { fill_bytes(buf.as_mut_ptr(), len, &pattern) };
                for (i, b) in buf[..len].iter().enumerate() {
                    assert_eq!(*b, pattern[i % pattern.len()], "pattern {pattern:?} x{count}, byte {i}");
                }
                assert_eq!(&buf[len..], &[0xee; 3], "pattern {pattern:?} x{count} wrote past its end");
            }
        }
    }
}

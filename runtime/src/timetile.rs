//! Time tiles: several steps of a stencil loop run per band of rows while the
//! band is in the cache (`compiler_core::opt::timetile` marks such loops).
//!
//! A step is a with-loop part's chunk function, `f(ctx, env, 0, lo, hi)`,
//! computing the rows `lo..hi` (relative to the part's first row) of the new
//! array from the old one. Overlapped tiling: to take a band of rows `r0..r1`
//! through `T` steps, a tile copies rows `r0 - T*reach .. r1 + T*reach` of
//! the old array into a scratch buffer, runs step `t` over the rows
//! `r0 - (T-t)*reach .. r1 + (T-t)*reach` from one scratch buffer into the
//! other, and the last step into the new array's rows `r0..r1`. The rows a
//! tile computes beyond its band are the ones its neighbours compute too
//! (the cost of the method: `(T-1)*reach` rows per band per step on either
//! side), so tiles need nothing from each other and run on any thread.
//!
//! The chunk function reads the old array through the array header its
//! environment holds and writes through the new array's data pointer; a tile
//! runs it on a copy of the environment whose headers and data pointer point
//! into the scratch buffers, shifted so that the row-major offsets of the
//! whole array land on the rows the buffer holds. Elements a step does not
//! write (the array's border) stay what the old array holds, in every step
//! (a `modarray` copies them), so the buffers start as copies of the old
//! rows and those elements never change.

use std::cell::RefCell;
use std::ffi::c_void;

use crate::array::WlArray;
use crate::bulk::copy_bytes;
use crate::error::WlCtx;
use crate::parallel::{WlChunkFn, wl_parallel_chunks, wl_parallel_for};

/// The most steps one tile takes.
const MAX_STEPS: i64 = 8;

/// Bytes of rows each of a tile's two scratch buffers holds (both, the
/// environment and what the step reads besides stay within a core's L2
/// cache on the machines measured: 1-2 MiB); `WITHLOOP_TILE_BYTES` sets it
/// (a small value makes small arrays take the tiled path: tests, fuzzing).
fn scratch_bytes() -> i64 {
    static BYTES: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| crate::error::env_int("WITHLOOP_TILE_BYTES").unwrap_or(384 << 10).max(1))
}

/// Alignment of the rows' offsets in a scratch buffer: the array data's own
/// (compiled code may assume it of row starts).
const ALIGN: usize = crate::array::DATA_ALIGN;

/// How a loop's next steps are tiled: steps per tile and rows per band.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Plan {
    steps: i64,
    height: i64,
}

/// The tiling of `steps_left` steps over `rows` rows of `row_bytes` bytes,
/// each step reading `reach` rows either side; `None`: one plain step (few
/// steps left, an array that fits the caches anyway, rows too large for
/// bands of several steps).
fn plan(rows: i64, row_bytes: i64, reach: i64, steps_left: i64, budget: i64) -> Option<Plan> {
    if steps_left < 2 || reach < 0 || rows <= 0 || row_bytes <= 0 || rows.saturating_mul(row_bytes) <= 2 * budget {
        return None;
    }
    let max_rows = budget / row_bytes;
    // Each band at least four times the rows its steps recompute on either side.
    let steps = if reach == 0 { MAX_STEPS } else { max_rows / (6 * reach) }.min(MAX_STEPS).min(steps_left);
    if steps < 2 {
        return None;
    }
    let height = (max_rows - 2 * steps * reach).max(1);
    Some(Plan { steps, height })
}

/// One tiled run of a loop's steps, shared by the threads running its tiles.
struct Tiling {
    /// The step into a scratch buffer, and the last one, into the new array.
    f: WlChunkFn,
    last: WlChunkFn,
    env: *const u8,
    env_bytes: usize,
    /// Byte offsets in the environment: the old array's header, the new
    /// array's header and its data pointer.
    src_at: usize,
    dst_at: usize,
    data_at: usize,
    src: *const WlArray,
    dst: *const WlArray,
    header_bytes: usize,
    dst_data: *mut u8,
    rows: i64,
    row_bytes: i64,
    /// The array's shape and the part's box in it (`box_lo <= iv < box_hi`).
    shape: Vec<i64>,
    box_lo: Vec<i64>,
    box_hi: Vec<i64>,
    esize: usize,
    reach: i64,
    plan: Plan,
}

impl Tiling {
    /// Copies the elements of row `r` outside the part's box (those no step
    /// writes) from `from` to `to` (each the row's start).
    unsafe fn copy_border(&self, r: i64, from: *const u8, to: *mut u8) {
        if r < self.box_lo[0] || r >= self.box_hi[0] {
            unsafe { std::ptr::copy_nonoverlapping(from, to, self.row_bytes as usize) };
        } else if self.shape.len() > 1 {
            unsafe { self.copy_border_below(1, from, to) };
        }
    }

    /// [`Self::copy_border`] of one index of axis `d - 1`, over axes `d..`.
    unsafe fn copy_border_below(&self, d: usize, from: *const u8, to: *mut u8) {
        let sub: usize = self.shape[d + 1..].iter().product::<i64>() as usize * self.esize;
        let (lo, hi, n) = (self.box_lo[d] as usize, self.box_hi[d] as usize, self.shape[d] as usize);
        unsafe {
            copy_bytes(from, to, lo * sub);
            copy_bytes(from.add(hi * sub), to.add(hi * sub), (n - hi) * sub);
            if d + 1 < self.shape.len() {
                for i in lo..hi {
                    self.copy_border_below(d + 1, from.add(i * sub), to.add(i * sub));
                }
            }
        }
    }
}

thread_local! {
    /// A thread's scratch buffers, kept from tile to tile.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Runs the next steps of a loop marked `tiled` whose step is the chunk
/// function `step_fn` (`tile_fn`: the same, storing through the caches)
/// over the part's box `lower <= iv < upper`, reading `reach` rows on either
/// side, with `steps_left` steps to go, a step's `work` weighed as its
/// with-loop's (what the split over threads follows); returns how many steps ran
/// (one plain step where tiles would not pay). The environment `env`
/// (`env_bytes` long) holds the old array's header at `src_slot`, the new
/// array's at `dst_slot` and its data pointer at `data_slot`; the new
/// array's elements outside the part are set.
///
/// # Safety
/// As for [`wl_parallel_for`] with `step_fn` and `env`; the slots point into
/// `env`; the old and new arrays have the same shape, of rank 1 or more.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn wl_time_tiled(
    ctx: *mut WlCtx,
    tile_fn: WlChunkFn,
    step_fn: WlChunkFn,
    env: *mut c_void,
    env_bytes: i64,
    src_slot: *const *const WlArray,
    dst_slot: *const *const WlArray,
    data_slot: *const *mut u8,
    lower: *const i64,
    upper: *const i64,
    reach: i64,
    steps_left: i64,
    work: i64,
) -> i64 {
    let slots = Slots { src: src_slot, dst: dst_slot, data: data_slot };
    let bounds = Bounds { lower, upper, reach, work };
    unsafe { time_tiled(ctx, tile_fn, step_fn, env, env_bytes, slots, bounds, steps_left, scratch_bytes()) }
}

/// The part's box (`lower <= iv < upper`), the rows a step reads either
/// side, and a step's work as a with-loop split over threads weighs it.
struct Bounds {
    lower: *const i64,
    upper: *const i64,
    reach: i64,
    work: i64,
}

/// Where the environment holds the arrays ([`wl_time_tiled`]).
struct Slots {
    src: *const *const WlArray,
    dst: *const *const WlArray,
    data: *const *mut u8,
}

/// [`wl_time_tiled`] with `budget` bytes per scratch buffer.
#[allow(clippy::too_many_arguments)]
unsafe fn time_tiled(
    ctx: *mut WlCtx,
    tile_fn: WlChunkFn,
    step_fn: WlChunkFn,
    env: *mut c_void,
    env_bytes: i64,
    slots: Slots,
    bounds: Bounds,
    steps_left: i64,
    budget: i64,
) -> i64 {
    let Slots { src: src_slot, dst: dst_slot, data: data_slot } = slots;
    let Bounds { lower, upper, reach, work } = bounds;
    let (src, dst, dst_data) = unsafe { (*src_slot, *dst_slot, *data_slot) };
    let (rank, size, esize, src_data) = unsafe { ((*src).rank, (*src).size, (*src).esize as i64, (*src).data) };
    let shape: Vec<i64> = unsafe { (*src).shape().to_vec() };
    let rows = shape.first().copied().unwrap_or(0);
    // The part's box, clamped into the shape (the with-loop checked it).
    let clamp = |x: i64, d: usize| x.clamp(0, shape[d].max(0));
    let box_lo: Vec<i64> = (0..shape.len()).map(|d| clamp(unsafe { *lower.add(d) }, d)).collect();
    let box_hi: Vec<i64> = (0..shape.len()).map(|d| clamp(unsafe { *upper.add(d) }, d).max(box_lo[d])).collect();
    let outer = box_hi.first().map_or(0, |h| h - box_lo[0]);
    let row_elems = if rows > 0 { size / rows } else { 0 };
    let row_bytes = row_elems * esize;
    // In place (the new array is the old one) the bands would overwrite rows
    // their neighbours still read.
    let distinct = src_data != dst_data || reach == 0;
    let Some(plan) = plan(rows, row_bytes, reach, steps_left, budget).filter(|_| distinct && outer > 0) else {
        let chunks = unsafe { wl_parallel_chunks(ctx, outer, work) };
        unsafe { wl_parallel_for(ctx, outer, chunks, step_fn, env) };
        return 1;
    };
    let base = env as usize;
    let job = Tiling {
        f: tile_fn,
        last: step_fn,
        env: env as *const u8,
        env_bytes: env_bytes as usize,
        src_at: src_slot as usize - base,
        dst_at: dst_slot as usize - base,
        data_at: data_slot as usize - base,
        src,
        dst,
        header_bytes: std::mem::size_of::<WlArray>() + rank as usize * 8,
        dst_data,
        rows,
        row_bytes,
        shape,
        box_lo,
        box_hi,
        esize: esize as usize,
        reach,
        plan,
    };
    let tiles = (rows + plan.height - 1) / plan.height;
    let chunks = unsafe { wl_parallel_chunks(ctx, tiles, work.saturating_mul(plan.steps)) };
    unsafe { wl_parallel_for(ctx, tiles, chunks, run_tiles, &job as *const Tiling as *mut c_void) };
    plan.steps
}

/// A chunk of tiles (a [`WlChunkFn`] over tile numbers).
unsafe extern "C" fn run_tiles(ctx: *mut WlCtx, job: *mut c_void, _chunk: i64, lo: i64, hi: i64) {
    let job = unsafe { &*(job as *const Tiling) };
    SCRATCH.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        for tile in lo..hi {
            unsafe { run_tile(ctx, job, tile, &mut scratch) };
            if unsafe { (*ctx).error } != 0 {
                return;
            }
        }
    });
}

/// Takes the band of rows `tile` through the plan's steps.
unsafe fn run_tile(ctx: *mut WlCtx, job: &Tiling, tile: i64, scratch: &mut Vec<u8>) {
    let Plan { steps, height } = job.plan;
    let r0 = tile * height;
    let r1 = (r0 + height).min(job.rows);
    let in0 = (r0 - steps * job.reach).max(0);
    let in1 = (r1 + steps * job.reach).min(job.rows);
    let bytes = ((in1 - in0) * job.row_bytes) as usize;
    // Two buffers placed so that row 0 of the whole array would be
    // aligned, then the environment and the two headers.
    let shift = ((in0 * job.row_bytes) as usize) % ALIGN;
    let first_at = shift;
    let second_at = (first_at + bytes).next_multiple_of(ALIGN) + shift;
    let env_at = (second_at + bytes).next_multiple_of(16);
    let src_header_at = env_at + job.env_bytes.next_multiple_of(16);
    let dst_header_at = src_header_at + job.header_bytes.next_multiple_of(16);
    let need = ALIGN + dst_header_at + job.header_bytes;
    if scratch.len() < need {
        scratch.resize(need, 0);
    }
    let start = scratch.as_mut_ptr();
    let base = start.wrapping_add(start.align_offset(ALIGN));
    let (first, second, env) = (base.wrapping_add(first_at), base.wrapping_add(second_at), base.wrapping_add(env_at));
    let (src_header, dst_header) = (base.wrapping_add(src_header_at), base.wrapping_add(dst_header_at));
    unsafe {
        // The elements no step writes, in both buffers (the first step
        // reads the old array itself).
        let rows_of_box = if job.shape.len() > 1 { job.box_lo[0].max(in0)..job.box_hi[0].min(in1) } else { 0..0 };
        for r in (in0..job.box_lo[0].min(in1)).chain(rows_of_box).chain(job.box_hi[0].max(in0)..in1) {
            let at = ((r - in0) * job.row_bytes) as usize;
            let from = (*job.src).data.add((r * job.row_bytes) as usize);
            job.copy_border(r, from, first.add(at));
            job.copy_border(r, from, second.add(at));
        }
        std::ptr::copy_nonoverlapping(job.env, env, job.env_bytes);
        std::ptr::copy_nonoverlapping(job.src as *const u8, src_header, job.header_bytes);
        std::ptr::copy_nonoverlapping(job.dst as *const u8, dst_header, job.header_bytes);
        // Not the runtime's to count or free.
        (*(src_header as *mut WlArray)).rc = std::sync::atomic::AtomicI64::new(-1);
        (*(dst_header as *mut WlArray)).rc = std::sync::atomic::AtomicI64::new(-1);
        (env.add(job.dst_at) as *mut *const u8).write(dst_header);
    }
    let behind = (in0 * job.row_bytes) as usize;
    // The buffer the last step wrote (none: the first step reads the old array).
    let mut cur: Option<*mut u8> = None;
    for step in 1..=steps {
        let lo = (r0 - (steps - step) * job.reach).max(0).max(job.box_lo[0]);
        let hi = (r1 + (steps - step) * job.reach).min(job.rows).min(job.box_hi[0]);
        let next = if cur == Some(first) { second } else { first };
        // Row-major offsets of the whole array, on the rows a buffer holds.
        let out = if step == steps { job.dst_data } else { next.wrapping_sub(behind) };
        unsafe {
            let read: *const u8 = match cur {
                None => job.src as *const u8,
                Some(buf) => {
                    (*(src_header as *mut WlArray)).data = buf.wrapping_sub(behind);
                    src_header
                }
            };
            (env.add(job.src_at) as *mut *const u8).write(read);
            (*(dst_header as *mut WlArray)).data = out;
            (env.add(job.data_at) as *mut *mut u8).write(out);
        }
        if lo < hi {
            let f = if step == steps { job.last } else { job.f };
            unsafe { f(ctx, env as *mut c_void, 0, lo - job.box_lo[0], hi - job.box_lo[0]) };
            if unsafe { (*ctx).error } != 0 {
                return;
            }
        }
        cur = Some(next);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::array::{code_of, wl_alloc, wl_dec};
    use compiler_core::syntax::ast::BaseType;

    /// The environment of [`stencil_chunk`], as compiled code's holds its
    /// captured values: the old array's header, the new one's, its data.
    #[repr(C)]
    struct StencilEnv {
        src: *const WlArray,
        dst: *const WlArray,
        data: *mut u8,
        /// (flat offset, weight) of each tap.
        taps: *const (i64, f64),
        ntaps: usize,
        lower: [i64; 3],
        upper: [i64; 3],
    }

    /// Every index of the box `lower..upper` whose axis-0 component is in
    /// `lower[0] + lo .. lower[0] + hi`, with its row-major offset.
    fn box_offsets(shape: &[i64], lower: &[i64], upper: &[i64], lo: i64, hi: i64) -> Vec<i64> {
        let mut out = Vec::new();
        let mut iv: Vec<i64> = lower[..shape.len()].to_vec();
        iv[0] = lower[0] + lo;
        let end0 = lower[0] + hi;
        if iv[0] >= end0 || (1..shape.len()).any(|d| lower[d] >= upper[d]) {
            return out;
        }
        loop {
            out.push(iv.iter().zip(shape).fold(0, |acc, (i, e)| acc * e + i));
            let mut d = shape.len() - 1;
            loop {
                iv[d] += 1;
                let end = if d == 0 { end0 } else { upper[d] };
                if iv[d] < end {
                    break;
                }
                if d == 0 {
                    return out;
                }
                iv[d] = lower[d];
                d -= 1;
            }
        }
    }

    /// A weighted stencil step over rows `lo..hi` of the box (a chunk function).
    unsafe extern "C" fn stencil_chunk(_: *mut WlCtx, env: *mut c_void, _: i64, lo: i64, hi: i64) {
        let env = unsafe { &*(env as *const StencilEnv) };
        let (src, shape) = unsafe { ((*env.src).data as *const f64, (*env.src).shape()) };
        let taps = unsafe { std::slice::from_raw_parts(env.taps, env.ntaps) };
        for o in box_offsets(shape, &env.lower, &env.upper, lo, hi) {
            let x = taps.iter().fold(0.0, |acc, (off, w)| acc + w * unsafe { *src.offset((o + off) as isize) });
            unsafe { *(env.data as *mut f64).offset(o as isize) = x };
        }
    }

    /// `steps` steps of the stencil on `init`, one at a time.
    fn reference(
        init: &[f64],
        shape: &[i64],
        lower: &[i64],
        upper: &[i64],
        taps: &[(i64, f64)],
        steps: usize,
    ) -> Vec<f64> {
        let mut cur = init.to_vec();
        for _ in 0..steps {
            let mut next = cur.clone();
            for o in box_offsets(shape, lower, upper, 0, upper[0] - lower[0]) {
                next[o as usize] = taps.iter().fold(0.0, |acc, (off, w)| acc + w * cur[(o + off) as usize]);
            }
            cur = next;
        }
        cur
    }

    /// The loop as compiled code runs it: each round a new array (holding the
    /// old one's elements, the border among them), then `time_tiled`.
    #[allow(clippy::too_many_arguments)]
    fn tiled(
        init: &[f64],
        shape: &[i64],
        lower: &[i64],
        upper: &[i64],
        taps: &[(i64, f64)],
        reach: i64,
        steps: i64,
        budget: i64,
        threads: i32,
    ) -> (Vec<f64>, Vec<i64>) {
        let ctx = crate::error::wl_ctx_new();
        unsafe {
            (*ctx).threads = threads;
            (*ctx).parallel_min = 1;
        }
        let alloc = || unsafe { wl_alloc(ctx, code_of(BaseType::Double), shape.len() as i64, shape.as_ptr()) };
        let mut src = alloc();
        unsafe { std::ptr::copy_nonoverlapping(init.as_ptr(), (*src).data as *mut f64, init.len()) };
        let (mut lo3, mut hi3) = ([0; 3], [0; 3]);
        lo3[..shape.len()].copy_from_slice(lower);
        hi3[..shape.len()].copy_from_slice(upper);
        let mut k = 0;
        let mut rounds = Vec::new();
        while k < steps {
            let dst = alloc();
            unsafe { std::ptr::copy_nonoverlapping((*src).data, (*dst).data, init.len() * 8) };
            let mut env = StencilEnv {
                src,
                dst,
                data: unsafe { (*dst).data },
                taps: taps.as_ptr(),
                ntaps: taps.len(),
                lower: lo3,
                upper: hi3,
            };
            let slots = Slots { src: &env.src, dst: &env.dst, data: &env.data };
            let bytes = std::mem::size_of::<StencilEnv>() as i64;
            let envp = &mut env as *mut StencilEnv as *mut c_void;
            let bounds = Bounds { lower: lower.as_ptr(), upper: upper.as_ptr(), reach, work: init.len() as i64 };
            let ran =
                unsafe { time_tiled(ctx, stencil_chunk, stencil_chunk, envp, bytes, slots, bounds, steps - k, budget) };
            assert_eq!(unsafe { (*ctx).error }, 0);
            assert!(ran >= 1 && ran <= steps - k);
            rounds.push(ran);
            k += ran;
            unsafe { wl_dec(src) };
            src = dst;
        }
        let out = unsafe { std::slice::from_raw_parts((*src).data as *const f64, init.len()) }.to_vec();
        unsafe {
            wl_dec(src);
            crate::error::wl_ctx_free(ctx);
        }
        (out, rounds)
    }

    #[test]
    fn tiled_steps_compute_what_single_steps_do() {
        // (shape, box, taps as (index offset, weight), reach in rows)
        type Case = (Vec<i64>, Vec<i64>, Vec<i64>, Vec<(Vec<i64>, f64)>, i64);
        let cases: Vec<Case> = vec![
            // A relaxation's five points, the box one off every edge.
            (
                vec![37, 23],
                vec![1, 1],
                vec![36, 22],
                vec![(vec![-1, 0], 0.2), (vec![1, 0], 0.3), (vec![0, -1], 0.1), (vec![0, 1], 0.25), (vec![0, 0], 0.15)],
                1,
            ),
            // Reach two, a box away from the edges unevenly.
            (
                vec![97, 17],
                vec![2, 3],
                vec![94, 15],
                vec![(vec![-2, 0], 0.5), (vec![2, 1], 0.25), (vec![0, -3], 0.25)],
                2,
            ),
            // One axis: rows of one element.
            (
                vec![500],
                vec![2],
                vec![497],
                vec![(vec![-2], 0.1), (vec![-1], 0.2), (vec![0], 0.4), (vec![1], 0.2), (vec![2], 0.1)],
                2,
            ),
            // Three axes, seven points.
            (
                vec![41, 6, 5],
                vec![1, 1, 1],
                vec![40, 5, 4],
                vec![
                    (vec![-1, 0, 0], 0.1),
                    (vec![1, 0, 0], 0.2),
                    (vec![0, -1, 0], 0.1),
                    (vec![0, 1, 0], 0.2),
                    (vec![0, 0, -1], 0.1),
                    (vec![0, 0, 1], 0.2),
                    (vec![0, 0, 0], 0.1),
                ],
                1,
            ),
        ];
        for (shape, lower, upper, taps, reach) in cases {
            let flat = |iv: &[i64]| iv.iter().enumerate().fold(0, |acc, (d, i)| acc * shape[d] + i);
            let taps: Vec<(i64, f64)> = taps.iter().map(|(iv, w)| (flat(iv), *w)).collect();
            let size: i64 = shape.iter().product();
            let init: Vec<f64> = (0..size).map(|i| ((i * 37 + 11) % 23) as f64 - 7.5).collect();
            let row_bytes = size / shape[0] * 8;
            for steps in [1, 2, 5, 11] {
                let want = reference(&init, &shape, &lower, &upper, &taps, steps as usize);
                // Buffers for bands of two steps, of three, and half the
                // array's rows (the array fits twice: no tiles).
                for (rows, tiles) in [(12 * reach.max(1), true), (18 * reach.max(1), true), ((shape[0] + 1) / 2, false)]
                {
                    for threads in [1, 2] {
                        let (got, rounds) =
                            tiled(&init, &shape, &lower, &upper, &taps, reach, steps, rows * row_bytes, threads);
                        let what = format!(
                            "shape {shape:?}, {steps} steps, {rows}-row buffers, {threads} threads: rounds {rounds:?}"
                        );
                        assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{what}");
                        assert_eq!(rounds[0] >= 2, tiles && steps >= 2, "{what}: tiled or not");
                    }
                }
            }
        }
    }

    #[test]
    fn a_plan_tiles_large_arrays_with_several_steps_left() {
        // 2000 rows of 16000 bytes, reach 1, 384 KiB per buffer: 24 rows each,
        // four steps, bands of 16 rows.
        assert_eq!(plan(2000, 16000, 1, 10, 384 << 10), Some(Plan { steps: 4, height: 16 }));
        // The last step of a loop, or an array that fits the caches: one plain step.
        assert_eq!(plan(2000, 16000, 1, 1, 384 << 10), None);
        assert_eq!(plan(20, 16000, 1, 10, 384 << 10), None);
        // Rows too large for bands of two steps.
        assert_eq!(plan(128, 131072, 1, 4, 384 << 10), None);
        // One-element rows: eight steps at most.
        assert_eq!(plan(4_000_000, 8, 1, 20, 384 << 10), Some(Plan { steps: 8, height: 49152 - 16 }));
    }
}

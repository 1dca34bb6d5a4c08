//! Matrix products of doubles: `c = a · b` for the with-loops the optimiser's
//! `gemm` pass recognises (`c[i, j] = fold(+, 0.0, a[i, k] * b[k, j])`).
//!
//! Blocked as BLIS blocks a product, transposed for row-major results: `c` is
//! computed in tiles of `MR` rows by `NR` columns, each kept in vector
//! registers while `k` runs (the micro-kernel: per `k`, `NR` elements of a row
//! of `b` as vectors, `MR` elements of a column of `a` broadcast, `MR × NR`
//! multiply-adds). Both operands are first copied into the order the
//! micro-kernel reads them (packing): `KC` rows of `b` by `NC` columns, in
//! strips of `NR` columns, sized to stay in a core's L2 cache while every row
//! tile of `a` passes over them; `KC` columns of `a` in slivers of `MR` rows
//! (each in L1 while the strips pass), a panel of up to [`PANEL_MAX`]
//! doubles, packed while the first block of `b` of those columns is used and
//! read again by the others (BLIS packs this operand once per `KC` too).
//! Per block of `b`, the threads pack its strips together into one buffer
//! (the calling thread's), then split the rows of `c` in four chunks per
//! thread, so a thread slowed for a while leaves chunks to the other. While
//! a tile computes, the next tile's rows of `c` are prefetched; while a
//! sliver is packed, the next one's rows of `a`; while a row of `b` is
//! packed, the one [`AHEAD`] rows below.
//!
//! Measured on an AVX-512 Xeon with the AVX2 kernels (session 46,
//! `bench/ab/ab.c matmul`, `WITHLOOP_GEMM_KERNELS=avx2`, both load orders)
//! against the first version (threads splitting the columns, one chunk
//! each, each packing its own part of `b`; packing element by element with
//! a test per element): 1024², 1000² and 517² products 0.88-0.95x of its
//! time on one thread, 0.80-0.93x on two. Session 47, on a Zen 3 EPYC: the
//! panel (each sliver of `a` had been packed again for every block of `b`,
//! 8 times in a 1024² product with AVX2's NC of 128: 11% of the
//! product's time), an edge's scratch tile zeroed only at edges and the
//! prefetches of `a` and `b`: 0.88-0.93x of the time (1024², 1000², 517²;
//! one and two threads). Still behind `register_tile`'s 4x32 tiles with
//! AVX-512 (1.05-1.07x on one thread, 1.11x on two, before the panel), so
//! there only generic code's products run here (`codegen::matrix_products`:
//! `Dynamic`).
//!
//! Every element of `c` is computed in the order of `k` from 0.0, one
//! multiply-add at a time — fused (`fused`: one rounding, as `vfmadd` does) or
//! a multiplication then an addition (exact folds) — so the results are
//! those of the with-loop's own code, bit for bit, whatever the blocking: a
//! tile continues from the partial sums the previous `KC` block left in `c`.

use std::cell::RefCell;
use std::ffi::c_void;

use crate::error::WlCtx;

/// The most columns of `k` a packed block has ([`Isa::kc`]).
const KC_MAX: usize = 256;

/// Doubles per 64-byte cache line: the step of the prefetches.
const LINE: usize = 8;

/// How many rows of `b` ahead of the one it copies `pack_b` prefetches.
const AHEAD: usize = 8;

/// The micro-kernels this machine can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Isa {
    /// AVX-512F: 12 x 16 tiles (24 zmm accumulators).
    Avx512,
    /// AVX2 + FMA: 6 x 8 tiles (12 ymm accumulators).
    Avx2,
    /// Anything else: 4 x 4 tiles of scalars.
    Portable,
}

/// The most rows a tile has.
const MR_MAX: usize = 12;

impl Isa {
    /// The widest kernels this machine runs, or the narrower ones
    /// `WITHLOOP_GEMM_KERNELS` (`avx2`, `portable`) asks for — to measure an
    /// AVX2 machine's product on an AVX-512 one; a name this machine cannot
    /// run is ignored.
    fn detect() -> Isa {
        static ISA: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
        *ISA.get_or_init(|| {
            let available = Isa::available();
            let asked = match std::env::var("WITHLOOP_GEMM_KERNELS").as_deref() {
                Ok("avx512") => Some(Isa::Avx512),
                Ok("avx2") => Some(Isa::Avx2),
                Ok("portable") => Some(Isa::Portable),
                _ => None,
            };
            asked.filter(|isa| available.contains(isa)).unwrap_or(available[available.len() - 1])
        })
    }

    /// The kernels this machine can run, narrowest first.
    fn available() -> Vec<Isa> {
        #[allow(unused_mut)]
        let mut isas = vec![Isa::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            let fma = std::arch::is_x86_feature_detected!("fma");
            if fma && std::arch::is_x86_feature_detected!("avx2") {
                isas.push(Isa::Avx2);
            }
            if fma && std::arch::is_x86_feature_detected!("avx512f") {
                isas.push(Isa::Avx512);
            }
        }
        isas
    }

    /// (MR, NR): the tile (asked for per tile, so a constant).
    fn tile_shape(self) -> (usize, usize) {
        match self {
            Isa::Avx512 => (12, 16),
            Isa::Avx2 => (6, 8),
            Isa::Portable => (4, 4),
        }
    }

    /// NC: the columns of a packed block of `b` (`KC × NC` doubles): with
    /// AVX-512, half the core's L2 cache ([`half_l2_columns`], measured
    /// once); 256 KiB with AVX2, for Zen's 512 KiB.
    fn block_columns(self) -> usize {
        match self {
            Isa::Avx512 => {
                static NC: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
                *NC.get_or_init(|| half_l2_columns(l2_bytes(), self.kc(), self.tile_shape().1))
            }
            Isa::Avx2 | Isa::Portable => 128,
        }
    }

    /// KC: the rows of `b` (columns of `a`) per packed block. With AVX-512,
    /// blocks of 128 rows by 1024 columns (NC) ran 0.95-1.01x the time of
    /// 256 by 512 on an Emerald Rapids Xeon, about 0.97x (1024² and 1000²,
    /// one and two threads, `bench/ab/ab.c` both orders): the slivers of `a`
    /// half as large in L1, `a` packed half as often; KC 96, 128 and 192 with
    /// NC 512 were slower.
    fn kc(self) -> usize {
        match self {
            Isa::Avx512 => 128,
            Isa::Avx2 | Isa::Portable => KC_MAX,
        }
    }
}

/// The columns of a packed block of `b` of `kc` rows, in whole strips of
/// `nr`, that fill half of a core's L2 cache of `l2` bytes, the rest left to
/// the slivers of `a` and the tiles of `c` passing through; 1024 where it
/// is not known, and 16 to 64 strips. With AVX-512 (`kc` 128, `nr` 16):
/// where L2 is 2 MiB (Intel's Sapphire and Emerald Rapids), 1024 columns:
/// 128 rows by 1024 ran 0.95-1.01x the time of 256 by 512 on an Emerald
/// Rapids Xeon (session 46); where it is 1 MiB (Zen 4 and 5), 512:
/// 0.96-0.99x the time of 1024 on a Zen 5 EPYC (1024² and 2000², one and
/// two threads, `bench/ab/ab.c` both orders; 517², within one block either
/// way, the same).
fn half_l2_columns(l2: Option<usize>, kc: usize, nr: usize) -> usize {
    match l2 {
        Some(bytes) => (bytes / 2 / (kc * 8) / nr * nr).clamp(16 * nr, 64 * nr),
        None => 64 * nr,
    }
}

/// The size of this core's L2 cache, as the processor reports it
/// (`cpuid` leaf 0x8000_0006, which AMD's and Intel's processors both
/// answer), if it does. (`__cpuid` is safe in the Rust this was written
/// with and unsafe in older ones: the `unsafe` blocks keep the oldest Rust
/// we support compiling.)
#[allow(unused_unsafe)]
fn l2_bytes() -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `cpuid` exists on every x86-64 processor; leaves beyond the
        // highest extended one answer zeros or garbage, hence the check.
        let highest = unsafe { std::arch::x86_64::__cpuid(0x8000_0000) }.eax;
        if highest >= 0x8000_0006 {
            let kib = (unsafe { std::arch::x86_64::__cpuid(0x8000_0006) }.ecx >> 16) as usize;
            return (kib > 0).then_some(kib << 10);
        }
    }
    None
}

/// One product's operands, shared by its chunks.
struct Product {
    m: usize,
    n: usize,
    l: usize,
    a: *const f64,
    lda: usize,
    b: *const f64,
    ldb: usize,
    c: *mut f64,
    fused: bool,
    isa: Isa,
}

/// `c[i, j] = Σ_{k < l} a[i·lda + k] · b[k·ldb + j]` for `i < m`, `j < n`;
/// `c` holds `m × n` doubles, row-major. `fused`: each step a fused
/// multiply-add; else a multiplication and an addition. Runs on the
/// context's threads when the product is large enough.
///
/// # Safety
/// `a` holds rows `0..m` of `lda ≥ l` doubles, `b` rows `0..l` of `ldb ≥ n`;
/// `c` has room for `m × n` doubles and overlaps neither; `ctx` is valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_gemm_f64(
    ctx: *mut WlCtx,
    m: i64,
    n: i64,
    l: i64,
    a: *const f64,
    lda: i64,
    b: *const f64,
    ldb: i64,
    c: *mut f64,
    fused: i32,
) {
    let (m, n, l) = (m.max(0) as usize, n.max(0) as usize, l.max(0) as usize);
    if m == 0 || n == 0 {
        return;
    }
    if l == 0 {
        // SAFETY: `c` has room for `m × n` doubles.
        unsafe { std::ptr::write_bytes(c, 0, m * n) };
        return;
    }
    let p = Product { m, n, l, a, lda: lda as usize, b, ldb: ldb as usize, c, fused: fused != 0, isa: Isa::detect() };
    // SAFETY: as this function's.
    unsafe { product(ctx, &p) };
}

/// The product `p` (with the micro-kernels of `p.isa`, which this machine
/// has).
///
/// # Safety
/// As [`wl_gemm_f64`]'s, with `m`, `n`, `l` positive.
unsafe fn product(ctx: *mut WlCtx, p: &Product) {
    let (mr, nr) = p.isa.tile_shape();
    let (kc_max, nc_max) = (p.isa.kc(), p.isa.block_columns());
    let flops = (p.m as u128) * (p.n as u128) * (p.l as u128);
    let threads = if flops < 1 << 21 { 1 } else { crate::parallel::threads_of(unsafe { &*ctx }) };
    // Rows of `a` per panel: as many as fit `PANEL_MAX`, whole slivers.
    let panel_rows = (PANEL_MAX / kc_max / mr).max(1) * mr;
    let panel_len = panel_rows.min(p.m.div_ceil(mr) * mr) * kc_max;
    // The block of `b` and the panel of `a` all threads read, in the
    // calling thread's buffers.
    let done = with_buffer(&BLOCK, kc_max * nc_max, |block_buffer| {
        with_buffer(&PANEL, panel_len, |panel_buffer| {
            for ic in (0..p.m).step_by(panel_rows) {
                let rows = panel_rows.min(p.m - ic);
                let slivers = rows.div_ceil(mr) as i64;
                // Four chunks of rows per thread, as the with-loops have: a
                // thread that starts late or shares its core for a while
                // leaves its last chunks to the others (with one chunk
                // each, a slowed thread held up the product).
                let row_chunks = if threads == 1 { 1 } else { (threads * 4).min(slivers) };
                for pc in (0..p.l).step_by(kc_max) {
                    let kc = kc_max.min(p.l - pc);
                    for jc in (0..p.n).step_by(nc_max) {
                        let nc = nc_max.min(p.n - jc);
                        let block = Block {
                            p,
                            ic,
                            rows,
                            jc,
                            nc,
                            pc,
                            kc,
                            packed: block_buffer.as_mut_ptr(),
                            panel: panel_buffer.as_mut_ptr(),
                        };
                        let env = &block as *const Block as *mut c_void;
                        let strips = nc.div_ceil(nr) as i64;
                        // SAFETY: chunks pack disjoint strips of the block,
                        // then (after this call returns) compute disjoint
                        // rows of `c` (packing, with the first block of
                        // columns, disjoint slivers of the panel); `block`
                        // outlives both calls.
                        unsafe {
                            crate::parallel::wl_parallel_for(ctx, strips, threads.min(strips), pack_chunk, env);
                            crate::parallel::wl_parallel_for(ctx, slivers, row_chunks, rows_chunk, env);
                            if (*ctx).error != 0 {
                                return Some(());
                            }
                        }
                    }
                }
            }
            Some(())
        })
    });
    if done.is_none() {
        // SAFETY: `ctx` is valid.
        unsafe { out_of_memory(ctx) };
    }
}

/// Runs `f` on this thread's `cell` grown to `len` doubles (on a buffer of
/// its own if `cell` is in use: never, as products do not nest, but a
/// borrow must not panic) and gives back what `f` does; `None`, without
/// running it, when the memory cannot be had.
fn with_buffer<R>(
    cell: &'static std::thread::LocalKey<RefCell<Vec<f64>>>,
    len: usize,
    f: impl FnOnce(&mut [f64]) -> Option<R>,
) -> Option<R> {
    cell.with(|cell| {
        let mut own = Vec::new();
        let mut borrowed = cell.try_borrow_mut();
        let buffer = match borrowed.as_deref_mut() {
            Ok(buffer) => buffer,
            Err(_) => &mut own,
        };
        if buffer.len() < len {
            buffer.try_reserve(len - buffer.len()).ok()?;
            buffer.resize(len, 0.0);
        }
        f(buffer)
    })
}

/// Reports that a product's buffers could not be allocated.
///
/// # Safety
/// `ctx` is valid.
unsafe fn out_of_memory(ctx: *mut WlCtx) {
    unsafe { crate::error::set_error(ctx, std::ptr::null(), "R0010", "out of memory for a matrix product's buffers") };
}

/// One block of a product: rows `pc .. pc + kc` by columns `jc .. jc + nc`
/// of `b`, packed into `packed` (`KC × NC` doubles), for rows `ic .. ic +
/// rows` of `a`, whose columns `pc .. pc + kc` are packed into `panel`
/// (sliver `s`, rows `ic + s·MR ..`, at `s·MR·kc`) with the first block of
/// columns (`jc` 0) and read by the others.
struct Block<'a> {
    p: &'a Product,
    ic: usize,
    rows: usize,
    jc: usize,
    nc: usize,
    pc: usize,
    kc: usize,
    packed: *mut f64,
    panel: *mut f64,
}

/// Packs strips `lo .. hi` of the block `env` points at.
unsafe extern "C" fn pack_chunk(_: *mut WlCtx, env: *mut c_void, _: i64, lo: i64, hi: i64) {
    // SAFETY: `product` passes its `Block`; this chunk's strips are its own.
    let block = unsafe { &*(env as *const Block) };
    unsafe { pack_b(block, lo as usize..hi as usize) };
}

/// Slivers `lo .. hi` of the panel's rows of `c` over the block `env`
/// points at (its packed strips shared).
unsafe extern "C" fn rows_chunk(_: *mut WlCtx, env: *mut c_void, _: i64, lo: i64, hi: i64) {
    // SAFETY: `product` passes its `Block`, its strips packed before this
    // call; this chunk's slivers are its own.
    let block = unsafe { &*(env as *const Block) };
    unsafe { rows_of(block, lo as usize..hi as usize) };
}

/// The most doubles of `a` packed at once (a panel of `KC` columns by as
/// many whole slivers of rows as fit: 4 MiB, 2046 rows of 256 columns with
/// AVX2, 4092 rows of 128 with AVX-512); a product of more rows packs and
/// runs one panel after another.
const PANEL_MAX: usize = 1 << 19;

thread_local! {
    /// The calling thread's packed block of `b` (kept between products).
    static BLOCK: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
    /// The calling thread's packed panel of `a` (kept between products).
    static PANEL: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
}

/// Slivers `slivers` (rows `MR` at a time, from the panel's first) of `c`
/// over one block; with the first block of columns, packing each sliver of
/// `a` into the panel first.
///
/// # Safety
/// As [`wl_gemm_f64`]; the block's strips are packed; with `jc` > 0, so
/// are the panel's slivers.
unsafe fn rows_of(block: &Block, slivers: std::ops::Range<usize>) {
    let &Block { p, ic, rows, jc, nc, pc, kc, packed, panel } = block;
    let (mr, nr) = p.isa.tile_shape();
    let end = ic + rows;
    // SAFETY: `product` packed `kc × nc` doubles, read only from now on.
    let strips = unsafe { std::slice::from_raw_parts(packed as *const f64, nc.div_ceil(nr) * nr * kc) };
    // Lines of each of the next sliver's rows to prefetch per strip.
    let lines = kc.div_ceil(LINE).div_ceil(nc.div_ceil(nr));
    for s in slivers.clone() {
        let i = ic + s * mr;
        let h = mr.min(end - i);
        // SAFETY: the panel holds every sliver of the block's rows; this
        // chunk's are its own (written only here, with `jc` 0).
        let sliver = unsafe { std::slice::from_raw_parts_mut(panel.add(s * mr * kc), mr * kc) };
        let pack = jc == 0;
        if pack {
            unsafe { pack_a(p, i, h, pc, kc, mr, sliver) };
        }
        let last = s + 1 == slivers.end;
        for (t, jr) in (0..nc).step_by(nr).enumerate() {
            if pack && !last {
                // The next sliver's rows, spread over the strips: in cache
                // when `pack_a` reads them (from memory it waited for them).
                for r in 0..mr.min(end - i - h) {
                    for q in t * lines..((t + 1) * lines).min(kc.div_ceil(LINE)) {
                        prefetch(p.a.wrapping_add((i + mr + r) * p.lda + pc + q * LINE));
                    }
                }
            }
            let w = nr.min(nc - jr);
            // The tile after this one: the next strip's, or the next sliver's first.
            let next = if jr + nr < nc { (i, jc + jr + nr) } else { (i + mr, jc) };
            let next = p.c.wrapping_add(next.0 * p.n + next.1);
            unsafe { tile(p, kc, sliver, &strips[jr * kc..], i, jc + jr, h, w, pc == 0, next) };
        }
    }
}

/// Packs rows `i .. i + h`, columns `pc .. pc + kc` of `a` into a sliver of
/// `mr` rows, column `k` at `k·mr` (rows past `h` zero).
unsafe fn pack_a(p: &Product, i: usize, h: usize, pc: usize, kc: usize, mr: usize, out: &mut [f64]) {
    let mut rows = [std::ptr::null::<f64>(); MR_MAX];
    for (r, row) in rows.iter_mut().enumerate().take(h) {
        // SAFETY: row `i + r < m`, columns `pc .. pc + kc ≤ l ≤ lda`.
        *row = unsafe { p.a.add((i + r) * p.lda + pc) };
    }
    let out = &mut out[..kc * mr];
    // A whole sliver (every one but the last when `m` is not a multiple of
    // `mr`) without a test per element: the loop below was half of the
    // packing's time, and the packing then a seventh of a product's.
    match (h == mr, mr) {
        (true, 12) => unsafe { pack_a_full::<12>(&rows, out) },
        (true, 6) => unsafe { pack_a_full::<6>(&rows, out) },
        (true, 4) => unsafe { pack_a_full::<4>(&rows, out) },
        _ => {
            for (k, column) in out.chunks_exact_mut(mr).enumerate() {
                for (r, x) in column.iter_mut().enumerate() {
                    *x = if r < h { unsafe { *rows[r].add(k) } } else { 0.0 };
                }
            }
        }
    }
}

/// [`pack_a`] of `MR` rows, all inside `a`: column by column across `k`, so
/// the sliver is written front to back (written row by row, every store went
/// to another cache line).
///
/// # Safety
/// `rows[..MR]` each hold `out.len() / MR` doubles.
unsafe fn pack_a_full<const MR: usize>(rows: &[*const f64; MR_MAX], out: &mut [f64]) {
    let rows: [*const f64; MR] = std::array::from_fn(|r| rows[r]);
    for (k, column) in out.chunks_exact_mut(MR).enumerate() {
        for r in 0..MR {
            column[r] = unsafe { *rows[r].add(k) };
        }
    }
}

/// Packs strips `strips` (`NR` columns each) of `block`'s rows
/// `pc .. pc + kc`, columns `jc .. jc + nc` of `b`: strip `s` at `s·NR·kc`,
/// its row `k` at `k·NR` (columns past the block zero).
///
/// # Safety
/// As [`wl_gemm_f64`]; `block.packed` holds the block's strips.
unsafe fn pack_b(block: &Block, strips: std::ops::Range<usize>) {
    match block.p.isa.tile_shape().1 {
        16 => unsafe { pack_b_strips::<16>(block, strips) },
        8 => unsafe { pack_b_strips::<8>(block, strips) },
        _ => unsafe { pack_b_strips::<4>(block, strips) },
    }
}

/// [`pack_b`] for strips `NR` wide. Row by row of `b`, the strips' part of
/// each row at once: `b` is read front to back, a stream the hardware
/// prefetches (strip by strip, every row of a strip was a page of its own);
/// full strips' rows are copied `NR` doubles at a time (vector moves).
unsafe fn pack_b_strips<const NR: usize>(block: &Block, strips: std::ops::Range<usize>) {
    let &Block { p, jc, nc, pc, kc, packed, .. } = block;
    let full = strips.start..strips.end.min(nc / NR);
    let edge = strips.end > nc / NR;
    let w = nc % NR;
    for k in 0..kc {
        // The row `AHEAD` below, while this one is copied: each row's part
        // is only a few lines, on a page of its own, too short a stream for
        // the hardware to prefetch (about a third of the packing's time).
        if k + AHEAD < kc {
            let row = p.b.wrapping_add((pc + k + AHEAD) * p.ldb + jc);
            for q in (strips.start * NR..(strips.end * NR).min(nc)).step_by(LINE) {
                prefetch(row.wrapping_add(q));
            }
        }
        // SAFETY: row `pc + k < l`, columns `jc .. jc + nc ≤ n ≤ ldb`;
        // strip `s` of the buffer is this call's for `s` in `strips`.
        let src = unsafe { p.b.add((pc + k) * p.ldb + jc) };
        for s in full.clone() {
            unsafe { std::ptr::copy_nonoverlapping(src.add(s * NR), packed.add(s * NR * kc + k * NR), NR) };
        }
        if edge {
            let s = nc / NR;
            for q in 0..NR {
                let x = if q < w { unsafe { *src.add(s * NR + q) } } else { 0.0 };
                unsafe { *packed.add(s * NR * kc + k * NR + q) = x };
            }
        }
    }
}

/// The tile of `c` at row `i`, column `j`, `h × w` of the kernel's `MR × NR`,
/// over `kc` steps of `k` (`sliver`: `a`'s rows packed): from 0.0 (`first`)
/// or from what `c` holds.
#[allow(clippy::too_many_arguments)]
unsafe fn tile(
    p: &Product,
    kc: usize,
    sliver: &[f64],
    strip: &[f64],
    i: usize,
    j: usize,
    h: usize,
    w: usize,
    first: bool,
    next: *const f64,
) {
    let (mr, nr) = p.isa.tile_shape();
    // SAFETY: the tile lies inside `c` (rows `i .. i + h ≤ m`, columns `j .. j + w ≤ n`).
    let at = unsafe { p.c.add(i * p.n + j) };
    // The next tile's rows of `c` (partial sums to load, or lines to
    // write): fetched while this tile computes, where its loads would wait
    // for them. (Addresses only, never dereferenced: past the last row's end
    // they are still fine to prefetch, so `wrapping_add`.)
    for r in 0..mr {
        prefetch(next.wrapping_add(r * p.n));
        prefetch(next.wrapping_add(r * p.n + LINE));
    }
    if h == mr && w == nr {
        unsafe { kernel(p.isa, p.fused, kc, sliver.as_ptr(), strip.as_ptr(), at, p.n, first) };
        return;
    }
    // An edge: through a full tile of scratch, the part inside `c` copied in
    // and out. (Only here: zeroing it for every tile was 2% of a product.)
    let mut scratch = [0.0f64; MR_MAX * 16];
    if !first {
        for r in 0..h {
            for q in 0..w {
                scratch[r * nr + q] = unsafe { *at.add(r * p.n + q) };
            }
        }
    }
    unsafe { kernel(p.isa, p.fused, kc, sliver.as_ptr(), strip.as_ptr(), scratch.as_mut_ptr(), nr, first) };
    for r in 0..h {
        for q in 0..w {
            unsafe { *at.add(r * p.n + q) = scratch[r * nr + q] };
        }
    }
}

/// Asks for the cache line at `p` (a hint: no fault, whatever `p` is).
#[inline(always)]
fn prefetch(p: *const f64) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// One full tile: `c[r·ldc + q] (+)= Σ_k a[k·MR + r] · b[k·NR + q]`.
#[allow(clippy::too_many_arguments)]
unsafe fn kernel(isa: Isa, fused: bool, kc: usize, a: *const f64, b: *const f64, c: *mut f64, ldc: usize, first: bool) {
    match (isa, fused) {
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx512, true) => unsafe { x86::kernel_12x16::<true>(kc, a, b, c, ldc, first) },
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx512, false) => unsafe { x86::kernel_12x16::<false>(kc, a, b, c, ldc, first) },
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx2, true) => unsafe { x86::kernel_6x8::<true>(kc, a, b, c, ldc, first) },
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx2, false) => unsafe { x86::kernel_6x8::<false>(kc, a, b, c, ldc, first) },
        _ => unsafe { kernel_portable(fused, kc, a, b, c, ldc, first) },
    }
}

/// The 4 x 4 tile in scalars (`f64::mul_add` is one rounding, as the vector
/// kernels' FMA).
unsafe fn kernel_portable(fused: bool, kc: usize, a: *const f64, b: *const f64, c: *mut f64, ldc: usize, first: bool) {
    const MR: usize = 4;
    const NR: usize = 4;
    let mut acc = [[0.0f64; NR]; MR];
    if !first {
        for (r, row) in acc.iter_mut().enumerate() {
            for (q, x) in row.iter_mut().enumerate() {
                *x = unsafe { *c.add(r * ldc + q) };
            }
        }
    }
    for k in 0..kc {
        for (r, row) in acc.iter_mut().enumerate() {
            let x = unsafe { *a.add(k * MR + r) };
            for (q, s) in row.iter_mut().enumerate() {
                let y = unsafe { *b.add(k * NR + q) };
                *s = if fused { x.mul_add(y, *s) } else { *s + x * y };
            }
        }
    }
    for (r, row) in acc.iter().enumerate() {
        for (q, x) in row.iter().enumerate() {
            unsafe { *c.add(r * ldc + q) = *x };
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// How many steps of `k` ahead the AVX2 kernel prefetches its strip of
    /// `b`: on a Zen 3 EPYC the same time as without while the machine ran
    /// at full speed, 0.92x the time of a 1024² product (one and two
    /// threads, both load orders) while it ran slowed by its neighbours
    /// (1.2-1.3x the time, as if another guest shared its cores' caches).
    /// 8, 16 and 32 steps were the same. Not measured with AVX-512, whose
    /// kernel has none.
    const B_AHEAD: usize = 16;

    /// A micro-kernel: `MR` rows by two vectors of `LANES` doubles in
    /// `2·MR` accumulator registers; per `k` two vectors of `b`, `MR`
    /// broadcasts of `a` (`PREFETCH`: and a prefetch of `b`). One
    /// definition for each instruction set (the intrinsics differ, the
    /// order of the multiply-adds must not).
    macro_rules! kernel {
        ($(#[$doc:meta])* $name:ident, $features:literal, $mr:literal, $lanes:literal, $prefetch:literal,
         $zero:ident, $load:ident, $store:ident, $splat:ident, $fmadd:ident, $add:ident, $mul:ident) => {
            $(#[$doc])*
            #[target_feature(enable = $features)]
            pub(super) unsafe fn $name<const FUSED: bool>(
                kc: usize,
                a: *const f64,
                b: *const f64,
                c: *mut f64,
                ldc: usize,
                first: bool,
            ) {
                let mut acc = [[$zero(); 2]; $mr];
                if !first {
                    for (r, row) in acc.iter_mut().enumerate() {
                        for (v, x) in row.iter_mut().enumerate() {
                            *x = unsafe { $load(c.add(r * ldc + v * $lanes)) };
                        }
                    }
                }
                for k in 0..kc {
                    let bk = unsafe { b.add(k * 2 * $lanes) };
                    if $prefetch {
                        // The strip's row `B_AHEAD` steps on (one line):
                        // in L1 when its step comes.
                        _mm_prefetch::<_MM_HINT_T0>(bk.wrapping_add(B_AHEAD * 2 * $lanes) as *const i8);
                    }
                    let y = unsafe { [$load(bk), $load(bk.add($lanes))] };
                    for (r, row) in acc.iter_mut().enumerate() {
                        let x = $splat(unsafe { *a.add(k * $mr + r) });
                        for (v, s) in row.iter_mut().enumerate() {
                            *s = if FUSED { $fmadd(x, y[v], *s) } else { $add(*s, $mul(x, y[v])) };
                        }
                    }
                }
                for (r, row) in acc.iter().enumerate() {
                    for (v, x) in row.iter().enumerate() {
                        unsafe { $store(c.add(r * ldc + v * $lanes), *x) };
                    }
                }
            }
        };
    }

    kernel!(
        /// 12 rows x 16 columns in 24 zmm registers.
        kernel_12x16, "avx512f,fma", 12, 8, false,
        _mm512_setzero_pd, _mm512_loadu_pd, _mm512_storeu_pd, _mm512_set1_pd, _mm512_fmadd_pd, _mm512_add_pd, _mm512_mul_pd
    );
    kernel!(
        /// 6 rows x 8 columns in 12 ymm registers.
        kernel_6x8, "avx2,fma", 6, 4, true,
        _mm256_setzero_pd, _mm256_loadu_pd, _mm256_storeu_pd, _mm256_set1_pd, _mm256_fmadd_pd, _mm256_add_pd, _mm256_mul_pd
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The with-loop's own order: from 0.0, one (fused) multiply-add per `k`.
    #[allow(clippy::too_many_arguments)]
    fn naive(m: usize, n: usize, l: usize, a: &[f64], lda: usize, b: &[f64], ldb: usize, fused: bool) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0f64;
                for k in 0..l {
                    let (x, y) = (a[i * lda + k], b[k * ldb + j]);
                    s = if fused { x.mul_add(y, s) } else { s + x * y };
                }
                c[i * n + j] = s;
            }
        }
        c
    }

    fn check(threads: i32, m: usize, n: usize, l: usize, fused: bool) {
        for isa in Isa::available() {
            checked(isa, threads, m, n, l, fused);
        }
    }

    fn checked(isa: Isa, threads: i32, m: usize, n: usize, l: usize, fused: bool) {
        let (lda, ldb) = (l + 3, n + 5);
        // Values whose products and sums round (no exact small integers).
        let a: Vec<f64> = (0..m * lda).map(|x| ((x * 7919) % 1000) as f64 / 997.0 - 0.31).collect();
        let b: Vec<f64> = (0..l * ldb).map(|x| ((x * 104_729) % 1000) as f64 / 991.0 - 0.57).collect();
        let mut c = vec![f64::NAN; m * n];
        let ctx = crate::error::wl_ctx_new();
        unsafe {
            (*ctx).threads = threads;
            if l == 0 {
                wl_gemm_f64(
                    ctx,
                    m as i64,
                    n as i64,
                    0,
                    a.as_ptr(),
                    lda as i64,
                    b.as_ptr(),
                    ldb as i64,
                    c.as_mut_ptr(),
                    1,
                );
            } else {
                let (a, b, c) = (a.as_ptr(), b.as_ptr(), c.as_mut_ptr());
                product(ctx, &Product { m, n, l, a, lda, b, ldb, c, fused, isa });
            }
            assert!((*ctx).error().is_none());
            crate::error::wl_ctx_free(ctx);
        }
        let want = naive(m, n, l, &a, lda, &b, ldb, fused);
        let same = c.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(
            same,
            "{m}x{l} . {l}x{n}, {isa:?}, fused {fused}, {threads} threads: not bit for bit the with-loop's results"
        );
    }

    #[test]
    fn products_are_bit_for_bit_the_with_loops_order_at_every_edge() {
        // Edges in every direction: rows past a tile and past a panel of
        // `a` (4100: panels of 2046 rows with AVX2, 4092 with AVX-512),
        // columns past a strip and past NC, k past KC.
        let shapes = [
            (1, 1, 1),
            (7, 9, 3),
            (13, 37, 300),
            (121, 33, 257),
            (6, 32, 256),
            (130, 520, 513),
            (13, 1030, 130),
            (4100, 17, 260),
        ];
        for &(m, n, l) in &shapes {
            for fused in [true, false] {
                check(1, m, n, l, fused);
            }
        }
    }

    #[test]
    fn threads_split_the_rows_and_agree_with_one() {
        check(2, 200, 150, 300, true);
        check(3, 97, 700, 64, false);
    }

    #[test]
    fn avx512_blocks_fill_half_of_l2() {
        let columns = |l2| half_l2_columns(l2, 128, 16);
        // 2 MiB (Sapphire Rapids): 1 MiB blocks; 1 MiB (Zen 4, 5): 512 KiB.
        assert_eq!(columns(Some(2 << 20)), 1024);
        assert_eq!(columns(Some(1 << 20)), 512);
        // Unknown: 1 MiB; tiny or huge caches stay within 256..=1024 columns.
        assert_eq!(columns(None), 1024);
        assert_eq!(columns(Some(256 << 10)), 256);
        assert_eq!(columns(Some(64 << 20)), 1024);
        // Whole strips of 16 columns.
        assert_eq!(columns(Some(1_300_000)) % 16, 0);
    }

    #[test]
    fn an_empty_fold_gives_zeros() {
        check(1, 5, 4, 0, true);
    }
}

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
//! tile of `a` passes over them; `KC` columns of `MR` rows of `a` (a sliver,
//! in L1 while the strips pass). Threads split the columns of `c`; each
//! packs its own `b` blocks (into its own L2).
//!
//! Every element of `c` is computed in the order of `k` from 0.0, one
//! multiply-add at a time — fused (`fused`: one rounding, as `vfmadd` does) or
//! a multiplication then an addition (exact folds) — so the results are
//! those of the with-loop's own code, bit for bit, whatever the blocking: a
//! tile continues from the partial sums the previous `KC` block left in `c`.

use std::cell::RefCell;
use std::ffi::c_void;

use crate::error::WlCtx;

/// Columns of `k` per packed block.
const KC: usize = 256;

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

    /// (MR, NR, NC): the tile, and the columns of a packed block of `b`
    /// (`KC × NC` doubles: 1 MiB with AVX-512, where L2 caches are 1-2 MiB;
    /// 256 KiB with AVX2, for Zen's 512 KiB).
    fn geometry(self) -> (usize, usize, usize) {
        match self {
            Isa::Avx512 => (12, 16, 512),
            Isa::Avx2 => (6, 8, 128),
            Isa::Portable => (4, 4, 128),
        }
    }
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
    let (_, nr, _) = p.isa.geometry();
    let strips = p.n.div_ceil(nr) as i64;
    // Threads split the columns: each packs its own part of `b` (into its
    // own core's L2) and reads all of `a` where it lies. One chunk per
    // thread; small products run on the caller alone.
    let flops = (p.m as u128) * (p.n as u128) * (p.l as u128);
    let chunks = if flops < 1 << 21 { 1 } else { crate::parallel::threads_of(unsafe { &*ctx }).min(strips) };
    // SAFETY: chunks write disjoint columns of `c`; `p` outlives the call.
    unsafe { crate::parallel::wl_parallel_for(ctx, strips, chunks, chunk, p as *const Product as *mut c_void) };
}

/// Columns `lo·NR .. hi·NR` of the product `env` points at.
unsafe extern "C" fn chunk(ctx: *mut WlCtx, env: *mut c_void, _: i64, lo: i64, hi: i64) {
    // SAFETY: `wl_gemm_f64` passes its `Product`.
    let p = unsafe { &*(env as *const Product) };
    let (_, nr, _) = p.isa.geometry();
    let columns = (lo as usize * nr).min(p.n)..(hi as usize * nr).min(p.n);
    if !PACK.with(|pack| unsafe { columns_of(p, columns, &mut pack.borrow_mut()) }) {
        // SAFETY: the chunk's private context.
        unsafe {
            crate::error::set_error(ctx, std::ptr::null(), "R0010", "out of memory for a matrix product's buffers")
        };
    }
}

thread_local! {
    /// Per thread: a packed block of `b` and, after it, a packed sliver of
    /// `a`; kept between products.
    static PACK: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
}

/// Columns `columns` of `c`; false when the packing buffer cannot be had.
///
/// # Safety
/// As [`wl_gemm_f64`]; `columns` lies in `0..p.n`.
unsafe fn columns_of(p: &Product, columns: std::ops::Range<usize>, pack: &mut Vec<f64>) -> bool {
    let (mr, nr, nc_max) = p.isa.geometry();
    let len = KC * nc_max + MR_MAX * KC;
    if pack.len() < len {
        if pack.try_reserve(len - pack.len()).is_err() {
            return false;
        }
        pack.resize(len, 0.0);
    }
    let (bpack, sliver) = pack.split_at_mut(KC * nc_max);
    for jc in columns.clone().step_by(nc_max) {
        let nc = nc_max.min(columns.end - jc);
        for pc in (0..p.l).step_by(KC) {
            let kc = KC.min(p.l - pc);
            // SAFETY: in bounds by the caller's contract; the buffer holds
            // `KC × NC` doubles, then `MR_MAX × KC`.
            unsafe { pack_b(p, jc, nc, pc, kc, nr, bpack) };
            for i in (0..p.m).step_by(mr) {
                let h = mr.min(p.m - i);
                unsafe { pack_a(p, i, h, pc, kc, mr, sliver) };
                for jr in (0..nc).step_by(nr) {
                    let strip = &bpack[jr * kc..];
                    let w = nr.min(nc - jr);
                    unsafe { tile(p, kc, sliver, strip, i, jc + jr, h, w, pc == 0) };
                }
            }
        }
    }
    true
}

/// Packs rows `i .. i + h`, columns `pc .. pc + kc` of `a` into a sliver of
/// `mr` rows, column `k` at `k·mr` (rows past `h` zero).
unsafe fn pack_a(p: &Product, i: usize, h: usize, pc: usize, kc: usize, mr: usize, out: &mut [f64]) {
    // Row by row across `k`: the sliver is written front to back (written
    // row by row, every store went to another cache line).
    let mut rows = [std::ptr::null::<f64>(); MR_MAX];
    for (r, row) in rows.iter_mut().enumerate().take(h) {
        // SAFETY: row `i + r < m`, columns `pc .. pc + kc ≤ l ≤ lda`.
        *row = unsafe { p.a.add((i + r) * p.lda + pc) };
    }
    for (k, column) in out[..kc * mr].chunks_exact_mut(mr).enumerate() {
        for (r, x) in column.iter_mut().enumerate() {
            *x = if r < h { unsafe { *rows[r].add(k) } } else { 0.0 };
        }
    }
}

/// Packs rows `pc .. pc + kc`, columns `jc .. jc + nc` of `b` into strips of
/// `nr` columns: strip `s` at `s·nr·kc`, its row `k` at `k·nr` (columns past
/// the block zero).
unsafe fn pack_b(p: &Product, jc: usize, nc: usize, pc: usize, kc: usize, nr: usize, out: &mut [f64]) {
    for (s, j0) in (0..nc).step_by(nr).enumerate() {
        let w = nr.min(nc - j0);
        let strip = &mut out[s * nr * kc..(s + 1) * nr * kc];
        for (k, dst) in strip.chunks_exact_mut(nr).enumerate() {
            // SAFETY: row `pc + k < l`, columns `jc + j0 .. + w ≤ n ≤ ldb`.
            let src = unsafe { p.b.add((pc + k) * p.ldb + jc + j0) };
            // Element by element: a row of a strip is a few cache lines, and
            // a call of `memcpy` per row cost more than the copy.
            for (q, x) in dst.iter_mut().enumerate() {
                *x = if q < w { unsafe { *src.add(q) } } else { 0.0 };
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
) {
    let (mr, nr, _) = p.isa.geometry();
    // SAFETY: the tile lies inside `c` (rows `i .. i + h ≤ m`, columns `j .. j + w ≤ n`).
    let at = unsafe { p.c.add(i * p.n + j) };
    let full = h == mr && w == nr;
    // An edge: through a full tile of scratch, the part inside `c` copied in and out.
    let mut scratch = [0.0f64; MR_MAX * 16];
    let (out, ldc) = if full { (at, p.n) } else { (scratch.as_mut_ptr(), nr) };
    if !full && !first {
        for r in 0..h {
            for q in 0..w {
                scratch[r * nr + q] = unsafe { *at.add(r * p.n + q) };
            }
        }
    }
    if !first && j + w < p.n {
        // The next tile's partial sums (the next strip's, same rows): fetched
        // while this tile computes, where its loads would wait for them.
        // (Addresses only, never dereferenced: past the last row's end they
        // are still fine to prefetch, so `wrapping_add`.)
        for r in 0..h {
            prefetch(at.wrapping_add(r * p.n + nr));
            prefetch(at.wrapping_add(r * p.n + nr + 8));
        }
    }
    unsafe { kernel(p.isa, p.fused, kc, sliver.as_ptr(), strip.as_ptr(), out, ldc, first) };
    if !full {
        for r in 0..h {
            for q in 0..w {
                unsafe { *at.add(r * p.n + q) = scratch[r * nr + q] };
            }
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

    /// A micro-kernel: `MR` rows by two vectors of `LANES` doubles in
    /// `2·MR` accumulator registers; per `k` two vectors of `b`, `MR`
    /// broadcasts of `a`. One definition for each instruction set (the
    /// intrinsics differ, the order of the multiply-adds must not).
    macro_rules! kernel {
        ($(#[$doc:meta])* $name:ident, $features:literal, $mr:literal, $lanes:literal,
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
        kernel_12x16, "avx512f,fma", 12, 8,
        _mm512_setzero_pd, _mm512_loadu_pd, _mm512_storeu_pd, _mm512_set1_pd, _mm512_fmadd_pd, _mm512_add_pd, _mm512_mul_pd
    );
    kernel!(
        /// 6 rows x 8 columns in 12 ymm registers.
        kernel_6x8, "avx2,fma", 6, 4,
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
        // Edges in every direction: rows past a tile, columns past a
        // strip and past NC, k past KC.
        for &(m, n, l) in &[(1, 1, 1), (7, 9, 3), (13, 37, 300), (121, 33, 257), (6, 32, 256), (130, 520, 513)] {
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
    fn an_empty_fold_gives_zeros() {
        check(1, 5, 4, 0, true);
    }
}

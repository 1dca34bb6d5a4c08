//! Parallel with-loops: the outer index range split into contiguous chunks, one
//! per thread. Each chunk runs with a private context; afterwards the error of
//! the lowest chunk (if any) becomes the caller's, so errors are the same ones a
//! sequential run reports first.

use std::ffi::c_void;

use crate::error::WlCtx;

/// A chunk of a with-loop: `(ctx, env, chunk, lo, hi)`.
pub type WlChunkFn = unsafe extern "C" fn(*mut WlCtx, *mut c_void, i64, i64, i64);

fn machine_threads() -> i64 {
    if let Some(n) = std::env::var("WITHLOOP_THREADS").ok().and_then(|s| s.parse::<i64>().ok()) {
        return n.max(1);
    }
    std::thread::available_parallelism().map_or(1, |n| n.get() as i64)
}

/// How many chunks to split `outer` iterations (of `total` elements in all)
/// into: 1 below the context's threshold.
///
/// # Safety
/// `ctx` is valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_parallel_chunks(ctx: *mut WlCtx, outer: i64, total: i64) -> i64 {
    let c = unsafe { &*ctx };
    let threads = if c.threads > 0 { c.threads as i64 } else { machine_threads() };
    if threads <= 1 || total < c.parallel_min || outer < 2 {
        return 1;
    }
    threads.min(outer)
}

/// Runs `f` on `chunks` contiguous parts of `0..outer`, in parallel.
///
/// # Safety
/// `f` is safe to run concurrently on disjoint chunks with `env`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_parallel_for(ctx: *mut WlCtx, outer: i64, chunks: i64, f: WlChunkFn, env: *mut c_void) {
    let chunks = chunks.clamp(1, outer.max(1));
    if chunks == 1 {
        unsafe { f(ctx, env, 0, 0, outer) };
        return;
    }
    let parent = unsafe { &*ctx };
    let mut privates: Vec<WlCtx> = (0..chunks)
        .map(|_| WlCtx {
            depth: parent.depth,
            max_depth: parent.max_depth,
            site: parent.site,
            write: parent.write,
            write_user: parent.write_user,
            threads: 1,
            parallel_min: parent.parallel_min,
            max_elements: parent.max_elements,
            ..WlCtx::default()
        })
        .collect();
    struct Send<T>(T);
    // SAFETY: chunks touch disjoint parts of the results; contexts are private.
    unsafe impl<T> std::marker::Send for Send<T> {}
    let env = Send(env);
    std::thread::scope(|s| {
        for (k, c) in privates.iter_mut().enumerate() {
            let lo = outer * k as i64 / chunks;
            let hi = outer * (k as i64 + 1) / chunks;
            let job = Send((c as *mut WlCtx, &env));
            s.spawn(move || {
                let job = job;
                let (c, env) = job.0;
                unsafe { f(c, env.0, k as i64, lo, hi) };
            });
        }
    });
    if let Some(failed) = privates.iter().find(|c| c.error != 0) {
        let p = unsafe { &mut *ctx };
        if p.error == 0 {
            p.error = failed.error;
            p.loc = failed.loc;
            p.code = failed.code;
            p.message = failed.message;
        }
    }
}

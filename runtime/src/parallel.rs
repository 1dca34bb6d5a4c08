//! Parallel with-loops: the outer index range split into contiguous chunks, one
//! per thread, run by the calling thread and a process-wide pool of workers
//! (`pool`). Each chunk runs with a context of its own (its thread's, set up
//! as the chunk starts); afterwards the error of the lowest failed chunk (if
//! any) becomes the caller's, so errors are the same ones a sequential run
//! reports first.

use std::ffi::c_void;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::error::WlCtx;

/// A chunk of a with-loop: `(ctx, env, chunk, lo, hi)`.
pub type WlChunkFn = unsafe extern "C" fn(*mut WlCtx, *mut c_void, i64, i64, i64);

fn machine_threads() -> i64 {
    // Read once: `available_parallelism` reads cgroup files on Linux, far too
    // slow for every with-loop (nested ones ask once per outer element).
    static THREADS: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| {
        // Read as the other settings are (`WITHLOOP_THREADS=" 2"` is 2; a
        // value that is not a number leaves the machine's count).
        if let Some(n) = crate::error::env_int("WITHLOOP_THREADS") {
            return n.max(1);
        }
        std::thread::available_parallelism().map_or(1, |n| n.get() as i64)
    })
}

/// The stack of a pool thread: what a program's main thread usually has
/// (8 MiB), so that a with-loop part calling a recursive function on a pool
/// thread reaches the depth it reaches on the caller's (the memory is only
/// reserved; pages are touched as the stack grows).
const WORKER_STACK: usize = 8 << 20;

/// Chunks per thread: each thread has a region of this many chunks, and a
/// thread done with its region takes chunks from the others' (see
/// [`Job::work`]). One chunk per thread left a thread that got less of a core
/// (a virtual CPU the host was running something else on) holding up the
/// whole with-loop.
const CHUNKS_PER_THREAD: i64 = 4;

/// The threads the context asks for.
/// The most threads a with-loop is split over, whatever `WITHLOOP_THREADS` or
/// `wl_ctx_set_threads` ask: each pool thread has an 8 MiB stack, and some
/// tens of thousands of them exhaust what a process may map or the system
/// may start (a thread then panics as it starts).
pub(crate) const MAX_THREADS: i64 = 512;

pub(crate) fn threads_of(c: &WlCtx) -> i64 {
    let asked = if c.threads > 0 { c.threads as i64 } else { machine_threads() };
    asked.min(MAX_THREADS)
}

/// How many chunks to split `outer` iterations (of `total` elements in all)
/// into: 1 below the context's threshold.
///
/// # Safety
/// `ctx` is valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wl_parallel_chunks(ctx: *mut WlCtx, outer: i64, total: i64) -> i64 {
    chunks(unsafe { &*ctx }, outer, total)
}

/// [`CHUNKS_PER_THREAD`] chunks per thread the context asks for, at most one
/// per outer iteration; 1 below the context's threshold.
fn chunks(c: &WlCtx, outer: i64, total: i64) -> i64 {
    let threads = threads_of(c);
    if threads <= 1 || total < c.parallel_min || outer < 2 {
        return 1;
    }
    (threads * CHUNKS_PER_THREAD).min(outer)
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
    let threads = threads_of(parent).clamp(1, chunks) as usize;
    let claimed = (0..chunks).map(|_| AtomicBool::new(false)).collect();
    let job = Job {
        f,
        env,
        parent: ctx,
        outer,
        claimed,
        threads,
        failed: Mutex::new(Vec::new()),
        first_failed: AtomicUsize::new(usize::MAX),
    };
    pool::run(&job);
    let failed = job.failed.into_inner().unwrap_or_else(|e| e.into_inner());
    // The lowest chunk's error: the one a sequential run meets first.
    if let Some((_, first)) = failed.iter().min_by_key(|(k, _)| *k) {
        let p = unsafe { &mut *ctx };
        if p.error == 0 {
            p.error = first.error;
            p.loc = first.loc;
            p.code = first.code;
            p.message = first.message;
        }
    }
}

thread_local! {
    /// The context this thread runs chunks with, set up afresh for each
    /// chunk ([`Job::run_chunk`]). One per thread, reused from job to job,
    /// rather than one per chunk that the calling thread set up: that was
    /// eight contexts of a kilobyte each, written by one core and read and
    /// written by another at every with-loop, their lines crossing between
    /// the cores twice per job. Measured on a Zen 4 guest (session 55): an
    /// empty job of eight chunks on two threads 1.0 -> 0.25-0.6 us; floyd
    /// 512, a with-loop per step, 7.9-8.2 -> 7.2-7.6 ms on two threads (the
    /// minima of three `bench/ab` runs each), 12.8 on one.
    static CHUNK_CTX: (std::cell::UnsafeCell<WlCtx>, std::cell::Cell<bool>) =
        (std::cell::UnsafeCell::new(WlCtx::default()), const { std::cell::Cell::new(false) });
}

/// One parallel with-loop: its chunks are claimed one at a time (`claimed`) by
/// the calling thread and the pool's workers alike.
struct Job {
    f: WlChunkFn,
    env: *mut c_void,
    /// The with-loop's context: the settings each chunk's runs with.
    parent: *const WlCtx,
    outer: i64,
    /// Per chunk: taken by some thread.
    claimed: Box<[AtomicBool]>,
    /// The threads meant to run it (the caller and `threads - 1` workers),
    /// each with a region of the chunks.
    threads: usize,
    /// The chunks that failed, with the contexts their errors are in (rare:
    /// a program error).
    failed: Mutex<Vec<(usize, Box<WlCtx>)>>,
    /// The lowest chunk that failed (`usize::MAX`: none). Chunks above it are
    /// not started: a sequential run would have stopped before them, and one
    /// of them may never end (a loop whose bound the failure guarded).
    first_failed: AtomicUsize,
}

impl Job {
    fn chunks(&self) -> i64 {
        self.claimed.len() as i64
    }

    /// Thread `t`'s region: chunks `start..end`.
    fn region(&self, t: usize) -> (usize, usize) {
        let n = self.claimed.len();
        (n * t / self.threads, n * (t + 1) / self.threads)
    }

    /// Claims and runs chunks until none is left; how many it ran. Thread
    /// `home` (the caller 0, worker `w` `w + 1`) runs its own region first,
    /// front to back, so a loop of with-loops over the same array (a
    /// relaxation, Floyd–Warshall's steps) gives each thread the same rows
    /// every time and they stay in its core's cache (handing chunks out first
    /// come, first served moved the whole array between cores at every step:
    /// floyd 512 ran 2.5x slower on two threads than on one). Then it takes
    /// what is left of the other regions from their backs, where their owners
    /// get last: a late or slowed thread delays the with-loop by one chunk at
    /// most, and two threads that keep pace never cross.
    fn work(&self, home: usize) -> i64 {
        let mut ran = 0;
        let home = home % self.threads;
        let (start, end) = self.region(home);
        for k in start..end {
            ran += self.run_chunk(k);
        }
        for other in (1..self.threads).map(|i| (home + i) % self.threads) {
            let (start, end) = self.region(other);
            for k in (start..end).rev() {
                ran += self.run_chunk(k);
            }
        }
        ran
    }

    /// Runs chunk `k` unless another thread claimed it: 1 if it ran.
    fn run_chunk(&self, k: usize) -> i64 {
        if self.claimed[k].swap(true, Ordering::Relaxed) {
            return 0;
        }
        if k > self.first_failed.load(Ordering::Relaxed) {
            return 1;
        }
        let lo = self.outer * k as i64 / self.chunks();
        let hi = self.outer * (k as i64 + 1) / self.chunks();
        CHUNK_CTX.with(|(cell, in_use)| {
            // A chunk that runs a with-loop of its own in chunks on this
            // thread (one thread: the calling thread runs them all) gets a
            // context of its own for them.
            let mut own = None;
            let ctx: *mut WlCtx = if in_use.replace(true) {
                own.insert(Box::new(WlCtx::default())).as_mut() as *mut WlCtx
            } else {
                cell.get()
            };
            // SAFETY: `ctx` is this thread's (or this chunk's own) and no
            // other chunk's while this one runs; `parent` outlives the job.
            unsafe {
                self.prepare(&mut *ctx);
                // `run`'s contract makes `f` safe on disjoint chunks.
                (self.f)(ctx, self.env, k as i64, lo, hi);
                if (*ctx).error != 0 {
                    self.first_failed.fetch_min(k, Ordering::Relaxed);
                    let copy = Box::new(std::ptr::read(ctx));
                    self.failed.lock().unwrap_or_else(|e| e.into_inner()).push((k, copy));
                }
            }
            if own.is_none() {
                in_use.set(false);
            }
        });
        1
    }

    /// `ctx` as a chunk starts: the parent's settings, on one thread, no
    /// error, and the stack of the thread that runs it (its calls check
    /// their depth against it). Of the message only the first byte is
    /// cleared: a kilobyte per chunk otherwise. Every field is named, so a
    /// field added to the context is decided here too.
    fn prepare(&self, ctx: &mut WlCtx) {
        // SAFETY: the parent context outlives the job, and chunks only read it.
        let parent = unsafe { &*self.parent };
        let WlCtx {
            error,
            depth,
            site,
            loc,
            max_depth,
            threads,
            parallel_min,
            max_elements,
            code,
            message,
            write,
            write_user,
            copied,
            stack_floor,
            stream_min,
        } = ctx;
        *error = 0;
        *depth = parent.depth;
        *site = parent.site;
        *loc = std::ptr::null();
        *max_depth = parent.max_depth;
        *threads = 1;
        *parallel_min = parent.parallel_min;
        *max_elements = parent.max_elements;
        *code = [0; 8];
        message[0] = 0;
        *write = parent.write;
        *write_user = parent.write_user;
        *copied = 0;
        *stack_floor = crate::error::stack_floor();
        *stream_min = parent.stream_min;
    }
}

/// A process-wide pool of worker threads, started on first use and grown to
/// the most chunks any with-loop asked for. Spawning threads per with-loop cost
/// tens of microseconds each time, which a loop of small parallel with-loops
/// (Floyd–Warshall: one per step) paid hundreds of times per call.
///
/// One job runs at a time; a with-loop that finds the pool busy (another host
/// thread's with-loop) runs its chunks on scoped threads of its own instead.
mod pool {
    use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
    use std::sync::{Condvar, Mutex, OnceLock};
    use std::thread::Thread;
    use std::time::{Duration, Instant};

    use super::Job;

    #[derive(Default)]
    struct State {
        /// The job being run (a pointer to the caller's stack while `run` waits).
        job: Option<*const Job>,
        /// Bumped per job, so a worker takes each job at most once.
        generation: u64,
        /// Worker `home` (1, 2, …) is `workers[home - 1]`: its thread, to
        /// wake it, and whether it sleeps (parked). A job wakes only the
        /// sleeping workers it runs on: with a pool grown for a wide job, a
        /// loop of two-thread with-loops woke every worker at every step, and
        /// they all queued for this lock just to find the job was not theirs.
        /// A wake-up is a system call, made only for a sleeper (in a loop of
        /// small with-loops the threads spin from one to the next and nobody
        /// sleeps). Changed and read under the lock, so a thread about to
        /// sleep is always seen.
        workers: Vec<(Thread, bool)>,
        /// Whether `run` waits on `Pool::finished` (same rules).
        caller_sleeps: bool,
    }

    // SAFETY: the job pointer is only dereferenced by workers registered in
    // `Pool::pending`, and `run` does not return (freeing the job) before they leave.
    unsafe impl Send for State {}

    struct Pool {
        state: Mutex<State>,
        /// `run` waits here for the last chunk and the last worker.
        finished: Condvar,
        busy: AtomicBool,
        /// `State::generation`, read without the lock while spinning.
        generation: AtomicU64,
        /// The current job's thread count, stored before `generation`: a
        /// spinning worker whose home is not below it goes on waiting without
        /// taking the lock.
        threads: AtomicUsize,
        /// Chunks not finished plus workers holding the job: zero when the job
        /// is over. Workers change it only under the lock, so `run`'s final
        /// check under the lock is exact; spinning reads it without.
        pending: AtomicI64,
    }

    /// How long a thread spins before it sleeps: a loop of small with-loops
    /// hands out its next job sooner than a sleeping thread wakes (a futex
    /// wake-up and context switch cost several microseconds per job).
    const SPIN: Duration = Duration::from_micros(50);

    /// Busy-waits until `ready` or [`SPIN`] has passed: a few rounds of
    /// `pause`, then rounds that each give the core away (`sched_yield`). The
    /// thread waited for may be on this very core (a woken thread is often
    /// placed on its waker's core): pausing alone kept it from running until
    /// the spin ran out, every step of a loop of with-loops (floyd 512 on two
    /// threads: 40 ms against 15 ms on one, whenever the worker shared the
    /// caller's core).
    fn spin(ready: impl Fn() -> bool) {
        let start = Instant::now();
        let mut i = 0u32;
        while !ready() {
            i = i.wrapping_add(1);
            if i < 64 {
                std::hint::spin_loop();
                continue;
            }
            std::thread::yield_now();
            if start.elapsed() > SPIN {
                return;
            }
        }
    }

    fn pool() -> &'static Pool {
        static POOL: OnceLock<Pool> = OnceLock::new();
        POOL.get_or_init(|| Pool {
            state: Mutex::new(State::default()),
            finished: Condvar::new(),
            busy: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            threads: AtomicUsize::new(0),
            pending: AtomicI64::new(0),
        })
    }

    fn lock(p: &Pool) -> std::sync::MutexGuard<'_, State> {
        // A chunk function never unwinds (it is `extern "C"`), so a poisoned
        // lock can only come from a bug here; the state stays consistent anyway.
        p.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn run(job: &Job) {
        let p = pool();
        if p.busy.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return scoped(job);
        }
        let helpers = job.threads - 1;
        {
            let mut s = lock(p);
            while s.workers.len() < helpers {
                let home = s.workers.len() + 1;
                let spawned = std::thread::Builder::new()
                    .name("withloop-worker".into())
                    .stack_size(super::WORKER_STACK)
                    .spawn(move || worker(home));
                match spawned {
                    Ok(handle) => s.workers.push((handle.thread().clone(), false)),
                    Err(_) => break, // fewer helpers: the caller runs the rest itself
                }
            }
            s.job = Some(job as *const Job);
            s.generation += 1;
            p.pending.store(job.chunks(), Ordering::Relaxed);
            p.threads.store(job.threads, Ordering::Relaxed);
            p.generation.store(s.generation, Ordering::Release);
            for (thread, asleep) in s.workers.iter().take(helpers) {
                if *asleep {
                    thread.unpark();
                }
            }
        }
        let ran = job.work(0);
        p.pending.fetch_sub(ran, Ordering::Relaxed);
        spin(|| p.pending.load(Ordering::Acquire) == 0);
        let mut s = lock(p);
        while p.pending.load(Ordering::Acquire) != 0 {
            s.caller_sleeps = true;
            s = p.finished.wait(s).unwrap_or_else(|e| e.into_inner());
            s.caller_sleeps = false;
        }
        s.job = None;
        drop(s);
        p.busy.store(false, Ordering::Release);
    }

    /// A worker; `home`: its number (the region of each job it runs first),
    /// and it runs only jobs of more than `home` threads.
    fn worker(home: usize) {
        let p = pool();
        let mut seen = 0u64;
        loop {
            // A job that is not ours is passed over here, without the lock.
            spin(|| {
                let generation = p.generation.load(Ordering::Acquire);
                generation != seen && home < p.threads.load(Ordering::Relaxed)
            });
            let job = {
                let mut s = lock(p);
                loop {
                    if let Some(job) = s.job
                        && s.generation != seen
                    {
                        seen = s.generation;
                        // SAFETY: `run` clears `job` under the lock before
                        // the job goes, so it is alive while we hold the lock.
                        // A job asks for `threads` threads: the caller and
                        // the workers of homes below that (the pool may have
                        // grown for a larger one).
                        if home < unsafe { &*job }.threads {
                            p.pending.fetch_add(1, Ordering::Relaxed);
                            break job;
                        }
                        continue;
                    }
                    s.workers[home - 1].1 = true;
                    drop(s);
                    // Woken by a job of ours (or spuriously: then we look again).
                    std::thread::park();
                    s = lock(p);
                    s.workers[home - 1].1 = false;
                }
            };
            // SAFETY: registered in `pending`, so `run` keeps the job alive.
            let ran = unsafe { &*job }.work(home);
            let s = lock(p);
            p.pending.fetch_sub(ran + 1, Ordering::Release);
            if s.caller_sleeps {
                p.finished.notify_one();
            }
            drop(s);
        }
    }

    /// The pool is busy: one scoped thread per chunk but the first, which the
    /// caller runs.
    fn scoped(job: &Job) {
        struct Shared<'a>(&'a Job);
        // SAFETY: `Job::work` hands each chunk to one thread only.
        unsafe impl std::marker::Sync for Shared<'_> {}
        let shared = Shared(job);
        std::thread::scope(|s| {
            for home in 1..job.threads {
                let shared = &shared;
                let spawned = std::thread::Builder::new().stack_size(super::WORKER_STACK).spawn_scoped(s, move || {
                    shared.0.work(home);
                });
                // A thread that could not start leaves its region to the others.
                drop(spawned);
            }
            shared.0.work(0);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `k + 1` (the chunk's number) into every element of its range of
    /// the `i64` buffer `env`; chunk 2 of a job also records an error.
    unsafe extern "C" fn mark(ctx: *mut WlCtx, env: *mut c_void, k: i64, lo: i64, hi: i64) {
        let out = env as *mut i64;
        for i in lo..hi {
            unsafe { *out.add(i as usize) = k + 1 };
        }
        if k == 2 {
            unsafe { (*ctx).error = 7 };
        }
    }

    fn job(chunks: i64, outer: i64) {
        let mut ctx = WlCtx::default();
        let mut out = vec![0i64; outer as usize];
        unsafe { wl_parallel_for(&mut ctx, outer, chunks, mark, out.as_mut_ptr() as *mut c_void) };
        for k in 0..chunks {
            let (lo, hi) = (outer * k / chunks, outer * (k + 1) / chunks);
            assert!(out[lo as usize..hi as usize].iter().all(|&x| x == k + 1), "chunk {k} of {chunks}");
        }
        assert_eq!(ctx.error, if chunks > 2 { 7 } else { 0 }, "the failed chunk's error reaches the caller");
    }

    /// Appends the chunk's number to the `Vec<i64>` behind `env` (one thread only).
    unsafe extern "C" fn record(_: *mut WlCtx, env: *mut c_void, k: i64, _: i64, _: i64) {
        unsafe { (*(env as *mut Vec<i64>)).push(k) };
    }

    #[test]
    fn a_thread_runs_its_region_then_takes_the_unclaimed_rest_from_the_back() {
        let parent = WlCtx::default();
        let mut order: Vec<i64> = Vec::new();
        let claimed: Box<[AtomicBool]> = (0..8).map(|k| AtomicBool::new(k == 3 || k == 6)).collect();
        let job = Job {
            f: record,
            env: &mut order as *mut Vec<i64> as *mut c_void,
            parent: &parent,
            outer: 16,
            claimed,
            threads: 4,
            failed: Mutex::new(Vec::new()),
            first_failed: AtomicUsize::new(usize::MAX),
        };
        assert_eq!(job.work(1), 6);
        assert_eq!(job.work(0), 0, "nothing is left");
        assert_eq!(
            order,
            [2, 5, 4, 7, 1, 0],
            "its own region (chunks 2 and 3, 3 taken) front to back, then the others' (6 taken) back to front"
        );
    }

    #[test]
    fn chunks_per_thread_above_the_threshold_at_most_one_per_outer_iteration() {
        let mut ctx = WlCtx { threads: 2, parallel_min: 100, ..WlCtx::default() };
        assert_eq!(unsafe { wl_parallel_chunks(&mut ctx, 256, 1 << 20) }, 2 * CHUNKS_PER_THREAD);
        // Below the threshold, or with one outer iteration, one chunk.
        assert_eq!(unsafe { wl_parallel_chunks(&mut ctx, 256, 99) }, 1);
        assert_eq!(unsafe { wl_parallel_chunks(&mut ctx, 1, 1 << 20) }, 1);
        // Never more chunks than outer iterations.
        assert_eq!(unsafe { wl_parallel_chunks(&mut ctx, 3, 1 << 20) }, 3);
        // One thread: one chunk.
        ctx.threads = 1;
        assert_eq!(unsafe { wl_parallel_chunks(&mut ctx, 256, 1 << 20) }, 1);
    }

    /// Records the running thread in the `Mutex<HashSet<ThreadId>>` behind
    /// `env`, taking a while so that every thread free could take a chunk.
    unsafe extern "C" fn who(_: *mut WlCtx, env: *mut c_void, _: i64, _: i64, _: i64) {
        let seen = unsafe { &*(env as *const std::sync::Mutex<std::collections::HashSet<std::thread::ThreadId>>) };
        seen.lock().unwrap().insert(std::thread::current().id());
        std::thread::sleep(std::time::Duration::from_millis(2));
    }

    #[test]
    fn a_job_runs_on_no_more_threads_than_its_context_asks_for() {
        for (grow, ask) in [(6, 2), (6, 1), (4, 3)] {
            // A job of `grow` threads grows the pool to `grow - 1` workers ...
            let mut wide = WlCtx { threads: grow, ..WlCtx::default() };
            let mut out = vec![0i64; 64];
            // (`mark`'s error stays in `wide`, which is not looked at.)
            unsafe { wl_parallel_for(&mut wide, 64, 16, mark, out.as_mut_ptr() as *mut c_void) };
            // ... which a job asking for fewer must not all join.
            let seen = std::sync::Mutex::new(std::collections::HashSet::<std::thread::ThreadId>::new());
            let mut narrow = WlCtx { threads: ask, ..WlCtx::default() };
            unsafe { wl_parallel_for(&mut narrow, 64, 16, who, &seen as *const _ as *mut c_void) };
            let threads = seen.lock().unwrap().len();
            assert!(threads <= ask as usize, "{threads} threads ran a job that asked for {ask}");
        }
    }

    #[test]
    fn workers_asleep_wake_for_a_job_they_run() {
        for ask in [2, 3, 2] {
            // Long enough for every worker to stop spinning and sleep.
            std::thread::sleep(std::time::Duration::from_millis(20));
            let seen = std::sync::Mutex::new(std::collections::HashSet::<std::thread::ThreadId>::new());
            let mut ctx = WlCtx { threads: ask, ..WlCtx::default() };
            // Chunks long enough that a woken worker always gets some.
            unsafe { wl_parallel_for(&mut ctx, 64, 4 * ask as i64, who_slowly, &seen as *const _ as *mut c_void) };
            // Without the wake-up the caller would run every chunk itself (a
            // loaded machine may start a woken worker too late for some of
            // them, not for all).
            let threads = seen.lock().unwrap().len();
            assert!((2..=ask as usize).contains(&threads), "a job of {ask} threads ran on {threads}");
        }
    }

    /// [`who`], taking longer.
    unsafe extern "C" fn who_slowly(ctx: *mut WlCtx, env: *mut c_void, k: i64, lo: i64, hi: i64) {
        unsafe { who(ctx, env, k, lo, hi) };
        std::thread::sleep(std::time::Duration::from_millis(10));
    }

    /// Runs, over its 30 elements of the `i64` buffer behind `env`, a job of
    /// three chunks on its own context (one thread: this one runs them all),
    /// [`mark`]'s (whose chunk 2 fails).
    unsafe extern "C" fn nested(ctx: *mut WlCtx, env: *mut c_void, k: i64, _: i64, _: i64) {
        let out = unsafe { (env as *mut i64).add(30 * k as usize) };
        // Something of this chunk's own in its context, which its inner
        // chunks, set up in contexts of their own, leave alone.
        unsafe { (*ctx).copied = 5 };
        unsafe { wl_parallel_for(ctx, 30, 3, mark, out as *mut c_void) };
        assert_eq!(unsafe { ((*ctx).copied, (*ctx).error) }, (5, 7), "its context, with the inner chunk's error");
    }

    #[test]
    fn a_chunk_that_runs_chunks_itself_keeps_its_context_and_gets_their_error() {
        let mut ctx = WlCtx { threads: 2, ..WlCtx::default() };
        let mut out = vec![0i64; 60];
        unsafe { wl_parallel_for(&mut ctx, 2, 2, nested, out.as_mut_ptr() as *mut c_void) };
        let thirds: Vec<i64> = (0..60).map(|i| (i % 30) / 10 + 1).collect();
        assert_eq!(out, thirds, "each outer chunk's inner chunks marked their thirds");
        assert_eq!(ctx.error, 7, "the inner chunk's error reaches the outer with-loop's caller");
    }

    #[test]
    fn every_chunk_runs_once_in_a_loop_of_jobs() {
        for round in 0..200 {
            job(2 + round % 3, 1000 + round);
        }
    }

    #[test]
    fn jobs_from_several_host_threads_run_side_by_side() {
        // Only one job holds the pool; the others run on scoped threads.
        std::thread::scope(|s| {
            for t in 0..4 {
                s.spawn(move || {
                    for round in 0..50 {
                        job(2 + (t + round) % 3, 500 + round);
                    }
                });
            }
        });
    }
}

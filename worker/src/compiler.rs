//! Compiling through the cache: request → key → memory → (single flight:
//! database → compile on a compile thread → both tiers).
//!
//! Identical requests that arrive while one is compiling join that compile
//! (single flight): the compile runs in its own task, so it finishes and is
//! cached even when every request waiting for it has gone away.

use std::collections::{BTreeMap, HashMap};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use compiler_core::diagnostics::ErrorClass;
use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};
use tokio::sync::Semaphore;

use crate::build::{BuildError, BuildOutput, BuildRequest};
use crate::cache::{ArtifactInfo, Cache, CacheOutcome, CompilationMeta, Compiled};
use crate::failure::{Failure, FailureKind};
use crate::key::content_hash;
use crate::metrics::{Lookup, Metrics};
use crate::request::Prepared;

/// A compile everyone asking for the same key waits on.
type Flight = Shared<BoxFuture<'static, Result<(Arc<Compiled>, CacheOutcome), Failure>>>;

/// Hears each compile phase as it starts (`frontend`, `optimise`, …).
pub type Progress = Arc<dyn Fn(String) + Send + Sync>;

/// The cache, the compile slots and the compiles in flight; cheap to clone.
#[derive(Clone)]
pub struct Compiler {
    pub cache: Cache,
    pub metrics: Arc<Metrics>,
    /// One permit per compilation allowed to run at once.
    slots: Arc<Semaphore>,
    /// Compilations running now, by key and whether they bypass the cache
    /// (single flight).
    inflight: Arc<Mutex<HashMap<(String, bool), Flight>>>,
}

impl std::fmt::Debug for Compiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compiler").field("cache", &self.cache).field("slots", &self.slots).finish_non_exhaustive()
    }
}

impl Compiler {
    /// A compiler over `cache` running at most `max_compiles` compilations at once.
    pub fn new(cache: Cache, metrics: Arc<Metrics>, max_compiles: usize) -> Compiler {
        Compiler {
            cache,
            metrics,
            slots: Arc::new(Semaphore::new(max_compiles.max(1))),
            inflight: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// The compilation for `prepared`: from memory, or through the single flight
    /// (database, then a compile). `bypass`: compile even if cached (the result
    /// replaces the cached one).
    pub async fn compile_cached(
        &self,
        prepared: Prepared,
        bypass: bool,
        progress: Option<Progress>,
    ) -> Result<(Arc<Compiled>, CacheOutcome), Failure> {
        if !bypass && let Some(c) = self.cache.in_memory(&prepared.key).await {
            self.metrics.lookup(Lookup::Memory);
            return Ok((c, CacheOutcome::Memory));
        }
        let flight = {
            let mut inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
            // A bypassing request joins only a bypassing flight: a plain one may
            // still be looking the key up and would answer from the cache.
            let joined = inflight
                .get(&(prepared.key.clone(), bypass))
                .or_else(|| if bypass { None } else { inflight.get(&(prepared.key.clone(), true)) });
            match joined {
                Some(f) => {
                    self.metrics.coalesced_requests.fetch_add(1, Ordering::Relaxed);
                    f.clone()
                }
                None => {
                    let key = (prepared.key.clone(), bypass);
                    let task = tokio::spawn(self.clone().fly(prepared, bypass, progress));
                    let flight: Flight = async move {
                        task.await.unwrap_or_else(|e| Err(Failure::transient(format!("the compile task failed: {e}"))))
                    }
                    .boxed()
                    .shared();
                    inflight.insert(key, flight.clone());
                    flight
                }
            }
        };
        flight.await
    }

    /// The single flight's work; removes itself from the in-flight map when done.
    async fn fly(
        self,
        prepared: Prepared,
        bypass: bool,
        progress: Option<Progress>,
    ) -> Result<(Arc<Compiled>, CacheOutcome), Failure> {
        let key = (prepared.key.clone(), bypass);
        let result = self.lookup_or_compile(prepared, bypass, progress).await;
        self.inflight.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
        result
    }

    async fn lookup_or_compile(
        &self,
        prepared: Prepared,
        bypass: bool,
        progress: Option<Progress>,
    ) -> Result<(Arc<Compiled>, CacheOutcome), Failure> {
        if bypass {
            self.metrics.lookup(Lookup::Miss);
        } else {
            match self.cache.lookup(&prepared.key, &self.metrics).await {
                Ok(Some(hit)) => return Ok(hit),
                Ok(None) => {}
                // The cache is a cache: a database that fails is logged and
                // compiled around.
                Err(e) => tracing::warn!(key = %prepared.key, error = %e, "cache lookup failed; compiling"),
            }
        }
        self.metrics.queue_depth.fetch_add(1, Ordering::Relaxed);
        let permit = self.slots.clone().acquire_owned().await;
        self.metrics.queue_depth.fetch_sub(1, Ordering::Relaxed);
        let permit = permit.map_err(|_| Failure::transient("the server is shutting down"))?;
        self.metrics.compiles_running.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let output = run_build(prepared.build.clone(), progress).await;
        self.metrics.compiles_running.fetch_sub(1, Ordering::Relaxed);
        drop(permit);
        let seconds = started.elapsed().as_secs_f64();
        self.metrics.compiled(seconds, output.is_ok());
        let output = output.map_err(build_error)?;
        let compiled = Arc::new(compiled(&prepared, output, seconds * 1e3));
        if let Err(e) = self.cache.insert(compiled.clone()).await {
            tracing::warn!(key = %prepared.key, error = %e, "storing the compilation in the database failed");
        }
        Ok((compiled, CacheOutcome::Miss))
    }
}

/// What [`warm_up`] compiles: a shape-hinted tensor comprehension that uses
/// the library (`shape`, the `Array` module), so that the front end builds
/// its per-thread cache of the library's function stubs and LLVM sets up its
/// target and pipelines, as a first request would.
const WARM_UP_PROGRAM: &str = "use Array: all;\n\
    double[.] scale(double[.] a) { return { iv -> 2.0 * a[iv] + 1.0 | iv < shape(a) }; }\n";

/// Compiles a small program on `threads` compile threads at once (to an
/// object file, as the compile service's requests do) and returns when all
/// are done: a fresh server's first compile took 70-190 ms where later ones
/// took 50 (the front end's library cache, built per compile thread, LLVM's
/// one-time set-up, the binary's pages). Not counted as a compile in the
/// metrics, and not cached. An error means the compiler cannot compile the
/// program, which is a bug.
pub async fn warm_up(threads: usize) -> Result<(), BuildError> {
    let request = BuildRequest {
        language: crate::build::Language::Sac,
        file_name: "warm_up.sac".into(),
        source: WARM_UP_PROGRAM.into(),
        includes: BTreeMap::new(),
        defines: Vec::new(),
        entries: Vec::new(),
        shapes: vec!["scale.a=double[1000]".into()],
        max_specialisations: None,
        generic: true,
        disabled_passes: Default::default(),
        codegen: withloop_codegen::Options::default(),
        emit: [crate::build::ArtifactKind::Object].into(),
    };
    let builds = (0..threads.max(1)).map(|_| run_build(request.clone(), None));
    for built in futures_util::future::join_all(builds).await {
        built?;
    }
    Ok(())
}

/// [`warm_up`] in the background, for a process starting to serve
/// (`withloop-server`, `withloop-worker`: `who` names it in the message a
/// failed warm-up leaves on standard error).
pub fn warm_up_in_background(threads: usize, who: &'static str) {
    tokio::spawn(async move {
        if let Err(e) = warm_up(threads).await {
            eprintln!("{who}: warming up the compile threads failed (a compiler bug): {e}");
        }
    });
}

/// A compile to run on a compile thread.
type CompileJob = Box<dyn FnOnce() + Send>;

/// The threads compiles run on: started when every one is busy, then kept
/// (they have large stacks for the front end's deep recursion, and the front
/// end keeps per-thread caches — the library's function stubs — that a fresh
/// thread per compile would rebuild every time).
struct CompileThreads {
    jobs: std::sync::Mutex<std::sync::mpsc::Sender<CompileJob>>,
    queue: Arc<std::sync::Mutex<std::sync::mpsc::Receiver<CompileJob>>>,
    idle: Arc<std::sync::atomic::AtomicUsize>,
}

impl CompileThreads {
    fn get() -> &'static CompileThreads {
        static THREADS: std::sync::OnceLock<CompileThreads> = std::sync::OnceLock::new();
        THREADS.get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel();
            CompileThreads {
                jobs: std::sync::Mutex::new(tx),
                queue: Arc::new(std::sync::Mutex::new(rx)),
                idle: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            }
        })
    }

    /// Runs `job` on a compile thread (a new one when none is idle).
    fn run(&self, job: CompileJob) -> std::io::Result<()> {
        use std::sync::atomic::Ordering;
        let claimed = self.idle.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)).is_ok();
        if !claimed {
            let queue = self.queue.clone();
            let idle = self.idle.clone();
            std::thread::Builder::new().name("withloop-compile".into()).stack_size(256 << 20).spawn(move || {
                loop {
                    let next = queue.lock().ok().and_then(|q| q.recv().ok());
                    let Some(job) = next else { return };
                    job();
                    idle.fetch_add(1, Ordering::AcqRel);
                }
            })?;
        }
        self.jobs
            .lock()
            .map_err(|_| std::io::Error::other("the compile threads' queue is poisoned"))?
            .send(job)
            .map_err(|_| std::io::Error::other("the compile threads are gone"))
    }
}

/// Runs the compiler on a compile thread ([`CompileThreads`]: deep recursion
/// in the front end needs a large stack; a panic becomes a compiler-bug error).
async fn run_build(build: BuildRequest, progress: Option<Progress>) -> Result<BuildOutput, BuildError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = CompileThreads::get().run(Box::new(move || {
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let mut report = |phase: crate::Phase| {
                if let Some(progress) = &progress {
                    progress(phase.name());
                }
            };
            crate::build(&build, &mut report)
        }));
        let result = result.unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "no message".to_string());
            Err(BuildError::bug(format!("the compiler panicked: {what}")))
        });
        let _ = tx.send(result);
    }));
    if let Err(e) = spawned {
        return Err(BuildError::bug(format!("cannot start a compile thread: {e}")));
    }
    rx.await.unwrap_or_else(|_| Err(BuildError::bug("the compile thread ended without a result".into())))
}

fn build_error(e: BuildError) -> Failure {
    let (kind, code) = match e.class() {
        ErrorClass::User => (FailureKind::User, "compile_error"),
        ErrorClass::Limitation => (FailureKind::Limitation, "compiler_limitation"),
        ErrorClass::Bug => (FailureKind::Bug, "compiler_bug"),
    };
    Failure::new(kind, code, e.to_string()).with_diagnostics(e.diagnostics)
}

fn compiled(prepared: &Prepared, output: BuildOutput, compile_ms: f64) -> Compiled {
    let mut bytes = BTreeMap::new();
    let mut artifacts = Vec::new();
    for (kind, data) in output.artifacts {
        artifacts.push(ArtifactInfo {
            kind,
            content_hash: content_hash(&data),
            size: data.len() as u64,
            content_type: kind.content_type().to_string(),
        });
        bytes.insert(kind, Bytes::from(data));
    }
    let created_unix_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    Compiled::new(
        CompilationMeta {
            key: prepared.key.clone(),
            components: prepared.components.clone(),
            created_unix_ms,
            compile_ms,
            phases: output.phases,
            diagnostics: output.diagnostics,
            variants: output.variants,
            report: output.report,
            artifacts,
            request: Some(prepared.request.clone()),
        },
        bytes,
    )
}

#[cfg(test)]
mod tests {
    /// The warm-up program compiles on two threads at once: a server whose
    /// warm-up failed would only log it.
    #[tokio::test]
    async fn the_warm_up_compiles_on_every_thread() {
        super::warm_up(2).await.expect("the warm-up program compiles");
    }
}

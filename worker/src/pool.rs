//! A worker serving the Postgres queue: the loop of every `withloop-worker`
//! process and of the pool a server with a database embeds.
//!
//! It registers itself, then repeatedly takes the next job it can run (up to
//! `concurrency` at once; expired leases are reaped twice per lease period), waking on `NOTIFY
//! withloop_jobs` or, as a fallback, every `poll` interval. A heartbeat task
//! renews the worker's row and the leases of its jobs every third of a lease.
//! Compile jobs go through the same cache as everything else, so a job that
//! runs again after its worker died is a cache hit when the first run got as
//! far as storing its result.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::postgres::PgListener;
use tokio::sync::{Semaphore, mpsc, watch};

use crate::cache::CacheOutcome;
use crate::compiler::{Compiler, Progress};
use crate::failure::{Failure, FailureKind};
use crate::jobs::{JobSpec, JobStatus, WorkerView};
use crate::queue::{CANCEL_CHANNEL, JOBS_CHANNEL, Leased, PgQueue};
use crate::request::{CompileResponse, prepare};
use crate::run::{run_sandboxed, runner};

/// Cancellation signals of the run jobs this worker holds, by job id.
type Cancels = Arc<Mutex<HashMap<String, watch::Sender<bool>>>>;

/// How a worker runs.
#[derive(Clone, Debug)]
pub struct PoolOptions {
    /// Unique among the queue's workers (`host-pid-…`).
    pub id: String,
    pub capabilities: Vec<String>,
    /// Jobs run at once.
    pub concurrency: usize,
    /// Polling interval when no notification arrives.
    pub poll: Duration,
    /// Fault injection for tests: wait this long after leasing a job before
    /// running it (so a test can kill the worker while it holds the job).
    pub hold: Duration,
    /// The binary sandboxed runs use (default: see [`crate::run::runner`]).
    pub runner: Option<PathBuf>,
}

impl PoolOptions {
    /// Defaults: `cpu`, one job per core, polling every second.
    pub fn new(id: String) -> PoolOptions {
        PoolOptions {
            id,
            capabilities: vec!["cpu".to_string()],
            concurrency: std::thread::available_parallelism().map_or(2, |n| n.get()),
            poll: Duration::from_secs(1),
            hold: Duration::ZERO,
            runner: None,
        }
    }
}

/// A worker id: host, process and a random suffix.
pub fn worker_id() -> String {
    let host = hostname();
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}-{}", std::process::id(), &suffix[..8])
}

fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// Serves the queue until `shutdown` turns true; then finishes the jobs it
/// holds and deregisters.
pub async fn serve(
    queue: PgQueue,
    compiler: Compiler,
    options: PoolOptions,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), sqlx::Error> {
    let me = WorkerView {
        id: options.id.clone(),
        host: hostname(),
        pid: std::process::id(),
        capabilities: options.capabilities.clone(),
        concurrency: options.concurrency as u32,
        last_heartbeat_ms: 0.0,
        jobs_done: 0,
        running: Vec::new(),
    };
    queue.register(&me).await?;
    let mut listener = PgListener::connect_with(queue.pool()).await?;
    listener.listen(JOBS_CHANNEL).await?;
    let mut cancel_listener = PgListener::connect_with(queue.pool()).await?;
    cancel_listener.listen(CANCEL_CHANNEL).await?;
    let held: Held = Arc::default();
    let slots = Arc::new(Semaphore::new(options.concurrency.max(1)));
    let cancels: Cancels = Arc::default();
    let heartbeat = tokio::spawn(heartbeats(queue.clone(), options.id.clone(), held.clone(), cancels.clone()));
    // Cancellations are heard even while every slot is busy. A listener
    // whose reconnect fails returns an error; it is asked again (it
    // reconnects then) after a growing wait, for as long as the worker serves.
    let canceller = {
        let (cancels, poll) = (cancels.clone(), options.poll);
        tokio::spawn(async move {
            let mut failures = 0u32;
            loop {
                match cancel_listener.recv().await {
                    Ok(n) => {
                        failures = 0;
                        signal(&cancels, n.payload());
                    }
                    Err(e) => {
                        failures = failures.saturating_add(1);
                        tracing::warn!(error = %e, failures, "the cancellation listener lost the database");
                        tokio::time::sleep(backoff(poll, failures)).await;
                    }
                }
            }
        })
    };
    tracing::info!(worker = %options.id, concurrency = options.concurrency, "serving the job queue");
    let mut last_reap = std::time::Instant::now() - queue.lease;
    // Dequeues that failed in a row: the wait before the next grows (the
    // database is down; the listener fails at once then, and the loop spun).
    let mut failures = 0u32;
    while !*shutdown.borrow() {
        let Ok(permit) = slots.clone().acquire_owned().await else { break };
        // A slot may free up after the shutdown began: no new job then.
        if *shutdown.borrow() {
            break;
        }
        // Expired leases are looked for twice a lease, not before every job.
        if last_reap.elapsed() >= queue.lease / 2 {
            last_reap = std::time::Instant::now();
            if let Err(e) = queue.reap().await {
                tracing::warn!(error = %e, "reaping expired leases failed");
            }
        }
        match queue.dequeue(&options.id, &options.capabilities).await {
            Ok(Some(job)) => {
                failures = 0;
                let holding = Holding::new(&held, &job.id);
                let (queue, compiler, worker, hold, runner, cancels) = (
                    queue.clone(),
                    compiler.clone(),
                    options.id.clone(),
                    options.hold,
                    options.runner.clone(),
                    cancels.clone(),
                );
                tokio::spawn(async move {
                    if !hold.is_zero() {
                        tokio::time::sleep(hold).await;
                    }
                    execute(&queue, &compiler, &worker, runner, &cancels, job).await;
                    drop(holding);
                    drop(permit);
                });
                continue;
            }
            Ok(None) => {
                failures = 0;
                drop(permit);
            }
            Err(e) => {
                drop(permit);
                failures = failures.saturating_add(1);
                tracing::warn!(error = %e, failures, "taking a job failed");
                tokio::select! {
                    () = tokio::time::sleep(backoff(options.poll, failures)) => {}
                    _ = shutdown.changed() => {}
                }
                continue;
            }
        }
        tokio::select! {
            heard = listener.recv() => {
                // A listener that cannot reconnect fails at once: wait a poll instead.
                if heard.is_err() {
                    tokio::select! {
                        () = tokio::time::sleep(options.poll) => {}
                        _ = shutdown.changed() => {}
                    }
                }
            }
            () = tokio::time::sleep(options.poll) => {}
            _ = shutdown.changed() => {}
        }
    }
    // Let the running jobs finish (their leases stay renewed meanwhile).
    let _ = slots.acquire_many(options.concurrency.max(1) as u32).await;
    heartbeat.abort();
    canceller.abort();
    queue.deregister(&options.id).await?;
    Ok(())
}

/// The ids of the jobs this worker is running.
type Held = Arc<std::sync::Mutex<std::collections::HashSet<String>>>;

/// Keeps a job in [`Held`] while its task lives (also if it panics).
struct Holding {
    held: Held,
    id: String,
}

impl Holding {
    fn new(held: &Held, id: &str) -> Holding {
        held.lock().unwrap_or_else(|p| p.into_inner()).insert(id.to_string());
        Holding { held: held.clone(), id: id.to_string() }
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.id);
    }
}

async fn heartbeats(queue: PgQueue, worker: String, held: Held, cancels: Cancels) {
    let every = (queue.lease / 3).max(Duration::from_millis(100));
    loop {
        tokio::time::sleep(every).await;
        let ids: Vec<String> = held.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect();
        match queue.worker_heartbeat(&worker, &ids).await {
            Ok(lost) => {
                for id in lost {
                    signal(&cancels, &id);
                }
            }
            Err(e) => tracing::warn!(error = %e, "heartbeat failed"),
        }
    }
}

/// Stops the run of job `id`, if this worker runs it.
fn signal(cancels: &Cancels, id: &str) {
    if let Some(stop) = cancels.lock().unwrap_or_else(|p| p.into_inner()).get(id) {
        let _ = stop.send(true);
    }
}

/// The wait after `failures` database errors in a row: doubling from `poll`,
/// at most 10 s.
fn backoff(poll: Duration, failures: u32) -> Duration {
    poll.saturating_mul(1 << failures.min(4)).min(Duration::from_secs(10))
}

/// Runs one leased job and records its outcome.
async fn execute(
    queue: &PgQueue,
    compiler: &Compiler,
    worker: &str,
    runner_path: Option<PathBuf>,
    cancels: &Cancels,
    job: Leased,
) {
    let outcome = match job.spec {
        JobSpec::Run { request, key } => {
            let (signal, cancelled) = watch::channel(false);
            cancels.lock().unwrap_or_else(|p| p.into_inner()).insert(job.id.clone(), signal);
            let _ = queue.progress(&job.id, worker, "run").await;
            let result = match runner(runner_path.as_deref()) {
                Ok(path) => run_sandboxed(&path, &key, &request, cancelled).await,
                Err(f) => Err(f),
            };
            cancels.lock().unwrap_or_else(|p| p.into_inner()).remove(&job.id);
            result.map(|r| serde_json::to_value(r).unwrap_or_default())
        }
        JobSpec::Compile { request, bypass_cache } => match prepare(&request) {
            Err(f) => Err(f),
            Ok(prepared) => {
                // Progress events are written in order by one task.
                let (tx, mut rx) = mpsc::unbounded_channel::<String>();
                let writer = {
                    let (queue, id, worker) = (queue.clone(), job.id.clone(), worker.to_string());
                    tokio::spawn(async move {
                        while let Some(phase) = rx.recv().await {
                            let _ = queue.progress(&id, &worker, &phase).await;
                        }
                    })
                };
                let progress: Progress = Arc::new(move |phase| {
                    let _ = tx.send(phase);
                });
                let mut result = compiler.compile_cached(prepared, bypass_cache, Some(progress)).await;
                let _ = writer.await;
                if let Ok((compiled, CacheOutcome::Memory)) = &result
                    && let Err(e) = compiler.cache.ensure_stored(compiled).await
                {
                    result = Err(Failure::transient(format!("storing the compilation failed: {e}")));
                }
                result.map(|(compiled, outcome)| {
                    serde_json::to_value(CompileResponse::of(&compiled, outcome)).unwrap_or_default()
                })
            }
        },
    };
    let mut recorded = match outcome {
        Ok(result) => queue.finish(&job.id, worker, JobStatus::Done, Some(&result), None).await,
        Err(f) if f.kind == FailureKind::Transient => queue.retry(&job.id, worker, &f.body).await.map(|s| s.is_some()),
        Err(f) => queue.finish(&job.id, worker, JobStatus::Failed, None, Some(&f.body)).await,
    };
    // An outcome the database does not take (Postgres' `jsonb` refuses the
    // NUL character a program may print) fails the job with a body that it
    // does take, rather than leaving it `running`. Where even that fails (the
    // database is gone), the lease runs out: the job is no longer held.
    if let Err(e) = &recorded {
        tracing::warn!(job = %job.id, error = %e, "recording the job's outcome failed; failing the job");
        let failed = Failure::new(FailureKind::Bug, "internal", format!("the job's outcome could not be stored: {e}"));
        recorded = queue.finish(&job.id, worker, JobStatus::Failed, None, Some(&failed.body)).await;
    }
    match recorded {
        Ok(true) => {}
        Ok(false) => {
            tracing::warn!(job = %job.id, "the job's lease was lost (cancelled or taken over); outcome dropped")
        }
        Err(e) => tracing::warn!(job = %job.id, error = %e, "recording the job's outcome failed"),
    }
}

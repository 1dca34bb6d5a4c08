//! `withloop-worker`: serves the Postgres job queue.
//!
//! Run any number of these, on any machines, against the database the servers
//! use (`DATABASE_URL`); each takes jobs with `FOR UPDATE SKIP LOCKED`, so they
//! share the work without coordination. See the README, "Scaling out".

use std::time::Duration;

use clap::Parser;
use withloop_worker::cache::{Cache, MemoryLimits};
use withloop_worker::compiler::Compiler;
use withloop_worker::metrics::Metrics;
use withloop_worker::pool::{self, PoolOptions};
use withloop_worker::queue::PgQueue;
use withloop_worker::store::Store;

/// A withloop worker: takes compile jobs from the Postgres queue.
#[derive(Debug, Parser)]
#[command(name = "withloop-worker", version)]
struct Args {
    /// The Postgres the servers use (jobs and the cache's database tier).
    #[arg(long, env = "DATABASE_URL")]
    database_url: String,
    /// Jobs run at once (default: one per core).
    #[arg(long, env = "WITHLOOP_WORKER_CONCURRENCY")]
    concurrency: Option<usize>,
    /// Capabilities this worker offers, comma-separated.
    #[arg(long, env = "WITHLOOP_WORKER_CAPABILITIES", default_value = "cpu")]
    capabilities: String,
    /// Seconds a job's lease lasts without a heartbeat (a dead worker's jobs
    /// go back to the queue after this long).
    #[arg(long, env = "WITHLOOP_LEASE_SECS", default_value_t = 15.0)]
    lease_secs: f64,
    /// Milliseconds between polls when no notification arrives.
    #[arg(long, env = "WITHLOOP_POLL_MS", default_value_t = 1000)]
    poll_ms: u64,
    /// Worker id (default: host-pid-random).
    #[arg(long)]
    id: Option<String>,
    /// Size bound of this worker's in-memory cache tier, in MiB.
    #[arg(long, env = "WITHLOOP_MEMORY_CACHE_MB", default_value_t = 128)]
    memory_cache_mb: u64,
    /// Size cap of the database tier, in MiB.
    #[arg(long, env = "WITHLOOP_DB_CACHE_MB", default_value_t = 4096)]
    db_cache_mb: u64,
    /// Fault injection for tests: milliseconds to wait after leasing a job.
    #[arg(long, hide = true, default_value_t = 0)]
    hold_ms: u64,
}

fn main() -> std::process::ExitCode {
    // A sandboxed run of a program (see `withloop_worker::run`).
    if std::env::args().nth(1).as_deref() == Some("--exec-run") {
        return withloop_worker::run::child_main();
    }
    let args = Args::parse();
    withloop_worker::process::run_main(run(args))
}

async fn run(args: Args) -> Result<(), String> {
    let store = Store::connect(&args.database_url, args.db_cache_mb.saturating_mul(1 << 20))
        .await
        .map_err(|e| format!("cannot use the database at DATABASE_URL: {e}"))?;
    let lease = Duration::from_secs_f64(args.lease_secs.max(0.2));
    let queue = PgQueue::new(store.pool().clone(), lease);
    let limits = MemoryLimits {
        max_bytes: args.memory_cache_mb.saturating_mul(1 << 20),
        time_to_live: Duration::from_secs(3600),
    };
    let mut options = PoolOptions::new(args.id.unwrap_or_else(pool::worker_id));
    if let Some(n) = args.concurrency {
        options.concurrency = n.max(1);
    }
    options.capabilities =
        args.capabilities.split(',').map(|c| c.trim().to_string()).filter(|c| !c.is_empty()).collect();
    options.poll = Duration::from_millis(args.poll_ms.max(10));
    options.hold = Duration::from_millis(args.hold_ms);
    let compiler =
        Compiler::new(Cache::new(limits, Some(store)), std::sync::Arc::new(Metrics::default()), options.concurrency);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        withloop_worker::process::shutdown_signal().await;
        let _ = stop.send(true);
    });
    // The first line on standard error names the worker (tests read it).
    eprintln!(
        "withloop-worker {} serving the job queue (concurrency {}, capabilities {})",
        options.id,
        options.concurrency,
        options.capabilities.join(",")
    );
    // The first jobs find the compile threads started (see `warm_up`).
    withloop_worker::compiler::warm_up_in_background(options.concurrency, "withloop-worker");
    pool::serve(queue, compiler, options, stopped).await.map_err(|e| format!("the job queue failed: {e}"))
}

/// The compiler's allocator (see cli/src/main.rs): mimalloc, LLVM's
/// allocations included.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

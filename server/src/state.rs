//! What every handler shares.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use withloop_worker::cache::{Cache, MemoryLimits};
use withloop_worker::compiler::Compiler;
use withloop_worker::metrics::Metrics;
use withloop_worker::pool::{self, PoolOptions};
use withloop_worker::queue::PgQueue;
use withloop_worker::store::Store;

use crate::auth::RateLimiter;
use crate::config::Config;
use crate::jobs::Jobs;

/// The server's state: one reference count to clone (axum clones the state
/// for every extractor and middleware of every request; cloning each field's
/// `Arc`s, the moka cache's among them, was 8% of a cache hit's CPU under
/// load). Its fields are [`Shared`]'s.
#[derive(Clone, Debug)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What every handler shares, behind [`AppState`].
#[derive(Debug)]
pub struct Shared {
    pub config: Arc<Config>,
    /// Compiling through the cache (owns `cache` and `metrics` too).
    pub compiler: Compiler,
    pub cache: Cache,
    pub metrics: Arc<Metrics>,
    /// The embedded server's in-process jobs.
    pub jobs: Arc<Jobs>,
    /// The Postgres job queue (with a database; then async jobs go there).
    pub queue: Option<PgQueue>,
    /// Token → team.
    pub tokens: Arc<HashMap<String, String>>,
    pub limiter: Arc<RateLimiter>,
    /// One permit per program this server runs at once (`--max-runs`).
    pub runs: Arc<tokio::sync::Semaphore>,
    /// Turns true when the server begins to shut down: event streams end
    /// (clients resume elsewhere with `Last-Event-ID`) and the workers take
    /// no new jobs, so that the HTTP drain does not wait on them.
    pub shutdown: tokio::sync::watch::Sender<bool>,
    pub started: Instant,
}

impl AppState {
    /// State over an optional database tier.
    pub fn new(config: Config, store: Option<Store>) -> Result<AppState, String> {
        let tokens = config.token_map()?;
        let limits = MemoryLimits {
            max_bytes: config.memory_cache_mb.saturating_mul(1 << 20),
            time_to_live: std::time::Duration::from_secs(config.memory_cache_ttl_secs.max(1)),
        };
        let lease = std::time::Duration::from_secs_f64(config.lease_secs.max(0.2));
        let queue = store.as_ref().map(|s| PgQueue::new(s.pool().clone(), lease));
        let cache = Cache::new(limits, store);
        let metrics = Arc::new(Metrics::default());
        Ok(AppState(Arc::new(Shared {
            compiler: Compiler::new(cache.clone(), metrics.clone(), config.max_compiles()),
            cache,
            metrics,
            jobs: Arc::new(Jobs::default()),
            queue,
            tokens: Arc::new(tokens),
            limiter: Arc::new(RateLimiter::new(config.rate_limit_per_minute)),
            runs: Arc::new(tokio::sync::Semaphore::new(config.max_runs())),
            shutdown: tokio::sync::watch::Sender::new(false),
            started: Instant::now(),
            config: Arc::new(config),
        })))
    }

    /// State for `config`: connects to `DATABASE_URL` (and migrates) when set,
    /// else embedded.
    pub async fn connect(config: Config) -> Result<AppState, String> {
        let store = match &config.database_url {
            Some(url) => Some(
                Store::connect(url, config.db_cache_mb.saturating_mul(1 << 20))
                    .await
                    .map_err(|e| format!("cannot use the database at DATABASE_URL: {e}"))?,
            ),
            None => None,
        };
        AppState::new(config, store)
    }

    /// Starts this server's own workers on the Postgres queue (`--workers`,
    /// default one per core); `None` when embedded or with `--workers 0`.
    pub fn spawn_workers(&self) -> Option<Workers> {
        let queue = self.queue.clone()?;
        let n = self.config.workers.unwrap_or_else(|| self.config.max_compiles());
        if n == 0 {
            return None;
        }
        let mut options = PoolOptions::new(pool::worker_id());
        options.concurrency = n;
        options.runner = self.config.runner.clone();
        let stopped = self.shutdown.subscribe();
        let compiler = self.compiler.clone();
        let task = tokio::spawn(async move {
            if let Err(e) = pool::serve(queue, compiler, options, stopped).await {
                tracing::error!(error = %e, "the server's workers stopped");
            }
        });
        Some(Workers { state: self.clone(), task })
    }

    /// Begins the shutdown (see [`Shared::shutdown`]).
    pub fn begin_shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// Resolves once the shutdown has begun.
    pub fn shutting_down(&self) -> impl std::future::Future<Output = ()> + Send + use<> {
        let mut begun = self.shutdown.subscribe();
        async move {
            let _ = begun.wait_for(|b| *b).await;
        }
    }

    /// Whether this server runs without a database.
    pub fn embedded(&self) -> bool {
        self.cache.store().is_none()
    }
}

/// The workers a server runs on the Postgres queue.
#[derive(Debug)]
pub struct Workers {
    state: AppState,
    task: tokio::task::JoinHandle<()>,
}

impl Workers {
    /// Stops taking jobs (the server's shutdown begins, if it has not),
    /// finishes the running ones and deregisters.
    pub async fn stop(self) {
        self.state.begin_shutdown();
        let _ = self.task.await;
    }
}

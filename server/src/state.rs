//! What every handler shares.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use withloop_worker::cache::{Cache, MemoryLimits};
use withloop_worker::compiler::Compiler;
use withloop_worker::metrics::Metrics;
use withloop_worker::store::Store;

use crate::auth::RateLimiter;
use crate::config::Config;
use crate::jobs::Jobs;

/// The server's state; cheap to clone.
#[derive(Clone, Debug)]
pub struct AppState {
    pub config: Arc<Config>,
    /// Compiling through the cache (owns `cache` and `metrics` too).
    pub compiler: Compiler,
    pub cache: Cache,
    pub metrics: Arc<Metrics>,
    pub jobs: Arc<Jobs>,
    /// Token → team.
    pub tokens: Arc<HashMap<String, String>>,
    pub limiter: Arc<RateLimiter>,
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
        let cache = Cache::new(limits, store);
        let metrics = Arc::new(Metrics::default());
        Ok(AppState {
            compiler: Compiler::new(cache.clone(), metrics.clone(), config.max_compiles()),
            cache,
            metrics,
            jobs: Arc::new(Jobs::default()),
            tokens: Arc::new(tokens),
            limiter: Arc::new(RateLimiter::new(config.rate_limit_per_minute)),
            started: Instant::now(),
            config: Arc::new(config),
        })
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

    /// Whether this server runs without a database.
    pub fn embedded(&self) -> bool {
        self.cache.store().is_none()
    }
}

//! What every handler shares.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::Semaphore;

use crate::auth::RateLimiter;
use crate::cache::{Cache, MemoryLimits};
use crate::config::Config;
use crate::jobs::Jobs;
use crate::metrics::Metrics;
use crate::service::Flight;
use crate::store::Store;

/// The server's state; cheap to clone.
#[derive(Clone, Debug)]
pub struct AppState {
    pub config: Arc<Config>,
    pub cache: Cache,
    pub metrics: Arc<Metrics>,
    pub jobs: Arc<Jobs>,
    /// One permit per compilation allowed to run at once.
    pub compile_slots: Arc<Semaphore>,
    /// Compilations running now, by key (single flight).
    pub(crate) inflight: Arc<Mutex<HashMap<String, Flight>>>,
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
        Ok(AppState {
            cache: Cache::new(limits, store),
            metrics: Arc::new(Metrics::default()),
            jobs: Arc::new(Jobs::default()),
            compile_slots: Arc::new(Semaphore::new(config.max_compiles())),
            inflight: Arc::new(Mutex::new(HashMap::new())),
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

//! The server's settings, from flags or environment variables.

use std::collections::HashMap;
use std::time::Duration;

use clap::Parser;
use withloop_worker::run::RunLimits;

/// withloop's compile service.
///
/// Without `DATABASE_URL` it runs embedded: an in-memory cache and in-process
/// compiles, nothing else needed. With it, compilations are also cached in
/// Postgres (migrations applied at start-up).
#[derive(Clone, Debug, Parser)]
#[command(name = "withloop-server", version)]
pub struct Config {
    /// Address to listen on.
    #[arg(long, env = "WITHLOOP_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: String,

    /// Postgres connection URL for the database tier of the cache.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: Option<String>,

    /// Size bound of the in-memory cache, in MiB.
    #[arg(long, env = "WITHLOOP_MEMORY_CACHE_MB", default_value_t = 512)]
    pub memory_cache_mb: u64,

    /// Seconds a compilation stays in the in-memory cache.
    #[arg(long, env = "WITHLOOP_MEMORY_CACHE_TTL", default_value_t = 3600)]
    pub memory_cache_ttl_secs: u64,

    /// Size cap of the database tier, in MiB (least recently used go first).
    #[arg(long, env = "WITHLOOP_DB_CACHE_MB", default_value_t = 4096)]
    pub db_cache_mb: u64,

    /// Largest request body accepted, in KiB.
    #[arg(long, env = "WITHLOOP_MAX_BODY_KB", default_value_t = 2048)]
    pub max_body_kb: usize,

    /// Seconds a request may take before it is answered with 504 (long
    /// compiles: use `?async=true`).
    #[arg(long, env = "WITHLOOP_REQUEST_TIMEOUT", default_value_t = 120)]
    pub request_timeout_secs: u64,

    /// Compilations running at once (default: one per core).
    #[arg(long, env = "WITHLOOP_MAX_COMPILES")]
    pub max_compiles: Option<usize>,

    /// Origins allowed by CORS, comma-separated; `*` allows any. Default: none.
    #[arg(long, env = "WITHLOOP_CORS_ORIGINS", default_value = "")]
    pub cors_origins: String,

    /// API tokens, `TEAM:TOKEN` comma-separated. When set, `/v1` requires
    /// `Authorization: Bearer TOKEN`; when not, requests are anonymous.
    #[arg(long, env = "WITHLOOP_TOKENS", default_value = "")]
    pub tokens: String,

    /// Token that may purge cache entries. Without tokens and without an admin
    /// token (the embedded default), anyone may.
    #[arg(long, env = "WITHLOOP_ADMIN_TOKEN")]
    pub admin_token: Option<String>,

    /// Requests per minute per team (anonymous requests share one budget); 0: unlimited.
    #[arg(long, env = "WITHLOOP_RATE_LIMIT", default_value_t = 0)]
    pub rate_limit_per_minute: u32,

    /// Jobs this server runs itself from the Postgres queue (with a database);
    /// 0 leaves them to `withloop-worker` processes. Default: one per core.
    #[arg(long, env = "WITHLOOP_WORKERS")]
    pub workers: Option<usize>,

    /// Seconds a job's lease lasts without a heartbeat.
    #[arg(long, env = "WITHLOOP_LEASE_SECS", default_value_t = 15.0)]
    pub lease_secs: f64,

    /// Programs this server runs at once in sandboxed children (synchronous
    /// runs, and asynchronous ones when embedded; with a database those are
    /// bounded by the workers). Default: one per core.
    #[arg(long, env = "WITHLOOP_MAX_RUNS")]
    pub max_runs: Option<usize>,

    /// The largest limits a run may ask for (its `limits`): wall-clock and
    /// CPU time in ms, address space in MiB, output in KiB.
    #[arg(long, env = "WITHLOOP_MAX_RUN_WALL_MS", default_value_t = 600_000)]
    pub max_run_wall_ms: u64,
    #[arg(long, env = "WITHLOOP_MAX_RUN_CPU_MS", default_value_t = 600_000)]
    pub max_run_cpu_ms: u64,
    #[arg(long, env = "WITHLOOP_MAX_RUN_MEMORY_MB", default_value_t = 16_384)]
    pub max_run_memory_mb: u64,
    #[arg(long, env = "WITHLOOP_MAX_RUN_OUTPUT_KB", default_value_t = 65_536)]
    pub max_run_output_kb: u64,

    /// The binary that runs programs in sandboxed child processes (default:
    /// this one).
    #[arg(long, env = "WITHLOOP_RUNNER")]
    pub runner: Option<std::path::PathBuf>,

    /// Print the OpenAPI document and exit.
    #[arg(long)]
    pub print_openapi: bool,
}

impl Config {
    /// A configuration from flags only (no environment), for tests.
    pub fn embedded() -> Config {
        Config {
            listen: "127.0.0.1:0".into(),
            database_url: None,
            memory_cache_mb: 512,
            memory_cache_ttl_secs: 3600,
            db_cache_mb: 4096,
            max_body_kb: 2048,
            request_timeout_secs: 120,
            max_compiles: None,
            cors_origins: String::new(),
            tokens: String::new(),
            admin_token: None,
            rate_limit_per_minute: 0,
            workers: None,
            lease_secs: 15.0,
            max_runs: None,
            max_run_wall_ms: 600_000,
            max_run_cpu_ms: 600_000,
            max_run_memory_mb: 16_384,
            max_run_output_kb: 65_536,
            runner: None,
            print_openapi: false,
        }
    }

    /// Token → team.
    pub fn token_map(&self) -> Result<HashMap<String, String>, String> {
        let mut map = HashMap::new();
        for item in self.tokens.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (team, token) =
                item.split_once(':').ok_or_else(|| format!("WITHLOOP_TOKENS: `{item}` is not TEAM:TOKEN"))?;
            if team.is_empty() || token.is_empty() {
                return Err(format!("WITHLOOP_TOKENS: `{item}` has an empty team or token"));
            }
            map.insert(token.to_string(), team.to_string());
        }
        Ok(map)
    }

    pub fn max_compiles(&self) -> usize {
        self.max_compiles.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())).max(1)
    }

    pub fn max_runs(&self) -> usize {
        self.max_runs.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())).max(1)
    }

    /// The largest limits a run may ask for.
    pub fn max_run_limits(&self) -> RunLimits {
        RunLimits {
            wall_ms: self.max_run_wall_ms,
            cpu_ms: self.max_run_cpu_ms,
            memory_mb: self.max_run_memory_mb,
            output_kb: self.max_run_output_kb,
        }
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs(self.request_timeout_secs.max(1))
    }
}

//! withloop's workers: everything that turns a compile request into cached
//! artifacts, shared by the server (which runs it in-process) and the
//! `withloop-worker` processes that serve the Postgres job queue.
//!
//! * [`build`] — one compile, source text in memory → artifacts (synchronous).
//! * [`request`] — the compile request, its validation and cache key ([`key`]).
//! * [`cache`] (moka) and [`store`] (Postgres) — the two cache tiers.
//! * [`compiler`] — compiling through the cache: single flight per key,
//!   compile threads bounded by a semaphore.
//! * [`jobs`], [`queue`] and [`pool`] — jobs, the Postgres job queue and the
//!   worker loop serving it (the `withloop-worker` binary, and the pool a
//!   server with a database embeds).
//! * [`failure`] — the error form the API and jobs share; [`metrics`].

pub mod build;
pub mod cache;
pub mod compiler;
pub mod failure;
pub mod jobs;
pub mod key;
pub mod metrics;
pub mod npy;
pub mod pool;
pub mod process;
pub mod queue;
pub mod request;
pub mod run;
pub mod store;
pub mod testing;

pub use build::{ArtifactKind, BuildError, BuildOutput, BuildRequest, Language, Phase, build};

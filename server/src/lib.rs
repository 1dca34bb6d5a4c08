//! withloop's compile service (see `ARCHITECTURE.md`, "The service").
//!
//! [`app`] builds the router over an [`AppState`]; the `withloop-server` binary
//! serves it. Compiles go through [`withloop_worker::compiler::Compiler`]: the
//! two-tier cache, a single flight per key, compile threads.

pub mod api;
pub mod auth;
pub mod config;
pub mod error;
pub mod jobs;
pub mod state;

pub use config::Config;
pub use state::AppState;

/// The service's router.
pub fn app(state: AppState) -> axum::Router {
    api::router(state)
}

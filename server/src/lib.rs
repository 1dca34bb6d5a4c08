//! withloop's compile service (see `ARCHITECTURE.md`, "The service").
//!
//! [`app`] builds the router over an [`AppState`]; the `withloop-server` binary
//! serves it. Compiles go through the two-tier [`cache`] and the single flight
//! in [`service`]; the compiler itself runs on compile threads
//! ([`withloop_worker::build`]).

pub mod api;
pub mod auth;
pub mod cache;
pub mod config;
pub mod error;
pub mod jobs;
pub mod key;
pub mod metrics;
pub mod service;
pub mod state;
pub mod store;

pub use config::Config;
pub use state::AppState;

/// The service's router.
pub fn app(state: AppState) -> axum::Router {
    api::router(state)
}

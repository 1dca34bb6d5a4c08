//! What the `withloop-server` and `withloop-worker` binaries share as processes:
//! logging to standard error (`RUST_LOG`, default `info`), the async runtime,
//! the exit status, and the shutdown signals (SIGINT, SIGTERM).

use std::future::Future;
use std::process::ExitCode;

use tracing_subscriber::EnvFilter;

/// Sets up logging, runs `main` to completion on a multi-threaded runtime and
/// turns its outcome into the exit status (an error is printed first).
pub fn run_main<F>(main: F) -> ExitCode
where
    F: Future<Output = Result<(), String>>,
{
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")))
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(main) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}

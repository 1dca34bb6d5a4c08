//! `withloop-server`: serves the compile API.

use clap::Parser;
use withloop_server::{AppState, Config};

fn main() -> std::process::ExitCode {
    // A sandboxed run of a program (see `withloop_worker::run`).
    if std::env::args().nth(1).as_deref() == Some("--exec-run") {
        return withloop_worker::run::child_main();
    }
    let config = Config::parse();
    if config.print_openapi {
        use std::io::Write;
        let written = std::io::stdout().write_all(withloop_server::api::openapi_json().as_bytes());
        return if written.is_ok() { std::process::ExitCode::SUCCESS } else { std::process::ExitCode::FAILURE };
    }
    withloop_worker::process::run_main(serve(config))
}

async fn serve(config: Config) -> Result<(), String> {
    let listen = config.listen.clone();
    let state = AppState::connect(config).await?;
    let listener =
        tokio::net::TcpListener::bind(&listen).await.map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    let mode = if state.embedded() {
        "embedded: in-memory cache, in-process compiles (set DATABASE_URL for the Postgres tier)"
    } else {
        "database: in-memory cache backed by Postgres"
    };
    // The first line on standard error names the address (tests and scripts read it).
    eprintln!("withloop-server listening on http://{address} ({mode}); API docs at http://{address}/docs");
    let workers = state.spawn_workers();
    // The first requests find the compile threads started (see `warm_up`).
    withloop_worker::compiler::warm_up_in_background(state.config.max_compiles(), "withloop-server");
    let signalled = {
        let state = state.clone();
        async move {
            withloop_worker::process::shutdown_signal().await;
            // Before the drain: event streams end, workers take no new job.
            state.begin_shutdown();
        }
    };
    let served = axum::serve(listener, withloop_server::app(state))
        .with_graceful_shutdown(signalled)
        .await
        .map_err(|e| format!("serving: {e}"));
    if let Some(w) = workers {
        w.stop().await;
    }
    served
}

/// The compiler's allocator (see cli/src/main.rs): mimalloc, LLVM's
/// allocations included.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

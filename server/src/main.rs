//! `withloop-server`: serves the compile API.

use clap::Parser;
use tracing_subscriber::EnvFilter;
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
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")))
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(config)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
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
    let served = axum::serve(listener, withloop_server::app(state))
        .with_graceful_shutdown(shutdown())
        .await
        .map_err(|e| format!("serving: {e}"));
    if let Some(w) = workers {
        w.stop().await;
    }
    served
}

async fn shutdown() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}

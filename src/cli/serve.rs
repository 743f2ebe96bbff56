//! `sluice serve`: the HTTP server.

use std::io::IsTerminal;

use sluice::config::ServeArgs;

fn init_logs(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    if format == "json" {
        fmt.json()
            .with_current_span(true)
            .with_span_list(false)
            .init();
    } else {
        fmt.init();
    }
}

/// Runs the server until Ctrl-C or SIGTERM.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let config = args.config()?;
    init_logs(&config.log_format);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let addr = config.http.address.clone();
        let listener = sluice::http::conn::bind(&addr)
            .await
            .map_err(|e| anyhow::anyhow!("listening on {addr}: {e}"))?;
        let scheme = if config.http.tls.is_some() { "https" } else { "http" };
        tracing::info!(model = %config.model().name, address = %listener.local_addr()?, scheme, "listening; loading the model");
        sluice::run(listener, config, shutdown_signal()).await
    })
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

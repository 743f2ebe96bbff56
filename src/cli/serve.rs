//! `sluice serve`: the HTTP server.

use sluice::config::ServeConfig;

fn init_logs(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
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
pub fn run(cfg: ServeConfig) -> anyhow::Result<()> {
    init_logs(&cfg.log_format);
    cfg.validate()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let addr = format!("{}:{}", cfg.host, cfg.port);
        let listener = tokio::net::TcpListener::bind(&addr).await?;
        tracing::info!(model = %cfg.model_name(), address = %listener.local_addr()?, "listening; loading the model");
        sluice::server::serve(listener, cfg, shutdown_signal()).await
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

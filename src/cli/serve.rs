//! `sluice serve`: the HTTP server.

use sluice::config::ServeConfig;

/// Runs the server until Ctrl-C or SIGTERM.
pub fn run(cfg: ServeConfig) -> anyhow::Result<()> {
    let state = sluice::start(&cfg)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let addr = format!("{}:{}", cfg.host, cfg.port);
        let listener = tokio::net::TcpListener::bind(&addr).await?;
        eprintln!(
            "sluice: serving {} on http://{}",
            cfg.model_name(),
            listener.local_addr()?
        );
        sluice::run(listener, state, cfg.max_body_bytes, shutdown_signal()).await?;
        anyhow::Ok(())
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

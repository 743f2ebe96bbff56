//! The HTTP layer's metrics, registered beside the engine's in one registry (rendered
//! at `GET /metrics`).

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts};
use sluice_engine::{LATENCY, Metrics};

/// HTTP requests by route and status.
pub const HTTP_REQUESTS_TOTAL: &str = "sluice_http_requests_total";
/// HTTP request latency by route and status.
pub const HTTP_SECONDS: &str = "sluice_http_request_duration_seconds";

/// Metrics of the HTTP layer.
#[derive(Clone)]
pub struct HttpMetrics {
    /// See [`HTTP_REQUESTS_TOTAL`].
    pub requests: IntCounterVec,
    /// See [`HTTP_SECONDS`].
    pub duration: HistogramVec,
}

impl HttpMetrics {
    /// Registers the HTTP metrics in the engine's registry.
    pub fn register(engine: &Metrics) -> Self {
        let r = engine.registry();
        let requests = IntCounterVec::new(
            Opts::new(HTTP_REQUESTS_TOTAL, "HTTP requests by route and status."),
            &["route", "status"],
        )
        .expect("a valid counter definition");
        let duration = HistogramVec::new(
            HistogramOpts::new(
                HTTP_SECONDS,
                "HTTP request latency by route and status, until the response headers (streams go on after).",
            )
            .buckets(LATENCY.to_vec()),
            &["route", "status"],
        )
        .expect("a valid histogram definition");
        // Registered once per engine registry (a second server state is a second engine).
        let _ = r.register(Box::new(requests.clone()));
        let _ = r.register(Box::new(duration.clone()));
        Self { requests, duration }
    }
}

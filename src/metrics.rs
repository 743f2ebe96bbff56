//! The HTTP layer's metrics, in the server's own registry (rendered at `GET /metrics`
//! beside every model's engine metrics).

use prometheus::Registry;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts};
use sluice_engine::LATENCY;

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
    /// Registers the HTTP metrics in `r`.
    pub fn register(r: &Registry) -> Self {
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
        let _ = r.register(Box::new(requests.clone()));
        let _ = r.register(Box::new(duration.clone()));
        Self { requests, duration }
    }
}

//! The accept loop, in place of `axum::serve`, with the limits a server on the open
//! network needs (docs/ARCHITECTURE.md, "Connections"):
//!
//! - at most `max_connections` open connections: one more is accepted and gets one
//!   request, then is closed: a probe (`GET /health`, `/ready`, `/metrics`) is answered
//!   as usual, so an orchestrator never restarts a server that is merely busy; anything
//!   else, or nothing within half a second, gets a 503 (and `Retry-After`). At most
//!   `PROBE_RESERVE` such connections are read at once; past them the 503 is sent at
//!   once. The accept loop never waits for a slot;
//! - a client has `header_timeout` to send a request's headers, counted from when the
//!   connection opened or the request's first byte arrived; `body_timeout` to send its
//!   body once the headers are in (past it: 408, and the connection closes); and a
//!   kept-alive connection idle between requests for `idle_timeout` is closed. A watchdog
//!   per connection reads `activity::Activity` every 100 ms;
//! - HTTP/1.1 only (no HTTP/2), so a connection carries one request at a time; with
//!   `--tls-cert-file` every connection is TLS (`tls.rs`), its handshake within the
//!   header timeout;
//! - on shutdown, accepting stops, idle connections close, and each busy one closes after
//!   its response.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::body::Body;
use axum::response::IntoResponse;
use hyper::body::Incoming;
use tower::ServiceExt;

use super::activity::{Activity, Deadline, Held, Verdict, Watched};
use super::tls::Tls;
pub use crate::config::ConnLimits;
use crate::error::{ApiError, HttpError};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

/// Connections over the cap that may be read for a probe at once.
const PROBE_RESERVE: usize = 64;

/// How long a connection over the cap has to start its request.
const PROBE_WAIT: Duration = Duration::from_millis(500);

/// The body of the answer to a connection over the cap.
const REFUSAL: &str = r#"{"error":{"message":"the server has too many open connections; retry shortly","type":"service_unavailable_error","param":null,"code":"too_many_connections"}}"#;

/// The answer to a connection over the cap.
fn refusal() -> String {
    let body = REFUSAL;
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         retry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Answers 503, then reads and discards what the client sends for up to a second, so the
/// socket is not closed with unread data (which would reset it, and the client might
/// never read the answer).
async fn refuse(mut stream: TcpStream) {
    let answer = refusal();
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        stream.write_all(answer.as_bytes()).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 1024];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<(), std::io::Error>(())
    })
    .await;
}

/// Whether `req` is a probe, answered even over the connection cap.
fn is_probe(req: &axum::extract::Request) -> bool {
    use axum::http::Method;
    matches!(req.method(), &Method::GET | &Method::HEAD)
        && matches!(req.uri().path(), "/health" | "/ready" | "/metrics")
}

/// A connection over the cap: one request, a probe served by `app`, anything else the
/// 503; silence for `PROBE_WAIT` gets the 503 too. Then the connection closes.
async fn over_cap(
    stream: TcpStream,
    app: Router,
    tls: Option<Tls>,
    _reserve: OwnedSemaphorePermit,
) {
    let mut first = [0u8; 1];
    match tokio::time::timeout(PROBE_WAIT, stream.peek(&mut first)).await {
        Ok(Ok(n)) if n > 0 => {}
        Ok(_) => return,
        Err(_) if tls.is_none() => return refuse(stream).await,
        // No plain-text 503 for a TLS client: the connection closes.
        Err(_) => return,
    }
    match tls {
        None => probe_only(stream, app).await,
        Some(tls) => {
            if let Ok(Ok(s)) = tokio::time::timeout(PROBE_WAIT, tls.acceptor.accept(stream)).await {
                probe_only(s, app).await
            }
        }
    }
}

/// One request on `stream`: a probe served by `app`, anything else the 503.
async fn probe_only<S>(stream: S, app: Router)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = tower::service_fn(move |req: axum::extract::Request| {
        let app = app.clone();
        async move {
            if is_probe(&req) {
                // Said, so that a client does not count it as a place held.
                let Ok(mut r) = app.oneshot(req).await;
                r.headers_mut().insert(
                    axum::http::header::CONNECTION,
                    axum::http::HeaderValue::from_static("close"),
                );
                Ok::<_, std::convert::Infallible>(r)
            } else {
                Ok(refusal_response())
            }
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(1))
        .keep_alive(false);
    let conn = builder.serve_connection(
        TokioIo::new(stream),
        TowerToHyperService::new(service.map_request(
            |r: axum::http::Request<hyper::body::Incoming>| r.map(axum::body::Body::new),
        )),
    );
    let _ = tokio::time::timeout(Duration::from_secs(10), conn).await;
}

/// The refusal as a response (a connection over the cap that asked for something other
/// than a probe).
fn refusal_response() -> axum::response::Response {
    use axum::http::{StatusCode, header};
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::RETRY_AFTER, "1"),
            (header::CONNECTION, "close"),
        ],
        REFUSAL,
    )
        .into_response()
}

/// Serves one connection until it closes, holding its place under the cap.
async fn connection<S>(
    stream: S,
    app: Router,
    limits: ConnLimits,
    mut stop: watch::Receiver<bool>,
    _place: OwnedSemaphorePermit,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = Activity::new();
    let io = Watched {
        inner: stream,
        activity: activity.clone(),
    };
    let watched = activity.clone();
    let service = tower::service_fn(move |req: axum::http::Request<Incoming>| {
        let (app, busy) = (app.clone(), watched.begin());
        let fired = Arc::new(AtomicBool::new(false));
        let anthropic = super::messages::is_messages_route(req.uri().path());
        let req = req.map(|b| {
            Body::new(Deadline::new(
                Body::new(b),
                limits.body_timeout,
                fired.clone(),
            ))
        });
        async move {
            let response = match app.oneshot(req).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
            let mut response = if fired.load(Ordering::SeqCst) {
                // In the shape of the API the client speaks.
                let mut r = match anthropic {
                    true => super::messages::error_response(
                        axum::http::StatusCode::REQUEST_TIMEOUT,
                        HttpError::BodyTimeout.to_string(),
                    ),
                    false => ApiError::from(HttpError::BodyTimeout).into_response(),
                };
                r.headers_mut().insert(
                    axum::http::header::CONNECTION,
                    axum::http::HeaderValue::from_static("close"),
                );
                r
            } else {
                response
            };
            // The request stays in hand until its response body ends.
            let body = std::mem::take(response.body_mut());
            *response.body_mut() = Body::new(Held::new(body, busy));
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        // The watchdog below times headers and idleness (hyper's own header timer runs
        // from the previous response, so it would close idle connections as late headers).
        .header_read_timeout(None)
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(service));
    tokio::pin!(conn);
    let mut stopping = false;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "connection ended");
                }
                return;
            }
            _ = stop.wait_for(|s| *s), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = tick.tick() => {
                match activity.verdict(limits.header_timeout, limits.idle_timeout) {
                    Verdict::Keep => {}
                    v => {
                        tracing::debug!(why = ?v, "connection closed");
                        return;
                    }
                }
            }
        }
    }
}

/// Connections the kernel may complete and queue before the accept loop takes them (the
/// listen backlog; the kernel caps it at `net.core.somaxconn`). tokio's `bind` asks for
/// 1024, and a thousand clients connecting at once overflowed it on the 2-core test
/// machine (`nstat` counted 50-130 `TcpExtListenOverflows` in a run of `tests/load.rs`):
/// each handshake dropped there waits for the client's retransmission a second later, a
/// health probe's too.
pub const BACKLOG: u32 = 4096;

/// Listens on `addr` (`host:port`, resolved as `TcpListener::bind` resolves it: the first
/// address that binds) with a backlog of [`BACKLOG`].
pub async fn bind(addr: &str) -> std::io::Result<TcpListener> {
    let mut last = None;
    for a in tokio::net::lookup_host(addr).await? {
        let socket = match a {
            std::net::SocketAddr::V4(_) => TcpSocket::new_v4()?,
            std::net::SocketAddr::V6(_) => TcpSocket::new_v6()?,
        };
        // As tokio's `bind`: a restarted server binds while old connections linger.
        #[cfg(unix)]
        socket.set_reuseaddr(true)?;
        match socket.bind(a).and_then(|()| socket.listen(BACKLOG)) {
            Ok(listener) => return Ok(listener),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the address resolved to nothing",
        )
    }))
}

/// Accepts and serves connections on `listener` until `shutdown` completes, then lets the
/// open ones finish (see the module docs).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnLimits,
    tls: Option<Tls>,
    shutdown: impl Future<Output = ()>,
) {
    let places = Arc::new(Semaphore::new(limits.max_connections));
    let reserve = Arc::new(Semaphore::new(PROBE_RESERVE));
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            _ = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before it was
                    // accepted: wait a moment instead of spinning, and go on.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        match places.clone().try_acquire_owned() {
            Ok(place) => {
                let _ = stream.set_nodelay(true);
                let (app, stop, tls) = (app.clone(), stop_rx.clone(), tls.clone());
                tokio::spawn(async move {
                    let Some(tls) = tls else {
                        return connection(stream, app, limits, stop, place).await;
                    };
                    // The handshake counts against the header timeout.
                    let shake = tls.acceptor.accept(stream);
                    match tokio::time::timeout(limits.header_timeout, shake).await {
                        Ok(Ok(s)) => connection(s, app, limits, stop, place).await,
                        Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!("TLS handshake timed out"),
                    }
                });
            }
            Err(_) => match reserve.clone().try_acquire_owned() {
                Ok(r) => {
                    tokio::spawn(over_cap(stream, app.clone(), tls.clone(), r));
                }
                Err(_) => {
                    tracing::debug!("connection refused: too many open connections");
                    tokio::spawn(refuse(stream));
                }
            },
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every connection gives its place back when it closes.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let _ = places.acquire_many(all).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// More clients than tokio's backlog of 1024 connect before the accept loop takes any
    /// (as a burst does while the loop is busy): each completes its handshake at once.
    /// With a backlog of 1024 the kernel drops the handshakes past the 1025th, and those
    /// connects wait for a retransmission instead.
    #[tokio::test]
    async fn a_burst_past_1024_connections_is_queued_not_dropped() {
        const BURST: usize = 1100;
        let somaxconn: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        assert!(
            somaxconn >= BURST,
            "net.core.somaxconn is {somaxconn}: the kernel caps every backlog below {BURST}"
        );
        let listener = bind("127.0.0.1:0").await.expect("a listener");
        let addr = listener.local_addr().expect("its address");
        let opened = tokio::task::spawn_blocking(move || {
            (0..BURST)
                .map(|_| std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)))
                .collect::<Vec<_>>()
        })
        .await
        .expect("the connects ran");
        let failed = opened.iter().filter(|c| c.is_err()).count();
        assert_eq!(failed, 0, "{failed} of {BURST} connects not queued");
        drop(listener);
    }
}

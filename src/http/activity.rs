//! What a connection's watchdog reads (`conn.rs`): whether a request is in hand, when a
//! request's first byte arrived, and when the connection last moved; the socket wrapper
//! and the body wrappers that keep those up to date, and the request body's deadline
//! (docs/ARCHITECTURE.md, "Connections").

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use std::future::Future;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// No request is being received (`Activity::started`).
const NONE: u64 = u64::MAX;

/// One connection's state, in milliseconds since it opened.
pub struct Activity {
    start: Instant,
    /// Requests whose response has not ended.
    busy: AtomicUsize,
    /// The last byte read or written.
    last: AtomicU64,
    /// When the current request's first byte arrived, until its headers are complete
    /// (`NONE` between requests). A new connection starts here: its first request is
    /// timed from the connection's opening.
    started: AtomicU64,
}

/// What the watchdog should do with a connection now.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Leave it.
    Keep,
    /// A request's headers are late.
    HeadersLate,
    /// Idle between requests for too long.
    Idle,
}

impl Activity {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            start: Instant::now(),
            busy: AtomicUsize::new(0),
            last: AtomicU64::new(0),
            started: AtomicU64::new(0),
        })
    }

    fn now(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn moved(&self) {
        self.last.store(self.now(), Ordering::SeqCst);
    }

    /// A request's headers are complete: it is in hand until the returned guard (held by
    /// its response body) drops.
    pub fn begin(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::SeqCst);
        self.started.store(NONE, Ordering::SeqCst);
        Busy(self.clone())
    }

    /// The verdict for a connection with these timeouts, now.
    pub fn verdict(&self, header: Duration, idle: Duration) -> Verdict {
        self.verdict_at(self.now(), header, idle)
    }

    fn verdict_at(&self, now: u64, header: Duration, idle: Duration) -> Verdict {
        if self.busy.load(Ordering::SeqCst) > 0 {
            return Verdict::Keep;
        }
        let started = self.started.load(Ordering::SeqCst);
        if started != NONE {
            if now.saturating_sub(started) > header.as_millis() as u64 {
                return Verdict::HeadersLate;
            }
        } else if now.saturating_sub(self.last.load(Ordering::SeqCst)) > idle.as_millis() as u64 {
            return Verdict::Idle;
        }
        Verdict::Keep
    }
}

/// A request in hand; dropped when its response body ends (or is dropped).
pub struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.moved();
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The socket, noting every byte that moves.
pub struct Watched<S> {
    pub inner: S,
    pub activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            let a = &self.activity;
            a.moved();
            if a.busy.load(Ordering::SeqCst) == 0 {
                // The first byte of a request: its headers are timed from now.
                let _ =
                    a.started
                        .compare_exchange(NONE, a.now(), Ordering::SeqCst, Ordering::SeqCst);
            }
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.moved();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A request body that must end before its deadline: past it, reading fails and `fired`
/// says so (the connection answers 408 and closes).
pub struct Deadline {
    inner: Body,
    sleep: Pin<Box<tokio::time::Sleep>>,
    fired: Arc<AtomicBool>,
    ended: bool,
}

impl Deadline {
    pub fn new(inner: Body, within: Duration, fired: Arc<AtomicBool>) -> Self {
        Self {
            inner,
            sleep: Box::pin(tokio::time::sleep(within)),
            fired,
            ended: false,
        }
    }
}

impl HttpBody for Deadline {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(None) => {
                this.ended = true;
                Poll::Ready(None)
            }
            Poll::Ready(Some(frame)) => Poll::Ready(Some(frame)),
            Poll::Pending => {
                if this.sleep.as_mut().poll(cx).is_ready() {
                    this.ended = true;
                    this.fired.store(true, Ordering::SeqCst);
                    return Poll::Ready(Some(Err(axum::Error::new(
                        "the request body did not arrive within --body-read-timeout",
                    ))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body that keeps its request counted as in hand until it ends.
pub struct Held {
    inner: Body,
    _busy: Busy,
}

impl Held {
    pub fn new(inner: Body, busy: Busy) -> Self {
        Self { inner, _busy: busy }
    }
}

impl HttpBody for Held {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_connection_is_timed_as_a_request_then_idle_between_requests() {
        let a = Activity::new();
        let (header, idle) = (Duration::from_millis(50), Duration::from_millis(400));
        assert_eq!(a.verdict_at(40, header, idle), Verdict::Keep);
        assert_eq!(a.verdict_at(60, header, idle), Verdict::HeadersLate);
        // A request in hand is never timed out here.
        let busy = a.begin();
        assert_eq!(a.verdict_at(100_000, header, idle), Verdict::Keep);
        // Once its response ends the connection is idle: only the idle timeout applies.
        drop(busy);
        let last = a.last.load(Ordering::SeqCst);
        assert_eq!(a.verdict_at(last + 300, header, idle), Verdict::Keep);
        assert_eq!(a.verdict_at(last + 500, header, idle), Verdict::Idle);
    }
}

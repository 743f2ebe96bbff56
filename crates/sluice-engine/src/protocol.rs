//! What the handle and the engine thread say to each other: the commands on the channel,
//! a queued request, the state both sides read, and the engine's end of a request's event
//! channel (docs/ARCHITECTURE.md, "Threads and channels"). A leaf the handle, the worker
//! and the sequences import; it imports none of them.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use tokio::sync::{mpsc, watch};

use crate::embed::EmbedJob;
use crate::error::EngineError;
use crate::reload::Swap;
use crate::request::{Event, ValidRequest};

/// Work sent to the engine thread.
pub(crate) enum Command {
    Submit(Box<Queued>),
    Swap(Swap),
    Embed(EmbedJob),
}

/// A request between submission and admission.
pub(crate) struct Queued {
    /// Holds the request's place in the queue counters until admission or drop. Declared
    /// before `tx`, so a dropped request gives its place back before it stops counting in
    /// flight: whoever `idle()` wakes finds the queue's budget whole.
    pub permit: QueuePermit,
    pub req: ValidRequest,
    pub tx: EventSender,
    pub submitted: Instant,
}

/// State shared between the handle and the worker.
pub(crate) struct Shared {
    pub waiting: AtomicUsize,
    pub running: AtomicUsize,
    pub alive: AtomicBool,
    pub prefill_tokens: AtomicUsize,
    pub padding_tokens: AtomicUsize,
    /// Prompt tokens of the waiting requests.
    pub queued_tokens: AtomicUsize,
    /// Label of the weights in use.
    pub version: RwLock<Arc<str>>,
    /// Address of the KV slab (unchanged for the engine's lifetime).
    pub kv_base: AtomicUsize,
    /// Requests submitted and not yet ended (queued or running).
    pub in_flight: watch::Sender<usize>,
    /// Slots leased now (a sequence frees its slot before its request stops counting
    /// in `in_flight`).
    pub slots_used: Arc<AtomicUsize>,
    /// KV blocks held by block tables now (a sequence lets go of its blocks before its
    /// request stops counting in `in_flight`).
    pub kv_blocks_used: Arc<AtomicUsize>,
    /// The most KV blocks held at once so far.
    pub kv_blocks_peak: Arc<AtomicUsize>,
    /// The engine holds a weight swap it has not applied yet (new requests wait for it).
    pub swap_pending: std::sync::atomic::AtomicBool,
}

/// A place in the queue: counted in `waiting` and `queued_tokens` from a successful
/// submission until it is dropped (admitted, cancelled, timed out, or lost with the
/// engine), so no path can leak a count.
pub(crate) struct QueuePermit {
    pub shared: Arc<Shared>,
    pub tokens: usize,
}

impl Drop for QueuePermit {
    fn drop(&mut self) {
        self.shared.waiting.fetch_sub(1, Ordering::SeqCst);
        self.shared
            .queued_tokens
            .fetch_sub(self.tokens, Ordering::SeqCst);
    }
}

/// The engine's end of a request's event channel. It counts the request as in flight for
/// as long as it lives, and if it is dropped by a panicking engine thread it marks the
/// engine dead *before* the client can see the channel close or the error it sends, so
/// `/health` already answers 503 when a client hears of the failure.
pub(crate) struct EventSender {
    pub tx: mpsc::Sender<Event>,
    pub shared: Arc<Shared>,
}

impl EventSender {
    /// Sends without blocking; the channel has room for every event of the request, so
    /// this fails only when the client has gone (handled at the next step boundary).
    pub fn send(&self, ev: Event) {
        let _ = self.tx.try_send(ev);
    }

    /// Whether the client has gone away.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

impl Drop for EventSender {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.shared.alive.store(false, Ordering::SeqCst);
            let _ = self.tx.try_send(Event::Error(EngineError::Died));
        }
        self.shared.in_flight.send_modify(|n| *n -= 1);
    }
}

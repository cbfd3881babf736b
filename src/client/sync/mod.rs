//! The sync layer: one WebSocket to `hearth-relay` per open database, reconnection with
//! exponential backoff and jitter, heartbeat-based dead-link detection, listen resumption from
//! stored versions, the write queue flushed in order with idempotent batch ids, and
//! a listen on each document a listen dropped ("limbo" documents), resolved in a snapshot.
//!
//! The parts: this module holds the [`Sync`] state, its start (its subscription to the
//! engine's events), requests and their replies, and the network switch; `connection` the
//! socket's life (connect, the heartbeat watch, drop and reconnect, the browser's
//! `online`/`offline` events, Hello);
//! `token` the token callback and the refresh before a JWT expires; `messages` the relay's
//! messages and the listen targets they advance; `targets` the targets made and dropped;
//! `existence` a resumed target checked against the relay's `Existence`.
//!
//! Architecture invariant: the WebSocket's event closures are owned by the `Sync` value and
//! dropped with it; none is leaked with `forget()`.

use hearth_core::error::ErrorCode;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashMap};
use std::rc::{Rc, Weak};

use js_sys::Function;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::JsValue;
use web_sys::WebSocket;

use super::engine::{Engine, EngineEvent};
use super::error::ClientError;
use super::idb_store::Store;
use hearth_core::path::DocumentName;
use hearth_core::protocol::codec::encode_client;
use hearth_core::protocol::existence::NameFilter;
use hearth_core::protocol::{ClientMessage, DocumentChange, ServerMessage, TargetChangeKind};
use hearth_core::query::model::Query;

mod connection;
mod existence;
mod messages;
mod resume;
mod targets;
mod token;

use self::connection::{clear_timeout, set_timeout};

/// How many times a transaction's commit whose outcome is unknown is sent again.
const COMMIT_RETRIES: u32 = 6;
/// A target's first delay before it listens again after the relay ended it for a transient
/// cause (ms), and the most it grows to: a Listen the relay cannot serve is answered at
/// once and costs it little, while a listener that waits long after an outage ended looks
/// live and is not.
const LISTEN_BACKOFF_MS: f64 = 250.0;
const LISTEN_BACKOFF_MAX_MS: f64 = 10_000.0;
/// How the reconnect, write and listen backoffs grow per failed attempt (from 250 ms, to
/// 30 s or `LISTEN_BACKOFF_MAX_MS`): by half, as Firestore's (1.5), so that after an outage
/// of a few seconds the next attempt comes within about 3 s of the relay's return
/// (doubling let it wait up to 6 s).
const BACKOFF_GROWTH: f64 = 1.5;
/// A current target's resume version is stored with a snapshot that changed its result, and
/// otherwise at most this often (ms), as Firestore persists a resume token: a snapshot then
/// writes as many records as targets it changed, not one per listener. A version stored
/// earlier is still a right place to resume from (the relay sends what changed since it).
const RESUME_STORE_MS: f64 = 5.0 * 60.0 * 1000.0;

/// Where a request's reply goes.
type Reply = Box<dyn FnOnce(Result<ServerMessage, ClientError>)>;

/// A request waiting for the connection to open: woken by the Welcome, by the connection
/// failing or being switched off, or by its own timer.
struct OpenWaiter {
    /// The waiting promise's `resolve`.
    resolve: Function,
    /// Its timer's `setTimeout` id, cleared when it is woken first.
    timer: Option<f64>,
}

/// One relay target: the relay's side of a listener.
struct Target {
    /// The local listener it serves.
    listener: u64,
    /// The listened query.
    query: Query,
    /// The encoded query: the key of its stored resume version.
    key: Vec<u8>,
    /// The version to resume from: the last Snapshot that covered it, or the stored one.
    resume: Option<u64>,
    /// Names the relay last said are in the target's result.
    docs: BTreeSet<DocumentName>,
    /// Changes received since the last Snapshot.
    buffered: Vec<(TargetChangeKind, Vec<DocumentChange>)>,
    /// The relay answered this target's Listen on the current connection.
    answered: bool,
    /// This target's Listen went out on the current connection (sent once per connection: a
    /// second Listen of one target is refused by the relay).
    sent: bool,
    /// The relay sent its whole result (a Reset) since the target was made, so `docs` is
    /// all of it; a resumed target's first Delta says only what changed.
    complete: bool,
    /// For a limbo target (no listener): the document it resolves (see `messages`).
    limbo: Option<DocumentName>,
    /// The relay's `Existence` for a resumed target, checked at the next Snapshot
    /// (`existence`).
    existence: Option<(u64, NameFilter)>,
    /// The delay before this target listens again after the relay ended it for a transient
    /// cause (ms): doubles with each such end, back to the first with a Snapshot covering
    /// it. Each target has its own, so one outage ending many targets at once does not
    /// push any of them past a short wait.
    backoff_ms: f64,
    /// When the target's resume version was last stored (`Date.now()`, 0: never in this
    /// session): see `RESUME_STORE_MS`.
    stored_at: f64,
}

/// The connection state of one database.
pub struct Sync {
    /// The engine it feeds. Weak: its subscription to the engine's events holds this value
    /// weakly too, and the API's database owns both.
    engine: Weak<Engine>,
    /// The relay's WebSocket URL.
    url: String,
    /// The token sent in Hello and Auth (empty: none); the token callback replaces it.
    token: RefCell<String>,
    /// The app's token callback, if it gave one: asked before each Hello and before the
    /// token expires.
    token_provider: Option<Function>,
    /// The current socket, connecting or open.
    ws: RefCell<Option<WebSocket>>,
    /// Event handlers of the current socket, dropped with it.
    handlers: RefCell<Vec<Closure<dyn FnMut(JsValue)>>>,
    /// The pending heartbeat or reconnect timer: its closure (kept alive until it fires or
    /// is cleared) and its `setTimeout` id.
    timer: RefCell<Option<(Closure<dyn FnMut()>, f64)>>,
    /// The timer that refreshes the token before it expires (with a token callback).
    auth_timer: RefCell<Option<(Closure<dyn FnMut()>, f64)>>,
    /// Whether the relay welcomed the current socket: only then are messages sent.
    open: Cell<bool>,
    /// Whether the current socket has been sent the batches queued before its Welcome: a
    /// new batch is sent at once only then, so that batches reach the relay in queue order
    /// (the Welcome's task sends the queue after an await).
    queue_sent: Cell<bool>,
    /// The version of a Snapshot held back while a listen was unanswered (see
    /// `messages`): taken when the last such listen is refused instead of answered.
    deferred: Cell<Option<u64>>,
    /// Whether the app allows the network (`enableNetwork()` / `disableNetwork()`).
    enabled: Cell<bool>,
    /// Whether the database was closed: nothing reconnects after.
    closed: Cell<bool>,
    /// The relay refused this client's credentials (`unauthenticated` after the token
    /// callback had its chance, or `permission-denied` for the database): nothing
    /// reconnects until `setToken()` or `enableNetwork()`; server reads, transactions and
    /// new listens fail with this error, queued writes stay queued.
    refused: RefCell<Option<ClientError>>,
    /// Whether the connection is a retry with a fresh token from the callback after the
    /// relay refused one: a second refusal is final (see `refused`). A Welcome clears it.
    auth_retried: Cell<bool>,
    /// The next reconnect delay before jitter: grows by half per attempt (`BACKOFF_GROWTH`)
    /// up to 30 s, back to
    /// 250 ms whenever a fresh start is due (a Welcome, the browser's `online` event,
    /// `enableNetwork()`, a refused token).
    backoff_ms: Cell<f64>,
    /// The delay before queued writes are sent again after the relay answered one with a
    /// transient error (`unavailable`, ...): grows by half per such answer up to 30 s, back to
    /// 250 ms when a write is acknowledged. A Welcome does not reset it.
    write_backoff_ms: Cell<f64>,
    /// The relay's heartbeat interval (from Welcome): three of them in silence mean a dead
    /// link.
    heartbeat_ms: Cell<f64>,
    /// When the relay was last heard from (`Date.now()`).
    last_seen: Cell<f64>,
    /// The next request id (never reused, across connections).
    next_request: Cell<u64>,
    /// The next target id.
    next_target: Cell<u32>,
    /// Targets by id, one per listener.
    targets: RefCell<HashMap<u32, Target>>,
    /// Listener id → target id.
    by_listener: RefCell<HashMap<u64, u32>>,
    /// Requests awaiting their reply, by request id (failed when the socket drops).
    replies: RefCell<HashMap<u64, Reply>>,
    /// Write request id → batch id, for refusals.
    writes: RefCell<HashMap<u64, u64>>,
    /// Resume versions: stored, kept from dropped targets, waiting to be stored.
    resume: RefCell<resume::ResumePoints>,
    /// Requests waiting for the connection to open (see `wait_open`).
    open_waiters: RefCell<Vec<OpenWaiter>>,
    /// The global `online`/`offline` handlers, alive as long as the database is open.
    online_handlers: RefCell<Vec<Closure<dyn FnMut(JsValue)>>>,
    /// Snapshots received and not yet applied, oldest first: applied one at a time, in
    /// order, so no version is stored before an earlier one is in the cache.
    snapshots: RefCell<std::collections::VecDeque<ReceivedSnapshot>>,
    /// Whether a task is applying `snapshots`.
    applying: Cell<bool>,
    /// Batches sent on this connection whose answer the engine has not yet taken: a
    /// Snapshot may cover one of them before its answer arrives (the relay's fan-out and
    /// its acknowledgements are not ordered), and applying it over the still-pending batch
    /// would count the batch twice; so a Snapshot waits for the batches sent before it.
    unsettled: RefCell<std::collections::HashSet<u64>>,
    /// Snapshots waiting for `unsettled` batches: resolved whenever one settles.
    settle_waiters: RefCell<Vec<Function>>,
    /// The connection's number: snapshots of an earlier connection are dropped (their
    /// targets keep their resume versions and are asked again).
    epoch: Cell<u64>,
    /// Batches sent on this connection, in sending order, until the engine took their
    /// answers: the relay commits them in this order, but its answers may arrive in
    /// another, and an acknowledgement's estimate of the server state is right only if the
    /// earlier batches were acknowledged before it. Answers are taken in this order.
    sent_order: RefCell<std::collections::VecDeque<u64>>,
    /// Answers that arrived before those of batches sent earlier, by batch id.
    answers: RefCell<HashMap<u64, Result<u64, ClientError>>>,
    /// Whether a task is handing answers to the engine.
    answering: Cell<bool>,
    /// Documents in limbo (they left a result; deleted, or changed so they no longer
    /// match) with the target that resolves each.
    limbo: RefCell<HashMap<DocumentName, u32>>,
    /// For each target whose stale documents were found (`resolve_limbo`), those documents:
    /// the next look checks only them and the documents that changed since. A target
    /// without an entry (new, reset, answered again) is checked whole.
    limbo_checked: RefCell<HashMap<u32, BTreeSet<DocumentName>>>,
    /// Whether the page set `globalThis.__HEARTH_DEBUG__` before opening: the sync layer then
    /// logs what it sends and applies (`console.debug`), for diagnosing a sync problem.
    debug: bool,
    /// This session's subscription to the engine's events (see `engine::Events`).
    subscription: Cell<u64>,
}

/// A Snapshot with the target changes it makes consistent, taken when it arrived.
struct ReceivedSnapshot {
    /// The version every answered target is now consistent at.
    version: u64,
    /// The connection it came on (see `Sync::epoch`).
    epoch: u64,
    /// Batches sent before it and not yet settled: it may cover them.
    awaiting: Vec<u64>,
    /// The changes of each answered target since the previous Snapshot, by target id.
    targets: Vec<(u32, Vec<(TargetChangeKind, Vec<DocumentChange>)>)>,
    /// The `Existence` of each resumed target among them: target, count, filter.
    existence: Vec<(u32, u64, NameFilter)>,
}

impl Sync {
    /// Logs a line of the sync layer's work when debugging is on (see `debug`).
    pub(super) fn trace(&self, line: impl FnOnce() -> String) {
        if self.debug {
            web_sys::console::debug_1(&format!("hearth-sync {}", line()).into());
        }
    }

    /// Starts syncing `engine` with the relay at `url`: loads the stored resume versions,
    /// subscribes to the engine's events and connects.
    pub async fn start(
        engine: &Rc<Engine>,
        url: String,
        token: Option<String>,
        token_provider: Option<Function>,
    ) -> Result<Rc<Sync>, ClientError> {
        let mut stored = HashMap::new();
        for (k, v) in engine.store.all(Store::Targets).await? {
            if v.len() >= 8 {
                stored.insert(k, u64::from_be_bytes(v[..8].try_into().expect("8 bytes")));
            }
        }
        let sync = Rc::new(Sync {
            engine: Rc::downgrade(engine),
            url,
            token: RefCell::new(token.unwrap_or_default()),
            token_provider,
            ws: RefCell::new(None),
            handlers: RefCell::new(Vec::new()),
            timer: RefCell::new(None),
            auth_timer: RefCell::new(None),
            open: Cell::new(false),
            queue_sent: Cell::new(false),
            deferred: Cell::new(None),
            enabled: Cell::new(true),
            closed: Cell::new(false),
            refused: RefCell::new(None),
            auth_retried: Cell::new(false),
            backoff_ms: Cell::new(250.0),
            write_backoff_ms: Cell::new(250.0),
            heartbeat_ms: Cell::new(5000.0),
            last_seen: Cell::new(js_sys::Date::now()),
            next_request: Cell::new(1),
            next_target: Cell::new(1),
            targets: RefCell::new(HashMap::new()),
            by_listener: RefCell::new(HashMap::new()),
            replies: RefCell::new(HashMap::new()),
            writes: RefCell::new(HashMap::new()),
            resume: RefCell::new(resume::ResumePoints::new(stored)),
            online_handlers: RefCell::new(Vec::new()),
            open_waiters: RefCell::new(Vec::new()),
            snapshots: RefCell::new(std::collections::VecDeque::new()),
            applying: Cell::new(false),
            unsettled: RefCell::new(std::collections::HashSet::new()),
            settle_waiters: RefCell::new(Vec::new()),
            epoch: Cell::new(0),
            sent_order: RefCell::new(std::collections::VecDeque::new()),
            answers: RefCell::new(HashMap::new()),
            answering: Cell::new(false),
            limbo: RefCell::new(HashMap::new()),
            limbo_checked: RefCell::new(HashMap::new()),
            debug: js_sys::Reflect::get(&js_sys::global(), &"__HEARTH_DEBUG__".into())
                .is_ok_and(|v| v.is_truthy()),
            subscription: Cell::new(0),
        });
        // What the engine tells the sync session.
        let w = Rc::downgrade(&sync);
        let subscription = engine.events.subscribe(move |event| {
            let Some(s) = w.upgrade() else { return };
            match event {
                EngineEvent::BatchDurable if s.queue_sent.get() => s.send_sendable(),
                EngineEvent::Listen(id, q) => s.listen(*id, (*q).clone()),
                EngineEvent::Unlisten(id) => s.unlisten(*id),
                EngineEvent::Evicted => s.forget_resume_points(),
                _ => {}
            }
        });
        sync.subscription.set(subscription);
        Self::install_online_events(&sync);
        sync.connect();
        Ok(sync)
    }

    fn engine(&self) -> Option<Rc<Engine>> {
        self.engine.upgrade()
    }

    /// Whether the relay welcomed the current socket.
    pub fn is_open(&self) -> bool {
        self.open.get()
    }

    /// Sends `m` on the welcomed socket; false when there is none (the caller resends on
    /// the next Welcome, or fails).
    fn send(&self, m: &ClientMessage) -> bool {
        if !self.open.get() {
            return false;
        }
        let bytes = encode_client(m);
        match self.ws.borrow().as_ref() {
            Some(ws) => ws.send_with_u8_array(&bytes).is_ok(),
            None => false,
        }
    }

    /// Waits up to `ms` for the connection to open (a request made while it is still
    /// connecting should not fail); false when it did not. The Welcome wakes it at once, and
    /// so does the connection failing, closing or being switched off (then it is false).
    pub async fn wait_open(&self, ms: f64) -> bool {
        if self.open.get() {
            return true;
        }
        if self.closed.get() || !self.enabled.get() || self.refused.borrow().is_some() {
            return false;
        }
        let mut mine: Option<Function> = None;
        let promise = js_sys::Promise::new(&mut |resolve, _| {
            let timer = set_timeout(&resolve, ms);
            mine = Some(resolve.clone());
            self.open_waiters
                .borrow_mut()
                .push(OpenWaiter { resolve, timer });
        });
        let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
        // Timed out: this waiter is still listed (a wake drains the list); it goes now, so
        // waiters do not pile up while the relay stays unreachable.
        if let Some(mine) = mine {
            self.open_waiters
                .borrow_mut()
                .retain(|w| !js_sys::Object::is(&w.resolve, &mine));
        }
        self.open.get()
    }

    /// Wakes every request waiting for the connection: it opened (they go on), or failed,
    /// closed or was switched off (they find it not open and fail with `unavailable`).
    fn wake_open_waiters(&self) {
        let waiters = std::mem::take(&mut *self.open_waiters.borrow_mut());
        for w in waiters {
            if let Some(id) = w.timer {
                clear_timeout(id);
            }
            let _ = w.resolve.call0(&JsValue::UNDEFINED);
        }
    }

    /// Sends a request and awaits its reply.
    pub async fn request(
        &self,
        make: impl FnOnce(u64) -> ClientMessage,
    ) -> Result<ServerMessage, ClientError> {
        self.request_sent(make).await.map_err(|(e, _)| e)
    }

    /// [`Sync::request`], telling on failure whether the request reached the socket (its
    /// outcome then unknown) or was never sent.
    async fn request_sent(
        &self,
        make: impl FnOnce(u64) -> ClientMessage,
    ) -> Result<ServerMessage, (ClientError, bool)> {
        self.wait_open(10_000.0).await;
        let request_id = self.next_request.get();
        self.next_request.set(request_id + 1);
        let (tx, rx) = futures_channel();
        self.replies.borrow_mut().insert(request_id, Box::new(tx));
        if !self.send(&make(request_id)) {
            self.replies.borrow_mut().remove(&request_id);
            if let Some(e) = self.refused.borrow().clone() {
                return Err((e, false));
            }
            return Err((ClientError::new(ErrorCode::Unavailable, "the relay is not reachable (offline); read from the cache with { source: 'cache' }"), false));
        }
        rx.await.map_err(|e| (e, true))
    }

    /// Reads documents from the relay.
    pub async fn request_get(
        &self,
        names: Vec<DocumentName>,
    ) -> Result<ServerMessage, ClientError> {
        self.request(|request_id| ClientMessage::Get { request_id, names })
            .await
    }

    /// Sends a transaction's writes with its reads to revalidate. A transient failure (the
    /// connection lost before the answer, the relay unable to commit for now) leaves the
    /// outcome unknown: the same batch is sent again under the same id, a few times with
    /// backoff, and the relay answers a batch it committed with that commit (applied once).
    pub async fn commit_transaction(
        self: &Rc<Self>,
        batch_id: u64,
        mutations: Vec<hearth_core::mutation::Mutation>,
        reads: Vec<(DocumentName, Option<u64>)>,
    ) -> Result<u64, ClientError> {
        let mut delay = 250.0;
        let mut attempt = 0;
        // Whether some attempt reached the relay: only then may the batch have committed.
        let mut sent = false;
        loop {
            let (m, r) = (mutations.clone(), reads.clone());
            let reply = self
                .request_sent(|request_id| ClientMessage::Write {
                    request_id,
                    batch_id,
                    mutations: m,
                    reads: r,
                })
                .await;
            match reply {
                Ok(ServerMessage::WriteResult { version, .. }) => return Ok(version),
                Ok(_) => {
                    return Err(ClientError::new(
                        ErrorCode::Internal,
                        "unexpected reply to a transaction",
                    ))
                }
                Err((e, reached)) => {
                    sent |= reached;
                    let unknown = sent && e.code() == ErrorCode::Unavailable;
                    if !unknown || attempt >= COMMIT_RETRIES || !self.enabled.get() {
                        return Err(e);
                    }
                    attempt += 1;
                    // The relay applies nothing more from a connection one of whose writes
                    // failed for a transient cause: the retry goes on a new connection.
                    if self.open.get() {
                        self.drop_socket();
                    }
                    crate::client::js::sleep(delay * (0.5 + js_sys::Math::random())).await;
                    delay *= 2.0;
                }
            }
        }
    }

    /// `enableNetwork()` / `disableNetwork()`: connects, or closes the socket without
    /// reconnecting (listeners go `fromCache`, requests in flight or waiting for the
    /// connection fail with `unavailable`).
    pub fn set_enabled(self: &Rc<Self>, on: bool) {
        self.enabled.set(on);
        if on {
            // A refusal is tried again (the token callback is asked anew).
            self.refused.replace(None);
            self.auth_retried.set(false);
            self.backoff_ms.set(250.0);
            self.connect();
        } else {
            self.detach_socket();
            // Replies will not come on a closed socket: what waited on them fails now (queued
            // writes stay queued and are sent again on the next Welcome).
            self.forget_connection("the network was disabled before the relay answered");
            self.wake_open_waiters();
        }
    }

    /// `setToken(token)`: the token for the next Hello, sent to the relay at once (`Auth`)
    /// on an open connection; after a refusal, connects again with it.
    pub fn set_token(self: &Rc<Self>, token: String) {
        *self.token.borrow_mut() = token.clone();
        self.refused.replace(None);
        self.auth_retried.set(false);
        if self.open.get() {
            self.send(&ClientMessage::Auth { token });
            self.schedule_token_refresh();
        } else {
            self.backoff_ms.set(250.0);
            self.connect();
        }
    }

    /// The relay refused this client's credentials for good (`err`): the socket goes and
    /// is not opened again until `setToken()` or `enableNetwork()`; requests waiting on it
    /// fail with `err`, and so does every listener (its error callback), as a refused
    /// listen does. Queued writes stay queued, sent once the relay accepts a token.
    pub(crate) fn refuse(self: &Rc<Self>, err: ClientError) {
        self.trace(|| format!("refused: {}", err.message));
        self.refused.replace(Some(err.clone()));
        self.detach_socket();
        for timer in [&self.timer, &self.auth_timer] {
            if let Some((_, id)) = timer.borrow_mut().take() {
                clear_timeout(id);
            }
        }
        let replies: Vec<Reply> = self.replies.borrow_mut().drain().map(|(_, r)| r).collect();
        for reply in replies {
            reply(Err(err.clone()));
        }
        let targets: Vec<(u32, Target)> = self.targets.borrow_mut().drain().collect();
        self.by_listener.borrow_mut().clear();
        self.limbo.borrow_mut().clear();
        if let Some(engine) = self.engine() {
            for (id, t) in targets {
                if t.limbo.is_none() {
                    engine.target_failed(id, err.clone());
                }
            }
        }
        self.forget_connection(&err.message);
        self.wake_open_waiters();
    }

    /// Stops for good (the database closed): the socket and every timer go.
    pub fn close(self: &Rc<Self>) {
        self.closed.set(true);
        if let Some(engine) = self.engine() {
            engine.events.unsubscribe(self.subscription.get());
        }
        self.set_enabled(false);
        if let Some((_, id)) = self.timer.borrow_mut().take() {
            clear_timeout(id);
        }
        if let Some((_, id)) = self.auth_timer.borrow_mut().take() {
            clear_timeout(id);
        }
    }
}

/// A one-shot channel for single-threaded futures.
fn futures_channel() -> (
    impl FnOnce(Result<ServerMessage, ClientError>),
    impl std::future::Future<Output = Result<ServerMessage, ClientError>>,
) {
    let slot: Rc<
        RefCell<(
            Option<Result<ServerMessage, ClientError>>,
            Option<std::task::Waker>,
        )>,
    > = Rc::new(RefCell::new((None, None)));
    let tx_slot = slot.clone();
    let tx = move |r| {
        let waker = {
            let mut s = tx_slot.borrow_mut();
            s.0 = Some(r);
            s.1.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    };
    let rx = std::future::poll_fn(move |cx| {
        let mut s = slot.borrow_mut();
        match s.0.take() {
            Some(r) => std::task::Poll::Ready(r),
            None => {
                s.1 = Some(cx.waker().clone());
                std::task::Poll::Pending
            }
        }
    });
    (tx, rx)
}

//! The native Rust client of protocol v1: one WebSocket to `hearth-relay`, any number of
//! requests in flight on it, real-time listeners that see consistent snapshots, and
//! optimistic transactions with retry. The integration tests and `hearth-bench` use it.
//!
//! ```text
//! Client ──encoded frame──► writer task ──► socket
//!   ▲ oneshot per request_id                  │
//!   └──────────────────────── reader task ◄───┘
//! Listener ◄── mpsc ──────────┘  TargetChange buffered per target, applied on Snapshot
//! ```
//!
//! Architecture invariant: a listener only ever sees a state at a `Snapshot` version: the
//! changes of a target are buffered until the relay says every target of the connection is
//! consistent, and only then applied to the listener's copy of the result.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::{SinkExt, StreamExt};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

use hearth_core::document::Document;
use hearth_core::index::config::IndexFile;
use hearth_core::mutation::{Mutation, SetMerge};
use hearth_core::path::{DocumentName, FieldPath};
use hearth_core::protocol::codec::{decode_server, encode_client};
use hearth_core::protocol::{
    ClientMessage, DocumentChange, ErrorCode, ServerMessage, TargetChangeKind, MAX_FRAME_BYTES,
    PROTOCOL_VERSION,
};
use hearth_core::query::matcher::Matcher;
use hearth_core::query::model::{Aggregation, Query};
use hearth_core::query::validate::validate;
use hearth_core::value::{Map, Value};

/// Read buffer of the socket. tungstenite zero-fills its read buffer on every read, so a
/// small one keeps many idle connections cheap (TOOLCHAIN.md measured 128 KiB as 2-3x slower
/// fan-out).
const READ_BUFFER_BYTES: usize = 8 << 10;
/// How long `connect` waits for the `Welcome`.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `close` waits for the relay to close its side.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);
/// First and largest pause between transaction attempts.
const BACKOFF_BASE: Duration = Duration::from_millis(5);
const BACKOFF_MAX: Duration = Duration::from_millis(500);

/// Why a request failed.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
pub enum ClientError {
    /// The relay refused the request (or the whole connection) with a typed error.
    #[error("{}: {message}", code.as_str())]
    Server { code: ErrorCode, message: String },
    /// The connection is closed (by `close`, or by the relay without an error).
    #[error("the connection is closed")]
    Closed,
    /// The relay sent something this client does not understand.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The socket failed.
    #[error("i/o error: {0}")]
    Io(String),
}

impl ClientError {
    /// The relay's error code, for `Server` errors.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Server { code, .. } => Some(*code),
            _ => None,
        }
    }

    fn server(code: ErrorCode, message: impl Into<String>) -> ClientError {
        ClientError::Server {
            code,
            message: message.into(),
        }
    }
}

fn unexpected(m: &ServerMessage) -> ClientError {
    ClientError::Protocol(format!("unexpected answer {m:?}"))
}

/// One consistent state of a listened query.
#[derive(Clone, Debug, PartialEq)]
pub struct ListenSnapshot {
    /// Every target of the connection is consistent at this version.
    pub version: u64,
    /// The whole current result, in query order.
    pub documents: Vec<Document>,
    /// The changes the relay sent since the previous snapshot, as sent.
    pub changed: Vec<DocumentChange>,
    /// Whether the relay replaced the result (a `Reset`) instead of sending a delta.
    pub reset: bool,
}

type Reply = Result<ServerMessage, ClientError>;
type SnapshotTx = mpsc::UnboundedSender<Result<ListenSnapshot, ClientError>>;

/// One listened query, as the reader task keeps it.
struct Target {
    tx: SnapshotTx,
    /// Orders the documents of deltas into the result.
    matcher: Matcher,
    /// The result as of the last snapshot delivered.
    docs: Vec<Document>,
    /// Changes received since that snapshot; after a `Reset`, only the reset and what
    /// followed it.
    buffered: Vec<DocumentChange>,
    /// `Some(n)`: a `Reset` arrived; its documents are the first `n` of `buffered`.
    reset: Option<usize>,
    /// A `TargetChange` arrived since the last snapshot (possibly an empty one).
    dirty: bool,
}

impl Target {
    /// Applies the buffered changes; the snapshot to deliver at `version`.
    fn take_snapshot(&mut self, version: u64) -> ListenSnapshot {
        let changed = std::mem::take(&mut self.buffered);
        let reset = self.reset.take();
        let mut rest = changed.as_slice();
        if let Some(n) = reset {
            // A reset comes in query order: keep the relay's order as it is.
            self.docs = changed[..n]
                .iter()
                .filter_map(|c| match c {
                    DocumentChange::Upsert(d) => Some(d.clone()),
                    DocumentChange::Remove(_) => None,
                })
                .collect();
            rest = &changed[n..];
        }
        for c in rest {
            let name = match c {
                DocumentChange::Upsert(d) => &d.name,
                DocumentChange::Remove(n) => n,
            };
            if let Some(p) = self.docs.iter().position(|d| d.name == *name) {
                self.docs.remove(p);
            }
            if let DocumentChange::Upsert(d) = c {
                let p = self
                    .docs
                    .partition_point(|x| self.matcher.compare(x, d) == std::cmp::Ordering::Less);
                self.docs.insert(p, d.clone());
            }
        }
        self.dirty = false;
        ListenSnapshot {
            version,
            documents: self.docs.clone(),
            changed,
            reset: reset.is_some(),
        }
    }
}

#[derive(Default)]
struct State {
    /// Why the connection ended, once it has: every later request fails with it.
    closed: Option<ClientError>,
    /// The last connection-level `Error` (request and target ids zero); the relay usually
    /// closes the socket after one, and it is the better explanation than `Closed`.
    conn_error: Option<ClientError>,
    pending: HashMap<u64, oneshot::Sender<Reply>>,
    /// Pings waiting for their `Heartbeat`, by nonce.
    pings: HashMap<u64, oneshot::Sender<u64>>,
    targets: HashMap<u32, Target>,
}

/// State shared by the client handles and the reader task.
struct Shared {
    state: Mutex<State>,
    /// When the last frame arrived (heartbeats included): a dead link shows as silence.
    last_seen: Mutex<Instant>,
    /// Becomes true when the reader task has ended.
    ended: watch::Sender<bool>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("client state lock")
    }

    fn closed_error(&self) -> ClientError {
        self.lock().closed.clone().unwrap_or(ClientError::Closed)
    }

    /// Ends the connection: fails every waiting request and listener with the reason.
    fn finish(&self, err: ClientError) {
        let mut st = self.lock();
        let reason = st.conn_error.take().unwrap_or(err);
        let reason = st.closed.get_or_insert(reason).clone();
        for (_, tx) in st.pending.drain() {
            let _ = tx.send(Err(reason.clone()));
        }
        st.pings.clear();
        for (_, t) in st.targets.drain() {
            let _ = t.tx.send(Err(reason.clone()));
        }
        drop(st);
        self.ended.send_replace(true);
    }

    /// Routes one frame from the relay.
    fn route(&self, msg: ServerMessage) {
        let mut st = self.lock();
        match msg {
            ServerMessage::GetResult { request_id, .. }
            | ServerMessage::QueryResult { request_id, .. }
            | ServerMessage::AggregationResult { request_id, .. }
            | ServerMessage::WriteResult { request_id, .. } => {
                if let Some(tx) = st.pending.remove(&request_id) {
                    let _ = tx.send(Ok(msg));
                }
            }
            ServerMessage::Error {
                request_id,
                target_id,
                code,
                message,
            } => {
                let err = ClientError::Server { code, message };
                if request_id != 0 {
                    if let Some(tx) = st.pending.remove(&request_id) {
                        let _ = tx.send(Err(err));
                    }
                } else if target_id != 0 {
                    if let Some(t) = st.targets.remove(&target_id) {
                        let _ = t.tx.send(Err(err));
                    }
                } else {
                    tracing::debug!(error = %err, "connection error from the relay");
                    st.conn_error = Some(err);
                }
            }
            ServerMessage::TargetChange {
                target_id,
                kind,
                changes,
            } => {
                // Frames for a target stopped a moment ago are still in flight: ignore them.
                if let Some(t) = st.targets.get_mut(&target_id) {
                    if kind == TargetChangeKind::Reset {
                        t.buffered = changes;
                        t.reset = Some(t.buffered.len());
                    } else {
                        t.buffered.extend(changes);
                    }
                    t.dirty = true;
                }
            }
            ServerMessage::Snapshot { version } => {
                let mut gone = Vec::new();
                for (id, t) in st.targets.iter_mut().filter(|(_, t)| t.dirty) {
                    let snap = t.take_snapshot(version);
                    if t.tx.send(Ok(snap)).is_err() {
                        gone.push(*id);
                    }
                }
                for id in gone {
                    st.targets.remove(&id);
                }
            }
            ServerMessage::Heartbeat { version, nonce } => {
                if nonce != 0 {
                    if let Some(tx) = st.pings.remove(&nonce) {
                        let _ = tx.send(version);
                    }
                }
            }
            ServerMessage::Welcome { .. } => {
                st.conn_error = Some(ClientError::Protocol("a second Welcome".into()));
            }
        }
    }
}

type WsStream =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Reads frames until the socket ends. Silence for three heartbeat intervals means a dead
/// link (docs/protocol.md §2.3): a socket can stay open while nothing gets through.
async fn read_loop(
    shared: Arc<Shared>,
    mut stream: futures_util::stream::SplitStream<WsStream>,
    heartbeat: Duration,
) {
    let silence = if heartbeat.is_zero() {
        // A relay that announces no heartbeat cannot be judged by silence.
        Duration::from_secs(365 * 24 * 3600)
    } else {
        heartbeat.saturating_mul(3).max(Duration::from_millis(100))
    };
    let end = loop {
        let Ok(msg) = tokio::time::timeout(silence, stream.next()).await else {
            break ClientError::Io(format!(
                "nothing from the relay for {silence:?} (three heartbeats): the connection is dead"
            ));
        };
        *shared.last_seen.lock().expect("last seen lock") = Instant::now();
        match msg {
            Some(Ok(Message::Binary(b))) => match decode_server(&b) {
                Ok(m) => shared.route(m),
                Err(e) => break ClientError::Protocol(format!("undecodable frame: {e}")),
            },
            Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
            Some(Ok(Message::Text(_))) => {
                break ClientError::Protocol("the relay sent a text frame".into())
            }
            Some(Ok(Message::Close(_))) | None => break ClientError::Closed,
            Some(Err(e)) => break ClientError::Io(e.to_string()),
        }
    };
    shared.finish(end);
}

async fn write_loop(
    shared: Arc<Shared>,
    mut sink: futures_util::stream::SplitSink<WsStream, Message>,
    mut rx: mpsc::UnboundedReceiver<Message>,
) {
    'outer: while let Some(first) = rx.recv().await {
        // Feed everything queued, then flush once: concurrent requests share syscalls.
        let mut next = Some(first);
        while let Some(m) = next.take() {
            let closing = matches!(m, Message::Close(_));
            if let Err(e) = sink.feed(m).await {
                shared.finish(ClientError::Io(e.to_string()));
                break 'outer;
            }
            if closing {
                break 'outer;
            }
            next = rx.try_recv().ok();
        }
        if let Err(e) = sink.flush().await {
            shared.finish(ClientError::Io(e.to_string()));
            break;
        }
    }
    let _ = sink.close().await;
}

struct Inner {
    shared: Arc<Shared>,
    out: mpsc::UnboundedSender<Message>,
    next_request: AtomicU64,
    next_target: AtomicU32,
    /// Batch ids start from the clock so a reconnect under the same client id never reuses
    /// an id the relay remembers (it would answer with the old batch's version).
    next_batch: AtomicU64,
    welcome_version: u64,
    indexes: IndexFile,
    heartbeat: Duration,
    reader: JoinHandle<()>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The writer ends by itself once `out` is dropped (it closes the socket).
        self.reader.abort();
    }
}

/// A connection to one database on a relay. Clones share the connection.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("welcome_version", &self.inner.welcome_version)
            .finish_non_exhaustive()
    }
}

fn io(e: impl std::fmt::Display) -> ClientError {
    ClientError::Io(e.to_string())
}

fn clock_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_micros() as u64)
}

impl Client {
    /// Connects to `url` (`ws://host:port/v1/ws`), sends `Hello` and waits for `Welcome`;
    /// a refused handshake returns the relay's error.
    pub async fn connect(
        url: &str,
        database: &str,
        client_id: &str,
        token: &str,
    ) -> Result<Client, ClientError> {
        let config = WebSocketConfig::default()
            .read_buffer_size(READ_BUFFER_BYTES)
            .max_message_size(Some(MAX_FRAME_BYTES))
            .max_frame_size(Some(MAX_FRAME_BYTES));
        let (ws, _) = tokio_tungstenite::connect_async_with_config(url, Some(config), true)
            .await
            .map_err(io)?;
        let (mut sink, mut stream) = ws.split();
        let hello = encode_client(&ClientMessage::Hello {
            protocol_version: PROTOCOL_VERSION,
            database: database.to_owned(),
            client_id: client_id.to_owned(),
            token: token.to_owned(),
        });
        sink.send(Message::Binary(hello.into())).await.map_err(io)?;
        let first = tokio::time::timeout(HANDSHAKE_TIMEOUT, async {
            loop {
                match stream.next().await {
                    Some(Ok(Message::Binary(b))) => {
                        return decode_server(&b).map_err(|e| ClientError::Protocol(e.to_string()))
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                    Some(Ok(Message::Text(_))) => {
                        return Err(ClientError::Protocol("the relay sent a text frame".into()))
                    }
                    Some(Ok(Message::Close(_))) | None => return Err(ClientError::Closed),
                    Some(Err(e)) => return Err(io(e)),
                }
            }
        })
        .await
        .map_err(|_| ClientError::Io("no Welcome from the relay in time".into()))??;
        let (welcome_version, indexes, heartbeat_ms) = match first {
            ServerMessage::Welcome {
                version,
                indexes,
                heartbeat_ms,
                ..
            } => (version, indexes, heartbeat_ms),
            ServerMessage::Error { code, message, .. } => {
                let _ = sink.close().await;
                return Err(ClientError::Server { code, message });
            }
            other => return Err(unexpected(&other)),
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            last_seen: Mutex::new(Instant::now()),
            ended: watch::channel(false).0,
        });
        let (out, rx) = mpsc::unbounded_channel();
        let heartbeat = Duration::from_millis(u64::from(heartbeat_ms));
        let reader = tokio::spawn(read_loop(shared.clone(), stream, heartbeat));
        tokio::spawn(write_loop(shared.clone(), sink, rx));
        Ok(Client {
            inner: Arc::new(Inner {
                shared,
                out,
                next_request: AtomicU64::new(1),
                next_target: AtomicU32::new(1),
                next_batch: AtomicU64::new(clock_micros()),
                welcome_version,
                indexes,
                heartbeat,
                reader,
            }),
        })
    }

    /// The database's version when the connection opened.
    pub fn welcome_version(&self) -> u64 {
        self.inner.welcome_version
    }

    /// The database's index definitions, as the relay announced them.
    pub fn indexes(&self) -> IndexFile {
        self.inner.indexes.clone()
    }

    /// How often the relay heartbeats an idle connection.
    pub fn heartbeat_interval(&self) -> Duration {
        self.inner.heartbeat
    }

    /// When the last frame from the relay arrived.
    pub fn last_seen(&self) -> Instant {
        *self.inner.shared.last_seen.lock().expect("last seen lock")
    }

    /// Whether the connection has ended.
    pub fn is_closed(&self) -> bool {
        self.inner.shared.lock().closed.is_some()
    }

    /// A fresh batch id for `write_with_id`.
    pub fn next_batch_id(&self) -> u64 {
        self.inner.next_batch.fetch_add(1, Ordering::Relaxed)
    }

    fn send(&self, m: &ClientMessage) -> Result<(), ClientError> {
        let frame = encode_client(m);
        if frame.len() > MAX_FRAME_BYTES {
            // The relay would end the connection over it (docs/protocol.md §6.1).
            return Err(ClientError::server(
                ErrorCode::InvalidArgument,
                format!(
                    "the message is {} bytes encoded, over the frame limit of {MAX_FRAME_BYTES} bytes: split the batch",
                    frame.len()
                ),
            ));
        }
        self.inner
            .out
            .send(Message::Binary(frame.into()))
            .map_err(|_| self.inner.shared.closed_error())
    }

    async fn request(&self, build: impl FnOnce(u64) -> ClientMessage) -> Reply {
        let id = self.inner.next_request.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut st = self.inner.shared.lock();
            if let Some(e) = &st.closed {
                return Err(e.clone());
            }
            st.pending.insert(id, tx);
        }
        if let Err(e) = self.send(&build(id)) {
            self.inner.shared.lock().pending.remove(&id);
            return Err(e);
        }
        rx.await
            .unwrap_or_else(|_| Err(self.inner.shared.closed_error()))
    }

    /// Reads documents by name: each with its content or `None`, and the version read at.
    pub async fn get(
        &self,
        names: Vec<DocumentName>,
    ) -> Result<(Vec<(DocumentName, Option<Document>)>, u64), ClientError> {
        match self
            .request(|request_id| ClientMessage::Get { request_id, names })
            .await?
        {
            ServerMessage::GetResult {
                documents, version, ..
            } => Ok((documents, version)),
            other => Err(unexpected(&other)),
        }
    }

    /// Reads one document.
    pub async fn get_one(&self, name: &DocumentName) -> Result<Option<Document>, ClientError> {
        let (mut docs, _) = self.get(vec![name.clone()]).await?;
        match docs.pop() {
            Some((n, d)) if n == *name && docs.is_empty() => Ok(d),
            _ => Err(ClientError::Protocol(
                "a GetResult that does not answer the request".into(),
            )),
        }
    }

    /// Runs a query once: its documents in query order and the version read at.
    pub async fn query(&self, q: &Query) -> Result<(Vec<Document>, u64), ClientError> {
        let query = q.clone();
        match self
            .request(|request_id| ClientMessage::RunQuery { request_id, query })
            .await?
        {
            ServerMessage::QueryResult {
                documents, version, ..
            } => Ok((documents, version)),
            other => Err(unexpected(&other)),
        }
    }

    /// Runs aggregations over a query: values in `aggs` order and the version read at.
    pub async fn aggregate(
        &self,
        q: &Query,
        aggs: Vec<Aggregation>,
    ) -> Result<(Vec<Value>, u64), ClientError> {
        let query = q.clone();
        match self
            .request(|request_id| ClientMessage::RunAggregation {
                request_id,
                query,
                aggregations: aggs,
            })
            .await?
        {
            ServerMessage::AggregationResult {
                values, version, ..
            } => Ok((values, version)),
            other => Err(unexpected(&other)),
        }
    }

    /// Commits `mutations` atomically under a fresh batch id; the commit version.
    pub async fn write(&self, mutations: Vec<Mutation>) -> Result<u64, ClientError> {
        self.write_with_id(self.next_batch_id(), mutations, Vec::new())
            .await
    }

    /// Commits `mutations` under `batch_id` (a retry with the same id is applied once and
    /// answered with the original version), if every read in `reads` is unchanged (each
    /// document's `update_version` as read, `None` for absent; else `aborted`).
    pub async fn write_with_id(
        &self,
        batch_id: u64,
        mutations: Vec<Mutation>,
        reads: Vec<(DocumentName, Option<u64>)>,
    ) -> Result<u64, ClientError> {
        match self
            .request(|request_id| ClientMessage::Write {
                request_id,
                batch_id,
                mutations,
                reads,
            })
            .await?
        {
            ServerMessage::WriteResult {
                version,
                batch_id: b,
                ..
            } if b == batch_id => Ok(version),
            other => Err(unexpected(&other)),
        }
    }

    /// Runs `f` in an optimistic transaction: its reads are recorded and revalidated when
    /// its buffered writes commit. On `aborted` (a read changed, or `f` itself returned
    /// it), `f` runs again with a fresh [`Transaction`] after a randomized exponential
    /// backoff, at most `max_attempts` times in all. Any other error ends the transaction
    /// with that error.
    ///
    /// `f` gets the transaction handle by value (it is a cheap clone of shared state), so
    /// the future it returns can own it and be `Send`:
    /// `client.run_transaction(5, |tx| async move { let d = tx.get(&n).await?; tx.set(n, f); Ok(()) })`.
    pub async fn run_transaction<T, F, Fut>(
        &self,
        max_attempts: u32,
        mut f: F,
    ) -> Result<T, ClientError>
    where
        F: FnMut(Transaction) -> Fut,
        Fut: std::future::Future<Output = Result<T, ClientError>>,
    {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let tx = Transaction {
                client: self.clone(),
                state: Arc::new(Mutex::new(TxState::default())),
            };
            let result = match f(tx.clone()).await {
                Ok(v) => tx.commit().await.map(|_| v),
                Err(e) => Err(e),
            };
            match result {
                Err(e) if e.code() == Some(ErrorCode::Aborted) && attempt < max_attempts => {
                    tokio::time::sleep(backoff(attempt)).await;
                }
                other => return other,
            }
        }
    }

    /// Starts a real-time query. With `resume_version`, the relay sends only what changed
    /// since (or a reset when that is too old); the listener then starts from an empty
    /// result, so a caller that kept its documents uses [`Client::resume`] instead.
    pub async fn listen(
        &self,
        q: &Query,
        resume_version: Option<u64>,
    ) -> Result<Listener, ClientError> {
        self.start_listen(q, resume_version, Vec::new())
    }

    /// Resumes a real-time query whose result was `documents` at `version`: the first
    /// snapshot applies the relay's delta (or reset) to them.
    pub async fn resume(
        &self,
        q: &Query,
        version: u64,
        documents: Vec<Document>,
    ) -> Result<Listener, ClientError> {
        self.start_listen(q, Some(version), documents)
    }

    fn start_listen(
        &self,
        q: &Query,
        resume_version: Option<u64>,
        documents: Vec<Document>,
    ) -> Result<Listener, ClientError> {
        let target_id = self.inner.next_target.fetch_add(1, Ordering::Relaxed);
        // An invalid query is refused by the relay; its order is then irrelevant.
        let matcher = Matcher::new(validate(q).unwrap_or_else(|_| q.clone()));
        let (tx, rx) = mpsc::unbounded_channel();
        {
            let mut st = self.inner.shared.lock();
            if let Some(e) = &st.closed {
                return Err(e.clone());
            }
            st.targets.insert(
                target_id,
                Target {
                    tx,
                    matcher,
                    docs: documents,
                    buffered: Vec::new(),
                    reset: None,
                    dirty: false,
                },
            );
        }
        let sent = self.send(&ClientMessage::Listen {
            target_id,
            query: q.clone(),
            resume_version,
        });
        if let Err(e) = sent {
            self.inner.shared.lock().targets.remove(&target_id);
            return Err(e);
        }
        Ok(Listener {
            client: self.clone(),
            target_id,
            rx,
            failed: None,
            stopped: false,
        })
    }

    /// Round trip to the relay; the database's published version.
    pub async fn ping(&self) -> Result<u64, ClientError> {
        let nonce = self.inner.next_request.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut st = self.inner.shared.lock();
            if let Some(e) = &st.closed {
                return Err(e.clone());
            }
            st.pings.insert(nonce, tx);
        }
        self.send(&ClientMessage::Ping { nonce })?;
        rx.await.map_err(|_| self.inner.shared.closed_error())
    }

    /// Replaces the connection's auth token.
    pub fn refresh_token(&self, token: &str) -> Result<(), ClientError> {
        self.send(&ClientMessage::Auth {
            token: token.to_owned(),
        })
    }

    /// Closes the connection (for every clone) and waits briefly for the relay to close
    /// its side. Waiting requests and listeners fail with `Closed`.
    pub async fn close(self) {
        let shared = self.inner.shared.clone();
        {
            let mut st = shared.lock();
            st.closed.get_or_insert(ClientError::Closed);
        }
        let _ = self.inner.out.send(Message::Close(None));
        let mut ended = shared.ended.subscribe();
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, ended.wait_for(|e| *e)).await;
        shared.finish(ClientError::Closed);
    }
}

fn backoff(attempt: u32) -> Duration {
    let exp = BACKOFF_BASE.saturating_mul(1 << attempt.min(16));
    let cap = exp.min(BACKOFF_MAX);
    let mut r = [0u8; 8];
    let jitter = match getrandom::fill(&mut r) {
        Ok(()) => u64::from_le_bytes(r),
        Err(_) => clock_micros(),
    };
    // Uniform in [cap/2, cap): spreads colliding transactions apart.
    let half = cap.as_micros() as u64 / 2;
    Duration::from_micros(half + jitter % half.max(1))
}

/// A listened query. Dropping it stops the listen too.
#[derive(Debug)]
pub struct Listener {
    client: Client,
    target_id: u32,
    rx: mpsc::UnboundedReceiver<Result<ListenSnapshot, ClientError>>,
    /// The error that ended the target, returned again by later calls.
    failed: Option<ClientError>,
    stopped: bool,
}

impl Listener {
    /// The next snapshot of this query: the first one, then one per snapshot version
    /// that changed it. Fails when the relay refused or dropped the target, or the
    /// connection ended.
    pub async fn next(&mut self) -> Result<ListenSnapshot, ClientError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let r = match self.rx.recv().await {
            Some(r) => r,
            None => Err(self.client.inner.shared.closed_error()),
        };
        if let Err(e) = &r {
            self.failed = Some(e.clone());
        }
        r
    }

    pub fn target_id(&self) -> u32 {
        self.target_id
    }

    /// Stops the listen (`Unlisten`).
    pub async fn stop(mut self) {
        self.unlisten();
    }

    fn unlisten(&mut self) {
        if std::mem::replace(&mut self.stopped, true) {
            return;
        }
        let known = self
            .client
            .inner
            .shared
            .lock()
            .targets
            .remove(&self.target_id)
            .is_some();
        if known {
            let _ = self.client.send(&ClientMessage::Unlisten {
                target_id: self.target_id,
            });
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.unlisten();
    }
}

#[derive(Default)]
struct TxState {
    reads: Vec<(DocumentName, Option<u64>)>,
    mutations: Vec<Mutation>,
    /// Set once the attempt committed (or failed to): later writes would be lost.
    done: bool,
}

/// One attempt of a transaction: the reads it made and the writes it buffers. Clones share
/// the attempt.
#[derive(Clone)]
pub struct Transaction {
    client: Client,
    state: Arc<Mutex<TxState>>,
}

impl Transaction {
    fn lock(&self) -> std::sync::MutexGuard<'_, TxState> {
        self.state.lock().expect("transaction lock")
    }

    /// Reads a document and records the version read. Reads come before writes, as in
    /// Firestore; reading a document again that changed in between aborts the attempt.
    pub async fn get(&self, name: &DocumentName) -> Result<Option<Document>, ClientError> {
        if !self.lock().mutations.is_empty() {
            return Err(ClientError::server(
                ErrorCode::InvalidArgument,
                "a transaction must do all its reads before its writes",
            ));
        }
        let doc = self.client.get_one(name).await?;
        let version = doc.as_ref().map(|d| d.update_version);
        let mut st = self.lock();
        match st.reads.iter().find(|(n, _)| n == name) {
            Some((_, seen)) if *seen != version => {
                return Err(ClientError::server(
                    ErrorCode::Aborted,
                    format!("`{name}` changed between two reads of the transaction"),
                ))
            }
            Some(_) => {}
            None => st.reads.push((name.clone(), version)),
        }
        Ok(doc)
    }

    /// Buffers a `set` (overwrite).
    pub fn set(&self, name: DocumentName, fields: Map) {
        self.mutate(Mutation::set(name, fields));
    }

    /// Buffers a `set` with a merge mode.
    pub fn set_merge(&self, name: DocumentName, fields: Map, merge: SetMerge) {
        self.mutate(Mutation::set_merge(name, fields, merge));
    }

    /// Buffers an `update` of field paths (`None` deletes the field).
    pub fn update(&self, name: DocumentName, fields: Vec<(FieldPath, Option<Value>)>) {
        self.mutate(Mutation::update(name, fields));
    }

    /// Buffers a `delete`.
    pub fn delete(&self, name: DocumentName) {
        self.mutate(Mutation::delete(name));
    }

    /// Buffers any mutation (with transforms or preconditions).
    pub fn mutate(&self, m: Mutation) {
        let mut st = self.lock();
        assert!(!st.done, "a write to a transaction after it committed");
        st.mutations.push(m);
    }

    async fn commit(&self) -> Result<u64, ClientError> {
        let (mutations, reads) = {
            let mut st = self.lock();
            st.done = true;
            (
                std::mem::take(&mut st.mutations),
                std::mem::take(&mut st.reads),
            )
        };
        let batch = self.client.next_batch_id();
        self.client.write_with_id(batch, mutations, reads).await
    }
}

/// A fresh auto id (20 characters) from the operating system's random source.
pub fn auto_id() -> String {
    let mut buf = [0u8; 64];
    let mut at = buf.len();
    hearth_core::autoid::auto_id_from(|| {
        if at == buf.len() {
            getrandom::fill(&mut buf).expect("the operating system's random source is available");
            at = 0;
        }
        at += 1;
        buf[at - 1]
    })
}

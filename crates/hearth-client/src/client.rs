//! [`Client`]: a connection to one database on a relay. It opens with `Hello`/`Welcome`,
//! then any number of requests are in flight on it, each waiting for the answer the
//! reader task routes to it by request id.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::{SinkExt, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

use crate::connection::{read_loop, write_loop, Reply, Shared};
use crate::error::{io, unexpected, ClientError};
use crate::listener::{Listener, Target};
use hearth_core::document::Document;
use hearth_core::index::config::IndexFile;
use hearth_core::mutation::Mutation;
use hearth_core::path::DocumentName;
use hearth_core::protocol::codec::{decode_server, encode_client};
use hearth_core::protocol::{
    ClientMessage, ErrorCode, ServerMessage, MAX_FRAME_BYTES, PROTOCOL_VERSION,
};
use hearth_core::query::matcher::Matcher;
use hearth_core::query::model::{Aggregation, Query};
use hearth_core::query::validate::validate;
use hearth_core::value::Value;

/// Read buffer of the socket. tungstenite zero-fills its read buffer on every read, so a
/// small one keeps many idle connections cheap (TOOLCHAIN.md measured 128 KiB as 2-3x slower
/// fan-out).
const READ_BUFFER_BYTES: usize = 8 << 10;
/// How long `connect` waits for the `Welcome`.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `close` waits for the relay to close its side.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// What every clone of a [`Client`] shares.
struct Inner {
    /// The state the reader task routes answers into.
    shared: Arc<Shared>,
    /// The writer task's queue of frames.
    out: mpsc::UnboundedSender<Message>,
    /// The next request id (pings take their nonces from it too): unique on the
    /// connection, so every answer finds its request.
    next_request: AtomicU64,
    /// The next target id of a listen.
    next_target: AtomicU32,
    /// Batch ids start from the clock so a reconnect under the same client id never reuses
    /// an id the relay remembers (it would answer with the old batch's version).
    next_batch: AtomicU64,
    /// The database's version when the connection opened (from the `Welcome`).
    welcome_version: u64,
    /// The database's index definitions, as the `Welcome` announced them.
    indexes: IndexFile,
    /// The relay's heartbeat interval, by which the reader judges the link's silence.
    heartbeat: Duration,
    /// The reader task, aborted when the last clone is dropped.
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
    /// The connection every clone shares.
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("welcome_version", &self.inner.welcome_version)
            .finish_non_exhaustive()
    }
}

/// Microseconds since the epoch (1 if the clock is before it).
pub(crate) fn clock_micros() -> u64 {
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
        let shared = Arc::new(Shared::new());
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
        self.inner.shared.last_seen()
    }

    /// Whether the connection has ended.
    pub fn is_closed(&self) -> bool {
        self.inner.shared.is_closed()
    }

    /// A fresh batch id for `write_with_id`.
    pub fn next_batch_id(&self) -> u64 {
        self.inner.next_batch.fetch_add(1, Ordering::Relaxed)
    }

    /// The state the reader task routes answers into.
    pub(crate) fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    /// Queues a frame for the writer task; refuses one over the frame limit.
    pub(crate) fn send(&self, m: &ClientMessage) -> Result<(), ClientError> {
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

    /// Sends the request `build` makes with a fresh request id, and waits for its answer.
    async fn request(&self, build: impl FnOnce(u64) -> ClientMessage) -> Reply {
        let id = self.inner.next_request.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.inner.shared.add_pending(id, tx)?;
        if let Err(e) = self.send(&build(id)) {
            self.inner.shared.remove_pending(id);
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
    ///
    /// A write answered `unavailable` may or may not have committed, and the relay then
    /// applies no later write of this connection (so none commits out of order,
    /// `docs/protocol.md` §7): connect again, and send the writes that were not
    /// acknowledged again, in order, under their batch ids (`write_with_id`); the relay
    /// answers a batch that did commit with its first version, never applying it twice.
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
        self.inner
            .shared
            .add_target(target_id, Target::new(tx, matcher, documents))?;
        let sent = self.send(&ClientMessage::Listen {
            target_id,
            query: q.clone(),
            resume_version,
        });
        if let Err(e) = sent {
            self.inner.shared.remove_target(target_id);
            return Err(e);
        }
        Ok(Listener::new(self.clone(), target_id, rx))
    }

    /// Round trip to the relay; the database's published version.
    pub async fn ping(&self) -> Result<u64, ClientError> {
        let nonce = self.inner.next_request.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.inner.shared.add_ping(nonce, tx)?;
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
        shared.close();
        let _ = self.inner.out.send(Message::Close(None));
        let mut ended = shared.ended();
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, ended.wait_for(|e| *e)).await;
        shared.finish(ClientError::Closed);
    }
}

//! HTTP routes and one WebSocket connection: handshake, request dispatch, the writer task
//! with heartbeats, and the drain on shutdown.
//!
//! Architecture invariant: nothing a client sends can panic the relay or disturb another
//! connection: undecodable or oversized frames end only their own connection, with a typed
//! error first.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use futures_util::StreamExt;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::{watch, Semaphore};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::auth::AuthContext;
use super::commit::{WriteError, WriteRequest};
use super::fanout::Start;
use super::outbound::{Outbound, WsIo};
use super::store::valid_database_name;
use super::{Database, Relay};
use hearth_core::kv::block_on_ready;
use hearth_core::protocol::codec::{decode_client, encode_server};
use hearth_core::protocol::{
    ClientMessage, ErrorCode, ServerMessage, MAX_FRAME_BYTES, PROTOCOL_VERSION,
};
use hearth_core::query::execute::{fetch, run_aggregation};
use hearth_core::query::model::Source;
use hearth_core::query::validate::{validate, QueryError};

/// Whether document `name` can belong to a query over `source` (a resume never names
/// documents of other collections).
fn in_source(source: &Source, name: &hearth_core::path::DocumentName) -> bool {
    match source {
        Source::Collection(c) => c.contains(name),
        Source::CollectionGroup(g) => name.collection_id() == g,
    }
}

#[derive(Clone)]
struct AppState {
    relay: Arc<Relay>,
    stop: watch::Receiver<bool>,
    slots: Arc<Semaphore>,
}

/// The relay's routes: `/healthz`, `/metrics`, `/v1/ws`. `slots` caps connections; when all
/// its permits are back, every connection has finished.
pub fn router(relay: Arc<Relay>, stop: watch::Receiver<bool>, slots: Arc<Semaphore>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/v1/ws", get(upgrade))
        .fallback(get(static_file))
        .with_state(AppState { relay, stop, slots })
}

/// Serves a file of `--static-dir` (the demo app and the built package), read-only; paths
/// with `..` or hidden segments are refused.
async fn static_file(State(s): State<AppState>, uri: axum::http::Uri) -> Response {
    let Some(dir) = s.relay.config.static_dir.clone() else {
        return (StatusCode::NOT_FOUND, "not found\n").into_response();
    };
    let path = uri.path().trim_start_matches('/');
    if path
        .split('/')
        .any(|seg| seg == ".." || seg.starts_with('.'))
    {
        return (StatusCode::BAD_REQUEST, "bad path\n").into_response();
    }
    let mut file = dir.join(path);
    if path.is_empty() || path.ends_with('/') {
        file = file.join("index.html");
    }
    let content_type = match file.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript",
        Some("wasm") => "application/wasm",
        Some("json") => "application/json",
        Some("css") => "text/css",
        Some("ts") => "text/plain",
        _ => "application/octet-stream",
    };
    match tokio::task::spawn_blocking(move || std::fs::read(&file))
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)))
    {
        Ok(body) => (
            [
                ("content-type", content_type),
                ("cache-control", "no-cache"),
            ],
            body,
        )
            .into_response(),
        Err(_) => (StatusCode::NOT_FOUND, "not found\n").into_response(),
    }
}

async fn healthz(State(s): State<AppState>) -> Response {
    if s.relay.ready.load(Ordering::Acquire) && !*s.stop.borrow() {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n").into_response()
    }
}

async fn metrics(State(s): State<AppState>) -> Response {
    (
        [("content-type", "text/plain; version=0.0.4")],
        s.relay.metrics.render(),
    )
        .into_response()
}

/// Whether a header lists `token` (comma-separated, any case).
fn header_has(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers.get_all(name).iter().any(|v| {
        v.to_str()
            .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    })
}

/// The WebSocket handshake (RFC 6455 §4.2). The upgraded connection is served on the bare
/// TCP socket: its frames are written in place ([`Outbound`]), and a WebSocket reader
/// decodes what the client sends.
async fn upgrade(
    State(s): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    mut req: Request,
) -> Response {
    let h = req.headers();
    if req.method() != Method::GET
        || !header_has(h, header::CONNECTION, "upgrade")
        || !header_has(h, header::UPGRADE, "websocket")
    {
        return (
            StatusCode::UPGRADE_REQUIRED,
            [(header::UPGRADE, "websocket")],
            "this endpoint speaks WebSocket only\n",
        )
            .into_response();
    }
    if h.get(header::SEC_WEBSOCKET_VERSION)
        .is_none_or(|v| v.as_bytes() != b"13")
    {
        return (
            StatusCode::UPGRADE_REQUIRED,
            [(header::SEC_WEBSOCKET_VERSION, "13")],
            "WebSocket version 13 is required\n",
        )
            .into_response();
    }
    let Some(key) = h.get(header::SEC_WEBSOCKET_KEY) else {
        return (StatusCode::BAD_REQUEST, "Sec-WebSocket-Key is missing\n").into_response();
    };
    let accept = derive_accept_key(key.as_bytes());
    let Some(on_upgrade) = req.extensions_mut().remove::<hyper::upgrade::OnUpgrade>() else {
        return (
            StatusCode::BAD_REQUEST,
            "this connection cannot be upgraded\n",
        )
            .into_response();
    };
    let Ok(permit) = s.slots.clone().try_acquire_owned() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "too many connections\n").into_response();
    };
    tokio::spawn(async move {
        let upgraded = match on_upgrade.await {
            Ok(u) => u,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "WebSocket upgrade failed");
                return;
            }
        };
        let Ok(parts) = upgraded.downcast::<TokioIo<TcpStream>>() else {
            tracing::error!(%peer, "an upgraded connection is not a TCP stream");
            return;
        };
        let relay = s.relay.clone();
        relay.metrics.connection_opened();
        let tcp = parts.io.into_inner();
        Connection::serve(relay.clone(), tcp, parts.read_buf, s.stop.clone(), peer).await;
        relay.metrics.connection_closed();
        drop(permit);
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "upgrade")
        .header(header::UPGRADE, "websocket")
        .header(header::SEC_WEBSOCKET_ACCEPT, accept)
        .body(axum::body::Body::empty())
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn error(
    request_id: u64,
    target_id: u32,
    code: ErrorCode,
    message: impl Into<String>,
) -> ServerMessage {
    ServerMessage::Error {
        request_id,
        target_id,
        code,
        message: message.into(),
    }
}

struct Connection {
    relay: Arc<Relay>,
    id: u64,
    db: Arc<Database>,
    client_id: String,
    auth: AuthContext,
    out: Outbound,
    /// In-flight write acknowledgements, awaited before the socket closes on shutdown.
    writes: tokio::task::JoinSet<()>,
}

/// Sends `reply` and closes: the end of a connection refused at its handshake.
async fn refuse(out: &Outbound, reply: Bytes) {
    out.send(reply);
    out.close(false);
    let _ = tokio::time::timeout(CLOSE_FLUSH, out.flush()).await;
}

impl Connection {
    async fn serve(
        relay: Arc<Relay>,
        tcp: TcpStream,
        read_buf: Bytes,
        mut stop: watch::Receiver<bool>,
        peer: SocketAddr,
    ) {
        let id = relay.next_connection_id();
        let (read, write) = tcp.into_split();
        let out = Outbound::new(
            id,
            write,
            relay.config.max_outbound_bytes,
            relay.metrics.clone(),
        );
        let config = WebSocketConfig::default()
            .max_message_size(Some(MAX_FRAME_BYTES))
            .max_frame_size(Some(MAX_FRAME_BYTES))
            .read_buffer_size(4096);
        let mut stream = WebSocketStream::from_partially_read(
            WsIo {
                read,
                out: out.clone(),
            },
            read_buf.to_vec(),
            Role::Server,
            Some(config),
        )
        .await;
        // Handshake: the first frame must be a Hello, within ten seconds.
        let first = tokio::time::timeout(Duration::from_secs(10), stream.next()).await;
        let hello = match first {
            Ok(Some(Ok(Message::Binary(b)))) => decode_client(&b),
            _ => return,
        };
        let reject = |code, msg: String| Bytes::from(encode_server(&error(0, 0, code, msg)));
        let (database, client_id, token) = match hello {
            Ok(ClientMessage::Hello {
                protocol_version,
                database,
                client_id,
                token,
            }) => {
                if protocol_version != PROTOCOL_VERSION {
                    let msg = format!("protocol version {protocol_version} is not supported; this relay speaks {PROTOCOL_VERSION}");
                    refuse(&out, reject(ErrorCode::FailedPrecondition, msg)).await;
                    return;
                }
                (database, client_id, token)
            }
            Ok(_) => {
                let msg = "the first message must be a Hello".into();
                refuse(&out, reject(ErrorCode::FailedPrecondition, msg)).await;
                return;
            }
            Err(e) => {
                relay.metrics.protocol_error("malformed");
                let msg = format!("malformed frame: {e}");
                refuse(&out, reject(ErrorCode::InvalidArgument, msg)).await;
                return;
            }
        };
        if !valid_database_name(&database) || client_id.is_empty() || client_id.len() > 256 {
            let msg = format!("invalid database name `{database}` or client id: a database name is 1 to 64 of [A-Za-z0-9_-], a client id 1 to 256 bytes");
            refuse(&out, reject(ErrorCode::InvalidArgument, msg)).await;
            return;
        }
        let auth = match relay.auth.verify(&token, now_unix()) {
            Ok(a) => a,
            Err(e) => {
                refuse(&out, reject(ErrorCode::Unauthenticated, e.to_string())).await;
                return;
            }
        };
        let db = match relay.database(&database) {
            Ok(db) => db,
            Err(e) => {
                let code = match e {
                    super::DatabaseError::NotServed { .. } => ErrorCode::NotFound,
                    super::DatabaseError::TooMany { .. } => ErrorCode::ResourceExhausted,
                    super::DatabaseError::Store(_) => ErrorCode::Unavailable,
                };
                refuse(&out, reject(code, e.to_string())).await;
                return;
            }
        };
        let welcome = ServerMessage::Welcome {
            protocol_version: PROTOCOL_VERSION,
            version: db.fanout.published.load(Ordering::Acquire),
            indexes: db.catalog.read().expect("catalog lock").file().clone(),
            heartbeat_ms: relay.config.heartbeat.as_millis() as u32,
        };
        out.send_message(&welcome);
        tracing::debug!(conn = id, %peer, database = %database, "connection open");
        let (closing_tx, closing_rx) = watch::channel(false);
        let flusher = tokio::spawn(flusher(out.clone(), db.clone(), relay.clone(), closing_rx));
        let mut conn = Connection {
            relay: relay.clone(),
            id,
            db: db.clone(),
            client_id,
            auth,
            out: out.clone(),
            writes: tokio::task::JoinSet::new(),
        };
        let overflow = out.overflow();
        tokio::pin!(overflow);
        let failed = out.failed();
        tokio::pin!(failed);
        // Whether the client closed (the reader answered its Close already).
        let mut peer_closed = false;
        loop {
            tokio::select! {
                _ = &mut overflow => break,
                _ = &mut failed => break,
                msg = stream.next() => {
                    match msg {
                        Some(Ok(Message::Binary(b))) => {
                            if !conn.handle(&b).await {
                                break;
                            }
                        }
                        Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                        Some(Ok(Message::Text(_))) => {
                            relay.metrics.protocol_error("text_frame");
                            out.send_message(&error(0, 0, ErrorCode::InvalidArgument, "text frames are not part of the protocol: send binary frames"));
                            break;
                        }
                        Some(Ok(Message::Close(_))) => {
                            // The reader writes its Close reply on its next poll; after it,
                            // the stream ends at once.
                            let _ = tokio::time::timeout(Duration::from_secs(1), stream.next()).await;
                            // Nothing may follow the Close reply (RFC 6455 §5.5.1).
                            out.close(true);
                            peer_closed = true;
                            break;
                        }
                        None => {
                            peer_closed = true;
                            break;
                        }
                        Some(Err(e)) => {
                            relay.metrics.protocol_error("transport");
                            out.send_message(&error(0, 0, ErrorCode::InvalidArgument, format!("bad frame: {e}")));
                            break;
                        }
                    }
                }
                _ = stop.changed() => break,
            }
            if out.is_overflowed() {
                break;
            }
        }
        // Drain: acknowledge every write already submitted, then close.
        while conn.writes.join_next().await.is_some() {}
        let n = db.fanout.drop_connection(id);
        for _ in 0..n {
            relay.metrics.listen_stopped(&db.name);
        }
        let _ = closing_tx.send(peer_closed);
        let _ = flusher.await;
        if !peer_closed && !out.is_overflowed() {
            // Half-close, then read what the client still sends until it closes too (at
            // most a second): closing a socket with unread input resets the connection,
            // and the client could lose the error and Close frames just written.
            out.shutdown_write();
            let read = &mut stream.get_mut().read;
            let _ = tokio::time::timeout(Duration::from_secs(1), async {
                let mut sink = [0u8; 4096];
                while matches!(tokio::io::AsyncReadExt::read(read, &mut sink).await, Ok(n) if n > 0)
                {
                }
            })
            .await;
        }
        tracing::debug!(conn = id, "connection closed");
    }

    fn send(&self, m: &ServerMessage) {
        self.out.send_message(m);
    }

    /// Sends a reply, or a `resource-exhausted` error when it would not fit in one frame.
    fn reply(&self, request_id: u64, m: &ServerMessage) {
        let frame = encode_server(m);
        if frame.len() > MAX_FRAME_BYTES {
            self.send(&error(
                request_id,
                0,
                ErrorCode::ResourceExhausted,
                format!(
                    "the result is {} bytes, over the {MAX_FRAME_BYTES}-byte frame limit: add a limit or a projection (select)",
                    frame.len()
                ),
            ));
        } else {
            self.out.send(Bytes::from(frame));
        }
    }

    /// Handles one frame; false ends the connection.
    async fn handle(&mut self, frame: &[u8]) -> bool {
        let msg = match decode_client(frame) {
            Ok(m) => m,
            Err(e) => {
                self.relay.metrics.protocol_error("malformed");
                self.send(&error(0, 0, e.code(), format!("malformed frame: {e}")));
                return false;
            }
        };
        let (request_id, target_id) = match &msg {
            ClientMessage::Get { request_id, .. }
            | ClientMessage::RunQuery { request_id, .. }
            | ClientMessage::RunAggregation { request_id, .. }
            | ClientMessage::Write { request_id, .. } => (*request_id, 0),
            ClientMessage::Listen { target_id, .. } => (0, *target_id),
            _ => (0, 0),
        };
        if !matches!(msg, ClientMessage::Auth { .. } | ClientMessage::Ping { .. }) {
            if let Some(exp) = self.auth.expires_at {
                if now_unix() >= exp {
                    self.send(&error(request_id, target_id, ErrorCode::Unauthenticated, format!("auth token expired at {exp} (unix seconds): refresh it with an Auth message")));
                    return true;
                }
            }
        }
        match msg {
            ClientMessage::Hello { .. } => {
                self.send(&error(
                    0,
                    0,
                    ErrorCode::FailedPrecondition,
                    "Hello may only be the first message",
                ));
            }
            ClientMessage::Auth { token } => match self.relay.auth.verify(&token, now_unix()) {
                Ok(a) => self.auth = a,
                Err(e) => self.send(&error(0, 0, ErrorCode::Unauthenticated, e.to_string())),
            },
            ClientMessage::Ping { nonce } => {
                let version = self.db.fanout.published.load(Ordering::Acquire);
                self.send(&ServerMessage::Heartbeat { version, nonce });
            }
            ClientMessage::Get { request_id, names } => {
                let reply = self.get(request_id, names);
                self.reply(request_id, &reply);
            }
            ClientMessage::RunQuery { request_id, query } => {
                let reply = match self.query_with_auto_index(&query).await {
                    Ok((documents, version)) => ServerMessage::QueryResult {
                        request_id,
                        version,
                        documents,
                    },
                    Err(e) => error(request_id, 0, e.code(), e.to_string()),
                };
                self.reply(request_id, &reply);
            }
            ClientMessage::RunAggregation {
                request_id,
                query,
                aggregations,
            } => {
                let mut attempt = 0;
                let reply = loop {
                    match self.aggregate(&query, &aggregations) {
                        Ok((values, version)) => {
                            break ServerMessage::AggregationResult {
                                request_id,
                                version,
                                values,
                            }
                        }
                        Err(e) => {
                            attempt += 1;
                            if attempt < 8 && self.relay.auto_index(&self.db, &e).await {
                                continue;
                            }
                            break error(request_id, 0, e.code(), e.to_string());
                        }
                    }
                };
                self.send(&reply);
            }
            ClientMessage::Write {
                request_id,
                batch_id,
                mutations,
                reads,
            } => self.write(request_id, batch_id, mutations, reads),
            ClientMessage::Listen {
                target_id,
                query,
                resume_version,
            } => {
                let mut attempt = 0;
                loop {
                    match self.listen(target_id, &query, resume_version) {
                        Ok(()) => {
                            self.relay.metrics.listen_started(&self.db.name);
                            break;
                        }
                        Err(e) => {
                            attempt += 1;
                            if attempt < 8 && self.relay.auto_index(&self.db, &e).await {
                                continue;
                            }
                            self.send(&error(0, target_id, e.code(), e.to_string()));
                            break;
                        }
                    }
                }
            }
            ClientMessage::Unlisten { target_id } => {
                if self.db.fanout.unlisten(self.id, target_id) {
                    self.relay.metrics.listen_stopped(&self.db.name);
                }
            }
        }
        true
    }

    fn get(&self, request_id: u64, names: Vec<hearth_core::path::DocumentName>) -> ServerMessage {
        let result = (|| -> Result<ServerMessage, String> {
            let snap = self.relay.store.snapshot().map_err(|e| e.to_string())?;
            let view = snap.database(&self.db.name);
            let version = view.version().map_err(|e| e.to_string())?;
            let mut documents = Vec::with_capacity(names.len());
            for n in names {
                let d = block_on_ready(fetch(&view, &n)).map_err(|e| e.to_string())?;
                documents.push((n, d));
            }
            Ok(ServerMessage::GetResult {
                request_id,
                version,
                documents,
            })
        })();
        result.unwrap_or_else(|e| error(request_id, 0, ErrorCode::Unavailable, e))
    }

    async fn query_with_auto_index(
        &self,
        query: &hearth_core::query::model::Query,
    ) -> Result<(Vec<hearth_core::document::Document>, u64), QueryError> {
        let q = validate(query)?;
        // An OR query may need several indexes: create them one by one.
        for _ in 0..8 {
            match self.relay.query_latest(&self.db, &q) {
                Err(e) if self.relay.auto_index(&self.db, &e).await => continue,
                other => return other,
            }
        }
        self.relay.query_latest(&self.db, &q)
    }

    fn aggregate(
        &self,
        query: &hearth_core::query::model::Query,
        aggs: &[hearth_core::query::model::Aggregation],
    ) -> Result<(Vec<hearth_core::value::Value>, u64), QueryError> {
        let storage = |e: super::store::StoreError| {
            QueryError::Storage(hearth_core::kv::KvError(e.to_string()))
        };
        let snap = self.relay.store.snapshot().map_err(storage)?;
        let view = snap.database(&self.db.name);
        let version = view.version().map_err(storage)?;
        let catalog = self.db.catalog.read().expect("catalog lock").clone();
        let values = block_on_ready(run_aggregation(&view, &catalog, query, aggs))?;
        Ok((values, version))
    }

    fn write(
        &mut self,
        request_id: u64,
        batch_id: u64,
        mutations: Vec<hearth_core::mutation::Mutation>,
        reads: Vec<(hearth_core::path::DocumentName, Option<u64>)>,
    ) {
        for m in &mutations {
            if let Err(e) = m.validate() {
                let e = WriteError::from(e);
                self.send(&error(request_id, 0, e.code, e.message));
                return;
            }
        }
        if mutations.is_empty() && reads.is_empty() {
            let version = self.db.fanout.published.load(Ordering::Acquire);
            self.send(&ServerMessage::WriteResult {
                request_id,
                batch_id,
                version,
            });
            return;
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let req = WriteRequest {
            client_id: self.client_id.clone(),
            batch_id,
            mutations,
            reads,
            reply: tx,
            enqueued: Instant::now(),
        };
        if self.relay.committer.submit(&self.db.name, req).is_err() {
            self.send(&error(
                request_id,
                0,
                ErrorCode::ResourceExhausted,
                format!(
                    "too many writes in flight for database `{}` (limit {}); retry with backoff",
                    self.db.name, self.relay.config.max_inflight_writes
                ),
            ));
            return;
        }
        let out = self.out.clone();
        let metrics = self.relay.metrics.clone();
        let started = Instant::now();
        self.writes.spawn(async move {
            let reply = match rx.await {
                Ok(Ok(version)) => ServerMessage::WriteResult {
                    request_id,
                    batch_id,
                    version,
                },
                Ok(Err(e)) => error(request_id, 0, e.code, e.message),
                Err(_) => error(
                    request_id,
                    0,
                    ErrorCode::Unavailable,
                    "the relay is shutting down",
                ),
            };
            metrics.commit_latency(started.elapsed().as_secs_f64());
            out.send_message(&reply);
        });
        // Reap finished acknowledgements so the set stays small.
        while self.writes.try_join_next().is_some() {}
    }

    fn listen(
        &self,
        target_id: u32,
        query: &hearth_core::query::model::Query,
        resume: Option<u64>,
    ) -> Result<(), QueryError> {
        let q = validate(query)?;
        hearth_core::query::validate::check_listenable(&q)?;
        let source = q.source.clone();
        let relay = self.relay.clone();
        let db = self.db.clone();
        let store = self.relay.store.clone();
        let name = self.db.name.clone();
        self.db.fanout.listen(
            &self.out,
            target_id,
            q,
            |q| relay.query_latest(&db, q),
            move |at| match resume {
                None => Start::Fresh,
                Some(r) => {
                    let changed = store.snapshot().ok().and_then(|snap| {
                        let view = snap.database(&name);
                        if r == at {
                            return Some(Vec::new());
                        }
                        if r > at {
                            // A version this relay never had: the client's state is unknown.
                            return None;
                        }
                        let oldest = view.oldest_change().ok()??;
                        if oldest > r + 1 {
                            return None;
                        }
                        let mut names: Vec<_> = view
                            .changes_since(r)
                            .ok()?
                            .into_iter()
                            .filter(|(v, n)| *v <= at && in_source(&source, n))
                            .map(|(_, n)| n)
                            .collect();
                        names.sort();
                        names.dedup();
                        Some(names)
                    });
                    Start::Resume(changed)
                }
            },
        )
    }
}

/// How long a closing connection may take to write what is left.
const CLOSE_FLUSH: Duration = Duration::from_secs(5);

/// How long a slow consumer that was dropped may take to read its error.
const ABANDON_FLUSH: Duration = Duration::from_millis(500);

/// Writes the backlog as the socket drains, sends heartbeats when the connection is idle,
/// and closes it when asked (`closing` carries whether the client closed first) or when it
/// overflowed.
async fn flusher(
    out: Outbound,
    db: Arc<Database>,
    relay: Arc<Relay>,
    mut closing: watch::Receiver<bool>,
) {
    let heartbeat = relay.config.heartbeat;
    let mut tick = tokio::time::interval(heartbeat);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let overflow = out.overflow();
    tokio::pin!(overflow);
    let abandon = |out: &Outbound| {
        relay.metrics.slow_consumer_dropped();
        out.abandon(Bytes::from(encode_server(&error(
            0,
            0,
            ErrorCode::ResourceExhausted,
            "slow consumer: too many undelivered changes; reconnect and resume from your last snapshot version",
        ))));
    };
    loop {
        tokio::select! {
            // An overflow is seen first: the connection closes because of it.
            biased;
            _ = &mut overflow => {
                abandon(&out);
                break;
            }
            r = closing.changed() => {
                let peer_closed = r.is_ok() && *closing.borrow();
                out.close(peer_closed);
                break;
            }
            // Restartable: a tick that wins drops it, and the next pass re-checks the backlog.
            // A peer that stopped reading holds it; overflow abandons, a close still closes.
            r = async {
                if out.backlog_bytes() == 0 {
                    out.backlogged().await;
                }
                out.flush().await
            } => if r.is_err() {
                return;
            },
            _ = tick.tick() => {
                // A heartbeat on a tick that finds the connection silent for a whole interval.
                if !out.take_wrote() {
                    let version = db.fanout.published.load(Ordering::Acquire);
                    out.send_message(&ServerMessage::Heartbeat { version, nonce: 0 });
                }
            }
        }
    }
    // A slow consumer gets a moment to take its error; others get CLOSE_FLUSH.
    let limit = if out.is_overflowed() {
        ABANDON_FLUSH
    } else {
        CLOSE_FLUSH
    };
    let _ = tokio::time::timeout(limit, out.flush()).await;
}

//! One WebSocket connection: the `Hello` that opens it, the read loop that hands each
//! frame to the request dispatch (`dispatch`), the flusher task (backlog, heartbeats,
//! close) and the drain on shutdown. The HTTP routes and the handshake that lead here are
//! `routes`.
//!
//! Architecture invariant: nothing a client sends can panic the relay or disturb another
//! connection: undecodable or oversized frames end only their own connection, with a typed
//! error first.

mod dispatch;
mod routes;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures_util::StreamExt;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::auth::AuthContext;
use crate::databases::{Database, DatabaseError};
use crate::outbound::{Outbound, WsIo};
use crate::state::Relay;
use crate::store::valid_database_name;
use hearth_core::protocol::codec::{decode_client, encode_server};
use hearth_core::protocol::{
    ClientMessage, ErrorCode, ServerMessage, MAX_FRAME_BYTES, PROTOCOL_VERSION,
};

pub use routes::router;

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

/// Sleeps until unix second `exp` (at once if it passed); forever without one.
async fn until_expiry(exp: Option<u64>) {
    match exp {
        Some(exp) => {
            let wait = exp.saturating_sub(now_unix());
            tokio::time::sleep(Duration::from_secs(wait)).await;
        }
        None => std::future::pending().await,
    }
}

/// The client's WebSocket: its reader over the socket's read half.
type ClientStream = WebSocketStream<WsIo>;

/// One open connection, as its request dispatch sees it.
struct Connection {
    /// The relay whose store, committer and metrics the requests use.
    relay: Arc<Relay>,
    /// The connection's id: its targets' key in the fan-out.
    id: u64,
    /// The database the `Hello` named; every request of the connection goes to it.
    db: Arc<Database>,
    /// The client's id from the `Hello`: its write batches are idempotent under it.
    client_id: String,
    /// Who the client's token says it is; replaced by an `Auth` message, and checked for
    /// expiry before every request.
    auth: AuthContext,
    /// The expiry whose passing already ended the connection's listens.
    expiry_handled: Option<u64>,
    /// The connection's write side, shared with the fan-out and the flusher.
    out: Outbound,
    /// In-flight write acknowledgements, awaited before the socket closes on shutdown.
    writes: tokio::task::JoinSet<()>,
    /// Bytes of the write frames not yet acknowledged (each acknowledgement task gives its
    /// share back when it ends, however it ends).
    write_bytes: Arc<std::sync::atomic::AtomicUsize>,
}

/// Sends `reply` and closes: the end of a connection refused at its handshake.
async fn refuse(out: &Outbound, reply: Bytes) {
    out.send(reply);
    out.close(false);
    let _ = tokio::time::timeout(CLOSE_FLUSH, out.flush()).await;
}

/// The connection's `Hello`: the first frame must be one, within ten seconds, naming a
/// protocol version this relay speaks, a valid database and client id, and a token that
/// verifies. The database, client id and auth context; `None` when the connection was
/// refused (with a typed error) or ended first.
async fn hello(
    relay: &Relay,
    out: &Outbound,
    stream: &mut ClientStream,
) -> Option<(Arc<Database>, String, AuthContext)> {
    let first = tokio::time::timeout(Duration::from_secs(10), stream.next()).await;
    let hello = match first {
        Ok(Some(Ok(Message::Binary(b)))) => decode_client(&b),
        _ => return None,
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
                refuse(out, reject(ErrorCode::FailedPrecondition, msg)).await;
                return None;
            }
            (database, client_id, token)
        }
        Ok(_) => {
            let msg = "the first message must be a Hello".into();
            refuse(out, reject(ErrorCode::FailedPrecondition, msg)).await;
            return None;
        }
        Err(e) => {
            relay.metrics().protocol_error("malformed");
            let msg = format!("malformed frame: {e}");
            refuse(out, reject(ErrorCode::InvalidArgument, msg)).await;
            return None;
        }
    };
    if !valid_database_name(&database) || client_id.is_empty() || client_id.len() > 256 {
        let msg = format!("invalid database name `{database}` or client id: a database name is 1 to 64 of [A-Za-z0-9_-], a client id 1 to 256 bytes");
        refuse(out, reject(ErrorCode::InvalidArgument, msg)).await;
        return None;
    }
    let auth = match relay.auth().verify(&token, now_unix()) {
        Ok(a) => a,
        Err(e) => {
            refuse(out, reject(ErrorCode::Unauthenticated, e.to_string())).await;
            return None;
        }
    };
    let db = match relay.database(&database) {
        Ok(db) => db,
        Err(e) => {
            let code = match e {
                DatabaseError::NotServed { .. } => ErrorCode::NotFound,
                DatabaseError::TooMany { .. } => ErrorCode::ResourceExhausted,
                DatabaseError::Store(_) => ErrorCode::Unavailable,
            };
            refuse(out, reject(code, e.to_string())).await;
            return None;
        }
    };
    Some((db, client_id, auth))
}

impl Connection {
    /// Serves the upgraded connection on `tcp` (`read_buf`: what the HTTP server read past
    /// the handshake) until either side closes it, it fails or overflows, or `stop` says
    /// the relay is shutting down; then drains it.
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
            relay.config().max_outbound_bytes,
            relay.metrics().clone(),
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
        let Some((db, client_id, auth)) = hello(&relay, &out, &mut stream).await else {
            return;
        };
        let welcome = ServerMessage::Welcome {
            protocol_version: PROTOCOL_VERSION,
            version: db.fanout().published(),
            indexes: db.catalog().file().clone(),
            heartbeat_ms: relay.config().heartbeat.as_millis() as u32,
        };
        out.send_message(&welcome);
        tracing::debug!(conn = id, %peer, database = %db.name(), "connection open");
        let (closing_tx, closing_rx) = watch::channel(false);
        let flusher = tokio::spawn(flusher(out.clone(), db.clone(), relay.clone(), closing_rx));
        let mut conn = Connection {
            relay: relay.clone(),
            id,
            db: db.clone(),
            client_id,
            auth,
            expiry_handled: None,
            out: out.clone(),
            writes: tokio::task::JoinSet::new(),
            write_bytes: Arc::default(),
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
                            relay.metrics().protocol_error("text_frame");
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
                            relay.metrics().protocol_error("transport");
                            out.send_message(&error(0, 0, ErrorCode::InvalidArgument, format!("bad frame: {e}")));
                            break;
                        }
                    }
                }
                _ = stop.changed() => break,
                // The token expired without a fresh one: the connection's listens end with
                // `unauthenticated` (requests are refused until an `Auth` replaces it).
                _ = until_expiry(conn.auth.expires_at),
                    if conn.auth.expires_at.is_some() && conn.auth.expires_at != conn.expiry_handled => {
                    conn.end_listens_on_expiry();
                }
            }
            if out.is_overflowed() {
                break;
            }
        }
        // Drain: acknowledge every write already submitted, then close.
        while conn.writes.join_next().await.is_some() {}
        let n = db.fanout().drop_connection(id);
        for _ in 0..n {
            relay.metrics().listen_stopped(db.name());
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
    let heartbeat = relay.config().heartbeat;
    let mut tick = tokio::time::interval(heartbeat);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let overflow = out.overflow();
    tokio::pin!(overflow);
    let abandon = |out: &Outbound| {
        relay.metrics().slow_consumer_dropped();
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
                    let version = db.fanout().published();
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

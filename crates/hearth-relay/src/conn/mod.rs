//! One WebSocket connection: the `Hello` that opens it, the read loop that hands each
//! frame to the request dispatch (`dispatch`), the flusher task (backlog, heartbeats,
//! close) and the drain on shutdown. The HTTP routes and the handshake that lead here are
//! `routes`.
//!
//! Until its `Hello` is verified, a connection's first frame is read here, by hand, and may
//! have at most [`MAX_HELLO_FRAME_BYTES`]; the WebSocket reader (with the protocol's
//! `MAX_FRAME_BYTES`) takes over after it. The keyed connection limits are `limits`;
//! everything a connection holds is given back by one guard ([`Held`]) on every exit path.
//!
//! Architecture invariant: nothing a client sends can panic the relay or disturb another
//! connection: undecodable or oversized frames end only their own connection, with a typed
//! error first.

mod dispatch;
mod limits;
mod routes;

use std::io::Cursor;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures_util::StreamExt;
use tokio::io::AsyncReadExt;
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::TcpStream;
use tokio::sync::{watch, OwnedSemaphorePermit};
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Control, Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::FrameHeader;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::auth::{AuthContext, AuthError};
use crate::databases::{Database, DatabaseError};
use crate::outbound::{Outbound, WsIo};
use crate::state::Relay;
use crate::store::valid_database_name;
use hearth_core::protocol::codec::{decode_client, encode_server};
use hearth_core::protocol::{
    ClientMessage, ErrorCode, ServerMessage, MAX_FRAME_BYTES, MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
};

use limits::Limits;
pub use routes::router;
pub(crate) use routes::PendingSlot;

/// The most bytes the first frame (the `Hello`) may have: enough for a `Hello` with a large
/// token. Until the `Hello` is verified nothing larger is read; a larger frame is refused
/// with `resource-exhausted` from its header alone.
pub const MAX_HELLO_FRAME_BYTES: usize = 64 << 10;

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
    /// Set when one of the connection's batches failed for a transient cause (the store
    /// unreachable): its later batches are not applied either, so nothing commits out of
    /// the client's order; the client sends them again, in order, on a new connection.
    writes_halted: Arc<std::sync::atomic::AtomicBool>,
    /// The keyed connection limits (an `Auth` of another subject moves the subject's place).
    limits: Arc<Limits>,
    /// What the connection holds, given back when it ends, however it ends.
    held: Held,
}

/// Everything one WebSocket connection holds: its `--max-connections` permit, its places
/// under the keyed limits, and (once open) its listen targets in its database's fan-out.
/// Dropping it gives all of it back and records the connection closed, on every exit path:
/// a return, an early refusal, or a panic in a request handler (the task's future is
/// dropped), so nothing leaks past the connection.
pub(crate) struct Held {
    /// Whose metrics record the connection closed.
    relay: Arc<Relay>,
    /// The connection's `--max-connections` permit.
    _slot: OwnedSemaphorePermit,
    /// Its place under `--max-connections-per-address`.
    _address: limits::Held<IpAddr>,
    /// Its place under `--max-connections-per-database`, once the `Hello` is verified.
    database: Option<limits::Held<String>>,
    /// Its place under `--max-connections-per-subject` while its token names a subject.
    subject: Option<limits::Held<String>>,
    /// The database and connection id whose fan-out targets are dropped at the end.
    targets: Option<(Arc<Database>, u64)>,
}

impl Held {
    /// An upgraded connection holding `slot` and its client address's place: recorded open
    /// now, closed when this is dropped.
    fn open(relay: Arc<Relay>, slot: OwnedSemaphorePermit, address: limits::Held<IpAddr>) -> Held {
        relay.metrics().connection_opened();
        Held {
            relay,
            _slot: slot,
            _address: address,
            database: None,
            subject: None,
            targets: None,
        }
    }

    /// Drops the connection's listen targets from the fan-out (once) and counts them stopped.
    ///
    /// The fan-out lock may be held for a while (another listen's first read), so on a
    /// runtime this runs on the blocking pool, never on a worker.
    fn drop_targets(&mut self) {
        if let Some((db, id)) = self.targets.take() {
            let relay = self.relay.clone();
            let release = move || {
                let n = db.fanout().drop_connection(id);
                for _ in 0..n {
                    relay.metrics().listen_stopped(db.name());
                }
            };
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn_blocking(release);
                }
                Err(_) => release(),
            }
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.drop_targets();
        self.relay.metrics().connection_closed();
    }
}

/// Sends `reply` and closes: the end of a connection refused at its handshake. The write
/// side is shut, and what the client still sends is read and discarded for at most a
/// second, so the error is not lost to a reset (closing with unread input resets).
async fn refuse(out: &Outbound, read: &mut OwnedReadHalf, reply: Bytes) {
    out.send(reply);
    out.close(false);
    let _ = tokio::time::timeout(CLOSE_FLUSH, out.flush()).await;
    out.shutdown_write();
    discard_input(read).await;
}

/// Reads and drops what the client still sends until it closes, for at most a second.
async fn discard_input(read: &mut OwnedReadHalf) {
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let mut sink = [0u8; 4096];
        while matches!(read.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}

/// How a connection's first frame ended.
enum FirstFrame {
    /// The payload of a binary frame, and the bytes read past it.
    Binary(Vec<u8>, Vec<u8>),
    /// Refused: the error to send.
    Refused(ErrorCode, String),
    /// The client closed, or sent a Close, first.
    Ended,
}

/// Reads the connection's first WebSocket frame from `read` (after `buf`, what the HTTP
/// server read past the handshake), buffering at most [`MAX_HELLO_FRAME_BYTES`] of payload:
/// a larger one is refused from its header, before its payload is read. It must be a
/// single masked binary frame; a `Hello` is never fragmented.
async fn read_first_frame(read: &mut OwnedReadHalf, mut buf: Vec<u8>) -> FirstFrame {
    let mut chunk = [0u8; 8192];
    let (start, len) = loop {
        let mut cursor = Cursor::new(&buf[..]);
        match FrameHeader::parse(&mut cursor) {
            Ok(Some((h, len))) => {
                let refuse = |code, msg: &str| FirstFrame::Refused(code, msg.to_owned());
                match h.opcode {
                    OpCode::Data(Data::Binary) => {}
                    OpCode::Control(Control::Close) => return FirstFrame::Ended,
                    _ => {
                        return refuse(
                            ErrorCode::FailedPrecondition,
                            "the first message must be a Hello (one binary frame)",
                        )
                    }
                }
                if h.rsv1 || h.rsv2 || h.rsv3 || h.mask.is_none() {
                    return refuse(
                        ErrorCode::InvalidArgument,
                        "bad frame: client frames are masked and use no extension bits",
                    );
                }
                if !h.is_final {
                    return refuse(
                        ErrorCode::InvalidArgument,
                        "the Hello must be a single unfragmented frame",
                    );
                }
                if len > MAX_HELLO_FRAME_BYTES as u64 {
                    return FirstFrame::Refused(
                        ErrorCode::ResourceExhausted,
                        format!("the first frame has {len} bytes; until the Hello is verified a frame may have at most {MAX_HELLO_FRAME_BYTES}"),
                    );
                }
                let start = cursor.position() as usize;
                let mask = h.mask.unwrap_or_default();
                break (start, (len as usize, mask));
            }
            Ok(None) => {}
            Err(e) => {
                return FirstFrame::Refused(ErrorCode::InvalidArgument, format!("bad frame: {e}"))
            }
        }
        match read.read(&mut chunk).await {
            Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return FirstFrame::Ended,
        }
    };
    let (len, mask) = len;
    let end = start + len;
    while buf.len() < end {
        let want = (end - buf.len()).min(chunk.len());
        match read.read(&mut chunk[..want]).await {
            Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return FirstFrame::Ended,
        }
    }
    let rest = buf.split_off(end);
    let mut payload = buf.split_off(start);
    for (i, b) in payload.iter_mut().enumerate() {
        *b ^= mask[i % 4];
    }
    FirstFrame::Binary(payload, rest)
}

/// What a verified `Hello` opened.
struct Opened {
    /// The database the `Hello` named.
    db: Arc<Database>,
    /// The client's id from the `Hello`.
    client_id: String,
    /// Who the token says the client is.
    auth: AuthContext,
    /// The connection's places under the database and subject limits.
    database: limits::Held<String>,
    subject: Option<limits::Held<String>>,
    /// Bytes the client sent past the `Hello`.
    rest: Vec<u8>,
}

/// The connection's `Hello`: the first frame must be one, within ten seconds and at most
/// [`MAX_HELLO_FRAME_BYTES`], naming a protocol version this relay speaks, a valid database
/// (one its token's `databases` claim allows) and client id, and a token that verifies; the
/// database and the token's subject must be under their connection limits. `Err` when the
/// connection is refused: the typed error to send, or `None` when it ended first.
async fn hello(
    relay: &Arc<Relay>,
    limits: &Limits,
    out: &Outbound,
    read: &mut OwnedReadHalf,
    read_buf: Vec<u8>,
) -> Result<Opened, Option<Bytes>> {
    let reject = |code, msg: String| Some(Bytes::from(encode_server(&error(0, 0, code, msg))));
    let first =
        tokio::time::timeout(Duration::from_secs(10), read_first_frame(read, read_buf)).await;
    let (hello, rest) = match first {
        Ok(FirstFrame::Binary(b, rest)) => (decode_client(&b), rest),
        Ok(FirstFrame::Refused(code, msg)) => {
            if code == ErrorCode::ResourceExhausted {
                relay.metrics().connection_refused("hello_size");
            } else {
                relay.metrics().protocol_error("transport");
            }
            return Err(reject(code, msg));
        }
        Ok(FirstFrame::Ended) | Err(_) => return Err(None),
    };
    let (database, client_id, token) = match hello {
        Ok(ClientMessage::Hello {
            protocol_version,
            database,
            client_id,
            token,
        }) => {
            if !(MIN_PROTOCOL_VERSION..=PROTOCOL_VERSION).contains(&protocol_version) {
                let msg = format!("protocol version {protocol_version} is not supported; this relay speaks {MIN_PROTOCOL_VERSION} to {PROTOCOL_VERSION}");
                return Err(reject(ErrorCode::FailedPrecondition, msg));
            }
            out.set_protocol(protocol_version);
            (database, client_id, token)
        }
        Ok(_) => {
            let msg = "the first message must be a Hello".into();
            return Err(reject(ErrorCode::FailedPrecondition, msg));
        }
        Err(e) => {
            relay.metrics().protocol_error("malformed");
            let msg = format!("malformed frame: {e}");
            return Err(reject(ErrorCode::InvalidArgument, msg));
        }
    };
    if !valid_database_name(&database) || client_id.is_empty() || client_id.len() > 256 {
        let msg = format!("invalid database name `{database}` or client id: a database name is 1 to 64 of [A-Za-z0-9_-], a client id 1 to 256 bytes");
        return Err(reject(ErrorCode::InvalidArgument, msg));
    }
    let auth = match verify_token(relay, &token) {
        Ok(a) => a,
        Err(e) => return Err(reject(ErrorCode::Unauthenticated, e.to_string())),
    };
    // Before the database is looked up (or created): the token's claim may forbid it.
    if let Some(msg) = auth.database_denied(&database) {
        return Err(reject(ErrorCode::PermissionDenied, msg));
    }
    // Opening a database the relay does not hold yet writes to the store: off the
    // runtime's workers, so a Hello waiting behind a long commit holds up no one else.
    let opening = {
        let (relay, database) = (relay.clone(), database.clone());
        tokio::task::spawn_blocking(move || relay.database(&database)).await
    };
    let Ok(opening) = opening else {
        return Err(reject(
            ErrorCode::Internal,
            "opening the database failed".into(),
        ));
    };
    let db = match opening {
        Ok(db) => db,
        Err(e) => {
            let code = match e {
                DatabaseError::NotServed { .. } => ErrorCode::NotFound,
                DatabaseError::TooMany { .. } => ErrorCode::ResourceExhausted,
                DatabaseError::Store(_) => ErrorCode::Unavailable,
            };
            return Err(reject(code, e.to_string()));
        }
    };
    let Some(database_held) = limits.database.try_hold(database.clone()) else {
        relay.metrics().connection_refused("database");
        let max = limits.database.max();
        let msg = format!("database `{database}` has {max} connections, the relay's limit (--max-connections-per-database {max}): retry later");
        return Err(reject(ErrorCode::ResourceExhausted, msg));
    };
    let subject = match hold_subject(relay, limits, &auth) {
        Ok(s) => s,
        Err(msg) => return Err(reject(ErrorCode::ResourceExhausted, msg)),
    };
    Ok(Opened {
        db,
        client_id,
        auth,
        database: database_held,
        subject,
        rest,
    })
}

/// A place under the subject limit for `auth`'s subject (none without one), or the
/// `resource-exhausted` message when it has no room.
fn hold_subject(
    relay: &Relay,
    limits: &Limits,
    auth: &AuthContext,
) -> Result<Option<limits::Held<String>>, String> {
    let Some(uid) = &auth.uid else {
        return Ok(None);
    };
    match limits.subject.try_hold(uid.clone()) {
        Some(h) => Ok(Some(h)),
        None => {
            relay.metrics().connection_refused("subject");
            let max = limits.subject.max();
            Err(format!("the token's subject `{uid}` has {max} connections, the relay's limit (--max-connections-per-subject {max}): close one before opening another"))
        }
    }
}

impl Connection {
    /// Serves the upgraded connection on `tcp` (`read_buf`: what the HTTP server read past
    /// the handshake) until either side closes it, it fails or overflows, or `stop` says
    /// the relay is shutting down; then drains it.
    async fn serve(
        relay: Arc<Relay>,
        limits: Arc<Limits>,
        mut held: Held,
        tcp: TcpStream,
        read_buf: Bytes,
        mut stop: watch::Receiver<bool>,
        peer: SocketAddr,
    ) {
        let id = relay.next_connection_id();
        let (mut read, write) = tcp.into_split();
        let out = Outbound::new(
            id,
            write,
            relay.config().max_outbound_bytes,
            relay.metrics().clone(),
        );
        let opened = match hello(&relay, &limits, &out, &mut read, read_buf.to_vec()).await {
            Ok(o) => o,
            Err(Some(reply)) => return refuse(&out, &mut read, reply).await,
            Err(None) => return,
        };
        let Opened {
            db,
            client_id,
            auth,
            database,
            subject,
            rest,
        } = opened;
        held.database = Some(database);
        held.subject = subject;
        held.targets = Some((db.clone(), id));
        // The Hello is verified: the protocol's frame limit applies from here on.
        let config = WebSocketConfig::default()
            .max_message_size(Some(MAX_FRAME_BYTES))
            .max_frame_size(Some(MAX_FRAME_BYTES))
            .read_buffer_size(4096);
        let mut stream = WebSocketStream::from_partially_read(
            WsIo {
                read,
                out: out.clone(),
            },
            rest,
            Role::Server,
            Some(config),
        )
        .await;
        let welcome = ServerMessage::Welcome {
            protocol_version: out.protocol(),
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
            writes_halted: Arc::default(),
            limits,
            held,
        };
        let overflow = out.overflow();
        tokio::pin!(overflow);
        let (failed, ending) = (out.failed(), out.ended());
        tokio::pin!(failed, ending);
        // Whether the client closed (the reader answered its Close already).
        let mut peer_closed = false;
        // Why the connection ends, for the log.
        let mut ended = "overflowed";
        loop {
            tokio::select! {
                _ = &mut overflow => break,
                _ = &mut failed => {
                    ended = "the socket refused a write";
                    break;
                }
                _ = &mut ending => {
                    ended = "the relay ended it";
                    break;
                }
                msg = stream.next() => {
                    match msg {
                        Some(Ok(Message::Binary(b))) => {
                            if !conn.handle(&b).await {
                                ended = "a request ended it";
                                break;
                            }
                        }
                        Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                        Some(Ok(Message::Text(_))) => {
                            relay.metrics().protocol_error("text_frame");
                            out.send_message(&error(0, 0, ErrorCode::InvalidArgument, "text frames are not part of the protocol: send binary frames"));
                            ended = "a text frame";
                            break;
                        }
                        Some(Ok(Message::Close(_))) => {
                            // The reader writes its Close reply on its next poll; after it,
                            // the stream ends at once.
                            let _ = tokio::time::timeout(Duration::from_secs(1), stream.next()).await;
                            // Nothing may follow the Close reply (RFC 6455 §5.5.1).
                            out.close(true);
                            peer_closed = true;
                            ended = "the client closed";
                            break;
                        }
                        None => {
                            peer_closed = true;
                            ended = "the client's stream ended";
                            break;
                        }
                        Some(Err(e)) => {
                            relay.metrics().protocol_error("transport");
                            out.send_message(&error(0, 0, ErrorCode::InvalidArgument, format!("bad frame: {e}")));
                            ended = "a transport error";
                            break;
                        }
                    }
                }
                _ = stop.changed() => {
                    ended = "the relay is stopping";
                    break;
                }
                // The token expired without a fresh one: the connection's listens end with
                // `unauthenticated` (requests are refused until an `Auth` replaces it).
                _ = until_expiry(conn.auth.expires_at),
                    if conn.auth.expires_at.is_some() && conn.auth.expires_at != conn.expiry_handled => {
                    conn.end_listens_on_expiry().await;
                }
            }
            if out.is_overflowed() {
                break;
            }
        }
        // Drain: acknowledge every write already submitted, then close; a commit that
        // takes longer than DRAIN_WRITES is left unanswered (the client's retry of the
        // batch gets its answer from the batch record).
        let drained = tokio::time::timeout(DRAIN_WRITES, async {
            while conn.writes.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(conn = id, "closing with writes still unacknowledged");
            conn.writes.abort_all();
        }
        conn.held.drop_targets();
        let _ = closing_tx.send(peer_closed);
        let _ = flusher.await;
        if !peer_closed && !out.is_overflowed() {
            // Half-close, then read what the client still sends until it closes too (at
            // most a second): closing a socket with unread input resets the connection,
            // and the client could lose the error and Close frames just written.
            out.shutdown_write();
            discard_input(&mut stream.get_mut().read).await;
        }
        tracing::debug!(conn = id, reason = ended, "connection closed");
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

/// How long a closing connection waits for its writes' acknowledgements.
const DRAIN_WRITES: Duration = Duration::from_secs(20);

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
                // The reader may have seen the overflow (its flag is set first) before its
                // signal reached this task: a slow consumer still gets its error.
                if out.is_overflowed() {
                    abandon(&out);
                    break;
                }
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
            } => if let Err(e) = r {
                tracing::debug!(error = %e, overflowed = out.is_overflowed(), "the socket refused a write: closing");
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

/// Who `token` says the caller is. With security rules, no token at all is an anonymous
/// caller (`request.auth == null`, which the rules may allow); a token that is there must
/// verify, never falling back to anonymous. Without rules, the authenticator alone decides
/// (with keys configured, a missing token is refused).
pub(crate) fn verify_token(relay: &Relay, token: &str) -> Result<AuthContext, AuthError> {
    if token.trim().is_empty() && relay.rules().enabled() {
        return Ok(AuthContext::anonymous());
    }
    relay.auth().verify(token, now_unix())
}

#[cfg(test)]
mod tests;

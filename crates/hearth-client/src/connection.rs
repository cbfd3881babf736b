//! The connection's two tasks and the state they share with the client handles: the
//! reader routes every frame from the relay (a reply to its waiting request, a target's
//! change to its buffer, a `Snapshot` to every changed listener) and judges the link by
//! its silence; the writer sends the encoded frames the handles queue.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_tungstenite::tungstenite::Message;

use crate::error::ClientError;
use crate::listener::Target;
use hearth_core::protocol::codec::decode_server_frame;
use hearth_core::protocol::ServerMessage;

/// A request's answer, as the reader task routes it.
pub(crate) type Reply = Result<ServerMessage, ClientError>;

/// What the connection's lock guards.
#[derive(Default)]
struct State {
    /// Why the connection ended, once it has: every later request fails with it.
    closed: Option<ClientError>,
    /// The last connection-level `Error` (request and target ids zero); the relay usually
    /// closes the socket after one, and it is the better explanation than `Closed`.
    conn_error: Option<ClientError>,
    /// Requests waiting for their answer, by request id.
    pending: HashMap<u64, oneshot::Sender<Reply>>,
    /// Pings waiting for their `Heartbeat`, by nonce.
    pings: HashMap<u64, oneshot::Sender<u64>>,
    /// Listened queries, by target id.
    targets: HashMap<u32, Target>,
}

/// State shared by the client handles and the reader task.
pub(crate) struct Shared {
    /// The waiting requests, pings and listeners, and whether the connection ended.
    state: Mutex<State>,
    /// When the last frame arrived (heartbeats included): a dead link shows as silence.
    last_seen: Mutex<Instant>,
    /// Becomes true when the reader task has ended.
    ended: watch::Sender<bool>,
}

impl Shared {
    /// The state of a connection that just opened.
    pub(crate) fn new() -> Shared {
        Shared {
            state: Mutex::new(State::default()),
            last_seen: Mutex::new(Instant::now()),
            ended: watch::channel(false).0,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("client state lock")
    }

    /// Why the connection ended (`Closed` if it has not said).
    pub(crate) fn closed_error(&self) -> ClientError {
        self.lock().closed.clone().unwrap_or(ClientError::Closed)
    }

    /// Whether the connection has ended.
    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed.is_some()
    }

    /// Marks the connection closed by the caller (unless it already ended otherwise).
    pub(crate) fn close(&self) {
        self.lock().closed.get_or_insert(ClientError::Closed);
    }

    /// When the last frame from the relay arrived.
    pub(crate) fn last_seen(&self) -> Instant {
        *self.last_seen.lock().expect("last seen lock")
    }

    /// Watches for the end of the reader task.
    pub(crate) fn ended(&self) -> watch::Receiver<bool> {
        self.ended.subscribe()
    }

    /// Registers request `id`, whose answer goes to `tx`; the reason if the connection
    /// ended.
    pub(crate) fn add_pending(
        &self,
        id: u64,
        tx: oneshot::Sender<Reply>,
    ) -> Result<(), ClientError> {
        let mut st = self.lock();
        if let Some(e) = &st.closed {
            return Err(e.clone());
        }
        st.pending.insert(id, tx);
        Ok(())
    }

    /// Forgets request `id` (its frame was never sent).
    pub(crate) fn remove_pending(&self, id: u64) {
        self.lock().pending.remove(&id);
    }

    /// Registers ping `nonce`, whose `Heartbeat` version goes to `tx`; the reason if the
    /// connection ended.
    pub(crate) fn add_ping(&self, nonce: u64, tx: oneshot::Sender<u64>) -> Result<(), ClientError> {
        let mut st = self.lock();
        if let Some(e) = &st.closed {
            return Err(e.clone());
        }
        st.pings.insert(nonce, tx);
        Ok(())
    }

    /// Registers a listened query under `target_id`; the reason if the connection ended.
    pub(crate) fn add_target(&self, target_id: u32, target: Target) -> Result<(), ClientError> {
        let mut st = self.lock();
        if let Some(e) = &st.closed {
            return Err(e.clone());
        }
        st.targets.insert(target_id, target);
        Ok(())
    }

    /// Forgets target `target_id`; false if it was already gone (refused, or the
    /// connection ended).
    pub(crate) fn remove_target(&self, target_id: u32) -> bool {
        self.lock().targets.remove(&target_id).is_some()
    }

    /// Ends the connection: fails every waiting request and listener with the reason.
    pub(crate) fn finish(&self, err: ClientError) {
        let mut st = self.lock();
        let reason = st.conn_error.take().unwrap_or(err);
        let reason = st.closed.get_or_insert(reason).clone();
        for (_, tx) in st.pending.drain() {
            let _ = tx.send(Err(reason.clone()));
        }
        st.pings.clear();
        for (_, t) in st.targets.drain() {
            t.fail(reason.clone());
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
                        t.fail(err);
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
                    t.buffer(kind, changes);
                }
            }
            ServerMessage::Existence {
                target_id,
                count,
                filter,
            } => {
                if let Some(t) = st.targets.get_mut(&target_id) {
                    t.existence(count, filter);
                }
            }
            ServerMessage::Snapshot { version } => {
                let mut gone = Vec::new();
                for (id, t) in st.targets.iter_mut().filter(|(_, t)| t.is_dirty()) {
                    if !t.deliver(version) {
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

/// The client's WebSocket.
pub(crate) type WsStream =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Reads frames until the socket ends. Silence for three heartbeat intervals means a dead
/// link (docs/protocol.md §2.3): a socket can stay open while nothing gets through.
pub(crate) async fn read_loop(
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
            Some(Ok(Message::Binary(b))) => match decode_server_frame(&b) {
                Ok(messages) => messages.into_iter().for_each(|m| shared.route(m)),
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

/// Sends the frames the handles queue on `rx`, batching what is queued into one flush,
/// until a `Close` is sent, the queue's senders are gone, or the socket fails.
pub(crate) async fn write_loop(
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

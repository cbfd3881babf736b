//! A connection's outbound side. Whoever produces a frame (the fan-out thread, a request
//! handler, the heartbeat, the WebSocket reader's control replies) writes it straight to the
//! socket under the connection's lock when nothing waits before it. When the socket's send
//! buffer is full, the rest waits in a backlog that the connection's flusher task writes as
//! the socket drains. A backlog past the bound marks the connection overflowed: it is
//! dropped as a slow consumer, and the client resumes from its last snapshot.
//!
//! Writing in place saves the fan-out a queue push, a task wake-up and a second copy per
//! notification: one `writev` of the frame header and the shared payload bytes.
//!
//! Architecture invariant: bytes reach the socket in the order their writers took the lock,
//! and frames never interleave: a frame goes out whole, or its unwritten rest is the
//! backlog's front and everything after it waits behind it.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use super::metrics::Metrics;
use hearth_core::protocol::codec::{encode_bundle, encode_server};
use hearth_core::protocol::{ServerMessage, PROTOCOL_VERSION};

const OP_BINARY: u8 = 0x2;
const OP_CLOSE: u8 = 0x8;

/// A Close frame's body: status 1000 (normal closure) and a reason.
const CLOSE_NORMAL: &[u8] = b"\x03\xE8closing";

/// Most backlog entries handed to one `writev`.
const MAX_IOV: usize = 64;

/// One WebSocket frame (or raw bytes already framed), and how much of it is written.
struct Entry {
    /// The WebSocket frame header, kept beside the payload so one `writev` sends both.
    head: [u8; 10],
    /// How many bytes of `head` are the header (0 for bytes already framed).
    head_len: u8,
    /// The payload, shared with every other connection that gets the same frame.
    body: Bytes,
    /// Bytes of header and payload already written to the socket.
    written: usize,
}

impl Entry {
    /// A server frame: unmasked, FIN set, the payload length in its shortest form.
    fn frame(opcode: u8, body: Bytes) -> Entry {
        let mut head = [0u8; 10];
        head[0] = 0x80 | opcode;
        let len = body.len();
        let head_len = if len < 126 {
            head[1] = len as u8;
            2
        } else if len <= 0xFFFF {
            head[1] = 126;
            head[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            4
        } else {
            head[1] = 127;
            head[2..10].copy_from_slice(&(len as u64).to_be_bytes());
            10
        };
        Entry {
            head,
            head_len,
            body,
            written: 0,
        }
    }

    /// Bytes framed by someone else (the WebSocket reader's pong and close replies).
    fn raw(body: Bytes) -> Entry {
        Entry {
            head: [0; 10],
            head_len: 0,
            body,
            written: 0,
        }
    }

    fn len(&self) -> usize {
        self.head_len as usize + self.body.len()
    }

    fn remaining(&self) -> usize {
        self.len() - self.written
    }

    /// Puts the unwritten parts (at most two) at the start of `out`; returns how many.
    fn slices<'a>(&'a self, out: &mut [IoSlice<'a>]) -> usize {
        let h = self.head_len as usize;
        if self.written < h {
            out[0] = IoSlice::new(&self.head[self.written..h]);
            if self.body.is_empty() {
                return 1;
            }
            out[1] = IoSlice::new(&self.body);
            2
        } else if self.written < self.len() {
            out[0] = IoSlice::new(&self.body[self.written - h..]);
            1
        } else {
            0
        }
    }
}

/// A fan-out round's messages held for one `Bundle` frame (protocol 3), in order.
#[derive(Default)]
struct Cork {
    parts: Vec<Bytes>,
    bytes: usize,
}

/// Most bytes of messages a bundle gathers before it goes: far under the frame limit (each
/// message is at most half of it), and a bound on what a round holds per connection.
const BUNDLE_BYTES: usize = 1 << 20;

/// The first protocol version that takes bundles.
const BUNDLE_PROTOCOL: u32 = 3;

/// What the connection's lock guards.
struct State {
    /// Frames the socket did not take yet, in order; the front one may be partly written.
    backlog: VecDeque<Entry>,
    /// This round's messages not yet written: they go before anything else written to the
    /// connection, so the order is the order in which they were sent.
    cork: Cork,
    /// Unwritten bytes in the backlog.
    bytes: usize,
    /// Takes no more frames: the connection is closing, or the socket failed.
    closed: bool,
}

/// The state every clone of an [`Outbound`] shares.
struct Shared {
    /// The socket's write half; written only under the `state` lock.
    sock: OwnedWriteHalf,
    /// The backlog and closed flag; holding it is holding the connection's write order.
    state: Mutex<State>,
    /// Wakes the flusher when the backlog gets its first entry.
    backlogged: tokio::sync::Notify,
    /// The backlog passed `max_bytes`: the connection is a slow consumer, and takes no more
    /// frames (read without the lock on every write).
    overflowed: AtomicBool,
    /// Fires once when the connection overflows, so a flusher waiting on a stalled socket
    /// and a reader waiting for frames both stop.
    overflow_signal: tokio::sync::watch::Sender<bool>,
    /// Fires once when a write to the socket fails.
    failed: tokio::sync::watch::Sender<bool>,
    /// Fires once when the relay ends the connection ([`Outbound::end`]).
    ended: tokio::sync::watch::Sender<bool>,
    /// The backlog bound (`--max-outbound-bytes`).
    max_bytes: usize,
    /// Whether anything was written since the heartbeat last looked.
    wrote: AtomicBool,
    /// Targets this connection listens to (changed only under the fan-out lock).
    targets: AtomicUsize,
    /// The last version published to this connection's targets in a fan-out round (only
    /// under the fan-out lock): marks it as owed a `Snapshot` once per round.
    round: AtomicU64,
    /// Counts the bytes waiting in the backlog and the slow consumers.
    metrics: Arc<Metrics>,
}

/// A connection's outbound side; clones share it (one reference count).
#[derive(Clone)]
pub struct Outbound {
    /// The connection's id: the fan-out keys the connection's targets by it.
    conn: u64,
    /// The protocol version the client's Hello named (this build's until then): what may
    /// be sent to it.
    protocol: Arc<AtomicU32>,
    /// The socket and its backlog, shared by every clone.
    shared: Arc<Shared>,
}

impl Outbound {
    /// The outbound side of connection `conn` over `sock`, dropped as a slow consumer past
    /// `max_bytes` of backlog.
    pub fn new(
        conn: u64,
        sock: OwnedWriteHalf,
        max_bytes: usize,
        metrics: Arc<Metrics>,
    ) -> Outbound {
        Outbound {
            conn,
            protocol: Arc::new(AtomicU32::new(PROTOCOL_VERSION)),
            shared: Arc::new(Shared {
                sock,
                state: Mutex::new(State {
                    backlog: VecDeque::new(),
                    cork: Cork::default(),
                    bytes: 0,
                    closed: false,
                }),
                backlogged: tokio::sync::Notify::new(),
                overflowed: AtomicBool::new(false),
                overflow_signal: tokio::sync::watch::channel(false).0,
                failed: tokio::sync::watch::channel(false).0,
                ended: tokio::sync::watch::channel(false).0,
                max_bytes,
                wrote: AtomicBool::new(false),
                targets: AtomicUsize::new(0),
                round: AtomicU64::new(0),
                metrics,
            }),
        }
    }

    /// The connection's id.
    pub fn conn(&self) -> u64 {
        self.conn
    }

    /// The protocol version the client speaks.
    pub fn protocol(&self) -> u32 {
        self.protocol.load(Ordering::Relaxed)
    }

    /// Records the protocol version of the client's Hello.
    pub fn set_protocol(&self, version: u32) {
        self.protocol.store(version, Ordering::Relaxed);
    }

    /// Writes entries in order: in place when nothing waits before them, the rest into the
    /// backlog. False when the connection takes no more frames.
    fn write<const N: usize>(&self, entries: [Entry; N]) -> bool {
        let s = &*self.shared;
        if s.overflowed.load(Ordering::Relaxed) {
            return false;
        }
        let mut st = s.state.lock().expect("outbound lock");
        if !st.cork.parts.is_empty() && !self.uncork(&mut st, None) {
            return false;
        }
        self.write_locked(&mut st, entries)
    }

    /// Writes the held messages, and `last` after them, as one `Bundle` frame.
    fn uncork(&self, st: &mut State, last: Option<Bytes>) -> bool {
        let mut cork = std::mem::take(&mut st.cork);
        cork.parts.extend(last);
        let bundle = Bytes::from(encode_bundle(&cork.parts));
        self.write_locked(st, [Entry::frame(OP_BINARY, bundle)])
    }

    /// Sends a message of a fan-out round. A client of protocol 3 or later gets the round's
    /// messages for its connection together, in one `Bundle` with the round's `Snapshot`
    /// ([`Outbound::end_round`]): one frame for a thousand targets, not a thousand frames.
    /// Earlier clients get it at once. False when the connection takes no more frames.
    pub fn send_in_round(&self, message: Bytes) -> bool {
        if self.protocol() < BUNDLE_PROTOCOL {
            return self.send(message);
        }
        let s = &*self.shared;
        if s.overflowed.load(Ordering::Relaxed) {
            return false;
        }
        let mut st = s.state.lock().expect("outbound lock");
        if st.closed {
            return false;
        }
        if st.cork.bytes + message.len() > BUNDLE_BYTES
            && !st.cork.parts.is_empty()
            && !self.uncork(&mut st, None)
        {
            return false;
        }
        st.cork.bytes += message.len();
        st.cork.parts.push(message);
        true
    }

    /// Sends the round's `Snapshot`, after (and with) the messages held for it.
    pub fn end_round(&self, snapshot: Bytes) -> bool {
        let s = &*self.shared;
        if s.overflowed.load(Ordering::Relaxed) {
            return false;
        }
        let mut st = s.state.lock().expect("outbound lock");
        if st.cork.parts.is_empty() {
            return self.write_locked(&mut st, [Entry::frame(OP_BINARY, snapshot)]);
        }
        self.uncork(&mut st, Some(snapshot))
    }

    /// [`Outbound::write`] with the connection's lock held.
    fn write_locked<const N: usize>(&self, st: &mut State, entries: [Entry; N]) -> bool {
        let s = &*self.shared;
        if st.closed {
            return false;
        }
        let was_empty = st.backlog.is_empty();
        let mut written = 0;
        if was_empty {
            // On the stack: this runs once per notification per connection.
            debug_assert!(N <= 2);
            let mut iov = [IoSlice::new(&[]); 4];
            let mut n = 0;
            for e in &entries {
                n += e.slices(&mut iov[n..]);
            }
            match s.sock.try_write_vectored(&iov[..n]) {
                Ok(n) => written = n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => {
                    self.fail(st);
                    return false;
                }
            }
        }
        s.wrote.store(true, Ordering::Relaxed);
        let mut added = 0;
        for mut e in entries {
            let done = written.min(e.len());
            written -= done;
            if done == e.len() {
                continue;
            }
            e.written = done;
            added += e.remaining();
            st.backlog.push_back(e);
        }
        if added > 0 {
            st.bytes += added;
            s.metrics.outbound_bytes(added as i64);
            if st.bytes > s.max_bytes && !s.overflowed.swap(true, Ordering::Relaxed) {
                s.overflow_signal.send_replace(true);
            }
            if was_empty {
                s.backlogged.notify_one();
            }
        }
        true
    }

    /// The socket refused a write: the connection takes no more frames, and its reader is
    /// told to stop.
    fn fail(&self, st: &mut State) {
        st.closed = true;
        self.shared.failed.send_replace(true);
    }

    /// Sends a binary frame; false when the connection takes no more frames.
    pub fn send(&self, frame: Bytes) -> bool {
        self.write([Entry::frame(OP_BINARY, frame)])
    }

    /// Sends two binary frames together (a delta and the `Snapshot` that makes it visible):
    /// one system call when the socket has room.
    pub fn send_pair(&self, first: Bytes, second: Bytes) -> bool {
        self.write([
            Entry::frame(OP_BINARY, first),
            Entry::frame(OP_BINARY, second),
        ])
    }

    pub fn send_message(&self, m: &ServerMessage) -> bool {
        self.send(Bytes::from(encode_server(m)))
    }

    /// Bytes framed elsewhere (the WebSocket reader's control replies).
    fn send_raw(&self, bytes: &[u8]) -> bool {
        self.write([Entry::raw(Bytes::copy_from_slice(bytes))])
    }

    /// Whether anything was written since the last call.
    pub fn take_wrote(&self) -> bool {
        self.shared.wrote.swap(false, Ordering::Relaxed)
    }

    /// Resolves when the backlog gets its first entry (at once if it did since the last
    /// call).
    pub async fn backlogged(&self) {
        self.shared.backlogged.notified().await;
    }

    /// Writes the backlog as the socket takes it; returns when it is empty.
    pub async fn flush(&self) -> io::Result<()> {
        let s = &*self.shared;
        loop {
            {
                let mut st = s.state.lock().expect("outbound lock");
                loop {
                    if st.backlog.is_empty() {
                        return Ok(());
                    }
                    let mut iov = [IoSlice::new(&[]); 2 * MAX_IOV];
                    let mut n = 0;
                    for e in st.backlog.iter().take(MAX_IOV) {
                        n += e.slices(&mut iov[n..]);
                    }
                    let result = s.sock.try_write_vectored(&iov[..n]);
                    match result {
                        Ok(0) => {
                            self.fail(&mut st);
                            return Err(io::ErrorKind::WriteZero.into());
                        }
                        Ok(n) => {
                            st.bytes -= n;
                            s.metrics.outbound_bytes(-(n as i64));
                            let mut left = n;
                            while left > 0 {
                                let front = st.backlog.front_mut().expect("written bytes");
                                let take = left.min(front.remaining());
                                front.written += take;
                                left -= take;
                                if front.remaining() == 0 {
                                    st.backlog.pop_front();
                                }
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => {
                            self.fail(&mut st);
                            return Err(e);
                        }
                    }
                }
            }
            s.sock.writable().await?;
        }
    }

    /// Takes no more frames; queues a Close frame first unless `peer_closed` (the reader
    /// already answered the peer's Close). The flusher writes what is left.
    pub fn close(&self, peer_closed: bool) {
        let mut st = self.shared.state.lock().expect("outbound lock");
        if st.closed {
            return;
        }
        if !st.cork.parts.is_empty() {
            self.uncork(&mut st, None);
        }
        if !peer_closed {
            let body = Bytes::from_static(CLOSE_NORMAL);
            self.write_locked(&mut st, [Entry::frame(OP_CLOSE, body)]);
        }
        st.closed = true;
        if !st.backlog.is_empty() {
            self.shared.backlogged.notify_one();
        }
    }

    /// Resolves when a write to the socket failed (the peer is gone).
    pub fn failed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.shared.failed.subscribe();
        async move {
            let _ = rx.wait_for(|v| *v).await;
        }
    }

    /// Sends `last` (the error saying why), then has the connection close as it does when
    /// the client leaves: its reader stops, its writes are answered, its flusher closes.
    pub fn end(&self, last: &ServerMessage) {
        self.send_message(last);
        self.shared.ended.send_replace(true);
    }

    /// Resolves when the relay ended the connection ([`Outbound::end`]).
    pub fn ended(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.shared.ended.subscribe();
        async move {
            let _ = rx.wait_for(|v| *v).await;
        }
    }

    /// Ends the sending direction (TCP FIN) after what the socket has taken.
    pub fn shutdown_write(&self) {
        let sock: &tokio::net::TcpStream = self.shared.sock.as_ref();
        let _ = socket2::SockRef::from(sock).shutdown(std::net::Shutdown::Write);
    }

    /// For an overflowed connection: drops the backlog's frames not yet begun (a frame
    /// already begun must end, or the stream is corrupt), queues `last` (the error that says
    /// why) and a Close frame, and takes no more.
    pub fn abandon(&self, last: Bytes) {
        let s = &*self.shared;
        let mut st = s.state.lock().expect("outbound lock");
        st.cork = Cork::default();
        let keep = usize::from(st.backlog.front().is_some_and(|e| e.written > 0));
        let dropped: usize = st.backlog.iter().skip(keep).map(Entry::remaining).sum();
        st.backlog.truncate(keep);
        st.bytes -= dropped;
        s.metrics.outbound_bytes(-(dropped as i64));
        for e in [
            Entry::frame(OP_BINARY, last),
            Entry::frame(OP_CLOSE, Bytes::from_static(&CLOSE_NORMAL[..2])),
        ] {
            st.bytes += e.len();
            s.metrics.outbound_bytes(e.len() as i64);
            st.backlog.push_back(e);
        }
        st.closed = true;
    }

    /// Resolves when the connection has overflowed.
    pub fn overflow(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.shared.overflow_signal.subscribe();
        async move {
            let _ = rx.wait_for(|v| *v).await;
        }
    }

    pub fn is_overflowed(&self) -> bool {
        self.shared.overflowed.load(Ordering::Relaxed)
    }

    /// Unwritten bytes waiting for the socket.
    pub fn backlog_bytes(&self) -> usize {
        self.shared.state.lock().expect("outbound lock").bytes
    }

    /// Targets this connection listens to (kept by the fan-out).
    pub(super) fn targets(&self) -> &AtomicUsize {
        &self.shared.targets
    }

    /// Marks the connection as owed a `Snapshot` at `version`; false if it already was.
    pub(super) fn owe_snapshot(&self, version: u64) -> bool {
        self.shared.round.swap(version, Ordering::Relaxed) != version
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let st = self.state.get_mut().expect("outbound lock");
        if st.bytes > 0 {
            self.metrics.outbound_bytes(-(st.bytes as i64));
        }
    }
}

/// The socket as the WebSocket reader sees it: reads from the read half; its own writes
/// (pong and close replies) go through the connection's [`Outbound`], in order with
/// everything else.
pub struct WsIo {
    /// The socket's read half, where the client's frames arrive.
    pub read: OwnedReadHalf,
    /// The same connection's outbound side, which the reader's replies go through.
    pub out: Outbound,
}

impl AsyncRead for WsIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.read).poll_read(cx, buf)
    }
}

impl AsyncWrite for WsIo {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.out.send_raw(buf) {
            Poll::Ready(Ok(buf.len()))
        } else {
            Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()))
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Sockets for tests of the outbound side and the fan-out.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// A connected pair: the server side's outbound, and the client's stream.
    pub(crate) async fn pair(max: usize) -> (Outbound, OwnedReadHalf, tokio::net::TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(l.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = l.accept().await.unwrap();
        let (r, w) = server.into_split();
        // A distinct connection id per pair, as the relay gives.
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        (
            Outbound::new(id, w, max, Arc::new(Metrics::default())),
            r,
            client,
        )
    }

    /// Reads WebSocket frames from the client's side of the socket.
    #[derive(Default)]
    pub(crate) struct FrameReader {
        /// Bytes read from the socket and not yet returned as a frame.
        buf: Vec<u8>,
        /// Messages of a bundle read and not yet returned.
        messages: std::collections::VecDeque<ServerMessage>,
    }

    impl FrameReader {
        /// The next relay message, whether it came alone or in a bundle.
        pub(crate) async fn message(&mut self, c: &mut tokio::net::TcpStream) -> ServerMessage {
            loop {
                if let Some(m) = self.messages.pop_front() {
                    return m;
                }
                let (op, payload) = self.next(c).await;
                assert_eq!(op, OP_BINARY, "a binary frame");
                let decoded = hearth_core::protocol::codec::decode_server_frame(&payload);
                self.messages.extend(decoded.expect("a relay frame"));
            }
        }

        /// The next frame: (opcode, payload).
        pub(crate) async fn next(&mut self, c: &mut tokio::net::TcpStream) -> (u8, Vec<u8>) {
            loop {
                let b = &self.buf;
                if b.len() >= 2 {
                    let (len, head) = match b[1] & 0x7F {
                        126 if b.len() >= 4 => (u16::from_be_bytes([b[2], b[3]]) as usize, 4),
                        127 if b.len() >= 10 => (
                            u64::from_be_bytes(b[2..10].try_into().unwrap()) as usize,
                            10,
                        ),
                        126 | 127 => (usize::MAX - 10, 0),
                        l => (l as usize, 2),
                    };
                    if head > 0 && b.len() >= head + len {
                        assert_eq!(b[0] & 0x80, 0x80, "FIN");
                        assert_eq!(b[1] & 0x80, 0, "server frames are unmasked");
                        let frame = (b[0] & 0x0F, b[head..head + len].to_vec());
                        self.buf.drain(..head + len);
                        return frame;
                    }
                }
                let mut chunk = vec![0; 1 << 16];
                let k =
                    tokio::time::timeout(std::time::Duration::from_secs(10), c.read(&mut chunk))
                        .await
                        .expect("no frame within 10 s")
                        .unwrap();
                assert!(k > 0, "closed mid-frame");
                self.buf.extend_from_slice(&chunk[..k]);
            }
        }
    }

    pub(crate) async fn read_frames(c: &mut tokio::net::TcpStream, n: usize) -> Vec<(u8, Vec<u8>)> {
        let mut r = FrameReader::default();
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(r.next(c).await);
        }
        out
    }
}

#[cfg(test)]
mod tests;

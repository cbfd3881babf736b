//! The fan-out benchmark's lean listeners: a minimal WebSocket reader per connection, and
//! one thread that receives on all of them through one epoll set (mio).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use hearth_core::path::DocumentName;
use hearth_core::query::model::Query;
use hearth_core::value::Value;

use super::ListenResult;
use crate::cli::TargetArgs;
use crate::measure::now_us;
use crate::relay_proc::open_many;

/// The fan-out benchmark's lean listener: one WebSocket with one target, read directly from
/// the TCP stream (no reader task, no per-target buffering, no copies of the result, no
/// zero-filled read buffer). Every frame the relay sends is decoded in full with the
/// protocol codec (`decode_server`); a notification counts when the `Snapshot` that follows
/// the target's change has been read.
pub(super) struct LeanListener {
    pub(super) stream: tokio::net::TcpStream,
    pub(super) buf: Vec<u8>,
    /// Start of the unread bytes in `buf`.
    pub(super) pos: usize,
}

/// A client-to-server WebSocket binary frame. Client frames must be masked; the mask key is
/// zero, which leaves the payload as it is.
fn ws_client_frame(payload: &[u8]) -> Vec<u8> {
    let n = payload.len();
    let mut f = Vec::with_capacity(n + 14);
    f.push(0x82);
    if n < 126 {
        f.push(0x80 | n as u8);
    } else if n <= 0xFFFF {
        f.push(0x80 | 126);
        f.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        f.push(0x80 | 127);
        f.extend_from_slice(&(n as u64).to_be_bytes());
    }
    f.extend_from_slice(&[0; 4]);
    f.extend_from_slice(payload);
    f
}

/// The first complete server frame in `b`: (opcode, payload start, payload end).
fn ws_server_frame(b: &[u8]) -> Result<Option<(u8, usize, usize)>> {
    if b.len() < 2 {
        return Ok(None);
    }
    if b[0] & 0x80 == 0 {
        bail!("a fragmented frame: the lean listener expects one frame per message");
    }
    if b[1] & 0x80 != 0 {
        bail!("a masked frame from the relay");
    }
    let (len, head) = match b[1] & 0x7F {
        126 if b.len() >= 4 => (u16::from_be_bytes([b[2], b[3]]) as usize, 4),
        127 if b.len() >= 10 => (
            u64::from_be_bytes(b[2..10].try_into().expect("8 bytes")) as usize,
            10,
        ),
        126 | 127 => return Ok(None),
        n => (n as usize, 2),
    };
    if b.len() < head + len {
        return Ok(None);
    }
    Ok(Some((b[0] & 0x0F, head, head + len)))
}

impl LeanListener {
    /// Connects, upgrades to a WebSocket, and sends `Hello`; returns after the `Welcome`.
    async fn open(url: &str, t: &TargetArgs, client_id: String) -> Result<LeanListener> {
        use hearth_core::protocol::codec::encode_client;
        use hearth_core::protocol::{ClientMessage, ServerMessage, PROTOCOL_VERSION};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let rest = url
            .strip_prefix("ws://")
            .ok_or_else(|| anyhow!("the lean listener needs a ws:// URL, not {url}"))?;
        let (host, path) = match rest.split_once('/') {
            Some((h, p)) => (h, format!("/{p}")),
            None => (rest, "/".to_owned()),
        };
        let mut stream = tokio::net::TcpStream::connect(host).await?;
        stream.set_nodelay(true)?;
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await?;
        let mut buf = Vec::with_capacity(1024);
        let head_end = loop {
            if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p + 4;
            }
            if buf.len() > 16 << 10 || stream.read_buf(&mut buf).await? == 0 {
                bail!("no WebSocket handshake answer");
            }
        };
        let status = String::from_utf8_lossy(&buf[..head_end]);
        let status = status.lines().next().unwrap_or_default().to_owned();
        if !status.starts_with("HTTP/1.1 101") {
            bail!("WebSocket upgrade refused: {status}");
        }
        let mut l = LeanListener {
            stream,
            buf,
            pos: head_end,
        };
        l.send(&encode_client(&ClientMessage::Hello {
            protocol_version: PROTOCOL_VERSION,
            database: t.database.clone(),
            client_id,
            token: t.token.clone(),
        }))
        .await?;
        match l.next().await? {
            ServerMessage::Welcome { .. } => Ok(l),
            other => bail!("expected a Welcome, got {other:?}"),
        }
    }

    async fn send(&mut self, payload: &[u8]) -> Result<()> {
        use tokio::io::AsyncWriteExt;
        self.stream.write_all(&ws_client_frame(payload)).await?;
        Ok(())
    }

    pub(super) async fn listen(&mut self, target_id: u32, query: &Query) -> Result<()> {
        use hearth_core::protocol::codec::encode_client;
        use hearth_core::protocol::ClientMessage;
        self.send(&encode_client(&ClientMessage::Listen {
            target_id,
            query: query.clone(),
            resume_version: None,
        }))
        .await
    }

    /// The next message from the relay, decoded.
    async fn next(&mut self) -> Result<hearth_core::protocol::ServerMessage> {
        use hearth_core::protocol::codec::decode_server;
        let (start, end) = self.next_frame().await?;
        decode_server(&self.buf[start..end]).map_err(|e| anyhow!("undecodable frame: {e}"))
    }

    /// The next binary message from the relay: its range in `buf`, valid until the next call.
    async fn next_frame(&mut self) -> Result<(usize, usize)> {
        use tokio::io::AsyncReadExt;
        loop {
            if let Some((op, start, end)) = ws_server_frame(&self.buf[self.pos..])? {
                let (start, end) = (self.pos + start, self.pos + end);
                self.pos = end;
                match op {
                    0x2 => return Ok((start, end)),
                    0x8 => bail!("the relay closed the connection"),
                    0x9 | 0xA => continue,
                    op => bail!("unexpected WebSocket opcode {op}"),
                }
            }
            if self.pos > 0 {
                self.buf.drain(..self.pos);
                self.pos = 0;
            }
            if self.buf.capacity() - self.buf.len() < 512 {
                self.buf.reserve(4096);
            }
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                bail!("the connection closed");
            }
        }
    }
}

/// One in this many lean listeners decodes the listened document in every change and
/// checks it against the write committed at the snapshot's version.
const CHECK_EVERY: usize = 50;

/// One lean listener in the reactor: its socket, unread bytes, and what it has seen.
struct LeanConn {
    sock: mio::net::TcpStream,
    buf: Vec<u8>,
    /// Start of the unread bytes in `buf`.
    pos: usize,
    /// Decodes the document in every change (see `CHECK_EVERY`).
    check: bool,
    /// The initial result's `Snapshot` is still to come.
    first: bool,
    /// A change to the target arrived since the last snapshot.
    changed: bool,
    /// The document's `seq` in that change, when checked.
    seq: Option<u64>,
    done: bool,
    r: ListenResult,
}

impl LeanConn {
    fn fail(&mut self, e: String) {
        self.r.error.get_or_insert(e);
        self.done = true;
    }

    /// Handles every complete frame in `buf`. A notification is a `TargetChange` for the
    /// listened target followed by its `Snapshot { version }`; the time is taken when the
    /// snapshot has been read. Snapshots are decoded with the protocol codec; of a
    /// `TargetChange`, only the type byte and target id are read, except on the listeners
    /// that `check`, which decode it in full and record the document's `seq`, so the run can
    /// verify that each version carried the write committed at it.
    fn process(&mut self, name: &DocumentName, writes: u64, ready: &AtomicUsize) {
        use hearth_core::protocol::codec::decode_server_frame;
        while !self.done {
            let (start, end) = match ws_server_frame(&self.buf[self.pos..]) {
                Err(e) => return self.fail(e.to_string()),
                Ok(None) => break,
                Ok(Some((op, start, end))) => {
                    let (start, end) = (self.pos + start, self.pos + end);
                    self.pos = end;
                    match op {
                        0x2 => (start, end),
                        0x8 => return self.fail("the relay closed the connection".into()),
                        0x9 | 0xA => continue,
                        op => return self.fail(format!("unexpected WebSocket opcode {op}")),
                    }
                }
            };
            let payload = &self.buf[start..end];
            if !self.check
                && payload.first() == Some(&hearth_core::protocol::codec::ty::TARGET_CHANGE)
            {
                // The target id, a varint: this listener's only target is 1.
                if payload.get(1) != Some(&1) {
                    let e = format!("a change for another target: {payload:02x?}");
                    return self.fail(e);
                }
                self.changed = true;
                continue;
            }
            let messages = match decode_server_frame(payload) {
                Ok(m) => m,
                Err(e) => return self.fail(format!("undecodable frame: {e}")),
            };
            for m in messages {
                if let Err(e) = self.take(m, name, writes, ready) {
                    return self.fail(e);
                }
            }
        }
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos > 1 << 16 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
    }

    /// Takes one message of the listener's connection: Err says why the listener failed.
    fn take(
        &mut self,
        m: hearth_core::protocol::ServerMessage,
        name: &DocumentName,
        writes: u64,
        ready: &AtomicUsize,
    ) -> Result<(), String> {
        use hearth_core::protocol::{DocumentChange, ServerMessage};
        match m {
            ServerMessage::TargetChange {
                target_id: 1,
                changes,
                ..
            } => {
                self.changed = true;
                for c in changes {
                    if let DocumentChange::Upsert(d) = c {
                        if d.name == *name {
                            if let Some(Value::Integer(i)) = d.fields.get("seq") {
                                self.seq = Some(*i as u64);
                            }
                        }
                    }
                }
            }
            ServerMessage::Snapshot { version } => {
                let now = now_us();
                if self.first {
                    // The initial result.
                    self.first = false;
                    self.changed = false;
                    self.seq = None;
                    ready.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
                if std::mem::take(&mut self.changed) {
                    self.r.at_version.push((version, now));
                    if let Some(s) = self.seq.take() {
                        self.r.checked.push((version, s));
                    }
                }
                if self.r.at_version.len() as u64 >= writes {
                    self.done = true;
                }
            }
            ServerMessage::Error { code, message, .. } => {
                return Err(format!("{}: {message}", code.as_str()));
            }
            ServerMessage::Heartbeat { .. } => {}
            other => return Err(format!("unexpected message {other:?}")),
        }
        Ok(())
    }
}

/// Receives on every lean listener from one thread through one epoll set (mio), each until
/// it has seen `writes` notifications or failed, or until `stop`. No task per connection:
/// the load generator shares the machine's cores with the relay, so its own cost per
/// notification (one read system call and a few comparisons here) is kept small.
pub(super) fn lean_reactor(
    conns: Vec<(mio::net::TcpStream, Vec<u8>, usize)>,
    name: DocumentName,
    writes: u64,
    ready: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
) -> Vec<ListenResult> {
    use std::io::Read;
    let mut conns: Vec<LeanConn> = conns
        .into_iter()
        .enumerate()
        .map(|(i, (sock, buf, pos))| LeanConn {
            sock,
            buf,
            pos,
            check: i % CHECK_EVERY == 0,
            first: true,
            changed: false,
            seq: None,
            done: false,
            r: ListenResult {
                seen: Vec::new(),
                last_seq: 0,
                at_version: Vec::with_capacity(writes as usize),
                checked: Vec::new(),
                error: None,
                _keep: None,
            },
        })
        .collect();
    let finish = |conns: Vec<LeanConn>| {
        conns
            .into_iter()
            .map(|mut c| {
                c.r._keep = Some(Box::new(c.sock));
                c.r
            })
            .collect()
    };
    let mut poll = match mio::Poll::new() {
        Ok(p) => p,
        Err(e) => {
            for c in &mut conns {
                c.fail(format!("epoll: {e}"));
            }
            return finish(conns);
        }
    };
    for (i, c) in conns.iter_mut().enumerate() {
        if let Err(e) =
            poll.registry()
                .register(&mut c.sock, mio::Token(i), mio::Interest::READABLE)
        {
            c.fail(format!("epoll registration: {e}"));
        }
        // Frames read with the handshake.
        c.process(&name, writes, &ready);
    }
    let mut open = conns.iter().filter(|c| !c.done).count();
    let mut events = mio::Events::with_capacity(1024);
    let mut scratch = vec![0u8; 1 << 16];
    while open > 0 && !stop.load(Ordering::Relaxed) {
        if let Err(e) = poll.poll(&mut events, Some(Duration::from_millis(50))) {
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            for c in conns.iter_mut().filter(|c| !c.done) {
                c.fail(format!("epoll wait: {e}"));
            }
            break;
        }
        for ev in events.iter() {
            let c = &mut conns[ev.token().0];
            if c.done {
                continue;
            }
            // Edge-triggered: read until the socket is drained (a short read drains it).
            loop {
                match c.sock.read(&mut scratch) {
                    Ok(0) => {
                        c.fail("the connection closed".into());
                        break;
                    }
                    Ok(k) => {
                        c.buf.extend_from_slice(&scratch[..k]);
                        if k < scratch.len() {
                            break;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        c.fail(e.to_string());
                        break;
                    }
                }
            }
            c.process(&name, writes, &ready);
            if c.done {
                open -= 1;
            }
        }
    }
    finish(conns)
}

/// `n` lean connections, `concurrency` handshakes at a time, each with its own client id.
pub(super) async fn lean_connect_many(
    url: &str,
    t: &TargetArgs,
    prefix: &str,
    n: usize,
    concurrency: usize,
) -> (Vec<LeanListener>, Vec<String>) {
    let (url, t) = (url.to_owned(), t.clone());
    open_many(prefix, n, concurrency, move |id| {
        let (url, t) = (url.clone(), t.clone());
        async move {
            LeanListener::open(&url, &t, id.clone())
                .await
                .map_err(|e| anyhow!("connecting {id} to {url}: {e}"))
        }
    })
    .await
}

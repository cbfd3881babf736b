//! Real-time fan-out: listened queries, grouped by identical query, kept current by the
//! committed changes, with deltas pushed to every subscriber's outbound queue.
//!
//! Identical queries (same database, same encoded query) share one [`View`], so a change is
//! matched once and its frame encoded once however many clients listen; each subscriber's
//! frame differs only in its target id. After the deltas of a round of commits, every
//! affected connection gets one `Snapshot{version}`: the point at which all its targets are
//! consistent.
//!
//! Architecture invariant: frames for one connection are queued under the database's fan-out
//! lock, so a target's initial result always precedes its deltas, and deltas follow commit
//! order.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::mpsc;

use super::commit::Committed;
use crate::core::document::Document;
use crate::core::protocol::codec::{encode_query, encode_server};
use crate::core::protocol::{DocumentChange, ServerMessage, TargetChangeKind};
use crate::core::query::model::Query;
use crate::core::query::validate::QueryError;
use crate::core::query::view::{ChangeType, DocChange, View};

/// A connection's outbound queue, bounded in bytes: past the bound the connection is marked
/// overflowed and its writer drops it (the client resumes from its last snapshot).
#[derive(Clone)]
pub struct Outbound {
    pub conn: u64,
    tx: mpsc::UnboundedSender<Bytes>,
    queued: Arc<AtomicUsize>,
    overflowed: Arc<AtomicBool>,
    /// Fires once when the connection overflows, so a writer blocked on a stalled socket
    /// and a reader waiting for frames both stop.
    overflow_signal: Arc<tokio::sync::watch::Sender<bool>>,
    max_bytes: usize,
}

impl Outbound {
    pub fn new(conn: u64, max_bytes: usize) -> (Outbound, mpsc::UnboundedReceiver<Bytes>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Outbound {
                conn,
                tx,
                queued: Arc::new(AtomicUsize::new(0)),
                overflowed: Arc::new(AtomicBool::new(false)),
                overflow_signal: Arc::new(tokio::sync::watch::channel(false).0),
                max_bytes,
            },
            rx,
        )
    }

    /// Queues a frame; false when the connection is gone or overflowed.
    pub fn send(&self, frame: Bytes) -> bool {
        if self.overflowed.load(Ordering::Relaxed) {
            return false;
        }
        let len = frame.len();
        if self.queued.fetch_add(len, Ordering::Relaxed) + len > self.max_bytes {
            self.overflowed.store(true, Ordering::Relaxed);
            self.overflow_signal.send_replace(true);
            return false;
        }
        self.tx.send(frame).is_ok()
    }

    pub fn send_message(&self, m: &ServerMessage) -> bool {
        self.send(Bytes::from(encode_server(m)))
    }

    /// The writer took a frame of `len` bytes off the queue.
    pub fn sent(&self, len: usize) {
        self.queued.fetch_sub(len, Ordering::Relaxed);
    }

    pub fn queued_bytes(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// Resolves when the connection has overflowed.
    pub fn overflow(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.overflow_signal.subscribe();
        async move {
            let _ = rx.wait_for(|v| *v).await;
        }
    }

    pub fn is_overflowed(&self) -> bool {
        self.overflowed.load(Ordering::Relaxed)
    }
}

struct Subscriber {
    target_id: u32,
    out: Outbound,
}

struct Group {
    view: View,
    /// The version the view reflects.
    version: u64,
    subscribers: Vec<Subscriber>,
}

/// Runs a query against the latest committed state: (documents, version).
pub type Requery<'a> = &'a dyn Fn(&Query) -> Result<(Vec<Document>, u64), QueryError>;

#[derive(Default)]
struct Inner {
    groups: HashMap<Vec<u8>, Group>,
    by_target: HashMap<(u64, u32), Vec<u8>>,
    /// Initial results held back until the published version reaches theirs (the initial
    /// read saw commits not yet published): sending them earlier would let a `Snapshot` of
    /// an older version cover contents of a newer one.
    pending: Vec<(Outbound, u64, Vec<ServerMessage>)>,
}

/// The fan-out of one database.
#[derive(Default)]
pub struct Fanout {
    inner: Mutex<Inner>,
    /// Latest version whose changes have been fanned out (heartbeats carry it).
    pub published: AtomicU64,
}

/// A frame's bytes with another target id: type byte, target id varint, rest unchanged.
fn retarget(template: &[u8], target_id: u32) -> Bytes {
    // The template was encoded with target id 0, one varint byte.
    let mut out = Vec::with_capacity(template.len() + 4);
    out.push(template[0]);
    let mut v = target_id;
    loop {
        let b = (v & 0x7F) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            break;
        }
        out.push(b | 0x80);
    }
    out.extend_from_slice(&template[2..]);
    Bytes::from(out)
}

/// Most change bytes (estimated) in one TargetChange frame: half the frame limit, so names
/// and framing never push a frame over it.
const CHUNK_BYTES: usize = crate::core::protocol::MAX_FRAME_BYTES / 2;

/// Splits changes into frames' worth; a result too big for one frame travels as several
/// TargetChange messages before the Snapshot (docs/protocol.md).
fn chunks(changes: Vec<DocumentChange>) -> Vec<Vec<DocumentChange>> {
    let mut out = vec![Vec::new()];
    let mut size = 0;
    for c in changes {
        let n = match &c {
            DocumentChange::Upsert(d) => {
                crate::core::encoding::document::encoded_size(&d.fields) + 64
            }
            DocumentChange::Remove(_) => 64,
        };
        if size + n > CHUNK_BYTES && !out.last().expect("never empty").is_empty() {
            out.push(Vec::new());
            size = 0;
        }
        size += n;
        out.last_mut().expect("never empty").push(c);
    }
    out
}

/// A target's changes as messages that each fit a frame; only the first carries `kind` (a
/// Reset), the rest are Deltas on top of it.
fn target_change_messages(
    target_id: u32,
    kind: TargetChangeKind,
    changes: Vec<DocumentChange>,
) -> Vec<ServerMessage> {
    chunks(changes)
        .into_iter()
        .enumerate()
        .map(|(i, part)| ServerMessage::TargetChange {
            target_id,
            kind: if i == 0 {
                kind
            } else {
                TargetChangeKind::Delta
            },
            changes: part,
        })
        .collect()
}

fn to_wire(changes: &[DocChange]) -> Vec<DocumentChange> {
    changes
        .iter()
        .map(|c| match c.kind {
            ChangeType::Removed => DocumentChange::Remove(c.doc.name.clone()),
            ChangeType::Added | ChangeType::Modified => DocumentChange::Upsert(c.doc.clone()),
        })
        .collect()
}

/// How a new listen should start.
pub enum Start {
    /// No resume point: the full result.
    Fresh,
    /// Resume from this version; `changed` lists names changed since (None: too old).
    Resume(Option<Vec<crate::core::path::DocumentName>>),
}

impl Fanout {
    pub fn new(version: u64) -> Fanout {
        Fanout {
            inner: Mutex::new(Inner::default()),
            published: AtomicU64::new(version),
        }
    }

    /// Number of targets listening.
    pub fn listens(&self) -> usize {
        self.inner.lock().expect("fanout lock").by_target.len()
    }

    /// Adds a target. `initial` reads the query's current result when no identical query
    /// is live; `start` says what the client already has.
    pub fn listen(
        &self,
        out: &Outbound,
        target_id: u32,
        query: Query,
        initial: impl FnOnce(&Query) -> Result<(Vec<Document>, u64), QueryError>,
        start: impl FnOnce(u64) -> Start,
    ) -> Result<(), QueryError> {
        let mut key = Vec::new();
        encode_query(&query, &mut key);
        let mut inner = self.inner.lock().expect("fanout lock");
        if inner.by_target.contains_key(&(out.conn, target_id)) {
            return Err(QueryError::InvalidArgument(format!(
                "target {target_id} is already listening on this connection"
            )));
        }
        if !inner.groups.contains_key(&key) {
            let (docs, version) = initial(&query)?;
            inner.groups.insert(
                key.clone(),
                Group {
                    view: View::new(query, docs),
                    version,
                    subscribers: Vec::new(),
                },
            );
        }
        let group = inner.groups.get_mut(&key).expect("inserted above");
        let limited = group.view.query().limit.is_some();
        let (kind, changes) = match start(group.version) {
            Start::Resume(Some(changed)) if !limited => {
                let changes = changed
                    .iter()
                    .map(
                        |name| match group.view.documents().iter().find(|d| d.name == *name) {
                            Some(d) => DocumentChange::Upsert(d.clone()),
                            None => DocumentChange::Remove(name.clone()),
                        },
                    )
                    .collect();
                (TargetChangeKind::Delta, changes)
            }
            _ => (
                TargetChangeKind::Reset,
                group
                    .view
                    .documents()
                    .iter()
                    .cloned()
                    .map(DocumentChange::Upsert)
                    .collect(),
            ),
        };
        let messages = target_change_messages(target_id, kind, changes);
        group.subscribers.push(Subscriber {
            target_id,
            out: out.clone(),
        });
        let version = group.version;
        inner.by_target.insert((out.conn, target_id), key);
        let published = self.published.load(Ordering::Acquire);
        if version <= published {
            for m in &messages {
                out.send_message(m);
            }
            out.send_message(&ServerMessage::Snapshot { version: published });
        } else {
            inner.pending.push((out.clone(), version, messages));
        }
        Ok(())
    }

    /// Removes a target; false if it did not exist.
    pub fn unlisten(&self, conn: u64, target_id: u32) -> bool {
        let mut inner = self.inner.lock().expect("fanout lock");
        let Some(key) = inner.by_target.remove(&(conn, target_id)) else {
            return false;
        };
        if let Some(g) = inner.groups.get_mut(&key) {
            g.subscribers
                .retain(|s| !(s.out.conn == conn && s.target_id == target_id));
            if g.subscribers.is_empty() {
                inner.groups.remove(&key);
            }
        }
        true
    }

    /// Removes every target of a connection; returns how many there were.
    pub fn drop_connection(&self, conn: u64) -> usize {
        let targets: Vec<u32> = {
            let inner = self.inner.lock().expect("fanout lock");
            inner
                .by_target
                .keys()
                .filter(|(c, _)| *c == conn)
                .map(|(_, t)| *t)
                .collect()
        };
        for t in &targets {
            self.unlisten(conn, *t);
        }
        self.inner
            .lock()
            .expect("fanout lock")
            .pending
            .retain(|(o, _, _)| o.conn != conn);
        targets.len()
    }

    /// Applies committed versions (ascending, all of this database) to every view and
    /// queues the resulting frames. Returns the number of frames queued.
    pub fn publish(&self, commits: &[Committed], requery: Requery) -> usize {
        let Some(last) = commits.last().map(|c| c.version) else {
            return 0;
        };
        let mut inner = self.inner.lock().expect("fanout lock");
        let mut frames = 0;
        let mut affected: BTreeMap<u64, Outbound> = BTreeMap::new();
        // Held-back initial results whose version is now published go first: the deltas
        // below are computed on top of them.
        let (due, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut inner.pending)
            .into_iter()
            .partition(|(_, v, _)| *v <= last);
        inner.pending = waiting;
        for (o, _, messages) in due {
            for m in &messages {
                if o.send_message(m) {
                    frames += 1;
                }
            }
            affected.entry(o.conn).or_insert(o);
        }
        for group in inner.groups.values_mut() {
            let mut changes = Vec::new();
            let mut refill = false;
            for c in commits.iter().filter(|c| c.version > group.version) {
                for (name, new) in &c.changes {
                    let u = group.view.apply(name, new.as_ref());
                    changes.extend(u.changes);
                    refill |= u.needs_refill;
                }
            }
            group.version = group.version.max(last);
            if refill {
                match requery(group.view.query()) {
                    Ok((docs, version)) => {
                        changes.extend(group.view.reset(docs));
                        group.version = group.version.max(version);
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "refilling a limited listen failed");
                    }
                }
            }
            if changes.is_empty() {
                continue;
            }
            for part in chunks(to_wire(&changes)) {
                let template = encode_server(&ServerMessage::TargetChange {
                    target_id: 0,
                    kind: TargetChangeKind::Delta,
                    changes: part,
                });
                for s in &group.subscribers {
                    if s.out.send(retarget(&template, s.target_id)) {
                        frames += 1;
                    }
                }
            }
            for s in &group.subscribers {
                affected.entry(s.out.conn).or_insert_with(|| s.out.clone());
            }
        }
        self.published.store(last, Ordering::Release);
        let snapshot = Bytes::from(encode_server(&ServerMessage::Snapshot { version: last }));
        for out in affected.values() {
            if out.send(snapshot.clone()) {
                frames += 1;
            }
        }
        frames
    }
}

//! Real-time fan-out: listened queries, grouped by identical query, kept current by the
//! committed changes, with deltas written to every subscriber's connection.
//!
//! Identical queries (same database, same encoded query) share one [`View`], so a change is
//! matched once and its frame encoded once however many clients listen; each subscriber's
//! frame differs only in its target id, and subscribers with the same target id share the
//! bytes. After the deltas of a round of commits, every affected connection gets one
//! `Snapshot{version}`: the point at which all its targets are consistent. A connection with
//! a single target gets its delta and snapshot in one write (one system call). Unlisten and
//! connection close are O(1) per target: each target knows its group and its index in the
//! group's subscriber list.
//!
//! A change reaches only the groups whose query can hold it: groups are indexed by their
//! source (a collection by its path, a collection group by its id), and a commit's document
//! is looked up by its parent collection and its collection id. Groups it cannot reach stay
//! as they are; [`Inner::applied`] says they are current up to the last published version.
//!
//! Architecture invariant: frames for one connection are written under the database's fan-out
//! lock, so a target's initial result always precedes its deltas, and deltas follow commit
//! order.
//!
//! Nothing done under the lock panics on data: frames are encoded with
//! [`try_encode_server`], and a document the encoding refuses ends the targets that would
//! carry it with a `data-loss` error naming it, while every other target goes on. Should
//! anything panic there anyway (a bug), the state may be half updated, so the next taker
//! of the lock ([`Fanout::lock`]) does not trust it: every target of the database ends
//! with `internal` (its client listens again) and the fan-out goes on with none, rather
//! than every later caller panicking on the poisoned lock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::commit::Committed;
pub use super::outbound::Outbound;
use frames::{chunks, retarget, target_change_messages};
use groups::{Group, Inner, Slot, Subscriber};
pub use guard::TargetGuard;
use hearth_core::document::Document;
use hearth_core::error::ErrorCode;
use hearth_core::path::DocumentName;
use hearth_core::protocol::codec::{encode_query, encode_server, try_encode_server};
use hearth_core::protocol::{DocumentChange, ServerMessage, TargetChangeKind};
use hearth_core::query::model::Query;
use hearth_core::query::validate::QueryError;
use hearth_core::query::view::{ChangeType, DocChange, View};
use resume::{existence, resume_changes};

/// Runs a query against the latest committed state: (documents, version).
pub type Requery<'a> = &'a dyn Fn(&Query) -> Result<(Vec<Document>, u64), QueryError>;

/// This database's commits that follow a round, in order, until one at the given version
/// or later (fewer if they do not arrive in time).
pub type CatchUp<'a> = &'a mut dyn FnMut(u64) -> Vec<Committed>;

/// Most times one round takes in later commits for refills that read ahead of it.
const CATCH_UP: usize = 4;

/// The fan-out of one database.
pub struct Fanout {
    /// The groups and subscriptions; its lock is the fan-out lock, under which every frame
    /// of a listen is written, so frames follow commit order.
    inner: Mutex<Inner>,
    /// Latest version whose changes have been fanned out (heartbeats carry it); only
    /// `publish` advances it, after the round's frames are written.
    published: AtomicU64,
    /// Subscribers of one group from which its writes are split across threads, and the
    /// most threads.
    split: (usize, usize),
    /// Set while the fan-out thread has a round for this database that found the lock
    /// busy ([`Fanout::try_publish`]): new listens wait for it to go first.
    publisher_waiting: AtomicBool,
}

/// Longest a new listen waits for a held-back round to be published before it takes the
/// lock anyway.
const YIELD_LIMIT: Duration = Duration::from_secs(2);

/// Distinct target ids whose retargeted frame `publish` keeps for reuse within a group.
const RETARGET_CACHE: usize = 16;

/// A round's document states still to apply to each group (by key), in commit order.
type Due<'a> = HashMap<Arc<[u8]>, Vec<(&'a DocumentName, Option<&'a Document>)>>;

/// Each document's last state in a round of commits, and the version that wrote it.
type RoundStates<'a> = HashMap<&'a DocumentName, (Option<&'a Document>, u64)>;

/// The states `commits` leave their documents in.
fn round_states<'a>(commits: impl Iterator<Item = &'a Committed>) -> RoundStates<'a> {
    let mut states = HashMap::new();
    for c in commits {
        for (name, doc) in &c.changes {
            states.insert(name, (doc.as_ref(), c.version));
        }
    }
    states
}

/// A group's view changes of one round as the wire's changes: one per document, for its
/// last change in the round. A document that left the result says why (see
/// [`DocumentChange`]): its new content or its deletion when a commit of the round changed
/// it, else nothing (another document pushed it out of a window).
fn to_wire(changes: &[DocChange], states: &RoundStates) -> Vec<DocumentChange> {
    let mut last: HashMap<&DocumentName, usize> = HashMap::with_capacity(changes.len());
    for (i, c) in changes.iter().enumerate() {
        last.insert(&c.doc.name, i);
    }
    changes
        .iter()
        .enumerate()
        .filter(|(i, c)| last.get(&c.doc.name) == Some(i))
        .map(|(_, c)| match c.kind {
            ChangeType::Added | ChangeType::Modified => DocumentChange::Upsert(c.doc.clone()),
            ChangeType::Removed => match states.get(&c.doc.name) {
                None => DocumentChange::Remove(c.doc.name.clone()),
                Some((Some(now), _)) => DocumentChange::Leave((*now).clone()),
                Some((None, version)) => DocumentChange::Delete {
                    name: c.doc.name.clone(),
                    version: *version,
                },
            },
        })
        .collect()
}

/// Subscribers from which one part's writes are split across threads.
const PARALLEL_FROM: usize = 2048;

/// How many threads write a part to `subscribers` subscribers: one below `from`, then up to
/// `max`, each with at least `from / 2`.
fn writers_for(subscribers: usize, (from, max): (usize, usize)) -> usize {
    if subscribers < from {
        return 1;
    }
    max.min(subscribers / (from / 2).max(1)).max(1)
}

/// One part of a group's changes in a fan-out round.
struct Round<'a> {
    /// The TargetChange frame encoded with target id 0.
    template: &'a [u8],
    /// The round's last part: a connection's `Snapshot` follows it.
    last_part: bool,
    /// The round's `Snapshot` frame, shared by every connection owed it.
    snapshot: &'a Bytes,
    /// The round's version: a connection is owed one `Snapshot` per version.
    version: u64,
}

impl Round<'_> {
    /// Writes the part to `subs`; adds the connections owed a `Snapshot` after the round to
    /// `affected`. Returns the number of frames written.
    ///
    /// A connection with a single target gets its frame and its `Snapshot` in one write.
    /// Subscribers sharing a target id share the frame's bytes.
    fn deliver(&self, subs: &[Subscriber], affected: &mut Vec<Outbound>) -> usize {
        let mut frames = 0;
        let mut retargeted: Vec<(u32, Bytes)> = Vec::new();
        for s in subs {
            let frame = match retargeted.iter().find(|(t, _)| *t == s.target_id) {
                Some((_, b)) => b.clone(),
                None => {
                    let b = retarget(self.template, s.target_id);
                    if retargeted.len() < RETARGET_CACHE {
                        retargeted.push((s.target_id, b.clone()));
                    }
                    b
                }
            };
            if !self.last_part {
                if s.out.send_in_round(frame) {
                    frames += 1;
                }
                continue;
            }
            let solo = s.out.targets().load(Ordering::Relaxed) == 1;
            let owed = s.out.owe_snapshot(self.version);
            if solo && owed {
                // Its only target: the snapshot can follow at once.
                if s.out.send_pair(frame, self.snapshot.clone()) {
                    frames += 2;
                }
            } else {
                if s.out.send_in_round(frame) {
                    frames += 1;
                }
                if owed {
                    affected.push(s.out.clone());
                }
            }
        }
        frames
    }
}

/// How a new listen should start.
pub enum Start {
    /// No resume point: the full result.
    Fresh,
    /// Resume from the client's version: the documents changed since, with their states
    /// (None: the changelog no longer tells).
    Resume(Option<Changed>),
    /// The states could only be read at a version the fan-out has not published yet (a
    /// commit is on its way to it): ask again in a moment.
    Behind,
}

/// The documents changed since a resuming client's version.
pub struct Changed {
    /// The version their states were read at: the group's, unless the caller accepted a
    /// later one.
    pub read_at: u64,
    /// Each changed document (in the listen's source) and its state (`None`: absent).
    pub states: Vec<(DocumentName, Option<Document>)>,
}

/// What [`Fanout::listen`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Listened {
    /// The target listens; its first frames are written or held until their version.
    Started,
    /// `start` said [`Start::Behind`]: nothing changed, the caller asks again shortly.
    Behind,
}

impl Fanout {
    /// The fan-out of a database whose last commit is `version`.
    pub fn new(version: u64) -> Fanout {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Fanout {
            inner: Mutex::new(Inner::new(version)),
            published: AtomicU64::new(version),
            split: (PARALLEL_FROM, cores.min(8)),
            publisher_waiting: AtomicBool::new(false),
        }
    }

    /// Latest version whose changes have been fanned out: every listener's frames up to it
    /// are written.
    pub fn published(&self) -> u64 {
        self.published.load(Ordering::Acquire)
    }

    /// How many targets the fan-out ended itself (a document it could not send, a
    /// recovery from a panic) since the last call: they are no longer listens.
    pub fn take_ended(&self) -> usize {
        std::mem::take(&mut self.lock().ended)
    }

    /// Takes the fan-out lock. A lock poisoned by a panic under it (a bug: nothing there
    /// panics on data) is taken anyway, after ending every target with `internal` and
    /// forgetting every group, since a view may have been left half updated.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(guard) => guard,
            Err(poisoned) => {
                let mut guard = poisoned.into_inner();
                self.inner.clear_poison();
                tracing::error!(
                    "a panic under the fan-out lock: every listen of the database ends"
                );
                guard.reset_after_panic();
                guard
            }
        }
    }

    /// Number of targets listening.
    pub fn listens(&self) -> usize {
        self.lock().by_target.len()
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
        rules: Option<Arc<dyn TargetGuard>>,
    ) -> Result<Listened, QueryError> {
        let mut encoded = Vec::new();
        encode_query(&query, &mut encoded);
        // A round held back by the lock goes first: listens that keep taking it one after
        // another (each reading its first result under it) would otherwise starve it.
        let since = Instant::now();
        while self.publisher_waiting.load(Ordering::Acquire) && since.elapsed() < YIELD_LIMIT {
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut guard = self.lock();
        let inner = &mut *guard;
        if inner.by_target.contains_key(&(out.conn(), target_id)) {
            return Err(QueryError::InvalidArgument(format!(
                "target {target_id} is already listening on this connection"
            )));
        }
        let key: Arc<[u8]> = match inner.groups.get_key_value(&encoded[..]) {
            Some((k, _)) => k.clone(),
            None => {
                let (docs, version) = initial(&query)?;
                let k: Arc<[u8]> = encoded.into();
                inner.add_group(
                    k.clone(),
                    Group {
                        view: View::new(query, docs),
                        version,
                        subscribers: Vec::new(),
                    },
                );
                k
            }
        };
        let applied = inner.applied;
        let Some(group) = inner.groups.get_mut(&key[..]) else {
            // Not reached: the group was found or added above, under the same lock.
            return Err(QueryError::Corrupt("a listen group vanished".into()));
        };
        let version = group.version.max(applied);
        let start = start(version);
        if matches!(start, Start::Behind) {
            if group.subscribers.is_empty() {
                inner.remove_group(&key[..]);
            }
            return Ok(Listened::Behind);
        }
        let (kind, changes) = resume_changes(&group.view, start, rules.as_deref());
        let mut messages = target_change_messages(target_id, kind, changes);
        if kind == TargetChangeKind::Delta && out.protocol() >= 2 {
            messages.push(existence(target_id, &group.view));
        }
        // Encoded before the target is added: a document the encoding refuses ends this
        // listen only.
        let frames: Result<Vec<Bytes>, _> = messages
            .iter()
            .map(|m| try_encode_server(m).map(Bytes::from))
            .collect();
        let frames = match frames {
            Ok(f) => f,
            Err(e) => {
                if group.subscribers.is_empty() {
                    inner.remove_group(&key[..]);
                }
                return Err(QueryError::Corrupt(e.to_string()));
            }
        };
        let index = group.subscribers.len();
        group.subscribers.push(Subscriber {
            target_id,
            out: out.clone(),
            guard: rules,
        });
        inner
            .by_target
            .insert((out.conn(), target_id), Slot { key, index });
        inner.by_conn.entry(out.conn()).or_default().push(target_id);
        out.targets().fetch_add(1, Ordering::Relaxed);
        let published = self.published.load(Ordering::Acquire);
        if version <= published {
            // One bundle for a client that takes them (protocol 3).
            for f in frames {
                out.send_in_round(f);
            }
            out.end_round(Bytes::from(encode_server(&ServerMessage::Snapshot {
                version: published,
            })));
        } else {
            inner.pending.push((out.clone(), version, frames));
        }
        Ok(Listened::Started)
    }

    /// The targets of connection `conn` and their queries.
    pub fn targets_of(&self, conn: u64) -> Vec<(u32, Query)> {
        let guard = self.lock();
        let Some(targets) = guard.by_conn.get(&conn) else {
            return Vec::new();
        };
        targets
            .iter()
            .filter_map(|t| {
                let slot = guard.by_target.get(&(conn, *t))?;
                let group = guard.groups.get(&slot.key[..])?;
                Some((*t, group.view.query().clone()))
            })
            .collect()
    }

    /// Every target under security rules: its connection, id, write side and guard (to be
    /// proved again when the rules change).
    pub fn guarded(&self) -> Vec<(u32, Outbound, Arc<dyn TargetGuard>)> {
        let inner = self.lock();
        inner
            .groups
            .values()
            .flat_map(|g| g.subscribers.iter())
            .filter_map(|s| Some((s.target_id, s.out.clone(), s.guard.clone()?)))
            .collect()
    }

    /// Replaces the guard of a target (proved again under new rules or a new identity);
    /// false if the target is gone.
    pub fn set_guard(
        &self,
        conn: u64,
        target_id: u32,
        rules: Option<Arc<dyn TargetGuard>>,
    ) -> bool {
        let mut inner = self.lock();
        let Some(slot) = inner.by_target.get(&(conn, target_id)) else {
            return false;
        };
        let (key, index) = (slot.key.clone(), slot.index);
        let Some(sub) = inner
            .groups
            .get_mut(&key[..])
            .and_then(|g| g.subscribers.get_mut(index))
        else {
            return false;
        };
        sub.guard = rules;
        true
    }

    /// Removes a target; false if it did not exist. O(1).
    pub fn unlisten(&self, conn: u64, target_id: u32) -> bool {
        self.lock().unlisten(conn, target_id)
    }

    /// Removes every target of a connection and returns their ids (the connection stays).
    pub fn end_listens(&self, conn: u64) -> Vec<u32> {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let targets = inner.by_conn.remove(&conn).unwrap_or_default();
        for t in &targets {
            inner.unlisten(conn, *t);
        }
        if !inner.pending.is_empty() {
            inner.pending.retain(|(o, _, _)| o.conn() != conn);
        }
        targets
    }

    /// Ends every connection listening here with a connection-level error (`code`,
    /// `message`): their clients reconnect and resume. Returns the targets ended.
    pub fn end_connections(&self, code: ErrorCode, message: &str) -> usize {
        self.lock().end_connections(code, message)
    }

    /// Removes every target of a connection; returns how many there were. O(its targets).
    pub fn drop_connection(&self, conn: u64) -> usize {
        self.end_listens(conn).len()
    }

    /// Applies committed versions (ascending, all of this database) to every view and
    /// writes the resulting frames. Returns the number of frames written.
    ///
    /// Each change is encoded once per group (per frame's worth of changes); a subscriber's
    /// frame differs only in its target id, and subscribers sharing a target id share the
    /// frame's bytes. A connection with a single target gets its delta and its `Snapshot`
    /// in one write; a connection with several gets its `Snapshot` after all the
    /// round's deltas.
    pub fn publish(&self, commits: &[Committed], requery: Requery, more: CatchUp) -> usize {
        if commits.is_empty() {
            return 0;
        }
        self.publish_locked(self.lock(), commits, requery, more)
    }

    /// [`Fanout::publish`] if the fan-out lock is free; `None` if it is held (a listen
    /// reading its first result under it), so the fan-out thread can go on with other
    /// databases and come back. New listens then wait for the round to go first.
    pub fn try_publish(
        &self,
        commits: &[Committed],
        requery: Requery,
        more: CatchUp,
    ) -> Option<usize> {
        if commits.is_empty() {
            return Some(0);
        }
        let guard = match self.inner.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::WouldBlock) => {
                self.publisher_waiting.store(true, Ordering::Release);
                return None;
            }
            // Poisoned: let it go, and `lock` recovers it.
            Err(TryLockError::Poisoned(poisoned)) => {
                drop(poisoned);
                self.lock()
            }
        };
        self.publisher_waiting.store(false, Ordering::Release);
        Some(self.publish_locked(guard, commits, requery, more))
    }

    fn publish_locked(
        &self,
        mut guard: MutexGuard<'_, Inner>,
        commits: &[Committed],
        requery: Requery,
        more: CatchUp,
    ) -> usize {
        let Some(mut last) = commits.last().map(|c| c.version) else {
            return 0;
        };
        let inner = &mut *guard;
        // Every view advances to `last`; a change is applied only to the groups whose
        // source can hold its document. A limited view that lost a document reads the
        // latest state to refill, which may include commits not yet published; those are
        // then taken into this round too (up to CATCH_UP times), so that every target is
        // consistent at the one version the round's `Snapshot` names.
        let applied = inner.applied;
        let mut extra: Vec<Committed> = Vec::new();
        let mut changed: HashMap<Arc<[u8]>, Vec<DocChange>> = HashMap::new();
        let mut passes = 0;
        loop {
            // Each group's changes not yet applied to it, in commit order.
            let mut due: Due = HashMap::new();
            for c in commits.iter().chain(&extra).filter(|c| c.version <= last) {
                for (name, new) in &c.changes {
                    for key in inner.relevant(name) {
                        let current = inner.groups.get(key).map_or(u64::MAX, |g| g.version);
                        if c.version > current.max(applied) {
                            due.entry(key.clone())
                                .or_default()
                                .push((name, new.as_ref()));
                        }
                    }
                }
            }
            for (key, states) in due {
                let Some(group) = inner.groups.get_mut(&key[..]) else {
                    continue;
                };
                let mut changes = Vec::new();
                let mut refill = false;
                for (name, new) in states {
                    let u = group.view.apply(name, new);
                    changes.extend(u.changes);
                    refill |= u.needs_refill;
                }
                group.version = group.version.max(last);
                if refill {
                    match requery(group.view.query()) {
                        Ok((docs, version)) => {
                            changes.extend(group.view.reset(docs));
                            group.version = group.version.max(version);
                            inner.read = inner.read.max(version);
                        }
                        Err(e) => {
                            tracing::error!(error = %e, "refilling a limited listen failed");
                        }
                    }
                }
                if !changes.is_empty() {
                    changed.entry(key).or_default().extend(changes);
                }
            }
            // The furthest any view has read (a refill now, or an initial read earlier).
            let ahead = inner.read;
            if ahead <= last {
                break;
            }
            if passes == CATCH_UP {
                tracing::warn!(
                    published = last,
                    read = ahead,
                    "listens read ahead of the fan-out again and again: publishing behind them"
                );
                break;
            }
            passes += 1;
            let got = more(ahead);
            match got.last() {
                Some(c) if c.version > last => last = c.version,
                _ => {
                    tracing::warn!(
                        published = last,
                        read = ahead,
                        "a listen read commits that did not reach the fan-out"
                    );
                    break;
                }
            }
            extra.extend(got);
        }
        inner.applied = inner.applied.max(last);
        let mut frames = 0;
        let snapshot = Bytes::from(encode_server(&ServerMessage::Snapshot { version: last }));
        // Connections owed a `Snapshot` at the end of the round.
        let mut affected: Vec<Outbound> = Vec::new();
        // Held-back initial results whose version is now published go first: the deltas
        // below are computed on top of them.
        if !inner.pending.is_empty() {
            let (due, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut inner.pending)
                .into_iter()
                .partition(|(_, v, _)| *v <= last);
            inner.pending = waiting;
            for (o, _, initial) in due {
                for f in initial {
                    if o.send_in_round(f) {
                        frames += 1;
                    }
                }
                if o.owe_snapshot(last) {
                    affected.push(o);
                }
            }
        }
        let states = round_states(commits.iter().chain(&extra).filter(|c| c.version <= last));
        let mut denied: Vec<(u32, Outbound, String)> = Vec::new();
        for (key, changes) in changed {
            let Some(group) = inner.groups.get(&key[..]) else {
                continue;
            };
            let wire = to_wire(&changes, &states);
            let version_of = |n: &DocumentName| states.get(n).map_or(last, |(_, v)| *v);
            let screened = guard::screen(&group.subscribers, &wire, &version_of);
            let parts = chunks(wire);
            // Every part encoded before any is written: a document the encoding refuses
            // ends this group's targets (and no other), none of its parts sent.
            let templates: Result<Vec<Vec<u8>>, _> = parts
                .into_iter()
                .map(|part| {
                    try_encode_server(&ServerMessage::TargetChange {
                        target_id: 0,
                        kind: TargetChangeKind::Delta,
                        changes: part,
                    })
                })
                .collect();
            let templates = match templates {
                Ok(t) => t,
                Err(e) => {
                    tracing::error!(error = %e, "a listen's change cannot be encoded: its targets end");
                    inner.end_group(
                        &key,
                        ErrorCode::DataLoss,
                        &format!("the relay cannot send this listen's result: {e}"),
                    );
                    continue;
                }
            };
            // Guarded subscribers that see this round differently take their own frames.
            let shared: Vec<Subscriber>;
            let subs = if screened.is_empty() {
                &group.subscribers[..]
            } else {
                shared = (group.subscribers.iter().enumerate())
                    .filter(|(i, _)| screened.shared(*i))
                    .map(|(_, s)| s.clone())
                    .collect();
                &shared[..]
            };
            for (i, own) in screened.own {
                let s = &group.subscribers[i];
                frames += guard::deliver_own(s.target_id, &s.out, own, last, &mut affected);
            }
            for (i, denial) in screened.denied {
                let s = &group.subscribers[i];
                denied.push((s.target_id, s.out.clone(), denial));
            }
            let n = templates.len();
            for (i, template) in templates.into_iter().enumerate() {
                let round = Round {
                    template: &template,
                    last_part: i + 1 == n,
                    snapshot: &snapshot,
                    version: last,
                };
                let writers = writers_for(subs.len(), self.split);
                if writers <= 1 {
                    frames += round.deliver(subs, &mut affected);
                } else {
                    // Thousands of sockets: split the writes across threads (each write is
                    // a system call that also runs the loopback receiver's side).
                    let per = subs.len().div_ceil(writers);
                    std::thread::scope(|scope| {
                        let round = &round;
                        let mut rest = subs.chunks(per);
                        let mine = rest.next().unwrap_or_default();
                        let mut others = Vec::new();
                        for chunk in rest {
                            let spawned = std::thread::Builder::new()
                                .name("hearth-fanout-w".into())
                                .spawn_scoped(scope, move || {
                                    let mut owed = Vec::new();
                                    let f = round.deliver(chunk, &mut owed);
                                    (f, owed)
                                });
                            match spawned {
                                Ok(h) => others.push(h),
                                // No thread to be had: this one writes the chunk too.
                                Err(_) => frames += round.deliver(chunk, &mut affected),
                            }
                        }
                        frames += round.deliver(mine, &mut affected);
                        for h in others {
                            match h.join() {
                                Ok((f, owed)) => {
                                    frames += f;
                                    affected.extend(owed);
                                }
                                Err(_) => tracing::error!("a fan-out writer thread panicked"),
                            }
                        }
                    });
                }
            }
        }
        // Listens the rules no longer allow end, having seen nothing of the round.
        for (target_id, out, denial) in denied {
            if inner.unlisten(out.conn(), target_id) {
                inner.ended += 1;
                out.send_message(&ServerMessage::Error {
                    request_id: 0,
                    target_id,
                    code: ErrorCode::PermissionDenied,
                    message: denial,
                });
            }
        }
        self.published.store(last, Ordering::Release);
        for out in &affected {
            if out.end_round(snapshot.clone()) {
                frames += 1;
            }
        }
        frames
    }
}

mod frames;
mod groups;
mod guard;
mod resume;
#[cfg(test)]
mod tests;

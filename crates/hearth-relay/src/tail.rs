//! The tail of a store other relays write to (PostgreSQL): puts this relay's own commits
//! and everyone else's in one order, per database, before the fan-out sees them.
//!
//! Every relay commits to the shared store; each database's versions are gap-free and
//! become visible in version order (the store's head lock). The tail thread keeps, per
//! database open here, the last version it handed to the fan-out. This relay's own round
//! that follows it directly goes on as it is; anything else (another relay's commit,
//! heard by notification, or found by the periodic poll of the heads, or after the
//! notification connection came back) is caught up by one consistent read: the changelog
//! from the last version handed on to the head, and the changed documents at the head,
//! as one merged commit at the head's version. So every listener sees one gap-free
//! sequence of snapshots, none with part of a batch, whichever relay wrote it.
//! Notifications only cut latency: the poll alone keeps it correct. The poll also finds
//! index definitions another relay changed, and loads them for new connections' `Welcome`.

use std::collections::{BTreeSet, HashMap};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::commit::Committed;
use crate::fanout_thread::Forward;
use crate::state::Relay;
use crate::store::txn::Watched;
use crate::store::StoreError;
use crate::supervise::supervised;
use hearth_core::error::ErrorCode;
use hearth_core::kv::block_on_ready;
use hearth_core::query::execute::fetch;

/// What the tail thread hears.
pub(crate) enum Event {
    /// A round this relay committed, and when it became durable.
    Own(Vec<Committed>, Instant),
    /// What the store heard of commits.
    Heard(Watched),
}

/// The tail thread's inputs, made with the committer's sink.
pub(crate) struct Inlet {
    /// Events, in arrival order.
    pub(crate) events: Receiver<Event>,
    /// Another sender of events (the store's watcher).
    pub(crate) sender: Sender<Event>,
    /// The fan-out threads.
    pub(crate) forward: Forward,
}

/// Starts the tail thread of `relay`: it listens to the store's notifications (with
/// `listen`) and polls its heads every `poll`.
pub(crate) fn spawn(
    relay: &Arc<Relay>,
    inlet: Inlet,
    poll: Duration,
    listen: bool,
) -> std::io::Result<()> {
    let sender = std::sync::Mutex::new(inlet.sender);
    if listen {
        relay.store().watch(Arc::new(move |w| {
            let _ = sender.lock().expect("tail sender").send(Event::Heard(w));
        }));
    }
    let weak = Arc::downgrade(relay);
    std::thread::Builder::new()
        .name("hearth-tail".into())
        .spawn(move || supervised("tail", || run(&weak, &inlet.events, &inlet.forward, poll)))?;
    Ok(())
}

/// The tail's loop, until the relay is gone.
fn run(relay: &Weak<Relay>, events: &Receiver<Event>, forward: &Forward, poll: Duration) {
    // Per database open here: the last version handed to the fan-out.
    let mut applied: HashMap<String, u64> = HashMap::new();
    let mut next_poll = Instant::now() + poll;
    loop {
        let mut heard = Vec::new();
        match events.recv_timeout(next_poll.saturating_duration_since(Instant::now())) {
            Ok(e) => heard.push(e),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        heard.extend(events.try_iter());
        let Some(relay) = relay.upgrade() else { return };
        let mut dirty: BTreeSet<String> = BTreeSet::new();
        let mut poll_now = Instant::now() >= next_poll;
        for e in heard {
            match e {
                Event::Own(round, at) => own(&relay, round, at, &mut applied, &mut dirty, forward),
                Event::Heard(Watched::Head { db, version }) => {
                    if let Some(d) = relay.database_if_open(&db) {
                        if version > *applied.entry(db.clone()).or_insert(d.opened_at()) {
                            dirty.insert(db);
                        }
                    }
                }
                Event::Heard(Watched::Reconnected) => poll_now = true,
            }
        }
        if poll_now {
            next_poll = Instant::now() + poll;
            match relay.store().heads() {
                Ok(heads) => {
                    for (db, head) in heads {
                        if let Some(d) = relay.database_if_open(&db) {
                            if head.catalog > d.catalog_generation() {
                                if let Err(e) = refresh_catalog(&relay, &db) {
                                    tracing::warn!(database = %db, error = %e, "reading changed index definitions failed");
                                }
                            }
                            if head.version > *applied.entry(db.clone()).or_insert(d.opened_at()) {
                                relay.metrics().poll_catch_up();
                                dirty.insert(db);
                            }
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "polling the store's heads failed"),
            }
        }
        for db in dirty {
            if let Err(e) = catch_up(&relay, &db, &mut applied, forward) {
                // Tried again at the next event or poll.
                tracing::warn!(database = %db, error = %e, "catching up with the store failed");
            }
        }
    }
}

/// Takes database `db`'s index definitions as another relay left them (read at the
/// generation of one snapshot), so that a new connection's `Welcome` names them before
/// this relay's next read would load them.
fn refresh_catalog(relay: &Relay, db: &str) -> Result<(), StoreError> {
    let Some(d) = relay.database_if_open(db) else {
        return Ok(());
    };
    let snap = relay.store().snapshot(db)?;
    let view = snap.database(db);
    let generation = view.head()?.catalog;
    d.catalog_at(generation, || view.planned_catalog(generation))?;
    Ok(())
}

/// This relay's own round: each database's commits that follow what was handed on go on
/// as they are; a database whose commits do not (another relay committed in between) is
/// caught up from the store.
fn own(
    relay: &Relay,
    round: Vec<Committed>,
    at: Instant,
    applied: &mut HashMap<String, u64>,
    dirty: &mut BTreeSet<String>,
    forward: &Forward,
) {
    let mut by_db: Vec<(String, Vec<Committed>)> = Vec::new();
    for c in round {
        match by_db.iter_mut().find(|(d, _)| *d == c.database) {
            Some((_, v)) => v.push(c),
            None => by_db.push((c.database.clone(), vec![c])),
        }
    }
    let mut direct = Vec::new();
    for (db, commits) in by_db {
        let Some(d) = relay.database_if_open(&db) else {
            continue;
        };
        let last = applied.entry(db.clone()).or_insert(d.opened_at());
        let (first, end) = match (commits.first(), commits.last()) {
            (Some(f), Some(l)) => (f.version, l.version),
            _ => continue,
        };
        if first == *last + 1 && !dirty.contains(&db) {
            *last = end;
            direct.extend(commits);
        } else if end > *last {
            dirty.insert(db);
        }
    }
    if !direct.is_empty() {
        forward.send(direct, at);
    }
}

/// Hands database `db`'s commits after the last one handed on, up to the store's head, to
/// the fan-out as one commit at the head's version, read in one snapshot.
fn catch_up(
    relay: &Relay,
    db: &str,
    applied: &mut HashMap<String, u64>,
    forward: &Forward,
) -> Result<(), StoreError> {
    let Some(d) = relay.database_if_open(db) else {
        return Ok(());
    };
    let last = applied.entry(db.to_owned()).or_insert(d.opened_at());
    let snap = relay.store().snapshot(db)?;
    let view = snap.database(db);
    let head = view.version()?;
    if head <= *last {
        return Ok(());
    }
    let Some(mut names) = view.changes_between(*last, head)? else {
        // Fell behind the changelog's retention (this relay could not reach the store for
        // that long): what changed since cannot be told. Every connection listening to
        // the database ends; its client reconnects and resumes from its version, which
        // gets a Reset. The fan-out goes on from the head.
        drop(snap);
        tracing::warn!(
            database = %db,
            from = *last,
            head,
            "this relay fell behind the changelog's retention: its listening connections to \
             the database end, and their clients resume with a Reset"
        );
        d.fanout().end_connections(
            ErrorCode::Unavailable,
            "the relay fell behind the changelog: reconnect and listen again",
        );
        *last = head;
        forward.send(
            vec![Committed {
                database: db.to_owned(),
                version: head,
                changes: Vec::new(),
            }],
            Instant::now(),
        );
        return Ok(());
    };
    names.sort();
    names.dedup();
    view.read_ahead(&names)?;
    let mut changes = Vec::with_capacity(names.len());
    for n in names {
        let doc = block_on_ready(fetch(&view, &n)).map_err(|e| StoreError::Corrupt {
            db: db.to_owned(),
            what: e.to_string(),
        })?;
        changes.push((n, doc));
    }
    let micros = view.head_micros()?;
    drop(snap);
    relay
        .metrics()
        .tail_lag(crate::commit::now_micros().saturating_sub(micros));
    *last = head;
    forward.send(
        vec![Committed {
            database: db.to_owned(),
            version: head,
            changes,
        }],
        Instant::now(),
    );
    Ok(())
}

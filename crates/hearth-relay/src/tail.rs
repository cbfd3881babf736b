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
//!
//! Outages: a poll or a catch-up that fails to reach the store (the backend bounds every
//! call), or the loss of the notification connection, begins an outage
//! (`crate::outage`): the relay is degraded (`/healthz` answers 503), closes its idle
//! connections and its notification connection (they may be dead), and polls again with a
//! backoff (up to [`MAX_RETRY`]). A database whose catch-up failed stays to be caught up,
//! its later commits waiting for it, from the last version handed on. The outage ends,
//! with a log line, once a poll reached the store, every database open here was caught up
//! to the heads it read and the notification connection is back.

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

/// The longest wait between two polls of the heads while the store cannot be reached
/// (the first is the configured period, doubled after each failure).
const MAX_RETRY: Duration = Duration::from_secs(1);

/// How often a relay still degraded says so again in its log.
const REMIND: Duration = Duration::from_secs(10);

/// The tail thread's state.
struct Tail {
    /// Per database open here: the last version handed to the fan-out.
    applied: HashMap<String, u64>,
    /// Databases to catch up with the store; one whose catch-up failed stays until one
    /// succeeds (its commits in the meantime wait for it, in order).
    dirty: BTreeSet<String>,
    /// The poll's period while all is well.
    poll: Duration,
    /// When the heads are polled next.
    next_poll: Instant,
    /// The wait before the next poll while degraded.
    retry: Duration,
    /// Why the notification connection is down (`None`: up, or not listened to).
    unheard: Option<String>,
    /// While degraded: when that was last logged, and the catch-ups made since it began.
    outage: Option<(Instant, u64)>,
    /// Databases whose head was found behind what was handed on (told once each).
    regressed: BTreeSet<String>,
}

/// The tail's loop, until the relay is gone.
fn run(relay: &Weak<Relay>, events: &Receiver<Event>, forward: &Forward, poll: Duration) {
    let mut tail = Tail {
        applied: HashMap::new(),
        dirty: BTreeSet::new(),
        regressed: BTreeSet::new(),
        poll,
        next_poll: Instant::now() + poll,
        retry: poll,
        unheard: None,
        outage: None,
    };
    loop {
        let mut heard = Vec::new();
        match events.recv_timeout(tail.next_poll.saturating_duration_since(Instant::now())) {
            Ok(e) => heard.push(e),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        heard.extend(events.try_iter());
        let Some(relay) = relay.upgrade() else { return };
        let mut poll_now = Instant::now() >= tail.next_poll;
        for e in heard {
            poll_now |= tail.take(&relay, e, forward);
        }
        let polled = poll_now && tail.poll_heads(&relay);
        // Not while the poll just failed to reach the store: tried again at its next turn.
        let dirty = match poll_now && !polled {
            true => BTreeSet::new(),
            false => std::mem::take(&mut tail.dirty),
        };
        for db in dirty {
            let began = Instant::now();
            match catch_up(&relay, &db, &mut tail.applied, forward) {
                Ok(delivered) => {
                    if let (true, Some((_, n))) = (delivered, &mut tail.outage) {
                        *n += 1;
                        relay.metrics().store_outages().caught_up();
                    }
                }
                Err(e) => {
                    // Tried again at the next turn.
                    let reason = format!("catching up database `{db}` failed: {e}");
                    tail.failed(&relay, reason, began);
                    tail.dirty.insert(db);
                }
            }
        }
        if polled && tail.dirty.is_empty() && tail.unheard.is_none() {
            tail.recovered(&relay);
        }
    }
}

impl Tail {
    /// Takes one event in: whether the heads are to be polled now.
    fn take(&mut self, relay: &Relay, e: Event, forward: &Forward) -> bool {
        match e {
            Event::Own(round, at) => {
                own(
                    relay,
                    round,
                    at,
                    &mut self.applied,
                    &mut self.dirty,
                    forward,
                );
            }
            Event::Heard(Watched::Head { db, version }) => {
                if let Some(d) = relay.database_if_open(&db) {
                    if version > *self.applied.entry(db.clone()).or_insert(d.opened_at()) {
                        self.dirty.insert(db);
                    }
                }
            }
            Event::Heard(Watched::Reconnected) => {
                self.unheard = None;
                return true;
            }
            Event::Heard(Watched::Lost { reason }) => {
                self.failed(relay, reason.clone(), Instant::now());
                self.unheard = Some(reason);
            }
        }
        false
    }

    /// Polls the heads: each database open here that is ahead of what was handed on is
    /// to be caught up, and changed index definitions are loaded. Whether it succeeded.
    fn poll_heads(&mut self, relay: &Relay) -> bool {
        let began = Instant::now();
        let heads = relay.store().heads();
        self.next_poll = Instant::now()
            + match (&heads, &self.outage) {
                (Ok(_), None) => self.poll,
                _ => {
                    self.retry = (self.retry * 2).min(MAX_RETRY);
                    self.retry
                }
            };
        let heads = match heads {
            Ok(heads) => heads,
            Err(e) => {
                self.failed(
                    relay,
                    format!("polling the store's heads failed: {e}"),
                    began,
                );
                return false;
            }
        };
        for (db, head) in heads {
            let Some(d) = relay.database_if_open(&db) else {
                continue;
            };
            if head.catalog > d.catalog_generation() {
                if let Err(e) = refresh_catalog(relay, &db) {
                    tracing::warn!(database = %db, error = %e, "reading changed index definitions failed");
                }
            }
            let applied = *self.applied.entry(db.clone()).or_insert(d.opened_at());
            if head.version < applied && self.regressed.insert(db.clone()) {
                // The store lost commits this relay's listeners saw: restored from a
                // backup, or failed over to a copy that lagged. Told, not repaired: the
                // versions handed out after it are reused.
                relay.metrics().head_regression();
                tracing::error!(
                    database = %db,
                    store = head.version,
                    handed_on = applied,
                    "the store's head went back behind what this relay handed on (a restore \
                     or a failover?): restart the relays; clients keep what they saw"
                );
            }
            if head.version > applied {
                relay.metrics().poll_catch_up();
                self.dirty.insert(db);
            }
        }
        true
    }

    /// A failure to reach the store (or to hear it) of an attempt begun at `began`: the
    /// relay is degraded from the first until it has caught up again. Logged when it
    /// begins, then every [`REMIND`].
    fn failed(&mut self, relay: &Relay, reason: String, began: Instant) {
        let now = Instant::now();
        if relay
            .metrics()
            .store_outages()
            .failed(reason.clone(), began)
        {
            tracing::warn!(
                %reason,
                "the store cannot be reached: this relay is degraded (its listeners miss other \
                 relays' commits) until it has caught up with the store again"
            );
            self.outage = Some((now, 0));
            self.retry = self.poll;
            // Connections opened before may be dead: new ones are opened as needed.
            relay.store().drop_idle_connections();
        } else if let Some((logged, _)) = &mut self.outage {
            if now.duration_since(*logged) >= REMIND {
                *logged = now;
                tracing::warn!(%reason, "still degraded: the store cannot be reached");
            }
        }
    }

    /// The store was reached, every database open here caught up with it and its
    /// notifications are heard: the outage under way, if any, is over.
    fn recovered(&mut self, relay: &Relay) {
        let Some(lasted) = relay.metrics().store_outages().recovered() else {
            return;
        };
        let catch_ups = self.outage.take().map_or(0, |(_, n)| n);
        self.retry = self.poll;
        self.next_poll = Instant::now() + self.poll;
        tracing::info!(
            outage_secs = lasted.as_secs_f64(),
            catch_ups,
            "caught up with the store again: every listener has every commit"
        );
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
/// the fan-out as one commit at the head's version, read in one snapshot: whether there
/// were any.
fn catch_up(
    relay: &Relay,
    db: &str,
    applied: &mut HashMap<String, u64>,
    forward: &Forward,
) -> Result<bool, StoreError> {
    let Some(d) = relay.database_if_open(db) else {
        return Ok(false);
    };
    let last = applied.entry(db.to_owned()).or_insert(d.opened_at());
    let snap = relay.store().snapshot(db)?;
    let view = snap.database(db);
    let head = view.version()?;
    if head <= *last {
        return Ok(false);
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
        return Ok(true);
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
    Ok(true)
}

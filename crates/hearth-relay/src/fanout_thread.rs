//! The fan-out threads: take each round of commits from the committer, in commit order,
//! and publish it to the listeners of every database it touched.
//!
//! The fan-out has threads of its own, one per core (two at least): it writes every
//! listener's frames to its socket in place, which would hold up a runtime worker. Each
//! database belongs to one of them (by a hash of its name), which publishes its rounds one
//! at a time, in order; a database with a large fan-out delays only the databases that
//! share its thread. A refill that read commits not yet published takes the later rounds'
//! commits of its database in early (the catch-up); the rest of those rounds waits in a
//! stash and is published next, in order.

use std::collections::{HashMap, VecDeque};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::Weak;
use std::time::{Duration, Instant};

use crate::commit::{CommitSink, Committed};
use crate::state::Relay;
use crate::supervise::{fault_point, supervised};
use hearth_core::query::model::Query;

/// One group commit's changes, and when it became durable.
type Round = (Vec<Committed>, Instant);

/// Rounds of commits on their way to one fan-out thread.
pub(crate) type Rounds = Receiver<Round>;

/// How many fan-out threads: one per core, two at least, eight at most.
fn shards() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8))
}

/// The fan-out thread database `db` belongs to, of `n`.
fn shard_of(db: &str, n: usize) -> usize {
    let mut h = std::hash::DefaultHasher::new();
    std::hash::Hash::hash(db, &mut h);
    (std::hash::Hasher::finish(&h) % n as u64) as usize
}

/// The fan-out thread database `db` belongs to.
pub(crate) fn thread_of(db: &str) -> usize {
    shard_of(db, shards())
}

/// Hands rounds of commits to the fan-out threads, each its share, in commit order.
#[derive(Clone)]
pub(crate) struct Forward {
    /// Where each fan-out thread's share of the rounds goes.
    fanout_tx: Vec<Sender<Round>>,
}

impl Forward {
    /// Sends each fan-out thread its share of `round`, durable since `at`.
    pub(crate) fn send(&self, round: Vec<Committed>, at: Instant) {
        let n = self.fanout_tx.len();
        let mut shares: Vec<Vec<Committed>> = (0..n).map(|_| Vec::new()).collect();
        for c in round {
            shares[shard_of(&c.database, n)].push(c);
        }
        for (tx, share) in self.fanout_tx.iter().zip(shares) {
            if !share.is_empty() {
                let _ = tx.send((share, at));
            }
        }
    }
}

/// Where the committer's rounds go.
enum Route {
    /// Straight to the fan-out: this relay is the store's only writer.
    Fanout(Forward),
    /// To the tail of a shared store (`crate::tail`), which puts them in order with the
    /// other relays' commits.
    Tail(Sender<crate::tail::Event>),
}

/// The committer's observer: counts commits in the metrics and hands each round on.
pub(crate) struct Sink {
    /// The relay whose metrics count the commits; weak, so the committer thread does not
    /// keep a stopped relay alive.
    relay: Weak<Relay>,
    /// Where the rounds go.
    route: Route,
}

/// The committer's sink for `relay`, the rounds it sends to each fan-out thread, and
/// (for a store other relays write to: `tail`) the tail's end of its channel with the
/// fan-out's handle.
pub(crate) fn channel(
    relay: Weak<Relay>,
    tail: bool,
) -> (Sink, Vec<Rounds>, Option<crate::tail::Inlet>) {
    let (fanout_tx, rounds) = (0..shards())
        .map(|_| std::sync::mpsc::channel::<Round>())
        .unzip();
    let forward = Forward { fanout_tx };
    let (route, inlet) = match tail {
        false => (Route::Fanout(forward), None),
        true => {
            let (tx, rx) = std::sync::mpsc::channel();
            (
                Route::Tail(tx.clone()),
                Some(crate::tail::Inlet {
                    events: rx,
                    sender: tx,
                    forward,
                }),
            )
        }
    };
    (Sink { relay, route }, rounds, inlet)
}

impl CommitSink for Sink {
    fn committed(&self, round: Vec<Committed>, batches: usize, fsync: Duration) {
        if let Some(relay) = self.relay.upgrade() {
            relay
                .metrics()
                .group_commit(batches as u64, fsync.as_secs_f64());
            let mut per_db: HashMap<&str, u64> = HashMap::new();
            for c in &round {
                *per_db.entry(&c.database).or_default() += 1;
            }
            for (db, n) in per_db {
                relay.metrics().commits(db, n);
            }
        }
        let now = Instant::now();
        match &self.route {
            Route::Fanout(forward) => forward.send(round, now),
            Route::Tail(tail) => {
                let _ = tail.send(crate::tail::Event::Own(round, now));
            }
        }
    }

    fn queue_depth(&self, db: &str, depth: usize) {
        if let Some(relay) = self.relay.upgrade() {
            relay.metrics().queue_depth(db, depth as u64);
        }
    }
}

/// Starts the fan-out threads, one per receiver of `rounds`, each publishing its share
/// until the committer's sink is gone or the relay is.
pub(crate) fn spawn(relay: Weak<Relay>, rounds: Vec<Rounds>) -> std::io::Result<()> {
    for (i, rounds) in rounds.into_iter().enumerate() {
        let relay = relay.clone();
        std::thread::Builder::new()
            .name(format!("hearth-fanout-{i}"))
            .spawn(move || supervised("fan-out", || publish_rounds(&relay, &rounds)))?;
    }
    Ok(())
}

/// A database's commits held back because its fan-out lock was busy (a listen reading its
/// first result under it), merged in order, and when the first of them became durable.
struct Deferred {
    /// The database.
    name: String,
    /// Its commits not yet published, in order.
    commits: Vec<Committed>,
    /// When the first of them became durable.
    since: Instant,
}

/// How often a held-back database's fan-out lock is tried again.
const RETRY: Duration = Duration::from_millis(1);

/// The fan-out thread's loop: publishes `rounds` in order until the committer's sink is
/// gone or the relay is. A database whose fan-out lock is busy is passed over, its commits
/// held back (later ones join them, in order) and tried again every [`RETRY`], so a
/// listen reading a large first result delays only its own database.
fn publish_rounds(relay: &Weak<Relay>, rounds: &Rounds) {
    // Rounds taken early by a catch-up (see `Fanout::publish`).
    let mut stash = VecDeque::new();
    let mut deferred: Vec<Deferred> = Vec::new();
    let mut closed = false;
    loop {
        let next = match stash.pop_front() {
            Some(r) => Some(r),
            None if closed => {
                std::thread::sleep(RETRY);
                None
            }
            None if deferred.is_empty() => match rounds.recv() {
                Ok(r) => Some(r),
                Err(_) => return,
            },
            None => match rounds.recv_timeout(RETRY) {
                Ok(r) => Some(r),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => {
                    closed = true;
                    None
                }
            },
        };
        let Some(relay) = relay.upgrade() else { return };
        if let Some(round) = next {
            fan_out(&relay, round, rounds, &mut stash, &mut deferred);
        }
        if !deferred.is_empty() {
            retry_deferred(&relay, rounds, &mut stash, &mut deferred);
        }
        if closed && deferred.is_empty() && stash.is_empty() {
            return;
        }
    }
}

/// Publishes one round to the fan-out of each database it touched; a database with
/// commits held back, or whose lock is busy, gets them added to its held-back ones.
fn fan_out(
    relay: &Relay,
    (round, committed_at): Round,
    rounds: &Rounds,
    stash: &mut VecDeque<Round>,
    deferred: &mut Vec<Deferred>,
) {
    let mut by_db: Vec<(String, Vec<Committed>)> = Vec::new();
    for c in round {
        match by_db.iter_mut().find(|(d, _)| *d == c.database) {
            Some((_, v)) => v.push(c),
            None => by_db.push((c.database.clone(), vec![c])),
        }
    }
    let mut frames = 0;
    for (name, commits) in by_db {
        if let Some(d) = deferred.iter_mut().find(|d| d.name == name) {
            d.commits.extend(commits);
            continue;
        }
        match publish_one(relay, &name, &commits, rounds, stash) {
            Some(n) => frames += n,
            None => deferred.push(Deferred {
                name,
                commits,
                since: committed_at,
            }),
        }
    }
    relay.metrics().frames_sent(frames as u64);
    relay
        .metrics()
        .fanout_latency(committed_at.elapsed().as_secs_f64());
}

/// Tries the held-back databases again, publishing those whose lock is free now.
fn retry_deferred(
    relay: &Relay,
    rounds: &Rounds,
    stash: &mut VecDeque<Round>,
    deferred: &mut Vec<Deferred>,
) {
    let mut i = 0;
    while i < deferred.len() {
        let d = &deferred[i];
        match publish_one(relay, &d.name, &d.commits, rounds, stash) {
            Some(frames) => {
                relay.metrics().frames_sent(frames as u64);
                relay
                    .metrics()
                    .fanout_latency(d.since.elapsed().as_secs_f64());
                deferred.remove(i);
            }
            None => i += 1,
        }
    }
}

/// Publishes `commits` (ascending, all of database `name`) if its fan-out lock is free:
/// the frames written, or `None` if the lock is busy. A database no longer open is done.
fn publish_one(
    relay: &Relay,
    name: &str,
    commits: &[Committed],
    rounds: &Rounds,
    stash: &mut VecDeque<Round>,
) -> Option<usize> {
    let Some(db) = relay.database_if_open(name) else {
        return Some(0);
    };
    fault_point("fanout", name);
    let requery = |q: &Query| relay.query_latest(&db, q);
    let mut more = |upto| take_commits(name, upto, rounds, stash);
    let frames = db.fanout().try_publish(commits, &requery, &mut more)?;
    for _ in 0..db.fanout().take_ended() {
        relay.metrics().listen_stopped(name);
    }
    Some(frames)
}

/// Takes database `db`'s commits out of the rounds after the current one (those stashed,
/// then those arriving, waiting up to 200 ms for them: a round is sent as soon as it is
/// committed, and the fan-out lock is held meanwhile), in order, until one at `upto` or
/// later: the catch-up of a refill that read commits not yet published. What else those
/// rounds hold stays stashed, in order, for the fan-out to publish next.
fn take_commits(
    db: &str,
    upto: u64,
    rounds: &Rounds,
    stash: &mut VecDeque<Round>,
) -> Vec<Committed> {
    let deadline = Instant::now() + Duration::from_millis(200);
    let mut out: Vec<Committed> = Vec::new();
    let mut i = 0;
    while out.last().is_none_or(|c| c.version < upto) {
        if i == stash.len() {
            match rounds.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(r) => stash.push_back(r),
                Err(_) => break,
            }
        }
        let round = &mut stash[i].0;
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(round)
            .into_iter()
            .partition(|c| c.database == db);
        *round = rest;
        out.extend(mine);
        i += 1;
    }
    stash.retain(|(r, _)| !r.is_empty());
    out
}

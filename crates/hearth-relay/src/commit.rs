//! The write path: per-database queues drained by a committer thread into group commits,
//! one committer per store shard (its databases' only writer), so a database's commits
//! wait only for those of the databases in its own shard.
//!
//! Connections submit write batches to their database's queue (bounded: the per-database
//! in-flight cap). The committer takes a fair share from every non-empty queue (round-robin,
//! a quota each), applies each batch at the authority (idempotency check, transaction read
//! revalidation, preconditions, transforms) into one redb write transaction, commits it with
//! immediate durability (one fsync for the whole round), then acknowledges every batch and
//! hands the committed changes, in version order, to the fan-out.
//!
//! Architecture invariant: no batch is acknowledged before the transaction holding it is
//! durable, and a batch either applies whole or not at all.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::oneshot;

use super::store::txn::{Head, WriteTxn};
use super::store::{change_time, db_prefix, encode_change_names, Catalogs, Store, StoreError, Tab};
pub use crate::idempotency::{batch_digest, BatchDigest};
use crate::idempotency::{batch_key, BatchRecord};
use crate::supervise::{fault_point, transient_fault};
use hearth_core::document::Document;
use hearth_core::encoding::document::{decode_document, encode_document};
use hearth_core::encoding::key::prefix_end;
use hearth_core::index::def::IndexCatalog;
use hearth_core::index::keys::document_key;
use hearth_core::mutation::{ApplyContext, Mutation, MutationError};
use hearth_core::path::DocumentName;
use hearth_core::protocol::ErrorCode;
use hearth_core::value::Timestamp;

/// Most batches taken from one database in one round, so a busy database cannot starve the
/// others.
const QUOTA_PER_DATABASE: usize = 512;
/// Most bytes of batches taken from one database in one round (at least one batch).
const QUOTA_BYTES_PER_DATABASE: usize = 8 << 20;
/// Most batches in one group commit.
const MAX_ROUND: usize = 4096;
/// How long one round applies batches before it commits what it has (at least one batch):
/// the longest a batch of a quiet database waits behind a busy one's, plus one batch.
const ROUND_BUDGET: Duration = Duration::from_millis(50);
/// Firestore's limit of index entries per document.
const MAX_INDEX_ENTRIES_PER_DOCUMENT: usize = 40_000;
/// Most index entries one batch may change (insert or delete): bounds the time one batch
/// holds the committer.
const MAX_INDEX_WRITES_PER_BATCH: usize = 200_000;

/// Why a batch did not commit.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct WriteError {
    /// The wire code the client sees (`aborted`, `failed-precondition`, ...).
    pub code: ErrorCode,
    /// What went wrong, in words, for the client's error.
    pub message: String,
}

impl WriteError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> WriteError {
        WriteError {
            code,
            message: message.into(),
        }
    }
}

impl From<MutationError> for WriteError {
    fn from(e: MutationError) -> WriteError {
        WriteError::new(e.code(), e.to_string())
    }
}

/// One batch waiting to commit.
pub struct WriteRequest {
    /// The submitting client's id: with `batch_id`, the key of the idempotency record.
    pub client_id: String,
    /// The client's id for the batch: a retry under the same id is applied once.
    pub batch_id: u64,
    /// The writes, applied together or not at all.
    pub mutations: Vec<Mutation>,
    /// A transaction's reads (each document's `update_version` as read, `None`: absent),
    /// revalidated at commit; any change aborts the batch.
    pub reads: Vec<(DocumentName, Option<u64>)>,
    /// [`batch_digest`] of `mutations` and `reads`: a repeated `batch_id` is a retry only
    /// with the same digest.
    pub digest: BatchDigest,
    /// Receives the commit version once the batch is durable, or why it did not commit.
    pub reply: oneshot::Sender<Result<u64, WriteError>>,
    /// When the batch was queued.
    pub enqueued: Instant,
    /// The size of the frame that carried it: what it costs in memory while queued.
    pub bytes: usize,
    /// What the security rules check each of its writes with (`None`: nothing).
    pub access: Option<crate::rules::Access>,
    /// Set when a batch of its connection failed for a transient cause: its later batches
    /// are not applied (answered `unavailable`), so none commits out of the client's order.
    pub halted: Arc<AtomicBool>,
}

/// The answer to a batch after an earlier one of its connection failed transiently.
fn halted_error() -> WriteError {
    WriteError::new(
        ErrorCode::Unavailable,
        "an earlier write of this connection could not be committed: nothing after it was applied; send the writes again, in order",
    )
}

/// Why [`Committer::submit`] handed a batch back.
pub enum Refused {
    /// The database's queue is full: wait for room and submit it again.
    Full(Box<WriteRequest>),
    /// The committer is stopping: it takes no more batches.
    Stopping(Box<WriteRequest>),
}

/// The committed changes of one version, for the fan-out.
#[derive(Clone, Debug)]
pub struct Committed {
    /// The database the version belongs to.
    pub database: String,
    /// The commit version: one per committed batch, consecutive within a database.
    pub version: u64,
    /// Each changed document's new state (`None`: deleted).
    pub changes: Vec<(DocumentName, Option<Document>)>,
}

/// Work the committer does between rounds: index backfills.
pub type Job = Box<dyn FnOnce(&Store) + Send>;

struct Queues {
    /// Each database's batches waiting to commit, in arrival order, and their bytes.
    by_db: HashMap<String, (VecDeque<WriteRequest>, usize)>,
    /// Round-robin order of databases.
    order: Vec<String>,
    /// Where in `order` the next round starts, so every database gets to go first.
    next: usize,
    /// Work to run between rounds (index backfills).
    jobs: VecDeque<Job>,
    /// Set by `stop`: no more batches are taken, and the thread ends once drained.
    stopping: bool,
}

/// Per-database state the committer needs.
struct DbState {
    /// The index definitions a commit maintains, at the catalog generation it last saw:
    /// one that finds another reloads them first (`crate::store::Catalogs`).
    catalogs: Catalogs,
    /// The database's last commit version; the next batch gets the one after it.
    version: u64,
    /// Latest commit time handed out, so commit times never go backwards.
    last_micros: i64,
}

/// Handle to the committer thread.
pub struct Committer {
    /// The batches and jobs waiting for the thread; producers and the thread share them.
    queues: Mutex<Queues>,
    /// Wakes the thread when a batch or job arrives, or on stop.
    wake: Condvar,
    /// Most batches queued per database.
    cap: usize,
    /// Most bytes of batches queued per database (at least one batch is always taken).
    cap_bytes: usize,
    /// Notified when batches leave the queues.
    room: tokio::sync::Notify,
    /// Each registered database's versions and indexes; only the committer thread (its
    /// rounds and jobs) changes them once the database is registered.
    dbs: Mutex<HashMap<String, DbState>>,
    /// The store shard whose databases it commits.
    shard: usize,
    /// Failed rounds not yet logged, and when one was last logged ([`Self::log_failure`]).
    failures: Mutex<(u64, Option<Instant>)>,
}

/// How often failed rounds are logged during a run of them.
const FAILURE_LOG_EVERY: Duration = Duration::from_secs(10);

/// Observers of the committer: metrics and fan-out.
pub trait CommitSink: Send + Sync {
    fn committed(&self, round: Vec<Committed>, batches: usize, fsync: Duration);
    fn queue_depth(&self, db: &str, depth: usize);
}

impl Committer {
    /// The committer of store shard `shard`, with its per-database queue caps.
    pub fn new(shard: usize, cap: usize, cap_bytes: usize) -> Arc<Committer> {
        Arc::new(Committer {
            queues: Mutex::new(Queues {
                by_db: HashMap::new(),
                order: Vec::new(),
                next: 0,
                jobs: VecDeque::new(),
                stopping: false,
            }),
            wake: Condvar::new(),
            cap,
            cap_bytes,
            room: tokio::sync::Notify::new(),
            dbs: Mutex::new(HashMap::new()),
            failures: Mutex::new((0, None)),
            shard,
        })
    }

    /// Queues a batch; hands it back when the database has `cap` batches or `cap_bytes`
    /// bytes queued (an empty queue takes any batch: wait on [`Committer::room`] and try
    /// again), or when the committer is stopping.
    pub fn submit(&self, db: &str, req: WriteRequest) -> Result<(), Refused> {
        let mut q = self.queues.lock().expect("committer lock");
        if q.stopping {
            return Err(Refused::Stopping(Box::new(req)));
        }
        if !q.by_db.contains_key(db) {
            q.order.push(db.to_owned());
        }
        let (queue, bytes) = q.by_db.entry(db.to_owned()).or_default();
        if queue.len() >= self.cap
            || (!queue.is_empty() && bytes.saturating_add(req.bytes) > self.cap_bytes)
        {
            return Err(Refused::Full(Box::new(req)));
        }
        *bytes += req.bytes;
        queue.push_back(req);
        drop(q);
        self.wake.notify_one();
        Ok(())
    }

    /// Notified whenever the committer takes batches from the queues: a batch handed back
    /// for a full queue may fit now.
    pub fn room(&self) -> &tokio::sync::Notify {
        &self.room
    }

    /// Runs `job` on the committer thread between rounds.
    pub fn run_job(&self, job: Job) {
        self.queues
            .lock()
            .expect("committer lock")
            .jobs
            .push_back(job);
        self.wake.notify_one();
    }

    /// Finishes queued batches, then stops the thread.
    pub fn stop(&self) {
        self.queues.lock().expect("committer lock").stopping = true;
        self.wake.notify_all();
    }

    /// The committer loop; returns when stopped and drained.
    pub fn run(&self, store: &Store, sink: &dyn CommitSink) {
        loop {
            let (round, jobs) = {
                let mut q = self.queues.lock().expect("committer lock");
                loop {
                    let pending = q.by_db.values().any(|(v, _)| !v.is_empty());
                    if pending || !q.jobs.is_empty() {
                        break;
                    }
                    if q.stopping {
                        return;
                    }
                    q = self.wake.wait(q).expect("committer lock");
                }
                let jobs: Vec<Job> = q.jobs.drain(..).collect();
                let n = q.order.len();
                let start = q.next;
                let mut shares: Vec<std::collections::vec_deque::Drain<'_, WriteRequest>> =
                    Vec::new();
                let mut names = Vec::new();
                let mut taken = 0;
                let Queues { by_db, order, .. } = &mut *q;
                let mut queues: HashMap<&String, &mut (VecDeque<WriteRequest>, usize)> =
                    by_db.iter_mut().collect();
                for i in 0..n {
                    let db = &order[(start + i) % n];
                    let Some((queue, queued)) = queues.remove(db) else {
                        continue;
                    };
                    // A fair share: at most a quota of batches and of bytes (at least one
                    // batch) from each database.
                    let mut take = 0;
                    let mut bytes = 0usize;
                    for req in queue.iter() {
                        if take == QUOTA_PER_DATABASE
                            || taken + take == MAX_ROUND
                            || (take > 0 && bytes + req.bytes > QUOTA_BYTES_PER_DATABASE)
                        {
                            break;
                        }
                        take += 1;
                        bytes += req.bytes;
                    }
                    *queued -= bytes;
                    taken += take;
                    sink.queue_depth(db, queue.len() - take);
                    names.push(db.clone());
                    shares.push(queue.drain(..take));
                }
                // Interleaved, one batch of each database in turn: when the round's time
                // budget runs out, what is left goes back, and every database had a turn.
                let mut round: Vec<(String, WriteRequest)> = Vec::with_capacity(taken);
                while round.len() < taken {
                    for (db, share) in names.iter().zip(shares.iter_mut()) {
                        if let Some(req) = share.next() {
                            round.push((db.clone(), req));
                        }
                    }
                }
                drop(shares);
                self.room.notify_waiters();
                q.next = if n == 0 { 0 } else { (start + 1) % n };
                (round, jobs)
            };
            for job in jobs {
                job(store);
            }
            if !round.is_empty() {
                self.commit_round(store, round, sink);
            }
        }
    }

    fn commit_round(
        &self,
        store: &Store,
        round: Vec<(String, WriteRequest)>,
        sink: &dyn CommitSink,
    ) {
        let started = Instant::now();
        // Injected in tests: a round that fails before committing, or one that commits but
        // whose outcome is lost (as a connection lost at COMMIT).
        let injected = |point| round.iter().any(|(db, _)| transient_fault(point, db));
        let outcome = if injected("commit-before") {
            Err(StoreError::Redb("injected failure before commit".into()))
        } else {
            let mut dbs = self.dbs.lock().expect("committer db lock");
            apply_round(store, self.shard, &mut dbs, &round, ROUND_BUDGET)
        };
        let fsync = started.elapsed();
        let outcome = match outcome {
            Ok((_, committed)) if injected("commit-after") => {
                sink.committed(committed, 0, fsync);
                Err(StoreError::Redb("injected loss of an outcome".into()))
            }
            outcome => outcome,
        };
        match outcome {
            Ok((results, committed)) => {
                let batches = results.len();
                let mut round = round.into_iter();
                // Results first: `zip` then takes no batch past the last result.
                for (res, (_, req)) in results.into_iter().zip(round.by_ref()) {
                    let _ = req.reply.send(res);
                }
                self.requeue(round.collect());
                sink.committed(committed, batches, fsync);
            }
            Err(e) => {
                self.log_failure(&e);
                // Not committed, or not known to be (a connection lost at COMMIT): the next
                // round starts from the heads it locks, so the versions handed out are
                // taken back, and a retry under the same batch id learns the outcome from
                // the batch's record. Each connection's later batches are halted.
                for (_, req) in round {
                    req.halted.store(true, Ordering::Release);
                    let _ = req.reply.send(Err(WriteError::new(
                        ErrorCode::Unavailable,
                        format!("commit failed (a transient error: retry the same batch): {e}"),
                    )));
                }
            }
        }
    }

    /// Logs a failed round: the first of a run at once, then a count every [`FAILURE_LOG_EVERY`].
    fn log_failure(&self, e: &StoreError) {
        let Ok(mut failures) = self.failures.lock() else {
            return;
        };
        let (unlogged, last) = &mut *failures;
        *unlogged += 1;
        if last.is_none_or(|t| t.elapsed() >= FAILURE_LOG_EVERY) {
            tracing::error!(error = %e, rounds = *unlogged, "group commit failed");
            *unlogged = 0;
            *last = Some(Instant::now());
        }
    }

    /// Puts batches a round had no time for back at the front of their queues, in order.
    fn requeue(&self, rest: Vec<(String, WriteRequest)>) {
        if rest.is_empty() {
            return;
        }
        let mut q = self.queues.lock().expect("committer lock");
        for (db, req) in rest.into_iter().rev() {
            let (queue, bytes) = q.by_db.entry(db).or_default();
            *bytes += req.bytes;
            queue.push_front(req);
        }
    }
}

pub(crate) fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

type RoundResult = (Vec<Result<u64, WriteError>>, Vec<Committed>);

/// Applies the round's batches in order, in one write transaction committed durably,
/// stopping early (after at least one) once `budget` has passed: the results are those of
/// the first batches, the rest are left for the caller to queue again.
fn apply_round(
    store: &Store,
    shard: usize,
    dbs: &mut HashMap<String, DbState>,
    round: &[(String, WriteRequest)],
    budget: Duration,
) -> Result<RoundResult, StoreError> {
    let mut out = None;
    store.write(shard, true, &mut |w| {
        out = Some(apply_in(w, dbs, round, budget)?);
        Ok(())
    })?;
    Ok(out.expect("a committed round has its results"))
}

/// [`apply_round`]'s work in write transaction `w`. It starts from the heads it locks, not
/// from what an earlier run left in `dbs`: a backend may run it again.
fn apply_in(
    w: &mut dyn WriteTxn,
    dbs: &mut HashMap<String, DbState>,
    round: &[(String, WriteRequest)],
    budget: Duration,
) -> Result<RoundResult, StoreError> {
    let started = Instant::now();
    let mut results = Vec::with_capacity(round.len());
    let mut committed = Vec::new();
    {
        // Every database of the round, its head locked (in name order, so two relays
        // committing to the same databases never wait for each other in a cycle): from
        // here on no other writer commits to it until this transaction ends.
        // Read ahead with them: each batch's idempotency record, and the documents it
        // writes and revalidates.
        let mut names: Vec<&str> = round.iter().map(|(db, _)| db.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        let mut reads = Vec::new();
        for (db, req) in round {
            let prefix = db_prefix(db);
            reads.push((Tab::Batches, batch_key(db, &req.client_id, req.batch_id)));
            let docs = req.mutations.iter().map(|m| &m.name);
            for name in docs.chain(req.reads.iter().map(|(n, _)| n)) {
                reads.push((
                    Tab::Documents,
                    [prefix.as_slice(), &document_key(name)].concat(),
                ));
            }
        }
        reads.sort_unstable();
        reads.dedup();
        let heads = w.begin_commit(&names, &reads)?;
        for (db, head) in names.into_iter().zip(heads) {
            let state = dbs
                .get_mut(db)
                .expect("databases are registered before writes");
            let head = head.unwrap_or_default();
            state.version = head.version;
            state.last_micros = state.last_micros.max(head.micros);
            if head.catalog != state.catalogs.generation {
                // The index definitions changed (a build began or ended, here or on another
                // relay): this round maintains them as they are now.
                state.catalogs = Catalogs::load(w, db, head.catalog)?;
                tracing::info!(
                    database = %db,
                    generation = head.catalog,
                    building = state.catalogs.building.is_some(),
                    dropping = state.catalogs.dropping.is_some(),
                    "commits maintain the index definitions of a new generation"
                );
            }
        }
        let mut touched_versions: Vec<String> = Vec::new();
        for (db, req) in round {
            if !results.is_empty() && started.elapsed() >= budget {
                break;
            }
            fault_point("commit", db);
            if req.halted.load(Ordering::Acquire) {
                results.push(Err(halted_error()));
                continue;
            }
            let state = dbs
                .get_mut(db)
                .expect("databases are registered before writes");
            let prefix = db_prefix(db);
            let bkey = batch_key(db, &req.client_id, req.batch_id);
            if let Some(v) = w.get(Tab::Batches, &bkey)? {
                tracing::trace!(database = %db, client = %req.client_id, batch = req.batch_id, "a retry of a committed batch");
                // The id was used before: a retry of that batch gets the same answer and is
                // applied once; a different batch under it is refused.
                results.push(match BatchRecord::decode(&v) {
                    Ok(r) => r.answer(&req.digest, &req.client_id, req.batch_id),
                    Err(what) => Err(WriteError::new(
                        ErrorCode::DataLoss,
                        format!("the record of batch id {} is corrupt: {what}", req.batch_id),
                    )),
                });
                continue;
            }
            let read_doc =
                |w: &dyn WriteTxn, name: &DocumentName| -> Result<Option<Document>, StoreError> {
                    let key = [prefix.as_slice(), &document_key(name)].concat();
                    match w.get(Tab::Documents, &key)? {
                        None => Ok(None),
                        Some(v) => decode_document(&v)
                            .map(Some)
                            .map_err(|e| StoreError::Corrupt {
                                db: db.clone(),
                                what: e.to_string(),
                            }),
                    }
                };
            let version = state.version + 1;
            let micros = now_micros().max(state.last_micros + 1);
            let ctx = ApplyContext {
                commit_version: version,
                commit_time: Timestamp::from_micros(micros).unwrap_or_else(|_| {
                    Timestamp::new(0, 0).expect("the epoch is a valid timestamp")
                }),
            };
            // The security rules decide first: nothing about a stored document (whether
            // it exists, its version, a conflict) is told to a caller they refuse. A
            // transaction's reads are decided before its writes: once the caller may read
            // them all, a change to one since is theirs to know, and the transaction is
            // aborted (to be retried) before rules that compare the writes with the stored
            // documents judge writes made from a stale read.
            let reader = |n: &DocumentName| read_doc(&*w, n);
            let mut denied = match &req.access {
                Some(access) => access.decide_reads(db, &req.reads, &reader)?,
                None => None,
            };
            // Transaction reads must be unchanged.
            let mut conflict = None;
            if denied.is_none() {
                for (name, seen) in &req.reads {
                    let now = read_doc(&*w, name)?.map(|d| d.update_version);
                    if now != *seen {
                        conflict = Some(name.clone());
                        break;
                    }
                }
            }
            if let (None, None, Some(access)) = (&denied, &conflict, &req.access) {
                denied = access.decide_writes(db, &req.mutations, &ctx, &reader)?;
            }
            // A refusal is recorded under the batch id like a commit: a retry (the client
            // did not hear the answer) gets the same refusal instead of being applied after
            // the batches the client sent behind it.
            let refuse = |w: &mut dyn WriteTxn, e: WriteError| -> Result<WriteError, StoreError> {
                let record = BatchRecord {
                    version: state.version,
                    micros: now_micros().max(state.last_micros),
                    digest: Some(req.digest),
                    refused: Some((e.code, e.message.clone())),
                };
                w.put(Tab::Batches, &bkey, &record.encode())?;
                tracing::trace!(database = %db, client = %req.client_id, batch = req.batch_id, code = ?e.code, "refused");
                Ok(e)
            };
            if let Some(e) = denied {
                results.push(Err(refuse(w, e)?));
                continue;
            }
            if let Some(name) = conflict {
                results.push(Err(refuse(w, WriteError::new(
                    ErrorCode::Aborted,
                    format!("transaction conflict: `{name}` changed since it was read; retry the transaction"),
                ))?));
                continue;
            }
            // Apply the whole batch in memory first: it commits whole or not at all.
            let mut overlay: Vec<(DocumentName, Option<Document>, Option<Document>)> = Vec::new();
            // Where each document written so far is in `overlay`.
            let mut at: HashMap<&DocumentName, usize> = HashMap::new();
            let mut failed = None;
            for m in &req.mutations {
                let pos = at.get(&m.name).copied();
                let base = match pos {
                    Some(i) => overlay[i].2.clone(),
                    None => read_doc(&*w, &m.name)?,
                };
                match m.apply(base.as_ref(), &ctx) {
                    Ok(new) => match pos {
                        Some(i) => overlay[i].2 = new,
                        None => {
                            at.insert(&m.name, overlay.len());
                            overlay.push((m.name.clone(), base, new));
                        }
                    },
                    Err(e) => {
                        failed = Some(WriteError::from(e));
                        break;
                    }
                }
            }
            if let Some(e) = failed {
                // Under rules, a precondition's failure does not quote the stored version.
                let e = match (&req.access, e.code) {
                    (Some(_), ErrorCode::FailedPrecondition) => WriteError::new(
                        ErrorCode::FailedPrecondition,
                        "a document of the batch does not have the update version its precondition requires",
                    ),
                    _ => e,
                };
                results.push(Err(refuse(w, e)?));
                continue;
            }
            let mut encoded = Vec::with_capacity(overlay.len());
            for (_, _, new) in &overlay {
                match new.as_ref().map(encode_document).transpose() {
                    Ok(b) => encoded.push(b),
                    Err(e) => {
                        failed = Some(WriteError::new(ErrorCode::InvalidArgument, e.to_string()));
                        break;
                    }
                }
            }
            if let Some(e) = failed {
                results.push(Err(refuse(w, e)?));
                continue;
            }
            // The index entries each document change writes, within Firestore's limit per
            // document and the relay's per batch, checked before anything is written.
            let mut diffs = Vec::with_capacity(overlay.len());
            let mut writes = 0usize;
            for (name, old, new) in &overlay {
                let diff = state.catalogs.diff(old.as_ref(), new.as_ref());
                if diff.entries > MAX_INDEX_ENTRIES_PER_DOCUMENT {
                    failed = Some(WriteError::new(
                        ErrorCode::InvalidArgument,
                        format!(
                            "document `{name}` would have {} index entries, over the limit of \
                             {MAX_INDEX_ENTRIES_PER_DOCUMENT} per document: exempt its large \
                             arrays or maps from indexing (fieldOverrides) or split it",
                            diff.entries
                        ),
                    ));
                    break;
                }
                writes += diff.deletes.len() + diff.inserts.len();
                diffs.push(diff);
            }
            // A key longer than the backend stores (PostgreSQL's B-tree entries) refuses
            // the batch alone, before anything is written.
            if let (None, Some(max)) = (&failed, w.max_key_bytes()) {
                let over = overlay.iter().zip(&diffs).find_map(|((name, _, _), diff)| {
                    let doc = prefix.len() + document_key(name).len();
                    let entry = diff.inserts.iter().map(|k| prefix.len() + k.len()).max();
                    let longest = entry.unwrap_or(0).max(doc);
                    (longest > max).then_some((name, longest))
                });
                if let Some((name, bytes)) = over {
                    failed = Some(WriteError::new(
                        ErrorCode::InvalidArgument,
                        format!(
                            "document `{name}` would write an index entry of {bytes} bytes, over \
                             this store's limit of {max}: exempt its large values from indexing \
                             (fieldOverrides) or store smaller ones"
                        ),
                    ));
                }
            }
            if failed.is_none() && writes > MAX_INDEX_WRITES_PER_BATCH {
                failed = Some(WriteError::new(
                    ErrorCode::InvalidArgument,
                    format!(
                        "the batch changes {writes} index entries, over the limit of \
                         {MAX_INDEX_WRITES_PER_BATCH} per batch: split it into smaller batches"
                    ),
                ));
            }
            if let Some(e) = failed {
                results.push(Err(refuse(w, e)?));
                continue;
            }
            for (((name, _, _), bytes), diff) in overlay.iter().zip(encoded).zip(diffs) {
                let key = [prefix.as_slice(), &document_key(name)].concat();
                match bytes {
                    Some(b) => w.put(Tab::Documents, &key, &b)?,
                    None => w.delete(Tab::Documents, &key)?,
                }
                for k in diff.deletes {
                    w.delete(Tab::Index, &[prefix.as_slice(), &k].concat())?;
                }
                for k in diff.inserts {
                    w.put(Tab::Index, &[prefix.as_slice(), &k].concat(), &[])?;
                }
            }
            let names: Vec<DocumentName> = overlay.iter().map(|(n, _, _)| n.clone()).collect();
            let mut ckey = prefix.clone();
            ckey.extend_from_slice(&version.to_be_bytes());
            w.put(Tab::Changelog, &ckey, &encode_change_names(micros, &names))?;
            let record = BatchRecord {
                version,
                micros,
                digest: Some(req.digest),
                refused: None,
            };
            w.put(Tab::Batches, &bkey, &record.encode())?;
            state.version = version;
            state.last_micros = micros;
            if !touched_versions.contains(db) {
                touched_versions.push(db.clone());
            }
            tracing::trace!(database = %db, client = %req.client_id, batch = req.batch_id, version, "committed");
            committed.push(Committed {
                database: db.clone(),
                version,
                changes: overlay.into_iter().map(|(n, _, new)| (n, new)).collect(),
            });
            results.push(Ok(version));
        }
        for db in touched_versions {
            let s = &dbs[&db];
            w.set_head(&db, s.version, s.last_micros)?;
        }
    }
    Ok((results, committed))
}

/// Registers a database's state with the committer (before its first write), creating its
/// head so it is listed on restart (with `catalog` as its index definitions), and returns
/// its last commit version and its index definitions (the stored ones when it exists:
/// another relay may have created and written it). Its commit times go on from the latest
/// one stored (the head's, or the newest changelog record's), so they never go back
/// across a restart, whatever the clock did.
pub fn register_database(
    store: &Store,
    committer: &Committer,
    db: &str,
    catalog: IndexCatalog,
) -> Result<(u64, Catalogs), StoreError> {
    debug_assert_eq!(
        store.shard_index(db),
        committer.shard,
        "`{db}` is in another shard"
    );
    let mut dbs = committer.dbs.lock().expect("committer db lock");
    if let Some(s) = dbs.get(db) {
        return Ok((s.version, s.catalogs.clone()));
    }
    let mut head = Head::default();
    let mut catalogs = Catalogs::default();
    let json = catalog.file().to_json();
    store.write_db(db, &mut |w| {
        match w.head(db)? {
            Some(h) => {
                head = h;
                catalogs = Catalogs::load(w, db, h.catalog)?;
            }
            None => {
                head = Head::default();
                w.set_head(db, 0, 0)?;
                w.put_meta(&format!("indexes/{db}"), json.as_bytes())?;
                catalogs = Catalogs {
                    indexes: catalog.clone(),
                    ..Catalogs::default()
                };
            }
        }
        let prefix = db_prefix(db);
        let end = prefix_end(&prefix).expect("a database prefix has an end");
        let newest = w.range(Tab::Changelog, &prefix, &end, true, 1)?;
        let newest = newest.first().map(|(_, v)| change_time(v));
        head.micros = head.micros.max(newest.unwrap_or(0));
        Ok(())
    })?;
    dbs.insert(
        db.to_owned(),
        DbState {
            catalogs: catalogs.clone(),
            version: head.version,
            last_micros: head.micros,
        },
    );
    Ok((head.version, catalogs))
}

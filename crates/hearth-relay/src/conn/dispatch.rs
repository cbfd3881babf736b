//! A connection's request dispatch: each decoded client message after the `Hello` becomes
//! a read (a snapshot of the store and the core's executor), a write (the committer's
//! queue, acknowledged when durable) or a listen (the database's fan-out).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{error, now_unix, Connection};

/// How long a listen waits for the fan-out to publish the store's latest version, and how
/// many times (see `ListenStart::run`).
const BEHIND_WAIT: Duration = Duration::from_millis(2);
const BEHIND_TRIES: u32 = 50;

/// Most writes (and most transaction reads) in one batch.
const MAX_WRITES_PER_BATCH: usize = 10_000;
use crate::commit::{batch_digest, Refused, WriteError, WriteRequest};
use crate::databases::Database;
use crate::fanout::{Changed, Listened, Start, TargetGuard};
use crate::outbound::Outbound;
use crate::rules::{Access, ListenGuard, SnapshotReader};
use crate::state::Relay;
use hearth_core::document::Document;
use hearth_core::kv::block_on_ready;
use hearth_core::mutation::Mutation;
use hearth_core::path::DocumentName;
use hearth_core::protocol::codec::decode_client;
use hearth_core::protocol::{ClientMessage, ErrorCode, ServerMessage};
use hearth_core::query::execute::fetch;
use hearth_core::query::model::{Query, Source};
use hearth_core::query::validate::{check_listenable, validate, validate_aggregations, QueryError};

/// A connection's share of bytes in flight, given back when dropped.
struct InFlight {
    counter: Arc<AtomicUsize>,
    bytes: usize,
}

impl InFlight {
    fn new(counter: Arc<AtomicUsize>, bytes: usize) -> InFlight {
        counter.fetch_add(bytes, Ordering::AcqRel);
        InFlight { counter, bytes }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.counter.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// Whether document `name` can belong to a query over `source` (a resume never names
/// documents of other collections).
fn in_source(source: &Source, name: &DocumentName) -> bool {
    match source {
        Source::Collection(c) => c.contains(name),
        Source::CollectionGroup(g) => name.collection_id() == g,
    }
}

/// Runs `f`, which takes a database's fan-out lock, on the blocking pool: the lock may be
/// held for a while (a listen's first read), and a runtime worker must not wait for it.
/// `None` if it panicked.
async fn off_worker<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(f).await.ok()
}

impl Connection {
    /// What the rules check this connection's requests with (`None`: nothing: the relay is
    /// open, or the connection holds a service token).
    fn access(&self) -> Option<Access> {
        self.relay.rules().access(&self.auth, self.relay.metrics())
    }

    /// Checks every target of the connection against the rules under its identity (a new
    /// token): those it may still read decide with the new identity from now on; those it
    /// may not, or whose check failed for any other reason, end with a target `Error`
    /// (`permission-denied`, or the failure's code): no listen goes on unproved.
    async fn recheck_targets(&mut self) {
        let access = self.access();
        let (db, id) = (self.db.clone(), self.id);
        let targets = off_worker(move || db.fanout().targets_of(id)).await;
        for (target_id, query) in targets.unwrap_or_default() {
            let (db, access) = (self.db.clone(), access.clone());
            let store = self.relay.store().clone();
            let proved = self
                .relay
                .blocking_read(&self.db, move |relay| {
                    relay.check_list(access.as_ref(), &db, &query)?;
                    Ok::<_, QueryError>(access.map(|access| {
                        let guard = ListenGuard::new(access, db.name(), store, query);
                        Arc::new(guard) as Arc<dyn TargetGuard>
                    }))
                })
                .await;
            let (code, msg) = match proved {
                Ok(Ok(guard)) => {
                    let (db, id) = (self.db.clone(), self.id);
                    off_worker(move || db.fanout().set_guard(id, target_id, guard)).await;
                    continue;
                }
                Ok(Err(e)) => (e.code(), e.to_string()),
                Err(e) => (ErrorCode::Internal, e),
            };
            let (db, id) = (self.db.clone(), self.id);
            let ended = off_worker(move || db.fanout().unlisten(id, target_id)).await;
            if ended == Some(true) {
                self.relay.metrics().listen_stopped(self.db.name());
                self.send(&error(0, target_id, code, msg));
            }
        }
    }

    /// The token expired: every listen of the connection ends with `unauthenticated`.
    pub(super) async fn end_listens_on_expiry(&mut self) {
        let exp = self.auth.expires_at.unwrap_or(0);
        let (db, id) = (self.db.clone(), self.id);
        let ended = off_worker(move || db.fanout().end_listens(id)).await;
        for target_id in ended.unwrap_or_default() {
            self.relay.metrics().listen_stopped(self.db.name());
            self.send(&error(
                0,
                target_id,
                ErrorCode::Unauthenticated,
                format!("auth token expired at {exp} (unix seconds): listen again after refreshing it with an Auth message"),
            ));
        }
        // The timer waits for the expiry of a token an `Auth` brings next.
        self.expiry_handled = self.auth.expires_at;
    }

    /// Handles one frame; false ends the connection.
    pub(super) async fn handle(&mut self, frame: &[u8]) -> bool {
        let msg = match decode_client(frame) {
            Ok(m) => m,
            Err(e) => {
                self.relay.metrics().protocol_error("malformed");
                self.send(&error(0, 0, e.code(), format!("malformed frame: {e}")));
                return false;
            }
        };
        let (request_id, target_id) = match &msg {
            ClientMessage::Get { request_id, .. }
            | ClientMessage::RunQuery { request_id, .. }
            | ClientMessage::RunAggregation { request_id, .. }
            | ClientMessage::Write { request_id, .. } => (*request_id, 0),
            ClientMessage::Listen { target_id, .. } => (0, *target_id),
            _ => (0, 0),
        };
        if !matches!(msg, ClientMessage::Auth { .. } | ClientMessage::Ping { .. }) {
            if let Some(exp) = self.auth.expires_at {
                if now_unix() >= exp {
                    self.send(&error(request_id, target_id, ErrorCode::Unauthenticated, format!("auth token expired at {exp} (unix seconds): refresh it with an Auth message")));
                    return true;
                }
            }
        }
        match msg {
            ClientMessage::Hello { .. } => {
                self.send(&error(
                    0,
                    0,
                    ErrorCode::FailedPrecondition,
                    "Hello may only be the first message",
                ));
            }
            ClientMessage::Auth { token } => match super::verify_token(&self.relay, &token) {
                Ok(a) => {
                    // The new token must allow the connection's database (its `databases`
                    // claim), and a new subject needs room under its connection limit:
                    // otherwise the connection ends, as for a refused token.
                    if let Some(msg) = a.database_denied(self.db.name()) {
                        self.send(&error(0, 0, ErrorCode::PermissionDenied, msg));
                        return false;
                    }
                    if a.uid != self.auth.uid {
                        match super::hold_subject(&self.relay, &self.limits, &a) {
                            Ok(held) => self.held.subject = held,
                            Err(msg) => {
                                self.send(&error(0, 0, ErrorCode::ResourceExhausted, msg));
                                return false;
                            }
                        }
                    }
                    self.auth = a;
                    self.recheck_targets().await;
                }
                Err(e) => {
                    // A refused token ends the connection (protocol §2.2): the old identity
                    // does not stay in force behind it.
                    self.send(&error(0, 0, ErrorCode::Unauthenticated, e.to_string()));
                    return false;
                }
            },
            ClientMessage::Ping { nonce } => {
                let version = self.db.fanout().published();
                self.send(&ServerMessage::Heartbeat { version, nonce });
            }
            ClientMessage::Get { request_id, names } => {
                let db = self.db.clone();
                let access = self.access();
                let small = names.len() <= SMALL_GET;
                let read = move |relay: &Relay| get(relay, &db, access.as_ref(), request_id, names);
                let reply = match small {
                    true => self.relay.small_read(&self.db, read).await,
                    false => self.relay.blocking_read(&self.db, read).await,
                };
                let reply = reply.unwrap_or_else(|e| error(request_id, 0, ErrorCode::Internal, e));
                self.reply(request_id, &reply);
            }
            ClientMessage::RunQuery { request_id, query } => {
                let reply = match self.query_with_auto_index(&query).await {
                    Ok(Ok((documents, version))) => ServerMessage::QueryResult {
                        request_id,
                        version,
                        documents,
                    },
                    Ok(Err(e)) => error(request_id, 0, e.code(), e.to_string()),
                    Err(e) => error(request_id, 0, ErrorCode::Internal, e),
                };
                self.reply(request_id, &reply);
            }
            ClientMessage::RunAggregation {
                request_id,
                query,
                aggregations,
            } => {
                // Refused before it waits for a read slot: validation reads nothing.
                if let Err(e) = validate(&query).and_then(|_| validate_aggregations(&aggregations))
                {
                    self.send(&error(request_id, 0, e.code(), e.to_string()));
                    return true;
                }
                let mut attempt = 0;
                let aggregations = std::sync::Arc::new(aggregations);
                let access = self.access();
                let reply = loop {
                    let (db, q, aggs) = (self.db.clone(), query.clone(), aggregations.clone());
                    let access = access.clone();
                    let result = self
                        .relay
                        .blocking_read(&self.db, move |relay| {
                            relay.aggregate_latest(access.as_ref(), &db, &q, &aggs)
                        })
                        .await;
                    let result = match result {
                        Ok(r) => r,
                        Err(e) => break error(request_id, 0, ErrorCode::Internal, e),
                    };
                    match result {
                        Ok((values, version)) => {
                            break ServerMessage::AggregationResult {
                                request_id,
                                version,
                                values,
                            }
                        }
                        Err(e) => {
                            attempt += 1;
                            if attempt < 8 && self.relay.auto_index(&self.db, &e).await {
                                continue;
                            }
                            break error(request_id, 0, e.code(), e.to_string());
                        }
                    }
                };
                self.send(&reply);
            }
            ClientMessage::Write {
                request_id,
                batch_id,
                mutations,
                reads,
            } => {
                self.write_budget(frame.len()).await;
                self.write(request_id, batch_id, mutations, reads, frame.len())
                    .await;
            }
            ClientMessage::Listen {
                target_id,
                query,
                resume_version,
            } => {
                // Refused before it waits for a read slot: validation reads nothing.
                if let Err(e) = validate(&query).and_then(|q| check_listenable(&q)) {
                    self.send(&error(0, target_id, e.code(), e.to_string()));
                    return true;
                }
                let mut attempt = 0;
                let mut behind = 0;
                let rules_generation = self.relay.rules().generation();
                loop {
                    let accept_ahead = behind >= BEHIND_TRIES;
                    let start = ListenStart {
                        db: self.db.clone(),
                        out: self.out.clone(),
                        target_id,
                        query: query.clone(),
                        resume: resume_version,
                        accept_ahead,
                        access: self.access(),
                    };
                    let listened = self
                        .relay
                        .blocking_read(&self.db, move |relay| start.run(relay))
                        .await;
                    let listened = match listened {
                        Ok(l) => l,
                        Err(e) => {
                            self.send(&error(0, target_id, ErrorCode::Internal, e));
                            break;
                        }
                    };
                    match listened {
                        Ok(Listened::Started) => {
                            self.relay.metrics().listen_started(self.db.name());
                            // Rules reloaded while it started: its walk over the listens
                            // may have missed this one, proved under the old rules.
                            if self.relay.rules().generation() != rules_generation {
                                self.recheck_targets().await;
                            }
                            break;
                        }
                        Ok(Listened::Behind) => {
                            behind += 1;
                            tokio::time::sleep(BEHIND_WAIT).await;
                        }
                        Err(e) => {
                            attempt += 1;
                            if attempt < 8 && self.relay.auto_index(&self.db, &e).await {
                                continue;
                            }
                            self.send(&error(0, target_id, e.code(), e.to_string()));
                            break;
                        }
                    }
                }
            }
            ClientMessage::Unlisten { target_id } => {
                let (db, id) = (self.db.clone(), self.id);
                let ended = off_worker(move || db.fanout().unlisten(id, target_id)).await;
                if ended == Some(true) {
                    self.relay.metrics().listen_stopped(self.db.name());
                }
            }
        }
        true
    }

    /// A one-time query, creating the indexes it needs with `--auto-index`: `Err` when
    /// the read itself failed (panicked).
    async fn query_with_auto_index(
        &self,
        query: &Query,
    ) -> Result<Result<(Vec<Document>, u64), QueryError>, String> {
        let q = match validate(query) {
            Ok(q) => q,
            Err(e) => return Ok(Err(e)),
        };
        // An OR query may need several indexes: create them one by one.
        let mut attempt = 0;
        let access = self.access();
        loop {
            let (db, qq, access) = (self.db.clone(), q.clone(), access.clone());
            let result = self
                .relay
                .blocking_read(&self.db, move |relay| {
                    relay.query_for_reply(access.as_ref(), &db, &qq)
                })
                .await?;
            attempt += 1;
            match result {
                Err(e) if attempt < 9 && self.relay.auto_index(&self.db, &e).await => continue,
                other => return Ok(other),
            }
        }
    }

    /// Waits, reading nothing more from the client, until the connection's unacknowledged
    /// writes leave room for `bytes` more under `--max-inflight-write-bytes-per-connection`
    /// (a connection with none in flight always has room): backpressure on a client that
    /// writes faster than its database commits.
    async fn write_budget(&mut self, bytes: usize) {
        let cap = self.relay.config().max_inflight_write_bytes_per_connection;
        loop {
            let held = self.write_bytes.load(Ordering::Acquire);
            if held == 0 || held.saturating_add(bytes) <= cap {
                return;
            }
            if self.writes.join_next().await.is_none() {
                return;
            }
        }
    }

    async fn write(
        &mut self,
        request_id: u64,
        batch_id: u64,
        mutations: Vec<Mutation>,
        reads: Vec<(DocumentName, Option<u64>)>,
        bytes: usize,
    ) {
        tracing::trace!(
            conn = self.id,
            request = request_id,
            batch = batch_id,
            "write received"
        );
        if mutations.len() > MAX_WRITES_PER_BATCH || reads.len() > MAX_WRITES_PER_BATCH {
            self.send(&error(
                request_id,
                0,
                ErrorCode::InvalidArgument,
                format!(
                    "a batch may hold at most {MAX_WRITES_PER_BATCH} writes and {MAX_WRITES_PER_BATCH} transaction reads; this one has {} and {}: split it",
                    mutations.len(),
                    reads.len()
                ),
            ));
            return;
        }
        for m in &mutations {
            if let Err(e) = m.validate() {
                let e = WriteError::from(e);
                self.send(&error(request_id, 0, e.code, e.message));
                return;
            }
        }
        if mutations.is_empty() && reads.is_empty() {
            let version = self.db.fanout().published();
            self.send(&ServerMessage::WriteResult {
                request_id,
                batch_id,
                version,
            });
            return;
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let access = self.access();
        let writer = access
            .as_ref()
            .map(|a| a.auth.as_deref().map(|auth| auth.uid.as_str()));
        let req = WriteRequest {
            client_id: self.client_id.clone(),
            batch_id,
            digest: batch_digest(&mutations, &reads, writer),
            mutations,
            reads,
            reply: tx,
            enqueued: Instant::now(),
            bytes,
            access,
            halted: self.writes_halted.clone(),
        };
        // A full queue (`--max-inflight-writes`, `--max-inflight-write-bytes`) holds the
        // connection, reading nothing more from it, until the committer takes batches:
        // backpressure that keeps the client's order and loses nothing.
        let mut req = req;
        loop {
            let room = self.relay.committer(self.db.name()).room().notified();
            tokio::pin!(room);
            room.as_mut().enable();
            match self
                .relay
                .committer(self.db.name())
                .submit(self.db.name(), req)
            {
                Ok(()) => break,
                Err(Refused::Full(r)) => {
                    req = *r;
                    room.await;
                }
                Err(Refused::Stopping(_)) => {
                    self.send(&error(
                        request_id,
                        0,
                        ErrorCode::Unavailable,
                        "the relay is shutting down",
                    ));
                    return;
                }
            }
        }
        let out = self.out.clone();
        let metrics = self.relay.metrics().clone();
        let started = Instant::now();
        let held = InFlight::new(self.write_bytes.clone(), bytes);
        self.writes.spawn(async move {
            let _held = held;
            let reply = match rx.await {
                Ok(Ok(version)) => ServerMessage::WriteResult {
                    request_id,
                    batch_id,
                    version,
                },
                Ok(Err(e)) => error(request_id, 0, e.code, e.message),
                Err(_) => error(
                    request_id,
                    0,
                    ErrorCode::Unavailable,
                    "the relay is shutting down",
                ),
            };
            metrics.commit_latency(started.elapsed().as_secs_f64());
            out.send_message(&reply);
        });
        // Reap finished acknowledgements so the set stays small.
        while self.writes.try_join_next().is_some() {}
    }
}

/// Most names a `Get` may have to be read in place ([`Relay::small_read`]).
const SMALL_GET: usize = 8;

/// A one-time read of the documents `names` at the latest committed state, each allowed by
/// the rules (`access`; `None`: nothing to check) or the whole read refused.
fn get(
    relay: &Relay,
    db: &Database,
    access: Option<&Access>,
    request_id: u64,
    names: Vec<DocumentName>,
) -> ServerMessage {
    let result = (|| -> Result<ServerMessage, String> {
        let snap = relay
            .store()
            .snapshot(db.name())
            .map_err(|e| e.to_string())?;
        let view = snap.database(db.name());
        view.read_ahead(&names).map_err(|e| e.to_string())?;
        let version = view.version().map_err(|e| e.to_string())?;
        let mut documents = Vec::with_capacity(names.len());
        for n in names {
            let d = block_on_ready(fetch(&view, &n)).map_err(|e| e.to_string())?;
            if let Some(access) = access {
                let reader = SnapshotReader { view: &view };
                let checked = access.check_get(db.name(), &n, d.as_ref(), &reader);
                if let Err(denied) = checked {
                    return Ok(error(request_id, 0, ErrorCode::PermissionDenied, denied));
                }
            }
            documents.push((n, d));
        }
        Ok(ServerMessage::GetResult {
            request_id,
            version,
            documents,
        })
    })();
    result.unwrap_or_else(|e| error(request_id, 0, ErrorCode::Unavailable, e))
}

/// A `Listen` request, run on the blocking pool ([`Relay::blocking_read`]).
struct ListenStart {
    /// The connection's database.
    db: Arc<Database>,
    /// The connection's write side: the target's frames go there.
    out: Outbound,
    target_id: u32,
    query: Query,
    /// The client's version of the target's result, if it resumes one.
    resume: Option<u64>,
    /// Take a resume read ahead of the fan-out's published version.
    accept_ahead: bool,
    /// What the rules check the listen with (`None`: nothing).
    access: Option<Access>,
}

impl ListenStart {
    /// Starts the target. A resume reads the documents changed since the client's version
    /// at the store's latest version; when that is ahead of what the fan-out has published
    /// (a commit is on its way to it) the states would be newer than the target's first
    /// snapshot, so the listen is asked again shortly ([`Listened::Behind`]), and only after
    /// `BEHIND_TRIES` is the newer read taken (the commit's own delta follows it). A fresh
    /// listen joining a live query waits the same way while the query's view is older than
    /// the store's latest version, so its first snapshot shows every write acknowledged
    /// before it began (here or on another relay).
    fn run(self, relay: &Relay) -> Result<Listened, QueryError> {
        let limit = relay.config().max_listens_per_connection;
        let held = self
            .out
            .targets()
            .load(std::sync::atomic::Ordering::Relaxed);
        if held >= limit {
            return Err(QueryError::ResourceExhausted(format!(
                "this connection has {held} listens, the relay's limit \
                 (--max-listens-per-connection {limit}): stop one before starting another"
            )));
        }
        let q = validate(&self.query)?;
        check_listenable(&q)?;
        relay.check_list(self.access.as_ref(), &self.db, &q)?;
        let source = q.source.clone();
        let db = &self.db;
        let store = relay.store().clone();
        let name = db.name().to_owned();
        let (resume, accept_ahead) = (self.resume, self.accept_ahead);
        // Every write acknowledged before this listen began is at or below the store's
        // latest version now: a fresh listen joining a live query whose view is older (its
        // commit still on the way to the fan-out) waits as a resume does. Read before the
        // fan-out lock, which a PostgreSQL round trip must not hold. When the store cannot
        // tell (an outage), a live query's view is served as it is: nothing is acknowledged
        // meanwhile, and a commit on its way to the fan-out follows as a delta.
        let latest = match resume {
            None => store
                .snapshot(&name)
                .and_then(|s| s.database(&name).version())
                .unwrap_or(0),
            Some(_) => 0,
        };
        let guard = self.access.map(|access| {
            let guard = ListenGuard::new(access, db.name(), store.clone(), q.clone());
            Arc::new(guard) as Arc<dyn TargetGuard>
        });
        db.fanout().listen(
            &self.out,
            self.target_id,
            q,
            |q| relay.query_latest(db, q),
            move |at| match resume {
                None if latest > at && !accept_ahead => Start::Behind,
                None => Start::Fresh,
                Some(r) if r > at => {
                    // A version this relay never had: the client's state is unknown.
                    Start::Resume(None)
                }
                Some(r) => {
                    let Ok(snap) = store.snapshot(&name) else {
                        return Start::Resume(None);
                    };
                    let view = snap.database(&name);
                    let read_at = view.version().unwrap_or(u64::MAX);
                    if read_at > at && !accept_ahead {
                        return Start::Behind;
                    }
                    // A delta only when the changelog holds every commit in (r, at]; a
                    // version it lacks (pruned) could hide any change.
                    let Ok(Some(mut names)) = view.changes_between(r, at) else {
                        return Start::Resume(None);
                    };
                    names.retain(|n| in_source(&source, n));
                    names.sort();
                    names.dedup();
                    let mut states = Vec::with_capacity(names.len());
                    for n in names {
                        match block_on_ready(fetch(&view, &n)) {
                            Ok(d) => states.push((n, d)),
                            Err(_) => return Start::Resume(None),
                        }
                    }
                    Start::Resume(Some(Changed { read_at, states }))
                }
            },
            guard,
        )
    }
}

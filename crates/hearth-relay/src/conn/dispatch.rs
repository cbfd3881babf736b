//! A connection's request dispatch: each decoded client message after the `Hello` becomes
//! a read (a snapshot of the store and the core's executor), a write (the committer's
//! queue, acknowledged when durable) or a listen (the database's fan-out).

use std::time::{Duration, Instant};

use super::{error, now_unix, Connection};

/// How long a resuming listen waits for the fan-out to publish the store's latest version,
/// and how many times (see `Connection::listen`).
const BEHIND_WAIT: Duration = Duration::from_millis(2);
const BEHIND_TRIES: u32 = 50;
use crate::commit::{batch_digest, WriteError, WriteRequest};
use crate::fanout::{Changed, Listened, Start};
use crate::store::StoreError;
use hearth_core::document::Document;
use hearth_core::kv::block_on_ready;
use hearth_core::mutation::Mutation;
use hearth_core::path::DocumentName;
use hearth_core::protocol::codec::decode_client;
use hearth_core::protocol::{ClientMessage, ErrorCode, ServerMessage};
use hearth_core::query::execute::{fetch, run_aggregation};
use hearth_core::query::model::{Aggregation, Query, Source};
use hearth_core::query::validate::{validate, QueryError};
use hearth_core::value::Value;

/// Whether document `name` can belong to a query over `source` (a resume never names
/// documents of other collections).
fn in_source(source: &Source, name: &DocumentName) -> bool {
    match source {
        Source::Collection(c) => c.contains(name),
        Source::CollectionGroup(g) => name.collection_id() == g,
    }
}

impl Connection {
    /// The token expired: every listen of the connection ends with `unauthenticated`.
    pub(super) fn end_listens_on_expiry(&mut self) {
        let exp = self.auth.expires_at.unwrap_or(0);
        for target_id in self.db.fanout().end_listens(self.id) {
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
            ClientMessage::Auth { token } => match self.relay.auth().verify(&token, now_unix()) {
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
                let reply = self.get(request_id, names);
                self.reply(request_id, &reply);
            }
            ClientMessage::RunQuery { request_id, query } => {
                let reply = match self.query_with_auto_index(&query).await {
                    Ok((documents, version)) => ServerMessage::QueryResult {
                        request_id,
                        version,
                        documents,
                    },
                    Err(e) => error(request_id, 0, e.code(), e.to_string()),
                };
                self.reply(request_id, &reply);
            }
            ClientMessage::RunAggregation {
                request_id,
                query,
                aggregations,
            } => {
                let mut attempt = 0;
                let reply = loop {
                    match self.aggregate(&query, &aggregations) {
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
            } => self.write(request_id, batch_id, mutations, reads),
            ClientMessage::Listen {
                target_id,
                query,
                resume_version,
            } => {
                let mut attempt = 0;
                let mut behind = 0;
                loop {
                    let accept_ahead = behind >= BEHIND_TRIES;
                    match self.listen(target_id, &query, resume_version, accept_ahead) {
                        Ok(Listened::Started) => {
                            self.relay.metrics().listen_started(self.db.name());
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
                if self.db.fanout().unlisten(self.id, target_id) {
                    self.relay.metrics().listen_stopped(self.db.name());
                }
            }
        }
        true
    }

    fn get(&self, request_id: u64, names: Vec<DocumentName>) -> ServerMessage {
        let result = (|| -> Result<ServerMessage, String> {
            let snap = self.relay.store().snapshot().map_err(|e| e.to_string())?;
            let view = snap.database(self.db.name());
            let version = view.version().map_err(|e| e.to_string())?;
            let mut documents = Vec::with_capacity(names.len());
            for n in names {
                let d = block_on_ready(fetch(&view, &n)).map_err(|e| e.to_string())?;
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

    async fn query_with_auto_index(
        &self,
        query: &Query,
    ) -> Result<(Vec<Document>, u64), QueryError> {
        let q = validate(query)?;
        // An OR query may need several indexes: create them one by one.
        for _ in 0..8 {
            match self.relay.query_for_reply(&self.db, &q) {
                Err(e) if self.relay.auto_index(&self.db, &e).await => continue,
                other => return other,
            }
        }
        self.relay.query_for_reply(&self.db, &q)
    }

    fn aggregate(
        &self,
        query: &Query,
        aggs: &[Aggregation],
    ) -> Result<(Vec<Value>, u64), QueryError> {
        let storage = |e: StoreError| QueryError::Storage(hearth_core::kv::KvError(e.to_string()));
        let snap = self.relay.store().snapshot().map_err(storage)?;
        let view = snap.database(self.db.name());
        let version = view.version().map_err(storage)?;
        let catalog = self.db.catalog().clone();
        let values = block_on_ready(run_aggregation(&view, &catalog, query, aggs))?;
        Ok((values, version))
    }

    fn write(
        &mut self,
        request_id: u64,
        batch_id: u64,
        mutations: Vec<Mutation>,
        reads: Vec<(DocumentName, Option<u64>)>,
    ) {
        tracing::trace!(
            conn = self.id,
            request = request_id,
            batch = batch_id,
            "write received"
        );
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
        let req = WriteRequest {
            client_id: self.client_id.clone(),
            batch_id,
            digest: batch_digest(&mutations, &reads),
            mutations,
            reads,
            reply: tx,
            enqueued: Instant::now(),
        };
        if self.relay.committer().submit(self.db.name(), req).is_err() {
            self.send(&error(
                request_id,
                0,
                ErrorCode::ResourceExhausted,
                format!(
                    "too many writes in flight for database `{}` (limit {}); retry with backoff",
                    self.db.name(),
                    self.relay.config().max_inflight_writes
                ),
            ));
            return;
        }
        let out = self.out.clone();
        let metrics = self.relay.metrics().clone();
        let started = Instant::now();
        self.writes.spawn(async move {
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

    /// Starts target `target_id`. A resume reads the documents changed since the client's
    /// version at the store's latest version; when that is ahead of what the fan-out has
    /// published (a commit is on its way to it) the states would be newer than the target's
    /// first snapshot, so the listen is asked again shortly ([`Listened::Behind`]), and only
    /// after `BEHIND_TRIES` is the newer read taken (the commit's own delta follows it).
    fn listen(
        &self,
        target_id: u32,
        query: &Query,
        resume: Option<u64>,
        accept_ahead: bool,
    ) -> Result<Listened, QueryError> {
        let limit = self.relay.config().max_listens_per_connection;
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
        let q = validate(query)?;
        hearth_core::query::validate::check_listenable(&q)?;
        let source = q.source.clone();
        let relay = self.relay.clone();
        let db = self.db.clone();
        let store = self.relay.store().clone();
        let name = self.db.name().to_owned();
        self.db.fanout().listen(
            &self.out,
            target_id,
            q,
            |q| relay.query_latest(&db, q),
            move |at| match resume {
                None => Start::Fresh,
                Some(r) if r > at => {
                    // A version this relay never had: the client's state is unknown.
                    Start::Resume(None)
                }
                Some(r) => {
                    let Ok(snap) = store.snapshot() else {
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
        )
    }
}

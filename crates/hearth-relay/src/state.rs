//! The relay's shared state: the store, the committer, the databases, the metrics and the
//! authenticator, started together and shared by every connection and thread.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::auth::Authenticator;
use crate::commit::Committer;
use crate::config::Config;
use crate::databases::{Database, DatabaseError, Databases};
use crate::fanout_thread;
use crate::metrics::Metrics;
use crate::rules::{Access, Rules, SnapshotReader};
use crate::store::{DatabaseView, Store, StoreError};
use crate::supervise::{panic_message, supervised};
use hearth_core::document::Document;
use hearth_core::error::ErrorCode;
use hearth_core::index::def::IndexCatalog;
use hearth_core::kv::block_on_ready;
use hearth_core::protocol::{ServerMessage, MAX_FRAME_BYTES};
use hearth_core::query::execute::{run_aggregation, run_query, run_query_within};
use hearth_core::query::model::{Aggregation, Query};
use hearth_core::query::validate::QueryError;
use hearth_core::value::Value;

/// The most a `QueryResult` frame needs besides its documents: the type byte, then the
/// request id, version and document count as varints of at most 10 bytes each.
const QUERY_RESULT_HEADER_BYTES: usize = 1 + 3 * 10;

/// The most bytes of documents one `QueryResult` may carry (`docs/protocol.md`: one message
/// per answer, at most `MAX_FRAME_BYTES`).
pub const MAX_QUERY_RESULT_BYTES: usize = MAX_FRAME_BYTES - QUERY_RESULT_HEADER_BYTES;

/// The relay's shared state. Its parts are read through accessors: they are fixed when
/// [`Relay::start`] returns, and what changes inside them does so through their own
/// methods.
pub struct Relay {
    /// What the relay was started with.
    config: Config,
    /// The embedded store every read takes its snapshot of.
    store: Arc<Store>,
    /// The write path, one committer per store shard: every write batch and index backfill
    /// of a database goes through its shard's thread, the shard's only writer once the
    /// relay has started.
    committers: Vec<Arc<Committer>>,
    /// The process's metrics, shared with every connection and thread.
    metrics: Arc<Metrics>,
    /// Verifies the token of every `Hello` and `Auth`.
    auth: Authenticator,
    /// The databases held, and the policy for creating more.
    databases: Databases,
    /// The next connection id: unique for the process's life, it keys a connection's
    /// targets in the fan-out.
    next_conn: AtomicU64,
    /// Set once the store is open and every database is backfilled.
    ready: AtomicBool,
    /// Storage reads running at once on the blocking pool ([`Relay::blocking_read`]).
    readers: tokio::sync::Semaphore,
    /// The security rules in force (none: the relay is open).
    rules: Rules,
    /// The committer threads, joined on stop so the process never exits mid-commit.
    committer_threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

/// Why the relay could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The store could not be opened, read or backfilled.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A thread could not start, or the listener failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// The security rules file could not be read, or has errors.
    #[error(transparent)]
    Rules(#[from] crate::rules::RulesLoadError),
}

/// How many storage reads run at once: on the embedded store two per core, at least four
/// (a read mostly decodes pages the operating system has cached); over PostgreSQL, where a
/// read mostly waits for the server, one per pooled connection but the two the committer
/// and the tail use.
fn readers(config: &Config) -> usize {
    match config.postgres_url {
        Some(_) => config.postgres_pool.saturating_sub(2).max(4),
        None => std::thread::available_parallelism().map_or(4, |n| (2 * n.get()).max(4)),
    }
}

/// How many storage reads of one database run at once: half of [`readers`], so the reads
/// of one database (a tenant sending large scans or listens over and over) always leave
/// slots to the others, which wait behind at most that many of its reads.
pub(crate) fn read_slots_per_database(config: &Config) -> usize {
    (readers(config) / 2).max(1)
}

impl Relay {
    /// Opens the store, backfills indexes whose definitions changed, and starts the
    /// committer and fan-out threads.
    pub fn start(config: Config, auth: Authenticator) -> Result<Arc<Relay>, RelayError> {
        let rules = match &config.rules_file {
            Some(file) => Rules::load(file, config.explain_denials)?,
            None => Rules::open(),
        };
        let store = Arc::new(match &config.postgres_url {
            Some(url) => Store::postgres(url, config.postgres_pool, &config.postgres_tls)?,
            None => Store::open_with(&config.data_dir, config.cache_bytes, config.store_shards)?,
        });
        tracing::info!(store = %store.describe(), "store open");
        let committers: Vec<Arc<Committer>> = (0..store.shard_count())
            .map(|shard| {
                Committer::new(
                    shard,
                    config.max_inflight_writes,
                    config.max_inflight_write_bytes,
                )
            })
            .collect();
        let metrics = Arc::new(Metrics::new());
        let read_slots = readers(&config);
        let databases = Databases::open(&store, &committers, &config, &metrics)?;
        let relay = Arc::new(Relay {
            config,
            store: store.clone(),
            committers: committers.clone(),
            metrics,
            auth,
            databases,
            next_conn: AtomicU64::new(1),
            ready: AtomicBool::new(false),
            readers: tokio::sync::Semaphore::new(read_slots),
            rules,
            committer_threads: Mutex::new(Vec::new()),
        });
        let shared = relay.config.postgres_url.is_some();
        let (sink, rounds, tail) = fanout_thread::channel(Arc::downgrade(&relay), shared);
        let sink = Arc::new(sink);
        for (shard, committer) in committers.into_iter().enumerate() {
            let (store, sink) = (store.clone(), sink.clone());
            let handle = std::thread::Builder::new()
                .name(format!("hearth-committer-{shard}"))
                .spawn(move || supervised("committer", || committer.run(&store, &*sink)))?;
            relay
                .committer_threads
                .lock()
                .expect("thread lock")
                .push(handle);
        }
        fanout_thread::spawn(Arc::downgrade(&relay), rounds)?;
        if let Some(inlet) = tail {
            let config = &relay.config;
            crate::tail::spawn(&relay, inlet, config.postgres_poll, config.postgres_listen)?;
        }
        relay.ready.store(true, Ordering::Release);
        Ok(relay)
    }

    /// Stops the committers after they drain their queues, and waits for them.
    pub fn stop(&self) {
        for c in &self.committers {
            c.stop();
        }
        let handles = std::mem::take(&mut *self.committer_threads.lock().expect("thread lock"));
        for h in handles {
            let _ = h.join();
        }
    }

    /// What the relay was started with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The embedded store.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The committer of database `db`'s shard: where its write batches and backfill jobs
    /// go.
    pub fn committer(&self, db: &str) -> &Arc<Committer> {
        &self.committers[self.store.shard_index(db)]
    }

    /// Every shard's committer, in shard order.
    pub fn committers(&self) -> &[Arc<Committer>] {
        &self.committers
    }

    /// The security rules.
    pub fn rules(&self) -> &Rules {
        &self.rules
    }

    /// Checks that the rules let `access`'s caller list `q` on database `db` (a query, an
    /// aggregation or a listen): the rules' own reads see the latest committed state.
    /// Nothing to check without `access` (an open relay, a service token).
    pub fn check_list(
        &self,
        access: Option<&Access>,
        db: &Database,
        q: &Query,
    ) -> Result<(), QueryError> {
        let Some(access) = access else {
            return Ok(());
        };
        let snap = self.store.snapshot(db.name()).map_err(storage)?;
        let view = snap.database(db.name());
        access
            .check_list(db.name(), q, &SnapshotReader { view: &view })
            .map_err(QueryError::PermissionDenied)
    }

    /// After the rules changed: proves every listen under rules again with the rules now
    /// in force (each with its caller's identity), ending with `permission-denied` those
    /// they no longer allow; the others decide with the new rules from now on. Returns the
    /// number of listens ended.
    pub fn reprove_listens(&self) -> usize {
        let Some(rules) = self.rules.current() else {
            return 0;
        };
        let mut ended = 0;
        for db in self.databases.all() {
            let fanout = db.fanout();
            for (target_id, out, guard) in fanout.guarded() {
                match guard.reproved(&rules) {
                    Ok(renewed) => {
                        fanout.set_guard(out.conn(), target_id, Some(renewed));
                    }
                    Err(denial) => {
                        if fanout.unlisten(out.conn(), target_id) {
                            ended += 1;
                            self.metrics.listen_stopped(db.name());
                            out.send_message(&ServerMessage::Error {
                                request_id: 0,
                                target_id,
                                code: ErrorCode::PermissionDenied,
                                message: denial,
                            });
                        }
                    }
                }
            }
        }
        ended
    }

    /// The process's metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The token verifier.
    pub fn auth(&self) -> &Authenticator {
        &self.auth
    }

    /// Whether the store is open and every database backfilled (`/healthz`).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// A connection id no other connection of this process has.
    pub fn next_connection_id(&self) -> u64 {
        self.next_conn.fetch_add(1, Ordering::Relaxed)
    }

    /// The database `name` if the relay holds it (never creates one).
    pub(crate) fn database_if_open(&self, name: &str) -> Option<Arc<Database>> {
        self.databases.get(name)
    }

    /// The database `name` for a connection: one the relay holds, or a new one when the
    /// configuration lets clients create databases (no `--databases` list, fewer than
    /// `--max-databases`).
    pub fn database(&self, name: &str) -> Result<Arc<Database>, DatabaseError> {
        self.databases
            .get_or_create(name, &self.store, &self.committers, &self.config)
    }

    /// Runs `read` (a storage read of database `db`: its snapshot, scans and decoding) on
    /// the blocking pool, never on a runtime worker, with at most [`Relay::readers`] reads
    /// at once and half of them of one database, each served in arrival order. A panic in
    /// it ends only this read: `Err` with its message.
    pub async fn blocking_read<T: Send + 'static>(
        self: &Arc<Self>,
        db: &Database,
        read: impl FnOnce(&Relay) -> T + Send + 'static,
    ) -> Result<T, String> {
        let closed = |_| "the relay is shutting down".to_owned();
        let _mine = db.read_slots().acquire().await.map_err(closed)?;
        let _permit = self.readers.acquire().await.map_err(closed)?;
        let relay = self.clone();
        tokio::task::spawn_blocking(move || read(&relay))
            .await
            .map_err(|e| match e.try_into_panic() {
                Ok(p) => {
                    let what = panic_message(p.as_ref());
                    tracing::error!(panic = %what, "a read panicked");
                    format!("internal error while reading: {what}")
                }
                Err(_) => "the read was cancelled".to_owned(),
            })
    }

    /// Runs `read`, a small read of database `db` (a few point reads): over the embedded
    /// store in place, on the connection's runtime worker, since it takes microseconds and
    /// the hop to the blocking pool and its queues would cost more than the read (each
    /// connection still reads one request at a time); over PostgreSQL, where a read waits
    /// for the server, as [`Relay::blocking_read`]. A panic in it ends only this read.
    pub async fn small_read<T: Send + 'static>(
        self: &Arc<Self>,
        db: &Database,
        read: impl FnOnce(&Relay) -> T + Send + 'static,
    ) -> Result<T, String> {
        if self.config.postgres_url.is_some() {
            return self.blocking_read(db, read).await;
        }
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| read(self))).map_err(|p| {
            let what = panic_message(p.as_ref());
            tracing::error!(panic = %what, "a read panicked");
            format!("internal error while reading: {what}")
        })
    }

    /// Runs a one-time query on the latest committed state for a `QueryResult`: (documents,
    /// version), or `resource-exhausted` as soon as the documents read would not fit in the
    /// reply ([`MAX_QUERY_RESULT_BYTES`]), before the rest of the result is read.
    pub fn query_for_reply(
        &self,
        access: Option<&Access>,
        db: &Database,
        q: &Query,
    ) -> Result<(Vec<Document>, u64), QueryError> {
        self.read_latest(db, access, q, |view, catalog| {
            block_on_ready(run_query_within(view, catalog, q, MAX_QUERY_RESULT_BYTES))
        })
    }

    /// Runs a query on the latest committed state: (documents, version).
    pub fn query_latest(
        &self,
        db: &Database,
        q: &Query,
    ) -> Result<(Vec<Document>, u64), QueryError> {
        self.read_latest(db, None, q, |view, catalog| {
            block_on_ready(run_query(view, catalog, q))
        })
    }

    /// Runs aggregations over `q` on the latest committed state: (values, version).
    pub fn aggregate_latest(
        &self,
        access: Option<&Access>,
        db: &Database,
        q: &Query,
        aggs: &[Aggregation],
    ) -> Result<(Vec<Value>, u64), QueryError> {
        self.read_latest(db, access, q, |view, catalog| {
            block_on_ready(run_aggregation(view, catalog, q, aggs))
        })
    }

    /// Runs `read` over database `db` at the latest committed state, its scans bounded by
    /// `--max-scan-rows`: its result and the version read. With `access`, the rules first
    /// prove the list `q` allowed, their `get()`s reading the same snapshot.
    fn read_latest<T>(
        &self,
        db: &Database,
        access: Option<&Access>,
        q: &Query,
        read: impl FnOnce(&DatabaseView, &IndexCatalog) -> Result<T, QueryError>,
    ) -> Result<(T, u64), QueryError> {
        let snap = self.store.snapshot(db.name()).map_err(storage)?;
        let view = snap
            .database(db.name())
            .with_budget(self.config.max_scan_rows);
        if let Some(access) = access {
            access
                .check_list(db.name(), q, &SnapshotReader { view: &view })
                .map_err(QueryError::PermissionDenied)?;
        }
        let head = view.head().map_err(storage)?;
        // Planned with the definitions of this snapshot's catalog generation.
        let catalog = db
            .catalog_at(head.catalog, || view.planned_catalog(head.catalog))
            .map_err(storage)?;
        let result = read(&view, &catalog);
        Ok((self.within_budget(&view, result)?, head.version))
    }

    /// `result`, or `resource-exhausted` when it failed for passing the scan budget.
    fn within_budget<T>(
        &self,
        view: &DatabaseView,
        result: Result<T, QueryError>,
    ) -> Result<T, QueryError> {
        result.map_err(|e| {
            if view.exhausted() {
                QueryError::ResourceExhausted(format!(
                    "the request read more than {} index entries and documents, the relay's \
                     limit (--max-scan-rows): narrow it with filters, a limit or an index \
                     that serves it",
                    self.config.max_scan_rows
                ))
            } else {
                e
            }
        })
    }
}

/// A store failure as a query error.
fn storage(e: StoreError) -> QueryError {
    QueryError::Storage(hearth_core::kv::KvError(e.to_string()))
}

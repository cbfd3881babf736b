//! `hearth-relay`: the authoritative server. It holds every database's documents and indexes
//! in the embedded [`store`], commits write batches through the group-committing
//! [`commit`] thread, and pushes real-time query deltas through the per-database [`fanout`]
//! to WebSocket connections ([`conn`]).
//!
//! ```text
//! socket ─► conn (decode, auth, dispatch) ─┬─ reads: store snapshot + core executor
//!                                          ├─ writes: commit queue ─► committer thread ─► redb
//!                                          └─ listens: fanout ◄── fan-out thread ◄───┘
//! frames ─► outbound (in place; backlog + flusher task when the socket is full) ─► socket
//! ```

pub mod auth;
pub mod commit;
pub mod conn;
pub mod fanout;
pub mod metrics;
pub mod outbound;
pub mod store;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};

use self::auth::Authenticator;
use self::commit::{register_database, CommitSink, Committed, Committer};
use self::fanout::Fanout;
use self::metrics::Metrics;
use self::store::{Store, StoreError};
use hearth_core::index::config::IndexFile;
use hearth_core::index::def::{IndexCatalog, IndexDef};
use hearth_core::kv::block_on_ready;
use hearth_core::query::execute::run_query;
use hearth_core::query::model::Query;
use hearth_core::query::validate::QueryError;

/// Everything the relay is configured with.
#[derive(Clone, Debug)]
pub struct Config {
    /// Directory of the embedded store.
    pub data_dir: PathBuf,
    /// Index definitions every database uses.
    pub indexes: IndexFile,
    /// Create a missing composite index on first use instead of refusing the query.
    pub auto_index: bool,
    /// Idle connections get a heartbeat this often.
    pub heartbeat: Duration,
    /// How long committed changes stay in the changelog (the resume window).
    pub changelog_retention: Duration,
    /// Most write batches queued per database before new ones are refused.
    pub max_inflight_writes: usize,
    /// Most bytes queued to one connection before it is dropped as a slow consumer.
    pub max_outbound_bytes: usize,
    /// Most concurrent connections.
    pub max_connections: usize,
    /// A directory served over plain HTTP at `/` (the demo app and the built package).
    pub static_dir: Option<PathBuf>,
    /// The only databases served (created at start when missing); `None`: any valid name,
    /// created on its first connection, up to `max_databases`.
    pub databases: Option<Vec<String>>,
    /// Most databases this relay holds when they are created on first use.
    pub max_databases: usize,
}

impl Config {
    /// Defaults for `data_dir` (tests and the benchmark start from these).
    pub fn new(data_dir: PathBuf) -> Config {
        Config {
            data_dir,
            indexes: IndexFile::default(),
            auto_index: false,
            heartbeat: Duration::from_secs(5),
            changelog_retention: Duration::from_secs(3600),
            max_inflight_writes: 10_000,
            max_outbound_bytes: 32 << 20,
            max_connections: 19_000,
            static_dir: None,
            databases: None,
            max_databases: 1000,
        }
    }
}

/// One database (tenant).
pub struct Database {
    pub name: String,
    pub fanout: Fanout,
    pub catalog: RwLock<IndexCatalog>,
}

/// The relay's shared state.
pub struct Relay {
    pub config: Config,
    pub store: Arc<Store>,
    pub committer: Arc<Committer>,
    pub metrics: Arc<Metrics>,
    pub auth: Authenticator,
    databases: Mutex<HashMap<String, Arc<Database>>>,
    next_conn: AtomicU64,
    /// Set once the store is open and every database is backfilled.
    pub ready: AtomicBool,
    /// The committer thread, joined on stop so the process never exits mid-commit.
    committer_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// Why a connection cannot use a database.
#[derive(Debug, thiserror::Error)]
pub enum DatabaseError {
    #[error("database `{name}` is not served by this relay (it serves: {served})")]
    NotServed { name: String, served: String },
    #[error("database `{name}` does not exist, and this relay already holds its maximum of {max} databases (--max-databases)")]
    TooMany { name: String, max: usize },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why the relay could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

struct Sink {
    relay: std::sync::Weak<Relay>,
    fanout_tx: std::sync::mpsc::Sender<(Vec<Committed>, Instant)>,
}

/// Rounds of commits on their way to the fan-out thread.
type Rounds = std::sync::mpsc::Receiver<(Vec<Committed>, Instant)>;

impl CommitSink for Sink {
    fn committed(&self, round: Vec<Committed>, batches: usize, fsync: Duration) {
        if let Some(relay) = self.relay.upgrade() {
            relay
                .metrics
                .group_commit(batches as u64, fsync.as_secs_f64());
            let mut per_db: HashMap<&str, u64> = HashMap::new();
            for c in &round {
                *per_db.entry(&c.database).or_default() += 1;
            }
            for (db, n) in per_db {
                relay.metrics.commits(db, n);
            }
        }
        let _ = self.fanout_tx.send((round, Instant::now()));
    }

    fn queue_depth(&self, db: &str, depth: usize) {
        if let Some(relay) = self.relay.upgrade() {
            relay.metrics.queue_depth(db, depth as u64);
        }
    }
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
    stash: &mut VecDeque<(Vec<Committed>, Instant)>,
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

impl Relay {
    /// Opens the store, backfills indexes whose definitions changed, and starts the
    /// committer and fan-out threads.
    pub fn start(config: Config, auth: Authenticator) -> Result<Arc<Relay>, RelayError> {
        let store = Arc::new(Store::open(&config.data_dir)?);
        let committer = Committer::new(config.max_inflight_writes);
        let metrics = Arc::new(Metrics::new());
        let relay = Arc::new(Relay {
            config,
            store: store.clone(),
            committer: committer.clone(),
            metrics,
            auth,
            databases: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(1),
            ready: AtomicBool::new(false),
            committer_thread: Mutex::new(None),
        });
        let base = IndexCatalog::from_file(&relay.config.indexes);
        for (name, version) in store.databases()? {
            let stored = store.stored_indexes(&name)?;
            let old = stored.as_ref().map(IndexCatalog::from_file);
            if stored.as_ref() != Some(base.file()) {
                let old = old.unwrap_or_default();
                tracing::info!(database = %name, "index definitions changed: backfilling");
                let m = relay.metrics.clone();
                let db = name.clone();
                store.backfill(&name, &old, &base, 1000, |done, total| {
                    m.backfill(&db, done, total);
                    tracing::info!(database = %db, done, total, "backfill progress");
                })?;
            }
            register_database(&store, &committer, &name, base.clone(), version)?;
            relay.databases.lock().expect("databases lock").insert(
                name.clone(),
                Arc::new(Database {
                    name,
                    fanout: Fanout::new(version),
                    catalog: RwLock::new(base.clone()),
                }),
            );
        }
        if let Some(names) = &relay.config.databases {
            let mut dbs = relay.databases.lock().expect("databases lock");
            for name in names {
                if !dbs.contains_key(name) {
                    Self::create_database(&store, &committer, &relay.config, &mut dbs, name)?;
                }
            }
        }
        let (fanout_tx, fanout_rx) = std::sync::mpsc::channel::<(Vec<Committed>, Instant)>();
        let sink = Sink {
            relay: Arc::downgrade(&relay),
            fanout_tx,
        };
        {
            let committer = committer.clone();
            let store = store.clone();
            let handle = std::thread::Builder::new()
                .name("hearth-committer".into())
                .spawn(move || committer.run(&store, &sink))?;
            *relay.committer_thread.lock().expect("thread lock") = Some(handle);
        }
        {
            // The fan-out has a thread of its own, one round at a time: it writes every
            // listener's frames to its socket in place, which would hold up a runtime worker.
            let weak = Arc::downgrade(&relay);
            std::thread::Builder::new()
                .name("hearth-fanout".into())
                .spawn(move || {
                    // Rounds taken early by a catch-up (see `Fanout::publish`).
                    let mut stash = VecDeque::new();
                    loop {
                        let next = match stash.pop_front() {
                            Some(r) => r,
                            None => match fanout_rx.recv() {
                                Ok(r) => r,
                                Err(_) => return,
                            },
                        };
                        let Some(relay) = weak.upgrade() else { return };
                        relay.fan_out(next, &fanout_rx, &mut stash);
                    }
                })?;
        }
        relay.ready.store(true, Ordering::Release);
        Ok(relay)
    }

    fn fan_out(
        &self,
        (round, committed_at): (Vec<Committed>, Instant),
        rounds: &Rounds,
        stash: &mut VecDeque<(Vec<Committed>, Instant)>,
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
            let Some(db) = self.database_if_open(&name) else {
                continue;
            };
            let requery = |q: &Query| self.query_latest(&db, q);
            let mut more = |upto| take_commits(&name, upto, rounds, stash);
            frames += db.fanout.publish(&commits, &requery, &mut more);
        }
        self.metrics.frames_sent(frames as u64);
        self.metrics
            .fanout_latency(committed_at.elapsed().as_secs_f64());
    }

    /// Stops the committer after it drains its queue, and waits for it.
    pub fn stop(&self) {
        self.committer.stop();
        let handle = self.committer_thread.lock().expect("thread lock").take();
        if let Some(h) = handle {
            let _ = h.join();
        }
    }

    pub fn next_connection_id(&self) -> u64 {
        self.next_conn.fetch_add(1, Ordering::Relaxed)
    }

    fn database_if_open(&self, name: &str) -> Option<Arc<Database>> {
        self.databases
            .lock()
            .expect("databases lock")
            .get(name)
            .cloned()
    }

    /// The database `name` for a connection: one the relay holds, or a new one when the
    /// configuration lets clients create databases (no `--databases` list, fewer than
    /// `--max-databases`).
    pub fn database(&self, name: &str) -> Result<Arc<Database>, DatabaseError> {
        let mut dbs = self.databases.lock().expect("databases lock");
        if let Some(db) = dbs.get(name) {
            return Ok(db.clone());
        }
        // Listed databases were all created at start.
        if let Some(allowed) = &self.config.databases {
            return Err(DatabaseError::NotServed {
                name: name.to_owned(),
                served: allowed.join(", "),
            });
        }
        if dbs.len() >= self.config.max_databases {
            return Err(DatabaseError::TooMany {
                name: name.to_owned(),
                max: self.config.max_databases,
            });
        }
        Self::create_database(&self.store, &self.committer, &self.config, &mut dbs, name)
            .map_err(DatabaseError::Store)
    }

    fn create_database(
        store: &Store,
        committer: &Committer,
        config: &Config,
        dbs: &mut HashMap<String, Arc<Database>>,
        name: &str,
    ) -> Result<Arc<Database>, StoreError> {
        let catalog = IndexCatalog::from_file(&config.indexes);
        register_database(store, committer, name, catalog.clone(), 0)?;
        let db = Arc::new(Database {
            name: name.to_owned(),
            fanout: Fanout::new(0),
            catalog: RwLock::new(catalog),
        });
        dbs.insert(name.to_owned(), db.clone());
        tracing::info!(database = %name, "database created");
        Ok(db)
    }

    /// Runs a query on the latest committed state: (documents, version).
    pub fn query_latest(
        &self,
        db: &Database,
        q: &Query,
    ) -> Result<(Vec<Document>, u64), QueryError> {
        let snap = self
            .store
            .snapshot()
            .map_err(|e| QueryError::Storage(hearth_core::kv::KvError(e.to_string())))?;
        let view = snap.database(&db.name);
        let version = view
            .version()
            .map_err(|e| QueryError::Storage(hearth_core::kv::KvError(e.to_string())))?;
        let catalog = db.catalog.read().expect("catalog lock").clone();
        let docs = block_on_ready(run_query(&view, &catalog, q))?;
        Ok((docs, version))
    }

    /// With `--auto-index`, creates the index a `MissingIndex` error names (backfilled from
    /// the collection group's documents) and returns true; the caller retries the query.
    pub async fn auto_index(&self, db: &Database, err: &QueryError) -> bool {
        let QueryError::MissingIndex { index, .. } = err else {
            return false;
        };
        if !self.config.auto_index {
            return false;
        }
        let def = IndexDef::from_spec(index);
        let old = db.catalog.read().expect("catalog lock").clone();
        let mut new = old.clone();
        if !new.add_composite(def) {
            // Another request created it meanwhile.
            return true;
        }
        tracing::warn!(
            database = %db.name,
            "creating a missing index (--auto-index); add it to firestore.indexes.json:\n{}",
            index.to_json_entry()
        );
        // The backfill runs on the committer thread between rounds, so no commit interleaves
        // with it; queries see the index only once its entries are complete.
        let (tx, rx) = oneshot::channel();
        let name = db.name.clone();
        let metrics = self.metrics.clone();
        let committer = self.committer.clone();
        let job_new = new.clone();
        self.committer.run_job(Box::new(move |store: &Store| {
            let res = store.backfill(&name, &old, &job_new, 1000, |done, total| {
                metrics.backfill(&name, done, total);
            });
            if res.is_ok() {
                if let Some(s) = committer
                    .dbs
                    .lock()
                    .expect("committer db lock")
                    .get_mut(&name)
                {
                    s.catalog = job_new;
                }
            }
            let _ = tx.send(res);
        }));
        match rx.await {
            Ok(Ok(())) => {
                let mut cat = db.catalog.write().expect("catalog lock");
                if cat.composites().len() < new.composites().len() {
                    *cat = new;
                }
                true
            }
            Ok(Err(e)) => {
                tracing::error!(database = %db.name, error = %e, "index backfill failed");
                false
            }
            Err(_) => false,
        }
    }
}

use hearth_core::document::Document;

/// Serves the relay on `listener` until `shutdown` resolves, then drains: stops accepting,
/// lets in-flight commits finish and be acknowledged, and closes every socket cleanly.
pub async fn run(
    relay: Arc<Relay>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), RelayError> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let max = relay.config.max_connections;
    let slots = Arc::new(tokio::sync::Semaphore::new(max));
    let app = conn::router(relay.clone(), stop_rx.clone(), slots.clone());
    let addr: SocketAddr = listener.local_addr()?;
    tracing::info!(%addr, "hearth-relay listening");
    let prune_relay = relay.clone();
    let pruner = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(30));
        loop {
            tick.tick().await;
            let r = prune_relay.clone();
            let retention = r.config.changelog_retention;
            r.committer.run_job(Box::new(move |store: &Store| {
                if let Err(e) = commit::prune(store, retention) {
                    tracing::warn!(error = %e, "changelog pruning failed");
                }
            }));
        }
    });
    // Each connection is served by hyper's HTTP/1 server directly (not axum::serve), so an
    // upgraded WebSocket gets its bare TCP socket back (conn.rs writes frames in place).
    let mut http = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, say: wait for some to be freed.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        // Small replies must not wait for the peer's delayed ACK (Nagle).
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
        let app = app.clone();
        let mut stop = stop_rx.clone();
        http.spawn(async move {
            let svc = hyper_util::service::TowerToHyperService::new(app);
            let svc = hyper::service::service_fn(move |mut req: hyper::Request<_>| {
                req.extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                hyper::service::Service::call(&svc, req)
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(30))
                .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                .with_upgrades();
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => if let Err(e) = r {
                    tracing::debug!(%peer, error = %e, "HTTP connection ended");
                },
                _ = async { stop.wait_for(|s| *s).await.is_ok() } => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
        while http.try_join_next().is_some() {}
    }
    // New connections are refused from here on.
    drop(listener);
    tracing::info!("shutting down: draining connections");
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(30), async {
        while http.join_next().await.is_some() {}
    })
    .await;
    pruner.abort();
    // Upgraded WebSocket connections left the HTTP server: wait until each has answered its
    // in-flight writes and closed (every connection permit is back), for at most 30 s.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while slots.available_permits() < max && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = relay.clone();
    tokio::task::spawn_blocking(move || r.stop()).await.ok();
    tracing::info!("hearth-relay stopped");
    Ok(())
}

//! The PostgreSQL backend: several relays share one PostgreSQL database as their store.
//!
//! ```text
//! table              key (bytea, or text COLLATE "C")        value
//! hearth_documents   db · document_key(name)                  encoded document
//! hearth_index       db · index entry key                     (empty)
//! hearth_changelog   db · version(u64 BE)                     commit time µs · names
//! hearth_batches     db · string(client_id) · batch_id        idempotency record
//! hearth_meta        "indexes/<db>", "building/<db>"          index file JSON
//! hearth_heads       db (text)                                version bigint, commit_micros bigint,
//!                                                             catalog bigint (migration 2)
//! hearth_migrations  version int                              applied_at
//! ```
//! Keys are Hearth's order-preserving encodings, so `bytea` order (bytewise) is Hearth's key
//! order and a plan's range scan is `WHERE key >= $1 AND key < $2 ORDER BY key LIMIT $3`:
//! the query engine stays Hearth's own, never translated to SQL.
//!
//! A write transaction is `READ COMMITTED` with `synchronous_commit = on` (when durable). A
//! group commit locks each database's head row first (`SELECT ... FOR UPDATE`), so commits
//! to one database are serialized across relays before any precondition is checked; it
//! buffers its writes (reads see them), sends them as a few array statements at the end,
//! updates the heads last and commits: a rollback leaves no gap, and every snapshot
//! (`REPEATABLE READ READ ONLY`) sees a prefix of each database's changelog. A transaction
//! that fails to serialize (`40001`, `40P01`) is run again. After a commit, in a statement
//! of its own, `pg_notify('hearth', '<version>:<db>')` tells the other relays
//! ([`Backend::watch`]).
//!
//! The relay's code is synchronous where it touches the store (committer and fan-out
//! threads, blocking reads); this backend runs the PostgreSQL client on a small runtime of
//! its own and waits for each call's answer on a channel, which works from any thread,
//! never longer than a deadline; connections are opened with keepalives and server-side
//! timeouts, and one whose call did not finish is closed, not pooled (`pg_conn.rs`).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_postgres::config::SslMode;
use tokio_postgres::error::SqlState;
use tokio_postgres::NoTls;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::pg_conn::{bound, pg_err, PgConn, Shared, CALL_DEADLINE, POLL_DEADLINE};
use super::pg_write::{read_ahead, Ahead, PgWrite};
use super::txn::{Backend, Head, ReadTxn, Rows, Tab, Watcher, WriteFn};
use super::StoreError;

/// The schema's migrations, in order: migration `i + 1` is `MIGRATIONS[i]`. Applied once
/// each, at start, under an advisory lock (`docs/formats.md`).
const MIGRATIONS: &[&str] = &[
    "
    CREATE TABLE hearth_heads (db text COLLATE \"C\" PRIMARY KEY, version bigint NOT NULL,
                               commit_micros bigint NOT NULL);
    CREATE TABLE hearth_documents (key bytea PRIMARY KEY, value bytea NOT NULL);
    CREATE TABLE hearth_index (key bytea PRIMARY KEY, value bytea NOT NULL);
    CREATE TABLE hearth_changelog (key bytea PRIMARY KEY, value bytea NOT NULL);
    CREATE TABLE hearth_batches (key bytea PRIMARY KEY, value bytea NOT NULL);
    CREATE TABLE hearth_meta (key text COLLATE \"C\" PRIMARY KEY, value bytea NOT NULL);
",
    "
    ALTER TABLE hearth_heads ADD COLUMN catalog bigint NOT NULL DEFAULT 0;
",
];

/// The advisory lock taken while migrating ("hearth" in ASCII).
const MIGRATION_LOCK: i64 = 0x6865_6172_7468;

/// The notification channel.
pub const CHANNEL: &str = "hearth";

/// Times a transaction that failed to serialize is run again before the error is returned.
const RETRIES: usize = 20;

/// The head in columns `at..at + 3` (version, commit_micros, catalog) of `row`.
pub(super) fn head_of(row: &tokio_postgres::Row, at: usize) -> Head {
    Head {
        version: row.get::<_, i64>(at) as u64,
        micros: row.get(at + 1),
        catalog: row.get::<_, i64>(at + 2) as u64,
    }
}

/// The table of `t`.
pub(super) fn table(t: Tab) -> &'static str {
    match t {
        Tab::Documents => "hearth_documents",
        Tab::Index => "hearth_index",
        Tab::Changelog => "hearth_changelog",
        Tab::Batches => "hearth_batches",
    }
}

/// Every byte-keyed table, in [`Tab`] order.
pub(super) const TABS: [Tab; 4] = [Tab::Documents, Tab::Index, Tab::Changelog, Tab::Batches];

/// Whether `e` is a failure to serialize, which running the transaction again resolves.
fn retryable(e: &tokio_postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED
    )
}

/// A client error as a store error, with the server's message when it sent one:
/// [`StoreError::Serialization`] when running the transaction again resolves it.
pub(super) fn sql_err(e: tokio_postgres::Error) -> StoreError {
    let text = match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => e.to_string(),
    };
    match retryable(&e) {
        true => StoreError::Serialization(text),
        false => StoreError::Postgres(text),
    }
}

/// A failure inside a write transaction: retryable or not.
enum TxnError {
    Retry(String),
    Fail(StoreError),
}

/// A store in a PostgreSQL database, shared by every relay that names it.
pub(super) struct Postgres {
    shared: Arc<Shared>,
}

/// `url` without its password, for logs.
fn shown(config: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(s) => s.clone(),
            tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
        })
        .collect();
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "postgresql://{}@{}:{port}/{}",
        config.get_user().unwrap_or(""),
        hosts.join(","),
        config.get_dbname().unwrap_or("")
    )
}

impl Postgres {
    /// Connects to `url` (a `postgresql://` URL or `key=value` settings) with at most
    /// `pool_size` pooled connections, and creates or migrates the schema.
    pub(super) fn connect(
        url: &str,
        pool_size: usize,
        tls: &PgTls,
    ) -> Result<Postgres, StoreError> {
        let mut config: tokio_postgres::Config = url
            .parse()
            .map_err(|e| StoreError::Postgres(format!("bad PostgreSQL URL: {e}")))?;
        bound(&mut config);
        let tls = match (&tls.ca, &tls.client) {
            (Some(ca), client) => Some(tls_connector(ca, client.as_ref())?),
            (None, Some(_)) => {
                return Err(StoreError::Postgres(
                    "a client certificate (--postgres-cert) is sent over TLS: give the \
                     certificate authority of the server's certificate with --postgres-ca"
                        .into(),
                ))
            }
            (None, None) => None,
        };
        if tls.is_none() && config.get_ssl_mode() == SslMode::Require {
            return Err(StoreError::Postgres(
                "the URL asks for TLS (sslmode=require): give the certificate authority that \
                 signed the server's certificate with --postgres-ca"
                    .into(),
            ));
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("hearth-pg")
            .enable_all()
            .build()
            .map_err(pg_err)?;
        let manager_config = ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        };
        let manager = match &tls {
            Some(tls) => Manager::from_config(config.clone(), tls.clone(), manager_config),
            None => Manager::from_config(config.clone(), NoTls, manager_config),
        };
        let pool = Pool::builder(manager)
            .max_size(pool_size.max(2))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(CALL_DEADLINE))
            .create_timeout(Some(CALL_DEADLINE))
            .build()
            .map_err(pg_err)?;
        let shared = Arc::new(Shared {
            runtime: Some(runtime),
            pool,
            shown: shown(&config),
            config,
            tls,
            relisten: Default::default(),
        });
        let conn = shared.connection()?;
        // Waits as long as another relay's migration or this one takes.
        shared.wait_within(None, migrate(conn))??;
        Ok(Postgres { shared })
    }
}

/// The TLS files of PostgreSQL connections (no authority: no TLS).
#[derive(Clone, Debug, Default)]
pub struct PgTls {
    /// PEM file of the certificate authorities that sign the server's certificate
    /// (`--postgres-ca`).
    pub ca: Option<PathBuf>,
    /// PEM files of the relay's client certificate (its chain) and of its private key
    /// (`--postgres-cert`, `--postgres-key`), for a server that authenticates clients by
    /// certificate.
    pub client: Option<(PathBuf, PathBuf)>,
}

/// A TLS connector that trusts the certificate authorities of PEM file `ca` (and no
/// others): the server's certificate must be signed by one and name the host connected to.
/// With `client`, it presents that certificate and key when the server asks for one.
fn tls_connector(
    ca: &Path,
    client: Option<&(PathBuf, PathBuf)>,
) -> Result<MakeRustlsConnect, StoreError> {
    let bad = |flag: &str, file: &Path, e: &dyn std::fmt::Display| {
        StoreError::Postgres(format!("{flag} {}: {e}", file.display()))
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| bad("--postgres-ca", ca, &e))? {
        let cert = cert.map_err(|e| bad("--postgres-ca", ca, &e))?;
        roots.add(cert).map_err(|e| bad("--postgres-ca", ca, &e))?;
    }
    if roots.is_empty() {
        return Err(bad("--postgres-ca", ca, &"no certificate in it"));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad("--postgres-ca", ca, &e))?
        .with_root_certificates(roots);
    let config = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
                .map_err(|e| bad("--postgres-cert", cert, &e))?
                .collect::<Result<_, _>>()
                .map_err(|e| bad("--postgres-cert", cert, &e))?;
            if chain.is_empty() {
                return Err(bad("--postgres-cert", cert, &"no certificate in it"));
            }
            let key =
                PrivateKeyDer::from_pem_file(key).map_err(|e| bad("--postgres-key", key, &e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| bad("--postgres-cert", cert, &e))?
        }
    };
    Ok(MakeRustlsConnect::new(config))
}

/// Applies the migrations the database lacks, under an advisory lock so that relays
/// starting together migrate once.
async fn migrate(conn: Arc<PgConn>) -> Result<(), StoreError> {
    conn.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(sql_err)?;
    let result = async {
        conn.batch_execute(
            "CREATE TABLE IF NOT EXISTS hearth_migrations (version int PRIMARY KEY, \
             applied_at timestamptz NOT NULL DEFAULT now())",
        )
        .await
        .map_err(sql_err)?;
        let row = conn
            .query_one(
                "SELECT coalesce(max(version), 0) FROM hearth_migrations",
                &[],
            )
            .await
            .map_err(sql_err)?;
        let at: i32 = row.get(0);
        if at as usize > MIGRATIONS.len() {
            return Err(StoreError::Postgres(format!(
                "the database's schema is at version {at}, newer than this relay knows ({})",
                MIGRATIONS.len()
            )));
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(at as usize) {
            let version = i as i32 + 1;
            tracing::info!(version, "migrating the PostgreSQL schema");
            conn.batch_execute(&format!(
                "BEGIN; {sql}; INSERT INTO hearth_migrations (version) VALUES ({version}); COMMIT"
            ))
            .await
            .map_err(sql_err)?;
        }
        Ok(())
    }
    .await;
    if result.is_err() {
        let _ = conn.batch_execute("ROLLBACK").await;
    }
    let unlocked = conn
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await;
    result?;
    unlocked.map_err(sql_err)?;
    Ok(())
}

/// Reads through one connection: a snapshot's, or a write transaction's.
pub(super) struct Reader {
    shared: Arc<Shared>,
    conn: Arc<PgConn>,
    /// A snapshot's `BEGIN`, not sent yet: it goes with the first query, in the same
    /// round trip (the client pipelines requests made together).
    begin: std::sync::Mutex<Option<&'static str>>,
}

impl Reader {
    fn new(shared: Arc<Shared>, conn: Arc<PgConn>, begin: Option<&'static str>) -> Reader {
        Reader {
            shared,
            conn,
            begin: std::sync::Mutex::new(begin),
        }
    }

    /// Runs `query` on the connection, after the pending `BEGIN` if there is one.
    pub(super) fn run<T: Send + 'static, F>(
        &self,
        query: impl FnOnce(Arc<PgConn>) -> F + Send + 'static,
    ) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let begin = self.begin.lock().expect("begin lock").take();
        self.shared.call(&self.conn, move |conn| async move {
            match begin {
                None => query(conn).await,
                Some(sql) => {
                    let c = conn.clone();
                    let (began, result) = tokio::join!(c.batch_execute(sql), query(conn));
                    began.map_err(sql_err)?;
                    result
                }
            }
        })
    }

    /// Whether a call on the connection did not finish: nothing more is sent on it.
    pub(super) fn broken(&self) -> bool {
        self.conn.broken()
    }

    /// Whether the transaction was begun (its `BEGIN` sent).
    pub(super) fn begun(&self) -> bool {
        self.begin.lock().expect("begin lock").is_none()
    }

    pub(super) fn get(&self, t: Tab, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let key = key.to_vec();
        let sql = format!("SELECT value FROM {} WHERE key = $1", table(t));
        self.run(move |conn| async move {
            let stmt = conn.prepare_cached(&sql).await.map_err(sql_err)?;
            let row = conn.query_opt(&stmt, &[&key]).await.map_err(sql_err)?;
            Ok(row.map(|r| r.get::<_, Vec<u8>>(0)))
        })
    }

    pub(super) fn range(
        &self,
        t: Tab,
        start: &[u8],
        end: &[u8],
        reverse: bool,
        limit: usize,
    ) -> Result<Rows, StoreError> {
        if start >= end || limit == 0 {
            return Ok(Vec::new());
        }
        let (start, end) = (start.to_vec(), end.to_vec());
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let sql = format!(
            "SELECT key, value FROM {} WHERE key >= $1 AND key < $2 ORDER BY key {} LIMIT $3",
            table(t),
            if reverse { "DESC" } else { "ASC" }
        );
        self.run(move |conn| async move {
            let stmt = conn.prepare_cached(&sql).await.map_err(sql_err)?;
            let rows = conn
                .query(&stmt, &[&start, &end, &limit])
                .await
                .map_err(sql_err)?;
            Ok(rows
                .into_iter()
                .map(|r| (r.get::<_, Vec<u8>>(0), r.get::<_, Vec<u8>>(1)))
                .collect())
        })
    }

    pub(super) fn meta(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let key = key.to_owned();
        self.run(move |conn| async move {
            let stmt = conn
                .prepare_cached("SELECT value FROM hearth_meta WHERE key = $1")
                .await
                .map_err(sql_err)?;
            let row = conn.query_opt(&stmt, &[&key]).await.map_err(sql_err)?;
            Ok(row.map(|r| r.get::<_, Vec<u8>>(0)))
        })
    }

    /// `db`'s head, locked for the transaction with `lock`.
    pub(super) fn head(&self, db: &str, lock: bool) -> Result<Option<Head>, StoreError> {
        let db = db.to_owned();
        let sql = match lock {
            true => {
                "SELECT version, commit_micros, catalog FROM hearth_heads WHERE db = $1 FOR UPDATE"
            }
            false => "SELECT version, commit_micros, catalog FROM hearth_heads WHERE db = $1",
        };
        self.run(move |conn| async move {
            let stmt = conn.prepare_cached(sql).await.map_err(sql_err)?;
            let row = conn.query_opt(&stmt, &[&db]).await.map_err(sql_err)?;
            Ok(row.map(|r| head_of(&r, 0)))
        })
    }

    /// Runs `sql` (no results) and waits; nothing on a broken connection (closed when
    /// dropped, which ends its transaction).
    pub(super) fn batch(&self, sql: &'static str) -> Result<(), StoreError> {
        if self.broken() {
            return Ok(());
        }
        self.shared.call(&self.conn, move |conn| async move {
            conn.batch_execute(sql).await.map_err(sql_err)
        })
    }
}

/// The advisory lock key of database `db`'s index builds: FNV-1a of its name, in a
/// namespace of its own.
fn build_lock_key(db: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in "hearth-build/".bytes().chain(db.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h as i64
}

/// A database's build lock, held by the session of a pooled connection: unlocked before
/// the connection goes back to the pool (and by the server if this relay dies).
struct BuildLock {
    shared: Arc<Shared>,
    conn: Option<Arc<PgConn>>,
    key: i64,
}

impl Drop for BuildLock {
    fn drop(&mut self) {
        let (Some(conn), key) = (self.conn.take(), self.key) else {
            return;
        };
        if conn.broken() {
            return;
        }
        self.shared.handle().spawn(async move {
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&key];
            let unlock = conn.settle(conn.execute("SELECT pg_advisory_unlock($1)", &params));
            match tokio::time::timeout(CALL_DEADLINE, unlock).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "releasing an index build lock failed"),
                Err(_) => tracing::warn!("releasing an index build lock: no answer"),
            }
        });
    }
}

/// A snapshot: a `REPEATABLE READ READ ONLY` transaction on a pooled connection, ended
/// (and the connection returned) when dropped.
struct PgRead {
    reader: Reader,
    /// Heads and rows read ahead ([`ReadTxn::read_ahead`]).
    ahead: std::sync::Mutex<Ahead>,
}

impl Drop for PgRead {
    fn drop(&mut self) {
        if !self.reader.begun() || self.reader.broken() {
            return;
        }
        let conn = self.reader.conn.clone();
        self.reader.shared.handle().spawn(async move {
            let commit = conn.settle(conn.batch_execute("COMMIT"));
            let _ = tokio::time::timeout(CALL_DEADLINE, commit).await;
        });
    }
}

impl ReadTxn for PgRead {
    fn get(&self, t: Tab, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let ahead = self.ahead.lock().expect("read-ahead lock").row(t, key);
        match ahead {
            Some(v) => Ok(v),
            None => self.reader.get(t, key),
        }
    }

    fn range(
        &self,
        t: Tab,
        start: &[u8],
        end: &[u8],
        reverse: bool,
        limit: usize,
    ) -> Result<Rows, StoreError> {
        self.reader.range(t, start, end, reverse, limit)
    }

    fn meta(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.reader.meta(key)
    }

    fn head(&self, db: &str) -> Result<Option<Head>, StoreError> {
        let ahead = self.ahead.lock().expect("read-ahead lock").head(db);
        match ahead {
            Some(h) => Ok(h),
            None => {
                // A snapshot's head never changes: later reads of it need no round trip.
                let h = self.reader.head(db, false)?;
                self.ahead.lock().expect("read-ahead lock").set_head(db, h);
                Ok(h)
            }
        }
    }

    fn read_ahead(&self, dbs: &[&str], keys: &[(Tab, Vec<u8>)]) -> Result<(), StoreError> {
        let names: Vec<String> = dbs.iter().map(|d| (*d).to_owned()).collect();
        let keys = keys.to_vec();
        let found = self
            .reader
            .run(move |conn| read_ahead(conn, names, false, keys))?;
        self.ahead.lock().expect("read-ahead lock").merge(found);
        Ok(())
    }
}

impl Postgres {
    /// One run of a write transaction: `Ok` with the heads it moved once committed.
    fn write_once(&self, durable: bool, work: WriteFn<'_>) -> Result<Vec<(String, u64)>, TxnError> {
        let conn = self.shared.connection().map_err(TxnError::Fail)?;
        // Sent with the transaction's first statement.
        let begin = match durable {
            true => "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL synchronous_commit = on",
            false => "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL synchronous_commit = off",
        };
        let mut w = PgWrite::new(Reader::new(self.shared.clone(), conn, Some(begin)));
        let result = work(&mut w).and_then(|()| w.commit());
        let outcome = match result {
            Ok(changed) => return Ok(changed),
            Err(e) => match w.retry.take() {
                Some(m) => TxnError::Retry(m),
                None => TxnError::Fail(e),
            },
        };
        w.roll_back();
        Err(outcome)
    }

    /// Tells the other relays which heads moved, in a statement of its own.
    fn notify(&self, changed: Vec<(String, u64)>) {
        if changed.is_empty() {
            return;
        }
        let payloads: Vec<String> = changed.iter().map(|(db, v)| format!("{v}:{db}")).collect();
        let pool = self.shared.pool.clone();
        // Not waited for: a lost notification only delays the others until their poll.
        self.shared.handle().spawn(async move {
            let send = async {
                let conn = PgConn::new(pool.get().await.ok()?);
                let sql = "SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p";
                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&CHANNEL, &payloads];
                let notified = conn.execute(sql, &params);
                conn.settle(notified).await.ok()
            };
            let _ = tokio::time::timeout(CALL_DEADLINE, send).await;
        });
    }
}

impl Backend for Postgres {
    fn shard_count(&self) -> usize {
        1
    }

    fn shard_index(&self, _db: &str) -> usize {
        0
    }

    fn read(&self, _shard: usize) -> Result<Box<dyn ReadTxn>, StoreError> {
        let conn = self.shared.connection()?;
        let begin = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";
        Ok(Box::new(PgRead {
            reader: Reader::new(self.shared.clone(), conn, Some(begin)),
            ahead: Default::default(),
        }))
    }

    fn write(&self, _shard: usize, durable: bool, work: WriteFn<'_>) -> Result<(), StoreError> {
        let mut tries = 0;
        loop {
            match self.write_once(durable, work) {
                Ok(changed) => {
                    self.notify(changed);
                    return Ok(());
                }
                Err(TxnError::Retry(why)) if tries < RETRIES => {
                    tries += 1;
                    tracing::debug!(tries, %why, "a PostgreSQL transaction runs again");
                }
                Err(TxnError::Retry(why)) => return Err(StoreError::Postgres(why)),
                Err(TxnError::Fail(e)) => return Err(e),
            }
        }
    }

    fn heads(&self, _shard: usize) -> Result<Vec<(String, Head)>, StoreError> {
        let conn = self.shared.connection()?;
        self.shared
            .call_within(POLL_DEADLINE, &conn, |conn| async move {
                let rows = conn
                    .query(
                        "SELECT db, version, commit_micros, catalog FROM hearth_heads ORDER BY db",
                        &[],
                    )
                    .await
                    .map_err(sql_err)?;
                Ok(rows
                    .into_iter()
                    .map(|r| (r.get::<_, String>(0), head_of(&r, 1)))
                    .collect())
            })
    }

    fn describe(&self) -> String {
        self.shared.shown.clone()
    }

    fn render_metrics(&self) -> String {
        let status = self.shared.pool.status();
        let in_use = status.size.saturating_sub(status.available);
        format!(
            "# HELP hearth_postgres_pool_connections PostgreSQL connections of the pool, by state.\n\
             # TYPE hearth_postgres_pool_connections gauge\n\
             hearth_postgres_pool_connections{{state=\"in_use\"}} {in_use}\n\
             hearth_postgres_pool_connections{{state=\"idle\"}} {}\n\
             # HELP hearth_postgres_pool_waiting Requests waiting for a pooled PostgreSQL connection.\n\
             # TYPE hearth_postgres_pool_waiting gauge\n\
             hearth_postgres_pool_waiting {}\n\
             # HELP hearth_postgres_pool_max Most pooled PostgreSQL connections (--postgres-pool).\n\
             # TYPE hearth_postgres_pool_max gauge\n\
             hearth_postgres_pool_max {}\n",
            status.available,
            status.waiting,
            status.max_size
        )
    }

    fn ping(&self) -> Result<(), StoreError> {
        let pool = self.shared.pool.clone();
        // A connection whose answer does not come in time is closed, not pooled again.
        self.shared
            .wait_within(Some(Duration::from_secs(2)), async move {
                let conn = PgConn::new(pool.get().await.map_err(pg_err)?);
                let answered = conn.settle(conn.simple_query("SELECT 1")).await;
                answered.map(drop).map_err(sql_err)
            })
            .map_err(|_| StoreError::Postgres("no answer in 2 s".into()))?
    }

    fn drop_idle_connections(&self) {
        self.shared.drop_idle();
    }

    fn lock_builds(&self, db: &str) -> Result<Box<dyn Send>, StoreError> {
        let key = build_lock_key(db);
        let conn = self.shared.connection()?;
        // Tried every 200 ms (each try bounded, so an outage fails it), as long as another
        // relay's change takes.
        while !self.shared.call(&conn, move |c| async move {
            let row = c
                .query_one("SELECT pg_try_advisory_lock($1)", &[&key])
                .await;
            row.map(|r| r.get::<_, bool>(0)).map_err(sql_err)
        })? {
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(Box::new(BuildLock {
            shared: self.shared.clone(),
            conn: Some(conn),
            key,
        }))
    }

    fn watch(&self, watcher: Watcher) -> bool {
        let shared = self.shared.clone();
        let config = shared.config.clone();
        let relisten = shared.relisten.clone();
        match shared.tls.clone() {
            Some(tls) => self
                .shared
                .handle()
                .spawn(super::pg_listen::listen(config, tls, relisten, watcher)),
            None => self
                .shared
                .handle()
                .spawn(super::pg_listen::listen(config, NoTls, relisten, watcher)),
        };
        true
    }
}

//! The PostgreSQL backend's connections, and how long anything waits on them.
//!
//! - Every connection (pooled or the notification one) is opened with TCP keepalives and a
//!   TCP user timeout, so a dead link or host is noticed within seconds rather than the
//!   kernel's two hours, and a connect timeout; on the server's side, with an
//!   idle-in-transaction timeout (a relay stopped in the middle of a group commit, or cut
//!   off from the server, releases its head-row locks instead of stalling every other
//!   relay's committer) and keepalives of the server's own.
//! - Every call on the client's runtime has a deadline ([`CALL_DEADLINE`]): a server that
//!   accepts bytes but never answers (stopped, or behind a link that swallows resets) fails
//!   the call instead of hanging the thread that waits for it.
//! - A connection whose call did not finish (it missed its deadline, or its future was
//!   dropped) is in an unknown state, perhaps inside a transaction: [`PgConn`] closes it
//!   when dropped instead of handing it back to the pool.

use std::future::Future;
use std::ops::Deref;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Object, Pool};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::StoreError;

/// The longest a call on PostgreSQL (one or a few pipelined round trips) may take. Longer
/// than any wait for a head-row lock, which another relay holds for one group commit, or,
/// if that relay stopped, until the server ends its session ([`IDLE_IN_TRANSACTION`]).
pub(super) const CALL_DEADLINE: Duration = Duration::from_secs(10);

/// The longest a poll of the heads may take: a plain read that waits for no lock, so a
/// server that does not answer it is noticed well before [`CALL_DEADLINE`].
pub(super) const POLL_DEADLINE: Duration = Duration::from_secs(3);

/// How long a session may sit idle inside a transaction before the server ends it (and
/// its locks with it). A relay's transactions never wait on anything but the server.
pub(super) const IDLE_IN_TRANSACTION: Duration = Duration::from_secs(5);

/// TCP keepalives: the first probe after this much silence...
const KEEPALIVE_IDLE: Duration = Duration::from_secs(5);
/// ...then one every...
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(2);
/// ...and the link is dead after this many unanswered.
const KEEPALIVE_RETRIES: u32 = 3;
/// Sent data unacknowledged for this long: the link is dead.
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a TCP connection to the server may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Gives `config` the bounds above, unless its URL set them: client-side keepalives, user
/// and connect timeouts, the application name `hearth-relay`, and server-side options
/// (before the URL's own, which win).
pub(super) fn bound(config: &mut tokio_postgres::Config) {
    config.keepalives(true);
    if config.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
        config.keepalives_idle(KEEPALIVE_IDLE);
    }
    if config.get_keepalives_interval().is_none() {
        config.keepalives_interval(KEEPALIVE_INTERVAL);
    }
    if config.get_keepalives_retries().is_none() {
        config.keepalives_retries(KEEPALIVE_RETRIES);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(TCP_USER_TIMEOUT);
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    if config.get_application_name().is_none() {
        config.application_name("hearth-relay");
    }
    let server = format!(
        "-c idle_in_transaction_session_timeout={} -c tcp_keepalives_idle={} \
         -c tcp_keepalives_interval={} -c tcp_keepalives_count={KEEPALIVE_RETRIES}",
        IDLE_IN_TRANSACTION.as_millis(),
        KEEPALIVE_IDLE.as_secs(),
        KEEPALIVE_INTERVAL.as_secs(),
    );
    let options = match config.get_options() {
        Some(own) => format!("{server} {own}"),
        None => server,
    };
    config.options(options);
}

/// An error as a store error, with its causes (a failed TLS handshake says why).
pub(super) fn pg_err(e: impl std::error::Error) -> StoreError {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        cause = c.source();
    }
    StoreError::Postgres(text)
}

/// A pooled connection that goes back to the pool when dropped only if every call made
/// on it through [`PgConn::settle`] finished: otherwise it is closed (its task aborted, so
/// the server ends its session and rolls back whatever it held).
pub(super) struct PgConn {
    /// The pooled object; `None` only while dropped.
    obj: Option<Object>,
    /// Calls begun and not finished.
    unsettled: AtomicUsize,
}

impl PgConn {
    pub(super) fn new(obj: Object) -> Arc<PgConn> {
        Arc::new(PgConn {
            obj: Some(obj),
            unsettled: AtomicUsize::new(0),
        })
    }

    /// Runs `call` on the connection: if it does not finish (its future is dropped), the
    /// connection is never pooled again.
    pub(super) async fn settle<T>(&self, call: impl Future<Output = T>) -> T {
        self.unsettled.fetch_add(1, Ordering::AcqRel);
        let out = call.await;
        self.unsettled.fetch_sub(1, Ordering::AcqRel);
        out
    }

    /// Whether a call on it did not finish: its state is unknown, nothing more is sent.
    pub(super) fn broken(&self) -> bool {
        self.unsettled.load(Ordering::Acquire) > 0
    }
}

impl Deref for PgConn {
    type Target = Object;

    fn deref(&self) -> &Object {
        self.obj
            .as_ref()
            .expect("a connection is held until dropped")
    }
}

impl Drop for PgConn {
    fn drop(&mut self) {
        if let Some(obj) = self.obj.take() {
            if *self.unsettled.get_mut() > 0 {
                // Out of the pool, and closed.
                drop(Object::take(obj));
            }
        }
    }
}

/// The PostgreSQL backend's shared parts.
pub(super) struct Shared {
    /// The client's runtime: every call runs on it.
    pub(super) runtime: Option<tokio::runtime::Runtime>,
    /// Pooled connections for reads and writes.
    pub(super) pool: Pool,
    /// Where it connects, without the password.
    pub(super) shown: String,
    /// The connection settings (the LISTEN connection is made from them).
    pub(super) config: tokio_postgres::Config,
    /// TLS, verified against `--postgres-ca` (`None`: none).
    pub(super) tls: Option<MakeRustlsConnect>,
    /// Tells the notification connection, if it is up, to open again
    /// ([`Shared::drop_idle`]).
    pub(super) relisten: Arc<tokio::sync::Notify>,
}

impl Shared {
    pub(super) fn handle(&self) -> &tokio::runtime::Handle {
        self.runtime.as_ref().expect("the runtime runs").handle()
    }

    /// Runs `fut` on the client's runtime and waits for it, from any thread, at most
    /// [`CALL_DEADLINE`].
    pub(super) fn wait<T: Send + 'static>(
        &self,
        fut: impl Future<Output = T> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.wait_within(Some(CALL_DEADLINE), fut)
    }

    /// Runs `fut` on the client's runtime and waits for it, at most `deadline` (`None`:
    /// as long as it takes); past it, `fut` is dropped.
    pub(super) fn wait_within<T: Send + 'static>(
        &self,
        deadline: Option<Duration>,
        fut: impl Future<Output = T> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.handle().spawn(async move {
            let out = match deadline {
                Some(d) => tokio::time::timeout(d, fut).await.ok(),
                None => Some(fut.await),
            };
            let _ = tx.send(out);
        });
        match rx.recv() {
            Ok(Some(out)) => Ok(out),
            Ok(None) => Err(StoreError::Postgres(format!(
                "PostgreSQL did not answer within {} s",
                deadline.unwrap_or_default().as_secs()
            ))),
            Err(_) => Err(StoreError::Postgres("the PostgreSQL client stopped".into())),
        }
    }

    /// Runs `query` on `conn` and waits for it ([`Shared::wait`]); a call that misses its
    /// deadline leaves the connection to be closed.
    pub(super) fn call<T, F>(
        &self,
        conn: &Arc<PgConn>,
        query: impl FnOnce(Arc<PgConn>) -> F + Send + 'static,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        self.call_within(CALL_DEADLINE, conn, query)
    }

    /// [`Shared::call`] with another deadline.
    pub(super) fn call_within<T, F>(
        &self,
        deadline: Duration,
        conn: &Arc<PgConn>,
        query: impl FnOnce(Arc<PgConn>) -> F + Send + 'static,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let c = conn.clone();
        self.wait_within(Some(deadline), async move {
            let held = c.clone();
            held.settle(query(c)).await
        })?
    }

    /// A pooled connection.
    pub(super) fn connection(&self) -> Result<Arc<PgConn>, StoreError> {
        let pool = self.pool.clone();
        let conn = self
            .wait(async move { pool.get().await })?
            .map_err(pg_err)?;
        Ok(PgConn::new(conn))
    }

    /// Closes the idle pooled connections and has the notification connection opened
    /// again (after an outage they may be dead: each would cost a deadline to find out).
    pub(super) fn drop_idle(&self) {
        let removed = self.pool.retain(|_, _| false).removed.len();
        if removed > 0 {
            tracing::debug!(removed, "idle PostgreSQL connections closed");
        }
        self.relisten.notify_waiters();
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

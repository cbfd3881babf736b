//! The PostgreSQL backend's notification connection: one connection of its own (not
//! pooled) that `LISTEN`s on the commit channel and tells the watcher of every head that
//! moved. Its loss is always noticed: the server ending it (a restart, a terminated
//! backend) closes it, a dead link fails its TCP keepalives (`pg_conn`), and after
//! [`HEARTBEAT`] of silence it must answer a query within [`HEARTBEAT_DEADLINE`] (a server
//! that no longer knows it, behind a link that swallowed the reset, never would). The
//! watcher then hears [`Watched::Lost`]; the connection is opened again with a backoff,
//! and each time it is back the watcher hears [`Watched::Reconnected`] (anything committed
//! meanwhile was not heard: every head is to be read again).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::Notify;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{AsyncMessage, Socket};

use super::pg_conn::pg_err;
use super::postgres::CHANNEL;
use super::txn::{Watched, Watcher};

/// The first wait before opening the connection again...
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// ...doubled after each failure, up to this.
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// After this long without a notification, the connection is asked a query...
const HEARTBEAT: Duration = Duration::from_secs(5);
/// ...which must be answered within this long (and so must the `LISTEN`).
const HEARTBEAT_DEADLINE: Duration = Duration::from_secs(5);

/// Listens for ever (until the runtime stops), connecting with `tls`; `relisten` ends the
/// connection up now and opens another.
pub(super) async fn listen<T>(
    config: tokio_postgres::Config,
    tls: T,
    relisten: Arc<Notify>,
    watcher: Watcher,
) where
    T: MakeTlsConnect<Socket> + Clone + Send,
    T::Stream: Send + 'static,
    T::TlsConnect: Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    let mut backoff = FIRST_BACKOFF;
    // Whether the last thing told was that it is up (so the next failure is news).
    let mut up = true;
    loop {
        let reason = match session(&config, tls.clone(), &relisten, &watcher).await {
            Ok(lost) => {
                backoff = FIRST_BACKOFF;
                up = true;
                format!("the PostgreSQL notification connection was lost: {lost}")
            }
            Err(failed) => failed,
        };
        if up {
            tracing::warn!(%reason, "not hearing other relays' commits: reconnecting");
        } else {
            tracing::debug!(%reason, "the notification connection is still down");
        }
        up = false;
        watcher(Watched::Lost { reason });
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One notification connection, from its opening to its loss: `Err` if it could not be
/// opened (or its `LISTEN` failed), else `Ok` with why it was lost.
async fn session<T>(
    config: &tokio_postgres::Config,
    tls: T,
    relisten: &Notify,
    watcher: &Watcher,
) -> Result<String, String>
where
    T: MakeTlsConnect<Socket> + Send,
    T::Stream: Send + 'static,
    T::TlsConnect: Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    let (client, mut connection) = config.connect(tls).await.map_err(|e| {
        format!(
            "cannot open the PostgreSQL notification connection: {}",
            pg_err(e)
        )
    })?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    // Drives the connection, and says why it ended.
    let driver = tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        loop {
            match messages.next().await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    if tx.send(n.payload().to_owned()).is_err() {
                        return String::from("no longer read");
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return pg_err(e).to_string(),
                None => return String::from("the server closed it"),
            }
        }
    });
    let listened = tokio::time::timeout(
        HEARTBEAT_DEADLINE,
        client.batch_execute(&format!("LISTEN {CHANNEL}")),
    )
    .await;
    let failed = match listened {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(format!("LISTEN failed: {}", pg_err(e))),
        Err(_) => Some(format!("LISTEN got no answer in {HEARTBEAT_DEADLINE:?}")),
    };
    if let Some(failed) = failed {
        driver.abort();
        return Err(failed);
    }
    // Anything committed before the LISTEN took effect was not heard.
    watcher(Watched::Reconnected);
    loop {
        let next = tokio::select! {
            next = tokio::time::timeout(HEARTBEAT, rx.recv()) => next,
            () = relisten.notified() => {
                driver.abort();
                return Ok("closed to be opened again after the store could not be reached".into());
            }
        };
        match next {
            Ok(Some(payload)) => {
                if let Some((v, db)) = payload.split_once(':') {
                    if let Ok(version) = v.parse() {
                        watcher(Watched::Head {
                            db: db.to_owned(),
                            version,
                        });
                    }
                }
            }
            Ok(None) => break,
            Err(_) => {
                let beat = tokio::time::timeout(
                    HEARTBEAT_DEADLINE,
                    client.batch_execute("SELECT 1 AS hearth_listen_heartbeat"),
                );
                let lost = match beat.await {
                    Ok(Ok(())) => continue,
                    Ok(Err(e)) => format!("its heartbeat failed: {}", pg_err(e)),
                    Err(_) => format!("its heartbeat got no answer in {HEARTBEAT_DEADLINE:?}"),
                };
                driver.abort();
                return Ok(lost);
            }
        }
    }
    Ok(driver
        .await
        .unwrap_or_else(|_| String::from("its driver stopped")))
}

//! The PostgreSQL backend's notification connection: one connection of its own (not
//! pooled) that `LISTEN`s on the commit channel and tells the watcher of every head that
//! moved; re-established with a backoff whenever it is lost (the server restarted, the
//! backend was terminated), each time telling the watcher to read every head again.

use std::time::Duration;

use futures_util::StreamExt;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{AsyncMessage, Socket};

use super::postgres::CHANNEL;
use super::txn::{Watched, Watcher};

/// The longest wait between two attempts to connect.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Listens for ever (until the runtime stops), connecting with `tls`.
pub(super) async fn listen<T>(config: tokio_postgres::Config, tls: T, watcher: Watcher)
where
    T: MakeTlsConnect<Socket> + Clone + Send,
    T::Stream: Send + 'static,
    T::TlsConnect: Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    let mut backoff = Duration::from_millis(50);
    loop {
        match config.connect(tls.clone()).await {
            Ok((client, mut connection)) => {
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                let driver = tokio::spawn(async move {
                    let mut messages =
                        futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
                    while let Some(m) = messages.next().await {
                        match m {
                            Ok(AsyncMessage::Notification(n)) => {
                                if tx.send(n.payload().to_owned()).is_err() {
                                    break;
                                }
                            }
                            Ok(_) => {}
                            Err(e) => {
                                tracing::warn!(error = %e, "the PostgreSQL notification connection failed");
                                break;
                            }
                        }
                    }
                });
                match client.batch_execute(&format!("LISTEN {CHANNEL}")).await {
                    Ok(()) => {
                        backoff = Duration::from_millis(50);
                        // Anything committed before the LISTEN took effect was not heard.
                        watcher(Watched::Reconnected);
                        while let Some(payload) = rx.recv().await {
                            if let Some((v, db)) = payload.split_once(':') {
                                if let Ok(version) = v.parse() {
                                    watcher(Watched::Head {
                                        db: db.to_owned(),
                                        version,
                                    });
                                }
                            }
                        }
                        tracing::warn!(
                            "the PostgreSQL notification connection was lost: reconnecting"
                        );
                    }
                    Err(e) => tracing::warn!(error = %e, "LISTEN failed"),
                }
                driver.abort();
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot open the PostgreSQL notification connection")
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

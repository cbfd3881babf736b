//! The accept loop: serves HTTP/1 connections (routes in [`crate::conn`]) until shutdown,
//! then drains: stops accepting, lets in-flight commits finish and be acknowledged, and
//! closes every socket cleanly.
//!
//! Each connection is served by hyper's HTTP/1 server directly (not `axum::serve`), so an
//! upgraded WebSocket gets its bare TCP socket back ([`crate::outbound`] writes frames in
//! place). A semaphore caps the WebSocket connections; when all its permits are back, every
//! connection has finished. Another caps the connections still speaking HTTP
//! (`--max-pending-connections`; one past it is closed at once), and each of those has
//! `--http-deadline-ms` to send its request headers and is asked to close (idle ones at
//! once) that long after it was accepted unless it upgraded, so slowloris-style clients
//! cannot hold sockets.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::conn;
use crate::conn::PendingSlot;
use crate::retention::prune_shard;
use crate::state::{Relay, RelayError};
use crate::store::Store;

/// How often changelog and batch records past the retention are pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(30);

/// Longest wait for open connections to finish on shutdown (HTTP, then WebSocket).
const DRAIN_LIMIT: Duration = Duration::from_secs(30);

/// Serves the relay on `listener` until `shutdown` resolves, then drains: stops accepting,
/// lets in-flight commits finish and be acknowledged, and closes every socket cleanly.
pub async fn run(
    relay: Arc<Relay>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), RelayError> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let max = relay.config().max_connections;
    let slots = Arc::new(tokio::sync::Semaphore::new(max));
    let app = conn::router(relay.clone(), stop_rx.clone(), slots.clone());
    let pending = Arc::new(tokio::sync::Semaphore::new(
        relay.config().max_pending_connections,
    ));
    let deadline = relay.config().http_deadline;
    let addr: SocketAddr = listener.local_addr()?;
    tracing::info!(%addr, "hearth-relay listening");
    let prune_relay = relay.clone();
    let pruner = tokio::spawn(async move {
        let mut tick = tokio::time::interval(PRUNE_EVERY);
        loop {
            tick.tick().await;
            let r = prune_relay.clone();
            let retention = r.config().changelog_retention;
            for (shard, committer) in r.committers().iter().enumerate() {
                committer.run_job(Box::new(move |store: &Store| {
                    if let Err(e) = prune_shard(store, shard, retention) {
                        tracing::warn!(error = %e, "changelog pruning failed");
                    }
                }));
            }
        }
    });
    #[cfg(unix)]
    survive_file_size_limit();
    let reloader = tokio::spawn(reload_rules(relay.clone()));
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
        // Reap finished HTTP connections so the set stays small.
        while http.try_join_next().is_some() {}
        // Past `--max-pending-connections`, a connection is closed at once: nothing of it
        // is read, nothing is spawned for it.
        let Ok(permit) = pending.clone().try_acquire_owned() else {
            relay.metrics().connection_refused("pending");
            drop(tcp);
            continue;
        };
        let slot = PendingSlot::new(permit);
        // Small replies must not wait for the peer's delayed ACK (Nagle).
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
        let app = app.clone();
        let mut stop = stop_rx.clone();
        http.spawn(async move {
            let svc = hyper_util::service::TowerToHyperService::new(app);
            let request_slot = slot.clone();
            let svc = hyper::service::service_fn(move |mut req: hyper::Request<_>| {
                req.extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                req.extensions_mut().insert(request_slot.clone());
                hyper::service::Service::call(&svc, req)
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(deadline)
                .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                .with_upgrades();
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => if let Err(e) = r {
                    tracing::debug!(%peer, error = %e, "HTTP connection ended");
                },
                // Still HTTP at the deadline: an idle connection closes at once, one in a
                // request after its response; one still there at twice the deadline is cut.
                _ = tokio::time::sleep(deadline) => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(deadline, conn).await;
                }
                _ = async { stop.wait_for(|s| *s).await.is_ok() } => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
            // The pending permit (if the connection did not upgrade) is given back here.
            drop(slot);
        });
    }
    // New connections are refused from here on.
    drop(listener);
    tracing::info!("shutting down: draining connections");
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(DRAIN_LIMIT, async {
        while http.join_next().await.is_some() {}
    })
    .await;
    pruner.abort();
    reloader.abort();
    // Upgraded WebSocket connections left the HTTP server: wait until each has answered its
    // in-flight writes and closed (every connection permit is back), for at most 30 s.
    let deadline = std::time::Instant::now() + DRAIN_LIMIT;
    while slots.available_permits() < max && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = relay.clone();
    tokio::task::spawn_blocking(move || r.stop()).await.ok();
    tracing::info!("hearth-relay stopped");
    Ok(())
}

/// Reloads the security rules on `SIGHUP` and when their file changes (looked at every
/// second), off the runtime's workers; nothing to do for an open relay.
/// After a reload: every listen proved again under the new rules, those ended logged.
fn reprove_logged(relay: &Relay) {
    let ended = relay.reprove_listens();
    tracing::info!(
        ended,
        "listens proved again under the reloaded rules; those no longer allowed ended"
    );
}

/// Keeps the process alive when a store file would grow past the process's file size limit
/// (`ulimit -f`): the signal's default is to end the process; with it handled, the write
/// fails with an error instead, the round is answered `unavailable`, and the store recovers
/// once the limit allows (as from a full disk).
#[cfg(unix)]
fn survive_file_size_limit() {
    // SIGXFSZ is 25 on Linux and the BSDs.
    let kind = tokio::signal::unix::SignalKind::from_raw(25);
    if let Ok(mut sig) = tokio::signal::unix::signal(kind) {
        tokio::spawn(async move {
            while sig.recv().await.is_some() {
                tracing::warn!("a store file reached the process's file size limit (SIGXFSZ): its write failed");
            }
        });
    }
}

async fn reload_rules(relay: Arc<Relay>) {
    if !relay.rules().enabled() {
        return;
    }
    #[cfg(unix)]
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        #[cfg(unix)]
        let signalled = async {
            match hangup.as_mut() {
                Some(h) => h.recv().await,
                None => std::future::pending().await,
            }
        };
        #[cfg(not(unix))]
        let signalled = std::future::pending::<Option<()>>();
        let r = relay.clone();
        tokio::select! {
            _ = tick.tick() => {
                let _ = tokio::task::spawn_blocking(move || {
                    if r.rules().reload_if_changed() {
                        reprove_logged(&r);
                    }
                }).await;
            }
            Some(()) = signalled => {
                let _ = tokio::task::spawn_blocking(move || {
                    if r.rules().reload_logged("SIGHUP") {
                        reprove_logged(&r);
                    }
                }).await;
            }
        }
    }
}

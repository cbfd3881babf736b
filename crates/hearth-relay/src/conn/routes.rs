//! The relay's HTTP routes (`/healthz`, `/metrics`, `/v1/ws`, and the `--static-dir` files
//! of the demo) and the WebSocket handshake, which hands the upgraded connection's bare TCP
//! socket to a [`Connection`].

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::{watch, Semaphore};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

use super::limits::{address_key, Limits};
use super::{Connection, Held};
use crate::state::Relay;

/// What every route handler gets.
#[derive(Clone)]
struct AppState {
    /// The relay the routes serve.
    relay: Arc<Relay>,
    /// Becomes true on shutdown: `/healthz` turns unavailable and connections drain.
    stop: watch::Receiver<bool>,
    /// One permit per open WebSocket connection (`--max-connections`).
    slots: Arc<Semaphore>,
    /// The connection limits per client address, database and token subject.
    limits: Arc<Limits>,
}

/// A request extension holding its HTTP connection's `--max-pending-connections` permit
/// (shared by the connection's requests): the WebSocket upgrade gives it back, since the
/// upgraded connection counts under `--max-connections` instead.
#[derive(Clone)]
pub(crate) struct PendingSlot(Arc<std::sync::Mutex<Option<tokio::sync::OwnedSemaphorePermit>>>);

impl PendingSlot {
    pub(crate) fn new(permit: tokio::sync::OwnedSemaphorePermit) -> PendingSlot {
        PendingSlot(Arc::new(std::sync::Mutex::new(Some(permit))))
    }

    /// Gives the permit back (once; later calls do nothing).
    fn release(&self) {
        let permit = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        drop(permit);
    }
}

/// The relay's routes: `/healthz`, `/metrics`, `/v1/ws`. `slots` caps connections; when all
/// its permits are back, every connection has finished.
pub fn router(relay: Arc<Relay>, stop: watch::Receiver<bool>, slots: Arc<Semaphore>) -> Router {
    let limits = Arc::new(Limits::new(relay.config()));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/v1/ws", get(upgrade))
        .fallback(get(static_file))
        .with_state(AppState {
            relay,
            stop,
            slots,
            limits,
        })
}

/// Serves a file of `--static-dir` (the demo app and the built package), read-only; paths
/// with `..` or hidden segments are refused.
///
/// Each file carries a validator (`etag`, from its size and modification time) with
/// `cache-control: no-cache`: the browser asks again on every load and gets `304 Not
/// Modified` while the file is unchanged. That keeps the response in the HTTP cache, which
/// lets Chrome reuse the wasm it compiled on an earlier visit (its code cache follows the
/// cached response) instead of compiling the package again on each page load.
async fn static_file(
    State(s): State<AppState>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Response {
    let Some(dir) = s.relay.config().static_dir.clone() else {
        return (StatusCode::NOT_FOUND, "not found\n").into_response();
    };
    let path = uri.path().trim_start_matches('/');
    if path
        .split('/')
        .any(|seg| seg == ".." || seg.starts_with('.'))
    {
        return (StatusCode::BAD_REQUEST, "bad path\n").into_response();
    }
    let mut file = dir.join(path);
    if path.is_empty() || path.ends_with('/') {
        file = file.join("index.html");
    }
    let content_type = content_type(&file);
    let read = tokio::task::spawn_blocking(move || {
        let tag = std::fs::metadata(&file).map(|m| entity_tag(&m))?;
        std::fs::read(&file).map(|body| (tag, body))
    })
    .await
    .unwrap_or_else(|e| Err(std::io::Error::other(e)));
    let Ok((tag, body)) = read else {
        return (StatusCode::NOT_FOUND, "not found\n").into_response();
    };
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag || t.trim() == "*"));
    let validators = [
        (header::CONTENT_TYPE, content_type.to_owned()),
        (header::CACHE_CONTROL, "no-cache".to_owned()),
        (header::ETAG, tag),
    ];
    if fresh {
        return (StatusCode::NOT_MODIFIED, validators).into_response();
    }
    (validators, body).into_response()
}

/// A static file's entity tag: its size and modification time (nanoseconds), which change
/// when the file is rebuilt.
fn entity_tag(meta: &std::fs::Metadata) -> String {
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    format!("\"{:x}-{:x}\"", meta.len(), modified)
}

/// The `content-type` a static file is served with, from its extension (a web app's shell:
/// pages, modules, wasm, styles, its manifest and icons).
fn content_type(file: &std::path::Path) -> &'static str {
    match file.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript",
        Some("wasm") => "application/wasm",
        Some("json") => "application/json",
        Some("webmanifest") => "application/manifest+json",
        Some("css") => "text/css",
        Some("png") => "image/png",
        Some("svg") => "image/svg+xml",
        Some("ico") => "image/x-icon",
        Some("ts" | "md" | "txt") => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

async fn healthz(State(s): State<AppState>) -> Response {
    if s.relay.is_ready() && !*s.stop.borrow() {
        // The first line is the verdict; the second says whether anything is protected;
        // the third, where the state is (and for a shared store, whether it answers).
        let rules = match s.relay.rules().file() {
            Some(file) => format!("rules: {}", file.display()),
            None => "open: no security rules, every client reads and writes everything".into(),
        };
        let relay = s.relay.clone();
        let ping = tokio::task::spawn_blocking(move || relay.store().ping()).await;
        let store = s.relay.store().describe();
        // A shared store this relay could not reach: degraded until it has caught up.
        let degraded = s.relay.metrics().store_outages().degraded();
        match (ping, degraded) {
            (Ok(Ok(())), Some((lasted, reason))) => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "degraded: catching up with the store for {:.1} s ({reason})\n{rules}\nstore: {store}\n",
                    lasted.as_secs_f64()
                ),
            )
                .into_response(),
            (Ok(Ok(())), None) => {
                (StatusCode::OK, format!("ok\n{rules}\nstore: {store}\n")).into_response()
            }
            (Ok(Err(e)), _) => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("store unavailable\n{rules}\nstore: {store}: {e}\n"),
            )
                .into_response(),
            (Err(_), _) => (StatusCode::SERVICE_UNAVAILABLE, "store unavailable\n").into_response(),
        }
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n").into_response()
    }
}

/// `/metrics` names every database and its load: with `--metrics-token` it needs that
/// bearer token; without one it is served to loopback peers only.
async fn metrics(
    State(s): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: axum::http::HeaderMap,
) -> Response {
    match &s.relay.config().metrics_token {
        Some(token) => {
            let given = headers
                .get(axum::http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "));
            if !given.is_some_and(|g| same_secret(g.as_bytes(), token.as_bytes())) {
                return (
                    StatusCode::UNAUTHORIZED,
                    [("www-authenticate", "Bearer")],
                    "/metrics needs the bearer token set with --metrics-token\n",
                )
                    .into_response();
            }
        }
        None if !peer.ip().is_loopback() => {
            return (
                StatusCode::FORBIDDEN,
                "/metrics is served to loopback only; set --metrics-token to serve it to others\n",
            )
                .into_response();
        }
        None => {}
    }
    let mut text = s.relay.metrics().render();
    text.push_str(&s.relay.store().render_metrics());
    ([("content-type", "text/plain; version=0.0.4")], text).into_response()
}

/// Whether a header lists `token` (comma-separated, any case).
fn header_has(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers.get_all(name).iter().any(|v| {
        v.to_str()
            .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    })
}

/// The WebSocket handshake (RFC 6455 §4.2). The upgraded connection is served on the bare
/// TCP socket: its frames are written in place ([`crate::outbound::Outbound`]), and a
/// WebSocket reader decodes what the client sends.
async fn upgrade(
    State(s): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    mut req: Request,
) -> Response {
    let h = req.headers();
    if req.method() != Method::GET
        || !header_has(h, header::CONNECTION, "upgrade")
        || !header_has(h, header::UPGRADE, "websocket")
    {
        return (
            StatusCode::UPGRADE_REQUIRED,
            [(header::UPGRADE, "websocket")],
            "this endpoint speaks WebSocket only\n",
        )
            .into_response();
    }
    if h.get(header::SEC_WEBSOCKET_VERSION)
        .is_none_or(|v| v.as_bytes() != b"13")
    {
        return (
            StatusCode::UPGRADE_REQUIRED,
            [(header::SEC_WEBSOCKET_VERSION, "13")],
            "WebSocket version 13 is required\n",
        )
            .into_response();
    }
    let Some(key) = h.get(header::SEC_WEBSOCKET_KEY) else {
        return (StatusCode::BAD_REQUEST, "Sec-WebSocket-Key is missing\n").into_response();
    };
    let accept = derive_accept_key(key.as_bytes());
    let Some(on_upgrade) = req.extensions_mut().remove::<hyper::upgrade::OnUpgrade>() else {
        return (
            StatusCode::BAD_REQUEST,
            "this connection cannot be upgraded\n",
        )
            .into_response();
    };
    let metrics = s.relay.metrics();
    let Ok(permit) = s.slots.clone().try_acquire_owned() else {
        metrics.connection_refused("connections");
        let max = s.relay.config().max_connections;
        let msg = format!(
            "too many connections: the relay has its maximum of {max} (--max-connections)\n"
        );
        return (StatusCode::SERVICE_UNAVAILABLE, msg).into_response();
    };
    let Some(address) = s.limits.address.try_hold(address_key(peer.ip())) else {
        metrics.connection_refused("address");
        let max = s.limits.address.max();
        let msg = format!("too many connections from your address: {max} are open, the relay's limit (--max-connections-per-address {max})\n");
        return (StatusCode::SERVICE_UNAVAILABLE, msg).into_response();
    };
    // The connection is a WebSocket from here on: it counts under `--max-connections`,
    // no longer as a pending HTTP connection.
    if let Some(pending) = req.extensions().get::<PendingSlot>() {
        pending.release();
    }
    tokio::spawn(async move {
        let upgraded = match on_upgrade.await {
            Ok(u) => u,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "WebSocket upgrade failed");
                return;
            }
        };
        let Ok(parts) = upgraded.downcast::<TokioIo<TcpStream>>() else {
            tracing::error!(%peer, "an upgraded connection is not a TCP stream");
            return;
        };
        let relay = s.relay.clone();
        // Records the connection open; its drop (however `serve` ends) gives back the
        // permit and every place the connection holds, and records it closed.
        let held = Held::open(relay.clone(), permit, address);
        let tcp = parts.io.into_inner();
        Connection::serve(
            relay,
            s.limits.clone(),
            held,
            tcp,
            parts.read_buf,
            s.stop.clone(),
            peer,
        )
        .await;
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "upgrade")
        .header(header::UPGRADE, "websocket")
        .header(header::SEC_WEBSOCKET_ACCEPT, accept)
        .body(axum::body::Body::empty())
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// Whether two secrets are equal, in time independent of where they differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::content_type;
    use std::path::Path;

    #[test]
    fn static_files_have_their_types() {
        for (file, want) in [
            ("www/index.html", "text/html; charset=utf-8"),
            ("pkg/hearth.js", "text/javascript"),
            ("pkg/hearth_bg.wasm", "application/wasm"),
            ("worker/manifest.webmanifest", "application/manifest+json"),
            ("worker/icons/icon-192.png", "image/png"),
            ("www/logo.svg", "image/svg+xml"),
            ("www/style.css", "text/css"),
            ("pkg/hearth.d.ts", "text/plain; charset=utf-8"),
            ("data.bin", "application/octet-stream"),
            ("Makefile", "application/octet-stream"),
        ] {
            assert_eq!(content_type(Path::new(file)), want, "{file}");
        }
    }
}

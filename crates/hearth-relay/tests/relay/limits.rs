//! Connection limits against hostile clients: connections per client address, per database
//! and per token subject; accepted connections that never become WebSockets (slowloris);
//! an oversized first frame; a token's `databases` claim; and connections reset mid-listen
//! giving back everything they held. In every case a well-behaved bystander on another
//! connection and database keeps writing and listening, and loses nothing.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use hearth_client::Client;
use hearth_core::mutation::Mutation;
use hearth_core::protocol::codec::encode_client;
use hearth_core::protocol::{ClientMessage, ErrorCode, ServerMessage, PROTOCOL_VERSION};
use hearth_core::query::model::Query;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::MaybeTlsStream;

use crate::harness::*;

const SECRET: &str = "s3cret";

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// An HS256 token with `claims` (and an expiry ten minutes out).
fn token(mut claims: serde_json::Value) -> String {
    claims["exp"] = serde_json::json!(now_unix() + 600);
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

fn hello_with(db: &str, token: &str) -> Message {
    Message::Binary(
        encode_client(&ClientMessage::Hello {
            protocol_version: PROTOCOL_VERSION,
            database: db.to_owned(),
            client_id: unique("raw"),
            token: token.to_owned(),
        })
        .into(),
    )
}

/// Sends a Hello (with `token`) on a fresh raw socket: the socket and the first reply
/// (`None` when the relay closed without one).
async fn open_raw(relay: &Relay, db: &str, token: &str) -> (RawSocket, Option<ServerMessage>) {
    let mut ws = raw_socket(relay).await;
    raw_send(&mut ws, hello_with(db, token)).await;
    let first = first_reply(&mut ws).await;
    (ws, first)
}

async fn first_reply(ws: &mut RawSocket) -> Option<ServerMessage> {
    loop {
        match within(ws.next()).await {
            Some(Ok(Message::Binary(b))) => {
                return Some(hearth_core::protocol::codec::decode_server(&b).unwrap())
            }
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            _ => return None,
        }
    }
}

fn is_welcome(m: &Option<ServerMessage>) -> bool {
    matches!(m, Some(ServerMessage::Welcome { .. }))
}

/// Asserts `m` is an Error with `code` whose message contains `needle`.
fn assert_error(m: &ServerMessage, code: ErrorCode, needle: &str, what: &str) {
    match m {
        ServerMessage::Error {
            code: c, message, ..
        } => {
            assert_eq!(*c, code, "{what}: {message}");
            assert!(
                message.contains(needle),
                "{what}: {message:?} lacks {needle:?}"
            );
        }
        other => panic!("{what}: not an Error: {other:?}"),
    }
}

/// Reads until the relay closes `ws`; requires exactly a refusal with `code` (its message
/// containing `needle`) and a close.
async fn assert_refused_then_closed(ws: &mut RawSocket, code: ErrorCode, needle: &str, what: &str) {
    let end = read_until_closed(ws, Duration::from_secs(10))
        .await
        .unwrap_or_else(|| panic!("{what}: the relay did not close within 10 s"));
    let errors = end.errors();
    assert_eq!(errors.len(), 1, "{what}: {end:?}");
    assert_error(errors[0], code, needle, what);
}

/// A raw WebSocket from source address `from` (any of 127.0.0.0/8 reaches the relay), so a
/// test's attacker is another client address than its bystander's 127.0.0.1.
async fn raw_socket_from(
    relay: &Relay,
    from: &str,
) -> Result<RawSocket, tokio_tungstenite::tungstenite::Error> {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let tcp = within(sock.connect(relay.addr)).await.unwrap();
    let config = WebSocketConfig::default().read_buffer_size(4096);
    within(tokio_tungstenite::client_async_with_config(
        relay.url(),
        MaybeTlsStream::Plain(tcp),
        Some(config),
    ))
    .await
    .map(|(ws, _)| ws)
}

async fn metrics_text(relay: &Relay) -> String {
    let (status, body) = http_get(relay.addr, "/metrics").await;
    assert_eq!(status, 200, "{body}");
    body
}

fn refused(text: &str, reason: &str) -> f64 {
    metric(
        text,
        &format!("hearth_connections_refused_total{{reason=\"{reason}\"}}"),
    )
    .unwrap_or(0.0)
}

/// Polls `cond` every 50 ms for at most `limit`.
async fn eventually<F, Fut>(limit: Duration, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !cond().await {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A well-behaved client on its own connection and database ("otherdb"): it writes a
/// document every 10 ms, requires each write acknowledged and seen by its listener (the
/// snapshot at the write's version holding every document so far), and records its write
/// latency, until `finish`.
struct Bystander {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<Vec<Duration>>,
}

impl Bystander {
    async fn start(relay: &Relay, token: &str) -> Bystander {
        let client = within(Client::connect(
            &relay.url(),
            "otherdb",
            &unique("bystander"),
            token,
        ))
        .await
        .expect("the bystander connects");
        let coll_name = unique("steady");
        let mut listener = within(client.listen(&Query::collection(coll(&coll_name)), None))
            .await
            .unwrap();
        within(listener.next()).await.expect("first snapshot");
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let done = Arc::new(AtomicUsize::new(0));
        let counted = done.clone();
        let task = tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut n = 0usize;
            while !stopped.load(Ordering::Relaxed) {
                n += 1;
                let doc = name(&format!("{coll_name}/d{n}"));
                let started = Instant::now();
                let v = within(client.write(vec![Mutation::set(doc, map([("n", int(n as i64))]))]))
                    .await
                    .unwrap_or_else(|e| panic!("the bystander's write {n} failed: {e}"));
                latencies.push(started.elapsed());
                let snap = within(listener.next())
                    .await
                    .unwrap_or_else(|e| panic!("the bystander's listener failed at {n}: {e}"));
                assert_eq!(snap.version, v, "the bystander's snapshot of write {n}");
                assert_eq!(snap.documents.len(), n, "the bystander lost a document");
                counted.store(n, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            latencies
        });
        Bystander { stop, done, task }
    }

    /// Lets the bystander complete at least 10 writes, stops it, requires it never failed,
    /// and prints its write latency.
    async fn finish(self, what: &str) {
        let deadline = Instant::now() + STEP;
        while self.done.load(Ordering::Relaxed) < 10
            && !self.task.is_finished()
            && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.stop.store(true, Ordering::Relaxed);
        let mut lat = within(self.task)
            .await
            .unwrap_or_else(|e| panic!("{what}: the bystander failed: {e}"));
        assert!(
            lat.len() >= 5,
            "{what}: the bystander wrote only {}",
            lat.len()
        );
        lat.sort();
        let pct = |p: usize| lat[(lat.len() - 1) * p / 100];
        eprintln!(
            "{what}: bystander wrote {} batches, all acknowledged and seen by its listener; write latency p50 {:?} p99 {:?} max {:?}",
            lat.len(),
            pct(50),
            pct(99),
            lat[lat.len() - 1]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_per_address_are_capped() {
    let relay = Relay::fresh(&["--max-connections-per-address", "5"]);
    let bystander = Bystander::start(&relay, "").await;
    let mut held = Vec::new();
    for i in 0..5 {
        let mut ws = raw_socket_from(&relay, "127.0.0.2")
            .await
            .unwrap_or_else(|e| panic!("connection {i} of 5 is allowed: {e}"));
        raw_send(&mut ws, Message::Binary(hello("crowd").into())).await;
        assert!(is_welcome(&first_reply(&mut ws).await), "connection {i}");
        held.push(ws);
    }
    for i in 0..10 {
        match raw_socket_from(&relay, "127.0.0.2").await {
            Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
                assert_eq!(resp.status(), 503, "attempt {i}");
                let body = String::from_utf8_lossy(resp.body().as_deref().unwrap_or_default())
                    .into_owned();
                assert!(
                    body.contains("--max-connections-per-address 5"),
                    "attempt {i}: {body:?}"
                );
            }
            Ok(_) => panic!("attempt {i}: a sixth connection from one address was upgraded"),
            Err(e) => panic!("attempt {i}: not an HTTP refusal: {e}"),
        }
    }
    // Another address is not affected.
    let other = relay.client("crowd").await;
    within(other.ping()).await.unwrap();
    let text = metrics_text(&relay).await;
    assert_eq!(refused(&text, "address"), 10.0, "{text}");
    // A closed connection gives its place back.
    drop(held.pop());
    eventually(Duration::from_secs(5), "a place is given back", || async {
        raw_socket_from(&relay, "127.0.0.2").await.is_ok()
    })
    .await;
    bystander.finish("per address").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_per_database_are_capped() {
    let relay = Relay::fresh(&["--max-connections-per-database", "5"]);
    let bystander = Bystander::start(&relay, "").await;
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(handshaken(&relay, "crowded").await);
    }
    for i in 0..5 {
        let (mut ws, first) = open_raw(&relay, "crowded", "").await;
        let first = first.unwrap_or_else(|| panic!("attempt {i}: closed without an error"));
        assert_error(
            &first,
            ErrorCode::ResourceExhausted,
            "--max-connections-per-database 5",
            "a sixth connection to one database",
        );
        let end = read_until_closed(&mut ws, Duration::from_secs(10)).await;
        assert!(
            end.is_some(),
            "attempt {i}: the refused connection is closed"
        );
    }
    let text = metrics_text(&relay).await;
    assert_eq!(refused(&text, "database"), 5.0, "{text}");
    // A closed connection gives its place back.
    drop(held.pop());
    eventually(Duration::from_secs(5), "a place is given back", || async {
        is_welcome(&open_raw(&relay, "crowded", "").await.1)
    })
    .await;
    bystander.finish("per database").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_per_subject_are_capped() {
    let relay = Relay::fresh(&[
        "--auth-secret",
        SECRET,
        "--max-connections-per-subject",
        "3",
    ]);
    let bystander = Bystander::start(&relay, &token(serde_json::json!({ "sub": "alice" }))).await;
    let mallory = token(serde_json::json!({ "sub": "mallory" }));
    let mut held = Vec::new();
    for i in 0..3 {
        let (ws, first) = open_raw(&relay, "db", &mallory).await;
        assert!(is_welcome(&first), "connection {i}: {first:?}");
        held.push(ws);
    }
    let (mut ws, first) = open_raw(&relay, "db", &mallory).await;
    assert_error(
        &first.expect("an error"),
        ErrorCode::ResourceExhausted,
        "--max-connections-per-subject 3",
        "a fourth connection of one subject",
    );
    assert!(read_until_closed(&mut ws, Duration::from_secs(10))
        .await
        .is_some());
    // A client token without a subject names nobody: refused, never counted as one user.
    let nobody = token(serde_json::json!({}));
    let (_ws, first) = open_raw(&relay, "db", &nobody).await;
    assert!(!is_welcome(&first), "a subjectless token: {first:?}");
    // An Auth to a full subject ends the connection with resource-exhausted.
    let (mut carol, first) =
        open_raw(&relay, "db", &token(serde_json::json!({ "sub": "carol" }))).await;
    assert!(is_welcome(&first));
    raw_send(
        &mut carol,
        Message::Binary(
            encode_client(&ClientMessage::Auth {
                token: mallory.clone(),
            })
            .into(),
        ),
    )
    .await;
    assert_refused_then_closed(
        &mut carol,
        ErrorCode::ResourceExhausted,
        "--max-connections-per-subject 3",
        "an Auth to a full subject",
    )
    .await;
    // An Auth to another subject moves the connection's place: mallory has room again.
    let mut moved = held.pop().unwrap();
    let dave = token(serde_json::json!({ "sub": "dave" }));
    raw_send(
        &mut moved,
        Message::Binary(encode_client(&ClientMessage::Auth { token: dave }).into()),
    )
    .await;
    raw_send(
        &mut moved,
        Message::Binary(encode_client(&ClientMessage::Ping { nonce: 7 }).into()),
    )
    .await;
    assert!(
        matches!(
            first_reply(&mut moved).await,
            Some(ServerMessage::Heartbeat { nonce: 7, .. })
        ),
        "the connection that moved to another subject stays open"
    );
    let (_again, first) = open_raw(&relay, "db", &mallory).await;
    assert!(is_welcome(&first), "mallory has room again: {first:?}");
    let text = metrics_text(&relay).await;
    assert_eq!(refused(&text, "subject"), 2.0, "{text}");
    bystander.finish("per subject").await;
}

/// When the relay closed a raw TCP connection, counted from `started` (`None`: it was
/// still open at `started + limit`).
async fn closed_within(mut tcp: TcpStream, started: Instant, limit: Duration) -> Option<Duration> {
    let mut buf = [0u8; 1024];
    tokio::time::timeout_at((started + limit).into(), async {
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return started.elapsed(),
                Ok(_) => {}
            }
        }
    })
    .await
    .ok()
}

/// A connection that sends the start of a request and then one header byte every 200 ms
/// until the relay closes it; how long that took (`None`: not within `limit`).
async fn dribble(addr: SocketAddr, limit: Duration) -> Option<Duration> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let started = Instant::now();
    let (mut r, mut w) = tcp.into_split();
    let writer = tokio::spawn(async move {
        let _ = w.write_all(b"GET /v1/ws HTTP/1.1\r\n").await;
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if w.write_all(b"X").await.is_err() {
                break;
            }
        }
    });
    let mut buf = [0u8; 1024];
    let r = tokio::time::timeout(limit, async {
        loop {
            match r.read(&mut buf).await {
                Ok(0) | Err(_) => return started.elapsed(),
                Ok(_) => {}
            }
        }
    })
    .await
    .ok();
    writer.abort();
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_http_connections_are_capped_and_timed_out() {
    let relay = Relay::fresh(&[
        "--max-pending-connections",
        "8",
        "--http-deadline-ms",
        "2000",
    ]);
    let bystander = Bystander::start(&relay, "").await;
    // Upgraded connections give their pending permit back: many more than 8 at once.
    let mut upgraded = Vec::new();
    for _ in 0..20 {
        upgraded.push(handshaken(&relay, "busy").await);
    }
    let opened = Instant::now();
    // Four that send nothing and four that dribble a header fill the pending slots.
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(TcpStream::connect(relay.addr).await.unwrap());
    }
    let dribblers: Vec<_> = (0..4)
        .map(|_| tokio::spawn(dribble(relay.addr, Duration::from_secs(8))))
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Past the cap, a connection is closed at once.
    for i in 0..6 {
        let tcp = TcpStream::connect(relay.addr).await.unwrap();
        let took = closed_within(tcp, Instant::now(), Duration::from_millis(1000)).await;
        assert!(
            took.is_some(),
            "extra connection {i} was not closed at once"
        );
    }
    // The idle and dribbling ones are gone by the deadline (2 s, plus slack).
    let mut took = Vec::new();
    for tcp in idle {
        took.push(closed_within(tcp, opened, Duration::from_secs(8)).await);
    }
    for d in dribblers {
        took.push(d.await.unwrap());
    }
    let elapsed: Vec<Duration> = took
        .iter()
        .map(|t| t.expect("a slow HTTP connection was not closed within 8 s"))
        .collect();
    eprintln!("slow HTTP connections closed after {elapsed:?} (deadline 2 s)");
    assert!(
        opened.elapsed() < Duration::from_secs(6),
        "slow HTTP connections outlived the deadline: {elapsed:?}"
    );
    // Room again: new clients connect, and the refusals were counted.
    let late = relay.client("busy").await;
    within(late.ping()).await.unwrap();
    let text = metrics_text(&relay).await;
    assert!(refused(&text, "pending") >= 6.0, "{text}");
    // The upgraded connections were not cut by the HTTP deadline.
    for ws in &mut upgraded {
        raw_send(
            ws,
            Message::Binary(encode_client(&ClientMessage::Ping { nonce: 1 }).into()),
        )
        .await;
        assert!(matches!(
            first_reply(ws).await,
            Some(ServerMessage::Heartbeat { .. })
        ));
    }
    bystander.finish("pending HTTP").await;
}

/// Resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_first_frame_is_refused_unread() {
    let relay = Relay::fresh(&[]);
    let bystander = Bystander::start(&relay, "").await;
    // A 1 MiB first frame: resource-exhausted from its header, then a close.
    let mut ws = raw_socket(&relay).await;
    raw_send(&mut ws, Message::Binary(vec![0u8; 1 << 20].into())).await;
    let end = read_until_closed(&mut ws, Duration::from_secs(10))
        .await
        .expect("the relay closes");
    assert_eq!(end.errors().len(), 1, "{end:?}");
    assert_error(
        end.errors()[0],
        ErrorCode::ResourceExhausted,
        "at most 65536",
        "a 1 MiB first frame",
    );
    assert!(end.close_frame, "{end:?}");
    // A Hello with a large token (auth is off: any token) fits; one over 64 KiB does not.
    let (_ws, first) = open_raw(&relay, "db", &"t".repeat(60_000)).await;
    assert!(is_welcome(&first), "a 60 KB Hello: {first:?}");
    let (mut ws, first) = open_raw(&relay, "db", &"t".repeat(70_000)).await;
    assert_error(
        &first.expect("an error"),
        ErrorCode::ResourceExhausted,
        "at most 65536",
        "a 70 KB Hello",
    );
    assert!(read_until_closed(&mut ws, Duration::from_secs(10))
        .await
        .is_some());
    // After the Hello, frames up to the protocol's limit are read (this one is garbage).
    let mut ws = handshaken(&relay, "db").await;
    raw_send(&mut ws, Message::Binary(vec![0xffu8; 1 << 20].into())).await;
    assert_refused_then_closed(
        &mut ws,
        ErrorCode::InvalidArgument,
        "malformed frame",
        "1 MiB of garbage after the Hello",
    )
    .await;

    // Thirty connections each announce a 16 MiB first frame, send 1 MiB of it and stall:
    // the relay refuses each from the header and buffers none of it.
    let before = rss_kib(relay.pid());
    let mut stalled = Vec::new();
    for _ in 0..30 {
        let mut ws = raw_socket(&relay).await;
        let MaybeTlsStream::Plain(tcp) = ws.get_mut() else {
            panic!("a plain socket")
        };
        let mut frame = vec![0x82u8, 0xff];
        frame.extend_from_slice(&(16u64 << 20).to_be_bytes());
        frame.extend_from_slice(&[1, 2, 3, 4]);
        frame.resize(frame.len() + (1 << 20), 0x55);
        let _ = within(tcp.write_all(&frame)).await;
        stalled.push(ws);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_kib(relay.pid());
    eprintln!("relay RSS {before} KiB before 30 stalled 16 MiB first frames, {after} KiB after");
    assert!(
        after < before + 20 * 1024,
        "the relay buffered the frames: RSS {before} -> {after} KiB"
    );
    for mut ws in stalled {
        let end = read_until_closed(&mut ws, Duration::from_secs(10)).await;
        assert!(
            end.is_some(),
            "a stalled oversized frame's connection is closed"
        );
    }
    let text = metrics_text(&relay).await;
    assert!(refused(&text, "hello_size") >= 32.0, "{text}");
    bystander.finish("oversized first frame").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tokens_databases_claim_limits_what_it_opens() {
    let relay = Relay::fresh(&["--auth-secret", SECRET]);
    let bystander = Bystander::start(&relay, &token(serde_json::json!({ "sub": "alice" }))).await;
    let url = relay.url();
    let only_a = token(serde_json::json!({ "sub": "u", "databases": ["a"] }));
    let a_as_string = token(serde_json::json!({ "sub": "u", "databases": "a" }));
    let any = token(serde_json::json!({ "sub": "u", "databases": "*" }));
    let unclaimed = token(serde_json::json!({ "sub": "u" }));
    for (what, tok, db, ok) in [
        ("[a] opens a", &only_a, "a", true),
        ("[a] opens b", &only_a, "b", false),
        ("\"a\" opens a", &a_as_string, "a", true),
        ("\"a\" opens b", &a_as_string, "b", false),
        ("\"*\" opens b", &any, "b", true),
        ("no claim opens b", &unclaimed, "b", true),
    ] {
        let r = within(Client::connect(&url, db, &unique("c"), tok)).await;
        match (r, ok) {
            (Ok(c), true) => within(c.ping()).await.map(|_| ()).unwrap(),
            (Err(e), false) => {
                assert_eq!(e.code(), Some(ErrorCode::PermissionDenied), "{what}: {e}")
            }
            (Ok(_), false) => panic!("{what}: opened"),
            (Err(e), true) => panic!("{what}: refused: {e}"),
        }
    }
    // The refusal names the claim, and comes before the database would be created.
    let (mut ws, first) = open_raw(&relay, "never", &only_a).await;
    assert_error(
        &first.expect("an error"),
        ErrorCode::PermissionDenied,
        "`databases` claim allows only [a]",
        "a Hello outside the claim",
    );
    assert!(read_until_closed(&mut ws, Duration::from_secs(10))
        .await
        .is_some());
    let text = metrics_text(&relay).await;
    assert!(!text.contains("database=\"never\""), "{text}");
    // A malformed claim makes the token invalid.
    let bad = token(serde_json::json!({ "sub": "u", "databases": 7 }));
    let e = within(Client::connect(&url, "a", "c", &bad))
        .await
        .expect_err("a bad claim");
    assert_eq!(e.code(), Some(ErrorCode::Unauthenticated), "{e}");

    // An Auth keeps the connection while its token allows the database, and ends it with
    // permission-denied when it does not.
    let (mut ws, first) = open_raw(&relay, "a", &only_a).await;
    assert!(is_welcome(&first));
    let a_and_c = token(serde_json::json!({ "sub": "u", "databases": ["c", "a"] }));
    for m in [
        ClientMessage::Auth { token: a_and_c },
        ClientMessage::Ping { nonce: 3 },
    ] {
        raw_send(&mut ws, Message::Binary(encode_client(&m).into())).await;
    }
    assert!(matches!(
        first_reply(&mut ws).await,
        Some(ServerMessage::Heartbeat { nonce: 3, .. })
    ));
    let only_b = token(serde_json::json!({ "sub": "u", "databases": ["b"] }));
    raw_send(
        &mut ws,
        Message::Binary(
            encode_client(&ClientMessage::Auth {
                token: only_b.clone(),
            })
            .into(),
        ),
    )
    .await;
    assert_refused_then_closed(
        &mut ws,
        ErrorCode::PermissionDenied,
        "may not open database `a`",
        "an Auth outside the claim",
    )
    .await;
    // Through the client: its listen on "a" ends when the token is replaced by one for "b".
    let c = within(Client::connect(&url, "a", &unique("c"), &only_a))
        .await
        .unwrap();
    let mut l = within(c.listen(&Query::collection(coll("x")), None))
        .await
        .unwrap();
    within(l.next()).await.unwrap();
    c.refresh_token(&only_b).unwrap();
    within(l.next())
        .await
        .expect_err("the listen ends with the connection");
    bystander.finish("databases claim").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_reset_mid_listen_give_everything_back() {
    let relay = Relay::fresh(&[
        "--max-connections-per-database",
        "10",
        "--max-connections-per-address",
        "12",
    ]);
    let bystander = Bystander::start(&relay, "").await;
    let listens = "hearth_active_listens{database=\"churn\"}";
    for round in 0..4 {
        let mut socks = Vec::new();
        for i in 0..10 {
            let mut ws = raw_socket(&relay).await;
            raw_send(&mut ws, Message::Binary(hello("churn").into())).await;
            assert!(
                is_welcome(&first_reply(&mut ws).await),
                "round {round}, connection {i}: its places were not given back"
            );
            for target_id in 1..=3 {
                let listen = encode_client(&ClientMessage::Listen {
                    target_id,
                    query: Query::collection(coll(&format!("c{target_id}"))),
                    resume_version: None,
                });
                raw_send(&mut ws, Message::Binary(listen.into())).await;
            }
            socks.push(ws);
        }
        eventually(Duration::from_secs(10), "all listens start", || async {
            metric(&metrics_text(&relay).await, listens) == Some(30.0)
        })
        .await;
        // Reset: RST, no Close frame, no FIN.
        for ws in socks {
            let MaybeTlsStream::Plain(tcp) = ws.get_ref() else {
                panic!("a plain socket")
            };
            tcp.set_zero_linger().unwrap();
            drop(ws);
        }
        eventually(
            Duration::from_secs(10),
            "everything is given back",
            || async {
                let text = metrics_text(&relay).await;
                metric(&text, listens) == Some(0.0)
                    && metric(&text, "hearth_connections_open") == Some(1.0)
            },
        )
        .await;
    }
    let text = metrics_text(&relay).await;
    assert_eq!(metric(&text, "hearth_connections_total"), Some(41.0));
    bystander.finish("reset mid-listen").await;
}

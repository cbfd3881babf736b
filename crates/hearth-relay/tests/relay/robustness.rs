//! Hostile and careless clients: malformed frames end only their own connection (with an
//! error or a clean close) while a well-behaved client keeps working; refused handshakes,
//! oversized documents and bad tokens get their typed errors; a slow consumer is dropped
//! while other listeners keep up.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use hearth_client::{Client, Listener};
use hearth_core::mutation::Mutation;
use hearth_core::protocol::codec::{decode_server, encode_client};
use hearth_core::protocol::{ClientMessage, ErrorCode, ServerMessage, PROTOCOL_VERSION};
use hearth_core::query::model::Query;
use hearth_core::value::Value;
use hearth_relay::auth::mint_hs256;
use tokio_tungstenite::tungstenite::Message;

use crate::harness::*;

/// A well-behaved client that proves the relay still serves: a write, its snapshot on a
/// listener, and a read.
struct Witness {
    client: Client,
    listener: Listener,
    n: i64,
}

impl Witness {
    async fn new(relay: &Relay, db: &str) -> Witness {
        let client = relay.client(db).await;
        let mut listener = within(client.listen(&Query::collection(coll("steady")), None))
            .await
            .unwrap();
        within(listener.next()).await.expect("first snapshot");
        Witness {
            client,
            listener,
            n: 0,
        }
    }

    async fn still_works(&mut self, after: &str) {
        self.n += 1;
        let doc = name(&format!("steady/d{}", self.n));
        let v = within(
            self.client
                .write(vec![Mutation::set(doc.clone(), map([("n", int(self.n))]))]),
        )
        .await
        .unwrap_or_else(|e| panic!("after {after}: the good client's write failed: {e}"));
        let snap = within(self.listener.next())
            .await
            .unwrap_or_else(|e| panic!("after {after}: the good client's listener failed: {e}"));
        assert_eq!(snap.version, v, "after {after}");
        assert_eq!(snap.documents.len() as i64, self.n, "after {after}");
        let got = within(self.client.get_one(&doc)).await.unwrap();
        assert!(got.is_some(), "after {after}");
    }
}

/// Sends `frame` and requires the relay to answer with an error or close cleanly.
async fn expect_refusal(ws: &mut RawSocket, frame: Message, what: &str) -> Ending {
    raw_send(ws, frame).await;
    let end = read_until_closed(ws, Duration::from_secs(10))
        .await
        .unwrap_or_else(|| panic!("{what}: the relay neither answered nor closed in 10 s"));
    assert!(
        !end.errors().is_empty() || end.close_frame,
        "{what}: neither an Error frame nor a clean close: {end:?}"
    );
    for e in end.errors() {
        if let ServerMessage::Error { code, .. } = e {
            assert_eq!(*code, ErrorCode::InvalidArgument, "{what}: {e:?}");
        }
    }
    end
}

fn random_bytes(rng: &mut Rng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

#[tokio::test]
async fn malformed_frames_end_only_their_own_connection() {
    let relay = Relay::fresh(&[]);
    let mut good = Witness::new(&relay, "hostile").await;
    let mut rng = Rng::from_env("malformed_frames");

    // Garbage instead of a Hello.
    let mut ws = raw_socket(&relay).await;
    expect_refusal(
        &mut ws,
        Message::Binary(random_bytes(&mut rng, 40).into()),
        "garbage first",
    )
    .await;
    good.still_works("garbage first").await;

    // Garbage after the handshake, of several sizes (an empty frame too).
    for len in [0, 1, 2, 17, 1000, 70_000] {
        let mut ws = handshaken(&relay, "hostile").await;
        let mut frame = random_bytes(&mut rng, len);
        if let Some(b) = frame.first_mut() {
            // Random, but not accidentally a message type (that is the truncation cases).
            *b |= 0x40;
        }
        let what = format!("{len} random bytes");
        expect_refusal(&mut ws, Message::Binary(frame.into()), &what).await;
        good.still_works(&what).await;
    }

    // Valid frames cut short at every few bytes.
    for frame in sample_frames() {
        for cut in (1..frame.len()).step_by((frame.len() / 6).max(1)) {
            let mut ws = handshaken(&relay, "hostile").await;
            let what = format!(
                "a frame of type {:#04x} truncated to {cut} of {} bytes",
                frame[0],
                frame.len()
            );
            expect_refusal(
                &mut ws,
                Message::Binary(frame[..cut].to_vec().into()),
                &what,
            )
            .await;
        }
        good.still_works("truncated frames").await;
    }

    // Trailing bytes, unknown types, a huge list count.
    let mut long = sample_frames()[0].clone();
    long.push(0);
    let huge_count = vec![0x03, 0x01, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F];
    for (what, frame) in [
        ("a trailing byte", long),
        ("unknown type 0x7f", vec![0x7F, 1, 2, 3]),
        ("a server message type", vec![0x87, 0x01]),
        ("a list count beyond the frame", huge_count),
    ] {
        let mut ws = handshaken(&relay, "hostile").await;
        expect_refusal(&mut ws, Message::Binary(frame.into()), what).await;
        good.still_works(what).await;
    }

    // A text frame.
    let mut ws = handshaken(&relay, "hostile").await;
    expect_refusal(
        &mut ws,
        Message::Text("{\"hello\": 1}".into()),
        "a text frame",
    )
    .await;
    good.still_works("a text frame").await;

    // A frame over the 16 MiB limit: refused without being buffered whole. The relay may
    // hang up while the frame is still being sent, so only require that the socket ends.
    let mut ws = handshaken(&relay, "hostile").await;
    let big = vec![0x04u8; (16 << 20) + 1024];
    let _ = within(futures_util::SinkExt::send(
        &mut ws,
        Message::Binary(big.into()),
    ))
    .await;
    let end = read_until_closed(&mut ws, Duration::from_secs(10)).await;
    assert!(
        end.is_some(),
        "a frame over 16 MiB: the connection did not end"
    );
    eprintln!("frame over 16 MiB: {end:?}");
    good.still_works("a frame over 16 MiB").await;

    // A second Hello is refused without ending the connection.
    let mut ws = handshaken(&relay, "hostile").await;
    raw_send(&mut ws, Message::Binary(hello("hostile").into())).await;
    match within(ws.next()).await {
        Some(Ok(Message::Binary(b))) => match decode_server(&b) {
            Ok(ServerMessage::Error { code, .. }) => {
                assert_eq!(code, ErrorCode::FailedPrecondition)
            }
            other => panic!("a second Hello: {other:?}"),
        },
        other => panic!("a second Hello: {other:?}"),
    }

    // Mutated valid frames: whatever they decode to, the relay must survive them.
    let frames = sample_frames();
    for i in 0..60 {
        let mut f = frames[i % frames.len()].clone();
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(f.len() as u64) as usize;
            f[at] ^= 1 << rng.below(8);
        }
        let mut ws = handshaken(&relay, "fuzz").await;
        raw_send(&mut ws, Message::Binary(f.into())).await;
        // Give it a moment to react; then hang up.
        let _ = tokio::time::timeout(Duration::from_millis(20), ws.next()).await;
    }
    good.still_works("mutated frames").await;
    let (status, _) = http_get(relay.addr, "/healthz").await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn refused_handshakes_get_typed_errors() {
    let relay = Relay::fresh(&[]);
    // A protocol version this relay does not speak.
    let mut ws = raw_socket(&relay).await;
    let hello2 = encode_client(&ClientMessage::Hello {
        protocol_version: PROTOCOL_VERSION + 1,
        database: "db".into(),
        client_id: "c".into(),
        token: String::new(),
    });
    raw_send(&mut ws, Message::Binary(hello2.into())).await;
    let end = read_until_closed(&mut ws, Duration::from_secs(10))
        .await
        .expect("closed");
    match end.errors().first() {
        Some(ServerMessage::Error { code, message, .. }) => {
            assert_eq!(*code, ErrorCode::FailedPrecondition);
            assert!(
                message.contains(&(PROTOCOL_VERSION + 1).to_string()),
                "{message}"
            );
        }
        other => panic!("wrong protocol version: {other:?}"),
    }
    // A first message that is not a Hello.
    let mut ws = raw_socket(&relay).await;
    let ping = encode_client(&ClientMessage::Ping { nonce: 1 });
    raw_send(&mut ws, Message::Binary(ping.into())).await;
    let end = read_until_closed(&mut ws, Duration::from_secs(10))
        .await
        .expect("closed");
    assert!(!end.errors().is_empty() || end.close_frame, "{end:?}");

    // Invalid database names and client ids.
    let long = "d".repeat(65);
    for (db, id) in [
        ("bad name!", "c"),
        ("", "c"),
        (long.as_str(), "c"),
        ("a/b", "c"),
        ("good", ""),
    ] {
        let err = within(Client::connect(&relay.url(), db, id, ""))
            .await
            .expect_err("refused");
        assert_eq!(
            err.code(),
            Some(ErrorCode::InvalidArgument),
            "db {db:?} id {id:?}: {err}"
        );
    }
    // The relay still takes good clients.
    let c = relay.client("good").await;
    within(c.ping()).await.unwrap();
}

/// Sends raw bytes on a fresh TCP connection and reads until the relay closes it.
async fn raw_http(relay: &Relay, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = within(tokio::net::TcpStream::connect(relay.addr))
        .await
        .unwrap();
    within(stream.write_all(request.as_bytes())).await.unwrap();
    let mut buf = vec![0; 4096];
    let n = within(stream.read(&mut buf)).await.unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test]
async fn the_websocket_transport_follows_rfc_6455() {
    let relay = Relay::fresh(&[]);
    let host = relay.addr;
    // The handshake: the accept key of RFC 6455 §1.3's example, and refusals that say why.
    let ok = raw_http(&relay, &format!("GET /v1/ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")).await;
    assert!(ok.starts_with("HTTP/1.1 101"), "{ok}");
    assert!(
        ok.to_ascii_lowercase()
            .contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="),
        "{ok}"
    );
    let plain = raw_http(
        &relay,
        &format!("GET /v1/ws HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert!(plain.starts_with("HTTP/1.1 426"), "{plain}");
    let old = raw_http(&relay, &format!("GET /v1/ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 8\r\nConnection: close\r\n\r\n")).await;
    assert!(old.starts_with("HTTP/1.1 426"), "{old}");
    assert!(
        old.to_ascii_lowercase()
            .contains("sec-websocket-version: 13"),
        "{old}"
    );
    let keyless = raw_http(&relay, &format!("GET /v1/ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n")).await;
    assert!(keyless.starts_with("HTTP/1.1 400"), "{keyless}");

    // A Ping is answered with a Pong carrying its payload, in order with the replies.
    let mut ws = raw_socket(&relay).await;
    raw_send(&mut ws, Message::Binary(hello("transport").into())).await;
    let welcome = within(ws.next()).await.unwrap().unwrap();
    assert!(matches!(
        decode_server(&welcome.into_data()).unwrap(),
        ServerMessage::Welcome { .. }
    ));
    raw_send(&mut ws, Message::Ping(b"are you there".to_vec().into())).await;
    let ping = encode_client(&ClientMessage::Ping { nonce: 7 });
    raw_send(&mut ws, Message::Binary(ping.into())).await;
    let mut saw = Vec::new();
    while saw.len() < 2 {
        match within(ws.next()).await.unwrap().unwrap() {
            Message::Pong(p) => saw.push(format!("pong {}", String::from_utf8_lossy(&p))),
            Message::Binary(b) => match decode_server(&b).unwrap() {
                ServerMessage::Heartbeat { nonce, .. } => saw.push(format!("heartbeat {nonce}")),
                other => panic!("unexpected {other:?}"),
            },
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(saw, ["pong are you there", "heartbeat 7"]);
    // A Close is answered with a Close, and then the relay hangs up.
    raw_send(&mut ws, Message::Close(None)).await;
    let end = read_until_closed(&mut ws, Duration::from_secs(10))
        .await
        .expect("closed");
    assert!(end.close_frame, "{end:?}");
    assert!(end.transport_error.is_none(), "{end:?}");
    assert!(end.messages.is_empty(), "{end:?}");
    // The relay keeps serving.
    within(relay.client("transport").await.ping())
        .await
        .unwrap();
}

#[tokio::test]
async fn databases_are_served_by_policy() {
    // With a list, only the listed databases are served (created at start); another name
    // is refused with not-found, and nothing is created for it.
    let relay = Relay::fresh(&["--databases", "alpha,beta"]);
    let c = relay.client("alpha").await;
    within(c.write(vec![Mutation::set(name("t/1"), map([("a", int(1))]))]))
        .await
        .unwrap();
    within(relay.client("beta").await.ping()).await.unwrap();
    for _ in 0..2 {
        let err = within(Client::connect(&relay.url(), "gamma", "c", ""))
            .await
            .expect_err("not served");
        assert_eq!(err.code(), Some(ErrorCode::NotFound), "{err}");
        assert!(err.to_string().contains("alpha, beta"), "{err}");
    }
    // The log names each database created: the listed ones, never the refused one.
    let log = relay.log();
    assert!(log.contains("database=alpha"), "{log}");
    assert!(!log.contains("database=gamma"), "{log}");

    // Without a list, databases are created on first use up to --max-databases; past it a
    // new name is refused with resource-exhausted, and the existing ones keep working.
    let relay = Relay::fresh(&["--max-databases", "2"]);
    let one = relay.client("one").await;
    let two = relay.client("two").await;
    let err = within(Client::connect(&relay.url(), "three", "c", ""))
        .await
        .expect_err("over the maximum");
    assert_eq!(err.code(), Some(ErrorCode::ResourceExhausted), "{err}");
    assert!(err.to_string().contains("--max-databases"), "{err}");
    within(one.ping()).await.unwrap();
    within(two.write(vec![Mutation::set(name("t/1"), map([("a", int(1))]))]))
        .await
        .unwrap();
    within(relay.client("one").await.ping()).await.unwrap();
}

#[tokio::test]
async fn an_oversized_document_is_refused() {
    // The large strings are not indexed: an index entry holds its whole value, and the
    // PostgreSQL store refuses one over 2,400 bytes (`scale_out`).
    let dir = TempDir::new("oversized");
    let indexes = dir.file(
        "indexes.json",
        r#"{ "fieldOverrides": [
            { "collectionGroup": "big", "fieldPath": "s", "indexes": [] },
            { "collectionGroup": "big", "fieldPath": "a", "indexes": [] },
            { "collectionGroup": "big", "fieldPath": "b", "indexes": [] } ] }"#,
    );
    let relay = Relay::fresh(&["--indexes", indexes.to_str().unwrap()]);
    let c = relay.client("big").await;
    let big = "x".repeat((1 << 20) + 100);
    let err = within(c.write(vec![Mutation::set(name("big/one"), map([("s", s(&big))]))]))
        .await
        .expect_err("over 1 MiB");
    assert_eq!(err.code(), Some(ErrorCode::InvalidArgument), "{err}");
    assert!(
        err.to_string().contains("1 MiB") || err.to_string().contains("1048576"),
        "{err}"
    );
    // The same limit reached through a transform of a stored document.
    let half = "y".repeat(600 << 10);
    within(c.write(vec![Mutation::set(name("big/two"), map([("a", s(&half))]))]))
        .await
        .unwrap();
    let err = within(c.write(vec![Mutation::update(
        name("big/two"),
        vec![(fp("b"), Some(s(&half)))],
    )]))
    .await
    .expect_err("grows over 1 MiB");
    assert_eq!(err.code(), Some(ErrorCode::InvalidArgument), "{err}");
    // Just under the limit is fine, and reaches listeners.
    let mut l = within(c.listen(&Query::collection(coll("big")), None))
        .await
        .unwrap();
    within(l.next()).await.unwrap();
    let ok = "z".repeat((1 << 20) - 1000);
    within(c.write(vec![Mutation::set(name("big/three"), map([("s", s(&ok))]))]))
        .await
        .expect("just under 1 MiB");
    let snap = within(l.next()).await.unwrap();
    assert!(snap
        .documents
        .iter()
        .any(|d| d.fields.get("s") == Some(&Value::String(ok.clone()))));
    assert_eq!(within(c.get_one(&name("big/one"))).await.unwrap(), None);
    // A batch too big for one frame is refused by the client before it is sent.
    let part = "w".repeat(900 << 10);
    let batch = (0..20)
        .map(|i| Mutation::set(name(&format!("big/many{i}")), map([("s", s(&part))])))
        .collect();
    let err = within(c.write(batch))
        .await
        .expect_err("over the frame limit");
    assert_eq!(err.code(), Some(ErrorCode::InvalidArgument), "{err}");
    within(c.ping()).await.expect("the connection is unharmed");
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[tokio::test]
async fn tokens_are_verified() {
    let relay = Relay::fresh(&["--auth-secret", "s3cret"]);
    let url = relay.url();
    let cases = [
        ("no token", String::new()),
        ("not a jwt", "abc.def".to_owned()),
        ("expired", mint_hs256(b"s3cret", "alice", now_unix() - 60)),
        (
            "wrong secret",
            mint_hs256(b"other", "alice", now_unix() + 600),
        ),
    ];
    for (what, token) in cases {
        let err = within(Client::connect(&url, "auth", "c", &token))
            .await
            .expect_err(what);
        assert_eq!(
            err.code(),
            Some(ErrorCode::Unauthenticated),
            "{what}: {err}"
        );
    }
    let good = mint_hs256(b"s3cret", "alice", now_unix() + 600);
    let c = within(Client::connect(&url, "auth", "c", &good))
        .await
        .expect("a valid token");
    within(c.write(vec![Mutation::set(name("a/b"), map([]))]))
        .await
        .unwrap();

    // A token that expires while connected: requests are refused until it is refreshed.
    let short = mint_hs256(b"s3cret", "bob", now_unix() + 2);
    let c = within(Client::connect(&url, "auth", "c2", &short))
        .await
        .unwrap();
    within(c.get_one(&name("a/b"))).await.unwrap();
    let mut watching = within(c.listen(&Query::collection(coll("a")), None))
        .await
        .unwrap();
    within(watching.next()).await.unwrap();
    // Its listens end with unauthenticated when it expires, without a request to notice.
    let ended = within(watching.next())
        .await
        .expect_err("the listen ends at the token's expiry");
    assert_eq!(ended.code(), Some(ErrorCode::Unauthenticated), "{ended}");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let err = within(c.get_one(&name("a/b")))
        .await
        .expect_err("expired meanwhile");
    assert_eq!(err.code(), Some(ErrorCode::Unauthenticated), "{err}");
    c.refresh_token(&mint_hs256(b"s3cret", "bob", now_unix() + 600))
        .unwrap();
    within(c.get_one(&name("a/b")))
        .await
        .expect("a refreshed token");

    // A refused token ends the connection (protocol §2.2): the identity before it does not
    // stay in force.
    let mut l = within(c.listen(&Query::collection(coll("a")), None))
        .await
        .unwrap();
    within(l.next()).await.unwrap();
    c.refresh_token(&mint_hs256(b"wrong", "mallory", now_unix() + 600))
        .unwrap();
    within(l.next())
        .await
        .expect_err("the connection ends with the refused token");
    within(c.get_one(&name("a/b")))
        .await
        .expect_err("nothing is served after a refused token");
}

#[tokio::test]
async fn a_slow_consumer_is_dropped_while_others_keep_up() {
    // The payload field is exempt from indexing: the test is about fan-out, not indexes.
    let dir = TempDir::new("slow");
    let indexes = dir.payload_exempt_indexes("busy");
    // With the connections' debug log: a failure shows how the slow one ended.
    let relay = Relay::start_with_env(
        dir.path(),
        &["--max-outbound-bytes", "65536", "--indexes", &indexes],
        &[("HEARTH_LOG", "info,hearth_relay::conn=debug")],
    );
    let writer = relay.client("busy").await;
    let q = Query::collection(coll("busy"));
    let mut good = within(writer.listen(&q, None)).await.unwrap();
    within(good.next()).await.unwrap();

    // The slow one listens and then never reads again.
    let mut slow = handshaken(&relay, "busy").await;
    let listen = encode_client(&ClientMessage::Listen {
        target_id: 1,
        query: q.clone(),
        resume_version: None,
    });
    raw_send(&mut slow, Message::Binary(listen.into())).await;

    // ~48 KiB of changes per write (under the 64 KiB bound for one frame), until the slow
    // consumer's socket buffers and then its queue are full.
    let payload = "p".repeat(12 << 10);
    let mut dropped = false;
    for i in 0..250 {
        let batch = (0..4)
            .map(|k| {
                Mutation::set(
                    name(&format!("busy/d{k}")),
                    map([("i", int(i)), ("p", s(&payload))]),
                )
            })
            .collect();
        let v = within(writer.write(batch)).await.unwrap();
        let snap = within(good.next())
            .await
            .expect("the good listener keeps up");
        assert_eq!(snap.version, v);
        if i % 25 == 24 {
            let (_, m) = http_get(relay.addr, "/metrics").await;
            if metric(&m, "hearth_slow_consumers_dropped_total").unwrap_or(0.0) >= 1.0 {
                dropped = true;
                break;
            }
        }
    }
    // The drop must not wait for the slow consumer to read (it never will).
    if !dropped {
        for _ in 0..50 {
            let (_, m) = http_get(relay.addr, "/metrics").await;
            if metric(&m, "hearth_slow_consumers_dropped_total").unwrap_or(0.0) >= 1.0 {
                dropped = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // The dropped connection finishes closing shortly after the drop is counted.
    let mut open = None;
    for _ in 0..50 {
        let (_, m) = http_get(relay.addr, "/metrics").await;
        open = metric(&m, "hearth_connections_open");
        if open == Some(1.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The good listener still follows.
    let v = within(writer.write(vec![Mutation::delete(name("busy/d0"))]))
        .await
        .unwrap();
    let snap = within(good.next()).await.unwrap();
    assert_eq!(snap.version, v);
    // When the slow one finally reads, its stream ends with resource-exhausted.
    let end = read_until_closed(&mut slow, Duration::from_secs(20))
        .await
        .expect("ends");
    let last_error = end.errors().last().cloned().cloned();
    assert!(
        dropped,
        "the slow consumer was never dropped while it did not read (connections open: {open:?}); \
         once it read, it got {} frames and then {last_error:?}",
        end.messages.len()
    );
    assert_eq!(
        open,
        Some(1.0),
        "only the writer is left; log:\n{}",
        relay.log()
    );
    // A consumer that stopped reading is cut off without waiting to deliver anything more:
    // its stream ends, and any error it still receives says why.
    assert!(
        matches!(
            last_error,
            None | Some(ServerMessage::Error {
                code: ErrorCode::ResourceExhausted,
                ..
            })
        ),
        "{last_error:?}"
    );
}

/// A TCP proxy to the relay that can stop forwarding (a link that silently holds frames,
/// as a browser's offline mode does).
async fn freezable_proxy(
    to: std::net::SocketAddr,
    frozen: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let Ok(outbound) = tokio::net::TcpStream::connect(to).await else {
                return;
            };
            let (ri, wi) = inbound.into_split();
            let (ro, wo) = outbound.into_split();
            for (mut r, mut w) in [
                (
                    Box::new(ri) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
                    Box::new(wo) as Box<dyn tokio::io::AsyncWrite + Unpin + Send>,
                ),
                (Box::new(ro) as _, Box::new(wi) as _),
            ] {
                let frozen = frozen.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 16 << 10];
                    loop {
                        let n = match r.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        while frozen.load(std::sync::atomic::Ordering::Relaxed) {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        if w.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        }
    });
    addr
}

#[tokio::test]
async fn a_silent_link_is_detected_by_heartbeats() {
    let relay = Relay::fresh(&["--heartbeat-ms", "300"]);
    let frozen = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let proxy = freezable_proxy(relay.addr, frozen.clone()).await;
    let c = within(Client::connect(
        &format!("ws://{proxy}/v1/ws"),
        "silent",
        "c",
        "",
    ))
    .await
    .unwrap();
    let mut l = within(c.listen(&Query::collection(coll("s")), None))
        .await
        .unwrap();
    within(l.next()).await.unwrap();
    // Idle, but heartbeats keep it alive.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !c.is_closed(),
        "an idle connection with heartbeats was declared dead"
    );
    within(c.ping()).await.unwrap();

    frozen.store(true, std::sync::atomic::Ordering::Relaxed);
    let started = std::time::Instant::now();
    let err = within(l.next()).await.expect_err("the link went silent");
    assert!(matches!(err, hearth_client::ClientError::Io(_)), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "detected after {:?}",
        started.elapsed()
    );
    assert!(c.is_closed());
    assert!(within(c.ping()).await.is_err());
    frozen.store(false, std::sync::atomic::Ordering::Relaxed);
}

//! Operating the relay: health and metrics endpoints, and a graceful shutdown on SIGTERM
//! that loses no acknowledged write and exits 0.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hearth_client::ClientError;
use hearth_core::mutation::Mutation;
use hearth_core::path::DocumentName;
use hearth_core::protocol::ErrorCode;
use hearth_core::query::model::Query;

use crate::harness::*;

#[tokio::test]
async fn health_and_metrics_endpoints() {
    let relay = Relay::fresh(&["--heartbeat-ms", "100"]);
    let (status, body) = http_get(relay.addr, "/healthz").await;
    assert_eq!(status, 200);
    assert_eq!(body.lines().next(), Some("ok"));
    assert!(body.contains("open: no security rules"), "{body}");

    let c = relay.client("metrics").await;
    let mut l = within(c.listen(&Query::collection(coll("m")), None))
        .await
        .unwrap();
    within(l.next()).await.unwrap();
    within(c.write(vec![Mutation::set(name("m/a"), map([("x", int(1))]))]))
        .await
        .unwrap();
    within(l.next()).await.unwrap();
    // Heartbeats arrive on an idle connection.
    let seen = c.last_seen();
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert!(
        c.last_seen() > seen,
        "no heartbeat within 350 ms at --heartbeat-ms 100"
    );
    assert_eq!(c.heartbeat_interval(), Duration::from_millis(100));

    let (status, text) = http_get(relay.addr, "/metrics").await;
    assert_eq!(status, 200);
    for family in [
        "hearth_connections_open",
        "hearth_commits_total",
        "hearth_active_listens",
        "hearth_commit_latency_seconds",
        "hearth_fanout_latency_seconds",
        "hearth_slow_consumers_dropped_total",
    ] {
        assert!(text.contains(family), "/metrics lacks {family}:\n{text}");
    }
    assert_eq!(
        metric(&text, "hearth_connections_open"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        metric(&text, "hearth_commits_total{database=\"metrics\"}"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        metric(&text, "hearth_active_listens{database=\"metrics\"}"),
        Some(1.0),
        "{text}"
    );
    let (status, _) = http_get(relay.addr, "/nothing-here").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn sigterm_drains_and_keeps_every_acknowledged_write() {
    let dir = TempDir::new("sigterm");
    let mut relay = Relay::start(dir.path(), &[]);
    let acked: Arc<Mutex<Vec<(DocumentName, i64)>>> = Arc::default();
    let mut tasks = Vec::new();
    for w in 0..6 {
        let c = relay.client("drain").await;
        let acked = acked.clone();
        tasks.push(tokio::spawn(async move {
            let mut refused = None;
            for i in 0.. {
                let n = name(&format!("drained/w{w}-{i:05}"));
                let write = c.write(vec![Mutation::set(n.clone(), map([("i", int(i))]))]);
                match within(write).await {
                    Ok(_) => acked.lock().unwrap().push((n, i)),
                    Err(e) => {
                        refused = Some(e);
                        break;
                    }
                }
            }
            refused
        }));
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    let before = acked.lock().unwrap().len();
    assert!(before > 0, "no write was acknowledged before the signal");
    relay.sigterm();
    let mut endings = Vec::new();
    for t in tasks {
        endings.push(within(t).await.unwrap());
    }
    let status = relay.wait_exit(Duration::from_secs(20));
    assert!(
        status.success(),
        "exit status {status:?}; log:\n{}",
        relay.log()
    );

    let acked = acked.lock().unwrap().clone();
    eprintln!(
        "{} writes acknowledged ({before} before SIGTERM)",
        acked.len()
    );
    let relay = Relay::start(dir.path(), &[]);
    let c = relay.client("drain").await;
    for chunk in acked.chunks(200) {
        let names = chunk.iter().map(|(n, _)| n.clone()).collect();
        let (docs, _) = within(c.get(names)).await.unwrap();
        for ((n, i), (got_name, doc)) in chunk.iter().zip(docs) {
            assert_eq!(*n, got_name);
            let doc = doc.unwrap_or_else(|| panic!("acknowledged write of {n} lost"));
            assert_eq!(doc.fields.get("i"), Some(&int(*i)), "{n}");
        }
    }
    // The write each writer had in flight at the signal: committed or not?
    let next: Vec<DocumentName> = (0..6)
        .map(|w| {
            let done = acked
                .iter()
                .filter(|(n, _)| n.id().starts_with(&format!("w{w}-")))
                .count();
            name(&format!("drained/w{w}-{done:05}"))
        })
        .collect();
    let (in_flight, _) = within(c.get(next)).await.unwrap();
    let committed = in_flight.iter().filter(|(_, d)| d.is_some()).count();
    eprintln!("of the 6 writes in flight at SIGTERM, {committed} committed");
    let (status, _) = http_get(relay.addr, "/healthz").await;
    assert_eq!(status, 200);
    // The drain (see `relay::run`): in-flight writes are acknowledged, then each socket is
    // closed with a close frame, or later writes are refused with a typed error. A reset
    // connection means the process exited before its connections drained.
    eprintln!("writers stopped with {endings:?}");
    for e in endings.iter().flatten() {
        assert!(
            matches!(e, ClientError::Closed) || e.code() == Some(ErrorCode::Unavailable),
            "a writer's connection ended with {e:?}, not a drain (clean close or `unavailable`)"
        );
    }
}

#[tokio::test]
async fn sigterm_closes_a_connection_whose_client_stopped_reading() {
    use hearth_core::protocol::codec::encode_client;
    use hearth_core::protocol::ClientMessage;
    use tokio_tungstenite::tungstenite::Message;
    // A listener that stops reading while its socket buffers fill, but stays under the
    // slow-consumer bound (64 MiB here): the drain must still close it and exit.
    let dir = TempDir::new("stalled");
    let indexes = dir.payload_exempt_indexes("stall");
    let mut relay = Relay::start(
        dir.path(),
        &["--max-outbound-bytes", "67108864", "--indexes", &indexes],
    );
    let writer = relay.client("stall").await;
    let mut stalled = handshaken(&relay, "stall").await;
    let listen = encode_client(&ClientMessage::Listen {
        target_id: 1,
        query: Query::collection(coll("stall")),
        resume_version: None,
    });
    raw_send(&mut stalled, Message::Binary(listen.into())).await;
    // 60 KiB changes until the stalled listener has a backlog (its socket buffers are
    // full), at most about 48 MiB.
    let payload = "p".repeat(60 << 10);
    let mut backlog = 0.0;
    for i in 0..800 {
        let doc = Mutation::set(
            name(&format!("stall/d{}", i % 8)),
            map([("i", int(i)), ("p", s(&payload))]),
        );
        within(writer.write(vec![doc])).await.unwrap();
        if i % 20 == 19 {
            let (_, m) = http_get(relay.addr, "/metrics").await;
            backlog = metric(&m, "hearth_outbound_queued_bytes").unwrap_or(0.0);
            if backlog > 0.0 {
                break;
            }
        }
    }
    assert!(backlog > 0.0, "the stalled listener has a backlog");
    let started = std::time::Instant::now();
    relay.sigterm();
    let status = relay.wait_exit(Duration::from_secs(20));
    assert!(status.success(), "exit status {status:?}");
    // The close waits at most CLOSE_FLUSH (5 s) for the stalled socket, then a second for
    // the client's side of the close.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the drain took {:?}",
        started.elapsed()
    );
    drop(stalled);
}

/// `/metrics` names every database: with `--metrics-token` it is served only with that bearer
/// token (without one, to loopback peers only, which every other test here is).
#[tokio::test]
async fn metrics_can_require_a_bearer_token() {
    let relay = Relay::fresh(&["--metrics-token", "t0k3n"]);
    let get = |auth: Option<&'static str>| async move {
        let header = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
        http_get_raw(relay.addr, "/metrics", &header).await
    };
    for auth in [
        None,
        Some("Bearer wrong"),
        Some("Basic t0k3n"),
        Some("Bearer t0k3n0"),
    ] {
        let r = get(auth).await;
        assert!(r.starts_with("HTTP/1.1 401"), "{auth:?}: {r}");
        assert!(!r.contains("hearth_"), "{auth:?} leaks metrics: {r}");
    }
    let r = get(Some("Bearer t0k3n")).await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert!(r.contains("hearth_"), "{r}");
}

/// `--static-dir` files carry a validator: asked again with it, an unchanged file is `304
/// Not Modified` (so the browser keeps its cached response, and Chrome the wasm it compiled
/// from it); a rebuilt file is served whole with a new one.
#[tokio::test]
async fn static_files_are_revalidated_not_sent_again() {
    let site = TempDir::new("site");
    let file = site.path().join("hearth_bg.wasm");
    std::fs::write(&file, b"\0asm first build").unwrap();
    let site_arg = site.path().to_str().unwrap().to_owned();
    let relay = Relay::fresh(&["--static-dir", &site_arg]);
    let get = |if_none_match: Option<String>| async move {
        let header = if_none_match.map_or(String::new(), |t| format!("If-None-Match: {t}\r\n"));
        http_get_raw(relay.addr, "/hearth_bg.wasm", &header).await
    };
    let etag = |r: &str| {
        r.lines()
            .find_map(|l| l.strip_prefix("etag: "))
            .map(|t| t.trim().to_owned())
            .unwrap_or_else(|| panic!("no etag in {r}"))
    };
    let first = get(None).await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    assert!(first.contains("cache-control: no-cache"), "{first}");
    assert!(first.ends_with("\0asm first build"), "{first}");
    let tag = etag(&first);
    let again = get(Some(tag.clone())).await;
    assert!(again.starts_with("HTTP/1.1 304"), "{again}");
    assert!(!again.contains("first build"), "a 304 has no body: {again}");
    assert_eq!(etag(&again), tag);
    // Another tag (an older build's) gets the file.
    let other = get(Some("\"0-0\"".into())).await;
    assert!(other.starts_with("HTTP/1.1 200"), "{other}");
    // Rebuilt: a new tag, and the old one no longer matches.
    std::fs::write(&file, b"\0asm the second build").unwrap();
    let rebuilt = get(Some(tag.clone())).await;
    assert!(rebuilt.starts_with("HTTP/1.1 200"), "{rebuilt}");
    assert!(rebuilt.ends_with("\0asm the second build"), "{rebuilt}");
    assert_ne!(etag(&rebuilt), tag);
}

//! Writes from a client that sends faster than its database commits: the relay holds at
//! most `--max-inflight-write-bytes-per-connection` of one connection's unacknowledged
//! batches and at most `--max-inflight-write-bytes` queued per database; past either, it
//! reads nothing more from the writing connection until there is room (TCP backpressure:
//! nothing refused or lost, the order kept). A bystander on another database keeps writing
//! meanwhile. Index entries per document and per batch are limited too.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use futures_util::{SinkExt, StreamExt};
use hearth_core::error::ErrorCode;
use hearth_core::mutation::Mutation;
use hearth_core::protocol::codec::{decode_server, encode_client};
use hearth_core::protocol::{ClientMessage, ServerMessage};
use tokio_tungstenite::tungstenite::Message;

use crate::harness::*;

/// The relay's peak resident memory so far (`VmHWM`), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/<pid>/status");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb * 1024
}

/// A write of one document with a `size`-byte string field `p` (exempt from indexing).
fn heavy(i: usize, size: usize) -> Mutation {
    Mutation::set(
        name(&format!("big/d{i:04}")),
        map([("p", s(&"p".repeat(size))), ("n", int(i as i64))]),
    )
}

/// Document `i` of `big` with `fields` integer fields (each indexed both ways).
fn many_fields(i: u64, fields: usize) -> Mutation {
    let mut m = hearth_core::value::Map::new();
    for f in 0..fields {
        m.insert(format!("f{f}"), int((f as i64) ^ (i as i64)));
    }
    Mutation::set(name(&format!("big/m{i:04}")), m)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_pipelining_large_writes_is_held_to_its_byte_budget() {
    // Each batch is one document of 200 indexed fields (about 2 KB on the wire, 400 index
    // entries to write): the relay reads them far faster than it commits them. The
    // store's page cache is bounded too, so memory growth is what the relay buffers.
    let relay = Relay::fresh(&[
        "--cache-mib",
        "32",
        "--max-inflight-write-bytes-per-connection",
        "20000",
    ]);
    let calm = relay.client("calm").await;
    within(calm.write(vec![Mutation::set(name("calm/a"), map([("n", int(0))]))]))
        .await
        .unwrap();
    // 600 batches, encoded beforehand and sent on a raw socket as fast as it takes them.
    let n = 600u64;
    let frames: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            encode_client(&ClientMessage::Write {
                request_id: i + 1,
                batch_id: i + 1,
                mutations: vec![many_fields(i, 200)],
                reads: vec![],
            })
        })
        .collect();
    let before = peak_rss(relay.pid());
    let (mut tx, mut rx) = handshaken(&relay, "flood").await.split();
    let started = Instant::now();
    let acks = tokio::spawn(async move {
        let mut acked = 0;
        while acked < n {
            match rx.next().await {
                Some(Ok(Message::Binary(b))) => match decode_server(&b) {
                    Ok(ServerMessage::WriteResult { .. }) => acked += 1,
                    Ok(ServerMessage::Error { code, message, .. }) => {
                        panic!("a write was refused: {code:?} {message}")
                    }
                    _ => {}
                },
                Some(Ok(_)) => {}
                other => panic!("the connection ended after {acked} acknowledgements: {other:?}"),
            }
        }
        acked
    });
    let sender = tokio::spawn(async move {
        for f in frames {
            tx.send(Message::Binary(f.into())).await.unwrap();
        }
        tx
    });
    let bystander = async {
        let mut worst = Duration::ZERO;
        for i in 0..30 {
            let t = Instant::now();
            within(calm.write(vec![Mutation::set(name("calm/a"), map([("n", int(i))]))]))
                .await
                .expect("the bystander's write succeeds");
            worst = worst.max(t.elapsed());
        }
        worst
    };
    // The relay's write queue for the flooding database, sampled all along.
    let (sampling, sampler) = sample_queue_depth(relay.addr, "flood");
    let worst = within_for(Duration::from_secs(60), bystander).await;
    let acked = within_for(Duration::from_secs(180), acks).await.unwrap();
    let took = started.elapsed();
    let _tx = within(sender).await.unwrap();
    sampling.store(false, Ordering::Relaxed);
    let deepest = within(sampler).await.unwrap();
    let grew = peak_rss(relay.pid()).saturating_sub(before);
    eprintln!(
        "pipelined {acked} writes of 200 indexed fields in {took:?}; deepest write queue {deepest} batches; relay peak memory grew {} MiB; bystander's slowest write {worst:?}",
        grew >> 20
    );
    // 20 KB in flight is about 10 of these batches: the queue never holds more.
    assert!(
        deepest <= 12.0,
        "the relay queued {deepest} batches of one connection past its 20 KB budget"
    );
}

/// Eight connections pipelining 1 MB batches into one database with a 3 MB queue: the
/// queue never holds more than its limit, the writers wait their turn (nothing is refused
/// or lost, each connection's order is kept), and another database's writes go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_past_its_queued_bytes_holds_its_writers() {
    let dir = TempDir::new("db-bytes");
    let indexes = dir.payload_exempt_indexes("big");
    let relay = Relay::fresh(&[
        "--indexes",
        &indexes,
        "--max-inflight-write-bytes",
        "3000000",
    ]);
    let calm = relay.client("calm").await;
    let (sampling, sampler) = sample_queue_depth(relay.addr, "flood");
    let mut tasks = Vec::new();
    for c in 0..8 {
        let client = relay.client("flood").await;
        tasks.push(tokio::spawn(async move {
            join_all((0..20).map(|i| client.write(vec![heavy(c * 100 + i, 1_000_000)]))).await
        }));
    }
    let v = within(calm.write(vec![Mutation::set(name("calm/a"), map([("n", int(1))]))]))
        .await
        .expect("another database is not affected");
    assert!(v > 0);
    let mut committed = 0;
    for t in tasks {
        let versions: Vec<u64> = within_for(Duration::from_secs(120), t)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.expect("a writer waits its turn, it is not refused"))
            .collect();
        assert!(
            versions.windows(2).all(|w| w[0] < w[1]),
            "one connection's batches commit in the order sent: {versions:?}"
        );
        committed += versions.len();
    }
    sampling.store(false, Ordering::Relaxed);
    let deepest = within(sampler).await.unwrap();
    eprintln!("160 pipelined 1 MB writes against a 3 MB database queue: {committed} committed; deepest queue {deepest} batches");
    assert_eq!(committed, 160);
    assert!(
        deepest <= 3.0,
        "the queue held {deepest} batches of 1 MB past its 3 MB"
    );
}

/// Samples the relay's write queue depth for database `db` every 20 ms until the flag is
/// cleared; the task's result is the deepest seen.
fn sample_queue_depth(
    addr: std::net::SocketAddr,
    db: &str,
) -> (Arc<AtomicBool>, tokio::task::JoinHandle<f64>) {
    let sampling = Arc::new(AtomicBool::new(true));
    let sample = format!("hearth_write_queue_depth{{database=\"{db}\"}}");
    let flag = sampling.clone();
    let task = tokio::spawn(async move {
        let mut deepest = 0f64;
        while flag.load(Ordering::Relaxed) {
            let (_, text) = http_get(addr, "/metrics").await;
            deepest = deepest.max(metric(&text, &sample).unwrap_or(0.0));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        deepest
    });
    (sampling, task)
}

/// A document past Firestore's 40,000 index entries is refused with `invalid-argument`
/// before anything is written (a 50,000-element array has an array-contains entry per
/// element); exempting the field from indexing lets it through. A batch whose documents
/// change more than 200,000 index entries in all is refused the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn index_entries_per_document_and_per_batch_are_limited() {
    let dir = TempDir::new("entries");
    // `wide`'s arrays are indexed for array-contains alone (an entry per element): an
    // ascending entry would hold the whole array in one key, over PostgreSQL's key size.
    let indexes = dir.file(
        "indexes.json",
        r#"{ "fieldOverrides": [
            { "collectionGroup": "exempt", "fieldPath": "p", "indexes": [] },
            { "collectionGroup": "wide", "fieldPath": "p",
              "indexes": [ { "arrayConfig": "CONTAINS", "queryScope": "COLLECTION" } ] } ] }"#,
    );
    let indexes = indexes.to_str().unwrap();
    let relay = Relay::fresh(&["--indexes", indexes]);
    let c = relay.client("entries").await;
    let array = |n: i64| hearth_core::value::Value::Array((0..n).map(int).collect());
    let err = within(c.write(vec![Mutation::set(
        name("wide/a"),
        map([("p", array(50_000))]),
    )]))
    .await
    .expect_err("50,000 array-contains entries");
    assert_eq!(err.code(), Some(ErrorCode::InvalidArgument), "{err}");
    assert!(err.to_string().contains("40000 per document"), "{err}");
    assert!(within(c.get_one(&name("wide/a"))).await.unwrap().is_none());
    within(c.write(vec![Mutation::set(
        name("exempt/a"),
        map([("p", array(50_000))]),
    )]))
    .await
    .expect("an exempt field has no entries");
    // Six documents of 35,000 entries each: 210,000 in one batch.
    let batch = (0..6)
        .map(|i| Mutation::set(name(&format!("wide/b{i}")), map([("p", array(35_000))])))
        .collect();
    let err = within(c.write(batch))
        .await
        .expect_err("210,000 index entries in one batch");
    assert_eq!(err.code(), Some(ErrorCode::InvalidArgument), "{err}");
    assert!(err.to_string().contains("200000 per batch"), "{err}");
    // Split, it commits.
    for i in 0..6 {
        within(c.write(vec![Mutation::set(
            name(&format!("wide/b{i}")),
            map([("p", array(35_000))]),
        )]))
        .await
        .expect("35,000 entries");
    }
}

/// A batch of 10,000 writes to distinct documents commits in time linear in its size (the
/// committer found each document's earlier write in the batch by a scan: quadratic), and a
/// batch over 10,000 writes is refused with `invalid-argument` before it is queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_many_writes_costs_linear_time_and_is_bounded() {
    let relay = Relay::fresh(&[]);
    let c = relay.client("many").await;
    let writes = |n: usize| -> Vec<Mutation> {
        (0..n)
            .map(|i| Mutation::delete(name(&format!("many/d{i:05}"))))
            .collect()
    };
    let started = Instant::now();
    within(c.write(writes(10_000)))
        .await
        .expect("10,000 writes in one batch");
    let took = started.elapsed();
    eprintln!("a batch of 10,000 deletes committed in {took:?}");
    assert!(
        took < Duration::from_secs(5),
        "10,000 writes took {took:?} to commit"
    );
    let err = within(c.write(writes(10_001)))
        .await
        .expect_err("10,001 writes");
    assert_eq!(err.code(), Some(ErrorCode::InvalidArgument), "{err}");
    assert!(err.to_string().contains("at most 10000 writes"), "{err}");
}

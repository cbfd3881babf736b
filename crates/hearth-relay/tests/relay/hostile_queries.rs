//! Requests from a hostile client cost bounded work, refused before the work is done: a
//! query whose `in` filters multiply past Firestore's 30 disjunctions, too many
//! aggregations, a result larger than one reply, and a write with a 20,000-element
//! `arrayUnion`. Meanwhile a bystander on another connection and another database keeps
//! writing and listening, and sees every write promptly and no error.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hearth_client::Client;
use hearth_core::error::ErrorCode;
use hearth_core::mutation::{FieldTransform, Mutation};
use hearth_core::query::model::{Aggregation, Operator as Op, Query};
use hearth_core::value::Value;

use crate::harness::*;

/// Writes one document and waits for the listener to show it, over and over until `stop`;
/// the latency of each round trip (write sent to snapshot seen).
async fn bystander(client: Client, stop: Arc<AtomicBool>) -> Vec<Duration> {
    let q = Query::collection(coll("calm"));
    let mut listener = within(client.listen(&q, None)).await.unwrap();
    within(listener.next()).await.unwrap();
    let mut latencies = Vec::new();
    let mut i = 0i64;
    while !stop.load(Ordering::Relaxed) || latencies.len() < 5 {
        i += 1;
        let doc = name(&format!("calm/d{}", i % 20));
        let started = Instant::now();
        let version = within(client.write(vec![Mutation::set(doc.clone(), map([("n", int(i))]))]))
            .await
            .expect("the bystander's write succeeds");
        loop {
            let snap = within(listener.next())
                .await
                .expect("the bystander's listener sees no error");
            if snap.version >= version {
                let shown = snap.documents.iter().find(|d| d.name == doc);
                assert_eq!(shown.and_then(|d| d.fields.get("n")), Some(&int(i)));
                break;
            }
        }
        latencies.push(started.elapsed());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    latencies
}

fn summary(mut l: Vec<Duration>) -> String {
    l.sort();
    let at = |p: usize| l[(l.len() - 1) * p / 100];
    format!(
        "{} round trips, median {:?}, p99 {:?}, max {:?}",
        l.len(),
        at(50),
        at(99),
        at(100)
    )
}

/// A relay, its bystander (database `calm`) already running, and a hostile client on
/// database `attack`.
struct Scene {
    relay: Relay,
    stop: Arc<AtomicBool>,
    calm: tokio::task::JoinHandle<Vec<Duration>>,
    c: Client,
}

impl Scene {
    async fn start(args: &[&str]) -> Scene {
        let relay = Relay::fresh(args);
        let stop = Arc::new(AtomicBool::new(false));
        let calm = tokio::spawn(bystander(relay.client("calm").await, stop.clone()));
        let c = relay.client("attack").await;
        Scene {
            relay,
            stop,
            calm,
            c,
        }
    }

    /// Stops the bystander (it saw no error, or it would have panicked) and checks that the
    /// relay still answers; the bystander's latencies.
    async fn finish(self, what: &str) {
        self.stop.store(true, Ordering::Relaxed);
        let latencies = within(self.calm)
            .await
            .expect("the bystander ran to the end");
        eprintln!("hostile ({what}): bystander {}", summary(latencies));
        within(self.c.ping()).await.expect("the relay is still up");
        within(self.relay.client("calm").await.ping())
            .await
            .expect("the relay still accepts connections");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exploding_query_is_refused_and_the_relay_stays_up() {
    let scene = Scene::start(&[]).await;
    let c = &scene.c;
    // The exploding query: refused with invalid-argument, as a query, a listen and an
    // aggregation, and the relay stays up.
    let started = Instant::now();
    let err = within(c.query(&exploding("items")))
        .await
        .expect_err("over 30 disjunctions");
    let refused_in = started.elapsed();
    eprintln!("hostile: the exploding query was refused in {refused_in:?}");
    assert_eq!(err.code(), Some(ErrorCode::InvalidArgument), "{err}");
    assert!(err.to_string().contains("limit of 30"), "{err}");
    let err = within(c.aggregate(&exploding("items"), vec![Aggregation::Count]))
        .await
        .expect_err("over 30 disjunctions");
    assert_eq!(err.code(), Some(ErrorCode::InvalidArgument), "{err}");
    let mut l = within(c.listen(&exploding("items"), None)).await.unwrap();
    let err = within(l.next()).await.expect_err("over 30 disjunctions");
    assert_eq!(err.code(), Some(ErrorCode::InvalidArgument), "{err}");
    within(c.ping()).await.expect("the relay is still up");

    // Six aggregations in one request: Firestore's limit is five.
    let err = within(c.aggregate(
        &Query::collection(coll("items")),
        vec![Aggregation::Count; 6],
    ))
    .await
    .expect_err("over 5 aggregations");
    assert_eq!(err.code(), Some(ErrorCode::InvalidArgument), "{err}");
    assert!(err.to_string().contains("limit of 5"), "{err}");

    scene.finish("exploding query").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_20000_element_array_union_commits_quickly() {
    // `xs` is indexed for array-contains alone (20,000 entries): an ascending entry would
    // hold the whole array in one key, over the PostgreSQL store's limit (`scale_out`).
    let dir = TempDir::new("union");
    let indexes = dir.file(
        "indexes.json",
        r#"{ "fieldOverrides": [ { "collectionGroup": "items", "fieldPath": "xs",
              "indexes": [ { "arrayConfig": "CONTAINS", "queryScope": "COLLECTION" } ] } ] }"#,
    );
    let scene = Scene::start(&["--indexes", indexes.to_str().unwrap()]).await;
    let c = &scene.c;
    // A 20,000-element arrayUnion onto a 20,000-element array (half of it new), then a
    // 20,000-element arrayRemove: each one commit.
    let doc = name("items/arr");
    let base = Value::Array((0..20_000).map(int).collect());
    within(c.write(vec![Mutation::set(doc.clone(), map([("xs", base)]))]))
        .await
        .unwrap();
    let started = Instant::now();
    let union = (10_000..30_000).map(int).collect();
    within(c.write(vec![Mutation::update(doc.clone(), vec![])
        .with_transform(fp("xs"), FieldTransform::ArrayUnion(union))]))
    .await
    .expect("the union commits");
    let union_in = started.elapsed();
    eprintln!("hostile: 20,000-element arrayUnion committed in {union_in:?}");
    let started = Instant::now();
    let remove = (0..20_000).map(int).collect();
    within(c.write(vec![Mutation::update(doc.clone(), vec![])
        .with_transform(fp("xs"), FieldTransform::ArrayRemove(remove))]))
    .await
    .expect("the removal commits");
    let remove_in = started.elapsed();
    eprintln!("hostile: 20,000-element arrayRemove committed in {remove_in:?}");
    let stored = within(c.get_one(&doc)).await.unwrap().expect("stored");
    let Some(Value::Array(xs)) = stored.fields.get("xs") else {
        panic!("xs is an array")
    };
    assert_eq!(xs.len(), 10_000);
    assert_eq!(xs.first(), Some(&int(20_000)));
    // The array-contains index holds each element once: one of them finds the document.
    let (found, _) = within(c.query(&Query::collection(coll("items")).where_(
        "xs",
        Op::ArrayContains,
        int(25_000),
    )))
    .await
    .unwrap();
    assert_eq!(found.len(), 1);

    scene.finish("array transforms").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_over_one_reply_is_refused_while_it_is_read() {
    let dir = TempDir::new("hostile");
    let indexes = dir.payload_exempt_indexes("big");
    let scene = Scene::start(&["--indexes", &indexes]).await;
    let c = &scene.c;
    // A result over one reply: 17 documents of about 1 MiB. The query is refused with
    // resource-exhausted naming the limit; a limit brings it under.
    let payload = "p".repeat(1_000_000);
    for i in 0..17 {
        within(c.write(vec![Mutation::set(
            name(&format!("big/d{i:02}")),
            map([("p", s(&payload))]),
        )]))
        .await
        .unwrap();
    }
    let started = Instant::now();
    let err = within(c.query(&Query::collection(coll("big"))))
        .await
        .expect_err("over one reply");
    let big_refused_in = started.elapsed();
    assert_eq!(err.code(), Some(ErrorCode::ResourceExhausted), "{err}");
    assert!(err.to_string().contains("MAX_FRAME_BYTES"), "{err}");
    let (some, _) = within(c.query(&Query::collection(coll("big")).limit(3)))
        .await
        .unwrap();
    assert_eq!(some.len(), 3);
    let (count, _) = within(c.aggregate(&Query::collection(coll("big")), vec![Aggregation::Count]))
        .await
        .unwrap();
    assert_eq!(count, vec![int(17)]);

    eprintln!("hostile: a 17 MiB query was refused in {big_refused_in:?}");
    scene.finish("large result").await;
}

/// A listen storm on one connection stops at the relay's per-connection limit: the listen
/// over it is refused with `resource-exhausted` naming the flag, the connection's other
/// listens and other connections go on, and a listen stopped makes room for a new one.
#[tokio::test]
async fn listens_per_connection_are_limited() {
    let relay = Relay::fresh(&["--max-listens-per-connection", "5"]);
    let stop = Arc::new(AtomicBool::new(false));
    let calm = tokio::spawn(bystander(relay.client("calm").await, stop.clone()));
    let storm = relay.client("storm").await;
    let query = |i: i64| Query::collection(coll("s")).where_("n", Op::Equal, int(i));
    let mut held = Vec::new();
    for i in 0..5 {
        let mut l = within(storm.listen(&query(i), None)).await.unwrap();
        within(l.next())
            .await
            .expect("a listen under the limit is served");
        held.push(l);
    }
    let mut over = within(storm.listen(&query(5), None)).await.unwrap();
    let refused = within(over.next())
        .await
        .expect_err("the sixth listen is refused");
    assert_eq!(
        refused.code(),
        Some(ErrorCode::ResourceExhausted),
        "{refused}"
    );
    assert!(
        refused
            .to_string()
            .contains("--max-listens-per-connection 5"),
        "{refused}"
    );
    // The held listens still see writes.
    let v = within(storm.write(vec![Mutation::set(name("s/a"), map([("n", int(0))]))]))
        .await
        .unwrap();
    let snap = within(held[0].next()).await.unwrap();
    assert!(snap.version >= v && snap.documents.len() == 1);
    // One stopped: a new one fits.
    drop(held.pop());
    let mut again = None;
    for _ in 0..50 {
        let mut l = within(storm.listen(&query(6), None)).await.unwrap();
        match within(l.next()).await {
            Ok(_) => {
                again = Some(l);
                break;
            }
            // The Unlisten may not have reached the relay yet.
            Err(e) if e.code() == Some(ErrorCode::ResourceExhausted) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(again.is_some(), "a listen fits again once one stopped");
    stop.store(true, Ordering::Relaxed);
    let latencies = within(calm).await.unwrap();
    eprintln!("bystander during the listen storm: {}", summary(latencies));
}

/// A query whose scan passes `--max-scan-rows` is refused with `resource-exhausted` naming
/// the flag, as a one-time query, an aggregation and a listen; bounded versions of it are
/// served, and the bystander sees nothing of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_past_the_row_budget_is_refused() {
    let scene = Scene::start(&["--max-scan-rows", "1000"]).await;
    let c = &scene.c;
    for chunk in 0..4 {
        let batch = (0..500)
            .map(|i| {
                let i = chunk * 500 + i;
                Mutation::set(
                    name(&format!("wide/d{i:04}")),
                    map([("n", int(i)), ("odd", Value::Boolean(i % 2 == 1))]),
                )
            })
            .collect();
        within(c.write(batch)).await.unwrap();
    }
    let all = Query::collection(coll("wide"));
    let budget = |e: &hearth_client::ClientError| {
        assert_eq!(e.code(), Some(ErrorCode::ResourceExhausted), "{e}");
        assert!(e.to_string().contains("--max-scan-rows"), "{e}");
    };
    let err = within(c.query(&all)).await.expect_err("2,000 rows scanned");
    budget(&err);
    // A filter whose index scan passes the budget even though the result is small: a
    // `!=` over the whole collection, and an offset that skips past it.
    let err = within(c.query(&all.clone().offset(1500).limit(1)))
        .await
        .expect_err("skips 1,500 rows");
    budget(&err);
    let err = within(c.aggregate(&all, vec![Aggregation::Count]))
        .await
        .expect_err("counts 2,000 rows");
    budget(&err);
    let mut l = within(c.listen(&all, None)).await.unwrap();
    let err = within(l.next()).await.expect_err("listens to 2,000 rows");
    budget(&err);
    // Under the budget: served.
    let (some, _) = within(c.query(&all.clone().limit(500))).await.unwrap();
    assert_eq!(some.len(), 500);
    let (odd, _) = within(
        c.query(
            &all.clone()
                .where_("odd", Op::Equal, Value::Boolean(true))
                .limit(100),
        ),
    )
    .await
    .unwrap();
    assert_eq!(odd.len(), 100);
    scene.finish("scan budget").await;
}

/// Reads run on the blocking pool: connections sending large scans over and over (each
/// reads 20,000 documents) cannot hold up the runtime's workers, so a bystander's writes
/// and listens go on with latencies far below one such scan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_reads_do_not_freeze_other_connections() {
    let scene = Scene::start(&[]).await;
    let c = &scene.c;
    for chunk in 0..40 {
        let batch = (0..500)
            .map(|i| {
                let i = chunk * 500 + i;
                Mutation::set(
                    name(&format!("heavy/d{i:05}")),
                    map([("n", int(i)), ("pad", s(&"x".repeat(200)))]),
                )
            })
            .collect();
        within(c.write(batch)).await.unwrap();
    }
    let all = Query::collection(coll("heavy"));
    let started = Instant::now();
    within(c.aggregate(&all, vec![Aggregation::Sum(fp("n"))]))
        .await
        .unwrap();
    let one = started.elapsed();
    // Measure the bystander from here: before the scans and during them.
    let quiet = {
        let probe = scene.relay.client("calm").await;
        probe_latencies(&probe, 20).await
    };
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for _ in 0..6 {
        let reader = scene.relay.client("attack").await;
        let (stop, all) = (stop.clone(), all.clone());
        readers.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                within_for(
                    Duration::from_secs(120),
                    reader.aggregate(&all, vec![Aggregation::Sum(fp("n"))]),
                )
                .await
                .expect("the scan is served");
                n += 1;
            }
            n
        }));
    }
    tokio::time::sleep(one).await;
    let probe = scene.relay.client("calm").await;
    let busy = probe_latencies(&probe, 20).await;
    stop.store(true, Ordering::Relaxed);
    let mut scans = 0;
    for r in readers {
        scans += within_for(Duration::from_secs(120), r).await.unwrap();
    }
    let mut sorted = busy.clone();
    sorted.sort();
    let (median, p90) = (sorted[sorted.len() / 2], sorted[sorted.len() * 9 / 10]);
    eprintln!(
        "hostile: one 20,000-document scan {one:?}; {scans} scans from 6 connections; bystander quiet {}, during the scans {}",
        summary(quiet),
        summary(busy.clone())
    );
    // With reads on the runtime's workers, six scanners kept both of them busy and the
    // bystander's round trips took several scans each (p99 3.17 s against a 0.2 s scan).
    // A single slow round trip on a loaded machine says nothing; the bulk of them does.
    assert!(
        median < one / 2 && p90 < one * 2,
        "bystander round trips during the scans: median {median:?}, p90 {p90:?}, against one \
         whole scan of {one:?}"
    );
    scene.finish("slow reads").await;
}

/// `n` round trips of a write until the client's own listener shows it.
async fn probe_latencies(c: &Client, n: usize) -> Vec<Duration> {
    let q = Query::collection(coll("probe"));
    let mut listener = within(c.listen(&q, None)).await.unwrap();
    within(listener.next()).await.unwrap();
    let mut out = Vec::new();
    for i in 0..n {
        let started = Instant::now();
        let v = within(c.write(vec![Mutation::set(
            name("probe/p"),
            map([("n", int(i as i64))]),
        )]))
        .await
        .unwrap();
        while within(listener.next()).await.unwrap().version < v {}
        out.push(started.elapsed());
    }
    out
}

//! `--auto-index` creations from hostile or merely busy clients: concurrent creations on one
//! database keep every index maintained, a `kill -9` in the middle of a backfill is rolled
//! back at the next start (`check` stays clean), and a large backfill does not stall other
//! databases' writes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hearth_client::Client;
use hearth_core::document::Document;
use hearth_core::encoding::key::Direction;
use hearth_core::mutation::Mutation;
use hearth_core::query::model::{Operator as Op, Query};

use crate::harness::*;

/// The fields every test document has, each a small integer.
const FIELDS: [&str; 4] = ["a", "b", "c", "d"];

/// Document `i` of collection `items`, its fields a function of `i` and `salt`.
pub(crate) fn item(i: u64, salt: u64) -> Mutation {
    let v = |k: u64| int(((i * (k + 3) + salt * 7 + k) % 5) as i64);
    Mutation::set(
        name(&format!("items/i{i:06}")),
        map([("a", v(0)), ("b", v(1)), ("c", v(2)), ("d", v(3))]),
    )
}

/// Writes documents `0..n` of `items` (salted), 500 per batch.
pub(crate) async fn load(c: &Client, n: u64, salt: u64) {
    let mut i = 0;
    while i < n {
        let end = (i + 500).min(n);
        within(c.write((i..end).map(|i| item(i, salt)).collect()))
            .await
            .expect("loading documents");
        i = end;
    }
}

/// `where(f == 1).orderBy(g)`: needs the composite index (f, g).
pub(crate) fn needs(f: &str, g: &str) -> Query {
    Query::collection(coll("items"))
        .where_(f, Op::Equal, int(1))
        .order_by(g, Direction::Ascending)
}

/// What `needs(f, g)` returns over documents `0..n` salted with `salt`: names in order.
pub(crate) fn expected(f: &str, g: &str, n: u64, salt: u64) -> Vec<String> {
    let field = |i: u64, name: &str| {
        let k = FIELDS.iter().position(|x| *x == name).unwrap() as u64;
        (i * (k + 3) + salt * 7 + k) % 5
    };
    let mut rows: Vec<(u64, String)> = (0..n)
        .filter(|&i| field(i, f) == 1)
        .map(|i| (field(i, g), format!("items/i{i:06}")))
        .collect();
    rows.sort();
    rows.into_iter().map(|(_, n)| n).collect()
}

pub(crate) fn names(docs: &[Document]) -> Vec<String> {
    docs.iter().map(|d| d.name.to_string()).collect()
}

/// Every ordered pair of distinct fields: twelve composite indexes.
fn pairs() -> Vec<(&'static str, &'static str)> {
    let mut out = Vec::new();
    for f in FIELDS {
        for g in FIELDS {
            if f != g {
                out.push((f, g));
            }
        }
    }
    out
}

#[tokio::test]
async fn concurrent_index_creations_keep_every_index_maintained() {
    let dir = TempDir::new("build-races");
    let mut relay = Relay::start(dir.path(), &["--auto-index"]);
    let n = 3000;
    let loader = relay.client("races").await;
    load(&loader, n, 0).await;
    // Twelve clients each need another index, at the same moment.
    let mut tasks = Vec::new();
    for (f, g) in pairs() {
        let c = relay.client("races").await;
        tasks.push(tokio::spawn(async move {
            // Twelve backfills one after another: a generous bound on a loaded machine.
            let got = within_for(Duration::from_secs(120), c.query(&needs(f, g))).await;
            (f, g, got.map(|(d, _)| names(&d)))
        }));
    }
    for t in tasks {
        let (f, g, got) = t.await.unwrap();
        assert_eq!(
            got.expect("an auto-indexed query"),
            expected(f, g, n, 0),
            "({f}, {g}) before the rewrite"
        );
    }
    // Every document changes: each index must follow.
    load(&loader, n, 1).await;
    for (f, g) in pairs() {
        let got = within(loader.query(&needs(f, g)))
            .await
            .unwrap_or_else(|e| panic!("({f}, {g}) after the rewrite: {e}"));
        assert_eq!(
            names(&got.0),
            expected(f, g, n, 1),
            "({f}, {g}) after the rewrite: an index stopped being maintained"
        );
    }
    within(loader.close()).await;
    relay.sigterm();
    relay.wait_exit(Duration::from_secs(30));
    let (ok, out) = check_data(dir.path());
    assert!(ok, "check after concurrent index creations:\n{out}");
}

#[tokio::test]
async fn a_crash_in_the_middle_of_a_backfill_is_rolled_back_at_the_next_start() {
    let dir = TempDir::new("build-crash");
    let mut relay = Relay::start(dir.path(), &["--auto-index"]);
    let n = 20_000;
    let c = relay.client("crash").await;
    load(&c, n, 0).await;
    let url = relay.url();
    let query = tokio::spawn(async move {
        let c = Client::connect(&url, "crash", "querier", "").await.unwrap();
        let _ = c.query(&needs("a", "b")).await;
    });
    // Kill the relay once the backfill is under way and not done.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, text) = http_get(relay.addr, "/metrics").await;
        let done = metric(&text, "hearth_backfill_done{database=\"crash\"}").unwrap_or(0.0);
        if done > 0.0 && done < n as f64 {
            break;
        }
        assert!(
            done < n as f64,
            "the backfill finished before the test could interrupt it"
        );
        assert!(Instant::now() < deadline, "no backfill progress in 60 s");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    relay.kill9();
    query.abort();
    let (ok, out) = check_data(dir.path());
    assert!(
        !ok && out.contains("interrupted"),
        "check should report the interrupted build:\n{out}"
    );
    // The next start removes what the build wrote.
    let mut relay = Relay::start(dir.path(), &["--auto-index"]);
    let c = relay.client("crash").await;
    let (docs, _) = within_for(Duration::from_secs(120), c.query(&needs("a", "b")))
        .await
        .expect("the index is created again");
    assert_eq!(names(&docs), expected("a", "b", n, 0));
    within(c.close()).await;
    relay.sigterm();
    relay.wait_exit(Duration::from_secs(30));
    let (ok, out) = check_data(dir.path());
    assert!(ok, "check after the restart:\n{out}");
}

#[tokio::test]
async fn a_large_backfill_does_not_stall_other_databases() {
    let relay = Relay::fresh(&["--auto-index"]);
    let n = 30_000;
    let c = relay.client("big").await;
    load(&c, n, 0).await;
    // A bystander on another database writes one document at a time all along.
    let bystander = relay.client("calm").await;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut i = 0i64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let started = Instant::now();
                within(bystander.write(vec![Mutation::set(
                    name(&format!("calm/d{}", i % 10)),
                    map([("n", int(i))]),
                )]))
                .await
                .expect("the bystander's write succeeds");
                latencies.push((started, started.elapsed()));
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            latencies
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let (docs, _) = within_for(Duration::from_secs(120), c.query(&needs("c", "d")))
        .await
        .expect("auto-indexed query");
    let build = started.elapsed();
    let ended = Instant::now();
    assert_eq!(names(&docs), expected("c", "d", n, 0));
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.store(true, Ordering::Relaxed);
    let latencies = writer.await.unwrap();
    // The bystander's writes that overlapped the backfill.
    let during: Vec<Duration> = latencies
        .iter()
        .filter(|(at, l)| *at + *l >= started && *at <= ended)
        .map(|(_, l)| *l)
        .collect();
    let worst = during.iter().max().copied().unwrap_or_default();
    let mut sorted = during.clone();
    sorted.sort();
    let p50 = sorted.get(sorted.len() / 2).copied().unwrap_or_default();
    println!(
        "backfill of {n} documents (query round trip) {build:?}; bystander writes during it: {}, p50 {p50:?}, max {worst:?}",
        during.len()
    );
    assert!(
        during.len() >= 5,
        "the bystander should write throughout the {build:?} backfill, wrote {} times",
        during.len()
    );
    assert!(
        worst < build / 4,
        "a bystander write waited {worst:?} during a {build:?} backfill"
    );
}

//! The store's shards: a database's commits wait only for those of the databases in its
//! own shard. A tenant sending batches that rewrite many index entries (two documents'
//! 5,000-element arrays: 20,000 entries; the limit is 200,000) keeps its shard's committer
//! busy; a
//! bystander database in another shard commits as fast as when all is quiet. The same
//! attack on a one-shard store (the layout before shards, and `--store-shards 1`) is run
//! too, and its figures printed beside: there the bystander waits behind the batches.
//! Also: a store keeps the number of shards it was created with, and the one-file
//! layout of earlier relays opens as one shard with everything in it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hearth_core::mutation::Mutation;
use hearth_core::value::Value;
use hearth_relay::store::{shard_of, DEFAULT_STORE_SHARDS, META};

use crate::harness::*;

/// Elements of each of the attacker's two arrays: a batch rewrites four times as many
/// index entries (a tenth of the limit per batch, to keep the test short in a debug build,
/// where such a batch takes about a second).
const ELEMENTS: i64 = 5_000;

/// The attacker's `k`th batch: documents `heavy/x{t}` and `heavy/y{t}`, each with an
/// array whose elements all differ from those of its previous write, so every index entry
/// is rewritten.
fn heavy(t: usize, k: i64) -> Vec<Mutation> {
    let array = |from: i64| Value::Array((from..from + ELEMENTS).map(int).collect());
    vec![
        Mutation::set(
            name(&format!("heavy/x{t}")),
            map([("p", array(k * ELEMENTS))]),
        ),
        Mutation::set(
            name(&format!("heavy/y{t}")),
            map([("p", array(-(k + 1) * ELEMENTS))]),
        ),
    ]
}

/// Write-to-acknowledgement latencies of `writes` small writes, sorted.
async fn bystander(c: &hearth_client::Client, writes: usize) -> Vec<Duration> {
    let mut out = Vec::with_capacity(writes);
    for i in 0..writes as i64 {
        let started = Instant::now();
        within(c.write(vec![Mutation::set(name("calm/x"), map([("n", int(i))]))]))
            .await
            .expect("the bystander's write commits");
        out.push(started.elapsed());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    out.sort();
    out
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// The attack on a relay started with `--store-shards shards`, during `writes` of the
/// bystander's: (one attacker batch's commit time, the bystander's latencies quiet, and
/// during the attack).
async fn attack(shards: usize, writes: usize) -> (Duration, Vec<Duration>, Vec<Duration>) {
    let relay = Relay::fresh(&["--store-shards", &shards.to_string()]);
    let a = "heavy";
    let b = (0..)
        .map(|i| format!("calm{i}"))
        .find(|b| shard_of(b, DEFAULT_STORE_SHARDS) != shard_of(a, DEFAULT_STORE_SHARDS))
        .unwrap();
    let attacker = relay.client(a).await;
    within(attacker.write(heavy(9, 0))).await.unwrap();
    let started = Instant::now();
    within(attacker.write(heavy(9, 1))).await.unwrap();
    let one = started.elapsed();
    let calm = relay.client(&b).await;
    let quiet = bystander(&calm, writes).await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for t in 0..2 {
        let (c, stop) = (relay.client(a).await, stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut k = 0;
            while !stop.load(Ordering::Relaxed) {
                within(c.write(heavy(t, k)))
                    .await
                    .expect("an attacker's batch is within the limits");
                k += 1;
            }
            k
        }));
    }
    tokio::time::sleep(one * 2).await;
    let busy = bystander(&calm, writes).await;
    stop.store(true, Ordering::Relaxed);
    let mut batches = 0;
    for t in tasks {
        batches += within_for(Duration::from_secs(60), t).await.unwrap();
    }
    eprintln!(
        "store shards {shards}: one batch rewriting {} index entries commits in {one:?}; \
         {batches} of them from 2 connections on `{a}`; bystander `{b}` write p50 {:?} \
         p99 {:?} quiet, p50 {:?} p99 {:?} during them",
        4 * ELEMENTS,
        pct(&quiet, 0.5),
        pct(&quiet, 0.99),
        pct(&busy, 0.5),
        pct(&busy, 0.99)
    );
    (one, quiet, busy)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heavy_writer_does_not_slow_databases_in_other_shards() {
    if crate::pg::enabled() {
        // The embedded store's shards (redb files and their committers): a PostgreSQL
        // store has neither.
        return;
    }
    // One shard: the bystander waits behind the attacker's batches (printed, the figure
    // the sharded store is measured against).
    attack(1, 10).await;
    let (one, _, busy) = attack(DEFAULT_STORE_SHARDS, 30).await;
    assert!(
        pct(&busy, 0.5) < one / 4,
        "in another shard, the bystander's median write took {:?} against {one:?} for one \
         of the attacker's batches",
        pct(&busy, 0.5)
    );
}

/// A store keeps the shards it was created with, whatever `--store-shards` says later; a
/// store in the one-file layout (no shard record) is one shard; its data are all there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_keeps_its_layout() {
    if crate::pg::enabled() {
        // The embedded store's shards (redb files and their committers): a PostgreSQL
        // store has neither.
        return;
    }
    let dir = TempDir::new("layout");
    let mut relay = Relay::start(dir.path(), &["--store-shards", "3"]);
    for db in ["a", "b", "c", "d"] {
        let c = relay.client(db).await;
        within(c.write(vec![Mutation::set(name("k/x"), map([("db", s(db))]))]))
            .await
            .unwrap();
    }
    relay.sigterm();
    assert!(relay.wait_exit(Duration::from_secs(20)).success());
    let files = |dir: &std::path::Path| {
        let mut f: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".redb"))
            .collect();
        f.sort();
        f
    };
    assert_eq!(
        files(dir.path()),
        ["hearth-1.redb", "hearth-2.redb", "hearth.redb"]
    );
    // Started again asking for 8: still 3, and every document is read back.
    let mut relay = Relay::start(dir.path(), &["--store-shards", "8"]);
    for db in ["a", "b", "c", "d"] {
        let c = relay.client(db).await;
        let doc = within(c.get_one(&name("k/x"))).await.unwrap().unwrap();
        assert_eq!(doc.fields.get("db"), Some(&s(db)));
    }
    relay.sigterm();
    assert!(relay.wait_exit(Duration::from_secs(20)).success());
    assert_eq!(files(dir.path()).len(), 3);
    let (ok, out) = check_data(dir.path());
    assert!(ok, "{out}");

    // The layout of relays before shards: one file, no shard record.
    let old = TempDir::new("one-file");
    let mut relay = Relay::start(old.path(), &["--store-shards", "1"]);
    let c = relay.client("a").await;
    within(c.write(vec![Mutation::set(name("k/x"), map([("n", int(1))]))]))
        .await
        .unwrap();
    relay.sigterm();
    assert!(relay.wait_exit(Duration::from_secs(20)).success());
    {
        let db = redb::Database::create(old.path().join("hearth.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        let removed = txn
            .open_table(META)
            .unwrap()
            .remove("store/shards")
            .unwrap()
            .is_some();
        assert!(removed, "a store records its shards");
        txn.commit().unwrap();
    }
    let mut relay = Relay::start(old.path(), &[]);
    let c = relay.client("a").await;
    let doc = within(c.get_one(&name("k/x"))).await.unwrap().unwrap();
    assert_eq!(doc.fields.get("n"), Some(&int(1)));
    within(c.write(vec![Mutation::set(name("k/y"), map([("n", int(2))]))]))
        .await
        .unwrap();
    relay.sigterm();
    assert!(relay.wait_exit(Duration::from_secs(20)).success());
    assert_eq!(files(old.path()), ["hearth.redb"]);
}

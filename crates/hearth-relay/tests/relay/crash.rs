//! Crash consistency: a write load from several connections, `kill -9` at a random moment,
//! restart on the same data directory; every acknowledged write must be there, nothing
//! half-applied, and `hearth-relay check` must find documents and index entries consistent.
//! `HEARTH_CRASH_CYCLES` sets the number of cycles (default 3).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hearth_client::Client;
use hearth_core::mutation::{FieldTransform, Mutation, SetMerge};
use hearth_core::path::DocumentName;
use hearth_core::query::model::{Operator, Query};
use hearth_core::value::{Map, Value};

use crate::harness::*;

const WRITERS: usize = 4;

/// What the writers know: acknowledged documents, deletions, and per-writer counters.
#[derive(Default)]
struct Ledger {
    docs: BTreeMap<DocumentName, Map>,
    deleted: HashSet<DocumentName>,
    /// Per writer: increments acknowledged, increments sent.
    counters: [(i64, i64); WRITERS],
    max_version: u64,
}

async fn verify(c: &Client, ledger: &Ledger, when: &str) {
    assert!(
        c.welcome_version() >= ledger.max_version,
        "{when}: version went back from {} to {}",
        ledger.max_version,
        c.welcome_version()
    );
    let names: Vec<DocumentName> = ledger.docs.keys().cloned().collect();
    for chunk in names.chunks(250) {
        let (docs, _) = within(c.get(chunk.to_vec())).await.unwrap();
        for (n, doc) in docs {
            let doc = doc.unwrap_or_else(|| panic!("{when}: acknowledged {n} is missing"));
            assert_eq!(*doc.fields, ledger.docs[&n], "{when}: {n}");
        }
    }
    let deleted: Vec<DocumentName> = ledger.deleted.iter().cloned().collect();
    for chunk in deleted.chunks(250) {
        let (docs, _) = within(c.get(chunk.to_vec())).await.unwrap();
        for (n, doc) in docs {
            assert!(doc.is_none(), "{when}: acknowledged delete of {n} undone");
        }
    }
    for (w, (acked, sent)) in ledger.counters.iter().enumerate() {
        let doc = within(c.get_one(&name(&format!("counters/w{w}"))))
            .await
            .unwrap();
        let n = match doc.as_ref().and_then(|d| d.fields.get("n")) {
            Some(Value::Integer(n)) => *n,
            None => 0,
            other => panic!("{when}: counter {w} is {other:?}"),
        };
        assert!(
            *acked <= n && n <= *sent,
            "{when}: counter {w} is {n}, acknowledged {acked}, sent {sent}"
        );
    }
    // The indexes agree with the documents: an equality query returns every acknowledged
    // document with that tag (and possibly unacknowledged ones that committed), only those.
    for tag in ["red", "green", "blue"] {
        let q = Query::collection(coll("crash")).where_("tag", Operator::Equal, s(tag));
        let (docs, _) = within(c.query(&q)).await.unwrap();
        let got: HashSet<&DocumentName> = docs.iter().map(|d| &d.name).collect();
        for d in &docs {
            assert_eq!(
                d.fields.get("tag"),
                Some(&s(tag)),
                "{when}: index entry of {}",
                d.name
            );
        }
        for (n, f) in &ledger.docs {
            if n.collection_id() == "crash" && f.get("tag") == Some(&s(tag)) {
                assert!(
                    got.contains(n),
                    "{when}: {n} missing from the `tag == {tag}` index"
                );
            }
        }
    }
}

async fn writer(c: Client, w: usize, cycle: usize, seed: u64, ledger: Arc<Mutex<Ledger>>) {
    let mut rng = Rng::new(seed);
    for i in 0.. {
        let doc = name(&format!("crash/w{w}-c{cycle}-{i:05}"));
        let fields = map([
            ("w", int(w as i64)),
            ("i", int(i)),
            ("tag", s(rng.pick(&["red", "green", "blue"]))),
            ("score", int(rng.below(1000) as i64)),
        ]);
        let scratch = |k: i64| name(&format!("scratch/w{w}-c{cycle}-{k:05}"));
        let mut batch = vec![
            Mutation::set(doc.clone(), fields.clone()),
            Mutation::set_merge(name(&format!("counters/w{w}")), map([]), SetMerge::MergeAll)
                .with_transform(fp("n"), FieldTransform::Increment(int(1))),
            Mutation::set(scratch(i), map([("tag", s("red")), ("i", int(i))])),
        ];
        if i > 0 {
            batch.push(Mutation::delete(scratch(i - 1)));
        }
        ledger.lock().unwrap().counters[w].1 += 1;
        match c.write(batch).await {
            Ok(v) => {
                let mut l = ledger.lock().unwrap();
                l.docs.insert(doc, fields);
                l.counters[w].0 += 1;
                l.max_version = l.max_version.max(v);
                if i > 0 {
                    l.deleted.insert(scratch(i - 1));
                }
            }
            Err(_) => return,
        }
    }
}

#[tokio::test]
async fn kill_9_loses_no_acknowledged_write() {
    let cycles: usize = std::env::var("HEARTH_CRASH_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let dir = TempDir::new("crash");
    let mut rng = Rng::from_env("crash");
    let ledger: Arc<Mutex<Ledger>> = Arc::default();
    let mut total_acked = 0;
    for cycle in 0..cycles {
        let mut relay = Relay::start(dir.path(), &[]);
        let c = relay.client("crash").await;
        let when = format!("start of cycle {cycle}");
        {
            let snapshot = std::mem::take(&mut *ledger.lock().unwrap());
            verify(&c, &snapshot, &when).await;
            *ledger.lock().unwrap() = snapshot;
        }
        let mut tasks = Vec::new();
        for w in 0..WRITERS {
            let wc = relay.client("crash").await;
            tasks.push(tokio::spawn(writer(
                wc,
                w,
                cycle,
                rng.next_u64(),
                ledger.clone(),
            )));
        }
        let pause = Duration::from_millis(50 + rng.below(600));
        tokio::time::sleep(pause).await;
        relay.kill9();
        for t in tasks {
            within(t).await.unwrap();
        }
        let acked = ledger.lock().unwrap().docs.len();
        eprintln!(
            "cycle {cycle}: killed after {pause:?}; {} writes acknowledged this cycle",
            acked - total_acked
        );
        total_acked = acked;
        let (ok, out) = check_data(dir.path());
        assert!(ok, "cycle {cycle}: hearth-relay check failed:\n{out}");
    }
    let relay = Relay::start(dir.path(), &[]);
    let c = relay.client("crash").await;
    let snapshot = std::mem::take(&mut *ledger.lock().unwrap());
    verify(&c, &snapshot, "after the last crash").await;
    eprintln!("{cycles} crash cycles, {total_acked} acknowledged writes, all present");
    assert!(total_acked > 0, "no write was acknowledged at all");
}

/// A committer or fan-out thread that fails (a panic injected through the debug build's
/// `HEARTH_TEST_FAULT`) ends the whole process at once, saying which thread failed, rather
/// than leaving a relay that accepts writes it never commits or listeners that silently
/// stop; a restart on the same data serves every acknowledged write.
#[tokio::test]
async fn a_failed_committer_or_fan_out_ends_the_process_loudly() {
    use std::os::unix::process::ExitStatusExt;
    for (point, thread) in [("commit", "committer"), ("fanout", "fan-out")] {
        let dir = TempDir::new("fault");
        let fault = format!("{point}:doomed");
        let mut relay = Relay::start_with_env(dir.path(), &[], &[("HEARTH_TEST_FAULT", &fault)]);
        let calm = relay.client("calm").await;
        let kept = name("calm/kept");
        within(calm.write(vec![Mutation::set(kept.clone(), map([("n", int(1))]))]))
            .await
            .expect("a write to a healthy database");
        let doomed = relay.client("doomed").await;
        // The write reaches the failing thread; its answer may never come.
        let _ = tokio::time::timeout(
            Duration::from_secs(5),
            doomed.write(vec![Mutation::set(name("d/x"), map([("n", int(1))]))]),
        )
        .await;
        let status = relay.wait_exit(Duration::from_secs(20));
        assert_eq!(
            status.signal(),
            Some(6),
            "{thread}: the relay should abort, it ended with {status:?}"
        );
        let log = relay.log();
        assert!(
            log.contains(&format!("the {thread} thread failed")),
            "{thread}: the log should say which thread failed:\n{log}"
        );
        let mut relay = Relay::start(dir.path(), &[]);
        let c = relay.client("calm").await;
        let got = within(c.get_one(&kept)).await.unwrap();
        assert!(got.is_some(), "{thread}: the acknowledged write survives");
        within(c.close()).await;
        relay.sigterm();
        relay.wait_exit(Duration::from_secs(30));
        let (ok, out) = check_data(dir.path());
        assert!(ok, "{thread}: check after the abort:\n{out}");
    }
}

//! Real-time queries: after every write, each listener's next snapshot equals a fresh
//! re-query at the write's version (and a listener the write did not affect gets none);
//! limited queries refill; all targets of a connection advance together; resume gives a
//! delta, or a reset when the changelog no longer reaches back.

use std::collections::HashSet;
use std::time::Duration;

use hearth_client::{Client, ListenSnapshot, Listener};
use hearth_core::document::Document;
use hearth_core::encoding::key::Direction::{Ascending as Asc, Descending as Desc};
use hearth_core::mutation::{FieldTransform, Mutation, SetMerge};
use hearth_core::path::DocumentName;
use hearth_core::protocol::{DocumentChange, ErrorCode};
use hearth_core::query::model::{Filter, Operator as Op, Query};
use hearth_core::value::Value;

use crate::harness::*;
use crate::model::*;

fn items() -> Query {
    Query::collection(coll("items"))
}

/// A listener with the last result it showed.
struct Watched {
    label: &'static str,
    query: Query,
    listener: Listener,
    docs: Vec<Document>,
}

/// Nothing is waiting for this listener (its snapshot for a version would already have
/// been delivered together with the other targets').
async fn assert_no_snapshot(l: &mut Listener, label: &str) {
    if let Ok(r) = tokio::time::timeout(Duration::from_millis(1), l.next()).await {
        panic!("{label}: a snapshot for an unchanged result: {r:?}");
    }
}

fn names(docs: &[Document]) -> Vec<String> {
    docs.iter().map(|d| d.name.to_string()).collect()
}

/// One random mutation over a small pool of names; `exists` tracks what is stored so
/// updates (which need the document) are only aimed at existing ones.
fn random_mutation(
    rng: &mut Rng,
    pool: &[DocumentName],
    exists: &HashSet<DocumentName>,
) -> Mutation {
    let target = pool[rng.below(pool.len() as u64) as usize].clone();
    let existing: Vec<&DocumentName> = pool.iter().filter(|n| exists.contains(*n)).collect();
    let some_existing = |rng: &mut Rng| {
        existing
            .get(rng.below(existing.len() as u64) as usize)
            .map(|n| (*n).clone())
    };
    match rng.below(10) {
        0..=2 => Mutation::set(target, random_fields(rng)),
        3 => Mutation::set_merge(
            target,
            map([
                ("a", int(rng.below(5) as i64)),
                ("b", s(rng.pick(&["x", "y", "z"]))),
            ]),
            SetMerge::MergeAll,
        ),
        4 => Mutation::delete(target),
        5 => Mutation::set_merge(target, map([]), SetMerge::MergeAll).with_transform(
            fp("n"),
            FieldTransform::Increment(int(rng.below(20) as i64 - 10)),
        ),
        6 => match some_existing(rng) {
            Some(n) => Mutation::update(n, vec![(fp("n"), Some(int(rng.below(100) as i64 - 50)))]),
            None => Mutation::set(target, random_fields(rng)),
        },
        7 => match some_existing(rng) {
            Some(n) => {
                Mutation::update(n, vec![(fp("flag"), Some(Value::Boolean(rng.chance(50))))])
                    .with_transform(
                        fp("tags"),
                        FieldTransform::ArrayUnion(vec![s(rng.pick(&["t1", "t2"]))]),
                    )
            }
            None => Mutation::delete(target),
        },
        8 => match some_existing(rng) {
            Some(n) => Mutation::update(n, vec![(fp("a"), None)])
                .with_transform(fp("tags"), FieldTransform::ArrayRemove(vec![s("t1")]))
                .with_transform(fp("ts"), FieldTransform::ServerTimestamp),
            None => Mutation::delete(target),
        },
        _ => Mutation::set_merge(target, map([("b", s("z"))]), SetMerge::MergeAll)
            .with_transform(fp("n"), FieldTransform::Maximum(int(rng.below(60) as i64))),
    }
}

fn apply_existence(exists: &mut HashSet<DocumentName>, batch: &[Mutation]) {
    for m in batch {
        match m.kind {
            hearth_core::mutation::MutationKind::Delete => {
                exists.remove(&m.name);
            }
            _ => {
                exists.insert(m.name.clone());
            }
        }
    }
}

#[tokio::test]
async fn listeners_see_exactly_the_committed_changes() {
    let relay = Relay::fresh(&["--auto-index"]);
    let writer = relay.client("live").await;
    let reader = relay.client("live").await;
    let mut rng = Rng::from_env("listeners");
    let model = dataset(&mut rng, 25, 6);
    load(&writer, &model).await;
    let mut exists: HashSet<DocumentName> = model.keys().cloned().collect();
    let mut pool: Vec<DocumentName> = (0..35).map(|i| name(&format!("items/i{i:02}"))).collect();
    pool.extend((0..8).map(|i| name(&format!("groups/g{}/items/j{i:02}", i % 3))));

    let queries: Vec<(&'static str, Query)> = vec![
        ("all", items()),
        ("a == 1", items().where_("a", Op::Equal, int(1))),
        ("top 5", items().order_by("n", Desc).limit(5)),
        ("last 3", items().order_by("n", Asc).limit_to_last(3)),
        ("tags", items().where_("tags", Op::ArrayContains, s("t1"))),
        (
            "range",
            items()
                .where_("n", Op::GreaterThanOrEqual, int(0))
                .order_by("n", Asc),
        ),
        (
            "or",
            items().filter(Filter::Or(vec![
                Filter::field("a", Op::Equal, int(2)),
                Filter::field("b", Op::Equal, s("z")),
            ])),
        ),
        ("offset", items().order_by("n", Asc).offset(2).limit(4)),
        (
            "group",
            Query::collection_group("items").where_("flag", Op::Equal, Value::Boolean(true)),
        ),
        (
            "cursor",
            items()
                .order_by("n", Asc)
                .start_at(vec![int(-10)])
                .end_before(vec![int(25)]),
        ),
        ("ticks", Query::collection(coll("ticks"))),
    ];
    let mut watched = Vec::new();
    for (label, q) in queries {
        let listener = within(reader.listen(&q, None)).await.unwrap();
        watched.push(Watched {
            label,
            query: q,
            listener,
            docs: Vec::new(),
        });
    }
    let mut failures = Vec::new();
    for w in &mut watched {
        let snap = within(w.listener.next())
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", w.label));
        let (now, version) = within(writer.query(&w.query)).await.unwrap();
        assert!(snap.reset, "{}: the first snapshot is a reset", w.label);
        if snap.version == version && snap.documents != now {
            failures.push(format!(
                "{} initial: got {:?} want {:?}",
                w.label,
                names(&snap.documents),
                names(&now)
            ));
        }
        w.docs = snap.documents;
    }

    for step in 0..100 {
        // Existence is tracked while the batch is built: a batch that deletes a document
        // and then updates it is rightly refused as a whole.
        let mut batch: Vec<Mutation> = Vec::new();
        let mut during = exists.clone();
        for _ in 0..1 + rng.below(3) {
            let m = random_mutation(&mut rng, &pool, &during);
            apply_existence(&mut during, std::slice::from_ref(&m));
            batch.push(m);
        }
        batch.push(Mutation::set(name("ticks/t"), map([("step", int(step))])));
        let version = match within(writer.write(batch.clone())).await {
            Ok(v) => v,
            Err(e) => panic!("step {step}: write refused: {e}\n{batch:?}"),
        };
        apply_existence(&mut exists, &batch);
        let mut unchanged = Vec::new();
        for (i, w) in watched.iter_mut().enumerate() {
            let (now, at) = within(writer.query(&w.query)).await.unwrap();
            assert_eq!(
                at, version,
                "a single writer: the re-query reads its own version"
            );
            if now == w.docs {
                unchanged.push(i);
                continue;
            }
            let Ok(next) = tokio::time::timeout(Duration::from_secs(10), w.listener.next()).await
            else {
                failures.push(format!(
                    "step {step} {}: no snapshot within 10 s for version {version}; result was {:?}, now {:?}; batch {batch:?}",
                    w.label,
                    names(&w.docs),
                    names(&now)
                ));
                w.docs = now;
                continue;
            };
            match next {
                Ok(snap) => {
                    if snap.version != version || snap.documents != now {
                        failures.push(format!(
                            "step {step} {}: snapshot at {} {:?}\n  re-query at {version} {:?}\n  changes {:?}",
                            w.label,
                            snap.version,
                            names(&snap.documents),
                            names(&now),
                            snap.changed
                        ));
                    }
                }
                Err(e) => failures.push(format!("step {step} {}: {e}", w.label)),
            }
            // Continue from the truth so one failure does not cascade.
            w.docs = now;
        }
        for i in unchanged {
            let w = &mut watched[i];
            if let Ok(r) = tokio::time::timeout(Duration::from_millis(1), w.listener.next()).await {
                failures.push(format!(
                    "step {step} {}: a snapshot for an unchanged result: {r:?}",
                    w.label
                ));
            }
        }
        if failures.len() > 40 {
            break;
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test]
async fn a_limited_listen_refills_from_the_indexes() {
    let relay = Relay::fresh(&[]);
    let c = relay.client("limit").await;
    let writes: Vec<Mutation> = (1..=10)
        .map(|i| {
            Mutation::set(
                name(&format!("ranked/r{i:02}")),
                map([("score", int(i * 10))]),
            )
        })
        .collect();
    within(c.write(writes)).await.unwrap();
    let q = Query::collection(coll("ranked"))
        .order_by("score", Desc)
        .limit(5);
    let mut l = within(c.listen(&q, None)).await.unwrap();
    let first = within(l.next()).await.unwrap();
    assert_eq!(
        names(&first.documents),
        [
            "ranked/r10",
            "ranked/r09",
            "ranked/r08",
            "ranked/r07",
            "ranked/r06"
        ]
    );

    let steps: Vec<(&str, Mutation, [&str; 5])> = vec![
        (
            "the top one leaves: the 6th comes in",
            Mutation::delete(name("ranked/r10")),
            [
                "ranked/r09",
                "ranked/r08",
                "ranked/r07",
                "ranked/r06",
                "ranked/r05",
            ],
        ),
        (
            "one drops below the edge: the next comes in",
            Mutation::update(name("ranked/r08"), vec![(fp("score"), Some(int(1)))]),
            [
                "ranked/r09",
                "ranked/r07",
                "ranked/r06",
                "ranked/r05",
                "ranked/r04",
            ],
        ),
        (
            "a new top pushes the last out",
            Mutation::set(name("ranked/r99"), map([("score", int(1000))])),
            [
                "ranked/r99",
                "ranked/r09",
                "ranked/r07",
                "ranked/r06",
                "ranked/r05",
            ],
        ),
        (
            "the field is deleted: the doc leaves",
            Mutation::update(name("ranked/r09"), vec![(fp("score"), None)]),
            [
                "ranked/r99",
                "ranked/r07",
                "ranked/r06",
                "ranked/r05",
                "ranked/r04",
            ],
        ),
        (
            "two leave at once",
            Mutation::delete(name("ranked/r99")),
            [
                "ranked/r07",
                "ranked/r06",
                "ranked/r05",
                "ranked/r04",
                "ranked/r03",
            ],
        ),
    ];
    for (what, m, want) in steps {
        let v = within(c.write(vec![m])).await.unwrap();
        let snap = within(l.next()).await.unwrap();
        let (now, _) = within(c.query(&q)).await.unwrap();
        assert_eq!(snap.version, v, "{what}");
        assert_eq!(names(&snap.documents), want, "{what}");
        assert_eq!(snap.documents, now, "{what}: equals a re-query");
    }
    // A change below the edge does nothing to the result; the next one that matters does.
    within(c.write(vec![Mutation::update(
        name("ranked/r01"),
        vec![(fp("score"), Some(int(2)))],
    )]))
    .await
    .unwrap();
    let v = within(c.write(vec![Mutation::update(
        name("ranked/r03"),
        vec![(fp("score"), Some(int(65)))],
    )]))
    .await
    .unwrap();
    let snap = within(l.next()).await.unwrap();
    assert_eq!(
        snap.version, v,
        "the write below the edge raised no snapshot"
    );
    assert_eq!(
        names(&snap.documents),
        [
            "ranked/r07",
            "ranked/r03",
            "ranked/r06",
            "ranked/r05",
            "ranked/r04"
        ]
    );
    within(c.close()).await;
}

#[tokio::test]
async fn all_targets_of_a_connection_advance_together() {
    let relay = Relay::fresh(&[]);
    let w = relay.client("together").await;
    let r = relay.client("together").await;
    let qa = Query::collection(coll("left"));
    let qb = Query::collection(coll("right")).where_("v", Op::GreaterThan, int(0));
    let mut la = within(r.listen(&qa, None)).await.unwrap();
    let mut lb = within(r.listen(&qb, None)).await.unwrap();
    let a0 = within(la.next()).await.unwrap();
    let b0 = within(lb.next()).await.unwrap();
    assert!(a0.documents.is_empty() && b0.documents.is_empty());
    for i in 1..=5 {
        let v = within(w.write(vec![
            Mutation::set(name(&format!("left/l{i}")), map([("v", int(i))])),
            Mutation::set(name(&format!("right/r{i}")), map([("v", int(i))])),
        ]))
        .await
        .unwrap();
        let a = within(la.next()).await.unwrap();
        let b = within(lb.next()).await.unwrap();
        assert_eq!((a.version, b.version), (v, v));
        assert_eq!(a.documents.len(), i as usize);
        assert_eq!(b.documents.len(), i as usize);
    }
    // A write that only one target sees: only it raises a snapshot, at that version.
    let v = within(w.write(vec![Mutation::set(name("left/only"), map([]))]))
        .await
        .unwrap();
    let a = within(la.next()).await.unwrap();
    assert_eq!(a.version, v);
    assert_no_snapshot(&mut lb, "right").await;
    // A write neither sees moves the published version (heartbeats / ping carry it).
    let v2 = within(w.write(vec![Mutation::set(name("elsewhere/x"), map([]))]))
        .await
        .unwrap();
    let mut published = 0;
    for _ in 0..200 {
        published = within(r.ping()).await.unwrap();
        if published >= v2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(published, v2);
    // Then both advance to the next common version.
    let v3 = within(w.write(vec![
        Mutation::delete(name("left/l1")),
        Mutation::update(name("right/r1"), vec![(fp("v"), Some(int(-1)))]),
    ]))
    .await
    .unwrap();
    let a = within(la.next()).await.unwrap();
    let b = within(lb.next()).await.unwrap();
    assert_eq!((a.version, b.version), (v3, v3));
    assert!(!a.documents.iter().any(|d| d.name == name("left/l1")));
    assert!(!b.documents.iter().any(|d| d.name == name("right/r1")));
    assert_eq!(b.changed, vec![DocumentChange::Remove(name("right/r1"))]);
}

/// Changes that move documents in, out and within `a <= 2`, plus one outside it.
fn churn() -> Vec<Mutation> {
    vec![
        Mutation::set(name("items/new1"), map([("a", int(0)), ("b", s("x"))])),
        Mutation::update(name("items/i01"), vec![(fp("a"), Some(int(4)))]),
        Mutation::delete(name("items/i02")),
        Mutation::update(name("items/i03"), vec![(fp("b"), Some(s("changed")))]),
        Mutation::update(name("items/i04"), vec![(fp("a"), Some(int(1)))]),
        Mutation::set(name("other/zz"), map([("a", int(0))])),
    ]
}

/// A collection whose first docs are in and out of `a <= 2` in a known way.
async fn load_resume_data(c: &Client) {
    let mut batch = Vec::new();
    for i in 0..12 {
        let a = match i {
            1..=3 => 1, // in: leave, deleted, modified
            4 => 3,     // out: comes in
            _ => (i % 5) as i64,
        };
        batch.push(Mutation::set(
            name(&format!("items/i{i:02}")),
            map([("a", int(a)), ("b", s("y"))]),
        ));
    }
    within(c.write(batch)).await.unwrap();
}

fn resume_query() -> Query {
    items().where_("a", Op::LessThanOrEqual, int(2))
}

fn check_delta(snap: &ListenSnapshot, now: &[Document], label: &str) {
    assert!(
        !snap.reset,
        "{label}: a resume inside the changelog gets a delta, not a reset"
    );
    assert_eq!(names(&snap.documents), names(now), "{label}");
    assert_eq!(snap.documents, now, "{label}");
    let touched: HashSet<String> = [
        "items/new1",
        "items/i01",
        "items/i02",
        "items/i03",
        "items/i04",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert!(
        snap.changed
            .contains(&DocumentChange::Remove(name("items/i02"))),
        "{label}"
    );
    assert!(
        snap.changed
            .contains(&DocumentChange::Remove(name("items/i01"))),
        "{label}"
    );
    for c in &snap.changed {
        let n = match c {
            DocumentChange::Upsert(d) => d.name.to_string(),
            DocumentChange::Remove(n) => n.to_string(),
        };
        // A delta may only name documents of the listened collection: others are none of
        // this listener's business (and security rules may hide them from it).
        assert!(
            touched.contains(&n),
            "{label}: the delta names `{n}`, which is outside the query's collection or did not change; delta: {:?}",
            snap.changed
        );
    }
}

#[tokio::test]
async fn resume_after_unlisten_or_reconnect_gets_a_delta() {
    let relay = Relay::fresh(&[]);
    let writer = relay.client("resume").await;
    load_resume_data(&writer).await;
    let q = resume_query();

    // Unlisten, change, listen again on the same connection.
    let c = relay.client("resume").await;
    let mut l = within(c.listen(&q, None)).await.unwrap();
    let first = within(l.next()).await.unwrap();
    within(l.stop()).await;
    // And a second connection that goes away entirely.
    let gone = relay.client("resume").await;
    let mut l2 = within(gone.listen(&q, None)).await.unwrap();
    let first2 = within(l2.next()).await.unwrap();
    drop(l2);
    within(gone.close()).await;

    within(writer.write(churn())).await.unwrap();
    let (now, at) = within(writer.query(&q)).await.unwrap();

    let mut l = within(c.resume(&q, first.version, first.documents.clone()))
        .await
        .unwrap();
    let snap = within(l.next()).await.unwrap();
    check_delta(&snap, &now, "after unlisten");
    assert_eq!(snap.version, at);

    let fresh = relay.client("resume").await;
    let mut l = within(fresh.resume(&q, first2.version, first2.documents.clone()))
        .await
        .unwrap();
    let snap = within(l.next()).await.unwrap();
    check_delta(&snap, &now, "after reconnect");

    // The resumed listener keeps following changes.
    let v = within(writer.write(vec![Mutation::set(
        name("items/new2"),
        map([("a", int(2))]),
    )]))
    .await
    .unwrap();
    let snap = within(l.next()).await.unwrap();
    let (now, _) = within(writer.query(&q)).await.unwrap();
    assert_eq!((snap.version, &snap.documents), (v, &now));

    // A limited query resumes with a reset (a limited view cannot be patched from names),
    // which is still the right result.
    let lq = items().order_by("a", Asc).limit(3);
    let mut l = within(fresh.listen(&lq, None)).await.unwrap();
    let before = within(l.next()).await.unwrap();
    drop(l);
    within(writer.write(vec![Mutation::set(
        name("items/aaa"),
        map([("a", int(-5))]),
    )]))
    .await
    .unwrap();
    let mut l = within(fresh.resume(&lq, before.version, before.documents))
        .await
        .unwrap();
    let snap = within(l.next()).await.unwrap();
    let (now, _) = within(writer.query(&lq)).await.unwrap();
    assert_eq!(snap.documents, now);
}

#[tokio::test]
async fn resume_from_a_version_the_relay_never_had_gets_a_reset() {
    let relay = Relay::fresh(&[]);
    let c = relay.client("future").await;
    load_resume_data(&c).await;
    let q = resume_query();
    let (now, version) = within(c.query(&q)).await.unwrap();
    // A client whose state claims a version from the future (e.g. the relay's data was
    // restored from an older backup): its documents cannot be trusted.
    let bogus = vec![Document::new(name("items/ghost"), map([("a", int(0))]))];
    let mut l = within(c.resume(&q, version + 1000, bogus)).await.unwrap();
    match within(l.next()).await {
        Ok(snap) => {
            assert!(
                snap.reset,
                "resume_version {} > the relay's version {version}: expected a reset, got a delta of {} changes",
                version + 1000,
                snap.changed.len()
            );
            assert_eq!(snap.documents, now);
        }
        Err(e) => eprintln!("refused instead of reset (acceptable): {e}"),
    }
}

#[tokio::test]
async fn resume_older_than_the_changelog_gets_a_reset() {
    let dir = TempDir::new("retention");
    let mut relay = Relay::start(dir.path(), &[]);
    let c = relay.client("old").await;
    load_resume_data(&c).await;
    let q = resume_query();
    let mut l = within(c.listen(&q, None)).await.unwrap();
    let first = within(l.next()).await.unwrap();
    drop(l);
    within(c.write(churn())).await.unwrap();
    within(c.close()).await;
    relay.sigterm();
    assert!(relay.wait_exit(Duration::from_secs(20)).success());

    // Retention 0: the pruner's first round at start drops every changelog record.
    let relay = Relay::start(dir.path(), &["--changelog-retention-secs", "0"]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let c = relay.client("old").await;
    let (now, _) = within(c.query(&q)).await.unwrap();
    let mut l = within(c.resume(&q, first.version, first.documents.clone()))
        .await
        .unwrap();
    let snap = within(l.next()).await.unwrap();
    assert!(
        snap.reset,
        "the changelog no longer reaches back to {}: expected a reset",
        first.version
    );
    assert_eq!(snap.documents, now);
    // Version 0 too: everything is older than the retained changelog.
    let mut l = within(c.resume(&q, 0, Vec::new())).await.unwrap();
    let snap = within(l.next()).await.unwrap();
    assert!(snap.reset);
    assert_eq!(snap.documents, now);
}

/// The first document in `docs` written after `version`, if any: a snapshot at `version`
/// must not show it.
fn from_the_future(docs: &[Document], version: u64) -> Option<String> {
    docs.iter()
        .find(|d| d.update_version > version)
        .map(|d| format!("{} (update_version {})", d.name, d.update_version))
}

#[tokio::test]
async fn a_listen_with_select_is_refused() {
    // A projected result cannot be kept in order as documents change (the ordering fields
    // are not sent), so the relay refuses such listens with a typed error; one-time queries
    // with select() work.
    let relay = Relay::fresh(&["--auto-index"]);
    let c = relay.client("projection").await;
    within(c.write(vec![Mutation::set(
        name("proj/p1"),
        map([("a", int(1)), ("n", int(10))]),
    )]))
    .await
    .unwrap();
    let q = Query::collection(coll("proj"))
        .order_by("n", Desc)
        .limit(3)
        .select(&["a"]);
    let (once, _) = within(c.query(&q)).await.unwrap();
    assert_eq!(once.len(), 1);
    assert!(!once[0].fields.contains_key("n"), "{once:?}");
    let refused = match within(c.listen(&q, None)).await {
        Err(e) => Some(e),
        Ok(mut l) => within(l.next()).await.err(),
    };
    let e = refused.expect("a listen with select() is refused");
    assert_eq!(e.code(), Some(ErrorCode::InvalidArgument), "{e:?}");
}

#[tokio::test]
async fn snapshots_never_show_later_commits() {
    let relay = Relay::fresh(&[]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..4 {
        let c = relay.client("consistent").await;
        let stop = stop.clone();
        writers.push(tokio::spawn(async move {
            let mut i = 0i64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // A few writes in flight per writer, so commits group and publish lags.
                let mut inflight = Vec::new();
                for _ in 0..4 {
                    i += 1;
                    let c = c.clone();
                    let mut batch = vec![
                        Mutation::set(name(&format!("x/w{w}-{}", i % 7)), map([("n", int(i))])),
                        Mutation::set(name(&format!("y/w{w}-{}", i % 11)), map([("n", int(i))])),
                    ];
                    if i % 3 == 0 {
                        // Deletes make the limited target refill from the indexes.
                        batch.push(Mutation::delete(name(&format!("x/w{w}-{}", (i + 1) % 7))));
                    }
                    inflight.push(tokio::spawn(async move { c.write(batch).await }));
                }
                for f in inflight {
                    within(f).await.unwrap().expect("write");
                }
            }
        }));
    }
    let reader = relay.client("consistent").await;
    let mut steady = within(reader.listen(&Query::collection(coll("x")), None))
        .await
        .unwrap();
    let mut top = within(reader.listen(
        &Query::collection(coll("x")).order_by("n", Desc).limit(3),
        None,
    ))
    .await
    .unwrap();
    let mut failures = Vec::new();
    for round in 0..60 {
        // A query no other target has, so the relay reads it fresh while commits are
        // still being published.
        let q = Query::collection(coll("y")).where_("n", Op::GreaterThan, int(-round));
        let mut l = within(reader.listen(&q, None)).await.unwrap();
        let snap = within(l.next()).await.unwrap();
        if let Some(d) = from_the_future(&snap.documents, snap.version) {
            failures.push(format!(
                "round {round}: a first snapshot at {} shows {d}",
                snap.version
            ));
        }
        drop(l);
        while let Ok(r) = tokio::time::timeout(Duration::from_millis(1), top.next()).await {
            let snap = r.unwrap();
            if let Some(d) = from_the_future(&snap.documents, snap.version) {
                failures.push(format!(
                    "limited target: a snapshot at {} shows {d}",
                    snap.version
                ));
            }
        }
        // Drain the steady target's snapshots, checking them too.
        while let Ok(r) = tokio::time::timeout(Duration::from_millis(1), steady.next()).await {
            let snap = r.unwrap();
            if let Some(d) = from_the_future(&snap.documents, snap.version) {
                failures.push(format!(
                    "steady target: a snapshot at {} shows {d}",
                    snap.version
                ));
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in writers {
        within(w).await.unwrap();
    }
    assert!(
        failures.is_empty(),
        "{} snapshots showed commits after their version:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test]
async fn an_offset_listen_sees_changes_before_its_window() {
    let relay = Relay::fresh(&[]);
    let c = relay.client("offset").await;
    let docs = (1..=6)
        .map(|i| Mutation::set(name(&format!("o/n{i}")), map([("n", int(i))])))
        .collect();
    within(c.write(docs)).await.unwrap();
    let q = Query::collection(coll("o"))
        .order_by("n", Asc)
        .offset(2)
        .limit(2);
    let mut l = within(c.listen(&q, None)).await.unwrap();
    let first = within(l.next()).await.unwrap();
    assert_eq!(names(&first.documents), ["o/n3", "o/n4"]);
    // n1 is skipped by the offset: deleting it shifts the window.
    let v = within(c.write(vec![Mutation::delete(name("o/n1"))]))
        .await
        .unwrap();
    let snap = tokio::time::timeout(Duration::from_secs(5), l.next()).await;
    let (now, _) = within(c.query(&q)).await.unwrap();
    assert_eq!(names(&now), ["o/n4", "o/n5"]);
    match snap {
        Ok(Ok(snap)) => {
            assert_eq!(snap.version, v);
            assert_eq!(snap.documents, now);
        }
        other => panic!(
            "deleting a document inside the offset shifted the result to {:?}, but the listener got {other:?} within 5 s",
            names(&now)
        ),
    }
}

/// Unlisten and connection close remove exactly their own targets (each target knows its
/// place in its group's subscriber list, and the list is compacted by swapping): after
/// random churn of listens, unlistens and closed connections over one shared query and one
/// other, every live listener still sees each write at its version, and the active-listens
/// gauge counts exactly the live targets.
#[tokio::test]
async fn churn_of_listens_and_connections_leaves_the_other_listeners_intact() {
    let relay = Relay::fresh(&[]);
    let db = "churn";
    let w = relay.client(db).await;
    let mut rng = Rng::from_env("churn_of_listens");
    let queries = [
        Query::collection(coll("churn")),
        Query::collection(coll("churn")).where_("v", Op::GreaterThanOrEqual, int(0)),
    ];
    let mut clients: Vec<Option<Client>> = Vec::new();
    for _ in 0..6 {
        clients.push(Some(relay.client(db).await));
    }
    // (client index, listener)
    let mut live: Vec<(usize, Listener)> = Vec::new();
    let mut value = 0;
    for round in 0..15 {
        for _ in 0..5 {
            match rng.below(10) {
                0..=4 => {
                    let open: Vec<usize> = (0..clients.len())
                        .filter(|i| clients[*i].is_some())
                        .collect();
                    if open.is_empty() {
                        continue;
                    }
                    let ci = open[rng.below(open.len() as u64) as usize];
                    let q = &queries[rng.below(2) as usize];
                    let c = clients[ci].as_ref().expect("open");
                    let mut l = within(c.listen(q, None)).await.unwrap();
                    let first = within(l.next()).await.unwrap();
                    let seen: Vec<Option<&Value>> =
                        first.documents.iter().map(|d| d.fields.get("v")).collect();
                    if value == 0 {
                        assert!(seen.is_empty(), "round {round}: {seen:?}");
                    } else {
                        assert_eq!(seen, vec![Some(&int(value))], "round {round}");
                    }
                    live.push((ci, l));
                }
                5..=7 => {
                    if !live.is_empty() {
                        let i = rng.below(live.len() as u64) as usize;
                        live.swap_remove(i).1.stop().await;
                    }
                }
                8 => {
                    let ci = rng.below(clients.len() as u64) as usize;
                    if let Some(c) = clients[ci].take() {
                        live.retain(|(owner, _)| *owner != ci);
                        within(c.close()).await;
                    }
                }
                _ => clients.push(Some(relay.client(db).await)),
            }
        }
        value += 1;
        let v = within(w.write(vec![Mutation::set(
            name("churn/doc"),
            map([("v", int(value))]),
        )]))
        .await
        .unwrap();
        for (ci, l) in &mut live {
            let snap = within(l.next()).await.unwrap();
            assert_eq!(snap.version, v, "round {round}, client {ci}");
            let seen: Vec<Option<&Value>> =
                snap.documents.iter().map(|d| d.fields.get("v")).collect();
            assert_eq!(seen, vec![Some(&int(value))], "round {round}, client {ci}");
        }
        // Unlistens are handled asynchronously: wait for the gauge to settle.
        let sample = format!("hearth_active_listens{{database=\"{db}\"}}");
        let mut gauge = 0.0;
        for _ in 0..200 {
            let (_, text) = http_get(relay.addr, "/metrics").await;
            gauge = metric(&text, &sample).unwrap_or(0.0);
            if gauge == live.len() as f64 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(gauge, live.len() as f64, "round {round}");
    }
}

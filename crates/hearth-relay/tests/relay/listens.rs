//! Real-time queries: after every write, each listener's next snapshot equals a fresh
//! re-query at the write's version (and a listener the write did not affect gets none);
//! limited queries refill; all targets of a connection advance together. Resuming is in
//! `listens_resume`, refusals, consistency under load and listen churn in `listens_edges`.

use std::collections::HashSet;
use std::time::Duration;

use hearth_client::Listener;
use hearth_core::document::Document;
use hearth_core::encoding::key::Direction::{Ascending as Asc, Descending as Desc};
use hearth_core::mutation::{FieldTransform, Mutation, SetMerge};
use hearth_core::path::DocumentName;
use hearth_core::protocol::DocumentChange;
use hearth_core::query::model::{Filter, Operator as Op, Query};
use hearth_core::value::Value;

use crate::harness::*;
use crate::model::*;

pub(crate) fn items() -> Query {
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

pub(crate) fn names(docs: &[Document]) -> Vec<String> {
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
    // r1 changed and no longer matches: its removal carries its new content.
    assert!(
        matches!(&b.changed[..], [DocumentChange::Leave(d)]
            if d.name == name("right/r1") && d.fields.get("v") == Some(&int(-1)) && d.update_version == v3),
        "{:?}",
        b.changed
    );
    assert!(
        matches!(&a.changed[..], [DocumentChange::Delete { name: n, version }]
            if *n == name("left/l1") && *version == v3),
        "{:?}",
        a.changed
    );
}

/// A document that leaves a result says why: pushed out of a window unchanged (`Remove`, no
/// content: the client's copy is current), changed so it no longer matches or ranks (`Leave`
/// with its new content), or deleted (`Delete` at the commit's version). A client never has
/// to guess whether a document it holds still exists.
#[tokio::test]
async fn a_document_leaving_a_result_says_why() {
    let relay = Relay::fresh(&[]);
    let c = relay.client("why").await;
    let set = |id: &str, n: i64| Mutation::set(name(&format!("w/{id}")), map([("n", int(n))]));
    within(c.write(vec![set("a", 1), set("b", 2), set("c", 3)]))
        .await
        .unwrap();
    let q = Query::collection(coll("w")).order_by("n", Asc).limit(2);
    let mut l = within(c.listen(&q, None)).await.unwrap();
    let first = within(l.next()).await.unwrap();
    assert_eq!(names(&first.documents), ["w/a", "w/b"]);

    // `d` enters first; `b` is pushed out unchanged.
    within(c.write(vec![set("d", 0)])).await.unwrap();
    let s = within(l.next()).await.unwrap();
    assert_eq!(names(&s.documents), ["w/d", "w/a"]);
    assert!(
        s.changed.contains(&DocumentChange::Remove(name("w/b"))),
        "{:?}",
        s.changed
    );
    assert_eq!(s.changed.len(), 2, "{:?}", s.changed);

    // `a` changes and ranks after the window: it leaves with its new content.
    let v = within(c.write(vec![set("a", 9)])).await.unwrap();
    let s = within(l.next()).await.unwrap();
    assert_eq!(names(&s.documents), ["w/d", "w/b"]);
    assert!(
        s.changed.iter().any(|ch| matches!(ch, DocumentChange::Leave(d)
            if d.name == name("w/a") && d.fields.get("n") == Some(&int(9)) && d.update_version == v)),
        "{:?}",
        s.changed
    );

    // `d` is deleted: it leaves as a deletion at that commit.
    let v = within(c.write(vec![Mutation::delete(name("w/d"))]))
        .await
        .unwrap();
    let s = within(l.next()).await.unwrap();
    assert_eq!(names(&s.documents), ["w/b", "w/c"]);
    assert!(
        s.changed.contains(&DocumentChange::Delete {
            name: name("w/d"),
            version: v
        }),
        "{:?}",
        s.changed
    );
    within(c.close()).await;
}

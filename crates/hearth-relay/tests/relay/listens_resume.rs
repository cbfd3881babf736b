//! Resuming a listen: after an unlisten or a reconnect the relay sends a delta from the
//! client's version, or a reset when the changelog no longer reaches back (or the version
//! is one the relay never had).

use std::collections::HashSet;
use std::time::Duration;

use hearth_client::{Client, ListenSnapshot};
use hearth_core::document::Document;
use hearth_core::encoding::key::Direction::Ascending as Asc;
use hearth_core::mutation::Mutation;
use hearth_core::protocol::DocumentChange;
use hearth_core::query::model::{Operator as Op, Query};

use crate::harness::*;
use crate::listens::{items, names};

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
    // With the delta, what the whole result is: its size, and a filter holding every name
    // in it (and not those that left it: a false positive is possible, about 1 %, but these
    // names are fixed and pass or not for good).
    let (count, filter) = snap
        .existence
        .as_ref()
        .expect("a resumed delta has its existence");
    assert_eq!(*count, now.len() as u64, "{label}");
    assert!(now.iter().all(|d| filter.might_contain(&d.name)), "{label}");
    for gone in ["items/i01", "items/i02"] {
        assert!(!filter.might_contain(&name(gone)), "{label}: {gone} left");
    }
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
    // A document that left the result says why: deleted, or changed (with its content).
    assert!(
        snap.changed.iter().any(|c| matches!(c,
            DocumentChange::Delete { name: n, version } if *n == name("items/i02") && *version > 0)),
        "{label}: i02's deletion: {:?}",
        snap.changed
    );
    assert!(
        snap.changed.iter().any(|c| matches!(c,
            DocumentChange::Leave(d) if d.name == name("items/i01") && d.fields.get("a") == Some(&int(4)))),
        "{label}: i01 left with its new content: {:?}",
        snap.changed
    );
    for c in &snap.changed {
        let n = c.name().to_string();
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
    assert!(
        snap.existence.is_none(),
        "only a resume's first delta has one"
    );

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
    assert!(snap.reset && snap.existence.is_none(), "a reset is whole");
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

/// Writes that shift an offset window without touching the documents at its edge: a
/// delete before the window, inserts before it, a change inside it.
fn shifts() -> Vec<Vec<Mutation>> {
    vec![
        vec![Mutation::delete(name("items/o0"))],
        vec![
            Mutation::set(name("items/oa"), map([("a", int(-1))])),
            Mutation::set(name("items/ob"), map([("a", int(-2))])),
        ],
        vec![Mutation::update(
            name("items/o5"),
            vec![(fp("b"), Some(s("z")))],
        )],
    ]
}

/// `items/o0..o7` with `a` = 0..7, and no `oa`, `ob`.
fn offset_data() -> Vec<Mutation> {
    let mut batch: Vec<Mutation> = (0..8)
        .map(|i| {
            Mutation::set(
                name(&format!("items/o{i}")),
                map([("a", int(i)), ("b", s("y"))]),
            )
        })
        .collect();
    batch.extend(["items/oa", "items/ob"].map(|n| Mutation::delete(name(n))));
    batch
}

#[tokio::test]
async fn resume_of_an_offset_listen_is_exact() {
    let relay = Relay::fresh(&[]);
    let writer = relay.client("offset").await;
    let queries = [
        ("offset", items().order_by("a", Asc).offset(2)),
        (
            "offset, limit",
            items().order_by("a", Asc).offset(2).limit(3),
        ),
        (
            "offset, limitToLast",
            items().order_by("a", Asc).offset(1).limit_to_last(3),
        ),
        (
            "offset, filter",
            items()
                .where_("a", Op::GreaterThanOrEqual, int(-1))
                .offset(1),
        ),
    ];
    for (step, shift) in shifts().into_iter().enumerate() {
        for (label, q) in &queries {
            let label = format!("{label}, change {step}");
            within(writer.write(offset_data())).await.unwrap();
            let c = relay.client("offset").await;
            let mut l = within(c.listen(q, None)).await.unwrap();
            let before = within(l.next()).await.unwrap();
            within(l.stop()).await;
            within(writer.write(shift.clone())).await.unwrap();
            let (now, at) = within(writer.query(q)).await.unwrap();
            let mut l = within(c.resume(q, before.version, before.documents.clone()))
                .await
                .unwrap();
            let snap = within(l.next()).await.unwrap();
            assert_eq!(
                names(&snap.documents),
                names(&now),
                "{label}: the resumed result differs from the query's at {at} (reset: {}, changes: {:?})",
                snap.reset,
                snap.changed
            );
            assert_eq!(snap.documents, now, "{label}");
            within(c.close()).await;
        }
    }
}

/// A client of protocol version 1 (before `Existence`) is still served, and never sent an
/// `Existence`; one of version 2 gets it after a resumed delta, before the Snapshot.
#[tokio::test]
async fn existence_goes_to_clients_that_speak_it() {
    use crate::rules_listens::{next, until_snapshot};
    use hearth_core::protocol::codec::encode_client;
    use hearth_core::protocol::{ClientMessage, ServerMessage, PROTOCOL_VERSION};
    use tokio_tungstenite::tungstenite::Message;

    let relay = Relay::fresh(&[]);
    let writer = relay.client("existence").await;
    load_resume_data(&writer).await;
    let q = resume_query();
    let (_, at) = within(writer.query(&q)).await.unwrap();
    within(writer.write(churn())).await.unwrap();
    let (now, _) = within(writer.query(&q)).await.unwrap();
    for version in [1, PROTOCOL_VERSION] {
        let mut ws = crate::rules_listens::Raw::from(raw_socket(&relay).await);
        let hello = encode_client(&ClientMessage::Hello {
            protocol_version: version,
            database: "existence".into(),
            client_id: unique("raw"),
            token: String::new(),
        });
        raw_send(&mut ws, Message::Binary(hello.into())).await;
        match next(&mut ws).await {
            Some(ServerMessage::Welcome {
                protocol_version, ..
            }) => assert_eq!(protocol_version, version, "the relay speaks the client's"),
            other => panic!("no Welcome: {other:?}"),
        }
        let listen = encode_client(&ClientMessage::Listen {
            target_id: 1,
            query: q.clone(),
            resume_version: Some(at),
        });
        raw_send(&mut ws, Message::Binary(listen.into())).await;
        let got = until_snapshot(&mut ws).await;
        let existence: Vec<_> = got
            .iter()
            .filter_map(|m| match m {
                ServerMessage::Existence { count, .. } => Some(*count),
                _ => None,
            })
            .collect();
        match version {
            1 => assert_eq!(existence, Vec::<u64>::new(), "{got:?}"),
            _ => assert_eq!(existence, vec![now.len() as u64], "{got:?}"),
        }
        assert!(
            matches!(got.first(), Some(ServerMessage::TargetChange { .. })),
            "{got:?}"
        );
    }
}

//! Unit tests of the fan-out over real sockets: a refill that read ahead takes the later
//! commits into its round, and a group whose writes are split across threads keeps each
//! connection consistent.

use super::*;
use crate::outbound::testing::{pair, FrameReader};
use hearth_core::encoding::key::Direction::Descending;
use hearth_core::path::{CollectionPath, DocumentName};
use hearth_core::query::validate::validate;
use hearth_core::value::{Map, Value};

fn doc(id: &str, n: i64, version: u64) -> Document {
    let mut fields = Map::new();
    fields.insert("n".into(), Value::Integer(n));
    Document {
        name: DocumentName::parse(&format!("items/{id}")).unwrap(),
        fields: Arc::new(fields),
        create_version: version,
        update_version: version,
    }
}

/// Applies TargetChange messages to `docs` until a Snapshot; returns its version.
async fn next_snapshot(
    r: &mut FrameReader,
    c: &mut tokio::net::TcpStream,
    docs: &mut Vec<Document>,
) -> u64 {
    loop {
        match r.message(c).await {
            ServerMessage::TargetChange { kind, changes, .. } => {
                if kind == TargetChangeKind::Reset {
                    docs.clear();
                }
                for ch in changes {
                    match ch {
                        DocumentChange::Upsert(d) => {
                            docs.retain(|x| x.name != d.name);
                            docs.push(d);
                        }
                        other => docs.retain(|x| x.name != *other.name()),
                    }
                }
            }
            ServerMessage::Snapshot { version } => return version,
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// A limited listen that loses a document refills from the latest state; when that
/// state is ahead of the round (commits not yet published), the round takes those
/// commits in and publishes at their version, so no snapshot shows a document from
/// after its version.
#[tokio::test]
async fn a_refill_that_reads_ahead_takes_the_later_commits_into_the_round() {
    let (out, _r, mut client) = pair(1 << 20).await;
    let q = validate(
        &Query::collection(CollectionPath::parse("items").unwrap())
            .order_by("n", Descending)
            .limit(2),
    )
    .unwrap();
    let (a, b, d) = (doc("a", 3, 1), doc("b", 2, 1), doc("d", 5, 3));
    let fanout = Fanout::new(1);
    fanout
        .listen(
            &out,
            1,
            q,
            |_| Ok((vec![a.clone(), b.clone()], 1)),
            |_| Start::Fresh,
            None,
        )
        .unwrap();
    let (mut reader, mut docs) = (FrameReader::default(), Vec::new());
    assert_eq!(next_snapshot(&mut reader, &mut client, &mut docs).await, 1);
    // Version 2 deletes `a`, so the view refills; the store is already at version 3,
    // which added `d`.
    let at2 = Committed {
        database: "db".into(),
        version: 2,
        changes: vec![(a.name.clone(), None)],
    };
    let at3 = Committed {
        database: "db".into(),
        version: 3,
        changes: vec![(d.name.clone(), Some(d.clone()))],
    };
    let requery = |_: &Query| Ok((vec![d.clone(), b.clone()], 3));
    let mut asked = Vec::new();
    let mut more = |upto| {
        asked.push(upto);
        vec![at3.clone()]
    };
    fanout.publish(&[at2], &requery, &mut more);
    assert_eq!(
        asked,
        vec![3],
        "the round asks for the commits up to the read"
    );
    assert_eq!(fanout.published(), 3);
    let version = next_snapshot(&mut reader, &mut client, &mut docs).await;
    assert_eq!(
        version, 3,
        "the snapshot names the version its contents are at"
    );
    let mut got: Vec<_> = docs.iter().map(|d| d.name.to_string()).collect();
    got.sort();
    assert_eq!(got, vec!["items/b", "items/d"]);
    assert!(docs.iter().all(|d| d.update_version <= version));
}

/// A group split across writer threads: every connection, with one target or two in the
/// group, gets each round's change for each of its targets before that round's single
/// `Snapshot`, and its targets' contents match the commits.
#[tokio::test]
async fn a_group_split_across_writer_threads_keeps_each_connection_consistent() {
    let q = validate(&Query::collection(CollectionPath::parse("items").unwrap())).unwrap();
    let mut fanout = Fanout::new(1);
    fanout.split = (4, 4);
    // 8 connections with one target, 4 with two targets on the same query.
    let mut conns = Vec::new();
    for c in 0..12 {
        let (out, r, client) = pair(1 << 20).await;
        let targets: &[u32] = if c < 8 { &[1] } else { &[1, 2] };
        for &t in targets {
            fanout
                .listen(
                    &out,
                    t,
                    q.clone(),
                    |_| Ok((Vec::new(), 1)),
                    |_| Start::Fresh,
                    None,
                )
                .unwrap();
        }
        conns.push((out, r, client, targets.len()));
    }
    let rounds = 3u64;
    for k in 1..=rounds {
        let d = doc(&format!("d{k}"), k as i64, 1 + k);
        let c = Committed {
            database: "db".into(),
            version: 1 + k,
            changes: vec![(d.name.clone(), Some(d))],
        };
        let requery = |_: &Query| -> Result<(Vec<Document>, u64), QueryError> {
            unreachable!("no limit: no refill")
        };
        fanout.publish(&[c], &requery, &mut |_| Vec::new());
    }
    for (i, (_out, _r, client, n_targets)) in conns.iter_mut().enumerate() {
        let mut reader = FrameReader::default();
        // Initial results: a Reset and a Snapshot at 1 per target.
        for _ in 0..*n_targets {
            assert!(matches!(
                reader.message(client).await,
                ServerMessage::TargetChange {
                    kind: TargetChangeKind::Reset,
                    ..
                }
            ));
            assert_eq!(
                reader.message(client).await,
                ServerMessage::Snapshot { version: 1 }
            );
        }
        let mut docs: HashMap<u32, Vec<String>> = HashMap::new();
        for k in 1..=rounds {
            let mut changed = Vec::new();
            let version = loop {
                match reader.message(client).await {
                    ServerMessage::TargetChange {
                        target_id,
                        kind,
                        changes,
                    } => {
                        assert_eq!(kind, TargetChangeKind::Delta);
                        changed.push(target_id);
                        for ch in changes {
                            let DocumentChange::Upsert(d) = ch else {
                                panic!("only upserts were committed")
                            };
                            docs.entry(target_id).or_default().push(d.name.to_string());
                        }
                    }
                    ServerMessage::Snapshot { version } => break version,
                    other => panic!("connection {i}: unexpected {other:?}"),
                }
            };
            assert_eq!(version, 1 + k, "connection {i}: one snapshot per round");
            changed.sort();
            let want: Vec<u32> = (1..=*n_targets as u32).collect();
            assert_eq!(
                changed, want,
                "connection {i}, round {k}: a change per target"
            );
            for t in &want {
                let names = &docs[t];
                let expected: Vec<String> = (1..=k).map(|j| format!("items/d{j}")).collect();
                assert_eq!(names, &expected, "connection {i}, target {t}");
            }
        }
    }
}

/// The next frame's message.
async fn next_message(r: &mut FrameReader, c: &mut tokio::net::TcpStream) -> ServerMessage {
    r.message(c).await
}

fn commit(version: u64, docs: &[&Document]) -> Committed {
    Committed {
        database: "db".into(),
        version,
        changes: docs
            .iter()
            .map(|d| (d.name.clone(), Some((*d).clone())))
            .collect(),
    }
}

fn no_refill(_: &Query) -> Result<(Vec<Document>, u64), QueryError> {
    unreachable!("no limit: no refill")
}

/// A committed document the wire encoding refuses (here an empty field name, which only a
/// bug or a foreign writer lets into the store) ends the targets whose result holds it,
/// with `data-loss` naming it; the other targets, and the fan-out, go on.
#[tokio::test]
async fn a_document_the_encoding_refuses_ends_only_the_targets_it_reaches() {
    let all = validate(&Query::collection(CollectionPath::parse("items").unwrap())).unwrap();
    let sevens = validate(
        &Query::collection(CollectionPath::parse("items").unwrap()).where_(
            "n",
            hearth_core::query::model::Operator::Equal,
            7,
        ),
    )
    .unwrap();
    let fanout = Fanout::new(1);
    let (out_all, _r1, mut c_all) = pair(1 << 20).await;
    let (out_sevens, _r2, mut c_sevens) = pair(1 << 20).await;
    let (mut r_all, mut r_sevens) = (FrameReader::default(), FrameReader::default());
    for (out, q) in [(&out_all, &all), (&out_sevens, &sevens)] {
        fanout
            .listen(
                out,
                1,
                q.clone(),
                |_| Ok((Vec::new(), 1)),
                |_| Start::Fresh,
                None,
            )
            .unwrap();
    }
    let mut docs = Vec::new();
    assert_eq!(next_snapshot(&mut r_all, &mut c_all, &mut docs).await, 1);
    assert_eq!(
        next_snapshot(&mut r_sevens, &mut c_sevens, &mut docs).await,
        1
    );

    let mut bad = doc("bad", 1, 2);
    Arc::make_mut(&mut bad.fields).insert(String::new(), Value::Integer(1));
    assert!(hearth_core::encoding::document::encode_document(&bad).is_err());
    let seven = doc("seven", 7, 2);
    fanout.publish(&[commit(2, &[&bad, &seven])], &no_refill, &mut |_| {
        Vec::new()
    });

    match next_message(&mut r_all, &mut c_all).await {
        ServerMessage::Error {
            target_id,
            code,
            message,
            ..
        } => {
            assert_eq!(target_id, 1);
            assert_eq!(code, ErrorCode::DataLoss);
            assert!(message.contains("items/bad"), "{message}");
        }
        other => panic!("expected the target's end, got {other:?}"),
    }
    let mut sevens_docs = Vec::new();
    assert_eq!(
        next_snapshot(&mut r_sevens, &mut c_sevens, &mut sevens_docs).await,
        2
    );
    assert_eq!(sevens_docs, vec![seven.clone()]);
    assert_eq!(
        fanout.listens(),
        1,
        "only the target holding the document ended"
    );
    assert_eq!(fanout.take_ended(), 1, "the ended target is counted once");
    assert_eq!(fanout.take_ended(), 0);

    // The fan-out goes on: the next commit reaches the other target, and a new listen
    // works (the lock is not poisoned).
    let seven_b = doc("seven-b", 7, 3);
    fanout.publish(&[commit(3, &[&seven_b])], &no_refill, &mut |_| Vec::new());
    assert_eq!(
        next_snapshot(&mut r_sevens, &mut c_sevens, &mut sevens_docs).await,
        3
    );
    assert_eq!(sevens_docs.len(), 2);
    let (out_again, _r3, mut c_again) = pair(1 << 20).await;
    fanout
        .listen(
            &out_again,
            5,
            sevens,
            |_| unreachable!("the group is live"),
            |_| Start::Fresh,
            None,
        )
        .unwrap();
    let mut again = Vec::new();
    assert_eq!(
        next_snapshot(&mut FrameReader::default(), &mut c_again, &mut again).await,
        3
    );
    assert_eq!(again.len(), 2);

    // A listen whose initial result holds such a document is refused, alone.
    let (out_new, _r4, _c_new) = pair(1 << 20).await;
    let refused = fanout.listen(
        &out_new,
        1,
        all,
        |_| Ok((vec![bad.clone()], 3)),
        |_| Start::Fresh,
        None,
    );
    let err = refused.expect_err("the initial result cannot be encoded");
    assert_eq!(err.code(), ErrorCode::DataLoss);
    assert!(err.to_string().contains("items/bad"));
    assert_eq!(fanout.listens(), 2);
}

/// A change reaches only the groups whose source can hold it: a collection query of
/// another collection gets nothing; a collection-group query gets the changes of every
/// collection with its id.
#[tokio::test]
async fn a_change_reaches_only_the_groups_of_its_collection() {
    let others = validate(&Query::collection(CollectionPath::parse("others").unwrap())).unwrap();
    let group = validate(&Query::collection_group("items")).unwrap();
    let fanout = Fanout::new(1);
    let (out_o, _r1, mut c_o) = pair(1 << 20).await;
    let (out_g, _r2, mut c_g) = pair(1 << 20).await;
    let (mut r_o, mut r_g) = (FrameReader::default(), FrameReader::default());
    fanout
        .listen(
            &out_o,
            1,
            others,
            |_| Ok((Vec::new(), 1)),
            |_| Start::Fresh,
            None,
        )
        .unwrap();
    fanout
        .listen(
            &out_g,
            1,
            group,
            |_| Ok((Vec::new(), 1)),
            |_| Start::Fresh,
            None,
        )
        .unwrap();
    let mut docs = Vec::new();
    assert_eq!(next_snapshot(&mut r_o, &mut c_o, &mut docs).await, 1);
    assert_eq!(next_snapshot(&mut r_g, &mut c_g, &mut docs).await, 1);
    {
        let inner = fanout.lock();
        let top = DocumentName::parse("items/a").unwrap();
        let nested = DocumentName::parse("users/u/items/b").unwrap();
        let other = DocumentName::parse("others/c").unwrap();
        assert_eq!(inner.relevant(&top).count(), 1);
        assert_eq!(inner.relevant(&nested).count(), 1);
        assert_eq!(inner.relevant(&other).count(), 1);
        assert_eq!(
            inner
                .relevant(&DocumentName::parse("others/c/items/d").unwrap())
                .count(),
            1
        );
        assert_eq!(
            inner.relevant(&DocumentName::parse("x/y").unwrap()).count(),
            0
        );
    }
    let mut nested = doc("b", 1, 2);
    nested.name = DocumentName::parse("users/u/items/b").unwrap();
    fanout.publish(
        &[commit(2, &[&doc("a", 1, 2), &nested])],
        &no_refill,
        &mut |_| Vec::new(),
    );
    let mut got = Vec::new();
    assert_eq!(next_snapshot(&mut r_g, &mut c_g, &mut got).await, 2);
    assert_eq!(got.len(), 2);
    // The `others` listener's next frame is the change to its own collection at 3: it got
    // nothing at 2.
    let mut o = doc("c", 1, 3);
    o.name = DocumentName::parse("others/c").unwrap();
    fanout.publish(&[commit(3, &[&o])], &no_refill, &mut |_| Vec::new());
    let mut got = Vec::new();
    assert_eq!(next_snapshot(&mut r_o, &mut c_o, &mut got).await, 3);
    assert_eq!(got, vec![o]);
    // The last target of a group gone, its index entry goes too.
    assert!(fanout.unlisten(out_o.conn(), 1));
    let inner = fanout.lock();
    assert!(inner.by_collection.is_empty());
    assert_eq!(inner.by_group.len(), 1);
}

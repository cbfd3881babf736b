//! What a caller learns, at the wire, of documents the rules do not let it read: nothing.
//! A refused write, a transaction's reads, a precondition say the same of a document that
//! exists and of one that does not (the frames differ only by the name the caller chose); a
//! resumed listen names no document outside its result; a document listen is judged by the
//! `get` rule on its document.

use hearth_core::error::ErrorCode;
use hearth_core::mutation::{Mutation, Precondition};
use hearth_core::path::FieldPath;
use hearth_core::protocol::codec::encode_client;
use hearth_core::protocol::{ClientMessage, ServerMessage, TargetChangeKind};
use hearth_core::query::model::{Operator as Op, Query};
use hearth_core::value::Value;
use tokio_tungstenite::tungstenite::Message;

use crate::harness::*;
use crate::rules_listens::{next, raw_in, start_with, token, until_snapshot};

const SECRET: &str = "rules-disclosure-client-secret";
const SERVICE: &str = "rules-disclosure-service-secret";
const DB: &str = "disclosure";

const RULES: &str = r#"
rules_version = '2';
service cloud.firestore {
  match /databases/{database}/documents {
    match /vault/{d} {
      allow read: if false;
      allow create, update, delete: if false;
    }
    match /notes/{n} {
      allow read: if request.auth != null && resource.data.owner == request.auth.uid;
      allow write: if request.auth != null && request.resource.data.owner == request.auth.uid;
    }
    match /users/{uid} {
      allow read, write: if request.auth != null && request.auth.uid == uid;
    }
    match /counters/{c} {
      allow read, create: if request.auth != null;
      allow update: if request.auth != null && request.resource.data.n == resource.data.n + 1;
    }
  }
}
"#;

/// A relay with `RULES` and a service client that wrote `vault/exists`.
async fn start(tag: &str) -> (TempDir, Relay) {
    let (dir, relay, service) = start_with(tag, RULES, (SECRET, SERVICE), DB).await;
    let vault = Mutation::set(name("vault/exists"), map([("secret", s("42"))]));
    within(service.write(vec![vault])).await.unwrap();
    (dir, relay)
}

/// A client of `DB` signed in as `sub`.
async fn client(relay: &Relay, sub: &str) -> hearth_client::Client {
    let id = unique(sub);
    within(hearth_client::Client::connect(
        &relay.url(),
        DB,
        &id,
        &token(SECRET, sub),
    ))
    .await
    .unwrap()
}

/// The relay's answer to one `Write` frame (its error's code and message, the name of the
/// document `doc` replaced by `<doc>`), on a fresh connection of `sub`.
async fn answer(
    relay: &Relay,
    sub: &str,
    doc: &str,
    mutations: Vec<Mutation>,
    reads: Vec<(&str, Option<u64>)>,
) -> String {
    let mut ws = raw_in(relay, DB, &token(SECRET, sub)).await;
    let frame = encode_client(&ClientMessage::Write {
        request_id: 7,
        batch_id: 1,
        mutations,
        reads: reads.into_iter().map(|(n, v)| (name(n), v)).collect(),
    });
    raw_send(&mut ws, Message::Binary(frame.into())).await;
    loop {
        match next(&mut ws).await {
            Some(ServerMessage::Heartbeat { .. } | ServerMessage::Snapshot { .. }) => {}
            Some(ServerMessage::Error { code, message, .. }) => {
                return format!("{code:?}: {}", message.replace(doc, "<doc>"))
            }
            other => return format!("{other:?}"),
        }
    }
}

/// Each way of writing to or reading in a transaction a document the caller may not read,
/// against one that exists and one that does not: every answer is the same refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_write_says_nothing_of_whether_the_document_exists() {
    let (_dir, relay) = start("rules-disclosure-writes").await;
    type Probe = fn(&str) -> (Vec<Mutation>, Vec<(String, Option<u64>)>);
    let update: Probe = |d| {
        let field = FieldPath::parse("v").unwrap();
        (
            vec![Mutation::update(
                name(d),
                vec![(field, Some(Value::Integer(2)))],
            )],
            vec![],
        )
    };
    let create: Probe = |d| {
        let m = Mutation::set(name(d), map([("v", s("x"))]));
        (
            vec![m.with_precondition(Precondition::Exists(false))],
            vec![],
        )
    };
    let version: Probe = |d| {
        let m = Mutation::set(name(d), map([("v", s("x"))]));
        (
            vec![m.with_precondition(Precondition::UpdateVersion(999))],
            vec![],
        )
    };
    let delete: Probe = |d| (vec![Mutation::delete(name(d))], vec![]);
    let reads_only: Probe = |d| (vec![], vec![(d.to_owned(), None)]);
    let stale_read: Probe = |d| {
        let m = Mutation::set(name("users/mallory"), map([("v", s("x"))]));
        (vec![m], vec![(d.to_owned(), Some(999))])
    };
    let probes = [
        ("update", update),
        ("create", create),
        ("precondition", version),
        ("delete", delete),
        ("transaction reads only", reads_only),
        ("transaction read with a write", stale_read),
    ];
    for (what, probe) in probes {
        let mut answers = Vec::new();
        for (sub, doc) in [("mallory", "vault/exists"), ("mallory", "vault/missing")] {
            let (mutations, reads) = probe(doc);
            let reads = reads.iter().map(|(n, v)| (n.as_str(), *v)).collect();
            answers.push(answer(&relay, sub, doc, mutations, reads).await);
        }
        assert_eq!(answers[0], answers[1], "{what}: the answers differ");
        assert!(
            answers[0].starts_with("PermissionDenied"),
            "{what}: {}",
            answers[0]
        );
        assert!(!answers[0].contains("42"), "{what}: {}", answers[0]);
    }
}

/// A transaction that read a document the caller may read, which changed since, is aborted
/// (the client retries it) before rules that compare its writes with the stored document
/// judge them: a counter's `n == resource.data.n + 1` refused the stale increment with
/// `permission-denied`, which is not retried, so one of two concurrent increments was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_transaction_the_caller_may_read_is_aborted_before_the_rules_judge_it() {
    let (_dir, relay) = start("rules-disclosure-stale").await;
    let alice = client(&relay, "alice").await;
    let n = |v: i64| map([("n", Value::Integer(v))]);
    let read_at = within(alice.write(vec![Mutation::set(name("counters/c"), n(0))]))
        .await
        .unwrap();
    // Another increment commits after the transaction read n = 0.
    let field = FieldPath::parse("n").unwrap();
    let bump = |v: i64| {
        Mutation::update(
            name("counters/c"),
            vec![(field.clone(), Some(Value::Integer(v)))],
        )
    };
    within(alice.write(vec![bump(1)])).await.unwrap();
    let stale = answer(
        &relay,
        "alice",
        "counters/c",
        vec![bump(1)],
        vec![("counters/c", Some(read_at))],
    )
    .await;
    assert!(stale.starts_with("Aborted"), "{stale}");
    // Read at its current version, the same increment is allowed.
    let fresh = answer(&relay, "alice", "counters/c", vec![bump(2)], vec![]).await;
    assert!(
        !fresh.starts_with("Aborted") && !fresh.starts_with("PermissionDenied"),
        "{fresh}"
    );
    // A stale read of a document the caller may not read is still only refused.
    let hidden = answer(
        &relay,
        "mallory",
        "vault/exists",
        vec![bump(3)],
        vec![("vault/exists", Some(1))],
    )
    .await;
    assert!(hidden.starts_with("PermissionDenied"), "{hidden}");
}

/// The frames a resumed listen gets name only documents of its result, even when other
/// users' documents of the collection changed since the client's version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_listen_names_no_document_outside_its_result() {
    let (_dir, relay) = start("rules-disclosure-resume").await;
    let alice = client(&relay, "alice").await;
    let note = |id: &str, owner: &str| {
        Mutation::set(name(&format!("notes/{id}")), map([("owner", s(owner))]))
    };
    let mallory = client(&relay, "mallory").await;
    within(mallory.write(vec![note("mallory-1", "mallory")]))
        .await
        .unwrap();
    let mine = Query::collection(coll("notes")).where_("owner", Op::Equal, s("mallory"));
    let mut ws = raw_in(&relay, DB, &token(SECRET, "mallory")).await;
    let listen = |target_id, resume_version| {
        let m = encode_client(&ClientMessage::Listen {
            target_id,
            query: mine.clone(),
            resume_version,
        });
        Message::Binary(m.into())
    };
    raw_send(&mut ws, listen(1, None)).await;
    until_snapshot(&mut ws).await;
    let version = within(alice.write(vec![note("alice-medical-2026", "alice")]))
        .await
        .unwrap();
    within(alice.write(vec![note("alice-other", "alice")]))
        .await
        .unwrap();
    within(mallory.write(vec![note("mallory-2", "mallory")]))
        .await
        .unwrap();
    // A resume from before alice's writes, on a new connection.
    let mut ws = raw_in(&relay, DB, &token(SECRET, "mallory")).await;
    raw_send(&mut ws, listen(2, Some(version - 1))).await;
    let frames = until_snapshot(&mut ws).await;
    let text = format!("{frames:?}");
    assert!(
        !text.contains("alice-medical-2026") && !text.contains("alice-other"),
        "the resume named alice's notes: {text}"
    );
    assert!(text.contains("mallory-2"), "{text}");
}

/// A document listener is judged by `get` on its document: the owner rule that allows
/// alice's get of `users/alice` allows her listener, and refuses bob's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_listen_is_judged_by_the_get_rule() {
    let (_dir, relay) = start("rules-disclosure-doc-listen").await;
    let doc = Query::document(&name("users/alice"));
    let listen = |target_id| {
        let m = encode_client(&ClientMessage::Listen {
            target_id,
            query: doc.clone(),
            resume_version: None,
        });
        Message::Binary(m.into())
    };
    let mut alice = raw_in(&relay, DB, &token(SECRET, "alice")).await;
    raw_send(&mut alice, listen(1)).await;
    let frames = until_snapshot(&mut alice).await;
    assert!(
        matches!(
            &frames[..],
            [ServerMessage::TargetChange {
                kind: TargetChangeKind::Reset,
                ..
            }]
        ),
        "{frames:?}"
    );
    let mut bob = raw_in(&relay, DB, &token(SECRET, "bob")).await;
    raw_send(&mut bob, listen(1)).await;
    match next(&mut bob).await {
        Some(ServerMessage::Error { code, .. }) => assert_eq!(code, ErrorCode::PermissionDenied),
        other => panic!("bob's listen of users/alice: {other:?}"),
    }
}

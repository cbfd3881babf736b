//! Writes through the protocol: transactions (retry on conflict, `aborted` at the raw
//! level), idempotent batch retries, preconditions with their typed errors, atomic batches,
//! and field transforms applied at the authority.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hearth_client::{Client, ClientError, Transaction};
use hearth_core::document::Document;
use hearth_core::mutation::{FieldTransform, Mutation, Precondition, SetMerge};
use hearth_core::protocol::ErrorCode;
use hearth_core::value::Value;

use crate::harness::*;

fn field(d: &Option<Document>, f: &str) -> Option<Value> {
    d.as_ref()
        .and_then(|d| d.field(&fp(f)).map(|v| v.into_owned()))
}

fn increment(path: &str, by: i64) -> Mutation {
    Mutation::set_merge(name(path), map([]), SetMerge::MergeAll)
        .with_transform(fp("n"), FieldTransform::Increment(int(by)))
}

async fn count(c: &Client, path: &str) -> Option<Value> {
    field(&within(c.get_one(&name(path))).await.unwrap(), "n")
}

#[tokio::test]
async fn concurrent_transactions_both_succeed_after_retrying() {
    let relay = Relay::fresh(&[]);
    let setup = relay.client("tx").await;
    within(setup.write(vec![Mutation::set(
        name("counters/c"),
        map([("n", int(0))]),
    )]))
    .await
    .unwrap();
    const PER_TASK: i64 = 8;
    let attempts = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let c = relay.client("tx").await;
        let attempts = attempts.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..PER_TASK {
                let seen = c
                    .run_transaction(100, |tx: Transaction| {
                        let attempts = attempts.clone();
                        async move {
                            attempts.fetch_add(1, Ordering::Relaxed);
                            let doc = tx.get(&name("counters/c")).await?;
                            let n = match field(&doc, "n") {
                                Some(Value::Integer(n)) => n,
                                other => panic!("counter is {other:?}"),
                            };
                            // Stay open a moment so the two tasks' transactions overlap.
                            tokio::time::sleep(Duration::from_millis(5)).await;
                            tx.update(name("counters/c"), vec![(fp("n"), Some(int(n + 1)))]);
                            Ok(n)
                        }
                    })
                    .await
                    .expect("the transaction commits after retries");
                assert!(seen >= 0);
            }
        }));
    }
    for t in tasks {
        within(t).await.unwrap();
    }
    assert_eq!(count(&setup, "counters/c").await, Some(int(2 * PER_TASK)));
    let attempts = attempts.load(Ordering::Relaxed);
    eprintln!("{attempts} attempts for {} transactions", 2 * PER_TASK);
    assert!(
        attempts > 2 * PER_TASK as u32,
        "the transactions never conflicted, so the retry path was not exercised"
    );
}

#[tokio::test]
async fn a_transaction_whose_read_changed_is_aborted() {
    let relay = Relay::fresh(&[]);
    let c = relay.client("abort").await;
    let other = relay.client("abort").await;
    let acct = name("accounts/a");
    within(c.write(vec![Mutation::set(acct.clone(), map([("v", int(1))]))]))
        .await
        .unwrap();
    let read = within(c.get_one(&acct)).await.unwrap().unwrap();
    within(other.write(vec![Mutation::update(
        acct.clone(),
        vec![(fp("v"), Some(int(2)))],
    )]))
    .await
    .unwrap();
    let err = within(c.write_with_id(
        c.next_batch_id(),
        vec![Mutation::update(
            acct.clone(),
            vec![(fp("v"), Some(int(3)))],
        )],
        vec![(acct.clone(), Some(read.update_version))],
    ))
    .await
    .expect_err("the read changed");
    assert_eq!(err.code(), Some(ErrorCode::Aborted), "{err}");
    assert_eq!(
        field(&within(c.get_one(&acct)).await.unwrap(), "v"),
        Some(int(2))
    );

    // A read of an absent document conflicts with its creation.
    let missing = name("accounts/missing");
    within(other.write(vec![Mutation::set(missing.clone(), map([]))]))
        .await
        .unwrap();
    let err = within(c.write_with_id(
        c.next_batch_id(),
        vec![Mutation::set(acct.clone(), map([("v", int(9))]))],
        vec![(missing.clone(), None)],
    ))
    .await
    .expect_err("the absent document was created");
    assert_eq!(err.code(), Some(ErrorCode::Aborted), "{err}");

    // Unchanged reads commit.
    let now = within(c.get_one(&acct)).await.unwrap().unwrap();
    within(c.write_with_id(
        c.next_batch_id(),
        vec![Mutation::update(
            acct.clone(),
            vec![(fp("v"), Some(int(4)))],
        )],
        vec![(acct.clone(), Some(now.update_version))],
    ))
    .await
    .expect("unchanged reads commit");

    // A transaction that fails for another reason is not retried.
    let calls = AtomicU32::new(0);
    let err = within(c.run_transaction(10, |tx: Transaction| {
        calls.fetch_add(1, Ordering::Relaxed);
        async move {
            tx.get(&name("accounts/none")).await?;
            tx.update(name("accounts/none"), vec![(fp("v"), Some(int(1)))]);
            Ok(())
        }
    }))
    .await
    .expect_err("update of a missing document");
    assert_eq!(err.code(), Some(ErrorCode::NotFound), "{err}");
    assert_eq!(calls.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn a_retried_batch_is_applied_once() {
    let relay = Relay::fresh(&[]);
    let id = unique("writer");
    let c = relay.client_as("idem", &id).await;
    let batch = c.next_batch_id();
    let v1 = within(c.write_with_id(batch, vec![increment("counters/i", 1)], vec![]))
        .await
        .unwrap();
    let v2 = within(c.write_with_id(batch, vec![increment("counters/i", 1)], vec![]))
        .await
        .unwrap();
    assert_eq!(v1, v2, "a retry is acknowledged with the original version");
    assert_eq!(count(&c, "counters/i").await, Some(int(1)));

    // Two copies in flight at once (one group commit or two): still once.
    let b2 = c.next_batch_id();
    let (r1, r2) = within(async {
        tokio::join!(
            c.write_with_id(b2, vec![increment("counters/i", 10)], vec![]),
            c.write_with_id(b2, vec![increment("counters/i", 10)], vec![])
        )
    })
    .await;
    assert_eq!(r1.unwrap(), r2.unwrap());
    assert_eq!(count(&c, "counters/i").await, Some(int(11)));

    // After a reconnect under the same client id (the ack was lost with the socket).
    within(c.close()).await;
    let c2 = relay.client_as("idem", &id).await;
    let v3 = within(c2.write_with_id(batch, vec![increment("counters/i", 1)], vec![]))
        .await
        .unwrap();
    assert_eq!(v3, v1);
    assert_eq!(count(&c2, "counters/i").await, Some(int(11)));

    // The same batch id from another client is another batch.
    let c3 = relay.client("idem").await;
    let v4 = within(c3.write_with_id(batch, vec![increment("counters/i", 1)], vec![]))
        .await
        .unwrap();
    assert!(v4 > v3);
    assert_eq!(count(&c3, "counters/i").await, Some(int(12)));
}

/// A refusal of a batch whose id was already used for other writes: its message.
/// A batch refused for good is answered the same way when it comes again under its id (its
/// client did not hear the answer and sent it again after later batches): it is never applied
/// after the batches its client sent behind it.
#[tokio::test]
async fn a_refused_batch_sent_again_is_refused_again() {
    let relay = Relay::fresh(&[]);
    let id = unique("refused");
    let c = relay.client_as("refused", &id).await;
    let update = || {
        vec![Mutation::update(
            name("w/late"),
            vec![(fp("v"), Some(int(1)))],
        )]
    };
    let batch = c.next_batch_id();
    let first = within(c.write_with_id(batch, update(), vec![])).await;
    assert_eq!(first.map_err(|e| e.code()), Err(Some(ErrorCode::NotFound)));
    // A later batch of the client creates the document.
    within(c.write(vec![Mutation::set(name("w/late"), map([("v", int(0))]))]))
        .await
        .unwrap();
    // The first batch again, on a new connection: refused as before, not applied now.
    within(c.close()).await;
    let c2 = relay.client_as("refused", &id).await;
    let again = within(c2.write_with_id(batch, update(), vec![])).await;
    assert_eq!(again.map_err(|e| e.code()), Err(Some(ErrorCode::NotFound)));
    let doc = within(c2.get_one(&name("w/late"))).await.unwrap();
    assert_eq!(doc.as_ref().and_then(|d| d.fields.get("v")), Some(&int(0)));
}

fn reused_id_refusal(r: Result<u64, ClientError>, batch: u64, label: &str) -> String {
    match r {
        Ok(v) => panic!(
            "{label}: a different batch under the reused id {batch} was acknowledged with version {v} (and not applied)"
        ),
        Err(ClientError::Server { code, message }) => {
            assert_eq!(code, ErrorCode::FailedPrecondition, "{label}: {message}");
            assert!(
                message.contains(&batch.to_string()),
                "{label}: the refusal names the reused id {batch}: {message}"
            );
            message
        }
        Err(e) => panic!("{label}: expected the relay's refusal, got {e}"),
    }
}

#[tokio::test]
async fn a_different_batch_under_a_used_id_is_refused_not_dropped() {
    let dir = TempDir::new("batch-ids");
    let mut relay = Relay::start(dir.path(), &[]);
    let id = unique("tabs");
    let c = relay.client_as("ids", &id).await;
    let batch = c.next_batch_id();
    let first = vec![Mutation::set(name("notes/a"), map([("n", int(1))]))];
    let v1 = within(c.write_with_id(batch, first.clone(), vec![]))
        .await
        .unwrap();

    // Another tab of the same installation (same client id) picked the same id for other
    // writes: they must not be acknowledged as if committed.
    let other_tab = relay.client_as("ids", &id).await;
    let other = vec![Mutation::set(name("notes/b"), map([("n", int(2))]))];
    reused_id_refusal(
        within(other_tab.write_with_id(batch, other.clone(), vec![])).await,
        batch,
        "another connection",
    );
    assert_eq!(within(c.get_one(&name("notes/b"))).await.unwrap(), None);
    // The same writes under that id are still a retry: the first commit's version.
    let again = within(other_tab.write_with_id(batch, first.clone(), vec![])).await;
    assert_eq!(again.unwrap(), v1, "a true retry keeps its acknowledgement");
    // A transaction's reads are part of the batch too.
    let read = vec![(name("notes/a"), Some(v1))];
    reused_id_refusal(
        within(c.write_with_id(batch, first.clone(), read)).await,
        batch,
        "same writes, other reads",
    );

    // Both in flight at once (one group commit or two): one commits, the other is refused.
    let b2 = c.next_batch_id();
    let x = vec![Mutation::set(name("notes/x"), map([("n", int(3))]))];
    let y = vec![Mutation::set(name("notes/y"), map([("n", int(4))]))];
    let (rx, ry) = within(async {
        tokio::join!(
            c.write_with_id(b2, x, vec![]),
            other_tab.write_with_id(b2, y, vec![])
        )
    })
    .await;
    let (got_x, got_y) = (
        within(c.get_one(&name("notes/x"))).await.unwrap().is_some(),
        within(c.get_one(&name("notes/y"))).await.unwrap().is_some(),
    );
    match (rx.is_ok(), ry.is_ok()) {
        (true, false) => {
            reused_id_refusal(ry, b2, "in flight together");
            assert!(got_x && !got_y);
        }
        (false, true) => {
            reused_id_refusal(rx, b2, "in flight together");
            assert!(got_y && !got_x);
        }
        other => panic!("exactly one of two different batches under one id commits: {other:?}"),
    }

    // The record survives a restart.
    within(c.close()).await;
    within(other_tab.close()).await;
    relay.sigterm();
    assert!(relay.wait_exit(Duration::from_secs(20)).success());
    let relay = Relay::start(dir.path(), &[]);
    let c = relay.client_as("ids", &id).await;
    reused_id_refusal(
        within(c.write_with_id(batch, other, vec![])).await,
        batch,
        "after a restart",
    );
    assert_eq!(within(c.get_one(&name("notes/b"))).await.unwrap(), None);
    let again = within(c.write_with_id(batch, first, vec![])).await;
    assert_eq!(again.unwrap(), v1, "a retry after a restart");
}

fn server_code(r: Result<u64, ClientError>) -> Option<ErrorCode> {
    match r {
        Ok(v) => panic!("expected a refusal, got version {v}"),
        Err(e) => e.code(),
    }
}

#[tokio::test]
async fn preconditions_give_typed_errors_and_batches_are_atomic() {
    let relay = Relay::fresh(&[]);
    let c = relay.client("pre").await;
    let doc = name("things/t");
    let v = within(c.write(vec![Mutation::set(doc.clone(), map([("x", int(1))]))]))
        .await
        .unwrap();

    let r = within(c.write(vec![Mutation::update(
        name("things/missing"),
        vec![(fp("x"), Some(int(1)))],
    )]))
    .await;
    assert_eq!(server_code(r), Some(ErrorCode::NotFound));

    let r = within(
        c.write(vec![Mutation::set(doc.clone(), map([("x", int(2))]))
            .with_precondition(Precondition::Exists(false))]),
    )
    .await;
    assert_eq!(server_code(r), Some(ErrorCode::AlreadyExists));

    let r =
        within(
            c.write(vec![Mutation::delete(name("things/missing"))
                .with_precondition(Precondition::Exists(true))]),
        )
        .await;
    assert_eq!(server_code(r), Some(ErrorCode::NotFound));

    let r = within(
        c.write(vec![Mutation::set(doc.clone(), map([("x", int(3))]))
            .with_precondition(Precondition::UpdateVersion(v + 100))]),
    )
    .await;
    assert_eq!(server_code(r), Some(ErrorCode::FailedPrecondition));

    // A batch applies whole or not at all.
    let r = within(c.write(vec![
        Mutation::set(name("things/new"), map([("x", int(1))])),
        Mutation::update(doc.clone(), vec![(fp("x"), Some(int(5)))]),
        Mutation::update(name("things/missing"), vec![(fp("x"), Some(int(1)))]),
    ]))
    .await;
    assert_eq!(server_code(r), Some(ErrorCode::NotFound));
    assert_eq!(within(c.get_one(&name("things/new"))).await.unwrap(), None);
    assert_eq!(
        field(&within(c.get_one(&doc)).await.unwrap(), "x"),
        Some(int(1))
    );

    // Matching preconditions pass; deleting an absent document succeeds.
    within(c.write(vec![
            Mutation::set(doc.clone(), map([("x", int(7))]))
                .with_precondition(Precondition::UpdateVersion(v)),
            Mutation::set(name("things/fresh"), map([]))
                .with_precondition(Precondition::Exists(false)),
            Mutation::delete(name("things/never")),
        ]))
    .await
    .expect("matching preconditions");
    // An invalid mutation is refused before it is queued.
    let r = within(c.write(vec![Mutation::set(doc.clone(), map([]))
        .with_transform(fp("x"), FieldTransform::Increment(s("one")))]))
    .await;
    assert_eq!(server_code(r), Some(ErrorCode::InvalidArgument));
}

#[tokio::test]
async fn transforms_are_applied_at_the_authority() {
    let relay = Relay::fresh(&[]);
    let c = relay.client("transforms").await;
    let d = name("t/doc");
    let v1 = within(c.write(vec![Mutation::set(
        d.clone(),
        map([
            ("i", int(5)),
            ("f", Value::Double(1.5)),
            ("tags", arr(&["a", "b"])),
            ("gone", int(1)),
            ("keep", int(1)),
        ]),
    )]))
    .await
    .unwrap();
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64;
    let v2 = within(c.write(vec![
        Mutation::update(d.clone(), vec![(fp("gone"), None)])
            .with_transform(fp("i"), FieldTransform::Increment(int(2)))
            .with_transform(fp("f"), FieldTransform::Increment(int(1)))
            .with_transform(fp("tags"), FieldTransform::ArrayUnion(vec![s("b"), s("c")]))
            .with_transform(fp("ts"), FieldTransform::ServerTimestamp)
            .with_transform(fp("hi"), FieldTransform::Maximum(int(10)))
            .with_transform(fp("lo"), FieldTransform::Minimum(Value::Double(-1.0))),
        Mutation::set_merge(name("t/other"), map([("k", int(1))]), SetMerge::MergeAll)
            .with_transform(fp("ts"), FieldTransform::ServerTimestamp),
    ]))
    .await
    .unwrap();
    assert!(v2 > v1, "versions increase");
    let after = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64;
    let (docs, at) = within(c.get(vec![d.clone(), name("t/other")]))
        .await
        .unwrap();
    assert!(at >= v2);
    let doc = docs[0].1.clone();
    assert_eq!(field(&doc, "i"), Some(int(7)));
    assert_eq!(field(&doc, "f"), Some(Value::Double(2.5)));
    assert_eq!(field(&doc, "tags"), Some(arr(&["a", "b", "c"])));
    assert_eq!(field(&doc, "gone"), None);
    assert_eq!(field(&doc, "keep"), Some(int(1)));
    assert_eq!(field(&doc, "hi"), Some(int(10)));
    assert_eq!(field(&doc, "lo"), Some(Value::Double(-1.0)));
    let ts = match field(&doc, "ts") {
        Some(Value::Timestamp(t)) => t.to_micros(),
        other => panic!("server timestamp: {other:?}"),
    };
    assert!(
        before - 1_000_000 <= ts && ts <= after + 1_000_000,
        "commit time {ts} near {before}..{after}"
    );
    assert_eq!(
        field(&docs[1].1, "ts"),
        field(&doc, "ts"),
        "one batch has one commit time"
    );
    let stored = doc.unwrap();
    assert_eq!((stored.create_version, stored.update_version), (v1, v2));

    let v3 = within(c.write(vec![
        Mutation::set_merge(d.clone(), map([("keep", int(2))]), SetMerge::MergeAll)
            .with_field_delete(fp("i"))
            .with_transform(fp("tags"), FieldTransform::ArrayRemove(vec![s("a"), s("zz")]))
            .with_transform(fp("hi"), FieldTransform::Minimum(int(3))),
    ]))
    .await
    .unwrap();
    let doc = within(c.get_one(&d)).await.unwrap();
    assert_eq!(field(&doc, "i"), None);
    assert_eq!(field(&doc, "keep"), Some(int(2)));
    assert_eq!(field(&doc, "tags"), Some(arr(&["b", "c"])));
    assert_eq!(field(&doc, "hi"), Some(int(3)));
    let doc = doc.unwrap();
    assert_eq!((doc.create_version, doc.update_version), (v1, v3));
    let later = match field(&Some(doc), "ts") {
        Some(Value::Timestamp(t)) => t.to_micros(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        later, ts,
        "a write without the transform keeps the timestamp"
    );
}

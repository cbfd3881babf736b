//! Listens at the edges: a listen with select() is refused, snapshots never show commits
//! after their version, an offset window shifts with changes before it, and churn of
//! listens and connections leaves the other listeners intact.

use std::time::Duration;

use hearth_client::{Client, Listener};
use hearth_core::document::Document;
use hearth_core::encoding::key::Direction::{Ascending as Asc, Descending as Desc};
use hearth_core::mutation::Mutation;
use hearth_core::protocol::ErrorCode;
use hearth_core::query::model::{Operator as Op, Query};
use hearth_core::value::Value;

use crate::harness::*;
use crate::listens::names;

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

#[tokio::test]
async fn a_listen_joining_a_live_query_sees_every_acknowledged_write() {
    // Read-your-writes across connections: once a write is acknowledged, a listen started
    // afterwards shows it in its first snapshot, also when it joins a query another
    // connection already listens to (the fan-out applies a commit after its writer is
    // answered, so the live query's view can lag the acknowledged write for a moment).
    let relay = Relay::fresh(&[]);
    joins_see_acknowledged_writes(&relay, &relay, "joined").await;
}

/// Writes 60 documents one by one through `writes`, a listen on `reads` kept live on
/// their collection; after each acknowledgement a new connection to `reads` listens on
/// the same query, and its first snapshot must show every document written so far.
pub(crate) async fn joins_see_acknowledged_writes(writes: &Relay, reads: &Relay, db: &str) {
    let writer = writes.client(db).await;
    let watcher = reads.client(db).await;
    let reader = reads.client(db).await;
    let q = Query::collection(coll("joined"));
    let mut live = within(watcher.listen(&q, None)).await.unwrap();
    within(live.next()).await.unwrap();
    for i in 0..60 {
        let doc = format!("joined/d{i:03}");
        let write = writer.write(vec![Mutation::set(name(&doc), map([("i", int(i))]))]);
        let version = within(write).await.unwrap();
        let mut joined = within(reader.listen(&q, None)).await.unwrap();
        let first = within(joined.next()).await.unwrap();
        assert!(
            first.version >= version,
            "round {i}: the first snapshot is at {} but the write was acknowledged at {version}",
            first.version
        );
        assert!(
            names(&first.documents).iter().any(|n| n.ends_with(&doc)),
            "round {i}: the first snapshot (version {}) misses {doc}, acknowledged at {version}",
            first.version
        );
        assert_eq!(first.documents.len(), i as usize + 1, "round {i}");
        joined.stop().await;
    }
}

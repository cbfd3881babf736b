//! Index definitions changed by one relay while other relays over the same PostgreSQL
//! database write and query: the others' commits maintain a new index from the start of
//! its build, they plan with it once it is complete and never with one being dropped, and
//! `check` finds every entry in place afterwards.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hearth_client::Client;
use hearth_core::protocol::ErrorCode;
use tokio::task::JoinHandle;

use crate::harness::*;
use crate::index_builds::{expected, item, load, names, needs};

const DB: &str = "shared";

/// A writer on `relay` adding documents `from`, `from + 1`, ... (one per batch) until
/// `stop`; the end of the range written, every batch acknowledged.
async fn writer(relay: &Relay, from: u64, stop: Arc<AtomicBool>) -> JoinHandle<u64> {
    let c = relay.client(DB).await;
    tokio::spawn(async move {
        let mut i = from;
        while !stop.load(Ordering::Relaxed) {
            within(c.write(vec![item(i, 0)]))
                .await
                .expect("a write during the build");
            i += 1;
        }
        i
    })
}

/// An index file with the composite indexes `pairs` on `items`; its path.
fn index_file(dir: &TempDir, file: &str, pairs: &[(&str, &str)]) -> String {
    let indexes: Vec<String> = pairs
        .iter()
        .map(|(f, g)| {
            format!(
                r#"{{ "collectionGroup": "items", "queryScope": "COLLECTION", "fields": [
                    {{ "fieldPath": "{f}", "order": "ASCENDING" }},
                    {{ "fieldPath": "{g}", "order": "ASCENDING" }} ] }}"#
            )
        })
        .collect();
    let text = format!(r#"{{ "indexes": [ {} ] }}"#, indexes.join(", "));
    dir.file(file, &text).display().to_string()
}

/// Lets the writer go on 300 ms more, stops it and returns the end of its range, having
/// checked that it wrote meanwhile.
async fn finish(stop: &AtomicBool, writes: JoinHandle<u64>, from: u64) -> u64 {
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let end = writes.await.unwrap();
    let wrote = end - from;
    assert!(wrote > 20, "relay B wrote only {wrote} documents meanwhile");
    end
}

/// Asserts that relay `label`'s client plans `needs(f, g)` with the index and gets `want`.
async fn assert_serves(label: &str, c: &Client, (f, g): (&str, &str), want: &[String]) {
    let (docs, _) = within(c.query(&needs(f, g)))
        .await
        .unwrap_or_else(|e| panic!("relay {label} plans with the new index: {e}"));
    assert_eq!(names(&docs), want, "relay {label}'s result");
}

fn check_clean(url: &str, when: &str) {
    let (ok, out) = check_store(&["--postgres".into(), url.to_owned()]);
    assert!(ok, "check {when}:\n{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_created_on_one_relay_is_maintained_and_used_by_another() {
    let dir = TempDir::new("auto-shared");
    let url = crate::pg::url_for(dir.path());
    let a = Relay::fresh(&["--postgres", &url, "--auto-index"]);
    let b = Relay::fresh(&["--postgres", &url]);
    let n = 6_000;
    let cb = b.client(DB).await;
    load(&cb, n, 0).await;
    let err = within(cb.query(&needs("a", "b")))
        .await
        .expect_err("no index serves the query yet");
    assert_eq!(err.code(), Some(ErrorCode::FailedPrecondition), "{err}");
    // Relay B writes all along while relay A creates the index.
    let stop = Arc::new(AtomicBool::new(false));
    let writes = writer(&b, n, stop.clone()).await;
    let ca = a.client(DB).await;
    within_for(Duration::from_secs(120), ca.query(&needs("a", "b")))
        .await
        .expect("the index is created");
    let end = finish(&stop, writes, n).await;
    // Relay B's poll found the new definitions: a client connecting to it is told of them.
    let welcomed = b.client(DB).await.indexes();
    assert_eq!(welcomed.indexes.len(), 1, "{welcomed:?}");
    let want = expected("a", "b", end, 0);
    for (label, c) in [("A", &ca), ("B", &cb)] {
        assert_serves(label, c, ("a", "b"), &want).await;
    }
    check_clean(&url, "after the build");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_file_changed_on_one_relay_reaches_the_others_while_they_write() {
    let dir = TempDir::new("file-shared");
    let url = crate::pg::url_for(dir.path());
    let v1 = index_file(&dir, "v1.json", &[("a", "b")]);
    let v2 = index_file(&dir, "v2.json", &[("c", "d")]);
    let b = Relay::fresh(&["--postgres", &url, "--indexes", &v1]);
    let n = 6_000;
    let cb = b.client(DB).await;
    load(&cb, n, 0).await;
    within(cb.query(&needs("a", "b")))
        .await
        .expect("v1 serves (a, b)");
    // A relay starts with v2 (adds (c, d), drops (a, b)) while relay B, started with v1,
    // writes all along.
    let stop = Arc::new(AtomicBool::new(false));
    let writes = writer(&b, n, stop.clone()).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let c = Relay::fresh(&["--postgres", &url, "--indexes", &v2]);
    let end = finish(&stop, writes, n).await;
    let cc = c.client(DB).await;
    let want = expected("c", "d", end, 0);
    for (label, client) in [("B", &cb), ("C", &cc)] {
        assert_serves(label, client, ("c", "d"), &want).await;
        let err = within(client.query(&needs("a", "b")))
            .await
            .expect_err("the dropped index serves no query");
        assert_eq!(
            err.code(),
            Some(ErrorCode::FailedPrecondition),
            "relay {label}: {err}"
        );
    }
    check_clean(&url, "after the change");
}

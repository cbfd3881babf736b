//! The embedded store's I/O failures, met as operators meet them: a file that may not grow
//! (a full disk; here the process's file size limit, set and lifted from outside with
//! `prlimit`) fails the writes of that time with `unavailable` and `/healthz` says so, and
//! once it may grow again the relay takes writes again without a restart. (redb refuses every
//! operation after a failed I/O until its file is opened again.)

use std::process::Command;
use std::time::{Duration, Instant};

use hearth_core::error::ErrorCode;
use hearth_core::mutation::Mutation;

use crate::harness::*;

/// Sets the relay process's soft file size limit (`None`: unlimited), through `prlimit`
/// (the hard limit stays unlimited, so it can be lifted again without privileges).
fn limit_file_size(relay: &Relay, bytes: Option<u64>) {
    let value = bytes.map_or("unlimited".to_owned(), |b| b.to_string());
    run_ok(Command::new("prlimit").args([
        "--pid",
        &relay.pid().to_string(),
        &format!("--fsize={value}:unlimited"),
    ]));
}

fn doc(i: usize) -> Mutation {
    // Large enough that a few of them need new pages of the file.
    let text = "x".repeat(64 * 1024);
    Mutation::set(name(&format!("c/d{i}")), map([("text", s(&text))]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_file_that_may_not_grow_fails_writes_until_it_may_and_then_recovers() {
    if Command::new("prlimit").arg("--version").output().is_err() {
        println!("prlimit is missing: skipped");
        return;
    }
    if crate::pg::enabled() {
        println!("skipped: the embedded store's files (HEARTH_TEST_STORE=postgres)");
        return;
    }
    let relay = Relay::fresh(&[]);
    let client = relay.client("faults").await;
    within(client.write(vec![doc(0)])).await.unwrap();
    // The file may not grow past 1 byte: every write to it fails.
    limit_file_size(&relay, Some(1));
    let mut failed = None;
    for i in 1..50 {
        match within(client.write(vec![doc(i)])).await {
            Ok(_) => continue,
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let failed = failed.expect("a write failed while the file could not grow");
    assert_eq!(failed.code(), Some(ErrorCode::Unavailable), "{failed}");
    let (status, body) = http_get(relay.addr, "/healthz").await;
    assert_eq!(status, 503, "healthz while the store fails: {body}");
    // The limit lifted, a new connection's writes commit again, and healthz recovers.
    limit_file_size(&relay, None);
    let again = relay.client("faults").await;
    let start = Instant::now();
    let version = loop {
        match within(again.write(vec![doc(100)])).await {
            Ok(v) => break v,
            Err(e) if start.elapsed() < Duration::from_secs(20) => {
                println!("not yet: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("the store did not recover within 20 s: {e}"),
        }
    };
    println!(
        "the store took writes again {:.0} ms after the limit was lifted (version {version})",
        start.elapsed().as_secs_f64() * 1e3
    );
    let (status, body) = http_get(relay.addr, "/healthz").await;
    assert_eq!(status, 200, "{body}");
    // Nothing acknowledged was lost.
    let (got, _) = within(again.get(vec![name("c/d0"), name("c/d100")]))
        .await
        .unwrap();
    assert!(got.iter().all(|(_, d)| d.is_some()), "{got:?}");
    assert!(
        relay.log().contains("opened again"),
        "the log says the file was opened again"
    );
}

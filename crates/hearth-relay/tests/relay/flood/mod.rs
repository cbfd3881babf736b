//! The flood test (issue 11): for 60 s, nine hostile tasks hammer one relay with malformed
//! frames, invalid UTF-8, invalid paths, deeply nested values, oversized documents,
//! exploding queries, 20,000-element array transforms, listen storms up to the
//! per-connection cap, and connections opened and dropped abruptly, while a bystander on
//! database `calm` keeps writing and waiting for its listener to show each write. For local
//! runs, `HEARTH_FLOOD_SECS` shortens the flood and `HEARTH_FLOOD_ONLY=storm,churn` runs
//! only the attackers named (to find which one hurts); `HEARTH_TEST_SEED` replays one.
//!
//! It requires that:
//! - the bystander sees no error and no round trip over 10 s, every one of its writes
//!   reaches its listener, and its p99 round trip under the flood stays under
//!   [`P99_SANITY`] (2 s). Its p50/p99 in a quiet phase first and under the flood are
//!   printed, with the ratio flood/quiet; the ratio itself is not asserted, as a shared
//!   2-core CI machine makes it noisy;
//! - every refusal is the typed one the protocol names (`invalid-argument` for malformed
//!   frames, invalid names, documents over a limit and exploding queries;
//!   `resource-exhausted` for a listen past `--max-listens-per-connection`), never a
//!   silent hang-up, a hang or a dead relay;
//! - the relay stays up (`/healthz` answers 200, a fresh client writes, reads and listens
//!   in the attacked database), and the connections the flood opened are all closed;
//! - the relay's resident memory (VmRSS sampled every 250 ms, and VmHWM at the end) stays
//!   under [`RSS_BOUND`]: 512 MiB, with the store's page cache set to 128 MiB
//!   (`--cache-mib`). The release relay (1 GiB cache) peaked at 192 and 263 MiB in 60 s floods on
//!   a 2-core machine (the attackers get several times more done than against a debug
//!   relay, which peaked at 100 to 163 MiB; most of it is the index entries of the array
//!   attacker's 40,000-element documents while they commit); the bound leaves room for
//!   allocator slack and a faster machine's attackers, while memory that grows with the
//!   flood (frames buffered whole, listens or connections leaked) runs far past it.
//!
//! It runs against the release relay (`scripts/test`): see the test's own doc.
//!
//! Attackers keep fewer than 100 connections open at once (a per-address limit may be set
//! to 512 by default), and every step they await is bounded.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use hearth_client::{Client, ClientError};
use hearth_core::error::ErrorCode;
use hearth_core::mutation::{FieldTransform, Mutation, SetMerge};
use hearth_core::path::DocumentName;
use hearth_core::protocol::codec::{decode_server, decode_server_frame, encode_client};
use hearth_core::protocol::{ClientMessage, ServerMessage};
use hearth_core::query::model::{Aggregation, Operator as Op, Query};
use hearth_core::value::{Map, Value};
use tokio::io::AsyncWriteExt;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

use crate::harness::*;

mod attackers;
use attackers::*;

/// The relay's resident memory must stay under this for the whole test (see the module doc).
const RSS_BOUND: u64 = 512 << 20;

/// A loose bound on the bystander's p99 round trip under the flood: a sanity check, not a
/// performance target.
const P99_SANITY: Duration = Duration::from_secs(2);

/// How long the bystander runs alone before the flood.
const QUIET_FOR: Duration = Duration::from_secs(10);

/// The per-connection listen cap the relay runs with, and how far past it a storm goes.
const LISTEN_CAP: u32 = 200;
const STORM_PAST_CAP: u32 = 20;

/// How long one attacker step (connect, request, reply), or one bystander round trip, may
/// take before it counts as a hang.
const OP: Duration = Duration::from_secs(10);

/// How long the bystander waits for one round trip before it gives up altogether.
const GIVE_UP: Duration = Duration::from_secs(30);

/// Connections the churn attacker opens at once.
const CHURN_AT_ONCE: usize = 50;

const QUIET: u8 = 0;
const FLOOD: u8 = 1;
const DONE: u8 = 2;

/// `HEARTH_FLOOD_ONLY=storm,churn` runs only the attackers named (to find which one hurts).
fn flood_only() -> Option<Vec<String>> {
    let only = std::env::var("HEARTH_FLOOD_ONLY").ok()?;
    Some(only.split(',').map(|s| s.trim().to_owned()).collect())
}

fn flood_secs() -> u64 {
    std::env::var("HEARTH_FLOOD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60)
}

// ---------------------------------------------------------------------------------------
// Bookkeeping

/// What one attacker sent and which kinds of replies it got.
struct Tally {
    name: &'static str,
    sent: u64,
    replies: BTreeMap<String, u64>,
    unexpected: u64,
    examples: Vec<String>,
    /// The longest a single request waited for its reply.
    slowest: Duration,
}

impl Tally {
    fn new(name: &'static str) -> Tally {
        Tally {
            name,
            sent: 0,
            replies: BTreeMap::new(),
            unexpected: 0,
            examples: Vec::new(),
            slowest: Duration::ZERO,
        }
    }

    /// Counts one reply of `kind`; `expected` says whether the protocol allows it.
    fn got(&mut self, kind: impl Into<String>, expected: bool) {
        let kind = kind.into();
        // Every attacker connects from 127.0.0.1: past the relay's per-address and pending
        // connection limits, new connections are refused with 503 (or closed at accept),
        // which is those limits at work.
        let expected = expected || kind.contains("503 Service Unavailable");
        if !expected {
            self.unexpected += 1;
            if self.examples.len() < 5 {
                self.examples.push(kind.clone());
            }
        }
        *self.replies.entry(kind).or_default() += 1;
    }

    /// Notes how long a request waited for its reply (since `started`).
    fn took(&mut self, started: Instant) {
        self.slowest = self.slowest.max(started.elapsed());
    }

    /// Counts a reply that must be the typed refusal `want`.
    fn refusal(&mut self, what: &str, got: Result<(), ClientError>, want: ErrorCode) {
        match got {
            Err(e) if e.code() == Some(want) => {
                self.got(format!("{what}: {}", want.as_str()), true)
            }
            Err(e) => self.got(format!("{what}: {}", client_kind(&e)), false),
            Ok(()) => self.got(format!("{what}: accepted"), false),
        }
    }
}

fn client_kind(e: &ClientError) -> String {
    match e {
        ClientError::Server { code, .. } => code.as_str().to_owned(),
        ClientError::Closed => "connection closed".into(),
        ClientError::Protocol(_) => "protocol error".into(),
        ClientError::Io(m) if m == NO_ANSWER => format!("no answer in {OP:?}"),
        ClientError::Io(_) => "i/o error".into(),
    }
}

fn print_table(tallies: &[Tally]) {
    eprintln!(
        "flood: {:<12} {:>7} {:>10} {:>9}  replies",
        "attacker", "sent", "unexpected", "slowest"
    );
    for t in tallies {
        let replies: Vec<String> = t.replies.iter().map(|(k, n)| format!("{k} ×{n}")).collect();
        eprintln!(
            "flood: {:<12} {:>7} {:>10} {:>7}ms  {}",
            t.name,
            t.sent,
            t.unexpected,
            t.slowest.as_millis(),
            replies.join("; ")
        );
    }
}

/// Percentile `p` of sorted latencies.
fn pct(sorted: &[Duration], p: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[(sorted.len() - 1) * p / 100]
}

// ---------------------------------------------------------------------------------------
// The bystander

/// What the bystander measured: its round trips in each phase and any error it saw.
#[derive(Default)]
struct Bystanding {
    quiet: Vec<Duration>,
    flood: Vec<Duration>,
    errors: Vec<String>,
    writes: u64,
}

/// Writes one document and waits until its listener shows it, over and over until the phase
/// is `DONE`. Runs on its own thread and runtime, so the attackers' client-side work does
/// not queue in front of it; the relay is shared, which is the point.
fn bystander(url: String, phase: Arc<AtomicU8>) -> std::thread::JoinHandle<Bystanding> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut out = Bystanding::default();
            let client = match timeout(OP, Client::connect(&url, "calm", "bystander", "")).await {
                Ok(Ok(c)) => c,
                other => {
                    out.errors.push(format!("connecting: {other:?}"));
                    return out;
                }
            };
            let q = Query::collection(coll("calm"));
            let first = match timeout(OP, client.listen(&q, None)).await {
                Ok(Ok(mut l)) => timeout(OP, l.next()).await.map(|r| r.map(|_| l)),
                Ok(Err(e)) => Ok(Err(e)),
                Err(e) => Err(e),
            };
            let mut listener = match first {
                Ok(Ok(l)) => l,
                other => {
                    out.errors.push(format!("listening: {:?}", other.err()));
                    return out;
                }
            };
            let mut i = 0i64;
            while phase.load(Ordering::Relaxed) != DONE {
                i += 1;
                let doc = name(&format!("calm/d{}", i % 20));
                let at = phase.load(Ordering::Relaxed);
                let started = Instant::now();
                let write = Mutation::set(doc.clone(), map([("n", int(i))]));
                let version = match timeout(GIVE_UP, client.write(vec![write])).await {
                    Ok(Ok(v)) => v,
                    Ok(Err(e)) => {
                        out.errors.push(format!("write {i}: {e}"));
                        break;
                    }
                    Err(_) => {
                        out.errors.push(format!("write {i}: no answer in {GIVE_UP:?}"));
                        break;
                    }
                };
                out.writes += 1;
                // The listener must show this write, at its version or a later one.
                let shown = loop {
                    let left = GIVE_UP.saturating_sub(started.elapsed());
                    match timeout(left, listener.next()).await {
                        Ok(Ok(snap)) if snap.version >= version => {
                            let n = snap
                                .documents
                                .iter()
                                .find(|d| d.name == doc)
                                .and_then(|d| d.fields.get("n"));
                            break if n == Some(&int(i)) {
                                Ok(())
                            } else {
                                Err(format!(
                                    "write {i} at version {version}: the snapshot at {} shows {n:?}",
                                    snap.version
                                ))
                            };
                        }
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => break Err(format!("listener after write {i}: {e}")),
                        Err(_) => {
                            break Err(format!("write {i} not shown by the listener in {GIVE_UP:?}"))
                        }
                    }
                };
                if let Err(e) = shown {
                    out.errors.push(e);
                    break;
                }
                let took = started.elapsed();
                if took > OP {
                    // Slow enough to count as a hang; it is measured all the same.
                    out.errors.push(format!("write {i} took {took:?} to reach the listener"));
                }
                if at == QUIET {
                    out.quiet.push(took);
                } else {
                    out.flood.push(took);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            client.close().await;
            out
        })
    })
}

// ---------------------------------------------------------------------------------------
// Memory

/// The relay's resident memory, sampled every 250 ms: the peak per phase, in KiB.
struct RssSampler {
    peaks: Arc<Mutex<[u64; 3]>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

/// A `kB` field of `/proc/<pid>/status` (VmRSS, VmHWM).
fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

impl RssSampler {
    fn start(pid: u32, phase: Arc<AtomicU8>) -> RssSampler {
        let peaks = Arc::new(Mutex::new([0u64; 3]));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = {
            let (peaks, stop) = (peaks.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Some(kib) = proc_status_kib(pid, "VmRSS") {
                        let at = phase.load(Ordering::Relaxed).min(DONE) as usize;
                        let mut p = peaks.lock().unwrap();
                        p[at] = p[at].max(kib);
                    }
                    std::thread::sleep(Duration::from_millis(250));
                }
            })
        };
        RssSampler {
            peaks,
            stop,
            thread,
        }
    }

    fn finish(self) -> [u64; 3] {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        *self.peaks.lock().unwrap()
    }
}

/// The relay's group commits from its metrics: how many, and how many took long (a write
/// waits for the round it joins, whatever database the round's other batches are for).
fn rounds(metrics: &str) -> String {
    let h = "hearth_group_commit_seconds";
    let count = metric(metrics, &format!("{h}_count")).unwrap_or(0.0);
    let sum = metric(metrics, &format!("{h}_sum")).unwrap_or(0.0);
    let over =
        |le: &str| count - metric(metrics, &format!("{h}_bucket{{le=\"{le}\"}}")).unwrap_or(count);
    format!(
        "{count}, mean {:.1} ms; over 0.25 s: {}, over 1 s: {}, over 2.5 s: {}, over 5 s: {}",
        sum * 1000.0 / count.max(1.0),
        over("0.25"),
        over("1"),
        over("2.5"),
        over("5")
    )
}

// ---------------------------------------------------------------------------------------
// The test

/// Run against the release relay (`scripts/test` builds it and passes it in
/// `HEARTH_TEST_RELAY_BIN`): a debug relay is ten times slower at the work the attackers
/// ask for, so its figures say nothing about the relay users run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by scripts/test against the release relay"]
async fn a_flood_of_hostile_clients_leaves_a_bystander_unharmed() {
    let secs = flood_secs();
    let only = flood_only();
    let cap = LISTEN_CAP.to_string();
    let relay = Relay::fresh(&[
        "--max-listens-per-connection",
        &cap,
        // The store's page cache (1 GiB by default) bounded, so the bound below is about
        // what the relay holds for its clients.
        "--cache-mib",
        "128",
    ]);
    let url = relay.url();
    let pid = relay.pid();
    let mut seeds = Rng::from_env("flood");
    let phase = Arc::new(AtomicU8::new(QUIET));
    let rss = RssSampler::start(pid, phase.clone());
    let calm = bystander(url.clone(), phase.clone());

    tokio::time::sleep(QUIET_FOR).await;
    phase.store(FLOOD, Ordering::Relaxed);
    let started = Instant::now();
    let deadline = started + Duration::from_secs(secs);
    let mut rng = || Rng::new(seeds.next_u64());
    let mut attackers = Vec::new();
    let mut launch = |name: &str, attack: Pin<Box<dyn Future<Output = Tally> + Send>>| {
        if only.as_ref().is_none_or(|o| o.iter().any(|n| n == name)) {
            attackers.push(tokio::spawn(attack));
        }
    };
    launch("garbage", Box::pin(garbage(url.clone(), deadline, rng())));
    launch(
        "bad-frames",
        Box::pin(bad_frames(url.clone(), deadline, rng())),
    );
    launch(
        "oversized",
        Box::pin(oversized(url.clone(), deadline, rng())),
    );
    launch(
        "exploding",
        Box::pin(exploder(url.clone(), "hostile", deadline, rng())),
    );
    launch(
        "exploding-2",
        Box::pin(exploder(url.clone(), "other", deadline, rng())),
    );
    launch("arrays", Box::pin(arrays(url.clone(), deadline, rng())));
    launch(
        "storm",
        Box::pin(storm(url.clone(), "storm", deadline, rng())),
    );
    launch(
        "storm-2",
        Box::pin(storm(url.clone(), "hostile", deadline, rng())),
    );
    launch(
        "churn",
        Box::pin(churn(url.clone(), relay.addr, deadline, rng())),
    );
    // Every attacker stops at the deadline, after at most a bounded step or two.
    let joined_by = deadline + Duration::from_secs(30);
    let mut tallies = Vec::new();
    for a in attackers {
        tallies.push(
            within_for(joined_by.saturating_duration_since(Instant::now()), a)
                .await
                .expect("an attacker task panicked"),
        );
    }
    let flooded_for = started.elapsed();
    phase.store(DONE, Ordering::Relaxed);
    let calm = calm.join().expect("the bystander's thread");
    print_table(&tallies);

    // The bystander's figures.
    let (mut quiet, mut flood) = (calm.quiet.clone(), calm.flood.clone());
    quiet.sort();
    flood.sort();
    let (q50, q99, f50, f99) = (
        pct(&quiet, 50),
        pct(&quiet, 99),
        pct(&flood, 50),
        pct(&flood, 99),
    );
    let ratio = f99.as_secs_f64() / q99.as_secs_f64().max(1e-6);
    eprintln!(
        "flood: {flooded_for:?} of flood; bystander quiet: {} round trips, p50 {q50:?}, p99 {q99:?}; \
         flood: {} round trips, p50 {f50:?}, p99 {f99:?}, max {:?}; p99 flood/quiet = {ratio:.2}",
        quiet.len(),
        flood.len(),
        pct(&flood, 100)
    );

    // The relay is up and serves the attacked database.
    let (health, _) = http_get(relay.addr, "/healthz").await;
    let c = relay.client("hostile").await;
    let doc = name("after/flood");
    let v = within(c.write(vec![Mutation::set(
        doc.clone(),
        map([("ok", Value::Boolean(true))]),
    )]))
    .await
    .expect("a fresh client writes after the flood");
    let got = within(c.get_one(&doc)).await.expect("and reads");
    let mut l = within(c.listen(&Query::collection(coll("after")), None))
        .await
        .unwrap();
    let snap = within(l.next()).await.expect("and listens");
    // The connections the flood opened are gone: only this client's is left.
    let (mut open, mut metrics) = (None, String::new());
    for _ in 0..75 {
        (_, metrics) = http_get(relay.addr, "/metrics").await;
        open = metric(&metrics, "hearth_connections_open");
        if open.is_some_and(|n| n <= 1.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let hwm = proc_status_kib(pid, "VmHWM").unwrap_or(0);
    let peaks = rss.finish();
    eprintln!(
        "flood: relay RSS peak quiet {} MiB, flood and after {} MiB; VmHWM {} MiB; bound {} MiB",
        peaks[0] >> 10,
        peaks[1].max(peaks[2]) >> 10,
        hwm >> 10,
        RSS_BOUND >> 20
    );
    eprintln!("flood: connections open after the flood: {open:?}");
    eprintln!(
        "flood: relay group commits (rounds of every shard's committer): {}",
        rounds(&metrics)
    );

    // Every failure at once: the figures above say which attack did it.
    let mut failures = Vec::new();
    if !calm.errors.is_empty() {
        failures.push(format!("the bystander saw errors: {:?}", calm.errors));
    }
    if calm.writes as usize != quiet.len() + flood.len() {
        failures.push("a bystander write never reached its listener".into());
    }
    if quiet.len() < 10 || flood.len() < 10 {
        failures.push("the bystander hardly ran".into());
    }
    if f99 >= P99_SANITY {
        failures.push(format!(
            "the bystander's p99 under the flood is {f99:?}, over {P99_SANITY:?}"
        ));
    }
    for t in &tallies {
        if t.sent == 0 {
            failures.push(format!("{} sent nothing", t.name));
        }
        if t.unexpected > 0 {
            failures.push(format!(
                "{}: {} unexpected replies, e.g. {:?}",
                t.name, t.unexpected, t.examples
            ));
        }
    }
    if health != 200 {
        failures.push(format!("/healthz answered {health}"));
    }
    if !(v > 0 && got.is_some() && snap.documents.len() == 1) {
        failures.push("a fresh client's write was not read back or listened to".into());
    }
    if !open.is_some_and(|n| n <= 1.0) {
        failures.push(format!("connections left open after the flood: {open:?}"));
    }
    let peak = peaks.iter().copied().max().unwrap_or(0).max(hwm) << 10;
    if peak == 0 && std::path::Path::new("/proc/self/status").exists() {
        failures.push("no memory figures for the relay".into());
    }
    if peak >= RSS_BOUND {
        failures.push(format!(
            "the relay's resident memory reached {} MiB, over the bound of {} MiB",
            peak >> 20,
            RSS_BOUND >> 20
        ));
    }
    assert!(
        failures.is_empty(),
        "the flood did harm:\n{}",
        failures.join("\n")
    );
}

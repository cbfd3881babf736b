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
//!   under [`RSS_BOUND`]: 512 MiB. The release relay peaked at 192 MiB in a 60 s flood on
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
use hearth_core::protocol::codec::{decode_server, encode_client};
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

// ---------------------------------------------------------------------------------------
// Raw sockets that never panic: under a flood, a failure to connect is a finding to count.

async fn try_raw(url: &str) -> Result<RawSocket, String> {
    let config = WebSocketConfig::default()
        .read_buffer_size(4096)
        .max_message_size(None)
        .max_frame_size(None);
    match timeout(
        OP,
        tokio_tungstenite::connect_async_with_config(url, Some(config), true),
    )
    .await
    {
        Ok(Ok((ws, _))) => Ok(ws),
        Ok(Err(e)) => Err(format!("connect failed ({e})")),
        Err(_) => Err("connect timed out".into()),
    }
}

async fn try_handshaken(url: &str, db: &str) -> Result<RawSocket, String> {
    let mut ws = try_raw(url).await?;
    let _ = timeout(OP, ws.send(Message::Binary(hello(db).into()))).await;
    match timeout(OP, ws.next()).await {
        Ok(Some(Ok(Message::Binary(b)))) => match decode_server(&b) {
            Ok(ServerMessage::Welcome { .. }) => Ok(ws),
            other => Err(format!("no Welcome ({other:?})")),
        },
        Ok(other) => Err(format!("no Welcome ({other:?})")),
        Err(_) => Err("no Welcome in time".into()),
    }
}

async fn try_send(ws: &mut RawSocket, m: Message) {
    let _ = timeout(OP, ws.send(m)).await;
}

/// How a raw socket ended after a frame the relay must refuse; whether that is the
/// protocol's refusal (a connection `Error` with `want`, or at least a clean close).
async fn refusal_kind(ws: &mut RawSocket, want: ErrorCode) -> (String, bool) {
    match read_until_closed(ws, OP).await {
        None => ("no answer, not closed".into(), false),
        Some(end) => match end.errors().first() {
            Some(ServerMessage::Error { code, .. }) => {
                (format!("closed with {}", code.as_str()), *code == want)
            }
            _ if end.close_frame => ("clean close without an error".into(), true),
            _ => ("dropped without an error or close".into(), false),
        },
    }
}

// ---------------------------------------------------------------------------------------
// Frames

/// Random bytes, `min` to `min + spread - 1` of them.
fn random_bytes(rng: &mut Rng, min: usize, spread: u64) -> Vec<u8> {
    let len = min + rng.below(spread) as usize;
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

fn put_varint(mut n: u64, out: &mut Vec<u8>) {
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// A protocol string: its length, then its bytes (valid UTF-8 or not).
fn put_bytes(s: &[u8], out: &mut Vec<u8>) {
    put_varint(s.len() as u64, out);
    out.extend_from_slice(s);
}

/// `frame` with the protocol string `from` (length and bytes) replaced by `to`.
fn splice_string(frame: &[u8], from: &str, to: &[u8]) -> Vec<u8> {
    let mut needle = Vec::new();
    put_bytes(from.as_bytes(), &mut needle);
    let at = frame
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("the placeholder is in the frame");
    let mut out = frame[..at].to_vec();
    put_bytes(to, &mut out);
    out.extend_from_slice(&frame[at + needle.len()..]);
    out
}

fn sample_frames() -> Vec<Vec<u8>> {
    let q = Query::collection(coll("junk"))
        .where_("n", Op::GreaterThan, int(1))
        .limit(3);
    vec![
        encode_client(&ClientMessage::Write {
            request_id: 7,
            batch_id: 9,
            mutations: vec![Mutation::set(
                name("junk/a"),
                map([("s", s("hello")), ("arr", arr(&["x", "y"]))]),
            )],
            reads: vec![(name("junk/b"), Some(3))],
        }),
        encode_client(&ClientMessage::RunQuery {
            request_id: 1,
            query: q.clone(),
        }),
        encode_client(&ClientMessage::Listen {
            target_id: 5,
            query: q,
            resume_version: None,
        }),
        encode_client(&ClientMessage::Get {
            request_id: 2,
            names: vec![name("junk/a"), name("junk/c/d/e")],
        }),
    ]
}

/// A Write of `flood/deep` whose field `x` holds maps nested `depth` levels around a null,
/// built byte by byte (a `Value` that deep is costly to build and to drop).
fn deep_write(depth: usize) -> Vec<u8> {
    let frame = encode_client(&ClientMessage::Write {
        request_id: 1,
        batch_id: 1,
        mutations: vec![Mutation::set(
            name("flood/deep"),
            map([("xqxqxq", Value::Null)]),
        )],
        reads: vec![],
    });
    let mut key = Vec::new();
    put_bytes(b"xqxqxq", &mut key);
    key.push(0x00);
    let at = frame
        .windows(key.len())
        .position(|w| w == key)
        .expect("the placeholder field");
    let mut out = frame[..at + key.len() - 1].to_vec();
    for _ in 0..depth {
        out.extend_from_slice(&[0x0b, 0x01, 0x01, b'a']);
    }
    out.push(0x00);
    out.extend_from_slice(&frame[at + key.len()..]);
    out
}

/// A value of maps and arrays nested `depth` levels (no array directly in an array).
fn nested(depth: usize) -> Value {
    (0..depth).fold(Value::Null, |v, level| {
        if level % 2 == 0 {
            Value::Map(Map::from([("a".to_owned(), v)]))
        } else {
            Value::Array(vec![v])
        }
    })
}

const BAD_NAMES: &[&str] = &[
    "flood",
    "flood/a/b",
    "/flood/a",
    "flood/a/",
    "flood//a",
    "flood/..",
    "flood/.",
    "__flood__/a",
    "flood/__a__",
    "",
];

const BAD_COLLECTIONS: &[&str] = &["flood/a", "", "/flood", "flood//a/b", "__x__", ".."];

// ---------------------------------------------------------------------------------------
// The attackers

/// (a) Garbage binary frames (before and after the Hello), valid frames cut short or with
/// bytes added, and text frames (valid and invalid UTF-8), each on a fresh raw socket.
async fn garbage(url: String, deadline: Instant, mut rng: Rng) -> Tally {
    let mut t = Tally::new("garbage");
    let samples = sample_frames();
    while Instant::now() < deadline {
        let choice = rng.below(7);
        let ws = if choice == 0 {
            try_raw(&url).await
        } else {
            try_handshaken(&url, "hostile").await
        };
        let mut ws = match ws {
            Ok(ws) => ws,
            Err(e) => {
                t.got(e, false);
                continue;
            }
        };
        let (what, frame) = match choice {
            0 => {
                let mut f = random_bytes(&mut rng, 1, 2000);
                f[0] |= 0x40;
                ("garbage before Hello", Message::Binary(f.into()))
            }
            1 => {
                let mut f = random_bytes(&mut rng, 0, 70_000);
                if let Some(b) = f.first_mut() {
                    *b |= 0x40;
                }
                ("garbage", Message::Binary(f.into()))
            }
            2 => {
                let f = &samples[rng.below(samples.len() as u64) as usize];
                let cut = 1 + rng.below(f.len() as u64 - 1) as usize;
                ("truncated frame", Message::Binary(f[..cut].to_vec().into()))
            }
            3 => {
                let mut f = samples[rng.below(samples.len() as u64) as usize].clone();
                f.extend(random_bytes(&mut rng, 1, 8));
                ("trailing bytes", Message::Binary(f.into()))
            }
            4 => {
                let f = rng.pick(&[&[0x7f, 1, 2, 3][..], &[0x87, 0x01], &[0x00]]);
                ("unknown or server type", Message::Binary(f.to_vec().into()))
            }
            5 => {
                let mut f = random_bytes(&mut rng, 1, 64);
                f.extend_from_slice(&[0xff, 0xfe, 0xc0, 0x80, 0xed, 0xa0, 0x80]);
                (
                    "invalid UTF-8 text frame",
                    Message::Frame(Frame::message(f, OpCode::Data(Data::Text), true)),
                )
            }
            _ => ("text frame", Message::Text("{\"hello\": 1}".into())),
        };
        let started = Instant::now();
        try_send(&mut ws, frame).await;
        t.sent += 1;
        let (kind, ok) = refusal_kind(&mut ws, ErrorCode::InvalidArgument).await;
        t.took(started);
        t.got(format!("{what}: {kind}"), ok);
    }
    t
}

/// (b, c) Frames the codec refuses for their content: invalid document names and
/// collection paths, strings of invalid UTF-8, and values nested past the decoder's bound
/// (101 to 100,000 levels).
async fn bad_frames(url: String, deadline: Instant, mut rng: Rng) -> Tally {
    let mut t = Tally::new("bad-frames");
    // The hand-built nesting matches the codec's own encoding.
    let shallow = encode_client(&ClientMessage::Write {
        request_id: 1,
        batch_id: 1,
        mutations: vec![Mutation::set(
            name("flood/deep"),
            map([(
                "xqxqxq",
                Value::Map(Map::from([(
                    "a".to_owned(),
                    Value::Map(Map::from([("a".to_owned(), Value::Null)])),
                )])),
            )]),
        )],
        reads: vec![],
    });
    assert_eq!(deep_write(2), shallow);
    let get = encode_client(&ClientMessage::Get {
        request_id: 3,
        names: vec![name("zzplaceholder/zz")],
    });
    let write = encode_client(&ClientMessage::Write {
        request_id: 4,
        batch_id: 4,
        mutations: vec![Mutation::set(
            name("zzplaceholder/zz"),
            map([("n", int(1))]),
        )],
        reads: vec![],
    });
    let listen = encode_client(&ClientMessage::Listen {
        target_id: 1,
        query: Query::collection(coll("zzplaceholder")),
        resume_version: None,
    });
    while Instant::now() < deadline {
        let choice = rng.below(6);
        let mut ws = match try_handshaken(&url, "hostile").await {
            Ok(ws) => ws,
            Err(e) => {
                t.got(e, false);
                continue;
            }
        };
        let (what, frame) = match choice {
            0 => {
                let bad = rng.pick(BAD_NAMES);
                (
                    "Get of an invalid name",
                    splice_string(&get, "zzplaceholder/zz", bad.as_bytes()),
                )
            }
            1 => {
                let bad = rng.pick(BAD_NAMES);
                (
                    "Write to an invalid name",
                    splice_string(&write, "zzplaceholder/zz", bad.as_bytes()),
                )
            }
            2 => {
                let bad = rng.pick(BAD_COLLECTIONS);
                (
                    "Listen on an invalid collection",
                    splice_string(&listen, "zzplaceholder", bad.as_bytes()),
                )
            }
            3 => {
                let long = match rng.below(2) {
                    0 => format!("flood/{}", "x".repeat(1501)),
                    _ => vec!["f/d"; 101].join("/"),
                };
                (
                    "a name over a length limit",
                    splice_string(&get, "zzplaceholder/zz", long.as_bytes()),
                )
            }
            4 => {
                let bad: &[u8] = rng.pick(&[
                    &b"flood/\xff\xfe"[..],
                    &b"\xc0\x80/a"[..],
                    &b"f/\xed\xa0\x80"[..],
                ]);
                (
                    "a name of invalid UTF-8",
                    splice_string(&write, "zzplaceholder/zz", bad),
                )
            }
            _ => {
                let depth = rng.pick(&[101, 1000, 100_000]);
                ("a value nested past 100 levels", deep_write(depth))
            }
        };
        let started = Instant::now();
        try_send(&mut ws, Message::Binary(frame.into())).await;
        t.sent += 1;
        let (kind, ok) = refusal_kind(&mut ws, ErrorCode::InvalidArgument).await;
        t.took(started);
        t.got(format!("{what}: {kind}"), ok);
    }
    t
}

/// Connects a client, counting a failure; `None` when the deadline passes first.
async fn connect_counted(url: &str, db: &str, t: &mut Tally, deadline: Instant) -> Option<Client> {
    while Instant::now() < deadline {
        match timeout(OP, Client::connect(url, db, &unique("attacker"), "")).await {
            Ok(Ok(c)) => return Some(c),
            Ok(Err(e)) => t.got(format!("connect: {}", client_kind(&e)), false),
            Err(_) => t.got("connect: timed out", false),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

const NO_ANSWER: &str = "no answer in time";

/// Awaits a request for at most [`OP`]; a timeout is an error of its own kind.
async fn bounded<T>(
    fut: impl std::future::Future<Output = Result<T, ClientError>>,
) -> Result<T, ClientError> {
    timeout(OP, fut)
        .await
        .unwrap_or_else(|_| Err(ClientError::Io(NO_ANSWER.into())))
}

/// (b) Documents just over 1 MiB (set directly, or grown past it by an update), and values
/// nested 21 to 40 levels (past the document limit of 20, under the decoder's 100), through
/// the client: each refused with `invalid-argument`, the connection going on.
async fn oversized(url: String, deadline: Instant, mut rng: Rng) -> Tally {
    let mut t = Tally::new("oversized");
    let big = "x".repeat((1 << 20) + 100);
    let half = "y".repeat(600 << 10);
    let mut client = None;
    while Instant::now() < deadline {
        if client.as_ref().is_none_or(Client::is_closed) {
            client = connect_counted(&url, "hostile", &mut t, deadline).await;
        }
        let Some(c) = &client else { break };
        let started = Instant::now();
        let doc = name(&format!("flood/o{}", rng.below(8)));
        match rng.below(3) {
            0 => {
                let m = Mutation::set(doc, map([("s", s(&big))]));
                t.sent += 1;
                let r = bounded(c.write(vec![m])).await.map(|_| ());
                t.refusal("set over 1 MiB", r, ErrorCode::InvalidArgument);
            }
            1 => {
                t.sent += 2;
                match bounded(c.write(vec![Mutation::set(doc.clone(), map([("a", s(&half))]))]))
                    .await
                {
                    Ok(_) => t.got("set of 600 KiB: ok", true),
                    Err(e) => t.got(format!("set of 600 KiB: {}", client_kind(&e)), false),
                }
                let grow = Mutation::update(doc, vec![(fp("b"), Some(s(&half)))]);
                let r = bounded(c.write(vec![grow])).await.map(|_| ());
                t.refusal("update past 1 MiB", r, ErrorCode::InvalidArgument);
            }
            _ => {
                let depth = 21 + rng.below(20) as usize;
                let m = Mutation::set(doc, map([("deep", nested(depth))]));
                t.sent += 1;
                let r = bounded(c.write(vec![m])).await.map(|_| ());
                t.refusal("nested past 20", r, ErrorCode::InvalidArgument);
            }
        }
        t.took(started);
    }
    t
}

/// Six `in` filters of 30 values on different fields: 30^6 disjunctions.
fn exploding(collection: &str) -> Query {
    let values = Value::Array((0..30).map(int).collect());
    ["a", "b", "c", "d", "e", "f"]
        .iter()
        .fold(Query::collection(coll(collection)), |q, f| {
            q.where_(f, Op::In, values.clone())
        })
}

/// (d) Exploding queries as one-time queries, aggregations and listens: each refused with
/// `invalid-argument` before any work.
async fn exploder(url: String, db: &'static str, deadline: Instant, mut rng: Rng) -> Tally {
    let mut t = Tally::new(if db == "hostile" {
        "exploding"
    } else {
        "exploding-2"
    });
    let q = exploding("flood");
    let mut client = None;
    while Instant::now() < deadline {
        if client.as_ref().is_none_or(Client::is_closed) {
            client = connect_counted(&url, db, &mut t, deadline).await;
        }
        let Some(c) = &client else { break };
        let started = Instant::now();
        t.sent += 1;
        match rng.below(3) {
            0 => {
                let r = bounded(c.query(&q)).await.map(|_| ());
                t.refusal("query", r, ErrorCode::InvalidArgument);
            }
            1 => {
                let r = bounded(c.aggregate(&q, vec![Aggregation::Count]))
                    .await
                    .map(|_| ());
                t.refusal("aggregation", r, ErrorCode::InvalidArgument);
            }
            _ => {
                let r = match bounded(c.listen(&q, None)).await {
                    Ok(mut l) => bounded(l.next()).await.map(|_| ()),
                    Err(e) => Err(e),
                };
                t.refusal("listen", r, ErrorCode::InvalidArgument);
            }
        }
        t.took(started);
    }
    t
}

/// A transform of field `xs` that creates the document if it is missing.
fn merge_transform(doc: &DocumentName, transform: FieldTransform) -> Mutation {
    Mutation::set_merge(doc.clone(), Map::new(), SetMerge::MergeAll)
        .with_transform(fp("xs"), transform)
}

/// (e) 20,000-element array transforms, on database `arrays`: unions of fresh elements
/// onto one document until it passes 1 MiB (refused with `invalid-argument`; then it is
/// deleted and grown again), and a 20,000-element union and removal on another, repeated.
async fn arrays(url: String, deadline: Instant, mut rng: Rng) -> Tally {
    let mut t = Tally::new("arrays");
    let growing = name("flood/growing");
    let churned = name("flood/churned");
    let chunk = |from: i64| -> Vec<Value> { (from..from + 20_000).map(int).collect() };
    let mut next = 0i64;
    let mut client = None;
    while Instant::now() < deadline {
        if client.as_ref().is_none_or(Client::is_closed) {
            client = connect_counted(&url, "arrays", &mut t, deadline).await;
        }
        let Some(c) = &client else { break };
        let started = Instant::now();
        t.sent += 1;
        if rng.chance(60) {
            let m = merge_transform(&growing, FieldTransform::ArrayUnion(chunk(next)));
            next += 20_000;
            match bounded(c.write(vec![m])).await {
                Ok(_) => t.got("union of 20,000 new: ok", true),
                Err(e) if e.code() == Some(ErrorCode::InvalidArgument) => {
                    t.got("union of 20,000 new: invalid-argument (over a limit)", true);
                    t.sent += 1;
                    match bounded(c.write(vec![Mutation::delete(growing.clone())])).await {
                        Ok(_) => t.got("delete: ok", true),
                        Err(e) => t.got(format!("delete: {}", client_kind(&e)), false),
                    }
                    next = 0;
                }
                Err(e) => t.got(format!("union of 20,000 new: {}", client_kind(&e)), false),
            }
        } else {
            let from = rng.below(4) as i64 * 10_000;
            let transform = if rng.chance(50) {
                FieldTransform::ArrayUnion(chunk(from))
            } else {
                FieldTransform::ArrayRemove(chunk(from))
            };
            let m = merge_transform(&churned, transform);
            match bounded(c.write(vec![m])).await {
                Ok(_) => t.got("union/remove of 20,000: ok", true),
                // Past 40,000 elements the document passes Firestore's 40,000 index entries.
                Err(e)
                    if e.code() == Some(ErrorCode::InvalidArgument)
                        && e.to_string().contains("index entries") =>
                {
                    t.got(
                        "union/remove of 20,000: invalid-argument (index entries)",
                        true,
                    )
                }
                Err(e) => t.got(
                    format!("union/remove of 20,000: {}", client_kind(&e)),
                    false,
                ),
            }
        }
        t.took(started);
    }
    t
}

/// (f) Listen storms on a raw socket: `LISTEN_CAP + STORM_PAST_CAP` listens at once (those
/// past the cap refused with `resource-exhausted`), then every one stopped, a ping
/// answered, and the connection closed cleanly or dropped abruptly; again.
async fn storm(url: String, db: &'static str, deadline: Instant, mut rng: Rng) -> Tally {
    let mut t = Tally::new(if db == "storm" { "storm" } else { "storm-2" });
    let total = LISTEN_CAP + STORM_PAST_CAP;
    while Instant::now() < deadline {
        let mut ws = match try_handshaken(&url, db).await {
            Ok(ws) => ws,
            Err(e) => {
                t.got(e, false);
                continue;
            }
        };
        let salt = rng.below(1000) as i64;
        for target_id in 1..=total {
            let query = Query::collection(coll("flood")).where_(
                "n",
                Op::Equal,
                int(salt * 10_000 + i64::from(target_id)),
            );
            let listen = encode_client(&ClientMessage::Listen {
                target_id,
                query,
                resume_version: None,
            });
            try_send(&mut ws, Message::Binary(listen.into())).await;
        }
        t.sent += u64::from(total);
        let started = Instant::now();
        // Read until each listen under the cap has its first Reset (protocol §5.2) and each
        // one past it its refusal.
        let mut served = std::collections::BTreeSet::new();
        let (mut refused, mut other) = (0u32, Vec::new());
        let read = timeout(OP, async {
            while refused < STORM_PAST_CAP || (served.len() as u32) < LISTEN_CAP {
                match ws.next().await {
                    Some(Ok(Message::Binary(b))) => match decode_server(&b) {
                        Ok(ServerMessage::TargetChange { target_id, .. })
                            if target_id <= LISTEN_CAP =>
                        {
                            served.insert(target_id);
                        }
                        Ok(ServerMessage::TargetChange { target_id, .. }) => {
                            other.push(format!("target {target_id}, past the cap, served"))
                        }
                        Ok(ServerMessage::Error {
                            code: ErrorCode::ResourceExhausted,
                            target_id,
                            ..
                        }) if target_id > LISTEN_CAP => refused += 1,
                        Ok(ServerMessage::Error {
                            code, target_id, ..
                        }) => other.push(format!("{} on target {target_id}", code.as_str())),
                        Ok(_) => {}
                        Err(e) => other.push(format!("undecodable ({e})")),
                    },
                    Some(Ok(_)) => {}
                    Some(Err(_)) | None => return false,
                }
            }
            true
        })
        .await;
        match read {
            Ok(true) => t.got(
                format!(
                    "{LISTEN_CAP} served, {STORM_PAST_CAP} past the cap refused with resource-exhausted"
                ),
                true,
            ),
            Ok(false) => t.got("connection ended mid-storm", false),
            Err(_) => t.got(
                format!(
                    "in {OP:?}, only {} served and {refused} refused",
                    served.len()
                ),
                false,
            ),
        }
        t.took(started);
        for o in other {
            t.got(format!("error: {o}"), false);
        }
        // Stop them all; a ping round trip shows the connection still serves.
        for target_id in 1..=total {
            let stop = encode_client(&ClientMessage::Unlisten { target_id });
            try_send(&mut ws, Message::Binary(stop.into())).await;
        }
        let ping = encode_client(&ClientMessage::Ping { nonce: 4242 });
        try_send(&mut ws, Message::Binary(ping.into())).await;
        let pong = timeout(OP, async {
            loop {
                match ws.next().await {
                    Some(Ok(Message::Binary(b))) => {
                        if let Ok(ServerMessage::Heartbeat { nonce: 4242, .. }) = decode_server(&b)
                        {
                            return true;
                        }
                    }
                    Some(Ok(_)) => {}
                    _ => return false,
                }
            }
        })
        .await;
        t.got(
            if pong == Ok(true) {
                "ping after unlistening: answered"
            } else {
                "ping after unlistening: no answer"
            },
            pong == Ok(true),
        );
        if rng.chance(50) {
            let _ = timeout(OP, ws.close(None)).await;
        }
        drop(ws);
    }
    t
}

/// (g) Connections opened and dropped abruptly, `CHURN_AT_ONCE` at a time: bare TCP, half
/// an HTTP request, an upgrade without a Hello, a Hello, a Hello and a Listen, a Hello and
/// a Write, each dropped without a Close.
async fn churn(url: String, addr: std::net::SocketAddr, deadline: Instant, mut rng: Rng) -> Tally {
    let t = Arc::new(Mutex::new(Tally::new("churn")));
    while Instant::now() < deadline {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..CHURN_AT_ONCE {
            let (url, t, how) = (url.clone(), t.clone(), rng.below(6));
            set.spawn(async move {
                let kind = match how {
                    0 => match timeout(OP, tokio::net::TcpStream::connect(addr)).await {
                        Ok(Ok(_)) => Ok("bare TCP"),
                        _ => Err("bare TCP: connect failed"),
                    },
                    1 => match timeout(OP, tokio::net::TcpStream::connect(addr)).await {
                        Ok(Ok(mut tcp)) => {
                            let half =
                                format!("GET /v1/ws HTTP/1.1\r\nHost: {addr}\r\nUpgrade: webso");
                            let _ = timeout(OP, tcp.write_all(half.as_bytes())).await;
                            Ok("half an HTTP request")
                        }
                        _ => Err("half an HTTP request: connect failed"),
                    },
                    2 => try_raw(&url)
                        .await
                        .map(|_| "upgrade, no Hello")
                        .map_err(|_| "upgrade: failed"),
                    _ => match try_handshaken(&url, "churn").await {
                        Ok(mut ws) => {
                            let frame = match how {
                                3 => None,
                                4 => Some(ClientMessage::Listen {
                                    target_id: 1,
                                    query: Query::collection(coll("flood")),
                                    resume_version: None,
                                }),
                                _ => Some(ClientMessage::Write {
                                    request_id: 1,
                                    batch_id: 1,
                                    mutations: vec![Mutation::set(
                                        name(&format!("flood/{}", unique("c"))),
                                        map([("n", int(1))]),
                                    )],
                                    reads: vec![],
                                }),
                            };
                            if let Some(m) = frame {
                                try_send(&mut ws, Message::Binary(encode_client(&m).into())).await;
                            }
                            Ok(match how {
                                3 => "Hello, dropped",
                                4 => "Hello + Listen, dropped",
                                _ => "Hello + Write, dropped",
                            })
                        }
                        Err(_) => Err("Hello: failed"),
                    },
                };
                let mut t = t.lock().unwrap();
                t.sent += 1;
                // A connection the relay refuses (its per-address and pending limits fill
                // with the churn's own half-open connections) is a limit at work; what
                // the churn checks is that nothing it leaves behind stays open.
                match kind {
                    Ok(k) => t.got(k, true),
                    Err(k) => t.got(format!("{k} (refused by a connection limit)"), true),
                }
            });
        }
        while set.join_next().await.is_some() {}
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let t = std::mem::replace(&mut *t.lock().unwrap(), Tally::new("churn"));
    t
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
    let relay = Relay::fresh(&["--max-listens-per-connection", &cap]);
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
        "flood: relay group commits (rounds of the one committer): {}",
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

//! The flood test's attackers: each loops until its deadline, counting what it sent and
//! what came back ([`Tally`]).

use super::*;

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
pub(super) async fn garbage(url: String, deadline: Instant, mut rng: Rng) -> Tally {
    let mut t = Tally::new("garbage");
    let samples = sample_frames();
    while Instant::now() < deadline {
        let choice = rng.below(7);
        let ws = if choice == 0 {
            try_raw(&url).await
        } else {
            try_handshaken(&url, "hostile").await
        };
        let Some(mut ws) = connected(&mut t, ws) else {
            continue;
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
pub(super) async fn bad_frames(url: String, deadline: Instant, mut rng: Rng) -> Tally {
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
        let Some(mut ws) = connected(&mut t, try_handshaken(&url, "hostile").await) else {
            continue;
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

pub(super) const NO_ANSWER: &str = "no answer in time";

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
pub(super) async fn oversized(url: String, deadline: Instant, mut rng: Rng) -> Tally {
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

/// (d) Exploding queries as one-time queries, aggregations and listens: each refused with
/// `invalid-argument` before any work.
pub(super) async fn exploder(
    url: String,
    db: &'static str,
    deadline: Instant,
    mut rng: Rng,
) -> Tally {
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
pub(super) async fn arrays(url: String, deadline: Instant, mut rng: Rng) -> Tally {
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
pub(super) async fn storm(url: String, db: &'static str, deadline: Instant, mut rng: Rng) -> Tally {
    let mut t = Tally::new(if db == "storm" { "storm" } else { "storm-2" });
    let total = LISTEN_CAP + STORM_PAST_CAP;
    while Instant::now() < deadline {
        let Some(mut ws) = connected(&mut t, try_handshaken(&url, db).await) else {
            continue;
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
                    Some(Ok(Message::Binary(b))) => match decode_server_frame(&b) {
                        Ok(messages) => {
                            for m in messages {
                                match m {
                                    ServerMessage::TargetChange { target_id, .. }
                                        if target_id <= LISTEN_CAP =>
                                    {
                                        served.insert(target_id);
                                    }
                                    ServerMessage::TargetChange { target_id, .. } => other
                                        .push(format!("target {target_id}, past the cap, served")),
                                    ServerMessage::Error {
                                        code: ErrorCode::ResourceExhausted,
                                        target_id,
                                        ..
                                    } if target_id > LISTEN_CAP => refused += 1,
                                    ServerMessage::Error {
                                        code, target_id, ..
                                    } => other
                                        .push(format!("{} on target {target_id}", code.as_str())),
                                    _ => {}
                                }
                            }
                        }
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
pub(super) async fn churn(
    url: String,
    addr: std::net::SocketAddr,
    deadline: Instant,
    mut rng: Rng,
) -> Tally {
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

/// The socket a connection attempt gave, or `None` after counting its failure as unexpected.
fn connected(t: &mut Tally, attempt: Result<RawSocket, String>) -> Option<RawSocket> {
    attempt.map_err(|e| t.got(e, false)).ok()
}

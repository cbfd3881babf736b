//! Runs the real `hearth-relay` binary for a test: a fresh data directory, the address read
//! from its stdout, and a guard that kills it (and removes the directory) on drop. Plus the
//! small helpers every test module uses: bounded awaits, names, maps, raw sockets, HTTP.

use std::future::Future;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use hearth_client::Client;
use hearth_core::path::{CollectionPath, DocumentName, FieldPath};
use hearth_core::protocol::codec::{decode_server, decode_server_frame, encode_client};
use hearth_core::protocol::{ClientMessage, ServerMessage, PROTOCOL_VERSION};
use hearth_core::value::{Map, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

/// Default bound on one awaited step of a test.
pub const STEP: Duration = Duration::from_secs(20);

/// Awaits `fut` for at most [`STEP`]; a test that hangs fails instead.
pub async fn within<F: Future>(fut: F) -> F::Output {
    within_for(STEP, fut).await
}

/// Awaits `fut` for at most `limit`.
pub async fn within_for<F: Future>(limit: Duration, fut: F) -> F::Output {
    match tokio::time::timeout(limit, fut).await {
        Ok(v) => v,
        Err(_) => panic!("a test step timed out after {limit:?}"),
    }
}

/// A directory under the system temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!(
            "hearth-relay-test-{tag}-{}-{}-{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("creating a temp dir");
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes a file inside the directory; its path.
    pub fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).expect("writing a temp file");
        p
    }

    /// An index file that exempts field `p` of collection group `group` from indexing (for
    /// tests about fan-out with large payloads, not indexes); its path as a string.
    pub fn payload_exempt_indexes(&self, group: &str) -> String {
        let text = format!(
            r#"{{ "fieldOverrides": [ {{ "collectionGroup": "{group}", "fieldPath": "p", "indexes": [] }} ] }}"#
        );
        self.file("indexes.json", &text)
            .to_str()
            .expect("a UTF-8 temp path")
            .to_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The relay binary built for this test run.
pub fn relay_bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        // `HEARTH_TEST_RELAY_BIN` runs the tests against another build (the release one).
        std::env::var("HEARTH_TEST_RELAY_BIN")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_hearth-relay").to_owned())
    })
}

/// A running `hearth-relay serve`, killed on drop.
pub struct Relay {
    child: Option<Child>,
    pub addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
    /// A data directory this relay owns (fresh relays); removed after the process is gone.
    _dir: Option<TempDir>,
}

fn drain(
    stream: impl std::io::Read + Send + 'static,
    log: Arc<Mutex<Vec<String>>>,
    addr: Option<mpsc::Sender<String>>,
) {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if let Some(tx) = &addr {
                if let Some(a) = line.strip_prefix("hearth-relay listening on ") {
                    let _ = tx.send(a.trim().to_owned());
                }
            }
            let mut log = log.lock().unwrap();
            if log.len() < 20_000 {
                log.push(line);
            }
        }
    });
}

impl Relay {
    /// A relay on a fresh data directory with extra `serve` flags.
    pub fn fresh(args: &[&str]) -> Relay {
        let dir = TempDir::new("data");
        let mut r = Relay::start(dir.path(), args);
        r._dir = Some(dir);
        r
    }

    /// A relay on `data` (kept after it stops) with extra `serve` flags.
    pub fn start(data: &Path, args: &[&str]) -> Relay {
        Relay::start_with_env(data, args, &[])
    }

    /// [`Relay::start`] with extra environment variables.
    pub fn start_with_env(data: &Path, args: &[&str], env: &[(&str, &str)]) -> Relay {
        let mut cmd = Command::new(relay_bin());
        cmd.arg("serve")
            .args(["--addr", "127.0.0.1:0", "--data"])
            .arg(data)
            .args(args)
            .args(store_args(data, args))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, _) in std::env::vars() {
            if k.starts_with("HEARTH_") {
                cmd.env_remove(k);
            }
        }
        cmd.env("HEARTH_LOG", "info,hearth=info");
        cmd.envs(env.iter().copied());
        let mut child = cmd.spawn().expect("starting hearth-relay");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        drain(child.stdout.take().unwrap(), log.clone(), Some(tx));
        drain(child.stderr.take().unwrap(), log.clone(), None);
        let addr = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(a) => a.parse().expect("a socket address"),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "hearth-relay did not report its address; log:\n{}",
                    log.lock().unwrap().join("\n")
                );
            }
        };
        Relay {
            child: Some(child),
            addr,
            log,
            _dir: None,
        }
    }

    pub fn url(&self) -> String {
        format!("ws://{}/v1/ws", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("relay running").id()
    }

    /// Connects a client to database `db` (no token).
    pub async fn client(&self, db: &str) -> Client {
        self.client_as(db, &unique("client")).await
    }

    pub async fn client_as(&self, db: &str, client_id: &str) -> Client {
        within(Client::connect(&self.url(), db, client_id, ""))
            .await
            .expect("connecting to the relay")
    }

    /// The relay's output so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// `kill -9`: no chance to flush or drain anything.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `kill -TERM` via the `kill` command.
    pub fn sigterm(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("running kill");
        assert!(status.success(), "kill -TERM failed");
    }

    /// Waits for the process to exit by itself, at most `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        let child = self.child.as_mut().expect("relay running");
        loop {
            if let Some(s) = child.try_wait().expect("polling the relay") {
                self.child = None;
                return s;
            }
            if Instant::now() > deadline {
                panic!(
                    "hearth-relay did not exit within {limit:?}; log:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.log.lock().unwrap();
            let tail = &log[log.len().saturating_sub(40)..];
            eprintln!(
                "--- hearth-relay log tail ({}) ---\n{}",
                self.addr,
                tail.join("\n")
            );
        }
        self.kill9();
    }
}

/// With `HEARTH_TEST_STORE=postgres`, the `--postgres` flag of the database standing for
/// data directory `data` (unless `args` name one already).
fn store_args(data: &Path, args: &[&str]) -> Vec<String> {
    match crate::pg::enabled() && !args.contains(&"--postgres") {
        true => vec!["--postgres".into(), crate::pg::url_for(data)],
        false => Vec::new(),
    }
}

/// Runs `hearth-relay check --data DIR` (or the PostgreSQL database standing for it):
/// (success, output).
pub fn check_data(dir: &Path) -> (bool, String) {
    let mut args = vec!["--data".to_owned(), dir.display().to_string()];
    args.extend(store_args(dir, &[]));
    check_store(&args)
}

/// Runs `hearth-relay check` with `args` (where the store is): (success, output).
pub fn check_store(args: &[String]) -> (bool, String) {
    let out = Command::new(relay_bin())
        .arg("check")
        .args(args)
        .env("HEARTH_LOG", "warn")
        .output()
        .expect("running hearth-relay check");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Runs `cmd` to its end and asserts it succeeded (its stderr in the failure): its output.
pub fn run_ok(cmd: &mut Command) -> std::process::Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A name unique within this test run.
pub fn unique(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub fn name(path: &str) -> DocumentName {
    DocumentName::parse(path).expect("a valid document name")
}

pub fn coll(path: &str) -> CollectionPath {
    CollectionPath::parse(path).expect("a valid collection path")
}

pub fn fp(path: &str) -> FieldPath {
    FieldPath::parse(path).expect("a valid field path")
}

pub fn int(i: i64) -> Value {
    Value::Integer(i)
}

pub fn s(v: &str) -> Value {
    Value::String(v.to_owned())
}

pub fn arr(items: &[&str]) -> Value {
    Value::Array(items.iter().map(|x| s(x)).collect())
}

/// A map from (key, value) pairs.
pub fn map<const N: usize>(pairs: [(&str, Value); N]) -> Map {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// A small deterministic random generator (xorshift64*), so failures reproduce from a seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// A seed from `HEARTH_TEST_SEED`, or the clock; printed so a failure can be replayed.
    pub fn from_env(test: &str) -> Rng {
        let seed = std::env::var("HEARTH_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("{test}: HEARTH_TEST_SEED={seed}");
        Rng::new(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

pub type RawSocket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A bare WebSocket to the relay, for sending what the client never would.
pub async fn raw_socket(relay: &Relay) -> RawSocket {
    let config = WebSocketConfig::default()
        .read_buffer_size(4096)
        .max_message_size(None)
        .max_frame_size(None);
    let (ws, _) = within(tokio_tungstenite::connect_async_with_config(
        relay.url(),
        Some(config),
        true,
    ))
    .await
    .expect("raw websocket connect");
    ws
}

pub fn hello(db: &str) -> Vec<u8> {
    encode_client(&ClientMessage::Hello {
        protocol_version: PROTOCOL_VERSION,
        database: db.to_owned(),
        client_id: unique("raw"),
        token: String::new(),
    })
}

/// Opens a raw socket and completes the handshake.
pub async fn handshaken(relay: &Relay, db: &str) -> RawSocket {
    let mut ws = raw_socket(relay).await;
    raw_send(&mut ws, Message::Binary(hello(db).into())).await;
    match within(ws.next()).await {
        Some(Ok(Message::Binary(b))) => {
            assert!(matches!(
                decode_server(&b),
                Ok(ServerMessage::Welcome { .. })
            ));
        }
        other => panic!("no Welcome: {other:?}"),
    }
    ws
}

/// What a raw socket saw until the relay closed it.
#[derive(Debug, Default)]
pub struct Ending {
    pub messages: Vec<ServerMessage>,
    pub undecodable: usize,
    pub close_frame: bool,
    pub transport_error: Option<String>,
}

impl Ending {
    pub fn errors(&self) -> Vec<&ServerMessage> {
        self.messages
            .iter()
            .filter(|m| matches!(m, ServerMessage::Error { .. }))
            .collect()
    }
}

/// Reads a raw socket until the relay closes it (or `limit` passes: then `None`).
pub async fn read_until_closed(ws: &mut RawSocket, limit: Duration) -> Option<Ending> {
    let mut end = Ending::default();
    let res = tokio::time::timeout(limit, async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Binary(b))) => match decode_server_frame(&b) {
                    Ok(m) => end.messages.extend(m),
                    Err(_) => end.undecodable += 1,
                },
                Some(Ok(Message::Close(_))) => end.close_frame = true,
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    end.transport_error = Some(e.to_string());
                    break;
                }
                None => break,
            }
        }
    })
    .await;
    res.ok().map(|_| end)
}

/// Sends one frame on a raw socket, ignoring a relay that already hung up.
pub async fn raw_send(ws: &mut RawSocket, m: Message) {
    let _ = within(ws.send(m)).await;
}

/// A plain HTTP/1.1 GET on loopback with extra `headers` (each line ending in `\r\n`): the
/// whole response, status line and headers included.
pub async fn http_get_raw(addr: SocketAddr, path: &str, headers: &str) -> String {
    let mut stream = within(tokio::net::TcpStream::connect(addr))
        .await
        .expect("connecting for HTTP");
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Connection: close\r\n\r\n");
    within(stream.write_all(req.as_bytes())).await.unwrap();
    let mut buf = Vec::new();
    within(stream.read_to_end(&mut buf)).await.unwrap();
    String::from_utf8_lossy(&buf).into_owned()
}

/// A plain HTTP/1.1 GET on loopback: (status code, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let text = http_get_raw(addr, path, "").await;
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// The value of a metric sample (`name{labels}` exactly as rendered, or a bare name).
pub fn metric(text: &str, sample: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (k, v) = l.rsplit_once(' ')?;
        (k == sample).then(|| v.parse().ok()).flatten()
    })
}

/// Valid frames of every request kind, for tests that corrupt or repeat them.
pub fn sample_frames() -> Vec<Vec<u8>> {
    let q = hearth_core::query::model::Query::collection(coll("steady"))
        .where_(
            "n",
            hearth_core::query::model::Operator::GreaterThan,
            int(1),
        )
        .limit(3);
    vec![
        encode_client(&ClientMessage::Write {
            request_id: 7,
            batch_id: 9,
            mutations: vec![hearth_core::mutation::Mutation::set(
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
            resume_version: Some(1),
        }),
        encode_client(&ClientMessage::Get {
            request_id: 2,
            names: vec![name("junk/a"), name("junk/c/d/e")],
        }),
    ]
}

/// Six `in` filters of 30 values on different fields: 30^6 disjunctions.
pub fn exploding(collection: &str) -> hearth_core::query::model::Query {
    let values = Value::Array((0..30).map(int).collect());
    ["a", "b", "c", "d", "e", "f"].iter().fold(
        hearth_core::query::model::Query::collection(coll(collection)),
        |q, f| q.where_(f, hearth_core::query::model::Operator::In, values.clone()),
    )
}

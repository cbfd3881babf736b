//! `hearth-bench`: load generator for a running `hearth-relay` (or one it spawns itself).
//!
//! Every measurement prints ONE JSON line on stdout; progress and diagnostics go to stderr.
//! Each subcommand is bounded in operation count and time and stops by itself.
//!
//! ```text
//! hearth-bench --spawn ycsb --workload b --records 10000 --target-qps 5000,10000 --seconds 8 --clients 16
//! hearth-bench --spawn fanout --listeners 1000 --writes 10
//! hearth-bench --spawn commit --doc-bytes 10000,100000,1000000 --fields 1,100,500
//! hearth-bench --spawn hot --clients 32 --seconds 10
//! hearth-bench --spawn sequential --docs 20000 --clients 32     (runs `random` as its baseline)
//! hearth-bench --url ws://127.0.0.1:8787/v1/ws random --docs 20000 --clients 32
//! ```
//!
//! Latencies are measured on the client (this process), which shares the machine's cores with
//! the relay when both run on one host: every figure includes the load generator's own
//! scheduling delays. Each line also carries the CPU time the relay and this process used
//! during the measurement (`cpu`, percent of one core) and, when the relay's `/metrics`
//! endpoint answers, its group-commit and fan-out counters over the same interval.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write as _};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use hearth_client::Client;
use hearth_core::mutation::{FieldTransform, Mutation};
use hearth_core::path::{CollectionPath, DocumentName, FieldPath};
use hearth_core::query::model::Query;
use hearth_core::value::{Map, Timestamp, Value};
use serde_json::{json, Value as Json};
use tokio::task::JoinSet;

#[derive(Parser)]
#[command(
    name = "hearth-bench",
    version,
    about = "Benchmarks a hearth-relay over its WebSocket protocol; one JSON line per measurement"
)]
struct Cli {
    #[command(flatten)]
    target: TargetArgs,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Args, Clone)]
struct TargetArgs {
    /// WebSocket URL of a running relay (`ws://127.0.0.1:PORT/v1/ws`).
    #[arg(long, global = true, env = "HEARTH_BENCH_URL")]
    url: Option<String>,
    /// Start `hearth-relay serve` on a fresh temporary data directory, and stop it after.
    #[arg(long, global = true)]
    spawn: bool,
    /// The relay binary `--spawn` runs (default: `hearth-relay` next to this binary).
    #[arg(long, global = true)]
    relay_bin: Option<PathBuf>,
    /// Pid of the relay behind `--url`, to report its CPU use (known with `--spawn`).
    #[arg(long, global = true)]
    relay_pid: Option<u32>,
    /// Database the benchmark uses.
    #[arg(long, global = true, default_value = "bench")]
    database: String,
    /// Auth token sent in `Hello` (a relay without keys ignores it).
    #[arg(long, global = true, env = "HEARTH_BENCH_TOKEN", default_value = "")]
    token: String,
}

#[derive(Clone, Copy, ValueEnum)]
enum Workload {
    /// 50% reads, 50% updates.
    A,
    /// 95% reads, 5% updates.
    B,
}

#[derive(Subcommand)]
enum Cmd {
    /// YCSB workload A or B: load N 900-byte documents, then run open-loop at each target QPS.
    Ycsb(YcsbArgs),
    /// N listening connections on one document, one write per interval; notification latency.
    Fanout(FanoutArgs),
    /// Sequential commit latency vs document size and vs field count.
    Commit(CommitArgs),
    /// C clients incrementing one counter document as fast as acknowledgements allow.
    Hot(HotArgs),
    /// Inserts with monotonically increasing ids and indexed timestamp (random as baseline).
    Sequential(InsertArgs),
    /// Inserts with random auto ids and random indexed values.
    Random(InsertArgs),
}

#[derive(Args)]
struct YcsbArgs {
    #[arg(long, value_enum)]
    workload: Workload,
    /// Records loaded before the run (uniform key choice over them).
    #[arg(long, default_value_t = 10_000)]
    records: usize,
    /// Target operation rates, one measurement step each.
    #[arg(long, value_delimiter = ',', required = true)]
    target_qps: Vec<f64>,
    /// Measured seconds per step.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Unmeasured seconds at the start of each step (the paper drops the first half).
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Connections the operations are spread over.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Bytes of the single field of each record.
    #[arg(long, default_value_t = 900)]
    value_bytes: usize,
    /// Most operations outstanding; past it the generator waits (and the lateness counts).
    #[arg(long, default_value_t = 20_000)]
    max_inflight: usize,
    /// Override the workload's read fraction (0..1), e.g. 1.0 for a read-only control run.
    #[arg(long)]
    read_proportion: Option<f64>,
}

#[derive(Args)]
struct FanoutArgs {
    /// Listening connections, one measurement per value.
    #[arg(long, value_delimiter = ',', required = true)]
    listeners: Vec<usize>,
    /// Writes to the listened document, one per interval.
    #[arg(long, default_value_t = 10)]
    writes: u64,
    /// Interval between writes, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    interval_ms: u64,
    /// Connections opened concurrently while setting up.
    #[arg(long, default_value_t = 200)]
    connect_concurrency: usize,
    /// How long to wait for the last notifications after the last write, in seconds.
    #[arg(long, default_value_t = 10)]
    drain_seconds: u64,
    /// How the listening connections receive: `lean` (one minimal WebSocket reader per
    /// connection that decodes every frame with the protocol codec) or `client` (the full
    /// native `Client`, with its reader task, per-target buffering and snapshot copies).
    #[arg(long, value_enum, default_value_t = ListenerKind::Lean)]
    listener: ListenerKind,
}

#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum ListenerKind {
    Lean,
    Client,
}

#[derive(Args)]
struct CommitArgs {
    /// Sizes of the single string field, in bytes (clamped to fit the 1 MiB document limit).
    #[arg(long, value_delimiter = ',')]
    doc_bytes: Vec<usize>,
    /// Numbers of integer fields (each one an index entry).
    #[arg(long, value_delimiter = ',')]
    fields: Vec<usize>,
    /// Measured commits per point.
    #[arg(long, default_value_t = 50)]
    count: usize,
    /// Unmeasured commits before each point.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
}

#[derive(Args)]
struct HotArgs {
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Measured seconds.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Increments each client keeps outstanding.
    #[arg(long, default_value_t = 1)]
    inflight: usize,
    /// Skip the baseline (the same clients each incrementing its own document).
    #[arg(long)]
    no_baseline: bool,
}

#[derive(Args, Clone)]
struct InsertArgs {
    /// Documents inserted (one per write batch).
    #[arg(long, default_value_t = 20_000)]
    docs: u64,
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Inserts each client keeps outstanding.
    #[arg(long, default_value_t = 1)]
    inflight: usize,
    /// (`sequential` only) skip the `random` baseline run.
    #[arg(long)]
    no_baseline: bool,
}

// ---------------------------------------------------------------------------------------
// Small utilities: clock, random numbers, percentiles, output.

fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// Microseconds since this process's clock base (monotonic; shared by every task).
fn now_us() -> u64 {
    base().elapsed().as_micros() as u64
}

fn unix_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// xorshift64*: enough randomness for key choice and payloads.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        static SEQ: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);
        let mut z = SEQ.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed) ^ unix_micros() as u64;
        // splitmix64 finaliser
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn alnum(&mut self, len: usize) -> String {
        const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        let mut s = String::with_capacity(len);
        let mut x = 0u64;
        for i in 0..len {
            if i % 10 == 0 {
                x = self.next();
            }
            s.push(A[(x % 62) as usize] as char);
            x /= 62;
        }
        s
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// p50/p90/p99/max/mean (ms) of latencies in microseconds; nearest-rank percentiles.
fn summary(v: &mut [u64]) -> Json {
    if v.is_empty() {
        return json!({"n": 0});
    }
    v.sort_unstable();
    let n = v.len();
    let p = |q: f64| {
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
        round3(v[rank - 1] as f64 / 1000.0)
    };
    let mean = v.iter().sum::<u64>() as f64 / n as f64 / 1000.0;
    json!({
        "n": n,
        "p50": p(0.50),
        "p90": p(0.90),
        "p99": p(0.99),
        "max": round3(v[n - 1] as f64 / 1000.0),
        "mean": round3(mean),
    })
}

/// The machine's state when the run started: load average and the cost of one fdatasync in
/// the temp directory (other work on a shared 2-core host shows up in both).
fn machine() -> Json {
    static ENV: OnceLock<Json> = OnceLock::new();
    ENV.get_or_init(|| {
        let load = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "));
        let fsync = (|| -> std::io::Result<f64> {
            use std::os::unix::fs::FileExt;
            let path = std::env::temp_dir().join(format!("hearth-bench-fsync-{}", run_tag()));
            let f = std::fs::File::create(&path)?;
            let block = [7u8; 4096];
            let mut v = Vec::new();
            for i in 0..50u64 {
                f.write_at(&block, (i % 8) * 4096)?;
                let t = Instant::now();
                f.sync_data()?;
                v.push(t.elapsed().as_micros() as u64);
            }
            drop(f);
            let _ = std::fs::remove_file(&path);
            v.sort_unstable();
            Ok(v[v.len() / 2] as f64)
        })()
        .ok();
        json!({
            "nproc": std::thread::available_parallelism().map_or(0, |n| n.get()),
            "loadavg": load,
            "fdatasync_p50_us": fsync,
        })
    })
    .clone()
}

fn emit(mut line: Json) {
    if let Some(o) = line.as_object_mut() {
        o.insert("machine".into(), machine());
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn note(msg: impl AsRef<str>) {
    eprintln!("[hearth-bench] {}", msg.as_ref());
}

fn doc(path: &str) -> Result<DocumentName> {
    DocumentName::parse(path).map_err(|e| anyhow!("bad document name `{path}`: {e}"))
}

fn field(path: &str) -> FieldPath {
    FieldPath::parse(path).expect("a valid field path literal")
}

/// A short unique tag for collection names and client ids of this run.
fn run_tag() -> String {
    let mut r = Rng::new();
    format!("{:x}{}", std::process::id(), r.alnum(6))
}

// ---------------------------------------------------------------------------------------
// The relay under test: spawned or given, plus CPU and metrics probes.

struct RelayProc {
    child: Child,
    dir: PathBuf,
}

struct Relay {
    url: String,
    pid: Option<u32>,
    proc_: Option<RelayProc>,
}

impl Relay {
    async fn open(t: &TargetArgs) -> Result<Relay> {
        if t.spawn {
            let bin = match &t.relay_bin {
                Some(b) => b.clone(),
                None => std::env::current_exe()?
                    .parent()
                    .ok_or_else(|| anyhow!("no directory for the current executable"))?
                    .join("hearth-relay"),
            };
            tokio::task::spawn_blocking(move || spawn_relay(bin)).await?
        } else {
            let url = t
                .url
                .clone()
                .ok_or_else(|| anyhow!("give --url ws://HOST:PORT/v1/ws or --spawn"))?;
            Ok(Relay {
                url,
                pid: t.relay_pid,
                proc_: None,
            })
        }
    }

    /// `host:port` of the relay's HTTP side (for `/metrics`).
    fn http_addr(&self) -> Option<String> {
        let rest = self.url.strip_prefix("ws://")?;
        Some(rest.split('/').next()?.to_owned())
    }

    fn stop(mut self) {
        if let Some(mut p) = self.proc_.take() {
            let pid = p.child.id();
            // SIGTERM lets the relay drain; SIGKILL if it does not stop in 10 s.
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            let clean = loop {
                match p.child.try_wait() {
                    Ok(Some(status)) => break status.success(),
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(50))
                    }
                    _ => {
                        note(format!("relay {pid} did not stop on SIGTERM: killing it"));
                        let _ = p.child.kill();
                        let _ = p.child.wait();
                        break false;
                    }
                }
            };
            let _ = std::fs::remove_dir_all(&p.dir);
            let log = p.dir.with_extension("log");
            if clean {
                let _ = std::fs::remove_file(&log);
            } else {
                note(format!(
                    "relay {pid} did not exit cleanly; its log: {}",
                    log.display()
                ));
            }
        }
    }
}

fn spawn_relay(bin: PathBuf) -> Result<Relay> {
    let dir = std::env::temp_dir().join(format!("hearth-bench-{}", run_tag()));
    std::fs::create_dir_all(&dir)?;
    let log = std::fs::File::create(dir.with_extension("log"))?;
    let mut child = Command::new(&bin)
        .args(["serve", "--addr", "127.0.0.1:0", "--data"])
        .arg(dir.join("data"))
        .env(
            "HEARTH_LOG",
            std::env::var("HEARTH_LOG").unwrap_or("warn".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        for line in lines.by_ref() {
            let Ok(line) = line else { break };
            if let Some(addr) = line.strip_prefix("hearth-relay listening on ") {
                let _ = tx.send(addr.trim().to_owned());
            }
        }
    });
    let addr = match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(a) => a,
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{} did not print its address within 30 s (log: {})",
                bin.display(),
                dir.with_extension("log").display()
            );
        }
    };
    note(format!(
        "spawned relay pid {} on {addr} (data {}, log {})",
        child.id(),
        dir.display(),
        dir.with_extension("log").display()
    ));
    Ok(Relay {
        url: format!("ws://{addr}/v1/ws"),
        pid: Some(child.id()),
        proc_: Some(RelayProc { child, dir }),
    })
}

/// utime + stime of a process in clock ticks (100 Hz on Linux).
fn cpu_ticks(pid: Option<u32>) -> Option<u64> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/stat"),
        None => "/proc/self/stat".to_owned(),
    };
    let s = std::fs::read_to_string(path).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the command: state(0) ... utime is field 14 overall, i.e. index 11 here.
    let u: u64 = f.get(11)?.parse().ok()?;
    let st: u64 = f.get(12)?.parse().ok()?;
    Some(u + st)
}

/// CPU ticks of a process's threads, summed by thread name (`hearth-committe`, ...).
fn thread_ticks(pid: u32) -> HashMap<String, u64> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in dir.flatten() {
        let Ok(s) = std::fs::read_to_string(t.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (s.find('('), s.rfind(')')) else {
            continue;
        };
        let name = s[open + 1..close].to_owned();
        let f: Vec<&str> = s[close + 2..].split_whitespace().collect();
        let ticks = f.get(11).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0)
            + f.get(12).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
        *out.entry(name).or_default() += ticks;
    }
    out
}

/// `write_bytes` (bytes the process caused to be written to storage) and `syscw`.
fn io_counters(pid: u32) -> Option<(u64, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    let get = |k: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    Some((get("write_bytes:")?, get("syscw:")?))
}

/// Unlabelled samples of the relay's Prometheus exposition.
async fn scrape(addr: &str) -> Option<HashMap<String, f64>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        let req = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let mut out = HashMap::new();
        for line in text.lines() {
            if line.starts_with('#') || line.contains('{') {
                continue;
            }
            let mut it = line.split_whitespace();
            if let (Some(k), Some(v)) = (it.next(), it.next()) {
                if let Ok(v) = v.parse::<f64>() {
                    out.insert(k.to_owned(), v);
                }
            }
        }
        Some(out)
    };
    tokio::time::timeout(Duration::from_secs(5), fut)
        .await
        .ok()
        .flatten()
}

/// CPU and relay counters over one measurement interval.
struct Probe {
    at: Instant,
    relay_ticks: Option<u64>,
    self_ticks: Option<u64>,
    metrics: Option<HashMap<String, f64>>,
    relay_pid: Option<u32>,
    http: Option<String>,
    threads: HashMap<String, u64>,
    io: Option<(u64, u64)>,
}

impl Probe {
    async fn start(relay: &Relay) -> Probe {
        let http = relay.http_addr();
        let metrics = match &http {
            Some(a) => scrape(a).await,
            None => None,
        };
        Probe {
            at: Instant::now(),
            relay_ticks: cpu_ticks(relay.pid).filter(|_| relay.pid.is_some()),
            self_ticks: cpu_ticks(None),
            metrics,
            relay_pid: relay.pid,
            http,
            threads: relay.pid.map(thread_ticks).unwrap_or_default(),
            io: relay.pid.and_then(io_counters),
        }
    }

    /// `{cpu: {relay_pct, bench_pct}, relay: {...}}` since `start`.
    async fn finish(self) -> Json {
        let secs = self.at.elapsed().as_secs_f64().max(1e-9);
        let pct = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => json!(round3((b.saturating_sub(a)) as f64 / secs)),
            _ => Json::Null,
        };
        let relay_now = self.relay_pid.and_then(|p| cpu_ticks(Some(p)));
        let mut threads = serde_json::Map::new();
        if let Some(pid) = self.relay_pid {
            for (name, now) in thread_ticks(pid) {
                let before = self.threads.get(&name).copied().unwrap_or(0);
                threads.insert(
                    name,
                    json!(round3(now.saturating_sub(before) as f64 / secs)),
                );
            }
        }
        let io = match (self.io, self.relay_pid.and_then(io_counters)) {
            (Some((wb0, sc0)), Some((wb1, sc1))) => json!({
                "write_mb": round3((wb1.saturating_sub(wb0)) as f64 / 1e6),
                "write_syscalls": sc1.saturating_sub(sc0),
            }),
            _ => Json::Null,
        };
        let cpu = json!({
            "relay_pct": pct(self.relay_ticks, relay_now),
            "bench_pct": pct(self.self_ticks, cpu_ticks(None)),
            "relay_threads_pct": threads,
            "interval_s": round3(secs),
        });
        let after = match &self.http {
            Some(a) => scrape(a).await,
            None => None,
        };
        let relay = match (self.metrics, after) {
            (Some(b), Some(a)) => {
                let d =
                    |k: &str| a.get(k).copied().unwrap_or(0.0) - b.get(k).copied().unwrap_or(0.0);
                let gc = d("hearth_group_commits_total");
                let per = |sum: f64, n: f64| {
                    if n > 0.0 {
                        json!(round3(sum / n))
                    } else {
                        Json::Null
                    }
                };
                let batches = d("hearth_group_commit_batches_sum");
                let wb = io["write_mb"].as_f64();
                json!({
                    "io": io,
                    "write_kb_per_batch": match wb {
                        Some(mb) if batches > 0.0 => json!(round3(mb * 1000.0 / batches)),
                        _ => Json::Null,
                    },
                    "group_commits": gc,
                    "batches_per_group_commit": per(d("hearth_group_commit_batches_sum"), d("hearth_group_commit_batches_count")),
                    "group_commit_ms_mean": per(d("hearth_group_commit_seconds_sum") * 1000.0, d("hearth_group_commit_seconds_count")),
                    "relay_commit_ack_ms_mean": per(d("hearth_commit_latency_seconds_sum") * 1000.0, d("hearth_commit_latency_seconds_count")),
                    "fanout_queue_ms_mean": per(d("hearth_fanout_latency_seconds_sum") * 1000.0, d("hearth_fanout_latency_seconds_count")),
                    "frames_sent": d("hearth_frames_sent_total"),
                    "slow_consumers_dropped": d("hearth_slow_consumers_dropped_total"),
                    "connections_open": a.get("hearth_connections_open").copied(),
                })
            }
            _ => Json::Null,
        };
        json!({"cpu": cpu, "relay": relay})
    }
}

fn merge(mut a: Json, b: Json) -> Json {
    if let (Some(a), Json::Object(b)) = (a.as_object_mut(), b) {
        a.extend(b);
    }
    a
}

// ---------------------------------------------------------------------------------------
// Connections.

async fn connect(url: &str, t: &TargetArgs, id: String) -> Result<Client> {
    Client::connect(url, &t.database, &id, &t.token)
        .await
        .map_err(|e| anyhow!("connecting {id} to {url}: {e}"))
}

/// `n` connections, `concurrency` handshakes at a time; each has its own client id (batch
/// ids are per client id, so connections must never share one).
async fn connect_many(
    url: &str,
    t: &TargetArgs,
    prefix: &str,
    n: usize,
    concurrency: usize,
) -> (Vec<Client>, Vec<String>) {
    let (url, t) = (url.to_owned(), t.clone());
    open_many(prefix, n, concurrency, move |id| {
        let (url, t) = (url.clone(), t.clone());
        async move { connect(&url, &t, id).await }
    })
    .await
}

/// `n` of whatever `open` opens (given the client id `{prefix}-{i}`), `concurrency` at a
/// time: the opened ones in index order, and the errors.
async fn open_many<T, F, Fut>(
    prefix: &str,
    n: usize,
    concurrency: usize,
    open: F,
) -> (Vec<T>, Vec<String>)
where
    T: Send + 'static,
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<T>> + Send + 'static,
{
    let sem = Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
    let mut set = JoinSet::new();
    for i in 0..n {
        let sem = sem.clone();
        let opening = open(format!("{prefix}-{i}"));
        set.spawn(async move {
            let _permit = sem.acquire_owned().await.expect("semaphore open");
            (i, opening.await)
        });
    }
    let mut opened: Vec<Option<T>> = (0..n).map(|_| None).collect();
    let mut errors = Vec::new();
    while let Some(r) = set.join_next().await {
        match r {
            Ok((i, Ok(c))) => opened[i] = Some(c),
            Ok((_, Err(e))) => errors.push(e.to_string()),
            Err(e) => errors.push(e.to_string()),
        }
    }
    (opened.into_iter().flatten().collect(), errors)
}

async fn ping_baseline(c: &Client, n: usize) -> Json {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        if c.ping().await.is_ok() {
            v.push(t.elapsed().as_micros() as u64);
        }
    }
    summary(&mut v)
}

fn open_file_limit() -> (Option<u64>, Option<u64>) {
    let Ok(s) = std::fs::read_to_string("/proc/self/limits") else {
        return (None, None);
    };
    for line in s.lines() {
        if let Some(rest) = line.strip_prefix("Max open files") {
            let f: Vec<&str> = rest.split_whitespace().collect();
            return (
                f.first().and_then(|x| x.parse().ok()),
                f.get(1).and_then(|x| x.parse().ok()),
            );
        }
    }
    (None, None)
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

// ---------------------------------------------------------------------------------------
// YCSB.

#[derive(Default)]
struct OpStats {
    service: Vec<u64>,
    /// From the op's scheduled start (open loop: includes the generator's lateness).
    intended: Vec<u64>,
    errors: u64,
    first_error: Option<String>,
}

impl OpStats {
    fn record(&mut self, service: u64, intended: u64, err: Option<String>) {
        match err {
            None => {
                self.service.push(service);
                self.intended.push(intended);
            }
            Some(e) => {
                self.errors += 1;
                self.first_error.get_or_insert(e);
            }
        }
    }
}

#[derive(Default)]
struct StepStats {
    reads: OpStats,
    updates: OpStats,
    missing: u64,
    /// Last completion of a measured op, µs on the process clock.
    last_done: u64,
}

async fn ycsb(t: &TargetArgs, a: YcsbArgs) -> Result<()> {
    let relay = Relay::open(t).await?;
    let res = ycsb_on(&relay, t, &a).await;
    relay.stop();
    res
}

async fn ycsb_on(relay: &Relay, t: &TargetArgs, a: &YcsbArgs) -> Result<()> {
    let (wl, read_frac) = match a.workload {
        Workload::A => ("a", 0.5),
        Workload::B => ("b", 0.95),
    };
    let read_frac = a.read_proportion.unwrap_or(read_frac).clamp(0.0, 1.0);
    let tag = run_tag();
    let (clients, errs) =
        connect_many(&relay.url, t, &format!("ycsb-{tag}"), a.clients.max(1), 64).await;
    if !errs.is_empty() {
        bail!(
            "{} of {} connections failed: {}",
            errs.len(),
            a.clients,
            errs[0]
        );
    }
    let clients = Arc::new(clients);
    let coll = format!("usertable_{tag}");
    let names: Arc<Vec<DocumentName>> = Arc::new(
        (0..a.records)
            .map(|i| doc(&format!("{coll}/user{i:010}")))
            .collect::<Result<_>>()?,
    );
    // Payloads: a pool of distinct 900-byte values.
    let mut rng = Rng::new();
    let pool: Arc<Vec<String>> = Arc::new((0..256).map(|_| rng.alnum(a.value_bytes)).collect());

    // Load, in batches of 100 documents spread over the connections.
    note(format!("ycsb {wl}: loading {} records", a.records));
    let probe = Probe::start(relay).await;
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut set = JoinSet::new();
    for c in clients.iter() {
        let (c, next, names, pool) = (c.clone(), next.clone(), names.clone(), pool.clone());
        set.spawn(async move {
            let mut rng = Rng::new();
            loop {
                let from = next.fetch_add(100, Ordering::Relaxed);
                if from >= names.len() {
                    return Ok::<(), anyhow::Error>(());
                }
                let to = (from + 100).min(names.len());
                let muts = names[from..to]
                    .iter()
                    .map(|n| {
                        let mut m = Map::new();
                        let v = &pool[rng.below(pool.len() as u64) as usize];
                        m.insert("field0".into(), Value::String(v.clone()));
                        Mutation::set(n.clone(), m)
                    })
                    .collect();
                c.write(muts).await.map_err(|e| anyhow!("load: {e}"))?;
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    let load_s = started.elapsed().as_secs_f64();
    let extra = probe.finish().await;
    emit(merge(
        json!({
            "bench": "ycsb_load", "workload": wl,
            "params": {"records": a.records, "value_bytes": a.value_bytes, "clients": a.clients, "batch": 100},
            "ops": a.records, "duration_s": round3(load_s),
            "throughput": round3(a.records as f64 / load_s),
        }),
        extra,
    ));
    let baseline = json!({"ping_idle_ms": ping_baseline(&clients[0], 200).await});

    let handle = tokio::runtime::Handle::current();
    for &qps in &a.target_qps {
        note(format!(
            "ycsb {wl}: {qps} ops/s for {}+{} s",
            a.warmup, a.seconds
        ));
        let stats = Arc::new(Mutex::new(StepStats::default()));
        let inflight = Arc::new(AtomicUsize::new(0));
        let max_lag = Arc::new(AtomicU64::new(0));
        let probe_at = Instant::now() + Duration::from_secs_f64(a.warmup);
        let start_us = now_us() + 20_000;
        let measure_from = start_us + (a.warmup * 1e6) as u64;
        let total = ((a.warmup + a.seconds) * qps).round() as u64;
        let period_ns = 1e9 / qps.max(0.001);
        // The pacer: an OS thread (sub-millisecond sleeps, unlike tokio's 1 ms timer wheel)
        // that issues every op whose scheduled time has come, 200 µs at a time at most.
        let pacer = {
            let (stats, inflight, max_lag) = (stats.clone(), inflight.clone(), max_lag.clone());
            let (clients, names, pool, handle) =
                (clients.clone(), names.clone(), pool.clone(), handle.clone());
            let max_inflight = a.max_inflight;
            std::thread::spawn(move || {
                let mut rng = Rng::new();
                let mut i = 0u64;
                let f0 = field("field0");
                while i < total {
                    let due = start_us + (i as f64 * period_ns / 1000.0) as u64;
                    let now = now_us();
                    if due > now {
                        std::thread::sleep(Duration::from_micros((due - now).max(200)));
                        continue;
                    }
                    if inflight.load(Ordering::Relaxed) >= max_inflight {
                        std::thread::sleep(Duration::from_micros(200));
                        continue;
                    }
                    max_lag.fetch_max(now - due, Ordering::Relaxed);
                    let measured = due >= measure_from;
                    let c = clients[(i as usize) % clients.len()].clone();
                    let name = names[rng.below(names.len() as u64) as usize].clone();
                    let is_read = rng.unit() < read_frac;
                    let val = if is_read {
                        None
                    } else {
                        Some(pool[rng.below(pool.len() as u64) as usize].clone())
                    };
                    let (stats, inflight, f0) = (stats.clone(), inflight.clone(), f0.clone());
                    inflight.fetch_add(1, Ordering::Relaxed);
                    handle.spawn(async move {
                        let t0 = now_us();
                        let (err, missing) = match val {
                            None => match c.get_one(&name).await {
                                Ok(d) => (None, d.is_none()),
                                Err(e) => (Some(e.to_string()), false),
                            },
                            Some(v) => {
                                let m = Mutation::update(name, vec![(f0, Some(Value::String(v)))]);
                                (c.write(vec![m]).await.err().map(|e| e.to_string()), false)
                            }
                        };
                        let done = now_us();
                        inflight.fetch_sub(1, Ordering::Relaxed);
                        if measured {
                            let mut s = stats.lock().expect("stats lock");
                            let op = if is_read {
                                &mut s.reads
                            } else {
                                &mut s.updates
                            };
                            op.record(done - t0, done - due, err);
                            s.missing += u64::from(missing);
                            s.last_done = s.last_done.max(done);
                        }
                    });
                    i += 1;
                }
            })
        };
        // Measure CPU/metrics over the measured part only.
        tokio::time::sleep_until(probe_at.into()).await;
        let probe = Probe::start(relay).await;
        tokio::task::spawn_blocking(move || pacer.join())
            .await?
            .map_err(|_| anyhow!("pacer thread panicked"))?;
        let drain_deadline = Instant::now() + Duration::from_secs(30);
        while inflight.load(Ordering::Relaxed) > 0 && Instant::now() < drain_deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let extra = probe.finish().await;
        let mut s = std::mem::take(&mut *stats.lock().expect("stats lock"));
        let window_s = (s.last_done.saturating_sub(measure_from)) as f64 / 1e6;
        let ops = s.reads.service.len() + s.updates.service.len();
        let first_error = s
            .reads
            .first_error
            .clone()
            .or(s.updates.first_error.clone());
        emit(merge(
            json!({
                "bench": "ycsb", "workload": wl,
                "params": {"records": a.records, "target_qps": qps, "seconds": a.seconds, "warmup_s": a.warmup, "clients": a.clients, "value_bytes": a.value_bytes, "read_proportion": read_frac},
                "ops": ops,
                "duration_s": round3(window_s),
                "throughput": round3(ops as f64 / window_s.max(1e-9)),
                "read_ms": summary(&mut s.reads.service),
                "update_ms": summary(&mut s.updates.service),
                "read_from_schedule_ms": summary(&mut s.reads.intended),
                "update_from_schedule_ms": summary(&mut s.updates.intended),
                "max_schedule_lag_ms": round3(max_lag.load(Ordering::Relaxed) as f64 / 1000.0),
                "errors": s.reads.errors + s.updates.errors,
                "first_error": first_error,
                "missing_reads": s.missing,
                "inflight_left": inflight.load(Ordering::Relaxed),
                "baseline": baseline,
            }),
            extra,
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Fan-out.

struct ListenResult {
    /// (seq, latency µs) of every new value seen.
    seen: Vec<(u64, u64)>,
    last_seq: u64,
    /// Lean listeners: (snapshot version, receipt time µs) of every notification; mapped to
    /// the write committed at that version (its seq and send time) after the run.
    at_version: Vec<(u64, u64)>,
    /// Lean listeners that decode the document: (snapshot version, seq in the document).
    checked: Vec<(u64, u64)>,
    error: Option<String>,
    /// The listener (or lean connection), kept open until the measurement is over: closing
    /// thousands of them would land on the relay while the last write is still being
    /// delivered.
    _keep: Option<Box<dyn std::any::Any + Send>>,
}

/// The fan-out benchmark's lean listener: one WebSocket with one target, read directly from
/// the TCP stream (no reader task, no per-target buffering, no copies of the result, no
/// zero-filled read buffer). Every frame the relay sends is decoded in full with the
/// protocol codec (`decode_server`); a notification counts when the `Snapshot` that follows
/// the target's change has been read.
struct LeanListener {
    stream: tokio::net::TcpStream,
    buf: Vec<u8>,
    /// Start of the unread bytes in `buf`.
    pos: usize,
}

/// A client-to-server WebSocket binary frame. Client frames must be masked; the mask key is
/// zero, which leaves the payload as it is.
fn ws_client_frame(payload: &[u8]) -> Vec<u8> {
    let n = payload.len();
    let mut f = Vec::with_capacity(n + 14);
    f.push(0x82);
    if n < 126 {
        f.push(0x80 | n as u8);
    } else if n <= 0xFFFF {
        f.push(0x80 | 126);
        f.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        f.push(0x80 | 127);
        f.extend_from_slice(&(n as u64).to_be_bytes());
    }
    f.extend_from_slice(&[0; 4]);
    f.extend_from_slice(payload);
    f
}

/// The first complete server frame in `b`: (opcode, payload start, payload end).
fn ws_server_frame(b: &[u8]) -> Result<Option<(u8, usize, usize)>> {
    if b.len() < 2 {
        return Ok(None);
    }
    if b[0] & 0x80 == 0 {
        bail!("a fragmented frame: the lean listener expects one frame per message");
    }
    if b[1] & 0x80 != 0 {
        bail!("a masked frame from the relay");
    }
    let (len, head) = match b[1] & 0x7F {
        126 if b.len() >= 4 => (u16::from_be_bytes([b[2], b[3]]) as usize, 4),
        127 if b.len() >= 10 => (
            u64::from_be_bytes(b[2..10].try_into().expect("8 bytes")) as usize,
            10,
        ),
        126 | 127 => return Ok(None),
        n => (n as usize, 2),
    };
    if b.len() < head + len {
        return Ok(None);
    }
    Ok(Some((b[0] & 0x0F, head, head + len)))
}

impl LeanListener {
    /// Connects, upgrades to a WebSocket, and sends `Hello`; returns after the `Welcome`.
    async fn open(url: &str, t: &TargetArgs, client_id: String) -> Result<LeanListener> {
        use hearth_core::protocol::codec::encode_client;
        use hearth_core::protocol::{ClientMessage, ServerMessage, PROTOCOL_VERSION};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let rest = url
            .strip_prefix("ws://")
            .ok_or_else(|| anyhow!("the lean listener needs a ws:// URL, not {url}"))?;
        let (host, path) = match rest.split_once('/') {
            Some((h, p)) => (h, format!("/{p}")),
            None => (rest, "/".to_owned()),
        };
        let mut stream = tokio::net::TcpStream::connect(host).await?;
        stream.set_nodelay(true)?;
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await?;
        let mut buf = Vec::with_capacity(1024);
        let head_end = loop {
            if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p + 4;
            }
            if buf.len() > 16 << 10 || stream.read_buf(&mut buf).await? == 0 {
                bail!("no WebSocket handshake answer");
            }
        };
        let status = String::from_utf8_lossy(&buf[..head_end]);
        let status = status.lines().next().unwrap_or_default().to_owned();
        if !status.starts_with("HTTP/1.1 101") {
            bail!("WebSocket upgrade refused: {status}");
        }
        let mut l = LeanListener {
            stream,
            buf,
            pos: head_end,
        };
        l.send(&encode_client(&ClientMessage::Hello {
            protocol_version: PROTOCOL_VERSION,
            database: t.database.clone(),
            client_id,
            token: t.token.clone(),
        }))
        .await?;
        match l.next().await? {
            ServerMessage::Welcome { .. } => Ok(l),
            other => bail!("expected a Welcome, got {other:?}"),
        }
    }

    async fn send(&mut self, payload: &[u8]) -> Result<()> {
        use tokio::io::AsyncWriteExt;
        self.stream.write_all(&ws_client_frame(payload)).await?;
        Ok(())
    }

    async fn listen(&mut self, target_id: u32, query: &Query) -> Result<()> {
        use hearth_core::protocol::codec::encode_client;
        use hearth_core::protocol::ClientMessage;
        self.send(&encode_client(&ClientMessage::Listen {
            target_id,
            query: query.clone(),
            resume_version: None,
        }))
        .await
    }

    /// The next message from the relay, decoded.
    async fn next(&mut self) -> Result<hearth_core::protocol::ServerMessage> {
        use hearth_core::protocol::codec::decode_server;
        let (start, end) = self.next_frame().await?;
        decode_server(&self.buf[start..end]).map_err(|e| anyhow!("undecodable frame: {e}"))
    }

    /// The next binary message from the relay: its range in `buf`, valid until the next call.
    async fn next_frame(&mut self) -> Result<(usize, usize)> {
        use tokio::io::AsyncReadExt;
        loop {
            if let Some((op, start, end)) = ws_server_frame(&self.buf[self.pos..])? {
                let (start, end) = (self.pos + start, self.pos + end);
                self.pos = end;
                match op {
                    0x2 => return Ok((start, end)),
                    0x8 => bail!("the relay closed the connection"),
                    0x9 | 0xA => continue,
                    op => bail!("unexpected WebSocket opcode {op}"),
                }
            }
            if self.pos > 0 {
                self.buf.drain(..self.pos);
                self.pos = 0;
            }
            if self.buf.capacity() - self.buf.len() < 512 {
                self.buf.reserve(4096);
            }
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                bail!("the connection closed");
            }
        }
    }
}

/// One in this many lean listeners decodes the listened document in every change and
/// checks it against the write committed at the snapshot's version.
const CHECK_EVERY: usize = 50;

/// One lean listener in the reactor: its socket, unread bytes, and what it has seen.
struct LeanConn {
    sock: mio::net::TcpStream,
    buf: Vec<u8>,
    /// Start of the unread bytes in `buf`.
    pos: usize,
    /// Decodes the document in every change (see `CHECK_EVERY`).
    check: bool,
    /// The initial result's `Snapshot` is still to come.
    first: bool,
    /// A change to the target arrived since the last snapshot.
    changed: bool,
    /// The document's `seq` in that change, when checked.
    seq: Option<u64>,
    done: bool,
    r: ListenResult,
}

impl LeanConn {
    fn fail(&mut self, e: String) {
        self.r.error.get_or_insert(e);
        self.done = true;
    }

    /// Handles every complete frame in `buf`. A notification is a `TargetChange` for the
    /// listened target followed by its `Snapshot { version }`; the time is taken when the
    /// snapshot has been read. Snapshots are decoded with the protocol codec; of a
    /// `TargetChange`, only the type byte and target id are read, except on the listeners
    /// that `check`, which decode it in full and record the document's `seq`, so the run can
    /// verify that each version carried the write committed at it.
    fn process(&mut self, name: &DocumentName, writes: u64, ready: &AtomicUsize) {
        use hearth_core::protocol::codec::decode_server;
        use hearth_core::protocol::{DocumentChange, ServerMessage};
        while !self.done {
            let (start, end) = match ws_server_frame(&self.buf[self.pos..]) {
                Err(e) => return self.fail(e.to_string()),
                Ok(None) => break,
                Ok(Some((op, start, end))) => {
                    let (start, end) = (self.pos + start, self.pos + end);
                    self.pos = end;
                    match op {
                        0x2 => (start, end),
                        0x8 => return self.fail("the relay closed the connection".into()),
                        0x9 | 0xA => continue,
                        op => return self.fail(format!("unexpected WebSocket opcode {op}")),
                    }
                }
            };
            let payload = &self.buf[start..end];
            if !self.check
                && payload.first() == Some(&hearth_core::protocol::codec::ty::TARGET_CHANGE)
            {
                // The target id, a varint: this listener's only target is 1.
                if payload.get(1) != Some(&1) {
                    let e = format!("a change for another target: {payload:02x?}");
                    return self.fail(e);
                }
                self.changed = true;
                continue;
            }
            match decode_server(payload) {
                Ok(ServerMessage::TargetChange {
                    target_id: 1,
                    changes,
                    ..
                }) => {
                    self.changed = true;
                    for c in changes {
                        if let DocumentChange::Upsert(d) = c {
                            if d.name == *name {
                                if let Some(Value::Integer(i)) = d.fields.get("seq") {
                                    self.seq = Some(*i as u64);
                                }
                            }
                        }
                    }
                }
                Ok(ServerMessage::Snapshot { version }) => {
                    let now = now_us();
                    if self.first {
                        // The initial result.
                        self.first = false;
                        self.changed = false;
                        self.seq = None;
                        ready.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    if std::mem::take(&mut self.changed) {
                        self.r.at_version.push((version, now));
                        if let Some(s) = self.seq.take() {
                            self.r.checked.push((version, s));
                        }
                    }
                    if self.r.at_version.len() as u64 >= writes {
                        self.done = true;
                    }
                }
                Ok(ServerMessage::Error { code, message, .. }) => {
                    return self.fail(format!("{}: {message}", code.as_str()));
                }
                Ok(ServerMessage::Heartbeat { .. }) => {}
                Ok(other) => return self.fail(format!("unexpected message {other:?}")),
                Err(e) => return self.fail(format!("undecodable frame: {e}")),
            }
        }
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos > 1 << 16 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
    }
}

/// Receives on every lean listener from one thread through one epoll set (mio), each until
/// it has seen `writes` notifications or failed, or until `stop`. No task per connection:
/// the load generator shares the machine's cores with the relay, so its own cost per
/// notification (one read system call and a few comparisons here) is kept small.
fn lean_reactor(
    conns: Vec<(mio::net::TcpStream, Vec<u8>, usize)>,
    name: DocumentName,
    writes: u64,
    ready: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
) -> Vec<ListenResult> {
    use std::io::Read;
    let mut conns: Vec<LeanConn> = conns
        .into_iter()
        .enumerate()
        .map(|(i, (sock, buf, pos))| LeanConn {
            sock,
            buf,
            pos,
            check: i % CHECK_EVERY == 0,
            first: true,
            changed: false,
            seq: None,
            done: false,
            r: ListenResult {
                seen: Vec::new(),
                last_seq: 0,
                at_version: Vec::with_capacity(writes as usize),
                checked: Vec::new(),
                error: None,
                _keep: None,
            },
        })
        .collect();
    let finish = |conns: Vec<LeanConn>| {
        conns
            .into_iter()
            .map(|mut c| {
                c.r._keep = Some(Box::new(c.sock));
                c.r
            })
            .collect()
    };
    let mut poll = match mio::Poll::new() {
        Ok(p) => p,
        Err(e) => {
            for c in &mut conns {
                c.fail(format!("epoll: {e}"));
            }
            return finish(conns);
        }
    };
    for (i, c) in conns.iter_mut().enumerate() {
        if let Err(e) =
            poll.registry()
                .register(&mut c.sock, mio::Token(i), mio::Interest::READABLE)
        {
            c.fail(format!("epoll registration: {e}"));
        }
        // Frames read with the handshake.
        c.process(&name, writes, &ready);
    }
    let mut open = conns.iter().filter(|c| !c.done).count();
    let mut events = mio::Events::with_capacity(1024);
    let mut scratch = vec![0u8; 1 << 16];
    while open > 0 && !stop.load(Ordering::Relaxed) {
        if let Err(e) = poll.poll(&mut events, Some(Duration::from_millis(50))) {
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            for c in conns.iter_mut().filter(|c| !c.done) {
                c.fail(format!("epoll wait: {e}"));
            }
            break;
        }
        for ev in events.iter() {
            let c = &mut conns[ev.token().0];
            if c.done {
                continue;
            }
            // Edge-triggered: read until the socket is drained (a short read drains it).
            loop {
                match c.sock.read(&mut scratch) {
                    Ok(0) => {
                        c.fail("the connection closed".into());
                        break;
                    }
                    Ok(k) => {
                        c.buf.extend_from_slice(&scratch[..k]);
                        if k < scratch.len() {
                            break;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        c.fail(e.to_string());
                        break;
                    }
                }
            }
            c.process(&name, writes, &ready);
            if c.done {
                open -= 1;
            }
        }
    }
    finish(conns)
}

/// `n` lean connections, `concurrency` handshakes at a time, each with its own client id.
async fn lean_connect_many(
    url: &str,
    t: &TargetArgs,
    prefix: &str,
    n: usize,
    concurrency: usize,
) -> (Vec<LeanListener>, Vec<String>) {
    let (url, t) = (url.to_owned(), t.clone());
    open_many(prefix, n, concurrency, move |id| {
        let (url, t) = (url.clone(), t.clone());
        async move {
            LeanListener::open(&url, &t, id.clone())
                .await
                .map_err(|e| anyhow!("connecting {id} to {url}: {e}"))
        }
    })
    .await
}

async fn fanout(t: &TargetArgs, a: FanoutArgs) -> Result<()> {
    for &n in &a.listeners {
        let (soft, hard) = open_file_limit();
        // This process holds one socket per listener plus a few; a spawned relay on the same
        // host holds as many in its own process (same limit).
        let need = n as u64 + open_fds() as u64 + 64;
        if let Some(soft) = soft {
            if need > soft {
                emit(json!({
                    "bench": "fanout", "params": {"listeners": n, "writes": a.writes},
                    "error": match hard {
                        Some(h) if h >= need => format!(
                            "open-file limit: {n} listeners need about {need} descriptors in this process (and as many in the relay's), but `ulimit -n` is {soft}: raise it with `ulimit -n {h}` (the hard limit) and run again"
                        ),
                        _ => format!(
                            "open-file limit: {n} listeners need about {need} descriptors in this process (and as many in the relay's), but the limit is {soft} (hard {}), which cannot be raised here: use at most about {} listeners",
                            hard.map_or("unknown".into(), |h| h.to_string()),
                            hard.unwrap_or(soft).max(soft).saturating_sub(need - n as u64)
                        ),
                    },
                }));
                continue;
            }
        }
        let relay = Relay::open(t).await?;
        let res = fanout_once(&relay, t, &a, n).await;
        relay.stop();
        if let Err(e) = res {
            emit(json!({
                "bench": "fanout", "params": {"listeners": n, "writes": a.writes},
                "error": e.to_string(),
            }));
        }
    }
    Ok(())
}

async fn fanout_once(relay: &Relay, t: &TargetArgs, a: &FanoutArgs, n: usize) -> Result<()> {
    let tag = run_tag();
    let coll = format!("fanout_{tag}");
    let name = doc(&format!("{coll}/score"))?;
    let writer = connect(&relay.url, t, format!("fanout-writer-{tag}")).await?;
    let doc_fields = |seq: u64, sent: u64| {
        let mut m = Map::new();
        m.insert("seq".into(), Value::Integer(seq as i64));
        m.insert("sent_us".into(), Value::Integer(sent as i64));
        m.insert("team".into(), Value::String("home".into()));
        m
    };
    writer
        .write(vec![Mutation::set(name.clone(), doc_fields(0, 0))])
        .await
        .map_err(|e| anyhow!("creating the document: {e}"))?;
    let baseline_ping = ping_baseline(&writer, 100).await;

    note(format!(
        "fanout: opening {n} connections ({} listeners)",
        match a.listener {
            ListenerKind::Lean => "lean",
            ListenerKind::Client => "client",
        }
    ));
    let t0 = Instant::now();
    let prefix = format!("fanout-{tag}");
    let (clients, lean, errs) = match a.listener {
        ListenerKind::Client => {
            let (c, e) = connect_many(&relay.url, t, &prefix, n, a.connect_concurrency).await;
            (c, Vec::new(), e)
        }
        ListenerKind::Lean => {
            let (l, e) = lean_connect_many(&relay.url, t, &prefix, n, a.connect_concurrency).await;
            (Vec::new(), l, e)
        }
    };
    let connect_s = t0.elapsed().as_secs_f64();
    if !errs.is_empty() {
        let (soft, _) = open_file_limit();
        bail!(
            "{} of {n} connections failed after {connect_s:.1} s (open fds here: {}, ulimit -n {}): first error: {}",
            errs.len(),
            open_fds(),
            soft.map_or("?".into(), |s| s.to_string()),
            errs[0]
        );
    }
    note(format!(
        "fanout: {n} connections in {connect_s:.1} s; listening"
    ));
    let query = Query::collection(
        CollectionPath::parse(&coll).map_err(|e| anyhow!("bad collection: {e}"))?,
    );
    let ready = Arc::new(AtomicUsize::new(0));
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let writes = a.writes;
    let t1 = Instant::now();
    let mut set = JoinSet::new();
    // Lean listeners: listen through tokio, then hand the sockets to the reactor thread.
    let stop_reactor = Arc::new(AtomicBool::new(false));
    let mut reactor = None;
    if !lean.is_empty() {
        let mut socks = Vec::with_capacity(lean.len());
        for mut l in lean {
            l.listen(1, &query).await?;
            let sock = l.stream.into_std()?;
            socks.push((mio::net::TcpStream::from_std(sock), l.buf, l.pos));
        }
        let (name, ready, stop) = (name.clone(), ready.clone(), stop_reactor.clone());
        reactor = Some(
            std::thread::Builder::new()
                .name("lean-reactor".into())
                .spawn(move || lean_reactor(socks, name, writes, ready, stop))?,
        );
    }
    for c in &clients {
        let mut listener = c
            .listen(&query, None)
            .await
            .map_err(|e| anyhow!("listen: {e}"))?;
        let (ready, mut stop, name) = (ready.clone(), stop_rx.clone(), name.clone());
        set.spawn(async move {
            let mut r = ListenResult {
                seen: Vec::with_capacity(writes as usize),
                last_seq: 0,
                at_version: Vec::new(),
                checked: Vec::new(),
                error: None,
                _keep: None,
            };
            let mut first = true;
            loop {
                let snap = tokio::select! {
                    s = listener.next() => s,
                    _ = stop.changed() => break,
                };
                let now = now_us();
                let snap = match snap {
                    Ok(s) => s,
                    Err(e) => {
                        r.error = Some(e.to_string());
                        break;
                    }
                };
                let d = snap.documents.iter().find(|d| d.name == name);
                let get = |f: &str| match d.and_then(|d| d.fields.get(f)) {
                    Some(Value::Integer(i)) => *i as u64,
                    _ => 0,
                };
                let (seq, sent) = (get("seq"), get("sent_us"));
                if first {
                    first = false;
                    ready.fetch_add(1, Ordering::Relaxed);
                }
                if seq > r.last_seq {
                    if sent > 0 {
                        r.seen.push((seq, now.saturating_sub(sent)));
                    }
                    r.last_seq = seq;
                }
                if r.last_seq >= writes {
                    break;
                }
            }
            r._keep = Some(Box::new(listener));
            r
        });
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while ready.load(Ordering::Relaxed) < n {
        if Instant::now() > deadline {
            bail!(
                "only {} of {n} listeners got their first snapshot within 60 s",
                ready.load(Ordering::Relaxed)
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let listen_s = t1.elapsed().as_secs_f64();
    note(format!(
        "fanout: {n} listeners ready in {listen_s:.1} s; writing {writes} times"
    ));
    // Let the connection set-up settle before measuring.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let probe = Probe::start(relay).await;
    let mut acks = Vec::new();
    // seq -> (sent, acknowledged), µs on the process clock.
    let mut ack_at: HashMap<u64, (u64, u64)> = HashMap::new();
    // commit version -> (seq, sent) of each acknowledged write.
    let mut by_version: HashMap<u64, (u64, u64)> = HashMap::new();
    let mut write_errors = 0u64;
    let start = Instant::now();
    for seq in 1..=writes {
        tokio::time::sleep_until((start + Duration::from_millis(a.interval_ms * (seq - 1))).into())
            .await;
        let sent = now_us();
        match writer
            .write(vec![Mutation::set(name.clone(), doc_fields(seq, sent))])
            .await
        {
            Ok(version) => {
                let now = now_us();
                acks.push(now - sent);
                ack_at.insert(seq, (sent, now));
                by_version.insert(version, (seq, sent));
            }
            Err(e) => {
                write_errors += 1;
                note(format!("fanout write {seq} failed: {e}"));
            }
        }
    }
    // Wait for the listeners to see the last write (bounded).
    let drain = Instant::now() + Duration::from_secs(a.drain_seconds);
    let mut results = Vec::with_capacity(n);
    loop {
        let left = drain.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, set.join_next()).await {
            Ok(Some(r)) => results.push(r?),
            Ok(None) => break,
            Err(_) => {
                let _ = stop.send(true);
                while let Some(r) = set.join_next().await {
                    results.push(r?);
                }
                break;
            }
        }
    }
    if let Some(handle) = reactor {
        let joined = tokio::task::spawn_blocking(move || handle.join());
        tokio::pin!(joined);
        let left = drain.saturating_duration_since(Instant::now());
        let lean = match tokio::time::timeout(left, &mut joined).await {
            Ok(r) => r,
            Err(_) => {
                stop_reactor.store(true, Ordering::Relaxed);
                joined.await
            }
        };
        results.extend(lean?.map_err(|_| anyhow!("the lean listener thread panicked"))?);
    }
    let extra = probe.finish().await;
    let mut all = Vec::with_capacity(n * writes as usize);
    let mut per_write: HashMap<u64, u64> = HashMap::new();
    let mut from_ack = Vec::with_capacity(n * writes as usize);
    let mut before_ack = 0u64;
    let mut listen_errors = 0;
    let mut first_error = None;
    // Lean listeners saw versions: each must be the version of an acknowledged write, and
    // (where the document was decoded) carry that write's seq.
    let (mut unknown_versions, mut checked, mut check_mismatches) = (0u64, 0u64, 0u64);
    for r in &mut results {
        for &(version, at) in &r.at_version {
            match by_version.get(&version) {
                Some(&(seq, sent)) if seq > r.last_seq => {
                    r.seen.push((seq, at.saturating_sub(sent)));
                    r.last_seq = seq;
                }
                _ => unknown_versions += 1,
            }
        }
        for &(version, seq) in &r.checked {
            checked += 1;
            if by_version.get(&version).map(|&(s, _)| s) != Some(seq) {
                check_mismatches += 1;
            }
        }
    }
    for r in &results {
        for &(seq, lat) in &r.seen {
            all.push(lat);
            if let Some(&(sent, acked)) = ack_at.get(&seq) {
                let at = sent + lat;
                if at < acked {
                    before_ack += 1;
                }
                from_ack.push(at.saturating_sub(acked));
            }
            let e = per_write.entry(seq).or_default();
            *e = (*e).max(lat);
        }
        if let Some(e) = &r.error {
            listen_errors += 1;
            first_error.get_or_insert(e.clone());
        }
    }
    let expected = n as u64 * writes;
    let delivered = all.len() as u64;
    let mut last_listener: Vec<u64> = per_write.values().copied().collect();
    // Per write: p50 and max notification latency (ms), to tell a slow first write apart.
    let mut by_seq: HashMap<u64, Vec<u64>> = HashMap::new();
    for r in &results {
        for &(seq, lat) in &r.seen {
            by_seq.entry(seq).or_default().push(lat);
        }
    }
    let mut seqs: Vec<u64> = by_seq.keys().copied().collect();
    seqs.sort_unstable();
    let per_write_ms: Vec<Json> = seqs
        .iter()
        .map(|q| {
            let v = by_seq.get_mut(q).expect("listed key");
            let s = summary(v);
            json!([q, s["p50"], s["max"]])
        })
        .collect();
    // Teardown: drop every listener (a `Client` listener sends `Unlisten`; a lean one closes
    // its socket) and every connection, and time how long the relay takes to release them.
    let teardown = Probe::start(relay).await;
    let t2 = Instant::now();
    drop(results);
    drop(clients);
    let mut teardown_s = Json::Null;
    if let Some(addr) = relay.http_addr() {
        let limit = Instant::now() + Duration::from_secs(60);
        while Instant::now() < limit {
            let open = scrape(&addr)
                .await
                .and_then(|m| m.get("hearth_connections_open").copied());
            if open.is_some_and(|o| o <= 1.0) {
                teardown_s = json!(round3(t2.elapsed().as_secs_f64()));
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let teardown = teardown.finish().await;
    emit(merge(
        json!({
            "bench": "fanout",
            "params": {"listeners": n, "writes": writes, "interval_ms": a.interval_ms, "listener": match a.listener { ListenerKind::Lean => "lean", ListenerKind::Client => "client" }},
            "ops": delivered,
            "duration_s": round3(start.elapsed().as_secs_f64()),
            "throughput": round3(delivered as f64 / start.elapsed().as_secs_f64()),
            "notify_ms": summary(&mut all),
            "all_delivered_ms": summary(&mut last_listener),
            "notify_after_ack_ms": summary(&mut from_ack),
            "per_write_seq_p50_max_ms": per_write_ms,
            "notified_before_ack": before_ack,
            "missed": expected - delivered.min(expected),
            "lean_check": {"unknown_versions": unknown_versions, "documents_checked": checked, "mismatches": check_mismatches},
            "expected": expected,
            "listen_errors": listen_errors,
            "first_error": first_error,
            "write_errors": write_errors,
            "connect_s": round3(connect_s),
            "listen_setup_s": round3(listen_s),
            "baseline": {"write_ack_ms": summary(&mut acks), "ping_idle_ms": baseline_ping},
            "teardown_s": teardown_s,
            "teardown_cpu": teardown["cpu"],
        }),
        extra,
    ));
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Commit latency vs shape.

/// Largest string value that keeps a one-field document under the 1 MiB limit.
const MAX_STRING: usize = (1 << 20) - 1024;

async fn commit(t: &TargetArgs, a: CommitArgs) -> Result<()> {
    if a.doc_bytes.is_empty() && a.fields.is_empty() {
        bail!("give --doc-bytes S[,S2..] and/or --fields F[,F2..]");
    }
    if let Some(f) = a.fields.iter().find(|f| **f == 0 || **f > 20_000) {
        bail!("--fields {f}: between 1 and 20,000");
    }
    let relay = Relay::open(t).await?;
    let res = commit_on(&relay, t, &a).await;
    relay.stop();
    res
}

async fn commit_on(relay: &Relay, t: &TargetArgs, a: &CommitArgs) -> Result<()> {
    let tag = run_tag();
    let c = connect(&relay.url, t, format!("commit-{tag}")).await?;
    let ping = ping_baseline(&c, 200).await;
    // The base cost: a one-field, 8-byte document.
    let mut rng = Rng::new();
    let mut small = Vec::new();
    for i in 0..(a.count + a.warmup) {
        let mut m = Map::new();
        m.insert("v".into(), Value::String(rng.alnum(8)));
        let t0 = Instant::now();
        c.write(vec![Mutation::set(
            doc(&format!("commit_base_{tag}/d{i}"))?,
            m,
        )])
        .await
        .map_err(|e| anyhow!("{e}"))?;
        if i >= a.warmup {
            small.push(t0.elapsed().as_micros() as u64);
        }
    }
    let baseline = json!({"ping_idle_ms": ping, "commit_8_bytes_ms": summary(&mut small)});
    let mut points: Vec<(&str, usize)> = a.doc_bytes.iter().map(|s| ("doc_bytes", *s)).collect();
    points.extend(a.fields.iter().map(|f| ("fields", *f)));
    for (series, x) in points {
        let value_bytes = x.min(MAX_STRING);
        let payload = if series == "doc_bytes" {
            Some(rng.alnum(value_bytes))
        } else {
            None
        };
        let make = |rng: &mut Rng| -> Map {
            let mut m = Map::new();
            match &payload {
                Some(p) => {
                    // Vary the first bytes so no two documents are identical.
                    let mut s = rng.alnum(8.min(value_bytes));
                    s.push_str(&p[s.len()..]);
                    m.insert("v".into(), Value::String(s));
                }
                None => {
                    for f in 0..x {
                        m.insert(format!("f{f:05}"), Value::Integer(rng.next() as i64 >> 1));
                    }
                }
            }
            m
        };
        let probe = Probe::start(relay).await;
        let mut lat = Vec::with_capacity(a.count);
        let mut errors = 0;
        let mut first_error = None;
        let started = Instant::now();
        for i in 0..(a.count + a.warmup) {
            let fields = make(&mut rng);
            let name = doc(&format!("commit_{series}_{tag}/x{x}_{i}"))?;
            let t0 = Instant::now();
            match c.write(vec![Mutation::set(name, fields)]).await {
                Ok(_) if i >= a.warmup => lat.push(t0.elapsed().as_micros() as u64),
                Ok(_) => {}
                Err(e) => {
                    errors += 1;
                    first_error.get_or_insert(e.to_string());
                }
            }
        }
        let secs = started.elapsed().as_secs_f64();
        let extra = probe.finish().await;
        let ops = lat.len();
        let mut params = json!({"series": series, "count": a.count});
        if series == "doc_bytes" {
            params["doc_bytes"] = json!(x);
            params["value_bytes"] = json!(value_bytes);
        } else {
            params["fields"] = json!(x);
        }
        emit(merge(
            json!({
                "bench": "commit",
                "params": params,
                "ops": ops,
                "duration_s": round3(secs),
                "throughput": round3((a.count + a.warmup) as f64 / secs),
                "latency_ms": summary(&mut lat),
                "errors": errors,
                "first_error": first_error,
                "baseline": baseline,
            }),
            extra,
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Hot document.

async fn hot(t: &TargetArgs, a: HotArgs) -> Result<()> {
    let relay = Relay::open(t).await?;
    let res = hot_on(&relay, t, &a).await;
    relay.stop();
    res
}

struct HotOutcome {
    acked: u64,
    errors: u64,
    first_error: Option<String>,
    lat: Vec<u64>,
    secs: f64,
    /// Sum of the counters read back at the end.
    counted: i64,
    extra: Json,
}

/// Every client increments `docs[client % docs.len()]` until `seconds` pass.
async fn hot_run(
    relay: &Relay,
    clients: &[Client],
    docs: &[DocumentName],
    seconds: f64,
    inflight: usize,
) -> Result<HotOutcome> {
    for d in docs {
        let mut m = Map::new();
        m.insert("count".into(), Value::Integer(0));
        clients[0]
            .write(vec![Mutation::set(d.clone(), m)])
            .await
            .map_err(|e| anyhow!("creating the counter: {e}"))?;
    }
    let probe = Probe::start(relay).await;
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(seconds);
    let mut set = JoinSet::new();
    for (i, c) in clients.iter().enumerate() {
        for _ in 0..inflight.max(1) {
            let c = c.clone();
            let name = docs[i % docs.len()].clone();
            set.spawn(async move {
                let (mut acked, mut errors, mut first_error, mut lat) =
                    (0u64, 0u64, None, Vec::new());
                let count = field("count");
                while Instant::now() < deadline {
                    let m = Mutation::update(name.clone(), vec![]).with_transform(
                        count.clone(),
                        FieldTransform::Increment(Value::Integer(1)),
                    );
                    let t0 = Instant::now();
                    match c.write(vec![m]).await {
                        Ok(_) => {
                            acked += 1;
                            lat.push(t0.elapsed().as_micros() as u64);
                        }
                        Err(e) => {
                            errors += 1;
                            first_error.get_or_insert(e.to_string());
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                    }
                }
                (acked, errors, first_error, lat)
            });
        }
    }
    let mut out = HotOutcome {
        acked: 0,
        errors: 0,
        first_error: None,
        lat: Vec::new(),
        secs: 0.0,
        counted: 0,
        extra: Json::Null,
    };
    while let Some(r) = set.join_next().await {
        let (acked, errors, fe, lat) = r?;
        out.acked += acked;
        out.errors += errors;
        if out.first_error.is_none() {
            out.first_error = fe;
        }
        out.lat.extend(lat);
    }
    out.secs = started.elapsed().as_secs_f64();
    out.extra = probe.finish().await;
    for d in docs {
        let got = clients[0]
            .get_one(d)
            .await
            .map_err(|e| anyhow!("reading the counter back: {e}"))?;
        out.counted += match got.as_ref().and_then(|d| d.fields.get("count")) {
            Some(Value::Integer(i)) => *i,
            other => bail!("counter {d} has no integer count: {other:?}"),
        };
    }
    Ok(out)
}

async fn hot_on(relay: &Relay, t: &TargetArgs, a: &HotArgs) -> Result<()> {
    let tag = run_tag();
    let (clients, errs) =
        connect_many(&relay.url, t, &format!("hot-{tag}"), a.clients.max(1), 64).await;
    if !errs.is_empty() {
        bail!("{} connections failed: {}", errs.len(), errs[0]);
    }
    let baseline = if a.no_baseline {
        Json::Null
    } else {
        note(format!(
            "hot: baseline, {} clients on {} distinct documents",
            clients.len(),
            clients.len()
        ));
        let docs = (0..clients.len())
            .map(|i| doc(&format!("hot_base_{tag}/c{i}")))
            .collect::<Result<Vec<_>>>()?;
        let mut b = hot_run(relay, &clients, &docs, a.seconds, a.inflight).await?;
        json!({
            "distinct_docs_throughput": round3(b.acked as f64 / b.secs),
            "distinct_docs_ms": summary(&mut b.lat),
            "distinct_docs_lost": b.acked as i64 - b.counted,
            "distinct_docs_relay": b.extra,
        })
    };
    note(format!(
        "hot: {} clients on one document for {} s",
        clients.len(),
        a.seconds
    ));
    let docs = vec![doc(&format!("hot_{tag}/counter"))?];
    let mut h = hot_run(relay, &clients, &docs, a.seconds, a.inflight).await?;
    emit(merge(
        json!({
            "bench": "hot",
            "params": {"clients": clients.len(), "seconds": a.seconds, "inflight_per_client": a.inflight},
            "ops": h.acked,
            "duration_s": round3(h.secs),
            "throughput": round3(h.acked as f64 / h.secs),
            "latency_ms": summary(&mut h.lat),
            "acked": h.acked,
            "counter": h.counted,
            "lost": h.acked as i64 - h.counted,
            "errors": h.errors,
            "first_error": h.first_error,
            "baseline": baseline,
        }),
        h.extra,
    ));
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Sequential vs random inserts.

#[derive(Clone, Copy, PartialEq)]
enum InsertMode {
    Sequential,
    Random,
}

async fn inserts(t: &TargetArgs, a: InsertArgs, mode: InsertMode) -> Result<()> {
    let mut order = vec![mode];
    if mode == InsertMode::Sequential && !a.no_baseline {
        // The baseline runs first, so neither run benefits from a warmer store.
        order.insert(0, InsertMode::Random);
    }
    let mut thr = HashMap::new();
    let mut shared: Option<Relay> = None;
    for m in order {
        // With --spawn, each run gets a fresh relay and an empty store.
        let relay = match shared.take() {
            Some(r) if !t.spawn => r,
            other => {
                if let Some(r) = other {
                    r.stop();
                }
                Relay::open(t).await?
            }
        };
        let r = insert_run(&relay, t, &a, m).await;
        shared = Some(relay);
        let (line, throughput) = r?;
        thr.insert(m == InsertMode::Sequential, throughput);
        let mut line = line;
        if m == InsertMode::Sequential {
            if let Some(r) = thr.get(&false) {
                line["baseline"] = json!({
                    "random_throughput": r,
                    "ratio_sequential_over_random": round3(throughput / r),
                });
            }
        }
        emit(line);
    }
    if let Some(r) = shared {
        r.stop();
    }
    Ok(())
}

async fn insert_run(
    relay: &Relay,
    t: &TargetArgs,
    a: &InsertArgs,
    mode: InsertMode,
) -> Result<(Json, f64)> {
    let tag = run_tag();
    let label = match mode {
        InsertMode::Sequential => "sequential",
        InsertMode::Random => "random",
    };
    let (clients, errs) =
        connect_many(&relay.url, t, &format!("ins-{tag}"), a.clients.max(1), 64).await;
    if !errs.is_empty() {
        bail!("{} connections failed: {}", errs.len(), errs[0]);
    }
    note(format!(
        "{label}: {} inserts over {} clients x {} in flight",
        a.docs,
        clients.len(),
        a.inflight
    ));
    let coll = format!("events_{label}_{tag}");
    let next = Arc::new(AtomicU64::new(0));
    let ts_base = unix_micros();
    let probe = Probe::start(relay).await;
    let started = Instant::now();
    let mut set = JoinSet::new();
    for c in &clients {
        for _ in 0..a.inflight.max(1) {
            let (c, next, coll) = (c.clone(), next.clone(), coll.clone());
            let total = a.docs;
            set.spawn(async move {
                let mut rng = Rng::new();
                let (mut lat, mut errors, mut first_error) = (Vec::new(), 0u64, None);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        break;
                    }
                    let (id, ts, n) = match mode {
                        // Ids and the indexed timestamp both grow with every insert.
                        InsertMode::Sequential => {
                            (format!("e{i:012}"), ts_base + i as i64, i as i64)
                        }
                        InsertMode::Random => (
                            hearth_client::auto_id(),
                            rng.below(4_000_000_000_000_000) as i64,
                            (rng.next() >> 1) as i64,
                        ),
                    };
                    let mut m = Map::new();
                    m.insert(
                        "ts".into(),
                        Value::Timestamp(Timestamp::from_micros(ts).expect("timestamp in range")),
                    );
                    m.insert("n".into(), Value::Integer(n));
                    let name = match doc(&format!("{coll}/{id}")) {
                        Ok(d) => d,
                        Err(e) => return Err(e),
                    };
                    let t0 = Instant::now();
                    match c.write(vec![Mutation::set(name, m)]).await {
                        Ok(_) => lat.push(t0.elapsed().as_micros() as u64),
                        Err(e) => {
                            errors += 1;
                            first_error.get_or_insert(e.to_string());
                        }
                    }
                }
                Ok((lat, errors, first_error))
            });
        }
    }
    let mut lat = Vec::new();
    let mut errors = 0;
    let mut first_error = None;
    while let Some(r) = set.join_next().await {
        let (l, e, fe) = r??;
        lat.extend(l);
        errors += e;
        if first_error.is_none() {
            first_error = fe;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let extra = probe.finish().await;
    let ops = lat.len();
    let throughput = round3(ops as f64 / secs);
    let line = merge(
        json!({
            "bench": label,
            "params": {"docs": a.docs, "clients": clients.len(), "inflight_per_client": a.inflight},
            "ops": ops,
            "duration_s": round3(secs),
            "throughput": throughput,
            "latency_ms": summary(&mut lat),
            "errors": errors,
            "first_error": first_error,
        }),
        extra,
    );
    Ok((line, throughput))
}

// ---------------------------------------------------------------------------------------

fn main() -> Result<()> {
    base();
    let cli = Cli::parse();
    machine();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let t = cli.target.clone();
    let res = runtime.block_on(async move {
        match cli.command {
            Cmd::Ycsb(a) => ycsb(&t, a).await,
            Cmd::Fanout(a) => fanout(&t, a).await,
            Cmd::Commit(a) => commit(&t, a).await,
            Cmd::Hot(a) => hot(&t, a).await,
            Cmd::Sequential(a) => inserts(&t, a, InsertMode::Sequential).await,
            Cmd::Random(a) => inserts(&t, a, InsertMode::Random).await,
        }
    });
    // Connections still open are dropped with the runtime; do not wait for their tasks.
    runtime.shutdown_timeout(Duration::from_secs(2));
    res
}

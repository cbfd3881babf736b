//! Shared measurement: the clock, random numbers, percentiles and output, plus the CPU,
//! thread, I/O and `/metrics` probes taken around each measurement.

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, Result};
use hearth_core::path::{DocumentName, FieldPath};
use serde_json::{json, Value as Json};

use crate::relay_proc::Relay;

// ---------------------------------------------------------------------------------------
// Small utilities: clock, random numbers, percentiles, output.

pub(crate) fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// Microseconds since this process's clock base (monotonic; shared by every task).
pub(crate) fn now_us() -> u64 {
    base().elapsed().as_micros() as u64
}

pub(crate) fn unix_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// xorshift64*: enough randomness for key choice and payloads.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new() -> Rng {
        static SEQ: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);
        let mut z = SEQ.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed) ^ unix_micros() as u64;
        // splitmix64 finaliser
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub(crate) fn alnum(&mut self, len: usize) -> String {
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

pub(crate) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// p50/p90/p99/max/mean (ms) of latencies in microseconds; nearest-rank percentiles.
pub(crate) fn summary(v: &mut [u64]) -> Json {
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
pub(crate) fn machine() -> Json {
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

pub(crate) fn emit(mut line: Json) {
    if let Some(o) = line.as_object_mut() {
        o.insert("machine".into(), machine());
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

pub(crate) fn note(msg: impl AsRef<str>) {
    eprintln!("[hearth-bench] {}", msg.as_ref());
}

pub(crate) fn doc(path: &str) -> Result<DocumentName> {
    DocumentName::parse(path).map_err(|e| anyhow!("bad document name `{path}`: {e}"))
}

pub(crate) fn field(path: &str) -> FieldPath {
    FieldPath::parse(path).expect("a valid field path literal")
}

/// A short unique tag for collection names and client ids of this run.
pub(crate) fn run_tag() -> String {
    let mut r = Rng::new();
    format!("{:x}{}", std::process::id(), r.alnum(6))
}

// ---------------------------------------------------------------------------------------
// CPU and metrics probes of the relay under test.

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
pub(crate) async fn scrape(addr: &str) -> Option<HashMap<String, f64>> {
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
pub(crate) struct Probe {
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
    pub(crate) async fn start(relay: &Relay) -> Probe {
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
    pub(crate) async fn finish(self) -> Json {
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

pub(crate) fn merge(mut a: Json, b: Json) -> Json {
    if let (Some(a), Json::Object(b)) = (a.as_object_mut(), b) {
        a.extend(b);
    }
    a
}

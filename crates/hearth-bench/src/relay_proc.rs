//! The relay under test (spawned on a fresh data directory, or given by URL) and the
//! connections the benchmarks open to it.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use hearth_client::Client;
use serde_json::Value as Json;
use tokio::task::JoinSet;

use crate::cli::TargetArgs;
use crate::measure::{note, run_tag, summary};

// ---------------------------------------------------------------------------------------
// The relay under test: spawned or given, plus CPU and metrics probes.

struct RelayProc {
    child: Child,
    dir: PathBuf,
}

pub(crate) struct Relay {
    pub(crate) url: String,
    pub(crate) pid: Option<u32>,
    proc_: Option<RelayProc>,
}

impl Relay {
    pub(crate) async fn open(t: &TargetArgs) -> Result<Relay> {
        if t.spawn {
            let bin = match &t.relay_bin {
                Some(b) => b.clone(),
                None => std::env::current_exe()?
                    .parent()
                    .ok_or_else(|| anyhow!("no directory for the current executable"))?
                    .join("hearth-relay"),
            };
            let extra = t.relay_arg.clone();
            tokio::task::spawn_blocking(move || spawn_relay(bin, &extra)).await?
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
    pub(crate) fn http_addr(&self) -> Option<String> {
        let rest = self.url.strip_prefix("ws://")?;
        Some(rest.split('/').next()?.to_owned())
    }

    pub(crate) fn stop(mut self) {
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

fn spawn_relay(bin: PathBuf, extra: &[String]) -> Result<Relay> {
    let dir = std::env::temp_dir().join(format!("hearth-bench-{}", run_tag()));
    std::fs::create_dir_all(&dir)?;
    let log = std::fs::File::create(dir.with_extension("log"))?;
    let mut child = Command::new(&bin)
        .args(["serve", "--addr", "127.0.0.1:0", "--data"])
        .arg(dir.join("data"))
        // The load generator is one client address opening up to tens of thousands of
        // connections to one database: far past the relay's per-address and per-database
        // defaults, which are meant for untrusted browsers.
        .args(["--max-connections-per-address", "1000000"])
        .args(["--max-connections-per-database", "1000000"])
        .args(extra)
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

// ---------------------------------------------------------------------------------------
// Connections.

pub(crate) async fn connect(url: &str, t: &TargetArgs, id: String) -> Result<Client> {
    Client::connect(url, &t.database, &id, &t.token)
        .await
        .map_err(|e| anyhow!("connecting {id} to {url}: {e}"))
}

/// `n` connections, `concurrency` handshakes at a time; each has its own client id (batch
/// ids are per client id, so connections must never share one).
pub(crate) async fn connect_many(
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
pub(crate) async fn open_many<T, F, Fut>(
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

pub(crate) async fn ping_baseline(c: &Client, n: usize) -> Json {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        if c.ping().await.is_ok() {
            v.push(t.elapsed().as_micros() as u64);
        }
    }
    summary(&mut v)
}

pub(crate) fn open_file_limit() -> (Option<u64>, Option<u64>) {
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

pub(crate) fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

//! YCSB workloads A and B: load the records, then run open-loop at each target rate.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use hearth_core::mutation::Mutation;
use hearth_core::path::DocumentName;
use hearth_core::value::{Map, Value};
use serde_json::json;
use tokio::task::JoinSet;

use crate::cli::{TargetArgs, Workload, YcsbArgs};
use crate::measure::{doc, emit, field, merge, note, now_us, round3, run_tag, summary, Probe, Rng};
use crate::relay_proc::{connect_many, ping_baseline, Relay};

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

pub(crate) async fn ycsb(t: &TargetArgs, a: YcsbArgs) -> Result<()> {
    if a.relays > 1 && !(t.spawn && t.relay_arg.iter().any(|r| r.starts_with("--postgres"))) {
        bail!("--relays above 1 spawns relays sharing a store: give --spawn and --relay-arg=--postgres=URL");
    }
    let mut relays = Vec::new();
    for _ in 0..a.relays.max(1) {
        relays.push(Relay::open(t).await?);
    }
    let res = ycsb_on(&relays, t, &a).await;
    for r in relays {
        r.stop();
    }
    res
}

async fn ycsb_on(relays: &[Relay], t: &TargetArgs, a: &YcsbArgs) -> Result<()> {
    // CPU and metrics are probed on the first relay.
    let relay = &relays[0];
    let (wl, read_frac) = match a.workload {
        Workload::A => ("a", 0.5),
        Workload::B => ("b", 0.95),
    };
    let read_frac = a.read_proportion.unwrap_or(read_frac).clamp(0.0, 1.0);
    let tag = run_tag();
    // The connections, spread evenly over the relays.
    let mut clients = Vec::new();
    let mut errs = Vec::new();
    let n = relays.len();
    for (i, r) in relays.iter().enumerate() {
        let share = a.clients.max(n) / n + usize::from(i < a.clients.max(n) % n);
        let (c, e) = connect_many(&r.url, t, &format!("ycsb-{tag}-{i}"), share, 64).await;
        clients.extend(c);
        errs.extend(e);
    }
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
                "params": {"records": a.records, "target_qps": qps, "seconds": a.seconds, "warmup_s": a.warmup, "clients": a.clients, "value_bytes": a.value_bytes, "read_proportion": read_frac, "relays": relays.len(), "relay_args": t.relay_arg},
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

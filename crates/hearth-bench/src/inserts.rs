//! Sequential vs random inserts: monotonically increasing ids and indexed timestamps, with
//! random auto ids and values as the baseline.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Result};
use hearth_core::mutation::Mutation;
use hearth_core::value::{Map, Timestamp, Value};
use serde_json::{json, Value as Json};
use tokio::task::JoinSet;

use crate::cli::{InsertArgs, TargetArgs};
use crate::measure::{doc, emit, merge, note, round3, run_tag, summary, unix_micros, Probe, Rng};
use crate::relay_proc::{connect_many, Relay};

#[derive(Clone, Copy, PartialEq)]
pub(crate) enum InsertMode {
    Sequential,
    Random,
}

pub(crate) async fn inserts(t: &TargetArgs, a: InsertArgs, mode: InsertMode) -> Result<()> {
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

//! Scale-out: relays over one PostgreSQL database, or (the baseline, run the same way)
//! one relay on its embedded store. Two measurements:
//!
//! - cross-relay notification latency: a writer on the first relay, a listener on the last;
//!   for each write, the time from its acknowledgement on the writer's relay (and from
//!   its send) to the listener's snapshot at its version;
//! - committed batches per second of one database: `writers` connections spread over the
//!   relays, each writing one-document batches as fast as acknowledgements come, for
//!   `seconds`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use hearth_core::mutation::Mutation;
use hearth_core::path::CollectionPath;
use hearth_core::query::model::Query;
use hearth_core::value::{Map, Value};
use serde_json::json;

use crate::cli::{ScaleArgs, TargetArgs};
use crate::measure::{doc, emit, now_us, round3, summary};
use crate::relay_proc::{connect, Relay};

pub(crate) async fn scale(t: &TargetArgs, a: ScaleArgs) -> Result<()> {
    if !t.spawn {
        bail!("scale spawns its relays: give --spawn");
    }
    let n = match &a.postgres {
        Some(_) => a.relays.max(1),
        None => 1,
    };
    let mut relays = Vec::with_capacity(n);
    for _ in 0..n {
        let mut ta = t.clone();
        if let Some(url) = &a.postgres {
            ta.relay_arg.extend(["--postgres".to_owned(), url.clone()]);
        }
        relays.push(Relay::open(&ta).await?);
    }
    let store = match &a.postgres {
        Some(_) => format!("postgres, {n} relays"),
        None => "redb, 1 relay".to_owned(),
    };
    let params = json!({
        "store": store, "relays": n, "writes": a.writes, "interval_ms": a.interval_ms,
        "writers": a.writers, "seconds": a.seconds, "relay_args": t.relay_arg,
    });
    let latency = notification_latency(t, &relays, &a).await;
    let throughput = batches_per_second(t, &relays, &a).await;
    let mut line = json!({"bench": "scale", "params": params});
    match latency {
        Ok(v) => line["notification"] = v,
        Err(e) => line["notification"] = json!({"error": e.to_string()}),
    }
    match throughput {
        Ok(v) => line["throughput"] = v,
        Err(e) => line["throughput"] = json!({"error": e.to_string()}),
    }
    emit(line);
    for r in relays {
        r.stop();
    }
    Ok(())
}

/// Writes on the first relay, a listener on the last: ack → delta and send → delta, ms.
async fn notification_latency(
    t: &TargetArgs,
    relays: &[Relay],
    a: &ScaleArgs,
) -> Result<serde_json::Value> {
    let writer = connect(&relays[0].url, t, "scale-writer".into()).await?;
    let reader = connect(&relays[relays.len() - 1].url, t, "scale-reader".into()).await?;
    let q = Query::collection(CollectionPath::parse("lat").map_err(|e| anyhow!("{e}"))?);
    let mut listener = reader.listen(&q, None).await?;
    listener.next().await?;
    let seen: Arc<std::sync::Mutex<HashMap<u64, u64>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let task = {
        let (seen, stop) = (seen.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                match tokio::time::timeout(Duration::from_millis(200), listener.next()).await {
                    Ok(Ok(snap)) => {
                        seen.lock().expect("seen").insert(snap.version, now_us());
                    }
                    Ok(Err(_)) => break,
                    Err(_) => {}
                }
            }
        })
    };
    let mut sent = Vec::with_capacity(a.writes);
    for k in 0..a.writes {
        let fields: Map = [("k".to_owned(), Value::Integer(k as i64))]
            .into_iter()
            .collect();
        let m = Mutation::set(doc("lat/x")?, fields);
        let start = now_us();
        let v = writer.write(vec![m]).await?;
        sent.push((v, start, now_us()));
        tokio::time::sleep(Duration::from_millis(a.interval_ms)).await;
    }
    // The last deltas, then stop.
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let last = sent.last().map_or(0, |s| s.0);
        if seen.lock().expect("seen").contains_key(&last) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let _ = task.await;
    // A write is seen with the first snapshot at its version or later (a catch-up may
    // bring several writes in one snapshot).
    let mut seen: Vec<(u64, u64)> = seen.lock().expect("seen").clone().into_iter().collect();
    seen.sort_unstable();
    let (mut from_ack, mut from_send) = (Vec::new(), Vec::new());
    let mut missed = 0;
    let mut merged = 0;
    for (v, start, ack) in &sent {
        let at = seen.partition_point(|(sv, _)| sv < v);
        match seen.get(at) {
            Some((sv, at)) => {
                merged += usize::from(sv != v);
                from_ack.push(at.saturating_sub(*ack));
                from_send.push(at.saturating_sub(*start));
            }
            None => missed += 1,
        }
    }
    Ok(json!({
        "ack_to_delta_ms": summary(&mut from_ack),
        "send_to_delta_ms": summary(&mut from_send),
        "seen_in_a_later_snapshot": merged,
        "never_seen": missed,
    }))
}

/// Closed-loop writers over all relays: committed batches per second, ack latency.
async fn batches_per_second(
    t: &TargetArgs,
    relays: &[Relay],
    a: &ScaleArgs,
) -> Result<serde_json::Value> {
    let mut writers = Vec::with_capacity(a.writers);
    for i in 0..a.writers {
        let url = &relays[i % relays.len()].url;
        writers.push(connect(url, t, format!("scale-tp-{i}")).await?);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (i, c) in writers.into_iter().enumerate() {
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0u64;
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let fields: Map = [("n".to_owned(), Value::Integer(n as i64))]
                    .into_iter()
                    .collect();
                let Ok(name) = doc(&format!("tp/w{i}-{}", n % 1000)) else {
                    break;
                };
                let t0 = now_us();
                match c.write(vec![Mutation::set(name, fields)]).await {
                    Ok(_) => lat.push(now_us() - t0),
                    Err(_) => errors += 1,
                }
                n += 1;
            }
            (lat, errors)
        }));
    }
    tokio::time::sleep(Duration::from_secs_f64(a.seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut lat = Vec::new();
    let mut errors = 0;
    for task in tasks {
        let (l, e) = task.await?;
        lat.extend(l);
        errors += e;
    }
    let secs = started.elapsed().as_secs_f64();
    Ok(json!({
        "batches_per_second": round3(lat.len() as f64 / secs),
        "errors": errors,
        "ack_ms": summary(&mut lat),
    }))
}

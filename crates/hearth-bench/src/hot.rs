//! Hot document: C clients incrementing one counter document (and, as the baseline, each
//! its own), as fast as acknowledgements allow.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use hearth_client::Client;
use hearth_core::mutation::{FieldTransform, Mutation};
use hearth_core::path::DocumentName;
use hearth_core::value::{Map, Value};
use serde_json::{json, Value as Json};
use tokio::task::JoinSet;

use crate::cli::{HotArgs, TargetArgs};
use crate::measure::{doc, emit, field, merge, note, round3, run_tag, summary, Probe};
use crate::relay_proc::{connect_many, Relay};

pub(crate) async fn hot(t: &TargetArgs, a: HotArgs) -> Result<()> {
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

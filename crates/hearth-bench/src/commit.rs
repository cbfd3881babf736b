//! Commit latency vs document shape: sequential commits by document size and by field count.

use std::time::Instant;

use anyhow::{anyhow, bail, Result};
use hearth_core::mutation::Mutation;
use hearth_core::value::{Map, Value};
use serde_json::json;

use crate::cli::{CommitArgs, TargetArgs};
use crate::measure::{doc, emit, merge, round3, run_tag, summary, Probe, Rng};
use crate::relay_proc::{connect, ping_baseline, Relay};

/// Largest string value that keeps a one-field document under the 1 MiB limit.
const MAX_STRING: usize = (1 << 20) - 1024;

pub(crate) async fn commit(t: &TargetArgs, a: CommitArgs) -> Result<()> {
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

//! Fan-out: N connections listening to one document, one write per interval; notification
//! latency from the write's send (and acknowledgement) to each listener.

mod lean;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use hearth_core::mutation::Mutation;
use hearth_core::path::CollectionPath;
use hearth_core::query::model::Query;
use hearth_core::value::{Map, Value};
use serde_json::{json, Value as Json};
use tokio::task::JoinSet;

use crate::cli::{FanoutArgs, ListenerKind, TargetArgs};
use crate::measure::{doc, emit, merge, note, now_us, round3, run_tag, scrape, summary, Probe};
use crate::relay_proc::{connect, connect_many, open_fds, open_file_limit, ping_baseline, Relay};
use lean::{lean_connect_many, lean_reactor};

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

pub(crate) async fn fanout(t: &TargetArgs, a: FanoutArgs) -> Result<()> {
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

//! The relay's Prometheus metrics: atomics, small fixed-bucket histograms and a renderer for
//! the text exposition format 0.0.4, without a metrics crate.
//!
//! Relay-wide series are plain atomics, updated lock-free. Series labelled by database live in
//! one short-held std `Mutex<BTreeMap>` (databases are few), and the protocol error counter is
//! keyed by `&'static str` so a client can never create new series. All updates use `Relaxed`
//! ordering: each value is independent, and a scrape needs no ordering between them.

use std::collections::BTreeMap;
use std::fmt::{Display, Write as _};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Upper bounds in seconds for latency histograms: 50µs to 10s, roughly 1-2.5-5 per decade.
const SECONDS_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0,
];

/// Upper bounds for the number of write batches made durable by one fsync.
const BATCH_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
];

/// All metrics of one relay process; shared as `Arc<Metrics>` by every task.
#[derive(Debug)]
pub struct Metrics {
    /// WebSocket connections open now.
    connections_open: AtomicI64,
    /// WebSocket connections accepted since start.
    connections_total: AtomicU64,
    /// Ack latency of single write batches.
    commit_latency: Histogram,
    /// Group commits (fsyncs) since start.
    group_commits: AtomicU64,
    /// Write batches made durable per group commit.
    group_commit_batches: Histogram,
    /// Duration of each group commit.
    group_commit_seconds: Histogram,
    /// Time from a commit to its change frames being queued on every listening connection.
    fanout_latency: Histogram,
    /// Frames written to clients since start.
    frames_sent: AtomicU64,
    /// Bytes queued for clients and not yet written; a signed sum of deltas, so unbalanced
    /// calls show up as a drift (even below zero) rather than a panic.
    outbound_bytes: AtomicI64,
    /// Connections closed because they read too slowly.
    slow_consumers_dropped: AtomicU64,
    /// Other relays' commits found by polling a shared store's heads.
    poll_catch_ups: AtomicU64,
    /// Databases whose head in a shared store was found behind what was handed on.
    head_regressions: AtomicU64,
    /// Time from another relay's commit to this relay's fan-out.
    tail_lag: Histogram,
    /// Outages of a shared store: the one under way, and counts.
    outages: crate::outage::Outages,
    /// Series labelled by database, keyed and rendered in name order.
    databases: Mutex<BTreeMap<String, DatabaseSeries>>,
    /// Protocol errors by kind. The static key bounds the number of series.
    protocol_errors: Mutex<BTreeMap<&'static str, u64>>,
    /// Connections refused by a connection limit, by reason. The static key bounds the
    /// number of series.
    connections_refused: Mutex<BTreeMap<&'static str, u64>>,
    /// Security-rule decisions, by operation kind and outcome (`allowed`, `denied`).
    rules: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
}

/// The series of one database.
#[derive(Debug, Default)]
struct DatabaseSeries {
    /// Active listen targets; signed for the same reason as `outbound_bytes`.
    listens: i64,
    /// Write batches committed.
    commits: u64,
    /// Write batches waiting for the committer.
    queue_depth: u64,
    /// Index backfill progress, in documents.
    backfill_done: u64,
    /// Index backfill size, in documents.
    backfill_total: u64,
}

/// A metric family labelled by database, rendered from [`DatabaseSeries`].
struct DatabaseFamily {
    /// The metric name.
    name: &'static str,
    /// Its `# HELP` text.
    help: &'static str,
    /// Its `# TYPE`: `counter` or `gauge`.
    kind: &'static str,
    /// Reads the value; `i128` holds both the signed gauges and the `u64` counters.
    get: fn(&DatabaseSeries) -> i128,
}

/// The per-database families, in rendering order.
const DATABASE_FAMILIES: &[DatabaseFamily] = &[
    DatabaseFamily {
        name: "hearth_active_listens",
        help: "Listen targets active now.",
        kind: "gauge",
        get: |s| s.listens.into(),
    },
    DatabaseFamily {
        name: "hearth_commits_total",
        help: "Write batches committed.",
        kind: "counter",
        get: |s| s.commits.into(),
    },
    DatabaseFamily {
        name: "hearth_write_queue_depth",
        help: "Write batches waiting for the committer.",
        kind: "gauge",
        get: |s| s.queue_depth.into(),
    },
    DatabaseFamily {
        name: "hearth_backfill_done",
        help: "Documents processed by the running index backfill.",
        kind: "gauge",
        get: |s| s.backfill_done.into(),
    },
    DatabaseFamily {
        name: "hearth_backfill_total",
        help: "Documents to process in the running index backfill.",
        kind: "gauge",
        get: |s| s.backfill_total.into(),
    },
];

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    /// Fresh metrics, all zero.
    pub fn new() -> Metrics {
        Metrics {
            connections_open: AtomicI64::new(0),
            connections_total: AtomicU64::new(0),
            commit_latency: Histogram::new(SECONDS_BUCKETS),
            group_commits: AtomicU64::new(0),
            group_commit_batches: Histogram::new(BATCH_BUCKETS),
            group_commit_seconds: Histogram::new(SECONDS_BUCKETS),
            fanout_latency: Histogram::new(SECONDS_BUCKETS),
            frames_sent: AtomicU64::new(0),
            outbound_bytes: AtomicI64::new(0),
            slow_consumers_dropped: AtomicU64::new(0),
            poll_catch_ups: AtomicU64::new(0),
            head_regressions: AtomicU64::new(0),
            tail_lag: Histogram::new(SECONDS_BUCKETS),
            outages: Default::default(),
            databases: Mutex::new(BTreeMap::new()),
            protocol_errors: Mutex::new(BTreeMap::new()),
            connections_refused: Mutex::new(BTreeMap::new()),
            rules: Mutex::new(BTreeMap::new()),
        }
    }

    /// A WebSocket connection was accepted.
    pub fn connection_opened(&self) {
        self.connections_open.fetch_add(1, Relaxed);
        self.connections_total.fetch_add(1, Relaxed);
    }

    /// A WebSocket connection ended, for whatever reason.
    pub fn connection_closed(&self) {
        self.connections_open.fetch_sub(1, Relaxed);
    }

    /// A listen target on database `db` became active.
    pub fn listen_started(&self, db: &str) {
        self.database(db, |s| s.listens += 1);
    }

    /// A listen target on database `db` ended (unlisten or connection closed).
    pub fn listen_stopped(&self, db: &str) {
        self.database(db, |s| s.listens -= 1);
    }

    /// `batches` write batches were committed to database `db`.
    pub fn commits(&self, db: &str, batches: u64) {
        self.database(db, |s| s.commits += batches);
    }

    /// One write batch was acknowledged `seconds` after it arrived.
    pub fn commit_latency(&self, seconds: f64) {
        self.commit_latency.observe(seconds);
    }

    /// One group commit made `batches` write batches durable in `seconds`.
    pub fn group_commit(&self, batches: u64, seconds: f64) {
        self.group_commits.fetch_add(1, Relaxed);
        self.group_commit_batches.observe(batches as f64);
        self.group_commit_seconds.observe(seconds);
    }

    /// The change frames of one commit were queued on all listening connections `seconds`
    /// after the commit.
    pub fn fanout_latency(&self, seconds: f64) {
        self.fanout_latency.observe(seconds);
    }

    /// `n` frames were written to clients.
    pub fn frames_sent(&self, n: u64) {
        self.frames_sent.fetch_add(n, Relaxed);
    }

    /// Database `db` now has `depth` write batches waiting for the committer.
    pub fn queue_depth(&self, db: &str, depth: u64) {
        self.database(db, |s| s.queue_depth = depth);
    }

    /// Bytes queued for clients changed by `delta` (positive when queued, negative when
    /// written or dropped).
    pub fn outbound_bytes(&self, delta: i64) {
        self.outbound_bytes.fetch_add(delta, Relaxed);
    }

    /// A shared store's poll of the heads found a commit no notification had brought.
    pub fn poll_catch_up(&self) {
        self.poll_catch_ups.fetch_add(1, Relaxed);
    }

    /// A database's head in the store was found behind what this relay handed on.
    pub fn head_regression(&self) {
        self.head_regressions.fetch_add(1, Relaxed);
    }

    /// Commits another relay made reached this relay's fan-out `micros` after the last of
    /// them was committed.
    pub fn tail_lag(&self, micros: i64) {
        self.tail_lag.observe(micros.max(0) as f64 / 1e6);
    }

    /// A shared store's outages (`/healthz` asks whether one is under way).
    pub fn store_outages(&self) -> &crate::outage::Outages {
        &self.outages
    }

    pub fn slow_consumer_dropped(&self) {
        self.slow_consumers_dropped.fetch_add(1, Relaxed);
    }

    /// An index backfill on database `db` has processed `done` of `total` documents.
    pub fn backfill(&self, db: &str, done: u64, total: u64) {
        self.database(db, |s| {
            s.backfill_done = done;
            s.backfill_total = total;
        });
    }

    /// A client sent something the protocol does not allow; `kind` names the error class.
    pub fn protocol_error(&self, kind: &'static str) {
        *lock(&self.protocol_errors).entry(kind).or_insert(0) += 1;
    }

    /// A connection was refused by a limit; `reason` names it (`pending`, `connections`,
    /// `address`, `database`, `subject`, `hello_size`).
    pub fn connection_refused(&self, reason: &'static str) {
        *lock(&self.connections_refused).entry(reason).or_insert(0) += 1;
    }

    /// The security rules decided an operation of kind `operation` (`get`, `list`,
    /// `create`, `update`, `delete`).
    pub fn rules_decision(&self, operation: &'static str, allowed: bool) {
        let outcome = if allowed { "allowed" } else { "denied" };
        *lock(&self.rules).entry((operation, outcome)).or_insert(0) += 1;
    }

    /// All metrics in the Prometheus text exposition format 0.0.4
    /// (`Content-Type: text/plain; version=0.0.4`).
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        let gauge = |out: &mut String, name, help, value: &dyn Display| {
            family(out, name, help, "gauge");
            sample(out, name, &[], value);
        };
        let counter = |out: &mut String, name, help, value: &dyn Display| {
            family(out, name, help, "counter");
            sample(out, name, &[], value);
        };
        gauge(
            &mut out,
            "hearth_connections_open",
            "WebSocket connections open now.",
            &self.connections_open.load(Relaxed),
        );
        counter(
            &mut out,
            "hearth_connections_total",
            "WebSocket connections accepted since start.",
            &self.connections_total.load(Relaxed),
        );
        {
            // One snapshot of the map renders every per-database family, so the families
            // agree on which databases exist.
            let dbs = lock(&self.databases);
            for f in DATABASE_FAMILIES {
                family(&mut out, f.name, f.help, f.kind);
                for (db, s) in dbs.iter() {
                    sample(&mut out, f.name, &[("database", db)], &(f.get)(s));
                }
            }
        }
        self.commit_latency.render(
            &mut out,
            "hearth_commit_latency_seconds",
            "Time from receiving a write batch to acknowledging it.",
        );
        counter(
            &mut out,
            "hearth_group_commits_total",
            "Group commits (fsyncs) of the store.",
            &self.group_commits.load(Relaxed),
        );
        self.group_commit_batches.render(
            &mut out,
            "hearth_group_commit_batches",
            "Write batches made durable by one group commit.",
        );
        self.group_commit_seconds.render(
            &mut out,
            "hearth_group_commit_seconds",
            "Duration of one group commit.",
        );
        self.fanout_latency.render(
            &mut out,
            "hearth_fanout_latency_seconds",
            "Time from a commit to its change frames being queued for all listeners.",
        );
        counter(
            &mut out,
            "hearth_frames_sent_total",
            "Frames written to clients.",
            &self.frames_sent.load(Relaxed),
        );
        gauge(
            &mut out,
            "hearth_outbound_queued_bytes",
            "Bytes queued for clients and not yet written.",
            &self.outbound_bytes.load(Relaxed),
        );
        counter(
            &mut out,
            "hearth_slow_consumers_dropped_total",
            "Connections closed because their outbound queue overflowed.",
            &self.slow_consumers_dropped.load(Relaxed),
        );
        counter(
            &mut out,
            "hearth_poll_catch_ups_total",
            "Commits of other relays found by polling the shared store's heads, not by notification.",
            &self.poll_catch_ups.load(Relaxed),
        );
        counter(
            &mut out,
            "hearth_store_head_regressions_total",
            "Databases whose head in the store went back behind what this relay had handed on (a restore, a failover to a lagging copy).",
            &self.head_regressions.load(Relaxed),
        );
        self.tail_lag.render(
            &mut out,
            "hearth_notification_lag_seconds",
            "Time from another relay's commit to its changes reaching this relay's fan-out.",
        );
        self.outages.render(&mut out);
        family(
            &mut out,
            "hearth_protocol_errors_total",
            "Messages refused as protocol errors, by kind.",
            "counter",
        );
        for (kind, n) in lock(&self.protocol_errors).iter() {
            sample(
                &mut out,
                "hearth_protocol_errors_total",
                &[("kind", kind)],
                n,
            );
        }
        family(
            &mut out,
            "hearth_connections_refused_total",
            "Connections refused by a connection limit, by reason.",
            "counter",
        );
        for (reason, n) in lock(&self.connections_refused).iter() {
            sample(
                &mut out,
                "hearth_connections_refused_total",
                &[("reason", reason)],
                n,
            );
        }
        let name = "hearth_rules_decisions_total";
        family(
            &mut out,
            name,
            "Operations the security rules allowed or denied, by kind.",
            "counter",
        );
        for ((operation, outcome), n) in lock(&self.rules).iter() {
            let labels = [("operation", *operation), ("outcome", *outcome)];
            sample(&mut out, name, &labels, n);
        }
        out
    }

    /// Runs `f` on the series of database `db`, creating them on first use.
    fn database(&self, db: &str, f: impl FnOnce(&mut DatabaseSeries)) {
        let mut dbs = lock(&self.databases);
        // Look up before inserting so the common case allocates no key.
        match dbs.get_mut(db) {
            Some(s) => f(s),
            None => f(dbs.entry(db.to_owned()).or_default()),
        }
    }
}

/// Locks a metrics map. A panic while it was held left plain numbers behind, never a broken
/// structure, so poisoning is ignored rather than taking metrics down with it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A histogram with fixed bucket bounds, updated lock-free.
#[derive(Debug)]
struct Histogram {
    /// Increasing upper bounds (inclusive, as Prometheus' `le`).
    bounds: &'static [f64],
    /// `counts[i]` counts observations in `(bounds[i-1], bounds[i]]`; the extra last slot counts
    /// those above every bound. Not cumulative: rendering accumulates, and derives `_count`
    /// from the same snapshot so that `_count` always equals the `+Inf` bucket.
    counts: Box<[AtomicU64]>,
    /// Sum of all observations, as `f64` bits.
    sum_bits: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        assert!(
            bounds.windows(2).all(|w| w[0] < w[1]),
            "bucket bounds increase"
        );
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_bits: AtomicU64::new(0f64.to_bits()),
        }
    }

    /// Records `v`. Negative values (a clock stepping back) count as zero; NaN and infinities
    /// are dropped, since they would poison `_sum` for the life of the process.
    fn observe(&self, v: f64) {
        if !v.is_finite() {
            return;
        }
        let v = v.max(0.0);
        let bucket = self.bounds.partition_point(|&b| b < v);
        self.counts[bucket].fetch_add(1, Relaxed);
        // The closure always returns Some, so the update cannot fail.
        let _ = self.sum_bits.fetch_update(Relaxed, Relaxed, |bits| {
            Some((f64::from_bits(bits) + v).to_bits())
        });
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        family(out, name, help, "histogram");
        let bucket = format!("{name}_bucket");
        let mut cumulative = 0u64;
        for (i, count) in self.counts.iter().enumerate() {
            cumulative += count.load(Relaxed);
            let le = match self.bounds.get(i) {
                Some(b) => b.to_string(),
                None => "+Inf".to_owned(),
            };
            sample(out, &bucket, &[("le", &le)], &cumulative);
        }
        let sum = f64::from_bits(self.sum_bits.load(Relaxed));
        sample(out, &format!("{name}_sum"), &[], &sum);
        sample(out, &format!("{name}_count"), &[], &cumulative);
    }
}

/// Writes the `# HELP` and `# TYPE` lines that open a metric family.
pub(crate) fn family(out: &mut String, name: &str, help: &str, kind: &str) {
    out.push_str("# HELP ");
    out.push_str(name);
    out.push(' ');
    // HELP text escapes only backslash and newline.
    for c in help.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push_str("\n# TYPE ");
    out.push_str(name);
    out.push(' ');
    out.push_str(kind);
    out.push('\n');
}

/// Writes one sample line, escaping label values.
pub(crate) fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: &dyn Display) {
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (i, (label, v)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(label);
            out.push_str("=\"");
            for c in v.chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    '"' => out.push_str("\\\""),
                    '\n' => out.push_str("\\n"),
                    c => out.push(c),
                }
            }
            out.push('"');
        }
        out.push('}');
    }
    writeln!(out, " {value}").expect("writing to a String cannot fail");
}

#[cfg(test)]
mod tests;

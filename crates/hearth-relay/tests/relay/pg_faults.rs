//! Store outages under load (issue 22): three relays over one PostgreSQL server of the
//! test's own, on each a listener over a collection, writers, and a client that listens
//! and writes on one connection (reconnecting and resuming after a refused write, as the
//! web client does). The server crashes and comes back (`pg_ctl restart -m immediate`),
//! stops for seconds then starts, has every relay connection terminated
//! (`pg_terminate_backend`), or crashes behind a link that turns every open connection
//! into a black hole (nothing answered, nothing reset: a server host gone); the writes go
//! on. Every listener's view must converge to a fresh read of the store within a bound,
//! versions only going forward; `/healthz` must answer 503 meanwhile, and each relay
//! count the outage and log that it caught up. Also: a relay stopped in the middle of a
//! group commit must not stall the others' commits for longer than the server's
//! idle-in-transaction timeout. PostgreSQL only: with another store each test passes with
//! a note.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hearth_core::document::Document;
use hearth_core::mutation::Mutation;
use hearth_core::path::DocumentName;
use hearth_core::query::model::Query;
use hearth_core::value::Map;

use crate::harness::*;

const DB: &str = "faults";
/// How long every listener has, once the writes stop, to show what a fresh read shows.
const CONVERGE: Duration = Duration::from_secs(15);
/// How long the writers on every relay have, after the fault, to get 30 writes each
/// acknowledged again.
const RESUME: Duration = Duration::from_secs(60);
/// Relays in each test.
const RELAYS: usize = 3;
/// Writers on each relay.
const WRITERS: usize = 4;

/// What happens to the store.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// `pg_ctl restart -m immediate`: a crash, back in about a second.
    Restart,
    /// `pg_ctl stop -m immediate`, a few seconds down, then a start.
    StopStart,
    /// `pg_terminate_backend` of every relay connection (pool and LISTEN alike).
    Terminate,
    /// Every connection open through the proxy in front of the server becomes a black
    /// hole, and the server crashes and comes back: the relays' connections neither
    /// answer nor fail; new ones work.
    BlackHole,
}

fn items() -> Query {
    Query::collection(coll("items"))
}

/// What a listener shows: name → fields.
type Shown = BTreeMap<DocumentName, Map>;

fn shown(docs: &[Document]) -> Shown {
    docs.iter()
        .map(|d| (d.name.clone(), (*d.fields).clone()))
        .collect()
}

/// One relay's listener, read by a task of its own.
#[derive(Clone)]
struct Watch {
    /// The last snapshot's version and documents.
    latest: Arc<Mutex<(u64, Vec<Document>)>>,
    /// When it first showed a document another relay wrote after the fault.
    first_foreign: Arc<Mutex<Option<Instant>>>,
    /// Why it stopped, if it did (an error, versions going backwards).
    failed: Arc<Mutex<Option<String>>>,
}

impl Watch {
    fn new(first: &hearth_client::ListenSnapshot) -> Watch {
        Watch {
            latest: Arc::new(Mutex::new((first.version, first.documents.clone()))),
            first_foreign: Arc::new(Mutex::new(None)),
            failed: Arc::new(Mutex::new(None)),
        }
    }

    /// Takes `snap` (of relay `i`'s listener); false when it is wrong (noted in `failed`).
    fn take(&self, snap: hearth_client::ListenSnapshot, i: usize, epoch: &AtomicU64) -> bool {
        let mut last = self.latest.lock().unwrap();
        if snap.version < last.0 {
            *self.failed.lock().unwrap() = Some(format!(
                "versions went back: {} after {}",
                snap.version, last.0
            ));
            return false;
        }
        let mut f = self.first_foreign.lock().unwrap();
        if f.is_none() && epoch.load(Ordering::SeqCst) == 1 {
            let mine = format!("r{i}");
            let seen = snap.documents.iter().any(|d| {
                d.fields.get("epoch") == Some(&int(1))
                    && d.fields.get("relay").is_some_and(|r| *r != s(&mine))
            });
            if seen {
                *f = Some(Instant::now());
            }
        }
        *last = (snap.version, snap.documents);
        true
    }

    /// Reads `l`'s snapshots into the watch until it ends (an end is noted as a failure).
    fn follow(
        &self,
        mut l: hearth_client::Listener,
        i: usize,
        epoch: Arc<AtomicU64>,
    ) -> tokio::task::JoinHandle<()> {
        let w = self.clone();
        tokio::spawn(async move {
            loop {
                match l.next().await {
                    Ok(snap) => {
                        if !w.take(snap, i, &epoch) {
                            return;
                        }
                    }
                    Err(e) => {
                        *w.failed.lock().unwrap() = Some(format!("the listen ended: {e}"));
                        return;
                    }
                }
            }
        })
    }
}

/// Starts relay `i`'s listener and the task that reads it; `epoch` is 1 from the fault on.
async fn watch(relay: &Relay, i: usize, epoch: Arc<AtomicU64>) -> (hearth_client::Client, Watch) {
    let c = relay.client(DB).await;
    let mut l = within(c.listen(&items(), None)).await.unwrap();
    let first = within(l.next()).await.unwrap();
    let w = Watch::new(&first);
    w.follow(l, i, epoch);
    (c, w)
}

/// The `k`th write of writer `kind` (`m`: mixed, `r`: plain) on relay `i` in `epoch`: one of
/// twenty documents `items/{kind}{i}d*`, saying who wrote it and when.
fn item_write(kind: &str, i: usize, k: i64, epoch: u64) -> Mutation {
    let fields = map([
        ("relay", s(&format!("r{i}"))),
        ("k", int(k)),
        ("epoch", int(epoch as i64)),
    ]);
    Mutation::set(name(&format!("items/{kind}{i}d{}", k % 20)), fields)
}

/// A client of relay `i` (at `url`) that listens and writes on one connection, as the
/// web client does: when a write is refused it closes the connection, connects again
/// and resumes its listen from the last snapshot it had. Its writes are `items/m{i}d*`.
async fn mixed(
    url: String,
    i: usize,
    epoch: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
) -> (Watch, tokio::task::JoinHandle<()>) {
    let c = connect(&url).await;
    let mut l = within(c.listen(&items(), None)).await.unwrap();
    let first = within(l.next()).await.unwrap();
    let w = Watch::new(&first);
    let watch = w.clone();
    let task = tokio::spawn(async move {
        let mut c = c;
        let mut follower = w.follow(l, i, epoch.clone());
        let mut k = 0i64;
        while !stop.load(Ordering::SeqCst) {
            let e = epoch.load(Ordering::SeqCst);
            let m = item_write("m", i, k, e);
            k += 1;
            if within(c.write(vec![m])).await.is_ok() {
                tokio::time::sleep(Duration::from_millis(3)).await;
                continue;
            }
            follower.abort();
            let _ = (&mut follower).await;
            {
                // A listen that ended with its connection is resumed; anything else (versions
                // going back) stays a failure.
                let mut failed = w.failed.lock().unwrap();
                if failed
                    .as_ref()
                    .is_some_and(|w| w.starts_with("the listen ended"))
                {
                    eprintln!("mixed client {i}: {}; it resumes", failed.take().unwrap());
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            c = connect(&url).await;
            let (v, docs) = w.latest.lock().unwrap().clone();
            match within(c.resume(&items(), v, docs)).await {
                Ok(l) => follower = w.follow(l, i, epoch.clone()),
                Err(e) => *w.failed.lock().unwrap() = Some(format!("resume refused: {e}")),
            }
        }
        done.store(true, Ordering::SeqCst);
        // The connection stays open, its listen read, until the test ends.
        let _ = follower.await;
        drop(c);
    });
    (watch, task)
}

/// A connection to `url` for a writer (a fresh client id each, so batch ids never
/// repeat), tried until it opens.
async fn connect(url: &str) -> hearth_client::Client {
    loop {
        let id = unique("writer");
        let c = hearth_client::Client::connect(url, DB, &id, "");
        match tokio::time::timeout(Duration::from_secs(5), c).await {
            Ok(Ok(c)) => return c,
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// A writer on relay `i` (at `url`): sets one of its 20 documents at a time, naming the
/// epoch, until `stop`. A refused write (the store is down) halts its connection's
/// writes, as the relay keeps a connection's batches in order: it reconnects after a
/// pause, as a client does. Counts the writes acknowledged since the fault in `after`.
fn write_on(
    url: String,
    i: usize,
    epoch: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    after: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut c = connect(&url).await;
        let mut k = 0i64;
        while !stop.load(Ordering::SeqCst) {
            let e = epoch.load(Ordering::SeqCst);
            let m = item_write("r", i, k, e);
            match within(c.write(vec![m])).await {
                Ok(_) if e == 1 => {
                    after.fetch_add(1, Ordering::SeqCst);
                }
                Ok(_) => {}
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    c = connect(&url).await;
                }
            }
            k += 1;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
}

/// What a relay's `/healthz` said while it was polled.
#[derive(Debug, Default)]
struct Health {
    /// It answered 503 at least once.
    unavailable: bool,
    /// It said it was degraded (the store answers, the relay is catching up).
    degraded: bool,
}

/// Polls relay `addr`'s `/healthz` until `stop`.
fn health_watch(
    addr: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Health> {
    tokio::spawn(async move {
        let mut seen = Health::default();
        while !stop.load(Ordering::SeqCst) {
            let probe = tokio::time::timeout(Duration::from_secs(5), http_get(addr, "/healthz"));
            if let Ok((status, body)) = probe.await {
                seen.unavailable |= status == 503;
                seen.degraded |= body.starts_with("degraded");
            }
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        seen
    })
}

/// A TCP proxy in front of the PostgreSQL server. After [`Proxy::freeze`], every
/// connection open through it is a black hole (nothing forwarded either way, nothing
/// closed, so the relay's kernel still sees its data acknowledged): what a relay sees of a
/// server whose host is gone. Connections opened after go through.
struct Proxy {
    port: u16,
    frozen: tokio::sync::watch::Sender<u64>,
}

impl Proxy {
    async fn start(target: u16) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (frozen, rx) = tokio::sync::watch::channel(0u64);
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let mut freeze = rx.clone();
                let born = *freeze.borrow();
                tokio::spawn(async move {
                    let to = tokio::net::TcpStream::connect(("127.0.0.1", target)).await;
                    let Ok(mut outbound) = to else { return };
                    let frozen = async move { freeze.wait_for(|e| *e > born).await.is_ok() };
                    let hole = tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => false,
                        f = frozen => f,
                    };
                    if hole {
                        // Held open and silent for the rest of the test.
                        std::future::pending::<()>().await;
                    }
                });
            }
        });
        Proxy { port, frozen }
    }

    fn freeze(&self) {
        self.frozen.send_modify(|e| *e += 1);
    }
}

/// Does `fault` to `server`, whose database `db` the relays use (through `proxy`).
fn inflict(fault: Fault, server: &crate::pg::Server, db: &str, proxy: &Proxy) {
    match fault {
        Fault::Restart => server.crash_restart(),
        Fault::StopStart => {
            server.stop();
            std::thread::sleep(Duration::from_secs(3));
            server.start_again();
        }
        Fault::Terminate => {
            let killed = server.sql(
                "postgres",
                &format!(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                     WHERE datname = '{db}' AND pid <> pg_backend_pid()"
                ),
            );
            eprintln!("terminated {killed} relay connections");
        }
        Fault::BlackHole => {
            proxy.freeze();
            server.crash_restart();
        }
    }
}

/// Waits until every listener shows what a fresh read through relay 0 shows (at most
/// [`CONVERGE`]); panics naming the first that does not.
async fn converge(relays: &[Relay], watches: &[Watch]) {
    let fresh = relays[0].client(DB).await;
    let (docs, version) = within(fresh.query(&items())).await.unwrap();
    let expected = shown(&docs);
    let deadline = Instant::now() + CONVERGE;
    for (i, w) in watches.iter().enumerate() {
        loop {
            if let Some(why) = w.failed.lock().unwrap().clone() {
                panic!("listener {i} (relay {}) failed: {why}", i % RELAYS);
            }
            let (v, docs) = w.latest.lock().unwrap().clone();
            let got = shown(&docs);
            if got == expected {
                break;
            }
            if Instant::now() > deadline {
                let missing: Vec<_> = expected
                    .iter()
                    .filter(|(n, f)| got.get(*n) != Some(*f))
                    .map(|(n, f)| format!("{n} {:?}", f.get("k")))
                    .collect();
                panic!(
                    "listener {i} (relay {}) is at version {v}, the store at {version}: {} of \
                     {} documents differ, {CONVERGE:?} after the writes stopped: {missing:?}",
                    i % RELAYS,
                    missing.len(),
                    expected.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Every relay counted the outage, logged that it caught up and says it is healthy.
async fn assert_recovered(relays: &[Relay], tag: &str) {
    for r in relays {
        let (_, text) = http_get(r.addr, "/metrics").await;
        let value = |name| metric(&text, name).unwrap_or(-1.0);
        let outages = value("hearth_store_outages_total");
        let seconds = value("hearth_store_degraded_seconds_total");
        let catch_ups = value("hearth_store_outage_catch_ups_total");
        eprintln!(
            "{tag}: {}: {outages} outage(s), {seconds} s degraded, {catch_ups} catch-up(s)",
            r.addr
        );
        assert!(outages >= 1.0, "{}: no outage counted:\n{text}", r.addr);
        assert!(seconds > 0.0, "{}: no time degraded counted", r.addr);
        assert_eq!(
            value("hearth_store_degraded"),
            0.0,
            "{}: still degraded",
            r.addr
        );
        let log = r.log();
        for line in log.lines().filter(|l| {
            l.contains("degraded") || l.contains("caught up") || l.contains("not hearing")
        }) {
            eprintln!("{tag}: {}: {line}", r.addr);
        }
        assert!(
            log.contains("caught up with the store again"),
            "{}: no log line says it caught up:\n{log}",
            r.addr
        );
        let (status, body) = http_get(r.addr, "/healthz").await;
        assert_eq!(status, 200, "{}: {body}", r.addr);
    }
}

/// The clients of the scenario: listeners, writers and mixed clients on every relay.
struct Load {
    watches: Vec<Watch>,
    /// Per relay: writes acknowledged since the fault.
    after: Vec<Arc<AtomicU64>>,
    writers: Vec<tokio::task::JoinHandle<()>>,
    mixers: Vec<tokio::task::JoinHandle<()>>,
    /// Per mixed client: set once it stopped writing.
    done: Vec<Arc<AtomicBool>>,
    /// The listeners' connections.
    _listening: Vec<hearth_client::Client>,
}

impl Load {
    async fn start(relays: &[Relay], epoch: &Arc<AtomicU64>, stop: &Arc<AtomicBool>) -> Load {
        let mut load = Load {
            watches: Vec::new(),
            after: Vec::new(),
            writers: Vec::new(),
            mixers: Vec::new(),
            done: Vec::new(),
            _listening: Vec::new(),
        };
        for (i, r) in relays.iter().enumerate() {
            let (c, w) = watch(r, i, epoch.clone()).await;
            load._listening.push(c);
            load.watches.push(w);
        }
        for (i, r) in relays.iter().enumerate() {
            let d = Arc::new(AtomicBool::new(false));
            let (w, task) = mixed(r.url(), i, epoch.clone(), stop.clone(), d.clone()).await;
            load.done.push(d);
            load.watches.push(w);
            load.mixers.push(task);
        }
        for (i, r) in relays.iter().enumerate() {
            let count = Arc::new(AtomicU64::new(0));
            for _ in 0..WRITERS {
                let (e, st, n) = (epoch.clone(), stop.clone(), count.clone());
                load.writers.push(write_on(r.url(), i, e, st, n));
            }
            load.after.push(count);
        }
        load
    }

    /// Waits until the writers of every relay in `on` had `n` writes acknowledged since
    /// the fault (at most [`RESUME`]).
    async fn resumed(&self, on: &[usize], n: u64, what: &str) {
        let deadline = Instant::now() + RESUME;
        while on.iter().any(|i| self.after[*i].load(Ordering::SeqCst) < n) {
            assert!(Instant::now() < deadline, "{what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops every writer and waits until none writes any more.
    async fn stop(&mut self, stop: &AtomicBool) {
        stop.store(true, Ordering::SeqCst);
        for w in self.writers.drain(..) {
            w.await.unwrap();
        }
        while self.done.iter().any(|d| !d.load(Ordering::SeqCst)) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        for m in &self.mixers {
            m.abort();
        }
    }
}

/// The scenario: listeners and writers on three relays, `fault`, writes going on after it
/// until every relay's writers had 30 acknowledged, then every view must converge.
async fn outage(fault: Fault, tag: &str) {
    let Some((server, direct)) = own_server(tag) else {
        return;
    };
    let port: u16 = direct
        .rsplit_once(':')
        .unwrap()
        .1
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let proxy = Proxy::start(port).await;
    let url = format!("postgres://postgres@127.0.0.1:{}/{tag}", proxy.port);
    let relays: Vec<Relay> = (0..RELAYS)
        .map(|_| Relay::fresh(&["--postgres", &url]))
        .collect();
    let epoch = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = Load::start(&relays, &epoch, &stop).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let health_stop = Arc::new(AtomicBool::new(false));
    let health: Vec<_> = relays
        .iter()
        .map(|r| health_watch(r.addr, health_stop.clone()))
        .collect();
    let started = Instant::now();
    tokio::task::block_in_place(|| inflict(fault, &server.0, tag, &proxy));
    let back = started.elapsed();
    epoch.store(1, Ordering::SeqCst);
    let all: Vec<usize> = (0..RELAYS).collect();
    let what = format!("the writes on every relay commit again after the {fault:?}");
    load.resumed(&all, 30, &what).await;
    load.stop(&stop).await;
    let converging = Instant::now();
    converge(&relays, &load.watches).await;
    eprintln!(
        "{tag}: {fault:?} took {back:?}; every listener converged {:?} after the writes stopped",
        converging.elapsed()
    );
    for (i, w) in load.watches.iter().enumerate() {
        let first = w.first_foreign.lock().unwrap().map(|t| t - started);
        eprintln!(
            "{tag}: listener {i} (relay {}): the first commit of another relay after the \
             fault reached it {first:?} after the fault began",
            i % RELAYS
        );
    }
    health_stop.store(true, Ordering::SeqCst);
    let mut seen = Vec::new();
    for h in health {
        seen.push(h.await.unwrap());
    }
    eprintln!("{tag}: /healthz during the outage: {seen:?}");
    if !matches!(fault, Fault::Terminate) {
        // (Terminated connections are back within milliseconds: too short to be seen.)
        assert!(
            seen.iter().all(|h| h.unavailable),
            "every relay's /healthz answered 503 during the outage: {seen:?}"
        );
    }
    assert_recovered(&relays, tag).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_converge_after_a_postgres_crash_restart() {
    outage(Fault::Restart, "faultrestart").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_converge_after_postgres_is_down_for_seconds() {
    outage(Fault::StopStart, "faultstop").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_converge_after_every_relay_connection_is_terminated() {
    outage(Fault::Terminate, "faultterminate").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_converge_after_a_crash_behind_a_link_that_swallows_resets() {
    outage(Fault::BlackHole, "faultblackhole").await;
}

/// Sends `signal` (`STOP`, `CONT`) to process `pid`.
/// A PostgreSQL server of the test's own and the URL of database `tag` on it; `None` (the
/// test skipped, saying so) when the suite does not run over PostgreSQL.
fn own_server(tag: &str) -> Option<(crate::pg::Own, String)> {
    if !crate::pg::enabled() {
        eprintln!("{tag}: skipped, the store is not PostgreSQL (HEARTH_TEST_STORE=postgres)");
        return None;
    }
    let server = crate::pg::Own::start(tag);
    let url = server.0.url(tag);
    Some((server, url))
}

fn signal(pid: u32, signal: &str) {
    run_ok(std::process::Command::new("kill").args([&format!("-{signal}"), &pid.to_string()]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_stopped_mid_commit_stalls_the_others_only_briefly() {
    let tag = "faultsigstop";
    let Some((server, url)) = own_server(tag) else {
        return;
    };
    let relays: Vec<Relay> = (0..RELAYS)
        .map(|_| Relay::fresh(&["--postgres", &url]))
        .collect();
    let epoch = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = Load::start(&relays, &epoch, &stop).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Relay 1 is stopped (SIGSTOP) until it is caught holding a head lock: other relays'
    // sessions then wait for it.
    let stopped = relays[1].pid();
    let mut caught = false;
    for _ in 0..40 {
        signal(stopped, "STOP");
        tokio::time::sleep(Duration::from_millis(300)).await;
        // Sessions waiting for a lock held by one idle in its transaction for a while
        // (no running relay is: its rounds take milliseconds).
        let waiting = server.0.sql(
            tag,
            "SELECT count(*) FROM pg_stat_activity w WHERE w.wait_event_type = 'Lock' \
             AND EXISTS (SELECT 1 FROM pg_stat_activity h \
             WHERE h.pid = ANY(pg_blocking_pids(w.pid)) AND h.state = 'idle in transaction' \
             AND now() - h.state_change > interval '200 ms')",
        );
        if waiting != "0" {
            caught = true;
            break;
        }
        signal(stopped, "CONT");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        caught,
        "relay 1 was never stopped while holding a head lock"
    );
    let started = Instant::now();
    epoch.store(1, Ordering::SeqCst);
    // The others commit again once the server ended the stopped relay's transaction.
    let deadline = started + Duration::from_secs(12);
    while [0, 2]
        .iter()
        .any(|i| load.after[*i].load(Ordering::SeqCst) < 10)
    {
        if Instant::now() > deadline {
            signal(stopped, "CONT");
            panic!("relays 0 and 2 commit again while relay 1 is stopped holding a head lock");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "{tag}: the other relays committed again {:?} after relay 1 was stopped",
        started.elapsed()
    );
    signal(stopped, "CONT");
    load.resumed(&[1], 10, "relay 1 commits again once resumed")
        .await;
    load.stop(&stop).await;
    converge(&relays, &load.watches).await;
}

/// A head that goes back behind what a relay handed on (a restore from a backup, a failover
/// to a copy that lagged) is told: an error in the log and a metric, once per database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_that_goes_back_is_told() {
    let tag = "faultheadback";
    let Some((server, url)) = own_server(tag) else {
        return;
    };
    let relay = Relay::fresh(&["--postgres", &url]);
    let c = relay.client(DB).await;
    for i in 0..5 {
        let m = Mutation::set(name(&format!("items/h{i}")), map([("n", int(i))]));
        within(c.write(vec![m])).await.unwrap();
    }
    // The store "restored" to an older state: its head two commits back.
    server.0.sql(
        tag,
        &format!("UPDATE hearth_heads SET version = version - 2 WHERE db = '{DB}'"),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, metrics) = http_get(relay.addr, "/metrics").await;
        if metrics.contains("hearth_store_head_regressions_total 1") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no regression counted: {metrics}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(relay.log().contains("went back"), "{}", relay.log());
}

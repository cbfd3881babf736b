//! Scale-out: several relays over one PostgreSQL database. Clients on every relay write
//! random multi-document batches; every listener on every relay sees one gap-free
//! sequence of versions, each snapshot equal to the state a reference model gives at that
//! version (so no snapshot shows part of a batch); a relay killed mid-commit and the
//! client's retry through another relay apply each batch once; a crash of PostgreSQL
//! loses no acknowledged write; a relay whose notification connection is terminated
//! still delivers every change; a resume from before a truncated changelog gets a Reset, and
//! so do the listens of a relay that fell behind it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use hearth_client::ListenSnapshot;
use hearth_core::mutation::{FieldTransform, Mutation};
use hearth_core::path::DocumentName;
use hearth_core::query::model::Query;
use hearth_core::value::{Map, Value};

use crate::harness::*;

const DB: &str = "shared";

/// `n` relays over the PostgreSQL database standing for `dir`, with extra flags.
fn relays(dir: &TempDir, n: usize, extra: &[&str]) -> (String, Vec<Relay>) {
    let url = crate::pg::url_for(dir.path());
    let mut args = vec!["--postgres", url.as_str()];
    args.extend_from_slice(extra);
    let relays = (0..n).map(|_| Relay::fresh(&args)).collect();
    (url, relays)
}

fn items() -> Query {
    Query::collection(coll("items"))
}

/// The documents of a result: name → fields.
fn state(docs: &[hearth_core::document::Document]) -> BTreeMap<DocumentName, Map> {
    docs.iter()
        .map(|d| (d.name.clone(), (*d.fields).clone()))
        .collect()
}

/// A random batch of one to four distinct documents of ten, each set to name the batch.
fn random_batch(rng: &mut Rng, tag: &str) -> Vec<(DocumentName, Map)> {
    let k = 1 + rng.below(4) as usize;
    let mut picked: Vec<u64> = Vec::new();
    while picked.len() < k {
        let d = rng.below(10);
        if !picked.contains(&d) {
            picked.push(d);
        }
    }
    picked
        .into_iter()
        .enumerate()
        .map(|(j, d)| {
            let fields = map([("batch", s(tag)), ("part", int(j as i64))]);
            (name(&format!("items/d{d}")), fields)
        })
        .collect()
}

/// Collects a listener's snapshots until one at `last` or later.
async fn snapshots_until(listener: &mut hearth_client::Listener, last: u64) -> Vec<ListenSnapshot> {
    let mut out: Vec<ListenSnapshot> = Vec::new();
    while out.last().is_none_or(|s| s.version < last) {
        let snap = within_for(Duration::from_secs(30), listener.next())
            .await
            .expect("a snapshot");
        out.push(snap);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_relays_show_every_listener_one_gap_free_sequence() {
    let dir = TempDir::new("three");
    let (_, relays) = relays(&dir, 3, &[]);
    let mut rng = Rng::from_env("three_relays");
    // A listener on every relay, before any write.
    let mut listeners = Vec::new();
    for r in &relays {
        let c = r.client(DB).await;
        let mut l = within(c.listen(&items(), None)).await.unwrap();
        let first = within(l.next()).await.unwrap();
        assert_eq!(first.version, 0);
        listeners.push((c, l));
    }
    // Two writers on every relay, each sending 25 random batches, several in flight.
    let per_writer = 25;
    let mut tasks = Vec::new();
    for (i, r) in relays.iter().enumerate() {
        for w in 0..2 {
            let c = Arc::new(r.client(DB).await);
            let batches: Vec<_> = (0..per_writer)
                .map(|b| random_batch(&mut rng, &format!("r{i}w{w}b{b}")))
                .collect();
            tasks.push(tokio::spawn(async move {
                let mut acked = Vec::new();
                for chunk in batches.chunks(5) {
                    let sends = chunk.iter().map(|batch| {
                        let c = c.clone();
                        let muts = batch
                            .iter()
                            .map(|(n, f)| Mutation::set(n.clone(), f.clone()))
                            .collect();
                        async move { within(c.write(muts)).await }
                    });
                    let versions = futures_util::future::join_all(sends).await;
                    for (v, batch) in versions.into_iter().zip(chunk) {
                        acked.push((v.expect("a batch commits"), batch.clone()));
                    }
                }
                acked
            }));
        }
    }
    let mut acked: Vec<(u64, Vec<(DocumentName, Map)>)> = Vec::new();
    for t in tasks {
        acked.extend(t.await.unwrap());
    }
    acked.sort_by_key(|(v, _)| *v);
    let total = acked.len() as u64;
    let versions: Vec<u64> = acked.iter().map(|(v, _)| *v).collect();
    assert_eq!(
        versions,
        (1..=total).collect::<Vec<_>>(),
        "the batches of all relays got one gap-free sequence of versions"
    );
    // The reference: the state after each version.
    let mut model: Vec<BTreeMap<DocumentName, Map>> = vec![BTreeMap::new()];
    for (_, batch) in &acked {
        let mut next = model.last().unwrap().clone();
        for (n, f) in batch {
            next.insert(n.clone(), f.clone());
        }
        model.push(next);
    }
    for (i, (_, l)) in listeners.iter_mut().enumerate() {
        let snaps = snapshots_until(l, total).await;
        let mut previous = 0;
        for snap in &snaps {
            assert!(
                snap.version > previous,
                "relay {i}: versions go forward ({previous} then {})",
                snap.version
            );
            previous = snap.version;
            assert_eq!(
                state(&snap.documents),
                model[snap.version as usize],
                "relay {i}: the snapshot at version {} is the state at that version",
                snap.version
            );
        }
        assert_eq!(previous, total, "relay {i} reached the last version");
    }
    // Every relay counted other relays' commits reaching its fan-out, and shows its pool.
    for r in &relays {
        let (_, text) = http_get(r.addr, "/metrics").await;
        let caught_up = metric(&text, "hearth_notification_lag_seconds_count").unwrap_or(0.0);
        assert!(caught_up >= 1.0, "{}: no catch-up counted:\n{text}", r.addr);
        assert!(metric(&text, "hearth_postgres_pool_max").unwrap_or(0.0) >= 2.0);
        let (status, health) = http_get(r.addr, "/healthz").await;
        assert_eq!(status, 200, "{health}");
        assert!(health.contains("store: postgresql://"), "{health}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_on_another_relay_sees_every_acknowledged_write() {
    // A write acknowledged by one relay is in the first snapshot of a listen started
    // afterwards on another, also one joining a query already live there.
    let dir = TempDir::new("joined");
    let (_url, relays) = relays(&dir, 2, &[]);
    crate::listens_edges::joins_see_acknowledged_writes(&relays[0], &relays[1], DB).await;
}

#[tokio::test]
async fn healthz_follows_the_database() {
    let server = crate::pg::Own::start("health");
    let url = server.0.url("health");
    let relay = Relay::fresh(&["--postgres", &url]);
    let (status, _) = http_get(relay.addr, "/healthz").await;
    assert_eq!(status, 200);
    server.0.stop();
    let (status, text) = http_get(relay.addr, "/healthz").await;
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("store unavailable"), "{text}");
    server.0.start_again();
    let mut healthy = false;
    for _ in 0..100 {
        if http_get(relay.addr, "/healthz").await.0 == 200 {
            healthy = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        healthy,
        "/healthz answers 200 again once the database is back"
    );
    let c = relay.client(DB).await;
    within(c.write(vec![Mutation::set(
        name("items/back"),
        map([("n", int(1))]),
    )]))
    .await
    .expect("writes commit again");
}

/// A batch that counts itself: sets `ops/b{i}` and adds one to `ops/count`.
fn counted(i: u64) -> Vec<Mutation> {
    vec![
        Mutation::set(name(&format!("ops/b{i}")), map([("i", int(i as i64))])),
        Mutation::set_merge(
            name("ops/count"),
            map([]),
            hearth_core::mutation::SetMerge::MergeAll,
        )
        .with_transform(fp("n"), FieldTransform::Increment(Value::Integer(1))),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_retried_through_another_relay_after_a_kill_applies_once() {
    let dir = TempDir::new("kill");
    let (_, mut relays) = relays(&dir, 2, &[]);
    let id = unique("retrier");
    let c = Arc::new(relays[0].client_as(DB, &id).await);
    // Enough that their group commits take several rounds: the kill lands among them.
    let n = 2000u64;
    let ids: Vec<u64> = (0..n).map(|_| c.next_batch_id()).collect();
    let mut sends = Vec::new();
    for (i, batch_id) in ids.iter().copied().enumerate() {
        let c = c.clone();
        sends.push(tokio::spawn(async move {
            c.write_with_id(batch_id, counted(i as u64), vec![]).await
        }));
    }
    // Kill the first relay while its batches are committing.
    for _ in 0..400 {
        if sends.iter().filter(|s| s.is_finished()).count() >= 20 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    relays[0].kill9();
    let mut first: HashMap<u64, u64> = HashMap::new();
    for (i, s) in sends.into_iter().enumerate() {
        if let Ok(Ok(v)) = s.await {
            first.insert(i as u64, v);
        }
    }
    assert!(
        (first.len() as u64) < n,
        "the kill came before every batch was acknowledged ({} of {n})",
        first.len()
    );
    // The client retries every batch, under the same ids, through the other relay.
    let c2 = relays[1].client_as(DB, &id).await;
    for (i, batch_id) in ids.iter().copied().enumerate() {
        let v = within(c2.write_with_id(batch_id, counted(i as u64), vec![]))
            .await
            .expect("the retry is answered");
        if let Some(v1) = first.get(&(i as u64)) {
            assert_eq!(v, *v1, "batch {i}: a retry gets the first commit's version");
        }
    }
    let count = within(c2.get_one(&name("ops/count")))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        count.fields.get("n"),
        Some(&int(n as i64)),
        "each of the {n} batches applied exactly once ({} acknowledged before the kill)",
        first.len()
    );
    let (ok, out) = check_store(&["--postgres".into(), crate::pg::url_for(dir.path())]);
    assert!(ok, "check after the kill:\n{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_notification_connection_delays_but_never_loses_a_change() {
    let dir = TempDir::new("terminate");
    // No poll for the test's length: only the notification connection, and the re-read
    // when it comes back, can bring relay B the writes made through relay A.
    let (_, relays) = relays(&dir, 2, &["--postgres-poll-ms", "600000"]);
    let db = crate::pg::database_for(dir.path());
    let writer = relays[0].client(DB).await;
    let reader = relays[1].client(DB).await;
    let mut l = within(reader.listen(&items(), None)).await.unwrap();
    within(l.next()).await.unwrap();
    // A relay's notification connection: its last statement was its LISTEN or its heartbeat.
    let listening = format!(
        "FROM pg_stat_activity WHERE datname = '{db}' \
         AND (query LIKE 'LISTEN%' OR query LIKE '%hearth_listen_heartbeat%')"
    );
    for round in 0..5i64 {
        // Both relays listen again (each re-establishes its connection after a backoff).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while crate::pg::server().sql("postgres", &format!("SELECT count(*) {listening}")) != "2"
            && std::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let killed = crate::pg::server().sql(
            "postgres",
            &format!("SELECT count(pg_terminate_backend(pid)) {listening}"),
        );
        assert_eq!(
            killed, "2",
            "both relays' notification connections were terminated"
        );
        // Written while B is not listening: its notification is lost.
        let v = within(writer.write(vec![Mutation::set(
            name(&format!("items/r{round}")),
            map([("n", int(round))]),
        )]))
        .await
        .unwrap();
        let snaps = snapshots_until(&mut l, v).await;
        let last = snaps.last().unwrap();
        assert_eq!(last.version, v);
        assert_eq!(last.documents.len(), round as usize + 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_from_before_a_truncated_changelog_gets_a_reset() {
    let dir = TempDir::new("truncate");
    let (_, relays) = relays(&dir, 2, &[]);
    let db = crate::pg::database_for(dir.path());
    let writer = relays[0].client(DB).await;
    within(writer.write(vec![Mutation::set(name("items/a"), map([("n", int(1))]))]))
        .await
        .unwrap();
    let reader = relays[1].client(DB).await;
    let mut l = within(reader.listen(&items(), None)).await.unwrap();
    let kept = within(l.next()).await.unwrap();
    drop(l);
    for i in 0..3 {
        within(writer.write(vec![Mutation::set(
            name(&format!("items/b{i}")),
            map([("n", int(i))]),
        )]))
        .await
        .unwrap();
    }
    // Resumed before the truncation: a delta.
    let q = items();
    let mut l = within(reader.resume(&q, kept.version, kept.documents.clone()))
        .await
        .unwrap();
    let delta = within(l.next()).await.unwrap();
    assert!(!delta.reset, "every commit since is held: a delta");
    assert_eq!(delta.documents.len(), 4);
    drop(l);
    crate::pg::server().sql(&db, "DELETE FROM hearth_changelog");
    let mut l = within(reader.resume(&q, kept.version, kept.documents.clone()))
        .await
        .unwrap();
    let after = within(l.next()).await.unwrap();
    assert!(after.reset, "the changelog lost the commits since: a reset");
    assert_eq!(after.documents.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_behind_the_changelog_ends_its_listens_and_they_resume_with_a_reset() {
    let dir = TempDir::new("behind");
    let url = crate::pg::url_for(dir.path());
    let db = crate::pg::database_for(dir.path());
    let a = Relay::fresh(&["--postgres", &url]);
    // Relay B hears nothing of A's commits (no notifications, no poll) until its own.
    let b = Relay::fresh(&[
        "--postgres",
        &url,
        "--postgres-listen",
        "false",
        "--postgres-poll-ms",
        "600000",
    ]);
    let writer = a.client(DB).await;
    let reader = b.client(DB).await;
    let mut l = within(reader.listen(&items(), None)).await.unwrap();
    let first = within(l.next()).await.unwrap();
    for i in 0..3 {
        within(writer.write(vec![Mutation::set(
            name(&format!("items/a{i}")),
            map([("n", int(i))]),
        )]))
        .await
        .unwrap();
    }
    // The commits B has not handed on leave the changelog (as retention would while B
    // could not reach the store); B's next commit shows it the gap.
    crate::pg::server().sql(&db, "DELETE FROM hearth_changelog");
    let own = b.client(DB).await;
    let v = within(own.write(vec![Mutation::set(name("items/b"), map([("n", int(9))]))]))
        .await
        .unwrap();
    // B cannot tell its listeners what changed: it ends their connection...
    let ended = within_for(Duration::from_secs(10), l.next())
        .await
        .expect_err("the listen ends");
    assert!(format!("{ended}").contains("fell behind"), "{ended}");
    // ...and their resume gets the whole result at once.
    let again = b.client(DB).await;
    let mut l = within(again.resume(&items(), first.version, first.documents.clone()))
        .await
        .unwrap();
    let reset = within(l.next()).await.unwrap();
    assert!(reset.reset, "a resume across the lost changes is a reset");
    assert!(reset.version >= v);
    assert_eq!(reset.documents.len(), 4);
    // B's fan-out goes on from there: later commits of either relay reach it.
    within(writer.write(vec![Mutation::set(name("items/c"), map([("n", int(1))]))]))
        .await
        .unwrap();
    within(own.write(vec![Mutation::set(name("items/d"), map([("n", int(1))]))]))
        .await
        .unwrap();
    let snaps = snapshots_until(&mut l, v + 2).await;
    assert_eq!(snaps.last().unwrap().documents.len(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_of_postgres_loses_no_acknowledged_write() {
    let server = crate::pg::Own::start("crash");
    let url = server.0.url("crash");
    let relay = Arc::new(Relay::fresh(&["--postgres", &url]));
    let acked = Arc::new(std::sync::Mutex::new(Vec::new()));
    let failed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..4 {
        let (relay, acked, failed, stop) =
            (relay.clone(), acked.clone(), failed.clone(), stop.clone());
        writers.push(tokio::spawn(async move {
            let mut c = relay.client(DB).await;
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let path = format!("items/w{w}i{i}");
                let m = Mutation::set(name(&path), map([("i", int(i))]));
                match within(c.write(vec![m])).await {
                    Ok(_) => acked.lock().unwrap().push((path, i)),
                    // Refused while PostgreSQL is down: not acknowledged, may or may not
                    // have committed. The relay applies no later write of that connection
                    // (none may commit out of order): the writer connects again.
                    Err(_) => {
                        failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        if let Ok(fresh) =
                            tokio::time::timeout(Duration::from_secs(5), relay.client(DB)).await
                        {
                            c = fresh;
                        }
                    }
                }
                i += 1;
            }
        }));
    }
    let count = |acked: &Arc<std::sync::Mutex<Vec<(String, i64)>>>| acked.lock().unwrap().len();
    while count(&acked) < 200 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    server.0.crash_restart();
    let at_restart = count(&acked);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while count(&acked) < at_restart + 200 {
        assert!(
            std::time::Instant::now() < deadline,
            "writes resumed after the restart"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    let reader = relay.client(DB).await;
    let (docs, _) = within(reader.query(&items())).await.unwrap();
    let present: HashMap<String, Map> = docs
        .iter()
        .map(|d| (d.name.to_string(), (*d.fields).clone()))
        .collect();
    for (path, i) in &acked {
        assert_eq!(
            present.get(path).and_then(|f| f.get("i")),
            Some(&int(*i)),
            "acknowledged write `{path}` survived the crash"
        );
    }
    eprintln!(
        "{} writes acknowledged ({at_restart} before the crash), {} refused while PostgreSQL was down",
        acked.len(),
        failed.load(std::sync::atomic::Ordering::Relaxed)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_entry_over_the_key_limit_refuses_its_batch_alone() {
    let dir = TempDir::new("long-key");
    let indexes = dir.file(
        "indexes.json",
        r#"{ "fieldOverrides": [ { "collectionGroup": "notes", "fieldPath": "body", "indexes": [] } ] }"#,
    );
    let (_, relays) = relays(&dir, 1, &["--indexes", indexes.to_str().unwrap()]);
    let c = Arc::new(relays[0].client(DB).await);
    let long = "x".repeat(3000);
    // Sent together, so they may share a group commit: the long key refuses its own batch.
    let (bad, good) = tokio::join!(
        within(c.write(vec![Mutation::set(
            name("items/long"),
            map([("t", s(&long))])
        )])),
        within(c.write(vec![Mutation::set(
            name("items/short"),
            map([("t", s("ok"))])
        )])),
    );
    let err = bad.expect_err("an indexed 3,000-byte string");
    assert_eq!(
        err.code(),
        Some(hearth_core::protocol::ErrorCode::InvalidArgument),
        "{err}"
    );
    assert!(err.to_string().contains("limit of 2400"), "{err}");
    good.expect("the other batch commits");
    assert!(within(c.get_one(&name("items/long")))
        .await
        .unwrap()
        .is_none());
    // Exempt from indexing, the same value is stored.
    within(c.write(vec![Mutation::set(
        name("notes/long"),
        map([("body", s(&long))]),
    )]))
    .await
    .expect("an exempt field has no entries");
}

/// Makes a certificate authority (`ca.crt`, and `other-ca.crt` that signed nothing) and a
/// server certificate for 127.0.0.1 signed by it (`server.crt`, `server.key`) in `dir`.
fn make_certs(dir: &std::path::Path) {
    let openssl = |args: &[&str]| {
        run_ok(
            std::process::Command::new("openssl")
                .args(args)
                .current_dir(dir),
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    for ca in ["ca", "other-ca"] {
        let (key, crt) = (format!("{ca}.key"), format!("{ca}.crt"));
        let mut args = vec!["req", "-x509"];
        args.extend(ec);
        args.extend([
            "-keyout",
            &key,
            "-out",
            &crt,
            "-days",
            "2",
            "-subj",
            "/CN=hearth test CA",
        ]);
        openssl(&args);
    }
    // A key and an X.509 v3 certificate (its extension makes it one: rustls takes no
    // other) for `name`, signed by `ca`.
    let issue = |name: &str, subject: &str, ext: &str| {
        let file = |suffix: &str| format!("{name}.{suffix}");
        std::fs::write(dir.join(file("ext")), ext).unwrap();
        let (key, csr, crt, extf) = (file("key"), file("csr"), file("crt"), file("ext"));
        let mut args = vec!["req"];
        args.extend(ec);
        args.extend(["-keyout", &key, "-out", &csr, "-subj", subject]);
        openssl(&args);
        openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "2",
            "-extfile",
            &extf,
        ]);
    };
    issue("server", "/CN=127.0.0.1", "subjectAltName=IP:127.0.0.1\n");
    // A client certificate for user `postgres`.
    issue("client", "/CN=postgres", "extendedKeyUsage=clientAuth\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_authenticates_to_postgres_with_a_client_certificate() {
    let certs = TempDir::new("client-certs");
    make_certs(certs.path());
    let server = crate::pg::Own::start_with_client_certs("clientcert", certs.path());
    let url = format!("{}?sslmode=require", server.0.url("clientcert"));
    let file = |f: &str| certs.path().join(f).display().to_string();
    let (ca, cert, key) = (file("ca.crt"), file("client.crt"), file("client.key"));
    let relay = Relay::fresh(&[
        "--postgres",
        &url,
        "--postgres-ca",
        &ca,
        "--postgres-cert",
        &cert,
        "--postgres-key",
        &key,
    ]);
    let c = relay.client(DB).await;
    within(c.write(vec![Mutation::set(
        name("items/cert"),
        map([("n", int(1))]),
    )]))
    .await
    .unwrap();
    let by_cert = server.0.sql(
        "postgres",
        "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
         WHERE a.datname = 'clientcert' AND s.client_dn LIKE '%CN=postgres%'",
    );
    assert_ne!(
        by_cert, "0",
        "the relay's connections present its certificate"
    );
    // Without the certificate the server refuses the relay; `check` with it succeeds.
    let (ok, out) = check_store(&[
        "--postgres".into(),
        url.clone(),
        "--postgres-ca".into(),
        ca.clone(),
    ]);
    assert!(!ok && out.contains("certificate"), "{out}");
    let (ok, out) = check_store(&[
        "--postgres".into(),
        url,
        "--postgres-ca".into(),
        ca,
        "--postgres-cert".into(),
        cert,
        "--postgres-key".into(),
        key,
    ]);
    assert!(ok, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_postgres_is_verified_against_the_given_authority() {
    let certs = TempDir::new("certs");
    make_certs(certs.path());
    let server = crate::pg::Own::start_with_tls("tls", certs.path());
    let url = format!("{}?sslmode=require", server.0.url("tls"));
    let ca = certs.path().join("ca.crt");
    let relay = Relay::fresh(&["--postgres", &url, "--postgres-ca", ca.to_str().unwrap()]);
    let c = relay.client(DB).await;
    within(c.write(vec![Mutation::set(name("items/tls"), map([("n", int(1))]))]))
        .await
        .unwrap();
    let encrypted = server.0.sql(
        "postgres",
        "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
         WHERE a.datname = 'tls' AND s.ssl",
    );
    assert_ne!(encrypted, "0", "the relay's connections use TLS");
    let plain = server.0.sql(
        "postgres",
        "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
         WHERE a.datname = 'tls' AND NOT s.ssl",
    );
    assert_eq!(plain, "0", "none of them without it");
    // A certificate another authority signed is refused; so is sslmode=require without
    // an authority to verify the server with.
    let other = certs.path().join("other-ca.crt");
    let (ok, out) = check_store(&[
        "--postgres".into(),
        url.clone(),
        "--postgres-ca".into(),
        other.display().to_string(),
    ]);
    assert!(!ok && out.contains("certificate"), "{out}");
    let (ok, out) = check_store(&["--postgres".into(), url.clone()]);
    assert!(!ok && out.contains("--postgres-ca"), "{out}");
    let (ok, out) = check_store(&[
        "--postgres".into(),
        url,
        "--postgres-ca".into(),
        ca.display().to_string(),
    ]);
    assert!(ok, "{out}");
}

//! The changelog across restarts and clock steps: a resume gets a delta only when the
//! changelog holds every commit since the client's version, and a Reset otherwise, however
//! the relay's clock moved between runs; commit times never go back across a restart; and
//! a store written before batch digests and stored commit times still loads.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hearth_client::ListenSnapshot;
use hearth_core::document::Document;
use hearth_core::mutation::{FieldTransform, Mutation, SetMerge};
use hearth_core::query::model::{Operator as Op, Query};
use hearth_core::value::{Timestamp, Value};
use hearth_relay::store::{
    db_prefix, encode_change_names, shard_file_name, Store, Tab, BATCHES, META,
};
use redb::ReadableTable;

use crate::harness::*;
use crate::listens::{items, names};

const DB: &str = "clock";

fn query() -> Query {
    items().where_("a", Op::LessThanOrEqual, int(2))
}

fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap()
}

/// Sets every changelog record's commit time (µs) of the stopped relay to `micros`, as
/// a run with the clock at that time would have written them.
fn set_commit_times(dir: &Path, micros: i64) {
    edit_changelog(dir, |_, record| {
        record[..8].copy_from_slice(&micros.to_be_bytes());
        true
    });
}

/// The redb file of the stopped relay's store that holds database [`DB`].
fn shard_file(dir: &Path) -> std::path::PathBuf {
    let shard = Store::open(dir).unwrap().shard_index(DB);
    dir.join(shard_file_name(shard))
}

/// The store of the stopped relay of data directory `dir`: its redb files, or with
/// `HEARTH_TEST_STORE=postgres` the PostgreSQL database standing for it.
fn open_store(dir: &Path) -> Store {
    match crate::pg::enabled() {
        true => Store::postgres(&crate::pg::url_for(dir), 2, &Default::default()).unwrap(),
        false => Store::open(dir).unwrap(),
    }
}

/// Rewrites the stopped relay's changelog records of database [`DB`]: `edit(version,
/// record)` changes a record in place, or returns false to delete it.
fn edit_changelog(dir: &Path, mut edit: impl FnMut(u64, &mut Vec<u8>) -> bool) {
    let store = open_store(dir);
    let prefix = db_prefix(DB);
    let mut end = prefix.clone();
    end.push(0xff);
    store
        .write(store.shard_index(DB), true, &mut |w| {
            let rows = w.range(Tab::Changelog, &prefix, &end, false, usize::MAX)?;
            assert!(!rows.is_empty(), "the database has changelog records");
            for (k, mut v) in rows {
                let version = u64::from_be_bytes(k[prefix.len()..].try_into().unwrap());
                if edit(version, &mut v) {
                    w.put(Tab::Changelog, &k, &v)?;
                } else {
                    w.delete(Tab::Changelog, &k)?;
                }
            }
            Ok(())
        })
        .unwrap();
}

async fn stop(mut relay: Relay) {
    relay.sigterm();
    assert!(relay.wait_exit(Duration::from_secs(20)).success());
}

/// Resumes [`query`] from `from` on a fresh connection: the first snapshot, and the query's
/// result now.
async fn resume(relay: &Relay, from: &ListenSnapshot) -> (ListenSnapshot, Vec<Document>) {
    let c = relay.client(DB).await;
    let (now, _) = within(c.query(&query())).await.unwrap();
    let mut l = within(c.resume(&query(), from.version, from.documents.clone()))
        .await
        .unwrap();
    (within(l.next()).await.unwrap(), now)
}

#[tokio::test]
async fn resume_after_restarts_and_a_clock_step_is_complete() {
    let dir = TempDir::new("clock-step");
    // First run: the data, and two results a client keeps (before and after one commit).
    let relay = Relay::start(dir.path(), &[]);
    let c = relay.client(DB).await;
    let batch = (0..10)
        .map(|i| Mutation::set(name(&format!("items/i{i}")), map([("a", int(i % 4))])))
        .collect();
    within(c.write(batch)).await.unwrap();
    let mut l = within(c.listen(&query(), None)).await.unwrap();
    let first = within(l.next()).await.unwrap();
    within(c.write(vec![Mutation::set(name("items/x1"), map([("a", int(0))]))]))
        .await
        .unwrap();
    let second = within(l.next()).await.unwrap();
    drop(l);
    within(c.close()).await;
    stop(relay).await;
    // The machine's clock was a day ahead during that run, and is right from now on.
    let ahead = now_micros() + 86_400_000_000;
    set_commit_times(dir.path(), ahead);

    // Second run: commits at the right time, which is before the first run's.
    let relay = Relay::start(dir.path(), &[]);
    let c = relay.client(DB).await;
    within(c.write(vec![
        Mutation::delete(name("items/i0")),
        Mutation::update(name("items/i1"), vec![(fp("a"), Some(int(9)))]),
        Mutation::set(name("items/x2"), map([("a", int(1))])),
    ]))
    .await
    .unwrap();
    within(c.close()).await;
    stop(relay).await;

    // Third run, pruning everything older than now (its first round runs at start). A
    // commit the changelog no longer holds must not be skipped by a resume.
    let relay = Relay::start(dir.path(), &["--changelog-retention-secs", "0"]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (from, label) in [(&first, "first"), (&second, "second")] {
        let (snap, now) = resume(&relay, from).await;
        assert_eq!(
            names(&snap.documents),
            names(&now),
            "resume from the {label} result (version {}): reset {}, changes {:?}",
            from.version,
            snap.reset,
            snap.changed
        );
        assert_eq!(snap.documents, now, "{label}");
    }
    stop(relay).await;

    // A changelog with a hole (what a relay pruning by commit time could leave): a resume
    // from before the hole gets a Reset; one from after it, a delta.
    edit_changelog(dir.path(), |version, _| version != second.version);
    let relay = Relay::start(dir.path(), &[]);
    let (snap, now) = resume(&relay, &first).await;
    assert!(
        snap.reset,
        "the changelog lacks version {}, after the resume version {}: expected a reset, got the changes {:?}",
        second.version, first.version, snap.changed
    );
    assert_eq!(snap.documents, now);
    let (snap, now) = resume(&relay, &second).await;
    assert!(!snap.reset, "every commit after {} is held", second.version);
    assert_eq!(snap.documents, now);
}

/// A write stamped with the commit time.
fn stamped(path: &str) -> Mutation {
    Mutation::set_merge(name(path), map([]), SetMerge::MergeAll)
        .with_transform(fp("t"), FieldTransform::ServerTimestamp)
}

async fn stamp_of(c: &hearth_client::Client, path: &str) -> Timestamp {
    let doc = within(c.get_one(&name(path))).await.unwrap().unwrap();
    match doc.field(&fp("t")).map(|v| v.into_owned()) {
        Some(Value::Timestamp(t)) => t,
        other => panic!("no commit time in `{path}`: {other:?}"),
    }
}

#[tokio::test]
async fn old_records_load_and_commit_times_go_on_from_the_stored_one() {
    if crate::pg::enabled() {
        // Records of the redb files' older formats: a PostgreSQL store never had them.
        return;
    }
    let dir = TempDir::new("old-records");
    let relay = Relay::start(dir.path(), &[]);
    let id = unique("old");
    let c = relay.client_as(DB, &id).await;
    let batch = c.next_batch_id();
    let v1 = within(c.write_with_id(batch, vec![stamped("t/a")], vec![]))
        .await
        .unwrap();
    within(c.close()).await;
    stop(relay).await;

    // The records as a relay before batch digests and stored commit times wrote them: a
    // batch record of version and time, a version record of the version alone. And the last
    // commit an hour ahead of the clock (the clock has been put back since).
    let ahead = now_micros() + 3_600_000_000;
    set_commit_times(dir.path(), ahead);
    let db = redb::Database::create(shard_file(dir.path())).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut batches = txn.open_table(BATCHES).unwrap();
        let rows: Vec<(Vec<u8>, Vec<u8>)> = batches
            .iter()
            .unwrap()
            .map(|r| r.unwrap())
            .map(|(k, v)| (k.value().to_vec(), v.value().to_vec()))
            .collect();
        assert_eq!(rows.len(), 1);
        for (k, v) in rows {
            batches.insert(k.as_slice(), &v[..16]).unwrap();
        }
        let mut meta = txn.open_table(META).unwrap();
        let key = format!("version/{DB}");
        let v = meta.get(key.as_str()).unwrap().unwrap().value().to_vec();
        meta.insert(key.as_str(), &v[..8]).unwrap();
    }
    txn.commit().unwrap();
    drop(db);

    let relay = Relay::start(dir.path(), &[]);
    let c = relay.client_as(DB, &id).await;
    // Without a digest the relay cannot tell a retry from another batch: a retry, as before.
    let again = within(c.write_with_id(batch, vec![stamped("t/other")], vec![])).await;
    assert_eq!(again.unwrap(), v1);
    assert_eq!(within(c.get_one(&name("t/other"))).await.unwrap(), None);
    let v2 = within(c.write(vec![stamped("t/b")])).await.unwrap();
    assert_eq!(v2, v1 + 1, "versions go on from the stored one");
    let (a, b) = (stamp_of(&c, "t/a").await, stamp_of(&c, "t/b").await);
    let stored = Timestamp::from_micros(ahead).unwrap();
    assert!(
        b > stored && b > a,
        "commit times never go back across a restart: {b:?} after {stored:?}"
    );
}

/// `hearth-relay check` finds a store whose history has holes: a commit without its
/// changelog record (a resume across it would be answered from an incomplete log) and a
/// record that does not name a document changed at its version (a resume would miss it).
#[tokio::test]
async fn check_finds_a_history_with_holes() {
    let dir = TempDir::new("history-holes");
    let relay = Relay::start(dir.path(), &[]);
    let c = relay.client(DB).await;
    let mut versions = Vec::new();
    for id in ["a", "b", "c"] {
        let write = c.write(vec![Mutation::set(name(&format!("t/{id}")), map([]))]);
        versions.push(within(write).await.unwrap());
    }
    within(c.close()).await;
    stop(relay).await;
    let (clean, said) = check_data(dir.path());
    assert!(clean, "the untouched store: {said}");

    let (b, c) = (versions[1], versions[2]);
    edit_changelog(dir.path(), |version, record| {
        if version == c {
            let micros = i64::from_be_bytes(record[..8].try_into().unwrap());
            *record = encode_change_names(micros, &[]);
        }
        version != b
    });
    let (clean, said) = check_data(dir.path());
    assert!(!clean, "the store with holes passed: {said}");
    assert!(
        said.contains(&format!("changelog versions missing: {b}..={b}")),
        "{said}"
    );
    assert!(
        said.contains(&format!("does not name: `t/c` at {c}")),
        "{said}"
    );
}

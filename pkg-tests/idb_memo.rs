//! The store's memory of documents (`IdbStore::keep_in_memory`), checked against IndexedDB:
//! a second connection to the same database, which keeps nothing in memory, reads what is
//! committed; the remembering one must read the same at every step.

use hearth::client::error::ClientError;
use hearth::client::idb_store::{IdbStore, Key, Store, WriteInFlight, WriteOp};
use hearth::client::js::join;
use hearth_core::kv::{KvRead, Table};
use wasm_bindgen_test::{console_log, wasm_bindgen_test};

use crate::suite::{doc, fresh, Rng};

/// A batch IndexedDB refuses once its requests are made (a reversed range: `DataError`).
fn refused() -> WriteOp {
    WriteOp::DeleteRange {
        store: Store::Remote,
        start: b"z".to_vec(),
        end: b"a".to_vec(),
    }
}

/// A generator seeded from the clock, the seed printed under `test`'s name for a replay.
fn seeded(test: &str) -> (u64, Rng) {
    let seed = js_sys::Date::now() as u64;
    console_log!("{test}: seed {seed:#x}");
    (seed, Rng(seed | 1))
}

/// What a fresh read of `key` gives.
async fn read(s: &IdbStore, key: &[u8]) -> Option<Vec<u8>> {
    let r = s.read().await.unwrap();
    r.get(Table::Documents, key).await.unwrap()
}

/// A remembered document is read without a request; a batch that fails leaves the last
/// committed bytes, never its own.
#[wasm_bindgen_test]
async fn a_failed_write_is_never_read_from_memory() {
    let s = fresh("t-memo").await;
    s.keep_in_memory();
    s.write(vec![doc(b"k", b"v1", &[])]).await.unwrap();
    let done = crate::suite::count_store_requests();
    assert_eq!(read(&s, b"k").await.as_deref(), Some(&b"v1"[..]));
    assert_eq!(
        crate::suite::counted(done),
        (0.0, 0.0),
        "a written document is read from memory"
    );
    let err = s
        .write(vec![doc(b"k", b"v2", &[]), refused()])
        .await
        .unwrap_err();
    assert_eq!(err.code().as_str(), "invalid-argument", "{err}");
    assert_eq!(read(&s, b"k").await.as_deref(), Some(&b"v1"[..]));
    // A write whose requests are made but not yet done: reads go to IndexedDB, which
    // orders them after it.
    let w = s
        .begin_write(&[Store::Documents], [Ok(doc(b"k", b"v3", &[]))])
        .await
        .unwrap();
    assert_eq!(read(&s, b"k").await.as_deref(), Some(&b"v3"[..]));
    w.done().await.unwrap();
    assert_eq!(read(&s, b"k").await.as_deref(), Some(&b"v3"[..]));
    s.close();
    IdbStore::delete("t-memo").await.unwrap();
}

/// A fresh database `name` opened twice: a connection that keeps documents in memory, and a
/// plain one that reads what IndexedDB holds.
async fn remembering_and_plain(name: &str) -> (IdbStore, IdbStore) {
    let s = fresh(name).await;
    s.keep_in_memory();
    (s, IdbStore::open(name).await.unwrap())
}

/// A write begun on a store, or why it could not begin.
type Begun = Result<WriteInFlight, ClientError>;

/// Begins, on the documents and remote stores, a batch that puts `value` at `key` and, at
/// random, also makes a request IndexedDB refuses, deletes one of `keys`, or deletes the
/// range from the first of `keys` to the fourth.
async fn begin_random_write(
    s: &IdbStore,
    rng: &mut Rng,
    key: &[u8],
    value: &[u8],
    keys: &[Vec<u8>],
) -> Begun {
    let mut ops = vec![Ok(doc(key, value, &[]))];
    match rng.below(8) {
        0 => ops.push(Ok(refused())),
        1 => ops.push(Ok(WriteOp::Delete {
            store: Store::Documents,
            key: Key::Bytes(keys[rng.below(keys.len() as u64) as usize].clone()),
        })),
        2 => ops.push(Ok(WriteOp::DeleteRange {
            store: Store::Documents,
            start: keys[0].clone(),
            end: keys[3].clone(),
        })),
        _ => {}
    }
    s.begin_write(&[Store::Documents, Store::Remote], ops).await
}

/// Finishes one write in flight, picked at random (whatever its outcome).
async fn finish_one(rng: &mut Rng, in_flight: &mut Vec<Begun>) {
    let w = in_flight.remove(rng.below(in_flight.len() as u64) as usize);
    if let Ok(w) = w {
        let _ = w.done().await;
    }
}

/// Finishes every write in flight, in the order they began.
async fn finish_all(in_flight: Vec<Begun>) {
    for w in in_flight.into_iter().flatten() {
        let _ = w.done().await;
    }
}

/// Writes begun and finished in random order (some of them refused), reads in between, and
/// range deletions: the remembering connection always reads what a plain connection reads.
#[wasm_bindgen_test]
async fn memory_agrees_with_indexeddb_under_overlapping_writes() {
    let (seed, mut rng) = seeded("memory_agrees_with_indexeddb_under_overlapping_writes");
    let (s, plain) = remembering_and_plain("t-memo-model").await;
    let key = |i: u64| format!("d{i}").into_bytes();
    let keys: Vec<Vec<u8>> = (0..6).map(key).collect();
    let mut in_flight = Vec::new();
    for step in 0..300u32 {
        match rng.below(10) {
            0..=3 => {
                let k = key(rng.below(6));
                let value = format!("v{step}").into_bytes();
                in_flight.push(begin_random_write(&s, &mut rng, &k, &value, &keys).await);
            }
            4..=5 if !in_flight.is_empty() => finish_one(&mut rng, &mut in_flight).await,
            _ => {
                let k = key(rng.below(6));
                let (got, want) = (read(&s, &k).await, read(&plain, &k).await);
                assert_eq!(got, want, "seed {seed:#x}, step {step}, key {k:?}");
            }
        }
    }
    finish_all(in_flight).await;
    for i in 0..6 {
        let (got, want) = (read(&s, &key(i)).await, read(&plain, &key(i)).await);
        assert_eq!(got, want, "seed {seed:#x}, at the end, key {i}");
    }
    plain.close();
    s.close();
    IdbStore::delete("t-memo-model").await.unwrap();
}

/// A document named `c/d{i}` with one field set to `step`: its key and encoding.
fn encoded(i: u64, step: u32) -> (Vec<u8>, Vec<u8>) {
    use hearth_core::document::Document;
    use hearth_core::path::DocumentName;
    use hearth_core::value::{Map, Value};
    let name = DocumentName::parse(&format!("c/d{i}")).unwrap();
    let fields = Map::from([("step".to_string(), Value::Integer(step.into()))]);
    let doc = Document {
        name: name.clone(),
        fields: std::sync::Arc::new(fields),
        create_version: 0,
        update_version: u64::from(step),
    };
    (
        hearth_core::index::keys::document_key(&name),
        hearth_core::encoding::document::encode_document(&doc).unwrap(),
    )
}

/// The decoded documents a fresh read gives for `keys` (`KvRead::get_documents`), printed.
async fn read_documents(s: &IdbStore, keys: &[Vec<u8>]) -> Vec<String> {
    let r = s.read().await.unwrap();
    let docs = r.get_documents(keys).await.unwrap();
    docs.iter().map(|d| format!("{d:?}")).collect()
}

/// Documents decoded once and kept (`get_documents` of the remembering connection), under
/// writes begun and finished in random order, refused batches and range deletions: always
/// what a plain connection decodes from IndexedDB, and read again without a request.
#[wasm_bindgen_test]
async fn decoded_documents_agree_with_indexeddb() {
    let (seed, mut rng) = seeded("decoded_documents_agree_with_indexeddb");
    let (s, plain) = remembering_and_plain("t-memo-decoded").await;
    let keys: Vec<Vec<u8>> = (0..6).map(|i| encoded(i, 0).0).collect();
    let mut in_flight = Vec::new();
    for step in 1..300u32 {
        match rng.below(10) {
            0..=3 => {
                let (k, value) = encoded(rng.below(6), step);
                in_flight.push(begin_random_write(&s, &mut rng, &k, &value, &keys).await);
            }
            4..=5 if !in_flight.is_empty() => finish_one(&mut rng, &mut in_flight).await,
            _ => {
                let (got, want) = (
                    read_documents(&s, &keys).await,
                    read_documents(&plain, &keys).await,
                );
                assert_eq!(got, want, "seed {seed:#x}, step {step}");
            }
        }
    }
    finish_all(in_flight).await;
    let want = read_documents(&plain, &keys).await;
    assert_eq!(
        read_documents(&s, &keys).await,
        want,
        "seed {seed:#x}, at the end"
    );
    let done = crate::suite::count_store_requests();
    assert_eq!(
        read_documents(&s, &keys).await,
        want,
        "seed {seed:#x}, read again"
    );
    let held = want.iter().filter(|d| *d != "None").count();
    if held == keys.len() {
        assert_eq!(
            crate::suite::counted(done),
            (0.0, 0.0),
            "decoded documents are read from memory"
        );
    }
    plain.close();
    s.close();
    IdbStore::delete("t-memo-decoded").await.unwrap();
}

/// Scans of the `entries` index (documents with several entries in one range among them)
/// agree with a plain connection's, in both directions and with limits, whether the memo
/// holds every document found (written since it was turned on), some, or none.
#[wasm_bindgen_test]
async fn index_scans_from_memory_agree_with_indexeddb() {
    use hearth_core::kv::KeyRange;
    let (seed, mut rng) = seeded("index_scans_from_memory_agree_with_indexeddb");
    let s = fresh("t-memo-scan").await;
    // Index keys end with their document's key, so each belongs to one document; a few
    // prefixes make ranges that hold several entries of one document.
    let random_doc = |rng: &mut Rng, i: u64| random_indexed_doc(rng, i, b"abc", 4);
    let before: Vec<WriteOp> = (0..20).map(|i| random_doc(&mut rng, i)).collect();
    s.write(before).await.unwrap();
    s.keep_in_memory();
    let plain = IdbStore::open("t-memo-scan").await.unwrap();
    let mut scans = 0;
    for round in 0..250u32 {
        if rng.below(3) == 0 {
            let batch: Vec<WriteOp> = (0..1 + rng.below(4))
                .map(|_| match rng.below(6) {
                    0 => WriteOp::Delete {
                        store: Store::Documents,
                        key: hearth::client::idb_store::Key::Bytes(
                            format!("d{:02}", rng.below(40)).into_bytes(),
                        ),
                    },
                    _ => {
                        let i = rng.below(40);
                        random_doc(&mut rng, i)
                    }
                })
                .collect();
            s.write(batch).await.unwrap();
            continue;
        }
        let prefix = |rng: &mut Rng| {
            let mut p = vec![b"abc"[rng.below(3) as usize]];
            if rng.below(2) == 0 {
                p.push(rng.below(4) as u8);
            }
            p
        };
        let range = match rng.below(3) {
            0 => KeyRange::prefix(&prefix(&mut rng)),
            1 => KeyRange {
                start: prefix(&mut rng),
                end: None,
            },
            _ => KeyRange {
                start: prefix(&mut rng),
                end: Some(prefix(&mut rng)),
            },
        };
        let reverse = rng.below(2) == 0;
        let limit = match rng.below(3) {
            0 => usize::MAX,
            _ => 1 + rng.below(10) as usize,
        };
        let (a, b) = (s.read().await.unwrap(), plain.read().await.unwrap());
        let got = a.scan(Table::Index, &range, reverse, limit).await.unwrap();
        let want = b.scan(Table::Index, &range, reverse, limit).await.unwrap();
        let at =
            format!("seed {seed:#x}, round {round}, {range:?} reverse={reverse} limit={limit}");
        assert_eq!(got, want, "{at}");
        let docs: Vec<Vec<u8>> = (0..40).map(|i| format!("d{i:02}").into_bytes()).collect();
        let got = a.get_many(Table::Documents, &docs).await.unwrap();
        let want = b.get_many(Table::Documents, &docs).await.unwrap();
        assert_eq!(got, want, "documents after the scan, {at}");
        scans += 1;
    }
    console_log!("index_scans_from_memory_agree_with_indexeddb: {scans} scans agreed");
    plain.close();
    s.close();
    IdbStore::delete("t-memo-scan").await.unwrap();
}

/// A random document `d{i:02}`: up to three index keys, each a byte of `firsts`, a byte
/// below `seconds`, then the document's key.
fn random_indexed_doc(rng: &mut Rng, i: u64, firsts: &[u8], seconds: u64) -> WriteOp {
    let key = format!("d{i:02}").into_bytes();
    let index_keys = (0..rng.below(4))
        .map(|_| {
            let first = firsts[rng.below(firsts.len() as u64) as usize];
            let mut k = vec![first, rng.below(seconds) as u8];
            k.extend_from_slice(&key);
            k
        })
        .collect();
    let value = format!("v{}", rng.next() % 1000).into_bytes();
    WriteOp::PutDocument {
        key,
        value,
        index_keys,
        used: 0.0,
    }
}

/// A document of the kept-scans test.
fn scanned_doc(rng: &mut Rng, i: u64) -> WriteOp {
    random_indexed_doc(rng, i, b"ab", 3)
}

/// A random batch of the kept-scans test: a document put, and at random a request
/// IndexedDB refuses, a document deleted, or a range of them deleted.
fn random_ops(rng: &mut Rng) -> Vec<Result<WriteOp, ClientError>> {
    let key = |i: u64| format!("d{i:02}").into_bytes();
    let i = rng.below(16);
    let mut ops = vec![Ok(scanned_doc(rng, i))];
    match rng.below(16) {
        0 => ops.push(Ok(refused())),
        1 => ops.push(Ok(WriteOp::Delete {
            store: Store::Documents,
            key: Key::Bytes(key(rng.below(16))),
        })),
        2 => ops.push(Ok(WriteOp::DeleteRange {
            store: Store::Documents,
            start: key(0),
            end: key(3),
        })),
        _ => {}
    }
    ops
}

/// One of a few ranges over the kept-scans test's index keys, one of them often, so that
/// scans repeat.
fn scanned_range(rng: &mut Rng) -> hearth_core::kv::KeyRange {
    use hearth_core::kv::KeyRange;
    let first = b"ab"[rng.below(2) as usize];
    match rng.below(6) {
        0..=2 => KeyRange::prefix(b"a"),
        3 => KeyRange::prefix(&[first, rng.below(3) as u8]),
        4 => KeyRange {
            start: vec![first, 1],
            end: None,
        },
        _ => KeyRange {
            start: vec![b'a', 1],
            end: Some(vec![b'b', 2]),
        },
    }
}

/// Index scans kept in memory (asked again, they make no request) agree with a plain
/// connection's under writes begun and finished in random order: some refused, some
/// deleting documents or a range, some of documents written before the memo was on (their
/// old index keys unknown to it).
#[wasm_bindgen_test]
async fn kept_scans_agree_with_indexeddb_under_overlapping_writes() {
    let (seed, mut rng) = seeded("kept_scans_agree_with_indexeddb_under_overlapping_writes");
    let s = fresh("t-memo-kept").await;
    let before: Vec<WriteOp> = (0..12).map(|i| scanned_doc(&mut rng, i)).collect();
    s.write(before).await.unwrap();
    s.keep_in_memory();
    let plain = IdbStore::open("t-memo-kept").await.unwrap();
    let mut in_flight = Vec::new();
    for step in 0..400u32 {
        match rng.below(10) {
            0..=2 => {
                let ops = random_ops(&mut rng);
                let w = s.begin_write(&[Store::Documents, Store::Remote], ops).await;
                // Half of them are waited for at once: kept scans then live long enough
                // to be asked again.
                match w {
                    Ok(w) if rng.below(2) == 0 => drop(w.done().await),
                    w => in_flight.push(w),
                }
            }
            3..=4 if !in_flight.is_empty() => finish_one(&mut rng, &mut in_flight).await,
            _ => {
                let range = scanned_range(&mut rng);
                let reverse = rng.below(4) == 0;
                let limit = [1, 3, 8, usize::MAX][rng.below(4) as usize];
                let (a, b) = (s.read().await.unwrap(), plain.read().await.unwrap());
                let scans = join(
                    a.scan(Table::Index, &range, reverse, limit),
                    b.scan(Table::Index, &range, reverse, limit),
                );
                if rng.below(3) == 0 {
                    // A write begins while the scans' requests are out. What they answer is
                    // not compared (a read whose transaction ended moves to a new one, which
                    // sees the write), but no read made after the write began may be
                    // given it.
                    let ops = random_ops(&mut rng);
                    let write = s.begin_write(&[Store::Documents, Store::Remote], ops);
                    let ((got, want), w) = join(scans, write).await;
                    got.unwrap();
                    want.unwrap();
                    in_flight.push(w);
                    continue;
                }
                let (got, want) = scans.await;
                let (got, want) = (got.unwrap(), want.unwrap());
                let at = format!("seed {seed:#x}, step {step}, {range:?} {reverse} {limit}");
                assert_eq!(got, want, "{at}");
                let names: Vec<Vec<u8>> = got.iter().map(|(_, d)| d.clone()).collect();
                let got = a.get_many(Table::Documents, &names).await.unwrap();
                let want = b.get_many(Table::Documents, &names).await.unwrap();
                assert_eq!(got, want, "documents of the scan, {at}");
            }
        }
    }
    finish_all(in_flight).await;
    plain.close();
    s.close();
    IdbStore::delete("t-memo-kept").await.unwrap();
}

/// Whether the remembering connection's scan of `range` (the first one kept, a repeat then
/// answered from memory) equals a plain connection's.
async fn scans_agree(s: &IdbStore, plain: &IdbStore, range: &hearth_core::kv::KeyRange, at: &str) {
    let want = plain.read().await.unwrap();
    let want = want
        .scan(Table::Index, range, false, usize::MAX)
        .await
        .unwrap();
    for pass in ["first", "again"] {
        let got = s.read().await.unwrap();
        let got = got
            .scan(Table::Index, range, false, usize::MAX)
            .await
            .unwrap();
        assert_eq!(got, want, "{at}, {pass}");
    }
}

/// Kept scans follow the documents the memo holds: one moving into a kept range, one moving
/// out, and one moving out and back in with both writes in flight.
#[wasm_bindgen_test]
async fn kept_scans_follow_documents_moving_between_ranges() {
    let (s, plain) = remembering_and_plain("t-memo-moves").await;
    let a = hearth_core::kv::KeyRange::prefix(b"a");
    s.write(vec![
        doc(b"d1", b"1", &[b"ad1"]),
        doc(b"d2", b"1", &[b"bd2"]),
    ])
    .await
    .unwrap();
    scans_agree(&s, &plain, &a, "at first").await;
    s.write(vec![doc(b"d2", b"2", &[b"ad2"])]).await.unwrap();
    scans_agree(&s, &plain, &a, "d2 moved into the range").await;
    s.write(vec![doc(b"d1", b"2", &[b"bd1"])]).await.unwrap();
    scans_agree(&s, &plain, &a, "d1 moved out of it").await;
    // A write of d2 in flight while the range is kept again, then another write of it.
    let scope = [Store::Documents, Store::Remote];
    let first = s.begin_write(&scope, vec![Ok(doc(b"d2", b"3", &[b"bd2"]))]);
    let first = first.await.unwrap();
    scans_agree(
        &s,
        &plain,
        &a,
        "while a write of d2 out of the range is in flight",
    )
    .await;
    let second = s.begin_write(&scope, vec![Ok(doc(b"d2", b"4", &[b"ad2", b"cd2"]))]);
    let second = second.await.unwrap();
    scans_agree(&s, &plain, &a, "while d2 moves back in").await;
    first.done().await.unwrap();
    second.done().await.unwrap();
    scans_agree(&s, &plain, &a, "both writes done").await;
    plain.close();
    s.close();
    IdbStore::delete("t-memo-moves").await.unwrap();
}
